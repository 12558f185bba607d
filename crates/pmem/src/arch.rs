//! CPU-level persistence instructions: cache-line flushes, store fences and
//! non-temporal stores.
//!
//! This is one of the two modules of the crate that contain `unsafe` code (the
//! other is [`crate::map`]). Nothing outside `ferrite-pmem` calls it: every
//! flush and fence in Ferrite goes through a pool's
//! [`Medium`](crate::Medium) (its persister), which counts it and lets the crash
//! simulator observe it (ARCHITECTURE.md, rule 1).
//!
//! Support is detected with CPUID once and cached. On non-x86_64 targets every
//! flush kind is reported missing and fences fall back to a sequentially
//! consistent compiler+CPU fence, so the crate still builds (the `msync`,
//! `eadr` and `volatile` domains remain usable).

use std::sync::OnceLock;

/// Size of a CPU cache line, the unit of `clwb`/`clflushopt`/`clflush`.
pub const CACHE_LINE: usize = 64;

/// Which instruction writes a cache line back toward the persistence domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum FlushKind {
    /// `clwb`: write back, line may stay cached. Weakly ordered (needs `sfence`).
    Clwb,
    /// `clflushopt`: write back and invalidate. Weakly ordered (needs `sfence`).
    Clflushopt,
    /// `clflush`: write back and invalidate, ordered with other stores and
    /// `clflush`es, so it needs no fence of its own, but it serialises.
    Clflush,
}

impl FlushKind {
    /// All kinds, strongest preference first.
    pub const ALL: [FlushKind; 3] = [FlushKind::Clwb, FlushKind::Clflushopt, FlushKind::Clflush];

    /// Lower-case name, as accepted by `FERRITE_FLUSH` and the CLI.
    pub fn name(self) -> &'static str {
        match self {
            FlushKind::Clwb => "clwb",
            FlushKind::Clflushopt => "clflushopt",
            FlushKind::Clflush => "clflush",
        }
    }

    /// Parses a name produced by [`FlushKind::name`].
    pub fn parse(s: &str) -> Option<FlushKind> {
        FlushKind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Whether this CPU implements the instruction.
    pub fn supported(self) -> bool {
        let f = features();
        match self {
            FlushKind::Clwb => f.clwb,
            FlushKind::Clflushopt => f.clflushopt,
            FlushKind::Clflush => f.clflush,
        }
    }

    /// The best flush instruction this CPU has (`clwb` > `clflushopt` >
    /// `clflush`), or `None` when it has none (non-x86 targets).
    pub fn best() -> Option<FlushKind> {
        FlushKind::ALL.into_iter().find(|k| k.supported())
    }
}

/// CPU features relevant to persistence, read once with CPUID.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuFeatures {
    /// `clflush` (CPUID.1:EDX bit 19): flush a line, serialised with
    /// other `clflush`es.
    pub clflush: bool,
    /// `clflushopt` (CPUID.7:EBX bit 23): flush a line, ordered only by a
    /// fence.
    pub clflushopt: bool,
    /// `clwb` (CPUID.7:EBX bit 24): write a line back, possibly keeping it
    /// cached.
    pub clwb: bool,
    /// SSE2 (CPUID.1:EDX bit 26): the 16-byte non-temporal stores
    /// [`nt_copy`] and [`nt_fill`] use.
    pub sse2: bool,
    /// AVX2 (`is_x86_feature_detected!`, which also checks that the OS
    /// saves the YMM state). Reported by `ferrite probe`.
    pub avx2: bool,
}

/// The cached CPU feature set.
pub fn features() -> CpuFeatures {
    static F: OnceLock<CpuFeatures> = OnceLock::new();
    *F.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> CpuFeatures {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // Leaf 0 reports the highest basic leaf, so leaves 1 and 7 are only
    // queried when present.
    let max = __cpuid(0).eax;
    let leaf1 = if max >= 1 { Some(__cpuid(1)) } else { None };
    let leaf7 = if max >= 7 {
        Some(__cpuid_count(7, 0))
    } else {
        None
    };
    CpuFeatures {
        clflush: leaf1.is_some_and(|r| r.edx & (1 << 19) != 0),
        sse2: leaf1.is_some_and(|r| r.edx & (1 << 26) != 0),
        clflushopt: leaf7.is_some_and(|r| r.ebx & (1 << 23) != 0),
        clwb: leaf7.is_some_and(|r| r.ebx & (1 << 24) != 0),
        avx2: std::arch::is_x86_feature_detected!("avx2"),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> CpuFeatures {
    CpuFeatures::default()
}

/// Writes back the cache line containing `addr` with instruction `kind`.
///
/// # Safety
/// `addr` must point into memory mapped in this process, and `kind` must be
/// supported by this CPU ([`FlushKind::supported`]).
#[inline(always)]
pub unsafe fn flush_line(kind: FlushKind, addr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller guarantees `addr` is mapped and the instruction
    // exists; these instructions neither read nor write Rust-visible memory.
    unsafe {
        match kind {
            FlushKind::Clwb => {
                std::arch::asm!("clwb [{0}]", in(reg) addr, options(nostack, preserves_flags))
            }
            FlushKind::Clflushopt => {
                std::arch::asm!("clflushopt [{0}]", in(reg) addr, options(nostack, preserves_flags))
            }
            FlushKind::Clflush => {
                std::arch::asm!("clflush [{0}]", in(reg) addr, options(nostack, preserves_flags))
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kind, addr);
    }
}

/// Store fence: orders earlier flushes and non-temporal stores before later
/// stores; on ADR hardware it is the point where flushed lines are durable.
#[inline(always)]
pub fn sfence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no operands and no memory-safety preconditions.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// Copies `len` bytes from `src` to `dst` with non-temporal stores where the
/// destination is 16-byte aligned, ordinary stores for the unaligned head and
/// tail. The non-temporal part is not ordered until the next [`sfence`]; the
/// ordinary head/tail still needs a flush.
///
/// Returns the byte range `(start, end)` relative to `dst` that was written
/// non-temporally (empty when `start == end`).
///
/// # Safety
/// `dst..dst+len` must be valid for writes and `src..src+len` valid for reads,
/// and the ranges must not overlap.
pub unsafe fn nt_copy(dst: *mut u8, src: *const u8, len: usize) -> (usize, usize) {
    let head = dst.align_offset(16).min(len);
    let body = (len - head) & !15;
    // SAFETY: the caller guarantees both ranges are valid and disjoint; every
    // offset below stays inside `0..len`.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, head);
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
            let mut i = head;
            while i < head + body {
                let v = _mm_loadu_si128(src.add(i) as *const __m128i);
                _mm_stream_si128(dst.add(i) as *mut __m128i, v);
                i += 16;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        std::ptr::copy_nonoverlapping(src.add(head), dst.add(head), body);
        let tail = head + body;
        std::ptr::copy_nonoverlapping(src.add(tail), dst.add(tail), len - tail);
    }
    (head, head + body)
}

/// Fills `len` bytes at `dst` with `byte`, using non-temporal stores for the
/// 16-byte aligned body like [`nt_copy`]; returns the non-temporal range.
///
/// # Safety
/// `dst..dst+len` must be valid for writes.
pub unsafe fn nt_fill(dst: *mut u8, byte: u8, len: usize) -> (usize, usize) {
    let head = dst.align_offset(16).min(len);
    let body = (len - head) & !15;
    // SAFETY: the caller guarantees the range is writable; all offsets stay
    // inside `0..len`.
    unsafe {
        std::ptr::write_bytes(dst, byte, head);
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_set1_epi8, _mm_stream_si128};
            let v = _mm_set1_epi8(byte as i8);
            let mut i = head;
            while i < head + body {
                _mm_stream_si128(dst.add(i) as *mut _, v);
                i += 16;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        std::ptr::write_bytes(dst.add(head), byte, body);
        let tail = head + body;
        std::ptr::write_bytes(dst.add(tail), byte, len - tail);
    }
    (head, head + body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nt_copy_matches_plain_copy_for_every_alignment() {
        let src: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
        for off in 0..17 {
            for len in [0, 1, 15, 16, 17, 64, 255, 256, 283] {
                let mut dst = vec![0u8; 320];
                let (s, e) = unsafe { nt_copy(dst.as_mut_ptr().add(off), src.as_ptr(), len) };
                sfence();
                assert!(s <= e && e <= len);
                assert_eq!(&dst[off..off + len], &src[..len], "off {off} len {len}");
                assert!(dst[..off].iter().all(|&b| b == 0));
                assert!(dst[off + len..].iter().all(|&b| b == 0));
            }
        }
    }

    #[test]
    fn nt_fill_fills_exactly() {
        for off in 0..17 {
            let mut dst = vec![0u8; 200];
            unsafe { nt_fill(dst.as_mut_ptr().add(off), 0xab, 150) };
            sfence();
            assert!(dst[off..off + 150].iter().all(|&b| b == 0xab));
            assert!(dst[off + 150..].iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn every_supported_flush_kind_executes() {
        let buf = vec![1u8; 256];
        for k in FlushKind::ALL.into_iter().filter(|k| k.supported()) {
            unsafe { flush_line(k, buf.as_ptr().add(64)) };
        }
        sfence();
        assert_eq!(FlushKind::parse("clwb"), Some(FlushKind::Clwb));
        assert_eq!(FlushKind::parse("nope"), None);
    }
}
