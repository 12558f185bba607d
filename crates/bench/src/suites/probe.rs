//! The `probe` suite: what this machine's persistence primitives cost
//! [P0 §2.2–2.3], measured in one run, each group interleaved.
//!
//! Every flush and fence goes through a ferrite-pmem [`Region`] of an
//! in-memory pool in the `adr` domain (one pool per flush instruction, since
//! a medium's flush kind is fixed when it is opened), so the counters in each
//! row are exact. The memory is ordinary DRAM: the numbers are this
//! machine's cost of the *instructions*, not of persistent media.
//!
//! Groups and what `ns_per_op` means in each:
//!
//! 1. **barrier** — one 64-byte line per op, rotating over a 4 MiB buffer
//!    (larger than L1 and L2, so it is never the same hot line):
//!    - `store+<flush>+sfence` for each of clwb, clflushopt, clflush the CPU
//!      has (missing ones are listed in `params.cpu_lacks`): 64-byte store,
//!      flush of its line, fence. Expect 1 fence, 1 flush, 1 line per op.
//!    - `nt-store+sfence`: 64-byte non-temporal store + fence (the 64-byte
//!      floor). Expect 1 fence, 64 nt bytes, 0 lines.
//!    - `sfence`: a fence alone, nothing pending. Expect 1 fence.
//!    - `<best> xN+sfence`, N = 1, 4, 16: N adjacent lines stored and
//!      flushed under one fence; `ns_per_op` is per barrier and
//!      `extra.ns_per_line` per line. Expect 1 fence, N lines.
//!    - `same-line store+<best>+sfence`, `same-line nt-store+sfence`: the
//!      same line persisted over and over (slow on Optane [P0 Fig. 2]);
//!      compared against their rotating counterparts.
//! 2. **pattern** — 64-byte persists over a large region (64 MiB quick,
//!    1 GiB full), sequential vs uniformly random lines, with the best flush
//!    and with non-temporal stores. Random rows compare against sequential.
//! 3. **latency** — dependent loads ([`Region::load_u64`]) chasing a random
//!    cyclic permutation of cache lines (Sattolo) in arrays of 32 KiB (L1),
//!    1 MiB (L2) and 256 MiB quick / 2 GiB full (far beyond the LLC):
//!    `ns_per_op` is the load-to-use latency including TLB misses (4 KiB
//!    pages). No counters.
//! 4. **bandwidth** — 1 MiB chunks written over a 64 MiB (quick) / 512 MiB
//!    (full) region: `nt-copy+sfence` (the floor of a 1 MiB persist),
//!    `copy+<best>+sfence` (ordinary stores, flush every line, fence) and
//!    `copy (no persist)` (cached stores only). `extra.gb_per_s` is the
//!    bandwidth; `bookkeeping (eadr flush)` times the counters' per-range
//!    bookkeeping alone (an `eadr` flush of 1 MiB issues no instruction but
//!    notes every 256-byte block; `extra.ns_per_block`), a cost included in
//!    the `nt-copy` row (one note per block) and, more than once per line,
//!    in the `copy+flush` row.

use crate::ctx::BenchCtx;
use crate::error::BenchError;
use crate::floor::floor_variant;
use crate::measure::{Variant, run_interleaved};
use crate::row::Row;
use ferrite_pmem::{CACHE_LINE, Domain, FlushKind, HEADER_SIZE, Pool, PoolOptions, Region};
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::hint::black_box;

const SUITE: &str = "probe";
const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// Runs the whole probe (also the `probe` suite of the registry).
pub fn probe(ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    let mut rows = barrier(ctx)?;
    rows.extend(pattern(ctx)?);
    rows.extend(latency(ctx)?);
    rows.extend(bandwidth(ctx)?);
    Ok(rows)
}

/// An in-memory pool with `bytes` of data in `domain` (flush instruction
/// `flush` for `adr`), every page touched so page faults stay out of the
/// measurements.
fn pool(bytes: usize, domain: Domain, flush: Option<FlushKind>) -> Result<Pool, BenchError> {
    let mut opts = PoolOptions::new("ferrite-probe", (bytes + HEADER_SIZE) as u64).domain(domain);
    opts.flush = flush;
    let p = Pool::create_in_memory(&opts)?;
    let r = p.data();
    r.fill(0, r.len(), 0);
    Ok(p)
}

/// The pool where non-flush barriers run: `adr` with the best flush, or
/// `eadr` when the CPU has no flush instruction.
fn barrier_pool(bytes: usize) -> Result<Pool, BenchError> {
    match FlushKind::best() {
        Some(k) => pool(bytes, Domain::Adr, Some(k)),
        None => pool(bytes, Domain::Eadr, None),
    }
}

fn mib(bytes: usize) -> String {
    if bytes >= MIB {
        format!("{}MiB", bytes / MIB)
    } else {
        format!("{}KiB", bytes / KIB)
    }
}

/// `store + flush + fence` of `lines` adjacent lines per op, rotating over
/// the region (or always at offset 0 when `same`).
fn store_flush_fence<'a>(
    name: String,
    region: &'a Region,
    lines: usize,
    same: bool,
    ops: u64,
) -> Variant<'a> {
    let bytes = lines * CACHE_LINE;
    let slots = region.len() / bytes;
    let mut data = vec![0u8; bytes];
    let mut slot = 0usize;
    let mut seq = 0u64;
    let flush = region.medium().config().flush.name();
    Variant::new(
        name,
        json!({
            "lines": lines,
            "flush": flush,
            "buffer": if same { "1 line".to_string() } else { mib(region.len()) },
        }),
        ops,
        move |n| {
            for _ in 0..n {
                seq += 1;
                data[..8].copy_from_slice(&seq.to_le_bytes());
                let off = slot * bytes;
                region.write(off, &data);
                region.flush(off, bytes);
                region.fence();
                if !same {
                    slot += 1;
                    if slot == slots {
                        slot = 0;
                    }
                }
            }
        },
    )
}

/// 1. Persist-barrier costs (see the module documentation).
fn barrier(ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    let buf = 4 * MIB;
    let ops: u64 = ctx.scale.pick(200_000, 2_000_000);
    ctx.note(format!("[{SUITE}] barrier: preparing {} pools", mib(buf)));
    let lacks: Vec<&str> = FlushKind::ALL
        .into_iter()
        .filter(|k| !k.supported())
        .map(|k| k.name())
        .collect();
    let kinds: Vec<FlushKind> = FlushKind::ALL
        .into_iter()
        .filter(|k| k.supported())
        .collect();
    let mut flush_pools = Vec::new();
    for &k in &kinds {
        flush_pools.push(pool(buf, Domain::Adr, Some(k))?);
    }
    let flush_regions: Vec<Region> = flush_pools.iter().map(Pool::data).collect();
    let other_pool = barrier_pool(buf)?;
    let other_region = other_pool.data();
    let other = &other_region;
    let best = kinds.first().copied();
    let best_name = best.map(|k| k.name()).unwrap_or("none");
    let rot_best = format!("store+{best_name}+sfence");

    let mut v: Vec<Variant<'_>> = Vec::new();
    for (k, r) in kinds.iter().zip(&flush_regions) {
        let name = format!("store+{}+sfence", k.name());
        let mut var = store_flush_fence(name, r, 1, false, ops);
        if Some(*k) != best {
            var = var.baseline(rot_best.clone());
        }
        v.push(var);
    }
    let mut nt = floor_variant(other, CACHE_LINE, ops)
        .named("nt-store+sfence")
        .param("buffer", mib(buf));
    if best.is_some() {
        nt = nt.baseline(rot_best.clone());
    }
    v.push(nt);
    v.push(Variant::new(
        "sfence",
        json!({ "pending_lines": 0 }),
        ops,
        move |n| {
            for _ in 0..n {
                other.fence();
            }
        },
    ));
    if let Some(r) = flush_regions.first() {
        for lines in [1usize, 4, 16] {
            let name = format!("{best_name} x{lines}+sfence");
            let var = store_flush_fence(name, r, lines, false, (ops / lines as u64).max(1));
            let var = if lines > 1 {
                var.baseline(format!("{best_name} x1+sfence"))
            } else {
                var
            };
            v.push(var);
        }
        v.push(
            store_flush_fence(format!("same-line {rot_best}"), r, 1, true, ops)
                .baseline(rot_best.clone()),
        );
    }
    let mut line = [0u8; CACHE_LINE];
    let mut seq = 0u64;
    v.push(
        Variant::new(
            "same-line nt-store+sfence",
            json!({ "bytes": CACHE_LINE, "buffer": "1 line" }),
            ops,
            move |n| {
                for _ in 0..n {
                    seq += 1;
                    line[..8].copy_from_slice(&seq.to_le_bytes());
                    other.write_nt(0, &line);
                    other.fence();
                }
            },
        )
        .baseline("nt-store+sfence"),
    );
    if !lacks.is_empty() {
        v = v
            .into_iter()
            .map(|x| x.param("cpu_lacks", lacks.clone()))
            .collect();
    }
    let mut rows = run_interleaved(ctx, SUITE, &mut v);
    let batch_prefix = format!("{best_name} x");
    for r in &mut rows {
        if r.variant.starts_with(&batch_prefix)
            && let Some(lines) = r.params.get("lines").and_then(|l| l.as_u64())
        {
            r.set_extra("ns_per_line", r.ns_per_op / lines as f64);
        }
    }
    Ok(rows)
}

/// xorshift64: a cheap in-loop random source for line indices.
#[inline(always)]
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// `x` scaled into `0..n` without a division (Lemire's multiply-shift).
#[inline(always)]
fn below(x: u64, n: usize) -> usize {
    ((x as u128 * n as u128) >> 64) as usize
}

/// 2. Sequential vs random 64-byte persists over a large region.
fn pattern(ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    let span = ctx.scale.pick(64 * MIB, 1024 * MIB);
    let ops: u64 = ctx.scale.pick(200_000, 2_000_000);
    ctx.note(format!("[{SUITE}] pattern: preparing a {} pool", mib(span)));
    let p = barrier_pool(span)?;
    let region = p.data();
    let region = &region;
    let lines = span / CACHE_LINE;
    let flush = region.medium().config().flush.name();
    let flushes = region.medium().domain() == Domain::Adr;
    let mut v: Vec<Variant<'_>> = Vec::new();
    for nt in [false, true] {
        if !nt && !flushes {
            continue;
        }
        let how = if nt {
            "nt-store+sfence".to_string()
        } else {
            format!("store+{flush}+sfence")
        };
        for random in [false, true] {
            let mut i = 0usize;
            let mut rng = 0x9e37_79b9_7f4a_7c15u64;
            let mut line = [0u8; CACHE_LINE];
            let mut seq = 0u64;
            let pat = if random { "rand" } else { "seq" };
            let mut var = Variant::new(
                format!("{pat} {how}"),
                json!({ "bytes": CACHE_LINE, "region": mib(span), "pattern": pat }),
                ops,
                move |n| {
                    for _ in 0..n {
                        let idx = if random {
                            below(xorshift(&mut rng), lines)
                        } else {
                            i += 1;
                            if i == lines {
                                i = 0;
                            }
                            i
                        };
                        seq += 1;
                        line[..8].copy_from_slice(&seq.to_le_bytes());
                        let off = idx * CACHE_LINE;
                        if nt {
                            region.write_nt(off, &line);
                        } else {
                            region.write(off, &line);
                            region.flush(off, CACHE_LINE);
                        }
                        region.fence();
                    }
                },
            );
            if random {
                var = var.baseline(format!("seq {how}"));
            }
            v.push(var);
        }
    }
    Ok(run_interleaved(ctx, SUITE, &mut v))
}

/// Writes a random cyclic permutation of the region's cache lines into the
/// region: word 0 of each line holds the offset of the next line.
fn build_chase(region: &Region, seed: u64) {
    let n = region.len() / CACHE_LINE;
    assert!(n >= 2 && n <= u32::MAX as usize);
    let mut next: Vec<u32> = (0..n as u32).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    // Sattolo's algorithm: i -> next[i] is a single cycle through all lines.
    for i in (1..n).rev() {
        let j = rng.random_range(0..i);
        next.swap(i, j);
    }
    for (i, &to) in next.iter().enumerate() {
        region.store_u64(i * CACHE_LINE, to as u64 * CACHE_LINE as u64);
    }
}

/// 3. Dependent-load latency.
fn latency(ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    let big = ctx.scale.pick(256 * MIB, 2048 * MIB);
    let sizes = [
        (32 * KIB, "L1", ctx.scale.pick(4_000_000u64, 40_000_000)),
        (MIB, "L2", ctx.scale.pick(2_000_000, 20_000_000)),
        (big, "DRAM", ctx.scale.pick(500_000, 5_000_000)),
    ];
    let mut pools = Vec::new();
    for (i, &(bytes, _, _)) in sizes.iter().enumerate() {
        ctx.note(format!(
            "[{SUITE}] latency: building a {} pointer chase",
            mib(bytes)
        ));
        let p = pool(bytes, Domain::Volatile, None)?;
        build_chase(&p.data(), 0xfe44_17e0 + i as u64);
        pools.push(p);
    }
    let regions: Vec<Region> = pools.iter().map(Pool::data).collect();
    let mut v: Vec<Variant<'_>> = Vec::new();
    for (r, &(bytes, level, ops)) in regions.iter().zip(&sizes) {
        let mut off = 0usize;
        let name = format!("chase {}", mib(bytes));
        let mut var = Variant::new(
            name,
            json!({ "array": mib(bytes), "fits": level, "stride": CACHE_LINE }),
            ops,
            move |n| {
                let mut o = off;
                for _ in 0..n {
                    o = r.load_u64(o) as usize;
                }
                off = black_box(o);
            },
        );
        if level != "L1" {
            var = var.baseline(format!("chase {}", mib(sizes[0].0)));
        }
        v.push(var);
    }
    Ok(run_interleaved(ctx, SUITE, &mut v))
}

/// 4. Large-chunk write bandwidth.
fn bandwidth(ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    let chunk = MIB;
    let span = ctx.scale.pick(64 * MIB, 512 * MIB);
    let ops: u64 = ctx.scale.pick(128, 1024);
    ctx.note(format!(
        "[{SUITE}] bandwidth: preparing a {} pool",
        mib(span)
    ));
    let p = barrier_pool(span)?;
    let region = p.data();
    let region = &region;
    let book = pool(chunk, Domain::Eadr, None)?;
    let book = book.data();
    let flush = region.medium().config().flush.name();
    let flushes = region.medium().domain() == Domain::Adr;
    let src: Vec<u8> = (0..chunk).map(|i| (i * 7) as u8).collect();
    let src = &src;
    let slots = span / chunk;
    let params = json!({ "chunk": mib(chunk), "region": mib(span) });

    let mut v: Vec<Variant<'_>> = vec![
        floor_variant(region, chunk, ops)
            .named("nt-copy+sfence")
            .param("region", mib(span)),
    ];
    if flushes {
        let mut slot = 0usize;
        v.push(
            Variant::new(
                format!("copy+{flush}+sfence"),
                params.clone(),
                ops,
                move |n| {
                    for _ in 0..n {
                        let off = slot * chunk;
                        region.write(off, src);
                        region.flush(off, chunk);
                        region.fence();
                        slot = (slot + 1) % slots;
                    }
                },
            )
            .bytes_per_op(chunk as u64)
            .baseline("nt-copy+sfence"),
        );
    }
    let mut slot = 0usize;
    v.push(
        Variant::new("copy (no persist)", params.clone(), ops, move |n| {
            for _ in 0..n {
                region.write(slot * chunk, src);
                slot = (slot + 1) % slots;
            }
        })
        .bytes_per_op(chunk as u64)
        .baseline("nt-copy+sfence"),
    );
    v.push(Variant::new(
        "bookkeeping (eadr flush)",
        json!({ "chunk": mib(chunk), "domain": "eadr" }),
        ops,
        |n| {
            for _ in 0..n {
                book.flush(0, chunk);
                book.fence();
            }
        },
    ));
    let mut rows = run_interleaved(ctx, SUITE, &mut v);
    let blocks = (chunk / ferrite_pmem::MEDIA_BLOCK) as f64;
    for r in rows
        .iter_mut()
        .filter(|r| r.variant.starts_with("bookkeeping"))
    {
        r.set_extra("ns_per_block", r.ns_per_op / blocks);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chase_is_one_cycle_through_every_line() {
        let p = pool(64 * KIB, Domain::Volatile, None).unwrap();
        let r = p.data();
        build_chase(&r, 7);
        let n = r.len() / CACHE_LINE;
        let mut seen = vec![false; n];
        let mut off = 0usize;
        for _ in 0..n {
            let line = off / CACHE_LINE;
            assert!(!seen[line], "line {line} visited twice");
            seen[line] = true;
            off = r.load_u64(off) as usize;
        }
        assert_eq!(off, 0, "the cycle returns to the start after n steps");
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn below_stays_in_range() {
        let mut x = 1u64;
        for _ in 0..10_000 {
            assert!(below(xorshift(&mut x), 37) < 37);
        }
    }
}
