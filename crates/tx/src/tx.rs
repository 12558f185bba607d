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

use crate::error::{Result, TxError};
use crate::fault::Fault;
use crate::format::{self, Kind, RecHead};
use crate::interval::{Ranges, ReadSet};
use crate::pool::{Strategy, TxPool};
use crate::registry::{Inputs, TxFunc};
use ferrite_alloc::{AllocThread, HeapThread, MetaOp, OpKind, PAllocator, Publish, Reservation};
use ferrite_pmem::POff;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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

impl<'p> TxThread<'p> {
    /// Takes slot `slot`, or the first free slot when `None` — found and
    /// taken under one lock, so concurrent attaches never pick the same one.
    pub(crate) fn attach(
        pool: &'p TxPool,
        slot: Option<u16>,
        strategy: Strategy,
    ) -> Result<TxThread<'p>> {
        let (slot, next_epoch) = {
            let mut s = pool.slots.lock();
            let n = s.next_epoch.len();
            let i = match slot {
                Some(i) => i as usize,
                None => s
                    .next_epoch
                    .iter()
                    .position(Option::is_some)
                    .ok_or(TxError::NoSlot { slots: n })?,
            };
            let e = s
                .next_epoch
                .get_mut(i)
                .and_then(Option::take)
                .ok_or(TxError::NoSlot { slots: n })?;
            (i as u16, e)
        };
        let heap = match pool.heap.attach() {
            Ok(h) => h,
            Err(e) => {
                pool.slots.lock().next_epoch[slot as usize] = Some(next_epoch);
                return Err(e.into());
            }
        };
        Ok(TxThread {
            pool,
            heap,
            slot,
            next_epoch,
            strategy,
            st: State::default(),
            deferred: Vec::new(),
            done_pending: false,
            stats: TxStats::default(),
            witness: None,
        })
    }

    /// This handle's log slot.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    pub fn pool(&self) -> &'p TxPool {
        self.pool
    }

    /// Counts, in `w`, every clobber v_log whose fence completed: from then
    /// on the transaction must take effect whatever happens. For the crash
    /// checks' model; not part of the supported API.
    #[doc(hidden)]
    pub fn set_witness(&mut self, w: Arc<AtomicU64>) {
        self.witness = Some(w);
    }

    fn witness_vlog(&self) {
        if let Some(w) = &self.witness {
            w.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Cumulative counts of this handle.
    pub fn stats(&self) -> TxStats {
        self.stats
    }

    /// Runs `f` as one failure-atomic transaction with arguments `args` and
    /// the preserved DRAM buffers `bufs`, and returns its result word.
    ///
    /// The caller holds the locks protecting everything `f` touches, taken
    /// before the call and released after it returns (strict two-phase
    /// locking, P1 §3.1.1). When `f` returns an error the transaction is
    /// rolled back and the error returned — except under clobber logging
    /// after `f`'s first write to existing data: see
    /// [`TxError::AbortAfterWrite`].
    pub fn run(&mut self, f: &'static TxFunc, args: &[u8], bufs: &[&[u8]]) -> Result<u64> {
        if self.pool.poisoned.load(Ordering::Acquire) {
            return Err(TxError::Poisoned);
        }
        self.pool.registry.check(f)?;
        let inputs = Inputs::new(args, bufs);
        if self.strategy == Strategy::Clobber
            && format::REC_HDR + inputs.vlog_len() + format::REC_HDR > self.pool.area_len()
        {
            return Err(TxError::LogFull {
                need: format::REC_HDR + inputs.vlog_len(),
                have: self.pool.area_len(),
            });
        }
        self.st.reset();
        // A writing transaction that committed is one commit point of the
        // persist trace (after its last fence); allocator publishes and
        // logs inside it are part of it. Read-only ones persist nothing.
        let scope = ferrite_pmem::trace::commit_scope();
        let writing = self.stats.writing;
        let r = self.exec(f, inputs);
        if r.is_ok() && self.stats.writing > writing {
            scope.mark();
        }
        r
    }

    /// Re-executes a crashed clobber transaction (recovery only): epoch,
    /// area position and the logged inputs come from the log.
    /// Returns the divergence found (if the transaction did not depend on
    /// an earlier re-execution) and `replay.earlier` extended with what
    /// this one wrote.
    pub(crate) fn reexecute(
        &mut self,
        f: &'static TxFunc,
        inputs: Inputs<'_>,
        epoch: u64,
        pos: usize,
        replay: Replay,
    ) -> Result<(Option<String>, Ranges)> {
        self.st.reset();
        self.st.epoch = epoch;
        self.st.pos = pos;
        self.st.vlog = true;
        self.st.replay = Some(replay);
        self.exec(f, inputs)?;
        let mut r = self.st.replay.take().unwrap_or_default();
        for (a, b) in self.st.touched.iter().chain(self.st.dirty.iter()) {
            r.earlier.insert(a, b);
        }
        let diverged = if r.dependent { None } else { r.diverged };
        Ok((diverged, r.earlier))
    }

    fn exec(&mut self, f: &'static TxFunc, inputs: Inputs<'_>) -> Result<u64> {
        let result = {
            let mut tx = Tx {
                th: self,
                inputs,
                func: f,
            };
            (f.body)(&mut tx, &inputs)
        };
        match result.and_then(|v| self.commit(inputs, f).map(|()| v)) {
            Ok(v) => Ok(v),
            Err(e) => Err(self.abort(f, e)),
        }
    }

    /// Frees held back (recovery collects those of its re-executions).
    pub(crate) fn take_deferred(&mut self) -> Vec<POff<u8>> {
        std::mem::take(&mut self.deferred)
    }

    /// Gives blocks freed by committed transactions back to the allocator.
    pub(crate) fn release_frees(&mut self, frees: &[POff<u8>]) {
        if !frees.is_empty() {
            self.heap.commit_prepared(&Publish {
                allocs: &[],
                frees,
                links: &[],
            });
        }
    }

    /// Makes this handle's last completion durable (one fence if it is
    /// pending) and hands held-back frees to the allocator. Dropping the
    /// handle does this too.
    pub fn quiesce(&mut self) {
        if self.done_pending || !self.deferred.is_empty() {
            self.fence_point();
        }
    }

    // ---- log writing ----------------------------------------------------------------

    fn ensure_epoch(&mut self) {
        if self.st.epoch == 0 {
            self.st.epoch = self.next_epoch;
            self.next_epoch += 1;
            self.st.pos = 0;
        }
    }

    /// Appends the record built in `st.payload` (not flushed: the next
    /// fence point flushes every record appended since the last one).
    fn append(&mut self, kind: Kind, aux: u64, items: u32) -> Result<()> {
        self.ensure_epoch();
        let pool = self.pool;
        let st = &mut self.st;
        let need = st.pos + st.payload.len();
        // Every record but END leaves room for the END record, so a
        // clobber transaction can always finish once it has begun.
        let keep = if kind == Kind::End {
            0
        } else {
            format::REC_HDR
        };
        if need + keep > pool.area_len() {
            return Err(TxError::LogFull {
                need,
                have: pool.area_len(),
            });
        }
        format::seal_record(
            &mut st.payload,
            pool.seed,
            &RecHead {
                kind,
                slot: self.slot,
                epoch: st.epoch,
                aux,
                items,
            },
        );
        let at = pool.layout.area_off(self.slot, st.epoch % 2) as usize + st.pos;
        pool.region.write(at, &st.payload);
        st.unflushed.get_or_insert(st.pos);
        st.pos = need;
        let n = st.payload.len() as u64;
        match kind {
            Kind::Vlog => {
                self.stats.vlog_entries += 1;
                self.stats.vlog_bytes += n;
            }
            Kind::End => self.stats.vlog_bytes += n,
            _ => {
                self.stats.log_bytes += n;
                self.stats.records += 1;
            }
        }
        Ok(())
    }

    /// Flushes the records appended since the last fence, in one call.
    fn flush_log(&mut self) {
        if let Some(from) = self.st.unflushed.take() {
            let at = self.pool.layout.area_off(self.slot, self.st.epoch % 2) as usize + from;
            self.pool.region.flush(at, self.st.pos - from);
        }
    }

    /// Adds the inverse of every live allocator operation not yet logged
    /// to `st.payload`; returns how many.
    fn drain_inverses(&mut self) -> u32 {
        let mut n = 0;
        for o in self.st.ops.iter_mut().filter(|o| o.live && !o.logged) {
            format::put_op(&mut self.st.payload, &o.inv);
            o.logged = true;
            n += 1;
        }
        self.stats.alloc_entries += u64::from(n);
        n
    }

    /// Writes the v_log record (clobber).
    fn append_vlog(&mut self, inputs: Inputs<'_>, f: &TxFunc) -> Result<()> {
        begin(&mut self.st.payload);
        format::put_buffer(&mut self.st.payload, inputs.args());
        for b in inputs.bufs() {
            format::put_buffer(&mut self.st.payload, b);
        }
        self.append(Kind::Vlog, u64::from(f.id), 1 + inputs.bufs().len() as u32)?;
        self.st.vlog = true;
        Ok(())
    }

    /// Fails with [`TxError::LogFull`] unless the v_log (if not written
    /// yet), a CLOB record with the pending items plus `extra` payload
    /// bytes and the pending inverses, and the END record all fit: checked
    /// before anything is logged, so that a transaction whose v_log is
    /// written can always be finished.
    fn clobber_room(&self, inputs: Inputs<'_>, extra: usize) -> Result<()> {
        let st = &self.st;
        let vlog = if st.vlog {
            0
        } else {
            format::REC_HDR + inputs.vlog_len()
        };
        let inv = st.ops.iter().filter(|o| o.live && !o.logged).count() * format::ITEM_HDR;
        // `pend` holds the CLOB record's header space already.
        let need = st.pos + vlog + format::REC_HDR + st.pend.len() + extra + inv + format::REC_HDR;
        if need > self.pool.area_len() {
            return Err(TxError::LogFull {
                need,
                have: self.pool.area_len(),
            });
        }
        Ok(())
    }

    /// Clobber's log flush point: writes the v_log (if not yet written)
    /// and one CLOB record with every pending clobbered input and
    /// allocator inverse, fences, then applies the staged writes in place
    /// (they may reach the medium now that their inputs are durable).
    fn flush_point(&mut self, inputs: Inputs<'_>, f: &TxFunc) -> Result<()> {
        self.clobber_room(inputs, 0)?;
        let first = !self.st.vlog;
        if first {
            self.append_vlog(inputs, f)?;
        }
        let mut n = self.st.pend_n;
        std::mem::swap(&mut self.st.payload, &mut self.st.pend);
        n += self.drain_inverses();
        if n > 0 {
            // aux 1 marks a re-execution's log (see `write_clobber`).
            let aux = u64::from(self.st.replay.is_some());
            self.append(Kind::Clob, aux, n)?;
        }
        self.st.pend_n = 0;
        begin(&mut self.st.pend);
        self.fence_point();
        if first {
            self.witness_vlog();
        }
        let pool = self.pool;
        let st = &mut self.st;
        for &(off, p, n) in &st.staged.list {
            pool.region.write(off as usize, &st.staged.buf[p..p + n]);
            // Flushed with the rest at commit: a flush right behind its
            // store costs far more than one issued later.
            st.dirty.insert(off, off + n as u64);
        }
        st.staged.clear();
        Ok(())
    }

    /// A fence that orders the log before in-place writes: first flushes
    /// every pending `done` line (this handle's included), then fences.
    fn fence_point(&mut self) {
        self.flush_log();
        let pool = self.pool;
        let m = pool.flush_pending();
        pool.region.fence();
        self.stats.fences += 1;
        let bit = 1u64 << self.slot;
        if self.done_pending && m & bit != 0 {
            pool.pending.fetch_and(!bit, Ordering::AcqRel);
            self.done_pending = false;
        }
        if !self.done_pending && !self.deferred.is_empty() {
            let frees = std::mem::take(&mut self.deferred);
            self.heap.commit_prepared(&Publish {
                allocs: &[],
                frees: &frees,
                links: &[],
            });
        }
    }

    /// Plain fence (no pending flushes): orders data before a completion.
    fn fence(&mut self) {
        self.flush_log();
        self.pool.region.fence();
        self.stats.fences += 1;
    }

    // ---- commit and abort -----------------------------------------------------------

    fn apply_ops(&mut self) {
        let pool = self.pool;
        for o in self.st.ops.iter().filter(|o| o.live) {
            o.fwd.apply(&pool.region);
            pool.region.flush(o.fwd.off as usize, 8);
        }
    }

    fn flush_dirty(&self) {
        for (a, b) in self.st.dirty.iter() {
            self.pool.region.flush(a as usize, (b - a) as usize);
        }
    }

    /// Writes `done = epoch` and flushes it; durable after the next fence.
    fn write_done(&mut self) {
        let at = self.pool.done_off(self.slot);
        self.pool.region.store_u64(at, self.st.epoch);
        self.pool.region.flush(at, 8);
    }

    /// Marks the completion pending: the next fence point of any thread
    /// flushes the `done` line and makes it durable. Not flushed here: a
    /// flush still in flight would hold up the locked `fetch_or` below and
    /// the caller's lock release (both wait for it, as a fence would), and
    /// the fence point flushes the line anyway. Other threads' fence
    /// points may flush the line before the store; only this handle's own
    /// fence point, which follows it, clears the pending bit.
    fn done_lazily(&mut self) {
        self.pool
            .pending
            .fetch_or(1u64 << self.slot, Ordering::AcqRel);
        let at = self.pool.done_off(self.slot);
        self.pool.region.store_u64(at, self.st.epoch);
        self.done_pending = true;
    }

    /// Hands the transaction's allocations (and, unless `defer_frees`, its
    /// frees) to the allocator as committed.
    fn finish_alloc(&mut self, defer_frees: bool) {
        let st = &mut self.st;
        if defer_frees {
            self.deferred.extend_from_slice(&st.frees);
            st.frees.clear();
        }
        if !st.res.is_empty() || !st.frees.is_empty() {
            self.heap.commit_prepared(&Publish {
                allocs: &st.res,
                frees: &st.frees,
                links: &[],
            });
        }
        st.res.clear();
        st.res_ops.clear();
        st.frees.clear();
    }

    fn commit(&mut self, inputs: Inputs<'_>, f: &'static TxFunc) -> Result<()> {
        let writes = !self.st.touched.is_empty() || !self.st.dirty.is_empty() || self.st.live_ops();
        if !writes && self.st.replay.is_none() {
            self.finish_alloc(false);
            self.stats.txs += 1;
            return Ok(());
        }
        match self.strategy {
            Strategy::NoLog => {
                self.apply_ops();
                self.flush_dirty();
                self.fence();
                self.finish_alloc(false);
            }
            Strategy::Undo => {
                if self.st.pending_inverses() {
                    begin(&mut self.st.payload);
                    let n = self.drain_inverses();
                    self.append(Kind::Undo, 0, n)?;
                    self.fence_point();
                }
                self.apply_ops();
                self.flush_dirty();
                self.fence();
                self.write_done();
                self.fence();
                self.finish_alloc(false);
            }
            Strategy::Redo => self.commit_redo()?,
            Strategy::Clobber => {
                // Drawn before anything is flushed: a locked
                // read-modify-write waits for every flush still in flight
                // (`clwb` is ordered with locked instructions), so drawn
                // after the data flushes it would cost as much as a fence.
                // The transaction has finished executing and still holds
                // its locks, which is all the ticket's order needs.
                let ticket = self.pool.ticket.fetch_add(1, Ordering::AcqRel);
                if !self.st.vlog
                    || self.st.pend_n > 0
                    || !self.st.staged.is_empty()
                    || self.st.pending_inverses()
                {
                    self.flush_point(inputs, f)?;
                }
                self.apply_ops();
                self.flush_dirty();
                begin(&mut self.st.payload);
                self.append(Kind::End, ticket, 0)?;
                self.fence();
                if self.st.replay.is_some() {
                    // Recovery marks the whole group of re-executions done
                    // once all of them ran, and only then gives freed
                    // blocks back (see `recovery`): it takes them from
                    // `deferred`.
                    self.finish_alloc(true);
                } else {
                    self.done_lazily();
                    self.finish_alloc(true);
                }
            }
        }
        self.stats.txs += 1;
        self.stats.writing += 1;
        Ok(())
    }

    fn commit_redo(&mut self) -> Result<()> {
        let pool = self.pool;
        begin(&mut self.st.payload);
        let mut items = 0u32;
        for i in 0..self.st.redo.len() {
            let (off, p, n) = self.st.redo[i];
            let st = &mut self.st;
            format::put_bytes(&mut st.payload, off, &st.redo_buf[p..p + n]);
            items += 1;
        }
        self.stats.log_entries += u64::from(items);
        let mut ops = 0u32;
        for o in self.st.ops.iter().filter(|o| o.live) {
            format::put_op(&mut self.st.payload, &o.fwd);
            ops += 1;
        }
        self.stats.alloc_entries += u64::from(ops);
        // Blocks the transaction allocated were written in place and are
        // flushed with the record, not before it: the record names their
        // checksums, so it cannot commit links to bytes that did not
        // survive (format, tag 4).
        let mut checks = 0u32;
        for i in 0..self.st.fresh.len() {
            let (a, b) = self.st.fresh[i];
            let st = &mut self.st;
            st.pieces.clear();
            st.dirty.intersect(a, b, &mut st.pieces);
            for j in 0..st.pieces.len() {
                let (s, e) = st.pieces[j];
                st.old.resize((e - s) as usize, 0);
                pool.region.read(s as usize, &mut st.old);
                format::put_check(&mut st.payload, s, (e - s) as u32, crc32c::crc32c(&st.old));
                checks += 1;
            }
        }
        let ticket = pool.ticket.fetch_add(1, Ordering::AcqRel);
        self.append(Kind::Redo, ticket, items + ops + checks)?;
        self.flush_dirty();
        if pool.fault != Fault::RedoApplyEarly {
            self.fence_point();
        }
        // All stores first, then their flushes: a flush right behind its
        // store stalls on it.
        for &(off, p, n) in &self.st.redo {
            pool.region.write(off as usize, &self.st.redo_buf[p..p + n]);
        }
        for &(off, _, n) in &self.st.redo {
            pool.region.flush(off as usize, n);
        }
        self.apply_ops();
        if pool.fault == Fault::RedoApplyEarly {
            self.fence_point();
        }
        self.fence();
        self.done_lazily();
        self.finish_alloc(false);
        Ok(())
    }

    /// Rolls the transaction back after `f` (or its commit) failed with
    /// `e`, and returns `e` (or [`TxError::AbortAfterWrite`]).
    fn abort(&mut self, f: &'static TxFunc, e: TxError) -> TxError {
        let wrote_in_place = self.st.vlog && self.st.replay.is_none();
        match self.strategy {
            Strategy::Clobber if wrote_in_place => {
                // The inputs are logged but the outputs' old values are
                // not: leave the transaction exactly as a crash would and
                // stop everyone until recovery re-executes it.
                self.pool.poisoned.store(true, Ordering::Release);
                return TxError::AbortAfterWrite {
                    name: f.name,
                    source: Box::new(e),
                };
            }
            Strategy::Undo if self.st.epoch != 0 => {
                let pool = self.pool;
                for &(off, p, n) in self.st.undo.iter().rev() {
                    pool.region.write(off as usize, &self.st.undo_buf[p..p + n]);
                    pool.region.flush(off as usize, n);
                }
                self.fence();
                self.write_done();
                self.fence();
            }
            _ => {}
        }
        // Nothing of the allocator's operations was applied: give the
        // reservations and claimed frees back.
        let frees = std::mem::take(&mut self.st.frees);
        self.heap.abort_prepared(&Publish {
            allocs: &[],
            frees: &frees,
            links: &[],
        });
        self.st.res_ops.clear();
        for r in self.st.res.drain(..) {
            let _ = self.heap.cancel(r);
        }
        self.stats.aborted += 1;
        e
    }
}

impl Drop for TxThread<'_> {
    fn drop(&mut self) {
        self.quiesce();
        self.pool.slots.lock().next_epoch[self.slot as usize] = Some(self.next_epoch);
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

impl Tx<'_, '_> {
    pub fn strategy(&self) -> Strategy {
        self.th.strategy
    }

    /// True while recovery re-executes this transaction.
    pub fn is_reexecution(&self) -> bool {
        self.th.st.replay.is_some()
    }

    fn check(&mut self, what: &'static str, off: u64, len: u64) -> Result<()> {
        self.th.st.accesses += 1;
        let limit = self.th.pool.access_limit.load(Ordering::Relaxed);
        if self.th.st.accesses > limit {
            return Err(TxError::Runaway { limit });
        }
        if !self.th.pool.layout.may_touch(off, len) {
            return Err(TxError::OutOfBounds { what, off, len });
        }
        let end = off + len;
        if self.th.st.freed.iter().any(|&(a, b)| off < b && a < end) {
            return Err(TxError::UseAfterFree { off });
        }
        Ok(())
    }

    fn target(&self, off: u64, len: u64) -> Result<Target> {
        let end = off + len;
        for &(a, b) in &self.th.st.fresh {
            if off >= a && end <= b {
                return Ok(Target::Fresh);
            }
            if off < b && a < end {
                return Err(TxError::StraddlesBlock { off, len });
            }
        }
        Ok(Target::Existing)
    }

    /// Reads `dst.len()` bytes at pool offset `at`.
    pub fn read<T: ?Sized>(&mut self, at: POff<T>, dst: &mut [u8]) -> Result<()> {
        let off = at.raw();
        let len = dst.len() as u64;
        if len == 0 {
            return Ok(());
        }
        self.check("read", off, len)?;
        let th = &mut *self.th;
        th.pool.region.read(off as usize, dst);
        let st = &mut th.st;
        match th.strategy {
            // Read your own buffered writes, newest last (`touched` is
            // exactly the buffered bytes under redo).
            Strategy::Redo if !st.redo.is_empty() && st.touched.overlaps(off, off + len) => {
                overlay(&st.redo, &st.redo_buf, off, dst)
            }
            Strategy::Redo => {}
            Strategy::Clobber => {
                if st.staged.overlaps(off, off + len) {
                    overlay(&st.staged.list, &st.staged.buf, off, dst);
                }
                // Bytes of blocks allocated in this transaction are never
                // clobbered inputs (writes to them are not logged), so
                // reading them needs no tracking.
                let fresh = !st.fresh.is_empty()
                    && st.fresh.iter().any(|&(a, b)| off >= a && off + len <= b);
                if !fresh {
                    st.reads.insert(off, off + len);
                }
                if let Some(r) = st.replay.as_mut()
                    && !r.dependent
                    && r.earlier.overlaps(off, off + len)
                {
                    r.dependent = true;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Reads one little-endian word.
    pub fn read_u64(&mut self, at: POff<u64>) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read(at, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Writes `src` at pool offset `at`.
    pub fn write<T: ?Sized>(&mut self, at: POff<T>, src: &[u8]) -> Result<()> {
        let off = at.raw();
        let len = src.len() as u64;
        if len == 0 {
            return Ok(());
        }
        self.check("write", off, len)?;
        let end = off + len;
        if let Target::Fresh = self.target(off, len)? {
            let th = &mut *self.th;
            th.pool.region.write(off as usize, src);
            th.st.dirty.insert(off, end);
            return Ok(());
        }
        match self.th.strategy {
            Strategy::NoLog => {}
            Strategy::Undo => self.log_undo(off, end)?,
            Strategy::Redo => {
                let st = &mut self.th.st;
                // Rewriting the range written last (a counter bumped twice,
                // a node rewritten): keep one copy.
                if let Some(&(w, p, n)) = st.redo.last()
                    && w == off
                    && n == src.len()
                {
                    st.redo_buf[p..p + n].copy_from_slice(src);
                    st.touched.insert(off, end);
                    return Ok(());
                }
                let p = st.redo_buf.len();
                st.redo_buf.extend_from_slice(src);
                st.redo.push((off, p, src.len()));
                st.touched.insert(off, end);
                return Ok(());
            }
            Strategy::Clobber => return self.write_clobber(off, end, src),
        }
        let th = &mut *self.th;
        th.pool.region.write(off as usize, src);
        th.st.touched.insert(off, end);
        th.st.dirty.insert(off, end);
        Ok(())
    }

    /// Writes one little-endian word.
    pub fn write_u64(&mut self, at: POff<u64>, v: u64) -> Result<()> {
        self.write(at, &v.to_le_bytes())
    }

    /// Undo: snapshots the not yet written parts of `[off, end)`.
    fn log_undo(&mut self, off: u64, end: u64) -> Result<()> {
        let th = &mut *self.th;
        let st = &mut th.st;
        st.pieces.clear();
        st.touched.gaps(off, end, &mut st.pieces);
        if st.pieces.is_empty() {
            return Ok(());
        }
        begin(&mut st.payload);
        let mut n = 0u32;
        for i in 0..st.pieces.len() {
            let (a, b) = st.pieces[i];
            let len = (b - a) as usize;
            st.old.resize(len, 0);
            th.pool.region.read(a as usize, &mut st.old);
            format::put_bytes(&mut st.payload, a, &st.old);
            let p = st.undo_buf.len();
            st.undo_buf.extend_from_slice(&st.old);
            st.undo.push((a, p, len));
            n += 1;
        }
        th.stats.log_entries += u64::from(n);
        n += th.drain_inverses();
        th.append(Kind::Undo, 0, n)?;
        if th.pool.fault != Fault::UndoNoFence {
            th.fence_point();
        }
        Ok(())
    }

    /// Clobber: a write to existing data. The bytes of `[off, end)` that
    /// the transaction read before writing are clobbered inputs: their old
    /// values join the pending CLOB items and the write is staged until the
    /// next flush point. Any other write is a pure output and goes in
    /// place — once the v_log is durable (the first such write is a flush
    /// point) and unless it overlaps a staged write (then it is staged
    /// after it, to keep program order).
    fn write_clobber(&mut self, off: u64, end: u64, src: &[u8]) -> Result<()> {
        let inputs = self.inputs;
        let func = self.func;
        let th = &mut *self.th;
        let st = &mut th.st;
        let replay = st.replay.is_some();
        st.pieces.clear();
        st.reads.intersect(off, end, &mut st.pieces);
        st.pieces2.clear();
        for i in 0..st.pieces.len() {
            let (a, b) = st.pieces[i];
            st.touched.gaps(a, b, &mut st.pieces2);
        }
        let clobbers = !st.pieces2.is_empty();
        if let Some(r) = st.replay.as_mut() {
            // Same inputs, same clobbered values — unless the function is
            // not deterministic.
            for &(a, b) in &st.pieces2 {
                if r.diverged.is_some() || r.next >= r.expected.len() {
                    break;
                }
                st.old.resize((b - a) as usize, 0);
                th.pool.region.read(a as usize, &mut st.old);
                let (eo, ed) = &r.expected[r.next];
                if *eo == a && ed[..] == st.old[..] {
                    r.next += 1;
                } else {
                    r.diverged = Some(format!(
                        "re-execution clobbers {a:#x} where the crashed run clobbered {eo:#x}"
                    ));
                }
            }
            // A re-execution logs the old value of every byte it writes,
            // pure outputs too, and writes nothing in place before that
            // log is durable: its effects must be undoable as a whole,
            // since no transaction of the recovery group is done before
            // all are (see `recovery`).
            st.pieces2.clear();
            st.touched.gaps(off, end, &mut st.pieces2);
        }
        if th.pool.fault == Fault::ClobberNoInputLog && !replay {
            st.pieces2.clear();
        }
        let logged: usize = st
            .pieces2
            .iter()
            .map(|&(a, b)| format::bytes_item_len((b - a) as usize))
            .sum();
        if logged > 0 {
            th.clobber_room(inputs, logged)?;
        }
        let st = &mut th.st;
        for i in 0..st.pieces2.len() {
            let (a, b) = st.pieces2[i];
            let n = (b - a) as usize;
            let p = format::put_bytes_space(&mut st.pend, a, n);
            // Not yet written by this transaction, so the medium holds the
            // value the transaction started with.
            th.pool.region.read(a as usize, &mut st.pend[p..p + n]);
            st.pend_n += 1;
            th.stats.log_entries += 1;
        }
        let st = &mut th.st;
        if clobbers || replay || st.staged.overlaps(off, end) {
            st.staged.push(off, src);
            st.touched.insert(off, end);
            return Ok(());
        }
        if !st.vlog {
            th.flush_point(inputs, func)?;
        }
        let st = &mut th.st;
        th.pool.region.write(off as usize, src);
        st.touched.insert(off, end);
        st.dirty.insert(off, end);
        Ok(())
    }

    /// Allocates at least `size` bytes; the block's content is whatever it
    /// was (write every byte before reading it). It becomes allocated when
    /// the transaction commits and is given back if it does not.
    pub fn alloc(&mut self, size: usize) -> Result<POff<u8>> {
        let th = &mut *self.th;
        let r = th.heap.reserve(size)?;
        th.st.prep.clear();
        let res = th.heap.prepare(
            &Publish {
                allocs: std::slice::from_ref(&r),
                frees: &[],
                links: &[],
            },
            &mut th.st.prep,
        );
        if let Err(e) = res {
            let _ = th.heap.cancel(r);
            return Err(e.into());
        }
        let start = th.st.ops.len();
        for &fwd in &th.st.prep {
            let inv = inverse(&fwd, &th.pool.region);
            th.st.ops.push(OpEntry {
                fwd,
                inv,
                logged: false,
                live: true,
            });
        }
        let off = r.off();
        let n = r.usable_size() as u64;
        th.st.fresh.push((off.raw(), off.raw() + n));
        th.st.res_ops.push(start..th.st.ops.len());
        th.st.res.push(r);
        Ok(off)
    }

    /// Frees the block at `off` when the transaction commits. Freeing a
    /// block allocated in this transaction gives it back at once.
    pub fn free(&mut self, off: POff<u8>) -> Result<()> {
        let th = &mut *self.th;
        if let Some(i) = th.st.res.iter().position(|r| r.off() == off) {
            let r = th.st.res.swap_remove(i);
            let ops = th.st.res_ops.swap_remove(i);
            for o in &mut th.st.ops[ops] {
                o.live = false;
            }
            // Not added to `freed`: the allocator may hand the block back
            // to this very transaction.
            th.st.fresh.retain(|&(s, _)| s != off.raw());
            th.heap.cancel(r)?;
            return Ok(());
        }
        let size = th.pool.heap.usable_size(off)? as u64;
        if !th.pool.layout.may_touch(off.raw(), size) {
            return Err(TxError::OutOfBounds {
                what: "free",
                off: off.raw(),
                len: size,
            });
        }
        th.st.prep.clear();
        th.heap.prepare(
            &Publish {
                allocs: &[],
                frees: std::slice::from_ref(&off),
                links: &[],
            },
            &mut th.st.prep,
        )?;
        for &fwd in &th.st.prep {
            let inv = inverse(&fwd, &th.pool.region);
            th.st.ops.push(OpEntry {
                fwd,
                inv,
                logged: false,
                live: true,
            });
        }
        th.st.frees.push(off);
        th.st.freed.push((off.raw(), off.raw() + size));
        Ok(())
    }

    /// The application's root pool offset.
    pub fn root(&mut self) -> Result<u64> {
        let at = self.th.pool.layout.root_word;
        self.read_u64(POff::new(at))
    }

    /// Replaces the application's root pool offset.
    pub fn set_root(&mut self, v: u64) -> Result<()> {
        let at = self.th.pool.layout.root_word;
        self.write_u64(POff::new(at), v)
    }

    /// Usable bytes of an allocated block.
    pub fn usable_size(&self, off: POff<u8>) -> Result<usize> {
        if let Some(&(a, b)) = self.th.st.fresh.iter().find(|&&(a, _)| a == off.raw()) {
            return Ok((b - a) as usize);
        }
        Ok(self.th.pool.heap.usable_size(off)?)
    }
}

/// The operation that undoes `op` on a word only this transaction changes:
/// its reservation's bit (set by `Or`), its claimed free's bit (cleared by
/// `AndNot`), an extent header (`Set`, whose old value is read now).
fn inverse(op: &MetaOp, pool: &ferrite_pmem::Region) -> MetaOp {
    match op.kind {
        OpKind::Or => MetaOp::and_not(op.off, op.val),
        OpKind::AndNot => MetaOp::or(op.off, op.val),
        OpKind::Set => MetaOp::set(op.off, pool.load_u64(op.off as usize)),
    }
}

/// Copies into `dst` (the bytes at `off`) every buffered write of `list`
/// that overlaps it, oldest first, so the newest wins.
fn overlay(list: &[(u64, usize, usize)], buf: &[u8], off: u64, dst: &mut [u8]) {
    if list.is_empty() {
        return;
    }
    let end = off + dst.len() as u64;
    for &(w, p, n) in list {
        let we = w + n as u64;
        if w < end && off < we {
            let s = w.max(off);
            let e = we.min(end);
            dst[(s - off) as usize..(e - off) as usize]
                .copy_from_slice(&buf[p + (s - w) as usize..p + (e - w) as usize]);
        }
    }
}

/// Starts a record in `buf`: header space, payload to follow.
fn begin(buf: &mut Vec<u8>) {
    buf.clear();
    buf.resize(format::REC_HDR, 0);
}
