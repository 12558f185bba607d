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
    /// The underlying pool failed (open, create, root update).
    #[error("pool: {0}")]
    Pool(#[from] PoolError),
    /// The heap inside the pool failed: its recovery, or an allocation
    /// or free a transaction asked for (out of memory, a double free).
    #[error("allocator: {0}")]
    Alloc(#[from] AllocError),
    /// A region access outside its bounds while formatting or opening.
    #[error("{0}")]
    Bounds(#[from] ferrite_pmem::OutOfBounds),
    /// The pool has no root, or its root does not point at a
    /// transactional superblock (magic `FERRTXPL`); the payload says which.
    #[error("not a Ferrite transactional pool ({0})")]
    NotATxPool(String),
    /// The superblock's format version is not the one this build reads.
    #[error(
        "unsupported transactional pool format version {found} (this build reads version {supported})"
    )]
    UnsupportedVersion {
        /// The version in the superblock.
        found: u16,
        /// The version this build reads ([`crate::format::VERSION`]).
        supported: u16,
    },
    /// The superblock's CRC32C (bytes 60..64) does not match bytes 0..60.
    #[error(
        "transactional pool superblock checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
    )]
    Checksum {
        /// The checksum stored in the superblock.
        stored: u32,
        /// The checksum of its bytes as read.
        computed: u32,
    },
    /// A field out of range although its checksum matches (a geometry
    /// outside the pool, an unknown strategy, a log record naming an
    /// impossible range); the payload says what.
    #[error("corrupt transactional pool: {0}")]
    Corrupt(String),
    /// A data structure's header (`ferrite-ds`) of a format version this
    /// build does not read. Version 1 headers had no version field; they
    /// are recognised by their zero checksum field and reported as `found: 1`.
    #[error(
        "{structure} header at {at:#x} has format version {found} (this build reads version {supported}); recreate the structure with this build"
    )]
    HeaderVersion {
        /// The structure's name (`hashmap`, `bptree`, ...).
        structure: &'static str,
        /// Pool offset of its header.
        at: u64,
        /// The version the header records.
        found: u16,
        /// The version this build reads.
        supported: u16,
    },
    /// A data structure's header whose checksum does not match.
    #[error(
        "{structure} header at {at:#x} fails its checksum (stored {stored:#010x}, computed {computed:#010x})"
    )]
    HeaderChecksum {
        /// The structure's name.
        structure: &'static str,
        /// Pool offset of its header.
        at: u64,
        /// The checksum stored in the header.
        stored: u32,
        /// The checksum of the header as read.
        computed: u32,
    },
    /// A [`crate::TxOptions`] value out of range (slots, area size, a pool
    /// too small for the log slots); the payload says which.
    #[error("invalid option: {0}")]
    BadOption(String),
    /// [`crate::TxPool::thread`] with every log slot held by a thread.
    #[error("all {slots} log slots are attached to threads; detach one first")]
    NoSlot {
        /// Log slots the pool has.
        slots: usize,
    },
    /// Running a function that is not in the pool's [`crate::Registry`]
    /// (recovery could not re-execute it).
    #[error("transaction function {id} ({name}) is not registered with this pool")]
    Unregistered {
        /// The function's id.
        id: u32,
        /// The function's name.
        name: &'static str,
    },
    /// Registering a function whose id another function already has.
    #[error("transaction function id {id} is registered twice ({first} and {second})")]
    DuplicateId {
        /// The shared id.
        id: u32,
        /// The function registered first.
        first: &'static str,
        /// The function refused.
        second: &'static str,
    },
    /// Recovery must re-execute a clobber transaction whose function id
    /// is not in the registry the pool was opened with.
    #[error("recovery needs transaction function {id}, which is not registered")]
    UnknownFunction {
        /// The id the v_log records.
        id: u32,
    },
    /// An access outside the heap's data pages and the root word (log
    /// slots, allocator metadata, the pool header).
    #[error(
        "{what} at pool offset {off:#x}, {len} bytes, is outside the data a transaction may touch"
    )]
    OutOfBounds {
        /// `read`, `write`, `free`, ...
        what: &'static str,
        /// Pool offset of the access.
        off: u64,
        /// Bytes of the access.
        len: u64,
    },
    /// A write that starts inside a block allocated in this transaction
    /// and runs past its end.
    #[error(
        "write at pool offset {off:#x}, {len} bytes, straddles the edge of a block allocated in this transaction"
    )]
    StraddlesBlock {
        /// Pool offset of the write.
        off: u64,
        /// Bytes of the write.
        len: u64,
    },
    /// An access to a block the same transaction freed.
    #[error("access at pool offset {off:#x} touches a block this transaction freed")]
    UseAfterFree {
        /// Pool offset of the access.
        off: u64,
    },
    /// A transaction exceeded the pool's access limit (a loop that never
    /// ends, typically over corrupt data).
    #[error(
        "transaction function made more than {limit} reads and writes (a loop over corrupt data?)"
    )]
    Runaway {
        /// The access limit in force ([`crate::TxPool::set_access_limit`]).
        limit: u64,
    },
    /// The transaction's log does not fit in its log area; detected before
    /// anything is written that could not be rolled back.
    #[error("the transaction's log needs {need} bytes, its log area holds {have}")]
    LogFull {
        /// Bytes the log needs.
        need: usize,
        /// Bytes of one log area ([`crate::TxOptions::area_bytes`]).
        have: usize,
    },
    /// A clobber function failed after its first write: it stays in
    /// flight, the pool is poisoned, and reopening re-executes it.
    #[error(
        "transaction function {name} failed after its first write under clobber logging ({source}); it cannot be rolled back: reopen the pool to re-execute it"
    )]
    AbortAfterWrite {
        /// The function's name.
        name: &'static str,
        /// Why it failed.
        #[source]
        source: Box<TxError>,
    },
    /// Any operation on a pool poisoned by [`TxError::AbortAfterWrite`].
    #[error("an earlier clobber transaction failed after writing; reopen the pool to recover it")]
    Poisoned,
    /// A clobber re-execution during recovery failed: the open fails.
    #[error("re-execution of transaction function {id} during recovery failed: {source}")]
    Reexecution {
        /// The function's id.
        id: u32,
        /// Why the re-execution failed.
        #[source]
        source: Box<TxError>,
    },
    /// Raised by a transaction function to abort (undo, redo, no-log: the
    /// transaction is rolled back; clobber: only before its first write).
    #[error("transaction aborted: {0}")]
    Abort(String),
}

/// A result whose error is a [`TxError`] unless said otherwise.
pub type Result<T, E = TxError> = std::result::Result<T, E>;
