//! A persistent skiplist with up to 32 levels and one reader-writer lock
//! [P1 §3.4.2]; 8-byte keys, fixed-size values.
//!
//! A node's height is `1 + trailing ones of mix64(key)` (capped at the
//! list's levels): geometric with p = ½ like a coin-flipping skiplist, but
//! a function of the key, so a re-executed insert builds the same node
//! (transaction functions must be deterministic).
//!
//! # On-media format (pool offsets, little-endian)
//!
//! Header block (64 bytes, version [`VERSION`] = 3, the
//! [`ferrite_pmem::superblock`] frame):
//!
//! | bytes  | field                                                |
//! |--------|------------------------------------------------------|
//! | 0..8   | magic `FERRSKIP`                                     |
//! | 8..10  | version, u16 = 3                                     |
//! | 10..16 | zero                                                 |
//! | 16..24 | `value_len` u64                                      |
//! | 24..32 | `count` u64 (updated in place; not in the checksum)  |
//! | 32..40 | `head` u64, the head node                            |
//! | 40..48 | `levels` u64                                         |
//! | 48..60 | zero                                                 |
//! | 60..64 | CRC32C of bytes 0..60 with 24..32 read as zero       |
//!
//! Versions 1 (no version, no checksum; `levels` at 8..16) and 2 (nodes
//! without a record checksum) are refused with
//! [`ferrite_tx::TxError::HeaderVersion`].
//!
//! Node (`16 + 8·height + value_len` bytes):
//!
//! | bytes              | field                                          |
//! |--------------------|------------------------------------------------|
//! | 0..8               | `key` u64                                      |
//! | 8..12              | `height` u32 (1..=levels)                      |
//! | 12..16             | CRC32C of the record: `key` (8 bytes LE) then the value |
//! | 16..16+8·height    | `next[height]` u64 (pool offsets, 0 = end of that level) |
//! | then `value_len`   | the value                                      |
//!
//! The head node has height `levels`, key 0, no value and checksum 0 (it
//! is no record). The checksum covers the record, not the links: it is
//! written with the node by the insert that creates it, and with the
//! value by an update, in the same transaction; relinking never changes
//! it. [`KvMap::get`] verifies it before returning a value
//! ([`TxError::Corrupt`] naming the key); `shape` lists every record
//! whose checksum fails in [`crate::Shape::damaged`].
//!
//! # Invariants (checked by `shape`)
//!
//! Level 0 holds every node once, in strictly increasing key order, and
//! `count` of them; level `i` holds exactly the nodes of height > `i`, in
//! the same order; every height is `1 + trailing ones of mix64(key)`
//! capped at `levels`; every referenced block is allocated and large enough.

use crate::{DsOptions, KvMap, Shape, Structure, le, mix64};
use ferrite_alloc::PAllocator;
use ferrite_pmem::POff;
use ferrite_tx::{Inputs, Result, Tx, TxError, TxFunc, TxPool, TxThread, pack_args};
use parking_lot::RwLock;

/// The header's magic.
pub const MAGIC: [u8; 8] = *b"FERRSKIP";
/// Most levels.
pub const MAX_LEVELS: u64 = 32;
const HDR: usize = 64;
/// This build's header version: 3, the first with record checksums.
pub const VERSION: u16 = 3;
const H_VALUE_LEN: usize = 16;
const H_COUNT: u64 = 24;
const H_HEAD: u64 = 32;
const H_LEVELS: usize = 40;
/// The header's framing; the count changes in place.
const HEADER: crate::Header = crate::Header {
    magic: MAGIC,
    name: "skiplist",
    mutable: 24..32,
    version: VERSION,
};

/// Creates a list: args `[levels, value_len]`; returns the header.
pub static CREATE: TxFunc = TxFunc {
    id: 0x5301,
    name: "skiplist-create",
    body: tx_create,
};
/// Inserts or updates: args `[header, key]`, buffer 0 the value.
pub static INSERT: TxFunc = TxFunc {
    id: 0x5302,
    name: "skiplist-insert",
    body: tx_insert,
};
/// Removes: args `[header, key]`.
pub static REMOVE: TxFunc = TxFunc {
    id: 0x5303,
    name: "skiplist-remove",
    body: tx_remove,
};

/// The skiplist's transaction functions (register them to open one).
pub static FUNCS: [&TxFunc; 3] = [&CREATE, &INSERT, &REMOVE];

fn p64(off: u64) -> POff<u64> {
    POff::new(off)
}

/// The checksum of a record (node bytes 12..16).
pub fn record_crc(key: u64, value: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&key.to_le_bytes()), value)
}

/// The node word at 8: the height (low half) and the record checksum.
fn height_word(h: u64, crc: u32) -> u64 {
    h | u64::from(crc) << 32
}

/// Height of `key`'s node in a list of `levels` levels.
pub fn height_of(key: u64, levels: u64) -> u64 {
    (1 + u64::from(mix64(key).trailing_ones())).min(levels)
}

fn tx_create(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let (levels, vlen) = (inp.arg_u64(0), inp.arg_u64(1));
    let h = tx.alloc(HDR)?;
    let head = tx.alloc((16 + 8 * levels) as usize)?;
    let mut hb = vec![0u8; 16 + 8 * levels as usize];
    hb[8..16].copy_from_slice(&levels.to_le_bytes());
    tx.write(head, &hb)?;
    let b = HEADER.encode(&[
        (H_LEVELS, levels),
        (H_VALUE_LEN, vlen),
        (H_HEAD as usize, head.raw()),
    ]);
    tx.write(h, &b)?;
    tx.set_root(h.raw())?;
    Ok(h.raw())
}

/// Walks down from the head: the last node before `key` on every level.
/// Returns the node after the level-0 predecessor (0 at the end).
fn search(
    tx: &mut Tx<'_, '_>,
    head: u64,
    levels: u64,
    key: u64,
    update: &mut [u64],
) -> Result<u64> {
    // The header's level count and every node's height come from the
    // medium: a damaged one must be an error, not an index out of bounds
    // (found by fuzzing, fuzz/regressions/tx_ds/).
    if levels == 0 || levels as usize > update.len() {
        return Err(TxError::Corrupt(format!("skiplist with {levels} levels")));
    }
    let mut x = head;
    for lvl in (0..levels).rev() {
        loop {
            let n = tx.read_u64(p64(x + 16 + 8 * lvl))?;
            if n == 0 || tx.read_u64(p64(n))? >= key {
                break;
            }
            x = n;
        }
        update[lvl as usize] = x;
    }
    tx.read_u64(p64(x + 16))
}

/// The height of the node at `n`, which must be 1..=`levels`.
fn node_height(tx: &mut Tx<'_, '_>, n: u64, levels: u64) -> Result<u64> {
    let h = tx.read_u64(p64(n + 8))? & 0xffff_ffff;
    if h == 0 || h > levels {
        return Err(TxError::Corrupt(format!(
            "skiplist node at {n:#x} has height {h} of {levels}"
        )));
    }
    Ok(h)
}

fn bad_count(count: u64) -> TxError {
    TxError::Corrupt(format!("skiplist entry count {count} cannot change by one"))
}

fn tx_insert(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let (header, key) = (inp.arg_u64(0), inp.arg_u64(1));
    let value = inp.buf(0);
    let mut hb = [0u8; 48];
    tx.read(p64(header), &mut hb)?;
    let (levels, count, head) = (le(&hb, H_LEVELS), le(&hb, 24), le(&hb, 32));
    let mut update = [0u64; MAX_LEVELS as usize];
    let cand = search(tx, head, levels, key, &mut update)?;
    if cand != 0 && tx.read_u64(p64(cand))? == key {
        let h = node_height(tx, cand, levels)?;
        tx.write(p64(cand + 16 + 8 * h), value)?;
        tx.write_u64(p64(cand + 8), height_word(h, record_crc(key, value)))?;
        return Ok(0);
    }
    let h = height_of(key, levels);
    let n = tx.alloc((16 + 8 * h) as usize + value.len())?;
    let mut nb = Vec::with_capacity((16 + 8 * h) as usize + value.len());
    nb.extend_from_slice(&key.to_le_bytes());
    nb.extend_from_slice(&height_word(h, record_crc(key, value)).to_le_bytes());
    for (lvl, &u) in update.iter().enumerate().take(h as usize) {
        let next = tx.read_u64(p64(u + 16 + 8 * lvl as u64))?;
        nb.extend_from_slice(&next.to_le_bytes());
    }
    nb.extend_from_slice(value);
    tx.write(n, &nb)?;
    for (lvl, &u) in update.iter().enumerate().take(h as usize) {
        tx.write_u64(p64(u + 16 + 8 * lvl as u64), n.raw())?;
    }
    let count = count.checked_add(1).ok_or_else(|| bad_count(count))?;
    tx.write_u64(p64(header + H_COUNT), count)?;
    Ok(1)
}

fn tx_remove(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let (header, key) = (inp.arg_u64(0), inp.arg_u64(1));
    let mut hb = [0u8; 48];
    tx.read(p64(header), &mut hb)?;
    let (levels, count, head) = (le(&hb, H_LEVELS), le(&hb, 24), le(&hb, 32));
    let mut update = [0u64; MAX_LEVELS as usize];
    let t = search(tx, head, levels, key, &mut update)?;
    if t == 0 || tx.read_u64(p64(t))? != key {
        return Ok(0);
    }
    let h = node_height(tx, t, levels)?;
    for (lvl, &u) in update.iter().enumerate().take(h as usize) {
        let at = p64(u + 16 + 8 * lvl as u64);
        if tx.read_u64(at)? == t {
            let next = tx.read_u64(p64(t + 16 + 8 * lvl as u64))?;
            tx.write_u64(at, next)?;
        }
    }
    let count = count.checked_sub(1).ok_or_else(|| bad_count(count))?;
    tx.write_u64(p64(header + H_COUNT), count)?;
    tx.free(POff::new(t))?;
    Ok(1)
}

/// The volatile handle on a skiplist: its lock.
pub struct SkipList<'p> {
    txp: &'p TxPool,
    header: u64,
    levels: u64,
    value_len: usize,
    lock: RwLock<()>,
}

impl<'p> SkipList<'p> {
    /// Creates an empty list (one transaction) and makes it the root.
    pub fn create(th: &mut TxThread<'p>, opts: DsOptions) -> Result<SkipList<'p>> {
        if opts.levels == 0 || opts.levels as u64 > MAX_LEVELS {
            return Err(TxError::BadOption(format!(
                "skiplist levels must be 1..={MAX_LEVELS}"
            )));
        }
        if opts.value_len == 0 || opts.value_len > 4096 {
            return Err(TxError::BadOption("value_len must be 1..=4096".into()));
        }
        let h = th.run(
            &CREATE,
            &pack_args(&[opts.levels as u64, opts.value_len as u64]),
            &[],
        )?;
        SkipList::open(th.pool(), h)
    }

    /// Opens the list whose header is at `header`, verifying its frame (magic, checksum, version: an older one is [`TxError::HeaderVersion`]).
    pub fn open(txp: &'p TxPool, header: u64) -> Result<SkipList<'p>> {
        let h = HEADER.read(txp, header)?;
        let (levels, value_len) = (le(&h, H_LEVELS), le(&h, H_VALUE_LEN) as usize);
        if levels == 0 || levels > MAX_LEVELS || value_len == 0 || value_len > 4096 {
            return Err(TxError::Corrupt(format!("skiplist header at {header:#x}")));
        }
        Ok(SkipList {
            txp,
            header,
            levels,
            value_len,
            lock: RwLock::new(()),
        })
    }
}

impl KvMap for SkipList<'_> {
    fn structure(&self) -> Structure {
        Structure::SkipList
    }

    fn insert(&self, th: &mut TxThread<'_>, key: u64, value: &[u8]) -> Result<bool> {
        crate::check_value_len(value, self.value_len, "list")?;
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
        let mut x = t.read_u64(self.header + H_HEAD)?;
        for lvl in (0..self.levels).rev() {
            loop {
                let n = t.read_u64(x + 16 + 8 * lvl)?;
                if n == 0 || t.read_u64(n)? >= key {
                    break;
                }
                x = n;
            }
        }
        let n = t.read_u64(x + 16)?;
        if n == 0 || t.read_u64(n)? != key {
            return Ok(None);
        }
        let w = t.read_u64(n + 8)?;
        let h = w & 0xffff_ffff;
        if h == 0 || h > self.levels {
            return Err(TxError::Corrupt(format!(
                "skiplist record key {key}: node height {h} of {}",
                self.levels
            )));
        }
        let mut v = vec![0u8; self.value_len];
        t.read(n + 16 + 8 * h, &mut v)?;
        if record_crc(key, &v) != (w >> 32) as u32 {
            return Err(TxError::Corrupt(format!(
                "skiplist record key {key}: checksum mismatch"
            )));
        }
        Ok(Some(v))
    }

    fn shape(&self) -> std::result::Result<Shape, String> {
        let t = self.txp;
        let rd = |off: u64| t.read_u64(off).map_err(|e| e.to_string());
        let mut shape = Shape::default();
        let heap = t.heap();
        let mut need = |off: u64, n: u64| -> std::result::Result<(), String> {
            let have = heap
                .usable_size(POff::new(off))
                .map_err(|e| format!("block {off:#x}: {e}"))?;
            if (have as u64) < n {
                return Err(format!("block {off:#x} holds {have} bytes, needs {n}"));
            }
            shape.blocks.push((off, n));
            Ok(())
        };
        need(self.header, HDR as u64)?;
        let count = rd(self.header + H_COUNT)?;
        let head = rd(self.header + H_HEAD)?;
        need(head, 16 + 8 * self.levels)?;
        if rd(head + 8)? != self.levels {
            return Err("head node height".into());
        }
        // Level 0: every node, sorted.
        let mut nodes: Vec<(u64, u64, u64)> = Vec::new();
        let mut x = rd(head + 16)?;
        while x != 0 {
            if nodes.len() as u64 >= count {
                return Err(format!(
                    "level 0 holds more than count {count} (or a cycle)"
                ));
            }
            let (k, hw) = (rd(x)?, rd(x + 8)?);
            let h = hw & 0xffff_ffff;
            if h != height_of(k, self.levels) {
                return Err(format!("key {k}: height {h}"));
            }
            if nodes.last().is_some_and(|&(pk, _, _)| pk >= k) {
                return Err(format!("key {k} out of order"));
            }
            need(x, 16 + 8 * h + self.value_len as u64)?;
            nodes.push((k, hw, x));
            x = rd(x + 16)?;
        }
        if nodes.len() as u64 != count {
            return Err(format!("count {count}, {} nodes", nodes.len()));
        }
        for lvl in 1..self.levels {
            let want: Vec<u64> = nodes
                .iter()
                .filter(|n| n.1 & 0xffff_ffff > lvl)
                .map(|n| n.2)
                .collect();
            let mut got = Vec::new();
            let mut x = rd(head + 16 + 8 * lvl)?;
            while x != 0 {
                if got.len() > want.len() {
                    return Err(format!("level {lvl} too long (or a cycle)"));
                }
                got.push(x);
                x = rd(x + 16 + 8 * lvl)?;
            }
            if got != want {
                return Err(format!(
                    "level {lvl} does not hold exactly the taller nodes"
                ));
            }
        }
        for &(k, hw, x) in &nodes {
            let mut v = vec![0u8; self.value_len];
            t.read(x + 16 + 8 * (hw & 0xffff_ffff), &mut v)
                .map_err(|e| e.to_string())?;
            if record_crc(k, &v) != (hw >> 32) as u32 {
                shape.damaged.push((k, "checksum mismatch".into()));
            } else {
                shape.entries.insert(k, v);
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
