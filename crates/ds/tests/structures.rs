//! The structures on transactions, without crashes: every structure under
//! every strategy against a model, the protocols' per-transaction costs, a
//! full log, and concurrent threads (the crash checks are in
//! `ferrite_ds::checks`, feature `checks`).

use ferrite_alloc::PAllocator;
use ferrite_ds::{self as ds, DsOptions, Structure};
use ferrite_pmem::{Counters, Domain, Pool, PoolOptions};
use ferrite_tx::{Strategy, TxError, TxOptions, TxPool};
use std::collections::{BTreeMap, BTreeSet};

fn pool(mib: u64) -> Pool {
    Pool::create_in_memory(&PoolOptions::new("tx-test", mib << 20).domain(Domain::Adr)).unwrap()
}

fn value(k: u64, v: u64, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (k as u8).wrapping_mul(7) ^ (v as u8) ^ i as u8)
        .collect()
}

fn small() -> DsOptions {
    DsOptions {
        value_len: 32,
        subs: 4,
        buckets: 2,
        ..DsOptions::default()
    }
}

/// Inserts, updates, removes and lookups agree with a model under every
/// strategy on every structure; nothing leaks; the pool reopens with the
/// same contents.
#[test]
fn structures_match_a_model_under_every_strategy() {
    for s in Structure::ALL {
        for strategy in Strategy::ALL {
            model_run(s, strategy);
        }
    }
}

fn model_run(s: Structure, strategy: Strategy) {
    {
        let p = pool(8);
        let img = {
            let txp = TxPool::create(
                &p,
                &TxOptions::new(strategy).slots(2).area_bytes(64 << 10),
                ds::registry(),
            )
            .unwrap();
            let mut th = txp.thread().unwrap();
            let opts = DsOptions {
                fanout: 4,
                levels: 8,
                ..small()
            };
            let map = ds::create(s, &mut th, opts).unwrap();
            let mut model = BTreeMap::new();
            let mut x = 1u64;
            for i in 0..3000u64 {
                x = ds::mix64(x);
                let k = x % 500;
                match x % 7 {
                    0..=3 => {
                        let v = value(k, i, 32);
                        let new = map.insert(&mut th, k, &v).unwrap();
                        assert_eq!(
                            new,
                            model.insert(k, v).is_none(),
                            "{s} {strategy} insert {k}"
                        );
                    }
                    4..=5 => {
                        assert_eq!(
                            map.remove(&mut th, k).unwrap(),
                            model.remove(&k).is_some(),
                            "{s} {strategy} remove {k}"
                        );
                    }
                    _ => assert_eq!(map.get(k).unwrap().as_ref(), model.get(&k)),
                }
            }
            let shape = map
                .shape()
                .unwrap_or_else(|e| panic!("{s} {strategy}: {e}"));
            assert_eq!(shape.entries, model, "{s} {strategy}");
            let blocks: BTreeSet<u64> = shape.blocks.iter().map(|b| b.0).collect();
            let mut alloc = BTreeSet::new();
            txp.heap().for_each_allocated(&mut |o, _| {
                alloc.insert(o.raw());
            });
            assert_eq!(
                blocks, alloc,
                "{strategy}: allocated blocks = the map's blocks"
            );
            drop(th);
            p.image()
        };
        let p2 = Pool::open_image(
            &img,
            &PoolOptions::new("tx-test", 8 << 20),
            Domain::Adr,
            None,
        )
        .unwrap();
        let txp = TxPool::open(&p2, ds::registry(), None).unwrap();
        assert_eq!(txp.strategy(), strategy);
        let r = txp.recovery();
        assert_eq!(
            (r.rolled_back, r.replayed, r.reexecuted),
            (0, 0, 0),
            "{strategy}: clean reopen"
        );
        let map = ds::open(s, &txp, txp.root()).unwrap();
        map.shape().unwrap();
    }
}

/// Fences, log entries and v_log entries per insert of a new key: the
/// protocols' costs, exactly.
#[test]
fn per_transaction_costs_are_as_documented() {
    let mut fences = BTreeMap::new();
    for strategy in Strategy::ALL {
        let p = pool(16);
        let txp = TxPool::create(
            &p,
            &TxOptions::new(strategy).slots(2).area_bytes(64 << 10),
            ds::registry(),
        )
        .unwrap();
        let mut th = txp.thread().unwrap();
        let opts = DsOptions {
            buckets: 1 << 12,
            ..small()
        };
        let map = ds::create(Structure::HashMap, &mut th, opts).unwrap();
        // Warm the allocator's runs.
        for k in 0..100 {
            map.insert(&mut th, k, &[1; 32]).unwrap();
        }
        let s0 = th.stats();
        let c0 = Counters::snapshot();
        let n = 200u64;
        for k in 1000..1000 + n {
            assert!(map.insert(&mut th, k, &[2; 32]).unwrap());
        }
        let c = Counters::snapshot() - c0;
        let s = th.stats().sub(&s0);
        let f = c.fences as f64 / n as f64;
        fences.insert(strategy.name(), f);
        match strategy {
            // bucket head, count: two snapshots; commit and done.
            Strategy::Undo => {
                assert_eq!(s.log_entries, 2 * n);
                assert_eq!(s.alloc_entries, n);
                assert!((f - 4.0).abs() < 0.05, "undo {f}");
            }
            Strategy::Redo => {
                assert_eq!(s.log_entries, 2 * n);
                assert!((f - 2.0).abs() < 0.05, "redo {f}");
            }
            // v_log + head + count (one flush point), commit.
            Strategy::Clobber => {
                assert_eq!(s.vlog_entries, n);
                assert_eq!(s.log_entries, 2 * n);
                assert_eq!(s.records, n, "one CLOB record each");
                assert!((f - 2.0).abs() < 0.05, "clobber {f}");
            }
            Strategy::NoLog => assert!((f - 1.0).abs() < 0.05, "nolog {f}"),
        }
    }
    assert!(fences["redo"] < fences["undo"] && fences["clobber"] < fences["undo"]);
}

#[test]
fn log_full_is_a_clean_error() {
    for strategy in Strategy::LOGGED {
        let p = pool(8);
        let txp = TxPool::create(
            &p,
            &TxOptions::new(strategy).slots(2).area_bytes(1024),
            ds::registry(),
        )
        .unwrap();
        let mut th = txp.thread().unwrap();
        let opts = DsOptions {
            value_len: 1500,
            subs: 1,
            buckets: 1,
            ..DsOptions::default()
        };
        let map = ds::create(Structure::HashMap, &mut th, opts).unwrap();
        // Clobber logs the value in the v_log of the insert already; undo
        // and redo log it when an update overwrites it. Neither fits.
        let expect = match map.insert(&mut th, 1, &[1; 1500]) {
            Ok(true) => {
                let r = map.insert(&mut th, 1, &[2; 1500]);
                assert!(
                    matches!(r, Err(TxError::LogFull { .. })),
                    "{strategy}: {r:?}"
                );
                Some(vec![1; 1500])
            }
            Err(TxError::LogFull { .. }) if strategy == Strategy::Clobber => None,
            r => panic!("{strategy}: {r:?}"),
        };
        assert_eq!(map.get(1).unwrap(), expect, "{strategy}");
        // And the pool goes on working.
        map.remove(&mut th, 1).unwrap();
        map.shape().unwrap();
    }
}

/// Four threads attach at once and insert, update and remove disjoint keys
/// under the structures' own locks; the result is every thread's model,
/// nothing leaks, and every thread's transactions committed.
#[test]
fn concurrent_threads_on_every_structure_and_strategy() {
    const THREADS: u64 = 4;
    for s in Structure::ALL {
        for strategy in Strategy::ALL {
            let p = pool(16);
            let txp = TxPool::create(
                &p,
                &TxOptions::new(strategy)
                    .slots(THREADS as u16 + 1)
                    .area_bytes(64 << 10),
                ds::registry(),
            )
            .unwrap();
            let map = {
                let mut th = txp.thread().unwrap();
                let opts = DsOptions {
                    fanout: 4,
                    levels: 8,
                    ..small()
                };
                let h = ds::create(s, &mut th, opts).unwrap().header();
                ds::open(s, &txp, h).unwrap()
            };
            let models: Vec<BTreeMap<u64, Vec<u8>>> = std::thread::scope(|sc| {
                let hs: Vec<_> = (0..THREADS)
                    .map(|t| {
                        let (txp, map) = (&txp, &map);
                        sc.spawn(move || {
                            let mut th = txp.thread().unwrap();
                            let mut model = BTreeMap::new();
                            let mut x = t + 1;
                            for i in 0..600u64 {
                                x = ds::mix64(x);
                                // Thread t owns keys ≡ t (mod THREADS).
                                let k = (x % 150) * THREADS + t;
                                if x % 5 < 3 {
                                    let v = value(k, i, 32);
                                    let new = map.insert(&mut th, k, &v).unwrap();
                                    assert_eq!(new, model.insert(k, v).is_none());
                                } else {
                                    let was = map.remove(&mut th, k).unwrap();
                                    assert_eq!(was, model.remove(&k).is_some());
                                }
                            }
                            model
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let want: BTreeMap<u64, Vec<u8>> = models.into_iter().flatten().collect();
            let shape = map
                .shape()
                .unwrap_or_else(|e| panic!("{s} {strategy}: {e}"));
            assert_eq!(shape.entries, want, "{s} {strategy}");
            let blocks: BTreeSet<u64> = shape.blocks.iter().map(|b| b.0).collect();
            let mut alloc = BTreeSet::new();
            txp.heap().for_each_allocated(&mut |o, _| {
                alloc.insert(o.raw());
            });
            assert_eq!(blocks, alloc, "{s} {strategy}: no leak");
        }
    }
}

/// Fuzzing found (fuzz/regressions/tx_ds/): the skiplist's transaction
/// functions trusted the level count and node heights they read from the
/// medium, and a damaged one indexed past their 32-entry arrays (a panic,
/// also during recovery's re-execution). They now fail with `Corrupt`.
#[test]
fn a_damaged_skiplist_is_an_error_not_a_panic() {
    for strategy in Strategy::LOGGED {
        let p = pool(8);
        let txp = TxPool::create(&p, &TxOptions::new(strategy).slots(2), ds::registry()).unwrap();
        let mut th = txp.thread().unwrap();
        let list = ds::create(Structure::SkipList, &mut th, small()).unwrap();
        for k in 1..20 {
            list.insert(&mut th, k, &value(k, 0, 32)).unwrap();
        }
        // Header (version 2): levels u64 at 40.
        let levels_at = list.header() as usize + 40;
        let whole = ferrite_pmem::Region::whole(p.medium().clone());
        let levels = whole.load_u64(levels_at);
        whole.store_u64(levels_at, 40);
        assert!(matches!(
            list.insert(&mut th, 5, &value(5, 1, 32)),
            Err(TxError::Corrupt(_))
        ));
        whole.store_u64(levels_at, levels);
        list.insert(&mut th, 5, &value(5, 2, 32)).unwrap();
        assert_eq!(list.get(5).unwrap(), Some(value(5, 2, 32)));
    }
}

/// The rbtree, skiplist and B+tree headers are versioned and checksummed
/// (`ferrite_pmem::superblock`, each its own version, 3): one that
/// reopens after inserts (which update the root and count in place, outside
/// the checksum); a version-1 header — no version, no checksum, the moved
/// field at 8..16 — is refused with `TxError::HeaderVersion { found: 1 }`;
/// a flipped bit with `HeaderChecksum`; a well-sealed unknown version with
/// `HeaderVersion { found }`.
#[test]
fn structure_headers_are_versioned_and_old_ones_refused() {
    use ferrite_pmem::{Region, SuperblockWriter};
    // (structure, offset of the field version 1 kept at 8..16, words
    // outside the checksum)
    // (…, the version this build writes: the skiplist's 3 since its
    // records carry checksums)
    let cases = [
        (Structure::BpTree, 40, 24..40, ds::bptree::VERSION),
        (Structure::SkipList, 40, 24..32, ds::skiplist::VERSION),
        (Structure::RbTree, 32, 16..32, ds::rbtree::VERSION),
        // Version 1 kept `subs` at 8..16; nothing changes in place.
        (Structure::HashMap, 16, 60..60, ds::hashmap::VERSION),
    ];
    for (s, moved, mutable, version) in cases {
        let p = pool(8);
        let txp = TxPool::create(&p, &TxOptions::new(Strategy::Undo), ds::registry()).unwrap();
        let header = {
            let mut th = txp.thread().unwrap();
            let m = ds::create(s, &mut th, small()).unwrap();
            for k in 0..20 {
                m.insert(&mut th, k, &value(k, 0, 32)).unwrap();
            }
            txp.root()
        };
        let whole = Region::whole(p.medium().clone());
        let good = whole.read_vec(header as usize, 64);
        assert_eq!(u16::from_le_bytes([good[8], good[9]]), version);
        let reopen = |b: &[u8]| {
            whole.write(header as usize, b);
            ds::open(s, &txp, header).map(|_| ())
        };
        reopen(&good).unwrap_or_else(|e| panic!("{s:?}: {e}"));

        let mut v1 = good.clone();
        v1.copy_within(moved..moved + 8, 8);
        v1[moved..moved + 8].fill(0);
        v1[60..64].fill(0);
        let e = reopen(&v1).unwrap_err();
        assert!(
            matches!(e, TxError::HeaderVersion { found: 1, supported, .. } if supported == version),
            "{s:?}: {e}"
        );
        assert!(e.to_string().contains("recreate the structure"), "{e}");

        let mut flipped = good.clone();
        flipped[moved] ^= 4;
        let e = reopen(&flipped).unwrap_err();
        assert!(matches!(e, TxError::HeaderChecksum { .. }), "{s:?}: {e}");

        // Any other version, sealed well: the next one, and (for the
        // skiplist) version 2, whose nodes had no record checksum.
        for other in [version + 1, 2].into_iter().filter(|&v| v != version) {
            let mut w = SuperblockWriter::new(good[..8].try_into().unwrap(), other);
            w.bytes(16, &good[16..60]);
            let e = reopen(&w.seal_masked(std::slice::from_ref(&mutable))).unwrap_err();
            assert!(
                matches!(e, TxError::HeaderVersion { found, .. } if found == other),
                "{s:?}: {e}"
            );
        }
        reopen(&good).unwrap();
    }
}

/// A skiplist record's checksum (key and value): a flipped byte of a
/// value or key is a typed error naming the key on `get`, never the
/// bytes, and `shape` (the deep check's walk) lists every damaged record;
/// the others read back; an update rewrites the checksum with the value.
#[test]
fn skiplist_records_are_checksummed() {
    records_are_checksummed(Structure::SkipList, "skiplist");
}

#[test]
fn bptree_records_are_checksummed() {
    records_are_checksummed(Structure::BpTree, "bptree");
}

#[test]
fn rbtree_records_are_checksummed() {
    records_are_checksummed(Structure::RbTree, "rbtree");
}

fn records_are_checksummed(s: Structure, name: &str) {
    let p = pool(8);
    let txp = TxPool::create(&p, &TxOptions::new(Strategy::Undo), ds::registry()).unwrap();
    let mut th = txp.thread().unwrap();
    let m = ds::create(s, &mut th, small()).unwrap();
    for k in 1..=40 {
        m.insert(&mut th, k, &value(k, 0, 32)).unwrap();
    }
    m.insert(&mut th, 7, &value(7, 1, 32)).unwrap();
    assert_eq!(m.get(7).unwrap(), Some(value(7, 1, 32)));
    let whole = ferrite_pmem::Region::whole(p.medium().clone());
    // Find nodes by their value bytes: the value follows the links.
    let img = whole.read_vec(0, p.header().size as usize);
    let at = |v: &[u8]| img.windows(v.len()).position(|w| w == v).unwrap();
    let v12 = at(&value(12, 0, 32));
    whole.write(v12 + 3, &[img[v12 + 3] ^ 0x10]);
    let v30 = at(&value(30, 0, 32));
    whole.write(v30 + 31, &[img[v30 + 31] ^ 1]);
    for k in [12u64, 30] {
        match m.get(k) {
            Err(TxError::Corrupt(what)) => {
                assert_eq!(what, format!("{name} record key {k}: checksum mismatch"))
            }
            other => panic!("key {k}: {other:?}"),
        }
    }
    for k in (1..=40).filter(|k| ![12, 30].contains(k)) {
        let v = value(k, u64::from(k == 7), 32);
        assert_eq!(m.get(k).unwrap(), Some(v), "key {k}");
    }
    let mut shape = m.shape().unwrap();
    shape.damaged.sort();
    assert_eq!(
        shape.damaged,
        vec![
            (12, "checksum mismatch".to_string()),
            (30, "checksum mismatch".to_string())
        ]
    );
    assert_eq!(shape.entries.len(), 38);
    // The deep check's walk (on a copy) names both records.
    let img = whole.read_vec(0, p.header().size as usize);
    let copy = Pool::open_image(
        &img,
        &PoolOptions::new("tx-test", 0),
        Domain::Volatile,
        None,
    )
    .unwrap();
    let c = ds::verify::verify_pool(&copy);
    let found: Vec<String> = c.findings.iter().map(|f| f.to_string()).collect();
    for k in [12, 30] {
        let want = format!("{name}: record key {k}: checksum mismatch");
        assert!(found.contains(&want), "{found:?}");
    }
    assert_eq!(c.keys, 40);
    // An update of a damaged record writes a new value and checksum.
    m.insert(&mut th, 12, &value(12, 5, 32)).unwrap();
    assert_eq!(m.get(12).unwrap(), Some(value(12, 5, 32)));
}
