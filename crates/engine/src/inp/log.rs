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
//!        write into a block (16 B + data padded to 8; intent protocol only):
//!            word0 = 6 << 56 | pool offset, word1 = length | (offset - block start) << 32, data
//!        pending free (16 B; intent protocol only): word0 = 7 << 56 | block offset, word1 = 0
//!        overflow (16 B; the only item of a pointer record): word0 = 8 << 56 | pool offset,
//!            word1 = length | CRC32C << 32 — the record itself lies there
//! ```
//!
//! # Records larger than a log area
//!
//! A batch whose record does not fit its log area (any size, bounded only
//! by the heap) writes the record to a heap block of its own, allocated by
//! the record itself (its allocator operations include that block's), and
//! puts a *pointer record* with the same `seq` in the log area: one
//! overflow item naming the block, the record's length and the CRC32C of
//! its bytes. Block and pointer are flushed under the commit's one fence.
//! Recovery reads a pointer record's block and uses the record found
//! there — if its CRC matches and it is a valid record of the same `seq`;
//! otherwise the newest record never committed (as with a fresh block),
//! and an older one is already durable (the newer committed after its
//! writes were flushed) and is skipped. The block is freed by the next
//! record's allocator operations, or by recovery once it retired the
//! records.
//!
//! Stores on an allocator that can `prepare` (the Ferrite heap, the lock
//! heap) use kinds 1..=5 only, exactly as before the intent protocol
//! existed. Stores using the intent protocol (`inp` module docs) log no
//! allocator operations (kinds 1..=3); they name the block every write
//! lands in (kind 6), so that recovery checks it against the allocator
//! rather than against a heap range, and list the frees the record owes
//! (kind 7), which recovery completes for the newest committed record.
//!
//! # Intent record (intent area, intent protocol only; little-endian)
//!
//! ```text
//!  0  4  CRC32C (seeded from the store nonce) of bytes 4..len
//!  4  4  len: 24 + 8 n
//!  8  8  seq: the record whose blocks these are (it commits as record seq)
//! 16  4  n: blocks
//! 20  4  magic "IINT"
//! 24 8n  pool offsets of the blocks the transaction publishes before it commits
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
const KIND_WRITE_IN: u64 = 6;
const KIND_FREE: u64 = 7;
const KIND_OVERFLOW: u64 = 8;
pub(crate) const INTENT_HDR: usize = 24;
const INTENT_MAGIC: u32 = u32::from_le_bytes(*b"IINT");
const OFF_MASK: u64 = (1 << 56) - 1;

/// One item of a record.
#[derive(Debug)]
pub(crate) enum Item<'a> {
    Write {
        off: u64,
        data: &'a [u8],
    },
    Meta(MetaOp),
    Fresh {
        off: u64,
        len: usize,
        crc: u32,
    },
    /// A write into the allocator block that starts at `base`.
    WriteIn {
        base: u64,
        off: u64,
        data: &'a [u8],
    },
    /// A free this record owes (intent protocol).
    Free {
        off: u64,
    },
    /// The record lies in the block at `off` (a pointer record's item).
    Overflow {
        off: u64,
        len: usize,
        crc: u32,
    },
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

    /// A write into the block at `base` (intent protocol): the item
    /// carries the block's start so that recovery can check the write
    /// against the allocator. `off - base` must fit 32 bits.
    pub fn push_write_in(&mut self, base: u64, off: u64, data: &[u8]) {
        self.buf
            .extend_from_slice(&((KIND_WRITE_IN << 56) | (off & OFF_MASK)).to_le_bytes());
        let rel = off - base;
        self.buf
            .extend_from_slice(&((data.len() as u64 & 0xFFFF_FFFF) | (rel << 32)).to_le_bytes());
        self.buf.extend_from_slice(data);
        let pad = data.len().next_multiple_of(8) - data.len();
        self.buf.extend(std::iter::repeat_n(0u8, pad));
        self.items += 1;
    }

    /// A free the record owes (intent protocol).
    pub fn push_free(&mut self, off: u64) {
        self.buf
            .extend_from_slice(&((KIND_FREE << 56) | (off & OFF_MASK)).to_le_bytes());
        self.buf.extend_from_slice(&0u64.to_le_bytes());
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

    /// The item of a pointer record: the record of `len` bytes with CRC32C
    /// `crc` lies at pool offset `off`.
    pub fn push_overflow(&mut self, off: u64, len: usize, crc: u32) {
        self.buf
            .extend_from_slice(&((KIND_OVERFLOW << 56) | (off & OFF_MASK)).to_le_bytes());
        self.buf.extend_from_slice(
            &((len as u64 & 0xFFFF_FFFF) | (u64::from(crc) << 32)).to_le_bytes(),
        );
        self.items += 1;
    }

    pub fn push_meta(&mut self, op: &MetaOp) {
        self.buf.extend_from_slice(&op.encode());
        self.items += 1;
    }

    /// Where the record ends now, `(bytes, items)`: for
    /// [`replace_metas`](Self::replace_metas).
    pub fn mark(&self) -> (usize, u32) {
        (self.buf.len(), self.items)
    }

    /// Replaces the items between marks `from` and `to` (allocator
    /// operations pushed there) with `ops`, keeping what follows.
    pub fn replace_metas(&mut self, from: (usize, u32), to: (usize, u32), ops: &[MetaOp]) {
        let tail = self.buf.split_off(to.0);
        self.buf.truncate(from.0);
        self.items -= to.1 - from.1;
        for op in ops {
            self.push_meta(op);
        }
        self.buf.extend_from_slice(&tail);
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
        if w0 >> 56 == KIND_WRITE || w0 >> 56 == KIND_WRITE_IN {
            let (len, rel) = if w0 >> 56 == KIND_WRITE {
                (w1, None)
            } else {
                (w1 & 0xFFFF_FFFF, Some(w1 >> 32))
            };
            let len = usize::try_from(len).map_err(|_| "write length".to_string())?;
            let end = (at + 16)
                .checked_add(len.next_multiple_of(8))
                .filter(|&e| e <= rec.len())
                .ok_or_else(|| format!("write item {i} past the record end"))?;
            let off = w0 & OFF_MASK;
            let data = &rec[at + 16..at + 16 + len];
            match rel {
                None => f(Item::Write { off, data })?,
                Some(rel) => {
                    let base = off
                        .checked_sub(rel)
                        .ok_or_else(|| format!("write item {i}: block start below zero"))?;
                    f(Item::WriteIn { base, off, data })?
                }
            }
            at = end;
        } else if w0 >> 56 == KIND_FRESH {
            f(Item::Fresh {
                off: w0 & OFF_MASK,
                len: (w1 & 0xFFFF_FFFF) as usize,
                crc: (w1 >> 32) as u32,
            })?;
            at += 16;
        } else if w0 >> 56 == KIND_FREE {
            f(Item::Free { off: w0 & OFF_MASK })?;
            at += 16;
        } else if w0 >> 56 == KIND_OVERFLOW {
            f(Item::Overflow {
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

/// The block a pointer record names, `(off, len, crc)`: `Some` for a
/// (validated) record whose one item is an overflow item.
pub(crate) fn overflow_of(rec: &[u8]) -> Option<(u64, usize, u32)> {
    let count = u32::from_le_bytes(rec.get(16..20)?.try_into().ok()?);
    let mut found = None;
    let r = for_each_item(rec, |it| {
        if let Item::Overflow { off, len, crc } = it {
            found = Some((off, len, crc));
        }
        Ok(())
    });
    found.filter(|_| count == 1 && r.is_ok())
}

/// Builds the intent record of transaction `seq` naming `blocks` into
/// `buf` (see the module docs).
pub(crate) fn build_intent(
    buf: &mut Vec<u8>,
    seq: u64,
    seed: u32,
    blocks: impl ExactSizeIterator<Item = u64>,
) {
    let n = blocks.len();
    buf.clear();
    buf.resize(INTENT_HDR, 0);
    for b in blocks {
        buf.extend_from_slice(&b.to_le_bytes());
    }
    let len = (INTENT_HDR + 8 * n) as u32;
    buf[4..8].copy_from_slice(&len.to_le_bytes());
    buf[8..16].copy_from_slice(&seq.to_le_bytes());
    buf[16..20].copy_from_slice(&(n as u32).to_le_bytes());
    buf[20..24].copy_from_slice(&INTENT_MAGIC.to_le_bytes());
    let crc = crc32c::crc32c_append(seed, &buf[4..]);
    buf[0..4].copy_from_slice(&crc.to_le_bytes());
}

/// Bytes an intent naming `n` blocks takes.
pub(crate) fn intent_len(n: usize) -> usize {
    INTENT_HDR + 8 * n
}

/// The intent record in the `cap`-byte area at pool offset `at`:
/// `(seq, blocks)` when it is whole (CRC), `None` otherwise (never
/// written, torn, or invalidated by recovery).
pub(crate) fn read_intent(
    pool: &ferrite_pmem::Region,
    at: usize,
    cap: usize,
    seed: u32,
) -> Option<(u64, Vec<u64>)> {
    let mut h = [0u8; INTENT_HDR];
    pool.read(at, &mut h);
    let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
    let len = u32_at(4) as usize;
    let n = u32_at(16) as usize;
    if u32_at(20) != INTENT_MAGIC || len > cap || n.checked_mul(8)? + INTENT_HDR != len {
        return None;
    }
    let rec = pool.read_vec(at, len);
    if u32_at(0) != crc32c::crc32c_append(seed, &rec[4..]) {
        return None;
    }
    let seq = u64::from_le_bytes(h[8..16].try_into().expect("8 bytes"));
    let blocks = rec[INTENT_HDR..]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    Some((seq, blocks))
}
