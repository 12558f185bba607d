//! The `ptm` suite's targets (issue 12) as ratios of rows of one run (printed
//! after the tables by [`print_summary`]).
//!
//! | target | ratio | goal |
//! |---|---|---|
//! | redo beats undo when fences are expensive [P3 Figs. 3–4] | `orec-lazy` / `orec-eager` under `adr`, on `tpcc-hash` and `bptree`, each thread count; fences per transaction beside (O(1) vs O(W)) | ≥ 1.3 |
//! | eADR helps redo [P3 Figs. 3–4] | `eadr` / `adr` for `orec-lazy` on `tpcc-hash` | ≥ 1.3 |
//! | eADR's gain on every workload [P3 Figs. 3–4] | `eadr` / `adr` per algorithm, range over workloads and threads | stated |
//! | PDRAM, PDRAM-Lite [P3 Figs. 6–7] | `pdram` / `eadr` and `pdram-lite` / `eadr`, range over workloads and threads (and `volatile` / `eadr`) | stated, no goal: on this machine they issue what `eadr` issues |
//! | fence removal [P3 Table III] | `adr` with fence removal / `adr`, per algorithm, range and median over workloads and threads | P3: +7 to +27 % (met when the median falls in it) |
//! | PTM B+tree ≥ PMDK | `orec-*` / `pmdk-tx` on the peers' `bptree` insert workload | ≥ 1.0 |
//!
//! Every ratio pairs the repetitions of the two rows ([`ratio`]).
//!
//! Informational lines: commits per abort of `orec-lazy` over `orec-eager`
//! on `tpcc-hash` at 2 threads under `adr` (P3 Tables I/II: ≈ 6–8×) and
//! the largest redo log per workload (P3 §IV-B: ≤ 36–37 lines).

// A target's verdict is a claim's: `NotRun` when its rows are absent.
use super::{Goal, Outcome, Verdict, param_text as s};
use crate::names::{PMDK_TX, PTM_ALGORITHMS};
use crate::row::Row;
use ferrite_pmem::{Domain, FlushKind};
use std::fmt::Write as _;

/// The suite's name in its rows.
pub const SUITE: &str = "ptm";

/// One line of the summary.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    /// What is compared (e.g. `orec-lazy/orec-eager tpcc-hash adr x1`).
    pub name: String,
    /// The measured ratio, if the rows were there.
    pub ratio: Option<f64>,
    /// The goal the ratio must reach (`ratio >= goal`), if any.
    pub goal: Option<f64>,
    pub verdict: Verdict,
    /// The figures beside the ratio.
    pub detail: String,
    /// The band the ratio must fall in, for targets stated as a range
    /// (fence removal: P3's +7 to +27 %).
    pub band: Option<(f64, f64)>,
    /// The paper's figure or table the target reproduces.
    pub figure: &'static str,
    /// What the paper reports there.
    pub paper: &'static str,
}

// What P3 reports for each kind of target (003_….txt: §III-B line 119,
// Figs. 3-4 lines 126-129; Table III line 155; Figs. 6-7 lines 189-192 and
// the conclusion, line 253).
const REDO_UNDO: (&str, &str) = (
    "P3 Figs. 3-4",
    "redo outperforms undo in almost every case under ADR (§III-B)",
);
const EADR: (&str, &str) = ("P3 Figs. 3-4", "eADR gains on every workload");
const PDRAM: (&str, &str) = (
    "P3 Figs. 6-7",
    "PDRAM largely closes the gap to DRAM, PDRAM-Lite does not",
);
const FENCE_REMOVAL: (&str, &str) = ("P3 Table III", "+7 to +27 %");

fn extra(r: &Row, key: &str) -> Option<f64> {
    r.extra.as_ref()?.get(key)?.as_f64()
}

/// The row of `variant` in experiment `exp` with the given params.
fn find<'a>(
    rows: &'a [Row],
    exp: &str,
    variant: &str,
    workload: &str,
    domain: Domain,
    threads: usize,
    fence_removal: bool,
) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.suite == SUITE
            && r.variant == variant
            && s(r, "experiment").as_deref() == Some(exp)
            && s(r, "workload").as_deref() == Some(workload)
            && s(r, "domain").as_deref() == Some(domain.name())
            && r.threads == threads
            && s(r, "fence_removal").as_deref().unwrap_or("false") == fence_removal.to_string()
            && r.ops_per_s > 0.0
            && r.extra.as_ref().is_none_or(|e| e.get("failed").is_none())
    })
}

/// Throughput of `a` over `b`: the median over repetitions of the
/// per-repetition ratio when both rows carry `rep_ns_per_op` of the same
/// length (rows of one group: their `k`-th repetitions ran in the same
/// round of the interleaving, so slow drifts of a shared machine cancel),
/// else the ratio of their throughputs.
pub fn ratio(a: &Row, b: &Row) -> f64 {
    let reps = |r: &Row| -> Option<Vec<f64>> {
        r.extra
            .as_ref()?
            .get("rep_ns_per_op")?
            .as_array()?
            .iter()
            .map(|v| v.as_f64())
            .collect()
    };
    if let (Some(x), Some(y)) = (reps(a), reps(b))
        && x.len() == y.len()
        && !x.is_empty()
        && x.iter().chain(&y).all(|&v| v > 0.0)
    {
        let per: Vec<f64> = x.iter().zip(&y).map(|(x, y)| y / x).collect();
        return crate::median(&per);
    }
    a.ops_per_s / b.ops_per_s
}

fn goal_target(
    name: String,
    ratio: Option<f64>,
    goal: f64,
    detail: String,
    (figure, paper): (&'static str, &'static str),
) -> Target {
    let verdict = match ratio {
        None => Verdict::NotRun,
        Some(r) if r >= goal => Verdict::Met,
        Some(_) => Verdict::Missed,
    };
    Target {
        name,
        ratio,
        goal: Some(goal),
        verdict,
        detail,
        band: None,
        figure,
        paper,
    }
}

fn f2(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

/// Thread counts present in the rows, ascending.
fn thread_counts(rows: &[Row]) -> Vec<usize> {
    let mut t: Vec<usize> = rows
        .iter()
        .filter(|r| r.suite == SUITE)
        .map(|r| r.threads)
        .collect();
    t.sort_unstable();
    t.dedup();
    t
}

/// Workloads of the matrix present in the rows, in order of appearance.
fn matrix_workloads(rows: &[Row]) -> Vec<String> {
    let mut w: Vec<String> = Vec::new();
    for r in rows {
        if r.suite == SUITE
            && s(r, "experiment").as_deref() == Some("matrix")
            && let Some(n) = s(r, "workload")
            && !w.contains(&n)
        {
            w.push(n);
        }
    }
    w
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(crate::median(v))
}

/// The targets of the module documentation, computed from `rows`.
pub fn summarize(rows: &[Row]) -> Vec<Target> {
    let mut out = Vec::new();
    let threads = thread_counts(rows);
    let workloads = matrix_workloads(rows);
    redo_vs_undo(rows, &threads, &mut out);
    eadr_vs_adr(rows, &threads, &mut out);
    pdram_vs_eadr(rows, &threads, &workloads, &mut out);
    eadr_gain(rows, &threads, &workloads, &mut out);
    fence_removal(rows, &threads, &workloads, &mut out);
    vs_pmdk(rows, &threads, &mut out);
    commits_per_abort(rows, &threads, &mut out);
    largest_log(rows, &workloads, &mut out);
    out
}

/// Target 1 of the module docs: redo (orec-lazy) against undo
/// (orec-eager) under adr, per workload and thread count [P3].
fn redo_vs_undo(rows: &[Row], threads: &[usize], out: &mut Vec<Target>) {
    let [eager, lazy] = PTM_ALGORITHMS;
    let m = "matrix";
    // 1. Redo vs undo under adr.
    for w in ["tpcc-hash", "bptree"] {
        for &t in threads {
            let e = find(rows, m, eager, w, Domain::Adr, t, false);
            let l = find(rows, m, lazy, w, Domain::Adr, t, false);
            let r = e.zip(l).map(|(e, l)| ratio(l, e));
            let detail = format!(
                "fences/tx eager {} vs lazy {}; PTM fences/writer eager {} vs lazy {}; aborts/commit eager {} vs lazy {}",
                f2(e.and_then(|r| extra(r, "fences_per_tx"))),
                f2(l.and_then(|r| extra(r, "fences_per_tx"))),
                f2(e.and_then(|r| extra(r, "ptm_fences_per_writer"))),
                f2(l.and_then(|r| extra(r, "ptm_fences_per_writer"))),
                f2(e.and_then(|r| extra(r, "aborts_per_commit"))),
                f2(l.and_then(|r| extra(r, "aborts_per_commit"))),
            );
            out.push(goal_target(
                format!("orec-lazy/orec-eager {w} adr x{t}"),
                r,
                1.3,
                detail,
                REDO_UNDO,
            ));
        }
    }
}

/// Target 2 of the module docs: eADR against ADR for orec-lazy on TPC-C
/// (hash), per thread count.
fn eadr_vs_adr(rows: &[Row], threads: &[usize], out: &mut Vec<Target>) {
    let [_, lazy] = PTM_ALGORITHMS;
    let m = "matrix";
    // 2. eadr vs adr for orec-lazy on tpcc-hash.
    for &t in threads {
        let a = find(rows, m, lazy, "tpcc-hash", Domain::Adr, t, false);
        let e = find(rows, m, lazy, "tpcc-hash", Domain::Eadr, t, false);
        let r = a.zip(e).map(|(a, e)| ratio(e, a));
        let detail = format!(
            "fences/tx adr {} vs eadr {}; lines/tx adr {} vs eadr {}",
            f2(a.and_then(|r| extra(r, "fences_per_tx"))),
            f2(e.and_then(|r| extra(r, "fences_per_tx"))),
            f2(a.and_then(|r| extra(r, "lines_per_tx"))),
            f2(e.and_then(|r| extra(r, "lines_per_tx"))),
        );
        out.push(goal_target(
            format!("eadr/adr orec-lazy tpcc-hash x{t}"),
            r,
            1.3,
            detail,
            EADR,
        ));
    }
}

/// Target 3 of the module docs: pdram, pdram-lite and volatile against
/// eadr, over every workload and thread count of the matrix.
fn pdram_vs_eadr(rows: &[Row], threads: &[usize], workloads: &[String], out: &mut Vec<Target>) {
    let m = "matrix";
    // 3. pdram, pdram-lite (and volatile) against eadr.
    for alg in PTM_ALGORITHMS {
        for d in [Domain::Pdram, Domain::PdramLite, Domain::Volatile] {
            let mut v = Vec::new();
            for w in workloads {
                for &t in threads {
                    if let (Some(x), Some(e)) = (
                        find(rows, m, alg, w, d, t, false),
                        find(rows, m, alg, w, Domain::Eadr, t, false),
                    ) {
                        v.push(ratio(x, e));
                    }
                }
            }
            let what = if d == Domain::Volatile {
                "the DRAM bound: no flush, no fence, nothing durable"
            } else {
                "on this machine the same instructions as eadr (no flush, no fence); on hardware pdram keeps the whole pool in DRAM, pdram-lite only the redo logs"
            };
            out.push(range_target(
                format!("{}/eadr {}", d.name(), alg),
                &mut v,
                None,
                what,
                PDRAM,
            ));
        }
    }
}

/// eADR's gain over ADR per workload, per algorithm.
fn eadr_gain(rows: &[Row], threads: &[usize], workloads: &[String], out: &mut Vec<Target>) {
    let m = "matrix";
    // eADR's gain per workload [P3 Figs. 3-4: every workload, least Vacation].
    for alg in PTM_ALGORITHMS {
        let mut v = Vec::new();
        let mut parts = Vec::new();
        for w in workloads {
            for &t in threads {
                if let (Some(e), Some(a)) = (
                    find(rows, m, alg, w, Domain::Eadr, t, false),
                    find(rows, m, alg, w, Domain::Adr, t, false),
                ) {
                    let r = ratio(e, a);
                    v.push(r);
                    parts.push(format!("{w} x{t} {r:.2}"));
                }
            }
        }
        out.push(range_target(
            format!("eadr/adr {}", alg),
            &mut v,
            None,
            &format!(
                "P3: a gain on every workload, least on Vacation; {}",
                parts.join(", ")
            ),
            EADR,
        ));
    }
}

/// Target 4 of the module docs: the fence-removal variant against the
/// plain one under adr.
fn fence_removal(rows: &[Row], threads: &[usize], workloads: &[String], out: &mut Vec<Target>) {
    let m = "matrix";
    // 4. Fence removal against P3's 7-27 %.
    for alg in PTM_ALGORITHMS {
        let mut v = Vec::new();
        let mut parts = Vec::new();
        for w in workloads {
            for &t in threads {
                if let (Some(x), Some(b)) = (
                    find(rows, m, alg, w, Domain::Adr, t, true),
                    find(rows, m, alg, w, Domain::Adr, t, false),
                ) {
                    let r = ratio(x, b);
                    v.push(r);
                    parts.push(format!("{w} x{t} {:+.0} %", (r - 1.0) * 100.0));
                }
            }
        }
        out.push(range_target(
            format!("fence removal {} adr", alg),
            &mut v,
            Some((1.07, 1.27)),
            &format!("P3 Table III: +7 to +27 %; {}", parts.join(", ")),
            FENCE_REMOVAL,
        ));
    }
}

/// Target 5 of the module docs: the PTMs' B+tree inserts against PMDK's
/// transactions (the peers experiment).
fn vs_pmdk(rows: &[Row], threads: &[usize], out: &mut Vec<Target>) {
    // 5. PTM B+tree insert vs PMDK's.
    for &t in threads {
        let p = find(rows, "peers", PMDK_TX, "bptree", peer_domain(), t, false);
        let redo = find(rows, "peers", "tx-redo", "bptree", peer_domain(), t, false);
        for alg in PTM_ALGORITHMS {
            let x = find(rows, "peers", alg, "bptree", peer_domain(), t, false);
            let r = x.zip(p).map(|(x, p)| ratio(x, p));
            let detail = format!(
                "vs tx-redo {}; PTM keys 8 B, PMDK 32 B; p99 {} vs {} us",
                f2(x.zip(redo).map(|(x, r)| ratio(x, r))),
                f2(x.and_then(|r| extra(r, "p99_us"))),
                f2(p.and_then(|r| extra(r, "p99_us"))),
            );
            let mut tg = goal_target(
                format!("{}/pmdk-tx bptree insert x{t}", alg),
                r,
                1.0,
                detail,
                ("issue 12", "no PMDK in P3"),
            );
            if p.is_none() && x.is_some() {
                tg.detail
                    .push_str(" (no pmdk-tx row: build with --features pmdk)");
            }
            out.push(tg);
        }
    }
}

/// Informational: commits per abort, lazy over eager, at every thread
/// count above one.
fn commits_per_abort(rows: &[Row], threads: &[usize], out: &mut Vec<Target>) {
    let [eager, lazy] = PTM_ALGORITHMS;
    let m = "matrix";
    // Informational: commits per abort (P3 Tables I/II) and redo-log sizes.
    for &t in threads.iter().filter(|&&t| t > 1) {
        let e = find(rows, m, eager, "tpcc-hash", Domain::Adr, t, false);
        let l = find(rows, m, lazy, "tpcc-hash", Domain::Adr, t, false);
        let cpa = |r: Option<&Row>| {
            r.and_then(|r| extra(r, "aborts_per_commit"))
                .map(|a| if a > 0.0 { 1.0 / a } else { f64::INFINITY })
        };
        let (ce, cl) = (cpa(e), cpa(l));
        out.push(Target {
            name: format!("commits/abort lazy over eager tpcc-hash adr x{t}"),
            ratio: ce.zip(cl).map(|(e, l)| l / e),
            goal: None,
            verdict: if e.is_some() && l.is_some() {
                Verdict::Info
            } else {
                Verdict::NotRun
            },
            detail: format!(
                "commits/abort eager {} lazy {} (P3 at 2 threads: undo 3.3-4.6, redo 21.5-27.6)",
                f2(ce),
                f2(cl)
            ),
            band: None,
            figure: "P3 Tables I-II",
            paper: "commits/abort at 2 threads: undo 3.3-4.6, redo 21.5-27.6",
        });
    }
}

/// Informational: orec-lazy's largest redo log (lines) per workload.
fn largest_log(rows: &[Row], workloads: &[String], out: &mut Vec<Target>) {
    let [_, lazy] = PTM_ALGORITHMS;
    let m = "matrix";
    let logs: Vec<String> = workloads
        .iter()
        .filter_map(|w| {
            let max = rows
                .iter()
                .filter(|r| {
                    r.suite == SUITE
                        && r.variant == lazy
                        && s(r, "experiment").as_deref() == Some(m)
                        && s(r, "workload").as_deref() == Some(w)
                })
                .filter_map(|r| extra(r, "max_log_lines"))
                .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))))?;
            Some(format!("{w} {max:.0}"))
        })
        .collect();
    out.push(Target {
        name: "largest redo log (lines), orec-lazy".into(),
        ratio: None,
        goal: None,
        verdict: if logs.is_empty() {
            Verdict::NotRun
        } else {
            Verdict::Info
        },
        detail: format!("{} (P3: <= 36 TPC-C hash, <= 37 Vacation)", logs.join(", ")),
        band: None,
        figure: "P3 §IV-B",
        paper: "redo log <= 36 lines TPC-C hash, <= 37 Vacation",
    });
}

/// The domain the peers' rows (the `tx` suite's and the `ptm` suite's
/// `peers` experiment) run in on this machine: `adr` where the CPU has a
/// flush instruction, else `eadr` (nothing to flush with).
pub fn peer_domain() -> Domain {
    if FlushKind::best().is_some() {
        Domain::Adr
    } else {
        Domain::Eadr
    }
}

/// A target over several ratios: its median, with the range in the detail;
/// met when the median falls in `band` (if given).
fn range_target(
    name: String,
    v: &mut [f64],
    band: Option<(f64, f64)>,
    what: &str,
    (figure, paper): (&'static str, &'static str),
) -> Target {
    let n = v.len();
    let med = median(v);
    let (lo, hi) = (v.first().copied(), v.last().copied());
    let verdict = match (med, band) {
        (None, _) => Verdict::NotRun,
        (Some(_), None) => Verdict::Info,
        (Some(m), Some((a, b))) if m >= a && m <= b => Verdict::Met,
        (Some(_), Some(_)) => Verdict::Missed,
    };
    let in_band = band.map(|(a, b)| v.iter().filter(|&&x| x >= a && x <= b).count());
    let mut detail = format!("median of {n}, range {} to {}", f2(lo), f2(hi));
    if let Some((a, b)) = band {
        let _ = write!(detail, ", band {a:.2}-{b:.2}");
    }
    if let Some(k) = in_band {
        let _ = write!(detail, ", {k} of {n} in the band");
    }
    let _ = write!(detail, "; {what}");
    Target {
        name,
        ratio: med,
        goal: None,
        verdict,
        detail,
        band,
        figure,
        paper,
    }
}

/// The suite's part of the headline claims as text, with details (empty
/// when `rows` hold no `ptm` rows): [`summarize`] through
/// [`super::format_outcomes`], the one formatter of every claim.
pub fn format_summary(rows: &[Row]) -> String {
    if !rows.iter().any(|r| r.suite == SUITE) {
        return String::new();
    }
    let outcomes: Vec<Outcome> = summarize(rows).into_iter().map(Into::into).collect();
    format!(
        "\nptm summary: the targets as ratios of rows of this run\n{}",
        super::format_outcomes(&outcomes, true)
    )
}

/// Prints [`format_summary`] on stdout.
pub fn print_summary(rows: &[Row]) {
    let s = format_summary(rows);
    if !s.is_empty() {
        print!("{s}");
    }
}

impl From<Target> for Outcome {
    fn from(t: Target) -> Outcome {
        Outcome {
            suite: SUITE.to_string(),
            figure: t.figure.to_string(),
            name: t.name,
            measured: t.ratio,
            paper: None,
            paper_note: t.paper.to_string(),
            goal: match (t.goal, t.band) {
                (Some(g), _) => Goal::AtLeast(g),
                (None, Some((lo, hi))) => Goal::Within(lo, hi),
                (None, None) => Goal::Stated,
            },
            verdict: t.verdict,
            detail: t.detail,
            unit: "×",
        }
    }
}
