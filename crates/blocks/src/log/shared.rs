//! The thread-safe front end: one mutex around a [`Log`].
//!
//! Design: a writer takes the lock, writes its record(s), issues the
//! barrier(s) and releases the lock. Holding the lock across the barrier
//! keeps the media order equal to the LSN order, which every algorithm's
//! recovery relies on (it stops at the first invalid entry). The price is
//! that writers queue behind one another's fences; writers that can wait for
//! each other should use [`SharedLog::append_batch`] (one barrier for many
//! records). The alternative — reserve space under the lock, copy and fence
//! outside it — lets fences of different writers overlap, but then a writer
//! may only return once every earlier reservation is durable too (a crash
//! could otherwise leave its record behind a hole, where recovery stops),
//! which needs per-reservation completion tracking; it is left for when a
//! benchmark shows the mutex to be the bottleneck.

use super::{Iter, Log, Lsn, LsnRange, Result};
use parking_lot::{Mutex, MutexGuard};

/// A [`Log`] shared by several threads.
#[derive(Debug)]
pub struct SharedLog {
    inner: Mutex<Log>,
}

impl SharedLog {
    pub fn new(log: Log) -> SharedLog {
        SharedLog {
            inner: Mutex::new(log),
        }
    }

    /// [`Log::append`] under the lock.
    pub fn append(&self, record: &[u8]) -> Result<Lsn> {
        self.inner.lock().append(record)
    }

    /// [`Log::append_batch`] under the lock.
    pub fn append_batch(&self, records: &[&[u8]]) -> Result<LsnRange> {
        self.inner.lock().append_batch(records)
    }

    /// [`Log::truncate`] under the lock.
    pub fn truncate(&self, new_first: Lsn) -> Result<()> {
        self.inner.lock().truncate(new_first)
    }

    pub fn first_lsn(&self) -> Lsn {
        self.inner.lock().first_lsn()
    }

    pub fn next_lsn(&self) -> Lsn {
        self.inner.lock().next_lsn()
    }

    /// Runs `f` over the records from `from` on, holding the lock (appends
    /// wait until `f` returns).
    pub fn scan<R>(&self, from: Lsn, f: impl FnOnce(Iter<'_>) -> R) -> Result<R> {
        let log = self.inner.lock();
        Ok(f(log.iter_from(from)?))
    }

    /// The log itself, locked.
    pub fn lock(&self) -> MutexGuard<'_, Log> {
        self.inner.lock()
    }

    pub fn into_inner(self) -> Log {
        self.inner.into_inner()
    }
}
