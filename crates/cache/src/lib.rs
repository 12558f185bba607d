//! `ferrite-cache`: Persistron [P1 ch5] — a crash-safe DRAM + persistent
//! memory page cache over a disk file.
//!
//! A store reads and writes 4 KiB disk pages through [`Session::get_page`]
//! with page locks. Pages live in one of three places:
//!
//! - the **persistent tier**: slots in a Ferrite pool region, with an entry
//!   table and a transaction table ([`format`] has the bytes). Every page
//!   that differs from the disk (DIRTY) or belongs to a transaction in
//!   flight (UNCOMMITTED) is here, so a write is durable when the
//!   transaction that made it commits — no log, no checkpoint;
//! - the **DRAM tier**: frames holding *clean* hot pages (clock hotness:
//!   a page read again while its accessed bit is set moves to DRAM);
//!   evicted frames go back to a free persistent slot, not to the disk;
//! - the **disk** ([`disk::Disk`]: a file with `pread`/`pwrite`,
//!   `O_DIRECT` where possible, `fdatasync` before a dirty page leaves the
//!   persistent tier).
//!
//! Transactions are inferred from the locks (strict 2PL): a session's
//! first write lock opens one, its last write release commits it with
//! copy-on-write; [`Session::non_tx`] scopes write in place for structures
//! not yet linked in; [`Session::get_new_page`] takes a page just
//! allocated without reading it from the disk; [`Session::alloc_page`]/[`Session::free_page`] keep
//! the disk's allocation bitmap as cached pages, so allocations commit
//! with the transaction that makes them (P1 §5.5).
//!
//! Recovery happens in [`Cache::open`]. The crash scenarios of `ferrite
//! check cache` are in `checks` (feature `checks`); [`store`] is a small
//! LSM-shaped key-value store (puts, gets, range scans) that runs over
//! this cache or over a volatile DRAM cache with a write-ahead log, which
//! it replays after a crash.
//!
//! Departures from P1: the paper assumes eADR and issues no flushes; here
//! every persist goes through the pool's persister (flush + fence under
//! `adr`, fence only under `eadr`). A DRAM page write-locked in a
//! transaction moves to its persistent copy at lock time rather than at
//! commit (same recovery rule: its committed version is the disk's).

pub mod cache;
#[cfg(feature = "checks")]
pub mod checks;
pub mod disk;
pub mod error;
mod fault;
pub mod format;
pub mod store;

pub use cache::{Cache, CacheOptions, Mode, PageGuard, RecoveryReport, Session, Stats};
// Planted bugs exist for the crash checks only: outside the `checks` feature
// (and this crate's tests) they are not part of the API.
pub use disk::{Disk, FileDisk, PoolDisk};
pub use error::{CacheError, Result};
#[cfg(feature = "checks")]
pub use fault::{Fault, StoreFault};
pub use format::PAGE;
