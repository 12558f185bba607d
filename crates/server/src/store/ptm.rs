//! [`Kv`] over `ferrite-ptm` (orec-lazy or orec-eager transactions): each
//! `put`/`delete` is one PTM transaction, durable when `atomic` returns.
//!
//! # Layout on the PTM heap
//!
//! The PTM's root word holds the header offset of a
//! [`ferrite_ptm::ds::hash::PHashMap`] (u64 → u64) created on
//! first use. Its key is a 64-bit hash of the byte key ([`key_hash`]), its
//! value the offset of the first *entry* whose key has that hash; entries
//! with the same hash are chained. Entry block (little-endian words):
//!
//! ```text
//!  0  8  next: offset of the next entry with the same hash (0 = end)
//!  8  4  key length K (u32)
//! 12  4  value length V (u32)
//! 16  K  key bytes, zero-padded to a multiple of 8
//! ..  V  value bytes
//! ```
//!
//! Invariants: every entry is reachable from exactly one map slot, the one
//! of its key's hash; byte keys are unique. A put allocates a new entry,
//! links it where the old one was (or at the chain head) and frees the old
//! one, all in one transaction, so a crash shows the old value or the new
//! one. Entries are written only while fresh (inside the allocating
//! transaction), which the PTM does not log, so a 1 MiB value does not
//! need a 1 MiB log.

use super::{Kv, KvReader, Result, StoreError};
use ferrite_pmem::POff;
use ferrite_ptm::ds::hash::PHashMap;
use ferrite_ptm::{Ptm, PtmError, PtmThread, Tx, TxResult};

/// Buckets of the hash map created on a fresh PTM.
pub const BUCKETS: u64 = 1 << 16;

const E_NEXT: u64 = 0;
const E_LENS: u64 = 8;
const E_KEY: u64 = 16;

/// 64-bit FNV-1a of the key, then a finaliser (the map mixes it again):
/// the byte map's hash, part of both formats.
pub use ferrite_ds::bytemap::hash_bytes as key_hash;

fn err(e: PtmError) -> StoreError {
    match e {
        PtmError::Alloc(_) => StoreError::Full,
        e => StoreError::Backend(e.to_string()),
    }
}

fn pad8(n: usize) -> u64 {
    (n as u64).next_multiple_of(8)
}

/// The map of the PTM in `ptm`, created (and linked from the root word) if
/// the root is empty.
pub fn open_map(ptm: &Ptm) -> Result<PHashMap> {
    let mut th = ptm.thread().map_err(err)?;
    let root = ptm.root();
    let hdr = th.atomic(|tx| tx.get(root)).map_err(err)?;
    if hdr != 0 {
        return th.atomic(|tx| PHashMap::open(tx, hdr)).map_err(err);
    }
    // Creation takes several transactions; a crash before the root is set
    // leaves unreachable blocks, never a half-linked map.
    let map = PHashMap::create(&mut th, BUCKETS).map_err(err)?;
    th.atomic(|tx| tx.set(root, map.header())).map_err(err)?;
    Ok(map)
}

/// One thread's handle.
pub struct PtmKv<'p> {
    th: PtmThread<'p>,
    map: PHashMap,
    kbuf: Vec<u8>,
    /// [`key_hash`]; the tests use a degenerate one to force chains.
    hash: fn(&[u8]) -> u64,
}

/// Where a key's entry is: (link word pointing at it, or 0 when the map
/// slot does; the entry; the entry's value offset and length).
struct Found {
    link: u64,
    entry: u64,
    value_at: u64,
    value_len: usize,
}

impl<'p> PtmKv<'p> {
    /// A map on the PTM's hash map `map` (opens this thread's PTM handle).
    pub fn new(ptm: &'p Ptm, map: PHashMap) -> Result<Self> {
        Ok(PtmKv {
            th: ptm.thread().map_err(err)?,
            map,
            kbuf: Vec::new(),
            hash: key_hash,
        })
    }
}

/// Walk the chain of `h` for `key`.
fn find(
    tx: &mut Tx<'_>,
    map: &PHashMap,
    h: u64,
    key: &[u8],
    kbuf: &mut Vec<u8>,
) -> TxResult<Option<Found>> {
    let Some(mut e) = map.get(tx, h)? else {
        return Ok(None);
    };
    let mut link = 0;
    while e != 0 {
        let lens = tx.load(e + E_LENS)?;
        let klen = (lens & 0xffff_ffff) as usize;
        let vlen = (lens >> 32) as usize;
        if klen == key.len() {
            kbuf.clear();
            kbuf.resize(klen, 0);
            tx.read_bytes(e + E_KEY, kbuf)?;
            if kbuf == key {
                return Ok(Some(Found {
                    link,
                    entry: e,
                    value_at: e + E_KEY + pad8(klen),
                    value_len: vlen,
                }));
            }
        }
        link = e + E_NEXT;
        e = tx.load(e + E_NEXT)?;
    }
    Ok(None)
}

/// Write `key` = `value` (module docs: a fresh entry replaces the old).
#[allow(clippy::too_many_arguments)]
fn tx_put(
    tx: &mut Tx<'_>,
    map: &PHashMap,
    h: u64,
    key: &[u8],
    value: &[u8],
    klen: u32,
    vlen: u32,
    kbuf: &mut Vec<u8>,
) -> TxResult<()> {
    let bytes = E_KEY + pad8(key.len()) + pad8(value.len());
    let e = tx.alloc(bytes as usize)?.raw();
    tx.store(e + E_LENS, u64::from(klen) | (u64::from(vlen) << 32))?;
    // Zero the padding so the block holds no stale bytes.
    let mut kpad = key.to_vec();
    kpad.resize(pad8(key.len()) as usize, 0);
    tx.write_bytes(e + E_KEY, &kpad)?;
    let mut vpad = value.to_vec();
    vpad.resize(pad8(value.len()) as usize, 0);
    tx.write_bytes(e + E_KEY + pad8(key.len()), &vpad)?;
    match find(tx, map, h, key, kbuf)? {
        Some(f) => {
            let next = tx.load(f.entry + E_NEXT)?;
            tx.store(e + E_NEXT, next)?;
            if f.link == 0 {
                map.insert(tx, h, e)?;
            } else {
                tx.store(f.link, e)?;
            }
            tx.free(POff::new(f.entry))?;
        }
        None => {
            let head = map.get(tx, h)?.unwrap_or(0);
            tx.store(e + E_NEXT, head)?;
            map.insert(tx, h, e)?;
        }
    }
    Ok(())
}

/// Remove `key`; false when absent.
fn tx_delete(
    tx: &mut Tx<'_>,
    map: &PHashMap,
    h: u64,
    key: &[u8],
    kbuf: &mut Vec<u8>,
) -> TxResult<bool> {
    let Some(f) = find(tx, map, h, key, kbuf)? else {
        return Ok(false);
    };
    let next = tx.load(f.entry + E_NEXT)?;
    if f.link != 0 {
        tx.store(f.link, next)?;
    } else if next == 0 {
        map.remove(tx, h)?;
    } else {
        map.insert(tx, h, next)?;
    }
    tx.free(POff::new(f.entry))?;
    Ok(true)
}

fn lens(key: &[u8], value: &[u8]) -> Result<(u32, u32)> {
    let k = u32::try_from(key.len()).map_err(|_| StoreError::Backend("key too long".into()))?;
    let v = u32::try_from(value.len()).map_err(|_| StoreError::Backend("value too long".into()))?;
    Ok((k, v))
}

impl Kv for PtmKv<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let h = (self.hash)(key);
        let map = self.map;
        let kbuf = &mut self.kbuf;
        self.th
            .atomic(|tx| {
                out.clear();
                match find(tx, &map, h, key, kbuf)? {
                    None => Ok(false),
                    Some(f) => {
                        out.resize(f.value_len, 0);
                        tx.read_bytes(f.value_at, out)?;
                        Ok(true)
                    }
                }
            })
            .map_err(err)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let h = (self.hash)(key);
        let map = self.map;
        let kbuf = &mut self.kbuf;
        let klen =
            u32::try_from(key.len()).map_err(|_| StoreError::Backend("key too long".into()))?;
        let vlen =
            u32::try_from(value.len()).map_err(|_| StoreError::Backend("value too long".into()))?;
        self.th
            .atomic(|tx| tx_put(tx, &map, h, key, value, klen, vlen, kbuf))
            .map_err(err)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        let h = (self.hash)(key);
        let map = self.map;
        let kbuf = &mut self.kbuf;
        self.th
            .atomic(|tx| tx_delete(tx, &map, h, key, kbuf))
            .map_err(err)
    }

    fn batch(&mut self, ops: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<()> {
        for (k, v) in ops {
            if let Some(v) = v {
                lens(k, v)?;
            }
        }
        let map = self.map;
        let hash = self.hash;
        let kbuf = &mut self.kbuf;
        // One transaction for the whole group: its writes commit together.
        self.th
            .atomic(|tx| {
                for (k, v) in ops {
                    let h = hash(k);
                    match v {
                        Some(v) => tx_put(tx, &map, h, k, v, k.len() as u32, v.len() as u32, kbuf)?,
                        None => {
                            tx_delete(tx, &map, h, k, kbuf)?;
                        }
                    }
                }
                Ok(())
            })
            .map_err(err)
    }

    fn scan_prefix(&mut self, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        // One read-only transaction per segment of buckets, collecting the
        // matching pairs first: a body may run more than once.
        let map = self.map;
        let step = ferrite_ptm::ds::hash::SEGMENT_BUCKETS;
        let mut from = 0;
        let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        while from < map.buckets() {
            self.th
                .atomic(|tx| {
                    pairs.clear();
                    let mut heads = Vec::new();
                    map.for_each_in(tx, from, from + step, &mut |_, e| heads.push(e))?;
                    for mut e in heads {
                        while e != 0 {
                            let lens = tx.load(e + E_LENS)?;
                            let klen = (lens & 0xffff_ffff) as usize;
                            let vlen = (lens >> 32) as usize;
                            let mut k = vec![0u8; klen];
                            tx.read_bytes(e + E_KEY, &mut k)?;
                            if k.starts_with(prefix) {
                                let mut v = vec![0u8; vlen];
                                tx.read_bytes(e + E_KEY + pad8(klen), &mut v)?;
                                pairs.push((k, v));
                            }
                            e = tx.load(e + E_NEXT)?;
                        }
                    }
                    Ok(())
                })
                .map_err(err)?;
            for (k, v) in &pairs {
                f(k, v);
            }
            from += step;
        }
        Ok(())
    }
}

/// Serve the PTM `ptm` (see [`crate::server::run`]); the shard count is
/// capped below the PTM's thread slots (one is the start-up scan's).
pub fn serve(
    ptm: &Ptm,
    mut opts: crate::server::Options,
    listener: std::net::TcpListener,
    stop: Option<tokio::sync::oneshot::Receiver<()>>,
    ready: impl FnOnce(&crate::server::Ready),
) -> std::result::Result<(), crate::server::ServeError> {
    let map = open_map(ptm)?;
    let slots = usize::from(ptm.options().slots).max(1);
    opts.shards = opts.shards.clamp(1, (slots - 1).max(1));
    // The read fast path reads through a thread handle of its own: a PTM
    // read is a read-only transaction validated against the orecs, and a
    // writer releases its orecs only after its commit is durable (both
    // algorithms, ferrite_ptm's `tx` module), so a reader never sees a
    // write a crash could take back.
    // A worker without a free thread slot for its reader sends its gets
    // to the shards.
    crate::server::run(
        || PtmKv::new(ptm, map),
        || Ok(PtmKv::new(ptm, map).ok().map(KvReader)),
        opts,
        listener,
        stop,
        ready,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_pmem::{Domain, Pool, PoolOptions};
    use ferrite_ptm::{Algorithm, PtmOptions};
    use std::collections::BTreeMap;

    /// Keys of equal length share a hash: every chain path is exercised.
    fn by_len(k: &[u8]) -> u64 {
        k.len() as u64
    }

    #[test]
    fn colliding_keys_keep_their_own_values_through_puts_deletes_and_batches() {
        for alg in [Algorithm::Lazy, Algorithm::Eager] {
            let pool = Pool::create_in_memory(&PoolOptions::new("t", 32 << 20).domain(Domain::Adr))
                .unwrap();
            let ptm = Ptm::create(&pool, &PtmOptions::new(alg).slots(4)).unwrap();
            let map = open_map(&ptm).unwrap();
            let mut kv = PtmKv::new(&ptm, map).unwrap();
            kv.hash = by_len;
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            let mut out = Vec::new();
            for step in 0..3000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let key = format!("k{}", x % 24).into_bytes(); // lengths 2..3: long chains
                match x % 7 {
                    0 | 1 => {
                        let existed = kv.delete(&key).unwrap();
                        assert_eq!(existed, model.remove(&key).is_some(), "step {step}");
                    }
                    2 => {
                        let k2 = format!("k{}", (x >> 8) % 24).into_bytes();
                        let v = vec![(step % 251) as u8; (x % 40) as usize];
                        let ops = vec![(key.clone(), Some(v.clone())), (k2.clone(), None)];
                        kv.batch(&ops).unwrap();
                        model.insert(key.clone(), v);
                        model.remove(&k2);
                    }
                    _ => {
                        let v = format!("{step}-{}", "v".repeat((x % 30) as usize)).into_bytes();
                        kv.put(&key, &v).unwrap();
                        model.insert(key.clone(), v);
                    }
                }
                for i in 0..24 {
                    let k = format!("k{i}").into_bytes();
                    let found = kv.get_into(&k, &mut out).unwrap();
                    assert_eq!(found.then_some(&out), model.get(&k), "step {step} key k{i}");
                }
            }
            let mut seen = BTreeMap::new();
            kv.scan_prefix(b"k", &mut |k, v| {
                seen.insert(k.to_vec(), v.to_vec());
            })
            .unwrap();
            assert_eq!(seen, model);
            drop(kv);
            // Reopen: the same contents.
            drop(ptm);
            let ptm = Ptm::open(&pool, &PtmOptions::new(alg).slots(4)).unwrap();
            let map = open_map(&ptm).unwrap();
            let mut kv = PtmKv::new(&ptm, map).unwrap();
            kv.hash = by_len;
            for (k, v) in &model {
                assert!(kv.get_into(k, &mut out).unwrap());
                assert_eq!(&out, v);
            }
        }
    }
}
