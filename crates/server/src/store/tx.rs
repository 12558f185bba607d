//! [`Kv`] over `ferrite-tx` transactions on a [`ByteMap`]: the stores
//! `tx-undo`, `tx-redo` and `tx-clobber`, so P1's memcached comparison of
//! undo, redo and clobber logging [P1 §3.4.6] runs inside this server.
//!
//! Every `put`, `delete` and group commit is one [`ByteMap::apply`]
//! transaction, durable when it returns: undo makes its completion durable
//! before returning; redo and clobber return once their log is durable
//! (a crash after that replays or re-executes the transaction), which is
//! all an acknowledgement needs.
//!
//! A batch must fit one log area ([`AREA_BYTES`]): under clobber logging
//! its keys and values are the transaction's logged inputs. A bigger batch
//! is refused before anything is written ([`StoreError::Backend`]), which
//! the server answers by running the group's requests one at a time; one
//! item of the largest size always fits.

use super::{Kv, Reader, Result, StoreError};
use ferrite_ds::bytemap::ByteMap;
use ferrite_pmem::Pool;
use ferrite_tx::{Registry, Strategy, TxError, TxOptions, TxPool, TxThread};

/// Sub-maps of a server's map (each with its own lock).
pub(crate) const SUBS: usize = 256;
/// Bytes of each of a slot's two log areas: one item of the largest size
/// (1 MiB with its key and header) and room for the records.
pub const AREA_BYTES: u32 = (1 << 20) + (64 << 10);

/// The transaction functions a server pool's logs may name.
pub fn registry() -> Registry {
    ferrite_ds::registry()
}

fn err(e: TxError) -> StoreError {
    match e {
        TxError::Alloc(
            ferrite_alloc::AllocError::OutOfSpace { .. }
            | ferrite_alloc::AllocError::TooLarge { .. },
        ) => StoreError::Full,
        e => StoreError::Backend(e.to_string()),
    }
}

/// Initial buckets per sub-map for a pool of `bytes`: about one bucket
/// per 512 bytes of pool, so a full pool of small items seldom doubles a
/// sub-map (a doubling relinks every entry of it in one transaction).
fn buckets_for(bytes: u64) -> usize {
    (bytes / 512 / SUBS as u64)
        .clamp(16, 1 << 16)
        .next_power_of_two() as usize
}

/// Creates the transactional pool and its map in `pool`, with `slots` log
/// slots (1..=64: the shard threads that can run transactions at once,
/// plus the start-up scan; each takes two log areas of the pool).
pub fn create(pool: &Pool, strategy: Strategy, slots: u16) -> Result<TxPool> {
    let opts = TxOptions::new(strategy).slots(slots).area_bytes(AREA_BYTES);
    let txp = TxPool::create(pool, &opts, registry()).map_err(err)?;
    {
        let mut th = txp.thread().map_err(err)?;
        ByteMap::create(&mut th, SUBS, buckets_for(pool.header().size)).map_err(err)?;
    }
    Ok(txp)
}

/// Opens (recovering) the transactional pool in `pool` with its own
/// strategy.
pub fn open(pool: &Pool) -> Result<TxPool> {
    TxPool::open(pool, registry(), None).map_err(err)
}

/// The map of `txp`: its root.
pub fn map(txp: &TxPool) -> Result<ByteMap<'_>> {
    ByteMap::open(txp, txp.root()).map_err(err)
}

/// One thread's handle: a log slot on the shared map.
pub struct TxKv<'m, 'p> {
    map: &'m ByteMap<'p>,
    th: TxThread<'p>,
}

impl<'m, 'p> TxKv<'m, 'p> {
    /// A map on the byte map `map` (opens this thread's transaction handle).
    pub fn new(map: &'m ByteMap<'p>) -> Result<Self> {
        Ok(TxKv {
            th: map.pool().thread().map_err(err)?,
            map,
        })
    }

    fn run(&mut self, ops: &[(&[u8], Option<&[u8]>)]) -> Result<u64> {
        let need = ByteMap::encoded_len(ops);
        // The v_log also holds the arguments and record headers.
        if need + 4096 > self.map.pool().area_bytes() {
            return Err(StoreError::Backend(format!(
                "a batch of {need} bytes does not fit one log area"
            )));
        }
        match self.map.apply(&mut self.th, ops).map_err(err) {
            // A clobber transaction hands the blocks it freed to the
            // allocator only at its thread's next fence point: a delete
            // (an eviction) just before may have freed the room.
            Err(StoreError::Full) => {
                self.th.quiesce();
                self.map.apply(&mut self.th, ops).map_err(err)
            }
            r => r,
        }
    }
}

/// A lookup's error: damage the byte map's own checks met on the way to
/// `map_key` (its record, or the chain leading to it) makes that item
/// unreadable — the server answers `SERVER_ERROR` for it and goes on
/// serving the others, as for an item whose own checksum fails.
fn read_err(map_key: &[u8], e: TxError) -> StoreError {
    match e {
        TxError::Corrupt(_) => StoreError::damaged(map_key, "checksum mismatch"),
        e => err(e),
    }
}

impl Kv for TxKv<'_, '_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.map.get_into(key, out).map_err(|e| read_err(key, e))
    }

    fn scan_checked(&mut self, f: &mut super::CheckedPair<'_>) -> Result<()> {
        let mut damaged = Vec::new();
        self.map
            .scan_prefix_past_damage(b"", &mut |k, v| f(k, Ok(v)), &mut |k, what| {
                damaged.push((k.to_vec(), what))
            })
            .map_err(err)?;
        for (k, what) in damaged {
            f(&k, Err(what));
        }
        Ok(())
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.run(&[(key, Some(value))]).map(|_| ())
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        Ok(self.run(&[(key, None)])? == 1)
    }

    fn scan_prefix(&mut self, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        self.map.scan_prefix(prefix, f).map_err(err)
    }

    fn batch(&mut self, ops: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<()> {
        let refs: Vec<(&[u8], Option<&[u8]>)> = ops
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
            .collect();
        self.run(&refs).map(|_| ())
    }
}

/// The read fast path's handle: the shared map itself. A lookup
/// read-locks its sub-map, and a batch holds its write locks until its
/// transaction is durable (undo: completed; redo and clobber: logged), so
/// a reader never sees a write that a crash could take back.
pub(crate) struct MapReader<'m, 'p>(pub &'m ByteMap<'p>);

impl Reader for MapReader<'_, '_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.0.get_into(key, out).map_err(|e| read_err(key, e))
    }
}

/// Serve the transactional pool `txp` (see [`crate::server::run`]); the
/// shard count is capped below its log slots (one is the start-up scan's).
pub fn serve(
    txp: &TxPool,
    mut opts: crate::server::Options,
    listener: std::net::TcpListener,
    stop: Option<tokio::sync::oneshot::Receiver<()>>,
    ready: impl FnOnce(&crate::server::Ready),
) -> std::result::Result<(), crate::server::ServeError> {
    let map = map(txp)?;
    let slots = txp.slots().max(1);
    opts.shards = opts.shards.clamp(1, (slots - 1).max(1));
    crate::server::run(
        || TxKv::new(&map),
        || Ok(Some(MapReader(&map))),
        opts,
        listener,
        stop,
        ready,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_pmem::{Domain, PoolOptions};

    #[test]
    fn puts_deletes_batches_and_reopening_under_every_strategy() {
        for strategy in [Strategy::Undo, Strategy::Redo, Strategy::Clobber] {
            let pool = Pool::create_in_memory(&PoolOptions::new("t", 48 << 20).domain(Domain::Adr))
                .unwrap();
            let txp = create(&pool, strategy, 4).unwrap();
            let m = map(&txp).unwrap();
            let mut kv = TxKv::new(&m).unwrap();
            let mut out = Vec::new();
            kv.put(b"a", b"1").unwrap();
            kv.batch(&[
                (b"b".to_vec(), Some(b"2".to_vec())),
                (b"a".to_vec(), None),
                (b"c".to_vec(), Some(vec![9; 1 << 20])),
            ])
            .unwrap();
            assert!(!kv.get_into(b"a", &mut out).unwrap());
            assert!(kv.delete(b"b").unwrap());
            assert!(!kv.delete(b"b").unwrap());
            // Bigger than a log area: refused whole, nothing applied.
            let big = vec![
                (b"d".to_vec(), Some(vec![1; 1 << 20])),
                (b"e".to_vec(), Some(vec![2; 1 << 20])),
            ];
            assert!(matches!(kv.batch(&big), Err(StoreError::Backend(_))));
            assert!(!kv.get_into(b"d", &mut out).unwrap());
            drop(kv);
            drop(m);
            drop(txp);
            let txp = open(&pool).unwrap();
            assert_eq!(txp.strategy(), strategy);
            let m = map(&txp).unwrap();
            let mut kv = TxKv::new(&m).unwrap();
            assert!(kv.get_into(b"c", &mut out).unwrap());
            assert_eq!(out, vec![9; 1 << 20]);
            let mut keys = Vec::new();
            kv.scan_prefix(b"", &mut |k, _| keys.push(k.to_vec()))
                .unwrap();
            assert_eq!(keys, vec![b"c".to_vec()]);
        }
    }

    #[test]
    fn a_full_pool_reports_full() {
        let pool = Pool::create_in_memory(&PoolOptions::new("t", 48 << 20)).unwrap();
        let txp = create(&pool, Strategy::Clobber, 4).unwrap();
        let m = map(&txp).unwrap();
        let mut kv = TxKv::new(&m).unwrap();
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
        // Still usable: a delete makes room.
        assert!(kv.delete(&0u32.to_le_bytes()).unwrap());
        kv.put(b"x", &v).unwrap();
    }
}
