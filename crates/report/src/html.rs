//! The page: headline table, claims, figures, machine — one HTML string
//! with its charts inline.

use crate::ReportError;
use crate::figures::{Figure, collect, collect_bars, figures};
use crate::input::{check_error, check_result};
use crate::machine::Machine;
use crate::plot::{Bar, claims_chart, series_chart};
use ferrite_rows::Row;
use ferrite_rows::claims::{Goal, Outcome, Pick, Verdict, evaluate, pick};
use std::fmt::Write as _;

/// Escapes text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// One line of the headline table: a component, the row whose counters
/// represent it, the claims giving its ratios to PMDK and to the floor,
/// and the `ferrite check` targets (by name prefix) that explore it.
pub struct Headline {
    pub component: &'static str,
    pub suite: &'static str,
    /// The representative row (its fences and lines per operation).
    pub row: Pick,
    pub what: &'static str,
    /// Name of the claim (or suite target) that is Ferrite ÷ PMDK.
    pub vs_pmdk: Option<&'static str>,
    /// Name of the claim that is Ferrite's time ÷ the floor's.
    pub vs_floor: Option<&'static str>,
    pub checks: &'static [&'static str],
}

/// The components of the headline table.
pub const HEADLINES: &[Headline] = &[
    Headline {
        component: "logs [P0 §3.3]",
        suite: "log",
        row: pick(&["poplog-padded"], &[("bytes", "64")]),
        what: "PopLog, padded, 64 B append",
        vs_pmdk: Some("poplog-padded ÷ pmdk-pmemlog, 64 B"),
        vs_floor: Some("poplog-padded time ÷ floor, 64 B"),
        checks: &["log-"],
    },
    Headline {
        component: "page store [P0 §3.2]",
        suite: "page",
        row: pick(&["cow"], &[("page_size", "16384")]),
        what: "CoW write of a 16 KiB page",
        vs_pmdk: Some("cow ÷ pmdk-pmemblk, 16 KiB, 1 thread"),
        vs_floor: Some("cow time ÷ floor, 16 KiB, 1 thread"),
        checks: &["page-"],
    },
    Headline {
        component: "cells [P0 §3.4]",
        suite: "cell",
        row: pick(&["fam-update-rand"], &[("bytes", "16")]),
        what: "FAM 16 B random update",
        vs_pmdk: None,
        vs_floor: None,
        checks: &["cell-"],
    },
    Headline {
        component: "FP-Tree groups [P0 §3.5]",
        suite: "group",
        row: pick(&["insert-g16"], &[]),
        what: "leaf insert, group of 16",
        vs_pmdk: None,
        vs_floor: None,
        checks: &["fptree-"],
    },
    Headline {
        component: "transactions [P1 ch. 3]",
        suite: "tx",
        row: pick(&["clobber"], &[("structure", "hashmap")]),
        what: "clobber hash-map insert",
        vs_pmdk: Some("clobber ÷ pmdk-tx, hash map insert"),
        vs_floor: None,
        checks: &["tx-"],
    },
    Headline {
        component: "allocator [P2 §2.2]",
        suite: "alloc",
        row: pick(&["ferrite"], &[("size", "256")]),
        what: "256 B alloc + free, published",
        vs_pmdk: Some("ferrite ÷ pmdk, 256 B alloc+free, 1 thread"),
        vs_floor: None,
        checks: &["alloc"],
    },
    Headline {
        component: "engines [P2]",
        suite: "engine",
        row: pick(
            &["cow"],
            &[
                ("workload", "p2-f"),
                ("allocator", "ferrite"),
                ("domain", "adr"),
            ],
        ),
        what: "CoW engine, p2-f (R50/U50)",
        vs_pmdk: None,
        vs_floor: None,
        checks: &["engine-"],
    },
    Headline {
        component: "PTM [P3]",
        suite: "ptm",
        row: pick(
            &["orec-lazy"],
            &[("experiment", "peers"), ("workload", "bptree")],
        ),
        what: "orec-lazy B+tree insert",
        vs_pmdk: Some("orec-lazy/pmdk-tx bptree insert x1"),
        vs_floor: None,
        checks: &["ptm-"],
    },
    Headline {
        component: "crash explorer self-test",
        suite: "check",
        row: pick(&[], &[]),
        what: "append-then-publish protocol",
        vs_pmdk: None,
        vs_floor: None,
        checks: &["selftest"],
    },
];

/// The crash-check columns of a component.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckTotals {
    /// States explored by the targets expected to pass.
    pub states: u64,
    pub violations: u64,
    /// Targets that plant bugs, and how many of them caught theirs.
    pub planted: usize,
    pub caught: usize,
    /// Targets that did not finish, with their errors.
    pub errors: Vec<String>,
}

/// The [`CheckTotals`] of the check rows whose target starts with one of
/// `prefixes`; `None` when none does.
pub fn check_totals(rows: &[Row], prefixes: &[&str]) -> Option<CheckTotals> {
    let mut any = false;
    let mut t = CheckTotals::default();
    for r in rows {
        let Some((s, v, must_fail)) = check_result(r) else {
            continue;
        };
        if !prefixes.iter().any(|p| r.variant.starts_with(p)) {
            continue;
        }
        any = true;
        if let Some(e) = check_error(r) {
            t.errors.push(format!("{}: {e}", r.variant));
        }
        if must_fail {
            t.planted += 1;
            t.caught += usize::from(v > 0);
        } else {
            t.states += s;
            t.violations += v;
        }
    }
    any.then_some(t)
}

fn measured_of(outcomes: &[Outcome], name: Option<&str>) -> String {
    name.and_then(|n| outcomes.iter().find(|o| o.name == n))
        .map_or("-".into(), |o| o.show(o.measured))
}

fn headline_table(rows: &[Row], outcomes: &[Outcome]) -> String {
    let mut h = String::from(
        "<table id=\"headline-table\"><thead><tr><th>component</th><th>measured on</th><th>Ferrite ÷ PMDK</th><th>time ÷ floor</th><th>fences/op</th><th>lines/op</th><th>crash states</th><th>violations</th><th>planted bugs caught</th></tr></thead><tbody>\n",
    );
    for c in HEADLINES {
        let row = c.row.rows(c.suite, rows).into_iter().next();
        let counter = |v: fn(&Row) -> f64| {
            row.filter(|r| r.counters_observed)
                .map_or("-".into(), |r| format!("{:.2}", v(r)))
        };
        let (states, violations, planted) = match check_totals(rows, c.checks) {
            Some(t) => {
                let errors = if t.errors.is_empty() {
                    String::new()
                } else {
                    format!(
                        "<br><span class=\"error\">{}</span>",
                        esc(&t.errors.join("; "))
                    )
                };
                (
                    t.states.to_string(),
                    t.violations.to_string(),
                    if t.planted > 0 {
                        format!("{} of {}{errors}", t.caught, t.planted)
                    } else {
                        format!("-{errors}")
                    },
                )
            }
            None => ("not run".into(), "-".into(), "-".into()),
        };
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(c.component),
            esc(c.what),
            measured_of(outcomes, c.vs_pmdk),
            measured_of(outcomes, c.vs_floor),
            counter(|r| r.fences_per_op),
            counter(|r| r.lines_per_op),
            states,
            violations,
            planted,
        );
    }
    h.push_str("</tbody></table>\n");
    h
}

fn paper_text(o: &Outcome) -> String {
    match (o.paper, o.paper_note.is_empty()) {
        (Some(p), true) => format!("paper: {}", o.show(Some(p))),
        (Some(p), false) => format!("paper: {} — {}", o.show(Some(p)), o.paper_note),
        (None, false) => format!("paper: {}", o.paper_note),
        (None, true) => "paper: -".into(),
    }
}

fn claims_table(id: &str, outcomes: &[&Outcome], numbered: bool) -> String {
    let mut h = format!(
        "<table class=\"claims\" id=\"{id}\"><thead><tr>{}<th>verdict</th><th>figure</th><th>claim</th><th>measured</th><th>target</th><th>paper</th><th>detail</th></tr></thead><tbody>\n",
        if numbered { "<th>#</th>" } else { "" }
    );
    let mut n = 0;
    for o in outcomes {
        let num = if numbered {
            if o.measured.is_some() {
                n += 1;
                format!("<td>{n}</td>")
            } else {
                "<td></td>".into()
            }
        } else {
            String::new()
        };
        let _ = writeln!(
            h,
            "<tr class=\"{}\">{num}<td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td><td class=\"detail\">{}</td></tr>",
            o.verdict.name().replace(' ', "-"),
            o.verdict.name(),
            esc(&o.figure),
            esc(&o.name),
            o.show(o.measured),
            esc(&o.goal.describe()),
            esc(&paper_text(o)),
            esc(&o.detail),
        );
    }
    h.push_str("</tbody></table>\n");
    h
}

fn target_of(g: Goal) -> Option<f64> {
    match g {
        Goal::AtLeast(x) | Goal::AtMost(x) => Some(x),
        Goal::Within(lo, hi) if lo == hi => Some(lo),
        _ => None,
    }
}

fn figure_section(f: &Figure, rows: &[Row], outcomes: &[Outcome]) -> Result<String, ReportError> {
    let mine: Vec<&Outcome> = outcomes.iter().filter(|o| (f.owns)(o)).collect();
    let bars: Vec<Bar> = mine
        .iter()
        .filter_map(|o| o.measured.map(|m| (o, m)))
        .enumerate()
        .map(|(i, (o, m))| Bar {
            label: (i + 1).to_string(),
            measured: m,
            paper: o.paper,
            target: target_of(o.goal),
        })
        .collect();
    let mut plots = String::new();
    let mut points = 0;
    if let Some(sf) = &f.series {
        let (series, flat) = collect(sf, rows);
        points = flat.len();
        if !series.is_empty() {
            let reference = (sf.reference)(&flat);
            let svg =
                series_chart(&sf.spec, &series, reference.as_ref()).map_err(ReportError::Plot)?;
            let caption = match &reference {
                Some(crate::plot::Reference::VLine(_, l))
                | Some(crate::plot::Reference::Line(_, l)) => l.clone(),
                None => "paper: see the claims".into(),
            };
            let _ = write!(
                plots,
                "<figure class=\"series\" data-points=\"{points}\">{svg}<figcaption>{} rows; dashed red: {}</figcaption></figure>",
                points,
                esc(&caption)
            );
        }
    }
    if let Some(bf) = &f.bars {
        let rb = collect_bars(bf, rows);
        if !rb.is_empty() {
            let svg = claims_chart(bf.title, &rb).map_err(ReportError::Plot)?;
            let _ = write!(
                plots,
                "<figure class=\"row-bars\" data-row-bars=\"{}\">{svg}<figcaption>{} rows; red ×: the paper's value, black: the target</figcaption></figure>",
                rb.len(),
                rb.len()
            );
        }
    }
    if !bars.is_empty() {
        let svg = claims_chart(
            &format!(
                "{} — measured vs paper",
                f.title.split(" — ").next().unwrap_or(f.title)
            ),
            &bars,
        )
        .map_err(ReportError::Plot)?;
        let papers: Vec<String> = mine
            .iter()
            .filter(|o| o.measured.is_some())
            .enumerate()
            .filter_map(|(i, o)| {
                o.paper
                    .map(|p| format!("{}: paper {}", i + 1, o.show(Some(p))))
            })
            .collect();
        let _ = write!(
            plots,
            "<figure class=\"claims-chart\" data-bars=\"{}\">{svg}<figcaption>{}</figcaption></figure>",
            bars.len(),
            esc(&if papers.is_empty() {
                "no single ratio in the paper here: its findings and the targets are in the table"
                    .to_string()
            } else {
                papers.join("; ")
            })
        );
    }
    let body = if plots.is_empty() {
        "<p class=\"not-run\">not run: no rows for this figure</p>".to_string()
    } else {
        format!("<div class=\"plots\">{plots}</div>")
    };
    Ok(format!(
        "<section class=\"figure\" id=\"{}\" data-points=\"{points}\" data-bars=\"{}\"><h3>{}</h3>{body}{}</section>\n",
        f.id,
        bars.len(),
        esc(f.title),
        claims_table(&format!("{}-claims", f.id), &mine, true)
    ))
}

fn machine_table(m: &Machine) -> String {
    let unknown = || "unknown".to_string();
    let barriers = if m.barriers.is_empty() {
        "not measured (no probe rows)".to_string()
    } else {
        m.barriers
            .iter()
            .map(|(v, ns)| format!("{v} {ns:.0} ns"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let rows = [
        ("CPU", m.cpu.clone().unwrap_or_else(unknown)),
        ("cores", m.cores.map_or_else(unknown, |c| c.to_string())),
        (
            "memory",
            m.memory_bytes.map_or_else(unknown, |b| {
                format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
            }),
        ),
        ("kernel", m.kernel.clone().unwrap_or_else(unknown)),
        ("persist barrier (1 line store + flush + fence)", barriers),
        ("date", m.date.clone()),
        ("git commit", m.commit.clone().unwrap_or_else(unknown)),
    ];
    let mut h = String::from("<table id=\"machine\"><tbody>\n");
    for (k, v) in rows {
        let _ = writeln!(h, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(&v));
    }
    h.push_str("</tbody></table>\n");
    h
}

const STYLE: &str =
    "body{font-family:sans-serif;max-width:1200px;margin:1em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums}
td.detail{font-size:11px;color:#555;max-width:420px}
tr.met td:first-child,tr.met td:nth-child(2){color:#1a7f37}
tr.missed td{background:#fff0f0}
tr.not-run td{color:#999}
.plots{display:flex;flex-wrap:wrap;gap:12px}
figure{margin:0;border:1px solid #ddd;padding:4px}
figcaption{font-size:12px;color:#444;max-width:760px}
section.figure{margin-bottom:2em}
p.not-run{color:#999}
.error{color:#b00;font-size:11px}";

/// The whole page for `rows` on `machine`.
pub fn page(rows: &[Row], machine: &Machine) -> Result<String, ReportError> {
    let outcomes = evaluate(rows);
    let count = |v: Verdict| outcomes.iter().filter(|o| o.verdict == v).count();
    let mut suites: Vec<&str> = Vec::new();
    for r in rows {
        if !suites.contains(&r.suite.as_str()) {
            suites.push(&r.suite);
        }
    }
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Ferrite report</title><style>{STYLE}</style></head><body>\n<h1>Ferrite report</h1>\n<p>{} rows from the suites {}; {} claims: {} met, {} missed, {} stated, {} not run. Made {} at commit {}.</p>\n",
        rows.len(),
        esc(&suites.join(", ")),
        outcomes.len(),
        count(Verdict::Met),
        count(Verdict::Missed),
        count(Verdict::Info),
        count(Verdict::NotRun),
        esc(&machine.date),
        esc(machine.commit.as_deref().unwrap_or("unknown")),
    );
    h.push_str("<h2 id=\"headline\">Headline</h2>\n<p>Ratios are throughputs of the median repetitions of rows of the same run (&gt; 1: Ferrite is faster); time ÷ floor is how many times the cheapest possible persist of the same bytes (one non-temporal copy, one fence) the operation takes; fences and lines are exact counts per operation. Crash states: explored by the component's <code>ferrite check</code> targets.</p>\n");
    h.push_str(&headline_table(rows, &outcomes));
    h.push_str("<h2 id=\"claims\">Claims</h2>\n<p>The lines <code>ferrite bench</code> ends with: each claim measured, its target, and the paper's value.</p>\n");
    let all: Vec<&Outcome> = outcomes.iter().collect();
    h.push_str(&claims_table("claims-table", &all, false));
    h.push_str("<h2 id=\"figures\">Figures</h2>\n");
    for f in figures() {
        h.push_str(&figure_section(&f, rows, &outcomes)?);
    }
    h.push_str("<h2 id=\"machine-info\">Machine</h2>\n");
    h.push_str(&machine_table(machine));
    h.push_str("</body></html>\n");
    Ok(h)
}
