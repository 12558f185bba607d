//! On-media format of a transactional pool: superblock, log slots, records.
//!
//! Everything is little-endian. Offsets called *pool offsets* count from the
//! first byte of the pool file (its 4 KiB header included), as
//! [`ferrite_pmem::POff`] does.
//!
//! # Placement (version 1)
//!
//! | pool offset                | bytes              | content                                   |
//! |----------------------------|--------------------|-------------------------------------------|
//! | 4096 (start of data area)  | 64                 | superblock                                |
//! | 4160                       | 64                 | root line: word 0 = the application's root pool offset (0 = none), written only by transactions; rest zero |
//! | 4224                       | 4096               | group area: the GROUP record of the last recovery that completed interrupted transactions |
//! | `slots_off` = 8320         | `slots · slot_bytes` | log slots, one per attachable thread      |
//! | `heap_off` (4 KiB aligned) | `heap_len`         | a Ferrite heap ([`ferrite_alloc::heap`] documents it) |
//!
//! The pool header's root offset ([`ferrite_pmem::Pool::root`]) points at
//! the superblock; it is set last when the pool is created, so a pool whose
//! creation crashed has no root and is refused ([`crate::TxError::NotATxPool`]).
//!
//! # Superblock
//!
//! | bytes  | field                                                             |
//! |--------|-------------------------------------------------------------------|
//! | 0..8   | magic `FERRTXPL`                                                  |
//! | 8..10  | format version, u16 = 1                                           |
//! | 10..12 | default strategy, u16: 1 undo, 2 redo, 3 clobber, 4 no-log        |
//! | 12..14 | slots, u16 (1..=64)                                               |
//! | 14..16 | reserved, zero                                                    |
//! | 16..20 | area_bytes, u32: bytes of each of a slot's two log areas (multiple of 64, ≥ 1024) |
//! | 20..24 | flags, u32 = 0 (unknown bits are refused)                         |
//! | 24..32 | slots_off, u64 (pool offset of slot 0)                            |
//! | 32..40 | heap_off, u64 (pool offset of the heap region, multiple of 4096)  |
//! | 40..48 | heap_len, u64                                                     |
//! | 48..56 | nonce, u64, random per pool (keys every record checksum)          |
//! | 56..60 | reserved, zero                                                    |
//! | 60..64 | crc32c of bytes 0..60                                             |
//!
//! # Log slot
//!
//! `slot_bytes = 64 + 2 · area_bytes`. A slot belongs to one attached
//! thread at a time ([`crate::TxThread`]); its transactions are numbered by
//! a per-slot *epoch* (1, 2, …), and transaction `e` logs into area `e mod 2`
//! — so the areas alternate and the newest finished transaction's log is
//! never overwritten by the next one while its completion may not yet be
//! durable.
//!
//! | slot offset         | bytes       | content                                  |
//! |---------------------|-------------|------------------------------------------|
//! | 0                   | 8           | `done`: epoch of the newest transaction of this slot known complete |
//! | 8                   | 56          | reserved, zero (the line is flushed by other threads, see [`crate::tx`]) |
//! | 64                  | area_bytes  | area 0                                   |
//! | 64 + area_bytes     | area_bytes  | area 1                                   |
//!
//! # Records
//!
//! An area holds the records of one transaction, back to back from its
//! start, each 8-byte aligned:
//!
//! | bytes  | field                                                             |
//! |--------|-------------------------------------------------------------------|
//! | 0..4   | crc32c of bytes 4..32 ‖ payload, continuing crc32c(nonce u64)     |
//! | 4..6   | kind, u16: 1 VLOG, 2 UNDO, 3 REDO, 4 CLOB, 5 END, 6 GROUP         |
//! | 6..8   | slot index, u16 (binds the record to its slot; GROUP: 0xffff)     |
//! | 8..12  | payload bytes, u32 (a multiple of 8)                              |
//! | 12..16 | items, u32: VLOG buffers; UNDO/REDO/CLOB items; END 0             |
//! | 16..24 | epoch, u64                                                        |
//! | 24..32 | aux, u64: VLOG function id; REDO and END global ticket; CLOB 1 when written by a re-execution during recovery; else 0 |
//! | 32..   | payload                                                           |
//!
//! (The checksum comes first so that it covers the rest in one pass; the
//! nonce keys it to this pool.)
//!
//! A record is *valid* when its kind is known, its slot index matches, its
//! payload fits the area and its checksum matches. Recovery reads an area
//! from its start: the first record must be valid with an epoch above the
//! slot's `done`, and the area's transaction is that record and every
//! following valid record with the same epoch, up to the first that is not
//! (torn, stale or never written). Records are appended only after the
//! previous one was fenced, except the VLOG and the first CLOB record,
//! which share one fence; so only the last record can be torn.
//!
//! Payload of UNDO, REDO and CLOB records: items, back to back.
//!
//! | bytes | field                                                              |
//! |-------|--------------------------------------------------------------------|
//! | 0..8  | `tag << 56 | pool offset` (offset < 2⁵⁶)                             |
//! | 8..16 | tag 0: byte count n; tags 1–3: operand                             |
//! | 16..  | tag 0 only: n bytes, zero-padded to a multiple of 8                |
//!
//! Tag 0 is a byte range: UNDO and CLOB hold the old bytes to restore, REDO
//! the new bytes to write. Tags 1–3 are allocator metadata operations on one
//! 8-byte word ([`ferrite_alloc::MetaOp`]: 1 set, 2 or, 3 and-not): REDO
//! holds the operations to apply, UNDO and CLOB their inverses (to undo a
//! reservation's bit, a free's cleared bit, an extent header). Tag 4
//! (REDO only) checks a range the transaction wrote in place into a block
//! it allocated: bytes 8..12 hold crc32c of the range, 12..16 its length.
//! Those bytes are flushed in the same fence epoch as the record, so a
//! record can survive a crash without them; it counts as committed only
//! if every tag-4 range matches (otherwise its fence never completed and
//! nothing of it was applied).
//!
//! Payload of VLOG: the transaction's volatile inputs [P1 §3.3.2]. For each
//! buffer (buffer 0 is the function's arguments, the others the DRAM
//! buffers it names, `vlog_preserve`):
//!
//! | bytes | field                                                              |
//! |-------|--------------------------------------------------------------------|
//! | 0..4  | length n, u32                                                      |
//! | 4..8  | zero                                                               |
//! | 8..   | n bytes, zero-padded to a multiple of 8                            |
//!
//! END has no payload; its aux is the global ticket drawn when the
//! transaction finished executing (it orders re-execution across slots).
//!
//! GROUP (only in the group area, at its start): the transactions one
//! recovery completed, as `items` pairs of u64 (slot index, epoch). It is
//! written and fenced after all of them were rolled back, replayed or
//! re-executed, and before their slots' `done` words are: it makes their
//! completion one atomic step, so a crash while those words are written
//! cannot leave some of a group done and others, which depend on them,
//! not. Opening a pool first raises every listed slot's `done` to the
//! listed epoch (never lowers it, so an old GROUP record is harmless).

use crate::error::{Result, TxError};
use ferrite_alloc::{MetaOp, OpKind};
use ferrite_pmem::{CACHE_LINE, ChecksumMismatch, PAGE, Region, SuperblockView, SuperblockWriter};

/// `FERRTXPL`: identifies a transactional pool superblock.
pub const MAGIC: [u8; 8] = *b"FERRTXPL";
/// On-media format version this build writes and reads.
pub const VERSION: u16 = 1;
/// Most log slots (the pending-completion mask is one 64-bit word).
pub const MAX_SLOTS: u16 = 64;
/// Smallest log area.
pub const MIN_AREA: u32 = 1024;
/// Bytes of a record header.
pub const REC_HDR: usize = 32;
/// Bytes of an item header.
pub const ITEM_HDR: usize = 16;
/// Bytes of the group area.
pub const GROUP_BYTES: usize = 4096;
/// Offset of the group area relative to the superblock (past the
/// superblock line and the root-word line).
pub const GROUP_REL: u64 = 2 * CACHE_LINE as u64;
/// Offset of slot 0 relative to the superblock: past the superblock
/// line, the root-word line and the group area.
pub const SLOTS_REL: u64 = GROUP_REL + GROUP_BYTES as u64;
/// Slot index of the GROUP record.
pub const GROUP_SLOT: u16 = 0xffff;
/// Offsets must fit below the tag byte.
const OFF_MASK: u64 = (1 << 56) - 1;

/// Record kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Clobber: the transaction's function id and volatile inputs.
    Vlog = 1,
    /// Undo: old bytes (and inverse allocator operations) to roll back.
    Undo = 2,
    /// Redo: the whole transaction's new bytes and allocator operations.
    Redo = 3,
    /// Clobber: old values of clobbered inputs (and inverse allocator operations).
    Clob = 4,
    /// Clobber: the transaction finished executing (aux = ticket).
    End = 5,
    /// Recovery: a completed group of interrupted transactions.
    Group = 6,
}

impl Kind {
    fn from_code(c: u16) -> Option<Kind> {
        Some(match c {
            1 => Kind::Vlog,
            2 => Kind::Undo,
            3 => Kind::Redo,
            4 => Kind::Clob,
            5 => Kind::End,
            6 => Kind::Group,
            _ => return None,
        })
    }
}

/// The decoded superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Default strategy code (bytes 10..12): 1 undo, 2 redo, 3 clobber,
    /// 4 no-log.
    pub strategy: u16,
    /// Log slots (bytes 12..14), 1..=[`MAX_SLOTS`].
    pub slots: u16,
    /// Bytes of each of a slot's two log areas (bytes 16..20), a multiple
    /// of 64 and at least [`MIN_AREA`].
    pub area_bytes: u32,
    /// Pool offset of slot 0 (bytes 24..32): the superblock's offset plus
    /// [`SLOTS_REL`].
    pub slots_off: u64,
    /// Pool offset of the heap (bytes 32..40), page aligned, past the last
    /// slot.
    pub heap_off: u64,
    /// Bytes of the heap (bytes 40..48): the rest of the pool.
    pub heap_len: u64,
    /// Random nonce (bytes 48..56); its CRC32C seeds every record checksum,
    /// so records of an earlier pool in the same bytes never validate.
    pub nonce: u64,
}

impl Superblock {
    /// Bytes of one slot: its header line and two log areas.
    pub fn slot_bytes(&self) -> u64 {
        CACHE_LINE as u64 + 2 * u64::from(self.area_bytes)
    }

    /// Pool offset of slot `i`.
    pub fn slot_off(&self, i: u16) -> u64 {
        self.slots_off + u64::from(i) * self.slot_bytes()
    }

    /// The 64 bytes of the superblock (see the module documentation),
    /// CRC32C of bytes 0..60 in bytes 60..64.
    pub fn encode(&self) -> [u8; CACHE_LINE] {
        SuperblockWriter::new(&MAGIC, VERSION)
            .u16(10, self.strategy)
            .u16(12, self.slots)
            .u32(16, self.area_bytes)
            .u64(24, self.slots_off)
            .u64(32, self.heap_off)
            .u64(40, self.heap_len)
            .u64(48, self.nonce)
            .seal()
    }

    /// Decodes and validates a superblock at pool offset `at` of a pool of
    /// `pool_len` bytes.
    pub fn decode(b: &[u8], at: u64, pool_len: u64) -> Result<Superblock> {
        let view = SuperblockView::new(b).filter(|v| v.has_magic(&MAGIC));
        let Some(view) = view else {
            return Err(TxError::NotATxPool("bad superblock magic".into()));
        };
        let (u16_at, u32_at, u64_at) = (|i| view.u16(i), |i| view.u32(i), |i| view.u64(i));
        let version = view.version();
        if version != VERSION {
            return Err(TxError::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
        if let Err(ChecksumMismatch { stored, computed }) = view.checksum() {
            return Err(TxError::Checksum { stored, computed });
        }
        let sb = Superblock {
            strategy: u16_at(10),
            slots: u16_at(12),
            area_bytes: u32_at(16),
            slots_off: u64_at(24),
            heap_off: u64_at(32),
            heap_len: u64_at(40),
            nonce: u64_at(48),
        };
        let bad = |what: &str| Err(TxError::Corrupt(format!("superblock: {what}")));
        if u32_at(20) != 0 || u16_at(14) != 0 || u32_at(56) != 0 {
            return bad("unknown flags or reserved bits set");
        }
        if !(1..=4).contains(&sb.strategy) {
            return bad("unknown strategy");
        }
        if sb.slots == 0 || sb.slots > MAX_SLOTS {
            return bad("slot count out of range");
        }
        if sb.area_bytes < MIN_AREA || !(sb.area_bytes as usize).is_multiple_of(CACHE_LINE) {
            return bad("log area size");
        }
        let slots_end = sb
            .slots_off
            .checked_add(u64::from(sb.slots) * sb.slot_bytes());
        if sb.slots_off != at + SLOTS_REL
            || slots_end.is_none_or(|e| e > sb.heap_off)
            || !sb.heap_off.is_multiple_of(PAGE as u64)
            || sb.heap_off.checked_add(sb.heap_len) != Some(pool_len)
        {
            return bad("geometry does not fit the pool");
        }
        Ok(sb)
    }
}

/// One item of an UNDO, REDO or CLOB record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Item {
    /// Bytes at a pool offset (old bytes for UNDO/CLOB, new for REDO).
    Bytes { off: u64, data: Vec<u8> },
    /// An allocator metadata operation (inverse for UNDO/CLOB).
    Op(MetaOp),
    /// REDO: `len` bytes at `off`, written in place into a block the
    /// transaction allocated, must have checksum `crc` for the record to
    /// count as committed.
    Check { off: u64, len: u32, crc: u32 },
}

/// Encoded size of a byte item of `n` bytes.
pub(crate) fn bytes_item_len(n: usize) -> usize {
    ITEM_HDR + n.next_multiple_of(8)
}

/// Appends a byte item to `out`.
pub(crate) fn put_bytes(out: &mut Vec<u8>, off: u64, data: &[u8]) {
    let p = put_bytes_space(out, off, data.len());
    out[p..p + data.len()].copy_from_slice(data);
}

/// Appends a byte item of `n` zero bytes for the caller to fill (e.g.
/// straight from the medium); returns where they start in `out`.
pub(crate) fn put_bytes_space(out: &mut Vec<u8>, off: u64, n: usize) -> usize {
    let mut h = [0u8; ITEM_HDR];
    h[..8].copy_from_slice(&(off & OFF_MASK).to_le_bytes());
    h[8..].copy_from_slice(&(n as u64).to_le_bytes());
    out.extend_from_slice(&h);
    let p = out.len();
    out.resize(p + n.next_multiple_of(8), 0);
    p
}

/// Appends an allocator operation item to `out`.
pub(crate) fn put_op(out: &mut Vec<u8>, op: &MetaOp) {
    let tag: u64 = match op.kind {
        OpKind::Set => 1,
        OpKind::Or => 2,
        OpKind::AndNot => 3,
    };
    out.extend_from_slice(&((tag << 56) | (op.off & OFF_MASK)).to_le_bytes());
    out.extend_from_slice(&op.val.to_le_bytes());
}

/// Appends a fresh-data check item to `out`.
pub(crate) fn put_check(out: &mut Vec<u8>, off: u64, len: u32, crc: u32) {
    out.extend_from_slice(&((4u64 << 56) | (off & OFF_MASK)).to_le_bytes());
    out.extend_from_slice(&((u64::from(len) << 32) | u64::from(crc)).to_le_bytes());
}

/// Decodes the items of a payload; `None` if it is malformed.
pub(crate) fn items(payload: &[u8], count: u32) -> Option<Vec<Item>> {
    let mut v = Vec::with_capacity(count as usize);
    let mut p = 0usize;
    for _ in 0..count {
        let w0 = u64::from_le_bytes(payload.get(p..p + 8)?.try_into().ok()?);
        let w1 = u64::from_le_bytes(payload.get(p + 8..p + 16)?.try_into().ok()?);
        p += ITEM_HDR;
        let off = w0 & OFF_MASK;
        match w0 >> 56 {
            0 => {
                let n = usize::try_from(w1).ok()?;
                let end = p.checked_add(n)?;
                v.push(Item::Bytes {
                    off,
                    data: payload.get(p..end)?.to_vec(),
                });
                p = p.checked_add(n.next_multiple_of(8))?;
            }
            tag @ 1..=3 => {
                if !off.is_multiple_of(8) {
                    return None;
                }
                let kind = [OpKind::Set, OpKind::Or, OpKind::AndNot][tag as usize - 1];
                v.push(Item::Op(MetaOp { kind, off, val: w1 }));
            }
            4 => v.push(Item::Check {
                off,
                len: (w1 >> 32) as u32,
                crc: w1 as u32,
            }),
            _ => return None,
        }
    }
    (p == payload.len()).then_some(v)
}

/// Appends a VLOG buffer to `out`.
pub(crate) fn put_buffer(out: &mut Vec<u8>, data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(data);
    out.resize(out.len().next_multiple_of(8), 0);
}

/// Decodes the buffers of a VLOG payload.
pub(crate) fn buffers(payload: &[u8], count: u32) -> Option<Vec<Vec<u8>>> {
    let mut v = Vec::with_capacity(count as usize);
    let mut p = 0usize;
    for _ in 0..count {
        let n = u32::from_le_bytes(payload.get(p..p + 4)?.try_into().ok()?) as usize;
        p += 8;
        let end = p.checked_add(n)?;
        v.push(payload.get(p..end)?.to_vec());
        p = p.checked_add(n.next_multiple_of(8))?;
    }
    (p == payload.len()).then_some(v)
}

/// Header fields of a record being written.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecHead {
    pub kind: Kind,
    pub slot: u16,
    pub epoch: u64,
    pub aux: u64,
    pub items: u32,
}

/// The checksum seed of a pool: crc32c of its nonce.
pub(crate) fn crc_seed(nonce: u64) -> u32 {
    crc32c::crc32c(&nonce.to_le_bytes())
}

/// Fills in the header and checksum of a record built in place: `rec` is
/// [`REC_HDR`] placeholder bytes followed by the payload (8-byte padded).
pub(crate) fn seal_record(rec: &mut [u8], seed: u32, h: &RecHead) {
    let len = rec.len() - REC_HDR;
    debug_assert!(len.is_multiple_of(8));
    rec[4..6].copy_from_slice(&(h.kind as u16).to_le_bytes());
    rec[6..8].copy_from_slice(&h.slot.to_le_bytes());
    rec[8..12].copy_from_slice(&(len as u32).to_le_bytes());
    rec[12..16].copy_from_slice(&h.items.to_le_bytes());
    rec[16..24].copy_from_slice(&h.epoch.to_le_bytes());
    rec[24..32].copy_from_slice(&h.aux.to_le_bytes());
    let crc = crc32c::crc32c_append(seed, &rec[4..]);
    rec[0..4].copy_from_slice(&crc.to_le_bytes());
}

/// Encodes a record (header + `payload`, which must be 8-byte padded) into
/// `out` (cleared first).
pub(crate) fn encode_record(out: &mut Vec<u8>, seed: u32, h: &RecHead, payload: &[u8]) {
    debug_assert!(payload.len().is_multiple_of(8));
    out.clear();
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&(h.kind as u16).to_le_bytes());
    out.extend_from_slice(&h.slot.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&h.items.to_le_bytes());
    out.extend_from_slice(&h.epoch.to_le_bytes());
    out.extend_from_slice(&h.aux.to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c_append(seed, &out[4..]);
    out[0..4].copy_from_slice(&crc.to_le_bytes());
}

/// A record read back from an area.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    pub kind: Kind,
    pub epoch: u64,
    pub aux: u64,
    pub items: u32,
    pub payload: Vec<u8>,
    /// Area offset just past the record.
    pub end: usize,
}

/// Reads the record at area offset `pos` of `area` (a region over one log
/// area); `None` when there is no valid record there.
pub(crate) fn read_record(area: &Region, pos: usize, slot: u16, seed: u32) -> Option<Record> {
    if pos + REC_HDR > area.len() {
        return None;
    }
    let mut h = [0u8; REC_HDR];
    area.read(pos, &mut h);
    let kind = Kind::from_code(u16::from_le_bytes([h[4], h[5]]))?;
    if u16::from_le_bytes([h[6], h[7]]) != slot {
        return None;
    }
    let len = u32::from_le_bytes(h[8..12].try_into().ok()?) as usize;
    if !len.is_multiple_of(8) || pos + REC_HDR + len > area.len() {
        return None;
    }
    let payload = area.read_vec(pos + REC_HDR, len);
    let crc = crc32c::crc32c_append(crc32c::crc32c_append(seed, &h[4..]), &payload);
    if crc != u32::from_le_bytes(h[0..4].try_into().ok()?) {
        return None;
    }
    Some(Record {
        kind,
        items: u32::from_le_bytes(h[12..16].try_into().ok()?),
        epoch: u64::from_le_bytes(h[16..24].try_into().ok()?),
        aux: u64::from_le_bytes(h[24..32].try_into().ok()?),
        payload,
        end: pos + REC_HDR + len,
    })
}

/// Reads the transaction in `area`: its records, if the first is valid
/// with an epoch above `done`, and where the next record would go.
pub(crate) fn scan_area(area: &Region, slot: u16, nonce: u64, done: u64) -> (Vec<Record>, usize) {
    let seed = crc_seed(nonce);
    let mut recs: Vec<Record> = Vec::new();
    let mut pos = 0usize;
    while let Some(r) = read_record(area, pos, slot, seed) {
        match recs.first() {
            None if r.epoch <= done => break,
            Some(first) if first.epoch != r.epoch => break,
            _ => {}
        }
        pos = r.end;
        recs.push(r);
    }
    (recs, pos)
}

/// Where things live, in pool offsets.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    pub sb: Superblock,
    /// Pool offset of the root word.
    pub root_word: u64,
    /// Heap data pages: the bytes transactions may read and write.
    pub data_lo: u64,
    pub data_hi: u64,
    /// Heap metadata (descriptors): where allocator operations may point.
    pub meta_lo: u64,
}

impl Layout {
    pub fn slot_off(&self, i: u16) -> u64 {
        self.sb.slot_off(i)
    }

    /// Pool offset of the group area.
    pub fn group_off(&self) -> u64 {
        self.sb.slots_off - GROUP_BYTES as u64
    }

    /// Pool offset of area `a` of slot `i`.
    pub fn area_off(&self, i: u16, a: u64) -> u64 {
        self.slot_off(i) + CACHE_LINE as u64 + a * u64::from(self.sb.area_bytes)
    }

    /// True when a transaction may touch `off..off+len`.
    #[inline]
    pub fn may_touch(&self, off: u64, len: u64) -> bool {
        match off.checked_add(len) {
            Some(end) => {
                (off >= self.data_lo && end <= self.data_hi)
                    || (off >= self.root_word && end <= self.root_word + 8)
            }
            None => false,
        }
    }

    /// True when an allocator operation may target word `off`.
    pub fn op_target_ok(&self, off: u64) -> bool {
        off.is_multiple_of(8) && off >= self.meta_lo && off + 8 <= self.data_lo
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
        let hex: String = Superblock {
            strategy: 3,
            slots: 5,
            area_bytes: 8192,
            slots_off: 4096 + 128,
            heap_off: 1 << 17,
            heap_len: 1 << 21,
            nonce: 0x1234_5678_9abc_def0,
        }
        .encode()
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect();
        assert_eq!(
            hex,
            concat!(
                "464552525458504c010003000500000000200000000000008010000000000000",
                "00000200000000000000200000000000f0debc9a78563412000000001b357e7f"
            )
        );
    }

    #[test]
    fn items_round_trip_and_reject_garbage() {
        let mut p = Vec::new();
        put_bytes(&mut p, 4096 + 8, &[1, 2, 3]);
        put_op(&mut p, &MetaOp::or(8192, 4));
        put_bytes(&mut p, 4096 + 64, &[9; 16]);
        let v = items(&p, 3).unwrap();
        assert_eq!(
            v,
            vec![
                Item::Bytes {
                    off: 4104,
                    data: vec![1, 2, 3]
                },
                Item::Op(MetaOp::or(8192, 4)),
                Item::Bytes {
                    off: 4160,
                    data: vec![9; 16]
                },
            ]
        );
        assert!(items(&p, 4).is_none(), "more items than the payload holds");
        assert!(items(&p[..p.len() - 8], 3).is_none(), "truncated");
        let mut bad = p.clone();
        bad[7] = 9;
        assert!(items(&bad, 3).is_none(), "unknown tag");
    }

    #[test]
    fn buffers_round_trip() {
        let mut p = Vec::new();
        put_buffer(&mut p, b"args");
        put_buffer(&mut p, &[7u8; 13]);
        put_buffer(&mut p, &[]);
        let v = buffers(&p, 3).unwrap();
        assert_eq!(v, vec![b"args".to_vec(), vec![7u8; 13], vec![]]);
        assert!(buffers(&p, 2).is_none());
    }

    #[test]
    fn superblock_round_trips_and_is_validated() {
        let sb = Superblock {
            strategy: 3,
            slots: 4,
            area_bytes: 4096,
            slots_off: 4096 + SLOTS_REL,
            heap_off: 4096 * 12,
            heap_len: 4096 * 88,
            nonce: 77,
        };
        let b = sb.encode();
        assert_eq!(Superblock::decode(&b, 4096, 4096 * 100).unwrap(), sb);
        assert!(matches!(
            Superblock::decode(&b, 4096, 4096 * 101),
            Err(TxError::Corrupt(_))
        ));
        let mut c = b;
        c[20] = 1;
        assert!(matches!(
            Superblock::decode(&c, 4096, 4096 * 100),
            Err(TxError::Checksum { .. })
        ));
        c = b;
        c[0] = b'X';
        assert!(matches!(
            Superblock::decode(&c, 4096, 4096 * 100),
            Err(TxError::NotATxPool(_))
        ));
    }
}
