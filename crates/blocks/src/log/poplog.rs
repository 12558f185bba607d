//! PopLog [P0 §3.3.1]: the entry and the popcount of its header and payload
//! are written under one barrier into a zero-filled area. A line (or word)
//! that did not become durable still reads zero, so it can only lower the
//! count: a matching count proves every bit arrived.

use super::{ENTRY_HEADER, Fault, LINE, Log};
use ferrite_pmem::CACHE_LINE;

/// Set bits in `bytes`, eight bytes at a time.
#[inline]
pub(super) fn popcount(bytes: &[u8]) -> u32 {
    let mut chunks = bytes.chunks_exact(8);
    let mut n = 0u32;
    for c in &mut chunks {
        n += u64::from_le_bytes(c.try_into().expect("8 bytes")).count_ones();
    }
    n + chunks
        .remainder()
        .iter()
        .map(|b| b.count_ones())
        .sum::<u32>()
}

/// The count stored in an entry: LSN, length and payload bits.
#[inline]
fn entry_popcount(lsn: u64, len: u32, payload: &[u8]) -> u32 {
    lsn.count_ones() + len.count_ones() + popcount(payload)
}

impl Log {
    /// Writes a batch (space already checked) under one barrier; returns the
    /// new tail. Padding stays untouched: it is already zero.
    pub(super) fn poplog_batch(&mut self, records: &[&[u8]]) -> u64 {
        let (mut p, mut lsn) = (self.phys(self.tail), self.next);
        let mut end = self.tail;
        for r in records {
            let len = r.len() as u32;
            let h = Self::entry_header(lsn, len, entry_popcount(lsn, len, r));
            self.put_at(p, &h);
            if !r.is_empty() {
                self.put_at(self.wrap_add(p, ENTRY_HEADER as usize), r);
            }
            self.flush_at(p, ENTRY_HEADER as usize + r.len());
            let ext = self.entry_extent(r.len());
            p = self.wrap_add(p, ext as usize);
            end += ext;
            lsn += 1;
        }
        self.region.fence();
        end
    }

    /// Staged: builds the lines of the batch in DRAM, starting with the
    /// cached tail line (the previous entry's bytes, rewritten unchanged) and
    /// ending with zeros, and writes them with non-temporal stores, so no
    /// line is read back from the medium or flushed twice [P0 §3.3.2].
    pub(super) fn poplog_staged_batch(&mut self, records: &[&[u8]]) -> u64 {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let start = self.tail;
        let line0 = start / LINE * LINE;
        buf.extend_from_slice(&self.tail_line[..(start - line0) as usize]);
        for (lsn, r) in (self.next..).zip(records) {
            let len = r.len() as u32;
            buf.extend_from_slice(&Self::entry_header(lsn, len, entry_popcount(lsn, len, r)));
            buf.extend_from_slice(r);
            buf.resize(buf.len().next_multiple_of(8), 0);
        }
        let end = line0 + buf.len() as u64;
        buf.resize(buf.len().next_multiple_of(CACHE_LINE), 0);
        self.put_nt(line0, &buf);
        self.region.fence();
        let last = buf.len() - CACHE_LINE;
        self.tail_line.copy_from_slice(&buf[last..]);
        self.buf = buf;
        end
    }

    /// Valid when the header names `lsn` and the popcount matches.
    pub(super) fn poplog_probe(
        &self,
        pos: u64,
        lsn: u64,
        limit: u64,
        scratch: &mut Vec<u8>,
    ) -> Option<u64> {
        if limit - pos < ENTRY_HEADER || self.word(pos) != lsn {
            return None;
        }
        let w1 = self.word(pos + 8);
        let (len, pop) = (w1 as u32, (w1 >> 32) as u32);
        if len as usize > self.max_record_len() {
            return None;
        }
        let ext = self.entry_extent(len as usize);
        if ext > limit - pos {
            return None;
        }
        if !self.faulty(Fault::PopLogNoPopcountCheck) {
            scratch.clear();
            scratch.resize(len as usize, 0);
            self.get(pos + ENTRY_HEADER, scratch);
            if entry_popcount(lsn, len, scratch) != pop {
                return None;
            }
        }
        Some(ext)
    }

    /// Restores the zero-fill invariant of the free space: zeroes every
    /// non-zero word a crashed append (or an interrupted truncate) left
    /// there. Reads the whole free space; writes only what it must.
    pub(super) fn poplog_scrub(&mut self) {
        if self.faulty(Fault::PopLogNoScrub) {
            return;
        }
        let limit = self.head.pos + self.geo.cap;
        let mut wrote = false;
        let mut chunk = [0u8; 4096];
        let mut pos = self.tail;
        while pos < limit {
            let n = ((limit - pos) as usize).min(chunk.len());
            self.get(pos, &mut chunk[..n]);
            for (i, w) in chunk[..n].chunks_exact(8).enumerate() {
                if w != [0u8; 8] {
                    let at = pos + 8 * i as u64;
                    self.store_word(at, 0);
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
    fn popcount_counts_tail_bytes() {
        assert_eq!(popcount(&[]), 0);
        assert_eq!(popcount(&[0xff; 9]), 72);
        assert_eq!(popcount(&[1, 3, 7]), 6);
    }
}
