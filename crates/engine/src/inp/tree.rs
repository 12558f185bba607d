//! The persistent B+tree's node and tuple formats, and the searches that
//! readers and writers share.
//!
//! # Tuple (one allocator block per key, little-endian)
//!
//! ```text
//!  0  4  key length (1..=MAX_KEY)
//!  4  4  value length (0..=MAX_VALUE)
//!  8  4  capacity: usable bytes of the block (written once, at creation)
//! 12  4  zero
//! 16  .. key bytes, then value bytes
//! ```
//!
//! # Leaf (LEAF_BYTES = 576)
//!
//! ```text
//!  0  8  bitmap: bit i set = slot i live (bits 32.. zero)
//!  8  4  magic "LEAF"
//! 12  4  zero
//! 64 + 16 i  slot i: 8 key prefix (the key's first 8 bytes, zero-padded, as a
//!            big-endian number, stored LE), 8 tuple pool offset
//! ```
//!
//! Slots are unsorted: an insert writes a free slot and sets its bit, a
//! delete clears the bit (two small logged writes, no shifting). A lookup
//! compares prefixes and reads a tuple's full key only on a prefix match.
//!
//! # Inner node (INNER_BYTES = 8192)
//!
//! ```text
//!    0  2  n: children (2..=64)
//!    2  2  level (1 = children are leaves)
//!    4  4  bytes of the key heap in use
//!    8  4  magic "INNR"
//!   12  4  zero
//!   16 + 8 i   child i (pool offset)
//!  528 + 16 j  separator j (j < n - 1): 8 prefix, 4 offset in the node, 4 length
//! 1536 ..      key heap: separator bytes (own copies, never a tuple's)
//! ```
//!
//! Child `i` holds the keys `k` with `sep[i-1] <= k < sep[i]`. Separators are
//! the shortest prefix of the right half's first key that is still above the
//! left half's last key, so they are short for typical keys; with keys of up
//! to 1 KiB a node still holds at least 6 of them.

use crate::{EngineError, MAX_KEY, MAX_VALUE, Result};
use ferrite_pmem::Region;
use std::cmp::Ordering;

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
/// Deepest tree walked before a cycle is assumed.
pub(crate) const MAX_DEPTH: usize = 32;

pub(crate) fn corrupt(what: impl Into<String>) -> EngineError {
    EngineError::Corrupt(format!("inp: {}", what.into()))
}

/// The first 8 key bytes, zero-padded, as a big-endian number: a smaller
/// prefix means a smaller key; equal prefixes need the full keys.
#[inline]
pub(crate) fn prefix(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
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

    /// A tuple's `(key length, value length, capacity)`, validated.
    pub fn tuple_hdr(&self, t: u64) -> Result<(usize, usize, usize)> {
        self.check(t, TUPLE_HDR)?;
        let mut h = [0u8; TUPLE_HDR];
        self.pool.read(t as usize, &mut h);
        let (k, v, cap) = (
            u32_at(&h, 0) as usize,
            u32_at(&h, 4) as usize,
            u32_at(&h, 8) as usize,
        );
        if k == 0 || k > MAX_KEY || v > MAX_VALUE || TUPLE_HDR + k + v > cap {
            return Err(corrupt(format!("tuple {t:#x}: bad lengths {k}/{v}/{cap}")));
        }
        self.check(t, cap)?;
        Ok((k, v, cap))
    }

    /// The tuple's key, read into `buf`.
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

    /// Reads the tuple's value into `out` (cleared first).
    pub fn tuple_value(&self, t: u64, out: &mut Vec<u8>) -> Result<()> {
        let (k, v, _) = self.tuple_hdr(t)?;
        out.clear();
        out.resize(v, 0);
        self.pool.read(t as usize + TUPLE_HDR + k, out);
        Ok(())
    }
}

/// Where nodes are read from: the pool (readers) or a writer's staged
/// copies over the pool.
pub(crate) trait Src {
    /// Reads `dst.len()` bytes at `rel` of the node of `size` bytes at `base`.
    fn read(&self, base: u64, size: usize, rel: usize, dst: &mut [u8]) -> Result<()>;
}

impl Src for Geo {
    #[inline]
    fn read(&self, base: u64, size: usize, rel: usize, dst: &mut [u8]) -> Result<()> {
        self.check(base, size)?;
        debug_assert!(rel + dst.len() <= size);
        self.pool.read(base as usize + rel, dst);
        Ok(())
    }
}

/// A node's kind, from its magic.
pub(crate) fn is_leaf<S: Src>(s: &S, off: u64) -> Result<bool> {
    let mut m = [0u8; 4];
    s.read(off, LEAF_BYTES, 8, &mut m)?;
    match u32::from_le_bytes(m) {
        MAGIC_LEAF => Ok(true),
        MAGIC_INNER => Ok(false),
        x => Err(corrupt(format!("node {off:#x}: bad magic {x:#x}"))),
    }
}

/// Compares separator `j` of inner node `off` with `key` (`sep.cmp(key)`).
fn sep_cmp<S: Src>(
    s: &S,
    off: u64,
    j: usize,
    key: &[u8],
    kp: u64,
    buf: &mut [u8; MAX_KEY],
) -> Result<Ordering> {
    let mut e = [0u8; 16];
    s.read(off, INNER_BYTES, SEP_AT + 16 * j, &mut e)?;
    let sp = u64_at(&e, 0);
    if sp != kp {
        return Ok(sp.cmp(&kp));
    }
    let (ko, kl) = (u32_at(&e, 8) as usize, u32_at(&e, 12) as usize);
    if kl == 0 || kl > MAX_KEY || ko < KEYS_AT || ko + kl > INNER_BYTES {
        return Err(corrupt(format!(
            "inner {off:#x}: separator {j} out of bounds"
        )));
    }
    s.read(off, INNER_BYTES, ko, &mut buf[..kl])?;
    Ok(buf[..kl].cmp(key))
}

/// The child of inner node `off` that holds `key`: `(index, child)`.
pub(crate) fn inner_child<S: Src>(
    s: &S,
    off: u64,
    key: &[u8],
    kp: u64,
    buf: &mut [u8; MAX_KEY],
) -> Result<(usize, u64)> {
    let mut h = [0u8; 2];
    s.read(off, INNER_BYTES, 0, &mut h)?;
    let n = u16::from_le_bytes(h) as usize;
    if !(2..=FANOUT).contains(&n) {
        return Err(corrupt(format!("inner {off:#x}: {n} children")));
    }
    let (mut lo, mut hi) = (0, n - 1);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if sep_cmp(s, off, mid, key, kp, buf)? != Ordering::Greater {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok((lo, inner_child_at(s, off, lo)?))
}

/// Child `i` of inner node `off`.
pub(crate) fn inner_child_at<S: Src>(s: &S, off: u64, i: usize) -> Result<u64> {
    let mut c = [0u8; 8];
    s.read(off, INNER_BYTES, CHILD_AT + 8 * i, &mut c)?;
    Ok(u64::from_le_bytes(c))
}

/// Children of inner node `off`.
pub(crate) fn inner_n<S: Src>(s: &S, off: u64) -> Result<usize> {
    let mut h = [0u8; 2];
    s.read(off, INNER_BYTES, 0, &mut h)?;
    let n = u16::from_le_bytes(h) as usize;
    if !(2..=FANOUT).contains(&n) {
        return Err(corrupt(format!("inner {off:#x}: {n} children")));
    }
    Ok(n)
}

/// Descends from `root` to the leaf that holds `key`, recording the inner
/// nodes passed and the child taken in `path`.
pub(crate) fn descend<S: Src>(
    s: &S,
    root: u64,
    key: &[u8],
    path: &mut Vec<(u64, usize)>,
    buf: &mut [u8; MAX_KEY],
) -> Result<u64> {
    // Index look-ups, of reads and of writes: P2's SCAN.
    let _p = crate::breakdown::phase(crate::breakdown::Phase::Scan);
    path.clear();
    let kp = prefix(key);
    let mut cur = root;
    for _ in 0..MAX_DEPTH {
        if is_leaf(s, cur)? {
            return Ok(cur);
        }
        let (i, c) = inner_child(s, cur, key, kp, buf)?;
        path.push((cur, i));
        cur = c;
    }
    Err(corrupt("tree deeper than 32 levels (a cycle?)"))
}

/// Descends to the leftmost leaf below `cur`, pushing the path.
pub(crate) fn leftmost<S: Src>(s: &S, mut cur: u64, path: &mut Vec<(u64, usize)>) -> Result<u64> {
    for _ in 0..MAX_DEPTH {
        if is_leaf(s, cur)? {
            return Ok(cur);
        }
        path.push((cur, 0));
        cur = inner_child_at(s, cur, 0)?;
        if path.len() > MAX_DEPTH {
            break;
        }
    }
    Err(corrupt("tree deeper than 32 levels (a cycle?)"))
}

/// Descends to the rightmost leaf below `cur`, pushing the path.
pub(crate) fn rightmost<S: Src>(s: &S, mut cur: u64, path: &mut Vec<(u64, usize)>) -> Result<u64> {
    for _ in 0..MAX_DEPTH {
        if is_leaf(s, cur)? {
            return Ok(cur);
        }
        let last = inner_n(s, cur)? - 1;
        path.push((cur, last));
        cur = inner_child_at(s, cur, last)?;
        if path.len() > MAX_DEPTH {
            break;
        }
    }
    Err(corrupt("tree deeper than 32 levels (a cycle?)"))
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

#[inline]
pub(crate) fn slot(b: &[u8], i: usize) -> (u64, u64) {
    (u64_at(b, 64 + 16 * i), u64_at(b, 72 + 16 * i))
}

pub(crate) fn set_slot(b: &mut [u8], i: usize, kp: u64, t: u64) {
    b[64 + 16 * i..72 + 16 * i].copy_from_slice(&kp.to_le_bytes());
    b[72 + 16 * i..80 + 16 * i].copy_from_slice(&t.to_le_bytes());
}

pub(crate) fn set_bitmap(b: &mut [u8], bm: u64) {
    b[0..8].copy_from_slice(&bm.to_le_bytes());
}

pub(crate) fn init_leaf(b: &mut [u8]) {
    b.fill(0);
    b[8..12].copy_from_slice(&MAGIC_LEAF.to_le_bytes());
}

/// The slot and tuple of `key` in the leaf copy `b`.
pub(crate) fn leaf_find(
    geo: &Geo,
    b: &[u8],
    key: &[u8],
    kp: u64,
    buf: &mut [u8; MAX_KEY],
) -> Result<Option<(usize, u64)>> {
    let mut bm = leaf_bitmap(b)?;
    while bm != 0 {
        let i = bm.trailing_zeros() as usize;
        bm &= bm - 1;
        let (p, t) = slot(b, i);
        if p == kp && geo.tuple_key_eq(t, key, buf)? {
            return Ok(Some((i, t)));
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
        let n = u16::from_le_bytes([b[0], b[1]]) as usize;
        let level = u16::from_le_bytes([b[2], b[3]]);
        if !(2..=FANOUT).contains(&n) || level == 0 || level as usize > MAX_DEPTH {
            return Err(bad("bad count or level"));
        }
        let children = (0..n).map(|i| u64_at(b, CHILD_AT + 8 * i)).collect();
        let mut seps = Vec::with_capacity(n - 1);
        for j in 0..n - 1 {
            let (ko, kl) = (
                u32_at(b, SEP_AT + 16 * j + 8) as usize,
                u32_at(b, SEP_AT + 16 * j + 12) as usize,
            );
            if kl == 0 || kl > MAX_KEY || ko < KEYS_AT || ko + kl > INNER_BYTES {
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
