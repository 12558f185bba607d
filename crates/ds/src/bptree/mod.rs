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

mod insert;
mod remove;

use insert::tx_insert;
pub use remove::min_keys;
use remove::{R_BORROW_LEFT, R_BORROW_RIGHT, R_COLLAPSE, R_MERGE_SHIFT, R_REMOVED, tx_remove};

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
mod tests;
