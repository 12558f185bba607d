//! `ferrite-ptm`: the PTM's open (rolling back undo logs, replaying
//! committed redo logs) and the hash map at its root.

use super::{reopen, run_image};
use crate::image::{Bases, Recipe, build};
use ferrite_pmem::Pool;
use ferrite_ptm::ds::hash::PHashMap;
use ferrite_ptm::{Algorithm, Ptm, PtmOptions};
use std::sync::OnceLock;

const LAYOUT: &str = "fuzz-ptm";
const SIZE: u64 = 512 << 10;
const NONCE: u64 = crate::image::NONCES[3];
const CRASHES: &[u64] = &[300, 600, 900];
const ALGS: [Algorithm; 2] = [Algorithm::Eager, Algorithm::Lazy];

fn opts(alg: Algorithm) -> PtmOptions {
    PtmOptions::new(alg)
        .slots(2)
        .log_bytes(2048)
        .orecs(1024)
        .nonce(NONCE)
}

pub(crate) fn bases() -> &'static Bases {
    static B: OnceLock<Bases> = OnceLock::new();
    B.get_or_init(|| {
        let mut images = Vec::new();
        for (i, alg) in ALGS.into_iter().enumerate() {
            let setup = move |p: &Pool| {
                let ptm = Ptm::create(p, &opts(alg)).expect("create ptm");
                let mut th = ptm.thread().expect("attach");
                let map = PHashMap::create(&mut th, 16).expect("create map");
                th.atomic(|tx| tx.set(ptm.root(), map.header()))
                    .expect("link the map");
            };
            let work = move |p: &Pool| {
                let ptm = Ptm::open(p, &opts(alg)).expect("open ptm");
                let mut th = ptm.thread().expect("attach");
                for k in 0..12u64 {
                    th.atomic(|tx| {
                        let hdr = tx.load(ptm.root().raw())?;
                        let map = PHashMap::open(tx, hdr)?;
                        map.insert(tx, k * 3, k + 100)?;
                        if k % 4 == 3 {
                            map.remove(tx, k * 3 - 3)?;
                        }
                        Ok(())
                    })
                    .expect("transaction");
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

/// Opens the PTM and checks the map at its root; the number of entries.
fn recover(pool: &Pool, alg: Algorithm) -> Option<u64> {
    let ptm = Ptm::open(pool, &opts(alg)).ok()?;
    let mut th = ptm.thread().ok()?;
    let map = th
        .atomic(|tx| {
            let hdr = tx.load(ptm.root().raw())?;
            PHashMap::open(tx, hdr)
        })
        .ok()?;
    map.check(&mut th).ok()
}

/// `Ptm::open` on a patched PTM pool, then the hash map's open and full
/// check. Checks: nothing panics or hangs, and a second open of what the
/// first left finds a map of the same size (recovery is idempotent).
pub fn ptm(data: &[u8]) {
    let b = bases();
    run_image(b, data, |pool, config, _| {
        let alg = ALGS[config];
        let Some(n) = recover(pool, alg) else {
            return;
        };
        let again = reopen(pool, b.layout);
        assert_eq!(recover(&again, alg), Some(n), "a second recovery differs");
    });
}
