//! **InP**: the in-place engine of N-Store as P2 §3.1 measures it — tuples
//! updated where they live, a write-ahead log for atomicity, a persistent
//! B+tree index — rebuilt on Ferrite's blocks so that every write costs
//! **one fence**.
//!
//! # Design
//!
//! - **Tuples**: one allocator block per key (key, value and the block's
//!   capacity in a 16-byte header; `inp/tree.rs` has the format). An update whose
//!   value fits the block (and is at most [`Options::inplace_max`] bytes) is
//!   written *in place*; otherwise a new tuple replaces the old one.
//! - **Checksums** (format 2): every tuple, leaf and inner node carries a
//!   CRC32C seeded by the store nonce and its own offset (`inp/tree.rs`).
//!   Every read verifies each node it walks (a node is copied once per
//!   read and searched in the copy) and the tuple it returns; a damaged
//!   tuple is [`EngineError::DamagedValue`] naming the key, a damaged node
//!   [`EngineError::Corrupt`] naming its offset — never wrong bytes. A
//!   writer verifies what it stages and seals the nodes it changed just
//!   before building the record, so each checksum is logged, flushed and
//!   replayed with the bytes it covers under the write's one fence (an
//!   update in place logs bytes 4..16 of the tuple: length, capacity,
//!   checksum). [`Engine::scrub`] lists every damaged record and node.
//! - **Index**: a persistent B+tree whose nodes are allocator blocks.
//!   Leaves hold 32 unsorted slots (8-byte key prefix + tuple offset and,
//!   format 3, a 16-bit key fingerprint) and a bitmap; inner nodes hold
//!   their own copies of (shortest) separator keys, so a deleted tuple
//!   never leaves a dangling separator. Leaves split in place (the left
//!   half stays, the right half goes to a new leaf), except the rightmost
//!   leaf under a key past all of it: it stays full and the new leaf starts
//!   with that key (an append: ascending loads fill their leaves); no node
//!   is freed except an emptied leaf, which is unlinked from its parent when
//!   the parent keeps two or more children (inner nodes never merge).
//! - **Redo log**: one record per operation or batch (format in `inp/log.rs`):
//!   the bytes every in-place change writes (tuple values, leaf bitmaps and
//!   slots, inner nodes, the root word) plus the allocator's operations,
//!   obtained with `AllocThread::prepare` so that allocation and free commit
//!   with the record and cost no fence of their own (an allocator that
//!   cannot prepare, PMDK's, gets the *intent protocol* below instead).
//!   Blocks the operation allocated (new tuples, new nodes) are written
//!   directly and flushed: no durable pointer reaches them before the
//!   record commits.
//! - **Writers** are serialized by one mutex held across their medium events
//!   (marked with `LockHeld`); **readers** (`get`, `scan`) take a shared
//!   `RwLock` that writers take exclusively only for the short apply phase
//!   (stores only, no flush, no fence), so reads run concurrently with the
//!   expensive part of every write. A scan holds the shared lock while it
//!   calls its visitor.
//! - **One log, not one per session.** Writers are serialized, so a log per
//!   session would buy nothing; a single pair of areas lets every write's
//!   one fence also cover the previous write's in-place stores, whichever
//!   session made them. (N-Store partitions the data per thread instead;
//!   concurrent writers would need latch coupling in the tree and per-
//!   session logs — not done.)
//!
//! # Commit protocol (why one fence)
//!
//! Record `seq` goes to log area `seq % 2`. A write:
//! 1. reserves blocks, stages its node changes in DRAM, writes new blocks;
//! 2. `prepare`s the allocator operations, builds the record;
//! 3. flushes the new blocks and the record, **and the in-place stores of
//!    the previous record** (left unflushed by it), then **fences** — the
//!    commit point;
//! 4. applies the record in place (stores only: no flush in flight when it
//!    unlocks or returns, rule 8), and returns.
//!
//! The applied stores of record `seq` become durable with record `seq+1`'s
//! fence, before record `seq+2` overwrites record `seq`'s area. So after a
//! crash the (up to) two valid records are replayed in order: redo writes
//! are absolute, replaying a complete record again is harmless, and the
//! newer one's writes win. Recovery then retires both (one word) so a later
//! crash never replays them over newer state.
//!
//! Replaying a *complete* record must not undo allocator changes made since
//! outside the log. The lock heap's reserve only splits free space (a replay
//! that marks a split block free again leaves free space free). The Ferrite
//! heap may format a run on the pages of a freed extent, so with it the
//! blocks a record frees go back to the allocator (`commit_prepared`) only
//! once that record can no longer be replayed — after record `seq+2`
//! commits. When space runs out, two empty records release them at once.
//!
//! # Fences and flushed lines per operation
//!
//! | operation | fences | lines flushed |
//! |-----------|--------|---------------|
//! | get, scan | 0 | 0 |
//! | put, update in place (value of `v` bytes) | 1 | record `⌈(64 + v)/64⌉` + value `⌈v/64⌉` + length word 1 (1000 B: 17 + 16 + 1 = 34) |
//! | put, insert (key `k`, value `v`) | 1 + the allocator's own (Ferrite heap: 1 when it starts a run, measured 1.01/insert; lock heap: 2 when its reserve splits a free block, measured 3.12/insert) | tuple `⌈(16 + k + v)/64⌉` + record 2 + leaf bitmap, slot, allocator word 3 (1000 B: 17 + 5 = 22) |
//! | put, out-of-place update (value too big for its block, or over `inplace_max`) | 1 | tuple + record 2 + slot 1 + allocator words 2 |
//! | delete | 1 | record 1 + bitmap 1 + allocator word 1 |
//! | batch of n operations | 1 | the sum of its operations' lines (a record's lines are shared) |
//!
//! The data lines of a write are flushed by the *next* write's fence (or by
//! `quiesce`/drop); they count against the write that stored them. The
//! update, delete and get figures are measured exactly by
//! `tests::one_fence_per_write_none_per_read` on both allocators.
//!
//! One fence is the floor for a write that is durable when it returns: the
//! record must be durable before any of its stores can reach the media, and
//! the caller must not return before it is. Blocks the write allocated are
//! flushed under that same fence, so the record carries their checksums
//! (`log`, "fresh" items): recovery replays the newest record only if they
//! survived. A leaf split adds one new leaf and a logged separator insert
//! (an inner node's changed bytes); an inner split likewise, still within
//! the one fence. Updating in place writes the value twice (log and tuple);
//! an out-of-place update writes it once but pays the allocator (reserve,
//! prepare, a free) — measured slower here (50/50 read/update of 1000-B
//! values, one thread: 270–740 k ops/s in place vs 160–390 k out of place,
//! on a shared, noisy 2-core machine).
//!
//! # Intent protocol (allocators that cannot `prepare`: PMDK's)
//!
//! PMDK applies its heap metadata only inside its own `pmemobj_publish`,
//! so its operations cannot ride in the record. A store on such an
//! allocator (or made with [`Options::intent_allocs`], which the crash
//! checks use on Ferrite's allocators) commits a write instead as:
//!
//! 1. reserve and fill the new blocks, build the record (as above, with
//!    no allocator operations);
//! 2. if the write allocates: write the **intent** — the list of its new
//!    blocks, tagged with the record's seq — to the intent area, flush it
//!    with the new blocks, **fence**; then **publish** the blocks through
//!    the allocator (one publish, carrying also the frees earlier records
//!    owe, when they fit);
//! 3. write the record, flush it and the previous record's in-place
//!    stores, **fence** (the commit), apply in place — as above;
//! 4. the record's own frees are *owed*: published by the next record
//!    (with its blocks, or after its commit), never sooner, because until
//!    the next record commits the one before this may be replayed and may
//!    write into them. The record lists what it owes (its own frees, and
//!    the earlier ones it did not publish before its commit).
//!
//! Recovery, besides the replay: the blocks of an intent whose record
//! did not commit are freed (no committed record links them); the frees
//! the newest committed record owes are completed; both only for blocks
//! the allocator still holds, found by one walk of its blocks
//! (`for_each_allocated`: an offset alone need not tell a freed block from
//! a live one — the lock heap reads a stale header inside a coalesced free
//! span as live), so nothing is freed twice; then the intent is
//! invalidated and the records retired. An older record's write into a
//! block already freed by an interrupted earlier recovery is skipped (the
//! block is dead either way). The intent of transaction `i` is written
//! only after record `i-1`'s commit fence, which made every record up to
//! `i-2` durable: recovery skips those, which is what lets the frees owed
//! by `i-1` be published with `i`'s blocks. Records name the block each
//! write lands in, and recovery checks it against the allocator, since a
//! PMDK store has no heap range in the pool (reads check the mapping's
//! bounds and the node and tuple formats).
//!
//! Fences (Ferrite-counted, measured by
//! `tests::fences_per_op_on_the_intent_protocol`): an update in place is
//! unchanged, **1**. A write that allocates pays **+1** for the intent and
//! the allocator's publish (Ferrite heap: 1–2, so an insert measures 3.13
//! against 1.01; lock heap 5.24 against 3.12). On PMDK an insert of a
//! 1000-byte value measures 2.00 Ferrite fences (intent, commit) plus
//! 2.15 of PMDK's own inside its publish (ferrite-bench's
//! `engine_fences_on_pmdk_are_counted` with `pmdk-count`; PMDK's are not
//! seen by ferrite-pmem's counters), and one more Ferrite fence before
//! the publish when PMDK is on its msync path. A write that only frees
//! pays the publish of what the previous one owes after its commit
//! (delete: 2.11 against 1; on PMDK 1.00 Ferrite fence plus 2.09 of
//! PMDK's). So about 2 fences more per allocating batch
//! (3 with PMDK's publish), none for an in-place update. The Ferrite heap
//! and the lock heap keep the one-fence path above unless asked.
//!
//! # Fixed area (little-endian, pool offsets from the area start)
//!
//! ```text
//!  0  8  magic "FRTINP03" (format version 3: leaves with key fingerprints;
//!        "FRTINP02", version 2, without them: both are opened)
//!  8  8  root node (pool offset; 0 = empty tree)
//! 16  8  retired: records with seq <= this are dead (set by recovery)
//! 24  8  I: bytes of the intent area (0: no intent protocol; a multiple of 64)
//! 32 32  zero
//! 64     log area 0 (L bytes), log area 1 (L bytes), intent area (I bytes);
//!        L = (area - 64 - I) / 2, rounded down to a multiple of 64
//! ```
//!
//! The intent area holds one intent record (`inp/log.rs`), overwritten by
//! the next allocating write; recovery invalidates it (first word zero).

mod commit;
mod fault;
mod log;
mod read;
mod recovery;
mod scrub;
#[cfg(test)]
mod tests;
mod tree;
mod write;

use crate::breakdown::{self, Measured, Phase};
use crate::ctx::EngineCtx;
use crate::gate::{SessionGate, Ticket};
use crate::{
    AllocKind, Damage, Engine, EngineError, EngineKind, EngineRecovery, EngineStats, MAX_KEY, Op,
    Result, Scrub, Session, SnapshotRead, StoreOptions, Walk, check_key, check_ops, check_value,
};
use ferrite_alloc::{AllocThread, Heap, LockHeap, MetaOp, PAllocator, Publish, Reservation};
use ferrite_pmem::{HEADER_SIZE, LockHeld, POff, Region};
use log::{Item, REC_HDR, RecBuf};
use parking_lot::{Mutex, RwLock};
use read::{InpReader, InpSnapshot, get_locked, scan_back_locked, scan_locked};
pub(crate) use recovery::open;
use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tree::{
    FULL, Geo, INNER_BYTES, InnerD, LEAF_BYTES, MAX_DEPTH, Node, NodeBuf, SLOTS, Src, TUPLE_HDR,
    corrupt, descend, init_leaf, leaf_bitmap, leaf_find, leaf_order, leaf_sorted, prefix,
    set_bitmap, set_slot, shortest_sep, slot,
};
use write::InpSession;

// Planted bugs: public only with the `checks` feature (`fault.rs`).
#[cfg(feature = "checks")]
pub use fault::Fault;
#[cfg(not(feature = "checks"))]
pub(crate) use fault::Fault;

/// Tuning knobs of this engine.
#[derive(Clone, Debug)]
pub struct Options {
    /// Bytes of each of the two log areas (a record, hence a batch, must
    /// fit one). Fixed at create.
    pub log_bytes: usize,
    /// Largest value updated in place; larger ones get a new tuple (their
    /// bytes would be written twice, once in the log).
    pub inplace_max: usize,
    /// Use the intent protocol (module docs) even on an allocator that
    /// can `prepare`. Fixed at create; a store on an allocator that cannot
    /// prepare (PMDK's) always uses it. For the checks: it lets the crash
    /// simulator, which runs only Ferrite's allocators, explore the
    /// protocol PMDK stores run.
    pub intent_allocs: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            log_bytes: 128 << 10,
            inplace_max: 16 << 10,
            intent_allocs: false,
        }
    }
}

impl Options {
    /// Small sizes for the crash checks: two 16 KiB log areas (a batch of
    /// the checks' largest values fits), in-place updates up to 1 KiB (so
    /// both the in-place and the new-tuple paths run).
    ///
    /// The checks also run the intent protocol (`intent_allocs`, what an
    /// InP store on PMDK runs, which the crash simulator cannot host) on
    /// the Ferrite heap and the lock heap: `checks::Run::Intent`.
    pub fn for_checks() -> Options {
        Options {
            log_bytes: 16 << 10,
            inplace_max: 1024,
            intent_allocs: false,
        }
    }
}

/// Fixed-area magic: `FRTINP` and the two-digit format version. Version
/// 2 added the checksums of tuples and nodes (`inp/tree.rs`); a version-1
/// store has none where they now lie, and is refused
/// ([`EngineError::EngineFormat`]). Version 3, what a store is created
/// with, adds key fingerprints to the leaves' slots (`inp/tree.rs`, "Leaf");
/// a version-2 store is read and written as it is, and keeps its format.
const HDR_MAGIC: &[u8; 8] = b"FRTINP03";
/// The previous format, still opened (leaves without fingerprints).
const HDR_MAGIC_V2: &[u8; 8] = b"FRTINP02";
const HDR_MAGIC_BASE: &[u8; 6] = b"FRTINP";
const FORMAT_VERSION: u32 = 3;
/// Room past a record's length in its overflow block, for the allocator
/// operations of the block itself (appended once the block is reserved).
const OVF_SLACK: usize = 1024;
const HDR_BYTES: u64 = 64;
const ROOT_AT: u64 = 8;
const RETIRED_AT: u64 = 16;
const INTENT_BYTES_AT: u64 = 24;

/// True when `after` differs from `before` (one 64-byte line of the pool)
/// only in the retired-sequence word of a session's log header: the one
/// store every InP recovery makes even on a cleanly closed store, whose
/// newest records it replays (idempotently) and then retires. For
/// `pool check --deep`, which must not call that an unclean close.
pub(crate) fn only_retired_changed(before: &[u8], after: &[u8]) -> bool {
    let r = RETIRED_AT as usize;
    before.len() == HDR_BYTES as usize
        && after.len() == before.len()
        && (&before[..8] == HDR_MAGIC || &before[..8] == HDR_MAGIC_V2)
        && before[..r] == after[..r]
        && before[r + 8..] == after[r + 8..]
}

/// Whether a store made with `opts` uses the intent protocol.
fn wants_intent(opts: &StoreOptions) -> bool {
    opts.inp.intent_allocs || opts.allocator == AllocKind::Pmdk
}

fn log_bytes(opts: &StoreOptions) -> usize {
    opts.inp.log_bytes.max(4096).next_multiple_of(64)
}

/// Bytes of the intent area next to log areas of `log` bytes: a record
/// names each block it allocates in a 16-byte item, its intent in 8
/// bytes, so half a log area (plus the header) holds the intent of any
/// record that fits one. (Page rounding may make the log areas a little
/// larger; an intent that does not fit is refused as a batch too large.)
fn intent_bytes(log: usize) -> usize {
    (log / 2 + log::INTENT_HDR).next_multiple_of(64)
}

pub(crate) fn fixed_area_bytes(opts: &StoreOptions) -> usize {
    let log = log_bytes(opts);
    HDR_BYTES as usize
        + 2 * log
        + if wants_intent(opts) {
            intent_bytes(log)
        } else {
            0
        }
}

/// Bytes of each log area in an area of `area_len` bytes whose intent
/// area takes `intent_len` (0: none).
fn log_cap(area_len: u64, intent_len: u64) -> usize {
    (area_len
        .saturating_sub(HDR_BYTES)
        .saturating_sub(intent_len)
        / 2) as usize
        & !63
}

/// Volatile counters.
#[derive(Default)]
struct Counters {
    commits: AtomicU64,
    inplace: AtomicU64,
    outplace: AtomicU64,
    splits: AtomicU64,
    appends: AtomicU64,
    leaves_freed: AtomicU64,
    rotations: AtomicU64,
    intents: AtomicU64,
    publishes: AtomicU64,
    /// Records too large for their log area (stored in a block of their own).
    overflows: AtomicU64,
}

/// Writer state, under the writer mutex.
struct WState {
    /// Last committed record.
    seq: u64,
    /// Ranges the last record stored in place, not yet flushed.
    pending: Vec<(u64, usize)>,
    /// Ferrite heap: frees of record `seq`, released after `seq + 2` commits.
    held: VecDeque<(u64, Vec<POff<u8>>)>,
    /// Intent protocol: frees of committed records not yet published (the
    /// last record's, and any whose publish failed); the next record
    /// publishes them (module docs).
    owed: Vec<POff<u8>>,
    /// Intent protocol: the intent record being written.
    ibuf: Vec<u8>,
    rec: RecBuf,
    /// The pointer record of a record too large for its log area.
    ptr: RecBuf,
    /// The block holding record `seq`, when it was too large for its log
    /// area: the next record frees it (log module docs).
    ovf: Option<(POff<u8>, u64)>,
    metaops: Vec<MetaOp>,
    tmp: Vec<u8>,
}

struct Inp {
    geo: Geo,
    area_off: u64,
    log_cap: usize,
    /// Intent protocol: pool offset and bytes of the intent area (bytes 0:
    /// the store commits allocator operations in its records instead).
    intent_at: u64,
    intent_cap: usize,
    seed: u32,
    alloc: Arc<dyn PAllocator>,
    hold_frees: bool,
    opts: Options,
    fault: Option<Fault>,
    w: Mutex<WState>,
    rw: RwLock<()>,
    gate: SessionGate,
    keys: AtomicU64,
    recovery: EngineRecovery,
    st: Counters,
}

fn fault_of(opts: &StoreOptions) -> Option<Fault> {
    match opts.fault {
        crate::Fault::Inp(f) => Some(f),
        _ => None,
    }
}

/// Bounds every node and tuple offset is checked against before it is
/// read: the heap area of a Ferrite pool; on an external allocator (no
/// heap area in the pool, `heap_len == 0`) the whole mapping, past its
/// first line (so that 0 is never a block). Recovery checks the blocks a
/// record writes against the allocator itself on the intent protocol.
fn heap_bounds(ctx: &EngineCtx) -> (u64, u64) {
    if ctx.sb.heap_len == 0 {
        return (64, ctx.pool.len() as u64);
    }
    let lo = HEADER_SIZE as u64 + ctx.sb.heap_off;
    (lo, lo + ctx.sb.heap_len)
}

pub(crate) fn create(ctx: EngineCtx, opts: &StoreOptions) -> Result<Box<dyn Engine>> {
    let intent_len = if wants_intent(opts) {
        intent_bytes(log_bytes(opts)) as u64
    } else {
        0
    };
    let cap = log_cap(ctx.area_len, intent_len);
    if cap < 4096 {
        return Err(EngineError::BadOption("inp: log area too small".into()));
    }
    let p = &ctx.pool;
    let a = ctx.area_off as usize;
    p.fill(a, HDR_BYTES as usize, 0);
    p.write(a, HDR_MAGIC);
    p.store_u64((a as u64 + INTENT_BYTES_AT) as usize, intent_len);
    p.fill(a + HDR_BYTES as usize, 64, 0);
    p.fill(a + HDR_BYTES as usize + cap, 64, 0);
    p.flush(a + HDR_BYTES as usize, 64);
    p.flush(a + HDR_BYTES as usize + cap, 64);
    if intent_len != 0 {
        p.fill(a + HDR_BYTES as usize + 2 * cap, 64, 0);
        p.flush(a + HDR_BYTES as usize + 2 * cap, 64);
    }
    p.persist(a, HDR_BYTES as usize);
    let rec = EngineRecovery {
        detail: "created".into(),
        ..EngineRecovery::default()
    };
    Ok(Box::new(Inp::new(ctx, opts, 0, 0, rec)))
}

/// Reads the fixed area's intent-area length and checks it: `(intent
/// bytes, log area bytes)`.
fn fixed_layout(ctx: &EngineCtx) -> Result<(u64, usize)> {
    let p = &ctx.pool;
    let a = ctx.area_off;
    let mut magic = [0u8; 8];
    p.read(a as usize, &mut magic);
    let intent_len = p.load_u64((a + INTENT_BYTES_AT) as usize);
    let known = &magic == HDR_MAGIC || &magic == HDR_MAGIC_V2;
    if !known
        && &magic[..6] == HDR_MAGIC_BASE
        && let Some(found) = std::str::from_utf8(&magic[6..])
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
    {
        return Err(EngineError::EngineFormat {
            engine: "inp",
            found,
            supported: FORMAT_VERSION,
        });
    }
    if !known
        || !intent_len.is_multiple_of(64)
        || intent_len > ctx.area_len.saturating_sub(HDR_BYTES)
    {
        return Err(corrupt("bad fixed-area magic or intent area"));
    }
    let cap = log_cap(ctx.area_len, intent_len);
    if cap < 4096 {
        return Err(corrupt("log areas too small"));
    }
    if intent_len == 0 && ctx.sb.allocator == AllocKind::Pmdk {
        return Err(corrupt(
            "the store has no intent area, but its allocator (pmdk) cannot prepare allocator operations into the log",
        ));
    }
    Ok((intent_len, cap))
}

impl Inp {
    fn new(ctx: EngineCtx, opts: &StoreOptions, seq: u64, keys: u64, rec: EngineRecovery) -> Inp {
        let (lo, hi) = heap_bounds(&ctx);
        let intent_len = ctx.pool.load_u64((ctx.area_off + INTENT_BYTES_AT) as usize);
        let log_cap = log_cap(ctx.area_len, intent_len);
        let fingerprints = {
            let mut magic = [0u8; 8];
            ctx.pool.read(ctx.area_off as usize, &mut magic);
            &magic != HDR_MAGIC_V2
        };
        Inp {
            geo: Geo {
                pool: ctx.pool,
                lo,
                hi,
                seed: log::seed(ctx.sb.nonce),
                verify: opts.verify,
                fingerprints,
                cache: Default::default(),
            },
            area_off: ctx.area_off,
            log_cap,
            intent_at: ctx.area_off + HDR_BYTES + 2 * log_cap as u64,
            intent_cap: intent_len as usize,
            seed: log::seed(ctx.sb.nonce),
            alloc: ctx.alloc,
            hold_frees: ctx.sb.allocator == AllocKind::Ferrite,
            opts: opts.inp.clone(),
            fault: fault_of(opts),
            w: Mutex::new(WState {
                seq,
                pending: Vec::new(),
                held: VecDeque::new(),
                owed: Vec::new(),
                ibuf: Vec::new(),
                rec: RecBuf::default(),
                ptr: RecBuf::default(),
                ovf: None,
                metaops: Vec::new(),
                tmp: Vec::new(),
            }),
            rw: RwLock::new(()),
            gate: SessionGate::new(ctx.sb.sessions as usize),
            keys: AtomicU64::new(keys),
            recovery: rec,
            st: Counters::default(),
        }
    }

    fn pool(&self) -> &Region {
        &self.geo.pool
    }

    fn root(&self) -> u64 {
        self.pool().load_u64((self.area_off + ROOT_AT) as usize)
    }

    fn area_at(&self, seq: u64) -> usize {
        (self.area_off + HDR_BYTES) as usize + (seq % 2) as usize * self.log_cap
    }

    /// Counts live keys (leaf bitmaps), bounded against cycles: `(keys,
    /// damaged nodes)`. A node below the root that fails its checksum is
    /// not counted and does not stop the count: the store opens, and reads
    /// below it report the damage.
    fn count_keys(&self) -> Result<(u64, u64)> {
        let root = self.root();
        if root == 0 {
            return Ok((0, 0));
        }
        let mut keys = 0u64;
        let mut damaged = 0u64;
        let mut stack = vec![(root, 0usize)];
        let mut seen = 0usize;
        let max_nodes = ((self.geo.hi - self.geo.lo) as usize / LEAF_BYTES).max(1);
        let mut nb = tree::node_buf();
        while let Some((n, depth)) = stack.pop() {
            seen += 1;
            if seen > max_nodes || depth > MAX_DEPTH {
                return Err(corrupt("more nodes than the heap holds (a cycle?)"));
            }
            match self.geo.load_media(n, &mut nb) {
                Ok(Node::Leaf) => keys += u64::from(leaf_bitmap(&nb[..])?.count_ones()),
                Ok(Node::Inner(k)) => {
                    for i in 0..k {
                        stack.push((tree::inner_child_at(&nb[..], i), depth + 1));
                    }
                }
                // The root is the fixed area's pointer: a store whose root
                // does not verify holds nothing readable, and is refused.
                Err(e) if n == root => return Err(e),
                Err(_) => damaged += 1,
            }
        }
        Ok((keys, damaged))
    }
}

impl Drop for Inp {
    fn drop(&mut self) {
        let mut w = std::mem::replace(
            self.w.get_mut(),
            WState {
                seq: 0,
                pending: Vec::new(),
                held: VecDeque::new(),
                owed: Vec::new(),
                ibuf: Vec::new(),
                rec: RecBuf::default(),
                ptr: RecBuf::default(),
                ovf: None,
                metaops: Vec::new(),
                tmp: Vec::new(),
            },
        );
        self.settle(&mut w);
    }
}

impl Engine for Inp {
    fn kind(&self) -> EngineKind {
        EngineKind::Inp
    }

    fn session(&self) -> Result<Box<dyn Session + Send + '_>> {
        let (ticket, th) = self.gate.enter(&*self.alloc)?;
        Ok(Box::new(InpSession {
            eng: self,
            th,
            _ticket: ticket,
            op: OpState::default(),
            path: Vec::with_capacity(MAX_DEPTH),
            bufs: Bufs::new(),
        }))
    }

    fn reader(&self) -> Box<dyn SnapshotRead + Send + '_> {
        Box::new(InpReader {
            eng: self,
            path: Vec::with_capacity(MAX_DEPTH),
            bufs: Bufs::new(),
        })
    }

    fn snapshot(&self) -> Result<Box<dyn SnapshotRead + Send + '_>> {
        Ok(Box::new(InpSnapshot {
            eng: self,
            _r: self.rw.read(),
            path: Vec::with_capacity(MAX_DEPTH),
            bufs: Bufs::new(),
        }))
    }

    fn len(&self) -> Result<u64> {
        Ok(self.keys.load(Ordering::Acquire))
    }

    fn allocator(&self) -> &dyn PAllocator {
        &*self.alloc
    }

    fn recovery(&self) -> &EngineRecovery {
        &self.recovery
    }

    fn stats(&self) -> EngineStats {
        let s = &self.st;
        EngineStats {
            keys: self.keys.load(Ordering::Relaxed),
            detail: format!(
                "commits {}, in-place updates {}, out-of-place updates {}, leaf splits {} ({} of them appends), empty leaves freed {}, free rotations {}, intents {}, allocator publishes {}, records in blocks of their own {}",
                s.commits.load(Ordering::Relaxed),
                s.inplace.load(Ordering::Relaxed),
                s.outplace.load(Ordering::Relaxed),
                s.splits.load(Ordering::Relaxed),
                s.appends.load(Ordering::Relaxed),
                s.leaves_freed.load(Ordering::Relaxed),
                s.rotations.load(Ordering::Relaxed),
                s.intents.load(Ordering::Relaxed),
                s.publishes.load(Ordering::Relaxed),
                s.overflows.load(Ordering::Relaxed),
            ),
        }
    }

    fn quiesce(&self) -> Result<()> {
        let _held = LockHeld::enter();
        let mut w = self.w.lock();
        if !w.held.is_empty() || !w.owed.is_empty() {
            // Give held-back frees to the allocator: its accounting then
            // matches the tree.
            let mut th = self.alloc.thread()?;
            self.rotate(&mut w, &mut *th)?;
        }
        self.settle(&mut w);
        Ok(())
    }

    fn scrub(&self, pace: &mut dyn FnMut(u64)) -> Result<Scrub> {
        let _r = self.rw.read();
        let mut out = Scrub {
            per_record: true,
            ..Scrub::default()
        };
        let root = self.root();
        if root != 0 {
            let mut seen = HashSet::new();
            let mut bufs = Bufs::new();
            self.scrub_node(
                root,
                0,
                (None, None, None),
                &mut seen,
                &mut bufs,
                &mut out,
                pace,
            );
        }
        Ok(out)
    }

    fn remove_damaged(&self, damaged: &[Damage]) -> Result<Vec<String>> {
        let tuples: Vec<&Damage> = damaged.iter().filter(|d| d.leaf != 0).collect();
        if tuples.is_empty() {
            return Ok(Vec::new());
        }
        let (ticket, th) = self.gate.enter(&*self.alloc)?;
        let mut s = InpSession {
            eng: self,
            th,
            _ticket: ticket,
            op: OpState::default(),
            path: Vec::with_capacity(MAX_DEPTH),
            bufs: Bufs::new(),
        };
        let mut done = Vec::new();
        s.write(|w| {
            done.clear();
            for d in &tuples {
                if w.unlink_slot(d.leaf, d.slot as usize, d.off)? {
                    done.push(format!(
                        "removed the damaged record {} (tuple {:#x}, slot {} of leaf {:#x}; its block freed)",
                        d.key.as_deref().map_or_else(|| "?".into(), crate::error::show_key),
                        d.off,
                        d.slot,
                        d.leaf
                    ));
                }
            }
            Ok(())
        })?;
        Ok(done)
    }

    fn walk(&self) -> Result<Walk> {
        // The block of a record too large for its log area is referenced
        // by the log until the next record (writer state first: a writer
        // takes it before the tree lock).
        let ovf = self.w.lock().ovf;
        let _r = self.rw.read();
        let mut out = Walk::default();
        let root = self.root();
        if root != 0 {
            let mut seen = HashSet::new();
            self.walk_node(root, 0, (None, None, None), &mut out, &mut seen)?;
        }
        if let Some((off, len)) = ovf {
            out.blocks.push((off.raw(), len));
        }
        Ok(out)
    }
}

/// A node copy a writer changes, logged (or, when `fresh`, written
/// directly) at commit.
struct Staged {
    buf: Vec<u8>,
    fresh: bool,
}

/// Entries an operation's cleared tables and lists keep room for; a
/// larger batch allocates its own and gives them back when the next
/// operation starts.
const KEEP_ENTRIES: usize = 4096;

/// A writer's staged node copies by node base: a hash index over a list,
/// so that the look-ups of every level of every descent of a large batch
/// (thousands of staged nodes) cost a hash, not an ordered search.
/// [`Staging::sort`] puts the list in address order once, at commit: the
/// record writes the nodes in that order (deterministic records, and
/// neighbouring nodes flushed together).
#[derive(Default)]
struct Staging {
    index: rustc_hash::FxHashMap<u64, usize>,
    nodes: Vec<(u64, Staged)>,
}

impl Staging {
    fn get(&self, base: &u64) -> Option<&Staged> {
        self.index.get(base).map(|&i| &self.nodes[i].1)
    }

    fn get_mut(&mut self, base: &u64) -> Option<&mut Staged> {
        self.index.get(base).map(|&i| &mut self.nodes[i].1)
    }

    fn contains_key(&self, base: &u64) -> bool {
        self.index.contains_key(base)
    }

    /// Stages `st` for `base` (replacing an earlier copy).
    fn insert(&mut self, base: u64, st: Staged) {
        match self.index.get(&base) {
            Some(&i) => self.nodes[i].1 = st,
            None => {
                self.index.insert(base, self.nodes.len());
                self.nodes.push((base, st));
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Empties the staging, keeping room for [`KEEP_ENTRIES`] nodes: a
    /// hash map's clear costs its capacity (it resets every control
    /// byte), so a map left at a huge batch's size made every later put
    /// pay for it (36 % of a single put's time after a 5 M-key load).
    fn clear(&mut self) {
        self.index.clear();
        self.nodes.clear();
        self.index.shrink_to(KEEP_ENTRIES);
        self.nodes.shrink_to(KEEP_ENTRIES);
    }

    /// Address order (the index follows).
    fn sort(&mut self) {
        self.nodes.sort_unstable_by_key(|(base, _)| *base);
        for (i, (base, _)) in self.nodes.iter().enumerate() {
            self.index.insert(*base, i);
        }
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = (&u64, &mut Staged)> {
        self.nodes.iter_mut().map(|(b, s)| (&*b, s))
    }
}

impl<'a> IntoIterator for &'a Staging {
    type Item = (&'a u64, &'a Staged);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (u64, Staged)>,
        fn(&'a (u64, Staged)) -> (&'a u64, &'a Staged),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.nodes.iter().map(|(b, s)| (b, s))
    }
}

/// One operation (or batch) being built.
#[derive(Default)]
struct OpState {
    /// Node base → its staged copy.
    staged: Staging,
    res: Vec<Reservation>,
    fresh_tuples: Vec<(u64, usize, u32)>,
    frees: Vec<POff<u8>>,
    free_ranges: Vec<(u64, u64)>,
    /// Logged in-place tuple writes: (tuple, pool offset, bytes).
    writes: Vec<(u64, u64, Vec<u8>)>,
    /// Planted bug `ChecksumAfterFence` only: checksums stored after the
    /// commit, neither logged nor flushed.
    late: Vec<(u64, [u8; 4])>,
    new_root: Option<u64>,
    inplace_bytes: usize,
    ops: usize,
    keys_delta: i64,
    inplace: u64,
    outplace: u64,
    splits: u64,
    /// Splits of the rightmost leaf by a key past all of it (`appends`).
    appends: u64,
    leaves_freed: u64,
    /// The leaf the last look-up of this operation descended to, while the
    /// tree's shape is as that descent saw it (the session's path still
    /// leads to it): a next key inside its span skips the descent (a batch
    /// is applied in key order, so most keys land in the leaf before).
    /// Cleared by every change of shape: a node made or unlinked.
    finger: Option<u64>,
}

impl OpState {
    fn clear(&mut self) {
        self.finger = None;
        self.staged.clear();
        debug_assert!(self.res.is_empty());
        self.fresh_tuples.clear();
        self.frees.clear();
        self.free_ranges.clear();
        self.writes.clear();
        self.late.clear();
        // A huge batch's lists go with it (a session keeps its OpState).
        self.fresh_tuples.shrink_to(KEEP_ENTRIES);
        self.frees.shrink_to(KEEP_ENTRIES);
        self.free_ranges.shrink_to(KEEP_ENTRIES);
        self.writes.shrink_to(KEEP_ENTRIES);
        self.new_root = None;
        self.inplace_bytes = 0;
        self.ops = 0;
        self.keys_delta = 0;
        self.inplace = 0;
        self.outplace = 0;
        self.splits = 0;
        self.appends = 0;
        self.leaves_freed = 0;
    }
}

/// A reader's scratch: a key, a verified node copy, a value.
struct Bufs {
    kbuf: Box<[u8; MAX_KEY]>,
    nb: Box<NodeBuf>,
    val: Vec<u8>,
    /// A leaf's slots in key order (scans).
    order: Vec<(u64, u64)>,
}

impl Bufs {
    fn new() -> Bufs {
        Bufs {
            kbuf: Box::new([0u8; MAX_KEY]),
            nb: tree::node_buf(),
            val: Vec::new(),
            order: Vec::with_capacity(tree::SLOTS),
        }
    }
}
