//! `ferrite report`: one self-contained HTML page that shows whether
//! Ferrite reproduces the papers and how it compares with PMDK.
//!
//! The page (`DIR/index.html`, no external script, font, style sheet or
//! image: every chart is SVG inline, drawn by `plotters`' SVG backend)
//! holds:
//!
//! 1. the **headline table** ([`html::HEADLINES`]): per component, Ferrite ÷
//!    PMDK, Ferrite's time ÷ the floor's, fences and lines per operation,
//!    and the crash states its `ferrite check` targets explored (with the
//!    violations found, and whether the planted bugs were caught);
//! 2. the **claims summary** of [`ferrite_rows::claims`] — the lines
//!    `ferrite bench` ends with;
//! 3. one section per reproduced **figure** ([`figures::figures`]): a chart
//!    of the rows (throughput over the figure's parameter, the paper's
//!    value drawn in as a dashed red line) where the figure is a curve, and
//!    a chart of its claims (measured bars, the paper's value as a red ×,
//!    the target as a black line) with the table of those claims;
//! 4. the **machine**: CPU, cores, memory, kernel, the probe's barrier
//!    cost, date, git commit.
//!
//! Rows come from running the suites (at `--quick` or `--full` scale,
//! plus the crash checks at a small budget) or from JSON-lines files
//! (`--from`, rows as `ferrite bench --json` writes them). Either way the
//! rows the page was made from are written beside it as `DIR/rows.jsonl`
//! (check results included, as rows of suite [`input::CHECK_SUITE`]), so
//! `ferrite report --from DIR/rows.jsonl` remakes the same page.

#![forbid(unsafe_code)]

pub mod date;
pub mod figures;
pub mod html;
pub mod input;
pub mod machine;
pub mod plot;

use ferrite_rows::Row;
use std::path::PathBuf;

pub use input::{CHECK_SUITE, parse_rows, read_files};
pub use machine::Machine;

/// What can go wrong making a report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{origin}:{line}: not a benchmark row: {message}")]
    BadRow {
        origin: String,
        line: usize,
        message: String,
    },
    #[error("{origin}: no rows")]
    NoRows { origin: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A suite failed (its error as the harness words it).
    #[error("bench: {0}")]
    Bench(String),
    #[error("bench: {0}")]
    Rows(#[from] ferrite_rows::RowsError),
    #[error("{0}")]
    Plot(String),
}

/// `ferrite report`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct ReportArgs {
    /// Read rows from these JSON-lines files (`ferrite bench --json`, or a
    /// report's rows.jsonl) instead of running the suites.
    #[arg(long, num_args = 1.., value_name = "FILE")]
    pub from: Vec<PathBuf>,
    /// Directory to write index.html and rows.jsonl into.
    #[arg(long, default_value = "report", value_name = "DIR")]
    pub out: PathBuf,
    /// Quick scale (the default): every suite's --quick sizes, crash checks at budget 100.
    #[arg(long, conflicts_with = "full")]
    pub quick: bool,
    /// Full scale: every suite's --full sizes, crash checks at budget 2000.
    #[arg(long)]
    pub full: bool,
}

/// Runs one benchmark suite by name at the report's scale, printing its
/// table as `ferrite bench` does, and returns its rows.
pub type SuiteFn<'a> = &'a dyn Fn(&str) -> Result<Vec<Row>, String>;

/// The benchmark suites, handed in by the command: they live in
/// ferrite-bench, which this crate does not link (it reads rows and claims
/// from ferrite-rows), so a page made `--from` files needs no harness.
pub struct Suites<'a> {
    /// Every suite's name, in the order they run.
    pub names: Vec<String>,
    /// Runs one of them (at the scale of the report's arguments).
    pub run: SuiteFn<'a>,
}

/// Explores a check target with a budget; `(states, violations)`.
pub type CheckFn<'a> = &'a dyn Fn(&str, usize) -> Result<(usize, usize), String>;

/// The `ferrite check` targets, handed in by the command (they live in
/// the `ferrite` binary, which depends on this crate).
pub struct Checks<'a> {
    /// `(target, must_fail)`: every target, `must_fail` for those that
    /// plant bugs which must be caught.
    pub targets: Vec<(String, bool)>,
    /// Explores `target` with `budget` crash states at most; returns
    /// `(states, violations)` summed over its variants.
    pub run: CheckFn<'a>,
}

/// The budget per check target at each scale.
pub fn check_budget(full: bool) -> usize {
    if full { 2000 } else { 100 }
}

/// Runs every suite of `suites` (and the checks) at the scale of `full`,
/// each printing its table as `ferrite bench` does, and returns all rows,
/// check rows last.
pub fn run_suites(
    full: bool,
    suites: &Suites<'_>,
    checks: &Checks<'_>,
) -> Result<Vec<Row>, ReportError> {
    let scale = if full { "full" } else { "quick" };
    let mut rows = Vec::new();
    for name in &suites.names {
        eprintln!("== report: bench {name} ({scale})");
        rows.extend((suites.run)(name).map_err(ReportError::Bench)?);
    }
    let budget = check_budget(full);
    for (target, must_fail) in &checks.targets {
        eprintln!("== report: check {target} (budget {budget})");
        // A target that cannot finish (a planted bug not caught within
        // the budget, say) is a result to show, not a reason to lose the
        // whole report.
        let row = match (checks.run)(target, budget) {
            Ok((states, violations)) => {
                input::check_row(target, budget, *must_fail, states, violations)
            }
            Err(message) => {
                eprintln!("ferrite report: check {target}: {message}");
                let mut r = input::check_row(target, budget, *must_fail, 0, 0);
                r.set_extra("error", message);
                r
            }
        };
        rows.push(row);
    }
    Ok(rows)
}

/// `ferrite report`: gets the rows (from `--from` or by running
/// everything), writes `DIR/index.html` and `DIR/rows.jsonl`, prints the
/// claims summary, and returns the page's path.
pub fn run(
    args: &ReportArgs,
    suites: &Suites<'_>,
    checks: &Checks<'_>,
) -> Result<PathBuf, ReportError> {
    let rows = if args.from.is_empty() {
        run_suites(args.full, suites, checks)?
    } else {
        read_files(&args.from)?
    };
    let page = html::page(&rows, &Machine::current(&rows))?;
    let io = |path: PathBuf| move |source| ReportError::Io { path, source };
    std::fs::create_dir_all(&args.out).map_err(io(args.out.clone()))?;
    let index = args.out.join("index.html");
    std::fs::write(&index, page).map_err(io(index.clone()))?;
    let jsonl = args.out.join("rows.jsonl");
    let mut text = String::new();
    for r in &rows {
        text.push_str(&r.to_json_line()?);
        text.push('\n');
    }
    std::fs::write(&jsonl, text).map_err(io(jsonl.clone()))?;
    ferrite_rows::claims::print_summary(&rows);
    println!(
        "wrote {} ({} rows in {})",
        index.display(),
        rows.len(),
        jsonl.display()
    );
    Ok(index)
}
