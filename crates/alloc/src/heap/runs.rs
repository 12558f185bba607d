//! Pages, runs and extents under the central mutex: taking and growing
//! pages, acquiring and releasing runs, taking blocks from a run, and
//! reserving and releasing extents.

use super::*;

impl Heap {
    // ---- pages, runs and extents (under the central mutex) ------------------------------

    /// Takes `n` contiguous free pages (best fit), retiring empty runs if
    /// nothing fits.
    pub(super) fn take_pages(&self, c: &mut Central, n: u32) -> Option<u32> {
        if let Some(s) = take_range(c, n) {
            return Some(s);
        }
        if self.retire_empty_runs(c)
            && let Some(s) = take_range(c, n)
        {
            return Some(s);
        }
        // Each growth adds pages until the maximum, so this ends.
        while self.grow(c, n) {
            if let Some(s) = take_range(c, n) {
                return Some(s);
            }
        }
        None
    }

    /// Grows a growable heap by at least `n` pages (by half its size, at
    /// least 64 KiB and at most 1 GiB of pages, when there is room), under
    /// the central mutex. Returns false when it cannot: a fixed heap, the
    /// maximum reached, or the medium refusing (out of space).
    ///
    /// Crash safety: the medium grows first (a file's new length is
    /// durable before it returns); the new pages' descriptors are zero
    /// (a new file block reads zero; a region reused from an old heap is
    /// zeroed and fenced here); then the page count is stored and
    /// persisted in one 8-byte word. Only then are the new pages handed
    /// out. A crash before that store leaves the old count, and unused
    /// zero bytes past it; after it, free pages.
    pub(super) fn grow(&self, c: &mut Central, n: u32) -> bool {
        let medium = self.region.medium();
        let now = self.pages_now();
        if !medium.map().growable()
            || now >= self.geo.pages
            || u64::from(n) > self.geo.largest_zone()
        {
            return false;
        }
        let _held = ferrite_pmem::LockHeld::enter();
        let step = (now / 2).clamp(16, 1 << 18).max(u64::from(n));
        let mut target = (now + step).min(self.geo.pages);
        let end = |t: u64| self.region.base() + self.geo.page_off(t as u32 - 1) + PAGE;
        if medium.grow_to(end(target)).is_err() {
            // Less, if only the big step did not fit.
            target = (now + u64::from(n)).min(self.geo.pages);
            if medium.grow_to(end(target)).is_err() {
                return false;
            }
        }
        let st = &self.stats[self.geo.lanes as usize];
        if zero_descriptors(&self.region, &self.geo, now as u32, target as u32, true) {
            self.region.fence();
            st.fences.fetch_add(1, Ordering::Relaxed);
        }
        self.region.store_u64(PAGES_NOW_OFF, target);
        if self.fault != Fault::UnpersistedGrowth {
            self.region.persist(PAGES_NOW_OFF, 8);
        }
        st.fences.fetch_add(1, Ordering::Relaxed);
        st.meta_lines.fetch_add(1, Ordering::Relaxed);
        self.pages.cover(target);
        self.pages_now.store(target, Ordering::Release);
        give_range(c, &self.geo, now as u32, (target - now) as u32);
        true
    }

    /// Returns every empty, unowned run's pages to the free ranges (one
    /// fence for all of them). Runs stay allocated while empty so that an
    /// alloc/free cycle does not create and retire a run each time; they
    /// are retired only when pages run out.
    pub(super) fn retire_empty_runs(&self, c: &mut Central) -> bool {
        let mut retired = Vec::new();
        for (class, (info, list)) in CLASSES.iter().zip(c.lists.iter_mut()).enumerate() {
            let blocks = u64::from(info.blocks);
            let pages = &self.pages;
            list.retain(|&r| {
                let head = pages.get(r);
                // Listed runs are not owned, so nobody can reserve from them
                // and no free is pending: an all-free count is stable.
                if head.aux.load(Ordering::Acquire) & FREE_MASK == blocks {
                    retired.push((r, class));
                    false
                } else {
                    true
                }
            });
        }
        if retired.is_empty() {
            return false;
        }
        for &(r, _) in &retired {
            let off = self.geo.desc(r);
            self.region.store_u64(off, 0);
            self.region.flush(off, 8);
        }
        self.region.fence();
        let st = &self.stats[self.geo.lanes as usize];
        st.fences.fetch_add(1, Ordering::Relaxed);
        st.meta_lines
            .fetch_add(retired.len() as u64, Ordering::Relaxed);
        for (r, class) in retired {
            let n = CLASSES[class].pages;
            for q in r..r + n {
                let pv = &self.page(q);
                pv.word.store(V_FREE, Ordering::Release);
                pv.aux.store(0, Ordering::Relaxed);
            }
            give_range(c, &self.geo, r, n);
            self.claimed_pages
                .fetch_sub(u64::from(n), Ordering::Relaxed);
        }
        true
    }

    /// A run of `class` for the handle of lane `own`: a listed partial
    /// run, or a new one.
    pub(super) fn acquire_run(&self, class: usize, own: usize) -> Result<u32> {
        // The central lock is held across the fences below: tell a crash
        // simulator interleaving threads not to switch inside (declared
        // first, so it ends after the lock is released).
        let _held = ferrite_pmem::LockHeld::enter();
        let mut c = self.central.lock();
        if let Some(r) = c.lists[class].pop() {
            // LISTED → OWNED in one step: concurrent frees only add to the count.
            self.page(r).aux.fetch_xor(LISTED | OWNED, Ordering::AcqRel);
            return Ok(r);
        }
        let info = CLASSES[class];
        let Some(start) = self.take_pages(&mut c, info.pages) else {
            return Err(AllocError::OutOfSpace {
                size: info.size as usize,
                free: c.free_pages * PAGE as u64,
            });
        };
        for q in start..start + info.pages {
            self.page(q)
                .word
                .store(v_run(class, start), Ordering::Release);
        }
        self.page(start)
            .aux
            .store(u64::from(info.blocks) | OWNED, Ordering::Release);
        // The pages may be an extent's that a record with a pending marker
        // freed: the header word is that record's (invariant 5), so the
        // markers are made durable first (a fence only when there are any;
        // runs are created once per 16 or more allocations).
        let st = &self.stats[self.geo.lanes as usize];
        let mut flushed = std::mem::take(&mut c.markers);
        let n = self.flush_markers(own, true, &mut flushed);
        if n > 0 {
            self.region.fence();
            self.clear_markers(&flushed);
            flushed.clear();
            st.fences.fetch_add(1, Ordering::Relaxed);
            st.meta_lines.fetch_add(n as u64, Ordering::Relaxed);
        }
        c.markers = flushed;
        // Invariant 2: the header is durable before any bit can be set, and
        // with its own fence, so it does not depend on which thread fences
        // next.
        let off = self.geo.desc(start);
        self.region.store_u64(
            off,
            PageHdr::Run { class: class as u8 }.encode(start, self.nonce),
        );
        self.region.persist(off, 8);
        st.fences.fetch_add(1, Ordering::Relaxed);
        st.meta_lines.fetch_add(1, Ordering::Relaxed);
        self.claimed_pages
            .fetch_add(u64::from(info.pages), Ordering::Relaxed);
        Ok(start)
    }

    /// The owner stops allocating from run `start`; lists it if it has room.
    pub(super) fn release_run(&self, start: u32) {
        let old = self.page(start).aux.fetch_and(!OWNED, Ordering::AcqRel);
        if old & FREE_MASK > 0 {
            self.try_list(start);
        }
    }

    /// Lists run `start` unless it is owned, listed or full.
    pub(super) fn try_list(&self, start: u32) {
        let head = &self.page(start);
        let mut cur = head.aux.load(Ordering::Acquire);
        loop {
            if cur & (OWNED | LISTED) != 0 || cur & FREE_MASK == 0 {
                return;
            }
            match head.aux.compare_exchange_weak(
                cur,
                cur | LISTED,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(seen) => cur = seen,
            }
        }
        let class = v_class(self.page(start).word.load(Ordering::Acquire));
        self.central.lock().lists[class].push(start);
    }

    /// A block became free (cancelled or freed durably) in run `start`.
    pub(super) fn block_freed(&self, start: u32) {
        let old = self.page(start).aux.fetch_add(1, Ordering::AcqRel);
        if old & (OWNED | LISTED) == 0 {
            self.try_list(start);
        }
    }

    /// Reserves a free block of `class` in run `start`, starting the search
    /// at block `hint`. Returns (block index, share page, row).
    pub(super) fn take_block(
        &self,
        start: u32,
        class: usize,
        hint: &mut u32,
    ) -> Option<(u32, u32, u32)> {
        let head = &self.page(start);
        if head.aux.load(Ordering::Acquire) & FREE_MASK == 0 {
            return None;
        }
        let info = CLASSES[class];
        let np = info.pages;
        let rows = info.rows as usize;
        let words = rows.div_ceil(32);
        let start_row = if *hint >= info.blocks {
            0
        } else {
            (*hint / np) as usize
        };
        let sh = 2 * (start_row % 32);
        for step in 0..=words {
            let wi = (start_row / 32 + step) % words;
            let window = if step == 0 {
                !0u64 << sh
            } else if step == words {
                if sh == 0 {
                    break;
                }
                (1u64 << sh) - 1
            } else {
                !0u64
            };
            loop {
                let mut best: Option<(u32, u32, u64)> = None;
                for s in 0..np {
                    let x = self.page(start + s).st[wi].load(Ordering::Acquire);
                    let m = free_pairs(x) & valid_pairs(info.blocks, np, s, wi) & window;
                    if m != 0 {
                        let b = m.trailing_zeros();
                        if best.is_none_or(|(bb, _, _)| b < bb) {
                            best = Some((b, s, x));
                        }
                    }
                }
                let Some((b, s, x)) = best else { break };
                let w = &self.page(start + s).st[wi];
                if w.compare_exchange(
                    x,
                    x | (ST_RESERVED << b),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
                {
                    head.aux.fetch_sub(1, Ordering::AcqRel);
                    let row = (wi * 32) as u32 + b / 2;
                    let idx = row * np + s;
                    *hint = idx + 1;
                    return Some((idx, start + s, row));
                }
                // A free changed another pair of the word: look again.
            }
        }
        None
    }

    /// Reserves an extent of `n` pages.
    pub(super) fn reserve_extent(&self, n: u32) -> Result<u32> {
        let mut c = self.central.lock();
        let Some(start) = self.take_pages(&mut c, n) else {
            return Err(AllocError::OutOfSpace {
                size: n as usize * PAGE,
                free: c.free_pages * PAGE as u64,
            });
        };
        self.page(start)
            .word
            .store(v_ext(V_EXT_RESERVED, n), Ordering::Release);
        self.claimed_pages
            .fetch_add(u64::from(n), Ordering::Relaxed);
        Ok(start)
    }

    /// Returns an extent's pages (cancelled, or freed durably).
    pub(super) fn release_extent(&self, start: u32, n: u32) {
        let mut c = self.central.lock();
        self.page(start).word.store(V_FREE, Ordering::Release);
        give_range(&mut c, &self.geo, start, n);
        self.claimed_pages
            .fetch_sub(u64::from(n), Ordering::Relaxed);
    }
}
