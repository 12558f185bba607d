//! The result row every experiment yields, its ratios and its JSON lines.
//!
//! One [`Row`] is one variant of one experiment measured in one run. Its
//! fields are those of ARCHITECTURE.md ("Benchmarks") plus the remaining
//! counters of rule 6 and the spread across repetitions:
//!
//! | field               | meaning |
//! |---------------------|---------|
//! | `suite`             | suite that produced the row (`probe`, `log`, …) |
//! | `variant`           | technique / configuration measured; unique within its comparison group |
//! | `params`            | JSON object of the inputs (sizes, domain, flush kind, skipped kinds…) |
//! | `threads`           | threads running the variant at once |
//! | `ops`               | operations in one timed repetition, summed over threads |
//! | `secs`              | wall time of the median repetition |
//! | `ops_per_s`         | `ops / secs`: throughput of the median repetition |
//! | `ns_per_op`         | `1e9 / ops_per_s`: the median over repetitions of wall-ns per op (with one thread, the cost of one op) |
//! | `ns_per_op_spread`  | `(max - min) / median` of the per-repetition ns/op: the noise of this row |
//! | `reps`              | timed repetitions (a warm-up batch precedes them and is not counted) |
//! | `fences_per_op`     | persist fences per op, over all repetitions |
//! | `flushes_per_op`    | flush instructions issued per op (repeats included) |
//! | `lines_per_op`      | distinct cache lines written back per fence epoch, per op |
//! | `blocks_per_op`     | distinct 256-byte media blocks made durable per fence epoch, per op |
//! | `nt_bytes_per_op`   | bytes stored non-temporally per op |
//! | `msyncs_per_op`, `msync_bytes_per_op` | `msync(2)` calls and page bytes per op |
//! | `baseline`          | the variant (same suite, same group) this row is compared against |
//! | `ratio_vs_baseline` | this row's `ops_per_s` / the baseline's `ops_per_s` (> 1: faster than the baseline) |
//! | `extra`             | optional suite-specific JSON (bandwidth, per-line cost, plot series…) |
//!
//! The counters are exact (they come from ferrite-pmem's per-thread
//! counters, rule 6); time is only comparable between rows of the same run.

use crate::error::RowsError;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

/// One measured variant. See the module documentation for each field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub suite: String,
    pub variant: String,
    pub params: serde_json::Value,
    pub threads: usize,
    pub ops: u64,
    pub secs: f64,
    pub ops_per_s: f64,
    pub ns_per_op: f64,
    pub fences_per_op: f64,
    pub lines_per_op: f64,
    pub nt_bytes_per_op: f64,
    pub baseline: Option<String>,
    pub ratio_vs_baseline: Option<f64>,
    pub flushes_per_op: f64,
    pub blocks_per_op: f64,
    pub msyncs_per_op: f64,
    pub msync_bytes_per_op: f64,
    pub reps: usize,
    pub ns_per_op_spread: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<serde_json::Value>,
    /// False for peers that flush outside Ferrite (PMDK): their counter
    /// fields are 0 because nothing was observed, not because nothing was
    /// flushed. The table prints `n/a` for them.
    #[serde(default = "observed")]
    pub counters_observed: bool,
}

fn observed() -> bool {
    true
}

impl Row {
    /// A row with the given identity and every measurement zero.
    pub fn empty(suite: &str, variant: &str, params: serde_json::Value) -> Row {
        Row {
            suite: suite.to_string(),
            variant: variant.to_string(),
            params,
            threads: 1,
            ops: 0,
            secs: 0.0,
            ops_per_s: 0.0,
            ns_per_op: 0.0,
            fences_per_op: 0.0,
            lines_per_op: 0.0,
            nt_bytes_per_op: 0.0,
            baseline: None,
            ratio_vs_baseline: None,
            flushes_per_op: 0.0,
            blocks_per_op: 0.0,
            msyncs_per_op: 0.0,
            msync_bytes_per_op: 0.0,
            reps: 0,
            ns_per_op_spread: 0.0,
            counters_observed: true,
            extra: None,
        }
    }

    /// Sets `extra[key] = value`, making `extra` an object if needed.
    pub fn set_extra(&mut self, key: &str, value: impl Into<serde_json::Value>) {
        let extra = self
            .extra
            .get_or_insert_with(|| serde_json::Value::Object(Default::default()));
        if !extra.is_object() {
            *extra = serde_json::Value::Object(Default::default());
        }
        if let Some(map) = extra.as_object_mut() {
            map.insert(key.to_string(), value.into());
        }
    }

    /// Sets `params[key] = value`, making `params` an object if needed.
    pub fn set_param(&mut self, key: &str, value: impl Into<serde_json::Value>) {
        if !self.params.is_object() {
            self.params = serde_json::Value::Object(Default::default());
        }
        if let Some(map) = self.params.as_object_mut() {
            map.insert(key.to_string(), value.into());
        }
    }

    /// How many times slower than `floor` this row is (`ns_per_op` ratio):
    /// a technique stated as a multiple of the physical limit.
    pub fn times(&self, floor: &Row) -> f64 {
        if floor.ns_per_op > 0.0 {
            self.ns_per_op / floor.ns_per_op
        } else {
            f64::NAN
        }
    }

    /// `extra[key]`, when `extra` is an object holding it.
    pub fn extra_val(&self, key: &str) -> Option<&serde_json::Value> {
        self.extra.as_ref()?.get(key)
    }

    /// Whether the row stands for a system that did not run here
    /// (`extra.skipped` says why).
    pub fn is_skipped(&self) -> bool {
        self.extra_val("skipped").is_some()
    }

    /// The row as one line of JSON (no trailing newline).
    pub fn to_json_line(&self) -> Result<String, RowsError> {
        Ok(serde_json::to_string(self)?)
    }
}

/// Fills `ratio_vs_baseline` for every row of `rows` that names a baseline:
/// this row's throughput divided by that of the row of the same suite whose
/// `variant` is the baseline (the first one, if several). Rows whose baseline
/// is missing, or has zero throughput, get `None`.
///
/// Pass one comparison group at a time: variant names only need to be
/// unique within a group.
pub fn set_ratios(rows: &mut [Row]) {
    let ratios: Vec<Option<f64>> = rows
        .iter()
        .map(|r| {
            let b = r.baseline.as_deref()?;
            let base = rows.iter().find(|o| o.suite == r.suite && o.variant == b)?;
            (base.ops_per_s > 0.0).then(|| r.ops_per_s / base.ops_per_s)
        })
        .collect();
    for (r, q) in rows.iter_mut().zip(ratios) {
        r.ratio_vs_baseline = q;
    }
}

/// Appends `rows` to `path` as JSON lines (one [`Row`] per line), creating
/// the file if needed.
pub fn write_json(path: &Path, rows: &[Row]) -> Result<(), RowsError> {
    let mut out = String::new();
    for r in rows {
        out.push_str(&r.to_json_line()?);
        out.push('\n');
    }
    let io = |source| RowsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io)?;
    f.write_all(out.as_bytes()).map_err(io)?;
    f.flush().map_err(io)
}

/// Reads a JSON lines file written by [`write_json`] (blank lines skipped).
pub fn read_json(path: &Path) -> Result<Vec<Row>, RowsError> {
    let text = std::fs::read_to_string(path).map_err(|source| RowsError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(RowsError::from))
        .collect()
}
