//! The commit protocol of an InP write (module docs of [`super`]): what a
//! writer staged (an `OpState`) becomes one redo record ([`Inp::build_record`],
//! [`Inp::spill`]), committed under one fence ([`Inp::commit`]) — or, on an
//! allocator that cannot `prepare`, under the intent protocol
//! ([`Inp::publish_intent`], [`Inp::publish_owed`]) — then applied in place
//! ([`Inp::apply`]); [`Inp::rotate`] retires held frees with empty records.

use super::*;

/// In-place stores of a record beyond which it settles them itself
/// ([`Inp::commit`]) rather than leave them to the next record's fence.
const SETTLE_PENDING: usize = 256;

impl Inp {
    /// Makes the last record's in-place stores durable (quiesce, drop).
    pub(super) fn settle(&self, w: &mut WState) {
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
        op.staged.sort();
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
    pub(super) fn commit(
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
        // A large record's in-place stores are made durable now, under a
        // fence of its own, rather than by the next record's fence: a
        // bulk load's (one allocator word per run it filled: 267 k for 5 M
        // keys) would otherwise all be flushed by the single put after it
        // — a stall of tens of milliseconds on someone else's write, and
        // 13 of its 21 lines per put over the 20 000 puts of the long-run
        // row. Small records keep the deferral (one fence per write).
        if w.pending.len() > SETTLE_PENDING {
            self.settle(w);
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
        self.st.appends.fetch_add(op.appends, Ordering::Relaxed);
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
    pub(super) fn rotate(&self, w: &mut WState, th: &mut (dyn AllocThread + '_)) -> Result<()> {
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
