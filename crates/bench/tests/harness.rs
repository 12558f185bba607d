//! Harness tests: tiny op counts, debug-mode friendly.

use ferrite_bench::{
    BenchCtx, BenchError, FLOOR, Row, Scale, Variant, floor_pool, floor_variant, format_table,
    median, print_table, read_json, run_interleaved, run_suite, set_ratios, spread, suites,
    write_json,
};
use ferrite_pmem::{Domain, FlushKind, Pool, PoolOptions};
use serde_json::json;

fn ctx(reps: usize) -> BenchCtx {
    BenchCtx::new(Scale::Quick).with_reps(reps)
}

fn adr_pool() -> Option<Pool> {
    FlushKind::best()?;
    Some(
        Pool::create_in_memory(&PoolOptions::new("bench-test", 1 << 20).domain(Domain::Adr))
            .unwrap(),
    )
}

#[test]
fn interleaved_runner_reports_exact_counters_per_op() {
    let Some(pool) = adr_pool() else {
        eprintln!("no flush instruction on this CPU: skipped");
        return;
    };
    let r = pool.data();
    let r = &r;
    let mut order = Vec::new();
    let order_cell = std::cell::RefCell::new(&mut order);
    let mut v = vec![
        Variant::new("persist", json!({ "bytes": 64 }), 50, |n| {
            order_cell.borrow_mut().push('A');
            for i in 0..n {
                r.write(0, &i.to_le_bytes());
                r.persist(0, 64);
            }
        }),
        Variant::new("persist-4-lines", json!({}), 20, |n| {
            order_cell.borrow_mut().push('B');
            for _ in 0..n {
                r.persist(4096, 256); // 4 lines, one 256-byte block
            }
        })
        .baseline("persist"),
        Variant::new("nothing", json!({}), 30, |n| {
            order_cell.borrow_mut().push('C');
            for _ in 0..n {
                std::hint::black_box(());
            }
        })
        .warmup(0),
    ];
    let rows = run_interleaved(&ctx(3), "test", &mut v);
    drop(v);
    // Warm-up A B (C has none), then three interleaved rounds.
    assert_eq!(order.iter().collect::<String>(), "ABABCABCABC");

    assert_eq!(rows.len(), 3);
    let a = &rows[0];
    assert_eq!((a.suite.as_str(), a.variant.as_str()), ("test", "persist"));
    assert_eq!((a.ops, a.reps, a.threads), (50, 3, 1));
    assert_eq!(a.params, json!({ "bytes": 64 }));
    assert_eq!(a.fences_per_op, 1.0);
    assert_eq!(a.lines_per_op, 1.0);
    assert_eq!(a.flushes_per_op, 1.0);
    assert_eq!(a.blocks_per_op, 1.0);
    assert_eq!(a.nt_bytes_per_op, 0.0);
    assert!(a.ns_per_op > 0.0 && a.ops_per_s > 0.0 && a.secs > 0.0);
    assert!((a.ops_per_s * a.ns_per_op - 1e9).abs() < 1e-3 * 1e9);
    assert!(a.ns_per_op_spread >= 0.0);
    assert_eq!(a.baseline, None);
    assert_eq!(a.ratio_vs_baseline, None);

    let b = &rows[1];
    assert_eq!(b.fences_per_op, 1.0);
    assert_eq!(b.lines_per_op, 4.0);
    assert_eq!(b.flushes_per_op, 4.0);
    assert_eq!(b.blocks_per_op, 1.0);
    assert_eq!(b.baseline.as_deref(), Some("persist"));
    let q = b.ratio_vs_baseline.expect("ratio against persist");
    assert!((q - b.ops_per_s / a.ops_per_s).abs() < 1e-9);

    let c = &rows[2];
    assert_eq!(
        (c.fences_per_op, c.lines_per_op, c.nt_bytes_per_op),
        (0.0, 0.0, 0.0)
    );
}

#[test]
fn threaded_variant_sums_counters_of_every_thread() {
    let Some(pool) = adr_pool() else {
        return;
    };
    let r = pool.data();
    let r = &r;
    let mut v = [Variant::threaded(
        "mt-persist",
        json!({}),
        2,
        25,
        move |t, n| {
            for _ in 0..n {
                r.persist(t * 4096, 64);
            }
        },
    )];
    let rows = run_interleaved(&ctx(2), "test", &mut v);
    assert_eq!(rows[0].threads, 2);
    assert_eq!(rows[0].ops, 50);
    assert_eq!(rows[0].fences_per_op, 1.0);
    assert_eq!(rows[0].lines_per_op, 1.0);
}

#[test]
fn floor_is_one_nt_copy_and_one_fence() {
    let pool = floor_pool(64 * 1024).unwrap();
    let r = pool.data();
    let mut v = [floor_variant(&r, 256, 40)];
    let rows = run_interleaved(&ctx(2), "test", &mut v);
    let f = &rows[0];
    assert_eq!(f.variant, FLOOR);
    assert_eq!(f.fences_per_op, 1.0);
    assert_eq!(f.nt_bytes_per_op, 256.0);
    assert_eq!(f.lines_per_op, 0.0);
    assert_eq!(f.blocks_per_op, 1.0);
    let gbs = f.extra.as_ref().and_then(|e| e["gb_per_s"].as_f64());
    assert!(gbs.is_some_and(|g| g > 0.0), "{:?}", f.extra);
}

fn sample(variant: &str, ops_per_s: f64, baseline: Option<&str>) -> Row {
    let mut r = Row::empty("s", variant, json!({ "n": 1, "kind": "x" }));
    r.ops = 10;
    r.reps = 3;
    r.ops_per_s = ops_per_s;
    r.ns_per_op = if ops_per_s > 0.0 {
        1e9 / ops_per_s
    } else {
        0.0
    };
    r.baseline = baseline.map(String::from);
    r
}

#[test]
fn ratios_are_throughput_over_the_baselines() {
    let mut rows = vec![
        sample("a", 100.0, None),
        sample("b", 50.0, Some("a")),
        sample("c", 300.0, Some("a")),
        sample("d", 10.0, Some("missing")),
        sample("z", 0.0, None),
        sample("e", 10.0, Some("z")),
    ];
    set_ratios(&mut rows);
    assert_eq!(rows[0].ratio_vs_baseline, None);
    assert_eq!(rows[1].ratio_vs_baseline, Some(0.5));
    assert_eq!(rows[2].ratio_vs_baseline, Some(3.0));
    assert_eq!(rows[3].ratio_vs_baseline, None);
    assert_eq!(rows[5].ratio_vs_baseline, None);
    // Same variant name in another suite is not a baseline.
    let mut other = vec![sample("b", 50.0, Some("a")), {
        let mut r = sample("a", 100.0, None);
        r.suite = "other".into();
        r
    }];
    set_ratios(&mut other);
    assert_eq!(other[0].ratio_vs_baseline, None);
    assert!((rows[2].times(&rows[0]) - 1.0 / 3.0).abs() < 1e-12);
}

#[test]
fn json_lines_round_trip() {
    let mut a = sample("a", 100.0, None);
    a.set_extra("gb_per_s", 1.5);
    a.set_extra("series", json!([1, 2, 3]));
    let mut b = sample("b", 50.0, Some("a"));
    b.ratio_vs_baseline = Some(0.5);
    b.ns_per_op_spread = 0.125;
    let rows = vec![a, b];

    let line = rows[1].to_json_line().unwrap();
    assert!(!line.contains('\n'));
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    for field in [
        "suite",
        "variant",
        "params",
        "threads",
        "ops",
        "secs",
        "ops_per_s",
        "ns_per_op",
        "fences_per_op",
        "lines_per_op",
        "nt_bytes_per_op",
        "baseline",
        "ratio_vs_baseline",
        "flushes_per_op",
        "blocks_per_op",
        "reps",
        "ns_per_op_spread",
    ] {
        assert!(v.get(field).is_some(), "missing {field} in {line}");
    }
    assert_eq!(serde_json::from_str::<Row>(&line).unwrap(), rows[1]);

    let path = std::env::temp_dir().join(format!(
        "ferrite-bench-test-{}-{:?}.jsonl",
        std::process::id(),
        std::time::SystemTime::now()
    ));
    let _ = std::fs::remove_file(&path);
    write_json(&path, &rows[..1]).unwrap();
    write_json(&path, &rows[1..]).unwrap(); // appends
    let back = read_json(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(back, rows);
}

#[test]
fn json_to_an_unwritable_path_is_a_typed_error() {
    let err = write_json(
        std::path::Path::new("/nonexistent-dir/x/rows.jsonl"),
        &[sample("a", 1.0, None)],
    )
    .unwrap_err();
    assert!(matches!(err, ferrite_rows::RowsError::Io { .. }), "{err}");
}

#[test]
fn table_handles_empty_and_real_rows() {
    let empty = format_table(&[]);
    assert_eq!(empty.lines().count(), 1);
    assert!(empty.contains("ns/op") && empty.contains("ratio"));
    print_table(&[]);

    let mut rows = vec![
        sample("a", 1234567.0, None),
        sample("bb", 617283.5, Some("a")),
        sample("c", 4567.0, Some("a")),
    ];
    rows[0].set_extra("gb_per_s", 12.5);
    set_ratios(&mut rows);
    let t = format_table(&rows);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 4);
    assert!(lines[1].contains("1.23M"), "{t}");
    assert!(lines[1].contains("gb_per_s=12.50"), "{t}");
    assert!(lines[1].contains("kind=x n=1"), "{t}");
    // Columns line up: the right-aligned ratio column ends at the same place.
    let end = lines[0].find("ratio").unwrap() + "ratio".len();
    assert_eq!(&lines[1][end - 1..end], "-", "{t}");
    assert_eq!(&lines[2][end - 5..end], "0.50x", "{t}");
    assert_eq!(&lines[3][end - 8..end], "0.00370x", "{t}");
    // A row with no throughput at all must not panic either.
    print_table(&[Row::empty("s", "v", serde_json::Value::Null)]);
}

#[test]
fn unknown_suite_is_a_typed_error_listing_the_known_ones() {
    let err = run_suite("no-such-suite", &BenchCtx::quick()).unwrap_err();
    match &err {
        BenchError::UnknownSuite { name, known } => {
            assert_eq!(name, "no-such-suite");
            assert!(known.contains("probe"));
        }
        other => panic!("unexpected {other}"),
    }
    assert!(err.to_string().contains("probe"));
    assert!(suites().iter().any(|(n, d)| *n == "probe" && !d.is_empty()));
}

#[test]
fn median_and_spread() {
    assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    assert!(median(&[]).is_nan());
    assert_eq!(spread(&[1.0, 2.0, 3.0]), 1.0);
    assert_eq!(spread(&[5.0]), 0.0);
    assert_eq!(spread(&[]), 0.0);
}

/// The whole quick probe (seconds in release, much longer in debug):
/// `cargo test --release -p ferrite-bench -- --ignored`.
#[test]
#[ignore]
fn quick_probe_runs_and_counts_exactly() {
    let rows = ferrite_bench::probe(&BenchCtx::quick().with_reps(3)).unwrap();
    let get = |name: &str| rows.iter().find(|r| r.variant == name);
    if let Some(best) = FlushKind::best() {
        let r = get(&format!("store+{}+sfence", best.name())).unwrap();
        assert_eq!((r.fences_per_op, r.lines_per_op), (1.0, 1.0));
        let r = get(&format!("{} x16+sfence", best.name())).unwrap();
        assert_eq!((r.fences_per_op, r.lines_per_op), (1.0, 16.0));
    }
    let nt = get("nt-store+sfence").unwrap();
    assert_eq!(
        (nt.fences_per_op, nt.nt_bytes_per_op, nt.lines_per_op),
        (1.0, 64.0, 0.0)
    );
    assert_eq!(get("sfence").unwrap().fences_per_op, 1.0);
    assert!(rows.iter().all(|r| r.ns_per_op > 0.0));
}

/// The names ferrite-rows copies (so that the report links no engine,
/// PTM or server) are their owners' names, in their owners' order.
#[test]
fn names_match_their_owners() {
    use ferrite_rows::names;
    let engines: Vec<&str> = ferrite_engine::EngineKind::ALL
        .iter()
        .map(|k| k.name())
        .collect();
    assert_eq!(engines, names::ENGINES);
    let algorithms: Vec<&str> = ferrite_ptm::Algorithm::ALL
        .iter()
        .map(|a| a.name())
        .collect();
    assert_eq!(algorithms, names::PTM_ALGORITHMS);
    assert_eq!(ferrite_server::store::STORES, names::SERVER_STORES);
    assert_eq!(ferrite_server::store::PMDK_STORE, names::PMDK_STORE);
}
