//! The log's own metadata on media: the superblock and the two head slots.
//!
//! The byte-by-byte layout is documented on [`crate::log`]; this module
//! encodes and decodes it. Every field is little-endian.

use super::{Algorithm, Layout, LogError, Variant};
use ferrite_pmem::{CACHE_LINE, ChecksumMismatch, SuperblockView, SuperblockWriter};

/// `FERRLOG` and a NUL: identifies a log superblock.
pub(crate) const MAGIC: [u8; 8] = *b"FERRLOG\0";
/// On-media format version this build writes and reads.
pub(crate) const VERSION: u16 = 1;
/// Superblock at region offset 0, head slots A and B on the next two lines,
/// then the size slots of the Header algorithm, then the data area.
pub(crate) const SUPER_OFF: usize = 0;
pub(crate) const SLOT_A_OFF: usize = CACHE_LINE;
pub(crate) const SLOT_B_OFF: usize = 2 * CACHE_LINE;
pub(crate) const SIZE_SLOTS_OFF: usize = 3 * CACHE_LINE;
/// Bytes of a head slot that are written (the rest of its line stays zero).
pub(crate) const SLOT_LEN: usize = 32;
/// Smallest data area accepted: four lines.
pub(crate) const MIN_CAPACITY: u64 = 4 * CACHE_LINE as u64;

/// Where the parts of a log live in its region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// Number of size slots (Header algorithm; 0 otherwise).
    pub slots: u32,
    /// Offset of the data area from the region start (multiple of 64).
    pub data_off: usize,
    /// Bytes in the data area (multiple of 64).
    pub cap: u64,
}

impl Geometry {
    /// Bytes of metadata before the data area for `slots` size slots.
    pub fn meta_len(slots: u32) -> usize {
        SIZE_SLOTS_OFF + slots as usize * CACHE_LINE
    }
}

/// The decoded superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Superblock {
    pub variant: Variant,
    pub geo: Geometry,
    pub nonce: u64,
}

fn alg_code(a: Algorithm) -> u8 {
    match a {
        Algorithm::Classic => 1,
        Algorithm::Header => 2,
        Algorithm::Rawl => 3,
        Algorithm::PopLog => 4,
    }
}

fn layout_code(l: Layout) -> u8 {
    match l {
        Layout::Packed => 0,
        Layout::Padded => 1,
        Layout::Dancing => 2,
        Layout::Staged => 3,
    }
}

impl Superblock {
    /// The 64-byte superblock line.
    pub fn encode(&self) -> [u8; CACHE_LINE] {
        SuperblockWriter::new(&MAGIC, VERSION)
            .u8(10, alg_code(self.variant.algorithm))
            .u8(11, layout_code(self.variant.layout))
            .u32(12, self.geo.slots)
            .u64(16, self.geo.data_off as u64)
            .u64(24, self.geo.cap)
            .u64(32, self.nonce)
            .seal()
    }

    /// Validates and decodes a superblock line read from a region of
    /// `region_len` bytes.
    pub fn decode(b: &[u8; CACHE_LINE], region_len: usize) -> Result<Superblock, LogError> {
        let view = SuperblockView::of(b);
        if !view.has_magic(&MAGIC) {
            return Err(LogError::NotALog);
        }
        let version = view.version();
        if version != VERSION {
            return Err(LogError::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
        if let Err(ChecksumMismatch { stored, computed }) = view.checksum() {
            return Err(LogError::Checksum {
                what: "superblock",
                stored,
                computed,
            });
        }
        let algorithm = match b[10] {
            1 => Algorithm::Classic,
            2 => Algorithm::Header,
            3 => Algorithm::Rawl,
            4 => Algorithm::PopLog,
            x => return Err(LogError::Corrupt(format!("unknown algorithm code {x}"))),
        };
        let layout = match b[11] {
            0 => Layout::Packed,
            1 => Layout::Padded,
            2 => Layout::Dancing,
            3 => Layout::Staged,
            x => return Err(LogError::Corrupt(format!("unknown layout code {x}"))),
        };
        let variant = Variant::new(algorithm, layout)?;
        let u64_at = |o| view.u64(o);
        let slots = view.u32(12);
        let data_off = u64_at(16);
        let cap = u64_at(24);
        let nonce = u64_at(32);
        let want_slots_ok = match (algorithm, layout) {
            (Algorithm::Header, Layout::Dancing) => slots >= 2,
            (Algorithm::Header, _) => slots == 1,
            _ => slots == 0,
        };
        if !want_slots_ok {
            return Err(LogError::Corrupt(format!(
                "{} log with {slots} size slots",
                variant.name()
            )));
        }
        let meta = Geometry::meta_len(slots) as u64;
        let fits = data_off
            .checked_add(cap)
            .is_some_and(|end| end <= region_len as u64);
        if data_off != meta || !cap.is_multiple_of(CACHE_LINE as u64) || cap < MIN_CAPACITY || !fits
        {
            return Err(LogError::Corrupt(format!(
                "bad geometry: data at {data_off} (expected {meta}), capacity {cap}, region {region_len} bytes"
            )));
        }
        Ok(Superblock {
            variant,
            geo: Geometry {
                slots,
                data_off: data_off as usize,
                cap,
            },
            nonce,
        })
    }
}

/// One head slot: where the oldest retained record starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HeadSlot {
    /// Write sequence; the valid slot with the larger one wins. 0 = never written.
    pub seq: u64,
    /// Logical byte position of the first retained record.
    pub pos: u64,
    /// LSN of the first retained record (the next LSN when the log is empty).
    pub lsn: u64,
}

impl HeadSlot {
    fn crc(bytes: &[u8], nonce: u64) -> u32 {
        // The nonce binds the slot to this log instance: a slot left over
        // from an earlier log formatted in the same region does not validate.
        crc32c::crc32c_append(crc32c::crc32c(&nonce.to_le_bytes()), bytes)
    }

    pub fn encode(&self, nonce: u64) -> [u8; SLOT_LEN] {
        let mut b = [0u8; SLOT_LEN];
        b[0..8].copy_from_slice(&self.seq.to_le_bytes());
        b[8..16].copy_from_slice(&self.pos.to_le_bytes());
        b[16..24].copy_from_slice(&self.lsn.to_le_bytes());
        let crc = Self::crc(&b[..24], nonce);
        b[24..28].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// `None` when the slot was never written or is torn.
    pub fn decode(b: &[u8; SLOT_LEN], nonce: u64) -> Option<HeadSlot> {
        let stored = u32::from_le_bytes(b[24..28].try_into().expect("4 bytes"));
        if stored != Self::crc(&b[..24], nonce) {
            return None;
        }
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let s = HeadSlot {
            seq: u64_at(0),
            pos: u64_at(8),
            lsn: u64_at(16),
        };
        (s.seq != 0 && s.lsn != 0).then_some(s)
    }

    /// Region offset of the slot a head with sequence `seq` is written to:
    /// odd sequences go to A, even to B, so a torn write never damages the
    /// previous head.
    pub fn offset_for(seq: u64) -> usize {
        if seq % 2 == 1 { SLOT_A_OFF } else { SLOT_B_OFF }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The superblock's bytes, as the version that wrote them laid them out
    /// (hex of one fixed superblock, taken before the encoding moved to
    /// `ferrite_pmem::superblock`): pools written by older builds must keep
    /// opening, byte for byte.
    #[test]
    fn superblock_bytes_are_the_format_on_media() {
        let hex: String = sb().encode().iter().map(|x| format!("{x:02x}")).collect();
        assert_eq!(
            hex,
            concat!(
                "464552524c4f47000100020240000000c0100000000000000010000000000000",
                "f0debc9a785634120000000000000000000000000000000000000000d7295b21"
            )
        );
    }

    fn sb() -> Superblock {
        Superblock {
            variant: Variant::new(Algorithm::Header, Layout::Dancing).unwrap(),
            geo: Geometry {
                slots: 64,
                data_off: Geometry::meta_len(64),
                cap: 4096,
            },
            nonce: 0x1234_5678_9abc_def0,
        }
    }

    #[test]
    fn superblock_round_trips_and_rejects_damage() {
        let s = sb();
        let len = s.geo.data_off + 4096;
        let b = s.encode();
        assert_eq!(Superblock::decode(&b, len).unwrap(), s);
        let mut bad = b;
        bad[33] ^= 1;
        assert!(matches!(
            Superblock::decode(&bad, len),
            Err(LogError::Checksum { .. })
        ));
        let mut bad = b;
        bad[0] = b'X';
        assert!(matches!(
            Superblock::decode(&bad, len),
            Err(LogError::NotALog)
        ));
        assert!(matches!(
            Superblock::decode(&b, len - 64),
            Err(LogError::Corrupt(_))
        ));
    }

    #[test]
    fn head_slot_round_trips_and_detects_tearing() {
        let h = HeadSlot {
            seq: 7,
            pos: 4096 + 24,
            lsn: 99,
        };
        let b = h.encode(5);
        assert_eq!(HeadSlot::decode(&b, 5), Some(h));
        assert_eq!(HeadSlot::decode(&b, 6), None, "other log's nonce");
        // A torn write: new seq word, old position word.
        let old = HeadSlot {
            seq: 5,
            pos: 0,
            lsn: 1,
        }
        .encode(5);
        let mut torn = b;
        torn[8..16].copy_from_slice(&old[8..16]);
        assert_eq!(HeadSlot::decode(&torn, 5), None);
        assert_eq!(HeadSlot::decode(&[0u8; SLOT_LEN], 0), None);
    }
}
