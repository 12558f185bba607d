//! What every shard shares: the CAS counter reserved durably in
//! batches, the `flush_all` marker, the statistics.

use super::{
    CAS_BATCH, FORMAT, Item, Kv, META_CAS, META_FLUSH, META_FORMAT, Result, StoreError,
    check_format, slabs,
};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};

/// State every shard shares: the CAS counter (reserved durably in batches of
/// [`super::CAS_BATCH`], so a CAS is never reused across a restart), the
/// `flush_all` marker, the item size limit and the statistics. One per served
/// pool; the shards hold it by reference.
#[derive(Debug)]
pub struct Shared {
    next_cas: AtomicU64,
    /// CAS ids below this are reserved durably (`\0cas`).
    reserved: AtomicU64,
    reserve_lock: Mutex<()>,
    pub(super) flush: Mutex<(u64, u64)>,
    pub(super) flush_at: AtomicU64,
    pub(super) flush_cas: AtomicU64,
    /// Largest value in bytes (memcached `-I`).
    pub max_item_size: usize,
    /// The counters of `stats`.
    pub stats: Stats,
    /// Shards whose start-up seeding ([`Cache::seed`](super::Cache::seed)) is
    /// not finished.
    seeding: AtomicUsize,
    /// The start-up scan failed: counts and eviction miss the keys it did
    /// not reach.
    pub scan_failed: AtomicBool,
    /// `stats detail` (per-prefix counts).
    pub detail: crate::observe::Detail,
    /// Log watchers (`watch`).
    pub log: crate::observe::Log,
    /// Items by memcached slab class (`stats slabs`, `stats items`).
    pub slabs: slabs::SlabStats,
    /// Reads verify each item's checksum (always, but for the measurement
    /// of what verifying costs: [`Shared::set_verify`]).
    verify: AtomicBool,
}

/// Counters for `stats` (volatile, since start). `curr_items` and `bytes` are
/// the sums of the shards' eviction views
/// ([`evict::Clock`](super::evict::Clock)): exact once the start-up scan has
/// seeded them ([`Shared::counted`]). `bytes` charges an item its map key,
/// header and data, as memcached's counts item sizes.
#[derive(Debug, Default)]
pub struct Stats {
    /// Items held now (`curr_items`).
    pub curr_items: AtomicI64,
    /// Items stored since start (`total_items`).
    pub total_items: AtomicU64,
    /// Bytes charged by the items held (`bytes`).
    pub bytes: AtomicI64,
    /// Retrievals, one per key (`cmd_get`).
    pub cmd_get: AtomicU64,
    /// Store commands (`cmd_set`).
    pub cmd_set: AtomicU64,
    /// Touches (`cmd_touch`).
    pub cmd_touch: AtomicU64,
    /// `flush_all` commands (`cmd_flush`).
    pub cmd_flush: AtomicU64,
    /// Retrievals that found the item.
    pub get_hits: AtomicU64,
    /// Retrievals that found none.
    pub get_misses: AtomicU64,
    /// Retrievals that found an expired item.
    pub get_expired: AtomicU64,
    /// Retrievals that found an item a `flush_all` invalidated.
    pub get_flushed: AtomicU64,
    /// Deletes that removed an item.
    pub delete_hits: AtomicU64,
    /// Deletes that found none.
    pub delete_misses: AtomicU64,
    /// incr that found the item.
    pub incr_hits: AtomicU64,
    /// incr that found none.
    pub incr_misses: AtomicU64,
    /// decr that found the item.
    pub decr_hits: AtomicU64,
    /// decr that found none.
    pub decr_misses: AtomicU64,
    /// CAS stores that matched.
    pub cas_hits: AtomicU64,
    /// CAS stores that found no item.
    pub cas_misses: AtomicU64,
    /// CAS stores whose CAS did not match.
    pub cas_badval: AtomicU64,
    /// Touches that found the item.
    pub touch_hits: AtomicU64,
    /// Touches that found none.
    pub touch_misses: AtomicU64,
    /// Group commits of more than one request, and the requests in them.
    pub group_commits: AtomicU64,
    /// Requests in those group commits.
    pub grouped_requests: AtomicU64,
    /// Items deleted to make room (memcached's `evictions`).
    pub evictions: AtomicU64,
    /// Gets answered on the read fast path (hits and misses), not by a
    /// shard ([`crate::server`]).
    pub fast_gets: AtomicU64,
}

impl Stats {
    /// `stats reset`: the command and hit counters start again at 0 (the
    /// item counts stay, as in memcached).
    pub fn reset(&self) {
        for c in [
            &self.total_items,
            &self.cmd_get,
            &self.cmd_set,
            &self.cmd_touch,
            &self.cmd_flush,
            &self.get_hits,
            &self.get_misses,
            &self.get_expired,
            &self.get_flushed,
            &self.delete_hits,
            &self.delete_misses,
            &self.incr_hits,
            &self.incr_misses,
            &self.decr_hits,
            &self.decr_misses,
            &self.cas_hits,
            &self.cas_misses,
            &self.cas_badval,
            &self.touch_hits,
            &self.touch_misses,
            &self.group_commits,
            &self.grouped_requests,
            &self.evictions,
            &self.fast_gets,
        ] {
            c.store(0, Relaxed);
        }
    }
}

pub(super) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Relaxed);
}

impl Shared {
    /// Load the persisted CAS mark and flush marker through `kv` (one thread,
    /// before serving). Two reads: the items are counted later, by
    /// [`Cache::seed_all`](super::Cache::seed_all) or the server's background
    /// scan. Refuses a map of another item format ([`StoreError::Format`]); on
    /// a new map, durably records this build's ([`META_FORMAT`]) before any
    /// item is written.
    pub fn open(kv: &mut dyn Kv, max_item_size: usize) -> Result<Shared> {
        if !check_format(kv)? {
            kv.put_now(META_FORMAT, &FORMAT)?;
        }
        let mut buf = Vec::new();
        let mark = if kv.get_into(META_CAS, &mut buf)? {
            read_u64(&buf, 0).ok_or(StoreError::Corrupt("CAS mark"))?
        } else {
            1
        };
        let (at, fcas) = if kv.get_into(META_FLUSH, &mut buf)? {
            (
                read_u64(&buf, 0).ok_or(StoreError::Corrupt("flush marker"))?,
                read_u64(&buf, 8).ok_or(StoreError::Corrupt("flush marker"))?,
            )
        } else {
            (0, 0)
        };
        let stats = Stats::default();
        Ok(Shared {
            next_cas: AtomicU64::new(mark.max(1)),
            reserved: AtomicU64::new(mark.max(1)),
            reserve_lock: Mutex::new(()),
            flush: Mutex::new((at, fcas)),
            flush_at: AtomicU64::new(at),
            flush_cas: AtomicU64::new(fcas),
            max_item_size,
            stats,
            seeding: AtomicUsize::new(0),
            scan_failed: AtomicBool::new(false),
            detail: Default::default(),
            log: Default::default(),
            slabs: Default::default(),
            verify: AtomicBool::new(true),
        })
    }

    /// Do reads verify item checksums? (True unless turned off.)
    pub fn verifies(&self) -> bool {
        self.verify.load(Relaxed)
    }

    /// Turn checksum verification on reads off or on: only for measuring
    /// its cost (the bench); a server never turns it off, and items are
    /// written with their checksum either way.
    pub fn set_verify(&self, on: bool) {
        self.verify.store(on, Relaxed);
    }

    /// `n` shards will be seeded by a background scan.
    pub(crate) fn start_seeding(&self, n: usize) {
        self.seeding.store(n, Relaxed);
    }

    /// One shard's seeding is over.
    pub(crate) fn seeded_one(&self) {
        self.seeding
            .fetch_sub(1, std::sync::atomic::Ordering::Release);
    }

    /// Are `curr_items` and `bytes` complete (no seeding in progress)?
    pub fn counted(&self) -> bool {
        self.seeding.load(std::sync::atomic::Ordering::Acquire) == 0
    }

    /// A fresh CAS, never handed out before (also across restarts: the
    /// reservation is durable before the id is returned).
    pub(super) fn new_cas(&self, kv: &mut dyn Kv) -> Result<u64> {
        let c = self.next_cas.fetch_add(1, Relaxed);
        if c >= self.reserved.load(Relaxed) {
            let _g = self.reserve_lock.lock();
            let mut r = self.reserved.load(Relaxed);
            if c >= r {
                while c >= r {
                    r += CAS_BATCH;
                }
                kv.put_now(META_CAS, &r.to_le_bytes())?;
                self.reserved.store(r, Relaxed);
            }
        }
        Ok(c)
    }

    /// Is `it` invisible at `now` because of a `flush_all`?
    pub(super) fn flushed(&self, it: &Item, now: u64) -> bool {
        if it.cas <= self.flush_cas.load(Relaxed) {
            return true;
        }
        let at = self.flush_at.load(Relaxed);
        at != 0 && now >= at && it.time < at
    }

    /// Items in the map (expired ones not yet removed included).
    pub fn items(&self) -> u64 {
        self.stats.curr_items.load(Relaxed).max(0) as u64
    }
}

fn read_u64(b: &[u8], off: usize) -> Option<u64> {
    let s = b.get(off..off + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(u64::from_le_bytes(a))
}
