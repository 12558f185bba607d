//! libpmemblk: an array of fixed-size blocks, each written atomically.

use std::ffi::{c_longlong, c_void};
use std::path::Path;
use std::ptr::NonNull;

use crate::error::{Error, Lib, Result, c_path, last_error};
use crate::ffi;

/// An open libpmemblk pool. Closed on drop.
///
/// libpmemblk is thread-safe (per-lane locking inside PMDK), so reads and
/// writes take `&self` and the pool can be shared between threads.
#[derive(Debug)]
pub struct PmemBlk {
    pbp: NonNull<ffi::PMEMblkpool>,
    bsize: usize,
    nblock: u64,
}

// SAFETY: libpmemblk pools may be used from any thread; the handle is just a
// pointer to the pool.
unsafe impl Send for PmemBlk {}
// SAFETY: every libpmemblk entry point used through `&self` is thread-safe.
unsafe impl Sync for PmemBlk {}

impl PmemBlk {
    /// Smallest pool size libpmemblk accepts (`PMEMBLK_MIN_POOL`).
    pub fn min_pool_size() -> usize {
        // SAFETY: returns a compile-time constant from the C header.
        unsafe { ffi::ferrite_pmdk_blk_min_pool() }
    }

    /// Smallest block size libpmemblk uses (`PMEMBLK_MIN_BLK`, 512).
    pub fn min_block_size() -> usize {
        // SAFETY: returns a compile-time constant from the C header.
        unsafe { ffi::ferrite_pmdk_blk_min_block() }
    }

    /// Creates a block pool at `path` (mode 0600) with blocks of
    /// `block_size` bytes in `pool_size` bytes of file. The file must not
    /// exist yet.
    pub fn create(path: &Path, block_size: usize, pool_size: usize) -> Result<Self> {
        let cpath = c_path(path)?;
        // SAFETY: `cpath` is a valid NUL-terminated string for the call.
        let pbp = unsafe { ffi::pmemblk_create(cpath.as_ptr(), block_size, pool_size, 0o600) };
        Self::wrap(pbp, "pmemblk_create")
    }

    /// Opens an existing block pool. `block_size` must match the one it
    /// was created with; 0 accepts whatever it has.
    pub fn open(path: &Path, block_size: usize) -> Result<Self> {
        let cpath = c_path(path)?;
        // SAFETY: `cpath` is a valid NUL-terminated string for the call.
        let pbp = unsafe { ffi::pmemblk_open(cpath.as_ptr(), block_size) };
        Self::wrap(pbp, "pmemblk_open")
    }

    fn wrap(pbp: *mut ffi::PMEMblkpool, call: &'static str) -> Result<Self> {
        let Some(pbp) = NonNull::new(pbp) else {
            return Err(last_error(Lib::Blk, call));
        };
        // SAFETY: `pbp` was just returned open by PMDK.
        let (bsize, nblock) = unsafe {
            (
                ffi::pmemblk_bsize(pbp.as_ptr()),
                ffi::pmemblk_nblock(pbp.as_ptr()),
            )
        };
        Ok(PmemBlk {
            pbp,
            bsize,
            nblock: nblock as u64,
        })
    }

    /// Block size in bytes; every read and write moves exactly this much.
    pub fn bsize(&self) -> usize {
        self.bsize
    }

    /// Number of usable blocks; valid block numbers are `0..nblock()`.
    pub fn nblock(&self) -> u64 {
        self.nblock
    }

    /// Writes `data` (exactly [`bsize`](Self::bsize) bytes) to block
    /// `block_no`, atomically with respect to crashes.
    pub fn write(&self, block_no: u64, data: &[u8]) -> Result<()> {
        self.check("pmemblk_write", block_no, data.len())?;
        // SAFETY: `pbp` is open; `data` holds exactly bsize readable bytes
        // (checked), which is all PMDK reads; the block number is in range
        // and fits c_longlong (checked).
        let rc = unsafe {
            ffi::pmemblk_write(
                self.pbp.as_ptr(),
                data.as_ptr().cast::<c_void>(),
                block_no as c_longlong,
            )
        };
        if rc != 0 {
            return Err(last_error(Lib::Blk, "pmemblk_write"));
        }
        Ok(())
    }

    /// Reads block `block_no` into `buf` (exactly [`bsize`](Self::bsize)
    /// bytes). A block never written reads as zeros.
    pub fn read(&self, block_no: u64, buf: &mut [u8]) -> Result<()> {
        self.check("pmemblk_read", block_no, buf.len())?;
        // SAFETY: `pbp` is open; `buf` holds exactly bsize writable bytes
        // (checked), which is all PMDK writes; the block number is in range.
        let rc = unsafe {
            ffi::pmemblk_read(
                self.pbp.as_ptr(),
                buf.as_mut_ptr().cast::<c_void>(),
                block_no as c_longlong,
            )
        };
        if rc != 0 {
            return Err(last_error(Lib::Blk, "pmemblk_read"));
        }
        Ok(())
    }

    /// Makes block `block_no` read as zeros (`pmemblk_set_zero`).
    pub fn set_zero(&self, block_no: u64) -> Result<()> {
        self.check("pmemblk_set_zero", block_no, self.bsize)?;
        // SAFETY: `pbp` is open and the block number is in range.
        let rc = unsafe { ffi::pmemblk_set_zero(self.pbp.as_ptr(), block_no as c_longlong) };
        if rc != 0 {
            return Err(last_error(Lib::Blk, "pmemblk_set_zero"));
        }
        Ok(())
    }

    /// Checks a block number and a buffer length before calling PMDK.
    /// `nblock` comes from a `size_t`, well below `c_longlong::MAX` for any
    /// real pool, so an in-range block number always fits.
    fn check(&self, what: &'static str, block_no: u64, len: usize) -> Result<()> {
        if len != self.bsize {
            return Err(Error::Length {
                what,
                expected: self.bsize,
                got: len,
            });
        }
        if block_no >= self.nblock || c_longlong::try_from(block_no).is_err() {
            return Err(Error::OutOfRange {
                what,
                start: block_no,
                end: block_no.saturating_add(1),
                limit: self.nblock,
            });
        }
        Ok(())
    }
}

impl Drop for PmemBlk {
    fn drop(&mut self) {
        // SAFETY: `pbp` is open and this is its last use.
        unsafe { ffi::pmemblk_close(self.pbp.as_ptr()) };
    }
}
