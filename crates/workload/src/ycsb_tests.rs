//! Tests of the YCSB-style workloads against the reference [`MemKv`].

use crate::ycsb::*;
use crate::{Kv, MemKv};
use std::collections::{BTreeMap, HashSet};

fn small(name: &str, records: u64, ops: u64) -> Workload {
    Workload::parse(name)
        .unwrap()
        .with_records(records)
        .with_operations(ops)
}

/// The stream as owned data, for comparisons.
fn stream(
    w: &Workload,
    seed: u64,
    thread: u32,
    threads: u32,
    n: usize,
) -> Vec<(OpKind, Vec<u8>, Vec<u8>, usize)> {
    let mut g = Generator::new(w, seed, thread, threads).unwrap();
    let mut out = Vec::new();
    while out.len() < n {
        let Some(op) = g.next_op() else { break };
        let (value, len) = match op {
            Op::Insert { value, .. }
            | Op::Update { value, .. }
            | Op::ReadModifyWrite { value, .. } => (value.to_vec(), 0),
            Op::Scan { len, .. } => (Vec::new(), len),
            _ => (Vec::new(), 0),
        };
        out.push((op.kind(), op.key().to_vec(), value, len));
    }
    out
}

#[test]
fn same_seed_same_stream() {
    for name in workload_names() {
        let w = small(name, 1000, 1000);
        let a = stream(&w, 42, 0, 1, 500);
        assert_eq!(a, stream(&w, 42, 0, 1, 500), "{name}");
        if name != "p2-h" {
            assert_ne!(a, stream(&w, 43, 0, 1, 500), "{name}: seed must matter");
            // Two threads of one run draw different streams.
            assert_ne!(
                stream(&w, 42, 0, 2, 500),
                stream(&w, 42, 1, 2, 500),
                "{name}"
            );
        }
    }
}

#[test]
fn mixes_have_their_proportions() {
    let expect: &[(&str, &[(OpKind, u32)])] = &[
        ("p2-a", &[(OpKind::Read, 1000)]),
        ("p2-b", &[(OpKind::Read, 900), (OpKind::Insert, 100)]),
        ("p2-c", &[(OpKind::Read, 500), (OpKind::Insert, 500)]),
        ("p2-d", &[(OpKind::Read, 100), (OpKind::Insert, 900)]),
        ("p2-e", &[(OpKind::Read, 900), (OpKind::Update, 100)]),
        ("p2-f", &[(OpKind::Read, 500), (OpKind::Update, 500)]),
        ("p2-g", &[(OpKind::Read, 100), (OpKind::Update, 900)]),
        ("p2-h", &[(OpKind::Delete, 1000)]),
        ("p2-var", &[(OpKind::Read, 500), (OpKind::Insert, 500)]),
        ("ycsb-a", &[(OpKind::Read, 500), (OpKind::Update, 500)]),
        ("ycsb-b", &[(OpKind::Read, 950), (OpKind::Update, 50)]),
        ("ycsb-c", &[(OpKind::Read, 1000)]),
        ("ycsb-d", &[(OpKind::Read, 950), (OpKind::Insert, 50)]),
        ("ycsb-e", &[(OpKind::Scan, 950), (OpKind::Insert, 50)]),
        (
            "ycsb-f",
            &[(OpKind::Read, 500), (OpKind::ReadModifyWrite, 500)],
        ),
    ];
    assert_eq!(expect.len(), workload_names().count());
    let n = 20_000;
    for (name, mix) in expect {
        let w = small(name, n as u64, n as u64);
        let mut counts: BTreeMap<OpKind, u32> = BTreeMap::new();
        let mut g = Generator::new(&w, 1, 0, 1).unwrap();
        for _ in 0..n {
            *counts.entry(g.next_op().unwrap().kind()).or_default() += 1;
        }
        let total: u32 = mix.iter().map(|(_, p)| p).sum();
        assert_eq!(total, 1000, "{name}");
        assert_eq!(counts.len(), mix.len(), "{name}: {counts:?}");
        for (kind, per_mille) in *mix {
            let got = counts.get(kind).copied().unwrap_or(0) as f64 / n as f64 * 1000.0;
            assert!(
                (got - *per_mille as f64).abs() < 15.0,
                "{name} {kind:?}: {got} per mille, want {per_mille}"
            );
        }
    }
}

/// Loads, runs and checks every workload on the reference store: reads,
/// updates and read-modify-writes always find their key (the generator
/// only names existing keys), inserts are fresh, and every value read
/// verifies against its key.
#[test]
fn every_workload_runs_on_memkv() {
    for name in workload_names() {
        let w = small(name, 2000, 4000);
        let mut kv = MemKv::new();
        assert_eq!(Loader::new(&w).load_into(&mut kv, 64).unwrap(), 2000);
        assert_eq!(kv.len(), 2000);
        let mut g = Generator::new(&w, 7, 0, 1).unwrap();
        let mut scratch = Vec::new();
        let mut inserts = 0;
        for _ in 0..w.ops_for_thread(0, 1) {
            let Some(op) = g.next_op() else { break };
            if let Op::Insert { key, .. } = op {
                let mut tmp = Vec::new();
                assert!(
                    !kv.get(key, &mut tmp).unwrap(),
                    "{name}: insert of an existing key"
                );
                inserts += 1;
            }
            let out = run_op(&mut kv, &op, &mut scratch).unwrap();
            match op {
                Op::Read { key } | Op::ReadModifyWrite { key, .. } => {
                    assert_eq!(out, OpOutcome::Hit, "{name}");
                    if let Ok(v) = w.value.verify(key, &scratch) {
                        let _ = v;
                    } else {
                        // Short variable values carry no header; they must
                        // still be some version of this key.
                        assert!(
                            scratch.len() < crate::record::HEADER_LEN,
                            "{name}: bad value"
                        );
                    }
                }
                Op::Delete { .. } => assert_eq!(out, OpOutcome::Hit, "{name}"),
                Op::Scan { len, .. } => {
                    let OpOutcome::Scanned(k) = out else { panic!() };
                    assert!(k >= 1 && k <= len, "{name}: scanned {k} of {len}");
                }
                _ => assert_eq!(out, OpOutcome::Written),
            }
        }
        if name == "p2-h" {
            assert!(kv.is_empty(), "p2-h leaves the store empty");
        } else {
            assert_eq!(kv.len() as u64, 2000 + inserts, "{name}");
        }
        // Every stored value is a valid version of its key.
        for (k, v) in kv.snapshot() {
            if v.len() >= crate::record::HEADER_LEN {
                w.value.verify(&k, &v).unwrap();
            }
        }
    }
}

#[test]
fn p2_h_deletes_every_key_once_over_threads() {
    let w = small("p2-h", 1001, 0);
    let mut kv = MemKv::new();
    Loader::new(&w).load_into(&mut kv, 1).unwrap();
    let mut seen = HashSet::new();
    let mut scratch = Vec::new();
    let threads = 3;
    let mut total = 0;
    for t in 0..threads {
        let mut g = Generator::new(&w, 5, t, threads).unwrap();
        let mut mine = 0;
        while let Some(op) = g.next_op() {
            assert!(seen.insert(op.key().to_vec()), "deleted twice");
            assert_eq!(run_op(&mut kv, &op, &mut scratch).unwrap(), OpOutcome::Hit);
            mine += 1;
        }
        assert_eq!(mine, w.ops_for_thread(t, threads));
        total += mine;
    }
    assert_eq!(total, 1001);
    assert!(kv.is_empty());
}

#[test]
fn threads_insert_disjoint_keys_and_read_their_own() {
    let w = small("p2-d", 500, 4000);
    let kv = MemKv::new();
    Loader::new(&w).load_into(&mut kv.clone(), 16).unwrap();
    std::thread::scope(|s| {
        for t in 0..2u32 {
            let mut kv = kv.clone();
            let w = &w;
            s.spawn(move || {
                let mut g = Generator::new(w, 9, t, 2).unwrap();
                let mut scratch = Vec::new();
                for _ in 0..w.ops_for_thread(t, 2) {
                    let op = g.next_op().unwrap();
                    let out = run_op(&mut kv, &op, &mut scratch).unwrap();
                    if op.kind() == OpKind::Read {
                        assert_eq!(out, OpOutcome::Hit);
                    }
                }
            });
        }
    });
    // Loaded + every insert, none lost to a collision.
    let inserts: u64 = (0..2)
        .map(|t| {
            let mut g = Generator::new(&w, 9, t, 2).unwrap();
            (0..w.ops_for_thread(t, 2))
                .filter(|_| g.next_op().unwrap().kind() == OpKind::Insert)
                .count() as u64
        })
        .sum();
    assert_eq!(kv.len() as u64, 500 + inserts);
}

#[test]
fn ycsb_e_scans_have_uniform_lengths() {
    let w = small("ycsb-e:keys=ordered", 5000, 20_000);
    let mut kv = MemKv::new();
    Loader::new(&w).load_into(&mut kv, 64).unwrap();
    let mut g = Generator::new(&w, 3, 0, 1).unwrap();
    let mut scratch = Vec::new();
    let mut lens = [0u32; 101];
    let mut scans = 0;
    for _ in 0..20_000 {
        let op = g.next_op().unwrap();
        if let Op::Scan { key, len } = op {
            let start = u64::from_be_bytes(key.try_into().unwrap());
            let OpOutcome::Scanned(n) = run_op(&mut kv, &op, &mut scratch).unwrap() else {
                panic!()
            };
            // Ordered keys: a scan sees min(len, keys from start on).
            let known = kv.len() as u64;
            assert_eq!(n as u64, (len as u64).min(known - start));
            lens[len] += 1;
            scans += 1;
        } else {
            run_op(&mut kv, &op, &mut scratch).unwrap();
        }
    }
    assert_eq!(lens[0], 0);
    let per = scans as f64 / 100.0;
    for (l, c) in lens.iter().enumerate().skip(1) {
        assert!(
            (*c as f64) > per * 0.6 && (*c as f64) < per * 1.4,
            "length {l}: {c}"
        );
    }
}

#[test]
fn zipfian_reads_are_skewed_and_uniform_reads_are_not() {
    let top_share = |name: &str| {
        let w = small(name, 10_000, 100_000);
        let mut g = Generator::new(&w, 1, 0, 1).unwrap();
        let mut counts: std::collections::HashMap<Vec<u8>, u32> = Default::default();
        for _ in 0..100_000 {
            *counts
                .entry(g.next_op().unwrap().key().to_vec())
                .or_default() += 1;
        }
        let mut c: Vec<u32> = counts.into_values().collect();
        c.sort_unstable_by(|a, b| b.cmp(a));
        c[..100].iter().sum::<u32>() as f64 / 100_000.0
    };
    let z = top_share("p2-a");
    let u = top_share("p2-a:uniform");
    let h = top_share("p2-a:skew-high");
    // ≈ 0.2 for YCSB's scrambled Zipfian (see dist's test), 0.01 uniform.
    assert!(z > 0.17, "zipfian top-1% share {z}");
    assert!(u < 0.03, "uniform top-1% share {u}");
    assert!(h < z && h > u, "hot set {h}");
}

#[test]
fn latest_reads_favour_recent_inserts() {
    let w = small("ycsb-d:keys=ordered", 10_000, 50_000);
    let mut g = Generator::new(&w, 2, 0, 1).unwrap();
    let (mut recent, mut reads) = (0, 0);
    for _ in 0..50_000 {
        let known = g.known_keys();
        let op = g.next_op().unwrap();
        if let Op::Read { key } = op {
            let n = u64::from_be_bytes(key.try_into().unwrap());
            assert!(n < known);
            reads += 1;
            if n + 100 >= known {
                recent += 1;
            }
        }
    }
    // The newest 1 % of keys take well over half of the reads.
    assert!(recent as f64 / reads as f64 > 0.5, "{recent}/{reads}");
}

#[test]
fn names_and_options_parse() {
    let w = Workload::parse("p2-c:uniform:records=2k:ops=1m:keys=user:fields=2x8").unwrap();
    assert_eq!(w.base, "p2-c");
    assert_eq!(w.distribution, Distribution::Uniform);
    assert_eq!((w.records, w.operations), (2000, 1_000_000));
    assert_eq!(w.keys, crate::KeyMode::User);
    assert_eq!(w.value, crate::ValueLayout::Fields { count: 2, len: 8 });
    assert_eq!(Workload::parse("ycsb-var").unwrap().base, "p2-var");
    let p2 = Workload::parse("p2-a").unwrap();
    assert_eq!((p2.records, p2.value), (10_000_000, crate::ValueLayout::P2));
    assert_eq!(
        Workload::parse("ycsb-d").unwrap().distribution,
        Distribution::Latest { theta: 0.99 }
    );
    assert_eq!(
        Workload::parse("p2-f:zipfian=0.5").unwrap().distribution,
        Distribution::Zipfian { theta: 0.5 }
    );
}

#[test]
fn bad_names_are_typed_errors() {
    assert!(matches!(
        Workload::parse("p2-z"),
        Err(WorkloadError::Unknown(_))
    ));
    assert!(matches!(
        Workload::parse(""),
        Err(WorkloadError::Unknown(_))
    ));
    assert!(matches!(
        Workload::parse("p2-a:bogus"),
        Err(WorkloadError::UnknownOption { .. })
    ));
    for bad in [
        "p2-a:records=0",
        "p2-a:records=x",
        "p2-a:zipfian=1.5",
        "p2-a:keys=foo",
        "p2-a:fields=3",
        "p2-a:var=9-3",
        "p2-h:uniform",
    ] {
        assert!(
            matches!(Workload::parse(bad), Err(WorkloadError::BadValue { .. })),
            "{bad}"
        );
    }
}

#[test]
fn any_workload_parses_tpcc_too() {
    use crate::{AnyWorkload, TpccConfig};
    assert!(matches!(
        AnyWorkload::parse("p2-b"),
        Ok(AnyWorkload::Ycsb(_))
    ));
    assert_eq!(
        AnyWorkload::parse("tpcc"),
        Ok(AnyWorkload::Tpcc(TpccConfig::standard(8)))
    );
    let Ok(AnyWorkload::Tpcc(q)) = AnyWorkload::parse("tpcc:quick:w=3:local") else {
        panic!()
    };
    assert_eq!((q.warehouses, q.items, q.remote), (3, 2000, false));
    assert!(matches!(
        AnyWorkload::parse("tpcc:w=0"),
        Err(WorkloadError::BadValue { .. })
    ));
    assert!(matches!(
        AnyWorkload::parse("tpcc:fast"),
        Err(WorkloadError::UnknownOption { .. })
    ));
    assert!(matches!(
        AnyWorkload::parse("tpc"),
        Err(WorkloadError::Unknown(_))
    ));
}

/// Cost of drawing one operation (run in release:
/// `cargo test -p ferrite-workload --release --lib generation_cost -- --ignored --nocapture`).
#[test]
#[ignore = "timing, not a check"]
fn generation_cost() {
    for name in [
        "p2-a",
        "p2-c",
        "p2-g",
        "p2-var",
        "ycsb-d",
        "ycsb-e",
        "p2-a:uniform",
    ] {
        let w = Workload::parse(name).unwrap();
        let mut g = Generator::new(&w, 1, 0, 1).unwrap();
        let n = 2_000_000;
        let t = std::time::Instant::now();
        for _ in 0..n {
            std::hint::black_box(g.next_op());
        }
        let ns = t.elapsed().as_nanos() as f64 / n as f64;
        println!("{name:>14}: {ns:6.1} ns/op");
    }
}

#[test]
fn thread_numbers_are_checked_and_loader_shares_cover_all() {
    let w = small("p2-a", 1003, 10);
    assert!(matches!(
        Generator::new(&w, 1, 2, 2),
        Err(WorkloadError::Thread {
            thread: 2,
            threads: 2
        })
    ));
    assert!(Loader::for_thread(&w, 0, 0).is_err());
    let mut kv = MemKv::new();
    let mut total = 0;
    for t in 0..3 {
        total += Loader::for_thread(&w, t, 3)
            .unwrap()
            .load_into(&mut kv, 7)
            .unwrap();
    }
    assert_eq!((total, kv.len()), (1003, 1003));
    // The shares are exactly the single loader's records.
    let mut all = MemKv::new();
    Loader::new(&w).load_into(&mut all, 1).unwrap();
    assert_eq!(kv.snapshot(), all.snapshot());
}
