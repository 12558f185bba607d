//! Memory mappings and bounds-checked access to their bytes.
//!
//! With [`crate::arch`], this is the only module of Ferrite that dereferences
//! raw pointers into persistent memory. Everything above it reads and writes
//! through the safe, bounds-checked methods of [`Mapping`] (usually via a
//! [`Region`](crate::Region)).
//!
//! Concurrency contract: like any shared memory, two threads must not access
//! the same bytes at the same time unless both use the atomic word methods
//! (`load_u64`, `store_u64`, `cas_u64`, `fetch_add_u64`). Components guard
//! non-atomic byte ranges with their own locks or ownership (a log lane, a
//! page slot); the crash simulator runs a workload on a single thread.
//! Out-of-range offsets are programming errors and panic, like slice
//! indexing; offsets read from the medium must be validated with
//! [`Mapping::check`] first, so corrupt input yields an error, not a panic.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Page size used for `msync` granularity and mapping alignment.
pub const PAGE: usize = 4096;

/// Transparent huge page size requested for large anonymous mappings.
pub const HUGE_PAGE: usize = 2 << 20;

/// How a mapping was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapKind {
    /// `MAP_SHARED_VALIDATE | MAP_SYNC` on a DAX file: stores reach persistent
    /// memory once flushed (what `pmem_is_pmem` calls pmem).
    FileSync,
    /// Ordinary shared file mapping: durable only through `msync`.
    FileShared,
    /// Anonymous private memory: in-memory pools and simulated media.
    Anonymous,
    /// Memory that someone else mapped ([`Mapping::external`], e.g. a PMDK
    /// pool): never unmapped by the `Mapping`.
    External,
}

/// What [`Mapping::external`] holds to keep someone else's mapping mapped
/// (unwind-safe, so that a `Mapping` stays usable across `catch_unwind`).
pub type KeepAlive =
    Box<dyn std::any::Any + Send + Sync + std::panic::UnwindSafe + std::panic::RefUnwindSafe>;

/// A mapped byte range. Unmapped on drop, unless [`MapKind::External`].
///
/// # Growth
///
/// A *growable* mapping (a growable pool's: `Mapping::map_file_growable`,
/// `Mapping::anonymous_growable`) reserves `len` bytes of address space
/// up front and makes only its first [`mapped`](Self::mapped) bytes
/// accessible; [`grow_to`](Self::grow_to) extends the accessible prefix in
/// place (for a file: allocate the file's blocks, make its new length
/// durable, then map the new part at its fixed address). Addresses never
/// move, so offsets and pointers handed out before a growth stay valid and
/// readers need no lock: every access checks its range against the
/// accessible length (one atomic load), so an offset past it is an
/// [`OutOfBounds`] error, never a fault.
pub struct Mapping {
    ptr: NonNull<u8>,
    /// Bytes reserved (the most the mapping can ever make accessible).
    len: usize,
    /// Bytes accessible now (`== len` unless growable); only grows.
    mapped: AtomicUsize,
    /// How to grow (`None`: the mapping has a fixed size).
    grow: Option<Mutex<Growth>>,
    kind: MapKind,
    /// What keeps an external mapping mapped (dropped after the `Mapping`
    /// stops using the range; `None` for mappings of our own).
    _keep_alive: Option<KeepAlive>,
}

/// What a growable mapping needs to grow.
struct Growth {
    /// The mapped file (a duplicate descriptor), `None` for anonymous memory
    /// (reserved readable and writable from the start: growth only moves
    /// the accessible length).
    file: Option<File>,
    /// `mmap` flags the file was mapped with (`MAP_SYNC` kept on growth).
    flags: libc::c_int,
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("mapped", &self.mapped())
            .field("kind", &self.kind)
            .finish()
    }
}

// SAFETY: a Mapping is a plain address range with no thread affinity; access
// to its bytes goes through methods whose concurrency contract is stated in
// the module documentation (atomics for shared words, caller locks for bytes).
unsafe impl Send for Mapping {}
// SAFETY: see `Send`; `&Mapping` only exposes copies in and out and atomics.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// A `Mapping` over `len` bytes at `ptr` that another library mapped
    /// (a PMDK pool, whose `PMEMoid` offsets then equal this mapping's
    /// offsets). It is not unmapped on drop; `keep_alive` (e.g. an `Arc` of
    /// the pool handle) is held until the `Mapping` is dropped, so the
    /// owner's handle cannot close the range while the `Mapping` uses it.
    /// [`kind`](Self::kind) is [`MapKind::External`] and
    /// [`is_pmem`](Self::is_pmem) false: the caller picks the persistence
    /// domain of the medium it builds on it.
    ///
    /// Fails for a null `ptr` or `len == 0`.
    ///
    /// # Safety
    ///
    /// For as long as the returned `Mapping` lives:
    /// - `ptr..ptr + len` stays mapped, readable and writable (holding
    ///   `keep_alive` must guarantee that: the range is unmapped only after
    ///   `keep_alive` is dropped);
    /// - no Rust reference (`&`/`&mut [u8]`) to any byte of the range
    ///   exists; other code may access it only as this module's
    ///   concurrency contract allows for shared memory (C code such as
    ///   PMDK's writing its own metadata, disjoint from the bytes accessed
    ///   through this `Mapping` at the same time, is fine). Several
    ///   `Mapping`s of the same range are allowed: they access it only
    ///   through raw pointers, under the same contract as threads sharing
    ///   one `Mapping`.
    pub unsafe fn external(ptr: *mut u8, len: usize, keep_alive: KeepAlive) -> io::Result<Mapping> {
        let ptr = NonNull::new(ptr)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "null mapping"))?;
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot wrap an empty mapping",
            ));
        }
        Ok(Mapping {
            ptr,
            len,
            mapped: AtomicUsize::new(len),
            grow: None,
            kind: MapKind::External,
            _keep_alive: Some(keep_alive),
        })
    }

    /// Maps `len` bytes of `file` shared. Tries `MAP_SYNC` first when
    /// `try_sync`; falls back to a plain shared mapping where the file system
    /// refuses it (`EOPNOTSUPP`/`EINVAL`), as `pmem_map_file` does.
    pub(crate) fn map_file(file: &File, len: usize, try_sync: bool) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot map 0 bytes",
            ));
        }
        let fd = file.as_raw_fd();
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        if try_sync {
            // SAFETY: mmap with a null hint has no memory-safety preconditions;
            // the result is checked before use.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    prot,
                    libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
                    fd,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                return Ok(Mapping::owned(p, len, len, None, MapKind::FileSync));
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => {}
                _ => return Err(err),
            }
        }
        // SAFETY: as above.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping::owned(p, len, len, None, MapKind::FileShared))
    }

    fn owned(
        p: *mut libc::c_void,
        len: usize,
        mapped: usize,
        grow: Option<Growth>,
        kind: MapKind,
    ) -> Mapping {
        Mapping {
            ptr: nonnull(p),
            len,
            mapped: AtomicUsize::new(mapped),
            grow: grow.map(Mutex::new),
            kind,
            _keep_alive: None,
        }
    }

    /// Maps the first `len` bytes of `file` shared inside a reservation of
    /// `reserve >= len` bytes of address space, so that
    /// [`grow_to`](Self::grow_to) can later extend the file and the mapping
    /// up to `reserve` without moving it. `MAP_SYNC` is tried first when
    /// `try_sync`, as in [`map_file`](Self::map_file). Both lengths must be
    /// multiples of [`PAGE`].
    pub(crate) fn map_file_growable(
        file: &File,
        len: usize,
        reserve: usize,
        try_sync: bool,
    ) -> io::Result<Mapping> {
        if len == 0 || reserve < len || !len.is_multiple_of(PAGE) || !reserve.is_multiple_of(PAGE) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot map {len} of {reserve} reserved bytes"),
            ));
        }
        let growth_file = file.try_clone()?;
        // SAFETY: an anonymous PROT_NONE reservation with a null hint has no
        // memory-safety preconditions; the result is checked before use.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserve,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut flags = [libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC, libc::MAP_SHARED].to_vec();
        if !try_sync {
            flags.remove(0);
        }
        let mut last = io::Error::from_raw_os_error(libc::EINVAL);
        for (i, &f) in flags.iter().enumerate() {
            // SAFETY: `base..base+len` lies inside the reservation just made,
            // which no Rust value refers to yet; MAP_FIXED replaces that part
            // of it with the file.
            let p = unsafe {
                libc::mmap(
                    base,
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    f | libc::MAP_FIXED,
                    file.as_raw_fd(),
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                let kind = if i == 0 && try_sync {
                    MapKind::FileSync
                } else {
                    MapKind::FileShared
                };
                let growth = Growth {
                    file: Some(growth_file),
                    flags: f,
                };
                return Ok(Mapping::owned(base, reserve, len, Some(growth), kind));
            }
            last = io::Error::last_os_error();
            if !matches!(
                last.raw_os_error(),
                Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)
            ) {
                break;
            }
        }
        // SAFETY: `base..base+reserve` is the reservation made above, not
        // yet owned by any Mapping.
        unsafe {
            libc::munmap(base, reserve);
        }
        Err(last)
    }

    /// Zero-filled anonymous memory of which the first `mapped` bytes are
    /// accessible and up to `len` can become so by [`grow_to`](Self::grow_to)
    /// (in-memory and simulated growable pools). The whole range is
    /// reserved with `MAP_NORESERVE`: untouched pages cost nothing.
    pub(crate) fn anonymous_growable(mapped: usize, len: usize) -> io::Result<Mapping> {
        if mapped == 0 || len < mapped {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot make {mapped} of {len} bytes accessible"),
            ));
        }
        let mut m = Mapping::anonymous_flags(len, libc::MAP_NORESERVE)?;
        m.mapped = AtomicUsize::new(mapped);
        m.grow = Some(Mutex::new(Growth {
            file: None,
            flags: 0,
        }));
        Ok(m)
    }

    /// True when [`grow_to`](Self::grow_to) can extend this mapping.
    pub fn growable(&self) -> bool {
        self.grow.is_some()
    }

    /// Bytes accessible now: `len()` for a fixed mapping, the grown prefix
    /// of the reservation for a growable one.
    #[inline]
    pub fn mapped(&self) -> usize {
        self.mapped.load(Ordering::Acquire)
    }

    /// Makes at least the first `want` bytes accessible (rounded up to
    /// [`PAGE`]) and returns the accessible length. For a file mapping the
    /// file's blocks are allocated (`posix_fallocate`, so running out of
    /// space is an error now rather than `SIGBUS` later) and its new length
    /// made durable (`fdatasync`) *before* the new part is mapped: a caller
    /// that then records durably that it uses the new bytes never finds,
    /// after a crash, a file too short for what it recorded. Serialised by
    /// a lock; accesses by other threads go on meanwhile. Fails with
    /// `Unsupported` on a fixed mapping and `OutOfMemory` past the
    /// reservation.
    pub fn grow_to(&self, want: usize) -> io::Result<usize> {
        let now = self.mapped();
        if want <= now {
            return Ok(now);
        }
        let Some(grow) = &self.grow else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this mapping has a fixed size",
            ));
        };
        let want = want.next_multiple_of(PAGE);
        if want > self.len {
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("{want} bytes exceed the {}-byte maximum", self.len),
            ));
        }
        let g = grow.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.mapped();
        if want <= now {
            return Ok(now);
        }
        if let Some(file) = &g.file {
            let fd = file.as_raw_fd();
            // SAFETY: posix_fallocate on an owned descriptor.
            let rc = unsafe {
                libc::posix_fallocate(fd, now as libc::off_t, (want - now) as libc::off_t)
            };
            match rc {
                0 => {}
                libc::EOPNOTSUPP | libc::EINVAL => file.set_len(want as u64)?,
                e => return Err(io::Error::from_raw_os_error(e)),
            }
            file.sync_data()?;
            // SAFETY: `ptr+now..ptr+want` lies inside this mapping's own
            // reservation (want <= len) and is not accessible yet (no access
            // passes the bounds check past `now`), so replacing it with the
            // file's pages at their offsets disturbs nothing.
            let p = unsafe {
                libc::mmap(
                    self.ptr.as_ptr().add(now) as *mut libc::c_void,
                    want - now,
                    libc::PROT_READ | libc::PROT_WRITE,
                    g.flags | libc::MAP_FIXED,
                    fd,
                    now as libc::off_t,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
        }
        self.mapped.store(want, Ordering::Release);
        Ok(want)
    }

    /// Zero-filled anonymous memory of `len` bytes, page aligned.
    pub fn anonymous(len: usize) -> io::Result<Mapping> {
        Mapping::anonymous_flags(len, 0)
    }

    fn anonymous_flags(len: usize, extra: libc::c_int) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot map 0 bytes",
            ));
        }
        // SAFETY: anonymous mmap with a null hint; result checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        if len >= HUGE_PAGE {
            // Real DAX persistent memory is mapped with 2 MiB pages; ask for
            // the same so benchmarks over large in-memory pools measure the
            // medium, not 4 KiB page walks. Advisory: failure is harmless.
            // SAFETY: `p..p+len` is the mapping just created.
            unsafe {
                libc::madvise(p, len, libc::MADV_HUGEPAGE);
            }
        }
        Ok(Mapping::owned(p, len, len, None, MapKind::Anonymous))
    }

    /// Anonymous memory holding a copy of `image`.
    pub fn from_image(image: &[u8]) -> io::Result<Mapping> {
        let m = Mapping::anonymous(image.len())?;
        m.write(0, image);
        Ok(m)
    }

    /// Bytes reserved: the mapping's full extent, of which the first
    /// [`mapped`](Self::mapped) are accessible.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the mapping reserves no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How the bytes are backed, which decides the domains they support.
    pub fn kind(&self) -> MapKind {
        self.kind
    }

    /// True when the mapping is real persistent memory (`MAP_SYNC` accepted).
    pub fn is_pmem(&self) -> bool {
        self.kind == MapKind::FileSync
    }

    /// Address of byte `off` (for identity and alignment only).
    pub fn addr(&self, off: usize) -> usize {
        self.ptr.as_ptr() as usize + off
    }

    /// `Ok` when `off..off+len` lies inside the accessible part of the
    /// mapping.
    #[inline]
    pub fn check(&self, off: usize, len: usize) -> Result<(), OutOfBounds> {
        let size = self.mapped();
        match off.checked_add(len) {
            Some(end) if end <= size => Ok(()),
            _ => Err(OutOfBounds { off, len, size }),
        }
    }

    #[inline]
    #[track_caller]
    fn at(&self, off: usize, len: usize) -> *mut u8 {
        if let Err(e) = self.check(off, len) {
            panic!("{e}");
        }
        // SAFETY: `off + len <= mapped <= len`, so the pointer stays in the
        // accessible part of the mapping.
        unsafe { self.ptr.as_ptr().add(off) }
    }

    /// Copies bytes out of the mapping.
    #[inline]
    #[track_caller]
    pub fn read(&self, off: usize, dst: &mut [u8]) {
        let p = self.at(off, dst.len());
        // SAFETY: `p..p+len` is inside the mapping (checked by `at`); `dst` is
        // a distinct Rust buffer, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), dst.len()) }
    }

    /// Copies bytes into the mapping (ordinary cached stores).
    #[inline]
    #[track_caller]
    pub fn write(&self, off: usize, src: &[u8]) {
        let p = self.at(off, src.len());
        // SAFETY: in bounds (checked by `at`); `src` is a Rust buffer and
        // cannot alias the mapping's interior mutably.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) }
    }

    /// Sets `len` bytes to `byte` (ordinary stores).
    #[track_caller]
    pub fn fill(&self, off: usize, len: usize, byte: u8) {
        let p = self.at(off, len);
        // SAFETY: in bounds (checked by `at`).
        unsafe { std::ptr::write_bytes(p, byte, len) }
    }

    /// Copies within the mapping (`memmove` semantics).
    #[track_caller]
    pub fn copy_within(&self, src: usize, dst: usize, len: usize) {
        let s = self.at(src, len);
        let d = self.at(dst, len);
        // SAFETY: both ranges are in bounds; `copy` permits overlap.
        unsafe { std::ptr::copy(s, d, len) }
    }

    #[inline]
    #[track_caller]
    fn word(&self, off: usize) -> &AtomicU64 {
        assert!(
            off.is_multiple_of(8),
            "atomic word at unaligned offset {off}"
        );
        let p = self.at(off, 8);
        // SAFETY: `p` is in bounds, 8-byte aligned (mapping is page aligned
        // and `off` is a multiple of 8), and lives as long as `self`.
        unsafe { &*(p as *const AtomicU64) }
    }

    /// Atomic 8-byte load at an 8-aligned offset.
    #[inline]
    #[track_caller]
    pub fn load_u64(&self, off: usize, order: Ordering) -> u64 {
        self.word(off).load(order)
    }

    /// Atomic 8-byte store at an 8-aligned offset (8-byte failure atomic on x86).
    #[inline]
    #[track_caller]
    pub fn store_u64(&self, off: usize, v: u64, order: Ordering) {
        self.word(off).store(v, order)
    }

    /// Atomic compare-and-swap; returns the previous value on failure.
    #[inline]
    #[track_caller]
    pub fn cas_u64(&self, off: usize, current: u64, new: u64) -> Result<u64, u64> {
        self.word(off)
            .compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
    }

    /// Atomic fetch-and-add at an 8-aligned offset; returns the previous
    /// value (wrapping on overflow).
    #[inline]
    #[track_caller]
    pub fn fetch_add_u64(&self, off: usize, v: u64) -> u64 {
        self.word(off).fetch_add(v, Ordering::AcqRel)
    }

    /// Hints the CPU to bring the cache line holding byte `off` into all
    /// cache levels (`prefetcht0`). Not a persistence operation: it neither
    /// reads into Rust-visible memory nor stores, so the persister and the
    /// crash simulator need not see it. Used to overlap the memory latency
    /// of several interleaved operations [P0 §3.5]. A no-op off x86_64.
    #[inline]
    #[track_caller]
    pub fn prefetch(&self, off: usize) {
        let p = self.at(off, 1);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `_mm_prefetch` only needs SSE, which every x86_64 CPU has;
        // a prefetch never faults, never writes and has no effect visible
        // to Rust, and `p` is inside the mapping anyway (checked by `at`).
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = p;
    }

    /// Non-temporal copy; returns the sub-range written non-temporally.
    #[track_caller]
    pub(crate) fn nt_copy(&self, off: usize, src: &[u8]) -> (usize, usize) {
        let p = self.at(off, src.len());
        // SAFETY: destination in bounds (checked by `at`), source is a Rust
        // slice disjoint from the mapping.
        unsafe { crate::arch::nt_copy(p, src.as_ptr(), src.len()) }
    }

    /// Non-temporal fill; returns the sub-range written non-temporally.
    #[track_caller]
    pub(crate) fn nt_fill(&self, off: usize, len: usize, byte: u8) -> (usize, usize) {
        let p = self.at(off, len);
        // SAFETY: destination in bounds (checked by `at`).
        unsafe { crate::arch::nt_fill(p, byte, len) }
    }

    /// Issues a flush instruction for every cache line overlapping the range;
    /// returns (address of first line, number of lines).
    #[inline]
    #[track_caller]
    pub(crate) fn flush_lines(
        &self,
        kind: crate::FlushKind,
        off: usize,
        len: usize,
    ) -> (usize, usize) {
        let (first, n) = line_span(self.addr(off), len);
        if n == 0 {
            return (first, 0);
        }
        self.at(off, len);
        for i in 0..n {
            // SAFETY: each line overlaps `off..off+len`, which is in bounds;
            // the caller (the persister) only passes supported kinds.
            unsafe {
                crate::arch::flush_line(kind, (first + i * crate::arch::CACHE_LINE) as *const u8)
            }
        }
        (first, n)
    }

    /// `msync(MS_SYNC)` over the pages overlapping the range; returns bytes synced.
    pub(crate) fn msync(&self, off: usize, len: usize) -> io::Result<usize> {
        if len == 0 {
            return Ok(0);
        }
        self.at(off, len);
        let start = off / PAGE * PAGE;
        let end = (off + len).div_ceil(PAGE) * PAGE;
        let end = end.min(self.mapped().div_ceil(PAGE) * PAGE);
        // SAFETY: the page-rounded range lies within the mapping (mappings
        // are page-granular), and msync does not touch Rust-visible memory.
        let rc = unsafe {
            libc::msync(
                self.ptr.as_ptr().add(start) as *mut libc::c_void,
                end - start,
                libc::MS_SYNC,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(end - start)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.kind == MapKind::External {
            // Someone else's mapping: dropping `keep_alive` (after this
            // function, with the other fields) lets its owner unmap it.
            return;
        }
        // SAFETY: `ptr`/`len` came from a successful mmap (the whole
        // reservation, for a growable mapping, whose file parts were mapped
        // inside it) and are unmapped once.
        unsafe {
            libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len);
        }
    }
}

fn nonnull(p: *mut libc::c_void) -> NonNull<u8> {
    NonNull::new(p as *mut u8).expect("mmap returned null without MAP_FIXED")
}

/// First line address and number of cache lines overlapping `addr..addr+len`.
#[inline]
pub(crate) fn line_span(addr: usize, len: usize) -> (usize, usize) {
    if len == 0 {
        return (addr & !(crate::arch::CACHE_LINE - 1), 0);
    }
    let first = addr & !(crate::arch::CACHE_LINE - 1);
    let last = (addr + len - 1) & !(crate::arch::CACHE_LINE - 1);
    (first, (last - first) / crate::arch::CACHE_LINE + 1)
}

/// An access outside a mapping or region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("access {off}..{} outside {size}-byte range", off.saturating_add(*len))]
pub struct OutOfBounds {
    /// First byte of the access.
    pub off: usize,
    /// Bytes of the access.
    pub len: usize,
    /// Bytes of the mapping or region it fell outside of.
    pub size: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_write_fill_atomics() {
        let m = Mapping::anonymous(8192).unwrap();
        m.write(10, b"hello");
        let mut b = [0u8; 5];
        m.read(10, &mut b);
        assert_eq!(&b, b"hello");
        m.fill(100, 50, 7);
        let mut v = vec![0u8; 52];
        m.read(99, &mut v);
        assert_eq!(v[0], 0);
        assert!(v[1..51].iter().all(|&x| x == 7));
        m.store_u64(4096, 42, Ordering::Release);
        assert_eq!(m.cas_u64(4096, 42, 43), Ok(42));
        assert_eq!(m.cas_u64(4096, 42, 44), Err(43));
        assert_eq!(m.fetch_add_u64(4096, 1), 43);
        assert_eq!(m.load_u64(4096, Ordering::Acquire), 44);
        assert!(m.check(8190, 2).is_ok());
        assert!(m.check(8190, 3).is_err());
        assert!(m.check(usize::MAX, 2).is_err());
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn out_of_bounds_write_panics_not_ub() {
        let m = Mapping::anonymous(4096).unwrap();
        m.write(4095, b"ab");
    }

    #[test]
    fn prefetch_is_a_bounds_checked_hint() {
        let m = Mapping::anonymous(4096).unwrap();
        m.write(0, b"x");
        m.prefetch(0);
        m.prefetch(4095);
        assert!(std::panic::catch_unwind(|| m.prefetch(4096)).is_err());
        let mut b = [0u8; 1];
        m.read(0, &mut b);
        assert_eq!(&b, b"x", "a prefetch changes nothing");
    }

    #[test]
    fn line_span_counts_lines() {
        assert_eq!(line_span(0, 64), (0, 1));
        assert_eq!(line_span(63, 2), (0, 2));
        assert_eq!(line_span(64, 0).1, 0);
        assert_eq!(line_span(128, 129), (128, 3));
    }

    #[test]
    fn file_mapping_falls_back_without_map_sync() {
        let f = tempfile::tempfile().unwrap();
        f.set_len(8192).unwrap();
        let m = Mapping::map_file(&f, 8192, true).unwrap();
        // tmpfs/ext4 without DAX refuse MAP_SYNC.
        assert_eq!(m.kind(), MapKind::FileShared);
        assert!(!m.is_pmem());
        m.write(0, b"x");
        assert_eq!(m.msync(0, 1).unwrap(), PAGE);
    }

    #[test]
    fn a_growable_file_mapping_grows_in_place_and_bounds_follow() {
        let f = tempfile::tempfile().unwrap();
        f.set_len(8192).unwrap();
        let m = Mapping::map_file_growable(&f, 8192, 64 * PAGE, true).unwrap();
        assert!(m.growable());
        assert_eq!((m.len(), m.mapped()), (64 * PAGE, 8192));
        let base = m.addr(0);
        m.write(8000, b"early");
        assert!(m.check(8192, 1).is_err(), "past the accessible part");
        assert!(std::panic::catch_unwind(|| m.write(8192, b"x")).is_err());
        assert_eq!(m.grow_to(10_000).unwrap(), 3 * PAGE, "rounded to pages");
        assert_eq!(
            f.metadata().unwrap().len(),
            3 * PAGE as u64,
            "file extended first"
        );
        m.write(8192, b"grown");
        assert_eq!(m.addr(0), base, "never moves");
        let mut b = [0u8; 5];
        m.read(8000, &mut b);
        assert_eq!(&b, b"early");
        // The new part is the file's: what is written there is in the file.
        m.msync(0, 3 * PAGE).unwrap();
        use std::os::unix::fs::FileExt;
        f.read_exact_at(&mut b, 8192).unwrap();
        assert_eq!(&b, b"grown");
        assert_eq!(m.grow_to(PAGE).unwrap(), 3 * PAGE, "never shrinks");
        let e = m.grow_to(65 * PAGE).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::OutOfMemory);
        assert_eq!(m.grow_to(64 * PAGE).unwrap(), 64 * PAGE);
        m.write(64 * PAGE - 1, b"z");
    }

    #[test]
    fn fixed_mappings_refuse_to_grow_and_anonymous_ones_grow() {
        let m = Mapping::anonymous(PAGE).unwrap();
        assert!(!m.growable());
        assert_eq!(
            m.grow_to(2 * PAGE).unwrap_err().kind(),
            io::ErrorKind::Unsupported
        );
        let a = Mapping::anonymous_growable(PAGE, 1 << 30).unwrap();
        assert_eq!((a.mapped(), a.len()), (PAGE, 1 << 30));
        assert!(a.check(PAGE, 8).is_err());
        a.grow_to(1 << 20).unwrap();
        a.store_u64((1 << 20) - 8, 7, Ordering::Release);
        assert_eq!(a.load_u64((1 << 20) - 8, Ordering::Acquire), 7);
        assert!(Mapping::anonymous_growable(2 * PAGE, PAGE).is_err());
    }

    #[test]
    fn external_mapping_is_not_unmapped_and_keeps_its_owner_alive() {
        use std::sync::Arc;
        let owner = Arc::new(Mapping::anonymous(8192).unwrap());
        owner.write(100, b"pmdk");
        let base = owner.addr(0) as *mut u8;
        // SAFETY: `owner` maps 8192 bytes at `base` and stays alive (the
        // clone in keep_alive) until `ext` is dropped; no Rust reference to
        // the bytes exists; `owner` is only used again after `ext` is gone.
        let ext = unsafe { Mapping::external(base, 8192, Box::new(owner.clone())) }.unwrap();
        assert_eq!(ext.kind(), MapKind::External);
        assert!(!ext.is_pmem());
        assert_eq!(Arc::strong_count(&owner), 2);
        let mut b = [0u8; 4];
        ext.read(100, &mut b);
        assert_eq!(&b, b"pmdk", "offsets are the owner's offsets");
        ext.write(200, b"ferrite");
        assert!(ext.check(8192, 1).is_err());
        drop(ext);
        assert_eq!(Arc::strong_count(&owner), 1, "keep_alive released");
        let mut c = [0u8; 7];
        owner.read(200, &mut c);
        assert_eq!(
            &c, b"ferrite",
            "still mapped after the external Mapping dropped"
        );
        // SAFETY: a null pointer and an empty range are refused before use.
        unsafe {
            assert!(Mapping::external(std::ptr::null_mut(), 8, Box::new(())).is_err());
            assert!(Mapping::external(base, 0, Box::new(())).is_err());
        }
    }
}

/// `FS_IOC_FIEMAP`: `_IOWR('f', 11, struct fiemap)`.
const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
/// `fiemap_extent.fe_flags`: the file's last extent.
const FIEMAP_EXTENT_LAST: u32 = 0x1;
/// Extents asked for per call.
const FIEMAP_BATCH: usize = 64;

/// `struct fiemap` with room for [`FIEMAP_BATCH`] extents (linux/fiemap.h).
#[repr(C)]
struct Fiemap {
    start: u64,
    length: u64,
    flags: u32,
    mapped_extents: u32,
    extent_count: u32,
    reserved: u32,
    extents: [FiemapExtent; FIEMAP_BATCH],
}

/// `struct fiemap_extent` (56 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct FiemapExtent {
    logical: u64,
    physical: u64,
    length: u64,
    reserved64: [u64; 2],
    flags: u32,
    reserved: [u32; 3],
}

/// The extents of `file` (file offset → device byte) from the file
/// system (`FS_IOC_FIEMAP`): how [`crate::badblocks`] maps a device's bad
/// sectors to offsets of a pool file. An error where the file system
/// does not say (tmpfs).
pub fn file_extents(file: &File) -> io::Result<Vec<crate::badblocks::Extent>> {
    let mut out = Vec::new();
    let mut start = 0u64;
    loop {
        let mut fm = Fiemap {
            start,
            length: u64::MAX - start,
            flags: 0,
            mapped_extents: 0,
            extent_count: FIEMAP_BATCH as u32,
            reserved: 0,
            extents: [FiemapExtent::default(); FIEMAP_BATCH],
        };
        // SAFETY: `fm` is a properly laid out `struct fiemap` followed by
        // room for `extent_count` extents, as FS_IOC_FIEMAP requires; the
        // kernel writes at most that many, and `fm` outlives the call.
        let r =
            unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FIEMAP as _, &mut fm as *mut Fiemap) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        let n = (fm.mapped_extents as usize).min(FIEMAP_BATCH);
        if n == 0 {
            return Ok(out);
        }
        for e in &fm.extents[..n] {
            out.push(crate::badblocks::Extent {
                logical: e.logical,
                physical: e.physical,
                len: e.length,
            });
        }
        let last = fm.extents[n - 1];
        if last.flags & FIEMAP_EXTENT_LAST != 0 {
            return Ok(out);
        }
        start = last.logical + last.length;
    }
}
