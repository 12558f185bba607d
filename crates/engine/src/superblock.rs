//! The store's superblock: the first 64 bytes of the data area of every
//! engine pool, naming the engine and the allocator and placing the engine
//! area and the heap. Its byte table is in the crate documentation
//! ("Pool layout"); [`Superblock::decode`] checks it against the data area.

use crate::{AllocKind, EngineError, EngineKind, Result};
use ferrite_pmem::PAGE;

const MAGIC: &[u8; 8] = b"FRTENGN1";
const VERSION: u16 = 1;
/// Bytes of the superblock page at the start of the data area.
pub const SUPERBLOCK_BYTES: usize = 4096;
const SB_CRC_AT: usize = 60;

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
    /// The 64 bytes of the format in the crate documentation.
    pub fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..8].copy_from_slice(MAGIC);
        b[8..10].copy_from_slice(&VERSION.to_le_bytes());
        b[10] = self.engine.code();
        b[11] = self.allocator.code();
        b[12..16].copy_from_slice(&u32::from(self.sessions).to_le_bytes());
        b[16..24].copy_from_slice(&self.engine_area.to_le_bytes());
        b[24..32].copy_from_slice(&self.heap_off.to_le_bytes());
        b[32..40].copy_from_slice(&self.heap_len.to_le_bytes());
        b[40..48].copy_from_slice(&self.nonce.to_le_bytes());
        let crc = crc32c::crc32c(&b[..SB_CRC_AT]);
        b[SB_CRC_AT..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and validates against a data area of `data_len` bytes.
    pub fn decode(b: &[u8], data_len: u64) -> Result<Superblock> {
        if b.len() < 64 || &b[0..8] != MAGIC {
            return Err(EngineError::NotAStore);
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let version = u16::from_le_bytes([b[8], b[9]]);
        if version != VERSION {
            return Err(EngineError::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
        let stored = u32::from_le_bytes(b[SB_CRC_AT..64].try_into().expect("4 bytes"));
        let computed = crc32c::crc32c(&b[..SB_CRC_AT]);
        if stored != computed {
            return Err(EngineError::Checksum { stored, computed });
        }
        let corrupt = |what: &str| EngineError::Corrupt(format!("superblock: {what}"));
        let engine = EngineKind::from_code(b[10]).ok_or_else(|| corrupt("unknown engine"))?;
        let allocator = AllocKind::from_code(b[11]).ok_or_else(|| corrupt("unknown allocator"))?;
        let sessions = u32::from_le_bytes(b[12..16].try_into().expect("4 bytes"));
        let sb = Superblock {
            engine,
            allocator,
            sessions: u16::try_from(sessions).map_err(|_| corrupt("session count"))?,
            engine_area: u64_at(16),
            heap_off: u64_at(24),
            heap_len: u64_at(32),
            nonce: u64_at(40),
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
