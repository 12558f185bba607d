//! The copy-on-write cell [P0 §3.4.1]: two copies of the value and an
//! active flag, both in the cell.
//!
//! # On-media format of one cell (little-endian)
//!
//! | value size | stride | flag | copy A | copy B |
//! |-----------:|-------:|-----:|-------:|-------:|
//! | 16 | 64  | 0..8 | 8..24   | 24..40  |
//! | 32 | 128 | 0..8 | 32..64  | 64..96  |
//! | 48 | 128 | 0..8 | 16..64  | 64..112 |
//! | 64 | 192 | 0..8 | 64..128 | 128..192 |
//!
//! The copies are placed so that neither straddles a cache line (each
//! persist writes one line plus the flag's line); unused bytes are zero.
//! The flag is a `u64`: `0` = copy A holds the value, `1` = copy B; any other
//! value is corruption.
//!
//! # Protocol
//!
//! Update: write the value into the *inactive* copy, persist it (fence 1),
//! then store the other flag value with one atomic 8-byte store and persist
//! it (fence 2). Invariant: the active copy is always complete and durable,
//! because a copy is only written while inactive and only becomes active
//! after it is durable; the flag is one 8-byte word, which x86 writes back
//! failure atomically. Recovery therefore has nothing to repair: it
//! validates every flag.

use super::{CellArray, CellError, CellKind, Fault, Header, Recovery, ValueSize};
use ferrite_pmem::Region;

/// Bytes per cell.
pub(crate) fn stride(size: ValueSize) -> usize {
    layout(size).0
}

/// (stride, offset of copy A, offset of copy B).
fn layout(size: ValueSize) -> (usize, usize, usize) {
    match size {
        ValueSize::B16 => (64, 8, 24),
        ValueSize::B32 => (128, 32, 64),
        ValueSize::B48 => (128, 16, 64),
        ValueSize::B64 => (192, 64, 128),
    }
}

/// An array of copy-on-write cells. See the [module documentation](self).
#[derive(Debug)]
pub struct CowCells {
    region: Region,
    h: Header,
    copy: [usize; 2],
    pub(crate) fault: Fault,
}

impl CowCells {
    fn with_header(region: Region, h: Header) -> CowCells {
        let (_, a, b) = layout(h.size);
        CowCells {
            region,
            h,
            copy: [a, b],
            fault: Fault::None,
        }
    }

    /// The active copy (0 = A, 1 = B) of the cell at `off`.
    #[inline]
    fn active(&self, index: usize, off: usize) -> Result<usize, CellError> {
        match u64::from_le(self.region.load_u64(off)) {
            0 => Ok(0),
            1 => Ok(1),
            f => Err(CellError::Corrupt {
                index,
                what: format!("CoW flag {f:#x} is neither 0 nor 1"),
            }),
        }
    }
}

impl CellArray for CowCells {
    fn format(region: Region, size: ValueSize, count: usize) -> Result<CowCells, CellError> {
        let h = Header::format(&region, CellKind::Cow, size, count)?;
        Ok(CowCells::with_header(region, h))
    }

    fn recover(region: Region) -> Result<(CowCells, Recovery), CellError> {
        let h = Header::open(&region, CellKind::Cow)?;
        let a = CowCells::with_header(region, h);
        for i in 0..h.count {
            a.active(i, h.cell_off(i)?)?;
        }
        Ok((a, Recovery::default()))
    }

    fn kind(&self) -> CellKind {
        CellKind::Cow
    }

    fn value_size(&self) -> ValueSize {
        self.h.size
    }

    fn len(&self) -> usize {
        self.h.count
    }

    fn region(&self) -> &Region {
        &self.region
    }

    #[inline]
    fn read(&self, index: usize, out: &mut [u8]) -> Result<(), CellError> {
        self.h.check_len(out.len())?;
        let off = self.h.cell_off(index)?;
        let active = self.active(index, off)?;
        self.region.read(off + self.copy[active], out);
        Ok(())
    }

    #[inline]
    fn update(&mut self, index: usize, value: &[u8]) -> Result<(), CellError> {
        self.h.check_len(value.len())?;
        let off = self.h.cell_off(index)?;
        let next = 1 - self.active(index, off)?;
        let copy = off + self.copy[next];
        self.region.write(copy, value);
        if self.fault == Fault::CowFlipBeforeCopy {
            self.region.store_u64(off, (next as u64).to_le());
            self.region.persist(off, 8);
            self.region.persist(copy, value.len());
            return Ok(());
        }
        self.region.persist(copy, value.len());
        self.region.store_u64(off, (next as u64).to_le());
        self.region.persist(off, 8);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_pmem::{CACHE_LINE, Counters, Domain, Pool, PoolOptions};

    #[test]
    fn copies_do_not_straddle_lines_and_fit_the_stride() {
        for size in ValueSize::ALL {
            let (stride, a, b) = layout(size);
            let n = size.bytes();
            assert!(stride.is_multiple_of(CACHE_LINE));
            for c in [a, b] {
                assert!(c >= 8 && c + n <= stride, "{size}");
                assert_eq!(
                    c / CACHE_LINE,
                    (c + n - 1) / CACHE_LINE,
                    "{size} copy at {c}"
                );
            }
            assert!(a + n <= b, "{size}: copies overlap");
        }
    }

    #[test]
    fn update_flips_the_flag_and_costs_two_fences() {
        let p = Pool::create_in_memory(&PoolOptions::new("cells", 1 << 16).domain(Domain::Adr))
            .unwrap();
        let r = p.data().sub(0, 4096).unwrap();
        let mut a = CowCells::format(r.clone(), ValueSize::B16, 4).unwrap();
        let off = super::super::CELLS_OFF + 64;
        let before = Counters::snapshot();
        a.update(1, &[7u8; 16]).unwrap();
        let d = Counters::snapshot() - before;
        assert_eq!(d.fences, 2);
        assert_eq!(d.lines_flushed, 2);
        assert_eq!(r.load_u64(off), 1);
        assert_eq!(r.read_vec(off + 24, 16), vec![7u8; 16]);
        a.update(1, &[8u8; 16]).unwrap();
        assert_eq!(r.load_u64(off), 0);
        assert_eq!(r.read_vec(off + 8, 16), vec![8u8; 16]);
        // A corrupt flag is a typed error for read, update and recovery.
        r.store_u64(off, 5);
        assert!(matches!(
            a.read(1, &mut [0u8; 16]),
            Err(CellError::Corrupt { index: 1, .. })
        ));
        assert!(matches!(
            a.update(1, &[0u8; 16]),
            Err(CellError::Corrupt { index: 1, .. })
        ));
        assert!(matches!(
            CowCells::recover(r),
            Err(CellError::Corrupt { index: 1, .. })
        ));
    }
}
