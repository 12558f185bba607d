//! The report page made from rows of a real quick run (fixtures/, see its
//! README): every expected plot is there and has as many plotted elements
//! as rows and claims; the page loads nothing from outside; `--from`
//! refuses bad input with one readable error. When `chromium` is
//! installed, the page is also rendered headless: the DOM the browser
//! built holds the same plots, and a screenshot is written.

use ferrite_report::plot::BAR_FILL;
use ferrite_report::{Checks, Machine, ReportArgs, Suites, read_files};
use ferrite_rows::Row;
use ferrite_rows::claims::{Verdict, evaluate};
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn rows() -> Vec<Row> {
    read_files(&[fixture("bench-quick.jsonl"), fixture("checks.jsonl")]).expect("fixtures parse")
}

/// No suite runs from a test: `--from` never calls it.
fn no_suites() -> Suites<'static> {
    Suites {
        names: Vec::new(),
        run: &|s| Err(format!("{s}: no suites in this test")),
    }
}

/// No check runs from a test: `--from` never calls it.
fn no_checks() -> Checks<'static> {
    Checks {
        targets: Vec::new(),
        run: &|t, _| Err(format!("{t}: no checks in this test")),
    }
}

fn args(from: Vec<PathBuf>, out: &Path) -> ReportArgs {
    ReportArgs {
        from,
        out: out.to_path_buf(),
        quick: true,
        full: false,
    }
}

/// The text of the section with HTML id `id`.
fn section<'a>(html: &'a str, id: &str) -> &'a str {
    let start = html
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no section {id}"));
    let end = html[start..].find("</section>").expect("section ends") + start;
    &html[start..end]
}

fn count(hay: &str, needle: &str) -> usize {
    hay.matches(needle).count()
}

fn num(r: &Row, k: &str) -> Option<f64> {
    r.params.get(k)?.as_f64()
}

fn measured(r: &Row) -> bool {
    r.ops_per_s > 0.0
        && r.extra
            .as_ref()
            .is_none_or(|e| e.get("skipped").is_none() && e.get("failed").is_none())
}

/// `(figure id, rows its series chart plots)`, counted here from the
/// rows independently of the report's own selection.
fn expected_points(rows: &[Row]) -> Vec<(&'static str, usize)> {
    let n = |f: &dyn Fn(&Row) -> bool| rows.iter().filter(|r| measured(r) && f(r)).count();
    vec![
        (
            "fig-p0-7",
            n(&|r| r.suite == "page" && r.threads == 1 && num(r, "page_size") == Some(16384.0)),
        ),
        (
            "fig-p0-8",
            n(&|r| r.suite == "log" && num(r, "bytes").is_some()),
        ),
        (
            "fig-p0-10",
            n(&|r| {
                r.suite == "cell"
                    && r.params["measure"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("update"))
            }),
        ),
        (
            "fig-p0-12",
            n(&|r| r.suite == "group" && num(r, "group").is_some()),
        ),
    ]
}

/// `(figure id, suites whose claims it charts)`: every figure whose
/// suite is in the fixture must chart a bar per measured claim.
const FIGURES: &[(&str, &[&str])] = &[
    ("fig-p0-7", &["page"]),
    ("fig-p0-8", &["log"]),
    ("fig-p0-10", &["cell"]),
    ("fig-p0-12", &["group"]),
    ("fig-p1-3", &["tx"]),
    ("fig-p2-alloc", &["alloc"]),
    ("fig-p2-engine", &["engine"]),
    ("fig-p3", &["ptm"]),
    ("fig-server", &["server"]),
    ("fig-p4", &["sim"]),
];

fn param<'a>(r: &'a Row, k: &str) -> Option<&'a str> {
    r.params.get(k)?.as_str()
}

/// The P4 figure: the commit-frequency sweep (one circle per row of it,
/// the paper's reference), one bar per workload's fine-grained ÷ global
/// IPC at 16 cores (the rows' own ratios), and the claims chart.
fn check_p4(html: &str, rows: &[Row], what: &str) {
    let sim = |f: &dyn Fn(&Row) -> bool| {
        rows.iter()
            .filter(|r| r.suite == "sim" && f(r))
            .collect::<Vec<_>>()
    };
    let sweep = sim(&|r| param(r, "sweep") == Some("commit-frequency"));
    let per_workload = sim(&|r| {
        param(r, "sweep") == Some("main")
            && r.variant == "fine-grained"
            && param(r, "workload") != Some("average")
    });
    assert!(
        sweep.len() >= 4 && per_workload.len() >= 4,
        "the fixture has sim rows"
    );
    let s = section(html, "fig-p4");
    assert_eq!(count(s, "<svg"), 3, "{what}: series, workload bars, claims");
    let series = &s[s.find("class=\"series\"").expect("series chart")..];
    let series = &series[..series.find("</figure>").unwrap()];
    assert_eq!(
        count(series, "<circle"),
        sweep.len(),
        "{what}: one circle per sweep row"
    );
    assert!(series.contains("paper"), "{what}: the paper's reference");
    let bars = &s[s.find("class=\"row-bars\"").expect("workload bars")..];
    let bars = &bars[..bars.find("</figure>").unwrap()];
    assert_eq!(
        count(bars, &format!("fill=\"{BAR_FILL}\"")),
        per_workload.len(),
        "{what}: one bar per workload"
    );
    for r in &per_workload {
        let w = param(r, "workload").unwrap();
        assert!(
            bars.contains(&ferrite_report::html::esc(w)),
            "{what}: label {w}"
        );
    }
}

/// Checks the plots of `html` (the file or the browser's DOM).
fn check_plots(html: &str, rows: &[Row], what: &str) {
    let outcomes = evaluate(rows);
    check_p4(html, rows, what);
    for (id, points) in expected_points(rows) {
        assert!(points > 0, "{id}: the fixture has rows for it");
        let s = section(html, id);
        assert_eq!(
            count(s, "<svg"),
            2,
            "{what} {id}: a series chart and a claims chart"
        );
        let series = &s[s.find("class=\"series\"").expect("series chart")..];
        let series = &series[..series.find("</figure>").unwrap()];
        assert_eq!(
            count(series, "<circle"),
            points,
            "{what} {id}: one circle per row"
        );
        assert!(
            series.contains("paper"),
            "{what} {id}: the paper's reference"
        );
    }
    for (id, suites) in FIGURES {
        let s = section(html, id);
        let chart = &s[s.find("class=\"claims-chart\"").expect("claims chart")..];
        let chart = &chart[..chart.find("</figure>").unwrap()];
        let f = ferrite_report::figures::figures()
            .into_iter()
            .find(|f| f.id == *id)
            .unwrap();
        let bars = outcomes
            .iter()
            .filter(|o| (f.owns)(o) && o.measured.is_some())
            .count();
        assert!(
            bars > 0,
            "{what} {id}: the fixture measures claims of {suites:?}"
        );
        assert_eq!(
            count(chart, &format!("fill=\"{BAR_FILL}\"")),
            bars,
            "{what} {id}: one bar per measured claim"
        );
        assert!(s.contains(&format!("data-bars=\"{bars}\"")), "{what} {id}");
        assert!(s.contains("paper"), "{what} {id}: the paper's values");
    }
}

#[test]
fn the_page_has_every_plot_with_its_data() {
    let rows = rows();
    let machine = Machine {
        date: "2026-11-25 05:00 UTC".into(),
        ..Machine::current(&rows)
    };
    let html = ferrite_report::html::page(&rows, &machine).unwrap();
    check_plots(&html, &rows, "file");

    // Self-contained: nothing loaded from elsewhere (the SVG namespace is
    // a name, not a download).
    let bare = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    for bad in [
        "<script", "<link", "<img", "src=", "href=", "url(", "@import", "http://", "https://",
    ] {
        assert!(!bare.contains(bad), "the page references {bad}");
    }
    // The headline table: every component, the PMDK ratios and the crash
    // states of the fixture's checks.
    let head = &html[html.find("id=\"headline-table\"").unwrap()..];
    let head = &head[..head.find("</table>").unwrap()];
    for c in ferrite_report::html::HEADLINES {
        assert!(
            head.contains(&ferrite_report::html::esc(c.component)),
            "{}",
            c.component
        );
    }
    let states: u64 = rows
        .iter()
        .filter_map(ferrite_report::input::check_result)
        .filter(|c| !c.2)
        .map(|c| c.0)
        .sum();
    assert!(states > 0);
    let log_states: u64 = rows
        .iter()
        .filter(|r| r.variant.starts_with("log-"))
        .filter_map(ferrite_report::input::check_result)
        .map(|c| c.0)
        .sum();
    assert!(
        head.contains(&format!("<td class=\"num\">{log_states}</td>")),
        "{head}"
    );
    // The claims table: one line per claim, with its verdict.
    let outcomes = evaluate(&rows);
    let claims = &html[html.find("id=\"claims-table\"").unwrap()..];
    let claims = &claims[..claims.find("</table>").unwrap()];
    assert_eq!(count(claims, "<tr class="), outcomes.len());
    assert!(outcomes.iter().any(|o| o.verdict == Verdict::Met));
    // The machine.
    assert!(html.contains("id=\"machine\""));
    assert!(html.contains("2026-11-25 05:00 UTC"));
}

#[test]
fn from_writes_the_page_and_the_rows_it_was_made_from() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let files = vec![fixture("bench-quick.jsonl"), fixture("checks.jsonl")];
    let index = ferrite_report::run(&args(files, &out), &no_suites(), &no_checks()).unwrap();
    assert_eq!(index, out.join("index.html"));
    let again = read_files(&[out.join("rows.jsonl")]).unwrap();
    assert_eq!(again, rows());
    // The rows written beside the page make the same page.
    let out2 = dir.path().join("r2");
    ferrite_report::run(
        &args(vec![out.join("rows.jsonl")], &out2),
        &no_suites(),
        &no_checks(),
    )
    .unwrap();
    let strip = |p: &Path| {
        let s = std::fs::read_to_string(p).unwrap();
        // The date line differs by the minute the page was made.
        s.lines()
            .filter(|l| !l.contains(" UTC"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        strip(&out.join("index.html")),
        strip(&out2.join("index.html"))
    );
}

#[test]
fn from_refuses_bad_input_with_one_readable_error() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(fixture("bench-quick.jsonl")).unwrap();
    let mut lines: Vec<&str> = good.lines().take(3).collect();
    lines.push("{\"suite\": \"log\", \"variant\": 7}");
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, lines.join("\n")).unwrap();
    let out = dir.path().join("out");
    let e = ferrite_report::run(&args(vec![bad.clone()], &out), &no_suites(), &no_checks())
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!("{}:4: not a benchmark row:", bad.display())),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
    assert!(!out.exists(), "no page from bad input");
    // A missing file and an empty one are errors too.
    let missing = dir.path().join("missing.jsonl");
    let e = ferrite_report::run(
        &args(vec![missing.clone()], &out),
        &no_suites(),
        &no_checks(),
    )
    .unwrap_err();
    assert!(
        e.to_string().starts_with(&missing.display().to_string()),
        "{e}"
    );
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "\n\n").unwrap();
    let e = ferrite_report::run(&args(vec![empty], &out), &no_suites(), &no_checks()).unwrap_err();
    assert!(e.to_string().ends_with(": no rows"), "{e}");
}

/// The browser: Debian's `chromium`, headless. Skipped (with the reason
/// printed) when it is not installed.
#[test]
fn chromium_renders_every_plot() {
    let Some(browser) = ["chromium", "chromium-browser"].into_iter().find(|b| {
        Command::new(b)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }) else {
        println!("skipped: chromium is not installed (Debian: apt-get install chromium)");
        return;
    };
    let rows = rows();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let files = vec![fixture("bench-quick.jsonl"), fixture("checks.jsonl")];
    let index = ferrite_report::run(&args(files, &out), &no_suites(), &no_checks()).unwrap();
    let url = format!("file://{}", index.display());
    let base = [
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--no-first-run",
    ];
    let profile = format!("--user-data-dir={}", dir.path().join("profile").display());
    let dom = Command::new(browser)
        .args(base)
        .arg(&profile)
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("chromium runs");
    assert!(
        dom.status.success(),
        "{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let dom = String::from_utf8(dom.stdout).expect("utf-8 DOM");
    assert!(
        dom.contains("Ferrite report"),
        "the browser loaded the page: {dom:.300}"
    );
    check_plots(&dom, &rows, "chromium");

    let shot = std::env::var_os("FERRITE_REPORT_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| dir.path().join("page.png"));
    let st = Command::new(browser)
        .args(base)
        .arg(&profile)
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1280,3000")
        .arg("--hide-scrollbars")
        .arg(&url)
        .output()
        .expect("chromium runs");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 50_000,
        "{} bytes",
        png.len()
    );
}
