//! Thread handles of the Ferrite heap: reserve, cancel, publish, prepare.

use super::{
    Fault, Found, Heap, ST_ALLOC, ST_FREEING, ST_RESERVED, V_EXT, V_EXT_FREEING, V_EXT_RESERVED,
    format::PageHdr, marker_tag, v_ext, v_kind,
};
use crate::class::{CLASSES, MAX_SMALL, NUM_CLASSES, class_of};
use crate::error::{AllocError, Result};
use crate::lane::{Cursor, Lane};
use crate::ops::{MetaOp, flush_words, merge_ops, push_merged};
use crate::{AllocThread, Link, Loc, Publish, Reservation};
use ferrite_pmem::{PAGE, POff};
use std::sync::atomic::Ordering;

/// A thread's handle on a [`Heap`]: its lane, its current run per size
/// class, and scratch buffers, so the fast path allocates nothing.
///
/// Use one handle per thread (all its methods take `&mut self`; it can be
/// moved to another thread). Reservations
/// must be published or cancelled through the handle that made them before
/// it is dropped; any left over stay reserved until the heap is reopened
/// (nothing about them is durable, so reopening reclaims them).
pub struct HeapThread<'h> {
    heap: &'h Heap,
    lane_idx: usize,
    lane: Lane,
    id: u64,
    pub(super) cur: Cursor,
    /// Current run per class: first page + 1 (0 = none).
    runs: [u32; NUM_CLASSES],
    /// Next block index to try per class.
    hints: [u32; NUM_CLASSES],
    ops: Vec<MetaOp>,
    buf: Vec<u8>,
    lines: Vec<u64>,
    /// Pending markers a publish flushed, to clear after its fence.
    flushed: Vec<(usize, u64)>,
}

impl std::fmt::Debug for HeapThread<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeapThread")
            .field("lane", &self.lane_idx)
            .field("id", &self.id)
            .finish()
    }
}

impl<'h> HeapThread<'h> {
    pub(super) fn new(
        heap: &'h Heap,
        lane_idx: usize,
        lane: Lane,
        id: u64,
        cur: Cursor,
    ) -> HeapThread<'h> {
        HeapThread {
            heap,
            lane_idx,
            lane,
            id,
            cur,
            runs: [0; NUM_CLASSES],
            hints: [0; NUM_CLASSES],
            ops: Vec::with_capacity(16),
            buf: Vec::with_capacity(256),
            lines: Vec::with_capacity(16),
            flushed: Vec::with_capacity(8),
        }
    }

    /// The heap this handle allocates from.
    pub fn heap(&self) -> &'h Heap {
        self.heap
    }

    /// The lane this handle logs its publishes in.
    pub fn lane(&self) -> usize {
        self.lane_idx
    }

    fn reserve_small(&mut self, class: usize) -> Result<Reservation> {
        let heap = self.heap;
        loop {
            let r = self.runs[class];
            if r != 0 {
                let start = r - 1;
                if let Some((idx, page, row)) =
                    heap.take_block(start, class, &mut self.hints[class])
                {
                    let info = CLASSES[class];
                    return Ok(Reservation {
                        heap: heap.id,
                        owner: self.id,
                        off: heap.page_pool(start) + u64::from(idx) * u64::from(info.size),
                        size: u64::from(info.size),
                        loc: Loc::Block { start, page, row },
                    });
                }
                heap.release_run(start);
                self.runs[class] = 0;
            }
            let start = match heap.acquire_run(class, self.lane_idx) {
                Err(AllocError::OutOfSpace { .. }) if self.release_runs() => continue,
                r => r?,
            };
            self.runs[class] = start + 1;
            self.hints[class] = 0;
        }
    }

    /// Gives back every current run of this handle (empty ones can then be
    /// retired for other sizes). Returns whether there was any: the caller
    /// retries once when it ran out of pages.
    fn release_runs(&mut self) -> bool {
        let mut any = false;
        for r in self.runs.iter_mut() {
            if *r != 0 {
                self.heap.release_run(*r - 1);
                *r = 0;
                any = true;
            }
        }
        any
    }

    fn check_mine(&self, r: &Reservation) -> Result<()> {
        if r.heap != self.heap.id {
            return Err(AllocError::Foreign { what: "heap" });
        }
        if r.owner != self.id {
            return Err(AllocError::Foreign {
                what: "thread handle",
            });
        }
        Ok(())
    }

    /// Checks that `r` is reserved by this handle and still unpublished.
    fn check_reserved(&self, r: &Reservation) -> Result<()> {
        self.check_mine(r)?;
        let ok = match r.loc {
            Loc::Block { page, row, .. } => self.heap.block_state(page, row) == ST_RESERVED,
            Loc::Extent { page, .. } => {
                v_kind(self.heap.page(page).word.load(Ordering::Acquire)) == V_EXT_RESERVED
            }
            Loc::Header { .. } | Loc::External => false,
        };
        if ok {
            Ok(())
        } else {
            Err(AllocError::StaleReservation { off: r.off })
        }
    }

    /// Marks a published block or extent as being freed (so nobody else
    /// frees it too) and returns where it is.
    fn claim_free(&self, off: POff<u8>) -> Result<Found> {
        let heap = self.heap;
        let off = off.raw();
        let found = heap.locate(off)?;
        match found {
            Found::Block { page, row, .. } => {
                let w = &heap.page(page).st[row as usize / 32];
                let sh = 2 * (row % 32);
                let mut x = w.load(Ordering::Acquire);
                loop {
                    match (x >> sh) & 0b11 {
                        ST_ALLOC => {}
                        ST_FREEING => return Err(AllocError::DoubleFree { off }),
                        _ => return Err(AllocError::NotAllocated { off }),
                    }
                    match w.compare_exchange_weak(
                        x,
                        x | (ST_FREEING << sh),
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => return Ok(found),
                        Err(seen) => x = seen,
                    }
                }
            }
            Found::Extent { page, pages, kind } => {
                let w = &heap.page(page).word;
                match kind {
                    V_EXT => {
                        match w.compare_exchange(
                            v_ext(V_EXT, pages),
                            v_ext(V_EXT_FREEING, pages),
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        ) {
                            Ok(_) => Ok(found),
                            Err(seen) if v_kind(seen) == V_EXT_FREEING => {
                                Err(AllocError::DoubleFree { off })
                            }
                            Err(_) => Err(AllocError::NotAllocated { off }),
                        }
                    }
                    V_EXT_FREEING => Err(AllocError::DoubleFree { off }),
                    _ => Err(AllocError::NotAllocated { off }),
                }
            }
        }
    }

    /// Undoes [`claim_free`](Self::claim_free) (the publish failed or was aborted).
    fn unclaim_free(&self, off: POff<u8>) {
        match self.heap.locate(off.raw()) {
            Ok(Found::Block { page, row, .. }) => {
                self.heap.page(page).st[row as usize / 32]
                    .fetch_and(!(ST_RESERVED << (2 * (row % 32))), Ordering::AcqRel);
            }
            Ok(Found::Extent { page, pages, .. }) => {
                self.heap
                    .page(page)
                    .word
                    .store(v_ext(V_EXT, pages), Ordering::Release);
            }
            Err(_) => {}
        }
    }

    /// Validates `p`, claims its frees and builds its operations in
    /// `self.ops` (or appends them to `out`). On error nothing is claimed.
    fn stage(&mut self, p: &Publish<'_>, out: Option<&mut Vec<MetaOp>>) -> Result<()> {
        for r in p.allocs {
            self.check_reserved(r)?;
        }
        for l in p.links {
            self.heap.check_link(l.at)?;
        }
        let mut claimed = 0;
        let mut ops = std::mem::take(&mut self.ops);
        ops.clear();
        let mut result = Ok(());
        for &f in p.frees {
            match self.claim_free(f) {
                Ok(found) => {
                    claimed += 1;
                    match found {
                        Found::Block { page, row, .. } => push_merged(
                            &mut ops,
                            MetaOp::and_not(self.heap.share_word(page, row), 1 << (row % 64)),
                        ),
                        Found::Extent { page, .. } => {
                            ops.push(MetaOp::set(self.heap.head_word(page), 0))
                        }
                    }
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_ok() {
            for r in p.allocs {
                match r.loc {
                    Loc::Block { page, row, .. } => push_merged(
                        &mut ops,
                        MetaOp::or(self.heap.share_word(page, row), 1 << (row % 64)),
                    ),
                    Loc::Extent { page, pages } => ops.push(MetaOp::set(
                        self.heap.head_word(page),
                        PageHdr::Extent { pages }.encode(page, self.heap.nonce),
                    )),
                    Loc::Header { .. } | Loc::External => unreachable!("checked by check_reserved"),
                }
            }
            for l in p.links {
                ops.push(MetaOp::set(l.at.raw(), l.value));
            }
            merge_ops(&mut ops);
            let max = self.lane.max_ops();
            if out.is_none() && ops.len() > max {
                result = Err(AllocError::BatchTooLarge {
                    ops: ops.len(),
                    max,
                });
            }
        }
        if let Err(e) = result {
            for &f in &p.frees[..claimed] {
                self.unclaim_free(f);
            }
            self.ops = ops;
            return Err(e);
        }
        if let Some(out) = out {
            out.extend_from_slice(&ops);
        }
        self.ops = ops;
        Ok(())
    }

    /// Makes `self.ops` durable: one fence for a single word (two when a
    /// marker is pending), else the lane protocol's two. Pending markers
    /// are durable before any word of the publish changes (invariant 5).
    fn persist_ops(&mut self) {
        let heap = self.heap;
        let st = &heap.stats[self.lane_idx];
        let ops = &self.ops;
        if ops.is_empty() {
            return;
        }
        self.flushed.clear();
        if ops.len() == 1 {
            // One 8-byte store is failure atomic by itself: no log needed.
            // But no record supersedes this lane's newest one, and the word
            // may be a word of any lane's pending record: every pending
            // marker, this lane's too, is completed by a fence of its own
            // before the store.
            let markers = heap.flush_markers(self.lane_idx, true, &mut self.flushed);
            if markers > 0 {
                heap.region.fence();
                heap.clear_markers(&self.flushed);
                st.fences.fetch_add(1, Ordering::Relaxed);
                st.meta_lines.fetch_add(markers as u64, Ordering::Relaxed);
            }
            ops[0].apply(&heap.pool);
            heap.pool.flush(ops[0].off as usize, 8);
            heap.region.fence();
            st.fences.fetch_add(1, Ordering::Relaxed);
            st.meta_lines.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // The other lanes' pending markers ride on the record's fence. This
        // lane's own needs nothing: once the new record is durable it is
        // the lane's newest entry, and the old record is never read again.
        let markers = heap.flush_markers(self.lane_idx, false, &mut self.flushed);
        let (rec, lines) =
            self.lane
                .commit(&heap.region, heap.nonce, &self.cur, ops, &mut self.buf);
        let log_fence = heap.fault != Fault::NoLogFence;
        if log_fence {
            // Commits the record and completes the markers, before any
            // word of this publish is written.
            heap.region.fence();
            heap.clear_markers(&self.flushed);
        }
        for op in ops {
            op.apply(&heap.pool);
        }
        let touched = flush_words(&heap.pool, ops, &mut self.lines);
        heap.region.fence();
        if !log_fence {
            heap.clear_markers(&self.flushed);
        }
        if heap.fault == Fault::NoMarker {
            let mut scratch = self.cur;
            self.lane.advance(&mut scratch, rec);
            self.cur = scratch;
        } else {
            let m = self.lane.mark(&heap.region, heap.nonce, &mut self.cur, rec);
            if heap.fault == Fault::UnfencedMarkers {
                heap.flush_marker(self.lane_idx, marker_tag(m));
            }
            heap.marker_written(self.lane_idx, m);
        }
        st.fences.fetch_add(2, Ordering::Relaxed);
        st.meta_lines
            .fetch_add((lines + touched + markers) as u64, Ordering::Relaxed);
    }

    /// Volatile bookkeeping once the publish is durable.
    fn finish(&mut self, p: &Publish<'_>) {
        let heap = self.heap;
        let st = &heap.stats[self.lane_idx];
        let mut delta: i64 = 0;
        for r in p.allocs {
            match r.loc {
                Loc::Block { page, row, .. } => {
                    // 01 → 10: only this handle changes its reserved pairs.
                    heap.page(page).st[row as usize / 32]
                        .fetch_xor(0b11 << (2 * (row % 32)), Ordering::AcqRel);
                }
                Loc::Extent { page, pages } => heap
                    .page(page)
                    .word
                    .store(v_ext(V_EXT, pages), Ordering::Release),
                Loc::Header { .. } | Loc::External => {}
            }
            delta += r.size as i64;
        }
        for &f in p.frees {
            match heap.locate(f.raw()) {
                Ok(Found::Block {
                    start,
                    class,
                    page,
                    row,
                }) => {
                    heap.page(page).st[row as usize / 32]
                        .fetch_and(!(0b11 << (2 * (row % 32))), Ordering::AcqRel);
                    heap.block_freed(start);
                    delta -= i64::from(CLASSES[class].size);
                }
                Ok(Found::Extent { page, pages, .. }) => {
                    heap.release_extent(page, pages);
                    delta -= pages as i64 * PAGE as i64;
                }
                Err(_) => unreachable!("a claimed free stays locatable"),
            }
        }
        st.in_use.fetch_add(delta, Ordering::Relaxed);
        st.blocks.fetch_add(
            p.allocs.len() as i64 - p.frees.len() as i64,
            Ordering::Relaxed,
        );
    }
}

impl AllocThread for HeapThread<'_> {
    fn reserve(&mut self, size: usize) -> Result<Reservation> {
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        if size <= MAX_SMALL {
            let class = class_of(size);
            return match self.reserve_small(class) {
                // No block of its class and no page for a new run: a free
                // block of a larger class serves (a full pool whose keys
                // were deleted has free blocks, of the sizes it held).
                // The reservation carries the larger size; frees find the
                // class from the run, so nothing else changes.
                Err(e @ AllocError::OutOfSpace { .. }) => (class + 1..NUM_CLASSES)
                    .find_map(|c| self.reserve_small(c).ok())
                    .ok_or(e),
                r => r,
            };
        }
        let heap = self.heap;
        let pages = size.div_ceil(PAGE);
        if pages > heap.max_alloc() / PAGE {
            return Err(AllocError::TooLarge {
                size,
                max: heap.max_alloc(),
            });
        }
        let pages = pages as u32;
        let start = match heap.reserve_extent(pages) {
            Err(AllocError::OutOfSpace { .. }) if self.release_runs() => {
                heap.reserve_extent(pages)?
            }
            r => r?,
        };
        Ok(Reservation {
            heap: heap.id,
            owner: self.id,
            off: heap.page_pool(start),
            size: u64::from(pages) * PAGE as u64,
            loc: Loc::Extent { page: start, pages },
        })
    }

    fn cancel(&mut self, r: Reservation) -> Result<()> {
        self.check_reserved(&r)?;
        let heap = self.heap;
        match r.loc {
            Loc::Block { start, page, row } => {
                heap.page(page).st[row as usize / 32]
                    .fetch_and(!(ST_RESERVED << (2 * (row % 32))), Ordering::AcqRel);
                heap.block_freed(start);
            }
            Loc::Extent { page, pages } => heap.release_extent(page, pages),
            Loc::Header { .. } | Loc::External => unreachable!("checked by check_reserved"),
        }
        Ok(())
    }

    fn publish(&mut self, p: &Publish<'_>) -> Result<()> {
        // A standalone publish is a commit of the persist trace; inside a
        // caller's commit (an engine's write) the caller's scope hides it.
        let scope = ferrite_pmem::trace::commit_scope();
        self.stage(p, None)?;
        self.persist_ops();
        self.finish(p);
        scope.mark();
        Ok(())
    }

    fn prepare(&mut self, p: &Publish<'_>, out: &mut Vec<MetaOp>) -> Result<()> {
        self.stage(p, Some(out))?;
        // The caller fences (commits) before it applies the operations:
        // that fence completes these flushes, so the pending markers are
        // durable before any word of the transaction is (invariant 5).
        // They stay pending all the same: this handle cannot see that
        // fence, and clearing them before it would reopen the window for
        // every other thread. A later publish flushes them again, and
        // clears them after its own fence.
        self.flushed.clear();
        let n = self
            .heap
            .flush_markers(self.lane_idx, true, &mut self.flushed);
        self.heap.stats[self.lane_idx]
            .meta_lines
            .fetch_add(n as u64, Ordering::Relaxed);
        Ok(())
    }

    fn commit_prepared(&mut self, p: &Publish<'_>) {
        self.finish(p);
    }

    fn abort_prepared(&mut self, p: &Publish<'_>) {
        for &f in p.frees {
            self.unclaim_free(f);
        }
    }

    fn root(&mut self, size: usize) -> Result<POff<u8>> {
        let heap = self.heap;
        // Held across the publish's fences (see `LockHeld`).
        let _held = ferrite_pmem::LockHeld::enter();
        let _g = heap.root_lock.lock();
        let cur = crate::PAllocator::root(heap);
        if !cur.is_null() {
            let have = crate::PAllocator::usable_size(heap, cur)?;
            if have < size {
                return Err(AllocError::BadOption(format!(
                    "the root object has {have} bytes, {size} requested"
                )));
            }
            return Ok(cur);
        }
        let r = self.reserve(size)?;
        // Zeroed before it is linked: the publish's first fence covers it.
        heap.pool.fill_nodrain(r.off as usize, size, 0);
        let link = Link {
            at: POff::new(heap.root_word()),
            value: r.off,
        };
        let off = r.off();
        let allocs = [r];
        let res = self.publish(&Publish {
            allocs: &allocs,
            frees: &[],
            links: &[link],
        });
        if let Err(e) = res {
            let [r] = allocs;
            let _ = self.cancel(r);
            return Err(e);
        }
        Ok(off)
    }

    fn max_publish_ops(&self) -> usize {
        self.lane.max_ops()
    }
}

impl Drop for HeapThread<'_> {
    /// The per-thread teardown hook: gives the runs back, makes this
    /// lane's marker durable (flush and fence, unless another thread's
    /// publish already did) and returns the lane, with no pending marker.
    fn drop(&mut self) {
        let heap = self.heap;
        self.release_runs();
        let tag = heap.markers[self.lane_idx].0.load(Ordering::Acquire);
        if tag != 0 {
            heap.flush_marker(self.lane_idx, tag);
        }
        heap.region.fence();
        if tag != 0 {
            heap.clear_markers(&[(self.lane_idx, tag)]);
        }
        heap.central.lock().cursors[self.lane_idx] = Some(self.cur);
    }
}
