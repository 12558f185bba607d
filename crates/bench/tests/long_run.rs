//! The long-run row of the `engine` suite (`workload = long-run`) at a
//! tiny scale: its rows on every engine, and its claim.

use ferrite_bench::claims::{self, Verdict};
use ferrite_bench::suites::engine::long_run::{self, Counts};
use ferrite_bench::suites::engine::{self, Plan, SUITE};
use ferrite_bench::{BenchCtx, Row};
use ferrite_engine::EngineKind;
use ferrite_pmem::Domain;

fn extra<'a>(r: &'a Row, k: &str) -> Option<&'a serde_json::Value> {
    r.extra.as_ref()?.get(k)
}

#[test]
fn every_engine_gets_a_fresh_and_a_loaded_row_and_a_claim() {
    let ctx = BenchCtx::quick().with_reps(2);
    let counts = Counts::tiny();
    let rows = long_run::run(&ctx, &counts);
    assert_eq!(rows.len(), 2 * EngineKind::ALL.len());
    for (pair, kind) in rows.chunks(2).zip(EngineKind::ALL) {
        for (r, store) in pair.iter().zip(["fresh", "loaded"]) {
            assert!(extra(r, "skipped").is_none(), "{r:?}");
            assert_eq!(r.suite, SUITE);
            assert_eq!(r.variant, kind.name());
            assert_eq!(r.params["workload"], long_run::NAME);
            assert_eq!(r.params["store"], store);
            assert_eq!(
                r.params["bulk"],
                if store == "fresh" { 0 } else { counts.bulk }
            );
            assert_eq!(r.params["puts"], counts.puts);
            assert_eq!((r.threads, r.reps, r.ops), (1, 2, counts.puts));
            assert!(r.secs > 0.0 && r.ops_per_s > 0.0, "{r:?}");
            // Durable single puts: each fences and writes back lines.
            assert!(r.counters_observed);
            assert!(r.fences_per_op >= 1.0 && r.lines_per_op >= 1.0, "{r:?}");
        }
        let (fresh, loaded) = (&pair[0], &pair[1]);
        let ratio = extra(loaded, "ratio_vs_fresh").unwrap().as_f64().unwrap();
        let want = loaded.ops_per_s / fresh.ops_per_s;
        assert!((ratio - want).abs() < 1e-3 + want * 1e-3, "{ratio} {want}");
        assert_eq!(
            extra(loaded, "rep_ratios")
                .unwrap()
                .as_array()
                .unwrap()
                .len(),
            2
        );
        assert!(extra(loaded, "load_ms").unwrap().as_f64().unwrap() > 0.0);
    }
    let outcomes = long_run::summarize(&rows);
    assert_eq!(outcomes.len(), EngineKind::ALL.len());
    for (o, kind) in outcomes.iter().zip(EngineKind::ALL) {
        assert!(o.name.starts_with(kind.name()), "{o:?}");
        assert!(o.measured.is_some_and(|m| m > 0.0), "{o:?}");
        assert_ne!(o.verdict, Verdict::NotRun);
    }
    // They are among every claim of the run.
    let all = claims::evaluate(&rows);
    assert!(all.iter().any(|o| o.figure == "long run"));
}

/// The claim's arithmetic and verdicts on made-up rows: loaded ÷ fresh
/// against 0.5×, a skipped row not run, an engine without rows absent.
#[test]
fn the_claim_is_loaded_over_fresh_against_one_half() {
    let row = |variant: &str, store: &str, tput: f64| {
        let mut r = Row::empty(
            SUITE,
            variant,
            serde_json::json!({"workload": long_run::NAME, "store": store, "bulk": 7}),
        );
        r.ops_per_s = tput;
        r
    };
    let mut skipped = row("cow", "loaded", 0.0);
    skipped.set_extra("skipped", "failed: full");
    let rows = vec![
        row("inp", "fresh", 1000.0),
        row("inp", "loaded", 400.0),
        row("lsm", "fresh", 1000.0),
        row("lsm", "loaded", 600.0),
        row("cow", "fresh", 1000.0),
        skipped,
    ];
    let o = long_run::summarize(&rows);
    assert_eq!(o.len(), 3);
    let get = |k: &str| o.iter().find(|o| o.name.starts_with(k)).unwrap();
    assert_eq!(get("inp").measured, Some(0.4));
    assert_eq!(get("inp").verdict, Verdict::Missed);
    assert_eq!(get("lsm").measured, Some(0.6));
    assert_eq!(get("lsm").verdict, Verdict::Met);
    assert_eq!(get("cow").verdict, Verdict::NotRun);
    assert!(
        get("cow").detail.contains("failed: full"),
        "{:?}",
        get("cow")
    );
    assert!(long_run::summarize(&rows[2..4]).len() == 1);
}

/// `FERRITE_ENGINE_WORKLOADS=long-run` alone runs only the long-run rows
/// (no P2 group, no recovery rows).
#[test]
fn long_run_alone_by_name() {
    let ctx = BenchCtx::quick().with_reps(1);
    let plan = Plan {
        records: 100,
        ops_per_thread: 10,
        tpcc_txns: 10,
        warehouses: 2,
        tpcc_standard: false,
        threads: vec![1],
        domains: vec![Domain::Adr],
        eadr_max_threads: 1,
        recovery_bytes: vec![1 << 20],
        workloads: vec![long_run::NAME.into()],
        redb: engine::redb_bench::Counts::tiny(),
        long_run: Counts {
            bulk: 500,
            puts: 40,
            max_reps: 1,
        },
    };
    let rows = engine::run_plan(&ctx, &plan).expect("suite");
    assert_eq!(rows.len(), 2 * EngineKind::ALL.len());
    assert!(rows.iter().all(|r| r.params["workload"] == long_run::NAME));
}
