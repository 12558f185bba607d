//! The Ferrite heap's metadata on media: superblock, geometry and page
//! headers. The byte-by-byte layout is documented on [`crate::heap`]; this
//! module encodes, decodes and validates it.

use crate::class::{CLASSES, NUM_CLASSES};
use crate::error::{AllocError, Result};
use crate::lane::MIN_LANE_BYTES;
use ferrite_pmem::{CACHE_LINE, ChecksumMismatch, PAGE, SuperblockView, SuperblockWriter};

/// `FERRHEAP`: identifies a heap superblock.
pub(crate) const MAGIC: [u8; 8] = *b"FERRHEAP";
/// On-media format version this build writes (it reads 1 and 2).
pub(crate) const VERSION: u16 = 2;
/// Region offset of the root line (the root word is its first 8 bytes).
pub(crate) const ROOT_OFF: usize = CACHE_LINE;
/// Region offset of the word holding the pages in use (version 2): the
/// root line's second word.
pub(crate) const PAGES_NOW_OFF: usize = ROOT_OFF + 8;
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
/// Pages of the first zone of a heap too large for a single zone: 64 MiB
/// of pages behind 1 MiB of descriptors. Zone 1 is as large, and every
/// later zone twice the one before, so a heap's largest extent grows with
/// it (64 MiB at first; 2<sup>24</sup> pages at most), and so does the
/// descriptor block a new zone adds to the file (1/64 of its pages).
pub(crate) const ZONE_PAGES: u32 = 1 << 14;

/// Where everything lives in the heap region.
///
/// The pages are grouped in *zones*; each zone is a descriptor block (64
/// bytes per page of the zone) followed by the zone's pages. A heap that
/// fits in one zone has one, sized to it (its descriptors padded to 4 KiB,
/// then its pages, as version 1 laid them out). A larger one, a growable
/// heap's reservation above all, has zones of `z0 = zone_pages` pages,
/// `z0`, `2·z0`, `4·z0`, …: zone `k ≥ 1` starts at page `z0·2^(k-1)` and
/// at region offset `zone0 + first·(4096 + 64)`, as every zone before it
/// occupies exactly 4160 bytes per page. So the descriptors grow with the
/// pages instead of being set aside for the largest size up front, and
/// no zone is so small that it caps what one extent may hold for long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub version: u16,
    pub lanes: u16,
    pub lane_bytes: u32,
    /// Pages the region can hold (a growable heap uses a prefix of them,
    /// the page count in its `PAGES_NOW_OFF` word).
    pub pages: u64,
    /// Pages of zone 0 (of every page when the heap has one zone).
    pub zone_pages: u32,
    /// Region offset of zone 0 (its descriptor block).
    pub zone0: usize,
    /// Bytes of zone 0's descriptor block when the heap has one zone
    /// (version 2: a multiple of 4096); with several, zone `k`'s block is
    /// exactly 64 bytes per page of it.
    pub zone_desc: usize,
    pub region_len: usize,
}

/// What a region offset of a heap holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spot {
    /// Superblock, root line, lanes (or a version-1 heap's padding).
    Meta,
    /// Byte `at` of page `page`'s descriptor.
    Desc { page: u32, at: usize },
    /// Byte `at` of page `page`.
    Data { page: u32, at: usize },
    /// Past the last page the region holds.
    Beyond,
}

fn lanes_end(lanes: u16, lane_bytes: u32) -> Result<usize> {
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
    Ok(LANES_OFF + lanes as usize * lane_bytes as usize)
}

/// The most pages `n` with a descriptor block of `n` lines (rounded up to
/// a page when `align`) and the pages themselves within `avail` bytes.
fn one_zone_pages(avail: usize, align: bool) -> u64 {
    let fits = |n: u64| -> bool {
        let n = n as usize;
        let d = n * DESC;
        (if align { d.next_multiple_of(PAGE) } else { d }) + n * PAGE <= avail
    };
    let mut n = (avail / (PAGE + DESC)) as u64;
    while n > 0 && !fits(n) {
        n -= 1;
    }
    while fits(n + 1) {
        n += 1;
    }
    n
}

/// Bytes a page takes in a heap of several zones: itself and its descriptor.
const PER_PAGE: usize = PAGE + DESC;

impl Geometry {
    /// The largest heap with `lanes` lanes of `lane_bytes` that fits in
    /// `region_len` bytes (the current format): in zones when `zoned` (a
    /// heap on a growable medium, whose region is a reservation it fills
    /// as it grows), else in one zone however large (its pages contiguous,
    /// as a transaction layer that bounds its writes by one data range
    /// needs).
    pub fn compute(
        region_len: usize,
        lanes: u16,
        lane_bytes: u32,
        zoned: bool,
    ) -> Result<Geometry> {
        let zone0 = lanes_end(lanes, lane_bytes)?.next_multiple_of(PAGE);
        let avail = region_len.saturating_sub(zone0);
        let one = one_zone_pages(avail, true).min(MAX_PAGES);
        let (zone_pages, pages) = if !zoned || one <= u64::from(ZONE_PAGES) {
            (one as u32, one)
        } else {
            // Whole zones while they fit, then what fits of the next one
            // behind its whole descriptor block.
            let z0 = u64::from(ZONE_PAGES);
            let (mut first, mut size) = (0u64, z0);
            loop {
                let base = first as usize * PER_PAGE;
                let end = base + size as usize * PER_PAGE;
                if end > avail {
                    let room = avail.saturating_sub(base + size as usize * DESC);
                    break (ZONE_PAGES, first + (room / PAGE) as u64);
                }
                first += size;
                size = first;
            }
        };
        let pages = pages.min(MAX_PAGES);
        if pages < MIN_PAGES {
            let min = zone0 + PAGE + MIN_PAGES as usize * PAGE;
            return Err(AllocError::RegionTooSmall {
                len: region_len,
                min,
            });
        }
        Ok(Geometry {
            version: VERSION,
            lanes,
            lane_bytes,
            pages,
            zone_pages: zone_pages.max(1),
            zone0,
            zone_desc: (zone_pages as usize * DESC).next_multiple_of(PAGE),
            region_len,
        })
    }

    /// The geometry version 1 computed: one zone right after the lanes,
    /// descriptors unaligned, pages from the next 4 KiB boundary.
    fn compute_v1(region_len: usize, lanes: u16, lane_bytes: u32) -> Result<Geometry> {
        let desc_off = lanes_end(lanes, lane_bytes)?;
        let avail = region_len.saturating_sub(desc_off);
        // Version 1 rounded `desc_off + n·64` up to a page, not `n·64`.
        let fits = |n: u64| -> bool {
            let n = n as usize;
            (desc_off + n * DESC).next_multiple_of(PAGE) + n * PAGE <= region_len
        };
        let mut n = one_zone_pages(avail, false);
        while n > 0 && !fits(n) {
            n -= 1;
        }
        let n = n.min(MAX_PAGES);
        if n < MIN_PAGES {
            return Err(AllocError::RegionTooSmall {
                len: region_len,
                min: (desc_off + MIN_PAGES as usize * DESC).next_multiple_of(PAGE)
                    + MIN_PAGES as usize * PAGE,
            });
        }
        let data_off = (desc_off + n as usize * DESC).next_multiple_of(PAGE);
        Ok(Geometry {
            version: 1,
            lanes,
            lane_bytes,
            pages: n,
            zone_pages: n as u32,
            zone0: desc_off,
            zone_desc: data_off - desc_off,
            region_len,
        })
    }

    /// True when the heap has more than one zone.
    #[inline]
    fn zoned(&self) -> bool {
        self.pages > u64::from(self.zone_pages)
    }

    /// `(first page, pages)` of the zone holding page-equivalent index `q`
    /// (a page number, or a region offset's `(rel - zone0) / 4160`).
    #[inline]
    fn zone_at(&self, q: u64) -> (u64, u64) {
        let z0 = u64::from(self.zone_pages);
        if q < z0 {
            return (0, z0);
        }
        // Zone k >= 1 covers z0·2^(k-1) .. z0·2^k.
        let first = z0 << (63 - (q / z0).leading_zeros());
        (first, first)
    }

    /// `(first page, pages)` of page `p`'s zone.
    #[inline]
    pub fn zone_of(&self, p: u32) -> (u32, u32) {
        let (first, size) = self.zone_at(u64::from(p));
        (first as u32, size.min(u64::from(u32::MAX)) as u32)
    }

    /// Region offset and descriptor-block bytes of the zone starting at `first`.
    #[inline]
    fn zone_base(&self, first: u64, size: u64) -> (usize, usize) {
        if self.zoned() {
            (self.zone0 + first as usize * PER_PAGE, size as usize * DESC)
        } else {
            (self.zone0, self.zone_desc)
        }
    }

    /// Region offset of page `p`'s descriptor.
    #[inline]
    pub fn desc(&self, p: u32) -> usize {
        let (first, size) = self.zone_at(u64::from(p));
        self.zone_base(first, size).0 + (u64::from(p) - first) as usize * DESC
    }

    /// Region offset of page `p`.
    #[inline]
    pub fn page_off(&self, p: u32) -> usize {
        let (first, size) = self.zone_at(u64::from(p));
        let (base, desc) = self.zone_base(first, size);
        base + desc + (u64::from(p) - first) as usize * PAGE
    }

    /// Pages in the largest zone this region holds (so the most one run or
    /// extent can span).
    pub fn largest_zone(&self) -> u64 {
        let (first, _) = self.zone_at(self.pages - 1);
        if first == 0 {
            return self.pages;
        }
        // The last zone (maybe partial) or the whole one before it.
        let before = (first / 2).max(u64::from(self.zone_pages));
        (self.pages - first).max(before)
    }

    /// Pages lying entirely below region offset `end`.
    pub fn pages_below(&self, end: usize) -> u64 {
        match self.classify(end) {
            Spot::Meta if end < self.zone0 + self.zone_desc => 0,
            Spot::Meta | Spot::Desc { .. } => {
                // Inside zone padding or a descriptor block: the pages of
                // the zones before it.
                let q = ((end.saturating_sub(self.zone0)) / PER_PAGE) as u64;
                if self.zoned() {
                    self.zone_at(q).0.min(self.pages)
                } else {
                    0
                }
            }
            Spot::Data { page, .. } => u64::from(page),
            Spot::Beyond => self.pages,
        }
    }

    /// What region offset `rel` holds.
    pub fn classify(&self, rel: usize) -> Spot {
        if rel < self.zone0 {
            return Spot::Meta;
        }
        let (first, size) = if self.zoned() {
            self.zone_at(((rel - self.zone0) / PER_PAGE) as u64)
        } else {
            (0, u64::from(self.zone_pages))
        };
        let (base, desc) = self.zone_base(first, size);
        let inz = rel - base;
        let (page, at, in_desc) = if inz < desc {
            (first + (inz / DESC) as u64, inz % DESC, true)
        } else {
            let d = inz - desc;
            (first + (d / PAGE) as u64, d % PAGE, false)
        };
        if in_desc && (inz / DESC) as u64 >= size {
            // The padding that rounds a descriptor block up to a page.
            return Spot::Meta;
        }
        if page >= self.pages {
            return Spot::Beyond;
        }
        let page = page as u32;
        if in_desc {
            Spot::Desc { page, at }
        } else {
            Spot::Data { page, at }
        }
    }
}

/// The decoded superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Superblock {
    pub geo: Geometry,
    pub nonce: u64,
}

impl Superblock {
    /// Encodes a version-2 superblock.
    pub fn encode(&self) -> [u8; CACHE_LINE] {
        let g = &self.geo;
        // 28..32: zero; 56..60: flags, none defined.
        SuperblockWriter::new(&MAGIC, VERSION)
            .u16(10, g.lanes)
            .u32(12, g.lane_bytes)
            .u64(16, g.pages)
            .u32(24, g.zone_pages)
            .u64(32, g.zone0 as u64)
            .u64(40, g.region_len as u64)
            .u64(48, self.nonce)
            .seal()
    }

    /// Decodes and validates a superblock (version 1 or 2) read from a
    /// region of `region_len` bytes. Order: magic, version, checksum,
    /// flags, geometry.
    pub fn decode(b: &[u8], region_len: usize) -> Result<Superblock> {
        let view = SuperblockView::new(b).filter(|v| v.has_magic(&MAGIC));
        let Some(view) = view else {
            return Err(AllocError::NotAHeap { what: "heap" });
        };
        let (u16_at, u32_at, u64_at) = (|o| view.u16(o), |o| view.u32(o), |o| view.u64(o));
        let version = view.version();
        if version != 1 && version != VERSION {
            return Err(AllocError::UnsupportedVersion {
                what: "heap",
                found: version,
                supported: VERSION,
            });
        }
        if let Err(ChecksumMismatch { stored, computed }) = view.checksum() {
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
        let (lanes, lane_bytes) = (u16_at(10), u32_at(12));
        let bad_geo = |e: AllocError| AllocError::Corrupt(format!("superblock geometry: {e}"));
        let geo = if version == 1 {
            let g = Geometry::compute_v1(region_len, lanes, lane_bytes).map_err(bad_geo)?;
            let data_off = g.zone0 + g.zone_desc;
            if g.pages != u64_at(16)
                || g.zone0 as u64 != u64_at(24)
                || data_off as u64 != u64_at(32)
            {
                return Err(AllocError::Corrupt(
                    "superblock geometry does not match its lane settings".into(),
                ));
            }
            g
        } else {
            // One zone holding every page, or zones.
            let zoned = u64::from(u32_at(24)) != u64_at(16);
            let g = Geometry::compute(region_len, lanes, lane_bytes, zoned).map_err(bad_geo)?;
            if g.pages != u64_at(16)
                || g.zone_pages != u32_at(24)
                || u32_at(28) != 0
                || g.zone0 as u64 != u64_at(32)
            {
                return Err(AllocError::Corrupt(
                    "superblock geometry does not match its lane settings".into(),
                ));
            }
            g
        };
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

    /// The superblock's bytes, as the version that wrote them laid them out
    /// (hex of one fixed superblock, taken before the encoding moved to
    /// `ferrite_pmem::superblock`): pools written by older builds must keep
    /// opening, byte for byte.
    #[test]
    fn superblock_bytes_are_the_format_on_media() {
        let hex: String = Superblock {
            geo: Geometry::compute(4 << 20, 4, 1024, true).unwrap(),
            nonce: 0x1234_5678_9abc_def0,
        }
        .encode()
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect();
        assert_eq!(
            hex,
            concat!(
                "46455252484541500200040000040000ee03000000000000ee03000000000000",
                "00200000000000000000400000000000f0debc9a7856341200000000304c0ab0"
            )
        );
    }

    #[test]
    fn geometry_fits_and_is_maximal() {
        for len in [64 * 1024usize, 252 * 1024, 1 << 20, (64 << 20) + 12345] {
            let g = Geometry::compute(len, 4, 1024, true).unwrap();
            assert_eq!(g.zone_pages as u64, g.pages, "one zone");
            let last = g.pages as u32 - 1;
            assert!(g.page_off(last) + PAGE <= len);
            assert!(g.page_off(0).is_multiple_of(PAGE));
            assert!(g.desc(last) + DESC <= g.page_off(0));
            let bigger = (g.zone0 + ((g.pages as usize + 1) * DESC).next_multiple_of(PAGE))
                + (g.pages as usize + 1) * PAGE;
            assert!(bigger > len, "one more page would have fitted in {len}");
        }
        assert!(matches!(
            Geometry::compute(8192, 4, 1024, false),
            Err(AllocError::RegionTooSmall { .. })
        ));
        assert!(Geometry::compute(1 << 20, 0, 1024, false).is_err());
        assert!(Geometry::compute(1 << 20, 4, 100, false).is_err());
    }

    #[test]
    fn zones_double_and_classify_inverts_them() {
        let len = (3usize << 30) + (5 << 20);
        let g = Geometry::compute(len, 4, 1024, true).unwrap();
        let z = ZONE_PAGES;
        assert_eq!(g.zone_pages, z);
        let use_ratio = g.pages as f64 * (PAGE + DESC) as f64 / len as f64;
        assert!((0.95..=1.0).contains(&use_ratio), "{use_ratio}");
        assert_eq!(g.zone_of(5), (0, z));
        assert_eq!(g.zone_of(z), (z, z));
        assert_eq!(g.zone_of(2 * z + 7), (2 * z, 2 * z));
        assert_eq!(g.zone_of(4 * z), (4 * z, 4 * z));
        // Zones of 1, 1, 2, 4, 8 and 16·z whole (1 GiB of pages), then a
        // partial one of 32·z.
        assert!(
            g.largest_zone() >= u64::from(16 * z),
            "{}",
            g.largest_zone()
        );
        for p in [
            0u32,
            1,
            z - 1,
            z,
            2 * z - 1,
            2 * z,
            4 * z + 9,
            g.pages as u32 - 1,
        ] {
            assert!(g.page_off(p) + PAGE <= len, "page {p}");
            assert!(g.page_off(p).is_multiple_of(PAGE));
            assert_eq!(
                g.classify(g.page_off(p) + 10),
                Spot::Data { page: p, at: 10 }
            );
            assert_eq!(g.classify(g.desc(p) + 8), Spot::Desc { page: p, at: 8 });
            assert_eq!(g.pages_below(g.page_off(p) + PAGE), u64::from(p) + 1);
            assert_eq!(g.pages_below(g.page_off(p) + PAGE - 1), u64::from(p));
        }
        for k in [z, 2 * z, 4 * z] {
            // Between the last page of a zone and the first of the next lie
            // the next zone's descriptors: 64 bytes per page of it.
            let gap = g.page_off(k) - (g.page_off(k - 1) + PAGE);
            assert_eq!(gap, g.zone_of(k).1 as usize * DESC, "before zone at {k}");
            assert_eq!(g.pages_below(g.desc(k) + 1), u64::from(k));
        }
        assert_eq!(g.classify(0), Spot::Meta);
        assert_eq!(g.classify(len + 1), Spot::Beyond);
        assert_eq!(g.pages_below(len), g.pages);
        let small = Geometry::compute(1 << 20, 4, 1024, true).unwrap();
        assert_eq!(small.largest_zone(), small.pages);
        let flat = Geometry::compute(len, 4, 1024, false).unwrap();
        assert_eq!(
            u64::from(flat.zone_pages),
            flat.pages,
            "a fixed heap has one zone"
        );
        assert_eq!(flat.page_off(1) - flat.page_off(0), PAGE);
        assert_eq!(flat.largest_zone(), flat.pages);
    }

    #[test]
    fn superblock_round_trips_and_rejects_damage() {
        let len = 1 << 20;
        let sb = Superblock {
            geo: Geometry::compute(len, 8, 2048, false).unwrap(),
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
    fn a_version_1_superblock_still_opens_as_one_zone() {
        let len = 1 << 20;
        let g = Geometry::compute_v1(len, 8, 2048).unwrap();
        let data_off = g.zone0 + g.zone_desc;
        let mut b = [0u8; CACHE_LINE];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..10].copy_from_slice(&1u16.to_le_bytes());
        b[10..12].copy_from_slice(&8u16.to_le_bytes());
        b[12..16].copy_from_slice(&2048u32.to_le_bytes());
        b[16..24].copy_from_slice(&g.pages.to_le_bytes());
        b[24..32].copy_from_slice(&(g.zone0 as u64).to_le_bytes());
        b[32..40].copy_from_slice(&(data_off as u64).to_le_bytes());
        b[40..48].copy_from_slice(&(len as u64).to_le_bytes());
        b[48..56].copy_from_slice(&7u64.to_le_bytes());
        let crc = crc32c::crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        let sb = Superblock::decode(&b, len).unwrap();
        assert_eq!(sb.geo, g);
        assert_eq!(
            sb.geo.desc(3),
            g.zone0 + 3 * DESC,
            "version 1's descriptor layout"
        );
        assert_eq!(sb.geo.page_off(3), data_off + 3 * PAGE, "and its pages");
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
