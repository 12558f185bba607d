//! Heap recovery at open: lane records validated and replayed, then one
//! walk of the descriptors that rebuilds the volatile state (see the
//! module documentation of [`super`], "Recovery").

use super::*;

impl Heap {
    // ---- recovery --------------------------------------------------------------------

    /// Checks that a logged operation targets a word a publish can change.
    pub(super) fn validate_op(&self, op: &MetaOp) -> Result<()> {
        let a = op.off as usize;
        let bad = |why: &str| {
            Err(AllocError::Corrupt(format!(
                "lane record operation {op:?} {why}"
            )))
        };
        if a < HEADER_SIZE || a + 8 > self.pool.len() {
            return bad("is outside the pool's data area");
        }
        let base = self.region.base();
        let spot = if a < base || a - base >= self.region.len() {
            Spot::Beyond
        } else {
            self.geo.classify(a - base)
        };
        match (spot, op.kind) {
            (Spot::Beyond | Spot::Data { .. }, OpKind::Set) => Ok(()),
            (Spot::Beyond | Spot::Data { .. }, _) => bad("changes bits outside the heap's bitmaps"),
            (Spot::Meta, OpKind::Set) if a - base == ROOT_OFF => Ok(()),
            (Spot::Meta, _) => bad("targets heap metadata that is never logged"),
            (Spot::Desc { page, .. }, _) if u64::from(page) >= self.pages_now() => {
                bad("targets a page past the heap's page count")
            }
            (Spot::Desc { page, at: 0 }, OpKind::Set) => {
                match PageHdr::decode(op.val, page, self.nonce)? {
                    PageHdr::Run { .. } => bad("creates a run (runs are never logged)"),
                    _ => Ok(()),
                }
            }
            (Spot::Desc { at, .. }, OpKind::Or | OpKind::AndNot)
                if (SHARE_OFF..SHARE_OFF + 8 * SHARE_WORDS).contains(&at) =>
            {
                Ok(())
            }
            _ => bad("does not fit the descriptor word it targets"),
        }
    }

    /// Finishes every committed publish and marks every lane's newest record.
    pub(super) fn replay_lanes(&mut self, report: &mut RecoveryReport) -> Result<()> {
        let mut records = Vec::new();
        {
            let mut c = self.central.lock();
            for i in 0..self.geo.lanes as usize {
                let lane = self.lane(i);
                let (latest, cur) = lane.scan(&self.region, self.nonce)?;
                if let Latest::Record { pos, len, seq, ops } = latest {
                    for op in &ops {
                        self.validate_op(op)?;
                    }
                    records.push((lane, pos, len, seq, ops));
                }
                c.cursors[i] = Some(cur);
            }
        }
        // Judge every record on the image as the crash left it, before
        // replaying any: replaying one lane's free can make another lane's
        // completed (but unmarked) allocation of the same block look
        // unapplied, and replaying that would resurrect the block. By
        // invariant 5 a record whose marker is not durable still shows all
        // its effects unless its publish was in flight, so the unapplied
        // records were all between their two fences at once: none depends
        // on another, and their order does not matter.
        let unapplied: Vec<bool> = records
            .iter()
            .map(|(_, _, _, _, ops)| !ops.iter().all(|o| o.is_applied(&self.pool)))
            .collect();
        let replaying = self.fault != Fault::NoReplay && unapplied.contains(&true);
        // Invariant 5 holds for recovery too: the complete records are
        // marked durably before a replay changes their words, or a crash of
        // recovery would leave them unmarked and seemingly unapplied.
        let mut marks_unfenced = false;
        for ((lane, pos, len, seq, _), &todo) in records.iter().zip(&unapplied) {
            if !(todo && replaying) {
                lane.mark_recovered(&self.region, self.nonce, *pos, *len, *seq);
                report.marked += 1;
                marks_unfenced = true;
            }
        }
        if replaying {
            if marks_unfenced {
                self.region.fence();
            }
            let mut lines = Vec::new();
            for ((_, _, _, _, ops), &todo) in records.iter().zip(&unapplied) {
                if todo {
                    for op in ops {
                        op.apply(&self.pool);
                    }
                    flush_words(&self.pool, ops, &mut lines);
                    report.replayed += 1;
                }
            }
            // The replayed words must be durable before any marker says so.
            self.region.fence();
            for ((lane, pos, len, seq, _), &todo) in records.iter().zip(&unapplied) {
                if todo {
                    lane.mark_recovered(&self.region, self.nonce, *pos, *len, *seq);
                    report.marked += 1;
                }
            }
            marks_unfenced = true;
        }
        if marks_unfenced {
            self.region.fence();
        }
        Ok(())
    }

    /// Walks the descriptors, validating them, and builds the volatile state.
    pub(super) fn walk(&mut self, report: &mut RecoveryReport) -> Result<()> {
        let pages = self.pages_now() as u32;
        let geo = self.geo;
        // Pages from `p` to the end of its zone.
        let zone_left = |p: u32| {
            let (first, size) = geo.zone_of(p);
            u64::from(first) + u64::from(size) - u64::from(p)
        };
        let mut c = self.central.lock();
        let mut line = [0u8; DESC];
        let word = |line: &[u8; DESC], i: usize| {
            u64::from_le_bytes(line[8 * i..8 * i + 8].try_into().expect("8 bytes"))
        };
        let mut in_use: i64 = 0;
        let mut blocks: i64 = 0;
        let mut claimed = 0u64;
        let mut free_start: Option<u32> = None;
        let mut p = 0u32;
        while p < pages {
            self.region.read(self.geo.desc(p), &mut line);
            let hdr = PageHdr::decode(word(&line, 0), p, self.nonce)?;
            if hdr != PageHdr::Free
                && let Some(s) = free_start.take()
            {
                give_range(&mut c, &geo, s, p - s);
            }
            match hdr {
                PageHdr::Free => {
                    if line.iter().any(|&b| b != 0) {
                        return Err(AllocError::Corrupt(format!(
                            "free page {p} has allocation bits set"
                        )));
                    }
                    free_start.get_or_insert(p);
                    p += 1;
                }
                PageHdr::Run { class } => {
                    let class = class as usize;
                    let info = CLASSES[class];
                    if p as u64 + info.pages as u64 > pages as u64
                        || u64::from(info.pages) > zone_left(p)
                    {
                        return Err(AllocError::Corrupt(format!(
                            "run at page {p} runs past the end of the heap or its zone"
                        )));
                    }
                    let mut set = 0u32;
                    for s in 0..info.pages {
                        let q = p + s;
                        if s > 0 {
                            self.region.read(self.geo.desc(q), &mut line);
                            if word(&line, 0) != 0 {
                                return Err(AllocError::Corrupt(format!(
                                    "page {q} has a header inside the run at page {p}"
                                )));
                            }
                        }
                        if line[SHARE_OFF + 8 * SHARE_WORDS..].iter().any(|&b| b != 0) {
                            return Err(AllocError::Corrupt(format!(
                                "page {q} has reserved descriptor bytes set"
                            )));
                        }
                        let pv = &self.page(q);
                        pv.word.store(v_run(class, p), Ordering::Relaxed);
                        for w in 0..SHARE_WORDS {
                            let bits = word(&line, 1 + w);
                            for half in 0..2 {
                                let wi = 2 * w + half;
                                let b = (bits >> (32 * half)) as u32;
                                let st = spread(b);
                                if st & !valid_pairs(info.blocks, info.pages, s, wi) != 0 {
                                    return Err(AllocError::Corrupt(format!(
                                        "page {q} has bits set past the last block of its run"
                                    )));
                                }
                                pv.st[wi].store(st << 1, Ordering::Relaxed);
                                set += b.count_ones();
                            }
                        }
                    }
                    let free = info.blocks - set;
                    let head = &self.page(p);
                    if free > 0 {
                        head.aux.store(u64::from(free) | LISTED, Ordering::Relaxed);
                        c.lists[class].push(p);
                    }
                    in_use += i64::from(set) * i64::from(info.size);
                    blocks += i64::from(set);
                    claimed += u64::from(info.pages);
                    report.runs += 1;
                    p += info.pages;
                }
                PageHdr::Extent { pages: n } => {
                    if p as u64 + n as u64 > pages as u64
                        || n > MAX_EXTENT_PAGES
                        || u64::from(n) > zone_left(p)
                    {
                        return Err(AllocError::Corrupt(format!(
                            "extent at page {p} runs past the end of the heap or its zone"
                        )));
                    }
                    if line[8..].iter().any(|&b| b != 0) {
                        return Err(AllocError::Corrupt(format!(
                            "extent page {p} has allocation bits set"
                        )));
                    }
                    for q in p + 1..p + n {
                        self.region.read(self.geo.desc(q), &mut line);
                        if line.iter().any(|&b| b != 0) {
                            return Err(AllocError::Corrupt(format!(
                                "page {q} inside the extent at page {p} has a non-zero descriptor"
                            )));
                        }
                    }
                    self.page(p).word.store(v_ext(V_EXT, n), Ordering::Relaxed);
                    in_use += i64::from(n) * PAGE as i64;
                    blocks += 1;
                    claimed += u64::from(n);
                    report.extents += 1;
                    p += n;
                }
            }
        }
        if let Some(s) = free_start {
            give_range(&mut c, &geo, s, pages - s);
        }
        drop(c);
        let central = &self.stats[self.geo.lanes as usize];
        central.in_use.store(in_use, Ordering::Relaxed);
        central.blocks.store(blocks, Ordering::Relaxed);
        self.claimed_pages.store(claimed, Ordering::Relaxed);
        report.blocks = blocks as u64;
        Ok(())
    }
}
