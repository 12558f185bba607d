//! Damage inside a store's used blocks (a stray write, a bad media block)
//! is reported, never returned as data: random bytes of a real pool are
//! flipped, and every read must give the stored value or an error.
//!
//! CoW and LSM verify what they read (CoW: every node on the path and
//! every value blob against the checksum its parent recorded; LSM: run
//! blocks and log records). InP (format 2) checksums every tuple and node:
//! `tests/flips.rs` covers all three engines with the deep check.

use ferrite_engine::{EngineError, EngineKind, KeyRange, Store, StoreOptions};
use ferrite_pmem::{Pool, PoolOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

fn value(i: u32) -> Vec<u8> {
    // Inline values and blob values both (CoW inlines up to 128 bytes).
    let len = if i.is_multiple_of(3) { 40 } else { 700 };
    (0..len).map(|j| (i as usize * 31 + j) as u8).collect()
}

/// Returns (flips tried, reads that failed typed, reads that returned the stored value).
fn run(kind: EngineKind, seed: u64, flips: usize) -> (usize, usize, usize) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.pool");
    let mut o = StoreOptions::new(kind);
    o.lsm.memtable_bytes = 64 << 10;
    let store = Store::create_file(&path, 16 << 20, &o).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..600u32 {
        let k = format!("key{i:05}").into_bytes();
        store.put(&k, &value(i)).unwrap();
        model.insert(k, value(i));
    }
    store.quiesce().unwrap();
    // The blocks the store uses: only there is a flip damage to a record.
    let blocks = store.walk().unwrap().blocks;
    store.close().unwrap();
    let pristine = std::fs::read(&path).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut failed, mut intact) = (0, 0);
    for _ in 0..flips {
        let mut img = pristine.clone();
        let (off, len) = blocks[rng.random_range(0..blocks.len())];
        let at = off as usize + rng.random_range(0..len.max(1) as usize);
        img[at] ^= 1 << rng.random_range(0..8);
        std::fs::write(&path, &img).unwrap();
        let store = match Store::open_file(&path, &StoreOptions::default()) {
            Ok(s) => s,
            Err(_) => {
                // Refused at open (a damaged root, manifest or run index):
                // reported, nothing returned.
                failed += 1;
                continue;
            }
        };
        for (k, v) in &model {
            match store.get(k) {
                Ok(Some(got)) => {
                    assert!(
                        &got == v,
                        "{kind}: flip at {at:#x} returned a wrong value for key {}",
                        String::from_utf8_lossy(k)
                    );
                    intact += 1;
                }
                Ok(None) => panic!("{kind}: flip at {at:#x} made key {k:?} vanish silently"),
                Err(EngineError::DamagedValue { key, .. }) => {
                    assert_eq!(&key, k, "the error names the key read");
                    failed += 1;
                }
                Err(_) => failed += 1,
            }
        }
        for pair in store.range(KeyRange::all()) {
            match pair {
                Ok((k, v)) => assert!(
                    model.get(&k) == Some(&v),
                    "{kind}: a range returned a wrong pair"
                ),
                Err(_) => break,
            }
        }
        drop(store);
    }
    (flips, failed, intact)
}

#[test]
fn flipped_bytes_are_reported_never_returned_cow() {
    let (flips, failed, intact) = run(EngineKind::Cow, 1, 60);
    assert!(failed > 0, "{flips} flips damaged nothing the reads saw");
    assert!(intact > 0);
}

#[test]
fn flipped_bytes_are_reported_never_returned_inp() {
    let (flips, failed, intact) = run(EngineKind::Inp, 3, 60);
    assert!(failed > 0, "{flips} flips damaged nothing the reads saw");
    assert!(intact > 0);
}

#[test]
fn flipped_bytes_are_reported_never_returned_lsm() {
    let (flips, failed, intact) = run(EngineKind::Lsm, 2, 60);
    assert!(failed > 0, "{flips} flips damaged nothing the reads saw");
    assert!(intact > 0);
}

#[test]
fn a_damaged_value_names_its_key_and_the_others_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("one.pool");
    let store = Store::create_file(&path, 16 << 20, &StoreOptions::new(EngineKind::Cow)).unwrap();
    store.put(b"good", &[1u8; 500]).unwrap();
    store.put(b"bad", &[2u8; 500]).unwrap();
    store.close().unwrap();
    // The blob of "bad" is the only run of 500 bytes of 2s in the file.
    let mut img = std::fs::read(&path).unwrap();
    let at = img
        .windows(500)
        .position(|w| w.iter().all(|&b| b == 2))
        .unwrap();
    img[at + 17] ^= 0x40;
    std::fs::write(&path, &img).unwrap();
    let pool = Pool::open(&path, &PoolOptions::new(ferrite_engine::LAYOUT, 0)).unwrap();
    let store = Store::open(&pool, &StoreOptions::default()).unwrap();
    match store.get(b"bad") {
        Err(e @ EngineError::DamagedValue { .. }) => {
            assert!(e.to_string().contains("'bad'"), "{e}");
        }
        Err(other) => panic!("expected DamagedValue, got {other}"),
        Ok(v) => panic!(
            "expected DamagedValue, got a value of {:?} bytes",
            v.map(|v| v.len())
        ),
    }
    assert_eq!(store.get(b"good").unwrap().unwrap(), vec![1u8; 500]);
}

/// One flipped byte in an LSM data block: the store still opens (its
/// recovery says a block is damaged), every key outside that block reads
/// its value, every key inside fails with an error (never a wrong
/// value), the scrub and the deep check name the block and its key span,
/// and the store keeps taking writes.
#[test]
fn a_damaged_lsm_block_leaves_the_rest_of_the_store_readable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lsm.pool");
    let mut o = StoreOptions::new(EngineKind::Lsm);
    o.lsm.memtable_bytes = 64 << 10;
    let key = |i: u32| format!("key{i:05}").into_bytes();
    let val = |i: u32| format!("v{i:05}-").repeat(12).into_bytes();
    let n = 3000;
    {
        let store = Store::create_file(&path, 32 << 20, &o).unwrap();
        for i in 0..n {
            store.put(&key(i), &val(i)).unwrap();
        }
        store.quiesce().unwrap();
        store.close().unwrap();
    }
    let mut img = std::fs::read(&path).unwrap();
    let needle = val(1000);
    // Every copy of it (freed blocks may hold stale ones): the live one is
    // in a run.
    let copies: Vec<usize> = (0..img.len() - needle.len())
        .filter(|&p| img[p..p + needle.len()] == needle[..])
        .collect();
    assert!(!copies.is_empty());
    for p in copies {
        img[p + 30] ^= 0x08;
    }
    std::fs::write(&path, &img).unwrap();

    let store = Store::open_file(&path, &o).unwrap();
    assert!(
        store
            .recovery()
            .detail
            .contains("1 data block fails its checksum: its keys cannot be read"),
        "{}",
        store.recovery().detail
    );
    let s = store.scrub(&mut |_| {}).unwrap();
    assert!(s.per_record);
    assert_eq!(s.damaged.len(), 1, "{:?}", s.damaged);
    let d = &s.damaged[0];
    assert!(d.covers(&key(1000)), "{d:?}");
    assert!(d.detail.contains("fails its checksum"), "{}", d.detail);
    let (mut failed, mut intact) = (0, 0);
    for i in 0..n {
        match store.get(&key(i)) {
            Ok(Some(v)) => {
                assert_eq!(v, val(i), "key {i}: a wrong value");
                assert!(!d.covers(&key(i)), "key {i} read from the damaged block");
                intact += 1;
            }
            Ok(None) => panic!("key {i} vanished"),
            Err(e) => {
                assert!(d.covers(&key(i)), "key {i} failed outside the damage: {e}");
                assert!(e.to_string().contains("fails its checksum"), "{e}");
                failed += 1;
            }
        }
    }
    assert!(
        failed >= 1 && intact >= n as usize - 100,
        "{failed} failed, {intact} intact"
    );
    // Writes go on: new keys and a replacement of a damaged one.
    for i in n..n + 2000 {
        store.put(&key(i), &val(i)).unwrap();
    }
    store.put(&key(1000), b"rewritten").unwrap();
    assert_eq!(store.get(&key(1000)).unwrap().unwrap(), b"rewritten");
    assert_eq!(store.get(&key(n + 1999)).unwrap().unwrap(), val(n + 1999));
    // A compaction cannot merge the damaged run (dropping its block could
    // bring back an older value of its keys): close reports that, by
    // block; the writes were durable when acknowledged.
    if let Err(e) = store.close() {
        assert!(e.to_string().contains("fails its checksum"), "{e}");
    }
    let store = Store::open_file(&path, &o).unwrap();
    assert_eq!(store.get(&key(1000)).unwrap().unwrap(), b"rewritten");
    for i in (0..n + 2000).filter(|&i| i != 1000).step_by(7) {
        match store.get(&key(i)) {
            Ok(v) => assert_eq!(v.unwrap(), val(i), "key {i}"),
            Err(e) => assert!(d.covers(&key(i)), "key {i}: {e}"),
        }
    }
    store.close().ok();

    // The deep check names the block and its span.
    let img = std::fs::read(&path).unwrap();
    let r = ferrite_engine::verify::verify_image(&img, ferrite_engine::LAYOUT);
    let listed: Vec<String> = r
        .findings
        .iter()
        .map(|f| f.to_string())
        .filter(|f| f.contains("data block"))
        .collect();
    assert!(!listed.is_empty(), "{:?}", r.findings);
}
