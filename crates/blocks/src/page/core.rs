//! The two write protocols, as sequences of stores, flushes and fences on
//! the region — nothing else (no locks, no page map). [`super::PageStore`]
//! calls them under its locks; calibration calls them on scratch slots
//! before the store exists.

use super::Fault;
use super::dirty::DirtyLines;
use super::format::{self, Geometry};
use ferrite_pmem::{CACHE_LINE, Region};

/// Where a write goes: version `pvn` of page `pid`, in slot `slot`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    pub slot: u32,
    pub pid: u32,
    pub pvn: u64,
}

/// A store's region, shape and nonce.
#[derive(Debug)]
pub(crate) struct Core {
    pub region: Region,
    pub geo: Geometry,
    pub nonce: u64,
    #[cfg(any(test, feature = "checks"))]
    pub fault: Fault,
}

impl Core {
    pub fn new(region: Region, geo: Geometry, nonce: u64) -> Core {
        Core {
            region,
            geo,
            nonce,
            #[cfg(any(test, feature = "checks"))]
            fault: Fault::None,
        }
    }

    /// True when the planted bug `f` is active (always false in production
    /// builds, where the check compiles away).
    #[inline(always)]
    pub fn faulty(&self, f: Fault) -> bool {
        #[cfg(any(test, feature = "checks"))]
        {
            self.fault == f
        }
        #[cfg(not(any(test, feature = "checks")))]
        {
            let _ = f;
            false
        }
    }

    /// Copy-on-write of the whole page `data` into the free slot `t.slot`
    /// as version `t.pvn` of page `t.pid` [P0 §3.2.2, Listing 1 left, Fig. 6].
    ///
    /// 1. the payload, non-temporally, and header word 0 (`pid | crc`), then
    ///    a **fence**: the payload is durable, and `pid` is ordered before
    /// 2. header word 1 (`pvn`) in the same line, flushed, then a **fence**:
    ///    the new version is durable when this returns.
    ///
    /// The slot's previous header names a superseded version `z` of some
    /// page `Z`: `z` is below `Z`'s newest, so recovery ignores the slot
    /// whatever its payload holds, and it is not invalidated first (the
    /// barrier the `pvn` saves, Fig. 6). The header line may be written
    /// back holding the old header (stale), the new `pid` word with the old
    /// `pvn` word (Fig. 6 state 3), or the new header (state 4); under
    /// 8-byte tearing also the old `pid` word with the new `pvn` word. The
    /// crc covers `pid` and `pvn`, and versions come from one store-wide
    /// counter, so `z ≠ pvn` and both mixed states are invalid: the header
    /// is valid only once word 1 is, and word 1 is stored after the fence
    /// that makes the payload durable. That is why the `pid` word may go
    /// before the payload's barrier and share it — Listing 1's first
    /// persist and its `pid`→`pvn` sfence become one fence (with per-page
    /// version counters `z = pvn` can happen, state 3 is then a valid
    /// header, and the paper's separate barrier would be needed).
    pub fn cow_write(&self, t: Target, data: &[u8]) {
        let r = &self.region;
        let h = self.geo.header_off(t.slot);
        let (w0, w1) = format::header_words(self.nonce, t.slot, t.pid, t.pvn);
        r.write_nt(self.geo.page_off(t.slot), data);
        r.store_u64(h, w0);
        if !self.faulty(Fault::CowPublishEarly) {
            r.fence();
        }
        r.store_u64(h + 8, w1);
        r.flush(h, 16);
        r.fence();
    }

    /// Micro-log write of the `dirty` lines of `data` (the whole DRAM page)
    /// into page `t.pid`'s live slot `t.slot`, producing version `t.pvn`
    /// (above its current one), through lane `lane` whose staging buffer
    /// is `buf` [P0 §3.2.3].
    ///
    /// 1. the entry (fixed part, line index, the lines; crc32c over all of
    ///    it) into the lane, non-temporally, then a **fence**: the entry is
    ///    valid and durable;
    /// 2. the lines in place, non-temporally, and the slot header rewritten
    ///    to `(pid, pvn)`, flushed, then a **fence**.
    ///
    /// Recovery replays the newest valid entry of a page whose pvn is at
    /// least the page's newest valid header, so any mix of old and new lines
    /// and header left by a crash in step 2 is completed. The paper's first
    /// two barriers (invalidate the log, then validate it) are not needed:
    /// a torn entry fails its crc, and the entry a new one overwrites
    /// belongs to a write that already returned.
    pub fn ulog_write(
        &self,
        (lane, buf): (u32, &mut Vec<u8>),
        t: Target,
        data: &[u8],
        dirty: &DirtyLines,
    ) {
        let r = &self.region;
        let n = format::encode_entry(buf, self.nonce, t.pid, t.pvn, t.slot, data, dirty);
        r.write_nt(self.geo.lane_off(lane), &buf[..n]);
        if !self.faulty(Fault::MicroLogApplyEarly) {
            r.fence();
        }
        let page = self.geo.page_off(t.slot);
        for (first, count) in dirty.runs() {
            let (s, e) = (first * CACHE_LINE, (first + count) * CACHE_LINE);
            r.write_nt(page + s, &data[s..e]);
        }
        self.put_header(t.slot, t.pid, t.pvn);
        r.fence();
    }

    /// Stores and flushes slot `slot`'s header naming `(pid, pvn)`, no fence.
    pub fn put_header(&self, slot: u32, pid: u32, pvn: u64) {
        let h = self.geo.header_off(slot);
        let (w0, w1) = format::header_words(self.nonce, slot, pid, pvn);
        self.region.store_u64(h, w0);
        self.region.store_u64(h + 8, w1);
        self.region.flush(h, 16);
    }

    /// The `(pid, pvn)` slot `slot`'s header names, if valid.
    pub fn header(&self, slot: u32) -> Option<(u32, u64)> {
        let h = self.geo.header_off(slot);
        let (w0, w1) = (self.region.load_u64(h), self.region.load_u64(h + 8));
        format::decode_header(self.nonce, slot, w0, w1, self.geo.pages)
    }

    /// The valid entry in lane `lane`, if any.
    pub fn entry(&self, lane: u32) -> Option<format::Entry> {
        let base = self.geo.lane_off(lane);
        format::decode_entry(&self.geo, self.nonce, |off, dst| {
            self.region.read(base + off, dst)
        })
    }
}
