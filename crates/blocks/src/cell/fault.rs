//! Planted protocol bugs of the cell arrays (see [`Fault`]).

#[cfg(any(test, feature = "checks"))]
use super::CellKind;

/// Planted protocol bugs. They exist only so the crash checks can be shown
/// to catch a broken protocol (`checks::check_cell_fault`); production
/// arrays always run [`Fault::None`]. Public only with the `checks`
/// feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The correct protocols.
    None,
    /// CoW: the flag is flipped and persisted before the new copy is durable.
    CowFlipBeforeCopy,
    /// Log: the value is written in place (and persisted) before its log
    /// entry is written, so the in-place write is unprotected.
    LogInPlaceFirst,
    /// Log: recovery replays the slot without checking its checksum, so a
    /// torn entry is applied.
    LogNoChecksum,
    /// FAM: recovery does not roll torn cells back.
    FamNoRollback,
    /// FAM: updates do not advance the 2-bit version, so recovery cannot
    /// tell a torn cell.
    FamNoVersion,
    /// FAM: recovery restores versions and payloads under two separate
    /// fences; correct when it runs once, not idempotent when it crashes
    /// between them (only nested crashes catch it).
    FamTwoPhaseRollback,
}

// Only the crash checks list and name the planted bugs.
#[cfg(any(test, feature = "checks"))]
impl Fault {
    /// Every planted bug (not [`Fault::None`]).
    pub const PLANTED: [Fault; 6] = [
        Fault::CowFlipBeforeCopy,
        Fault::LogInPlaceFirst,
        Fault::LogNoChecksum,
        Fault::FamNoRollback,
        Fault::FamNoVersion,
        Fault::FamTwoPhaseRollback,
    ];

    /// The technique a fault belongs to (`None` for [`Fault::None`]).
    pub fn kind(self) -> Option<CellKind> {
        match self {
            Fault::None => None,
            Fault::CowFlipBeforeCopy => Some(CellKind::Cow),
            Fault::LogInPlaceFirst | Fault::LogNoChecksum => Some(CellKind::Log),
            Fault::FamNoRollback | Fault::FamNoVersion | Fault::FamTwoPhaseRollback => {
                Some(CellKind::Fam)
            }
        }
    }

    /// Kebab-case name, e.g. `cow-flip-before-copy`.
    pub fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::CowFlipBeforeCopy => "cow-flip-before-copy",
            Fault::LogInPlaceFirst => "log-in-place-first",
            Fault::LogNoChecksum => "log-no-checksum",
            Fault::FamNoRollback => "fam-no-rollback",
            Fault::FamNoVersion => "fam-no-version",
            Fault::FamTwoPhaseRollback => "fam-two-phase-rollback",
        }
    }
}
