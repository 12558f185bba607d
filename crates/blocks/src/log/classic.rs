//! Classic [P0 §3.3.1]: header and payload, a barrier, then a footer holding
//! the LSN, and a second barrier. The footer is the commit mark: it is stored
//! only after the barrier made everything it vouches for durable.

use super::{ENTRY_HEADER, Fault, Log, align_line, align8};

impl Log {
    /// Position of the footer of a `len`-byte record whose entry starts at
    /// `pos`: right after the payload (packed) or alone at the start of the
    /// next line (padded), so the second barrier flushes a line the first one
    /// did not.
    fn classic_footer_pos(&self, pos: u64, len: usize) -> u64 {
        let end = pos + ENTRY_HEADER + len as u64;
        if self.variant.padded() {
            align_line(end)
        } else {
            pos + ENTRY_HEADER + align8(len as u64)
        }
    }

    /// Writes a batch (space already checked); returns the new tail.
    pub(super) fn classic_batch(&mut self, records: &[&[u8]]) -> u64 {
        let start = self.phys(self.tail);
        let (mut p, mut lsn, mut end) = (start, self.next, self.tail);
        for r in records {
            let len = r.len() as u32;
            let h = Self::entry_header(lsn, len, self.header_check(lsn, len));
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
        // Barrier 1: without it a footer could reach the medium before the
        // payload it vouches for [P0 §3.3.1].
        if !self.faulty(Fault::ClassicNoFirstFence) {
            self.region.fence();
        }
        let (mut p, mut lsn) = (start, self.next);
        for r in records {
            // The footer's offset from the entry start does not depend on
            // the lap, so it is computed on data-area offsets too.
            let f = self.wrap_add(p, self.classic_footer_pos(0, r.len()) as usize);
            self.region
                .store_u64(self.geo.data_off + f, lsn ^ self.nonce);
            self.flush_at(f, 8);
            p = self.wrap_add(p, self.entry_extent(r.len()) as usize);
            lsn += 1;
        }
        self.region.fence();
        end
    }

    /// Valid when header (LSN, check) and footer both match `lsn`.
    pub(super) fn classic_probe(&self, pos: u64, lsn: u64, limit: u64) -> Option<u64> {
        if limit - pos < ENTRY_HEADER + 8 || self.word(pos) != lsn {
            return None;
        }
        let w1 = self.word(pos + 8);
        let (len, check) = (w1 as u32, (w1 >> 32) as u32);
        if len as usize > self.max_record_len() || check != self.header_check(lsn, len) {
            return None;
        }
        let ext = self.entry_extent(len as usize);
        if ext > limit - pos {
            return None;
        }
        let f = self.classic_footer_pos(pos, len as usize);
        (self.word(f) == lsn ^ self.nonce).then_some(ext)
    }
}
