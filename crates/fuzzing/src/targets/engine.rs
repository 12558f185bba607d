//! `ferrite-engine`: `Store::open` (the allocator's and the engine's
//! recovery) of the InP, CoW and LSM engines, on the Ferrite heap and the
//! lock heap.

use super::{reopen, run_image};
use crate::image::{Bases, Recipe, build};
use ferrite_engine::{AllocKind, EngineKind, Op, Store, StoreOptions};
use ferrite_pmem::Pool;
use std::sync::OnceLock;

const SIZE: u64 = 1536 << 10;
const NONCE: u64 = crate::image::NONCES[4];
const CRASHES: &[u64] = &[200, 500, 850];
const ALLOCS: [AllocKind; 2] = [AllocKind::Ferrite, AllocKind::Lock];

fn opts(kind: EngineKind, alloc: AllocKind) -> StoreOptions {
    let mut o = StoreOptions::new(kind)
        .allocator(alloc)
        .sessions(2)
        .nonce(NONCE);
    o.inp = ferrite_engine::inp::Options::for_checks();
    o.cow = ferrite_engine::cow::Options::for_checks();
    o.lsm = ferrite_engine::lsm::Options::for_checks();
    o
}

fn key(i: usize) -> Vec<u8> {
    format!("key-{:03}-{}", i, "k".repeat(i % 5 * 9)).into_bytes()
}

fn value(i: usize) -> Vec<u8> {
    vec![b'a' + (i % 26) as u8; 1 + i * 7 % 60]
}

fn bases(kind: EngineKind) -> Bases {
    let mut images = Vec::new();
    for (i, alloc) in ALLOCS.into_iter().enumerate() {
        let setup = move |p: &Pool| {
            Store::create(p, &opts(kind, alloc)).expect("create store");
        };
        let work = move |p: &Pool| {
            let store = Store::open(p, &opts(kind, alloc)).expect("open store");
            let mut s = store.session().expect("session");
            for k in 0..24usize {
                s.put(&key(k), &value(k)).expect("put");
                if k % 5 == 4 {
                    s.delete(&key(k - 2)).expect("delete");
                }
            }
            let (k1, v1, k2) = (key(100), value(3), key(1));
            s.batch(&[
                Op::Put {
                    key: &k1,
                    value: &v1,
                },
                Op::Delete { key: &k2 },
            ])
            .expect("batch");
        };
        images.extend(build(
            &Recipe {
                layout: ferrite_engine::LAYOUT,
                size: SIZE,
                setup: &setup,
                work: &work,
                crashes: CRASHES,
            },
            i,
        ));
    }
    Bases::new(ferrite_engine::LAYOUT, images)
}

type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// Opens the store and walks it (checks of every engine invariant the
/// walk makes); its entries.
fn recover(pool: &Pool, kind: EngineKind, alloc: AllocKind) -> Option<(Store, Entries)> {
    let store = Store::open(pool, &opts(kind, alloc)).ok()?;
    let walk = store.walk().ok()?;
    Some((store, walk.entries))
}

fn run(kind: EngineKind, bases: &Bases, data: &[u8]) {
    run_image(bases, data, |pool, config, options| {
        let alloc = ALLOCS[config];
        let Some((store, entries)) = recover(pool, kind, alloc) else {
            return;
        };
        let mut sorted = entries.clone();
        sorted.sort();
        sorted.dedup_by(|a, b| a.0 == b.0);
        assert_eq!(sorted, entries, "the walk's keys are not sorted and unique");
        let again = reopen(pool, bases.layout);
        let (_, entries2) =
            recover(&again, kind, alloc).expect("a store that opened once opens again");
        assert_eq!(entries, entries2, "a second recovery differs");
        if options & 1 == 1
            && let Ok(mut s) = store.session()
        {
            for (k, v) in entries.iter().take(4) {
                if let Ok(got) = s.get(k) {
                    assert_eq!(got.as_deref(), Some(&v[..]), "get disagrees with the walk");
                }
            }
            let _ = s.put(b"fuzz-key", b"fuzz-value");
            let _ = s.scan(b"", 8);
        }
    });
}

pub(crate) fn bases_inp() -> &'static Bases {
    static B: OnceLock<Bases> = OnceLock::new();
    B.get_or_init(|| bases(EngineKind::Inp))
}

pub(crate) fn bases_cow() -> &'static Bases {
    static B: OnceLock<Bases> = OnceLock::new();
    B.get_or_init(|| bases(EngineKind::Cow))
}

pub(crate) fn bases_lsm() -> &'static Bases {
    static B: OnceLock<Bases> = OnceLock::new();
    B.get_or_init(|| bases(EngineKind::Lsm))
}

/// `Store::open` of an InP store on a patched pool. Checks: nothing panics
/// or hangs; the walk's keys are sorted and unique; a second open of what
/// the first left walks the same; (option bit 0) gets agree with the walk
/// and a put and a scan work or fail with an error.
pub fn engine_inp(data: &[u8]) {
    run(EngineKind::Inp, bases_inp(), data);
}

/// [`engine_inp`] for the CoW engine.
pub fn engine_cow(data: &[u8]) {
    run(EngineKind::Cow, bases_cow(), data);
}

/// [`engine_inp`] for the LSM engine.
pub fn engine_lsm(data: &[u8]) {
    run(EngineKind::Lsm, bases_lsm(), data);
}
