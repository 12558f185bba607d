//! The typed error of every transaction operation (ARCHITECTURE.md, rule 7).

use ferrite_alloc::AllocError;
use ferrite_pmem::PoolError;

/// Everything creating, opening (recovering) or using a transactional pool
/// can fail with. Misuse by a transaction function (an access outside the
/// pool's data, a write into a block it freed, an abort after the first
/// write under clobber logging) and bad input (a corrupt pool) are errors,
/// never panics.
#[derive(Debug, thiserror::Error)]
pub enum TxError {
    #[error("pool: {0}")]
    Pool(#[from] PoolError),
    #[error("allocator: {0}")]
    Alloc(#[from] AllocError),
    #[error("{0}")]
    Bounds(#[from] ferrite_pmem::OutOfBounds),
    #[error("not a Ferrite transactional pool ({0})")]
    NotATxPool(String),
    #[error(
        "unsupported transactional pool format version {found} (this build reads version {supported})"
    )]
    UnsupportedVersion { found: u16, supported: u16 },
    #[error(
        "transactional pool superblock checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
    )]
    Checksum { stored: u32, computed: u32 },
    #[error("corrupt transactional pool: {0}")]
    Corrupt(String),
    /// A data structure's header (`ferrite-ds`) of a format version this
    /// build does not read. Version 1 headers had no version field; they
    /// are recognised by their zero checksum field and reported as `found: 1`.
    #[error(
        "{structure} header at {at:#x} has format version {found} (this build reads version {supported}); recreate the structure with this build"
    )]
    HeaderVersion {
        structure: &'static str,
        at: u64,
        found: u16,
        supported: u16,
    },
    /// A data structure's header whose checksum does not match.
    #[error(
        "{structure} header at {at:#x} fails its checksum (stored {stored:#010x}, computed {computed:#010x})"
    )]
    HeaderChecksum {
        structure: &'static str,
        at: u64,
        stored: u32,
        computed: u32,
    },
    #[error("invalid option: {0}")]
    BadOption(String),
    #[error("all {slots} log slots are attached to threads; detach one first")]
    NoSlot { slots: usize },
    #[error("transaction function {id} ({name}) is not registered with this pool")]
    Unregistered { id: u32, name: &'static str },
    #[error("transaction function id {id} is registered twice ({first} and {second})")]
    DuplicateId {
        id: u32,
        first: &'static str,
        second: &'static str,
    },
    #[error("recovery needs transaction function {id}, which is not registered")]
    UnknownFunction { id: u32 },
    #[error(
        "{what} at pool offset {off:#x}, {len} bytes, is outside the data a transaction may touch"
    )]
    OutOfBounds {
        what: &'static str,
        off: u64,
        len: u64,
    },
    #[error(
        "write at pool offset {off:#x}, {len} bytes, straddles the edge of a block allocated in this transaction"
    )]
    StraddlesBlock { off: u64, len: u64 },
    #[error("access at pool offset {off:#x} touches a block this transaction freed")]
    UseAfterFree { off: u64 },
    #[error(
        "transaction function made more than {limit} reads and writes (a loop over corrupt data?)"
    )]
    Runaway { limit: u64 },
    #[error("the transaction's log needs {need} bytes, its log area holds {have}")]
    LogFull { need: usize, have: usize },
    #[error(
        "transaction function {name} failed after its first write under clobber logging ({source}); it cannot be rolled back: reopen the pool to re-execute it"
    )]
    AbortAfterWrite {
        name: &'static str,
        #[source]
        source: Box<TxError>,
    },
    #[error("an earlier clobber transaction failed after writing; reopen the pool to recover it")]
    Poisoned,
    #[error("re-execution of transaction function {id} during recovery failed: {source}")]
    Reexecution {
        id: u32,
        #[source]
        source: Box<TxError>,
    },
    /// Raised by a transaction function to abort (undo, redo, no-log: the
    /// transaction is rolled back; clobber: only before its first write).
    #[error("transaction aborted: {0}")]
    Abort(String),
}

pub type Result<T, E = TxError> = std::result::Result<T, E>;
