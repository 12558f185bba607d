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

/// Distinct ids touched in one fence epoch, as sorted, disjoint, merged
/// half-open intervals. A persist of one contiguous range — however large —
/// is one interval, so bookkeeping costs the same for 64 B and for 1 MiB;
/// the common append-at-the-end case is O(1).
#[derive(Default)]
struct IntervalSet {
    iv: Vec<(usize, usize)>,
    count: usize,
}

impl IntervalSet {
    #[inline]
    fn insert(&mut self, s: usize, e: usize) {
        if s >= e {
            return;
        }
        match self.iv.last_mut() {
            None => {}
            // Touches only the last interval: extend it in place.
            Some(last) if s >= last.0 && s <= last.1 => {
                if e > last.1 {
                    self.count += e - last.1;
                    last.1 = e;
                }
                return;
            }
            Some(last) if s > last.1 => {}
            Some(_) => return self.insert_general(s, e),
        }
        self.iv.push((s, e));
        self.count += e - s;
    }

    fn insert_general(&mut self, s: usize, e: usize) {
        let i = self.iv.partition_point(|&(_, ie)| ie < s);
        let (mut ns, mut ne, mut j) = (s, e, i);
        while j < self.iv.len() && self.iv[j].0 <= ne {
            ns = ns.min(self.iv[j].0);
            ne = ne.max(self.iv[j].1);
            self.count -= self.iv[j].1 - self.iv[j].0;
            j += 1;
        }
        self.iv.splice(i..j, [(ns, ne)]);
        self.count += ne - ns;
    }

    fn len(&self) -> usize {
        self.count
    }

    fn clear(&mut self) {
        self.iv.clear();
        self.count = 0;
    }
}

#[derive(Default)]
struct Epoch {
    lines: IntervalSet,
    blocks: IntervalSet,
}

#[derive(Default)]
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

thread_local! {
    static LOCAL: Local = Local::default();
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
                    "sorted, disjoint, merged"
                );
            }
            set.clear();
            assert_eq!(set.len(), 0);
        }
    }
}
