//! `ferrite-blocks`: the persistence building blocks of [P0].
//!
//! - [`log`]: write-ahead logs — Classic, Header (+ dancing size fields),
//!   RAWL and PopLog [P0 §3.3] — behind one API, with recovery and crash checks.

pub mod log;
