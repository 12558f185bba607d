//! Planted protocol bugs of the logs (see [`Fault`]).

/// Planted protocol bugs, to show the crash checks catch them. Public only
/// with the `checks` feature; production code always runs [`Fault::None`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The real protocols.
    #[default]
    None,
    /// Classic: header and payload are flushed but not fenced before the footer.
    ClassicNoFirstFence,
    /// Header: the size slot is persisted before the entry is flushed.
    HeaderPublishFirst,
    /// RAWL: recovery ignores the validity bits.
    RawlNoValidityCheck,
    /// RAWL: the validity bit keeps its meaning across laps.
    RawlNoFlip,
    /// RAWL: recovery leaves valid-looking words of a crashed append in the free space.
    RawlNoScrub,
    /// PopLog: recovery does not compare the popcount.
    PopLogNoPopcountCheck,
    /// PopLog: recovery leaves what a crashed append wrote in the free space.
    PopLogNoScrub,
}
