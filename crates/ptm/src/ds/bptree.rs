//! A persistent B+tree u64 → u64 (P3's B+tree microbenchmarks and the
//! TPC-C (B+tree) index): insert with node splits, lookup, lazy removal
//! (a key is taken out of its leaf; nodes never merge, so a leaf may become
//! empty and stays linked — correct, only less compact), and range scans
//! along the leaf chain.
//!
//! ## Persistent layout (little-endian words)
//! Header block, 32 bytes:
//! ```text
//! +0  magic   = BPTREE_MAGIC ("FPTMBTRE")
//! +8  fanout  F: most keys in a node, MIN_FANOUT..=MAX_FANOUT
//! +16 root    offset of the root node (a leaf while the tree is one node)
//! +24 version = super::VERSION (2); version 1 had 0 here and nodes
//!             without checks: refused with
//!             [`crate::PtmError::StructureVersion`]
//! ```
//! Node block, `24 + 24 × F` bytes ([`node_bytes`]):
//! ```text
//! +0          meta: bit 63 = leaf, bits 0..32 = n (number of keys, ≤ F)
//! +8          next leaf in key order (leaves; 0 = last), 0 in inner nodes
//! +16         keys[F]            (keys[0..n] strictly increasing)
//! +16 + 8F    leaf:  values[F]   (values[i] belongs to keys[i])
//!             inner: children[F + 1] (children[0..=n])
//! +24 + 16F   checks[F]: leaf: super::check_word(seed, keys[i], values[i]);
//!             inner: the key check of keys[i] alone (low half, high half 0)
//! ```
//! A check moves with its entry (shifts and splits copy it) and is stored
//! by the transaction that stores a new key or value. The seed is
//! `crc32c(mix64(header ^ BPTREE_MAGIC))`. Every key a search reads has
//! its key check verified (a damaged separator or leaf key would
//! otherwise steer a lookup away from a present key), what a lookup
//! returns its record check; a failure rolls back with
//! [`crate::PtmError::CorruptRecord`] naming the key, and
//! [`PBTree::check`] lists every damaged record. `meta`, `next` and the
//! children carry no check.
//! Invariants: every leaf is at the same depth; in an inner node, child `i`
//! holds keys in `[keys[i-1], keys[i])` (the bounds missing at the ends
//! are the parent's); inner nodes have n ≥ 1; the leaves, left to right,
//! form the `next` chain from the leftmost leaf. A leaf may hold 0 keys
//! after removals (lazy removal).
//!
//! Splits: a full leaf taking one more key keeps the first ⌊(F+1)/2⌋ keys
//! and moves the rest to a new right leaf whose first key goes up as the
//! separator; a full inner node taking one more separator keeps the first
//! ⌊(F+1)/2⌋ keys, sends the middle one up and moves the rest right; a root
//! split makes a new root (the header's root word changes).

use super::{VERSION, check_result, check_version, check_word, corrupt, damaged, key_ok};
use crate::{PtmThread, Tx, TxResult};
use ferrite_pmem::POff;

/// "FPTMBTRE" read as a little-endian u64.
pub const BPTREE_MAGIC: u64 = u64::from_le_bytes(*b"FPTMBTRE");
/// Smallest fanout accepted.
pub const MIN_FANOUT: u64 = 4;
/// Largest fanout accepted.
pub const MAX_FANOUT: u64 = 64;
/// Deepest tree an operation follows (a deeper path is corrupt: with F ≥ 4
/// and every inner node holding ≥ 1 key… splits keep nodes half full, so 40
/// levels is far beyond any tree that fits in a pool).
const MAX_DEPTH: usize = 40;

const H_MAGIC: u64 = 0;
const H_FANOUT: u64 = 8;
const H_ROOT: u64 = 16;
const LEAF: u64 = 1 << 63;
const M_META: u64 = 0;
const M_NEXT: u64 = 8;
const M_KEYS: u64 = 16;
const H_VERSION: u64 = 24;
const NAME: &str = "ptm bptree";

/// Bytes of a node of fanout `f`.
pub const fn node_bytes(f: u64) -> usize {
    (24 + 24 * f) as usize
}

/// An inner node's key check word (low half only).
fn inner_check(seed: u32, key: u64) -> u64 {
    check_word(seed, key, 0) & 0xFFFF_FFFF
}

/// A handle on a persistent B+tree (module docs). `Copy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PBTree {
    hdr: u64,
    fanout: u64,
    /// The records' checksum seed.
    seed: u32,
}

/// A node's fields as offsets.
#[derive(Clone, Copy)]
struct Node {
    at: u64,
    f: u64,
}

impl Node {
    fn key(self, i: u64) -> u64 {
        self.at + M_KEYS + 8 * i
    }
    /// Value `i` (leaf) or child `i` (inner).
    fn slot(self, i: u64) -> u64 {
        self.at + M_KEYS + 8 * self.f + 8 * i
    }
    /// Check word `i`.
    fn check(self, i: u64) -> u64 {
        self.at + 24 + 16 * self.f + 8 * i
    }
}

impl PBTree {
    /// Creates an empty tree (one empty leaf) of fanout `fanout`
    /// (clamped to `MIN_FANOUT..=MAX_FANOUT`).
    pub fn create_in(tx: &mut Tx<'_>, fanout: u64) -> TxResult<PBTree> {
        let f = fanout.clamp(MIN_FANOUT, MAX_FANOUT);
        let hdr = tx.alloc(32)?.raw();
        let leaf = tx.alloc(node_bytes(f))?.raw();
        tx.store(leaf + M_META, LEAF)?;
        tx.store(leaf + M_NEXT, 0)?;
        tx.store(hdr + H_MAGIC, BPTREE_MAGIC)?;
        tx.store(hdr + H_FANOUT, f)?;
        tx.store(hdr + H_ROOT, leaf)?;
        tx.store(hdr + H_VERSION, VERSION)?;
        Ok(PBTree {
            hdr,
            fanout: f,
            seed: super::seed(hdr, BPTREE_MAGIC),
        })
    }

    /// Opens the tree whose header is at `hdr` ([`super::CORRUPT`] if not
    /// one, [`crate::PtmError::StructureVersion`] if another version's).
    pub fn open(tx: &mut Tx<'_>, hdr: u64) -> TxResult<PBTree> {
        if hdr == 0 || !hdr.is_multiple_of(8) || tx.load(hdr + H_MAGIC)? != BPTREE_MAGIC {
            return corrupt();
        }
        check_version(tx, NAME, hdr, hdr + H_VERSION)?;
        let fanout = tx.load(hdr + H_FANOUT)?;
        if !(MIN_FANOUT..=MAX_FANOUT).contains(&fanout) {
            return corrupt();
        }
        Ok(PBTree {
            hdr,
            fanout,
            seed: super::seed(hdr, BPTREE_MAGIC),
        })
    }

    /// Key `i` of node `n`, its key check verified (`looking` names the
    /// key looked up in the error).
    fn key_at(&self, tx: &mut Tx<'_>, n: Node, i: u64, looking: u64) -> TxResult<u64> {
        let k = tx.load(n.key(i))?;
        if !key_ok(self.seed, k, tx.load(n.check(i))?) {
            return damaged(
                NAME,
                looking,
                &format!("node {:#x} key {i}: key check", n.at),
            );
        }
        Ok(k)
    }

    /// Value `i` of leaf `n` (of `key`), its record check verified.
    fn value_at(&self, tx: &mut Tx<'_>, n: Node, i: u64, key: u64) -> TxResult<u64> {
        let v = tx.load(n.slot(i))?;
        if tx.load(n.check(i))? != check_word(self.seed, key, v) {
            return damaged(NAME, key, "checksum mismatch");
        }
        Ok(v)
    }

    /// Stores entry `i` of leaf `n`: key, value and their check.
    fn put_entry(&self, tx: &mut Tx<'_>, n: Node, i: u64, k: u64, v: u64) -> TxResult<()> {
        tx.store(n.key(i), k)?;
        tx.store(n.slot(i), v)?;
        tx.store(n.check(i), check_word(self.seed, k, v))
    }

    /// Stores separator `i` of inner node `n` with its key check.
    fn put_sep(&self, tx: &mut Tx<'_>, n: Node, i: u64, k: u64) -> TxResult<()> {
        tx.store(n.key(i), k)?;
        tx.store(n.check(i), inner_check(self.seed, k))
    }

    /// Moves key `from` (with its value or nothing, and its check) of node
    /// `n` to `to`, unchanged.
    fn move_key(&self, tx: &mut Tx<'_>, n: Node, from: u64, to: u64, leaf: bool) -> TxResult<()> {
        let k = tx.load(n.key(from))?;
        tx.store(n.key(to), k)?;
        if leaf {
            let v = tx.load(n.slot(from))?;
            tx.store(n.slot(to), v)?;
        }
        let c = tx.load(n.check(from))?;
        tx.store(n.check(to), c)
    }

    /// The header block's offset.
    pub fn header(&self) -> u64 {
        self.hdr
    }

    /// The fanout F.
    pub fn fanout(&self) -> u64 {
        self.fanout
    }

    fn node(&self, at: u64) -> Node {
        Node { at, f: self.fanout }
    }

    /// (is leaf, n) of a node, checked against the fanout.
    fn meta(&self, tx: &mut Tx<'_>, n: Node) -> TxResult<(bool, u64)> {
        if n.at == 0 || !n.at.is_multiple_of(8) {
            return corrupt();
        }
        let m = tx.load(n.at + M_META)?;
        let count = m & 0xFFFF_FFFF;
        if count > self.fanout || (m & !LEAF) >> 32 != 0 {
            return corrupt();
        }
        Ok((m & LEAF != 0, count))
    }

    /// First `i` in `0..n` with `keys[i] > key` (or with `keys[i] >= key`
    /// when `inclusive`), by binary search.
    fn search(
        &self,
        tx: &mut Tx<'_>,
        n: Node,
        count: u64,
        key: u64,
        inclusive: bool,
    ) -> TxResult<u64> {
        let (mut lo, mut hi) = (0, count);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let k = self.key_at(tx, n, mid, key)?;
            let right = if inclusive { k >= key } else { k > key };
            if right {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Ok(lo)
    }

    /// Descends to the leaf for `key`, recording (inner node, child index)
    /// in `path`; returns (leaf, its n).
    fn descend(
        &self,
        tx: &mut Tx<'_>,
        key: u64,
        path: &mut Vec<(u64, u64)>,
    ) -> TxResult<(Node, u64)> {
        let mut node = self.node(tx.load(self.hdr + H_ROOT)?);
        loop {
            let (leaf, count) = self.meta(tx, node)?;
            if leaf {
                return Ok((node, count));
            }
            if count == 0 || path.len() >= MAX_DEPTH {
                return corrupt();
            }
            let i = self.search(tx, node, count, key, false)?;
            path.push((node.at, i));
            node = self.node(tx.load(node.slot(i))?);
        }
    }

    /// The value of `key` (its record check verified).
    pub fn get(&self, tx: &mut Tx<'_>, key: u64) -> TxResult<Option<u64>> {
        let mut path = Vec::new();
        let (leaf, n) = self.descend(tx, key, &mut path)?;
        let i = self.search(tx, leaf, n, key, true)?;
        if i < n && self.key_at(tx, leaf, i, key)? == key {
            return self.value_at(tx, leaf, i, key).map(Some);
        }
        Ok(None)
    }

    /// Replaces the value of an existing key; false when absent.
    pub fn update(&self, tx: &mut Tx<'_>, key: u64, value: u64) -> TxResult<bool> {
        let mut path = Vec::new();
        let (leaf, n) = self.descend(tx, key, &mut path)?;
        let i = self.search(tx, leaf, n, key, true)?;
        if i < n && self.key_at(tx, leaf, i, key)? == key {
            tx.store(leaf.slot(i), value)?;
            tx.store(leaf.check(i), check_word(self.seed, key, value))?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Inserts or replaces; returns the previous value.
    pub fn insert(&self, tx: &mut Tx<'_>, key: u64, value: u64) -> TxResult<Option<u64>> {
        let mut path = Vec::new();
        let (leaf, n) = self.descend(tx, key, &mut path)?;
        let pos = self.search(tx, leaf, n, key, true)?;
        if pos < n && self.key_at(tx, leaf, pos, key)? == key {
            let old = self.value_at(tx, leaf, pos, key)?;
            tx.store(leaf.slot(pos), value)?;
            tx.store(leaf.check(pos), check_word(self.seed, key, value))?;
            return Ok(Some(old));
        }
        let f = self.fanout;
        if n < f {
            for i in (pos..n).rev() {
                self.move_key(tx, leaf, i, i + 1, true)?;
            }
            self.put_entry(tx, leaf, pos, key, value)?;
            tx.store(leaf.at + M_META, LEAF | (n + 1))?;
            return Ok(None);
        }
        // Split: the F + 1 entries in order (each with its check, copied
        // as it is), then the halves.
        let mut keys = Vec::with_capacity(f as usize + 1);
        let mut vals = Vec::with_capacity(f as usize + 1);
        let mut checks = Vec::with_capacity(f as usize + 1);
        for i in 0..n {
            keys.push(tx.load(leaf.key(i))?);
            vals.push(tx.load(leaf.slot(i))?);
            checks.push(tx.load(leaf.check(i))?);
        }
        keys.insert(pos as usize, key);
        vals.insert(pos as usize, value);
        checks.insert(pos as usize, check_word(self.seed, key, value));
        let left = f.div_ceil(2);
        let right = self.node(tx.alloc(node_bytes(f))?.raw());
        for (j, i) in (left..=f).enumerate() {
            tx.store(right.key(j as u64), keys[i as usize])?;
            tx.store(right.slot(j as u64), vals[i as usize])?;
            tx.store(right.check(j as u64), checks[i as usize])?;
        }
        tx.store(right.at + M_META, LEAF | (f + 1 - left))?;
        let next = tx.load(leaf.at + M_NEXT)?;
        tx.store(right.at + M_NEXT, next)?;
        // Left keeps 0..left; only positions from the new key on changed.
        for i in pos..left {
            tx.store(leaf.key(i), keys[i as usize])?;
            tx.store(leaf.slot(i), vals[i as usize])?;
            tx.store(leaf.check(i), checks[i as usize])?;
        }
        tx.store(leaf.at + M_META, LEAF | left)?;
        tx.store(leaf.at + M_NEXT, right.at)?;
        self.insert_up(tx, &mut path, keys[left as usize], right.at)?;
        Ok(None)
    }

    /// Inserts separator `sep` with right child `child` into the parents on
    /// `path`, splitting upwards; a split root gets a new root.
    fn insert_up(
        &self,
        tx: &mut Tx<'_>,
        path: &mut Vec<(u64, u64)>,
        mut sep: u64,
        mut child: u64,
    ) -> TxResult<()> {
        let f = self.fanout;
        while let Some((at, i)) = path.pop() {
            let node = self.node(at);
            let (leaf, n) = self.meta(tx, node)?;
            if leaf || i > n {
                return corrupt();
            }
            if n < f {
                for j in (i..n).rev() {
                    self.move_key(tx, node, j, j + 1, false)?;
                }
                for j in (i + 1..=n).rev() {
                    let c = tx.load(node.slot(j))?;
                    tx.store(node.slot(j + 1), c)?;
                }
                self.put_sep(tx, node, i, sep)?;
                tx.store(node.slot(i + 1), child)?;
                tx.store(node.at + M_META, n + 1)?;
                return Ok(());
            }
            let mut keys = Vec::with_capacity(f as usize + 1);
            let mut kids = Vec::with_capacity(f as usize + 2);
            for j in 0..n {
                keys.push(tx.load(node.key(j))?);
            }
            for j in 0..=n {
                kids.push(tx.load(node.slot(j))?);
            }
            keys.insert(i as usize, sep);
            kids.insert(i as usize + 1, child);
            // keys[0..mid] stay, keys[mid] goes up, keys[mid+1..=f] move.
            let mid = f.div_ceil(2);
            let right = self.node(tx.alloc(node_bytes(f))?.raw());
            for (j, k) in (mid + 1..=f).enumerate() {
                self.put_sep(tx, right, j as u64, keys[k as usize])?;
            }
            for (j, k) in (mid + 1..=f + 1).enumerate() {
                tx.store(right.slot(j as u64), kids[k as usize])?;
            }
            tx.store(right.at + M_META, f - mid)?;
            tx.store(right.at + M_NEXT, 0)?;
            for j in i..mid {
                self.put_sep(tx, node, j, keys[j as usize])?;
            }
            for j in i + 1..=mid {
                tx.store(node.slot(j), kids[j as usize])?;
            }
            tx.store(node.at + M_META, mid)?;
            sep = keys[mid as usize];
            child = right.at;
        }
        let old_root = tx.load(self.hdr + H_ROOT)?;
        let root = self.node(tx.alloc(node_bytes(f))?.raw());
        self.put_sep(tx, root, 0, sep)?;
        tx.store(root.slot(0), old_root)?;
        tx.store(root.slot(1), child)?;
        tx.store(root.at + M_META, 1)?;
        tx.store(root.at + M_NEXT, 0)?;
        tx.store(self.hdr + H_ROOT, root.at)
    }

    /// Removes `key` (lazily: no merging); returns its value.
    pub fn remove(&self, tx: &mut Tx<'_>, key: u64) -> TxResult<Option<u64>> {
        let mut path = Vec::new();
        let (leaf, n) = self.descend(tx, key, &mut path)?;
        let pos = self.search(tx, leaf, n, key, true)?;
        if pos >= n || self.key_at(tx, leaf, pos, key)? != key {
            return Ok(None);
        }
        let old = self.value_at(tx, leaf, pos, key)?;
        for i in pos + 1..n {
            self.move_key(tx, leaf, i, i - 1, true)?;
        }
        tx.store(leaf.at + M_META, LEAF | (n - 1))?;
        Ok(Some(old))
    }

    /// Calls `f(key, value)` for up to `limit` entries with keys ≥ `from`,
    /// in key order; returns how many it visited. Every entry returned is
    /// verified (a damaged one rolls back with
    /// [`crate::PtmError::CorruptRecord`]).
    pub fn scan(
        &self,
        tx: &mut Tx<'_>,
        from: u64,
        limit: usize,
        f: &mut dyn FnMut(u64, u64),
    ) -> TxResult<usize> {
        let mut path = Vec::new();
        let (mut leaf, mut n) = self.descend(tx, from, &mut path)?;
        let mut i = self.search(tx, leaf, n, from, true)?;
        let mut seen = 0;
        while seen < limit {
            if i >= n {
                let next = tx.load(leaf.at + M_NEXT)?;
                if next == 0 {
                    break;
                }
                leaf = self.node(next);
                let (is_leaf, count) = self.meta(tx, leaf)?;
                if !is_leaf {
                    return corrupt();
                }
                n = count;
                i = 0;
                continue;
            }
            let k = self.key_at(tx, leaf, i, from)?;
            f(k, self.value_at(tx, leaf, i, k)?);
            seen += 1;
            i += 1;
        }
        Ok(seen)
    }

    /// Checks every invariant of the module docs, visiting up to 2048 nodes
    /// per transaction (run it with no concurrent writers). Returns the
    /// number of entries.
    pub fn check(&self, th: &mut PtmThread<'_>) -> Result<u64, String> {
        let hdr = self.hdr;
        let again = check_result(th.atomic(|tx| Ok(Ok(PBTree::open(tx, hdr)?))))?;
        if again != *self {
            return Err(format!("header changed: {again:?} vs {self:?}"));
        }
        let root = check_result(th.atomic(|tx| Ok(Ok(tx.load(hdr + H_ROOT)?))))?;
        let mut st = CheckState::at(root);
        while !st.stack.is_empty() {
            st = check_result(th.atomic(|tx| {
                let mut s = st.clone();
                Ok(self.check_some(tx, &mut s, 2048)?.map(|()| s))
            }))?;
        }
        // The last leaf in key order ends the chain.
        if let Some(last) = st.last_leaf {
            let next = check_result(th.atomic(|tx| Ok(Ok(tx.load(last + M_NEXT)?))))?;
            if next != 0 {
                return Err(format!("last leaf {last:#x} links to {next:#x}"));
            }
        }
        super::damaged_result(NAME, st.entries, &st.damaged)
    }

    /// [`PBTree::check`] inside the caller's transaction (for small trees:
    /// its read set holds the whole tree). Returns the number of entries.
    pub fn check_tx(&self, tx: &mut Tx<'_>) -> TxResult<Result<u64, String>> {
        let again = PBTree::open(tx, self.hdr)?;
        if again != *self {
            return Ok(Err(format!("header changed: {again:?} vs {self:?}")));
        }
        let mut st = CheckState::at(tx.load(self.hdr + H_ROOT)?);
        while !st.stack.is_empty() {
            if let Err(e) = self.check_some(tx, &mut st, usize::MAX)? {
                return Ok(Err(e));
            }
        }
        if let Some(last) = st.last_leaf {
            let next = tx.load(last + M_NEXT)?;
            if next != 0 {
                return Ok(Err(format!("last leaf {last:#x} links to {next:#x}")));
            }
        }
        Ok(super::damaged_result(NAME, st.entries, &st.damaged))
    }

    fn check_some(
        &self,
        tx: &mut Tx<'_>,
        st: &mut CheckState,
        budget: usize,
    ) -> TxResult<Result<(), String>> {
        for _ in 0..budget {
            let Some(p) = st.stack.pop() else {
                return Ok(Ok(()));
            };
            st.nodes += 1;
            if st.nodes > 1 << 40 || p.depth as usize > MAX_DEPTH {
                return Ok(Err("tree too deep or cyclic".into()));
            }
            if p.at == 0 || !p.at.is_multiple_of(8) {
                return Ok(Err(format!("bad node offset {:#x}", p.at)));
            }
            let node = self.node(p.at);
            let m = tx.load(node.at + M_META)?;
            let n = m & 0xFFFF_FFFF;
            let leaf = m & LEAF != 0;
            if n > self.fanout || (m & !LEAF) >> 32 != 0 {
                return Ok(Err(format!("node {:#x}: bad meta {m:#x}", p.at)));
            }
            let mut prev: Option<u64> = None;
            // Keys whose key check holds (a damaged one says nothing about
            // the order, nor about its children's bounds).
            let mut good = Vec::with_capacity(n as usize);
            for i in 0..n {
                let k = tx.load(node.key(i))?;
                let c = tx.load(node.check(i))?;
                if !key_ok(self.seed, k, c) {
                    st.damaged
                        .push((k, format!("key check mismatch (node {:#x} key {i})", p.at)));
                    good.push(None);
                    continue;
                }
                good.push(Some(k));
                let want = if leaf {
                    check_word(self.seed, k, tx.load(node.slot(i))?)
                } else {
                    inner_check(self.seed, k)
                };
                if c != want {
                    st.damaged.push((k, "checksum mismatch".into()));
                }
                if prev.is_some_and(|q| q >= k) {
                    return Ok(Err(format!("node {:#x}: keys out of order at {i}", p.at)));
                }
                if p.lo.is_some_and(|lo| k < lo) || p.hi.is_some_and(|hi| k >= hi) {
                    return Ok(Err(format!(
                        "node {:#x}: key {k} outside [{:?}, {:?})",
                        p.at, p.lo, p.hi
                    )));
                }
                prev = Some(k);
            }
            if leaf {
                match st.leaf_depth {
                    None => st.leaf_depth = Some(p.depth),
                    Some(d) if d != p.depth => {
                        return Ok(Err(format!("leaves at depths {d} and {}", p.depth)));
                    }
                    _ => {}
                }
                if let Some(last) = st.last_leaf {
                    let next = tx.load(last + M_NEXT)?;
                    if next != p.at {
                        return Ok(Err(format!(
                            "leaf chain: {last:#x} links to {next:#x}, next leaf is {:#x}",
                            p.at
                        )));
                    }
                }
                st.last_leaf = Some(p.at);
                st.entries += n;
            } else {
                if n == 0 {
                    return Ok(Err(format!("inner node {:#x} without keys", p.at)));
                }
                if tx.load(node.at + M_NEXT)? != 0 {
                    return Ok(Err(format!("inner node {:#x} has a next link", p.at)));
                }
                // Push right to left so the leftmost child is visited first.
                for i in (0..=n).rev() {
                    let lo = if i == 0 {
                        p.lo
                    } else {
                        good[i as usize - 1].or(p.lo)
                    };
                    let hi = if i == n {
                        p.hi
                    } else {
                        good[i as usize].or(p.hi)
                    };
                    st.stack.push(Pending {
                        at: tx.load(node.slot(i))?,
                        depth: p.depth + 1,
                        lo,
                        hi,
                    });
                }
            }
        }
        Ok(Ok(()))
    }

    /// Frees every node and the header (the tree is gone afterwards). One
    /// transaction: for small trees (tests, crash checks).
    pub fn destroy(&self, tx: &mut Tx<'_>) -> TxResult<()> {
        let mut stack = vec![tx.load(self.hdr + H_ROOT)?];
        while let Some(at) = stack.pop() {
            let (leaf, n) = self.meta(tx, self.node(at))?;
            if !leaf {
                for i in 0..=n {
                    stack.push(tx.load(self.node(at).slot(i))?);
                }
            }
            tx.free(POff::new(at))?;
        }
        tx.free(POff::new(self.hdr))
    }
}

#[derive(Clone, Debug)]
struct Pending {
    at: u64,
    depth: u32,
    lo: Option<u64>,
    hi: Option<u64>,
}

#[derive(Clone, Debug)]
struct CheckState {
    stack: Vec<Pending>,
    leaf_depth: Option<u32>,
    last_leaf: Option<u64>,
    entries: u64,
    nodes: u64,
    /// Records whose check fails: (key as stored, what).
    damaged: Vec<(u64, String)>,
}

impl CheckState {
    /// A check that starts at the root node `root`.
    fn at(root: u64) -> CheckState {
        CheckState {
            stack: vec![Pending {
                at: root,
                depth: 0,
                lo: None,
                hi: None,
            }],
            leaf_depth: None,
            last_leaf: None,
            entries: 0,
            nodes: 0,
            damaged: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PtmError;
    use crate::ds::testutil::{Model, each_algorithm, xorshift};

    fn contents(t: PBTree, th: &mut PtmThread<'_>) -> Model {
        let mut m = Model::new();
        th.atomic(|tx| {
            m.clear();
            t.scan(tx, 0, usize::MAX, &mut |k, v| {
                m.insert(k, v);
            })
        })
        .unwrap();
        m
    }

    #[test]
    fn random_ops_match_model_small_fanout() {
        each_algorithm(|ptm| {
            let mut th = ptm.thread().unwrap();
            for fanout in [4, 5, 16] {
                let t = th.atomic(|tx| PBTree::create_in(tx, fanout)).unwrap();
                assert_eq!(t.fanout(), fanout);
                let mut model = Model::new();
                let mut r = 99 + fanout;
                for i in 0..4000 {
                    let op = xorshift(&mut r) % 6;
                    let key = xorshift(&mut r) % 500;
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
                        4 => {
                            let got = th.atomic(|tx| t.update(tx, key, val)).unwrap();
                            let want = model.get_mut(&key).map(|v| *v = val).is_some();
                            assert_eq!(got, want, "update {i}");
                        }
                        _ => {
                            let limit = (val % 20) as usize;
                            let mut got = Vec::new();
                            th.atomic(|tx| {
                                got.clear();
                                t.scan(tx, key, limit, &mut |k, v| got.push((k, v)))
                            })
                            .unwrap();
                            let want: Vec<(u64, u64)> = model
                                .range(key..)
                                .take(limit)
                                .map(|(k, v)| (*k, *v))
                                .collect();
                            assert_eq!(got, want, "scan {i}");
                        }
                    }
                    if i % 500 == 0 {
                        assert_eq!(t.check(&mut th).unwrap(), model.len() as u64);
                    }
                }
                assert_eq!(t.check(&mut th).unwrap(), model.len() as u64);
                let one = th.atomic(|tx| t.check_tx(tx)).unwrap();
                assert_eq!(one, Ok(model.len() as u64));
                assert_eq!(contents(t, &mut th), model);
            }
        });
    }

    #[test]
    fn sequential_and_reverse_inserts_grow_levels() {
        each_algorithm(|ptm| {
            let mut th = ptm.thread().unwrap();
            let t = th.atomic(|tx| PBTree::create_in(tx, 4)).unwrap();
            for k in 0..300u64 {
                th.atomic(|tx| t.insert(tx, k, k + 1)).unwrap();
                th.atomic(|tx| t.insert(tx, 10_000 - k, k)).unwrap();
            }
            assert_eq!(t.check(&mut th).unwrap(), 600);
            // Remove everything: empty leaves stay, lookups still work.
            for k in 0..300u64 {
                assert_eq!(th.atomic(|tx| t.remove(tx, k)).unwrap(), Some(k + 1));
            }
            assert_eq!(t.check(&mut th).unwrap(), 300);
            assert_eq!(th.atomic(|tx| t.get(tx, 5)).unwrap(), None);
            assert_eq!(th.atomic(|tx| t.get(tx, 10_000)).unwrap(), Some(0));
            let live = contents(t, &mut th);
            assert_eq!(live.len(), 300);
            th.atomic(|tx| t.destroy(tx)).unwrap();
        });
    }

    #[test]
    fn user_abort_undoes_a_root_split() {
        each_algorithm(|ptm| {
            let mut th = ptm.thread().unwrap();
            let t = th.atomic(|tx| PBTree::create_in(tx, 4)).unwrap();
            th.atomic(|tx| {
                for k in 0..4 {
                    t.insert(tx, k, k)?;
                }
                Ok(())
            })
            .unwrap();
            let r = th.atomic(|tx| {
                for k in 10..40 {
                    t.insert(tx, k, k)?;
                }
                t.remove(tx, 2)?;
                tx.abort::<()>(1)
            });
            assert!(matches!(r, Err(PtmError::Aborted { code: 1 })));
            assert_eq!(t.check(&mut th).unwrap(), 4);
            assert_eq!(contents(t, &mut th), (0..4).map(|k| (k, k)).collect());
            // Swap two keys of the leaf: the checker must object, and an
            // oversized count must make operations roll back as corrupt.
            th.atomic(|tx| {
                let root = tx.load(t.header() + H_ROOT)?;
                tx.store(root + M_KEYS, 1)?;
                tx.store(root + M_KEYS + 8, 0)
            })
            .unwrap();
            assert!(t.check(&mut th).is_err());
            th.atomic(|tx| {
                let root = tx.load(t.header() + H_ROOT)?;
                tx.store(root + M_META, LEAF | 1000)
            })
            .unwrap();
            let r = th.atomic(|tx| t.get(tx, 2));
            assert!(matches!(r, Err(PtmError::Aborted { code }) if code == crate::ds::CORRUPT));
            assert!(t.check(&mut th).is_err());
        });
    }

    #[test]
    fn two_threads_conflicting() {
        each_algorithm(|ptm| {
            let mut th = ptm.thread().unwrap();
            let t = th.atomic(|tx| PBTree::create_in(tx, 8)).unwrap();
            drop(th);
            crate::ds::testutil::two_threads_conflicting(ptm, t, 3, 300, 4);
        });
    }

    impl crate::ds::testutil::TestMap for PBTree {
        fn get(&self, tx: &mut Tx<'_>, k: u64) -> TxResult<Option<u64>> {
            PBTree::get(self, tx, k)
        }
        fn insert(&self, tx: &mut Tx<'_>, k: u64, v: u64) -> TxResult<Option<u64>> {
            PBTree::insert(self, tx, k, v)
        }
        fn remove(&self, tx: &mut Tx<'_>, k: u64) -> TxResult<Option<u64>> {
            PBTree::remove(self, tx, k)
        }
        fn entries(&self, th: &mut PtmThread<'_>) -> Vec<(u64, u64)> {
            contents(*self, th).into_iter().collect()
        }
        fn check(&self, th: &mut PtmThread<'_>) -> Result<u64, String> {
            PBTree::check(self, th)
        }
    }

    #[test]
    fn same_keys_stress() {
        each_algorithm(|ptm| {
            let mut th = ptm.thread().unwrap();
            let t = th.atomic(|tx| PBTree::create_in(tx, 4)).unwrap();
            drop(th);
            crate::ds::testutil::same_keys_stress(ptm, t);
        });
    }
}
