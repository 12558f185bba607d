//! Tests of the in-place engine: operations on both allocators, sizes,
//! refusals, a full pool, reopen, a randomized model, threads, block
//! accounting, fences per operation and a crash exploration with the
//! planted faults.

use super::Fault;
use super::tree::{LEAF_BYTES, TUPLE_HDR};
use crate::{AllocKind, EngineError, EngineKind, LAYOUT, Op, Store, StoreOptions};
use ferrite_crash::explorer::{Config, Explorer, SimRun};
use ferrite_pmem::{Domain, Pool, PoolOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// An allocator, and whether the store uses the intent protocol on it
/// (as it must on an allocator that cannot prepare, PMDK's, which the
/// crash simulator cannot run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct M {
    a: AllocKind,
    intent: bool,
}

impl From<AllocKind> for M {
    fn from(a: AllocKind) -> M {
        M { a, intent: false }
    }
}

impl std::fmt::Display for M {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.a, if self.intent { "+intent" } else { "" })
    }
}

/// Both allocators, each with both protocols.
fn modes() -> Vec<M> {
    AllocKind::ALL
        .iter()
        .flat_map(|&a| [M { a, intent: false }, M { a, intent: true }])
        .collect()
}

fn opts(m: impl Into<M>) -> StoreOptions {
    let m = m.into();
    let mut o = StoreOptions::new(EngineKind::Inp)
        .allocator(m.a)
        .nonce(7)
        .sessions(6);
    o.inp.log_bytes = 64 << 10;
    o.inp.intent_allocs = m.intent;
    o
}

fn pool(size: u64) -> Pool {
    Pool::create_in_memory(&PoolOptions::new(LAYOUT, size).domain(Domain::Adr)).unwrap()
}

/// The pool as it is now, opened afresh (what a restart sees, with every
/// store having reached the medium).
fn reimage(p: &Pool) -> Pool {
    let size = p.image().len() as u64;
    Pool::open_image(
        &p.image(),
        &PoolOptions::new(LAYOUT, size),
        Domain::Adr,
        None,
    )
    .unwrap()
}

/// walk() agrees with the model and with the allocator's block set.
fn check(store: &Store, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    store.quiesce().unwrap();
    let w = store.walk().unwrap();
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(w.entries.len(), want.len(), "key count");
    assert!(w.entries == want, "contents differ from the model");
    check_blocks(store);
    assert_eq!(store.stats().keys, model.len() as u64);
}

fn check_blocks(store: &Store) {
    let w = store.walk().unwrap();
    crate::checks::blocks_match(store, &w).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn basic_operations_on_both_allocators() {
    for a in modes() {
        let p = pool(8 << 20);
        let store = Store::create(&p, &opts(a)).unwrap();
        let mut s = store.session().unwrap();
        assert_eq!(s.get(b"a").unwrap(), None);
        assert!(s.scan(b"", 10).unwrap().is_empty());
        s.put(b"apple", b"red").unwrap();
        s.put(b"banana", b"yellow").unwrap();
        s.put(b"cherry", b"dark red").unwrap();
        assert_eq!(s.get(b"apple").unwrap().as_deref(), Some(&b"red"[..]));
        // In place (fits), then larger than the block (a new tuple).
        s.put(b"apple", b"green").unwrap();
        assert_eq!(s.get(b"apple").unwrap().as_deref(), Some(&b"green"[..]));
        s.put(b"apple", &[9u8; 3000]).unwrap();
        assert_eq!(s.get(b"apple").unwrap().unwrap(), vec![9u8; 3000]);
        s.put(b"apple", b"").unwrap();
        assert_eq!(s.get(b"apple").unwrap().as_deref(), Some(&b""[..]));
        assert!(s.delete(b"banana").unwrap());
        assert!(!s.delete(b"banana").unwrap());
        assert_eq!(s.get(b"banana").unwrap(), None);
        s.batch(&[
            Op::Put {
                key: b"d",
                value: b"1",
            },
            Op::Delete { key: b"cherry" },
            Op::Put {
                key: b"e",
                value: b"2",
            },
            Op::Put {
                key: b"d",
                value: b"3",
            },
            Op::Delete { key: b"e" },
        ])
        .unwrap();
        let got = s.scan(b"", 100).unwrap();
        let want: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (b"apple".to_vec(), b"".to_vec()),
            (b"d".to_vec(), b"3".to_vec()),
        ];
        assert_eq!(got, want, "{a}");
        assert_eq!(s.scan(b"b", 1).unwrap(), want[1..].to_vec());
        drop(s);
        let model: BTreeMap<_, _> = want.into_iter().collect();
        check(&store, &model);
        let st = store.stats();
        assert!(st.detail.contains("in-place updates 2"), "{}", st.detail);
    }
}

#[test]
fn sizes_and_refusals() {
    for a in modes() {
        let p = pool(16 << 20);
        let store = Store::create(&p, &opts(a)).unwrap();
        let mut s = store.session().unwrap();
        let mut model = BTreeMap::new();
        for (i, kl) in [1usize, 7, 8, 9, 100, 1024].into_iter().enumerate() {
            for vl in [0usize, 1, 63, 1000, 65536, crate::MAX_VALUE] {
                let mut k = vec![b'k'; kl];
                k[0] = i as u8;
                k[kl - 1] = (vl % 251) as u8;
                let v: Vec<u8> = (0..vl).map(|j| (j * 7 + kl) as u8).collect();
                s.put(&k, &v).unwrap();
                model.insert(k, v);
            }
        }
        for (k, v) in &model {
            assert_eq!(s.get(k).unwrap().as_ref(), Some(v));
        }
        // Refusals change nothing.
        assert!(matches!(s.put(b"", b"x"), Err(EngineError::KeySize { .. })));
        assert!(matches!(
            s.put(&[1u8; 1025], b"x"),
            Err(EngineError::KeySize { .. })
        ));
        assert!(matches!(
            s.put(b"x", &vec![0u8; crate::MAX_VALUE + 1]),
            Err(EngineError::ValueSize { .. })
        ));
        assert!(matches!(
            s.batch(&[
                Op::Put {
                    key: b"ok",
                    value: b"1"
                },
                Op::Put {
                    key: &[2u8; 2000],
                    value: b"1"
                },
            ]),
            Err(EngineError::KeySize { .. })
        ));
        assert!(matches!(s.get(b""), Err(EngineError::KeySize { .. })));
        assert!(s.get(b"ok").unwrap().is_none());
        // Shrink every value in place, then grow some out of place.
        for (k, v) in model.iter_mut() {
            v.truncate(v.len() / 3);
            s.put(k, v).unwrap();
        }
        drop(s);
        check(&store, &model);
        drop(store);
        let p2 = reimage(&p);
        let store = Store::open(&p2, &opts(a)).unwrap();
        check(&store, &model);
    }
}

/// Leaves of a quiesced store (its walk's blocks of a leaf's size).
fn leaf_count(store: &Store) -> usize {
    let w = store.walk().unwrap();
    w.blocks.iter().filter(|b| b.1 == LEAF_BYTES as u64).count()
}

#[test]
fn ascending_inserts_fill_leaves_to_seven_eighths_and_others_split_in_the_middle() {
    for a in modes() {
        let p = pool(32 << 20);
        let store = Store::create(&p, &opts(a)).unwrap();
        let mut s = store.session().unwrap();
        let mut model = BTreeMap::new();
        // Ascending, one key per transaction and then in one batch.
        for i in 0..1000u32 {
            let k = format!("asc{i:06}").into_bytes();
            s.put(&k, b"v").unwrap();
            model.insert(k, b"v".to_vec());
        }
        let batch: Vec<(Vec<u8>, Vec<u8>)> = (1000..3000u32)
            .map(|i| (format!("asc{i:06}").into_bytes(), b"w".to_vec()))
            .collect();
        let ops: Vec<Op<'_>> = batch
            .iter()
            .map(|(k, v)| Op::Put { key: k, value: v })
            .collect();
        s.batch(&ops).unwrap();
        model.extend(batch.iter().cloned());
        drop(s);
        store.quiesce().unwrap();
        // Leaves 7/8 full: 3000 keys in 28 of 32 slots (108 leaves), where
        // full ones would be 94 and splits in the middle leave ~188.
        let leaves = leaf_count(&store);
        assert!(
            (3000 / 32 + 2..=3000 / 28 + 1).contains(&leaves),
            "{leaves} leaves"
        );
        assert!(store.stats().detail.contains("of them appends"));
        check(&store, &model);
        // A random put after the load finds room: one key into each of 50
        // leaves splits none of them.
        let splits = |store: &Store| {
            let d = store.stats().detail;
            let at = d.find("leaf splits ").expect("split count") + "leaf splits ".len();
            d[at..].split(' ').next().unwrap().parse::<u64>().unwrap()
        };
        let before = splits(&store);
        let mut s = store.session().unwrap();
        for i in 0..50u32 {
            let k = format!("asc{:06}m", 1000 + 40 * i).into_bytes();
            s.put(&k, b"m").unwrap();
            model.insert(k, b"m".to_vec());
        }
        drop(s);
        assert_eq!(splits(&store), before);
        check(&store, &model);
        // Descending and random keys below: splits in the middle, the
        // order and every key intact.
        let mut s = store.session().unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        for i in (0..1000u32).rev() {
            let k = format!("a{i:06}").into_bytes();
            s.put(&k, b"d").unwrap();
            model.insert(k, b"d".to_vec());
            let r = format!("asc{:06}x", rng.random_range(0..3000u32)).into_bytes();
            s.put(&r, b"r").unwrap();
            model.insert(r, b"r".to_vec());
        }
        let all = s.scan(b"", usize::MAX).unwrap();
        assert!(all.iter().map(|(k, v)| (k, v)).eq(model.iter()));
        drop(s);
        check(&store, &model);
        drop(store);
        let store = Store::open(&reimage(&p), &opts(a)).unwrap();
        check(&store, &model);
    }
}

#[test]
fn splits_scan_order_and_reopen() {
    for a in modes() {
        let p = pool(32 << 20);
        let store = Store::create(&p, &opts(a)).unwrap();
        let mut s = store.session().unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut model = BTreeMap::new();
        for _ in 0..4000 {
            let k = format!("key{:06}", rng.random_range(0..20_000u32)).into_bytes();
            let v = vec![k[5]; rng.random_range(0..40)];
            s.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        let all = s.scan(b"", usize::MAX).unwrap();
        assert!(all.iter().map(|(k, v)| (k, v)).eq(model.iter()));
        let from = b"key01".to_vec();
        let got = s.scan(&from, 50).unwrap();
        let want: Vec<_> = model
            .range(from.clone()..)
            .take(50)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(got, want);
        assert!(store.stats().detail.contains("leaf splits"));
        drop(s);
        check(&store, &model);
        drop(store);
        let p2 = reimage(&p);
        let store = Store::open(&p2, &opts(a)).unwrap();
        assert_eq!(store.recovery().keys, model.len() as u64);
        check(&store, &model);
    }
}

#[test]
fn emptied_leaves_are_freed() {
    for a in modes() {
        let p = pool(16 << 20);
        let store = Store::create(&p, &opts(a)).unwrap();
        let mut s = store.session().unwrap();
        let mut model = BTreeMap::new();
        for i in 0..2000u32 {
            let k = format!("q{i:05}").into_bytes();
            s.put(&k, b"v").unwrap();
            model.insert(k, b"v".to_vec());
        }
        let before = store.walk().unwrap().blocks.len();
        // Delete all but every 200th key, one by one and in batches.
        let doomed: Vec<Vec<u8>> = model
            .keys()
            .enumerate()
            .filter(|(i, _)| i % 200 != 0)
            .map(|(_, k)| k.clone())
            .collect();
        for k in &doomed[..1000] {
            assert!(s.delete(k).unwrap());
        }
        for chunk in doomed[1000..].chunks(100) {
            let ops: Vec<Op<'_>> = chunk.iter().map(|k| Op::Delete { key: k }).collect();
            s.batch(&ops).unwrap();
        }
        for k in &doomed {
            model.remove(k);
        }
        drop(s);
        check(&store, &model);
        let after = store.walk().unwrap().blocks.len();
        assert!(
            after < before - doomed.len() - 50,
            "{a}: {before} -> {after} blocks"
        );
        assert!(store.stats().detail.contains("empty leaves freed"));
        // The tree still takes inserts everywhere.
        let mut s = store.session().unwrap();
        for i in 0..2000u32 {
            let k = format!("q{:05}", (i * 7) % 2000).into_bytes();
            s.put(&k, b"w").unwrap();
            model.insert(k, b"w".to_vec());
        }
        drop(s);
        check(&store, &model);
    }
}

#[test]
fn long_keys_split_inner_nodes_by_bytes() {
    let p = pool(64 << 20);
    let store = Store::create(&p, &opts(AllocKind::Ferrite)).unwrap();
    let mut s = store.session().unwrap();
    let mut model = BTreeMap::new();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for i in 0..3000u32 {
        // Long shared prefixes make separators near 1 KiB long.
        let mut k = vec![b'x'; 1000];
        let n = rng.random_range(0..1_000_000u32);
        k.extend_from_slice(format!("{n:08}{i:06}").as_bytes());
        k.truncate(crate::MAX_KEY);
        s.put(&k, b"v").unwrap();
        model.insert(k, b"v".to_vec());
    }
    drop(s);
    check(&store, &model);
}

#[test]
fn full_pool_then_delete_then_put() {
    for a in modes() {
        let p = pool(4 << 20);
        let store = Store::create(&p, &opts(a)).unwrap();
        let mut s = store.session().unwrap();
        let mut model = BTreeMap::new();
        let mut full = false;
        for i in 0..100_000u32 {
            let k = format!("k{i:07}").into_bytes();
            match s.put(&k, &[1u8; 1000]) {
                Ok(()) => {
                    model.insert(k, vec![1u8; 1000]);
                }
                Err(EngineError::Full(_)) => {
                    full = true;
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(full, "{a}: never full");
        // A big value cannot fit either; the store stays consistent.
        assert!(matches!(
            s.put(b"big", &vec![0u8; 1 << 20]),
            Err(EngineError::Full(_))
        ));
        assert!(s.get(b"big").unwrap().is_none());
        let victims: Vec<_> = model.keys().take(3).cloned().collect();
        for k in &victims {
            assert!(s.delete(k).unwrap());
            model.remove(k);
        }
        s.put(b"after", &[2u8; 1000]).unwrap();
        model.insert(b"after".to_vec(), vec![2u8; 1000]);
        drop(s);
        check(&store, &model);
    }
}

#[test]
fn randomized_against_a_model_with_reopens() {
    for a in modes() {
        let mut p = pool(16 << 20);
        let mut store = Some(Store::create(&p, &opts(a)).unwrap());
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for round in 0..6 {
            {
                let st = store.as_ref().unwrap();
                let mut s = st.session().unwrap();
                for _ in 0..600 {
                    let k = format!("{:x}", rng.random_range(0..400u32)).into_bytes();
                    match rng.random_range(0..10) {
                        0..=4 => {
                            let v = vec![rng.random::<u8>(); rng.random_range(0..300)];
                            s.put(&k, &v).unwrap();
                            model.insert(k, v);
                        }
                        5..=6 => {
                            assert_eq!(s.delete(&k).unwrap(), model.remove(&k).is_some());
                        }
                        7 => {
                            let mut ops = Vec::new();
                            let keys: Vec<Vec<u8>> = (0..rng.random_range(1..20))
                                .map(|_| format!("{:x}", rng.random_range(0..400u32)).into_bytes())
                                .collect();
                            let vals: Vec<Vec<u8>> = keys
                                .iter()
                                .map(|_| vec![rng.random::<u8>(); rng.random_range(0..100)])
                                .collect();
                            for (k, v) in keys.iter().zip(&vals) {
                                if rng.random_bool(0.3) {
                                    ops.push(Op::Delete { key: k });
                                } else {
                                    ops.push(Op::Put { key: k, value: v });
                                }
                            }
                            s.batch(&ops).unwrap();
                            for op in &ops {
                                match op {
                                    Op::Put { key, value } => {
                                        model.insert(key.to_vec(), value.to_vec());
                                    }
                                    Op::Delete { key } => {
                                        model.remove(*key);
                                    }
                                }
                            }
                        }
                        _ => {
                            assert_eq!(s.get(&k).unwrap().as_ref(), model.get(&k));
                        }
                    }
                }
            }
            check(store.as_ref().unwrap(), &model);
            // Restart: drop the store, reopen a copy of the image. Every
            // other round the copy is taken before the store settles, so
            // the last records are replayed.
            let img = if round % 2 == 0 {
                let i = reimage(&p);
                drop(store.take());
                i
            } else {
                drop(store.take());
                reimage(&p)
            };
            p = img;
            store = Some(Store::open(&p, &opts(a)).unwrap());
            check(store.as_ref().unwrap(), &model);
        }
    }
}

#[test]
fn threads_disjoint_and_overlapping_keys() {
    for a in modes() {
        let p = pool(32 << 20);
        let store = Store::create(&p, &opts(a)).unwrap();
        std::thread::scope(|sc| {
            for t in 0..4u8 {
                let store = &store;
                sc.spawn(move || {
                    let mut s = store.session().unwrap();
                    for i in 0..400u32 {
                        let own = format!("t{t}-{i:05}").into_bytes();
                        s.put(&own, &[t; 100]).unwrap();
                        let shared = format!("shared{:03}", i % 50).into_bytes();
                        s.put(&shared, &[t; 20]).unwrap();
                        if i % 3 == 0 {
                            assert!(s.delete(&own).unwrap());
                        }
                        let got = s.get(&shared).unwrap().unwrap();
                        assert_eq!(got.len(), 20);
                        assert!(got.iter().all(|&b| b == got[0] && b < 4));
                        let _ = s.scan(b"shared", 10).unwrap();
                    }
                });
            }
        });
        store.quiesce().unwrap();
        let w = store.walk().unwrap();
        let mut model = BTreeMap::new();
        for t in 0..4u8 {
            for i in 0..400u32 {
                if i % 3 != 0 {
                    model.insert(format!("t{t}-{i:05}").into_bytes(), vec![t; 100]);
                }
            }
        }
        let mut rest = 0;
        for (k, v) in &w.entries {
            if k.starts_with(b"shared") {
                rest += 1;
                assert_eq!(v.len(), 20);
            } else {
                assert_eq!(model.get(k), Some(v));
            }
        }
        assert_eq!(rest, 50);
        assert_eq!(w.entries.len(), model.len() + 50);
        check_blocks(&store);
    }
}

#[test]
fn session_limit() {
    let p = pool(4 << 20);
    let store = Store::create(&p, &opts(AllocKind::Lock).sessions(2)).unwrap();
    let a = store.session().unwrap();
    let _b = store.session().unwrap();
    assert!(matches!(
        store.session(),
        Err(EngineError::TooManySessions { max: 2 })
    ));
    drop(a);
    store.session().unwrap();
}

#[test]
fn corrupt_fixed_area_is_an_error() {
    let p = pool(4 << 20);
    let store = Store::create(&p, &opts(AllocKind::Ferrite)).unwrap();
    store.session().unwrap().put(b"k", b"v").unwrap();
    drop(store);
    // Open once (replaying and retiring the log), then corrupt the root.
    let p1 = reimage(&p);
    drop(Store::open(&p1, &opts(AllocKind::Ferrite)).unwrap());
    let p2 = reimage(&p1);
    // Point the root outside the heap.
    let area = ferrite_pmem::HEADER_SIZE + crate::superblock::SUPERBLOCK_BYTES;
    ferrite_pmem::Region::whole(p2.medium().clone()).store_u64(area + 8, 8);
    assert!(matches!(
        Store::open(&p2, &opts(AllocKind::Ferrite)),
        Err(EngineError::Corrupt(_))
    ));
}

#[test]
fn a_format_1_store_is_refused_with_a_typed_error() {
    let p = pool(4 << 20);
    let store = Store::create(&p, &opts(AllocKind::Ferrite)).unwrap();
    store.session().unwrap().put(b"k", b"v").unwrap();
    drop(store);
    // The fixed area's magic as a build before checksums wrote it.
    let area = ferrite_pmem::HEADER_SIZE + crate::superblock::SUPERBLOCK_BYTES;
    let r = ferrite_pmem::Region::whole(p.medium().clone());
    let mut m = [0u8; 8];
    r.read(area, &mut m);
    assert_eq!(&m, b"FRTINP03");
    r.write(area, b"FRTINP01");
    match Store::open(&p, &opts(AllocKind::Ferrite)) {
        Err(
            e @ EngineError::EngineFormat {
                found: 1,
                supported: 3,
                ..
            },
        ) => {
            assert!(e.to_string().contains("format version 1"), "{e}");
        }
        Err(e) => panic!("expected EngineFormat, got {e}"),
        Ok(_) => panic!("a format-1 store opened"),
    }
    // Anything else there is still corruption, not a version.
    r.write(area, b"FRTINPxx");
    assert!(matches!(
        Store::open(&p, &opts(AllocKind::Ferrite)),
        Err(EngineError::Corrupt(_))
    ));
}

#[test]
fn every_read_path_verifies_and_a_write_never_reseals_damage() {
    let p = pool(8 << 20);
    let store = Store::create(&p, &opts(AllocKind::Ferrite)).unwrap();
    let keys: Vec<Vec<u8>> = (0..400u32)
        .map(|i| format!("k{i:05}").into_bytes())
        .collect();
    {
        let mut s = store.session().unwrap();
        for k in &keys {
            s.put(k, &[b'v'; 300]).unwrap();
        }
    }
    store.quiesce().unwrap();
    // Damage the value of one key in place (its tuple's bytes).
    let victim = b"k00123";
    let img = p.image();
    let mut rec = victim.to_vec();
    rec.extend([b'v'; 300]);
    let at = img
        .windows(rec.len())
        .position(|w| w == rec.as_slice())
        .unwrap();
    let r = ferrite_pmem::Region::whole(p.medium().clone());
    r.write(at + victim.len() + 5, b"X");
    let is_damaged =
        |e: &EngineError| matches!(e, EngineError::DamagedValue { key, .. } if key == victim);
    // get, a reader, a snapshot, scans both ways: never the damaged bytes.
    assert!(is_damaged(&store.get(victim).unwrap_err()));
    let mut s = store.session().unwrap();
    assert!(is_damaged(&s.get(victim).unwrap_err()));
    assert!(s.scan(b"k00100", 100).is_err());
    assert!(s.scan(b"k00124", 100).unwrap().len() == 100);
    assert!(s.range(&crate::KeyRange::all().rev()).is_err());
    let mut snap = store.snapshot().unwrap();
    assert!(is_damaged(&snap.get(victim).unwrap_err()));
    drop(snap);
    // An update in place verifies the old tuple first: the damage is
    // reported, not sealed under a fresh checksum.
    assert!(is_damaged(&s.put(victim, &[b'w'; 300]).unwrap_err()));
    assert!(is_damaged(&s.get(victim).unwrap_err()));
    // A delete of the damaged key works (it reads nothing of the value).
    assert!(s.delete(victim).unwrap());
    assert_eq!(s.get(victim).unwrap(), None);
    // Damage a leaf: every key in it reads as an error, none absent.
    let damaged_leaf = {
        let w = store.walk().unwrap();
        let leaf = w
            .blocks
            .iter()
            .find(|b| b.1 == LEAF_BYTES as u64)
            .unwrap()
            .0;
        r.write(leaf as usize + 80, &[0xAB]);
        leaf
    };
    let mut errs = 0;
    for k in &keys {
        match s.get(k) {
            Ok(Some(v)) => assert_eq!(v, vec![b'v'; 300]),
            Ok(None) => assert_eq!(k.as_slice(), victim),
            Err(e) => {
                assert!(
                    e.to_string().contains(&format!("leaf {damaged_leaf:#x}")),
                    "{e}"
                );
                errs += 1;
            }
        }
    }
    assert!(errs > 0);
    // The scrub lists the leaf (with its keys' range), once.
    let sc = store.scrub(&mut |_| {}).unwrap();
    assert_eq!(sc.damaged.len(), 1, "{:?}", sc.damaged);
    assert_eq!(sc.damaged[0].off, damaged_leaf);
    assert_eq!(sc.records as usize + errs, keys.len() - 1);
}

/// Keys sharing their first 8 bytes (`user0000…`): every slot of a leaf
/// ties on the prefix, so lookups go by the fingerprints (format 3) or by
/// reading the tuples' keys (format 2).
fn shared_prefix_round_trip(p: &Pool) {
    let store = Store::open(p, &opts(AllocKind::Ferrite)).unwrap();
    let key = |i: u32| format!("user{i:012}").into_bytes();
    let mut s = store.session().unwrap();
    for i in 0..3000u32 {
        s.put(&key(i), &i.to_le_bytes()).unwrap();
    }
    for i in (0..3000u32).step_by(3) {
        assert!(s.delete(&key(i)).unwrap());
    }
    for i in (1..3000u32).step_by(3) {
        s.put(&key(i), &[b'x'; 40]).unwrap();
    }
    for i in 0..3000u32 {
        let want = match i % 3 {
            0 => None,
            1 => Some(vec![b'x'; 40]),
            _ => Some(i.to_le_bytes().to_vec()),
        };
        assert_eq!(s.get(&key(i)).unwrap(), want, "key {i}");
    }
    // Absent keys sharing the prefix, below, between and above.
    assert_eq!(s.get(b"user").unwrap(), None);
    assert_eq!(s.get(&key(3000)).unwrap(), None);
    assert_eq!(s.get(b"user000000000012x").unwrap(), None);
    assert_eq!(store.len().unwrap(), 2000);
    assert_eq!(store.walk().unwrap().entries.len(), 2000);
}

#[test]
fn keys_sharing_their_prefix_in_a_format_3_store() {
    let p = pool(16 << 20);
    drop(Store::create(&p, &opts(AllocKind::Ferrite)).unwrap());
    shared_prefix_round_trip(&p);
    // Every leaf carries fingerprints.
    let store = Store::open(&p, &opts(AllocKind::Ferrite)).unwrap();
    let leaves = leaf_copies(&store, &p);
    for (off, b) in &leaves {
        assert!(super::tree::leaf_has_fp(b), "leaf {off:#x}");
    }
    assert!(leaves.len() > 10, "{} leaves", leaves.len());
}

/// Every leaf the walk of `store` (on `p`) reaches: offset and bytes.
fn leaf_copies(store: &Store, p: &Pool) -> Vec<(u64, [u8; LEAF_BYTES])> {
    let r = ferrite_pmem::Region::whole(p.medium().clone());
    let mut leaves = Vec::new();
    for &(off, len) in &store.walk().unwrap().blocks {
        if len == LEAF_BYTES as u64 {
            let mut b = [0u8; LEAF_BYTES];
            r.read(off as usize, &mut b);
            if u32::from_le_bytes(b[8..12].try_into().unwrap()) == super::tree::MAGIC_LEAF {
                leaves.push((off, b));
            }
        }
    }
    leaves
}

/// A slot whose fingerprint is not its key's (a bug: the leaf's checksum
/// seals it) hides the key from lookups; the walk and the scrub, which
/// check every slot against its tuple's key, report it.
#[test]
fn the_walk_and_the_scrub_check_each_slots_fingerprint() {
    let p = pool(8 << 20);
    let store = Store::create(&p, &opts(AllocKind::Ferrite)).unwrap();
    let mut s = store.session().unwrap();
    for i in 0..100u32 {
        s.put(format!("user{i:08}").as_bytes(), b"v").unwrap();
    }
    drop(s);
    store.quiesce().unwrap();
    let leaf = store
        .walk()
        .unwrap()
        .blocks
        .iter()
        .find(|b| b.1 == LEAF_BYTES as u64)
        .unwrap()
        .0;
    let r = ferrite_pmem::Region::whole(p.medium().clone());
    let mut b = [0u8; LEAF_BYTES];
    r.read(leaf as usize, &mut b);
    let i = u64::from_le_bytes(b[..8].try_into().unwrap()).trailing_zeros() as usize;
    let at = 72 + 16 * i;
    let w = u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) ^ (1 << 50);
    b[at..at + 8].copy_from_slice(&w.to_le_bytes());
    super::tree::seal_node(super::log::seed(7), leaf, &mut b).unwrap();
    r.write(leaf as usize, &b);
    let t = super::tree::slot(&b, i).1;
    let mut key = vec![0u8; 12];
    r.read(t as usize + TUPLE_HDR, &mut key);
    drop(store);
    let store = Store::open(&reimage(&p), &opts(AllocKind::Ferrite)).unwrap();
    assert_eq!(store.get(&key).unwrap(), None, "the lookup misses it");
    let e = store.walk().unwrap_err().to_string();
    assert!(e.contains("fingerprint"), "{e}");
    let sc = store.scrub(&mut |_| {}).unwrap();
    assert_eq!(sc.damaged.len(), 1, "{:?}", sc.damaged);
    assert_eq!(sc.damaged[0].key.as_deref(), Some(key.as_slice()));
}

#[test]
fn a_format_2_store_is_read_written_and_kept_in_its_format() {
    let p = pool(16 << 20);
    drop(Store::create(&p, &opts(AllocKind::Ferrite)).unwrap());
    // An empty store as a format-2 build made it.
    let area = ferrite_pmem::HEADER_SIZE + crate::superblock::SUPERBLOCK_BYTES;
    let r = ferrite_pmem::Region::whole(p.medium().clone());
    r.write(area, b"FRTINP02");
    shared_prefix_round_trip(&p);
    let mut m = [0u8; 8];
    r.read(area, &mut m);
    assert_eq!(&m, b"FRTINP02");
    // No leaf has fingerprints: a format-2 build can go on with it.
    let store = Store::open(&p, &opts(AllocKind::Ferrite)).unwrap();
    for (off, b) in leaf_copies(&store, &p) {
        assert!(!super::tree::leaf_has_fp(&b), "leaf {off:#x}");
    }
}

#[test]
fn an_update_in_place_refuses_a_damaged_capacity() {
    let p = pool(8 << 20);
    let store = Store::create(&p, &opts(AllocKind::Ferrite)).unwrap();
    let mut s = store.session().unwrap();
    for i in 0..50u32 {
        s.put(format!("k{i:05}").as_bytes(), &[b'v'; 300]).unwrap();
    }
    let victim = b"k00017";
    let mut rec = victim.to_vec();
    rec.extend([b'v'; 300]);
    let img = p.image();
    let key_at = img
        .windows(rec.len())
        .position(|w| w == rec.as_slice())
        .unwrap();
    // The capacity field (tuple bytes 8..12) grown past the tuple's
    // block: an update in place trusting it would write into the next
    // block, and seal the capacity with a fresh checksum. The update
    // verifies the old tuple first.
    let cap_at = key_at - TUPLE_HDR + 8;
    let r = ferrite_pmem::Region::whole(p.medium().clone());
    r.write(cap_at, &(64u32 << 10).to_le_bytes());
    let is_damaged =
        |e: &EngineError| matches!(e, EngineError::DamagedValue { key, .. } if key == victim);
    let e = s.put(victim, &[b'w'; 300]).unwrap_err();
    assert!(is_damaged(&e), "{e}");
    // Nothing was written: the tuple still fails its checksum, and its
    // neighbours read as they were.
    assert!(is_damaged(&s.get(victim).unwrap_err()));
    assert_eq!(s.get(b"k00018").unwrap(), Some(vec![b'v'; 300]));
    assert_eq!(s.get(b"k00016").unwrap(), Some(vec![b'v'; 300]));
}

// ---- fences per operation, flushes in flight -----------------------------

fn sim_opts(a: impl Into<M>) -> StoreOptions {
    let mut o = opts(a);
    o.inp.log_bytes = 8 << 10;
    o.sessions = 2;
    o
}

fn explorer(budget: usize) -> Explorer<'static> {
    Explorer::new(Config::new(LAYOUT).pool_size(2 << 20).budget(budget))
}

/// Fences of `ops` operations after a warm-up, per operation.
fn fences_per_op(a: impl Into<M>, what: &'static str) -> f64 {
    let a: M = a.into();
    let ex = explorer(10).setup(move |p| {
        let st = Store::create(p, &sim_opts(a)).unwrap();
        let mut s = st.session().unwrap();
        for i in 0..200u32 {
            s.put(format!("k{i:04}").as_bytes(), &[1u8; 100]).unwrap();
        }
        drop(s);
        st.quiesce().unwrap();
    });
    let img = {
        let p = pool(2 << 20);
        let st = Store::create(&p, &sim_opts(a)).unwrap();
        let mut s = st.session().unwrap();
        for i in 0..200u32 {
            s.put(format!("k{i:04}").as_bytes(), &[1u8; 100]).unwrap();
        }
        drop(s);
        drop(st);
        p.image()
    };
    let _ = ex;
    let ex = explorer(10);
    let run = |n: u32| {
        let (end, c) = ex
            .simulate::<()>(&img, None, |p, _| {
                let st = Store::open(p, &sim_opts(a)).unwrap();
                let mut s = st.session().unwrap();
                for i in 0..n {
                    match what {
                        "update" => s.put(format!("k{:04}", i % 200).as_bytes(), &[2u8; 100]),
                        "insert" => s.put(format!("n{i:04}").as_bytes(), &[2u8; 100]),
                        "delete" => s.delete(format!("k{i:04}").as_bytes()).map(|_| ()),
                        _ => s.get(format!("k{i:04}").as_bytes()).map(|_| ()),
                    }
                    .unwrap();
                }
                std::mem::forget(s);
                std::mem::forget(st);
            })
            .unwrap();
        assert!(matches!(end, SimRun::Finished(..)));
        c.fences
    };
    (run(100) - run(0)) as f64 / 100.0
}

#[test]
fn one_fence_per_write_none_per_read() {
    for a in AllocKind::ALL {
        let up = fences_per_op(a, "update");
        let del = fences_per_op(a, "delete");
        let get = fences_per_op(a, "get");
        let ins = fences_per_op(a, "insert");
        eprintln!("{a}: fences/op update {up}, delete {del}, get {get}, insert {ins}");
        assert_eq!(up, 1.0, "{a}: update");
        assert_eq!(del, 1.0, "{a}: delete");
        assert_eq!(get, 0.0, "{a}: get");
        // Inserts: one, plus the allocator's own: the Ferrite heap's when
        // it starts a run, the lock heap's two when a reserve splits a block.
        let max = if a == AllocKind::Ferrite { 1.2 } else { 3.2 };
        assert!((1.0..=max).contains(&ins), "{a}: insert {ins}");
    }
}

/// The intent protocol's price, on the Ferrite heap and the lock heap
/// (PMDK's own fences are invisible to the simulator; its Ferrite-counted
/// ones are measured in ferrite-bench's `tests/pmdk_alloc.rs`): an update
/// in place costs the same one fence; an insert adds the intent's fence
/// and the allocator's publish (2 fences on these heaps) to the commit
/// fence; a delete adds the publish of the frees owed by the previous
/// delete (one publish per record, after its commit).
#[test]
fn fences_per_op_on_the_intent_protocol() {
    for a in AllocKind::ALL {
        let m = M { a, intent: true };
        let up = fences_per_op(m, "update");
        let del = fences_per_op(m, "delete");
        let get = fences_per_op(m, "get");
        let ins = fences_per_op(m, "insert");
        let ins0 = fences_per_op(a, "insert");
        let del0 = fences_per_op(a, "delete");
        eprintln!(
            "{m}: fences/op update {up}, delete {del} (prepare: {del0}), get {get}, insert {ins} (prepare: {ins0})"
        );
        assert_eq!(up, 1.0, "{m}: update");
        assert_eq!(get, 0.0, "{m}: get");
        // The intent fence and a publish (at most 2 fences, plus the lock
        // heap's 2 when its reserve splits a block) over the commit.
        assert!(ins >= 2.0 && ins <= ins0 + 3.0, "{m}: insert {ins}");
        assert!(del > 1.0 && del <= 3.0, "{m}: delete {del}");
    }
}

#[test]
fn writes_return_with_no_flush_in_flight() {
    for a in modes() {
        let p = pool(4 << 20);
        drop(Store::create(&p, &opts(a)).unwrap());
        let (p2, inflight) =
            ferrite_crash::InFlight::open(&p.image(), &PoolOptions::new(LAYOUT, 4 << 20)).unwrap();
        let st = Store::open(&p2, &opts(a)).unwrap();
        let mut s = st.session().unwrap();
        for i in 0..100u32 {
            let k = format!("k{:03}", i % 40);
            s.put(k.as_bytes(), &vec![3u8; (i as usize * 37) % 3000])
                .unwrap();
            assert_eq!(inflight.count(), 0, "{a}: put {i}");
            if i % 7 == 0 {
                s.delete(k.as_bytes()).unwrap();
                assert_eq!(inflight.count(), 0, "{a}: delete {i}");
            }
        }
        s.batch(&[
            Op::Put {
                key: b"x",
                value: b"y",
            },
            Op::Delete { key: b"k001" },
        ])
        .unwrap();
        assert_eq!(inflight.count(), 0, "{a}: batch");
    }
}

// ---- crash exploration ---------------------------------------------------

/// Acknowledged contents, and the operation in flight (key → new value or
/// deletion) that a crash may or may not have applied, wholly.
#[derive(Default, Clone)]
struct Model {
    acked: BTreeMap<Vec<u8>, Vec<u8>>,
    pending: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl Model {
    fn begin(&mut self, ops: &[(&[u8], Option<&[u8]>)]) {
        self.pending = ops
            .iter()
            .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
            .collect();
    }
    fn done(&mut self) {
        for (k, v) in std::mem::take(&mut self.pending) {
            match v {
                Some(v) => self.acked.insert(k, v),
                None => self.acked.remove(&k),
            };
        }
    }
}

/// One operation or batch of the crash script: key, new value or deletion.
type Step<'a> = Vec<(&'a [u8], Option<&'a [u8]>)>;

fn script(p: &Pool, m: &mut Model, o: &StoreOptions) {
    let st = Store::open(p, o).unwrap();
    let mut s = st.session().unwrap();
    let big = vec![7u8; 300];
    let steps: Vec<Step<'_>> = vec![
        vec![(b"a", Some(b"one"))],
        vec![(b"b", Some(&big))],
        vec![(b"a", Some(b"two"))],
        vec![(b"c", Some(b"three")), (b"a", None), (b"d", Some(b"four"))],
        vec![(b"b", Some(b"short"))],
        vec![(b"b", None)],
        vec![(b"e", Some(&big[..100]))],
        vec![(b"c", Some(&big))],
    ];
    for step in &steps {
        m.begin(step);
        if step.len() == 1 {
            match step[0] {
                (k, Some(v)) => s.put(k, v).unwrap(),
                (k, None) => {
                    s.delete(k).unwrap();
                }
            }
        } else {
            let ops: Vec<Op<'_>> = step
                .iter()
                .map(|&(k, v)| match v {
                    Some(v) => Op::Put { key: k, value: v },
                    None => Op::Delete { key: k },
                })
                .collect();
            s.batch(&ops).unwrap();
        }
        m.done();
    }
    // Leave as a crash would: no settling on drop.
    std::mem::forget(s);
    std::mem::forget(st);
}

/// Splits a leaf inside a batch, stores a value big enough for a Ferrite
/// extent, frees it and then allocates small blocks (which may reuse its
/// pages once the free is released), all while older records are still
/// replayable.
fn script_split_extent(p: &Pool, m: &mut Model, o: &StoreOptions) {
    let st = Store::open(p, o).unwrap();
    let mut s = st.session().unwrap();
    let keys: Vec<Vec<u8>> = (0..40u32)
        .map(|i| format!("key{i:03}").into_bytes())
        .collect();
    let vals: Vec<Vec<u8>> = (0..40u32).map(|i| vec![i as u8; 20]).collect();
    let step: Step<'_> = keys
        .iter()
        .zip(&vals)
        .map(|(k, v)| (k.as_slice(), Some(v.as_slice())))
        .collect();
    let ops: Vec<Op<'_>> = keys
        .iter()
        .zip(&vals)
        .map(|(k, v)| Op::Put { key: k, value: v })
        .collect();
    m.begin(&step);
    s.batch(&ops).unwrap();
    m.done();
    let big = vec![5u8; 40 << 10];
    m.begin(&[(b"big", Some(&big))]);
    s.put(b"big", &big).unwrap();
    m.done();
    m.begin(&[(b"big", None)]);
    s.delete(b"big").unwrap();
    m.done();
    for i in 0..6u32 {
        let k = format!("after{i}").into_bytes();
        let v = vec![9u8; 3000];
        m.begin(&[(&k, Some(&v))]);
        s.put(&k, &v).unwrap();
        m.done();
    }
    m.begin(&[(b"key005", None)]);
    s.delete(b"key005").unwrap();
    m.done();
    // Empty a leaf: it is unlinked and freed only when its parent keeps
    // two children, so split off a third leaf first.
    let more: Vec<Vec<u8>> = (0..30u32)
        .map(|i| format!("zz{i:03}").into_bytes())
        .collect();
    for (i, k) in more.iter().enumerate() {
        if i % 10 == 0 {
            m.begin(&[(k, Some(b"m"))]);
            s.put(k, b"m").unwrap();
            m.done();
        }
    }
    let ops: Vec<Op<'_>> = more
        .iter()
        .map(|k| Op::Put {
            key: k,
            value: b"m",
        })
        .collect();
    let step: Step<'_> = more
        .iter()
        .map(|k| (k.as_slice(), Some(&b"m"[..])))
        .collect();
    m.begin(&step);
    s.batch(&ops).unwrap();
    m.done();
    // The batch's split left key000..key015 in the first leaf, and the
    // after* keys went there too: empty it.
    let afters: Vec<Vec<u8>> = (0..6u32)
        .map(|i| format!("after{i}").into_bytes())
        .collect();
    let upper: Vec<&Vec<u8>> = keys[..16].iter().chain(&afters).collect();
    let ops: Vec<Op<'_>> = upper.iter().map(|k| Op::Delete { key: k }).collect();
    let step: Step<'_> = upper.iter().map(|k| (k.as_slice(), None)).collect();
    m.begin(&step);
    s.batch(&ops).unwrap();
    m.done();
    m.begin(&[(b"key030", None)]);
    s.delete(b"key030").unwrap();
    m.done();
    let d = st.stats().detail;
    assert!(!d.contains("empty leaves freed 0"), "{d}");
    std::mem::forget(s);
    std::mem::forget(st);
}

fn verify(st: &Store, m: &Model) -> Result<(), String> {
    let w = st.walk().map_err(|e| e.to_string())?;
    let got: BTreeMap<_, _> = w.entries.iter().cloned().collect();
    let mut with = m.acked.clone();
    for (k, v) in &m.pending {
        match v {
            Some(v) => with.insert(k.clone(), v.clone()),
            None => with.remove(k),
        };
    }
    if got != m.acked && got != with {
        return Err(format!(
            "contents {:?} are neither the acknowledged state nor it plus the op in flight",
            got.keys()
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect::<Vec<_>>()
        ));
    }
    crate::checks::blocks_match(st, &w)
}

fn explore(a: M, fault: Option<Fault>, budget: usize) -> ferrite_crash::explorer::Report {
    explore_with(a, fault, budget, script)
}

fn explore_with(
    a: M,
    fault: Option<Fault>,
    budget: usize,
    work: fn(&Pool, &mut Model, &StoreOptions),
) -> ferrite_crash::explorer::Report {
    explore_cfg(a, fault, explorer(budget), work)
}

fn explore_cfg(
    a: M,
    fault: Option<Fault>,
    ex: Explorer<'static>,
    work: fn(&Pool, &mut Model, &StoreOptions),
) -> ferrite_crash::explorer::Report {
    let mut o = sim_opts(a);
    if let Some(f) = fault {
        o.fault = crate::Fault::Inp(f);
    }
    let o2 = o.clone();
    let o3 = o.clone();
    ex.setup(move |p| {
        let mut c = o.clone();
        c.fault = crate::Fault::None;
        drop(Store::create(p, &c).unwrap());
    })
    .explore(
        move |p, m: &mut Model| work(p, m, &o2),
        move |p| Store::open(p, &o3).map_err(|e| e.to_string()),
        |_, st, m| verify(st, m),
    )
    .unwrap()
}

#[test]
fn crash_exploration_is_clean() {
    for a in modes() {
        let r = explore(a, None, 300);
        assert!(r.ok(), "{a}: {r}");
        assert!(r.states > 20, "{r}");
    }
}

#[test]
fn crash_exploration_of_splits_and_extents_is_clean() {
    for a in modes() {
        let r = explore_with(a, None, 400, script_split_extent);
        assert!(r.ok(), "{a}: {r}");
    }
}

#[test]
fn crash_exploration_catches_the_planted_faults() {
    for a in modes() {
        let intent_faults = if a.intent { Fault::INTENT } else { &[] };
        // SkipOverflowFlush needs records larger than the log area, which
        // this script never writes: the checks' big-batch run catches it.
        let plain = Fault::ALL
            .iter()
            .filter(|&&f| f != Fault::SkipOverflowFlush);
        for &f in plain.chain(intent_faults) {
            let r = explore(a, Some(f), 300);
            assert!(!r.ok(), "{a}: {f:?} not caught: {r}");
            eprintln!("{a} {f:?}: {}", r.violations[0]);
        }
    }
}

/// Throughput of a 50/50 read/update mix of 1000-byte values, one thread,
/// durable per operation, on a pool file (`cargo test --release -p
/// ferrite-engine --lib inp::tests::timing -- --ignored --nocapture`).
#[test]
#[ignore = "timing; run in release"]
fn timing_read_update_mix() {
    for a in AllocKind::ALL {
        for inplace in [true, false] {
            let dir = tempfile::tempdir_in("/dev/shm").unwrap();
            let mut o = opts(a);
            if !inplace {
                o.inp.inplace_max = 0;
            }
            let st = Store::create_file(dir.path().join("p"), 256 << 20, &o).unwrap();
            let mut s = st.session().unwrap();
            let n = 20_000u32;
            let v = vec![1u8; 1000];
            for i in 0..n {
                s.put(format!("user{i:08}").as_bytes(), &v).unwrap();
            }
            let mut rng = ChaCha8Rng::seed_from_u64(1);
            let ops = 200_000;
            let mut out = Vec::new();
            let t = std::time::Instant::now();
            for j in 0..ops {
                let k = format!("user{:08}", rng.random_range(0..n));
                if j % 2 == 0 {
                    s.get_into(k.as_bytes(), &mut out).unwrap();
                } else {
                    s.put(k.as_bytes(), &v).unwrap();
                }
            }
            let el = t.elapsed();
            eprintln!(
                "{a} inplace={inplace}: {:.0} ops/s ({:.2} us/op); {}",
                ops as f64 / el.as_secs_f64(),
                el.as_secs_f64() * 1e6 / ops as f64,
                st.stats().detail
            );
        }
    }
}

#[test]
fn corrupted_nodes_tuples_and_log_are_errors_not_panics() {
    let p = pool(4 << 20);
    let o = opts(AllocKind::Ferrite);
    let store = Store::create(&p, &o).unwrap();
    let mut s = store.session().unwrap();
    for i in 0..300u32 {
        s.put(
            format!("k{i:04}").as_bytes(),
            &vec![i as u8; (i as usize * 13) % 200],
        )
        .unwrap();
    }
    drop(s);
    let blocks = store.walk().unwrap().blocks;
    drop(store);
    let base = reimage(&p);
    let img = base.image();
    let area = ferrite_pmem::HEADER_SIZE + crate::superblock::SUPERBLOCK_BYTES;
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    let mut errors = 0;
    for round in 0..150 {
        let mut im = img.clone();
        for _ in 0..rng.random_range(1..4) {
            // A word of a node or tuple, or of the fixed area and log.
            let at = if round % 3 == 0 {
                area + rng.random_range(0..4096usize)
            } else {
                let (b, n) = blocks[rng.random_range(0..blocks.len())];
                b as usize + rng.random_range(0..n as usize)
            };
            let at = at & !7;
            let v: u64 = match rng.random_range(0..4) {
                0 => 0,
                1 => rng.random(),
                2 => rng.random_range(0..1 << 24),
                _ => u64::MAX,
            };
            im[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        let size = im.len() as u64;
        let p2 = Pool::open_image(&im, &PoolOptions::new(LAYOUT, size), Domain::Adr, None).unwrap();
        match Store::open(&p2, &o) {
            Err(_) => errors += 1,
            Ok(st) => {
                let w = st.walk();
                let mut s = st.session().unwrap();
                let _ = s.get(b"k0100");
                let _ = s.scan(b"k01", 50);
                let _ = s.put(b"k0100", b"x");
                let _ = s.delete(b"k0200");
                if w.is_err() {
                    errors += 1;
                }
            }
        }
    }
    assert!(errors > 10, "only {errors} of 150 corruptions were noticed");
}

/// A write in flight: key → new value, or deletion.
type Pending = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// Two threads' acknowledged writes and each one's write in flight.
#[derive(Default, Clone)]
struct Model2 {
    acked: BTreeMap<Vec<u8>, Vec<u8>>,
    pending: [Pending; 2],
}

type Shared = std::sync::Arc<std::sync::Mutex<Model2>>;

fn two_threads(p: &Pool, m: &mut Shared, o: &StoreOptions) {
    let st = Store::open(p, o).unwrap();
    let bodies: Vec<Box<dyn FnOnce() + Send + '_>> = (0..2usize)
        .map(|t| {
            let st = &st;
            let m = m.clone();
            Box::new(move || {
                let mut s = st.session().unwrap();
                let steps: Vec<(String, Option<Vec<u8>>)> = vec![
                    (format!("t{t}a"), Some(vec![t as u8; 30])),
                    (format!("t{t}b"), Some(vec![t as u8 + 10; 200])),
                    (format!("t{t}a"), Some(vec![t as u8 + 20; 30])),
                    (format!("t{t}a"), None),
                    (format!("t{t}c"), Some(vec![t as u8 + 30; 2000])),
                    (format!("t{t}b"), None),
                ];
                for (k, v) in steps {
                    m.lock().unwrap().pending[t] = vec![(k.clone().into_bytes(), v.clone())];
                    match &v {
                        Some(v) => s.put(k.as_bytes(), v).unwrap(),
                        None => {
                            s.delete(k.as_bytes()).unwrap();
                        }
                    }
                    let mut g = m.lock().unwrap();
                    for (k, v) in std::mem::take(&mut g.pending[t]) {
                        match v {
                            Some(v) => g.acked.insert(k, v),
                            None => g.acked.remove(&k),
                        };
                    }
                }
                std::mem::forget(s);
            }) as Box<dyn FnOnce() + Send + '_>
        })
        .collect();
    ferrite_crash::lockstep::run(5, 3, bodies);
    std::mem::forget(st);
}

fn verify2(st: &Store, m: &Shared) -> Result<(), String> {
    let m = m.lock().unwrap().clone();
    let w = st.walk().map_err(|e| e.to_string())?;
    let got: BTreeMap<_, _> = w.entries.iter().cloned().collect();
    let ok = (0..4).any(|mask: usize| {
        let mut want = m.acked.clone();
        for t in 0..2 {
            if mask & (1 << t) != 0 {
                for (k, v) in &m.pending[t] {
                    match v {
                        Some(v) => want.insert(k.clone(), v.clone()),
                        None => want.remove(k),
                    };
                }
            }
        }
        want == got
    });
    if !ok {
        return Err(format!(
            "{} keys: not the acknowledged state plus in-flight writes",
            got.len()
        ));
    }
    crate::checks::blocks_match(st, &w)
}

#[test]
fn crash_exploration_with_two_threads_is_clean() {
    for a in modes() {
        let o = sim_opts(a);
        let (o1, o2) = (o.clone(), o.clone());
        let r = explorer(300)
            .setup(move |p| drop(Store::create(p, &o).unwrap()))
            .explore(
                move |p, m: &mut Shared| two_threads(p, m, &o1),
                move |p| Store::open(p, &o2).map_err(|e| e.to_string()),
                |_, st, m| verify2(st, m),
            )
            .unwrap();
        assert!(r.ok(), "{a}: {r}");
        assert!(r.fences > 12 && r.states > 50, "{a}: {r}");
        eprintln!("{a}: {r}");
    }
}

#[test]
fn batches_beyond_the_log_size_go_to_a_block_of_their_own() {
    for a in modes() {
        let p = pool(32 << 20);
        let store = Store::create(&p, &opts(a)).unwrap();
        let mut s = store.session().unwrap();
        let keys: Vec<Vec<u8>> = (0..6000u32)
            .map(|i| format!("b{i:05}").into_bytes())
            .collect();
        let v = vec![4u8; 100];
        let ops: Vec<Op<'_>> = keys[..400]
            .iter()
            .map(|k| Op::Put { key: k, value: &v })
            .collect();
        s.batch(&ops).unwrap();
        let mut model: BTreeMap<_, _> =
            keys[..400].iter().map(|k| (k.clone(), v.clone())).collect();
        // Far more than one record holds: the record goes to a block of
        // its own (the intent protocol refuses it, nothing changed).
        let big: Vec<Op<'_>> = keys.iter().map(|k| Op::Put { key: k, value: &v }).collect();
        if a.intent {
            assert!(matches!(
                s.batch(&big),
                Err(EngineError::BatchTooLarge { .. })
            ));
        } else {
            s.batch(&big).unwrap();
            model.extend(keys.iter().map(|k| (k.clone(), v.clone())));
        }
        drop(s);
        check(&store, &model);
        // Updates in place beyond the log's budget go out of place.
        let v2 = vec![5u8; 100];
        let ups: Vec<Op<'_>> = keys[..400]
            .iter()
            .map(|k| Op::Put { key: k, value: &v2 })
            .collect();
        store.session().unwrap().batch(&ups).unwrap();
        for k in &keys[..400] {
            model.insert(k.clone(), v2.clone());
        }
        check(&store, &model);
        // Deleting them all in one batch leaves (on the intent protocol)
        // 400 frees owed by that record; a big batch right after still
        // fits its record.
        let dels: Vec<Op<'_>> = keys[..400].iter().map(|k| Op::Delete { key: k }).collect();
        let mut s = store.session().unwrap();
        s.batch(&dels).unwrap();
        s.batch(&ups).unwrap();
        drop(s);
        check(&store, &model);
        // Recovery replays or retires them, and frees what they held.
        if !a.intent {
            let big2: Vec<Op<'_>> = keys
                .iter()
                .map(|k| Op::Put { key: k, value: &v2 })
                .collect();
            store.session().unwrap().batch(&big2).unwrap();
            model.extend(keys.iter().map(|k| (k.clone(), v2.clone())));
        }
        drop(store);
        let store = Store::open(&p, &opts(a)).unwrap();
        check(&store, &model);
    }
}

/// A longer exploration: every flush is a crash point too, and 8-byte
/// tearing (`cargo test -p ferrite-engine --lib inp::tests::deep --
/// --ignored`).
#[test]
#[ignore = "minutes"]
fn deep_crash_exploration() {
    for a in modes() {
        for tearing in [false, true] {
            for work in [script, script_split_extent] {
                let cfg = Config::new(LAYOUT)
                    .pool_size(2 << 20)
                    .budget(3000)
                    .crash_on_flush(true)
                    .tearing(tearing)
                    .seed(17);
                let r = explore_cfg(a, None, Explorer::new(cfg), work);
                eprintln!("{a} tearing={tearing}: {r}");
                assert!(r.ok(), "{a}: {r}");
            }
        }
    }
}

/// A deeper run of the engine checks (`checks::check_engine`, whose plan
/// for InP includes the intent protocol on both heaps and with two
/// lockstep sessions) and of every planted fault, the intent protocol's
/// included: `FERRITE_INP_BUDGET=6000 cargo test -p ferrite-engine
/// --features checks --lib inp::tests::engine_checks_on_the_intent_protocol
/// -- --ignored --nocapture`. The intent protocol adds fences (intent,
/// publishes), so a fault at one fence needs more crash states to be hit
/// than on the one-fence path.
#[cfg(feature = "checks")]
#[test]
#[ignore = "minutes"]
fn engine_checks_on_the_intent_protocol() {
    use crate::checks::{check_engine, check_engine_fault};
    let budget = std::env::var("FERRITE_INP_BUDGET")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(3000usize);
    let runs = check_engine(EngineKind::Inp, Config::new("x").budget(budget)).unwrap();
    let mut states = 0;
    for (name, rep) in &runs {
        eprintln!("intent {name}: {rep}");
        assert!(rep.ok(), "{name}: {rep}");
        states += rep.states;
    }
    eprintln!("intent: {states} crash states, 0 violations");
    assert!(states >= budget.min(1000), "{states} states");
    for &f in Fault::ALL.iter().chain(Fault::INTENT) {
        let runs = check_engine_fault(
            EngineKind::Inp,
            Config::new("x").budget(3000),
            crate::Fault::Inp(f),
        )
        .unwrap();
        let caught: usize = runs.iter().map(|(_, r)| r.violation_count).sum();
        let states: usize = runs.iter().map(|(_, r)| r.states).sum();
        eprintln!("intent, planted {f:?}: {caught} violations in {states} states");
        assert!(caught > 0, "planted {f:?} not caught");
    }
}

/// An operation after a huge one starts from small tables: clearing a
/// hash map costs its capacity, and a staging left at a 5 M-key batch's
/// size made every later single put pay it.
#[test]
fn a_cleared_operation_state_gives_back_a_huge_batchs_room() {
    let mut op = super::OpState::default();
    for base in 0..100_000u64 {
        op.staged.insert(
            base * 64,
            super::Staged {
                buf: Vec::new(),
                fresh: true,
            },
        );
        op.frees.push(ferrite_pmem::POff::new(base * 64));
    }
    op.clear();
    assert!(op.staged.is_empty());
    assert!(op.staged.index.capacity() <= 2 * super::KEEP_ENTRIES);
    assert!(op.staged.nodes.capacity() <= super::KEEP_ENTRIES);
    assert!(op.frees.capacity() <= super::KEEP_ENTRIES);
}

/// The put after a large batch flushes what a put flushes, not the
/// batch's in-place stores: a large record settles its own.
#[test]
fn a_put_after_a_large_batch_flushes_only_its_own_lines() {
    let p = pool(64 << 20);
    let store = Store::create(&p, &opts(AllocKind::Ferrite)).unwrap();
    let mut s = store.session().unwrap();
    let keys: Vec<Vec<u8>> = (0..20_000u32)
        .map(|i| format!("bulk{:08}", i.wrapping_mul(2_654_435_761)).into_bytes())
        .collect();
    let ops: Vec<Op<'_>> = keys
        .iter()
        .map(|k| Op::Put {
            key: k,
            value: &[7u8; 150],
        })
        .collect();
    s.batch(&ops).unwrap();
    let c0 = ferrite_pmem::Counters::snapshot();
    s.put(b"after", &[1u8; 150]).unwrap();
    let c = ferrite_pmem::Counters::snapshot() - c0;
    assert!(c.lines_flushed < 32, "{} lines", c.lines_flushed);
    assert_eq!(s.get(b"after").unwrap().as_deref(), Some(&[1u8; 150][..]));
}
