//! The item semantics over an in-memory map (the durable map's contract
//! minus durability), plus a restart that keeps CAS values unique.

use super::*;
use std::collections::BTreeMap;

/// The map, and its capacity in key+value bytes (0 = unbounded): a put
/// that would pass it fails with [`StoreError::Full`], like a full pool.
#[derive(Default)]
struct Mem(BTreeMap<Vec<u8>, Vec<u8>>, usize);

impl Mem {
    fn used(&self) -> usize {
        self.0.iter().map(|(k, v)| k.len() + v.len()).sum()
    }
    fn fits(&self, key: &[u8], value: &[u8]) -> bool {
        let old = self.0.get(key).map_or(0, |v| key.len() + v.len());
        self.1 == 0 || self.used() - old + key.len() + value.len() <= self.1
    }
}

impl Kv for &mut Mem {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        match self.0.get(key) {
            Some(v) => {
                out.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        if !self.fits(key, value) {
            return Err(StoreError::Full);
        }
        self.0.insert(key.to_vec(), value.to_vec());
        Ok(())
    }
    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        Ok(self.0.remove(key).is_some())
    }
    fn batch(&mut self, ops: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<()> {
        // All or nothing: check the final size on a copy first.
        let mut after = Mem(self.0.clone(), 0);
        for (k, v) in ops {
            match v {
                Some(v) => after.0.insert(k.clone(), v.clone()),
                None => after.0.remove(k),
            };
        }
        if self.1 != 0 && after.used() > self.1 {
            return Err(StoreError::Full);
        }
        for (k, v) in ops {
            match v {
                Some(v) => self.0.insert(k.clone(), v.clone()),
                None => self.0.remove(k),
            };
        }
        Ok(())
    }
    fn scan_prefix(&mut self, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        for (k, v) in self.0.range(prefix.to_vec()..) {
            if k.starts_with(prefix) {
                f(k, v);
            }
        }
        Ok(())
    }
}

const NOW: u64 = 1_800_000_000;

fn set(c: &mut impl Store, mode: StoreMode, k: &[u8], v: &[u8], cas: Option<u64>) -> StoreOutcome {
    c.store(mode, k, 5, 0, v, cas, None, NOW).unwrap()
}

#[test]
fn item_roundtrips_and_short_values_are_corrupt() {
    let it = Item {
        flags: 7,
        exptime: 9,
        cas: 11,
        time: 13,
        data: b"xyz".to_vec(),
    };
    let mut b = Vec::new();
    it.encode(&mut b);
    assert_eq!(b.len(), HEADER + 3);
    assert_eq!(&b[0..4], &7u32.to_le_bytes());
    assert_eq!(&b[12..20], &11u64.to_le_bytes());
    assert_eq!(Item::decode(&b).unwrap(), it);
    assert!(matches!(
        Item::decode(&b[..27]),
        Err(StoreError::Corrupt(_))
    ));
}

#[test]
fn storage_modes() {
    let mut m = Mem::default();
    let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
    let mut c = Cache::new(&mut m, &sh);
    assert_eq!(
        set(&mut c, StoreMode::Replace, b"a", b"1", None),
        StoreOutcome::NotStored
    );
    assert_eq!(
        set(&mut c, StoreMode::Append, b"a", b"1", None),
        StoreOutcome::NotStored
    );
    assert!(matches!(
        set(&mut c, StoreMode::Add, b"a", b"1", None),
        StoreOutcome::Stored(_)
    ));
    assert_eq!(
        set(&mut c, StoreMode::Add, b"a", b"2", None),
        StoreOutcome::NotStored
    );
    assert!(matches!(
        set(&mut c, StoreMode::Append, b"a", b"2", None),
        StoreOutcome::Stored(_)
    ));
    assert!(matches!(
        set(&mut c, StoreMode::Prepend, b"a", b"0", None),
        StoreOutcome::Stored(_)
    ));
    let it = c.get(b"a", NOW).unwrap().unwrap();
    assert_eq!(it.data, b"012");
    assert_eq!(
        set(&mut c, StoreMode::Cas, b"a", b"x", Some(it.cas + 1)),
        StoreOutcome::Exists
    );
    assert_eq!(
        set(&mut c, StoreMode::Cas, b"zz", b"x", Some(1)),
        StoreOutcome::NotFound
    );
    let StoreOutcome::Stored(c2) = set(&mut c, StoreMode::Cas, b"a", b"x", Some(it.cas)) else {
        panic!("cas store failed")
    };
    assert!(c2 > it.cas);
    assert_eq!(c.get(b"a", NOW).unwrap().unwrap().data, b"x");
    c.settle(true);
    assert_eq!(sh.items(), 1);
    assert_eq!(
        c.delete(b"a", Some(c2 + 5), false, NOW).unwrap(),
        DeleteOutcome::Exists
    );
    assert_eq!(
        c.delete(b"a", None, false, NOW).unwrap(),
        DeleteOutcome::Deleted
    );
    assert_eq!(
        c.delete(b"a", None, false, NOW).unwrap(),
        DeleteOutcome::NotFound
    );
    c.settle(true);
    assert_eq!(sh.items(), 0);
    // Append beyond the item size limit.
    let sh2 = Shared::open(&mut &mut Mem::default(), 4).unwrap();
    let mut m2 = Mem::default();
    let mut c = Cache::new(&mut m2, &sh2);
    assert!(matches!(
        set(&mut c, StoreMode::Set, b"a", b"123", None),
        StoreOutcome::Stored(_)
    ));
    assert_eq!(
        set(&mut c, StoreMode::Append, b"a", b"45", None),
        StoreOutcome::TooLarge
    );
}

#[test]
fn arithmetic_wraps_saturates_and_refuses_non_numbers() {
    let mut m = Mem::default();
    let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
    let mut c = Cache::new(&mut m, &sh);
    let a = |incr, delta| Arith {
        incr,
        delta,
        create: None,
        cas: None,
        ttl: None,
        new_cas: None,
    };
    assert_eq!(
        c.arith(b"n", a(true, 1), NOW).unwrap(),
        ArithOutcome::NotFound
    );
    set(&mut c, StoreMode::Set, b"n", b"18446744073709551615", None);
    assert!(matches!(
        c.arith(b"n", a(true, 2), NOW).unwrap(),
        ArithOutcome::Value(1, _, None)
    ));
    assert!(matches!(
        c.arith(b"n", a(false, 5), NOW).unwrap(),
        ArithOutcome::Value(0, _, None)
    ));
    set(&mut c, StoreMode::Set, b"n", b"12 ", None);
    assert!(matches!(
        c.arith(b"n", a(true, 1), NOW).unwrap(),
        ArithOutcome::Value(13, _, None)
    ));
    set(&mut c, StoreMode::Set, b"s", b"abc", None);
    assert_eq!(
        c.arith(b"s", a(true, 1), NOW).unwrap(),
        ArithOutcome::NonNumeric
    );
    let mut cr = a(true, 9);
    cr.create = Some((40, 0));
    assert!(matches!(
        c.arith(b"m", cr, NOW).unwrap(),
        ArithOutcome::Value(40, _, None)
    ));
    assert!(matches!(
        c.arith(b"m", cr, NOW).unwrap(),
        ArithOutcome::Value(49, _, None)
    ));
}

#[test]
fn expiry_touch_and_flush() {
    let mut m = Mem::default();
    let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
    let mut c = Cache::new(&mut m, &sh);
    c.store(StoreMode::Set, b"e", 0, 10, b"v", None, None, NOW)
        .unwrap();
    assert!(c.get(b"e", NOW + 9).unwrap().is_some());
    assert!(c.get(b"e", NOW + 10).unwrap().is_none());
    c.settle(true);
    assert_eq!(sh.items(), 0, "expired item removed lazily");
    c.store(StoreMode::Set, b"e", 0, 10, b"v", None, None, NOW)
        .unwrap();
    assert_eq!(
        c.touch(b"e", 100, NOW).unwrap().unwrap().ttl(NOW),
        Some(100)
    );
    assert!(c.get(b"e", NOW + 50).unwrap().is_some());
    assert!(c.touch(b"nope", 1, NOW).unwrap().is_none());
    // Negative exptime: stored but never visible, and the old value is gone.
    c.store(StoreMode::Set, b"e", 0, -1, b"w", None, None, NOW)
        .unwrap();
    assert!(c.get(b"e", NOW).unwrap().is_none());
    // Immediate flush hides everything stored so far, not later stores.
    set(&mut c, StoreMode::Set, b"a", b"1", None);
    c.flush_all(0, NOW).unwrap();
    assert!(c.get(b"a", NOW).unwrap().is_none());
    set(&mut c, StoreMode::Set, b"b", b"2", None);
    assert!(c.get(b"b", NOW).unwrap().is_some());
    // Delayed flush: visible until the deadline, gone after.
    c.flush_all(5, NOW).unwrap();
    assert!(c.get(b"b", NOW + 4).unwrap().is_some());
    assert!(c.get(b"b", NOW + 5).unwrap().is_none());
    c.store(StoreMode::Set, b"c", 0, 0, b"3", None, None, NOW + 6)
        .unwrap();
    assert!(c.get(b"c", NOW + 7).unwrap().is_some());
}

#[test]
fn cas_stays_unique_and_flush_survives_a_restart() {
    let mut m = Mem::default();
    let last = {
        let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
        let mut c = Cache::new(&mut m, &sh);
        let mut last = 0;
        for i in 0..10u32 {
            let StoreOutcome::Stored(cas) =
                set(&mut c, StoreMode::Set, &i.to_le_bytes(), b"v", None)
            else {
                panic!()
            };
            assert!(cas > last);
            last = cas;
        }
        c.flush_all(0, NOW).unwrap();
        last
    };
    let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
    let mut c = Cache::new(&mut m, &sh);
    assert!(
        c.get(&0u32.to_le_bytes(), NOW).unwrap().is_none(),
        "flush forgotten"
    );
    let StoreOutcome::Stored(cas) = set(&mut c, StoreMode::Set, b"x", b"v", None) else {
        panic!()
    };
    assert!(cas > last, "CAS {cas} reused after restart (last {last})");
    assert!(c.get(b"x", NOW).unwrap().is_some());
}

#[test]
fn a_group_reads_its_own_writes_and_applies_them_at_commit() {
    let mut m = Mem::default();
    let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
    {
        let mut c = Cache::new(Group::new(&mut m), &sh);
        set(&mut c, StoreMode::Set, b"old", b"1", None);
        c.kv().begin();
        set(&mut c, StoreMode::Set, b"a", b"x", None);
        set(&mut c, StoreMode::Append, b"a", b"y", None);
        assert_eq!(c.get(b"a", NOW).unwrap().unwrap().data, b"xy");
        assert_eq!(
            c.delete(b"old", None, false, NOW).unwrap(),
            DeleteOutcome::Deleted
        );
        assert!(c.get(b"old", NOW).unwrap().is_none());
        c.kv().commit().unwrap();
    }
    assert!(m.0.contains_key(&b"ka"[..]));
    assert!(!m.0.contains_key(&b"kold"[..]));
    let it = Item::decode(&m.0[&b"ka"[..]]).unwrap();
    assert_eq!(it.data, b"xy");
}

#[test]
fn counts_follow_only_applied_writes() {
    let mut m = Mem::default();
    let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
    let mut c = Cache::new(Group::new(&mut m), &sh);
    c.kv().begin();
    set(&mut c, StoreMode::Set, b"a", b"xyz", None);
    // As if the batch had failed: nothing applied, nothing counted.
    c.settle(false);
    assert_eq!(sh.items(), 0);
    c.kv().begin(); // drops the failed group's writes
    set(&mut c, StoreMode::Set, b"a", b"xyz", None);
    c.kv().commit().unwrap();
    c.settle(true);
    assert_eq!(sh.items(), 1);
    // Map key "ka", the header and "xyz".
    assert_eq!(sh.stats.bytes.load(Relaxed), (2 + HEADER + 3) as i64);
}

fn key(i: u32) -> Vec<u8> {
    format!("key-{i:06}").into_bytes()
}

/// Fill past the budget: the newest items stay, the oldest go, the
/// evictions are counted, the bytes stay under the budget, and a restart
/// (fresh shared state, seeded by a scan) counts exactly what is left.
#[test]
fn writes_past_the_budget_evict_the_oldest() {
    let mut m = Mem::default();
    let value = vec![b'v'; 100];
    let per = charge(1 + key(0).len(), HEADER + value.len());
    let budget = 50 * per;
    {
        let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
        let mut c = Cache::with_budget(&mut m, &sh, budget, false);
        for i in 0..200u32 {
            assert!(matches!(
                set(&mut c, StoreMode::Set, &key(i), &value, None),
                StoreOutcome::Stored(_)
            ));
            c.settle(true);
            // Keep item 0 hot: a referenced item gets a second chance.
            if i % 10 == 0 {
                assert!(c.get(&key(0), NOW).unwrap().is_some(), "hot item at {i}");
            }
            assert!(c.tracked().1 <= budget);
            assert!(sh.stats.bytes.load(Relaxed) as u64 <= budget);
        }
        assert_eq!(sh.items(), 50);
        assert_eq!(sh.stats.evictions.load(Relaxed), 150);
        for i in 151..200 {
            assert!(c.get(&key(i), NOW).unwrap().is_some(), "newest {i} evicted");
        }
        for i in 1..100 {
            assert!(c.get(&key(i), NOW).unwrap().is_none(), "oldest {i} kept");
        }
    }
    assert_eq!(m.0.len(), 50 + 1, "the items and the CAS mark");
    let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
    let mut c = Cache::with_budget(&mut m, &sh, budget, true);
    c.seed_all().unwrap();
    assert!(sh.counted());
    assert_eq!(
        (sh.items(), sh.stats.bytes.load(Relaxed) as u64),
        (50, 50 * per)
    );
    // Still bounded after the restart.
    set(&mut c, StoreMode::Set, b"after", &value, None);
    c.settle(true);
    assert_eq!(sh.items(), 50);
    assert_eq!(sh.stats.evictions.load(Relaxed), 1);
}

/// A full map (a full pool) makes a write evict until it fits; evictions
/// inside a group commit with it, and a failed group undoes its view.
#[test]
fn a_full_map_evicts_instead_of_failing() {
    let mut m = Mem(BTreeMap::new(), 20_000);
    let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
    let value = vec![b'x'; 1000];
    {
        let mut c = Cache::new(&mut m, &sh);
        for i in 0..100u32 {
            let r = c.store(StoreMode::Set, &key(i), 0, 0, &value, None, None, NOW);
            assert!(matches!(r, Ok(StoreOutcome::Stored(_))), "{i}: {r:?}");
            c.settle(true);
        }
        assert!(c.get(&key(99), NOW).unwrap().is_some());
        assert!(c.get(&key(0), NOW).unwrap().is_none());
    }
    let evicted = sh.stats.evictions.load(Relaxed);
    assert!(evicted >= 80, "{evicted}");
    assert_eq!(sh.items() as usize, m.0.len() - 1);
    assert_eq!(sh.items() + evicted, 100);
}

#[test]
fn an_item_larger_than_the_budget_is_stored_alone() {
    let mut m = Mem::default();
    let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
    let mut c = Cache::with_budget(&mut m, &sh, 100, false);
    set(&mut c, StoreMode::Set, b"a", b"1", None);
    set(&mut c, StoreMode::Set, b"b", &[0u8; 200], None);
    c.settle(true);
    assert!(c.get(b"a", NOW).unwrap().is_none());
    assert!(c.get(b"b", NOW).unwrap().is_some());
    // Rewriting the only item does not evict it.
    set(&mut c, StoreMode::Set, b"b", &[1u8; 300], None);
    c.settle(true);
    assert_eq!(c.get(b"b", NOW).unwrap().unwrap().data, vec![1u8; 300]);
    assert_eq!(sh.items(), 1);
}

/// A group whose batch the full map refuses applies nothing and leaves the
/// views as they were; run again one request at a time (as the shard
/// does), the writes evict and succeed, and the counts match the map.
#[test]
fn a_failed_group_undoes_its_view_and_the_retry_evicts() {
    let mut m = Mem(BTreeMap::new(), 12_000);
    let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
    let value = vec![b'x'; 1000];
    {
        let mut c = Cache::new(Group::new(&mut m), &sh);
        for i in 0..8u32 {
            set(&mut c, StoreMode::Set, &key(i), &value, None);
            c.settle(true);
        }
        let before = c.tracked();
        c.kv().begin();
        for i in 8..16u32 {
            set(&mut c, StoreMode::Set, &key(i), &value, None);
        }
        assert!(matches!(c.kv().commit(), Err(StoreError::Full)));
        c.settle(false);
        assert_eq!(c.tracked(), before);
        assert_eq!(sh.items(), 8);
        for i in 8..16u32 {
            let r = c.store(StoreMode::Set, &key(i), 0, 0, &value, None, None, NOW);
            assert!(matches!(r, Ok(StoreOutcome::Stored(_))), "{i}: {r:?}");
            c.settle(true);
        }
        assert!(c.get(&key(15), NOW).unwrap().is_some());
    }
    assert_eq!(sh.items() as usize, m.0.len() - 1);
    assert_eq!(sh.items() + sh.stats.evictions.load(Relaxed), 16);
}
