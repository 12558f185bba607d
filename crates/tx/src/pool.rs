//! Transactional pools: creation, opening (with recovery) and thread slots.

use crate::error::{Result, TxError};
use crate::fault::Fault;
use crate::format::{self, Layout, MAX_SLOTS, MIN_AREA, Superblock};
use crate::options::{Strategy, TxOptions};
use crate::recovery::{self, TxRecovery};
use crate::tx::{Registry, Slots, TxPool};
use ferrite_alloc::{Heap, HeapOptions};
use ferrite_pmem::{CACHE_LINE, HEADER_SIZE, PAGE, POff, Pool, Region};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Where the heap's metadata and pages lie (pool offsets `(meta_lo,
/// data_lo, data_hi)`), read from the heap superblock before the heap is
/// opened ([`ferrite_alloc::heap::read_bounds`]).
pub(crate) fn heap_bounds(region: &Region, sb: &Superblock) -> Result<(u64, u64, u64)> {
    let heap = region
        .sub(sb.heap_off as usize, sb.heap_len as usize)
        .map_err(|_| TxError::Corrupt("heap geometry out of bounds".into()))?;
    ferrite_alloc::heap::read_bounds(&heap)
        .map_err(|e| TxError::Corrupt(format!("heap geometry: {e}")))
}

impl TxPool {
    /// Formats `pool`'s data area as an empty transactional pool and opens
    /// it. Anything in the data area is lost. A crash while formatting
    /// leaves a pool without a root, which [`TxPool::open`] refuses.
    pub fn create(pool: &Pool, opts: &TxOptions, registry: Registry) -> Result<TxPool> {
        if opts.slots == 0 || opts.slots > MAX_SLOTS {
            return Err(TxError::BadOption(format!(
                "slots must be 1..={MAX_SLOTS}, not {}",
                opts.slots
            )));
        }
        if opts.area_bytes < MIN_AREA || !(opts.area_bytes as usize).is_multiple_of(CACHE_LINE) {
            return Err(TxError::BadOption(format!(
                "area_bytes must be a multiple of 64 and at least {MIN_AREA}, not {}",
                opts.area_bytes
            )));
        }
        let whole = Region::whole(pool.medium().clone());
        let len = whole.len() as u64;
        let at = HEADER_SIZE as u64;
        let slots_off = at + format::SLOTS_REL;
        let slot_bytes = CACHE_LINE as u64 + 2 * u64::from(opts.area_bytes);
        let heap_off =
            (slots_off + u64::from(opts.slots) * slot_bytes).next_multiple_of(PAGE as u64);
        if heap_off >= len {
            return Err(TxError::BadOption(format!(
                "{} log slots of {} bytes do not fit in a pool of {len} bytes",
                opts.slots, slot_bytes
            )));
        }
        let nonce = opts.nonce.unwrap_or_else(|| {
            let u = ferrite_pmem::header::new_uuid();
            u64::from_le_bytes(u[..8].try_into().expect("8 bytes"))
        });
        let sb = Superblock {
            strategy: opts.strategy.code(),
            slots: opts.slots,
            area_bytes: opts.area_bytes,
            slots_off,
            heap_off,
            heap_len: len - heap_off,
            nonce,
        };
        // Unpublish first: a crash below must not leave an old root
        // pointing at a half-formatted pool.
        pool.set_root::<u8>(POff::NULL)?;
        whole.fill_nodrain(at as usize, (heap_off - at) as usize, 0);
        whole.fence();
        let heap_region = whole.sub(heap_off as usize, (len - heap_off) as usize)?;
        let lanes = opts.slots.max(2);
        drop(Heap::create(
            heap_region,
            HeapOptions::default().lanes(lanes).lane_bytes(1024),
        )?);
        whole.write(at as usize, &sb.encode());
        whole.persist(at as usize, CACHE_LINE);
        pool.set_root::<u8>(POff::new(at))?;
        TxPool::open(pool, registry, Some(opts.strategy))
    }

    /// Opens (recovers) the transactional pool in `pool`, running
    /// transactions with `strategy` (the pool's default when `None`).
    /// Recovery rolls back interrupted undo transactions, replays
    /// committed redo records, restores the clobbered inputs of
    /// interrupted clobber transactions and re-executes them with the
    /// functions in `registry` — whatever strategy wrote the logs.
    pub fn open(pool: &Pool, registry: Registry, strategy: Option<Strategy>) -> Result<TxPool> {
        TxPool::open_any(pool, registry, strategy, Fault::None, u64::MAX)
    }

    /// [`TxPool::open`] with an access limit ([`TxPool::set_access_limit`])
    /// that also bounds recovery's re-executions.
    pub fn open_limited(
        pool: &Pool,
        registry: Registry,
        strategy: Option<Strategy>,
        limit: u64,
    ) -> Result<TxPool> {
        TxPool::open_any(pool, registry, strategy, Fault::None, limit)
    }

    /// [`TxPool::open`] with a planted bug that stays active for the
    /// pool's lifetime (crash checks only).
    #[cfg(any(test, feature = "checks"))]
    pub fn open_with_fault(
        pool: &Pool,
        registry: Registry,
        strategy: Option<Strategy>,
        fault: Fault,
    ) -> Result<TxPool> {
        TxPool::open_any(pool, registry, strategy, fault, u64::MAX)
    }

    /// [`TxPool::open_with_fault`] with an access limit
    /// ([`TxPool::open_limited`]) (crash checks only).
    #[cfg(any(test, feature = "checks"))]
    pub fn open_inner(
        pool: &Pool,
        registry: Registry,
        strategy: Option<Strategy>,
        fault: Fault,
        limit: u64,
    ) -> Result<TxPool> {
        TxPool::open_any(pool, registry, strategy, fault, limit)
    }

    fn open_any(
        pool: &Pool,
        registry: Registry,
        strategy: Option<Strategy>,
        fault: Fault,
        limit: u64,
    ) -> Result<TxPool> {
        let t0 = std::time::Instant::now();
        let whole = Region::whole(pool.medium().clone());
        let at = pool.root::<u8>().raw();
        if at == 0 {
            return Err(TxError::NotATxPool("the pool has no root".into()));
        }
        if at
            .checked_add(format::SLOTS_REL)
            .is_none_or(|e| e > whole.len() as u64)
        {
            return Err(TxError::NotATxPool("root outside the pool".into()));
        }
        let sb = Superblock::decode(
            &whole.read_vec(at as usize, CACHE_LINE),
            at,
            whole.len() as u64,
        )?;
        let default = Strategy::from_code(sb.strategy)
            .ok_or_else(|| TxError::Corrupt("unknown strategy".into()))?;
        let (meta_lo, data_lo, data_hi) = heap_bounds(&whole, &sb)?;
        let layout = Layout {
            sb,
            root_word: at + CACHE_LINE as u64,
            data_lo,
            data_hi,
            meta_lo,
        };
        // Undo, redo and the restoring half of clobber recovery work on
        // the raw image, before the heap reads its bitmaps.
        recovery::roll_group_forward(&whole, &layout)?;
        let mut found = recovery::scan(&whole, &layout)?;
        if fault == Fault::FirstSlotOnly {
            found.keep_first_slot_only();
        }
        let heap_region = whole.sub(sb.heap_off as usize, sb.heap_len as usize)?;
        if fault != Fault::RedoBeforeHeap && found.redo_has_ops()? {
            // Lane records first, on the crash image (recovery, step 6).
            drop(Heap::open(heap_region.clone())?);
        }
        let mut report = recovery::restore(&whole, &layout, &found)?;
        let heap = Heap::open(heap_region)?;
        let next_epoch = (0..sb.slots).map(|i| Some(found.next_epoch(i))).collect();
        let mut txp = TxPool {
            region: whole,
            layout,
            heap,
            strategy: strategy.unwrap_or(default),
            registry,
            slots: Mutex::new(Slots { next_epoch }),
            pending: AtomicU64::new(0),
            ticket: AtomicU64::new(found.max_ticket + 1),
            poisoned: AtomicBool::new(false),
            recovery: TxRecovery::default(),
            fault,
            seed: format::crc_seed(sb.nonce),
            access_limit: AtomicU64::new(limit.max(1)),
        };
        if fault != Fault::NoReexecute {
            recovery::reexecute(&txp, &found, &mut report)?;
        }
        recovery::complete(&txp, &found)?;
        report.elapsed = t0.elapsed();
        report.heap = txp.heap.recovery().clone();
        txp.recovery = report;
        Ok(txp)
    }

    /// Most reads and writes one transaction may make from now on; a
    /// function that exceeds it fails with [`TxError::Runaway`] (a loop
    /// over corrupt data, or one that never ends). Unlimited by default;
    /// [`TxPool::open_limited`] also bounds recovery's re-executions.
    pub fn set_access_limit(&self, n: u64) {
        self.access_limit.store(n.max(1), Ordering::Relaxed);
    }

    /// The strategy transactions of this open pool use.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The application's root pool offset (0 = none). Set it in a
    /// transaction with [`crate::Tx::set_root`].
    pub fn root(&self) -> u64 {
        self.region.load_u64(self.layout.root_word as usize)
    }

    /// The allocator transactions allocate from.
    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    /// What recovery did when the pool was opened.
    pub fn recovery(&self) -> &TxRecovery {
        &self.recovery
    }

    /// The functions this open may run and that recovery re-executed.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Log slots: threads that can hold a [`TxThread`](crate::TxThread) at once.
    pub fn slots(&self) -> usize {
        usize::from(self.layout.sb.slots)
    }

    /// Bytes of each log area (the largest transaction log).
    pub fn area_bytes(&self) -> usize {
        self.layout.sb.area_bytes as usize
    }

    /// Reads persistent data outside any transaction, for lookups under the
    /// caller's read locks (strict 2PL makes committed data stable while
    /// they are held). Writers must use transactions.
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<()> {
        if !self.layout.may_touch(off, dst.len() as u64) {
            return Err(TxError::OutOfBounds {
                what: "read",
                off,
                len: dst.len() as u64,
            });
        }
        self.region.read(off as usize, dst);
        Ok(())
    }

    /// [`read`](Self::read) of one aligned little-endian word.
    pub fn read_u64(&self, off: u64) -> Result<u64> {
        if !self.layout.may_touch(off, 8) || !off.is_multiple_of(8) {
            return Err(TxError::OutOfBounds {
                what: "read",
                off,
                len: 8,
            });
        }
        Ok(self.region.load_u64(off as usize))
    }

    /// Bounds of the bytes transactions may touch (heap data pages).
    pub fn data_bounds(&self) -> (u64, u64) {
        (self.layout.data_lo, self.layout.data_hi)
    }
}

/// Sanity: the record header is what the format documents.
const _: () = assert!(format::REC_HDR == 32);
