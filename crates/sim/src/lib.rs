//! `ferrite-sim`: a model of P4's fine-grained data committing [P4], fed by
//! Ferrite's own persist traces.
//!
//! P4 (Lu, Liu, Chen) splits the memory controller's write queue into
//! sub-queues bound to address ranges, each with persistence credits, so a
//! task can commit its own data without stalling every core as a global,
//! PCOMMIT-style commit does. Its DRAMSim2 changes are not public; this
//! crate is a deterministic, seeded discrete-event model of the same
//! machine (P4 Table II) and its four commit modes ([`Mode`]):
//!
//! - [`config`]: Table II, the PCM and Optane-like media profiles.
//! - [`program`]: what a core runs — recorded traces
//!   ([`ferrite_pmem::trace`]) or the synthetic generator calibrated to
//!   P4's read:write ratio of 1.96:1.
//! - [`cache`]: private L1/L2 and a shared L3 (simplifications argued there).
//! - [`model`]: cores with a reorder buffer, the memory controller (read
//!   queue, write sub-queues, address-range registers, default queue,
//!   credits and their synchronisation reads, commit logic) and the banks.
//! - [`stats`]: IPC, commit latencies, sync reads.
//!
//! Only ratios and trends are comparable with the paper: the programs are
//! Ferrite's, not WHISPER's, and DRAMSim2's timing details are unknown.
//! The model is safe Rust with no `unsafe`.
//!
//! # Choices the paper leaves open (and what they do to the comparison)
//!
//! - **Concurrent global commits** ([`Config::merge_global_commits`]): P4
//!   counts "one synchronization operation in one committing period" and
//!   says nothing of two PCOMMITs at once. By default each commit runs its
//!   own period (drain, one sync) after the running one; merging them into
//!   the running period instead makes global far cheaper under 16 cores.
//!   The two bracket P4's 1.78× on the synthetic workload (`bench sim`'s
//!   `global-combining` rows).
//! - **Confirmation of a commit**: the NVM controller answers the
//!   confirming sync read once the queue's credit is back at its maximum
//!   (rather than the controller polling), so a commit costs one sync in
//!   both modes and fine-grained with one core and one queue equals global.
//! - **Number of sub-queues**: 8 (Table II's 64-entry write queue ÷ 8
//!   entries); 16 tasks share them two by two, so their commits serialise
//!   (`Lock(q)`).
//! - **Credits bound each queue's writes at the media** (8 in flight), which
//!   limits one task's write bandwidth under fine-grained committing; global
//!   mode has no per-queue credits (one sync per period, as P4 models it).
//! - **Media blocks** (not P4's, P0's): the Optane-like profile writes
//!   256-byte blocks ([`NvmProfile::block_lines`]); lines of a block that
//!   wait in one write-queue entry are written together, a lone line costs
//!   a whole block write. PCM writes lines, as P4 models it.
//! - **Instruction mix**: the synthetic workload's compute between memory
//!   ops is a free parameter ([`Synthetic::compute`]); recorded traces use
//!   the measured gaps at [`Config::instr_per_ns`] instructions per ns.

pub mod cache;
pub mod config;
pub mod model;
pub mod program;
pub mod stats;

pub use config::{CacheGeometry, Config, Mode, NvmProfile};
pub use model::{Run, Sim, Task, simulate, simulate_tasks};
pub use program::{Op, Program, Synthetic, synthetic};
pub use stats::Stats;

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SimError {
    #[error("invalid model configuration: {0}")]
    Config(String),
    #[error("bad trace: {0}")]
    Trace(#[from] ferrite_pmem::trace::TraceError),
}
