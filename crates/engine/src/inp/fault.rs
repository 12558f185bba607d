//! The planted bugs of InP ([`Fault`]): each breaks one step of the
//! engine's protocol on purpose, so that the crash checks
//! (`ferrite check engine-planted`) show they catch it. Public only with
//! the `checks` feature; a production build never sets one (the engine's
//! `fault` field stays `None`).

/// Planted bugs of this engine (checks only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The record is not flushed before the commit fence: it may not be
    /// durable when the write returns (a later crash loses an acknowledged
    /// write, or replays a torn one).
    SkipRecordFlush,
    /// The record's changes are applied in place *before* the commit fence:
    /// a crash at that fence can leave part of an unacknowledged operation
    /// (a bitmap bit without its slot, half a value).
    ApplyBeforeCommit,
    /// The previous record's in-place stores are never flushed: once a
    /// later record overwrites its log area, they may be lost.
    SkipDeferredFlush,
    /// Intent protocol: the blocks are published without an intent
    /// record, so a crash between the publish and the commit leaks them.
    SkipIntent,
    /// Intent protocol: the record's frees are published before its
    /// commit, so a crash before the commit leaves the committed tree
    /// pointing at freed blocks.
    FreeBeforeCommit,
    /// A record too large for its log area is stored in its block without
    /// a flush: the pointer record may be durable while the record is not,
    /// and an acknowledged batch is lost.
    SkipOverflowFlush,
    /// An update in place logs its value but stores the tuple's new
    /// checksum only after the commit fence, outside the record and every
    /// flush: after a crash the replayed value meets the old checksum, and
    /// an acknowledged value reads as damaged.
    ChecksumAfterFence,
}

impl Fault {
    /// The faults of the commit path every store runs (the checks'
    /// `planted_faults`).
    #[cfg(any(test, feature = "checks"))]
    pub const ALL: &'static [Fault] = &[
        Fault::SkipRecordFlush,
        Fault::ApplyBeforeCommit,
        Fault::SkipDeferredFlush,
        Fault::SkipOverflowFlush,
        Fault::ChecksumAfterFence,
    ];
    /// The faults of the intent protocol only (a store without it never
    /// reaches them).
    #[cfg(any(test, feature = "checks"))]
    pub const INTENT: &'static [Fault] = &[Fault::SkipIntent, Fault::FreeBeforeCommit];
}
