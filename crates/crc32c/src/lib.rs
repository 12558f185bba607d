//! CRC-32C (Castagnoli, the iSCSI polynomial `0x1EDC6F41`, reflected,
//! initial value and final XOR `0xFFFF_FFFF`): the checksum of every
//! Ferrite format — superblocks, log records, tuples, nodes, blocks,
//! server items.
//!
//! The values and the two functions are those of the `crc32c` crate
//! (0.6), which Ferrite used before; a test compares them on every
//! length up to 5 000 bytes and on appends at every split. What changes is
//! the speed on the sizes a read verifies (a 150-byte value, a 576-byte
//! leaf, a 1 KiB tuple, a 4 KiB block): the `crc32c` crate runs three
//! interleaved `crc32` instructions only on chunks of 768 bytes or more,
//! and one dependent chain below (3 cycles per 8 bytes), while `crc-fast`
//! folds 64-byte blocks with carry-less multiplies (AVX-512 `VPCLMULQDQ`
//! where the processor has it, SSE 4.2 / PCLMULQDQ otherwise, chosen at
//! run time). On this project's machines (AMD EPYC, Zen 4) that is 12.8
//! vs 34 ns for 576 bytes, 17 vs 34 ns for 1 000 and 70 vs 146 ns for
//! 4 096 (`cargo test -p ferrite-crc32c --release -- --ignored --nocapture`
//! prints the comparison).
//!
//! Short inputs (under [`SHORT`] bytes: a pool offset, a record header, a
//! key) skip `crc-fast`: building its `Digest` costs about 10 ns whatever
//! the length, more than such data takes through the processor's own
//! `crc32` instruction (8 bytes per instruction, one dependent chain),
//! which the private module `short` uses where the processor has SSE 4.2.
//! A checksum made of parts (offset, header, key, value) then sets up
//! `crc-fast` once, for its one long part.
//!
//! Why not call `crc-fast` directly: its API returns `u64` for every
//! width and continues a checksum through a `Digest` built from the raw
//! register; these two functions keep that detail in one place.

/// The CRC-32C of `data`.
#[inline]
#[must_use]
pub fn crc32c(data: &[u8]) -> u32 {
    if data.len() < SHORT
        && let Some(c) = short::append(0, data)
    {
        return c;
    }
    crc_fast::crc32_iscsi(data)
}

/// The CRC-32C of the bytes whose CRC-32C is `crc`, followed by `data`:
/// `crc32c_append(crc32c(a), b) == crc32c(a ++ b)`, and
/// `crc32c_append(0, b) == crc32c(b)`.
#[inline]
#[must_use]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    if data.len() < SHORT
        && let Some(c) = short::append(crc, data)
    {
        return c;
    }
    // The register holds the CRC before its final XOR; the final XOR is
    // the all-ones word, so the register after `a` is `!crc32c(a)`.
    let mut d =
        crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    d.update(data);
    // A 32-bit CRC: the digest's upper 32 bits are zero.
    d.finalize() as u32
}

/// Inputs shorter than this many bytes go through the `crc32` instruction
/// where the processor has it: below it one dependent chain of that
/// instruction (3 cycles per 8 bytes) beats the cost of setting up
/// `crc-fast` (the ignored test `speed_against_the_crc32c_crate` prints
/// both sides).
pub const SHORT: usize = 64;

/// CRC-32C of short inputs with the processor's `crc32` instruction.
mod short {
    /// `crc32c_append(crc, data)`, or `None` where the processor has no
    /// `crc32` instruction this module uses (`crc-fast` computes it then).
    #[cfg(target_arch = "x86_64")]
    #[inline]
    pub(crate) fn append(crc: u32, data: &[u8]) -> Option<u32> {
        if !std::arch::is_x86_feature_detected!("sse4.2") {
            return None;
        }
        // SAFETY: `append_sse42` needs only SSE 4.2, which the processor
        // was just found to have; it reads nothing but `data`.
        Some(unsafe { append_sse42(crc, data) })
    }

    #[cfg(not(target_arch = "x86_64"))]
    #[inline]
    pub(crate) fn append(_crc: u32, _data: &[u8]) -> Option<u32> {
        None
    }

    /// The register is the checksum inverted (initial value and final XOR
    /// `0xFFFF_FFFF`); each instruction folds 8 bytes, read little-endian
    /// as the reflected CRC takes them, then one byte at a time for the
    /// tail (4, 2, then 1 byte).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "sse4.2")]
    fn append_sse42(crc: u32, data: &[u8]) -> u32 {
        use std::arch::x86_64::{_mm_crc32_u8, _mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64};
        let mut words = data.chunks_exact(8);
        let mut r = u64::from(!crc);
        for w in &mut words {
            r = _mm_crc32_u64(r, u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
        // The instruction keeps the 32-bit register in the low half.
        let mut r = r as u32;
        let mut tail = words.remainder();
        if tail.len() >= 4 {
            r = _mm_crc32_u32(
                r,
                u32::from_le_bytes(tail[..4].try_into().expect("4 bytes")),
            );
            tail = &tail[4..];
        }
        if tail.len() >= 2 {
            r = _mm_crc32_u16(r, u16::from_le_bytes([tail[0], tail[1]]));
            tail = &tail[2..];
        }
        if let Some(&b) = tail.first() {
            r = _mm_crc32_u8(r, b);
        }
        !r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    fn bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut r = StdRng::seed_from_u64(seed);
        (0..n).map(|_| r.random()).collect()
    }

    #[test]
    fn the_check_value_of_the_catalogue() {
        // CRC-32/ISCSI's check value: the CRC of the ASCII digits 1..9.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn every_length_matches_the_crc32c_crate() {
        let b = bytes(5_000, 1);
        for n in 0..=b.len() {
            // Every start alignment too: the kernels handle heads apart.
            let s = n % 64;
            let d = &b[s..s + (n - s).min(b.len() - s)];
            assert_eq!(crc32c(d), crc32c_reference::crc32c(d), "length {}", d.len());
        }
    }

    #[test]
    fn appends_match_the_crc32c_crate_at_every_split() {
        let b = bytes(1_200, 2);
        for split in 0..=b.len() {
            let (x, y) = b.split_at(split);
            let head = crc32c(x);
            assert_eq!(head, crc32c_reference::crc32c(x));
            assert_eq!(crc32c_append(head, y), crc32c(&b), "split {split}");
            assert_eq!(
                crc32c_append(head, y),
                crc32c_reference::crc32c_append(head, y),
                "split {split}"
            );
        }
        // Continuing from an arbitrary word, as the formats do with seeds.
        let mut r = StdRng::seed_from_u64(3);
        for _ in 0..2_000 {
            let seed: u32 = r.random();
            let n = r.random_range(0..3_000);
            let d = &b[..n.min(b.len())];
            assert_eq!(
                crc32c_append(seed, d),
                crc32c_reference::crc32c_append(seed, d)
            );
        }
    }

    /// Nanoseconds per checksum at the sizes reads verify, this crate vs
    /// the `crc32c` crate (run with `--release -- --ignored --nocapture`).
    #[test]
    #[ignore = "a measurement: run it with --release -- --ignored --nocapture"]
    fn speed_against_the_crc32c_crate() {
        let b = bytes(4_096, 4);
        for n in [64usize, 150, 576, 1_000, 4_096] {
            let d = &b[..n];
            let rounds = 2_000_000u32;
            let mut acc = 0u32;
            let t = std::time::Instant::now();
            for _ in 0..rounds {
                acc = acc.wrapping_add(crc32c(std::hint::black_box(d)));
            }
            let ours = t.elapsed().as_nanos() as f64 / f64::from(rounds);
            let t = std::time::Instant::now();
            for _ in 0..rounds {
                acc = acc.wrapping_add(crc32c_reference::crc32c(std::hint::black_box(d)));
            }
            let theirs = t.elapsed().as_nanos() as f64 / f64::from(rounds);
            println!("{n:5} B: {ours:6.1} ns vs crc32c crate {theirs:6.1} ns ({acc:#x})");
        }
        for n in [8usize, 12, 24, 40, 63, 64, 96, 150, 576, 1_000] {
            let d = &b[..n];
            let rounds = 2_000_000u32;
            let mut acc = 0u32;
            let t = std::time::Instant::now();
            for _ in 0..rounds {
                acc = crc32c_append(acc, std::hint::black_box(d));
            }
            let ours = t.elapsed().as_nanos() as f64 / f64::from(rounds);
            let t = std::time::Instant::now();
            for _ in 0..rounds {
                acc = crc32c_reference::crc32c_append(acc, std::hint::black_box(d));
            }
            let theirs = t.elapsed().as_nanos() as f64 / f64::from(rounds);
            println!("append {n:5} B: {ours:6.1} ns vs crc32c crate {theirs:6.1} ns ({acc:#x})");
        }
    }
}
