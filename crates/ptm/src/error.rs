//! Errors of the PTM.

use ferrite_alloc::AllocError;
use ferrite_pmem::PoolError;

/// Everything that can go wrong opening a PTM or running a transaction.
#[derive(Debug, thiserror::Error)]
pub enum PtmError {
    #[error("pool: {0}")]
    /// The pool underneath failed.
    Pool(#[from] PoolError),
    #[error("allocator: {0}")]
    /// The heap failed (out of space, a bad free).
    Alloc(#[from] AllocError),
    /// The pool's data area does not hold a PTM (no superblock, or another
    /// structure's).
    #[error("not a PTM pool: {0}")]
    NotAPtm(String),
    /// The superblock or a log is damaged beyond what a crash can do.
    #[error("corrupt PTM pool: {0}")]
    Corrupt(String),
    #[error("unsupported PTM format version {0} (this build reads 1)")]
    /// The superblock's format version is not the one this build reads.
    Version(u16),
    #[error("bad option: {0}")]
    /// An option out of range (slots, log size).
    BadOption(String),
    /// Every log slot is attached to a thread.
    #[error("all {0} thread slots are in use")]
    NoSlot(u16),
    /// The transaction needs more log than a slot has.
    #[error("transaction too large for its log ({need} bytes, the slot has {have})")]
    LogFull {
        /// Bytes of log the transaction needs.
        need: usize,
        /// Bytes of log a slot has.
        have: usize,
    },
    /// An access outside the PTM's data (the heap's blocks and the root word).
    #[error("access to pool offset {off:#x} (+{len}) is outside the PTM's data")]
    OutOfBounds {
        /// Pool offset of the access.
        off: u64,
        /// Bytes accessed.
        len: usize,
    },
    /// An address that is not 8-byte aligned where a word is needed.
    #[error("pool offset {0:#x} is not 8-byte aligned")]
    Misaligned(u64),
    /// The body asked to roll back ([`crate::Tx::abort`]).
    #[error("transaction aborted by its body (code {code})")]
    Aborted {
        /// The code the body passed to [`crate::Tx::abort`].
        code: u64,
    },
    /// A record of a structure built on the PTM ([`crate::ds`]) failed its
    /// checksum: its bytes changed since the transaction that wrote it.
    #[error("{structure} record key {key}: {what}")]
    CorruptRecord {
        /// `ptm hash`, `ptm bptree` or `ptm rbtree`.
        structure: &'static str,
        /// The key looked up (or, from a walk, the key as stored).
        key: u64,
        /// What failed (which check).
        what: String,
    },
    /// A structure's header has a format version this build does not
    /// read (an older one has no record checksums).
    #[error(
        "{structure} header at {at:#x}: format version {found}, this build reads {supported} (recreate the structure)"
    )]
    StructureVersion {
        /// `ptm hash`, `ptm bptree` or `ptm rbtree`.
        structure: &'static str,
        /// Pool offset of the header.
        at: u64,
        /// The version word found.
        found: u64,
        /// The version this build writes and reads.
        supported: u64,
    },
    /// A transaction kept conflicting past the retry limit.
    #[error("transaction gave up after {0} conflicting attempts")]
    Starved(u64),
}

/// A result with a [`PtmError`].
pub type Result<T, E = PtmError> = std::result::Result<T, E>;
