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
//! The header, sub-map headers and link words are the hash map's (see
//! [`crate::hashmap`]: version [`VERSION`] = 3, every link checked, every
//! checksum keyed by the header's `nonce`) with magic `FERRBMAP` and
//! value_len 0. An entry is one block of `32 + K + V` bytes:
//!
//! | bytes        | field                                                  |
//! |--------------|--------------------------------------------------------|
//! | 0..8         | `hash`: [`hash_bytes`] of the key                      |
//! | 8..16        | `next`: link word to the bucket's next entry           |
//! | 16..20       | `K`: key length, u32 (1..=[`MAX_KEY`])                 |
//! | 20..24       | `V`: value length, u32                                 |
//! | 24..28       | header check: CRC32C of bytes 0..8 then 16..24, keyed by `nonce` ([`head_crc`]) |
//! | 28..32       | record check: CRC32C of bytes 0..8, 16..24, the key and the value, keyed by `nonce` ([`record_crc`]) |
//! | 32..32+K     | key bytes                                              |
//! | 32+K..32+K+V | value bytes                                            |
//!
//! Both checks are written with the entry (entries are never written in
//! place: see Writes) and never change; relinking writes only `next`,
//! which the link's own check covers. A lookup verifies the header check
//! of every entry it passes (a damaged hash or length could otherwise
//! make a present key look absent), the record check of an entry whose
//! hash and length match (of the one it returns, and of one whose key
//! bytes then differ: a damaged key), and every link;
//! a failure is [`TxError::Corrupt`] naming the key looked up. A scan
//! verifies every entry it reads. [`ByteMap::shape`] lists every damaged
//! entry in [`ByteShape::damaged`].
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
//! Every link's check and every sub-map header's checksum hold; every
//! entry reachable from bucket `b` of sub-map `s` has a hash that
//! selects `s` and `b`, and `hash` is the hash of its key; keys are unique;
//! `count` is the number of reachable entries; chains end; every
//! referenced block is allocated and large enough for its lengths.

use crate::hashmap::{
    H_NONCE, H_SUBS, H_VALUE_LEN, HDR, create_tables, dec_link, enc_link, link_at, need, rehash,
    seed, slot_of, sub_at, tx_header, tx_link, tx_sub, walk_tables,
};
use crate::le;
use ferrite_pmem::POff;
use ferrite_tx::{Inputs, Result, Tx, TxError, TxFunc, TxPool, TxThread, pack_args};
use parking_lot::RwLock;
use std::collections::BTreeMap;

/// The header's magic.
pub const MAGIC: [u8; 8] = *b"FERRBMAP";
/// This build's header version: 3, the first with record checksums (the
/// hash map's frame).
pub const VERSION: u16 = 3;
/// Longest key.
pub const MAX_KEY: usize = 4096;
/// Bytes of an entry before its key.
pub const ENTRY_HDR: u64 = 32;
const E_NEXT: u64 = 8;
const E_LENS: u64 = 16;
const E_HCRC: usize = 24;
const E_RCRC: usize = 28;
/// The header's framing (no word of it changes in place).
const HEADER: crate::Header = crate::Header {
    magic: MAGIC,
    name: "bytemap",
    mutable: 60..60,
    version: VERSION,
};
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

/// The byte map's transaction functions (register them to open one).
pub static FUNCS: [&TxFunc; 3] = [&CREATE, &APPLY, &REHASH];

/// An entry's header check (bytes 24..28): `hash` (bytes 0..8) then the
/// lengths (bytes 16..24), keyed by `nonce`.
pub fn head_crc(nonce: u64, hd: &[u8]) -> u32 {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&hd[0..8]);
    b[8..].copy_from_slice(&hd[16..24]);
    crc32c::crc32c_append(seed(nonce), &b)
}

/// An entry's record check (bytes 28..32): its header check's input, then
/// the key, then the value.
pub fn record_crc(nonce: u64, hd: &[u8], key: &[u8], value: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c_append(head_crc(nonce, hd), key), value)
}

/// The u32 at byte `i` of `b`.
fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}

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
    let h = create_tables(tx, &HEADER, inp.arg_u64(0), inp.arg_u64(1), 0)?;
    tx.set_root(h.raw())?;
    Ok(h.raw())
}

/// Sub-map header offset, count, buckets and table of hash `h`.
fn sub_of(
    tx: &mut Tx<'_, '_>,
    header: u64,
    subs: u64,
    nonce: u64,
    h: u64,
) -> Result<(u64, u64, u64, u64)> {
    let sub = tx_link(
        tx,
        nonce,
        header + HDR + 8 * slot_of(h, subs, 1).0,
        "bytemap",
    )?;
    let (count, nb, table) = tx_sub(tx, nonce, sub)?;
    Ok((sub, count, nb, table))
}

/// What a scan does with a record whose record check fails: called with
/// the key as stored, the entry's offset and what failed.
type OnDamaged<'a> = dyn FnMut(&[u8], u64, &str) -> Result<()> + 'a;

/// The error for a damaged entry met while looking `key` up.
fn damaged(key: &[u8], e: u64, what: &str) -> TxError {
    TxError::Corrupt(format!(
        "bytemap record key {}: entry at {e:#x} {what}",
        String::from_utf8_lossy(key)
    ))
}

/// Where a key is in its chain.
struct Found {
    /// The word pointing at the entry (a bucket or the previous `next`).
    link: u64,
    entry: u64,
    /// The entry's `next` link word, as stored.
    next: u64,
}

/// Walks the chain starting at bucket word `bucket` for `key` (hash `h`),
/// verifying what it passes as [`ByteMap::get_into`] does.
fn find(tx: &mut Tx<'_, '_>, nonce: u64, bucket: u64, h: u64, key: &[u8]) -> Result<Option<Found>> {
    let mut link = bucket;
    let mut e = tx_link(tx, nonce, link, "bytemap")?;
    let mut kbuf = Vec::new();
    while e != 0 {
        let mut hd = [0u8; ENTRY_HDR as usize];
        tx.read(p64(e), &mut hd)?;
        if u32_at(&hd, E_HCRC) != head_crc(nonce, &hd) {
            return Err(damaged(key, e, "damaged (header checksum)"));
        }
        let next = le(&hd, E_NEXT as usize);
        dec_link(nonce, next, e + E_NEXT, "bytemap")?;
        if le(&hd, 0) == h && u32_at(&hd, E_LENS as usize) as usize == key.len() {
            kbuf.resize(key.len(), 0);
            tx.read(POff::<u8>::new(e + ENTRY_HDR), &mut kbuf)?;
            if kbuf == key {
                return Ok(Some(Found {
                    link,
                    entry: e,
                    next,
                }));
            }
            // Same hash and length, other bytes: a collision, or this
            // key's entry with a damaged key byte.
            let vlen = u32_at(&hd, E_LENS as usize + 4) as usize;
            let mut v = vec![0u8; vlen];
            tx.read(POff::<u8>::new(e + ENTRY_HDR + key.len() as u64), &mut v)?;
            if u32_at(&hd, E_RCRC) != record_crc(nonce, &hd, &kbuf, &v) {
                return Err(damaged(key, e, "damaged (record checksum)"));
            }
        }
        link = e + E_NEXT;
        e = dec_link(nonce, next, e + E_NEXT, "bytemap")?;
    }
    Ok(None)
}

fn tx_apply(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let header = inp.arg_u64(0);
    let ops = decode_ops(inp.buf(0))?;
    let (subs, nonce) = tx_header(tx, header)?;
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
            let (hcrc, rcrc) = (head_crc(nonce, &hd), record_crc(nonce, &hd, op.key, v));
            hd[E_HCRC..E_HCRC + 4].copy_from_slice(&hcrc.to_le_bytes());
            hd[E_RCRC..E_RCRC + 4].copy_from_slice(&rcrc.to_le_bytes());
            // `next` is written in phase 2, with its check.
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
        let (sub, count, nb, table) = sub_of(tx, header, subs, nonce, h)?;
        let bucket = table + 8 * slot_of(h, subs, nb).1;
        let found = find(tx, nonce, bucket, h, op.key)?;
        present += u64::from(found.is_some());
        match (op.value, found) {
            (Some(_), found) => {
                let n = fresh.next().expect("one fresh entry per put");
                match found {
                    Some(f) => {
                        tx.write_u64(p64(n + E_NEXT), f.next)?;
                        tx.write_u64(p64(f.link), enc_link(nonce, n))?;
                        tx.free(POff::new(f.entry))?;
                    }
                    None => {
                        // The bucket's word, as stored (find checked it).
                        let head = tx.read_u64(p64(bucket))?;
                        tx.write_u64(p64(n + E_NEXT), head)?;
                        tx.write_u64(p64(bucket), enc_link(nonce, n))?;
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
    let (subs, nonce) = tx_header(tx, header)?;
    if s >= subs {
        return Err(TxError::Corrupt(format!("byte map: sub-map {s} of {subs}")));
    }
    let sub = tx_link(tx, nonce, header + HDR + 8 * s, "bytemap")?;
    let (count, nb, table) = tx_sub(tx, nonce, sub)?;
    if count <= 2 * nb {
        return Ok(0);
    }
    rehash(tx, nonce, sub, nb, table)?;
    Ok(1)
}

/// What a byte map holds, read back by walking it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ByteShape {
    /// Key → value, of every entry whose checks hold.
    pub entries: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Every block the map references: (pool offset, bytes it needs).
    pub blocks: Vec<(u64, u64)>,
    /// Entries whose header or record check fails, not in `entries`:
    /// (entry offset, the key as stored — unreliable when its lengths
    /// are what is damaged, empty when they cannot be trusted at all —,
    /// what).
    pub damaged: Vec<(u64, Vec<u8>, String)>,
}

/// The volatile handle on a byte map: its sub-maps' locks. One per pool,
/// shared by every thread (each with its own [`TxThread`]).
pub struct ByteMap<'p> {
    txp: &'p TxPool,
    header: u64,
    subs: u64,
    nonce: u64,
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

    /// Opens the map whose header is at `header`: its frame (magic,
    /// checksum, version) is verified; an unversioned (version-1) header
    /// is refused with [`TxError::HeaderVersion`].
    pub fn open(txp: &'p TxPool, header: u64) -> Result<ByteMap<'p>> {
        let h = HEADER.read(txp, header)?;
        let subs = le(&h, H_SUBS);
        if !subs.is_power_of_two() || subs > 256 || le(&h, H_VALUE_LEN) != 0 {
            return Err(TxError::Corrupt(format!("byte map header at {header:#x}")));
        }
        Ok(ByteMap {
            txp,
            header,
            subs,
            nonce: le(&h, H_NONCE),
            locks: (0..subs).map(|_| RwLock::new(())).collect(),
        })
    }

    /// Pool offset of the map's header block.
    pub fn header(&self) -> u64 {
        self.header
    }

    /// The transactional pool the map lives in.
    pub fn pool(&self) -> &'p TxPool {
        self.txp
    }

    fn sub_index(&self, key: &[u8]) -> usize {
        slot_of(hash_bytes(key), self.subs, 1).0 as usize
    }

    /// Entry `e`'s header (its check verified: `Corrupt` naming `key`,
    /// the key looked up) and its key and value lengths, refused as
    /// corrupt when they could not fit the pool (before anything is
    /// allocated for them).
    fn entry(&self, e: u64, key: &[u8]) -> Result<([u8; ENTRY_HDR as usize], usize, usize)> {
        let mut hd = [0u8; ENTRY_HDR as usize];
        self.txp.read(e, &mut hd)?;
        if u32_at(&hd, E_HCRC) != head_crc(self.nonce, &hd) {
            return Err(damaged(key, e, "damaged (header checksum)"));
        }
        let (klen, vlen) = (
            u64::from(u32_at(&hd, E_LENS as usize)),
            u64::from(u32_at(&hd, E_LENS as usize + 4)),
        );
        let (lo, hi) = self.txp.data_bounds();
        if klen == 0 || klen > MAX_KEY as u64 || klen + vlen > hi - lo {
            return Err(TxError::Corrupt(format!(
                "byte map entry {e:#x}: lengths {klen} and {vlen}"
            )));
        }
        Ok((hd, klen as usize, vlen as usize))
    }

    /// The offset in the link word at `at`.
    fn link(&self, at: u64) -> Result<u64> {
        link_at(self.txp, self.nonce, at, "bytemap")
    }

    /// Reads `key`'s value into `out` (cleared first); false when absent.
    /// Verifies every link it follows, the header check of every entry it
    /// passes and the record check of every entry whose hash and key
    /// length match (the one it returns included): a damaged one is
    /// [`TxError::Corrupt`] naming `key`, and `out` is left empty.
    pub fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        let r = self.find_into(key, out);
        if !matches!(r, Ok(true)) {
            out.clear();
        }
        r
    }

    fn find_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let _g = self.locks[self.sub_index(key)].read();
        let (t, nonce) = (self.txp, self.nonce);
        let h = hash_bytes(key);
        let sub = self.link(self.header + HDR + 8 * slot_of(h, self.subs, 1).0)?;
        let (_, nb, table) = sub_at(t, nonce, sub)?;
        let mut e = self.link(table + 8 * slot_of(h, self.subs, nb).1)?;
        while e != 0 {
            let (hd, klen, vlen) = self.entry(e, key)?;
            if le(&hd, 0) == h && klen == key.len() {
                // Key and value in one read, checked together.
                out.resize(klen + vlen, 0);
                t.read(e + ENTRY_HDR, out)?;
                let (k, v) = out.split_at(klen);
                if u32_at(&hd, E_RCRC) != record_crc(nonce, &hd, k, v) {
                    return Err(damaged(key, e, "damaged (record checksum)"));
                }
                if k == key {
                    out.drain(..klen);
                    return Ok(true);
                }
            }
            e = dec_link(nonce, le(&hd, E_NEXT as usize), e + E_NEXT, "bytemap")?;
        }
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
        let sub = self.link(self.header + HDR + 8 * s)?;
        loop {
            let (count, nb, _) = sub_at(t, self.nonce, sub)?;
            if count + puts <= 2 * nb {
                return Ok(());
            }
            th.run(&REHASH, &pack_args(&[self.header, s]), &[])?;
            if sub_at(t, self.nonce, sub)?.1 == nb {
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
    /// `f` runs). Every entry read is verified (links, both checks: a key
    /// byte damaged could otherwise move a pair out of the prefix
    /// silently); a damaged one is [`TxError::Corrupt`] naming the key as
    /// stored.
    pub fn scan_prefix(&self, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        self.scan_prefix_with(prefix, f, &mut |k, e, what| Err(damaged(k, e, what)))
    }

    /// [`scan_prefix`](Self::scan_prefix), going on past a record whose
    /// record check fails: `on_damaged` gets its key as stored and what
    /// failed, and the scan reads on (the record's header and links
    /// verified, so the chain is whole). A damaged header or link still
    /// ends the scan with [`TxError::Corrupt`]: the rest of its chain
    /// cannot be found. For the deep check of what the map holds.
    pub fn scan_prefix_past_damage(
        &self,
        prefix: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]),
        on_damaged: &mut dyn FnMut(&[u8], String),
    ) -> Result<()> {
        self.scan_prefix_with(prefix, f, &mut |k, e, what| {
            on_damaged(k, format!("entry at {e:#x} {what}"));
            Ok(())
        })
    }

    /// The scan; `on_damaged(key as stored, entry, what)` decides what a
    /// record whose record check fails does (its pair is not passed on).
    fn scan_prefix_with(
        &self,
        prefix: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]),
        on_damaged: &mut OnDamaged<'_>,
    ) -> Result<()> {
        let t = self.txp;
        let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for s in 0..self.subs {
            pairs.clear();
            {
                let _g = self.locks[s as usize].read();
                let sub = self.link(self.header + HDR + 8 * s)?;
                let (_, nb, table) = sub_at(t, self.nonce, sub)?;
                for b in 0..nb {
                    let mut e = self.link(table + 8 * b)?;
                    while e != 0 {
                        let (hd, klen, vlen) = self.entry(e, b"")?;
                        let mut k = vec![0u8; klen];
                        t.read(e + ENTRY_HDR, &mut k)?;
                        let mut v = vec![0u8; vlen];
                        t.read(e + ENTRY_HDR + klen as u64, &mut v)?;
                        if u32_at(&hd, E_RCRC) != record_crc(self.nonce, &hd, &k, &v) {
                            // Prefix or not: a damaged key byte may have
                            // moved it out of the prefix.
                            on_damaged(&k, e, "damaged (record checksum)")?;
                        } else if k.starts_with(prefix) {
                            pairs.push((k, v));
                        }
                        e = dec_link(self.nonce, le(&hd, E_NEXT as usize), e + E_NEXT, "bytemap")?;
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
        let (t, nonce) = (self.txp, self.nonce);
        let mut shape = ByteShape::default();
        let entries = &mut shape.entries;
        let damaged = &mut shape.damaged;
        walk_tables(
            t,
            self.header,
            self.subs,
            nonce,
            &mut shape.blocks,
            |e, s, b, nb, blocks| {
                let mut hd = [0u8; ENTRY_HDR as usize];
                t.read(e, &mut hd).map_err(|e| e.to_string())?;
                let (klen, vlen) = (
                    u64::from(u32_at(&hd, E_LENS as usize)),
                    u64::from(u32_at(&hd, E_LENS as usize + 4)),
                );
                let plausible = klen > 0 && klen <= MAX_KEY as u64;
                // The key as stored, when its length can be used.
                let key_of = |n: u64| -> Vec<u8> {
                    let mut k = vec![0u8; n as usize];
                    match t.read(e + ENTRY_HDR, &mut k) {
                        Ok(()) => k,
                        Err(_) => Vec::new(),
                    }
                };
                if u32_at(&hd, E_HCRC) != head_crc(nonce, &hd) {
                    // Its lengths cannot be trusted: the block is still
                    // referenced (at least its header).
                    need(t, blocks, e, ENTRY_HDR)?;
                    let k = if plausible { key_of(klen) } else { Vec::new() };
                    damaged.push((e, k, "header checksum mismatch".into()));
                    return Ok(());
                }
                if !plausible {
                    return Err(format!("entry {e:#x}: key of {klen} bytes"));
                }
                need(t, blocks, e, ENTRY_HDR + klen + vlen)?;
                let k = key_of(klen);
                let h = le(&hd, 0);
                let mut v = vec![0u8; vlen as usize];
                t.read(e + ENTRY_HDR + klen, &mut v)
                    .map_err(|e| e.to_string())?;
                if u32_at(&hd, E_RCRC) != record_crc(nonce, &hd, &k, &v) {
                    damaged.push((e, k, "checksum mismatch".into()));
                    return Ok(());
                }
                if h != hash_bytes(&k) {
                    return Err(format!("entry {e:#x}: hash does not match its key"));
                }
                if slot_of(h, self.subs, nb) != (s, b) {
                    return Err(format!(
                        "entry {e:#x} in sub-map {s} bucket {b}: wrong bucket"
                    ));
                }
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

    impl ByteMap<'_> {
        /// [`ByteMap::get_into`] without any check (links masked, no
        /// header or record check): what a lookup cost before the
        /// checksums, to measure their cost in the same run.
        fn get_unverified(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
            out.clear();
            let _g = self.locks[self.sub_index(key)].read();
            let t = self.txp;
            let off = |w: u64| w & ((1 << 48) - 1);
            let h = hash_bytes(key);
            let sub = off(t.read_u64(self.header + HDR + 8 * slot_of(h, self.subs, 1).0)?);
            let (nb, table) = (t.read_u64(sub + 8)?, t.read_u64(sub + 16)?);
            let mut e = off(t.read_u64(table + 8 * slot_of(h, self.subs, nb).1)?);
            while e != 0 {
                let lens = t.read_u64(e + E_LENS)?;
                let (klen, vlen) = ((lens as u32) as usize, (lens >> 32) as usize);
                if t.read_u64(e)? == h && klen == key.len() {
                    out.resize(klen, 0);
                    t.read(e + ENTRY_HDR, out)?;
                    if out == key {
                        out.resize(vlen, 0);
                        t.read(e + ENTRY_HDR + klen as u64, out)?;
                        return Ok(true);
                    }
                }
                e = off(t.read_u64(e + E_NEXT)?);
            }
            Ok(false)
        }
    }

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    }

    /// The cost of verification on byte map point reads (same run:
    /// `get_into` against the unverified walk, interleaved rounds,
    /// medians of 7; 16-byte keys, 256-byte values) and the share of a
    /// put spent computing its checks. Run with `cargo test --release -p
    /// ferrite-ds --lib verification_cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement: run it in --release"]
    fn verification_cost() {
        const N: usize = 50_000;
        let pool = Pool::create_in_memory(&PoolOptions::new("cost", 256 << 20).domain(Domain::Adr))
            .unwrap();
        let txp =
            TxPool::create(&pool, &TxOptions::new(Strategy::Undo).slots(2), registry()).unwrap();
        let mut th = txp.thread().unwrap();
        let map = ByteMap::create(&mut th, 256, 16).unwrap();
        let v = vec![7u8; 256];
        let keys: Vec<Vec<u8>> = (0..N)
            .map(|i| format!("key-{i:012}").into_bytes())
            .collect();
        let mut puts = Vec::new();
        for chunk in keys.chunks(N / 7) {
            let t = std::time::Instant::now();
            for k in chunk {
                map.put(&mut th, k, &v).unwrap();
            }
            puts.push(t.elapsed().as_nanos() as f64 / chunk.len() as f64);
        }
        let (mut with, mut without, mut out) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..7 {
            let t = std::time::Instant::now();
            for k in &keys {
                assert!(map.get_into(k, &mut out).unwrap());
            }
            with.push(t.elapsed().as_nanos() as f64 / N as f64);
            let t = std::time::Instant::now();
            for k in &keys {
                assert!(map.get_unverified(k, &mut out).unwrap());
            }
            without.push(t.elapsed().as_nanos() as f64 / N as f64);
        }
        // A put's checks: the header and record checks of its fresh
        // entry, and the links and sub-map header it verifies and writes.
        let mut work = Vec::new();
        let hd = [1u8; ENTRY_HDR as usize];
        for _ in 0..7 {
            let t = std::time::Instant::now();
            for (i, k) in keys.iter().enumerate() {
                let i = i as u64;
                std::hint::black_box(head_crc(map.nonce, &hd));
                std::hint::black_box(record_crc(map.nonce, &hd, k, &v));
                std::hint::black_box(crate::hashmap::sub_crc(seed(map.nonce), 16, i));
                std::hint::black_box(enc_link(map.nonce, i));
                std::hint::black_box(enc_link(map.nonce, i + 1));
                std::hint::black_box(crate::hashmap::link_check(map.nonce, i + 2));
            }
            work.push(t.elapsed().as_nanos() as f64 / N as f64);
        }
        let (w, wo, p, c) = (median(with), median(without), median(puts), median(work));
        println!(
            "bytemap get: {w:.1} ns verified, {wo:.1} ns unverified: +{:.1} %",
            100.0 * (w - wo) / wo
        );
        println!(
            "bytemap put (undo): {p:.1} ns, of which checksum work {c:.1} ns: {:.1} %",
            100.0 * c / p
        );
    }
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

    /// A version-1 header (no version, no checksum, no record checksums:
    /// magic, subs, buckets, value_len 0, then the sub-map pointers) is
    /// refused with a typed error, not read as version 3.
    #[test]
    fn an_old_header_is_refused() {
        let pool =
            Pool::create_in_memory(&PoolOptions::new("bytemap", 8 << 20).domain(Domain::Adr))
                .unwrap();
        let txp = TxPool::create(&pool, &TxOptions::new(Strategy::Undo), registry()).unwrap();
        let mut th = txp.thread().unwrap();
        let map = ByteMap::create(&mut th, 4, 4).unwrap();
        let header = map.header();
        drop(map);
        let whole = ferrite_pmem::Region::whole(pool.medium().clone());
        let good = whole.read_vec(header as usize, 64);
        assert_eq!(u16::from_le_bytes([good[8], good[9]]), VERSION);
        let mut v1 = vec![0u8; 64];
        v1[..8].copy_from_slice(&MAGIC);
        v1[8..16].copy_from_slice(&4u64.to_le_bytes());
        v1[16..24].copy_from_slice(&4u64.to_le_bytes());
        whole.write(header as usize, &v1);
        let e = ByteMap::open(&txp, header).err().expect("refused");
        assert!(
            matches!(
                e,
                TxError::HeaderVersion {
                    found: 1,
                    supported: VERSION,
                    ..
                }
            ),
            "{e}"
        );
        let mut flipped = good.clone();
        flipped[17] ^= 1;
        whole.write(header as usize, &flipped);
        assert!(matches!(
            ByteMap::open(&txp, header),
            Err(TxError::HeaderChecksum { .. })
        ));
        whole.write(header as usize, &good);
        ByteMap::open(&txp, header).unwrap();
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
        // corrupt by lookups and scans, before anything is allocated —
        // even with its header check resealed over the bad lengths (what
        // a checksum cannot catch: a bug that wrote them).
        let h = hash_bytes(b"a");
        let nonce = map.nonce;
        let sub = map
            .link(map.header() + HDR + 8 * slot_of(h, 4, 1).0)
            .unwrap();
        let (_, nb, table) = sub_at(&txp, nonce, sub).unwrap();
        let e = map.link(table + 8 * slot_of(h, 4, nb).1).unwrap();
        let header = map.header();
        drop(th);
        drop(map);
        drop(txp);
        let mut img = pool.image();
        let at = (e + E_LENS) as usize;
        img[at..at + 8].copy_from_slice(&(1u64 | (u64::from(u32::MAX) << 32)).to_le_bytes());
        let hcrc = head_crc(nonce, &img[e as usize..(e + ENTRY_HDR) as usize]);
        let at = e as usize + E_HCRC;
        img[at..at + 4].copy_from_slice(&hcrc.to_le_bytes());
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
