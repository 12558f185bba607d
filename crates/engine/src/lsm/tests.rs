//! Tests of the LSM engine: operations on both allocators, sizes and
//! refusals, a randomized model test across reopens, threads, a full
//! pool, fence counts, and a crash exploration catching the planted faults.

use super::Fault;
use crate::{AllocKind, Durability, EngineError, EngineKind, LAYOUT, Op, Store, StoreOptions};
use ferrite_crash::{Config, Explorer, InFlight};
use ferrite_pmem::{Domain, Mapping, Pool, PoolOptions, SimObserver};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Small memtable and blocks, so that short tests flush and merge.
fn small(alloc: AllocKind) -> StoreOptions {
    let mut o = StoreOptions::new(EngineKind::Lsm)
        .allocator(alloc)
        .sessions(4)
        .nonce(7);
    o.lsm.memtable_bytes = 8 << 10;
    o.lsm.log_slack = 4 << 10;
    o.lsm.block_bytes = 512;
    o.lsm.max_runs = 4;
    o
}

fn pool_opts(mib: u64) -> PoolOptions {
    PoolOptions::new(LAYOUT, mib << 20).domain(Domain::Adr)
}

fn new_pool(mib: u64) -> Pool {
    Pool::create_in_memory(&pool_opts(mib)).unwrap()
}

fn reopen(pool: &Pool, mib: u64) -> Pool {
    Pool::open_image(&pool.image(), &pool_opts(mib), Domain::Adr, None).unwrap()
}

/// Walk contents == `model`, and walk blocks == the allocator's blocks.
fn check_store(store: &Store, model: &BTreeMap<Vec<u8>, Vec<u8>>) -> Result<(), String> {
    store.quiesce().map_err(|e| e.to_string())?;
    let w = store.walk().map_err(|e| e.to_string())?;
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    if w.entries != want {
        return Err(format!(
            "contents differ: {} entries, model {}",
            w.entries.len(),
            want.len()
        ));
    }
    crate::checks::blocks_match(store, &w)
}

#[test]
fn basic_operations_both_allocators() {
    for a in AllocKind::ALL {
        let pool = new_pool(8);
        let store = Store::create(&pool, &small(a)).unwrap();
        let mut s = store.session().unwrap();
        assert_eq!(s.get(b"a").unwrap(), None);
        s.put(b"b", b"2").unwrap();
        s.put(b"a", b"1").unwrap();
        s.put(b"c", b"3").unwrap();
        s.put(b"b", b"22").unwrap();
        assert_eq!(s.get(b"b").unwrap().as_deref(), Some(&b"22"[..]));
        assert!(s.delete(b"c").unwrap());
        assert!(!s.delete(b"c").unwrap());
        assert!(!s.delete(b"zz").unwrap());
        assert_eq!(s.get(b"c").unwrap(), None);
        s.batch(&[
            Op::Put {
                key: b"d",
                value: b"4",
            },
            Op::Delete { key: b"a" },
            Op::Put {
                key: b"d",
                value: b"44",
            },
        ])
        .unwrap();
        let all = s.scan(b"", 10).unwrap();
        assert_eq!(
            all,
            vec![
                (b"b".to_vec(), b"22".to_vec()),
                (b"d".to_vec(), b"44".to_vec())
            ]
        );
        assert_eq!(
            s.scan(b"c", 1).unwrap(),
            vec![(b"d".to_vec(), b"44".to_vec())]
        );
        assert_eq!(s.scan(b"e", 5).unwrap(), vec![]);
        drop(s);
        let mut model = BTreeMap::new();
        model.insert(b"b".to_vec(), b"22".to_vec());
        model.insert(b"d".to_vec(), b"44".to_vec());
        check_store(&store, &model).unwrap();
        drop(store);
        let p2 = reopen(&pool, 8);
        let store = Store::open(&p2, &small(a)).unwrap();
        assert_eq!(store.recovery().keys, 2, "{a}");
        check_store(&store, &model).unwrap();
    }
}

#[test]
fn sizes_and_refusals() {
    for a in AllocKind::ALL {
        let pool = new_pool(24);
        let store = Store::create(&pool, &small(a)).unwrap();
        let mut s = store.session().unwrap();
        let mut model = BTreeMap::new();
        let big_key = vec![b'k'; crate::MAX_KEY];
        for (i, n) in [0usize, 1, 63, 64, 1000, 4097, 100_000, crate::MAX_VALUE]
            .into_iter()
            .enumerate()
        {
            let key = if i == 3 {
                big_key.clone()
            } else {
                vec![b'a' + i as u8]
            };
            let val: Vec<u8> = (0..n).map(|j| (j * 31 + i) as u8).collect();
            s.put(&key, &val).unwrap();
            model.insert(key, val);
        }
        for (k, v) in &model {
            assert_eq!(s.get(k).unwrap().as_ref(), Some(v));
        }
        // Refusals change nothing.
        assert!(matches!(s.put(b"", b"x"), Err(EngineError::KeySize { .. })));
        assert!(matches!(
            s.put(&vec![1u8; crate::MAX_KEY + 1], b"x"),
            Err(EngineError::KeySize { .. })
        ));
        assert!(matches!(
            s.put(b"q", &vec![0u8; crate::MAX_VALUE + 1]),
            Err(EngineError::ValueSize { .. })
        ));
        assert!(matches!(s.delete(b""), Err(EngineError::KeySize { .. })));
        assert!(matches!(s.get(b""), Err(EngineError::KeySize { .. })));
        let huge = vec![0u8; crate::MAX_VALUE + 1];
        assert!(matches!(
            s.batch(&[
                Op::Put {
                    key: b"ok",
                    value: b"1"
                },
                Op::Put {
                    key: b"bad",
                    value: &huge
                }
            ]),
            Err(EngineError::ValueSize { .. })
        ));
        assert_eq!(s.get(b"ok").unwrap(), None);
        drop(s);
        check_store(&store, &model).unwrap();
        drop(store);
        let p2 = reopen(&pool, 24);
        let store = Store::open(&p2, &small(a)).unwrap();
        check_store(&store, &model).unwrap();
        let mut s = store.session().unwrap();
        for (k, v) in &model {
            assert_eq!(s.get(k).unwrap().as_ref(), Some(v));
        }
    }
}

#[test]
fn too_many_sessions() {
    let pool = new_pool(4);
    let store = Store::create(&pool, &small(AllocKind::Ferrite).sessions(2)).unwrap();
    let a = store.session().unwrap();
    let _b = store.session().unwrap();
    assert!(matches!(
        store.session(),
        Err(EngineError::TooManySessions { max: 2 })
    ));
    drop(a);
    store.session().unwrap();
}

fn random_model(a: AllocKind, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mib = 16;
    let mut pool = new_pool(mib);
    let opts = small(a);
    let mut store = Store::create(&pool, &opts).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let key = |rng: &mut ChaCha8Rng| -> Vec<u8> {
        let k = rng.random_range(0..400u32);
        let mut v = format!("key{k:05}").into_bytes();
        if k % 7 == 0 {
            v.extend(std::iter::repeat_n(b'x', (k % 50) as usize));
        }
        v
    };
    for round in 0..5 {
        {
            let mut s = store.session().unwrap();
            for _ in 0..800 {
                match rng.random_range(0..10) {
                    0..=4 => {
                        let k = key(&mut rng);
                        let n = rng.random_range(0..300);
                        let v: Vec<u8> = (0..n).map(|_| rng.random()).collect();
                        s.put(&k, &v).unwrap();
                        model.insert(k, v);
                    }
                    5..=6 => {
                        let k = key(&mut rng);
                        assert_eq!(s.delete(&k).unwrap(), model.remove(&k).is_some());
                    }
                    7 => {
                        let n = rng.random_range(1..6);
                        let mut owned = Vec::new();
                        for _ in 0..n {
                            let k = key(&mut rng);
                            let v = rng.random_bool(0.7).then(|| vec![rng.random(); 20]);
                            owned.push((k, v));
                        }
                        s.batch(&crate::checks::batch_ops(&owned)).unwrap();
                        crate::checks::apply(&mut model, &owned);
                    }
                    8 => {
                        let k = key(&mut rng);
                        assert_eq!(s.get(&k).unwrap().as_ref(), model.get(&k));
                    }
                    _ => {
                        let k = key(&mut rng);
                        let lim = rng.random_range(0..20);
                        let want: Vec<(Vec<u8>, Vec<u8>)> = model
                            .range(k.clone()..)
                            .take(lim)
                            .map(|(a, b)| (a.clone(), b.clone()))
                            .collect();
                        assert_eq!(s.scan(&k, lim).unwrap(), want);
                    }
                }
            }
        }
        check_store(&store, &model).unwrap_or_else(|e| panic!("{a} round {round}: {e}"));
        let stats = store.stats();
        assert_eq!(stats.keys, model.len() as u64, "{}", stats.detail);
        drop(store);
        pool = reopen(&pool, mib);
        store = Store::open(&pool, &opts).unwrap();
        check_store(&store, &model).unwrap_or_else(|e| panic!("{a} reopen {round}: {e}"));
    }
    // The script flushed and merged many times.
    let d = store.stats().detail;
    let gen_: u64 = d.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(gen_ > 20, "{d}");
}

#[test]
fn random_against_model_with_reopens_ferrite() {
    random_model(AllocKind::Ferrite, 1);
}

#[test]
fn random_against_model_with_reopens_lock() {
    random_model(AllocKind::Lock, 2);
}

#[test]
fn threads_disjoint_and_overlapping() {
    for a in AllocKind::ALL {
        let pool = new_pool(16);
        let store = Store::create(&pool, &small(a)).unwrap();
        std::thread::scope(|sc| {
            for t in 0..4u8 {
                let store = &store;
                sc.spawn(move || {
                    let mut s = store.session().unwrap();
                    for i in 0..300u32 {
                        let own = format!("t{t}-{i:04}").into_bytes();
                        s.put(&own, &[t; 100]).unwrap();
                        assert_eq!(s.get(&own).unwrap().as_deref(), Some(&[t; 100][..]));
                        let shared = format!("shared{}", i % 10).into_bytes();
                        s.put(&shared, &[t; 50]).unwrap();
                        let got = s.get(&shared).unwrap().unwrap();
                        assert_eq!(got.len(), 50);
                        if i % 3 == 0 {
                            assert!(s.delete(&own).unwrap());
                        }
                        let _ = s.scan(b"shared", 5).unwrap();
                    }
                });
            }
        });
        let w = store.walk().unwrap();
        let mut model = BTreeMap::new();
        for (k, v) in &w.entries {
            if k.starts_with(b"shared") {
                assert_eq!(v.len(), 50);
                model.insert(k.clone(), v.clone());
            }
        }
        for t in 0..4u8 {
            for i in 0..300u32 {
                if i % 3 != 0 {
                    model.insert(format!("t{t}-{i:04}").into_bytes(), vec![t; 100]);
                }
            }
        }
        assert_eq!(model.len(), 4 * 200 + 10);
        check_store(&store, &model).unwrap();
    }
}

#[test]
fn full_pool_then_delete_then_put() {
    for a in AllocKind::ALL {
        let mib = 2;
        let pool = new_pool(mib);
        let mut opts = small(a);
        opts.lsm.log_slack = 32 << 10;
        let store = Store::create(&pool, &opts).unwrap();
        let mut s = store.session().unwrap();
        let mut model = BTreeMap::new();
        let mut i = 0u32;
        let val = vec![5u8; 200];
        loop {
            let k = format!("k{i:06}").into_bytes();
            match s.put(&k, &val) {
                Ok(()) => {
                    model.insert(k, val.clone());
                }
                Err(EngineError::Full(_)) => break,
                Err(e) => panic!("{a}: {e}"),
            }
            i += 1;
            assert!(i < 100_000, "never full");
        }
        assert!(model.len() > 1000, "{a}: only {}", model.len());
        // Still consistent and readable.
        for (k, v) in model.iter().step_by(97) {
            assert_eq!(s.get(k).unwrap().as_ref(), Some(v));
        }
        // Delete most keys: tombstones go to the log's slack, and a flush
        // that merges them into the oldest run frees the space.
        let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
        let mut deleted = 0;
        for k in keys.iter().take(keys.len() * 3 / 4) {
            match s.delete(k) {
                Ok(true) => {
                    model.remove(k);
                    deleted += 1;
                }
                Ok(false) => panic!("{a}: key vanished"),
                Err(EngineError::Full(_)) => break,
                Err(e) => panic!("{a}: {e}"),
            }
        }
        assert!(deleted > 0, "{a}: no delete went through");
        drop(s);
        check_store(&store, &model).unwrap();
        let mut s = store.session().unwrap();
        let mut put_again = 0;
        for j in 0..200u32 {
            let k = format!("new{j:04}").into_bytes();
            match s.put(&k, &val) {
                Ok(()) => {
                    model.insert(k, val.clone());
                    put_again += 1;
                }
                Err(EngineError::Full(_)) => break,
                Err(e) => panic!("{a}: {e}"),
            }
        }
        drop(s);
        eprintln!(
            "{a}: {deleted} deleted, {put_again} put again; {}",
            store.stats().detail
        );
        assert!(
            put_again > 100,
            "{a}: only {put_again} puts after the deletes"
        );
        check_store(&store, &model).unwrap();
        drop(store);
        let p2 = reopen(&pool, mib);
        let store = Store::open(&p2, &opts).unwrap();
        check_store(&store, &model).unwrap();
    }
}

/// Counts fences and flushed ranges.
#[derive(Default)]
struct Counter {
    fences: AtomicUsize,
    flushes: AtomicUsize,
}

impl SimObserver for Counter {
    fn flushed(&self, _: &Mapping, _: usize, _: usize) {
        self.flushes.fetch_add(1, Ordering::Relaxed);
    }
    fn fenced(&self, _: &Mapping) {
        self.fences.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn one_fence_per_write_and_none_in_flight() {
    let mut opts = small(AllocKind::Ferrite);
    opts.lsm.memtable_bytes = 1 << 20;
    let pool = new_pool(8);
    drop(Store::create(&pool, &opts).unwrap());
    let c = Arc::new(Counter::default());
    let p = Pool::open_image(&pool.image(), &pool_opts(8), Domain::Adr, Some(c.clone())).unwrap();
    let store = Store::open(&p, &opts).unwrap();
    let mut s = store.session().unwrap();
    let val = vec![9u8; 1000];
    let f0 = c.fences.load(Ordering::Relaxed);
    for i in 0..100u32 {
        s.put(format!("key{i:05}").as_bytes(), &val).unwrap();
    }
    assert_eq!(
        c.fences.load(Ordering::Relaxed) - f0,
        100,
        "one fence per put"
    );
    let f0 = c.fences.load(Ordering::Relaxed);
    assert!(s.delete(b"key00001").unwrap());
    assert!(!s.delete(b"absent").unwrap());
    s.batch(&[
        Op::Put {
            key: b"x",
            value: &val,
        },
        Op::Delete { key: b"key00002" },
    ])
    .unwrap();
    assert_eq!(
        c.fences.load(Ordering::Relaxed) - f0,
        2,
        "delete 1, absent 0, batch 1"
    );
    let f0 = c.fences.load(Ordering::Relaxed);
    for i in 0..100u32 {
        s.get(format!("key{i:05}").as_bytes()).unwrap();
    }
    assert_eq!(c.fences.load(Ordering::Relaxed), f0, "reads never fence");
    drop(s);
    drop(store);

    // Flushes (with their merges): fences beyond one per put.
    for a in AllocKind::ALL {
        let mut opts = small(a);
        opts.lsm.memtable_bytes = 32 << 10;
        let pool = new_pool(16);
        drop(Store::create(&pool, &opts).unwrap());
        let c = Arc::new(Counter::default());
        let p =
            Pool::open_image(&pool.image(), &pool_opts(16), Domain::Adr, Some(c.clone())).unwrap();
        let store = Store::open(&p, &opts).unwrap();
        let mut s = store.session().unwrap();
        let f0 = c.fences.load(Ordering::Relaxed);
        let n = 3000u32;
        for i in 0..n {
            s.put(format!("key{:05}", (i * 7919) % 2000).as_bytes(), &val)
                .unwrap();
        }
        let extra = c.fences.load(Ordering::Relaxed) - f0 - n as usize;
        let d = store.stats().detail;
        let flushes: usize = d
            .split(", ")
            .find_map(|p| p.strip_suffix(" flushes"))
            .unwrap()
            .parse()
            .unwrap();
        let compactions: usize = d
            .split(", ")
            .find_map(|p| p.split_once(" compactions (").map(|(n, _)| n))
            .unwrap()
            .parse()
            .unwrap();
        eprintln!(
            "{a}: {n} puts, {flushes} flushes, {compactions} compactions, {extra} extra fences; {d}"
        );
        assert!(flushes > 50, "{d}");
        // 3 per flush and 3 per compaction (run + manifest under one
        // fence, the publish's two), plus the allocator's own reserve
        // fences: the lock heap fences twice for each block it splits
        // (run and manifest: up to 4 more).
        let per = if a == AllocKind::Ferrite { 4 } else { 8 };
        assert!(
            extra <= per * (flushes + compactions),
            "{extra} fences for {flushes} flushes and {compactions} compactions"
        );
    }

    // No flush in flight when a write (or a flush of the memtable) returns.
    let mut opts = small(AllocKind::Ferrite);
    opts.lsm.memtable_bytes = 4 << 10;
    let (p, obs) = InFlight::open(&pool.image(), &pool_opts(8)).unwrap();
    let store = Store::open(&p, &opts).unwrap();
    let mut s = store.session().unwrap();
    for i in 0..200u32 {
        s.put(format!("key{i:05}").as_bytes(), &val[..200]).unwrap();
        assert_eq!(obs.count(), 0, "put {i} left a flush in flight");
        if i % 10 == 0 {
            s.delete(format!("key{:05}", i / 2).as_bytes()).unwrap();
            assert_eq!(obs.count(), 0);
        }
    }
    assert!(store.stats().detail.contains("flushes"));
}

// ---------------------------------------------------------------------------
// Crash exploration
// ---------------------------------------------------------------------------

/// What the crash workload saw acknowledged, and the write in flight.
#[derive(Default)]
struct Model {
    acked: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The in-flight write as (key, Some(value) | None for delete) pairs.
    pending: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

fn crash_opts(fault: Option<Fault>) -> StoreOptions {
    crash_opts_in(fault, AllocKind::Ferrite)
}

fn crash_opts_in(fault: Option<Fault>, a: AllocKind) -> StoreOptions {
    let mut o = StoreOptions::new(EngineKind::Lsm)
        .allocator(a)
        .sessions(1)
        .nonce(11);
    o.lsm.memtable_bytes = 600;
    o.lsm.log_slack = 256;
    o.lsm.block_bytes = 128;
    o.lsm.max_runs = 3;
    if let Some(f) = fault {
        o.fault = crate::Fault::Lsm(f);
    }
    o
}

fn crash_script(pool: &Pool, m: &mut Model, opts: &StoreOptions) {
    let store = Store::open(pool, opts).expect("open");
    let mut s = store.session().expect("session");
    for i in 0..14u32 {
        let k = |j: u32| format!("k{:02}", j % 6).into_bytes();
        // Write 9 does not fit the log segment: the flush replaces it.
        let v = |j: u32| {
            vec![
                b'a' + (j % 26) as u8;
                if j == 9 {
                    1500
                } else {
                    40 + (j as usize * 13) % 70
                }
            ]
        };
        let ops: Vec<(Vec<u8>, Option<Vec<u8>>)> = match i % 5 {
            0 | 1 | 3 => vec![(k(i), Some(v(i)))],
            2 => vec![(k(i + 1), None)],
            _ => vec![
                (k(i), Some(v(i))),
                (k(i + 2), None),
                (k(i + 3), Some(v(i + 7))),
            ],
        };
        m.pending = ops.clone();
        let r = if ops.len() == 1 {
            match &ops[0] {
                (key, Some(val)) => s.put(key, val),
                (key, None) => s.delete(key).map(|_| ()),
            }
        } else {
            let o = crate::checks::batch_ops(&ops);
            s.batch(&o)
        };
        r.expect("write");
        for (k, v) in std::mem::take(&mut m.pending) {
            match v {
                Some(v) => m.acked.insert(k, v),
                None => m.acked.remove(&k),
            };
        }
    }
}

fn explore(fault: Option<Fault>, budget: usize) -> ferrite_crash::Report {
    explore_in(fault, AllocKind::Ferrite, budget)
}

fn explore_in(fault: Option<Fault>, a: AllocKind, budget: usize) -> ferrite_crash::Report {
    let opts = crash_opts_in(fault, a);
    let setup_opts = crash_opts_in(None, a);
    let rec_opts = crash_opts_in(None, a);
    // LSM_CRASH_FLUSH=1 also crashes at every flush, with 8-byte tearing.
    let wide = std::env::var_os("LSM_CRASH_FLUSH").is_some();
    let cfg = Config::new(LAYOUT)
        .budget(budget)
        .pool_size(640 << 10)
        .crash_on_flush(wide)
        .tearing(wide);
    Explorer::new(cfg)
        .setup(move |pool| {
            Store::create(pool, &setup_opts).expect("create");
        })
        .explore(
            |pool, m: &mut Model| crash_script(pool, m, &opts),
            |pool| Store::open(pool, &rec_opts).map_err(|e| e.to_string()),
            |_, store, m| {
                if check_store(store, &m.acked).is_ok() {
                    return Ok(());
                }
                let mut with = m.acked.clone();
                for (k, v) in &m.pending {
                    match v {
                        Some(v) => with.insert(k.clone(), v.clone()),
                        None => with.remove(k),
                    };
                }
                check_store(store, &with)
            },
        )
        .unwrap()
}

#[test]
fn crash_exploration_holds_lock_heap() {
    let r = explore_in(None, AllocKind::Lock, budget(300));
    eprintln!("lock heap: {r}");
    assert!(r.ok(), "{r}");
}

/// `LSM_CRASH_BUDGET` raises the budget for a longer run.
fn budget(default: usize) -> usize {
    std::env::var("LSM_CRASH_BUDGET")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(default)
}

#[test]
fn crash_exploration_holds() {
    let r = explore(None, budget(400));
    eprintln!("no fault: {r}");
    assert!(r.ok(), "{r}");
    assert!(r.fences > 14, "{r}");
}

#[test]
fn crash_exploration_catches_planted_faults() {
    for f in [
        Fault::RunUnflushed,
        Fault::AppendUnfenced,
        Fault::TruncateBeforeSwitch,
    ] {
        let r = explore(Some(f), 400);
        eprintln!("{f:?}: {r}");
        assert!(!r.ok(), "fault {f:?} not caught: {r}");
    }
}

/// Rough timing (run with `--release --ignored --nocapture`): 50/50
/// read/update of 1000-byte values on a pool file in /dev/shm.
#[test]
#[ignore]
fn timing_mixed_50_50() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = dir.path().join("lsm.pool");
    let mut opts = StoreOptions::new(EngineKind::Lsm).sessions(2);
    if let Ok(m) = std::env::var("LSM_MEMTABLE_MIB") {
        opts.lsm.memtable_bytes = m.parse::<u64>().unwrap() << 20;
    }
    let store = Store::create_file(&path, 512 << 20, &opts).unwrap();
    let mut s = store.session().unwrap();
    let n = 50_000u64;
    let val = vec![7u8; 1000];
    let t = std::time::Instant::now();
    for i in 0..n {
        s.put(format!("user{i:012}").as_bytes(), &val).unwrap();
    }
    let load = t.elapsed();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let ops = 200_000;
    let mut out = Vec::new();
    let t = std::time::Instant::now();
    for _ in 0..ops {
        let k = format!("user{:012}", rng.random_range(0..n));
        if rng.random_bool(0.5) {
            assert!(s.get_into(k.as_bytes(), &mut out).unwrap());
        } else {
            s.put(k.as_bytes(), &val).unwrap();
        }
    }
    let run = t.elapsed();
    eprintln!(
        "load {n}: {:.0} ops/s; 50/50 {ops}: {:.0} ops/s ({:.2} us/op); {}",
        n as f64 / load.as_secs_f64(),
        ops as f64 / run.as_secs_f64(),
        run.as_secs_f64() * 1e6 / ops as f64,
        store.stats().detail
    );
}

/// Corrupt bytes anywhere in the engine's blocks: open (and walk, when
/// open succeeds) returns, with an error or a store, and never panics.
/// The corruption is detected: by the open, or — a damaged run data
/// block, which the open lists and keeps — by the walk, which reads it.
#[test]
fn corruption_is_an_error_never_a_panic() {
    let mib = 4;
    let pool = new_pool(mib);
    let opts = small(AllocKind::Ferrite);
    let store = Store::create(&pool, &opts).unwrap();
    let mut s = store.session().unwrap();
    for i in 0..600u32 {
        s.put(format!("k{i:04}").as_bytes(), &[i as u8; 90])
            .unwrap();
        if i % 5 == 0 {
            s.delete(format!("k{:04}", i / 2).as_bytes()).unwrap();
        }
    }
    drop(s);
    let blocks = store.walk().unwrap().blocks;
    drop(store);
    let image = pool.image();
    let header = ferrite_pmem::HEADER_SIZE;
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let (mut errors, mut opened) = (0, 0);
    for round in 0..150 {
        let mut img = image.clone();
        // Corrupt 1–4 bytes in one of the blocks (or the link word).
        let (off, len) = blocks[round % blocks.len()];
        for _ in 0..rng.random_range(1..5) {
            let at = if round % 17 == 0 {
                header + crate::superblock::SUPERBLOCK_BYTES + rng.random_range(0..8)
            } else {
                (off + rng.random_range(0..len.min(4096))) as usize
            };
            img[at] ^= 1 << rng.random_range(0..8);
        }
        let p = Pool::open_image(&img, &pool_opts(mib), Domain::Adr, None).unwrap();
        match Store::open(&p, &opts) {
            Err(_) => errors += 1,
            Ok(st) => {
                opened += 1;
                if st.walk().is_err() {
                    errors += 1;
                }
                let mut s = st.session().unwrap();
                let _ = s.get(b"k0001");
                let _ = s.scan(b"k", 50);
            }
        }
    }
    assert!(errors > 50, "{errors} errors, {opened} opened");
}

/// One key's write: a value, or `None` for a delete.
type Write = (Vec<u8>, Option<Vec<u8>>);

/// Two threads' acknowledged writes, and each one's write in flight.
#[derive(Default)]
struct Model2 {
    acked: BTreeMap<Vec<u8>, Vec<u8>>,
    pending: [Vec<Write>; 2],
}

fn apply(m: &mut BTreeMap<Vec<u8>, Vec<u8>>, ops: &[(Vec<u8>, Option<Vec<u8>>)]) {
    for (k, v) in ops {
        match v {
            Some(v) => m.insert(k.clone(), v.clone()),
            None => m.remove(k),
        };
    }
}

fn two_thread_script(pool: &Pool, model: &mut Model2, opts: &StoreOptions) {
    use ferrite_crash::lockstep;
    use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
    use std::sync::Mutex;
    let store = Store::open(pool, opts).expect("open");
    let shared = Mutex::new(std::mem::take(model));
    let r = catch_unwind(AssertUnwindSafe(|| {
        let bodies: Vec<Box<dyn FnOnce() + Send + '_>> = (0..2usize)
            .map(|t| {
                let (store, shared) = (&store, &shared);
                Box::new(move || {
                    let mut s = store.session().expect("session");
                    for i in 0..7u32 {
                        // Disjoint keys per thread; a key of the other
                        // thread is only read.
                        let k = |j: u32| format!("t{t}k{}", j % 4).into_bytes();
                        let v = vec![b'a' + (i + t as u32) as u8; 50 + 9 * i as usize];
                        let ops: Vec<(Vec<u8>, Option<Vec<u8>>)> = match i % 4 {
                            0 | 1 => vec![(k(i), Some(v))],
                            2 => vec![(k(i + 3), None)],
                            _ => vec![(k(i), Some(v.clone())), (k(i + 1), Some(v))],
                        };
                        shared.lock().unwrap().pending[t] = ops.clone();
                        let r = match (ops.len(), &ops[0]) {
                            (1, (key, Some(val))) => s.put(key, val),
                            (1, (key, None)) => s.delete(key).map(|_| ()),
                            _ => {
                                let o: Vec<Op<'_>> = ops
                                    .iter()
                                    .map(|(k, v)| Op::Put {
                                        key: k,
                                        value: v.as_deref().unwrap(),
                                    })
                                    .collect();
                                s.batch(&o)
                            }
                        };
                        r.expect("write");
                        let mut m = shared.lock().unwrap();
                        let p = std::mem::take(&mut m.pending[t]);
                        apply(&mut m.acked, &p);
                        drop(m);
                        let other = format!("t{}k{}", 1 - t, i % 4);
                        s.get(other.as_bytes()).expect("get");
                    }
                }) as Box<dyn FnOnce() + Send + '_>
            })
            .collect();
        lockstep::run(5, 3, bodies)
    }));
    *model = shared.into_inner().unwrap_or_else(|p| p.into_inner());
    if let Err(p) = r {
        resume_unwind(p);
    }
}

#[test]
fn crash_exploration_two_threads() {
    let mut opts = crash_opts(None).sessions(2);
    opts.lsm.memtable_bytes = 700;
    let setup_opts = opts.clone();
    let run_opts = opts.clone();
    let r = Explorer::new(Config::new(LAYOUT).budget(budget(300)).pool_size(640 << 10))
        .setup(move |pool| {
            Store::create(pool, &setup_opts).expect("create");
        })
        .explore(
            |pool, m: &mut Model2| two_thread_script(pool, m, &run_opts),
            |pool| Store::open(pool, &opts).map_err(|e| e.to_string()),
            |_, store, m| {
                let mut last = String::new();
                for mask in 0..4 {
                    let mut want = m.acked.clone();
                    for t in 0..2 {
                        if mask & (1 << t) != 0 {
                            apply(&mut want, &m.pending[t]);
                        }
                    }
                    match check_store(store, &want) {
                        Ok(()) => return Ok(()),
                        Err(e) => last = e,
                    }
                }
                Err(last)
            },
        )
        .unwrap();
    eprintln!("two threads: {r}");
    assert!(r.ok(), "{r}");
}

/// A log record damaged after it was durable is reported at open (a
/// later record says its predecessors were durable), not cut off with
/// everything after it; a relaxed record lost in a crash with a durable
/// successor still ends the log quietly (its successor's bit is clear).
#[test]
fn a_damaged_log_record_is_told_from_a_torn_one() {
    for relaxed in [false, true] {
        let opts = small(AllocKind::Ferrite);
        let pool = new_pool(4);
        let store = Store::create(&pool, &opts).unwrap();
        let mut s = store.session().unwrap();
        s.put(b"a", b"1").unwrap();
        let d = if relaxed {
            Durability::Eventual
        } else {
            Durability::Immediate
        };
        s.batch_with(
            &[Op::Put {
                key: b"b",
                value: b"2",
            }],
            d,
        )
        .unwrap();
        s.put(b"c", b"3").unwrap();
        let seg = store.walk().unwrap().blocks[1].0 as usize;
        drop(s);
        drop(store);
        // Records are one line each: "b" is the second.
        let mut img = pool.image();
        img[seg + 64 + 30] ^= 0x5a;
        let p2 = Pool::open_image(&img, &pool_opts(4), Domain::Adr, None).unwrap();
        match Store::open(&p2, &opts) {
            Err(EngineError::Corrupt(m)) => {
                assert!(!relaxed, "a relaxed record's loss is a crash's: {m}");
                assert!(m.contains("damaged"), "{m}");
            }
            Ok(st) => {
                assert!(relaxed, "a damaged durable record was cut off silently");
                assert_eq!(st.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
                // The relaxed record and what followed it are gone together.
                assert_eq!(st.get(b"b").unwrap(), None);
                assert_eq!(st.get(b"c").unwrap(), None);
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// A memtable of tombstones over keys that live in runs (a large delete
/// not yet flushed): scans take the memtable in batches
/// (`read::MEM_BATCH`), each merged with the runs below its cut, in both
/// directions, live and on a snapshot, and return what the model holds.
#[test]
fn scans_through_a_memtable_of_tombstones_in_batches() {
    let pool = new_pool(32);
    let mut model = BTreeMap::new();
    {
        let store = Store::create(&pool, &small(AllocKind::Ferrite)).unwrap();
        let mut s = store.session().unwrap();
        for i in 0..3000u32 {
            let (k, v) = (format!("key{i:05}").into_bytes(), i.to_le_bytes().to_vec());
            s.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        drop(s);
        store.quiesce().unwrap();
    }
    // Reopened with a memtable that holds every tombstone below.
    let mut big = small(AllocKind::Ferrite);
    big.lsm.memtable_bytes = 4 << 20;
    let store = Store::open(&pool, &big).unwrap();
    let mut s = store.session().unwrap();
    // Deleted: long stretches (more than a batch) and every other key.
    for i in
        (0..3000u32).filter(|i| (400..1400).contains(i) || (2000..2600).contains(i) || i % 2 == 1)
    {
        let k = format!("key{i:05}").into_bytes();
        assert!(s.delete(&k).unwrap());
        model.remove(&k);
    }
    let mut snap = store.snapshot().unwrap();
    let want_all: Vec<(Vec<u8>, Vec<u8>)> = model.clone().into_iter().collect();
    for (from, limit) in [
        (0u32, 1usize),
        (0, 10),
        (390, 10),
        (390, 300),
        (0, 5000),
        (1390, 20),
        (2590, 1),
    ] {
        let from_key = format!("key{from:05}").into_bytes();
        let want: Vec<_> = model
            .range(from_key.clone()..)
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(
            s.scan(&from_key, limit).unwrap(),
            want,
            "scan from {from}, {limit}"
        );
        let mut got = Vec::new();
        snap.range_with(&crate::KeyRange::new(from_key.clone()..), &mut |k, v| {
            got.push((k.to_vec(), v.to_vec()));
            got.len() < limit
        })
        .unwrap();
        assert_eq!(got, want, "snapshot scan from {from}, {limit}");
    }
    let mut rev = want_all.clone();
    rev.reverse();
    assert_eq!(s.range(&crate::KeyRange::all().rev()).unwrap(), rev);
    let below = format!("key{:05}", 2700).into_bytes();
    let want: Vec<_> = model
        .range(..below.clone())
        .rev()
        .take(700)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut got = Vec::new();
    snap.range_with(&crate::KeyRange::new(..below).rev(), &mut |k, v| {
        got.push((k.to_vec(), v.to_vec()));
        got.len() < 700
    })
    .unwrap();
    assert_eq!(got, want);
    assert_eq!(s.range(&crate::KeyRange::all()).unwrap(), want_all);
}
