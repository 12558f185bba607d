//! The `server` suite at a tiny size: one store, one mix, 1 s runs, one
//! repetition, 50 keys through kill -9. Skipped with a printed reason when
//! memcached, memcaslap or the `ferrite` binary is missing.

use ferrite_bench::BenchCtx;
use ferrite_bench::suites::server::{
    self, KILL_MIX, MEMCACHED, MEMCACHED_RESTARTABLE, Mix, Plan, SUITE,
};

fn num(r: &ferrite_bench::Row, k: &str) -> f64 {
    r.extra
        .as_ref()
        .and_then(|e| e.get(k))
        .and_then(|v| v.as_f64())
        .unwrap_or_else(|| panic!("{} lacks extra.{k}: {:?}", r.variant, r.extra))
}

#[test]
fn tiny_server_suite_yields_the_rows_the_report_reads() {
    if let Some(why) = server::missing_tools() {
        println!("skipped: {why}");
        return;
    }
    let plan = Plan {
        stores: vec!["engine-inp".into()],
        mixes: vec![Mix::named("5/95").expect("mix 5/95")],
        reps: 1,
        secs: 1,
        client_threads: 2,
        concurrency: 4,
        server_threads: 1,
        kill_keys: 50,
        kill_store: "engine-inp".into(),
        group_commit: None,
        p1: false,
    };
    let rows = server::run_plan(&BenchCtx::quick(), &plan).expect("suite runs");
    let variants: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.variant.as_str(), r.params["mix"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(
        variants,
        [
            (MEMCACHED, "5/95"),
            ("ferrite-engine-inp", "5/95"),
            (MEMCACHED_RESTARTABLE, KILL_MIX),
            ("ferrite-engine-inp", KILL_MIX),
        ]
    );
    for r in &rows {
        assert_eq!(r.suite, SUITE);
        assert!(!r.counters_observed, "the server's counters are not seen");
        for k in ["key_bytes", "value_bytes", "client_threads"] {
            assert!(
                r.params[k].as_u64().is_some(),
                "{} lacks params.{k}",
                r.variant
            );
        }
    }
    let (mc, fe) = (&rows[0], &rows[1]);
    for r in [mc, fe] {
        assert_eq!(r.params["key_bytes"], 16);
        assert_eq!(r.params["value_bytes"], 64);
        assert_eq!(r.params["client_threads"], 2);
        assert_eq!(r.reps, 1);
        assert!(r.ops > 0 && r.ops_per_s > 0.0 && r.secs > 0.5, "{r:?}");
        assert!(num(r, "p99_us") >= num(r, "avg_us") / 64.0);
        assert_eq!(num(r, "get_misses"), 0.0, "{}: no get misses", r.variant);
    }
    assert_eq!(mc.baseline, None);
    assert_eq!(fe.baseline.as_deref(), Some(MEMCACHED));
    let q = fe.ratio_vs_baseline.expect("ratio against memcached");
    assert!((q - fe.ops_per_s / mc.ops_per_s).abs() < 1e-9);
    // Ferrite keeps every acknowledged key through kill -9.
    let kill = &rows[3];
    assert_eq!(num(kill, "acknowledged"), 50.0);
    assert_eq!(num(kill, "survived"), 50.0);
    let mck = &rows[2];
    assert_eq!(num(mck, "acknowledged"), 50.0);
    assert!(num(mck, "survived") <= 50.0);
    server::print_summary(&rows);
}

/// P1's comparison [P1 §3.4.6]: the tx stores (and with the feature
/// `pmdk` the PMDK undo store) through memcaslap with one server thread
/// and no group commit, and in process with their counters; clobber and
/// redo commit with fewer fences than undo.
#[test]
fn p1_rows_compare_the_logging_strategies() {
    if let Some(why) = server::missing_tools() {
        println!("skipped: {why}");
        return;
    }
    let plan = Plan {
        stores: Vec::new(),
        mixes: Vec::new(),
        reps: 1,
        secs: 1,
        client_threads: 2,
        concurrency: 4,
        server_threads: 2,
        kill_keys: 0,
        kill_store: "engine-inp".into(),
        group_commit: None,
        p1: true,
    };
    let rows = server::run_plan(&BenchCtx::quick().with_reps(1), &plan).expect("suite runs");
    let names: Vec<&str> = rows.iter().map(|r| r.variant.as_str()).collect();
    let pmdk = cfg!(feature = "pmdk");
    let mut want = vec![
        MEMCACHED,
        "ferrite-tx-undo",
        "ferrite-tx-redo",
        "ferrite-tx-clobber",
    ];
    if pmdk {
        want.push("ferrite-pmdk-undo");
    }
    want.extend(["store-tx-undo", "store-tx-redo", "store-tx-clobber"]);
    if pmdk {
        want.push("store-pmdk-undo");
    }
    assert_eq!(names, want);
    let served = if pmdk { 5 } else { 4 };
    for r in &rows[..served] {
        assert_eq!(r.params["mix"], server::P1_MIX);
        assert_eq!(r.params["server_threads"], 1);
        assert_eq!(r.params["client_threads"], 4);
        assert_eq!(r.params["group_commit"], 1);
        assert!(r.ops_per_s > 0.0);
    }
    let store = &rows[served..served + 3];
    for r in store {
        assert!(r.counters_observed);
        assert_eq!(r.params["layer"], server::STORE_LAYER);
    }
    if pmdk {
        let p = &rows[served + 3];
        assert_eq!(p.params["layer"], server::STORE_LAYER);
        assert_eq!(p.baseline.as_deref(), Some("store-tx-undo"));
        assert!(p.ops_per_s > 0.0);
        // PMDK flushes outside Ferrite's door: n/a unless counted.
        assert_eq!(p.counters_observed, cfg!(feature = "pmdk-count"));
        if cfg!(feature = "pmdk-count") {
            // An undo transaction: at least its log, the data and the
            // commit each need a fence.
            assert!(p.fences_per_op >= 3.0 * 0.95, "{p:?}");
        }
    }
    // A set replaces an item: undo logs the link before writing it (one
    // range: 3 fences, or 4 with the allocator's), redo and clobber commit
    // with 2 whatever they write.
    assert!(store[0].fences_per_op >= 3.0 * 0.95, "{:?}", store[0]);
    for r in &store[1..] {
        assert!(r.fences_per_op <= 2.0 && r.fences_per_op >= 1.8, "{r:?}");
        assert_eq!(r.baseline.as_deref(), Some("store-tx-undo"));
    }
    let refs: Vec<&ferrite_bench::Row> = rows.iter().collect();
    let claims = server::p1_outcomes(&refs);
    assert_eq!(claims.len(), 2, "memcaslap and in process");
    let versus = if pmdk {
        "clobber ÷ PMDK undo"
    } else {
        "clobber ÷ undo"
    };
    for c in &claims {
        assert!(c.name.contains(versus), "{}", c.name);
        assert!(c.measured.is_some_and(|v| v > 0.0), "{}", c.name);
        assert_eq!(c.paper, Some(1.8));
    }
}
