//! `ferrite-pmem`: the bottom layer of Ferrite.
//!
//! - [`Pool`]: a checksummed, versioned, locked pool file (or in-memory /
//!   simulated image) with a root offset ([`header`] documents the format).
//! - [`Domain`]: the durability domain, chosen at open time, and the
//!   [`Medium`]'s persister that implements flush / fence / persist and
//!   persistent copies for it — the one door to the medium.
//! - [`Region`]: the safe, bounds-checked window components live in, and
//!   [`POff`], typed pool-relative offsets.
//! - [`Counters`]: always-on per-thread fence/flush/non-temporal/msync/media
//!   block counters.
//! - [`trace`]: persist traces of every thread's loads, stores, flushes,
//!   non-temporal stores, fences and commit points (feature `trace`), in a
//!   documented binary format, for `ferrite-sim`.
//! - [`superblock`]: the 64-byte superblock frame (magic, version, CRC32C
//!   of bytes 0..60) every format's superblock is encoded with.
//! - [`SimObserver`]: the hook through which `ferrite-crash` simulates power
//!   failures on the same code paths.
//!
//! `unsafe` code lives only in [`arch`] (instructions) and [`map`] (raw
//! memory); everything else is safe Rust.

#![warn(missing_docs)]

pub mod arch;
pub mod badblocks;
pub mod counters;
pub mod domain;
pub mod error;
pub mod header;
pub mod map;
pub mod opened;
pub mod persist;
pub mod pool;
pub mod region;
pub mod superblock;
pub mod trace;

pub use arch::{CACHE_LINE, FlushKind};
pub use counters::{Counters, MEDIA_BLOCK, PerOp};
pub use domain::{CrashModel, Domain};
pub use error::PoolError;
pub use header::{HEADER_SIZE, Header};
pub use map::{Mapping, OutOfBounds, PAGE};
pub use persist::{LockHeld, Medium, PersistConfig, SimObserver};
pub use pool::{Pool, PoolOptions};
pub use region::{POff, Region};
pub use superblock::{ChecksumMismatch, SUPERBLOCK_LEN, SuperblockView, SuperblockWriter};
