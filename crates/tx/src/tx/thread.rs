//! The thread handle's side of a transaction: attaching, running a
//! registered function, and the logging protocols (records, fence points,
//! commit and abort per strategy) that [`super`] describes.

use super::{Replay, State, Tx, TxFunc, TxStats, TxThread, begin};
use crate::args::Inputs;
use crate::error::{Result, TxError};
use crate::fault::Fault;
use crate::format::{self, Kind, RecHead};
use crate::interval::Ranges;
use crate::options::Strategy;
use crate::tx::TxPool;
use ferrite_alloc::{AllocThread, Publish};
use ferrite_pmem::POff;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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

    /// The strategy this handle's transactions use (the pool's).
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The pool this handle is attached to.
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
    pub(super) fn append(&mut self, kind: Kind, aux: u64, items: u32) -> Result<()> {
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
    pub(super) fn drain_inverses(&mut self) -> u32 {
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
    pub(super) fn clobber_room(&self, inputs: Inputs<'_>, extra: usize) -> Result<()> {
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
    pub(super) fn flush_point(&mut self, inputs: Inputs<'_>, f: &TxFunc) -> Result<()> {
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
    pub(super) fn fence_point(&mut self) {
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
