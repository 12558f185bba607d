//! Planted bugs of the cache and of the store on it (see [`Fault`] and
//! [`StoreFault`]). Public only with the `checks` feature; production
//! caches and stores always run the real protocols (`None`).

/// Bugs that can be planted to show the crash check catches them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Commit step 1 skipped: the commit point is persisted before the
    /// copies are durable.
    CommitBeforeCopy,
    /// Physical page locks released when the page's last logical lock is
    /// released, before the transaction commits (2PL, not strict 2PL).
    /// Also the bench's measurement-only "early release" ablation.
    EarlyRelease,
    /// Eviction frees a dirty slot's entry before its page is written to
    /// the disk and synced (and does not sync at all).
    EvictBeforeSync,
}

/// Store-level bugs that can be planted to show the crash check catches
/// them (never for real use).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreFault {
    /// A flush empties the immutable memtable in a transaction of its own,
    /// committed before the transaction that links the new branch: a crash
    /// between them loses every record of that memtable.
    EmptyBeforeLink,
}
