//! [`InFlight`]: an observer that counts the flushes issued since the last
//! fence, for tests that an operation returns with no flush in flight.
//!
//! Such a flush is not a durability bug, but it costs about a fence: a
//! `clwb` is ordered before every younger locked read-modify-write (Intel
//! SDM, CLWB), so the next atomic or lock operation — the caller's unlock,
//! typically — waits for its write-back (see `ferrite-tx`, "Flushes and
//! locked instructions").

use ferrite_pmem::{Domain, Mapping, Pool, PoolError, PoolOptions, SimObserver};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts flushes since the last fence, over all threads.
#[derive(Debug, Default)]
pub struct InFlight(AtomicUsize);

impl InFlight {
    /// Opens `image` (domain `adr`, options `opts`) watched by a new
    /// observer. The medium then issues no real flush or fence.
    pub fn open(image: &[u8], opts: &PoolOptions) -> Result<(Pool, Arc<InFlight>), PoolError> {
        let obs = Arc::new(InFlight::default());
        let pool = Pool::open_image(image, opts, Domain::Adr, Some(obs.clone()))?;
        Ok((pool, obs))
    }

    /// Flushes issued since the last fence.
    pub fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

impl SimObserver for InFlight {
    fn flushed(&self, _: &Mapping, _: usize, _: usize) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    fn fenced(&self, _: &Mapping) {
        self.0.store(0, Ordering::Relaxed);
    }
}
