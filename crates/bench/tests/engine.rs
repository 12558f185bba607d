//! The LMDB peer honours the `Kv` contract, and the `engine` suite at a
//! tiny scale yields the rows the report reads.

use ferrite_bench::peers::lmdb::LmdbStore;
use ferrite_bench::suites::engine::{self, LMDB, Opened, Plan, SUITE, System};
use ferrite_bench::{BenchCtx, Row};
use ferrite_engine::{AllocKind, EngineKind};
use ferrite_pmem::Domain;
use ferrite_workload::{BatchOp, Kv, MemKv};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn scan_kv<K: Kv + ?Sized>(kv: &mut K, from: &[u8], limit: usize) -> Vec<(Vec<u8>, Vec<u8>)>
where
    K::Error: std::fmt::Debug,
{
    let mut v = Vec::new();
    let n = kv
        .scan(from, limit, &mut |k, val| {
            v.push((k.to_vec(), val.to_vec()))
        })
        .expect("scan");
    assert_eq!(n, v.len(), "scan's count is what it visited");
    v
}

#[test]
fn lmdb_basic_semantics() {
    let store = LmdbStore::create_in(&std::env::temp_dir(), 1 << 20, 1).expect("lmdb");
    let mut kv = store.kv();
    let mut out = vec![9u8; 3];
    assert!(!kv.get(b"a", &mut out).unwrap());
    assert!(out.is_empty(), "get clears out");
    kv.put(b"b", b"2").unwrap();
    kv.put(b"a", b"1").unwrap();
    kv.put(b"c", b"").unwrap();
    kv.put(b"b", b"22").unwrap();
    assert!(kv.get(b"b", &mut out).unwrap());
    assert_eq!(out, b"22");
    assert!(kv.get(b"c", &mut out).unwrap());
    assert!(out.is_empty(), "empty values are values");
    let s = scan_kv(&mut kv, b"a", 10);
    let keys: Vec<&[u8]> = s.iter().map(|(k, _)| k.as_slice()).collect();
    assert_eq!(keys, [&b"a"[..], b"b", b"c"]);
    assert_eq!(
        scan_kv(&mut kv, b"b", 1),
        vec![(b"b".to_vec(), b"22".to_vec())]
    );
    assert_eq!(scan_kv(&mut kv, b"bb", 5).len(), 1);
    assert!(scan_kv(&mut kv, b"a", 0).is_empty());
    assert!(kv.delete(b"a").unwrap());
    assert!(!kv.delete(b"a").unwrap(), "second delete finds nothing");
    // A batch applies in order: the later op on a key wins.
    kv.batch(&[
        BatchOp::Put {
            key: b"x",
            value: b"1",
        },
        BatchOp::Delete { key: b"b" },
        BatchOp::Put {
            key: b"x",
            value: b"2",
        },
        BatchOp::Delete { key: b"absent" },
    ])
    .unwrap();
    assert!(kv.get(b"x", &mut out).unwrap());
    assert_eq!(out, b"2");
    assert!(!kv.get(b"b", &mut out).unwrap());
    assert_eq!(store.len().unwrap(), 2);
}

#[test]
fn lmdb_matches_memkv_under_random_operations() {
    let store = LmdbStore::create_in(&std::env::temp_dir(), 4 << 20, 1).expect("lmdb");
    let mut kv = store.kv();
    let mut m = MemKv::new();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let key = |rng: &mut ChaCha8Rng| -> Vec<u8> {
        let n: u16 = rng.random_range(0..200);
        let len = rng.random_range(1..=3);
        n.to_be_bytes().iter().cycle().take(len).copied().collect()
    };
    let (mut out, mut mout) = (Vec::new(), Vec::new());
    for step in 0..2000 {
        match rng.random_range(0..10) {
            0..=3 => {
                let k = key(&mut rng);
                let v: Vec<u8> = vec![step as u8; rng.random_range(0..64)];
                kv.put(&k, &v).unwrap();
                m.put(&k, &v).unwrap();
            }
            4..=5 => {
                let k = key(&mut rng);
                assert_eq!(kv.delete(&k).unwrap(), m.delete(&k).unwrap());
            }
            6..=7 => {
                let k = key(&mut rng);
                assert_eq!(kv.get(&k, &mut out).unwrap(), m.get(&k, &mut mout).unwrap());
                assert_eq!(out, mout);
            }
            8 => {
                let k = key(&mut rng);
                let limit = rng.random_range(0..20);
                assert_eq!(scan_kv(&mut kv, &k, limit), scan_kv(&mut m, &k, limit));
            }
            _ => {
                let ks: Vec<Vec<u8>> = (0..4).map(|_| key(&mut rng)).collect();
                let v = vec![step as u8; 5];
                let ops: Vec<BatchOp<'_>> = ks
                    .iter()
                    .enumerate()
                    .map(|(i, k)| {
                        if i % 2 == 0 {
                            BatchOp::Put { key: k, value: &v }
                        } else {
                            BatchOp::Delete { key: k }
                        }
                    })
                    .collect();
                kv.batch(&ops).unwrap();
                m.batch(&ops).unwrap();
            }
        }
    }
    assert_eq!(scan_kv(&mut kv, &[0], usize::MAX), m.snapshot());
    assert_eq!(store.len().unwrap(), m.len() as u64);
    // The loading handle sees its own uncommitted writes and commits them.
    let mut bulk = store.bulk(3);
    for i in 0u8..10 {
        bulk.put(&[0xff, i], &[i]).unwrap();
        assert!(bulk.get(&[0xff, i], &mut out).unwrap());
    }
    bulk.finish().unwrap();
    assert!(kv.get(&[0xff, 9], &mut out).unwrap());
    assert_eq!(out, [9]);
}

fn extra<'a>(r: &'a Row, k: &str) -> Option<&'a serde_json::Value> {
    r.extra.as_ref()?.get(k)
}

#[test]
fn tiny_suite_yields_the_conventional_rows() {
    let ctx = BenchCtx::quick().with_reps(2);
    let plan = Plan {
        records: 300,
        ops_per_thread: 60,
        tpcc_txns: 10,
        warehouses: 2,
        tpcc_standard: false,
        threads: vec![1, 2],
        domains: vec![Domain::Adr, Domain::Eadr],
        eadr_max_threads: 1,
        recovery_bytes: vec![1 << 20],
        workloads: vec!["p2-f".into(), "p2-h".into(), "p2-var".into(), "tpcc".into()],
        redb: engine::redb_bench::Counts::tiny(),
        long_run: engine::long_run::Counts::tiny(),
    };
    let rows = engine::run_plan(&ctx, &plan).expect("suite");
    // Per workload x (1 thread adr, 1 thread eadr, 2 threads adr): LMDB +
    // 3 engines x the domain's allocators (2, and PMDK's in adr with the
    // pmdk feature); then the recovery rows.
    // LMDB and the other peers (RocksDB with its feature) in every group.
    let peers = 1 + engine::System::peers().len();
    let adr = peers + engine::System::ferrite_all(Domain::Adr).len();
    let eadr = peers + engine::System::ferrite_all(Domain::Eadr).len();
    assert_eq!(rows.len(), 4 * (2 * adr + eadr) + adr);
    for r in &rows {
        assert_eq!(r.suite, SUITE);
        assert!(
            ["inp", "cow", "lsm", LMDB, "rocksdb"].contains(&r.variant.as_str()),
            "variant {}",
            r.variant
        );
        for p in ["workload", "allocator", "domain", "value_bytes"] {
            assert!(r.params.get(p).is_some(), "param {p} missing in {r:?}");
        }
        let skipped = extra(r, "skipped").and_then(|s| s.as_str());
        let workload = r.params["workload"].as_str().unwrap();
        if workload == "recovery" {
            if skipped.is_none() {
                assert!(extra(r, "ms").and_then(|m| m.as_f64()).is_some());
                // Recovery found every record loaded before the crash.
                assert_eq!(extra(r, "keys"), extra(r, "loaded"), "{r:?}");
            }
            continue;
        }
        if r.variant == LMDB {
            assert_eq!(skipped, None, "LMDB always runs: {r:?}");
            assert_eq!(r.params["domain"], "tmpfs");
            assert!(r.ratio_vs_baseline.is_none());
        } else if r.variant == "rocksdb" {
            assert_eq!(r.baseline.as_deref(), Some(LMDB));
            assert_eq!(r.params["domain"], "tmpfs");
            assert!(!r.counters_observed);
        } else {
            assert_eq!(r.baseline.as_deref(), Some(LMDB));
            let d = r.params["domain"].as_str().unwrap();
            assert!(d == "adr" || d == "eadr");
        }
        match skipped {
            Some(why) => assert!(!why.is_empty()),
            None => {
                assert!(r.ops_per_s > 0.0, "{r:?}");
                for k in ["p50_us", "p99_us", "p999_us"] {
                    let v = extra(r, k).and_then(|v| v.as_f64()).expect(k);
                    assert!(v > 0.0, "{k} of {r:?}");
                }
                let p50 = extra(r, "p50_us").unwrap().as_f64().unwrap();
                let p999 = extra(r, "p999_us").unwrap().as_f64().unwrap();
                assert!(p50 <= p999);
                if r.variant != LMDB {
                    assert!(r.ratio_vs_baseline.is_some_and(|q| q > 0.0), "{r:?}");
                }
            }
        }
    }
    // Both thread counts and both domains appear; eadr only at one thread.
    assert!(rows.iter().any(|r| r.threads == 2 && r.variant == LMDB));
    assert!(rows.iter().any(|r| r.params["domain"] == "eadr"));
    assert!(
        !rows
            .iter()
            .any(|r| r.params["domain"] == "eadr" && r.threads == 2)
    );
}

/// The Ferrite adapter (a session as a `Kv`) agrees with `MemKv` on every
/// engine that is built, on both allocators. Engines not built yet are
/// reported and passed over.
#[test]
fn ferrite_adapter_matches_memkv() {
    for engine in EngineKind::ALL {
        for alloc in AllocKind::ALL {
            let system = System::Ferrite {
                engine,
                alloc,
                domain: Domain::Adr,
            };
            let opened = match Opened::create(system, 1 << 20, 1) {
                Ok(o) => o,
                Err(e) if e.contains("not built") => {
                    eprintln!("{}: {e}", system.label());
                    continue;
                }
                Err(e) => panic!("{}: {e}", system.label()),
            };
            let mut m = MemKv::new();
            let mut rng = ChaCha8Rng::seed_from_u64(11);
            opened
                .with_kv(|kv| {
                    let (mut out, mut mout) = (Vec::new(), Vec::new());
                    for step in 0..600u32 {
                        let k = (rng.random_range(0..64u16)).to_be_bytes();
                        match rng.random_range(0..8) {
                            0..=2 => {
                                let v = vec![step as u8; rng.random_range(0..300)];
                                kv.put(&k, &v).unwrap();
                                m.put(&k, &v).unwrap();
                            }
                            3 => assert_eq!(kv.delete(&k).unwrap(), m.delete(&k).unwrap()),
                            4..=5 => {
                                assert_eq!(
                                    kv.get(&k, &mut out).unwrap(),
                                    m.get(&k, &mut mout).unwrap()
                                );
                                assert_eq!(out, mout);
                            }
                            6 => {
                                let n = rng.random_range(0..10);
                                assert_eq!(scan_kv(&mut *kv, &k, n), scan_kv(&mut m, &k, n));
                            }
                            _ => {
                                let k2 = (rng.random_range(0..64u16)).to_be_bytes();
                                let v = [step as u8; 3];
                                let ops = [
                                    BatchOp::Put { key: &k, value: &v },
                                    BatchOp::Delete { key: &k2 },
                                ];
                                kv.batch(&ops).unwrap();
                                m.batch(&ops).unwrap();
                            }
                        }
                    }
                    assert_eq!(scan_kv(&mut *kv, &[0], usize::MAX), m.snapshot());
                })
                .unwrap_or_else(|e| panic!("{}: {e}", system.label()));
        }
    }
}

/// A workload name ferrite-workload does not know yields skipped rows
/// that say why, and any of its names (here YCSB-E, with scans) runs.
#[test]
fn workloads_by_name() {
    let ctx = BenchCtx::quick().with_reps(1);
    let plan = Plan {
        records: 200,
        ops_per_thread: 40,
        tpcc_txns: 10,
        warehouses: 2,
        tpcc_standard: false,
        threads: vec![1],
        domains: vec![Domain::Adr],
        eadr_max_threads: 1,
        recovery_bytes: vec![],
        workloads: vec!["p2-zz".into(), "ycsb-e".into()],
        redb: engine::redb_bench::Counts::tiny(),
        long_run: engine::long_run::Counts::tiny(),
    };
    let rows = engine::run_plan(&ctx, &plan).expect("suite");
    let group = 1 + engine::System::peers().len() + engine::System::ferrite_all(Domain::Adr).len();
    assert_eq!(rows.len(), 2 * group);
    for r in &rows[..group] {
        assert_eq!(r.params["workload"], "p2-zz");
        let why = extra(r, "skipped").and_then(|s| s.as_str()).unwrap_or("");
        assert!(why.contains("p2-zz"), "{r:?}");
    }
    let lmdb = rows[group..]
        .iter()
        .find(|r| r.variant == LMDB)
        .expect("lmdb row");
    assert_eq!(lmdb.params["workload"], "ycsb-e");
    assert!(extra(lmdb, "skipped").is_none(), "{lmdb:?}");
    assert!(lmdb.ops_per_s > 0.0);
}
