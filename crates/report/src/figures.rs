//! The reproduced figures: which rows each plots and which claims sit
//! beside it.

use crate::plot::{Bar, Reference, Series, SeriesSpec};
use ferrite_rows::Row;
use ferrite_rows::claims::{Outcome, param_text};

/// One section of the page: an optional series chart of rows, an
/// optional bar chart of rows and the claims chart of the outcomes it owns.
pub struct Figure {
    /// HTML id of the section (`fig-p0-8`).
    pub id: &'static str,
    pub title: &'static str,
    /// Which outcomes belong here.
    pub owns: fn(&Outcome) -> bool,
    pub series: Option<SeriesFigure>,
    pub bars: Option<BarFigure>,
}

/// A chart of one bar per row over a categorical axis (drawn like the
/// claims chart: measured bar, paper's red cross, target line).
pub struct BarFigure {
    pub title: &'static str,
    /// The bar of a row; `None` for rows not plotted. Bars keep row order.
    pub bar: fn(&Row) -> Option<Bar>,
}

/// The bars of a figure from `rows`, in row order.
pub fn collect_bars(f: &BarFigure, rows: &[Row]) -> Vec<Bar> {
    rows.iter().filter_map(f.bar).collect()
}

/// A plotted point: series name, x, y.
pub type Point = (String, f64, f64);

/// A chart of throughput over a parameter.
pub struct SeriesFigure {
    pub spec: SeriesSpec<'static>,
    /// The rows plotted, each with its series name and x; `None` for rows
    /// not plotted.
    pub point: fn(&Row) -> Option<(String, f64)>,
    /// The y of a row.
    pub y: fn(&Row) -> f64,
    /// The paper's value drawn into the chart, from the rows plotted.
    pub reference: fn(&[Point]) -> Option<Reference>,
}

fn num(r: &Row, key: &str) -> Option<f64> {
    r.params.get(key)?.as_f64()
}

fn ok(r: &Row) -> bool {
    r.ops_per_s > 0.0
        && r.extra
            .as_ref()
            .is_none_or(|e| e.get("skipped").is_none() && e.get("failed").is_none())
}

/// `factor` × the series `name` (the paper's ratio against it).
fn times(points: &[Point], name: &str, factor: f64, label: &str) -> Option<Reference> {
    let mut pts: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| p.0 == name)
        .map(|p| (p.1, p.2 * factor))
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    match pts.len() {
        0 => None,
        1 => {
            // A single point: draw it as a flat line over the x range.
            let (lo, hi) = points
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| {
                    (l.min(p.1), h.max(p.1))
                });
            Some(Reference::Line(
                vec![(lo, pts[0].1), (hi, pts[0].1)],
                label.to_string(),
            ))
        }
        _ => Some(Reference::Line(pts, label.to_string())),
    }
}

/// Every figure, in page order. Paper values are those of
/// [`ferrite_rows::claims::CLAIMS`] (cited there).
pub fn figures() -> Vec<Figure> {
    let mut all = vec![fig_p0_7(), fig_p0_8(), fig_p0_10(), fig_p0_12()];
    all.extend(claims_only_figures());
    all.push(fig_p4());
    all
}

/// P0 Fig. 7: page writes per second over the dirty lines of a 16 KiB page, one thread.
fn fig_p0_7() -> Figure {
    Figure {
        id: "fig-p0-7",
        title: "P0 Fig. 7 — failure-atomic page flush, 16 KiB pages, 1 thread",
        owns: |o| o.figure == "P0 Fig. 7",
        series: Some(SeriesFigure {
            spec: SeriesSpec {
                title: "page writes/s over dirty lines (16 KiB, 1 thread)",
                x_label: "dirty cache lines",
                y_label: "pages/s",
                log_x: true,
                log_y: false,
            },
            point: |r| {
                if r.suite != "page"
                    || r.threads != 1
                    || num(r, "page_size") != Some(16384.0)
                    || !ok(r)
                {
                    return None;
                }
                let alg = param_text(r, "algorithm");
                match alg.as_deref() {
                    Some("microlog") | Some("hybrid") => Some((alg?, num(r, "dirty_lines")?)),
                    // CoW, PMDK and the floor do not depend on the dirty count.
                    _ => Some((r.variant.clone(), 256.0)),
                }
            },
            y: |r| r.ops_per_s,
            reference: |_| {
                Some(Reference::VLine(
                    28.0,
                    "paper: µLog ahead up to 28 lines".into(),
                ))
            },
        }),
        bars: None,
    }
}

/// P0 Fig. 8: log appends per second over the record size.
fn fig_p0_8() -> Figure {
    Figure {
        id: "fig-p0-8",
        title: "P0 Fig. 8 — log appends over record size",
        owns: |o| o.figure == "P0 Fig. 8",
        series: Some(SeriesFigure {
            spec: SeriesSpec {
                title: "appends/s over record size",
                x_label: "record bytes",
                y_label: "appends/s",
                log_x: true,
                log_y: true,
            },
            point: |r| {
                (r.suite == "log" && ok(r))
                    .then(|| Some((r.variant.clone(), num(r, "bytes")?)))
                    .flatten()
            },
            y: |r| r.ops_per_s,
            reference: |p| times(p, "classic-padded", 2.0, "paper: PopLog ≈ 2× classic"),
        }),
        bars: None,
    }
}

/// P0 Fig. 10: failure-atomic in-place updates per second over the value size.
fn fig_p0_10() -> Figure {
    Figure {
        id: "fig-p0-10",
        title: "P0 Fig. 10 — failure-atomic in-place updates",
        owns: |o| o.figure == "P0 Fig. 10",
        series: Some(SeriesFigure {
            spec: SeriesSpec {
                title: "updates/s over value size",
                x_label: "value bytes",
                y_label: "updates/s",
                log_x: true,
                log_y: true,
            },
            point: |r| {
                let m = param_text(r, "measure")?;
                (r.suite == "cell" && m.starts_with("update") && ok(r))
                    .then(|| Some((r.variant.clone(), num(r, "bytes")?)))
                    .flatten()
            },
            y: |r| r.ops_per_s,
            reference: |p| {
                times(
                    p,
                    "cow-update-seq",
                    2.0,
                    "paper: FAM 2× CoW (16 B, sequential)",
                )
            },
        }),
        bars: None,
    }
}

/// P0 Fig. 12: interleaved FP-Tree leaf inserts and lookups over the group size.
fn fig_p0_12() -> Figure {
    Figure {
        id: "fig-p0-12",
        title: "P0 Fig. 12 — interleaved FP-Tree leaf inserts and lookups",
        owns: |o| o.figure == "P0 Fig. 12",
        series: Some(SeriesFigure {
            spec: SeriesSpec {
                title: "ops/s over group size",
                x_label: "group size",
                y_label: "ops/s",
                log_x: true,
                log_y: false,
            },
            point: |r| {
                if r.suite != "group" || !ok(r) {
                    return None;
                }
                Some((param_text(r, "op")?, num(r, "group")?))
            },
            y: |r| r.ops_per_s,
            reference: |p| {
                let g1 = p.iter().find(|q| q.0 == "insert" && q.1 == 1.0)?.2;
                let hi = p.iter().map(|q| q.1).fold(1.0, f64::max);
                Some(Reference::Line(
                    vec![(1.0, g1 * 6.2), (hi, g1 * 6.2)],
                    "paper: inserts 6.2× group 1".into(),
                ))
            },
        }),
        bars: None,
    }
}

/// The sections that hold only a claims chart (no series, no bars), in
/// page order: P1 transactions, P1 page cache, P2 allocators, P2 engines,
/// P3, the server.
fn claims_only_figures() -> Vec<Figure> {
    vec![
        Figure {
            id: "fig-p1-3",
            title: "P1 Figs. 3.6–3.8 — undo / redo / clobber transactions",
            owns: |o| o.figure.starts_with("P1") && o.suite != "cache",
            series: None,
            bars: None,
        },
        Figure {
            id: "fig-p1-5",
            title: "P1 Figs. 5.6 and 5.9 — Persistron page cache vs DRAM cache + log",
            owns: |o| o.suite == "cache",
            series: None,
            bars: None,
        },
        Figure {
            id: "fig-p2-alloc",
            title: "P2 §2.2 — persistent allocators",
            owns: |o| o.suite == "alloc",
            series: None,
            bars: None,
        },
        Figure {
            id: "fig-p2-engine",
            title: "P2 Figs. 2 and 12 — storage engines InP / CoW / LSM",
            owns: |o| o.suite == "engine",
            series: None,
            bars: None,
        },
        Figure {
            id: "fig-p3",
            title: "P3 — persistent transactional memory",
            owns: |o| o.suite == "ptm",
            series: None,
            bars: None,
        },
        Figure {
            id: "fig-server",
            title: "ferrite serve vs memcached (issue 13)",
            owns: |o| o.suite == "server",
            series: None,
            bars: None,
        },
    ]
}

/// P4 Figs. 8–11: IPC over the commit interval (Fig. 10) and the
/// fine-grained ÷ global IPC ratio per workload (Fig. 8), on ferrite-sim.
fn fig_p4() -> Figure {
    Figure {
        id: "fig-p4",
        title: "P4 Figs. 8–11 — fine-grained vs global data committing (ferrite-sim, 16 cores)",
        owns: |o| o.suite == "sim",
        // P4 Fig. 10: IPC of both modes over the commit interval.
        series: Some(SeriesFigure {
            spec: SeriesSpec {
                title: "simulated IPC over the commit interval (synthetic, 16 cores)",
                x_label: "updates per commit",
                y_label: "IPC (all cores)",
                log_x: true,
                log_y: false,
            },
            point: |r| {
                (r.suite == "sim"
                    && param_text(r, "sweep").as_deref() == Some("commit-frequency")
                    && sim_ipc(r).is_some())
                .then(|| Some((r.variant.clone(), num(r, "commit_every")?)))
                .flatten()
            },
            y: |r| sim_ipc(r).unwrap_or(0.0),
            reference: |p| {
                // The paper's fine-grained: 2× global committing every
                // update ("may reach 100%"), +6.0 % every 100 (§IV-B).
                let g = |x: f64| p.iter().find(|q| q.0 == "global" && q.1 == x).map(|q| q.2);
                Some(Reference::Line(
                    vec![(1.0, g(1.0)? * 2.0), (100.0, g(100.0)? * 1.06)],
                    "paper: fine-grained 2× global (every update) … +6 % (every 100)".into(),
                ))
            },
        }),
        // P4 Fig. 8: the IPC ratio of each workload at 16 cores.
        bars: Some(BarFigure {
            title: "fine-grained ÷ global IPC per workload, 16 cores (× P4: 1.78, WHISPER mean)",
            bar: |r| {
                let w = param_text(r, "workload")?;
                (r.suite == "sim"
                    && r.variant == "fine-grained"
                    && param_text(r, "sweep").as_deref() == Some("main")
                    && w != "average")
                    .then_some(())?;
                Some(Bar {
                    label: w,
                    measured: r.ratio_vs_baseline.filter(|x| x.is_finite() && *x > 0.0)?,
                    paper: Some(1.78),
                    target: Some(1.0),
                })
            },
        }),
    }
}

/// A `sim` row's simulated IPC (`extra.ipc`), when positive.
fn sim_ipc(r: &Row) -> Option<f64> {
    r.extra
        .as_ref()?
        .get("ipc")?
        .as_f64()
        .filter(|x| x.is_finite() && *x > 0.0)
}

/// The series of a figure from `rows`: one [`Series`] per name, in order
/// of first appearance, and the flat list `(name, x, y)`.
pub fn collect(f: &SeriesFigure, rows: &[Row]) -> (Vec<Series>, Vec<Point>) {
    let mut flat = Vec::new();
    let mut series: Vec<Series> = Vec::new();
    for r in rows {
        let Some((name, x)) = (f.point)(r) else {
            continue;
        };
        let y = (f.y)(r);
        flat.push((name.clone(), x, y));
        match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push((x, y)),
            None => series.push(Series {
                name,
                points: vec![(x, y)],
            }),
        }
    }
    (series, flat)
}
