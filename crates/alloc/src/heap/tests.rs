//! Unit tests of the Ferrite heap (crash behaviour is in `crate::checks`).

use super::*;
use crate::{Link, Loc, Publish, Reservation};
use ferrite_pmem::{Counters, Domain, Pool, PoolOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

fn pool(size: u64) -> Pool {
    Pool::create_in_memory(&PoolOptions::new("heap-test", size).domain(Domain::Adr)).unwrap()
}

/// A heap after an 8 KiB table of link slots at the start of the data area.
fn heap_region(p: &Pool) -> Region {
    let d = p.data();
    d.sub(8192, d.len() - 8192).unwrap()
}

fn slot(p: &Pool, i: usize) -> POff<u64> {
    POff::new((p.data().base() + 8 * i) as u64)
}

fn opts() -> HeapOptions {
    HeapOptions::default().lanes(4).lane_bytes(2048).nonce(7)
}

fn allocated(h: &Heap) -> BTreeMap<u64, usize> {
    let mut m = BTreeMap::new();
    h.for_each_allocated(&mut |o, s| {
        m.insert(o.raw(), s);
    });
    m
}

#[test]
fn alloc_publish_free_and_reopen() {
    let p = pool(1 << 20);
    let h = Heap::create(heap_region(&p), opts()).unwrap();
    let mut t = h.attach().unwrap();
    let a = t.alloc(100, Some(slot(&p, 0))).unwrap();
    let b = t.alloc(5000, Some(slot(&p, 1))).unwrap();
    let c = t.alloc(40_000, Some(slot(&p, 2))).unwrap();
    assert_eq!(p.data().load_u64(0), a.raw());
    assert_eq!(h.usable_size(a).unwrap(), 112);
    assert_eq!(h.usable_size(b).unwrap(), 5120);
    assert_eq!(h.usable_size(c).unwrap(), 40_960);
    assert!(
        c.raw().is_multiple_of(PAGE as u64),
        "extents are page aligned"
    );
    t.free(b, Some(slot(&p, 1))).unwrap();
    assert_eq!(p.data().load_u64(8), 0);
    let before = allocated(&h);
    assert_eq!(before.len(), 2);
    let s = h.stats();
    assert_eq!(s.in_use, 112 + 40_960);
    assert_eq!(s.blocks, 2);
    drop(t);
    drop(h);
    let h = Heap::open(heap_region(&p)).unwrap();
    assert_eq!(allocated(&h), before);
    assert_eq!(h.stats().in_use, 112 + 40_960);
    assert_eq!(h.recovery().replayed, 0);
    assert_eq!(
        h.recovery().runs,
        2,
        "the 112 and 5120 runs (the latter empty)"
    );
    assert_eq!(h.recovery().extents, 1);
}

#[test]
fn misuse_is_a_typed_error() {
    let p = pool(1 << 20);
    let h = Heap::create(heap_region(&p), opts()).unwrap();
    let mut t = h.attach().unwrap();
    let mut u = h.attach().unwrap();
    assert!(matches!(t.reserve(0), Err(AllocError::ZeroSize)));
    assert!(matches!(
        t.reserve(1 << 30),
        Err(AllocError::TooLarge { .. })
    ));
    let a = t.alloc(64, None).unwrap();
    t.free(a, None).unwrap();
    assert!(matches!(
        t.free(a, None),
        Err(AllocError::NotAllocated { .. })
    ));
    let b = t.alloc(64, None).unwrap();
    assert!(matches!(
        t.publish(&Publish {
            frees: &[b, b],
            ..Publish::default()
        }),
        Err(AllocError::DoubleFree { .. })
    ));
    assert_eq!(
        h.usable_size(b).unwrap(),
        64,
        "a failed publish claims nothing"
    );
    assert!(matches!(
        t.free(POff::new(b.raw() + 16), None),
        Err(AllocError::NotAllocated { .. })
    ));
    // A reservation of another handle, or published twice.
    let r = u.reserve(64).unwrap();
    let allocs = [r];
    assert!(matches!(
        t.publish(&Publish {
            allocs: &allocs,
            ..Publish::default()
        }),
        Err(AllocError::Foreign { .. })
    ));
    u.publish(&Publish {
        allocs: &allocs,
        ..Publish::default()
    })
    .unwrap();
    assert!(matches!(
        u.publish(&Publish {
            allocs: &allocs,
            ..Publish::default()
        }),
        Err(AllocError::StaleReservation { .. })
    ));
    // Links into the heap's metadata or the pool header are refused, and
    // nothing is published.
    for bad in [
        8u64,
        h.region().base() as u64 + 64 * 5,
        h.head_word(0),
        4097,
    ] {
        let allocs = [t.reserve(64).unwrap()];
        let res = t.publish(&Publish {
            allocs: &allocs,
            links: &[Link {
                at: POff::new(bad),
                value: 1,
            }],
            ..Publish::default()
        });
        assert!(matches!(res, Err(AllocError::BadLink { .. })), "{bad:#x}");
        let [r] = allocs;
        t.cancel(r).unwrap();
    }
    // Another heap's reservation.
    let p2 = pool(1 << 20);
    let h2 = Heap::create(heap_region(&p2), opts()).unwrap();
    let mut t2 = h2.attach().unwrap();
    let r2 = t2.reserve(64).unwrap();
    assert!(matches!(
        t.cancel(r2),
        Err(AllocError::Foreign { what: "heap" })
    ));
}

#[test]
fn lanes_run_out_and_come_back() {
    let p = pool(1 << 20);
    let h = Heap::create(heap_region(&p), opts()).unwrap();
    let ts: Vec<_> = (0..4).map(|_| h.attach().unwrap()).collect();
    assert!(matches!(h.attach(), Err(AllocError::NoLane { lanes: 4 })));
    drop(ts);
    assert!(h.attach().is_ok());
}

#[test]
fn fences_per_publish() {
    let p = pool(4 << 20);
    let h = Heap::create(heap_region(&p), opts()).unwrap();
    let mut t = h.attach().unwrap();
    t.alloc(64, None).unwrap(); // creates the run (1 fence) outside the measurement
    let count = |f: &mut dyn FnMut()| {
        let c0 = Counters::snapshot();
        f();
        (Counters::snapshot() - c0).fences
    };
    assert_eq!(
        count(&mut || {
            t.alloc(64, None).unwrap();
        }),
        1,
        "no link"
    );
    let mut last = POff::NULL;
    assert_eq!(
        count(&mut || last = t.alloc(64, Some(slot(&p, 0))).unwrap()),
        2,
        "standalone with link"
    );
    assert_eq!(count(&mut || t.free(last, Some(slot(&p, 0))).unwrap()), 2);
    let rs: Vec<Reservation> = (0..8).map(|_| t.reserve(64).unwrap()).collect();
    let links: Vec<Link> = rs
        .iter()
        .enumerate()
        .map(|(i, r)| Link::to(slot(&p, i), r))
        .collect();
    assert_eq!(
        count(&mut || t
            .publish(&Publish {
                allocs: &rs,
                links: &links,
                ..Publish::default()
            })
            .unwrap()),
        2,
        "a batch of 8 with links"
    );
    // The batch left this lane's marker pending. A one-word publish
    // completes it with a fence of its own before its store; the next
    // finds none pending.
    assert_eq!(
        count(&mut || {
            t.alloc(64, None).unwrap();
        }),
        2,
        "one word after a multi-word publish"
    );
    assert_eq!(
        count(&mut || {
            t.alloc(64, None).unwrap();
        }),
        1,
        "one word, no marker pending"
    );
    // Prepared for a transaction: none.
    let r = t.reserve(64).unwrap();
    let allocs = [r];
    let pb = Publish {
        allocs: &allocs,
        ..Publish::default()
    };
    let mut ops = Vec::new();
    assert_eq!(count(&mut || t.prepare(&pb, &mut ops).unwrap()), 0);
    for op in &ops {
        op.apply(&Region::whole(p.medium().clone()));
    }
    t.commit_prepared(&pb);
    assert_eq!(h.usable_size(allocs[0].off()).unwrap(), 64);
}

#[test]
fn consecutive_allocations_flush_distinct_bitmap_lines() {
    let p = pool(4 << 20);
    let h = Heap::create(heap_region(&p), opts()).unwrap();
    let mut t = h.attach().unwrap();
    let mut prev_line = u64::MAX;
    for _ in 0..200 {
        let r = t.reserve(64).unwrap();
        let Loc::Block { page, row, .. } = r.loc else {
            panic!("small block")
        };
        let line = h.share_word(page, row) / 64;
        assert_ne!(
            line, prev_line,
            "two allocations in a row set bits on one line"
        );
        prev_line = line;
        let allocs = [r];
        t.publish(&Publish {
            allocs: &allocs,
            ..Publish::default()
        })
        .unwrap();
    }
}

#[test]
fn random_workload_survives_reopen_with_exact_state() {
    let p = pool(8 << 20);
    let h = Heap::create(heap_region(&p), opts()).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut live: Vec<(POff<u8>, usize)> = Vec::new();
    {
        let mut t = h.attach().unwrap();
        for _ in 0..5000 {
            if live.len() > 300 || (rng.random_bool(0.4) && !live.is_empty()) {
                let i = rng.random_range(0..live.len());
                let (off, _) = live.swap_remove(i);
                t.free(off, None).unwrap();
            } else {
                let size = match rng.random_range(0..10) {
                    0 => rng.random_range(16_385..70_000),
                    1..=3 => rng.random_range(1..4097),
                    _ => rng.random_range(1..300),
                };
                let off = t.alloc(size, None).unwrap();
                assert!(h.usable_size(off).unwrap() >= size);
                live.push((off, size));
            }
        }
    }
    // No two live blocks overlap.
    let all = allocated(&h);
    assert_eq!(all.len(), live.len());
    let mut end = 0;
    for (&o, &s) in &all {
        assert!(o >= end, "overlap at {o:#x}");
        end = o + s as u64;
    }
    let stats = h.stats();
    assert_eq!(stats.in_use, all.values().map(|&s| s as u64).sum::<u64>());
    assert_eq!(stats.in_use + stats.free, stats.capacity);
    drop(h);
    let h = Heap::open(heap_region(&p)).unwrap();
    assert_eq!(allocated(&h), all);
    assert_eq!(h.stats().in_use, stats.in_use);
    assert_eq!(h.stats().claimed, stats.claimed);
    // The reopened heap goes on working, including frees of old blocks.
    let mut t = h.attach().unwrap();
    for (off, _) in live {
        t.free(off, None).unwrap();
    }
    assert_eq!(h.stats().in_use, 0);
    assert_eq!(h.stats().blocks, 0);
}

#[test]
fn out_of_space_then_retired_runs_serve_other_sizes() {
    let p = pool(512 * 1024);
    let h = Heap::create(heap_region(&p), opts()).unwrap();
    let mut t = h.attach().unwrap();
    let mut v = Vec::new();
    loop {
        match t.alloc(64, None) {
            Ok(o) => v.push(o),
            Err(AllocError::OutOfSpace { .. }) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(v.len() > 5000);
    assert!(matches!(
        t.alloc(100_000, None),
        Err(AllocError::OutOfSpace { .. })
    ));
    for o in v {
        t.free(o, None).unwrap();
    }
    drop(t);
    let mut t = h.attach().unwrap();
    // Every 64-byte run is empty now; an extent needs their pages.
    let big = t.alloc(100_000, None).unwrap();
    assert_eq!(h.usable_size(big).unwrap(), 102_400);
}

#[test]
fn threads_allocate_and_free_each_others_blocks() {
    let p = pool(32 << 20);
    let h = Heap::create(heap_region(&p), HeapOptions::default().lanes(4)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<POff<u8>>();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut t = h.attach().unwrap();
            let mut rng = ChaCha8Rng::seed_from_u64(1);
            for _ in 0..20_000 {
                let size = rng.random_range(1..2048);
                tx.send(t.alloc(size, None).unwrap()).unwrap();
            }
            drop(tx);
        });
        s.spawn(|| {
            let mut t = h.attach().unwrap();
            let mut mine = Vec::new();
            for off in rx {
                t.free(off, None).unwrap();
                mine.push(t.alloc(48, None).unwrap());
                if mine.len() > 100 {
                    t.free(mine.swap_remove(0), None).unwrap();
                }
            }
            for o in mine {
                t.free(o, None).unwrap();
            }
        });
    });
    assert_eq!(h.stats().in_use, 0);
    assert!(allocated(&h).is_empty());
    drop(h);
    assert_eq!(Heap::open(heap_region(&p)).unwrap().stats().in_use, 0);
}

#[test]
fn root_object_is_created_once_and_zeroed() {
    let p = pool(1 << 20);
    let h = Heap::create(heap_region(&p), opts()).unwrap();
    assert!(h.root().is_null());
    let mut t = h.attach().unwrap();
    let r = t.root(256).unwrap();
    assert_eq!(t.root(100).unwrap(), r);
    assert!(matches!(t.root(1000), Err(AllocError::BadOption(_))));
    assert!(
        p.data()
            .read_vec(r.raw() as usize - p.data().base(), 256)
            .iter()
            .all(|&b| b == 0)
    );
    drop(t);
    drop(h);
    assert_eq!(Heap::open(heap_region(&p)).unwrap().root(), r);
}

// ---- bad input ----------------------------------------------------------------------

/// A heap with some allocations, closed; returns the pool.
fn used_heap() -> Pool {
    let p = pool(1 << 20);
    let h = Heap::create(heap_region(&p), opts()).unwrap();
    let mut t = h.attach().unwrap();
    for i in 0..50 {
        t.alloc(10 + i * 37, None).unwrap();
    }
    t.alloc(50_000, None).unwrap();
    drop(t);
    drop(h);
    p
}

fn corrupt(p: &Pool, region_off: usize, xor: u8) {
    let r = heap_region(p);
    let mut b = [0u8; 1];
    r.read(region_off, &mut b);
    r.write(region_off, &[b[0] ^ xor]);
}

#[test]
fn corrupted_metadata_is_reported_on_open() {
    let geo = Geometry::compute(heap_region(&pool(1 << 20)).len(), 4, 2048, false).unwrap();
    let cases: Vec<(usize, u8, &str)> = vec![
        (0, 1, "magic"),
        (9, 1, "version"),
        (20, 1, "superblock checksum"),
        (geo.desc(0) + 1, 4, "run header checksum"),
        (geo.desc(0) + 5, 0x80, "run header checksum (crc bits)"),
        (geo.desc(1), 1, "header inside a run"),
        (
            geo.desc(geo.pages as u32 - 1) + 9,
            1,
            "stray bit on a free page",
        ),
        (geo.desc(0) + 48, 1, "reserved descriptor bytes"),
    ];
    for (off, xor, what) in cases {
        let p = used_heap();
        assert!(Heap::open(heap_region(&p)).is_ok(), "{what}: intact heap");
        corrupt(&p, off, xor);
        let e = Heap::open(heap_region(&p)).expect_err(what);
        assert!(
            matches!(
                e,
                AllocError::NotAHeap { .. }
                    | AllocError::UnsupportedVersion { .. }
                    | AllocError::Checksum { .. }
                    | AllocError::Corrupt(_)
            ),
            "{what}: {e}"
        );
    }
}

#[test]
fn bits_past_the_last_block_and_extent_overlaps_are_reported() {
    // Class 144: 113 blocks over 4 pages; share 3 has rows 0..28 (blocks
    // 3, 7, …, 111); setting row 28 there names block 115, which does not exist.
    let p = pool(1 << 20);
    let h = Heap::create(heap_region(&p), opts()).unwrap();
    let mut t = h.attach().unwrap();
    let a = t.alloc(144, None).unwrap();
    let Found::Block { start, .. } = h.locate(a.raw()).unwrap() else {
        panic!()
    };
    let geo = h.geo;
    drop(t);
    drop(h);
    let r = heap_region(&p);
    let w = geo.desc(start + 3) + SHARE_OFF;
    r.store_u64(w, r.load_u64(w) | (1 << 28));
    assert!(matches!(
        Heap::open(heap_region(&p)),
        Err(AllocError::Corrupt(m)) if m.contains("past the last block")
    ));
}

#[test]
fn not_a_heap_and_wrong_region() {
    let p = pool(1 << 20);
    assert!(matches!(
        Heap::open(heap_region(&p)),
        Err(AllocError::NotAHeap { .. })
    ));
    let _h = Heap::create(heap_region(&p), opts()).unwrap();
    let d = p.data();
    assert!(matches!(
        Heap::open(d.sub(8192, d.len() - 8192 - 4096).unwrap()),
        Err(AllocError::Corrupt(_))
    ));
    assert!(matches!(
        Heap::open(d.sub(8192 + 64, 65536).unwrap()),
        Err(AllocError::Misaligned { .. })
    ));
}

#[test]
fn a_committed_unapplied_record_is_replayed() {
    // Write a record by hand as a crashed publish would leave it: committed
    // (durable record) but not applied.
    let p = pool(1 << 20);
    let h = Heap::create(heap_region(&p), opts()).unwrap();
    let mut t = h.attach().unwrap();
    let keep = t.alloc(64, None).unwrap();
    let r = t.reserve(64).unwrap();
    let Loc::Block { page, row, .. } = r.loc else {
        panic!()
    };
    let ops = [
        MetaOp::or(h.share_word(page, row), 1 << (row % 64)),
        MetaOp::set(slot(&p, 3).raw(), r.off),
    ];
    let lane = h.lane(t.lane());
    let mut buf = Vec::new();
    lane.commit(&h.region, h.nonce, &t.cur, &ops, &mut buf);
    let off = r.off();
    std::mem::forget(t);
    drop(h);
    let h = Heap::open(heap_region(&p)).unwrap();
    assert_eq!(h.recovery().replayed, 1);
    assert_eq!(h.recovery().marked, 1);
    assert_eq!(p.data().load_u64(24), off.raw());
    assert_eq!(h.usable_size(off).unwrap(), 64);
    assert_eq!(h.usable_size(keep).unwrap(), 64);
    drop(h);
    let h = Heap::open(heap_region(&p)).unwrap();
    assert_eq!(h.recovery().replayed, 0, "marked: not replayed again");
    assert_eq!(h.recovery().marked, 0);
}

#[test]
fn a_publish_completes_the_pending_markers_of_other_lanes() {
    let p = pool(4 << 20);
    let h = Heap::create(heap_region(&p), opts()).unwrap();
    let mut a = h.attach().unwrap();
    let mut b = h.attach().unwrap();
    let pending = |lane: usize| h.markers[lane].0.load(Ordering::Acquire) != 0;
    let x = a.alloc(64, Some(slot(&p, 0))).unwrap();
    assert!(pending(a.lane()), "a's marker is written, not flushed");
    // b's free of a's block flushes a's marker before its record fence and
    // clears it after; b's own marker is then pending.
    b.free(x, Some(slot(&p, 0))).unwrap();
    assert!(!pending(a.lane()));
    assert!(pending(b.lane()));
    // a's next multi-word publish supersedes nothing of b's: b's marker is
    // completed by a's record fence as well.
    a.alloc(64, Some(slot(&p, 1))).unwrap();
    assert!(!pending(b.lane()) && pending(a.lane()));
    // Detaching completes the handle's own marker.
    let la = a.lane();
    drop(a);
    assert!(!pending(la));
    // A prepared publish flushes the pending markers, which the caller's
    // fence completes; they stay pending (the handle cannot see that
    // fence) until a standalone publish completes and clears them.
    b.alloc(64, Some(slot(&p, 2))).unwrap();
    let r = b.reserve(64).unwrap();
    let allocs = [r];
    let pb = Publish {
        allocs: &allocs,
        ..Publish::default()
    };
    let mut ops = Vec::new();
    b.prepare(&pb, &mut ops).unwrap();
    let pool_region = Region::whole(p.medium().clone());
    pool_region.fence();
    for op in &ops {
        op.apply(&pool_region);
    }
    pool_region.fence();
    b.commit_prepared(&pb);
    assert!(pending(b.lane()));
    b.alloc(64, None).unwrap();
    assert!(!pending(b.lane()));
}

/// A reserve, publish or free returns with no flush in flight, whichever
/// path it takes (one word or a record; its own pending marker or another
/// lane's; a new run or extent): the caller's next locked instruction (an
/// unlock, an atomic) would wait for such a flush's write-back as a fence
/// does, since a `clwb` is ordered before younger locked read-modify-writes
/// (see the tx crate's "Flushes and locked instructions"). Only `prepare`
/// leaves flushes, its pending markers', for the caller's commit fence.
/// The planted [`Fault::UnfencedMarkers`], which flushes a publish's marker
/// after its last fence, is caught.
#[test]
fn operations_return_with_no_flush_in_flight() {
    for fault in [Fault::None, Fault::UnfencedMarkers] {
        let p = pool(1 << 20);
        drop(Heap::create(heap_region(&p), opts()).unwrap());
        let img = p.image();
        let (q, obs) =
            ferrite_crash::InFlight::open(&img, &PoolOptions::new("heap-test", img.len() as u64))
                .unwrap();
        let h = Heap::open_with_fault(heap_region(&q), fault).unwrap();
        let (mut t, mut u) = (h.attach().unwrap(), h.attach().unwrap());
        let mut worst = 0;
        let mut after = |what: &str| {
            let n = obs.count();
            if fault == Fault::None {
                assert_eq!(n, 0, "flushes in flight after {what}");
            }
            worst = worst.max(n);
        };
        let a = t.alloc(100, Some(slot(&q, 0))).unwrap();
        after("a linked small alloc (a record, a new run)");
        let b = t.alloc(100, None).unwrap();
        after("an unlinked alloc (one word, own marker pending)");
        let c = u.alloc(40_000, Some(slot(&q, 1))).unwrap();
        after("a linked extent (a record, another lane's marker pending)");
        let r = t.reserve(200).unwrap();
        after("a reserve");
        t.cancel(r).unwrap();
        after("a cancel");
        t.free(a, Some(slot(&q, 0))).unwrap();
        after("a linked free");
        u.free(b, None).unwrap();
        after("an unlinked free (one word, another lane's marker pending)");
        t.free(c, None).unwrap();
        after("an extent free");
        assert_eq!(worst > 0, fault == Fault::UnfencedMarkers, "{fault:?}");
    }
}

/// A heap on a growable medium starts with a few pages, grows through
/// zones as it fills — small blocks, 1 MiB extents, then one too large
/// for the first zones — and reopens with every block where it was.
#[test]
fn a_heap_grows_through_zones_and_reopens() {
    let p = Pool::create_in_memory(
        &PoolOptions::new("heap-test", 1 << 20)
            .max_size(1 << 30)
            .domain(Domain::Adr),
    )
    .unwrap();
    let region = p.data();
    let h = Heap::create(region.clone(), opts()).unwrap();
    let start = h.capacity();
    assert!(start < 1 << 20, "starts with what the pool holds: {start}");
    assert!(h.max_capacity() > 1000 << 20);
    let mut t = h.attach().unwrap();
    let mut live = BTreeMap::new();
    for i in 0..2000usize {
        let size = [16, 300, 2000][i % 3];
        let o = t.alloc(size, None).unwrap();
        live.insert(o.raw(), size);
    }
    for _ in 0..100 {
        let o = t.alloc(1 << 20, None).unwrap();
        live.insert(o.raw(), 1 << 20);
    }
    assert!(h.capacity() > 100 << 20, "grew to {}", h.capacity());
    // Larger than zones 0 and 1 (64 MiB each): lands in a later zone.
    let big = t.alloc(100 << 20, None).unwrap();
    live.insert(big.raw(), 100 << 20);
    let st = h.stats();
    assert_eq!(st.capacity + st.grow_room, h.max_capacity());
    drop(t);
    let grown = h.capacity();
    drop(h);
    let h = Heap::open(region).unwrap();
    assert_eq!(h.capacity(), grown, "the page count is durable");
    let found = allocated(&h);
    for (o, size) in &live {
        assert!(
            found.get(o).is_some_and(|&s| s >= *size),
            "block {o:#x} of {size} bytes lost"
        );
    }
    assert_eq!(found.len(), live.len());
}
