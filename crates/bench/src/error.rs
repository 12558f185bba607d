//! The typed error of the benchmark harness (ARCHITECTURE.md, rule 7).

use std::path::PathBuf;

/// Everything that can stop a benchmark run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// `run_suite` was given a name that is not in the registry.
    #[error("unknown suite '{name}' (known suites: {known})")]
    UnknownSuite { name: String, known: String },
    /// A pool the experiment needs could not be created.
    #[error("benchmark pool: {0}")]
    Pool(#[from] ferrite_pmem::PoolError),
    /// A file the experiment needs could not be written or read.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Reading or writing rows as JSON lines failed.
    #[error(transparent)]
    Rows(#[from] ferrite_rows::RowsError),
    /// The experiment cannot run here (e.g. no cache-line flush instruction).
    #[error("{0}")]
    Unsupported(String),
}
