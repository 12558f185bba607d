//! Ownership records and the global clock (volatile, DRAM) [P3 §III].
//!
//! An orec is a versioned lock covering every 8-byte word whose pool
//! offset maps to it: `(off >> COVERAGE_SHIFT) & (len - 1)`, so one orec
//! covers an aligned 32-byte chunk (P3's optimised coverage) and chunks
//! alias modulo the table size. Its value is either `version << 1` (even:
//! unlocked, last written by the transaction that committed at clock time
//! `version`) or `slot << 1 | 1` (odd: locked by the thread in that slot).
//!
//! Orecs and the clock are not persistent: after a crash recovery finishes
//! every logged transaction, so every word is committed, and all versions
//! restart at 0 with the clock.

use std::sync::atomic::{AtomicU64, Ordering};

/// log2 of the bytes one orec covers.
pub const COVERAGE_SHIFT: u32 = 5;

/// The ownership-record table and the global clock (DRAM only).
pub struct Orecs {
    table: Box<[AtomicU64]>,
    mask: u64,
    clock: AtomicU64,
}

#[inline]
/// Whether orec value `v` is locked (bit 0).
pub fn is_locked(v: u64) -> bool {
    v & 1 == 1
}
#[inline]
/// The slot owning locked orec value `v`.
pub fn owner(v: u64) -> u64 {
    v >> 1
}
#[inline]
/// The version of unlocked orec value `v`.
pub fn version(v: u64) -> u64 {
    v >> 1
}
#[inline]
/// The orec value of a lock held by slot `slot`.
pub fn lock_word(slot: usize) -> u64 {
    ((slot as u64) << 1) | 1
}
#[inline]
/// The orec value of an unlocked orec at `version`.
pub fn unlocked(version: u64) -> u64 {
    version << 1
}

impl Orecs {
    /// `n` orecs (rounded up to a power of two, at least 1024).
    pub fn new(n: usize) -> Orecs {
        let n = n.max(1024).next_power_of_two();
        Orecs {
            table: (0..n).map(|_| AtomicU64::new(0)).collect(),
            mask: n as u64 - 1,
            clock: AtomicU64::new(0),
        }
    }

    /// Index of the orec covering the word at `off`.
    #[inline]
    pub fn index(&self, off: u64) -> u32 {
        ((off >> COVERAGE_SHIFT) & self.mask) as u32
    }

    #[inline]
    /// The value of orec `i`.
    pub fn load(&self, i: u32) -> u64 {
        self.table[i as usize].load(Ordering::Acquire)
    }

    /// Locks orec `i` if it still holds `seen` (unlocked).
    #[inline]
    pub fn try_lock(&self, i: u32, seen: u64, slot: usize) -> bool {
        self.table[i as usize]
            .compare_exchange(seen, lock_word(slot), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Releases orec `i` (held by the caller) with version `v`.
    #[inline]
    pub fn release(&self, i: u32, v: u64) {
        self.table[i as usize].store(unlocked(v), Ordering::Release)
    }

    /// The clock now.
    #[inline]
    pub fn now(&self) -> u64 {
        self.clock.load(Ordering::Acquire)
    }

    /// Advances the clock; returns the new time.
    #[inline]
    pub fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::AcqRel) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_of_one_chunk_share_an_orec() {
        let o = Orecs::new(1 << 10);
        assert_eq!(o.index(4096), o.index(4096 + 24));
        assert_ne!(o.index(4096), o.index(4096 + 32));
        assert!(o.try_lock(o.index(64), 0, 3));
        let v = o.load(o.index(64));
        assert!(is_locked(v) && owner(v) == 3);
        assert!(!o.try_lock(o.index(64), 0, 4));
        o.release(o.index(64), 9);
        assert_eq!(version(o.load(o.index(64))), 9);
    }
}
