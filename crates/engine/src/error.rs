//! The typed error of every engine (ARCHITECTURE.md, rule 7).

use ferrite_alloc::AllocError;
use ferrite_pmem::PoolError;

pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// Everything a store operation or open can fail with. Bad input and
/// corrupt pools are errors, never panics.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("key of {len} bytes: keys are 1 to {max} bytes")]
    KeySize { len: usize, max: usize },
    #[error("value of {len} bytes is larger than the {max}-byte limit")]
    ValueSize { len: usize, max: usize },
    #[error("batch of {ops} operations is larger than this engine commits at once ({max})")]
    BatchTooLarge { ops: usize, max: usize },
    #[error("store is full: {0}")]
    Full(String),
    #[error("all {max} sessions of the store are open; drop one first")]
    TooManySessions { max: usize },
    #[error("allocator: {0}")]
    Alloc(AllocError),
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error("not a Ferrite store (bad superblock magic)")]
    NotAStore,
    #[error("unsupported store format version {found} (this build reads version {supported})")]
    UnsupportedVersion { found: u16, supported: u16 },
    #[error(
        "store superblock checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
    )]
    Checksum { stored: u32, computed: u32 },
    #[error("the store holds engine '{found}', not '{asked}'")]
    WrongEngine { found: String, asked: String },
    #[error("corrupt store: {0}")]
    Corrupt(String),
    #[error("invalid store option: {0}")]
    BadOption(String),
}

impl From<AllocError> for EngineError {
    /// Out-of-space becomes [`EngineError::Full`]: a caller can tell "the
    /// pool is full" from misuse without knowing the allocator.
    fn from(e: AllocError) -> Self {
        match e {
            AllocError::OutOfSpace { .. } | AllocError::TooLarge { .. } => {
                EngineError::Full(e.to_string())
            }
            e => EngineError::Alloc(e),
        }
    }
}
