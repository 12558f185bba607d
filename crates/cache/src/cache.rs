//! The cache: persistent tier (slots in a pool region), DRAM tier (clean
//! hot pages in frames), page locks, inferred copy-on-write transactions,
//! non-transaction scopes, write-back, eviction, migration and recovery.
//!
//! # Concurrency
//!
//! One volatile mutex (`Meta`) guards the lookup table, the mirror of the
//! entry table, the free lists, the page-lock table and the clocks; every
//! change of a persistent entry happens under it. Page *contents* are read
//! and written under page locks only, outside the mutex. A thread never
//! waits for a page lock while holding the mutex: it drops it and waits
//! through the medium's `wait_hint`, which is what lets the crash
//! simulator's lockstep runs hand over to the lock holder. The mutex is
//! held across persistent-memory events (commit, entry updates, DRAM
//! promotion and demotion) inside a [`LockHeld`] section, so lockstep runs
//! never switch inside it.
//!
//! Disk I/O never happens under the mutex. A page-in marks the page
//! *loading* and reserves a slot (entry FREE, off the free list) under it,
//! reads the disk and persists the slot's bytes with it released, then
//! takes it again to map the slot CLEAN; a session that wants a loading
//! page waits on the page (like a page lock) and retries. A write-back
//! (eviction of a dirty victim, [`Cache::sync_all`]) copies the batch's
//! bytes and marks its slots and pages *in transit* under the mutex,
//! writes and syncs with it released, and marks CLEAN afterwards only the
//! slots whose generation did not move (see `write_back`). In-transit
//! slots are never victims; a session that finds only in-transit slots
//! waits for them instead of failing with [`CacheError::CacheFull`].
//!
//! # Transactions (strict two-phase locking, inferred)
//!
//! A session's first write lock (outside a non-transaction scope) opens a
//! transaction. Each page write-locked in it gets a copy in a fresh slot
//! (UNCOMMITTED, tagged with the session) and the lookup points at the
//! copy; the committed slot stays mapped. Releases inside the transaction
//! are only logical: the physical locks are kept until the session's last
//! write lock is released (or downgraded), which commits:
//!
//! 1. flush every copy and its entry, fence (copies durable);
//! 2. the session's transaction word := COMMITTED, persist — the commit point;
//! 3. the old slots' entries := FREE, fence;
//! 4. the copies' entries := DIRTY, fence;
//! 5. the transaction word := 0, persist;
//!
//! and only then releases the physical locks, so nothing another session
//! can see is ever rolled back. A page held in DRAM is moved to a fresh
//! slot as the copy when it is write-locked (its committed version is the
//! disk's: DRAM pages are always clean).
//!
//! Recovery ([`Cache::open`]) rolls forward every session whose word says
//! COMMITTED and rolls back every other UNCOMMITTED slot; see
//! [`crate::format`] for the invariants it relies on.

mod session;
pub use session::{PageGuard, Session};

use crate::disk::Disk;
use crate::error::{CacheError, Result};
use crate::fault::Fault;
use crate::format::{BITS_PER_PAGE, Entry, Geometry, PAGE, SUPERBLOCK, SlotState, TxWord};
use ferrite_pmem::{LockHeld, Region};
use parking_lot::{Mutex, MutexGuard};
use std::cell::RefCell;
// Keys are page and slot numbers: FxHash, not SipHash (no untrusted keys,
// and the lookup runs on every page access under the metadata mutex).
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// How a cache runs (not persistent: may differ between opens).
#[derive(Clone, Debug)]
pub struct CacheOptions {
    /// Frames of the DRAM tier (0: no DRAM tier).
    pub dram_pages: usize,
    /// Honour non-transaction scopes (off: they run as transactions — the
    /// "non-transactions off" ablation).
    pub honour_non_tx: bool,
    /// Copy-on-write transactions (off: every write is in place, as in a
    /// non-transaction — not crash-safe; the volatile DRAM-cache baseline
    /// and P1's "PMEM only" ablation).
    pub transactions: bool,
    /// Sync the disk before a dirty page leaves the cache (off only for the
    /// volatile baseline, whose durability is its write-ahead log).
    pub sync_on_evict: bool,
    /// A planted bug (crash checks and the bench's early-release ablation
    /// only; `None` is the real protocol).
    #[cfg(feature = "checks")]
    pub fault: Option<Fault>,
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions {
            dram_pages: 0,
            honour_non_tx: true,
            transactions: true,
            sync_on_evict: true,
            #[cfg(feature = "checks")]
            fault: None,
        }
    }
}

impl CacheOptions {
    /// The planted bug: always `None` without the `checks` feature, so
    /// production builds test a constant.
    #[inline(always)]
    pub(crate) fn fault(&self) -> Option<Fault> {
        #[cfg(feature = "checks")]
        {
            self.fault
        }
        #[cfg(not(feature = "checks"))]
        {
            None
        }
    }
}

/// Lock mode of [`Session::get_page`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Read,
    Write,
}

/// Event counts since open.
#[derive(Debug, Default)]
pub struct Stats {
    pub page_ins: AtomicU64,
    pub evictions: AtomicU64,
    pub write_backs: AtomicU64,
    pub syncs: AtomicU64,
    pub promotions: AtomicU64,
    pub demotions: AtomicU64,
    pub commits: AtomicU64,
    pub cow_copies: AtomicU64,
    pub dram_hits: AtomicU64,
}

/// What recovery did at open.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub rolled_forward: usize,
    pub rolled_back_slots: usize,
    pub mapped: usize,
}

/// Dirty pages written back together, under one disk sync, when an
/// eviction meets a dirty victim.
pub const WRITE_BACK_BATCH: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loc {
    Pmem(u32),
    Dram(u32),
}

#[derive(Default)]
struct PLock {
    readers: u32,
    writer: Option<u8>,
}

struct Meta {
    entries: Vec<Option<Entry>>,
    /// Per slot, bumped by every entry change and every in-place
    /// (non-transactional) write grant: a write-back marks a slot CLEAN
    /// only if its generation did not move while the mutex was released.
    slot_gen: Vec<u64>,
    /// Slots whose bytes a write-back is writing to the disk.
    wb_slots: Vec<bool>,
    /// Pages with a write-back in flight (at most one per page).
    wb_pages: HashSet<u32>,
    /// Write-backs in flight.
    wb_inflight: usize,
    /// Pages being paged in: a session that wants one waits.
    loading: HashSet<u32>,
    /// Slots reserved by page-ins in flight (off the free list, entry FREE).
    reserved: usize,
    accessed: Vec<bool>,
    lookup: HashMap<u32, Loc>,
    locks: HashMap<u32, PLock>,
    free_slots: Vec<u32>,
    hand: usize,
    frame_page: Vec<Option<u32>>,
    frame_accessed: Vec<bool>,
    free_frames: Vec<u32>,
    frame_hand: usize,
    free_sessions: Vec<u8>,
    alloc_hint: u32,
}

impl Meta {
    fn locked(&self, page: u32) -> bool {
        self.locks
            .get(&page)
            .is_some_and(|l| l.readers > 0 || l.writer.is_some())
    }
}

/// The metadata mutex, held inside a [`LockHeld`] section (no lockstep
/// hand-off while it is held).
struct MetaGuard<'a> {
    g: MutexGuard<'a, Meta>,
    held: Option<LockHeld>,
}

impl MetaGuard<'_> {
    /// Runs `f` with the mutex released and outside the lock-held section
    /// — disk I/O and stores to slots the caller reserved under the mutex
    /// — then takes the mutex again. Everything read from the metadata
    /// before may have changed on return.
    fn unlocked<U>(&mut self, f: impl FnOnce() -> U) -> U {
        self.held = None;
        let r = MutexGuard::unlocked(&mut self.g, f);
        self.held = Some(LockHeld::enter());
        r
    }
}

impl std::ops::Deref for MetaGuard<'_> {
    type Target = Meta;
    fn deref(&self) -> &Meta {
        &self.g
    }
}
impl std::ops::DerefMut for MetaGuard<'_> {
    fn deref_mut(&mut self) -> &mut Meta {
        &mut self.g
    }
}

/// The page cache. See the module documentation.
pub struct Cache {
    region: Region,
    geo: Geometry,
    disk: Arc<dyn Disk>,
    opts: CacheOptions,
    meta: Mutex<Meta>,
    frames: Vec<Mutex<Box<[u8]>>>,
    pub stats: Stats,
    commit_seq: AtomicU64,
}

impl Cache {
    /// Bytes of persistent memory a cache of `slots` slots and `sessions`
    /// sessions needs over a disk of `disk_pages` pages.
    pub fn required_bytes(slots: u32, sessions: u32, disk_pages: u32) -> Result<usize> {
        Ok(Geometry::new(slots, sessions, disk_pages)?.bytes())
    }

    /// Formats a new cache in `region` over `disk` (whose size fixes the
    /// disk pages): empty tables, and an allocation bitmap on the disk in
    /// which only the bitmap pages themselves are allocated. Then opens it.
    pub fn create(
        region: Region,
        disk: Arc<dyn Disk>,
        slots: u32,
        sessions: u32,
        opts: CacheOptions,
    ) -> Result<Cache> {
        let geo = Geometry::new(slots, sessions, disk.pages())?;
        if geo.bytes() > region.len() {
            return Err(CacheError::Config(format!(
                "the cache needs {} bytes of persistent memory, the region has {}",
                geo.bytes(),
                region.len()
            )));
        }
        // Bitmap first, synced: a cache is only recognised once it is whole.
        for b in 0..geo.bitmap_pages {
            let mut page = vec![0u8; PAGE];
            let lo = b * BITS_PER_PAGE;
            for n in lo..(lo + BITS_PER_PAGE).min(geo.bitmap_pages) {
                let i = (n - lo) as usize;
                page[i / 8] |= 1 << (i % 8);
            }
            disk.write(b, &page)?;
        }
        disk.sync()?;
        region.fill(SUPERBLOCK, geo.slot_base() - SUPERBLOCK, 0);
        region.flush(SUPERBLOCK, geo.slot_base() - SUPERBLOCK);
        region.fence();
        region.write(0, &geo.encode_superblock());
        region.persist(0, SUPERBLOCK);
        Cache::open(region, disk, opts).map(|(c, _)| c)
    }

    /// Opens the cache in `region` over `disk`, running recovery.
    pub fn open(
        region: Region,
        disk: Arc<dyn Disk>,
        opts: CacheOptions,
    ) -> Result<(Cache, RecoveryReport)> {
        let sb = region.read_vec(0, SUPERBLOCK.min(region.len()));
        let geo = Geometry::decode_superblock(&sb, region.len())?;
        if disk.pages() < geo.disk_pages {
            return Err(CacheError::Config(format!(
                "the disk has {} pages, the cache was made for {}",
                disk.pages(),
                geo.disk_pages
            )));
        }
        let mut rep = RecoveryReport::default();
        let committed = Self::read_tx_words(&region, &geo)?;
        let mut entries = Self::read_entries(&region, &geo)?;
        rep.rolled_forward = committed.iter().filter(|c| **c).count();
        Self::free_replaced_slots(&region, &geo, &mut entries, &committed);
        rep.rolled_back_slots = Self::settle_uncommitted(&region, &geo, &mut entries, &committed);
        Self::clear_committed_tx_words(&region, &geo, &committed);
        let (lookup, free_slots) = Self::map_slots(&geo, &entries)?;
        rep.mapped = lookup.len();
        let frames = (0..opts.dram_pages)
            .map(|_| Mutex::new(vec![0u8; PAGE].into_boxed_slice()))
            .collect();
        let meta = Meta {
            accessed: vec![false; geo.slots as usize],
            slot_gen: vec![0; geo.slots as usize],
            wb_slots: vec![false; geo.slots as usize],
            wb_pages: HashSet::default(),
            wb_inflight: 0,
            loading: HashSet::default(),
            reserved: 0,
            entries,
            lookup,
            locks: HashMap::default(),
            free_slots,
            hand: 0,
            frame_page: vec![None; opts.dram_pages],
            frame_accessed: vec![false; opts.dram_pages],
            free_frames: (0..opts.dram_pages as u32).rev().collect(),
            frame_hand: 0,
            free_sessions: (0..geo.sessions as u8).rev().collect(),
            alloc_hint: 0,
        };
        Ok((
            Cache {
                region,
                geo,
                disk,
                opts,
                meta: Mutex::new(meta),
                frames,
                stats: Stats::default(),
                commit_seq: AtomicU64::new(1),
            },
            rep,
        ))
    }

    /// Recovery, reading: whether each session's transaction word says
    /// committed (a word that is neither committed nor clear is corrupt).
    fn read_tx_words(region: &Region, geo: &Geometry) -> Result<Vec<bool>> {
        let mut committed = vec![false; geo.sessions as usize];
        for (t, c) in committed.iter_mut().enumerate() {
            *c = TxWord::decode(region.load_u64(geo.tx_off(t)), t)?;
        }
        Ok(committed)
    }

    /// Recovery, reading: every slot's entry, refusing one that maps a
    /// page beyond the disk or belongs to a session the cache has not.
    fn read_entries(region: &Region, geo: &Geometry) -> Result<Vec<Option<Entry>>> {
        let sessions = geo.sessions as usize;
        let mut entries = Vec::with_capacity(geo.slots as usize);
        for s in 0..geo.slots {
            let e = Entry::decode(region.load_u64(geo.entry_off(s)), s as usize)?;
            if let Some(e) = e {
                if e.page >= geo.disk_pages {
                    return Err(CacheError::Corrupt(format!(
                        "slot {s} holds page {} of a {}-page disk",
                        e.page, geo.disk_pages
                    )));
                }
                if let SlotState::Uncommitted(t) = e.state
                    && t as usize >= sessions
                {
                    return Err(CacheError::Corrupt(format!(
                        "slot {s} belongs to session {t} of {sessions}"
                    )));
                }
            }
            entries.push(e);
        }
        Ok(entries)
    }

    /// Recovery phase A: frees (durably, one fence) the clean or dirty
    /// slots of pages that a committed session's uncommitted copy
    /// replaces. Done before phase B: were an old slot still mapped when
    /// its replacement became DIRTY, a crash there would leave two slots
    /// mapping one page.
    fn free_replaced_slots(
        region: &Region,
        geo: &Geometry,
        entries: &mut [Option<Entry>],
        committed: &[bool],
    ) {
        let rolled: Vec<u32> = entries
            .iter()
            .filter_map(|e| match e {
                Some(Entry {
                    page,
                    state: SlotState::Uncommitted(t),
                }) if committed[*t as usize] => Some(*page),
                _ => None,
            })
            .collect();
        let mut changed = false;
        for s in 0..geo.slots {
            if let Some(e) = entries[s as usize]
                && matches!(e.state, SlotState::Clean | SlotState::Dirty)
                && rolled.contains(&e.page)
            {
                entries[s as usize] = None;
                region.store_u64(geo.entry_off(s), 0);
                region.flush(geo.entry_off(s), 8);
                changed = true;
            }
        }
        if changed {
            region.fence();
        }
    }

    /// Recovery phase B: committed sessions' copies become DIRTY, the
    /// others' are freed (durably, one fence). Returns the slots freed.
    fn settle_uncommitted(
        region: &Region,
        geo: &Geometry,
        entries: &mut [Option<Entry>],
        committed: &[bool],
    ) -> usize {
        let mut rolled_back = 0;
        let mut changed = false;
        for s in 0..geo.slots {
            if let Some(e) = entries[s as usize]
                && let SlotState::Uncommitted(t) = e.state
            {
                let new = if committed[t as usize] {
                    Some(Entry {
                        page: e.page,
                        state: SlotState::Dirty,
                    })
                } else {
                    rolled_back += 1;
                    None
                };
                entries[s as usize] = new;
                region.store_u64(geo.entry_off(s), Entry::encode(new));
                region.flush(geo.entry_off(s), 8);
                changed = true;
            }
        }
        if changed {
            region.fence();
        }
        rolled_back
    }

    /// Recovery, last write: clears the committed sessions' transaction
    /// words (one fence), only once every slot of theirs is settled.
    fn clear_committed_tx_words(region: &Region, geo: &Geometry, committed: &[bool]) {
        let mut changed = false;
        for (t, c) in committed.iter().enumerate() {
            if *c {
                region.store_u64(geo.tx_off(t), 0);
                region.flush(geo.tx_off(t), 8);
                changed = true;
            }
        }
        if changed {
            region.fence();
        }
    }

    /// The page → slot map and the free slots (highest first, so the
    /// lowest is popped first) of the settled `entries`; a page mapped by
    /// two slots is corrupt.
    fn map_slots(
        geo: &Geometry,
        entries: &[Option<Entry>],
    ) -> Result<(HashMap<u32, Loc>, Vec<u32>)> {
        let mut lookup = HashMap::default();
        let mut free_slots = Vec::new();
        for s in (0..geo.slots).rev() {
            match entries[s as usize] {
                None => free_slots.push(s),
                Some(e) => {
                    if lookup.insert(e.page, Loc::Pmem(s)).is_some() {
                        return Err(CacheError::Corrupt(format!(
                            "page {} is mapped by two slots",
                            e.page
                        )));
                    }
                }
            }
        }
        Ok((lookup, free_slots))
    }

    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    pub fn options(&self) -> &CacheOptions {
        &self.opts
    }

    pub fn disk(&self) -> &Arc<dyn Disk> {
        &self.disk
    }

    fn meta(&self) -> MetaGuard<'_> {
        let held = LockHeld::enter();
        MetaGuard {
            g: self.meta.lock(),
            held: Some(held),
        }
    }

    fn set_entry(&self, m: &mut Meta, slot: u32, e: Option<Entry>) {
        m.entries[slot as usize] = e;
        m.slot_gen[slot as usize] += 1;
        self.region
            .store_u64(self.geo.entry_off(slot), Entry::encode(e));
    }

    fn set_entry_persist(&self, m: &mut Meta, slot: u32, e: Option<Entry>) {
        self.set_entry(m, slot, e);
        self.region.persist(self.geo.entry_off(slot), 8);
    }

    fn read_loc(&self, loc: Loc, off: usize, buf: &mut [u8]) {
        match loc {
            Loc::Pmem(s) => self.region.read(self.geo.slot_off(s) + off, buf),
            Loc::Dram(f) => {
                buf.copy_from_slice(&self.frames[f as usize].lock()[off..off + buf.len()])
            }
        }
    }

    /// Dirty slots to write back with `victim`: the victim and up to
    /// [`WRITE_BACK_BATCH`] - 1 other dirty, unlocked, committed slots
    /// that no other write-back has in flight.
    fn dirty_batch(&self, m: &Meta, victim: u32) -> Vec<u32> {
        let mut batch = vec![victim];
        let n = self.geo.slots;
        let mut k = (victim + 1) % n;
        while batch.len() < WRITE_BACK_BATCH && k != victim {
            if self.can_write_back(m, k) {
                batch.push(k);
            }
            k = (k + 1) % n;
        }
        batch
    }

    /// True when slot `s` is a dirty, committed, unlocked mapping whose
    /// page has no write-back in flight (two write-backs of one page could
    /// land on the disk in either order).
    fn can_write_back(&self, m: &Meta, s: u32) -> bool {
        m.entries[s as usize].is_some_and(|e| {
            e.state == SlotState::Dirty
                && !m.locked(e.page)
                && m.lookup.get(&e.page) == Some(&Loc::Pmem(s))
                && !m.wb_slots[s as usize]
                && !m.wb_pages.contains(&e.page)
        })
    }

    /// Writes the dirty slots `batch` to the disk and syncs once, with the
    /// metadata mutex released for the I/O; returns the slots it marked
    /// CLEAN (one fence).
    ///
    /// Under the mutex each slot's bytes are copied and the slot and its
    /// page are marked in transit (`wb_slots`, `wb_pages`: no second
    /// write-back of either starts, and neither is chosen as a victim).
    /// After the sync, again under the mutex, a slot becomes CLEAN only if
    /// its generation is unchanged — nothing mapped, freed or wrote it in
    /// place meanwhile, so its bytes still equal what the disk now holds
    /// durably. A slot is never marked CLEAN before that sync.
    fn write_back(&self, m: &mut MetaGuard<'_>, batch: Vec<u32>) -> Result<Vec<u32>> {
        let mut work = Vec::with_capacity(batch.len());
        for &s in &batch {
            let page = m.entries[s as usize].expect("dirty slot").page;
            let data = self.region.read_vec(self.geo.slot_off(s), PAGE);
            m.wb_slots[s as usize] = true;
            m.wb_pages.insert(page);
            work.push((s, page, m.slot_gen[s as usize], data));
        }
        m.wb_inflight += 1;
        let io = m.unlocked(|| -> Result<()> {
            for (_, page, _, data) in &work {
                self.disk.write(*page, data)?;
            }
            if self.opts.sync_on_evict {
                self.disk.sync()?;
                self.stats.syncs.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        });
        m.wb_inflight -= 1;
        for (s, page, _, _) in &work {
            m.wb_slots[*s as usize] = false;
            m.wb_pages.remove(page);
        }
        io?;
        self.stats
            .write_backs
            .fetch_add(work.len() as u64, Ordering::Relaxed);
        let mut cleaned = Vec::new();
        for (s, page, gen_then, _) in work {
            let dirty = Some(Entry {
                page,
                state: SlotState::Dirty,
            });
            if m.entries[s as usize] == dirty && m.slot_gen[s as usize] == gen_then {
                self.set_entry(
                    m,
                    s,
                    Some(Entry {
                        page,
                        state: SlotState::Clean,
                    }),
                );
                self.region.flush(self.geo.entry_off(s), 8);
                cleaned.push(s);
            }
        }
        if !cleaned.is_empty() {
            self.region.fence();
        }
        Ok(cleaned)
    }

    /// A slot the clock may evict now: committed, mapped, unlocked, not
    /// in transit. (Second chance is the caller's.)
    fn evictable(&self, m: &Meta, s: u32) -> Option<Entry> {
        let e = m.entries[s as usize]?;
        let ok = !matches!(e.state, SlotState::Uncommitted(_))
            && m.lookup.get(&e.page) == Some(&Loc::Pmem(s))
            && !m.locked(e.page)
            && !m.wb_slots[s as usize]
            && !m.wb_pages.contains(&e.page);
        ok.then_some(e)
    }

    /// Frees the evictable slot `s` (its entry FREE, persisted) and returns it.
    fn evict(&self, m: &mut Meta, s: u32, page: u32) -> u32 {
        self.set_entry_persist(m, s, None);
        m.lookup.remove(&page);
        self.stats.evictions.fetch_add(1, Ordering::Relaxed);
        s
    }

    /// A free slot, evicting an unlocked committed page (clock with
    /// second chance) when there is none. A dirty victim is written back
    /// (with a batch of others) and synced before its entry goes FREE; the
    /// mutex is released during that I/O, so on return the caller must
    /// not rely on anything it read from `m` about pages it does not hold
    /// locked (or has not reserved). When every candidate is in transit
    /// (another session's write-back or page-in), waits for it.
    fn alloc_slot(&self, m: &mut MetaGuard<'_>) -> Result<u32> {
        let n = self.geo.slots as usize;
        let mut round = 0u32;
        'retry: loop {
            if let Some(s) = m.free_slots.pop() {
                return Ok(s);
            }
            for _ in 0..2 * n + 1 {
                let s = m.hand;
                m.hand = (m.hand + 1) % n;
                let Some(e) = self.evictable(m, s as u32) else {
                    continue;
                };
                if m.accessed[s] {
                    m.accessed[s] = false;
                    continue;
                }
                let s = s as u32;
                if e.state == SlotState::Dirty {
                    if self.opts.fault() == Some(Fault::EvictBeforeSync) {
                        let data = self.region.read_vec(self.geo.slot_off(s), PAGE);
                        self.evict(m, s, e.page);
                        if let Err(err) = m.unlocked(|| self.disk.write(e.page, &data)) {
                            m.free_slots.push(s);
                            return Err(err);
                        }
                        self.stats.write_backs.fetch_add(1, Ordering::Relaxed);
                        return Ok(s);
                    }
                    // One sync for a batch of dirty pages, not one each.
                    let batch = self.dirty_batch(m, s);
                    let cleaned = self.write_back(m, batch)?;
                    // The mutex was released: the victim may have been
                    // locked, freed or rewritten meanwhile.
                    match self.evictable(m, s) {
                        Some(e) if cleaned.contains(&s) && e.state == SlotState::Clean => {
                            return Ok(self.evict(m, s, e.page));
                        }
                        _ => continue 'retry,
                    }
                }
                return Ok(self.evict(m, s, e.page));
            }
            if m.wb_inflight == 0 && m.reserved == 0 {
                return Err(CacheError::CacheFull);
            }
            // Slots in transit become evictable when their I/O finishes.
            m.unlocked(|| self.region.medium().wait_hint(round));
            round = round.saturating_add(1);
        }
    }

    /// Where `page` is, paging it in from the disk into a slot when it is
    /// in neither tier; `None` when another session is paging it in (the
    /// caller waits and retries).
    ///
    /// The page is marked loading and a slot reserved under the mutex;
    /// the disk read and the slot's persist happen with the mutex
    /// released (the reserved slot's entry stays FREE, so a crash shows
    /// nothing); then, under the mutex again, the entry names the page
    /// (CLEAN, persisted after the bytes) and the lookup maps it.
    fn resident(&self, m: &mut MetaGuard<'_>, page: u32) -> Result<Option<Loc>> {
        if let Some(l) = m.lookup.get(&page) {
            return Ok(Some(*l));
        }
        if !m.loading.insert(page) {
            return Ok(None);
        }
        let s = match self.alloc_slot(m) {
            Ok(s) => s,
            Err(e) => {
                m.loading.remove(&page);
                return Err(e);
            }
        };
        m.reserved += 1;
        let off = self.geo.slot_off(s);
        let io = m.unlocked(|| -> Result<()> {
            let mut buf = vec![0u8; PAGE];
            self.disk.read(page, &mut buf)?;
            self.region.write(off, &buf);
            self.region.persist(off, PAGE);
            Ok(())
        });
        m.reserved -= 1;
        m.loading.remove(&page);
        if let Err(e) = io {
            m.free_slots.push(s);
            return Err(e);
        }
        self.map(m, s, page, SlotState::Clean);
        self.stats.page_ins.fetch_add(1, Ordering::Relaxed);
        Ok(Some(Loc::Pmem(s)))
    }

    /// Puts `data`, the content of disk page `page`, into free slot `s`
    /// and maps it in `state` (CLEAN, or DIRTY for a page about to be
    /// written in place): the slot's bytes are durable before its entry
    /// names the page, so a crash never shows the entry over other bytes.
    fn install(&self, m: &mut Meta, s: u32, page: u32, data: &[u8], state: SlotState) {
        let off = self.geo.slot_off(s);
        self.region.write(off, data);
        self.region.persist(off, PAGE);
        self.map(m, s, page, state);
    }

    /// Maps slot `s`, whose bytes (durable) are disk page `page`'s, in
    /// `state`, CLEAN or DIRTY (persisted). A page about to be written
    /// starts referenced; one paged in or moved between the tiers does
    /// not: the clock gives it a second chance only once it is used.
    fn map(&self, m: &mut Meta, s: u32, page: u32, state: SlotState) {
        self.set_entry_persist(m, s, Some(Entry { page, state }));
        m.accessed[s as usize] = state == SlotState::Dirty;
        m.lookup.insert(page, Loc::Pmem(s));
    }

    /// A free DRAM frame; a victim (unlocked, second chance) goes back to
    /// a free persistent slot when there is one ("never straight to
    /// disk"), else it is dropped — it is clean, the disk has it.
    fn alloc_frame(&self, m: &mut Meta) -> Result<Option<u32>> {
        if let Some(f) = m.free_frames.pop() {
            return Ok(Some(f));
        }
        let n = m.frame_page.len();
        for _ in 0..2 * n + 1 {
            let f = m.frame_hand;
            m.frame_hand = (m.frame_hand + 1) % n;
            let Some(page) = m.frame_page[f] else {
                continue;
            };
            if m.locked(page) {
                continue;
            }
            if m.frame_accessed[f] {
                m.frame_accessed[f] = false;
                continue;
            }
            if let Some(s) = m.free_slots.pop() {
                let data = self.frames[f].lock().to_vec();
                self.install(m, s, page, &data, SlotState::Clean);
                self.stats.demotions.fetch_add(1, Ordering::Relaxed);
            } else {
                m.lookup.remove(&page);
            }
            m.frame_page[f] = None;
            return Ok(Some(f as u32));
        }
        Ok(None)
    }

    /// Moves a clean, hot persistent page (read-locked by the caller
    /// alone) to DRAM: copy, free the slot, then take a frame — in that
    /// order, so that a frame victim is demoted into the slot just freed
    /// (a swap) instead of being dropped for want of a free slot: under
    /// miss pressure there is rarely another, and dropping sent hot DRAM
    /// pages back to the disk. The page is clean, so while it is between
    /// the slot and the frame the disk has it (and the caller's read lock
    /// keeps everyone else off it).
    fn promote(&self, m: &mut Meta, page: u32, s: u32) -> Result<Loc> {
        let data = self.region.read_vec(self.geo.slot_off(s), PAGE);
        self.set_entry_persist(m, s, None);
        m.free_slots.push(s);
        m.lookup.remove(&page);
        let Some(f) = self.alloc_frame(m)? else {
            // Every frame is locked (rare: a frame is locked only while a
            // session reads it): the page goes back to a slot.
            let s = m.free_slots.pop().expect("the slot just freed");
            self.install(m, s, page, &data, SlotState::Clean);
            return Ok(Loc::Pmem(s));
        };
        self.frames[f as usize].lock().copy_from_slice(&data);
        m.frame_page[f as usize] = Some(page);
        m.frame_accessed[f as usize] = false;
        m.lookup.insert(page, Loc::Dram(f));
        self.stats.promotions.fetch_add(1, Ordering::Relaxed);
        Ok(Loc::Dram(f))
    }

    /// Writes every dirty, unlocked page to the disk, syncs once, then marks
    /// them CLEAN (the mutex released during the I/O, as in eviction).
    /// Returns how many pages were written. Pages another session has in
    /// transit, or locks, are left for later.
    pub fn sync_all(&self) -> Result<usize> {
        let mut m = self.meta();
        let batch: Vec<u32> = (0..self.geo.slots)
            .filter(|&s| self.can_write_back(&m, s))
            .collect();
        if batch.is_empty() {
            return Ok(0);
        }
        let n = batch.len();
        self.write_back(&mut m, batch)?;
        Ok(n)
    }

    /// Waits a little (round `round` of a retry loop) the way the cache
    /// waits for a page lock: spins, then yields; under a lockstep crash
    /// run, hands over to another simulated thread. For callers that wait
    /// on something another session holds across persistent events.
    pub fn wait_hint(&self, round: u32) {
        self.region.medium().wait_hint(round);
    }

    /// True when `page` is in either tier now (for tests and tools; the
    /// answer may be stale as soon as it returns).
    pub fn is_cached(&self, page: u32) -> bool {
        self.meta().lookup.contains_key(&page)
    }

    /// Checks the persistent tier against its invariants — for tests and
    /// `ferrite check`: no UNCOMMITTED slot and no transaction word left,
    /// at most one slot per page, the free list and the DRAM tier consistent
    /// with the entries (no leaked slot), and every CLEAN slot equal to its
    /// page on the disk. Only meaningful while no session is active.
    pub fn verify(&self) -> std::result::Result<(), String> {
        let m = self.meta();
        if m.wb_inflight != 0 || m.reserved != 0 || !m.loading.is_empty() {
            return Err("disk I/O still in transit".into());
        }
        if m.wb_slots.iter().any(|b| *b) || !m.wb_pages.is_empty() {
            return Err("a slot or page is still marked in write-back".into());
        }
        for t in 0..self.geo.sessions as usize {
            if self.region.load_u64(self.geo.tx_off(t)) != 0 {
                return Err(format!("session {t}'s transaction word is set"));
            }
        }
        let mut seen = HashMap::default();
        let mut free = 0usize;
        for s in 0..self.geo.slots {
            let w = self.region.load_u64(self.geo.entry_off(s));
            let e = Entry::decode(w, s as usize).map_err(|e| e.to_string())?;
            if e != m.entries[s as usize] {
                return Err(format!("slot {s}: entry {e:?} differs from its mirror"));
            }
            match e {
                None => free += 1,
                Some(e) => {
                    if let SlotState::Uncommitted(t) = e.state {
                        return Err(format!("slot {s} is an uncommitted copy of session {t}"));
                    }
                    if let Some(o) = seen.insert(e.page, s) {
                        return Err(format!("page {} in slots {o} and {s}", e.page));
                    }
                    if m.lookup.get(&e.page) != Some(&Loc::Pmem(s)) {
                        return Err(format!("slot {s} (page {}) is not in the lookup", e.page));
                    }
                    if e.state == SlotState::Clean {
                        let mut d = vec![0u8; PAGE];
                        self.disk.read(e.page, &mut d).map_err(|e| e.to_string())?;
                        if d != self.region.read_vec(self.geo.slot_off(s), PAGE) {
                            return Err(format!(
                                "clean slot {s} differs from disk page {}",
                                e.page
                            ));
                        }
                    }
                }
            }
        }
        let mut fl = m.free_slots.clone();
        fl.sort_unstable();
        fl.dedup();
        if fl.len() != m.free_slots.len() || fl.len() != free {
            return Err(format!(
                "{} slots on the free list, {free} free entries (leak or double free)",
                m.free_slots.len()
            ));
        }
        for (f, p) in m.frame_page.iter().enumerate() {
            if let Some(p) = p {
                if m.lookup.get(p) != Some(&Loc::Dram(f as u32)) {
                    return Err(format!("frame {f} (page {p}) is not in the lookup"));
                }
                let mut d = vec![0u8; PAGE];
                self.disk.read(*p, &mut d).map_err(|e| e.to_string())?;
                if self.frames[f].lock()[..] != d[..] {
                    return Err(format!("DRAM frame {f} differs from disk page {p}"));
                }
            }
        }
        if m.locks
            .values()
            .any(|l| l.readers > 0 || l.writer.is_some())
        {
            return Err("a page lock is still held".into());
        }
        Ok(())
    }
}
