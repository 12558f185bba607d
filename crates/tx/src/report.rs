//! What recovery did when a pool was opened ([`TxRecovery`]); the
//! procedure itself is in [`crate::recovery`].

use std::time::Duration;

/// What recovery did when a pool was opened.
#[derive(Clone, Debug, Default)]
pub struct TxRecovery {
    /// Undo transactions rolled back.
    pub rolled_back: usize,
    /// Redo records replayed.
    pub replayed: usize,
    /// Redo records found valid whose fresh data did not survive (not
    /// committed: their transaction never returned).
    pub discarded: usize,
    /// Clobber transactions whose inputs were restored and that were
    /// re-executed to completion.
    pub reexecuted: usize,
    /// Function id and v_log buffers (arguments first) of every
    /// re-executed transaction, in re-execution order.
    pub reexecuted_inputs: Vec<(u32, Vec<Vec<u8>>)>,
    /// Log items (byte ranges and allocator operations) applied.
    pub items: usize,
    /// Re-executions that logged different clobbered inputs than the
    /// crashed run: the function is not deterministic.
    pub nondeterministic: Vec<String>,
    /// Wall time of the whole open, heap recovery included.
    pub elapsed: Duration,
    /// The allocator's own recovery.
    pub heap: ferrite_alloc::RecoveryReport,
}
