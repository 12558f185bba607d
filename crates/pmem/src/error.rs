//! Typed errors for pools (ARCHITECTURE.md, rule 7).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("{}: no such pool file", path.display())]
    NotFound { path: PathBuf },
    #[error("{}: already exists", path.display())]
    AlreadyExists { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("not a Ferrite pool (bad magic {found:02x?})")]
    NotAPool { found: [u8; 8] },
    #[error("pool has layout '{found}', expected '{expected}'")]
    WrongLayout { expected: String, found: String },
    #[error("pool is truncated: {actual} bytes, header says {expected}")]
    Truncated { expected: u64, actual: u64 },
    #[error("pool header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum { stored: u32, computed: u32 },
    #[error("unsupported pool format version {found} (this build reads version {supported})")]
    UnsupportedVersion { found: u32, supported: u32 },
    #[error("pool header is corrupt: {what}")]
    Corrupt { what: String },
    #[error("{}: pool is open elsewhere (locked)", path.display())]
    Locked { path: PathBuf },
    /// The file is a byte copy of a pool taken while that pool was open
    /// (its header's open record names another file: [`crate::opened`]).
    #[error(
        "{}: a copy of a pool that was open (by pid {pid}) when copied: it may be torn, so it is not opened; copy a live pool with `ferrite pool backup`, or open the original, which recovers, and copy it closed",
        path.display()
    )]
    CopiedWhileOpen { path: PathBuf, pid: u32 },
    #[error("pool size {size} is too small (minimum {min} bytes)")]
    TooSmall { size: u64, min: u64 },
    #[error("out of space: {what}")]
    OutOfSpace { what: String },
    #[error("invalid layout name: {0}")]
    BadLayoutName(String),
    #[error("{0}")]
    Config(String),
}

pub type Result<T, E = PoolError> = std::result::Result<T, E>;
