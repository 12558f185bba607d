//! `ferrite_ds::bytemap`, the map under the server's `tx-*` stores: a
//! transactional pool's open (rolling back, replaying or re-executing an
//! interrupted batch) and the open and walk of the byte map at its root.

use super::{reopen, run_image};
use crate::image::{Bases, Recipe, build};
use ferrite_ds::bytemap::ByteMap;
use ferrite_pmem::Pool;
use ferrite_tx::{Strategy, TxOptions, TxPool};
use std::sync::OnceLock;

const LAYOUT: &str = "fuzz-bytemap";
const SIZE: u64 = 512 << 10;
const NONCE: u64 = crate::image::NONCES[2];
const CRASHES: &[u64] = &[300, 700];
/// Accesses one transaction (and recovery's re-execution) may make: a
/// corrupt map with a cycle fails with an error instead of hanging.
const ACCESS_LIMIT: u64 = 20_000;

/// Key `i`: 1 to 19 bytes, so keys of several lengths share sub-maps.
fn key(i: u64) -> Vec<u8> {
    (0..1 + i % 19).map(|j| (i * 31 + j) as u8).collect()
}

/// Value `i`: 0 to 90 bytes (empty values too).
fn value(i: u64) -> Vec<u8> {
    (0..i * 13 % 91).map(|j| (i + j) as u8).collect()
}

pub(crate) fn bases() -> &'static Bases {
    static B: OnceLock<Bases> = OnceLock::new();
    B.get_or_init(|| {
        let mut images = Vec::new();
        for (i, strategy) in Strategy::LOGGED.into_iter().enumerate() {
            let setup = move |p: &Pool| {
                let opts = TxOptions::new(strategy)
                    .slots(2)
                    .area_bytes(8192)
                    .nonce(NONCE);
                let txp = TxPool::create(p, &opts, ferrite_ds::registry()).expect("create");
                let mut th = txp.thread().expect("attach");
                // Two sub-maps of two buckets: the batches below double them.
                ByteMap::create(&mut th, 2, 2).expect("create byte map");
            };
            let work = move |p: &Pool| {
                let txp = TxPool::open(p, ferrite_ds::registry(), None).expect("open");
                let map = ByteMap::open(&txp, txp.root()).expect("open byte map");
                let mut th = txp.thread().expect("attach");
                for i in 0..12u64 {
                    let (k1, v1, k2) = (key(i), value(i), key(i * 7 % 12));
                    let ops: Vec<(&[u8], Option<&[u8]>)> = if i % 3 == 2 {
                        // A batch that replaces one key and deletes another.
                        vec![(&k1, Some(&v1)), (&k2, None)]
                    } else {
                        vec![(&k1, Some(&v1))]
                    };
                    map.apply(&mut th, &ops).expect("apply");
                }
            };
            images.extend(build(
                &Recipe {
                    layout: LAYOUT,
                    size: SIZE,
                    setup: &setup,
                    work: &work,
                    crashes: CRASHES,
                },
                i,
            ));
        }
        Bases::new(LAYOUT, images)
    })
}

/// Opens the transactional pool and the byte map at its root and walks it.
fn recover(pool: &Pool) -> Option<(TxPool, ferrite_ds::bytemap::ByteShape)> {
    let txp = TxPool::open_limited(pool, ferrite_ds::registry(), None, ACCESS_LIMIT).ok()?;
    let shape = ByteMap::open(&txp, txp.root()).ok()?.shape().ok()?;
    Some((txp, shape))
}

/// `TxPool::open` then `ByteMap::open` and its walk (`ByteMap::shape`,
/// which checks every invariant) on a patched pool. Checks: nothing panics
/// or hangs; a second open of what the first left finds the same contents
/// (recovery is idempotent); every key the walk found reads back its value
/// through the lookup path, or — only where the walk listed damaged
/// entries — an error; (option bit 0) a batch and a scan on the
/// recovered map work or fail with an error.
pub fn bytemap(data: &[u8]) {
    let b = bases();
    run_image(b, data, |pool, _config, options| {
        let Some((txp, shape)) = recover(pool) else {
            return;
        };
        let again = reopen(pool, b.layout);
        let (_, shape2) = recover(&again).expect("a pool that recovered once recovers again");
        assert_eq!(shape.entries, shape2.entries, "a second recovery differs");
        let Ok(map) = ByteMap::open(&txp, txp.root()) else {
            return;
        };
        let mut out = Vec::new();
        for (k, v) in &shape.entries {
            // The walk vouched for this entry: a lookup may not disagree.
            // It may refuse only where the walk listed a damaged entry (one
            // can stand in the key's chain, before it): never a wrong value.
            match map.get_into(k, &mut out) {
                Ok(found) => assert!(found && out == *v, "lookup of a walked key differs"),
                Err(e) => assert!(
                    !shape.damaged.is_empty(),
                    "a walked map with no damaged entry fails a lookup: {e}"
                ),
            }
        }
        if options & 1 == 1
            && let Ok(mut th) = txp.thread()
        {
            let (k, v) = (key(1000), value(1000));
            let _ = map.apply(&mut th, &[(&k, Some(&v)), (&key(3), None)]);
            let _ = map.get_into(&k, &mut out);
            let _ = map.scan_prefix(&[], &mut |_, _| {});
        }
    });
}
