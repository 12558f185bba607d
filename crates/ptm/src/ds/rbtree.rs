//! A persistent red-black tree u64 → u64 (STAMP Vacation's maps: cars,
//! flights, rooms and customers, id → row block). The algorithms are the
//! textbook ones (Cormen et al., *Introduction to Algorithms*, ch. 13) with
//! 0 as the null offset in place of a sentinel node; deletion therefore
//! carries the parent of the possibly-null node it fixes up.
//!
//! ## Persistent layout (little-endian words)
//! Header block, 24 bytes:
//! ```text
//! +0  magic   = RBTREE_MAGIC ("FPTMRBTR")
//! +8  root    offset of the root node (0 = empty tree)
//! +16 version = super::VERSION (2)
//! ```
//! Version 1 (a 16-byte header, 48-byte nodes without a check word) is
//! refused with [`crate::PtmError::StructureVersion`].
//!
//! Node block, 56 bytes, allocated by the inserting transaction and freed
//! by the removing one:
//! ```text
//! +0  key
//! +8  value
//! +16 left    (0 = none)
//! +24 right   (0 = none)
//! +32 parent  (0 for the root)
//! +40 color   0 = red, 1 = black
//! +48 check   super::check_word(seed, key, value)
//! ```
//! The check word is stored by the transaction that stores the key or the
//! value; rebalancing moves nodes, never keys or values, so it never
//! changes it. The seed is `crc32c(mix64(header ^ RBTREE_MAGIC))`. A
//! search verifies the key check of every node it passes (a damaged key
//! would otherwise steer it away from a present key), a lookup the record
//! check of what it returns; a failure rolls back with
//! [`crate::PtmError::CorruptRecord`] naming the key, and
//! [`PRbTree::check`] lists every damaged record. The links and the color
//! carry no check.
//! Invariants: binary-search order on keys (unique); `parent` is the inverse
//! of `left`/`right`; the root is black; a red node has black (or null)
//! children; every path from a node to a null child has the same number of
//! black nodes.

use super::{VERSION, check_result, check_version, check_word, corrupt, damaged, key_ok};
use crate::{PtmThread, Tx, TxResult};
use ferrite_pmem::POff;

/// "FPTMRBTR" read as a little-endian u64.
pub const RBTREE_MAGIC: u64 = u64::from_le_bytes(*b"FPTMRBTR");
/// Bytes of a node.
pub const NODE_BYTES: usize = 56;
const NAME: &str = "ptm rbtree";

const H_MAGIC: u64 = 0;
const H_ROOT: u64 = 8;
const H_VERSION: u64 = 16;
const KEY: u64 = 0;
const VALUE: u64 = 8;
const LEFT: u64 = 16;
const RIGHT: u64 = 24;
const PARENT: u64 = 32;
const COLOR: u64 = 40;
const CHECK: u64 = 48;
const RED: u64 = 0;
const BLACK: u64 = 1;

/// A handle on a persistent red-black tree (module docs). `Copy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PRbTree {
    hdr: u64,
    /// The records' checksum seed.
    seed: u32,
}

impl PRbTree {
    /// Creates an empty tree.
    pub fn create_in(tx: &mut Tx<'_>) -> TxResult<PRbTree> {
        let hdr = tx.alloc(24)?.raw();
        tx.store(hdr + H_MAGIC, RBTREE_MAGIC)?;
        tx.store(hdr + H_ROOT, 0)?;
        tx.store(hdr + H_VERSION, VERSION)?;
        Ok(PRbTree {
            hdr,
            seed: super::seed(hdr, RBTREE_MAGIC),
        })
    }

    /// Opens the tree whose header is at `hdr` ([`super::CORRUPT`] if not
    /// one, [`crate::PtmError::StructureVersion`] if another version's).
    pub fn open(tx: &mut Tx<'_>, hdr: u64) -> TxResult<PRbTree> {
        if hdr == 0 || !hdr.is_multiple_of(8) || tx.load(hdr + H_MAGIC)? != RBTREE_MAGIC {
            return corrupt();
        }
        check_version(tx, NAME, hdr, hdr + H_VERSION)?;
        Ok(PRbTree {
            hdr,
            seed: super::seed(hdr, RBTREE_MAGIC),
        })
    }

    /// The header block's offset.
    pub fn header(&self) -> u64 {
        self.hdr
    }

    // Field access. Null (0) nodes have no fields: reading one is corrupt
    // data (a valid tree never asks), except for the color, which is black.

    fn get_f(tx: &mut Tx<'_>, n: u64, f: u64) -> TxResult<u64> {
        if n == 0 || !n.is_multiple_of(8) {
            return corrupt();
        }
        tx.load(n + f)
    }
    fn set_f(tx: &mut Tx<'_>, n: u64, f: u64, v: u64) -> TxResult<()> {
        if n == 0 || !n.is_multiple_of(8) {
            return corrupt();
        }
        tx.store(n + f, v)
    }
    fn color(tx: &mut Tx<'_>, n: u64) -> TxResult<u64> {
        if n == 0 {
            Ok(BLACK)
        } else {
            Self::get_f(tx, n, COLOR)
        }
    }
    fn root(&self, tx: &mut Tx<'_>) -> TxResult<u64> {
        tx.load(self.hdr + H_ROOT)
    }
    fn set_root(&self, tx: &mut Tx<'_>, n: u64) -> TxResult<()> {
        tx.store(self.hdr + H_ROOT, n)
    }

    /// The key of node `x`, its key check verified (`looking` names the
    /// key looked up in the error).
    fn key_of(&self, tx: &mut Tx<'_>, x: u64, looking: u64) -> TxResult<u64> {
        let k = Self::get_f(tx, x, KEY)?;
        if !key_ok(self.seed, k, tx.load(x + CHECK)?) {
            return damaged(
                NAME,
                looking,
                &format!("node {x:#x} on its path: key check"),
            );
        }
        Ok(k)
    }

    /// The value of node `n` (of `key`), its record check verified.
    fn value_of(&self, tx: &mut Tx<'_>, n: u64, key: u64) -> TxResult<u64> {
        let v = Self::get_f(tx, n, VALUE)?;
        if tx.load(n + CHECK)? != check_word(self.seed, key, v) {
            return damaged(NAME, key, "checksum mismatch");
        }
        Ok(v)
    }

    /// The node of `key`, or 0.
    fn find(&self, tx: &mut Tx<'_>, key: u64) -> TxResult<u64> {
        let mut x = self.root(tx)?;
        while x != 0 {
            let k = self.key_of(tx, x, key)?;
            if key == k {
                return Ok(x);
            }
            x = Self::get_f(tx, x, if key < k { LEFT } else { RIGHT })?;
        }
        Ok(0)
    }

    /// The value of `key` (its record check verified).
    pub fn get(&self, tx: &mut Tx<'_>, key: u64) -> TxResult<Option<u64>> {
        let n = self.find(tx, key)?;
        if n == 0 {
            return Ok(None);
        }
        self.value_of(tx, n, key).map(Some)
    }

    /// True when `key` is present.
    pub fn contains(&self, tx: &mut Tx<'_>, key: u64) -> TxResult<bool> {
        Ok(self.find(tx, key)? != 0)
    }

    /// Replaces the value of an existing key; false when absent.
    pub fn update(&self, tx: &mut Tx<'_>, key: u64, value: u64) -> TxResult<bool> {
        let n = self.find(tx, key)?;
        if n == 0 {
            return Ok(false);
        }
        Self::set_f(tx, n, VALUE, value)?;
        Self::set_f(tx, n, CHECK, check_word(self.seed, key, value))?;
        Ok(true)
    }

    /// Inserts or replaces; returns the previous value.
    pub fn insert(&self, tx: &mut Tx<'_>, key: u64, value: u64) -> TxResult<Option<u64>> {
        let mut y = 0;
        let mut x = self.root(tx)?;
        let mut less = false;
        while x != 0 {
            y = x;
            let k = self.key_of(tx, x, key)?;
            if key == k {
                let old = self.value_of(tx, x, key)?;
                Self::set_f(tx, x, VALUE, value)?;
                Self::set_f(tx, x, CHECK, check_word(self.seed, key, value))?;
                return Ok(Some(old));
            }
            less = key < k;
            x = Self::get_f(tx, x, if less { LEFT } else { RIGHT })?;
        }
        let z = tx.alloc(NODE_BYTES)?.raw();
        tx.store(z + KEY, key)?;
        tx.store(z + VALUE, value)?;
        tx.store(z + LEFT, 0)?;
        tx.store(z + RIGHT, 0)?;
        tx.store(z + PARENT, y)?;
        tx.store(z + COLOR, RED)?;
        tx.store(z + CHECK, check_word(self.seed, key, value))?;
        if y == 0 {
            self.set_root(tx, z)?;
        } else {
            Self::set_f(tx, y, if less { LEFT } else { RIGHT }, z)?;
        }
        self.insert_fixup(tx, z)?;
        Ok(None)
    }

    /// Rotates `x` down to the `dir` side (LEFT: its right child rises).
    fn rotate(&self, tx: &mut Tx<'_>, x: u64, dir: u64) -> TxResult<()> {
        let other = if dir == LEFT { RIGHT } else { LEFT };
        let y = Self::get_f(tx, x, other)?;
        let inner = Self::get_f(tx, y, dir)?;
        Self::set_f(tx, x, other, inner)?;
        if inner != 0 {
            Self::set_f(tx, inner, PARENT, x)?;
        }
        let p = Self::get_f(tx, x, PARENT)?;
        Self::set_f(tx, y, PARENT, p)?;
        if p == 0 {
            self.set_root(tx, y)?;
        } else if Self::get_f(tx, p, LEFT)? == x {
            Self::set_f(tx, p, LEFT, y)?;
        } else {
            Self::set_f(tx, p, RIGHT, y)?;
        }
        Self::set_f(tx, y, dir, x)?;
        Self::set_f(tx, x, PARENT, y)
    }

    fn insert_fixup(&self, tx: &mut Tx<'_>, mut z: u64) -> TxResult<()> {
        loop {
            let p = Self::get_f(tx, z, PARENT)?;
            if p == 0 || Self::color(tx, p)? != RED {
                break;
            }
            // A red parent is never the root, so the grandparent exists.
            let g = Self::get_f(tx, p, PARENT)?;
            let (side, other) = if Self::get_f(tx, g, LEFT)? == p {
                (LEFT, RIGHT)
            } else {
                (RIGHT, LEFT)
            };
            let u = Self::get_f(tx, g, other)?;
            if Self::color(tx, u)? == RED {
                Self::set_f(tx, p, COLOR, BLACK)?;
                Self::set_f(tx, u, COLOR, BLACK)?;
                Self::set_f(tx, g, COLOR, RED)?;
                z = g;
            } else {
                let mut p = p;
                if Self::get_f(tx, p, other)? == z {
                    z = p;
                    self.rotate(tx, z, side)?;
                    p = Self::get_f(tx, z, PARENT)?;
                }
                Self::set_f(tx, p, COLOR, BLACK)?;
                Self::set_f(tx, g, COLOR, RED)?;
                self.rotate(tx, g, other)?;
            }
        }
        let r = self.root(tx)?;
        if Self::color(tx, r)? != BLACK {
            Self::set_f(tx, r, COLOR, BLACK)?;
        }
        Ok(())
    }

    /// Puts `v` (may be null) where `u` hangs.
    fn transplant(&self, tx: &mut Tx<'_>, u: u64, v: u64) -> TxResult<()> {
        let p = Self::get_f(tx, u, PARENT)?;
        if p == 0 {
            self.set_root(tx, v)?;
        } else if Self::get_f(tx, p, LEFT)? == u {
            Self::set_f(tx, p, LEFT, v)?;
        } else {
            Self::set_f(tx, p, RIGHT, v)?;
        }
        if v != 0 {
            Self::set_f(tx, v, PARENT, p)?;
        }
        Ok(())
    }

    /// Removes `key`; returns its value.
    pub fn remove(&self, tx: &mut Tx<'_>, key: u64) -> TxResult<Option<u64>> {
        let z = self.find(tx, key)?;
        if z == 0 {
            return Ok(None);
        }
        let value = self.value_of(tx, z, key)?;
        let zl = Self::get_f(tx, z, LEFT)?;
        let zr = Self::get_f(tx, z, RIGHT)?;
        let removed_color;
        let (x, xp);
        if zl == 0 {
            removed_color = Self::color(tx, z)?;
            x = zr;
            xp = Self::get_f(tx, z, PARENT)?;
            self.transplant(tx, z, zr)?;
        } else if zr == 0 {
            removed_color = Self::color(tx, z)?;
            x = zl;
            xp = Self::get_f(tx, z, PARENT)?;
            self.transplant(tx, z, zl)?;
        } else {
            // y: z's successor, the minimum of its right subtree.
            let mut y = zr;
            loop {
                let l = Self::get_f(tx, y, LEFT)?;
                if l == 0 {
                    break;
                }
                y = l;
            }
            removed_color = Self::color(tx, y)?;
            x = Self::get_f(tx, y, RIGHT)?;
            if Self::get_f(tx, y, PARENT)? == z {
                xp = y;
            } else {
                xp = Self::get_f(tx, y, PARENT)?;
                self.transplant(tx, y, x)?;
                Self::set_f(tx, y, RIGHT, zr)?;
                Self::set_f(tx, zr, PARENT, y)?;
            }
            self.transplant(tx, z, y)?;
            Self::set_f(tx, y, LEFT, zl)?;
            Self::set_f(tx, zl, PARENT, y)?;
            let zc = Self::color(tx, z)?;
            Self::set_f(tx, y, COLOR, zc)?;
        }
        if removed_color == BLACK {
            self.delete_fixup(tx, x, xp)?;
        }
        tx.free(POff::new(z))?;
        Ok(Some(value))
    }

    fn delete_fixup(&self, tx: &mut Tx<'_>, mut x: u64, mut xp: u64) -> TxResult<()> {
        while x != self.root(tx)? && Self::color(tx, x)? == BLACK {
            let (side, other) = if Self::get_f(tx, xp, LEFT)? == x {
                (LEFT, RIGHT)
            } else {
                (RIGHT, LEFT)
            };
            // x carries an extra black, so its sibling has a black height ≥ 1
            // and exists.
            let mut w = Self::get_f(tx, xp, other)?;
            if Self::color(tx, w)? == RED {
                Self::set_f(tx, w, COLOR, BLACK)?;
                Self::set_f(tx, xp, COLOR, RED)?;
                self.rotate(tx, xp, side)?;
                w = Self::get_f(tx, xp, other)?;
            }
            let wn = Self::get_f(tx, w, side)?;
            let wf = Self::get_f(tx, w, other)?;
            if Self::color(tx, wn)? == BLACK && Self::color(tx, wf)? == BLACK {
                Self::set_f(tx, w, COLOR, RED)?;
                x = xp;
                xp = Self::get_f(tx, x, PARENT)?;
            } else {
                if Self::color(tx, wf)? == BLACK {
                    Self::set_f(tx, wn, COLOR, BLACK)?;
                    Self::set_f(tx, w, COLOR, RED)?;
                    self.rotate(tx, w, other)?;
                    w = Self::get_f(tx, xp, other)?;
                }
                let pc = Self::color(tx, xp)?;
                Self::set_f(tx, w, COLOR, pc)?;
                Self::set_f(tx, xp, COLOR, BLACK)?;
                let wf = Self::get_f(tx, w, other)?;
                if wf != 0 {
                    Self::set_f(tx, wf, COLOR, BLACK)?;
                }
                self.rotate(tx, xp, side)?;
                x = self.root(tx)?;
                xp = 0;
            }
        }
        if x != 0 && Self::color(tx, x)? != BLACK {
            Self::set_f(tx, x, COLOR, BLACK)?;
        }
        Ok(())
    }

    /// Calls `f(key, value)` for up to `limit` entries with keys ≥ `from`,
    /// in key order; returns how many it visited. Every key passed and
    /// every record returned is verified (a damaged one rolls back with
    /// [`crate::PtmError::CorruptRecord`]).
    pub fn scan(
        &self,
        tx: &mut Tx<'_>,
        from: u64,
        limit: usize,
        f: &mut dyn FnMut(u64, u64),
    ) -> TxResult<usize> {
        // Lower bound: the smallest key ≥ from.
        let mut x = self.root(tx)?;
        let mut cand = 0;
        while x != 0 {
            let k = self.key_of(tx, x, from)?;
            if k >= from {
                cand = x;
                x = Self::get_f(tx, x, LEFT)?;
            } else {
                x = Self::get_f(tx, x, RIGHT)?;
            }
        }
        let mut seen = 0;
        let mut n = cand;
        while n != 0 && seen < limit {
            let k = self.key_of(tx, n, from)?;
            f(k, self.value_of(tx, n, k)?);
            seen += 1;
            // In-order successor.
            let r = Self::get_f(tx, n, RIGHT)?;
            if r != 0 {
                n = r;
                loop {
                    let l = Self::get_f(tx, n, LEFT)?;
                    if l == 0 {
                        break;
                    }
                    n = l;
                }
            } else {
                loop {
                    let p = Self::get_f(tx, n, PARENT)?;
                    if p == 0 || Self::get_f(tx, p, LEFT)? == n {
                        n = p;
                        break;
                    }
                    n = p;
                }
            }
        }
        Ok(seen)
    }

    /// Collects every entry in key order, `chunk` entries per transaction
    /// (run with no concurrent writers).
    pub fn collect(&self, th: &mut PtmThread<'_>, chunk: usize) -> Result<Vec<(u64, u64)>, String> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        let mut from = 0u64;
        loop {
            let mut part = Vec::new();
            check_result(th.atomic(|tx| {
                part.clear();
                self.scan(tx, from, chunk.max(1), &mut |k, v| part.push((k, v)))?;
                Ok(Ok(()))
            }))?;
            let done = part.len() < chunk.max(1);
            let last = part.last().map(|e| e.0);
            out.extend(part);
            match last {
                Some(k) if !done && k < u64::MAX => from = k + 1,
                _ => return Ok(out),
            }
        }
    }

    /// Checks every invariant of the module docs, 4096 nodes per
    /// transaction (run with no concurrent writers). Returns the number of
    /// entries; a tree with damaged records is an error listing each one.
    pub fn check(&self, th: &mut PtmThread<'_>) -> Result<u64, String> {
        let hdr = self.hdr;
        let root = check_result(th.atomic(|tx| {
            PRbTree::open(tx, hdr)?;
            Ok(Ok(tx.load(hdr + H_ROOT)?))
        }))?;
        if root == 0 {
            return Ok(0);
        }
        let mut st = RbCheck {
            stack: vec![(root, 0u64, None, None, 0u32)],
            black_height: None,
            nodes: 0,
            damaged: Vec::new(),
        };
        while !st.stack.is_empty() {
            st = check_result(th.atomic(|tx| {
                let mut s = st.clone();
                Ok(self.check_some(tx, &mut s, root, 4096)?.map(|()| s))
            }))?;
        }
        super::damaged_result(NAME, st.nodes - st.damaged.len() as u64, &st.damaged)
    }

    /// [`PRbTree::check`] inside the caller's transaction (for small
    /// trees). Returns the number of entries.
    pub fn check_tx(&self, tx: &mut Tx<'_>) -> TxResult<Result<u64, String>> {
        PRbTree::open(tx, self.hdr)?;
        let root = tx.load(self.hdr + H_ROOT)?;
        if root == 0 {
            return Ok(Ok(0));
        }
        let mut st = RbCheck {
            stack: vec![(root, 0u64, None, None, 0u32)],
            black_height: None,
            nodes: 0,
            damaged: Vec::new(),
        };
        while !st.stack.is_empty() {
            if let Err(e) = self.check_some(tx, &mut st, root, usize::MAX)? {
                return Ok(Err(e));
            }
        }
        Ok(super::damaged_result(
            NAME,
            st.nodes - st.damaged.len() as u64,
            &st.damaged,
        ))
    }

    fn check_some(
        &self,
        tx: &mut Tx<'_>,
        st: &mut RbCheck,
        root: u64,
        budget: usize,
    ) -> TxResult<Result<(), String>> {
        for _ in 0..budget {
            // (node, its expected parent, bounds lo < key < hi, blacks above)
            let Some((n, parent, lo, hi, blacks)) = st.stack.pop() else {
                return Ok(Ok(()));
            };
            if !n.is_multiple_of(8) {
                return Ok(Err(format!("misaligned node {n:#x}")));
            }
            st.nodes += 1;
            if st.nodes > 1 << 40 || blacks > 128 {
                return Ok(Err("tree cyclic or too deep".into()));
            }
            let key = tx.load(n + KEY)?;
            let check = tx.load(n + CHECK)?;
            // A damaged key says nothing about the order: its children
            // are checked against the bounds of its parent.
            let key_good = key_ok(self.seed, key, check);
            if !key_good {
                st.damaged
                    .push((key, format!("key check mismatch (node at {n:#x})")));
            } else if check != check_word(self.seed, key, tx.load(n + VALUE)?) {
                st.damaged.push((key, "checksum mismatch".into()));
            }
            if key_good && (lo.is_some_and(|lo| key <= lo) || hi.is_some_and(|hi| key >= hi)) {
                return Ok(Err(format!("key {key} outside ({lo:?}, {hi:?})")));
            }
            if tx.load(n + PARENT)? != parent {
                return Ok(Err(format!("node {n:#x} (key {key}): wrong parent")));
            }
            let color = tx.load(n + COLOR)?;
            if color != RED && color != BLACK {
                return Ok(Err(format!("node {n:#x}: color {color}")));
            }
            if n == root && color != BLACK {
                return Ok(Err("red root".into()));
            }
            let blacks = blacks + u32::from(color == BLACK);
            let (left_hi, right_lo) = if key_good {
                (Some(key), Some(key))
            } else {
                (hi, lo)
            };
            for (side, lo2, hi2) in [(LEFT, lo, left_hi), (RIGHT, right_lo, hi)] {
                let c = tx.load(n + side)?;
                if c == 0 {
                    match st.black_height {
                        None => st.black_height = Some(blacks),
                        Some(b) if b != blacks => {
                            return Ok(Err(format!(
                                "black heights {b} and {blacks} (below key {key})"
                            )));
                        }
                        _ => {}
                    }
                } else {
                    if color == RED && tx.load(c + COLOR)? == RED {
                        return Ok(Err(format!("red node {key} has a red child")));
                    }
                    st.stack.push((c, n, lo2, hi2, blacks));
                }
            }
        }
        Ok(Ok(()))
    }
}

type Pending = (u64, u64, Option<u64>, Option<u64>, u32);

#[derive(Clone, Debug)]
struct RbCheck {
    stack: Vec<Pending>,
    black_height: Option<u32>,
    nodes: u64,
    /// Records whose check fails: (key as stored, what).
    damaged: Vec<(u64, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PtmError;
    use crate::ds::testutil::{Model, each_algorithm, xorshift};

    fn contents(t: PRbTree, th: &mut PtmThread<'_>) -> Model {
        t.collect(th, 37).unwrap().into_iter().collect()
    }

    #[test]
    fn random_ops_match_model() {
        each_algorithm(|ptm| {
            let mut th = ptm.thread().unwrap();
            let t = th.atomic(PRbTree::create_in).unwrap();
            let mut model = Model::new();
            let mut r = 5;
            for i in 0..5000 {
                let op = xorshift(&mut r) % 5;
                let key = xorshift(&mut r) % 400;
                let val = xorshift(&mut r);
                match op {
                    0 | 1 => {
                        let got = th.atomic(|tx| t.insert(tx, key, val)).unwrap();
                        assert_eq!(got, model.insert(key, val), "insert {i}");
                    }
                    2 => {
                        let got = th.atomic(|tx| t.remove(tx, key)).unwrap();
                        assert_eq!(got, model.remove(&key), "remove {i}");
                    }
                    3 => {
                        let got = th.atomic(|tx| t.get(tx, key)).unwrap();
                        assert_eq!(got, model.get(&key).copied(), "get {i}");
                    }
                    _ => {
                        let got = th.atomic(|tx| t.update(tx, key, val)).unwrap();
                        let want = model.get_mut(&key).map(|v| *v = val).is_some();
                        assert_eq!(got, want, "update {i}");
                    }
                }
                if i % 250 == 0 {
                    assert_eq!(t.check(&mut th).unwrap(), model.len() as u64, "op {i}");
                }
            }
            assert_eq!(t.check(&mut th).unwrap(), model.len() as u64);
            let one = th.atomic(|tx| t.check_tx(tx)).unwrap();
            assert_eq!(one, Ok(model.len() as u64));
            assert_eq!(contents(t, &mut th), model);
            // Drain it completely.
            let keys: Vec<u64> = model.keys().copied().collect();
            for k in keys {
                assert!(th.atomic(|tx| t.remove(tx, k)).unwrap().is_some());
                if k % 16 == 0 {
                    t.check(&mut th).unwrap();
                }
            }
            assert_eq!(t.check(&mut th).unwrap(), 0);
        });
    }

    #[test]
    fn ordered_inserts_stay_balanced() {
        each_algorithm(|ptm| {
            let mut th = ptm.thread().unwrap();
            let t = th.atomic(PRbTree::create_in).unwrap();
            for k in 0..1024u64 {
                th.atomic(|tx| t.insert(tx, k, k)).unwrap();
            }
            assert_eq!(t.check(&mut th).unwrap(), 1024);
            // Depth of a red-black tree ≤ 2 log2(n + 1) = 20.
            let depth = th
                .atomic(|tx| {
                    let mut d = 0;
                    let mut n = t.root(tx)?;
                    while n != 0 {
                        d += 1;
                        n = tx.load(n + LEFT)?;
                    }
                    Ok(d)
                })
                .unwrap();
            assert!(depth <= 20, "depth {depth}");
            let mut got = Vec::new();
            th.atomic(|tx| {
                got.clear();
                t.scan(tx, 1000, 100, &mut |k, _| got.push(k))
            })
            .unwrap();
            assert_eq!(got, (1000..1024).collect::<Vec<_>>());
        });
    }

    #[test]
    fn user_abort_and_check_finds_corruption() {
        each_algorithm(|ptm| {
            let mut th = ptm.thread().unwrap();
            let t = th.atomic(PRbTree::create_in).unwrap();
            th.atomic(|tx| {
                for k in 0..20 {
                    t.insert(tx, k * 3, k)?;
                }
                Ok(())
            })
            .unwrap();
            let r = th.atomic(|tx| {
                for k in 0..20 {
                    t.remove(tx, k * 3)?;
                }
                tx.abort::<()>(9)
            });
            assert!(matches!(r, Err(PtmError::Aborted { code: 9 })));
            assert_eq!(t.check(&mut th).unwrap(), 20);
            // Paint the root red: the checker must object.
            th.atomic(|tx| {
                let r = t.root(tx)?;
                tx.store(r + COLOR, RED)
            })
            .unwrap();
            assert!(t.check(&mut th).is_err());
        });
    }

    #[test]
    fn two_threads_conflicting() {
        each_algorithm(|ptm| {
            let mut th = ptm.thread().unwrap();
            let t = th.atomic(PRbTree::create_in).unwrap();
            drop(th);
            crate::ds::testutil::two_threads_conflicting(ptm, t, 11, 200, 3);
        });
    }

    impl crate::ds::testutil::TestMap for PRbTree {
        fn get(&self, tx: &mut Tx<'_>, k: u64) -> TxResult<Option<u64>> {
            PRbTree::get(self, tx, k)
        }
        fn insert(&self, tx: &mut Tx<'_>, k: u64, v: u64) -> TxResult<Option<u64>> {
            PRbTree::insert(self, tx, k, v)
        }
        fn remove(&self, tx: &mut Tx<'_>, k: u64) -> TxResult<Option<u64>> {
            PRbTree::remove(self, tx, k)
        }
        fn entries(&self, th: &mut PtmThread<'_>) -> Vec<(u64, u64)> {
            contents(*self, th).into_iter().collect()
        }
        fn check(&self, th: &mut PtmThread<'_>) -> Result<u64, String> {
            PRbTree::check(self, th)
        }
    }

    #[test]
    fn same_keys_stress() {
        each_algorithm(|ptm| {
            let mut th = ptm.thread().unwrap();
            let t = th.atomic(PRbTree::create_in).unwrap();
            drop(th);
            crate::ds::testutil::same_keys_stress(ptm, t);
        });
    }
}
