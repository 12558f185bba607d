//! Tests of the CoW engine (`cargo test -p ferrite-engine --lib cow`).

use super::*;
use crate::{AllocKind, LAYOUT, MAX_KEY, MAX_VALUE, Store};
use ferrite_crash::{Config, Explorer};
use ferrite_pmem::{Counters, Domain, Pool, PoolOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

fn new_pool(size: u64) -> Pool {
    Pool::create_in_memory(&PoolOptions::new(LAYOUT, size).domain(Domain::Adr)).unwrap()
}

fn opts(a: AllocKind) -> StoreOptions {
    StoreOptions::new(EngineKind::Cow).allocator(a).nonce(7)
}

/// Small nodes: splits, merges and a deep tree with few keys.
fn small_nodes(a: AllocKind) -> StoreOptions {
    let mut o = opts(a);
    o.cow.node_bytes = 160;
    o.cow.inline_max = 16;
    o
}

fn reopen(pool: &Pool, o: &StoreOptions) -> (Pool, Store) {
    let p = Pool::open_image(
        &pool.image(),
        &PoolOptions::new(LAYOUT, 0),
        Domain::Adr,
        None,
    )
    .unwrap();
    let s = Store::open(&p, o).unwrap();
    (p, s)
}

/// The blocks the tree references are exactly the allocated ones.
fn check_blocks(store: &Store) -> Walk {
    store.quiesce().unwrap();
    let w = store.walk().unwrap();
    crate::checks::blocks_match(store, &w).unwrap_or_else(|e| panic!("{e}"));
    w
}

fn model_entries(m: &BTreeMap<Vec<u8>, Vec<u8>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn value(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8)
        .collect()
}

#[test]
fn basic_operations_both_allocators() {
    for a in AllocKind::ALL {
        let pool = new_pool(16 << 20);
        let store = Store::create(&pool, &opts(a)).unwrap();
        let mut s = store.session().unwrap();
        assert_eq!(s.get(b"a").unwrap(), None);
        assert!(!s.delete(b"a").unwrap());
        s.put(b"apple", b"red").unwrap();
        s.put(b"banana", b"").unwrap();
        s.put(b"cherry", &value(1, 1000)).unwrap();
        assert_eq!(s.get(b"apple").unwrap().as_deref(), Some(&b"red"[..]));
        assert_eq!(s.get(b"banana").unwrap().as_deref(), Some(&b""[..]));
        assert_eq!(s.get(b"cherry").unwrap(), Some(value(1, 1000)));
        s.put(b"apple", b"green").unwrap();
        assert_eq!(s.get(b"apple").unwrap().as_deref(), Some(&b"green"[..]));
        assert!(s.delete(b"banana").unwrap());
        assert!(!s.delete(b"banana").unwrap());
        assert_eq!(s.get(b"banana").unwrap(), None);
        // Values from empty to the maximum, keys from 1 byte to the maximum.
        let sizes = [0, 1, 16, 17, 128, 129, 4095, 4096, 70_000, MAX_VALUE];
        for (i, &n) in sizes.iter().enumerate() {
            s.put(format!("v{i:02}").as_bytes(), &value(i as u64, n))
                .unwrap();
        }
        for klen in [1, 2, 100, 1000, MAX_KEY] {
            let k = vec![b'k' + (klen % 7) as u8; klen];
            s.put(&k, &value(klen as u64, 50)).unwrap();
            assert_eq!(s.get(&k).unwrap(), Some(value(klen as u64, 50)));
        }
        for (i, &n) in sizes.iter().enumerate() {
            let got = s.get(format!("v{i:02}").as_bytes()).unwrap().unwrap();
            assert_eq!(got.len(), n);
            assert_eq!(got, value(i as u64, n));
        }
        // Scans: in order, from a bound, limited.
        let all = s.scan(b"", usize::MAX).unwrap();
        assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
        let from_v = s.scan(b"v05", 3).unwrap();
        let names: Vec<_> = from_v.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(
            names,
            vec![b"v05".to_vec(), b"v06".to_vec(), b"v07".to_vec()]
        );
        assert_eq!(s.scan(b"zzzzzzzz", 10).unwrap(), vec![]);
        assert_eq!(s.scan(b"a", 0).unwrap(), vec![]);
        // A batch: later operations on a key win; all of it applied.
        s.batch(&[
            Op::Put {
                key: b"b1",
                value: b"one",
            },
            Op::Put {
                key: b"b2",
                value: &value(9, 500),
            },
            Op::Delete { key: b"apple" },
            Op::Put {
                key: b"b1",
                value: b"uno",
            },
            Op::Delete { key: b"nothing" },
        ])
        .unwrap();
        assert_eq!(s.get(b"b1").unwrap().as_deref(), Some(&b"uno"[..]));
        assert_eq!(s.get(b"b2").unwrap(), Some(value(9, 500)));
        assert_eq!(s.get(b"apple").unwrap(), None);
        s.batch(&[]).unwrap();
        let keys = store.stats().keys;
        assert_eq!(keys as usize, s.scan(b"", usize::MAX).unwrap().len());
        drop(s);
        check_blocks(&store);
    }
}

#[test]
fn oversize_and_bad_input_refused_without_change() {
    let pool = new_pool(8 << 20);
    let store = Store::create(&pool, &opts(AllocKind::Ferrite)).unwrap();
    let mut s = store.session().unwrap();
    s.put(b"k", b"v").unwrap();
    let big = vec![0u8; MAX_VALUE + 1];
    let long = vec![b'x'; MAX_KEY + 1];
    assert!(matches!(
        s.put(b"k", &big),
        Err(EngineError::ValueSize { .. })
    ));
    assert!(matches!(
        s.put(&long, b"v"),
        Err(EngineError::KeySize { .. })
    ));
    assert!(matches!(s.put(b"", b"v"), Err(EngineError::KeySize { .. })));
    assert!(matches!(s.get(b""), Err(EngineError::KeySize { .. })));
    assert!(matches!(s.delete(&long), Err(EngineError::KeySize { .. })));
    assert!(matches!(
        s.batch(&[
            Op::Put {
                key: b"a",
                value: b"1"
            },
            Op::Put {
                key: b"b",
                value: &big
            },
        ]),
        Err(EngineError::ValueSize { .. })
    ));
    assert_eq!(s.get(b"a").unwrap(), None);
    assert_eq!(s.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(store.stats().keys, 1);
    drop(s);
    // Bad options.
    let mut o = opts(AllocKind::Ferrite);
    o.cow.node_bytes = 10;
    assert!(matches!(
        Store::create(&new_pool(4 << 20), &o),
        Err(EngineError::BadOption(_))
    ));
}

#[test]
fn full_pool_then_delete_then_put() {
    for a in AllocKind::ALL {
        let pool = new_pool(2 << 20);
        let store = Store::create(&pool, &opts(a)).unwrap();
        let mut s = store.session().unwrap();
        let mut n = 0u32;
        let err = loop {
            match s.put(format!("key{n:06}").as_bytes(), &value(n as u64, 3000)) {
                Ok(()) => n += 1,
                Err(e) => break e,
            }
            assert!(n < 100_000, "never filled");
        };
        assert!(matches!(err, EngineError::Full(_)), "{a}: {err}");
        assert!(n > 50, "{a}: only {n} puts fit");
        // The failed put changed nothing; the store is consistent.
        assert_eq!(s.get(format!("key{n:06}").as_bytes()).unwrap(), None);
        assert_eq!(store.stats().keys, n as u64);
        for i in (0..n).step_by(7) {
            assert_eq!(
                s.get(format!("key{i:06}").as_bytes()).unwrap(),
                Some(value(i as u64, 3000))
            );
        }
        // Deletes free space, and puts fit again.
        let mut deleted = 0;
        for i in 0..n / 2 {
            assert!(s.delete(format!("key{i:06}").as_bytes()).unwrap(), "{a}");
            deleted += 1;
        }
        for i in 0..10u32 {
            s.put(format!("new{i:03}").as_bytes(), &value(i as u64, 3000))
                .unwrap();
        }
        assert_eq!(store.stats().keys, (n - deleted + 10) as u64);
        drop(s);
        let w = check_blocks(&store);
        assert_eq!(w.entries.len() as u32, n - deleted + 10);
        // And it reopens.
        let (_p, again) = reopen(&pool, &opts(a));
        assert_eq!(again.recovery().keys, (n - deleted + 10) as u64);
        check_blocks(&again);
    }
}

#[test]
fn reopen_keeps_everything() {
    for a in AllocKind::ALL {
        let pool = new_pool(16 << 20);
        let o = small_nodes(a);
        let store = Store::create(&pool, &o).unwrap();
        let mut s = store.session().unwrap();
        let mut model = BTreeMap::new();
        for i in 0..300u64 {
            let k = format!("{:08}", (i * 7919) % 1000).into_bytes();
            let v = value(i, (i as usize * 13) % 300);
            s.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        drop(s);
        // Deferred frees are still pending: reopen frees them (no leak).
        let (_p, again) = reopen(&pool, &o);
        assert_eq!(again.recovery().keys, model.len() as u64);
        let w = check_blocks(&again);
        assert_eq!(w.entries, model_entries(&model));
        let mut s = again.session().unwrap();
        for (k, v) in &model {
            assert_eq!(s.get(k).unwrap().as_ref(), Some(v));
        }
    }
}

/// A random mix of puts, deletes, batches, gets and scans against a
/// BTreeMap, reopening the pool now and then, with small nodes so that
/// splits, merges and root changes happen often.
#[test]
fn randomized_against_model_with_reopen() {
    for a in AllocKind::ALL {
        for (seed, o) in [(1u64, small_nodes(a)), (2, opts(a))] {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut pool = new_pool(32 << 20);
            let mut store = Store::create(&pool, &o).unwrap();
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            for round in 0..4 {
                {
                    let mut s = store.session().unwrap();
                    for _ in 0..600 {
                        let key = |rng: &mut ChaCha8Rng| {
                            let n = rng.random_range(0..400u32);
                            let pad = rng.random_range(1..20usize);
                            let mut k = format!("{n:05}").into_bytes();
                            k.extend(std::iter::repeat_n(b'.', pad * (n as usize % 3)));
                            k
                        };
                        let vlen = |rng: &mut ChaCha8Rng| match rng.random_range(0..10) {
                            0 => 0,
                            1..=6 => rng.random_range(1..40),
                            7..=8 => rng.random_range(100..2000),
                            _ => rng.random_range(2000..20_000),
                        };
                        match rng.random_range(0..100) {
                            0..=44 => {
                                let k = key(&mut rng);
                                let v = value(rng.random(), vlen(&mut rng));
                                s.put(&k, &v).unwrap();
                                model.insert(k, v);
                            }
                            45..=64 => {
                                let k = key(&mut rng);
                                assert_eq!(s.delete(&k).unwrap(), model.remove(&k).is_some());
                            }
                            65..=74 => {
                                let n = rng.random_range(1..12);
                                let mut owned = Vec::new();
                                for _ in 0..n {
                                    let k = key(&mut rng);
                                    let v = rng
                                        .random_bool(0.7)
                                        .then(|| value(rng.random(), vlen(&mut rng)));
                                    owned.push((k, v));
                                }
                                s.batch(&crate::checks::batch_ops(&owned)).unwrap();
                                crate::checks::apply(&mut model, &owned);
                            }
                            75..=89 => {
                                let k = key(&mut rng);
                                assert_eq!(s.get(&k).unwrap().as_ref(), model.get(&k));
                            }
                            _ => {
                                let from = key(&mut rng);
                                let lim = rng.random_range(0..30);
                                let want: Vec<_> = model
                                    .range(from.clone()..)
                                    .take(lim)
                                    .map(|(k, v)| (k.clone(), v.clone()))
                                    .collect();
                                assert_eq!(s.scan(&from, lim).unwrap(), want);
                            }
                        }
                    }
                    assert_eq!(store.stats().keys, model.len() as u64);
                }
                let w = check_blocks(&store);
                assert_eq!(
                    w.entries,
                    model_entries(&model),
                    "{a} seed {seed} round {round}"
                );
                let (p, s) = reopen(&pool, &o);
                assert_eq!(s.recovery().keys, model.len() as u64);
                pool = p;
                store = s;
            }
            // Delete everything: the tree empties and no block is left.
            {
                let mut s = store.session().unwrap();
                for k in model.keys() {
                    assert!(s.delete(k).unwrap());
                }
            }
            // Only the switch record is left.
            let w = check_blocks(&store);
            assert!(w.entries.is_empty() && w.blocks.len() <= 1);
            assert_eq!(
                store.allocator().stats().blocks,
                w.blocks.len() as u64,
                "{a}"
            );
        }
    }
}

/// Readers walk old versions while writers switch roots: nothing they can
/// reach is freed and reused under them.
#[test]
fn threads_disjoint_overlapping_and_readers() {
    for a in AllocKind::ALL {
        let pool = new_pool(64 << 20);
        let o = opts(a).sessions(6);
        let store = Store::create(&pool, &o).unwrap();
        let writers = 3u64;
        let per = 300u64;
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|sc| {
            let store = &store;
            let stop = &stop;
            let mut hs = Vec::new();
            for t in 0..writers {
                hs.push(sc.spawn(move || {
                    let mut s = store.session().unwrap();
                    for i in 0..per {
                        // Disjoint keys, and a shared set all writers overwrite.
                        let k = format!("t{t}-{i:05}");
                        s.put(k.as_bytes(), &tagged(&k, i, 700)).unwrap();
                        let shared = format!("shared-{:03}", i % 20);
                        s.put(shared.as_bytes(), &tagged(&shared, i, 300)).unwrap();
                        if i % 5 == 0 && i > 0 {
                            let old = format!("t{t}-{:05}", i / 2);
                            assert!(s.delete(old.as_bytes()).unwrap());
                            let _ = s.delete(format!("shared-{:03}", (i + 7) % 20).as_bytes());
                        }
                        assert_eq!(s.get(k.as_bytes()).unwrap(), Some(tagged(&k, i, 700)));
                    }
                }));
            }
            for _ in 0..2 {
                sc.spawn(move || {
                    let mut s = store.session().unwrap();
                    let mut buf = Vec::new();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        for i in 0..20 {
                            let k = format!("shared-{i:03}");
                            if s.get_into(k.as_bytes(), &mut buf).unwrap() {
                                assert!(check_tagged(&k, &buf), "torn or reused value for {k}");
                            }
                        }
                        let n = s
                            .scan_with(b"shared-", 20, &mut |k, v| {
                                let k = std::str::from_utf8(k).unwrap();
                                if k.starts_with("shared-") {
                                    assert!(check_tagged(k, v), "scan saw a bad value for {k}");
                                }
                                true
                            })
                            .unwrap();
                        assert!(n <= 20);
                    }
                });
            }
            // Stop the readers whatever the writers did, then report.
            let joined: Vec<_> = hs.into_iter().map(|h| h.join()).collect();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            for j in joined {
                if let Err(p) = j {
                    std::panic::resume_unwind(p);
                }
            }
        });
        let w = check_blocks(&store);
        let mut s = store.session().unwrap();
        for t in 0..writers {
            for i in 0..per {
                let k = format!("t{t}-{i:05}");
                let deleted = (1..per).any(|j| j % 5 == 0 && j / 2 == i);
                let got = s.get(k.as_bytes()).unwrap();
                if deleted {
                    assert_eq!(got, None, "{k}");
                } else {
                    assert_eq!(got, Some(tagged(&k, i, 700)), "{k}");
                }
            }
        }
        assert_eq!(store.stats().keys, w.entries.len() as u64);
        drop(s);
        let (_p, again) = reopen(&pool, &o);
        assert_eq!(again.walk().unwrap().entries, w.entries);
    }
}

/// A value that names its key and a sequence number, with a checksum.
fn tagged(key: &str, i: u64, len: usize) -> Vec<u8> {
    let mut v = format!("{key}#{i}#").into_bytes();
    while v.len() < len - 4 {
        v.push(b'a' + (v.len() % 26) as u8);
    }
    let c = crc32c::crc32c(&v);
    v.extend_from_slice(&c.to_le_bytes());
    v
}

fn check_tagged(key: &str, v: &[u8]) -> bool {
    v.len() >= 4
        && v.starts_with(format!("{key}#").as_bytes())
        && crc32c::crc32c(&v[..v.len() - 4]).to_le_bytes() == v[v.len() - 4..]
}

/// Fences per write: 2 for a lone session (one publish per operation);
/// shared by the group when sessions write at once.
#[test]
fn fences_per_operation() {
    for a in AllocKind::ALL {
        let pool = new_pool(64 << 20);
        let o = opts(a).sessions(4);
        let store = Store::create(&pool, &o).unwrap();
        let run = |threads: u64, ops: u64, prefix: &str| -> (f64, f64) {
            let total = std::sync::Mutex::new(Counters::default());
            std::thread::scope(|sc| {
                for t in 0..threads {
                    let store = &store;
                    let total = &total;
                    sc.spawn(move || {
                        let mut s = store.session().unwrap();
                        let before = Counters::snapshot();
                        for i in 0..ops {
                            let k = format!("{prefix}{t}-{:06}", (i * 7919) % ops);
                            s.put(k.as_bytes(), &value(i, 1000)).unwrap();
                        }
                        let d = Counters::snapshot() - before;
                        let mut g = total.lock().unwrap();
                        *g = g.add(&d);
                    });
                }
            });
            let c = *total.lock().unwrap();
            let n = threads * ops;
            (
                c.fences as f64 / n as f64,
                c.lines_flushed as f64 / n as f64,
            )
        };
        // Warm up (fill a tree of some height).
        run(1, 2000, "w");
        let (f1, l1) = run(1, 2000, "a");
        let s1 = store.stats();
        let (f2, l2) = run(2, 2000, "b");
        let s2 = store.stats();
        let (f4, l4) = run(4, 1000, "c");
        let s4 = store.stats();
        eprintln!(
            "cow/{a}: 1 thread {f1:.3} fences/op {l1:.1} lines/op; 2 threads {f2:.3} fences/op {l2:.1} lines/op; 4 threads {f4:.3} fences/op {l4:.1} lines/op\n  {}\n  {}\n  {}",
            s1.detail, s2.detail, s4.detail
        );
        if a == AllocKind::Ferrite {
            // One session: exactly one two-fence publish per put (the
            // heap's new runs add a fence now and then). The lock heap
            // adds two fences per block split on reserve.
            assert!(
                (2.0..2.2).contains(&f1),
                "{a}: {f1} fences/op with 1 thread"
            );
        }
        if a == AllocKind::Ferrite {
            assert!(f2 <= f1 * 1.1, "{a}: {f2} fences/op with 2 threads");
            assert!(f4 <= f1 * 1.1, "{a}: {f4} fences/op with 4 threads");
        }
        // Never more than one root switch per write, whatever the allocator
        // (the lock heap's own fences grow with its block splits).
        let switches = |d: &str| -> u64 { d.split(' ').next().unwrap().parse().unwrap() };
        assert!(switches(&s4.detail) <= 16_000, "{}", s4.detail);
        // Deletes of absent keys and reads cost no fence.
        let mut s = store.session().unwrap();
        let before = Counters::snapshot();
        for i in 0..100 {
            assert!(!s.delete(format!("absent{i}").as_bytes()).unwrap());
            let _ = s.get(b"a0-000001").unwrap();
        }
        assert_eq!((Counters::snapshot() - before).fences, 0);
    }
}

/// Every write returns with no flush in flight (rule 8).
#[test]
fn no_flush_in_flight_on_return() {
    for a in AllocKind::ALL {
        let base = new_pool(8 << 20);
        Store::create(&base, &small_nodes(a)).unwrap();
        let (pool, obs) =
            ferrite_crash::InFlight::open(&base.image(), &PoolOptions::new(LAYOUT, 0)).unwrap();
        let store = Store::open(&pool, &small_nodes(a)).unwrap();
        let mut s = store.session().unwrap();
        for i in 0..200u64 {
            let k = format!("{:04}", (i * 37) % 97);
            s.put(k.as_bytes(), &value(i, (i as usize * 41) % 700))
                .unwrap();
            assert_eq!(obs.count(), 0, "{a}: put left a flush in flight");
            if i % 3 == 0 {
                s.delete(format!("{:04}", (i * 11) % 97).as_bytes())
                    .unwrap();
                assert_eq!(obs.count(), 0, "{a}: delete left a flush in flight");
            }
            if i % 10 == 0 {
                s.batch(&[
                    Op::Put {
                        key: b"b",
                        value: &[1; 300],
                    },
                    Op::Delete { key: b"0000" },
                ])
                .unwrap();
                assert_eq!(obs.count(), 0, "{a}: batch left a flush in flight");
            }
        }
        drop(s);
        store.quiesce().unwrap();
        assert_eq!(obs.count(), 0, "{a}: quiesce left a flush in flight");
    }
}

/// A corrupt tree is an error on open and walk, never a panic.
#[test]
fn corruption_is_an_error() {
    let pool = new_pool(8 << 20);
    let o = small_nodes(AllocKind::Ferrite);
    let store = Store::create(&pool, &o).unwrap();
    {
        let mut s = store.session().unwrap();
        for i in 0..100u64 {
            s.put(format!("{i:04}").as_bytes(), &value(i, 40)).unwrap();
        }
    }
    let w = check_blocks(&store);
    let data = pool.data();
    let root_word = HEADER + crate::superblock::SUPERBLOCK_BYTES + format::ROOT_AT as usize;
    let whole = Region::whole(pool.medium().clone());
    let root = whole.load_u64(root_word);
    assert!(root != 0);
    drop(data);
    // Flip bytes in every referenced block in turn: open or walk reports it.
    let image = pool.image();
    for &(off, len) in w.blocks.iter().take(40) {
        for at in [0u64, 5, 6, 9, len / 2, len - 1] {
            let mut img = image.clone();
            img[(off + at) as usize] ^= 0x5a;
            let p =
                Pool::open_image(&img, &PoolOptions::new(LAYOUT, 0), Domain::Adr, None).unwrap();
            let r = Store::open(&p, &o).and_then(|s| s.walk().map(drop));
            assert!(r.is_err(), "corruption at {off:#x}+{at} not detected");
        }
    }
    // A root word pointing anywhere.
    for bad in [
        1u64,
        8,
        4096,
        root + 16,
        u64::MAX - 7,
        image.len() as u64 - 8,
    ] {
        let mut img = image.clone();
        img[root_word..root_word + 8].copy_from_slice(&bad.to_le_bytes());
        let p = Pool::open_image(&img, &PoolOptions::new(LAYOUT, 0), Domain::Adr, None).unwrap();
        assert!(Store::open(&p, &o).is_err(), "root {bad:#x} accepted");
    }
}

const HEADER: usize = ferrite_pmem::HEADER_SIZE;

// ---- crash exploration ------------------------------------------------------

/// One scripted write: keys with a value (put) or none (delete).
type Write = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// What was acknowledged, and the write in flight (applied or not).
#[derive(Default)]
struct Model {
    done: BTreeMap<Vec<u8>, Vec<u8>>,
    inflight: Option<Write>,
}

fn apply(m: &mut BTreeMap<Vec<u8>, Vec<u8>>, ops: &[(Vec<u8>, Option<Vec<u8>>)]) {
    for (k, v) in ops {
        match v {
            Some(v) => m.insert(k.clone(), v.clone()),
            None => m.remove(k),
        };
    }
}

/// A short script of puts (inline and blob values), deletes and batches.
fn script(seed: u64, steps: usize) -> Vec<Write> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::new();
    for _ in 0..steps {
        let n = if rng.random_bool(0.25) { 3 } else { 1 };
        let mut ops = Vec::new();
        for _ in 0..n {
            let k = format!("k{}", rng.random_range(0..12u32)).into_bytes();
            let v = rng.random_bool(0.75).then(|| {
                let len = if rng.random_bool(0.5) { 8 } else { 90 };
                value(rng.random(), len)
            });
            ops.push((k, v));
        }
        out.push(ops);
    }
    out
}

fn crash_opts(a: AllocKind, fault: Option<Fault>) -> StoreOptions {
    let mut o = StoreOptions::new(EngineKind::Cow)
        .allocator(a)
        .nonce(11)
        .sessions(1);
    o.cow.node_bytes = 128;
    o.cow.inline_max = 16;
    if let Some(f) = fault {
        o.fault = crate::Fault::Cow(f);
    }
    o
}

fn explore(a: AllocKind, fault: Option<Fault>, budget: usize) -> ferrite_crash::Report {
    explore_with(a, fault, budget, false)
}

fn explore_with(
    a: AllocKind,
    fault: Option<Fault>,
    budget: usize,
    tearing: bool,
) -> ferrite_crash::Report {
    let o = crash_opts(a, fault);
    let steps = script(5, 14);
    let cfg = Config::new(LAYOUT)
        .pool_size(512 << 10)
        .budget(budget)
        .tearing(tearing)
        .seed(3);
    let setup_o = o.clone();
    Explorer::new(cfg)
        .setup(move |p| {
            Store::create(p, &setup_o).unwrap();
        })
        .explore(
            |pool, m: &mut Model| {
                let store = Store::open(pool, &o).unwrap();
                let mut s = store.session().unwrap();
                for ops in &steps {
                    m.inflight = Some(ops.clone());
                    if ops.len() == 1 {
                        match &ops[0] {
                            (k, Some(v)) => s.put(k, v).unwrap(),
                            (k, None) => {
                                s.delete(k).unwrap();
                            }
                        }
                    } else {
                        let b = crate::checks::batch_ops(ops);
                        s.batch(&b).unwrap();
                    }
                    apply(&mut m.done, ops);
                    m.inflight = None;
                }
            },
            |pool| Store::open(pool, &crash_opts(a, None)).map_err(|e| e.to_string()),
            |_, store, m| {
                let w = store.walk().map_err(|e| e.to_string())?;
                let before = model_entries(&m.done);
                let after = m.inflight.as_ref().map(|ops| {
                    let mut d = m.done.clone();
                    apply(&mut d, ops);
                    model_entries(&d)
                });
                if w.entries != before && Some(&w.entries) != after.as_ref() {
                    return Err(format!(
                        "contents {:?} are neither the acknowledged state nor it plus the write in flight",
                        w.entries.iter().map(|e| String::from_utf8_lossy(&e.0).into_owned()).collect::<Vec<_>>()
                    ));
                }
                let mut alloc = BTreeMap::new();
                store
                    .allocator()
                    .for_each_allocated(&mut |off, size| {
                        alloc.insert(off.raw(), size);
                    });
                let used: BTreeMap<u64, u64> = w.blocks.iter().copied().collect();
                if used.len() != w.blocks.len() {
                    return Err("a block referenced twice".into());
                }
                for (off, need) in &used {
                    if alloc.get(off).is_none_or(|&s| (s as u64) < *need) {
                        return Err(format!("block {off:#x} referenced but not allocated"));
                    }
                }
                if let Some(o) = alloc.keys().find(|o| !used.contains_key(o)) {
                    return Err(format!("block {o:#x} allocated but unreferenced (leak)"));
                }
                Ok(())
            },
        )
        .unwrap()
}

#[test]
fn crash_explorer_both_allocators() {
    for a in AllocKind::ALL {
        let r = explore(a, None, 400);
        eprintln!("{a}: {r}");
        assert!(r.ok(), "{a}: {r}");
        assert!(r.states > 100, "{a}: only {} states", r.states);
    }
}

/// 8-byte failure atomicity (x86's guarantee): a torn node line, a torn
/// root line.
#[test]
fn crash_explorer_tearing() {
    let r = explore_with(AllocKind::Ferrite, None, 300, true);
    eprintln!("tearing: {r}");
    assert!(r.ok(), "{r}");
}

#[test]
fn crash_explorer_catches_planted_faults() {
    for &f in Fault::ALL {
        let r = explore(AllocKind::Ferrite, Some(f), 300);
        eprintln!("{f:?}: {r}");
        assert!(!r.ok(), "{f:?} not caught: {r}");
    }
}

/// Group commit, made deterministic: while a (simulated) leader holds the
/// gate, three sessions queue their puts; when it lets go, one of them
/// leads all three into a single root switch, and each returns only after
/// it. Their fences together are one switch's two.
#[test]
fn group_commit_shares_one_switch() {
    use crate::ctx::EngineCtx;
    use crate::superblock::SUPERBLOCK_BYTES;
    use ferrite_alloc::{Heap, HeapOptions};
    let pool = new_pool(8 << 20);
    let o = opts(AllocKind::Ferrite).sessions(4);
    let data = pool.data();
    let area = 8192u64;
    let heap_len = data.len() as u64 - area;
    let sb = crate::Superblock {
        engine: EngineKind::Cow,
        allocator: AllocKind::Ferrite,
        sessions: 4,
        engine_area: area,
        heap_off: area,
        heap_len,
        nonce: 7,
    };
    let heap = Heap::create(
        data.sub(area as usize, heap_len as usize).unwrap(),
        HeapOptions::default().lanes(8),
    )
    .unwrap();
    let ctx = EngineCtx {
        pool: Region::whole(pool.medium().clone()),
        area_off: (HEADER + SUPERBLOCK_BYTES) as u64,
        area_len: area - SUPERBLOCK_BYTES as u64,
        sb,
        alloc: Arc::new(heap),
    };
    ctx.pool
        .write(ctx.area_off as usize, &format::encode_area(7));
    ctx.pool.persist(ctx.area_off as usize, 64);
    let eng = CowEngine::new(ctx, &o, (0, 0), 0, (0, 0), EngineRecovery::default());
    // Warm the heap's runs so that reserves add no fence.
    {
        let mut s = eng.session().unwrap();
        s.put(b"warm", &value(0, 1000)).unwrap();
        s.delete(b"warm").unwrap();
    }
    let before = eng.counts.switches.load(Ordering::Relaxed);
    eng.gate.lock().leader = true;
    let fences = std::sync::Mutex::new(0u64);
    std::thread::scope(|sc| {
        for t in 0..3u64 {
            let eng = &eng;
            let fences = &fences;
            sc.spawn(move || {
                let mut s = eng.session().unwrap();
                let c = Counters::snapshot();
                s.put(format!("g{t}").as_bytes(), &value(t, 1000)).unwrap();
                *fences.lock().unwrap() += (Counters::snapshot() - c).fences;
                // Durable and visible on return.
                assert_eq!(
                    s.get(format!("g{t}").as_bytes()).unwrap(),
                    Some(value(t, 1000))
                );
            });
        }
        while eng.gate.lock().queue.len() < 3 {
            std::thread::yield_now();
        }
        let mut g = eng.gate.lock();
        g.leader = false;
        drop(g);
        eng.cv.notify_all();
    });
    let switches = eng.counts.switches.load(Ordering::Relaxed) - before;
    let f = *fences.lock().unwrap();
    eprintln!("group of 3 puts: {switches} switch(es), {f} fences in all");
    assert_eq!(switches, 1);
    assert!(f <= 3, "{f} fences for a group of three");
    let w = eng.walk().unwrap();
    assert_eq!(w.entries.len(), 3);
}

/// Throughput of a 50/50 get/update mix of 1000-byte values on 100k keys,
/// one session, durable per op (`--release --ignored`, prints ops/s).
#[test]
#[ignore = "timing; run with --release -- --ignored"]
fn throughput_50_50_mix() {
    let nb: usize = std::env::var("COW_NODE_BYTES").map_or(512, |v| v.parse().unwrap());
    let dom = match std::env::var("COW_DOMAIN").as_deref() {
        Ok("volatile") => Domain::Volatile,
        _ => Domain::Adr,
    };
    for a in AllocKind::ALL {
        let pool =
            Pool::create_in_memory(&PoolOptions::new(LAYOUT, 512 << 20).domain(dom)).unwrap();
        let mut o = opts(a);
        o.cow.node_bytes = nb;
        let store = Store::create(&pool, &o).unwrap();
        let mut s = store.session().unwrap();
        let keys = 100_000u64;
        let v = value(3, 1000);
        let key = |i: u64| format!("user{:012}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15) % keys);
        for i in 0..keys {
            s.put(format!("user{i:012}").as_bytes(), &v).unwrap();
        }
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut out = Vec::new();
        let n = 200_000u64;
        let c = Counters::snapshot();
        let t = std::time::Instant::now();
        for i in 0..n {
            let k = key(rng.random::<u64>());
            if i % 2 == 0 {
                s.get_into(k.as_bytes(), &mut out).unwrap();
            } else {
                s.put(k.as_bytes(), &v).unwrap();
            }
        }
        let el = t.elapsed();
        let d = Counters::snapshot() - c;
        let t2 = std::time::Instant::now();
        for _ in 0..50_000 {
            s.get_into(key(rng.random::<u64>()).as_bytes(), &mut out)
                .unwrap();
        }
        let g = t2.elapsed().as_secs_f64() * 1e6 / 50_000.0;
        let t3 = std::time::Instant::now();
        for _ in 0..50_000 {
            s.put(key(rng.random::<u64>()).as_bytes(), &v).unwrap();
        }
        let p = t3.elapsed().as_secs_f64() * 1e6 / 50_000.0;
        eprintln!("cow/{a}: get {g:.2} us, put {p:.2} us");
        eprintln!(
            "cow/{a}: {:.0} ops/s ({:.2} us/op), {:.2} fences/op, {:.1} lines/op, {:.0} nt bytes/op",
            n as f64 / el.as_secs_f64(),
            el.as_secs_f64() * 1e6 / n as f64,
            d.fences as f64 / n as f64,
            d.lines_flushed as f64 / n as f64,
            d.nt_bytes as f64 / n as f64
        );
    }
}

/// A batch whose new blocks exceed one publish: the surplus allocations
/// are published first, the switch last; all of it lands, nothing leaks.
#[test]
fn batch_larger_than_one_publish() {
    for a in AllocKind::ALL {
        let pool = new_pool(32 << 20);
        let store = Store::create(&pool, &opts(a)).unwrap();
        let max = store.allocator().max_publish_ops();
        let n = max * 2 + 17;
        let owned: Vec<(Vec<u8>, Vec<u8>)> = (0..n)
            .map(|i| (format!("big{i:05}").into_bytes(), value(i as u64, 500)))
            .collect();
        let ops: Vec<Op<'_>> = owned
            .iter()
            .map(|(k, v)| Op::Put { key: k, value: v })
            .collect();
        let mut s = store.session().unwrap();
        s.batch(&ops).unwrap();
        assert_eq!(s.scan(b"", usize::MAX).unwrap(), owned);
        drop(s);
        assert!(
            store.stats().detail.contains("1 root switches"),
            "{}",
            store.stats().detail
        );
        check_blocks(&store);
        let (_p, again) = reopen(&pool, &opts(a));
        assert_eq!(again.walk().unwrap().entries, owned);
        check_blocks(&again);
    }
}

#[test]
fn sessions_are_bounded() {
    let pool = new_pool(8 << 20);
    let store = Store::create(&pool, &opts(AllocKind::Ferrite).sessions(2)).unwrap();
    let a = store.session().unwrap();
    let b = store.session().unwrap();
    assert!(matches!(
        store.session().map(drop),
        Err(EngineError::TooManySessions { max: 2 })
    ));
    drop(a);
    let mut c = store.session().unwrap();
    c.put(b"x", b"y").unwrap();
    drop(b);
}

/// Two sessions on two threads, interleaved at medium events by the
/// lockstep scheduler (a fence completes only its own thread's flushes):
/// each thread's keys hold what it had acknowledged, or that plus the
/// write it had in flight. Also shows the group-commit gate never blocks
/// a thread while another holds what it needs (the run would stall).
#[test]
fn crash_explorer_two_sessions_interleaved() {
    use ferrite_crash::lockstep;
    use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

    #[derive(Default)]
    struct M2 {
        done: [BTreeMap<Vec<u8>, Vec<u8>>; 2],
        inflight: [Option<Write>; 2],
    }

    fn body(t: usize, store: &Store, shared: &std::sync::Mutex<M2>) {
        let mut s = store.session().unwrap();
        let steps = script(20 + t as u64, 6);
        for ops in steps {
            // This thread's own keys.
            let ops: Write = ops
                .into_iter()
                .map(|(k, v)| {
                    let mut kk = format!("t{t}").into_bytes();
                    kk.extend_from_slice(&k);
                    (kk, v)
                })
                .collect();
            shared.lock().unwrap().inflight[t] = Some(ops.clone());
            let b = crate::checks::batch_ops(&ops);
            s.batch(&b).unwrap();
            let mut m = shared.lock().unwrap();
            apply(&mut m.done[t], &ops);
            m.inflight[t] = None;
        }
    }

    for a in AllocKind::ALL {
        let o = crash_opts(a, None).sessions(2);
        let setup_o = o.clone();
        let cfg = Config::new(LAYOUT).pool_size(512 << 10).budget(300).seed(9);
        let r = Explorer::new(cfg)
            .setup(move |p| {
                Store::create(p, &setup_o).unwrap();
            })
            .explore(
                |pool, m: &mut M2| {
                    let store = Store::open(pool, &o).unwrap();
                    let shared = std::sync::Mutex::new(std::mem::take(m));
                    let r = catch_unwind(AssertUnwindSafe(|| {
                        let bodies: Vec<Box<dyn FnOnce() + Send + '_>> = (0..2)
                            .map(|t| {
                                let (store, shared) = (&store, &shared);
                                Box::new(move || body(t, store, shared))
                                    as Box<dyn FnOnce() + Send + '_>
                            })
                            .collect();
                        lockstep::run(0x5eed, 3, bodies)
                    }));
                    *m = shared.into_inner().unwrap_or_else(|p| p.into_inner());
                    if let Err(p) = r {
                        resume_unwind(p);
                    }
                },
                |pool| Store::open(pool, &crash_opts(a, None)).map_err(|e| e.to_string()),
                |_, store, m| {
                    let w = store.walk().map_err(|e| e.to_string())?;
                    for t in 0..2 {
                        let prefix = format!("t{t}").into_bytes();
                        let mine: Vec<_> = w
                            .entries
                            .iter()
                            .filter(|(k, _)| k.starts_with(&prefix))
                            .cloned()
                            .collect();
                        let before = model_entries(&m.done[t]);
                        let after = m.inflight[t].as_ref().map(|ops| {
                            let mut d = m.done[t].clone();
                            apply(&mut d, ops);
                            model_entries(&d)
                        });
                        if mine != before && Some(&mine) != after.as_ref() {
                            return Err(format!("thread {t}'s keys lost or torn"));
                        }
                    }
                    let mut alloc = BTreeMap::new();
                    store.allocator().for_each_allocated(&mut |off, _| {
                        alloc.insert(off.raw(), ());
                    });
                    let used: BTreeMap<u64, ()> = w.blocks.iter().map(|b| (b.0, ())).collect();
                    if alloc != used {
                        return Err("allocated blocks differ from the tree's".into());
                    }
                    Ok(())
                },
            )
            .unwrap();
        eprintln!("{a} interleaved: {r}");
        assert!(r.ok(), "{a}: {r}");
    }
}

/// Reads the switch record the root line of `pool` names.
fn switch_record(pool: &Pool) -> (u64, format::SwitchRecord) {
    let whole = Region::whole(pool.medium().clone());
    let line = HEADER + crate::superblock::SUPERBLOCK_BYTES + format::ROOT_AT as usize;
    let sr = whole.load_u64(line + 8 * format::W_SR as usize);
    let crc = whole.load_u64(line + 8 * format::W_SR_CRC as usize) as u32;
    assert!(sr != 0, "no switch record linked");
    let mut h = vec![0u8; format::SR_HEADER];
    whole.read(sr as usize, &mut h);
    let mut b = vec![0u8; format::sr_len(&h).unwrap()];
    whole.read(sr as usize, &mut b);
    (sr, format::decode_sr(&b, 7, crc).unwrap())
}

/// A crash after acknowledged writes (deferred frees pending, no
/// quiesce): recovery takes the fast path — no walk — frees exactly the
/// pending blocks, and leaves a record that the next open also trusts.
#[test]
fn recovery_fast_path_after_a_clean_crash() {
    for a in AllocKind::ALL {
        let pool = new_pool(16 << 20);
        let o = small_nodes(a);
        let store = Store::create(&pool, &o).unwrap();
        let mut s = store.session().unwrap();
        let mut model = BTreeMap::new();
        for i in 0..200u64 {
            let k = format!("{:06}", (i * 7919) % 500).into_bytes();
            let v = value(i, 40 + (i as usize * 13) % 200);
            s.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        // The image as a crash now would leave it.
        let (_, rec) = switch_record(&pool);
        assert!(!rec.pending.is_empty(), "{a}: no deferred frees to test");
        assert!(!rec.fresh.is_empty());
        assert_eq!(rec.keys, model.len() as u64);
        drop(s);
        let (p2, again) = reopen(&pool, &o);
        let r = again.recovery();
        assert!(r.detail.starts_with("fast path"), "{a}: {}", r.detail);
        assert!(
            r.detail
                .contains(&format!("freed {} blocks pending free", rec.pending.len())),
            "{a}: {}",
            r.detail
        );
        assert_eq!(r.keys, model.len() as u64);
        // No leak and nothing dangling, contents intact.
        let w = check_blocks(&again);
        assert_eq!(w.entries, model_entries(&model));
        // The replacement record lists nothing pending: a second crash
        // recovers fast again, freeing nothing.
        drop(again);
        let (_p3, third) = reopen(&p2, &o);
        assert!(
            third.recovery().detail.starts_with("fast path")
                && third.recovery().detail.contains("freed 0 blocks"),
            "{a}: {}",
            third.recovery().detail
        );
        assert_eq!(check_blocks(&third).entries, model_entries(&model));
    }
}

/// The last switch torn (its record durable, one of its new blocks not):
/// the record's check fails, recovery walks, goes back to the previous
/// version and frees the torn switch's blocks; the store then records a
/// fresh switch record so that the next recovery is fast again.
#[test]
fn recovery_slow_path_after_a_torn_switch() {
    for a in AllocKind::ALL {
        let pool = new_pool(16 << 20);
        let o = small_nodes(a);
        let store = Store::create(&pool, &o).unwrap();
        let mut s = store.session().unwrap();
        let mut model = BTreeMap::new();
        for i in 0..100u64 {
            let k = format!("{i:05}").into_bytes();
            let v = value(i, 60);
            s.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        let before = model_entries(&model);
        s.put(b"00050", &value(999, 70)).unwrap();
        drop(s);
        let (_, rec) = switch_record(&pool);
        // The first block the switch wrote is the new blob: lose a byte of it.
        let f = rec.fresh[0];
        assert!(!f.node);
        let mut img = pool.image();
        img[f.off as usize + 3] ^= 0x77;
        let p = Pool::open_image(&img, &PoolOptions::new(LAYOUT, 0), Domain::Adr, None).unwrap();
        let again = Store::open(&p, &o).unwrap();
        let d = &again.recovery().detail;
        assert!(d.starts_with("slow path"), "{a}: {d}");
        assert!(d.contains("went back to the previous version"), "{a}: {d}");
        assert_eq!(check_blocks(&again).entries, before);
        drop(again);
        let (_p, third) = reopen(&p, &o);
        assert!(
            third.recovery().detail.starts_with("fast path"),
            "{a}: {}",
            third.recovery().detail
        );
        assert_eq!(check_blocks(&third).entries, before);
    }
}
