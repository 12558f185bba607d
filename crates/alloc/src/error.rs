//! The typed error of every allocator in this crate (ARCHITECTURE.md, rule 7).

/// Everything an allocator operation or a heap open can fail with.
///
/// Misuse (double free, a foreign reservation, a link into allocator
/// metadata) and bad input (a corrupt or foreign heap) are errors, never
/// panics: a caller can report them and carry on.
#[derive(Debug, thiserror::Error)]
pub enum AllocError {
    #[error("allocation of 0 bytes")]
    ZeroSize,
    #[error("allocation of {size} bytes is larger than this heap can ever hold ({max} bytes)")]
    TooLarge { size: usize, max: usize },
    #[error(
        "out of space: no room for {size} bytes ({free} bytes free, fragmented or held in runs of other sizes)"
    )]
    OutOfSpace { size: usize, free: u64 },
    #[error("all {lanes} lanes of the heap are attached to threads; detach one first")]
    NoLane { lanes: usize },
    #[error("pool offset {off:#x} is not an allocated block of this heap")]
    NotAllocated { off: u64 },
    #[error("pool offset {off:#x} is already being freed (double free)")]
    DoubleFree { off: u64 },
    #[error("the reservation belongs to another {what}")]
    Foreign { what: &'static str },
    #[error("the reservation at {off:#x} was already published or cancelled")]
    StaleReservation { off: u64 },
    #[error(
        "link target {off:#x} is not an 8-byte aligned word of the pool outside the allocator's metadata"
    )]
    BadLink { off: u64 },
    #[error(
        "a publish of {ops} logged stores does not fit in a lane (at most {max}); publish in smaller batches"
    )]
    BatchTooLarge { ops: usize, max: usize },
    #[error("heap region at pool offset {base:#x} must start on a {align}-byte boundary")]
    Misaligned { base: usize, align: usize },
    #[error("heap region of {len} bytes is too small (at least {min} bytes needed)")]
    RegionTooSmall { len: usize, min: usize },
    #[error("this handle has a prepared publish pending; commit or abort it first")]
    PreparePending,
    #[error("invalid heap option: {0}")]
    BadOption(String),
    #[error("not a Ferrite {what} (bad magic)")]
    NotAHeap { what: &'static str },
    #[error("unsupported {what} format version {found} (this build reads version {supported})")]
    UnsupportedVersion {
        what: &'static str,
        found: u16,
        supported: u16,
    },
    #[error("heap {what} checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        what: String,
        stored: u32,
        computed: u32,
    },
    #[error("corrupt heap: {0}")]
    Corrupt(String),
    /// The allocator cannot do this operation at all (e.g. PMDK's heap
    /// cannot hand its metadata stores to a caller's log for `prepare`).
    #[error("not supported by the {allocator} allocator: {what}")]
    Unsupported {
        allocator: &'static str,
        what: &'static str,
    },
    /// An allocator outside this crate (PMDK's) failed in a way none of the
    /// variants above describes; `msg` is its own report.
    #[error("{allocator} allocator: {msg}")]
    External {
        allocator: &'static str,
        msg: String,
    },
}

pub type Result<T, E = AllocError> = std::result::Result<T, E>;
