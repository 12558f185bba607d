//! The shadow tree: a group's changes to the durable tree, held in DRAM
//! until the group commits.
//!
//! The durable tree is never written. An operation descends from the
//! root; each node on its path is read from the pool and decoded into a
//! [`DNode`] the first time the group touches it (its old block goes to
//! [`Shadow::retired`]: unreachable from the new root). Later operations of
//! the same group modify the decoded copy in place, so a node touched by
//! many operations of a group is copied once. Splits and merges happen
//! here, in DRAM. [`Shadow::reserve`] then reserves one block per dirty node
//! and new blob (reservations are DRAM-only), and [`Shadow::write`] encodes
//! and flushes them bottom-up, so the only thing the commit still has to
//! make atomic is the root word — one allocator publish.
//!
//! Invariants of the tree (checked by the walk):
//! - keys strictly increase within a node and lie in `[lo, hi)` of the
//!   branch entry that points to it; a branch's first key is −∞;
//! - a leaf is at level 0, a branch one above its children;
//! - no node is empty; the empty tree is root word 0;
//! - a node holds at most its split target of bytes, unless splitting it
//!   cannot help (a leaf of one entry, a branch of two);
//! - a branch entry records its child's checksum (see [`format`](mod@format)).

use super::format::{self, Ent, Fresh, Header, KIND_BRANCH, KIND_LEAF, MAX_HEIGHT, ValRef};
use crate::{EngineError, Result};
use ferrite_alloc::{AllocThread, Reservation};
use ferrite_pmem::Region;
use std::borrow::Cow;

/// A child pointer of the shadow tree.
pub enum DChild<'a> {
    /// An unchanged node of the durable tree: offset, checksum.
    Clean(u64, u32),
    /// A node this group changed (or created).
    Dirty(Box<DNode<'a>>),
}

/// A node of the shadow tree, decoded into DRAM: a durable node this
/// group touched, or a new one.
pub struct DNode<'a> {
    /// 0 for a leaf, one above its children for a branch.
    pub level: u8,
    /// The node's entries.
    pub body: Body<'a>,
    /// Block reserved for this node (0 until [`Shadow::reserve`]).
    new_off: u64,
}

/// The entries of a [`DNode`], in strictly increasing key order.
pub enum Body<'a> {
    /// A leaf's key-value entries.
    Leaf(Vec<LEnt<'a>>),
    /// A branch's child pointers.
    Branch(Vec<BEnt<'a>>),
}

/// A leaf entry of the shadow tree.
pub struct LEnt<'a> {
    /// The key (1 ..= [`MAX_KEY`](crate::MAX_KEY) bytes).
    pub key: Cow<'a, [u8]>,
    /// Where its value is.
    pub val: LVal<'a>,
}

/// Where a shadow leaf entry's value is.
pub enum LVal<'a> {
    /// In the leaf (at most the store's `inline_max` bytes).
    Inline(Cow<'a, [u8]>),
    /// A blob of the durable tree.
    Blob {
        /// Pool offset of the blob.
        off: u64,
        /// Bytes of the value.
        len: u32,
        /// The value's checksum ([`format::crc`]).
        crc: u32,
    },
    /// A value of this group, to be written to a new blob at `off`.
    New {
        /// The value, borrowed from the group's operations.
        data: &'a [u8],
        /// Pool offset of the blob reserved for it; 0 until
        /// [`Shadow::reserve`].
        off: u64,
    },
}

/// A branch entry of the shadow tree: the child holding the keys from
/// `key` up to the next entry's key.
pub struct BEnt<'a> {
    /// Empty for the first entry of a branch (−∞).
    pub key: Cow<'a, [u8]>,
    /// The child, clean (still the durable node) or dirty.
    pub child: DChild<'a>,
}

impl LEnt<'_> {
    fn bytes(&self) -> usize {
        let inline = match &self.val {
            LVal::Inline(v) => Some(v.len()),
            _ => None,
        };
        format::leaf_entry_bytes(self.key.len(), inline)
    }
}

impl DNode<'_> {
    fn len(&self) -> usize {
        match &self.body {
            Body::Leaf(e) => e.len(),
            Body::Branch(e) => e.len(),
        }
    }

    /// Encoded size of the node.
    pub fn bytes(&self) -> usize {
        format::NODE_HEADER
            + match &self.body {
                Body::Leaf(e) => e.iter().map(LEnt::bytes).sum::<usize>(),
                Body::Branch(e) => e
                    .iter()
                    .map(|b| format::branch_entry_bytes(b.key.len()))
                    .sum(),
            }
    }

    /// Whether the node is over `target` and splitting helps: a leaf of
    /// two entries splits into two leaves, but a branch needs three (two
    /// one-entry branches under a new root would be as big again, forever,
    /// when the keys are long).
    fn should_split(&self, target: usize) -> bool {
        let min = match self.body {
            Body::Leaf(_) => 2,
            Body::Branch(_) => 3,
        };
        self.len() >= min && self.bytes() > target
    }

    /// Split point by bytes: the first index whose prefix holds half.
    fn split_index(&self) -> usize {
        let sizes: Vec<usize> = match &self.body {
            Body::Leaf(e) => e.iter().map(LEnt::bytes).collect(),
            Body::Branch(e) => e
                .iter()
                .map(|b| format::branch_entry_bytes(b.key.len()))
                .collect(),
        };
        let half = sizes.iter().sum::<usize>() / 2;
        let mut acc = 0;
        let mut i = 0;
        while i < sizes.len() && acc + sizes[i] <= half {
            acc += sizes[i];
            i += 1;
        }
        i.clamp(1, sizes.len() - 1)
    }
}

/// Reads and bounds-checks a node of the durable tree into `buf`.
pub fn read_node(pool: &Region, off: u64, buf: &mut Vec<u8>) -> Result<Header> {
    let off = usize::try_from(off).map_err(|_| bad_off(off))?;
    let mut h = [0u8; format::NODE_HEADER];
    pool.check(off, h.len()).map_err(|_| bad_off(off as u64))?;
    pool.read(off, &mut h);
    let hdr = Header::decode(&h)?;
    pool.check(off, hdr.len).map_err(|_| bad_off(off as u64))?;
    buf.clear();
    buf.resize(hdr.len, 0);
    pool.read(off, buf);
    Ok(hdr)
}

fn bad_off(off: u64) -> EngineError {
    EngineError::Corrupt(format!("cow: node offset {off:#x} outside the pool"))
}

thread_local! {
    /// Set while a read of a store opened with `StoreOptions::verify(false)`
    /// runs on this thread ([`VerifyScope`]): checksums are then not
    /// checked (only to measure what checking costs).
    static SKIP_VERIFY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Turns verification off on this thread for one read of a store opened
/// without it; restores it when dropped. A no-op for a verifying store.
pub(crate) struct VerifyScope(bool);

impl VerifyScope {
    #[inline]
    pub(crate) fn new(verify: bool) -> VerifyScope {
        if !verify {
            SKIP_VERIFY.with(|s| s.set(true));
        }
        VerifyScope(!verify)
    }
}

impl Drop for VerifyScope {
    #[inline]
    fn drop(&mut self) {
        if self.0 {
            SKIP_VERIFY.with(|s| s.set(false));
        }
    }
}

fn skip_verify() -> bool {
    SKIP_VERIFY.with(|s| s.get())
}

/// [`read_node`], then the node's checksum against its own and the one
/// its parent (or the root line) recorded, `crc`: a damaged node is an
/// error, never entries.
pub fn read_node_checked(
    pool: &Region,
    nonce: u64,
    off: u64,
    crc: u32,
    buf: &mut Vec<u8>,
) -> Result<Header> {
    let h = read_node(pool, off, buf)?;
    check_read_node(nonce, off, crc, buf)?;
    Ok(h)
}

/// The checksum check of [`read_node_checked`] on a node already read
/// into `buf` from `off` (a no-op where this thread does not verify).
pub fn check_read_node(nonce: u64, off: u64, crc: u32, buf: &[u8]) -> Result<()> {
    if skip_verify() {
        return Ok(());
    }
    format::check_node_crc(buf, nonce, crc)
        .map_err(|e| EngineError::Corrupt(format!("node {off:#x}: {e}")))
}

/// [`read_node`], then only the link a lazy lookup checks: the checksum
/// the node stores must be the one its parent (or the root line)
/// recorded, `crc` — one comparison, the node's bytes not checksummed
/// (`read::get_at` says why a hit is still verified).
pub fn read_node_linked(pool: &Region, off: u64, crc: u32, buf: &mut Vec<u8>) -> Result<Header> {
    let h = read_node(pool, off, buf)?;
    if skip_verify() {
        return Ok(h);
    }
    let stored = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes"));
    if stored != crc {
        return Err(EngineError::Corrupt(format!(
            "node {off:#x}: stores checksum {stored:#010x}, its parent recorded {crc:#010x}"
        )));
    }
    Ok(h)
}

/// Whether this thread's reads skip verification (a store opened with
/// `StoreOptions::verify(false)`, for the cost measurement).
pub fn verifying() -> bool {
    !skip_verify()
}

/// [`read_blob`], then the value's checksum against `crc` (what the leaf
/// recorded): on a mismatch nothing is appended and the error names `key`.
pub fn read_blob_checked(
    pool: &Region,
    nonce: u64,
    key: &[u8],
    (off, len, crc): (u64, u32, u32),
    out: &mut Vec<u8>,
) -> Result<()> {
    let start = out.len();
    read_blob(pool, off, len as usize, out)?;
    if skip_verify() {
        return Ok(());
    }
    let computed = format::crc(nonce, &out[start..]);
    if computed != crc {
        out.truncate(start);
        return Err(EngineError::DamagedValue {
            key: key.to_vec(),
            detail: format!(
                "cow blob {off:#x}+{len}: checksum {computed:#010x}, the leaf recorded {crc:#010x}"
            ),
        });
    }
    Ok(())
}

/// Reads a blob's `len` bytes at `off`, appending them to `out`.
pub fn read_blob(pool: &Region, off: u64, len: usize, out: &mut Vec<u8>) -> Result<()> {
    let o = usize::try_from(off).map_err(|_| bad_off(off))?;
    pool.check(o, len)
        .map_err(|_| EngineError::Corrupt(format!("cow: blob {off:#x}+{len} outside the pool")))?;
    let start = out.len();
    out.resize(start + len, 0);
    pool.read(o, &mut out[start..]);
    Ok(())
}

/// Index of the child of a branch (keys given by `key_of`) that covers
/// `key`: the last entry whose key is `<= key`, the first (−∞) at least.
fn child_index<T>(ents: &[T], key: &[u8], key_of: impl Fn(&T) -> &[u8]) -> usize {
    if ents.len() <= 1 {
        return 0;
    }
    ents[1..].partition_point(|e| key_of(e) <= key)
}

/// One group's shadow of the tree.
pub struct Shadow<'a> {
    /// `None`: the empty tree.
    root: Option<DChild<'a>>,
    /// Blocks (nodes and blobs) of the base version that the new version
    /// no longer references.
    pub retired: Vec<u64>,
    pool: Region,
    nonce: u64,
    target: usize,
    inline_max: usize,
    buf: Vec<u8>,
    /// Net change of the key count.
    pub key_delta: i64,
    /// Blocks [`write`](Self::write) wrote (children before parents, the
    /// root last), for the switch record.
    pub fresh: Vec<Fresh>,
}

impl<'a> Shadow<'a> {
    /// A shadow of the durable tree whose root node is at pool offset
    /// `root.0` with checksum `root.1` (offset 0: the empty tree). Nodes
    /// split above `target` bytes; values up to `inline_max` bytes are
    /// stored in their leaf.
    pub fn new(
        pool: Region,
        nonce: u64,
        root: (u64, u32),
        target: usize,
        inline_max: usize,
    ) -> Self {
        Shadow {
            root: (root.0 != 0).then_some(DChild::Clean(root.0, root.1)),
            retired: Vec::new(),
            pool,
            nonce,
            target,
            inline_max,
            buf: Vec::new(),
            key_delta: 0,
            fresh: Vec::new(),
        }
    }

    /// True when the root changed (a commit must switch it).
    pub fn changed(&self) -> bool {
        match &self.root {
            None => !self.retired.is_empty(),
            Some(DChild::Clean(..)) => !self.retired.is_empty(),
            Some(DChild::Dirty(_)) => true,
        }
    }

    /// Decodes the durable node at `off`, whose checksum its parent
    /// recorded as `crc` (retiring its block). A damaged node is an error:
    /// a write never copies damage into a new version under a fresh
    /// checksum.
    fn load(&mut self, off: u64, crc: u32, expect_level: Option<u8>) -> Result<DNode<'a>> {
        let mut buf = std::mem::take(&mut self.buf);
        let r = (|| {
            let h = read_node_checked(&self.pool, self.nonce, off, crc, &mut buf)?;
            if expect_level.is_some_and(|l| l != h.level) {
                return Err(EngineError::Corrupt(format!(
                    "cow: node {off:#x} at level {} where {} was expected",
                    h.level,
                    expect_level.unwrap_or(0)
                )));
            }
            let mut it = format::Entries::new(&h, &buf);
            let body = if h.kind == KIND_LEAF {
                let mut v = Vec::with_capacity(h.count as usize + 1);
                for e in it.by_ref() {
                    let Ent::Leaf(k, val) = e? else {
                        unreachable!("a leaf yields leaf entries")
                    };
                    let val = match val {
                        ValRef::Inline(x) => LVal::Inline(Cow::Owned(x.to_vec())),
                        ValRef::Blob { off, len, crc } => LVal::Blob { off, len, crc },
                    };
                    v.push(LEnt {
                        key: Cow::Owned(k.to_vec()),
                        val,
                    });
                }
                Body::Leaf(v)
            } else {
                let mut v = Vec::with_capacity(h.count as usize + 1);
                for e in it.by_ref() {
                    let Ent::Branch(k, child, crc) = e? else {
                        unreachable!("a branch yields branch entries")
                    };
                    v.push(BEnt {
                        key: Cow::Owned(k.to_vec()),
                        child: DChild::Clean(child, crc),
                    });
                }
                Body::Branch(v)
            };
            if !it.exhausted() {
                return Err(EngineError::Corrupt(format!(
                    "cow: node {off:#x} length disagrees with its entries"
                )));
            }
            Ok(DNode {
                level: h.level,
                body,
                new_off: 0,
            })
        })();
        self.buf = buf;
        let n = r?;
        self.retired.push(off);
        Ok(n)
    }

    /// Makes `c` dirty (decoding it if clean) and returns the node.
    fn dirty<'c>(&mut self, c: &'c mut DChild<'a>, level: Option<u8>) -> Result<&'c mut DNode<'a>> {
        if let DChild::Clean(off, crc) = *c {
            let n = self.load(off, crc, level)?;
            *c = DChild::Dirty(Box::new(n));
        }
        match c {
            DChild::Dirty(n) => Ok(n),
            DChild::Clean(..) => unreachable!("made dirty above"),
        }
    }

    /// Inserts or replaces.
    pub fn put(&mut self, key: &'a [u8], value: &'a [u8]) -> Result<()> {
        let val = if value.len() <= self.inline_max {
            LVal::Inline(Cow::Borrowed(value))
        } else {
            LVal::New {
                data: value,
                off: 0,
            }
        };
        let mut root = match self.root.take() {
            Some(r) => r,
            None => {
                self.key_delta += 1;
                self.root = Some(DChild::Dirty(Box::new(DNode {
                    level: 0,
                    body: Body::Leaf(vec![LEnt {
                        key: Cow::Borrowed(key),
                        val,
                    }]),
                    new_off: 0,
                })));
                return Ok(());
            }
        };
        let r = self.put_at(&mut root, None, key, val);
        self.root = Some(root);
        r?;
        self.fix_root()
    }

    /// Removes; false when absent.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool> {
        let Some(mut root) = self.root.take() else {
            return Ok(false);
        };
        let r = self.delete_at(&mut root, None, key, false);
        self.root = Some(root);
        let found = r?;
        if found {
            self.fix_root()?;
        }
        Ok(found)
    }

    fn put_at(
        &mut self,
        c: &mut DChild<'a>,
        level: Option<u8>,
        key: &'a [u8],
        val: LVal<'a>,
    ) -> Result<()> {
        let node = self.dirty(c, level)?;
        let child_level = node.level.checked_sub(1);
        match &mut node.body {
            Body::Leaf(ents) => {
                match ents.binary_search_by(|e| e.key.as_ref().cmp(key)) {
                    Ok(i) => {
                        let old = std::mem::replace(&mut ents[i].val, val);
                        if let LVal::Blob { off, .. } = old {
                            self.retired.push(off);
                        }
                    }
                    Err(i) => {
                        ents.insert(
                            i,
                            LEnt {
                                key: Cow::Borrowed(key),
                                val,
                            },
                        );
                        self.key_delta += 1;
                    }
                }
                Ok(())
            }
            Body::Branch(ents) => {
                let i = child_index(ents, key, |e| e.key.as_ref());
                self.put_at(&mut ents[i].child, child_level, key, val)?;
                self.fix_child(ents, i, child_level)
            }
        }
    }

    /// `checked`: an ancestor already found `key` in the durable subtree.
    fn delete_at(
        &mut self,
        c: &mut DChild<'a>,
        level: Option<u8>,
        key: &[u8],
        checked: bool,
    ) -> Result<bool> {
        // Look before copying: a delete of an absent key changes nothing.
        let mut checked = checked;
        if let DChild::Clean(off, crc) = *c
            && !checked
        {
            if !self.durable_contains(off, crc, key)? {
                return Ok(false);
            }
            checked = true;
        }
        let node = self.dirty(c, level)?;
        let child_level = node.level.checked_sub(1);
        match &mut node.body {
            Body::Leaf(ents) => match ents.binary_search_by(|e| e.key.as_ref().cmp(key)) {
                Ok(i) => {
                    let old = ents.remove(i);
                    if let LVal::Blob { off, .. } = old.val {
                        self.retired.push(off);
                    }
                    self.key_delta -= 1;
                    Ok(true)
                }
                // Absent in a node this group already copied: nothing to undo.
                Err(_) => Ok(false),
            },
            Body::Branch(ents) => {
                let i = child_index(ents, key, |e| e.key.as_ref());
                if !self.delete_at(&mut ents[i].child, child_level, key, checked)? {
                    return Ok(false);
                }
                self.fix_child(ents, i, child_level)?;
                Ok(true)
            }
        }
    }

    /// Whether the durable subtree at `off` holds `key` (no copying).
    fn durable_contains(&mut self, mut off: u64, mut crc: u32, key: &[u8]) -> Result<bool> {
        let mut buf = std::mem::take(&mut self.buf);
        let r = (|| {
            for _ in 0..=MAX_HEIGHT {
                let h = read_node_checked(&self.pool, self.nonce, off, crc, &mut buf)?;
                let mut next = None;
                for e in format::Entries::new(&h, &buf) {
                    match e? {
                        Ent::Leaf(k, _) => {
                            if k == key {
                                return Ok(true);
                            }
                            if k > key {
                                return Ok(false);
                            }
                        }
                        Ent::Branch(k, child, ccrc) => {
                            if next.is_some() && k > key {
                                break;
                            }
                            next = Some((child, ccrc));
                        }
                    }
                }
                match (h.kind, next) {
                    (KIND_BRANCH, Some(c)) => (off, crc) = c,
                    _ => return Ok(false),
                }
            }
            Err(EngineError::Corrupt(
                "cow: tree deeper than the limit".into(),
            ))
        })();
        self.buf = buf;
        r
    }

    /// After child `i` of a branch changed: drops it when empty, splits it
    /// when over the target, merges it with a neighbour when small.
    fn fix_child(
        &mut self,
        ents: &mut Vec<BEnt<'a>>,
        i: usize,
        child_level: Option<u8>,
    ) -> Result<()> {
        let DChild::Dirty(child) = &mut ents[i].child else {
            return Ok(());
        };
        if child.len() == 0 {
            ents.remove(i);
            if i == 0
                && let Some(first) = ents.first_mut()
            {
                first.key = Cow::Borrowed(&[]);
            }
            return Ok(());
        }
        if child.should_split(self.target) {
            let at = child.split_index();
            let level = child.level;
            let (sep, right) = match &mut child.body {
                Body::Leaf(e) => {
                    let r = e.split_off(at);
                    (r[0].key.clone(), Body::Leaf(r))
                }
                Body::Branch(e) => {
                    let mut r = e.split_off(at);
                    let sep = std::mem::replace(&mut r[0].key, Cow::Borrowed(&[]));
                    (sep, Body::Branch(r))
                }
            };
            ents.insert(
                i + 1,
                BEnt {
                    key: sep,
                    child: DChild::Dirty(Box::new(DNode {
                        level,
                        body: right,
                        new_off: 0,
                    })),
                },
            );
            return Ok(());
        }
        if child.bytes() < self.target / 4 && ents.len() >= 2 {
            let (l, r) = if i + 1 < ents.len() {
                (i, i + 1)
            } else {
                (i - 1, i)
            };
            let other = if l == i { r } else { l };
            let sep = ents[r].key.clone();
            let ob = self.dirty(&mut ents[other].child, child_level)?.bytes();
            let DChild::Dirty(cn) = &ents[i].child else {
                unreachable!("child i is dirty")
            };
            if cn.bytes() + ob - format::NODE_HEADER > self.target {
                return Ok(());
            }
            let right = ents.remove(r);
            let DChild::Dirty(mut rn) = right.child else {
                unreachable!("both are dirty")
            };
            let DChild::Dirty(ln) = &mut ents[l].child else {
                unreachable!("both are dirty")
            };
            match (&mut ln.body, &mut rn.body) {
                (Body::Leaf(a), Body::Leaf(b)) => a.append(b),
                (Body::Branch(a), Body::Branch(b)) => {
                    if let Some(f) = b.first_mut() {
                        f.key = sep;
                    }
                    a.append(b);
                }
                _ => {
                    return Err(EngineError::Corrupt(
                        "cow: sibling nodes of different kinds".into(),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Keeps the root well formed: empty → empty tree, too big → split
    /// under a new root, a branch with one child → that child.
    fn fix_root(&mut self) -> Result<()> {
        for _ in 0..=MAX_HEIGHT as usize + 1 {
            let Some(DChild::Dirty(node)) = &mut self.root else {
                return Ok(());
            };
            if node.len() == 0 {
                self.root = None;
                return Ok(());
            }
            if node.should_split(self.target) {
                if node.level >= MAX_HEIGHT {
                    return Err(EngineError::Corrupt("cow: tree too deep".into()));
                }
                let level = node.level + 1;
                let old = self.root.take().expect("root present");
                let mut ents = vec![BEnt {
                    key: Cow::Borrowed(&[]),
                    child: old,
                }];
                self.fix_child(&mut ents, 0, level.checked_sub(1))?;
                self.root = Some(DChild::Dirty(Box::new(DNode {
                    level,
                    body: Body::Branch(ents),
                    new_off: 0,
                })));
                continue;
            }
            if let Body::Branch(ents) = &mut node.body
                && ents.len() == 1
            {
                let only = ents.pop().expect("one entry");
                self.root = Some(only.child);
                continue;
            }
            return Ok(());
        }
        Err(EngineError::Corrupt("cow: root does not settle".into()))
    }

    /// Reserves a block for every dirty node and new blob (DRAM only),
    /// appending the reservations to `out`. On error the caller cancels
    /// what `out` holds.
    pub fn reserve(&mut self, th: &mut dyn AllocThread, out: &mut Vec<Reservation>) -> Result<()> {
        if let Some(DChild::Dirty(n)) = &mut self.root {
            reserve_node(n, th, out)?;
        }
        Ok(())
    }

    /// Writes and flushes every reserved block (no fence: the publish's
    /// first fence orders them before the root switch). `flush == false`
    /// is the planted fault that leaves them unflushed. Returns the new
    /// root offset (0: empty tree) and checksum.
    pub fn write(&mut self, flush: bool) -> (u64, u32) {
        let mut buf = std::mem::take(&mut self.buf);
        let root = match &self.root {
            None => (0, 0),
            Some(DChild::Clean(off, crc)) => (*off, *crc),
            Some(DChild::Dirty(n)) => {
                let mut fresh = std::mem::take(&mut self.fresh);
                let r = write_node(n, &self.pool, self.nonce, flush, &mut buf, &mut fresh);
                self.fresh = fresh;
                r
            }
        };
        self.buf = buf;
        root
    }
}

fn reserve_node(
    n: &mut DNode<'_>,
    th: &mut dyn AllocThread,
    out: &mut Vec<Reservation>,
) -> Result<()> {
    match &mut n.body {
        Body::Leaf(ents) => {
            for e in ents.iter_mut() {
                if let LVal::New { data, off } = &mut e.val {
                    let r = th.reserve(data.len())?;
                    *off = r.off().raw();
                    out.push(r);
                }
            }
        }
        Body::Branch(ents) => {
            for e in ents.iter_mut() {
                if let DChild::Dirty(c) = &mut e.child {
                    reserve_node(c, th, out)?;
                }
            }
        }
    }
    let r = th.reserve(n.bytes())?;
    n.new_off = r.off().raw();
    out.push(r);
    Ok(())
}

fn write_node(
    n: &DNode<'_>,
    pool: &Region,
    nonce: u64,
    flush: bool,
    buf: &mut Vec<u8>,
    fresh: &mut Vec<Fresh>,
) -> (u64, u32) {
    // Children first: the encoding needs their offsets, and their bytes
    // are in place before anything points to them.
    let put = |off: u64, bytes: &[u8]| {
        if flush {
            pool.write_nodrain(off as usize, bytes);
        } else {
            pool.write(off as usize, bytes);
        }
    };
    match &n.body {
        Body::Leaf(ents) => {
            for e in ents {
                if let LVal::New { data, off } = &e.val {
                    put(*off, data);
                    fresh.push(Fresh {
                        off: *off,
                        len: data.len() as u32,
                        crc: format::crc(nonce, data),
                        node: false,
                    });
                }
            }
            format::begin_node(buf, KIND_LEAF, 0, ents.len());
            for e in ents {
                let v = match &e.val {
                    LVal::Inline(v) => ValRef::Inline(v),
                    LVal::Blob { off, len, crc } => ValRef::Blob {
                        off: *off,
                        len: *len,
                        crc: *crc,
                    },
                    LVal::New { data, off } => ValRef::Blob {
                        off: *off,
                        len: data.len() as u32,
                        crc: format::crc(nonce, data),
                    },
                };
                format::push_leaf_entry(buf, &e.key, v);
            }
        }
        Body::Branch(ents) => {
            let offs: Vec<(u64, u32)> = ents
                .iter()
                .map(|e| match &e.child {
                    DChild::Clean(off, crc) => (*off, *crc),
                    DChild::Dirty(c) => write_node(c, pool, nonce, flush, buf, fresh),
                })
                .collect();
            format::begin_node(buf, KIND_BRANCH, n.level, ents.len());
            for (i, (e, (off, crc))) in ents.iter().zip(offs).enumerate() {
                let key: &[u8] = if i == 0 { &[] } else { &e.key };
                format::push_branch_entry(buf, key, off, crc);
            }
        }
    }
    let crc = format::finish_node(buf, nonce);
    put(n.new_off, buf);
    fresh.push(Fresh {
        off: n.new_off,
        len: buf.len() as u32,
        crc,
        node: true,
    });
    (n.new_off, crc)
}
