//! `ferrite-tx` and `ferrite-ds`: a transactional pool's open (rolling
//! back, replaying or re-executing interrupted transactions) and the open
//! and walk of the structure at its root.

use super::{reopen, run_image};
use crate::image::{Bases, Recipe, build};
use ferrite_ds::{DsOptions, Structure};
use ferrite_pmem::Pool;
use ferrite_tx::{Strategy, TxOptions, TxPool};
use std::sync::OnceLock;

const LAYOUT: &str = "fuzz-tx";
const SIZE: u64 = 512 << 10;
const NONCE: u64 = crate::image::NONCES[2];
const CRASHES: &[u64] = &[400, 800];
/// Accesses one transaction (and recovery's re-execution) may make: a
/// corrupt structure with a cycle fails with an error instead of hanging.
const ACCESS_LIMIT: u64 = 20_000;
const VALUE_LEN: usize = 16;

fn ds_opts() -> DsOptions {
    DsOptions {
        value_len: VALUE_LEN,
        subs: 4,
        buckets: 2,
        fanout: 4,
        levels: 6,
    }
}

fn value(k: u64) -> Vec<u8> {
    (0..VALUE_LEN as u64).map(|i| (k * 7 + i) as u8).collect()
}

/// The configurations: every structure under every logged strategy.
fn configs() -> Vec<(Structure, Strategy)> {
    Structure::ALL
        .into_iter()
        .flat_map(|s| Strategy::LOGGED.into_iter().map(move |t| (s, t)))
        .collect()
}

pub(crate) fn bases() -> &'static Bases {
    static B: OnceLock<Bases> = OnceLock::new();
    B.get_or_init(|| {
        let mut images = Vec::new();
        for (i, (s, strategy)) in configs().into_iter().enumerate() {
            let setup = move |p: &Pool| {
                let opts = TxOptions::new(strategy)
                    .slots(2)
                    .area_bytes(8192)
                    .nonce(NONCE);
                let txp = TxPool::create(p, &opts, ferrite_ds::registry()).expect("create");
                let mut th = txp.thread().expect("attach");
                ferrite_ds::create(s, &mut th, ds_opts()).expect("create structure");
            };
            let work = move |p: &Pool| {
                let txp = TxPool::open(p, ferrite_ds::registry(), None).expect("open");
                let map = ferrite_ds::open(s, &txp, txp.root()).expect("open structure");
                let mut th = txp.thread().expect("attach");
                for k in 0..14u64 {
                    map.insert(&mut th, k * 5 % 17, &value(k)).expect("insert");
                    if k % 4 == 3 {
                        map.remove(&mut th, k * 5 % 17).expect("remove");
                    }
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

/// Opens the transactional pool and the structure at its root and walks it.
fn recover(pool: &Pool, s: Structure) -> Option<(TxPool, ferrite_ds::Shape)> {
    let txp = TxPool::open_limited(pool, ferrite_ds::registry(), None, ACCESS_LIMIT).ok()?;
    let shape = {
        let map = ferrite_ds::open(s, &txp, txp.root()).ok()?;
        map.shape().ok()?
    };
    Some((txp, shape))
}

/// `TxPool::open` then `ferrite_ds::open` and the structure's own walk
/// (`KvMap::shape`, which checks every invariant) on a patched pool.
/// Checks: nothing panics or hangs; a second open of what the first left
/// finds the same contents (recovery is idempotent); (option bit 0) an
/// insert and a lookup on the recovered structure work or fail with an
/// error.
pub fn tx_ds(data: &[u8]) {
    let b = bases();
    let cfgs = configs();
    run_image(b, data, |pool, config, options| {
        let (s, _) = cfgs[config];
        let Some((txp, shape)) = recover(pool, s) else {
            return;
        };
        let again = reopen(pool, b.layout);
        let (_, shape2) = recover(&again, s).expect("a pool that recovered once recovers again");
        assert_eq!(shape.entries, shape2.entries, "a second recovery differs");
        if options & 1 == 1
            && let Ok(map) = ferrite_ds::open(s, &txp, txp.root())
            && let Ok(mut th) = txp.thread()
        {
            let _ = map.insert(&mut th, 1000, &value(1000));
            let _ = map.get(1000);
        }
    });
}
