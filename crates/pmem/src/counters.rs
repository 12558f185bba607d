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
//! Reading a [`Counters::snapshot`] is a handful of thread-local loads; take
//! one before and after an operation and subtract.

use std::cell::{Cell, RefCell};
use std::ops::Sub;

/// Size of an Optane media block (XPLine).
pub const MEDIA_BLOCK: usize = 256;

/// A snapshot of one thread's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    pub flush_insns: u64,
    pub lines_flushed: u64,
    pub fences: u64,
    pub nt_bytes: u64,
    pub msync_calls: u64,
    pub msync_bytes: u64,
    pub blocks_written: u64,
}

impl Counters {
    /// The calling thread's counters now. Distinct lines and blocks of the
    /// current, not yet fenced epoch are included.
    pub fn snapshot() -> Counters {
        LOCAL.with(|l| {
            let mut open = l.epoch.borrow_mut();
            Counters {
                flush_insns: l.flush_insns.get(),
                lines_flushed: l.lines_flushed.get() + open.lines() as u64,
                fences: l.fences.get(),
                nt_bytes: l.nt_bytes.get(),
                msync_calls: l.msync_calls.get(),
                msync_bytes: l.msync_bytes.get(),
                blocks_written: l.blocks_written.get() + open.blocks() as u64,
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
    pub flush_insns: f64,
    pub lines_flushed: f64,
    pub fences: f64,
    pub nt_bytes: f64,
    pub msync_calls: f64,
    pub blocks_written: f64,
}

/// Distinct ids (lines, media blocks) touched in one fence epoch.
///
/// A flush appends its range in O(1) — extending the last range when it
/// continues it, as sequential writes do — and the ranges are sorted and
/// merged only when counted: at the fence that closes the epoch, at a
/// snapshot, or when the list passes [`COMPACT`] entries (so a long epoch
/// of repeated flushes stays small). A persist of one contiguous range,
/// however large, is one entry; random lines (the flushes of an
/// interleaved group sharing one fence) cost a push each and one sort per
/// fence. This is the bookkeeping behind every flush of every component,
/// so the flush path does as little as possible.
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

    /// Inlined into every flush: the common cases are a compare or two.
    #[inline(always)]
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
    lines: EpochSet,
    blocks: EpochSet,
}

/// Lines per media block.
const LINES_PER_BLOCK: usize = MEDIA_BLOCK / crate::arch::CACHE_LINE;

impl Epoch {
    fn lines(&mut self) -> usize {
        self.lines.len()
    }

    /// Distinct blocks: those of the flushed lines and the recorded ones.
    fn blocks(&mut self) -> usize {
        self.lines.compact();
        if self.blocks.ranges.is_empty() {
            // Block ranges of sorted, disjoint line ranges are sorted and
            // may only touch or overlap their predecessor.
            let mut n = 0;
            let mut prev_end = 0;
            for &(s, e) in &self.lines.ranges {
                let (bs, be) = (s / LINES_PER_BLOCK, (e - 1) / LINES_PER_BLOCK + 1);
                n += be - bs.max(prev_end);
                prev_end = be;
            }
            return n;
        }
        for i in 0..self.lines.ranges.len() {
            let (s, e) = self.lines.ranges[i];
            self.blocks
                .insert(s / LINES_PER_BLOCK, (e - 1) / LINES_PER_BLOCK + 1);
        }
        self.blocks.len()
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
    epoch: RefCell<Epoch>,
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
            epoch: RefCell::new(Epoch {
                lines: EpochSet::new(),
                blocks: EpochSet::new(),
            }),
        }
    }
}

thread_local! {
    // Const-initialised: every flush and fence reaches it, and a lazily
    // initialised thread-local adds a state check to each access.
    static LOCAL: Local = const { Local::new() };
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
        l.epoch.borrow_mut().lines.insert(first, first + lines);
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
            .borrow_mut()
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
    LOCAL.with(|l| {
        if counted {
            l.fences.set(l.fences.get() + 1);
        }
        let mut e = l.epoch.borrow_mut();
        l.lines_flushed
            .set(l.lines_flushed.get() + e.lines() as u64);
        l.blocks_written
            .set(l.blocks_written.get() + e.blocks() as u64);
        e.lines.clear();
        e.blocks.clear();
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

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
        let mut e = Epoch {
            lines: EpochSet::new(),
            blocks: EpochSet::new(),
        };
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
            assert_eq!(e.lines(), lines.len(), "round {round}");
            assert_eq!(e.blocks(), blocks.len(), "round {round}");
            e.lines.clear();
            e.blocks.clear();
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
