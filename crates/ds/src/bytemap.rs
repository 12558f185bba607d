//! A persistent hash map from byte strings to byte strings of any length,
//! written in batches: what a cache server keeps (`ferrite serve --store
//! tx-undo|tx-redo|tx-clobber`). It is the [`hashmap`](crate::hashmap)'s
//! table — 256 sub-maps, one reader-writer lock each, doubling past two
//! entries per bucket — with variable-size entries, so every
//! [`Strategy`](ferrite_tx::Strategy) runs it and P1's memcached
//! comparison [P1 §3.4.6] runs inside one server.
//!
//! # On-media format (pool offsets, little-endian)
//!
//! The header and sub-map headers are the hash map's (see
//! [`crate::hashmap`]) with magic `FERRBMAP` and value_len 0. An entry is
//! one block of `24 + K + V` bytes:
//!
//! | bytes        | field                                                  |
//! |--------------|--------------------------------------------------------|
//! | 0..8         | `hash`: [`hash_bytes`] of the key                      |
//! | 8..16        | `next`: pool offset of the bucket's next entry, 0 = last |
//! | 16..20       | `K`: key length, u32 (1..=[`MAX_KEY`])                 |
//! | 20..24       | `V`: value length, u32                                 |
//! | 24..24+K     | key bytes                                              |
//! | 24+K..24+K+V | value bytes                                            |
//!
//! `hash` plays the hash map's key word: `mix64(hash)` picks the sub-map
//! (top bits) and the bucket (low bits), and a rehash moves entries by it
//! alone. Two keys may share a `hash`; they are told apart by their bytes.
//!
//! # Writes
//!
//! [`ByteMap::apply`] runs one transaction ([`APPLY`]) for a batch of puts
//! and deletes (later operations on a key win): all or nothing after a
//! crash. A put writes a *fresh* entry and links it where the old one was
//! (freeing it) or at the head of its bucket, so values are never written
//! in place and fresh bytes need no log under any strategy; what is
//! logged is the links and counts. The transaction allocates every entry
//! before it writes anything that already exists, so a full heap fails it
//! cleanly, clobber logging included (rule 6 of [`ferrite_tx`]); for the
//! same reason sub-maps are doubled before, in their own transaction
//! ([`REHASH`]), never inside a batch.
//!
//! Locks: a batch write-locks the sub-maps of its keys in ascending order
//! (strict two-phase locking, no deadlock); a lookup read-locks one.
//!
//! # Invariants (checked by [`ByteMap::shape`])
//!
//! Every entry reachable from bucket `b` of sub-map `s` has a hash that
//! selects `s` and `b`, and `hash` is the hash of its key; keys are unique;
//! `count` is the number of reachable entries; chains end; every
//! referenced block is allocated and large enough for its lengths.

use crate::hashmap::{HDR, create_tables, need, rehash, slot_of, walk_tables};
use crate::le;
use ferrite_pmem::POff;
use ferrite_tx::{Inputs, Result, Tx, TxError, TxFunc, TxPool, TxThread, pack_args};
use parking_lot::RwLock;
use std::collections::BTreeMap;

pub const MAGIC: [u8; 8] = *b"FERRBMAP";
/// Longest key.
pub const MAX_KEY: usize = 4096;
/// Bytes of an entry before its key.
pub const ENTRY_HDR: u64 = 24;
const E_NEXT: u64 = 8;
const E_LENS: u64 = 16;
const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;

/// Creates a map: args `[subs, buckets]`; returns the header.
pub static CREATE: TxFunc = TxFunc {
    id: 0x4d11,
    name: "bytemap-create",
    body: tx_create,
};
/// Applies a batch: args `[header]`, buffer 0 the operations
/// ([`encode_op`]); returns how many of the batch's keys were present.
pub static APPLY: TxFunc = TxFunc {
    id: 0x4d12,
    name: "bytemap-apply",
    body: tx_apply,
};
/// Doubles sub-map `sub` if it holds more than two entries per bucket:
/// args `[header, sub]`; returns 1 when it did.
pub static REHASH: TxFunc = TxFunc {
    id: 0x4d13,
    name: "bytemap-rehash",
    body: tx_rehash,
};

pub static FUNCS: [&TxFunc; 3] = [&CREATE, &APPLY, &REHASH];

/// 64-bit FNV-1a of the key, then a finaliser (the table mixes it again
/// with `mix64`). Part of the format: recovery and every open must agree.
pub fn hash_bytes(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^ (h >> 29)
}

fn p64(off: u64) -> POff<u64> {
    POff::new(off)
}

/// Appends one operation to a batch buffer: tag u8 (1 put, 2 delete),
/// key length u32, for a put the value length u32, the key, the value.
pub fn encode_op(out: &mut Vec<u8>, key: &[u8], value: Option<&[u8]>) {
    match value {
        Some(v) => {
            out.push(OP_PUT);
            out.extend_from_slice(&(key.len() as u32).to_le_bytes());
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(v);
        }
        None => {
            out.push(OP_DELETE);
            out.extend_from_slice(&(key.len() as u32).to_le_bytes());
            out.extend_from_slice(key);
        }
    }
}

/// One decoded operation.
#[derive(Clone, Copy, Debug)]
struct OpRef<'a> {
    key: &'a [u8],
    value: Option<&'a [u8]>,
}

fn corrupt(what: &str) -> TxError {
    TxError::Corrupt(format!("byte map batch: {what}"))
}

/// Decodes a batch buffer, keeping only the last operation on each key
/// (in the order of those last operations), which is what applying them
/// all in order leaves.
fn decode_ops(b: &[u8]) -> Result<Vec<OpRef<'_>>> {
    let mut ops = Vec::new();
    let mut i = 0usize;
    let u32_at = |i: usize| -> Result<usize> {
        let w = b.get(i..i + 4).ok_or_else(|| corrupt("truncated length"))?;
        Ok(u32::from_le_bytes(w.try_into().expect("4 bytes")) as usize)
    };
    while i < b.len() {
        let tag = b[i];
        let klen = u32_at(i + 1)?;
        let (vlen, body) = match tag {
            OP_PUT => (Some(u32_at(i + 5)?), i + 9),
            OP_DELETE => (None, i + 5),
            t => return Err(corrupt(&format!("operation tag {t}"))),
        };
        if klen == 0 || klen > MAX_KEY {
            return Err(corrupt(&format!("key of {klen} bytes")));
        }
        let kend = body + klen;
        let end = kend + vlen.unwrap_or(0);
        if end > b.len() {
            return Err(corrupt("truncated operation"));
        }
        ops.push(OpRef {
            key: &b[body..kend],
            value: vlen.map(|_| &b[kend..end]),
        });
        i = end;
    }
    let mut last: std::collections::HashMap<&[u8], usize> = Default::default();
    for (j, op) in ops.iter().enumerate() {
        last.insert(op.key, j);
    }
    Ok(ops
        .iter()
        .enumerate()
        .filter(|(j, op)| last[op.key] == *j)
        .map(|(_, op)| *op)
        .collect())
}

fn tx_create(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let h = create_tables(tx, &MAGIC, inp.arg_u64(0), inp.arg_u64(1), 0)?;
    tx.set_root(h.raw())?;
    Ok(h.raw())
}

/// Sub-map header offset, count, buckets and table of hash `h`.
fn sub_of(tx: &mut Tx<'_, '_>, header: u64, subs: u64, h: u64) -> Result<(u64, u64, u64, u64)> {
    let sub = tx.read_u64(p64(header + HDR + 8 * slot_of(h, subs, 1).0))?;
    let mut b = [0u8; 24];
    tx.read(p64(sub), &mut b)?;
    Ok((sub, le(&b, 0), le(&b, 8), le(&b, 16)))
}

/// Where a key is in its chain.
struct Found {
    /// The word pointing at the entry (a bucket or the previous `next`).
    link: u64,
    entry: u64,
    next: u64,
}

/// Walks the chain starting at bucket word `bucket` for `key` (hash `h`).
fn find(tx: &mut Tx<'_, '_>, bucket: u64, h: u64, key: &[u8]) -> Result<Option<Found>> {
    let mut link = bucket;
    let mut e = tx.read_u64(p64(link))?;
    let mut kbuf = Vec::new();
    while e != 0 {
        let next = tx.read_u64(p64(e + E_NEXT))?;
        if tx.read_u64(p64(e))? == h && tx.read_u64(p64(e + E_LENS))? as u32 as usize == key.len() {
            kbuf.resize(key.len(), 0);
            tx.read(POff::<u8>::new(e + ENTRY_HDR), &mut kbuf)?;
            if kbuf == key {
                return Ok(Some(Found {
                    link,
                    entry: e,
                    next,
                }));
            }
        }
        link = e + E_NEXT;
        e = next;
    }
    Ok(None)
}

fn tx_apply(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let header = inp.arg_u64(0);
    let ops = decode_ops(inp.buf(0))?;
    let subs = tx.read_u64(p64(header + 8))?;
    // Phase 1: every new entry, in fresh blocks. Nothing that exists has
    // been written yet, so a failure here (a full heap) aborts cleanly.
    let mut fresh = Vec::new();
    for op in &ops {
        if let Some(v) = op.value {
            let e = tx.alloc(ENTRY_HDR as usize + op.key.len() + v.len())?;
            let mut hd = [0u8; ENTRY_HDR as usize];
            hd[0..8].copy_from_slice(&hash_bytes(op.key).to_le_bytes());
            hd[16..20].copy_from_slice(&(op.key.len() as u32).to_le_bytes());
            hd[20..24].copy_from_slice(&(v.len() as u32).to_le_bytes());
            tx.write(e, &hd)?;
            tx.write(POff::<u8>::new(e.raw() + ENTRY_HDR), op.key)?;
            tx.write(
                POff::<u8>::new(e.raw() + ENTRY_HDR + op.key.len() as u64),
                v,
            )?;
            fresh.push(e.raw());
        }
    }
    // Phase 2: link and unlink.
    let mut fresh = fresh.into_iter();
    let mut present = 0;
    for op in &ops {
        let h = hash_bytes(op.key);
        let (sub, count, nb, table) = sub_of(tx, header, subs, h)?;
        let bucket = table + 8 * slot_of(h, subs, nb).1;
        let found = find(tx, bucket, h, op.key)?;
        present += u64::from(found.is_some());
        match (op.value, found) {
            (Some(_), found) => {
                let n = fresh.next().expect("one fresh entry per put");
                match found {
                    Some(f) => {
                        tx.write_u64(p64(n + E_NEXT), f.next)?;
                        tx.write_u64(p64(f.link), n)?;
                        tx.free(POff::new(f.entry))?;
                    }
                    None => {
                        let head = tx.read_u64(p64(bucket))?;
                        tx.write_u64(p64(n + E_NEXT), head)?;
                        tx.write_u64(p64(bucket), n)?;
                        tx.write_u64(p64(sub), count + 1)?;
                    }
                }
            }
            (None, Some(f)) => {
                let count = count.checked_sub(1).ok_or_else(|| {
                    TxError::Corrupt(format!("byte map sub-map {sub:#x}: count 0"))
                })?;
                tx.write_u64(p64(f.link), f.next)?;
                tx.write_u64(p64(sub), count)?;
                tx.free(POff::new(f.entry))?;
            }
            (None, None) => {}
        }
    }
    Ok(present)
}

fn tx_rehash(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let (header, s) = (inp.arg_u64(0), inp.arg_u64(1));
    let sub = tx.read_u64(p64(header + HDR + 8 * s))?;
    let mut b = [0u8; 24];
    tx.read(p64(sub), &mut b)?;
    let (count, nb, table) = (le(&b, 0), le(&b, 8), le(&b, 16));
    if count <= 2 * nb {
        return Ok(0);
    }
    rehash(tx, sub, nb, table)?;
    Ok(1)
}

/// What a byte map holds, read back by walking it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ByteShape {
    pub entries: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Every block the map references: (pool offset, bytes it needs).
    pub blocks: Vec<(u64, u64)>,
}

/// The volatile handle on a byte map: its sub-maps' locks. One per pool,
/// shared by every thread (each with its own [`TxThread`]).
pub struct ByteMap<'p> {
    txp: &'p TxPool,
    header: u64,
    subs: u64,
    locks: Vec<RwLock<()>>,
}

impl<'p> ByteMap<'p> {
    /// Creates an empty map of `subs` sub-maps (a power of two, at most
    /// 256) of `buckets` initial buckets each (a power of two) and makes it
    /// the pool's root.
    pub fn create(th: &mut TxThread<'p>, subs: usize, buckets: usize) -> Result<ByteMap<'p>> {
        if !subs.is_power_of_two() || subs > 256 || !buckets.is_power_of_two() {
            return Err(TxError::BadOption(
                "byte map: subs (≤ 256) and buckets must be powers of two".into(),
            ));
        }
        let h = th.run(&CREATE, &pack_args(&[subs as u64, buckets as u64]), &[])?;
        ByteMap::open(th.pool(), h)
    }

    /// Opens the map whose header is at `header`.
    pub fn open(txp: &'p TxPool, header: u64) -> Result<ByteMap<'p>> {
        let h = crate::header_bytes(txp, header, &MAGIC, 32)?;
        let subs = le(&h, 8);
        if !subs.is_power_of_two() || subs > 256 || le(&h, 24) != 0 {
            return Err(TxError::Corrupt(format!("byte map header at {header:#x}")));
        }
        Ok(ByteMap {
            txp,
            header,
            subs,
            locks: (0..subs).map(|_| RwLock::new(())).collect(),
        })
    }

    pub fn header(&self) -> u64 {
        self.header
    }

    pub fn pool(&self) -> &'p TxPool {
        self.txp
    }

    fn sub_index(&self, key: &[u8]) -> usize {
        slot_of(hash_bytes(key), self.subs, 1).0 as usize
    }

    /// Key and value lengths of entry `e`, refused as corrupt when they
    /// could not fit the pool (before anything is allocated for them).
    fn lens(&self, e: u64) -> Result<(usize, usize)> {
        let lens = self.txp.read_u64(e + E_LENS)?;
        let (klen, vlen) = (u64::from(lens as u32), lens >> 32);
        let (lo, hi) = self.txp.data_bounds();
        if klen == 0 || klen > MAX_KEY as u64 || klen + vlen > hi - lo {
            return Err(TxError::Corrupt(format!(
                "byte map entry {e:#x}: lengths {klen} and {vlen}"
            )));
        }
        Ok((klen as usize, vlen as usize))
    }

    /// Reads `key`'s value into `out` (cleared first); false when absent.
    pub fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        let _g = self.locks[self.sub_index(key)].read();
        let t = self.txp;
        let h = hash_bytes(key);
        let sub = t.read_u64(self.header + HDR + 8 * slot_of(h, self.subs, 1).0)?;
        let (nb, table) = (t.read_u64(sub + 8)?, t.read_u64(sub + 16)?);
        let mut e = t.read_u64(table + 8 * slot_of(h, self.subs, nb).1)?;
        while e != 0 {
            let (klen, vlen) = self.lens(e)?;
            if t.read_u64(e)? == h && klen == key.len() {
                out.resize(klen, 0);
                t.read(e + ENTRY_HDR, out)?;
                if out == key {
                    out.resize(vlen, 0);
                    t.read(e + ENTRY_HDR + klen as u64, out)?;
                    return Ok(true);
                }
            }
            e = t.read_u64(e + E_NEXT)?;
        }
        out.clear();
        Ok(false)
    }

    /// Bytes the batch `ops` takes in the log's inputs (what a clobber
    /// transaction logs; it must fit the pool's log area).
    pub fn encoded_len(ops: &[(&[u8], Option<&[u8]>)]) -> usize {
        ops.iter()
            .map(|(k, v)| 5 + k.len() + v.map_or(0, |v| 4 + v.len()))
            .sum()
    }

    /// Applies puts (`Some`) and deletes (`None`) as one transaction, later
    /// ones on a key winning; returns how many of the batch's distinct
    /// keys were present before. Keys are 1..=[`MAX_KEY`] bytes. Sub-maps
    /// the puts would take past two entries per bucket are doubled first,
    /// each in its own transaction.
    pub fn apply(&self, th: &mut TxThread<'_>, ops: &[(&[u8], Option<&[u8]>)]) -> Result<u64> {
        let mut buf = Vec::with_capacity(Self::encoded_len(ops));
        for (k, v) in ops {
            encode_op(&mut buf, k, *v);
        }
        let subs = self.subs_of(ops)?;
        // Strict 2PL: every lock in ascending order, held to the end.
        let _guards: Vec<_> = subs.iter().map(|&(s, _)| self.locks[s].write()).collect();
        for &(s, puts) in &subs {
            self.grow(th, s as u64, puts)?;
        }
        th.run(&APPLY, &pack_args(&[self.header]), &[&buf])
    }

    /// Doubles, now, the sub-maps that the puts of `ops` would take past
    /// two entries per bucket ([`apply`](Self::apply) does it too): after
    /// it, applying `ops` runs exactly one transaction.
    pub fn reserve(&self, th: &mut TxThread<'_>, ops: &[(&[u8], Option<&[u8]>)]) -> Result<()> {
        for (s, puts) in self.subs_of(ops)? {
            let _g = self.locks[s].write();
            self.grow(th, s as u64, puts)?;
        }
        Ok(())
    }

    /// The sub-maps `ops` touch, ascending, each with its number of puts
    /// (an upper bound on its growth); refuses bad keys and values.
    fn subs_of(&self, ops: &[(&[u8], Option<&[u8]>)]) -> Result<Vec<(usize, u64)>> {
        let mut subs: Vec<(usize, u64)> = Vec::with_capacity(ops.len());
        for (k, v) in ops {
            if k.is_empty() || k.len() > MAX_KEY {
                return Err(TxError::BadOption(format!(
                    "byte map key of {} bytes (1 to {MAX_KEY})",
                    k.len()
                )));
            }
            if v.is_some_and(|v| u32::try_from(v.len()).is_err()) {
                return Err(TxError::BadOption("byte map value over 4 GiB".into()));
            }
            subs.push((self.sub_index(k), u64::from(v.is_some())));
        }
        subs.sort_unstable();
        let mut out: Vec<(usize, u64)> = Vec::new();
        for (s, p) in subs {
            match out.last_mut() {
                Some((l, n)) if *l == s => *n += p,
                _ => out.push((s, p)),
            }
        }
        Ok(out)
    }

    /// Doubles sub-map `s` (held write-locked) until `puts` more entries
    /// keep it at most two per bucket.
    fn grow(&self, th: &mut TxThread<'_>, s: u64, puts: u64) -> Result<()> {
        let t = self.txp;
        let sub = t.read_u64(self.header + HDR + 8 * s)?;
        loop {
            let (count, nb) = (t.read_u64(sub)?, t.read_u64(sub + 8)?);
            if count + puts <= 2 * nb {
                return Ok(());
            }
            th.run(&REHASH, &pack_args(&[self.header, s]), &[])?;
            if t.read_u64(sub + 8)? == nb {
                // The table could not grow (count alone is within bounds).
                return Ok(());
            }
        }
    }

    /// Inserts or replaces; true when the key was new.
    pub fn put(&self, th: &mut TxThread<'_>, key: &[u8], value: &[u8]) -> Result<bool> {
        Ok(self.apply(th, &[(key, Some(value))])? == 0)
    }

    /// Removes; true when the key was there.
    pub fn remove(&self, th: &mut TxThread<'_>, key: &[u8]) -> Result<bool> {
        Ok(self.apply(th, &[(key, None)])? == 1)
    }

    /// Calls `f` on every pair whose key starts with `prefix`, sub-map by
    /// sub-map (each read-locked while its pairs are collected, not while
    /// `f` runs).
    pub fn scan_prefix(&self, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        let t = self.txp;
        let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for s in 0..self.subs {
            pairs.clear();
            {
                let _g = self.locks[s as usize].read();
                let sub = t.read_u64(self.header + HDR + 8 * s)?;
                let (nb, table) = (t.read_u64(sub + 8)?, t.read_u64(sub + 16)?);
                for b in 0..nb {
                    let mut e = t.read_u64(table + 8 * b)?;
                    while e != 0 {
                        let (klen, vlen) = self.lens(e)?;
                        if klen >= prefix.len() {
                            let mut k = vec![0u8; klen];
                            t.read(e + ENTRY_HDR, &mut k)?;
                            if k.starts_with(prefix) {
                                let mut v = vec![0u8; vlen];
                                t.read(e + ENTRY_HDR + klen as u64, &mut v)?;
                                pairs.push((k, v));
                            }
                        }
                        e = t.read_u64(e + E_NEXT)?;
                    }
                }
            }
            for (k, v) in &pairs {
                f(k, v);
            }
        }
        Ok(())
    }

    /// Walks the whole map (no locks: call it when no batch runs) checking
    /// every invariant; returns its contents and blocks, or what is wrong.
    pub fn shape(&self) -> std::result::Result<ByteShape, String> {
        let t = self.txp;
        let rd = |off: u64| t.read_u64(off).map_err(|e| e.to_string());
        let mut shape = ByteShape::default();
        let entries = &mut shape.entries;
        walk_tables(
            t,
            self.header,
            self.subs,
            &mut shape.blocks,
            |e, s, b, nb, blocks| {
                let lens = rd(e + E_LENS)?;
                let (klen, vlen) = (u64::from(lens as u32), lens >> 32);
                if klen == 0 || klen > MAX_KEY as u64 {
                    return Err(format!("entry {e:#x}: key of {klen} bytes"));
                }
                need(t, blocks, e, ENTRY_HDR + klen + vlen)?;
                let mut k = vec![0u8; klen as usize];
                t.read(e + ENTRY_HDR, &mut k).map_err(|e| e.to_string())?;
                let h = rd(e)?;
                if h != hash_bytes(&k) {
                    return Err(format!("entry {e:#x}: hash does not match its key"));
                }
                if slot_of(h, self.subs, nb) != (s, b) {
                    return Err(format!(
                        "entry {e:#x} in sub-map {s} bucket {b}: wrong bucket"
                    ));
                }
                let mut v = vec![0u8; vlen as usize];
                t.read(e + ENTRY_HDR + klen, &mut v)
                    .map_err(|e| e.to_string())?;
                if entries.insert(k, v).is_some() {
                    return Err(format!("entry {e:#x}: key twice"));
                }
                Ok(())
            },
        )?;
        Ok(shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_alloc::PAllocator;
    use ferrite_pmem::{Domain, Pool, PoolOptions};
    use ferrite_tx::{Registry, Strategy, TxOptions};

    fn registry() -> Registry {
        Registry::new().with(&FUNCS).unwrap()
    }

    #[test]
    fn batches_match_a_model_under_every_strategy_and_after_reopening() {
        for strategy in [Strategy::Undo, Strategy::Redo, Strategy::Clobber] {
            let pool =
                Pool::create_in_memory(&PoolOptions::new("bytemap", 16 << 20).domain(Domain::Adr))
                    .unwrap();
            let txp =
                TxPool::create(&pool, &TxOptions::new(strategy).slots(2), registry()).unwrap();
            let mut th = txp.thread().unwrap();
            // Two sub-maps of two buckets: long chains and many doublings.
            let map = ByteMap::create(&mut th, 2, 2).unwrap();
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            let mut x: u64 = 0x2545_f491_4f6c_dd1d;
            let mut out = Vec::new();
            for step in 0..1500u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let key = |y: u64| format!("key-{}", y % 97).into_bytes();
                let n = 1 + (x % 4) as usize;
                let mut ops: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
                for i in 0..n as u64 {
                    let y = x.rotate_left(9 * i as u32);
                    let v = (!y.is_multiple_of(5))
                        .then(|| vec![(step + i) as u8; (y >> 20) as usize % 300]);
                    ops.push((key(y >> 3), v));
                }
                let refs: Vec<(&[u8], Option<&[u8]>)> = ops
                    .iter()
                    .map(|(k, v)| (k.as_slice(), v.as_deref()))
                    .collect();
                let distinct: std::collections::BTreeSet<&[u8]> =
                    ops.iter().map(|(k, _)| k.as_slice()).collect();
                let present = distinct.iter().filter(|k| model.contains_key(**k)).count();
                assert_eq!(map.apply(&mut th, &refs).unwrap(), present as u64);
                for (k, v) in ops {
                    match v {
                        Some(v) => model.insert(k, v),
                        None => model.remove(&k),
                    };
                }
                let k = key(x >> 11);
                assert_eq!(
                    map.get_into(&k, &mut out).unwrap().then_some(&out),
                    model.get(&k),
                    "{strategy} step {step}"
                );
            }
            let shape = map.shape().unwrap();
            assert_eq!(shape.entries, model, "{strategy}");
            // A clobber transaction's frees reach the allocator at its
            // thread's next fence point.
            th.quiesce();
            let mut allocated = BTreeMap::new();
            txp.heap().for_each_allocated(&mut |off, n| {
                allocated.insert(off.raw(), n);
            });
            let referenced: std::collections::BTreeSet<u64> =
                shape.blocks.iter().map(|b| b.0).collect();
            assert_eq!(
                allocated
                    .keys()
                    .copied()
                    .collect::<std::collections::BTreeSet<_>>(),
                referenced,
                "{strategy}: leaked or shared blocks"
            );
            let mut seen = BTreeMap::new();
            map.scan_prefix(b"key-1", &mut |k, v| {
                seen.insert(k.to_vec(), v.to_vec());
            })
            .unwrap();
            let want: BTreeMap<_, _> = model
                .iter()
                .filter(|(k, _)| k.starts_with(b"key-1"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(seen, want);
            let header = map.header();
            drop(th);
            drop(txp);
            let txp = TxPool::open(&pool, registry(), None).unwrap();
            let map = ByteMap::open(&txp, header).unwrap();
            assert_eq!(map.shape().unwrap().entries, model, "{strategy} reopened");
        }
    }

    #[test]
    fn bad_keys_and_corrupt_batches_are_refused_with_nothing_written() {
        let pool =
            Pool::create_in_memory(&PoolOptions::new("bytemap", 8 << 20).domain(Domain::Adr))
                .unwrap();
        let txp = TxPool::create(
            &pool,
            &TxOptions::new(Strategy::Clobber).slots(2),
            registry(),
        )
        .unwrap();
        let mut th = txp.thread().unwrap();
        let map = ByteMap::create(&mut th, 4, 4).unwrap();
        map.put(&mut th, b"a", b"1").unwrap();
        assert!(matches!(
            map.apply(&mut th, &[(b"", Some(b"x"))]),
            Err(TxError::BadOption(_))
        ));
        let long = vec![7u8; MAX_KEY + 1];
        assert!(map.put(&mut th, &long, b"x").is_err());
        // A corrupt buffer handed to the function itself fails before any
        // write (a clobber function failing later would poison the pool).
        let mut buf = Vec::new();
        encode_op(&mut buf, b"b", Some(b"2"));
        buf.push(9);
        assert!(matches!(
            th.run(&APPLY, &pack_args(&[map.header()]), &[&buf]),
            Err(TxError::Corrupt(_))
        ));
        buf.truncate(buf.len() - 3);
        assert!(
            th.run(&APPLY, &pack_args(&[map.header()]), &[&buf])
                .is_err()
        );
        let mut out = Vec::new();
        assert!(map.get_into(b"a", &mut out).unwrap());
        assert_eq!(out, b"1");
        assert!(!map.get_into(b"b", &mut out).unwrap());
        assert_eq!(map.shape().unwrap().entries.len(), 1);

        // An entry whose value length could not fit the pool is refused as
        // corrupt by lookups and scans, before anything is allocated.
        let h = hash_bytes(b"a");
        let sub = txp
            .read_u64(map.header() + HDR + 8 * slot_of(h, 4, 1).0)
            .unwrap();
        let (nb, table) = (
            txp.read_u64(sub + 8).unwrap(),
            txp.read_u64(sub + 16).unwrap(),
        );
        let e = txp.read_u64(table + 8 * slot_of(h, 4, nb).1).unwrap();
        let header = map.header();
        drop(th);
        drop(map);
        drop(txp);
        let mut img = pool.image();
        let at = (e + E_LENS) as usize;
        img[at..at + 8].copy_from_slice(&(1u64 | (u64::from(u32::MAX) << 32)).to_le_bytes());
        let bad = Pool::open_image(
            &img,
            &PoolOptions::new("bytemap", 0),
            Domain::Volatile,
            None,
        )
        .unwrap();
        let txp = TxPool::open(&bad, registry(), None).unwrap();
        let map = ByteMap::open(&txp, header).unwrap();
        assert!(matches!(
            map.get_into(b"a", &mut out),
            Err(TxError::Corrupt(_))
        ));
        assert!(matches!(
            map.scan_prefix(b"", &mut |_, _| {}),
            Err(TxError::Corrupt(_))
        ));
        assert!(map.shape().is_err());
    }
}
