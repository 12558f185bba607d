//! RAWL [P0 §3.3.1, after Mnemosyne]: every 8-byte word carries 63 bits of
//! the entry and a validity bit, and 8-byte stores are failure atomic, so one
//! barrier suffices: an entry is valid when all its words carry the valid
//! bit. The bit's meaning flips each lap, so reused space needs no zeroing.

use super::{Fault, Log};

const MASK63: u64 = (1 << 63) - 1;
const LSN_MASK: u64 = 0x7fff_ffff;

/// Words needed for `len` payload bytes at 63 bits per word.
pub(super) fn payload_words(len: u64) -> u64 {
    (len * 8).div_ceil(63)
}

/// The valid bit for positions in `[start, start + capacity)`: the range
/// crosses at most one lap boundary, so one division serves all of it.
#[derive(Clone, Copy)]
pub(super) struct Polarity {
    boundary: u64,
    first: u64,
    fixed: bool,
}

impl Polarity {
    #[inline]
    fn bit(&self, pos: u64) -> u64 {
        if self.fixed {
            1
        } else if pos < self.boundary {
            self.first
        } else {
            self.first ^ 1
        }
    }
}

impl Log {
    pub(super) fn rawl_polarity(&self, start: u64) -> Polarity {
        let lap = start / self.geo.cap;
        Polarity {
            boundary: (lap + 1) * self.geo.cap,
            // Even laps use 1: the zero-filled area starts out invalid.
            first: 1 ^ (lap & 1),
            fixed: self.faulty(Fault::RawlNoFlip),
        }
    }

    /// The valid bit of the word at `pos`.
    pub(super) fn rawl_valid_bit(&self, pos: u64) -> u64 {
        self.rawl_polarity(pos).bit(pos)
    }

    /// Appends the words of one entry (extent `ext` bytes at `pos`) to `buf`.
    fn rawl_encode(pos: u64, lsn: u64, rec: &[u8], ext: u64, pol: Polarity, buf: &mut Vec<u8>) {
        // The word position follows from how many bytes `buf` gained.
        let base = buf.len() as u64;
        let push = |data: u64, buf: &mut Vec<u8>| {
            let at = pos + buf.len() as u64 - base;
            buf.extend_from_slice(&(data | pol.bit(at) << 63).to_le_bytes());
        };
        push((lsn & LSN_MASK) << 32 | rec.len() as u64, buf);
        // The payload as a bit stream, 63 bits per word: a u128 accumulator
        // holds fewer than 63 pending bits plus one 64-bit load.
        let (mut acc, mut nbits) = (0u128, 0u32);
        let mut chunks = rec.chunks_exact(8);
        for c in &mut chunks {
            acc |= (u64::from_le_bytes(c.try_into().expect("8 bytes")) as u128) << nbits;
            nbits += 64;
            while nbits >= 63 {
                push(acc as u64 & MASK63, buf);
                acc >>= 63;
                nbits -= 63;
            }
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            acc |= (u64::from_le_bytes(b) as u128) << nbits;
            nbits += 8 * rest.len() as u32;
            while nbits >= 63 {
                push(acc as u64 & MASK63, buf);
                acc >>= 63;
                nbits -= 63;
            }
        }
        if nbits > 0 {
            push(acc as u64 & MASK63, buf);
        }
        // Padded layout: fillers to the line end, with the valid bit, so every
        // word of the lap is written and next lap sees them as stale.
        while (buf.len() as u64) < base + ext {
            push(0, buf);
        }
    }

    /// Writes a batch (space already checked) under one barrier; returns the new tail.
    pub(super) fn rawl_batch(&mut self, records: &[&[u8]]) -> u64 {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let start = self.tail;
        let pol = self.rawl_polarity(start);
        let (mut pos, mut lsn) = (start, self.next);
        for r in records {
            let ext = self.entry_extent(r.len());
            Self::rawl_encode(pos, lsn, r, ext, pol, &mut buf);
            pos += ext;
            lsn += 1;
        }
        debug_assert_eq!(buf.len() as u64, pos - start);
        self.put(start, &buf);
        self.flush_span(start, buf.len());
        self.region.fence();
        self.buf = buf;
        pos
    }

    /// Valid when the header word names `lsn` and every word of the entry,
    /// fillers included, carries the valid bit of its lap. Fillers count: a
    /// filler that kept the previous lap's bit would look valid next lap.
    pub(super) fn rawl_probe(&self, pos: u64, lsn: u64, limit: u64) -> Option<u64> {
        if limit - pos < 8 {
            return None;
        }
        let check = !self.faulty(Fault::RawlNoValidityCheck);
        let pol = self.rawl_polarity(pos);
        let w0 = self.word(pos);
        if (check && w0 >> 63 != pol.bit(pos)) || (w0 >> 32) & LSN_MASK != lsn & LSN_MASK {
            return None;
        }
        let len = (w0 & 0xffff_ffff) as usize;
        if len > self.max_record_len() {
            return None;
        }
        let ext = self.entry_extent(len);
        if ext > limit - pos {
            return None;
        }
        if check {
            let mut p = pos + 8;
            while p < pos + ext {
                if self.word(p) >> 63 != pol.bit(p) {
                    return None;
                }
                p += 8;
            }
        }
        Some(ext)
    }

    /// Decodes the `len`-byte payload of the entry at `pos` into `out`.
    pub(super) fn rawl_read_payload(&self, pos: u64, len: usize, out: &mut Vec<u8>) {
        out.reserve(len);
        let (mut acc, mut nbits) = (0u128, 0u32);
        let mut p = pos + 8;
        while out.len() < len {
            acc |= ((self.word(p) & MASK63) as u128) << nbits;
            nbits += 63;
            p += 8;
            while nbits >= 8 && out.len() < len {
                out.push(acc as u8);
                acc >>= 8;
                nbits -= 8;
            }
        }
    }

    /// Rewrites, with the invalid bit, every word of the free space that
    /// carries its lap's valid bit: only a crashed append can have left one
    /// there, and a later append at the same place could be completed by it.
    pub(super) fn rawl_scrub(&mut self) {
        if self.faulty(Fault::RawlNoScrub) {
            return;
        }
        let limit = self.head.pos + self.geo.cap;
        let pol = self.rawl_polarity(self.tail);
        let mut wrote = false;
        let mut chunk = [0u8; 4096];
        let mut pos = self.tail;
        while pos < limit {
            let n = ((limit - pos) as usize).min(chunk.len());
            self.get(pos, &mut chunk[..n]);
            for (i, w) in chunk[..n].chunks_exact(8).enumerate() {
                let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
                let at = pos + 8 * i as u64;
                if w >> 63 == pol.bit(at) {
                    self.store_word(at, w ^ 1 << 63);
                    self.flush_span(at, 8);
                    wrote = true;
                }
            }
            pos += n as u64;
        }
        if wrote {
            self.region.fence();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_counts() {
        assert_eq!(payload_words(0), 0);
        assert_eq!(payload_words(1), 1);
        assert_eq!(payload_words(7), 1);
        assert_eq!(payload_words(8), 2); // 64 bits need two 63-bit words
        assert_eq!(payload_words(63), 8);
        assert_eq!(payload_words(64), 9);
    }
}
