//! The RocksDB adapter (feature `rocksdb`): `Kv` semantics against
//! `MemKv`, atomic batches, and acknowledged writes surviving a reopen.
//! Without the feature this file compiles to nothing.
#![cfg(feature = "rocksdb")]

use ferrite_bench::peers::rocksdb::{RocksDb, RocksStore, copy_dir};
use ferrite_workload::{BatchOp, Kv, MemKv};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn scan_all<K: Kv>(kv: &mut K, from: &[u8], limit: usize) -> Vec<(Vec<u8>, Vec<u8>)>
where
    K::Error: std::fmt::Debug,
{
    let mut out = Vec::new();
    let n = kv
        .scan(from, limit, &mut |k, v| out.push((k.to_vec(), v.to_vec())))
        .unwrap();
    assert_eq!(n, out.len());
    out
}

fn key(i: u32) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

#[test]
fn same_answers_as_memkv() {
    let store = RocksStore::create_in(&std::env::temp_dir()).unwrap();
    let mut r = store.kv();
    let mut m = MemKv::new();
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for step in 0..3000u32 {
        let k = key(rng.random_range(0..300));
        match rng.random_range(0..10) {
            0..=3 => {
                let v = vec![step as u8; rng.random_range(0..200)];
                r.put(&k, &v).unwrap();
                m.put(&k, &v).unwrap();
            }
            4..=5 => assert_eq!(r.delete(&k).unwrap(), m.delete(&k).unwrap(), "delete {k:?}"),
            6..=7 => {
                assert_eq!(r.get(&k, &mut a).unwrap(), m.get(&k, &mut b).unwrap());
                assert_eq!(a, b, "get {k:?}");
            }
            8 => {
                let limit = rng.random_range(0..40);
                let got = scan_all(&mut r, &k, limit);
                assert_eq!(got, scan_all(&mut m, &k, limit), "scan from {k:?}");
                assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "key order");
            }
            _ => {
                let ks: Vec<Vec<u8>> = (0..4).map(|_| key(rng.random_range(0..300))).collect();
                let v = step.to_le_bytes();
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
                r.batch(&ops).unwrap();
                m.batch(&ops).unwrap();
            }
        }
    }
    assert_eq!(
        scan_all(&mut r, b"", usize::MAX),
        scan_all(&mut m, b"", usize::MAX)
    );
    assert_eq!(
        store.db().count_keys().unwrap(),
        scan_all(&mut m, b"", usize::MAX).len() as u64
    );
}

#[test]
fn delete_of_absent_key_is_false_and_writes_nothing() {
    let store = RocksStore::create_in(&std::env::temp_dir()).unwrap();
    let mut r = store.kv();
    assert!(!r.delete(b"nope").unwrap());
    r.put(b"a", b"1").unwrap();
    assert!(r.delete(b"a").unwrap());
    assert!(!r.delete(b"a").unwrap());
    let mut v = Vec::new();
    assert!(!r.get(b"a", &mut v).unwrap());
    assert!(v.is_empty());
}

/// A reader scanning the two keys a batch writes together always sees
/// them equal: the batch is applied all at once.
#[test]
fn batches_are_atomic_to_readers() {
    let store = RocksStore::create_in(&std::env::temp_dir()).unwrap();
    store.kv().put(b"x", &0u32.to_le_bytes()).unwrap();
    store.kv().put(b"y", &0u32.to_le_bytes()).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut w = store.kv();
            for i in 1..=400u32 {
                let v = i.to_le_bytes();
                w.batch(&[
                    BatchOp::Put {
                        key: b"x",
                        value: &v,
                    },
                    BatchOp::Put {
                        key: b"y",
                        value: &v,
                    },
                ])
                .unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::Release);
        });
        let mut r = store.kv();
        let mut seen = 0u32;
        while !done.load(std::sync::atomic::Ordering::Acquire) {
            let got = scan_all(&mut r, b"x", 2);
            assert_eq!(got.len(), 2);
            assert_eq!(got[0].1, got[1].1, "half a batch visible");
            seen = seen.max(u32::from_le_bytes(got[0].1[..4].try_into().unwrap()));
        }
        let got = scan_all(&mut r, b"x", 2);
        assert_eq!(got[0].1, 400u32.to_le_bytes());
        assert!(seen <= 400);
    });
}

/// Acknowledged (synced) writes are in a copy of the files taken while the
/// database is still open — what a crash leaves — and after a clean close.
#[test]
fn reopen_keeps_acknowledged_writes() {
    let store = RocksStore::create_in(&std::env::temp_dir()).unwrap();
    let mut m = MemKv::new();
    {
        let mut r = store.kv();
        for i in 0..500u32 {
            let v = (i * 7).to_le_bytes();
            r.put(&key(i), &v).unwrap();
            m.put(&key(i), &v).unwrap();
        }
        for i in (0..500).step_by(3) {
            assert!(r.delete(&key(i)).unwrap());
            m.delete(&key(i)).unwrap();
        }
        let ops = [
            BatchOp::Put {
                key: b"batch-a",
                value: b"1",
            },
            BatchOp::Delete { key: &key(1) },
        ];
        r.batch(&ops).unwrap();
        m.batch(&ops).unwrap();
    }
    let want = scan_all(&mut m, b"", usize::MAX);

    // The crash: copy the files of the open database, never closed.
    let crash = tempfile::tempdir().unwrap();
    copy_dir(store.path(), &crash.path().join("db")).unwrap();
    {
        let db = RocksDb::open(&crash.path().join("db"), false).unwrap();
        assert_eq!(scan_all(&mut db.kv(), b"", usize::MAX), want);
        assert_eq!(db.count_keys().unwrap(), want.len() as u64);
    }

    // A clean close, then reopen of the same files.
    let dir = store.close();
    let db = RocksDb::open(&dir.path().join("db"), false).unwrap();
    let mut r = db.kv();
    assert_eq!(scan_all(&mut r, b"", usize::MAX), want);
    // Still writable after the reopen.
    r.put(b"after", b"reopen").unwrap();
    let mut v = Vec::new();
    assert!(r.get(b"after", &mut v).unwrap());
    assert_eq!(v, b"reopen");
}

#[test]
fn create_refuses_an_existing_database_and_open_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("db");
    assert!(RocksDb::open(&p, false).is_err(), "open of nothing");
    drop(RocksDb::open(&p, true).unwrap());
    let e = RocksDb::open(&p, true).unwrap_err().to_string();
    assert!(e.contains("rocksdb open"), "{e}");
}

#[test]
fn bulk_writes_are_visible_and_durable_after_finish() {
    let store = RocksStore::create_in(&std::env::temp_dir()).unwrap();
    let mut b = store.bulk();
    for i in 0..200u32 {
        b.put(&key(i), b"v").unwrap();
    }
    b.finish().unwrap();
    let dir = store.close();
    let db = RocksDb::open(&dir.path().join("db"), false).unwrap();
    assert_eq!(db.count_keys().unwrap(), 200);
}
