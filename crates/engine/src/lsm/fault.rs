//! The planted bugs of LSM ([`Fault`]): each breaks one step of the
//! engine's protocol on purpose, so that the crash checks
//! (`ferrite check engine-planted`) show they catch it. Public only with
//! the `checks` feature; a production build never sets one (the engine's
//! `fault` field stays `None`).

/// Planted bugs of this engine (checks only). See the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Publish the manifest without flushing the run's block.
    RunUnflushed,
    /// Return from a write without fencing its log record.
    AppendUnfenced,
    /// Zero (truncate) the log before the manifest switch is durable.
    TruncateBeforeSwitch,
    /// `sync` forgets its fence: relaxed commits it reports durable are not.
    SyncUnfenced,
    /// A compaction's manifest starts a new log generation (as a flush's
    /// does), which invalidates the memtable's records in the log: after a
    /// crash, acknowledged writes not yet flushed are gone.
    CompactionNewLogGen,
    /// An ingest drops the batch's keys from the memtable instead of
    /// flushing it first: reads are right until a crash, after which
    /// recovery replays the log into the memtable and its older versions
    /// of those keys shadow the batch's run.
    IngestOverMemtable,
}

impl Fault {
    /// Every planted bug, for the checks' planted runs.
    #[cfg(any(test, feature = "checks"))]
    pub const ALL: &'static [Fault] = &[
        Fault::RunUnflushed,
        Fault::AppendUnfenced,
        Fault::TruncateBeforeSwitch,
        Fault::SyncUnfenced,
        Fault::CompactionNewLogGen,
        Fault::IngestOverMemtable,
    ];
}
