//! Persistent data structures over the PTM: every access goes through a
//! [`crate::Tx`], so each operation is part of the caller's atomic, durable
//! transaction and composes with others in the same transaction.
//!
//! - [`hash::PHashMap`]: u64 → u64, fixed bucket array, chaining (P3's TATP
//!   and TPC-C (hash) index).
//! - [`bptree::PBTree`]: u64 → u64 B+tree with splits and lazy removal (P3's
//!   B+tree workloads and TPC-C (B+tree) index).
//! - [`rbtree::PRbTree`]: u64 → u64 red-black tree (STAMP Vacation's maps).
//!
//! Layout conventions (all three): every persistent word is a little-endian
//! u64 at an 8-byte-aligned pool offset; 0 is the null offset; each
//! structure has a header block whose first word is a magic number naming
//! its kind, so a handle opened on the wrong offset fails instead of
//! misreading. A handle (`PHashMap`, …) caches the header's immutable fields
//! in DRAM; it is `Copy` and may be shared by threads.
//!
//! Corrupt persistent data (a wrong magic, a node count beyond the fanout, a
//! cycle) never panics: operations roll back with the user abort code
//! [`CORRUPT`] (the caller sees `PtmError::Aborted { code: CORRUPT }`), and
//! the `check` functions report it as text.

pub mod bptree;
pub mod hash;
pub mod rbtree;

use crate::{Abort, PtmError, TxResult};

/// User-abort code with which a data-structure operation rolls back when it
/// finds persistent data that breaks the structure's invariants.
pub const CORRUPT: u64 = 0xC044_0B7E_0000_0001;

/// The abort for corrupt persistent data.
#[inline]
pub(crate) fn corrupt<T>() -> TxResult<T> {
    Err(Abort::User(CORRUPT))
}

/// Converts the result of a checking transaction to text: an invariant
/// violation found inside (`Ok(Err(text))`), or the PTM's error.
pub(crate) fn check_result<T>(r: Result<Result<T, String>, PtmError>) -> Result<T, String> {
    match r {
        Ok(inner) => inner,
        Err(PtmError::Aborted { code }) if code == CORRUPT => {
            Err("corrupt structure (an operation aborted with CORRUPT)".into())
        }
        Err(e) => Err(format!("checking transaction failed: {e}")),
    }
}

/// SplitMix64's finaliser: a bijective 64-bit mix (spreads sequential keys
/// over the buckets; bijective, so distinct keys stay distinct).
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
pub(crate) mod testutil {
    use crate::{Algorithm, Ptm, PtmOptions};
    use ferrite_pmem::{Domain, Pool, PoolOptions};

    /// The reference model the structures are compared with.
    pub type Model = std::collections::BTreeMap<u64, u64>;

    /// Runs `f` on a fresh 64 MiB ADR in-memory pool for each algorithm.
    pub fn each_algorithm(f: impl Fn(&Ptm)) {
        for alg in Algorithm::ALL {
            let pool = Pool::create_in_memory(
                &PoolOptions::new("ferrite-ptm", 64 << 20).domain(Domain::Adr),
            )
            .unwrap();
            let ptm = Ptm::create(&pool, &PtmOptions::new(alg)).unwrap();
            f(&ptm);
        }
    }

    /// A small deterministic generator for test inputs (xorshift64).
    pub fn xorshift(s: &mut u64) -> u64 {
        let mut x = (*s).max(1);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *s = x;
        x
    }
}
