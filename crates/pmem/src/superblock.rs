//! The 64-byte superblock every Ferrite format opens with: one codec for
//! its fixed frame, the fields in between left to each format.
//!
//! # Frame (little-endian)
//!
//! | bytes  | content                                                   |
//! |--------|-----------------------------------------------------------|
//! | 0..8   | magic, eight ASCII bytes naming the format (`FERPTM01`, …) |
//! | 8..10  | format version, u16                                       |
//! | 10..60 | the format's own fields (its `format.rs` has the table); bytes no field uses are zero |
//! | 60..64 | CRC32C of bytes 0..60, u32                                |
//!
//! One cache line, written whole and persisted before anything points at
//! it, so a torn superblock shows as a checksum mismatch. Formats whose
//! 64-byte header also holds words that transactions update in place (the
//! data structures' root and count) leave those words out of the checksum
//! with [`SuperblockWriter::seal_masked`] / [`SuperblockView::checksum_masked`]:
//! the checksum then covers what identifies and shapes the structure, and
//! the transaction log covers the rest.
//!
//! What a format checks, and in which order, is its own (an unknown
//! version before or after the checksum, which error each failure maps
//! to): the view only answers the questions.

use std::ops::Range;

/// Bytes of a superblock.
pub const SUPERBLOCK_LEN: usize = 64;
/// Offset of the checksum; it covers every byte before it.
pub const CRC_AT: usize = 60;
/// Bytes of the magic.
pub const MAGIC_LEN: usize = 8;

/// A superblock being encoded: the frame filled in, fields set by offset.
#[derive(Clone, Debug)]
pub struct SuperblockWriter {
    b: [u8; SUPERBLOCK_LEN],
}

/// A checksum that does not match the bytes it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChecksumMismatch {
    /// The checksum stored in the structure.
    pub stored: u32,
    /// The checksum of the bytes as read.
    pub computed: u32,
}

impl SuperblockWriter {
    /// A superblock of format `magic`, `version`, every field zero.
    pub fn new(magic: &[u8; MAGIC_LEN], version: u16) -> SuperblockWriter {
        let mut b = [0u8; SUPERBLOCK_LEN];
        b[..MAGIC_LEN].copy_from_slice(magic);
        b[8..10].copy_from_slice(&version.to_le_bytes());
        SuperblockWriter { b }
    }

    /// Writes `v` at `at`.
    ///
    /// # Panics
    /// If the field overlaps the frame (bytes 0..10 or 60..64): a
    /// format's layout bug, never a property of the input.
    pub fn bytes(&mut self, at: usize, v: &[u8]) -> &mut SuperblockWriter {
        assert!(
            at >= 10 && at + v.len() <= CRC_AT,
            "superblock field {at}..{} overlaps the frame",
            at + v.len()
        );
        self.b[at..at + v.len()].copy_from_slice(v);
        self
    }

    /// Writes `v` as a u8 at byte `at` ([`bytes`](Self::bytes)'s panics).
    pub fn u8(&mut self, at: usize, v: u8) -> &mut SuperblockWriter {
        self.bytes(at, &[v])
    }

    /// Writes `v` as a little-endian u16 at byte `at` ([`bytes`](Self::bytes)'s panics).
    pub fn u16(&mut self, at: usize, v: u16) -> &mut SuperblockWriter {
        self.bytes(at, &v.to_le_bytes())
    }

    /// Writes `v` as a little-endian u32 at byte `at` ([`bytes`](Self::bytes)'s panics).
    pub fn u32(&mut self, at: usize, v: u32) -> &mut SuperblockWriter {
        self.bytes(at, &v.to_le_bytes())
    }

    /// Writes `v` as a little-endian u64 at byte `at` ([`bytes`](Self::bytes)'s panics).
    pub fn u64(&mut self, at: usize, v: u64) -> &mut SuperblockWriter {
        self.bytes(at, &v.to_le_bytes())
    }

    /// The encoded superblock, its checksum over bytes 0..60.
    pub fn seal(&self) -> [u8; SUPERBLOCK_LEN] {
        self.seal_masked(&[])
    }

    /// The encoded superblock, its checksum over bytes 0..60 with the
    /// ranges of `mutable` read as zero (words updated in place after
    /// creation; see the module documentation).
    pub fn seal_masked(&self, mutable: &[Range<usize>]) -> [u8; SUPERBLOCK_LEN] {
        let mut b = self.b;
        let crc = masked_crc(&b, mutable);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }
}

fn masked_crc(b: &[u8; SUPERBLOCK_LEN], mutable: &[Range<usize>]) -> u32 {
    if mutable.is_empty() {
        return crc32c::crc32c(&b[..CRC_AT]);
    }
    let mut m = *b;
    for r in mutable {
        m[r.start.min(CRC_AT)..r.end.min(CRC_AT)].fill(0);
    }
    crc32c::crc32c(&m[..CRC_AT])
}

/// A superblock read from the medium: the frame's checks and field access
/// by offset. Reading never panics on any content.
#[derive(Clone, Copy, Debug)]
pub struct SuperblockView<'a> {
    b: &'a [u8; SUPERBLOCK_LEN],
}

impl<'a> SuperblockView<'a> {
    /// The first 64 bytes of `b`, or `None` when it is shorter.
    pub fn new(b: &'a [u8]) -> Option<SuperblockView<'a>> {
        Some(SuperblockView {
            b: b.get(..SUPERBLOCK_LEN)?.try_into().ok()?,
        })
    }

    /// A view of exactly one superblock.
    pub fn of(b: &'a [u8; SUPERBLOCK_LEN]) -> SuperblockView<'a> {
        SuperblockView { b }
    }

    /// Whether bytes 0..8 are `magic`.
    pub fn has_magic(&self, magic: &[u8; MAGIC_LEN]) -> bool {
        self.b[..MAGIC_LEN] == magic[..]
    }

    /// The format version (bytes 8..10).
    pub fn version(&self) -> u16 {
        self.u16(8)
    }

    /// The checksum at 60..64 against bytes 0..60.
    pub fn checksum(&self) -> Result<(), ChecksumMismatch> {
        self.checksum_masked(&[])
    }

    /// The checksum with the `mutable` ranges read as zero
    /// ([`SuperblockWriter::seal_masked`]).
    pub fn checksum_masked(&self, mutable: &[Range<usize>]) -> Result<(), ChecksumMismatch> {
        let (stored, computed) = (self.u32(CRC_AT), masked_crc(self.b, mutable));
        if stored == computed {
            Ok(())
        } else {
            Err(ChecksumMismatch { stored, computed })
        }
    }

    /// The stored checksum (bytes 60..64).
    pub fn stored_checksum(&self) -> u32 {
        self.u32(CRC_AT)
    }

    /// Whether every byte of `r` is zero (reserved bytes).
    pub fn is_zero(&self, r: Range<usize>) -> bool {
        self.b[r].iter().all(|&x| x == 0)
    }

    /// The u8 at byte `at`. Panics past byte 64 (a layout bug).
    pub fn u8(&self, at: usize) -> u8 {
        self.b[at]
    }

    /// The little-endian u16 at byte `at`. Panics past byte 64 (a layout bug).
    pub fn u16(&self, at: usize) -> u16 {
        u16::from_le_bytes([self.b[at], self.b[at + 1]])
    }

    /// The little-endian u32 at byte `at`. Panics past byte 64 (a layout bug).
    pub fn u32(&self, at: usize) -> u32 {
        let mut w = [0u8; 4];
        w.copy_from_slice(&self.b[at..at + 4]);
        u32::from_le_bytes(w)
    }

    /// The little-endian u64 at byte `at`. Panics past byte 64 (a layout bug).
    pub fn u64(&self, at: usize) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.b[at..at + 8]);
        u64::from_le_bytes(w)
    }

    /// The whole superblock.
    pub fn bytes(&self) -> &'a [u8; SUPERBLOCK_LEN] {
        self.b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frame_is_magic_version_fields_and_a_crc_of_the_first_60_bytes() {
        let b = SuperblockWriter::new(b"FERTEST1", 3)
            .u8(10, 0xaa)
            .u16(12, 0x0102)
            .u32(16, 0x0304_0506)
            .u64(24, 0x0708_090a_0b0c_0d0e)
            .seal();
        let mut want = [0u8; 64];
        want[..8].copy_from_slice(b"FERTEST1");
        want[8] = 3;
        want[10] = 0xaa;
        want[12..14].copy_from_slice(&[2, 1]);
        want[16..20].copy_from_slice(&[6, 5, 4, 3]);
        want[24..32].copy_from_slice(&[0xe, 0xd, 0xc, 0xb, 0xa, 9, 8, 7]);
        let crc = crc32c::crc32c(&want[..60]);
        want[60..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(b, want);

        let v = SuperblockView::of(&b);
        assert!(v.has_magic(b"FERTEST1") && !v.has_magic(b"FERTEST2"));
        assert_eq!(v.version(), 3);
        assert_eq!(
            (v.u8(10), v.u16(12), v.u32(16)),
            (0xaa, 0x0102, 0x0304_0506)
        );
        assert_eq!(v.u64(24), 0x0708_090a_0b0c_0d0e);
        assert!(v.is_zero(32..60) && !v.is_zero(10..11));
        assert_eq!(v.checksum(), Ok(()));
        assert_eq!(v.stored_checksum(), crc);
    }

    #[test]
    fn any_flipped_bit_fails_the_checksum() {
        let b = SuperblockWriter::new(b"FERTEST1", 1).u64(40, 99).seal();
        for bit in 0..64 * 8 {
            let mut bad = b;
            bad[bit / 8] ^= 1 << (bit % 8);
            let r = SuperblockView::of(&bad).checksum();
            assert!(r.is_err(), "bit {bit}");
        }
    }

    #[test]
    fn masked_words_change_without_breaking_the_checksum_and_the_rest_is_covered() {
        let mutable = [16..24, 24..32];
        let b = SuperblockWriter::new(b"FERTEST1", 2)
            .u64(16, 5)
            .u64(40, 7)
            .seal_masked(&mutable);
        let mut moved = b;
        moved[16..24].copy_from_slice(&1234u64.to_le_bytes());
        moved[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(SuperblockView::of(&moved).checksum_masked(&mutable), Ok(()));
        assert!(SuperblockView::of(&moved).checksum().is_err(), "unmasked");
        let mut bad = b;
        bad[40] ^= 1;
        assert!(SuperblockView::of(&bad).checksum_masked(&mutable).is_err());
    }

    #[test]
    #[should_panic(expected = "overlaps the frame")]
    fn a_field_over_the_checksum_is_a_layout_bug() {
        SuperblockWriter::new(b"FERTEST1", 1).u64(56, 1);
    }

    #[test]
    fn short_input_has_no_view() {
        assert!(SuperblockView::new(&[0u8; 63]).is_none());
        assert!(SuperblockView::new(&[0u8; 100]).is_some());
    }
}
