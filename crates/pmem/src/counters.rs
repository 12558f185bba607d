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
            let open = l.epoch.borrow();
            Counters {
                flush_insns: l.flush_insns.get(),
                lines_flushed: l.lines_flushed.get() + open.lines.len() as u64,
                fences: l.fences.get(),
                nt_bytes: l.nt_bytes.get(),
                msync_calls: l.msync_calls.get(),
                msync_bytes: l.msync_bytes.get(),
                blocks_written: l.blocks_written.get() + open.blocks.len() as u64,
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

/// Distinct ids touched in one fence epoch, kept in two parts whose union
/// is counted:
///
/// - `iv`: sorted, disjoint, merged half-open intervals, for ranges longer
///   than [`SHORT`] ids, for ranges that start inside or right after the
///   last interval, and for every range while `iv` holds fewer than
///   [`FEW`] intervals. A persist of one contiguous range — however large —
///   is one interval, so bookkeeping costs the same for 64 B and for 1 MiB,
///   and sequential writes extend the last interval in O(1).
/// - a hash set of single ids (open addressing, `table` holds id + 1, 0 is
///   empty; `used` lists the filled slots), for the other short ranges:
///   random lines — e.g. the flushes of an interleaved group sharing one
///   fence — cost O(1) each instead of a search and a memmove in `iv`.
///   Cleared through `used`, so clearing costs what was inserted.
///
/// An id may be in both parts; [`IntervalSet::len`] counts it once.
#[derive(Default)]
struct IntervalSet {
    iv: Vec<(usize, usize)>,
    /// Ids covered by `iv`.
    iv_count: usize,
    table: Vec<usize>,
    used: Vec<usize>,
}

/// Ranges of at most this many ids go to the hash set …
const SHORT: usize = 4;
/// … once the epoch holds this many intervals. Two keeps the small epochs
/// of one-at-a-time persists (a data line, then a flag line) on the
/// interval path, where they cost a push each.
const FEW: usize = 2;

impl IntervalSet {
    const fn new() -> IntervalSet {
        IntervalSet {
            iv: Vec::new(),
            iv_count: 0,
            table: Vec::new(),
            used: Vec::new(),
        }
    }

    /// Inlined into every flush: the common cases are a few compares.
    #[inline(always)]
    fn insert(&mut self, s: usize, e: usize) {
        if s >= e {
            return;
        }
        let hash_short = e - s <= SHORT && self.iv.len() >= FEW;
        match self.iv.last_mut() {
            // Touches only the last interval: extend it in place.
            Some(last) if s >= last.0 && s <= last.1 => {
                if e > last.1 {
                    self.iv_count += e - last.1;
                    last.1 = e;
                }
                return;
            }
            // A short range once the epoch has a few intervals: hash it.
            // (Below that, searching and shifting a handful of intervals is
            // cheaper than hashing, and small epochs stay as they were.)
            _ if hash_short => return self.insert_ids(s, e),
            Some(last) if s > last.1 => {}
            None => {}
            Some(_) => return self.insert_general(s, e),
        }
        self.iv.push((s, e));
        self.iv_count += e - s;
    }

    fn insert_general(&mut self, s: usize, e: usize) {
        let i = self.iv.partition_point(|&(_, ie)| ie < s);
        let (mut ns, mut ne, mut j) = (s, e, i);
        while j < self.iv.len() && self.iv[j].0 <= ne {
            ns = ns.min(self.iv[j].0);
            ne = ne.max(self.iv[j].1);
            self.iv_count -= self.iv[j].1 - self.iv[j].0;
            j += 1;
        }
        if i == j {
            self.iv.insert(i, (ns, ne));
        } else {
            self.iv[i] = (ns, ne);
            self.iv.drain(i + 1..j);
        }
        self.iv_count += ne - ns;
    }

    /// Out of line, so that `insert` stays small enough to inline into
    /// every flush.
    #[inline(never)]
    fn insert_ids(&mut self, s: usize, e: usize) {
        for id in s..e {
            self.insert_id(id);
        }
    }

    #[inline]
    fn insert_id(&mut self, id: usize) {
        if 2 * (self.used.len() + 1) > self.table.len() {
            self.grow();
        }
        let mask = self.table.len() - 1;
        let key = id.wrapping_add(1);
        let mut i = Self::home(id, mask);
        loop {
            match self.table[i] {
                0 => {
                    self.table[i] = key;
                    self.used.push(i);
                    return;
                }
                k if k == key => return,
                _ => i = (i + 1) & mask,
            }
        }
    }

    /// Multiplicative hashing: consecutive ids spread over the table.
    #[inline]
    fn home(id: usize, mask: usize) -> usize {
        ((id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize & mask
    }

    /// Doubles the table (at least 64 slots), keeping it at most half full.
    fn grow(&mut self) {
        let cap = (2 * self.table.len()).max(64);
        let old: Vec<usize> = self.used.iter().map(|&i| self.table[i]).collect();
        self.table.clear();
        self.table.resize(cap, 0);
        self.used.clear();
        for key in old {
            self.insert_id(key - 1);
        }
    }

    #[inline]
    fn len(&self) -> usize {
        if self.used.is_empty() {
            return self.iv_count;
        }
        self.len_with_ids()
    }

    fn len_with_ids(&self) -> usize {
        let ids = if self.iv.is_empty() {
            self.used.len()
        } else {
            // Count hashed ids that no interval covers.
            self.used
                .iter()
                .filter(|&&slot| {
                    let id = self.table[slot] - 1;
                    let i = self.iv.partition_point(|&(_, ie)| ie <= id);
                    i == self.iv.len() || self.iv[i].0 > id
                })
                .count()
        };
        self.iv_count + ids
    }

    #[inline]
    fn clear(&mut self) {
        for &slot in &self.used {
            self.table[slot] = 0;
        }
        self.used.clear();
        self.iv.clear();
        self.iv_count = 0;
    }
}

struct Epoch {
    lines: IntervalSet,
    blocks: IntervalSet,
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
                lines: IntervalSet::new(),
                blocks: IntervalSet::new(),
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
        let mut e = l.epoch.borrow_mut();
        let first = addr_first_line / crate::arch::CACHE_LINE;
        e.lines.insert(first, first + lines);
        let end_addr = addr_first_line + lines * crate::arch::CACHE_LINE;
        e.blocks.insert(
            addr_first_line / MEDIA_BLOCK,
            (end_addr - 1) / MEDIA_BLOCK + 1,
        );
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
            .set(l.lines_flushed.get() + e.lines.len() as u64);
        l.blocks_written
            .set(l.blocks_written.get() + e.blocks.len() as u64);
        e.lines.clear();
        e.blocks.clear();
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_set_counts_distinct_ids_in_any_insertion_order() {
        use std::collections::BTreeSet;
        let mut x = 12345u64;
        for _ in 0..200 {
            let mut set = IntervalSet::default();
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
                    set.iv.windows(2).all(|w| w[0].1 < w[1].0),
                    "intervals sorted, disjoint, merged"
                );
            }
            set.clear();
            assert_eq!(set.len(), 0);
        }
    }

    #[test]
    fn random_short_ranges_and_long_ranges_mix_exactly() {
        use std::collections::BTreeSet;
        let mut set = IntervalSet::default();
        let mut x = 99u64;
        for epoch in 0..50 {
            let mut model = BTreeSet::new();
            for i in 0..2000usize {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let s = (x >> 33) as usize % 20_000;
                // Mostly single ids, now and then a long range over them.
                let len = if i % 97 == 0 {
                    50 + (x >> 20) as usize % 500
                } else {
                    1 + i % 3
                };
                set.insert(s, s + len);
                model.extend(s..s + len);
                if i % 251 == 0 {
                    assert_eq!(set.len(), model.len(), "epoch {epoch}, insert {i}");
                }
            }
            assert_eq!(set.len(), model.len());
            set.clear();
            assert_eq!(set.len(), 0);
            assert!(set.table.iter().all(|&k| k == 0), "clear empties the table");
        }
        // A sequential run of single ids is one interval; so is a run that
        // continues a long range, whatever was flushed in between.
        for l in 1000..1100 {
            set.insert(l, l + 1);
        }
        assert_eq!((set.iv.len(), set.len()), (1, 100));
        set.insert(500, 600);
        for l in 600..700 {
            set.insert(l, l + 1);
        }
        assert_eq!((set.iv.len(), set.len()), (2, 300));
        // Random single ids past `FEW` intervals go to the hash set.
        for l in (2000..2400).step_by(7) {
            set.insert(l, l + 1);
        }
        assert!(set.iv.len() <= FEW && !set.used.is_empty());
        assert_eq!(set.len(), 300 + (2000..2400).step_by(7).count());
    }
}
