//! A persistent red-black tree with parent pointers and one reader-writer
//! lock, rebalanced as the Linux kernel's rbtree is [P1 §3.4.2]; 8-byte
//! keys, fixed-size values.
//!
//! Rebalancing writes many fields it never read (a rotated node's parent,
//! a recoloured uncle): under clobber logging those are pure outputs and
//! are not logged — where clobber logging saves most over undo [P1 §3.2].
//!
//! # On-media format (pool offsets, little-endian)
//!
//! Header block (64 bytes, version [`VERSION`] = 3, the
//! [`ferrite_pmem::superblock`] frame):
//!
//! | bytes  | field                                                 |
//! |--------|-------------------------------------------------------|
//! | 0..8   | magic `FERRRBTR`                                      |
//! | 8..10  | version, u16 = 3                                      |
//! | 10..16 | zero                                                  |
//! | 16..24 | `count` u64 (updated in place; not in the checksum)   |
//! | 24..32 | `root` u64, 0 = empty (updated in place; not in the checksum) |
//! | 32..40 | `value_len` u64                                       |
//! | 40..60 | zero                                                  |
//! | 60..64 | CRC32C of bytes 0..60 with 16..32 read as zero        |
//!
//! Versions 1 (no version, no checksum; `value_len` at 8..16) and 2
//! (nodes without a record checksum) are refused with
//! [`ferrite_tx::TxError::HeaderVersion`].
//!
//! Node (`48 + value_len` bytes): `key` u64, `left` u64, `right` u64,
//! `parent` u64 (0 = none), `color` u64 (0 black, 1 red), the record's
//! checksum u64 (CRC32C of `key` (8 bytes LE) then the value, in the low
//! half; the high half zero), value. The checksum covers the record, not
//! the links or the color: it is written with the node by the insert that
//! creates it and with the value by an update, in the same transaction,
//! and rebalancing (which writes links and colors it never read) leaves it
//! alone. [`KvMap::get`] verifies it before returning a value
//! ([`TxError::Corrupt`] naming the key); `shape` lists every record whose
//! checksum fails in [`crate::Shape::damaged`].
//!
//! # Invariants (checked by `shape`)
//!
//! In-order keys strictly increase; each child's parent is its parent; the
//! root is black and has no parent; no red node has a red child; every
//! path from a node to a leaf has the same number of black nodes; `count`
//! nodes are reachable; every block is allocated and large enough.

use crate::{DsOptions, KvMap, Shape, Structure, le};
use ferrite_alloc::PAllocator;
use ferrite_pmem::POff;
use ferrite_tx::{Inputs, Result, Tx, TxError, TxFunc, TxPool, TxThread, pack_args};
use parking_lot::RwLock;

/// The header's magic.
pub const MAGIC: [u8; 8] = *b"FERRRBTR";
const HDR: usize = 64;
const H_COUNT: u64 = 16;
const H_ROOT: u64 = 24;
const H_VALUE_LEN: usize = 32;
/// The header's framing; count and root change in place.
const HEADER: crate::Header = crate::Header {
    magic: MAGIC,
    name: "rbtree",
    mutable: 16..32,
    version: VERSION,
};
/// This build's header version: 3, the first with record checksums.
pub const VERSION: u16 = 3;
const KEY: u64 = 0;
const LEFT: u64 = 8;
const RIGHT: u64 = 16;
const PARENT: u64 = 24;
const COLOR: u64 = 32;
const CRC: u64 = 40;
/// Where a node's value starts (and the bytes before it).
const NODE: u64 = 48;
const BLACK: u64 = 0;
const RED: u64 = 1;

/// Creates a tree: args `[value_len]`; returns the header.
pub static CREATE: TxFunc = TxFunc {
    id: 0x5201,
    name: "rbtree-create",
    body: tx_create,
};
/// Inserts or updates: args `[header, key]`, buffer 0 the value.
pub static INSERT: TxFunc = TxFunc {
    id: 0x5202,
    name: "rbtree-insert",
    body: tx_insert,
};
/// Removes: args `[header, key]`.
pub static REMOVE: TxFunc = TxFunc {
    id: 0x5203,
    name: "rbtree-remove",
    body: tx_remove,
};

/// The red-black tree's transaction functions (register them to open one).
pub static FUNCS: [&TxFunc; 3] = [&CREATE, &INSERT, &REMOVE];

fn tx_create(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let h = tx.alloc(HDR)?;
    let b = HEADER.encode(&[(H_VALUE_LEN, inp.arg_u64(0))]);
    tx.write(h, &b)?;
    tx.set_root(h.raw())?;
    Ok(h.raw())
}

/// Field access on one tree inside a transaction.
struct T<'t, 'a, 'p> {
    tx: &'t mut Tx<'a, 'p>,
    hdr: u64,
}

impl T<'_, '_, '_> {
    fn get(&mut self, n: u64, f: u64) -> Result<u64> {
        self.tx.read_u64(POff::new(n + f))
    }
    fn set(&mut self, n: u64, f: u64, v: u64) -> Result<()> {
        self.tx.write_u64(POff::new(n + f), v)
    }
    fn root(&mut self) -> Result<u64> {
        self.tx.read_u64(POff::new(self.hdr + H_ROOT))
    }
    fn set_root(&mut self, v: u64) -> Result<()> {
        self.tx.write_u64(POff::new(self.hdr + H_ROOT), v)
    }
    /// Color of a possibly null node (null leaves are black).
    fn color(&mut self, n: u64) -> Result<u64> {
        if n == 0 {
            Ok(BLACK)
        } else {
            self.get(n, COLOR)
        }
    }

    /// Puts `v` where `u` hangs from `u`'s parent (`p`).
    fn replace_child(&mut self, p: u64, u: u64, v: u64) -> Result<()> {
        if p == 0 {
            self.set_root(v)
        } else if self.get(p, LEFT)? == u {
            self.set(p, LEFT, v)
        } else {
            self.set(p, RIGHT, v)
        }
    }

    /// Rotates `x` down to the `a` side (`a` = LEFT: left rotation).
    fn rotate(&mut self, x: u64, a: u64) -> Result<()> {
        let b = if a == LEFT { RIGHT } else { LEFT };
        let y = self.get(x, b)?;
        let ya = self.get(y, a)?;
        self.set(x, b, ya)?;
        if ya != 0 {
            self.set(ya, PARENT, x)?;
        }
        let p = self.get(x, PARENT)?;
        self.set(y, PARENT, p)?;
        self.replace_child(p, x, y)?;
        self.set(y, a, x)?;
        self.set(x, PARENT, y)
    }

    fn insert_fixup(&mut self, mut z: u64) -> Result<()> {
        loop {
            let p = self.get(z, PARENT)?;
            if p == 0 || self.color(p)? != RED {
                break;
            }
            let g = self.get(p, PARENT)?;
            // `p` is red, so it is not the root: `g` exists.
            let (a, b) = if self.get(g, LEFT)? == p {
                (LEFT, RIGHT)
            } else {
                (RIGHT, LEFT)
            };
            let u = self.get(g, b)?;
            if self.color(u)? == RED {
                self.set(p, COLOR, BLACK)?;
                self.set(u, COLOR, BLACK)?;
                self.set(g, COLOR, RED)?;
                z = g;
                continue;
            }
            let mut p = p;
            if self.get(p, b)? == z {
                z = p;
                self.rotate(z, a)?;
                p = self.get(z, PARENT)?;
            }
            self.set(p, COLOR, BLACK)?;
            self.set(g, COLOR, RED)?;
            self.rotate(g, b)?;
        }
        let r = self.root()?;
        if self.get(r, COLOR)? != BLACK {
            self.set(r, COLOR, BLACK)?;
        }
        Ok(())
    }

    /// Restores the black heights after a black node left the tree, with
    /// `x` (possibly null) its replacement and `xp` `x`'s parent.
    fn delete_fixup(&mut self, mut x: u64, mut xp: u64) -> Result<()> {
        while xp != 0 && self.color(x)? == BLACK {
            // A null `x` is its parent's left child exactly when that is
            // null: its sibling cannot be (it carries a black height ≥ 1).
            let (a, b) = if self.get(xp, LEFT)? == x {
                (LEFT, RIGHT)
            } else {
                (RIGHT, LEFT)
            };
            let mut w = self.get(xp, b)?;
            if self.color(w)? == RED {
                self.set(w, COLOR, BLACK)?;
                self.set(xp, COLOR, RED)?;
                self.rotate(xp, a)?;
                w = self.get(xp, b)?;
            }
            let (wa, wb) = (self.get(w, a)?, self.get(w, b)?);
            if self.color(wa)? == BLACK && self.color(wb)? == BLACK {
                self.set(w, COLOR, RED)?;
                x = xp;
                xp = self.get(x, PARENT)?;
                continue;
            }
            if self.color(wb)? == BLACK {
                self.set(wa, COLOR, BLACK)?;
                self.set(w, COLOR, RED)?;
                self.rotate(w, b)?;
                w = self.get(xp, b)?;
            }
            let c = self.get(xp, COLOR)?;
            self.set(w, COLOR, c)?;
            self.set(xp, COLOR, BLACK)?;
            let wb = self.get(w, b)?;
            if wb != 0 {
                self.set(wb, COLOR, BLACK)?;
            }
            self.rotate(xp, a)?;
            x = self.root()?;
            xp = 0;
        }
        if x != 0 && self.get(x, COLOR)? != BLACK {
            self.set(x, COLOR, BLACK)?;
        }
        Ok(())
    }
}

/// The checksum of a record (node bytes 40..48).
pub fn record_crc(key: u64, value: &[u8]) -> u64 {
    u64::from(crc32c::crc32c_append(
        crc32c::crc32c(&key.to_le_bytes()),
        value,
    ))
}

fn tx_insert(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let (hdr, key) = (inp.arg_u64(0), inp.arg_u64(1));
    let value = inp.buf(0);
    let mut t = T { tx, hdr };
    let (mut y, mut x) = (0u64, t.root()?);
    let mut side = LEFT;
    while x != 0 {
        y = x;
        let k = t.get(x, KEY)?;
        if k == key {
            t.tx.write(POff::<u8>::new(x + NODE), value)?;
            t.set(x, CRC, record_crc(key, value))?;
            return Ok(0);
        }
        side = if key < k { LEFT } else { RIGHT };
        x = t.get(x, side)?;
    }
    let z = t.tx.alloc(NODE as usize + value.len())?;
    let mut nb = Vec::with_capacity(NODE as usize + value.len());
    for w in [key, 0, 0, y, RED, record_crc(key, value)] {
        nb.extend_from_slice(&w.to_le_bytes());
    }
    nb.extend_from_slice(value);
    t.tx.write(z, &nb)?;
    let z = z.raw();
    if y == 0 {
        t.set_root(z)?;
    } else {
        t.set(y, side, z)?;
    }
    let count = t.tx.read_u64(POff::new(hdr + H_COUNT))?;
    t.tx.write_u64(POff::new(hdr + H_COUNT), count + 1)?;
    t.insert_fixup(z)?;
    Ok(1)
}

fn tx_remove(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let (hdr, key) = (inp.arg_u64(0), inp.arg_u64(1));
    let mut t = T { tx, hdr };
    let mut z = t.root()?;
    while z != 0 {
        let k = t.get(z, KEY)?;
        if k == key {
            break;
        }
        z = t.get(z, if key < k { LEFT } else { RIGHT })?;
    }
    if z == 0 {
        return Ok(0);
    }
    let (zl, zr, zp) = (t.get(z, LEFT)?, t.get(z, RIGHT)?, t.get(z, PARENT)?);
    let (x, xp, removed_color);
    if zl == 0 || zr == 0 {
        x = if zl == 0 { zr } else { zl };
        xp = zp;
        removed_color = t.get(z, COLOR)?;
        t.replace_child(zp, z, x)?;
        if x != 0 {
            t.set(x, PARENT, zp)?;
        }
    } else {
        // Successor: the leftmost node of the right subtree takes z's place.
        let mut y = zr;
        loop {
            let l = t.get(y, LEFT)?;
            if l == 0 {
                break;
            }
            y = l;
        }
        removed_color = t.get(y, COLOR)?;
        x = t.get(y, RIGHT)?;
        if y == zr {
            xp = y;
        } else {
            xp = t.get(y, PARENT)?;
            t.set(xp, LEFT, x)?;
            if x != 0 {
                t.set(x, PARENT, xp)?;
            }
            t.set(y, RIGHT, zr)?;
            t.set(zr, PARENT, y)?;
        }
        t.replace_child(zp, z, y)?;
        t.set(y, PARENT, zp)?;
        t.set(y, LEFT, zl)?;
        t.set(zl, PARENT, y)?;
        let c = t.get(z, COLOR)?;
        t.set(y, COLOR, c)?;
    }
    if removed_color == BLACK {
        t.delete_fixup(x, xp)?;
    }
    let count = t.tx.read_u64(POff::new(hdr + H_COUNT))?;
    t.tx.write_u64(POff::new(hdr + H_COUNT), count - 1)?;
    t.tx.free(POff::new(z))?;
    Ok(1)
}

/// The volatile handle on a red-black tree: its lock.
pub struct RbTree<'p> {
    txp: &'p TxPool,
    header: u64,
    value_len: usize,
    lock: RwLock<()>,
}

impl<'p> RbTree<'p> {
    /// Creates an empty tree (one transaction) and makes it the root.
    pub fn create(th: &mut TxThread<'p>, opts: DsOptions) -> Result<RbTree<'p>> {
        if opts.value_len == 0 || opts.value_len > 4096 {
            return Err(TxError::BadOption("value_len must be 1..=4096".into()));
        }
        let h = th.run(&CREATE, &pack_args(&[opts.value_len as u64]), &[])?;
        RbTree::open(th.pool(), h)
    }

    /// Opens the tree whose header is at `header`, verifying its frame (magic, checksum, version: an older one is [`TxError::HeaderVersion`]).
    pub fn open(txp: &'p TxPool, header: u64) -> Result<RbTree<'p>> {
        let h = HEADER.read(txp, header)?;
        let value_len = le(&h, H_VALUE_LEN) as usize;
        if value_len == 0 || value_len > 4096 {
            return Err(TxError::Corrupt(format!("rbtree header at {header:#x}")));
        }
        Ok(RbTree {
            txp,
            header,
            value_len,
            lock: RwLock::new(()),
        })
    }
}

impl KvMap for RbTree<'_> {
    fn structure(&self) -> Structure {
        Structure::RbTree
    }

    fn insert(&self, th: &mut TxThread<'_>, key: u64, value: &[u8]) -> Result<bool> {
        crate::check_value_len(value, self.value_len, "tree")?;
        let _g = self.lock.write();
        Ok(th.run(&INSERT, &pack_args(&[self.header, key]), &[value])? == 1)
    }

    fn remove(&self, th: &mut TxThread<'_>, key: u64) -> Result<bool> {
        let _g = self.lock.write();
        Ok(th.run(&REMOVE, &pack_args(&[self.header, key]), &[])? == 1)
    }

    fn get(&self, key: u64) -> Result<Option<Vec<u8>>> {
        let _g = self.lock.read();
        let t = self.txp;
        let mut x = t.read_u64(self.header + H_ROOT)?;
        while x != 0 {
            let k = t.read_u64(x + KEY)?;
            if k == key {
                let mut v = vec![0u8; self.value_len];
                t.read(x + NODE, &mut v)?;
                if t.read_u64(x + CRC)? != record_crc(key, &v) {
                    return Err(TxError::Corrupt(format!(
                        "rbtree record key {key}: checksum mismatch"
                    )));
                }
                return Ok(Some(v));
            }
            x = t.read_u64(x + if key < k { LEFT } else { RIGHT })?;
        }
        Ok(None)
    }

    fn shape(&self) -> std::result::Result<Shape, String> {
        let t = self.txp;
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
        let count = rd(self.header + H_COUNT)?;
        let root = rd(self.header + H_ROOT)?;
        if root != 0 && (rd(root + PARENT)? != 0 || rd(root + COLOR)? != BLACK) {
            return Err("root has a parent or is red".into());
        }
        // Iterative in-order walk with an explicit stack of
        // (node, lower bound, upper bound, black count above).
        let mut black_height: Option<u64> = None;
        let mut stack = vec![(root, None::<u64>, None::<u64>, 0u64, 0u64)];
        let mut n = 0u64;
        while let Some((x, lo, hi, blacks, parent)) = stack.pop() {
            if x == 0 {
                match black_height {
                    None => black_height = Some(blacks),
                    Some(b) if b != blacks => return Err("black heights differ".into()),
                    _ => {}
                }
                continue;
            }
            n += 1;
            if n > count {
                return Err(format!("more than count {count} nodes (or a cycle)"));
            }
            need(&mut shape, x, NODE + self.value_len as u64)?;
            let (k, l, r, p, c) = (
                rd(x)?,
                rd(x + LEFT)?,
                rd(x + RIGHT)?,
                rd(x + PARENT)?,
                rd(x + COLOR)?,
            );
            if p != parent {
                return Err(format!("key {k}: parent pointer"));
            }
            if lo.is_some_and(|lo| k <= lo) || hi.is_some_and(|hi| k >= hi) {
                return Err(format!("key {k} out of order"));
            }
            if c > RED {
                return Err(format!("key {k}: color {c}"));
            }
            let red = |n: u64| -> std::result::Result<bool, String> {
                Ok(n != 0 && rd(n + COLOR)? == RED)
            };
            if c == RED && (red(l)? || red(r)?) {
                return Err(format!("red key {k} has a red child"));
            }
            let b = blacks + u64::from(c == BLACK);
            let mut v = vec![0u8; self.value_len];
            t.read(x + NODE, &mut v).map_err(|e| e.to_string())?;
            if rd(x + CRC)? != record_crc(k, &v) {
                if shape.damaged.iter().any(|d| d.0 == k) {
                    return Err(format!("key {k} twice"));
                }
                shape.damaged.push((k, "checksum mismatch".into()));
            } else if shape.entries.insert(k, v).is_some() {
                return Err(format!("key {k} twice"));
            }
            stack.push((l, lo, Some(k), b, x));
            stack.push((r, Some(k), hi, b, x));
        }
        if n != count {
            return Err(format!("count {count}, {n} nodes"));
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
