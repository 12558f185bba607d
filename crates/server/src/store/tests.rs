//! The item semantics over an in-memory map (the durable map's contract
//! minus durability), plus a restart that keeps CAS values unique.

use super::fault::ItemFault;
use super::item::verify_item;
use super::*;
use crate::protocol::{DeleteOpts, StoreMode, StoreOpts};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;

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
    c.store(mode, k, 5, 0, v, cas, &StoreOpts::default(), NOW)
        .unwrap()
}

#[test]
fn item_roundtrips_and_short_values_are_corrupt() {
    let it = Item {
        flags: 7,
        exptime: 9,
        cas: 11,
        time: 13,
        stale: false,
        token_sent: false,
        data: b"xyz".to_vec(),
    };
    let mut b = Vec::new();
    it.encode(b"kkey", &mut b);
    assert_eq!(b.len(), HEADER + 3);
    assert_eq!(&b[0..4], &7u32.to_le_bytes());
    assert_eq!(&b[12..20], &11u64.to_le_bytes());
    // The checksum at 28 is CRC32C of the map key, bytes 0..28, the data.
    let mut covered = b"kkey".to_vec();
    covered.extend_from_slice(&b[..28]);
    covered.extend_from_slice(b"xyz");
    assert_eq!(&b[28..32], &crc32c::crc32c(&covered).to_le_bytes());
    assert_eq!(Item::decode(b"kkey", &b).unwrap(), it);
    for short in [0, 27, 31] {
        assert!(matches!(
            Item::decode(b"kkey", &b[..short]),
            Err(StoreError::Damaged { .. })
        ));
    }
}

/// Every single-bit change of an item's bytes (header, checksum, data) or
/// of its key is caught by the checksum: a typed error naming the key,
/// never the item.
#[test]
fn every_flipped_bit_of_an_item_or_its_key_is_damage() {
    let it = Item {
        flags: 0xdead,
        exptime: NOW + 60,
        cas: 77,
        time: NOW,
        stale: true,
        token_sent: false,
        data: b"some value bytes".to_vec(),
    };
    let key = b"kk\x01y".to_vec();
    let mut b = Vec::new();
    it.encode(&key, &mut b);
    assert_eq!(Item::decode(&key, &b).unwrap(), it);
    for bit in 0..b.len() * 8 {
        let mut bad = b.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        match Item::decode(&key, &bad) {
            Err(StoreError::Damaged { key: k, .. }) => assert_eq!(k, "k\\x01y"),
            other => panic!("bit {bit}: {other:?}"),
        }
    }
    for bit in 0..key.len() * 8 {
        let mut other_key = key.clone();
        other_key[bit / 8] ^= 1 << (bit % 8);
        assert!(Item::decode(&other_key, &b).is_err(), "key bit {bit}");
    }
    let e = Item::decode(&key, &b[..HEADER - 1])
        .unwrap_err()
        .to_string();
    assert_eq!(e, "damaged item 'k\\x01y': shorter than its header");
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
        c.delete(b"a", Some(c2 + 5), &DeleteOpts::default(), NOW)
            .unwrap(),
        DeleteOutcome::Exists
    );
    assert_eq!(
        c.delete(b"a", None, &DeleteOpts::default(), NOW).unwrap(),
        DeleteOutcome::Deleted
    );
    assert_eq!(
        c.delete(b"a", None, &DeleteOpts::default(), NOW).unwrap(),
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
        order: b"",
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
    // ma's N and T set the exptime in request order, t reports it at its
    // place (memcached's `ma k N0 J5 t T7` answers t-1 and keeps TTL 7).
    let mut nt = a(true, 1);
    nt.create = Some((5, 0));
    nt.ttl = Some(7);
    nt.order = b"NtT";
    assert!(matches!(
        c.arith(b"o1", nt, NOW).unwrap(),
        ArithOutcome::Value(5, _, None)
    ));
    assert_eq!(c.get(b"o1", NOW).unwrap().unwrap().ttl(NOW), Some(7));
    nt.order = b"TNt";
    assert!(matches!(
        c.arith(b"o2", nt, NOW).unwrap(),
        ArithOutcome::Value(5, _, None)
    ));
    assert_eq!(c.get(b"o2", NOW).unwrap().unwrap().ttl(NOW), None);
    nt.create = Some((5, 9));
    nt.order = b"";
    assert!(matches!(
        c.arith(b"o3", nt, NOW).unwrap(),
        ArithOutcome::Value(5, _, Some(7))
    ));
    // On a hit N does nothing; t before T reports the old TTL.
    nt.order = b"tT";
    nt.ttl = Some(20);
    assert!(matches!(
        c.arith(b"o3", nt, NOW).unwrap(),
        ArithOutcome::Value(6, _, Some(7))
    ));
    assert_eq!(c.get(b"o3", NOW).unwrap().unwrap().ttl(NOW), Some(20));
}

#[test]
fn expiry_touch_and_flush() {
    let mut m = Mem::default();
    let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
    let mut c = Cache::new(&mut m, &sh);
    c.store(
        StoreMode::Set,
        b"e",
        0,
        10,
        b"v",
        None,
        &StoreOpts::default(),
        NOW,
    )
    .unwrap();
    assert!(c.get(b"e", NOW + 9).unwrap().is_some());
    assert!(c.get(b"e", NOW + 10).unwrap().is_none());
    c.settle(true);
    assert_eq!(sh.items(), 0, "expired item removed lazily");
    c.store(
        StoreMode::Set,
        b"e",
        0,
        10,
        b"v",
        None,
        &StoreOpts::default(),
        NOW,
    )
    .unwrap();
    assert_eq!(
        c.touch(b"e", 100, NOW).unwrap().unwrap().ttl(NOW),
        Some(100)
    );
    assert!(c.get(b"e", NOW + 50).unwrap().is_some());
    assert!(c.touch(b"nope", 1, NOW).unwrap().is_none());
    // Negative exptime: stored but never visible, and the old value is gone.
    c.store(
        StoreMode::Set,
        b"e",
        0,
        -1,
        b"w",
        None,
        &StoreOpts::default(),
        NOW,
    )
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
    c.store(
        StoreMode::Set,
        b"c",
        0,
        0,
        b"3",
        None,
        &StoreOpts::default(),
        NOW + 6,
    )
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
            c.delete(b"old", None, &DeleteOpts::default(), NOW).unwrap(),
            DeleteOutcome::Deleted
        );
        assert!(c.get(b"old", NOW).unwrap().is_none());
        c.kv().commit().unwrap();
    }
    assert!(m.0.contains_key(&b"ka"[..]));
    assert!(!m.0.contains_key(&b"kold"[..]));
    let it = Item::decode(b"ka", &m.0[&b"ka"[..]]).unwrap();
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
    assert_eq!(m.0.len(), 50 + 2, "the items, the CAS mark, the format");
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
            let r = c.store(
                StoreMode::Set,
                &key(i),
                0,
                0,
                &value,
                None,
                &StoreOpts::default(),
                NOW,
            );
            assert!(matches!(r, Ok(StoreOutcome::Stored(_))), "{i}: {r:?}");
            c.settle(true);
        }
        assert!(c.get(&key(99), NOW).unwrap().is_some());
        assert!(c.get(&key(0), NOW).unwrap().is_none());
    }
    let evicted = sh.stats.evictions.load(Relaxed);
    assert!(evicted >= 80, "{evicted}");
    // The map also holds the CAS mark and the format record.
    assert_eq!(sh.items() as usize, m.0.len() - 2);
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
            let r = c.store(
                StoreMode::Set,
                &key(i),
                0,
                0,
                &value,
                None,
                &StoreOpts::default(),
                NOW,
            );
            assert!(matches!(r, Ok(StoreOutcome::Stored(_))), "{i}: {r:?}");
            c.settle(true);
        }
        assert!(c.get(&key(15), NOW).unwrap().is_some());
    }
    // The map also holds the CAS mark and the format record.
    assert_eq!(sh.items() as usize, m.0.len() - 2);
    assert_eq!(sh.items() + sh.stats.evictions.load(Relaxed), 16);
}

// ------------------------------------------------- meta: stale and win

fn mg<'a>(order: &'a [u8]) -> MetaGet<'a> {
    MetaGet {
        order,
        ..MetaGet::default()
    }
}

/// (win W, token already sent Z, stale X) of a meta get hit.
fn wzx(h: &MetaHit) -> (bool, bool, bool) {
    (h.win, h.token_sent, h.item.stale)
}

fn set_ttl(c: &mut impl Store, k: &[u8], v: &[u8], ttl: i64) -> u64 {
    match c
        .store(
            StoreMode::Set,
            k,
            0,
            ttl,
            v,
            None,
            &StoreOpts::default(),
            NOW,
        )
        .unwrap()
    {
        StoreOutcome::Stored(cas) => cas,
        o => panic!("{o:?}"),
    }
}

#[test]
fn meta_get_vivifies_on_a_miss_and_only_the_first_client_wins() {
    let mut m = Mem::default();
    let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
    let mut c = Cache::new(&mut m, &sh);
    assert_eq!(c.meta_get(b"v", &mg(b""), NOW).unwrap(), None);
    let viv = MetaGet {
        vivify: Some(30),
        ..mg(b"Nt")
    };
    let h = c.meta_get(b"v", &viv, NOW).unwrap().unwrap();
    assert!(h.created);
    assert_eq!(wzx(&h), (true, false, false));
    assert_eq!(h.item.data, b"");
    assert_eq!(h.echo_ttl, Some(30));
    // The next client finds the stub: Z, no W, no new item.
    let h = c.meta_get(b"v", &viv, NOW + 1).unwrap().unwrap();
    assert!(!h.created);
    assert_eq!(wzx(&h), (false, true, false));
    assert_eq!(h.echo_ttl, Some(29));
    // t before N reads the stub before N gave it its TTL (memcached: t-1).
    let h = c
        .meta_get(
            b"w",
            &MetaGet {
                vivify: Some(30),
                ..mg(b"tN")
            },
            NOW,
        )
        .unwrap()
        .unwrap();
    assert_eq!((h.win, h.echo_ttl), (true, None));
    assert_eq!(c.get(b"w", NOW).unwrap().unwrap().ttl(NOW), Some(30));
    // E gives the stub its CAS.
    let h = c
        .meta_get(
            b"e",
            &MetaGet {
                vivify: Some(0),
                new_cas: Some(4242),
                ..mg(b"")
            },
            NOW,
        )
        .unwrap()
        .unwrap();
    assert_eq!(h.item.cas, 4242);
    // A real store replaces the stub and clears the win.
    set_ttl(&mut c, b"v", b"fresh", 0);
    let h = c.meta_get(b"v", &viv, NOW).unwrap().unwrap();
    assert_eq!(wzx(&h), (false, false, false));
    assert_eq!(h.item.data, b"fresh");
}

#[test]
fn meta_get_recache_wins_below_the_ttl_in_request_order() {
    let mut m = Mem::default();
    let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
    let mut c = Cache::new(&mut m, &sh);
    set_ttl(&mut c, b"a", b"abc", 100);
    let r = |tok, order| MetaGet {
        recache: Some(tok),
        ..mg(order)
    };
    assert_eq!(
        wzx(&c.meta_get(b"a", &r(30, b""), NOW).unwrap().unwrap()),
        (false, false, false)
    );
    assert_eq!(
        wzx(&c.meta_get(b"a", &r(200, b""), NOW).unwrap().unwrap()),
        (true, false, false)
    );
    assert_eq!(
        wzx(&c.meta_get(b"a", &r(200, b""), NOW).unwrap().unwrap()),
        (false, true, false)
    );
    // No TTL: never wins.
    set_ttl(&mut c, b"n", b"x", 0);
    assert!(
        !c.meta_get(b"n", &r(1 << 20, b""), NOW)
            .unwrap()
            .unwrap()
            .win
    );
    // T then R: R sees the new TTL; R then T: the old one.
    set_ttl(&mut c, b"a", b"abc", 100);
    let tr = |order| MetaGet {
        touch: Some(10),
        recache: Some(40),
        ..mg(order)
    };
    assert!(!c.meta_get(b"a", &tr(b"RT"), NOW).unwrap().unwrap().win);
    set_ttl(&mut c, b"a", b"abc", 100);
    let h = c.meta_get(b"a", &tr(b"TR"), NOW).unwrap().unwrap();
    assert!(h.win);
    assert_eq!(h.item.ttl(NOW), Some(10));
    // t before T reports the TTL before the touch; the touch is kept.
    set_ttl(&mut c, b"a", b"abc", 100);
    let h = c
        .meta_get(
            b"a",
            &MetaGet {
                touch: Some(30),
                ..mg(b"tT")
            },
            NOW,
        )
        .unwrap()
        .unwrap();
    assert_eq!(h.echo_ttl, Some(100));
    assert_eq!(c.get(b"a", NOW).unwrap().unwrap().ttl(NOW), Some(30));
}

#[test]
fn meta_delete_invalidate_marks_stale_and_reopens_the_win() {
    let mut m = Mem::default();
    let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
    let mut c = Cache::new(&mut m, &sh);
    let cas = set_ttl(&mut c, b"a", b"abc", 100);
    c.meta_get(
        b"a",
        &MetaGet {
            recache: Some(200),
            ..mg(b"")
        },
        NOW,
    )
    .unwrap();
    let inv = |ttl| DeleteOpts {
        invalidate: true,
        ttl,
        ..DeleteOpts::default()
    };
    assert_eq!(
        c.delete(b"a", Some(cas + 99), &inv(None), NOW).unwrap(),
        DeleteOutcome::Exists
    );
    assert_eq!(
        c.delete(b"a", Some(cas), &inv(Some(30)), NOW).unwrap(),
        DeleteOutcome::Deleted
    );
    let it = c.get(b"a", NOW).unwrap().expect("I keeps the item");
    assert!(it.stale && !it.token_sent);
    assert!(it.cas > cas, "md I bumps the CAS");
    assert_eq!(it.ttl(NOW), Some(30));
    assert_eq!(it.data, b"abc");
    // The first fetch of a stale item wins; the next sees Z and X.
    assert_eq!(
        wzx(&c.meta_get(b"a", &mg(b""), NOW).unwrap().unwrap()),
        (true, false, true)
    );
    assert_eq!(
        wzx(&c.meta_get(b"a", &mg(b""), NOW).unwrap().unwrap()),
        (false, true, true)
    );
    // T without I is ignored: a plain delete.
    let plain = DeleteOpts {
        ttl: Some(30),
        ..DeleteOpts::default()
    };
    assert_eq!(
        c.delete(b"a", None, &plain, NOW).unwrap(),
        DeleteOutcome::Deleted
    );
    assert!(c.get(b"a", NOW).unwrap().is_none());
    assert_eq!(
        c.delete(b"a", None, &inv(None), NOW).unwrap(),
        DeleteOutcome::NotFound
    );
    // I with a TTL in the past: gone.
    set_ttl(&mut c, b"b", b"x", 0);
    c.delete(b"b", None, &inv(Some(-1)), NOW).unwrap();
    assert!(c.get(b"b", NOW).unwrap().is_none());
}

#[test]
fn meta_set_invalidate_stores_an_older_cas_as_stale() {
    let mut m = Mem::default();
    let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
    let mut c = Cache::new(&mut m, &sh);
    let cas = set_ttl(&mut c, b"a", b"old", 0);
    // A recache won before the late write arrives.
    let md = DeleteOpts {
        invalidate: true,
        ..DeleteOpts::default()
    };
    c.delete(b"a", None, &md, NOW).unwrap();
    c.meta_get(b"a", &mg(b""), NOW).unwrap();
    let cur = c.get(b"a", NOW).unwrap().unwrap().cas;
    let inv = StoreOpts {
        invalidate: true,
        ..StoreOpts::default()
    };
    let ms = |c: &mut Cache<'_, _>, v: &[u8], cas_in, ttl, o: &StoreOpts| {
        c.store(StoreMode::Cas, b"a", 3, ttl, v, Some(cas_in), o, NOW)
            .unwrap()
    };
    // Without I an older CAS is refused; a newer one is refused with I.
    assert_eq!(
        ms(&mut c, b"x", cas, 0, &StoreOpts::default()),
        StoreOutcome::Exists
    );
    assert_eq!(ms(&mut c, b"x", cur + 1, 0, &inv), StoreOutcome::Exists);
    // Older with I: stored, stale, old exptime and win state kept.
    let StoreOutcome::Stored(new) = ms(&mut c, b"late", cas, 100, &inv) else {
        panic!()
    };
    assert!(new > cur);
    let it = c.get(b"a", NOW).unwrap().unwrap();
    assert_eq!(it.data, b"late");
    assert_eq!(it.flags, 3);
    assert!(it.stale && it.token_sent);
    assert_eq!(it.ttl(NOW), None, "the T of a stale store is ignored");
    // The matching CAS stores a fresh item.
    assert!(matches!(
        ms(&mut c, b"good", new, 0, &inv),
        StoreOutcome::Stored(_)
    ));
    let it = c.get(b"a", NOW).unwrap().unwrap();
    assert!(!it.stale && !it.token_sent);
    // ms N: an append that misses creates the item.
    let viv = StoreOpts {
        vivify: Some(50),
        ..StoreOpts::default()
    };
    let r = c
        .store(StoreMode::Append, b"ap", 0, 0, b"x", None, &viv, NOW)
        .unwrap();
    assert!(matches!(r, StoreOutcome::Stored(_)));
    assert_eq!(c.get(b"ap", NOW).unwrap().unwrap().ttl(NOW), Some(50));
}

/// The win and the stale mark are item fields like the value: a restart
/// (any crash after the reply) keeps them, so no second client can win the
/// same recache.
#[test]
fn stale_and_win_survive_a_restart() {
    let mut m = Mem::default();
    {
        let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
        let mut c = Cache::new(Group::new(&mut m), &sh);
        set_ttl(&mut c, b"a", b"abc", 0);
        set_ttl(&mut c, b"s", b"abc", 0);
        set_ttl(&mut c, b"r", b"abc", 100);
        c.kv().begin();
        let r = MetaGet {
            recache: Some(200),
            ..mg(b"")
        };
        assert!(c.meta_get(b"r", &r, NOW).unwrap().unwrap().win);
        let viv = MetaGet {
            vivify: Some(0),
            ..mg(b"")
        };
        assert!(c.meta_get(b"v", &viv, NOW).unwrap().unwrap().win);
        let md = DeleteOpts {
            invalidate: true,
            ..DeleteOpts::default()
        };
        c.delete(b"s", None, &md, NOW).unwrap();
        c.kv().commit().unwrap();
    }
    let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
    let mut c = Cache::new(&mut m, &sh);
    let viv = MetaGet {
        vivify: Some(0),
        ..mg(b"")
    };
    assert_eq!(
        wzx(&c.meta_get(b"v", &viv, NOW).unwrap().unwrap()),
        (false, true, false)
    );
    assert_eq!(
        wzx(&c.meta_get(b"s", &mg(b""), NOW).unwrap().unwrap()),
        (true, false, true)
    );
    assert_eq!(
        wzx(&c.meta_get(b"a", &mg(b""), NOW).unwrap().unwrap()),
        (false, false, false)
    );
    let r = MetaGet {
        recache: Some(200),
        ..mg(b"")
    };
    assert_eq!(
        wzx(&c.meta_get(b"r", &r, NOW).unwrap().unwrap()),
        (false, true, false),
        "a recache won before the restart is won again"
    );
}

/// Unknown state bits are damage, not a panic; marked state roundtrips.
#[test]
fn unknown_state_bits_are_damage() {
    let it = Item {
        flags: 7,
        exptime: 0,
        cas: 99,
        time: NOW,
        stale: false,
        token_sent: false,
        data: b"val".to_vec(),
    };
    let mut re = Vec::new();
    let mut marked = it.clone();
    marked.stale = true;
    marked.token_sent = true;
    marked.encode(b"kx", &mut re);
    assert_eq!(re[27], 3);
    assert_eq!(Item::decode(b"kx", &re).unwrap(), marked);
    for bit in 2..8 {
        let mut bad = Item {
            stale: false,
            token_sent: false,
            ..marked.clone()
        };
        bad.data = b"val".to_vec();
        bad.encode(b"kx", &mut re);
        re[27] = 1 << bit;
        // Refused before the checksum is even looked at.
        assert!(matches!(
            Item::decode_header_unverified(b"kx", &re),
            Err(StoreError::Damaged {
                reason: "unknown item state bits",
                ..
            })
        ));
    }
}

/// A map the first item format filled (no checksums, no `\0fmt` record)
/// is refused with a typed error at open, whether its items reserved CAS
/// ids (`\0cas`) or were all given theirs by the client; so is a map with
/// another format record. A new map gets the record before any item.
#[test]
fn an_old_format_map_is_refused_and_a_new_one_is_marked() {
    let mut old = Vec::new();
    old.extend_from_slice(&7u32.to_le_bytes());
    old.extend_from_slice(&0u64.to_le_bytes());
    old.extend_from_slice(&99u64.to_le_bytes());
    old.extend_from_slice(&NOW.to_le_bytes());
    old.extend_from_slice(b"val");
    let mut m = Mem::default();
    m.0.insert(b"kfoo".to_vec(), old.clone());
    let e = Shared::open(&mut &mut m, 1 << 20).unwrap_err();
    assert!(matches!(e, StoreError::Format { .. }), "{e}");
    assert!(e.to_string().contains("item format 1"), "{e}");
    assert!(!m.0.contains_key(META_FORMAT), "the old map was written");
    m.0.insert(META_CAS.to_vec(), (1u64 << 16).to_le_bytes().to_vec());
    m.0.remove(&b"kfoo"[..]);
    assert!(matches!(
        Shared::open(&mut &mut m, 1 << 20),
        Err(StoreError::Format { .. })
    ));
    let mut m = Mem::default();
    m.0.insert(META_FORMAT.to_vec(), b"FRSRVIT9".to_vec());
    let e = Shared::open(&mut &mut m, 1 << 20).unwrap_err();
    assert!(e.to_string().contains("FRSRVIT9"), "{e}");
    let mut m = Mem::default();
    Shared::open(&mut &mut m, 1 << 20).unwrap();
    assert_eq!(m.0[META_FORMAT], FORMAT);
    Shared::open(&mut &mut m, 1 << 20).unwrap();
}

/// A damaged item: every command that reads it gets the typed error
/// naming the key (get, gat, meta get, append, cas, incr, delete with a
/// CAS); other keys are untouched; a plain set or delete repairs it.
#[test]
fn a_damaged_item_is_an_error_for_its_key_alone() {
    let mut m = Mem::default();
    let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
    {
        let mut c = Cache::new(&mut m, &sh);
        set(&mut c, StoreMode::Set, b"bad", b"12", None);
        set(&mut c, StoreMode::Set, b"good", b"34", None);
    }
    let v = m.0.get_mut(&b"kbad"[..]).unwrap();
    *v.last_mut().unwrap() ^= 0x10;
    let mut c = Cache::new(&mut m, &sh);
    let damaged = |r: Result<()>| match r {
        Err(StoreError::Damaged { key, reason }) => {
            assert_eq!((key.as_str(), reason), ("bad", "checksum mismatch"))
        }
        other => panic!("{other:?}"),
    };
    let o = StoreOpts::default();
    damaged(c.get(b"bad", NOW).map(|_| ()));
    damaged(c.touch(b"bad", 100, NOW).map(|_| ()));
    damaged(c.peek(b"bad", NOW).map(|_| ()));
    damaged(c.meta_get(b"bad", &mg(b""), NOW).map(|_| ()));
    damaged(
        c.store(StoreMode::Append, b"bad", 0, 0, b"x", None, &o, NOW)
            .map(|_| ()),
    );
    damaged(
        c.store(StoreMode::Add, b"bad", 0, 0, b"x", None, &o, NOW)
            .map(|_| ()),
    );
    damaged(
        c.store(StoreMode::Cas, b"bad", 0, 0, b"x", Some(1), &o, NOW)
            .map(|_| ()),
    );
    damaged(
        c.store(StoreMode::Set, b"bad", 0, 0, b"x", Some(1), &o, NOW)
            .map(|_| ()),
    );
    let incr = Arith {
        incr: true,
        delta: 1,
        create: None,
        cas: None,
        ttl: None,
        new_cas: None,
        order: b"",
    };
    damaged(c.arith(b"bad", incr, NOW).map(|_| ()));
    damaged(
        c.delete(b"bad", Some(1), &DeleteOpts::default(), NOW)
            .map(|_| ()),
    );
    assert_eq!(c.get(b"good", NOW).unwrap().unwrap().data, b"34");
    // Nothing above wrote over the damage.
    damaged(c.get(b"bad", NOW).map(|_| ()));
    assert!(matches!(
        set(&mut c, StoreMode::Set, b"bad", b"56", None),
        StoreOutcome::Stored(_)
    ));
    assert_eq!(c.get(b"bad", NOW).unwrap().unwrap().data, b"56");
    let mut n = 0;
    {
        let mut kv = &mut m;
        let r = verify_items(&mut kv).unwrap();
        assert!(r.damaged.is_empty());
        n += r.items;
    }
    assert_eq!(n, 2);
    let v = m.0.get_mut(&b"kgood"[..]).unwrap();
    v[0] ^= 1;
    {
        let mut kv = &mut m;
        let r = verify_items(&mut kv).unwrap();
        assert_eq!(r.damaged, vec![("good".to_string(), "checksum mismatch")]);
        assert_eq!(r.items, 1);
    }
    let mut c = Cache::new(&mut m, &sh);
    assert_eq!(
        c.delete(b"good", None, &DeleteOpts::default(), NOW)
            .unwrap(),
        DeleteOutcome::Deleted
    );
    assert!(c.get(b"good", NOW).unwrap().is_none());
}

/// With verification off (the cost measurement only) a damaged item's
/// bytes would be returned: what the checksum guards against.
#[test]
fn verification_off_returns_what_the_checksum_would_refuse() {
    let mut m = Mem::default();
    let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
    set(
        &mut Cache::new(&mut m, &sh),
        StoreMode::Set,
        b"a",
        b"xy",
        None,
    );
    *m.0.get_mut(&b"ka"[..]).unwrap().last_mut().unwrap() = b'z';
    let mut c = Cache::new(&mut m, &sh);
    assert!(c.get(b"a", NOW).is_err());
    sh.set_verify(false);
    assert_eq!(c.get(b"a", NOW).unwrap().unwrap().data, b"xz");
}

/// `h`: a fetch (meta get without `u`, text get, touch) marks the item; a
/// new value clears the mark, an in-place change (a win, md I) keeps it.
#[test]
fn fetched_follows_memcached() {
    let mut m = Mem::default();
    let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
    let mut c = Cache::new(&mut m, &sh);
    let h = |c: &mut Cache<'_, _>, k: &[u8], no_bump| {
        let g = MetaGet { no_bump, ..mg(b"") };
        c.meta_get(k, &g, NOW).unwrap().unwrap().fetched
    };
    set_ttl(&mut c, b"a", b"x", 100);
    assert!(!h(&mut c, b"a", true), "u does not mark");
    assert!(!h(&mut c, b"a", false));
    assert!(h(&mut c, b"a", false));
    set_ttl(&mut c, b"a", b"y", 100);
    assert!(!h(&mut c, b"a", false), "a new value is unfetched");
    // A recache win rewrites the item: still fetched.
    let r = MetaGet {
        recache: Some(200),
        ..mg(b"")
    };
    assert!(c.meta_get(b"a", &r, NOW).unwrap().unwrap().win);
    assert!(h(&mut c, b"a", false));
    let md = DeleteOpts {
        invalidate: true,
        ..DeleteOpts::default()
    };
    c.delete(b"a", None, &md, NOW).unwrap();
    assert!(h(&mut c, b"a", false), "md I keeps the mark");
    set_ttl(&mut c, b"g", b"x", 0);
    c.get(b"g", NOW).unwrap();
    assert!(h(&mut c, b"g", false), "a text get marks");
    set_ttl(&mut c, b"t", b"x", 0);
    assert!(!c.peek(b"t", NOW).unwrap().unwrap().1);
    assert!(!c.peek(b"t", NOW).unwrap().unwrap().1, "me does not mark");
    c.touch(b"t", 50, NOW).unwrap();
    assert!(c.peek(b"t", NOW).unwrap().unwrap().1, "a touch marks");
}

/// mg `u` reads without bumping the item for eviction; a plain mg bumps it.
#[test]
fn meta_get_u_does_not_save_an_item_from_eviction() {
    let mut m = Mem::default();
    let value = vec![b'v'; 100];
    let per = charge(1 + key(0).len(), HEADER + value.len());
    let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
    let mut c = Cache::with_budget(&mut m, &sh, 2 * per, false);
    for no_bump in [true, false] {
        set(&mut c, StoreMode::Set, &key(0), &value, None);
        set(&mut c, StoreMode::Set, &key(1), &value, None);
        c.settle(true);
        let g = MetaGet { no_bump, ..mg(b"") };
        assert!(c.meta_get(&key(0), &g, NOW).unwrap().is_some());
        // A third item evicts the oldest unreferenced one.
        set(&mut c, StoreMode::Set, &key(2), &value, None);
        c.settle(true);
        let kept0 = c.get(&key(0), NOW).unwrap().is_some();
        assert_eq!(kept0, !no_bump, "u = {no_bump}");
        for i in 0..3 {
            c.delete(&key(i), None, &DeleteOpts::default(), NOW)
                .unwrap();
        }
        c.settle(true);
    }
}

/// Every item value put through it, in order, over a [`Mem`].
struct Recorded<'m>(&'m mut Mem, Vec<(Vec<u8>, Vec<u8>)>);

impl Kv for Recorded<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        (&mut *self.0).get_into(key, out)
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        if key.starts_with(b"k") {
            self.1.push((key.to_vec(), value.to_vec()));
        }
        (&mut *self.0).put(key, value)
    }
    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        (&mut *self.0).delete(key)
    }
    fn batch(&mut self, ops: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<()> {
        (&mut *self.0).batch(ops)
    }
    fn scan_prefix(&mut self, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        (&mut *self.0).scan_prefix(prefix, f)
    }
}

/// The planted bug (`ferrite check server-items-planted`) writes an item
/// first with a zero checksum, then whole: the first write, which a crash
/// between the two leaves durable, does not verify. Unplanted, every
/// write of an item verifies.
#[test]
fn the_planted_late_checksum_writes_an_item_that_does_not_verify() {
    for fault in [ItemFault::None, ItemFault::ChecksumLate] {
        let mut m = Mem::default();
        let sh = Shared::open(&mut &mut m, 1 << 20).unwrap();
        let mut c = Cache::new(Recorded(&mut m, Vec::new()), &sh);
        c.plant(fault);
        assert!(matches!(
            set(&mut c, StoreMode::Set, b"a", b"value", None),
            StoreOutcome::Stored(_)
        ));
        let puts = std::mem::take(&mut c.kv().1);
        let bad = puts
            .iter()
            .filter(|(k, v)| verify_item(k, v).is_err())
            .count();
        match fault {
            ItemFault::None => assert_eq!((puts.len(), bad), (1, 0)),
            ItemFault::ChecksumLate => {
                assert_eq!((puts.len(), bad), (2, 1));
                assert!(verify_item(&puts[1].0, &puts[1].1).is_ok());
            }
        }
    }
}
