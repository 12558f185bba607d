//! PMDK's allocator under Ferrite's storage engines (feature `pmdk`): the
//! third point of P2's allocator axis, next to the Ferrite heap and the
//! single-lock heap.
//!
//! [`PmdkAlloc`] implements [`PAllocator`] with libpmemobj's
//! reserve/publish ("action") API, and [`pmdk_store`] / [`open_pmdk_store`]
//! put a [`ferrite_engine::Store`] on it, in a PMDK pool file:
//!
//! ```text
//! PMDK pool file (libpmemobj layout "ferrite-kv-pmdk")
//!   PMDK's pool header, lanes, heap metadata   — PMDK's own, never touched
//!   root object (pmemobj_root, zeroed, durable)
//!     [pad to 64 B] superblock (4096 B) + engine fixed area   = area_bytes(opts)
//!   objects of type ENGINE_TYPE_NUM            — the engine's blocks
//! ```
//!
//! The engine sees the pool through a [`Region`] over PMDK's own mapping
//! ([`Mapping::external`]), so its pool offsets are `PMEMoid.off` values:
//! the offsets `pmemobj_reserve` returns address the blocks directly.
//! The engine's own flushes and fences go through Ferrite's persistence
//! door (a medium of domain `adr`) and are counted by `ferrite_pmem`'s
//! counters as always; PMDK's flushes and fences (its redo log, heap
//! metadata, `pmemobj_root`'s zeroing) are issued inside libpmem and are
//! **invisible** to those counters.
//!
//! # Use (from a suite)
//!
//! ```no_run
//! # fn main() -> Result<(), ferrite_bench::peers::pmdk_alloc::PmdkStoreError> {
//! use ferrite_bench::peers::pmdk_alloc::{open_pmdk_store, pmdk_store};
//! use ferrite_engine::{EngineKind, StoreOptions};
//! use std::path::Path;
//! // Once, first thing in the process (before any PMDK call), for PMDK's
//! // flush path on /dev/shm: `unsafe { ferrite_pmdk::force_pmem() }`.
//! let path = Path::new("/dev/shm/kv-pmdk.pool");
//! let opts = StoreOptions::new(EngineKind::Cow).sessions(4);
//! let store = pmdk_store(path, 256 << 20, &opts)?; // derefs to ferrite_engine::Store
//! store.session()?.put(b"k", b"v")?;
//! drop(store); // or store.close()?
//! let store = open_pmdk_store(path, &opts)?;
//! store.remove()?; // close and delete the pool file
//! # Ok(()) }
//! ```
//!
//! # The mapping of the interface
//!
//! | `AllocThread`                | PMDK                                                                      |
//! |------------------------------|---------------------------------------------------------------------------|
//! | `reserve(n)`                 | `pmemobj_reserve` (DRAM only; a crash forgets it)                         |
//! | `cancel(r)`                  | `pmemobj_cancel`                                                          |
//! | `publish{allocs,frees,links}`| ONE `pmemobj_publish` of the reserve actions + a `pmemobj_set_value` per link + a `pmemobj_defer_free` per free: all or nothing, through PMDK's redo log |
//! | `prepare` / `commit_prepared`| unsupported ([`AllocError::Unsupported`]): PMDK's metadata stores are internal to its publish and cannot be handed to an engine's log as `MetaOp`s; engines publish instead |
//! | `root(n)`                    | `pmemobj_root` (zeroed, durable)                                          |
//! | `for_each_allocated`         | `pmemobj_first`/`pmemobj_next`, objects of [`ENGINE_TYPE_NUM`] only       |
//!
//! `for_each_allocated` excludes the root object: it holds the engine's
//! superblock and fixed area, which is the engine's area and not a block
//! the engine references (its `walk().blocks` does not list it either).
//! libpmemobj's iterator skips the root anyway; the type filter and an
//! explicit offset check make that independent of PMDK's choice.
//!
//! # What PMDK cannot be trusted with, and the DRAM index that guards it
//!
//! PMDK trusts its caller: `pmemobj_defer_free` of something that is not a
//! live object, or a `pmemobj_set_value` into its own metadata, corrupts
//! the heap (and may crash the process later). `ferrite_alloc`'s contract
//! is that misuse is an error. So [`PmdkAlloc`] keeps a DRAM index (rebuilt
//! from PMDK's iterator at open) of live blocks, blocks being freed by a
//! publish in flight and reserved blocks, and refuses a free of anything
//! not live ([`AllocError::NotAllocated`]), a second free
//! ([`AllocError::DoubleFree`]), and a link outside the root object and
//! the live or reserved blocks, or into a block being freed
//! ([`AllocError::BadLink`]). A block that a publish in flight links into
//! is *pinned* until that publish returns: freeing or cancelling it
//! meanwhile (a use after free of the caller's) is refused, so PMDK never
//! stores into memory it may already have handed out again.
//!
//! # Ordering the engine's flushes before PMDK's publish
//!
//! An engine fills a reserved block, flushes it through Ferrite's door
//! without a fence, and publishes: the publish must make the data durable
//! before the link. On PMDK's flush path (`pmem_is_pmem`, e.g. with
//! `PMEM_IS_PMEM_FORCE=1`) the first `pmem_drain` (SFENCE) inside
//! `pmemobj_publish` orders this thread's earlier CLWB/CLFLUSHOPT too, so
//! nothing is added. On PMDK's msync path its "fence" is an `msync`
//! system call, which does not order CPU cache flushes, so a publish first
//! issues one Ferrite fence (counted by `ferrite_pmem`). The choice is made
//! at open with libpmem's `pmem_is_pmem` on the pool's range, which answers
//! yes only when forced (libpmem does not track libpmemobj's own mappings),
//! so on real DAX without forcing the fence is added, conservatively.
//!
//! # Fences
//!
//! A publish is one `pmemobj_publish`: PMDK persists its redo log, applies
//! it to its heap metadata and the caller's words, persists those, and
//! clears the log. Those fences are PMDK's, issued inside libpmem, and not
//! seen by `ferrite_pmem::Counters`; the engine's own (data flushes before
//! a publish, its logs) are. [`PmdkAlloc::stats`] reports `fences: 0` and
//! `meta_lines: 0` for that reason (not because there are none). With
//! ferrite-pmdk's feature `count` (ferrite-bench's `pmdk-count`) PMDK's are
//! counted too, at the libpmem calls. Measured (PMDK 1.12, flush path
//! forced; `tests/pmdk_alloc.rs`, steady state):
//!
//! | publish                        | PMDK fences | Ferrite heap | lock heap |
//! |--------------------------------|-------------|--------------|-----------|
//! | one block + its link           | 4           | 2            | 4 (a split adds 2) |
//! | free + unlink                  | 4           | 2            | 2         |
//! | 8 blocks + 8 links, per block  | 0.5         | 0.25         | 2.25      |
//!
//! So PMDK's publish costs twice the Ferrite heap's fences. A CoW update of
//! a 1000-byte value (one root switch per update) costs 4 PMDK fences and
//! no Ferrite fence on PMDK, against 2 fences on the Ferrite heap and 5.6
//! on the lock heap; an LSM update costs 1 fence on any allocator (it
//! allocates only when it flushes its memtable).
//!
//! # Engines
//!
//! All three engines run on this allocator. CoW and LSM publish their
//! blocks with their root switch or manifest. InP, which on Ferrite's
//! allocators folds allocator operations into its own log with
//! [`AllocThread::prepare`] (which PMDK cannot offer), runs its *intent
//! protocol* here (`ferrite_engine::inp`): it logs the blocks it is about
//! to publish, publishes them (one publish per write that allocates,
//! with the frees earlier writes owe), commits its record, and defers its
//! own frees to the next write; recovery frees the blocks of an
//! uncommitted write and completes owed frees.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use ferrite_alloc::{
    AllocError, AllocStats, AllocThread, MetaOp, PAllocator, Publish, RecoveryReport, Reservation,
};
use ferrite_engine::{AllocKind, EngineError, Store, StoreOptions, Superblock, area_bytes};
use ferrite_pmdk::{Action, PmemObj};
use ferrite_pmem::map::Mapping;
use ferrite_pmem::{Domain, Medium, POff, PersistConfig, Region};

/// Type number of every block the engines allocate (distinct from the
/// root's, 0, and the other PMDK baselines', 1).
pub const ENGINE_TYPE_NUM: u64 = 2;

/// libpmemobj layout name of a pool holding a Ferrite store.
pub const PMDK_LAYOUT: &str = "ferrite-kv-pmdk";

/// Most actions (reservations + links + frees) one publish may carry.
///
/// PMDK itself has no fixed limit: `pmemobj_publish` reserves redo-log
/// space for all its actions and extends the lane's log with blocks from
/// the heap when it is too small. The bound is ours, so that an engine
/// sizes its batches as it does for the Ferrite heap; a publish of this
/// many actions is exercised by the tests.
pub const MAX_PUBLISH_OPS: usize = 1024;

const NAME: &str = "pmdk";

/// Maps a PMDK failure to the allocator's typed error.
fn pmdk_err(size: usize, free: u64, e: ferrite_pmdk::Error) -> AllocError {
    match e {
        e if e.errno() == Some(libc::ENOMEM) => AllocError::OutOfSpace { size, free },
        ferrite_pmdk::Error::Param { value, max, .. } if value > 0 => AllocError::TooLarge {
            size: value as usize,
            max: max as usize,
        },
        e => AllocError::External {
            allocator: NAME,
            msg: e.to_string(),
        },
    }
}

/// What [`PmdkAlloc`] knows in DRAM about the blocks (see the module docs).
#[derive(Default)]
struct Index {
    /// Published blocks of [`ENGINE_TYPE_NUM`]: offset → usable bytes.
    live: BTreeMap<u64, u64>,
    /// Live blocks a publish in flight is freeing.
    freeing: HashSet<u64>,
    /// Reserved, unpublished blocks of every handle: offset → usable bytes.
    reserved: BTreeMap<u64, u64>,
    /// Sum of `live`'s usable bytes.
    in_use: u64,
    /// Blocks that links of publishes in flight store into: block offset →
    /// number of such publishes. Freeing or cancelling a pinned block is
    /// refused, so PMDK never stores into memory it may have handed out
    /// again (where its next object's header could be).
    pinned: HashMap<u64, u32>,
}

impl Index {
    /// The block of `map` that `at..at + 8` lies inside, if any.
    fn containing(map: &BTreeMap<u64, u64>, at: u64) -> Option<u64> {
        map.range(..=at)
            .next_back()
            .filter(|&(&off, &len)| at.checked_add(8).is_some_and(|e| e <= off + len))
            .map(|(&off, _)| off)
    }

    fn unpin(&mut self, blocks: &[u64]) {
        for b in blocks {
            if let Some(n) = self.pinned.get_mut(b) {
                *n -= 1;
                if *n == 0 {
                    self.pinned.remove(b);
                }
            }
        }
    }
}

/// PMDK's `pmemobj` heap behind [`PAllocator`]. See the module docs.
pub struct PmdkAlloc {
    obj: Arc<PmemObj>,
    id: u64,
    next_owner: AtomicU64,
    index: Mutex<Index>,
    /// Serialises the root's creation. Held alone: never with `index`.
    root_lock: Mutex<()>,
    /// Root object size, then offset (0: none yet). Set once (the root
    /// never moves: `root` refuses to grow it), the length before the
    /// offset is released, so a reader that sees the offset sees the
    /// length. Atomics, not the lock, so that readers holding `index`
    /// take no second lock.
    root_len: AtomicU64,
    root_off: AtomicU64,
    recovery: RecoveryReport,
    /// Ferrite's door on the pool, for the fence before a publish.
    door: Region,
    /// Whether PMDK's publish does not order CPU flushes (its msync path):
    /// then a publish fences first (see the module docs).
    fence_first: bool,
}

impl std::fmt::Debug for PmdkAlloc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmdkAlloc")
            .field("id", &self.id)
            .field("root", &self.root_off.load(Ordering::Relaxed))
            .finish()
    }
}

impl PmdkAlloc {
    /// Puts the allocator interface on an open pool, indexing the blocks
    /// it already holds (PMDK recovered its heap when the pool was opened;
    /// this is the walk of what it holds).
    pub fn new(obj: Arc<PmemObj>) -> Result<PmdkAlloc, AllocError> {
        let start = Instant::now();
        if !PmemObj::action_layout_ok() {
            return Err(AllocError::External {
                allocator: NAME,
                msg: "struct pobj_action of this libpmemobj does not match the build".into(),
            });
        }
        let root = obj.root_if_any().map_err(|e| pmdk_err(0, 0, e))?;
        let root = root.map_or((0, 0), |off| (off, obj.root_size() as u64));
        let mut index = Index::default();
        obj.for_each_object(&mut |o| {
            if o.type_num == ENGINE_TYPE_NUM && o.off != root.0 {
                index.live.insert(o.off, o.usable as u64);
                index.in_use += o.usable as u64;
            }
        })
        .map_err(|e| AllocError::Corrupt(e.to_string()))?;
        let recovery = RecoveryReport {
            blocks: index.live.len() as u64,
            elapsed: start.elapsed(),
            ..RecoveryReport::default()
        };
        let door = region_on(&obj).map_err(|e| AllocError::External {
            allocator: NAME,
            msg: e.to_string(),
        })?;
        let fence_first = !ferrite_pmdk::is_pmem(obj.base(), obj.mapped_len());
        Ok(PmdkAlloc {
            door,
            fence_first,
            obj,
            id: ferrite_alloc::external_heap_id(),
            next_owner: AtomicU64::new(1),
            index: Mutex::new(index),
            root_lock: Mutex::new(()),
            root_len: AtomicU64::new(root.1),
            root_off: AtomicU64::new(root.0),
            recovery,
        })
    }

    /// The pool.
    pub fn pool(&self) -> &Arc<PmemObj> {
        &self.obj
    }

    /// A [`Region`] over the whole pool mapping (offsets = `PMEMoid.off`),
    /// on a medium of domain `adr`: what the engine is handed.
    pub fn region(&self) -> Result<Region, PmdkStoreError> {
        region_on(&self.obj)
    }

    /// Whether a publish issues a Ferrite fence before PMDK's (PMDK on
    /// its msync path; see the module docs).
    pub fn fences_before_publish(&self) -> bool {
        self.fence_first
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        // A panic elsewhere while holding the lock leaves the index as
        // consistent as each step makes it (single inserts/removes).
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The root object's offset (0: none) and length.
    fn root_span(&self) -> (u64, u64) {
        let off = self.root_off.load(Ordering::Acquire);
        (off, self.root_len.load(Ordering::Relaxed))
    }

    fn free_bytes(&self) -> u64 {
        (self.obj.mapped_len() as u64).saturating_sub(self.index().in_use)
    }

    /// Where the caller may have PMDK store the 8-byte word `at`: in the
    /// root object (`Some(None)`) or in a live or reserved block that no
    /// publish in flight frees (`Some(Some(block))`); `None` otherwise.
    fn link_target(&self, at: u64, ix: &Index) -> Option<Option<u64>> {
        if !at.is_multiple_of(8) {
            return None;
        }
        let (root, root_len) = self.root_span();
        if root != 0 && at >= root && at.checked_add(8).is_some_and(|e| e <= root + root_len) {
            return Some(None);
        }
        let block =
            Index::containing(&ix.live, at).or_else(|| Index::containing(&ix.reserved, at))?;
        (!ix.freeing.contains(&block)).then_some(Some(block))
    }
}

impl PAllocator for PmdkAlloc {
    fn name(&self) -> &'static str {
        NAME
    }

    fn thread(&self) -> ferrite_alloc::Result<Box<dyn AllocThread + Send + '_>> {
        Ok(Box::new(PmdkThread {
            alloc: self,
            owner: self.next_owner.fetch_add(1, Ordering::Relaxed),
            pending: HashMap::new(),
            acts: Vec::new(),
            pins: Vec::new(),
        }))
    }

    fn usable_size(&self, off: POff<u8>) -> ferrite_alloc::Result<usize> {
        let off = off.raw();
        if let Some(&n) = self.index().live.get(&off) {
            return Ok(n as usize);
        }
        let (root, root_len) = self.root_span();
        if root != 0 && off == root {
            return Ok(root_len as usize);
        }
        Err(AllocError::NotAllocated { off })
    }

    fn root(&self) -> POff<u8> {
        POff::new(self.root_off.load(Ordering::Acquire))
    }

    fn stats(&self) -> AllocStats {
        let ix = self.index();
        let capacity = self.obj.mapped_len() as u64;
        AllocStats {
            capacity,
            in_use: ix.in_use,
            free: capacity.saturating_sub(ix.in_use),
            blocks: ix.live.len() as u64,
            // PMDK keeps its claimed space, fragmentation and its flushes
            // and fences to itself (see the module docs).
            ..AllocStats::default()
        }
    }

    fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    fn for_each_allocated(&self, f: &mut dyn FnMut(POff<u8>, usize)) {
        let root = self.root_off.load(Ordering::Acquire);
        // Only the caller's own blocks: the root object is the engine's
        // area, not a block (see the module docs). A corrupt heap ends the
        // walk early; the engine checks then report the difference.
        let _ = self.obj.for_each_object(&mut |o| {
            if o.type_num == ENGINE_TYPE_NUM && o.off != root {
                f(POff::new(o.off), o.usable);
            }
        });
    }

    fn max_publish_ops(&self) -> usize {
        MAX_PUBLISH_OPS
    }
}

/// A free or cancel of a block that a concurrent publish links into: a
/// use after free of the caller's, refused (see `Index::pinned`).
fn linked_in_flight(off: u64) -> AllocError {
    AllocError::External {
        allocator: NAME,
        msg: format!(
            "block {off:#x} is the target of a link in a publish in flight; freeing it now would let PMDK store into freed memory"
        ),
    }
}

/// A [`Region`] over the whole mapping of `obj` (see [`PmdkAlloc::region`]).
fn region_on(obj: &Arc<PmemObj>) -> Result<Region, PmdkStoreError> {
    let keep = Box::new(obj.clone());
    // SAFETY: `base..base + mapped_len` is libpmemobj's mapping of the
    // pool, readable and writable, and stays mapped until the pool is
    // closed, which happens only when the last `Arc<PmemObj>` drops —
    // one of which the Mapping holds (keep-alive) for its whole life.
    // No Rust reference to the pool's bytes exists anywhere (the PMDK
    // wrappers pass raw pointers to C; other `Mapping`s of the pool, made
    // here, use raw pointers too). PMDK writes its own metadata there
    // concurrently; the engine accesses only its root area and its
    // blocks, which PMDK does not touch while they are allocated.
    let map = unsafe { Mapping::external(obj.base(), obj.mapped_len(), keep) }
        .map_err(|e| PmdkStoreError::Setup(format!("mapping the PMDK pool: {e}")))?;
    let cfg = PersistConfig::for_domain(Domain::Adr).map_err(PmdkStoreError::Setup)?;
    Ok(Region::whole(Arc::new(Medium::new(map, cfg, None))))
}

/// One thread's handle on a [`PmdkAlloc`]: its reservations' actions.
pub struct PmdkThread<'a> {
    alloc: &'a PmdkAlloc,
    owner: u64,
    /// This handle's unpublished reservations: offset → reserve action.
    pending: HashMap<u64, Action>,
    /// Scratch array handed to `pmemobj_publish`.
    acts: Vec<Action>,
    /// Blocks the publish in progress pinned (see `Index::pinned`).
    pins: Vec<u64>,
}

impl PmdkThread<'_> {
    fn check_mine(&self, r: &Reservation) -> ferrite_alloc::Result<()> {
        if r.heap_id() != self.alloc.id {
            return Err(AllocError::Foreign { what: "heap" });
        }
        if r.owner_id() != self.owner {
            return Err(AllocError::Foreign {
                what: "thread handle",
            });
        }
        if !self.pending.contains_key(&r.off().raw()) {
            return Err(AllocError::StaleReservation { off: r.off().raw() });
        }
        Ok(())
    }

    /// Checks `p` and marks its frees as in flight (under the index lock).
    fn stage(&mut self, p: &Publish<'_>) -> ferrite_alloc::Result<()> {
        let ops = p.allocs.len() + p.frees.len() + p.links.len();
        if ops > MAX_PUBLISH_OPS {
            return Err(AllocError::BatchTooLarge {
                ops,
                max: MAX_PUBLISH_OPS,
            });
        }
        let mut seen = HashSet::new();
        for r in p.allocs {
            self.check_mine(r)?;
            if !seen.insert(r.off().raw()) {
                return Err(AllocError::StaleReservation { off: r.off().raw() });
            }
        }
        let mut ix = self.alloc.index();
        for (i, f) in p.frees.iter().enumerate() {
            let off = f.raw();
            if !ix.live.contains_key(&off) {
                return Err(AllocError::NotAllocated { off });
            }
            if ix.freeing.contains(&off) || p.frees[..i].contains(f) {
                return Err(AllocError::DoubleFree { off });
            }
            if ix.pinned.contains_key(&off) {
                return Err(linked_in_flight(off));
            }
        }
        for f in p.frees {
            ix.freeing.insert(f.raw());
        }
        // Links last, so that a link into a block this publish frees is
        // refused like one into a block another publish frees.
        self.pins.clear();
        for l in p.links {
            match self.alloc.link_target(l.at.raw(), &ix) {
                Some(block) => self.pins.extend(block),
                None => {
                    for f in p.frees {
                        ix.freeing.remove(&f.raw());
                    }
                    return Err(AllocError::BadLink { off: l.at.raw() });
                }
            }
        }
        for &b in &self.pins {
            *ix.pinned.entry(b).or_insert(0) += 1;
        }
        Ok(())
    }

    fn unstage(&mut self, p: &Publish<'_>) {
        let mut ix = self.alloc.index();
        for f in p.frees {
            ix.freeing.remove(&f.raw());
        }
        ix.unpin(&self.pins);
        self.pins.clear();
    }

    /// Builds the action array: reservations, then links, then frees.
    fn build(&mut self, p: &Publish<'_>) -> Result<(), ferrite_pmdk::Error> {
        let obj = &self.alloc.obj;
        self.acts.clear();
        for r in p.allocs {
            // Present: checked by `stage`.
            if let Some(a) = self.pending.get(&r.off().raw()) {
                self.acts.push(*a);
            }
        }
        for l in p.links {
            // SAFETY: `stage` checked that the word lies in the root object
            // or in a live or reserved block of ours — never PMDK metadata.
            self.acts
                .push(unsafe { obj.set_value_action(l.at.raw(), l.value) }?);
        }
        for f in p.frees {
            // SAFETY: `stage` checked that the block is live and marked it
            // as being freed, so no other publish frees it meanwhile.
            self.acts.push(unsafe { obj.defer_free_action(f.raw()) }?);
        }
        Ok(())
    }
}

impl AllocThread for PmdkThread<'_> {
    fn reserve(&mut self, size: usize) -> ferrite_alloc::Result<Reservation> {
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        let max = PmemObj::max_alloc_size().min(self.alloc.obj.mapped_len());
        if size > max {
            return Err(AllocError::TooLarge { size, max });
        }
        let r = self
            .alloc
            .obj
            .reserve(size, ENGINE_TYPE_NUM)
            .map_err(|e| pmdk_err(size, self.alloc.free_bytes(), e))?;
        self.alloc.index().reserved.insert(r.off, r.usable as u64);
        self.pending.insert(r.off, r.action);
        Ok(Reservation::external(
            self.alloc.id,
            self.owner,
            r.off,
            r.usable as u64,
        ))
    }

    fn cancel(&mut self, r: Reservation) -> ferrite_alloc::Result<()> {
        self.check_mine(&r)?;
        let off = r.off().raw();
        let mut ix = self.alloc.index();
        if ix.pinned.contains_key(&off) {
            return Err(linked_in_flight(off));
        }
        ix.reserved.remove(&off);
        drop(ix);
        if let Some(a) = self.pending.remove(&off) {
            self.alloc.obj.cancel(&mut [a]);
        }
        Ok(())
    }

    fn publish(&mut self, p: &Publish<'_>) -> ferrite_alloc::Result<()> {
        if p.allocs.is_empty() && p.frees.is_empty() && p.links.is_empty() {
            return Ok(());
        }
        self.stage(p)?;
        if self.alloc.fence_first {
            self.alloc.door.fence();
        }
        let res = self
            .build(p)
            .and_then(|()| self.alloc.obj.publish(&mut self.acts));
        self.acts.clear();
        if let Err(e) = res {
            // Nothing was published; the reservations stay reserved.
            self.unstage(p);
            return Err(pmdk_err(0, self.alloc.free_bytes(), e));
        }
        let mut ix = self.alloc.index();
        ix.unpin(&self.pins);
        self.pins.clear();
        for r in p.allocs {
            let off = r.off().raw();
            self.pending.remove(&off);
            ix.reserved.remove(&off);
            ix.live.insert(off, r.usable_size() as u64);
            ix.in_use += r.usable_size() as u64;
        }
        for f in p.frees {
            ix.freeing.remove(&f.raw());
            if let Some(n) = ix.live.remove(&f.raw()) {
                ix.in_use -= n;
            }
        }
        Ok(())
    }

    /// Unsupported: PMDK applies its heap metadata only inside its own
    /// `pmemobj_publish` (or `pmemobj_tx_publish`, in a PMDK transaction);
    /// it exposes no stores an engine's log could carry and replay. An
    /// engine on PMDK publishes instead (2 or more PMDK fences).
    fn prepare(&mut self, _p: &Publish<'_>, _out: &mut Vec<MetaOp>) -> ferrite_alloc::Result<()> {
        Err(AllocError::Unsupported {
            allocator: NAME,
            what: "prepare: PMDK commits allocations only through its own pmemobj_publish redo log, so they cannot be folded into a caller's log; publish instead",
        })
    }

    /// Nothing to do: `prepare` never succeeds.
    fn commit_prepared(&mut self, _p: &Publish<'_>) {}

    /// Nothing to do: `prepare` never succeeds.
    fn abort_prepared(&mut self, _p: &Publish<'_>) {}

    fn root(&mut self, size: usize) -> ferrite_alloc::Result<POff<u8>> {
        let _g = self
            .alloc
            .root_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let (cur, cur_len) = self.alloc.root_span();
        if cur != 0 {
            if (cur_len as usize) < size {
                return Err(AllocError::BadOption(format!(
                    "the root object has {cur_len} bytes, {size} requested"
                )));
            }
            return Ok(POff::new(cur));
        }
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        // pmemobj_root allocates, zeroes and persists the root and links it
        // from the pool header atomically.
        let off = self
            .alloc
            .obj
            .root(size)
            .map_err(|e| pmdk_err(size, self.alloc.free_bytes(), e))?;
        let len = self.alloc.obj.root_size() as u64;
        self.alloc.root_len.store(len, Ordering::Relaxed);
        self.alloc.root_off.store(off, Ordering::Release);
        Ok(POff::new(off))
    }

    fn max_publish_ops(&self) -> usize {
        MAX_PUBLISH_OPS
    }
}

impl Drop for PmdkThread<'_> {
    /// Returns the reservations the handle never published (as a thread
    /// exit would, for PMDK's DRAM-only reservations).
    /// A reservation another thread's publish is linking into (pinned)
    /// is left reserved instead: PMDK forgets it at the next open.
    fn drop(&mut self) {
        let mut ix = self.alloc.index();
        let mut acts = Vec::new();
        for (off, a) in &self.pending {
            if !ix.pinned.contains_key(off) {
                ix.reserved.remove(off);
                acts.push(*a);
            }
        }
        drop(ix);
        self.alloc.obj.cancel(&mut acts);
    }
}

/// Why a PMDK-backed store could not be made or opened.
#[derive(Debug, thiserror::Error)]
pub enum PmdkStoreError {
    /// libpmemobj refused the pool (missing file, existing file on create,
    /// other layout, too small, ...).
    #[error("PMDK: {0}")]
    Pmdk(#[from] ferrite_pmdk::Error),
    /// The engine's create or open failed (a damaged superblock included).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The allocator could not be put on the pool or make the root object.
    #[error("allocator: {0}")]
    Alloc(#[from] AllocError),
    /// Wrapping PMDK's mapping for Ferrite failed (e.g. no flush
    /// instruction for the `adr` domain), or removing the pool file.
    #[error("{0}")]
    Setup(String),
    /// The pool has no root object, so no store.
    #[error("{} holds no Ferrite store (no root object)", .0.display())]
    NoStore(PathBuf),
}

/// A [`Store`] on PMDK's allocator, in a PMDK pool file it owns.
///
/// Dereferences to the [`Store`]. Dropping it drops the store first, then
/// the allocator; the pool is closed (`pmemobj_close`) when the last
/// holder of it — the allocator, or the mapping the engine's region is
/// built on — is gone, i.e. after the store.
pub struct PmdkStore {
    // Field order is drop order: the store (and its engine, which holds
    // the region and an `Arc` of the allocator) before our own `Arc`.
    store: Store,
    alloc: Arc<PmdkAlloc>,
    path: PathBuf,
}

impl std::fmt::Debug for PmdkStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmdkStore")
            .field("path", &self.path)
            .field("store", &self.store)
            .finish()
    }
}

impl std::ops::Deref for PmdkStore {
    type Target = Store;
    fn deref(&self) -> &Store {
        &self.store
    }
}

impl PmdkStore {
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The PMDK allocator under the store.
    pub fn alloc(&self) -> &Arc<PmdkAlloc> {
        &self.alloc
    }

    /// The pool file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Finishes the engine's background work, drops the store, then the
    /// allocator (closing the pool).
    pub fn close(self) -> Result<(), PmdkStoreError> {
        let PmdkStore { store, alloc, .. } = self;
        store.close()?;
        drop(alloc);
        Ok(())
    }

    /// [`close`](Self::close)s the store and deletes its pool file.
    pub fn remove(self) -> Result<(), PmdkStoreError> {
        let path = self.path.clone();
        self.close()?;
        std::fs::remove_file(&path)
            .map_err(|e| PmdkStoreError::Setup(format!("removing {}: {e}", path.display())))
    }
}

/// Superblock offset inside a root object at `root`: the first 64-byte
/// boundary (PMDK aligns objects to 16 bytes; the store wants 64).
fn sb_off(root: u64) -> u64 {
    root.next_multiple_of(64)
}

/// The root bytes a store of `opts` needs: its area plus alignment slack.
fn root_bytes(opts: &StoreOptions) -> u64 {
    area_bytes(opts) + 64
}

fn pmdk_opts(opts: &StoreOptions) -> StoreOptions {
    opts.clone().allocator(AllocKind::Pmdk)
}

/// Creates a PMDK pool of `size` bytes at `path` (which must not exist;
/// put it on `/dev/shm`, and set `PMEM_IS_PMEM_FORCE=1` before the first
/// PMDK call of the process for PMDK's flush path, as the other PMDK
/// baselines do) and a store of `opts.engine` on PMDK's allocator in it.
/// `opts.allocator` is ignored (recorded as [`AllocKind::Pmdk`]).
pub fn pmdk_store(
    path: &Path,
    size: u64,
    opts: &StoreOptions,
) -> Result<PmdkStore, PmdkStoreError> {
    let opts = pmdk_opts(opts);
    let size = usize::try_from(size)
        .map_err(|_| PmdkStoreError::Setup(format!("pool size {size} does not fit usize")))?;
    let obj = Arc::new(PmemObj::create(path, PMDK_LAYOUT, size)?);
    let alloc = Arc::new(PmdkAlloc::new(obj)?);
    let root_len = usize::try_from(root_bytes(&opts))
        .map_err(|_| PmdkStoreError::Setup("engine area too large".into()))?;
    let root = alloc.thread()?.root(root_len)?.raw();
    let whole = alloc.region()?;
    let store = Store::create_with(whole, sb_off(root), alloc.clone(), &opts)?;
    Ok(PmdkStore {
        store,
        alloc,
        path: path.to_path_buf(),
    })
}

/// Opens the store in the PMDK pool at `path` (made by [`pmdk_store`]):
/// PMDK recovers its heap, the allocator indexes its blocks, the engine
/// runs its recovery. Of `opts` only the runtime knobs are used.
pub fn open_pmdk_store(path: &Path, opts: &StoreOptions) -> Result<PmdkStore, PmdkStoreError> {
    let opts = pmdk_opts(opts);
    let obj = Arc::new(PmemObj::open(path, PMDK_LAYOUT)?);
    let alloc = Arc::new(PmdkAlloc::new(obj)?);
    let root = alloc.root().raw();
    if root == 0 {
        return Err(PmdkStoreError::NoStore(path.to_path_buf()));
    }
    // The superblock (64 bytes at the aligned offset) must lie in the root.
    let root_len = alloc.usable_size(POff::new(root))? as u64;
    if sb_off(root) + 64 > root + root_len {
        return Err(EngineError::Corrupt(format!(
            "the root object ({root_len} bytes) cannot hold a superblock"
        ))
        .into());
    }
    let whole = alloc.region()?;
    // The engine's whole area must lie in the root too, not just the
    // superblock: decode it against the root's end before the engine
    // trusts it (open_with checks it only against the pool's end).
    let mut raw = [0u8; 64];
    whole.read(sb_off(root) as usize, &mut raw);
    Superblock::decode(&raw, root + root_len - sb_off(root))?;
    let store = Store::open_with(whole, sb_off(root), alloc.clone(), &opts)?;
    Ok(PmdkStore {
        store,
        alloc,
        path: path.to_path_buf(),
    })
}
