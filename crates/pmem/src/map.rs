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
use std::sync::atomic::{AtomicU64, Ordering};

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
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    kind: MapKind,
    /// What keeps an external mapping mapped (dropped after the `Mapping`
    /// stops using the range; `None` for mappings of our own).
    _keep_alive: Option<KeepAlive>,
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
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
            kind: MapKind::External,
            _keep_alive: Some(keep_alive),
        })
    }

    /// Maps `len` bytes of `file` shared. Tries `MAP_SYNC` first when
    /// `try_sync`; falls back to a plain shared mapping where the file system
    /// refuses it (`EOPNOTSUPP`/`EINVAL`), as `pmem_map_file` does.
    pub fn map_file(file: &File, len: usize, try_sync: bool) -> io::Result<Mapping> {
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
                return Ok(Mapping {
                    ptr: nonnull(p),
                    len,
                    kind: MapKind::FileSync,
                    _keep_alive: None,
                });
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
        Ok(Mapping {
            ptr: nonnull(p),
            len,
            kind: MapKind::FileShared,
            _keep_alive: None,
        })
    }

    /// Zero-filled anonymous memory of `len` bytes, page aligned.
    pub fn anonymous(len: usize) -> io::Result<Mapping> {
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
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
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
        Ok(Mapping {
            ptr: nonnull(p),
            len,
            kind: MapKind::Anonymous,
            _keep_alive: None,
        })
    }

    /// Anonymous memory holding a copy of `image`.
    pub fn from_image(image: &[u8]) -> io::Result<Mapping> {
        let m = Mapping::anonymous(image.len())?;
        m.write(0, image);
        Ok(m)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

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

    /// `Ok` when `off..off+len` lies inside the mapping.
    pub fn check(&self, off: usize, len: usize) -> Result<(), OutOfBounds> {
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
    fn at(&self, off: usize, len: usize) -> *mut u8 {
        if let Err(e) = self.check(off, len) {
            panic!("{e}");
        }
        // SAFETY: `off + len <= self.len`, so the pointer stays in the mapping.
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
        let end = end.min(self.len.div_ceil(PAGE) * PAGE);
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
        // SAFETY: `ptr`/`len` came from a successful mmap and are unmapped once.
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
pub fn line_span(addr: usize, len: usize) -> (usize, usize) {
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
    pub off: usize,
    pub len: usize,
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
