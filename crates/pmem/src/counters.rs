//! Always-on, per-thread persistence counters (ARCHITECTURE.md, rule 6).
//!
//! They are the hardware-independent cost of an operation: on real persistent
//! memory, time is dominated by fences and by the lines and 256-byte media
//! blocks written back [P0 §2.3], which this machine does not have.
//!
//! Definitions (all per thread, monotonically increasing):
//! - `flush_insns`: flush instructions issued (`clwb`/`clflushopt`/`clflush`),
//!   one per line per flush call, repeats included.
//! - `lines_flushed`: *distinct* cache lines written back per fence epoch (a
//!   line flushed twice before the same fence counts once), in every domain
//!   that flushes (`adr`; the line set under `msync` is counted here too).
//! - `fences`: persist fences issued (`sfence`, or the `msync` that plays
//!   that role in the `msync` domain).
//! - `nt_bytes`: bytes written with non-temporal stores.
//! - `msync_calls`, `msync_bytes`: `msync(2)` calls and the page-rounded bytes
//!   they covered.
//! - `blocks_written`: distinct 256-byte media blocks made durable per fence
//!   epoch — by flush, by non-temporal store, or (in the cache-persistent
//!   domains `eadr`/`pdram`/`pdram-lite`, where no flush is issued) by the
//!   range a component asked to persist. Optane writes media in 256-byte
//!   blocks, so this predicts write amplification [P0 §2.3].
//!
//! Bookkeeping. Every flush and fence of every component passes through
//! here, so the work is kept small. A thread's open epoch is a few line
//! ranges (and ranges of media blocks made durable without a flush) held
//! inline in its thread-local, in flush order (`InlineSet`): a flush
//! extends the last range or fills the next slot, with no heap and no
//! borrow flag (about 25 instructions with the thread-local access). The
//! fence sorts the few ranges and counts distinct lines and blocks in one
//! walk (a few dozen instructions a range). An epoch of more distinct
//! ranges than fit inline (thousands of scattered flushes sharing one
//! fence) spills to a heap list that is merged O(log n) times
//! (`EpochSet`); one flush however large is a single range.
//!
//! Reading a [`Counters::snapshot`] is a handful of thread-local loads and
//! the count of the open epoch, as at a fence; take one before and after an
//! operation and subtract.

use std::cell::{Cell, RefCell};
use std::ops::Sub;
use std::thread::LocalKey;

/// Size of an Optane media block (XPLine).
pub const MEDIA_BLOCK: usize = 256;

/// A snapshot of one thread's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    /// Flush instructions issued, one per line per flush call, repeats
    /// included.
    pub flush_insns: u64,
    /// Distinct cache lines written back per fence epoch (a line flushed
    /// twice before one fence counts once).
    pub lines_flushed: u64,
    /// Persist fences (`sfence`, or the `msync` standing for it).
    pub fences: u64,
    /// Bytes written with non-temporal stores.
    pub nt_bytes: u64,
    /// `msync(2)` calls.
    pub msync_calls: u64,
    /// Bytes those calls covered, rounded out to pages.
    pub msync_bytes: u64,
    /// Distinct 256-byte media blocks ([`MEDIA_BLOCK`]) made durable per
    /// fence epoch: the write-amplification predictor.
    pub blocks_written: u64,
}

impl Counters {
    /// The calling thread's counters now. Distinct lines and blocks of the
    /// current, not yet fenced epoch are included.
    pub fn snapshot() -> Counters {
        LOCAL.with(|l| {
            let (lines, blocks) = l.epoch.counts();
            Counters {
                flush_insns: l.flush_insns.get(),
                lines_flushed: l.lines_flushed.get() + lines as u64,
                fences: l.fences.get(),
                nt_bytes: l.nt_bytes.get(),
                msync_calls: l.msync_calls.get(),
                msync_bytes: l.msync_bytes.get(),
                blocks_written: l.blocks_written.get() + blocks as u64,
            }
        })
    }

    /// Sum of two snapshots (e.g. deltas of several threads).
    pub fn add(&self, o: &Counters) -> Counters {
        Counters {
            flush_insns: self.flush_insns + o.flush_insns,
            lines_flushed: self.lines_flushed + o.lines_flushed,
            fences: self.fences + o.fences,
            nt_bytes: self.nt_bytes + o.nt_bytes,
            msync_calls: self.msync_calls + o.msync_calls,
            msync_bytes: self.msync_bytes + o.msync_bytes,
            blocks_written: self.blocks_written + o.blocks_written,
        }
    }

    /// Per-operation averages of this delta.
    pub fn per_op(&self, ops: u64) -> PerOp {
        let d = ops.max(1) as f64;
        PerOp {
            flush_insns: self.flush_insns as f64 / d,
            lines_flushed: self.lines_flushed as f64 / d,
            fences: self.fences as f64 / d,
            nt_bytes: self.nt_bytes as f64 / d,
            msync_calls: self.msync_calls as f64 / d,
            blocks_written: self.blocks_written as f64 / d,
        }
    }
}

impl Sub for Counters {
    type Output = Counters;
    fn sub(self, o: Counters) -> Counters {
        Counters {
            flush_insns: self.flush_insns - o.flush_insns,
            lines_flushed: self.lines_flushed - o.lines_flushed,
            fences: self.fences - o.fences,
            nt_bytes: self.nt_bytes - o.nt_bytes,
            msync_calls: self.msync_calls - o.msync_calls,
            msync_bytes: self.msync_bytes - o.msync_bytes,
            blocks_written: self.blocks_written - o.blocks_written,
        }
    }
}

/// Counter deltas divided by an operation count.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PerOp {
    /// [`Counters::flush_insns`] per operation.
    pub flush_insns: f64,
    /// [`Counters::lines_flushed`] per operation.
    pub lines_flushed: f64,
    /// [`Counters::fences`] per operation.
    pub fences: f64,
    /// [`Counters::nt_bytes`] per operation.
    pub nt_bytes: f64,
    /// [`Counters::msync_calls`] per operation.
    pub msync_calls: f64,
    /// [`Counters::blocks_written`] per operation.
    pub blocks_written: f64,
}

/// Ranges an epoch's set holds inline before it spills to an [`EpochSet`].
const INLINE: usize = 16;

/// [`InlineSet::n`] of a set that has spilled.
const SPILLED: usize = INLINE + 1;

/// Distinct ids (lines, or media blocks) touched in one fence epoch: the
/// set every flush reaches first.
///
/// The epoch of a typical operation is a few ranges (a transaction's log
/// record and the handful of lines it updates), so they are kept in a
/// fixed array, in flush order. A flush compares its range with the last
/// one — extending it in place when the flush continues, repeats or lies
/// in it, as sequential writes do — or stores it in the next slot. The
/// array is sorted (insertion sort by start: a few compares for a few
/// ranges, none when they came in order) only when counted, at the fence
/// or a snapshot, and counting is one walk ([`count`]).
///
/// When the array is full it is sorted and merged in place. If that leaves
/// it at most half full (an epoch flushing the same few lines over and
/// over) it carries on inline, so the next merge is at least `INLINE / 2`
/// flushes away; otherwise every range moves to the general [`EpochSet`]
/// until the epoch ends, so a long epoch of scattered flushes costs a
/// call, a thread-local access and a borrow per flush on top of the
/// general set's own work.
///
/// Cells rather than a `RefCell` around the whole: this is on every flush,
/// and a borrow flag is a load, a test and two stores each time. The spill
/// holds a `Vec`, so it lives in a thread-local of its own, reached only on
/// the spilled path: the thread-local every flush reaches then has no
/// destructor, and no check whether it has registered one.
struct InlineSet {
    /// `ranges[..n]` while `n <= INLINE`: half-open, in flush order.
    ranges: [Cell<(usize, usize)>; INLINE],
    /// Ranges held inline, or [`SPILLED`].
    n: Cell<usize>,
    /// Holds all of the epoch's ranges once `n == SPILLED`; empty before
    /// (it keeps its capacity from one epoch to the next). Each set has
    /// its own.
    spill: &'static LocalKey<RefCell<EpochSet>>,
}

impl InlineSet {
    const fn new(spill: &'static LocalKey<RefCell<EpochSet>>) -> InlineSet {
        InlineSet {
            ranges: [const { Cell::new((0, 0)) }; INLINE],
            n: Cell::new(0),
            spill,
        }
    }

    /// Adds `s..e`. Inlined into every flush: the common cases are a
    /// compare or two and a store. (`get` rather than indexing: `n` may be
    /// [`SPILLED`], and the `None` arms are the slow cases.)
    #[inline(always)]
    fn insert(&self, s: usize, e: usize) {
        // The callers return early on empty ranges: not tested again here.
        debug_assert!(s < e);
        let n = self.n.get();
        if let Some(last) = n.checked_sub(1).and_then(|i| self.ranges.get(i)) {
            let (ls, le) = last.get();
            if s >= ls && s <= le {
                last.set((ls, le.max(e)));
                return;
            }
        }
        match self.ranges.get(n) {
            Some(slot) => {
                slot.set((s, e));
                self.n.set(n + 1);
            }
            None => self.insert_past_inline(s, e),
        }
    }

    /// `insert` when the array is full or the set has spilled. Not inlined:
    /// it keeps the flush path short.
    #[inline(never)]
    fn insert_past_inline(&self, s: usize, e: usize) {
        if self.n.get() == INLINE {
            let m = sort_merge(&self.ranges);
            if m <= INLINE / 2 {
                self.ranges[m].set((s, e));
                self.n.set(m + 1);
                return;
            }
            self.spill.with(|spill| {
                // Sorted and merged, so each is an O(1) push that keeps the
                // spill's merged prefix whole.
                let mut spill = spill.borrow_mut();
                debug_assert!(spill.ranges.is_empty(), "a spill shared by two sets");
                for r in &self.ranges[..m] {
                    let (rs, re) = r.get();
                    spill.insert(rs, re);
                }
            });
            self.n.set(SPILLED);
        }
        self.spill.with(|spill| spill.borrow_mut().insert(s, e));
    }

    /// Hands `f` the ranges sorted by start: the inline ones sorted in
    /// place (their order only decides which range the next flush may
    /// extend), or the spill merged.
    #[inline(always)]
    fn with_sorted<R>(&self, f: impl FnOnce(&[Cell<(usize, usize)>]) -> R) -> R {
        match self.ranges.get(..self.n.get()) {
            Some(inline) => {
                sort_by_start(inline);
                f(inline)
            }
            None => self.spill.with(|spill| {
                let mut spill = spill.borrow_mut();
                spill.compact();
                // Seen as cells, to share `count` with the inline ranges.
                f(Cell::from_mut(&mut spill.ranges[..]).as_slice_of_cells())
            }),
        }
    }

    #[inline]
    fn clear(&self) {
        if self.n.replace(0) == SPILLED {
            self.spill.with(|spill| spill.borrow_mut().clear());
        }
    }
}

/// Insertion sort by start. Ends are not compared: [`count`] and
/// [`sort_merge`] only need starts in order.
#[inline(always)]
fn sort_by_start(r: &[Cell<(usize, usize)>]) {
    for i in 1..r.len() {
        let x = r[i].get();
        let mut j = i;
        while j > 0 {
            let y = r[j - 1].get();
            if y.0 <= x.0 {
                break;
            }
            r[j].set(y);
            j -= 1;
        }
        r[j].set(x);
    }
}

/// Sorts and merges `r` in place (merged ranges do not touch); returns how
/// many are left at its front.
fn sort_merge(r: &[Cell<(usize, usize)>]) -> usize {
    if r.is_empty() {
        return 0;
    }
    sort_by_start(r);
    let mut w = 0;
    for i in 1..r.len() {
        let (s, e) = r[i].get();
        let (ws, we) = r[w].get();
        if s <= we {
            r[w].set((ws, we.max(e)));
        } else {
            w += 1;
            r[w].set((s, e));
        }
    }
    w + 1
}

/// Distinct ids of ranges added in order of their starts.
///
/// Every earlier range starts at or before `s`, and the one that ends at
/// `end` (the furthest end so far) covers `s..end` when `s < end`; so the
/// ids of `s..e` not seen before are `max(s, end)..e`. No merging needed.
#[derive(Default)]
struct Union {
    n: usize,
    end: usize,
}

impl Union {
    #[inline(always)]
    fn add(&mut self, (s, e): (usize, usize)) {
        self.n += e.saturating_sub(s.max(self.end));
        self.end = self.end.max(e);
    }
}

/// Distinct lines of `lines`, and distinct blocks of those lines and of
/// `blocks`, in one walk: both sorted by start, overlaps allowed.
///
/// The block ranges of line ranges sorted by start are sorted by start too,
/// so they are merged with `blocks` (the recorded ones, usually none) as
/// they come.
#[inline(always)]
fn count(lines: &[Cell<(usize, usize)>], blocks: &[Cell<(usize, usize)>]) -> (usize, usize) {
    let (mut l, mut b) = (Union::default(), Union::default());
    let mut j = 0;
    for (s, e) in lines.iter().map(Cell::get) {
        l.add((s, e));
        let bs = s / LINES_PER_BLOCK;
        while let Some(r) = blocks.get(j).map(Cell::get).filter(|r| r.0 < bs) {
            b.add(r);
            j += 1;
        }
        b.add((bs, (e - 1) / LINES_PER_BLOCK + 1));
    }
    for r in &blocks[j..] {
        b.add(r.get());
    }
    (l.n, b.n)
}

/// [`count`] without recorded blocks, for the common case, in fewer
/// instructions: the ranges are merged on the fly, and the block range of
/// a merged line range ends at or after the previous one's and can only
/// share its first block with it, so no [`Union`] is needed.
#[inline(always)]
fn count_lines(lines: &[Cell<(usize, usize)>]) -> (usize, usize) {
    let mut rest = lines.iter().map(Cell::get);
    let Some((mut s, mut e)) = rest.next() else {
        return (0, 0);
    };
    let (mut nl, mut nb, mut block_end) = (0, 0, 0);
    for (rs, re) in rest {
        if rs <= e {
            e = e.max(re);
            continue;
        }
        nl += e - s;
        let be = (e - 1) / LINES_PER_BLOCK + 1;
        nb += be - (s / LINES_PER_BLOCK).max(block_end);
        block_end = be;
        (s, e) = (rs, re);
    }
    nl += e - s;
    nb += (e - 1) / LINES_PER_BLOCK + 1 - (s / LINES_PER_BLOCK).max(block_end);
    (nl, nb)
}

/// The general set behind an [`InlineSet`], for epochs of more distinct
/// ranges than fit inline (a single flush, however large, is one range;
/// thousands of scattered flushes can share one fence).
///
/// A flush appends its range in O(1) — extending the last range when it
/// continues it — and the ranges are sorted and merged only when counted
/// (at the fence that closes the epoch, or a snapshot) or when the list
/// passes its limit (so a long epoch of repeated flushes stays small).
struct EpochSet {
    ranges: Vec<(usize, usize)>,
    /// `ranges[..merged]` is sorted, disjoint and merged (not touching).
    merged: usize,
    /// Length past which the list is merged in place: [`COMPACT`], or
    /// twice what the last merge left, so an epoch of many distinct ranges
    /// merges O(log n) times, not at every flush.
    limit: usize,
}

/// Entries past which an epoch's list is first merged in place.
const COMPACT: usize = 4096;

impl Default for EpochSet {
    fn default() -> EpochSet {
        EpochSet::new()
    }
}

impl EpochSet {
    const fn new() -> EpochSet {
        EpochSet {
            ranges: Vec::new(),
            merged: 0,
            limit: COMPACT,
        }
    }

    #[inline]
    fn insert(&mut self, s: usize, e: usize) {
        if s >= e {
            return;
        }
        let n = self.ranges.len();
        if let Some(last) = self.ranges.last_mut() {
            if s >= last.0 && s <= last.1 {
                // Continues (or repeats) the last range: the prefix stays
                // merged, as nothing follows the last range.
                last.1 = last.1.max(e);
                return;
            }
            if self.merged == n && s > last.1 {
                self.merged += 1;
            }
        } else {
            self.merged = 1;
        }
        self.ranges.push((s, e));
        if self.ranges.len() > self.limit {
            self.compact();
            self.limit = COMPACT.max(2 * self.ranges.len());
        }
    }

    /// Sorts and merges the list in place.
    #[inline(never)]
    fn compact(&mut self) {
        if self.merged == self.ranges.len() {
            return;
        }
        self.ranges.sort_unstable();
        let mut w = 0;
        for r in 1..self.ranges.len() {
            let (s, e) = self.ranges[r];
            if s <= self.ranges[w].1 {
                self.ranges[w].1 = self.ranges[w].1.max(e);
            } else {
                w += 1;
                self.ranges[w] = (s, e);
            }
        }
        self.ranges.truncate(w + 1);
        self.merged = self.ranges.len();
    }

    /// Distinct ids in the set.
    #[cfg(test)]
    fn len(&mut self) -> usize {
        self.compact();
        self.ranges.iter().map(|&(s, e)| e - s).sum()
    }

    #[inline]
    fn clear(&mut self) {
        self.ranges.clear();
        self.merged = 0;
        self.limit = COMPACT;
    }
}

/// One thread's open fence epoch. Media blocks of flushed lines are not
/// recorded per flush: they are derived from the lines when counted
/// (`blocks` holds only those made durable without a flush).
struct Epoch {
    lines: InlineSet,
    blocks: InlineSet,
}

/// Lines per media block.
const LINES_PER_BLOCK: usize = MEDIA_BLOCK / crate::arch::CACHE_LINE;

impl Epoch {
    /// An epoch whose sets spill to `spills`, which no other epoch may use.
    const fn new(spills: [&'static LocalKey<RefCell<EpochSet>>; 2]) -> Epoch {
        Epoch {
            lines: InlineSet::new(spills[0]),
            blocks: InlineSet::new(spills[1]),
        }
    }

    /// Distinct lines, and distinct blocks (of the flushed lines and the
    /// recorded ones), so far.
    #[inline(always)]
    fn counts(&self) -> (usize, usize) {
        // The common case (a few flushes, no block recorded) is inlined.
        let n = self.lines.n.get();
        match self.lines.ranges.get(..n) {
            Some(lines) if self.blocks.n.get() == 0 => {
                sort_by_start(lines);
                count_lines(lines)
            }
            _ => self.counts_in_general(),
        }
    }

    #[inline(never)]
    fn counts_in_general(&self) -> (usize, usize) {
        self.lines
            .with_sorted(|lines| self.blocks.with_sorted(|blocks| count(lines, blocks)))
    }

    #[inline]
    fn clear(&self) {
        self.lines.clear();
        self.blocks.clear();
    }
}

struct Local {
    flush_insns: Cell<u64>,
    lines_flushed: Cell<u64>,
    fences: Cell<u64>,
    nt_bytes: Cell<u64>,
    msync_calls: Cell<u64>,
    msync_bytes: Cell<u64>,
    blocks_written: Cell<u64>,
    epoch: Epoch,
}

impl Local {
    const fn new() -> Local {
        Local {
            flush_insns: Cell::new(0),
            lines_flushed: Cell::new(0),
            fences: Cell::new(0),
            nt_bytes: Cell::new(0),
            msync_calls: Cell::new(0),
            msync_bytes: Cell::new(0),
            blocks_written: Cell::new(0),
            epoch: Epoch::new([&LINES_SPILL, &BLOCKS_SPILL]),
        }
    }

    /// Out of line, so that `LOCAL.with` around it is inlined and reaches
    /// the thread-local directly.
    #[inline(never)]
    fn close_epoch(&self, counted: bool) {
        if counted {
            self.fences.set(self.fences.get() + 1);
        }
        let (lines, blocks) = self.epoch.counts();
        self.lines_flushed
            .set(self.lines_flushed.get() + lines as u64);
        self.blocks_written
            .set(self.blocks_written.get() + blocks as u64);
        self.epoch.clear();
    }
}

thread_local! {
    // Const-initialised and without a destructor: every flush and fence
    // reaches it, and a lazily initialised thread-local, or one with a
    // destructor to register, adds a state check to each access.
    static LOCAL: Local = const { Local::new() };
    // `LOCAL`'s epoch's spills (see `InlineSet`).
    static LINES_SPILL: RefCell<EpochSet> = const { RefCell::new(EpochSet::new()) };
    static BLOCKS_SPILL: RefCell<EpochSet> = const { RefCell::new(EpochSet::new()) };
}

/// Lines are keyed by address so equal offsets in two pools do not collide.
#[inline]
pub(crate) fn note_lines_flushed(addr_first_line: usize, lines: usize, insns: bool) {
    if lines == 0 {
        return;
    }
    LOCAL.with(|l| {
        if insns {
            l.flush_insns.set(l.flush_insns.get() + lines as u64);
        }
        let first = addr_first_line / crate::arch::CACHE_LINE;
        l.epoch.lines.insert(first, first + lines);
    })
}

/// Notes bytes that become durable without a line flush (non-temporal stores,
/// or cache-persistent domains): only media blocks are counted.
#[inline]
pub(crate) fn note_blocks(addr: usize, len: usize) {
    if len == 0 {
        return;
    }
    LOCAL.with(|l| {
        l.epoch
            .blocks
            .insert(addr / MEDIA_BLOCK, (addr + len - 1) / MEDIA_BLOCK + 1);
    })
}

#[inline]
pub(crate) fn note_nt_bytes(n: usize) {
    LOCAL.with(|l| l.nt_bytes.set(l.nt_bytes.get() + n as u64));
}

#[inline]
pub(crate) fn note_msync(bytes: usize) {
    LOCAL.with(|l| {
        l.msync_calls.set(l.msync_calls.get() + 1);
        l.msync_bytes.set(l.msync_bytes.get() + bytes as u64);
    })
}

/// Closes the current epoch; `counted` is false in the `volatile` domain,
/// which issues no fence (the epoch is still closed so sets stay small).
#[inline]
pub(crate) fn note_fence(counted: bool) {
    LOCAL.with(|l| l.close_epoch(counted))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::CACHE_LINE;
    use std::collections::BTreeSet;

    thread_local! {
        // Spills for the sets a test makes (each test has its thread).
        static SPILL_A: RefCell<EpochSet> = const { RefCell::new(EpochSet::new()) };
        static SPILL_B: RefCell<EpochSet> = const { RefCell::new(EpochSet::new()) };
    }

    #[test]
    fn epoch_set_counts_distinct_ids_in_any_insertion_order() {
        let mut x = 12345u64;
        let mut set = EpochSet::default();
        for _ in 0..200 {
            let mut model = BTreeSet::new();
            for _ in 0..30 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let s = (x % 200) as usize;
                let e = s + (x >> 40) as usize % 12;
                set.insert(s, e);
                model.extend(s..e);
                assert_eq!(set.len(), model.len());
                assert!(
                    set.ranges.windows(2).all(|w| w[0].1 < w[1].0),
                    "counted ranges are sorted, disjoint, merged"
                );
            }
            set.clear();
            assert_eq!(set.len(), 0);
        }
    }

    #[test]
    fn random_short_ranges_and_long_ranges_mix_exactly() {
        let mut set = EpochSet::default();
        let mut x = 99u64;
        for epoch in 0..50 {
            let mut model = BTreeSet::new();
            for i in 0..10_000usize {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let s = (x >> 33) as usize % 20_000;
                // Mostly single ids, now and then a long range over them;
                // more entries than `COMPACT`, so compaction happens.
                let len = if i % 97 == 0 {
                    50 + (x >> 20) as usize % 500
                } else {
                    1 + i % 3
                };
                set.insert(s, s + len);
                model.extend(s..s + len);
                assert!(set.ranges.len() <= set.limit);
                if i % 1251 == 0 {
                    assert_eq!(set.len(), model.len(), "epoch {epoch}, insert {i}");
                }
            }
            assert_eq!(set.len(), model.len());
            set.clear();
            assert_eq!(set.len(), 0);
        }
        // A sequential run of single ids is one entry; so is a run that
        // continues the last range.
        for l in 1000..1100 {
            set.insert(l, l + 1);
        }
        assert_eq!((set.ranges.len(), set.merged, set.len()), (1, 1, 100));
        set.insert(500, 600);
        for l in 600..700 {
            set.insert(l, l + 1);
        }
        assert_eq!(set.ranges.len(), 2, "out of order: appended, not merged");
        assert_eq!(set.len(), 300);
        assert_eq!(set.ranges, vec![(500, 700), (1000, 1100)]);
    }

    #[test]
    fn blocks_derived_from_lines_match_a_model() {
        let mut x = 7u64;
        // 40 ranges an epoch: past `INLINE` unless repeats merge away.
        let e = Epoch::new([&SPILL_A, &SPILL_B]);
        for round in 0..300 {
            let (mut lines, mut blocks) = (BTreeSet::new(), BTreeSet::new());
            for _ in 0..40 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let s = (x % 400) as usize;
                let n = 1 + (x >> 50) as usize % 9;
                if round % 3 == 0 && x.is_multiple_of(5) {
                    // A range made durable without a flush (NT store).
                    e.blocks.insert(s, s + 1);
                    blocks.insert(s);
                } else {
                    e.lines.insert(s, s + n);
                    lines.extend(s..s + n);
                    blocks.extend((s..s + n).map(|l| l / LINES_PER_BLOCK));
                }
            }
            assert_eq!(e.counts(), (lines.len(), blocks.len()), "round {round}");
            e.clear();
        }
    }

    #[test]
    fn an_epoch_of_many_distinct_lines_merges_rarely() {
        // 40 000 lines, none adjacent, in scattered order: the merged list
        // stays above `COMPACT`, so the limit must grow with it.
        let mut set = EpochSet::default();
        let n = 40_000usize;
        let mut merges = 0;
        for i in 0..n {
            let l = 2 * ((i * 7919) % n);
            let before = set.merged;
            set.insert(l, l + 1);
            if set.merged == set.ranges.len() && before < set.merged && set.ranges.len() > 1 {
                merges += 1;
            }
        }
        assert_eq!(set.len(), n);
        // Without the growing limit this is one merge per line past `COMPACT`.
        assert!(merges <= 16, "{merges} merges for {n} lines");
    }

    #[test]
    fn an_inline_set_spills_only_past_inline_distinct_ranges() {
        let set = InlineSet::new(&SPILL_A);
        let lines = |set: &InlineSet| set.with_sorted(|r| count(r, &[]).0);
        let spilled = || SPILL_A.with(|s| s.borrow().ranges.len());
        // A sequential run is one range.
        for l in 1000..1100 {
            set.insert(l, l + 1);
        }
        assert_eq!(set.n.get(), 1);
        // Far more flushes than fit, of a few lines: merged in place.
        for _ in 0..50 {
            for l in [7, 3, 7, 3, 9, 1050] {
                set.insert(l, l + 1);
            }
        }
        assert!(set.n.get() <= INLINE);
        assert_eq!((lines(&set), spilled()), (103, 0));
        set.clear();
        // `INLINE` distinct ranges fit; one more spills them all.
        for i in 0..INLINE {
            set.insert(10 * i, 10 * i + 2);
        }
        assert_eq!(set.n.get(), INLINE);
        set.insert(5000, 5001);
        assert_eq!((set.n.get(), spilled()), (SPILLED, INLINE + 1));
        assert_eq!(lines(&set), 2 * INLINE + 1);
        // 10..30 holds 10..12 and 20..22 already.
        set.insert(10, 30);
        assert_eq!(lines(&set), 2 * INLINE + 1 + 16);
        set.clear();
        assert_eq!((set.n.get(), spilled(), lines(&set)), (0, 0, 0));
        set.insert(3, 4);
        assert_eq!((set.n.get(), lines(&set)), (1, 1));
    }

    #[test]
    fn an_epoch_of_many_distinct_lines_merges_rarely_behind_the_inline_set() {
        // As above, through the set every flush reaches: it spills, and
        // its spill merges as rarely.
        let set = InlineSet::new(&SPILL_A);
        let n = 40_000usize;
        let mut merges = 0;
        for i in 0..n {
            let l = 2 * ((i * 7919) % n);
            let before = SPILL_A.with(|s| s.borrow().merged);
            set.insert(l, l + 1);
            SPILL_A.with(|s| {
                let s = s.borrow();
                if s.merged == s.ranges.len() && before < s.merged && s.ranges.len() > 1 {
                    merges += 1;
                }
            });
        }
        // Even lines: two a block.
        assert_eq!(set.with_sorted(|r| count(r, &[])), (n, n / 2));
        assert!(merges <= 16, "{merges} merges for {n} lines");
    }

    #[test]
    fn a_huge_flush_is_counted_exactly() {
        note_fence(false);
        let base = Counters::snapshot();
        // A billion lines from a block-aligned line, one flush.
        let (first, n) = (1usize << 34, 1usize << 30);
        note_lines_flushed(first * CACHE_LINE, n, true);
        // Inside it: nothing new.
        note_lines_flushed((first + 5) * CACHE_LINE, 3, true);
        // Past a one-line gap: a new line in a new block.
        note_lines_flushed((first + n + 1) * CACHE_LINE, 1, true);
        // Eight lines either side of its start: two new blocks before it.
        note_blocks((first - 8) * CACHE_LINE, 16 * CACHE_LINE);
        let open = Counters::snapshot() - base;
        let (lines, blocks) = ((n + 1) as u64, (n / LINES_PER_BLOCK + 3) as u64);
        assert_eq!((open.lines_flushed, open.blocks_written), (lines, blocks));
        note_fence(true);
        assert_eq!(
            Counters::snapshot() - base,
            Counters {
                flush_insns: (n + 4) as u64,
                lines_flushed: lines,
                fences: 1,
                blocks_written: blocks,
                ..Counters::default()
            }
        );
    }

    #[test]
    fn repeated_flushes_of_one_line_count_once() {
        let mut set = EpochSet::default();
        for _ in 0..3 {
            for l in [7, 3, 7, 3, 9] {
                set.insert(l, l + 1);
            }
        }
        assert_eq!(set.len(), 3);
    }

    /// Random sequences of flushes, non-temporal block ranges, snapshots and
    /// fences, driven through the same entry points as the persister and
    /// checked against a model that keeps the lines and blocks of the open
    /// epoch in `BTreeSet`s: every counter must match at every snapshot.
    mod model {
        use super::super::*;
        use crate::arch::CACHE_LINE;
        use proptest::prelude::*;
        use std::collections::BTreeSet;

        /// Where a flush starts, relative to the previous one where that
        /// matters: the fast paths differ for continuing, repeated, nested
        /// and scattered ranges.
        #[derive(Clone, Debug)]
        enum At {
            /// A line among the first few hundred: overlaps are frequent.
            Near(usize),
            /// Anywhere in a 64 TiB address space.
            Far(usize),
            /// Right after the previous flush (a sequential write).
            After,
            /// The previous flush's first line again.
            Same,
            /// Inside the previous flush.
            Inside(usize),
            /// Ending right where the previous flush starts.
            Before,
        }

        #[derive(Clone, Debug)]
        enum Op {
            Flush {
                at: At,
                lines: usize,
                insns: bool,
            },
            /// Bytes made durable without a line flush (`note_blocks`).
            Blocks {
                addr: usize,
                len: usize,
            },
            /// `count` one-to-three-line flushes on scattered lines: epochs
            /// past the inline capacity and past `COMPACT` entries.
            Scatter {
                seed: u64,
                count: usize,
                spread: usize,
            },
            Snapshot,
            Fence {
                counted: bool,
            },
        }

        fn lines() -> impl Strategy<Value = usize> {
            prop_oneof![
                2 => Just(0usize),
                30 => 1usize..=5,
                6 => 6usize..64,
                2 => 64usize..5_000,
                1 => 5_000usize..70_000,
            ]
        }

        fn at() -> impl Strategy<Value = At> {
            prop_oneof![
                8 => (0usize..400).prop_map(At::Near),
                3 => (0usize..1 << 40).prop_map(At::Far),
                4 => Just(At::After),
                2 => Just(At::Same),
                2 => any::<usize>().prop_map(At::Inside),
                1 => Just(At::Before),
            ]
        }

        fn op(fence_weight: u32) -> impl Strategy<Value = Op> {
            prop_oneof![
                40 => (at(), lines(), prop::bool::weighted(0.9))
                    .prop_map(|(at, lines, insns)| Op::Flush { at, lines, insns }),
                5 => (
                    prop_oneof![0usize..30_000, 0usize..1 << 46],
                    prop_oneof![4 => 0usize..2_000, 1 => 2_000usize..1 << 20],
                )
                    .prop_map(|(addr, len)| Op::Blocks { addr, len }),
                1 => (
                    any::<u64>(),
                    prop_oneof![1usize..40, 40usize..6_000],
                    // A handful of lines (repeats merge away), a few
                    // hundred (overlaps) or many (mostly distinct).
                    prop_oneof![Just(6usize), Just(300), Just(50_000)],
                )
                    .prop_map(|(seed, count, spread)| Op::Scatter { seed, count, spread }),
                3 => Just(Op::Snapshot),
                fence_weight => any::<bool>().prop_map(|counted| Op::Fence { counted }),
            ]
        }

        /// Ops with fences rare, common or frequent, so epochs range from
        /// one flush to hundreds.
        fn ops() -> impl Strategy<Value = Vec<Op>> {
            prop_oneof![Just(1u32), Just(6), Just(20)]
                .prop_flat_map(|w| prop::collection::vec(op(w), 0..120))
        }

        #[derive(Default)]
        struct Model {
            closed: Counters,
            lines: BTreeSet<usize>,
            blocks: BTreeSet<usize>,
        }

        impl Model {
            fn flush(&mut self, line: usize, n: usize, insns: bool) {
                note_lines_flushed(line * CACHE_LINE, n, insns);
                if insns {
                    self.closed.flush_insns += n as u64;
                }
                for l in line..line + n {
                    self.lines.insert(l);
                    self.blocks.insert(l * CACHE_LINE / MEDIA_BLOCK);
                }
            }

            fn expected(&self) -> Counters {
                Counters {
                    lines_flushed: self.closed.lines_flushed + self.lines.len() as u64,
                    blocks_written: self.closed.blocks_written + self.blocks.len() as u64,
                    ..self.closed
                }
            }
        }

        fn run(ops: &[Op]) -> Result<(), TestCaseError> {
            // Close whatever an earlier case left open on this thread.
            note_fence(false);
            let base = Counters::snapshot();
            let mut m = Model::default();
            let mut last = (0usize, 1usize);
            for (i, op) in ops.iter().enumerate() {
                match *op {
                    Op::Flush {
                        ref at,
                        lines,
                        insns,
                    } => {
                        let line = match *at {
                            At::Near(l) => l,
                            At::Far(l) => l,
                            At::After => last.1,
                            At::Same => last.0,
                            At::Inside(k) => last.0 + k % (last.1 - last.0),
                            At::Before => last.0.saturating_sub(lines),
                        };
                        m.flush(line, lines, insns);
                        if lines > 0 {
                            last = (line, line + lines);
                        }
                    }
                    Op::Blocks { addr, len } => {
                        note_blocks(addr, len);
                        if len > 0 {
                            m.blocks
                                .extend(addr / MEDIA_BLOCK..=(addr + len - 1) / MEDIA_BLOCK);
                        }
                    }
                    Op::Scatter {
                        seed,
                        count,
                        spread,
                    } => {
                        let mut x = seed | 1;
                        for _ in 0..count {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let line = (x % spread as u64) as usize;
                            m.flush(line, 1 + (x >> 60) as usize % 3, true);
                        }
                    }
                    Op::Snapshot => {
                        prop_assert_eq!(Counters::snapshot() - base, m.expected(), "op {}", i);
                    }
                    Op::Fence { counted } => {
                        note_fence(counted);
                        let e = m.expected();
                        m.closed = Counters {
                            fences: e.fences + counted as u64,
                            ..e
                        };
                        m.lines.clear();
                        m.blocks.clear();
                    }
                }
            }
            prop_assert_eq!(Counters::snapshot() - base, m.expected(), "at the end");
            note_fence(false);
            m.closed.lines_flushed += m.lines.len() as u64;
            m.closed.blocks_written += m.blocks.len() as u64;
            prop_assert_eq!(
                Counters::snapshot() - base,
                m.closed,
                "after the last fence"
            );
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]
            #[test]
            fn counters_match_a_set_model(ops in ops()) {
                run(&ops)?;
            }
        }
    }
}
