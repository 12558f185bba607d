use super::*;
use ferrite_pmem::{Counters, Domain, Pool, PoolOptions};

fn pool(domain: Domain, size: usize) -> Pool {
    Pool::create_in_memory(&PoolOptions::new("page-test", size as u64).domain(domain)).unwrap()
}

fn opts(page_size: usize, pages: u32) -> PageStoreOptions {
    PageStoreOptions::new(page_size, pages).lanes(2).nonce(42)
}

/// A pool holding a store with `o`, and the store.
fn store(o: &PageStoreOptions) -> (Pool, PageStore) {
    let len = o.region_len().unwrap();
    let p = pool(Domain::Adr, len + 8192);
    let s = PageStore::create(p.data().sub(0, len).unwrap(), o).unwrap();
    (p, s)
}

fn reopen(p: &Pool, o: &PageStoreOptions) -> PageStore {
    PageStore::open(p.data().sub(0, o.region_len().unwrap()).unwrap()).unwrap()
}

/// Page content: line `l` of version `v` of page `page`.
fn fill_lines(buf: &mut [u8], page: u32, v: u64, lines: impl IntoIterator<Item = usize>) {
    for l in lines {
        for (i, b) in buf[l * 64..(l + 1) * 64].iter_mut().enumerate() {
            *b = (page as u64 * 131 + v * 31 + l as u64 * 7 + i as u64) as u8 | 1;
        }
    }
}

fn read(s: &PageStore, page: u32) -> Vec<u8> {
    let mut v = vec![0u8; s.page_size()];
    s.read_page(page, &mut v).unwrap();
    v
}

#[test]
fn every_algorithm_round_trips_and_survives_reopening() {
    for page_size in [4096, 16384] {
        for alg in PageAlgorithm::ALL {
            let o = opts(page_size, 6).algorithm(alg);
            let (p, s) = store(&o);
            let lines = s.lines_per_page();
            assert_eq!(
                read(&s, 3),
                vec![0u8; page_size],
                "never written reads zeros"
            );
            let mut dram = vec![vec![0u8; page_size]; 6];
            for v in 1..=40u64 {
                let page = (v * 7 % 6) as u32;
                let dirty = match v % 4 {
                    0 => DirtyLines::from_lines([0]),
                    1 => DirtyLines::from_lines((0..lines).step_by(5)),
                    2 => DirtyLines::all(lines),
                    _ => DirtyLines::from_lines([lines - 1, 3, 4]),
                };
                fill_lines(&mut dram[page as usize], page, v, dirty.iter());
                let w = s.write_page(page, &dram[page as usize], &dirty).unwrap();
                assert_eq!(w.pvn, s.pvn(page).unwrap());
                for q in 0..6 {
                    assert_eq!(
                        read(&s, q),
                        dram[q as usize],
                        "{alg} page {q} after write {v}"
                    );
                }
            }
            s.audit().unwrap();
            let free = s.free_slots();
            drop(s);
            let s = reopen(&p, &o);
            s.audit().unwrap();
            assert_eq!(s.free_slots(), free);
            for q in 0..6 {
                assert_eq!(
                    read(&s, q),
                    dram[q as usize],
                    "{alg} page {q} after reopening"
                );
            }
        }
    }
}

#[test]
fn fences_and_lines_per_write_match_the_documentation() {
    let o = opts(16384, 4);
    let (_p, s) = store(&o);
    let page = vec![7u8; 16384];
    s.write_page_with(PageAlgorithm::Cow, 0, &page, &DirtyLines::all(256))
        .unwrap();
    let cost = |alg, k: usize| {
        let d = DirtyLines::from_lines((0..k).map(|i| i * 256 / k));
        let c0 = Counters::snapshot();
        s.write_page_with(alg, 0, &page, &d).unwrap();
        Counters::snapshot() - c0
    };
    let c = cost(PageAlgorithm::Cow, 1);
    assert_eq!(c.fences, 2);
    assert_eq!(c.nt_bytes, 16384);
    assert_eq!(c.lines_flushed, 1, "the header line");
    for k in [1, 16, 17, 256] {
        let c = cost(PageAlgorithm::MicroLog, k);
        assert_eq!(c.fences, 2, "k = {k}");
        let head = format::entry_data_off(k) as u64;
        // Entry and in-place lines non-temporal; the header line flushed.
        assert_eq!(c.nt_bytes, head + 2 * 64 * k as u64, "k = {k}");
        assert_eq!(c.lines_flushed, 1, "k = {k}");
    }
}

#[test]
fn hybrid_follows_the_crossover_and_first_writes_are_copy_on_write() {
    let o = opts(4096, 2).crossover(CrossoverSource::Fixed(Crossover {
        single: 10,
        multi: 20,
    }));
    let (_p, s) = store(&o);
    let page = vec![1u8; 4096];
    let w = |k: usize| {
        s.write_page(0, &page, &DirtyLines::from_lines(0..k))
            .unwrap()
            .algorithm
    };
    assert_eq!(w(3), PageAlgorithm::Cow, "no slot yet");
    assert_eq!(w(9), PageAlgorithm::MicroLog);
    assert_eq!(w(10), PageAlgorithm::Cow);
    s.set_crossover(Crossover {
        single: 11,
        multi: 20,
    });
    assert_eq!(w(10), PageAlgorithm::MicroLog);
    let before = s.pvn(0).unwrap();
    assert_eq!(w(0), PageAlgorithm::MicroLog);
    assert_eq!(s.pvn(0).unwrap(), before, "an empty mask writes nothing");
    assert_eq!(Crossover::default_for(16384).single, 24);
    assert_eq!(
        Crossover::default_for(4096),
        Crossover {
            single: 6,
            multi: 6
        }
    );
    assert_eq!(
        store(&opts(16384, 1)).1.crossover(),
        Crossover::default_for(16384)
    );
    let m = s
        .write_page_with(
            PageAlgorithm::MicroLog,
            1,
            &page,
            &DirtyLines::from_lines([0]),
        )
        .unwrap();
    assert_eq!(m.algorithm, PageAlgorithm::Cow, "page 1 has no slot yet");
}

#[test]
fn bad_input_gets_typed_errors() {
    let o = opts(4096, 2);
    let (p, s) = store(&o);
    let page = vec![0u8; 4096];
    let none = DirtyLines::none();
    assert!(matches!(
        s.write_page(2, &page, &none),
        Err(PageError::PageOutOfRange { page: 2, pages: 2 })
    ));
    assert!(matches!(
        s.write_page(0, &page[..100], &none),
        Err(PageError::BufferSize { got: 100, .. })
    ));
    assert!(matches!(
        s.write_page(0, &page, &DirtyLines::from_lines([64])),
        Err(PageError::DirtyOutOfRange {
            line: 64,
            lines: 64
        })
    ));
    assert!(matches!(
        s.write_page(0, &page, &DirtyLines::from_lines([5000])),
        Err(PageError::DirtyOutOfRange { line: 5000, .. })
    ));
    assert!(matches!(
        s.read_page(9, &mut vec![0u8; 4096]),
        Err(PageError::PageOutOfRange { .. })
    ));
    let len = o.region_len().unwrap();
    assert!(matches!(
        PageStore::create(p.data().sub(0, len - 64).unwrap(), &o),
        Err(PageError::RegionTooSmall { .. })
    ));
    assert!(matches!(
        PageStore::create(p.data().sub(8, len).unwrap(), &o),
        Err(PageError::Misaligned { .. })
    ));
    assert!(matches!(
        PageStore::create(p.data(), &opts(1000, 2)),
        Err(PageError::BadPageSize(1000))
    ));
    assert!(matches!(
        PageStore::create(p.data(), &opts(4096, 2).lanes(0)),
        Err(PageError::BadOption(_))
    ));
    drop(s);
    let other = pool(Domain::Adr, 64 * 1024);
    assert!(matches!(
        PageStore::open(other.data()),
        Err(PageError::NotAPageStore)
    ));
    // A damaged superblock.
    let r = p.data();
    let b = r.read_vec(12, 1)[0];
    r.write(12, &[b ^ 1]);
    assert!(matches!(
        PageStore::open(r.sub(0, len).unwrap()),
        Err(PageError::Checksum { .. })
    ));
    r.write(12, &[b]);
    assert!(matches!(
        PageStore::open(r.sub(0, len - 4096).unwrap()),
        Err(PageError::RegionTooSmall { .. })
    ));
    assert!(reopen(&p, &o).audit().is_ok());
    assert_eq!(
        "microlog".parse::<PageAlgorithm>().unwrap(),
        PageAlgorithm::MicroLog
    );
    assert!("paging".parse::<PageAlgorithm>().is_err());
}

#[test]
fn two_threads_writing_different_pages() {
    let o = opts(4096, 8).algorithm(PageAlgorithm::Hybrid);
    let (p, s) = store(&o);
    let finals: Vec<Vec<Vec<u8>>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..2u32)
            .map(|t| {
                let s = &s;
                sc.spawn(move || {
                    let mut dram = vec![vec![0u8; 4096]; 4];
                    for v in 1..=300u64 {
                        let i = (v % 4) as usize;
                        let page = t + 2 * i as u32;
                        let dirty = if v % 3 == 0 {
                            DirtyLines::all(64)
                        } else {
                            DirtyLines::from_lines([(v % 64) as usize, 63])
                        };
                        fill_lines(&mut dram[i], page, v, dirty.iter());
                        s.write_page(page, &dram[i], &dirty).unwrap();
                    }
                    dram
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    s.audit().unwrap();
    drop(s);
    let s = reopen(&p, &o);
    s.audit().unwrap();
    for (t, pages) in finals.iter().enumerate() {
        for (i, want) in pages.iter().enumerate() {
            assert_eq!(read(&s, (t + 2 * i) as u32), *want);
        }
    }
}

#[test]
fn reads_are_consistent_while_another_thread_writes() {
    // A reader never sees a page half old, half new.
    let o = opts(4096, 1).algorithm(PageAlgorithm::MicroLog);
    let (_p, s) = store(&o);
    s.write_page(0, &vec![0u8; 4096], &DirtyLines::all(64))
        .unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            for v in 1..=2000u32 {
                let page = vec![(v % 251) as u8; 4096];
                s.write_page(0, &page, &DirtyLines::all(64)).unwrap();
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let mut buf = vec![0u8; 4096];
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            s.read_page(0, &mut buf).unwrap();
            assert!(buf.iter().all(|&b| b == buf[0]), "mixed page read");
        }
    });
}

#[test]
fn calibration_measures_a_crossover_and_records_it() {
    let o = opts(16384, 4).crossover(CrossoverSource::Calibrate);
    let (p, s) = store(&o);
    let cal = s.calibration().expect("calibrated").clone();
    assert_eq!(cal.crossover, s.crossover());
    assert!((1..=257).contains(&cal.crossover.single), "{cal:?}");
    assert!((1..=257).contains(&cal.crossover.multi), "{cal:?}");
    assert!(cal.cow_ns[0] > 0.0 && cal.microlog_ns.len() == 9, "{cal:?}");
    // Nothing the measurement wrote survives in the store.
    assert_eq!(s.free_slots(), s.slots() as usize);
    drop(s);
    let s = reopen(&p, &o);
    assert_eq!(s.crossover(), cal.crossover, "kept in the superblock");
    assert_eq!(s.recovery_stats(), RecoveryStats::default());
    for q in 0..4 {
        assert_eq!(read(&s, q), vec![0u8; 16384]);
    }
}

#[test]
fn recovery_replays_an_interrupted_micro_log_write() {
    // Stop a micro-log write after its entry is durable, tear the in-place
    // step by hand, and reopen: recovery completes it.
    let o = opts(4096, 2).algorithm(PageAlgorithm::MicroLog);
    let (p, s) = store(&o);
    let mut page = vec![0u8; 4096];
    fill_lines(&mut page, 0, 1, 0..64);
    s.write_page(0, &page, &DirtyLines::all(64)).unwrap();
    let dirty = DirtyLines::from_lines([2, 3, 40]);
    let mut new = page.clone();
    fill_lines(&mut new, 0, 2, dirty.iter());
    let slot = s.map[0].read().slot;
    let v = s.pvn(0).unwrap() + 1;
    let core = &s.core;
    let mut buf = Vec::new();
    let n = format::encode_entry(&mut buf, core.nonce, 0, v, slot, &new, &dirty);
    core.region.write_persist(core.geo.lane_off(1), &buf[..n]);
    // Only line 3 and half of the header reach the page.
    let po = core.geo.page_off(slot);
    core.region.write(po + 3 * 64, &new[3 * 64..4 * 64]);
    let (w0, _) = format::header_words(core.nonce, slot, 0, v);
    core.region.store_u64(core.geo.header_off(slot), w0);
    drop(s);
    let s = reopen(&p, &o);
    assert_eq!(s.recovery_stats().replayed, 1);
    assert_eq!(read(&s, 0), new);
    assert_eq!(s.pvn(0).unwrap(), v);
    s.audit().unwrap();
    drop(s);
    let s = reopen(&p, &o);
    assert_eq!(s.recovery_stats().replayed, 0, "the entry was scrubbed");
    assert_eq!(read(&s, 0), new);
}

/// The slot and version the next write of `page` through the lane a
/// writer would get first will use.
fn peek(s: &PageStore, page: u32) -> (u32, u64) {
    let w = s.lanes();
    let l = (s.next_lane.load(Ordering::Relaxed) % w as usize) as u32;
    let lane = s.lanes[l as usize].lock();
    let mut copy = Lane {
        buf: Vec::new(),
        reserve: lane.reserve,
        last_pvn: lane.last_pvn,
    };
    let v = copy.next_pvn(l, w, s.map[page as usize].read().pvn);
    (lane.reserve, v)
}

#[test]
fn versions_are_unique_across_lanes_and_grow_per_page() {
    let mut lanes: Vec<Lane> = (0..3)
        .map(|_| Lane {
            buf: Vec::new(),
            reserve: 0,
            last_pvn: 10,
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
    let mut page = 0u64;
    for i in 0..60u32 {
        let l = (i * 7 % 3) as usize;
        let v = lanes[l].next_pvn(l as u32, 3, page);
        assert!(v > page && v > 10 && v % 3 == l as u64, "{v}");
        assert!(seen.insert(v), "{v} handed out twice");
        // Every other write is to a page far ahead of the lanes.
        page = if i % 2 == 0 { v } else { v + 5 };
    }
}

#[test]
fn scrubbing_keeps_a_reused_version_from_reviving_a_crashed_header() {
    // Why recovery zeroes free slot headers: a copy-on-write that crashed
    // with only header word 0 durable leaves `pid | crc(pid, pvn)` behind.
    // Its version was not consumed and is handed out again after the
    // crash; if the write that gets it goes to the same slot for another
    // page and persists only word 1, the two halves form a valid header of
    // the first page.
    for fault in [Fault::None, Fault::RecoveryNoScrub] {
        let o = opts(4096, 2).algorithm(PageAlgorithm::Cow);
        let len = o.region_len().unwrap();
        let p = pool(Domain::Adr, len + 8192);
        let region = p.data().sub(0, len).unwrap();
        let s = PageStore::create(region.clone(), &o).unwrap();
        let (a, b) = (vec![0xaau8; 4096], vec![0xbbu8; 4096]);
        s.write_page(0, &a, &DirtyLines::all(64)).unwrap();
        s.write_page(1, &b, &DirtyLines::all(64)).unwrap();
        // A write of page 0 crashes with only header word 0 durable.
        let (t, v) = peek(&s, 0);
        let (w0, _) = format::header_words(s.core.nonce, t, 0, v);
        s.core.region.store_u64(s.core.geo.header_off(t), w0);
        drop(s);
        let s = PageStore::open_with_fault(region.clone(), fault).unwrap();
        assert_eq!(read(&s, 0), a);
        // Page 1's next write reuses slot `t` and version `v`, and crashes
        // with its payload and only header word 1 durable.
        assert_eq!(peek(&s, 1), (t, v), "the version is handed out again");
        s.core.region.write_nt(s.core.geo.page_off(t), &b);
        s.core.region.store_u64(s.core.geo.header_off(t) + 8, v);
        drop(s);
        let s = PageStore::open_with_fault(region.clone(), fault).unwrap();
        let got = read(&s, 0);
        if fault == Fault::None {
            assert_eq!(got, a, "page 0 keeps its acknowledged content");
        } else {
            assert_eq!(got, b, "without the scrub page 0 is silently replaced");
        }
    }
}

/// A page write of every algorithm returns with no flush in flight: it
/// drops its lane's mutex and the page's lock on the way out, locked
/// instructions that would wait for such a flush's write-back as a fence
/// does (a `clwb` is ordered before younger locked read-modify-writes).
#[test]
fn page_writes_return_with_no_flush_in_flight() {
    for alg in PageAlgorithm::ALL {
        let o = opts(4096, 4).algorithm(alg);
        let (p, s) = store(&o);
        drop(s);
        let img = p.image();
        let (q, obs) =
            ferrite_crash::InFlight::open(&img, &PoolOptions::new("page-test", img.len() as u64))
                .unwrap();
        let s = PageStore::open(q.data().sub(0, o.region_len().unwrap()).unwrap()).unwrap();
        let mut page = vec![0u8; 4096];
        for v in 1..=12u64 {
            let k = [1usize, 4, 64][v as usize % 3];
            fill_lines(&mut page, 2, v, 0..k);
            s.write_page(2, &page, &DirtyLines::from_lines(0..k))
                .unwrap();
            let n = obs.count();
            assert_eq!(n, 0, "{alg:?}: after a write of {k} lines");
        }
        assert_eq!(read(&s, 2), page);
    }
}
