//! The headline claims: one list of what Ferrite reproduces, each computed
//! from rows of one run and set beside the paper's figure and value.
//!
//! A [`Claim`] names the rows it is computed from — suite, variants,
//! params, threads ([`Pick`]) — how ([`How`]: a ratio of the throughputs of
//! the median repetitions, a ratio of times, or a per-operation counter),
//! the paper's figure and reported value, and the target ([`Goal`]: `≥`,
//! `≤` or within a band). Targets come from the issue that built the suite
//! when it set one (the issue number is in the claim's `source`), else
//! from the direction of the paper's finding (≥ 1×: the same winner; the
//! magnitude depends on the medium — Optane there, DRAM here).
//!
//! [`evaluate`] computes every claim of [`CLAIMS`] (in [`table`]) plus the
//! targets of the `ptm` suite ([`ptm::summarize`]), the `server` suite
//! ([`server::summarize`]) and the `engine` suite's redb and long-run rows
//! ([`engine::redb_summarize`], [`engine::long_run_summarize`]), into
//! [`Outcome`]s; a claim whose rows are absent is [`Verdict::NotRun`].
//! [`format_summary`] is what `ferrite bench` prints at its end and what
//! `ferrite report` puts in its page.
//!
//! Paper values are taken from the papers' text (`../shared/papers/`): P0
//! is cited by section and figure and by the line of the text copy
//! (`000_….txt`, which carries no page numbers); P1 (a thesis) by figure
//! and page of its list of figures.

pub mod engine;
pub mod ptm;
pub mod server;
pub mod table;

use crate::row::Row;
use std::fmt::Write as _;

pub use table::CLAIMS;

/// The target a measured value must reach.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Goal {
    /// `value >= x`.
    AtLeast(f64),
    /// `value <= x`.
    AtMost(f64),
    /// `lo <= value <= hi`.
    Within(f64, f64),
    /// Measured and stated, no target.
    Stated,
}

impl Goal {
    /// Whether `v` meets the goal (`None` for [`Goal::Stated`]).
    pub fn holds(self, v: f64) -> Option<bool> {
        match self {
            Goal::AtLeast(x) => Some(v >= x),
            Goal::AtMost(x) => Some(v <= x),
            Goal::Within(lo, hi) => Some(v >= lo && v <= hi),
            Goal::Stated => None,
        }
    }

    /// The goal as text, e.g. `≥ 2.5×`.
    pub fn describe(self) -> String {
        match self {
            Goal::AtLeast(x) => format!("≥ {}", num(x)),
            Goal::AtMost(x) => format!("≤ {}", num(x)),
            Goal::Within(lo, hi) if lo == hi => format!("= {}", num(lo)),
            Goal::Within(lo, hi) => format!("{}–{}", num(lo), num(hi)),
            Goal::Stated => "stated".into(),
        }
    }
}

/// `x` with as few decimals as it needs (at most 2).
fn num(x: f64) -> String {
    let s = format!("{x:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// How a claim came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Met,
    Missed,
    /// Measured, no target.
    Info,
    /// The rows it needs are not in this run.
    NotRun,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::Missed => "missed",
            Verdict::Info => "info",
            Verdict::NotRun => "not run",
        }
    }
}

/// Which rows of a suite a claim reads: the first row (in run order) of
/// one of `variants` with `threads` threads and every `(key, value)` of
/// `params` (values compared as text: `64`, `true`, `p2-f`). With several
/// variants, the one giving the largest value is taken (the best Ferrite
/// engine, say).
#[derive(Clone, Copy, Debug)]
pub struct Pick {
    pub variants: &'static [&'static str],
    pub params: &'static [(&'static str, &'static str)],
    pub threads: usize,
}

/// A counter of a row.
#[derive(Clone, Copy, Debug)]
pub enum Field {
    FencesPerOp,
    LinesPerOp,
    /// `extra[key]`, a number.
    Extra(&'static str),
}

/// How a claim's value is computed.
#[derive(Clone, Copy, Debug)]
pub enum How {
    /// `num.ops_per_s / den.ops_per_s`: the ratio of the throughputs of
    /// the two rows' median repetitions (> 1: `num` is faster).
    Throughput { num: Pick, den: Pick },
    /// `num.ns_per_op / den.ns_per_op`: `num`'s time as a multiple of
    /// `den`'s (against the floor: how far from the physical limit).
    Time { num: Pick, den: Pick },
    /// A counter of one row.
    Value { of: Pick, field: Field },
    /// `field(num) / field(den)`.
    FieldRatio { num: Pick, den: Pick, field: Field },
}

/// One headline claim. See the module documentation.
#[derive(Clone, Copy, Debug)]
pub struct Claim {
    /// Suite whose rows it reads.
    pub suite: &'static str,
    /// The paper's figure (or table) it reproduces, e.g. `P0 Fig. 8`.
    pub figure: &'static str,
    /// What is compared, e.g. `poplog-padded ÷ pmdk-pmemlog, 64 B`.
    pub name: &'static str,
    pub how: How,
    /// The paper's value, when it states one.
    pub paper: Option<f64>,
    /// The paper's statement, e.g. `≈2× (§3.3.2)`.
    pub paper_note: &'static str,
    pub goal: Goal,
    /// Where the target comes from (`issue 3`, `paper`).
    pub source: &'static str,
}

/// A claim (or a suite's own target) computed from rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub suite: String,
    pub figure: String,
    pub name: String,
    pub measured: Option<f64>,
    pub paper: Option<f64>,
    pub paper_note: String,
    pub goal: Goal,
    pub verdict: Verdict,
    /// Figures beside the value (counters, ranges, rows used).
    pub detail: String,
    /// `×` for ratios, empty for counts (fences per op, lines).
    pub unit: &'static str,
}

impl Outcome {
    /// A value of this outcome as text: `2.91×`, `1.00`, `-` when absent.
    pub fn show(&self, v: Option<f64>) -> String {
        match v {
            Some(_) if self.unit.is_empty() => show(v).trim_end_matches('×').to_string(),
            _ => show(v),
        }
    }
}

impl Outcome {
    /// The verdict of `measured` against `goal`.
    pub fn judge(measured: Option<f64>, goal: Goal) -> Verdict {
        match measured {
            None => Verdict::NotRun,
            Some(v) => match goal.holds(v) {
                None => Verdict::Info,
                Some(true) => Verdict::Met,
                Some(false) => Verdict::Missed,
            },
        }
    }
}

/// Rows of `variants` whose params hold every `(key, value)` of `params`,
/// at one thread.
pub const fn pick(
    variants: &'static [&'static str],
    params: &'static [(&'static str, &'static str)],
) -> Pick {
    Pick {
        variants,
        params,
        threads: 1,
    }
}
/// `params[key]` as text (`64`, `true`, `p2-f`), `None` when absent.
pub fn param_text(r: &Row, key: &str) -> Option<String> {
    r.params.get(key).and_then(|v| match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    })
}

/// Whether a row measured something (not a skipped or failed system, not
/// a data row such as `fig8-series`).
fn measured(r: &Row) -> bool {
    let flagged = r
        .extra
        .as_ref()
        .is_some_and(|e| e.get("skipped").is_some() || e.get("failed").is_some());
    !flagged
}

impl Pick {
    /// The rows of `suite` this pick selects, one per variant (the first
    /// in run order), in the order of `variants`.
    pub fn rows<'a>(&self, suite: &str, rows: &'a [Row]) -> Vec<&'a Row> {
        self.variants
            .iter()
            .filter_map(|v| {
                rows.iter().find(|r| {
                    r.suite == suite
                        && r.variant == *v
                        && r.threads == self.threads
                        && measured(r)
                        && self
                            .params
                            .iter()
                            .all(|(k, want)| param_text(r, k).as_deref() == Some(*want))
                })
            })
            .collect()
    }
}

impl Field {
    fn of(self, r: &Row) -> Option<f64> {
        let v = match self {
            Field::FencesPerOp => r.counters_observed.then_some(r.fences_per_op)?,
            Field::LinesPerOp => r.counters_observed.then_some(r.lines_per_op)?,
            Field::Extra(k) => r.extra.as_ref()?.get(k)?.as_f64()?,
        };
        v.is_finite().then_some(v)
    }

    fn name(self) -> &'static str {
        match self {
            Field::FencesPerOp => "fences/op",
            Field::LinesPerOp => "lines/op",
            Field::Extra(k) => k,
        }
    }
}

fn positive(v: f64) -> Option<f64> {
    (v.is_finite() && v > 0.0).then_some(v)
}

impl Claim {
    /// The claim's value from `rows` and a note naming the rows used.
    pub fn compute(&self, rows: &[Row]) -> (Option<f64>, String) {
        let s = self.suite;
        // The best of the numerator's variants against one denominator.
        let ratio_of = |num: &Pick, den: &Pick, f: &dyn Fn(&Row, &Row) -> Option<f64>| {
            let Some(d) = den.rows(s, rows).into_iter().next() else {
                return (None, String::new());
            };
            let best = num
                .rows(s, rows)
                .into_iter()
                .filter_map(|n| f(n, d).map(|v| (v, n)))
                .max_by(|a, b| a.0.total_cmp(&b.0));
            match best {
                Some((v, n)) => (Some(v), format!("{} vs {}", n.variant, d.variant)),
                None => (None, String::new()),
            }
        };
        match self.how {
            How::Throughput { num, den } => ratio_of(&num, &den, &|n, d| {
                positive(n.ops_per_s)
                    .zip(positive(d.ops_per_s))
                    .map(|(a, b)| a / b)
            }),
            How::Time { num, den } => ratio_of(&num, &den, &|n, d| {
                positive(n.ns_per_op)
                    .zip(positive(d.ns_per_op))
                    .map(|(a, b)| a / b)
            }),
            How::FieldRatio { num, den, field } => ratio_of(&num, &den, &|n, d| {
                field
                    .of(n)
                    .zip(field.of(d).and_then(positive))
                    .map(|(a, b)| a / b)
            }),
            How::Value { of, field } => {
                let best = of
                    .rows(s, rows)
                    .into_iter()
                    .filter_map(|r| field.of(r).map(|v| (v, r)))
                    .max_by(|a, b| a.0.total_cmp(&b.0));
                match best {
                    Some((v, r)) => (Some(v), format!("{} of {}", field.name(), r.variant)),
                    None => (None, String::new()),
                }
            }
        }
    }

    /// The claim computed from `rows`.
    pub fn evaluate(&self, rows: &[Row]) -> Outcome {
        let (measured, detail) = self.compute(rows);
        Outcome {
            suite: self.suite.to_string(),
            figure: self.figure.to_string(),
            name: self.name.to_string(),
            measured,
            paper: self.paper,
            paper_note: self.paper_note.to_string(),
            goal: self.goal,
            verdict: Outcome::judge(measured, self.goal),
            detail: if detail.is_empty() {
                format!("target from {}", self.source)
            } else {
                format!("{detail}; target from {}", self.source)
            },
            // A counter of one row is a count; everything else a ratio.
            unit: match self.how {
                How::Value { .. } => "",
                _ => "×",
            },
        }
    }
}

/// Every claim computed from `rows`: [`CLAIMS`], then the `ptm` suite's
/// targets, the `server` suite's, the redb workload's and the long run's.
pub fn evaluate(rows: &[Row]) -> Vec<Outcome> {
    let mut out: Vec<Outcome> = CLAIMS.iter().map(|c| c.evaluate(rows)).collect();
    out.extend(ptm::summarize(rows).into_iter().map(Outcome::from));
    out.extend(server::summarize(rows));
    out.extend(engine::redb_summarize(rows));
    out.extend(engine::long_run_summarize(rows));
    out
}

/// A value as the summary prints it: `2.91×`, `-` when absent.
pub fn show(v: Option<f64>) -> String {
    match v {
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}×"),
        Some(v) => format!("{v:.2}×"),
        None => "-".into(),
    }
}

/// The outcomes as text lines: verdict, figure, name, measured value,
/// paper value, target; the detail on the next line when `detail`.
pub fn format_outcomes(outcomes: &[Outcome], detail: bool) -> String {
    let mut out = String::new();
    for o in outcomes {
        let paper = match (o.paper, o.paper_note.is_empty()) {
            (Some(p), _) => format!("paper {} ({})", o.show(Some(p)), o.paper_note),
            (None, false) => format!("paper: {}", o.paper_note),
            (None, true) => "paper: -".into(),
        };
        let _ = writeln!(
            out,
            "  [{:<7}] {:<14} {:<48} {:>8}  target {:<9} {paper}",
            o.verdict.name(),
            o.figure,
            o.name,
            o.show(o.measured),
            o.goal.describe(),
        );
        if detail && !o.detail.is_empty() {
            let _ = writeln!(out, "{:>24}{}", "", o.detail);
        }
    }
    out
}

/// The summary `ferrite bench` ends with: every claim, one line each,
/// and a count of verdicts.
pub fn format_summary(rows: &[Row]) -> String {
    // Claims of suites with no row in this run are counted, not listed:
    // after `ferrite bench server`, forty `not run` lines would bury the
    // server's own.
    let ran: std::collections::HashSet<&str> = rows.iter().map(|r| r.suite.as_str()).collect();
    let (outcomes, absent): (Vec<Outcome>, Vec<Outcome>) = evaluate(rows)
        .into_iter()
        .partition(|o| ran.contains(o.suite.as_str()));
    let count = |v: Verdict| outcomes.iter().filter(|o| o.verdict == v).count();
    let mut out = format!(
        "\nheadline claims ({} met, {} missed, {} stated, {} not run; measured ÷ paper where the paper states a value)\n",
        count(Verdict::Met),
        count(Verdict::Missed),
        count(Verdict::Info),
        count(Verdict::NotRun),
    );
    out.push_str(&format_outcomes(&outcomes, false));
    if !absent.is_empty() {
        out.push_str(&format!(
            "  ({} claims of suites that did not run are left out)\n",
            absent.len()
        ));
    }
    out
}

/// Prints [`format_summary`] on stdout.
pub fn print_summary(rows: &[Row]) {
    print!("{}", format_summary(rows));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(suite: &str, variant: &str, params: serde_json::Value, ops_per_s: f64) -> Row {
        let mut r = Row::empty(suite, variant, params);
        r.ops_per_s = ops_per_s;
        r.ns_per_op = 1e9 / ops_per_s;
        r.fences_per_op = 1.0;
        r
    }

    #[test]
    fn throughput_claim_is_a_ratio_of_the_picked_rows() {
        let c = CLAIMS
            .iter()
            .find(|c| c.name == "poplog-padded ÷ pmdk-pmemlog, 64 B")
            .unwrap();
        let rows = vec![
            row("log", "poplog-padded", json!({"bytes": 256}), 9.0),
            row("log", "poplog-padded", json!({"bytes": 64}), 6.0),
            row("log", "pmdk-pmemlog", json!({"bytes": 64}), 2.0),
        ];
        let o = c.evaluate(&rows);
        assert_eq!(o.measured, Some(3.0));
        assert_eq!(o.verdict, Verdict::Met);
        let slow = vec![
            rows[1].clone(),
            row("log", "pmdk-pmemlog", json!({"bytes": 64}), 4.0),
        ];
        assert_eq!(c.evaluate(&slow).verdict, Verdict::Missed);
        // Without the PMDK row the claim is not run, never a guess.
        assert_eq!(c.evaluate(&rows[..2]).verdict, Verdict::NotRun);
    }

    #[test]
    fn several_variants_take_the_best_and_skipped_rows_do_not_count() {
        let c = CLAIMS
            .iter()
            .find(|c| c.name == "best engine ÷ lmdb, p2-f (R50/U50)")
            .unwrap();
        let p = |v: &str| json!({"workload": "p2-f", "allocator": v, "domain": "adr"});
        let mut skipped = row("engine", "lsm", p("ferrite"), 100.0);
        skipped.set_extra("skipped", "not built");
        let rows = vec![
            row("engine", "inp", p("ferrite"), 3.0),
            row("engine", "cow", p("ferrite"), 5.0),
            row("engine", "cow", p("nstore-lock"), 50.0),
            skipped,
            row(
                "engine",
                "lmdb",
                json!({"workload": "p2-f", "allocator": "lmdb", "domain": "tmpfs"}),
                2.0,
            ),
        ];
        let o = c.evaluate(&rows);
        assert_eq!(o.measured, Some(2.5));
        assert!(o.detail.contains("cow vs lmdb"), "{}", o.detail);
    }

    #[test]
    fn goals_and_values() {
        assert_eq!(Goal::AtLeast(2.0).holds(2.0), Some(true));
        assert_eq!(Goal::AtMost(1.3).holds(1.31), Some(false));
        assert_eq!(Goal::Within(1.0, 1.0).holds(1.0), Some(true));
        assert_eq!(Goal::Stated.holds(1.0), None);
        assert_eq!(Goal::AtLeast(2.5).describe(), "≥ 2.5");
        assert_eq!(Goal::Within(1.0, 1.0).describe(), "= 1");
        let c = CLAIMS
            .iter()
            .find(|c| c.name == "poplog-padded fences per append")
            .unwrap();
        let mut r = row("log", "poplog-padded", json!({"bytes": 64}), 1.0);
        assert_eq!(c.evaluate(std::slice::from_ref(&r)).verdict, Verdict::Met);
        r.fences_per_op = 2.0;
        assert_eq!(
            c.evaluate(std::slice::from_ref(&r)).verdict,
            Verdict::Missed
        );
        // A peer whose counters are not observed has no fence count.
        r.counters_observed = false;
        assert_eq!(c.evaluate(&[r]).verdict, Verdict::NotRun);
    }

    #[test]
    fn summary_lists_the_claims_of_the_suites_that_ran_and_counts_the_rest() {
        // One row of the log suite: every log claim is listed (those its
        // rows cannot compute as `not run`), the others only counted.
        let rows = vec![row("log", "poplog-padded", json!({"bytes": 64}), 6.0)];
        let text = format_summary(&rows);
        let (log, other): (Vec<&Claim>, Vec<&Claim>) =
            CLAIMS.iter().partition(|c| c.suite == "log");
        assert!(!log.is_empty() && !other.is_empty());
        for c in &log {
            assert!(text.contains(c.name), "{} missing:\n{text}", c.name);
        }
        for c in &other {
            assert!(
                !text.contains(&format!(" {} ", c.name)),
                "{} listed:\n{text}",
                c.name
            );
        }
        assert!(text.contains("[not run]"));
        let absent = evaluate(&rows).iter().filter(|o| o.suite != "log").count();
        assert!(
            text.contains(&format!(
                "({absent} claims of suites that did not run are left out)"
            )),
            "{text}"
        );
    }

    #[test]
    fn sim_claims_read_the_average_row_and_the_sweep() {
        let mut avg = Row::empty(
            "sim",
            "fine-grained",
            json!({"workload": "average", "sweep": "main", "cores": 16, "commit_every": 1}),
        );
        avg.threads = 16;
        avg.set_extra("ipc_ratio", 1.5);
        avg.set_extra("commit_cycles_ratio", 0.5);
        avg.set_extra("sync_reads_ratio", 3.0);
        let sweep = |v: &str, ops: f64| {
            let mut r = row(
                "sim",
                v,
                json!({"workload": "synthetic", "sweep": "commit-frequency", "commit_every": 100}),
                ops,
            );
            r.threads = 16;
            r
        };
        let rows = vec![avg, sweep("global", 2.0), sweep("fine-grained", 2.2)];
        let get = |name: &str| {
            CLAIMS
                .iter()
                .find(|c| c.name == name)
                .unwrap()
                .evaluate(&rows)
        };
        let ipc = get("fine-grained ÷ global IPC, mean over workloads, 16 cores");
        assert_eq!((ipc.measured, ipc.verdict), (Some(1.5), Verdict::Met));
        let lat = get("fine-grained ÷ global commit latency, mean over workloads");
        assert_eq!((lat.measured, lat.verdict), (Some(0.5), Verdict::Met));
        let syn = get("fine-grained ÷ global credit-sync reads, mean over workloads");
        assert_eq!(syn.measured, Some(3.0));
        let f10 = get("fine-grained ÷ global IPC, commit every 100 updates");
        assert!((f10.measured.unwrap() - 1.1).abs() < 1e-9);
        // The every-update point is not in these rows.
        let f1 = get("fine-grained ÷ global IPC, commit every update");
        assert_eq!(f1.verdict, Verdict::NotRun);
    }
}
