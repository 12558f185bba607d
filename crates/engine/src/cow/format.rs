//! On-media formats of the CoW engine: the fixed area (header and root
//! word), tree nodes and value blobs. All integers little-endian.
//!
//! # Fixed area (pool offset `area_off`, [`AREA_BYTES`] bytes)
//!
//! ```text
//! line 0:  0  8  magic "FRCOWv01"
//!          8  4  format version (1)
//!         12 48  zero
//!         60  4  crc32c(nonce LE ‖ bytes 0..60)
//! line 1: 64  8  root: pool offset of the root node, 0 = empty tree
//!         72  8  root's checksum (its header crc, in the low 32 bits)
//!         80  8  previous root (the version the last switch replaced)
//!         88  8  previous root's checksum
//!         96  8  switch record: pool offset of the newest SR block, 0 = none
//!        104  8  the switch record's checksum (its crc, in the low 32 bits)
//!        112  8  gc_needed: 1 while a switch's surplus allocations may be
//!                durable without the switch (recovery must walk), else 0
//!        120  8  zero
//! ```
//!
//! # Switch record (SR; one allocator block, `len` bytes of it used)
//!
//! Written and flushed (no fence) by every publish that switches the root
//! or frees deferred blocks, and linked into the root line by that same
//! publish, which also frees the previous SR block. It lets recovery
//! check the newest switch and free the deferred blocks without walking
//! the tree (see the module docs, "Recovery").
//!
//! ```text
//!  0  4  crc32c(nonce LE ‖ bytes 4..len)
//!  4  4  magic "CWSR"
//!  8  8  keys in the version the root line points to
//! 16  4  n_new: blocks newly written by this switch
//! 20  4  n_pending: blocks pending free after this publish
//! 24 ..  n_new entries of 16 bytes:
//!          0  8  pool offset
//!          8  4  bits 0..30: bytes used; bit 31: 1 node, 0 blob
//!         12  4  its checksum (a node's header crc; a blob's
//!                crc32c(nonce LE ‖ value))
//!  then  n_pending pool offsets, 8 bytes each
//! ```
//!
//! `len = 24 + 16·n_new + 8·n_pending ≤` [`MAX_SR`] (checked before
//! anything past the header is read); a switch whose
//! record would be larger links no SR (offset 0), and the next recovery
//! walks.
//!
//! The header is written and persisted once at create (the root line
//! zeroed with it). The root line is only ever changed by allocator
//! publishes ([`ferrite_alloc::Link`]s: the four root words and the two
//! SR words of a switch in one publish, `gc_needed` with the first and last
//! publish of a switch split over several), so it switches atomically with
//! the allocations of the new version.
//!
//! **Why the checksums and the previous root.** A switch writes and flushes
//! its new nodes and then publishes; the allocator's first fence makes
//! both its redo record and the nodes durable — but a crash *at* that
//! fence may keep the record and lose some node lines, and recovery would
//! then replay a root pointing at them. Every pointer to a node therefore
//! carries the node's checksum (branch entries and the root line: a
//! Merkle tree), so recovery can tell whether the newest version reached
//! the media entirely. When it did not, the previous version — whose
//! blocks are freed only by publishes after the switch completed — is
//! intact, and recovery switches back to it. This saves a fence per
//! switch over flushing, fencing and then publishing.
//!
//! # Node (one allocator block, `len` bytes of it used)
//!
//! ```text
//!  0  4  crc32c(nonce LE ‖ bytes 4..len)
//!  4  1  kind: 1 leaf, 2 branch
//!  5  1  level: 0 for leaves, a branch is one above its children
//!  6  2  count: entries (≥ 1)
//!  8  4  len: bytes of the node, header included (16 ..= MAX_NODE)
//! 12  4  zero
//! 16 ..  `count` entries back to back, keys strictly increasing
//! ```
//!
//! Leaf entry (8 + klen + inline vlen, or 8 + klen + 12):
//!
//! ```text
//!  0  2  klen (1 ..= MAX_KEY)
//!  2  1  tag: 0 value inline, 1 value in a blob
//!  3  1  zero
//!  4  4  vlen (≤ MAX_VALUE)
//!  8  klen key
//!  then inline: vlen value bytes
//!       blob:   8 pool offset of the blob ‖ 4 crc32c(nonce LE ‖ value)
//! ```
//!
//! Branch entry (16 + klen): entry `i` holds the child whose keys are
//! `≥ key_i` and `< key_{i+1}`; the first entry's key is empty (−∞).
//!
//! ```text
//!  0  2  klen (0 for the first entry, 1 ..= MAX_KEY for the others)
//!  2  2  zero
//!  4  4  the child's checksum (its header crc)
//!  8  8  child pool offset
//! 16  klen key
//! ```
//!
//! # Blob
//!
//! The `vlen` value bytes alone, in their own allocator block; the leaf
//! entry carries the length and the checksum.
//!
//! Nodes and blobs are immutable once reachable from the durable root, so
//! a reader holding a version never sees one change under it. Checksums
//! are verified when the whole tree is walked (open, [`walk`]); the hot
//! read path only bounds-checks what it parses, so a corrupt pool yields
//! an error, never a panic.
//!
//! [`walk`]: crate::Engine::walk

use crate::{EngineError, MAX_KEY, MAX_VALUE, Result};

/// Magic of the fixed area's header line (bytes 0..8).
pub const AREA_MAGIC: &[u8; 8] = b"FRCOWv01";
/// Format version in the fixed area's header (bytes 8..12); the only one
/// [`check_area`] accepts.
pub const AREA_VERSION: u32 = 1;
/// Bytes of the fixed area: header line and root-word line.
pub const AREA_BYTES: usize = 128;
/// Offset of the root line in the fixed area: root, its crc, previous
/// root, its crc (8 bytes each).
pub const ROOT_AT: u64 = 64;
const AREA_CRC_AT: usize = 60;
/// Index of the 8-byte word in the root line (from [`ROOT_AT`]) holding
/// the switch record's pool offset.
pub const W_SR: u64 = 4;
/// Index of the root-line word holding the switch record's checksum.
pub const W_SR_CRC: u64 = 5;
/// Index of the root-line word holding `gc_needed`.
pub const W_GC: u64 = 6;

/// Magic of a switch record (bytes 4..8).
pub const SR_MAGIC: &[u8; 4] = b"CWSR";
/// Bytes of a switch record's header, before its entries.
pub const SR_HEADER: usize = 24;
/// Bytes of one new-block entry of a switch record.
pub const SR_NEW_ENTRY: usize = 16;
/// Largest switch record written or accepted.
pub const MAX_SR: usize = 256 * 1024;
const SR_NODE_BIT: u32 = 1 << 31;

/// Bytes of a node header, before its entries.
pub const NODE_HEADER: usize = 16;
/// Node kind byte of a leaf (level 0).
pub const KIND_LEAF: u8 = 1;
/// Node kind byte of a branch (level ≥ 1).
pub const KIND_BRANCH: u8 = 2;
/// Bytes of a leaf entry before its key.
pub const LEAF_ENTRY_HEADER: usize = 8;
/// Bytes of a leaf entry's blob reference (offset and checksum), after
/// its key.
pub const BLOB_REF: usize = 12;
/// Bytes of a branch entry before its key.
pub const BRANCH_ENTRY_HEADER: usize = 16;
/// Leaf entry tag: the value follows the key inline.
pub const TAG_INLINE: u8 = 0;
/// Leaf entry tag: the value is in a blob the entry references.
pub const TAG_BLOB: u8 = 1;
/// Largest node accepted when reading: a node may exceed its split target
/// by one entry (a maximal key with an inline value under the inline limit,
/// at most [`MAX_INLINE`]), and a node's entries are bounded by that.
pub const MAX_NODE: usize = 64 * 1024;
/// Largest inline value an [`Options`](super::Options) may ask for.
pub const MAX_INLINE: usize = 4096;
/// Deepest tree accepted (a B+tree of nodes holding ≥ 2 entries is far
/// shallower than this for any pool that fits in an address space).
pub const MAX_HEIGHT: u8 = 48;

fn corrupt(what: impl Into<String>) -> EngineError {
    EngineError::Corrupt(what.into())
}

/// Checksum of `bytes` seeded by the store's nonce.
pub fn crc(nonce: u64, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&nonce.to_le_bytes()), bytes)
}

/// The fixed area's header line.
pub fn encode_area(nonce: u64) -> [u8; 64] {
    let mut b = [0u8; 64];
    b[0..8].copy_from_slice(AREA_MAGIC);
    b[8..12].copy_from_slice(&AREA_VERSION.to_le_bytes());
    let c = crc(nonce, &b[..AREA_CRC_AT]);
    b[AREA_CRC_AT..].copy_from_slice(&c.to_le_bytes());
    b
}

/// Checks the fixed area's header line: magic, version and checksum
/// under this store's `nonce`; [`EngineError::Corrupt`] otherwise.
pub fn check_area(b: &[u8; 64], nonce: u64) -> Result<()> {
    if &b[0..8] != AREA_MAGIC {
        return Err(corrupt("cow: fixed area magic"));
    }
    let version = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
    if version != AREA_VERSION {
        return Err(corrupt(format!("cow: fixed area version {version}")));
    }
    let stored = u32::from_le_bytes(b[AREA_CRC_AT..].try_into().expect("4 bytes"));
    let computed = crc(nonce, &b[..AREA_CRC_AT]);
    if stored != computed {
        return Err(corrupt(format!(
            "cow: fixed area checksum {stored:#010x}, computed {computed:#010x}"
        )));
    }
    Ok(())
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

/// A node header, decoded and bounds-checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// [`KIND_LEAF`] or [`KIND_BRANCH`].
    pub kind: u8,
    /// 0 for a leaf; a branch is one above its children (≤ [`MAX_HEIGHT`]).
    pub level: u8,
    /// Entries in the node (≥ 1).
    pub count: u16,
    /// Bytes of the node, header included ([`NODE_HEADER`] ..= [`MAX_NODE`]).
    pub len: usize,
}

impl Header {
    /// Decodes the header at the start of `b` and checks its fields'
    /// bounds (not the checksum: [`check_node_crc`]).
    pub fn decode(b: &[u8]) -> Result<Header> {
        if b.len() < NODE_HEADER {
            return Err(corrupt("cow: short node header"));
        }
        let h = Header {
            kind: b[4],
            level: b[5],
            count: u16_at(b, 6),
            len: u32_at(b, 8) as usize,
        };
        let kind_ok = match h.kind {
            KIND_LEAF => h.level == 0,
            KIND_BRANCH => h.level >= 1 && h.level <= MAX_HEIGHT,
            _ => false,
        };
        if !kind_ok || h.count == 0 || h.len < NODE_HEADER || h.len > MAX_NODE {
            return Err(corrupt(format!(
                "cow: bad node header (kind {} level {} count {} len {})",
                h.kind, h.level, h.count, h.len
            )));
        }
        Ok(h)
    }
}

/// Where a leaf's value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValRef<'b> {
    /// The value bytes, in the leaf itself.
    Inline(&'b [u8]),
    /// In a blob of its own.
    Blob {
        /// Pool offset of the blob.
        off: u64,
        /// Bytes of the value (≥ 1).
        len: u32,
        /// The value's checksum, [`crc`] under the store's nonce.
        crc: u32,
    },
}

/// Parses the entries of a node held in `b` (`b.len() == header.len`):
/// yields `(key, Leaf(val))` or `(key, Child(off))` in order, each bounds
/// checked; the first error ends the iteration.
pub struct Entries<'b> {
    b: &'b [u8],
    pos: usize,
    left: u16,
    leaf: bool,
    first: bool,
}

/// One node entry, as [`Entries`] yields it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ent<'b> {
    /// Key and where its value is.
    Leaf(&'b [u8], ValRef<'b>),
    /// Key, child offset, child checksum.
    Branch(&'b [u8], u64, u32),
}

impl<'b> Entries<'b> {
    /// The entries of the node with header `h`, parsed from `b` (cut to
    /// `h.len`; a shorter `b` ends in an error, not a panic).
    pub fn new(h: &Header, b: &'b [u8]) -> Entries<'b> {
        Entries {
            b: &b[..h.len.min(b.len())],
            pos: NODE_HEADER,
            left: h.count,
            leaf: h.kind == KIND_LEAF,
            first: true,
        }
    }

    /// True when every entry was parsed and exactly the node's bytes used.
    pub fn exhausted(&self) -> bool {
        self.left == 0 && self.pos == self.b.len()
    }

    fn take(&mut self, n: usize) -> Result<&'b [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| corrupt("cow: node entry runs past the node"))?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn next_ent(&mut self) -> Result<Ent<'b>> {
        if self.leaf {
            let h = self.take(LEAF_ENTRY_HEADER)?;
            let klen = u16_at(h, 0) as usize;
            let tag = h[2];
            let vlen = u32_at(h, 4) as usize;
            if klen == 0 || klen > MAX_KEY || vlen > MAX_VALUE || h[3] != 0 {
                return Err(corrupt("cow: bad leaf entry"));
            }
            let key = self.take(klen)?;
            let val = match tag {
                TAG_INLINE => ValRef::Inline(self.take(vlen)?),
                TAG_BLOB => {
                    let r = self.take(BLOB_REF)?;
                    let off = u64_at(r, 0);
                    if off == 0 || vlen == 0 {
                        return Err(corrupt("cow: bad blob reference"));
                    }
                    ValRef::Blob {
                        off,
                        len: vlen as u32,
                        crc: u32_at(r, 8),
                    }
                }
                _ => return Err(corrupt("cow: bad value tag")),
            };
            Ok(Ent::Leaf(key, val))
        } else {
            let h = self.take(BRANCH_ENTRY_HEADER)?;
            let klen = u16_at(h, 0) as usize;
            let child = u64_at(h, 8);
            let klen_ok = if self.first {
                klen == 0
            } else {
                (1..=MAX_KEY).contains(&klen)
            };
            if !klen_ok || child == 0 || h[2..4] != [0, 0] {
                return Err(corrupt("cow: bad branch entry"));
            }
            Ok(Ent::Branch(self.take(klen)?, child, u32_at(h, 4)))
        }
    }
}

impl<'b> Iterator for Entries<'b> {
    type Item = Result<Ent<'b>>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        let r = self.next_ent();
        self.first = false;
        self.left = if r.is_ok() { self.left - 1 } else { 0 };
        Some(r)
    }
}

/// Writes a node header into `out[0..16]` and the checksum once the
/// entries are in place (`finish`).
pub fn begin_node(out: &mut Vec<u8>, kind: u8, level: u8, count: usize) {
    out.clear();
    out.extend_from_slice(&[0u8; NODE_HEADER]);
    out[4] = kind;
    out[5] = level;
    out[6..8].copy_from_slice(&(count as u16).to_le_bytes());
}

/// Appends a leaf entry for `key` with its value inline or as a blob
/// reference.
pub fn push_leaf_entry(out: &mut Vec<u8>, key: &[u8], val: ValRef<'_>) {
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    match val {
        ValRef::Inline(v) => {
            out.extend_from_slice(&[TAG_INLINE, 0]);
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(v);
        }
        ValRef::Blob { off, len, crc } => {
            out.extend_from_slice(&[TAG_BLOB, 0]);
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(&off.to_le_bytes());
            out.extend_from_slice(&crc.to_le_bytes());
        }
    }
}

/// Appends a branch entry: the child at pool offset `child`, whose header
/// checksum is `child_crc`, holds the keys from `key` (empty for the
/// first entry) up to the next entry's key.
pub fn push_branch_entry(out: &mut Vec<u8>, key: &[u8], child: u64, child_crc: u32) {
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    out.extend_from_slice(&[0u8; 2]);
    out.extend_from_slice(&child_crc.to_le_bytes());
    out.extend_from_slice(&child.to_le_bytes());
    out.extend_from_slice(key);
}

/// Sets the length and checksum; returns the checksum.
pub fn finish_node(out: &mut [u8], nonce: u64) -> u32 {
    let len = out.len() as u32;
    out[8..12].copy_from_slice(&len.to_le_bytes());
    let c = crc(nonce, &out[4..]);
    out[0..4].copy_from_slice(&c.to_le_bytes());
    c
}

/// Verifies a node (`b` is exactly its bytes) against its own checksum
/// and the one its parent (or the root line) recorded.
pub fn check_node_crc(b: &[u8], nonce: u64, expected: u32) -> Result<()> {
    let stored = u32_at(b, 0);
    let computed = crc(nonce, &b[4..]);
    if stored != computed || stored != expected {
        return Err(corrupt(format!(
            "cow: node checksum {stored:#010x}, computed {computed:#010x}, its parent recorded {expected:#010x}"
        )));
    }
    Ok(())
}

/// A block newly written by a switch: offset, bytes used, checksum, and
/// whether it is a node (else a blob).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fresh {
    /// Pool offset of the block.
    pub off: u64,
    /// Bytes of it used (< 2³¹: bit 31 of the entry holds `node`).
    pub len: u32,
    /// A node's header checksum, or a blob's [`crc`] of its value.
    pub crc: u32,
    /// True for a node, false for a blob.
    pub node: bool,
}

/// A decoded switch record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchRecord {
    /// Live keys in the version the root line points to.
    pub keys: u64,
    /// Blocks newly written by the switch: recovery verifies them instead
    /// of walking the tree.
    pub fresh: Vec<Fresh>,
    /// Pool offsets of blocks pending free after the publish that linked
    /// the record: recovery frees them.
    pub pending: Vec<u64>,
}

/// Bytes of a switch record with these counts.
pub fn sr_bytes(n_new: usize, n_pending: usize) -> usize {
    SR_HEADER + SR_NEW_ENTRY * n_new + 8 * n_pending
}

/// Encodes a switch record; returns its checksum.
pub fn encode_sr(
    out: &mut Vec<u8>,
    nonce: u64,
    keys: u64,
    fresh: &[Fresh],
    pending: impl Iterator<Item = u64>,
) -> u32 {
    out.clear();
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(SR_MAGIC);
    out.extend_from_slice(&keys.to_le_bytes());
    out.extend_from_slice(&(fresh.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0u8; 4]);
    for f in fresh {
        out.extend_from_slice(&f.off.to_le_bytes());
        let l = (f.len & !SR_NODE_BIT) | if f.node { SR_NODE_BIT } else { 0 };
        out.extend_from_slice(&l.to_le_bytes());
        out.extend_from_slice(&f.crc.to_le_bytes());
    }
    let mut n = 0u32;
    for p in pending {
        out.extend_from_slice(&p.to_le_bytes());
        n += 1;
    }
    out[20..24].copy_from_slice(&n.to_le_bytes());
    let c = crc(nonce, &out[4..]);
    out[0..4].copy_from_slice(&c.to_le_bytes());
    c
}

/// The length a switch record's header (its first [`SR_HEADER`] bytes)
/// announces, bounded by [`MAX_SR`].
pub fn sr_len(h: &[u8]) -> Result<usize> {
    if h.len() < SR_HEADER || &h[4..8] != SR_MAGIC {
        return Err(corrupt("cow: switch record magic"));
    }
    let n_new = u32_at(h, 16) as usize;
    let n_pending = u32_at(h, 20) as usize;
    let len = SR_NEW_ENTRY
        .checked_mul(n_new)
        .and_then(|a| n_pending.checked_mul(8).and_then(|b| a.checked_add(b)))
        .and_then(|a| a.checked_add(SR_HEADER))
        .filter(|&l| l <= MAX_SR)
        .ok_or_else(|| corrupt("cow: switch record too long"))?;
    Ok(len)
}

/// Decodes a switch record (`b` exactly its bytes) and checks it against
/// its own checksum and the one the root line recorded.
pub fn decode_sr(b: &[u8], nonce: u64, expected: u32) -> Result<SwitchRecord> {
    if sr_len(b)? != b.len() {
        return Err(corrupt("cow: switch record length"));
    }
    let stored = u32_at(b, 0);
    let computed = crc(nonce, &b[4..]);
    if stored != computed || stored != expected {
        return Err(corrupt(format!(
            "cow: switch record checksum {stored:#010x}, computed {computed:#010x}, the root line recorded {expected:#010x}"
        )));
    }
    let n_new = u32_at(b, 16) as usize;
    let mut at = SR_HEADER;
    let mut fresh = Vec::with_capacity(n_new);
    for _ in 0..n_new {
        let l = u32_at(b, at + 8);
        fresh.push(Fresh {
            off: u64_at(b, at),
            len: l & !SR_NODE_BIT,
            crc: u32_at(b, at + 12),
            node: l & SR_NODE_BIT != 0,
        });
        at += SR_NEW_ENTRY;
    }
    let pending = b[at..]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    Ok(SwitchRecord {
        keys: u64_at(b, 8),
        fresh,
        pending,
    })
}

/// Encoded bytes of a leaf entry.
pub fn leaf_entry_bytes(klen: usize, inline_vlen: Option<usize>) -> usize {
    LEAF_ENTRY_HEADER + klen + inline_vlen.unwrap_or(BLOB_REF)
}

/// Encoded bytes of a branch entry.
pub fn branch_entry_bytes(klen: usize) -> usize {
    BRANCH_ENTRY_HEADER + klen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_round_trip_and_corruption() {
        let mut b = Vec::new();
        begin_node(&mut b, KIND_LEAF, 0, 2);
        push_leaf_entry(&mut b, b"a", ValRef::Inline(b"xy"));
        push_leaf_entry(
            &mut b,
            b"bb",
            ValRef::Blob {
                off: 4096,
                len: 300,
                crc: 7,
            },
        );
        let c = finish_node(&mut b, 9);
        check_node_crc(&b, 9, c).unwrap();
        assert!(check_node_crc(&b, 10, c).is_err());
        assert!(check_node_crc(&b, 9, c ^ 1).is_err());
        let h = Header::decode(&b).unwrap();
        assert_eq!(h.len, b.len());
        let mut it = Entries::new(&h, &b);
        let got: Vec<_> = it.by_ref().collect::<Result<_>>().unwrap();
        assert!(it.exhausted());
        assert_eq!(got[0], Ent::Leaf(b"a", ValRef::Inline(b"xy")));
        assert_eq!(
            got[1],
            Ent::Leaf(
                b"bb",
                ValRef::Blob {
                    off: 4096,
                    len: 300,
                    crc: 7
                }
            )
        );
        // A count larger than the bytes hold is an error, not a panic.
        let mut bad = b.clone();
        bad[6] = 3;
        let h = Header::decode(&bad).unwrap();
        let r: Result<Vec<_>> = Entries::new(&h, &bad).collect();
        assert!(r.is_err());
        // Truncated in the middle of an entry.
        let h = Header::decode(&b).unwrap();
        let r: Result<Vec<_>> = Entries::new(&h, &b[..b.len() - 3]).collect();
        assert!(r.is_err());
        // Bad kind / level.
        let mut bad = b.clone();
        bad[4] = 3;
        assert!(Header::decode(&bad).is_err());
        let mut bad = b;
        bad[5] = 1;
        assert!(Header::decode(&bad).is_err());
    }

    #[test]
    fn branch_first_key_must_be_empty() {
        let mut b = Vec::new();
        begin_node(&mut b, KIND_BRANCH, 1, 2);
        push_branch_entry(&mut b, b"", 64, 5);
        push_branch_entry(&mut b, b"m", 128, 6);
        finish_node(&mut b, 1);
        let h = Header::decode(&b).unwrap();
        let v: Vec<_> = Entries::new(&h, &b).collect::<Result<_>>().unwrap();
        assert_eq!(v, vec![Ent::Branch(b"", 64, 5), Ent::Branch(b"m", 128, 6)]);
        let mut b2 = Vec::new();
        begin_node(&mut b2, KIND_BRANCH, 1, 1);
        push_branch_entry(&mut b2, b"k", 64, 0);
        finish_node(&mut b2, 1);
        let h = Header::decode(&b2).unwrap();
        assert!(Entries::new(&h, &b2).next().unwrap().is_err());
    }

    #[test]
    fn switch_record_round_trip_and_corruption() {
        let fresh = [
            Fresh {
                off: 4096,
                len: 1000,
                crc: 3,
                node: false,
            },
            Fresh {
                off: 8192,
                len: 300,
                crc: 4,
                node: true,
            },
        ];
        let mut b = Vec::new();
        let c = encode_sr(&mut b, 7, 42, &fresh, [64u64, 128].into_iter());
        assert_eq!(b.len(), sr_bytes(2, 2));
        assert_eq!(sr_len(&b[..SR_HEADER]).unwrap(), b.len());
        let r = decode_sr(&b, 7, c).unwrap();
        assert_eq!(r.keys, 42);
        assert_eq!(r.fresh, fresh);
        assert_eq!(r.pending, vec![64, 128]);
        assert!(decode_sr(&b, 8, c).is_err());
        assert!(decode_sr(&b, 7, c ^ 1).is_err());
        let mut bad = b.clone();
        bad[30] ^= 1;
        assert!(decode_sr(&bad, 7, c).is_err());
        let mut bad = b.clone();
        bad[20] = 0xff;
        bad[21] = 0xff;
        assert!(sr_len(&bad).is_err());
        assert!(decode_sr(&b[..b.len() - 8], 7, c).is_err());
    }

    #[test]
    fn area_header() {
        let a = encode_area(5);
        check_area(&a, 5).unwrap();
        assert!(check_area(&a, 6).is_err());
        let mut z = a;
        z[0] = b'x';
        assert!(check_area(&z, 5).is_err());
    }
}
