//! The `engine` suite's own claims (issue 26), computed from its rows:
//! redb's benchmark phases against LMDB, redb and fjall
//! ([`redb_summarize`]) and single puts after a bulk load against a fresh
//! store ([`long_run_summarize`]). ferrite-bench's `suites::engine`
//! measures them.

use super::{Goal, Outcome};
use crate::names::ENGINES;
use crate::row::Row;

/// Suite name of every row.
pub const SUITE: &str = "engine";
/// Variant name of the LMDB rows (the baseline).
pub const LMDB: &str = "lmdb";
/// Variant of the redb rows.
pub const REDB: &str = "redb";
/// Variant of the fjall rows.
pub const FJALL: &str = "fjall";
/// The long-run workload's name in `FERRITE_ENGINE_WORKLOADS` and its
/// rows' `params.workload`.
pub const LONG_RUN: &str = "long-run";
/// Issue 26's target for the long run: loaded ≥ 0.5× fresh.
pub const LONG_RUN_TARGET: f64 = 0.5;

/// One outcome per phase (and thread count) of the redb rows in `rows`:
/// the best Ferrite engine's throughput ÷ the better of LMDB's and redb's
/// (≥ 1× means it beats both), with the ratios to each peer in the
/// detail. Nothing when the workload did not run.
pub fn redb_summarize(rows: &[Row]) -> Vec<Outcome> {
    let rows: Vec<&Row> = rows
        .iter()
        .filter(|r| {
            r.suite == SUITE
                && r.params["workload"]
                    .as_str()
                    .is_some_and(|w| w.starts_with("redb-"))
        })
        .collect();
    let mut keys: Vec<(String, usize)> = Vec::new();
    for r in &rows {
        let k = (
            r.params["workload"].as_str().unwrap_or("").to_string(),
            r.threads,
        );
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let goal = Goal::AtLeast(1.0);
    keys.into_iter()
        .map(|(w, threads)| {
            let group: Vec<&&Row> = rows
                .iter()
                .filter(|r| r.params["workload"] == w.as_str() && r.threads == threads)
                .collect();
            let tput = |v: &str| {
                group
                    .iter()
                    .find(|r| r.variant == v && !r.is_skipped() && r.ops_per_s > 0.0)
                    .map(|r| r.ops_per_s)
            };
            let best = ENGINES
                .iter()
                .filter_map(|&k| tput(k).map(|t| (k, t)))
                .max_by(|a, b| a.1.total_cmp(&b.1));
            let (lmdb, redb, fjall) = (tput(LMDB), tput(REDB), tput(FJALL));
            let peer = match (lmdb, redb) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            let measured = best.zip(peer).map(|((_, b), p)| b / p);
            let show = |p: Option<f64>| match (best, p) {
                (Some((_, b)), Some(p)) => format!("{:.2}×", b / p),
                _ => "-".into(),
            };
            let detail = match best {
                Some((name, _)) => format!(
                    "best engine {name}: ÷ lmdb {}, ÷ redb {}, ÷ fjall {}; target from issue 26",
                    show(lmdb),
                    show(redb),
                    show(fjall)
                ),
                None => group
                    .iter()
                    .find_map(|r| r.extra_val("skipped").and_then(|s| s.as_str()))
                    .map_or("no Ferrite row".into(), |s| format!("Ferrite skipped: {s}")),
            };
            let name = if w == "redb-threaded-read" {
                format!("best engine ÷ max(lmdb, redb), {w} x{threads}")
            } else {
                format!("best engine ÷ max(lmdb, redb), {w}")
            };
            Outcome {
                suite: SUITE.to_string(),
                figure: "redb bench".to_string(),
                name,
                measured,
                paper: None,
                paper_note: "redb's lmdb_benchmark phases".to_string(),
                goal,
                verdict: Outcome::judge(measured, goal),
                detail,
                unit: "×",
            }
        })
        .collect()
}

/// One claim per engine with long-run rows: the loaded store's single-put
/// throughput ÷ the fresh one's (medians), target ≥ [`LONG_RUN_TARGET`]×.
pub fn long_run_summarize(rows: &[Row]) -> Vec<Outcome> {
    let goal = Goal::AtLeast(LONG_RUN_TARGET);
    let mine: Vec<&Row> = rows
        .iter()
        .filter(|r| r.suite == SUITE && r.params["workload"] == LONG_RUN)
        .collect();
    ENGINES
        .iter()
        .filter(|k| mine.iter().any(|r| r.variant == **k))
        .map(|k| {
            let find = |store: &str| {
                mine.iter()
                    .find(|r| r.variant == *k && r.params["store"] == store)
                    .copied()
            };
            fn ok(r: Option<&Row>) -> Option<&Row> {
                r.filter(|r| {
                    r.extra.as_ref().and_then(|e| e.get("skipped")).is_none() && r.ops_per_s > 0.0
                })
            }
            let (fresh, loaded) = (ok(find("fresh")), ok(find("loaded")));
            let measured = fresh.zip(loaded).map(|(f, l)| l.ops_per_s / f.ops_per_s);
            let detail = match (fresh, loaded) {
                (Some(f), Some(l)) => format!(
                    "{:.0} puts/s after a {}-pair load vs {:.0}/s fresh; fences/put {:.2} vs {:.2}, lines/put {:.2} vs {:.2}; target from issue 26",
                    l.ops_per_s,
                    l.params["bulk"],
                    f.ops_per_s,
                    l.fences_per_op,
                    f.fences_per_op,
                    l.lines_per_op,
                    f.lines_per_op
                ),
                _ => find("loaded")
                    .and_then(|r| r.extra.as_ref()?.get("skipped")?.as_str().map(String::from))
                    .unwrap_or_else(|| "no row".into()),
            };
            Outcome {
                suite: SUITE.to_string(),
                figure: "long run".to_string(),
                name: format!("{k} single puts after a bulk load ÷ fresh"),
                measured,
                paper: None,
                paper_note: "issue 26: no cliff after a big transaction".to_string(),
                goal,
                verdict: Outcome::judge(measured, goal),
                detail,
                unit: "×",
            }
        })
        .collect()
}
