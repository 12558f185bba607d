//! The systems of the redb comparison workload behind one interface
//! ([`Subject`]): Ferrite's engines, LMDB, redb and fjall. See the parent
//! module for what each phase asks of them and how each one commits.

use super::{KEY_BYTES, VALUE_BYTES};
use crate::peers::lmdb::{LmdbStore, SHM};
use ferrite_engine::{Domain, Durability, EngineKind, KeyRange, Snapshot, Store};
use ferrite_engine::{StoreOptions, WriteTxn};
use std::hash::Hasher;
use std::ops::Bound;
use std::time::{Duration, Instant};

/// Errors of every system, as text (converted only on the error path).
pub type Res<T> = Result<T, String>;

fn err<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// One write transaction of a system: what redb's benchmark calls an
/// inserter. Every system implements every method with its own
/// transaction's operations (Ferrite: [`WriteTxn`], which reads its own
/// writes).
pub trait Txn {
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Res<()>;
    fn remove(&mut self, key: &[u8]) -> Res<()>;
    /// Removes the least entry; false when empty.
    fn pop_first(&mut self) -> Res<bool> {
        Err("no pop in this transaction".into())
    }
    /// Removes the greatest entry; false when empty.
    fn pop_last(&mut self) -> Res<bool> {
        Err("no pop in this transaction".into())
    }
    /// Removes every entry for which `keep` is false, visiting all in key
    /// order; returns how many it removed.
    fn retain(&mut self, _keep: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Res<u64> {
        Err("no retain in this transaction".into())
    }
    /// Removes the entries of `start <= key < end` for which `take` is
    /// true; returns how many it removed.
    fn extract_if(
        &mut self,
        _start: &[u8],
        _end: &[u8],
        _take: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Res<u64> {
        Err("no extract_if in this transaction".into())
    }
    /// Inserts pairs whose keys ascend past every key in the table, by the
    /// fastest path the system has for that (default: `insert`).
    fn insert_sorted(&mut self, pairs: &[(Vec<u8>, Vec<u8>)]) -> Res<()> {
        for (k, v) in pairs {
            self.insert(k, v)?;
        }
        Ok(())
    }
}

/// A read view: a read transaction (LMDB, redb) or a snapshot (fjall,
/// Ferrite's [`Snapshot`]), consistent for its whole life.
pub trait Reader {
    /// Copies the value of `key` into `out`; false when absent.
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Res<bool>;
    /// Calls `f` for up to `limit` entries with keys `>= from`, in order.
    fn scan(&mut self, from: &[u8], limit: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<usize>;
    /// Calls `f` for every entry in key order; returns how many.
    fn for_each(&mut self, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<u64>;
}

/// What a write phase committed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Committed {
    /// Durable commits made.
    pub commits: u64,
    /// Operations in the largest commit.
    pub batch_ops: u64,
}

impl Committed {
    fn one(ops: u64) -> Committed {
        Committed {
            commits: 1,
            batch_ops: ops,
        }
    }

    /// Adds `o`'s commits; keeps the larger batch.
    pub fn add(&mut self, o: Committed) {
        self.commits += o.commits;
        self.batch_ops = self.batch_ops.max(o.batch_ops);
    }
}

/// How a pop phase went: redb's benchmark stops timing a system whose
/// first 1 % of pops takes longer than [`POP_SAMPLE_LIMIT`], estimates
/// the whole from that sample, and applies the rest untimed. Here the
/// rule is checked at every 1 %: a system slower than 1 s per 1 % so far
/// is stopped there and estimated linearly from the pops it made (a lower
/// bound for a system whose pops slow down as they go, such as fjall's,
/// which skip the transaction's earlier deletions: at redb's 500 000 pops
/// the whole would take hours).
#[derive(Clone, Copy, Debug, Default)]
pub struct Popped {
    pub popped: u64,
    /// The estimated time of all the pops, when the sample was too slow.
    pub estimate: Option<Duration>,
    pub committed: Committed,
}

/// redb's limit on the first 1 % of the pops.
pub const POP_SAMPLE_LIMIT: Duration = Duration::from_secs(1);

/// One system, opened fresh for one repetition of the workload.
pub trait Subject: Send + Sync {
    /// Runs `f` in one write transaction and commits it (durably, unless
    /// [`set_sync`](Self::set_sync) turned that off). When `f` fails the
    /// transaction is dropped: nothing of it applied.
    fn write(&mut self, f: &mut dyn FnMut(&mut dyn Txn) -> Res<u64>) -> Res<Committed>;
    /// Turns durable commits on or off (every system here has a relaxed
    /// commit).
    fn set_sync(&mut self, on: bool) -> Res<()>;
    /// Live entries.
    fn len(&self) -> Res<u64>;
    fn is_empty(&self) -> Res<bool> {
        Ok(self.len()? == 0)
    }
    /// A read view for the calling thread.
    fn reader(&self) -> Res<Box<dyn Reader + '_>>;
    /// The directory holding the system's files.
    fn dir(&self) -> &std::path::Path;

    /// Bytes of memory its files take (blocks allocated on tmpfs).
    fn footprint(&self) -> u64 {
        fn walk(p: &std::path::Path) -> u64 {
            use std::os::unix::fs::MetadataExt;
            let Ok(rd) = std::fs::read_dir(p) else {
                return 0;
            };
            rd.flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => walk(&e.path()),
                    Ok(m) => m.blocks() * 512,
                    Err(_) => 0,
                })
                .sum()
        }
        walk(self.dir())
    }

    /// Whether ferrite-pmem's counters see the system's persists.
    fn counters_observed(&self) -> bool {
        false
    }
    /// Bytes of the store's file when it is one growable file (Ferrite's
    /// pool); `None` for the peers.
    fn file_bytes(&self) -> Option<u64> {
        None
    }

    /// redb's `retain` in one transaction: removes every entry for which
    /// `keep` is false; returns how many.
    fn retain(&mut self, keep: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Res<(u64, Committed)> {
        let mut removed = 0;
        let c = self.write(&mut |t| {
            removed = t.retain(keep)?;
            Ok(removed)
        })?;
        Ok((removed, c))
    }

    /// redb's `extract_if` over `start..end` in one transaction.
    fn extract_if(
        &mut self,
        start: &[u8],
        end: &[u8],
        take: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Res<(u64, Committed)> {
        let mut n = 0;
        let c = self.write(&mut |t| {
            n = t.extract_if(start, end, take)?;
            Ok(n)
        })?;
        Ok((n, c))
    }

    /// `n` pops in one transaction, alternately the first and the last
    /// entry, over a table of `len` entries; every `sample` pops the pace
    /// is checked against [`POP_SAMPLE_LIMIT`] (see [`Popped`]).
    fn pop(&mut self, n: u64, len: u64, sample: u64) -> Res<Popped> {
        let start = Instant::now();
        let mut estimate = None;
        let mut popped = 0u64;
        let committed = self.write(&mut |t| {
            for i in 0..n {
                let hit = if i % 2 == 0 {
                    t.pop_first()?
                } else {
                    t.pop_last()?
                };
                if !hit {
                    return Err(format!("pop {i} of {n}: the table is empty"));
                }
                popped += 1;
                if popped.is_multiple_of(sample) && popped < n {
                    let took = start.elapsed();
                    if took > POP_SAMPLE_LIMIT.mul_f64((popped / sample) as f64) {
                        estimate = Some(took.mul_f64(n as f64 / popped as f64));
                        // The remaining pops, untimed: the same entries
                        // from each end, removed by one retain.
                        let front = n.div_ceil(2) - popped.div_ceil(2);
                        let back = n / 2 - popped / 2;
                        let left = len - popped;
                        let mut i = 0u64;
                        let removed = t.retain(&mut |_, _| {
                            let keep = i >= front && i < left - back;
                            i += 1;
                            keep
                        })?;
                        if removed != front + back {
                            return Err(format!(
                                "pop: the untimed rest removed {removed}, not {}",
                                front + back
                            ));
                        }
                        popped += removed;
                        break;
                    }
                }
            }
            Ok(popped)
        })?;
        Ok(Popped {
            popped,
            estimate,
            committed,
        })
    }

    /// Count and digest of every entry in key order, untimed: equal
    /// digests mean equal contents.
    fn digest(&self) -> Res<(u64, u64)> {
        let mut h = std::hash::DefaultHasher::new();
        let n = self.reader()?.for_each(&mut |k, v| {
            h.write(k);
            h.write(v);
        })?;
        Ok((n, h.finish()))
    }
}

// ---------------------------------------------------------------------
// Ferrite
// ---------------------------------------------------------------------

/// The options every Ferrite store of the workload is created with: the
/// engine's defaults (no size: the store grows; default sessions and log
/// areas), in the `adr` domain (a pool on `/dev/shm` would otherwise be
/// detected as an ordinary file and `msync`ed).
pub fn ferrite_options(kind: EngineKind) -> StoreOptions {
    StoreOptions::new(kind).domain(Domain::Adr)
}

/// A Ferrite store in a pool file on `/dev/shm`, created without a size:
/// it starts small and grows on demand ([`Store::create_new`]).
pub struct FerriteSubject {
    // Field order: the store closes before the directory goes.
    store: Store,
    /// Of the next commits: [`Durability::Eventual`] in the nosync phase.
    durability: Durability,
    path: std::path::PathBuf,
    dir: tempfile::TempDir,
}

impl FerriteSubject {
    /// A fresh, growable store of `kind`.
    pub fn create(kind: EngineKind) -> Res<FerriteSubject> {
        let dir = tempfile::Builder::new()
            .prefix("ferrite-bench-redb-")
            .tempdir_in(SHM)
            .map_err(|e| format!("temporary directory in {SHM}: {e}"))?;
        let path = dir.path().join("store.pool");
        let store = Store::create_new(&path, &ferrite_options(kind))
            .map_err(|e| format!("{kind} store: {e}"))?;
        Ok(FerriteSubject {
            store,
            durability: Durability::Immediate,
            path,
            dir,
        })
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Bytes of the pool file now (it grows with the store).
    pub fn file_bytes(&self) -> u64 {
        std::fs::metadata(&self.path).map_or(0, |m| m.len())
    }
}

/// Ferrite's write transaction ([`WriteTxn`]) as the workload's
/// [`Txn`]: every method is the transaction's own.
struct FerriteTxn<'a>(&'a mut WriteTxn);

impl Txn for FerriteTxn<'_> {
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Res<()> {
        self.0.put(key, value).map_err(err("put"))
    }

    fn remove(&mut self, key: &[u8]) -> Res<()> {
        self.0.delete(key).map(drop).map_err(err("delete"))
    }

    fn pop_first(&mut self) -> Res<bool> {
        Ok(self.0.pop_first().map_err(err("pop_first"))?.is_some())
    }

    fn pop_last(&mut self) -> Res<bool> {
        Ok(self.0.pop_last().map_err(err("pop_last"))?.is_some())
    }

    fn retain(&mut self, keep: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Res<u64> {
        let n = self
            .0
            .retain(&KeyRange::all(), keep)
            .map_err(err("retain"))?;
        Ok(n as u64)
    }

    fn extract_if(
        &mut self,
        start: &[u8],
        end: &[u8],
        take: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Res<u64> {
        let out = self
            .0
            .extract_if(&KeyRange::between(start, end), take)
            .map_err(err("extract_if"))?;
        Ok(out.len() as u64)
    }
}

impl Subject for FerriteSubject {
    /// One [`Store::write`] transaction, committed with the subject's
    /// durability; dropped (nothing applied) when `f` fails.
    fn write(&mut self, f: &mut dyn FnMut(&mut dyn Txn) -> Res<u64>) -> Res<Committed> {
        let mut txn = self.store.write().map_err(err("write txn"))?;
        txn.set_durability(self.durability);
        let ops = f(&mut FerriteTxn(&mut txn))?;
        txn.commit().map_err(err("commit"))?;
        Ok(Committed::one(ops))
    }

    /// Off: [`Durability::Eventual`] commits (durable at the next
    /// immediate commit, as LMDB's `MDB_NOSYNC` ones at the next synced
    /// commit and redb's `Durability::None` ones at the next durable one).
    fn set_sync(&mut self, on: bool) -> Res<()> {
        self.durability = if on {
            Durability::Immediate
        } else {
            Durability::Eventual
        };
        Ok(())
    }

    /// [`Store::len`]: a counter for InP and CoW, a merge of the memtable
    /// and the runs for LSM.
    fn len(&self) -> Res<u64> {
        self.store.len().map_err(err("len"))
    }

    /// A [`Store::snapshot`]: a read transaction, as the peers' readers.
    fn reader(&self) -> Res<Box<dyn Reader + '_>> {
        let s = self.store.snapshot().map_err(err("snapshot"))?;
        Ok(Box::new(FerriteReader(s)))
    }

    fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    fn counters_observed(&self) -> bool {
        true
    }

    fn file_bytes(&self) -> Option<u64> {
        Some(FerriteSubject::file_bytes(self))
    }
}

struct FerriteReader(Snapshot);

impl Reader for FerriteReader {
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Res<bool> {
        self.0.get_into(key, out).map_err(err("get"))
    }

    fn scan(&mut self, from: &[u8], limit: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<usize> {
        if limit == 0 {
            return Ok(0);
        }
        let mut n = 0;
        self.0
            .range_with(&KeyRange::new(from..), &mut |k, v| {
                f(k, v);
                n += 1;
                n < limit
            })
            .map_err(err("range"))?;
        Ok(n)
    }

    fn for_each(&mut self, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<u64> {
        let mut n = 0u64;
        self.0
            .range_with(&KeyRange::all(), &mut |k, v| {
                f(k, v);
                n += 1;
                true
            })
            .map_err(err("range"))?;
        Ok(n)
    }
}

// ---------------------------------------------------------------------
// LMDB
// ---------------------------------------------------------------------

/// LMDB ([`crate::peers::lmdb`]) with its default durable commits, `MDB_NOSYNC`
/// in the nosync phase.
pub struct LmdbSubject(pub LmdbStore);

struct LmdbTxn<'a, 'b>(&'b mut crate::peers::lmdb::LmdbWrite<'a>);

impl Txn for LmdbTxn<'_, '_> {
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Res<()> {
        self.0.put(key, value).map_err(err("lmdb put"))
    }

    fn remove(&mut self, key: &[u8]) -> Res<()> {
        self.0.delete(key).map(drop).map_err(err("lmdb delete"))
    }

    fn pop_first(&mut self) -> Res<bool> {
        self.0.pop_first().map_err(err("lmdb pop"))
    }

    fn pop_last(&mut self) -> Res<bool> {
        self.0.pop_last().map_err(err("lmdb pop"))
    }

    fn retain(&mut self, keep: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Res<u64> {
        self.0.retain(keep).map_err(err("lmdb retain"))
    }

    fn extract_if(
        &mut self,
        start: &[u8],
        end: &[u8],
        take: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Res<u64> {
        self.0
            .extract_if(start, end, take)
            .map_err(err("lmdb extract_if"))
    }

    /// `MDB_APPEND`, as redb's benchmark does for LMDB.
    fn insert_sorted(&mut self, pairs: &[(Vec<u8>, Vec<u8>)]) -> Res<()> {
        for (k, v) in pairs {
            self.0.append(k, v).map_err(err("lmdb append"))?;
        }
        Ok(())
    }
}

impl Subject for LmdbSubject {
    fn dir(&self) -> &std::path::Path {
        self.0.path()
    }

    fn write(&mut self, f: &mut dyn FnMut(&mut dyn Txn) -> Res<u64>) -> Res<Committed> {
        let mut w = self.0.write_txn().map_err(err("lmdb txn"))?;
        let ops = f(&mut LmdbTxn(&mut w))?;
        w.commit().map_err(err("lmdb commit"))?;
        Ok(Committed::one(ops))
    }

    fn set_sync(&mut self, on: bool) -> Res<()> {
        self.0.set_nosync(!on).map_err(err("lmdb set_flags"))
    }

    fn len(&self) -> Res<u64> {
        let r = self.0.read_txn().map_err(err("lmdb read txn"))?;
        r.len().map_err(err("lmdb len"))
    }

    fn reader(&self) -> Res<Box<dyn Reader + '_>> {
        let r = self.0.read_txn().map_err(err("lmdb read txn"))?;
        Ok(Box::new(r))
    }
}

impl Reader for crate::peers::lmdb::LmdbRead<'_> {
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Res<bool> {
        out.clear();
        match crate::peers::lmdb::LmdbRead::get(self, key).map_err(err("lmdb get"))? {
            Some(v) => {
                out.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn scan(&mut self, from: &[u8], limit: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<usize> {
        crate::peers::lmdb::LmdbRead::scan(self, from, limit, f).map_err(err("lmdb range"))
    }

    fn for_each(&mut self, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<u64> {
        crate::peers::lmdb::LmdbRead::for_each(self, f).map_err(err("lmdb iter"))
    }
}

// ---------------------------------------------------------------------
// redb
// ---------------------------------------------------------------------

const TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("x");

/// redb: one file on `/dev/shm`, its page cache set as redb's benchmark
/// sets it; `Durability::Immediate` (redb's default) per commit,
/// `Durability::None` in the nosync phase; sorted inserts through its
/// appending cursor.
pub struct RedbSubject {
    db: redb::Database,
    durability: redb::Durability,
    dir: tempfile::TempDir,
}

impl RedbSubject {
    pub fn create(cache_bytes: usize) -> Res<RedbSubject> {
        let dir = tempfile::Builder::new()
            .prefix("ferrite-bench-redb-peer-")
            .tempdir_in(SHM)
            .map_err(|e| format!("temporary directory in {SHM}: {e}"))?;
        let db = redb::Database::builder()
            .set_cache_size(cache_bytes)
            .create(dir.path().join("data.redb"))
            .map_err(err("redb create"))?;
        let txn = db.begin_write().map_err(err("redb txn"))?;
        txn.open_table(TABLE).map_err(err("redb table"))?;
        txn.commit().map_err(err("redb commit"))?;
        Ok(RedbSubject {
            db,
            durability: redb::Durability::Immediate,
            dir,
        })
    }
}

struct RedbTxn<'a, 'b>(&'b mut redb::Table<'a, &'static [u8], &'static [u8]>);

impl Txn for RedbTxn<'_, '_> {
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Res<()> {
        self.0
            .insert(key, value)
            .map(drop)
            .map_err(err("redb insert"))
    }

    fn remove(&mut self, key: &[u8]) -> Res<()> {
        self.0.remove(key).map(drop).map_err(err("redb remove"))
    }

    fn pop_first(&mut self) -> Res<bool> {
        Ok(self.0.pop_first().map_err(err("redb pop"))?.is_some())
    }

    fn pop_last(&mut self) -> Res<bool> {
        Ok(self.0.pop_last().map_err(err("redb pop"))?.is_some())
    }

    fn retain(&mut self, keep: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Res<u64> {
        let mut removed = 0u64;
        self.0
            .retain(|k, v| {
                let kept = keep(k, v);
                removed += u64::from(!kept);
                kept
            })
            .map_err(err("redb retain"))?;
        Ok(removed)
    }

    fn extract_if(
        &mut self,
        start: &[u8],
        end: &[u8],
        take: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Res<u64> {
        let mut n = 0u64;
        for item in self
            .0
            .extract_from_if(start..end, |k, v| take(k, v))
            .map_err(err("redb extract_if"))?
        {
            item.map_err(err("redb extract_if"))?;
            n += 1;
        }
        Ok(n)
    }

    /// redb's appending cursor, as redb's benchmark uses it: buffers the
    /// inserts and splices packed leaves into the tree.
    fn insert_sorted(&mut self, pairs: &[(Vec<u8>, Vec<u8>)]) -> Res<()> {
        let mut cursor = self
            .0
            .upper_bound_mut(Bound::<&[u8]>::Unbounded)
            .map_err(err("redb cursor"))?;
        for (k, v) in pairs {
            cursor
                .insert_before(k.as_slice(), v.as_slice())
                .map_err(err("redb cursor insert"))?;
        }
        cursor.close().map_err(err("redb cursor close"))
    }
}

impl Subject for RedbSubject {
    fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    fn write(&mut self, f: &mut dyn FnMut(&mut dyn Txn) -> Res<u64>) -> Res<Committed> {
        let mut txn = self.db.begin_write().map_err(err("redb txn"))?;
        txn.set_durability(self.durability)
            .map_err(err("redb durability"))?;
        let ops = {
            let mut t = txn.open_table(TABLE).map_err(err("redb table"))?;
            f(&mut RedbTxn(&mut t))?
        };
        txn.commit().map_err(err("redb commit"))?;
        Ok(Committed::one(ops))
    }

    fn set_sync(&mut self, on: bool) -> Res<()> {
        self.durability = if on {
            redb::Durability::Immediate
        } else {
            redb::Durability::None
        };
        Ok(())
    }

    fn len(&self) -> Res<u64> {
        use redb::{ReadableDatabase, ReadableTableMetadata};
        let txn = self.db.begin_read().map_err(err("redb read txn"))?;
        let t = txn.open_table(TABLE).map_err(err("redb table"))?;
        t.len().map_err(err("redb len"))
    }

    fn reader(&self) -> Res<Box<dyn Reader + '_>> {
        use redb::ReadableDatabase;
        let txn = self.db.begin_read().map_err(err("redb read txn"))?;
        let table = txn.open_table(TABLE).map_err(err("redb table"))?;
        Ok(Box::new(RedbReader { table, _txn: txn }))
    }
}

struct RedbReader {
    table: redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
    _txn: redb::ReadTransaction,
}

impl Reader for RedbReader {
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Res<bool> {
        use redb::ReadableTable;
        out.clear();
        match ReadableTable::get(&self.table, key).map_err(err("redb get"))? {
            Some(v) => {
                out.extend_from_slice(v.value());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn scan(&mut self, from: &[u8], limit: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<usize> {
        use redb::ReadableTable;
        let mut n = 0;
        for item in ReadableTable::range(&self.table, from..)
            .map_err(err("redb range"))?
            .take(limit)
        {
            let (k, v) = item.map_err(err("redb range"))?;
            f(k.value(), v.value());
            n += 1;
        }
        Ok(n)
    }

    fn for_each(&mut self, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<u64> {
        use redb::ReadableTable;
        let mut n = 0u64;
        for item in self.table.iter().map_err(err("redb iter"))? {
            let (k, v) = item.map_err(err("redb iter"))?;
            f(k.value(), v.value());
            n += 1;
        }
        Ok(n)
    }
}

// ---------------------------------------------------------------------
// fjall
// ---------------------------------------------------------------------

/// fjall: its single-writer transactional database (as in redb's
/// benchmark) in a directory on `/dev/shm`; each commit persists the
/// journal with `PersistMode::SyncAll` (fsync), and with none in the
/// nosync phase (the commit stays in fjall's journal buffer).
pub struct FjallSubject {
    ks: fjall::SingleWriterTxKeyspace,
    db: fjall::SingleWriterTxDatabase,
    persist: Option<fjall::PersistMode>,
    dir: tempfile::TempDir,
}

impl FjallSubject {
    pub fn create(cache_bytes: u64) -> Res<FjallSubject> {
        let dir = tempfile::Builder::new()
            .prefix("ferrite-bench-fjall-")
            .tempdir_in(SHM)
            .map_err(|e| format!("temporary directory in {SHM}: {e}"))?;
        let db = fjall::SingleWriterTxDatabase::builder(dir.path().join("db"))
            .cache_size(cache_bytes)
            .open()
            .map_err(err("fjall open"))?;
        let ks = db
            .keyspace("x", fjall::KeyspaceCreateOptions::default)
            .map_err(err("fjall keyspace"))?;
        Ok(FjallSubject {
            ks,
            db,
            persist: Some(fjall::PersistMode::SyncAll),
            dir,
        })
    }
}

struct FjallTxn<'a, 'b> {
    tx: &'b mut fjall::SingleWriterWriteTx<'a>,
    ks: &'b fjall::SingleWriterTxKeyspace,
}

impl FjallTxn<'_, '_> {
    fn pop(&mut self, first: bool) -> Res<bool> {
        use fjall::Readable;
        let g = if first {
            self.tx.first_key_value(self.ks)
        } else {
            self.tx.last_key_value(self.ks)
        };
        match g {
            None => Ok(false),
            Some(g) => {
                let k = g.key().map_err(err("fjall pop"))?;
                self.tx.remove(self.ks, k);
                Ok(true)
            }
        }
    }
}

impl Txn for FjallTxn<'_, '_> {
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Res<()> {
        self.tx.insert(self.ks, key, value);
        Ok(())
    }

    fn remove(&mut self, key: &[u8]) -> Res<()> {
        self.tx.remove(self.ks, key);
        Ok(())
    }

    fn pop_first(&mut self) -> Res<bool> {
        self.pop(true)
    }

    fn pop_last(&mut self) -> Res<bool> {
        self.pop(false)
    }

    /// fjall's transaction has no cursor delete: collect, then remove (as
    /// redb's benchmark does).
    fn retain(&mut self, keep: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Res<u64> {
        use fjall::Readable;
        let mut doomed = Vec::new();
        for g in self.tx.iter(self.ks) {
            let (k, v) = g.into_inner().map_err(err("fjall iter"))?;
            if !keep(&k, &v) {
                doomed.push(k);
            }
        }
        let n = doomed.len() as u64;
        for k in doomed {
            self.tx.remove(self.ks, k);
        }
        Ok(n)
    }

    fn extract_if(
        &mut self,
        start: &[u8],
        end: &[u8],
        take: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Res<u64> {
        use fjall::Readable;
        let mut doomed = Vec::new();
        for g in self.tx.range(self.ks, start..end) {
            let (k, v) = g.into_inner().map_err(err("fjall range"))?;
            if take(&k, &v) {
                doomed.push(k);
            }
        }
        let n = doomed.len() as u64;
        for k in doomed {
            self.tx.remove(self.ks, k);
        }
        Ok(n)
    }
}

impl Subject for FjallSubject {
    fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    fn write(&mut self, f: &mut dyn FnMut(&mut dyn Txn) -> Res<u64>) -> Res<Committed> {
        let mut tx = self.db.write_tx().durability(self.persist);
        let ops = f(&mut FjallTxn {
            tx: &mut tx,
            ks: &self.ks,
        })?;
        tx.commit().map_err(err("fjall commit"))?;
        Ok(Committed::one(ops))
    }

    fn set_sync(&mut self, on: bool) -> Res<()> {
        self.persist = on.then_some(fjall::PersistMode::SyncAll);
        Ok(())
    }

    /// fjall counts by iterating (`Readable::len`).
    fn len(&self) -> Res<u64> {
        use fjall::Readable;
        let snap = self.db.read_tx();
        snap.len(&self.ks)
            .map(|n| n as u64)
            .map_err(err("fjall len"))
    }

    fn reader(&self) -> Res<Box<dyn Reader + '_>> {
        Ok(Box::new(FjallReader {
            snap: self.db.read_tx(),
            ks: &self.ks,
        }))
    }
}

struct FjallReader<'a> {
    snap: fjall::Snapshot,
    ks: &'a fjall::SingleWriterTxKeyspace,
}

impl Reader for FjallReader<'_> {
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Res<bool> {
        use fjall::Readable;
        out.clear();
        match self.snap.get(self.ks, key).map_err(err("fjall get"))? {
            Some(v) => {
                out.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn scan(&mut self, from: &[u8], limit: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<usize> {
        use fjall::Readable;
        let mut n = 0;
        for g in self.snap.range(self.ks, from..).take(limit) {
            let (k, v) = g.into_inner().map_err(err("fjall range"))?;
            f(&k, &v);
            n += 1;
        }
        Ok(n)
    }

    fn for_each(&mut self, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<u64> {
        use fjall::Readable;
        let mut n = 0u64;
        for g in self.snap.iter(self.ks) {
            let (k, v) = g.into_inner().map_err(err("fjall iter"))?;
            f(&k, &v);
            n += 1;
        }
        Ok(n)
    }
}

/// Bytes of one pair of the workload (the sorted phase's keys are 8 longer).
pub const PAIR_BYTES: u64 = (KEY_BYTES + VALUE_BYTES) as u64;
