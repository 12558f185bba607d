//! Failure-atomic in-place update cells [P0 §3.4, Appendix A].
//!
//! A cell array is a flat array of fixed-size values (16, 32, 48 or 64
//! bytes) living in a [`Region`], each updated *in place* and failure
//! atomically: after any crash, once recovery has run, a cell reads exactly
//! the value of its last acknowledged update or of the update that was in
//! flight — never a mix of the two, and never anything older once
//! [`CellArray::update`] has returned.
//!
//! Three techniques behind one trait, [`CellArray`]:
//!
//! | kind | type | fences / update | lines written / update (16/32/48/64 B) | bytes / cell (16/32/48/64 B) |
//! |------|------|----------------:|-----------------------------------------|------------------------------|
//! | CoW [P0 §3.4.1] | [`CowCells`] | 2 | 2 / 2 / 2 / 2 | 64 / 128 / 128 / 192 |
//! | Log [P0 §3.4.2] | [`LogCells`] | 2 | 2 / 2 / 2 / 3 | 16 / 32 / 64 / 64, plus one 128-byte log slot per array |
//! | FAM [P0 §3.4.3] | [`FamCells`] | 1 | 1 / 2 / 2 / 3 | 64 / 128 / 128 / 192 |
//!
//! ("lines written" counts each persist's distinct lines, as the
//! `lines_flushed` counter does: the CoW cell of 16 B flushes its one line
//! twice.) Every cell starts on a cache-line boundary and none straddles
//! more lines than its size requires [P0 §3.4.4].
//!
//! # On-media format of an array (version 1, little-endian)
//!
//! The region handed to [`CellArray::format`] must start on a cache line.
//!
//! | offset | size | content |
//! |-------:|-----:|---------|
//! | 0 | 64 | array header, below |
//! | 64 | 128 | log slot of a [`LogCells`] array ([`log`] documents it); zero for the other kinds |
//! | 192 | 64 | reserved, zero |
//! | 256 | count × stride | the cells; cell `i` at `256 + i·stride` ([`cow`], [`log`], [`fam`] document a cell) |
//!
//! Array header (written once by `format`, persisted after the zeroed cells
//! so an array exists only once it is complete; never changed afterwards):
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0 | 8 | magic `b"FERCELL\0"` |
//! | 8 | 4 | format version (`1`) |
//! | 12 | 1 | kind: 1 = CoW, 2 = log, 3 = FAM |
//! | 13 | 1 | value size in bytes: 16, 32, 48 or 64 |
//! | 14 | 2 | stride: bytes per cell (derived from kind and size; checked) |
//! | 16 | 8 | cell count |
//! | 24 | 4 | CRC32C of bytes 0..24 |
//! | 28 | 36 | reserved, zero |
//!
//! # Using an array
//!
//! [`CellArray::format`] creates an array (all cells zero);
//! [`CellArray::recover`] is the only way to open an existing one and must
//! run after every restart — it repairs what a crash left half-done (FAM
//! rolls torn cells back, the log cell replays its log slot) and makes the
//! repair durable before returning, so it is idempotent under repeated
//! crashes. [`format_any`] / [`recover_any`] do the same for a kind chosen
//! at run time (recovery reads the kind from the header). Updates need
//! `&mut self`: an array has a single writer (the log cell's slot is shared
//! by all its cells); reads may be concurrent with each other.
//!
//! The crash checks behind `ferrite check cell-cow | cell-log | cell-fam`
//! are in the `checks` submodule (feature `checks`).

mod fault;
// Planted bugs exist for the crash checks only: outside the `checks` feature
// (and this crate's tests) they are not part of the API.
#[cfg(feature = "checks")]
pub use fault::Fault;
#[cfg(not(feature = "checks"))]
pub(crate) use fault::Fault;

use ferrite_pmem::{CACHE_LINE, Region};

pub mod cow;
pub mod fam;
mod fam_avx2;
pub mod log;

#[cfg(any(test, feature = "checks"))]
pub mod checks;

pub use cow::CowCells;
pub use fam::{FamCells, FamEncoder};
pub use log::LogCells;

/// Magic at offset 0 of an array.
pub const MAGIC: [u8; 8] = *b"FERCELL\0";
/// On-media format version written and understood by this build.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes of the array header.
pub const HEADER_LEN: usize = 64;
/// Offset of the log cell's log slot.
pub(crate) const LOG_SLOT_OFF: usize = 64;
/// Bytes reserved for the log slot.
pub(crate) const LOG_SLOT_LEN: usize = 128;
/// Offset of cell 0.
pub const CELLS_OFF: usize = 256;

/// The in-place update technique of an array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CellKind {
    /// Two copies and an active flag [P0 §3.4.1].
    Cow,
    /// A redo log slot, then the in-place write [P0 §3.4.2].
    Log,
    /// Failure-atomic memory: 31-bit chunks in versioned 8-byte blocks [P0 §3.4.3].
    Fam,
}

impl CellKind {
    pub const ALL: [CellKind; 3] = [CellKind::Cow, CellKind::Log, CellKind::Fam];

    /// Lower-case name: `cow`, `log`, `fam`.
    pub fn name(self) -> &'static str {
        match self {
            CellKind::Cow => "cow",
            CellKind::Log => "log",
            CellKind::Fam => "fam",
        }
    }

    fn code(self) -> u8 {
        match self {
            CellKind::Cow => 1,
            CellKind::Log => 2,
            CellKind::Fam => 3,
        }
    }

    fn from_code(c: u8) -> Option<CellKind> {
        CellKind::ALL.into_iter().find(|k| k.code() == c)
    }

    /// Bytes one cell of this kind occupies for values of `size`.
    pub fn stride(self, size: ValueSize) -> usize {
        match self {
            CellKind::Cow => cow::stride(size),
            CellKind::Log => log::stride(size),
            CellKind::Fam => fam::stride(size),
        }
    }

    /// Persist fences one update costs.
    pub fn fences_per_update(self) -> u32 {
        match self {
            CellKind::Cow | CellKind::Log => 2,
            CellKind::Fam => 1,
        }
    }

    /// Region length needed for `count` cells of `size`.
    pub fn region_len(self, size: ValueSize, count: usize) -> Result<usize, CellError> {
        count
            .checked_mul(self.stride(size))
            .and_then(|b| b.checked_add(CELLS_OFF))
            .ok_or(CellError::TooManyCells { count })
    }
}

impl std::fmt::Display for CellKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for CellKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        CellKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown cell kind '{s}' (expected cow, log or fam)"))
    }
}

/// A supported value size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ValueSize {
    B16,
    B32,
    B48,
    B64,
}

impl ValueSize {
    pub const ALL: [ValueSize; 4] = [
        ValueSize::B16,
        ValueSize::B32,
        ValueSize::B48,
        ValueSize::B64,
    ];
    /// The largest value, in bytes.
    pub const MAX: usize = 64;

    pub fn bytes(self) -> usize {
        match self {
            ValueSize::B16 => 16,
            ValueSize::B32 => 32,
            ValueSize::B48 => 48,
            ValueSize::B64 => 64,
        }
    }

    /// The size of `bytes`, if supported.
    pub fn from_bytes(bytes: usize) -> Option<ValueSize> {
        ValueSize::ALL.into_iter().find(|s| s.bytes() == bytes)
    }
}

impl std::fmt::Display for ValueSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}B", self.bytes())
    }
}

/// Errors of cell arrays (ARCHITECTURE.md, rule 7).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CellError {
    #[error("cell region must start on a cache line (pool offset {base:#x})")]
    Misaligned { base: usize },
    #[error("cell region of {have} bytes is too small: {need} needed")]
    RegionTooSmall { need: usize, have: usize },
    #[error("{count} cells do not fit this format")]
    TooManyCells { count: usize },
    #[error("not a cell array (bad magic {found:02x?})")]
    NotAnArray { found: [u8; 8] },
    #[error("unsupported cell array format version {found} (this build reads {supported})")]
    UnsupportedVersion { found: u32, supported: u32 },
    #[error(
        "cell array header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
    )]
    HeaderChecksum { stored: u32, computed: u32 },
    #[error("cell array header is corrupt: {what}")]
    BadHeader { what: String },
    #[error("array holds {found} cells, not {expected} cells")]
    WrongKind { expected: CellKind, found: CellKind },
    #[error("cell {index} out of range (array of {len})")]
    OutOfRange { index: usize, len: usize },
    #[error("value of {got} bytes for cells of {expected} bytes")]
    WrongValueLen { expected: usize, got: usize },
    #[error("cell {index} is corrupt: {what}")]
    Corrupt { index: usize, what: String },
    #[error("log slot is corrupt: {what}")]
    CorruptLog { what: String },
    #[error("the AVX2 FAM encoder needs a CPU with AVX2")]
    NoAvx2,
}

/// What recovery found and repaired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Cells whose torn update was undone (FAM) or redone (log).
    pub cells_repaired: usize,
    /// FAM blocks rolled back.
    pub blocks_rolled_back: usize,
    /// The log cell's slot held a valid entry and was replayed.
    pub log_replayed: bool,
}

/// The common interface of the three techniques, so checks and benchmarks
/// are generic. See the [module documentation](self).
pub trait CellArray: Send + Sync {
    /// Formats `count` zero cells of `size` in `region` (which must start on
    /// a cache line and hold [`CellKind::region_len`] bytes) and makes them
    /// durable, header last.
    fn format(region: Region, size: ValueSize, count: usize) -> Result<Self, CellError>
    where
        Self: Sized;

    /// Opens the array in `region` after a restart or crash, repairs any
    /// update a crash interrupted and makes the repair durable. Idempotent:
    /// crashing during recovery and recovering again gives the same cells.
    fn recover(region: Region) -> Result<(Self, Recovery), CellError>
    where
        Self: Sized;

    fn kind(&self) -> CellKind;
    fn value_size(&self) -> ValueSize;
    /// Number of cells.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The region the array lives in.
    fn region(&self) -> &Region;

    /// Copies cell `index` into `out` (`out.len()` must be the value size).
    fn read(&self, index: usize, out: &mut [u8]) -> Result<(), CellError>;

    /// Replaces cell `index` with `value` failure atomically; when it
    /// returns the new value is durable.
    fn update(&mut self, index: usize, value: &[u8]) -> Result<(), CellError>;
}

/// Formats an array of `kind` (see [`CellArray::format`]).
pub fn format_any(
    kind: CellKind,
    region: Region,
    size: ValueSize,
    count: usize,
) -> Result<Box<dyn CellArray>, CellError> {
    Ok(match kind {
        CellKind::Cow => Box::new(CowCells::format(region, size, count)?),
        CellKind::Log => Box::new(LogCells::format(region, size, count)?),
        CellKind::Fam => Box::new(FamCells::format(region, size, count)?),
    })
}

/// Recovers an array of whatever kind its header records (see
/// [`CellArray::recover`]).
pub fn recover_any(region: Region) -> Result<(Box<dyn CellArray>, Recovery), CellError> {
    let h = Header::peek(&region)?;
    Ok(match h.kind {
        CellKind::Cow => {
            let (a, r) = CowCells::recover(region)?;
            (Box::new(a), r)
        }
        CellKind::Log => {
            let (a, r) = LogCells::recover(region)?;
            (Box::new(a), r)
        }
        CellKind::Fam => {
            let (a, r) = FamCells::recover(region)?;
            (Box::new(a), r)
        }
    })
}

/// The decoded array header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub kind: CellKind,
    pub size: ValueSize,
    pub stride: usize,
    pub count: usize,
}

impl Header {
    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[12] = self.kind.code();
        b[13] = self.size.bytes() as u8;
        b[14..16].copy_from_slice(&(self.stride as u16).to_le_bytes());
        b[16..24].copy_from_slice(&(self.count as u64).to_le_bytes());
        let crc = crc32c::crc32c(&b[..24]);
        b[24..28].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and validates the header of the array in `region` (magic,
    /// version, checksum, fields, then that the region holds every cell).
    pub fn peek(region: &Region) -> Result<Header, CellError> {
        check_region_start(region)?;
        if region.len() < CELLS_OFF {
            return Err(CellError::RegionTooSmall {
                need: CELLS_OFF,
                have: region.len(),
            });
        }
        let mut b = [0u8; HEADER_LEN];
        region.read(0, &mut b);
        let magic: [u8; 8] = b[0..8].try_into().expect("8 bytes");
        if magic != MAGIC {
            return Err(CellError::NotAnArray { found: magic });
        }
        let version = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
        if version != FORMAT_VERSION {
            return Err(CellError::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let stored = u32::from_le_bytes(b[24..28].try_into().expect("4 bytes"));
        let computed = crc32c::crc32c(&b[..24]);
        if stored != computed {
            return Err(CellError::HeaderChecksum { stored, computed });
        }
        let bad = |what: String| CellError::BadHeader { what };
        let kind = CellKind::from_code(b[12]).ok_or_else(|| bad(format!("kind code {}", b[12])))?;
        let size = ValueSize::from_bytes(b[13] as usize)
            .ok_or_else(|| bad(format!("value size {}", b[13])))?;
        let stride = u16::from_le_bytes(b[14..16].try_into().expect("2 bytes")) as usize;
        if stride != kind.stride(size) {
            return Err(bad(format!(
                "stride {stride} for {kind} cells of {size} (expected {})",
                kind.stride(size)
            )));
        }
        let count = u64::from_le_bytes(b[16..24].try_into().expect("8 bytes"));
        let count = usize::try_from(count).map_err(|_| bad(format!("cell count {count}")))?;
        let need = kind
            .region_len(size, count)
            .map_err(|_| bad(format!("cell count {count}")))?;
        if need > region.len() {
            return Err(CellError::RegionTooSmall {
                need,
                have: region.len(),
            });
        }
        Ok(Header {
            kind,
            size,
            stride,
            count,
        })
    }

    /// [`Header::peek`] that also demands `kind`.
    pub fn open(region: &Region, kind: CellKind) -> Result<Header, CellError> {
        let h = Header::peek(region)?;
        if h.kind != kind {
            return Err(CellError::WrongKind {
                expected: kind,
                found: h.kind,
            });
        }
        Ok(h)
    }

    /// Formats an array: zeroes header area, log slot and cells, persists
    /// them, then writes and persists the header (two fences in all).
    pub fn format(
        region: &Region,
        kind: CellKind,
        size: ValueSize,
        count: usize,
    ) -> Result<Header, CellError> {
        check_region_start(region)?;
        if kind == CellKind::Log && count > u32::MAX as usize {
            // The log slot records the cell index in 32 bits.
            return Err(CellError::TooManyCells { count });
        }
        let need = kind.region_len(size, count)?;
        if need > region.len() {
            return Err(CellError::RegionTooSmall {
                need,
                have: region.len(),
            });
        }
        let h = Header {
            kind,
            size,
            stride: kind.stride(size),
            count,
        };
        region.fill_persist(0, need, 0);
        region.write(0, &h.encode());
        region.persist(0, HEADER_LEN);
        Ok(h)
    }

    /// Offset of cell `index`, or `OutOfRange`.
    #[inline]
    pub fn cell_off(&self, index: usize) -> Result<usize, CellError> {
        if index < self.count {
            Ok(CELLS_OFF + index * self.stride)
        } else {
            Err(CellError::OutOfRange {
                index,
                len: self.count,
            })
        }
    }

    /// `Ok` when `len` is the value size.
    #[inline]
    pub fn check_len(&self, len: usize) -> Result<(), CellError> {
        if len == self.size.bytes() {
            Ok(())
        } else {
            Err(CellError::WrongValueLen {
                expected: self.size.bytes(),
                got: len,
            })
        }
    }
}

fn check_region_start(region: &Region) -> Result<(), CellError> {
    if region.is_line_aligned(0) {
        Ok(())
    } else {
        Err(CellError::Misaligned {
            base: region.base(),
        })
    }
}

const _: () = assert!(CELLS_OFF.is_multiple_of(CACHE_LINE));
const _: () = assert!(LOG_SLOT_OFF + LOG_SLOT_LEN <= CELLS_OFF);

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_pmem::{Domain, Pool, PoolOptions};

    fn pool(size: u64) -> Pool {
        Pool::create_in_memory(&PoolOptions::new("cells", size).domain(Domain::Adr)).unwrap()
    }

    /// Same contract for every kind and size: zero after format, reads what
    /// was written, survives recover, rejects bad indexes and lengths.
    #[test]
    fn every_kind_and_size_round_trips_through_recovery() {
        let p = pool(1 << 20);
        for kind in CellKind::ALL {
            for size in ValueSize::ALL {
                let n = 37;
                let len = kind.region_len(size, n).unwrap();
                let region = p.data().sub(0, len).unwrap();
                let mut a = format_any(kind, region.clone(), size, n).unwrap();
                assert_eq!((a.kind(), a.value_size(), a.len()), (kind, size, n));
                let mut out = vec![0xAAu8; size.bytes()];
                a.read(5, &mut out).unwrap();
                assert!(out.iter().all(|&b| b == 0), "{kind} {size}: not zeroed");
                let val = |i: usize, r: usize| -> Vec<u8> {
                    (0..size.bytes())
                        .map(|j| (i * 131 + r * 17 + j * 7 + 0x80) as u8)
                        .collect()
                };
                for r in 0..6 {
                    for i in 0..n {
                        a.update(i, &val(i, r)).unwrap();
                    }
                }
                for i in 0..n {
                    a.read(i, &mut out).unwrap();
                    assert_eq!(out, val(i, 5), "{kind} {size} cell {i}");
                }
                assert_eq!(
                    a.update(n, &val(0, 0)),
                    Err(CellError::OutOfRange { index: n, len: n })
                );
                assert!(matches!(
                    a.update(0, &[0u8; 8]),
                    Err(CellError::WrongValueLen { got: 8, .. })
                ));
                assert!(matches!(
                    a.read(0, &mut [0u8; 80]),
                    Err(CellError::WrongValueLen { got: 80, .. })
                ));
                drop(a);
                let (b, rec) = recover_any(region).unwrap();
                assert_eq!(b.kind(), kind);
                assert_eq!(rec.cells_repaired, 0);
                for i in 0..n {
                    b.read(i, &mut out).unwrap();
                    assert_eq!(out, val(i, 5), "{kind} {size} cell {i} after recover");
                }
            }
        }
    }

    #[test]
    fn bad_regions_and_headers_are_typed_errors() {
        let p = pool(1 << 16);
        let d = p.data();
        let size = ValueSize::B16;
        assert!(matches!(
            FamCells::format(d.sub(8, 4096).unwrap(), size, 4),
            Err(CellError::Misaligned { .. })
        ));
        assert!(matches!(
            CowCells::format(d.sub(0, 300).unwrap(), size, 4),
            Err(CellError::RegionTooSmall {
                need: 512,
                have: 300
            })
        ));
        assert!(matches!(
            LogCells::format(d.clone(), size, usize::MAX / 2),
            Err(CellError::TooManyCells { .. })
        ));
        // Never formatted.
        assert!(matches!(
            recover_any(d.sub(0, 4096).unwrap()),
            Err(CellError::NotAnArray { .. })
        ));
        let region = d.sub(0, 4096).unwrap();
        CowCells::format(region.clone(), size, 4).unwrap();
        assert!(matches!(
            FamCells::recover(region.clone()),
            Err(CellError::WrongKind {
                expected: CellKind::Fam,
                found: CellKind::Cow
            })
        ));
        // Truncated region.
        assert!(matches!(
            CowCells::recover(d.sub(0, 300).unwrap()),
            Err(CellError::RegionTooSmall { .. })
        ));
        // Flipped bit in a checksummed field.
        let mut b = [0u8; 1];
        region.read(16, &mut b);
        region.write(16, &[b[0] ^ 1]);
        assert!(matches!(
            CowCells::recover(region.clone()),
            Err(CellError::HeaderChecksum { .. })
        ));
        region.write(16, &b);
        CowCells::recover(region.clone()).unwrap();
        // Future version.
        region.write(8, &2u32.to_le_bytes());
        assert!(matches!(
            CowCells::recover(region.clone()),
            Err(CellError::UnsupportedVersion { found: 2, .. })
        ));
    }

    #[test]
    fn header_fields_are_validated_even_with_a_good_checksum() {
        let p = pool(1 << 16);
        let region = p.data().sub(0, 4096).unwrap();
        for (kind_code, size, stride, what) in [
            (9u8, 16u8, 64u16, "kind code 9"),
            (3, 24, 64, "value size 24"),
            (3, 16, 128, "stride 128"),
        ] {
            let mut b = [0u8; HEADER_LEN];
            b[0..8].copy_from_slice(&MAGIC);
            b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
            b[12] = kind_code;
            b[13] = size;
            b[14..16].copy_from_slice(&stride.to_le_bytes());
            b[16..24].copy_from_slice(&4u64.to_le_bytes());
            let crc = crc32c::crc32c(&b[..24]);
            b[24..28].copy_from_slice(&crc.to_le_bytes());
            region.write(0, &b);
            match recover_any(region.clone()) {
                Err(CellError::BadHeader { what: w }) => assert!(w.contains(what), "{w}"),
                other => panic!("expected BadHeader, got {:?}", other.map(|x| x.1)),
            }
        }
    }

    #[test]
    fn names_parse_back() {
        for k in CellKind::ALL {
            assert_eq!(k.name().parse::<CellKind>(), Ok(k));
        }
        assert!("nope".parse::<CellKind>().is_err());
        for f in Fault::PLANTED {
            assert!(f.kind().is_some() && f.name().starts_with(f.kind().unwrap().name()));
        }
    }
}
