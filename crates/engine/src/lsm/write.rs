//! The LSM write path: a record appended to the log and fenced (the commit
//! point of a put, delete or batch), the writer lock and its retry on a
//! full store ([`Lsm::write_with`]), large batches ingested as runs of
//! their own ([`Lsm::ingest`]), and the session that drives them.

use super::*;

impl Lsm {
    /// Appends `rec` (ops encoded by [`format::encode_ops`]) durably and
    /// applies `ops` to the memtable. Called with the writer lock held.
    /// [`append_record`](Self::append_record), one commit point of the
    /// persist trace once the record is durable (a memtable flush or merge
    /// it triggers is part of the same commit).
    fn append(
        &self,
        w: &mut Writer,
        at: &mut dyn AllocThread,
        rec: &mut [u8],
        ops: &[Op<'_>],
        d: Durability,
    ) -> Result<()> {
        let scope = ferrite_pmem::trace::commit_scope();
        let r = self.append_record(w, at, rec, ops, d);
        if r.is_ok() && d == Durability::Immediate {
            scope.mark();
        }
        r
    }

    /// Makes the records of relaxed commits durable: flushes their log
    /// bytes — on this thread, so that its fence covers them whichever
    /// thread stored them — and fences. With the writer lock held.
    pub(super) fn sync_unfenced(&self, w: &mut Writer) {
        if let Some((start, end)) = w.unfenced.take() {
            self.pool
                .flush((w.man.seg + start) as usize, (end - start) as usize);
            if self.fault != Some(Fault::SyncUnfenced) {
                self.pool.fence();
            }
        }
    }

    fn append_record(
        &self,
        w: &mut Writer,
        at: &mut dyn AllocThread,
        rec: &mut [u8],
        ops: &[Op<'_>],
        d: Durability,
    ) -> Result<()> {
        let len = round_line(rec.len() as u64);
        let over_threshold = w.pos > 0 && w.pos + len > self.opts.memtable_bytes;
        if over_threshold || w.pos + len > w.man.cap {
            let deletes_only = ops.iter().all(|o| matches!(o, Op::Delete { .. }));
            // Space is tight when a merge of everything could not get room
            // for its output any more: then writes that add data stop
            // (Full) and deletes flush with a full merge, which drops their
            // tombstones and what they shadow, and so frees space.
            let tight = !self.headroom_ok(w);
            let fits = w.pos + len <= w.man.cap;
            let r = if tight && !deletes_only {
                Err(EngineError::Full(
                    "no room left to merge the runs (deletes still go through)".into(),
                ))
            } else if fits && w.pos < w.retry_at {
                // A flush failed for want of space a moment ago: do not
                // rebuild the (maybe large) merge for every write.
                Err(EngineError::Full("no room for a run".into()))
            } else {
                let r = self.flush(w, at, len, tight);
                if let Err(EngineError::Full(_)) = r {
                    w.retry_at = w.pos + len + self.opts.log_slack / 8;
                }
                r
            };
            match r {
                Ok(()) => w.retry_at = 0,
                Err(EngineError::Full(m)) => {
                    // No run written: keep using the log's slack, half of
                    // it for writes that add data, all of it for deletes.
                    self.full_fallbacks.fetch_add(1, Ordering::Relaxed);
                    let limit = if deletes_only {
                        w.man.cap
                    } else {
                        w.man.cap.saturating_sub(self.opts.log_slack / 2)
                    };
                    if w.pos + len > limit {
                        return Err(EngineError::Full(m));
                    }
                }
                Err(e) => return Err(e),
            }
        }
        let cc = breakdown::phase(Phase::Cc);
        // Every earlier record durable now (none left by relaxed commits)?
        let pred_durable = w.man.marks && w.unfenced.is_none();
        format::seal_record(rec, self.nonce, w.next_seq, w.man.log_gen, pred_durable);
        let at_off = (w.man.seg + w.pos) as usize;
        match d {
            Durability::Eventual => {
                // Stored, not flushed (rule 8: no flush left in flight):
                // the next durable commit, sync or memtable flush flushes
                // and fences it. A crash may lose a suffix of such records,
                // never part of one (the record's checksum) and never one
                // without those after it (replay stops at the first
                // invalid record and scrubs the rest).
                self.pool.write(at_off, rec);
                let start = w.unfenced.map_or(w.pos, |(s, _)| s);
                w.unfenced = Some((start, w.pos + len));
            }
            Durability::Immediate => {
                // Stored and flushed (non-temporal stores for a large record).
                self.pool.write_nodrain(at_off, rec);
                if let Some((start, _)) = w.unfenced.take() {
                    // Earlier relaxed records, stored but not flushed,
                    // share this record's fence.
                    self.pool
                        .flush((w.man.seg + start) as usize, (w.pos - start) as usize);
                }
                if self.fault != Some(Fault::AppendUnfenced) {
                    self.pool.fence();
                }
            }
        }
        drop(cc);
        w.pos += len;
        w.next_seq += 1;
        self.log_bytes.fetch_add(len, Ordering::Relaxed);
        self.user_bytes
            .fetch_add((rec.len() - format::REC_HEADER) as u64, Ordering::Relaxed);
        let mut st = self.state.write();
        for op in ops {
            match op {
                Op::Put { key, value } => {
                    st.mem.insert(key.to_vec(), Some(value.to_vec()));
                }
                Op::Delete { key } => {
                    st.mem.insert(key.to_vec(), None);
                }
            }
        }
        drop(st);
        self.compact_inline(w, at);
        Ok(())
    }

    /// The writer lock, for a write. With a background compactor that
    /// has fallen behind (twice [`Options::max_runs`] runs), the write
    /// first waits for it (a bounded stall, counted in the stats): reads
    /// search every run, so their number must not grow without bound.
    fn lock_writer(&self) -> parking_lot::MutexGuard<'_, Writer> {
        if self.background.load(Ordering::Relaxed) {
            let limit = 2 * self.opts.max_runs;
            if self.state.read().version.runs.len() >= limit {
                let t = std::time::Instant::now();
                let mut f = self.bg.lock();
                while self.state.read().version.runs.len() >= limit
                    && (f.pending || f.busy)
                    && !f.stop
                {
                    self.bg_cv
                        .wait_for(&mut f, std::time::Duration::from_millis(50));
                }
                drop(f);
                self.stalls.fetch_add(1, Ordering::Relaxed);
                self.stall_nanos
                    .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
        }
        self.writer.lock()
    }

    /// Runs the write `f` under the writer lock. A write that finds no
    /// room ([`EngineError::Full`]) asks for a compaction of every run —
    /// the tombstones and what they and newer puts shadow may free room —
    /// and is tried once more after it; once per manifest generation, so
    /// that a store really full answers at once. `f` must have done
    /// nothing when it returns `Full`.
    fn write_with<T>(
        &self,
        at: &mut dyn AllocThread,
        mut f: impl FnMut(&mut Writer, &mut dyn AllocThread) -> Result<T>,
    ) -> Result<T> {
        let (mut retried, mut waited) = (false, false);
        loop {
            let mut w = self.lock_writer();
            let held = LockHeld::enter();
            let r = f(&mut w, at);
            if !matches!(r, Err(EngineError::Full(_))) {
                return r;
            }
            // A background compaction in flight holds the room of its
            // output until it installs and frees its inputs: a write that
            // finds the store full then waits for it (without the writer
            // lock, which the install takes) and tries again, rather than
            // failing on room about to come back.
            if !waited && self.compactor_active() {
                waited = true;
                drop(held);
                drop(w);
                // Its error, if any, is the compactor's to report
                // (`quiesce`, the stats); this write tries again.
                let _ = self.wait_compactor();
                continue;
            }
            if retried || w.man.gen_ == w.full_tried_gen || w.man.runs.is_empty() {
                return r;
            }
            w.full_tried_gen = w.man.gen_;
            retried = true;
            // On this writer, background thread or not (a compaction the
            // thread is running holds no lock this needs: its install
            // finds its inputs gone and drops its output).
            self.major_requested.store(true, Ordering::Relaxed);
            w.compact_due = true;
            self.compact_inline(&mut w, at);
            drop(held);
        }
    }

    /// Log bytes above which a batch is [ingested](Self::ingest).
    fn ingest_threshold(&self) -> u64 {
        self.opts.ingest_bytes.unwrap_or(self.opts.memtable_bytes)
    }

    /// Commits a large batch as a run of its own: sorted (the last op of a
    /// key wins, deletes kept as tombstones), written to a reserved block
    /// and fenced, then linked as the newest run by one publish
    /// ([`install`](Self::install)) — the commit point: a crash before it
    /// leaves nothing of the batch, after it all. The memtable is flushed
    /// first, since its entries are older than the batch's and a reader
    /// looks in the memtable before the runs. The batch never passes
    /// through the log or the memtable: no record of its size to replay at
    /// open, no memtable of its size to flush on the next write.
    fn ingest(&self, w: &mut Writer, at: &mut dyn AllocThread, ops: &[Op<'_>]) -> Result<()> {
        let t = std::time::Instant::now();
        if w.pos > 0 {
            if self.fault == Some(Fault::IngestOverMemtable) {
                let mut st = self.state.write();
                for op in ops {
                    st.mem.remove(op.key());
                }
            } else {
                self.flush(w, at, 0, false)?;
            }
        }
        let idx = crate::key_order(ops);
        let version = self.state.read().version.clone();
        // With no older data anywhere, tombstones shadow nothing.
        let oldest = version.runs.is_empty() && w.pos == 0;
        let mut b = RunBuilder::new(self.opts.block_bytes, std::mem::take(&mut w.buf));
        let mut user = 0u64;
        for (n, &i) in idx.iter().enumerate() {
            let op = &ops[i];
            user += 7 + op.key().len() as u64;
            if idx.get(n + 1).is_some_and(|&nx| ops[nx].key() == op.key()) {
                continue; // a later op of the batch on the same key wins
            }
            match op {
                Op::Put { key, value } => {
                    user += value.len() as u64;
                    b.push(self.nonce, key, Some(value));
                }
                Op::Delete { key } if !oldest => b.push(self.nonce, key, None),
                Op::Delete { .. } => {}
            }
        }
        self.user_bytes.fetch_add(user, Ordering::Relaxed);
        if b.is_empty() {
            w.buf = b.into_buffer();
            return Ok(());
        }
        let (img, meta) = b.finish(self.nonce, self.opts.bloom_bits_per_key);
        self.wait_graveyard_holding(Some(&version));
        let r = at.reserve(img.len()).map_err(EngineError::from);
        let r = r.and_then(|res| {
            let off = res.off().raw() as usize;
            if self.fault == Some(Fault::RunUnflushed) {
                self.pool.write(off, &img);
            } else {
                self.pool.write_nodrain(off, &img);
            }
            // In flight: the manifest's fence (this thread's) completes it.
            let len = img.len() as u64;
            self.install(w, at, &version, 0, 0, Some((res, len, meta)), true)?;
            self.run_bytes.fetch_add(len, Ordering::Relaxed);
            Ok(())
        });
        w.buf = self.keep_buffer(img);
        r?;
        self.ingests.fetch_add(1, Ordering::Relaxed);
        self.flush_nanos
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.after_new_run(w);
        self.compact_inline(w, at);
        Ok(())
    }
}

pub(super) struct LsmSession<'a> {
    pub(super) eng: &'a Lsm,
    pub(super) at: Box<dyn AllocThread + Send + 'a>,
    pub(super) rec: Vec<u8>,
    pub(super) blk: Vec<u8>,
    pub(super) scratch: Vec<u8>,
    pub(super) _ticket: Ticket<'a>,
}

impl Session for LsmSession<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        let _p = breakdown::phase(Phase::Scan);
        self.eng.get_into(key, out, &mut self.blk)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key)?;
        check_value(value)?;
        let ops = [Op::Put { key, value }];
        format::encode_ops(&mut self.rec, &ops);
        let (eng, rec) = (self.eng, &mut self.rec);
        eng.write_with(&mut *self.at, |w, at| {
            eng.append(w, at, rec, &ops, Durability::Immediate)
        })
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        check_key(key)?;
        let ops = [Op::Delete { key }];
        format::encode_ops(&mut self.rec, &ops);
        let (eng, rec, scratch, blk) = (self.eng, &mut self.rec, &mut self.scratch, &mut self.blk);
        eng.write_with(&mut *self.at, |w, at| {
            // Under the writer lock no other write can change the answer.
            let scan = breakdown::phase(Phase::Scan);
            if !eng.get_into(key, scratch, blk)? {
                return Ok(false);
            }
            drop(scan);
            eng.append(w, at, rec, &ops, Durability::Immediate)
                .map(|()| true)
        })
    }

    fn scan_with(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _p = breakdown::phase(Phase::Scan);
        self.eng.scan(from, limit, f)
    }

    fn scan_back_with(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _p = breakdown::phase(Phase::Scan);
        self.eng.scan_back(upto, limit, f)
    }

    fn batch(&mut self, ops: &[Op<'_>]) -> Result<()> {
        self.batch_with(ops, Durability::Immediate)
    }

    fn batch_with(&mut self, ops: &[Op<'_>], d: Durability) -> Result<()> {
        check_ops(ops)?;
        if ops.is_empty() {
            return Ok(());
        }
        // A batch's log record body: its op count and ops.
        let bytes: usize = ops
            .iter()
            .map(|o| {
                7 + o.key().len()
                    + if let Op::Put { value, .. } = o {
                        value.len()
                    } else {
                        0
                    }
            })
            .sum();
        let eng = self.eng;
        if (format::REC_HEADER + 4 + bytes) as u64 > eng.ingest_threshold() {
            return eng.write_with(&mut *self.at, |w, at| {
                let scope = ferrite_pmem::trace::commit_scope();
                let r = eng.ingest(w, at, ops);
                if r.is_ok() {
                    scope.mark();
                }
                r
            });
        }
        // Only with `ingest_bytes` set past 2 GiB: a log record's body
        // length has 31 bits.
        if bytes + 4 > format::MAX_REC_BODY {
            return Err(EngineError::BatchTooLarge {
                ops: ops.len(),
                max: format::MAX_REC_BODY / (7 + crate::MAX_KEY + crate::MAX_VALUE),
            });
        }
        format::encode_ops(&mut self.rec, ops);
        let rec = &mut self.rec;
        eng.write_with(&mut *self.at, |w, at| eng.append(w, at, rec, ops, d))
    }
}
