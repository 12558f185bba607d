//! `ferrite-blocks`: logs, the page store, failure-atomic cells, FP-Tree
//! leaves. Each opens from the pool's data area.

use super::{reopen, run_image};
use crate::image::{Bases, Recipe, build};
use ferrite_blocks::cell::{self, CellKind, ValueSize};
use ferrite_blocks::group::FpLeaves;
use ferrite_blocks::log::{Log, LogOptions, Variant};
use ferrite_blocks::page::{DirtyLines, PageAlgorithm, PageStore, PageStoreOptions};
use ferrite_pmem::Pool;
use std::sync::OnceLock;

const NONCE: u64 = crate::image::NONCES[0];
const SIZE: u64 = 64 << 10;
/// Crash points of the base workloads, per mille of their fences.
const CRASHES: &[u64] = &[300, 700];

// ---- logs ---------------------------------------------------------------------------

const LOG_LAYOUT: &str = "fuzz-log";

pub(crate) fn log_bases() -> &'static Bases {
    static B: OnceLock<Bases> = OnceLock::new();
    B.get_or_init(|| {
        let mut images = Vec::new();
        for (i, &v) in Variant::ALL.iter().enumerate() {
            let setup = move |p: &Pool| {
                Log::create_with(p.data(), LogOptions::new(v).nonce(NONCE)).expect("create log");
            };
            let work = |p: &Pool| {
                let mut log = Log::recover(p.data()).expect("recover log");
                for k in 0..12usize {
                    let rec = vec![k as u8 ^ 0x5a; 1 + k * 23 % 200];
                    log.append(&rec).expect("append");
                }
                let first = log.first_lsn();
                log.truncate(ferrite_blocks::log::Lsn(first.0 + 4))
                    .expect("truncate");
                let batch: Vec<Vec<u8>> = (0..5).map(|k| vec![0xc0 | k as u8; 40 + k]).collect();
                let refs: Vec<&[u8]> = batch.iter().map(|r| &r[..]).collect();
                log.append_batch(&refs).expect("append batch");
            };
            images.extend(build(
                &Recipe {
                    layout: LOG_LAYOUT,
                    size: SIZE,
                    setup: &setup,
                    work: &work,
                    crashes: CRASHES,
                },
                i,
            ));
        }
        Bases::new(LOG_LAYOUT, images)
    })
}

fn log_records(log: &Log) -> Vec<(u64, Vec<u8>)> {
    log.iter().map(|(l, r)| (l.0, r)).collect()
}

/// `Log::recover` on a patched log. Checks: recovery is idempotent (a
/// second recovery of what the first left finds the same records), every
/// record the iterator yields also reads by LSN, and an append works or
/// fails with an error.
pub fn log(data: &[u8]) {
    let b = log_bases();
    run_image(b, data, |pool, _, options| {
        let Ok(mut log) = Log::recover(pool.data()) else {
            return;
        };
        let recs = log_records(&log);
        assert_eq!(recs.len() as u64, log.len(), "iterator and len disagree");
        let mut buf = Vec::new();
        for (lsn, r) in &recs {
            log.read(ferrite_blocks::log::Lsn(*lsn), &mut buf)
                .expect("a record the iterator yields reads by its LSN");
            assert_eq!(&buf, r, "read and iter disagree at LSN {lsn}");
        }
        let again = Log::recover(reopen(pool, b.layout).data()).expect("recovery is idempotent");
        assert_eq!(recs, log_records(&again), "a second recovery differs");
        if options & 1 == 1 {
            let _ = log.append(b"fuzz");
        }
    });
}

// ---- page store -----------------------------------------------------------------------

const PAGE_LAYOUT: &str = "fuzz-page";
const PAGE: usize = 4096;
const PAGES: u32 = 4;

pub(crate) fn page_bases() -> &'static Bases {
    static B: OnceLock<Bases> = OnceLock::new();
    B.get_or_init(|| {
        let mut images = Vec::new();
        let algs = [
            PageAlgorithm::Cow,
            PageAlgorithm::MicroLog,
            PageAlgorithm::Hybrid,
        ];
        for (i, &alg) in algs.iter().enumerate() {
            let opts = PageStoreOptions::new(PAGE, PAGES)
                .lanes(2)
                .algorithm(alg)
                .nonce(NONCE);
            let setup = move |p: &Pool| {
                PageStore::create(p.data(), &opts).expect("create page store");
            };
            let work = |p: &Pool| {
                let s = PageStore::open(p.data()).expect("open");
                for k in 0..10u32 {
                    let page = k % PAGES;
                    let data = vec![(k as u8).wrapping_mul(37) | 1; PAGE];
                    let dirty = match k % 3 {
                        0 => DirtyLines::all(PAGE / 64),
                        1 => DirtyLines::from_lines([0, 5, 63]),
                        _ => DirtyLines::from_lines(0..14),
                    };
                    s.write_page(page, &data, &dirty).expect("write page");
                }
            };
            images.extend(build(
                &Recipe {
                    layout: PAGE_LAYOUT,
                    size: SIZE * 2,
                    setup: &setup,
                    work: &work,
                    crashes: CRASHES,
                },
                i,
            ));
        }
        Bases::new(PAGE_LAYOUT, images)
    })
}

fn pages_of(s: &PageStore) -> Vec<Vec<u8>> {
    (0..s.pages())
        .map(|p| {
            let mut out = vec![0u8; s.page_size()];
            s.read_page(p, &mut out)
                .expect("a page of an open store reads");
            out
        })
        .collect()
}

/// `PageStore::open` on a patched store. Checks: the store's own audit
/// (page map, free list and media agree), every page reads, and a second
/// open of what the first left reads the same.
pub fn page_store(data: &[u8]) {
    let b = page_bases();
    run_image(b, data, |pool, _, options| {
        let Ok(s) = PageStore::open(pool.data()) else {
            return;
        };
        if let Err(e) = s.audit() {
            panic!("page store opened but fails its audit: {e}");
        }
        let pages = pages_of(&s);
        let again = PageStore::open(reopen(pool, b.layout).data()).expect("open is idempotent");
        assert_eq!(pages, pages_of(&again), "a second open reads differently");
        if options & 1 == 1 && s.pages() > 0 {
            let _ = s.write_page(0, &vec![7u8; s.page_size()], &DirtyLines::from_lines([1]));
        }
    });
}

// ---- cells ----------------------------------------------------------------------------

const CELL_LAYOUT: &str = "fuzz-cells";
const CELLS: usize = 24;

pub(crate) fn cell_bases() -> &'static Bases {
    static B: OnceLock<Bases> = OnceLock::new();
    B.get_or_init(|| {
        let mut images = Vec::new();
        let mut config = 0;
        for kind in CellKind::ALL {
            for size in [ValueSize::B16, ValueSize::B64] {
                let setup = move |p: &Pool| {
                    cell::format_any(kind, p.data(), size, CELLS).expect("format cells");
                };
                let work = move |p: &Pool| {
                    let (mut a, _) = cell::recover_any(p.data()).expect("recover cells");
                    for k in 0..30usize {
                        let v = vec![(k as u8).wrapping_mul(29) ^ 0x33; size.bytes()];
                        a.update(k * 7 % CELLS, &v).expect("update");
                    }
                };
                images.extend(build(
                    &Recipe {
                        layout: CELL_LAYOUT,
                        size: SIZE,
                        setup: &setup,
                        work: &work,
                        crashes: CRASHES,
                    },
                    config,
                ));
                config += 1;
            }
        }
        Bases::new(CELL_LAYOUT, images)
    })
}

fn cells_of(a: &dyn cell::CellArray) -> Vec<Vec<u8>> {
    (0..a.len())
        .map(|i| {
            let mut out = vec![0u8; a.value_size().bytes()];
            a.read(i, &mut out).expect("a cell of an open array reads");
            out
        })
        .collect()
}

/// `cell::recover_any` on a patched cell array. Checks: every cell reads,
/// recovery is idempotent, an update works or fails with an error.
pub fn cells(data: &[u8]) {
    let b = cell_bases();
    run_image(b, data, |pool, _, options| {
        let Ok((mut a, _)) = cell::recover_any(pool.data()) else {
            return;
        };
        let values = cells_of(a.as_ref());
        let (again, _) =
            cell::recover_any(reopen(pool, b.layout).data()).expect("recovery is idempotent");
        assert_eq!(
            values,
            cells_of(again.as_ref()),
            "a second recovery differs"
        );
        if options & 1 == 1 && !a.is_empty() {
            let v = vec![0xee; a.value_size().bytes()];
            let _ = a.update(a.len() - 1, &v);
        }
    });
}

// ---- FP-Tree leaves -------------------------------------------------------------------

const LEAVES_LAYOUT: &str = "fuzz-leaves";
const LEAVES: usize = 8;

pub(crate) fn leaves_bases() -> &'static Bases {
    static B: OnceLock<Bases> = OnceLock::new();
    B.get_or_init(|| {
        let setup = |p: &Pool| {
            FpLeaves::create(p.data(), LEAVES, NONCE).expect("create leaves");
        };
        let work = |p: &Pool| {
            let mut t = FpLeaves::recover(p.data()).expect("recover");
            for k in 0..40u64 {
                t.insert(k.wrapping_mul(0x9e37_79b9), k + 1)
                    .expect("insert");
            }
        };
        let images = build(
            &Recipe {
                layout: LEAVES_LAYOUT,
                size: SIZE,
                setup: &setup,
                work: &work,
                crashes: CRASHES,
            },
            0,
        );
        Bases::new(LEAVES_LAYOUT, images)
    })
}

/// `FpLeaves::recover` on patched leaves. Checks: the table's audit, every
/// entry found by `get`, recovery idempotent.
pub fn fp_leaves(data: &[u8]) {
    let b = leaves_bases();
    run_image(b, data, |pool, _, options| {
        let Ok(mut t) = FpLeaves::recover(pool.data()) else {
            return;
        };
        if let Err(e) = t.audit() {
            panic!("leaves recovered but fail their audit: {e}");
        }
        let entries = t.entries();
        for &(k, v) in &entries {
            assert!(t.get(k).is_some(), "entry {k:#x}={v} not found by get");
        }
        let again = FpLeaves::recover(reopen(pool, b.layout).data()).expect("idempotent");
        assert_eq!(entries, again.entries(), "a second recovery differs");
        if options & 1 == 1 {
            let _ = t.insert(0xdead_beef, 1);
        }
    });
}
