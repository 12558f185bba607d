//! Reading rows: JSON-lines files as `ferrite bench --json` writes them
//! (and as `ferrite report` writes `rows.jsonl`, crash-check rows
//! included), with errors that name the file and the line.

use crate::ReportError;
use ferrite_rows::Row;
use std::path::Path;

/// Suite name of the rows that carry `ferrite check` results: variant =
/// the target, `extra.states` / `extra.violations` the sums over its
/// variants, `params.budget` the budget, `params.must_fail` whether the
/// target plants bugs that must be caught.
pub const CHECK_SUITE: &str = "check";

/// Parses one JSON-lines text: one [`Row`] per non-blank line. The first
/// bad line is an error naming `origin` and the line number.
pub fn parse_rows(text: &str, origin: &str) -> Result<Vec<Row>, ReportError> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row: Row = serde_json::from_str(line).map_err(|e| ReportError::BadRow {
            origin: origin.to_string(),
            line: i + 1,
            message: e.to_string(),
        })?;
        rows.push(row);
    }
    Ok(rows)
}

/// Reads and concatenates the rows of every file; a file without any row
/// is an error too (a report of nothing is a mistake, not a page).
pub fn read_files(paths: &[impl AsRef<Path>]) -> Result<Vec<Row>, ReportError> {
    let mut all = Vec::new();
    for p in paths {
        let p = p.as_ref();
        let text = std::fs::read_to_string(p).map_err(|source| ReportError::Io {
            path: p.to_path_buf(),
            source,
        })?;
        let rows = parse_rows(&text, &p.display().to_string())?;
        if rows.is_empty() {
            return Err(ReportError::NoRows {
                origin: p.display().to_string(),
            });
        }
        all.extend(rows);
    }
    Ok(all)
}

/// One `ferrite check` target's result as a row of [`CHECK_SUITE`].
pub fn check_row(
    target: &str,
    budget: usize,
    must_fail: bool,
    states: usize,
    violations: usize,
) -> Row {
    let mut r = Row::empty(
        CHECK_SUITE,
        target,
        serde_json::json!({ "budget": budget, "must_fail": must_fail }),
    );
    r.set_extra("states", states as u64);
    r.set_extra("violations", violations as u64);
    r
}

/// The error a check row records (the target did not finish), if any.
pub fn check_error(r: &Row) -> Option<&str> {
    r.extra.as_ref()?.get("error")?.as_str()
}

/// A check row's `(states, violations, must_fail)`.
pub fn check_result(r: &Row) -> Option<(u64, u64, bool)> {
    if r.suite != CHECK_SUITE {
        return None;
    }
    let e = r.extra.as_ref()?;
    let must_fail = r
        .params
        .get("must_fail")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    Some((
        e.get("states")?.as_u64()?,
        e.get("violations")?.as_u64()?,
        must_fail,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_line_is_one_error_naming_file_and_line() {
        let good = Row::empty("log", "floor", serde_json::json!({}))
            .to_json_line()
            .unwrap();
        let text = format!("{good}\n\n{good}\n{{\"suite\": \"log\", oops\n");
        let e = parse_rows(&text, "rows.jsonl").unwrap_err().to_string();
        assert!(e.starts_with("rows.jsonl:4: not a benchmark row"), "{e}");
        assert!(!e.contains('\n'), "one line: {e}");
        // A JSON value that is not a row is refused as well.
        let e = parse_rows("[1, 2]\n", "x").unwrap_err().to_string();
        assert!(e.starts_with("x:1:"), "{e}");
        assert_eq!(
            parse_rows(&format!("{good}\n{good}\n"), "x").unwrap().len(),
            2
        );
    }

    #[test]
    fn check_rows_round_trip() {
        let r = check_row("log-poplog", 100, false, 123, 0);
        let back = parse_rows(&r.to_json_line().unwrap(), "x").unwrap();
        assert_eq!(check_result(&back[0]), Some((123, 0, false)));
        assert_eq!(
            check_result(&Row::empty("log", "x", serde_json::json!({}))),
            None
        );
    }
}
