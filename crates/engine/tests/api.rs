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

/// A 16 MiB store of `kind` with [`small`] options, file `name` in `dir`.
fn small_store(dir: &std::path::Path, name: &str, kind: EngineKind) -> Store {
    Store::create_file(dir.join(name), 16 << 20, &small(kind)).unwrap()
}

/// Asserts that the whole store holds exactly the model's pairs.
fn assert_store_is(store: &Store, m: &Model, what: &str) {
    let got: Vec<_> = store.range(KeyRange::all()).map(Result::unwrap).collect();
    assert_eq!(got, model_range(m, &KeyRange::all()), "{what}");
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
    // The engines stop reading where the visitor says (a scan's limit is
    // only its most): forward and backward, from a random key.
    for _ in 0..20 {
        let from = key(rng.random_range(0..n));
        let stop = rng.random_range(1..6);
        let mut seen = Vec::new();
        let got = s
            .scan_with(&from, 50, &mut |k, _| {
                seen.push(k.to_vec());
                seen.len() < stop
            })
            .unwrap();
        let want: Vec<_> = m
            .range(from.clone()..)
            .take(stop)
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(
            (got, &seen),
            (want.len(), &want),
            "{kind}: scan from {from:?}"
        );
        seen.clear();
        let got = s
            .scan_back_with(Bound::Included(&from), 50, &mut |k, _| {
                seen.push(k.to_vec());
                seen.len() < stop
            })
            .unwrap();
        let want: Vec<_> = m
            .range(..=from.clone())
            .rev()
            .take(stop)
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(
            (got, &seen),
            (want.len(), &want),
            "{kind}: back from {from:?}"
        );
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

/// Keys whose first eight bytes tie (InP orders a leaf by those bytes and
/// reads full keys only for ties), and short keys that pad to the same
/// eight bytes (`b"a"`, `b"a\0"`): ranges both ways match a model.
#[test]
fn ranges_over_keys_sharing_their_first_eight_bytes_match_a_model() {
    let dir = tempfile::tempdir().unwrap();
    for kind in EngineKind::ALL {
        let store = Store::create_file(
            dir.path().join(format!("{kind}.pool")),
            32 << 20,
            &small(kind),
        )
        .unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mut m = Model::new();
        let mut s = store.session().unwrap();
        for i in 0..1500u32 {
            let k = match i % 3 {
                0 => format!("user:00000{}", rng.random_range(0..4000)).into_bytes(),
                1 => {
                    let mut k = b"a".to_vec();
                    k.resize(rng.random_range(1..9), 0);
                    k.push(rng.random_range(0..3));
                    k
                }
                _ => format!("k{}", rng.random_range(0..4000)).into_bytes(),
            };
            let v = format!("v{i}").into_bytes();
            s.put(&k, &v).unwrap();
            m.insert(k, v);
        }
        let probes: Vec<Vec<u8>> = vec![
            b"a".to_vec(),
            b"a\0".to_vec(),
            b"a\0\0\0\0\0\0\0\x01".to_vec(),
            b"user:00000".to_vec(),
            b"user:000002".to_vec(),
            b"k2".to_vec(),
            b"z".to_vec(),
        ];
        for p in &probes {
            for r in [
                KeyRange::new(p.clone()..),
                KeyRange::new(..p.clone()),
                KeyRange::new(..=p.clone()).rev(),
                KeyRange::prefix(p).rev(),
            ] {
                assert_eq!(s.range(&r).unwrap(), model_range(&m, &r), "{kind}: {r:?}");
            }
        }
    }
}

#[test]
fn the_longest_keys_bound_ranges_correctly() {
    let dir = tempfile::tempdir().unwrap();
    for kind in EngineKind::ALL {
        let store = small_store(dir.path(), &format!("{kind}.pool"), kind);
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

#[test]
fn a_write_transaction_reads_its_own_writes_and_commits_them_at_once() {
    let dir = tempfile::tempdir().unwrap();
    for kind in EngineKind::ALL {
        let store = Store::create_file(
            dir.path().join(format!("{kind}.pool")),
            32 << 20,
            &small(kind),
        )
        .unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(40 + kind as u64);
        let n = 1500;
        let mut m = fill(&mut store.session().unwrap(), &mut rng, n);
        let committed = m.clone();
        let mut tx = store.write().unwrap();
        for _ in 0..600 {
            let k = key(rng.random_range(0..n));
            if rng.random_range(0..3) == 0 {
                assert_eq!(tx.delete(&k).unwrap(), m.remove(&k).is_some(), "{kind}");
            } else {
                let v = format!("tx{}", rng.random::<u32>()).into_bytes();
                tx.put(&k, &v).unwrap();
                m.insert(k, v);
            }
            let probe = key(rng.random_range(0..n));
            assert_eq!(tx.get(&probe).unwrap(), m.get(&probe).cloned(), "{kind}");
        }
        for r in ranges(&mut rng, n) {
            assert_eq!(
                tx.range(&r).unwrap(),
                model_range(&m, &r),
                "{kind}: txn range {r:?}"
            );
        }
        assert_eq!(
            tx.first().unwrap(),
            m.first_key_value().map(|(k, v)| (k.clone(), v.clone()))
        );
        assert_eq!(
            tx.last().unwrap(),
            m.last_key_value().map(|(k, v)| (k.clone(), v.clone()))
        );
        // Nothing of it is visible before the commit.
        let mut snap = store.snapshot().unwrap();
        assert_eq!(
            snap.range(&KeyRange::all()).unwrap(),
            model_range(&committed, &KeyRange::all()),
            "{kind}"
        );
        drop(snap);
        tx.commit().unwrap();
        assert_store_is(&store, &m, &format!("{kind}"));
        assert_eq!(store.len().unwrap(), m.len() as u64, "{kind}: len");
        // An aborted transaction applies nothing.
        let mut tx = store.write().unwrap();
        tx.put(b"zz-aborted", b"x").unwrap();
        tx.delete_range(&KeyRange::all()).unwrap();
        assert_eq!(tx.first().unwrap(), None);
        tx.abort();
        assert_eq!(store.len().unwrap(), m.len() as u64, "{kind}: after abort");
        assert_eq!(store.get(b"zz-aborted").unwrap(), None);
    }
}

#[test]
fn retain_extract_if_and_pop_are_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    for kind in EngineKind::ALL {
        let store = Store::create_file(
            dir.path().join(format!("{kind}.pool")),
            32 << 20,
            &small(kind),
        )
        .unwrap();
        let mut m = Model::new();
        let mut s = store.session().unwrap();
        for i in 0..500u32 {
            s.put(&key(i), &i.to_le_bytes()).unwrap();
            m.insert(key(i), i.to_le_bytes().to_vec());
        }
        let even = |v: &[u8]| u32::from_le_bytes(v.try_into().unwrap()) % 2 == 0;
        let mut tx = store.write().unwrap();
        assert_eq!(
            tx.retain(&KeyRange::new(key(0)..key(100)), |_, v| even(v))
                .unwrap(),
            50
        );
        let taken = tx
            .extract_if(&KeyRange::new(key(100)..key(200)).rev(), |_, v| !even(v))
            .unwrap();
        assert_eq!(taken.len(), 50);
        assert_eq!(taken[0].0, key(199), "extract_if keeps the range's order");
        let (first, _) = tx.pop_first().unwrap().unwrap();
        let (last, _) = tx.pop_last().unwrap().unwrap();
        assert_eq!((first, last), (key(0), key(499)));
        tx.commit().unwrap();
        m.retain(|k, v| {
            let i: u32 = std::str::from_utf8(&k[1..]).unwrap().parse().unwrap();
            !((i < 200 && !even(v)) || i == 0 || i == 499)
        });
        assert_store_is(&store, &m, &format!("{kind}"));
        assert_eq!(store.len().unwrap(), 398, "{kind}");
    }
}

/// Pops from both ends mixed with puts and deletes in one transaction,
/// against a model: a pop never misses a key put back below what was
/// popped (the pop cursors reset), and the commit leaves exactly the model.
#[test]
fn pops_mixed_with_writes_match_a_model() {
    let dir = tempfile::tempdir().unwrap();
    for kind in EngineKind::ALL {
        for seed in 0..3u64 {
            pops_against_a_model(kind, dir.path(), seed);
        }
    }
}

/// Writes landing where a pop end has read ahead: a put between the
/// popped keys and the next stored ones, a put over a stored key not yet
/// popped, a delete of one, and the other end's pops reaching it.
#[test]
fn writes_inside_a_pop_read_ahead_are_seen_by_the_next_pops() {
    let dir = tempfile::tempdir().unwrap();
    for kind in EngineKind::ALL {
        let store = small_store(dir.path(), &format!("ahead-{kind}.pool"), kind);
        let mut s = store.session().unwrap();
        for i in (0..40u32).step_by(2) {
            s.put(&key(i), b"v").unwrap();
        }
        drop(s);
        let mut tx = store.write().unwrap();
        // Pops `(front?, key index, value)` in order, each checked.
        let pops = |tx: &mut ferrite_engine::WriteTxn, want: &[(bool, u32, &str)]| {
            for &(front, i, v) in want {
                let got = if front { tx.pop_first() } else { tx.pop_last() }.unwrap();
                let want = Some((key(i), v.as_bytes().to_vec()));
                assert_eq!(got, want, "{kind}: pop of {i}");
            }
        };
        pops(&mut tx, &[(true, 0, "v"), (true, 2, "v")]);
        tx.put(&key(3), b"new").unwrap();
        pops(&mut tx, &[(true, 3, "new")]);
        tx.put(&key(6), b"over").unwrap();
        pops(&mut tx, &[(true, 4, "v"), (true, 6, "over")]);
        assert!(tx.delete(&key(8)).unwrap());
        // The front end reads ahead again (up to the last key), then the
        // back end pops down into it.
        pops(&mut tx, &[(true, 10, "v"), (true, 12, "v")]);
        let back: Vec<_> = (24..40u32)
            .step_by(2)
            .rev()
            .map(|i| (false, i, "v"))
            .collect();
        pops(&mut tx, &back);
        pops(&mut tx, &[(true, 14, "v")]);
        let back: Vec<_> = (16..24u32)
            .step_by(2)
            .rev()
            .map(|i| (false, i, "v"))
            .collect();
        pops(&mut tx, &back);
        assert_eq!(tx.pop_first().unwrap(), None, "{kind}");
        assert_eq!(tx.pop_last().unwrap(), None, "{kind}");
        tx.commit().unwrap();
        assert_eq!(store.len().unwrap(), 0, "{kind}");
    }
}

/// Removals by retain and extract_if, then puts of removed keys, then
/// the commit with no read in between: the puts made after a removal
/// win, the removals made after a put win.
#[test]
fn puts_after_removals_win_at_the_commit_and_removals_after_puts_too() {
    let dir = tempfile::tempdir().unwrap();
    for kind in EngineKind::ALL {
        let store = small_store(dir.path(), &format!("removed-{kind}.pool"), kind);
        let mut m = Model::new();
        let mut s = store.session().unwrap();
        for i in 0..200u32 {
            s.put(&key(i), b"old").unwrap();
            m.insert(key(i), b"old".to_vec());
        }
        drop(s);
        let mut tx = store.write().unwrap();
        // A put, then a retain that removes it with others.
        tx.put(&key(3), b"put-then-removed").unwrap();
        let gone = tx
            .retain(&KeyRange::all(), |k, _| k[k.len() - 1] % 2 == 0)
            .unwrap();
        m.retain(|k, _| k[k.len() - 1] % 2 == 0);
        assert_eq!(gone, 100, "{kind}");
        // Puts of removed keys, then an extract_if, then more puts.
        for i in [1u32, 5, 7] {
            tx.put(&key(i), b"back").unwrap();
            m.insert(key(i), b"back".to_vec());
        }
        let out = tx
            .extract_if(&KeyRange::between(key(40), key(60)), |k, _| {
                k[k.len() - 1] % 4 == 0
            })
            .unwrap();
        let before = m.len();
        m.retain(|k, _| !(k >= &key(40) && k < &key(60) && k[k.len() - 1] % 4 == 0));
        assert_eq!(out.len(), before - m.len(), "{kind}");
        assert!(!out.is_empty());
        tx.put(&key(40), b"after-extract").unwrap();
        m.insert(key(40), b"after-extract".to_vec());
        tx.commit().unwrap();
        assert_store_is(&store, &m, &format!("{kind}"));
    }
}

/// Pops from both ends (runs of them, so the read-ahead of each end is
/// used and refilled), mixed with puts, deletes, gets, retains and
/// first/last, then pops until the table is empty; the transaction
/// matches a model throughout and after its commit.
fn pops_against_a_model(kind: EngineKind, dir: &std::path::Path, seed: u64) {
    let store = small_store(dir, &format!("pops-{kind}-{seed}.pool"), kind);
    let mut m = Model::new();
    let mut s = store.session().unwrap();
    for i in (0..3000u32).step_by(2) {
        s.put(&key(i), &i.to_le_bytes()).unwrap();
        m.insert(key(i), i.to_le_bytes().to_vec());
    }
    drop(s);
    let mut rng = ChaCha8Rng::seed_from_u64(11 + seed);
    let mut tx = store.write().unwrap();
    for step in 0..3000 {
        // Phases of pops only, then of mixed operations.
        let op = if (step / 150) % 2 == 0 {
            rng.random_range(0..4)
        } else {
            rng.random_range(0..9)
        };
        match op {
            0 | 1 => {
                let want = m.pop_first();
                assert_eq!(tx.pop_first().unwrap(), want, "{kind} step {step}");
            }
            2 | 3 => {
                let want = m.pop_last();
                assert_eq!(tx.pop_last().unwrap(), want, "{kind} step {step}");
            }
            4 | 5 => {
                let i = rng.random_range(0..3000u32);
                tx.put(&key(i), b"again").unwrap();
                m.insert(key(i), b"again".to_vec());
            }
            6 => {
                let i = rng.random_range(0..3000u32);
                assert_eq!(
                    tx.delete(&key(i)).unwrap(),
                    m.remove(&key(i)).is_some(),
                    "{kind} step {step}"
                );
            }
            7 => {
                let i = rng.random_range(0..3000u32);
                assert_eq!(
                    tx.get(&key(i)).unwrap(),
                    m.get(&key(i)).cloned(),
                    "{kind} step {step}"
                );
            }
            _ => {
                let cut = rng.random_range(0..7u8);
                let gone = tx
                    .retain(&KeyRange::all(), |k, _| k[k.len() - 1] % 7 != cut)
                    .unwrap();
                let before = m.len();
                m.retain(|k, _| k[k.len() - 1] % 7 != cut);
                assert_eq!(gone, before - m.len(), "{kind} step {step}");
            }
        }
        if step % 97 == 0 {
            let first = m.iter().next().map(|(k, v)| (k.clone(), v.clone()));
            let last = m.iter().next_back().map(|(k, v)| (k.clone(), v.clone()));
            assert_eq!(tx.first().unwrap(), first, "{kind} step {step}");
            assert_eq!(tx.last().unwrap(), last, "{kind} step {step}");
        }
    }
    // Both ends meet.
    let mut step = 0;
    loop {
        let (got, want) = if step % 3 == 0 {
            (tx.pop_last().unwrap(), m.pop_last())
        } else {
            (tx.pop_first().unwrap(), m.pop_first())
        };
        assert_eq!(got, want, "{kind}: emptying, pop {step}");
        if want.is_none() {
            break;
        }
        step += 1;
        if step == 200 {
            // Commit what was popped so far in a new transaction's view.
            tx.commit().unwrap();
            assert_store_is(&store, &m, &format!("{kind}: after the first commit"));
            tx = store.write().unwrap();
        }
    }
    tx.commit().unwrap();
    assert_eq!(store.len().unwrap(), 0, "{kind}");
}

/// Blind puts (no read in the transaction) are kept unsorted until the
/// commit: the last put of a key still wins, and a read in between sees
/// every put made before it.
#[test]
fn blind_puts_in_a_transaction_keep_the_last_value_of_a_key() {
    let dir = tempfile::tempdir().unwrap();
    for kind in EngineKind::ALL {
        let store = small_store(dir.path(), &format!("blind-{kind}.pool"), kind);
        let mut m = Model::new();
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        for round in 0..3 {
            let mut tx = store.write().unwrap();
            let mut written = std::collections::BTreeSet::new();
            for j in 0..3000u32 {
                let i = rng.random_range(0..500u32);
                let v = format!("{round}-{j}").into_bytes();
                tx.put(&key(i), &v).unwrap();
                m.insert(key(i), v);
                written.insert(i);
                // Round 1 reads now and then: earlier puts are seen.
                if round == 1 && j % 500 == 0 {
                    let probe = key(rng.random_range(0..500u32));
                    assert_eq!(tx.get(&probe).unwrap().as_ref(), m.get(&probe));
                    assert_eq!(tx.pending(), written.len(), "{kind}");
                }
            }
            tx.commit().unwrap();
            assert_store_is(&store, &m, &format!("{kind} round {round}"));
        }
    }
}

#[test]
fn other_writes_wait_for_a_write_transaction() {
    let dir = tempfile::tempdir().unwrap();
    for kind in EngineKind::ALL {
        let store = Store::create_file(
            dir.path().join(format!("{kind}.pool")),
            16 << 20,
            &StoreOptions::new(kind),
        )
        .unwrap();
        let mut tx = store.write().unwrap();
        let other = store.clone();
        let h = std::thread::spawn(move || other.put(b"k", b"plain").unwrap());
        std::thread::sleep(std::time::Duration::from_millis(150));
        assert!(
            !h.is_finished(),
            "{kind}: a plain put landed inside a write transaction"
        );
        assert_eq!(tx.get(b"k").unwrap(), None);
        tx.put(b"k", b"txn").unwrap();
        tx.commit().unwrap();
        h.join().unwrap();
        assert_eq!(
            store.get(b"k").unwrap().as_deref(),
            Some(&b"plain"[..]),
            "{kind}"
        );
    }
}

/// Writers move amounts between accounts in batches (the total never
/// changes); every snapshot, read key by key and by a range in both
/// directions, must show the same total: no view sees part of a batch.
#[test]
fn snapshots_never_see_part_of_a_batch() {
    let dir = tempfile::tempdir().unwrap();
    const ACCOUNTS: u32 = 300;
    const TOTAL: u64 = ACCOUNTS as u64 * 1000;
    for kind in EngineKind::ALL {
        let store = Store::create_file(
            dir.path().join(format!("{kind}.pool")),
            64 << 20,
            &small(kind),
        )
        .unwrap();
        let ops: Vec<(Vec<u8>, Vec<u8>)> = (0..ACCOUNTS)
            .map(|i| (key(i), 1000u64.to_le_bytes().to_vec()))
            .collect();
        let batch: Vec<Op> = ops
            .iter()
            .map(|(k, v)| Op::Put { key: k, value: v })
            .collect();
        store.batch(&batch).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writers: Vec<_> = (0..2u64)
            .map(|t| {
                let store = store.clone();
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut rng = ChaCha8Rng::seed_from_u64(t);
                    let mut moves = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let mut tx = store.write().unwrap();
                        let (a, b) = (
                            key(rng.random_range(0..ACCOUNTS)),
                            key(rng.random_range(0..ACCOUNTS)),
                        );
                        if a == b {
                            continue;
                        }
                        let get = |tx: &mut ferrite_engine::WriteTxn, k: &[u8]| {
                            u64::from_le_bytes(tx.get(k).unwrap().unwrap().try_into().unwrap())
                        };
                        let (va, vb) = (get(&mut tx, &a), get(&mut tx, &b));
                        let amt = rng.random_range(0..=va);
                        tx.put(&a, &(va - amt).to_le_bytes()).unwrap();
                        tx.put(&b, &(vb + amt).to_le_bytes()).unwrap();
                        tx.commit().unwrap();
                        moves += 1;
                    }
                    moves
                })
            })
            .collect();
        let sum = |pairs: &[(Vec<u8>, Vec<u8>)]| {
            pairs
                .iter()
                .map(|(_, v)| u64::from_le_bytes(v.as_slice().try_into().unwrap()))
                .sum::<u64>()
        };
        for _ in 0..60 {
            let mut snap = store.snapshot().unwrap();
            let fwd = snap.range(&KeyRange::all()).unwrap();
            let back = snap.range(&KeyRange::all().rev()).unwrap();
            let mut by_key = 0;
            for i in 0..ACCOUNTS {
                by_key +=
                    u64::from_le_bytes(snap.get(&key(i)).unwrap().unwrap().try_into().unwrap());
            }
            assert_eq!(
                (sum(&fwd), sum(&back), by_key),
                (TOTAL, TOTAL, TOTAL),
                "{kind}"
            );
            assert_eq!(snap.len().unwrap(), ACCOUNTS as u64, "{kind}");
            drop(snap);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let moves: u64 = writers.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(moves > 0, "{kind}: the writers never ran");
        assert_eq!(
            sum(&store
                .range(KeyRange::all())
                .map(Result::unwrap)
                .collect::<Vec<_>>()),
            TOTAL
        );
    }
}

#[test]
fn a_snapshot_keeps_its_view_while_writers_go_on() {
    let dir = tempfile::tempdir().unwrap();
    // CoW and LSM writers do not wait for a view (InP's do: see the docs).
    for kind in [EngineKind::Cow, EngineKind::Lsm] {
        let store = Store::create_file(
            dir.path().join(format!("{kind}.pool")),
            32 << 20,
            &small(kind),
        )
        .unwrap();
        for i in 0..200u32 {
            store.put(&key(i), b"old").unwrap();
        }
        let mut snap = store.snapshot().unwrap();
        for i in 0..200u32 {
            store.put(&key(i), b"new").unwrap();
        }
        store.delete(&key(7)).unwrap();
        assert_eq!(
            snap.get(&key(7)).unwrap().as_deref(),
            Some(&b"old"[..]),
            "{kind}"
        );
        assert!(
            snap.range(&KeyRange::all())
                .unwrap()
                .iter()
                .all(|(_, v)| v == b"old"),
            "{kind}"
        );
        assert_eq!(snap.len().unwrap(), 200);
        assert_eq!(store.len().unwrap(), 199);
        assert_eq!(store.get(&key(8)).unwrap().as_deref(), Some(&b"new"[..]));
    }
}

#[test]
fn any_number_of_threads_read_without_sessions() {
    let dir = tempfile::tempdir().unwrap();
    for kind in EngineKind::ALL {
        // One session: the writer's. Readers need none.
        let store = Store::create_file(
            dir.path().join(format!("{kind}.pool")),
            16 << 20,
            &StoreOptions::new(kind).sessions(1),
        )
        .unwrap();
        for i in 0..100u32 {
            store.put(&key(i), b"v").unwrap();
        }
        let mut writer = store.session().unwrap();
        let readers: Vec<_> = (0..16)
            .map(|_| {
                let mut r = store.reader();
                let store = store.clone();
                std::thread::spawn(move || {
                    for i in 0..100u32 {
                        assert_eq!(r.get(&key(i)).unwrap().as_deref(), Some(&b"v"[..]));
                        assert_eq!(store.get(&key(i)).unwrap().as_deref(), Some(&b"v"[..]));
                    }
                    assert_eq!(
                        store
                            .range(KeyRange::prefix(b"k"))
                            .filter(|p| p.is_ok())
                            .count(),
                        100
                    );
                    r.range(&KeyRange::prefix(b"k0000")).unwrap().len()
                })
            })
            .collect();
        writer.put(b"other", b"w").unwrap();
        for h in readers {
            assert_eq!(h.join().unwrap(), 10, "{kind}");
        }
        assert!(matches!(
            store.session(),
            Err(EngineError::TooManySessions { max: 1 })
        ));
    }
}

#[test]
fn relaxed_commits_are_visible_at_once_and_durable_after_sync_or_close() {
    let dir = tempfile::tempdir().unwrap();
    for kind in EngineKind::ALL {
        let p = dir.path().join(format!("{kind}.pool"));
        let store = Store::create_file(&p, 16 << 20, &StoreOptions::new(kind)).unwrap();
        for i in 0..300u32 {
            let k = key(i);
            store
                .batch_with(
                    &[Op::Put {
                        key: &k,
                        value: b"relaxed",
                    }],
                    ferrite_engine::Durability::Eventual,
                )
                .unwrap();
            assert_eq!(
                store.get(&k).unwrap().as_deref(),
                Some(&b"relaxed"[..]),
                "{kind}"
            );
        }
        store.sync().unwrap();
        let mut tx = store.write().unwrap();
        tx.set_durability(ferrite_engine::Durability::Eventual);
        tx.put(b"from-txn", b"x").unwrap();
        tx.commit().unwrap();
        // Close makes them durable.
        store.close().unwrap();
        let store = Store::open_file(&p, &StoreOptions::default()).unwrap();
        assert_eq!(store.len().unwrap(), 301, "{kind}");
        assert_eq!(store.get(b"from-txn").unwrap().as_deref(), Some(&b"x"[..]));
    }
}

/// Transactions of random puts, deletes (each reading its key), gets,
/// retains, extract_ifs and ranges, committed or aborted: every read
/// matches a model of the transaction's view, and after each commit the
/// store is the model. The writes of a transaction sit in several
/// buffers (unsorted puts, point writes, removals, the ordered map)
/// until a read or the commit merges them; the last write of a key must
/// win whatever buffers its writes went through.
#[test]
fn random_transactions_of_point_and_range_writes_match_a_model() {
    let dir = tempfile::tempdir().unwrap();
    for kind in EngineKind::ALL {
        let store = small_store(dir.path(), &format!("mixed-{kind}.pool"), kind);
        let mut committed = Model::new();
        let mut rng = ChaCha8Rng::seed_from_u64(21);
        for t in 0..40 {
            let mut m = committed.clone();
            let mut tx = store.write().unwrap();
            for step in 0..rng.random_range(1..200) {
                let i = rng.random_range(0..60u32);
                let what = format!("{kind} txn {t} step {step}");
                match rng.random_range(0..12) {
                    0..=3 => {
                        let v = format!("{t}.{step}").into_bytes();
                        tx.put(&key(i), &v).unwrap();
                        m.insert(key(i), v);
                    }
                    4..=6 => {
                        assert_eq!(
                            tx.delete(&key(i)).unwrap(),
                            m.remove(&key(i)).is_some(),
                            "{what}"
                        );
                    }
                    7 | 8 => {
                        assert_eq!(tx.get(&key(i)).unwrap(), m.get(&key(i)).cloned(), "{what}")
                    }
                    9 => {
                        let cut = rng.random_range(0..13u8);
                        let gone = tx
                            .retain(&KeyRange::between(key(i), key(i + 12)), |k, _| {
                                k[k.len() - 1] % 13 != cut
                            })
                            .unwrap();
                        let before = m.len();
                        m.retain(|k, _| {
                            !(k >= &key(i) && k < &key(i + 12) && k[k.len() - 1] % 13 == cut)
                        });
                        assert_eq!(gone, before - m.len(), "{what}");
                    }
                    10 => {
                        let out = tx
                            .extract_if(&KeyRange::between(key(i), key(i + 8)), |k, _| {
                                k[k.len() - 1] % 3 == 0
                            })
                            .unwrap();
                        let want: Vec<_> = m
                            .range(key(i)..key(i + 8))
                            .filter(|(k, _)| k[k.len() - 1] % 3 == 0)
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect();
                        for (k, _) in &want {
                            m.remove(k);
                        }
                        assert_eq!(out, want, "{what}");
                    }
                    _ => {
                        let r = KeyRange::between(key(i), key(i + 10));
                        assert_eq!(tx.range(&r).unwrap(), model_range(&m, &r), "{what}");
                    }
                }
            }
            if rng.random_range(0..5) == 0 {
                tx.abort();
            } else {
                tx.commit().unwrap();
                committed = m;
            }
            assert_store_is(&store, &committed, &format!("{kind} after txn {t}"));
        }
    }
}
