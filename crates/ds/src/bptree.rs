//! A persistent B+tree with 32-byte keys and reader-writer locks per node
//! [P1 §3.4.2]; fixed-size values in blocks of their own, referenced from
//! the leaves.
//!
//! Keys are given as `u64` and widened by [`key32`]: the big-endian key
//! followed by three words of its hash, compared bytewise, so the order is
//! the `u64` order and every comparison looks at 32 bytes.
//!
//! # Locking (strict two-phase, taken before the transaction)
//!
//! Node locks live in a DRAM table indexed by the node's offset (nodes are
//! blocks of one size class, so `offset / 2^⌊log2 node size⌋` tells them
//! apart), plus one lock for the header (root pointer and height). A
//! writer first descends with read locks on the header and internal nodes
//! and a write lock on the leaf — enough when only the leaf changes: an
//! insert into a leaf with room, a remove of a missing key, from a root
//! leaf, or from a leaf left with at least the minimum ([`min_keys`]).
//! Otherwise it releases everything and write-locks the header and the
//! whole path (a split or a merge may climb to the root); a remove also
//! write-locks, at each level below the root, the path node's siblings
//! adjacent to it under the same parent (what a borrow or merge there may
//! change or free). The global lock order is the header, then top-down by
//! depth, and left to right within a level: every writer and reader takes
//! its locks in it (one node per level, or a sibling-path-sibling run),
//! and holds them until the transaction returns, so writers never
//! deadlock and conflicting transactions never run at once. (Taking the
//! header's write lock already excludes every other operation, which all
//! take the header lock first; the node locks make each transaction hold
//! a write lock on every node it writes all the same.) Readers read-lock
//! the path: an optimistic writer changes only the leaf it write-locked.
//!
//! # Deletion
//!
//! Every node but the root holds at least [`min_keys`] `= ⌊F/2⌋` keys.
//! A remove that leaves a leaf below it borrows an entry from a sibling
//! under the same parent (left first) that has more than the minimum, or
//! merges with a sibling (left first) at the minimum: the right node of
//! the pair moves into the left one and is freed in the transaction, its
//! separator leaves the parent, and the parent may underflow in turn, up
//! to the root. A root left with no key and one child is freed and the
//! child becomes the root: the height decreases by one. Leaves merge
//! right into left, so the surviving left leaf takes the right one's
//! `next`, and no leaf outside the pair links to the freed one. The
//! value block and the freed nodes are freed before the first write, so
//! a corrupt pointer fails the transaction before anything changed.
//! The on-media format is the one trees had before deletion rebalanced;
//! a tree written by that code may hold underfull nodes, which `shape`
//! reports and which removals handle without failing (they only fix the
//! node they shrink).
//!
//! # Reading
//!
//! Descents (insert, remove, `get` and the lock walks) read each node's
//! `n`, then its `n` keys in one read into a stack array, binary-search
//! them there, and read only the pointer followed: three reads per
//! level, no key slot past `n` and no other pointer, and no heap
//! allocation (the lock walks hold their guards in a small inline
//! array). Inside a transaction every byte read joins its read set,
//! which clobber logging intersects with each write; the logged bytes
//! are a function of that set, not of how the reads were cut. The keys
//! a descent reads beyond those a probe-by-probe search would touch
//! (the keys below `n` it did not probe) never change what is logged:
//! a node the transaction writes is either read whole first (it splits,
//! borrows or merges, or takes a separator) or is the leaf, whose
//! written keys from `pos` up to `n` the shift reads anyway. An insert
//! into a leaf with room reads only the pointers it shifts (the keys
//! are in hand from the descent), and a remove that leaves the leaf at
//! or above the minimum likewise; both write exactly the bytes a
//! whole-node store of the changed entries would (the same log records
//! and the same image). Only nodes that split, borrow or merge are read
//! whole. The fanout is at most [`MAX_FANOUT`] (checked at create and
//! open, and against the header in every transaction), so node pieces
//! fit fixed stack arrays.
//!
//! # On-media format (pool offsets, little-endian)
//!
//! Header block (64 bytes, version [`VERSION`] = 3, the
//! [`ferrite_pmem::superblock`] frame):
//!
//! | bytes  | field                                                   |
//! |--------|---------------------------------------------------------|
//! | 0..8   | magic `FERRBPTR`                                        |
//! | 8..10  | version, u16 = 3                                        |
//! | 10..16 | zero                                                    |
//! | 16..24 | `value_len` u64                                         |
//! | 24..32 | `root` u64 (updated in place; not in the checksum)      |
//! | 32..40 | `height` u64, 1: the root is a leaf (updated in place; not in the checksum) |
//! | 40..48 | `fanout` F u64 (most keys per node)                      |
//! | 48..60 | zero                                                    |
//! | 60..64 | CRC32C of bytes 0..60 with 24..40 read as zero           |
//!
//! Versions 1 (no version, no checksum; F at 8..16) and 2 (value blocks
//! without a record checksum) are refused with
//! [`ferrite_tx::TxError::HeaderVersion`].
//!
//! Value block (`value_len + 8` bytes): the value, then the record's
//! checksum u64 (CRC32C of the `u64` key (8 bytes LE) then the value, in
//! the low half; the high half zero). It is written whole, value and
//! checksum, by the insert or update that writes the value, in the same
//! transaction; splits, borrows and merges move only its pointer.
//! [`KvMap::get`] verifies it before returning a value
//! ([`TxError::Corrupt`] naming the key); `shape` lists every record whose
//! checksum fails in [`crate::Shape::damaged`]. The key is covered, so a
//! value block reached from another key's slot does not verify.
//!
//! Node (`32 + 32·F + 8·(F+1)` bytes): `leaf` u64 (1 leaf, 0 internal),
//! `n` u64 (keys), `next` u64 (leaves: the next leaf, 0 = last), 8
//! reserved bytes, `keys[F]` (32 bytes each, the first `n` sorted), then
//! `ptrs[F+1]` u64: a leaf's `ptrs[i]` is the value block of `keys[i]`; an
//! internal node's `ptrs[i]` is the child holding the keys `k` with
//! `keys[i-1] ≤ k < keys[i]`.
//!
//! # Invariants (checked by `shape`)
//!
//! Keys in each node strictly increase and lie within the bounds its
//! parent gives it; every leaf is at depth `height`; internal nodes have
//! `n ≥ 1` keys and `n + 1` children; every node but the root holds at
//! least [`min_keys`] keys (so no leaf is empty but an empty root);
//! following `next` from the leftmost leaf visits every leaf once, left
//! to right; every node and value block is allocated and large enough.

use crate::{DsOptions, KvMap, Shape, Structure, le, mix64};
use ferrite_alloc::PAllocator;
use ferrite_pmem::POff;
use ferrite_tx::{Inputs, Result, Tx, TxError, TxFunc, TxPool, TxThread, pack_args};
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::sync::atomic::{AtomicU64, Ordering};

/// The header's magic.
pub const MAGIC: [u8; 8] = *b"FERRBPTR";
/// Bytes of a key.
pub const KEY: usize = 32;
const HDR: usize = 64;
const H_VALUE_LEN: usize = 16;
const H_FANOUT: u64 = 40;
/// The header's framing; root and height change in place.
const HEADER: crate::Header = crate::Header {
    magic: MAGIC,
    name: "B+tree",
    mutable: 24..40,
    version: VERSION,
};
/// This build's header version: 3, the first with record checksums.
pub const VERSION: u16 = 3;

/// The checksum of a record (the 8 bytes after its value).
pub fn record_crc(key: u64, value: &[u8]) -> u64 {
    u64::from(crc32c::crc32c_append(
        crc32c::crc32c(&key.to_le_bytes()),
        value,
    ))
}

/// A value block's bytes: `value` then its record checksum.
fn value_block(key: u64, value: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(value.len() + 8);
    b.extend_from_slice(value);
    b.extend_from_slice(&record_crc(key, value).to_le_bytes());
    b
}
const H_ROOT: u64 = 24;
const H_HEIGHT: u64 = 32;
const N_LEAF: u64 = 0;
const N_N: u64 = 8;
const N_NEXT: u64 = 16;
const N_KEYS: u64 = 32;

/// Creates a tree: args `[fanout, value_len]`; returns the header.
pub static CREATE: TxFunc = TxFunc {
    id: 0x4201,
    name: "bptree-create",
    body: tx_create,
};
/// Inserts or updates: args `[header, key]`, buffer 0 the value.
pub static INSERT: TxFunc = TxFunc {
    id: 0x4202,
    name: "bptree-insert",
    body: tx_insert,
};
/// Removes and rebalances: args `[header, key]`; the result word says
/// whether the key was there and how the tree rebalanced (`R_*` below).
pub static REMOVE: TxFunc = TxFunc {
    id: 0x4203,
    name: "bptree-remove",
    body: tx_remove,
};

/// The B+tree's transaction functions (register them to open one).
pub static FUNCS: [&TxFunc; 3] = [&CREATE, &INSERT, &REMOVE];

/// The 32-byte key of `k`.
pub fn key32(k: u64) -> [u8; KEY] {
    let mut b = [0u8; KEY];
    b[0..8].copy_from_slice(&k.to_be_bytes());
    let mut h = k;
    for i in 1..4 {
        h = mix64(h);
        b[8 * i..8 * i + 8].copy_from_slice(&h.to_be_bytes());
    }
    b
}

/// The `u64` key of a [`key32`] key (its first 8 bytes, big-endian).
fn key_of(k: &[u8; KEY]) -> u64 {
    u64::from_be_bytes(k[0..8].try_into().expect("8 bytes"))
}

/// Largest fanout (keys per node) a tree may have: `create` and `open`
/// refuse more, and transactions refuse a header that claims more
/// ([`TxError::Corrupt`]), because node pieces are staged in stack arrays
/// of this many entries (plus one: a node holds F+1 entries for a moment
/// before it splits).
pub const MAX_FANOUT: u64 = 64;
/// Smallest fanout: with fewer keys a split could leave a node empty.
pub const MIN_FANOUT: u64 = 3;
/// Deepest tree a descent follows; a header claiming more is corrupt.
/// (Every internal node has at least two children, so a taller tree
/// would hold at least 2^64 leaves.)
const MAX_HEIGHT: usize = 64;
/// Entries a node image holds at most: F keys plus the one inserted
/// before a split, or F+1 pointers.
const MAXF: usize = MAX_FANOUT as usize + 1;
/// Fanouts up to this one stage nodes in small scratch ([`with_scratch`]).
const SMALL_FANOUT: u64 = 16;

const fn node_bytes(f: u64) -> u64 {
    32 + 32 * f + 8 * (f + 1)
}

fn ptrs_off(f: u64) -> u64 {
    N_KEYS + 32 * f
}

fn p64(off: u64) -> POff<u64> {
    POff::new(off)
}

/// Pool offset of key `i` of node `x`.
fn key_off(x: u64, i: usize) -> u64 {
    x + N_KEYS + (KEY * i) as u64
}

/// Pool offset of pointer `i` of node `x` in a tree of fanout `f`.
fn ptr_off(x: u64, f: u64, i: usize) -> u64 {
    x + ptrs_off(f) + 8 * i as u64
}

/// The fanout, root and height of a header image, refused (as corrupt)
/// when the fanout or height is out of range: descents stage node pieces
/// in arrays sized by [`MAX_FANOUT`] and paths by `MAX_HEIGHT`.
fn header_fields(hdr: u64, hb: &[u8; 48]) -> Result<(u64, u64, u64)> {
    let (f, root, height) = (le(hb, H_FANOUT as usize), le(hb, 24), le(hb, 32));
    if !(MIN_FANOUT..=MAX_FANOUT).contains(&f) || height == 0 || height > MAX_HEIGHT as u64 {
        return Err(TxError::Corrupt(format!(
            "B+tree header {hdr:#x}: fanout {f}, height {height}"
        )));
    }
    Ok((f, root, height))
}

/// Where node bytes come from: a transaction (every read joins its read
/// set, which clobber logging consults) or the pool itself (a reader or
/// lock walk holding the node's lock). Descents read through this one
/// interface so transactions and lock walks choose the same children.
trait NodeRead {
    fn bytes(&mut self, off: u64, dst: &mut [u8]) -> Result<()>;
    fn word(&mut self, off: u64) -> Result<u64>;
}

impl NodeRead for Tx<'_, '_> {
    fn bytes(&mut self, off: u64, dst: &mut [u8]) -> Result<()> {
        self.read(p64(off), dst)
    }
    fn word(&mut self, off: u64) -> Result<u64> {
        self.read_u64(p64(off))
    }
}

impl NodeRead for &TxPool {
    fn bytes(&mut self, off: u64, dst: &mut [u8]) -> Result<()> {
        self.read(off, dst)
    }
    fn word(&mut self, off: u64) -> Result<u64> {
        self.read_u64(off)
    }
}

/// `n` of node `x`, refused above the fanout (so every index below `n`
/// lies inside the node and inside the stack arrays).
fn read_n(r: &mut impl NodeRead, x: u64, f: u64) -> Result<usize> {
    let n = r.word(x + N_N)?;
    if n > f {
        return Err(TxError::Corrupt(format!(
            "B+tree node {x:#x} holds {n} keys"
        )));
    }
    Ok(n as usize)
}

/// `n` and the first `n` keys of node `x`, read into `kb` (room for at
/// least F keys) with one read after `n`'s: the keys a search may probe,
/// and no byte past them (see the module doc on what that means for
/// clobber logging).
#[inline]
fn node_keys<'b>(
    r: &mut impl NodeRead,
    x: u64,
    f: u64,
    kb: &'b mut [[u8; KEY]],
) -> Result<&'b mut [[u8; KEY]]> {
    let n = read_n(r, x, f)?;
    let keys = &mut kb[..n];
    r.bytes(x + N_KEYS, keys.as_flattened_mut())?;
    Ok(keys)
}

/// The four big-endian words of a key: compared as a sequence they give
/// the bytewise (`memcmp`) order of the keys.
#[inline]
fn key_words(k: &[u8; KEY]) -> [u64; 4] {
    std::array::from_fn(|i| key_word(k, i))
}

/// Word `i` (big-endian) of key `k`.
#[inline]
fn key_word(k: &[u8; KEY], i: usize) -> u64 {
    u64::from_be_bytes(k[8 * i..8 * i + 8].try_into().expect("8 bytes"))
}

/// Bytewise order of key `a` against a key given as its [`key_words`]:
/// word by word. The first word is the big-endian `u64` key, so for
/// [`key32`] keys it alone decides unless the keys are equal.
#[inline]
fn key_cmp(a: &[u8; KEY], b: &[u64; 4]) -> std::cmp::Ordering {
    let w = key_word(a, 0);
    if w != b[0] {
        return w.cmp(&b[0]);
    }
    (1..4)
        .map(|i| key_word(a, i).cmp(&b[i]))
        .find(|o| o.is_ne())
        .unwrap_or(std::cmp::Ordering::Equal)
}

/// Binary search of the key with words `k` among sorted keys in DRAM:
/// [`slice::binary_search`], so `Ok(i)` when `keys[i] == k`, else
/// `Err(i)` with `i` the position `k` would take. On a corrupt
/// (unsorted) node it still returns an index `≤ keys.len()`, just not a
/// meaningful one.
#[inline]
fn search(keys: &[[u8; KEY]], k: &[u64; 4]) -> Result<usize, usize> {
    keys.binary_search_by(|p| key_cmp(p, k))
}

/// Runs `body` on zeroed stack scratch for one node's keys and pointers
/// (room for F+1 entries each). Fanouts up to 16 (the default) get
/// arrays of 17 entries, larger ones arrays of [`MAX_FANOUT`]` + 1`, so
/// the common case does not zero 2.5 KiB per operation.
fn with_scratch<R>(f: u64, body: impl FnOnce(&mut [[u8; KEY]], &mut [u8]) -> R) -> R {
    fn run<const K: usize, const P: usize, R>(
        body: impl FnOnce(&mut [[u8; KEY]], &mut [u8]) -> R,
    ) -> R {
        let (mut kb, mut pb) = ([[0u8; KEY]; K], [0u8; P]);
        body(&mut kb, &mut pb)
    }
    if f <= SMALL_FANOUT {
        run::<{ SMALL_FANOUT as usize + 1 }, { 8 * (SMALL_FANOUT as usize + 1) }, R>(body)
    } else {
        run::<MAXF, { 8 * MAXF }, R>(body)
    }
}

/// [`with_scratch`] for keys alone (the lock walks).
fn with_keys<R>(f: u64, body: impl FnOnce(&mut [[u8; KEY]]) -> R) -> R {
    if f <= SMALL_FANOUT {
        body(&mut [[0u8; KEY]; SMALL_FANOUT as usize + 1])
    } else {
        body(&mut [[0u8; KEY]; MAXF])
    }
}

/// Index of the child of an internal node covering the searched key:
/// `ptrs[i]` covers `keys[i-1] ≤ k < keys[i]`, so a key equal to
/// `keys[i]` goes right of it.
fn child_slot(s: Result<usize, usize>) -> usize {
    match s {
        Ok(i) => i + 1,
        Err(i) => i,
    }
}

/// One internal node on a descent: its offset, the child index taken,
/// and its `n` as read. Only nodes that change shape (a split, a
/// rebalance) are ever read whole, from these.
#[derive(Clone, Copy, Default)]
struct Step {
    off: u64,
    i: u32,
    n: u32,
}

/// Steps a [`Path`] holds in place; deeper paths (a tree of fanout 3 or
/// 4 with many keys: at fanout 16 it takes hundreds of millions) go to
/// the heap.
const PATH_INLINE: usize = 8;

/// The internal nodes from the root down to a leaf's parent: a small
/// stack array (not zeroing room for [`MAX_HEIGHT`] steps on every
/// descent), so a descent allocates nothing unless the tree is deeper
/// than [`PATH_INLINE`] + 1 levels.
struct Path {
    inline: [Step; PATH_INLINE],
    len: usize,
    /// All the steps, when the tree is too deep for `inline`.
    deep: Vec<Step>,
}

/// The leaf a descent reached: its offset, `n`, and where the key is
/// (`Ok`) or would go (`Err`). Its first `n` keys are left in the
/// descent's key scratch.
struct LeafAt {
    off: u64,
    n: usize,
    at: Result<usize, usize>,
}

/// Descends from `root` through `height - 1` internal nodes to the leaf
/// covering `k`: at each node `n`, then its `n` keys in one read (into
/// `kb`, room for F keys), a binary search in DRAM, and the one pointer
/// followed. The leaf's keys stay in `kb[..n]`.
fn descend(
    r: &mut impl NodeRead,
    f: u64,
    (root, height): (u64, u64),
    k: &[u8; KEY],
    path: &mut Path,
    kb: &mut [[u8; KEY]],
) -> Result<LeafAt> {
    let kw = key_words(k);
    path.clear(height);
    let mut x = root;
    for _ in 1..height {
        let keys = node_keys(r, x, f, kb)?;
        let i = child_slot(search(keys, &kw));
        // `i ≤ n ≤ F ≤ MAX_FANOUT`: both fit a u32.
        path.push(Step {
            off: x,
            i: i as u32,
            n: keys.len() as u32,
        });
        x = r.word(ptr_off(x, f, i))?;
    }
    let keys = node_keys(r, x, f, kb)?;
    Ok(LeafAt {
        off: x,
        n: keys.len(),
        at: search(keys, &kw),
    })
}

impl Path {
    fn new() -> Path {
        Path {
            inline: [Step::default(); PATH_INLINE],
            len: 0,
            deep: Vec::new(),
        }
    }

    /// Empties the path for a descent of a tree of `height` levels.
    fn clear(&mut self, height: u64) {
        self.len = 0;
        self.deep.clear();
        if height > PATH_INLINE as u64 + 1 {
            self.deep.reserve(height as usize - 1);
        }
    }

    fn push(&mut self, s: Step) {
        if self.deep.capacity() == 0 {
            self.inline[self.len] = s;
        } else {
            self.deep.push(s);
        }
        self.len += 1;
    }

    fn steps(&self) -> &[Step] {
        if self.deep.capacity() == 0 {
            &self.inline[..self.len]
        } else {
            &self.deep
        }
    }

    /// Whole images of the path's nodes from depth index `from` down,
    /// with the child index taken at each: what a split or rebalance
    /// edits.
    fn load_from(&self, tx: &mut Tx<'_, '_>, f: u64, from: usize) -> Result<Vec<(Node, usize)>> {
        self.steps()[from..]
            .iter()
            .map(|s| Ok((load(tx, s.off, f, false)?, s.i as usize)))
            .collect()
    }
}

fn tx_create(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let (f, vlen) = (inp.arg_u64(0), inp.arg_u64(1));
    if !(MIN_FANOUT..=MAX_FANOUT).contains(&f) {
        return Err(TxError::BadOption(format!("B+tree fanout {f}")));
    }
    let h = tx.alloc(HDR)?;
    let root = tx.alloc(node_bytes(f) as usize)?;
    let mut nb = [0u8; node_bytes(MAX_FANOUT) as usize];
    nb[0..8].copy_from_slice(&1u64.to_le_bytes());
    tx.write(root, &nb[..node_bytes(f) as usize])?;
    let b = HEADER.encode(&[
        (H_FANOUT as usize, f),
        (H_VALUE_LEN, vlen),
        (H_ROOT as usize, root.raw()),
        (H_HEIGHT as usize, 1),
    ]);
    tx.write(h, &b)?;
    tx.set_root(h.raw())?;
    Ok(h.raw())
}

/// A node read whole into DRAM inside a transaction (only for nodes that
/// split or rebalance).
#[derive(Clone)]
struct Node {
    off: u64,
    n: usize,
    keys: Vec<[u8; KEY]>,
    ptrs: Vec<u64>,
}

/// Reads a node's `n`, keys and pointers (marks them read). The vectors
/// have room for one more entry (a split inserts one first).
fn load(tx: &mut Tx<'_, '_>, off: u64, f: u64, leaf: bool) -> Result<Node> {
    let n = read_n(tx, off, f)?;
    let mut keys = Vec::with_capacity(n + 1);
    keys.resize(n, [0u8; KEY]);
    tx.read(p64(off + N_KEYS), keys.as_flattened_mut())?;
    load_ptrs(tx, off, f, n, keys, leaf)
}

/// [`load`] with `n` and the keys already read (by the descent): reads
/// the pointers.
fn load_ptrs(
    tx: &mut Tx<'_, '_>,
    off: u64,
    f: u64,
    n: usize,
    keys: Vec<[u8; KEY]>,
    leaf: bool,
) -> Result<Node> {
    let np = if leaf { n } else { n + 1 };
    let mut pb = [0u8; 8 * MAXF];
    let pb = &mut pb[..np * 8];
    tx.read(p64(off + ptrs_off(f)), pb)?;
    let mut ptrs = Vec::with_capacity(np + 1);
    ptrs.extend(pb.chunks_exact(8).map(|c| le(c, 0)));
    Ok(Node { off, n, keys, ptrs })
}

/// Writes keys and pointers of a DRAM image from the given indices on
/// (a node image holds at most F keys and F+1 pointers).
fn write_entries(
    tx: &mut Tx<'_, '_>,
    f: u64,
    off: u64,
    keys: &[[u8; KEY]],
    from: usize,
    ptrs: &[u64],
    pfrom: usize,
) -> Result<()> {
    debug_assert!(
        keys.len() as u64 <= f && ptrs.len() as u64 <= f + 1,
        "image within the fanout"
    );
    let keys = keys.get(from..).unwrap_or_default();
    tx.write(p64(key_off(off, from)), keys.as_flattened())?;
    let ptrs = ptrs.get(pfrom..).unwrap_or_default();
    let mut pb = [0u8; 8 * MAXF];
    for (d, s) in pb.chunks_exact_mut(8).zip(ptrs) {
        d.copy_from_slice(&s.to_le_bytes());
    }
    tx.write(p64(ptr_off(off, f, pfrom)), &pb[..ptrs.len() * 8])
}

/// Writes `keys[from..]` and `ptrs[from..]` (and `n`) of a node whose
/// DRAM image changed from index `from` on.
fn store(tx: &mut Tx<'_, '_>, f: u64, nd: &Node, from: usize, pfrom: usize) -> Result<()> {
    write_entries(tx, f, nd.off, &nd.keys, from, &nd.ptrs, pfrom)?;
    tx.write_u64(p64(nd.off + N_N), nd.n as u64)
}

fn tx_insert(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let (hdr, key) = (inp.arg_u64(0), inp.arg_u64(1));
    let value = inp.buf(0);
    let k = key32(key);
    let mut hb = [0u8; 48];
    tx.read(p64(hdr), &mut hb)?;
    let (f, root, height) = header_fields(hdr, &hb)?;
    with_scratch(f, |kb, pb| {
        insert_in(tx, hdr, f, (root, height), &k, value, kb, pb)
    })
}

/// The body of [`tx_insert`] once the header is read: `kb` and `pb` are
/// scratch for F+1 keys and pointers.
#[allow(clippy::too_many_arguments)]
fn insert_in(
    tx: &mut Tx<'_, '_>,
    hdr: u64,
    f: u64,
    (root, height): (u64, u64),
    k: &[u8; KEY],
    value: &[u8],
    kb: &mut [[u8; KEY]],
    pb: &mut [u8],
) -> Result<u64> {
    let mut path = Path::new();
    let leaf = descend(tx, f, (root, height), k, &mut path, kb)?;
    let (n, pos) = match leaf.at {
        Ok(i) => {
            let vb = tx.read_u64(p64(ptr_off(leaf.off, f, i)))?;
            tx.write(POff::<u8>::new(vb), &value_block(key_of(k), value))?;
            return Ok(0);
        }
        Err(i) => (leaf.n, i),
    };
    if (n as u64) < f {
        // Room in the leaf: shift the tail right by one entry. The keys
        // are in hand from the descent; only the tail's pointers are
        // read, and the bytes written (keys and pointers from `pos` to
        // the new end, then `n`) are those of a whole-node store.
        // Everything is read before the first write (a clobber
        // transaction must not fail after it).
        // `n + 1 ≤ F` entries: the scratch holds them.
        let pb = &mut pb[..8 * (n - pos + 1)];
        tx.read(p64(ptr_off(leaf.off, f, pos)), &mut pb[8..])?;
        let vb = tx.alloc(value.len() + 8)?;
        tx.write(vb, &value_block(key_of(k), value))?;
        kb.copy_within(pos..n, pos + 1);
        kb[pos] = *k;
        pb[..8].copy_from_slice(&vb.raw().to_le_bytes());
        tx.write(p64(key_off(leaf.off, pos)), kb[pos..=n].as_flattened())?;
        tx.write(p64(ptr_off(leaf.off, f, pos)), pb)?;
        tx.write_u64(p64(leaf.off + N_N), n as u64 + 1)?;
        return Ok(1);
    }
    // The leaf splits, and so does every full ancestor above it; the
    // first ancestor with room takes the last separator. Only those
    // nodes are read whole (the leaf's keys are in hand).
    let steps = path.steps();
    let full = steps
        .iter()
        .rev()
        .take_while(|s| u64::from(s.n) == f)
        .count();
    let grows = full == steps.len();
    let top = steps.len() - full - usize::from(!grows);
    let mut edit = path.load_from(tx, f, top)?;
    let mut keys = Vec::with_capacity(n + 1);
    keys.extend_from_slice(&kb[..n]);
    let mut leaf_nd = load_ptrs(tx, leaf.off, f, n, keys, true)?;
    // Allocate everything first: the value, a node per split, a new root
    // if the split reaches it (a clobber transaction must not fail after
    // its first write).
    let splits = full + 1;
    let vb = tx.alloc(value.len() + 8)?;
    let mut fresh = [0u64; MAX_HEIGHT + 1];
    let nfresh = splits + usize::from(grows);
    for slot in &mut fresh[..nfresh] {
        *slot = tx.alloc(node_bytes(f) as usize)?.raw();
    }
    // Handed out last-allocated first, as a stack: the same blocks go to
    // the same nodes as when the path was a `Vec` of `pop`s.
    let mut fresh = fresh[..nfresh].iter().rev().copied();
    tx.write(vb, &value_block(key_of(k), value))?;
    split_up(
        tx,
        hdr,
        f,
        (root, height),
        &mut edit,
        &mut leaf_nd,
        pos,
        (*k, vb.raw()),
        &mut fresh,
    )
}

/// Inserts `(k, v)` at `pos` of the full leaf `leaf`, splitting it and
/// the full ancestors in `path` (whole images, bottom last; the first
/// holds the node that takes the last separator unless the root splits),
/// writing each split-off node to a block of `fresh`.
#[allow(clippy::too_many_arguments)]
fn split_up(
    tx: &mut Tx<'_, '_>,
    hdr: u64,
    f: u64,
    (root, height): (u64, u64),
    path: &mut Vec<(Node, usize)>,
    leaf: &mut Node,
    pos: usize,
    (k, v): ([u8; KEY], u64),
    fresh: &mut impl Iterator<Item = u64>,
) -> Result<u64> {
    let corrupt = || TxError::Corrupt("B+tree split ran out of blocks".into());
    leaf.keys.insert(pos, k);
    leaf.ptrs.insert(pos, v);
    leaf.n += 1;
    // Split the leaf: the left half stays, the right half moves to a new
    // leaf linked after it; its first key goes up.
    let mid = leaf.n / 2;
    let right = Node {
        off: fresh.next().ok_or_else(corrupt)?,
        n: leaf.n - mid,
        keys: leaf.keys.split_off(mid),
        ptrs: leaf.ptrs.split_off(mid),
    };
    leaf.n = mid;
    let next = tx.read_u64(p64(leaf.off + N_NEXT))?;
    write_new(tx, f, &right, true, next)?;
    tx.write_u64(p64(leaf.off + N_NEXT), right.off)?;
    store(tx, f, leaf, pos.min(mid), pos.min(mid))?;
    let mut sep = right.keys[0];
    let mut child = right.off;
    // Insert (sep, child) into the ancestors, splitting full ones.
    while let Some((mut nd, i)) = path.pop() {
        nd.keys.insert(i, sep);
        nd.ptrs.insert(i + 1, child);
        nd.n += 1;
        if nd.n as u64 <= f {
            return store(tx, f, &nd, i, i + 1).map(|()| 1);
        }
        // Internal split: the middle key goes up, not into either half.
        let mid = nd.n / 2;
        let mut rk = nd.keys.split_off(mid);
        let up = rk.remove(0);
        let rp = nd.ptrs.split_off(mid + 1);
        let r = Node {
            off: fresh.next().ok_or_else(corrupt)?,
            n: rk.len(),
            keys: rk,
            ptrs: rp,
        };
        nd.n = mid;
        write_new(tx, f, &r, false, 0)?;
        store(tx, f, &nd, i.min(mid), (i + 1).min(mid + 1))?;
        sep = up;
        child = r.off;
    }
    // The root split: a new root above the two halves.
    let nr = Node {
        off: fresh.next().ok_or_else(corrupt)?,
        n: 1,
        keys: vec![sep],
        ptrs: vec![root, child],
    };
    write_new(tx, f, &nr, false, 0)?;
    let mut b = [0u8; 16];
    b[0..8].copy_from_slice(&nr.off.to_le_bytes());
    b[8..16].copy_from_slice(&(height + 1).to_le_bytes());
    tx.write(p64(hdr + H_ROOT), &b)?;
    Ok(1)
}

/// Writes a whole new node (a block allocated in this transaction),
/// staged in a stack image sized for the fanout's class (as [`with_scratch`]).
fn write_new(tx: &mut Tx<'_, '_>, f: u64, nd: &Node, leaf: bool, next: u64) -> Result<()> {
    fn run<const B: usize>(
        tx: &mut Tx<'_, '_>,
        f: u64,
        nd: &Node,
        leaf: bool,
        next: u64,
    ) -> Result<()> {
        let mut b = [0u8; B];
        let b = &mut b[..node_bytes(f) as usize];
        b[0..8].copy_from_slice(&u64::from(leaf).to_le_bytes());
        b[8..16].copy_from_slice(&(nd.n as u64).to_le_bytes());
        b[16..24].copy_from_slice(&next.to_le_bytes());
        let po = ptrs_off(f) as usize;
        let (kpart, ppart) = b[N_KEYS as usize..].split_at_mut(po - N_KEYS as usize);
        for (d, k) in kpart.chunks_exact_mut(KEY).zip(&nd.keys) {
            d.copy_from_slice(k);
        }
        for (d, p) in ppart.chunks_exact_mut(8).zip(&nd.ptrs) {
            d.copy_from_slice(&p.to_le_bytes());
        }
        tx.write(p64(nd.off), b)
    }
    if f <= SMALL_FANOUT {
        run::<{ node_bytes(SMALL_FANOUT) as usize }>(tx, f, nd, leaf, next)
    } else {
        run::<{ node_bytes(MAX_FANOUT) as usize }>(tx, f, nd, leaf, next)
    }
}

/// Fewest keys a node other than the root holds: `⌊F/2⌋` (a root leaf
/// holds 0..=F keys, a root internal node 1..=F).
///
/// Why this bound: a split never leaves fewer — a leaf of F+1 keys splits
/// into `⌊(F+1)/2⌋` and `⌈(F+1)/2⌉`, an internal node of F+1 keys into
/// `⌊(F+1)/2⌋` and `F−⌊(F+1)/2⌋ = ⌊F/2⌋` around the key that goes up —
/// and a merge always fits: a node one below the minimum and a sibling
/// at it hold `2⌊F/2⌋−1 ≤ F` keys (leaves) or, with the separator pulled
/// down, `2⌊F/2⌋ ≤ F` (internal nodes).
pub fn min_keys(f: u64) -> usize {
    (f / 2) as usize
}

/// Result word of [`REMOVE`]: bit 0 the key was there; bits 8..16 the
/// merges it did; then one bit each for a borrow from the left sibling,
/// from the right one, and the root collapsing (the tree lost a level).
/// Only the caller reads it (recovery ignores results).
const R_REMOVED: u64 = 1;
const R_MERGE_SHIFT: u32 = 8;
const R_BORROW_LEFT: u64 = 1 << 16;
const R_BORROW_RIGHT: u64 = 1 << 17;
const R_COLLAPSE: u64 = 1 << 18;

/// Writes the parts of `after` that differ from `before` (the same node
/// as loaded): keys and pointers from the first changed index, `n` if it
/// changed. Bytes past `n` are dead, so a shrinking node writes nothing
/// past its new end. Logging only what changed keeps undo/redo entries
/// and clobber inputs small.
fn store_changed(tx: &mut Tx<'_, '_>, f: u64, before: &Node, after: &Node) -> Result<()> {
    let first = |a: &[[u8; KEY]], b: &[[u8; KEY]]| {
        (0..b.len())
            .find(|&i| a.get(i) != Some(&b[i]))
            .unwrap_or(b.len())
    };
    let kf = first(&before.keys, &after.keys);
    let pf = (0..after.ptrs.len())
        .find(|&i| before.ptrs.get(i) != Some(&after.ptrs[i]))
        .unwrap_or(after.ptrs.len());
    write_entries(tx, f, after.off, &after.keys, kf, &after.ptrs, pf)?;
    if before.n != after.n {
        tx.write_u64(p64(after.off + N_N), after.n as u64)?;
    }
    Ok(())
}

/// Everything a removal will change, computed from reads alone before
/// anything is written (a clobber transaction must not fail after its
/// first write): nodes as loaded and as they become, leaf `next` links,
/// blocks to free, and a new (root, height).
#[derive(Default)]
struct Plan {
    nodes: Vec<(Node, Node)>,
    links: Vec<(u64, u64)>,
    frees: Vec<u64>,
    header: Option<(u64, u64)>,
    result: u64,
}

/// Removes `key`; rebalances bottom-up while a node other than the root
/// falls below [`min_keys`]. At each level the underfull node borrows one
/// entry from its left sibling (same parent) if that has more than the
/// minimum, else from its right sibling, else merges with the left
/// sibling (or the right one when it is the leftmost child): the right
/// node of the pair is emptied into the left, freed, and its separator
/// leaves the parent, which may underflow in turn. A root left with no
/// key and one child is freed and that child becomes the root (height
/// decreases). Leaves merge right-into-left, so the only `next` link to
/// fix is the surviving left leaf's. Every node touched is the path node,
/// its parent, or a sibling adjacent to it: the caller's locks
/// ([`BpTree::remove`]) cover exactly those.
fn tx_remove(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let (hdr, key) = (inp.arg_u64(0), inp.arg_u64(1));
    let k = key32(key);
    let mut hb = [0u8; 48];
    tx.read(p64(hdr), &mut hb)?;
    let (f, root, height) = header_fields(hdr, &hb)?;
    with_scratch(f, |kb, pb| {
        remove_in(tx, hdr, f, (root, height), &k, kb, pb)
    })
}

/// The body of [`tx_remove`] once the header is read: `kb` and `pb` are
/// scratch for F+1 keys and pointers.
fn remove_in(
    tx: &mut Tx<'_, '_>,
    hdr: u64,
    f: u64,
    (root, height): (u64, u64),
    k: &[u8; KEY],
    kb: &mut [[u8; KEY]],
    pb: &mut [u8],
) -> Result<u64> {
    let mut path = Path::new();
    let at = descend(tx, f, (root, height), k, &mut path, kb)?;
    let Ok(pos) = at.at else {
        return Ok(0);
    };
    if path.len == 0 || at.n > min_keys(f) {
        // The leaf keeps at least the minimum (or is the root): only it
        // changes. Shift the tail left over `pos`, writing what
        // `store_changed` would for the whole node (keys and pointers
        // from `pos` to the new end, then `n`). The keys are in hand
        // from the descent; everything else is read, and the value block
        // freed, before the first write.
        // `n ≤ F` pointers: the scratch holds them.
        let pb = &mut pb[..8 * (at.n - pos)];
        tx.read(p64(ptr_off(at.off, f, pos)), pb)?;
        tx.free(POff::new(le(pb, 0)))?;
        tx.write(p64(key_off(at.off, pos)), kb[pos + 1..at.n].as_flattened())?;
        tx.write(p64(ptr_off(at.off, f, pos)), &pb[8..])?;
        tx.write_u64(p64(at.off + N_N), at.n as u64 - 1)?;
        return Ok(R_REMOVED);
    }
    // The leaf underflows: rebalancing reads the path's nodes whole.
    let path = path.load_from(tx, f, 0)?;
    let mut keys = Vec::with_capacity(at.n + 1);
    keys.extend_from_slice(&kb[..at.n]);
    let leaf = load_ptrs(tx, at.off, f, at.n, keys, true)?;
    let plan = plan_remove(tx, f, height, path, leaf, pos)?;
    // Frees first: they only record what commit will do, and may fail
    // (a corrupt pointer) while nothing has been written yet.
    for &b in &plan.frees {
        tx.free(POff::new(b))?;
    }
    for (before, after) in &plan.nodes {
        store_changed(tx, f, before, after)?;
    }
    for &(l, next) in &plan.links {
        tx.write_u64(p64(l + N_NEXT), next)?;
    }
    if let Some((r, h)) = plan.header {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&r.to_le_bytes());
        b[8..16].copy_from_slice(&h.to_le_bytes());
        tx.write(p64(hdr + H_ROOT), &b)?;
    }
    Ok(plan.result)
}

/// The reads and decisions of [`tx_remove`] (see there).
fn plan_remove(
    tx: &mut Tx<'_, '_>,
    f: u64,
    height: u64,
    mut path: Vec<(Node, usize)>,
    leaf: Node,
    pos: usize,
) -> Result<Plan> {
    let min = min_keys(f);
    let mut plan = Plan {
        frees: vec![leaf.ptrs[pos]],
        result: R_REMOVED,
        ..Plan::default()
    };
    let mut cur = leaf.clone();
    cur.keys.remove(pos);
    cur.ptrs.remove(pos);
    cur.n -= 1;
    let mut cur0 = leaf;
    let mut is_leaf = true;
    let mut merges = 0u64;
    let corrupt = |what: &str, off: u64| TxError::Corrupt(format!("B+tree node {off:#x}: {what}"));
    while let Some((par0, i)) = path.pop() {
        if cur.n >= min {
            plan.result |= merges << R_MERGE_SHIFT;
            plan.nodes.push((cur0, cur));
            return Ok(plan);
        }
        let mut par = par0.clone();
        let left = match i {
            0 => None,
            _ => Some(load(tx, par0.ptrs[i - 1], f, is_leaf)?),
        };
        if let Some(l0) = left.as_ref().filter(|l| l.n > min) {
            // Borrow the left sibling's last entry. A leaf's new first key
            // becomes the separator; an internal node rotates through the
            // parent (the separator comes down, the sibling's last key goes up).
            let mut l = l0.clone();
            let (lk, lp) = (l.keys.pop(), l.ptrs.pop());
            let (Some(lk), Some(lp)) = (lk, lp) else {
                return Err(corrupt("empty sibling", l.off));
            };
            l.n -= 1;
            if is_leaf {
                cur.keys.insert(0, lk);
                par.keys[i - 1] = lk;
            } else {
                cur.keys.insert(0, par.keys[i - 1]);
                par.keys[i - 1] = lk;
            }
            cur.ptrs.insert(0, lp);
            cur.n += 1;
            plan.nodes
                .extend([(l0.clone(), l), (cur0, cur), (par0, par)]);
            plan.result |= R_BORROW_LEFT | merges << R_MERGE_SHIFT;
            return Ok(plan);
        }
        let right = if i < par0.n {
            Some(load(tx, par0.ptrs[i + 1], f, is_leaf)?)
        } else {
            None
        };
        if let Some(r0) = right.as_ref().filter(|r| r.n > min) {
            // Borrow the right sibling's first entry (mirror image).
            let mut r = r0.clone();
            let (rk, rp) = (r.keys.remove(0), r.ptrs.remove(0));
            r.n -= 1;
            if is_leaf {
                cur.keys.push(rk);
                par.keys[i] = r.keys[0];
            } else {
                cur.keys.push(par.keys[i]);
                par.keys[i] = rk;
            }
            cur.ptrs.push(rp);
            cur.n += 1;
            plan.nodes
                .extend([(cur0, cur), (r0.clone(), r), (par0, par)]);
            plan.result |= R_BORROW_RIGHT | merges << R_MERGE_SHIFT;
            return Ok(plan);
        }
        // Merge: both candidates are at or below the minimum, so the pair
        // fits in one node. `s` is the separator between them.
        let (l0, mut l, r, s) = match (left, right) {
            (Some(l), _) => (l.clone(), l, cur, i - 1),
            (None, Some(r)) => (cur0, cur, r, i),
            (None, None) => return Err(corrupt("internal node without keys", par0.off)),
        };
        if l.off == r.off || r.off == par0.off {
            return Err(corrupt("child listed twice", r.off));
        }
        if is_leaf {
            let next = tx.read_u64(p64(r.off + N_NEXT))?;
            plan.links.push((l.off, next));
        } else {
            l.keys.push(par.keys[s]);
        }
        l.keys.extend_from_slice(&r.keys);
        l.ptrs.extend_from_slice(&r.ptrs);
        l.n = l.keys.len();
        if l.n as u64 > f {
            return Err(corrupt("siblings too full to merge", l.off));
        }
        par.keys.remove(s);
        par.ptrs.remove(s + 1);
        par.n -= 1;
        plan.frees.push(r.off);
        plan.nodes.push((l0, l));
        merges += 1;
        cur0 = par0;
        cur = par;
        is_leaf = false;
    }
    // `cur` is the root.
    plan.result |= merges << R_MERGE_SHIFT;
    if !is_leaf && cur.n == 0 {
        // One child left: it becomes the root, one level up.
        plan.header = Some((cur.ptrs[0], height - 1));
        plan.frees.push(cur.off);
        plan.result |= R_COLLAPSE;
    } else {
        plan.nodes.push((cur0, cur));
    }
    Ok(plan)
}

/// A held node lock.
enum Guard<'a> {
    R(#[allow(dead_code)] RwLockReadGuard<'a, ()>),
    W(#[allow(dead_code)] RwLockWriteGuard<'a, ()>),
}

/// Locks one operation holds in place before spilling to the heap: a
/// lock path of a tree up to this deep allocates nothing.
const HELD_INLINE: usize = 8;

/// The node locks an operation holds (released when dropped).
struct Held<'a> {
    inline: [Option<Guard<'a>>; HELD_INLINE],
    len: usize,
    more: Vec<Guard<'a>>,
}

impl<'a> Held<'a> {
    fn new() -> Held<'a> {
        Held {
            inline: Default::default(),
            len: 0,
            more: Vec::new(),
        }
    }

    #[inline]
    fn push(&mut self, g: Guard<'a>) {
        match self.inline.get_mut(self.len) {
            Some(slot) => {
                *slot = Some(g);
                self.len += 1;
            }
            None => self.more.push(g),
        }
    }
}

/// The volatile handle on a B+tree: its header lock and node lock table.
pub struct BpTree<'p> {
    txp: &'p TxPool,
    header: u64,
    fanout: u64,
    value_len: usize,
    head_lock: RwLock<()>,
    locks: Vec<RwLock<()>>,
    /// log2 of the stride that tells nodes apart in `locks`.
    shift: u32,
    base: u64,
    /// What this handle's removals did to rebalance (DRAM only).
    stats: [AtomicU64; 5],
}

/// Rebalancing done by one handle's removals since it was opened
/// ([`BpTree::rebalances`]), read from [`REMOVE`]'s result word.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rebalances {
    /// An underfull node took an entry from its left sibling.
    pub borrow_left: u64,
    /// … from its right sibling.
    pub borrow_right: u64,
    /// Two siblings became one (a node freed).
    pub merges: u64,
    /// Removals whose merges climbed more than one level.
    pub cascades: u64,
    /// Removals that freed the root and lowered the height.
    pub collapses: u64,
}

impl<'p> BpTree<'p> {
    /// Creates an empty tree (one transaction) and makes it the root.
    pub fn create(th: &mut TxThread<'p>, opts: DsOptions) -> Result<BpTree<'p>> {
        if !(MIN_FANOUT..=MAX_FANOUT).contains(&(opts.fanout as u64)) {
            return Err(TxError::BadOption(format!(
                "B+tree fanout must be {MIN_FANOUT}..={MAX_FANOUT}"
            )));
        }
        if opts.value_len == 0 || opts.value_len > 4096 {
            return Err(TxError::BadOption("value_len must be 1..=4096".into()));
        }
        let h = th.run(
            &CREATE,
            &pack_args(&[opts.fanout as u64, opts.value_len as u64]),
            &[],
        )?;
        BpTree::open(th.pool(), h)
    }

    /// Opens the tree whose header is at `header`, verifying its frame (magic, checksum, version: an older one is [`TxError::HeaderVersion`]).
    pub fn open(txp: &'p TxPool, header: u64) -> Result<BpTree<'p>> {
        let h = HEADER.read(txp, header)?;
        let (fanout, value_len) = (le(&h, H_FANOUT as usize), le(&h, H_VALUE_LEN) as usize);
        if !(MIN_FANOUT..=MAX_FANOUT).contains(&fanout) || value_len == 0 || value_len > 4096 {
            return Err(TxError::Corrupt(format!("B+tree header at {header:#x}")));
        }
        let shift = 63 - node_bytes(fanout).leading_zeros();
        let (base, hi) = txp.data_bounds();
        let n = ((hi - base) >> shift) as usize + 1;
        Ok(BpTree {
            txp,
            header,
            fanout,
            value_len,
            head_lock: RwLock::new(()),
            locks: (0..n).map(|_| RwLock::new(())).collect(),
            shift,
            base,
            stats: Default::default(),
        })
    }

    /// Index of `node`'s lock in `locks`.
    fn lock_index(&self, node: u64) -> Result<usize> {
        node.checked_sub(self.base)
            .map(|d| (d >> self.shift) as usize)
            .filter(|&i| i < self.locks.len())
            .ok_or_else(|| TxError::Corrupt(format!("B+tree node {node:#x} outside the heap")))
    }

    fn lock(&self, node: u64) -> Result<&RwLock<()>> {
        Ok(&self.locks[self.lock_index(node)?])
    }

    /// Rebalancing this handle's removals did so far.
    pub fn rebalances(&self) -> Rebalances {
        let g = |i: usize| self.stats[i].load(Ordering::Relaxed);
        Rebalances {
            borrow_left: g(0),
            borrow_right: g(1),
            merges: g(2),
            cascades: g(3),
            collapses: g(4),
        }
    }

    /// Counts what a [`REMOVE`] result word says it did; true when the
    /// key was there.
    fn removed(&self, r: u64) -> bool {
        let merges = (r >> R_MERGE_SHIFT) & 0xff;
        let add = |i: usize, n: u64| {
            if n > 0 {
                self.stats[i].fetch_add(n, Ordering::Relaxed);
            }
        };
        add(0, u64::from(r & R_BORROW_LEFT != 0));
        add(1, u64::from(r & R_BORROW_RIGHT != 0));
        add(2, merges);
        add(3, u64::from(merges > 1));
        add(4, u64::from(r & R_COLLAPSE != 0));
        r & R_REMOVED != 0
    }

    /// The root and height (one read: they are adjacent in the header).
    fn root_height(&self) -> Result<(u64, u64)> {
        const H: usize = (H_HEIGHT - H_ROOT) as usize;
        let mut b = [0u8; H + 8];
        self.txp.read(self.header + H_ROOT, &mut b)?;
        Ok((le(&b, 0), le(&b, H)))
    }

    /// `n` of node `x` (read under its lock), refused above the fanout.
    #[cfg(test)]
    fn count(&self, x: u64) -> Result<usize> {
        let mut r = self.txp;
        read_n(&mut r, x, self.fanout)
    }

    /// Index of the child of internal node `x` covering the key with
    /// words `kw`, and `x`'s `n` (read under its lock: `n`, then the keys
    /// in one read into `kb`, searched in DRAM).
    fn child_at(&self, x: u64, kw: &[u64; 4], kb: &mut [[u8; KEY]]) -> Result<(usize, usize)> {
        let mut r = self.txp;
        let keys = node_keys(&mut r, x, self.fanout, kb)?;
        Ok((child_slot(search(keys, kw)), keys.len()))
    }

    /// Pointer `i` of node `x`.
    fn ptr(&self, x: u64, i: usize) -> Result<u64> {
        self.txp.read_u64(ptr_off(x, self.fanout, i))
    }

    /// Position of `k` in leaf `leaf` (`Ok`, or `Err` where it would go)
    /// and the leaf's `n` (read under its lock).
    fn find(&self, leaf: u64, k: &[u8; KEY]) -> Result<(Result<usize, usize>, usize)> {
        let mut r = self.txp;
        with_keys(self.fanout, |kb| {
            let keys = node_keys(&mut r, leaf, self.fanout, kb)?;
            Ok((search(keys, &key_words(k)), keys.len()))
        })
    }

    /// Write-locks everything a rebalancing removal of `k` may change
    /// ([`tx_remove`]: the path, and at each level below the root the
    /// path node's left and right siblings under the same parent), in the
    /// global order: top-down, and left to right within a level (left
    /// sibling, path node, right sibling), adding the guards to `held`.
    /// Each level's nodes are found from the parent locked just before
    /// them, and siblings are never descended into. The caller holds the
    /// header's write lock.
    fn lock_for_rebalance<'a>(&'a self, k: &[u8; KEY], held: &mut Held<'a>) -> Result<()> {
        let (root, height) = self.root_height()?;
        let kw = key_words(k);
        // Lock indices taken: a corrupt tree naming one node twice must
        // fail, not deadlock on a lock this thread holds.
        let mut taken: Vec<usize> = Vec::new();
        let mut take = |x: u64| -> Result<&RwLock<()>> {
            let i = self.lock_index(x)?;
            if taken.contains(&i) {
                return Err(TxError::Corrupt(format!(
                    "B+tree node {x:#x} reached twice"
                )));
            }
            taken.push(i);
            Ok(&self.locks[i])
        };
        held.push(Guard::W(take(root)?.write()));
        with_keys(self.fanout, |kb| {
            let mut x = root;
            for _ in 1..height {
                let (i, n) = self.child_at(x, &kw, kb)?;
                let lo = i.saturating_sub(1);
                let hi = (i + 1).min(n);
                let mut kids = [0u64; 3];
                for (slot, j) in kids.iter_mut().zip(lo..=hi) {
                    *slot = self.ptr(x, j)?;
                }
                for &c in &kids[..=hi - lo] {
                    held.push(Guard::W(take(c)?.write()));
                }
                x = kids[i - lo];
            }
            Ok(())
        })
    }

    /// Locks the path to `k`'s leaf: read locks above it, `leaf_write` on
    /// it, adding the guards to `held`. Returns the leaf and the height.
    fn lock_path<'a>(
        &'a self,
        k: &[u8; KEY],
        write_all: bool,
        leaf_write: bool,
        held: &mut Held<'a>,
    ) -> Result<(u64, u64)> {
        let (root, height) = self.root_height()?;
        let kw = key_words(k);
        with_keys(self.fanout, |kb| {
            let mut x = root;
            for depth in 1..=height {
                let l = self.lock(x)?;
                let is_leaf = depth == height;
                held.push(if write_all || (is_leaf && leaf_write) {
                    Guard::W(l.write())
                } else {
                    Guard::R(l.read())
                });
                if !is_leaf {
                    let (i, _) = self.child_at(x, &kw, kb)?;
                    x = self.ptr(x, i)?;
                }
            }
            Ok((x, height))
        })
    }
}

impl KvMap for BpTree<'_> {
    fn structure(&self) -> Structure {
        Structure::BpTree
    }

    fn insert(&self, th: &mut TxThread<'_>, key: u64, value: &[u8]) -> Result<bool> {
        crate::check_value_len(value, self.value_len, "tree")?;
        let k = key32(key);
        let args = pack_args(&[self.header, key]);
        {
            // Optimistic: the leaf has room, so nothing above it changes.
            let _h = self.head_lock.read();
            let mut held = Held::new();
            let (leaf, _) = self.lock_path(&k, false, true, &mut held)?;
            if self.txp.read_u64(leaf + N_N)? < self.fanout {
                return Ok(th.run(&INSERT, &args, &[value])? == 1);
            }
        }
        // The leaf may split, up to the root: write-lock the whole path.
        let _h = self.head_lock.write();
        let mut held = Held::new();
        self.lock_path(&k, true, true, &mut held)?;
        Ok(th.run(&INSERT, &args, &[value])? == 1)
    }

    fn remove(&self, th: &mut TxThread<'_>, key: u64) -> Result<bool> {
        let k = key32(key);
        let args = pack_args(&[self.header, key]);
        {
            // Optimistic: the key is missing, the leaf is the root, or it
            // keeps at least the minimum — only the leaf changes.
            let _h = self.head_lock.read();
            let mut held = Held::new();
            let (leaf, height) = self.lock_path(&k, false, true, &mut held)?;
            if height == 1 || {
                let (at, n) = self.find(leaf, &k)?;
                at.is_err() || n > min_keys(self.fanout)
            } {
                return Ok(self.removed(th.run(&REMOVE, &args, &[])?));
            }
        }
        // The leaf underflows: merges may climb to the root and lower the
        // height. Write-lock the header, the path and the siblings next to it.
        let _h = self.head_lock.write();
        let mut held = Held::new();
        self.lock_for_rebalance(&k, &mut held)?;
        Ok(self.removed(th.run(&REMOVE, &args, &[])?))
    }

    fn get(&self, key: u64) -> Result<Option<Vec<u8>>> {
        let k = key32(key);
        let _h = self.head_lock.read();
        let mut held = Held::new();
        let (leaf, _) = self.lock_path(&k, false, false, &mut held)?;
        let (Ok(i), _) = self.find(leaf, &k)? else {
            return Ok(None);
        };
        let vb = self.ptr(leaf, i)?;
        let mut v = vec![0u8; self.value_len + 8];
        self.txp.read(vb, &mut v)?;
        let crc = u64::from_le_bytes(v[self.value_len..].try_into().expect("8 bytes"));
        v.truncate(self.value_len);
        if crc != record_crc(key, &v) {
            return Err(TxError::Corrupt(format!(
                "bptree record key {key}: checksum mismatch"
            )));
        }
        Ok(Some(v))
    }

    fn shape(&self) -> std::result::Result<Shape, String> {
        let t = self.txp;
        let f = self.fanout;
        let min = min_keys(f);
        let rd = |off: u64| t.read_u64(off).map_err(|e| e.to_string());
        let mut shape = Shape::default();
        let heap = t.heap();
        let need = |shape: &mut Shape, off: u64, n: u64| -> std::result::Result<(), String> {
            let have = heap
                .usable_size(POff::new(off))
                .map_err(|e| format!("block {off:#x}: {e}"))?;
            if (have as u64) < n {
                return Err(format!("block {off:#x} holds {have} bytes, needs {n}"));
            }
            shape.blocks.push((off, n));
            Ok(())
        };
        need(&mut shape, self.header, HDR as u64)?;
        if rd(self.header + H_FANOUT)? != f {
            return Err("fanout changed".into());
        }
        let (root, height) = self.root_height().map_err(|e| e.to_string())?;
        if height == 0 || height > 64 {
            return Err(format!("height {height}"));
        }
        let mut leaves = Vec::new();
        // (node, depth, lower bound, upper bound)
        let mut stack = vec![(root, 1u64, None::<[u8; KEY]>, None::<[u8; KEY]>)];
        while let Some((x, depth, lo, hi)) = stack.pop() {
            if shape.blocks.len() > 1 << 20 {
                return Err("too many nodes (a cycle?)".into());
            }
            need(&mut shape, x, node_bytes(f))?;
            let leaf = rd(x + N_LEAF)?;
            let n = rd(x + N_N)?;
            if n > f || leaf != u64::from(depth == height) {
                return Err(format!(
                    "node {x:#x}: leaf {leaf} n {n} at depth {depth}/{height}"
                ));
            }
            if depth > 1 && n < min as u64 {
                return Err(format!(
                    "node {x:#x} at depth {depth}/{height}: {n} keys, below the minimum {min}"
                ));
            }
            let mut kb = vec![0u8; n as usize * KEY];
            t.read(x + N_KEYS, &mut kb).map_err(|e| e.to_string())?;
            let keys: Vec<[u8; KEY]> = kb.chunks(KEY).map(|c| c.try_into().expect("32")).collect();
            if keys.windows(2).any(|w| w[0] >= w[1])
                || keys.first().is_some_and(|k| lo.is_some_and(|lo| *k < lo))
                || keys.last().is_some_and(|k| hi.is_some_and(|hi| *k >= hi))
            {
                return Err(format!("node {x:#x}: keys out of order or bounds"));
            }
            let po = x + ptrs_off(f);
            if leaf == 1 {
                leaves.push(x);
                for (i, k) in keys.iter().enumerate() {
                    let vb = rd(po + 8 * i as u64)?;
                    need(&mut shape, vb, self.value_len as u64 + 8)?;
                    let key = u64::from_be_bytes(k[0..8].try_into().expect("8"));
                    if key32(key) != *k {
                        return Err(format!("node {x:#x}: key {key} is not a key32"));
                    }
                    let mut v = vec![0u8; self.value_len + 8];
                    t.read(vb, &mut v).map_err(|e| e.to_string())?;
                    let crc = u64::from_le_bytes(v[self.value_len..].try_into().expect("8"));
                    v.truncate(self.value_len);
                    if crc != record_crc(key, &v) {
                        if shape.damaged.iter().any(|d| d.0 == key) {
                            return Err(format!("key {key} twice"));
                        }
                        shape.damaged.push((key, "checksum mismatch".into()));
                    } else if shape.entries.insert(key, v).is_some() {
                        return Err(format!("key {key} twice"));
                    }
                }
            } else {
                if n == 0 {
                    return Err(format!("internal node {x:#x} without keys"));
                }
                // Push right to left so leaves come out left to right.
                for i in (0..=n as usize).rev() {
                    let c = rd(po + 8 * i as u64)?;
                    let clo = if i == 0 { lo } else { Some(keys[i - 1]) };
                    let chi = if i == n as usize { hi } else { Some(keys[i]) };
                    stack.push((c, depth + 1, clo, chi));
                }
            }
        }
        for (i, &l) in leaves.iter().enumerate() {
            let want = leaves.get(i + 1).copied().unwrap_or(0);
            if rd(l + N_NEXT)? != want {
                return Err(format!("leaf {l:#x}: next does not lead to the next leaf"));
            }
        }
        Ok(shape)
    }

    fn header(&self) -> u64 {
        self.header
    }

    fn value_len(&self) -> usize {
        self.value_len
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let r = self.rebalances();
        vec![
            ("borrow_left", r.borrow_left),
            ("borrow_right", r.borrow_right),
            ("merges", r.merges),
            ("cascades", r.cascades),
            ("collapses", r.collapses),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{self as ds, KvMap};
    use ferrite_pmem::{Domain, Pool, PoolOptions, Region};
    use ferrite_tx::{Strategy, TxOptions};
    use std::collections::{BTreeMap, BTreeSet};

    fn pool() -> Pool {
        Pool::create_in_memory(&PoolOptions::new("bptree-test", 8 << 20).domain(Domain::Adr))
            .unwrap()
    }

    fn txpool(p: &Pool, strategy: Strategy) -> TxPool {
        TxPool::create(
            p,
            &TxOptions::new(strategy).slots(6).area_bytes(64 << 10),
            ds::registry(),
        )
        .unwrap()
    }

    fn opts(fanout: usize) -> DsOptions {
        DsOptions {
            value_len: 16,
            fanout,
            ..DsOptions::default()
        }
    }

    fn val(k: u64, v: u64) -> Vec<u8> {
        (0..16u64)
            .map(|i| (k ^ v.rotate_left(5) ^ i) as u8)
            .collect()
    }

    fn height(t: &BpTree<'_>) -> u64 {
        t.root_height().unwrap().1
    }

    /// The tree holds `model`, is well formed (shape, with the occupancy
    /// minimum), and the heap holds exactly its blocks (once `th` handed
    /// clobber's held-back frees to the allocator).
    fn agrees(t: &BpTree<'_>, th: &mut TxThread<'_>, model: &BTreeMap<u64, Vec<u8>>, what: &str) {
        th.quiesce();
        let txp = th.pool();
        let shape = t.shape().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(&shape.entries, model, "{what}");
        let blocks: BTreeSet<u64> = shape.blocks.iter().map(|b| b.0).collect();
        let mut alloc = BTreeSet::new();
        txp.heap().for_each_allocated(&mut |o, _| {
            alloc.insert(o.raw());
        });
        assert_eq!(blocks, alloc, "{what}: allocated blocks = the tree's");
    }

    /// Random insert/remove mixes against a model with the shape checked
    /// after every operation, under every strategy and several fanouts:
    /// grow, churn, delete everything (the root collapses to a leaf),
    /// reinsert. Every kind of rebalancing happens.
    #[test]
    fn removals_rebalance_and_match_a_model() {
        for strategy in Strategy::ALL {
            for fanout in [3usize, 4, 5, 8, 16] {
                let p = pool();
                let txp = txpool(&p, strategy);
                let mut th = txp.thread().unwrap();
                let t = BpTree::create(&mut th, opts(fanout)).unwrap();
                let mut model = BTreeMap::new();
                let mut x = fanout as u64;
                let step = |th: &mut TxThread<'_>,
                            model: &mut BTreeMap<u64, Vec<u8>>,
                            ins: bool,
                            k: u64,
                            i: u64| {
                    let what = format!("{strategy} F={fanout} op {i} key {k}");
                    if ins {
                        let v = val(k, i);
                        assert_eq!(
                            t.insert(th, k, &v).unwrap(),
                            model.insert(k, v).is_none(),
                            "{what}"
                        );
                    } else {
                        assert_eq!(
                            t.remove(th, k).unwrap(),
                            model.remove(&k).is_some(),
                            "{what}"
                        );
                    }
                    agrees(&t, th, model, &what);
                };
                let mut i = 0u64;
                for round in 0..2 {
                    // Grow (mostly inserts), churn (even), shrink (mostly removes).
                    for (ops, ins_per_10) in [(300, 8), (300, 5), (300, 2)] {
                        for _ in 0..ops {
                            x = ds::mix64(x);
                            i += 1;
                            step(&mut th, &mut model, x % 10 < ins_per_10, (x >> 8) % 200, i);
                        }
                    }
                    // Delete everything left, in random order.
                    let mut keys: Vec<u64> = model.keys().copied().collect();
                    while !keys.is_empty() {
                        x = ds::mix64(x);
                        let k = keys.swap_remove((x % keys.len() as u64) as usize);
                        i += 1;
                        step(&mut th, &mut model, false, k, i);
                    }
                    assert_eq!(
                        height(&t),
                        1,
                        "{strategy} F={fanout} round {round}: empty tree is one leaf"
                    );
                    assert_eq!(t.shape().unwrap().blocks.len(), 2, "header and root leaf");
                }
                let r = t.rebalances();
                assert!(
                    r.borrow_left > 0
                        && r.borrow_right > 0
                        && r.merges > 0
                        // (200 keys are too few for F=16 to merge twice in a row.)
                        && (r.cascades > 0 || fanout > 8)
                        && r.collapses > 0,
                    "{strategy} F={fanout}: {r:?}"
                );
            }
        }
    }

    /// Deleting every key gives the space back: the heap's in-use bytes
    /// return to those of the empty tree, and a second fill-and-empty
    /// claims no more pages than the first.
    #[test]
    fn deleting_everything_gives_space_back() {
        for strategy in Strategy::ALL {
            let p = pool();
            let txp = txpool(&p, strategy);
            let mut th = txp.thread().unwrap();
            let t = BpTree::create(&mut th, opts(4)).unwrap();
            let empty = txp.heap().stats();
            let mut claimed = Vec::new();
            for round in 0..3u64 {
                // mix64 is a bijection: 600 distinct keys in random order.
                for k in 0..600 {
                    t.insert(&mut th, ds::mix64(k), &val(k, round)).unwrap();
                }
                assert!(height(&t) >= 4, "{strategy}: a deep tree");
                let full = txp.heap().stats();
                claimed.push(full.claimed);
                for k in 0..600 {
                    assert!(t.remove(&mut th, ds::mix64(k)).unwrap());
                }
                th.quiesce();
                let st = txp.heap().stats();
                assert_eq!(
                    (st.in_use, st.blocks),
                    (empty.in_use, empty.blocks),
                    "{strategy} round {round}: in use after deleting everything"
                );
                assert_eq!(height(&t), 1);
                t.shape().unwrap();
            }
            assert!(
                claimed[1] <= claimed[0] && claimed[2] <= claimed[0],
                "{strategy}: freed nodes and values are reused: {claimed:?}"
            );
        }
    }

    /// Sequential deletions in both directions: ascending keys make the
    /// leftmost leaf underflow (borrow from the right, merge with the right),
    /// descending the rightmost (borrow from the left, merge with the left).
    #[test]
    fn ascending_and_descending_deletions() {
        for strategy in [Strategy::Undo, Strategy::Clobber] {
            for desc in [false, true] {
                let p = pool();
                let txp = txpool(&p, strategy);
                let mut th = txp.thread().unwrap();
                let t = BpTree::create(&mut th, opts(4)).unwrap();
                let mut model = BTreeMap::new();
                // Inserted in random order, so nodes are not all at the
                // minimum (sequential inserts leave every left half there).
                let mut keys: Vec<u64> = (0..120).collect();
                keys.sort_by_key(|&k| ds::mix64(k));
                for k in keys {
                    t.insert(&mut th, k, &val(k, 0)).unwrap();
                    model.insert(k, val(k, 0));
                }
                let h0 = height(&t);
                let order: Vec<u64> = if desc {
                    (0..120).rev().collect()
                } else {
                    (0..120).collect()
                };
                let mut heights = vec![h0];
                for k in order {
                    assert!(t.remove(&mut th, k).unwrap());
                    model.remove(&k);
                    agrees(
                        &t,
                        &mut th,
                        &model,
                        &format!("{strategy} desc {desc} key {k}"),
                    );
                    if heights.last() != Some(&height(&t)) {
                        heights.push(height(&t));
                    }
                }
                // The height only ever decreases, one level at a time, to 1.
                let want: Vec<u64> = (1..=h0).rev().collect();
                assert_eq!(heights, want, "{strategy} desc {desc}");
                let r = t.rebalances();
                if desc {
                    assert!(r.borrow_left > 0 && r.merges > 0, "{r:?}");
                } else {
                    assert!(r.borrow_right > 0 && r.merges > 0, "{r:?}");
                }
                assert_eq!(r.collapses, h0 - 1);
            }
        }
    }

    /// Writers removing and inserting their own keys (forcing merges and
    /// splits) while readers look up keys nobody touches: every lookup
    /// finds its value, and the final tree is the writers' models.
    #[test]
    fn readers_stay_correct_while_writers_merge() {
        const W: u64 = 3;
        for strategy in [Strategy::Undo, Strategy::Redo, Strategy::Clobber] {
            let p = pool();
            let txp = txpool(&p, strategy);
            let t = {
                let mut th = txp.thread().unwrap();
                let t = BpTree::create(&mut th, opts(4)).unwrap();
                // Fixed keys ≡ W (mod W+1), never removed.
                for k in 0..100u64 {
                    let k = k * (W + 1) + W;
                    t.insert(&mut th, k, &val(k, 0)).unwrap();
                }
                t
            };
            let models: Vec<BTreeMap<u64, Vec<u8>>> = std::thread::scope(|sc| {
                let (t, txp) = (&t, &txp);
                let readers: Vec<_> = (0..2u64)
                    .map(|r| {
                        sc.spawn(move || {
                            let mut x = r + 100;
                            for _ in 0..3000 {
                                x = ds::mix64(x);
                                let k = (x % 100) * (W + 1) + W;
                                assert_eq!(t.get(k).unwrap(), Some(val(k, 0)), "key {k}");
                            }
                        })
                    })
                    .collect();
                let writers: Vec<_> = (0..W)
                    .map(|w| {
                        sc.spawn(move || {
                            let mut th = txp.thread().unwrap();
                            let mut model = BTreeMap::new();
                            let mut x = w + 1;
                            for i in 0..800u64 {
                                x = ds::mix64(x);
                                let k = (x % 80) * (W + 1) + w;
                                // Alternate insert-heavy and remove-heavy phases.
                                if (x >> 16) % 10 < if (i / 100) % 2 == 0 { 8 } else { 2 } {
                                    let v = val(k, i);
                                    assert_eq!(
                                        t.insert(&mut th, k, &v).unwrap(),
                                        model.insert(k, v).is_none()
                                    );
                                } else {
                                    assert_eq!(
                                        t.remove(&mut th, k).unwrap(),
                                        model.remove(&k).is_some()
                                    );
                                }
                            }
                            model
                        })
                    })
                    .collect();
                for r in readers {
                    r.join().unwrap();
                }
                writers.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let mut want: BTreeMap<u64, Vec<u8>> = models.into_iter().flatten().collect();
            for k in 0..100u64 {
                let k = k * (W + 1) + W;
                want.insert(k, val(k, 0));
            }
            let mut th = txp.thread().unwrap();
            agrees(&t, &mut th, &want, &format!("{strategy}"));
            assert!(
                t.rebalances().merges > 0,
                "{strategy}: {:?}",
                t.rebalances()
            );
        }
    }

    /// The descent's word-wise comparison is `memcmp` order.
    #[test]
    fn key_cmp_is_bytewise_order() {
        let mut x = 5u64;
        let mut next = || {
            x = ds::mix64(x);
            let mut k = key32(x % 7);
            // Equal prefixes of every length, so each word decides once.
            k[(x >> 8) as usize % KEY] ^= (x >> 16) as u8 & 3;
            k
        };
        for _ in 0..20_000 {
            let (a, b) = (next(), next());
            assert_eq!(key_cmp(&a, &key_words(&b)), a.cmp(&b), "{a:?} {b:?}");
        }
    }

    /// The in-DRAM search answers as `binary_search` on sorted keys, for
    /// keys present and missing, at every node size up to the largest.
    #[test]
    fn search_is_binary_search() {
        let mut x = 11u64;
        for n in 0..=MAXF {
            let mut keys: Vec<[u8; KEY]> = (0..n)
                .map(|_| {
                    x = ds::mix64(x);
                    key32(x % 1000)
                })
                .collect();
            keys.sort();
            keys.dedup();
            for probe in 0..1000u64 {
                let k = key32(probe);
                assert_eq!(
                    search(&keys, &key_words(&k)),
                    keys.binary_search(&k),
                    "{n} keys, probe {probe}"
                );
            }
        }
    }

    /// A node claiming more keys than the fanout, or a header claiming a
    /// fanout or height out of range, fails with `Corrupt` — from the
    /// lock walk, `get`, and inside the insert and remove transactions —
    /// and never panics; restored, the tree works again.
    #[test]
    fn corrupt_counts_fail_cleanly() {
        for strategy in Strategy::ALL {
            let p = pool();
            let txp = txpool(&p, strategy);
            // The whole pool, addressed by pool offset as `txp` does: for
            // writes outside a transaction.
            let whole = Region::whole(p.medium().clone());
            let mut th = txp.thread().unwrap();
            let t = BpTree::create(&mut th, opts(4)).unwrap();
            // Even keys: odd ones are missing keys inside the leftmost leaf.
            for k in 0..60u64 {
                t.insert(&mut th, 2 * k, &val(2 * k, 0)).unwrap();
            }
            let (root, h) = t.root_height().unwrap();
            assert!(h >= 3);
            let mut leaf = root;
            for _ in 1..h {
                leaf = t.ptr(leaf, 0).unwrap();
            }
            let corrupt = |r: Result<u64>| matches!(r, Err(TxError::Corrupt(_)));
            let run = |th: &mut TxThread<'_>, f: &'static TxFunc, k: u64| {
                let v = val(k, 1);
                let bufs: &[&[u8]] = if f.id == INSERT.id { &[&v] } else { &[] };
                th.run(f, &pack_args(&[t.header, k]), bufs)
            };
            for x in [root, leaf] {
                let n = t.count(x).unwrap();
                whole.store_u64((x + N_N) as usize, 5);
                assert!(matches!(t.get(0), Err(TxError::Corrupt(_))), "{strategy}");
                let r = t.insert(&mut th, 1, &val(1, 0));
                assert!(
                    matches!(r, Err(TxError::Corrupt(_))),
                    "{strategy} {x:#x} {r:?}"
                );
                assert!(matches!(t.remove(&mut th, 0), Err(TxError::Corrupt(_))));
                for f in [&INSERT, &REMOVE] {
                    assert!(corrupt(run(&mut th, f, 0)), "{strategy} {}", f.name);
                    assert!(corrupt(run(&mut th, f, 1)), "{strategy} {}", f.name);
                }
                whole.store_u64((x + N_N) as usize, n as u64);
            }
            for (word, bad) in [
                (H_FANOUT, 1000),
                (H_FANOUT, 2),
                (H_HEIGHT, 0),
                (H_HEIGHT, 1 << 40),
            ] {
                let old = t.txp.read_u64(t.header + word).unwrap();
                whole.store_u64((t.header + word) as usize, bad);
                for f in [&INSERT, &REMOVE] {
                    assert!(
                        corrupt(run(&mut th, f, 7)),
                        "{strategy} {} {word} {bad}",
                        f.name
                    );
                }
                whole.store_u64((t.header + word) as usize, old);
            }
            th.quiesce();
            t.shape().unwrap();
            assert!(t.insert(&mut th, 1000, &val(1000, 0)).unwrap());
            assert!(t.remove(&mut th, 0).unwrap());
            assert_eq!(t.get(1000).unwrap(), Some(val(1000, 0)));
        }
    }

    /// `shape` refuses an underfull node and an empty non-root leaf.
    #[test]
    fn shape_refuses_underfull_nodes() {
        let p = pool();
        let txp = txpool(&p, Strategy::Undo);
        let whole = Region::whole(p.medium().clone());
        let mut th = txp.thread().unwrap();
        let t = BpTree::create(&mut th, opts(4)).unwrap();
        for k in 0..20u64 {
            t.insert(&mut th, k, &val(k, 0)).unwrap();
        }
        t.shape().unwrap();
        // Shrink the leftmost leaf's count by hand (outside a transaction).
        let (root, h) = t.root_height().unwrap();
        let mut x = root;
        for _ in 1..h {
            x = t.ptr(x, 0).unwrap();
        }
        let n = t.count(x).unwrap();
        for bad in [min_keys(4) as u64 - 1, 0] {
            whole.store_u64((x + N_N) as usize, bad);
            let e = t.shape().unwrap_err();
            assert!(e.contains("below the minimum"), "{e}");
        }
        whole.store_u64((x + N_N) as usize, n as u64);
        t.shape().unwrap();
    }
}
