//! `ferrite-alloc`: crash-consistent persistent allocators behind one
//! reserve → publish interface [P2 §2.2].
//!
//! P2 finds storage engines spending about a third of their time in the
//! persistent allocator, and that the allocator decides which engine wins.
//! This crate gives engines an interface to run over several allocators:
//!
//! - [`PAllocator`] (one per heap) and [`AllocThread`] (one per thread,
//!   from [`PAllocator::thread`] — the per-thread setup hook; dropping it is
//!   the teardown hook).
//! - [`heap::Heap`]: Ferrite's allocator — size-class runs with persistent
//!   bitmaps, per-thread runs and lanes, page extents, and recovery from the
//!   bitmaps alone.
//! - [`lock::LockHeap`]: a single-lock allocator with per-block headers, the
//!   N-Store default P2 starts from, for comparison. (PMDK's
//!   `pmemobj_alloc`/`pmemobj_free` is measured in `ferrite-bench` under its
//!   `pmdk` feature; this crate does not depend on PMDK.)
//!
//! # Reserve → publish
//!
//! An allocation becomes durable only together with the pointer that links
//! it, as nvm_malloc's reserve/activate and PMDK's reserve/publish do:
//!
//! 1. [`AllocThread::reserve`] picks a block in DRAM. Nothing is written to
//!    the medium; a crash forgets it. The caller fills the block (and
//!    flushes what it wrote, if it wants the content durable). A flush
//!    left unfenced is *not* ordered before the publish: the publish's
//!    first fence may make its record durable while some of those lines
//!    are not, and recovery then replays the links to a block whose
//!    content was lost. So fence the content first (the LSM engine
//!    does), or make a torn block detectable (the CoW engine checksums
//!    every child and falls back to the previous root; the InP engine,
//!    which commits through [`AllocThread::prepare`], logs the checksums
//!    of the blocks it fills).
//! 2. [`AllocThread::publish`] makes a [`Publish`] — any number of
//!    reservations, frees and [`Link`]s (8-byte stores of the caller's, e.g.
//!    the parent's pointer to the new block) — durable **atomically**:
//!    after a crash either all of it happened or none of it.
//!    [`AllocThread::cancel`] returns a reservation instead.
//! 3. A free is published the same way, usually with the unlink.
//!
//! [`AllocThread::alloc`] and [`AllocThread::free`] are the one-block forms.
//!
//! For transactions (issue 6): [`AllocThread::prepare`] validates a
//! [`Publish`] and returns its [`MetaOp`]s instead of persisting them; the
//! transaction logs them with its own writes, commits, applies them
//! ([`MetaOp::apply`]), flushes, fences, and then calls
//! [`AllocThread::commit_prepared`] (or [`AllocThread::abort_prepared`]).
//! The allocator then adds no fence to the commit.
//!
//! # Fences per operation
//!
//! | operation                                               | Ferrite heap | lock heap |
//! |---------------------------------------------------------|--------------|-----------|
//! | reserve                                                 | 0 (a new run: 1, or 2 when a marker is pending; at most once per 16 blocks) | 0, or 2 when it splits a block |
//! | cancel                                                  | 0            | 0         |
//! | publish of one word (alloc or free without a link)      | 1, or 2 when a marker is pending | 1, or 2 when the marker is pending |
//! | publish of anything else (any number of blocks + links) | 2            | 2         |
//! | prepare (the transaction's commit covers it)            | 0            | 0         |
//!
//! So with the Ferrite heap a standalone atomic allocation with its link
//! costs 2 fences, a batch of `n` allocations (with their links) `2/n` per
//! allocation, and allocations prepared into a transaction nothing beyond
//! the transaction's own fences. Two is the floor for a standalone publish
//! of more than one word: the redo record must be durable before any of
//! its words is, and the words before the publish returns
//! ([`lane`] explains the protocol and its marker). A multi-word publish
//! leaves its lane's marker *pending*, to be completed by the next change
//! that could conflict with its record, on whichever thread
//! ([`heap`], "Markers across threads"); a one-word publish that finds a
//! marker pending completes it with a fence of its own first, so a
//! one-word publish costs a second fence at most once per multi-word
//! publish.
//!
//! # Invariant proved by the crash checks
//!
//! After recovery from any crash — nested crashes during recovery
//! included — every allocated block is reachable from a published link or
//! the root, every reachable block is allocated, no block is linked twice,
//! no two live blocks overlap, a publish is all or nothing, and the
//! accounting ([`AllocStats`]) adds up. `checks::check_alloc` (feature
//! `checks`) explores it for both allocators — on the crash simulator's
//! medium, and under a model in which a fence completes only its own
//! thread's flushes, as on real hardware; `ferrite check alloc` runs it.

#![deny(unsafe_code)]

pub mod class;
pub mod error;
pub mod heap;
pub mod lane;
pub mod lock;
pub mod ops;
pub mod verify;

#[cfg(any(test, feature = "checks"))]
pub mod checks;

pub use error::{AllocError, Result};
pub use heap::{Heap, HeapOptions, HeapThread};
pub use lock::{LockHeap, LockOptions};
pub use ops::{MetaOp, OpKind};

use ferrite_pmem::POff;
use std::time::Duration;

/// A reserved, not yet published block or extent.
///
/// Not `Clone`: it is published or cancelled once, through the handle that
/// made it. Publishing or cancelling it twice is an error
/// ([`AllocError::StaleReservation`]), as is using it with another handle
/// or heap ([`AllocError::Foreign`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Reservation {
    pub(crate) heap: u64,
    pub(crate) owner: u64,
    pub(crate) off: u64,
    pub(crate) size: u64,
    pub(crate) loc: Loc,
}

/// Where a reservation lives (allocator specific).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loc {
    /// Ferrite heap: block of the run starting at page `start`, whose bit is
    /// row `row` of page `page`'s share.
    Block { start: u32, page: u32, row: u32 },
    /// Ferrite heap: extent of `pages` pages at page `page`.
    Extent { page: u32, pages: u32 },
    /// Lock heap: block whose 16-byte header is at `off - 16`, `units`
    /// 16-byte units long (header included).
    Header { units: u64 },
    /// An allocator outside this crate ([`Reservation::external`]), which
    /// keeps its own record of the reservation keyed by offset.
    External,
}

impl Reservation {
    /// Pool offset of the block.
    pub fn off(&self) -> POff<u8> {
        POff::new(self.off)
    }

    /// Bytes the caller may use (at least what was asked for).
    pub fn usable_size(&self) -> usize {
        self.size as usize
    }

    /// A reservation made by an allocator outside this crate (PMDK's
    /// `pmemobj_reserve`, in ferrite-bench), so that it can implement
    /// [`AllocThread`]. `heap` must come from [`external_heap_id`] (so it
    /// never equals an id of this crate's heaps, which then refuse the
    /// reservation as [`AllocError::Foreign`]); `owner` identifies the
    /// thread handle; `off`/`size` are the block's pool offset and usable
    /// bytes. The allocator keeps its own record of what it reserved (by
    /// offset) and checks [`heap_id`](Self::heap_id) and
    /// [`owner_id`](Self::owner_id) against it.
    pub fn external(heap: u64, owner: u64, off: u64, size: u64) -> Reservation {
        Reservation {
            heap,
            owner,
            off,
            size,
            loc: Loc::External,
        }
    }

    /// Id of the heap that made the reservation.
    pub fn heap_id(&self) -> u64 {
        self.heap
    }

    /// Id of the thread handle that made the reservation.
    pub fn owner_id(&self) -> u64 {
        self.owner
    }
}

/// Ids for allocators outside this crate ([`Reservation::external`]):
/// top bit set, so they never collide with the Ferrite heap's ids (counting
/// from 1) or the lock heap's (counting from 2^62).
pub fn external_heap_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1 << 63);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// An 8-byte store of the caller's, published atomically with allocations
/// and frees: typically the pointer that links a new block, or the cleared
/// pointer of a freed one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    /// Pool offset of the word (8-byte aligned, in the pool's data area and
    /// not in the allocator's own metadata).
    pub at: POff<u64>,
    pub value: u64,
}

impl Link {
    /// `*at = r.off()`: links reservation `r`.
    pub fn to(at: POff<u64>, r: &Reservation) -> Link {
        Link { at, value: r.off }
    }

    /// `*at = 0`: unlinks.
    pub fn clear(at: POff<u64>) -> Link {
        Link { at, value: 0 }
    }
}

/// What one publish makes durable, all or nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Publish<'a> {
    /// Reservations of this handle to allocate.
    pub allocs: &'a [Reservation],
    /// Pool offsets of published blocks to free (any thread's).
    pub frees: &'a [POff<u8>],
    /// Stores to make durable with them.
    pub links: &'a [Link],
}

/// A snapshot of an allocator's accounting.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AllocStats {
    /// Bytes the allocator manages for callers (data area).
    pub capacity: u64,
    /// Usable bytes of published blocks and extents.
    pub in_use: u64,
    /// `capacity - in_use`.
    pub free: u64,
    /// Published blocks and extents.
    pub blocks: u64,
    /// Bytes set aside for allocations: pages held by runs and extents
    /// (Ferrite), or allocated blocks with their headers (lock heap).
    pub claimed: u64,
    /// `1 - in_use / claimed`: claimed space that holds no live block
    /// (internal fragmentation, size-class rounding and idle run space).
    pub fragmentation: f64,
    /// `1 - largest_free / free space outside claimed space` (external
    /// fragmentation; 0 when free space is one piece).
    pub external_fragmentation: f64,
    /// Largest contiguous free span, bytes.
    pub largest_free: u64,
    /// Cache lines of allocator metadata persisted since open (lane
    /// records and markers, bitmap words, headers).
    pub meta_lines: u64,
    /// Fences issued by the allocator since open.
    pub fences: u64,
    /// Bytes of pages the allocator may still add by growing its medium
    /// (0 unless it is growable; the medium may still refuse, e.g. with
    /// the disk full). Space a caller can plan on is `free + grow_room`.
    pub grow_room: u64,
}

/// What opening (recovering) a heap did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Committed publishes that recovery finished (lane records replayed).
    pub replayed: usize,
    /// Lane markers written for records found unmarked.
    pub marked: usize,
    /// Runs and extents found (Ferrite); blocks walked (lock heap: in `blocks`).
    pub runs: usize,
    pub extents: usize,
    /// Allocated blocks and extents.
    pub blocks: u64,
    pub elapsed: Duration,
}

/// A persistent allocator: one open heap, shared by its threads.
pub trait PAllocator: Send + Sync {
    /// Short name for tables (`ferrite`, `nstore-lock`).
    fn name(&self) -> &'static str;

    /// Attaches the calling thread (the per-thread setup hook). Dropping the
    /// handle detaches it. Each thread uses its own handle.
    fn thread(&self) -> Result<Box<dyn AllocThread + Send + '_>>;

    /// Usable bytes of the published block at `off`.
    fn usable_size(&self, off: POff<u8>) -> Result<usize>;

    /// The root object (null until [`AllocThread::root`] created it).
    fn root(&self) -> POff<u8>;

    /// Accounting now.
    fn stats(&self) -> AllocStats;

    /// What recovery did when the heap was opened.
    fn recovery(&self) -> &RecoveryReport;

    /// Calls `f(offset, usable size)` for every published block (inspection
    /// and checks; walks the whole heap).
    fn for_each_allocated(&self, f: &mut dyn FnMut(POff<u8>, usize));

    /// Most [`MetaOp`]s one standalone publish may consist of (blocks with
    /// bits in one bitmap word count once; each link and extent once).
    fn max_publish_ops(&self) -> usize;
}

/// One thread's handle on a [`PAllocator`].
pub trait AllocThread {
    /// Reserves at least `size` bytes (DRAM only; nothing is durable).
    fn reserve(&mut self, size: usize) -> Result<Reservation>;

    /// Returns an unpublished reservation.
    fn cancel(&mut self, r: Reservation) -> Result<()>;

    /// Makes `p` durable atomically (see the crate documentation). On error
    /// nothing was published and every reservation is still reserved.
    fn publish(&mut self, p: &Publish<'_>) -> Result<()>;

    /// Validates `p`, marks its frees as in progress and appends the
    /// operations that publish it to `out`, without persisting anything.
    /// The caller makes them durable under its own commit, applies them,
    /// fences, and then calls [`commit_prepared`](Self::commit_prepared)
    /// with the same `p` — or [`abort_prepared`](Self::abort_prepared) if
    /// it does not commit. Operations are idempotent, so a redo log may
    /// replay them.
    ///
    /// `prepare` also flushes (without a fence) the lane markers still
    /// pending, whose records the operations may conflict with
    /// ([`heap`], "Markers across threads"). So the caller must:
    /// - fence, on the thread that called `prepare`, after `prepare` and
    ///   before any of the operations can reach the media (its commit
    ///   fence does, when it applies the operations only after its commit;
    ///   an undo record's fence does too);
    /// - in recovery, open the allocator (which judges its lane records on
    ///   the image as the crash left it) before replaying the operations of
    ///   a committed transaction: the commit may have become durable with
    ///   the same fence as those markers, without them, and a replayed
    ///   operation would make a complete record look unapplied. (Then open
    ///   it again, so that its state reflects the replay.) Rolling a
    ///   transaction back needs no such order: its operations were applied
    ///   after that fence.
    fn prepare(&mut self, p: &Publish<'_>, out: &mut Vec<crate::MetaOp>) -> Result<()>;

    /// Volatile bookkeeping after a prepared publish is durable.
    fn commit_prepared(&mut self, p: &Publish<'_>);

    /// Releases what [`prepare`](Self::prepare) claimed (the reservations
    /// stay reserved).
    fn abort_prepared(&mut self, p: &Publish<'_>);

    /// The root object, created zeroed with `size` bytes if there is none
    /// (`pmemobj_root`).
    fn root(&mut self, size: usize) -> Result<POff<u8>>;

    /// Most operations one publish of this handle may log.
    fn max_publish_ops(&self) -> usize;

    /// Reserves and publishes one block, storing its offset at `link` if
    /// given, atomically.
    fn alloc(&mut self, size: usize, link: Option<POff<u64>>) -> Result<POff<u8>> {
        let r = self.reserve(size)?;
        let off = r.off();
        let links: &[Link] = &[Link {
            at: link.unwrap_or(POff::NULL),
            value: off.raw(),
        }];
        let allocs = [r];
        let p = Publish {
            allocs: &allocs,
            frees: &[],
            links: if link.is_some() { links } else { &[] },
        };
        if let Err(e) = self.publish(&p) {
            let [r] = allocs;
            let _ = self.cancel(r);
            return Err(e);
        }
        Ok(off)
    }

    /// Frees a published block, clearing the word at `unlink` if given,
    /// atomically.
    fn free(&mut self, off: POff<u8>, unlink: Option<POff<u64>>) -> Result<()> {
        let links = [Link::clear(unlink.unwrap_or(POff::NULL))];
        self.publish(&Publish {
            allocs: &[],
            frees: &[off],
            links: if unlink.is_some() { &links } else { &[] },
        })
    }
}
