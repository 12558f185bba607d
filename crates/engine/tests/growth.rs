//! Stores that grow: a store opened without a size starts small, grows its
//! pool file as data arrives (past the fixed size stores used to get), and
//! reopens with everything; a store with a maximum stops there with a
//! typed error and stays usable.

use ferrite_engine::{EngineError, EngineKind, Op, Store, StoreOptions};

const ENGINES: [EngineKind; 3] = [EngineKind::Inp, EngineKind::Cow, EngineKind::Lsm];

fn dir() -> tempfile::TempDir {
    // tmpfs when there is one: growth syncs the file's new length.
    match std::path::Path::new("/dev/shm").is_dir() {
        true => tempfile::tempdir_in("/dev/shm").unwrap(),
        false => tempfile::tempdir().unwrap(),
    }
}

fn key(i: u32) -> [u8; 8] {
    (u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_be_bytes()
}

fn value(i: u32, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 31 + j) as u8).collect()
}

fn load(store: &Store, from: u32, to: u32, len: usize) -> Result<(), EngineError> {
    let mut i = from;
    while i < to {
        let end = (i + 500).min(to);
        let keys: Vec<[u8; 8]> = (i..end).map(key).collect();
        let vals: Vec<Vec<u8>> = (i..end).map(|j| value(j, len)).collect();
        let ops: Vec<Op> = keys
            .iter()
            .zip(&vals)
            .map(|(k, v)| Op::Put { key: k, value: v })
            .collect();
        store.batch(&ops)?;
        i = end;
    }
    Ok(())
}

#[test]
fn a_store_without_a_size_grows_past_the_old_fixed_size_and_reopens_whole() {
    for engine in ENGINES {
        let d = dir();
        let path = d.path().join("grow.pool");
        let opts = StoreOptions::new(engine);
        let store = Store::open_or_create(&path, &opts).unwrap();
        let first = std::fs::metadata(&path).unwrap().len();
        assert!(first < 16 << 20, "{engine}: starts small ({first} bytes)");
        // 72 MiB of values: more than the 64 MiB every store used to get.
        let n = 72 * 1024;
        load(&store, 0, n, 1024).unwrap();
        let grown = std::fs::metadata(&path).unwrap().len();
        assert!(grown > 72 << 20, "{engine}: grew to {grown} bytes");
        assert_eq!(store.len().unwrap(), n as u64, "{engine}");
        store.close().unwrap();
        let store = Store::open_or_create(&path, &opts).unwrap();
        assert_eq!(store.len().unwrap(), n as u64, "{engine} after reopen");
        for i in (0..n).step_by(997) {
            assert_eq!(
                store.get(&key(i)).unwrap().as_deref(),
                Some(&value(i, 1024)[..]),
                "{engine} key {i}"
            );
        }
        // And it keeps growing after a reopen.
        load(&store, n, n + 4096, 1024).unwrap();
        assert_eq!(store.len().unwrap(), u64::from(n + 4096), "{engine}");
    }
}

#[test]
fn a_store_stops_at_its_maximum_with_a_typed_error_and_stays_usable() {
    for engine in ENGINES {
        let d = dir();
        let path = d.path().join("cap.pool");
        let opts = StoreOptions::new(engine).max_size(24 << 20);
        let store = Store::open_or_create(&path, &opts).unwrap();
        let mut i = 0u32;
        let err = loop {
            match store.put(&key(i), &value(i, 4000)) {
                Ok(()) => i += 1,
                Err(e) => break e,
            }
            assert!(i < 100_000, "{engine}: never filled a 24 MiB store");
        };
        assert!(matches!(err, EngineError::Full(_)), "{engine}: {err}");
        assert!(i > 2000, "{engine}: filled after only {i} puts");
        assert!(std::fs::metadata(&path).unwrap().len() <= 24 << 20);
        assert_eq!(
            store.get(&key(0)).unwrap(),
            Some(value(0, 4000)),
            "{engine}"
        );
        assert!(
            store.get(&key(i)).unwrap().is_none(),
            "{engine}: the failed put is not there"
        );
        // Room made by deletes is used again.
        for j in 0..200 {
            store.delete(&key(j)).unwrap();
        }
        store.sync().unwrap();
        let mut more = 0;
        for j in 0..50 {
            match store.put(&key(1_000_000 + j), &value(j, 4000)) {
                Ok(()) => more += 1,
                Err(EngineError::Full(_)) => break,
                Err(e) => panic!("{engine}: {e}"),
            }
        }
        assert!(more > 0, "{engine}: deletes made no room");
    }
}

#[test]
fn a_size_alone_fixes_the_size_and_the_lock_allocator_refuses_to_grow() {
    let d = dir();
    let path = d.path().join("fixed.pool");
    let store =
        Store::open_or_create(&path, &StoreOptions::new(EngineKind::Cow).size(8 << 20)).unwrap();
    let mut i = 0;
    while store.put(&key(i), &value(i, 4000)).is_ok() {
        i += 1;
        assert!(i < 10_000);
    }
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 8 << 20);
    drop(store);
    let opts = StoreOptions::new(EngineKind::Inp)
        .allocator(ferrite_engine::AllocKind::Lock)
        .max_size(64 << 20);
    let path = d.path().join("lock.pool");
    assert!(matches!(
        Store::open_or_create(&path, &opts),
        Err(EngineError::BadOption(_))
    ));
    assert!(!path.exists(), "a refused create leaves no file");
}
