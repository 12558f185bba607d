//! Running transactions: thread handles, the transaction view functions
//! get, and the three logging protocols.
//!
//! # Protocols (per writing transaction; E = first-written ranges of
//! existing data)
//!
//! | strategy | before an in-place write                                   | commit                                                            | fences      |
//! |----------|------------------------------------------------------------|-------------------------------------------------------------------|-------------|
//! | undo     | UNDO record of the range's old bytes, fence                | apply allocator ops, flush data, fence; `done`, fence             | E + 2       |
//! | redo     | (nothing: buffered in DRAM)                                 | REDO record, fence; apply writes and ops, flush, fence; `done` pending | 2      |
//! | clobber  | clobber write: staged in DRAM, its old bytes pending; pure output: the first one is a flush point | flush point; apply ops, flush data, END, fence; `done` pending | 2 (3 with a pure-output write before the last clobber) |
//! | no-log   | nothing                                                    | apply allocator ops, flush data, fence                            | 1           |
//!
//! A clobber *flush point* writes the v_log (the first time) and one CLOB
//! record with every pending clobbered input, fences, and applies the
//! staged writes in place. P1 logs each clobber write with its own fence
//! (C + 1 fences for C clobber writes); holding the few clobbered words
//! back in DRAM until the next flush point keeps P1's invariant — a
//! clobbered input's new value never reaches the medium before its old
//! value is durable — with one fence for all of them.
//!
//! Writes into blocks the transaction allocated go in place unlogged under
//! every strategy (nothing reaches them until the transaction links them),
//! and are flushed at commit — under redo with the REDO record, which
//! carries their checksums so that it cannot commit links to bytes that
//! did not survive ([`crate::format`], tag 4). A transaction that writes
//! nothing costs no fence and no log.
//!
//! Allocation and free go through the allocator's prepare/commit
//! ([`ferrite_alloc::AllocThread::prepare`]): the allocator's metadata
//! operations are applied only at commit, after their inverses are in a
//! durable UNDO/CLOB record (riding on the next record the transaction
//! writes anyway) or the operations themselves in the REDO record; so an
//! allocation commits or vanishes with its transaction, and the allocator
//! adds no fence. Inverses are exact because the bits belong to the
//! transaction alone until it commits (its reservations, its claimed frees).
//!
//! # Completion, and why redo and clobber need no fence for it
//!
//! A transaction's `done` word (slot offset 0) says its log is dead. Undo
//! must make it durable before returning: until then recovery would roll
//! the transaction back. Redo and clobber need not: a crash before `done`
//! is durable replays the redo record (idempotent) or restores the
//! clobbered inputs and re-executes (same inputs, same result). They set
//! their bit in the pool's *pending* mask, store `done` and return, without
//! flushing it. Every fence point of every thread first flushes all pending
//! `done` lines (`clwb` works on any core's dirty line), so a transaction's
//! completion is durable before any later transaction — on any thread,
//! which under strict 2PL is the only one that can have seen its writes —
//! writes in place. Consecutive transactions of a slot use alternate log
//! areas, so the log of a transaction whose completion is still pending is
//! never overwritten. Blocks a clobber transaction frees go back to the
//! allocator only after its own next fence point (re-execution would read
//! them again); undo and redo free at commit.
//!
//! # Flushes and locked instructions
//!
//! A `clwb` is ordered after older stores to its line and before younger
//! locked read-modify-writes (Intel SDM, CLWB), so a flush issued right
//! behind its store stalls on it, and any atomic read-modify-write or lock
//! operation issued while flushes are in flight waits for their write-backs
//! as a fence would. So the commit paths store first and flush later, draw
//! the ticket before the first flush, and leave no flush in flight when
//! they return (the caller's unlock is a locked instruction): the `done`
//! line is flushed by the next fence point, not by the commit. On this
//! machine each of those waits cost about as much as a fence.
//!
//! # Clobber logging, dynamically [P1 §3.2]
//!
//! A byte is a *clobbered input* when the transaction reads it before it
//! writes it (the read set and written set are tracked as byte ranges);
//! only those bytes are logged, once each, at the write that clobbers them
//! (their values then are the transaction's inputs: nothing of it has
//! reached them yet). Reads see staged writes. The v_log (function id and
//! volatile inputs) is written at the first flush point, in the same
//! fence as the clobber entries.

mod thread;
mod view;

use crate::args::Inputs;
use crate::error::{Result, TxError};
use crate::fault::Fault;
use crate::format::{self, Layout};
use crate::interval::{Ranges, ReadSet};
use crate::options::Strategy;
use crate::report::TxRecovery;
use ferrite_alloc::{Heap, HeapThread, MetaOp, Reservation};
use ferrite_pmem::{POff, Region};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The body of a transaction: reads and writes persistent data only
/// through `tx`, takes its volatile inputs only from `inputs`, and returns
/// a result word to the caller (re-execution discards it).
pub type TxBody = fn(&mut Tx<'_, '_>, &Inputs<'_>) -> Result<u64>;

/// A registered transaction function.
#[derive(Debug)]
pub struct TxFunc {
    /// Stable identity, written into the v_log; never reuse an id for a
    /// function that does something else.
    pub id: u32,
    /// For messages.
    pub name: &'static str,
    /// The code: the same body runs under every strategy and, after a
    /// crash under clobber logging, again from the logged inputs.
    pub body: TxBody,
}

/// The functions a pool may run and, after a crash, re-execute.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    funcs: Vec<&'static TxFunc>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Adds `f`. Registering the same function twice is harmless; another
    /// function with the same id is [`TxError::DuplicateId`].
    pub fn register(&mut self, f: &'static TxFunc) -> Result<()> {
        match self.funcs.binary_search_by_key(&f.id, |g| g.id) {
            Ok(i) if std::ptr::eq(self.funcs[i], f) => Ok(()),
            Ok(i) => Err(TxError::DuplicateId {
                id: f.id,
                first: self.funcs[i].name,
                second: f.name,
            }),
            Err(i) => {
                self.funcs.insert(i, f);
                Ok(())
            }
        }
    }

    /// Adds every function of `fs`.
    pub fn with(mut self, fs: &[&'static TxFunc]) -> Result<Registry> {
        for f in fs {
            self.register(f)?;
        }
        Ok(self)
    }

    /// The function registered with `id`, if any.
    pub fn get(&self, id: u32) -> Option<&'static TxFunc> {
        self.funcs
            .binary_search_by_key(&id, |g| g.id)
            .ok()
            .map(|i| self.funcs[i])
    }

    /// `Ok` when `f` itself (not only its id) is registered.
    pub fn check(&self, f: &'static TxFunc) -> Result<()> {
        match self.get(f.id) {
            Some(g) if std::ptr::eq(g, f) => Ok(()),
            _ => Err(TxError::Unregistered {
                id: f.id,
                name: f.name,
            }),
        }
    }
}

/// Cumulative counts of one thread handle (log entries and bytes are what
/// [P1 Fig. 3.7] plots per transaction).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxStats {
    /// Transactions committed (read-only ones included).
    pub txs: u64,
    /// Committed transactions that wrote something.
    pub writing: u64,
    /// Transactions rolled back (the function returned an error).
    pub aborted: u64,
    /// v_log records (clobber: one per writing transaction).
    pub vlog_entries: u64,
    /// Bytes of v_log records and of the END records that complete them,
    /// headers included.
    pub vlog_bytes: u64,
    /// Logged byte ranges: undo snapshots, redo writes, clobbered inputs.
    pub log_entries: u64,
    /// Logged allocator operations (inverses for undo and clobber).
    pub alloc_entries: u64,
    /// Bytes of UNDO/REDO/CLOB records, headers included.
    pub log_bytes: u64,
    /// UNDO/REDO/CLOB records appended: log entries in P1's (and PMDK's)
    /// sense, each a separately ordered append; one may hold several
    /// ranges.
    pub records: u64,
    /// Fences issued by the transaction layer (allocator fences excluded).
    pub fences: u64,
}

impl TxStats {
    /// Field-wise `self - o`: the counts between two snapshots of one
    /// handle (`o` the earlier; panics on underflow in debug builds).
    pub fn sub(&self, o: &TxStats) -> TxStats {
        TxStats {
            txs: self.txs - o.txs,
            writing: self.writing - o.writing,
            aborted: self.aborted - o.aborted,
            vlog_entries: self.vlog_entries - o.vlog_entries,
            vlog_bytes: self.vlog_bytes - o.vlog_bytes,
            log_entries: self.log_entries - o.log_entries,
            alloc_entries: self.alloc_entries - o.alloc_entries,
            log_bytes: self.log_bytes - o.log_bytes,
            records: self.records - o.records,
            fences: self.fences - o.fences,
        }
    }

    /// Field-wise `self + o`: the counts of several handles together.
    pub fn add(&self, o: &TxStats) -> TxStats {
        TxStats {
            txs: self.txs + o.txs,
            writing: self.writing + o.writing,
            aborted: self.aborted + o.aborted,
            vlog_entries: self.vlog_entries + o.vlog_entries,
            vlog_bytes: self.vlog_bytes + o.vlog_bytes,
            log_entries: self.log_entries + o.log_entries,
            alloc_entries: self.alloc_entries + o.alloc_entries,
            log_bytes: self.log_bytes + o.log_bytes,
            records: self.records + o.records,
            fences: self.fences + o.fences,
        }
    }
}

/// One allocator operation of the running transaction.
#[derive(Clone, Copy, Debug)]
struct OpEntry {
    fwd: MetaOp,
    inv: MetaOp,
    /// Its inverse is in a record already.
    logged: bool,
    /// False once the reservation it belongs to was given back.
    live: bool,
}

/// What recovery hands a re-execution: the clobbered inputs the crashed
/// execution logged, in order, to compare with the ones it logs again.
#[derive(Debug, Default)]
pub(crate) struct Replay {
    pub expected: Vec<(u64, Vec<u8>)>,
    pub next: usize,
    pub diverged: Option<String>,
    /// Bytes earlier re-executions of the recovery group wrote. A
    /// transaction that reads any of them saw an earlier transaction's
    /// outputs, which its re-execution may have produced differently
    /// (another block allocated): its inputs legitimately differ from
    /// what it logged, so a difference proves nothing.
    pub earlier: Ranges,
    pub dependent: bool,
}

/// Per-transaction state, kept in the handle and reused (the hot path
/// allocates nothing once the buffers have grown).
#[derive(Default)]
struct State {
    epoch: u64,
    /// Next record's offset in the area.
    pos: usize,
    /// Clobber: the v_log record is written.
    vlog: bool,
    /// Bytes read (clobber only).
    reads: ReadSet,
    /// Bytes of existing data written (logged or buffered).
    touched: Ranges,
    /// Bytes written in place, to flush at commit.
    dirty: Ranges,
    /// Blocks allocated / freed by this transaction: `[start, end)`.
    fresh: Vec<(u64, u64)>,
    freed: Vec<(u64, u64)>,
    /// Reservations, and the range of `ops` each one's operations occupy.
    res: Vec<Reservation>,
    res_ops: Vec<std::ops::Range<usize>>,
    frees: Vec<POff<u8>>,
    ops: Vec<OpEntry>,
    /// Redo: buffered writes (offset, position in `redo_buf`, length).
    redo: Vec<(u64, usize, usize)>,
    redo_buf: Vec<u8>,
    /// Clobber: writes to clobbered inputs held back until their log
    /// entries are durable.
    staged: Staged,
    /// Clobber: the CLOB record being gathered (header space, then items)
    /// and its item count.
    pend: Vec<u8>,
    pend_n: u32,
    /// Undo: DRAM copy of the logged old bytes, to roll back an abort.
    undo: Vec<(u64, usize, usize)>,
    undo_buf: Vec<u8>,
    /// The record being built: header space, then payload.
    payload: Vec<u8>,
    /// Area offset of the first record not yet flushed (records are
    /// flushed together, one call per fence).
    unflushed: Option<usize>,
    /// Reads and writes so far (against the pool's access limit).
    accesses: u64,
    pieces: Vec<(u64, u64)>,
    pieces2: Vec<(u64, u64)>,
    old: Vec<u8>,
    prep: Vec<MetaOp>,
    replay: Option<Replay>,
}

impl State {
    fn reset(&mut self) {
        self.accesses = 0;
        self.epoch = 0;
        self.pos = 0;
        self.vlog = false;
        self.reads.clear();
        self.touched.clear();
        self.dirty.clear();
        self.fresh.clear();
        self.freed.clear();
        self.res.clear();
        self.res_ops.clear();
        self.frees.clear();
        self.staged.clear();
        begin(&mut self.pend);
        self.pend_n = 0;
        self.unflushed = None;
        self.ops.clear();
        self.redo.clear();
        self.redo_buf.clear();
        self.undo.clear();
        self.undo_buf.clear();
        self.replay = None;
    }

    fn pending_inverses(&self) -> bool {
        self.ops.iter().any(|o| o.live && !o.logged)
    }

    fn live_ops(&self) -> bool {
        self.ops.iter().any(|o| o.live)
    }
}

/// Clobber's staged writes, in program order.
#[derive(Default)]
struct Staged {
    /// (offset, position in `buf`, length).
    list: Vec<(u64, usize, usize)>,
    buf: Vec<u8>,
    /// The bytes `list` covers, kept only past [`Staged::SCAN`] writes:
    /// below that a scan of the list answers overlap queries faster than
    /// maintaining the set (most transactions stage one to three words).
    set: Ranges,
}

impl Staged {
    const SCAN: usize = 8;

    fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    fn clear(&mut self) {
        if self.list.len() > Self::SCAN {
            self.set.clear();
        }
        self.list.clear();
        self.buf.clear();
    }

    fn push(&mut self, off: u64, src: &[u8]) {
        let p = self.buf.len();
        self.buf.extend_from_slice(src);
        self.list.push((off, p, src.len()));
        let n = self.list.len();
        if n > Self::SCAN {
            if n == Self::SCAN + 1 {
                for &(w, _, len) in &self.list[..n - 1] {
                    self.set.insert(w, w + len as u64);
                }
            }
            self.set.insert(off, off + src.len() as u64);
        }
    }

    /// Whether a staged write overlaps `[s, e)`.
    fn overlaps(&self, s: u64, e: u64) -> bool {
        if self.list.len() > Self::SCAN {
            return self.set.overlaps(s, e);
        }
        self.list
            .iter()
            .any(|&(w, _, len)| w < e && s < w + len as u64)
    }
}

/// Where a write lands.
enum Target {
    /// Inside a block this transaction allocated.
    Fresh,
    /// Existing data.
    Existing,
}

/// A thread's handle on a [`TxPool`]: its log slot, its allocator handle
/// and its transaction state. One per thread; dropping it makes its last
/// completion durable and frees the slot.
pub struct TxThread<'p> {
    pool: &'p TxPool,
    heap: HeapThread<'p>,
    slot: u16,
    next_epoch: u64,
    strategy: Strategy,
    st: State,
    /// Clobber: frees of committed transactions held back until this
    /// handle's `done` is durable.
    deferred: Vec<POff<u8>>,
    /// This handle's `done` was written after its last fence.
    done_pending: bool,
    stats: TxStats,
    /// Counts clobber v_logs made durable (for the crash checks' model).
    witness: Option<Arc<AtomicU64>>,
}

impl std::fmt::Debug for TxThread<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxThread")
            .field("slot", &self.slot)
            .field("strategy", &self.strategy)
            .field("next_epoch", &self.next_epoch)
            .finish()
    }
}

/// The view of the pool a transaction function gets: every persistent read
/// and write, allocation and free goes through it.
pub struct Tx<'a, 'p> {
    th: &'a mut TxThread<'p>,
    inputs: Inputs<'a>,
    func: &'static TxFunc,
}

impl std::fmt::Debug for Tx<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx")
            .field("func", &self.func.name)
            .field("strategy", &self.th.strategy)
            .finish()
    }
}

/// Per-slot DRAM state: the next epoch, or `None` while a thread holds it.
pub(crate) struct Slots {
    pub next_epoch: Vec<Option<u64>>,
}

/// A pool opened for transactions. See the crate documentation.
pub struct TxPool {
    /// The whole pool: records, data and operations are addressed by pool offset.
    pub(crate) region: Region,
    pub(crate) layout: Layout,
    pub(crate) heap: Heap,
    pub(crate) strategy: Strategy,
    pub(crate) registry: Registry,
    pub(crate) slots: Mutex<Slots>,
    /// Bit `i`: slot `i` wrote its `done` word after its last fence; every
    /// fence point flushes those lines first (see [`crate::tx`]).
    pub(crate) pending: AtomicU64,
    /// Global order of finished transactions across slots.
    pub(crate) ticket: AtomicU64,
    pub(crate) poisoned: AtomicBool,
    pub(crate) recovery: TxRecovery,
    pub(crate) fault: Fault,
    /// Record checksum seed (crc32c of the nonce).
    pub(crate) seed: u32,
    /// Most reads and writes one transaction may make.
    pub(crate) access_limit: AtomicU64,
}

impl std::fmt::Debug for TxPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxPool")
            .field("strategy", &self.strategy)
            .field("slots", &self.layout.sb.slots)
            .field("area_bytes", &self.layout.sb.area_bytes)
            .finish()
    }
}

impl TxPool {
    /// Attaches the calling thread: it takes a free log slot and an
    /// allocator handle. Each thread uses its own; dropping it detaches.
    pub fn thread(&self) -> Result<TxThread<'_>> {
        TxThread::attach(self, None, self.strategy)
    }

    pub(crate) fn done_off(&self, slot: u16) -> usize {
        self.layout.slot_off(slot) as usize
    }

    pub(crate) fn area_len(&self) -> usize {
        self.layout.sb.area_bytes as usize
    }

    /// Flushes the `done` line of every slot whose completion is pending.
    /// Returns the mask that was flushed.
    pub(crate) fn flush_pending(&self) -> u64 {
        let m = self.pending.load(Ordering::Acquire);
        let mut bits = m;
        while bits != 0 {
            let i = bits.trailing_zeros() as u16;
            bits &= bits - 1;
            self.region.flush(self.done_off(i), 8);
        }
        m
    }
}

/// Starts a record in `buf`: header space, payload to follow.
fn begin(buf: &mut Vec<u8>) {
    buf.clear();
    buf.resize(format::REC_HDR, 0);
}
