//! The Ferrite heap's metadata on media: superblock, geometry and page
//! headers. The byte-by-byte layout is documented on [`crate::heap`]; this
//! module encodes, decodes and validates it.

use crate::class::{CLASSES, NUM_CLASSES};
use crate::error::{AllocError, Result};
use crate::lane::MIN_LANE_BYTES;
use ferrite_pmem::{CACHE_LINE, PAGE};

/// `FERRHEAP`: identifies a heap superblock.
pub(crate) const MAGIC: [u8; 8] = *b"FERRHEAP";
/// On-media format version this build writes and reads.
pub(crate) const VERSION: u16 = 1;
/// Region offset of the root line (the root word is its first 8 bytes).
pub(crate) const ROOT_OFF: usize = CACHE_LINE;
/// Region offset of lane 0.
pub(crate) const LANES_OFF: usize = 2 * CACHE_LINE;
/// Bytes of one page descriptor.
pub(crate) const DESC: usize = CACHE_LINE;
/// Offset of share word 0 inside a descriptor; four share words follow.
pub(crate) const SHARE_OFF: usize = 8;
/// Share words per descriptor (256 bits).
pub(crate) const SHARE_WORDS: usize = 4;
/// Most pages a heap can have (page numbers are 32-bit in the volatile state).
pub(crate) const MAX_PAGES: u64 = u32::MAX as u64;
/// Most pages one extent can span (24-bit field).
pub(crate) const MAX_EXTENT_PAGES: u32 = (1 << 24) - 1;
/// Fewest pages a heap needs: one run of the smallest classes.
pub(crate) const MIN_PAGES: u64 = 4;

/// Where everything lives in the heap region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub lanes: u16,
    pub lane_bytes: u32,
    pub pages: u64,
    /// Region offset of the descriptor of page 0.
    pub desc_off: usize,
    /// Region offset of page 0 (a multiple of 4096).
    pub data_off: usize,
    pub region_len: usize,
}

impl Geometry {
    /// The largest heap with `lanes` lanes of `lane_bytes` that fits in
    /// `region_len` bytes.
    pub fn compute(region_len: usize, lanes: u16, lane_bytes: u32) -> Result<Geometry> {
        if lanes == 0 || lanes > 1024 {
            return Err(AllocError::BadOption(format!(
                "lanes must be 1..=1024, not {lanes}"
            )));
        }
        if (lane_bytes as usize) < MIN_LANE_BYTES
            || !(lane_bytes as usize).is_multiple_of(CACHE_LINE)
            || lane_bytes > 1 << 20
        {
            return Err(AllocError::BadOption(format!(
                "lane_bytes must be a multiple of 64 in {MIN_LANE_BYTES}..=1048576, not {lane_bytes}"
            )));
        }
        let desc_off = LANES_OFF + lanes as usize * lane_bytes as usize;
        let fits = |n: u64| -> bool {
            let n = n as usize;
            (desc_off + n * DESC).next_multiple_of(PAGE) + n * PAGE <= region_len
        };
        let mut n = (region_len.saturating_sub(desc_off) / (PAGE + DESC)) as u64;
        while n > 0 && !fits(n) {
            n -= 1;
        }
        while fits(n + 1) {
            n += 1;
        }
        n = n.min(MAX_PAGES);
        if n < MIN_PAGES {
            let min = (desc_off + MIN_PAGES as usize * DESC).next_multiple_of(PAGE)
                + MIN_PAGES as usize * PAGE;
            return Err(AllocError::RegionTooSmall {
                len: region_len,
                min,
            });
        }
        Ok(Geometry {
            lanes,
            lane_bytes,
            pages: n,
            desc_off,
            data_off: (desc_off + n as usize * DESC).next_multiple_of(PAGE),
            region_len,
        })
    }

    /// Region offset of page `p`'s descriptor.
    #[inline]
    pub fn desc(&self, p: u32) -> usize {
        self.desc_off + p as usize * DESC
    }
}

/// The decoded superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Superblock {
    pub geo: Geometry,
    pub nonce: u64,
}

impl Superblock {
    pub fn encode(&self) -> [u8; CACHE_LINE] {
        let g = &self.geo;
        let mut b = [0u8; CACHE_LINE];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..10].copy_from_slice(&VERSION.to_le_bytes());
        b[10..12].copy_from_slice(&g.lanes.to_le_bytes());
        b[12..16].copy_from_slice(&g.lane_bytes.to_le_bytes());
        b[16..24].copy_from_slice(&g.pages.to_le_bytes());
        b[24..32].copy_from_slice(&(g.desc_off as u64).to_le_bytes());
        b[32..40].copy_from_slice(&(g.data_off as u64).to_le_bytes());
        b[40..48].copy_from_slice(&(g.region_len as u64).to_le_bytes());
        b[48..56].copy_from_slice(&self.nonce.to_le_bytes());
        // 56..60: flags, none defined.
        let crc = crc32c::crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and validates a superblock read from a region of `region_len`
    /// bytes. Order: magic, version, checksum, flags, geometry.
    pub fn decode(b: &[u8], region_len: usize) -> Result<Superblock> {
        let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        if b[0..8] != MAGIC {
            return Err(AllocError::NotAHeap { what: "heap" });
        }
        let version = u16_at(8);
        if version != VERSION {
            return Err(AllocError::UnsupportedVersion {
                what: "heap",
                found: version,
                supported: VERSION,
            });
        }
        let stored = u32_at(60);
        let computed = crc32c::crc32c(&b[..60]);
        if stored != computed {
            return Err(AllocError::Checksum {
                what: "superblock".into(),
                stored,
                computed,
            });
        }
        let flags = u32_at(56);
        if flags != 0 {
            return Err(AllocError::Corrupt(format!(
                "unknown superblock flags {flags:#x}"
            )));
        }
        let recorded_len = u64_at(40);
        if recorded_len != region_len as u64 {
            return Err(AllocError::Corrupt(format!(
                "heap was created in a region of {recorded_len} bytes, opened in one of {region_len}"
            )));
        }
        let geo = Geometry::compute(region_len, u16_at(10), u32_at(12))
            .map_err(|e| AllocError::Corrupt(format!("superblock geometry: {e}")))?;
        if geo.pages != u64_at(16)
            || geo.desc_off as u64 != u64_at(24)
            || geo.data_off as u64 != u64_at(32)
        {
            return Err(AllocError::Corrupt(
                "superblock geometry does not match its lane settings".into(),
            ));
        }
        Ok(Superblock {
            geo,
            nonce: u64_at(48),
        })
    }
}

/// What the header word of a page descriptor says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PageHdr {
    /// Word 0: a free page, or a page inside a run or extent.
    Free,
    /// First page of a run of size class `class`.
    Run { class: u8 },
    /// First page of an extent of `pages` pages.
    Extent { pages: u32 },
}

const KIND_RUN: u64 = 1;
const KIND_EXTENT: u64 = 2;

fn page_crc(nonce: u64, page: u32, low: u32) -> u32 {
    let mut b = [0u8; 20];
    b[..8].copy_from_slice(&nonce.to_le_bytes());
    b[8..16].copy_from_slice(&u64::from(page).to_le_bytes());
    b[16..].copy_from_slice(&low.to_le_bytes());
    crc32c::crc32c(&b)
}

impl PageHdr {
    /// The 8-byte header word of page `page` (0 for [`PageHdr::Free`]).
    pub fn encode(&self, page: u32, nonce: u64) -> u64 {
        let low: u64 = match *self {
            PageHdr::Free => return 0,
            PageHdr::Run { class } => {
                KIND_RUN | (u64::from(class) << 2) | (u64::from(CLASSES[class as usize].pages) << 8)
            }
            PageHdr::Extent { pages } => KIND_EXTENT | (u64::from(pages) << 8),
        };
        low | (u64::from(page_crc(nonce, page, low as u32)) << 32)
    }

    /// Decodes and validates the header word of page `page`.
    pub fn decode(w: u64, page: u32, nonce: u64) -> Result<PageHdr> {
        if w == 0 {
            return Ok(PageHdr::Free);
        }
        let low = w as u32;
        let stored = (w >> 32) as u32;
        let computed = page_crc(nonce, page, low);
        if stored != computed {
            return Err(AllocError::Checksum {
                what: format!("page {page} header"),
                stored,
                computed,
            });
        }
        let kind = u64::from(low & 3);
        let class = (low >> 2) & 0x3f;
        let pages = low >> 8;
        match kind {
            KIND_RUN
                if (class as usize) < NUM_CLASSES && pages == CLASSES[class as usize].pages =>
            {
                Ok(PageHdr::Run { class: class as u8 })
            }
            KIND_EXTENT if class == 0 && pages >= 1 => Ok(PageHdr::Extent { pages }),
            _ => Err(AllocError::Corrupt(format!(
                "page {page} header {w:#018x} describes nothing valid"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_fits_and_is_maximal() {
        for len in [64 * 1024usize, 252 * 1024, 1 << 20, (64 << 20) + 12345] {
            let g = Geometry::compute(len, 4, 1024).unwrap();
            assert!(g.data_off + g.pages as usize * PAGE <= len);
            assert!(g.data_off.is_multiple_of(PAGE));
            assert!(g.desc_off + g.pages as usize * DESC <= g.data_off);
            let bigger = (g.desc_off + (g.pages as usize + 1) * DESC).next_multiple_of(PAGE)
                + (g.pages as usize + 1) * PAGE;
            assert!(bigger > len, "one more page would have fitted in {len}");
        }
        assert!(matches!(
            Geometry::compute(8192, 4, 1024),
            Err(AllocError::RegionTooSmall { .. })
        ));
        assert!(Geometry::compute(1 << 20, 0, 1024).is_err());
        assert!(Geometry::compute(1 << 20, 4, 100).is_err());
    }

    #[test]
    fn superblock_round_trips_and_rejects_damage() {
        let len = 1 << 20;
        let sb = Superblock {
            geo: Geometry::compute(len, 8, 2048).unwrap(),
            nonce: 42,
        };
        let b = sb.encode();
        assert_eq!(Superblock::decode(&b, len).unwrap(), sb);
        let mut bad = b;
        bad[0] ^= 1;
        assert!(matches!(
            Superblock::decode(&bad, len),
            Err(AllocError::NotAHeap { .. })
        ));
        let mut bad = b;
        bad[17] ^= 1;
        assert!(matches!(
            Superblock::decode(&bad, len),
            Err(AllocError::Checksum { .. })
        ));
        assert!(matches!(
            Superblock::decode(&b, len + 4096),
            Err(AllocError::Corrupt(_))
        ));
    }

    #[test]
    fn page_headers_round_trip_and_are_bound_to_their_page() {
        for h in [
            PageHdr::Run { class: 0 },
            PageHdr::Run { class: 63 },
            PageHdr::Extent { pages: 1 },
            PageHdr::Extent {
                pages: MAX_EXTENT_PAGES,
            },
        ] {
            let w = h.encode(77, 5);
            assert_eq!(PageHdr::decode(w, 77, 5).unwrap(), h);
            assert!(PageHdr::decode(w, 78, 5).is_err(), "moved to another page");
            assert!(PageHdr::decode(w, 77, 6).is_err(), "another heap");
            assert!(PageHdr::decode(w ^ (1 << 9), 77, 5).is_err(), "bit flip");
        }
        assert_eq!(PageHdr::decode(0, 3, 5).unwrap(), PageHdr::Free);
    }
}
