//! `ferrite bench alloc`: persistent allocators side by side [P2 §2.2].
//!
//! # Throughput
//!
//! For each request size (64 B, 256 B, 1 KiB, 4 KiB, and a mix of 16 B –
//! 4 KiB) and each thread count (1, 2) one interleaved group runs. Every
//! thread keeps a ring of 1024 live allocations; one **operation** frees the
//! oldest allocation of its ring and allocates a new one in its place — one
//! free plus one allocation, so `fences_per_op` counts both. Variants:
//!
//! - `ferrite`: the Ferrite heap, each allocation published atomically
//!   with its link (the ring slot, a word in the pool) and each free with
//!   its unlink: reserve + publish + free, crash-consistent end to end;
//! - `ferrite-replace`: one publish per operation: the new block, the free
//!   of the old one and the slot's new value, atomically (an engine's
//!   copy-on-write update; PMDK needs a transaction for this);
//! - `ferrite-batch8`: the same as `ferrite`, eight frees (with unlinks) and then eight
//!   allocations (with links) per publish — what a transaction that
//!   allocates several blocks pays;
//! - `ferrite-nolink`: allocation and free published without a link (one
//!   word, one fence each): the same contract as `pmemobj_alloc` into a
//!   volatile `PMEMoid`;
//! - `nstore-lock`: the single-lock, per-block-header allocator, with links;
//! - `pmdk` (feature `pmdk`): `pmemobj_alloc` + `pmemobj_free` (atomic API,
//!   `PMEMoid` in DRAM) on a pool in `/dev/shm` with `PMEM_IS_PMEM_FORCE=1`
//!   set by the CLI, so it takes the same flush+fence path as Ferrite's
//!   `adr`. Its counters are not observed (`n/a`): PMDK flushes outside
//!   Ferrite's persister.
//!
//! Every Ferrite and lock row's `ratio_vs_baseline` is against `pmdk` of
//! the same size and threads (against `nstore-lock` without the feature).
//! Two-thread rows carry `extra.speedup_vs_1_thread`, their throughput over
//! the same variant's one-thread row. Ferrite heaps live in in-memory `adr`
//! pools: the same DRAM PMDK's `/dev/shm` pool lives in.
//!
//! # Recovery
//!
//! Heaps of 64 MiB and 256 MiB (full: up to 4 GiB; the lock heap up to
//! 1 GiB, since its headers make the whole arena resident) are filled to
//! 60 % with mixed sizes (and 64 KiB extents) and closed; then opening them
//! — recovery — is timed `reps` times. Rows `ferrite-recover` (descriptor
//! walk) and `nstore-lock-recover` (header walk), `ns_per_op` = one
//! recovery, `extra.ms`.

use crate::ctx::BenchCtx;
use crate::error::BenchError;
use crate::measure::{Variant, median, run_interleaved, spread};
use crate::row::{Row, set_ratios};
use ferrite_alloc::{
    AllocThread, Heap, HeapOptions, Link, LockHeap, LockOptions, PAllocator, Publish, Reservation,
};
use ferrite_pmem::{Counters, Domain, FlushKind, POff, Pool, PoolOptions, Region};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;
use std::sync::Mutex;
use std::time::Instant;

/// Name of the PMDK row.
pub const PMDK: &str = "pmdk";
/// Live allocations per thread.
pub const WINDOW: usize = 1024;
const BATCH: usize = 8;
/// Pool bytes per allocator under test (rings of 4 KiB blocks fit many times).
const HEAP_BYTES: u64 = 64 << 20;
/// Link slots live before the heap, in the same pool.
const SLOT_AREA: usize = 64 * 1024;
const MIB: u64 = 1 << 20;

/// Request sizes of one group.
#[derive(Clone, Copy, Debug)]
enum Sizes {
    Fixed(usize),
    /// 40 % 16–128 B, 30 % 129–512 B, 20 % 513–2048 B, 10 % 2049–4096 B.
    Mixed,
}

impl Sizes {
    fn label(self) -> String {
        match self {
            Sizes::Fixed(n) => n.to_string(),
            Sizes::Mixed => "mixed".into(),
        }
    }

    fn pick(self, rng: &mut ChaCha8Rng) -> usize {
        match self {
            Sizes::Fixed(n) => n,
            Sizes::Mixed => match rng.random_range(0..10) {
                0..=3 => rng.random_range(16..=128),
                4..=6 => rng.random_range(129..=512),
                7..=8 => rng.random_range(513..=2048),
                _ => rng.random_range(2049..=4096),
            },
        }
    }
}

/// One thread's ring of live allocations and its size stream.
struct Ring {
    /// Pool offset of slot 0 of this thread.
    slots: u64,
    live: Vec<u64>,
    next: usize,
    rng: ChaCha8Rng,
}

impl Ring {
    fn new(slots: u64, seed: u64) -> Ring {
        Ring {
            slots,
            live: vec![0; WINDOW],
            next: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    fn slot(&self, j: usize) -> POff<u64> {
        POff::new(self.slots + 8 * j as u64)
    }

    fn advance(&mut self) -> usize {
        let j = self.next;
        self.next = (j + 1) % WINDOW;
        j
    }
}

fn domain() -> Domain {
    if FlushKind::best().is_some() {
        Domain::Adr
    } else {
        Domain::Eadr
    }
}

fn bench_pool(bytes: u64) -> Result<Pool, BenchError> {
    Ok(Pool::create_in_memory(
        &PoolOptions::new("bench-alloc", bytes).domain(domain()),
    )?)
}

/// The pool area after the slots, where the heap goes (page aligned).
fn heap_region(pool: &Pool) -> Region {
    let d = pool.data();
    d.sub(SLOT_AREA, d.len() - SLOT_AREA)
        .expect("bench pools hold the slot area")
}

fn rings(pool: &Pool, threads: usize, seed: u64) -> Vec<Mutex<Ring>> {
    let base = pool.data().base() as u64;
    (0..threads)
        .map(|t| {
            Mutex::new(Ring::new(
                base + (t * WINDOW * 8) as u64,
                seed ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            ))
        })
        .collect()
}

fn unsupported(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Unsupported(format!("{what}: {e}"))
}

/// One op with links: free the slot's block (unlinking it), allocate anew (linking it).
fn cycle_linked(t: &mut dyn AllocThread, ring: &mut Ring, sizes: Sizes) {
    let j = ring.advance();
    let slot = ring.slot(j);
    if ring.live[j] != 0 {
        t.free(POff::new(ring.live[j]), Some(slot))
            .expect("free of a live block");
    }
    let size = sizes.pick(&mut ring.rng);
    ring.live[j] = t.alloc(size, Some(slot)).expect("alloc").raw();
}

fn cycle_unlinked(t: &mut dyn AllocThread, ring: &mut Ring, sizes: Sizes) {
    let j = ring.advance();
    if ring.live[j] != 0 {
        t.free(POff::new(ring.live[j]), None)
            .expect("free of a live block");
    }
    let size = sizes.pick(&mut ring.rng);
    ring.live[j] = t.alloc(size, None).expect("alloc").raw();
}

/// One op as one atomic publish: the new block, the free of the old one and
/// the slot's new value together (an engine's copy-on-write update).
fn cycle_replace(t: &mut dyn AllocThread, ring: &mut Ring, sizes: Sizes) {
    let j = ring.advance();
    let slot = ring.slot(j);
    let r = t.reserve(sizes.pick(&mut ring.rng)).expect("reserve");
    let link = [Link::to(slot, &r)];
    let old = [POff::new(ring.live[j])];
    ring.live[j] = r.off().raw();
    let allocs = [r];
    t.publish(&Publish {
        allocs: &allocs,
        frees: if old[0].is_null() { &[] } else { &old },
        links: &link,
    })
    .expect("replace");
}

/// `BATCH` ops: one publish of the frees with their unlinks, one of the
/// allocations with their links.
fn cycle_batch(t: &mut dyn AllocThread, ring: &mut Ring, sizes: Sizes) {
    let js: Vec<usize> = (0..BATCH).map(|_| ring.advance()).collect();
    let frees: Vec<POff<u8>> = js
        .iter()
        .filter(|&&j| ring.live[j] != 0)
        .map(|&j| POff::new(ring.live[j]))
        .collect();
    let unlinks: Vec<Link> = js
        .iter()
        .filter(|&&j| ring.live[j] != 0)
        .map(|&j| Link::clear(ring.slot(j)))
        .collect();
    if !frees.is_empty() {
        t.publish(&Publish {
            allocs: &[],
            frees: &frees,
            links: &unlinks,
        })
        .expect("batched free");
    }
    let rs: Vec<Reservation> = js
        .iter()
        .map(|_| t.reserve(sizes.pick(&mut ring.rng)).expect("reserve"))
        .collect();
    let links: Vec<Link> = rs
        .iter()
        .zip(&js)
        .map(|(r, &j)| Link::to(ring.slot(j), r))
        .collect();
    t.publish(&Publish {
        allocs: &rs,
        frees: &[],
        links: &links,
    })
    .expect("batched alloc");
    for (r, &j) in rs.iter().zip(&js) {
        ring.live[j] = r.off().raw();
    }
}

fn params(sizes: Sizes, allocator: &str, linked: bool) -> serde_json::Value {
    json!({
        "size": sizes.label(),
        "allocator": allocator,
        "linked": linked,
        "window": WINDOW,
        "op": "free the oldest block of the ring + allocate one",
    })
}

/// Runs the suite.
pub fn run(ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    let ops: u64 = ctx.scale.pick(10_000, 100_000);
    let groups = [
        Sizes::Fixed(64),
        Sizes::Fixed(256),
        Sizes::Fixed(1024),
        Sizes::Fixed(4096),
        Sizes::Mixed,
    ];
    let mut all = Vec::new();
    for sizes in groups {
        for threads in [1usize, 2] {
            ctx.note(format!(
                "alloc: size {} x {threads} thread(s)",
                sizes.label()
            ));
            all.extend(throughput_group(ctx, sizes, threads, ops)?);
        }
    }
    // Scaling: each two-thread row against the same variant with one thread.
    let one: Vec<(String, String, f64)> = all
        .iter()
        .filter(|r| r.threads == 1)
        .map(|r| (r.variant.clone(), r.params["size"].to_string(), r.ops_per_s))
        .collect();
    for r in all.iter_mut().filter(|r| r.threads == 2) {
        let size = r.params["size"].to_string();
        if let Some((_, _, base)) = one.iter().find(|(v, s, _)| *v == r.variant && *s == size)
            && *base > 0.0
        {
            let x = r.ops_per_s / base;
            r.set_extra("speedup_vs_1_thread", x);
        }
    }
    all.extend(recovery(ctx)?);
    Ok(all)
}

/// A fresh Ferrite heap in its own pool, and one ring of live blocks per thread.
fn ferrite_heap(threads: usize, seed: u64) -> Result<(Pool, Heap, Vec<Mutex<Ring>>), BenchError> {
    let pool = bench_pool(HEAP_BYTES)?;
    let heap = Heap::create(heap_region(&pool), HeapOptions::default())
        .map_err(|e| unsupported("ferrite heap", e))?;
    let rings = rings(&pool, threads, seed);
    Ok((pool, heap, rings))
}

/// A variant whose threads each attach to `heap` and repeat `cycle` on their
/// own ring.
#[allow(clippy::too_many_arguments)]
fn heap_variant<'a>(
    name: &str,
    linked: bool,
    heap: &'a Heap,
    rings: &'a [Mutex<Ring>],
    sizes: Sizes,
    threads: usize,
    ops: u64,
    cycle: fn(&mut dyn AllocThread, &mut Ring, Sizes),
) -> Variant<'a> {
    Variant::threaded(
        name,
        params(sizes, "ferrite", linked),
        threads,
        ops,
        move |t, n| {
            let mut h = heap.attach().expect("a free lane");
            let mut ring = rings[t].lock().expect("ring");
            for _ in 0..n {
                cycle(&mut h, &mut ring, sizes);
            }
        },
    )
}

/// The throughput group of one size class at `threads` threads: every
/// allocator variant interleaved (each on its own fresh heap), then each
/// row annotated with its fences per allocation and its heap's
/// fragmentation and bytes in use.
fn throughput_group(
    ctx: &BenchCtx,
    sizes: Sizes,
    threads: usize,
    ops: u64,
) -> Result<Vec<Row>, BenchError> {
    let baseline = if cfg!(feature = "pmdk") {
        PMDK
    } else {
        "nstore-lock"
    };
    let seed = 0x5eed ^ threads as u64;

    let (_fp, fheap, f_rings) = ferrite_heap(threads, seed)?;
    let (_rp, rheap, r_rings) = ferrite_heap(threads, seed)?;
    let (_bp, bheap, b_rings) = ferrite_heap(threads, seed)?;
    let (_np, nheap, n_rings) = ferrite_heap(threads, seed)?;
    let lp = bench_pool(HEAP_BYTES)?;
    let lheap = LockHeap::create(heap_region(&lp), LockOptions::default())
        .map_err(|e| unsupported("lock heap", e))?;
    let l_rings = rings(&lp, threads, seed);

    #[cfg(feature = "pmdk")]
    let (pmdk_path, pmdk) = pmdk_pool(sizes, threads)?;
    #[cfg(feature = "pmdk")]
    let pmdk_rings = pmdk_rings(threads, seed);
    let lock = lock_heap_variant(&lheap, &l_rings, sizes, threads, ops);
    let mut variants: Vec<Variant<'_>> = vec![
        heap_variant(
            "ferrite",
            true,
            &fheap,
            &f_rings,
            sizes,
            threads,
            ops,
            cycle_linked,
        )
        .baseline(baseline),
        heap_variant(
            "ferrite-replace",
            true,
            &rheap,
            &r_rings,
            sizes,
            threads,
            ops,
            cycle_replace,
        )
        .baseline(baseline),
        batch_variant(&bheap, &b_rings, sizes, threads, ops).baseline(baseline),
        heap_variant(
            "ferrite-nolink",
            false,
            &nheap,
            &n_rings,
            sizes,
            threads,
            ops,
            cycle_unlinked,
        )
        .baseline(baseline),
        if cfg!(feature = "pmdk") {
            lock.baseline(baseline)
        } else {
            lock
        },
    ];
    #[cfg(feature = "pmdk")]
    variants.push(pmdk_variant(&pmdk, &pmdk_rings, sizes, threads, ops));

    let mut rows = run_interleaved(ctx, "alloc", &mut variants);
    drop(variants);
    set_fences_per_alloc(&mut rows);
    let heaps: [(&str, &dyn PAllocator); 5] = [
        ("ferrite", &fheap),
        ("ferrite-replace", &rheap),
        ("ferrite-batch8", &bheap),
        ("ferrite-nolink", &nheap),
        ("nstore-lock", &lheap),
    ];
    set_heap_stats(&mut rows, &heaps);
    #[cfg(feature = "pmdk")]
    {
        drop(pmdk_rings);
        drop(pmdk);
        let _ = std::fs::remove_file(&pmdk_path);
    }
    Ok(rows)
}

/// The `ferrite-batch8` variant: each thread attaches to `heap` and runs
/// [`cycle_batch`] (`BATCH` operations per publish) on its ring, the
/// remainder of `n ÷ BATCH` as single linked cycles.
fn batch_variant<'a>(
    heap: &'a Heap,
    rings: &'a [Mutex<Ring>],
    sizes: Sizes,
    threads: usize,
    ops: u64,
) -> Variant<'a> {
    Variant::threaded(
        "ferrite-batch8",
        params(sizes, "ferrite", true),
        threads,
        ops,
        move |t, n| {
            let mut h = heap.attach().expect("a free lane");
            let mut ring = rings[t].lock().expect("ring");
            for _ in 0..n / BATCH as u64 {
                cycle_batch(&mut h, &mut ring, sizes);
            }
            for _ in 0..n % BATCH as u64 {
                cycle_linked(&mut h, &mut ring, sizes);
            }
        },
    )
    .param("batch", BATCH)
}

/// The `nstore-lock` variant: linked cycles on the single-lock heap (no
/// baseline set here: it is the baseline when PMDK is absent).
fn lock_heap_variant<'a>(
    heap: &'a LockHeap,
    rings: &'a [Mutex<Ring>],
    sizes: Sizes,
    threads: usize,
    ops: u64,
) -> Variant<'a> {
    Variant::threaded(
        "nstore-lock",
        params(sizes, "nstore-lock", true),
        threads,
        ops,
        move |t, n| {
            let mut h = heap.attach();
            let mut ring = rings[t].lock().expect("ring");
            for _ in 0..n {
                cycle_linked(&mut h, &mut ring, sizes);
            }
        },
    )
}

/// One PMDK ring per thread, empty, each with its own seeded size stream.
#[cfg(feature = "pmdk")]
fn pmdk_rings(threads: usize, seed: u64) -> Vec<Mutex<PmdkRing>> {
    (0..threads)
        .map(|t| {
            Mutex::new(PmdkRing {
                live: (0..WINDOW).map(|_| None).collect(),
                next: 0,
                rng: ChaCha8Rng::seed_from_u64(
                    seed ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                ),
            })
        })
        .collect()
}

/// The PMDK variant: each thread frees the oldest object of its ring and
/// allocates one with `pmemobj_alloc`.
#[cfg(feature = "pmdk")]
fn pmdk_variant<'a>(
    obj: &'a ferrite_pmdk::PmemObj,
    rings: &'a [Mutex<PmdkRing>],
    sizes: Sizes,
    threads: usize,
    ops: u64,
) -> Variant<'a> {
    Variant::threaded(
        PMDK,
        json!({
            "size": sizes.label(),
            "allocator": "pmemobj_alloc/pmemobj_free",
            "linked": false,
            "window": WINDOW,
            "pmem_is_pmem_forced": true,
            "op": "free the oldest block of the ring + allocate one",
        }),
        threads,
        ops,
        move |t, n| {
            let mut g = rings[t].lock().expect("ring");
            let ring = &mut *g;
            for _ in 0..n {
                let j = ring.next;
                ring.next = (j + 1) % WINDOW;
                if let Some(o) = ring.live[j].take() {
                    obj.free(o).expect("pmemobj_free");
                }
                let size = sizes.pick(&mut ring.rng);
                ring.live[j] = Some(obj.alloc(size).expect("pmemobj_alloc"));
            }
        },
    )
}

/// `fences_per_alloc` of each row: half its fences per op (an op frees and
/// allocates, both publishing alike), all of them for `ferrite-replace`
/// (one publish per op); PMDK's rows instead say their counters were not
/// observed.
fn set_fences_per_alloc(rows: &mut [Row]) {
    for r in rows.iter_mut() {
        if r.variant == PMDK {
            r.counters_observed = false;
        } else if r.variant != "ferrite-replace" {
            // Both halves of an op publish symmetrically: per allocation is half.
            r.set_extra("fences_per_alloc", r.fences_per_op / 2.0);
        } else {
            r.set_extra("fences_per_alloc", r.fences_per_op);
        }
    }
}

/// The fragmentation and bytes in use of the heap each row ran on, looked
/// up by variant name in `heaps` (rows of other variants untouched).
fn set_heap_stats(rows: &mut [Row], heaps: &[(&str, &dyn PAllocator)]) {
    for r in rows.iter_mut() {
        let Some((_, heap)) = heaps.iter().find(|(n, _)| *n == r.variant) else {
            continue;
        };
        let s = heap.stats();
        r.set_extra("fragmentation", s.fragmentation);
        r.set_extra("in_use_bytes", s.in_use);
    }
}

/// A PMDK thread's ring: live objects (`PMEMoid`s in DRAM) and sizes.
#[cfg(feature = "pmdk")]
struct PmdkRing {
    live: Vec<Option<ferrite_pmdk::Oid>>,
    next: usize,
    rng: ChaCha8Rng,
}

#[cfg(feature = "pmdk")]
fn pmdk_pool(
    sizes: Sizes,
    threads: usize,
) -> Result<(std::path::PathBuf, ferrite_pmdk::PmemObj), BenchError> {
    let path = std::path::PathBuf::from(format!(
        "{}/ferrite-bench-alloc-{}-{}-{threads}",
        ferrite_pmdk::SHM_DIR,
        std::process::id(),
        sizes.label()
    ));
    let _ = std::fs::remove_file(&path);
    let obj = ferrite_pmdk::PmemObj::create(&path, "bench-alloc", HEAP_BYTES as usize)
        .map_err(|e| unsupported(&format!("pmemobj_create {}", path.display()), e))?;
    Ok((path, obj))
}

// ---- recovery -------------------------------------------------------------------------

/// Fills `alloc` with mixed sizes (and a 64 KiB extent every 64 blocks)
/// until `target` bytes are in use; `publish_many` publishes a batch.
fn fill(
    ctx: &BenchCtx,
    what: &str,
    t: &mut dyn AllocThread,
    stats: &dyn Fn() -> u64,
    target: u64,
    batch: usize,
) -> Result<u64, BenchError> {
    let mut rng = ChaCha8Rng::seed_from_u64(0xf111);
    let mut blocks = 0u64;
    let mut next_note = target / 4;
    let mut rs: Vec<Reservation> = Vec::with_capacity(batch);
    'outer: while stats() < target {
        rs.clear();
        for _ in 0..batch {
            let size = if blocks % 64 == 63 {
                64 << 10
            } else {
                Sizes::Mixed.pick(&mut rng)
            };
            match t.reserve(size) {
                Ok(r) => rs.push(r),
                Err(ferrite_alloc::AllocError::OutOfSpace { .. }) => {
                    if rs.is_empty() {
                        break 'outer;
                    }
                    break;
                }
                Err(e) => return Err(unsupported(what, e)),
            }
            blocks += 1;
        }
        t.publish(&Publish {
            allocs: &rs,
            frees: &[],
            links: &[],
        })
        .map_err(|e| unsupported(what, e))?;
        if stats() >= next_note {
            ctx.note(format!(
                "alloc: {what}: {} MiB of {} MiB in use ({blocks} blocks)",
                stats() / MIB,
                target / MIB
            ));
            next_note += target / 4;
        }
    }
    Ok(blocks)
}

fn recovery_row(name: &str, params: serde_json::Value, samples: &[f64], c: Counters) -> Row {
    let ns = median(samples);
    let mut row = Row::empty("alloc", name, params);
    row.ops = 1;
    row.reps = samples.len();
    row.ns_per_op = ns;
    row.secs = ns / 1e9;
    row.ops_per_s = if ns > 0.0 { 1e9 / ns } else { 0.0 };
    row.ns_per_op_spread = spread(samples);
    let n = samples.len().max(1) as f64;
    row.fences_per_op = c.fences as f64 / n;
    row.flushes_per_op = c.flush_insns as f64 / n;
    row.lines_per_op = c.lines_flushed as f64 / n;
    row.blocks_per_op = c.blocks_written as f64 / n;
    row.set_extra("ms", ns / 1e6);
    row
}

/// Times `open` `reps` times (after one untimed open).
fn time_open<T>(
    reps: usize,
    open: impl Fn() -> Result<T, BenchError>,
) -> Result<(Vec<f64>, Counters), BenchError> {
    drop(open()?);
    let mut samples = Vec::with_capacity(reps);
    let c0 = Counters::snapshot();
    for _ in 0..reps {
        let t0 = Instant::now();
        let h = open()?;
        samples.push(t0.elapsed().as_secs_f64() * 1e9);
        drop(h);
    }
    Ok((samples, Counters::snapshot() - c0))
}

fn recovery(ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    let sizes: &[u64] = ctx.scale.pick(
        &[64 * MIB, 256 * MIB][..],
        &[64 * MIB, 256 * MIB, 1024 * MIB, 4096 * MIB][..],
    );
    let lock_max = 1024 * MIB;
    let reps = ctx.reps.max(1);
    let mut rows = Vec::new();
    for &bytes in sizes {
        let mut group = Vec::new();
        // Ferrite heap.
        {
            let pool = bench_pool(bytes + 2 * MIB)?;
            let region = heap_region(&pool);
            let heap = Heap::create(region.clone(), HeapOptions::default())
                .map_err(|e| unsupported("ferrite heap", e))?;
            let target = heap.capacity() * 6 / 10;
            ctx.note(format!(
                "alloc: recovery: filling a {} MiB ferrite heap to 60 %",
                bytes / MIB
            ));
            let t0 = Instant::now();
            {
                let mut t = heap.attach().map_err(|e| unsupported("attach", e))?;
                fill(
                    ctx,
                    "ferrite fill",
                    &mut t,
                    &|| heap.stats().in_use,
                    target,
                    32,
                )?;
            }
            let stats = heap.stats();
            ctx.note(format!(
                "alloc: recovery: filled in {:.1?}; timing {reps} recoveries",
                t0.elapsed()
            ));
            drop(heap);
            let (samples, c) = time_open(reps, || {
                Heap::open(region.clone()).map_err(|e| unsupported("ferrite open", e))
            })?;
            let h = Heap::open(region.clone()).map_err(|e| unsupported("ferrite open", e))?;
            let rep = h.recovery().clone();
            drop(h);
            let mut row = recovery_row(
                "ferrite-recover",
                json!({
                    "experiment": "recovery",
                    "heap_mib": bytes / MIB,
                    "in_use_mib": stats.in_use / MIB,
                    "blocks": stats.blocks,
                    "runs": rep.runs,
                    "extents": rep.extents,
                }),
                &samples,
                c,
            );
            if bytes <= lock_max {
                row.baseline = Some("nstore-lock-recover".into());
            }
            ctx.note(format!(
                "alloc: recovery: ferrite {} MiB heap: {:.2} ms",
                bytes / MIB,
                row.ns_per_op / 1e6
            ));
            group.push(row);
        }
        // Lock heap (its header walk touches every block).
        if bytes <= lock_max {
            let pool = bench_pool(bytes + 2 * MIB)?;
            let region = heap_region(&pool);
            let heap = LockHeap::create(region.clone(), LockOptions::default())
                .map_err(|e| unsupported("lock heap", e))?;
            let target = heap.stats().capacity * 6 / 10;
            ctx.note(format!(
                "alloc: recovery: filling a {} MiB lock heap to 60 %",
                bytes / MIB
            ));
            {
                let mut t = heap.attach();
                fill(ctx, "lock fill", &mut t, &|| heap.stats().in_use, target, 1)?;
            }
            let stats = heap.stats();
            drop(heap);
            let (samples, c) = time_open(reps, || {
                LockHeap::open(region.clone()).map_err(|e| unsupported("lock open", e))
            })?;
            let row = recovery_row(
                "nstore-lock-recover",
                json!({
                    "experiment": "recovery",
                    "heap_mib": bytes / MIB,
                    "in_use_mib": stats.in_use / MIB,
                    "blocks": stats.blocks,
                }),
                &samples,
                c,
            );
            ctx.note(format!(
                "alloc: recovery: lock {} MiB heap: {:.2} ms",
                bytes / MIB,
                row.ns_per_op / 1e6
            ));
            group.push(row);
        }
        set_ratios(&mut group);
        rows.extend(group);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every op shape leaves exactly the ring's blocks allocated and linked.
    #[test]
    fn ops_keep_the_ring_and_the_heap_in_step() {
        type Cycle = fn(&mut dyn AllocThread, &mut Ring, Sizes);
        let cycles: [(Cycle, bool, usize); 4] = [
            (cycle_linked, true, 1),
            (cycle_replace, true, 1),
            (cycle_batch, true, BATCH),
            (cycle_unlinked, false, 1),
        ];
        for (cycle, linked, per_call) in cycles {
            let pool = bench_pool(8 << 20).unwrap();
            let heap = Heap::create(heap_region(&pool), HeapOptions::default()).unwrap();
            let rings = rings(&pool, 1, 1);
            let mut ring = rings[0].lock().unwrap();
            let mut t = heap.attach().unwrap();
            // Three laps of the ring: every slot is freed and refilled.
            for _ in 0..3 * WINDOW / per_call {
                cycle(&mut t, &mut ring, Sizes::Mixed);
            }
            let mut sum = 0u64;
            for (j, &off) in ring.live.iter().enumerate() {
                if off != 0 {
                    sum += heap.usable_size(POff::new(off)).unwrap() as u64;
                    if linked {
                        let at = ring.slot(j).raw() as usize - pool.data().base();
                        assert_eq!(pool.data().load_u64(at), off, "slot {j} links its block");
                    }
                }
            }
            assert_eq!(heap.stats().in_use, sum);
        }
    }
}
