//! The systems of the redb comparison workload behind one interface
//! ([`Subject`]): Ferrite's engines, LMDB, redb and fjall. See the parent
//! module for what each phase asks of them and how each one commits.

use super::{KEY_BYTES, VALUE_BYTES};
use crate::lmdb::{LmdbStore, SHM};
use ferrite_engine::{Domain, EngineError, EngineKind, KeyRange, Op, Session, Store};
use ferrite_engine::{StoreOptions, StoreSession};
use parking_lot::Mutex;
use std::hash::Hasher;
use std::ops::Bound;
use std::time::{Duration, Instant};

/// Errors of every system, as text (converted only on the error path).
pub type Res<T> = Result<T, String>;

fn err<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// One write transaction of a system: what redb's benchmark calls an
/// inserter. Ferrite's collects the writes and applies them as one batch
/// at commit (it has no transaction that reads its own writes), so only
/// `insert` and `remove` are asked of it; the read-modify-write phases
/// go through [`Subject::retain`], [`Subject::extract_if`] and
/// [`Subject::pop`], which Ferrite implements as a scan and a batch.
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

/// A read view: a read transaction (LMDB, redb), a snapshot (fjall) or a
/// session (Ferrite, whose reads see every committed write).
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
    /// Batches the engine refused (too large, or the pool too full for
    /// them at once) and that were split; 0 for the peers.
    pub refused: u64,
}

impl Committed {
    fn one(ops: u64) -> Committed {
        Committed {
            commits: 1,
            batch_ops: ops,
            refused: 0,
        }
    }

    /// Adds `o`'s commits and refusals; keeps the larger batch.
    pub fn add(&mut self, o: Committed) {
        self.commits += o.commits;
        self.batch_ops = self.batch_ops.max(o.batch_ops);
        self.refused += o.refused;
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
    /// [`set_sync`](Self::set_sync) turned that off).
    fn write(&mut self, f: &mut dyn FnMut(&mut dyn Txn) -> Res<u64>) -> Res<Committed>;
    /// Turns durable commits on or off; false when the system cannot.
    fn set_sync(&mut self, on: bool) -> Res<bool>;
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
    /// The largest batch a Ferrite engine took (learned from refusals).
    fn batch_limit(&self) -> Option<usize> {
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

/// Sessions of a Ferrite store in this workload: the threaded reads'
/// most threads, the main thread's own and spares.
pub fn ferrite_sessions(max_threads: usize) -> u16 {
    u16::try_from(max_threads + 4).unwrap_or(1000).min(1000)
}

/// InP's log area per session. A batch must fit one log record: with
/// InP's default 128 KiB a batch of these 174-byte writes could hold about
/// 7 500 of them into an empty store but only about 1 100 into one of
/// 400 000 entries (measured), so redb's 1000-write batches would be split
/// at full scale; 1 MiB keeps them whole. Larger batches (the bulk load at
/// full scale) are still split ([`apply_batches`]).
pub const INP_LOG_BYTES: usize = 1 << 20;

/// The options every Ferrite store of the workload is created with.
pub fn ferrite_options(kind: EngineKind, max_threads: usize) -> StoreOptions {
    let mut o = StoreOptions::new(kind)
        .domain(Domain::Adr)
        .sessions(ferrite_sessions(max_threads));
    if kind == EngineKind::Inp {
        o.inp.log_bytes = INP_LOG_BYTES;
    }
    o
}

/// A Ferrite store in a pool file on `/dev/shm`.
pub struct FerriteSubject {
    // Field order: the session and store close before the directory goes.
    session: Mutex<StoreSession>,
    store: Store,
    /// The largest batch the engine took so far (learned from refusals,
    /// kept across repetitions so that only the first pays for them).
    limit: usize,
    dir: tempfile::TempDir,
}

impl FerriteSubject {
    /// A fresh store of `kind` in a pool of `pool_bytes`; `limit` is the
    /// batch size a previous repetition learned (`usize::MAX`: none).
    pub fn create(
        kind: EngineKind,
        pool_bytes: u64,
        max_threads: usize,
        limit: usize,
    ) -> Res<FerriteSubject> {
        let dir = tempfile::Builder::new()
            .prefix("ferrite-bench-redb-")
            .tempdir_in(SHM)
            .map_err(|e| format!("temporary directory in {SHM}: {e}"))?;
        let store = Store::create_file(
            dir.path().join("store.pool"),
            pool_bytes,
            &ferrite_options(kind, max_threads),
        )
        .map_err(|e| format!("{kind} store: {e}"))?;
        let session = store.session().map_err(|e| format!("session: {e}"))?;
        Ok(FerriteSubject {
            session: Mutex::new(session),
            store,
            limit,
            dir,
        })
    }

    pub fn store(&self) -> &Store {
        &self.store
    }
}

/// Applies `ops` as batches of at most `*limit` operations: all of them
/// as one batch when the engine takes it, else split in the largest
/// batches it takes. A refused batch applied nothing (the engine's
/// contract), so the split is exact. `*limit` keeps what was learned.
pub fn apply_batches(
    s: &mut StoreSession,
    ops: &[Op<'_>],
    limit: &mut usize,
) -> Result<Committed, EngineError> {
    let mut c = Committed::default();
    let mut at = 0;
    while at < ops.len() {
        let n = (*limit).min(ops.len() - at).max(1);
        match s.batch(&ops[at..at + n]) {
            Ok(()) => {
                at += n;
                c.commits += 1;
                c.batch_ops = c.batch_ops.max(n as u64);
            }
            Err(EngineError::BatchTooLarge { max, .. }) if n > 1 => {
                // The engine's estimate of what fits; halve when it is
                // no smaller than what was just refused.
                *limit = if max > 0 && max < n { max } else { n / 2 };
                c.refused += 1;
            }
            Err(EngineError::Full(_)) if n > 1 => {
                *limit = n / 2;
                c.refused += 1;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(c)
}

/// Keys (and values) collected for one Ferrite batch, in one buffer.
#[derive(Default)]
struct OpBuf {
    bytes: Vec<u8>,
    /// (start, key length, value length or `None` for a delete).
    items: Vec<(usize, usize, Option<usize>)>,
}

impl OpBuf {
    fn put(&mut self, k: &[u8], v: &[u8]) {
        self.items.push((self.bytes.len(), k.len(), Some(v.len())));
        self.bytes.extend_from_slice(k);
        self.bytes.extend_from_slice(v);
    }

    fn delete(&mut self, k: &[u8]) {
        self.items.push((self.bytes.len(), k.len(), None));
        self.bytes.extend_from_slice(k);
    }

    fn ops(&self) -> Vec<Op<'_>> {
        self.items
            .iter()
            .map(|&(at, kl, vl)| {
                let key = &self.bytes[at..at + kl];
                match vl {
                    Some(vl) => Op::Put {
                        key,
                        value: &self.bytes[at + kl..at + kl + vl],
                    },
                    None => Op::Delete { key },
                }
            })
            .collect()
    }

    fn len(&self) -> u64 {
        self.items.len() as u64
    }
}

impl Txn for OpBuf {
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Res<()> {
        self.put(key, value);
        Ok(())
    }

    fn remove(&mut self, key: &[u8]) -> Res<()> {
        self.delete(key);
        Ok(())
    }
}

impl FerriteSubject {
    /// Applies `buf` durably: one write as the session's own `put` or
    /// `delete`, more as [`apply_batches`].
    fn commit(&mut self, buf: &OpBuf) -> Res<Committed> {
        let ops = buf.ops();
        let s = self.session.get_mut();
        match ops[..] {
            [Op::Put { key, value }] => s.put(key, value).map_err(err("put"))?,
            [Op::Delete { key }] => drop(s.delete(key).map_err(err("delete"))?),
            _ => return apply_batches(s, &ops, &mut self.limit).map_err(|e| e.to_string()),
        }
        Ok(Committed::one(1))
    }
}

/// Ferrite's `retain`: one scan of the whole store in key order, then one
/// batch deleting what `keep` refused (split only if the engine refuses
/// it). To be replaced by a write transaction when the engines have one.
pub fn ferrite_retain(
    f: &mut FerriteSubject,
    keep: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Res<(u64, Committed)> {
    let mut doomed = OpBuf::default();
    f.session
        .get_mut()
        .range_with(&KeyRange::all(), &mut |k, v| {
            if !keep(k, v) {
                doomed.delete(k);
            }
            true
        })
        .map_err(err("retain scan"))?;
    let c = f.commit(&doomed)?;
    Ok((doomed.len(), c))
}

/// Ferrite's `extract_if`: one scan of `start..end`, then one batch
/// deleting what `take` chose. To be replaced by a write transaction.
pub fn ferrite_extract_if(
    f: &mut FerriteSubject,
    start: &[u8],
    end: &[u8],
    take: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Res<(u64, Committed)> {
    let mut doomed = OpBuf::default();
    let range = KeyRange::bounds(
        Bound::Included(start.to_vec()),
        Bound::Excluded(end.to_vec()),
    );
    f.session
        .get_mut()
        .range_with(&range, &mut |k, v| {
            if take(k, v) {
                doomed.delete(k);
            }
            true
        })
        .map_err(err("extract_if scan"))?;
    let c = f.commit(&doomed)?;
    Ok((doomed.len(), c))
}

/// Ferrite's `n` alternating pops (first, last, first, …): they remove
/// the first ⌈n/2⌉ and the last ⌊n/2⌋ entries, so one forward scan, one
/// backward scan (stopping where the forward one ended) and one batch of
/// deletes. To be replaced by a write transaction.
pub fn ferrite_pop(f: &mut FerriteSubject, n: u64) -> Res<Popped> {
    let (front, back) = (n.div_ceil(2), n / 2);
    let mut doomed = OpBuf::default();
    let mut last_front: Vec<u8> = Vec::new();
    let s = f.session.get_mut();
    let mut seen = 0u64;
    s.range_with(&KeyRange::all(), &mut |k, _| {
        if seen == front {
            return false;
        }
        doomed.delete(k);
        last_front.clear();
        last_front.extend_from_slice(k);
        seen += 1;
        seen < front
    })
    .map_err(err("pop scan"))?;
    let mut seen = 0u64;
    if back > 0 {
        s.range_with(&KeyRange::all().rev(), &mut |k, _| {
            if k <= last_front.as_slice() {
                return false;
            }
            doomed.delete(k);
            seen += 1;
            seen < back
        })
        .map_err(err("pop scan back"))?;
    }
    let committed = f.commit(&doomed)?;
    Ok(Popped {
        popped: doomed.len(),
        estimate: None,
        committed,
    })
}

impl Subject for FerriteSubject {
    fn write(&mut self, f: &mut dyn FnMut(&mut dyn Txn) -> Res<u64>) -> Res<Committed> {
        let mut buf = OpBuf::default();
        f(&mut buf)?;
        self.commit(&buf)
    }

    fn set_sync(&mut self, on: bool) -> Res<bool> {
        Ok(on)
    }

    /// The engine's count of live keys ([`Store::stats`]): a counter for
    /// InP and CoW, a merge of the memtable and the runs for LSM.
    fn len(&self) -> Res<u64> {
        Ok(self.store.stats().keys)
    }

    fn reader(&self) -> Res<Box<dyn Reader + '_>> {
        let s = self.store.session().map_err(err("session"))?;
        Ok(Box::new(FerriteReader(s)))
    }

    fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    fn counters_observed(&self) -> bool {
        true
    }

    fn batch_limit(&self) -> Option<usize> {
        Some(self.limit)
    }

    fn retain(&mut self, keep: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Res<(u64, Committed)> {
        ferrite_retain(self, keep)
    }

    fn extract_if(
        &mut self,
        start: &[u8],
        end: &[u8],
        take: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Res<(u64, Committed)> {
        ferrite_extract_if(self, start, end, take)
    }

    fn pop(&mut self, n: u64, _len: u64, _sample: u64) -> Res<Popped> {
        ferrite_pop(self, n)
    }
}

struct FerriteReader(StoreSession);

impl Reader for FerriteReader {
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Res<bool> {
        self.0.get_into(key, out).map_err(err("get"))
    }

    fn scan(&mut self, from: &[u8], limit: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<usize> {
        self.0.scan_with(from, limit, f).map_err(err("scan"))
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

/// LMDB ([`crate::lmdb`]) with its default durable commits, `MDB_NOSYNC`
/// in the nosync phase.
pub struct LmdbSubject(pub LmdbStore);

struct LmdbTxn<'a, 'b>(&'b mut crate::lmdb::LmdbWrite<'a>);

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

    fn set_sync(&mut self, on: bool) -> Res<bool> {
        self.0.set_nosync(!on).map_err(err("lmdb set_flags"))?;
        Ok(true)
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

impl Reader for crate::lmdb::LmdbRead<'_> {
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Res<bool> {
        out.clear();
        match crate::lmdb::LmdbRead::get(self, key).map_err(err("lmdb get"))? {
            Some(v) => {
                out.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn scan(&mut self, from: &[u8], limit: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<usize> {
        crate::lmdb::LmdbRead::scan(self, from, limit, f).map_err(err("lmdb range"))
    }

    fn for_each(&mut self, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<u64> {
        crate::lmdb::LmdbRead::for_each(self, f).map_err(err("lmdb iter"))
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

    fn set_sync(&mut self, on: bool) -> Res<bool> {
        self.durability = if on {
            redb::Durability::Immediate
        } else {
            redb::Durability::None
        };
        Ok(true)
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

    fn set_sync(&mut self, on: bool) -> Res<bool> {
        self.persist = on.then_some(fjall::PersistMode::SyncAll);
        Ok(true)
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
