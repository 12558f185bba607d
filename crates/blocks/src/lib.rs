//! `ferrite-blocks`: the persistence building blocks of \[P0\].
//!
//! - [`log`]: write-ahead logs — Classic, Header (+ dancing size fields),
//!   RAWL and PopLog [P0 §3.3] — behind one API, with recovery and crash checks.
//! - [`checks`] (feature `checks`): crash-exploration scenarios for
//!   `ferrite check`, one function per algorithm family.

#![deny(unsafe_code)]

pub mod log;

/// Crash checks of the building blocks, run through `ferrite-crash`.
#[cfg(any(test, feature = "checks"))]
pub mod checks {
    pub use crate::log::checks::{CheckError, check_log, check_run, check_variant, run_names};
}
