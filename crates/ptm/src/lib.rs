//! `ferrite-ptm`: persistent transactional memory with ownership records
//! (P3), under every durability domain, with recovery.
//!
//! Ferrite's `ferrite-tx` runs transactions under locks its caller takes
//! (strict two-phase locking). A PTM detects conflicts itself: every
//! persistent word is covered by an *ownership record* (a versioned lock,
//! [`orec`]), a global clock orders commits, and a transaction that meets
//! another's write aborts and runs again. The program only marks atomic
//! blocks:
//!
//! ```
//! use ferrite_pmem::{Domain, Pool, PoolOptions};
//! use ferrite_ptm::{Algorithm, Ptm, PtmOptions};
//!
//! let pool = Pool::create_in_memory(&PoolOptions::new("doc", 8 << 20).domain(Domain::Adr)).unwrap();
//! let ptm = Ptm::create(&pool, &PtmOptions::new(Algorithm::Lazy)).unwrap();
//! let mut th = ptm.thread().unwrap();
//! let root = ptm.root();
//! // A counter in a block of its own, linked from the root word.
//! th.atomic(|tx| {
//!     let b = tx.alloc_zeroed(8)?;
//!     tx.set(root, b.raw())
//! })
//! .unwrap();
//! let n = th
//!     .atomic(|tx| {
//!         let c = tx.get(root)?;
//!         let n = tx.load(c)? + 1;
//!         tx.store(c, n)?;
//!         Ok(n)
//!     })
//!     .unwrap();
//! assert_eq!(n, 1);
//! ```
//!
//! # Algorithms [P3 §III]
//!
//! - [`Algorithm::Eager`] (`orec-eager`): encounter-time locking, undo
//!   logging, in-place writes: W + 2 fences for W distinct words written.
//! - [`Algorithm::Lazy`] (`orec-lazy`): commit-time locking, redo logging,
//!   write-back at commit: 3 fences whatever W.
//!
//! [`mod@tx`] describes both protocols, [`mod@format`] the bytes on the medium and
//! what recovery does with them.
//!
//! # Durability domains [P3 §II-B, §IV]
//!
//! Chosen with the pool ([`ferrite_pmem::Domain`]):
//! - `adr`: every log entry and write-back is flushed (`clwb`) and ordered
//!   with `sfence` as the protocols above say;
//! - `eadr` and `pdram`: the caches (and for `pdram` all of DRAM, as a
//!   persistent cache of the pool) are in the persistence domain, so the PTM
//!   issues no fence at all (stores persist in x86-TSO order); the crash
//!   model is the live image at the crash point;
//! - `pdram-lite`: as `eadr`, and the log areas are the persistent DRAM
//!   pages: at power failure only the logs of transactions that reached
//!   their commit point (status NEEDS_REDO) are written back, the logs of
//!   every other slot are lost. Recovery never reads a log whose status is
//!   IDLE, so the rule costs nothing; the crash checks apply it to every
//!   crash image (`checks`, feature `checks`).
//! - `msync`: as `adr` with page-granular write-back.
//!
//! On this machine `pdram` and `pdram-lite` cost what `eadr` costs: what
//! they change on real hardware is where the pool (resp. the logs) lives,
//! DRAM instead of Optane, which this machine does not have.
//!
//! # What a transaction body may do
//!
//! 1. Access persistent memory only through its [`Tx`], at 8-byte-aligned
//!    pool offsets inside the heap's blocks or the root word
//!    ([`PtmError::OutOfBounds`] otherwise).
//! 2. Be re-executable: a conflict rolls the attempt back and runs the body
//!    again, so it must not keep DRAM effects of an aborted attempt (clear
//!    and refill buffers at its start) and must do no I/O.
//! 3. Trust what it reads: reads are validated (opacity), a body never sees
//!    a mix of two transactions' states.
//! 4. Read a block from [`Tx::alloc`] only after writing it; free each
//!    block once; not touch a block after freeing it.
//! 5. Fit its log: at most `log_bytes / 32` distinct words written under
//!    orec-eager, `log_bytes / 16` under orec-lazy (allocations count one
//!    or two entries each); a larger transaction fails with
//!    [`PtmError::LogFull`] and is rolled back.
//!
//! # Fence-removal diagnostic [P3 Table III]
//!
//! [`PtmOptions::fence_removal`] is P3's deliberately *incorrect* variant,
//! used to measure how much of eADR's gain is the fences: under `adr` it
//! keeps every flush and issues no fence at all, as P3 did ("continued to
//! use correct clwb instructions, but did not issue any memory fences"),
//! so even a transaction that returned is not yet durable. The crash
//! checks find counterexamples for both algorithms
//! (`ferrite check ptm-planted`): under orec-eager an in-place store
//! reaches the medium before its undo entry and the crash leaves half a
//! transaction no log can undo; under orec-lazy the IDLE status or part of
//! the write-back reaches the medium before the rest of the write-back, and
//! the crash leaves half a committed transaction. No fence of either
//! protocol is redundant: each orders a store that recovery depends on
//! against one that depends on it, and x86 orders flushed lines only at a
//! fence (or a locked instruction, which these paths do not have between
//! those stores).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod ds;
pub mod error;
mod fault;
pub mod format;
pub mod orec;
mod ptm;
pub mod tx;
pub mod verify;
pub mod word;
pub mod workloads;

#[cfg(any(test, feature = "checks"))]
pub mod checks;

#[cfg(test)]
mod tests;

pub use error::{PtmError, Result};
#[cfg(feature = "checks")]
pub use fault::Fault;
#[cfg(not(feature = "checks"))]
pub(crate) use fault::Fault;
pub use ptm::{Ptm, PtmRecovery};
pub use tx::{Abort, PtmStats, PtmThread, Tx, TxResult};
pub use word::Word;

/// P3's two algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// `orec-eager`: encounter-time locking, undo logging.
    Eager,
    /// `orec-lazy`: commit-time locking, redo logging.
    Lazy,
}

impl Algorithm {
    /// Both algorithms, eager first.
    pub const ALL: [Algorithm; 2] = [Algorithm::Eager, Algorithm::Lazy];

    /// The name in tables and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Eager => "orec-eager",
            Algorithm::Lazy => "orec-lazy",
        }
    }

    /// The algorithm named `s`: `orec-eager` or `eager`, `orec-lazy` or `lazy`.
    pub fn parse(s: &str) -> Option<Algorithm> {
        match s {
            "orec-eager" | "eager" => Some(Algorithm::Eager),
            "orec-lazy" | "lazy" => Some(Algorithm::Lazy),
            _ => None,
        }
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How to create or open a PTM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtmOptions {
    /// Which PTM: orec-eager (undo) or orec-lazy (redo); fixed at create.
    pub algorithm: Algorithm,
    /// Threads attached at once (log slots; fixed at create).
    pub slots: u16,
    /// Bytes of each slot's log area (fixed at create).
    pub log_bytes: u32,
    /// Ownership records (rounded up to a power of two). The default,
    /// 2^16 (512 KiB), stays in a core's L2 cache: with P3's 2^20 (8 MiB)
    /// every read missed on its orec before its data, and on this 2-core
    /// machine TPC-C New-Order ran 12 % (one thread) to 50 % (two) slower.
    /// A larger table means fewer false conflicts between many threads.
    pub orecs: usize,
    /// P3's incorrect fence-removal variant (see the crate documentation).
    pub fence_removal: bool,
    /// Fixed nonce of the superblock and the heap, for reproducible images
    /// (used at create only); random when `None`.
    pub nonce: Option<u64>,
    /// A planted bug ([`PtmOptions::fault`], `checks` feature only).
    pub(crate) fault: Option<Fault>,
}

impl PtmOptions {
    /// The defaults for `algorithm`: 8 slots of 256 KiB of log, 2^16 orecs, no fence removal, a random nonce.
    pub fn new(algorithm: Algorithm) -> PtmOptions {
        PtmOptions {
            algorithm,
            slots: 8,
            log_bytes: 256 << 10,
            orecs: 1 << 16,
            fence_removal: false,
            nonce: None,
            fault: None,
        }
    }

    /// Sets [`PtmOptions::slots`].
    pub fn slots(mut self, n: u16) -> PtmOptions {
        self.slots = n;
        self
    }

    /// Sets [`PtmOptions::log_bytes`].
    pub fn log_bytes(mut self, n: u32) -> PtmOptions {
        self.log_bytes = n;
        self
    }

    /// Sets [`PtmOptions::orecs`].
    pub fn orecs(mut self, n: usize) -> PtmOptions {
        self.orecs = n;
        self
    }

    /// Sets [`PtmOptions::fence_removal`].
    pub fn fence_removal(mut self, on: bool) -> PtmOptions {
        self.fence_removal = on;
        self
    }

    /// Sets [`PtmOptions::nonce`].
    pub fn nonce(mut self, n: u64) -> PtmOptions {
        self.nonce = Some(n);
        self
    }

    /// Plants bug `f` (the crash checks' own use: `checks` feature only).
    #[cfg(any(test, feature = "checks"))]
    pub fn fault(mut self, f: Option<Fault>) -> PtmOptions {
        self.fault = f;
        self
    }
}
