//! Crash checks of the allocators, run through the `ferrite-crash` explorer
//! (feature `checks`; also compiled for this crate's tests). `ferrite check
//! alloc` calls [`check_alloc`].
//!
//! # Workloads
//!
//! A fresh heap in a 256 KiB simulated pool gets a **root object**: a table
//! of 48 link slots. Three *simulated threads* — three handles on the one
//! OS thread the explorer requires, each a [`SimThread`] — then run one of
//! two workloads.
//!
//! - **Main**, interleaved by a seeded script: reserve blocks (five classes
//!   of 16 B – 2 KiB from runs, 20 KiB extents), publish 1–3 of them at a
//!   time linked into empty slots, sometimes together with frees of other
//!   threads' blocks (cross-thread frees, unlinking their slots), free
//!   single blocks, and cancel reservations. The heap is small enough that
//!   it fills up, so out-of-space, run retirement and reuse are exercised.
//! - **Cross-lane** (`drive_xlane`), a fixed script in which every
//!   publish changes a word — bitmap bit, extent header, slot — of another
//!   thread's newest lane record, right after that record's publish: a
//!   lane record, a one-word publish of blocks held without a link, a
//!   transaction (an emulated redo log around [`AllocThread::prepare`],
//!   its log in the root object), and a run carved from a freed extent's
//!   pages. This is where a lane marker that is not durable in time shows.
//!
//! # Invariant (after recovery from every crash state, nested crashes too)
//!
//! - the root object is there;
//! - every slot holds what the last acknowledged publish left in it, except
//!   the slots of the publish in flight, which hold either all their old or
//!   all their new values (a publish is atomic, its held blocks included);
//! - every block a slot points to is allocated, no block is linked twice,
//!   and every allocated block is linked, held (published without a link
//!   and not freed) or the root: nothing leaks, nothing is allocated twice;
//! - allocated blocks do not overlap, and the accounting adds up (bytes in
//!   use = sum of usable sizes of the allocated blocks, blocks = their
//!   number, in use + free = capacity);
//! - the recovered heap works: every linked or held block can be freed
//!   (and unlinked), after which only the root is in use, and new blocks
//!   of every kind can be allocated.
//!
//! # Crash models
//!
//! Every run uses the explorer's medium with per-thread fences: each step
//! of a simulated thread runs inside [`SimThread::enter`] (attaching and
//! detaching its handle too), and the explorer completes at a fence only
//! the flushes of the simulated thread that fences — as on x86, where a
//! fence orders only its own core's write-backs. Another thread's flush
//! stays in flight (in any crash image or not) until that thread fences,
//! so a protocol that counts on another thread's fence — a lane's "record
//! done" marker flushed by its writer but left unfenced, taken as durable
//! once another thread has fenced — is caught in every run (the planted
//! [`Fault::UnfencedMarkers`]; on one simulated thread it goes unseen).
//! Nothing is lost against a medium whose fences complete every thread's
//! flushes: the two differ only after an operation left flushes unfenced
//! and another thread fenced, and that medium's images there are among
//! this one's (those units in flight, with their flushed content). Setup,
//! recovery and the invariant run on simulated thread 0.
//!
//! # Runs
//!
//! Each allocator (the Ferrite heap, and the single-lock heap) is explored
//! in several runs, the budget split between them: the main workload and
//! the cross-lane workload (`/xlane`), with equal shares, and two
//! *restart* runs (`/restartN`, half a share each) that crash the main
//! workload at a seeded point, recover a seeded image of it, and explore a
//! second workload on top (recovery's markers, cursors and rebuilt free
//! lists are then what the second workload runs on); all of them with
//! cache-line units and in tearing mode (`/torn`, 8-byte failure
//! atomicity). Recovery is crashed too (nested crashes) in every run.
//! Budget left over goes to main runs with new seeds that also crash
//! between stores (`/store`).

use crate::heap::{Fault, Heap, HeapOptions};
use crate::lock::{LockHeap, LockOptions};
use crate::ops::{MetaOp, OP_BYTES, flush_words};
use crate::{AllocError, AllocThread, Link, PAllocator, Publish, Reservation};
use ferrite_crash::sim::SimThread;
use ferrite_crash::{
    CheckSubject, Config, CrashAt, ExploreError, Explorer, Report, RunMods, SimRun, SpecError,
    failed_restart, spend_budget,
};
use ferrite_pmem::{CACHE_LINE, HEADER_SIZE, POff, Pool, PoolOptions, Region};
use std::collections::{BTreeMap, BTreeSet};

/// Size of the simulated pool every check uses (images are copied for
/// every crash state; the heap must be small enough to fill up).
pub const CHECK_POOL_SIZE: u64 = 256 * 1024;
/// Link slots in the root object.
pub const SLOTS: usize = 48;
/// Simulated threads.
pub const THREADS: usize = 3;
const NONCE: u64 = 0xa110_c8ed_5eed_0001;
const LANE_BYTES: u32 = 1024;
const MAIN_STEPS: usize = 110;
const RESTART_STEPS: usize = 40;
const MAIN_SCRIPT: u64 = 0x6d61_696e;
const RESTART_SCRIPT: u64 = 0x7265_7374;
const RESTARTS: u32 = 2;
const MAX_EXTRA: u64 = 12;
/// Initial size of the growable pool of `/grow` runs (a heap of 5 pages;
/// it grows up to [`CHECK_POOL_SIZE`] rounded up to a MiB).
const GROW_INITIAL: u64 = 32 * 1024;
/// Request sizes: five run classes (16 B – 2 KiB, 24 pages of runs per
/// thread) and an extent, so the ~60-page heap fills up now and then.
const SIZES: [usize; 6] = [16, 48, 100, 256, 2000, 20_000];

/// Why a check could not run (a violation is not an error: it is in the
/// report): the shared [`ferrite_crash::CheckError`] with the heap's errors.
pub type CheckError = ferrite_crash::CheckError<AllocError>;

impl CheckSubject for AllocError {
    const WHAT: &'static str = "heap";
    const RUNS: &'static str = "ferrite|lock[/torn][/store][/xlane][/restartN], ferrite[/grow]";
}

/// The allocator checks' own run-name flags ([`RunMods::parse`]), in the
/// order names carry them.
const FLAGS: [&str; 2] = ["xlane", "grow"];
const XLANE: usize = 0;
const GROW: usize = 1;

/// The allocator under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// [`Heap`]: runs, bitmaps, lanes.
    Ferrite,
    /// [`LockHeap`]: one lock, block headers.
    Lock,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Ferrite => "ferrite",
            Target::Lock => "lock",
        }
    }

    fn create(self, pool: &Pool) -> Result<Box<dyn PAllocator>, AllocError> {
        Ok(match self {
            Target::Ferrite => Box::new(Heap::create(
                pool.data(),
                HeapOptions::default()
                    .lanes(THREADS as u16)
                    .lane_bytes(LANE_BYTES)
                    .nonce(NONCE),
            )?),
            Target::Lock => Box::new(LockHeap::create(
                pool.data(),
                LockOptions {
                    lane_bytes: LANE_BYTES,
                    nonce: Some(NONCE),
                },
            )?),
        })
    }

    fn open(self, pool: &Pool, fault: Fault) -> Result<Box<dyn PAllocator>, AllocError> {
        Ok(match self {
            Target::Ferrite => Box::new(Heap::open_with_fault(pool.data(), fault)?),
            Target::Lock => Box::new(LockHeap::open_with_fault(pool.data(), fault)?),
        })
    }
}

// ---- deterministic randomness ------------------------------------------------------------

/// splitmix64: cheap, well mixed, and keeps the feature free of dependencies.
struct Mix(u64);

impl Mix {
    fn new(seed: u64) -> Mix {
        Mix(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0; the modulo bias is irrelevant here).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

// ---- the model ------------------------------------------------------------------------

/// What the workload saw acknowledged.
#[derive(Clone, Debug, Default)]
struct Model {
    /// Pool offset of the root object (the slot table).
    root: u64,
    /// Slot values after the last acknowledged publish.
    slots: Vec<u64>,
    /// The publish in flight: (slot, new value).
    pending: Vec<(usize, u64)>,
    /// Blocks published without a link that the workload holds only in
    /// DRAM (the targeted workload's one-word publishes): allocated, but
    /// reachable from no slot.
    held: BTreeSet<u64>,
    /// Held blocks the publish in flight allocates (`true`) or frees.
    pending_held: Vec<(u64, bool)>,
}

fn slot_at(root: u64, i: usize) -> POff<u64> {
    POff::new(root + 8 * i as u64)
}

fn read_slots(pool: &Pool, root: u64) -> Vec<u64> {
    let r = Region::whole(pool.medium().clone());
    (0..SLOTS)
        .map(|i| r.load_u64(slot_at(root, i).raw() as usize))
        .collect()
}

/// Formats the heap and its root object (durable before the workload).
fn setup(pool: &Pool, target: Target) -> Result<(), AllocError> {
    let a = target.create(pool)?;
    let mut t = a.thread()?;
    t.root(SLOTS * 8)?;
    Ok(())
}

// ---- the workload ---------------------------------------------------------------------

fn pick_size(rng: &mut Mix) -> usize {
    let i = rng.below(SIZES.len() * 4);
    // The extent is rare: it takes five of the heap's ~60 pages.
    if i >= SIZES.len() * 3 + SIZES.len() - 1 {
        SIZES[SIZES.len() - 1]
    } else {
        SIZES[i % (SIZES.len() - 1)]
    }
}

fn distinct(rng: &mut Mix, from: &[usize], n: usize) -> Vec<usize> {
    let mut v = from.to_vec();
    let mut out = Vec::new();
    while out.len() < n && !v.is_empty() {
        out.push(v.swap_remove(rng.below(v.len())));
    }
    out
}

/// Makes the calling OS thread act as simulated thread `t` until the guard
/// drops: the explorer's medium attributes flushes and fences to it, and a
/// fence completes only that simulated thread's flushes (as `sfence` orders
/// only its own core's write-backs).
fn sim_thread(t: usize) -> SimThread {
    SimThread::enter(t as u32)
}

/// One handle per simulated thread, each attached on its own simulated
/// thread (attaching may flush and fence).
fn attach(alloc: &dyn PAllocator) -> Vec<Box<dyn AllocThread + Send + '_>> {
    (0..THREADS)
        .map(|t| {
            let _sim = sim_thread(t);
            alloc.thread().expect("attach a simulated thread")
        })
        .collect()
}

/// Runs `steps` scripted steps of the simulated threads on `alloc`,
/// recording in `m` what was acknowledged.
fn drive(alloc: &dyn PAllocator, seed: u64, steps: usize, m: &mut Model) {
    let mut threads = attach(alloc);
    let mut res: Vec<Vec<Reservation>> = (0..THREADS).map(|_| Vec::new()).collect();
    let mut rng = Mix::new(seed);
    let root = m.root;
    for _ in 0..steps {
        let t = rng.below(THREADS);
        let _sim = sim_thread(t);
        let live: Vec<usize> = (0..SLOTS).filter(|&i| m.slots[i] != 0).collect();
        let empty: Vec<usize> = (0..SLOTS).filter(|&i| m.slots[i] == 0).collect();
        match rng.below(10) {
            0..=3 | 9 if res[t].len() < 3 => match threads[t].reserve(pick_size(&mut rng)) {
                Ok(r) => res[t].push(r),
                Err(AllocError::OutOfSpace { .. }) => {}
                Err(e) => panic!("reserve: {e}"),
            },
            4..=6 => {
                let k = res[t].len().min(1 + rng.below(3)).min(empty.len());
                // Grow to a dozen linked blocks, then churn.
                let nfree = if live.len() > 12 { rng.below(3) } else { 0 };
                let frees = distinct(&mut rng, &live, nfree);
                let targets = distinct(&mut rng, &empty, k);
                let allocs: Vec<Reservation> = res[t].drain(..k).collect();
                if allocs.is_empty() && frees.is_empty() {
                    continue;
                }
                let mut links = Vec::new();
                m.pending.clear();
                for (r, &s) in allocs.iter().zip(&targets) {
                    links.push(Link::to(slot_at(root, s), r));
                    m.pending.push((s, r.off().raw()));
                }
                let offs: Vec<POff<u8>> = frees.iter().map(|&s| POff::new(m.slots[s])).collect();
                for &s in &frees {
                    links.push(Link::clear(slot_at(root, s)));
                    m.pending.push((s, 0));
                }
                threads[t]
                    .publish(&Publish {
                        allocs: &allocs,
                        frees: &offs,
                        links: &links,
                    })
                    .expect("publish");
                for &(s, v) in &m.pending {
                    m.slots[s] = v;
                }
                m.pending.clear();
            }
            7 if live.len() > 8 => {
                if let Some(&s) = distinct(&mut rng, &live, 1).first() {
                    m.pending = vec![(s, 0)];
                    threads[t]
                        .free(POff::new(m.slots[s]), Some(slot_at(root, s)))
                        .expect("free");
                    m.slots[s] = 0;
                    m.pending.clear();
                }
            }
            8 => {
                if let Some(r) = res[t].pop() {
                    threads[t].cancel(r).expect("cancel");
                }
            }
            _ => {}
        }
    }
    detach(threads);
}

/// Drops each handle on its own simulated thread (detaching fences).
fn detach(threads: Vec<Box<dyn AllocThread + Send + '_>>) {
    for (i, t) in threads.into_iter().enumerate() {
        let _sim = sim_thread(i);
        drop(t);
    }
}

// ---- the cross-lane workload -------------------------------------------------------------

/// Bytes of the root object of the cross-lane workload: the slot table,
/// then (on its own line) the emulated transaction's redo log.
const XLANE_ROOT: usize = TX_LOG + CACHE_LINE + TX_MAX_OPS * OP_BYTES;
/// Root offset of the transaction log's commit word (operation count and
/// checksum); the operations follow on the next line.
const TX_LOG: usize = SLOTS * 8;
const TX_MAX_OPS: usize = 8;
/// Rounds of the cross-lane script (the second runs on reused lanes,
/// runs and pages).
const XLANE_ROUNDS: usize = 2;

/// Formats the heap and the cross-lane workload's larger root object.
fn setup_xlane(pool: &Pool, target: Target) -> Result<(), AllocError> {
    let a = target.create(pool)?;
    let mut t = a.thread()?;
    t.root(XLANE_ROOT)?;
    Ok(())
}

/// The simulated threads of the cross-lane script.
struct Xlane<'a, 'h> {
    threads: Vec<Box<dyn AllocThread + Send + 'h>>,
    m: &'a mut Model,
    pool: Region,
}

impl Xlane<'_, '_> {
    // Every step enters its simulated thread for all of its operations
    // (guards nest: a step calling another restores it on return).

    fn reserve(&mut self, t: usize, sizes: &[usize]) -> Vec<Reservation> {
        let _sim = sim_thread(t);
        sizes
            .iter()
            .map(|&n| self.threads[t].reserve(n).expect("reserve"))
            .collect()
    }

    /// Thread `t` publishes a new block of `size` bytes linked at slot `s`.
    fn alloc(&mut self, t: usize, s: usize, size: usize) {
        let _sim = sim_thread(t);
        let r = self.reserve(t, &[size]);
        let off = r[0].off().raw();
        let links = [Link::to(slot_at(self.m.root, s), &r[0])];
        self.m.pending = vec![(s, off)];
        self.threads[t]
            .publish(&Publish {
                allocs: &r,
                frees: &[],
                links: &links,
            })
            .expect("publish");
        self.m.slots[s] = off;
        self.m.pending.clear();
    }

    /// Thread `t` frees the block linked at slot `s` and unlinks it.
    fn free(&mut self, t: usize, s: usize) {
        let _sim = sim_thread(t);
        let off = POff::new(self.m.slots[s]);
        self.m.pending = vec![(s, 0)];
        self.threads[t]
            .free(off, Some(slot_at(self.m.root, s)))
            .expect("free");
        self.m.slots[s] = 0;
        self.m.pending.clear();
    }

    /// Thread `t` publishes blocks of `sizes` without links, in one publish
    /// (one word for one block, a lane record for more).
    fn alloc_held(&mut self, t: usize, sizes: &[usize]) -> Vec<u64> {
        let _sim = sim_thread(t);
        let r = self.reserve(t, sizes);
        let offs: Vec<u64> = r.iter().map(|r| r.off().raw()).collect();
        self.m.pending_held = offs.iter().map(|&o| (o, true)).collect();
        self.threads[t]
            .publish(&Publish {
                allocs: &r,
                ..Publish::default()
            })
            .expect("publish");
        self.m.held.extend(&offs);
        self.m.pending_held.clear();
        offs
    }

    /// Thread `t` frees held blocks without unlinking anything, in one publish.
    fn free_held(&mut self, t: usize, offs: &[u64]) {
        let _sim = sim_thread(t);
        for o in offs {
            self.m.held.remove(o);
        }
        self.m.pending_held = offs.iter().map(|&o| (o, false)).collect();
        let frees: Vec<POff<u8>> = offs.iter().map(|&o| POff::new(o)).collect();
        self.threads[t]
            .publish(&Publish {
                frees: &frees,
                ..Publish::default()
            })
            .expect("publish");
        self.m.pending_held.clear();
    }

    /// Thread `t` publishes `p` through [`AllocThread::prepare`] under an
    /// emulated redo transaction: log the operations and commit them with
    /// one fence (a checksummed commit word), apply them, fence, retire the
    /// log, then `commit_prepared`.
    fn transact(&mut self, t: usize, p: &Publish<'_>) {
        let _sim = sim_thread(t);
        let mut ops = Vec::new();
        self.threads[t].prepare(p, &mut ops).expect("prepare");
        assert!(
            ops.len() <= TX_MAX_OPS,
            "the emulated log holds {TX_MAX_OPS}"
        );
        let log = self.m.root as usize + TX_LOG;
        let r = &self.pool;
        let bytes: Vec<u8> = ops.iter().flat_map(|o| o.encode()).collect();
        r.write(log + CACHE_LINE, &bytes);
        r.store_u64(log, tx_commit_word(&bytes));
        r.flush(log + CACHE_LINE, bytes.len());
        r.flush(log, 8);
        r.fence();
        for op in &ops {
            op.apply(r);
        }
        flush_words(r, &ops, &mut Vec::new());
        r.fence();
        r.store_u64(log, 0);
        r.persist(log, 8);
        self.threads[t].commit_prepared(p);
    }

    /// Thread `t` frees the blocks linked at `frees` (unlinking them) and
    /// allocates blocks of the given sizes linked at the given slots, in
    /// one transaction.
    fn tx(&mut self, t: usize, frees: &[usize], allocs: &[(usize, usize)]) {
        let _sim = sim_thread(t);
        let sizes: Vec<usize> = allocs.iter().map(|&(_, n)| n).collect();
        let r = self.reserve(t, &sizes);
        let root = self.m.root;
        let mut links = Vec::new();
        self.m.pending.clear();
        for (res, &(s, _)) in r.iter().zip(allocs) {
            links.push(Link::to(slot_at(root, s), res));
            self.m.pending.push((s, res.off().raw()));
        }
        let offs: Vec<POff<u8>> = frees.iter().map(|&s| POff::new(self.m.slots[s])).collect();
        for &s in frees {
            links.push(Link::clear(slot_at(root, s)));
            self.m.pending.push((s, 0));
        }
        self.transact(
            t,
            &Publish {
                allocs: &r,
                frees: &offs,
                links: &links,
            },
        );
        for &(s, v) in &self.m.pending {
            self.m.slots[s] = v;
        }
        self.m.pending.clear();
    }
}

/// The emulated transaction's commit word for the encoded operations
/// `bytes`: their count, and in the high half a checksum of count and
/// operations, so a log whose lines did not all reach the media is not
/// committed.
fn tx_commit_word(bytes: &[u8]) -> u64 {
    let n = (bytes.len() / OP_BYTES) as u64;
    let mut b = n.to_le_bytes().to_vec();
    b.extend_from_slice(bytes);
    n | u64::from(crc32c::crc32c(&b)) << 32
}

/// Replays the emulated transaction log if it holds a committed
/// transaction, then retires it. The operations are idempotent.
fn tx_replay(pool: &Pool, root: u64) {
    let r = Region::whole(pool.medium().clone());
    let log = root as usize + TX_LOG;
    let w = r.load_u64(log);
    let n = (w & 0xffff_ffff) as usize;
    if n == 0 || n > TX_MAX_OPS {
        return;
    }
    let bytes = r.read_vec(log + CACHE_LINE, n * OP_BYTES);
    if tx_commit_word(&bytes) != w {
        return;
    }
    let ops: Vec<MetaOp> = bytes
        .chunks_exact(OP_BYTES)
        .map(|b| MetaOp::decode(b).expect("a committed log holds valid operations"))
        .collect();
    for op in &ops {
        op.apply(&r);
    }
    flush_words(&r, &ops, &mut Vec::new());
    r.fence();
    r.store_u64(log, 0);
    r.persist(log, 8);
}

/// The root object as the durable root word has it, read before the heap
/// is opened (both heaps keep the root word on their region's second line).
fn durable_root(pool: &Pool) -> u64 {
    let d = pool.data();
    d.load_u64(CACHE_LINE)
}

/// The cross-lane script. Each publish changes a word — bitmap bit,
/// extent header or slot — of the newest record of another lane, written
/// just before by another simulated thread, whose marker is therefore
/// still pending; through each kind of change: a lane record, a one-word
/// publish, a prepared (transaction) publish and a run's creation. Were
/// that marker not durable by the time the change is, recovery would
/// judge the older record unapplied and replay it over the newer,
/// acknowledged publish.
fn drive_xlane(pool: &Pool, alloc: &dyn PAllocator, m: &mut Model) {
    let mut x = Xlane {
        threads: attach(alloc),
        m,
        pool: Region::whole(pool.medium().clone()),
    };
    let (a, b, c) = (0, 1, 2);
    const EXTENT: usize = 20_000;
    for round in 0..XLANE_ROUNDS {
        // A block published by A, freed by B.
        x.alloc(a, 0, 48);
        x.free(b, 0);
        // An extent freed by B; C's new extent reuses its pages (and so
        // its header word).
        x.alloc(a, 1, EXTENT);
        x.free(b, 1);
        x.alloc(c, 2, EXTENT);
        x.free(a, 2);
        // Two unlinked blocks in one record of A (different bitmap words),
        // freed one word at a time by B and C.
        let y = x.alloc_held(a, &[16, 16]);
        x.free_held(b, &y[..1]);
        x.free_held(c, &y[1..]);
        // An extent and a block freed in one record of A; C reallocates
        // the extent's pages with a one-word publish.
        let e = x.alloc_held(b, &[EXTENT, 16]);
        x.free_held(a, &e);
        let f = x.alloc_held(c, &[EXTENT]);
        x.free_held(b, &f);
        // Transactions, each with a part of its own (so that a record
        // replayed over a committed transaction would leave it half done):
        // C frees A's block, then reuses the pages of an extent A freed.
        x.alloc(a, 3, 48);
        x.tx(c, &[3], &[(8, EXTENT)]);
        x.alloc(b, 4, EXTENT);
        x.free(a, 4);
        x.tx(c, &[8], &[(5, EXTENT)]);
        x.free(b, 5);
        // A run carved from the pages of an extent A freed (a hole kept
        // open by the extent after it), and a one-word allocation from it:
        // C's first block of a class it has no run of.
        x.alloc(b, 6, EXTENT);
        x.alloc(b, 7, EXTENT);
        x.free(a, 6);
        let g = x.alloc_held(c, &[[16, 32][round % 2]]);
        x.free_held(c, &g);
        x.free(b, 7);
    }
    let threads = std::mem::take(&mut x.threads);
    detach(threads);
}

// ---- the invariant --------------------------------------------------------------------

/// The invariant after recovery: the root object is the model's; the
/// slots hold the acknowledged values with the publish in flight applied
/// all or nothing; the blocks allocated are exactly those reachable (none
/// linked twice, none leaked, none overlapping); the accounting adds up;
/// and the recovered heap works.
fn check(pool: &Pool, alloc: &dyn PAllocator, m: &Model) -> Result<(), String> {
    let root = alloc.root().raw();
    if root == 0 || root != m.root {
        return Err(format!("root object is {root:#x}, expected {:#x}", m.root));
    }
    let cur = read_slots(pool, root);
    let mut allocated = BTreeMap::new();
    alloc.for_each_allocated(&mut |o, s| {
        allocated.insert(o.raw(), s);
    });
    check_publish_in_flight(&cur, m, &allocated)?;
    let reachable = check_reachable_is_allocated(root, &cur, m, &allocated)?;
    check_accounting(alloc, &allocated)?;
    check_recovered_heap_works(alloc, root, &cur, &reachable, allocated[&root] as u64)
}

/// Slots: acknowledged values, the publish in flight all-or-nothing (its
/// slots and its held blocks together).
fn check_publish_in_flight(
    cur: &[u64],
    m: &Model,
    allocated: &BTreeMap<u64, usize>,
) -> Result<(), String> {
    let pend: BTreeMap<usize, u64> = m.pending.iter().copied().collect();
    let (mut old, mut new) = (true, true);
    for (i, (&now, &acked)) in cur.iter().zip(&m.slots).enumerate() {
        match pend.get(&i) {
            None if now != acked => {
                return Err(format!("slot {i} holds {now:#x}, acknowledged {acked:#x}"));
            }
            None => {}
            Some(&v) => {
                old &= now == acked;
                new &= now == v;
                if now != acked && now != v {
                    return Err(format!(
                        "slot {i} of the publish in flight holds {now:#x}, neither {acked:#x} nor {v:#x}"
                    ));
                }
            }
        }
    }
    for &(b, after) in &m.pending_held {
        let now = allocated.contains_key(&b);
        old &= now != after;
        new &= now == after;
    }
    if !old && !new {
        return Err(format!(
            "the publish in flight (slots {:?}, held blocks {:?}) is half applied: slots {:?}, held allocated {:?}",
            m.pending,
            m.pending_held,
            m.pending.iter().map(|&(s, _)| cur[s]).collect::<Vec<_>>(),
            m.pending_held
                .iter()
                .map(|&(b, _)| allocated.contains_key(&b))
                .collect::<Vec<_>>()
        ));
    }
    Ok(())
}

/// Reachable blocks = allocated blocks, none twice; held blocks are
/// allocated and count as reachable (the workload holds them); allocated
/// blocks do not overlap. Returns the reachable blocks (the root, the
/// linked, the held and the allocated held blocks of the publish in
/// flight).
fn check_reachable_is_allocated(
    root: u64,
    cur: &[u64],
    m: &Model,
    allocated: &BTreeMap<u64, usize>,
) -> Result<BTreeSet<u64>, String> {
    let mut reachable = BTreeSet::new();
    reachable.insert(root);
    for (i, &v) in cur.iter().enumerate() {
        if v != 0 && !reachable.insert(v) {
            return Err(format!("block {v:#x} is linked twice (slot {i})"));
        }
    }
    for &r in &reachable {
        if !allocated.contains_key(&r) {
            return Err(format!(
                "linked block {r:#x} is not allocated (it could be handed out again)"
            ));
        }
    }
    for &h in &m.held {
        if !allocated.contains_key(&h) {
            return Err(format!(
                "held block {h:#x} (published, never freed) is not allocated"
            ));
        }
        if !reachable.insert(h) {
            return Err(format!("held block {h:#x} is also linked"));
        }
    }
    for &(b, _) in &m.pending_held {
        if allocated.contains_key(&b) {
            reachable.insert(b);
        }
    }
    if let Some((&o, &s)) = allocated.iter().find(|(o, _)| !reachable.contains(o)) {
        return Err(format!(
            "block {o:#x} ({s} bytes) is allocated but linked nowhere: a leak"
        ));
    }
    let mut end = 0u64;
    for (&o, &s) in allocated {
        if o < end {
            return Err(format!("allocated blocks overlap at {o:#x}"));
        }
        end = o + s as u64;
    }
    Ok(reachable)
}

/// The allocator's statistics agree with the blocks it lists: bytes in
/// use are their sizes' sum, blocks their count, in use + free the
/// capacity.
fn check_accounting(
    alloc: &dyn PAllocator,
    allocated: &BTreeMap<u64, usize>,
) -> Result<(), String> {
    let st = alloc.stats();
    let sum: u64 = allocated.values().map(|&s| s as u64).sum();
    if st.in_use != sum || st.blocks != allocated.len() as u64 || st.in_use + st.free != st.capacity
    {
        return Err(format!(
            "accounting: in_use {} (blocks sum to {sum}), blocks {} (found {}), free {}, capacity {}",
            st.in_use,
            st.blocks,
            allocated.len(),
            st.free,
            st.capacity
        ));
    }
    Ok(())
}

/// The recovered heap works: every linked block (unlinking its slot) and
/// every other reachable block but the root can be freed, after which only
/// the root's `root_size` bytes are in use, and blocks of 16 B, 2000 B and
/// 20 000 B can be allocated and freed.
fn check_recovered_heap_works(
    alloc: &dyn PAllocator,
    root: u64,
    cur: &[u64],
    reachable: &BTreeSet<u64>,
    root_size: u64,
) -> Result<(), String> {
    let mut t = alloc
        .thread()
        .map_err(|e| format!("attach after recovery: {e}"))?;
    let linked: Vec<usize> = (0..SLOTS).filter(|&i| cur[i] != 0).collect();
    for chunk in linked.chunks(5) {
        let offs: Vec<POff<u8>> = chunk.iter().map(|&i| POff::new(cur[i])).collect();
        let links: Vec<Link> = chunk
            .iter()
            .map(|&i| Link::clear(slot_at(root, i)))
            .collect();
        t.publish(&Publish {
            allocs: &[],
            frees: &offs,
            links: &links,
        })
        .map_err(|e| format!("freeing recovered blocks: {e}"))?;
    }
    let held: Vec<POff<u8>> = reachable
        .iter()
        .filter(|&&b| b != root && !cur.contains(&b))
        .map(|&b| POff::new(b))
        .collect();
    for chunk in held.chunks(5) {
        t.publish(&Publish {
            allocs: &[],
            frees: chunk,
            links: &[],
        })
        .map_err(|e| format!("freeing recovered held blocks: {e}"))?;
    }
    if alloc.stats().in_use != root_size {
        return Err(format!(
            "after freeing everything {} bytes are in use, the root has {root_size}",
            alloc.stats().in_use
        ));
    }
    for size in [16, 2000, 20_000] {
        let o = t
            .alloc(size, None)
            .map_err(|e| format!("allocating {size} bytes after recovery: {e}"))?;
        t.free(o, None)
            .map_err(|e| format!("freeing a new block after recovery: {e}"))?;
    }
    Ok(())
}

// ---- runs ---------------------------------------------------------------------------

/// One exploration: an allocator, a workload, a crash model and a starting point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RunSpec {
    target: Target,
    torn: bool,
    store: bool,
    /// The cross-lane script instead of the seeded main workload.
    xlane: bool,
    restart: Option<u32>,
    /// A growable pool that starts with a few pages: the heap grows as the
    /// workload fills it (Ferrite heap only).
    grow: bool,
    /// Cross-lane recovery replays the transaction log before the heap
    /// judges its records: the wrong order, to show it is caught (tests only).
    tx_first: bool,
}

impl RunSpec {
    fn new(target: Target) -> RunSpec {
        RunSpec {
            target,
            torn: false,
            store: false,
            xlane: false,
            restart: None,
            grow: false,
            tx_first: false,
        }
    }

    fn name(&self) -> String {
        let mods = RunMods::new(self.torn, self.store, self.restart)
            .with_flag(XLANE, self.xlane)
            .with_flag(GROW, self.grow);
        format!("{}{}", self.target.name(), mods.suffix(&FLAGS))
    }

    fn parse(name: &str) -> Result<RunSpec, SpecError> {
        let mut parts = name.split('/');
        let target = match parts.next().unwrap_or_default() {
            "ferrite" => Target::Ferrite,
            "lock" => Target::Lock,
            base => return Err(SpecError::UnknownBase(base.to_string())),
        };
        let m = RunMods::parse(parts, &FLAGS)?;
        let spec = RunSpec {
            torn: m.torn,
            store: m.store,
            xlane: m.flag(XLANE),
            restart: m.restart,
            grow: m.flag(GROW),
            ..RunSpec::new(target)
        };
        if spec.grow && target != Target::Ferrite {
            return Err(SpecError::Conflict("only the Ferrite heap grows"));
        }
        // Restarts start from a crash of the main workload.
        if spec.restart.is_some() && spec.xlane {
            return Err(SpecError::Conflict(
                "a restart starts from the main workload, not the cross-lane one",
            ));
        }
        Ok(spec)
    }

    fn setup(&self, pool: &Pool) -> Result<(), AllocError> {
        if self.xlane {
            setup_xlane(pool, self.target)
        } else {
            setup(pool, self.target)
        }
    }

    /// Opens the heap of a fresh or crashed pool. In the cross-lane
    /// workload the emulated transaction log is replayed in between: after
    /// the heap's own recovery has judged its lane records on the image as
    /// the crash left it (see [`AllocThread::prepare`]), then the heap is
    /// opened again to rebuild its state from the result.
    fn recover(&self, pool: &Pool, fault: Fault) -> Result<Box<dyn PAllocator>, String> {
        let open = || self.target.open(pool, fault).map_err(|e| e.to_string());
        if self.xlane {
            if !self.tx_first {
                drop(open()?);
            }
            tx_replay(pool, durable_root(pool));
        }
        open()
    }

    /// Runs the workload (not for restarts) on `pool`.
    fn workload(&self, pool: &Pool, fault: Fault, m: &mut Model) {
        let a = self.target.open(pool, fault).expect("open the new heap");
        *m = Model {
            root: a.root().raw(),
            slots: read_slots(pool, a.root().raw()),
            ..Model::default()
        };
        if self.xlane {
            drive_xlane(pool, &*a, m);
        } else {
            drive(&*a, MAIN_SCRIPT, MAIN_STEPS, m);
        }
    }
}

fn pool_opts(cfg: &Config) -> PoolOptions {
    let o = PoolOptions::new(&cfg.layout, cfg.pool_size);
    match cfg.max_size {
        Some(m) => o.max_size(m),
        None => o,
    }
}

fn initial_image(cfg: &Config, spec: RunSpec) -> Result<Vec<u8>, CheckError> {
    let p = Pool::create_in_memory(&pool_opts(cfg).domain(cfg.domain))?;
    spec.setup(&p)?;
    Ok(p.image())
}

/// How a simulated run of the main workload ended.
enum Outcome {
    /// Crashed: the post-crash image picked, and what was acknowledged.
    Crashed(Vec<u8>, Model),
    /// Ran to the end, issuing this many fences.
    Finished(u64),
}

/// Runs the main workload on a simulated copy of `initial`, crashing at
/// `at` (or not); a crash image is chosen by the seed `pick`.
fn crash_main(
    cfg: &Config,
    spec: RunSpec,
    fault: Fault,
    initial: &[u8],
    at: Option<CrashAt>,
    pick: u64,
) -> Result<Outcome, CheckError> {
    let (end, counts) = Explorer::new(cfg.clone())
        .simulate(initial, at, |pool, m| spec.workload(pool, fault, m))?;
    match end {
        SimRun::Finished(..) => Ok(Outcome::Finished(counts.fences)),
        SimRun::Crashed(st, model) => {
            // About half of the in-flight units survive, each with one of its
            // possible contents: that is where half-done publishes are.
            let mut rng = Mix::new(pick);
            let img = st.build(|_, u| {
                if rng.coin() {
                    1 + rng.below(u.candidates.len())
                } else {
                    0
                }
            });
            Ok(Outcome::Crashed(img, model))
        }
        SimRun::Panicked(m) => Err(CheckError::Explore(ExploreError::Workload(m))),
    }
}

fn run_one(spec: RunSpec, cfg: &Config, fault: Fault) -> Result<Report, CheckError> {
    let target = spec.target;
    let mut cfg = cfg
        .clone()
        .pool_size(CHECK_POOL_SIZE)
        .tearing(cfg.tearing || spec.torn)
        .crash_on_store(cfg.crash_on_store || spec.store);
    if spec.grow {
        cfg = cfg.pool_size(GROW_INITIAL).max_size(CHECK_POOL_SIZE);
    }
    let recover = |pool: &Pool| spec.recover(pool, fault);
    #[allow(clippy::borrowed_box)] // the explorer hands recovery's value back by reference
    let invariant = |pool: &Pool, a: &Box<dyn PAllocator>, m: &Model| check(pool, &**a, m);
    let Some(r) = spec.restart else {
        return Ok(Explorer::new(cfg.clone())
            .setup(move |pool| spec.setup(pool).expect("create the heap"))
            .explore(
                |pool, m: &mut Model| spec.workload(pool, fault, m),
                recover,
                invariant,
            )?);
    };
    // Restart: crash the main workload at a seeded fence into a seeded image.
    let initial = initial_image(&cfg, spec)?;
    let Outcome::Finished(fences) = crash_main(&cfg, spec, fault, &initial, None, 0)? else {
        unreachable!("no crash was requested")
    };
    let salt = cfg.seed ^ (u64::from(r) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let at = CrashAt::Fence(1 + salt % fences.max(1));
    let Outcome::Crashed(base, acked) = crash_main(&cfg, spec, fault, &initial, Some(at), salt)?
    else {
        unreachable!("the crash point is within the workload")
    };
    // The restart starts from the base image as recovered, which must
    // itself satisfy the invariant (with a planted bug it may not).
    let opened = Pool::open_image(&base, &pool_opts(&cfg), cfg.domain, None)?;
    let start = match target.open(&opened, fault) {
        Ok(a) => {
            let root = a.root().raw();
            let start = Model {
                root,
                slots: read_slots(&opened, root),
                ..Model::default()
            };
            if let Err(e) = check(&opened, &*a, &acked) {
                return Ok(failed_restart(
                    &cfg,
                    at,
                    salt,
                    format!("the restart image violates the invariant: {e}"),
                ));
            }
            start
        }
        Err(e) => {
            return Ok(failed_restart(
                &cfg,
                at,
                salt,
                format!("recovery of the restart image failed: {e}"),
            ));
        }
    };
    drop(opened);
    Ok(Explorer::new(cfg.clone())
        .setup(move |pool| pool.data().write(0, &base[HEADER_SIZE..]))
        .explore(
            |pool, m: &mut Model| {
                *m = start.clone();
                let a = target.open(pool, fault).expect("recover the restart image");
                drive(&*a, RESTART_SCRIPT, RESTART_STEPS, m);
            },
            recover,
            invariant,
        )?)
}

fn plan(target: Target, cfg: &Config) -> Vec<(RunSpec, usize)> {
    let modes: &[bool] = if cfg.tearing { &[true] } else { &[false, true] };
    let mut out = Vec::new();
    for &torn in modes {
        let spec = RunSpec {
            torn,
            ..RunSpec::new(target)
        };
        out.push((spec, 2));
        for r in 0..RESTARTS {
            out.push((
                RunSpec {
                    restart: Some(r),
                    ..spec
                },
                1,
            ));
        }
        if target == Target::Ferrite {
            out.push((RunSpec { grow: true, ..spec }, 1));
        }
        // As much as the main workload: the cross-lane script is where a
        // protocol that leans on another thread's fence shows (it had a
        // second run of its own under a separate per-thread model before
        // every run got per-thread fences).
        out.push((
            RunSpec {
                xlane: true,
                ..spec
            },
            2,
        ));
    }
    out
}

/// The run names [`check_target`] starts with for `cfg` (extra runs reuse
/// the `/store` names).
pub fn run_names(target: Target, cfg: &Config) -> Vec<String> {
    plan(target, cfg).iter().map(|(s, _)| s.name()).collect()
}

/// Checks one allocator with `cfg.budget` crash states split over its runs;
/// `fault` plants a bug ([`Fault::None`] for the real thing). The pool size
/// of `cfg` is replaced by [`CHECK_POOL_SIZE`]; its layout, domain,
/// tearing, crash points, seed, nesting and progress settings are used.
pub fn check_target(
    target: Target,
    cfg: Config,
    fault: Fault,
) -> Result<Vec<(String, Report)>, CheckError> {
    // Leftover budget: main runs with new seeds that also crash between stores.
    let modes: &[bool] = if cfg.tearing { &[true] } else { &[false, true] };
    let extra = |i: u64| RunSpec {
        torn: modes[i as usize % modes.len()],
        store: true,
        ..RunSpec::new(target)
    };
    spend_budget(
        &cfg,
        plan(target, &cfg),
        MAX_EXTRA,
        extra,
        RunSpec::name,
        |spec, c| run_one(spec, c, fault),
    )
}

/// `ferrite check alloc`: the Ferrite heap (about three quarters of the
/// budget) and the single-lock heap (the rest). Returns one report per run.
pub fn check_alloc(cfg: Config) -> Result<Vec<(String, Report)>, CheckError> {
    let ferrite = (cfg.budget * 3 / 4).max(1);
    let mut out = check_target(Target::Ferrite, cfg.clone().budget(ferrite), Fault::None)?;
    let used: usize = out.iter().map(|(_, r)| r.states).sum();
    let rest = cfg.budget.saturating_sub(used).max(1);
    out.extend(check_target(Target::Lock, cfg.budget(rest), Fault::None)?);
    Ok(out)
}

/// Replays one run by name (`ferrite/torn/restart1`), e.g. with `cfg.only`
/// set to a violation's reproducer and `cfg.seed` to its seed.
pub fn check_run(name: &str, cfg: Config) -> Result<Report, CheckError> {
    let spec = RunSpec::parse(name).map_err(|why| CheckError::unknown_run(name, why))?;
    run_one(spec, &cfg, Fault::None)
}

#[cfg(test)]
mod tests;
