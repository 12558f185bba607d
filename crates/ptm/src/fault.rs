//! Planted bugs the crash checks must catch (`ferrite check ptm-planted`).
//! Compiled into every build (the protocol code tests for them), but
//! nameable outside this crate, and settable through
//! [`crate::PtmOptions::fault`], only with the `checks` feature: a
//! production build cannot plant one.

#[cfg(any(test, feature = "checks"))]
use crate::Algorithm;

/// A planted bug (one protocol step left out or misordered).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// orec-eager: no fence between an undo entry and its in-place store.
    UndoNoFence,
    /// orec-eager: the commit marks the transaction done without fencing
    /// its in-place data first.
    CommitBeforeData,
    /// orec-lazy: write-back starts before the redo log is durable.
    WriteBackBeforeLog,
    /// orec-lazy: the orecs are released before the log is marked applied.
    ReleaseBeforeApplied,
    /// orec-lazy: the redo log's checksum leaves out the blocks the
    /// transaction allocated and filled (a crash at the commit fence can
    /// keep the log and lose their bytes).
    UncheckedNewBlocks,
    /// Recovery marks every slot idle without undoing or replaying.
    SkipRecovery,
}

#[cfg(any(test, feature = "checks"))]
impl Fault {
    /// Every planted bug.
    pub const ALL: [Fault; 6] = [
        Fault::UndoNoFence,
        Fault::CommitBeforeData,
        Fault::WriteBackBeforeLog,
        Fault::ReleaseBeforeApplied,
        Fault::UncheckedNewBlocks,
        Fault::SkipRecovery,
    ];

    /// The algorithm whose protocol the fault breaks (`None`: both).
    pub fn algorithm(self) -> Option<Algorithm> {
        match self {
            Fault::UndoNoFence | Fault::CommitBeforeData => Some(Algorithm::Eager),
            Fault::WriteBackBeforeLog | Fault::ReleaseBeforeApplied | Fault::UncheckedNewBlocks => {
                Some(Algorithm::Lazy)
            }
            Fault::SkipRecovery => None,
        }
    }

    /// The fault's name in check reports.
    pub fn name(self) -> &'static str {
        match self {
            Fault::UndoNoFence => "undo-no-fence",
            Fault::CommitBeforeData => "commit-before-data",
            Fault::WriteBackBeforeLog => "write-back-before-log",
            Fault::ReleaseBeforeApplied => "release-before-applied",
            Fault::UncheckedNewBlocks => "unchecked-new-blocks",
            Fault::SkipRecovery => "skip-recovery",
        }
    }
}
