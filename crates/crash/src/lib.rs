//! `ferrite-crash`: simulated power failures for any Ferrite component.
//!
//! - [`sim`]: the simulated medium ([`SimMedium`]), a [`ferrite_pmem::SimObserver`]
//!   that keeps the durable image beside the live one and injects crashes.
//! - [`explorer`]: the [`Explorer`] that crashes a workload at every fence
//!   (or a seeded sample), enumerates post-crash images, recovers and checks
//!   each, crashes recovery too, and reports reproducible violations.
//! - [`lockstep`]: several simulated threads on their own OS threads, only
//!   one running at a time, handing over at medium events by a seeded
//!   schedule — two operations in flight at once, every crash point
//!   reproducible; a crash stops them all.
//! - [`harness`]: what every component's `checks.rs` shares — the run-name
//!   grammar `BASE[/torn][/store][/FLAG…][/restartN]` ([`RunMods`]), the
//!   [`CheckError`] of a check that cannot run, the report of a failed
//!   restart ([`failed_restart`]).
//! - [`selftest`]: the explorer proven on a correct and two broken
//!   append-then-publish protocols.
//! - [`thread`]: the simulated thread an OS thread acts as ([`SimThread`])
//!   and the crash's unwind payload ([`thread::Crashed`]), shared by `sim`
//!   and `lockstep` (imports run lockstep → thread, sim → {lockstep,
//!   thread}: no circle).
//! - [`inflight`]: an observer counting flushes not yet fenced, for tests
//!   that operations return with none in flight.
//!
//! A normal dependency of nothing in production; a dev-dependency of every
//! crate's tests and the engine of `ferrite check`.

pub mod explorer;
pub mod harness;
pub mod inflight;
pub mod lockstep;
pub mod selftest;
pub mod sim;
pub mod thread;

pub use explorer::{
    Config, ExploreError, Explorer, ImageSel, PowerFail, Report, Repro, SimRun, Violation,
    panic_message, spend_budget,
};
pub use harness::{CheckError, CheckSubject, RunMods, SpecError, failed_restart};
pub use inflight::InFlight;
pub use sim::{CrashAt, CrashState, SimMedium, SimThread};
