//! Encoding and decoding of the page store's on-media structures. The
//! format itself is documented byte by byte in the module documentation of
//! [`super`]; this file is its single implementation.

use super::dirty::DirtyLines;
use super::{PageAlgorithm, PageError};
use ferrite_pmem::{CACHE_LINE, ChecksumMismatch, SuperblockView, SuperblockWriter};

/// Magic at region offset 0.
pub const MAGIC: [u8; 8] = *b"FERPAGE\0";
/// Format version written and understood by this build.
pub const FORMAT_VERSION: u16 = 1;
/// Superblock (one line at offset 0).
pub const SUPER_LEN: usize = CACHE_LINE;
/// Slot headers start on the second line.
pub const HEADERS_OFF: usize = CACHE_LINE;
/// Payloads are aligned to this (relative to the region start).
pub const PAYLOAD_ALIGN: usize = 4096;
/// Fixed part of a micro-log entry, before the line index.
pub const ENTRY_FIXED: usize = 32;
/// Smallest and largest page sizes.
pub const MIN_PAGE: usize = 256;
pub const MAX_PAGE: usize = DirtyLines::MAX_LINES * CACHE_LINE;
/// Most lanes a store may have.
pub const MAX_LANES: u32 = 1024;
/// "No slot" in the DRAM page map.
pub const NO_SLOT: u32 = u32::MAX;

const LINE: usize = CACHE_LINE;

fn align_up(n: usize, a: usize) -> Option<usize> {
    n.checked_add(a - 1).map(|x| x / a * a)
}

/// Where everything lives in the region, derived from the four shape
/// parameters stored in the superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub page_size: usize,
    /// Lines per page.
    pub lines: usize,
    pub pages: u32,
    pub slots: u32,
    pub lanes: u32,
    pub lanes_off: usize,
    pub lane_len: usize,
    pub payload_off: usize,
    /// Bytes of region the store needs.
    pub len: usize,
}

impl Geometry {
    pub fn new(
        page_size: usize,
        pages: u32,
        slots: u32,
        lanes: u32,
    ) -> Result<Geometry, PageError> {
        if !page_size.is_multiple_of(LINE) || !(MIN_PAGE..=MAX_PAGE).contains(&page_size) {
            return Err(PageError::BadPageSize(page_size));
        }
        let bad = |m: String| Err(PageError::BadOption(m));
        if pages == 0 || pages == NO_SLOT {
            return bad(format!("a store holds 1..{} pages, not {pages}", NO_SLOT));
        }
        if lanes == 0 || lanes > MAX_LANES {
            return bad(format!("a store has 1..={MAX_LANES} lanes, not {lanes}"));
        }
        // Every page holds one slot, and each lane may hold one more for a
        // copy-on-write in flight: fewer slots could run out.
        let need = u64::from(pages) + u64::from(lanes);
        if u64::from(slots) < need || slots == NO_SLOT {
            return bad(format!(
                "{slots} slots cannot serve {pages} pages and {lanes} lanes (at least {need} needed)"
            ));
        }
        let lines = page_size / LINE;
        let overflow = || PageError::BadOption("store larger than the address space".into());
        let lanes_off = (slots as usize)
            .checked_mul(LINE)
            .and_then(|h| h.checked_add(HEADERS_OFF))
            .ok_or_else(overflow)?;
        let lane_len = align_up(ENTRY_FIXED + 2 * lines, LINE).ok_or_else(overflow)? + page_size;
        let payload_off = (lanes as usize)
            .checked_mul(lane_len)
            .and_then(|l| l.checked_add(lanes_off))
            .and_then(|e| align_up(e, PAYLOAD_ALIGN))
            .ok_or_else(overflow)?;
        let len = (slots as usize)
            .checked_mul(page_size)
            .and_then(|p| p.checked_add(payload_off))
            .ok_or_else(overflow)?;
        Ok(Geometry {
            page_size,
            lines,
            pages,
            slots,
            lanes,
            lanes_off,
            lane_len,
            payload_off,
            len,
        })
    }

    #[inline]
    pub fn header_off(&self, slot: u32) -> usize {
        HEADERS_OFF + slot as usize * LINE
    }

    #[inline]
    pub fn lane_off(&self, lane: u32) -> usize {
        self.lanes_off + lane as usize * self.lane_len
    }

    #[inline]
    pub fn page_off(&self, slot: u32) -> usize {
        self.payload_off + slot as usize * self.page_size
    }
}

// ---- superblock ---------------------------------------------------------------

/// The superblock's content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub geo: Geometry,
    pub algorithm: PageAlgorithm,
    /// Crossover for one writer and for several, in dirty lines.
    pub crossover: [u16; 2],
    pub nonce: u64,
}

impl Superblock {
    pub fn encode(&self) -> [u8; SUPER_LEN] {
        SuperblockWriter::new(&MAGIC, FORMAT_VERSION)
            .u8(10, self.algorithm.code())
            .u32(12, self.geo.page_size as u32)
            .u32(16, self.geo.pages)
            .u32(20, self.geo.slots)
            .u32(24, self.geo.lanes)
            .u16(28, self.crossover[0])
            .u16(30, self.crossover[1])
            .u64(32, self.nonce)
            .seal()
    }

    /// Decodes and validates a superblock for a region of `region_len` bytes.
    pub fn decode(b: &[u8; SUPER_LEN], region_len: usize) -> Result<Superblock, PageError> {
        let view = SuperblockView::of(b);
        if !view.has_magic(&MAGIC) {
            return Err(PageError::NotAPageStore);
        }
        let (u16_at, u32_at) = (|o| view.u16(o), |o| view.u32(o));
        let version = view.version();
        if version != FORMAT_VERSION {
            return Err(PageError::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        if let Err(ChecksumMismatch { stored, computed }) = view.checksum() {
            return Err(PageError::Checksum { stored, computed });
        }
        if !view.is_zero(11..12) || !view.is_zero(40..60) {
            return Err(PageError::Corrupt(
                "reserved superblock bytes are not zero".into(),
            ));
        }
        let algorithm = PageAlgorithm::from_code(b[10])
            .ok_or_else(|| PageError::Corrupt(format!("unknown algorithm code {}", b[10])))?;
        let geo = Geometry::new(u32_at(12) as usize, u32_at(16), u32_at(20), u32_at(24))
            .map_err(|e| PageError::Corrupt(format!("superblock shape: {e}")))?;
        if geo.len > region_len {
            return Err(PageError::RegionTooSmall {
                len: region_len,
                min: geo.len,
            });
        }
        Ok(Superblock {
            geo,
            algorithm,
            crossover: [u16_at(28), u16_at(30)],
            nonce: view.u64(32),
        })
    }
}

// ---- slot headers ---------------------------------------------------------------

fn header_crc(nonce: u64, slot: u32, pid: u32, pvn: u64) -> u32 {
    let mut b = [0u8; 24];
    b[0..8].copy_from_slice(&nonce.to_le_bytes());
    b[8..12].copy_from_slice(&slot.to_le_bytes());
    b[12..16].copy_from_slice(&pid.to_le_bytes());
    b[16..24].copy_from_slice(&pvn.to_le_bytes());
    crc32c::crc32c(&b)
}

/// The two words of slot `slot`'s header naming page `pid` at version
/// `pvn`: word 0 = `pid | crc << 32`, word 1 = `pvn`.
pub fn header_words(nonce: u64, slot: u32, pid: u32, pvn: u64) -> (u64, u64) {
    let crc = header_crc(nonce, slot, pid, pvn);
    (u64::from(pid) | u64::from(crc) << 32, pvn)
}

/// The `(pid, pvn)` a header names, if it is valid for a store of `pages` pages.
pub fn decode_header(nonce: u64, slot: u32, w0: u64, w1: u64, pages: u32) -> Option<(u32, u64)> {
    let pid = w0 as u32;
    let crc = (w0 >> 32) as u32;
    let pvn = w1;
    (pvn != 0 && pid < pages && crc == header_crc(nonce, slot, pid, pvn)).then_some((pid, pvn))
}

// ---- micro-log entries ------------------------------------------------------------

/// Bytes from the start of an entry to its first data line, for `k` lines.
pub fn entry_data_off(k: usize) -> usize {
    (ENTRY_FIXED + 2 * k).next_multiple_of(LINE)
}

/// Builds the entry logging `dirty` lines of `page` (the whole DRAM page)
/// into `buf`; returns its length. `dirty` must be non-empty and within the
/// page (the caller validated it).
pub fn encode_entry(
    buf: &mut Vec<u8>,
    nonce: u64,
    pid: u32,
    pvn: u64,
    slot: u32,
    page: &[u8],
    dirty: &DirtyLines,
) -> usize {
    let k = dirty.count();
    let data_off = entry_data_off(k);
    let len = data_off + k * LINE;
    buf.clear();
    buf.resize(len, 0);
    buf[4..8].copy_from_slice(&pid.to_le_bytes());
    buf[8..16].copy_from_slice(&pvn.to_le_bytes());
    buf[16..20].copy_from_slice(&slot.to_le_bytes());
    buf[20..22].copy_from_slice(&(k as u16).to_le_bytes());
    for (i, line) in dirty.iter().enumerate() {
        let o = ENTRY_FIXED + 2 * i;
        buf[o..o + 2].copy_from_slice(&(line as u16).to_le_bytes());
        let d = data_off + i * LINE;
        buf[d..d + LINE].copy_from_slice(&page[line * LINE..(line + 1) * LINE]);
    }
    let crc = entry_crc(nonce, &buf[4..ENTRY_FIXED + 2 * k], &buf[data_off..]);
    buf[0..4].copy_from_slice(&crc.to_le_bytes());
    len
}

fn entry_crc(nonce: u64, head: &[u8], data: &[u8]) -> u32 {
    let c = crc32c::crc32c(&nonce.to_le_bytes());
    let c = crc32c::crc32c_append(c, head);
    crc32c::crc32c_append(c, data)
}

/// A valid micro-log entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub pid: u32,
    pub pvn: u64,
    pub slot: u32,
    /// Line numbers, strictly ascending.
    pub lines: Vec<u16>,
    /// The logged lines, 64 bytes each, in the order of `lines`.
    pub data: Vec<u8>,
}

/// Decodes the entry of a lane. `read(off, buf)` reads lane bytes.
/// Returns `None` for anything that is not a complete, valid entry of this
/// store (an empty lane, a torn write, a scrubbed header).
pub fn decode_entry(geo: &Geometry, nonce: u64, read: impl Fn(usize, &mut [u8])) -> Option<Entry> {
    let mut fixed = [0u8; ENTRY_FIXED];
    read(0, &mut fixed);
    let u32_at =
        |o: usize| u32::from_le_bytes([fixed[o], fixed[o + 1], fixed[o + 2], fixed[o + 3]]);
    let stored = u32_at(0);
    let pid = u32_at(4);
    let mut pvn = [0u8; 8];
    pvn.copy_from_slice(&fixed[8..16]);
    let pvn = u64::from_le_bytes(pvn);
    let slot = u32_at(16);
    let k = u16::from_le_bytes([fixed[20], fixed[21]]) as usize;
    if k == 0 || k > geo.lines || pvn == 0 || pid >= geo.pages || slot >= geo.slots {
        return None;
    }
    if fixed[22..32].iter().any(|&b| b != 0) {
        return None;
    }
    let mut index = vec![0u8; 2 * k];
    read(ENTRY_FIXED, &mut index);
    let lines: Vec<u16> = index
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    let ascending = lines.windows(2).all(|w| w[0] < w[1]);
    if !ascending || *lines.last()? as usize >= geo.lines {
        return None;
    }
    let mut data = vec![0u8; k * LINE];
    read(entry_data_off(k), &mut data);
    let mut head = Vec::with_capacity(ENTRY_FIXED - 4 + 2 * k);
    head.extend_from_slice(&fixed[4..]);
    head.extend_from_slice(&index);
    (entry_crc(nonce, &head, &data) == stored).then_some(Entry {
        pid,
        pvn,
        slot,
        lines,
        data,
    })
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
            geo: Geometry::new(16384, 10, 14, 4).unwrap(),
            algorithm: PageAlgorithm::Hybrid,
            crossover: [24, 40],
            nonce: 0x1234_5678_9abc_def0,
        }
        .encode()
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect();
        assert_eq!(
            hex,
            concat!(
                "464552504147450001000300004000000a0000000e0000000400000018002800",
                "f0debc9a785634120000000000000000000000000000000000000000cb061b43"
            )
        );
    }

    #[test]
    fn geometry_places_everything_without_overlap() {
        let g = Geometry::new(4096, 4, 6, 2).unwrap();
        assert_eq!(g.lines, 64);
        assert_eq!(g.lanes_off, 64 + 6 * 64);
        assert_eq!(g.lane_len, 192 + 4096);
        assert!(g.lane_off(1) + g.lane_len <= g.payload_off);
        assert_eq!(g.payload_off % PAYLOAD_ALIGN, 0);
        assert_eq!(g.len, g.page_off(5) + 4096);
        assert!(Geometry::new(4096, 4, 5, 2).is_err(), "too few slots");
        assert!(Geometry::new(4000, 4, 6, 2).is_err());
        assert!(Geometry::new(128, 4, 6, 2).is_err());
        assert!(Geometry::new(MAX_PAGE, 1, 2, 1).is_ok());
        assert!(Geometry::new(4096, 0, 6, 2).is_err());
        assert!(Geometry::new(4096, 4, 6, 0).is_err());
    }

    #[test]
    fn superblock_round_trips_and_rejects_damage() {
        let sb = Superblock {
            geo: Geometry::new(16384, 10, 14, 4).unwrap(),
            algorithm: PageAlgorithm::Hybrid,
            crossover: [24, 40],
            nonce: 0x1234_5678_9abc_def0,
        };
        let b = sb.encode();
        assert_eq!(Superblock::decode(&b, sb.geo.len).unwrap(), sb);
        assert!(matches!(
            Superblock::decode(&b, sb.geo.len - 1),
            Err(PageError::RegionTooSmall { .. })
        ));
        let mut bad = b;
        bad[17] ^= 1;
        assert!(matches!(
            Superblock::decode(&bad, usize::MAX),
            Err(PageError::Checksum { .. })
        ));
        let mut bad = b;
        bad[0] = b'X';
        assert!(matches!(
            Superblock::decode(&bad, usize::MAX),
            Err(PageError::NotAPageStore)
        ));
        let mut bad = b;
        bad[8] = 9;
        assert!(matches!(
            Superblock::decode(&bad, usize::MAX),
            Err(PageError::UnsupportedVersion { found: 9, .. })
        ));
    }

    #[test]
    fn headers_bind_page_version_slot_and_store() {
        let (w0, w1) = header_words(7, 3, 2, 9);
        assert_eq!(decode_header(7, 3, w0, w1, 4), Some((2, 9)));
        assert_eq!(decode_header(8, 3, w0, w1, 4), None, "other store");
        assert_eq!(decode_header(7, 4, w0, w1, 4), None, "other slot");
        assert_eq!(decode_header(7, 3, w0, w1 + 1, 4), None, "torn");
        assert_eq!(decode_header(7, 3, w0, w1, 2), None, "page out of range");
        assert_eq!(decode_header(7, 3, 0, 0, 4), None, "zero");
    }

    #[test]
    fn entries_round_trip_and_any_damage_invalidates_them() {
        let g = Geometry::new(4096, 4, 6, 2).unwrap();
        let page: Vec<u8> = (0..4096).map(|i| (i * 7 % 251) as u8).collect();
        for dirty in [
            DirtyLines::from_lines([0]),
            DirtyLines::from_lines([3, 4, 5, 63]),
            DirtyLines::all(64),
        ] {
            let mut buf = Vec::new();
            let n = encode_entry(&mut buf, 5, 1, 77, 3, &page, &dirty);
            assert_eq!(n, entry_data_off(dirty.count()) + 64 * dirty.count());
            let read = |b: &Vec<u8>| {
                let b = b.clone();
                move |o: usize, dst: &mut [u8]| {
                    let mut full = b.clone();
                    full.resize(g.lane_len, 0);
                    dst.copy_from_slice(&full[o..o + dst.len()]);
                }
            };
            let e = decode_entry(&g, 5, read(&buf)).expect("valid");
            assert_eq!((e.pid, e.pvn, e.slot), (1, 77, 3));
            assert_eq!(
                e.lines.iter().map(|&l| l as usize).collect::<Vec<_>>(),
                dirty.iter().collect::<Vec<_>>()
            );
            for (i, &l) in e.lines.iter().enumerate() {
                let l = l as usize;
                assert_eq!(&e.data[i * 64..(i + 1) * 64], &page[l * 64..(l + 1) * 64]);
            }
            assert!(decode_entry(&g, 6, read(&buf)).is_none(), "other store");
            for at in [0, 5, 20, 33, n - 1] {
                let mut bad = buf.clone();
                bad[at] ^= 0x10;
                assert!(decode_entry(&g, 5, read(&bad)).is_none(), "flip at {at}");
            }
        }
        assert!(decode_entry(&g, 5, |_, d: &mut [u8]| d.fill(0)).is_none());
    }
}
