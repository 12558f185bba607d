//! Header [P0 §3.3.1], the `libpmemlog` scheme: the entry, a barrier, then
//! the log's end position in a size slot of the log header, and a second
//! barrier. With dancing slots, consecutive appends store to different lines
//! [P0 §3.3.2].

use super::format::SIZE_SLOTS_OFF;
use super::{ENTRY_HEADER, Fault, Log, LogError, Result};
use ferrite_pmem::CACHE_LINE;

impl Log {
    fn size_slot_off(&self, i: u32) -> usize {
        SIZE_SLOTS_OFF + i as usize * CACHE_LINE
    }

    /// Stores `end` in the next size slot and persists it.
    fn header_publish(&mut self, end: u64) {
        let off = self.size_slot_off(self.dance);
        self.dance = (self.dance + 1) % self.geo.slots;
        self.region.store_u64(off, end);
        self.region.persist(off, 8);
    }

    /// Writes a batch (space already checked); returns the new tail.
    pub(super) fn header_batch(&mut self, records: &[&[u8]]) -> u64 {
        let publish_first = self.faulty(Fault::HeaderPublishFirst);
        let (mut p, mut lsn) = (self.phys(self.tail), self.next);
        let mut pos = self.tail;
        for r in records {
            let len = r.len() as u32;
            let h = Self::entry_header(lsn, len, self.header_check(lsn, len));
            self.put_at(p, &h);
            if !r.is_empty() {
                self.put_at(self.wrap_add(p, ENTRY_HEADER as usize), r);
            }
            if !publish_first {
                self.flush_at(p, ENTRY_HEADER as usize + r.len());
            }
            let ext = self.entry_extent(r.len());
            p = self.wrap_add(p, ext as usize);
            pos += ext;
            lsn += 1;
        }
        if publish_first {
            // The planted bug: the size is durable before the entries are.
            self.header_publish(pos);
            self.flush_span(self.tail, (pos - self.tail) as usize);
            self.region.fence();
        } else {
            // Barrier 1 makes the entries durable; only then may the size
            // slot claim them.
            self.region.fence();
            self.header_publish(pos);
        }
        pos
    }

    /// The log ends at the largest size slot; every entry in `[head, end)`
    /// was durable before that slot was stored, so any mismatch there is
    /// corruption, not a crash.
    pub(super) fn header_recover(&mut self) -> Result<()> {
        let (mut end, mut newest) = (0u64, 0u32);
        for i in 0..self.geo.slots {
            let v = self.region.load_u64(self.size_slot_off(i));
            if v > end {
                (end, newest) = (v, i);
            }
        }
        let head = self.head.pos;
        if end < head || end - head > self.geo.cap {
            return Err(LogError::Corrupt(format!(
                "size slot says the log ends at {end}, head is at {head}, capacity {}",
                self.geo.cap
            )));
        }
        let (mut pos, mut lsn) = (head, self.head.lsn);
        let max = self.max_record_len();
        while pos < end {
            let bad = |what: &str| {
                Err(LogError::Corrupt(format!(
                    "entry {lsn} at position {pos}: {what} (log ends at {end})"
                )))
            };
            if end - pos < ENTRY_HEADER {
                return bad("header cut short");
            }
            if self.word(pos) != lsn {
                return bad("wrong LSN");
            }
            let w1 = self.word(pos + 8);
            let (len, check) = (w1 as u32, (w1 >> 32) as u32);
            if len as usize > max || check != self.header_check(lsn, len) {
                return bad("bad header check");
            }
            let ext = self.entry_extent(len as usize);
            if ext > end - pos {
                return bad("entry runs past the end");
            }
            pos += ext;
            lsn += 1;
        }
        self.tail = end;
        self.next = lsn;
        self.dance = (newest + 1) % self.geo.slots;
        Ok(())
    }
}
