//! The flip test (issue 27): real pool files of each engine, filled with
//! keys, then random bytes flipped inside the blocks the store uses (its
//! walk names them); every key is then read, and the deep check runs.
//!
//! Required, per engine: **0 wrong values** — each read returns the value
//! stored, or an error, or "absent" only when the deep check reports
//! damage that covers the key; a range never returns a pair that was not
//! stored; and **every key whose read failed is reported by the deep
//! check** (`verify::verify_image`: by its key, or by a damaged node or
//! LSM data block whose key range holds it). A store that refuses to open
//! counts as reported when the deep check reports it too. An LSM store
//! whose damage lies in run data blocks opens (those blocks' keys fail to
//! read); damage to a run's header, index or bloom filter, or to its
//! manifest, still refuses the open: 25 of 50 closed images at the default
//! size (it was 326 of 334 before data-block damage was listed per block).
//!
//! Bounded for CI: `FERRITE_FLIPS` flips per engine (default 150, three
//! per pool image).
//!
//! The LSM's log: a flip inside a record whose successor is intact is
//! reported at open (each record says whether its predecessors were
//! durable when it was written: a torn record never has such a successor,
//! a damaged one does). A flip in the log's *last* record still looks like
//! a torn tail and ends the replay there (the default and long runs have
//! not hit it: 1000 flips, 326 of 334 closed images refused and reported,
//! 0 keys vanished). The long run: `FERRITE_FLIPS=1000 cargo test --release
//! -p ferrite-engine --test flips -- --nocapture` prints the figures.

use ferrite_engine::verify::{EngineFinding, verify_image};
use ferrite_engine::{EngineError, EngineKind, KeyRange, LAYOUT, Store, StoreOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

fn value(i: u32) -> Vec<u8> {
    // Small and large values (CoW inlines up to 128 bytes).
    let len = match i % 4 {
        0 => 24,
        1 => 100,
        2 => 400,
        _ => 1000,
    };
    (0..len).map(|j| (i as usize * 31 + j * 7) as u8).collect()
}

#[derive(Debug, Default)]
struct Figures {
    flips: usize,
    images: usize,
    refused: usize,
    refused_reported: usize,
    reads: usize,
    intact: usize,
    failed: usize,
    failed_reported: usize,
    absent_reported: usize,
    wrong: usize,
}

fn flips_per_engine() -> usize {
    std::env::var("FERRITE_FLIPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150)
}

/// `live`: the bytes are flipped in the file while the store is open (a
/// stray write at run time: reads must catch it, and the store's own
/// scrub must list it); otherwise in the closed file, and the deep check
/// of the image must list it.
fn run(kind: EngineKind, seed: u64, flips: usize, live: bool) -> Figures {
    const PER_IMAGE: usize = 3;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flips.pool");
    let mut o = StoreOptions::new(kind);
    o.lsm.memtable_bytes = 64 << 10;
    let store = Store::create_file(&path, 8 << 20, &o).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..500u32 {
        let k = format!("user:{:08}", i * 7919 % 100_000).into_bytes();
        store.put(&k, &value(i)).unwrap();
        model.insert(k, value(i));
    }
    store.quiesce().unwrap();
    // The blocks the store uses: only a flip there damages a record.
    let blocks = store.walk().unwrap().blocks;
    store.close().unwrap();
    let pristine = std::fs::read(&path).unwrap();
    // Clean, but for the LSM: its close leaves the log to replay (an open
    // with the default, larger memtable rewrites part of it), which the
    // deep check reports as a recovery, not as damage.
    let clean = verify_image(&pristine, LAYOUT);
    assert!(
        clean
            .findings
            .iter()
            .all(|x| kind == EngineKind::Lsm && matches!(x, EngineFinding::Recovery { .. })),
        "{kind}: {:?}",
        clean.findings
    );
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut f = Figures::default();
    while f.flips < flips {
        let mut img = pristine.clone();
        for _ in 0..PER_IMAGE {
            let (off, len) = blocks[rng.random_range(0..blocks.len())];
            let at = off as usize + rng.random_range(0..len.max(1) as usize);
            img[at] ^= rng.random_range(1..=255u8);
            f.flips += 1;
        }
        f.images += 1;
        let (store, findings) = if live {
            std::fs::write(&path, &pristine).unwrap();
            let store = Store::open_file(&path, &StoreOptions::default()).unwrap();
            // The pool is mapped shared: writes to the file are stores
            // into the store's memory.
            use std::os::unix::fs::FileExt;
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            for (at, (a, b)) in pristine.iter().zip(&img).enumerate() {
                if a != b {
                    file.write_at(&[*b], at as u64).unwrap();
                }
            }
            let scrub = store.scrub(&mut |_| {}).unwrap();
            let findings: Vec<EngineFinding> = scrub
                .damaged
                .into_iter()
                .map(EngineFinding::Damaged)
                .collect();
            (store, findings)
        } else {
            let check = verify_image(&img, LAYOUT);
            std::fs::write(&path, &img).unwrap();
            match Store::open_file(&path, &StoreOptions::default()) {
                Ok(s) => (s, check.findings),
                Err(_) => {
                    f.refused += 1;
                    if !check.findings.is_empty() {
                        f.refused_reported += 1;
                    }
                    continue;
                }
            }
        };
        let check = ferrite_engine::verify::EngineCheck {
            findings,
            ..Default::default()
        };
        // A finding that covers `key`: a damaged record, node or LSM data
        // block whose span holds it; or, for the LSM, a store that the
        // check cannot open (a run's index or the manifest damaged).
        let reported = |key: &[u8]| {
            check.findings.iter().any(|x| match x {
                EngineFinding::Damaged(d) => d.covers(key),
                EngineFinding::Refused(_) => kind == EngineKind::Lsm,
                _ => false,
            })
        };
        for (k, v) in &model {
            f.reads += 1;
            match store.get(k) {
                Ok(Some(got)) if &got == v => f.intact += 1,
                Ok(Some(_)) => {
                    f.wrong += 1;
                    eprintln!("{kind}: WRONG value for {}", String::from_utf8_lossy(k));
                }
                Ok(None) => {
                    // Absent only where the damage is reported.
                    if reported(k) {
                        f.absent_reported += 1;
                    } else {
                        f.wrong += 1;
                        eprintln!(
                            "{kind}: key {} vanished, unreported",
                            String::from_utf8_lossy(k)
                        );
                    }
                }
                Err(e) => {
                    f.failed += 1;
                    if let EngineError::DamagedValue { key, .. } = &e
                        && kind == EngineKind::Inp
                    {
                        assert_eq!(key, k, "{kind}: the error names the key read");
                    }
                    if reported(k) {
                        f.failed_reported += 1;
                    } else {
                        eprintln!(
                            "{kind}: read of {} failed ({e}) but the deep check does not report it: {:?}",
                            String::from_utf8_lossy(k),
                            check.findings
                        );
                    }
                }
            }
        }
        for pair in store.range(KeyRange::all()) {
            match pair {
                Ok((k, v)) => {
                    if model.get(&k) != Some(&v) {
                        f.wrong += 1;
                        eprintln!("{kind}: a range returned a wrong pair");
                    }
                }
                Err(_) => break,
            }
        }
        drop(store);
    }
    f
}

fn check_engine(kind: EngineKind, seed: u64, live: bool) {
    let f = run(kind, seed, flips_per_engine(), live);
    eprintln!("{kind}{}: {f:?}", if live { " (live)" } else { "" });
    assert_eq!(f.wrong, 0, "{kind}: wrong values returned: {f:?}");
    assert_eq!(
        f.failed, f.failed_reported,
        "{kind}: failed reads the deep check did not report: {f:?}"
    );
    assert_eq!(
        f.refused, f.refused_reported,
        "{kind}: refused opens the deep check called clean: {f:?}"
    );
    // The flips must have damaged something the reads saw.
    assert!(
        f.failed + f.refused > 0,
        "{kind}: no flip was detected: {f:?}"
    );
    if live {
        assert!(
            f.failed > 0,
            "{kind}: no read saw a flip at run time: {f:?}"
        );
    }
    assert!(f.intact > 0, "{kind}: {f:?}");
}

#[test]
fn flips_in_inp_pools_are_never_returned_and_all_reported() {
    check_engine(EngineKind::Inp, 11, false);
}

#[test]
fn flips_in_cow_pools_are_never_returned_and_all_reported() {
    check_engine(EngineKind::Cow, 12, false);
}

#[test]
fn flips_in_lsm_pools_are_never_returned_and_all_reported() {
    check_engine(EngineKind::Lsm, 13, false);
}

#[test]
fn flips_at_run_time_in_inp_are_never_returned_and_scrubbed() {
    check_engine(EngineKind::Inp, 21, true);
}

#[test]
fn flips_at_run_time_in_cow_are_never_returned_and_scrubbed() {
    check_engine(EngineKind::Cow, 22, true);
}

#[test]
fn flips_at_run_time_in_lsm_are_never_returned_and_scrubbed() {
    check_engine(EngineKind::Lsm, 23, true);
}
