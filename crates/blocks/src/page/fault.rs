//! Planted protocol bugs of the page store (see [`Fault`]).

/// Planted protocol bugs, to show the crash checks catch them. Public only
/// with the `checks` feature; production code always runs [`Fault::None`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The real protocols.
    #[default]
    None,
    /// CoW: payload and header (pid and pvn) under one fence: the header
    /// can be durable before the data it publishes.
    CowPublishEarly,
    /// Micro-log: no fence between the entry and the in-place writes.
    MicroLogApplyEarly,
    /// Micro-log: the version is not bumped (entry and header keep the
    /// page's current `pvn`), so entries of successive writes are
    /// indistinguishable.
    MicroLogSamePvn,
    /// Recovery does not replay micro-log entries.
    RecoveryNoReplay,
    /// Recovery takes the first valid header of a page, not the newest.
    RecoveryFirstValid,
    /// Recovery does not scrub lanes and free slot headers.
    RecoveryNoScrub,
}
