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
//! - [`row`] / [`table`]: JSON lines and the aligned stdout table.
//! - [`registry`]: the suites by name ([`suites`], [`run_suite`]).
//! - [`mod@probe`]: what this machine's persistence primitives cost [P0 §2].
//! - [`claims`]: the headline claims, each a ratio of rows beside the
//!   paper's value, with its verdict.
//!
//! Every flush and fence in every suite goes through a ferrite-pmem
//! `Region`, so the counters in the rows are exact (rule 1, rule 6).

pub mod alloc_suite;
pub mod cache_suite;
pub mod cell_suite;
pub mod claims;
pub mod ctx;
pub mod engine_suite;
pub mod error;
pub mod floor;
pub mod group_suite;
pub mod lmdb;
pub mod log;
pub mod measure;
pub mod page_suite;
#[cfg(feature = "pmdk")]
pub mod pmdk_alloc;
pub mod probe;
pub mod ptm_suite;
pub mod registry;
#[cfg(feature = "rocksdb")]
pub mod rocksdb;
pub mod row;
pub mod server_suite;
pub mod sim_suite;
pub mod table;
pub mod tx_suite;
pub mod wpp_suite;

pub use ctx::{BenchCtx, Scale};
pub use error::BenchError;
pub use floor::{FLOOR, floor_pool, floor_variant, measure_floor};
pub use measure::{Variant, median, run_interleaved, spread};
pub use probe::probe;
pub use registry::{REGISTRY, SuiteDef, SuiteFn, run_suite, suites};
pub use row::{Row, read_json, set_ratios, write_json};
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
