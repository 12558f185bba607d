//! The `server` suite's targets (issue 13) and P1's memcached claim
//! [P1 §3.4.6] as [`Outcome`]s, computed from the suite's rows (see
//! ferrite-bench's `suites::server` for how they are measured).

use super::{Goal, Outcome};
use crate::names::{PMDK_STORE, SERVER_STORES as STORES};
use crate::row::Row;

/// Suite name of every row.
pub const SUITE: &str = "server";
/// Variant name of memcached's restartable-mode row of the kill test.
pub const MEMCACHED_RESTARTABLE: &str = "memcached-restartable";
/// `params.mix` of the kill-9 survival rows.
pub const KILL_MIX: &str = "kill-9";
/// `params.mix` of P1's one-thread comparison rows (the suite's `Plan::p1`).
pub const P1_MIX: &str = "p1-95/5";

fn extra_f64(r: &Row, k: &str) -> Option<f64> {
    r.extra.as_ref()?.get(k)?.as_f64()
}

/// P1's claim [P1 §3.4.6, Fig. 3.10]: clobber logging ≥ 1.8× PMDK's undo
/// transactions in memcached on the 95/5 mix with one server thread. When
/// the PMDK store's rows exist (feature `pmdk`), the ratio is clobber ÷
/// `pmdk-undo`, P1's own comparison; otherwise it is the fallback,
/// clobber ÷ Ferrite's own undo store. Both through memcaslap
/// (the suite's `Plan::p1`) and in process (its `store` layer rows), with the other
/// ratios and the fences per operation beside it.
pub fn p1_outcomes(rows: &[&Row]) -> Vec<Outcome> {
    let row = |store: &str| {
        rows.iter().find(|r| {
            r.variant == store && r.params.get("mix").and_then(|m| m.as_str()) == Some(P1_MIX)
        })
    };
    let tps = |store: &str| row(store).map(|r| r.ops_per_s).filter(|t| *t > 0.0);
    let mut out = Vec::new();
    for (prefix, what) in [
        ("ferrite-", "memcaslap, 1 server thread, no group commit"),
        ("store-", "the item store in process, 1 thread"),
    ] {
        let undo = tps(&format!("{prefix}tx-undo"));
        let pmdk = tps(&format!("{prefix}{PMDK_STORE}"));
        if undo.is_none()
            && pmdk.is_none()
            && prefix == "store-"
            && row("ferrite-tx-undo").is_none()
        {
            continue;
        }
        let over =
            |s: &str, den: Option<f64>| tps(&format!("{prefix}{s}")).zip(den).map(|(a, u)| a / u);
        let pmdk_run = row(&format!("{prefix}{PMDK_STORE}")).is_some();
        let (den, den_name) = if pmdk_run {
            (pmdk, "PMDK undo")
        } else {
            (undo, "undo")
        };
        let clobber = over("tx-clobber", den);
        let mut parts = Vec::new();
        if pmdk_run {
            if let Some(r) = over("tx-undo", pmdk) {
                parts.push(format!("Ferrite undo ÷ PMDK undo {r:.2}×"));
            }
            if let Some(r) = over("tx-clobber", undo) {
                parts.push(format!("clobber ÷ Ferrite undo {r:.2}×"));
            }
        }
        if let Some(r) = over("tx-redo", undo) {
            parts.push(format!("redo ÷ undo {r:.2}×"));
        }
        let mut detail = parts.join(", ");
        if prefix == "store-" {
            let f = |s: &str| {
                row(&format!("store-{s}")).map_or("-".into(), |r| {
                    if r.counters_observed {
                        format!("{:.1}", r.fences_per_op)
                    } else {
                        "n/a".into()
                    }
                })
            };
            detail.push_str(&format!(
                "; fences/op undo {}, redo {}, clobber {}",
                f("tx-undo"),
                f("tx-redo"),
                f("tx-clobber")
            ));
            if pmdk_run {
                detail.push_str(&format!(", PMDK undo {}", f(PMDK_STORE)));
            }
        }
        let goal = Goal::AtLeast(1.8);
        out.push(Outcome {
            suite: SUITE.to_string(),
            figure: "P1 §3.4.6".to_string(),
            name: format!("clobber ÷ {den_name} store, {P1_MIX} ({what})"),
            measured: clobber,
            paper: Some(1.8),
            paper_note: "clobber ÷ PMDK's undo transactions, memcached 95/5, 1 thread".to_string(),
            goal,
            verdict: Outcome::judge(clobber, goal),
            detail,
            unit: "×",
        });
    }
    out
}

/// The suite's targets (issue 13) as [`Outcome`]s: per
/// Ferrite store, its throughput ÷ memcached's on `5/95` (target ≥ 0.8×)
/// and `95/5` (target ≥ 0.5×) — every store of [`STORES`](crate::names::SERVER_STORES), `not run` when
/// its row is absent — and on P3's mix (stated); per kill -9 row, the
/// share of acknowledged keys that survived (Ferrite: target = 1;
/// memcached's restartable mode: stated), with the restart time.
pub fn summarize(rows: &[Row]) -> Vec<Outcome> {
    let rows: Vec<&Row> = rows.iter().filter(|r| r.suite == SUITE).collect();
    let mix = |r: &Row| {
        r.params
            .get("mix")
            .and_then(|m| m.as_str())
            .unwrap_or("")
            .to_string()
    };
    let mut stores: Vec<String> = STORES.iter().map(|s| format!("ferrite-{s}")).collect();
    for r in &rows {
        // P1's one-thread rows have their own outcomes (`p1_outcomes`).
        if r.variant.starts_with("ferrite-")
            && mix(r) != KILL_MIX
            && mix(r) != P1_MIX
            && !stores.contains(&r.variant)
        {
            stores.push(r.variant.clone());
        }
    }
    let outcome = |name: String, measured: Option<f64>, goal: Goal, detail: String| Outcome {
        suite: SUITE.to_string(),
        figure: "issue 13".to_string(),
        name,
        measured,
        paper: None,
        paper_note: String::new(),
        goal,
        verdict: Outcome::judge(measured, goal),
        detail,
        unit: "×",
    };
    let mut out = Vec::new();
    for s in &stores {
        for (m, goal) in [
            ("5/95", Goal::AtLeast(0.8)),
            ("95/5", Goal::AtLeast(0.5)),
            ("p3-50/50", Goal::Stated),
        ] {
            let row = rows.iter().find(|r| r.variant == *s && mix(r) == m);
            if row.is_none() && goal == Goal::Stated {
                continue;
            }
            let q = row.and_then(|r| r.ratio_vs_baseline);
            let detail = row.map_or(String::new(), |r| {
                format!(
                    "{:.0} ops/s, p99 {} us",
                    r.ops_per_s,
                    extra_f64(r, "p99_us").map_or("-".into(), |v| format!("{v:.0}"))
                )
            });
            out.push(outcome(format!("{s} ÷ memcached, {m}"), q, goal, detail));
        }
    }
    out.extend(p1_outcomes(&rows));
    for r in rows.iter().filter(|r| mix(r) == KILL_MIX) {
        let (kept, acked) = (extra_f64(r, "survived"), extra_f64(r, "acknowledged"));
        let share = kept.zip(acked).and_then(|(k, a)| (a > 0.0).then(|| k / a));
        let goal = if r.variant == MEMCACHED_RESTARTABLE {
            Goal::Stated
        } else {
            Goal::Within(1.0, 1.0)
        };
        let show = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
        out.push(outcome(
            format!("kill -9: {} keys kept ÷ acknowledged", r.variant),
            share,
            goal,
            format!(
                "kept {} of {} acknowledged keys, restart {} ms",
                show(kept),
                show(acked),
                show(extra_f64(r, "restart_ms"))
            ),
        ));
    }
    out
}

/// Prints the suite's part of the headline claims ([`summarize`], with
/// details). Prints nothing without `server` rows.
pub fn print_summary(rows: &[Row]) {
    if !rows.iter().any(|r| r.suite == SUITE) {
        return;
    }
    println!("\nserver summary (throughput ÷ memcached's, same run):");
    print!("{}", super::format_outcomes(&summarize(rows), true));
}
