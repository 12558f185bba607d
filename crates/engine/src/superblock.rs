//! The store's superblock: the first 64 bytes of the data area of every
//! engine pool, naming the engine and the allocator and placing the engine
//! area and the heap. Its byte table is in the crate documentation
//! ("Pool layout"); [`Superblock::decode`] checks it against the data area.

use crate::{AllocKind, EngineError, EngineKind, Result};
use ferrite_pmem::{ChecksumMismatch, PAGE, SuperblockView, SuperblockWriter};

const MAGIC: &[u8; 8] = b"FRTENGN1";
const VERSION: u16 = 1;
/// Bytes of the superblock page at the start of the data area.
pub const SUPERBLOCK_BYTES: usize = 4096;

/// The decoded superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// The engine formatted in the pool.
    pub engine: EngineKind,
    /// The allocator holding its blocks.
    pub allocator: AllocKind,
    /// Most sessions open at once (logs and allocator lanes were made for them).
    pub sessions: u16,
    /// Engine area length from the data start (superblock included).
    pub engine_area: u64,
    /// Heap offset from the data start.
    pub heap_off: u64,
    /// Heap length; 0 with an external allocator.
    pub heap_len: u64,
    /// Seeds record checksums, so that stale records of an earlier store
    /// never validate.
    pub nonce: u64,
}

impl Superblock {
    /// The 64 bytes of the format in the crate documentation (the
    /// `ferrite_pmem::superblock` frame: magic, version, CRC32C of bytes
    /// 0..60; bytes 48..60 zero).
    pub fn encode(&self) -> [u8; 64] {
        SuperblockWriter::new(MAGIC, VERSION)
            .u8(10, self.engine.code())
            .u8(11, self.allocator.code())
            .u32(12, u32::from(self.sessions))
            .u64(16, self.engine_area)
            .u64(24, self.heap_off)
            .u64(32, self.heap_len)
            .u64(40, self.nonce)
            .seal()
    }

    /// Decodes and validates against a data area of `data_len` bytes.
    pub fn decode(b: &[u8], data_len: u64) -> Result<Superblock> {
        // Checked in this order: not an engine store, a version this build
        // does not read, a damaged superblock, then its fields.
        let v = match SuperblockView::new(b) {
            Some(v) if v.has_magic(MAGIC) => v,
            _ => return Err(EngineError::NotAStore),
        };
        let version = v.version();
        if version != VERSION {
            return Err(EngineError::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
        if let Err(ChecksumMismatch { stored, computed }) = v.checksum() {
            return Err(EngineError::Checksum { stored, computed });
        }
        let corrupt = |what: &str| EngineError::Corrupt(format!("superblock: {what}"));
        let engine = EngineKind::from_code(v.u8(10)).ok_or_else(|| corrupt("unknown engine"))?;
        let allocator =
            AllocKind::from_code(v.u8(11)).ok_or_else(|| corrupt("unknown allocator"))?;
        let sb = Superblock {
            engine,
            allocator,
            sessions: u16::try_from(v.u32(12)).map_err(|_| corrupt("session count"))?,
            engine_area: v.u64(16),
            heap_off: v.u64(24),
            heap_len: v.u64(32),
            nonce: v.u64(40),
        };
        let page = PAGE as u64;
        // An external allocator's store (heap_len 0, heap_off 0) has no
        // heap area of its own to check; its engine area must still fit.
        if sb.sessions == 0
            || sb.engine_area < SUPERBLOCK_BYTES as u64
            || !sb.engine_area.is_multiple_of(page)
            || sb.engine_area > data_len
            || (sb.heap_len != 0 && sb.heap_off < sb.engine_area)
            || !sb.heap_off.is_multiple_of(page)
            || sb
                .heap_off
                .checked_add(sb.heap_len)
                .is_none_or(|e| e > data_len)
        {
            return Err(corrupt("areas out of bounds"));
        }
        Ok(sb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        Superblock {
            engine: EngineKind::Lsm,
            allocator: AllocKind::Lock,
            sessions: 8,
            engine_area: 0x2000,
            heap_off: 0x2000,
            heap_len: 0xffd000,
            nonce: 0xf7c8_2704_b836_8f8d,
        }
    }

    /// The superblock's bytes as the version that wrote them laid them out
    /// (hex of one fixed superblock, taken before the encoding moved to
    /// `ferrite_pmem::superblock`; it is the superblock of an LSM store on
    /// the lock heap that build created): pools written by older builds
    /// must keep opening, byte for byte.
    #[test]
    fn superblock_bytes_are_the_format_on_media() {
        let hex: String = sample()
            .encode()
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect();
        assert_eq!(
            hex,
            concat!(
                "465254454e474e3101000302080000000020000000000000002000000000000000",
                "d0ff00000000008d8f36b80427c8f7000000000000000000000000c942d950"
            )
        );
    }

    #[test]
    fn superblock_round_trips_and_refuses_damage_with_the_same_errors() {
        let sb = sample();
        let b = sb.encode();
        let len = 16 << 20;
        assert_eq!(Superblock::decode(&b, len).unwrap(), sb);
        for i in 0..64 {
            let mut d = b;
            d[i] ^= 0x10;
            let e = Superblock::decode(&d, len).unwrap_err();
            match i {
                0..8 => assert!(matches!(e, EngineError::NotAStore), "byte {i}: {e}"),
                8..10 => assert!(
                    matches!(e, EngineError::UnsupportedVersion { supported: 1, .. }),
                    "byte {i}: {e}"
                ),
                _ => assert!(matches!(e, EngineError::Checksum { .. }), "byte {i}: {e}"),
            }
        }
        assert!(matches!(
            Superblock::decode(&b[..63], len),
            Err(EngineError::NotAStore)
        ));
        // Areas past the data area: refused as corrupt, after the checksum.
        assert!(matches!(
            Superblock::decode(&b, 0x1000),
            Err(EngineError::Corrupt(_))
        ));
    }
}
