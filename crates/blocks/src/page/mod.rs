//! Failure-atomic page propagation [P0 §3.2]: copy-on-write with page
//! version numbers, the micro-log, and the hybrid that picks between them.
//!
//! A [`PageStore`] keeps `pages` fixed-size pages (4 KiB and 16 KiB are the
//! sizes of the paper; any multiple of 64 bytes from 256 B to 64 KiB works)
//! in a [`Region`]. It is the persistent side of a buffer manager: the
//! manager owns DRAM copies of pages and tracks which cache lines it
//! modified ([`DirtyLines`]); [`PageStore::write_page`] propagates a DRAM
//! page to persistent memory and returns once it is durable;
//! [`PageStore::read_page`] loads one. [`PageStore::open`] recovers a store
//! after a crash.
//!
//! **Guarantee.** After any crash, once `open` has returned, every page
//! reads entirely as the content of its last `write_page` that returned, or
//! — for a write in flight at the crash — entirely as that write's
//! content; never a mix, and never anything older. A page never written
//! reads as zeros.
//!
//! # Algorithms ([`PageAlgorithm`])
//!
//! `P` is the page size, `k` the number of dirty lines.
//!
//! | algorithm | protocol | fences per write | bytes written back |
//! |-----------|----------|------------------|--------------------|
//! | `cow`      | page → a free slot (non-temporal), header word 0 (`pid`, crc) · **fence** · header word 1 (`pvn`), flush · **fence** | 2 | `P` + one header line |
//! | `microlog` | entry (fixed part, line index, the `k` lines; crc32c) → the writer's lane (non-temporal) · **fence** · the `k` lines in place (non-temporal) and the slot header set to the new `pvn`, flush · **fence** | 2 | `2·64k` + the entry's head (one line for `k ≤ 16`) + one header line |
//! | `hybrid`   | micro-log when `k` is below the crossover for the number of writers running, else copy-on-write | 2 | |
//!
//! **Copy-on-write** [P0 §3.2.2, Listing 1, Fig. 6] never overwrites the
//! live copy of a page: the new version goes to a free *slot*, and the
//! slot's header — page id (`pid`) and page version number (`pvn`) on one
//! cache line — makes it the newest. The slot's previous header is not
//! invalidated first (the barrier the `pvn` saves): it names an older
//! version of some page than that page's live slot does, so it is ignored
//! whatever state the payload is in. The `pid` word is ordered before the
//! `pvn` word by a fence, as in Listing 1; Ferrite makes that same fence
//! the payload's barrier, which saves the paper's third fence. What allows
//! it: the header's crc covers `pid` and `pvn`, and no two writes get the
//! same `pvn` (see *Versions*), so a line holding the new `pid` word with
//! the old `pvn` word (Fig. 6 state 3) — or, under 8-byte tearing, the old
//! `pid` word with the new `pvn` word — is never a valid header (short of
//! a crc32c collision, odds 2⁻³²). The header is valid only once its `pvn`
//! word is, and that word is stored after the fence that made the payload
//! durable. (With per-page counters, as in the
//! paper, the old header's version can equal the new one; state 3 is then
//! a valid header and needs the payload durable first — the paper's
//! separate barrier.) A never-written page has no slot, so its first write
//! is a copy-on-write whatever the algorithm. Copy-on-write writes the
//! whole page (every line resident in DRAM, the paper's faster variant)
//! and ignores the mask.
//!
//! **Micro-log** [P0 §3.2.3] logs only the dirty lines, then writes them
//! in place. The paper's version needs four barriers (invalidate the log,
//! write it, validate it, write in place). Here the entry validates itself
//! — a crc32c over the whole entry and the store's nonce — and records the
//! version it produces, so two suffice: a torn entry fails its crc, and
//! recovery replays an entry only when it is not older than its page's
//! newest header (an older one was superseded by a later write). The
//! in-place lines and the new header share one barrier: whatever subset
//! of them a crash leaves, the entry is durable and completes them. With an
//! empty mask, the micro-log (and the hybrid) write nothing.
//!
//! **Versions.** A page's versions grow with its writes, and no two writes
//! of the store share one: lane `l` of `W` hands out only versions `≡ l
//! (mod W)`, each above both the page's current version and the lane's
//! previous one. Unique versions without a shared counter keep writers of
//! different pages off each other's cache lines.
//!
//! **Lanes.** Each concurrent writer holds a *lane*: its own micro-log
//! area, its own version series, and one free slot of its own — the
//! target of its next copy-on-write, replaced by the slot that write
//! frees. A dedicated area per writer — rather than the shared
//! [`PopLog`](crate::log) — because the micro-log needs exactly one entry
//! per writer at a time: there is nothing to truncate, no zero-fill to keep
//! up (PopLog writes every log byte twice, once as zero), and writers never
//! queue on a shared log's lock.
//!
//! **Hybrid** [P0 Fig. 7]. The cost of copy-on-write is flat in `k` (it
//! writes the page), the micro-log's grows with `k` (it writes each dirty
//! line twice), so the micro-log wins below a crossover `k*`. The crossover
//! depends on the machine and on the number of concurrent writers (the
//! paper: 28 lines for one thread, 40 for several, 16 KiB pages on
//! Optane). The store keeps two, for one writer and for several
//! ([`Crossover`]); a write uses the micro-log iff its page has a slot and
//! `k < k*(hybrid writers running now)`. The crossovers are recorded in the
//! superblock at creation — either given ([`CrossoverSource::Fixed`], or
//! by default [`Crossover::default_for`] the page size, measured on the
//! development machine) or measured right then
//! ([`CrossoverSource::Calibrate`]: a few milliseconds of both protocols
//! on scratch slots, one and two threads) — and can be changed at run time
//! ([`PageStore::set_crossover`]).
//!
//! # On-media format (version 1, all integers little-endian)
//!
//! The region must start on a cache line. `S` slots (at least `pages +
//! lanes`), `W` lanes, `L = P / 64` lines per page:
//!
//! | offset | bytes | content |
//! |--------|-------|---------|
//! | 0 | 64 | superblock, written once at creation |
//! | 64 | 64·S | slot headers, one line per slot |
//! | `lanes_off` = 64 + 64·S | W·`lane_len` | lanes; `lane_len` = round_up(32 + 2L, 64) + P |
//! | `payload_off` = round_up(end of lanes, 4096) | S·P | slot payloads; slot `i` at `payload_off + i·P` |
//!
//! Superblock:
//!
//! | bytes | field |
//! |-------|-------|
//! | 0..8 | magic `FERPAGE\0` |
//! | 8..10 | format version, u16 = 1 |
//! | 10 | default algorithm, u8: 1 cow, 2 microlog, 3 hybrid |
//! | 11 | reserved, zero |
//! | 12..16 | page size P, u32 |
//! | 16..20 | pages, u32 |
//! | 20..24 | slots S, u32 |
//! | 24..28 | lanes W, u32 |
//! | 28..30 | crossover for one writer, u16 (dirty lines) |
//! | 30..32 | crossover for several writers, u16 |
//! | 32..40 | nonce, u64, random per store |
//! | 40..60 | reserved, zero |
//! | 60..64 | crc32c of bytes 0..60 |
//!
//! Slot header (the rest of the line is zero):
//!
//! | bytes | field |
//! |-------|-------|
//! | 0..4 | `pid`, u32 |
//! | 4..8 | crc32c(nonce u64 ‖ slot index u32 ‖ `pid` u32 ‖ `pvn` u64) |
//! | 8..16 | `pvn`, u64; 0 = never written |
//!
//! A header is *valid* when `pvn ≥ 1`, `pid < pages` and the crc matches.
//! Bytes 0..8 and 8..16 are each stored with one atomic 8-byte store.
//!
//! Micro-log entry (at the start of its lane):
//!
//! | bytes | field |
//! |-------|-------|
//! | 0..4 | crc32c(nonce u64 ‖ bytes 4..32+2k ‖ the `k` data lines) |
//! | 4..8 | `pid`, u32 |
//! | 8..16 | `pvn` this write produces, u64 |
//! | 16..20 | slot written in place, u32 |
//! | 20..22 | `k`, u16, 1..=L |
//! | 22..32 | reserved, zero |
//! | 32..32+2k | line numbers, u16 each, strictly ascending, < L |
//! | up to D = round_up(32+2k, 64) | zero |
//! | D..D+64k | the `k` lines, in the order of the index |
//!
//! An entry is *valid* when its fields are in range and its crc matches.
//!
//! # Recovery ([`PageStore::open`])
//!
//! 1. Validate the superblock.
//! 2. For each page, the valid slot header with the highest `pvn` is its
//!    live slot (highest version wins; torn and stale headers lose).
//! 3. For each page, take its valid lane entry with the highest `pvn`; if
//!    that `pvn` is at least the live header's (or the page has none),
//!    replay it: write its lines into the slot it names and rewrite that
//!    slot's header to `(pid, pvn)`. **Fence** if anything was replayed.
//! 4. Scrub: zero every lane's first line and the header of every slot that
//!    is not live; **fence** if anything was zeroed.
//! 5. The page map is the live slots; every other slot is free.
//!
//! Recovery is idempotent (a crash inside it leaves a state it recovers
//! from again: the entries it replays stay valid until step 4, which runs
//! after their replay is durable). Why the scrub: a write that crashed
//! without becoming durable did not consume its `pvn`, so a later write
//! gets it again; without the scrub, the crashed write's leftovers (a
//! header word, an entry with that `pvn`) could combine with parts of the
//! new write into something valid-looking. Lanes restart their version
//! series above the largest version recovery saw.
//!
//! # Invariants
//!
//! - Each page has at most one live slot, and it holds the page's newest
//!   durable version. A write's target slot becomes live only when its
//!   header is durable; the slot it replaces becomes free only after that.
//! - A slot is free iff it is not live; free slots are derived from the
//!   headers at recovery, never persisted, so a crash can neither lose nor
//!   duplicate one. `S ≥ pages + W` gives every lane a free slot in reserve
//!   and leaves one more for each page never written.
//! - Within one run no version is handed out twice; a live slot's header
//!   is rewritten only by a micro-log write of its page, after its entry is
//!   durable.
//!
//! # Concurrency
//!
//! `PageStore` is `Sync`. Writes to one page are serialised by its lock
//! (reads share it), writes to different pages run in parallel: a writer
//! takes its page's lock, then a lane (trying every lane before waiting on
//! one); only a page's first write touches the shared free list. All lock
//! orders are the same, so there is no deadlock.
//!
//! The crash checks behind `ferrite check page-cow | page-microlog |
//! page-hybrid` are in the `checks` submodule (feature `checks`).

mod calibrate;
mod core;
mod dirty;
mod format;
mod recovery;

#[cfg(any(test, feature = "checks"))]
pub mod checks;

pub use calibrate::Calibration;
pub use dirty::DirtyLines;
pub use format::{FORMAT_VERSION, MAGIC};

mod fault;
// Planted bugs exist for the crash checks only: outside the `checks` feature
// (and this crate's tests) they are not part of the API.
#[cfg(feature = "checks")]
pub use fault::Fault;
#[cfg(not(feature = "checks"))]
pub(crate) use fault::Fault;

use self::core::{Core, Target};
use ferrite_pmem::{CACHE_LINE, Region};
use format::{Geometry, NO_SLOT, SUPER_LEN, Superblock};
use parking_lot::{Mutex, MutexGuard, RwLock};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// How a page is written back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageAlgorithm {
    /// Copy-on-write of the whole page into a free slot [P0 §3.2.2].
    Cow,
    /// Log the dirty lines, then write them in place [P0 §3.2.3].
    MicroLog,
    /// Per write, whichever the cost model says is cheaper [P0 Fig. 7].
    Hybrid,
}

impl PageAlgorithm {
    pub const ALL: [PageAlgorithm; 3] = [
        PageAlgorithm::Cow,
        PageAlgorithm::MicroLog,
        PageAlgorithm::Hybrid,
    ];

    /// `cow`, `microlog`, `hybrid`.
    pub fn name(self) -> &'static str {
        match self {
            PageAlgorithm::Cow => "cow",
            PageAlgorithm::MicroLog => "microlog",
            PageAlgorithm::Hybrid => "hybrid",
        }
    }

    fn code(self) -> u8 {
        match self {
            PageAlgorithm::Cow => 1,
            PageAlgorithm::MicroLog => 2,
            PageAlgorithm::Hybrid => 3,
        }
    }

    fn from_code(c: u8) -> Option<PageAlgorithm> {
        PageAlgorithm::ALL.into_iter().find(|a| a.code() == c)
    }
}

impl fmt::Display for PageAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PageAlgorithm {
    type Err = PageError;
    fn from_str(s: &str) -> Result<Self, PageError> {
        PageAlgorithm::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| PageError::BadOption(format!("unknown page algorithm '{s}'")))
    }
}

/// Errors of the page store (ARCHITECTURE.md, rule 7).
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error("page {page} is out of range (the store has {pages} pages)")]
    PageOutOfRange { page: u64, pages: u32 },
    #[error("buffer of {got} bytes, but pages are {page_size} bytes")]
    BufferSize { got: usize, page_size: usize },
    #[error("dirty mask marks line {line}, but a page has {lines} lines")]
    DirtyOutOfRange { line: usize, lines: usize },
    #[error("invalid page size {0} (a multiple of 64 from 256 to 65536)")]
    BadPageSize(usize),
    #[error("invalid page store option: {0}")]
    BadOption(String),
    #[error("region of {len} bytes is too small for this page store (at least {min} needed)")]
    RegionTooSmall { len: usize, min: usize },
    #[error("page store region must start on a cache line (it starts at pool offset {base:#x})")]
    Misaligned { base: usize },
    #[error("not a Ferrite page store (bad magic)")]
    NotAPageStore,
    #[error("unsupported page store format version {found} (this build reads version {supported})")]
    UnsupportedVersion { found: u16, supported: u16 },
    #[error(
        "page store superblock checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
    )]
    Checksum { stored: u32, computed: u32 },
    #[error("corrupt page store: {0}")]
    Corrupt(String),
    #[error("no free slot for a copy-on-write (the slot invariant is broken)")]
    NoFreeSlot,
}

pub type Result<T, E = PageError> = std::result::Result<T, E>;

/// Dirty-line counts at which the micro-log stops beating copy-on-write:
/// the hybrid uses the micro-log iff `dirty lines < crossover`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Crossover {
    /// With one writer running.
    pub single: u16,
    /// With two or more writers running.
    pub multi: u16,
}

impl Crossover {
    /// The default for pages of `page_size` bytes: 3/32 of the page's
    /// lines (24 of 256 for 16 KiB pages, 6 of 64 for 4 KiB), for one
    /// writer and several alike. Measured on the development machine (a
    /// 2-core AMD EPYC VM, DRAM as the `adr` medium) by `ferrite bench
    /// page`: 19–26 lines for 16 KiB pages and 4–5 for 4 KiB, with no
    /// consistent difference between one and two threads there (P0 saw 28
    /// and 40 on Optane, where copy-on-write saturates the media sooner).
    pub fn default_for(page_size: usize) -> Crossover {
        let k = (page_size / CACHE_LINE * 3 / 32).clamp(1, u16::MAX as usize) as u16;
        Crossover {
            single: k,
            multi: k,
        }
    }

    /// The crossover for `writers` concurrent writers.
    pub fn for_writers(&self, writers: u32) -> u16 {
        if writers <= 1 {
            self.single
        } else {
            self.multi
        }
    }
}

/// Where a new store's crossovers come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrossoverSource {
    /// [`Crossover::default_for`] the page size.
    Default,
    Fixed(Crossover),
    /// Measured at creation on the store's own (still free) slots.
    Calibrate,
}

/// Shape and policy of a new store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageStoreOptions {
    pub page_size: usize,
    pub pages: u32,
    /// Concurrent writers served without waiting (default 4).
    pub lanes: u32,
    /// Slots beyond `pages + lanes` (default 0; they only spread wear).
    pub spare_slots: u32,
    /// Algorithm of [`PageStore::write_page`] (default hybrid).
    pub algorithm: PageAlgorithm,
    pub crossover: CrossoverSource,
    /// Fixed nonce (reproducible images); random when `None`.
    pub nonce: Option<u64>,
}

impl PageStoreOptions {
    pub fn new(page_size: usize, pages: u32) -> PageStoreOptions {
        PageStoreOptions {
            page_size,
            pages,
            lanes: 4,
            spare_slots: 0,
            algorithm: PageAlgorithm::Hybrid,
            crossover: CrossoverSource::Default,
            nonce: None,
        }
    }

    pub fn lanes(mut self, n: u32) -> Self {
        self.lanes = n;
        self
    }

    pub fn spare_slots(mut self, n: u32) -> Self {
        self.spare_slots = n;
        self
    }

    pub fn algorithm(mut self, a: PageAlgorithm) -> Self {
        self.algorithm = a;
        self
    }

    pub fn crossover(mut self, c: CrossoverSource) -> Self {
        self.crossover = c;
        self
    }

    pub fn nonce(mut self, n: u64) -> Self {
        self.nonce = Some(n);
        self
    }

    fn geometry(&self) -> Result<Geometry> {
        let slots = u64::from(self.pages) + u64::from(self.lanes) + u64::from(self.spare_slots);
        let slots = u32::try_from(slots)
            .map_err(|_| PageError::BadOption(format!("{slots} slots are too many")))?;
        Geometry::new(self.page_size, self.pages, slots, self.lanes)
    }

    /// Bytes of region a store with these options needs.
    pub fn region_len(&self) -> Result<usize> {
        Ok(self.geometry()?.len)
    }
}

/// What a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    /// [`PageAlgorithm::Cow`] or [`PageAlgorithm::MicroLog`] (what the
    /// hybrid chose, or what a never-written page needed).
    pub algorithm: PageAlgorithm,
    /// The page's version after the write.
    pub pvn: u64,
}

/// What [`PageStore::open`] did besides reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryStats {
    /// Micro-log entries replayed.
    pub replayed: usize,
    /// Lane entries and free slot headers zeroed.
    pub scrubbed: usize,
}

/// One page's place in DRAM: its live slot and version.
#[derive(Clone, Copy, Debug)]
struct PageEntry {
    slot: u32,
    pvn: u64,
}

/// A writer's lane. Its micro-log area on the medium is fixed by its
/// index; in DRAM it holds what lets a writer avoid shared state on the
/// hot path: its own free slot and its own series of version numbers.
#[derive(Debug)]
struct Lane {
    /// Micro-log staging buffer.
    buf: Vec<u8>,
    /// A free slot owned by this lane: the target of its next
    /// copy-on-write, replaced by the slot that write frees.
    reserve: u32,
    /// The last version this lane handed out (lane `l` of `W` hands out
    /// only versions `≡ l (mod W)`, so lanes never hand out the same one).
    last_pvn: u64,
}

impl Lane {
    /// The version for a write through lane `l` of `w` to a page now at
    /// version `current`: the smallest `v ≡ l (mod w)` above both `current`
    /// and this lane's last one — unique store-wide, growing per page.
    fn next_pvn(&mut self, l: u32, w: u32, current: u64) -> u64 {
        let base = current.max(self.last_pvn) + 1;
        let (l, w) = (u64::from(l), u64::from(w));
        let v = base + (l + w - base % w) % w;
        self.last_pvn = v;
        v
    }
}

/// A persistent page store. See the module documentation.
pub struct PageStore {
    core: Core,
    map: Vec<RwLock<PageEntry>>,
    /// Free slots not reserved by a lane. A page's first write takes one
    /// (its lane's reserve goes to the page, the lane refills from here);
    /// there are always at least as many as pages never written.
    free: Mutex<Vec<u32>>,
    lanes: Vec<Mutex<Lane>>,
    /// Where the next writer starts looking for a lane (spreads writers, and
    /// makes a single writer rotate through the lanes deterministically).
    next_lane: AtomicUsize,
    /// Hybrid writers inside `write_page` now: the cost model's thread count.
    writers: AtomicU32,
    algorithm: PageAlgorithm,
    /// `[single, multi]`.
    crossover: [AtomicU32; 2],
    calibration: Option<Calibration>,
    recovered: RecoveryStats,
}

impl fmt::Debug for PageStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageStore")
            .field("page_size", &self.core.geo.page_size)
            .field("pages", &self.core.geo.pages)
            .field("slots", &self.core.geo.slots)
            .field("lanes", &self.core.geo.lanes)
            .field("algorithm", &self.algorithm)
            .field("crossover", &self.crossover())
            .finish()
    }
}

fn random_nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded per process and perturbed per instance; the
    // time separates stores created by different processes.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    h.write_u64(t);
    h.finish()
}

fn check_region(region: &Region) -> Result<()> {
    if !region.is_line_aligned(0) {
        return Err(PageError::Misaligned {
            base: region.base(),
        });
    }
    Ok(())
}

impl PageStore {
    /// Formats a new store in `region` (its previous content is lost): the
    /// superblock is invalidated (fence), the crossover calibrated if asked,
    /// the slot headers and lanes zeroed (fence), then the superblock
    /// written (fence). A crash while formatting leaves something that is
    /// not a store ([`PageError::NotAPageStore`] or a checksum error).
    pub fn create(region: Region, opts: &PageStoreOptions) -> Result<PageStore> {
        check_region(&region)?;
        let geo = opts.geometry()?;
        if region.len() < geo.len {
            return Err(PageError::RegionTooSmall {
                len: region.len(),
                min: geo.len,
            });
        }
        let nonce = opts.nonce.unwrap_or_else(random_nonce);
        region.write(0, &[0u8; SUPER_LEN]);
        region.persist(0, SUPER_LEN);
        let core = Core::new(region, geo, nonce);
        let (crossover, calibration) = match opts.crossover {
            CrossoverSource::Default => (Crossover::default_for(geo.page_size), None),
            CrossoverSource::Fixed(c) => (c, None),
            CrossoverSource::Calibrate => {
                let cal = calibrate::calibrate(&core);
                (cal.crossover, Some(cal))
            }
        };
        let r = &core.region;
        // Headers and lane heads go to zero after the calibration, which
        // scribbles valid-looking ones on scratch slots.
        r.fill_nodrain(format::HEADERS_OFF, geo.slots as usize * CACHE_LINE, 0);
        for lane in 0..geo.lanes {
            r.fill_nodrain(geo.lane_off(lane), CACHE_LINE, 0);
        }
        r.fence();
        let sb = Superblock {
            geo,
            algorithm: opts.algorithm,
            crossover: [crossover.single, crossover.multi],
            nonce,
        };
        r.write(0, &sb.encode());
        r.persist(0, SUPER_LEN);
        let map = vec![(NO_SLOT, 0); geo.pages as usize];
        let mut store = PageStore::assemble(core, &sb, map, 0);
        store.calibration = calibration;
        Ok(store)
    }

    /// Opens the store in `region` after a shutdown or a crash, recovering
    /// it (see the module documentation). Idempotent.
    pub fn open(region: Region) -> Result<PageStore> {
        PageStore::open_inner(region, Fault::None)
    }

    /// [`PageStore::open`] with a planted bug in recovery and in the writers
    /// of the opened store (crash-check tests only).
    #[cfg(any(test, feature = "checks"))]
    pub fn open_with_fault(region: Region, fault: Fault) -> Result<PageStore> {
        PageStore::open_inner(region, fault)
    }

    fn open_inner(region: Region, fault: Fault) -> Result<PageStore> {
        check_region(&region)?;
        if region.len() < SUPER_LEN {
            return Err(PageError::RegionTooSmall {
                len: region.len(),
                min: SUPER_LEN,
            });
        }
        let mut b = [0u8; SUPER_LEN];
        region.read(0, &mut b);
        let sb = Superblock::decode(&b, region.len())?;
        #[allow(unused_mut)]
        let mut core = Core::new(region, sb.geo, sb.nonce);
        #[cfg(any(test, feature = "checks"))]
        {
            core.fault = fault;
        }
        #[cfg(not(any(test, feature = "checks")))]
        let _ = fault;
        let rec = recovery::recover(&core)?;
        let mut store = PageStore::assemble(core, &sb, rec.map, rec.max_pvn);
        store.recovered = RecoveryStats {
            replayed: rec.replayed,
            scrubbed: rec.scrubbed,
        };
        Ok(store)
    }

    /// The in-DRAM store over `core`; `max_pvn` is the largest version
    /// anything on the medium carries (new writes get larger ones).
    fn assemble(core: Core, sb: &Superblock, map: Vec<(u32, u64)>, max_pvn: u64) -> PageStore {
        let geo = core.geo;
        let mut live = vec![false; geo.slots as usize];
        for &(slot, _) in &map {
            if slot != NO_SLOT {
                live[slot as usize] = true;
            }
        }
        // Popped from the end: the lowest free slots are used first, lanes
        // first. `S ≥ pages + lanes` leaves one for every lane.
        let mut free: Vec<u32> = (0..geo.slots)
            .rev()
            .filter(|&s| !live[s as usize])
            .collect();
        let lanes = (0..geo.lanes)
            .map(|_| {
                Mutex::new(Lane {
                    buf: Vec::new(),
                    reserve: free.pop().unwrap_or(NO_SLOT),
                    last_pvn: max_pvn,
                })
            })
            .collect();
        PageStore {
            map: map
                .into_iter()
                .map(|(slot, pvn)| RwLock::new(PageEntry { slot, pvn }))
                .collect(),
            free: Mutex::new(free),
            lanes,
            next_lane: AtomicUsize::new(0),
            writers: AtomicU32::new(0),
            algorithm: sb.algorithm,
            crossover: [
                AtomicU32::new(u32::from(sb.crossover[0])),
                AtomicU32::new(u32::from(sb.crossover[1])),
            ],
            calibration: None,
            recovered: RecoveryStats::default(),
            core,
        }
    }

    // ---- accessors ---------------------------------------------------------------

    pub fn page_size(&self) -> usize {
        self.core.geo.page_size
    }

    /// Cache lines per page.
    pub fn lines_per_page(&self) -> usize {
        self.core.geo.lines
    }

    pub fn pages(&self) -> u32 {
        self.core.geo.pages
    }

    pub fn slots(&self) -> u32 {
        self.core.geo.slots
    }

    pub fn lanes(&self) -> u32 {
        self.core.geo.lanes
    }

    /// The algorithm [`write_page`](Self::write_page) uses.
    pub fn algorithm(&self) -> PageAlgorithm {
        self.algorithm
    }

    /// Changes the algorithm of this handle (not persisted).
    pub fn set_algorithm(&mut self, a: PageAlgorithm) {
        self.algorithm = a;
    }

    /// The hybrid's current crossovers.
    pub fn crossover(&self) -> Crossover {
        Crossover {
            single: self.crossover[0].load(Ordering::Relaxed) as u16,
            multi: self.crossover[1].load(Ordering::Relaxed) as u16,
        }
    }

    /// Replaces the hybrid's crossovers from now on (not persisted).
    pub fn set_crossover(&self, c: Crossover) {
        self.crossover[0].store(u32::from(c.single), Ordering::Relaxed);
        self.crossover[1].store(u32::from(c.multi), Ordering::Relaxed);
    }

    /// The measurement behind the crossovers, for a store created with
    /// [`CrossoverSource::Calibrate`] by this handle.
    pub fn calibration(&self) -> Option<&Calibration> {
        self.calibration.as_ref()
    }

    /// What the recovery that opened this store did.
    pub fn recovery_stats(&self) -> RecoveryStats {
        self.recovered
    }

    /// The version of page `page` (0 if never written).
    pub fn pvn(&self, page: u32) -> Result<u64> {
        Ok(self.entry(page)?.read().pvn)
    }

    /// Slots not holding the live version of any page.
    pub fn free_slots(&self) -> usize {
        let reserved = self
            .lanes
            .iter()
            .filter(|l| l.lock().reserve != NO_SLOT)
            .count();
        self.free.lock().len() + reserved
    }

    pub fn region(&self) -> &Region {
        &self.core.region
    }

    fn entry(&self, page: u32) -> Result<&RwLock<PageEntry>> {
        self.map
            .get(page as usize)
            .ok_or(PageError::PageOutOfRange {
                page: u64::from(page),
                pages: self.core.geo.pages,
            })
    }

    // ---- reading and writing -------------------------------------------------------

    /// Copies page `page` into `out` (exactly one page). A page never
    /// written reads as zeros. Waits for a write of the same page in
    /// progress, so it sees the page entirely before or after it.
    pub fn read_page(&self, page: u32, out: &mut [u8]) -> Result<()> {
        self.check_buf(out.len())?;
        let e = self.entry(page)?.read();
        if e.slot == NO_SLOT {
            out.fill(0);
        } else {
            self.core.region.read(self.core.geo.page_off(e.slot), out);
        }
        Ok(())
    }

    /// Writes page `page` back from its DRAM copy `data` (exactly one page)
    /// with the store's algorithm; returns once it is durable. `dirty` names
    /// the lines changed since the page was last written: the micro-log
    /// writes only those (so `data` must equal the stored page elsewhere),
    /// copy-on-write writes all of `data`.
    pub fn write_page(&self, page: u32, data: &[u8], dirty: &DirtyLines) -> Result<Written> {
        self.write_page_with(self.algorithm, page, data, dirty)
    }

    /// [`write_page`](Self::write_page) with an explicit algorithm.
    pub fn write_page_with(
        &self,
        algorithm: PageAlgorithm,
        page: u32,
        data: &[u8],
        dirty: &DirtyLines,
    ) -> Result<Written> {
        self.check_buf(data.len())?;
        let lines = self.core.geo.lines;
        if let Some(line) = dirty.highest().filter(|&l| l >= lines) {
            return Err(PageError::DirtyOutOfRange { line, lines });
        }
        let slot = self.entry(page)?;
        // Only the hybrid needs the count, and it is shared state: others skip it.
        let writers =
            (algorithm == PageAlgorithm::Hybrid).then(|| WriterGuard::enter(&self.writers));
        let mut e = slot.write();
        let k = dirty.count();
        let chosen = match algorithm {
            _ if e.slot == NO_SLOT => PageAlgorithm::Cow,
            PageAlgorithm::Hybrid => {
                let several = writers.as_ref().is_some_and(|w| w.now > 1);
                let threshold = self.crossover[usize::from(several)].load(Ordering::Relaxed);
                if (k as u32) < threshold {
                    PageAlgorithm::MicroLog
                } else {
                    PageAlgorithm::Cow
                }
            }
            a => a,
        };
        if chosen == PageAlgorithm::MicroLog && k == 0 {
            return Ok(Written {
                algorithm: chosen,
                pvn: e.pvn,
            });
        }
        // A durable page write is the page store's commit (persist traces).
        let scope = ferrite_pmem::trace::commit_scope();
        let (l, mut lane) = self.acquire_lane();
        let pvn = if chosen == PageAlgorithm::MicroLog && self.core.faulty(Fault::MicroLogSamePvn) {
            e.pvn
        } else {
            lane.next_pvn(l, self.core.geo.lanes, e.pvn)
        };
        if chosen == PageAlgorithm::MicroLog {
            self.core.ulog_write(
                (l, &mut lane.buf),
                Target {
                    slot: e.slot,
                    pid: page,
                    pvn,
                },
                data,
                dirty,
            );
        } else {
            let target = lane.reserve;
            if target == NO_SLOT {
                return Err(PageError::NoFreeSlot);
            }
            self.core.cow_write(
                Target {
                    slot: target,
                    pid: page,
                    pvn,
                },
                data,
            );
            // Only now, with the new header durable, may the old slot be
            // reused: it becomes the lane's next target. A page written
            // for the first time frees nothing; the lane refills from the
            // shared list, which holds a slot for every such page.
            let old = std::mem::replace(&mut e.slot, target);
            lane.reserve = if old != NO_SLOT {
                old
            } else {
                self.free.lock().pop().unwrap_or(NO_SLOT)
            };
        }
        e.pvn = pvn;
        drop(lane);
        scope.mark();
        Ok(Written {
            algorithm: chosen,
            pvn,
        })
    }

    fn check_buf(&self, len: usize) -> Result<()> {
        if len != self.core.geo.page_size {
            return Err(PageError::BufferSize {
                got: len,
                page_size: self.core.geo.page_size,
            });
        }
        Ok(())
    }

    /// A free lane if there is one (starting at a rotating position), else
    /// waits for the one at that position.
    fn acquire_lane(&self) -> (u32, MutexGuard<'_, Lane>) {
        let n = self.lanes.len();
        let start = self.next_lane.fetch_add(1, Ordering::Relaxed) % n;
        for i in 0..n {
            let idx = (start + i) % n;
            if let Some(g) = self.lanes[idx].try_lock() {
                return (idx as u32, g);
            }
        }
        (start as u32, self.lanes[start].lock())
    }

    /// Checks that the DRAM state matches the medium: every live slot is
    /// named by exactly one page and carries that page's valid header and
    /// version; the lanes' reserves and the shared free list hold exactly
    /// the other slots, once each; every lane has a reserve and the shared
    /// list a slot for every page never written. For the crash checks and
    /// tests.
    #[doc(hidden)]
    pub fn audit(&self) -> std::result::Result<(), String> {
        let geo = &self.core.geo;
        let mut owner = vec![None; geo.slots as usize];
        for (page, e) in self.map.iter().enumerate() {
            let e = *e.read();
            if e.slot == NO_SLOT {
                if e.pvn != 0 {
                    return Err(format!("page {page} has version {} but no slot", e.pvn));
                }
                continue;
            }
            if let Some(other) = owner[e.slot as usize].replace(page) {
                return Err(format!(
                    "slot {} is live for pages {other} and {page}",
                    e.slot
                ));
            }
            match self.core.header(e.slot) {
                Some((pid, pvn)) if pid as usize == page && pvn == e.pvn => {}
                h => {
                    return Err(format!(
                        "page {page} (version {}) lives in slot {}, whose header says {h:?}",
                        e.pvn, e.slot
                    ));
                }
            }
        }
        let mut free = self.free.lock().clone();
        free.extend(
            self.lanes
                .iter()
                .map(|l| l.lock().reserve)
                .filter(|&s| s != NO_SLOT),
        );
        let mut seen = vec![false; geo.slots as usize];
        for &s in free.iter() {
            if s >= geo.slots || std::mem::replace(&mut seen[s as usize], true) {
                return Err(format!(
                    "slot {s} is out of range or twice in the free list"
                ));
            }
            if owner[s as usize].is_some() {
                return Err(format!("slot {s} is both free and live"));
            }
        }
        if self.lanes.iter().any(|l| l.lock().reserve == NO_SLOT) {
            return Err("a lane has no free slot in reserve".into());
        }
        let unwritten = self.map.iter().filter(|e| e.read().slot == NO_SLOT).count();
        let shared = self.free.lock().len();
        if shared < unwritten {
            return Err(format!(
                "{shared} shared free slots for {unwritten} pages never written"
            ));
        }
        let live = owner.iter().filter(|o| o.is_some()).count();
        if live + free.len() != geo.slots as usize {
            return Err(format!(
                "{live} live + {} free slots, but the store has {}",
                free.len(),
                geo.slots
            ));
        }
        Ok(())
    }
}

/// Counts a writer in for the hybrid's cost model while it is alive.
struct WriterGuard<'a> {
    count: &'a AtomicU32,
    /// Writers running, this one included, when it entered.
    now: u32,
}

impl<'a> WriterGuard<'a> {
    fn enter(count: &'a AtomicU32) -> WriterGuard<'a> {
        let now = count.fetch_add(1, Ordering::Relaxed) + 1;
        WriterGuard { count, now }
    }
}

impl Drop for WriterGuard<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
