//! The store's owned API, as a user meets it: handles shared across
//! threads, owned sessions, options checked at open, and range reads
//! (bounds, prefix, reverse) against a model on every engine.

use ferrite_engine::{
    Domain, EngineError, EngineKind, KeyRange, Op, Session, Store, StoreOptions, StoreSession,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::ops::Bound;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn assert_send_sync<T: Send + Sync + 'static>() {}
fn assert_send<T: Send + 'static>() {}

#[test]
fn handles_and_sessions_are_owned_and_thread_safe() {
    assert_send_sync::<Store>();
    assert_send::<StoreSession>();
    assert_send::<ferrite_engine::RangeIter>();
}

/// Small nodes, memtable and blocks so that a few thousand keys make deep
/// trees, many runs and many run blocks.
fn small(kind: EngineKind) -> StoreOptions {
    let mut o = StoreOptions::new(kind).nonce(3);
    o.cow.node_bytes = 256;
    o.lsm.memtable_bytes = 16 << 10;
    o.lsm.block_bytes = 512;
    o
}

fn key(i: u32) -> Vec<u8> {
    format!("k{:05}", i).into_bytes()
}

/// Fills `s` with keys in random order, overwrites some and deletes some
/// (LSM: tombstones in the memtable and in runs).
fn fill(s: &mut StoreSession, rng: &mut ChaCha8Rng, n: u32) -> Model {
    let mut m = Model::new();
    for _ in 0..n * 2 {
        let i = rng.random_range(0..n);
        let k = key(i);
        match rng.random_range(0..10) {
            0..=1 => {
                s.delete(&k).unwrap();
                m.remove(&k);
            }
            2 => {
                // Batches too: both sides see them whole.
                let v1 = format!("b{i}").into_bytes();
                let k2 = key((i + 1) % n);
                s.batch(&[
                    Op::Put {
                        key: &k,
                        value: &v1,
                    },
                    Op::Delete { key: &k2 },
                ])
                .unwrap();
                m.insert(k.clone(), v1);
                m.remove(&k2);
            }
            _ => {
                let v = format!("v{}-{}", i, rng.random::<u16>()).into_bytes();
                s.put(&k, &v).unwrap();
                m.insert(k, v);
            }
        }
    }
    m
}

fn model_range(m: &Model, r: &KeyRange) -> Vec<(Vec<u8>, Vec<u8>)> {
    // (BTreeMap::range panics on a start past the end: a store answers
    // such a range with nothing.)
    let mut v: Vec<_> = m
        .iter()
        .filter(|(k, _)| r.contains(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if r.is_reverse() {
        v.reverse();
    }
    v
}

fn ranges(rng: &mut ChaCha8Rng, n: u32) -> Vec<KeyRange> {
    let mut out = vec![
        KeyRange::all(),
        KeyRange::all().rev(),
        KeyRange::prefix(b"k001"),
        KeyRange::prefix(b"k001").rev(),
        KeyRange::prefix(b"nothing"),
        KeyRange::new(..key(n / 2)),
        KeyRange::new(key(n / 3)..).rev(),
    ];
    for _ in 0..40 {
        let a = key(rng.random_range(0..n));
        let b = key(rng.random_range(0..n));
        let bound = |k: &Vec<u8>, r: u8| match r {
            0 => Bound::Included(k.clone()),
            1 => Bound::Excluded(k.clone()),
            _ => Bound::Unbounded,
        };
        let r = KeyRange::bounds(
            bound(&a, rng.random_range(0..3)),
            bound(&b, rng.random_range(0..3)),
        );
        out.push(if rng.random() { r.rev() } else { r });
    }
    out
}

fn check_ranges(kind: EngineKind, dir: &std::path::Path) {
    let store =
        Store::create_file(dir.join(format!("{kind}.pool")), 32 << 20, &small(kind)).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(kind as u64 + 1);
    let n = 3000;
    let mut s = store.session().unwrap();
    let m = fill(&mut s, &mut rng, n);
    assert_eq!(
        s.first().unwrap(),
        m.first_key_value().map(|(k, v)| (k.clone(), v.clone()))
    );
    assert_eq!(
        s.last().unwrap(),
        m.last_key_value().map(|(k, v)| (k.clone(), v.clone()))
    );
    for r in ranges(&mut rng, n) {
        let want = model_range(&m, &r);
        assert_eq!(s.range(&r).unwrap(), want, "{kind}: session range {r:?}");
        let got: Vec<_> = store.range(r.clone()).map(Result::unwrap).collect();
        assert_eq!(got, want, "{kind}: store range {r:?}");
        // Stopping early visits exactly the first pairs.
        let mut seen = Vec::new();
        let visited = s
            .range_with(&r, &mut |k, _| {
                seen.push(k.to_vec());
                seen.len() < 7
            })
            .unwrap();
        assert_eq!(visited, want.len().min(7), "{kind}: {r:?}");
        let want7: Vec<_> = want.iter().take(7).map(|(k, _)| k.clone()).collect();
        assert_eq!(seen, want7, "{kind}: {r:?}");
    }
    // Reopened (InP and CoW from their trees, LSM from its runs and log):
    drop(s);
    let path = store.pool().unwrap().path().unwrap().to_path_buf();
    store.close().unwrap();
    let store = Store::open_file(&path, &StoreOptions::default()).unwrap();
    let all: Vec<_> = store
        .range(KeyRange::all().rev())
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        all,
        model_range(&m, &KeyRange::all().rev()),
        "{kind}: after reopen"
    );
}

#[test]
fn ranges_match_a_model_on_every_engine() {
    let dir = tempfile::tempdir().unwrap();
    for kind in EngineKind::ALL {
        check_ranges(kind, dir.path());
    }
}

#[test]
fn the_longest_keys_bound_ranges_correctly() {
    let dir = tempfile::tempdir().unwrap();
    for kind in EngineKind::ALL {
        let store = Store::create_file(
            dir.path().join(format!("{kind}.pool")),
            16 << 20,
            &small(kind),
        )
        .unwrap();
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for b in [0x01u8, 0x7f, 0xfe, 0xff] {
            keys.push(vec![b; ferrite_engine::MAX_KEY]);
            keys.push(vec![b; 3]);
        }
        for k in &keys {
            store.put(k, b"x").unwrap();
        }
        keys.sort();
        // Exclusive starts after a longest key, and a walk in chunks of
        // one (the chunking steps past each key by its successor).
        for (i, k) in keys.iter().enumerate() {
            let r = KeyRange::bounds(Bound::Excluded(k.clone()), Bound::Unbounded);
            let got: Vec<_> = store.range(r).map(|p| p.unwrap().0).collect();
            assert_eq!(got, keys[i + 1..].to_vec(), "{kind}: after key {i}");
        }
        let back: Vec<_> = store
            .range(KeyRange::all().rev())
            .map(|p| p.unwrap().0)
            .collect();
        let mut rev = keys.clone();
        rev.reverse();
        assert_eq!(back, rev, "{kind}");
    }
}

#[test]
fn a_store_and_its_session_live_in_one_struct_on_another_thread() {
    struct App {
        _store: Store,
        session: StoreSession,
    }
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create_file(
        dir.path().join("s.pool"),
        16 << 20,
        &StoreOptions::new(EngineKind::Cow),
    )
    .unwrap();
    let mut app = App {
        session: store.session().unwrap(),
        _store: store.clone(),
    };
    drop(store);
    let h = std::thread::spawn(move || {
        app.session.put(b"from", b"thread").unwrap();
        app.session.get(b"from").unwrap()
    });
    assert_eq!(h.join().unwrap().as_deref(), Some(&b"thread"[..]));
}

#[test]
fn store_operations_from_more_threads_than_sessions_wait_for_one() {
    let dir = tempfile::tempdir().unwrap();
    for kind in EngineKind::ALL {
        let store = Store::create_file(
            dir.path().join(format!("{kind}.pool")),
            32 << 20,
            &StoreOptions::new(kind).sessions(2),
        )
        .unwrap();
        let threads: Vec<_> = (0..8u32)
            .map(|t| {
                let store = store.clone();
                std::thread::spawn(move || {
                    for i in 0..200u32 {
                        let k = format!("t{t}-{i}");
                        store.put(k.as_bytes(), &i.to_le_bytes()).unwrap();
                        assert_eq!(store.get(k.as_bytes()).unwrap().unwrap(), i.to_le_bytes());
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(store.range(KeyRange::all()).count(), 8 * 200, "{kind}");
        // Explicit sessions still reach the limit, with the idle ones
        // the store-level operations kept given back first.
        let a = store.session().unwrap();
        let b = store.session().unwrap();
        assert!(matches!(
            store.session(),
            Err(EngineError::TooManySessions { max: 2 })
        ));
        drop((a, b));
    }
}

#[test]
fn open_refuses_a_store_of_another_engine_or_session_count() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("lsm.pool");
    Store::create_file(
        &p,
        16 << 20,
        &StoreOptions::new(EngineKind::Lsm).sessions(4),
    )
    .unwrap()
    .close()
    .unwrap();
    match Store::open_file(&p, &StoreOptions::new(EngineKind::Cow)) {
        Err(EngineError::WrongEngine { found, asked }) => {
            assert_eq!((found.as_str(), asked.as_str()), ("lsm", "cow"))
        }
        other => panic!("expected WrongEngine, got {other:?}"),
    }
    assert!(matches!(
        Store::open_file(&p, &StoreOptions::default().sessions(8)),
        Err(EngineError::BadOption(_))
    ));
    let s = Store::open_file(&p, &StoreOptions::default()).unwrap();
    assert_eq!(s.kind(), EngineKind::Lsm);
    s.close().unwrap();
    Store::open_file(&p, &StoreOptions::new(EngineKind::Lsm).sessions(4)).unwrap();
}

#[test]
fn options_choose_the_domain_and_the_size() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("d.pool");
    let o = StoreOptions::default()
        .domain(Domain::Volatile)
        .size(8 << 20);
    let s = Store::open_or_create(&p, &o).unwrap();
    assert_eq!(s.pool().unwrap().domain(), Domain::Volatile);
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 8 << 20);
    s.put(b"a", b"1").unwrap();
    s.close().unwrap();
    let s = Store::open_or_create(&p, &StoreOptions::default()).unwrap();
    assert_eq!(s.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
}

#[test]
fn a_failed_create_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny.pool");
    let e = Store::create_file(&p, 64 << 10, &StoreOptions::new(EngineKind::Inp)).unwrap_err();
    assert!(matches!(e, EngineError::Full(_)), "{e}");
    assert!(!p.exists(), "the failed create left {p:?}");
    // The next create is not refused as "already exists".
    Store::create_file(&p, 16 << 20, &StoreOptions::new(EngineKind::Inp)).unwrap();
}

#[test]
fn sessions_outlive_the_store_handle_and_keep_it_open() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("keep.pool");
    let store = Store::create_file(&p, 16 << 20, &StoreOptions::new(EngineKind::Inp)).unwrap();
    let mut s = store.session().unwrap();
    // Not the last owner: close is a drop, the pool stays open (locked).
    store.close().unwrap();
    s.put(b"still", b"open").unwrap();
    assert!(
        Store::open_file(&p, &StoreOptions::default()).is_err(),
        "the pool is still locked"
    );
    drop(s);
    let store = Store::open_file(&p, &StoreOptions::default()).unwrap();
    assert_eq!(store.get(b"still").unwrap().as_deref(), Some(&b"open"[..]));
}
