//! PMDK 1.12 baseline for the Ferrite benchmarks.
//!
//! Safe wrappers over libpmem, libpmemlog, libpmemblk and libpmemobj, so the
//! harness can time PMDK side by side with Ferrite in the same process.
//! Transactional operations are written in C (`csrc/shim.c`, the
//! B+tree of `txbtree` in `csrc/txbtree.c`, and the byte-keyed map of
//! `bytemap` — the server store `pmdk-undo` — in `csrc/txbytemap.c`)
//! because PMDK's `TX_BEGIN`/`TX_END` are built on `setjmp`.
//!
//! Besides the baselines, [`PmemObj`] exposes libpmemobj's reserve/publish
//! action API, the root object and object iteration (`action.rs`), on which
//! `ferrite-bench`'s `pmdk_alloc` runs Ferrite's storage engines over
//! PMDK's allocator; with the feature `count`, `csrc/count.c` counts the
//! flushes and fences libpmemobj issues (`PmdkCounts`).
//!
//! Everything is behind the `link` feature. Without it this crate is empty
//! and builds on machines without PMDK; with it, `build.rs` compiles the
//! shim and links `pmem`, `pmemlog`, `pmemblk` and `pmemobj`, which need the
//! Debian packages
//! `libpmem-dev libpmemlog-dev libpmemblk-dev libpmemobj-dev`.
//!
//! # How libpmem picks the flush path
//!
//! Every PMDK pool, and every `PmemMap`, asks `pmem_is_pmem()` once when it
//! is mapped. If the answer is yes, persisting is `CLWB`/`CLFLUSHOPT` (or
//! non-temporal stores) plus `SFENCE`, entirely in user space; if no, it is
//! `msync(2)`. A file on `/dev/shm` (tmpfs) is never detected as pmem, so the
//! benchmarks force the answer with the environment variable
//! `PMEM_IS_PMEM_FORCE=1` to get the same flush+fence path as Ferrite's
//! `adr` domain.
//!
//! libpmem 1.12 reads that variable **lazily, once**: on the first call to
//! `pmem_is_pmem()` in the process (made by `pmem_map_file`, by every pool
//! create/open, or by `is_pmem` itself), not in its load-time constructor.
//! The answer it finds then (always / never / detect) holds for the rest of
//! the process. So:
//!
//! * setting the variable before the first PMDK mapping works — see
//!   `force_pmem` — and so does exporting it before the process starts
//!   (or having the CLI re-exec itself with it set);
//! * setting it after the first mapping has no effect at all;
//! * `pmem_forced` tells whether it is in effect, and itself counts as a
//!   first use.
//!
//! `tests/force.rs` demonstrates each of these in a fresh child process.
//! (libpmem's other tuning variables, such as `PMEM_NO_CLWB`,
//! `PMEM_NO_MOVNT` and `PMEM_MOVNT_THRESHOLD`, are different: its load-time
//! constructor reads them, so they must be in the environment at exec.)

#[cfg(feature = "link")]
mod action;
#[cfg(feature = "link")]
mod blk;
pub mod bytemap;
#[cfg(feature = "count")]
mod count;
#[cfg(feature = "link")]
mod error;
#[cfg(feature = "link")]
mod ffi;
#[cfg(feature = "link")]
mod log;
#[cfg(feature = "link")]
mod mem;
#[cfg(feature = "link")]
mod obj;
pub mod txbtree;
pub mod txmap;

#[cfg(feature = "link")]
pub use action::{Action, Object, Reserved};
#[cfg(feature = "link")]
pub use blk::PmemBlk;
#[cfg(feature = "count")]
pub use count::PmdkCounts;
#[cfg(feature = "link")]
pub use error::{Error, Result};
#[cfg(feature = "link")]
pub use log::PmemLog;
#[cfg(feature = "link")]
pub use mem::{
    PMEM_IS_PMEM_FORCE, PmemMap, SHM_DIR, flush_path_in, force_pmem, is_pmem, pmem_forced,
};
#[cfg(feature = "link")]
pub use obj::{Oid, PmemObj};
