//! [`Store`]: an engine opened on a pool — the superblock, the allocator
//! choice, and the dispatch to [`crate::inp`], [`crate::cow`], [`crate::lsm`].
//! The superblock's format is in the crate documentation.

use crate::breakdown::Measured;
use crate::{
    AllocKind, Engine, EngineError, EngineKind, EngineRecovery, EngineStats, LAYOUT, Result,
    Session, StoreOptions, Walk, cow, inp, lsm,
};
use ferrite_alloc::{Heap, HeapOptions, LockHeap, LockOptions, PAllocator};
use ferrite_pmem::{HEADER_SIZE, PAGE, Pool, PoolOptions, Region};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

const MAGIC: &[u8; 8] = b"FRTENGN1";
const VERSION: u16 = 1;
/// Bytes of the superblock page at the start of the data area.
pub const SUPERBLOCK_BYTES: usize = 4096;
const SB_CRC_AT: usize = 60;
/// Heap lanes beyond the sessions (background work, the checks' own handle).
const SPARE_LANES: u16 = 4;

/// The decoded superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub engine: EngineKind,
    pub allocator: AllocKind,
    pub sessions: u16,
    /// Engine area length from the data start (superblock included).
    pub engine_area: u64,
    /// Heap offset from the data start.
    pub heap_off: u64,
    pub heap_len: u64,
    pub nonce: u64,
}

impl Superblock {
    pub fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..8].copy_from_slice(MAGIC);
        b[8..10].copy_from_slice(&VERSION.to_le_bytes());
        b[10] = self.engine.code();
        b[11] = self.allocator.code();
        b[12..16].copy_from_slice(&u32::from(self.sessions).to_le_bytes());
        b[16..24].copy_from_slice(&self.engine_area.to_le_bytes());
        b[24..32].copy_from_slice(&self.heap_off.to_le_bytes());
        b[32..40].copy_from_slice(&self.heap_len.to_le_bytes());
        b[40..48].copy_from_slice(&self.nonce.to_le_bytes());
        let crc = crc32c::crc32c(&b[..SB_CRC_AT]);
        b[SB_CRC_AT..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and validates against a data area of `data_len` bytes.
    pub fn decode(b: &[u8], data_len: u64) -> Result<Superblock> {
        if b.len() < 64 || &b[0..8] != MAGIC {
            return Err(EngineError::NotAStore);
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let version = u16::from_le_bytes([b[8], b[9]]);
        if version != VERSION {
            return Err(EngineError::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
        let stored = u32::from_le_bytes(b[SB_CRC_AT..64].try_into().expect("4 bytes"));
        let computed = crc32c::crc32c(&b[..SB_CRC_AT]);
        if stored != computed {
            return Err(EngineError::Checksum { stored, computed });
        }
        let corrupt = |what: &str| EngineError::Corrupt(format!("superblock: {what}"));
        let engine = EngineKind::from_code(b[10]).ok_or_else(|| corrupt("unknown engine"))?;
        let allocator = AllocKind::from_code(b[11]).ok_or_else(|| corrupt("unknown allocator"))?;
        let sessions = u32::from_le_bytes(b[12..16].try_into().expect("4 bytes"));
        let sb = Superblock {
            engine,
            allocator,
            sessions: u16::try_from(sessions).map_err(|_| corrupt("session count"))?,
            engine_area: u64_at(16),
            heap_off: u64_at(24),
            heap_len: u64_at(32),
            nonce: u64_at(40),
        };
        let page = PAGE as u64;
        if sb.sessions == 0
            || sb.engine_area < SUPERBLOCK_BYTES as u64
            || !sb.engine_area.is_multiple_of(page)
            || sb.heap_off < sb.engine_area
            || !sb.heap_off.is_multiple_of(page)
            || sb
                .heap_off
                .checked_add(sb.heap_len)
                .is_none_or(|e| e > data_len)
        {
            return Err(corrupt("areas out of bounds"));
        }
        Ok(sb)
    }
}

/// What an engine module is handed to create or open itself.
pub struct EngineCtx {
    /// The whole pool, header included, so that region offsets *are* pool
    /// offsets (the allocator's offsets index it directly).
    pub pool: Region,
    /// The engine's fixed area (after the superblock), as pool offsets
    /// `[area_off, area_off + area_len)`.
    pub area_off: u64,
    pub area_len: u64,
    pub sb: Superblock,
    pub alloc: Arc<dyn PAllocator>,
}

/// An engine open on a pool. See the crate documentation.
pub struct Store {
    engine: Box<dyn Engine>,
    sb: Superblock,
    recovery: EngineRecovery,
    /// The pool file, when the store opened it itself.
    pool: Option<Pool>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("superblock", &self.sb)
            .finish()
    }
}

/// Bytes a store's superblock and fixed area take: what a caller of
/// [`Store::create_with`] must set aside at the superblock offset.
pub fn area_bytes(opts: &StoreOptions) -> u64 {
    round_page(SUPERBLOCK_BYTES as u64 + fixed_area_bytes(opts) as u64)
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
    ) -> Result<Store> {
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
        Ok(Store {
            engine,
            sb,
            recovery: EngineRecovery {
                elapsed: start.elapsed(),
                detail: "created".into(),
                ..EngineRecovery::default()
            },
            pool: None,
        })
    }

    /// Opens the store on `pool`, running the allocator's and the engine's
    /// recovery. The engine and allocator come from the superblock; of
    /// `opts` only the runtime knobs (and a planted fault) are used.
    pub fn open(pool: &Pool, opts: &StoreOptions) -> Result<Store> {
        let start = Instant::now();
        let data = pool.data();
        let mut raw = [0u8; 64];
        data.read(0, &mut raw);
        let sb = Superblock::decode(&raw, data.len() as u64)?;
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
            AllocKind::Ferrite => Arc::new(Heap::open(heap_region)?),
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
    ) -> Result<Store> {
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
        Ok(Store {
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
        Self::format(whole, sb_off, sb, alloc, opts, start)
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
        if sb.heap_len != 0 || sb.allocator != opts.allocator {
            return Err(EngineError::Corrupt(format!(
                "superblock: the store was made on the {} allocator, not on {}",
                sb.allocator, opts.allocator
            )));
        }
        Self::recover(whole, sb_off, sb, alloc, opts, start)
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

    /// Creates a pool file of `size` bytes at `path` (domain from
    /// `FERRITE_DOMAIN` or detection) and a store on it.
    pub fn create_file(path: impl AsRef<Path>, size: u64, opts: &StoreOptions) -> Result<Store> {
        let pool = Pool::create(path, &PoolOptions::new(LAYOUT, size))?;
        let mut s = Store::create(&pool, opts)?;
        s.pool = Some(pool);
        Ok(s)
    }

    /// Opens the store in the pool file at `path`, recovering it.
    pub fn open_file(path: impl AsRef<Path>, opts: &StoreOptions) -> Result<Store> {
        let pool = Pool::open(path, &PoolOptions::new(LAYOUT, 0))?;
        let mut s = Store::open(&pool, opts)?;
        s.pool = Some(pool);
        Ok(s)
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

    /// A session for the calling thread.
    pub fn session(&self) -> Result<Box<dyn Session + '_>> {
        self.engine.session()
    }

    pub fn kind(&self) -> EngineKind {
        self.sb.engine
    }

    pub fn allocator_kind(&self) -> AllocKind {
        self.sb.allocator
    }

    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    pub fn allocator(&self) -> &dyn PAllocator {
        self.engine.allocator()
    }

    /// What open (or create) did, and how long it took.
    pub fn recovery(&self) -> &EngineRecovery {
        &self.recovery
    }

    pub fn stats(&self) -> EngineStats {
        self.engine.stats()
    }

    /// Finishes background work.
    pub fn quiesce(&self) -> Result<()> {
        self.engine.quiesce()
    }

    /// Walks the whole store (quiesce first; no session writing).
    pub fn walk(&self) -> Result<Walk> {
        self.engine.walk()
    }

    /// The pool file this store opened, if it opened one.
    pub fn pool(&self) -> Option<&Pool> {
        self.pool.as_ref()
    }

    /// Finishes background work and closes the pool file (if the store
    /// opened it).
    pub fn close(self) -> Result<()> {
        self.engine.quiesce()?;
        let Store { engine, pool, .. } = self;
        drop(engine);
        if let Some(p) = pool {
            p.close()?;
        }
        Ok(())
    }
}
