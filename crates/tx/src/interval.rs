//! Sets of byte ranges, for a transaction's read, written and flush sets.
//!
//! Most transactions touch a handful of ranges, usually adjacent or
//! overlapping (a node's fields, a key, then the next key): a sorted vector
//! of disjoint, merged half-open intervals is compact and fast for those.
//! A few (a hash-table rehash, a big rebalance) touch thousands of
//! scattered ranges, where inserting into the middle of a vector is
//! quadratic; past `SMALL` (64) intervals the set moves to a hash table of
//! 64-byte lines, each with a mask of its bytes in the set: every
//! operation then costs one probe per line it covers. (Iteration order is
//! then unspecified; queries on a range still answer in address order.)

/// Intervals kept in the vector before switching to the B-tree.
const SMALL: usize = 64;

/// Disjoint, sorted, merged half-open intervals `[start, end)`.
#[derive(Clone, Debug, Default)]
pub struct Ranges {
    iv: Vec<(u64, u64)>,
    /// Once the set is large (then `iv` is empty).
    big: Option<LineSet>,
    /// An emptied line table kept for the next time the set grows large
    /// (a handle's sets are reused by every transaction: big ones — every
    /// rehash — would otherwise allocate and regrow their table each time).
    spare: Option<LineSet>,
}

/// Open-addressing table: line number + 1 (0 = empty slot) → byte mask.
#[derive(Clone, Debug, Default)]
struct LineSet {
    slots: Vec<(u64, u64)>,
    used: usize,
}

/// Mask of the bytes `[s, e)` of line `l` (`s < e`, overlapping the line).
#[inline]
fn line_bits(l: u64, s: u64, e: u64) -> u64 {
    let lo = s.max(l * 64) - l * 64;
    let hi = e.min(l * 64 + 64) - l * 64;
    let width = hi - lo;
    let m = if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    m << lo
}

impl LineSet {
    #[inline]
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize & (self.slots.len() - 1)
    }

    fn get(&self, line: u64) -> u64 {
        if self.slots.is_empty() {
            return 0;
        }
        let key = line + 1;
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            match self.slots[i] {
                (0, _) => return 0,
                (k, m) if k == key => return m,
                _ => i = (i + 1) & mask,
            }
        }
    }

    fn or(&mut self, line: u64, bits: u64) {
        if 2 * (self.used + 1) > self.slots.len() {
            self.grow();
        }
        let key = line + 1;
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            match self.slots[i] {
                (0, _) => {
                    self.slots[i] = (key, bits);
                    self.used += 1;
                    return;
                }
                (k, ref mut m) if k == key => {
                    *m |= bits;
                    return;
                }
                _ => i = (i + 1) & mask,
            }
        }
    }

    /// Empties the table, keeping its allocation unless it is very large.
    fn emptied(mut self) -> Option<LineSet> {
        if self.slots.len() > 1 << 16 {
            return None;
        }
        self.slots.fill((0, 0));
        self.used = 0;
        Some(self)
    }

    fn grow(&mut self) {
        let cap = (2 * self.slots.len()).max(256);
        let old = std::mem::replace(&mut self.slots, vec![(0, 0); cap]);
        self.used = 0;
        for (k, m) in old {
            if k != 0 {
                self.or(k - 1, m);
            }
        }
    }

    /// Runs of set bytes, line by line (adjacent runs across lines are
    /// not merged).
    fn runs(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.slots
            .iter()
            .filter(|s| s.0 != 0)
            .flat_map(|&(k, m)| mask_runs(k - 1, m, u64::MAX))
    }
}

/// The runs of set bits of `m` (line `l`), as byte ranges, restricted to
/// the bits of `within`.
fn mask_runs(l: u64, m: u64, within: u64) -> impl Iterator<Item = (u64, u64)> {
    let mut rest = m & within;
    std::iter::from_fn(move || {
        if rest == 0 {
            return None;
        }
        let lo = rest.trailing_zeros() as u64;
        let run = (rest >> lo).trailing_ones() as u64;
        let bits = if run == 64 {
            u64::MAX
        } else {
            ((1u64 << run) - 1) << lo
        };
        rest &= !bits;
        Some((l * 64 + lo, l * 64 + lo + run))
    })
}

impl Ranges {
    pub fn clear(&mut self) {
        self.iv.clear();
        if let Some(b) = self.big.take() {
            self.spare = b.emptied();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.iv.is_empty() && self.big.as_ref().is_none_or(|b| b.used == 0)
    }

    /// The ranges: in address order and merged while the set is small;
    /// per line, in no particular order, once it is large.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let small = self.big.is_none().then(|| self.iv.iter().copied());
        let big = self.big.iter().flat_map(LineSet::runs);
        small.into_iter().flatten().chain(big)
    }

    /// Adds `[s, e)`, merging it with every interval it overlaps or touches.
    pub fn insert(&mut self, s: u64, e: u64) {
        if s >= e {
            return;
        }
        if let Some(b) = self.big.as_mut() {
            for l in s / 64..e.div_ceil(64) {
                b.or(l, line_bits(l, s, e));
            }
            return;
        }
        // Fast path: at or after the last interval (sequential accesses).
        match self.iv.last_mut() {
            Some(last) if s >= last.0 && s <= last.1 => {
                last.1 = last.1.max(e);
                return;
            }
            Some(last) if s > last.1 => {
                self.iv.push((s, e));
                return self.maybe_grow();
            }
            None => {
                self.iv.push((s, e));
                return;
            }
            Some(_) => {}
        }
        // First interval that ends at or after `s` (touching counts).
        let i = self.iv.partition_point(|&(_, ie)| ie < s);
        let mut j = i;
        let (mut ns, mut ne) = (s, e);
        while j < self.iv.len() && self.iv[j].0 <= ne {
            ns = ns.min(self.iv[j].0);
            ne = ne.max(self.iv[j].1);
            j += 1;
        }
        if i == j {
            self.iv.insert(i, (ns, ne));
            self.maybe_grow();
        } else {
            self.iv[i] = (ns, ne);
            self.iv.drain(i + 1..j);
        }
    }

    /// Moves the set to the line table now, whatever its size (for sets
    /// about to receive many scattered ranges).
    pub fn go_big(&mut self) {
        if self.big.is_none() {
            self.spill();
        }
    }

    fn maybe_grow(&mut self) {
        if self.iv.len() > SMALL {
            self.spill();
        }
    }

    fn spill(&mut self) {
        let mut b = self.spare.take().unwrap_or_default();
        for (s, e) in self.iv.drain(..) {
            for l in s / 64..e.div_ceil(64) {
                b.or(l, line_bits(l, s, e));
            }
        }
        self.big = Some(b);
    }

    /// Maximal runs of the set overlapping `[s, e)`, in address order,
    /// passed to `f` (clipped to `[s, e)` when the set is large).
    fn each_overlap(&self, s: u64, e: u64, mut f: impl FnMut(u64, u64)) {
        if let Some(b) = &self.big {
            let mut run: Option<(u64, u64)> = None;
            for l in s / 64..e.div_ceil(64) {
                for (a, z) in mask_runs(l, b.get(l), line_bits(l, s, e)) {
                    match run.as_mut() {
                        Some(r) if r.1 == a => r.1 = z,
                        _ => {
                            if let Some((ra, rz)) = run.take() {
                                f(ra, rz);
                            }
                            run = Some((a, z));
                        }
                    }
                }
            }
            if let Some((ra, rz)) = run {
                f(ra, rz);
            }
            return;
        }
        let mut i = self.iv.partition_point(|&(_, ie)| ie <= s);
        while i < self.iv.len() && self.iv[i].0 < e {
            f(self.iv[i].0, self.iv[i].1);
            i += 1;
        }
    }

    /// True when some byte of `[s, e)` is in the set.
    #[inline]
    pub fn overlaps(&self, s: u64, e: u64) -> bool {
        if s >= e {
            return false;
        }
        let mut hit = false;
        self.each_overlap(s, e, |_, _| hit = true);
        hit
    }

    /// True when every byte of `[s, e)` is in the set (the property
    /// tests' oracle; nothing else asks).
    #[cfg(test)]
    pub fn covers(&self, s: u64, e: u64) -> bool {
        if s >= e {
            return true;
        }
        let mut all = false;
        self.each_overlap(s, e, |a, b| all |= a <= s && b >= e);
        all
    }

    /// Appends to `out` the parts of `[s, e)` that are in the set.
    pub fn intersect(&self, s: u64, e: u64, out: &mut Vec<(u64, u64)>) {
        if s >= e {
            return;
        }
        self.each_overlap(s, e, |a, b| out.push((a.max(s), b.min(e))));
    }

    /// Appends to `out` the parts of `[s, e)` that are not in the set.
    pub fn gaps(&self, s: u64, e: u64, out: &mut Vec<(u64, u64)>) {
        if s >= e {
            return;
        }
        let mut cur = s;
        self.each_overlap(s, e, |a, b| {
            if a > cur {
                out.push((cur, a));
            }
            cur = cur.max(b);
        });
        if cur < e {
            out.push((cur, e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn matches_a_byte_set_model_small_and_large() {
        let mut x = 7u64;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        // 40 inserts stay in the vector; 400 move to the line table.
        // One set, cleared between rounds: a cleared large set reuses its
        // line table, which must come back empty.
        let mut r = Ranges::default();
        for inserts in [40, 400, 40, 400] {
            for _ in 0..60 {
                r.clear();
                let mut model = BTreeSet::new();
                for _ in 0..inserts {
                    let s = next(3000);
                    let e = s + next(20);
                    r.insert(s, e);
                    model.extend(s..e);
                    if r.big.is_none() {
                        let v: Vec<_> = r.iter().collect();
                        assert!(
                            v.windows(2).all(|w| w[0].1 < w[1].0),
                            "sorted, disjoint, merged"
                        );
                    }
                    let (qs, qe) = {
                        let a = next(3200);
                        (a, a + next(40))
                    };
                    let inside = (qs..qe).filter(|b| model.contains(b)).count() as u64;
                    let mut got = Vec::new();
                    r.intersect(qs, qe, &mut got);
                    assert_eq!(got.iter().map(|(a, b)| b - a).sum::<u64>(), inside);
                    let mut gaps = Vec::new();
                    r.gaps(qs, qe, &mut gaps);
                    assert_eq!(
                        gaps.iter().map(|(a, b)| b - a).sum::<u64>(),
                        (qe - qs) - inside
                    );
                    assert_eq!(r.overlaps(qs, qe), inside > 0);
                    assert_eq!(r.covers(qs, qe), inside == qe - qs);
                }
                assert_eq!(
                    r.iter().map(|(a, b)| b - a).sum::<u64>(),
                    model.len() as u64
                );
                if inserts == 400 {
                    assert!(r.big.is_some());
                }
            }
        }
    }
}

/// A transaction's read set, optimised for many reads and few writes: a
/// read is appended to a list (O(1)); a write asks which of its bytes were
/// read, scanning the list. Past `READ_LOG` (256) entries the list becomes a
/// [`Ranges`], so big transactions stay linear. (Converting earlier, at the
/// first write that would scan a long list, measured worse: the skiplist's
/// insert keeps reading after its first write, and a read into a range set
/// costs far more than a push.)
#[derive(Clone, Debug, Default)]
pub struct ReadSet {
    log: Vec<(u64, u64)>,
    /// The reads once the list was given up (then `log` is empty).
    set: Ranges,
    big: bool,
    scratch: Vec<(u64, u64)>,
}

/// Reads logged before a [`ReadSet`] switches to a range set.
const READ_LOG: usize = 256;

impl ReadSet {
    pub fn clear(&mut self) {
        self.log.clear();
        if self.big {
            self.set.clear();
            self.big = false;
        }
    }

    /// Notes that `[s, e)` was read.
    #[inline]
    pub fn insert(&mut self, s: u64, e: u64) {
        if s >= e {
            return;
        }
        if self.big {
            return self.set.insert(s, e);
        }
        // Repeated reads of one field (a loop re-reading a pointer) are
        // common: skip an exact repeat of the last entry.
        if self.log.last() == Some(&(s, e)) {
            return;
        }
        self.log.push((s, e));
        if self.log.len() > READ_LOG {
            self.switch_to_ranges();
        }
    }

    fn switch_to_ranges(&mut self) {
        // Past this size the reads are scattered (a rehash, a rebalance):
        // straight to the line table.
        self.set.go_big();
        for (a, z) in self.log.drain(..) {
            self.set.insert(a, z);
        }
        self.big = true;
    }

    /// Appends to `out` the parts of `[s, e)` that were read, disjoint and
    /// in address order.
    pub fn intersect(&mut self, s: u64, e: u64, out: &mut Vec<(u64, u64)>) {
        if self.big {
            return self.set.intersect(s, e, out);
        }
        let sc = &mut self.scratch;
        sc.clear();
        // Newest first: a write usually clobbers a word the transaction
        // has just read (a pointer it followed, a count it bumped), and a
        // read covering the whole write answers at once.
        for &(a, z) in self.log.iter().rev() {
            if a < e && s < z {
                if a <= s && z >= e {
                    out.push((s, e));
                    return;
                }
                sc.push((a.max(s), z.min(e)));
            }
        }
        if sc.len() > 1 {
            sc.sort_unstable();
        }
        let mut cur: Option<(u64, u64)> = None;
        for &(a, z) in sc.iter() {
            match cur.as_mut() {
                Some(c) if a <= c.1 => c.1 = c.1.max(z),
                _ => {
                    out.extend(cur.take());
                    cur = Some((a, z));
                }
            }
        }
        out.extend(cur);
    }
}

#[cfg(test)]
mod read_set_tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn read_set_matches_a_byte_set_model_small_and_large() {
        let mut x = 11u64;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let mut r = ReadSet::default();
        for reads in [30, 600, 30] {
            for _ in 0..40 {
                r.clear();
                let mut model = BTreeSet::new();
                for _ in 0..reads {
                    let s = next(2000);
                    let e = s + next(24);
                    r.insert(s, e);
                    model.extend(s..e);
                    // Every third query lies inside the read just made
                    // (a write clobbering the word it read).
                    let (q, qe) = if next(3) == 0 && e > s {
                        let a = s + next(e - s);
                        (a, a + 1 + next(e - a))
                    } else {
                        let q = next(2100);
                        (q, q + next(40))
                    };
                    let mut got = Vec::new();
                    r.intersect(q, qe, &mut got);
                    assert!(got.windows(2).all(|w| w[0].1 < w[1].0), "disjoint, ordered");
                    let n: u64 = got.iter().map(|(a, b)| b - a).sum();
                    assert_eq!(n, (q..qe).filter(|b| model.contains(b)).count() as u64);
                }
            }
        }
    }
}
