//! `ferrite bench ptm` at a tiny scale: every row it must yield, with
//! every required field, the peers, and the summary's ratios.

use ferrite_bench::suites::ptm::{self, DOMAINS, Plan, Verdict};
use ferrite_bench::{BenchCtx, Row, Scale};
use ferrite_ptm::workloads::WorkloadKind;
use std::collections::BTreeSet;

fn p<'a>(r: &'a Row, key: &str) -> &'a serde_json::Value {
    r.params
        .get(key)
        .unwrap_or_else(|| panic!("{} {}: no params.{key}", r.variant, r.params))
}

fn x(r: &Row, key: &str) -> f64 {
    r.extra
        .as_ref()
        .and_then(|e| e.get(key))
        .and_then(|v| v.as_f64())
        .unwrap_or_else(|| panic!("{} {}: no numeric extra.{key}", r.variant, r.params))
}

fn check_common(r: &Row) {
    assert_eq!(r.suite, "ptm");
    assert!(
        [
            "orec-eager",
            "orec-lazy",
            "tx-redo",
            "tx-clobber",
            "pmdk-tx"
        ]
        .contains(&r.variant.as_str()),
        "variant {}",
        r.variant
    );
    assert!(p(r, "workload").is_string());
    assert!(p(r, "domain").is_string());
    assert_eq!(p(r, "threads").as_u64(), Some(r.threads as u64));
    let extra = r.extra.as_ref().expect("extra");
    assert!(
        extra.get("failed").is_none(),
        "{} {} failed: {extra}",
        r.variant,
        r.params
    );
    assert_eq!(
        extra.get("check").and_then(|c| c.as_str()),
        Some("ok"),
        "{} {}: {extra}",
        r.variant,
        r.params
    );
    assert!(r.ops > 0 && r.ops_per_s > 0.0, "{} {}", r.variant, r.params);
    assert!(x(r, "aborts_per_commit") >= 0.0);
    assert!(x(r, "p99_us") > 0.0);
    assert!(x(r, "p99_us") >= x(r, "p50_us"));
    assert!(x(r, "commits_per_s") > 0.0);
    let reps = r.extra.as_ref().unwrap()["rep_ns_per_op"]
        .as_array()
        .unwrap();
    assert_eq!(reps.len(), r.reps, "{} {}", r.variant, r.params);
}

#[test]
fn tiny_run_yields_every_row_peers_and_targets() {
    let plan = Plan::tiny();
    let ctx = BenchCtx::new(Scale::Quick).with_reps(1);
    let rows = ptm::run_plan(&ctx, &plan).unwrap();
    for r in &rows {
        check_common(r);
    }

    // The matrix: every workload x algorithm x domain x threads, plus the
    // fence-removal variants under adr.
    let matrix: Vec<&Row> = rows
        .iter()
        .filter(|r| p(r, "experiment") == "matrix")
        .collect();
    let per_group = 2 * DOMAINS.len() + 2;
    assert_eq!(matrix.len(), WorkloadKind::ALL.len() * 2 * per_group);
    let mut seen = BTreeSet::new();
    for r in &matrix {
        let fr = p(r, "fence_removal").as_bool().unwrap();
        assert!(seen.insert((
            p(r, "workload").as_str().unwrap().to_string(),
            r.variant.clone(),
            p(r, "domain").as_str().unwrap().to_string(),
            r.threads,
            fr,
        )));
        assert_eq!(x(r, "commits_per_s"), r.ops_per_s, "one commit per op");
        assert!(r.extra.as_ref().unwrap()["max_log_lines"].is_u64());
        assert!(x(r, "ptm_fences_per_writer") >= 0.0);
        let domain = p(r, "domain").as_str().unwrap();
        let is_base = r.variant == "orec-eager" && domain == "adr" && !fr;
        assert_eq!(r.ratio_vs_baseline.is_some(), !is_base, "{r:?}");
        if is_base {
            assert_eq!(r.baseline, None);
        } else {
            assert_eq!(r.baseline.as_deref(), Some("orec-eager"));
        }
        // Fences: none under the domains whose caches persist; under adr
        // orec-eager pays per write (W + 2 per writer), orec-lazy 3.
        let fences = x(r, "ptm_fences_per_writer");
        match (domain, fr) {
            ("eadr" | "pdram" | "pdram-lite", _) => assert_eq!(fences, 0.0, "{r:?}"),
            ("adr", false) if x(r, "writer_share") > 0.0 => {
                if r.variant == "orec-lazy" {
                    assert!((fences - 3.0).abs() < 1e-9, "{r:?}");
                } else {
                    assert!(fences >= 3.0, "{r:?}");
                }
                assert!(x(r, "fences_per_tx") > 0.0);
            }
            _ => {}
        }
    }
    for kind in WorkloadKind::ALL {
        for t in [1, 2] {
            assert!(seen.contains(&(
                kind.name().to_string(),
                "orec-lazy".to_string(),
                "pdram-lite".to_string(),
                t,
                false
            )));
            assert!(seen.contains(&(
                kind.name().to_string(),
                "orec-eager".to_string(),
                "adr".to_string(),
                t,
                true
            )));
        }
    }

    // The peers: both workloads, both thread counts, every system.
    let mut peers: Vec<String> = vec!["orec-eager", "orec-lazy", "tx-redo", "tx-clobber"]
        .into_iter()
        .map(String::from)
        .collect();
    if cfg!(feature = "pmdk") {
        peers.push("pmdk-tx".into());
    }
    for w in ["bptree", "hash"] {
        for t in [1, 2] {
            let got: Vec<&Row> = rows
                .iter()
                .filter(|r| {
                    p(r, "experiment") == "peers" && p(r, "workload") == w && r.threads == t
                })
                .collect();
            let names: Vec<&str> = got.iter().map(|r| r.variant.as_str()).collect();
            assert_eq!(names, peers, "{w} x{t}");
            let base = if cfg!(feature = "pmdk") {
                "pmdk-tx"
            } else {
                "tx-redo"
            };
            for r in got {
                assert_eq!(r.ratio_vs_baseline.is_some(), r.variant != base);
                assert_eq!(r.counters_observed, r.variant != "pmdk-tx");
                if r.variant.starts_with("tx-") {
                    assert_eq!(x(r, "aborts_per_commit"), 0.0);
                    assert!(x(r, "fences_per_tx") > 0.0 || p(r, "domain") != "adr");
                }
            }
        }
    }

    // The summary: every target computed from this run.
    let targets = ptm::summarize(&rows);
    let get = |name: &str| {
        targets
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("no target {name}: {targets:#?}"))
    };
    for name in [
        "orec-lazy/orec-eager tpcc-hash adr x1",
        "orec-lazy/orec-eager bptree adr x2",
        "eadr/adr orec-lazy tpcc-hash x1",
        "eadr/adr orec-lazy tpcc-hash x2",
    ] {
        let t = get(name);
        let r = t.ratio.unwrap();
        assert!(r > 0.0 && r.is_finite());
        assert_eq!(
            t.verdict,
            if r >= 1.3 {
                Verdict::Met
            } else {
                Verdict::Missed
            }
        );
    }
    for name in [
        "pdram/eadr orec-lazy",
        "pdram-lite/eadr orec-eager",
        "volatile/eadr orec-lazy",
    ] {
        assert_eq!(get(name).verdict, Verdict::Info);
        assert!(get(name).ratio.unwrap() > 0.0);
    }
    for name in [
        "fence removal orec-eager adr",
        "fence removal orec-lazy adr",
    ] {
        let t = get(name);
        assert!(matches!(t.verdict, Verdict::Met | Verdict::Missed));
        assert!(t.detail.contains("tpcc-hash x1"));
    }
    let pm = get("orec-lazy/pmdk-tx bptree insert x1");
    if cfg!(feature = "pmdk") {
        assert!(matches!(pm.verdict, Verdict::Met | Verdict::Missed));
    } else {
        assert_eq!(pm.verdict, Verdict::NotRun);
    }
    let text = ferrite_bench::claims::ptm::format_summary(&rows);
    assert!(text.contains("ptm summary"));
    assert!(text.contains("orec-lazy/orec-eager tpcc-hash adr x1"));
}

#[test]
fn workload_filter() {
    let mut plan = Plan::tiny();
    plan.select("tatp, vacation,peers").unwrap();
    assert_eq!(
        plan.workloads,
        vec![
            WorkloadKind::Tatp,
            WorkloadKind::VacationHigh,
            WorkloadKind::VacationLow
        ]
    );
    assert!(plan.peers);
    plan.select("bptree").unwrap();
    assert_eq!(plan.workloads, vec![WorkloadKind::Bptree]);
    assert!(!plan.peers);
    assert!(plan.select("nope").is_err());
    plan.select("none").unwrap();
    assert!(plan.workloads.is_empty() && !plan.peers);
    // An empty plan runs nothing and summarises nothing.
    let rows = ptm::run_plan(&BenchCtx::new(Scale::Quick).with_reps(1), &plan).unwrap();
    assert!(rows.is_empty());
    assert!(ferrite_bench::claims::ptm::format_summary(&rows).is_empty());
}

#[test]
fn summary_ratios_pair_the_repetitions() {
    let row = |ops_per_s: f64, reps: &[f64]| {
        let mut r = Row::empty("ptm", "orec-lazy", serde_json::json!({}));
        r.ops_per_s = ops_per_s;
        r.set_extra("rep_ns_per_op", reps.to_vec());
        r
    };
    // a is 2x, 1x and 3x as fast as b in its three rounds: 2x.
    let a = row(1.0, &[100.0, 200.0, 100.0]);
    let b = row(1.0, &[200.0, 200.0, 300.0]);
    assert_eq!(ferrite_bench::claims::ptm::ratio(&a, &b), 2.0);
    assert_eq!(ferrite_bench::claims::ptm::ratio(&b, &a), 0.5);
    // Without paired repetitions: the throughputs.
    let c = row(3.0, &[1.0, 2.0]);
    assert_eq!(ferrite_bench::claims::ptm::ratio(&c, &a), 3.0);
}
