//! The redo log: two record areas in the engine's fixed area, used
//! alternately (record `seq` lives in area `seq % 2`).
//!
//! # Record format (little-endian)
//!
//! ```text
//!  0  4  CRC32C (seeded from the store nonce) of bytes 4..len
//!  4  4  len: record bytes, header included (24..=area size)
//!  8  8  seq: commit sequence number (area = seq % 2)
//! 16  4  item count
//! 20  4  magic "IREC"
//! 24  .. items, each a multiple of 8 bytes:
//!        allocator operation (16 B): ferrite_alloc::MetaOp::encode (kind 1..=3 in the top byte)
//!        write (16 B + data padded to 8): word0 = 4 << 56 | pool offset, word1 = length, data
//!        fresh block (16 B): word0 = 5 << 56 | pool offset, word1 = length | CRC32C << 32
//! ```
//!
//! A *fresh* item names a block the operation allocated and wrote directly
//! (a tuple or a node): it is flushed with the record, under the same
//! fence, so a crash at that fence may keep the record and lose the block.
//! Recovery replays the newest record only if every fresh block it names
//! still has its checksum; otherwise that record never committed.
//!
//! A record is valid when its CRC matches: a torn record (some of its
//! lines from an older record) or bytes of an earlier store (another
//! nonce) never validate.

use ferrite_alloc::MetaOp;

pub(crate) const REC_HDR: usize = 24;
const REC_MAGIC: u32 = u32::from_le_bytes(*b"IREC");
const KIND_WRITE: u64 = 4;
const KIND_FRESH: u64 = 5;
const OFF_MASK: u64 = (1 << 56) - 1;

/// One item of a record.
#[derive(Debug)]
pub(crate) enum Item<'a> {
    Write { off: u64, data: &'a [u8] },
    Meta(MetaOp),
    Fresh { off: u64, len: usize, crc: u32 },
}

/// CRC seed of a store: stale records of another store never validate.
pub(crate) fn seed(nonce: u64) -> u32 {
    (nonce ^ (nonce >> 32)) as u32 ^ 0x1A9E_0C3D
}

/// A record being built (reused between commits).
#[derive(Default)]
pub(crate) struct RecBuf {
    pub buf: Vec<u8>,
    items: u32,
}

impl RecBuf {
    pub fn reset(&mut self) {
        self.buf.clear();
        self.buf.resize(REC_HDR, 0);
        self.items = 0;
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn push_write(&mut self, off: u64, data: &[u8]) {
        self.buf
            .extend_from_slice(&((KIND_WRITE << 56) | (off & OFF_MASK)).to_le_bytes());
        self.buf
            .extend_from_slice(&(data.len() as u64).to_le_bytes());
        self.buf.extend_from_slice(data);
        let pad = data.len().next_multiple_of(8) - data.len();
        self.buf.extend(std::iter::repeat_n(0u8, pad));
        self.items += 1;
    }

    pub fn push_fresh(&mut self, off: u64, len: usize, crc: u32) {
        self.buf
            .extend_from_slice(&((KIND_FRESH << 56) | (off & OFF_MASK)).to_le_bytes());
        self.buf.extend_from_slice(
            &((len as u64 & 0xFFFF_FFFF) | (u64::from(crc) << 32)).to_le_bytes(),
        );
        self.items += 1;
    }

    pub fn push_meta(&mut self, op: &MetaOp) {
        self.buf.extend_from_slice(&op.encode());
        self.items += 1;
    }

    /// Fills in the header: the record is then ready to be written.
    pub fn finish(&mut self, seq: u64, seed: u32) {
        let len = self.buf.len() as u32;
        self.buf[4..8].copy_from_slice(&len.to_le_bytes());
        self.buf[8..16].copy_from_slice(&seq.to_le_bytes());
        self.buf[16..20].copy_from_slice(&self.items.to_le_bytes());
        self.buf[20..24].copy_from_slice(&REC_MAGIC.to_le_bytes());
        let crc = crc32c::crc32c_append(seed, &self.buf[4..]);
        self.buf[0..4].copy_from_slice(&crc.to_le_bytes());
    }
}

/// The header of a record: `(len, seq)` when the magic and length are
/// plausible for an area of `cap` bytes (the CRC is checked by [`validate`]).
pub(crate) fn header(h: &[u8; REC_HDR], cap: usize) -> Option<(usize, u64)> {
    let len = u32::from_le_bytes(h[4..8].try_into().ok()?) as usize;
    let magic = u32::from_le_bytes(h[20..24].try_into().ok()?);
    if magic != REC_MAGIC || len < REC_HDR || len > cap || !len.is_multiple_of(8) {
        return None;
    }
    Some((len, u64::from_le_bytes(h[8..16].try_into().ok()?)))
}

/// True when the whole record's CRC matches.
pub(crate) fn validate(rec: &[u8], seed: u32) -> bool {
    rec.len() >= REC_HDR
        && u32::from_le_bytes(rec[0..4].try_into().expect("4 bytes"))
            == crc32c::crc32c_append(seed, &rec[4..])
}

/// Calls `f` for every item of a (validated) record, in order. `Err` names
/// what is malformed; nothing panics on any input.
pub(crate) fn for_each_item(
    rec: &[u8],
    mut f: impl FnMut(Item<'_>) -> Result<(), String>,
) -> Result<(), String> {
    if rec.len() < REC_HDR {
        return Err("record shorter than its header".into());
    }
    let count = u32::from_le_bytes(rec[16..20].try_into().expect("4 bytes"));
    let mut at = REC_HDR;
    for i in 0..count {
        let Some(w) = rec.get(at..at + 16) else {
            return Err(format!("item {i} past the record end"));
        };
        let w0 = u64::from_le_bytes(w[0..8].try_into().expect("8 bytes"));
        let w1 = u64::from_le_bytes(w[8..16].try_into().expect("8 bytes"));
        if w0 >> 56 == KIND_WRITE {
            let len = usize::try_from(w1).map_err(|_| "write length".to_string())?;
            let end = (at + 16)
                .checked_add(len.next_multiple_of(8))
                .filter(|&e| e <= rec.len())
                .ok_or_else(|| format!("write item {i} past the record end"))?;
            f(Item::Write {
                off: w0 & OFF_MASK,
                data: &rec[at + 16..at + 16 + len],
            })?;
            at = end;
        } else if w0 >> 56 == KIND_FRESH {
            f(Item::Fresh {
                off: w0 & OFF_MASK,
                len: (w1 & 0xFFFF_FFFF) as usize,
                crc: (w1 >> 32) as u32,
            })?;
            at += 16;
        } else {
            let op = MetaOp::decode(w).ok_or_else(|| format!("item {i}: unknown kind"))?;
            f(Item::Meta(op))?;
            at += 16;
        }
    }
    if at != rec.len() {
        return Err("record length does not match its items".into());
    }
    Ok(())
}
