//! Regions: safe, bounds-checked windows onto a pool's medium, and typed
//! pool-relative offsets.
//!
//! A [`Region`] is what a component (a log, a page store, an allocator) is
//! given to live in. All offsets it takes are relative to the region's start;
//! all of its persistence goes through the medium's persister. Regions are
//! cheap to clone and to split.

use crate::arch::CACHE_LINE;
use crate::map::OutOfBounds;
use crate::persist::Medium;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A window `[base, base+len)` onto a medium.
#[derive(Clone, Debug)]
pub struct Region {
    medium: Arc<Medium>,
    base: usize,
    len: usize,
}

impl Region {
    /// The whole medium as a region.
    pub fn whole(medium: Arc<Medium>) -> Region {
        let len = medium.map().len();
        Region {
            medium,
            base: 0,
            len,
        }
    }

    /// A sub-window; `off..off+len` must lie inside this region (on a
    /// growable medium it may extend past what is accessible yet).
    pub fn sub(&self, off: usize, len: usize) -> Result<Region, OutOfBounds> {
        self.within(off, len)?;
        Ok(Region {
            medium: self.medium.clone(),
            base: self.base + off,
            len,
        })
    }

    /// Bytes in the region; offsets passed to it are `0..len`.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offset of this region in its medium (pool offset).
    pub fn base(&self) -> usize {
        self.base
    }

    /// The medium (whole pool) this region is a window of.
    pub fn medium(&self) -> &Arc<Medium> {
        &self.medium
    }

    /// `Ok` when `off..off+len` is inside the region: validate offsets read
    /// from the medium with this before using them.
    ///
    /// On a growable medium the region may extend past what is accessible
    /// yet; such a range is out of bounds too (until the medium grows).
    pub fn check(&self, off: usize, len: usize) -> Result<(), OutOfBounds> {
        self.within(off, len)?;
        let size = self.medium.map().mapped().saturating_sub(self.base);
        if off + len <= size {
            Ok(())
        } else {
            Err(OutOfBounds { off, len, size })
        }
    }

    /// `Ok` when `off..off+len` lies inside the region's extent (accessible
    /// yet or not).
    #[inline]
    fn within(&self, off: usize, len: usize) -> Result<(), OutOfBounds> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(OutOfBounds {
                off,
                len,
                size: self.len,
            }),
        }
    }

    #[inline]
    #[track_caller]
    fn abs(&self, off: usize, len: usize) -> usize {
        // The mapping checks the accessible length itself on every access
        // (`Mapping::at`); here only the region's own bounds.
        if let Err(e) = self.within(off, len) {
            panic!("{e}");
        }
        self.base + off
    }

    // ---- plain access -------------------------------------------------------

    /// Copies `dst.len()` bytes at `off` into `dst`. Panics (a bug, not
    /// bad data) when the range leaves the region.
    #[inline]
    #[track_caller]
    pub fn read(&self, off: usize, dst: &mut [u8]) {
        let a = self.abs(off, dst.len());
        self.medium.before_load(a, dst.len());
        self.medium.map().read(a, dst)
    }

    /// [`read`](Self::read) into a new vector of `len` bytes.
    #[inline]
    #[track_caller]
    pub fn read_vec(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.read(off, &mut v);
        v
    }

    /// Ordinary (cached) stores; not durable until flushed and fenced.
    #[inline]
    #[track_caller]
    pub fn write(&self, off: usize, src: &[u8]) {
        let a = self.abs(off, src.len());
        self.medium.before_store(a, src.len());
        self.medium.map().write(a, src)
    }

    /// Sets `len` bytes at `off` to `byte` with ordinary stores; not
    /// durable until flushed and fenced.
    #[track_caller]
    pub fn fill(&self, off: usize, len: usize, byte: u8) {
        let a = self.abs(off, len);
        self.medium.before_store(a, len);
        self.medium.map().fill(a, len, byte)
    }

    /// Atomic 8-byte load; `off` must be 8-aligned within the pool.
    #[inline]
    #[track_caller]
    pub fn load_u64(&self, off: usize) -> u64 {
        let a = self.abs(off, 8);
        self.medium.before_load(a, 8);
        self.medium.map().load_u64(a, Ordering::Acquire)
    }

    /// Atomic 8-byte store (8-byte failure atomic); not durable until persisted.
    #[inline]
    #[track_caller]
    pub fn store_u64(&self, off: usize, v: u64) {
        let a = self.abs(off, 8);
        self.medium.before_store(a, 8);
        self.medium.map().store_u64(a, v, Ordering::Release)
    }

    /// Atomic compare-and-swap of the 8-aligned word at `off`: `Ok(old)`
    /// when it held `current` and now holds `new`, else `Err(actual)`.
    /// Not durable until persisted.
    #[inline]
    #[track_caller]
    pub fn cas_u64(&self, off: usize, current: u64, new: u64) -> Result<u64, u64> {
        let a = self.abs(off, 8);
        self.medium.before_store(a, 8);
        self.medium.map().cas_u64(a, current, new)
    }

    /// Atomic add to the 8-aligned word at `off`, wrapping; returns the
    /// previous value. Not durable until persisted.
    #[inline]
    #[track_caller]
    pub fn fetch_add_u64(&self, off: usize, v: u64) -> u64 {
        let a = self.abs(off, 8);
        self.medium.before_store(a, 8);
        self.medium.map().fetch_add_u64(a, v)
    }

    /// Prefetch hint for the cache line holding byte `off` (see
    /// [`Mapping::prefetch`](crate::Mapping::prefetch)): a read-latency hint,
    /// not a persistence operation, so it needs no flush or fence.
    #[inline]
    #[track_caller]
    pub fn prefetch(&self, off: usize) {
        self.medium.map().prefetch(self.abs(off, 1))
    }

    /// Little-endian u32 read (not atomic).
    #[track_caller]
    pub fn read_u32(&self, off: usize) -> u32 {
        let mut b = [0u8; 4];
        self.read(off, &mut b);
        u32::from_le_bytes(b)
    }

    /// Little-endian u32 write (not atomic, not durable until persisted).
    #[track_caller]
    pub fn write_u32(&self, off: usize, v: u32) {
        self.write(off, &v.to_le_bytes())
    }

    // ---- persistence (through the medium's persister) ---------------------

    /// Writes back the lines overlapping `off..off+len` (durable after `fence`).
    #[inline]
    #[track_caller]
    pub fn flush(&self, off: usize, len: usize) {
        self.medium.flush(self.abs(off, len), len)
    }

    /// Persist fence of the medium's domain.
    #[inline]
    pub fn fence(&self) {
        self.medium.fence()
    }

    /// `flush` + `fence`.
    #[inline]
    #[track_caller]
    pub fn persist(&self, off: usize, len: usize) {
        self.medium.persist(self.abs(off, len), len)
    }

    /// Writes `src` and flushes it, no fence (non-temporal above the threshold).
    #[track_caller]
    pub fn write_nodrain(&self, off: usize, src: &[u8]) {
        self.medium.copy_nodrain(self.abs(off, src.len()), src)
    }

    /// Writes `src`, flushes it and fences: `pmem_memcpy_persist`.
    #[track_caller]
    pub fn write_persist(&self, off: usize, src: &[u8]) {
        self.write_nodrain(off, src);
        self.fence();
    }

    /// Non-temporal copy whatever the size; durable after `fence`.
    #[track_caller]
    pub fn write_nt(&self, off: usize, src: &[u8]) {
        self.medium.copy_nt(self.abs(off, src.len()), src)
    }

    /// Fills and flushes, no fence.
    #[track_caller]
    pub fn fill_nodrain(&self, off: usize, len: usize, byte: u8) {
        self.medium.fill_nodrain(self.abs(off, len), len, byte)
    }

    /// Fills, flushes and fences: `pmem_memset_persist`.
    #[track_caller]
    pub fn fill_persist(&self, off: usize, len: usize, byte: u8) {
        self.fill_nodrain(off, len, byte);
        self.fence();
    }

    /// Stores an 8-byte word atomically and persists it (one line, one fence).
    #[track_caller]
    pub fn store_u64_persist(&self, off: usize, v: u64) {
        self.store_u64(off, v);
        self.persist(off, 8);
    }

    /// True when `off` (relative to this region) starts a cache line of the pool.
    pub fn is_line_aligned(&self, off: usize) -> bool {
        (self.base + off).is_multiple_of(CACHE_LINE)
    }
}

/// A typed, pool-relative persistent reference (ARCHITECTURE.md, rule 2).
///
/// On media: a little-endian `u64` byte offset from the start of the pool; 0
/// is null (offset 0 is always the pool header). `T` documents what lives
/// there; it is not dereferenced automatically — components read and write
/// the bytes through a [`Region`], so a corrupt offset is a bounds error, not
/// undefined behaviour.
#[repr(transparent)]
pub struct POff<T: ?Sized> {
    raw: u64,
    _t: PhantomData<fn() -> T>,
}

impl<T: ?Sized> POff<T> {
    /// Offset 0: no object (the header occupies byte 0, so no object
    /// lives there).
    pub const NULL: POff<T> = POff {
        raw: 0,
        _t: PhantomData,
    };

    /// The offset `raw` bytes from the pool's first byte (unchecked: it is
    /// validated when used through a region).
    pub const fn new(raw: u64) -> POff<T> {
        POff {
            raw,
            _t: PhantomData,
        }
    }

    /// The offset in bytes from the pool's first byte.
    pub const fn raw(self) -> u64 {
        self.raw
    }

    /// True for [`POff::NULL`].
    pub const fn is_null(self) -> bool {
        self.raw == 0
    }

    /// Reinterprets the target type (e.g. from a type-erased root).
    pub const fn cast<U: ?Sized>(self) -> POff<U> {
        POff::new(self.raw)
    }

    /// `self + bytes`, checked.
    pub fn checked_add(self, bytes: u64) -> Option<POff<T>> {
        self.raw.checked_add(bytes).map(POff::new)
    }

    /// The 8 little-endian bytes persistent structures store.
    pub fn to_le_bytes(self) -> [u8; 8] {
        self.raw.to_le_bytes()
    }

    /// The offset stored as 8 little-endian bytes.
    pub fn from_le_bytes(b: [u8; 8]) -> POff<T> {
        POff::new(u64::from_le_bytes(b))
    }
}

impl<T: ?Sized> Clone for POff<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: ?Sized> Copy for POff<T> {}
impl<T: ?Sized> PartialEq for POff<T> {
    fn eq(&self, o: &Self) -> bool {
        self.raw == o.raw
    }
}
impl<T: ?Sized> Eq for POff<T> {}
impl<T: ?Sized> std::hash::Hash for POff<T> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.raw.hash(h)
    }
}
impl<T: ?Sized> std::fmt::Debug for POff<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "POff({:#x})", self.raw)
    }
}
