//! On-media format of a PTM pool: superblock, root line, log slots, log
//! entries. Everything is little-endian; *pool offsets* count from the
//! first byte of the pool file (its 4 KiB header included), as
//! [`ferrite_pmem::POff`] does.
//!
//! # Placement (version 1)
//!
//! | pool offset                 | bytes                  | content                                   |
//! |-----------------------------|------------------------|-------------------------------------------|
//! | 4096 (start of data area)   | 64                     | superblock                                |
//! | 4160                        | 64                     | root line: word 0 is the PTM's root word ([`crate::Ptm::root`]), a transactional word like any other; the rest is zero |
//! | `slots_off` = 4224          | `slots · (64 + log_bytes)` | log slots, one per attachable thread  |
//! | `heap_off` (4 KiB aligned)  | `heap_len`             | a Ferrite heap ([`ferrite_alloc::heap`] documents it) |
//!
//! The pool header's root offset ([`ferrite_pmem::Pool::root`]) points at
//! the superblock and is set last when the pool is created, so a pool
//! whose creation crashed is refused ([`crate::PtmError::NotAPtm`]).
//!
//! # Superblock
//!
//! | bytes  | field                                                              |
//! |--------|--------------------------------------------------------------------|
//! | 0..8   | magic `FERPTM01`                                                   |
//! | 8..10  | format version, u16 = 1                                            |
//! | 10..12 | algorithm the pool was created with, u16: 1 orec-eager, 2 orec-lazy (informational: any open may choose either, recovery finishes every log first) |
//! | 12..14 | slots, u16 (1..=256)                                               |
//! | 14..16 | reserved, zero                                                     |
//! | 16..20 | log_bytes, u32: bytes of each slot's log area (multiple of 64, ≥ 1024) |
//! | 20..24 | flags, u32 = 0 (unknown bits are refused)                          |
//! | 24..32 | slots_off, u64                                                     |
//! | 32..40 | heap_off, u64 (multiple of 4096)                                   |
//! | 40..48 | heap_len, u64                                                      |
//! | 48..56 | nonce, u64, random per pool (keys every log checksum)              |
//! | 56..60 | reserved, zero                                                     |
//! | 60..64 | crc32c of bytes 0..60                                              |
//!
//! # Log slot
//!
//! `64 + log_bytes` bytes. A slot belongs to one attached thread at a time.
//!
//! | slot offset | bytes     | content                                              |
//! |-------------|-----------|------------------------------------------------------|
//! | 0           | 8         | **status word**: `epoch << 2 | state`, state 0 IDLE, 1 NEEDS_UNDO, 2 NEEDS_REDO. `epoch` numbers the slot's writing transactions (every attempt that logs takes a new one), so one 8-byte store — failure-atomic on x86 — names both what recovery must do and which entries belong to it |
//! | 8           | 4         | redo: entries in the log, u32                        |
//! | 12          | 4         | redo: crc32c of (nonce, slot, status word, entries, the entries' bytes) |
//! | 16          | 48        | reserved, zero                                       |
//! | 64          | log_bytes | entries                                              |
//!
//! ## Undo entries (orec-eager): 32 bytes, two per cache line
//!
//! | bytes  | field                                                          |
//! |--------|----------------------------------------------------------------|
//! | 0..8   | target: a data word's pool offset (top byte 0), or an allocator [`MetaOp`]'s first encoded word (its kind in the top byte) |
//! | 8..16  | the word's old value, or the operation's operand                 |
//! | 16..24 | `epoch` of the transaction that wrote the entry                   |
//! | 24..32 | check: crc32c of (nonce, slot, bytes 0..24), zero-extended      |
//!
//! An undo entry is appended — and, under `adr`, made durable with a fence
//! — before the in-place store it covers. Entries are valid while their
//! `epoch` equals the status word's and their check matches; recovery takes
//! the valid prefix of the area, so a torn last entry (whose store never
//! happened) is ignored, and entries of older transactions are stale by
//! `epoch` without ever being cleared. Operation entries hold the *inverse*
//! of an allocator operation applied at commit.
//!
//! ## Redo entries (orec-lazy): 16 bytes
//!
//! `(target, value)` as above: a data word and its new value, or an
//! allocator [`MetaOp`] to apply, or a *captured range*: first word
//! `off | 0x80 << 56`, second word `len` — a block allocated by the
//! transaction and filled in place, whose bytes the checksum covers. The
//! header's count and checksum make the whole log one unit: recovery
//! replays it only when the status word says NEEDS_REDO and the checksum —
//! over that very status word, the entries, and the current bytes of every
//! captured range — matches. So a log whose commit did not become durable
//! whole is never replayed, and neither is one whose new blocks' content
//! did not survive (the content and the log are made durable by the same
//! fence; without the checksum a crash at that fence could keep the log and
//! lose a block the replay then links).
//!
//! # Crash states and what recovery does
//!
//! - IDLE: nothing (the area may hold garbage — under PDRAM-Lite it is
//!   lost at power failure).
//! - NEEDS_UNDO(g): restore every valid entry of `g`, newest first (data
//!   words get their old values, operation entries are applied), flush,
//!   fence, store IDLE(g), persist. Idempotent: a crash in it repeats it.
//! - NEEDS_REDO(g) with a valid checksum: apply every entry in order,
//!   flush, fence, store IDLE(g), persist. Idempotent.
//! - NEEDS_REDO(g) with a bad checksum: the commit was not durable and no
//!   write-back had begun (it starts after the commit's fence): store
//!   IDLE(g).

use crate::error::{PtmError, Result};
use ferrite_alloc::MetaOp;
use ferrite_alloc::ops::OP_BYTES;
use ferrite_pmem::{SuperblockView, SuperblockWriter};

/// The superblock's magic.
pub const MAGIC: &[u8; 8] = b"FERPTM01";
/// The superblock format version this build writes and reads.
pub const VERSION: u16 = 1;
/// Bytes of the superblock.
pub const SB_BYTES: usize = 64;
/// Pool offset of the superblock (start of the data area).
pub const SB_OFF: u64 = ferrite_pmem::HEADER_SIZE as u64;
/// Pool offset of the root word.
pub const ROOT_OFF: u64 = SB_OFF + 64;
/// Pool offset of slot 0.
pub const SLOTS_OFF: u64 = SB_OFF + 128;
/// Bytes of a slot's header line (status, then the log).
pub const SLOT_HDR: u64 = 64;
/// Bytes of an undo log entry.
pub const UNDO_ENTRY: usize = 32;
/// Bytes of a redo log entry ([`Target::encode`]).
pub const REDO_ENTRY: usize = 16;
/// Most log slots (attached threads).
pub const MAX_SLOTS: u16 = 256;
/// Smallest log area of a slot, in bytes.
pub const MIN_LOG: u32 = 1024;

/// Slot state: no transaction to recover.
pub const IDLE: u64 = 0;
/// Slot state: an eager transaction in flight: recovery rolls its undo log back.
pub const NEEDS_UNDO: u64 = 1;
/// Slot state: a lazy transaction committed: recovery replays its redo log.
pub const NEEDS_REDO: u64 = 2;

/// `epoch << 2 | state`.
pub fn status(epoch: u64, state: u64) -> u64 {
    (epoch << 2) | state
}
/// The epoch of a status word ([`status`]).
pub fn status_epoch(w: u64) -> u64 {
    w >> 2
}
/// The state of a status word ([`IDLE`], [`NEEDS_UNDO`], [`NEEDS_REDO`]).
pub fn status_state(w: u64) -> u64 {
    w & 3
}

/// The decoded superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// [`crate::Algorithm`] as stored: 0 eager, 1 lazy.
    pub algorithm: u16,
    /// Log slots.
    pub slots: u16,
    /// Bytes of each slot's log area.
    pub log_bytes: u32,
    /// Pool offset of slot 0.
    pub slots_off: u64,
    /// Pool offset of the heap.
    pub heap_off: u64,
    /// Bytes of the heap.
    pub heap_len: u64,
    /// Random per pool: keys the logs' checksums.
    pub nonce: u64,
}

impl Superblock {
    /// The superblock's 64 bytes, checksum sealed.
    pub fn encode(&self) -> [u8; SB_BYTES] {
        SuperblockWriter::new(MAGIC, VERSION)
            .u16(10, self.algorithm)
            .u16(12, self.slots)
            .u32(16, self.log_bytes)
            .u64(24, self.slots_off)
            .u64(32, self.heap_off)
            .u64(40, self.heap_len)
            .u64(48, self.nonce)
            .seal()
    }

    /// Decodes and validates against a pool of `pool_len` bytes.
    pub fn decode(b: &[u8; SB_BYTES], pool_len: u64) -> Result<Superblock> {
        let sb = SuperblockView::of(b);
        if !sb.has_magic(MAGIC) {
            return Err(PtmError::NotAPtm("no PTM superblock".into()));
        }
        if sb.checksum().is_err() {
            return Err(PtmError::Corrupt("superblock checksum mismatch".into()));
        }
        let (u16_at, u32_at, u64_at) = (|i| sb.u16(i), |i| sb.u32(i), |i| sb.u64(i));
        let v = sb.version();
        if v != VERSION {
            return Err(PtmError::Version(v));
        }
        if u32_at(20) != 0 {
            return Err(PtmError::Corrupt(format!(
                "unknown flags {:#x}",
                u32_at(20)
            )));
        }
        let sb = Superblock {
            algorithm: u16_at(10),
            slots: u16_at(12),
            log_bytes: u32_at(16),
            slots_off: u64_at(24),
            heap_off: u64_at(32),
            heap_len: u64_at(40),
            nonce: u64_at(48),
        };
        let bad = |what: &str| Err(PtmError::Corrupt(format!("superblock: {what}")));
        if !(1..=2).contains(&sb.algorithm) {
            return bad("unknown algorithm");
        }
        if sb.slots == 0 || sb.slots > MAX_SLOTS {
            return bad("slot count out of range");
        }
        if sb.log_bytes < MIN_LOG || !sb.log_bytes.is_multiple_of(64) {
            return bad("log size out of range");
        }
        if sb.slots_off != SLOTS_OFF {
            return bad("slots misplaced");
        }
        let slots_end = sb
            .slots_off
            .checked_add(u64::from(sb.slots) * (SLOT_HDR + u64::from(sb.log_bytes)));
        match slots_end {
            Some(e) if e <= sb.heap_off => {}
            _ => return bad("slots overlap the heap"),
        }
        if !sb.heap_off.is_multiple_of(4096)
            || sb.heap_off.checked_add(sb.heap_len) != Some(pool_len)
        {
            return bad("heap does not end the pool");
        }
        Ok(sb)
    }

    /// Pool offset of slot `slot`'s header line.
    pub fn slot_off(&self, slot: usize) -> u64 {
        self.slots_off + slot as u64 * (SLOT_HDR + u64::from(self.log_bytes))
    }
}

/// Data-word entries have a zero top byte; operation entries carry the
/// [`MetaOp`]'s kind there.
const TOP: u64 = 0xff << 56;

/// What a log entry asks recovery to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Store `value` at data word `off`.
    Word {
        /// Pool offset of the word.
        off: u64,
        /// The value to store.
        value: u64,
    },
    /// Apply an allocator operation.
    Op(MetaOp),
    /// Bytes `off..off+len` filled by the transaction (redo logs only:
    /// checksummed, nothing to apply).
    Range {
        /// Pool offset of the range.
        off: u64,
        /// Bytes of the range.
        len: u64,
    },
}

const RANGE_TAG: u64 = 0x80 << 56;

impl Target {
    /// The entry's 16 bytes (the format above).
    pub fn encode(&self) -> [u8; 16] {
        match self {
            Target::Word { off, value } => {
                let mut b = [0u8; 16];
                b[..8].copy_from_slice(&off.to_le_bytes());
                b[8..].copy_from_slice(&value.to_le_bytes());
                b
            }
            Target::Range { off, len } => {
                let mut b = [0u8; 16];
                b[..8].copy_from_slice(&(off | RANGE_TAG).to_le_bytes());
                b[8..].copy_from_slice(&len.to_le_bytes());
                b
            }
            Target::Op(op) => {
                let e = op.encode();
                let mut b = [0u8; 16];
                b.copy_from_slice(&e[..OP_BYTES]);
                b
            }
        }
    }

    /// The entry in `b` (16 bytes), or `None` when it is none of the three.
    pub fn decode(b: &[u8]) -> Option<Target> {
        let first = u64::from_le_bytes(b[..8].try_into().ok()?);
        if first & TOP == 0 {
            if !first.is_multiple_of(8) {
                return None;
            }
            Some(Target::Word {
                off: first,
                value: u64::from_le_bytes(b[8..16].try_into().ok()?),
            })
        } else if first & TOP == RANGE_TAG {
            Some(Target::Range {
                off: first & !TOP,
                len: u64::from_le_bytes(b[8..16].try_into().ok()?),
            })
        } else {
            MetaOp::decode(&b[..OP_BYTES]).map(Target::Op)
        }
    }
}

fn keyed(nonce: u64, slot: usize, bytes: &[u8]) -> u32 {
    let c = crc32c::crc32c(&nonce.to_le_bytes());
    let c = crc32c::crc32c_append(c, &(slot as u64).to_le_bytes());
    crc32c::crc32c_append(c, bytes)
}

/// An undo entry's 32 bytes.
pub fn undo_entry(nonce: u64, slot: usize, t: &Target, epoch: u64) -> [u8; UNDO_ENTRY] {
    let mut b = [0u8; UNDO_ENTRY];
    b[..16].copy_from_slice(&t.encode());
    b[16..24].copy_from_slice(&epoch.to_le_bytes());
    let c = keyed(nonce, slot, &b[..24]);
    b[24..32].copy_from_slice(&u64::from(c).to_le_bytes());
    b
}

/// Decodes an undo entry if it is valid for `epoch`.
pub fn undo_decode(nonce: u64, slot: usize, b: &[u8], epoch: u64) -> Option<Target> {
    if u64::from_le_bytes(b[16..24].try_into().ok()?) != epoch {
        return None;
    }
    let c = u64::from_le_bytes(b[24..32].try_into().ok()?);
    if c != u64::from(keyed(nonce, slot, &b[..24])) {
        return None;
    }
    Target::decode(&b[..16])
}

/// The redo header's checksum over its status word, count and entries;
/// continue it over each captured range's bytes with
/// [`crc32c::crc32c_append`].
pub fn redo_crc(nonce: u64, slot: usize, status: u64, count: u32, entries: &[u8]) -> u32 {
    let mut h = [0u8; 12];
    h[..8].copy_from_slice(&status.to_le_bytes());
    h[8..].copy_from_slice(&count.to_le_bytes());
    let c = keyed(nonce, slot, &h);
    crc32c::crc32c_append(c, entries)
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
        let hex: String = Superblock {
            algorithm: 2,
            slots: 3,
            log_bytes: 4096,
            slots_off: SLOTS_OFF,
            heap_off: 1 << 16,
            heap_len: 1 << 20,
            nonce: 0x1234_5678_9abc_def0,
        }
        .encode()
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect();
        assert_eq!(
            hex,
            concat!(
                "46455250544d3031010002000300000000100000000000008010000000000000",
                "00000100000000000000100000000000f0debc9a78563412000000008ea13079"
            )
        );
    }

    #[test]
    fn superblock_round_trips_and_rejects_damage() {
        let sb = Superblock {
            algorithm: 2,
            slots: 4,
            log_bytes: 4096,
            slots_off: SLOTS_OFF,
            heap_off: 1 << 16,
            heap_len: (1 << 20) - (1 << 16),
            nonce: 77,
        };
        let b = sb.encode();
        assert_eq!(Superblock::decode(&b, 1 << 20).unwrap(), sb);
        for i in 0..SB_BYTES {
            let mut d = b;
            d[i] ^= 0x10;
            assert!(Superblock::decode(&d, 1 << 20).is_err(), "byte {i}");
        }
        assert!(Superblock::decode(&b, 1 << 21).is_err());
    }

    #[test]
    fn undo_entries_validate_by_gen_and_check() {
        let t = Target::Word {
            off: 8192,
            value: 5,
        };
        let e = undo_entry(9, 1, &t, 3);
        assert_eq!(undo_decode(9, 1, &e, 3), Some(t));
        assert_eq!(undo_decode(9, 1, &e, 4), None);
        assert_eq!(undo_decode(9, 2, &e, 3), None);
        assert_eq!(undo_decode(8, 1, &e, 3), None);
        let r = Target::Range { off: 8192, len: 48 };
        assert_eq!(Target::decode(&r.encode()), Some(r));
        let op = Target::Op(MetaOp::or(8192, 0b110));
        let e = undo_entry(9, 1, &op, 3);
        assert_eq!(undo_decode(9, 1, &e, 3), Some(op));
        for i in 0..UNDO_ENTRY {
            let mut d = e;
            d[i] ^= 1;
            assert_ne!(undo_decode(9, 1, &d, 3), Some(op), "byte {i}");
        }
    }
}
