//! The AVX2 FAM encoder of [P0 Appendix A], selected at run time.
//!
//! This is the only file of the cell module with `unsafe` code: the vector
//! loads and stores of the intrinsics take raw pointers, and calling a
//! `#[target_feature(enable = "avx2")]` function needs proof that the CPU
//! has AVX2 (checked with `is_x86_feature_detected!` on every call; std
//! caches the answer, so this is one load and a branch).
//!
//! It computes, for four chunks at a time, exactly what
//! [`encode_scalar`](super::fam::encode_scalar) computes one chunk at a time
//! (the tests compare both on random inputs): for each data block
//! `((w + 2^62) & 0xC000…) | ((w << 31) & 0x3FFF_FFFF_FFFF_FFFF) | (chunk &
//! 0x7FFF_FFFF)`, and the chunks' most significant bits gathered with
//! `movemask` into the high-bit block, which is updated with the scalar
//! [`next_block`](super::fam::next_block). It reads and writes local
//! buffers only; the caller stores the blocks to the medium with one
//! 8-byte store each.

// The crate denies `unsafe_code`; this file is the cell module's one exception.
#![allow(unsafe_code)]

/// True when this CPU can run [`encode`]'s AVX2 path.
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Encodes like [`encode_scalar`](super::fam::encode_scalar) with AVX2;
/// returns `false` (and leaves `new` untouched) when the CPU lacks AVX2.
#[inline]
pub(crate) fn encode(old: &[u64], value: &[u8], new: &mut [u64]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: `encode_avx2` only requires the AVX2 target feature,
            // which the CPU was just checked to have.
            unsafe { x86::encode_avx2(old, value, new) };
            return true;
        }
    }
    let _ = (old, value, new);
    false
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::fam::next_block;
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2")]
    pub(super) fn encode_avx2(old: &[u64], value: &[u8], new: &mut [u64]) {
        let chunks = value.len() / 4;
        assert!(
            value.len().is_multiple_of(16) && old.len() == chunks + 1 && new.len() == chunks + 1,
            "FAM encode: {} value bytes, {} old and {} new blocks",
            value.len(),
            old.len(),
            new.len()
        );
        let add = _mm256_set1_epi64x(1 << 62);
        let version_mask = _mm256_set1_epi64x(0xC000_0000_0000_0000u64 as i64);
        let keep_mask = _mm256_set1_epi64x(0x3FFF_FFFF_FFFF_FFFF);
        let low31 = _mm_set1_epi32(0x7FFF_FFFF);
        let mut high = 0u64;
        for g in 0..chunks / 4 {
            let input: &[u8; 16] = value[16 * g..16 * g + 16]
                .try_into()
                .expect("16 value bytes");
            let blocks: &[u64; 4] = old[1 + 4 * g..5 + 4 * g].try_into().expect("4 blocks");
            // SAFETY: `input` is a valid, readable 16-byte array;
            // `_mm_loadu_si128` has no alignment requirement.
            let input32 = unsafe { _mm_loadu_si128(input.as_ptr().cast()) };
            // Bit j = most significant bit of chunk 4g + j.
            high |= (_mm_movemask_ps(_mm_castsi128_ps(input32)) as u64) << (4 * g);
            let input64 = _mm256_cvtepu32_epi64(_mm_and_si128(input32, low31));
            // SAFETY: `blocks` is a valid, readable 32-byte array;
            // `_mm256_loadu_si256` has no alignment requirement.
            let fambs = unsafe { _mm256_loadu_si256(blocks.as_ptr().cast()) };
            let version = _mm256_and_si256(_mm256_add_epi64(fambs, add), version_mask);
            let old_states = _mm256_and_si256(_mm256_slli_epi64::<31>(fambs), keep_mask);
            let both = _mm256_or_si256(version, _mm256_or_si256(old_states, input64));
            let out: &mut [u64; 4] = (&mut new[1 + 4 * g..5 + 4 * g])
                .try_into()
                .expect("4 blocks");
            // SAFETY: `out` is a valid, writable 32-byte array borrowed
            // exclusively; `_mm256_storeu_si256` has no alignment requirement.
            unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), both) };
        }
        new[0] = next_block(old[0], high);
    }
}
