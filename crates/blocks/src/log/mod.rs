//! Persistent write-ahead logs [P0 §3.3]: four algorithms behind one API.
//!
//! A [`Log`] lives in a [`Region`] of a pool. [`Log::append`] returns once the
//! record is durable; [`Log::append_batch`] makes a whole batch durable under
//! one barrier (group commit); [`Log::recover`] reopens a log after a crash
//! and returns its valid prefix; [`Log::truncate`] frees the oldest records so
//! their space is reused (the data area is a ring). [`SharedLog`] is the
//! thread-safe front end.
//!
//! # Algorithms and layouts
//!
//! | [`Variant`]      | append protocol [P0 §3.3.1]                                   | fences: append / batch / truncate |
//! |------------------|---------------------------------------------------------------|-----------------------------------|
//! | `classic-*`      | header+payload, **fence**, footer (LSN), **fence**             | 2 / 2 / 1                         |
//! | `header-*`       | entry, **fence**, size field in the log header, **fence**      | 2 / 2 / 1                         |
//! | `rawl-*`         | 63 payload bits + 1 validity bit per word, **fence**           | 1 / 1 / 1                         |
//! | `poplog-*`       | header + popcount + payload, **fence** (zero-filled area)      | 1 / 1 / 2                         |
//!
//! Layouts: `packed` entries follow each other at 8-byte alignment; `padded`
//! entries start on a cache line, so consecutive appends never flush the same
//! line twice in a row (the slow case on Optane [P0 §3.3.2]); `dancing`
//! (Header only) is padded with the size field spread round-robin over many
//! lines, so the commit store does not hit the same line either; `staged`
//! (PopLog only) is packed, but each append builds its cache lines in DRAM —
//! including the line it shares with the previous entry — and writes them
//! with non-temporal stores, trading a copy for the padding [P0 §3.3.2].
//!
//! A batch needs the same barriers as one record. Classic and Header cannot
//! go below two: their commit mark (footer, size field) is only meaningful if
//! the data it vouches for is already durable, so a barrier must separate the
//! two. RAWL and PopLog validate every entry by its own content and need one.
//!
//! # On-media format (version 1, all integers little-endian)
//!
//! The region must start on a cache line. Offsets are from its start:
//!
//! | offset      | bytes | content                                                        |
//! |-------------|-------|----------------------------------------------------------------|
//! | 0           | 64    | superblock — written once at creation, never again             |
//! | 64          | 64    | head slot A (32 bytes used, rest zero)                         |
//! | 128         | 64    | head slot B                                                    |
//! | 192         | 64·S  | size slots: S = 1 (Header), the dancing count (Header dancing), 0 otherwise |
//! | 192 + 64·S  | C     | data area, C a multiple of 64                                  |
//!
//! Superblock:
//!
//! | bytes  | field                                                             |
//! |--------|-------------------------------------------------------------------|
//! | 0..8   | magic `FERRLOG\0`                                                 |
//! | 8..10  | format version, u16 = 1                                           |
//! | 10     | algorithm, u8: 1 Classic, 2 Header, 3 RAWL, 4 PopLog              |
//! | 11     | layout, u8: 0 packed, 1 padded, 2 dancing, 3 staged               |
//! | 12..16 | S, number of size slots, u32                                      |
//! | 16..24 | data area offset, u64 (= 192 + 64·S)                              |
//! | 24..32 | capacity C, u64                                                   |
//! | 32..40 | nonce, u64, random per log                                        |
//! | 40..60 | reserved, zero                                                    |
//! | 60..64 | crc32c of bytes 0..60                                             |
//!
//! Head slot (where the oldest retained record starts):
//!
//! | bytes  | field                                                             |
//! |--------|-------------------------------------------------------------------|
//! | 0..8   | sequence, u64 (0 = never written)                                 |
//! | 8..16  | head position, u64 (logical, see below)                           |
//! | 16..24 | head LSN, u64                                                     |
//! | 24..28 | crc32c(nonce ‖ bytes 0..24)                                       |
//! | 28..32 | zero                                                              |
//!
//! Head number `n` is written to slot A when `n` is odd and to B when even,
//! so a torn head write (caught by the crc) leaves the previous head intact;
//! recovery takes the valid slot with the larger sequence.
//!
//! Size slot `i` (Header): a u64 at region offset 192 + 64·i holding the
//! logical end position of the log when it was written. Recovery takes the
//! maximum over all slots: positions only grow, so the largest is the newest.
//!
//! **Logical positions.** Entries form a circular byte stream: logical
//! position `p` (a u64 that never wraps) lives at data-area offset `p mod C`,
//! and an entry that runs past the end of the data area continues at its
//! start. The lap of a position is `p / C`. LSNs start at 1 and are
//! consecutive. The live records occupy `[head, tail)`; `[tail, head + C)` is
//! free.
//!
//! **Entries.** Classic, Header and PopLog share a 16-byte entry header:
//!
//! | bytes  | field                                                                   |
//! |--------|-------------------------------------------------------------------------|
//! | 0..8   | LSN, u64                                                                |
//! | 8..12  | payload length, u32                                                     |
//! | 12..16 | check, u32: Classic/Header `crc32c(nonce ‖ LSN ‖ length)`; PopLog the popcount |
//!
//! followed by the payload. Then:
//! - Classic packed: 0–7 pad bytes to an 8-byte boundary (not written: they
//!   keep whatever was there), then the footer, a u64 equal to `LSN ^ nonce`. Classic padded: the entry starts on
//!   a line; the footer is alone at the start of the line after the payload
//!   (so the two barriers flush disjoint lines); the entry ends with that line.
//! - Header: padding to 8 bytes (packed) or to the next line (padded,
//!   dancing), not written.
//! - PopLog: padding to 8 bytes (packed, staged) or to the next line
//!   (padded), zero (the area is). The popcount is the number of set bits in
//!   the LSN, the length and the payload.
//!
//! RAWL entries are 8-byte words, each with its validity bit V in bit 63:
//! - word 0: `V << 63 | (LSN mod 2³¹) << 32 | length`;
//! - words 1..=n, n = ⌈8·length / 63⌉: `V << 63 | 63 payload bits`, where the
//!   payload is read as a bit stream (bit `i` is bit `i mod 8` of byte
//!   `i / 8`) and word `k` carries stream bits `63(k-1) .. 63k`, zero past the end;
//! - padded layout: filler words `V << 63` up to the end of the line.
//!
//! V is 1 for a word whose position is on an even lap and 0 on an odd lap.
//!
//! # Why a record is valid, and how space is reused
//!
//! Recovery scans from the head, expecting consecutive LSNs, and stops at the
//! first entry that is not valid; everything before it is the log.
//!
//! - **Classic**: valid when the header has the expected LSN and a correct
//!   check, and the footer equals `LSN ^ nonce`. The footer is written only
//!   after a barrier made header and payload durable, so a durable footer
//!   vouches for them. *Reuse*: nothing to do. Stale bytes of earlier laps
//!   carry smaller LSNs; the nonce in the check and footer keeps payload bytes
//!   from passing for an entry unless they copy this very log's entries.
//! - **Header**: the records are exactly those in `[head, max size slot)`.
//!   The slot is stored only after a barrier made the entries durable.
//!   *Reuse*: nothing to do — the size slot, not the data, says what is
//!   valid; bytes past it are never interpreted.
//! - **RAWL** [P0 §3.3.1]: valid when every word of the entry (fillers
//!   included) carries the validity bit of its lap and word 0 has the
//!   expected LSN. An 8-byte store is failure atomic, so each word is either
//!   new or what was there before. *Reuse*: the meaning of the validity bit
//!   flips every lap, and every word of a lap is written (entries abut;
//!   padded entries write their fillers), so before the tail reaches a word
//!   it holds the previous lap's bit — invalid — and the area never needs
//!   zeroing. Recovery rewrites, with the invalid bit, any word in the free
//!   space that a crashed append left with a valid bit (the *scrub*).
//! - **PopLog** [P0 §3.3.1]: valid when the header has the expected LSN and
//!   the popcount matches. The free area is zero, so a line (or word) of the
//!   entry that did not become durable reads as zero and can only lower the
//!   count. *Reuse*: the zero-fill invariant is kept by [`Log::truncate`],
//!   which zeroes the space it frees after the new head is durable (a second
//!   barrier), and by recovery, which zeroes whatever a crashed append left
//!   in the free space. A generation number in the header would not do: a
//!   stale line from an earlier lap can add exactly the bits a missing line
//!   takes away.
//!
//! Recovery of RAWL and PopLog therefore reads the whole free area once
//! (where a crashed batch may have left words) and writes only the words it
//! must clear, under one barrier; it is idempotent. Classic and Header
//! recovery only read.
//!
//! A batch is not atomic under RAWL, PopLog and Classic: after a crash a
//! prefix of it may be present. Under Header it is all or nothing.
//!
//! # Creation
//!
//! [`Log::create`] invalidates the superblock, zero-fills the data area
//! (RAWL and PopLog only: the other two never interpret stale bytes), writes
//! head slot A (sequence 1, position 0, LSN 1), clears slot B and the size
//! slots, fences, then writes and persists the superblock. A crash while
//! formatting leaves a region that is not a log ([`LogError::NotALog`] or a
//! checksum error), never a log with stale content.
//!
//! Staged PopLog writes whole lines, so it never appends into the line that
//! holds the head: [`Log::free_bytes`] ends at that line's start.

mod area;
mod classic;
mod format;
/// `FERRLOG\0`: the magic a log superblock starts with (for recognising a log).
pub const MAGIC: [u8; 8] = format::MAGIC;
mod header;
mod poplog;
mod rawl;
mod shared;

#[cfg(any(test, feature = "checks"))]
pub mod checks;

pub use shared::SharedLog;

mod fault;
// Planted bugs exist for the crash checks only: outside the `checks` feature
// (and this crate's tests) they are not part of the API.
#[cfg(feature = "checks")]
pub use fault::Fault;
#[cfg(not(feature = "checks"))]
pub(crate) use fault::Fault;

use ferrite_pmem::{CACHE_LINE, Region};
use format::{Geometry, HeadSlot, MIN_CAPACITY, SLOT_LEN, Superblock};
use std::fmt;
use std::str::FromStr;

/// Largest record any log accepts (so a PopLog popcount fits in 32 bits).
pub const MAX_RECORD: usize = 1 << 28;

/// Default number of dancing size slots [P0 §3.3.2 uses 64].
pub const DEFAULT_DANCING_SLOTS: u32 = 64;

const LINE: u64 = CACHE_LINE as u64;
/// Size of the common entry header (Classic, Header, PopLog).
const ENTRY_HEADER: u64 = 16;

/// A log sequence number. The first record of a new log has LSN 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Lsn(pub u64);

impl Lsn {
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The LSNs `start..end` given to a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LsnRange {
    pub start: Lsn,
    pub end: Lsn,
}

impl LsnRange {
    pub fn len(&self) -> usize {
        (self.end.0 - self.start.0) as usize
    }
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
    pub fn contains(&self, l: Lsn) -> bool {
        self.start <= l && l < self.end
    }
    pub fn iter(&self) -> impl Iterator<Item = Lsn> + use<> {
        (self.start.0..self.end.0).map(Lsn)
    }
}

/// The four logging algorithms of [P0 §3.3].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    Classic,
    Header,
    Rawl,
    PopLog,
}

impl Algorithm {
    pub const ALL: [Algorithm; 4] = [
        Algorithm::Classic,
        Algorithm::Header,
        Algorithm::Rawl,
        Algorithm::PopLog,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Classic => "classic",
            Algorithm::Header => "header",
            Algorithm::Rawl => "rawl",
            Algorithm::PopLog => "poplog",
        }
    }

    /// Every variant (layout) of this algorithm.
    pub fn variants(self) -> &'static [Variant] {
        let all = &Variant::ALL;
        match self {
            Algorithm::Classic => &all[0..2],
            Algorithm::Header => &all[2..5],
            Algorithm::Rawl => &all[5..7],
            Algorithm::PopLog => &all[7..10],
        }
    }

    /// Fences per append (and per batch) on a flushing domain.
    pub fn fences_per_append(self) -> u32 {
        match self {
            Algorithm::Classic | Algorithm::Header => 2,
            Algorithm::Rawl | Algorithm::PopLog => 1,
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = LogError;
    fn from_str(s: &str) -> Result<Self, LogError> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| LogError::UnknownVariant(s.to_string()))
    }
}

/// How entries are placed (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    Packed,
    Padded,
    /// Header only: padded entries and round-robin size slots.
    Dancing,
    /// PopLog only: packed entries written as whole lines with non-temporal stores.
    Staged,
}

/// An algorithm in one of its layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    pub algorithm: Algorithm,
    pub layout: Layout,
}

impl Variant {
    pub const CLASSIC_PACKED: Variant = Variant::of(Algorithm::Classic, Layout::Packed);
    pub const CLASSIC_PADDED: Variant = Variant::of(Algorithm::Classic, Layout::Padded);
    pub const HEADER_PACKED: Variant = Variant::of(Algorithm::Header, Layout::Packed);
    pub const HEADER_PADDED: Variant = Variant::of(Algorithm::Header, Layout::Padded);
    pub const HEADER_DANCING: Variant = Variant::of(Algorithm::Header, Layout::Dancing);
    pub const RAWL_PACKED: Variant = Variant::of(Algorithm::Rawl, Layout::Packed);
    pub const RAWL_PADDED: Variant = Variant::of(Algorithm::Rawl, Layout::Padded);
    pub const POPLOG_PACKED: Variant = Variant::of(Algorithm::PopLog, Layout::Packed);
    pub const POPLOG_PADDED: Variant = Variant::of(Algorithm::PopLog, Layout::Padded);
    pub const POPLOG_STAGED: Variant = Variant::of(Algorithm::PopLog, Layout::Staged);

    /// All ten variants, grouped by algorithm.
    pub const ALL: [Variant; 10] = [
        Variant::CLASSIC_PACKED,
        Variant::CLASSIC_PADDED,
        Variant::HEADER_PACKED,
        Variant::HEADER_PADDED,
        Variant::HEADER_DANCING,
        Variant::RAWL_PACKED,
        Variant::RAWL_PADDED,
        Variant::POPLOG_PACKED,
        Variant::POPLOG_PADDED,
        Variant::POPLOG_STAGED,
    ];

    const fn of(algorithm: Algorithm, layout: Layout) -> Variant {
        Variant { algorithm, layout }
    }

    /// A variant, if the layout exists for the algorithm.
    pub fn new(algorithm: Algorithm, layout: Layout) -> Result<Variant, LogError> {
        let v = Variant::of(algorithm, layout);
        if Variant::ALL.contains(&v) {
            Ok(v)
        } else {
            Err(LogError::UnknownVariant(format!(
                "{} has no {layout:?} layout",
                algorithm.name()
            )))
        }
    }

    /// `classic-packed`, `header-dancing`, `poplog-staged`, …
    pub fn name(self) -> &'static str {
        const NAMES: [&str; 10] = [
            "classic-packed",
            "classic-padded",
            "header-packed",
            "header-padded",
            "header-dancing",
            "rawl-packed",
            "rawl-padded",
            "poplog-packed",
            "poplog-padded",
            "poplog-staged",
        ];
        let i = Variant::ALL
            .iter()
            .position(|v| *v == self)
            .expect("variants are validated at construction");
        NAMES[i]
    }

    /// True when entries start on cache lines.
    pub fn padded(self) -> bool {
        matches!(self.layout, Layout::Padded | Layout::Dancing)
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Variant {
    type Err = LogError;
    fn from_str(s: &str) -> Result<Self, LogError> {
        Variant::ALL
            .into_iter()
            .find(|v| v.name() == s)
            .ok_or_else(|| LogError::UnknownVariant(s.to_string()))
    }
}

/// Errors of the log (ARCHITECTURE.md, rule 7).
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("record of {len} bytes is larger than this log can ever hold ({max} bytes)")]
    RecordTooLarge { len: usize, max: usize },
    #[error("log full: {needed} bytes needed, {free} free (truncate to make room)")]
    Full { needed: u64, free: u64 },
    #[error("region of {len} bytes is too small for this log (at least {min} needed)")]
    RegionTooSmall { len: usize, min: usize },
    #[error("log region must start on a cache line (it starts at pool offset {base:#x})")]
    Misaligned { base: usize },
    #[error("not a Ferrite log (bad magic)")]
    NotALog,
    #[error("unsupported log format version {found} (this build reads version {supported})")]
    UnsupportedVersion { found: u16, supported: u16 },
    #[error("log {what} checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        what: &'static str,
        stored: u32,
        computed: u32,
    },
    #[error("corrupt log: {0}")]
    Corrupt(String),
    #[error("LSN {lsn} is outside the log [{first}, {next})")]
    LsnOutOfRange { lsn: Lsn, first: Lsn, next: Lsn },
    #[error("unknown log variant '{0}'")]
    UnknownVariant(String),
    #[error("invalid log option: {0}")]
    BadOption(String),
}

pub type Result<T, E = LogError> = std::result::Result<T, E>;

/// How to create a log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogOptions {
    pub variant: Variant,
    /// Size slots of the `header-dancing` variant (ignored otherwise), 2..=1024.
    pub dancing_slots: u32,
    /// Fixed nonce (for reproducible images); random when `None`.
    pub nonce: Option<u64>,
}

impl LogOptions {
    pub fn new(variant: Variant) -> LogOptions {
        LogOptions {
            variant,
            dancing_slots: DEFAULT_DANCING_SLOTS,
            nonce: None,
        }
    }

    pub fn nonce(mut self, n: u64) -> LogOptions {
        self.nonce = Some(n);
        self
    }

    fn slots(&self) -> u32 {
        match self.variant.layout {
            Layout::Dancing => self.dancing_slots,
            _ if self.variant.algorithm == Algorithm::Header => 1,
            _ => 0,
        }
    }

    /// Bytes of metadata before the data area.
    pub fn metadata_len(&self) -> usize {
        Geometry::meta_len(self.slots())
    }

    /// Region length needed for a data area of `capacity` bytes (rounded up
    /// to a multiple of 64).
    pub fn region_len(&self, capacity: usize) -> usize {
        self.metadata_len() + capacity.next_multiple_of(CACHE_LINE)
    }
}

/// The in-memory head: where the oldest retained record starts.
#[derive(Clone, Copy, Debug)]
struct Head {
    seq: u64,
    pos: u64,
    lsn: u64,
}

/// A persistent log. See the module documentation.
pub struct Log {
    region: Region,
    variant: Variant,
    geo: Geometry,
    nonce: u64,
    head: Head,
    /// Logical end of the last durable record.
    tail: u64,
    next: u64,
    /// Next dancing size slot.
    dance: u32,
    /// DRAM staging for RAWL words and staged PopLog lines (reused: the hot
    /// path does not allocate once it has grown).
    buf: Vec<u8>,
    /// Staged PopLog: DRAM copy of the line holding `tail` (the bytes before
    /// `tail` belong to the previous entry and are rewritten unchanged).
    tail_line: [u8; CACHE_LINE],
    #[cfg(any(test, feature = "checks"))]
    fault: Fault,
}

impl fmt::Debug for Log {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Log")
            .field("variant", &self.variant.name())
            .field("capacity", &self.geo.cap)
            .field("first", &self.head.lsn)
            .field("next", &self.next)
            .field("head_pos", &self.head.pos)
            .field("tail_pos", &self.tail)
            .finish()
    }
}

fn align8(n: u64) -> u64 {
    n.next_multiple_of(8)
}

fn align_line(n: u64) -> u64 {
    n.next_multiple_of(LINE)
}

fn random_nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded from the OS once per process and perturbed per
    // instance; mixing in the time makes nonces of logs created in different
    // processes differ too.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    h.write_u64(t);
    h.finish()
}

impl Log {
    // ---- creation and recovery ---------------------------------------------

    /// Formats a new, empty log of `variant` filling `region`.
    pub fn create(region: Region, variant: Variant) -> Result<Log> {
        Log::create_with(region, LogOptions::new(variant))
    }

    /// Formats a new, empty log: zero-fills the data area where the algorithm
    /// needs it (RAWL, PopLog), writes the head and size slots, then the
    /// superblock (two fences). The region's previous content is lost.
    pub fn create_with(region: Region, opts: LogOptions) -> Result<Log> {
        let variant = Variant::new(opts.variant.algorithm, opts.variant.layout)?;
        if variant.layout == Layout::Dancing && !(2..=1024).contains(&opts.dancing_slots) {
            return Err(LogError::BadOption(format!(
                "dancing_slots must be in 2..=1024, not {}",
                opts.dancing_slots
            )));
        }
        if !region.is_line_aligned(0) {
            return Err(LogError::Misaligned {
                base: region.base(),
            });
        }
        let slots = opts.slots();
        let data_off = Geometry::meta_len(slots);
        let min = data_off + MIN_CAPACITY as usize;
        if region.len() < min {
            return Err(LogError::RegionTooSmall {
                len: region.len(),
                min,
            });
        }
        let cap = ((region.len() - data_off) / CACHE_LINE * CACHE_LINE) as u64;
        let geo = Geometry {
            slots,
            data_off,
            cap,
        };
        let nonce = opts.nonce.unwrap_or_else(random_nonce);
        // Invalidate any superblock first, so a crash while formatting leaves
        // something that is not a log rather than a mix of old and new.
        region.write(format::SUPER_OFF, &[0u8; CACHE_LINE]);
        region.persist(format::SUPER_OFF, CACHE_LINE);
        if matches!(variant.algorithm, Algorithm::Rawl | Algorithm::PopLog) {
            region.fill_nodrain(data_off, cap as usize, 0);
        }
        let head = Head {
            seq: 1,
            pos: 0,
            lsn: 1,
        };
        let a = HeadSlot {
            seq: head.seq,
            pos: head.pos,
            lsn: head.lsn,
        }
        .encode(nonce);
        region.write(format::SLOT_A_OFF, &a);
        region.write(format::SLOT_B_OFF, &[0u8; SLOT_LEN]);
        region.flush(format::SLOT_A_OFF, 2 * CACHE_LINE);
        for i in 0..slots as usize {
            region.store_u64(format::SIZE_SLOTS_OFF + i * CACHE_LINE, 0);
        }
        if slots > 0 {
            region.flush(format::SIZE_SLOTS_OFF, slots as usize * CACHE_LINE);
        }
        region.fence();
        let sb = Superblock {
            variant,
            geo,
            nonce,
        };
        region.write(format::SUPER_OFF, &sb.encode());
        region.persist(format::SUPER_OFF, CACHE_LINE);
        Ok(Log::assemble(region, sb, head, 0, 1))
    }

    fn assemble(region: Region, sb: Superblock, head: Head, tail: u64, next: u64) -> Log {
        Log {
            region,
            variant: sb.variant,
            geo: sb.geo,
            nonce: sb.nonce,
            head,
            tail,
            next,
            dance: 0,
            buf: Vec::new(),
            tail_line: [0u8; CACHE_LINE],
            #[cfg(any(test, feature = "checks"))]
            fault: Fault::None,
        }
    }

    /// Reopens the log in `region` after a shutdown or crash: finds the head,
    /// then the valid prefix of records after it (see the module
    /// documentation for what "valid" means per algorithm), and for RAWL and
    /// PopLog clears what a crashed append left in the free space. Idempotent.
    pub fn recover(region: Region) -> Result<Log> {
        Log::recover_inner(region, Fault::None)
    }

    /// [`Log::recover`] with a planted bug (crash-check tests only).
    #[cfg(any(test, feature = "checks"))]
    pub fn recover_with_fault(region: Region, fault: Fault) -> Result<Log> {
        Log::recover_inner(region, fault)
    }

    fn recover_inner(region: Region, fault: Fault) -> Result<Log> {
        let _ = fault;
        if !region.is_line_aligned(0) {
            return Err(LogError::Misaligned {
                base: region.base(),
            });
        }
        if region.len() < CACHE_LINE {
            return Err(LogError::RegionTooSmall {
                len: region.len(),
                min: Geometry::meta_len(0) + MIN_CAPACITY as usize,
            });
        }
        let mut line = [0u8; CACHE_LINE];
        region.read(format::SUPER_OFF, &mut line);
        let sb = Superblock::decode(&line, region.len())?;
        let mut slot = [0u8; SLOT_LEN];
        region.read(format::SLOT_A_OFF, &mut slot);
        let a = HeadSlot::decode(&slot, sb.nonce);
        region.read(format::SLOT_B_OFF, &mut slot);
        let b = HeadSlot::decode(&slot, sb.nonce);
        let h = match (a, b) {
            (Some(a), Some(b)) => {
                if a.seq > b.seq {
                    a
                } else {
                    b
                }
            }
            (Some(s), None) | (None, Some(s)) => s,
            (None, None) => return Err(LogError::Corrupt("no valid head slot".into())),
        };
        // Every extent is a multiple of 8 bytes and positions only grow from
        // 0, so a head position that is unaligned or absurdly far is damage
        // (or a crafted slot), not a crash state: refuse it rather than
        // read words across entries or overflow `pos + cap`.
        if !h.pos.is_multiple_of(8) || h.pos >= 1 << 62 || h.lsn >= 1 << 62 {
            return Err(LogError::Corrupt(format!(
                "head slot position {} / LSN {} impossible",
                h.pos, h.lsn
            )));
        }
        let head = Head {
            seq: h.seq,
            pos: h.pos,
            lsn: h.lsn,
        };
        let mut log = Log::assemble(region, sb, head, head.pos, head.lsn);
        #[cfg(any(test, feature = "checks"))]
        {
            log.fault = fault;
        }
        match log.variant.algorithm {
            Algorithm::Header => log.header_recover()?,
            _ => {
                let limit = log.head.pos + log.geo.cap;
                let (mut pos, mut lsn) = (log.head.pos, log.head.lsn);
                let mut scratch = Vec::new();
                while let Some(ext) = log.probe(pos, lsn, limit, &mut scratch) {
                    pos += ext;
                    lsn += 1;
                }
                log.tail = pos;
                log.next = lsn;
            }
        }
        match log.variant.algorithm {
            Algorithm::Rawl => log.rawl_scrub(),
            Algorithm::PopLog => log.poplog_scrub(),
            _ => {}
        }
        if log.variant.layout == Layout::Staged {
            log.reload_tail_line();
        }
        Ok(log)
    }

    /// Plants a bug in this log's writers (crash-check tests only).
    #[cfg(any(test, feature = "checks"))]
    pub fn set_fault(&mut self, fault: Fault) {
        self.fault = fault;
    }

    #[inline(always)]
    fn faulty(&self, f: Fault) -> bool {
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

    /// Is the entry at `pos` with LSN `lsn` valid and entirely below `limit`?
    /// Returns its extent.
    fn probe(&self, pos: u64, lsn: u64, limit: u64, scratch: &mut Vec<u8>) -> Option<u64> {
        match self.variant.algorithm {
            Algorithm::Classic => self.classic_probe(pos, lsn, limit),
            Algorithm::Rawl => self.rawl_probe(pos, lsn, limit),
            Algorithm::PopLog => self.poplog_probe(pos, lsn, limit, scratch),
            Algorithm::Header => unreachable!("Header validity comes from its size slots"),
        }
    }

    // ---- accessors -----------------------------------------------------------

    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// LSN of the oldest retained record (equals [`next_lsn`](Self::next_lsn)
    /// when the log is empty).
    pub fn first_lsn(&self) -> Lsn {
        Lsn(self.head.lsn)
    }

    /// LSN the next append will get.
    pub fn next_lsn(&self) -> Lsn {
        Lsn(self.next)
    }

    /// Number of retained records.
    pub fn len(&self) -> u64 {
        self.next - self.head.lsn
    }

    pub fn is_empty(&self) -> bool {
        self.next == self.head.lsn
    }

    /// Bytes in the data area.
    pub fn capacity(&self) -> u64 {
        self.geo.cap
    }

    /// Bytes occupied by retained records (padding and per-entry overhead included).
    pub fn used_bytes(&self) -> u64 {
        self.tail - self.head.pos
    }

    /// Bytes available to appends. Staged PopLog cannot use the rest of the
    /// head's line: it writes whole lines, and that one holds live bytes.
    pub fn free_bytes(&self) -> u64 {
        let head = if self.variant.layout == Layout::Staged {
            self.head.pos / LINE * LINE
        } else {
            self.head.pos
        };
        head + self.geo.cap - self.tail
    }

    pub fn region(&self) -> &Region {
        &self.region
    }

    /// Largest record this log can hold (when empty).
    pub fn max_record_len(&self) -> usize {
        let cap = self.geo.cap;
        let max = match self.variant.algorithm {
            Algorithm::Classic if self.variant.padded() => cap - ENTRY_HEADER - LINE,
            Algorithm::Classic => cap - ENTRY_HEADER - 8,
            // Staged keeps one line in reserve (see `free_bytes`).
            Algorithm::PopLog if self.variant.layout == Layout::Staged => cap - ENTRY_HEADER - LINE,
            Algorithm::Header | Algorithm::PopLog => cap - ENTRY_HEADER,
            // 63 bits per word after the header word.
            Algorithm::Rawl => (cap / 8 - 1) * 63 / 8,
        };
        (max as usize).min(MAX_RECORD)
    }

    /// Bytes of the data area an entry with a `len`-byte payload occupies.
    pub fn entry_extent(&self, len: usize) -> u64 {
        let len = len as u64;
        let padded = self.variant.padded();
        match self.variant.algorithm {
            Algorithm::Classic if padded => align_line(ENTRY_HEADER + len) + LINE,
            Algorithm::Classic => ENTRY_HEADER + align8(len) + 8,
            Algorithm::Header | Algorithm::PopLog if padded => align_line(ENTRY_HEADER + len),
            Algorithm::Header | Algorithm::PopLog => ENTRY_HEADER + align8(len),
            Algorithm::Rawl => {
                let words = 8 * (1 + rawl::payload_words(len));
                if padded { align_line(words) } else { words }
            }
        }
    }

    // ---- appending -----------------------------------------------------------

    /// Appends one record and returns its LSN once it is durable.
    #[inline]
    pub fn append(&mut self, record: &[u8]) -> Result<Lsn> {
        self.append_batch(std::slice::from_ref(&record))
            .map(|r| r.start)
    }

    /// Appends `records` with consecutive LSNs and returns once all are
    /// durable, under the barriers of a single append (group commit). Either
    /// every record is admitted or, on error, none is written.
    pub fn append_batch(&mut self, records: &[&[u8]]) -> Result<LsnRange> {
        let start = Lsn(self.next);
        if records.is_empty() {
            return Ok(LsnRange { start, end: start });
        }
        // A durable append is the log's commit (persist traces, [P4]).
        let scope = ferrite_pmem::trace::commit_scope();
        let max = self.max_record_len();
        let mut need = 0u64;
        for r in records {
            if r.len() > max {
                return Err(LogError::RecordTooLarge { len: r.len(), max });
            }
            need += self.entry_extent(r.len());
        }
        let free = self.free_bytes();
        if need > free {
            return Err(LogError::Full { needed: need, free });
        }
        let end_pos = match self.variant.algorithm {
            Algorithm::Classic => self.classic_batch(records),
            Algorithm::Header => self.header_batch(records),
            Algorithm::Rawl => self.rawl_batch(records),
            Algorithm::PopLog if self.variant.layout == Layout::Staged => {
                self.poplog_staged_batch(records)
            }
            Algorithm::PopLog => self.poplog_batch(records),
        };
        debug_assert_eq!(end_pos, self.tail + need);
        self.tail = end_pos;
        self.next += records.len() as u64;
        scope.mark();
        Ok(LsnRange {
            start,
            end: Lsn(self.next),
        })
    }

    // ---- truncation ------------------------------------------------------------

    /// Drops every record with an LSN below `new_first`, making its space
    /// reusable; afterwards [`first_lsn`](Self::first_lsn) is `new_first`.
    /// A `new_first` at or below the current first LSN does nothing.
    ///
    /// Persists the new head in the alternate head slot (one fence); PopLog
    /// then zeroes the freed space to keep its zero-fill invariant (a second
    /// fence). The head goes first: zeroing records that a crash could still
    /// bring back as the log's start would lose the records after them.
    pub fn truncate(&mut self, new_first: Lsn) -> Result<()> {
        if new_first.0 > self.next {
            return Err(LogError::LsnOutOfRange {
                lsn: new_first,
                first: self.first_lsn(),
                next: self.next_lsn(),
            });
        }
        if new_first.0 <= self.head.lsn {
            return Ok(());
        }
        let pos = self.position_of(new_first.0);
        let head = Head {
            seq: self.head.seq + 1,
            pos,
            lsn: new_first.0,
        };
        let slot = HeadSlot {
            seq: head.seq,
            pos: head.pos,
            lsn: head.lsn,
        }
        .encode(self.nonce);
        let off = HeadSlot::offset_for(head.seq);
        self.region.write(off, &slot);
        self.region.persist(off, SLOT_LEN);
        let old = self.head.pos;
        self.head = head;
        if self.variant.algorithm == Algorithm::PopLog {
            self.zero_span_nodrain(old, (pos - old) as usize);
            self.region.fence();
            if self.variant.layout == Layout::Staged {
                self.reload_tail_line();
            }
        }
        Ok(())
    }

    /// Staged PopLog: refresh the DRAM copy of the tail line from the medium.
    fn reload_tail_line(&mut self) {
        let start = self.tail / LINE * LINE;
        let mut line = [0u8; CACHE_LINE];
        self.get(start, &mut line);
        self.tail_line = line;
    }

    // ---- reading -----------------------------------------------------------------

    /// Iterates over all retained records in LSN order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            log: self,
            pos: self.head.pos,
            lsn: self.head.lsn,
        }
    }

    /// Iterates from record `from` (inclusive) to the end.
    pub fn iter_from(&self, from: Lsn) -> Result<Iter<'_>> {
        if from.0 < self.head.lsn || from.0 > self.next {
            return Err(LogError::LsnOutOfRange {
                lsn: from,
                first: self.first_lsn(),
                next: self.next_lsn(),
            });
        }
        Ok(Iter {
            log: self,
            pos: self.position_of(from.0),
            lsn: from.0,
        })
    }

    /// Copies record `lsn` into `out`.
    pub fn read(&self, lsn: Lsn, out: &mut Vec<u8>) -> Result<()> {
        if lsn.0 < self.head.lsn || lsn.0 >= self.next {
            return Err(LogError::LsnOutOfRange {
                lsn,
                first: self.first_lsn(),
                next: self.next_lsn(),
            });
        }
        self.read_payload(self.position_of(lsn.0), out);
        Ok(())
    }

    /// Checks the invariant that makes the free space safe to reuse (PopLog:
    /// zero; RAWL: every word carries the invalid bit of its lap). For the
    /// crash checks.
    #[doc(hidden)]
    pub fn audit_free_space(&self) -> std::result::Result<(), String> {
        let limit = self.head.pos + self.geo.cap;
        match self.variant.algorithm {
            Algorithm::PopLog => {
                for pos in (self.tail..limit).step_by(8) {
                    if self.word(pos) != 0 {
                        return Err(format!(
                            "free word at position {pos} is not zero (tail {}, head {})",
                            self.tail, self.head.pos
                        ));
                    }
                }
            }
            Algorithm::Rawl => {
                for pos in (self.tail..limit).step_by(8) {
                    if self.word(pos) >> 63 == self.rawl_valid_bit(pos) {
                        return Err(format!(
                            "free word at position {pos} looks valid (tail {}, head {})",
                            self.tail, self.head.pos
                        ));
                    }
                }
            }
            Algorithm::Classic | Algorithm::Header => {}
        }
        Ok(())
    }
}

/// Iterator over `(LSN, payload)` of retained records.
pub struct Iter<'a> {
    log: &'a Log,
    pos: u64,
    lsn: u64,
}

impl Iter<'_> {
    /// Reads the next record into `out`, reusing its allocation.
    pub fn next_into(&mut self, out: &mut Vec<u8>) -> Option<Lsn> {
        if self.lsn >= self.log.next {
            return None;
        }
        self.log.read_payload(self.pos, out);
        self.pos += self.log.entry_extent(out.len());
        self.lsn += 1;
        Some(Lsn(self.lsn - 1))
    }
}

impl Iterator for Iter<'_> {
    type Item = (Lsn, Vec<u8>);
    fn next(&mut self) -> Option<(Lsn, Vec<u8>)> {
        let mut v = Vec::new();
        self.next_into(&mut v).map(|l| (l, v))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.log.next - self.lsn) as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Iter<'_> {}

#[cfg(test)]
mod tests;
