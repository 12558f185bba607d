//! `ferrite-bench`: the experiment harness and its suites.
//!
//! An experiment is a function that yields [`Row`]s (ARCHITECTURE.md,
//! "Benchmarks"). The pieces:
//!
//! - [`BenchCtx`] / [`Scale`]: what a run is asked to do.
//! - [`measure`]: [`Variant`]s measured interleaved (A B C A B C …) by
//!   [`run_interleaved`]: median ns/op over repetitions, exact
//!   ferrite-pmem counters per op, ratios against a baseline variant.
//! - [`floor`]: the cheapest persist of N bytes (one non-temporal copy + one
//!   fence), the physical limit techniques are stated against.
//! - [`table`]: the aligned stdout table of [`Row`]s (the rows, their JSON
//!   lines and the headline [`claims`] are ferrite-rows', re-exported here).
//! - [`registry`]: the suites by name ([`suites()`], [`run_suite`]).
//! - [`mod@suites`]: the experiments, one module each ([`mod@probe`]: what
//!   this machine's persistence primitives cost [P0 §2]).
//! - [`peers`]: the bindings of the systems Ferrite is compared with
//!   (LMDB; RocksDB and PMDK's allocator behind features).
//!
//! Every flush and fence in every suite goes through a ferrite-pmem
//! `Region`, so the counters in the rows are exact (rule 1, rule 6).

pub mod ctx;
pub mod error;
pub mod floor;
pub mod measure;
pub mod peers;
pub mod registry;
pub mod suites;
pub mod table;

// Rows and claims live in ferrite-rows (what `ferrite report` reads without
// linking the suites); their paths here are kept for the suites and users.
pub use ferrite_rows::{claims, row};

pub use ctx::{BenchCtx, Scale};
pub use error::BenchError;
pub use floor::{FLOOR, floor_pool, floor_variant, measure_floor};
pub use measure::{Variant, median, run_interleaved, spread};
pub use registry::{REGISTRY, SuiteDef, SuiteFn, run_suite, suites};
pub use row::{Row, read_json, set_ratios, write_json};
pub use suites::probe::{self, probe};
pub use table::{format_table, print_table};

/// Prints `rows` as a table on stdout and, when `ctx.json` is set,
/// appends them to that file as JSON lines. The headline claims of
/// everything that ran ([`claims::print_summary`]) come once, after the
/// last suite.
pub fn report(rows: &[Row], ctx: &BenchCtx) -> Result<(), BenchError> {
    print_table(rows);
    if let Some(path) = &ctx.json {
        write_json(path, rows)?;
    }
    Ok(())
}
