//! [`Kv`] over PMDK's undo transactions: the store `pmdk-undo` (feature
//! `pmdk`), the peer P1 measured clobber logging against in memcached
//! [P1 §3.4.6, Fig. 3.10].
//!
//! The map is `ferrite_pmdk::bytemap::PmemByteMap`: a byte-keyed hash map
//! in a libpmemobj pool (a file of its own, made by `pmemobj_create`; its
//! format is documented in ferrite-pmdk's `csrc/txbytemap.c`), with the
//! same structure as the `tx-*` stores' map — 256 sub-maps of chained
//! entries, a fresh entry per put, keys hashed identically — but every
//! `put`, `delete` and group commit is one libpmemobj transaction
//! (`TX_BEGIN`, `pmemobj_tx_alloc`/`pmemobj_tx_free`,
//! `pmemobj_tx_add_range_direct`), durable when it returns. libpmemobj
//! rolls back a transaction a crash interrupted when the pool is opened.
//!
//! PMDK persists through libpmem, outside Ferrite's door (ARCHITECTURE.md,
//! rule 1): Ferrite's counters do not see its flushes and fences, and the
//! pool's durability is libpmem's choice — flush+fence when it takes the
//! file for persistent memory (real DAX, or `PMEM_IS_PMEM_FORCE=1`, as
//! the benchmarks set on /dev/shm), `msync` otherwise.

use super::{Kv, KvReader, Result, StoreError};
use ferrite_pmdk::bytemap::PmemByteMap;
use std::path::Path;

/// Sub-maps of a server's map (as the `tx-*` stores').
pub(crate) const SUBS: usize = 256;

fn err(e: ferrite_pmdk::Error) -> StoreError {
    match e {
        ferrite_pmdk::Error::Full { .. } => StoreError::Full,
        e => StoreError::Backend(e.to_string()),
    }
}

/// Initial buckets per sub-map for a pool of `bytes` (as the `tx-*`
/// stores size theirs: about one bucket per 512 bytes of pool).
fn buckets_for(bytes: u64) -> usize {
    (bytes / 512 / SUBS as u64)
        .clamp(16, 1 << 16)
        .next_power_of_two() as usize
}

/// Creates a pool of `bytes` at `path` (which must not exist) holding an
/// empty map.
pub fn create(path: &Path, bytes: u64) -> Result<PmemByteMap> {
    let size = usize::try_from(bytes)
        .map_err(|_| StoreError::Backend(format!("pool size {bytes} is too large")))?;
    PmemByteMap::create(path, size, SUBS, buckets_for(bytes)).map_err(err)
}

/// Opens the map in the pool at `path` (libpmemobj recovers it first).
pub fn open(path: &Path) -> Result<PmemByteMap> {
    PmemByteMap::open(path).map_err(err)
}

/// One thread's handle: the shared map (each thread runs its own PMDK
/// transactions; the map locks its sub-maps).
pub struct PmdkKv<'m> {
    map: &'m PmemByteMap,
}

impl<'m> PmdkKv<'m> {
    /// A map on PMDK's byte map `map`.
    pub fn new(map: &'m PmemByteMap) -> Self {
        PmdkKv { map }
    }
}

impl Kv for PmdkKv<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.map.get_into(key, out).map_err(err)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.map.put(key, value).map(|_| ()).map_err(err)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        self.map.delete(key).map_err(err)
    }

    fn scan_prefix(&mut self, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        self.map.scan_prefix(prefix, f).map_err(err)
    }

    fn batch(&mut self, ops: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<()> {
        let refs: Vec<(&[u8], Option<&[u8]>)> = ops
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
            .collect();
        self.map.batch(&refs).map(|_| ()).map_err(err)
    }
}

/// Serve the map `map` (see [`crate::server::run`]).
pub fn serve(
    map: &PmemByteMap,
    opts: crate::server::Options,
    listener: std::net::TcpListener,
    stop: Option<tokio::sync::oneshot::Receiver<()>>,
    ready: impl FnOnce(&crate::server::Ready),
) -> std::result::Result<(), crate::server::ServeError> {
    crate::server::run(
        || Ok(PmdkKv::new(map)),
        // The read fast path reads the shared map: a lookup read-locks its
        // sub-map, and a batch holds its write locks until its libpmemobj
        // transaction has committed (durably), so a reader never sees a
        // write a crash could roll back.
        || Ok(Some(KvReader(PmdkKv::new(map)))),
        opts,
        listener,
        stop,
        ready,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{StoreMode, StoreOpts};
    use crate::store::{Cache, Shared, Store, StoreOutcome};

    fn dir() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("ferrite-server-pmdk-")
            .tempdir_in(ferrite_pmdk::SHM_DIR)
            .unwrap()
    }

    #[test]
    fn puts_deletes_batches_and_reopening() {
        let d = dir();
        let path = d.path().join("pool");
        {
            let map = create(&path, 64 << 20).unwrap();
            let mut kv = PmdkKv::new(&map);
            let mut out = Vec::new();
            kv.put(b"a", b"1").unwrap();
            kv.batch(&[
                (b"b".to_vec(), Some(b"2".to_vec())),
                (b"a".to_vec(), None),
                (b"c".to_vec(), Some(vec![9; (1 << 20) + 28])),
            ])
            .unwrap();
            assert!(!kv.get_into(b"a", &mut out).unwrap());
            assert!(kv.delete(b"b").unwrap());
            assert!(!kv.delete(b"b").unwrap());
            // A key longer than the map's limit: an error, not a panic.
            assert!(matches!(
                kv.put(&[b'k'; 300], b"v"),
                Err(StoreError::Backend(_))
            ));
        }
        let map = open(&path).unwrap();
        let mut kv = PmdkKv::new(&map);
        let mut out = Vec::new();
        assert!(kv.get_into(b"c", &mut out).unwrap());
        assert_eq!(out, vec![9; (1 << 20) + 28]);
        let mut keys = Vec::new();
        kv.scan_prefix(b"", &mut |k, _| keys.push(k.to_vec()))
            .unwrap();
        assert_eq!(keys, vec![b"c".to_vec()]);
    }

    #[test]
    fn a_full_pool_reports_full_and_a_delete_makes_room() {
        let d = dir();
        let map = create(&d.path().join("pool"), 16 << 20).unwrap();
        let mut kv = PmdkKv::new(&map);
        let v = vec![7u8; 512 << 10];
        let mut full = false;
        for i in 0..200u32 {
            match kv.put(&i.to_le_bytes(), &v) {
                Ok(()) => {}
                Err(StoreError::Full) => {
                    full = true;
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(full);
        assert!(kv.delete(&0u32.to_le_bytes()).unwrap());
        kv.put(b"x", &v).unwrap();
    }

    #[test]
    fn the_item_store_runs_on_it_and_cas_survives_a_restart() {
        let d = dir();
        let path = d.path().join("pool");
        let now = 1_800_000_000;
        let opts = StoreOpts::default();
        let cas = {
            let map = create(&path, 32 << 20).unwrap();
            let mut kv = PmdkKv::new(&map);
            let shared = Shared::open(&mut kv, 1 << 20).unwrap();
            let mut c = Cache::new(PmdkKv::new(&map), &shared);
            assert!(matches!(
                c.store(StoreMode::Set, b"k", 3, 0, b"v1", None, &opts, now)
                    .unwrap(),
                StoreOutcome::Stored(_)
            ));
            assert!(matches!(
                c.store(StoreMode::Add, b"k", 3, 0, b"v2", None, &opts, now)
                    .unwrap(),
                StoreOutcome::NotStored
            ));
            c.get(b"k", now).unwrap().expect("stored").cas
        };
        let map = open(&path).unwrap();
        let mut kv = PmdkKv::new(&map);
        let shared = Shared::open(&mut kv, 1 << 20).unwrap();
        let mut c = Cache::new(PmdkKv::new(&map), &shared);
        let item = c.get(b"k", now).unwrap().expect("survived");
        assert_eq!(item.data, b"v1");
        assert_eq!(item.flags, 3);
        c.store(StoreMode::Set, b"k", 0, 0, b"v3", None, &opts, now)
            .unwrap();
        assert!(c.get(b"k", now).unwrap().expect("stored").cas > cas);
    }
}
