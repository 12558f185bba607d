//! `ferrite bench engine`: the storage engines InP / CoW / LSM over both
//! allocators against LMDB, in the same run [P2 §4; issue 11, items 4-5].
//!
//! # Groups
//!
//! One interleaved group (see [`crate::measure`]) per workload × thread
//! count (1, 2) × Ferrite domain (`adr`, `eadr`; at quick scale `eadr`
//! only with one thread). A group holds LMDB (the baseline: every Ferrite
//! row's `ratio_vs_baseline` is its throughput ÷ LMDB's in the same
//! group) and the six Ferrite systems of that domain: `inp`, `cow`, `lsm`
//! × the `ferrite` heap and the `nstore-lock` heap. The two domains are
//! separate groups, each with its own LMDB row, because all the stores of
//! a group are alive at once: splitting halves the memory a group needs
//! and keeps every ratio within one interleaved run. LMDB does not run in
//! a Ferrite domain; its rows say `tmpfs`, its allocator `lmdb`, and its
//! counters are not observed (it persists with `write`/`fdatasync`).
//!
//! With the `rocksdb` feature every group also holds RocksDB
//! ([`crate::peers::rocksdb`]: Debian's librocksdb through its C API, WAL synced
//! per write, on `/dev/shm`), the LSM peer: variant and allocator
//! `rocksdb`, domain `tmpfs`, counters not observed, its ratio against
//! LMDB like every row; it also gets a recovery row (the reopen time).
//! Without the feature it is left out of the groups entirely.
//!
//! A row's `ops_per_s` / `ns_per_op` are the **mean** over the timed
//! repetitions (all their operations ÷ the sum of their wall times), not
//! the harness's median batch, because engines pay some costs in bursts
//! (an LSM flush or merge every few thousand writes) that a median batch
//! would leave out; the median is kept as `extra.median_ns_per_op`, and
//! `ns_per_op_spread` is the spread of the batches as usual. With two
//! threads the machine's two cores are both busy (and shared with
//! whatever else runs): the scaling the rows show is what 2 cores give.
//!
//! Every store of a group is created fresh (Ferrite: a pool file in a
//! temporary directory on `/dev/shm`, `Pool::create` with layout
//! [`ferrite_engine::LAYOUT`] and the group's domain, `Store::create`;
//! LMDB: [`crate::peers::lmdb::LmdbStore`] on `/dev/shm`) and loaded with the
//! workload's dataset before timing (untimed; LMDB loads in transactions
//! of 1000 writes, Ferrite by single puts). A store that cannot be created
//! or loaded — an engine not built, a full pool, not enough memory for it
//! — yields a row with `extra.skipped` = the reason and no measurement,
//! never an abort; a system that fails during the timed run (an error, a
//! read that misses a key the generator knows exists) likewise, with
//! `failed: …`.
//!
//! # Sizes
//!
//! | | quick | full | P2 |
//! |---|---|---|---|
//! | records loaded | 20 000 (≈ 20 MB) | 300 000 (≈ 300 MB) | 10 M |
//! | operations per batch (× 4 for ≥ 90 % reads) | 4 000 | 20 000 | 10 M per run |
//! | batches | warm-up + `reps` (7) (+ breakdown) | warm-up + `reps` (15) (+ breakdown) | 5 runs |
//! | TPC-C | 2 warehouses, quick cardinalities, 600 txns per batch | 2 warehouses, standard cardinalities, 5 000 | 8 warehouses |
//! | recovery dataset | 64 MiB | 1 GiB, 4 GiB | 1 and 4 GiB (issue) |
//!
//! Full scale is below P2's because a group keeps seven stores alive at
//! once, each Ferrite pool a tmpfs file of three times its data (room for
//! CoW copies and LSM runs): 300 000 records keep a group near 12 GB of
//! the machine's 24 GiB. A batch's operations are split between the
//! threads.
//!
//! # Workloads
//!
//! The same generator code ([`ferrite_workload`]) drives every system
//! through [`ferrite_workload::Kv`], one handle per thread (a
//! [`ferrite_engine::Session`] or an LMDB handle), opened at the start of
//! each batch. See [`workloads`] for the list, sizes and how `p2-h`
//! (delete until empty) is sized: its dataset holds exactly the keys the
//! warm-up and the timed repetitions delete, each thread deleting its own
//! partition, so the last repetition empties the store.
//!
//! # redb's workload
//!
//! [`redb_bench`] adds the phases of redb's own benchmark (bulk load,
//! individual, batch and nosync writes, len, random, range and threaded
//! reads, removals, retain, extract-if, pop, sorted inserts; 24-byte keys,
//! 150-byte values) on `inp`, `cow`, `lsm`, LMDB, redb and fjall: rows
//! `workload = redb-…`, LMDB the baseline, `extra.ratio_vs_redb` and
//! `extra.ratio_vs_fjall` beside it. It runs after the P2 groups;
//! `FERRITE_ENGINE_WORKLOADS=redb` ([`WORKLOADS_ENV`]) runs it alone.
//!
//! # Long run
//!
//! [`long_run`] times single durable puts on a store after a bulk load
//! (quick: 200 000 pairs; full: 5 M) and on a fresh one, interleaved, on
//! each engine: rows `workload = long-run`, `params.store` `fresh` /
//! `loaded`, `extra.ratio_vs_fresh`. It runs after the redb workload;
//! `FERRITE_ENGINE_WORKLOADS=long-run` runs it alone.
//!
//! # Latency
//!
//! Each operation (a TPC-C transaction counts as one) is timed in the
//! timed pass itself with two `Instant::now()` calls around it (tens of
//! nanoseconds: a few per cent of a 1-µs read, well under 1 % of a
//! durable write; every system pays the same) and recorded in a per-thread [`hdrhistogram`] (3 significant digits); the
//! warm-up batch is not recorded. Rows carry `extra.p50_us`, `p99_us`,
//! `p999_us` over all timed repetitions and threads.
//!
//! # Breakdown
//!
//! One-thread Ferrite rows carry P2's time breakdown as shares of the
//! operation time, `extra.scan` (finding: index descent, probes, reads),
//! `cc` (crash consistency: logs, flushes, fences, root switches), `mm`
//! (every allocator call) and `mod` (modifying the data, and the rest),
//! from [`ferrite_engine::breakdown`]'s phase timers in one extra,
//! untimed batch after the repetitions (the timers read the clock at each
//! phase switch, so they stay off in the timed pass). LMDB has no such
//! instrumentation; two-thread rows have none either (the pass runs one
//! thread).
//!
//! # Recovery
//!
//! For each engine × allocator a store is loaded with a dataset of `N`
//! bytes of 1000-byte values (quick: 64 MiB; full: 1 GiB and 4 GiB, a
//! row skipped when the machine lacks memory for the pool and its image:
//! LSM's 4 GiB pool, 2.5× its data, needs more than 24 GiB allow), settled with `quiesce`, and the pool image taken as is — the
//! store is never closed, so what the image holds is what a power failure
//! at that instant leaves (all acknowledged writes durable, nothing
//! shut down). `Store::open` of that image (allocator and engine
//! recovery) is timed `reps` times (at most [`RECOVERY_REPS`]), each on
//! a fresh copy: rows
//! `workload = recovery`, `extra.ms` (median), `extra.keys`. An LMDB row
//! times opening its environment after the same load.

use crate::ctx::BenchCtx;
use crate::error::BenchError;
use crate::measure::{Variant, run_interleaved};
use crate::peers::lmdb::{LmdbStore, SHM};
use crate::row::{Row, set_ratios};
use ferrite_engine::{
    AllocKind, EngineError, EngineKind, LAYOUT, Op, Session, Store, StoreOptions,
};
use ferrite_pmem::{Domain, Pool, PoolOptions};
use ferrite_workload::{BatchOp, Kv};
use hdrhistogram::Histogram;
use serde_json::json;
use std::sync::Mutex;
use std::time::Instant;

pub mod long_run;
pub mod recovery;
pub mod redb_bench;
pub mod workloads;

pub use recovery::{RECOVERY_REPS, recovery, recovery_pool_bytes};
pub use workloads::{Workload, WorkloadSpec};

// The suite's and its baseline's names (the claims read rows by them).
pub use ferrite_rows::claims::engine::{LMDB, SUITE};
/// Variant (and allocator) name of the RocksDB rows (feature `rocksdb`).
pub const ROCKSDB: &str = "rocksdb";
const MIB: u64 = 1 << 20;

// ---------------------------------------------------------------------
// Adapters
// ---------------------------------------------------------------------

/// A Ferrite session driven as a [`Kv`]: each call is the session's own
/// durable operation.
pub struct FerriteKv<'a>(pub Box<dyn Session + 'a>);

impl Kv for FerriteKv<'_> {
    type Error = EngineError;

    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, EngineError> {
        self.0.get_into(key, out)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), EngineError> {
        self.0.put(key, value)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, EngineError> {
        self.0.delete(key)
    }

    fn scan(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, EngineError> {
        self.0.scan_with(from, limit, &mut |k, v| {
            f(k, v);
            true
        })
    }

    fn batch(&mut self, ops: &[BatchOp<'_>]) -> Result<(), EngineError> {
        let ops: Vec<Op<'_>> = ops
            .iter()
            .map(|o| match *o {
                BatchOp::Put { key, value } => Op::Put { key, value },
                BatchOp::Delete { key } => Op::Delete { key },
            })
            .collect();
        self.0.batch(&ops)
    }
}

/// The [`Kv`] every driver sees: any system's, with its errors as text
/// (converted only on the error path), so one driver serves all systems.
pub type DynKv<'a> = dyn Kv<Error = String> + 'a;

/// Erases a [`Kv`]'s error type (see [`DynKv`]).
pub struct Erased<K>(pub K);

impl<K: Kv> Kv for Erased<K> {
    type Error = String;

    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, String> {
        self.0.get(key, out).map_err(|e| e.to_string())
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        self.0.put(key, value).map_err(|e| e.to_string())
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, String> {
        self.0.delete(key).map_err(|e| e.to_string())
    }

    fn scan(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, String> {
        self.0.scan(from, limit, f).map_err(|e| e.to_string())
    }

    fn batch(&mut self, ops: &[BatchOp<'_>]) -> Result<(), String> {
        self.0.batch(ops).map_err(|e| e.to_string())
    }
}

// ---------------------------------------------------------------------
// Systems
// ---------------------------------------------------------------------

/// One system measured: a Ferrite engine on an allocator in a domain,
/// LMDB, or RocksDB (created only with the `rocksdb` feature; without it
/// its rows are skipped with the reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    Ferrite {
        engine: EngineKind,
        alloc: AllocKind,
        domain: Domain,
    },
    Lmdb,
    Rocksdb,
}

impl System {
    /// The row's variant: the engine name or `lmdb`.
    pub fn variant(&self) -> &'static str {
        match self {
            System::Ferrite { engine, .. } => engine.name(),
            System::Lmdb => LMDB,
            System::Rocksdb => ROCKSDB,
        }
    }

    pub fn allocator(&self) -> &'static str {
        match self {
            System::Ferrite { alloc, .. } => alloc.name(),
            System::Lmdb => "lmdb",
            System::Rocksdb => ROCKSDB,
        }
    }

    pub fn domain(&self) -> &'static str {
        match self {
            System::Ferrite { domain, .. } => domain.name(),
            System::Lmdb | System::Rocksdb => "tmpfs",
        }
    }

    /// One-line label for progress notes.
    pub fn label(&self) -> String {
        format!("{}/{}/{}", self.variant(), self.allocator(), self.domain())
    }

    /// Every Ferrite engine × allocator in `domain`: the two heaps of a
    /// Ferrite pool, and with the `pmdk` feature in `adr` PMDK's
    /// `pmemobj` heap (P2's allocator axis; PMDK persists through its own
    /// flush path, which matches `adr` only).
    pub fn ferrite_all(domain: Domain) -> Vec<System> {
        let mut allocs = AllocKind::ALL.to_vec();
        if cfg!(feature = "pmdk") && domain == Domain::Adr {
            allocs.push(AllocKind::Pmdk);
        }
        let mut v = Vec::new();
        for engine in EngineKind::ALL {
            for &alloc in &allocs {
                v.push(System::Ferrite {
                    engine,
                    alloc,
                    domain,
                });
            }
        }
        v
    }

    /// The peers beside LMDB in every group: RocksDB with the `rocksdb`
    /// feature, else none.
    pub fn peers() -> Vec<System> {
        if cfg!(feature = "rocksdb") {
            vec![System::Rocksdb]
        } else {
            Vec::new()
        }
    }

    /// Whether ferrite-pmem's counters see all of the system's persists
    /// (not LMDB's or RocksDB's `fdatasync`, nor PMDK's own flushes under
    /// the engines).
    pub fn counters_observed(&self) -> bool {
        matches!(self, System::Ferrite { alloc, .. } if *alloc != AllocKind::Pmdk)
    }
}

/// A pool file in its own temporary directory on `/dev/shm`, removed on drop.
pub struct PoolFile {
    pub pool: Pool,
    _dir: tempfile::TempDir,
}

impl PoolFile {
    fn create(bytes: u64, domain: Domain) -> Result<PoolFile, String> {
        let dir = tempfile::Builder::new()
            .prefix("ferrite-bench-engine-")
            .tempdir_in(SHM)
            .map_err(|e| format!("temporary directory in {SHM}: {e}"))?;
        let pool = Pool::create(
            dir.path().join("store.pool"),
            &PoolOptions::new(LAYOUT, bytes).domain(domain),
        )
        .map_err(|e| format!("pool: {e}"))?;
        Ok(PoolFile { pool, _dir: dir })
    }
}

/// An open store of any system. Fields drop in order: the store before
/// the pool file that holds it.
pub enum Opened {
    Ferrite(Box<FerriteStore>),
    Lmdb(LmdbStore),
    /// RocksDB in a temporary directory on `/dev/shm`.
    #[cfg(feature = "rocksdb")]
    Rocksdb(crate::peers::rocksdb::RocksStore),
    /// An engine on PMDK's allocator, in a pmemobj pool on `/dev/shm`.
    #[cfg(feature = "pmdk")]
    Pmdk(Box<PmdkFile>),
}

/// A store on PMDK's allocator and the temporary directory of its pool
/// (the store, which closes the pool, drops first).
#[cfg(feature = "pmdk")]
pub struct PmdkFile {
    pub store: crate::peers::pmdk_alloc::PmdkStore,
    _dir: tempfile::TempDir,
}

/// A Ferrite store and the pool file holding it (dropped in that order).
pub struct FerriteStore {
    pub store: Store,
    pub file: PoolFile,
}

/// Pool bytes for `capacity` bytes of keys and values: room for the
/// engines' copies (CoW), runs and compaction (LSM), logs and allocator
/// metadata.
pub fn pool_bytes(capacity: u64) -> u64 {
    (capacity.saturating_mul(3) + 64 * MIB).next_multiple_of(MIB)
}

fn store_options(engine: EngineKind, alloc: AllocKind, threads: usize) -> StoreOptions {
    StoreOptions::new(engine)
        .allocator(alloc)
        .sessions((threads as u16).saturating_add(2).max(4))
}

impl Opened {
    /// Creates an empty store of `system` for up to `capacity` bytes of
    /// keys and values used by `threads` threads.
    pub fn create(system: System, capacity: u64, threads: usize) -> Result<Opened, String> {
        Self::create_sized(system, capacity, pool_bytes(capacity), threads)
    }

    /// As [`create`](Self::create) with a Ferrite pool of `pool` bytes.
    pub fn create_sized(
        system: System,
        capacity: u64,
        pool: u64,
        threads: usize,
    ) -> Result<Opened, String> {
        match system {
            System::Ferrite {
                engine,
                alloc: AllocKind::Pmdk,
                domain,
            } => {
                if domain != Domain::Adr {
                    return Err(format!(
                        "PMDK persists with its own flushes: no {domain} rows"
                    ));
                }
                Self::create_pmdk(engine, pool, threads)
            }
            System::Ferrite {
                engine,
                alloc,
                domain,
            } => {
                let file = PoolFile::create(pool, domain)?;
                let store = Store::create(&file.pool, &store_options(engine, alloc, threads))
                    .map_err(|e| format!("{engine} store: {e}"))?;
                Ok(Opened::Ferrite(Box::new(FerriteStore { store, file })))
            }
            System::Lmdb => LmdbStore::create(capacity, threads)
                .map(Opened::Lmdb)
                .map_err(|e| e.to_string()),
            System::Rocksdb => Self::create_rocksdb(),
        }
    }

    #[cfg(feature = "rocksdb")]
    fn create_rocksdb() -> Result<Opened, String> {
        crate::peers::rocksdb::RocksStore::create()
            .map(Opened::Rocksdb)
            .map_err(|e| e.to_string())
    }

    #[cfg(not(feature = "rocksdb"))]
    fn create_rocksdb() -> Result<Opened, String> {
        Err("built without the rocksdb feature".into())
    }

    #[cfg(feature = "pmdk")]
    fn create_pmdk(engine: EngineKind, pool: u64, threads: usize) -> Result<Opened, String> {
        let dir = tempfile::Builder::new()
            .prefix("ferrite-bench-engine-pmdk-")
            .tempdir_in(SHM)
            .map_err(|e| format!("temporary directory in {SHM}: {e}"))?;
        let opts = store_options(engine, AllocKind::Pmdk, threads);
        let store =
            crate::peers::pmdk_alloc::pmdk_store(&dir.path().join("store.pmdk"), pool, &opts)
                .map_err(|e| format!("{engine} store on pmdk: {e}"))?;
        Ok(Opened::Pmdk(Box::new(PmdkFile { store, _dir: dir })))
    }

    #[cfg(not(feature = "pmdk"))]
    fn create_pmdk(_: EngineKind, _: u64, _: usize) -> Result<Opened, String> {
        Err("built without the pmdk feature".into())
    }

    /// Runs `f` with a fresh per-thread handle (a session, for Ferrite).
    pub fn with_kv<R>(&self, f: impl FnOnce(&mut DynKv<'_>) -> R) -> Result<R, String> {
        match self {
            Opened::Ferrite(fs) => {
                let s = fs.store.session().map_err(|e| format!("session: {e}"))?;
                let mut kv = Erased(FerriteKv(Box::new(s)));
                Ok(f(&mut kv))
            }
            #[cfg(feature = "pmdk")]
            Opened::Pmdk(p) => {
                let s = p.store.session().map_err(|e| format!("session: {e}"))?;
                let mut kv = Erased(FerriteKv(Box::new(s)));
                Ok(f(&mut kv))
            }
            Opened::Lmdb(l) => {
                let mut kv = Erased(l.kv());
                Ok(f(&mut kv))
            }
            #[cfg(feature = "rocksdb")]
            Opened::Rocksdb(r) => {
                let mut kv = Erased(r.kv());
                Ok(f(&mut kv))
            }
        }
    }

    /// Loads through `load` with the system's loading handle (LMDB: write
    /// transactions of 1000 writes; RocksDB: unsynced writes, the WAL
    /// synced at the end; Ferrite: its sessions' own writes).
    pub fn load(
        &self,
        load: impl FnOnce(&mut DynKv<'_>) -> Result<u64, String>,
    ) -> Result<u64, String> {
        match self {
            Opened::Ferrite(_) => self.with_kv(load)?,
            #[cfg(feature = "pmdk")]
            Opened::Pmdk(_) => self.with_kv(load)?,
            Opened::Lmdb(l) => {
                let mut kv = Erased(l.bulk(1000));
                let n = load(&mut kv)?;
                kv.0.finish().map_err(|e| format!("lmdb commit: {e}"))?;
                Ok(n)
            }
            #[cfg(feature = "rocksdb")]
            Opened::Rocksdb(r) => {
                let mut kv = Erased(r.bulk());
                let n = load(&mut kv)?;
                kv.0.finish().map_err(|e| e.to_string())?;
                Ok(n)
            }
        }
    }

    /// The Ferrite pool, if any.
    pub fn pool(&self) -> Option<&Pool> {
        match self {
            Opened::Ferrite(f) => Some(&f.file.pool),
            Opened::Lmdb(_) => None,
            #[cfg(feature = "rocksdb")]
            Opened::Rocksdb(_) => None,
            #[cfg(feature = "pmdk")]
            Opened::Pmdk(_) => None,
        }
    }
}

// ---------------------------------------------------------------------
// Latency
// ---------------------------------------------------------------------

/// A latency histogram in nanoseconds, 1 ns .. 100 s, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid histogram bounds")
}

/// `p50_us`, `p99_us`, `p999_us` of `h` into `row.extra` (nothing when empty).
pub fn set_latency(row: &mut Row, h: &Histogram<u64>) {
    if h.is_empty() {
        return;
    }
    for (key, q) in [("p50_us", 0.5), ("p99_us", 0.99), ("p999_us", 0.999)] {
        let us = h.value_at_quantile(q) as f64 / 1000.0;
        row.set_extra(key, (us * 100.0).round() / 100.0);
    }
}

// ---------------------------------------------------------------------
// Groups
// ---------------------------------------------------------------------

/// One thread's state in one variant: its operation stream and latencies.
struct ThreadState {
    driver: Box<dyn workloads::Driver>,
    hist: Histogram<u64>,
    /// Batches run so far (the first is the warm-up, not recorded).
    batches: u64,
    /// Seconds of each timed batch on this thread, session opening included.
    batch_secs: Vec<f64>,
}

/// A system of a group, ready to run or skipped.
struct Member {
    system: System,
    opened: Option<Opened>,
    skipped: Option<String>,
    loaded: u64,
    threads: Vec<Mutex<ThreadState>>,
    failed: Mutex<Option<String>>,
}

/// The identity params of a row of `system` on `w`.
fn params(system: System, w: &dyn Workload) -> serde_json::Value {
    json!({
        "workload": w.name(),
        "allocator": system.allocator(),
        "domain": system.domain(),
        "value_bytes": w.value_bytes(),
    })
}

/// A row that measured nothing, saying why.
pub fn skipped_row(variant: &str, params: serde_json::Value, threads: usize, why: &str) -> Row {
    let mut r = Row::empty(SUITE, variant, params);
    r.threads = threads;
    r.set_extra("skipped", why);
    r
}

/// Runs one interleaved group: `systems` (LMDB among them is the
/// baseline) on workload `w` with `threads` threads, each batch being
/// `ops_per_thread` operations per thread.
pub fn run_group(
    ctx: &BenchCtx,
    w: &dyn Workload,
    systems: &[System],
    threads: usize,
    ops_per_thread: u64,
) -> Vec<Row> {
    let capacity = w.capacity_bytes();
    let members: Vec<Member> = systems
        .iter()
        .map(|&system| open_member(ctx, w, system, capacity, threads))
        .collect();

    let has_lmdb = members
        .iter()
        .any(|m| m.system == System::Lmdb && m.opened.is_some());
    let mut variants: Vec<Variant<'_>> = Vec::new();
    let mut measured: Vec<usize> = Vec::new();
    for (i, m) in members.iter().enumerate() {
        if let Some(v) = member_variant(m, w, threads, ops_per_thread, has_lmdb) {
            variants.push(v);
            measured.push(i);
        }
    }
    let measured_rows = run_interleaved(ctx, SUITE, &mut variants);
    drop(variants);
    let breakdowns: Vec<Option<[f64; 4]>> = members
        .iter()
        .map(|m| {
            (threads == 1 && matches!(m.system, System::Ferrite { .. }))
                .then(|| breakdown_pass(m, ops_per_thread))
                .flatten()
        })
        .collect();

    let mut rows = Vec::with_capacity(members.len());
    let mut it = measured.iter().zip(measured_rows);
    let mut next = it.next();
    for (i, m) in members.iter().enumerate() {
        let params = params(m.system, w);
        let row = match next.take() {
            Some((&j, row)) if j == i => {
                next = it.next();
                row
            }
            other => {
                next = other;
                let why = m.skipped.clone().unwrap_or_else(|| "not run".into());
                let mut r = skipped_row(m.system.variant(), params, threads, &why);
                if has_lmdb && m.system != System::Lmdb {
                    r.baseline = Some(LMDB.into());
                }
                rows.push(r);
                continue;
            }
        };
        rows.push(member_row(m, row, params, threads, breakdowns[i]));
    }
    // Ratios of the mean throughputs; none for skipped rows, and none at
    // all when LMDB (the baseline) did not run.
    set_ratios(&mut rows);
    let no_baseline = rows
        .iter()
        .any(|r| r.variant == LMDB && r.extra_str("skipped").is_some());
    for r in &mut rows {
        if no_baseline || r.extra_str("skipped").is_some() {
            r.ratio_vs_baseline = None;
        }
    }
    rows
}

/// A group's member: `system` created for `w`'s capacity and loaded, or
/// skipped (saying why) when it cannot be created or loaded, or the
/// machine lacks the memory for it.
fn open_member(
    ctx: &BenchCtx,
    w: &dyn Workload,
    system: System,
    capacity: u64,
    threads: usize,
) -> Member {
    let t0 = Instant::now();
    let mut m = Member {
        system,
        opened: None,
        skipped: None,
        loaded: 0,
        threads: Vec::new(),
        failed: Mutex::new(None),
    };
    // Every store of the group lives until the group ends: refuse one
    // the machine has no memory for rather than push it into swap or
    // the OOM killer (tmpfs pool files are committed memory).
    let need = match system {
        System::Ferrite { .. } => pool_bytes(capacity),
        System::Lmdb | System::Rocksdb => capacity * 2,
    };
    let created = match mem_available() {
        Some(avail) if avail < need + need / 4 + 512 * MIB => Err(format!(
            "not enough memory: needs {} MiB, {} MiB available",
            need / MIB,
            avail / MIB
        )),
        _ => Opened::create(system, capacity, threads),
    };
    match created.and_then(|o| o.load(|kv| w.load(kv)).map(|n| (o, n))) {
        Ok((o, n)) => {
            m.opened = Some(o);
            m.loaded = n;
            m.threads = (0..threads)
                .map(|t| {
                    Mutex::new(ThreadState {
                        driver: w.driver(t, threads),
                        hist: new_histogram(),
                        batches: 0,
                        batch_secs: Vec::new(),
                    })
                })
                .collect();
            ctx.note(format!(
                "[engine] {} {} x{threads}: loaded {n} records in {:.2} s",
                w.name(),
                system.label(),
                t0.elapsed().as_secs_f64()
            ));
        }
        Err(e) => {
            ctx.note(format!(
                "[engine] {} {}: skipped ({e})",
                w.name(),
                system.label()
            ));
            m.skipped = Some(e);
        }
    }
    m
}

/// The interleaved variant of an opened member: each batch runs `n`
/// operations of the thread's driver, recording their latencies (not in
/// the warm-up batch) and the batch's time; the first error stops the
/// member. `None` for a member that was skipped.
fn member_variant<'m>(
    m: &'m Member,
    w: &dyn Workload,
    threads: usize,
    ops_per_thread: u64,
    has_lmdb: bool,
) -> Option<Variant<'m>> {
    let opened = m.opened.as_ref()?;
    let states = &m.threads;
    let failed = &m.failed;
    let body = move |t: usize, n: u64| {
        if failed.lock().map(|f| f.is_some()).unwrap_or(true) {
            return;
        }
        let Ok(mut st) = states[t].lock() else {
            return;
        };
        let st = &mut *st;
        let record = st.batches > 0;
        st.batches += 1;
        let started = Instant::now();
        let r = opened.with_kv(|kv| -> Result<(), String> {
            for _ in 0..n {
                let t0 = Instant::now();
                st.driver.step(kv)?;
                if record {
                    let ns = t0.elapsed().as_nanos() as u64;
                    st.hist.saturating_record(ns.max(1));
                }
            }
            Ok(())
        });
        if record {
            st.batch_secs.push(started.elapsed().as_secs_f64());
        }
        if let Err(e) | Ok(Err(e)) = r
            && let Ok(mut f) = failed.lock()
        {
            f.get_or_insert(e);
        }
    };
    let mut v = Variant::threaded(
        m.system.variant(),
        params(m.system, w),
        threads,
        ops_per_thread,
        body,
    );
    if has_lmdb && m.system != System::Lmdb {
        v = v.baseline(LMDB);
    }
    Some(v)
}

/// A measured member's row: its threads' latencies merged, the mean
/// throughput, the time breakdown when taken, the records loaded; or a
/// skipped row when the member failed during the run.
fn member_row(
    m: &Member,
    mut row: Row,
    params: serde_json::Value,
    threads: usize,
    breakdown: Option<[f64; 4]>,
) -> Row {
    if let Some(e) = m.failed.lock().ok().and_then(|f| f.clone()) {
        let mut r = skipped_row(m.system.variant(), params, threads, &format!("failed: {e}"));
        r.baseline = row.baseline.clone();
        return r;
    }
    let mut h = new_histogram();
    // Per timed batch, the slowest thread's time: the batch's wall time.
    let mut walls: Vec<f64> = Vec::new();
    for st in &m.threads {
        if let Ok(st) = st.lock() {
            let _ = h.add(&st.hist);
            if walls.len() < st.batch_secs.len() {
                walls.resize(st.batch_secs.len(), 0.0);
            }
            for (w, s) in walls.iter_mut().zip(&st.batch_secs) {
                *w = w.max(*s);
            }
        }
    }
    set_latency(&mut row, &h);
    set_mean_throughput(&mut row, &walls);
    if let Some(sh) = breakdown {
        for (k, v) in ["scan", "cc", "mm", "mod"].into_iter().zip(sh) {
            row.set_extra(k, (v * 1000.0).round() / 1000.0);
        }
    }
    row.set_extra("records", m.loaded);
    if !m.system.counters_observed() {
        // LMDB persists with write()/fdatasync, PMDK with its own
        // flushes: outside ferrite-pmem.
        row.counters_observed = false;
    }
    row
}

/// Replaces the row's throughput (the harness's median batch) by the
/// mean over the timed batches — total operations ÷ the sum of the
/// batches' wall times (`walls`, seconds) — keeping the median in
/// `extra.median_ns_per_op`. Why: an engine whose cost comes in bursts (an
/// LSM memtable flush or merge every few thousand writes, a CoW group
/// commit) has most batches without the burst, so the median batch would
/// leave the burst out; the mean charges it, as a user's throughput does.
fn set_mean_throughput(row: &mut Row, walls: &[f64]) {
    let total: f64 = walls.iter().sum();
    if walls.is_empty() || total <= 0.0 {
        return;
    }
    let ops = row.ops as f64 * walls.len() as f64;
    let ns = total * 1e9 / ops;
    row.set_extra("median_ns_per_op", (row.ns_per_op * 10.0).round() / 10.0);
    row.ns_per_op = ns;
    row.ops_per_s = 1e9 / ns;
    row.secs = ns * row.ops as f64 / 1e9;
}

/// P2's breakdown of `m`'s operation time into SCAN / CC / MM / MOD
/// shares ([`ferrite_engine::breakdown`]): one more batch of `ops` per
/// thread's stream, run on the calling thread after the timed
/// repetitions, with the engine's phase timers on only around each call
/// into the system (not around generation). The timers cost a clock read
/// per phase switch, which is why this pass is apart from the timed one.
/// `None` when the engine charged nothing or the pass failed.
fn breakdown_pass(m: &Member, ops: u64) -> Option<[f64; 4]> {
    use ferrite_engine::breakdown;
    let opened = m.opened.as_ref()?;
    if m.failed.lock().ok()?.is_some() {
        return None;
    }
    let mut total = breakdown::Breakdown::default();
    for st in &m.threads {
        let mut st = st.lock().ok()?;
        let r = opened.with_kv(|kv| -> Result<(), String> {
            for _ in 0..ops {
                st.driver.step_marked(kv, &mut |on| {
                    if on {
                        breakdown::enable();
                    } else {
                        let b = breakdown::take();
                        for (t, n) in total.ns.iter_mut().zip(b.ns) {
                            *t += n;
                        }
                    }
                })?;
            }
            Ok(())
        });
        if !matches!(r, Ok(Ok(()))) {
            return None;
        }
    }
    // MM is always charged (the store wraps the allocator); SCAN and CC
    // only by an engine that marks its phases. Without them the shares
    // would say "all MOD", which is not a measurement.
    let [scan, cc, _, _] = total.ns;
    (scan + cc > 0).then(|| total.shares())
}

trait ExtraStr {
    fn extra_str(&self, key: &str) -> Option<&str>;
}

impl ExtraStr for Row {
    fn extra_str(&self, key: &str) -> Option<&str> {
        self.extra.as_ref()?.get(key)?.as_str()
    }
}

// ---------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------

/// Bytes of memory available (`MemAvailable`), if the kernel says.
fn mem_available() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

// ---------------------------------------------------------------------
// The suite
// ---------------------------------------------------------------------

/// Sizes of a run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Records loaded before a group (the `p2-h` dataset is sized apart).
    pub records: u64,
    /// Operations per thread per batch (divided by the thread count).
    pub ops_per_thread: u64,
    /// TPC-C transactions per batch (divided by the thread count): a
    /// transaction is tens of operations.
    pub tpcc_txns: u64,
    /// TPC-C warehouses (at least the largest thread count: each
    /// terminal owns its home warehouses).
    pub warehouses: u16,
    /// TPC-C's standard cardinalities (else ferrite-workload's quick ones,
    /// about 1/60 of the data).
    pub tpcc_standard: bool,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Domains of the Ferrite rows.
    pub domains: Vec<Domain>,
    /// `eadr` groups only up to this many threads (quick: 1, to keep the
    /// run within minutes; full: all).
    pub eadr_max_threads: usize,
    /// Recovery dataset sizes, bytes.
    pub recovery_bytes: Vec<u64>,
    /// Workloads by name (empty: the P2 list and `redb`). `ferrite bench
    /// engine` takes them from the environment variable [`WORKLOADS_ENV`]
    /// (comma-separated).
    pub workloads: Vec<String>,
    /// Sizes of the redb comparison workload (when it runs).
    pub redb: redb_bench::Counts,
    /// Sizes of the long-run row (when it runs).
    pub long_run: long_run::Counts,
}

/// Environment variable choosing `ferrite bench engine`'s workloads,
/// e.g. `FERRITE_ENGINE_WORKLOADS=p2-a,p2-f` or `ycsb-e,tpcc` (any
/// ferrite-workload name, options included; `none`: only the recovery
/// rows; `redb`: redb's comparison workload, [`redb_bench`], against
/// LMDB, redb and fjall; `long-run`: the long-run row, [`long_run`] — a
/// list of only these two runs nothing else, not even the recovery
/// rows). Unset: the P2 list, then the redb workload and the long-run
/// row.
pub const WORKLOADS_ENV: &str = "FERRITE_ENGINE_WORKLOADS";

impl Plan {
    pub fn for_ctx(ctx: &BenchCtx) -> Plan {
        Plan {
            records: ctx.scale.pick(20_000, 300_000),
            ops_per_thread: ctx.scale.pick(4_000, 20_000),
            tpcc_txns: ctx.scale.pick(600, 5_000),
            warehouses: 2,
            tpcc_standard: ctx.scale == crate::ctx::Scale::Full,
            threads: vec![1, 2],
            domains: vec![Domain::Adr, Domain::Eadr],
            eadr_max_threads: ctx.scale.pick(1, usize::MAX),
            recovery_bytes: ctx.scale.pick(vec![64 * MIB], vec![1024 * MIB, 4096 * MIB]),
            workloads: std::env::var(WORKLOADS_ENV)
                .map(|v| {
                    v.split(',')
                        .map(|w| w.trim().to_string())
                        .filter(|w| !w.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
            redb: redb_bench::Counts::for_ctx(ctx),
            long_run: long_run::Counts::for_ctx(ctx),
        }
    }
}

/// Runs the suite at `ctx`'s scale.
pub fn run(ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    run_plan(ctx, &Plan::for_ctx(ctx))
}

/// The workload names of this module's own rows (not ferrite-workload's).
fn own(name: &str) -> bool {
    name == redb_bench::NAME || name == long_run::NAME
}

/// Runs the suite with explicit sizes.
pub fn run_plan(ctx: &BenchCtx, plan: &Plan) -> Result<Vec<Row>, BenchError> {
    let started = Instant::now();
    let reps = ctx.reps.max(1) as u64;
    let mut rows = Vec::new();
    let specs: Vec<WorkloadSpec> = if plan.workloads.is_empty() {
        WorkloadSpec::all()
    } else {
        plan.workloads
            .iter()
            .filter(|n| n.as_str() != "none" && !own(n))
            .map(|n| WorkloadSpec::parse(n))
            .collect()
    };
    let chosen = |name: &str| plan.workloads.is_empty() || plan.workloads.iter().any(|n| n == name);
    let (redb, long) = (chosen(redb_bench::NAME), chosen(long_run::NAME));
    let only_own = !plan.workloads.is_empty() && plan.workloads.iter().all(|n| own(n));
    for spec in &specs {
        for &threads in &plan.threads {
            let ops = if *spec == WorkloadSpec::Tpcc {
                plan.tpcc_txns
            } else {
                plan.ops_per_thread * spec.batch_scale()
            };
            let per_thread = (ops / threads as u64).max(1);
            // Warm-up, timed repetitions and (one thread) the breakdown pass.
            let batches = reps + 1 + u64::from(threads == 1);
            let built = spec.build(plan, threads, per_thread * batches);
            for &domain in &plan.domains {
                if domain == Domain::Eadr && threads > plan.eadr_max_threads {
                    continue;
                }
                ctx.note(format!(
                    "[engine] {} x{threads} {}: {:.0} s so far",
                    spec.name(),
                    domain.name(),
                    started.elapsed().as_secs_f64()
                ));
                let mut systems = vec![System::Lmdb];
                systems.extend(System::peers());
                systems.extend(System::ferrite_all(domain));
                match &built {
                    Ok(w) => rows.extend(run_group(ctx, &**w, &systems, threads, per_thread)),
                    Err(why) => {
                        for s in systems {
                            let p = json!({
                                "workload": spec.name(),
                                "allocator": s.allocator(),
                                "domain": s.domain(),
                                "value_bytes": serde_json::Value::Null,
                            });
                            rows.push(skipped_row(s.variant(), p, threads, why));
                        }
                    }
                }
            }
        }
    }
    if redb {
        rows.extend(redb_bench::run(ctx, &plan.redb));
    }
    if long {
        rows.extend(long_run::run(ctx, &plan.long_run));
    }
    if !only_own {
        for &bytes in &plan.recovery_bytes {
            rows.extend(recovery(ctx, bytes, plan.domains[0]));
        }
    }
    ctx.note(format!(
        "[engine] done in {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(rows)
}
