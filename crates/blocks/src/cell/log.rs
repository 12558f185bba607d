//! The log cell [P0 §3.4.2]: the value is first written to a small redo log
//! shared by the whole array, persisted, then written in place and persisted.
//!
//! This is the cell's own minimal, self-contained redo slot (one entry, one
//! checksum), not the general-purpose logs of [`crate::log`]: an in-place
//! update only ever needs its latest entry, so the slot is overwritten by
//! each update.
//!
//! # On-media format (little-endian)
//!
//! A cell is just the value, `stride` = 16, 32, 64, 64 bytes for values of
//! 16, 32, 48, 64 bytes (the next power of two, so no cell straddles a
//! cache line); bytes past the value are zero.
//!
//! The log slot, at array offset 64 (128 bytes reserved, entry uses 16 + n):
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0 | 8 | sequence number: updates since format, ≥ 1 (0 = no entry yet) |
//! | 8 | 4 | cell index |
//! | 12 | 4 | CRC32C of bytes 0..12 followed by the value |
//! | 16 | n | the new value |
//!
//! # Protocol
//!
//! Update of cell `i` to `v`: write entry (seq + 1, i, crc, v) into the slot
//! and persist it (fence 1), then write `v` into cell `i` and persist it
//! (fence 2).
//!
//! Recovery: if the slot holds an entry whose sequence number is non-zero
//! and whose checksum matches, and its cell does not already hold its value,
//! write the value into the cell and persist it (one fence); otherwise do
//! nothing.
//!
//! Why it is correct: the slot always describes the *latest* update, so
//! replaying it can never go back in time, and redoing a write is
//! idempotent. A crash before fence 1 leaves the slot torn (the checksum
//! rejects it — a torn entry passes only with probability 2⁻³²) or
//! holding the previous entry, whose update had completed, while cell `i`
//! still holds its old value (it is only written after fence 1). A crash
//! after fence 1 leaves a valid entry: recovery completes the update,
//! whatever part of the in-place write had reached the medium.

use super::{CellArray, CellError, CellKind, Fault, Header, LOG_SLOT_OFF, Recovery, ValueSize};
use ferrite_pmem::Region;

/// Bytes of the entry header (sequence, index, checksum).
const ENTRY_HEAD: usize = 16;
const ENTRY_MAX: usize = ENTRY_HEAD + ValueSize::MAX;
const _: () = assert!(ENTRY_MAX <= super::LOG_SLOT_LEN);

pub(crate) fn stride(size: ValueSize) -> usize {
    size.bytes().next_power_of_two()
}

fn entry_crc(head: &[u8], value: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&head[..12]), value)
}

/// An array of log cells. See the [module documentation](self).
#[derive(Debug)]
pub struct LogCells {
    region: Region,
    h: Header,
    /// Sequence number of the next entry.
    seq: u64,
    pub(crate) fault: Fault,
}

impl LogCells {
    /// [`CellArray::recover`] with a planted fault (for the checks).
    pub(crate) fn recover_with(
        region: Region,
        fault: Fault,
    ) -> Result<(LogCells, Recovery), CellError> {
        let h = Header::open(&region, CellKind::Log)?;
        let n = h.size.bytes();
        let mut e = [0u8; ENTRY_MAX];
        region.read(LOG_SLOT_OFF, &mut e[..ENTRY_HEAD + n]);
        let seq = u64::from_le_bytes(e[0..8].try_into().expect("8 bytes"));
        let index = u32::from_le_bytes(e[8..12].try_into().expect("4 bytes")) as usize;
        let stored = u32::from_le_bytes(e[12..16].try_into().expect("4 bytes"));
        let value = &e[ENTRY_HEAD..ENTRY_HEAD + n];
        let valid = seq != 0
            && (fault == Fault::LogNoChecksum || stored == entry_crc(&e[..ENTRY_HEAD], value));
        let mut rec = Recovery::default();
        if valid {
            // A checksummed entry naming a cell that does not exist is not a
            // torn write: the array is corrupt.
            let off = h.cell_off(index).map_err(|_| CellError::CorruptLog {
                what: format!("entry {seq} names cell {index} of {}", h.count),
            })?;
            // Outside a crash the cell already holds the entry (live and
            // durable agree once an update has returned): skip the fence.
            let mut cur = [0u8; ValueSize::MAX];
            region.read(off, &mut cur[..n]);
            if cur[..n] != *value {
                region.write(off, value);
                region.persist(off, n);
                rec.cells_repaired = 1;
                rec.log_replayed = true;
            }
        }
        Ok((
            LogCells {
                region,
                h,
                seq: seq.wrapping_add(1).max(1),
                fault,
            },
            rec,
        ))
    }
}

impl CellArray for LogCells {
    fn format(region: Region, size: ValueSize, count: usize) -> Result<LogCells, CellError> {
        let h = Header::format(&region, CellKind::Log, size, count)?;
        Ok(LogCells {
            region,
            h,
            seq: 1,
            fault: Fault::None,
        })
    }

    fn recover(region: Region) -> Result<(LogCells, Recovery), CellError> {
        LogCells::recover_with(region, Fault::None)
    }

    fn kind(&self) -> CellKind {
        CellKind::Log
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
        self.region.read(off, out);
        Ok(())
    }

    #[inline]
    fn update(&mut self, index: usize, value: &[u8]) -> Result<(), CellError> {
        self.h.check_len(value.len())?;
        let off = self.h.cell_off(index)?;
        let n = value.len();
        let mut e = [0u8; ENTRY_MAX];
        e[0..8].copy_from_slice(&self.seq.to_le_bytes());
        e[8..12].copy_from_slice(&(index as u32).to_le_bytes());
        let crc = entry_crc(&e[..ENTRY_HEAD], value);
        e[12..16].copy_from_slice(&crc.to_le_bytes());
        e[ENTRY_HEAD..ENTRY_HEAD + n].copy_from_slice(value);
        self.seq = self.seq.wrapping_add(1).max(1);
        if self.fault == Fault::LogInPlaceFirst {
            self.region.write(off, value);
            self.region.persist(off, n);
            self.region.write(LOG_SLOT_OFF, &e[..ENTRY_HEAD + n]);
            self.region.persist(LOG_SLOT_OFF, ENTRY_HEAD + n);
            return Ok(());
        }
        self.region.write(LOG_SLOT_OFF, &e[..ENTRY_HEAD + n]);
        self.region.persist(LOG_SLOT_OFF, ENTRY_HEAD + n);
        self.region.write(off, value);
        self.region.persist(off, n);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_pmem::{Counters, Domain, Pool, PoolOptions};

    fn region() -> (Pool, Region) {
        let p = Pool::create_in_memory(&PoolOptions::new("cells", 1 << 16).domain(Domain::Adr))
            .unwrap();
        let r = p.data().sub(0, 4096).unwrap();
        (p, r)
    }

    #[test]
    fn update_logs_then_writes_in_place_with_two_fences() {
        let (_p, r) = region();
        let mut a = LogCells::format(r.clone(), ValueSize::B48, 8).unwrap();
        let before = Counters::snapshot();
        a.update(3, &[9u8; 48]).unwrap();
        let d = Counters::snapshot() - before;
        assert_eq!(d.fences, 2);
        assert_eq!(d.lines_flushed, 2, "entry of 64 bytes + one cell line");
        assert_eq!(
            r.read_vec(super::super::CELLS_OFF + 3 * 64, 48),
            vec![9u8; 48]
        );
        assert_eq!(r.load_u64(LOG_SLOT_OFF), 1);
        assert_eq!(r.read_u32(LOG_SLOT_OFF + 8), 3);
    }

    #[test]
    fn recovery_replays_a_valid_entry_and_ignores_a_torn_one() {
        let (_p, r) = region();
        let mut a = LogCells::format(r.clone(), ValueSize::B16, 8).unwrap();
        a.update(2, &[1u8; 16]).unwrap();
        // Simulate a crash after fence 1 of the next update: entry durable,
        // in-place write lost.
        let cell = super::super::CELLS_OFF + 2 * 16;
        a.update(2, &[2u8; 16]).unwrap();
        r.write(cell, &[1u8; 16]);
        let (b, rec) = LogCells::recover(r.clone()).unwrap();
        assert!(rec.log_replayed);
        let mut out = [0u8; 16];
        b.read(2, &mut out).unwrap();
        assert_eq!(out, [2u8; 16]);
        // The next entry continues the sequence.
        assert_eq!(b.seq, 3);
        // A torn entry (value half rewritten) is rejected by its checksum.
        r.write(LOG_SLOT_OFF + 16, &[7u8; 8]);
        r.write(cell, &[5u8; 16]);
        let (b, rec) = LogCells::recover(r.clone()).unwrap();
        assert!(!rec.log_replayed);
        b.read(2, &mut out).unwrap();
        assert_eq!(out, [5u8; 16]);
        // A valid entry naming a cell past the end is corruption.
        let mut e = [0u8; 32];
        e[0..8].copy_from_slice(&9u64.to_le_bytes());
        e[8..12].copy_from_slice(&99u32.to_le_bytes());
        let crc = entry_crc(&e[..16], &[0u8; 16]);
        e[12..16].copy_from_slice(&crc.to_le_bytes());
        r.write(LOG_SLOT_OFF, &e);
        assert!(matches!(
            LogCells::recover(r),
            Err(CellError::CorruptLog { .. })
        ));
    }
}
