//! The typed error of reading and writing rows (ARCHITECTURE.md, rule 7).

use std::path::PathBuf;

/// What can go wrong reading or writing rows as JSON lines.
#[derive(Debug, thiserror::Error)]
pub enum RowsError {
    /// Reading or writing the JSON lines file failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A row could not be encoded as JSON, or a line is not a row.
    #[error("encoding a row as JSON: {0}")]
    Json(#[from] serde_json::Error),
}
