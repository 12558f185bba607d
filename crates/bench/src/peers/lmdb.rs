//! LMDB, the real peer of the `engine` suite [issue 11, item 5].
//!
//! LMDB is the memory-mapped copy-on-write B+tree people embed for this
//! job. It is reached through the `heed` crate, whose `lmdb-master-sys`
//! builds LMDB's C sources itself, so no system package is needed.
//!
//! # How it is configured, and why that is the fair comparison
//!
//! - The environment lives in a fresh temporary directory on `/dev/shm`
//!   (tmpfs: DRAM, beside Ferrite's pools), removed when the
//!   [`LmdbStore`] is dropped.
//! - **One durable commit per operation**: every `put`, `delete` and
//!   `batch` is its own write transaction, committed with LMDB's default
//!   flags — no `MDB_NOSYNC`, no `MDB_NOMETASYNC`, no `MDB_WRITEMAP` — so
//!   each commit writes its dirty pages, `fdatasync`s, writes the meta page
//!   and `fdatasync`s again, exactly as on a disk. On tmpfs the syncs are
//!   cheap system calls (tmpfs has nothing to write back), so what remains
//!   is LMDB's own work: copying the path of pages, the free-page
//!   bookkeeping and the system calls. That is the fairest stand-in for
//!   persistent memory we have: LMDB has no persistent-memory mode, and on
//!   real PM its syncs would cost at least what Ferrite's flushes do.
//!   The one exception is the nosync phase of the redb workload
//!   ([`LmdbStore::set_nosync`]: `MDB_NOSYNC`, as redb's benchmark runs
//!   LMDB there), which also uses the explicit transactions
//!   ([`LmdbStore::write_txn`], [`LmdbStore::read_txn`]: cursor deletes for
//!   pop, retain and extract-if, `MDB_APPEND` for sorted keys).
//! - Reads open a read-only transaction per `get` / `scan` (LMDB reuses
//!   the thread's reader slot, so this is cheap) and copy the value out,
//!   as Ferrite's `get_into` does.
//! - The map size is sized by the caller to the dataset (LMDB cannot grow
//!   a map another thread is using); [`LmdbStore::create`] takes the most
//!   bytes of keys and values the run will hold and maps twice that plus
//!   64 MiB, room for the copy-on-write pages of in-flight commits and
//!   LMDB's free lists.
//!
//! Limits: LMDB's default build refuses keys over 511 bytes
//! (`MDB_MAXKEYSIZE`); the workloads use short keys.

use crate::error::BenchError;
use ferrite_workload::{BatchOp, Kv};
use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions, FlagSetMode, PutFlags};
use std::ops::Bound;
use std::path::Path;

/// Where LMDB's environment (and Ferrite's pool files) go: tmpfs.
pub const SHM: &str = "/dev/shm";

/// An LMDB environment with one unnamed database, in a temporary
/// directory that is removed on drop. Share it (`&LmdbStore`) between
/// threads; each thread drives it through its own [`LmdbKv`].
pub struct LmdbStore {
    // Field order matters: the environment closes before the directory goes.
    env: Env,
    db: Database<Bytes, Bytes>,
    map_bytes: usize,
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for LmdbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LmdbStore")
            .field("dir", &self.dir.path())
            .field("map_bytes", &self.map_bytes)
            .finish()
    }
}

fn lmdb_err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Unsupported(format!("lmdb {what}: {e}"))
}

/// The map size for a dataset of `data_bytes` bytes of keys and values.
pub fn map_bytes_for(data_bytes: u64) -> usize {
    let page = 4096u64;
    let want = data_bytes.saturating_mul(2).saturating_add(64 << 20);
    usize::try_from(want.div_ceil(page) * page).unwrap_or(usize::MAX / 2)
}

impl LmdbStore {
    /// A fresh environment under `/dev/shm` for datasets of up to
    /// `data_bytes` bytes of keys and values, for up to `threads`
    /// concurrent users.
    pub fn create(data_bytes: u64, threads: usize) -> Result<LmdbStore, BenchError> {
        Self::create_in(Path::new(SHM), data_bytes, threads)
    }

    /// As [`create`](Self::create), in a temporary directory under `parent`.
    pub fn create_in(
        parent: &Path,
        data_bytes: u64,
        threads: usize,
    ) -> Result<LmdbStore, BenchError> {
        Self::create_mapped_in(parent, map_bytes_for(data_bytes), threads)
    }

    /// A fresh environment under `/dev/shm` mapping `map_bytes` bytes
    /// (rounded up to whole pages), for up to `threads` concurrent users.
    pub fn create_mapped(map_bytes: u64, threads: usize) -> Result<LmdbStore, BenchError> {
        let page = 4096u64;
        let map = usize::try_from(map_bytes.div_ceil(page) * page).unwrap_or(usize::MAX / 2);
        Self::create_mapped_in(Path::new(SHM), map, threads)
    }

    fn create_mapped_in(
        parent: &Path,
        map_bytes: usize,
        threads: usize,
    ) -> Result<LmdbStore, BenchError> {
        let dir = tempfile::Builder::new()
            .prefix("ferrite-bench-lmdb-")
            .tempdir_in(parent)
            .map_err(|e| BenchError::Io {
                path: parent.to_path_buf(),
                source: e,
            })?;
        let mut opts = EnvOpenOptions::new();
        opts.map_size(map_bytes)
            .max_readers((threads as u32).saturating_add(8).max(126))
            .max_dbs(1);
        // SAFETY: heed marks opening unsafe because LMDB's map must not be
        // modified by anything else while open and the same file must not
        // be opened twice in one process: the directory is fresh, private
        // to this value and removed only after the environment is closed
        // (field order), and nothing else maps it.
        #[allow(unsafe_code)]
        let env = unsafe { opts.open(dir.path()) }.map_err(|e| lmdb_err("open", e))?;
        let mut wtxn = env.write_txn().map_err(|e| lmdb_err("txn", e))?;
        let db: Database<Bytes, Bytes> = env
            .create_database(&mut wtxn, None)
            .map_err(|e| lmdb_err("create database", e))?;
        wtxn.commit().map_err(|e| lmdb_err("commit", e))?;
        Ok(LmdbStore {
            env,
            db,
            map_bytes,
            dir,
        })
    }

    /// A handle for the calling thread.
    pub fn kv(&self) -> LmdbKv<'_> {
        LmdbKv { store: self }
    }

    /// Bytes mapped.
    pub fn map_bytes(&self) -> usize {
        self.map_bytes
    }

    /// The directory holding `data.mdb` and `lock.mdb`.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A loading handle: writes go into one write transaction committed
    /// every `per_txn` writes and by [`LmdbBulk::finish`] (loading is
    /// untimed, so it is not held to one commit per operation).
    pub fn bulk(&self, per_txn: usize) -> LmdbBulk<'_> {
        LmdbBulk {
            store: self,
            txn: None,
            pending: 0,
            per_txn: per_txn.max(1),
        }
    }

    /// Live keys.
    pub fn len(&self) -> Result<u64, heed::Error> {
        let rtxn = self.env.read_txn()?;
        self.db.len(&rtxn)
    }

    pub fn is_empty(&self) -> Result<bool, heed::Error> {
        Ok(self.len()? == 0)
    }
}

/// One thread's [`Kv`] handle on an [`LmdbStore`]: every write is one
/// durable LMDB commit (see the module documentation).
#[derive(Debug)]
pub struct LmdbKv<'a> {
    store: &'a LmdbStore,
}

impl Kv for LmdbKv<'_> {
    type Error = heed::Error;

    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, heed::Error> {
        out.clear();
        let rtxn = self.store.env.read_txn()?;
        match self.store.db.get(&rtxn, key)? {
            Some(v) => {
                out.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), heed::Error> {
        let mut wtxn = self.store.env.write_txn()?;
        self.store.db.put(&mut wtxn, key, value)?;
        wtxn.commit()
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, heed::Error> {
        let mut wtxn = self.store.env.write_txn()?;
        let found = self.store.db.delete(&mut wtxn, key)?;
        if found {
            wtxn.commit()?;
        } else {
            // Nothing changed: nothing to make durable.
            wtxn.abort();
        }
        Ok(found)
    }

    fn scan(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, heed::Error> {
        if limit == 0 {
            return Ok(0);
        }
        let rtxn = self.store.env.read_txn()?;
        let range: (Bound<&[u8]>, Bound<&[u8]>) = (Bound::Included(from), Bound::Unbounded);
        let mut n = 0usize;
        for item in self.store.db.range(&rtxn, &range)? {
            let (k, v) = item?;
            f(k, v);
            n += 1;
            if n == limit {
                break;
            }
        }
        Ok(n)
    }

    fn batch(&mut self, ops: &[BatchOp<'_>]) -> Result<(), heed::Error> {
        let mut wtxn = self.store.env.write_txn()?;
        for op in ops {
            match *op {
                BatchOp::Put { key, value } => self.store.db.put(&mut wtxn, key, value)?,
                BatchOp::Delete { key } => {
                    self.store.db.delete(&mut wtxn, key)?;
                }
            }
        }
        wtxn.commit()
    }
}

/// A [`Kv`] for loading an [`LmdbStore`]: its writes share write
/// transactions of up to `per_txn` operations; reads see them. Call
/// [`finish`](Self::finish) to commit the last one (dropping it aborts).
pub struct LmdbBulk<'a> {
    store: &'a LmdbStore,
    txn: Option<heed::RwTxn<'a>>,
    pending: usize,
    per_txn: usize,
}

impl<'a> LmdbBulk<'a> {
    fn txn(&mut self) -> Result<&mut heed::RwTxn<'a>, heed::Error> {
        if self.txn.is_none() {
            self.txn = Some(self.store.env.write_txn()?);
        }
        Ok(self.txn.as_mut().expect("just opened"))
    }

    /// Counts one write; commits when the transaction is full.
    fn wrote(&mut self) -> Result<(), heed::Error> {
        self.pending += 1;
        if self.pending >= self.per_txn {
            self.finish_txn()?;
        }
        Ok(())
    }

    fn finish_txn(&mut self) -> Result<(), heed::Error> {
        self.pending = 0;
        match self.txn.take() {
            Some(t) => t.commit(),
            None => Ok(()),
        }
    }

    /// Commits what is pending.
    pub fn finish(mut self) -> Result<(), heed::Error> {
        self.finish_txn()
    }
}

impl std::fmt::Debug for LmdbBulk<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LmdbBulk")
            .field("pending", &self.pending)
            .finish()
    }
}

impl Kv for LmdbBulk<'_> {
    type Error = heed::Error;

    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, heed::Error> {
        out.clear();
        let db = self.store.db;
        let txn = self.txn()?;
        match db.get(txn, key)? {
            Some(v) => {
                out.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), heed::Error> {
        let db = self.store.db;
        db.put(self.txn()?, key, value)?;
        self.wrote()
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, heed::Error> {
        let db = self.store.db;
        let found = db.delete(self.txn()?, key)?;
        self.wrote()?;
        Ok(found)
    }

    fn scan(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, heed::Error> {
        if limit == 0 {
            return Ok(0);
        }
        let db = self.store.db;
        let txn = self.txn()?;
        let range: (Bound<&[u8]>, Bound<&[u8]>) = (Bound::Included(from), Bound::Unbounded);
        let mut n = 0usize;
        for item in db.range(txn, &range)? {
            let (k, v) = item?;
            f(k, v);
            n += 1;
            if n == limit {
                break;
            }
        }
        Ok(n)
    }

    fn batch(&mut self, ops: &[BatchOp<'_>]) -> Result<(), heed::Error> {
        // The whole batch goes into the current transaction, which commits
        // only between batches: each batch stays all or nothing.
        let db = self.store.db;
        let txn = self.txn()?;
        for op in ops {
            match *op {
                BatchOp::Put { key, value } => db.put(txn, key, value)?,
                BatchOp::Delete { key } => {
                    db.delete(txn, key)?;
                }
            }
        }
        self.pending += ops.len().max(1) - 1;
        self.wrote()
    }
}

/// Opens the existing environment in `dir` (map of `map_bytes`), opens
/// its database in a first read transaction and returns the entries it
/// holds: what an application does to reopen LMDB after a crash. The
/// environment is closed again on return.
pub fn open_existing(dir: &Path, map_bytes: usize) -> Result<u64, heed::Error> {
    let mut opts = EnvOpenOptions::new();
    opts.map_size(map_bytes).max_dbs(1);
    // SAFETY: as in `LmdbStore::create_in`: `dir` is a private copy that
    // nothing else in this process has open or maps.
    #[allow(unsafe_code)]
    let env = unsafe { opts.open(dir) }?;
    let rtxn = env.read_txn()?;
    let db: Option<Database<Bytes, Bytes>> = env.open_database(&rtxn, None)?;
    let n = match db {
        Some(db) => db.len(&rtxn)?,
        None => 0,
    };
    drop(rtxn);
    // Close now, so the next open of the same path is a fresh one.
    env.prepare_for_closing().wait();
    Ok(n)
}

// ---------------------------------------------------------------------
// Transactions for the redb comparison workload
// ---------------------------------------------------------------------

impl LmdbStore {
    /// Turns `MDB_NOSYNC` on or off (the redb workload's nosync phase).
    /// With it on, a commit writes its pages but does not `fdatasync`
    /// them: what it wrote survives a crash of the process, not of the
    /// machine, until a later durable commit (or `mdb_env_sync`) syncs it.
    pub fn set_nosync(&mut self, on: bool) -> Result<(), heed::Error> {
        let mode = if on {
            FlagSetMode::Enable
        } else {
            FlagSetMode::Disable
        };
        // SAFETY: heed marks `set_flags` unsafe for two reasons. (1) LMDB
        // requires that no two threads call `mdb_env_set_flags` at once:
        // `&mut self` is the only handle on this environment (it is private
        // to the store and its directory), so no other call can run
        // concurrently. (2) `NO_SYNC` trades durability against a machine
        // crash for speed: that is what the nosync phase measures, and it
        // is switched off again before any durable commit is timed; it has
        // no effect on memory safety.
        #[allow(unsafe_code)]
        unsafe {
            self.env.set_flags(EnvFlags::NO_SYNC, mode)
        }
    }

    /// Opens a write transaction (one durable commit, unless `MDB_NOSYNC`
    /// is on).
    pub fn write_txn(&self) -> Result<LmdbWrite<'_>, heed::Error> {
        Ok(LmdbWrite {
            txn: self.env.write_txn()?,
            db: self.db,
        })
    }

    /// Opens a read transaction: a snapshot for the calling thread.
    pub fn read_txn(&self) -> Result<LmdbRead<'_>, heed::Error> {
        Ok(LmdbRead {
            txn: self.env.read_txn()?,
            db: self.db,
        })
    }
}

/// An LMDB write transaction with the operations of redb's benchmark:
/// cursor deletes for pop / retain / extract-if, append for sorted keys.
/// Dropping it without [`commit`](Self::commit) aborts it.
pub struct LmdbWrite<'a> {
    txn: heed::RwTxn<'a>,
    db: Database<Bytes, Bytes>,
}

impl std::fmt::Debug for LmdbWrite<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LmdbWrite").finish_non_exhaustive()
    }
}

impl LmdbWrite<'_> {
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), heed::Error> {
        self.db.put(&mut self.txn, key, value)
    }

    /// `MDB_APPEND`: writes at the end of the tree without searching it;
    /// `key` must be greater than every key in the database.
    pub fn append(&mut self, key: &[u8], value: &[u8]) -> Result<(), heed::Error> {
        self.db
            .put_with_flags(&mut self.txn, PutFlags::APPEND, key, value)
    }

    /// Removes `key`; false when it was absent.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool, heed::Error> {
        self.db.delete(&mut self.txn, key)
    }

    /// Removes the entry with the least key; false when empty.
    pub fn pop_first(&mut self) -> Result<bool, heed::Error> {
        let mut it = self.db.iter_mut(&mut self.txn)?;
        if it.next().transpose()?.is_none() {
            return Ok(false);
        }
        // SAFETY: the entry `next` returned was dropped at the end of the
        // statement above; no reference into the map is held across the
        // delete.
        #[allow(unsafe_code)]
        unsafe {
            it.del_current()
        }
    }

    /// Removes the entry with the greatest key; false when empty.
    pub fn pop_last(&mut self) -> Result<bool, heed::Error> {
        let mut it = self.db.rev_iter_mut(&mut self.txn)?;
        if it.next().transpose()?.is_none() {
            return Ok(false);
        }
        // SAFETY: as in `pop_first`: no reference into the map is held.
        #[allow(unsafe_code)]
        unsafe {
            it.del_current()
        }
    }

    /// Visits every entry in key order and removes those for which `keep`
    /// returns false (a cursor delete each); returns how many it removed.
    pub fn retain(
        &mut self,
        keep: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<u64, heed::Error> {
        let mut it = self.db.iter_mut(&mut self.txn)?;
        let mut removed = 0u64;
        loop {
            // The predicate's borrows of the key and value end with this
            // statement, before any delete.
            let kept = match it.next() {
                None => break,
                Some(r) => {
                    let (k, v) = r?;
                    keep(k, v)
                }
            };
            if !kept {
                // SAFETY: no reference into the map is held (above).
                #[allow(unsafe_code)]
                unsafe {
                    it.del_current()?;
                }
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Visits the entries with `start <= key < end` and removes those for
    /// which `take` returns true; returns how many it removed.
    pub fn extract_if(
        &mut self,
        start: &[u8],
        end: &[u8],
        take: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<u64, heed::Error> {
        let range: (Bound<&[u8]>, Bound<&[u8]>) = (Bound::Included(start), Bound::Excluded(end));
        let mut it = self.db.range_mut(&mut self.txn, &range)?;
        let mut taken = 0u64;
        loop {
            let hit = match it.next() {
                None => break,
                Some(r) => {
                    let (k, v) = r?;
                    take(k, v)
                }
            };
            if hit {
                // SAFETY: no reference into the map is held (the borrows
                // of the predicate ended above).
                #[allow(unsafe_code)]
                unsafe {
                    it.del_current()?;
                }
                taken += 1;
            }
        }
        Ok(taken)
    }

    /// Commits: durable when it returns, unless `MDB_NOSYNC` is on.
    pub fn commit(self) -> Result<(), heed::Error> {
        self.txn.commit()
    }
}

/// An LMDB read transaction (one consistent snapshot).
pub struct LmdbRead<'a> {
    txn: heed::RoTxn<'a, heed::WithTls>,
    db: Database<Bytes, Bytes>,
}

impl std::fmt::Debug for LmdbRead<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LmdbRead").finish_non_exhaustive()
    }
}

impl LmdbRead<'_> {
    /// The value of `key`, borrowed from the map.
    pub fn get(&self, key: &[u8]) -> Result<Option<&[u8]>, heed::Error> {
        self.db.get(&self.txn, key)
    }

    /// Calls `f` for up to `limit` entries with keys `>= from`, in key
    /// order; returns how many.
    pub fn scan(
        &self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, heed::Error> {
        let range: (Bound<&[u8]>, Bound<&[u8]>) = (Bound::Included(from), Bound::Unbounded);
        let mut n = 0;
        for item in self.db.range(&self.txn, &range)?.take(limit) {
            let (k, v) = item?;
            f(k, v);
            n += 1;
        }
        Ok(n)
    }

    /// Calls `f` for every entry in key order; returns how many.
    pub fn for_each(&self, f: &mut dyn FnMut(&[u8], &[u8])) -> Result<u64, heed::Error> {
        let mut n = 0;
        for item in self.db.iter(&self.txn)? {
            let (k, v) = item?;
            f(k, v);
            n += 1;
        }
        Ok(n)
    }

    /// Entries (LMDB keeps the count in the tree's header: O(1)).
    pub fn len(&self) -> Result<u64, heed::Error> {
        self.db.len(&self.txn)
    }

    pub fn is_empty(&self) -> Result<bool, heed::Error> {
        Ok(self.len()? == 0)
    }
}
