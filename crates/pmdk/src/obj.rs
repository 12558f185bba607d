//! libpmemobj: the persistent allocator, atomically and in a transaction.

use std::ffi::CString;
use std::path::Path;
use std::ptr::{self, NonNull};

use crate::error::{Error, Lib, Result, c_path, last_error, pmdk_error};
use crate::ffi;

/// An open libpmemobj pool. Closed on drop.
///
/// libpmemobj is thread-safe for the atomic allocator and for
/// transactions (each thread has its own), so all methods take `&self`.
#[derive(Debug)]
pub struct PmemObj {
    pub(crate) pop: NonNull<ffi::PMEMobjpool>,
    /// Bytes mapped at `pop` (the pool file's size, page-rounded down:
    /// libpmemobj maps a single-file pool whole). `PMEMoid.off` values
    /// index this range.
    pub(crate) len: usize,
}

// SAFETY: libpmemobj pools may be used from any thread; the handle is just a
// pointer to the pool.
unsafe impl Send for PmemObj {}
// SAFETY: pmemobj_alloc/free and transactions are thread-safe, and no
// transaction is left open across a call of this API.
unsafe impl Sync for PmemObj {}

/// A persistent object allocated by [`PmemObj::alloc`] (a `PMEMoid`).
///
/// Deliberately neither `Clone` nor `Copy`: [`PmemObj::free`] consumes it,
/// so an object cannot be freed twice. Dropping an `Oid` without freeing it
/// leaves the object allocated in the pool.
#[derive(Debug, PartialEq, Eq)]
pub struct Oid {
    raw: ffi::PMEMoid,
}

impl Oid {
    /// The object's offset from the start of its pool.
    pub fn offset(&self) -> u64 {
        self.raw.off
    }

    /// The low half of the owning pool's UUID, as stored in the `PMEMoid`.
    pub fn pool_uuid_lo(&self) -> u64 {
        self.raw.pool_uuid_lo
    }
}

impl PmemObj {
    /// Smallest pool size libpmemobj accepts (`PMEMOBJ_MIN_POOL`, 8 MiB).
    pub fn min_pool_size() -> usize {
        // SAFETY: returns a compile-time constant from the C header.
        unsafe { ffi::ferrite_pmdk_obj_min_pool() }
    }

    /// Longest layout name, including its NUL (`PMEMOBJ_MAX_LAYOUT`).
    pub fn max_layout_len() -> usize {
        // SAFETY: returns a compile-time constant from the C header.
        unsafe { ffi::ferrite_pmdk_obj_max_layout() }
    }

    /// Creates an object pool of `pool_size` bytes at `path` (mode 0600),
    /// tagged with `layout`. The file must not exist yet.
    pub fn create(path: &Path, layout: &str, pool_size: usize) -> Result<Self> {
        let cpath = c_path(path)?;
        let clayout = c_layout(layout)?;
        // SAFETY: both strings are valid and NUL-terminated for the call.
        let pop =
            unsafe { ffi::pmemobj_create(cpath.as_ptr(), clayout.as_ptr(), pool_size, 0o600) };
        let pop = NonNull::new(pop).ok_or_else(|| last_error(Lib::Obj, "pmemobj_create"))?;
        Self::with_len(pop, path)
    }

    /// Opens an existing object pool, checking its layout name.
    pub fn open(path: &Path, layout: &str) -> Result<Self> {
        let cpath = c_path(path)?;
        let clayout = c_layout(layout)?;
        // SAFETY: both strings are valid and NUL-terminated for the call.
        let pop = unsafe { ffi::pmemobj_open(cpath.as_ptr(), clayout.as_ptr()) };
        let pop = NonNull::new(pop).ok_or_else(|| last_error(Lib::Obj, "pmemobj_open"))?;
        Self::with_len(pop, path)
    }

    /// Wraps the open pool `pop` mapped from the file at `path`, whose
    /// size is the mapping's length. Closes `pop` if the size is unknown.
    fn with_len(pop: NonNull<ffi::PMEMobjpool>, path: &Path) -> Result<Self> {
        // Owning the handle first means an error below still closes it.
        let mut obj = PmemObj { pop, len: 0 };
        let size = std::fs::metadata(path)
            .map_err(|e| Error::Corrupt {
                what: format!("size of pool file {}: {e}", path.display()),
            })?
            .len();
        obj.len = usize::try_from(size).map_err(|_| Error::TooLarge {
            what: "pool size",
            value: size,
        })? & !4095;
        Ok(obj)
    }

    /// Allocates `size` bytes with the atomic (non-transactional) API,
    /// `pmemobj_alloc`. Size 0 or more than the pool can hold is an error.
    pub fn alloc(&self, size: usize) -> Result<Oid> {
        let mut raw = ffi::PMEMoid {
            pool_uuid_lo: 0,
            off: 0,
        };
        // SAFETY: `pop` is open and `raw` is a live out-parameter. No
        // constructor is passed, so PMDK calls nothing back.
        let rc = unsafe {
            ffi::pmemobj_alloc(
                self.pop.as_ptr(),
                &mut raw,
                size,
                ffi::ferrite_pmdk_type_num(),
                None,
                ptr::null_mut(),
            )
        };
        if rc != 0 {
            return Err(last_error(Lib::Obj, "pmemobj_alloc"));
        }
        Ok(Oid { raw })
    }

    /// Frees an object from [`alloc`](Self::alloc) with the atomic API,
    /// `pmemobj_free`. Fails with [`Error::ForeignOid`] (and frees nothing)
    /// if `oid` was allocated by another pool.
    pub fn free(&self, oid: Oid) -> Result<()> {
        let mut raw = self.own(&oid)?;
        // SAFETY: `raw` is a live object of this open pool (checked), and
        // consuming `oid` guarantees it is freed only once.
        unsafe { ffi::pmemobj_free(&mut raw) };
        Ok(())
    }

    /// Bytes actually usable in `oid` (at least the size asked for).
    pub fn usable_size(&self, oid: &Oid) -> Result<usize> {
        let raw = self.own(oid)?;
        // SAFETY: `raw` is a live object of this open pool (checked).
        Ok(unsafe { ffi::pmemobj_alloc_usable_size(raw) })
    }

    /// Allocates `size` bytes and frees them again inside one transaction
    /// (`TX_BEGIN { pmemobj_tx_alloc; pmemobj_tx_free } TX_END`, in C).
    /// Leaves the pool as it was; on abort the transaction's error is
    /// returned.
    pub fn tx_alloc_free(&self, size: usize) -> Result<()> {
        // SAFETY: `pop` is open. The shim keeps setjmp/longjmp within its
        // own C frame and leaves no transaction open when it returns.
        let err = unsafe { ffi::ferrite_pmdk_tx_alloc_free(self.pop.as_ptr(), size) };
        if err != 0 {
            return Err(pmdk_error(Lib::Obj, "pmemobj_tx_alloc", err));
        }
        Ok(())
    }

    /// Returns `oid`'s raw `PMEMoid` if this pool owns it.
    fn own(&self, oid: &Oid) -> Result<ffi::PMEMoid> {
        // SAFETY: pmemobj_pool_by_oid only looks the UUID up in the table of
        // pools open in this process; any value is accepted.
        let owner = unsafe { ffi::pmemobj_pool_by_oid(oid.raw) };
        if owner != self.pop.as_ptr() {
            return Err(Error::ForeignOid);
        }
        Ok(oid.raw)
    }
}

impl Drop for PmemObj {
    fn drop(&mut self) {
        // SAFETY: `pop` is open and this is its last use.
        unsafe { ffi::pmemobj_close(self.pop.as_ptr()) };
    }
}

fn c_layout(layout: &str) -> Result<CString> {
    CString::new(layout).map_err(|_| Error::Nul { what: "layout" })
}
