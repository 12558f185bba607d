use super::*;
use ferrite_pmem::{Counters, Domain, Pool, PoolOptions};

fn pool(domain: Domain, size: u64) -> Pool {
    Pool::create_in_memory(&PoolOptions::new("log-test", size).domain(domain)).unwrap()
}

fn region(p: &Pool, v: Variant, cap: usize) -> Region {
    p.data().sub(0, LogOptions::new(v).region_len(cap)).unwrap()
}

/// Deterministic record `i` of `len` bytes.
fn rec(i: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (i.wrapping_mul(31).wrapping_add(j as u64 * 7) ^ (j as u64 >> 3)) as u8)
        .collect()
}

fn contents(log: &Log) -> Vec<(u64, Vec<u8>)> {
    log.iter().map(|(l, v)| (l.0, v)).collect()
}

#[test]
fn names_parse_and_layouts_are_validated() {
    for v in Variant::ALL {
        assert_eq!(v.name().parse::<Variant>().unwrap(), v);
        assert!(v.algorithm.variants().contains(&v));
    }
    assert_eq!(
        Algorithm::ALL
            .iter()
            .map(|a| a.variants().len())
            .sum::<usize>(),
        10
    );
    assert!(Variant::new(Algorithm::Classic, Layout::Dancing).is_err());
    assert!(Variant::new(Algorithm::Rawl, Layout::Staged).is_err());
    assert!("poplog-sideways".parse::<Variant>().is_err());
    assert_eq!("rawl".parse::<Algorithm>().unwrap(), Algorithm::Rawl);
}

#[test]
fn every_variant_round_trips_across_many_laps() {
    let sizes = [0usize, 1, 7, 8, 9, 31, 48, 63, 64, 65, 100, 129, 250, 300];
    for v in Variant::ALL {
        let p = pool(Domain::Adr, 64 * 1024);
        let mut log = Log::create(region(&p, v, 2048), v).unwrap();
        assert_eq!(log.capacity(), 2048);
        let mut model: std::collections::VecDeque<(u64, Vec<u8>)> = Default::default();
        let mut i = 0u64;
        // Enough bytes for many laps of a 2 KiB ring.
        while i < 400 {
            let len = sizes[(i as usize * 7) % sizes.len()];
            let batch: Vec<Vec<u8>> = (0..1 + i % 3)
                .map(|k| rec(i + k, len + k as usize))
                .collect();
            let slices: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
            let r = match log.append_batch(&slices) {
                Err(LogError::Full { .. }) => {
                    let keep = model.len() / 3;
                    while model.len() > keep {
                        model.pop_front();
                    }
                    let to = model.front().map_or(log.next_lsn(), |(l, _)| Lsn(*l));
                    log.truncate(to).unwrap();
                    log.append_batch(&slices).unwrap()
                }
                r => r.unwrap(),
            };
            assert_eq!(r.len(), batch.len());
            for (l, b) in r.iter().zip(batch) {
                model.push_back((l.0, b));
            }
            i += r.len() as u64;
            if i % 50 < 3 {
                // Reopen now and then: a clean restart must see the same log.
                log = Log::recover(log.region().clone()).unwrap();
            }
            assert_eq!(contents(&log), Vec::from(model.clone()), "{v} after {i}");
        }
        assert!(
            log.tail > 4 * log.capacity(),
            "{v}: the ring wrapped several times"
        );
        let log = Log::recover(log.region().clone()).unwrap();
        assert_eq!(contents(&log), Vec::from(model.clone()), "{v} recovered");
        log.audit_free_space().unwrap();
        // iter_from and read agree with the model.
        let (mid, bytes) = model[model.len() / 2].clone();
        let from: Vec<_> = log.iter_from(Lsn(mid)).unwrap().map(|(l, _)| l.0).collect();
        assert_eq!(from.first(), Some(&mid));
        assert_eq!(from.len(), (log.next_lsn().0 - mid) as usize);
        let mut out = Vec::new();
        log.read(Lsn(mid), &mut out).unwrap();
        assert_eq!(out, bytes);
    }
}

#[test]
fn fences_per_append_and_per_batch() {
    for v in Variant::ALL {
        for domain in [Domain::Adr, Domain::Eadr] {
            let p = pool(domain, 256 * 1024);
            let mut log = Log::create(region(&p, v, 128 * 1024), v).unwrap();
            let want = u64::from(v.algorithm.fences_per_append());
            for len in [0usize, 13, 64, 100, 1000] {
                let r = rec(len as u64, len);
                let before = Counters::snapshot();
                log.append(&r).unwrap();
                let d = Counters::snapshot() - before;
                assert_eq!(d.fences, want, "{v} {domain:?} append of {len} bytes");
            }
            let recs: Vec<Vec<u8>> = (0..16).map(|i| rec(i, 64)).collect();
            let slices: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
            let before = Counters::snapshot();
            log.append_batch(&slices).unwrap();
            let d = Counters::snapshot() - before;
            assert_eq!(d.fences, want, "{v} {domain:?} batch of 16");
            if v.layout == Layout::Staged && domain == Domain::Adr {
                assert!(d.nt_bytes >= 16 * 80, "staged writes non-temporally");
                assert_eq!(
                    d.flush_insns, 0,
                    "staged writes whole lines: nothing to flush"
                );
            }
            let before = Counters::snapshot();
            log.truncate(Lsn(log.next_lsn().0 - 3)).unwrap();
            let d = Counters::snapshot() - before;
            let t = if v.algorithm == Algorithm::PopLog {
                2
            } else {
                1
            };
            assert_eq!(d.fences, t, "{v} truncate");
        }
    }
}

#[test]
fn padded_and_dancing_layouts_do_not_reflush_lines() {
    // Consecutive padded appends touch disjoint lines; with dancing size
    // slots the Header commit store does too; packed Header re-flushes its
    // single size slot every time.
    let lines_of_two_appends = |v: Variant| {
        let p = pool(Domain::Adr, 64 * 1024);
        let mut log = Log::create(region(&p, v, 8192), v).unwrap();
        log.append(&rec(0, 40)).unwrap();
        let before = Counters::snapshot();
        log.append(&rec(1, 40)).unwrap();
        log.append(&rec(2, 40)).unwrap();
        (Counters::snapshot() - before).lines_flushed
    };
    // 40-byte payload + 16-byte header: one line per entry.
    assert_eq!(lines_of_two_appends(Variant::POPLOG_PADDED), 2);
    assert_eq!(lines_of_two_appends(Variant::CLASSIC_PADDED), 4);
    assert_eq!(lines_of_two_appends(Variant::HEADER_DANCING), 4);
    let p = pool(Domain::Adr, 64 * 1024);
    let v = Variant::HEADER_DANCING;
    let mut log = Log::create(region(&p, v, 8192), v).unwrap();
    for i in 0..70 {
        log.append(&rec(i, 10)).unwrap();
    }
    let log = Log::recover(log.region().clone()).unwrap();
    assert_eq!(log.len(), 70);
    assert_eq!(log.dance, 70 % DEFAULT_DANCING_SLOTS);
}

#[test]
fn errors_are_typed() {
    let p = pool(Domain::Volatile, 64 * 1024);
    let v = Variant::POPLOG_PACKED;
    let mut log = Log::create(region(&p, v, 1024), v).unwrap();
    let max = log.max_record_len();
    assert_eq!(max, 1024 - 16);
    assert!(matches!(
        log.append(&vec![1; max + 1]),
        Err(LogError::RecordTooLarge { len, max: m }) if len == max + 1 && m == max
    ));
    log.append(&vec![1; max]).unwrap();
    assert!(matches!(log.append(&[1]), Err(LogError::Full { .. })));
    // A failed batch writes nothing.
    log.truncate(log.next_lsn()).unwrap();
    assert!(matches!(
        log.append_batch(&[&[1u8; 500][..], &[2u8; 500][..]]),
        Err(LogError::Full { .. })
    ));
    assert!(log.is_empty());
    assert!(matches!(
        log.truncate(Lsn(log.next_lsn().0 + 1)),
        Err(LogError::LsnOutOfRange { .. })
    ));
    assert!(log.iter_from(Lsn(1)).is_err(), "LSN 1 was truncated");
    assert!(log.append_batch(&[]).unwrap().is_empty());

    // Geometry and identity errors.
    assert!(matches!(
        Log::create(p.data().sub(8, 4096).unwrap(), v),
        Err(LogError::Misaligned { .. })
    ));
    assert!(matches!(
        Log::create(p.data().sub(0, 256).unwrap(), v),
        Err(LogError::RegionTooSmall { .. })
    ));
    let fresh = p.data().sub(8192, 4096).unwrap();
    assert!(matches!(
        Log::recover(fresh.clone()),
        Err(LogError::NotALog)
    ));
    let r = region(&p, v, 1024);
    let mut line = r.read_vec(0, 64);
    line[40] ^= 1;
    r.write(0, &line);
    assert!(matches!(
        Log::recover(r.clone()),
        Err(LogError::Checksum { .. })
    ));
    line[40] ^= 1;
    line[8] = 9; // version
    r.write(0, &line);
    assert!(matches!(
        Log::recover(r.clone()),
        Err(LogError::UnsupportedVersion { found: 9, .. })
    ));
    let opts = LogOptions {
        dancing_slots: 1,
        ..LogOptions::new(Variant::HEADER_DANCING)
    };
    assert!(matches!(
        Log::create_with(fresh, opts),
        Err(LogError::BadOption(_))
    ));
}

#[test]
fn header_recovery_reports_a_corrupt_claimed_entry() {
    let p = pool(Domain::Volatile, 64 * 1024);
    let v = Variant::HEADER_PACKED;
    let mut log = Log::create(region(&p, v, 1024), v).unwrap();
    log.append(&rec(1, 30)).unwrap();
    let r = log.region().clone();
    let data = LogOptions::new(v).metadata_len();
    r.write(data, &[0xff; 8]); // the LSN of the first entry
    assert!(matches!(Log::recover(r), Err(LogError::Corrupt(_))));
}

#[test]
fn staged_rewrites_the_shared_line_unchanged() {
    let p = pool(Domain::Adr, 64 * 1024);
    let v = Variant::POPLOG_STAGED;
    let mut log = Log::create(region(&p, v, 1024), v).unwrap();
    for i in 0..200u64 {
        let r = rec(i, (i as usize * 13) % 90);
        match log.append(&r) {
            Err(LogError::Full { .. }) => {
                log.truncate(Lsn(log.next_lsn().0 - 2)).unwrap();
                log.append(&r).unwrap();
            }
            x => {
                x.unwrap();
            }
        }
        if i % 17 == 0 {
            log = Log::recover(log.region().clone()).unwrap();
        }
        log.audit_free_space().unwrap();
    }
    let again = Log::recover(log.region().clone()).unwrap();
    assert_eq!(contents(&again), contents(&log));
}

#[test]
fn rawl_bit_stream_round_trips_every_length() {
    let p = pool(Domain::Volatile, 64 * 1024);
    let v = Variant::RAWL_PACKED;
    let mut log = Log::create(region(&p, v, 8192), v).unwrap();
    for len in 0..=200usize {
        let r: Vec<u8> = (0..len)
            .map(|j| (j as u8).wrapping_mul(73) ^ 0xa5)
            .collect();
        let l = match log.append(&r) {
            Err(LogError::Full { .. }) => {
                log.truncate(log.next_lsn()).unwrap();
                log.append(&r).unwrap()
            }
            x => x.unwrap(),
        };
        let mut out = Vec::new();
        log.read(l, &mut out).unwrap();
        assert_eq!(out, r, "length {len}");
    }
    assert_eq!(log.max_record_len(), (8192 / 8 - 1) * 63 / 8);
    log.truncate(log.next_lsn()).unwrap();
    log.append(&vec![0xff; log.max_record_len()]).unwrap();
}

#[test]
fn shared_log_keeps_every_writer_s_records() {
    let p = pool(Domain::Adr, 1 << 20);
    let v = Variant::POPLOG_PADDED;
    let log = SharedLog::new(Log::create(region(&p, v, 512 * 1024), v).unwrap());
    std::thread::scope(|s| {
        for t in 0..2u8 {
            let log = &log;
            s.spawn(move || {
                for i in 0..500u32 {
                    let mut r = vec![t; 20];
                    r[1..5].copy_from_slice(&i.to_le_bytes());
                    if i % 10 == 0 {
                        log.append_batch(&[&r, &r]).unwrap();
                    } else {
                        log.append(&r).unwrap();
                    }
                }
            });
        }
    });
    let log = Log::recover(log.into_inner().region().clone()).unwrap();
    let mut seen = [Vec::new(), Vec::new()];
    for (_, r) in log.iter() {
        seen[r[0] as usize].push(u32::from_le_bytes(r[1..5].try_into().unwrap()));
    }
    for s in &mut seen {
        // Each writer's records appear in its own order (batches twice).
        assert!(s.windows(2).all(|w| w[0] <= w[1]));
        s.dedup();
        assert_eq!(s.len(), 500);
    }
    let shared = SharedLog::new(log);
    assert_eq!(shared.scan(Lsn(1), |it| it.count()).unwrap(), 1100);
}

#[test]
#[ignore]
fn append_speed() {
    for v in Variant::ALL {
        for len in [64usize, 256] {
            let p = pool(
                if std::env::var("VOL").is_ok() {
                    Domain::Volatile
                } else {
                    Domain::Adr
                },
                64 << 20,
            );
            let mut log = Log::create(region(&p, v, 1 << 20), v).unwrap();
            let r = rec(1, len);
            let n = 400_000u64;
            for _ in 0..20_000 {
                if log.append(&r).is_err() {
                    log.truncate(log.next_lsn()).unwrap();
                }
            }
            let t = std::time::Instant::now();
            let before = Counters::snapshot();
            for _ in 0..n {
                if log.append(&r).is_err() {
                    log.truncate(log.next_lsn()).unwrap();
                }
            }
            let d = Counters::snapshot() - before;
            eprintln!(
                "{:16} {len:4} B: {:6.1} ns/append, {:.2} fences, {:.2} lines",
                v.name(),
                t.elapsed().as_nanos() as f64 / n as f64,
                d.fences as f64 / n as f64,
                d.lines_flushed as f64 / n as f64
            );
        }
    }
}

#[test]
fn the_largest_record_fits_an_empty_log_of_every_variant() {
    for v in Variant::ALL {
        let p = pool(Domain::Volatile, 64 * 1024);
        let mut log = Log::create(region(&p, v, 1024), v).unwrap();
        // Move the head off a line boundary first (matters for staged).
        log.append(&[1, 2, 3]).unwrap();
        log.truncate(log.next_lsn()).unwrap();
        let max = log.max_record_len();
        let big = rec(9, max);
        let l = log.append(&big).unwrap();
        assert!(log.entry_extent(max) <= log.capacity(), "{v}");
        assert!(
            matches!(log.append(&[]), Err(LogError::Full { .. })) || log.free_bytes() >= 16,
            "{v}"
        );
        let log = Log::recover(log.region().clone()).unwrap();
        let mut out = Vec::new();
        log.read(l, &mut out).unwrap();
        assert_eq!(out, big, "{v}");
        let mut log = log;
        log.truncate(log.next_lsn()).unwrap();
        assert!(matches!(
            log.append(&vec![0; max + 1]),
            Err(LogError::RecordTooLarge { .. })
        ));
    }
}

/// Appends and truncations of every variant return with no flush in
/// flight: the next locked instruction (a [`SharedLog`]'s unlock, an
/// atomic of the caller) would wait for such a flush's write-back as a
/// fence does, since a `clwb` is ordered before younger locked
/// read-modify-writes.
#[test]
fn appends_and_truncations_return_with_no_flush_in_flight() {
    for v in Variant::ALL {
        let p = pool(Domain::Adr, 64 * 1024);
        drop(Log::create(region(&p, v, 2048), v).unwrap());
        let img = p.image();
        let (q, obs) =
            ferrite_crash::InFlight::open(&img, &PoolOptions::new("log-test", img.len() as u64))
                .unwrap();
        let mut log = Log::recover(region(&q, v, 2048)).unwrap();
        let in_flight = || obs.count();
        for i in 0..120u64 {
            let batch: Vec<Vec<u8>> = (0..1 + i % 3).map(|k| rec(i + k, 40)).collect();
            let slices: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
            if let Err(LogError::Full { .. }) = log.append_batch(&slices) {
                log.truncate(log.next_lsn()).unwrap();
                assert_eq!(in_flight(), 0, "{v}: after a truncation");
                log.append_batch(&slices).unwrap();
            }
            assert_eq!(in_flight(), 0, "{v}: after an append of {}", slices.len());
        }
    }
}

/// Fuzzing found (fuzz/regressions/log/): a head slot with a valid checksum
/// but an unaligned position made RAWL's recovery load a word at an
/// unaligned offset (a panic); a position near `u64::MAX` overflowed
/// `pos + cap`. Recovery refuses both with a typed error.
#[test]
fn recovery_refuses_impossible_head_positions() {
    for v in Variant::ALL {
        for (pos, lsn) in [
            (17u64, 1u64),
            (1 << 62, 1),
            (u64::MAX - 7, 1),
            (0, u64::MAX),
        ] {
            let p = pool(Domain::Adr, 1 << 20);
            let r = region(&p, v, 16 << 10);
            let mut log = Log::create_with(r.clone(), LogOptions::new(v).nonce(5)).unwrap();
            log.append(&rec(1, 40)).unwrap();
            drop(log);
            let slot = format::HeadSlot { seq: 9, pos, lsn }.encode(5);
            r.write(format::SLOT_A_OFF, &slot);
            assert!(
                matches!(Log::recover(r), Err(LogError::Corrupt(_))),
                "{v:?} pos {pos} lsn {lsn}"
            );
        }
    }
}
