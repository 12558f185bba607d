//! Mapping-table edits: the address-space bookkeeping of `mmap`, `munmap`,
//! `mprotect` and `mremap`, as pure functions over the table (no system
//! calls, no allocation: the runtime calls them from its trap handler).
//!
//! Invariant: records in use never overlap, and every record's `start` and
//! `len` are page multiples.

use crate::format::{MapRec, kind};

pub const PAGE: u64 = 4096;

pub fn page_up(x: u64) -> u64 {
    x.div_ceil(PAGE) * PAGE
}

/// A piece of a record that an edit removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Removed {
    pub kind: u32,
    pub file: u64,
    pub file_off: u64,
    pub len: u64,
}

/// The table is full.
#[derive(Debug, PartialEq, Eq)]
pub struct Full;

fn free_slot(t: &[MapRec]) -> Option<usize> {
    t.iter().position(|r| r.kind == kind::FREE)
}

/// Adds a record; `start`/`len` page-aligned, not overlapping any other.
pub fn insert(t: &mut [MapRec], rec: MapRec) -> Result<(), Full> {
    let i = free_slot(t).ok_or(Full)?;
    t[i] = rec;
    Ok(())
}

/// Splits the record that strictly contains `at` into two.
pub fn split_at(t: &mut [MapRec], at: u64) -> Result<(), Full> {
    let Some(i) = t
        .iter()
        .position(|r| r.kind != kind::FREE && r.start < at && at < r.start + r.len)
    else {
        return Ok(());
    };
    let j = free_slot(t).ok_or(Full)?;
    let head = at - t[i].start;
    let tail = MapRec {
        start: at,
        len: t[i].len - head,
        prot: t[i].prot,
        kind: t[i].kind,
        file: t[i].file,
        file_off: t[i].file_off + head,
        flags: t[i].flags,
        reserved: [0; 5],
    };
    t[i].len = head;
    t[j] = tail;
    Ok(())
}

/// Removes `[lo, hi)` from the table, calling `removed` for each piece.
pub fn cut(
    t: &mut [MapRec],
    lo: u64,
    hi: u64,
    mut removed: impl FnMut(Removed),
) -> Result<(), Full> {
    split_at(t, lo)?;
    split_at(t, hi)?;
    for r in t.iter_mut() {
        if r.kind != kind::FREE && r.start >= lo && r.start + r.len <= hi {
            removed(Removed {
                kind: r.kind,
                file: r.file,
                file_off: r.file_off,
                len: r.len,
            });
            r.kind = kind::FREE;
        }
    }
    Ok(())
}

/// Sets the protection of every record inside `[lo, hi)`.
pub fn set_prot(t: &mut [MapRec], lo: u64, hi: u64, prot: u32) -> Result<(), Full> {
    split_at(t, lo)?;
    split_at(t, hi)?;
    for r in t.iter_mut() {
        if r.kind != kind::FREE && r.start >= lo && r.start + r.len <= hi {
            r.prot = prot;
        }
    }
    Ok(())
}

/// Whether any record still maps `file` (PERSISTENT).
pub fn file_in_use(t: &[MapRec], file: u64) -> bool {
    t.iter()
        .any(|r| r.kind == kind::PERSISTENT && r.file == file)
}

/// Whether a PERSISTENT record other than those inside `[lo, hi)` maps
/// `file` in `[off, off + len)` — growing a mapping over it in place would
/// alias another record's memory.
pub fn file_range_taken(t: &[MapRec], file: u64, off: u64, len: u64, lo: u64, hi: u64) -> bool {
    t.iter().any(|r| {
        r.kind == kind::PERSISTENT
            && r.file == file
            && !(r.start >= lo && r.start + r.len <= hi)
            && r.file_off < off + len
            && off < r.file_off + r.len
    })
}

/// Index of the record containing `addr`.
pub fn find(t: &[MapRec], addr: u64) -> Option<usize> {
    t.iter()
        .position(|r| r.kind != kind::FREE && r.start <= addr && addr < r.start + r.len)
}

/// Bytes in use by records of `k`.
pub fn bytes(t: &[MapRec], k: u32) -> u64 {
    t.iter().filter(|r| r.kind == k).map(|r| r.len).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(start: u64, len: u64, file: u64) -> MapRec {
        MapRec {
            start,
            len,
            prot: 3,
            kind: kind::PERSISTENT,
            file,
            file_off: 0,
            flags: 0,
            reserved: [0; 5],
        }
    }

    fn table() -> Vec<MapRec> {
        (0..8)
            .map(|_| MapRec {
                kind: kind::FREE,
                ..rec(0, 0, 0)
            })
            .collect()
    }

    fn live(t: &[MapRec]) -> Vec<(u64, u64, u64, u32)> {
        let mut v: Vec<_> = t
            .iter()
            .filter(|r| r.kind != kind::FREE)
            .map(|r| (r.start, r.len, r.file_off, r.prot))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn cutting_the_middle_keeps_both_ends_with_their_file_offsets() {
        let mut t = table();
        insert(&mut t, rec(0x10000, 0x5000, 7)).unwrap();
        let mut gone = vec![];
        cut(&mut t, 0x11000, 0x13000, |r| gone.push(r)).unwrap();
        assert_eq!(
            live(&t),
            vec![(0x10000, 0x1000, 0, 3), (0x13000, 0x2000, 0x3000, 3)]
        );
        assert_eq!(
            gone,
            vec![Removed {
                kind: kind::PERSISTENT,
                file: 7,
                file_off: 0x1000,
                len: 0x2000
            }]
        );
        assert!(file_in_use(&t, 7));
        cut(&mut t, 0, u64::MAX / 2, |_| {}).unwrap();
        assert!(!file_in_use(&t, 7));
    }

    #[test]
    fn protection_changes_split_exactly_at_the_range() {
        let mut t = table();
        insert(&mut t, rec(0x10000, 0x4000, 1)).unwrap();
        insert(&mut t, rec(0x20000, 0x1000, 2)).unwrap();
        set_prot(&mut t, 0x12000, 0x21000, 1).unwrap();
        assert_eq!(
            live(&t),
            vec![
                (0x10000, 0x2000, 0, 3),
                (0x12000, 0x2000, 0x2000, 1),
                (0x20000, 0x1000, 0, 1)
            ]
        );
    }

    #[test]
    fn a_full_table_refuses_instead_of_losing_a_record() {
        let mut t = table();
        for i in 0..8 {
            insert(&mut t, rec(0x10000 * (i + 1), 0x2000, i)).unwrap();
        }
        assert_eq!(insert(&mut t, rec(0x100000, 0x1000, 9)), Err(Full));
        assert_eq!(split_at(&mut t, 0x11000), Err(Full));
        assert_eq!(live(&t).len(), 8);
    }

    #[test]
    fn growing_in_place_detects_another_record_on_the_same_file() {
        let mut t = table();
        insert(&mut t, rec(0x10000, 0x3000, 4)).unwrap();
        cut(&mut t, 0x11000, 0x12000, |_| {}).unwrap();
        // [0x10000,+0x1000) at file 0; [0x12000,+0x1000) at file 0x2000.
        assert!(file_range_taken(&t, 4, 0, 0x3000, 0x10000, 0x11000));
        assert!(!file_range_taken(&t, 4, 0, 0x2000, 0x10000, 0x11000));
        assert_eq!(find(&t, 0x12800), Some(find(&t, 0x12000).unwrap()));
        assert_eq!(find(&t, 0x11000), None);
    }
}
