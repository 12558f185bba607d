//! `ferrite-tx`: failure-atomic transactions with undo, redo and clobber
//! logging, clobber with re-execution recovery [P1 ch3]. The persistent
//! data structures built on them (hash map, B+tree, skiplist, red-black
//! tree) and their crash checks are in `ferrite-ds`.
//!
//! # Using it
//!
//! ```ignore
//! // With the structures of `ferrite-ds`:
//! let reg = Registry::new().with(&ferrite_ds::hashmap::FUNCS)?;
//! let txp = TxPool::create(&pool, &TxOptions::new(Strategy::Clobber), reg)?;
//! let mut th = txp.thread()?;             // one per thread: a log slot
//! let map = ferrite_ds::hashmap::HashMap::create(&mut th, DsOptions::default())?;
//! map.insert(&mut th, 42, &[7u8; 256])?;  // locks, runs a registered tx
//! ```
//!
//! A [`TxPool`] lives in a [`ferrite_pmem::Pool`]: a superblock, one log
//! slot per attachable thread and a Ferrite heap ([`mod@format`] documents the
//! bytes). The [`Strategy`] is chosen when the pool is opened (one per
//! open: a redo transaction that read a clobber transaction's output could
//! not be replayed after that one's re-execution allocated differently);
//! recovery handles whatever strategy wrote the logs. A transaction is a registered
//! [`TxFunc`] run by [`TxThread::run`] with its arguments and the DRAM
//! buffers it names; inside, persistent data is read and written only
//! through [`Tx`] (pool offsets, [`ferrite_pmem::POff`]), and allocation
//! and free go through [`Tx::alloc`] / [`Tx::free`], which commit or vanish
//! with the transaction. [`tx`] describes the three protocols and their
//! fences; [`recovery`] what opening a pool does after a crash.
//!
//! # What a transaction function must obey
//!
//! Under clobber logging a function that began may run again after a
//! crash, from its logged inputs, and must then do exactly what the
//! crashed run did [P1 §3.1]. So every transaction function:
//!
//! 1. **is deterministic**: its result and every read, write, allocation
//!    and free depend only on its [`Inputs`] and on persistent data read
//!    through its [`Tx`] (no clocks, randomness, thread ids, addresses of
//!    DRAM objects, or DRAM state other than the inputs);
//! 2. **takes all volatile inputs from [`Inputs`]**: arguments and named
//!    buffers are copied into the v_log; any other DRAM data is gone after
//!    a crash. Persistent offsets passed as arguments must name data that
//!    no interrupted transaction changes (a structure's root, not a node
//!    found by an earlier unlocked read);
//! 3. **does no I/O and has no side effect outside the pool** (it may run
//!    twice; output goes through the result word);
//! 4. **runs under strict two-phase locking held by its caller**: every
//!    lock protecting data it touches is taken before [`TxThread::run`]
//!    and released after it returns, in a global order (no deadlock);
//!    conflicting transactions then touch disjoint data while both run,
//!    which is what lets recovery handle each slot independently and
//!    order the rest by completion ticket;
//! 5. **reads a block it allocated only after writing it** (its content
//!    is whatever the allocator's previous user left);
//! 6. under clobber logging, **fails only before its first write to
//!    existing data** (check, then allocate, then write): after it, a
//!    transaction cannot be rolled back, only re-executed.
//!
//! # What is detected
//!
//! - running an unregistered function, or two functions with one id
//!   ([`TxError::Unregistered`], [`TxError::DuplicateId`]); recovery
//!   needing an unknown id ([`TxError::UnknownFunction`]);
//! - any access outside the heap's data pages and the root word — log
//!   slots, allocator metadata, the pool header ([`TxError::OutOfBounds`]);
//!   a write straddling the edge of a block allocated in the transaction
//!   ([`TxError::StraddlesBlock`]); touching a block after freeing it in
//!   the same transaction ([`TxError::UseAfterFree`]); double frees and
//!   frees of unallocated blocks (the allocator's errors);
//! - a transaction too large for its log area ([`TxError::LogFull`],
//!   before anything is written that could not be rolled back);
//! - a function that never ends — typically a loop over data a bug
//!   corrupted — once it exceeds the pool's access limit
//!   ([`TxError::Runaway`], [`TxPool::set_access_limit`]; unlimited unless
//!   set, and [`TxPool::open_limited`] bounds recovery's re-executions too);
//! - a clobber function failing after its first write
//!   ([`TxError::AbortAfterWrite`]): the transaction is left in flight,
//!   the pool is poisoned ([`TxError::Poisoned`]) and reopening it
//!   re-executes the function; if that fails too, the open fails with
//!   [`TxError::Reexecution`];
//! - non-determinism that changes what is clobbered: a re-execution
//!   compares every input it would log with what the crashed run logged
//!   ([`TxRecovery::nondeterministic`]).
//!
//! Not detected: writes to persistent memory that bypass [`Tx`], lock
//! discipline, and non-determinism that does not change the clobbered
//! inputs (e.g. in values written to fresh blocks).

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod args;
pub mod error;
mod fault;
pub mod format;
mod interval;
mod options;
mod pool;
pub mod recovery;
mod report;
pub mod tx;
pub mod verify;

#[cfg(test)]
mod tests;

pub use args::{Inputs, PackedArgs, pack_args};
pub use error::{Result, TxError};
// Planted bugs exist for the crash checks only: outside the `checks` feature
// (and this crate's tests) they are not part of the API.
#[cfg(feature = "checks")]
pub use fault::Fault;
pub use options::{Strategy, TxOptions};
pub use report::TxRecovery;
pub use tx::{Registry, Tx, TxBody, TxFunc, TxPool, TxStats, TxThread};
