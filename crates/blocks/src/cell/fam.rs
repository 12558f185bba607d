//! Failure-atomic memory (FAM) [P0 §3.4.3, Appendix A]: in-place updates
//! with a single persist fence.
//!
//! The value is cut into 4-byte chunks. The low 31 bits of each chunk live
//! in their own 8-byte *block* together with the chunk's previous low bits
//! and a 2-bit version; the most significant bits of all chunks live in one
//! more block, the *high-bit block*, built the same way. An update rewrites
//! every block of the cell — each with one aligned 8-byte store, which x86
//! writes back failure atomically — and then flushes the cell and fences
//! once. A crash can persist any subset of the blocks; recovery recognises
//! the blocks that are a version ahead of the others and rolls them back.
//!
//! # On-media format of one cell (little-endian `u64` blocks)
//!
//! | value size | data blocks | blocks | bytes used | stride |
//! |-----------:|------------:|-------:|-----------:|-------:|
//! | 16 | 4  | 5  | 40  | 64  |
//! | 32 | 8  | 9  | 72  | 128 |
//! | 48 | 12 | 13 | 104 | 128 |
//! | 64 | 16 | 17 | 136 | 192 |
//!
//! Block 0 (cell bytes 0..8) is the high-bit block; block `1 + c` (bytes
//! `8 + 8c .. 16 + 8c`) holds chunk `c`, the little-endian `u32` at value
//! bytes `4c .. 4c + 4`. Bytes past the last block are zero. Within a block:
//!
//! | bits | field |
//! |-----:|-------|
//! | 62..64 | version, counting updates modulo 4 |
//! | 31..62 | `old`: the payload before the latest update |
//! | 0..31 | `new`: the payload of the latest update |
//!
//! The payload of data block `1 + c` is bits 0..31 of chunk `c`; the payload
//! of the high-bit block has bit `c` = bit 31 of chunk `c` (at most 16 bits
//! are used). A cell's value is read from the `new` fields.
//!
//! # Protocol
//!
//! Update: for every block, `block' = (version + 1 mod 4, old = new, new =
//! payload)`, stored with one 8-byte store; then flush the cell and fence
//! (one fence). The scalar encoder and the AVX2 encoder of Appendix A
//! ([`FamEncoder`], chosen at run time) compute identical blocks.
//!
//! Invariant: outside an update every block of a cell carries the same
//! version. A crash during an update leaves each block either untouched
//! (version `v`) or updated (version `v + 1 mod 4`, `old` = its payload
//! before the update), because each block is written by one failure-atomic
//! store.
//!
//! Recovery: for each cell whose blocks carry two versions `v` and `v + 1`
//! (mod 4), roll back every block at `v + 1`: version `v`, `new = old`. The
//! cell then holds its old value in full. Rollbacks are stored with 8-byte
//! stores, flushed, and made durable with one fence before recovery
//! returns — which matters: an update after recovery must start from a
//! durable consistent cell, or a later crash could mix its blocks with the
//! torn update's. Recovery is idempotent under repeated crashes: a block is
//! rolled back at most once, since after its rollback it carries the
//! version the others have, and a crash during recovery leaves each rolled
//! block either rolled back or still ahead. Versions that differ by two, or
//! more than two versions in a cell, cannot arise and are reported as
//! corruption.

use super::fam_avx2;
use super::{CellArray, CellError, CellKind, Fault, Header, Recovery, ValueSize};
use ferrite_pmem::{CACHE_LINE, Region};

/// Bit position of the version.
const VERSION_SHIFT: u32 = 62;
/// Version + 1.
pub(crate) const VERSION_ONE: u64 = 1 << VERSION_SHIFT;
/// The version bits.
pub(crate) const VERSION_MASK: u64 = 3 << VERSION_SHIFT;
/// The `old` payload (bits 31..62).
pub(crate) const OLD_MASK: u64 = 0x7FFF_FFFF << 31;
/// The `new` payload (bits 0..31).
pub(crate) const NEW_MASK: u64 = 0x7FFF_FFFF;
/// Blocks of a 64-byte cell, the largest.
pub(crate) const MAX_BLOCKS: usize = ValueSize::MAX / 4 + 1;

/// Blocks of a cell of `size`: one per 4-byte chunk plus the high-bit block.
pub(crate) fn blocks(size: ValueSize) -> usize {
    size.bytes() / 4 + 1
}

pub(crate) fn stride(size: ValueSize) -> usize {
    (blocks(size) * 8).next_multiple_of(CACHE_LINE)
}

/// The block after an update of `w` with `payload` (≤ 31 bits): version + 1,
/// old = new, new = payload.
#[inline(always)]
pub(crate) fn next_block(w: u64, payload: u64) -> u64 {
    (w.wrapping_add(VERSION_ONE) & VERSION_MASK) | ((w << 31) & OLD_MASK) | payload
}

#[inline(always)]
fn version(w: u64) -> u64 {
    w >> VERSION_SHIFT
}

/// Block `w` rolled back: version - 1, new = old.
#[inline]
fn rolled_back(w: u64) -> u64 {
    (w.wrapping_sub(VERSION_ONE) & VERSION_MASK) | (w & OLD_MASK) | ((w & OLD_MASK) >> 31)
}

/// Scalar encoder: the blocks `new` after writing `value` over `old`
/// (`old.len() == new.len() == value.len() / 4 + 1`).
pub(crate) fn encode_scalar(old: &[u64], value: &[u8], new: &mut [u64]) {
    let chunks = value.len() / 4;
    assert!(old.len() == chunks + 1 && new.len() == chunks + 1);
    let mut high = 0u64;
    for (c, bytes) in value.chunks_exact(4).enumerate() {
        let x = u32::from_le_bytes(bytes.try_into().expect("4 bytes"));
        high |= ((x >> 31) as u64) << c;
        new[1 + c] = next_block(old[1 + c], (x & 0x7FFF_FFFF) as u64);
    }
    new[0] = next_block(old[0], high);
}

/// Decodes the value from the `new` fields of `w`.
#[inline]
fn decode(w: &[u64], out: &mut [u8]) {
    let high = w[0];
    for (c, bytes) in out.chunks_exact_mut(4).enumerate() {
        let x = (w[1 + c] & NEW_MASK) as u32 | ((((high >> c) & 1) as u32) << 31);
        bytes.copy_from_slice(&x.to_le_bytes());
    }
}

/// `None` when all blocks carry one version, else the version that is
/// ahead; `Err` for states no crash can produce.
fn torn_version(w: &[u64]) -> Result<Option<u64>, String> {
    let v0 = version(w[0]);
    let mut other = None;
    for &x in &w[1..] {
        let v = version(x);
        if v != v0 {
            match other {
                None => other = Some(v),
                Some(o) if o == v => {}
                Some(o) => return Err(format!("blocks carry versions {v0}, {o} and {v}")),
            }
        }
    }
    match other {
        None => Ok(None),
        Some(o) if o == (v0 + 1) & 3 => Ok(Some(o)),
        Some(o) if v0 == (o + 1) & 3 => Ok(Some(v0)),
        Some(o) => Err(format!("blocks carry versions {v0} and {o}, two apart")),
    }
}

/// Which implementation computes the new blocks of an update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FamEncoder {
    /// Portable 64-bit code.
    Scalar,
    /// The AVX2 code of [P0 Appendix A] (four chunks per instruction).
    Avx2,
}

impl FamEncoder {
    /// AVX2 when this CPU has it, else scalar.
    pub fn best() -> FamEncoder {
        if fam_avx2::available() {
            FamEncoder::Avx2
        } else {
            FamEncoder::Scalar
        }
    }

    pub fn is_available(self) -> bool {
        match self {
            FamEncoder::Scalar => true,
            FamEncoder::Avx2 => fam_avx2::available(),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FamEncoder::Scalar => "scalar",
            FamEncoder::Avx2 => "avx2",
        }
    }

    /// See [`encode_scalar`]; falls back to it when AVX2 is missing.
    #[inline]
    pub(crate) fn encode(self, old: &[u64], value: &[u8], new: &mut [u64]) {
        if self == FamEncoder::Scalar || !fam_avx2::encode(old, value, new) {
            encode_scalar(old, value, new)
        }
    }
}

/// An array of FAM cells. See the [module documentation](self).
#[derive(Debug)]
pub struct FamCells {
    region: Region,
    h: Header,
    blocks: usize,
    encoder: FamEncoder,
    pub(crate) fault: Fault,
}

impl FamCells {
    fn with_header(region: Region, h: Header, fault: Fault) -> FamCells {
        FamCells {
            region,
            h,
            blocks: blocks(h.size),
            encoder: FamEncoder::best(),
            fault,
        }
    }

    /// The encoder updates use (by default [`FamEncoder::best`]).
    pub fn encoder(&self) -> FamEncoder {
        self.encoder
    }

    /// Chooses the encoder; [`CellError::NoAvx2`] when the CPU lacks it.
    pub fn set_encoder(&mut self, e: FamEncoder) -> Result<(), CellError> {
        if !e.is_available() {
            return Err(CellError::NoAvx2);
        }
        self.encoder = e;
        Ok(())
    }

    #[inline(always)]
    fn load(&self, off: usize, w: &mut [u64]) {
        let mut raw = [0u8; MAX_BLOCKS * 8];
        let raw = &mut raw[..w.len() * 8];
        self.region.read(off, raw);
        for (x, b) in w.iter_mut().zip(raw.chunks_exact(8)) {
            *x = u64::from_le_bytes(b.try_into().expect("8 bytes"));
        }
    }

    /// True when every block of cell `index` carries the same version (the
    /// state outside updates; always true after recovery).
    pub fn is_consistent(&self, index: usize) -> Result<bool, CellError> {
        let off = self.h.cell_off(index)?;
        let mut w = [0u64; MAX_BLOCKS];
        self.load(off, &mut w[..self.blocks]);
        Ok(matches!(torn_version(&w[..self.blocks]), Ok(None)))
    }

    /// [`CellArray::recover`] with a planted fault (for the checks).
    pub(crate) fn recover_with(
        region: Region,
        fault: Fault,
    ) -> Result<(FamCells, Recovery), CellError> {
        let h = Header::open(&region, CellKind::Fam)?;
        let a = FamCells::with_header(region, h, fault);
        let nb = a.blocks;
        let mut rec = Recovery::default();
        // Only the two-phase fault needs to remember blocks between passes.
        let mut second_pass: Vec<(usize, u64)> = Vec::new();
        for i in 0..h.count {
            let off = h.cell_off(i)?;
            let mut w = [0u64; MAX_BLOCKS];
            a.load(off, &mut w[..nb]);
            let ahead = match torn_version(&w[..nb]) {
                Ok(None) => continue,
                Ok(Some(v)) => v,
                Err(what) => return Err(CellError::Corrupt { index: i, what }),
            };
            if fault == Fault::FamNoRollback {
                continue;
            }
            for (b, &x) in w[..nb].iter().enumerate() {
                if version(x) != ahead {
                    continue;
                }
                let fixed = if fault == Fault::FamTwoPhaseRollback {
                    second_pass.push((off + 8 * b, x));
                    (x & !VERSION_MASK) | (x.wrapping_sub(VERSION_ONE) & VERSION_MASK)
                } else {
                    rolled_back(x)
                };
                a.region.store_u64(off + 8 * b, fixed.to_le());
                rec.blocks_rolled_back += 1;
            }
            a.region.flush(off, nb * 8);
            rec.cells_repaired += 1;
        }
        if rec.cells_repaired > 0 {
            a.region.fence();
        }
        if !second_pass.is_empty() {
            for &(off, x) in &second_pass {
                a.region.store_u64(off, rolled_back(x).to_le());
                a.region.flush(off, 8);
            }
            a.region.fence();
        }
        Ok((a, rec))
    }
}

impl CellArray for FamCells {
    fn format(region: Region, size: ValueSize, count: usize) -> Result<FamCells, CellError> {
        let h = Header::format(&region, CellKind::Fam, size, count)?;
        Ok(FamCells::with_header(region, h, Fault::None))
    }

    fn recover(region: Region) -> Result<(FamCells, Recovery), CellError> {
        FamCells::recover_with(region, Fault::None)
    }

    fn kind(&self) -> CellKind {
        CellKind::Fam
    }

    fn value_size(&self) -> ValueSize {
        self.h.size
    }

    fn len(&self) -> usize {
        self.h.count
    }

    fn region(&self) -> &Region {
        &self.region
    }

    #[inline]
    fn read(&self, index: usize, out: &mut [u8]) -> Result<(), CellError> {
        self.h.check_len(out.len())?;
        let off = self.h.cell_off(index)?;
        let mut w = [0u64; MAX_BLOCKS];
        self.load(off, &mut w[..self.blocks]);
        decode(&w[..self.blocks], out);
        Ok(())
    }

    #[inline]
    fn update(&mut self, index: usize, value: &[u8]) -> Result<(), CellError> {
        self.h.check_len(value.len())?;
        let off = self.h.cell_off(index)?;
        let nb = self.blocks;
        let mut old = [0u64; MAX_BLOCKS];
        self.load(off, &mut old[..nb]);
        let mut new = [0u64; MAX_BLOCKS];
        self.encoder.encode(&old[..nb], value, &mut new[..nb]);
        if self.fault == Fault::FamNoVersion {
            for (n, o) in new[..nb].iter_mut().zip(&old[..nb]) {
                *n = (*n & !VERSION_MASK) | (o & VERSION_MASK);
            }
        }
        // One aligned 8-byte store per block: each block is failure atomic.
        for (b, &x) in new[..nb].iter().enumerate() {
            self.region.store_u64(off + 8 * b, x.to_le());
        }
        self.region.persist(off, nb * 8);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_pmem::{Counters, Domain, Pool, PoolOptions};
    use rand::{Rng, RngCore, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn pool() -> Pool {
        Pool::create_in_memory(&PoolOptions::new("cells", 1 << 16).domain(Domain::Adr)).unwrap()
    }

    #[test]
    fn layout_matches_the_paper() {
        // [P0 Table 3]: ⌈8n/31⌉ blocks; 1, 2, 3 lines for 16, 32, 64 bytes.
        for (size, lines) in [
            (ValueSize::B16, 1),
            (ValueSize::B32, 2),
            (ValueSize::B48, 2),
            (ValueSize::B64, 3),
        ] {
            assert_eq!(blocks(size), (8 * size.bytes()).div_ceil(31));
            assert_eq!(stride(size), lines * CACHE_LINE);
        }
        assert_eq!(OLD_MASK, 0x3FFF_FFFF_8000_0000);
        assert_eq!(OLD_MASK | NEW_MASK | VERSION_MASK, u64::MAX);
        assert_eq!(OLD_MASK & NEW_MASK, 0);
    }

    #[test]
    fn block_encoding_by_hand() {
        // Value chunks 0x8000_0001, 0x7FFF_FFFF, 0, 0xFFFF_FFFF over a zero cell.
        let mut v = [0u8; 16];
        v[0..4].copy_from_slice(&0x8000_0001u32.to_le_bytes());
        v[4..8].copy_from_slice(&0x7FFF_FFFFu32.to_le_bytes());
        v[12..16].copy_from_slice(&0xFFFF_FFFFu32.to_le_bytes());
        let mut new = [0u64; 5];
        encode_scalar(&[0; 5], &v, &mut new);
        assert_eq!(new[0], VERSION_ONE | 0b1001, "msbs of chunks 0 and 3");
        assert_eq!(new[1], VERSION_ONE | 1);
        assert_eq!(new[2], VERSION_ONE | 0x7FFF_FFFF);
        assert_eq!(new[3], VERSION_ONE);
        assert_eq!(new[4], VERSION_ONE | 0x7FFF_FFFF);
        // A second update shifts new into old and wraps the version at 4.
        let mut w = new;
        for _ in 0..3 {
            let mut n = [0u64; 5];
            encode_scalar(&w, &[0u8; 16], &mut n);
            w = n;
        }
        assert_eq!(w[2], 0, "version wrapped to 0, old = new = 0");
        let mut n = [0u64; 5];
        encode_scalar(&new, &[0u8; 16], &mut n);
        assert_eq!(n[2], (2 << 62) | (0x7FFF_FFFF << 31));
        // Rolling it back restores version 1 and the payload in `new`.
        assert_eq!(rolled_back(n[2]), VERSION_ONE | OLD_MASK | NEW_MASK);
        let mut out = [0u8; 16];
        decode(&new, &mut out);
        assert_eq!(out, v);
    }

    #[test]
    fn scalar_and_avx2_encoders_produce_identical_blocks() {
        if !FamEncoder::Avx2.is_available() {
            eprintln!("no AVX2 on this CPU: only the scalar encoder runs");
            return;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(0xFA17);
        for round in 0..20_000 {
            let size = ValueSize::ALL[round % 4];
            let nb = blocks(size);
            let mut old = [0u64; MAX_BLOCKS];
            for w in &mut old[..nb] {
                // Arbitrary words, including every version and bit pattern.
                *w = rng.next_u64();
            }
            let mut value = [0u8; ValueSize::MAX];
            rng.fill_bytes(&mut value[..size.bytes()]);
            if round % 7 == 0 {
                // Edge patterns: all msbs set / clear.
                let b = if round % 2 == 0 { 0xFF } else { 0x00 };
                value[..size.bytes()].fill(b);
            }
            let (mut a, mut b) = ([0u64; MAX_BLOCKS], [0u64; MAX_BLOCKS]);
            encode_scalar(&old[..nb], &value[..size.bytes()], &mut a[..nb]);
            FamEncoder::Avx2.encode(&old[..nb], &value[..size.bytes()], &mut b[..nb]);
            assert_eq!(a[..nb], b[..nb], "round {round}, {size}, old {old:x?}");
        }
    }

    #[test]
    fn both_encoders_leave_identical_arrays() {
        if !FamEncoder::Avx2.is_available() {
            return;
        }
        let p = pool();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for size in ValueSize::ALL {
            let len = CellKind::Fam.region_len(size, 16).unwrap();
            let ra = p.data().sub(0, len).unwrap();
            let rb = p.data().sub(len.next_multiple_of(64), len).unwrap();
            let mut a = FamCells::format(ra.clone(), size, 16).unwrap();
            let mut b = FamCells::format(rb.clone(), size, 16).unwrap();
            a.set_encoder(FamEncoder::Scalar).unwrap();
            b.set_encoder(FamEncoder::Avx2).unwrap();
            let mut v = vec![0u8; size.bytes()];
            for _ in 0..500 {
                let i = rng.random_range(0..16);
                rng.fill_bytes(&mut v);
                a.update(i, &v).unwrap();
                b.update(i, &v).unwrap();
            }
            assert_eq!(ra.read_vec(0, len), rb.read_vec(0, len), "{size}");
        }
    }

    #[test]
    fn one_fence_per_update_and_lines_as_in_table_3() {
        let p = pool();
        for (size, lines) in [
            (ValueSize::B16, 1),
            (ValueSize::B32, 2),
            (ValueSize::B48, 2),
            (ValueSize::B64, 3),
        ] {
            let r = p.data().sub(0, 8192).unwrap();
            let mut a = FamCells::format(r, size, 8).unwrap();
            let before = Counters::snapshot();
            a.update(3, &vec![0xA5; size.bytes()]).unwrap();
            let d = Counters::snapshot() - before;
            assert_eq!((d.fences, d.lines_flushed), (1, lines), "{size}");
        }
    }

    /// Tears an update by hand: any subset of the new blocks reaching the
    /// medium recovers to the old value, repeatedly, and further updates work.
    #[test]
    fn recovery_rolls_back_every_torn_subset_and_is_idempotent() {
        let p = pool();
        let r = p.data().sub(0, 4096).unwrap();
        let off = super::super::CELLS_OFF;
        let old_v: Vec<u8> = (0..16).map(|i| 0xF0 ^ i as u8).collect();
        let new_v: Vec<u8> = (0..16).map(|i| 0x0F ^ (i * 3) as u8).collect();
        for pre in 0..4 {
            // `pre` earlier updates so the torn update wraps the version.
            let mut a = FamCells::format(r.clone(), ValueSize::B16, 2).unwrap();
            for k in 0..pre {
                a.update(0, &[k as u8; 16]).unwrap();
            }
            a.update(0, &old_v).unwrap();
            let old_blocks = r.read_vec(off, 40);
            a.update(0, &new_v).unwrap();
            let new_blocks = r.read_vec(off, 40);
            for subset in 0u32..32 {
                let mut img = old_blocks.clone();
                for b in 0..5 {
                    if subset & (1 << b) != 0 {
                        img[8 * b..8 * b + 8].copy_from_slice(&new_blocks[8 * b..8 * b + 8]);
                    }
                }
                r.write(off, &img);
                let (c, rec) = FamCells::recover(r.clone()).unwrap();
                let want = if subset == 31 { &new_v } else { &old_v };
                let torn = subset != 0 && subset != 31;
                assert_eq!(rec.cells_repaired, torn as usize, "subset {subset:05b}");
                let mut out = [0u8; 16];
                c.read(0, &mut out).unwrap();
                assert_eq!(&out[..], &want[..], "pre {pre} subset {subset:05b}");
                assert!(c.is_consistent(0).unwrap());
                let again = FamCells::recover(r.clone()).unwrap().1;
                assert_eq!(again.cells_repaired, 0, "second recovery repairs nothing");
            }
        }
        // Versions two apart are corruption, not a torn update.
        let mut a = FamCells::format(r.clone(), ValueSize::B16, 2).unwrap();
        a.update(1, &[1u8; 16]).unwrap();
        r.store_u64(off + 64 + 16, (3u64 << 62).to_le());
        assert!(matches!(
            FamCells::recover(r.clone()),
            Err(CellError::Corrupt { index: 1, .. })
        ));
    }

    #[test]
    fn avx2_is_refused_without_the_cpu_feature() {
        let p = pool();
        let mut a = FamCells::format(p.data().sub(0, 4096).unwrap(), ValueSize::B16, 2).unwrap();
        assert_eq!(a.encoder(), FamEncoder::best());
        a.set_encoder(FamEncoder::Scalar).unwrap();
        let r = a.set_encoder(FamEncoder::Avx2);
        assert_eq!(r.is_ok(), FamEncoder::Avx2.is_available());
    }
}
