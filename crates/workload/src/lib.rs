//! `ferrite-workload`: the workload generators every system measured by
//! Ferrite shares — the engines, LMDB, the PTM, the server and the page
//! cache run the *same code* to draw keys and operations, so a ratio
//! between two systems never hides a difference in what they were asked.
//!
//! Systems are driven through [`Kv`], a minimal ordered key-value
//! interface with an atomic batch; adapters for each system live with the
//! benchmark that measures it. [`MemKv`] is the reference implementation.
//!
//! - [`dist`]: YCSB's request distributions (Zipfian, scrambled Zipfian,
//!   skewed-latest, uniform, counter) and N-Store's hot set.
//! - [`record`]: key naming ([`KeyMode`]) and values that are a function
//!   of (key, version) and verify ([`ValueLayout`]).
//! - [`ycsb`]: P2's mixes `p2-a`…`p2-h`, `p2-var`, YCSB's `ycsb-a`…`ycsb-f`:
//!   [`Workload::parse`], [`Loader`], [`Generator`], [`run_op`].
//! - [`tpcc`]: TPC-C's tables, [`TpccLoader`], [`Terminal`] (the five
//!   transactions), [`check_consistency`], [`check_customers`].
//! - [`tatp`]: TATP's transaction inputs ([`TatpGenerator`]): P3's
//!   `UPDATE_LOCATION`-only run and TATP's standard mix.
//! - [`vacation`]: STAMP Vacation's client actions ([`VacationClient`]) and
//!   initial rows ([`vacation::load_rows`]), with P3's two presets.
//! - [`neworder`]: P3's New-Order-only TPC-C inputs ([`NewOrderGenerator`]).
//!
//! ```
//! use ferrite_workload::{Generator, Loader, MemKv, Workload, run_op};
//!
//! let w = Workload::parse("p2-f:records=1000:ops=2000").unwrap();
//! let mut kv = MemKv::new();
//! Loader::new(&w).load_into(&mut kv, 64).unwrap();
//! // One generator per thread; same (workload, seed, thread, threads) =
//! // same operations on every system.
//! let mut ops = Generator::new(&w, 42, 0, 1).unwrap();
//! let mut scratch = Vec::new();
//! for _ in 0..w.ops_for_thread(0, 1) {
//!     let op = ops.next_op().unwrap();
//!     run_op(&mut kv, &op, &mut scratch).unwrap();
//! }
//! ```

#![forbid(unsafe_code)]

pub mod dist;
mod memkv;
pub mod neworder;
pub mod record;
pub mod tatp;
pub mod tpcc;
pub mod vacation;
pub mod ycsb;

pub use neworder::{NewOrderConfig, NewOrderGenerator, NewOrderInput, NewOrderScale};
pub use tatp::{TatpConfig, TatpGenerator, TatpKind, TatpMix, TatpTxn};
pub use vacation::{VacationAction, VacationClient, VacationConfig, VacationScale};

pub use memkv::MemKv;
pub use record::{KeyMode, ValueError, ValueLayout};
pub use ycsb::{
    Distribution, Generator, Loader, Mix, Op, OpKind, OpOutcome, Workload, WorkloadError, run_op,
    workload_names,
};

pub use tpcc::{
    Terminal, TpccConfig, TpccError, TpccLoader, TxnKind, TxnOutcome, check_consistency,
    check_customers,
};

/// Any named workload: a YCSB-style one or TPC-C.
#[derive(Clone, Debug, PartialEq)]
pub enum AnyWorkload {
    Ycsb(Workload),
    Tpcc(TpccConfig),
}

impl AnyWorkload {
    /// Parses `tpcc[:…]` with [`TpccConfig::parse`], anything else with
    /// [`Workload::parse`].
    pub fn parse(name: &str) -> Result<AnyWorkload, WorkloadError> {
        if name == "tpcc" || name.starts_with("tpcc:") {
            TpccConfig::parse(name).map(AnyWorkload::Tpcc)
        } else {
            Workload::parse(name).map(AnyWorkload::Ycsb)
        }
    }
}

#[cfg(test)]
mod ycsb_tests;

/// One write of an atomic batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchOp<'a> {
    Put { key: &'a [u8], value: &'a [u8] },
    Delete { key: &'a [u8] },
}

/// The ordered key-value interface workloads drive. One value per thread
/// (a session, a transaction handle): methods take `&mut self`.
///
/// Every write is expected to be durable when the call returns (the
/// system's own durability contract: one durable commit per operation).
pub trait Kv {
    /// The system's error, shown as one line.
    type Error: std::fmt::Display;

    /// Reads `key` into `out` (cleared first); false when absent.
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, Self::Error>;
    /// Inserts or replaces.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Self::Error>;
    /// Removes; false when the key was absent.
    fn delete(&mut self, key: &[u8]) -> Result<bool, Self::Error>;
    /// Calls `f` for up to `limit` pairs with keys `>= from`, in key order;
    /// returns how many it visited.
    fn scan(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, Self::Error>;
    /// Applies every operation atomically: after a crash all or none.
    fn batch(&mut self, ops: &[BatchOp<'_>]) -> Result<(), Self::Error>;
}
