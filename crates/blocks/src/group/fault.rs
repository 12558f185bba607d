//! Planted protocol bugs of the FP-Tree leaf groups (see [`Fault`]).

/// A deliberately broken protocol, to prove the crash check catches it.
/// Public only with the `checks` feature; production tables always run
/// [`Fault::None`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    /// The real protocols.
    #[default]
    None,
    /// Sets the bitmap bit together with the slot write, under one fence.
    BitWithSlot,
    /// Completes an insert after storing its bit, before the bit's fence.
    AckBeforeFence,
    /// The executor resumes an insert waiting for "a fence after my
    /// flushes" at the fence count it saw when flushing (off by one), so
    /// the bit is stored before any fence made the slot durable.
    StaleEpoch,
    /// Recovery does not scrub free slots.
    NoScrub,
}
