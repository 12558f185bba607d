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
//! and a write lock on the leaf — enough when the leaf has room; otherwise
//! it releases everything and write-locks the header and the whole path
//! (a split may climb to the root). Locks are always taken top-down and
//! held until the transaction returns, so writers never deadlock and
//! conflicting transactions never run at once. Readers read-lock the path.
//!
//! Deletion removes the key from its leaf without merging underfull
//! nodes (separators stay valid bounds; an empty leaf stays linked).
//!
//! # On-media format (pool offsets, little-endian)
//!
//! Header block (64 bytes): magic `FERRBPTR`, `fanout` F u64 (most keys
//! per node), `value_len` u64, `root` u64, `height` u64 (1: the root is a
//! leaf), 24 reserved bytes.
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
//! `n ≥ 1` keys and `n + 1` children; following `next` from the leftmost
//! leaf visits every leaf once, left to right; every node and value block
//! is allocated and large enough.

use super::{DsOptions, KvMap, Shape, Structure, header_bytes, le, mix64};
use crate::error::{Result, TxError};
use crate::pool::TxPool;
use crate::registry::{Inputs, TxFunc, pack_args};
use crate::tx::{Tx, TxThread};
use ferrite_alloc::PAllocator;
use ferrite_pmem::POff;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

pub const MAGIC: [u8; 8] = *b"FERRBPTR";
/// Bytes of a key.
pub const KEY: usize = 32;
const HDR: usize = 64;
const H_FANOUT: u64 = 8;
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
/// Removes: args `[header, key]`.
pub static REMOVE: TxFunc = TxFunc {
    id: 0x4203,
    name: "bptree-remove",
    body: tx_remove,
};

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

fn node_bytes(f: u64) -> u64 {
    32 + 32 * f + 8 * (f + 1)
}

fn ptrs_off(f: u64) -> u64 {
    N_KEYS + 32 * f
}

fn p64(off: u64) -> POff<u64> {
    POff::new(off)
}

fn tx_create(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let (f, vlen) = (inp.arg_u64(0), inp.arg_u64(1));
    let h = tx.alloc(HDR)?;
    let root = tx.alloc(node_bytes(f) as usize)?;
    let mut nb = vec![0u8; node_bytes(f) as usize];
    nb[0..8].copy_from_slice(&1u64.to_le_bytes());
    tx.write(root, &nb)?;
    let mut b = [0u8; HDR];
    b[0..8].copy_from_slice(&MAGIC);
    b[8..16].copy_from_slice(&f.to_le_bytes());
    b[16..24].copy_from_slice(&vlen.to_le_bytes());
    b[24..32].copy_from_slice(&root.raw().to_le_bytes());
    b[32..40].copy_from_slice(&1u64.to_le_bytes());
    tx.write(h, &b)?;
    tx.set_root(h.raw())?;
    Ok(h.raw())
}

/// A node read into DRAM inside a transaction.
struct Node {
    off: u64,
    n: usize,
    keys: Vec<[u8; KEY]>,
    ptrs: Vec<u64>,
}

/// Reads a node's `n`, keys and pointers (marks them read).
fn load(tx: &mut Tx<'_, '_>, off: u64, f: u64, leaf: bool) -> Result<Node> {
    let n = tx.read_u64(p64(off + N_N))? as usize;
    if n as u64 > f {
        return Err(TxError::Corrupt(format!(
            "B+tree node {off:#x} holds {n} keys"
        )));
    }
    let mut kb = vec![0u8; n * KEY];
    tx.read(p64(off + N_KEYS), &mut kb)?;
    let np = if leaf { n } else { n + 1 };
    let mut pb = vec![0u8; np * 8];
    tx.read(p64(off + ptrs_off(f)), &mut pb)?;
    Ok(Node {
        off,
        n,
        keys: kb
            .chunks(KEY)
            .map(|c| c.try_into().expect("32 bytes"))
            .collect(),
        ptrs: pb.chunks(8).map(|c| le(c, 0)).collect(),
    })
}

/// Index of the child of an internal node that covers `k`.
fn child_index(keys: &[[u8; KEY]], k: &[u8; KEY]) -> usize {
    keys.partition_point(|x| x <= k)
}

/// Writes `keys[from..]` and `ptrs[from..]` (and `n`) of a node whose
/// DRAM image changed from index `from` on.
fn store(tx: &mut Tx<'_, '_>, f: u64, nd: &Node, from: usize, pfrom: usize) -> Result<()> {
    let kb: Vec<u8> = nd.keys[from..].iter().flatten().copied().collect();
    tx.write(p64(nd.off + N_KEYS + (from * KEY) as u64), &kb)?;
    let pb: Vec<u8> = nd.ptrs[pfrom..]
        .iter()
        .flat_map(|p| p.to_le_bytes())
        .collect();
    tx.write(p64(nd.off + ptrs_off(f) + 8 * pfrom as u64), &pb)?;
    tx.write_u64(p64(nd.off + N_N), nd.n as u64)
}

fn tx_insert(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let (hdr, key) = (inp.arg_u64(0), inp.arg_u64(1));
    let value = inp.buf(0);
    let k = key32(key);
    let mut hb = [0u8; 40];
    tx.read(p64(hdr), &mut hb)?;
    let (f, root, height) = (le(&hb, 8), le(&hb, 24), le(&hb, 32));
    // Descend, remembering the path and the child index taken.
    let mut path: Vec<(Node, usize)> = Vec::new();
    let mut x = root;
    for _ in 1..height {
        let nd = load(tx, x, f, false)?;
        let i = child_index(&nd.keys, &k);
        x = nd.ptrs[i];
        path.push((nd, i));
    }
    let mut leaf = load(tx, x, f, true)?;
    let pos = leaf.keys.partition_point(|x| x < &k);
    if pos < leaf.n && leaf.keys[pos] == k {
        tx.write(POff::<u8>::new(leaf.ptrs[pos]), value)?;
        return Ok(0);
    }
    // Allocate everything first: the value, a node per split, a new root
    // if the split reaches it (a clobber transaction must not fail after
    // its first write).
    let mut splits = 0;
    if leaf.n as u64 == f {
        splits = 1;
        for (nd, _) in path.iter().rev() {
            if nd.n as u64 == f {
                splits += 1;
            } else {
                break;
            }
        }
    }
    let grows = splits == path.len() + 1;
    let vb = tx.alloc(value.len())?;
    let mut fresh = Vec::with_capacity(splits + 1);
    for _ in 0..splits + usize::from(grows) {
        fresh.push(tx.alloc(node_bytes(f) as usize)?.raw());
    }
    tx.write(vb, value)?;
    leaf.keys.insert(pos, k);
    leaf.ptrs.insert(pos, vb.raw());
    leaf.n += 1;
    if leaf.n as u64 <= f {
        store(tx, f, &leaf, pos, pos)?;
        return Ok(1);
    }
    // Split the leaf: the left half stays, the right half moves to a new
    // leaf linked after it; its first key goes up.
    let mid = leaf.n / 2;
    let right = Node {
        off: fresh.pop().expect("allocated"),
        n: leaf.n - mid,
        keys: leaf.keys.split_off(mid),
        ptrs: leaf.ptrs.split_off(mid),
    };
    leaf.n = mid;
    let next = tx.read_u64(p64(leaf.off + N_NEXT))?;
    write_new(tx, f, &right, true, next)?;
    tx.write_u64(p64(leaf.off + N_NEXT), right.off)?;
    store(tx, f, &leaf, pos.min(mid), pos.min(mid))?;
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
            off: fresh.pop().expect("allocated"),
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
        off: fresh.pop().expect("allocated"),
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

/// Writes a whole new node (a block allocated in this transaction).
fn write_new(tx: &mut Tx<'_, '_>, f: u64, nd: &Node, leaf: bool, next: u64) -> Result<()> {
    let mut b = vec![0u8; node_bytes(f) as usize];
    b[0..8].copy_from_slice(&u64::from(leaf).to_le_bytes());
    b[8..16].copy_from_slice(&(nd.n as u64).to_le_bytes());
    b[16..24].copy_from_slice(&next.to_le_bytes());
    for (i, k) in nd.keys.iter().enumerate() {
        b[32 + KEY * i..32 + KEY * (i + 1)].copy_from_slice(k);
    }
    let po = ptrs_off(f) as usize;
    for (i, p) in nd.ptrs.iter().enumerate() {
        b[po + 8 * i..po + 8 * i + 8].copy_from_slice(&p.to_le_bytes());
    }
    tx.write(p64(nd.off), &b)
}

fn tx_remove(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let (hdr, key) = (inp.arg_u64(0), inp.arg_u64(1));
    let k = key32(key);
    let mut hb = [0u8; 40];
    tx.read(p64(hdr), &mut hb)?;
    let (f, root, height) = (le(&hb, 8), le(&hb, 24), le(&hb, 32));
    let mut x = root;
    for _ in 1..height {
        let nd = load(tx, x, f, false)?;
        x = nd.ptrs[child_index(&nd.keys, &k)];
    }
    let mut leaf = load(tx, x, f, true)?;
    let pos = leaf.keys.partition_point(|x| x < &k);
    if pos == leaf.n || leaf.keys[pos] != k {
        return Ok(0);
    }
    let vb = leaf.ptrs[pos];
    leaf.keys.remove(pos);
    leaf.ptrs.remove(pos);
    leaf.n -= 1;
    store(tx, f, &leaf, pos, pos)?;
    tx.free(POff::new(vb))?;
    Ok(1)
}

/// A held node lock.
enum Held<'a> {
    R(#[allow(dead_code)] RwLockReadGuard<'a, ()>),
    W(#[allow(dead_code)] RwLockWriteGuard<'a, ()>),
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
}

impl<'p> BpTree<'p> {
    /// Creates an empty tree (one transaction) and makes it the root.
    pub fn create(th: &mut TxThread<'p>, opts: DsOptions) -> Result<BpTree<'p>> {
        if !(3..=64).contains(&opts.fanout) {
            return Err(TxError::BadOption("B+tree fanout must be 3..=64".into()));
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

    pub fn open(txp: &'p TxPool, header: u64) -> Result<BpTree<'p>> {
        let h = header_bytes(txp, header, &MAGIC, 40)?;
        let (fanout, value_len) = (le(&h, 8), le(&h, 16) as usize);
        if !(3..=64).contains(&fanout) || value_len == 0 || value_len > 4096 {
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
        })
    }

    fn lock(&self, node: u64) -> Result<&RwLock<()>> {
        node.checked_sub(self.base)
            .and_then(|d| self.locks.get((d >> self.shift) as usize))
            .ok_or_else(|| TxError::Corrupt(format!("B+tree node {node:#x} outside the heap")))
    }

    fn root_height(&self) -> Result<(u64, u64)> {
        Ok((
            self.txp.read_u64(self.header + H_ROOT)?,
            self.txp.read_u64(self.header + H_HEIGHT)?,
        ))
    }

    /// The child of internal node `x` covering `k` (read under its lock).
    fn child(&self, x: u64, k: &[u8; KEY]) -> Result<u64> {
        let t = self.txp;
        let n = t.read_u64(x + N_N)? as usize;
        let mut kb = vec![0u8; n * KEY];
        t.read(x + N_KEYS, &mut kb)?;
        let keys: Vec<[u8; KEY]> = kb.chunks(KEY).map(|c| c.try_into().expect("32")).collect();
        t.read_u64(x + ptrs_off(self.fanout) + 8 * child_index(&keys, k) as u64)
    }

    /// Locks the path to `k`'s leaf: read locks above it, `leaf_write` on
    /// it. Returns the leaf and the guards.
    fn lock_path(
        &self,
        k: &[u8; KEY],
        write_all: bool,
        leaf_write: bool,
    ) -> Result<(u64, Vec<Held<'_>>)> {
        let mut held = Vec::new();
        let (root, height) = self.root_height()?;
        let mut x = root;
        for depth in 1..=height {
            let l = self.lock(x)?;
            let is_leaf = depth == height;
            held.push(if write_all || (is_leaf && leaf_write) {
                Held::W(l.write())
            } else {
                Held::R(l.read())
            });
            if !is_leaf {
                x = self.child(x, k)?;
            }
        }
        Ok((x, held))
    }
}

impl KvMap for BpTree<'_> {
    fn structure(&self) -> Structure {
        Structure::BpTree
    }

    fn insert(&self, th: &mut TxThread<'_>, key: u64, value: &[u8]) -> Result<bool> {
        super::check_value_len(value, self.value_len, "tree")?;
        let k = key32(key);
        let args = pack_args(&[self.header, key]);
        {
            // Optimistic: the leaf has room, so nothing above it changes.
            let _h = self.head_lock.read();
            let (leaf, _held) = self.lock_path(&k, false, true)?;
            if self.txp.read_u64(leaf + N_N)? < self.fanout {
                return Ok(th.run(&INSERT, &args, &[value])? == 1);
            }
        }
        // The leaf may split, up to the root: write-lock the whole path.
        let _h = self.head_lock.write();
        let (_, _held) = self.lock_path(&k, true, true)?;
        Ok(th.run(&INSERT, &args, &[value])? == 1)
    }

    fn remove(&self, th: &mut TxThread<'_>, key: u64) -> Result<bool> {
        let k = key32(key);
        let _h = self.head_lock.read();
        let (_, _held) = self.lock_path(&k, false, true)?;
        Ok(th.run(&REMOVE, &pack_args(&[self.header, key]), &[])? == 1)
    }

    fn get(&self, key: u64) -> Result<Option<Vec<u8>>> {
        let k = key32(key);
        let _h = self.head_lock.read();
        let (leaf, _held) = self.lock_path(&k, false, false)?;
        let t = self.txp;
        let n = t.read_u64(leaf + N_N)? as usize;
        for i in 0..n {
            let mut kb = [0u8; KEY];
            t.read(leaf + N_KEYS + (KEY * i) as u64, &mut kb)?;
            if kb == k {
                let vb = t.read_u64(leaf + ptrs_off(self.fanout) + 8 * i as u64)?;
                let mut v = vec![0u8; self.value_len];
                t.read(vb, &mut v)?;
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    fn shape(&self) -> std::result::Result<Shape, String> {
        let t = self.txp;
        let f = self.fanout;
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
                    need(&mut shape, vb, self.value_len as u64)?;
                    let key = u64::from_be_bytes(k[0..8].try_into().expect("8"));
                    if key32(key) != *k {
                        return Err(format!("node {x:#x}: key {key} is not a key32"));
                    }
                    let mut v = vec![0u8; self.value_len];
                    t.read(vb, &mut v).map_err(|e| e.to_string())?;
                    if shape.entries.insert(key, v).is_some() {
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
}
