//! Sets of byte ranges, for a transaction's read, written and flush sets.
//!
//! Most transactions touch a handful of ranges, usually adjacent or
//! overlapping (a node's fields, a key, then the next key): a sorted vector
//! of disjoint, merged half-open intervals is compact and fast for those.
//! A few (a hash-table rehash, a big rebalance) touch thousands of
//! scattered ranges, where inserting into the middle of a vector is
//! quadratic; past [`SMALL`] intervals the set moves to a B-tree.

use std::collections::BTreeMap;

/// Intervals kept in the vector before switching to the B-tree.
const SMALL: usize = 64;

/// Disjoint, sorted, merged half-open intervals `[start, end)`.
#[derive(Clone, Debug, Default)]
pub struct Ranges {
    iv: Vec<(u64, u64)>,
    /// start → end, once the set is large (then `iv` is empty).
    big: Option<BTreeMap<u64, u64>>,
}

impl Ranges {
    pub fn clear(&mut self) {
        self.iv.clear();
        self.big = None;
    }

    pub fn is_empty(&self) -> bool {
        self.iv.is_empty() && self.big.as_ref().is_none_or(BTreeMap::is_empty)
    }

    /// Number of intervals.
    pub fn len(&self) -> usize {
        self.big.as_ref().map_or(self.iv.len(), BTreeMap::len)
    }

    /// The intervals, in order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let small = self.big.is_none().then(|| self.iv.iter().copied());
        let big = self
            .big
            .iter()
            .flat_map(|m| m.iter().map(|(&a, &b)| (a, b)));
        small.into_iter().flatten().chain(big)
    }

    /// Adds `[s, e)`, merging it with every interval it overlaps or touches.
    pub fn insert(&mut self, s: u64, e: u64) {
        if s >= e {
            return;
        }
        if let Some(m) = self.big.as_mut() {
            return big_insert(m, s, e);
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

    fn maybe_grow(&mut self) {
        if self.iv.len() > SMALL {
            self.big = Some(self.iv.drain(..).collect());
        }
    }

    /// Intervals overlapping `[s, e)`, in order, passed to `f`.
    fn each_overlap(&self, s: u64, e: u64, mut f: impl FnMut(u64, u64)) {
        if let Some(m) = &self.big {
            // The interval starting at or before `s` may reach into it.
            if let Some((&a, &b)) = m.range(..=s).next_back()
                && b > s
            {
                f(a, b);
            }
            for (&a, &b) in m.range(s + 1..e) {
                f(a, b);
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
    pub fn overlaps(&self, s: u64, e: u64) -> bool {
        if s >= e {
            return false;
        }
        let mut hit = false;
        self.each_overlap(s, e, |_, _| hit = true);
        hit
    }

    /// True when every byte of `[s, e)` is in the set.
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

/// [`Ranges::insert`] on the B-tree form.
fn big_insert(m: &mut BTreeMap<u64, u64>, s: u64, e: u64) {
    let (mut ns, mut ne) = (s, e);
    // A predecessor that reaches `s` (touching counts) merges.
    if let Some((&a, &b)) = m.range(..=s).next_back()
        && b >= s
    {
        ns = a;
        ne = ne.max(b);
        m.remove(&a);
    }
    // Every interval starting inside `[ns, ne]` merges too.
    while let Some((&a, &b)) = m.range(ns..=ne).next() {
        ne = ne.max(b);
        m.remove(&a);
    }
    m.insert(ns, ne);
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
        // 40 inserts stay in the vector; 400 move to the B-tree.
        for inserts in [40, 400] {
            for _ in 0..60 {
                let mut r = Ranges::default();
                let mut model = BTreeSet::new();
                for _ in 0..inserts {
                    let s = next(3000);
                    let e = s + next(20);
                    r.insert(s, e);
                    model.extend(s..e);
                    let v: Vec<_> = r.iter().collect();
                    assert!(
                        v.windows(2).all(|w| w[0].1 < w[1].0),
                        "sorted, disjoint, merged"
                    );
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
                    assert!(r.big.is_some() && r.len() > SMALL);
                }
            }
        }
    }
}
