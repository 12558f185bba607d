//! Which cache lines of a DRAM page changed since it was last written back.
//!
//! The buffer manager that owns the DRAM copy of a page tracks its modified
//! lines [P0 §3.2.3]; the micro-log persists exactly those, and the hybrid
//! counts them to choose between the micro-log and copy-on-write.

use ferrite_pmem::CACHE_LINE;
use std::fmt;

/// Words in the bitmap: 16 × 64 bits = 1024 lines, a 64 KiB page.
const WORDS: usize = 16;

/// A set of line numbers of one page (line `i` is bytes `64·i .. 64·i+64`).
///
/// Fixed size and `Copy` (128 bytes), so a buffer manager can keep one per
/// frame without allocating. Lines at or above [`DirtyLines::MAX_LINES`]
/// cannot be represented: marking one sets a sticky overflow flag instead
/// of panicking, and the store refuses such a mask with
/// [`PageError::DirtyOutOfRange`](super::PageError::DirtyOutOfRange).
#[derive(Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct DirtyLines {
    bits: [u64; WORDS],
    /// Smallest unrepresentable line ever marked (0 = none).
    overflow: usize,
}

impl DirtyLines {
    /// Largest number of lines per page (64 KiB pages).
    pub const MAX_LINES: usize = WORDS * 64;

    /// No line dirty.
    pub const fn none() -> DirtyLines {
        DirtyLines {
            bits: [0; WORDS],
            overflow: 0,
        }
    }

    /// Lines `0..lines` dirty: the whole page, for a page of `lines` lines.
    pub fn all(lines: usize) -> DirtyLines {
        let mut d = DirtyLines::none();
        d.set_range(0, lines);
        d
    }

    /// The lines of `lines`.
    pub fn from_lines(lines: impl IntoIterator<Item = usize>) -> DirtyLines {
        let mut d = DirtyLines::none();
        for l in lines {
            d.set(l);
        }
        d
    }

    /// Marks line `line` dirty.
    pub fn set(&mut self, line: usize) {
        if line >= Self::MAX_LINES {
            if self.overflow == 0 || line < self.overflow {
                self.overflow = line;
            }
            return;
        }
        self.bits[line / 64] |= 1 << (line % 64);
    }

    /// Marks lines `first..first + count` dirty.
    pub fn set_range(&mut self, first: usize, count: usize) {
        let end = first.saturating_add(count);
        for l in first..end.min(Self::MAX_LINES) {
            self.bits[l / 64] |= 1 << (l % 64);
        }
        if end > Self::MAX_LINES {
            // The first unrepresentable line of the range.
            self.set(first.max(Self::MAX_LINES));
        }
    }

    /// Marks every line overlapping bytes `off..off + len` of the page.
    pub fn mark_bytes(&mut self, off: usize, len: usize) {
        if len == 0 {
            return;
        }
        let first = off / CACHE_LINE;
        let last = off.saturating_add(len - 1) / CACHE_LINE;
        self.set_range(first, last - first + 1);
    }

    /// Unmarks line `line` (nothing happens for an unrepresentable line).
    pub fn clear(&mut self, line: usize) {
        if line < Self::MAX_LINES {
            self.bits[line / 64] &= !(1 << (line % 64));
        }
    }

    /// Unmarks every line (and forgets an overflow).
    pub fn clear_all(&mut self) {
        *self = DirtyLines::none();
    }

    pub fn contains(&self, line: usize) -> bool {
        line < Self::MAX_LINES && self.bits[line / 64] & (1 << (line % 64)) != 0
    }

    /// Number of dirty lines.
    pub fn count(&self) -> usize {
        self.bits.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.overflow == 0 && self.bits.iter().all(|&w| w == 0)
    }

    /// The highest line ever marked, representable or not.
    pub fn highest(&self) -> Option<usize> {
        if self.overflow != 0 {
            return Some(self.overflow);
        }
        self.bits
            .iter()
            .enumerate()
            .rev()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i * 64 + 63 - w.leading_zeros() as usize)
    }

    /// Dirty lines in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.bits.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros() as usize;
                w &= w - 1;
                Some(i * 64 + b)
            })
        })
    }

    /// Maximal runs of consecutive dirty lines, as `(first line, count)`, in
    /// ascending order: the in-place writes of the micro-log, one copy each.
    pub fn runs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let mut lines = self.iter().peekable();
        std::iter::from_fn(move || {
            let first = lines.next()?;
            let mut count = 1;
            while lines.peek() == Some(&(first + count)) {
                lines.next();
                count += 1;
            }
            Some((first, count))
        })
    }
}

impl fmt::Debug for DirtyLines {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut l = f.debug_list();
        for (first, count) in self.runs() {
            if count == 1 {
                l.entry(&first);
            } else {
                l.entry(&(first..first + count));
            }
        }
        if self.overflow != 0 {
            l.entry(&format_args!("overflow at {}", self.overflow));
        }
        l.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_count_iterate_and_runs() {
        let mut d = DirtyLines::none();
        assert!(d.is_empty());
        assert_eq!(d.highest(), None);
        for l in [0, 1, 2, 5, 63, 64, 65, 1023] {
            d.set(l);
        }
        assert_eq!(d.count(), 8);
        assert_eq!(
            d.iter().collect::<Vec<_>>(),
            vec![0, 1, 2, 5, 63, 64, 65, 1023]
        );
        assert_eq!(
            d.runs().collect::<Vec<_>>(),
            vec![(0, 3), (5, 1), (63, 3), (1023, 1)]
        );
        assert_eq!(d.highest(), Some(1023));
        d.clear(1023);
        assert_eq!(d.highest(), Some(65));
        assert!(d.contains(64) && !d.contains(3));
    }

    #[test]
    fn bytes_map_to_lines_and_overflow_is_sticky() {
        let mut d = DirtyLines::none();
        d.mark_bytes(60, 8);
        assert_eq!(d.iter().collect::<Vec<_>>(), vec![0, 1]);
        d.mark_bytes(128, 0);
        assert_eq!(d.count(), 2);
        assert_eq!(DirtyLines::all(256).count(), 256);
        assert_eq!(
            DirtyLines::all(256).runs().collect::<Vec<_>>(),
            vec![(0, 256)]
        );
        d.set(5000);
        d.set(2000);
        assert_eq!(d.highest(), Some(2000), "the smallest unrepresentable line");
        assert!(!d.is_empty());
        assert_eq!(d.count(), 2);
        d.clear_all();
        assert!(d.is_empty());
    }
}
