//! The Ferrite heap: size-class runs with persistent bitmaps, per-thread
//! runs and lanes, page extents, lane-logged publish, and recovery from the
//! bitmaps alone [P2 §2.2].
//!
//! # Design
//!
//! - **Pages and descriptors.** The data area is cut into 4 KiB pages. Each
//!   page has a 64-byte *descriptor* line in a separate metadata area: a
//!   header word (meaningful on the first page of a run or extent) and a
//!   256-bit *share* of a run's allocation bitmap. Keeping metadata out of
//!   band means a stray write past the end of a block (the nvm_malloc bug
//!   P2 §3 describes) cannot hit it, and recovery reads only the
//!   descriptors, never user data.
//! - **Runs** ([`crate::class`]): `P ≥ 4` pages of one size class. Block `i`
//!   of a run is bit `i / P` of page `i mod P`'s share, so consecutive
//!   allocations set bits on *different* cache lines, and a lane's record,
//!   its marker and the next record are also three distinct lines: two
//!   consecutive operations never flush the same line (NVAlloc's lesson).
//! - **Thread handles** ([`HeapThread`], from [`Heap::attach`]): each owns a
//!   lane and one current run per size class. A reserve finds a free block
//!   in its own run with a compare-and-swap on a DRAM state word — no lock.
//!   When a run is full the handle takes a partial run from the shared
//!   per-class list or carves a new run from free pages (one mutex, at most
//!   once per 16 allocations). Any thread may free any block; a free that
//!   makes an unowned full run usable again lists it.
//! - **Extents**: requests above 16 KiB get whole pages (best fit over free
//!   page ranges, under the mutex); their header word is their allocation
//!   record.
//! - **Out of pages**: empty runs stay with their size class (so an
//!   alloc/free cycle does not create and retire a run each time) until
//!   pages run out; then the handle gives back its own current runs, empty
//!   unowned runs are retired under one fence, and only if that frees
//!   nothing large enough is [`AllocError::OutOfSpace`] returned.
//! - **Reserve → publish.** [`reserve`](crate::AllocThread::reserve) touches
//!   only DRAM. [`publish`](crate::AllocThread::publish) makes any number of
//!   allocations and frees durable together with the caller's links: one
//!   [`MetaOp`] per changed bitmap word, header and link, committed through
//!   the handle's lane ([`crate::lane`]: record, fence, apply, fence) — two
//!   fences however many blocks are published; one fence, no log, when the
//!   publish is a single word (an allocation or free without a link) and
//!   no lane's marker is pending, else two (see "Markers across threads").
//!   [`prepare`](crate::AllocThread::prepare) hands the same operations to a
//!   transaction so they ride on its commit instead.
//! - **Recovery** ([`Heap::open`]): replay the newest record of each lane if
//!   it was committed but not applied (after marking the complete ones:
//!   invariant 5), then walk the descriptors once and
//!   rebuild all volatile state — runs, free counts, the per-class lists,
//!   free page ranges — from the header words and bitmaps. There is no
//!   garbage-collection pass and user data is never read, so recovery time
//!   depends on the heap's size, not on what it holds.
//!
//! # On-media format (version 2, little-endian)
//!
//! The heap lives in a [`Region`] starting on a 4 KiB boundary of the pool.
//! Offsets are from the region's start:
//!
//! | offset                 | bytes            | content                                    |
//! |------------------------|------------------|--------------------------------------------|
//! | 0                      | 64               | superblock — written once at creation      |
//! | 64                     | 64               | root line: root object pool offset, u64 (0 = none); at 72 the pages in use, u64; rest zero |
//! | 128                    | lanes·lane_bytes | lanes ([`crate::lane`] documents their format) |
//! | zone0 = the next 4 KiB boundary | zones   | each zone: 64 bytes of page descriptor per page of the zone, then its pages of 4 KiB |
//!
//! A heap on a fixed-size medium, or whose region fits one zone of up to
//! 16 384 pages, has one zone sized to it (its descriptor block padded to
//! 4 KiB; its pages contiguous, which the transaction layers rely on). A
//! larger heap on a growable medium (its region is the pool's whole
//! reservation) has zones of `z0 = 16 384` pages
//! (64 MiB behind 1 MiB of descriptors), `z0`, `2·z0`, `4·z0`, …: zone
//! `k ≥ 1` holds pages `z0·2^(k-1) .. z0·2^k` and starts at region offset
//! `zone0 + z0·2^(k-1)·4160`. Runs, extents and free ranges never cross a
//! zone, so the largest extent is the largest zone the heap has reached
//! (64 MiB in a young heap, up to 2²⁴ pages); a new zone adds its
//! descriptor block, 1/64 of its pages, to the file.
//!
//! **Growth.** The word at 72 counts the pages in use: all the region holds
//! for a fixed heap; for a heap on a growable medium
//! ([`ferrite_pmem::Mapping::grow_to`]), the pages the medium held at
//! creation, raised when pages run out: the medium grows first (its new
//! length durable), the new pages' descriptors are zero (zeroed and
//! fenced if a reused region left anything there), then the count is
//! stored and persisted in one 8-byte store, and only then are the pages
//! handed out. Recovery reads the count and walks those pages only; a
//! count past the end of the medium is refused as corrupt.
//!
//! Version 1 (still read; no longer written) was one zone starting right
//! after the lanes, descriptors unaligned, all pages in use, and had no
//! page count word.
//!
//! Superblock:
//!
//! | bytes  | field                                                             |
//! |--------|-------------------------------------------------------------------|
//! | 0..8   | magic `FERRHEAP`                                                  |
//! | 8..10  | format version, u16 = 2                                           |
//! | 10..12 | lanes, u16 (1..=1024)                                             |
//! | 12..16 | lane_bytes, u32 (multiple of 64, ≥ 768)                           |
//! | 16..24 | pages the region holds, u64                                       |
//! | 24..28 | zone_pages, u32                                                   |
//! | 28..32 | zero                                                              |
//! | 32..40 | zone0, u64                                                        |
//! | 40..48 | region length, u64                                                |
//! | 48..56 | nonce, u64, random per heap (keys every checksum)                 |
//! | 56..60 | flags, u32 = 0 (unknown bits are refused)                         |
//! | 60..64 | crc32c of bytes 0..60                                             |
//!
//! Page descriptor (one 64-byte line per page):
//!
//! | bytes  | field                                                             |
//! |--------|-------------------------------------------------------------------|
//! | 0..8   | header word: 0 for a free page or a page inside a run or extent   |
//! | 8..40  | bitmap share, four u64 words: bit `r` of word `r / 64` is block `r·P + s` of the run this page is page `s` of; zero outside runs |
//! | 40..64 | reserved, zero                                                    |
//!
//! Header word (non-zero only on the first page of a run or extent):
//!
//! | bits   | field                                                             |
//! |--------|-------------------------------------------------------------------|
//! | 0..2   | kind: 1 run, 2 extent                                             |
//! | 2..8   | size class (runs; 0 for extents)                                  |
//! | 8..32  | pages spanned (runs: the class's P; extents: 1..2²⁴)              |
//! | 32..64 | crc32c(nonce ‖ page number u64 ‖ bits 0..32 as u32)               |
//!
//! A header is one 8-byte word, so it is written failure-atomically and
//! needs no ordering against itself; its checksum binds it to its page and
//! heap. A block is allocated exactly when its bit is set; an extent
//! exactly when its header word is.
//!
//! # Invariants
//!
//! 1. The descriptor line of every page that is not in a run is zero except
//!    an extent's header word. (Creation zeroes; a run is retired only when
//!    its bitmap is all zero; freeing an extent clears its header.)
//! 2. A run's header is durable before any bit of its bitmap is set: a run
//!    is created with its own fence, before any of its blocks is reserved.
//! 3. A block or extent is in the DRAM free state only when its free state
//!    is durable: a free is applied and fenced before the DRAM state says
//!    free, so it can be reserved again only then.
//! 4. At most one publish per lane is between its two fences, and a lane's
//!    newest entry is the only one recovery reads.
//! 5. No word of a lane's newest record changes on the media — not even
//!    in flight, before a fence — until that record's marker is durable or
//!    a newer record of the same lane is. So a record found unmarked after
//!    a crash shows all its effects unless its own publish was in flight,
//!    and recovery's judgement "unapplied, replay it" is right.
//!
//! # Markers across threads
//!
//! Invariant 5 is what the lane markers are for, and a fence completes only
//! the flushes of the thread that issues it (x86 `sfence` orders the
//! issuing core's `clwb`s). A marker flushed by its own thread with no
//! fence, left for that thread's next fence, may still be in flight when
//! another thread's conflicting publish is durable — a crash then replays
//! the completed record over the acknowledged publish (a freed block
//! resurrected, a reallocated extent freed, bits on a page whose header
//! says free). PMDK's lazy log clobber leaves the same window. Instead:
//!
//! - A multi-word publish writes its marker without flushing it and then
//!   stores the marker's tag (sequence number and ring line) in its lane's
//!   *pending* slot in DRAM (release), before it updates the blocks' DRAM
//!   states and returns.
//! - Every change of the media that may be a word of some lane's record
//!   first flushes, itself, the marker line of every pending slot (acquire
//!   loads of the slots of the lanes ever attached), so that a fence *of
//!   its own thread* completes them before the change can reach the media:
//!   - a multi-word publish: its record fence, before it applies anything
//!     (its own lane's marker needs nothing: the new record supersedes the
//!     old one once durable, and nothing is applied before that);
//!   - a one-word publish: a fence of its own before its store, only when
//!     some marker (its own lane's too) is pending;
//!   - a prepared publish: the transaction's commit fence, which comes
//!     before it applies the operations ([`crate::AllocThread::prepare`]);
//!   - a run's creation, whose header word may be one that a record freeing
//!     an extent set to zero: a fence of its own, when a marker is pending.
//! - After that fence the thread clears the slots it flushed, each with a
//!   compare-and-swap on the tag it read (a newer marker of the lane, with
//!   another tag, stays pending). A prepared publish clears none: its
//!   handle does not see the caller's fence. Detaching flushes and fences
//!   the handle's own pending marker.
//!
//! **Why none is missed.** A publish P changes a word of another lane's
//! record R only if it learned of R's effect: a free claims the block's
//! DRAM state that R's publish set to allocated, a reuse reserves a block
//! or pages that R's publish released (a DRAM state or the central
//! mutex), a link word is the caller's and handed over by its own
//! synchronisation — all after R's publish returned, so after R's thread
//! stored the tag (and, earlier, attached its lane). P's acquire load of
//! R's slot therefore sees that tag or a later value of the slot: zero,
//! stored by a thread that flushed this marker and fenced first; or a
//! newer tag of R's lane, stored after a newer record of the lane was
//! durable. Either R's marker is flushed by P and completed by P's fence,
//! or it is already durable, or R is superseded. Recovery keeps invariant
//! 5 too: it marks the records it finds complete, durably, before it
//! replays any other record over their words.
//!
//! **Cost.** No fence is added to a multi-word or a prepared publish. A
//! marker line is flushed by whichever thread needs it first — never by
//! its own thread while it keeps publishing multi-word (one line per
//! publish fewer than flushing it at once) — and again only by prepared
//! publishes before a standalone one clears it. A one-word publish pays a
//! second fence only when a marker is pending, which clears it: at most
//! once per multi-word publish; so does a run's creation. The slots read
//! are those of the lanes ever attached since open, one line each.
//!
//! **Left to the caller.** The heap orders only its own stores. A word a
//! publish linked must change through a later publish (a
//! [`Link`](crate::Link)), not by a store the caller persists itself —
//! unless a standalone publish that happened after the linking publish
//! returned has returned before that store (it completed the marker);
//! otherwise a crash may replay the link over the caller's store. A thread
//! that publishes a change of a linked word must have learned of the link
//! through synchronisation with the linking thread, as any data-race-free
//! program does (the argument above relies on it). A transaction's recovery
//! must let the heap judge its lane records before it replays the
//! transaction's operations ([`crate::AllocThread::prepare`]).
//!
//! # Bad input
//!
//! [`Heap::open`] validates the superblock (magic, version, checksum,
//! geometry against the region), every header word (checksum, kind, size,
//! bounds, overlap), and every descriptor bit (no bits on free or extent
//! pages, none past a run's last block), and reports the first problem as
//! an [`AllocError`]; it never repairs or reuses a heap it cannot trust.

mod format;
pub(crate) use format::MAGIC;
mod fault;
mod recovery;
mod runs;
mod thread;

pub use thread::HeapThread;
// Planted bugs exist for the crash checks only: outside the `checks` feature
// (and this crate's tests) they are not part of the API.
#[cfg(feature = "checks")]
pub use fault::Fault;
#[cfg(not(feature = "checks"))]
pub(crate) use fault::Fault;

use crate::class::{CLASSES, NUM_CLASSES};
use crate::error::{AllocError, Result};
use crate::lane::{Cursor, ENTRY_HEADER, Lane, Latest, Marker};
use crate::ops::{MetaOp, OpKind, flush_words};
use crate::{AllocStats, AllocThread, PAllocator, RecoveryReport};
use ferrite_pmem::{CACHE_LINE, HEADER_SIZE, PAGE, POff, Region};
use format::{
    DESC, Geometry, LANES_OFF, MAX_EXTENT_PAGES, MIN_PAGES, PAGES_NOW_OFF, PageHdr, ROOT_OFF,
    SHARE_OFF, SHARE_WORDS, Spot, Superblock,
};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

/// How to create a heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapOptions {
    /// Lanes, i.e. thread handles that can be attached at once (1..=1024).
    pub lanes: u16,
    /// Bytes per lane ring (multiple of 64, ≥ 768). A publish may log
    /// about `lane_bytes / 48` operations.
    pub lane_bytes: u32,
    /// Fixed nonce (for reproducible images); random when `None`.
    pub nonce: Option<u64>,
}

impl Default for HeapOptions {
    fn default() -> Self {
        HeapOptions {
            lanes: 32,
            lane_bytes: 8192,
            nonce: None,
        }
    }
}

impl HeapOptions {
    pub fn lanes(mut self, n: u16) -> Self {
        self.lanes = n;
        self
    }
    pub fn lane_bytes(mut self, n: u32) -> Self {
        self.lane_bytes = n;
        self
    }
    pub fn nonce(mut self, n: u64) -> Self {
        self.nonce = Some(n);
        self
    }
}

// ---- volatile state -------------------------------------------------------------------

/// Volatile page word: kind in bits 0..8, class in 8..16, and in 32..64 the
/// run's first page (run pages) or the extent's page count (extent heads).
const V_FREE: u64 = 0;
const V_RUN: u64 = 1;
const V_EXT: u64 = 2;
const V_EXT_RESERVED: u64 = 3;
const V_EXT_FREEING: u64 = 4;

fn v_run(class: usize, start: u32) -> u64 {
    V_RUN | ((class as u64) << 8) | (u64::from(start) << 32)
}
fn v_ext(kind: u64, pages: u32) -> u64 {
    kind | (u64::from(pages) << 32)
}
fn v_kind(w: u64) -> u64 {
    w & 0xff
}
fn v_class(w: u64) -> usize {
    ((w >> 8) & 0xff) as usize
}
fn v_hi(w: u64) -> u32 {
    (w >> 32) as u32
}

/// Run head `aux` word: free-block count in bits 0..32, flags above.
const FREE_MASK: u64 = 0xffff_ffff;
/// A thread handle allocates from the run.
const OWNED: u64 = 1 << 32;
/// The run is on its class's list of partial runs.
const LISTED: u64 = 1 << 33;

/// Two-bit block states in the DRAM state words, one pair per bitmap row.
const ST_RESERVED: u64 = 0b01;
const ST_ALLOC: u64 = 0b10;
const ST_FREEING: u64 = 0b11;
const PAIRS_LOW: u64 = 0x5555_5555_5555_5555;
/// State words per page: 256 rows, 32 per word.
const ST_WORDS: usize = 8;

/// DRAM mirror of one page. On a run's pages, `st` holds the states of the
/// blocks whose bits live in this page's share; the first page's `aux`
/// holds the run's free count and ownership.
#[derive(Default)]
struct PageV {
    word: AtomicU64,
    aux: AtomicU64,
    st: [AtomicU64; ST_WORDS],
}

/// Pages per chunk of the DRAM page table.
const CHUNK_SHIFT: u32 = 12;
const CHUNK: usize = 1 << CHUNK_SHIFT;

/// The DRAM mirrors of a heap's pages, in chunks of 4096 allocated as the
/// heap grows, so that a growable heap's reservation costs one pointer per
/// chunk until it is used, and lookups stay lock-free while it grows.
struct PageTable {
    chunks: Box<[OnceLock<Box<[PageV]>>]>,
}

impl PageTable {
    /// A table for up to `max` pages with the first `now` allocated.
    fn new(max: u64, now: u64) -> PageTable {
        let t = PageTable {
            chunks: (0..(max as usize).div_ceil(CHUNK))
                .map(|_| OnceLock::new())
                .collect(),
        };
        t.cover(now);
        t
    }

    /// Allocates the chunks of the first `now` pages.
    fn cover(&self, now: u64) {
        for c in &self.chunks[..(now as usize).div_ceil(CHUNK)] {
            c.get_or_init(|| (0..CHUNK).map(|_| PageV::default()).collect());
        }
    }

    #[inline]
    fn get(&self, p: u32) -> &PageV {
        let chunk = self.chunks[(p >> CHUNK_SHIFT) as usize]
            .get()
            .expect("the page table covers every page below the heap's page count");
        &chunk[p as usize & (CHUNK - 1)]
    }
}

/// Pairs that are free (`00`): the low bit of each such pair.
#[inline]
fn free_pairs(x: u64) -> u64 {
    !(x | (x >> 1)) & PAIRS_LOW
}

/// Spreads the 32 bits of `b` to the low bits of 32 pairs.
#[inline]
fn spread(b: u32) -> u64 {
    let mut x = u64::from(b);
    x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
    x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
    x = (x | (x << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & PAIRS_LOW
}

/// Rows of share `s` that hold blocks, as a pair mask for state word `wi`.
#[inline]
fn valid_pairs(blocks: u32, pages: u32, s: u32, wi: usize) -> u64 {
    let rows = if s < blocks {
        (blocks - s).div_ceil(pages) as usize
    } else {
        0
    };
    let n = rows.saturating_sub(32 * wi).min(32);
    if n == 32 {
        PAIRS_LOW
    } else {
        PAIRS_LOW & ((1u64 << (2 * n)) - 1)
    }
}

/// Per-lane counters (one cache line each, written by the lane's handle).
#[repr(align(64))]
#[derive(Default)]
struct LaneStats {
    in_use: AtomicI64,
    blocks: AtomicI64,
    meta_lines: AtomicU64,
    fences: AtomicU64,
}

/// A lane's pending marker (see "Markers across threads"): 0 when none,
/// else a tag, [`PENDING`] | sequence number (low 47 bits) << 16 | ring
/// line. The line says which line to flush; the sequence number makes the
/// tag unique, so a thread that flushed one marker cannot clear a newer
/// marker the lane has since written on the same line (its
/// compare-and-swap fails). Written by the lane's handle, cleared by
/// whichever thread made the marker durable; one line per slot, so that
/// handles writing their own slots do not disturb each other.
#[repr(align(64))]
#[derive(Default)]
struct MarkerSlot(AtomicU64);

/// Set in every tag, so that no tag is 0.
const PENDING: u64 = 1 << 63;
const TAG_SEQ_MASK: u64 = (1 << 47) - 1;

fn marker_tag(m: Marker) -> u64 {
    debug_assert!(m.line < 1 << 16);
    PENDING | (m.seq & TAG_SEQ_MASK) << 16 | m.line as u64
}

/// State shared by all threads, behind one mutex (never on the reserve
/// fast path).
struct Central {
    /// Free page ranges: start → length, and (length, start) for best fit.
    free: BTreeMap<u32, u32>,
    by_len: BTreeSet<(u32, u32)>,
    free_pages: u64,
    /// Per class: first pages of unowned runs with free blocks.
    lists: Vec<Vec<u32>>,
    /// Cursors of the lanes not attached to a handle.
    cursors: Vec<Option<Cursor>>,
    /// Attach counter (handle identities).
    attaches: u64,
    /// Markers flushed by a run's creation, cleared after its fence.
    markers: Vec<(usize, u64)>,
}

static NEXT_HEAP_ID: AtomicU64 = AtomicU64::new(1);

/// A Ferrite heap. See the module documentation.
pub struct Heap {
    region: Region,
    /// The whole pool: links and operations are addressed by pool offset.
    pool: Region,
    geo: Geometry,
    nonce: u64,
    /// Identity of this open heap (reservations carry it).
    id: u64,
    pages: PageTable,
    /// Pages in use: `geo.pages` for a fixed heap, the durable page count
    /// of a growable one. Changes only under the central mutex.
    pages_now: AtomicU64,
    central: Mutex<Central>,
    /// One per lane, plus one for work done under the central mutex.
    stats: Box<[LaneStats]>,
    /// One per lane: its pending marker.
    markers: Box<[MarkerSlot]>,
    /// One more than the highest lane ever attached since open: lanes
    /// above it have no pending marker.
    lanes_used: AtomicUsize,
    claimed_pages: AtomicU64,
    root_lock: Mutex<()>,
    recovery: RecoveryReport,
    fault: Fault,
}

impl std::fmt::Debug for Heap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heap")
            .field("base", &self.region.base())
            .field("pages", &self.pages_now.load(Ordering::Relaxed))
            .field("max_pages", &self.geo.pages)
            .field("lanes", &self.geo.lanes)
            .finish()
    }
}

/// A block or extent found from its offset.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Found {
    Block {
        start: u32,
        class: usize,
        /// Page whose share holds the block's bit, and its row there.
        page: u32,
        row: u32,
    },
    Extent {
        page: u32,
        pages: u32,
        kind: u64,
    },
}

/// [`Heap::bounds`] read from the heap in `region` without opening it:
/// its superblock (either version) and page count are validated; nothing
/// is written. For a transaction layer that must know where the heap's
/// metadata and pages lie before the heap's own recovery runs.
pub fn read_bounds(region: &Region) -> Result<(u64, u64, u64)> {
    if region.len() < DESC || region.check(0, DESC).is_err() {
        return Err(AllocError::RegionTooSmall {
            len: region.len(),
            min: 5 * PAGE,
        });
    }
    let sb = Superblock::decode(&region.read_vec(0, DESC), region.len())?;
    let geo = sb.geo;
    let now = pages_in_use(region, &geo)?;
    let base = region.base() as u64;
    let data_lo = base + geo.page_off(0) as u64;
    let pages = now.min(u64::from(geo.zone_of(0).1));
    Ok((
        base + geo.zone0 as u64,
        data_lo,
        data_lo + pages * PAGE as u64,
    ))
}

/// The pages a heap uses: all of a version-1 heap's, else its page count
/// word, validated against the geometry and against what the medium holds.
fn pages_in_use(region: &Region, geo: &Geometry) -> Result<u64> {
    if geo.version == 1 {
        return Ok(geo.pages);
    }
    let now = region.load_u64(PAGES_NOW_OFF);
    if !(MIN_PAGES..=geo.pages).contains(&now) {
        return Err(AllocError::Corrupt(format!(
            "heap says it uses {now} pages, not 4..={}",
            geo.pages
        )));
    }
    if region.check(geo.page_off(now as u32 - 1), PAGE).is_err() {
        return Err(AllocError::Corrupt(format!(
            "heap uses {now} pages but its pool ends before the last of them (was the file truncated?)"
        )));
    }
    Ok(now)
}

impl Heap {
    /// Formats `region` as an empty heap and opens it. The region must
    /// start on a 4 KiB boundary of its pool. Anything in the region is
    /// lost. A crash while formatting leaves a region that is not a heap
    /// ([`AllocError::NotAHeap`] or a checksum error on open), never a heap
    /// with stale content.
    pub fn create(region: Region, opts: HeapOptions) -> Result<Heap> {
        if !region.base().is_multiple_of(PAGE) {
            return Err(AllocError::Misaligned {
                base: region.base(),
                align: PAGE,
            });
        }
        let growable = region.medium().map().growable();
        let geo = Geometry::compute(region.len(), opts.lanes, opts.lane_bytes, growable)?;
        let nonce = opts.nonce.unwrap_or_else(|| {
            let u = ferrite_pmem::header::new_uuid();
            u64::from_le_bytes(u[..8].try_into().expect("8 bytes"))
        });
        // A growable heap starts with the pages its medium holds now (at
        // least the minimum); a fixed one with all of them.
        let medium = region.medium().clone();
        let now = if growable {
            let min_end = region.base() + geo.page_off(MIN_PAGES as u32 - 1) + PAGE;
            medium
                .grow_to(min_end)
                .map_err(|e| AllocError::BadOption(format!("cannot grow the pool: {e}")))?;
            geo.pages_below(medium.map().mapped() - region.base())
        } else {
            geo.pages
        };
        // Invalidate first, so a crash below cannot leave an old superblock
        // vouching for half-zeroed metadata.
        region.fill_persist(0, DESC, 0);
        region.fill_nodrain(DESC, geo.zone0 - DESC, 0);
        zero_descriptors(&region, &geo, 0, now as u32, false);
        region.store_u64(PAGES_NOW_OFF, now);
        region.flush(PAGES_NOW_OFF, 8);
        region.fence();
        let sb = Superblock { geo, nonce };
        region.write(0, &sb.encode());
        region.persist(0, DESC);
        Heap::open(region)
    }

    /// Opens (recovers) the heap in `region`. See the module documentation
    /// for what is validated and repaired.
    pub fn open(region: Region) -> Result<Heap> {
        Heap::open_inner(region, Fault::None)
    }

    /// [`Heap::open`] with a planted bug that stays active for the heap's
    /// lifetime (crash checks only).
    #[cfg(any(test, feature = "checks"))]
    pub fn open_with_fault(region: Region, fault: Fault) -> Result<Heap> {
        Heap::open_inner(region, fault)
    }

    fn open_inner(region: Region, fault: Fault) -> Result<Heap> {
        let t0 = Instant::now();
        if !region.base().is_multiple_of(PAGE) {
            return Err(AllocError::Misaligned {
                base: region.base(),
                align: PAGE,
            });
        }
        if region.len() < DESC {
            return Err(AllocError::RegionTooSmall {
                len: region.len(),
                min: 5 * PAGE,
            });
        }
        let sb = Superblock::decode(&region.read_vec(0, DESC), region.len())?;
        let geo = sb.geo;
        let now = pages_in_use(&region, &geo)?;
        let pool = Region::whole(region.medium().clone());
        let mut heap = Heap {
            region,
            pool,
            geo,
            nonce: sb.nonce,
            id: NEXT_HEAP_ID.fetch_add(1, Ordering::Relaxed),
            pages: PageTable::new(geo.pages, now),
            pages_now: AtomicU64::new(now),
            central: Mutex::new(Central {
                free: BTreeMap::new(),
                by_len: BTreeSet::new(),
                free_pages: 0,
                lists: vec![Vec::new(); NUM_CLASSES],
                cursors: vec![None; geo.lanes as usize],
                attaches: 0,
                markers: Vec::new(),
            }),
            stats: (0..=geo.lanes).map(|_| LaneStats::default()).collect(),
            markers: (0..geo.lanes).map(|_| MarkerSlot::default()).collect(),
            lanes_used: AtomicUsize::new(0),
            claimed_pages: AtomicU64::new(0),
            root_lock: Mutex::new(()),
            recovery: RecoveryReport::default(),
            fault,
        };
        let mut report = RecoveryReport::default();
        heap.replay_lanes(&mut report)?;
        heap.walk(&mut report)?;
        report.elapsed = t0.elapsed();
        heap.recovery = report;
        Ok(heap)
    }

    fn lane(&self, i: usize) -> Lane {
        Lane {
            off: LANES_OFF + i * self.geo.lane_bytes as usize,
            len: self.geo.lane_bytes as usize,
            index: i as u32,
        }
    }

    /// Pool offset of page `p`.
    #[inline]
    fn page_pool(&self, p: u32) -> u64 {
        (self.region.base() + self.geo.page_off(p)) as u64
    }

    /// The DRAM mirror of page `p` (below the page count).
    #[inline]
    fn page(&self, p: u32) -> &PageV {
        self.pages.get(p)
    }

    /// Pages in use.
    #[inline]
    fn pages_now(&self) -> u64 {
        self.pages_now.load(Ordering::Acquire)
    }

    /// Pool offset of page `p`'s header word.
    #[inline]
    fn head_word(&self, p: u32) -> u64 {
        (self.region.base() + self.geo.desc(p)) as u64
    }

    /// Pool offset of the bitmap word holding row `row` of page `p`'s share.
    #[inline]
    fn share_word(&self, p: u32, row: u32) -> u64 {
        self.head_word(p) + (SHARE_OFF + 8 * (row as usize / 64)) as u64
    }

    fn root_word(&self) -> u64 {
        (self.region.base() + ROOT_OFF) as u64
    }

    // ---- markers ---------------------------------------------------------------------

    /// Records the marker lane `lane` just wrote as pending (the marker is
    /// stored; this must come before the publish returns).
    fn marker_written(&self, lane: usize, m: Marker) {
        self.markers[lane].0.store(marker_tag(m), Ordering::Release);
    }

    /// Flushes (no fence) the line of every pending marker — but lane
    /// `own`'s only if `with_own`, and only lane `own`'s under
    /// [`Fault::LocalMarkers`] and [`Fault::UnfencedMarkers`] — and appends (lane, tag) to `out` for
    /// [`clear_markers`](Self::clear_markers). Returns how many.
    fn flush_markers(&self, own: usize, with_own: bool, out: &mut Vec<(usize, u64)>) -> usize {
        let used = self.lanes_used.load(Ordering::Acquire);
        let mut n = 0;
        for (i, slot) in self.markers[..used].iter().enumerate() {
            let skip = if i == own {
                !with_own
            } else {
                matches!(self.fault, Fault::LocalMarkers | Fault::UnfencedMarkers)
            };
            if skip {
                continue;
            }
            let tag = slot.0.load(Ordering::Acquire);
            if tag != 0 {
                self.flush_marker(i, tag);
                out.push((i, tag));
                n += 1;
            }
        }
        n
    }

    /// Flushes (no fence) the marker line that `tag` of lane `lane` names.
    fn flush_marker(&self, lane: usize, tag: u64) {
        let line = (tag & 0xffff) as usize;
        self.region
            .flush(self.lane(lane).off + line * CACHE_LINE, ENTRY_HEADER);
    }

    /// After a fence that followed [`flush_markers`](Self::flush_markers):
    /// those markers are durable, so their lanes stop being pending —
    /// unless a lane has written a newer marker since (its tag differs).
    fn clear_markers(&self, flushed: &[(usize, u64)]) {
        for &(i, tag) in flushed {
            let _ = self.markers[i]
                .0
                .compare_exchange(tag, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    // ---- lookups ---------------------------------------------------------------------

    /// Finds the block or extent that starts at pool offset `off`.
    pub(crate) fn locate(&self, off: u64) -> Result<Found> {
        let bad = AllocError::NotAllocated { off };
        let rel = off.checked_sub(self.region.base() as u64).ok_or(bad)?;
        let rel = usize::try_from(rel).map_err(|_| AllocError::NotAllocated { off })?;
        let (page, at) = match self.geo.classify(rel) {
            Spot::Data { page, at } if u64::from(page) < self.pages_now() => (page, at as u64),
            _ => return Err(AllocError::NotAllocated { off }),
        };
        let w = self.page(page).word.load(Ordering::Acquire);
        match v_kind(w) {
            V_RUN => {
                let start = v_hi(w);
                let class = v_class(w);
                let info = CLASSES[class];
                // A run lies in one zone: its pages are contiguous.
                let boff = u64::from(page - start) * PAGE as u64 + at;
                if !boff.is_multiple_of(u64::from(info.size)) {
                    return Err(AllocError::NotAllocated { off });
                }
                let idx = (boff / u64::from(info.size)) as u32;
                if idx >= info.blocks {
                    return Err(AllocError::NotAllocated { off });
                }
                Ok(Found::Block {
                    start,
                    class,
                    page: start + idx % info.pages,
                    row: idx / info.pages,
                })
            }
            V_EXT | V_EXT_RESERVED | V_EXT_FREEING if at == 0 => Ok(Found::Extent {
                page,
                pages: v_hi(w),
                kind: v_kind(w),
            }),
            _ => Err(AllocError::NotAllocated { off }),
        }
    }

    fn block_state(&self, page: u32, row: u32) -> u64 {
        let w = self.page(page).st[row as usize / 32].load(Ordering::Acquire);
        (w >> (2 * (row % 32))) & 0b11
    }

    /// Checks that a link target is a word the caller may own.
    fn check_link(&self, at: POff<u64>) -> Result<()> {
        let a = at.raw();
        let base = self.region.base() as u64;
        let owned = || {
            if a < base || a - base >= self.region.len() as u64 {
                return true;
            }
            match self.geo.classify((a - base) as usize) {
                Spot::Data { .. } | Spot::Beyond => true,
                Spot::Meta => a == self.root_word(),
                Spot::Desc { .. } => false,
            }
        };
        let ok = a.is_multiple_of(8)
            && a >= HEADER_SIZE as u64
            && a + 8 <= self.pool.len() as u64
            && owned();
        if ok {
            Ok(())
        } else {
            Err(AllocError::BadLink { off: a })
        }
    }

    // ---- public API ------------------------------------------------------------------

    /// Attaches a thread handle (the per-thread setup hook): it takes a free
    /// lane. Dropping the handle detaches it.
    pub fn attach(&self) -> Result<HeapThread<'_>> {
        let mut c = self.central.lock();
        let Some(idx) = c.cursors.iter().position(Option::is_some) else {
            return Err(AllocError::NoLane {
                lanes: self.geo.lanes as usize,
            });
        };
        let cur = c.cursors[idx].take().expect("position found it");
        // Before the handle can write a marker: a publish that must see the
        // marker happens after this (through the data it conflicts on).
        self.lanes_used.fetch_max(idx + 1, Ordering::AcqRel);
        c.attaches += 1;
        let id = (c.attaches << 16) | idx as u64;
        drop(c);
        Ok(HeapThread::new(self, idx, self.lane(idx), id, cur))
    }

    /// The heap's region.
    pub fn region(&self) -> &Region {
        &self.region
    }

    /// Pool offsets `(meta_lo, data_lo, data_hi)` of a heap of one zone
    /// (every fixed-size heap of up to 256 MiB of pages): its page
    /// descriptors start at `meta_lo` (allocator operations target words
    /// in `meta_lo..data_lo`), and the pages it hands out are
    /// `data_lo..data_hi`. A larger heap interleaves descriptors and pages
    /// zone by zone; its range is that of the first zone.
    pub fn bounds(&self) -> (u64, u64, u64) {
        let base = self.region.base() as u64;
        let data_lo = self.page_pool(0);
        let pages = self.pages_now().min(u64::from(self.geo.zone_of(0).1));
        (
            base + self.geo.zone0 as u64,
            data_lo,
            data_lo + pages * PAGE as u64,
        )
    }

    /// Pool bytes the heap can hand out now (its pages; a growable heap
    /// grows past this up to [`max_capacity`](Self::max_capacity)).
    pub fn capacity(&self) -> u64 {
        self.pages_now() * PAGE as u64
    }

    /// Pool bytes the heap could hand out at its largest.
    pub fn max_capacity(&self) -> u64 {
        self.geo.pages * PAGE as u64
    }

    /// What the last [`open`](Self::open) did.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// The largest request this heap could ever satisfy.
    pub fn max_alloc(&self) -> usize {
        (self.geo.largest_zone().min(u64::from(MAX_EXTENT_PAGES)) as usize) * PAGE
    }

    fn stats_now(&self) -> AllocStats {
        let (mut in_use, mut blocks, mut lines, mut fences) = (0i64, 0i64, 0u64, 0u64);
        for s in self.stats.iter() {
            in_use += s.in_use.load(Ordering::Relaxed);
            blocks += s.blocks.load(Ordering::Relaxed);
            lines += s.meta_lines.load(Ordering::Relaxed);
            fences += s.fences.load(Ordering::Relaxed);
        }
        let (free_pages, largest) = {
            let c = self.central.lock();
            (
                c.free_pages,
                c.by_len.last().map_or(0, |&(l, _)| u64::from(l)),
            )
        };
        let capacity = self.capacity();
        let in_use = in_use.max(0) as u64;
        let claimed = self.claimed_pages.load(Ordering::Relaxed) * PAGE as u64;
        AllocStats {
            capacity,
            in_use,
            free: capacity.saturating_sub(in_use),
            blocks: blocks.max(0) as u64,
            claimed,
            fragmentation: if claimed > 0 {
                1.0 - in_use as f64 / claimed as f64
            } else {
                0.0
            },
            external_fragmentation: if free_pages > 0 {
                1.0 - largest as f64 / free_pages as f64
            } else {
                0.0
            },
            largest_free: largest * PAGE as u64,
            meta_lines: lines,
            fences,
            grow_room: if self.region.medium().map().growable() {
                self.max_capacity() - capacity
            } else {
                0
            },
        }
    }
}

/// Zeroes the descriptors of pages `from..to` (flushed, not fenced). With
/// `only_dirty`, reads them first and writes only lines that are not zero
/// already (a growth over fresh, zero file blocks then stores nothing).
/// Returns whether it wrote anything.
fn zero_descriptors(region: &Region, geo: &Geometry, from: u32, to: u32, only_dirty: bool) -> bool {
    let mut wrote = false;
    let mut p = from;
    let mut buf = Vec::new();
    while p < to {
        // Descriptors are contiguous within a zone.
        let (first, size) = geo.zone_of(p);
        let zone_end = first.saturating_add(size).min(to);
        let (off, len) = (geo.desc(p), (zone_end - p) as usize * DESC);
        let dirty = if only_dirty {
            buf.resize(len, 0);
            region.read(off, &mut buf);
            buf.iter().any(|&b| b != 0)
        } else {
            true
        };
        if dirty {
            region.fill_nodrain(off, len, 0);
            wrote = true;
        }
        p = zone_end;
    }
    wrote
}

fn take_range(c: &mut Central, n: u32) -> Option<u32> {
    let &(len, start) = c.by_len.range((n, 0)..).next()?;
    c.by_len.remove(&(len, start));
    c.free.remove(&start);
    if len > n {
        c.free.insert(start + n, len - n);
        c.by_len.insert((len - n, start + n));
    }
    c.free_pages -= u64::from(n);
    Some(start)
}

/// Returns pages `start..start+n` to the free ranges, split at zone
/// boundaries and merged with their neighbours in the same zone only: a
/// range never spans two zones.
fn give_range(c: &mut Central, geo: &Geometry, start: u32, n: u32) {
    let mut s = start;
    let end = start + n;
    while s < end {
        let (first, size) = geo.zone_of(s);
        let zone_end = first.saturating_add(size);
        let e = end.min(zone_end);
        give_zone_range(c, s, e - s, first, zone_end);
        s = e;
    }
}

/// [`give_range`] within the zone `first..zone_end`.
fn give_zone_range(c: &mut Central, mut start: u32, mut n: u32, first: u32, zone_end: u32) {
    c.free_pages += u64::from(n);
    if start != first
        && let Some((&ps, &pl)) = c.free.range(..start).next_back()
        && ps + pl == start
    {
        c.free.remove(&ps);
        c.by_len.remove(&(pl, ps));
        start = ps;
        n += pl;
    }
    if start + n != zone_end
        && let Some(nl) = c.free.remove(&(start + n))
    {
        c.by_len.remove(&(nl, start + n));
        n += nl;
    }
    c.free.insert(start, n);
    c.by_len.insert((n, start));
}

impl PAllocator for Heap {
    fn name(&self) -> &'static str {
        "ferrite"
    }

    fn thread(&self) -> Result<Box<dyn AllocThread + Send + '_>> {
        Ok(Box::new(self.attach()?))
    }

    fn usable_size(&self, off: POff<u8>) -> Result<usize> {
        match self.locate(off.raw())? {
            Found::Block {
                class, page, row, ..
            } if self.block_state(page, row) & ST_ALLOC != 0 => Ok(CLASSES[class].size as usize),
            Found::Extent { pages, kind, .. } if kind == V_EXT || kind == V_EXT_FREEING => {
                Ok(pages as usize * PAGE)
            }
            _ => Err(AllocError::NotAllocated { off: off.raw() }),
        }
    }

    fn root(&self) -> POff<u8> {
        POff::new(self.pool.load_u64(self.root_word() as usize))
    }

    fn stats(&self) -> AllocStats {
        self.stats_now()
    }

    fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    fn for_each_allocated(&self, f: &mut dyn FnMut(POff<u8>, usize)) {
        let mut p = 0u32;
        while (p as u64) < self.pages_now() {
            let w = self.page(p).word.load(Ordering::Acquire);
            match v_kind(w) {
                V_RUN if v_hi(w) == p => {
                    let class = v_class(w);
                    let info = CLASSES[class];
                    for idx in 0..info.blocks {
                        let (q, row) = (p + idx % info.pages, idx / info.pages);
                        if self.block_state(q, row) & ST_ALLOC != 0 {
                            let off = self.page_pool(p) + u64::from(idx) * u64::from(info.size);
                            f(POff::new(off), info.size as usize);
                        }
                    }
                    p += info.pages;
                }
                V_EXT | V_EXT_FREEING => {
                    let n = v_hi(w);
                    f(POff::new(self.page_pool(p)), n as usize * PAGE);
                    p += n;
                }
                V_EXT_RESERVED => p += v_hi(w),
                _ => p += 1,
            }
        }
    }

    fn max_publish_ops(&self) -> usize {
        self.lane(0).max_ops()
    }
}

#[cfg(test)]
mod tests;
