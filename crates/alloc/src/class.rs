//! Size classes and run geometry of the Ferrite heap.
//!
//! 64 classes, all multiples of 16 (so every block is 16-byte aligned):
//!
//! - 16, 32, …, 128 in steps of 16 (at most 15 bytes wasted);
//! - then eight classes per doubling: `2ᵏ + j·2ᵏ⁻³` for `j = 1..=8`, from 144
//!   up to 16 KiB. A request just above a class boundary wastes less than
//!   one step, under 12.5 % of the request (`2ᵏ⁻³ / 2ᵏ`).
//!
//! Larger requests are extents of whole pages.
//!
//! A **run** of class `c` is `P` contiguous 4 KiB pages holding
//! `⌊4096·P / size⌋` blocks, with `P = clamp(⌈16·size / 4096⌉, 4, 64)`: at
//! least 16 blocks (so a thread goes to the shared pool of runs at most
//! once per 16 allocations) and at least four pages, because the run's
//! allocation bitmap is spread over the descriptor lines of its pages —
//! block `i` has bit `i / P` of page `i mod P`'s share — so consecutive
//! blocks' bits sit on different cache lines ([P2 §2.2], NVAlloc's
//! interleaved mapping). A share holds at most 256 bits (reached by class
//! 16: 1024 blocks over 4 pages).

use ferrite_pmem::PAGE;

/// Number of size classes.
pub const NUM_CLASSES: usize = 64;
/// Largest request served from runs; larger ones are page extents.
pub const MAX_SMALL: usize = 16 * 1024;
/// Most bits one page's share of a run bitmap holds.
pub const MAX_ROWS: usize = 256;

/// Geometry of one size class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassInfo {
    /// Block size in bytes.
    pub size: u32,
    /// Pages per run (P).
    pub pages: u32,
    /// Blocks per run.
    pub blocks: u32,
    /// Bits used in each page's share: `⌈blocks / P⌉`.
    pub rows: u32,
}

const fn class_size(idx: usize) -> u32 {
    if idx < 8 {
        16 * (idx as u32 + 1)
    } else {
        let d = (idx - 8) / 8;
        let j = ((idx - 8) % 8) as u32 + 1;
        let k = 7 + d as u32;
        (1 << k) + j * (1 << (k - 3))
    }
}

const fn build() -> [ClassInfo; NUM_CLASSES] {
    let mut t = [ClassInfo {
        size: 0,
        pages: 0,
        blocks: 0,
        rows: 0,
    }; NUM_CLASSES];
    let mut i = 0;
    while i < NUM_CLASSES {
        let size = class_size(i);
        let mut pages = (16 * size).div_ceil(PAGE as u32);
        if pages < 4 {
            pages = 4;
        }
        if pages > 64 {
            pages = 64;
        }
        let blocks = pages * PAGE as u32 / size;
        t[i] = ClassInfo {
            size,
            pages,
            blocks,
            rows: blocks.div_ceil(pages),
        };
        i += 1;
    }
    t
}

/// Every class, smallest first.
pub static CLASSES: [ClassInfo; NUM_CLASSES] = build();

/// The class serving `size` bytes (`1..=MAX_SMALL`).
#[inline]
pub fn class_of(size: usize) -> usize {
    debug_assert!((1..=MAX_SMALL).contains(&size));
    if size <= 128 {
        return size.div_ceil(16) - 1;
    }
    // 2^k < size <= 2^(k+1)
    let k = (usize::BITS - 1 - (size - 1).leading_zeros()) as usize;
    let step_shift = k - 3;
    let j = (size - (1 << k)).div_ceil(1 << step_shift);
    8 + (k - 7) * 8 + (j - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_increasing_aligned_and_end_at_max_small() {
        for w in CLASSES.windows(2) {
            assert!(w[0].size < w[1].size);
        }
        assert!(CLASSES.iter().all(|c| c.size % 16 == 0));
        assert_eq!(CLASSES[NUM_CLASSES - 1].size as usize, MAX_SMALL);
    }

    #[test]
    fn every_size_gets_the_smallest_fitting_class_with_bounded_waste() {
        for size in 1..=MAX_SMALL {
            let c = class_of(size);
            let cs = CLASSES[c].size as usize;
            assert!(cs >= size, "size {size} class {cs}");
            if c > 0 {
                assert!(
                    (CLASSES[c - 1].size as usize) < size,
                    "size {size} not smallest"
                );
            }
            if size > 128 {
                assert!(
                    (cs - size) * 8 < size,
                    "size {size} -> {cs}: waste {:.1} %",
                    100.0 * (cs - size) as f64 / size as f64
                );
            } else {
                assert!(cs - size < 16);
            }
        }
    }

    #[test]
    fn runs_hold_at_least_16_blocks_and_shares_fit() {
        for c in CLASSES.iter() {
            assert!(c.pages >= 4 && c.pages <= 64);
            assert!(c.blocks >= 16, "{c:?}");
            assert!(c.rows as usize <= MAX_ROWS, "{c:?}");
            assert!(c.blocks * c.size <= c.pages * PAGE as u32);
        }
    }
}
