//! `ferrite-blocks`: the persistence building blocks of \[P0\].
//!
//! - [`log`]: write-ahead logs — Classic, Header (+ dancing size fields),
//!   RAWL and PopLog [P0 §3.3] — behind one API, with recovery and crash checks.
//! - [`cell`]: failure-atomic in-place updates of 16–64 B values — CoW, log
//!   and FAM (scalar and AVX2) [P0 §3.4, App. A].
//! - [`page`]: failure-atomic page propagation — copy-on-write with page
//!   version numbers, the micro-log, and the hybrid [P0 §3.2].
//! - [`checks`] (feature `checks`): crash-exploration scenarios for
//!   `ferrite check`, one function per family.
//!
//! The crate denies `unsafe_code`; the single exception is the AVX2 FAM
//! encoder (`cell/fam_avx2.rs`), which allows it locally.

#![deny(unsafe_code)]

pub mod cell;
pub mod group;
pub mod log;
pub mod page;
pub mod verify;

/// Crash checks of the building blocks, run through `ferrite-crash`.
#[cfg(any(test, feature = "checks"))]
pub mod checks {
    pub use crate::cell::checks::{check_cell, check_cell_fault};
    pub use crate::log::checks::{CheckError, check_log, check_run, check_variant, run_names};
    pub use crate::page::checks::{PageCheckError, check_page, check_page_run};
}
