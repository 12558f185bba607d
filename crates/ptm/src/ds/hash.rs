//! A persistent hash map u64 → u64 with a fixed bucket array and chaining
//! (P3's TATP: 10 × population buckets; TPC-C (hash)).
//!
//! ## Persistent layout (little-endian words)
//! Header block, 32 bytes:
//! ```text
//! +0  magic    = HASH_MAGIC ("FPTMHASH")
//! +8  buckets  number of buckets B (≥ 1)
//! +16 dir      offset of the directory block
//! +24 segments number of segments S = ceil(B / SEGMENT_BUCKETS)
//! ```
//! Directory block, `8 × S` bytes: word `s` = offset of segment `s`.
//! Segment block, `8 × SEGMENT_BUCKETS` bytes: word `i` = head of the chain
//! of bucket `s × SEGMENT_BUCKETS + i` (0 = empty). Buckets are split into
//! segments so no single allocation (nor the transaction that zeroes it)
//! grows with the map.
//! Node block, 24 bytes, allocated with `tx.alloc` by the inserting
//! transaction and freed by the removing one:
//! ```text
//! +0  key
//! +8  value
//! +16 next     next node of the chain (0 = end)
//! ```
//! Invariants: every node is reachable from exactly one bucket, the one
//! [`bucket_of`] names for its key; keys are unique. There is no element
//! counter: a shared counter would make every insert conflict with every
//! other (P3's TPC-C inserts orders concurrently).

use super::{check_result, corrupt, mix64};
use crate::{PtmError, PtmThread, Tx, TxResult};

/// "FPTMHASH" read as a little-endian u64.
pub const HASH_MAGIC: u64 = u64::from_le_bytes(*b"FPTMHASH");
/// Buckets per segment block (8 KiB segments).
pub const SEGMENT_BUCKETS: u64 = 1024;
/// Bytes of a node.
pub const NODE_BYTES: usize = 24;

const H_MAGIC: u64 = 0;
const H_BUCKETS: u64 = 8;
const H_DIR: u64 = 16;
const H_SEGMENTS: u64 = 24;
const N_KEY: u64 = 0;
const N_VALUE: u64 = 8;
const N_NEXT: u64 = 16;

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
        let hdr = tx.alloc(32)?.raw();
        let dir = tx.alloc_zeroed(8 * segments as usize)?.raw();
        tx.store(hdr + H_MAGIC, HASH_MAGIC)?;
        tx.store(hdr + H_BUCKETS, buckets)?;
        tx.store(hdr + H_DIR, dir)?;
        tx.store(hdr + H_SEGMENTS, segments)?;
        Ok(PHashMap {
            hdr,
            buckets,
            dir,
            segments,
        })
    }

    fn create_segment(&self, tx: &mut Tx<'_>, s: u64) -> TxResult<()> {
        let seg = tx.alloc_zeroed(8 * SEGMENT_BUCKETS as usize)?.raw();
        tx.store(self.dir + 8 * s, seg)
    }

    /// Opens the map whose header block is at `hdr`; rolls back with
    /// [`super::CORRUPT`] if it is not one.
    pub fn open(tx: &mut Tx<'_>, hdr: u64) -> TxResult<PHashMap> {
        if hdr == 0 || !hdr.is_multiple_of(8) || tx.load(hdr + H_MAGIC)? != HASH_MAGIC {
            return corrupt();
        }
        let buckets = tx.load(hdr + H_BUCKETS)?;
        let dir = tx.load(hdr + H_DIR)?;
        let segments = tx.load(hdr + H_SEGMENTS)?;
        if buckets == 0 || dir == 0 || segments != buckets.div_ceil(SEGMENT_BUCKETS) {
            return corrupt();
        }
        Ok(PHashMap {
            hdr,
            buckets,
            dir,
            segments,
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
    fn find(&self, tx: &mut Tx<'_>, key: u64) -> TxResult<(u64, u64, u64)> {
        let head = self.head_slot(tx, bucket_of(key, self.buckets))?;
        let mut link = head;
        loop {
            let node = tx.load(link)?;
            if node == 0 || tx.load(node + N_KEY)? == key {
                return Ok((head, link, node));
            }
            link = node + N_NEXT;
        }
    }

    /// The value of `key`.
    pub fn get(&self, tx: &mut Tx<'_>, key: u64) -> TxResult<Option<u64>> {
        let (_, _, node) = self.find(tx, key)?;
        if node == 0 {
            return Ok(None);
        }
        tx.load(node + N_VALUE).map(Some)
    }

    /// The pool offset of the value word of `key` (to read or write it in
    /// place with `tx.load` / `tx.store`), or `None`.
    pub fn value_slot(&self, tx: &mut Tx<'_>, key: u64) -> TxResult<Option<u64>> {
        let (_, _, node) = self.find(tx, key)?;
        Ok((node != 0).then_some(node + N_VALUE))
    }

    /// Inserts or replaces; returns the previous value.
    pub fn insert(&self, tx: &mut Tx<'_>, key: u64, value: u64) -> TxResult<Option<u64>> {
        let (head_slot, _, node) = self.find(tx, key)?;
        if node != 0 {
            let old = tx.load(node + N_VALUE)?;
            tx.store(node + N_VALUE, value)?;
            return Ok(Some(old));
        }
        // New nodes go at the head of the chain: one store to a shared word
        // (the bucket head) instead of one to the chain's tail node.
        let head = tx.load(head_slot)?;
        let n = tx.alloc(NODE_BYTES)?.raw();
        tx.store(n + N_KEY, key)?;
        tx.store(n + N_VALUE, value)?;
        tx.store(n + N_NEXT, head)?;
        tx.store(head_slot, n)?;
        Ok(None)
    }

    /// Replaces the value of an existing `key`; false (and no write) when
    /// absent.
    pub fn update(&self, tx: &mut Tx<'_>, key: u64, value: u64) -> TxResult<bool> {
        match self.value_slot(tx, key)? {
            Some(slot) => {
                tx.store(slot, value)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Removes `key`; returns its value.
    pub fn remove(&self, tx: &mut Tx<'_>, key: u64) -> TxResult<Option<u64>> {
        let (_, link, node) = self.find(tx, key)?;
        if node == 0 {
            return Ok(None);
        }
        let value = tx.load(node + N_VALUE)?;
        let next = tx.load(node + N_NEXT)?;
        tx.store(link, next)?;
        tx.free(ferrite_pmem::POff::new(node))?;
        Ok(Some(value))
    }

    /// Calls `f(key, value)` for every entry of buckets `from..to`.
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
                f(tx.load(node + N_KEY)?, tx.load(node + N_VALUE)?);
                node = tx.load(node + N_NEXT)?;
            }
        }
        Ok(())
    }

    /// Checks buckets `from..to` inside one transaction: every node sits in
    /// its key's bucket, no key repeats within a bucket (so none repeats in
    /// the map), and no chain is longer than `max_chain` (a cycle shows up
    /// as an over-long chain). Returns the entries seen.
    pub fn check_in(
        &self,
        tx: &mut Tx<'_>,
        from: u64,
        to: u64,
        max_chain: u64,
    ) -> TxResult<Result<u64, String>> {
        let mut entries = 0;
        let mut keys = Vec::new();
        for b in from..to.min(self.buckets) {
            let head = self.head_slot(tx, b)?;
            let mut node = tx.load(head)?;
            keys.clear();
            while node != 0 {
                if !node.is_multiple_of(8) {
                    return Ok(Err(format!("bucket {b}: misaligned node {node:#x}")));
                }
                let key = tx.load(node + N_KEY)?;
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
    /// of entries.
    pub fn check(&self, th: &mut PtmThread<'_>) -> Result<u64, String> {
        let hdr = self.hdr;
        let reopened = check_result(th.atomic(|tx| Ok(Ok(PHashMap::open(tx, hdr)?))))?;
        if reopened != *self {
            return Err(format!("header changed: {reopened:?} vs {self:?}"));
        }
        let mut total = 0;
        let mut b = 0;
        while b < self.buckets {
            let end = (b + SEGMENT_BUCKETS).min(self.buckets);
            total += check_result(th.atomic(|tx| self.check_in(tx, b, end, 1 << 24)))?;
            b = end;
        }
        Ok(total)
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
                .atomic(|tx| map.check_in(tx, 0, map.buckets(), u64::MAX))
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
            // A node in the wrong bucket: the checker must object.
            th.atomic(|tx| {
                map.insert(tx, 1, 1)?;
                let slot = map.value_slot(tx, 1)?.unwrap();
                let elsewhere = (2..).find(|k| bucket_of(*k, 4) != bucket_of(1, 4)).unwrap();
                tx.store(slot - N_VALUE + N_KEY, elsewhere)
            })
            .unwrap();
            let bad = map.check(&mut th);
            assert!(bad.is_err(), "{bad:?}");
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
