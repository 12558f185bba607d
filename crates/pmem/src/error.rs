//! Typed errors for pools (ARCHITECTURE.md, rule 7).

use std::path::PathBuf;

/// Why a pool could not be created, opened or grown. Every failure of
/// [`crate::Pool`] is one of these; none panics on a corrupt file.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("{}: no such pool file", path.display())]
    /// Opening a pool file that does not exist.
    NotFound {
        /// The file asked for.
        path: PathBuf,
    },
    #[error("{}: already exists", path.display())]
    /// Creating a pool over a file that already exists (never overwritten).
    AlreadyExists {
        /// The existing file.
        path: PathBuf,
    },
    #[error("{}: {source}", path.display())]
    /// An operating-system call on the pool file failed.
    Io {
        /// The pool file.
        path: PathBuf,
        /// What the system reported.
        source: std::io::Error,
    },
    #[error("not a Ferrite pool (bad magic {found:02x?})")]
    /// The first 8 bytes are not the pool magic `FERRITE\0`.
    NotAPool {
        /// The 8 bytes found at offset 0.
        found: [u8; 8],
    },
    #[error("pool has layout '{found}', expected '{expected}'")]
    /// The header's layout name is not the one the caller asked for.
    WrongLayout {
        /// The layout the caller asked for.
        expected: String,
        /// The layout the header records.
        found: String,
    },
    #[error("pool is truncated: {actual} bytes, header says {expected}")]
    /// The file is shorter than the size its header records.
    Truncated {
        /// Bytes the header records.
        expected: u64,
        /// Bytes the file has.
        actual: u64,
    },
    #[error("pool header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    /// The header's CRC32C does not match its bytes.
    Checksum {
        /// The checksum stored in the header.
        stored: u32,
        /// The checksum of the header bytes as read.
        computed: u32,
    },
    #[error("unsupported pool format version {found} (this build reads version {supported})")]
    /// The header's format version is not the one this build reads.
    UnsupportedVersion {
        /// The version in the header.
        found: u32,
        /// The version this build reads ([`crate::header::FORMAT_VERSION`]).
        supported: u32,
    },
    #[error("pool header is corrupt: {what}")]
    /// A header field is out of range although its checksum matches.
    Corrupt {
        /// Which field, and what is wrong with it.
        what: String,
    },
    #[error("{}: pool is open elsewhere (locked)", path.display())]
    /// Another process holds the pool file's lock (one opener at a time).
    Locked {
        /// The locked file.
        path: PathBuf,
    },
    /// The file is a byte copy of a pool taken while that pool was open
    /// (its header's open record names another file: [`crate::opened`]).
    #[error(
        "{}: a copy of a pool that was open (by pid {pid}) when copied: it may be torn, so it is not opened; copy a live pool with `ferrite pool backup`, or open the original, which recovers, and copy it closed",
        path.display()
    )]
    CopiedWhileOpen {
        /// The copy that was to be opened.
        path: PathBuf,
        /// The process that had the original open, per its open record.
        pid: u32,
    },
    #[error("pool size {size} is too small (minimum {min} bytes)")]
    /// A pool size below [`crate::header::MIN_POOL_SIZE`] (twice the header).
    TooSmall {
        /// The size asked for, in bytes.
        size: u64,
        /// The smallest size accepted, in bytes.
        min: u64,
    },
    #[error("out of space: {what}")]
    /// The file system has no room for the pool's bytes, or the pool is
    /// larger than this process's address space.
    OutOfSpace {
        /// What needed the space.
        what: String,
    },
    #[error("invalid layout name: {0}")]
    /// A layout name that is empty, longer than the header's field or
    /// contains NUL; the payload says which rule it breaks.
    BadLayoutName(String),
    #[error("{0}")]
    /// An option the pool cannot honour: a maximum size below the size, a
    /// flush instruction this CPU lacks, a domain the medium does not
    /// support, a root outside the data area; the payload is the message.
    Config(String),
}

/// A result whose error is a [`PoolError`] unless said otherwise.
pub type Result<T, E = PoolError> = std::result::Result<T, E>;
