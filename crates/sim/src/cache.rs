//! The cache hierarchy of P4 Table II, simplified.
//!
//! Per core a private L1 and L2, and one shared L3; every level is
//! set-associative with true LRU and 64-byte lines. Simplifications, and
//! why they are safe for what the model measures (commit behaviour at the
//! memory controller):
//!
//! - **Exclusive** levels: a line lives in exactly one level. A hit below
//!   L1 moves the line up; a victim moves one level down; a dirty L3 victim
//!   is written back to memory. Capacity is what decides which loads reach
//!   the media, and exclusivity only adds the levels' capacities.
//! - **No coherence**: programs are multi-programmed, one task per core in
//!   disjoint address spaces, so no line is ever shared.
//! - **Fill at request**: a missing line is installed when the load is
//!   issued, not when the data returns; a second access to it meanwhile
//!   hits (as an MSHR merge would let it complete no earlier than the
//!   first, the error is bounded by one memory latency per line).
//! - **Stores allocate without a read for ownership** (as if the whole
//!   line were written, which is what persistent code mostly does).

use crate::config::CacheGeometry;

const EMPTY: u64 = u64::MAX;

/// One set-associative level.
#[derive(Clone, Debug)]
pub struct Cache {
    ways: usize,
    sets: usize,
    tags: Vec<u64>,
    dirty: Vec<bool>,
    stamp: Vec<u64>,
    clock: u64,
}

impl Cache {
    pub fn new(g: CacheGeometry, scale: usize) -> Cache {
        let sets = (g.sets() * scale.max(1)).max(1);
        let n = sets * g.ways;
        Cache {
            ways: g.ways,
            sets,
            tags: vec![EMPTY; n],
            dirty: vec![false; n],
            stamp: vec![0; n],
            clock: 0,
        }
    }

    fn range(&self, line: u64) -> std::ops::Range<usize> {
        // Mix the core bits in, so equal offsets of different cores do not
        // all fall in one set of the shared level.
        let h = line ^ (line >> 29) ^ (line >> 36);
        let s = (h % self.sets as u64) as usize;
        s * self.ways..(s + 1) * self.ways
    }

    fn find(&self, line: u64) -> Option<usize> {
        self.range(line).find(|&i| self.tags[i] == line)
    }

    /// Removes `line`; returns whether it was dirty, if it was there.
    pub fn take(&mut self, line: u64) -> Option<bool> {
        let i = self.find(line)?;
        self.tags[i] = EMPTY;
        Some(std::mem::take(&mut self.dirty[i]))
    }

    /// True (and refreshes its LRU age) when `line` is here; marks it dirty
    /// when `write`.
    pub fn hit(&mut self, line: u64, write: bool) -> bool {
        match self.find(line) {
            Some(i) => {
                self.clock += 1;
                self.stamp[i] = self.clock;
                self.dirty[i] |= write;
                true
            }
            None => false,
        }
    }

    /// Installs `line` (not present); returns the evicted victim, if any,
    /// and whether it was dirty.
    pub fn insert(&mut self, line: u64, dirty: bool) -> Option<(u64, bool)> {
        let r = self.range(line);
        let slot = r
            .clone()
            .find(|&i| self.tags[i] == EMPTY)
            .unwrap_or_else(|| r.min_by_key(|&i| self.stamp[i]).unwrap_or(0));
        let victim = (self.tags[slot] != EMPTY).then(|| (self.tags[slot], self.dirty[slot]));
        self.clock += 1;
        self.tags[slot] = line;
        self.dirty[slot] = dirty;
        self.stamp[slot] = self.clock;
        victim
    }

    /// Clears the dirty bit of `line`; true when it was present and dirty.
    pub fn clean(&mut self, line: u64) -> bool {
        match self.find(line) {
            Some(i) => std::mem::take(&mut self.dirty[i]),
            None => false,
        }
    }
}

/// Where an access was served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    L1,
    L2,
    L3,
    Memory,
}

/// Private L1/L2 per core and the shared L3.
#[derive(Clone, Debug)]
pub struct Hierarchy {
    l1: Vec<Cache>,
    l2: Vec<Cache>,
    l3: Cache,
}

impl Hierarchy {
    pub fn new(cores: usize, l1: CacheGeometry, l2: CacheGeometry, l3: CacheGeometry) -> Hierarchy {
        Hierarchy {
            l1: (0..cores).map(|_| Cache::new(l1, 1)).collect(),
            l2: (0..cores).map(|_| Cache::new(l2, 1)).collect(),
            l3: Cache::new(l3, cores),
        }
    }

    /// A load (`write` false) or store by `core`. Installs the line in L1;
    /// dirty lines pushed out of the L3 are appended to `writebacks`.
    pub fn access(
        &mut self,
        core: usize,
        line: u64,
        write: bool,
        writebacks: &mut Vec<u64>,
    ) -> Level {
        if self.l1[core].hit(line, write) {
            return Level::L1;
        }
        let (level, dirty) = if let Some(d) = self.l2[core].take(line) {
            (Level::L2, d)
        } else if let Some(d) = self.l3.take(line) {
            (Level::L3, d)
        } else {
            (Level::Memory, false)
        };
        self.install(core, line, dirty || write, writebacks);
        level
    }

    fn install(&mut self, core: usize, line: u64, dirty: bool, writebacks: &mut Vec<u64>) {
        // A victim falls one level; a dirty one out of the L3 is written back.
        let Some((v1, d1)) = self.l1[core].insert(line, dirty) else {
            return;
        };
        let Some((v2, d2)) = self.l2[core].insert(v1, d1) else {
            return;
        };
        if let Some((v3, true)) = self.l3.insert(v2, d2) {
            writebacks.push(v3);
        }
    }

    /// `clwb`: true when the line was dirty somewhere (it stays cached, clean).
    pub fn writeback(&mut self, core: usize, line: u64) -> bool {
        self.l1[core].clean(line) || self.l2[core].clean(line) || self.l3.clean(line)
    }

    /// Drops the line everywhere (before a non-temporal store to it).
    pub fn invalidate(&mut self, core: usize, line: u64) {
        self.l1[core].take(line);
        self.l2[core].take(line);
        self.l3.take(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Hierarchy {
        let g = |bytes, ways| CacheGeometry {
            bytes,
            ways,
            hit_cycles: 1,
        };
        Hierarchy::new(1, g(128, 2), g(128, 2), g(128, 2))
    }

    #[test]
    fn levels_are_exclusive_and_lru() {
        let mut h = tiny();
        let mut wb = Vec::new();
        assert_eq!(h.access(0, 1, false, &mut wb), Level::Memory);
        assert_eq!(h.access(0, 1, false, &mut wb), Level::L1);
        // Two more lines push line 1 down to L2 (2-way, 1 set).
        h.access(0, 2, false, &mut wb);
        h.access(0, 3, false, &mut wb);
        assert_eq!(h.access(0, 1, false, &mut wb), Level::L2);
        assert!(wb.is_empty());
    }

    #[test]
    fn dirty_victims_of_the_last_level_are_written_back() {
        let mut h = tiny();
        let mut wb = Vec::new();
        h.access(0, 10, true, &mut wb);
        // 6 more lines fill L1, L2 and L3 (2 each) and push 10 out.
        for l in 11..=16 {
            h.access(0, l, false, &mut wb);
        }
        assert_eq!(wb, vec![10]);
        // A clean line leaves silently; a flushed one is clean.
        let mut h = tiny();
        let mut wb = Vec::new();
        h.access(0, 10, true, &mut wb);
        assert!(h.writeback(0, 10));
        assert!(!h.writeback(0, 10));
        for l in 11..=16 {
            h.access(0, l, false, &mut wb);
        }
        assert!(wb.is_empty());
    }
}
