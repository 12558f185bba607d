//! `ferrite-workload`: the workload generators every system measured by
//! Ferrite shares — the engines, LMDB, the PTM, the server and the page
//! cache run the *same code* to draw keys and operations, so a ratio
//! between two systems never hides a difference in what they were asked.
//!
//! Systems are driven through [`Kv`], a minimal ordered key-value
//! interface with an atomic batch; adapters for each system live with the
//! benchmark that measures it.

#![forbid(unsafe_code)]

pub mod dist;
mod memkv;
pub mod record;
pub mod tpcc;
pub mod ycsb;

pub use memkv::MemKv;
pub use record::{KeyMode, ValueError, ValueLayout};
pub use ycsb::{
    Distribution, Generator, Loader, Mix, Op, OpKind, OpOutcome, Workload, WorkloadError, run_op,
    workload_names,
};

pub use tpcc::{
    Terminal, TpccConfig, TpccError, TpccLoader, TxnKind, TxnOutcome, check_consistency,
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
