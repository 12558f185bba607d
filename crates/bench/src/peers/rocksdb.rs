//! RocksDB, the LSM peer of the `engine` suite [issue 11, item 5].
//!
//! Built only with the `rocksdb` feature: it links Debian's
//! `librocksdb-dev` (7.8) through a small hand-written binding of the
//! stable C API (`rocksdb/c.h`), so nothing is compiled from RocksDB's
//! sources and no bindgen runs at build time (`build.rs` adds
//! `-l rocksdb` when the feature is on).
//!
//! # How it is configured, and why that is the fair comparison
//!
//! - The database lives in a fresh temporary directory on `/dev/shm`
//!   (tmpfs: DRAM, beside Ferrite's pools and LMDB), removed when the
//!   [`RocksStore`] is dropped (after the database is closed).
//! - **One durable write per operation**: every `put`, `delete` and
//!   `batch` is one `rocksdb_write` with `sync = 1`, so its write-ahead-log
//!   record is written and `fdatasync`ed before the call returns — the
//!   WAL synced per write, as on a disk. On tmpfs the sync is a cheap
//!   system call; what remains is RocksDB's own work (WAL record, memtable
//!   insert, and in the background memtable flushes and compactions).
//! - Compression is off: Ferrite and LMDB store the bytes as they are, and
//!   on a 2-core machine the background compressor would compete with the
//!   measured threads. Everything else is RocksDB's defaults (64 MiB
//!   memtable, levelled compaction, block cache of 8 MiB).
//! - `delete` must say whether the key was there ([`Kv::delete`]), which
//!   RocksDB's delete does not: it reads the key first and writes the
//!   (synced) tombstone only when found, as LMDB's adapter commits only
//!   when found. The read and the delete are not one atomic step; the
//!   suite's workloads never delete the same key from two threads.
//! - Reads copy the value out (`rocksdb_get_pinned`, no allocation inside
//!   RocksDB), scans use one iterator (an implicit snapshot) per call.
//! - The untimed load uses [`RocksStore::bulk`]: the same writes without
//!   the per-write sync, the WAL synced once by [`RocksKv::finish`].
//!
//! # Safety
//!
//! Every `unsafe` block below calls the C API; each states why its
//! pointers are valid. The handles ([`RocksDb`]) own their C objects and
//! free them exactly once in `Drop`. RocksDB documents `rocksdb_t` as safe
//! to use from many threads at once, and the option objects are only read
//! after they are built, which is what makes [`RocksDb`] `Send + Sync`.
#![allow(unsafe_code)]

use crate::peers::lmdb::SHM;
use ferrite_workload::{BatchOp, Kv};
use std::ffi::{CStr, CString, c_char, c_uchar};
use std::path::{Path, PathBuf};

/// The C API's opaque types and the functions used (from `rocksdb/c.h`
/// of RocksDB 7.8; these signatures are stable across releases).
mod ffi {
    #![allow(non_camel_case_types)]
    use std::ffi::{c_char, c_int, c_uchar, c_void};

    #[repr(C)]
    pub struct rocksdb_t {
        _p: [u8; 0],
    }
    #[repr(C)]
    pub struct rocksdb_options_t {
        _p: [u8; 0],
    }
    #[repr(C)]
    pub struct rocksdb_writeoptions_t {
        _p: [u8; 0],
    }
    #[repr(C)]
    pub struct rocksdb_readoptions_t {
        _p: [u8; 0],
    }
    #[repr(C)]
    pub struct rocksdb_writebatch_t {
        _p: [u8; 0],
    }
    #[repr(C)]
    pub struct rocksdb_iterator_t {
        _p: [u8; 0],
    }
    #[repr(C)]
    pub struct rocksdb_pinnableslice_t {
        _p: [u8; 0],
    }

    /// `rocksdb_no_compression` of c.h's compression enum.
    pub const NO_COMPRESSION: c_int = 0;

    unsafe extern "C" {
        pub fn rocksdb_options_create() -> *mut rocksdb_options_t;
        pub fn rocksdb_options_destroy(o: *mut rocksdb_options_t);
        pub fn rocksdb_options_set_create_if_missing(o: *mut rocksdb_options_t, v: c_uchar);
        pub fn rocksdb_options_set_error_if_exists(o: *mut rocksdb_options_t, v: c_uchar);
        pub fn rocksdb_options_set_compression(o: *mut rocksdb_options_t, v: c_int);
        pub fn rocksdb_open(
            o: *const rocksdb_options_t,
            name: *const c_char,
            errptr: *mut *mut c_char,
        ) -> *mut rocksdb_t;
        pub fn rocksdb_close(db: *mut rocksdb_t);

        pub fn rocksdb_writeoptions_create() -> *mut rocksdb_writeoptions_t;
        pub fn rocksdb_writeoptions_destroy(o: *mut rocksdb_writeoptions_t);
        pub fn rocksdb_writeoptions_set_sync(o: *mut rocksdb_writeoptions_t, v: c_uchar);
        pub fn rocksdb_readoptions_create() -> *mut rocksdb_readoptions_t;
        pub fn rocksdb_readoptions_destroy(o: *mut rocksdb_readoptions_t);

        pub fn rocksdb_put(
            db: *mut rocksdb_t,
            o: *const rocksdb_writeoptions_t,
            key: *const c_char,
            klen: usize,
            val: *const c_char,
            vlen: usize,
            errptr: *mut *mut c_char,
        );
        pub fn rocksdb_delete(
            db: *mut rocksdb_t,
            o: *const rocksdb_writeoptions_t,
            key: *const c_char,
            klen: usize,
            errptr: *mut *mut c_char,
        );
        pub fn rocksdb_write(
            db: *mut rocksdb_t,
            o: *const rocksdb_writeoptions_t,
            batch: *mut rocksdb_writebatch_t,
            errptr: *mut *mut c_char,
        );
        pub fn rocksdb_get_pinned(
            db: *mut rocksdb_t,
            o: *const rocksdb_readoptions_t,
            key: *const c_char,
            klen: usize,
            errptr: *mut *mut c_char,
        ) -> *mut rocksdb_pinnableslice_t;
        pub fn rocksdb_pinnableslice_value(
            s: *const rocksdb_pinnableslice_t,
            vlen: *mut usize,
        ) -> *const c_char;
        pub fn rocksdb_pinnableslice_destroy(s: *mut rocksdb_pinnableslice_t);
        pub fn rocksdb_flush_wal(db: *mut rocksdb_t, sync: c_uchar, errptr: *mut *mut c_char);

        pub fn rocksdb_writebatch_create() -> *mut rocksdb_writebatch_t;
        pub fn rocksdb_writebatch_destroy(b: *mut rocksdb_writebatch_t);
        pub fn rocksdb_writebatch_put(
            b: *mut rocksdb_writebatch_t,
            key: *const c_char,
            klen: usize,
            val: *const c_char,
            vlen: usize,
        );
        pub fn rocksdb_writebatch_delete(
            b: *mut rocksdb_writebatch_t,
            key: *const c_char,
            klen: usize,
        );

        pub fn rocksdb_create_iterator(
            db: *mut rocksdb_t,
            o: *const rocksdb_readoptions_t,
        ) -> *mut rocksdb_iterator_t;
        pub fn rocksdb_iter_destroy(it: *mut rocksdb_iterator_t);
        pub fn rocksdb_iter_seek(it: *mut rocksdb_iterator_t, k: *const c_char, klen: usize);
        pub fn rocksdb_iter_seek_to_first(it: *mut rocksdb_iterator_t);
        pub fn rocksdb_iter_valid(it: *const rocksdb_iterator_t) -> c_uchar;
        pub fn rocksdb_iter_next(it: *mut rocksdb_iterator_t);
        pub fn rocksdb_iter_key(it: *const rocksdb_iterator_t, klen: *mut usize) -> *const c_char;
        pub fn rocksdb_iter_value(it: *const rocksdb_iterator_t, vlen: *mut usize)
        -> *const c_char;
        pub fn rocksdb_iter_get_error(it: *const rocksdb_iterator_t, errptr: *mut *mut c_char);

        pub fn rocksdb_free(p: *mut c_void);
    }
}

/// An error RocksDB reported (its message), or a path it cannot take.
#[derive(Debug, thiserror::Error)]
pub enum RocksError {
    /// RocksDB's own error string for the named call.
    #[error("rocksdb {call}: {msg}")]
    Rocks { call: &'static str, msg: String },
    /// The database path holds a NUL byte (C strings cannot carry it).
    #[error("rocksdb path {0:?} holds a NUL byte")]
    Path(PathBuf),
    /// A C constructor returned NULL (out of memory).
    #[error("rocksdb {0}: returned NULL")]
    Null(&'static str),
    /// Creating or copying the database directory.
    #[error("rocksdb directory {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Runs `f` with an error slot and turns a set slot into [`RocksError`],
/// freeing RocksDB's string.
fn call<R>(name: &'static str, f: impl FnOnce(*mut *mut c_char) -> R) -> Result<R, RocksError> {
    let mut err: *mut c_char = std::ptr::null_mut();
    let r = f(&mut err);
    if err.is_null() {
        return Ok(r);
    }
    // SAFETY: a non-NULL error slot holds a NUL-terminated string that
    // RocksDB allocated with malloc for the caller; it is read once here
    // and released with `rocksdb_free`, its matching deallocator.
    let msg = unsafe {
        let m = CStr::from_ptr(err).to_string_lossy().into_owned();
        ffi::rocksdb_free(err.cast());
        m
    };
    Err(RocksError::Rocks { call: name, msg })
}

fn cptr(b: &[u8]) -> *const c_char {
    b.as_ptr().cast()
}

/// An open RocksDB database and the option objects its calls use.
/// Closed (and the objects freed) on drop.
pub struct RocksDb {
    db: *mut ffi::rocksdb_t,
    options: *mut ffi::rocksdb_options_t,
    /// `sync = 1`: the WAL is `fdatasync`ed before a write returns.
    sync: *mut ffi::rocksdb_writeoptions_t,
    /// `sync = 0`: for the untimed load only.
    nosync: *mut ffi::rocksdb_writeoptions_t,
    read: *mut ffi::rocksdb_readoptions_t,
    path: PathBuf,
}

// SAFETY: RocksDB documents `rocksdb_t` (a `DB*`) as safe for concurrent
// use from many threads without external synchronisation; the option
// objects are written only in `RocksDb::open`, before the value exists,
// and only read by RocksDB afterwards. No method hands out a pointer.
unsafe impl Send for RocksDb {}
// SAFETY: as for `Send`: every method takes `&self` and only calls
// thread-safe `rocksdb_t` operations with read-only option objects.
unsafe impl Sync for RocksDb {}

impl std::fmt::Debug for RocksDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksDb").field("path", &self.path).finish()
    }
}

impl Drop for RocksDb {
    fn drop(&mut self) {
        // SAFETY: each pointer was returned non-NULL by its constructor in
        // `open` and is freed exactly once, here; the database is closed
        // first (it waits for its background work), then the option
        // objects nothing refers to any more.
        unsafe {
            ffi::rocksdb_close(self.db);
            ffi::rocksdb_options_destroy(self.options);
            ffi::rocksdb_writeoptions_destroy(self.sync);
            ffi::rocksdb_writeoptions_destroy(self.nosync);
            ffi::rocksdb_readoptions_destroy(self.read);
        }
    }
}

/// Frees the option objects made so far if `open` fails half way.
struct Partial {
    options: *mut ffi::rocksdb_options_t,
    sync: *mut ffi::rocksdb_writeoptions_t,
    nosync: *mut ffi::rocksdb_writeoptions_t,
    read: *mut ffi::rocksdb_readoptions_t,
}

impl Drop for Partial {
    fn drop(&mut self) {
        // SAFETY: each pointer is NULL or a live object of its type made in
        // `RocksDb::open` and not yet handed to a `RocksDb` (which nulls
        // them here by taking them); the destroy functions are called once.
        unsafe {
            if !self.options.is_null() {
                ffi::rocksdb_options_destroy(self.options);
            }
            if !self.sync.is_null() {
                ffi::rocksdb_writeoptions_destroy(self.sync);
            }
            if !self.nosync.is_null() {
                ffi::rocksdb_writeoptions_destroy(self.nosync);
            }
            if !self.read.is_null() {
                ffi::rocksdb_readoptions_destroy(self.read);
            }
        }
    }
}

impl RocksDb {
    /// Opens the database in `dir`: a new one when `create` (refusing an
    /// existing one), else the existing one — which replays its WAL, what
    /// an application does after a crash.
    pub fn open(dir: &Path, create: bool) -> Result<RocksDb, RocksError> {
        let name = CString::new(dir.as_os_str().as_encoded_bytes())
            .map_err(|_| RocksError::Path(dir.to_path_buf()))?;
        let mut p = Partial {
            options: std::ptr::null_mut(),
            sync: std::ptr::null_mut(),
            nosync: std::ptr::null_mut(),
            read: std::ptr::null_mut(),
        };
        // SAFETY: the constructors take no arguments; each result is
        // checked for NULL before use and owned by `p` until handed over.
        unsafe {
            p.options = ffi::rocksdb_options_create();
            p.sync = ffi::rocksdb_writeoptions_create();
            p.nosync = ffi::rocksdb_writeoptions_create();
            p.read = ffi::rocksdb_readoptions_create();
        }
        if p.options.is_null() || p.sync.is_null() || p.nosync.is_null() || p.read.is_null() {
            return Err(RocksError::Null("options"));
        }
        let flag = c_uchar::from(create);
        // SAFETY: the option objects are live (checked above) and owned
        // here; the setters only store the values.
        unsafe {
            ffi::rocksdb_options_set_create_if_missing(p.options, flag);
            ffi::rocksdb_options_set_error_if_exists(p.options, flag);
            ffi::rocksdb_options_set_compression(p.options, ffi::NO_COMPRESSION);
            ffi::rocksdb_writeoptions_set_sync(p.sync, 1);
            ffi::rocksdb_writeoptions_set_sync(p.nosync, 0);
        }
        let db = call("open", |err| {
            // SAFETY: `p.options` is live and `name` is a NUL-terminated
            // string alive for the call; RocksDB copies both.
            unsafe { ffi::rocksdb_open(p.options, name.as_ptr(), err) }
        })?;
        if db.is_null() {
            return Err(RocksError::Null("open"));
        }
        let out = RocksDb {
            db,
            options: p.options,
            sync: p.sync,
            nosync: p.nosync,
            read: p.read,
            path: dir.to_path_buf(),
        };
        // Ownership moved to `out`: `p` must not free them.
        p.options = std::ptr::null_mut();
        p.sync = std::ptr::null_mut();
        p.nosync = std::ptr::null_mut();
        p.read = std::ptr::null_mut();
        Ok(out)
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A handle whose every write is durable (WAL synced) on return.
    pub fn kv(&self) -> RocksKv<'_> {
        RocksKv {
            db: self,
            synced: true,
        }
    }

    /// A handle whose writes are not synced one by one, for untimed
    /// loading; [`RocksKv::finish`] makes them durable.
    pub fn bulk(&self) -> RocksKv<'_> {
        RocksKv {
            db: self,
            synced: false,
        }
    }

    /// Live keys, counted with one iterator (a full scan).
    pub fn count_keys(&self) -> Result<u64, RocksError> {
        let it = Iter::new(self)?;
        // SAFETY: `it.0` is a live iterator of this open database.
        unsafe { ffi::rocksdb_iter_seek_to_first(it.0) };
        let mut n = 0u64;
        while it.valid() {
            n += 1;
            // SAFETY: as above; the iterator is valid (checked).
            unsafe { ffi::rocksdb_iter_next(it.0) };
        }
        it.status()?;
        Ok(n)
    }
}

/// An iterator, destroyed on drop (before its database: it borrows it).
struct Iter<'a>(
    *mut ffi::rocksdb_iterator_t,
    std::marker::PhantomData<&'a RocksDb>,
);

impl<'a> Iter<'a> {
    fn new(db: &'a RocksDb) -> Result<Iter<'a>, RocksError> {
        // SAFETY: `db.db` and `db.read` are live for `'a`, which the
        // returned value cannot outlive.
        let it = unsafe { ffi::rocksdb_create_iterator(db.db, db.read) };
        if it.is_null() {
            return Err(RocksError::Null("create_iterator"));
        }
        Ok(Iter(it, std::marker::PhantomData))
    }

    fn valid(&self) -> bool {
        // SAFETY: `self.0` is a live iterator (see `new`).
        unsafe { ffi::rocksdb_iter_valid(self.0) != 0 }
    }

    /// The current pair; only while [`valid`](Self::valid). The slices
    /// point into the iterator and are used before it moves.
    fn pair(&self) -> (&[u8], &[u8]) {
        let (mut kl, mut vl) = (0usize, 0usize);
        // SAFETY: the iterator is live and positioned on an entry (the
        // caller checked `valid`); RocksDB returns pointers to `kl` / `vl`
        // bytes it keeps until the iterator moves or is destroyed, and the
        // returned borrows of `self` end before `next` (which needs the
        // caller to stop using them) — callers use them at once.
        unsafe {
            let k = ffi::rocksdb_iter_key(self.0, &mut kl);
            let v = ffi::rocksdb_iter_value(self.0, &mut vl);
            (slice(k, kl), slice(v, vl))
        }
    }

    fn status(&self) -> Result<(), RocksError> {
        call("iterator", |err| {
            // SAFETY: `self.0` is a live iterator; `err` is the error slot.
            unsafe { ffi::rocksdb_iter_get_error(self.0, err) }
        })
    }
}

impl Drop for Iter<'_> {
    fn drop(&mut self) {
        // SAFETY: `self.0` was returned non-NULL by
        // `rocksdb_create_iterator` and is destroyed once, here, while its
        // database is still open (the borrow).
        unsafe { ffi::rocksdb_iter_destroy(self.0) }
    }
}

/// `len` bytes at `p` (NULL allowed when `len` is 0).
///
/// # Safety
/// `p` must point to `len` readable bytes that stay unchanged for `'a`.
unsafe fn slice<'a>(p: *const c_char, len: usize) -> &'a [u8] {
    if len == 0 || p.is_null() {
        &[]
    } else {
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts(p.cast(), len) }
    }
}

/// A RocksDB database in a fresh temporary directory (on `/dev/shm` by
/// default), removed on drop after the database is closed. Share it
/// (`&RocksStore`) between threads; each drives it with its own [`RocksKv`].
#[derive(Debug)]
pub struct RocksStore {
    // Field order matters: the database closes before the directory goes.
    db: RocksDb,
    dir: tempfile::TempDir,
}

impl RocksStore {
    /// A fresh database under `/dev/shm`.
    pub fn create() -> Result<RocksStore, RocksError> {
        Self::create_in(Path::new(SHM))
    }

    /// As [`create`](Self::create), in a temporary directory under `parent`.
    pub fn create_in(parent: &Path) -> Result<RocksStore, RocksError> {
        let dir = tempfile::Builder::new()
            .prefix("ferrite-bench-rocksdb-")
            .tempdir_in(parent)
            .map_err(|e| RocksError::Io {
                path: parent.to_path_buf(),
                source: e,
            })?;
        let db = RocksDb::open(&dir.path().join("db"), true)?;
        Ok(RocksStore { db, dir })
    }

    /// The open database.
    pub fn db(&self) -> &RocksDb {
        &self.db
    }

    /// A durable handle for the calling thread (see [`RocksDb::kv`]).
    pub fn kv(&self) -> RocksKv<'_> {
        self.db.kv()
    }

    /// A loading handle (see [`RocksDb::bulk`]).
    pub fn bulk(&self) -> RocksKv<'_> {
        self.db.bulk()
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        self.db.path()
    }

    /// Closes the database and hands back its temporary directory (the
    /// database is in its `db` subdirectory), for reopening copies of it.
    pub fn close(self) -> tempfile::TempDir {
        let RocksStore { db, dir } = self;
        drop(db);
        dir
    }
}

/// Copies the flat directory `from` (a RocksDB database: files only)
/// into `to`, created.
pub fn copy_dir(from: &Path, to: &Path) -> Result<(), RocksError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RocksError::Io { path, source }
    };
    std::fs::create_dir_all(to).map_err(io(to))?;
    for e in std::fs::read_dir(from).map_err(io(from))? {
        let e = e.map_err(io(from))?;
        if e.file_type().map_err(io(&e.path()))?.is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).map_err(io(&e.path()))?;
        }
    }
    Ok(())
}

/// One thread's [`Kv`] on a [`RocksDb`]: with [`RocksDb::kv`] every write
/// is one `rocksdb_write` with the WAL synced (see the module
/// documentation); with [`RocksDb::bulk`] unsynced.
#[derive(Debug)]
pub struct RocksKv<'a> {
    db: &'a RocksDb,
    synced: bool,
}

impl RocksKv<'_> {
    fn wopts(&self) -> *const ffi::rocksdb_writeoptions_t {
        if self.synced {
            self.db.sync
        } else {
            self.db.nosync
        }
    }

    /// Makes every write so far durable: syncs the WAL (what a loading
    /// handle's unsynced writes need; a no-op in effect for synced ones).
    pub fn finish(&self) -> Result<(), RocksError> {
        call("flush_wal", |err| {
            // SAFETY: the database is open for the borrow's lifetime.
            unsafe { ffi::rocksdb_flush_wal(self.db.db, 1, err) }
        })
    }
}

/// A write batch, destroyed on drop.
struct Batch(*mut ffi::rocksdb_writebatch_t);

impl Drop for Batch {
    fn drop(&mut self) {
        // SAFETY: made non-NULL by `rocksdb_writebatch_create`, destroyed
        // once, here.
        unsafe { ffi::rocksdb_writebatch_destroy(self.0) }
    }
}

impl Kv for RocksKv<'_> {
    type Error = RocksError;

    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, RocksError> {
        out.clear();
        let s = call("get", |err| {
            // SAFETY: the database and read options are live for the
            // borrow; `key` is `key.len()` readable bytes for the call.
            unsafe { ffi::rocksdb_get_pinned(self.db.db, self.db.read, cptr(key), key.len(), err) }
        })?;
        if s.is_null() {
            return Ok(false);
        }
        // SAFETY: `s` is a live pinnable slice (non-NULL, just returned);
        // its value is `len` bytes kept until it is destroyed, which
        // happens after the copy, exactly once.
        unsafe {
            let mut len = 0usize;
            let v = ffi::rocksdb_pinnableslice_value(s, &mut len);
            out.extend_from_slice(slice(v, len));
            ffi::rocksdb_pinnableslice_destroy(s);
        }
        Ok(true)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), RocksError> {
        call("put", |err| {
            // SAFETY: the database and write options are live for the
            // borrow; `key` and `value` are readable for their lengths
            // during the call, and RocksDB copies them.
            unsafe {
                ffi::rocksdb_put(
                    self.db.db,
                    self.wopts(),
                    cptr(key),
                    key.len(),
                    cptr(value),
                    value.len(),
                    err,
                )
            }
        })
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, RocksError> {
        // RocksDB's delete does not report whether the key existed, which
        // the Kv contract needs: look first (module documentation).
        let mut scratch = Vec::new();
        if !self.get(key, &mut scratch)? {
            return Ok(false);
        }
        call("delete", |err| {
            // SAFETY: as in `put`.
            unsafe { ffi::rocksdb_delete(self.db.db, self.wopts(), cptr(key), key.len(), err) }
        })?;
        Ok(true)
    }

    fn scan(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, RocksError> {
        if limit == 0 {
            return Ok(0);
        }
        let it = Iter::new(self.db)?;
        // SAFETY: `it.0` is live; `from` is readable for its length during
        // the call (RocksDB copies the target).
        unsafe { ffi::rocksdb_iter_seek(it.0, cptr(from), from.len()) };
        let mut n = 0usize;
        while n < limit && it.valid() {
            let (k, v) = it.pair();
            f(k, v);
            n += 1;
            // SAFETY: `it.0` is live and valid; the pair's borrows ended
            // with the call above.
            unsafe { ffi::rocksdb_iter_next(it.0) };
        }
        it.status()?;
        Ok(n)
    }

    fn batch(&mut self, ops: &[BatchOp<'_>]) -> Result<(), RocksError> {
        // SAFETY: no arguments; NULL checked below.
        let b = Batch(unsafe { ffi::rocksdb_writebatch_create() });
        if b.0.is_null() {
            return Err(RocksError::Null("writebatch_create"));
        }
        for op in ops {
            // SAFETY: `b.0` is a live batch; keys and values are readable
            // for their lengths during the call and copied into the batch.
            unsafe {
                match *op {
                    BatchOp::Put { key, value } => ffi::rocksdb_writebatch_put(
                        b.0,
                        cptr(key),
                        key.len(),
                        cptr(value),
                        value.len(),
                    ),
                    BatchOp::Delete { key } => {
                        ffi::rocksdb_writebatch_delete(b.0, cptr(key), key.len())
                    }
                }
            }
        }
        // One write of the whole batch: RocksDB applies a batch atomically
        // (one WAL record), synced like a single put.
        call("write", |err| {
            // SAFETY: the database, write options and batch are live.
            unsafe { ffi::rocksdb_write(self.db.db, self.wopts(), b.0, err) }
        })
    }
}
