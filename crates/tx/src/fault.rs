//! Planted protocol bugs of transactions and recovery (see [`Fault`]).

/// Planted protocol bugs, to show the crash checks catch them. Public only
/// with the `checks` feature; production pools always run [`Fault::None`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The real protocols.
    #[default]
    None,
    /// Undo: a snapshot record is flushed but not fenced before the write.
    UndoNoFence,
    /// Redo: writes are applied in place before the redo record is fenced.
    RedoApplyEarly,
    /// Clobber: clobbered inputs are not logged (the v_log still is).
    ClobberNoInputLog,
    /// Recovery restores clobbered inputs but does not re-execute.
    NoReexecute,
    /// Recovery replays REDO records' allocator operations before the heap
    /// has judged its lane records (`tests/mixed_heap.rs`).
    RedoBeforeHeap,
    /// Recovery handles the interrupted transactions of only the lowest
    /// slot that has any: a recovery written as if one transaction could
    /// be in flight. Only crashes that catch two slots mid-transaction
    /// (the interleaved crash checks) can tell.
    FirstSlotOnly,
}
