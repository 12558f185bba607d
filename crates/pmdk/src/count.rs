//! PMDK's own flushes and fences, counted (feature `count`).
//!
//! `csrc/count.c` puts wrappers in front of the libpmem calls libpmemobj
//! persists with, so the cost of a PMDK operation can be stated in the same
//! terms as ferrite-pmem's counters (which see only Ferrite's own flushes
//! and fences). Counts are per thread and cumulative; take a snapshot
//! before and after and subtract.
//!
//! Where they differ from ferrite-pmem's counters: `lines` counts every
//! 64-byte line of every flushing call (a line flushed twice counts twice,
//! unlike ferrite-pmem's distinct `lines_flushed`), and on the msync path
//! (a pool libpmem does not treat as pmem) each `pmem_msync` counts as a
//! fence.

/// A snapshot of the calling thread's PMDK persistence calls.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PmdkCounts {
    /// Fences: `pmem_drain` (also inside `pmem_persist` and the draining
    /// `pmem_mem*` calls) and `pmem_msync`.
    pub fences: u64,
    /// Calls that flush a range.
    pub flush_calls: u64,
    /// 64-byte lines those calls covered.
    pub lines: u64,
    /// `pmem_msync` calls (0 when PMDK takes the flush path).
    pub msyncs: u64,
}

unsafe extern "C" {
    fn ferrite_pmdk_counts_get(out: *mut PmdkCounts);
}

impl PmdkCounts {
    /// The calling thread's counts so far.
    pub fn snapshot() -> PmdkCounts {
        let mut c = PmdkCounts::default();
        // SAFETY: copies a thread-local struct of the same layout (four
        // uint64_t) into `c`.
        unsafe { ferrite_pmdk_counts_get(&mut c) };
        c
    }
}

impl std::ops::Sub for PmdkCounts {
    type Output = PmdkCounts;
    fn sub(self, o: PmdkCounts) -> PmdkCounts {
        PmdkCounts {
            fences: self.fences - o.fences,
            flush_calls: self.flush_calls - o.flush_calls,
            lines: self.lines - o.lines,
            msyncs: self.msyncs - o.msyncs,
        }
    }
}
