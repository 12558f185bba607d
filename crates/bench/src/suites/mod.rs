//! The experiments, one module per suite of the [registry](crate::registry)
//! (`ferrite bench NAME`). Each yields [`Row`](crate::Row)s; the claims
//! computed from them live in ferrite-rows' `claims`, not here, so that
//! `ferrite report` reads them without linking the suites.

pub mod alloc;
pub mod cache;
pub mod cell;
pub mod engine;
pub mod group;
pub mod log;
pub mod page;
pub mod probe;
pub mod ptm;
pub mod server;
pub mod sim;
pub mod tx;
pub mod wpp;
