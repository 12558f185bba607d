//! A persistent hash map u64 → u64 with a fixed bucket array and chaining
//! (P3's TATP: 10 × population buckets; TPC-C (hash)).
//!
//! ## Persistent layout (little-endian words)
//! Header block, 48 bytes:
//! ```text
//! +0  magic    = HASH_MAGIC ("FPTMHASH")
//! +8  buckets  number of buckets B (≥ 1)
//! +16 dir      offset of the directory block
//! +24 segments number of segments S = ceil(B / SEGMENT_BUCKETS)
//! +32 version  = super::VERSION (2)
//! +40 check    CRC32C of bytes 0..40, from the seed (below), in the low half
//! ```
//! Version 1 (a 32-byte header, nodes without a check word) is refused
//! with [`crate::PtmError::StructureVersion`].
//! Directory block, `8 × S` bytes: word `s` = offset of segment `s`.
//! Segment block, `8 × SEGMENT_BUCKETS` bytes: word `i` = head of the chain
//! of bucket `s × SEGMENT_BUCKETS + i` (0 = empty). Buckets are split into
//! segments so no single allocation (nor the transaction that zeroes it)
//! grows with the map.
//! Node block, 32 bytes, allocated with `tx.alloc` by the inserting
//! transaction and freed by the removing one:
//! ```text
//! +0  key
//! +8  value
//! +16 next     next node of the chain (0 = end)
//! +24 check    super::check_word(seed, key, value)
//! ```
//! The check word is stored by the transaction that stores the key or the
//! value (so no crash separates them); the seed is
//! `crc32c(mix64(header ^ HASH_MAGIC))`. Every node a search passes has
//! its key check verified, what a lookup returns its record check; a
//! failure rolls the transaction back with
//! [`crate::PtmError::CorruptRecord`] naming the key, and
//! [`PHashMap::check`] lists every damaged record. The links (`next`, the
//! bucket words) carry no check.
//! Invariants: every node is reachable from exactly one bucket, the one
//! [`bucket_of`] names for its key; keys are unique. There is no element
//! counter: a shared counter would make every insert conflict with every
//! other (P3's TPC-C inserts orders concurrently).

use super::{VERSION, check_result, check_version, check_word, corrupt, damaged, key_ok, mix64};
use crate::{PtmError, PtmThread, Tx, TxResult};

/// "FPTMHASH" read as a little-endian u64.
pub const HASH_MAGIC: u64 = u64::from_le_bytes(*b"FPTMHASH");
/// Buckets per segment block (8 KiB segments).
pub const SEGMENT_BUCKETS: u64 = 1024;
/// Bytes of a node.
pub const NODE_BYTES: usize = 32;
/// Bytes of the header.
const HEADER_BYTES: usize = 48;
const NAME: &str = "ptm hash";

const H_MAGIC: u64 = 0;
const H_BUCKETS: u64 = 8;
const H_DIR: u64 = 16;
const H_SEGMENTS: u64 = 24;
const H_VERSION: u64 = 32;
const H_CHECK: u64 = 40;
const N_KEY: u64 = 0;
const N_VALUE: u64 = 8;
const N_NEXT: u64 = 16;
const N_CHECK: u64 = 24;

/// The header's check word: CRC32C of its words 0..40, from `seed`.
fn header_check(seed: u32, words: &[u64; 5]) -> u64 {
    let b: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    u64::from(crc32c::crc32c_append(seed, &b))
}

/// The bucket of `key` among `buckets`.
#[inline]
pub fn bucket_of(key: u64, buckets: u64) -> u64 {
    mix64(key) % buckets
}

/// A handle on a persistent hash map (module docs). `Copy`; caches the
/// header's immutable fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PHashMap {
    hdr: u64,
    buckets: u64,
    dir: u64,
    segments: u64,
    /// The records' checksum seed.
    seed: u32,
}

impl PHashMap {
    /// Creates an empty map of `buckets` buckets (at least 1) in one
    /// transaction: the header, the directory and every segment. For large
    /// maps use [`PHashMap::create`], which spreads the segments over
    /// several transactions.
    pub fn create_in(tx: &mut Tx<'_>, buckets: u64) -> TxResult<PHashMap> {
        let map = Self::create_header(tx, buckets)?;
        for s in 0..map.segments {
            map.create_segment(tx, s)?;
        }
        Ok(map)
    }

    /// Creates an empty map of `buckets` buckets in several transactions on
    /// `th` (one per 64 segments). The map is complete when this returns;
    /// link [`PHashMap::header`] into a reachable place afterwards. A crash
    /// in between leaves unreachable blocks behind (creation is part of a
    /// workload's load, which is not crash-atomic).
    pub fn create(th: &mut PtmThread<'_>, buckets: u64) -> Result<PHashMap, PtmError> {
        let map = th.atomic(|tx| Self::create_header(tx, buckets))?;
        let mut s = 0;
        while s < map.segments {
            let end = (s + 64).min(map.segments);
            th.atomic(|tx| {
                for seg in s..end {
                    map.create_segment(tx, seg)?;
                }
                Ok(())
            })?;
            s = end;
        }
        Ok(map)
    }

    fn create_header(tx: &mut Tx<'_>, buckets: u64) -> TxResult<PHashMap> {
        let buckets = buckets.max(1);
        let segments = buckets.div_ceil(SEGMENT_BUCKETS);
        let hdr = tx.alloc(HEADER_BYTES)?.raw();
        let dir = tx.alloc_zeroed(8 * segments as usize)?.raw();
        let seed = super::seed(hdr, HASH_MAGIC);
        let words = [HASH_MAGIC, buckets, dir, segments, VERSION];
        for (i, w) in words.iter().enumerate() {
            tx.store(hdr + 8 * i as u64, *w)?;
        }
        tx.store(hdr + H_CHECK, header_check(seed, &words))?;
        Ok(PHashMap {
            hdr,
            buckets,
            dir,
            segments,
            seed,
        })
    }

    fn create_segment(&self, tx: &mut Tx<'_>, s: u64) -> TxResult<()> {
        let seg = tx.alloc_zeroed(8 * SEGMENT_BUCKETS as usize)?.raw();
        tx.store(self.dir + 8 * s, seg)
    }

    /// Opens the map whose header block is at `hdr`; rolls back with
    /// [`super::CORRUPT`] if it is not one or its check fails, with
    /// [`crate::PtmError::StructureVersion`] if it is another version's.
    pub fn open(tx: &mut Tx<'_>, hdr: u64) -> TxResult<PHashMap> {
        if hdr == 0 || !hdr.is_multiple_of(8) || tx.load(hdr + H_MAGIC)? != HASH_MAGIC {
            return corrupt();
        }
        check_version(tx, NAME, hdr, hdr + H_VERSION)?;
        let buckets = tx.load(hdr + H_BUCKETS)?;
        let dir = tx.load(hdr + H_DIR)?;
        let segments = tx.load(hdr + H_SEGMENTS)?;
        let seed = super::seed(hdr, HASH_MAGIC);
        let words = [HASH_MAGIC, buckets, dir, segments, VERSION];
        if tx.load(hdr + H_CHECK)? != header_check(seed, &words)
            || buckets == 0
            || dir == 0
            || segments != buckets.div_ceil(SEGMENT_BUCKETS)
        {
            return corrupt();
        }
        Ok(PHashMap {
            hdr,
            buckets,
            dir,
            segments,
            seed,
        })
    }

    /// The header block's offset (what to store to find the map again).
    pub fn header(&self) -> u64 {
        self.hdr
    }

    /// Number of buckets.
    pub fn buckets(&self) -> u64 {
        self.buckets
    }

    /// Offset of the head word of `bucket`.
    fn head_slot(&self, tx: &mut Tx<'_>, bucket: u64) -> TxResult<u64> {
        let seg = tx.load(self.dir + 8 * (bucket / SEGMENT_BUCKETS))?;
        if seg == 0 {
            return corrupt();
        }
        Ok(seg + 8 * (bucket % SEGMENT_BUCKETS))
    }

    /// Finds `key`: (its bucket's head word, the word that points to its
    /// node, the node), or (head word, the chain's last link word, 0) when
    /// absent.
    /// Verifies every node's key check on the way (a damaged one rolls
    /// back with [`crate::PtmError::CorruptRecord`] naming `key`).
    fn find(&self, tx: &mut Tx<'_>, key: u64) -> TxResult<(u64, u64, u64)> {
        let head = self.head_slot(tx, bucket_of(key, self.buckets))?;
        let mut link = head;
        loop {
            let node = tx.load(link)?;
            if node == 0 {
                return Ok((head, link, node));
            }
            let k = tx.load(node + N_KEY)?;
            if !key_ok(self.seed, k, tx.load(node + N_CHECK)?) {
                return damaged(
                    NAME,
                    key,
                    &format!("node {node:#x} on its chain: key check"),
                );
            }
            if k == key {
                return Ok((head, link, node));
            }
            link = node + N_NEXT;
        }
    }

    /// The value of node `node` (of `key`), its record check verified.
    fn value_of(&self, tx: &mut Tx<'_>, node: u64, key: u64) -> TxResult<u64> {
        let v = tx.load(node + N_VALUE)?;
        if tx.load(node + N_CHECK)? != check_word(self.seed, key, v) {
            return damaged(NAME, key, "checksum mismatch");
        }
        Ok(v)
    }

    /// The value of `key` (its record check verified).
    pub fn get(&self, tx: &mut Tx<'_>, key: u64) -> TxResult<Option<u64>> {
        let (_, _, node) = self.find(tx, key)?;
        if node == 0 {
            return Ok(None);
        }
        self.value_of(tx, node, key).map(Some)
    }

    /// Inserts or replaces; returns the previous value.
    pub fn insert(&self, tx: &mut Tx<'_>, key: u64, value: u64) -> TxResult<Option<u64>> {
        let (head_slot, _, node) = self.find(tx, key)?;
        if node != 0 {
            let old = self.value_of(tx, node, key)?;
            tx.store(node + N_VALUE, value)?;
            tx.store(node + N_CHECK, check_word(self.seed, key, value))?;
            return Ok(Some(old));
        }
        // New nodes go at the head of the chain: one store to a shared word
        // (the bucket head) instead of one to the chain's tail node.
        let head = tx.load(head_slot)?;
        let n = tx.alloc(NODE_BYTES)?.raw();
        tx.store(n + N_KEY, key)?;
        tx.store(n + N_VALUE, value)?;
        tx.store(n + N_NEXT, head)?;
        tx.store(n + N_CHECK, check_word(self.seed, key, value))?;
        tx.store(head_slot, n)?;
        Ok(None)
    }

    /// Replaces the value of an existing `key`; false (and no write) when
    /// absent.
    pub fn update(&self, tx: &mut Tx<'_>, key: u64, value: u64) -> TxResult<bool> {
        let (_, _, node) = self.find(tx, key)?;
        if node == 0 {
            return Ok(false);
        }
        tx.store(node + N_VALUE, value)?;
        tx.store(node + N_CHECK, check_word(self.seed, key, value))?;
        Ok(true)
    }

    /// Removes `key`; returns its value.
    pub fn remove(&self, tx: &mut Tx<'_>, key: u64) -> TxResult<Option<u64>> {
        let (_, link, node) = self.find(tx, key)?;
        if node == 0 {
            return Ok(None);
        }
        let value = self.value_of(tx, node, key)?;
        let next = tx.load(node + N_NEXT)?;
        tx.store(link, next)?;
        tx.free(ferrite_pmem::POff::new(node))?;
        Ok(Some(value))
    }

    /// Calls `f(key, value)` for every entry of buckets `from..to`, each
    /// verified (a damaged one rolls back with
    /// [`crate::PtmError::CorruptRecord`] naming the key as stored).
    pub fn for_each_in(
        &self,
        tx: &mut Tx<'_>,
        from: u64,
        to: u64,
        f: &mut dyn FnMut(u64, u64),
    ) -> TxResult<()> {
        for b in from..to.min(self.buckets) {
            let head = self.head_slot(tx, b)?;
            let mut node = tx.load(head)?;
            while node != 0 {
                let k = tx.load(node + N_KEY)?;
                let v = tx.load(node + N_VALUE)?;
                if tx.load(node + N_CHECK)? != check_word(self.seed, k, v) {
                    return damaged(NAME, k, "checksum mismatch");
                }
                f(k, v);
                node = tx.load(node + N_NEXT)?;
            }
        }
        Ok(())
    }

    /// Checks buckets `from..to` inside one transaction: every node sits in
    /// its key's bucket, no key repeats within a bucket (so none repeats in
    /// the map), and no chain is longer than `max_chain` (a cycle shows up
    /// as an over-long chain). Returns the entries seen; a record whose
    /// check fails is listed in `damaged` (key as stored, what) and not
    /// counted.
    pub fn check_in(
        &self,
        tx: &mut Tx<'_>,
        from: u64,
        to: u64,
        max_chain: u64,
        damaged: &mut Vec<(u64, String)>,
    ) -> TxResult<Result<u64, String>> {
        let mut entries = 0;
        let mut keys = Vec::new();
        // Every node of the bucket's chain, damaged ones included: a
        // damaged `next` can close a cycle through damaged nodes, which
        // the repeated-key test below (intact nodes only) cannot see.
        let mut seen = std::collections::HashSet::new();
        for b in from..to.min(self.buckets) {
            let head = self.head_slot(tx, b)?;
            let mut node = tx.load(head)?;
            keys.clear();
            seen.clear();
            while node != 0 {
                if !node.is_multiple_of(8) {
                    return Ok(Err(format!("bucket {b}: misaligned node {node:#x}")));
                }
                if !seen.insert(node) || seen.len() as u64 > max_chain {
                    return Ok(Err(format!(
                        "bucket {b}: the chain meets node {node:#x} twice or is longer than {max_chain} (a damaged link)"
                    )));
                }
                let key = tx.load(node + N_KEY)?;
                let value = tx.load(node + N_VALUE)?;
                let check = tx.load(node + N_CHECK)?;
                if !key_ok(self.seed, key, check) {
                    damaged.push((key, format!("key check mismatch (node at {node:#x})")));
                    node = tx.load(node + N_NEXT)?;
                    continue;
                }
                if check != check_word(self.seed, key, value) {
                    damaged.push((key, "checksum mismatch".into()));
                    node = tx.load(node + N_NEXT)?;
                    continue;
                }
                if bucket_of(key, self.buckets) != b {
                    return Ok(Err(format!("key {key} in bucket {b}, belongs elsewhere")));
                }
                if keys.contains(&key) {
                    return Ok(Err(format!("key {key} twice in bucket {b}")));
                }
                keys.push(key);
                if keys.len() as u64 > max_chain {
                    return Ok(Err(format!("bucket {b}: chain longer than {max_chain}")));
                }
                entries += 1;
                node = tx.load(node + N_NEXT)?;
            }
        }
        Ok(Ok(entries))
    }

    /// Checks the whole map (header, then every bucket, 1024 buckets per
    /// transaction; run it with no concurrent writers). Returns the number
    /// of entries; a map with damaged records is an error listing each
    /// one.
    pub fn check(&self, th: &mut PtmThread<'_>) -> Result<u64, String> {
        let hdr = self.hdr;
        let reopened = check_result(th.atomic(|tx| Ok(Ok(PHashMap::open(tx, hdr)?))))?;
        if reopened != *self {
            return Err(format!("header changed: {reopened:?} vs {self:?}"));
        }
        let mut total = 0;
        let mut b = 0;
        let mut bad = Vec::new();
        let mut damaged_all = Vec::new();
        while b < self.buckets {
            let end = (b + SEGMENT_BUCKETS).min(self.buckets);
            total += check_result(th.atomic(|tx| {
                bad.clear();
                self.check_in(tx, b, end, 1 << 24, &mut bad)
            }))?;
            damaged_all.append(&mut bad);
            b = end;
        }
        super::damaged_result(NAME, total, &damaged_all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ds::testutil::{Model, each_algorithm, xorshift};

    fn contents(map: PHashMap, th: &mut PtmThread<'_>) -> Model {
        let mut m = Model::new();
        th.atomic(|tx| {
            m.clear();
            map.for_each_in(tx, 0, map.buckets(), &mut |k, v| {
                m.insert(k, v);
            })
        })
        .unwrap();
        m
    }

    #[test]
    fn random_ops_match_model() {
        each_algorithm(|ptm| {
            let mut th = ptm.thread().unwrap();
            // Few buckets: long chains exercise removal in the middle.
            let map = th.atomic(|tx| PHashMap::create_in(tx, 7)).unwrap();
            let mut model = Model::new();
            let mut r = 42;
            for i in 0..3000 {
                let op = xorshift(&mut r) % 4;
                let key = xorshift(&mut r) % 200;
                let val = xorshift(&mut r);
                let got = th
                    .atomic(|tx| match op {
                        0 => map.insert(tx, key, val),
                        1 => map.remove(tx, key),
                        2 => map.get(tx, key),
                        _ => Ok(map.update(tx, key, val)?.then_some(0)),
                    })
                    .unwrap();
                let want = match op {
                    0 => model.insert(key, val),
                    1 => model.remove(&key),
                    2 => model.get(&key).copied(),
                    _ => model.get_mut(&key).map(|v| {
                        *v = val;
                        0
                    }),
                };
                assert_eq!(got, want, "op {i}: {op} on {key}");
            }
            assert_eq!(map.check(&mut th).unwrap(), model.len() as u64);
            let one = th
                .atomic(|tx| map.check_in(tx, 0, map.buckets(), u64::MAX, &mut Vec::new()))
                .unwrap();
            assert_eq!(one, Ok(model.len() as u64));
            assert_eq!(contents(map, &mut th), model);
        });
    }

    #[test]
    fn user_abort_rolls_back_inserts_and_removes() {
        each_algorithm(|ptm| {
            let mut th = ptm.thread().unwrap();
            let map = PHashMap::create(&mut th, 3000).unwrap();
            assert_eq!(map.buckets(), 3000);
            th.atomic(|tx| {
                for k in 0..50 {
                    map.insert(tx, k, k * 10)?;
                }
                Ok(())
            })
            .unwrap();
            let r = th.atomic(|tx| {
                map.remove(tx, 3)?;
                map.insert(tx, 1000, 1)?;
                map.update(tx, 4, 99)?;
                tx.abort::<()>(7)
            });
            assert!(matches!(r, Err(PtmError::Aborted { code: 7 })));
            let m = contents(map, &mut th);
            assert_eq!(m.len(), 50);
            assert_eq!(m.get(&3), Some(&30));
            assert_eq!(m.get(&4), Some(&40));
            assert_eq!(map.check(&mut th).unwrap(), 50);
        });
    }

    #[test]
    fn two_threads_conflicting() {
        each_algorithm(|ptm| {
            let mut th = ptm.thread().unwrap();
            let t = th.atomic(|tx| PHashMap::create_in(tx, 16)).unwrap();
            drop(th);
            crate::ds::testutil::two_threads_conflicting(ptm, t, 7, 64, 3);
        });
    }

    #[test]
    fn open_rejects_other_blocks() {
        each_algorithm(|ptm| {
            let mut th = ptm.thread().unwrap();
            let map = th.atomic(|tx| PHashMap::create_in(tx, 4)).unwrap();
            let again = th.atomic(|tx| PHashMap::open(tx, map.header())).unwrap();
            assert_eq!(again, map);
            let r = th.atomic(|tx| {
                let b = tx.alloc_zeroed(32)?.raw();
                PHashMap::open(tx, b)
            });
            assert!(matches!(r, Err(PtmError::Aborted { code }) if code == crate::ds::CORRUPT));
            // A node in the wrong bucket (its check word rewritten to
            // match, as a bug would): the checker must object.
            th.atomic(|tx| {
                map.insert(tx, 1, 1)?;
                let (_, _, node) = map.find(tx, 1)?;
                let elsewhere = (2..).find(|k| bucket_of(*k, 4) != bucket_of(1, 4)).unwrap();
                tx.store(node + N_KEY, elsewhere)?;
                tx.store(node + N_CHECK, check_word(map.seed, elsewhere, 1))
            })
            .unwrap();
            let bad = map.check(&mut th);
            assert!(
                bad.as_ref().is_err_and(|e| e.contains("belongs elsewhere")),
                "{bad:?}"
            );
        });
    }

    impl crate::ds::testutil::TestMap for PHashMap {
        fn get(&self, tx: &mut Tx<'_>, k: u64) -> TxResult<Option<u64>> {
            PHashMap::get(self, tx, k)
        }
        fn insert(&self, tx: &mut Tx<'_>, k: u64, v: u64) -> TxResult<Option<u64>> {
            PHashMap::insert(self, tx, k, v)
        }
        fn remove(&self, tx: &mut Tx<'_>, k: u64) -> TxResult<Option<u64>> {
            PHashMap::remove(self, tx, k)
        }
        fn entries(&self, th: &mut PtmThread<'_>) -> Vec<(u64, u64)> {
            contents(*self, th).into_iter().collect()
        }
        fn check(&self, th: &mut PtmThread<'_>) -> Result<u64, String> {
            PHashMap::check(self, th)
        }
    }

    #[test]
    fn same_keys_stress() {
        each_algorithm(|ptm| {
            let mut th = ptm.thread().unwrap();
            let map = th.atomic(|tx| PHashMap::create_in(tx, 5)).unwrap();
            drop(th);
            crate::ds::testutil::same_keys_stress(ptm, map);
        });
    }
}
