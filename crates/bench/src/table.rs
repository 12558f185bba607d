//! The aligned stdout table of a run.
//!
//! Columns: suite, variant, params (`key=value` pairs), threads, ops/s,
//! ns/op (median), spread ((max-min)/median of ns/op across repetitions),
//! fences/op, flushes/op, lines/op, blocks/op, nt B/op, ratio (throughput
//! vs the row's baseline, `-` when it has none) and notes (the scalar fields
//! of `extra`, e.g. `gb_per_s`).

use crate::row::Row;
use std::fmt::Write as _;

const HEADERS: [&str; 14] = [
    "suite",
    "variant",
    "params",
    "thr",
    "ops/s",
    "ns/op",
    "spread",
    "fences/op",
    "flush/op",
    "lines/op",
    "blk/op",
    "nt B/op",
    "ratio",
    "notes",
];

/// Columns aligned to the right (numbers).
const RIGHT: [bool; 14] = [
    false, false, false, true, true, true, true, true, true, true, true, true, true, false,
];

/// `1234567.0` → `1.23M`: three significant digits with an SI suffix.
pub fn si(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let (d, s) = if v.abs() >= 1e9 {
        (v / 1e9, "G")
    } else if v.abs() >= 1e6 {
        (v / 1e6, "M")
    } else if v.abs() >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    if d.abs() >= 100.0 {
        format!("{d:.0}{s}")
    } else if d.abs() >= 10.0 {
        format!("{d:.1}{s}")
    } else {
        format!("{d:.2}{s}")
    }
}

/// A nanosecond figure with precision that suits its size.
fn ns(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2}")
    } else if v < 1000.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// A per-op counter: integers print as integers, fractions with 2 decimals.
/// A counter cell, or `n/a` for a peer whose flushes Ferrite cannot see.
fn observed(r: &Row, v: f64) -> String {
    if r.counters_observed {
        count(v)
    } else {
        "n/a".into()
    }
}

fn count(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else if v.abs() >= 1e5 {
        si(v)
    } else {
        format!("{v:.2}")
    }
}

/// A throughput ratio: two decimals, or three significant digits when small.
fn ratio(q: f64) -> String {
    if q.abs() >= 0.1 || q == 0.0 || !q.is_finite() {
        format!("{q:.2}x")
    } else {
        let digits = (2 - q.abs().log10().floor() as i32).max(0) as usize;
        format!("{q:.digits$}x")
    }
}

fn scalar(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        serde_json::Value::Number(n) => Some(match n.as_f64() {
            Some(f) if n.is_f64() => {
                if f.abs() >= 100.0 {
                    format!("{f:.0}")
                } else if f.abs() >= 1.0 {
                    format!("{f:.2}")
                } else {
                    format!("{f:.3}")
                }
            }
            _ => n.to_string(),
        }),
        serde_json::Value::Array(a) => Some(
            a.iter()
                .map(|x| scalar(x).unwrap_or_else(|| x.to_string()))
                .collect::<Vec<_>>()
                .join(","),
        ),
        _ => None,
    }
}

/// `{"a":1,"b":"x"}` → `a=1 b=x`; other values print as JSON.
pub fn format_params(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Object(m) => m
            .iter()
            .map(|(k, v)| match scalar(v) {
                Some(s) => format!("{k}={s}"),
                None => format!("{k}={v}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Scalar members of `extra` as `key=value` (nested values are left to JSON).
fn notes(v: Option<&serde_json::Value>) -> String {
    match v {
        Some(serde_json::Value::Object(m)) => m
            .iter()
            .filter_map(|(k, v)| match v {
                serde_json::Value::Array(_) | serde_json::Value::Object(_) => None,
                _ => scalar(v).map(|s| format!("{k}={s}")),
            })
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

fn cells(r: &Row) -> [String; 14] {
    [
        r.suite.clone(),
        r.variant.clone(),
        format_params(&r.params),
        r.threads.to_string(),
        si(r.ops_per_s),
        ns(r.ns_per_op),
        format!("{:.1}%", r.ns_per_op_spread * 100.0),
        observed(r, r.fences_per_op),
        observed(r, r.flushes_per_op),
        observed(r, r.lines_per_op),
        observed(r, r.blocks_per_op),
        observed(r, r.nt_bytes_per_op),
        r.ratio_vs_baseline.map(ratio).unwrap_or_else(|| "-".into()),
        notes(r.extra.as_ref()),
    ]
}

/// The table as text (header line, then one line per row). An empty input
/// gives just the header.
pub fn format_table(rows: &[Row]) -> String {
    let body: Vec<[String; 14]> = rows.iter().map(cells).collect();
    let mut width: [usize; 14] = HEADERS.map(|h| h.chars().count());
    for line in &body {
        for (w, c) in width.iter_mut().zip(line) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut emit = |line: &[String]| {
        let mut s = String::new();
        for (i, c) in line.iter().enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            let pad = width[i].saturating_sub(c.chars().count());
            if RIGHT[i] {
                s.extend(std::iter::repeat_n(' ', pad));
                s.push_str(c);
            } else {
                s.push_str(c);
                if i + 1 < line.len() {
                    s.extend(std::iter::repeat_n(' ', pad));
                }
            }
        }
        let _ = writeln!(out, "{}", s.trim_end());
    };
    emit(&HEADERS.map(String::from));
    for line in &body {
        emit(line);
    }
    out
}

/// Prints [`format_table`] on stdout.
pub fn print_table(rows: &[Row]) {
    print!("{}", format_table(rows));
}
