//! The typed error of every engine (ARCHITECTURE.md, rule 7).

use ferrite_alloc::AllocError;
use ferrite_pmem::PoolError;

/// A result whose error defaults to [`EngineError`].
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// Everything a store operation or open can fail with. Bad input and
/// corrupt pools are errors, never panics.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A key is empty or longer than [`MAX_KEY`](crate::MAX_KEY)
    /// ([`check_key`](crate::check_key)).
    #[error("key of {len} bytes: keys are 1 to {max} bytes")]
    KeySize {
        /// The key's length, bytes.
        len: usize,
        /// The longest key allowed, bytes.
        max: usize,
    },
    /// A value is longer than [`MAX_VALUE`](crate::MAX_VALUE)
    /// ([`check_value`](crate::check_value)).
    #[error("value of {len} bytes is larger than the {max}-byte limit")]
    ValueSize {
        /// The value's length, bytes.
        len: usize,
        /// The longest value allowed, bytes.
        max: usize,
    },
    /// A batch does not fit in one commit: InP's log area on the intent
    /// protocol (stores on PMDK's allocator), or LSM's 4 GiB record.
    /// Nothing was applied; split it.
    #[error("batch of {ops} operations is larger than this engine commits at once ({max})")]
    BatchTooLarge {
        /// Operations in the batch.
        ops: usize,
        /// An estimate of how many such operations one commit holds.
        max: usize,
    },
    /// The allocator is out of space (or asked for a block larger than it
    /// serves), the LSM has no room for a run, or a pool is too small to
    /// create a store in.
    #[error("store is full: {0}")]
    Full(String),
    /// The value stored under `key` fails its checksum (a stray write or
    /// a bad media block): it is not returned. The store's other keys read
    /// as before; `ferrite pool check --deep` lists every such key.
    #[error("the value of key {} fails its checksum: {detail}", show_key(key))]
    DamagedValue {
        /// The key whose value is damaged.
        key: Vec<u8>,
        /// Where and how (block, stored and computed checksums).
        detail: String,
    },
    /// Every session place is taken; returned by `Store::session`, while
    /// the store-level operations wait for a place instead.
    #[error("all {max} sessions of the store are open; drop one first")]
    TooManySessions {
        /// Most sessions open at once (the superblock's count).
        max: usize,
    },
    /// Any other allocator error: its open or recovery refused the heap,
    /// or a call was misused. Out-of-space is [`Full`](Self::Full) instead.
    #[error("allocator: {0}")]
    Alloc(AllocError),
    /// The pool file could not be created, opened, mapped or closed.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// At open: the superblock's magic is not `FRTENGN1`.
    #[error("not a Ferrite store (bad superblock magic)")]
    NotAStore,
    /// At open: the superblock's format version is not one this build reads.
    #[error("unsupported store format version {found} (this build reads version {supported})")]
    UnsupportedVersion {
        /// The version the superblock records.
        found: u16,
        /// The version this build reads.
        supported: u16,
    },
    /// At open: the engine's own on-media format (its fixed area's
    /// version) is not the one this build reads: an InP store of format 1,
    /// made before tuples and nodes carried checksums, say. Nothing was
    /// changed; open it with the build that made it and copy its keys out
    /// (`ferrite kv scan`), or restore a newer copy.
    #[error(
        "{engine} store of format version {found}: this build reads version {supported} only (copy the keys out with the build that made it)"
    )]
    EngineFormat {
        /// The engine (`inp`, `cow`, `lsm`).
        engine: &'static str,
        /// The version the store records.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// At open: the superblock's CRC32C does not match its bytes.
    #[error(
        "store superblock checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
    )]
    Checksum {
        /// The checksum the superblock records.
        stored: u32,
        /// The checksum of the bytes as read.
        computed: u32,
    },
    /// At open: the options expect another engine than the superblock's
    /// ([`StoreOptions::new`](crate::StoreOptions::new)).
    #[error("the store holds engine '{found}', not '{asked}'")]
    WrongEngine {
        /// The engine the store holds.
        found: String,
        /// The engine the options asked for.
        asked: String,
    },
    /// The pool's contents are inconsistent: a superblock field out of
    /// bounds, a fixed area, log record or node that fails its checks
    /// (at open, or on a read or [`walk`](crate::Engine::walk)).
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// The options cannot work: a session count outside 1..=1000 or unlike
    /// the store's, engine knobs out of range, areas that do not fit, or
    /// the PMDK allocator in a Ferrite pool.
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

/// A key for a message: text when it is printable ASCII, else hex.
pub(crate) fn show_key(k: &[u8]) -> String {
    if !k.is_empty() && k.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        format!("'{}'", String::from_utf8_lossy(k))
    } else {
        let hex: String = k.iter().map(|b| format!("{b:02x}")).collect();
        format!("0x{hex}")
    }
}
