//! [`Store`]: an engine opened on a pool — the superblock written or
//! read ([`Superblock`]), the allocator choice, and the dispatch to
//! [`crate::inp`], [`crate::cow`], [`crate::lsm`], each handed an
//! `EngineCtx` (`ctx.rs`). The superblock's format is in the crate
//! documentation.

use crate::breakdown::Measured;
use crate::ctx::EngineCtx;
use crate::range::Walker;
use crate::txn::{Reader, Snapshot, WriteTxn};
use crate::{
    AllocKind, Durability, Engine, EngineError, EngineKind, EngineRecovery, EngineStats, KeyRange,
    LAYOUT, Op, Result, Session, StoreOptions, Walk, cow, inp, lsm,
};
use ferrite_alloc::{Heap, HeapOptions, LockHeap, LockOptions, PAllocator};
use ferrite_pmem::{HEADER_SIZE, PAGE, Pool, PoolOptions, Region};
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::VecDeque;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

// The superblock's old public paths (`store::Superblock`, `store::SUPERBLOCK_BYTES`).
pub use crate::superblock::{SUPERBLOCK_BYTES, Superblock};

/// Heap lanes beyond the sessions (background work, the checks' own handle).
const SPARE_LANES: u16 = 4;

/// An engine open on a pool. See the crate documentation.
///
/// A `Store` is a cheap handle: clones share one open engine and may move
/// to and be used from any thread. Its reads ([`get`](Self::get),
/// [`range`](Self::range), …) go through cached [`Reader`]s, which hold no
/// session, so any number of threads read at once; its writes borrow one
/// of the store's sessions for the call, waiting for one when all are open.
/// The pool file closes when the last handle, session, reader and view are
/// gone (or at [`close`](Self::close) on the last of them).
#[derive(Clone)]
pub struct Store {
    shared: Arc<Shared>,
}

/// What every handle of one open store shares.
struct Shared {
    core: Arc<Core>,
    /// Sessions the store-level operations keep for reuse.
    idle: Mutex<Vec<StoreSession>>,
    /// Signalled when a session goes back to `idle`.
    returned: Condvar,
    /// Live readers the store-level reads keep for reuse (any number).
    readers: Mutex<Vec<Reader>>,
}

/// The open engine and the pool file it lives in: what a session keeps
/// alive.
pub(crate) struct Core {
    pub(crate) engine: Box<dyn Engine>,
    sb: Superblock,
    recovery: EngineRecovery,
    /// Writers' gate: a [`WriteTxn`] holds it exclusively for its life,
    /// every other write (a session's put, delete, batch) shared for one
    /// operation, so no write lands inside a write transaction.
    pub(crate) writers: Arc<RwLock<()>>,
    /// The pool file, when the store opened it itself. Dropped after the
    /// engine (field order), so nothing writes to an unlocked file.
    pool: Option<Pool>,
}

type SessionBox<'a> = Box<dyn Session + Send + 'a>;

self_cell::self_cell!(
    /// A session together with the engine it borrows.
    struct OwnedSession {
        owner: Arc<Core>,
        #[covariant]
        dependent: SessionBox,
    }
);

/// One thread's session on a [`Store`]: owns what it needs (it keeps the
/// store open), may move between threads, and is used by one at a time.
/// See [`Session`] for its operations.
pub struct StoreSession(OwnedSession);

impl std::fmt::Debug for StoreSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreSession")
            .field("engine", &self.0.borrow_owner().sb.engine)
            .finish()
    }
}

impl Session for StoreSession {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.0.with_dependent_mut(|_, s| s.get_into(key, out))
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.0.with_dependent_mut(|c, s| {
            let _w = c.writers.read();
            s.put(key, value)
        })
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        self.0.with_dependent_mut(|c, s| {
            let _w = c.writers.read();
            s.delete(key)
        })
    }

    fn scan_with(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        self.0
            .with_dependent_mut(|_, s| s.scan_with(from, limit, f))
    }

    fn scan_back_with(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        self.0
            .with_dependent_mut(|_, s| s.scan_back_with(upto, limit, f))
    }

    fn batch(&mut self, ops: &[Op<'_>]) -> Result<()> {
        self.0.with_dependent_mut(|c, s| {
            let _w = c.writers.read();
            s.batch(ops)
        })
    }

    fn batch_with(&mut self, ops: &[Op<'_>], d: Durability) -> Result<()> {
        self.0.with_dependent_mut(|c, s| {
            let _w = c.writers.read();
            s.batch_with(ops, d)
        })
    }
}

/// The session's operations as inherent methods, so that a caller needs
/// no `use ferrite_engine::Session` (each is the [`Session`] method of the
/// same name).
impl StoreSession {
    /// [`Session::get`].
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Session::get(self, key)
    }

    /// [`Session::get_into`].
    pub fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        Session::get_into(self, key, out)
    }

    /// [`Session::put`].
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        Session::put(self, key, value)
    }

    /// [`Session::delete`].
    pub fn delete(&mut self, key: &[u8]) -> Result<bool> {
        Session::delete(self, key)
    }

    /// [`Session::batch`].
    pub fn batch(&mut self, ops: &[Op<'_>]) -> Result<()> {
        Session::batch(self, ops)
    }

    /// [`Session::batch_with`].
    pub fn batch_with(&mut self, ops: &[Op<'_>], d: Durability) -> Result<()> {
        Session::batch_with(self, ops, d)
    }

    /// [`Session::scan`].
    pub fn scan(&mut self, from: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        Session::scan(self, from, limit)
    }

    /// [`Session::range`].
    pub fn range(&mut self, range: &KeyRange) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        Session::range(self, range)
    }

    /// [`Session::range_with`].
    pub fn range_with(
        &mut self,
        range: &KeyRange,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        Session::range_with(self, range, f)
    }

    /// [`Session::first`].
    pub fn first(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        Session::first(self)
    }

    /// [`Session::last`].
    pub fn last(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        Session::last(self)
    }
}

impl StoreSession {
    /// [`Session::batch_with`] without the writers' gate: for the
    /// [`WriteTxn`] that holds it.
    pub(crate) fn batch_in_txn(&mut self, ops: &[Op<'_>], d: Durability) -> Result<()> {
        self.0.with_dependent_mut(|_, s| s.batch_with(ops, d))
    }

    /// The writers' gate of this session's store.
    pub(crate) fn writers(&self) -> Arc<RwLock<()>> {
        self.0.borrow_owner().writers.clone()
    }
}

/// An iterator over a [`KeyRange`] of a [`Store`]: yields owned pairs,
/// reading them in chunks through a [`Reader`] of its own (each chunk a
/// consistent view of its own). An error ends the iteration after it is
/// yielded.
pub struct RangeIter {
    store: Store,
    reader: Option<Reader>,
    walker: Walker,
    buf: VecDeque<(Vec<u8>, Vec<u8>)>,
    failed: bool,
}

impl std::fmt::Debug for RangeIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangeIter")
            .field("walker", &self.walker)
            .finish()
    }
}

impl Iterator for RangeIter {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.buf.is_empty() && !self.walker.done() && !self.failed {
            let reader = self.reader.get_or_insert_with(|| self.store.take_reader());
            let buf = &mut self.buf;
            if let Err(e) = self.walker.step(&mut reader.scan(), &mut |k, v| {
                buf.push_back((k.to_vec(), v.to_vec()));
                true
            }) {
                self.failed = true;
                return Some(Err(e));
            }
        }
        let item = self.buf.pop_front().map(Ok);
        if self.buf.is_empty() && (self.walker.done() || self.failed) {
            // Finished: give the reader back for the store's other reads.
            if let Some(r) = self.reader.take() {
                self.store.give_reader(r);
            }
        }
        item
    }
}

impl Drop for RangeIter {
    fn drop(&mut self) {
        if let Some(r) = self.reader.take() {
            self.store.give_reader(r);
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("superblock", &self.shared.core.sb)
            .finish()
    }
}

/// Bytes a store's superblock and fixed area take: what a caller of
/// [`Store::create_with`] must set aside at the superblock offset.
pub fn area_bytes(opts: &StoreOptions) -> u64 {
    round_page(SUPERBLOCK_BYTES as u64 + fixed_area_bytes(opts) as u64)
}

/// The initial size of a growable store: its header, superblock and fixed
/// area (logs, roots) and 1 MiB, in whole MiB. The heap grows the rest.
fn initial_size(opts: &StoreOptions) -> u64 {
    (HEADER_SIZE as u64 + area_bytes(opts) + (1 << 20)).next_multiple_of(1 << 20)
}

fn fixed_area_bytes(opts: &StoreOptions) -> usize {
    match opts.engine {
        EngineKind::Inp => inp::fixed_area_bytes(opts),
        EngineKind::Cow => cow::fixed_area_bytes(opts),
        EngineKind::Lsm => lsm::fixed_area_bytes(opts),
    }
}

fn check_sessions(opts: &StoreOptions) -> Result<()> {
    if opts.sessions == 0 || opts.sessions > 1000 {
        return Err(EngineError::BadOption(format!(
            "sessions must be 1..=1000, not {}",
            opts.sessions
        )));
    }
    Ok(())
}

fn pmdk_needs_own_pool() -> EngineError {
    EngineError::BadOption(
        "the pmdk allocator lives in a PMDK pool: open it with ferrite-bench's pmdk feature (Store::create_with), not in a Ferrite pool".into(),
    )
}

fn round_page(n: u64) -> u64 {
    n.div_ceil(PAGE as u64) * PAGE as u64
}

fn heap_lanes(sessions: u16) -> u16 {
    sessions.saturating_add(SPARE_LANES)
}

impl Store {
    /// Formats an engine on `pool` (its data area must be unused) and
    /// opens it. The pool must have been created with layout [`LAYOUT`].
    pub fn create(pool: &Pool, opts: &StoreOptions) -> Result<Store> {
        Self::create_core(pool, opts).map(Store::from_core)
    }

    fn create_core(pool: &Pool, opts: &StoreOptions) -> Result<Core> {
        let start = Instant::now();
        check_sessions(opts)?;
        let data = pool.data();
        let data_len = data.len() as u64;
        let engine_area = area_bytes(opts);
        if engine_area + 16 * PAGE as u64 > data_len {
            return Err(EngineError::Full(format!(
                "pool of {data_len} data bytes has no room for a {} store ({engine_area} bytes of logs and roots plus a heap)",
                opts.engine
            )));
        }
        if pool.growable() {
            if opts.allocator != AllocKind::Ferrite {
                return Err(EngineError::BadOption(format!(
                    "the {} allocator cannot grow: put it in a pool of fixed size",
                    opts.allocator
                )));
            }
            // The fixed area is formatted now: the pool must hold it.
            pool.medium()
                .grow_to(HEADER_SIZE + engine_area as usize)
                .map_err(|e| EngineError::Full(format!("cannot grow the pool: {e}")))?;
        }
        let sb = Superblock {
            engine: opts.engine,
            allocator: opts.allocator,
            sessions: opts.sessions,
            engine_area,
            heap_off: engine_area,
            heap_len: data_len - engine_area,
            nonce: opts.nonce.unwrap_or_else(rand::random),
        };
        let heap_region = data
            .sub(sb.heap_off as usize, sb.heap_len as usize)
            .map_err(|e| EngineError::BadOption(e.to_string()))?;
        let alloc: Arc<dyn PAllocator> = match sb.allocator {
            AllocKind::Pmdk => return Err(pmdk_needs_own_pool()),
            AllocKind::Ferrite => {
                let mut ho = HeapOptions::default().lanes(heap_lanes(sb.sessions));
                ho.nonce = opts.nonce;
                Arc::new(Heap::create(heap_region, ho)?)
            }
            AllocKind::Lock => Arc::new(LockHeap::create(
                heap_region,
                LockOptions {
                    nonce: opts.nonce,
                    ..LockOptions::default()
                },
            )?),
        };
        let whole = Region::whole(pool.medium().clone());
        Self::format(whole, HEADER_SIZE as u64, sb, alloc, opts, start)
    }

    /// Formats the engine's area, then writes the superblock at `sb_off`.
    fn format(
        whole: Region,
        sb_off: u64,
        sb: Superblock,
        alloc: Arc<dyn PAllocator>,
        opts: &StoreOptions,
        start: Instant,
    ) -> Result<Core> {
        let ctx = Self::ctx(whole.clone(), sb_off, sb, Arc::new(Measured(alloc)));
        // The engine formats its area first; the superblock, written last,
        // is what makes the pool a store (a crash before it leaves no store).
        let engine = match sb.engine {
            EngineKind::Inp => inp::create(ctx, opts)?,
            EngineKind::Cow => cow::create(ctx, opts)?,
            EngineKind::Lsm => lsm::create(ctx, opts)?,
        };
        whole.write(sb_off as usize, &sb.encode());
        whole.persist(sb_off as usize, 64);
        Ok(Core {
            engine,
            sb,
            writers: Arc::default(),
            recovery: EngineRecovery {
                elapsed: start.elapsed(),
                detail: "created".into(),
                ..EngineRecovery::default()
            },
            pool: None,
        })
    }

    /// Opens the store on `pool`, running the allocator's and the engine's
    /// recovery. The engine and allocator come from the superblock; an
    /// engine or session count set in `opts` that disagrees with it is
    /// refused ([`StoreOptions`]); the runtime knobs are used.
    pub fn open(pool: &Pool, opts: &StoreOptions) -> Result<Store> {
        Self::open_core(pool, opts).map(Store::from_core)
    }

    fn open_core(pool: &Pool, opts: &StoreOptions) -> Result<Core> {
        let start = Instant::now();
        let data = pool.data();
        let mut raw = [0u8; 64];
        data.read(0, &mut raw);
        let sb = Superblock::decode(&raw, data.len() as u64)?;
        opts.expect(sb.engine, sb.sessions)?;
        if sb.heap_len == 0 {
            return Err(EngineError::Corrupt(
                "superblock: a store on an external allocator in a Ferrite pool".into(),
            ));
        }
        let heap_region = data
            .sub(sb.heap_off as usize, sb.heap_len as usize)
            .map_err(|e| EngineError::Corrupt(e.to_string()))?;
        let alloc: Arc<dyn PAllocator> = match sb.allocator {
            AllocKind::Pmdk => return Err(pmdk_needs_own_pool()),
            AllocKind::Ferrite => {
                // A planted heap bug exists only in checks builds.
                #[cfg(any(test, feature = "checks"))]
                let heap = match opts.fault {
                    crate::Fault::Heap(f) => Heap::open_with_fault(heap_region, f),
                    _ => Heap::open(heap_region),
                };
                #[cfg(not(any(test, feature = "checks")))]
                let heap = Heap::open(heap_region);
                Arc::new(heap?)
            }
            AllocKind::Lock => Arc::new(LockHeap::open(heap_region)?),
        };
        let whole = Region::whole(pool.medium().clone());
        Self::recover(whole, HEADER_SIZE as u64, sb, alloc, opts, start)
    }

    /// Opens the engine whose superblock `sb` is at `sb_off`.
    fn recover(
        whole: Region,
        sb_off: u64,
        sb: Superblock,
        alloc: Arc<dyn PAllocator>,
        opts: &StoreOptions,
        start: Instant,
    ) -> Result<Core> {
        let alloc_report = alloc.recovery().clone();
        let ctx = Self::ctx(whole, sb_off, sb, Arc::new(Measured(alloc)));
        let mut o = opts.clone();
        o.engine = sb.engine;
        o.allocator = sb.allocator;
        o.sessions = sb.sessions;
        let (engine, mut recovery) = match sb.engine {
            EngineKind::Inp => inp::open(ctx, &o)?,
            EngineKind::Cow => cow::open(ctx, &o)?,
            EngineKind::Lsm => lsm::open(ctx, &o)?,
        };
        recovery.alloc = alloc_report;
        recovery.elapsed = start.elapsed();
        Ok(Core {
            writers: Arc::default(),
            engine,
            sb,
            recovery,
            pool: None,
        })
    }

    /// Creates a store on an allocator of the caller's (P2's allocator
    /// axis beyond Ferrite's own: PMDK's `pmemobj` heap, in ferrite-bench
    /// under its `pmdk` feature). `whole` spans the mapping whose offsets
    /// the allocator hands out; the superblock and the engine's fixed area
    /// go at `sb_off` (64-byte aligned), in [`area_bytes`]`(opts)` bytes the
    /// caller set aside, zeroed and durable (e.g. the allocator's root
    /// object). `opts.allocator` is recorded, and must be given again to
    /// [`open_with`](Self::open_with).
    pub fn create_with(
        whole: Region,
        sb_off: u64,
        alloc: Arc<dyn PAllocator>,
        opts: &StoreOptions,
    ) -> Result<Store> {
        let start = Instant::now();
        check_sessions(opts)?;
        let engine_area = area_bytes(opts);
        if !sb_off.is_multiple_of(64)
            || sb_off
                .checked_add(engine_area)
                .is_none_or(|e| e > whole.len() as u64)
        {
            return Err(EngineError::BadOption(format!(
                "superblock offset {sb_off:#x} (+{engine_area} bytes) is not a 64-byte aligned area of the mapping"
            )));
        }
        let sb = Superblock {
            engine: opts.engine,
            allocator: opts.allocator,
            sessions: opts.sessions,
            engine_area,
            heap_off: 0,
            heap_len: 0,
            nonce: opts.nonce.unwrap_or_else(rand::random),
        };
        Self::format(whole, sb_off, sb, alloc, opts, start).map(Store::from_core)
    }

    /// Opens a store made by [`create_with`](Self::create_with), running
    /// the engine's recovery (the allocator has recovered itself).
    pub fn open_with(
        whole: Region,
        sb_off: u64,
        alloc: Arc<dyn PAllocator>,
        opts: &StoreOptions,
    ) -> Result<Store> {
        let start = Instant::now();
        let mut raw = [0u8; 64];
        whole
            .check(sb_off as usize, 64)
            .map_err(|e| EngineError::Corrupt(e.to_string()))?;
        whole.read(sb_off as usize, &mut raw);
        let sb = Superblock::decode(&raw, whole.len() as u64 - sb_off)?;
        opts.expect(sb.engine, sb.sessions)?;
        if sb.heap_len != 0 || sb.allocator != opts.allocator {
            return Err(EngineError::Corrupt(format!(
                "superblock: the store was made on the {} allocator, not on {}",
                sb.allocator, opts.allocator
            )));
        }
        Self::recover(whole, sb_off, sb, alloc, opts, start).map(Store::from_core)
    }

    fn from_core(core: Core) -> Store {
        Store {
            shared: Arc::new(Shared {
                core: Arc::new(core),
                idle: Mutex::new(Vec::new()),
                readers: Mutex::new(Vec::new()),
                returned: Condvar::new(),
            }),
        }
    }

    fn with_pool(core: Core, pool: Pool) -> Store {
        Store::from_core(Core {
            pool: Some(pool),
            ..core
        })
    }

    fn ctx(whole: Region, sb_off: u64, sb: Superblock, alloc: Arc<dyn PAllocator>) -> EngineCtx {
        EngineCtx {
            pool: whole,
            area_off: sb_off + SUPERBLOCK_BYTES as u64,
            area_len: sb.engine_area - SUPERBLOCK_BYTES as u64,
            sb,
            alloc,
        }
    }

    fn pool_options(size: u64, max: Option<u64>, opts: &StoreOptions) -> PoolOptions {
        let mut po = PoolOptions::new(LAYOUT, size);
        if let Some(m) = max {
            po = po.max_size(m);
        }
        match opts.domain {
            Some(d) => po.domain(d),
            None => po,
        }
    }

    /// Creates a pool file of `size` bytes at `path` (domain from the
    /// options, else `FERRITE_DOMAIN` or detection) and a store on it,
    /// growable up to [`StoreOptions::max_size`] if that is set. A create
    /// that fails leaves no file behind.
    pub fn create_file(path: impl AsRef<Path>, size: u64, opts: &StoreOptions) -> Result<Store> {
        Self::create_file_sized(path.as_ref(), size, opts.max_size, opts)
    }

    fn create_file_sized(
        path: &Path,
        size: u64,
        max: Option<u64>,
        opts: &StoreOptions,
    ) -> Result<Store> {
        if max.is_some() && opts.allocator != AllocKind::Ferrite {
            return Err(EngineError::BadOption(format!(
                "the {} allocator cannot grow: give the store a size, not a maximum",
                opts.allocator
            )));
        }
        let pool = Pool::create(path, &Self::pool_options(size, max, opts))?;
        match Self::create_core(&pool, opts) {
            Ok(core) => Ok(Store::with_pool(core, pool)),
            Err(e) => {
                drop(pool);
                // The file is ours (create refused an existing one) and
                // holds no store: leave nothing a later create trips on.
                let _ = std::fs::remove_file(path);
                Err(e)
            }
        }
    }

    /// Opens the store in the pool file at `path`, recovering it.
    pub fn open_file(path: impl AsRef<Path>, opts: &StoreOptions) -> Result<Store> {
        let pool = Pool::open(path, &Self::pool_options(0, None, opts))?;
        let core = Self::open_core(&pool, opts)?;
        Ok(Store::with_pool(core, pool))
    }

    /// Opens the store at `path`, creating the file (of `size` bytes) if
    /// there is none.
    pub fn open_or_create_file(
        path: impl AsRef<Path>,
        size: u64,
        opts: &StoreOptions,
    ) -> Result<Store> {
        let path = path.as_ref();
        if path.exists() {
            Store::open_file(path, opts)
        } else {
            Store::create_file(path, size, opts)
        }
    }

    /// Opens the store at `path`, creating it if there is none: of
    /// [`StoreOptions::size`] if given (growable to
    /// [`StoreOptions::max_size`] if that is given too), else small and
    /// growing on demand up to [`StoreOptions::max_size`] (default
    /// [`crate::DEFAULT_MAX_SIZE`]).
    ///
    /// ```no_run
    /// use ferrite_engine::{KeyRange, Store, StoreOptions};
    /// # fn main() -> Result<(), ferrite_engine::EngineError> {
    /// let store = Store::open_or_create("/dev/shm/fruit.pool", &StoreOptions::default())?;
    /// store.put(b"apple", b"red")?;
    /// assert_eq!(store.get(b"apple")?.as_deref(), Some(&b"red"[..]));
    /// for pair in store.range(KeyRange::prefix(b"app")) {
    ///     let (k, v) = pair?;
    ///     println!("{} = {}", String::from_utf8_lossy(&k), String::from_utf8_lossy(&v));
    /// }
    /// # Ok(()) }
    /// ```
    pub fn open_or_create(path: impl AsRef<Path>, opts: &StoreOptions) -> Result<Store> {
        let path = path.as_ref();
        if path.exists() {
            return Store::open_file(path, opts);
        }
        Store::create_new(path, opts)
    }

    /// Creates a store in a new pool file at `path` (refusing an existing
    /// file), sized as [`open_or_create`](Self::open_or_create) sizes it:
    /// fixed at [`StoreOptions::size`] when only that is given, else
    /// growable. A create that fails leaves no file behind.
    pub fn create_new(path: impl AsRef<Path>, opts: &StoreOptions) -> Result<Store> {
        let path = path.as_ref();
        let (size, max) = match (opts.size, opts.max_size) {
            (Some(s), m) => (s, m),
            (None, None) if opts.allocator != AllocKind::Ferrite => (crate::DEFAULT_SIZE, None),
            (None, m) => (
                initial_size(opts),
                Some(m.unwrap_or(crate::DEFAULT_MAX_SIZE)),
            ),
        };
        Self::create_file_sized(path, size, max, opts)
    }

    fn core(&self) -> &Core {
        &self.shared.core
    }

    /// A new session, owned: it may be kept in a struct, moved to another
    /// thread, and outlive this handle. At most the store's session count
    /// are open at once ([`EngineError::TooManySessions`] past it); the
    /// sessions the store-level operations keep idle make room first.
    pub fn session(&self) -> Result<StoreSession> {
        loop {
            let core = self.shared.core.clone();
            match OwnedSession::try_new(core, |c| c.engine.session()) {
                Ok(s) => return Ok(StoreSession(s)),
                Err(EngineError::TooManySessions { max }) => {
                    // Give back an idle session of the store-level
                    // operations, if one is there, and try again.
                    if self.shared.idle.lock().pop().is_none() {
                        return Err(EngineError::TooManySessions { max });
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A session for one store-level operation: an idle one, a new one,
    /// or (all open) the next one given back, waiting up to
    /// [`SESSION_WAIT`].
    pub(crate) fn checkout(&self) -> Result<StoreSession> {
        let deadline = Instant::now() + SESSION_WAIT;
        loop {
            let mut idle = self.shared.idle.lock();
            if let Some(s) = idle.pop() {
                return Ok(s);
            }
            let core = self.shared.core.clone();
            match OwnedSession::try_new(core, |c| c.engine.session()) {
                Ok(s) => return Ok(StoreSession(s)),
                Err(EngineError::TooManySessions { max }) => {
                    if Instant::now() >= deadline {
                        return Err(EngineError::TooManySessions { max });
                    }
                    // A session the caller holds is dropped without a
                    // signal: look again now and then.
                    self.shared
                        .returned
                        .wait_for(&mut idle, Duration::from_millis(10));
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub(crate) fn checkin(&self, s: StoreSession) {
        self.shared.idle.lock().push(s);
        self.shared.returned.notify_one();
    }

    fn with_session<R>(&self, f: impl FnOnce(&mut StoreSession) -> Result<R>) -> Result<R> {
        let mut s = self.checkout()?;
        let r = f(&mut s);
        self.checkin(s);
        r
    }

    fn take_reader(&self) -> Reader {
        self.shared
            .readers
            .lock()
            .pop()
            .unwrap_or_else(|| Reader::new(self.shared.core.clone()))
    }

    fn give_reader(&self, r: Reader) {
        self.shared.readers.lock().push(r);
    }

    fn with_reader<R>(&self, f: impl FnOnce(&mut Reader) -> Result<R>) -> Result<R> {
        let mut r = self.take_reader();
        let out = f(&mut r);
        self.give_reader(r);
        out
    }

    /// A live reader of its own (owned, any number): reads that hold no
    /// session, for a thread that reads a lot.
    pub fn reader(&self) -> Reader {
        Reader::new(self.shared.core.clone())
    }

    /// Reads `key` (through a reader: no session needed).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.with_reader(|r| r.get(key))
    }

    /// Reads `key` into `out` (cleared first); false when absent.
    pub fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.with_reader(|r| r.get_into(key, out))
    }

    /// Inserts or replaces; durable when it returns.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.with_session(|s| s.put(key, value))
    }

    /// Removes `key`; false when it was absent. Durable when it returns.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        self.with_session(|s| s.delete(key))
    }

    /// Applies `ops` atomically; durable when it returns.
    pub fn batch(&self, ops: &[Op<'_>]) -> Result<()> {
        self.with_session(|s| s.batch(ops))
    }

    /// Applies `ops` atomically, durable per `d` ([`Durability::Eventual`]:
    /// at the next immediate commit, [`sync`](Self::sync) or close).
    pub fn batch_with(&self, ops: &[Op<'_>], d: Durability) -> Result<()> {
        self.with_session(|s| s.batch_with(ops, d))
    }

    /// Makes every relaxed commit durable.
    pub fn sync(&self) -> Result<()> {
        self.core().engine.sync()
    }

    /// The pairs of `range`, lazily, in its order.
    pub fn range(&self, range: KeyRange) -> RangeIter {
        RangeIter {
            store: self.clone(),
            reader: None,
            walker: Walker::new(range),
            buf: VecDeque::new(),
            failed: false,
        }
    }

    /// A write transaction: reads see the store with the transaction's
    /// own writes; [`WriteTxn::commit`] applies them all at once (one
    /// atomic, durable batch), dropping it applies none.
    ///
    /// Isolation: serializable. One write transaction at a time; while it
    /// lives every other write of the store (any handle, any session)
    /// waits, as in LMDB and redb. So a thread holding one must not write
    /// through another handle (it would wait for itself); reads and
    /// snapshots go on.
    pub fn write(&self) -> Result<WriteTxn> {
        let session = self.checkout()?;
        Ok(WriteTxn::begin(self.clone(), session))
    }

    /// A read-only, consistent view: every read through it sees the store
    /// as it was when it was taken.
    ///
    /// Per engine: **CoW** holds its version (writers go on; the blocks
    /// they replace are freed only after the view is dropped). **LSM**
    /// copies the memtable and holds the run list (writers go on; a
    /// memtable flush waits until the view is dropped). **InP** updates in
    /// place, so its view holds the engine's read lock: writers wait until
    /// it is dropped. Keep views short-lived, and never write on a thread
    /// that holds an InP or LSM view.
    pub fn snapshot(&self) -> Result<Snapshot> {
        Snapshot::take(self.shared.core.clone())
    }

    /// Live keys: exact. InP and CoW keep a counter (O(1)); LSM merges
    /// the memtable with every run (O(keys)).
    pub fn len(&self) -> Result<u64> {
        self.core().engine.len()
    }

    /// True when the store holds no key.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.first()?.is_none())
    }

    /// The pair with the least key.
    pub fn first(&self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        self.with_reader(|r| r.first())
    }

    /// The pair with the greatest key.
    pub fn last(&self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        self.with_reader(|r| r.last())
    }

    /// The engine of this store.
    pub fn kind(&self) -> EngineKind {
        self.core().sb.engine
    }

    /// The allocator of this store.
    pub fn allocator_kind(&self) -> AllocKind {
        self.core().sb.allocator
    }

    /// The decoded superblock.
    pub fn superblock(&self) -> &Superblock {
        &self.core().sb
    }

    /// The allocator holding the engine's blocks.
    pub fn allocator(&self) -> &dyn PAllocator {
        self.core().engine.allocator()
    }

    /// What open (or create) did, and how long it took.
    pub fn recovery(&self) -> &EngineRecovery {
        &self.core().recovery
    }

    /// Counters since open.
    pub fn stats(&self) -> EngineStats {
        self.core().engine.stats()
    }

    /// Finishes background work.
    pub fn quiesce(&self) -> Result<()> {
        self.core().engine.quiesce()
    }

    /// Walks the whole store (quiesce first; no session writing).
    pub fn walk(&self) -> Result<Walk> {
        self.core().engine.walk()
    }

    /// Verifies every record and node, listing each damaged one
    /// ([`Engine::scrub`]); `pace` gets the bytes read so far.
    pub fn scrub(&self, pace: &mut dyn FnMut(u64)) -> Result<crate::Scrub> {
        self.core().engine.scrub(pace)
    }

    /// Unlinks the damaged records a [`scrub`](Self::scrub) found that can
    /// be removed alone ([`Engine::remove_damaged`]).
    pub fn remove_damaged(&self, damaged: &[crate::Damage]) -> Result<Vec<String>> {
        self.core().engine.remove_damaged(damaged)
    }

    /// The pool file this store opened, if it opened one.
    pub fn pool(&self) -> Option<&Pool> {
        self.core().pool.as_ref()
    }

    /// Finishes background work; on the last handle (no clone, no session
    /// left) also closes the pool file, if the store opened it, making
    /// everything durable. On any other handle it is a drop.
    pub fn close(self) -> Result<()> {
        self.quiesce()?;
        let Ok(shared) = Arc::try_unwrap(self.shared) else {
            return Ok(());
        };
        drop(shared.idle);
        drop(shared.readers);
        let Ok(core) = Arc::try_unwrap(shared.core) else {
            return Ok(());
        };
        let Core { engine, pool, .. } = core;
        drop(engine);
        if let Some(p) = pool {
            p.close()?;
        }
        Ok(())
    }
}

/// How long a store-level operation waits for a session when all are open.
pub const SESSION_WAIT: Duration = Duration::from_secs(30);
