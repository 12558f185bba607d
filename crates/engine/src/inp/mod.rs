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
//!   Leaves hold 32 unsorted slots (8-byte key prefix + tuple offset) and a
//!   bitmap; inner nodes hold their own copies of (shortest) separator keys,
//!   so a deleted tuple never leaves a dangling separator. Leaves split in
//!   place (the left half stays, the right half goes to a new leaf); no node
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
//!  0  8  magic "FRTINP02" (format version 2: checksummed tuples and nodes)
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

mod log;
mod recovery;
#[cfg(test)]
mod tests;
mod tree;

use crate::breakdown::{self, Measured, Phase};
use crate::gate::{SessionGate, Ticket};
use crate::store::EngineCtx;
use crate::{
    AllocKind, Damage, Engine, EngineError, EngineKind, EngineRecovery, EngineStats, MAX_KEY, Op,
    Result, Scrub, Session, SnapshotRead, StoreOptions, Walk, check_key, check_ops, check_value,
};
use ferrite_alloc::{AllocThread, Heap, LockHeap, MetaOp, PAllocator, Publish, Reservation};
use ferrite_pmem::{HEADER_SIZE, LockHeld, POff, Region};
use log::{Item, REC_HDR, RecBuf};
use parking_lot::{Mutex, RwLock};
pub(crate) use recovery::open;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tree::{
    FULL, Geo, INNER_BYTES, InnerD, LEAF_BYTES, MAX_DEPTH, Node, NodeBuf, SLOTS, Src, TUPLE_HDR,
    corrupt, descend, init_leaf, leaf_bitmap, leaf_find, leaf_order, leaf_sorted, prefix,
    set_bitmap, set_slot, shortest_sep, slot,
};

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

/// Planted bugs of this engine (checks only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The record is not flushed before the commit fence: it may not be
    /// durable when the write returns (a later crash loses an acknowledged
    /// write, or replays a torn one).
    SkipRecordFlush,
    /// The record's changes are applied in place *before* the commit fence:
    /// a crash at that fence can leave part of an unacknowledged operation
    /// (a bitmap bit without its slot, half a value).
    ApplyBeforeCommit,
    /// The previous record's in-place stores are never flushed: once a
    /// later record overwrites its log area, they may be lost.
    SkipDeferredFlush,
    /// Intent protocol: the blocks are published without an intent
    /// record, so a crash between the publish and the commit leaks them.
    SkipIntent,
    /// Intent protocol: the record's frees are published before its
    /// commit, so a crash before the commit leaves the committed tree
    /// pointing at freed blocks.
    FreeBeforeCommit,
    /// A record too large for its log area is stored in its block without
    /// a flush: the pointer record may be durable while the record is not,
    /// and an acknowledged batch is lost.
    SkipOverflowFlush,
    /// An update in place logs its value but stores the tuple's new
    /// checksum only after the commit fence, outside the record and every
    /// flush: after a crash the replayed value meets the old checksum, and
    /// an acknowledged value reads as damaged.
    ChecksumAfterFence,
}

impl Fault {
    /// The faults of the commit path every store runs (the checks'
    /// `planted_faults`).
    pub const ALL: &'static [Fault] = &[
        Fault::SkipRecordFlush,
        Fault::ApplyBeforeCommit,
        Fault::SkipDeferredFlush,
        Fault::SkipOverflowFlush,
        Fault::ChecksumAfterFence,
    ];
    /// The faults of the intent protocol only (a store without it never
    /// reaches them).
    pub const INTENT: &'static [Fault] = &[Fault::SkipIntent, Fault::FreeBeforeCommit];
}

/// Fixed-area magic: `FRTINP` and the two-digit format version. Version
/// 2 added the checksums of tuples and nodes (`inp/tree.rs`); a version-1
/// store has none where they now lie, and is refused
/// ([`EngineError::EngineFormat`]).
const HDR_MAGIC: &[u8; 8] = b"FRTINP02";
const HDR_MAGIC_BASE: &[u8; 6] = b"FRTINP";
const FORMAT_VERSION: u32 = 2;
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
        && &before[..8] == HDR_MAGIC
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

/// An error's message without the "corrupt store: " every `Corrupt` has
/// (a scrub lists many: the word says nothing there).
fn bare(e: &EngineError) -> String {
    let s = e.to_string();
    s.strip_prefix("corrupt store: ").unwrap_or(&s).to_string()
}

/// Key bounds and level a subtree must respect (walk).
type Bounds<'a> = (Option<&'a [u8]>, Option<&'a [u8]>, Option<u16>);

/// Where a writer found a key: its leaf, and its slot and tuple if present
/// (`None`: the tree is empty).
type Found = Option<(u64, Option<(usize, u64)>)>;

/// Volatile counters.
#[derive(Default)]
struct Counters {
    commits: AtomicU64,
    inplace: AtomicU64,
    outplace: AtomicU64,
    splits: AtomicU64,
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
    if &magic != HDR_MAGIC
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
    if &magic != HDR_MAGIC
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
        Inp {
            geo: Geo {
                pool: ctx.pool,
                lo,
                hi,
                seed: log::seed(ctx.sb.nonce),
                verify: opts.verify,
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

    /// Makes the last record's in-place stores durable (quiesce, drop).
    fn settle(&self, w: &mut WState) {
        if !w.pending.is_empty() {
            for &(o, l) in &w.pending {
                self.pool().flush(o as usize, l);
            }
            w.pending.clear();
            self.pool().fence();
        }
    }

    /// Builds record `w.seq + 1` of `op` in `w.rec` (not yet finished):
    /// nodes sealed, the allocator's operations prepared, the staged
    /// nodes' changed words, the in-place writes, the root, the fresh
    /// blocks and (intent protocol) the frees. Refuses a record the
    /// intent protocol's log area cannot hold.
    fn build_record(
        &self,
        w: &mut WState,
        th: &mut (dyn AllocThread + '_),
        op: &mut OpState,
    ) -> Result<RecordPlan> {
        let pool = self.pool();
        // Every node the operation changed or made gets its checksum now,
        // in the copy the record logs (or the fresh block it writes): the
        // checksum is stored, flushed and replayed with the node's other
        // bytes, under the same fence.
        if self.geo.verify {
            for (&base, st) in op.staged.iter_mut() {
                tree::seal_node(self.seed, base, &mut st.buf)?;
            }
        }
        let intent = self.intent_cap != 0;
        w.metaops.clear();
        // The last record's overflow block: this record supersedes it.
        if let Some((o, _)) = w.ovf
            && !op.frees.contains(&o)
        {
            op.frees.push(o);
        }
        if !intent && (!op.res.is_empty() || !op.frees.is_empty()) {
            th.prepare(
                &Publish {
                    allocs: &op.res,
                    frees: &op.frees,
                    links: &[],
                },
                &mut w.metaops,
            )?;
        }
        // Intent protocol: the frees earlier records owe go out with this
        // record's blocks (one publish) when it allocates and they fit one
        // publish; otherwise after its commit, and then the record lists
        // them as owed too.
        let combined = intent
            && !op.res.is_empty()
            && !w.owed.is_empty()
            && op.res.len() + w.owed.len() <= th.max_publish_ops();
        let early_frees = intent && self.fault == Some(Fault::FreeBeforeCommit);
        let seq = w.seq + 1;
        let WState {
            rec,
            metaops,
            tmp,
            owed,
            ..
        } = &mut *w;
        rec.reset();
        // Sorted once (the ranges are distinct blocks: disjoint), so that
        // a lookup is a binary search: a batch that frees n tuples and
        // stages m nodes costs O((n + m) log n), not O(n m).
        op.free_ranges.sort_unstable();
        let free_ranges = &op.free_ranges;
        let freed = |off: u64| {
            let i = free_ranges.partition_point(|&(a, _)| a <= off);
            i > 0 && off < free_ranges[i - 1].1
        };
        for (&base, st) in &op.staged {
            // A block this record frees gets no writes: once the free is
            // released, a replay of this record must not touch its reuse.
            if st.fresh || freed(base) {
                continue;
            }
            tmp.resize(st.buf.len(), 0);
            pool.read(base as usize, tmp);
            // Changed 8-byte words, in runs.
            let words = st.buf.len() / 8;
            let mut i = 0;
            while i < words {
                if st.buf[8 * i..8 * i + 8] == tmp[8 * i..8 * i + 8] {
                    i += 1;
                    continue;
                }
                let s = i;
                while i < words && st.buf[8 * i..8 * i + 8] != tmp[8 * i..8 * i + 8] {
                    i += 1;
                }
                let at = base + 8 * s as u64;
                if intent {
                    rec.push_write_in(base, at, &st.buf[8 * s..8 * i]);
                } else {
                    rec.push_write(at, &st.buf[8 * s..8 * i]);
                }
            }
        }
        for (base, off, data) in &op.writes {
            if !freed(*off) {
                if intent {
                    rec.push_write_in(*base, *off, data);
                } else {
                    rec.push_write(*off, data);
                }
            }
        }
        if let Some(r) = op.new_root {
            rec.push_write(self.area_off + ROOT_AT, &r.to_le_bytes());
        }
        let meta_from = rec.mark();
        for m in metaops.iter() {
            rec.push_meta(m);
        }
        let meta_to = rec.mark();
        for (&base, st) in &op.staged {
            if st.fresh {
                rec.push_fresh(base, st.buf.len(), crc32c::crc32c(&st.buf));
            }
        }
        for &(o, l, crc) in &op.fresh_tuples {
            rec.push_fresh(o, l, crc);
        }
        if intent {
            if !early_frees {
                for f in &op.frees {
                    rec.push_free(f.raw());
                }
            }
            if !combined {
                for f in owed.iter() {
                    rec.push_free(f.raw());
                }
            }
        }
        let intent_too_large = intent && log::intent_len(op.res.len()) > self.intent_cap;
        if intent && (rec.len() > self.log_cap || intent_too_large) {
            return Err(EngineError::BatchTooLarge {
                ops: op.ops,
                max: op.ops.saturating_mul(self.log_cap) / rec.len().max(self.log_cap + 1),
            });
        }
        Ok(RecordPlan {
            seq,
            intent,
            combined,
            early_frees,
            metas: (meta_from, meta_to),
        })
    }

    /// Moves record `seq` to an overflow block when it exceeds its log
    /// area (the block allocated with the record's others), finishes it,
    /// and returns the block.
    fn spill(
        &self,
        w: &mut WState,
        th: &mut (dyn AllocThread + '_),
        op: &mut OpState,
        seq: u64,
        (meta_from, meta_to): ((usize, u32), (usize, u32)),
    ) -> Result<Option<u64>> {
        let pool = self.pool();
        let WState {
            rec, ptr, metaops, ..
        } = &mut *w;
        // A record too large for its log area goes to a block of its own,
        // which the record allocates with its other blocks (log module
        // docs): the allocator's operations are prepared again with it.
        let mut ovf: Option<u64> = None;
        if rec.len() > self.log_cap {
            th.abort_prepared(&Publish {
                allocs: &op.res,
                frees: &op.frees,
                links: &[],
            });
            let before = rec.len();
            // On an error the caller cancels every reservation, this one too.
            op.res.push(th.reserve(before + OVF_SLACK)?);
            metaops.clear();
            th.prepare(
                &Publish {
                    allocs: &op.res,
                    frees: &op.frees,
                    links: &[],
                },
                metaops,
            )?;
            rec.replace_metas(meta_from, meta_to, metaops);
            debug_assert!(rec.len() <= before + OVF_SLACK);
            ovf = op.res.last().map(|r| r.off().raw());
            self.st.overflows.fetch_add(1, Ordering::Relaxed);
        }
        rec.finish(seq, self.seed);
        if let Some(off) = ovf {
            let off = off as usize;
            if self.fault == Some(Fault::SkipOverflowFlush) {
                pool.write(off, &rec.buf);
            } else {
                pool.write_nodrain(off, &rec.buf);
            }
            ptr.reset();
            ptr.push_overflow(off as u64, rec.len(), crc32c::crc32c(&rec.buf));
            ptr.finish(seq, self.seed);
        }
        Ok(ovf)
    }

    /// Writes and flushes the blocks `op` made (durable with the record).
    fn write_fresh(&self, op: &OpState) {
        let pool = self.pool();
        // New blocks: written directly, durable with the record.
        for (&base, st) in &op.staged {
            if st.fresh {
                pool.write(base as usize, &st.buf);
                pool.flush(base as usize, st.buf.len());
            }
        }
        for &(o, l, _) in &op.fresh_tuples {
            pool.flush(o as usize, l);
        }
    }

    /// Intent protocol: names the record's blocks durably, then publishes
    /// them (with the owed frees when `combined`).
    fn publish_intent(
        &self,
        w: &mut WState,
        th: &mut (dyn AllocThread + '_),
        op: &mut OpState,
        seq: u64,
        combined: bool,
    ) -> Result<()> {
        let pool = self.pool();
        if !op.res.is_empty() {
            // Name the blocks, durably, before the allocator makes them
            // allocated: a crash before the commit then lets recovery
            // free them. The fence also makes their contents durable
            // before the publish (the allocator's contract).
            if self.fault != Some(Fault::SkipIntent) {
                log::build_intent(
                    &mut w.ibuf,
                    seq,
                    self.seed,
                    op.res.iter().map(|r| r.off().raw()),
                );
                pool.write_nodrain(self.intent_at as usize, &w.ibuf);
                pool.fence();
            }
            self.st.intents.fetch_add(1, Ordering::Relaxed);
            // One publish, unless the blocks are more than the allocator
            // publishes at once (then the intent covers every part).
            let max = th.max_publish_ops().max(1);
            let mut done = 0;
            while done < op.res.len() {
                let end = (done + max).min(op.res.len());
                let frees: &[POff<u8>] = if combined { &w.owed } else { &[] };
                let r = th.publish(&Publish {
                    allocs: &op.res[done..end],
                    frees,
                    links: &[],
                });
                if let Err(e) = r {
                    // Nothing of this part was published: the caller
                    // cancels its reservations, and the intent names blocks
                    // that are not allocated (recovery frees only allocated
                    // ones; a later allocation writes its own intent over
                    // this one). Parts published before are unlinked
                    // blocks now: owed frees, published after the next
                    // record (which lists them).
                    for r in op.res.drain(..done) {
                        w.owed.push(r.off());
                    }
                    return Err(e.into());
                }
                self.st.publishes.fetch_add(1, Ordering::Relaxed);
                if combined {
                    w.owed.clear();
                }
                done = end;
            }
            // Published: the reservations are spent.
            op.res.clear();
        }
        Ok(())
    }

    /// The allocator's bookkeeping once record `seq` is durable: its
    /// blocks committed, its frees released (or held, or owed) as the
    /// protocol allows.
    fn release(
        &self,
        w: &mut WState,
        th: &mut (dyn AllocThread + '_),
        op: &mut OpState,
        seq: u64,
        intent: bool,
    ) {
        // Allocator bookkeeping, now that the record is durable.
        let frees = std::mem::take(&mut op.frees);
        if intent {
            // The frees owed before this record (it lists them) can go now:
            // neither this record nor the one before writes into them. This
            // record's own wait for the next one, as the record before
            // this one may still be replayed and may write into them.
            if !w.owed.is_empty() {
                self.publish_owed(th, &mut w.owed);
            }
            w.owed.extend(frees);
        } else if self.hold_frees {
            th.commit_prepared(&Publish {
                allocs: &op.res,
                frees: &[],
                links: &[],
            });
            if !frees.is_empty() {
                w.held.push_back((seq, frees));
            }
            while let Some((s, _)) = w.held.front()
                && s + 2 <= seq
            {
                let (_, f) = w.held.pop_front().expect("front exists");
                th.commit_prepared(&Publish {
                    allocs: &[],
                    frees: &f,
                    links: &[],
                });
            }
        } else {
            th.commit_prepared(&Publish {
                allocs: &op.res,
                frees: &frees,
                links: &[],
            });
        }
        op.res.clear();
    }

    /// Commits the staged operation `op` as record `w.seq + 1` (see the
    /// module documentation). On error nothing was applied and the caller
    /// cancels the reservations. `force`: commit even an empty record.
    fn commit(
        &self,
        w: &mut WState,
        th: &mut (dyn AllocThread + '_),
        op: &mut OpState,
        force: bool,
    ) -> Result<()> {
        if !force
            && op.res.is_empty()
            && op.frees.is_empty()
            && op.staged.is_empty()
            && op.writes.is_empty()
            && op.new_root.is_none()
        {
            return Ok(());
        }
        // Building, writing and fencing the record: P2's crash consistency.
        let cc = breakdown::phase(Phase::Cc);
        let pool = self.pool();
        let RecordPlan {
            seq,
            intent,
            combined,
            early_frees,
            metas,
        } = self.build_record(w, th, op)?;
        let ovf = self.spill(w, th, op, seq, metas)?;
        self.write_fresh(op);
        let early = self.fault == Some(Fault::ApplyBeforeCommit);
        // The planted bug, on the intent protocol, applies before the
        // intent and the publish too (still before the commit fence).
        let early_first = early && intent && !op.res.is_empty();
        if early_first {
            self.apply(w);
            self.forget_inner(op);
        }
        if intent && !op.res.is_empty() {
            self.publish_intent(w, th, op, seq, combined)?;
        }
        if early_frees && !op.frees.is_empty() {
            th.publish(&Publish {
                allocs: &[],
                frees: &op.frees,
                links: &[],
            })?;
            op.frees.clear();
        }
        let at = self.area_at(seq);
        let logged = if ovf.is_some() {
            &w.ptr.buf
        } else {
            &w.rec.buf
        };
        if self.fault == Some(Fault::SkipRecordFlush) {
            pool.write(at, logged);
        } else {
            // Stores and flushes (non-temporal stores for a long record).
            pool.write_nodrain(at, logged);
        }
        if self.fault != Some(Fault::SkipDeferredFlush) {
            for &(o, l) in &w.pending {
                pool.flush(o as usize, l);
            }
        }
        w.pending.clear();
        if early && !early_first {
            self.apply(w);
            self.forget_inner(op);
        }
        pool.fence();
        drop(cc);
        if !early {
            let _g = self.rw.write();
            self.apply(w);
            self.forget_inner(op);
            for (off, c) in op.late.drain(..) {
                pool.write(off as usize, &c);
            }
            // With the apply, under the lock: a snapshot's len matches its view.
            self.add_keys(op.keys_delta);
        } else {
            self.add_keys(op.keys_delta);
        }
        self.release(w, th, op, seq, intent);
        // This record's overflow block (if any) is allocated with it; the
        // last one's was freed by it.
        let ovf_len = w.rec.len() as u64;
        w.ovf = ovf.map(|off| (POff::new(off), ovf_len));
        w.seq = seq;
        self.st.commits.fetch_add(1, Ordering::Relaxed);
        self.st.inplace.fetch_add(op.inplace, Ordering::Relaxed);
        self.st.outplace.fetch_add(op.outplace, Ordering::Relaxed);
        self.st.splits.fetch_add(op.splits, Ordering::Relaxed);
        self.st
            .leaves_freed
            .fetch_add(op.leaves_freed, Ordering::Relaxed);
        Ok(())
    }

    fn add_keys(&self, delta: i64) {
        if delta >= 0 {
            self.keys.fetch_add(delta as u64, Ordering::Relaxed);
        } else {
            self.keys.fetch_sub(delta.unsigned_abs(), Ordering::Relaxed);
        }
    }

    /// Intent protocol: publishes the owed frees (in publishes of at most
    /// the allocator's limit), keeping those whose publish failed: they
    /// stay owed, listed by the next record and retried after it.
    fn publish_owed(&self, th: &mut (dyn AllocThread + '_), owed: &mut Vec<POff<u8>>) {
        let max = th.max_publish_ops().max(1);
        let mut kept = Vec::new();
        for chunk in owed.chunks(max) {
            let r = th.publish(&Publish {
                allocs: &[],
                frees: chunk,
                links: &[],
            });
            match r {
                Ok(()) => {
                    self.st.publishes.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => kept.extend_from_slice(chunk),
            }
        }
        *owed = kept;
    }

    /// Drops the verified copies of the inner nodes `op` changed (after
    /// applying it, under the tree lock: `tree::InnerCache`).
    fn forget_inner(&self, op: &OpState) {
        for (&base, st) in &op.staged {
            if tree::u32_at(&st.buf, 8) == tree::MAGIC_INNER {
                self.geo.cache.forget(base);
            }
        }
    }

    /// Stores the record in `w.rec` in place (no flush: the next record's
    /// fence makes them durable) and remembers what to flush.
    fn apply(&self, w: &mut WState) {
        let pool = self.pool();
        let WState { rec, pending, .. } = w;
        let r = log::for_each_item(&rec.buf, |it| {
            match it {
                Item::Write { off, data } | Item::WriteIn { off, data, .. } => {
                    pool.write(off as usize, data);
                    pending.push((off, data.len()));
                }
                Item::Meta(m) => {
                    m.apply(pool);
                    pending.push((m.off, 8));
                }
                Item::Fresh { .. } | Item::Free { .. } | Item::Overflow { .. } => {}
            }
            Ok(())
        });
        debug_assert!(r.is_ok(), "own record malformed: {r:?}");
    }

    /// Two empty records: every held free becomes releasable (full pool).
    /// On the intent protocol one suffices: it publishes what is owed.
    fn rotate(&self, w: &mut WState, th: &mut (dyn AllocThread + '_)) -> Result<()> {
        let mut empty = OpState::default();
        // A last record's overflow block is freed by the next record, so
        // its release takes one more.
        let n = if self.intent_cap != 0 {
            1
        } else if w.ovf.is_some() {
            3
        } else {
            2
        };
        for _ in 0..n {
            self.commit(w, th, &mut empty, true)?;
        }
        self.st.rotations.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Scrubs the subtree at `n` (keys in `lo..hi`, level `expect_level`
    /// when known): every node and tuple verified, every damaged one
    /// recorded in `out`, going on past it.
    #[allow(clippy::too_many_arguments)]
    fn scrub_node(
        &self,
        n: u64,
        depth: usize,
        (lo, hi, expect_level): Bounds<'_>,
        seen: &mut HashSet<u64>,
        bufs: &mut Bufs,
        out: &mut Scrub,
        pace: &mut dyn FnMut(u64),
    ) {
        let g = &self.geo;
        let span = || {
            let show =
                |k: Option<&[u8]>| k.map_or_else(|| "the end".into(), crate::error::show_key);
            format!("keys from {} to {} unreadable", show(lo), show(hi))
        };
        let node = |detail: String| Damage {
            key: None,
            off: n,
            detail,
            leaf: 0,
            slot: 0,
            span: Some((lo.map(<[u8]>::to_vec), hi.map(<[u8]>::to_vec))),
        };
        if depth > MAX_DEPTH || !seen.insert(n) {
            out.damaged.push(node(format!(
                "node reached twice or too deep (a cycle?); {}",
                span()
            )));
            return;
        }
        let kind = match g.load_media(n, &mut bufs.nb) {
            Ok(k) => k,
            Err(e) => {
                out.damaged.push(node(format!("{}; {}", bare(&e), span())));
                return;
            }
        };
        if let Node::Inner(_) = kind {
            out.bytes += INNER_BYTES as u64;
            pace(out.bytes);
            let d = match InnerD::decode(&bufs.nb[..], n) {
                Ok(d) => d,
                Err(e) => {
                    out.damaged.push(node(format!("{}; {}", bare(&e), span())));
                    return;
                }
            };
            if expect_level.is_some_and(|l| l != d.level)
                || d.seps.windows(2).any(|w| w[0] >= w[1])
                || d.seps
                    .first()
                    .is_some_and(|s| lo.is_some_and(|l| s.as_slice() < l))
                || d.seps
                    .last()
                    .is_some_and(|s| hi.is_some_and(|h| s.as_slice() >= h))
            {
                out.damaged.push(node(format!(
                    "inner node's level or separators inconsistent with its parent; {}",
                    span()
                )));
                return;
            }
            for (i, &c) in d.children.iter().enumerate() {
                let clo = if i == 0 {
                    lo
                } else {
                    Some(d.seps[i - 1].as_slice())
                };
                let chi = if i == d.seps.len() {
                    hi
                } else {
                    Some(d.seps[i].as_slice())
                };
                self.scrub_node(
                    c,
                    depth + 1,
                    (clo, chi, Some(d.level - 1)),
                    seen,
                    bufs,
                    out,
                    pace,
                );
            }
            return;
        }
        out.bytes += LEAF_BYTES as u64;
        if expect_level.is_some_and(|l| l != 0) {
            out.damaged
                .push(node(format!("leaf at an inner level; {}", span())));
            return;
        }
        let leaf: Vec<u8> = bufs.nb[..LEAF_BYTES].to_vec();
        let Ok(mut bm) = leaf_bitmap(&leaf) else {
            out.damaged.push(node(format!("bad bitmap; {}", span())));
            return;
        };
        while bm != 0 {
            let i = bm.trailing_zeros() as usize;
            bm &= bm - 1;
            let (p, t) = slot(&leaf, i);
            let stored_key =
                |bufs: &mut Bufs| g.tuple_key(t, &mut bufs.kbuf).ok().map(<[u8]>::to_vec);
            // A tuple whose key cannot be trusted is known by its leaf:
            // it stands for the keys of that leaf's range.
            let tuple = |key: Option<Vec<u8>>, detail: String| Damage {
                span: key
                    .is_none()
                    .then(|| (lo.map(<[u8]>::to_vec), hi.map(<[u8]>::to_vec))),
                key,
                off: t,
                detail,
                leaf: n,
                slot: i as u32,
            };
            if !seen.insert(t) {
                out.damaged.push(tuple(
                    None,
                    format!("tuple referenced twice (slot {i} of leaf {n:#x})"),
                ));
                continue;
            }
            match g.tuple_read(t, &mut bufs.kbuf, &mut bufs.val) {
                Ok(kl) => {
                    let k = &bufs.kbuf[..kl];
                    out.bytes += (TUPLE_HDR + kl + bufs.val.len()) as u64;
                    if prefix(k) != p || lo.is_some_and(|l| k < l) || hi.is_some_and(|h| k >= h) {
                        let k = k.to_vec();
                        out.damaged.push(tuple(
                            Some(k),
                            "tuple's key does not belong where its leaf links it".into(),
                        ));
                    } else {
                        out.records += 1;
                    }
                }
                Err(e) => {
                    // Name the key only when its own check says it is
                    // the key that was stored.
                    let key = stored_key(bufs).filter(|k| g.tuple_key_ok(t, k));
                    let mut detail = match e {
                        EngineError::DamagedValue { detail, .. } => detail,
                        e => e.to_string(),
                    };
                    if key.is_none() {
                        detail.push_str(&format!(
                            "; its key is damaged too (slot {i} of leaf {n:#x}, key prefix {:#018x}): one of the keys from {} to {}",
                            p,
                            lo.map_or_else(|| "the start".into(), crate::error::show_key),
                            hi.map_or_else(|| "the end".into(), crate::error::show_key),
                        ));
                    }
                    out.damaged.push(tuple(key, detail));
                }
            }
        }
        pace(out.bytes);
    }

    /// Walks the subtree at `n`; its keys must lie in `lo..hi` and its
    /// level be `expect_level` (when known).
    fn walk_node(
        &self,
        n: u64,
        depth: usize,
        (lo, hi, expect_level): Bounds<'_>,
        out: &mut Walk,
        seen: &mut HashSet<u64>,
    ) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(corrupt("tree deeper than 32 levels"));
        }
        if !seen.insert(n) {
            return Err(corrupt(format!("node {n:#x} reached twice")));
        }
        let g = &self.geo;
        let mut b = tree::node_buf();
        if g.load_media(n, &mut b)? == Node::Leaf {
            if expect_level.is_some_and(|l| l != 0) {
                return Err(corrupt(format!("leaf {n:#x} at an inner level")));
            }
            out.blocks.push((n, LEAF_BYTES as u64));
            let ents = leaf_sorted(g, &b[..LEAF_BYTES])?;
            let mut bm = leaf_bitmap(&b[..])?;
            while bm != 0 {
                let i = bm.trailing_zeros() as usize;
                bm &= bm - 1;
                let (p, t) = slot(&b[..], i);
                let mut kb = [0u8; MAX_KEY];
                if prefix(g.tuple_key(t, &mut kb)?) != p {
                    return Err(corrupt(format!("leaf {n:#x} slot {i}: wrong prefix")));
                }
            }
            for (k, t) in ents {
                if lo.is_some_and(|l| k.as_slice() < l) || hi.is_some_and(|h| k.as_slice() >= h) {
                    return Err(corrupt(format!("leaf {n:#x}: key outside its separators")));
                }
                if out.entries.last().is_some_and(|(pk, _)| *pk >= k) {
                    return Err(corrupt(format!("leaf {n:#x}: keys out of order")));
                }
                if !seen.insert(t) {
                    return Err(corrupt(format!("tuple {t:#x} referenced twice")));
                }
                let (kl, vl, _) = g.tuple_hdr(t)?;
                let mut v = Vec::new();
                let mut kb = [0u8; MAX_KEY];
                g.tuple_read(t, &mut kb, &mut v)?;
                out.blocks.push((t, (TUPLE_HDR + kl + vl) as u64));
                out.entries.push((k, v));
            }
            return Ok(());
        }
        let d = InnerD::decode(&b[..], n)?;
        if expect_level.is_some_and(|l| l != d.level) {
            return Err(corrupt(format!("inner {n:#x}: wrong level")));
        }
        out.blocks.push((n, INNER_BYTES as u64));
        for w in d.seps.windows(2) {
            if w[0] >= w[1] {
                return Err(corrupt(format!("inner {n:#x}: separators out of order")));
            }
        }
        for (i, &c) in d.children.iter().enumerate() {
            let clo = if i == 0 {
                lo
            } else {
                Some(d.seps[i - 1].as_slice())
            };
            let chi = if i == d.seps.len() {
                hi
            } else {
                Some(d.seps[i].as_slice())
            };
            self.walk_node(c, depth + 1, (clo, chi, Some(d.level - 1)), out, seen)?;
        }
        Ok(())
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
                "commits {}, in-place updates {}, out-of-place updates {}, leaf splits {}, empty leaves freed {}, free rotations {}, intents {}, allocator publishes {}, records in blocks of their own {}",
                s.commits.load(Ordering::Relaxed),
                s.inplace.load(Ordering::Relaxed),
                s.outplace.load(Ordering::Relaxed),
                s.splits.load(Ordering::Relaxed),
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

/// What [`Inp::build_record`] decided for the record it built.
struct RecordPlan {
    /// The record's sequence number (`w.seq + 1`).
    seq: u64,
    /// The intent protocol (stores on PMDK's allocator).
    intent: bool,
    /// Intent protocol: the owed frees go out with this record's blocks.
    combined: bool,
    /// Planted bug `FreeBeforeCommit`: frees published before the commit.
    early_frees: bool,
    /// Where the allocator's operations lie in the record (marks before
    /// and after them), replaced when the record spills.
    metas: ((usize, u32), (usize, u32)),
}

/// A node copy a writer changes, logged (or, when `fresh`, written
/// directly) at commit.
struct Staged {
    buf: Vec<u8>,
    fresh: bool,
}

/// One operation (or batch) being built.
#[derive(Default)]
struct OpState {
    /// Node base → its staged copy (ordered: deterministic records).
    staged: BTreeMap<u64, Staged>,
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
    leaves_freed: u64,
}

impl OpState {
    fn clear(&mut self) {
        self.staged.clear();
        debug_assert!(self.res.is_empty());
        self.fresh_tuples.clear();
        self.frees.clear();
        self.free_ranges.clear();
        self.writes.clear();
        self.late.clear();
        self.new_root = None;
        self.inplace_bytes = 0;
        self.ops = 0;
        self.keys_delta = 0;
        self.inplace = 0;
        self.outplace = 0;
        self.splits = 0;
        self.leaves_freed = 0;
    }
}

/// Nodes as a writer sees them: its staged copies over the pool.
struct WSrc<'x> {
    geo: &'x Geo,
    staged: &'x BTreeMap<u64, Staged>,
}

impl Src for WSrc<'_> {
    fn load(&self, base: u64, b: &mut NodeBuf) -> Result<Node> {
        match self.staged.get(&base) {
            // The writer's own copy, verified when it was staged (or made
            // by it): taken as it is.
            Some(s) => {
                b[..s.buf.len()].copy_from_slice(&s.buf);
                match tree::u32_at(&s.buf, 8) {
                    tree::MAGIC_LEAF => Ok(Node::Leaf),
                    // Its header's child count: no decode (and no
                    // allocation) per level of every descent.
                    _ => Ok(Node::Inner(tree::inner_hdr(&s.buf, base)?.0)),
                }
            }
            None => self.geo.load(base, b),
        }
    }

    fn pick(
        &self,
        off: u64,
        b: &mut NodeBuf,
        pick: &mut dyn FnMut(&[u8], usize) -> Result<usize>,
    ) -> Result<Option<(usize, u64, usize)>> {
        match self.staged.get(&off) {
            // A staged inner node is searched where it lies (a batch
            // descends once per key: copying 8 KiB per level was most of
            // a large batch's time).
            Some(s) if tree::u32_at(&s.buf, 8) != tree::MAGIC_LEAF => {
                tree::pick_in(&s.buf, off, pick).map(Some)
            }
            Some(_) => tree::pick_by_load(self, off, b, pick),
            None => self.geo.pick(off, b, pick),
        }
    }
}

/// A writer's view during one operation.
struct Writer<'e, 't> {
    eng: &'e Inp,
    th: &'t mut (dyn AllocThread + 'e),
    op: &'t mut OpState,
    path: &'t mut Vec<(u64, usize)>,
    kbuf: &'t mut [u8; MAX_KEY],
    nb: &'t mut NodeBuf,
}

impl Writer<'_, '_> {
    fn root(&self) -> u64 {
        self.op.new_root.unwrap_or_else(|| self.eng.root())
    }

    /// The staged copy of node `off` (staging it first).
    fn stage(&mut self, off: u64, size: usize) -> Result<&mut Vec<u8>> {
        if !self.op.staged.contains_key(&off) {
            self.eng.geo.check(off, size)?;
            let buf = self.eng.pool().read_vec(off as usize, size);
            // A writer changes only what it verified: a damaged node is
            // never sealed again with a fresh checksum.
            if self.eng.geo.verify {
                tree::verify_copy(self.eng.geo.seed, off, &buf)?;
            }
            self.op.staged.insert(off, Staged { buf, fresh: false });
        }
        Ok(&mut self.op.staged.get_mut(&off).expect("staged").buf)
    }

    fn new_node(&mut self, size: usize) -> Result<u64> {
        let r = self.th.reserve(size)?;
        let off = r.off().raw();
        self.op.res.push(r);
        self.op.staged.insert(
            off,
            Staged {
                buf: vec![0u8; size],
                fresh: true,
            },
        );
        Ok(off)
    }

    /// A new tuple, written now (flushed at commit).
    fn new_tuple(&mut self, key: &[u8], value: &[u8]) -> Result<u64> {
        let len = TUPLE_HDR + key.len() + value.len();
        let r = self.th.reserve(len)?;
        let off = r.off().raw();
        let cap = r.usable_size().min(u32::MAX as usize) as u32;
        self.op.res.push(r);
        self.eng.geo.check(off, len)?;
        let p = self.eng.pool();
        let g = &self.eng.geo;
        let h = tree::tuple_header(g.seed, off, key, value, cap as usize, g.verify);
        p.write(off as usize, &h);
        p.write(off as usize + TUPLE_HDR, key);
        p.write(off as usize + TUPLE_HDR + key.len(), value);
        let crc = crc32c::crc32c_append(crc32c::crc32c_append(crc32c::crc32c(&h), key), value);
        self.op.fresh_tuples.push((off, len, crc));
        Ok(off)
    }

    fn free_tuple(&mut self, t: u64, cap: usize) {
        self.op.frees.push(POff::new(t));
        self.op.free_ranges.push((t, t + cap as u64));
    }

    /// Finds `key`: `(leaf, slot, tuple)` or the leaf it belongs in.
    fn find(&mut self, key: &[u8]) -> Result<Found> {
        let root = self.root();
        if root == 0 {
            return Ok(None);
        }
        let src = WSrc {
            geo: &self.eng.geo,
            staged: &self.op.staged,
        };
        let leaf = descend(&src, root, key, self.path, self.nb)?;
        let hit = leaf_find(
            &self.eng.geo,
            &self.nb[..LEAF_BYTES],
            key,
            prefix(key),
            self.kbuf,
            false,
        )?;
        Ok(Some((leaf, hit)))
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.op.ops += 1;
        let kp = prefix(key);
        match self.find(key)? {
            None => {
                let t = self.new_tuple(key, value)?;
                let leaf = self.new_node(LEAF_BYTES)?;
                let b = self.stage(leaf, LEAF_BYTES)?;
                init_leaf(b);
                set_slot(b, 0, kp, t);
                set_bitmap(b, 1);
                self.op.new_root = Some(leaf);
                self.op.keys_delta += 1;
            }
            Some((leaf, Some((i, t)))) => {
                let (kl, vl, cap) = self.eng.geo.tuple_hdr(t)?;
                let budget = self.eng.log_cap / 2;
                if TUPLE_HDR + kl + value.len() <= cap
                    && value.len() <= self.eng.opts.inplace_max
                    && self.op.inplace_bytes + value.len() + 64 <= budget
                {
                    self.op.inplace_bytes += value.len() + 64;
                    // The value, its length and its checksum change in
                    // one record (bytes 4..16: length, capacity as it
                    // was, checksum), so a replay restores them together.
                    // The old tuple is verified first: a damaged length
                    // or capacity must not steer the write.
                    let g = &self.eng.geo;
                    if g.verify {
                        g.tuple_verify(t)?;
                    }
                    debug_assert_eq!(kl, key.len());
                    let h = tree::tuple_header(g.seed, t, key, value, cap, g.verify);
                    if self.eng.fault == Some(Fault::ChecksumAfterFence) {
                        // The planted bug: the checksum is stored after the
                        // commit, outside the record and every flush.
                        self.op.writes.push((t, t + 4, h[4..tree::CRC_AT].to_vec()));
                        let mut c = [0u8; 4];
                        c.copy_from_slice(&h[tree::CRC_AT..TUPLE_HDR]);
                        self.op.late.push((t + tree::CRC_AT as u64, c));
                    } else if vl != value.len() || self.eng.geo.verify {
                        self.op.writes.push((t, t + 4, h[4..TUPLE_HDR].to_vec()));
                    }
                    if !value.is_empty() {
                        self.op
                            .writes
                            .push((t, t + (TUPLE_HDR + kl) as u64, value.to_vec()));
                    }
                    self.op.inplace += 1;
                } else {
                    let t2 = self.new_tuple(key, value)?;
                    let b = self.stage(leaf, LEAF_BYTES)?;
                    set_slot(b, i, kp, t2);
                    self.free_tuple(t, cap);
                    self.op.outplace += 1;
                }
            }
            Some((leaf, None)) => {
                let t = self.new_tuple(key, value)?;
                self.leaf_insert(leaf, key, kp, t)?;
                self.op.keys_delta += 1;
            }
        }
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        self.op.ops += 1;
        let Some((leaf, Some((i, t)))) = self.find(key)? else {
            return Ok(false);
        };
        let (_, _, cap) = self.eng.geo.tuple_hdr(t)?;
        let b = self.stage(leaf, LEAF_BYTES)?;
        let bm = leaf_bitmap(b)? & !(1 << i);
        set_bitmap(b, bm);
        self.free_tuple(t, cap);
        self.op.keys_delta -= 1;
        if bm == 0 {
            self.drop_empty_leaf(leaf)?;
        }
        Ok(true)
    }

    /// Clears slot `i` of `leaf` if it still links tuple `t`, and frees the
    /// tuple's block (a damaged record, removed by repair). The leaf must
    /// verify (staging checks it). An emptied leaf stays (valid).
    fn unlink_slot(&mut self, leaf: u64, i: usize, t: u64) -> Result<bool> {
        if i >= SLOTS {
            return Ok(false);
        }
        let b = self.stage(leaf, LEAF_BYTES)?;
        let bm = leaf_bitmap(b)?;
        if bm & (1 << i) == 0 || slot(b, i).1 != t {
            return Ok(false);
        }
        set_bitmap(b, bm & !(1 << i));
        self.op.ops += 1;
        self.op.keys_delta -= 1;
        // The tuple's own capacity may be damaged: no write touches it
        // anyway, so its header alone bounds the range kept from writes.
        self.free_tuple(t, TUPLE_HDR);
        Ok(true)
    }

    /// Unlinks and frees an emptied leaf when its parent keeps at least
    /// two children (its key range joins a neighbour's). A leaf this
    /// operation allocated, or one whose parent would be left with one
    /// child, stays (empty leaves are valid).
    fn drop_empty_leaf(&mut self, leaf: u64) -> Result<()> {
        let Some(&(p, i)) = self.path.last() else {
            return Ok(());
        };
        if self.op.staged.get(&leaf).is_some_and(|s| s.fresh) {
            return Ok(());
        }
        let b = self.stage(p, INNER_BYTES)?;
        let mut d = InnerD::decode(b, p)?;
        if d.children.len() < 3 || d.children.get(i) != Some(&leaf) {
            return Ok(());
        }
        d.children.remove(i);
        // Child i covered sep[i-1]..sep[i]: the left neighbour takes it
        // (the right one, for the first child).
        d.seps.remove(i.saturating_sub(1));
        d.encode(b);
        self.op.frees.push(POff::new(leaf));
        self.op.free_ranges.push((leaf, leaf + LEAF_BYTES as u64));
        self.op.leaves_freed += 1;
        Ok(())
    }

    /// Inserts `(kp, t)` for `key` into `leaf` (path in `self.path`),
    /// splitting it when full.
    fn leaf_insert(&mut self, leaf: u64, key: &[u8], kp: u64, t: u64) -> Result<()> {
        let b = self.stage(leaf, LEAF_BYTES)?;
        let bm = leaf_bitmap(b)?;
        if bm != FULL {
            let i = (!bm & FULL).trailing_zeros() as usize;
            set_slot(b, i, kp, t);
            set_bitmap(b, bm | (1 << i));
            return Ok(());
        }
        // Split: the lower half stays in place, the upper half moves.
        let copy = b.clone();
        self.op.splits += 1;
        let geo = &self.eng.geo;
        let mut ents: Vec<(Vec<u8>, u64, u64, Option<usize>)> = Vec::with_capacity(SLOTS + 1);
        for i in 0..SLOTS {
            let (p, tt) = slot(&copy, i);
            // The keys decide the separator: only verified ones may.
            if geo.verify {
                geo.tuple_verify(tt)?;
            }
            ents.push((geo.tuple_key(tt, self.kbuf)?.to_vec(), p, tt, Some(i)));
        }
        ents.push((key.to_vec(), kp, t, None));
        ents.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let m = ents.len() / 2;
        let right = self.new_node(LEAF_BYTES)?;
        {
            let rb = self.stage(right, LEAF_BYTES)?;
            init_leaf(rb);
            for (j, e) in ents[m..].iter().enumerate() {
                set_slot(rb, j, e.1, e.2);
            }
            set_bitmap(rb, (1u64 << (ents.len() - m)) - 1);
        }
        let mut nbm = 0u64;
        let mut new_left = None;
        for e in &ents[..m] {
            match e.3 {
                Some(s) => nbm |= 1 << s,
                None => new_left = Some((e.1, e.2)),
            }
        }
        let lb = self.stage(leaf, LEAF_BYTES)?;
        if let Some((p, tt)) = new_left {
            let i = (!nbm & FULL).trailing_zeros() as usize;
            set_slot(lb, i, p, tt);
            nbm |= 1 << i;
        }
        set_bitmap(lb, nbm);
        let sep = shortest_sep(&ents[m - 1].0, &ents[m].0);
        let mut path = std::mem::take(self.path);
        let r = self.insert_parent(&mut path, sep, leaf, right, 0);
        *self.path = path;
        r
    }

    /// Inserts separator `sep` and its right child after `left` into the
    /// parent on `path`, splitting inner nodes up to a new root as needed.
    fn insert_parent(
        &mut self,
        path: &mut Vec<(u64, usize)>,
        mut sep: Vec<u8>,
        mut left: u64,
        mut right: u64,
        mut level: u16,
    ) -> Result<()> {
        loop {
            let Some((p, i)) = path.pop() else {
                let r = self.new_node(INNER_BYTES)?;
                let d = InnerD {
                    level: level + 1,
                    children: vec![left, right],
                    seps: vec![sep],
                };
                d.encode(self.stage(r, INNER_BYTES)?);
                self.op.new_root = Some(r);
                return Ok(());
            };
            let b = self.stage(p, INNER_BYTES)?;
            let mut d = InnerD::decode(b, p)?;
            if d.children.get(i) != Some(&left) {
                return Err(corrupt(format!("inner {p:#x}: path does not match")));
            }
            d.children.insert(i + 1, right);
            d.seps.insert(i, sep);
            if d.fits() {
                d.encode(b);
                return Ok(());
            }
            level = d.level;
            let (l, up, r) = d.split()?;
            l.encode(self.stage(p, INNER_BYTES)?);
            let rn = self.new_node(INNER_BYTES)?;
            r.encode(self.stage(rn, INNER_BYTES)?);
            sep = up;
            left = p;
            right = rn;
        }
    }
}

struct InpSession<'e> {
    eng: &'e Inp,
    th: Box<dyn AllocThread + Send + 'e>,
    op: OpState,
    path: Vec<(u64, usize)>,
    bufs: Bufs,
    _ticket: Ticket<'e>,
}

impl<'e> InpSession<'e> {
    /// Runs one write operation under the writer lock: `f` stages it, then
    /// it commits. On an error everything it reserved is given back; a full
    /// pool with frees held back retries once after releasing them.
    fn write<R>(&mut self, mut f: impl FnMut(&mut Writer<'e, '_>) -> Result<R>) -> Result<R> {
        let eng = self.eng;
        let _held = LockHeld::enter();
        let mut w = eng.w.lock();
        // One commit point of the persist trace per write that committed a
        // record (an empty operation commits none); a rotation it needed
        // and the allocator's publishes are part of it.
        let scope = ferrite_pmem::trace::commit_scope();
        let seq = w.seq;
        // Intent protocol: the next record lists the frees still owed;
        // publish a large backlog first (one empty record), so that it
        // never crowds this write's record out of the log area.
        if eng.intent_cap != 0 && w.owed.len() * 16 > eng.log_cap / 4 {
            eng.rotate(&mut w, &mut *self.th)?;
        }
        let mut retried = false;
        loop {
            self.op.clear();
            let r = {
                let mut wr = Writer {
                    eng,
                    th: &mut *self.th,
                    op: &mut self.op,
                    path: &mut self.path,
                    kbuf: &mut self.bufs.kbuf,
                    nb: &mut self.bufs.nb,
                };
                f(&mut wr)
            };
            let r = r.and_then(|v| {
                eng.commit(&mut w, &mut *self.th, &mut self.op, false)
                    .map(|()| v)
            });
            match r {
                Ok(v) => {
                    if w.seq != seq {
                        scope.mark();
                    }
                    return Ok(v);
                }
                Err(e) => {
                    for res in self.op.res.drain(..) {
                        let _ = self.th.cancel(res);
                    }
                    if matches!(e, EngineError::Full(_))
                        && !retried
                        && (!w.held.is_empty() || !w.owed.is_empty())
                    {
                        retried = true;
                        self.op.clear();
                        eng.rotate(&mut w, &mut *self.th)?;
                        continue;
                    }
                    return Err(e);
                }
            }
        }
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

/// Looks `key` up; the caller holds `eng.rw` (read). Every node on the
/// path, and the tuple returned, is verified (`tree` module docs).
fn get_locked(
    eng: &Inp,
    key: &[u8],
    out: &mut Vec<u8>,
    path: &mut Vec<(u64, usize)>,
    bufs: &mut Bufs,
) -> Result<bool> {
    let root = eng.root();
    out.clear();
    if root == 0 {
        return Ok(false);
    }
    descend(&eng.geo, root, key, path, &mut bufs.nb)?;
    match leaf_find(
        &eng.geo,
        &bufs.nb[..LEAF_BYTES],
        key,
        prefix(key),
        &mut bufs.kbuf,
        true,
    )? {
        Some((_, t)) => {
            eng.geo.tuple_read(t, &mut bufs.kbuf, out)?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Tuples a scan asks the CPU to fetch ahead of reading them.
const PREFETCH_TUPLES: usize = 16;
/// Bytes of each such tuple fetched: three cache lines, a header, a
/// 24-byte key and a 150-byte value (redb's shapes); longer tuples miss
/// on their rest.
const PREFETCH_BYTES: usize = 192;

/// Up to `limit` pairs with keys `>= from` (ascending), or with keys below
/// `upto` (descending, `back`); the caller holds `eng.rw` (read). Every
/// node and tuple visited is verified.
fn scan_dir(
    eng: &Inp,
    from: &[u8],
    upto: Bound<&[u8]>,
    back: bool,
    limit: usize,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    bufs: &mut Bufs,
) -> Result<usize> {
    let g = &eng.geo;
    let root = eng.root();
    if root == 0 || limit == 0 {
        return Ok(0);
    }
    let mut path = Vec::with_capacity(MAX_DEPTH);
    // Going back, the leaf that holds the bound holds every key below it
    // that a later leaf could not.
    let start = if back { upto } else { Bound::Included(from) };
    match start {
        Bound::Included(u) | Bound::Excluded(u) if !u.is_empty() || back => {
            descend(g, root, u, &mut path, &mut bufs.nb)?
        }
        _ => tree::edge(g, root, back, &mut path, &mut bufs.nb)?,
    };
    // Which keys the scan returns, decided on a slot's prefix where it
    // can (prefixes order as their keys do, and a prefix above or below
    // the bound's settles the comparison), on the full key otherwise.
    let bound = if back {
        match upto {
            Bound::Included(u) | Bound::Excluded(u) => Some(u),
            Bound::Unbounded => None,
        }
    } else {
        Some(from)
    };
    let bound_prefix = bound.map(prefix);
    let wanted = |k: &[u8]| {
        if back {
            match upto {
                Bound::Included(u) => k <= u,
                Bound::Excluded(u) => k < u,
                Bound::Unbounded => true,
            }
        } else {
            k >= from
        }
    };
    let mut n = 0;
    let max_leaves = ((g.hi - g.lo) as usize / LEAF_BYTES).max(1);
    for _ in 0..max_leaves {
        leaf_order(g, &bufs.nb[..LEAF_BYTES], &mut bufs.order)?;
        let count = bufs.order.len();
        // The tuples this leaf will likely return, fetched together (the
        // first of them may lie below the start: a few wasted hints).
        let ahead = (limit - n).min(count).min(PREFETCH_TUPLES);
        let skip = match bound_prefix {
            Some(bp) if !back => bufs.order.partition_point(|e| e.0 < bp),
            Some(bp) => count - bufs.order.partition_point(|e| e.0 <= bp),
            None => 0,
        };
        for j in skip..(skip + ahead).min(count) {
            let (_, t) = bufs.order[if back { count - 1 - j } else { j }];
            g.prefetch_tuple(t, PREFETCH_BYTES);
        }
        for j in 0..count {
            let (p, t) = bufs.order[if back { count - 1 - j } else { j }];
            let by_prefix = bound_prefix.map_or(std::cmp::Ordering::Greater, |bp| {
                if back { bp.cmp(&p) } else { p.cmp(&bp) }
            });
            match by_prefix {
                std::cmp::Ordering::Less => continue,
                std::cmp::Ordering::Equal if !wanted(g.tuple_key(t, &mut bufs.kbuf)?) => continue,
                _ => {}
            }
            let kl = g.tuple_read(t, &mut bufs.kbuf, &mut bufs.val)?;
            // The key verified with the value must be the one the leaf
            // ordered by: a damaged slot never reaches the visitor.
            let k = &bufs.kbuf[..kl];
            if prefix(k) != p || !wanted(k) {
                return Err(corrupt(format!(
                    "tuple {t:#x}: key does not match its leaf slot"
                )));
            }
            n += 1;
            if !f(k, &bufs.val) || n == limit {
                return Ok(n);
            }
        }
        if tree::step(g, &mut path, back, &mut bufs.nb)?.is_none() {
            return Ok(n);
        }
    }
    Err(corrupt("scan visited more leaves than the heap holds"))
}

fn scan_locked(
    eng: &Inp,
    from: &[u8],
    limit: usize,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    bufs: &mut Bufs,
) -> Result<usize> {
    scan_dir(eng, from, Bound::Unbounded, false, limit, f, bufs)
}

fn scan_back_locked(
    eng: &Inp,
    upto: Bound<&[u8]>,
    limit: usize,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    bufs: &mut Bufs,
) -> Result<usize> {
    scan_dir(eng, &[], upto, true, limit, f, bufs)
}

/// A read-only view: holds `rw` (read) for its whole life, so no write
/// applies while it lives (InP updates in place: there is no older
/// version to read). Writers wait for it.
struct InpSnapshot<'e> {
    eng: &'e Inp,
    _r: parking_lot::RwLockReadGuard<'e, ()>,
    path: Vec<(u64, usize)>,
    bufs: Bufs,
}

/// A live reader: takes `rw` (read) for each read only.
struct InpReader<'e> {
    eng: &'e Inp,
    path: Vec<(u64, usize)>,
    bufs: Bufs,
}

impl SnapshotRead for InpReader<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        let _p = breakdown::phase(Phase::Scan);
        let _r = self.eng.rw.read();
        get_locked(self.eng, key, out, &mut self.path, &mut self.bufs)
    }

    fn scan_with(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _r = self.eng.rw.read();
        scan_locked(self.eng, from, limit, f, &mut self.bufs)
    }

    fn scan_back_with(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _r = self.eng.rw.read();
        scan_back_locked(self.eng, upto, limit, f, &mut self.bufs)
    }

    fn len(&mut self) -> Result<u64> {
        Ok(self.eng.keys.load(Ordering::Acquire))
    }
}

impl SnapshotRead for InpSnapshot<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        get_locked(self.eng, key, out, &mut self.path, &mut self.bufs)
    }

    fn scan_with(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        scan_locked(self.eng, from, limit, f, &mut self.bufs)
    }

    fn scan_back_with(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        scan_back_locked(self.eng, upto, limit, f, &mut self.bufs)
    }

    fn len(&mut self) -> Result<u64> {
        Ok(self.eng.keys.load(Ordering::Acquire))
    }
}

impl Session for InpSession<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        let _p = breakdown::phase(Phase::Scan);
        let _r = self.eng.rw.read();
        get_locked(self.eng, key, out, &mut self.path, &mut self.bufs)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key)?;
        check_value(value)?;
        self.write(|w| w.put(key, value))
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        check_key(key)?;
        self.write(|w| w.delete(key))
    }

    fn scan_with(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _p = breakdown::phase(Phase::Scan);
        let _r = self.eng.rw.read();
        scan_locked(self.eng, from, limit, f, &mut self.bufs)
    }

    fn scan_back_with(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _p = breakdown::phase(Phase::Scan);
        let _r = self.eng.rw.read();
        scan_back_locked(self.eng, upto, limit, f, &mut self.bufs)
    }

    fn batch(&mut self, ops: &[Op<'_>]) -> Result<()> {
        check_ops(ops)?;
        // Applied in key order: consecutive keys descend to the same or
        // neighbouring leaves, whose staged copies are then still in cache
        // (a large batch in arrival order touches the whole tree at
        // random). Later operations on a key win: only the last one per key
        // is applied, so that no tuple is touched twice in a record.
        let mut idx: Vec<usize> = (0..ops.len()).collect();
        idx.sort_unstable_by(|&a, &b| ops[a].key().cmp(ops[b].key()).then(a.cmp(&b)));
        self.write(|w| {
            for (n, &i) in idx.iter().enumerate() {
                let op = &ops[i];
                if idx
                    .get(n + 1)
                    .is_some_and(|&next| ops[next].key() == op.key())
                {
                    continue;
                }
                match op {
                    Op::Put { key, value } => w.put(key, value)?,
                    Op::Delete { key } => {
                        w.delete(key)?;
                    }
                }
            }
            Ok(())
        })
    }
}
