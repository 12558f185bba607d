//! The persistent B+tree's node and tuple formats, and the searches that
//! readers and writers share.
//!
//! Every tuple, leaf and inner node carries a CRC32C of its own bytes
//! (since format version 2; version 3, fixed-area magic `FRTINP03`, adds
//! the leaves' key fingerprints): a read verifies every
//! node and tuple it uses before it trusts a byte of it, so a stray write
//! or a bad media block is an error, never a wrong value. Each checksum is
//! [`block_crc`]: CRC32C started from the store's seed (`log::seed` of the
//! superblock nonce), then the block's pool offset as 8 LE bytes, then the
//! bytes listed below — so a block left by an earlier store (another
//! nonce), or a block's bytes found at another offset, never validate.
//!
//! # Tuple (one allocator block per key, little-endian)
//!
//! ```text
//!  0  2  key length (1..=MAX_KEY)
//!  2  2  key check: the low 16 bits of block_crc(key) — tells a damaged
//!        key from a damaged value, so the deep check names only keys it
//!        can trust (written once, at creation)
//!  4  4  value length (0..=MAX_VALUE)
//!  8  4  capacity: usable bytes of the block (written once, at creation)
//! 12  4  block_crc(bytes 0..12 ‖ key ‖ value)
//! 16  .. key bytes, then value bytes
//! ```
//!
//! An update in place rewrites bytes 4..16 (length, capacity, checksum)
//! and the value in the same log record, so a replay restores them
//! together.
//!
//! # Leaf (LEAF_BYTES = 576)
//!
//! ```text
//!  0  8  bitmap: bit i set = slot i live (bits 32.. zero)
//!  8  4  magic "LEAF"
//! 12  4  block_crc(bytes 0..12 ‖ bytes 16..576)
//! 16  1  flags: bit 0 (LEAF_FP) = the slots carry key fingerprints
//! 17 47  zero
//! 64 + 16 i  slot i: 8 key prefix (the key's first 8 bytes, zero-padded, as a
//!            big-endian number, stored LE), 8 tuple word: bits 0..48 the
//!            tuple's pool offset, bits 48..64 the key's fingerprint
//!            (`fingerprint`: the high 16 bits of its CRC-32C) in a
//!            LEAF_FP leaf, zero otherwise
//! ```
//!
//! Slots are unsorted: an insert writes a free slot and sets its bit, a
//! delete clears the bit (small logged writes, no shifting). A lookup
//! compares prefixes, then fingerprints, and reads a tuple's full key only
//! where both match: keys sharing their first 8 bytes (`user0000…`,
//! counters behind a common prefix) would otherwise cost a tuple read per
//! slot of the leaf. Every leaf of a format-3 store has LEAF_FP; a
//! format-2 store's leaves never do (a format-2 binary writing slots
//! without fingerprints into a LEAF_FP leaf would hide their keys, so
//! format 3 is refused by it, and format-3 code keeps a format-2 store in
//! its format).
//!
//! # Inner node (INNER_BYTES = 8192)
//!
//! ```text
//!    0  2  n: children (2..=64)
//!    2  2  level (1 = children are leaves)
//!    4  4  h: bytes of the key heap in use (separators are packed from 1536)
//!    8  4  magic "INNR"
//!   12  4  block_crc(bytes 0..12 ‖ 16..16+8n ‖ 528..528+16(n-1) ‖ 1536..1536+h)
//!   16 + 8 i   child i (pool offset)
//!  528 + 16 j  separator j (j < n - 1): 8 prefix, 4 offset in the node, 4 length
//! 1536 ..      key heap: separator bytes (own copies, never a tuple's)
//! ```
//!
//! The checksum covers exactly the bytes a search can use (the rest of the
//! node is left as it was by earlier versions and never read), so a read
//! copies those bytes once, verifies them, and searches the copy.
//!
//! Child `i` holds the keys `k` with `sep[i-1] <= k < sep[i]`. Separators are
//! the shortest prefix of the right half's first key that is still above the
//! left half's last key, so they are short for typical keys; with keys of up
//! to 1 KiB a node still holds at least 6 of them.

use crate::{EngineError, MAX_KEY, MAX_VALUE, Result};
use crossbeam_utils::sync::{ShardedLock, ShardedLockReadGuard, ShardedLockWriteGuard};
use ferrite_pmem::Region;
use rustc_hash::FxHashMap;
use std::cmp::Ordering;
use std::sync::PoisonError;

pub(crate) const SLOTS: usize = 32;
pub(crate) const FULL: u64 = (1 << SLOTS) - 1;
pub(crate) const LEAF_BYTES: usize = 64 + 16 * SLOTS;
pub(crate) const INNER_BYTES: usize = 8192;
pub(crate) const FANOUT: usize = 64;
const CHILD_AT: usize = 16;
const SEP_AT: usize = CHILD_AT + 8 * FANOUT;
const KEYS_AT: usize = SEP_AT + 16 * (FANOUT - 1);
const KEY_HEAP: usize = INNER_BYTES - KEYS_AT;
pub(crate) const MAGIC_LEAF: u32 = u32::from_le_bytes(*b"LEAF");
pub(crate) const MAGIC_INNER: u32 = u32::from_le_bytes(*b"INNR");
pub(crate) const TUPLE_HDR: usize = 16;
/// Where a node's and a tuple's checksum lies.
pub(crate) const CRC_AT: usize = 12;
/// Deepest tree walked before a cycle is assumed.
pub(crate) const MAX_DEPTH: usize = 32;

/// A copy of one node (an inner node's used parts, or a leaf in its first
/// `LEAF_BYTES`), verified.
pub(crate) type NodeBuf = [u8; INNER_BYTES];

pub(crate) fn node_buf() -> Box<NodeBuf> {
    vec![0u8; INNER_BYTES]
        .into_boxed_slice()
        .try_into()
        .expect("INNER_BYTES")
}

pub(crate) fn corrupt(what: impl Into<String>) -> EngineError {
    EngineError::Corrupt(format!("inp: {}", what.into()))
}

/// The checksum of the block at pool offset `off` made of `parts`
/// (module docs).
#[inline]
pub(crate) fn block_crc(seed: u32, off: u64, parts: &[&[u8]]) -> u32 {
    let mut c = crc32c::crc32c_append(seed, &off.to_le_bytes());
    for p in parts {
        c = crc32c::crc32c_append(c, p);
    }
    c
}

/// The checksum of a tuple at `t` with header bytes `h[0..12]`.
#[inline]
pub(crate) fn tuple_crc(seed: u32, t: u64, h: &[u8], key: &[u8], value: &[u8]) -> u32 {
    block_crc(seed, t, &[&h[..CRC_AT], key, value])
}

/// The key check of a tuple at `t` holding `key` (tuple format).
#[inline]
pub(crate) fn key_check(seed: u32, t: u64, key: &[u8]) -> u16 {
    block_crc(seed, t, &[key]) as u16
}

/// The header of a tuple at `t`: key length and check, value length,
/// capacity, and (with `sums`) its checksum.
pub(crate) fn tuple_header(
    seed: u32,
    t: u64,
    key: &[u8],
    value: &[u8],
    cap: usize,
    sums: bool,
) -> [u8; TUPLE_HDR] {
    let mut h = [0u8; TUPLE_HDR];
    h[0..2].copy_from_slice(&(key.len() as u16).to_le_bytes());
    if sums {
        h[2..4].copy_from_slice(&key_check(seed, t, key).to_le_bytes());
    }
    h[4..8].copy_from_slice(&(value.len() as u32).to_le_bytes());
    h[8..12].copy_from_slice(&(cap.min(u32::MAX as usize) as u32).to_le_bytes());
    if sums {
        let c = tuple_crc(seed, t, &h, key, value);
        h[CRC_AT..TUPLE_HDR].copy_from_slice(&c.to_le_bytes());
    }
    h
}

fn leaf_crc(seed: u32, off: u64, b: &[u8]) -> u32 {
    block_crc(seed, off, &[&b[..CRC_AT], &b[CRC_AT + 4..LEAF_BYTES]])
}

/// `(n, heap bytes used)` of an inner node's header, validated.
pub(crate) fn inner_hdr(b: &[u8], off: u64) -> Result<(usize, usize)> {
    let n = u16::from_le_bytes([b[0], b[1]]) as usize;
    let level = u16::from_le_bytes([b[2], b[3]]) as usize;
    let used = u32_at(b, 4) as usize;
    if !(2..=FANOUT).contains(&n) || level == 0 || level > MAX_DEPTH || used > KEY_HEAP {
        return Err(corrupt(format!(
            "inner {off:#x}: bad header ({n} children, level {level}, {used} key bytes)"
        )));
    }
    Ok((n, used))
}

fn inner_crc(seed: u32, off: u64, b: &[u8], n: usize, used: usize) -> u32 {
    block_crc(
        seed,
        off,
        &[
            &b[..CRC_AT],
            &b[CRC_AT + 4..CHILD_AT + 8 * n],
            &b[SEP_AT..SEP_AT + 16 * (n - 1)],
            &b[KEYS_AT..KEYS_AT + used],
        ],
    )
}

/// Writes the checksum of the node copy `b` (leaf or inner node, by its
/// magic) for pool offset `off`. A writer seals every node it changed
/// before logging it.
pub(crate) fn seal_node(seed: u32, off: u64, b: &mut [u8]) -> Result<()> {
    let c = match u32_at(b, 8) {
        MAGIC_LEAF => leaf_crc(seed, off, b),
        MAGIC_INNER => {
            let (n, used) = inner_hdr(b, off)?;
            inner_crc(seed, off, b, n, used)
        }
        x => return Err(corrupt(format!("node {off:#x}: bad magic {x:#x}"))),
    };
    b[CRC_AT..CRC_AT + 4].copy_from_slice(&c.to_le_bytes());
    Ok(())
}

/// Verifies a whole node copy `b` (a leaf's `LEAF_BYTES`, an inner node's
/// `INNER_BYTES`) read from pool offset `off`.
pub(crate) fn verify_copy(seed: u32, off: u64, b: &[u8]) -> Result<()> {
    match u32_at(b, 8) {
        MAGIC_LEAF if b.len() >= LEAF_BYTES => {
            check_crc("leaf", off, u32_at(b, CRC_AT), leaf_crc(seed, off, b))
        }
        MAGIC_INNER if b.len() >= INNER_BYTES => {
            let (n, used) = inner_hdr(b, off)?;
            check_crc(
                "inner node",
                off,
                u32_at(b, CRC_AT),
                inner_crc(seed, off, b, n, used),
            )
        }
        x => Err(corrupt(format!("node {off:#x}: bad magic {x:#x}"))),
    }
}

fn check_crc(what: &str, off: u64, stored: u32, computed: u32) -> Result<()> {
    if stored != computed {
        return Err(corrupt(format!(
            "{what} {off:#x} fails its checksum (stored {stored:#010x}, computed {computed:#010x})"
        )));
    }
    Ok(())
}

/// The first 8 key bytes, zero-padded, as a big-endian number: a smaller
/// prefix means a smaller key; equal prefixes need the full keys.
#[inline]
pub(crate) fn prefix(key: &[u8]) -> u64 {
    crate::key_prefix(key)
}

/// The shortest separator `s` with `a < s <= b` (requires `a < b`).
pub(crate) fn shortest_sep(a: &[u8], b: &[u8]) -> Vec<u8> {
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    b[..(common + 1).min(b.len())].to_vec()
}

#[inline]
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[inline]
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The pool and the bounds every offset read from it must respect.
#[derive(Clone)]
pub(crate) struct Geo {
    pub pool: Region,
    /// Heap bounds (pool offsets): every node and tuple lies inside.
    pub lo: u64,
    pub hi: u64,
    /// Checksum seed of the store (`log::seed` of its nonce).
    pub seed: u32,
    /// Verify checksums on reads (always, except for the cost
    /// measurement's switch, `StoreOptions::verify`).
    pub verify: bool,
    /// New leaves carry key fingerprints (`LEAF_FP`): a format-3 store.
    pub fingerprints: bool,
    /// Verified copies of inner nodes (see [`InnerCache`]).
    pub cache: std::sync::Arc<InnerCache>,
}

/// DRAM copies of the inner nodes reads have verified, by pool offset
/// (their used bytes, at their offsets). Inner nodes are few (one per
/// about a thousand keys) and change only when a leaf splits or an empty
/// leaf is unlinked, while every read walks two or three of them: a read
/// searches the verified copy instead of checksumming 1–2 KiB of the node
/// again (most of what verification cost a point read). A writer's commit
/// drops the copies of the inner nodes it changed, under the tree lock,
/// so readers never see a copy older than the media. Damage to the media
/// after a node was copied is not seen by reads — they keep using the
/// verified copy, so they still return only what was written — and is
/// found by the scrub and the deep check, which read the media
/// ([`Geo::load_media`]); a reopen verifies the node again.
///
/// Every read takes the lock two or three times, so it is a sharded one
/// (`crossbeam_utils::sync::ShardedLock`): a reader marks only its own
/// shard's cache line, and readers on other cores do not pull that line
/// back and forth as they did with one lock word; a writer (an insert of a
/// newly verified copy, a forget at a commit) takes every shard.
#[derive(Default)]
pub(crate) struct InnerCache(ShardedLock<FxHashMap<u64, Box<[u8]>>>);

type CacheMap = FxHashMap<u64, Box<[u8]>>;

impl InnerCache {
    /// Forgets the copy of node `off` (a writer changed it).
    pub(crate) fn forget(&self, off: u64) {
        self.write().remove(&off);
    }

    /// The map, shared. A panic while a writer held it (out of memory in
    /// an insert) leaves the map whole: the poison is ignored.
    fn read(&self) -> ShardedLockReadGuard<'_, CacheMap> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> ShardedLockWriteGuard<'_, CacheMap> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Geo {
    #[inline]
    pub fn check(&self, off: u64, len: usize) -> Result<()> {
        // A growable pool's heap range is its reservation: the block must
        // also lie in what is mapped (the pool's own check).
        if off < self.lo
            || off.checked_add(len as u64).is_none_or(|e| e > self.hi)
            || self.pool.check(off as usize, len).is_err()
        {
            return Err(corrupt(format!(
                "block {off:#x}+{len} outside the heap {:#x}..{:#x}",
                self.lo, self.hi
            )));
        }
        Ok(())
    }

    /// A tuple's `(key length, value length, capacity)`, validated (not
    /// its checksum: [`Geo::tuple_read`] verifies that).
    pub fn tuple_hdr(&self, t: u64) -> Result<(usize, usize, usize)> {
        let (k, v, cap, _) = self.tuple_hdr_crc(t)?;
        Ok((k, v, cap))
    }

    fn tuple_hdr_crc(&self, t: u64) -> Result<(usize, usize, usize, [u8; TUPLE_HDR])> {
        self.check(t, TUPLE_HDR)?;
        let mut h = [0u8; TUPLE_HDR];
        self.pool.read(t as usize, &mut h);
        let (k, v, cap) = (
            u16::from_le_bytes([h[0], h[1]]) as usize,
            u32_at(&h, 4) as usize,
            u32_at(&h, 8) as usize,
        );
        if k == 0 || k > MAX_KEY || v > MAX_VALUE || TUPLE_HDR + k + v > cap {
            return Err(corrupt(format!("tuple {t:#x}: bad lengths {k}/{v}/{cap}")));
        }
        self.check(t, cap)?;
        Ok((k, v, cap, h))
    }

    /// Asks the CPU to bring the first `bytes` of tuple `t` into cache
    /// (a hint: nothing outside the heap is touched). A scan issues it for
    /// the tuples it is about to read so their cache misses overlap
    /// instead of following one another.
    pub fn prefetch_tuple(&self, t: u64, bytes: usize) {
        let mut at = t;
        while at < t + bytes as u64 && self.check(at, 1).is_ok() {
            self.pool.prefetch(at as usize);
            at += 64;
        }
    }

    /// The tuple's key, read into `buf` (unverified: for comparisons
    /// whose result a read checks again through [`Geo::tuple_read`]).
    pub fn tuple_key<'b>(&self, t: u64, buf: &'b mut [u8; MAX_KEY]) -> Result<&'b [u8]> {
        let (k, _, _) = self.tuple_hdr(t)?;
        self.pool.read(t as usize + TUPLE_HDR, &mut buf[..k]);
        Ok(&buf[..k])
    }

    /// True when the tuple's key is `key`.
    pub fn tuple_key_eq(&self, t: u64, key: &[u8], buf: &mut [u8; MAX_KEY]) -> Result<bool> {
        let (k, _, _) = self.tuple_hdr(t)?;
        if k != key.len() {
            return Ok(false);
        }
        self.pool.read(t as usize + TUPLE_HDR, &mut buf[..k]);
        Ok(&buf[..k] == key)
    }

    /// Reads the tuple's key into `kbuf` and its value into `out`
    /// (cleared first), and verifies its checksum: a damaged tuple is
    /// [`EngineError::DamagedValue`] naming the key as stored. Returns
    /// the key's length.
    pub fn tuple_read(&self, t: u64, kbuf: &mut [u8; MAX_KEY], out: &mut Vec<u8>) -> Result<usize> {
        let (k, v, _, h) = self.tuple_hdr_crc(t)?;
        self.pool.read(t as usize + TUPLE_HDR, &mut kbuf[..k]);
        out.clear();
        out.resize(v, 0);
        self.pool.read(t as usize + TUPLE_HDR + k, out);
        if self.verify {
            let stored = u32_at(&h, CRC_AT);
            let computed = tuple_crc(self.seed, t, &h, &kbuf[..k], out);
            if stored != computed {
                out.clear();
                return Err(EngineError::DamagedValue {
                    key: kbuf[..k].to_vec(),
                    detail: format!(
                        "inp: tuple {t:#x} fails its checksum (stored {stored:#010x}, computed {computed:#010x})"
                    ),
                });
            }
        }
        Ok(k)
    }

    /// Verifies the tuple at `t` (for a writer about to change it, and for
    /// a read that did not find its key among the tuples sharing its
    /// prefix: one of them may be it, damaged).
    /// True when the key stored in tuple `t` passes its key check (the
    /// header must have been validated).
    pub fn tuple_key_ok(&self, t: u64, key: &[u8]) -> bool {
        let mut h = [0u8; 4];
        self.pool.read(t as usize, &mut h);
        u16::from_le_bytes([h[2], h[3]]) == key_check(self.seed, t, key)
    }

    /// The key stored in tuple `t`, read into `buf` and, with
    /// verification on, checked against its key check (the key, not the
    /// value).
    pub fn tuple_key_verify<'b>(&self, t: u64, buf: &'b mut [u8; MAX_KEY]) -> Result<&'b [u8]> {
        let k = self.tuple_key(t, buf)?;
        if self.verify && !self.tuple_key_ok(t, k) {
            return Err(EngineError::DamagedValue {
                key: k.to_vec(),
                detail: format!("inp: tuple {t:#x}: its key fails its key check"),
            });
        }
        Ok(k)
    }

    /// CRC-32C `c` extended over pool bytes `at..end`, read through `chunk`.
    fn crc_stream(&self, mut c: u32, mut at: usize, end: usize, chunk: &mut [u8]) -> u32 {
        while at < end {
            let n = (end - at).min(chunk.len());
            self.pool.read(at, &mut chunk[..n]);
            c = crc32c::crc32c_append(c, &chunk[..n]);
            at += n;
        }
        c
    }

    pub fn tuple_verify(&self, t: u64) -> Result<()> {
        let (k, v, _, h) = self.tuple_hdr_crc(t)?;
        if !self.verify {
            return Ok(());
        }
        // Streamed through a buffer on the stack: a writer verifies before
        // every update in place, and must not pay an allocation for it
        // (one chunk for tuples up to 4 KiB: each chunk sets up the CRC
        // kernel again). A small tuple gets a small buffer: zeroing 4 KiB
        // cost more than its checksum.
        let c = crc32c::crc32c_append(self.seed, &t.to_le_bytes());
        let c = crc32c::crc32c_append(c, &h[..CRC_AT]);
        let (at, end) = (t as usize + TUPLE_HDR, t as usize + TUPLE_HDR + k + v);
        let c = if k + v <= 512 {
            self.crc_stream(c, at, end, &mut [0u8; 512])
        } else {
            self.crc_stream(c, at, end, &mut [0u8; 4096])
        };
        let stored = u32_at(&h, CRC_AT);
        if stored != c {
            let mut kbuf = vec![0u8; k];
            self.pool.read(t as usize + TUPLE_HDR, &mut kbuf);
            return Err(EngineError::DamagedValue {
                key: kbuf,
                detail: format!(
                    "inp: tuple {t:#x} fails its checksum (stored {stored:#010x}, computed {c:#010x})"
                ),
            });
        }
        Ok(())
    }
}

/// What [`Src::load`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Node {
    Leaf,
    /// An inner node of `n` children.
    Inner(usize),
}

/// Where nodes are read from: the pool (readers) or a writer's staged
/// copies over the pool.
pub(crate) trait Src {
    /// Copies node `off` into `b` — a leaf into `b[..LEAF_BYTES]`, an
    /// inner node's used parts at their offsets — and verifies it (a
    /// writer's own staged copies are not verified: it made them).
    fn load(&self, off: u64, b: &mut NodeBuf) -> Result<Node>;

    /// Steps through node `off` on a descent: for an inner node, `pick`
    /// chooses a child from the node's verified bytes (at their offsets)
    /// and its child count, and the answer is `Some((index, child, n))`;
    /// a leaf is loaded into `b` and the answer is `None`. The default
    /// loads every node into `b`; [`Geo`] searches its cached copy of an
    /// inner node in place.
    fn pick(
        &self,
        off: u64,
        b: &mut NodeBuf,
        pick: &mut dyn FnMut(&[u8], usize) -> Result<usize>,
    ) -> Result<Option<(usize, u64, usize)>> {
        pick_by_load(self, off, b, pick)
    }
}

/// [`Src::pick`] on the inner node whose verified bytes are `b` (at
/// their offsets): `(index, child, n)`.
pub(crate) fn pick_in(
    b: &[u8],
    off: u64,
    pick: &mut dyn FnMut(&[u8], usize) -> Result<usize>,
) -> Result<(usize, u64, usize)> {
    let (n, _) = inner_hdr(b, off)?;
    let i = pick(b, n)?;
    Ok((i, inner_child_at(b, i), n))
}

/// [`Src::pick`] through [`Src::load`]: the node copied into `b` first.
pub(crate) fn pick_by_load<S: Src + ?Sized>(
    s: &S,
    off: u64,
    b: &mut NodeBuf,
    pick: &mut dyn FnMut(&[u8], usize) -> Result<usize>,
) -> Result<Option<(usize, u64, usize)>> {
    match s.load(off, b)? {
        Node::Leaf => Ok(None),
        Node::Inner(_) => pick_in(&b[..], off, pick).map(Some),
    }
}

impl Src for Geo {
    fn load(&self, off: u64, b: &mut NodeBuf) -> Result<Node> {
        if self.verify {
            if let Some(c) = self.cache.read().get(&off) {
                b[..c.len()].copy_from_slice(c);
                let (n, _) = inner_hdr(b, off)?;
                return Ok(Node::Inner(n));
            }
            let node = self.load_media(off, b)?;
            if node != Node::Leaf {
                let used = u32_at(b, 4) as usize;
                self.cache.write().insert(off, b[..KEYS_AT + used].into());
            }
            return Ok(node);
        }
        self.load_media(off, b)
    }

    fn pick(
        &self,
        off: u64,
        b: &mut NodeBuf,
        pick: &mut dyn FnMut(&[u8], usize) -> Result<usize>,
    ) -> Result<Option<(usize, u64, usize)>> {
        if self.verify
            && let Some(c) = self.cache.read().get(&off)
        {
            // The copy was verified when cached: searched where it lies,
            // not copied out first (most of a read's time otherwise).
            return pick_in(c, off, pick).map(Some);
        }
        pick_by_load(self, off, b, pick)
    }
}

impl Geo {
    /// [`Src::load`] from the media, never from the copies of
    /// [`InnerCache`] (the scrub, the walk, the count at open).
    pub(crate) fn load_media(&self, off: u64, b: &mut NodeBuf) -> Result<Node> {
        self.check(off, 16)?;
        self.pool.read(off as usize, &mut b[..16]);
        match u32_at(b, 8) {
            MAGIC_LEAF => {
                self.check(off, LEAF_BYTES)?;
                self.pool.read(off as usize + 16, &mut b[16..LEAF_BYTES]);
                if self.verify {
                    check_crc("leaf", off, u32_at(b, CRC_AT), leaf_crc(self.seed, off, b))?;
                }
                leaf_bitmap(b)?;
                Ok(Node::Leaf)
            }
            MAGIC_INNER => {
                self.check(off, INNER_BYTES)?;
                let (n, used) = inner_hdr(b, off)?;
                let o = off as usize;
                self.pool.read(o + 16, &mut b[16..CHILD_AT + 8 * n]);
                self.pool
                    .read(o + SEP_AT, &mut b[SEP_AT..SEP_AT + 16 * (n - 1)]);
                self.pool.read(o + KEYS_AT, &mut b[KEYS_AT..KEYS_AT + used]);
                if self.verify {
                    check_crc(
                        "inner node",
                        off,
                        u32_at(b, CRC_AT),
                        inner_crc(self.seed, off, b, n, used),
                    )?;
                }
                Ok(Node::Inner(n))
            }
            x => Err(corrupt(format!("node {off:#x}: bad magic {x:#x}"))),
        }
    }
}

/// Compares separator `j` of the inner node copy `b` with `key`
/// (`sep.cmp(key)`).
fn sep_cmp(b: &[u8], off: u64, j: usize, key: &[u8], kp: u64) -> Result<Ordering> {
    let e = SEP_AT + 16 * j;
    let sp = u64_at(b, e);
    if sp != kp {
        return Ok(sp.cmp(&kp));
    }
    let used = u32_at(b, 4) as usize;
    let (ko, kl) = (u32_at(b, e + 8) as usize, u32_at(b, e + 12) as usize);
    if kl == 0 || kl > MAX_KEY || ko < KEYS_AT || ko + kl > KEYS_AT + used {
        return Err(corrupt(format!(
            "inner {off:#x}: separator {j} out of bounds"
        )));
    }
    Ok(b[ko..ko + kl].cmp(key))
}

/// The child of the inner node copy `b` (at `off`, `n` children) that
/// holds `key`: `(index, child)`.
pub(crate) fn inner_child(
    b: &[u8],
    off: u64,
    n: usize,
    key: &[u8],
    kp: u64,
) -> Result<(usize, u64)> {
    let (mut lo, mut hi) = (0, n - 1);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if sep_cmp(b, off, mid, key, kp)? != Ordering::Greater {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok((lo, inner_child_at(b, lo)))
}

/// Whether `key` lies inside child `i`'s span in the inner node copy `b`
/// (at `off`, `n` children): `(lower, upper)`, each `None` where this node
/// gives the child no such bound (the first child has no lower one, the
/// last no upper one), else whether `key` respects it.
pub(crate) fn child_span(
    b: &[u8],
    off: u64,
    n: usize,
    i: usize,
    key: &[u8],
    kp: u64,
) -> Result<(Option<bool>, Option<bool>)> {
    let lower = match i {
        0 => None,
        _ => Some(sep_cmp(b, off, i - 1, key, kp)? != Ordering::Greater),
    };
    let upper = if i + 1 < n {
        Some(sep_cmp(b, off, i, key, kp)? == Ordering::Greater)
    } else {
        None
    };
    Ok((lower, upper))
}

/// Child `i` of the inner node copy `b`.
#[inline]
pub(crate) fn inner_child_at(b: &[u8], i: usize) -> u64 {
    u64_at(b, CHILD_AT + 8 * i)
}

/// Descends from `root` to the leaf that holds `key`, recording the inner
/// nodes passed and the child taken in `path`. The leaf is left, verified,
/// in `nb[..LEAF_BYTES]`.
pub(crate) fn descend<S: Src>(
    s: &S,
    root: u64,
    key: &[u8],
    path: &mut Vec<(u64, usize)>,
    nb: &mut NodeBuf,
) -> Result<u64> {
    // Index look-ups, of reads and of writes: P2's SCAN.
    let _p = crate::breakdown::phase(crate::breakdown::Phase::Scan);
    path.clear();
    let kp = prefix(key);
    let mut cur = root;
    for _ in 0..MAX_DEPTH {
        let at = cur;
        let mut choose = |b: &[u8], n: usize| inner_child(b, at, n, key, kp).map(|(i, _)| i);
        match s.pick(cur, nb, &mut choose)? {
            None => return Ok(cur),
            Some((i, c, _)) => {
                path.push((cur, i));
                cur = c;
            }
        }
    }
    Err(corrupt("tree deeper than 32 levels (a cycle?)"))
}

/// Descends to the leftmost (`right` false) or rightmost leaf below `cur`,
/// pushing the path; the leaf is left in `nb`.
pub(crate) fn edge<S: Src>(
    s: &S,
    mut cur: u64,
    right: bool,
    path: &mut Vec<(u64, usize)>,
    nb: &mut NodeBuf,
) -> Result<u64> {
    for _ in 0..MAX_DEPTH {
        let mut choose = |_: &[u8], n: usize| Ok(if right { n - 1 } else { 0 });
        match s.pick(cur, nb, &mut choose)? {
            None => return Ok(cur),
            Some((i, c, _)) => {
                path.push((cur, i));
                cur = c;
            }
        }
        if path.len() > MAX_DEPTH {
            break;
        }
    }
    Err(corrupt("tree deeper than 32 levels (a cycle?)"))
}

/// The leaf after (`back` false) or before the one `path` leads to: up to
/// the first ancestor with a next (previous) child, then down its edge.
/// `None` past the last (first) leaf. The leaf is left in `nb`.
pub(crate) fn step<S: Src>(
    s: &S,
    path: &mut Vec<(u64, usize)>,
    back: bool,
    nb: &mut NodeBuf,
) -> Result<Option<u64>> {
    loop {
        let Some((p, i)) = path.pop() else {
            return Ok(None);
        };
        // The next child over, if the node has one (else climb on).
        let mut over = None;
        let mut choose = |_: &[u8], n: usize| {
            over = if back {
                i.checked_sub(1)
            } else {
                Some(i + 1).filter(|&j| j < n)
            };
            Ok(over.unwrap_or(i))
        };
        let Some((j, c, _)) = s.pick(p, nb, &mut choose)? else {
            return Err(corrupt(format!("node {p:#x} on a path is a leaf")));
        };
        if over.is_some() {
            path.push((p, j));
            return edge(s, c, back, path, nb).map(Some);
        }
    }
}

// ---- leaves (operating on a copy of the node) ----------------------------

#[inline]
pub(crate) fn leaf_bitmap(b: &[u8]) -> Result<u64> {
    let bm = u64_at(b, 0);
    if bm & !FULL != 0 || u32_at(b, 8) != MAGIC_LEAF {
        return Err(corrupt("leaf: bad bitmap or magic"));
    }
    Ok(bm)
}

/// Where a leaf's flags byte lies, and its one flag (module docs).
const LEAF_FLAGS_AT: usize = 16;
const LEAF_FP: u8 = 1;
/// Bits of a slot's tuple word that hold the pool offset.
const OFF_BITS: u32 = 48;
/// Pool offsets a slot can hold: below 2⁴⁸ (256 TiB).
pub(crate) const MAX_TUPLE_OFF: u64 = 1 << OFF_BITS;

/// The fingerprint of `key` a LEAF_FP slot records: the high 16 bits of
/// its CRC-32C (on media: never change it).
#[inline]
pub(crate) fn fingerprint(key: &[u8]) -> u16 {
    (crc32c::crc32c(key) >> 16) as u16
}

/// Whether the leaf copy `b` has fingerprints in its slots.
#[inline]
pub(crate) fn leaf_has_fp(b: &[u8]) -> bool {
    b[LEAF_FLAGS_AT] & LEAF_FP != 0
}

/// Slot `i` of a leaf copy: `(key prefix, tuple offset)`.
#[inline]
pub(crate) fn slot(b: &[u8], i: usize) -> (u64, u64) {
    let w = u64_at(b, 72 + 16 * i);
    (u64_at(b, 64 + 16 * i), w & (MAX_TUPLE_OFF - 1))
}

/// Whether slot `i` of the leaf copy `b` is the one `key` belongs in:
/// its prefix, and in a LEAF_FP leaf its fingerprint, are the key's (the
/// walk and the scrub check every slot's tuple against its slot: a wrong
/// fingerprint would hide the key from lookups while scans still saw it).
pub(crate) fn slot_matches(b: &[u8], i: usize, key: &[u8]) -> bool {
    slot(b, i).0 == prefix(key) && (!leaf_has_fp(b) || slot_fp(b, i) == fingerprint(key))
}

/// The fingerprint slot `i` records (meaningful in a LEAF_FP leaf).
#[inline]
fn slot_fp(b: &[u8], i: usize) -> u16 {
    (u64_at(b, 72 + 16 * i) >> OFF_BITS) as u16
}

/// Sets slot `i` of a leaf copy to tuple `t` (below [`MAX_TUPLE_OFF`])
/// holding `key` (prefix `kp`), with the key's fingerprint in a LEAF_FP
/// leaf.
pub(crate) fn set_slot(b: &mut [u8], i: usize, kp: u64, t: u64, key: &[u8]) {
    debug_assert!(t < MAX_TUPLE_OFF);
    let fp = if leaf_has_fp(b) {
        u64::from(fingerprint(key)) << OFF_BITS
    } else {
        0
    };
    b[64 + 16 * i..72 + 16 * i].copy_from_slice(&kp.to_le_bytes());
    b[72 + 16 * i..80 + 16 * i].copy_from_slice(&(t | fp).to_le_bytes());
}

/// Copies slot `i` of leaf copy `src` (prefix, tuple and fingerprint as
/// they are) into slot `j` of leaf copy `dst`, of the same format.
pub(crate) fn copy_slot(src: &[u8], i: usize, dst: &mut [u8], j: usize) {
    debug_assert_eq!(leaf_has_fp(src), leaf_has_fp(dst));
    dst[64 + 16 * j..80 + 16 * j].copy_from_slice(&src[64 + 16 * i..80 + 16 * i]);
}

pub(crate) fn set_bitmap(b: &mut [u8], bm: u64) {
    b[0..8].copy_from_slice(&bm.to_le_bytes());
}

/// An empty leaf, with fingerprints in its slots when `fingerprints` (a
/// format-3 store: [`Geo::fingerprints`]).
pub(crate) fn init_leaf(b: &mut [u8], fingerprints: bool) {
    b.fill(0);
    b[8..12].copy_from_slice(&MAGIC_LEAF.to_le_bytes());
    if fingerprints {
        b[LEAF_FLAGS_AT] = LEAF_FP;
    }
}

/// The slot and tuple of `key` in the (verified) leaf copy `b`. When the
/// key is not there, every tuple that shares its prefix is verified: one
/// of them may be the key's, its key bytes damaged — an error then, not
/// "absent".
/// Finds `key` (prefix `kp`) in leaf copy `b`: `(slot, tuple)`.
///
/// When it is absent but tuples of the leaf share its prefix, one of them
/// may be it with a damaged key, so they are checked before "absent" is
/// trusted: with `whole`, each tuple's checksum (a read: it must never
/// answer "absent" for a damaged key); without, each stored key against
/// the tuple's 16-bit key check (a writer inserting a key: keys sharing
/// their first 8 bytes, such as ascending counters behind a common
/// prefix, would otherwise make every insert checksum every tuple of its
/// leaf; a damaged key that passes the key check, one in 65 536, leaves a
/// duplicate the deep check reports).
pub(crate) fn leaf_find(
    geo: &Geo,
    b: &[u8],
    key: &[u8],
    kp: u64,
    buf: &mut [u8; MAX_KEY],
    whole: bool,
) -> Result<Option<(usize, u64)>> {
    let all = leaf_bitmap(b)?;
    // A slot whose fingerprint differs holds another key (the leaf was
    // verified, so the fingerprint is the one written with the key): its
    // tuple is neither read nor suspected.
    let fp = leaf_has_fp(b).then(|| fingerprint(key));
    let candidate = |i: usize, p: u64| p == kp && fp.is_none_or(|f| slot_fp(b, i) == f);
    let mut bm = all;
    let mut shared = false;
    while bm != 0 {
        let i = bm.trailing_zeros() as usize;
        bm &= bm - 1;
        let (p, t) = slot(b, i);
        if candidate(i, p) {
            if geo.tuple_key_eq(t, key, buf)? {
                return Ok(Some((i, t)));
            }
            shared = true;
        }
    }
    if shared && geo.verify {
        let mut bm = all;
        while bm != 0 {
            let i = bm.trailing_zeros() as usize;
            bm &= bm - 1;
            let (p, t) = slot(b, i);
            if candidate(i, p) {
                let checked = if whole {
                    geo.tuple_verify(t)
                } else {
                    geo.tuple_key_verify(t, buf).map(drop)
                };
                checked.map_err(|e| match e {
                    EngineError::DamagedValue { detail, .. } => EngineError::DamagedValue {
                        key: key.to_vec(),
                        detail: format!(
                            "not found intact: {detail}, a tuple of the same 8-byte prefix in its leaf, may be it"
                        ),
                    },
                    e => e,
                })?;
            }
        }
    }
    Ok(None)
}

/// The live entries of a leaf copy as `(key, tuple)`, sorted by key.
pub(crate) fn leaf_sorted(geo: &Geo, b: &[u8]) -> Result<Vec<(Vec<u8>, u64)>> {
    let mut bm = leaf_bitmap(b)?;
    let mut v = Vec::with_capacity(bm.count_ones() as usize);
    let mut buf = [0u8; MAX_KEY];
    while bm != 0 {
        let i = bm.trailing_zeros() as usize;
        bm &= bm - 1;
        let (_, t) = slot(b, i);
        v.push((geo.tuple_key(t, &mut buf)?.to_vec(), t));
    }
    v.sort_unstable();
    Ok(v)
}

/// The live slots of leaf copy `b` in key order, as `(prefix, tuple)`,
/// into `out` (cleared first), reading full keys only where prefixes tie:
/// a scan then reads the tuples it returns and no others (with random
/// keys no two prefixes of a leaf tie; keys sharing longer prefixes cost
/// what [`leaf_sorted`] costs). The prefixes come from the verified leaf;
/// a scan still checks each tuple's key against its slot's prefix.
pub(crate) fn leaf_order(geo: &Geo, b: &[u8], out: &mut Vec<(u64, u64)>) -> Result<()> {
    let mut bm = leaf_bitmap(b)?;
    out.clear();
    while bm != 0 {
        let i = bm.trailing_zeros() as usize;
        bm &= bm - 1;
        out.push(slot(b, i));
    }
    out.sort_unstable();
    let mut at = 0;
    while at < out.len() {
        let end = at + out[at..].iter().take_while(|e| e.0 == out[at].0).count();
        if end - at > 1 {
            let mut buf = [0u8; MAX_KEY];
            let mut tied = Vec::with_capacity(end - at);
            for &(_, t) in &out[at..end] {
                tied.push((geo.tuple_key(t, &mut buf)?.to_vec(), t));
            }
            tied.sort_unstable();
            for (e, (_, t)) in out[at..end].iter_mut().zip(tied) {
                e.1 = t;
            }
        }
        at = end;
    }
    Ok(())
}

// ---- inner nodes (decoded form for the rare writer changes) -------------

/// An inner node, decoded.
#[derive(Clone, Debug, Default)]
pub(crate) struct InnerD {
    pub level: u16,
    pub children: Vec<u64>,
    pub seps: Vec<Vec<u8>>,
}

impl InnerD {
    pub fn decode(b: &[u8], off: u64) -> Result<InnerD> {
        let bad = |w: &str| corrupt(format!("inner {off:#x}: {w}"));
        if b.len() < INNER_BYTES || u32_at(b, 8) != MAGIC_INNER {
            return Err(bad("bad magic"));
        }
        let (n, used) = inner_hdr(b, off)?;
        let level = u16::from_le_bytes([b[2], b[3]]);
        let children = (0..n).map(|i| u64_at(b, CHILD_AT + 8 * i)).collect();
        let mut seps = Vec::with_capacity(n - 1);
        for j in 0..n - 1 {
            let (ko, kl) = (
                u32_at(b, SEP_AT + 16 * j + 8) as usize,
                u32_at(b, SEP_AT + 16 * j + 12) as usize,
            );
            if kl == 0 || kl > MAX_KEY || ko < KEYS_AT || ko + kl > KEYS_AT + used {
                return Err(bad("separator out of bounds"));
            }
            seps.push(b[ko..ko + kl].to_vec());
        }
        Ok(InnerD {
            level,
            children,
            seps,
        })
    }

    fn key_bytes(seps: &[Vec<u8>]) -> usize {
        seps.iter().map(Vec::len).sum()
    }

    pub fn fits(&self) -> bool {
        self.children.len() <= FANOUT && Self::key_bytes(&self.seps) <= KEY_HEAP
    }

    /// Encodes into `b` (INNER_BYTES); bytes past what is used are left as
    /// they were, so that a logged change diffs small.
    pub fn encode(&self, b: &mut [u8]) {
        let n = self.children.len();
        b[0..2].copy_from_slice(&(n as u16).to_le_bytes());
        b[2..4].copy_from_slice(&self.level.to_le_bytes());
        b[4..8].copy_from_slice(&(Self::key_bytes(&self.seps) as u32).to_le_bytes());
        b[8..12].copy_from_slice(&MAGIC_INNER.to_le_bytes());
        b[12..16].fill(0);
        for (i, c) in self.children.iter().enumerate() {
            b[CHILD_AT + 8 * i..CHILD_AT + 8 * i + 8].copy_from_slice(&c.to_le_bytes());
        }
        let mut ko = KEYS_AT;
        for (j, s) in self.seps.iter().enumerate() {
            let e = SEP_AT + 16 * j;
            b[e..e + 8].copy_from_slice(&prefix(s).to_le_bytes());
            b[e + 8..e + 12].copy_from_slice(&(ko as u32).to_le_bytes());
            b[e + 12..e + 16].copy_from_slice(&(s.len() as u32).to_le_bytes());
            b[ko..ko + s.len()].copy_from_slice(s);
            ko += s.len();
        }
    }

    /// Splits an overfull node into `(left, separator moved up, right)`,
    /// both halves fitting, as balanced by key bytes as counts allow.
    pub fn split(self) -> Result<(InnerD, Vec<u8>, InnerD)> {
        let ns = self.seps.len();
        let total = Self::key_bytes(&self.seps);
        let mut best: Option<(usize, usize)> = None;
        let mut left_bytes = 0;
        for m in 1..ns - 1 {
            left_bytes += self.seps[m - 1].len();
            let right_bytes = total - left_bytes - self.seps[m].len();
            let (lc, rc) = (m + 1, ns - m);
            if lc <= FANOUT && rc <= FANOUT && left_bytes <= KEY_HEAP && right_bytes <= KEY_HEAP {
                let score = left_bytes.abs_diff(right_bytes) + 64 * lc.abs_diff(rc);
                if best.is_none_or(|(_, s)| score < s) {
                    best = Some((m, score));
                }
            }
        }
        let (m, _) = best.ok_or_else(|| corrupt("inner node cannot be split"))?;
        let mut seps = self.seps;
        let mut children = self.children;
        let rseps = seps.split_off(m + 1);
        let up = seps.pop().expect("m < len");
        let rchildren = children.split_off(m + 1);
        Ok((
            InnerD {
                level: self.level,
                children,
                seps,
            },
            up,
            InnerD {
                level: self.level,
                children: rchildren,
                seps: rseps,
            },
        ))
    }
}
