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

pub mod cache;
pub mod config;
pub mod model;
pub mod program;
pub mod stats;

pub use config::{CacheGeometry, Config, Mode, NvmProfile};
pub use model::{Run, Sim, simulate};
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
