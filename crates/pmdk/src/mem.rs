//! libpmem: the pmem test, `PMEM_IS_PMEM_FORCE`, and mapped files.
//!
//! See the crate docs for when libpmem reads `PMEM_IS_PMEM_FORCE`.

use std::ffi::{c_int, c_void};
use std::path::Path;
use std::ptr::NonNull;

use crate::error::{Lib, Result, c_path, check_range, last_error};
use crate::ffi;

/// The environment variable that makes libpmem treat every mapping as pmem
/// (`1`) or none (`0`).
pub const PMEM_IS_PMEM_FORCE: &str = "PMEM_IS_PMEM_FORCE";

/// Where the benchmarks put PMDK pools.
pub const SHM_DIR: &str = "/dev/shm";

/// Whether libpmem considers `addr..addr + len` persistent memory, i.e.
/// whether PMDK code working on that range persists with cache flushes and
/// a fence rather than `msync`.
///
/// libpmem only compares the range with its table of mappings (or returns
/// a constant when forced); it never reads the memory, so any address is
/// accepted. A range libpmem did not map is never pmem unless forced.
/// The first call in a process fixes how `PMEM_IS_PMEM_FORCE` is honoured
/// (see the [crate docs](crate)).
pub fn is_pmem(addr: *const u8, len: usize) -> bool {
    // SAFETY: pmem_is_pmem does not dereference `addr`: it returns a
    // constant when PMEM_IS_PMEM_FORCE is set and otherwise looks the range
    // up in libpmem's list of registered mappings. Any value is sound.
    unsafe { ffi::pmem_is_pmem(addr.cast::<c_void>(), len) != 0 }
}

/// Whether PMDK takes the flush path (not `msync`) for pools and mappings
/// created in directory `dir`.
///
/// Maps a fresh, unnamed 4 KiB file in `dir` with `pmem_map_file` and
/// returns libpmem's verdict on it. libpmem decides per process (forced)
/// or per filesystem (detected), so the answer applies to every pool that
/// this process puts in `dir`.
pub fn flush_path_in(dir: &Path) -> Result<bool> {
    let cdir = c_path(dir)?;
    let mut mapped_len = 0usize;
    let mut is_pmem: c_int = 0;
    // SAFETY: `cdir` is a valid NUL-terminated string and the out pointers
    // point to live locals. PMEM_FILE_TMPFILE makes an O_TMPFILE file that
    // disappears when unmapped.
    let addr = unsafe {
        ffi::pmem_map_file(
            cdir.as_ptr(),
            4096,
            ffi::PMEM_FILE_CREATE | ffi::PMEM_FILE_TMPFILE,
            0o600,
            &mut mapped_len,
            &mut is_pmem,
        )
    };
    if addr.is_null() {
        return Err(last_error(Lib::Pmem, "pmem_map_file"));
    }
    // SAFETY: `addr`/`mapped_len` are exactly what pmem_map_file returned and
    // nothing else refers to the mapping.
    unsafe { ffi::pmem_unmap(addr, mapped_len) };
    Ok(is_pmem != 0)
}

/// Whether `PMEM_IS_PMEM_FORCE=1` is in effect in this process.
///
/// Checks with [`flush_path_in`] on `/dev/shm`: tmpfs is never real pmem,
/// so libpmem says yes there only when forced. Returns `false` if
/// `/dev/shm` cannot be used.
///
/// This is a first use of libpmem (see the [crate docs](crate)): after it
/// returns, setting the variable no longer changes anything.
pub fn pmem_forced() -> bool {
    flush_path_in(Path::new(SHM_DIR)).unwrap_or(false)
}

/// Sets `PMEM_IS_PMEM_FORCE=1` in this process's environment and reports
/// whether forcing is now in effect (via [`pmem_forced`]).
///
/// Returns `false` if libpmem already decided without the variable, i.e. if
/// any PMDK pool or mapping was created earlier in this process; then the
/// only remedy is to start the process again with the variable exported
/// (e.g. the CLI re-executing itself).
///
/// # Safety
///
/// Same contract as [`std::env::set_var`]: no other thread may read or
/// write the environment while this runs, and that includes C code calling
/// `getenv` (libpmem itself does). Call it near the top of `main`, before
/// spawning threads.
pub unsafe fn force_pmem() -> bool {
    if std::env::var_os(PMEM_IS_PMEM_FORCE).is_none_or(|v| v != "1") {
        // SAFETY: the caller guarantees no concurrent environment access.
        unsafe { std::env::set_var(PMEM_IS_PMEM_FORCE, "1") };
    }
    pmem_forced()
}

/// A file mapped with libpmem's `pmem_map_file`, for timing libpmem's own
/// copy and flush primitives. Unmapped on drop.
///
/// The mapping is shared with the file: another process writing the same
/// file concurrently would be visible through [`as_slice`](Self::as_slice);
/// the benchmarks own their files exclusively.
#[derive(Debug)]
pub struct PmemMap {
    addr: NonNull<u8>,
    len: usize,
    is_pmem: bool,
}

// SAFETY: PmemMap owns its mapping exclusively (like a Box<[u8]>); the raw
// pointer is only what makes the compiler unsure. Shared access only reads,
// and the libpmem functions used here are thread-safe.
unsafe impl Send for PmemMap {}
// SAFETY: see Send; `&self` methods never write through the pointer except
// `persist`/`drain`, which only flush caches.
unsafe impl Sync for PmemMap {}

impl PmemMap {
    /// Creates (or truncates) the file at `path` to `len` bytes, allocates
    /// its blocks, and maps it.
    pub fn create(path: &Path, len: usize) -> Result<Self> {
        let cpath = c_path(path)?;
        let mut mapped_len = 0usize;
        let mut is_pmem: c_int = 0;
        // SAFETY: `cpath` is NUL-terminated and the out pointers point to
        // live locals. libpmem validates `len` itself (0 is an error).
        let addr = unsafe {
            ffi::pmem_map_file(
                cpath.as_ptr(),
                len,
                ffi::PMEM_FILE_CREATE,
                0o600,
                &mut mapped_len,
                &mut is_pmem,
            )
        };
        let Some(addr) = NonNull::new(addr.cast::<u8>()) else {
            return Err(last_error(Lib::Pmem, "pmem_map_file"));
        };
        Ok(PmemMap {
            addr,
            len: mapped_len,
            is_pmem: is_pmem != 0,
        })
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never, for a successful `create`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether libpmem treats this mapping as pmem: if so, persisting is
    /// flush+fence; if not, [`memcpy_persist`](Self::memcpy_persist) and
    /// [`persist`](Self::persist) fall back to `msync` as PMDK prescribes.
    pub fn is_pmem(&self) -> bool {
        self.is_pmem
    }

    /// The mapped bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes, lives as long as
        // `self`, and is only written through `&mut self`.
        unsafe { std::slice::from_raw_parts(self.addr.as_ptr(), self.len) }
    }

    /// The mapped bytes, writable. Writes are not durable until
    /// [`persist`](Self::persist)ed.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes this the only
        // reference to the mapping.
        unsafe { std::slice::from_raw_parts_mut(self.addr.as_ptr(), self.len) }
    }

    /// Copies `src` to offset `off` and makes it durable: libpmem's
    /// `pmem_memcpy_persist` when [`is_pmem`](Self::is_pmem), otherwise a
    /// plain copy followed by `pmem_msync`.
    pub fn memcpy_persist(&mut self, off: usize, src: &[u8]) -> Result<()> {
        check_range("memcpy_persist", off, src.len(), self.len)?;
        if !self.is_pmem {
            self.as_mut_slice()[off..off + src.len()].copy_from_slice(src);
            return self.persist(off, src.len());
        }
        // SAFETY: the destination range was checked to lie inside the
        // mapping, `&mut self` excludes other references to it, and `src`
        // is a separate Rust slice, so the ranges cannot overlap.
        unsafe {
            ffi::pmem_memcpy_persist(
                self.addr.as_ptr().add(off).cast::<c_void>(),
                src.as_ptr().cast::<c_void>(),
                src.len(),
            )
        };
        Ok(())
    }

    /// Copies `src` to offset `off` with libpmem's `pmem_memcpy_nodrain`
    /// (non-temporal stores or copy+flush, no fence). Call
    /// [`drain`](Self::drain) to finish. Only meaningful when
    /// [`is_pmem`](Self::is_pmem); otherwise it is a plain copy and
    /// [`persist`](Self::persist) is needed.
    pub fn memcpy_nodrain(&mut self, off: usize, src: &[u8]) -> Result<()> {
        check_range("memcpy_nodrain", off, src.len(), self.len)?;
        if !self.is_pmem {
            self.as_mut_slice()[off..off + src.len()].copy_from_slice(src);
            return Ok(());
        }
        // SAFETY: as in `memcpy_persist`.
        unsafe {
            ffi::pmem_memcpy_nodrain(
                self.addr.as_ptr().add(off).cast::<c_void>(),
                src.as_ptr().cast::<c_void>(),
                src.len(),
            )
        };
        Ok(())
    }

    /// Makes `off..off + len` durable: `pmem_persist` (flush + fence) when
    /// [`is_pmem`](Self::is_pmem), otherwise `pmem_msync`.
    pub fn persist(&self, off: usize, len: usize) -> Result<()> {
        check_range("persist", off, len, self.len)?;
        // SAFETY: `off` is inside the mapping (checked), so the pointer
        // arithmetic stays in bounds.
        let start = unsafe { self.addr.as_ptr().add(off) }.cast::<c_void>();
        if self.is_pmem {
            // SAFETY: the range lies inside our live mapping; pmem_persist
            // only flushes cache lines, it does not change the bytes.
            unsafe { ffi::pmem_persist(start, len) };
            return Ok(());
        }
        // SAFETY: as above; pmem_msync rounds the start down to a page
        // boundary, which is still inside the (page-aligned) mapping.
        if unsafe { ffi::pmem_msync(start, len) } != 0 {
            return Err(last_error(Lib::Pmem, "pmem_msync"));
        }
        Ok(())
    }

    /// Waits for earlier [`memcpy_nodrain`](Self::memcpy_nodrain) stores
    /// to reach the persistence domain (`SFENCE`).
    pub fn drain(&self) {
        // SAFETY: pmem_drain takes no arguments and only issues a fence.
        unsafe { ffi::pmem_drain() };
    }
}

impl Drop for PmemMap {
    fn drop(&mut self) {
        // SAFETY: `addr`/`len` are what pmem_map_file returned, and no
        // borrow of the mapping can outlive `self`. An unmap error leaves
        // nothing to recover, so it is ignored.
        unsafe { ffi::pmem_unmap(self.addr.as_ptr().cast::<c_void>(), self.len) };
    }
}
