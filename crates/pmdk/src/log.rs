//! libpmemlog: an append-only byte log in a pool file.

use std::any::Any;
use std::ffi::{c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::Path;
use std::ptr::NonNull;

use crate::error::{Error, Lib, Result, c_path, last_error};
use crate::ffi;

/// An open libpmemlog pool. Closed on drop.
///
/// The log is a byte stream: PMDK keeps no record boundaries, so
/// [`walk`](Self::walk) hands back bytes in chunks of the size asked for,
/// not the original appends.
///
/// Mutating calls take `&mut self`. libpmemlog is internally locked, but
/// [`walk`](Self::walk) holds the pool's read lock while it runs the
/// callback, so an append from inside the callback would deadlock; the
/// borrow rules rule that out.
#[derive(Debug)]
pub struct PmemLog {
    plp: NonNull<ffi::PMEMlogpool>,
}

// SAFETY: libpmemlog pools may be used from any thread (every entry point
// takes the pool's own rwlock); the handle is just a pointer to it.
unsafe impl Send for PmemLog {}
// SAFETY: the `&self` methods (tell, nbyte, walk) take the pool's read lock.
unsafe impl Sync for PmemLog {}

impl PmemLog {
    /// Smallest pool size libpmemlog accepts (`PMEMLOG_MIN_POOL`, 2 MiB).
    pub fn min_pool_size() -> usize {
        // SAFETY: returns a compile-time constant from the C header.
        unsafe { ffi::ferrite_pmdk_log_min_pool() }
    }

    /// Creates a log pool of `pool_size` bytes at `path` (mode 0600). The
    /// file must not exist yet; `pool_size` must be at least
    /// [`min_pool_size`](Self::min_pool_size).
    pub fn create(path: &Path, pool_size: usize) -> Result<Self> {
        let cpath = c_path(path)?;
        // SAFETY: `cpath` is a valid NUL-terminated string for the call.
        let plp = unsafe { ffi::pmemlog_create(cpath.as_ptr(), pool_size, 0o600) };
        NonNull::new(plp)
            .map(|plp| PmemLog { plp })
            .ok_or_else(|| last_error(Lib::Log, "pmemlog_create"))
    }

    /// Opens an existing log pool.
    pub fn open(path: &Path) -> Result<Self> {
        let cpath = c_path(path)?;
        // SAFETY: `cpath` is a valid NUL-terminated string for the call.
        let plp = unsafe { ffi::pmemlog_open(cpath.as_ptr()) };
        NonNull::new(plp)
            .map(|plp| PmemLog { plp })
            .ok_or_else(|| last_error(Lib::Log, "pmemlog_open"))
    }

    /// Appends `data` atomically and durably (`pmemlog_append`). Fails
    /// with `ENOSPC` when the log is full.
    pub fn append(&mut self, data: &[u8]) -> Result<()> {
        // SAFETY: `plp` is an open pool; `data` is readable for its length
        // and PMDK only reads it.
        let rc = unsafe {
            ffi::pmemlog_append(
                self.plp.as_ptr(),
                data.as_ptr().cast::<c_void>(),
                data.len(),
            )
        };
        if rc != 0 {
            return Err(last_error(Lib::Log, "pmemlog_append"));
        }
        Ok(())
    }

    /// Appends all of `bufs`, in order, as one atomic and durable append
    /// (`pmemlog_appendv`).
    pub fn appendv(&mut self, bufs: &[&[u8]]) -> Result<()> {
        let count = c_int::try_from(bufs.len()).map_err(|_| Error::TooLarge {
            what: "pmemlog_appendv",
            value: bufs.len() as u64,
        })?;
        let iov: Vec<libc::iovec> = bufs
            .iter()
            .map(|b| libc::iovec {
                iov_base: b.as_ptr().cast_mut().cast::<c_void>(),
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: `plp` is an open pool; `iov` holds `count` entries, each
        // describing a live slice that PMDK only reads (the `*mut` in iovec
        // is just the C type).
        let rc = unsafe { ffi::pmemlog_appendv(self.plp.as_ptr(), iov.as_ptr(), count) };
        if rc != 0 {
            return Err(last_error(Lib::Log, "pmemlog_appendv"));
        }
        Ok(())
    }

    /// Number of bytes appended so far (`pmemlog_tell`).
    pub fn tell(&self) -> u64 {
        // SAFETY: `plp` is an open pool.
        let pos = unsafe { ffi::pmemlog_tell(self.plp.as_ptr()) };
        // pmemlog_tell is never negative for an open pool.
        u64::try_from(pos).unwrap_or(0)
    }

    /// Capacity of the log in bytes (`pmemlog_nbyte`).
    pub fn nbyte(&self) -> usize {
        // SAFETY: `plp` is an open pool.
        unsafe { ffi::pmemlog_nbyte(self.plp.as_ptr()) }
    }

    /// Empties the log (`pmemlog_rewind`).
    pub fn rewind(&mut self) {
        // SAFETY: `plp` is an open pool.
        unsafe { ffi::pmemlog_rewind(self.plp.as_ptr()) };
    }

    /// Calls `f` on the log's contents from the start, `chunk` bytes at a
    /// time (the last chunk may be shorter; `chunk == 0` means everything in
    /// one call). Stops early when `f` returns `false`. Chunks are never
    /// empty, so an empty log calls `f` zero times.
    ///
    /// The slices point into the pool and are only valid during the call.
    /// A panic in `f` stops the walk and is resumed once PMDK has returned.
    pub fn walk<F>(&self, chunk: usize, mut f: F)
    where
        F: FnMut(&[u8]) -> bool,
    {
        let mut state = WalkState {
            f: &mut f,
            panic: None,
        };
        // SAFETY: `plp` is an open pool; `walk_trampoline::<F>` matches the
        // callback signature and `arg` points to `state`, which outlives the
        // call. PMDK calls back synchronously on this thread.
        unsafe {
            ffi::pmemlog_walk(
                self.plp.as_ptr(),
                chunk,
                walk_trampoline::<F>,
                (&raw mut state).cast::<c_void>(),
            )
        };
        if let Some(payload) = state.panic {
            resume_unwind(payload);
        }
    }
}

impl Drop for PmemLog {
    fn drop(&mut self) {
        // SAFETY: `plp` is open and this is its last use.
        unsafe { ffi::pmemlog_close(self.plp.as_ptr()) };
    }
}

/// What [`PmemLog::walk`] passes through PMDK's `void *arg`.
struct WalkState<'a, F> {
    f: &'a mut F,
    panic: Option<Box<dyn Any + Send>>,
}

/// The C callback for `pmemlog_walk`: forwards each chunk to the Rust
/// closure. Returns nonzero to continue, 0 to stop.
unsafe extern "C" fn walk_trampoline<F>(buf: *const c_void, len: usize, arg: *mut c_void) -> c_int
where
    F: FnMut(&[u8]) -> bool,
{
    // SAFETY: `arg` is the `&mut WalkState<F>` that `walk` handed to
    // pmemlog_walk; it is alive and not otherwise borrowed during the call.
    let state = unsafe { &mut *arg.cast::<WalkState<'_, F>>() };
    if state.panic.is_some() {
        return 0;
    }
    // With chunk size 0 PMDK reports an empty log as one empty chunk; the
    // Rust API promises no calls for an empty log.
    if len == 0 || buf.is_null() {
        return 1;
    }
    // SAFETY: PMDK passes `len` readable bytes of the pool at `buf`,
    // unchanged while the walk holds the pool's read lock.
    let data = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
    match catch_unwind(AssertUnwindSafe(|| (state.f)(data))) {
        Ok(true) => 1,
        Ok(false) => 0,
        Err(payload) => {
            state.panic = Some(payload);
            0
        }
    }
}
