//! PMDK's allocator behind `ferrite_alloc::PAllocator`, and the storage
//! engines on it. Needs the `pmdk` feature (PMDK 1.12 from Debian):
//! `cargo test -p ferrite-bench --features pmdk --test pmdk_alloc`.
//! Without the feature this file compiles to nothing.
#![cfg(feature = "pmdk")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ferrite_alloc::{AllocError, Link, PAllocator, Publish};
use ferrite_bench::peers::pmdk_alloc::{
    MAX_PUBLISH_OPS, PMDK_LAYOUT, PmdkAlloc, PmdkStoreError, open_pmdk_store, pmdk_store,
};
use ferrite_engine::{EngineError, EngineKind, Op, StoreOptions};
use ferrite_pmdk::PmemObj;
use ferrite_pmem::{Counters, POff};

/// A fresh directory under /dev/shm, removed on drop.
struct ShmDir(PathBuf);

impl ShmDir {
    fn new(tag: &str) -> ShmDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let p = Path::new(ferrite_pmdk::SHM_DIR).join(format!(
            "ferrite-pmdk-alloc-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        ShmDir(p)
    }
    fn file(&self) -> PathBuf {
        self.0.join("pool")
    }
}

impl Drop for ShmDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const POOL: usize = 32 << 20;

fn alloc_on(path: &Path) -> PmdkAlloc {
    PmdkAlloc::new(Arc::new(PmemObj::create(path, PMDK_LAYOUT, POOL).unwrap())).unwrap()
}

fn reopen(path: &Path) -> PmdkAlloc {
    let obj = retry_locked(|| PmemObj::open(path, PMDK_LAYOUT), |e| e.errno()).unwrap();
    PmdkAlloc::new(Arc::new(obj)).unwrap()
}

/// Runs `f` again while it fails with libpmemobj's `flock` refusal
/// (`EAGAIN`, from `errno`), for up to a second. A pool this process
/// closed can stay locked for an instant: a child that another test
/// thread is spawning shares the lock's descriptor between its fork and
/// its exec, which closes it (`spawn_clean`).
fn retry_locked<T, E>(
    mut f: impl FnMut() -> Result<T, E>,
    errno: impl Fn(&E) -> Option<i32>,
) -> Result<T, E> {
    for _ in 0..100 {
        match f() {
            Err(e) if errno(&e) == Some(libc::EAGAIN) => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            r => return r,
        }
    }
    f()
}

/// [`open_pmdk_store`], retried while the pool's lock is busy (see
/// [`retry_locked`]).
fn open_store(
    path: &Path,
    opts: &StoreOptions,
) -> Result<ferrite_bench::peers::pmdk_alloc::PmdkStore, PmdkStoreError> {
    retry_locked(
        || open_pmdk_store(path, opts),
        |e| match e {
            PmdkStoreError::Pmdk(e) => e.errno(),
            _ => None,
        },
    )
}

fn allocated(a: &PmdkAlloc) -> BTreeMap<u64, usize> {
    let mut m = BTreeMap::new();
    a.for_each_allocated(&mut |off, n| {
        assert!(m.insert(off.raw(), n).is_none(), "listed twice");
    });
    m
}

fn word(a: &PmdkAlloc, at: u64) -> u64 {
    a.region().unwrap().load_u64(at as usize)
}

#[test]
fn reserve_publish_cancel_free_and_reopen() {
    let dir = ShmDir::new("semantics");
    let a = alloc_on(&dir.file());
    assert_eq!(a.name(), "pmdk");
    assert!(a.root().is_null());
    let mut t = a.thread().unwrap();
    let root = t.root(4096).unwrap();
    assert_eq!(a.root(), root);
    assert_eq!(t.root(100).unwrap(), root, "an existing root is kept");
    assert!(matches!(t.root(1 << 20), Err(AllocError::BadOption(_))));
    assert!(a.usable_size(root).unwrap() >= 4096);
    assert!(allocated(&a).is_empty(), "the root is not a block");

    // Two blocks and their links, atomically.
    let r1 = t.reserve(100).unwrap();
    let r2 = t.reserve(10_000).unwrap();
    assert!(r1.usable_size() >= 100 && r2.usable_size() >= 10_000);
    let (o1, o2) = (r1.off(), r2.off());
    assert!(allocated(&a).is_empty(), "reserved is not allocated");
    // A block is usable through the engine's region at its PMEMoid offset.
    let region = a.region().unwrap();
    region.write(o2.raw() as usize, b"payload");
    region.persist(o2.raw() as usize, 7);
    let links = [
        Link::to(POff::new(root.raw()), &r1),
        Link::to(POff::new(root.raw() + 8), &r2),
        // A link inside a block of the same publish.
        Link {
            at: POff::new(o1.raw()),
            value: 42,
        },
    ];
    let allocs = [r1, r2];
    t.publish(&Publish {
        allocs: &allocs,
        frees: &[],
        links: &links,
    })
    .unwrap();
    assert_eq!(word(&a, root.raw()), o1.raw());
    assert_eq!(word(&a, root.raw() + 8), o2.raw());
    assert_eq!(word(&a, o1.raw()), 42);
    let m = allocated(&a);
    let mut want = vec![o1.raw(), o2.raw()];
    want.sort();
    assert_eq!(m.keys().copied().collect::<Vec<_>>(), want);
    assert_eq!(m[&o1.raw()], a.usable_size(o1).unwrap());
    assert_eq!(m[&o2.raw()], a.usable_size(o2).unwrap());
    assert_eq!(a.stats().blocks, 2);

    // Publishing a reservation twice is stale.
    let [r1, _r2] = allocs;
    assert!(matches!(
        t.publish(&Publish {
            allocs: std::slice::from_ref(&r1),
            ..Publish::default()
        }),
        Err(AllocError::StaleReservation { .. })
    ));

    // A cancelled reservation leaves nothing.
    let r3 = t.reserve(64).unwrap();
    let o3 = r3.off();
    t.cancel(r3).unwrap();
    assert!(!allocated(&a).contains_key(&o3.raw()));

    // One-block forms: alloc with link, free with unlink.
    let o4 = t.alloc(300, Some(POff::new(root.raw() + 16))).unwrap();
    assert_eq!(word(&a, root.raw() + 16), o4.raw());
    t.free(o1, Some(POff::new(root.raw()))).unwrap();
    assert_eq!(word(&a, root.raw()), 0);
    assert!(matches!(
        a.usable_size(o1),
        Err(AllocError::NotAllocated { .. })
    ));
    assert_eq!(allocated(&a).keys().copied().collect::<Vec<_>>(), {
        let mut v = vec![o2.raw(), o4.raw()];
        v.sort();
        v
    });
    let unpublished = t.reserve(64).unwrap().off();
    drop(t);
    drop(region);
    drop(a);

    // Reopen: PMDK's heap and the links are durable; the unpublished
    // reservation is gone.
    let a = reopen(&dir.file());
    assert_eq!(a.root(), root);
    assert_eq!(a.recovery().blocks, 2);
    let m = allocated(&a);
    assert!(m.contains_key(&o2.raw()) && m.contains_key(&o4.raw()));
    assert!(!m.contains_key(&unpublished.raw()));
    assert_eq!(word(&a, root.raw() + 8), o2.raw());
    assert_eq!(word(&a, root.raw() + 16), o4.raw());
    let mut b = [0u8; 7];
    a.region().unwrap().read(o2.raw() as usize, &mut b);
    assert_eq!(&b, b"payload");
}

#[test]
fn misuse_is_refused_with_typed_errors() {
    let dir = ShmDir::new("misuse");
    let a = alloc_on(&dir.file());
    let other_dir = ShmDir::new("misuse-other");
    let other = alloc_on(&other_dir.file());
    let mut t = a.thread().unwrap();
    let mut u = a.thread().unwrap();
    let mut x = other.thread().unwrap();
    let root = t.root(256).unwrap().raw();

    assert!(matches!(t.reserve(0), Err(AllocError::ZeroSize)));
    assert!(matches!(
        t.reserve(POOL + 1),
        Err(AllocError::TooLarge { .. })
    ));
    assert!(matches!(
        t.reserve(POOL - 4096),
        Err(AllocError::OutOfSpace { .. })
    ));

    let r = t.reserve(64).unwrap();
    let foreign = x.reserve(64).unwrap();
    let p = |allocs| Publish {
        allocs,
        ..Publish::default()
    };
    assert!(matches!(
        t.publish(&p(std::slice::from_ref(&foreign))),
        Err(AllocError::Foreign { what: "heap" })
    ));
    assert!(matches!(
        u.publish(&p(std::slice::from_ref(&r))),
        Err(AllocError::Foreign {
            what: "thread handle"
        })
    ));
    // Frees of what is not a block, and double frees.
    for bad in [root, root + 16, 4096] {
        assert!(matches!(
            t.free(POff::new(bad), None),
            Err(AllocError::NotAllocated { .. })
        ));
    }
    let b = t.alloc(64, None).unwrap();
    assert!(matches!(
        t.publish(&Publish {
            frees: &[b, b],
            ..Publish::default()
        }),
        Err(AllocError::DoubleFree { .. })
    ));
    // Links into PMDK's metadata, unaligned, or past a block.
    let usable = a.usable_size(b).unwrap() as u64;
    for bad in [8, 4096, root + 3, b.raw() + usable, u64::MAX - 7] {
        assert!(
            matches!(
                t.publish(&Publish {
                    links: &[Link {
                        at: POff::new(bad),
                        value: 1
                    }],
                    ..Publish::default()
                }),
                Err(AllocError::BadLink { .. })
            ),
            "{bad:#x}"
        );
    }
    // A link into a block the same publish frees.
    assert!(matches!(
        t.publish(&Publish {
            frees: &[b],
            links: &[Link {
                at: POff::new(b.raw()),
                value: 1
            }],
            ..Publish::default()
        }),
        Err(AllocError::BadLink { .. })
    ));
    // A failed publish changed nothing: r is still publishable, b still
    // live (and freeable).
    assert!(matches!(
        t.prepare(&p(std::slice::from_ref(&r)), &mut Vec::new()),
        Err(AllocError::Unsupported { .. })
    ));
    t.publish(&Publish {
        allocs: std::slice::from_ref(&r),
        frees: &[b],
        links: &[Link::to(POff::new(root), &r)],
    })
    .unwrap();
    assert_eq!(word(&a, root), r.off().raw());
    assert_eq!(
        allocated(&a).keys().copied().collect::<Vec<_>>(),
        vec![r.off().raw()]
    );

    let too_many = vec![
        Link {
            at: POff::new(root),
            value: 0
        };
        MAX_PUBLISH_OPS + 1
    ];
    assert!(matches!(
        t.publish(&Publish {
            links: &too_many,
            ..Publish::default()
        }),
        Err(AllocError::BatchTooLarge { .. })
    ));
    x.cancel(foreign).unwrap();
}

#[test]
fn a_full_pool_recovers_after_frees_and_a_large_publish_goes_through() {
    let dir = ShmDir::new("full");
    let a = alloc_on(&dir.file());
    let mut t = a.thread().unwrap();
    let mut blocks = Vec::new();
    loop {
        match t.alloc(256 << 10, None) {
            Ok(b) => blocks.push(b),
            Err(AllocError::OutOfSpace { .. }) => break,
            Err(e) => panic!("{e}"),
        }
        assert!(blocks.len() < POOL / (256 << 10), "never full");
    }
    assert!(
        blocks.len() > 50,
        "{} blocks of 256 KiB in 32 MiB",
        blocks.len()
    );
    // Free a batch at once, then allocate again.
    let frees: Vec<_> = blocks.drain(..8).collect();
    t.publish(&Publish {
        frees: &frees,
        ..Publish::default()
    })
    .unwrap();
    blocks.push(t.alloc(256 << 10, None).unwrap());
    assert_eq!(allocated(&a).len(), blocks.len());
    for b in blocks.drain(..) {
        t.free(b, None).unwrap();
    }
    assert!(allocated(&a).is_empty());

    // MAX_PUBLISH_OPS actions in one publish: half blocks, half links.
    let root = t.root(8 * MAX_PUBLISH_OPS).unwrap().raw();
    let rs: Vec<_> = (0..MAX_PUBLISH_OPS / 2)
        .map(|_| t.reserve(64).unwrap())
        .collect();
    let links: Vec<_> = rs
        .iter()
        .enumerate()
        .map(|(i, r)| Link::to(POff::new(root + 8 * i as u64), r))
        .collect();
    t.publish(&Publish {
        allocs: &rs,
        frees: &[],
        links: &links,
    })
    .unwrap();
    assert_eq!(allocated(&a).len(), rs.len());
    for (i, r) in rs.iter().enumerate() {
        assert_eq!(word(&a, root + 8 * i as u64), r.off().raw());
    }
}

#[test]
fn threads_allocate_and_free_concurrently() {
    let dir = ShmDir::new("threads");
    let a = alloc_on(&dir.file());
    let root = a.thread().unwrap().root(4 * 64 * 8).unwrap().raw();
    std::thread::scope(|s| {
        for th in 0..4u64 {
            let a = &a;
            s.spawn(move || {
                let mut t = a.thread().unwrap();
                let slots = root + th * 64 * 8;
                for round in 0..200u64 {
                    let slot = POff::new(slots + 8 * (round % 64));
                    let cur = a.region().unwrap().load_u64(slot.raw() as usize);
                    if cur != 0 {
                        t.free(POff::new(cur), Some(slot)).unwrap();
                    } else {
                        t.alloc(16 + (round as usize * 37) % 2000, Some(slot))
                            .unwrap();
                    }
                }
            });
        }
    });
    // Every allocated block is linked from exactly one slot and vice versa.
    let region = a.region().unwrap();
    let mut linked: Vec<u64> = (0..4 * 64)
        .map(|i| region.load_u64((root + 8 * i) as usize))
        .filter(|&w| w != 0)
        .collect();
    linked.sort();
    assert_eq!(allocated(&a).keys().copied().collect::<Vec<_>>(), linked);
}

/// Engines that do not run on an external allocator yet, and why. Each
/// must refuse with a typed error (checked by `engine_or_skip`), not
/// panic or corrupt; when one gains support its refusal check fails and it
/// must come off this list.
/// (InP runs since its intent protocol: it names the blocks it allocates
/// in its log before PMDK's publish, instead of preparing them.)
const NOT_ON_PMDK: &[(EngineKind, &str)] = &[];

/// The store, or `None` for an engine that is a placeholder ("not built
/// yet") or on [`NOT_ON_PMDK`] (after checking that its first put is
/// refused with an error).
fn engine_or_skip(
    r: Result<ferrite_bench::peers::pmdk_alloc::PmdkStore, PmdkStoreError>,
    kind: EngineKind,
) -> Option<ferrite_bench::peers::pmdk_alloc::PmdkStore> {
    if let Some((_, why)) = NOT_ON_PMDK.iter().find(|(k, _)| *k == kind) {
        let refusal = match r {
            Err(e) => e.to_string(),
            Ok(s) => {
                let mut ss = s.session().unwrap();
                match ss.put(b"probe", b"value") {
                    Err(e) => e.to_string(),
                    Ok(()) => panic!("{kind} now runs on PMDK: take it off NOT_ON_PMDK"),
                }
            }
        };
        eprintln!("skipping engine {kind} on PMDK: {why} (it refuses: {refusal})");
        return None;
    }
    match r {
        Ok(s) => Some(s),
        Err(PmdkStoreError::Engine(EngineError::BadOption(m))) if m.contains("not built yet") => {
            eprintln!("skipping engine {kind}: {m}");
            None
        }
        Err(e) => panic!("{kind} on PMDK: {e}"),
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: u32, v: u32) -> Vec<u8> {
    let n = [0usize, 1, 100, 1000, 5000, 70_000][(i as usize + v as usize) % 6];
    (0..n)
        .map(|j| (i as usize * 7 + v as usize * 13 + j) as u8)
        .collect()
}

fn check_walk(s: &ferrite_bench::peers::pmdk_alloc::PmdkStore, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    s.quiesce().unwrap();
    let w = s.walk().unwrap();
    let entries: BTreeMap<_, _> = w.entries.into_iter().collect();
    assert_eq!(&entries, model);
    let mut blocks: Vec<u64> = w.blocks.iter().map(|b| b.0).collect();
    blocks.sort();
    let mut alloc: Vec<u64> = Vec::new();
    s.alloc()
        .for_each_allocated(&mut |off, _| alloc.push(off.raw()));
    alloc.sort();
    assert_eq!(blocks, alloc, "walk().blocks == the allocated set");
}

#[test]
fn every_engine_runs_on_pmdk() {
    for kind in EngineKind::ALL {
        let dir = ShmDir::new(kind.name());
        let opts = StoreOptions::new(kind).sessions(2).nonce(7);
        let Some(s) = engine_or_skip(pmdk_store(&dir.file(), 64 << 20, &opts), kind) else {
            continue;
        };
        assert_eq!(s.allocator_kind(), ferrite_engine::AllocKind::Pmdk);
        let mut model = BTreeMap::new();
        {
            let mut ss = s.session().unwrap();
            for i in 0..300u32 {
                ss.put(&key(i), &value(i, 0)).unwrap();
                model.insert(key(i), value(i, 0));
            }
            for i in (0..300u32).step_by(3) {
                assert!(ss.delete(&key(i)).unwrap());
                model.remove(&key(i));
            }
            assert!(!ss.delete(&key(0)).unwrap());
            for i in (1..300u32).step_by(5) {
                ss.put(&key(i), &value(i, 1)).unwrap();
                model.insert(key(i), value(i, 1));
            }
            let (k1, k2, v1) = (key(1000), key(1), value(1000, 2));
            ss.batch(&[
                Op::Put {
                    key: &k1,
                    value: &v1,
                },
                Op::Delete { key: &k2 },
            ])
            .unwrap();
            model.insert(k1, v1);
            model.remove(&k2);
            for (k, v) in &model {
                assert_eq!(ss.get(k).unwrap().as_ref(), Some(v));
            }
            let from = key(150);
            let got = ss.scan(&from, 20).unwrap();
            let want: Vec<_> = model
                .range(from.clone()..)
                .take(20)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(got, want);
            assert!(matches!(
                ss.put(&vec![1u8; 2000], b"x"),
                Err(EngineError::KeySize { .. })
            ));
        }
        check_walk(&s, &model);
        // Drop without close, then reopen.
        drop(s);
        let s = open_store(&dir.file(), &opts).unwrap();
        check_walk(&s, &model);
        {
            let mut ss = s.session().unwrap();
            for (k, v) in &model {
                assert_eq!(ss.get(k).unwrap().as_ref(), Some(v), "{kind} after reopen");
            }
        }
        let path = s.path().to_path_buf();
        s.remove().unwrap();
        assert!(!path.exists(), "remove deletes the pool file");
        assert!(matches!(
            open_store(&path, &opts),
            Err(PmdkStoreError::Pmdk(_))
        ));
    }
}

/// Fences and lines per put that go through Ferrite's persistence door
/// (the engine's own); PMDK's flushes and fences inside `pmemobj_publish`
/// are not counted (see the module docs of `pmdk_alloc`).
#[test]
fn engine_fences_on_pmdk_are_counted() {
    for kind in EngineKind::ALL {
        let dir = ShmDir::new(&format!("fences-{}", kind.name()));
        let opts = StoreOptions::new(kind).sessions(1).nonce(9);
        let Some(s) = engine_or_skip(pmdk_store(&dir.file(), 64 << 20, &opts), kind) else {
            continue;
        };
        let mut ss = s.session().unwrap();
        let v = vec![7u8; 1000];
        for i in 0..100u32 {
            ss.put(&key(i), &v).unwrap();
        }
        let n = 200u32;
        #[cfg(feature = "pmdk-count")]
        let pmdk_before = ferrite_pmdk::PmdkCounts::snapshot();
        let before = Counters::snapshot();
        for i in 0..n {
            ss.put(&key(i % 100), &v).unwrap();
        }
        let d = (Counters::snapshot() - before).per_op(u64::from(n));
        #[cfg(feature = "pmdk-count")]
        {
            let p = ferrite_pmdk::PmdkCounts::snapshot() - pmdk_before;
            eprintln!(
                "{kind} on pmdk, update of 1000 B: {:.2} PMDK fences/op, {:.2} PMDK lines/op ({} msyncs)",
                p.fences as f64 / f64::from(n),
                p.lines as f64 / f64::from(n),
                p.msyncs
            );
        }
        eprintln!(
            "{kind} on pmdk, update of 1000 B: {:.2} Ferrite-counted fences/op, {:.2} lines/op (PMDK's own not included; Ferrite fence before each publish: {})",
            d.fences,
            d.lines_flushed,
            s.alloc().fences_before_publish()
        );
        assert!(
            d.lines_flushed >= 1.0,
            "the engine flushes its data through Ferrite's door"
        );
        // Inserts: new tuples, published through PMDK (InP: its intent
        // protocol, one intent fence and one commit fence of its own).
        #[cfg(feature = "pmdk-count")]
        let pmdk_before = ferrite_pmdk::PmdkCounts::snapshot();
        let before = Counters::snapshot();
        for i in 0..n {
            ss.put(&key(10_000 + i), &v).unwrap();
        }
        let d = (Counters::snapshot() - before).per_op(u64::from(n));
        #[cfg(feature = "pmdk-count")]
        {
            let p = ferrite_pmdk::PmdkCounts::snapshot() - pmdk_before;
            eprintln!(
                "{kind} on pmdk, insert of 1000 B: {:.2} PMDK fences/op, {:.2} PMDK lines/op",
                p.fences as f64 / f64::from(n),
                p.lines as f64 / f64::from(n),
            );
        }
        eprintln!(
            "{kind} on pmdk, insert of 1000 B: {:.2} Ferrite-counted fences/op, {:.2} lines/op",
            d.fences, d.lines_flushed
        );
        if kind == EngineKind::Inp {
            // Intent + commit, and a Ferrite fence before each publish
            // when PMDK is on its msync path.
            let extra = if s.alloc().fences_before_publish() {
                1.0
            } else {
                0.0
            };
            assert!(
                (2.0..=2.0 + extra + 0.05).contains(&d.fences),
                "inp insert on pmdk: {} fences/op",
                d.fences
            );
        }
        // Deletes: frees (InP: owed, published by the next write).
        #[cfg(feature = "pmdk-count")]
        let pmdk_before = ferrite_pmdk::PmdkCounts::snapshot();
        let before = Counters::snapshot();
        for i in 0..n {
            assert!(ss.delete(&key(10_000 + i)).unwrap());
        }
        let d = (Counters::snapshot() - before).per_op(u64::from(n));
        #[cfg(feature = "pmdk-count")]
        {
            let p = ferrite_pmdk::PmdkCounts::snapshot() - pmdk_before;
            eprintln!(
                "{kind} on pmdk, delete: {:.2} PMDK fences/op, {:.2} PMDK lines/op",
                p.fences as f64 / f64::from(n),
                p.lines as f64 / f64::from(n),
            );
        }
        eprintln!(
            "{kind} on pmdk, delete: {:.2} Ferrite-counted fences/op, {:.2} lines/op",
            d.fences, d.lines_flushed
        );

        // The same updates on Ferrite's two heaps, for comparison.
        for a in ferrite_engine::AllocKind::ALL {
            let pool = ferrite_pmem::Pool::create_in_memory(
                &ferrite_pmem::PoolOptions::new(ferrite_engine::LAYOUT, 64 << 20)
                    .domain(ferrite_pmem::Domain::Adr),
            )
            .unwrap();
            let fs = ferrite_engine::Store::create(&pool, &opts.clone().allocator(a)).unwrap();
            let mut fss = fs.session().unwrap();
            for i in 0..100u32 {
                fss.put(&key(i), &v).unwrap();
            }
            let before = Counters::snapshot();
            for i in 0..n {
                fss.put(&key(i % 100), &v).unwrap();
            }
            let d = (Counters::snapshot() - before).per_op(u64::from(n));
            eprintln!(
                "{kind} on {a}, update of 1000 B: {:.2} fences/op, {:.2} lines/op (all counted)",
                d.fences, d.lines_flushed
            );
        }
    }
}

/// Fences per publish: PMDK's `pmemobj_publish` (its own fences, counted
/// by ferrite-pmdk's `count` wrappers) against the Ferrite heap and the
/// lock heap (ferrite-pmem's counters), for the same publishes, in steady
/// state. Run with `--features pmdk-count` (and `PMEM_IS_PMEM_FORCE=1`
/// for PMDK's flush path; without it each PMDK fence is an msync).
#[cfg(feature = "pmdk-count")]
#[test]
fn publish_fences_pmdk_vs_ferrite() {
    use ferrite_alloc::{AllocThread, Heap, HeapOptions, LockHeap, LockOptions};
    use ferrite_pmdk::PmdkCounts;
    use ferrite_pmem::{Domain, HEADER_SIZE, Pool, PoolOptions};

    const N: u64 = 200;
    const BATCH: usize = 8;
    /// (fences, lines) per op of three publishes: one block + its link;
    /// its free + unlink; BATCH blocks + links in one publish.
    type Costs = [(f64, f64); 3];

    fn run(t: &mut dyn AllocThread, slots: u64, measure: &dyn Fn() -> (u64, u64)) -> Costs {
        let mut out = [(0.0, 0.0); 3];
        let per = |(f0, l0): (u64, u64), (f1, l1): (u64, u64), n: u64| {
            ((f1 - f0) as f64 / n as f64, (l1 - l0) as f64 / n as f64)
        };
        // Warm up: size-class runs, lanes.
        for i in 0..16 {
            let b = t.alloc(100, Some(POff::new(slots + 8 * i))).unwrap();
            t.free(b, Some(POff::new(slots + 8 * i))).unwrap();
        }
        let mut blocks = Vec::new();
        let m0 = measure();
        for i in 0..N {
            blocks.push(t.alloc(100, Some(POff::new(slots + 8 * (i % 64)))).unwrap());
        }
        let m1 = measure();
        for (i, b) in blocks.drain(..).enumerate() {
            t.free(b, Some(POff::new(slots + 8 * (i as u64 % 64))))
                .unwrap();
        }
        let m2 = measure();
        out[0] = per(m0, m1, N);
        out[1] = per(m1, m2, N);
        let mut all = Vec::new();
        for _ in 0..N / BATCH as u64 {
            let rs: Vec<_> = (0..BATCH).map(|_| t.reserve(100).unwrap()).collect();
            let links: Vec<_> = rs
                .iter()
                .enumerate()
                .map(|(i, r)| Link::to(POff::new(slots + 8 * i as u64), r))
                .collect();
            all.extend(rs.iter().map(|r| r.off()));
            t.publish(&Publish {
                allocs: &rs,
                frees: &[],
                links: &links,
            })
            .unwrap();
        }
        out[2] = per(m2, measure(), N);
        out
    }

    let ferrite_counts = || {
        let c = Counters::snapshot();
        (c.fences, c.lines_flushed)
    };
    let pmdk_counts = || {
        let c = PmdkCounts::snapshot();
        (c.fences, c.lines)
    };

    let dir = ShmDir::new("publish-costs");
    let a = alloc_on(&dir.file());
    let slots = a.thread().unwrap().root(4096).unwrap().raw();
    let pmdk = run(&mut *a.thread().unwrap(), slots, &pmdk_counts);
    let pmdk_engine_side = run(&mut *a.thread().unwrap(), slots, &ferrite_counts);

    // Ferrite pools: links in the first 64 KiB of the data area, the heap
    // after it.
    let costs = |lock: bool| {
        let pool = Pool::create_in_memory(
            &PoolOptions::new("publish-costs", 64 << 20).domain(Domain::Adr),
        )
        .unwrap();
        let d = pool.data();
        let region = d.sub(64 << 10, d.len() - (64 << 10)).unwrap();
        let slots = HEADER_SIZE as u64;
        if lock {
            let h = LockHeap::create(region, LockOptions::default()).unwrap();
            run(&mut *h.thread().unwrap(), slots, &ferrite_counts)
        } else {
            let h = Heap::create(region, HeapOptions::default()).unwrap();
            run(&mut *h.thread().unwrap(), slots, &ferrite_counts)
        }
    };
    let ferrite = costs(false);
    let lock = costs(true);
    let names = ["alloc+link", "free+unlink", "batch of 8 (per block)"];
    eprintln!(
        "forced pmem path: {}",
        std::env::var("PMEM_IS_PMEM_FORCE").unwrap_or_default()
    );
    eprintln!(
        "{:<24} {:>18} {:>18} {:>18}",
        "publish", "pmdk f/lines", "ferrite f/lines", "lock f/lines"
    );
    for i in 0..3 {
        eprintln!(
            "{:<24} {:>8.2}/{:<9.2} {:>8.2}/{:<9.2} {:>8.2}/{:<9.2}",
            names[i], pmdk[i].0, pmdk[i].1, ferrite[i].0, ferrite[i].1, lock[i].0, lock[i].1
        );
        assert_eq!(
            pmdk_engine_side[i].0, 0.0,
            "PMDK's publish issues no Ferrite-counted fence"
        );
        assert!(pmdk[i].0 > 0.0 && ferrite[i].0 > 0.0 && lock[i].0 > 0.0);
    }
}

/// Environment variable naming the pool a `kill_child_*` test works on
/// when run as the killed child of [`kill_9_leaves_no_leak`]; unset, those
/// tests return at once.
const CHILD_ENV: &str = "FERRITE_PMDK_KILL_CHILD";

/// Spawns `cmd` so that the child keeps no descriptor but 0, 1 and 2.
///
/// Other tests of this process have PMDK pools open at any moment, and
/// libpmemobj holds each pool's `flock` on a descriptor it opens without
/// `O_CLOEXEC`: a child inheriting one keeps that pool locked until it
/// exits, and another child then fails to open it (`EAGAIN`). (Any
/// program that spawns processes while PMDK pools are open has this
/// problem.)
fn spawn_clean(cmd: &mut std::process::Command) -> KillOnDrop {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure makes one async-signal-safe system call and
    // touches no memory of the parent; its failure (an old kernel) only
    // leaves the descriptors inherited, as without it.
    unsafe {
        cmd.pre_exec(|| {
            libc::close_range(3, u32::MAX, libc::CLOSE_RANGE_CLOEXEC as i32);
            Ok(())
        })
    };
    KillOnDrop(cmd.spawn().unwrap())
}

/// A child process killed (and reaped) when the test lets go of it, also
/// when the test fails, so that no child outlives its test.
struct KillOnDrop(std::process::Child);

impl KillOnDrop {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Slots in the root that the kill test links blocks from.
const KILL_SLOTS: u64 = 64;

/// Child of [`kill_9_leaves_no_leak`]: allocates and frees blocks linked
/// from root slots, singly and in batches, until it is killed.
#[test]
fn kill_child_alloc() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let a = reopen(Path::new(&path));
    let root = a.root().raw();
    let region = a.region().unwrap();
    let mut t = a.thread().unwrap();
    // Straight to the process's stdout (println! may be captured by the
    // test harness).
    {
        use std::io::Write;
        let mut out = std::io::stdout();
        writeln!(out, "started").unwrap();
        out.flush().unwrap();
    }
    let mut x: u64 = std::process::id().into();
    loop {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let slot = root + 8 * (x % KILL_SLOTS);
        let cur = region.load_u64(slot as usize);
        if cur != 0 {
            t.free(POff::new(cur), Some(POff::new(slot))).unwrap();
        } else if x.is_multiple_of(5) {
            // A batch: this slot and the next empty ones, atomically.
            let mut rs = Vec::new();
            let mut links = Vec::new();
            for j in 0..4 {
                let s = root + 8 * ((x + j) % KILL_SLOTS);
                if region.load_u64(s as usize) == 0 && !links.iter().any(|l: &Link| l.at.raw() == s)
                {
                    let r = t.reserve(64 + (x as usize % 3000)).unwrap();
                    links.push(Link::to(POff::new(s), &r));
                    rs.push(r);
                }
            }
            t.publish(&Publish {
                allocs: &rs,
                frees: &[],
                links: &links,
            })
            .unwrap();
        } else {
            t.alloc(16 + (x as usize % 5000), Some(POff::new(slot)))
                .unwrap();
        }
    }
}

/// Kills a child in the middle of PMDK publishes (kill -9, several times
/// on the same pool) and checks after each that the allocated blocks are
/// exactly the linked ones: PMDK's redo log makes every publish of the
/// PAllocator all or nothing under a process crash. (The pool is on
/// tmpfs, so this is a process crash, not a power failure: every store
/// made before the kill survives.)
#[test]
fn kill_9_leaves_no_leak() {
    let dir = ShmDir::new("kill");
    {
        let a = alloc_on(&dir.file());
        a.thread().unwrap().root(8 * KILL_SLOTS as usize).unwrap();
    }
    let exe = std::env::current_exe().unwrap();
    for round in 0..4u64 {
        let mut child = spawn_clean(
            std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "kill_child_alloc",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, dir.file())
                .stdout(std::process::Stdio::piped()),
        );
        // Wait until the child has the pool open (so a child that cannot
        // open it fails the test instead of passing for lack of work).
        // (The test harness prints its own lines first, and "test NAME
        // ... " without a newline before the test's own output.)
        let out = std::io::BufReader::new(child.0.stdout.take().unwrap());
        let started = std::io::BufRead::lines(out)
            .map_while(Result::ok)
            .any(|l| l.ends_with("started"));
        assert!(started, "round {round}: the child did not start");
        std::thread::sleep(std::time::Duration::from_millis(150 + 70 * round));
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "the child stopped on its own (an error in it?)"
        );
        child.kill();

        let a = reopen(&dir.file());
        let root = a.root().raw();
        let region = a.region().unwrap();
        let mut linked: Vec<u64> = (0..KILL_SLOTS)
            .map(|i| region.load_u64((root + 8 * i) as usize))
            .filter(|&w| w != 0)
            .collect();
        linked.sort();
        let n = linked.len();
        linked.dedup();
        assert_eq!(linked.len(), n, "a block linked twice");
        assert_eq!(
            allocated(&a).keys().copied().collect::<Vec<_>>(),
            linked,
            "round {round}: allocated != linked after kill -9"
        );
        eprintln!("round {round}: {n} blocks linked and allocated");
    }
}

/// Environment variable with the engine a `kill_child_engine` child runs.
const CHILD_ENGINE_ENV: &str = "FERRITE_PMDK_KILL_ENGINE";

/// Keys the engine kill test cycles through.
const KILL_KEYS: u64 = 300;

/// Value of operation `j`: names `j`, sized 0..3000 bytes by `j`.
fn kill_value(j: u64) -> Vec<u8> {
    let mut v = j.to_le_bytes().to_vec();
    v.resize(8 + (j as usize * 97) % 3000, (j % 251) as u8);
    v
}

/// Child of [`kill_9_engine_on_pmdk`]: operation `j` puts `kill_value(j)`
/// at key `j % KILL_KEYS` (every 7th as a batch with a put of the next
/// key); prints `j` once acknowledged; until killed.
#[test]
fn kill_child_engine() {
    let (Some(path), Some(kind)) = (
        std::env::var_os(CHILD_ENV),
        std::env::var(CHILD_ENGINE_ENV).ok(),
    ) else {
        return;
    };
    let kind = EngineKind::parse(&kind).unwrap();
    let s = open_store(Path::new(&path), &StoreOptions::new(kind)).unwrap();
    let mut ss = s.session().unwrap();
    let start = s
        .walk()
        .unwrap()
        .entries
        .iter()
        .map(|(_, v)| u64::from_le_bytes(v[..8].try_into().unwrap()))
        .max()
        .map_or(0, |m| m + 1);
    use std::io::Write;
    let mut out = std::io::stdout();
    let mut j = start;
    loop {
        if j % 7 == 6 {
            let (k1, k2) = (
                key((j % KILL_KEYS) as u32),
                key(((j + 1) % KILL_KEYS) as u32),
            );
            let (v1, v2) = (kill_value(j), kill_value(j + 1));
            ss.batch(&[
                Op::Put {
                    key: &k1,
                    value: &v1,
                },
                Op::Put {
                    key: &k2,
                    value: &v2,
                },
            ])
            .unwrap();
            j += 2;
        } else {
            ss.put(&key((j % KILL_KEYS) as u32), &kill_value(j))
                .unwrap();
            j += 1;
        }
        writeln!(out, "acked {}", j - 1).unwrap();
    }
}

/// Kills a child writing to an engine on PMDK's allocator, then reopens
/// the store: its contents are those after some prefix of the operations
/// (no later than the last acknowledged one + the one in flight, a batch
/// wholly), and walk().blocks equals PMDK's allocated set (no leak).
#[test]
fn kill_9_engine_on_pmdk() {
    use std::io::{BufRead, BufReader};
    for kind in EngineKind::ALL {
        let dir = ShmDir::new(&format!("kill-{}", kind.name()));
        let opts = StoreOptions::new(kind);
        let Some(s) = engine_or_skip(pmdk_store(&dir.file(), 64 << 20, &opts), kind) else {
            continue;
        };
        s.close().unwrap();
        let exe = std::env::current_exe().unwrap();
        for round in 0..3u64 {
            let mut child = spawn_clean(
                std::process::Command::new(&exe)
                    .args([
                        "--exact",
                        "kill_child_engine",
                        "--nocapture",
                        "--test-threads=1",
                    ])
                    .env(CHILD_ENV, dir.file())
                    .env(CHILD_ENGINE_ENV, kind.name())
                    .stdout(std::process::Stdio::piped()),
            );
            let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
            let mut acked = None;
            let note = |acked: &mut Option<u64>, l: &str| {
                // The first may follow the harness's "test NAME ... ".
                if let Some(j) = l.split("acked ").nth(1) {
                    *acked = Some(j.parse::<u64>().unwrap());
                }
            };
            // Let it run past a few hundred operations, then for a few
            // more milliseconds (still acknowledging into the pipe), and
            // kill it wherever it is; the pipe keeps the acknowledgements
            // written before the kill.
            let stop = 200 + 150 * round;
            for l in lines.by_ref() {
                let l = l.unwrap();
                note(&mut acked, &l);
                if acked.is_some_and(|j| j >= stop) {
                    break;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(3 + 11 * round));
            child.kill();
            for l in lines.map_while(Result::ok) {
                note(&mut acked, &l);
            }
            let acked = acked.expect("the child acknowledged something");

            let s = open_store(&dir.file(), &opts).unwrap();
            s.quiesce().unwrap();
            let w = s.walk().unwrap();
            let m = w
                .entries
                .iter()
                .map(|(_, v)| u64::from_le_bytes(v[..8].try_into().unwrap()))
                .max()
                .unwrap();
            assert!(
                m >= acked,
                "{kind} round {round}: op {acked} was acknowledged, store ends at {m}"
            );
            assert!(
                m <= acked + 3,
                "{kind}: store has op {m}, beyond the one in flight after {acked}"
            );
            // A prefix 0..=m: every key holds its latest op <= m. (A batch
            // ending at m+1 is fine only wholly: m is its first op's, then
            // the store would hold m+1 too; so the prefix is exact.)
            for (k, v) in &w.entries {
                let j = u64::from_le_bytes(v[..8].try_into().unwrap());
                assert_eq!(v, &kill_value(j), "{kind}: value of op {j} damaged");
                let ki = std::str::from_utf8(&k[3..])
                    .unwrap()
                    .parse::<u64>()
                    .unwrap();
                let latest = m - (m + KILL_KEYS - ki) % KILL_KEYS;
                assert_eq!(
                    j, latest,
                    "{kind}: key {ki} holds op {j}, not its latest op {latest} <= {m}"
                );
            }
            assert_eq!(w.entries.len() as u64, KILL_KEYS.min(m + 1));
            let mut blocks: Vec<u64> = w.blocks.iter().map(|b| b.0).collect();
            blocks.sort();
            let mut alloc = Vec::new();
            s.alloc()
                .for_each_allocated(&mut |off, _| alloc.push(off.raw()));
            alloc.sort();
            assert_eq!(
                blocks, alloc,
                "{kind} round {round}: walk().blocks != PMDK's allocated set"
            );
            eprintln!(
                "{kind} round {round}: acked {acked}, store at op {m}, {} blocks",
                alloc.len()
            );
            s.close().unwrap();
        }
    }
}

/// Rough single-thread throughput of a 50/50 read/update mix of 1000-byte
/// values on each engine over the three allocators (not a benchmark: the
/// suites measure properly). `cargo test --release -p ferrite-bench
/// --features pmdk --test pmdk_alloc -- --ignored --nocapture`, with
/// `PMEM_IS_PMEM_FORCE=1` for PMDK's flush path.
#[test]
#[ignore]
fn rough_throughput_50_50() {
    const KEYS: u32 = 10_000;
    const OPS: u32 = 100_000;
    fn run(ss: &mut dyn ferrite_engine::Session) -> f64 {
        let v = vec![5u8; 1000];
        for i in 0..KEYS {
            ss.put(&key(i), &v).unwrap();
        }
        let mut out = Vec::new();
        let mut x = 88172645463325252u64;
        let t = std::time::Instant::now();
        for _ in 0..OPS {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = key((x % u64::from(KEYS)) as u32);
            if x & (1 << 40) == 0 {
                assert!(ss.get_into(&k, &mut out).unwrap());
            } else {
                ss.put(&k, &v).unwrap();
            }
        }
        f64::from(OPS) / t.elapsed().as_secs_f64() / 1e6
    }
    for kind in EngineKind::ALL {
        let opts = StoreOptions::new(kind).sessions(1);
        let dir = ShmDir::new(&format!("tput-{}", kind.name()));
        let Some(s) = engine_or_skip(pmdk_store(&dir.file(), 256 << 20, &opts), kind) else {
            continue;
        };
        let pmdk = run(&mut s.session().unwrap());
        let mut line = format!("{kind}: pmdk {pmdk:.3} Mops/s");
        for a in ferrite_engine::AllocKind::ALL {
            let pool = ferrite_pmem::Pool::create_in_memory(
                &ferrite_pmem::PoolOptions::new(ferrite_engine::LAYOUT, 256 << 20)
                    .domain(ferrite_pmem::Domain::Adr),
            )
            .unwrap();
            let fs = ferrite_engine::Store::create(&pool, &opts.clone().allocator(a)).unwrap();
            let m = run(&mut fs.session().unwrap());
            line += &format!(", {a} {m:.3} Mops/s");
        }
        eprintln!("{line}");
    }
}

#[test]
fn opening_what_is_not_a_store_is_a_typed_error() {
    let dir = ShmDir::new("notastore");
    let opts = StoreOptions::new(EngineKind::Lsm);
    // A PMDK pool of our layout without a root object.
    drop(PmemObj::create(&dir.file(), PMDK_LAYOUT, POOL).unwrap());
    assert!(matches!(
        open_store(&dir.file(), &opts),
        Err(PmdkStoreError::NoStore(_))
    ));
    // An existing file is not overwritten.
    assert!(matches!(
        pmdk_store(&dir.file(), 64 << 20, &opts),
        Err(PmdkStoreError::Pmdk(_))
    ));
    // A pool of another layout.
    let other = dir.0.join("other");
    drop(PmemObj::create(&other, "something-else", POOL).unwrap());
    assert!(matches!(
        open_store(&other, &opts),
        Err(PmdkStoreError::Pmdk(_))
    ));
    // A root object without a superblock, then a damaged superblock.
    let rooted = dir.0.join("rooted");
    {
        let a = alloc_on(&rooted);
        a.thread().unwrap().root(8192).unwrap();
    }
    assert!(matches!(
        open_store(&rooted, &opts),
        Err(PmdkStoreError::Engine(EngineError::NotAStore))
    ));
    let store_path = dir.0.join("store");
    let Some(s) = engine_or_skip(pmdk_store(&store_path, 64 << 20, &opts), EngineKind::Lsm) else {
        return;
    };
    let sb = s.alloc().root().raw().next_multiple_of(64) as usize;
    drop(s);
    {
        let a = reopen(&store_path);
        let r = a.region().unwrap();
        let mut b = [0u8; 1];
        r.read(sb + 20, &mut b);
        r.write(sb + 20, &[b[0] ^ 1]);
        r.persist(sb + 20, 1);
    }
    assert!(matches!(
        open_store(&store_path, &opts),
        Err(PmdkStoreError::Engine(EngineError::Checksum { .. }))
    ));
}

#[test]
fn engines_on_pmdk_with_threads() {
    for kind in EngineKind::ALL {
        let dir = ShmDir::new(&format!("mt-{}", kind.name()));
        let opts = StoreOptions::new(kind).sessions(4);
        let Some(s) = engine_or_skip(pmdk_store(&dir.file(), 128 << 20, &opts), kind) else {
            continue;
        };
        std::thread::scope(|sc| {
            for th in 0..3u32 {
                let s = &s;
                sc.spawn(move || {
                    let mut ss = s.session().unwrap();
                    for i in 0..300u32 {
                        let k = key(th * 10_000 + i % 100);
                        if i % 4 == 3 {
                            ss.delete(&k).unwrap();
                        } else {
                            ss.put(&k, &value(i, th)).unwrap();
                        }
                    }
                });
            }
        });
        // Each thread's keys: the last op on key i%100 among i in 0..300.
        let mut model = BTreeMap::new();
        for th in 0..3u32 {
            for i in 0..300u32 {
                let k = key(th * 10_000 + i % 100);
                if i % 4 == 3 {
                    model.remove(&k);
                } else {
                    model.insert(k, value(i, th));
                }
            }
        }
        check_walk(&s, &model);
        drop(s);
        let s = open_store(&dir.file(), &opts).unwrap();
        check_walk(&s, &model);
    }
}
