//! A persistent hash map: 256 sub-maps, each a chained hash table that
//! doubles when it holds more than two entries per bucket — PMDK's
//! `hashmap_tx`, of which P1 makes 256 instances, one reader-writer lock
//! each [P1 §3.4.2]. 8-byte keys, fixed-size values.
//!
//! A key's hash `h = mix64(key)` picks the sub-map by its top bits and the
//! bucket by its low bits, so a sub-map's rehash never moves entries to
//! another sub-map and each operation touches one sub-map under its lock.
//!
//! # On-media format (all pool offsets, little-endian)
//!
//! Header block (`64 + 8·subs` bytes):
//!
//! | bytes  | field                                                   |
//! |--------|---------------------------------------------------------|
//! | 0..8   | magic `FERRHMAP`                                        |
//! | 8..16  | subs (power of two, ≤ 256)                              |
//! | 16..24 | initial buckets per sub-map                             |
//! | 24..32 | value_len                                               |
//! | 32..64 | reserved, zero                                          |
//! | 64..   | pool offset of sub-map `i`'s header, u64 each           |
//!
//! Sub-map header (a 64-byte block): `count` u64 (entries), `nbuckets` u64
//! (a power of two), `table` u64 (pool offset of `nbuckets` u64 entry
//! offsets, 0 = empty bucket), 40 reserved bytes.
//!
//! Entry (`16 + value_len` bytes): `key` u64, `next` u64 (pool offset of
//! the next entry of the bucket, 0 = last), value.
//!
//! # Invariants (checked by [`HashMap::shape`](crate::KvMap::shape))
//!
//! Every entry reachable from bucket `b` of sub-map `s` has a key whose
//! hash selects `s` and `b`; keys are unique; `count` is the number of
//! reachable entries; chains end (no cycle); every referenced block is
//! allocated and large enough.

use crate::{DsOptions, KvMap, Shape, Structure, header_bytes, le, mix64};
use ferrite_alloc::PAllocator;
use ferrite_pmem::POff;
use ferrite_tx::{Inputs, Result, Tx, TxError, TxFunc, TxPool, TxThread, pack_args};
use parking_lot::RwLock;

pub const MAGIC: [u8; 8] = *b"FERRHMAP";
pub(crate) const HDR: u64 = 64;
pub(crate) const SUB: usize = 64;
const ENTRY_HDR: u64 = 16;

/// Creates a map: args `[subs, buckets, value_len]`; returns the header.
pub static CREATE: TxFunc = TxFunc {
    id: 0x4d01,
    name: "hashmap-create",
    body: tx_create,
};
/// Inserts or updates: args `[header, key]`, buffer 0 the value; returns
/// 1 when the key was new.
pub static INSERT: TxFunc = TxFunc {
    id: 0x4d02,
    name: "hashmap-insert",
    body: tx_insert,
};
/// Removes: args `[header, key]`; returns 1 when the key was there.
pub static REMOVE: TxFunc = TxFunc {
    id: 0x4d03,
    name: "hashmap-remove",
    body: tx_remove,
};

pub static FUNCS: [&TxFunc; 3] = [&CREATE, &INSERT, &REMOVE];

fn p64(off: u64) -> POff<u64> {
    POff::new(off)
}

fn tx_create(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let (subs, buckets, vlen) = (inp.arg_u64(0), inp.arg_u64(1), inp.arg_u64(2));
    let h = create_tables(tx, &MAGIC, subs, buckets, vlen)?;
    tx.set_root(h.raw())?;
    Ok(h.raw())
}

/// Allocates and writes a header (`magic`, `subs`, `buckets`, `vlen`) and
/// `subs` empty sub-maps of `buckets` buckets: the format above, shared
/// with [`crate::bytemap`]. Only fresh blocks are written.
pub(crate) fn create_tables(
    tx: &mut Tx<'_, '_>,
    magic: &[u8; 8],
    subs: u64,
    buckets: u64,
    vlen: u64,
) -> Result<POff<u8>> {
    let h = tx.alloc((HDR + 8 * subs) as usize)?;
    let mut hb = vec![0u8; (HDR + 8 * subs) as usize];
    hb[0..8].copy_from_slice(magic);
    hb[8..16].copy_from_slice(&subs.to_le_bytes());
    hb[16..24].copy_from_slice(&buckets.to_le_bytes());
    hb[24..32].copy_from_slice(&vlen.to_le_bytes());
    let zeros = vec![0u8; 8 * buckets as usize];
    for i in 0..subs as usize {
        let s = tx.alloc(SUB)?;
        let t = tx.alloc(8 * buckets as usize)?;
        tx.write(t, &zeros)?;
        let mut sb = [0u8; SUB];
        sb[8..16].copy_from_slice(&buckets.to_le_bytes());
        sb[16..24].copy_from_slice(&t.raw().to_le_bytes());
        tx.write(s, &sb)?;
        hb[64 + 8 * i..72 + 8 * i].copy_from_slice(&s.raw().to_le_bytes());
    }
    tx.write(h, &hb)?;
    Ok(h)
}

/// Sub-map and bucket of a key.
pub(crate) fn slot_of(key: u64, subs: u64, nbuckets: u64) -> (u64, u64) {
    let h = mix64(key);
    let sub = (h >> 56) & (subs - 1);
    (sub, h & (nbuckets - 1))
}

/// The sub-map header offset, count, nbuckets and table of `key`'s sub-map.
fn sub_of(tx: &mut Tx<'_, '_>, header: u64, key: u64) -> Result<(u64, u64, u64, u64)> {
    let subs = tx.read_u64(p64(header + 8))?;
    let (s, _) = slot_of(key, subs, 1);
    let sub = tx.read_u64(p64(header + HDR + 8 * s))?;
    let mut b = [0u8; 24];
    tx.read(p64(sub), &mut b)?;
    Ok((sub, le(&b, 0), le(&b, 8), le(&b, 16)))
}

fn tx_insert(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let (header, key) = (inp.arg_u64(0), inp.arg_u64(1));
    let value = inp.buf(0);
    let (sub, count, nb, table) = sub_of(tx, header, key)?;
    let b = mix64(key) & (nb - 1);
    let head = tx.read_u64(p64(table + 8 * b))?;
    let mut e = head;
    while e != 0 {
        if tx.read_u64(p64(e))? == key {
            tx.write(p64(e + ENTRY_HDR), value)?;
            return Ok(0);
        }
        e = tx.read_u64(p64(e + 8))?;
    }
    let n = tx.alloc(ENTRY_HDR as usize + value.len())?;
    let mut eh = [0u8; ENTRY_HDR as usize];
    eh[0..8].copy_from_slice(&key.to_le_bytes());
    eh[8..16].copy_from_slice(&head.to_le_bytes());
    tx.write(n, &eh)?;
    tx.write(POff::<u8>::new(n.raw() + ENTRY_HDR), value)?;
    tx.write_u64(p64(table + 8 * b), n.raw())?;
    tx.write_u64(p64(sub), count + 1)?;
    if count + 1 > 2 * nb {
        rehash(tx, sub, nb, table)?;
    }
    Ok(1)
}

/// Doubles a sub-map's table, relinking every entry (PMDK's
/// `hm_tx_rebuild`, in the inserting transaction). It reads only an
/// entry's first two words (key, next), so [`crate::bytemap`]'s entries,
/// which begin the same way, rehash with it too. Allocates before it
/// writes anything that exists.
pub(crate) fn rehash(tx: &mut Tx<'_, '_>, sub: u64, nb: u64, table: u64) -> Result<()> {
    let nb2 = 2 * nb;
    let t2 = tx.alloc(8 * nb2 as usize)?;
    tx.write(t2, &vec![0u8; 8 * nb2 as usize])?;
    for i in 0..nb {
        let mut e = tx.read_u64(p64(table + 8 * i))?;
        while e != 0 {
            let next = tx.read_u64(p64(e + 8))?;
            let k = tx.read_u64(p64(e))?;
            let slot = t2.raw() + 8 * (mix64(k) & (nb2 - 1));
            let h2 = tx.read_u64(p64(slot))?;
            tx.write_u64(p64(e + 8), h2)?;
            tx.write_u64(p64(slot), e)?;
            e = next;
        }
    }
    let mut b = [0u8; 16];
    b[0..8].copy_from_slice(&nb2.to_le_bytes());
    b[8..16].copy_from_slice(&t2.raw().to_le_bytes());
    tx.write(p64(sub + 8), &b)?;
    tx.free(POff::new(table))?;
    Ok(())
}

/// Records block `off` in `blocks` after checking it is an allocated
/// block of at least `n` bytes.
pub(crate) fn need(
    txp: &TxPool,
    blocks: &mut Vec<(u64, u64)>,
    off: u64,
    n: u64,
) -> std::result::Result<(), String> {
    let have = txp
        .heap()
        .usable_size(POff::new(off))
        .map_err(|e| format!("block {off:#x}: {e}"))?;
    if (have as u64) < n {
        return Err(format!("block {off:#x} holds {have} bytes, needs {n}"));
    }
    blocks.push((off, n));
    Ok(())
}

/// Walks the tables under `header` (this format, also [`crate::bytemap`]'s):
/// checks and records in `blocks` the header, each sub-map header and
/// table; follows every chain (`next` at entry offset 8), checking it ends
/// and that each sub-map holds `count` entries; and calls
/// `entry(e, sub, bucket, nbuckets, blocks)` on each entry, which checks
/// and records the entry itself.
pub(crate) fn walk_tables(
    txp: &TxPool,
    header: u64,
    subs: u64,
    blocks: &mut Vec<(u64, u64)>,
    mut entry: impl FnMut(u64, u64, u64, u64, &mut Vec<(u64, u64)>) -> std::result::Result<(), String>,
) -> std::result::Result<(), String> {
    let rd = |off: u64| txp.read_u64(off).map_err(|e| e.to_string());
    need(txp, blocks, header, HDR + 8 * subs)?;
    for s in 0..subs {
        let sub = rd(header + HDR + 8 * s)?;
        need(txp, blocks, sub, SUB as u64)?;
        let (count, nb, table) = (rd(sub)?, rd(sub + 8)?, rd(sub + 16)?);
        if !nb.is_power_of_two() {
            return Err(format!("sub-map {s}: {nb} buckets"));
        }
        need(txp, blocks, table, 8 * nb)?;
        let mut n = 0u64;
        for b in 0..nb {
            let mut e = rd(table + 8 * b)?;
            while e != 0 {
                n += 1;
                if n > count {
                    return Err(format!(
                        "sub-map {s} holds more than its count {count} (or a cycle)"
                    ));
                }
                entry(e, s, b, nb, blocks)?;
                e = rd(e + 8)?;
            }
        }
        if n != count {
            return Err(format!("sub-map {s}: count {count}, {n} entries"));
        }
    }
    Ok(())
}

fn tx_remove(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let (header, key) = (inp.arg_u64(0), inp.arg_u64(1));
    let (sub, count, nb, table) = sub_of(tx, header, key)?;
    let mut link = table + 8 * (mix64(key) & (nb - 1));
    let mut e = tx.read_u64(p64(link))?;
    while e != 0 {
        let next = tx.read_u64(p64(e + 8))?;
        if tx.read_u64(p64(e))? == key {
            tx.write_u64(p64(link), next)?;
            tx.write_u64(p64(sub), count - 1)?;
            tx.free(POff::new(e))?;
            return Ok(1);
        }
        link = e + 8;
        e = next;
    }
    Ok(0)
}

/// The volatile handle on a hash map: its sub-maps' locks.
pub struct HashMap<'p> {
    txp: &'p TxPool,
    header: u64,
    subs: u64,
    value_len: usize,
    locks: Vec<RwLock<()>>,
}

impl<'p> HashMap<'p> {
    /// Creates an empty map (one transaction) and makes it the root.
    pub fn create(th: &mut TxThread<'p>, opts: DsOptions) -> Result<HashMap<'p>> {
        if !opts.subs.is_power_of_two() || opts.subs > 256 || !opts.buckets.is_power_of_two() {
            return Err(TxError::BadOption(
                "hash map: subs (≤ 256) and buckets must be powers of two".into(),
            ));
        }
        if opts.value_len == 0 || opts.value_len > 4096 {
            return Err(TxError::BadOption("value_len must be 1..=4096".into()));
        }
        let h = th.run(
            &CREATE,
            &pack_args(&[opts.subs as u64, opts.buckets as u64, opts.value_len as u64]),
            &[],
        )?;
        HashMap::open(th.pool(), h)
    }

    /// Opens the map whose header is at `header`.
    pub fn open(txp: &'p TxPool, header: u64) -> Result<HashMap<'p>> {
        let h = header_bytes(txp, header, &MAGIC, 32)?;
        let subs = le(&h, 8);
        let value_len = le(&h, 24) as usize;
        if !subs.is_power_of_two() || subs > 256 || value_len == 0 || value_len > 4096 {
            return Err(TxError::Corrupt(format!("hash map header at {header:#x}")));
        }
        Ok(HashMap {
            txp,
            header,
            subs,
            value_len,
            locks: (0..subs).map(|_| RwLock::new(())).collect(),
        })
    }

    fn lock_of(&self, key: u64) -> &RwLock<()> {
        &self.locks[slot_of(key, self.subs, 1).0 as usize]
    }

    fn check_value(&self, v: &[u8]) -> Result<()> {
        crate::check_value_len(v, self.value_len, "map")
    }
}

impl KvMap for HashMap<'_> {
    fn structure(&self) -> Structure {
        Structure::HashMap
    }

    fn insert(&self, th: &mut TxThread<'_>, key: u64, value: &[u8]) -> Result<bool> {
        self.check_value(value)?;
        let _g = self.lock_of(key).write();
        Ok(th.run(&INSERT, &pack_args(&[self.header, key]), &[value])? == 1)
    }

    fn remove(&self, th: &mut TxThread<'_>, key: u64) -> Result<bool> {
        let _g = self.lock_of(key).write();
        Ok(th.run(&REMOVE, &pack_args(&[self.header, key]), &[])? == 1)
    }

    fn get(&self, key: u64) -> Result<Option<Vec<u8>>> {
        let _g = self.lock_of(key).read();
        let t = self.txp;
        let (s, _) = slot_of(key, self.subs, 1);
        let sub = t.read_u64(self.header + HDR + 8 * s)?;
        let nb = t.read_u64(sub + 8)?;
        let table = t.read_u64(sub + 16)?;
        let mut e = t.read_u64(table + 8 * (mix64(key) & (nb - 1)))?;
        while e != 0 {
            if t.read_u64(e)? == key {
                let mut v = vec![0u8; self.value_len];
                t.read(e + ENTRY_HDR, &mut v)?;
                return Ok(Some(v));
            }
            e = t.read_u64(e + 8)?;
        }
        Ok(None)
    }

    /// The sub-map: insert, remove and get take only its lock.
    fn lock_group(&self, key: u64) -> Option<u64> {
        Some(slot_of(key, self.subs, 1).0)
    }

    fn shape(&self) -> std::result::Result<Shape, String> {
        let t = self.txp;
        let mut shape = Shape::default();
        let mut entries = std::mem::take(&mut shape.entries);
        walk_tables(
            t,
            self.header,
            self.subs,
            &mut shape.blocks,
            |e, s, b, nb, blocks| {
                need(t, blocks, e, ENTRY_HDR + self.value_len as u64)?;
                let k = t.read_u64(e).map_err(|e| e.to_string())?;
                if slot_of(k, self.subs, nb) != (s, b) {
                    return Err(format!("key {k} in sub-map {s} bucket {b}: wrong bucket"));
                }
                let mut v = vec![0u8; self.value_len];
                t.read(e + ENTRY_HDR, &mut v).map_err(|e| e.to_string())?;
                if entries.insert(k, v).is_some() {
                    return Err(format!("key {k} twice"));
                }
                Ok(())
            },
        )?;
        shape.entries = entries;
        Ok(shape)
    }

    fn header(&self) -> u64 {
        self.header
    }

    fn value_len(&self) -> usize {
        self.value_len
    }
}
