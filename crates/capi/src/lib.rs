//! `ferrite-capi`: the C ABI of the Ferrite store — `libferrite.so`,
//! `libferrite.a`, the header `include/ferrite.h` (generated from this
//! crate by cbindgen; `tests/header.rs` fails when it is not current) and
//! `ferrite.pc` for pkg-config (written by the build next to the library,
//! in `target/<profile>/pkgconfig/`).
//!
//! Conventions of every function:
//!
//! - **Return codes**: `FERRITE_OK` (0) on success, a positive code for an
//!   outcome that is not an error (`FERRITE_NOT_FOUND`, `FERRITE_END`), a
//!   negative `FERRITE_ERR_*` code on error, with a message for
//!   `ferrite_last_error()` on the calling thread.
//! - **No panic crosses the boundary**: a panic inside the library is
//!   caught and returned as `FERRITE_ERR_PANIC`.
//! - **Ownership**: a handle a function hands out (`ferrite_store`,
//!   `ferrite_snapshot`, `ferrite_iter`) is the caller's, released with its
//!   own `*_free` function; bytes and strings it hands out are `malloc`'d
//!   and released with `ferrite_free`. Bytes the caller passes in are only
//!   read during the call (the library keeps no pointer to them).
//! - **Threads**: a `ferrite_store` may be used from any number of threads
//!   at once; a `ferrite_snapshot` too (calls on it are serialised); a
//!   `ferrite_iter` by one thread at a time.
//! - **Durability**: `put`, `delete` and `batch` return when their effect is
//!   durable; a batch is all or nothing after a crash or `kill -9`.
//!
//! The Rust half (option parsing, the pool check) is public for the
//! Python package, which shares it.

#![allow(non_camel_case_types)] // the opaque handles carry their C names

pub mod check;
pub mod error;
mod ffi;
pub mod options;

pub use error::*;

use ferrite_engine::{KeyRange, Op, RangeIter, Snapshot, Store};
use parking_lot::{Mutex, RwLock};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `ferrite_op.kind`: insert or replace `key` with `val`.
pub const FERRITE_OP_PUT: c_int = 1;
/// `ferrite_op.kind`: remove `key` (nothing when absent).
pub const FERRITE_OP_DELETE: c_int = 2;

/// `ferrite_*_scan` flag: visit the range in descending key order.
pub const FERRITE_SCAN_REVERSE: c_int = 1;
/// `ferrite_*_scan` flag: the end bound is inclusive (default: exclusive).
pub const FERRITE_SCAN_END_INCLUSIVE: c_int = 2;
/// `ferrite_*_scan` flag: `start` is a prefix; every key that begins with
/// it is visited (`end` must be NULL).
pub const FERRITE_SCAN_PREFIX: c_int = 4;

/// An open store. Opaque. Created by `ferrite_store_open`; closed by
/// `ferrite_store_close` (after which every call on it returns
/// `FERRITE_ERR_CLOSED`), released by `ferrite_store_free`.
pub struct ferrite_store {
    store: RwLock<Option<Store>>,
    /// Snapshots of this handle still open.
    snapshots: Arc<AtomicUsize>,
    /// The engine's writers wait for open snapshots (InP, LSM): writes are
    /// refused while one is open, instead of waiting (on the thread that
    /// holds it, for ever).
    writes_wait_for_snapshots: bool,
}

/// A consistent read-only view of a store. Opaque. Created by
/// `ferrite_store_snapshot`, released by `ferrite_snapshot_free`.
pub struct ferrite_snapshot {
    snap: Mutex<Snapshot>,
    /// The store handle's count of open snapshots.
    count: Arc<AtomicUsize>,
}

impl Drop for ferrite_snapshot {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A scan in progress. Opaque. Created by `ferrite_store_scan` or
/// `ferrite_snapshot_scan`, released by `ferrite_iter_free`.
pub struct ferrite_iter {
    src: IterSrc,
    cur: (Vec<u8>, Vec<u8>),
}

enum IterSrc {
    /// A store's range, read lazily in chunks.
    Live(RangeIter),
    /// A snapshot's range, read at once.
    Collected(std::vec::IntoIter<(Vec<u8>, Vec<u8>)>),
}

/// One write of an atomic batch (`ferrite_store_batch`).
#[repr(C)]
pub struct ferrite_op {
    /// `FERRITE_OP_PUT` or `FERRITE_OP_DELETE`.
    pub kind: c_int,
    /// The key (1 to 1024 bytes).
    pub key: *const c_void,
    /// Bytes of `key`.
    pub klen: usize,
    /// The value (`FERRITE_OP_PUT`; up to 1 MiB; ignored for a delete).
    pub val: *const c_void,
    /// Bytes of `val`.
    pub vlen: usize,
}

thread_local! {
    /// The calling thread's read buffer (`get` reads into it, then copies
    /// into the caller's `malloc`'d block): no allocation besides that one.
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on the open store behind `s`.
///
/// # Safety
/// `s` is null or a live `ferrite_store` (not freed).
unsafe fn with_store<T>(
    s: *const ferrite_store,
    f: impl FnOnce(&Store) -> error::Result<T>,
) -> error::Result<T> {
    // SAFETY: the caller promises null or a live handle.
    let h = unsafe { ffi::handle(s, "store") }?;
    let g = h.store.read();
    f(g.as_ref().ok_or(CapiError::Closed)?)
}

/// Runs the write `f` on the open store behind `s`: refused with
/// `FERRITE_ERR_BUSY` while a snapshot of this handle is open on an engine
/// whose writers would wait for it.
///
/// # Safety
/// As [`with_store`].
unsafe fn with_writer<T>(
    s: *const ferrite_store,
    f: impl FnOnce(&Store) -> error::Result<T>,
) -> error::Result<T> {
    // SAFETY: the caller promises null or a live handle.
    let h = unsafe { ffi::handle(s, "store") }?;
    let g = h.store.read();
    let st = g.as_ref().ok_or(CapiError::Closed)?;
    if h.writes_wait_for_snapshots && h.snapshots.load(Ordering::Acquire) > 0 {
        return Err(CapiError::Busy(format!(
            "a snapshot of this {} store is open, and its writers wait until it is freed: \
             free it first (a cow store's writers go on)",
            st.kind()
        )));
    }
    f(st)
}

/// The version of the library, e.g. `"0.1.0"`. A static string: never freed.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn ferrite_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The message of the calling thread's last error: never NULL (an empty
/// string before any error). The string belongs to the library and stays
/// valid until the calling thread's next failing call; copy it to keep it.
/// Successful calls leave it as it was. Thread-safe (one message per thread).
#[unsafe(no_mangle)]
pub extern "C" fn ferrite_last_error() -> *const c_char {
    error::last_error_ptr()
}

/// Releases memory the library handed out (`ferrite_store_get`'s value,
/// `ferrite_pool_check`'s report). NULL is ignored. Thread-safe.
///
/// # Safety
/// `p` is NULL or a pointer the library returned for `ferrite_free` that
/// was not freed yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrite_free(p: *mut c_void) {
    // SAFETY: as the caller promises.
    unsafe { ffi::free(p) }
}

/// Opens the store in the pool file `path`, creating the file when it is
/// missing (unless `create=no`). `options`: NULL or comma-separated
/// `key=value` pairs: `engine=inp|cow|lsm` (created with it, expected at
/// open; default: create `inp`, open any), `domain=adr|eadr|msync|…`
/// (default: `FERRITE_DOMAIN`, else detected), `size=BYTES` with `k`/`m`/`g`
/// suffixes (a fixed size for a pool the call creates; without it the pool
/// starts small and grows on demand), `max_size=BYTES` (the most it may
/// grow to; default 1 TiB of reserved address space), `sessions=N` (most writers at
/// once, 1..=1000, default 8), `allocator=ferrite|lock`, `create=yes|no`.
/// Opening runs recovery: every write acknowledged before a crash is there.
///
/// On success `*out` is a new handle, the caller's, released with
/// `ferrite_store_free`. One process opens a pool file once at a time
/// (`FERRITE_ERR_BUSY` otherwise); share the handle between threads.
/// Thread-safe.
///
/// # Safety
/// `path` is a NUL-terminated string; `options` NULL or one; `out` valid
/// for writing a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrite_store_open(
    path: *const c_char,
    options: *const c_char,
    out: *mut *mut ferrite_store,
) -> c_int {
    error::guard(|| {
        ffi::need(out, "out")?;
        // SAFETY: NUL-terminated strings or null, as the caller promises.
        let path = unsafe { ffi::opt_str(path, "path") }?.ok_or(CapiError::Null("path"))?;
        // SAFETY: as above.
        let opts = options::parse_options(unsafe { ffi::opt_str(options, "options") }?)?;
        let store = options::open(Path::new(path), &opts)?;
        let h = Box::into_raw(Box::new(ferrite_store {
            writes_wait_for_snapshots: store.kind() != ferrite_engine::EngineKind::Cow,
            store: RwLock::new(Some(store)),
            snapshots: Arc::new(AtomicUsize::new(0)),
        }));
        // SAFETY: `out` is non-null (checked) and writable.
        unsafe { ffi::put_out(out, h, "out") }?;
        Ok(FERRITE_OK)
    })
}

/// Closes the store: finishes background work and, when no snapshot or
/// iterator of it is left, closes the pool file (everything durable). Waits
/// for calls in progress on other threads. The handle stays allocated:
/// every later call on it returns `FERRITE_ERR_CLOSED` until
/// `ferrite_store_free` releases it. Closing a closed store returns
/// `FERRITE_ERR_CLOSED`. Thread-safe.
///
/// # Safety
/// `s` is NULL or a live handle from `ferrite_store_open` (not freed).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrite_store_close(s: *mut ferrite_store) -> c_int {
    error::guard(|| {
        // SAFETY: null or live, as the caller promises.
        let h = unsafe { ffi::handle(s.cast_const(), "store") }?;
        let store = h.store.write().take().ok_or(CapiError::Closed)?;
        store.close()?;
        Ok(FERRITE_OK)
    })
}

/// Releases the handle, closing the store first if it is still open
/// (errors of that close are lost: call `ferrite_store_close` to see
/// them). NULL is ignored. No other thread may be using the handle, and
/// it must not be used again.
///
/// # Safety
/// `s` is NULL or a live handle from `ferrite_store_open` (not freed).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrite_store_free(s: *mut ferrite_store) {
    // The guard only keeps a panic from crossing; nothing to report.
    let _ = error::guard(|| {
        // SAFETY: null or a live Box from ferrite_store_open.
        if let Some(h) = unsafe { ffi::unbox(s) }
            && let Some(store) = h.store.into_inner()
        {
            let _ = store.close();
        }
        Ok(FERRITE_OK)
    });
}

/// Inserts or replaces `key` (1 to 1024 bytes) with `val` (0 to 1 MiB);
/// durable when it returns. `val` may be NULL when `vlen` is 0. Thread-safe.
///
/// # Safety
/// `s` is NULL or a live handle; `key` and `val` point to `klen` and
/// `vlen` readable bytes (or are NULL with a length of 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrite_store_put(
    s: *mut ferrite_store,
    key: *const c_void,
    klen: usize,
    val: *const c_void,
    vlen: usize,
) -> c_int {
    error::guard(|| {
        // SAFETY: readable for the lengths given, as the caller promises.
        let (k, v) = unsafe { (ffi::bytes(key, klen, "key")?, ffi::bytes(val, vlen, "val")?) };
        // SAFETY: null or live handle, as the caller promises.
        unsafe { with_writer(s, |st| Ok(st.put(k, v)?)) }?;
        Ok(FERRITE_OK)
    })
}

/// Reads `key`. Returns `FERRITE_OK` with `*val` a `malloc`'d copy of the
/// value (the caller's: release it with `ferrite_free`; never NULL, even
/// for an empty value) and `*vlen` its length; `FERRITE_NOT_FOUND` when the
/// key is absent (`*val` NULL, `*vlen` 0); a negative error. Thread-safe.
///
/// # Safety
/// `s` is NULL or a live handle; `key` points to `klen` readable bytes;
/// `val` and `vlen` are valid for writing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrite_store_get(
    s: *mut ferrite_store,
    key: *const c_void,
    klen: usize,
    val: *mut *mut c_void,
    vlen: *mut usize,
) -> c_int {
    error::guard(|| {
        ffi::need(val, "val")?;
        ffi::need(vlen, "vlen")?;
        // SAFETY: readable for `klen` bytes, as the caller promises.
        let k = unsafe { ffi::bytes(key, klen, "key") }?;
        let (p, n) = READ_BUF.with(|b| -> error::Result<(*mut c_void, usize)> {
            let mut buf = b.borrow_mut();
            // SAFETY: null or live handle, as the caller promises.
            let found = unsafe { with_store(s, |st| Ok(st.get_into(k, &mut buf)?)) }?;
            let r = if found {
                (ffi::malloc_copy(&buf)?, buf.len())
            } else {
                (std::ptr::null_mut(), 0)
            };
            // Keep a large value's buffer from living on in this thread.
            if buf.capacity() > 64 << 10 {
                *buf = Vec::new();
            }
            Ok(r)
        })?;
        // SAFETY: both non-null (checked above) and writable.
        unsafe {
            ffi::put_out(val, p, "val")?;
            ffi::put_out(vlen, n, "vlen")?;
        }
        Ok(if p.is_null() {
            FERRITE_NOT_FOUND
        } else {
            FERRITE_OK
        })
    })
}

/// Removes `key`; durable when it returns. `FERRITE_OK` when it was there,
/// `FERRITE_NOT_FOUND` when it was not. Thread-safe.
///
/// # Safety
/// `s` is NULL or a live handle; `key` points to `klen` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrite_store_delete(
    s: *mut ferrite_store,
    key: *const c_void,
    klen: usize,
) -> c_int {
    error::guard(|| {
        // SAFETY: readable for `klen` bytes, as the caller promises.
        let k = unsafe { ffi::bytes(key, klen, "key") }?;
        // SAFETY: null or live handle, as the caller promises.
        let was = unsafe { with_writer(s, |st| Ok(st.delete(k)?)) }?;
        Ok(if was { FERRITE_OK } else { FERRITE_NOT_FOUND })
    })
}

/// Applies the `n` operations of `ops` atomically: after it returns all
/// are durable; after a crash at any point, all or none are there. Later
/// operations on one key win. An invalid operation (kind, key or value
/// size) fails the whole batch before anything is written. Thread-safe.
///
/// # Safety
/// `s` is NULL or a live handle; `ops` points to `n` `ferrite_op`s (or is
/// NULL with `n` 0), each of whose pointers is readable for its length.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrite_store_batch(
    s: *mut ferrite_store,
    ops: *const ferrite_op,
    n: usize,
) -> c_int {
    error::guard(|| {
        if ops.is_null() && n > 0 {
            return Err(CapiError::Null("ops"));
        }
        let raw: &[ferrite_op] = if n == 0 {
            &[]
        } else {
            // SAFETY: non-null and `n` readable ops, as the caller promises.
            unsafe { std::slice::from_raw_parts(ops, n) }
        };
        let mut batch = Vec::with_capacity(n);
        for (i, op) in raw.iter().enumerate() {
            // SAFETY: each op's pointers readable for its lengths, as promised.
            let key = unsafe { ffi::bytes(op.key, op.klen, "ferrite_op.key") }?;
            batch.push(match op.kind {
                FERRITE_OP_PUT => Op::Put {
                    key,
                    // SAFETY: as above.
                    value: unsafe { ffi::bytes(op.val, op.vlen, "ferrite_op.val") }?,
                },
                FERRITE_OP_DELETE => Op::Delete { key },
                k => {
                    return Err(CapiError::Invalid(format!(
                        "ops[{i}].kind is {k}: FERRITE_OP_PUT or FERRITE_OP_DELETE"
                    )));
                }
            });
        }
        // SAFETY: null or live handle, as the caller promises.
        unsafe { with_writer(s, |st| Ok(st.batch(&batch)?)) }?;
        Ok(FERRITE_OK)
    })
}

/// Live keys in the store, into `*n`. Thread-safe.
///
/// # Safety
/// `s` is NULL or a live handle; `n` is valid for writing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrite_store_len(s: *mut ferrite_store, n: *mut u64) -> c_int {
    error::guard(|| {
        ffi::need(n, "n")?;
        // SAFETY: null or live handle, as the caller promises.
        let len = unsafe { with_store(s, |st| Ok(st.len()?)) }?;
        // SAFETY: non-null (checked) and writable.
        unsafe { ffi::put_out(n, len, "n") }?;
        Ok(FERRITE_OK)
    })
}

/// Builds the range of a scan.
///
/// # Safety
/// `start`/`end` are NULL or readable for `slen`/`elen` bytes.
unsafe fn key_range(
    start: *const c_void,
    slen: usize,
    end: *const c_void,
    elen: usize,
    flags: c_int,
) -> error::Result<KeyRange> {
    if flags & !(FERRITE_SCAN_REVERSE | FERRITE_SCAN_END_INCLUSIVE | FERRITE_SCAN_PREFIX) != 0 {
        return Err(CapiError::Invalid(format!("unknown scan flags {flags:#x}")));
    }
    // SAFETY: readable for the lengths given, as the caller promises.
    let (start, end) = unsafe { (ffi::opt_bytes(start, slen), ffi::opt_bytes(end, elen)) };
    let r = if flags & FERRITE_SCAN_PREFIX != 0 {
        if end.is_some() {
            return Err(CapiError::Invalid(
                "a prefix scan takes no end bound".into(),
            ));
        }
        KeyRange::prefix(start.ok_or(CapiError::Null("start (the prefix)"))?)
    } else {
        let lo = start.map_or(Bound::Unbounded, |k| Bound::Included(k.to_vec()));
        let hi = match end {
            None => Bound::Unbounded,
            Some(k) if flags & FERRITE_SCAN_END_INCLUSIVE != 0 => Bound::Included(k.to_vec()),
            Some(k) => Bound::Excluded(k.to_vec()),
        };
        KeyRange::bounds(lo, hi)
    };
    Ok(if flags & FERRITE_SCAN_REVERSE != 0 {
        r.rev()
    } else {
        r
    })
}

fn new_iter(src: IterSrc, out: *mut *mut ferrite_iter) -> error::Result<c_int> {
    let it = Box::into_raw(Box::new(ferrite_iter {
        src,
        cur: (Vec::new(), Vec::new()),
    }));
    // SAFETY: callers check `out` for null first; it is writable.
    if let Err(e) = unsafe { ffi::put_out(out, it, "out") } {
        // SAFETY: `it` came from Box::into_raw just above.
        drop(unsafe { ffi::unbox(it) });
        return Err(e);
    }
    Ok(FERRITE_OK)
}

/// Starts a scan of the keys from `start` (inclusive; NULL: the first key)
/// to `end` (exclusive, or inclusive with `FERRITE_SCAN_END_INCLUSIVE`;
/// NULL: the last key), ascending or with `FERRITE_SCAN_REVERSE`
/// descending; with `FERRITE_SCAN_PREFIX`, the keys beginning with
/// `start`. The store is read in chunks, each consistent on its own (for
/// one consistent view, scan a snapshot). `*out` is a new iterator, the
/// caller's, released with `ferrite_iter_free`; it keeps the store's pool
/// open until then. The call is thread-safe; the iterator is used by one
/// thread at a time.
///
/// # Safety
/// `s` is NULL or a live handle; `start`/`end` NULL or readable for
/// `slen`/`elen` bytes; `out` valid for writing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrite_store_scan(
    s: *mut ferrite_store,
    start: *const c_void,
    slen: usize,
    end: *const c_void,
    elen: usize,
    flags: c_int,
    out: *mut *mut ferrite_iter,
) -> c_int {
    error::guard(|| {
        ffi::need(out, "out")?;
        // SAFETY: bounds readable, as the caller promises.
        let range = unsafe { key_range(start, slen, end, elen, flags) }?;
        // SAFETY: null or live handle, as the caller promises.
        let it = unsafe { with_store(s, |st| Ok(st.range(range))) }?;
        new_iter(IterSrc::Live(it), out)
    })
}

/// The next pair of a scan: `FERRITE_OK` with `*key`/`*klen` and
/// `*val`/`*vlen` set to the library's copies (valid until the next
/// `ferrite_iter_next` or `ferrite_iter_free` on this iterator; not to be
/// freed), `FERRITE_END` when the scan is over, or a negative error. Not
/// thread-safe on one iterator (one thread at a time).
///
/// # Safety
/// `it` is NULL or a live iterator used by no other thread; the out
/// pointers are valid for writing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrite_iter_next(
    it: *mut ferrite_iter,
    key: *mut *const c_void,
    klen: *mut usize,
    val: *mut *const c_void,
    vlen: *mut usize,
) -> c_int {
    error::guard(|| {
        // SAFETY: null or a live iterator no other thread uses, as promised.
        let it = unsafe { it.as_mut() }.ok_or(CapiError::Null("iter"))?;
        for (p, what) in [
            (key.cast::<c_void>(), "key"),
            (val.cast(), "val"),
            (klen.cast(), "klen"),
            (vlen.cast(), "vlen"),
        ] {
            ffi::need(p, what)?;
        }
        let next = match &mut it.src {
            IterSrc::Live(r) => r.next().transpose()?,
            IterSrc::Collected(v) => v.next(),
        };
        let Some(pair) = next else {
            return Ok(FERRITE_END);
        };
        it.cur = pair;
        // SAFETY: all four non-null (checked) and writable.
        unsafe {
            ffi::put_out(key, it.cur.0.as_ptr().cast(), "key")?;
            ffi::put_out(klen, it.cur.0.len(), "klen")?;
            ffi::put_out(val, it.cur.1.as_ptr().cast(), "val")?;
            ffi::put_out(vlen, it.cur.1.len(), "vlen")?;
        }
        Ok(FERRITE_OK)
    })
}

/// Releases an iterator. NULL is ignored. Thread-safe (no other thread
/// may be using the iterator).
///
/// # Safety
/// `it` is NULL or a live iterator, not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrite_iter_free(it: *mut ferrite_iter) {
    let _ = error::guard(|| {
        // SAFETY: null or a live Box, as the caller promises.
        drop(unsafe { ffi::unbox(it) });
        Ok(FERRITE_OK)
    });
}

/// Takes a consistent read-only view: every read through it sees the store
/// as it was now. A CoW store's writers go on while it is open. An InP
/// store's writers would wait until it is freed (an LSM store's at its next
/// memtable flush), so while a snapshot of an InP or LSM store is open,
/// writes through this handle return `FERRITE_ERR_BUSY` instead of waiting
/// (for ever, on the thread that holds it): keep such snapshots short. `*out` is
/// the caller's, released with `ferrite_snapshot_free`. Thread-safe.
///
/// # Safety
/// `s` is NULL or a live handle; `out` valid for writing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrite_store_snapshot(
    s: *mut ferrite_store,
    out: *mut *mut ferrite_snapshot,
) -> c_int {
    error::guard(|| {
        ffi::need(out, "out")?;
        // SAFETY: null or live handle, as the caller promises.
        let store = unsafe { ffi::handle(s.cast_const(), "store") }?;
        // SAFETY: as above.
        let snap = unsafe { with_store(s, |st| Ok(st.snapshot()?)) }?;
        store.snapshots.fetch_add(1, Ordering::AcqRel);
        let h = Box::into_raw(Box::new(ferrite_snapshot {
            snap: Mutex::new(snap),
            count: store.snapshots.clone(),
        }));
        // SAFETY: non-null (checked) and writable.
        unsafe { ffi::put_out(out, h, "out") }?;
        Ok(FERRITE_OK)
    })
}

/// As `ferrite_store_get`, in the snapshot's view. Thread-safe (calls on
/// one snapshot are serialised).
///
/// # Safety
/// `snap` is NULL or a live snapshot; `key` readable for `klen` bytes;
/// `val` and `vlen` valid for writing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrite_snapshot_get(
    snap: *mut ferrite_snapshot,
    key: *const c_void,
    klen: usize,
    val: *mut *mut c_void,
    vlen: *mut usize,
) -> c_int {
    error::guard(|| {
        ffi::need(val, "val")?;
        ffi::need(vlen, "vlen")?;
        // SAFETY: null or live snapshot; key readable, as the caller promises.
        let (h, k) = unsafe {
            (
                ffi::handle(snap.cast_const(), "snapshot")?,
                ffi::bytes(key, klen, "key")?,
            )
        };
        let got = h.snap.lock().get(k)?;
        let (p, n) = match &got {
            Some(v) => (ffi::malloc_copy(v)?, v.len()),
            None => (std::ptr::null_mut(), 0),
        };
        // SAFETY: non-null (checked) and writable.
        unsafe {
            ffi::put_out(val, p, "val")?;
            ffi::put_out(vlen, n, "vlen")?;
        }
        Ok(if got.is_some() {
            FERRITE_OK
        } else {
            FERRITE_NOT_FOUND
        })
    })
}

/// Live keys in the snapshot's view, into `*n`. Thread-safe.
///
/// # Safety
/// `snap` is NULL or a live snapshot; `n` valid for writing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrite_snapshot_len(snap: *mut ferrite_snapshot, n: *mut u64) -> c_int {
    error::guard(|| {
        ffi::need(n, "n")?;
        // SAFETY: null or live snapshot, as the caller promises.
        let h = unsafe { ffi::handle(snap.cast_const(), "snapshot") }?;
        let len = h.snap.lock().len()?;
        // SAFETY: non-null (checked) and writable.
        unsafe { ffi::put_out(n, len, "n") }?;
        Ok(FERRITE_OK)
    })
}

/// As `ferrite_store_scan`, in the snapshot's view (the range is read when
/// the scan starts). The iterator does not borrow the snapshot: either may
/// be freed first. Thread-safe.
///
/// # Safety
/// `snap` is NULL or a live snapshot; `start`/`end` NULL or readable for
/// `slen`/`elen` bytes; `out` valid for writing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrite_snapshot_scan(
    snap: *mut ferrite_snapshot,
    start: *const c_void,
    slen: usize,
    end: *const c_void,
    elen: usize,
    flags: c_int,
    out: *mut *mut ferrite_iter,
) -> c_int {
    error::guard(|| {
        ffi::need(out, "out")?;
        // SAFETY: bounds readable, as the caller promises.
        let range = unsafe { key_range(start, slen, end, elen, flags) }?;
        // SAFETY: null or live snapshot, as the caller promises.
        let h = unsafe { ffi::handle(snap.cast_const(), "snapshot") }?;
        let pairs = h.snap.lock().range(&range)?;
        new_iter(IterSrc::Collected(pairs.into_iter()), out)
    })
}

/// Releases a snapshot (an InP store's writers go on). NULL is ignored.
/// No other thread may be using it.
///
/// # Safety
/// `snap` is NULL or a live snapshot, not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrite_snapshot_free(snap: *mut ferrite_snapshot) {
    let _ = error::guard(|| {
        // SAFETY: null or a live Box, as the caller promises.
        drop(unsafe { ffi::unbox(snap) });
        Ok(FERRITE_OK)
    });
}

/// The deep check of the pool file `path` (`ferrite pool check --deep` on
/// a store): the superblock, what recovery would do (a store not closed
/// cleanly), a walk of every node and value checksum, and the allocator's
/// blocks against the walk (leaks, double references). Reads the file,
/// never writes it; run it on a store no process has open for a settled
/// answer. Returns `FERRITE_OK` with `*findings` the number of findings
/// (0: clean) and, when `report` is not NULL, `*report` a `malloc`'d text
/// (one `component: kind: message` line per finding, then a summary line),
/// the caller's, released with `ferrite_free`. A file that is not a pool,
/// or a pool that holds no store, is a finding; only a file that cannot be
/// read is an error (`FERRITE_ERR_IO`). Thread-safe.
///
/// # Safety
/// `path` is a NUL-terminated string; `report` NULL or valid for writing;
/// `findings` valid for writing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrite_pool_check(
    path: *const c_char,
    report: *mut *mut c_char,
    findings: *mut usize,
) -> c_int {
    error::guard(|| {
        ffi::need(findings, "findings")?;
        // SAFETY: NUL-terminated or null, as the caller promises.
        let path = unsafe { ffi::opt_str(path, "path") }?.ok_or(CapiError::Null("path"))?;
        let c = check::check_pool(Path::new(path))?;
        if !report.is_null() {
            let text = ffi::malloc_str(&c.report())?;
            // SAFETY: non-null and writable, as the caller promises.
            unsafe { ffi::put_out(report, text, "report") }?;
        }
        // SAFETY: non-null (checked) and writable.
        unsafe { ffi::put_out(findings, c.findings.len(), "findings") }?;
        Ok(FERRITE_OK)
    })
}

/// Diagnostics: panics inside the library, to show that the panic is caught
/// at the boundary. Always returns `FERRITE_ERR_PANIC`, with the panic's
/// message for `ferrite_last_error`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn ferrite_selftest_panic() -> c_int {
    error::guard(|| panic!("ferrite_selftest_panic: a deliberate panic"))
}
