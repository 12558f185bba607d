//! Memtable flushes: the room checks that decide when one is due, the
//! memtable merged with the newest runs into a run image
//! ([`Lsm::build_run`]), written with a new manifest and published as one
//! switch ([`Lsm::switch`]); run image buffers, and the graveyard of runs
//! readers may still hold ([`Lsm::wait_graveyard`]).

use super::*;

impl Lsm {
    /// A run image buffer, kept for the next run unless it is far larger
    /// than a memtable's run (one huge ingest or merge should not hold its
    /// memory for the store's life).
    pub(super) fn keep_buffer(&self, mut buf: Vec<u8>) -> Vec<u8> {
        if buf.capacity() as u64 > 4 * self.opts.memtable_bytes.max(1 << 20) {
            buf = Vec::new();
        }
        buf.clear();
        buf
    }

    /// Waits until no reader holds a run freed by an earlier switch, so
    /// that its block may be reused. Every path that reserves blocks calls
    /// it first.
    fn wait_graveyard(&self) {
        self.wait_graveyard_holding(None);
    }

    /// [`wait_graveyard`](Self::wait_graveyard) for a caller that holds
    /// `mine` itself: its own references are not waited for (a compaction
    /// reading runs that a major flush then merged away would otherwise
    /// wait for itself). Blocks the caller reads need not outlive its own
    /// reservation: it is done reading them by then.
    ///
    /// The graveyard's lock is held only to look and to clear, never while
    /// waiting: the compactor waits here holding its version, and a writer
    /// that spun holding the lock (for the compactor's references to go)
    /// while the compactor blocked on that lock (to see that only its own
    /// references remain) waited forever.
    pub(super) fn wait_graveyard_holding(&self, mine: Option<&Version>) {
        let held = |r: &Arc<Run>| {
            1 + mine.map_or(0, |v| v.runs.iter().filter(|m| Arc::ptr_eq(m, r)).count())
        };
        let mut round = 0;
        loop {
            {
                let mut g = self.graveyard.lock();
                if !g.iter().any(|r| Arc::strong_count(r) > held(r)) {
                    g.clear();
                    return;
                }
            }
            self.pool.medium().wait_hint(round);
            round += 1;
        }
    }

    /// True while the allocator has room for a flush and then a merge of
    /// every run: free bytes at least the runs' bytes plus twice the
    /// memtable's log bytes (size-tiered merging needs up to 2× the data).
    pub(super) fn headroom_ok(&self, w: &Writer) -> bool {
        let runs: u64 = self.state.read().version.runs.iter().map(|r| r.len).sum();
        let need = runs + 2 * w.pos + 2 * format::LINE * 64;
        let st = self.alloc.stats();
        st.free + st.grow_room >= need
    }

    /// True when the room left (free and still to grow) is under twice
    /// what a merge of everything needs: a store near its size cap, where
    /// flushes merge on the writer as they did before compaction moved to
    /// the background. A store far from its cap never is.
    fn near_cap(&self, w: &Writer) -> bool {
        let runs: u64 = self.state.read().version.runs.iter().map(|r| r.len).sum();
        let need = runs + 2 * w.pos + 2 * format::LINE * 64;
        let st = self.alloc.stats();
        st.free.saturating_add(st.grow_room) < 2 * need
    }

    /// Flushes the memtable into a run (merging newer runs per the policy,
    /// or all of them when `major`), making room for a record of `need` bytes.
    pub(super) fn flush(
        &self,
        w: &mut Writer,
        at: &mut dyn AllocThread,
        need: u64,
        major: bool,
    ) -> Result<()> {
        let t = std::time::Instant::now();
        let r = self.flush_inner(w, at, need, major);
        self.flush_nanos
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        r
    }

    fn flush_inner(
        &self,
        w: &mut Writer,
        at: &mut dyn AllocThread,
        need: u64,
        major: bool,
    ) -> Result<()> {
        self.wait_graveyard();
        let version = self.state.read().version.clone();
        let runs = &version.runs;
        // A flush writes the memtable as the newest run, merging nothing:
        // merging is the compaction's (off the writer's path). Only a
        // major flush — deletes in a store too full to compact — merges
        // every run at once, dropping tombstones and what they shadow.
        // Ops of the publish besides the merged runs' frees: run, manifest,
        // segment allocs and frees, the link, with room for split words.
        let max_merge = at.max_publish_ops().saturating_sub(10);
        let j = if major {
            runs.len().min(max_merge)
        } else if self.near_cap(w) {
            // Near the store's size cap: merge as the flush goes (the
            // memtable with the newest runs, by the compaction's size
            // rule), so that its data is not first written as a run of its
            // own, which a compaction would then need room to rewrite (and
            // whose hole, freed, fragments what is left).
            let mut j = 0;
            let mut acc = w.pos.max(1);
            while j < runs.len()
                && j < max_merge
                && (runs[j].meta.data_bytes <= self.opts.merge_ratio.saturating_mul(acc)
                    || runs.len() - j + 1 > self.opts.max_runs)
            {
                acc += runs[j].meta.data_bytes;
                j += 1;
            }
            j
        } else {
            0
        };
        match self.flush_with(w, at, runs, j, need) {
            Err(EngineError::Full(_)) if j > 0 => self.flush_with(w, at, runs, 0, need),
            r => r,
        }?;
        self.after_new_run(w);
        Ok(())
    }

    /// After a flush or an ingest added a run: the background thread is
    /// told, or (no background thread) the compaction is due at the end
    /// of this write or the next ([`compact_inline`](Self::compact_inline)).
    pub(super) fn after_new_run(&self, w: &mut Writer) {
        // A store short of room compacts on the writer, at once: a
        // background compactor that cannot get room for its output would
        // leave the runs to pile up while flushes add more.
        if self.background.load(Ordering::Relaxed) && self.headroom_ok(w) {
            self.bg.lock().pending = true;
            self.bg_cv.notify_all();
        } else {
            w.compact_due = true;
        }
    }

    /// Merges the memtable with `runs[..j]` into a run image built in
    /// `buf`; tombstones are dropped when the output is the oldest run.
    /// Returns the buffer (the image when there is a run) and the run's
    /// metadata (`None`: nothing left, no run).
    fn build_run(
        &self,
        runs: &[Arc<Run>],
        j: usize,
        buf: Vec<u8>,
    ) -> Result<(Vec<u8>, Option<RunMeta>)> {
        let nonce = self.nonce;
        let last = j == runs.len();
        let mut b = RunBuilder::new(self.opts.block_bytes, buf);
        // Only this writer changes the memtable, and it holds the writer
        // lock: the read lock just keeps the borrow honest (no medium
        // event happens under it).
        let st = self.state.read();
        let mut m = Merge::new(&self.pool, mem_iter(st.mem.iter()), &runs[..j], &[])?;
        while let Some((k, v)) = m.next()? {
            if last && v.is_none() {
                continue;
            }
            b.push(nonce, k, v);
        }
        drop(m);
        drop(st);
        Ok(if b.is_empty() {
            (b.into_buffer(), None)
        } else {
            let (img, meta) = b.finish(nonce, self.opts.bloom_bits_per_key);
            (img, Some(meta))
        })
    }

    fn flush_with(
        &self,
        w: &mut Writer,
        at: &mut dyn AllocThread,
        runs: &[Arc<Run>],
        j: usize,
        need: u64,
    ) -> Result<()> {
        let (buf, meta) = self.build_run(runs, j, std::mem::take(&mut w.buf))?;
        let image = meta.is_some().then_some(&buf[..]);
        let r = self.switch(w, at, runs, j, need, image, meta);
        w.buf = self.keep_buffer(buf);
        r
    }

    /// Writes the run image and a new manifest and publishes the switch;
    /// then installs the new version and empties the memtable.
    #[allow(clippy::too_many_arguments)]
    fn switch(
        &self,
        w: &mut Writer,
        at: &mut dyn AllocThread,
        runs: &[Arc<Run>],
        j: usize,
        need: u64,
        image: Option<&[u8]>,
        meta: Option<RunMeta>,
    ) -> Result<()> {
        let nonce = self.nonce;
        let want_cap = default_cap(&self.opts).max(round_line(need));
        let new_seg = want_cap != w.man.cap;
        let run_count = usize::from(image.is_some()) + runs.len() - j;
        if run_count > format::MAX_MANIFEST_RUNS {
            return Err(EngineError::Full(format!(
                "{run_count} runs: more than a manifest lists"
            )));
        }
        let man_len = format::MANIFEST_HEADER + 16 * run_count;
        let mut sizes = Vec::new();
        if let Some(img) = &image {
            sizes.push(img.len());
        }
        if new_seg {
            sizes.push(want_cap as usize);
        }
        sizes.push(man_len);
        let rs = reserve_all(at, &sizes)?;
        let mut it = rs.iter();
        let run_at = image.as_ref().map(|_| it.next().expect("run").off().raw());
        let seg = if new_seg {
            it.next().expect("segment").off().raw()
        } else {
            w.man.seg
        };
        let man_off = it.next().expect("manifest").off().raw();
        let mut list = Vec::with_capacity(run_count);
        if let (Some(o), Some(img)) = (run_at, &image) {
            list.push((o, img.len() as u64));
        }
        list.extend(runs[j..].iter().map(|r| (r.off, r.len)));
        let man = Manifest {
            gen_: w.man.gen_ + 1,
            seg,
            cap: want_cap,
            log_gen: w.man.gen_ + 1,
            first_seq: w.next_seq,
            runs: list,
            marks: true,
        };
        if let (Some(o), Some(img)) = (run_at, &image) {
            if self.fault == Some(Fault::RunUnflushed) {
                self.pool.write(o as usize, img);
            } else {
                // Large and sequential: non-temporal stores (no flushes).
                self.pool.write_nodrain(o as usize, img);
            }
        }
        let mb = man.encode(nonce);
        self.pool.write(man_off as usize, &mb);
        self.pool.flush(man_off as usize, mb.len());
        if self.fault == Some(Fault::TruncateBeforeSwitch) && w.pos > 0 {
            self.pool.fill(w.man.seg as usize, w.pos as usize, 0);
            self.pool.flush(w.man.seg as usize, w.pos as usize);
        }
        // Run and manifest durable before the record that links them.
        self.pool.fence();
        let mut frees: Vec<POff<u8>> = runs[..j].iter().map(|r| POff::new(r.off)).collect();
        frees.push(POff::new(w.man_off));
        if new_seg {
            frees.push(POff::new(w.man.seg));
        }
        let links = [Link {
            at: POff::new(self.area_off),
            value: man_off,
        }];
        if let Err(e) = at.publish(&Publish {
            allocs: &rs,
            frees: &frees,
            links: &links,
        }) {
            cancel_all(at, rs);
            return Err(e.into());
        }
        // Durable: switch the volatile state.
        let mut new_runs = Vec::with_capacity(run_count);
        if let (Some(o), Some(img), Some(meta)) = (run_at, &image, meta) {
            new_runs.push(Arc::new(Run::new(o, img.len() as u64, meta)));
        }
        new_runs.extend(runs[j..].iter().cloned());
        w.man = man;
        w.man_off = man_off;
        w.pos = 0;
        // The records of relaxed commits are in the run now, durable.
        w.unfenced = None;
        {
            let mut st = self.state.write();
            st.version = Arc::new(Version { runs: new_runs });
            st.mem.clear();
        }
        self.graveyard.lock().extend(runs[..j].iter().cloned());
        self.flushes.fetch_add(1, Ordering::Relaxed);
        self.merged_runs.fetch_add(j as u64, Ordering::Relaxed);
        self.run_bytes.fetch_add(
            image.as_ref().map_or(0, |i| i.len() as u64),
            Ordering::Relaxed,
        );
        Ok(())
    }
}
