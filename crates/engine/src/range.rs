//! [`KeyRange`]: which keys a range read visits and in what order, and the
//! `Walker` that reads a range in growing chunks through any
//! [`Session`]'s two primitives, [`scan_with`](Session::scan_with)
//! (ascending from a key) and [`scan_back_with`](Session::scan_back_with)
//! (descending below a bound).
//!
//! Chunks start small (a `first()` or a 10-key range reads one short
//! chunk) and double up to [`MAX_CHUNK`], so a long range costs one index
//! descent per 1024 pairs. Each chunk is read on its own: a range is a
//! consistent view only inside one chunk, unless it is read through a
//! snapshot.

use crate::{MAX_KEY, Result, Session, SnapshotRead};
use std::ops::{Bound, RangeBounds};

/// Pairs the first chunk of a range asks for.
const FIRST_CHUNK: usize = 16;
/// Pairs a chunk grows to.
pub const MAX_CHUNK: usize = 1024;

/// A range of keys, ascending or descending.
///
/// ```
/// use ferrite_engine::KeyRange;
/// let r = KeyRange::between(b"apple", b"cherry"); // apple <= k < cherry
/// let s = KeyRange::new(b"b".to_vec()..=b"d".to_vec()); // any Rust range
/// let p = KeyRange::prefix(b"user:").rev(); // keys starting "user:", last first
/// let all = KeyRange::all();
/// assert!(r.contains(b"banana") && !r.contains(b"cherry"));
/// assert!(p.contains(b"user:7") && !p.contains(b"user;"));
/// assert!(all.contains(b"anything"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRange {
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    reverse: bool,
}

impl Default for KeyRange {
    fn default() -> KeyRange {
        KeyRange::all()
    }
}

fn owned(b: Bound<&impl AsRef<[u8]>>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl KeyRange {
    /// Every key, ascending.
    pub fn all() -> KeyRange {
        KeyRange {
            start: Bound::Unbounded,
            end: Bound::Unbounded,
            reverse: false,
        }
    }

    /// The keys of a Rust range: `a..b`, `a..=b`, `a..`, `..b`, of
    /// `Vec<u8>`, `&[u8]`, `&str`, … (both ends of one type).
    pub fn new<K: AsRef<[u8]>>(r: impl RangeBounds<K>) -> KeyRange {
        KeyRange {
            start: owned(r.start_bound()),
            end: owned(r.end_bound()),
            reverse: false,
        }
    }

    /// The keys from `start` (included) to `end` (excluded): `start..end`
    /// for byte strings of any lengths.
    pub fn between(start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> KeyRange {
        KeyRange::bounds(
            Bound::Included(start.as_ref().to_vec()),
            Bound::Excluded(end.as_ref().to_vec()),
        )
    }

    /// Explicit bounds.
    pub fn bounds(start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> KeyRange {
        KeyRange {
            start,
            end,
            reverse: false,
        }
    }

    /// Every key that starts with `p`.
    pub fn prefix(p: impl AsRef<[u8]>) -> KeyRange {
        let p = p.as_ref();
        KeyRange {
            start: Bound::Included(p.to_vec()),
            end: prefix_end(p).map_or(Bound::Unbounded, Bound::Excluded),
            reverse: false,
        }
    }

    /// The same keys, in descending order.
    pub fn rev(mut self) -> KeyRange {
        self.reverse = !self.reverse;
        self
    }

    /// True when the range is read from its last key to its first.
    pub fn is_reverse(&self) -> bool {
        self.reverse
    }

    /// The lower bound.
    pub fn start(&self) -> Bound<&[u8]> {
        self.start.as_ref().map(Vec::as_slice)
    }

    /// The upper bound.
    pub fn end(&self) -> Bound<&[u8]> {
        self.end.as_ref().map(Vec::as_slice)
    }

    /// True when `k` lies inside the bounds.
    pub fn contains(&self, k: &[u8]) -> bool {
        !self.below_start(k) && !self.past_end(k)
    }

    fn below_start(&self, k: &[u8]) -> bool {
        match &self.start {
            Bound::Included(s) => k < s.as_slice(),
            Bound::Excluded(s) => k <= s.as_slice(),
            Bound::Unbounded => false,
        }
    }

    fn past_end(&self, k: &[u8]) -> bool {
        match &self.end {
            Bound::Included(e) => k > e.as_slice(),
            Bound::Excluded(e) => k >= e.as_slice(),
            Bound::Unbounded => false,
        }
    }
}

/// The least key string greater than every key starting with `p`, or
/// `None` when there is none (`p` empty or all `0xff`).
fn prefix_end(p: &[u8]) -> Option<Vec<u8>> {
    let keep = p.iter().rposition(|&b| b != 0xff)?;
    let mut e = p[..=keep].to_vec();
    e[keep] += 1;
    Some(e)
}

/// The least key (1..=[`MAX_KEY`] bytes) greater than `k`, or `None` when
/// `k` is the greatest key there can be.
fn successor(k: &[u8]) -> Option<Vec<u8>> {
    if k.len() < MAX_KEY {
        let mut s = k.to_vec();
        s.push(0);
        Some(s)
    } else {
        // No key extends a key of the longest length: the next one is the
        // increment of its last byte that is not 0xff, shortened there.
        prefix_end(k)
    }
}

/// The two scans a range is read with: a [`Session`]'s or a snapshot's.
pub(crate) trait Scan {
    fn scan_fwd(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize>;
    fn scan_back(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize>;
}

/// A session seen as a [`Scan`].
pub(crate) struct SessionScan<'a, S: Session + ?Sized>(pub(crate) &'a mut S);

impl<S: Session + ?Sized> Scan for SessionScan<'_, S> {
    fn scan_fwd(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        self.0.scan_with(from, limit, f)
    }

    fn scan_back(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        self.0.scan_back_with(upto, limit, f)
    }
}

impl<T: SnapshotRead + ?Sized> Scan for Box<T> {
    fn scan_fwd(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        self.as_mut().scan_with(from, limit, f)
    }

    fn scan_back(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        self.as_mut().scan_back_with(upto, limit, f)
    }
}

/// Reads a [`KeyRange`] chunk by chunk; remembers where the next chunk
/// starts.
#[derive(Clone, Debug)]
pub(crate) struct Walker {
    range: KeyRange,
    /// Ascending: the least key the next chunk may return (inclusive).
    /// Descending: the bound the next chunk stays below.
    next: Bound<Vec<u8>>,
    chunk: usize,
    done: bool,
}

impl Walker {
    pub(crate) fn new(range: KeyRange) -> Walker {
        let next = if range.reverse {
            range.end.clone()
        } else {
            match &range.start {
                Bound::Included(s) => Bound::Included(s.clone()),
                Bound::Excluded(s) => successor(s).map_or(Bound::Unbounded, Bound::Included),
                Bound::Unbounded => Bound::Unbounded,
            }
        };
        // An exclusive start at the greatest key leaves nothing.
        let done =
            !range.reverse && matches!(&range.start, Bound::Excluded(s) if successor(s).is_none());
        Walker {
            range,
            next,
            chunk: FIRST_CHUNK,
            done,
        }
    }

    /// A walker whose first chunk asks for `chunk` pairs.
    pub(crate) fn with_chunk(range: KeyRange, chunk: usize) -> Walker {
        let mut w = Walker::new(range);
        w.chunk = chunk.max(1);
        w
    }

    pub(crate) fn done(&self) -> bool {
        self.done
    }

    /// Reads the next chunk, calling `f` for each pair in the range until
    /// it returns false (then the walk is over). Returns the pairs `f` saw.
    pub(crate) fn step(
        &mut self,
        s: &mut dyn Scan,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        if self.done {
            return Ok(0);
        }
        let limit = self.chunk;
        self.chunk = (self.chunk * 2).min(MAX_CHUNK);
        let mut seen = 0;
        let mut stop = false;
        let mut last: Option<Vec<u8>> = None;
        let range = &self.range;
        let mut visit = |k: &[u8], v: &[u8]| {
            if stop {
                return false;
            }
            let outside = if range.reverse {
                range.below_start(k)
            } else {
                range.past_end(k)
            };
            if outside {
                stop = true;
                return false;
            }
            seen += 1;
            if !f(k, v) {
                stop = true;
                return false;
            }
            match &mut last {
                Some(l) => {
                    l.clear();
                    l.extend_from_slice(k);
                }
                None => last = Some(k.to_vec()),
            }
            true
        };
        let got = if self.range.reverse {
            s.scan_back(self.next.as_ref().map(Vec::as_slice), limit, &mut visit)?
        } else {
            let from: &[u8] = match &self.next {
                Bound::Included(k) => k,
                _ => &[],
            };
            s.scan_fwd(from, limit, &mut visit)?
        };
        if stop || got < limit {
            self.done = true;
            return Ok(seen);
        }
        let last = last.expect("a full chunk visited a key");
        self.next = if self.range.reverse {
            Bound::Excluded(last)
        } else {
            match successor(&last) {
                Some(n) => Bound::Included(n),
                None => {
                    self.done = true;
                    Bound::Unbounded
                }
            }
        };
        Ok(seen)
    }
}

/// A visit of a range: calls its argument per pair until it returns false.
type Visit<'a> = &'a mut dyn FnMut(&[u8], &[u8]) -> bool;

/// The pairs a visit yields, copied out: what every `range` method returns
/// over its `range_with`.
pub(crate) fn collect(
    visit: impl FnOnce(Visit<'_>) -> Result<usize>,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut v = Vec::new();
    visit(&mut |k, val| {
        v.push((k.to_vec(), val.to_vec()));
        true
    })?;
    Ok(v)
}

/// The first pair a visit yields (it stops there): `first` and `last`.
pub(crate) fn first_of(
    visit: impl FnOnce(Visit<'_>) -> Result<usize>,
) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut out = None;
    visit(&mut |k, v| {
        out = Some((k.to_vec(), v.to_vec()));
        false
    })?;
    Ok(out)
}

/// Visits `range` through `s` until `f` returns false; the pairs visited.
pub(crate) fn drive(
    s: &mut dyn Scan,
    range: &KeyRange,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<usize> {
    let mut w = Walker::new(range.clone());
    let mut n = 0;
    while !w.done() {
        n += w.step(s, f)?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_the_last_byte_below_0xff() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }

    #[test]
    fn successor_of_a_longest_key_shortens_it() {
        assert_eq!(successor(b"a"), Some(b"a\0".to_vec()));
        let mut k = vec![7u8; MAX_KEY];
        *k.last_mut().unwrap() = 0xff;
        let s = successor(&k).unwrap();
        assert_eq!(s.len(), MAX_KEY - 1);
        assert_eq!(*s.last().unwrap(), 8);
        assert!(s.as_slice() > k.as_slice());
        assert_eq!(successor(&vec![0xff; MAX_KEY]), None);
    }

    #[test]
    fn bounds_classify_keys() {
        let r = KeyRange::new(b"b".as_slice()..=b"d".as_slice());
        assert!(!r.contains(b"a") && r.contains(b"b") && r.contains(b"d") && !r.contains(b"d\0"));
        let r = KeyRange::bounds(Bound::Excluded(b"b".to_vec()), Bound::Unbounded);
        assert!(!r.contains(b"b") && r.contains(b"b\0"));
        let p = KeyRange::prefix(b"\xff");
        assert_eq!(p.end(), Bound::Unbounded);
        assert!(p.contains(b"\xff\x01") && !p.contains(b"\xfe"));
    }
}
