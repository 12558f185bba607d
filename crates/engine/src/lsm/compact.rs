//! Compaction of runs (size-tiered): the background compactor's loop, or
//! the same steps inline on the writer without one; a step chooses its
//! runs ([`Lsm::compaction_window`]), merges and writes them with no
//! writer lock ([`Lsm::compact_prepare`]) and links the output by one
//! publish ([`Lsm::compact_install`], [`Lsm::install`], which ingests use
//! too).

use super::*;

impl Lsm {
    /// The background compactor's loop: waits for work, compacts until
    /// nothing is left to merge, and tells waiters after each step. Its
    /// allocator handle is taken on its first work (one of the store's
    /// spare lanes).
    pub(super) fn compactor(&self) {
        let mut at: Option<Box<dyn AllocThread + Send + '_>> = None;
        loop {
            {
                let mut f = self.bg.lock();
                while !f.pending && !f.stop {
                    self.bg_cv.wait(&mut f);
                }
                if f.stop {
                    return;
                }
                f.pending = false;
                f.busy = true;
            }
            let r = self.compact_all(&mut at);
            let mut f = self.bg.lock();
            f.busy = false;
            match r {
                Ok(()) => f.error = None,
                // Out of room: the runs stay; the next flush tries again.
                Err(EngineError::Full(_)) => {}
                Err(e) => f.error = Some(e.to_string()),
            }
            drop(f);
            self.bg_cv.notify_all();
        }
    }

    /// Compaction steps until nothing is left to merge (or the engine closes).
    fn compact_all<'a>(&'a self, at: &mut Option<Box<dyn AllocThread + Send + 'a>>) -> Result<()> {
        let at = match at {
            Some(a) => a,
            None => at.insert(self.alloc.thread()?),
        };
        while let Some(p) = self.compact_prepare(&mut **at, Some(&self.bg))? {
            let mut w = self.writer.lock();
            let _held = LockHeld::enter();
            self.compact_install(&mut w, &mut **at, p)?;
            drop(w);
            self.bg_cv.notify_all();
            if self.bg.lock().stop {
                break;
            }
        }
        Ok(())
    }

    /// True while the background compactor has work pending or running.
    pub(super) fn compactor_active(&self) -> bool {
        if !self.background.load(Ordering::Relaxed) {
            return false;
        }
        let f = self.bg.lock();
        (f.pending || f.busy) && !f.stop
    }

    /// Waits until the background compactor has nothing left to do; its
    /// last error, if any.
    pub(super) fn wait_compactor(&self) -> Result<()> {
        if !self.background.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut f = self.bg.lock();
        while (f.pending || f.busy) && !f.stop {
            self.bg_cv.wait(&mut f);
        }
        match &f.error {
            Some(e) => Err(corrupt(format!("background compaction: {e}"))),
            None => Ok(()),
        }
    }

    /// Without a background thread: the compaction steps due, by the
    /// writer, after its own commit. Their failure is not the write's
    /// (which is durable): out of room, the runs stay as they are (reads
    /// search one more); another error is kept for
    /// [`quiesce`](Engine::quiesce) and the stats, as the thread's is.
    pub(super) fn compact_inline(&self, w: &mut Writer, at: &mut dyn AllocThread) {
        if !std::mem::take(&mut w.compact_due) {
            return;
        }
        let r = loop {
            match self.compact_prepare(at, None) {
                Ok(Some(p)) => {
                    if let Err(e) = self.compact_install(w, at, p) {
                        break Err(e);
                    }
                }
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        let mut f = self.bg.lock();
        match r {
            Ok(()) => f.error = None,
            Err(EngineError::Full(_)) => {}
            Err(e) => f.error = Some(e.to_string()),
        }
    }

    /// The runs a compaction of `runs` merges: the newest `j` (0 or 1:
    /// nothing to do). Size-tiered, a binary counter: the next run joins
    /// while its data is at most [`Options::merge_ratio`] times what is
    /// merged so far, or while more than [`Options::max_runs`] would
    /// remain; so each byte is rewritten `O(log(data / memtable))` times.
    fn compaction_window(&self, runs: &[Arc<Run>], max_publish_ops: usize) -> usize {
        let max_merge = max_publish_ops.saturating_sub(10);
        let Some(first) = runs.first() else { return 0 };
        let mut acc = first.meta.data_bytes.max(1);
        let mut j = 1;
        while j < runs.len()
            && j < max_merge
            && (runs[j].meta.data_bytes <= self.opts.merge_ratio.saturating_mul(acc)
                || runs.len() - j + 1 > self.opts.max_runs)
        {
            acc += runs[j].meta.data_bytes;
            j += 1;
        }
        j
    }

    /// A compaction's first half, with no writer lock: chooses the runs to
    /// merge from the current version, merges them into one run image
    /// (tombstones dropped when the output becomes the oldest run), and
    /// writes it to a reserved block and fences. `None`: nothing to merge
    /// (or `stop` was raised meanwhile). Holds the compaction lock only
    /// while it runs; [`compact_install`](Self::compact_install) links the
    /// output if its inputs are still current.
    fn compact_prepare(
        &self,
        at: &mut dyn AllocThread,
        stop: Option<&Mutex<BgFlags>>,
    ) -> Result<Option<Prepared>> {
        let t = std::time::Instant::now();
        let mut buf = self.compaction.lock();
        let version = self.state.read().version.clone();
        let runs = &version.runs;
        // Asked by a write that found no room: every run, so that the
        // tombstones and what they shadow go (one run alone too: its
        // tombstones go).
        let major = self.major_requested.swap(false, Ordering::Relaxed);
        let j = if major {
            runs.len().min(at.max_publish_ops().saturating_sub(10))
        } else {
            self.compaction_window(runs, at.max_publish_ops())
        };
        if j < 2 && !(major && j == 1) {
            return Ok(None);
        }
        let last = j == runs.len();
        let mut b = RunBuilder::new(self.opts.block_bytes, std::mem::take(&mut *buf));
        let mut m = Merge::new(&self.pool, entries_iter(&[]), &runs[..j], &[])?;
        let mut n = 0u64;
        while let Some((k, v)) = m.next()? {
            if last && v.is_none() {
                continue;
            }
            b.push(self.nonce, k, v);
            n += 1;
            if n.is_multiple_of(4096) && stop.is_some_and(|f| f.lock().stop) {
                *buf = b.into_buffer();
                return Ok(None);
            }
        }
        drop(m);
        let out = if b.is_empty() {
            *buf = b.into_buffer();
            None
        } else {
            let (img, meta) = b.finish(self.nonce, self.opts.bloom_bits_per_key);
            self.wait_graveyard_holding(Some(&version));
            let res = match at.reserve(img.len()) {
                Ok(r) => r,
                Err(e) => {
                    *buf = img;
                    return Err(e.into());
                }
            };
            let off = res.off().raw() as usize;
            if self.fault == Some(Fault::RunUnflushed) {
                self.pool.write(off, &img);
            } else {
                self.pool.write_nodrain(off, &img);
            }
            // Left in flight: the install's manifest fence, on this same
            // thread, makes the run durable before the record linking it.
            let len = img.len() as u64;
            *buf = self.keep_buffer(img);
            Some((res, len, meta))
        };
        self.compact_nanos
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(Some(Prepared {
            inputs: runs[..j].iter().map(|r| r.id).collect(),
            out,
        }))
    }

    /// A compaction's second half, under the writer lock: replaces its
    /// inputs by its output in a new manifest and publishes the switch.
    /// The log is untouched (same segment, generation and first sequence
    /// number), so the memtable's records stay valid. If a major flush
    /// merged the inputs away meanwhile, the output is dropped.
    fn compact_install(&self, w: &mut Writer, at: &mut dyn AllocThread, p: Prepared) -> Result<()> {
        let cur = self.state.read().version.clone();
        let j = p.inputs.len();
        let at_pos = (0..=cur.runs.len().saturating_sub(j)).find(|&i| {
            cur.runs.len() >= i + j
                && cur.runs[i..i + j]
                    .iter()
                    .zip(&p.inputs)
                    .all(|(a, &b)| a.id == b)
        });
        let Some(i) = at_pos else {
            // No flush left in flight (the output's lines).
            self.pool.fence();
            if let Some((res, _, _)) = p.out {
                let _ = at.cancel(res);
            }
            return Ok(());
        };
        let len = p.out.as_ref().map_or(0, |o| o.1);
        self.install(w, at, &cur, i, j, p.out, false)?;
        self.compactions.fetch_add(1, Ordering::Relaxed);
        self.merged_runs.fetch_add(j as u64, Ordering::Relaxed);
        self.compact_bytes.fetch_add(len, Ordering::Relaxed);
        self.run_bytes.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    /// Links a run written and fenced outside the log (a compaction's or
    /// an ingest's): a new manifest lists `cur.runs` with `cur.runs[i..i +
    /// j]` replaced by `out`, keeping the log as it is (`ingest` marks an
    /// ingest, for its planted fault). One publish: the run's and
    /// manifest's allocations, the frees of the replaced runs and of the
    /// old manifest, the fixed-area link. Then the new version is
    /// installed.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn install(
        &self,
        w: &mut Writer,
        at: &mut dyn AllocThread,
        cur: &Version,
        i: usize,
        j: usize,
        out: Option<(Reservation, u64, RunMeta)>,
        ingest: bool,
    ) -> Result<()> {
        let mut list: Vec<(u64, u64)> = cur.runs[..i].iter().map(|r| (r.off, r.len)).collect();
        if let Some((res, len, _)) = &out {
            list.push((res.off().raw(), *len));
        }
        list.extend(cur.runs[i + j..].iter().map(|r| (r.off, r.len)));
        let cancel = |at: &mut dyn AllocThread, out: Option<(Reservation, u64, RunMeta)>| {
            if let Some((res, _, _)) = out {
                let _ = at.cancel(res);
            }
        };
        if list.len() > format::MAX_MANIFEST_RUNS {
            cancel(at, out);
            return Err(EngineError::Full(format!(
                "{} runs: more than a manifest lists",
                list.len()
            )));
        }
        let log_gen = if self.fault == Some(Fault::CompactionNewLogGen) && !ingest {
            w.man.gen_ + 1
        } else {
            w.man.log_gen
        };
        let man = Manifest {
            gen_: w.man.gen_ + 1,
            seg: w.man.seg,
            cap: w.man.cap,
            log_gen,
            first_seq: w.man.first_seq,
            runs: list,
            marks: true,
        };
        let man_res = match at.reserve(man.len()) {
            Ok(r) => r,
            Err(e) => {
                cancel(at, out);
                return Err(e.into());
            }
        };
        let man_off = man_res.off().raw();
        let mb = man.encode(self.nonce);
        self.pool.write(man_off as usize, &mb);
        self.pool.flush(man_off as usize, mb.len());
        self.pool.fence();
        let mut allocs = Vec::with_capacity(2);
        let mut new_run = None;
        if let Some((res, len, meta)) = out {
            new_run = Some(Arc::new(Run::new(res.off().raw(), len, meta)));
            allocs.push(res);
        }
        allocs.push(man_res);
        let mut frees: Vec<POff<u8>> = cur.runs[i..i + j]
            .iter()
            .map(|r| POff::new(r.off))
            .collect();
        frees.push(POff::new(w.man_off));
        let links = [Link {
            at: POff::new(self.area_off),
            value: man_off,
        }];
        if let Err(e) = at.publish(&Publish {
            allocs: &allocs,
            frees: &frees,
            links: &links,
        }) {
            cancel_all(at, allocs);
            return Err(e.into());
        }
        let mut runs = Vec::with_capacity(cur.runs.len() + 1 - j);
        runs.extend(cur.runs[..i].iter().cloned());
        runs.extend(new_run);
        runs.extend(cur.runs[i + j..].iter().cloned());
        w.man = man;
        w.man_off = man_off;
        self.state.write().version = Arc::new(Version { runs });
        self.graveyard
            .lock()
            .extend(cur.runs[i..i + j].iter().cloned());
        Ok(())
    }
}
