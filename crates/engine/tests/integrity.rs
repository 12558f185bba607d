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
