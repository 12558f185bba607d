//! redb's comparison workload in the `engine` suite [issue 26, item 6]:
//! the phases of `benchmark()` in redb's `crates/redb-bench` (its
//! `lmdb_benchmark`, which also runs LMDB, RocksDB, fjall and SQLite), run
//! on Ferrite's three engines, LMDB, redb and fjall in the same process.
//!
//! # Data
//!
//! Keys of 24 random bytes and values of 150 random bytes, drawn as redb
//! draws them (`fastrand` seeded with 3: key, then value), so every
//! system, and redb's own benchmark, sees the same stream of pairs. Phases
//! that read or delete "the first N pairs" restart the stream; inserts
//! continue it.
//!
//! # Phases (rows `params.workload`)
//!
//! | workload | what is timed | full (redb's counts) | quick |
//! |---|---|---|---|
//! | `redb-bulk` | inserts of the next N pairs in one transaction | 5 000 000 | 50 000 |
//! | `redb-individual` | N inserts, each its own durable commit | 1 000 | 1 000 |
//! | `redb-batch` | N batches of 1000 inserts, a durable commit each | 100 | 10 |
//! | `redb-nosync` | N inserts, each its own relaxed commit (not synced) | 50 000 | 2 000 |
//! | `redb-len` | counting the entries (checked against the model) | 1 | 1 |
//! | `redb-random-read` | 2 passes of N gets of the first N pairs, each value checked | 1 000 000 | 20 000 |
//! | `redb-range-read` | 2 passes of N ranges of 10 entries from a random key | 500 000 | 10 000 |
//! | `redb-threaded-read` | T threads (4, 8, 16, 32) each getting its 1/T of every pair inserted so far | all | all |
//! | `redb-removal` | deleting the first half of the pairs in one transaction | ½ | ½ |
//! | `redb-retain` | removing every other entry in key order, one transaction | ½ of the table | ½ |
//! | `redb-extract-if` | removing every other entry of keys `[0x55;24]..[0xAA;24]` (⅓ of the key space), one transaction | ⅙ of the table | ⅙ |
//! | `redb-pop` | N pops, alternately the first and the last entry, one transaction | 500 000 | 2 000 |
//! | `redb-sorted` | N inserts of ascending keys past every key (`[0xFF;24]` + a big-endian counter), one transaction | 1 000 000 | 10 000 |
//!
//! `FERRITE_REDB_FRACTION=N` ([`FRACTION_ENV`]) runs 1/N of redb's
//! counts instead, whatever the scale ([`Counts::fraction`]);
//! `FERRITE_REDB_SYSTEMS=inp,lmdb` ([`SYSTEMS_ENV`]) runs those systems
//! only (to profile one; the ratios need LMDB among them).
//!
//! After the nosync phase every system goes back to durable commits as
//! redb's benchmark does (`set_sync(true)`: untimed, no sync of its own;
//! the relaxed commits become durable with the next durable commit, the
//! removals'), so no row pays for making them durable.
//!
//! After retain, extract-if and pop the removed count of fresh pairs is
//! inserted again, untimed, as redb does, so that later phases see a
//! table of the same size. redb's size and compaction rows are left out
//! (not throughput). The row's `ops` are the phase's operations (entries
//! inserted, read or removed; ranges read; 1 for `len`), so `ns_per_op`
//! is the phase's time over them and the ratios are ratios of phase times.
//!
//! Every phase checks what it did (a read that misses or returns another
//! value, a count off the model, a retain that removed the wrong number
//! fail the system's rows), and after the last phase the whole table of
//! each system is walked, untimed: its count must equal the model's and
//! `extra.digest` (a hash of every key and value in order) is the same
//! for every system whose data is right.
//!
//! # How each system commits
//!
//! - **Ferrite** `inp`, `cow`, `lsm` (the `ferrite` heap, `adr` domain,
//!   the engine's default options otherwise) in a pool file on `/dev/shm`
//!   created without a size ([`Store::create_new`](ferrite_engine::Store::create_new)):
//!   it starts small and grows on demand; `params.pool_bytes` is the size
//!   the file reached after the phase (the most over the repetitions),
//!   `params.growable` says so. Each of redb's transactions is one
//!   [`Store::write`](ferrite_engine::Store::write) transaction
//!   ([`WriteTxn`](ferrite_engine::WriteTxn): it buffers its writes in
//!   key order, reads them back, and hands them to the engine at commit as
//!   one atomic batch of any size, durable when `commit` returns). Its
//!   own `put`, `delete` (a read first, as redb's `remove` returns the old
//!   value), `retain`, `extract_if`, `pop_first` / `pop_last` serve the
//!   phases; sorted inserts are its `put`s (Ferrite has no append path).
//!   The nosync phase commits with `Durability::Eventual` (LSM skips the
//!   commit's fence and the commit is durable at the next immediate one;
//!   InP and CoW commit immediately anyway). `len` is
//!   [`Store::len`](ferrite_engine::Store::len) (exact: a counter for InP
//!   and CoW, a merge for LSM); reads go through a
//!   [`Store::snapshot`](ferrite_engine::Store::snapshot), a read
//!   transaction as the peers'.
//! - **LMDB** through `heed` ([`crate::peers::lmdb`]): one write transaction per
//!   commit with LMDB's default flags (two `fdatasync`s each), `MDB_NOSYNC`
//!   in the nosync phase; pop, retain and extract-if delete at a cursor;
//!   sorted inserts use `MDB_APPEND` (as redb's benchmark does).
//! - **redb** (the crate, 4.x): `Durability::Immediate` (its default)
//!   per commit, `Durability::None` in the nosync phase; its own `retain`,
//!   `extract_from_if`, `pop_first` / `pop_last`; sorted inserts through
//!   its appending cursor (`upper_bound_mut` + `insert_before`), as redb's
//!   benchmark does. Page cache as in redb's benchmark (4 GiB). Not 3.x:
//!   redb 3.1.3's `retain` grows the file about 30-fold (4 GiB after a
//!   retain over 500 000 entries, measured; 4.6: 174 MiB) and is as much
//!   slower, which would misstate redb and, at 5 M entries, fill the
//!   machine's memory (tmpfs).
//! - **fjall** (the crate, 3.x): its single-writer transactional
//!   database, as in redb's benchmark; each commit persists the journal
//!   with `PersistMode::SyncAll`, and the nosync phase's commits persist
//!   nothing (they stay in fjall's journal buffer; redb's benchmark
//!   hands them to the OS with `PersistMode::Buffer`). Retain,
//!   extract-if: collect, then remove, in one transaction (no cursor
//!   delete). Cache 4 GiB as in redb's benchmark.
//!
//! All of them live on `/dev/shm` (tmpfs) in temporary directories
//! removed afterwards: a sync is a cheap system call there, so what the
//! rows compare is each system's own work.
//!
//! # Repetitions, interleaving, rows
//!
//! A repetition runs every phase, in order, on a fresh store of each
//! system. When the machine has the memory for all six stores at once
//! (quick scale), they run phase by phase, interleaved (`params.interleave
//! = "phase"`: phase 1 on each system, then phase 2 on each, …);
//! otherwise (full scale: six stores of 5 M entries do not fit in 24 GiB)
//! one system after another, each through all its phases
//! (`interleave = "run"`). The order of the systems rotates from one
//! repetition to the next. `reps` is the harness's, at most 5 at quick
//! and 3 at full scale ([`Counts::max_reps`]).
//!
//! A row's time is the **median** over the repetitions of the phase's
//! time; `ns_per_op_spread` is `(max - min) / median` of them; fences,
//! flushes and lines per op (Ferrite only; the peers' syncs are outside
//! ferrite-pmem) are summed over all repetitions. Every row but LMDB's
//! has `baseline = lmdb` and `ratio_vs_baseline` (its throughput ÷
//! LMDB's), plus `extra.ratio_vs_redb` and `extra.ratio_vs_fjall`.
//! A pop phase that redb's rule deems too slow (its first 1 % takes over
//! 1 s; here checked at every 1 %, see [`subjects::Popped`]) is estimated
//! from the pops made, as redb does (`extra.estimated`).
//! `extra.files_mib` is the most memory the system's files took after a
//! phase (tmpfs blocks; a Ferrite pool's untouched pages take none),
//! `extra.samples_ms` the phase's time in each repetition.
//!
//! Memory: tmpfs files are memory, and a store that outgrows the machine
//! would bring the OOM killer onto this process and its neighbours and
//! leave its files behind. A watchdog polls `MemAvailable` and, under
//! [`MEMORY_FLOOR`], the running phase stops and the system fails (its
//! rows say so) and is dropped, its files removed.
//!
//! [`summarize`] turns the rows into one claim per phase: the best Ferrite
//! engine against the better of LMDB and redb, target ≥ 1×.

mod phases;
pub mod subjects;

use crate::ctx::BenchCtx;
use crate::measure::{median, spread};
use crate::peers::lmdb::LmdbStore;
use crate::row::{Row, set_ratios};
use ferrite_engine::EngineKind;
use ferrite_pmem::Counters;
use phases::step;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use subjects::{Committed, FerriteSubject, FjallSubject, LmdbSubject, RedbSubject, Res, Subject};

use super::{LMDB, SUITE, skipped_row};
// The variants the claims read (they live with the claims).
pub use ferrite_rows::claims::engine::{FJALL, REDB, redb_summarize as summarize};

/// Bytes of a key.
pub const KEY_BYTES: usize = 24;
/// Bytes of a value.
pub const VALUE_BYTES: usize = 150;
/// The seed of redb's benchmark (`RNG_SEED`).
pub const SEED: u64 = 3;
/// First key of the extract-if range (included).
pub const EXTRACT_START: [u8; KEY_BYTES] = [0x55; KEY_BYTES];
/// End of the extract-if range (excluded).
pub const EXTRACT_END: [u8; KEY_BYTES] = [0xAA; KEY_BYTES];
/// The name selecting this workload in `FERRITE_ENGINE_WORKLOADS`.
pub const NAME: &str = "redb";
/// Page cache of redb and fjall, as in redb's benchmark (4 GiB).
pub const CACHE_BYTES: u64 = 4 << 30;
const MIB: u64 = 1 << 20;

/// Environment variable running redb's workload at 1/N of redb's counts
/// whatever the scale (`FERRITE_REDB_FRACTION=5`: a 1 M-pair bulk load),
/// see [`Counts::fraction`].
pub const FRACTION_ENV: &str = "FERRITE_REDB_FRACTION";

/// How many of everything a run does. See the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counts {
    pub bulk: u64,
    pub individual: u64,
    pub batches: u64,
    pub batch_size: u64,
    pub nosync: u64,
    pub reads: u64,
    pub read_passes: u64,
    pub scans: u64,
    pub scan_passes: u64,
    pub scan_len: usize,
    pub threads: Vec<usize>,
    pub pops: u64,
    pub sorted: u64,
    /// Most repetitions (each runs every phase on fresh stores).
    pub max_reps: usize,
}

impl Counts {
    /// redb's own counts.
    pub fn full() -> Counts {
        Counts {
            bulk: 5_000_000,
            individual: 1_000,
            batches: 100,
            batch_size: 1_000,
            nosync: 50_000,
            reads: 1_000_000,
            read_passes: 2,
            scans: 500_000,
            scan_passes: 2,
            scan_len: 10,
            threads: vec![4, 8, 16, 32],
            pops: 500_000,
            sorted: 1_000_000,
            max_reps: 3,
        }
    }

    /// About 1/100 of redb's data (all its individual writes).
    pub fn quick() -> Counts {
        Counts {
            bulk: 50_000,
            individual: 1_000,
            batches: 10,
            nosync: 2_000,
            reads: 20_000,
            scans: 10_000,
            pops: 2_000,
            sorted: 10_000,
            max_reps: 5,
            ..Counts::full()
        }
    }

    /// For tests: every phase, a few thousand entries.
    pub fn tiny() -> Counts {
        Counts {
            bulk: 2_000,
            individual: 20,
            batches: 3,
            batch_size: 100,
            nosync: 50,
            reads: 500,
            scans: 200,
            threads: vec![4, 32],
            pops: 200,
            sorted: 300,
            max_reps: 2,
            ..Counts::full()
        }
    }

    /// redb's counts divided by `d` (at least 1): the data and the
    /// operations over it (bulk, batches, nosync writes, reads, scans,
    /// pops, sorted inserts); the 1000 individual writes, the batch size
    /// and the thread counts stay.
    pub fn fraction(d: u64) -> Counts {
        let d = d.max(1);
        let f = Counts::full();
        Counts {
            bulk: f.bulk / d,
            batches: (f.batches / d).max(1),
            nosync: f.nosync / d,
            reads: f.reads / d,
            scans: f.scans / d,
            pops: f.pops / d,
            sorted: f.sorted / d,
            ..f
        }
    }

    /// The counts of `ctx`'s scale, or 1/N of redb's when [`FRACTION_ENV`]
    /// is `N`.
    pub fn for_ctx(ctx: &BenchCtx) -> Counts {
        match std::env::var(FRACTION_ENV)
            .ok()
            .and_then(|v| v.trim().parse().ok())
        {
            Some(d) => Counts::fraction(d),
            None => ctx.scale.pick(Counts::quick(), Counts::full()),
        }
    }

    /// Pairs inserted before the reads: bulk, individual, batch, nosync.
    pub fn elements(&self) -> u64 {
        self.bulk + self.individual + self.batches * self.batch_size + self.nosync
    }

    /// Most bytes of keys and values a table holds.
    pub fn data_bytes(&self) -> u64 {
        self.elements() * subjects::PAIR_BYTES + self.sorted * (subjects::PAIR_BYTES + 8)
    }

    /// What a store's files may take at most, as an estimate for the
    /// memory check (tmpfs files are memory): four times the data (CoW's
    /// copies, LSM's runs and merges, half-full B-tree pages, the
    /// allocators' size classes) plus fixed areas. Ferrite's pools are not
    /// sized from it: they grow on demand.
    pub fn store_bytes_bound(&self) -> u64 {
        (self.data_bytes() * 4 + 256 * MIB).next_multiple_of(MIB)
    }

    /// LMDB's map (its size is fixed at open, unlike the others'):
    /// [`store_bytes_bound`](Self::store_bytes_bound).
    pub fn lmdb_map_bytes(&self) -> u64 {
        self.store_bytes_bound()
    }

    /// The phases, in order.
    pub fn phases(&self) -> Vec<Phase> {
        let mut v = vec![
            Phase::Bulk,
            Phase::Individual,
            Phase::Batch,
            Phase::Nosync,
            Phase::Len,
            Phase::RandomRead,
            Phase::RangeRead,
        ];
        v.extend(self.threads.iter().map(|&t| Phase::ThreadedRead(t)));
        v.extend([
            Phase::Removal,
            Phase::Retain,
            Phase::ExtractIf,
            Phase::Pop,
            Phase::Sorted,
        ]);
        v
    }
}

/// One phase of the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Bulk,
    Individual,
    Batch,
    Nosync,
    Len,
    RandomRead,
    RangeRead,
    ThreadedRead(usize),
    Removal,
    Retain,
    ExtractIf,
    Pop,
    Sorted,
}

impl Phase {
    /// `params.workload` of its rows.
    pub fn workload(self) -> &'static str {
        match self {
            Phase::Bulk => "redb-bulk",
            Phase::Individual => "redb-individual",
            Phase::Batch => "redb-batch",
            Phase::Nosync => "redb-nosync",
            Phase::Len => "redb-len",
            Phase::RandomRead => "redb-random-read",
            Phase::RangeRead => "redb-range-read",
            Phase::ThreadedRead(_) => "redb-threaded-read",
            Phase::Removal => "redb-removal",
            Phase::Retain => "redb-retain",
            Phase::ExtractIf => "redb-extract-if",
            Phase::Pop => "redb-pop",
            Phase::Sorted => "redb-sorted",
        }
    }

    pub fn threads(self) -> usize {
        match self {
            Phase::ThreadedRead(t) => t,
            _ => 1,
        }
    }

    /// Whether its writes are durable commits (the nosync phase's are not;
    /// `None`: it writes nothing).
    fn durable(self) -> Option<bool> {
        match self {
            Phase::Nosync => Some(false),
            Phase::Len | Phase::RandomRead | Phase::RangeRead | Phase::ThreadedRead(_) => None,
            _ => Some(true),
        }
    }
}

/// A system of the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    Ferrite(EngineKind),
    Lmdb,
    Redb,
    Fjall,
}

impl Peer {
    /// Every system, LMDB (the baseline) first.
    pub fn all() -> Vec<Peer> {
        let mut v = vec![Peer::Lmdb, Peer::Redb, Peer::Fjall];
        v.extend(EngineKind::ALL.into_iter().map(Peer::Ferrite));
        v
    }

    pub fn variant(self) -> &'static str {
        match self {
            Peer::Ferrite(k) => k.name(),
            Peer::Lmdb => LMDB,
            Peer::Redb => REDB,
            Peer::Fjall => FJALL,
        }
    }

    pub fn allocator(self) -> &'static str {
        match self {
            Peer::Ferrite(_) => "ferrite",
            p => p.variant(),
        }
    }

    pub fn domain(self) -> &'static str {
        match self {
            Peer::Ferrite(_) => "adr",
            _ => "tmpfs",
        }
    }

    /// Memory a store of this system may take at `counts` (tmpfs files
    /// are memory): Ferrite its pool file; a peer its files and its cache
    /// (at most the data).
    fn memory(self, counts: &Counts) -> u64 {
        match self {
            Peer::Ferrite(_) => counts.store_bytes_bound(),
            _ => counts.store_bytes_bound() + counts.data_bytes(),
        }
    }

    fn open(self, counts: &Counts) -> Res<Box<dyn Subject>> {
        let threads = counts.threads.iter().copied().max().unwrap_or(1);
        Ok(match self {
            Peer::Ferrite(kind) => Box::new(FerriteSubject::create(kind)?),
            Peer::Lmdb => Box::new(LmdbSubject(
                LmdbStore::create_mapped(counts.lmdb_map_bytes(), threads)
                    .map_err(|e| e.to_string())?,
            )),
            Peer::Redb => Box::new(RedbSubject::create(CACHE_BYTES as usize)?),
            Peer::Fjall => Box::new(FjallSubject::create(CACHE_BYTES)?),
        })
    }
}

/// redb's stream of pairs.
#[derive(Clone, Debug)]
pub struct Gen(fastrand::Rng);

impl Default for Gen {
    fn default() -> Gen {
        Gen::new()
    }
}

impl Gen {
    /// The stream from its start.
    pub fn new() -> Gen {
        Gen(fastrand::Rng::with_seed(SEED))
    }

    /// The next pair: a key, then a value, as redb's `random_pair` draws them.
    pub fn pair(&mut self) -> ([u8; KEY_BYTES], [u8; VALUE_BYTES]) {
        let mut k = [0u8; KEY_BYTES];
        self.0.fill(&mut k);
        (k, self.value())
    }

    fn value(&mut self) -> [u8; VALUE_BYTES] {
        let mut v = [0u8; VALUE_BYTES];
        self.0.fill(&mut v);
        v
    }
}

/// The `i`-th key of the sorted phase: past every 24-byte key.
pub fn sorted_key(i: u64) -> Vec<u8> {
    let mut k = vec![0xFFu8; KEY_BYTES + 8];
    k[KEY_BYTES..].copy_from_slice(&i.to_be_bytes());
    k
}

/// What one phase measured on one system in one repetition.
#[derive(Clone, Debug, Default)]
struct Sample {
    secs: f64,
    ops: u64,
    counters: Counters,
    committed: Option<Committed>,
    /// Table entries when the phase started.
    entries: u64,
    /// Entries the phase removed (retain, extract-if, pop).
    removed: Option<u64>,
    estimated: bool,
    /// Bytes of memory the system's files took after the phase.
    footprint: u64,
    /// Bytes of Ferrite's pool file after the phase (it grows).
    file_bytes: Option<u64>,
}

/// Memory the machine keeps free while the workload runs. A store that
/// grows past what the machine has (tmpfs files are memory) would bring
/// the OOM killer onto this process and its neighbours, and leave its
/// files behind: the watchdog stops the system instead.
pub const MEMORY_FLOOR: u64 = 1536 * MIB;

static LOW_MEMORY: AtomicBool = AtomicBool::new(false);

/// Polls `MemAvailable` while the workload runs and raises
/// [`LOW_MEMORY`] below [`MEMORY_FLOOR`]; the phases' loops check it
/// ([`memory_ok`]) and fail the system, whose files are then removed.
struct Watchdog {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    fn start() -> Watchdog {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("redb-bench-watchdog".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    let low = super::mem_available().is_some_and(|a| a < MEMORY_FLOOR);
                    LOW_MEMORY.store(low, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
            .ok();
        Watchdog { stop, handle }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        LOW_MEMORY.store(false, Ordering::Relaxed);
    }
}

/// An error once memory ran low (see [`MEMORY_FLOOR`]).
fn memory_ok() -> Res<()> {
    if LOW_MEMORY.load(Ordering::Relaxed) {
        return Err(format!(
            "stopped: under {} MiB of memory left (the store outgrew the machine)",
            MEMORY_FLOOR / MIB
        ));
    }
    Ok(())
}

/// One system's pass through the phases in one repetition.
struct Run {
    subject: Box<dyn Subject>,
    pairs: Gen,
    /// Live entries per the model.
    len: u64,
}

/// Stream positions where each thread of a threaded read starts (the
/// same for every system and repetition).
struct Shards(Vec<(usize, Vec<Gen>)>);

impl Shards {
    fn new(counts: &Counts) -> Shards {
        let elements = counts.elements();
        Shards(
            counts
                .threads
                .iter()
                .map(|&t| {
                    let per = elements / t as u64;
                    let mut g = Gen::new();
                    let mut v = Vec::with_capacity(t);
                    for i in 0..t {
                        v.push(g.clone());
                        if i + 1 < t {
                            for _ in 0..per {
                                g.pair();
                            }
                        }
                    }
                    (t, v)
                })
                .collect(),
        )
    }

    fn of(&self, threads: usize) -> &[Gen] {
        self.0
            .iter()
            .find(|(t, _)| *t == threads)
            .map_or(&[][..], |(_, v)| v)
    }
}

/// The untimed check after the last phase: the count equals the model's,
/// the first pair of the stream (deleted by the removals) is gone and the
/// last sorted pair reads back; returns the count and digest of the table.
fn verify(run: &mut Run, counts: &Counts) -> Res<(u64, u64)> {
    let (n, digest) = run.subject.digest()?;
    if n != run.len {
        return Err(format!(
            "the table holds {n} entries, the model {}",
            run.len
        ));
    }
    let len = run.subject.len()?;
    if len != n {
        return Err(format!("len() = {len} after a walk of {n} entries"));
    }
    let mut r = run.subject.reader()?;
    let mut out = Vec::new();
    let (k0, _) = Gen::new().pair();
    if r.get(&k0, &mut out)? {
        return Err("the first pair, removed, is still there".into());
    }
    if counts.sorted > 0 {
        let mut last = Vec::new();
        let found = r.scan(&sorted_key(counts.sorted - 1), 1, &mut |k, v| {
            if k == sorted_key(counts.sorted - 1).as_slice() {
                last = v.to_vec();
            }
        })?;
        if found != 1 || last.len() != VALUE_BYTES || !r.get(&sorted_key(0), &mut out)? {
            return Err("the sorted pairs do not read back".into());
        }
    }
    Ok((n, digest))
}

/// Everything measured of one system.
struct Tally {
    peer: Peer,
    /// Per phase, one sample per repetition that reached it.
    samples: Vec<Vec<Sample>>,
    failed: Option<String>,
    digest: Option<(u64, u64)>,
}

/// Environment variable naming the systems to run, comma-separated
/// variants (`FERRITE_REDB_SYSTEMS=inp,lmdb`); unset or empty: all. An
/// unknown name is reported and ignored.
pub const SYSTEMS_ENV: &str = "FERRITE_REDB_SYSTEMS";

/// The systems [`SYSTEMS_ENV`] names (all when it is unset), and the names
/// it gives that are no system.
pub fn systems_from_env() -> (Vec<Peer>, Vec<String>) {
    let all = Peer::all();
    let Some(list) = std::env::var(SYSTEMS_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
    else {
        return (all, Vec::new());
    };
    let mut unknown = Vec::new();
    let mut picked = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match all.iter().find(|p| p.variant() == name) {
            Some(p) if !picked.contains(p) => picked.push(*p),
            Some(_) => {}
            None => unknown.push(name.to_string()),
        }
    }
    (picked, unknown)
}

/// Runs the workload at `counts` on every system ([`SYSTEMS_ENV`] may
/// narrow them) and returns its rows.
pub fn run(ctx: &BenchCtx, counts: &Counts) -> Vec<Row> {
    let (peers, unknown) = systems_from_env();
    if !unknown.is_empty() {
        ctx.note(format!(
            "[engine] {SYSTEMS_ENV}: no system named {} (known: {})",
            unknown.join(", "),
            Peer::all()
                .iter()
                .map(|p| p.variant())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    run_peers(ctx, counts, &peers)
}

/// As [`run`], on `peers` only (LMDB among them is the baseline).
pub fn run_peers(ctx: &BenchCtx, counts: &Counts, peers: &[Peer]) -> Vec<Row> {
    let started = Instant::now();
    let _watchdog = Watchdog::start();
    let reps = ctx.reps.clamp(1, counts.max_reps.max(1));
    let phases = counts.phases();
    let shards = Shards::new(counts);
    let need: u64 = peers.iter().map(|p| p.memory(counts)).sum::<u64>() + counts.data_bytes();
    let avail = super::mem_available();
    let together = avail.is_none_or(|a| a > need + need / 4 + 512 * MIB);
    let interleave = if together { "phase" } else { "run" };
    let mut tallies: Vec<Tally> = peers
        .iter()
        .map(|&peer| Tally {
            peer,
            samples: vec![Vec::new(); phases.len()],
            failed: None,
            digest: None,
        })
        .collect();
    // A system alone must fit too.
    if !together {
        for t in &mut tallies {
            let own = t.peer.memory(counts) + counts.data_bytes();
            if avail.is_some_and(|a| a < own + own / 4 + 512 * MIB) {
                t.failed = Some(format!(
                    "not enough memory: needs {} MiB, {} MiB available",
                    own / MIB,
                    avail.unwrap_or(0) / MIB
                ));
            }
        }
    }
    ctx.note(format!(
        "[engine] redb workload: {} entries bulk, {reps} reps, {} systems {}",
        counts.bulk,
        peers.len(),
        if together {
            "interleaved phase by phase"
        } else {
            "one after another (not enough memory for all at once)"
        }
    ));
    for rep in 0..reps {
        let order: Vec<usize> = (0..tallies.len())
            .map(|i| (i + rep) % tallies.len())
            .collect();
        let open = |t: &mut Tally| -> Option<Run> {
            if t.failed.is_some() {
                return None;
            }
            match t.peer.open(counts) {
                Ok(subject) => Some(Run {
                    subject,
                    pairs: Gen::new(),
                    len: 0,
                }),
                Err(e) => {
                    t.failed = Some(format!("open: {e}"));
                    None
                }
            }
        };
        let finish = |t: &mut Tally, mut run: Run| match verify(&mut run, counts) {
            Ok(d) => match t.digest {
                Some(prev) if prev != d => {
                    t.failed = Some(format!(
                        "repetitions disagree: {prev:?} then {d:?} (entries, digest)"
                    ))
                }
                _ => t.digest = Some(d),
            },
            Err(e) => t.failed = Some(format!("final check: {e}")),
        };
        let exec = |t: &mut Tally, run: &mut Option<Run>, pi: usize| {
            let Some(r) = run.as_mut() else { return };
            match step(r, phases[pi], counts, &shards) {
                Ok(s) => t.samples[pi].push(s),
                Err(e) => {
                    t.failed = Some(format!("{}: {e}", phases[pi].workload()));
                    *run = None;
                }
            }
        };
        if together {
            let mut runs: Vec<Option<Run>> = tallies.iter_mut().map(open).collect();
            for (pi, phase) in phases.iter().enumerate() {
                ctx.note(format!(
                    "[engine] redb rep {}/{reps}: {} x{} ({:.0} s so far)",
                    rep + 1,
                    phase.workload(),
                    phase.threads(),
                    started.elapsed().as_secs_f64()
                ));
                for &i in &order {
                    exec(&mut tallies[i], &mut runs[i], pi);
                }
            }
            for &i in &order {
                if let Some(r) = runs[i].take() {
                    finish(&mut tallies[i], r);
                }
            }
        } else {
            for &i in &order {
                ctx.note(format!(
                    "[engine] redb rep {}/{reps}: {} ({:.0} s so far)",
                    rep + 1,
                    tallies[i].peer.variant(),
                    started.elapsed().as_secs_f64()
                ));
                let mut run = open(&mut tallies[i]);
                for (pi, phase) in phases.iter().enumerate() {
                    if run.is_some() {
                        ctx.note(format!(
                            "[engine] redb   {} {} x{} ({:.0} s so far)",
                            tallies[i].peer.variant(),
                            phase.workload(),
                            phase.threads(),
                            started.elapsed().as_secs_f64()
                        ));
                    }
                    exec(&mut tallies[i], &mut run, pi);
                }
                if let Some(r) = run {
                    finish(&mut tallies[i], r);
                }
            }
        }
    }
    ctx.note(format!(
        "[engine] redb workload done in {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    rows(counts, &phases, &tallies, interleave)
}

fn per_op(total: u64, ops: u64) -> f64 {
    if ops == 0 {
        0.0
    } else {
        total as f64 / ops as f64
    }
}

fn rows(counts: &Counts, phases: &[Phase], tallies: &[Tally], interleave: &str) -> Vec<Row> {
    let has_lmdb = tallies.iter().any(|t| t.peer == Peer::Lmdb);
    let mut out = Vec::new();
    for (pi, &phase) in phases.iter().enumerate() {
        let mut group: Vec<Row> = Vec::new();
        for t in tallies {
            let samples = &t.samples[pi];
            let mut params = json!({
                "workload": phase.workload(),
                "allocator": t.peer.allocator(),
                "domain": t.peer.domain(),
                "key_bytes": KEY_BYTES,
                "value_bytes": VALUE_BYTES,
                "interleave": interleave,
            });
            if let Some(b) = samples.iter().filter_map(|s| s.file_bytes).max() {
                // The pool file's size reached (it starts small and grows).
                params["pool_bytes"] = json!(b);
                params["growable"] = json!(true);
            }
            if let Some(d) = phase.durable() {
                params["durable"] = json!(d);
            }
            if phase == Phase::RangeRead {
                params["range_len"] = json!(counts.scan_len);
            }
            let last = samples.last();
            if let Some(s) = last {
                params["entries"] = json!(s.entries);
                if let Some(c) = s.committed {
                    params["batch_ops"] = json!(c.batch_ops);
                    params["commits"] = json!(c.commits);
                }
            }
            // A system that failed anywhere (a phase, the final check) has
            // no measured row: its numbers may come from wrong work.
            let skipped = match &t.failed {
                Some(e) => Some(format!("failed: {e}")),
                None if samples.is_empty() => Some("not run".into()),
                None => None,
            };
            let mut row = match skipped {
                Some(why) => skipped_row(t.peer.variant(), params, phase.threads(), &why),
                None => measured_row(t, samples, params, phase),
            };
            if has_lmdb && t.peer != Peer::Lmdb {
                row.baseline = Some(LMDB.into());
            }
            group.push(row);
        }
        set_ratios(&mut group);
        let tput = |v: &str, g: &[Row]| {
            g.iter()
                .find(|r| r.variant == v && r.extra_val("skipped").is_none() && r.ops_per_s > 0.0)
                .map(|r| r.ops_per_s)
        };
        let (redb, fjall) = (tput(REDB, &group), tput(FJALL, &group));
        let lmdb_ok = tput(LMDB, &group).is_some();
        for r in &mut group {
            if r.is_skipped() || !lmdb_ok {
                r.ratio_vs_baseline = None;
            }
            if r.is_skipped() {
                continue;
            }
            let mine = r.ops_per_s;
            if let Some(b) = redb {
                r.set_extra("ratio_vs_redb", round3(mine / b));
            }
            if let Some(b) = fjall {
                r.set_extra("ratio_vs_fjall", round3(mine / b));
            }
        }
        out.extend(group);
    }
    out
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn measured_row(t: &Tally, samples: &[Sample], params: serde_json::Value, phase: Phase) -> Row {
    let mut row = Row::empty(SUITE, t.peer.variant(), params);
    let secs: Vec<f64> = samples.iter().map(|s| s.secs).collect();
    let ops = samples.last().map_or(1, |s| s.ops).max(1);
    let med = median(&secs);
    let ns: Vec<f64> = samples
        .iter()
        .map(|s| s.secs * 1e9 / s.ops.max(1) as f64)
        .collect();
    row.threads = phase.threads();
    row.ops = ops;
    row.secs = med;
    row.ns_per_op = med * 1e9 / ops as f64;
    row.ops_per_s = if med > 0.0 { ops as f64 / med } else { 0.0 };
    row.ns_per_op_spread = spread(&ns);
    row.reps = samples.len();
    let all_ops: u64 = samples.iter().map(|s| s.ops).sum();
    let c = samples
        .iter()
        .fold(Counters::default(), |acc, s| acc.add(&s.counters));
    row.fences_per_op = per_op(c.fences, all_ops);
    row.flushes_per_op = per_op(c.flush_insns, all_ops);
    row.lines_per_op = per_op(c.lines_flushed, all_ops);
    row.blocks_per_op = per_op(c.blocks_written, all_ops);
    row.nt_bytes_per_op = per_op(c.nt_bytes, all_ops);
    row.msyncs_per_op = per_op(c.msync_calls, all_ops);
    row.msync_bytes_per_op = per_op(c.msync_bytes, all_ops);
    row.counters_observed = matches!(t.peer, Peer::Ferrite(_));
    row.set_extra("median_ms", round3(med * 1e3));
    row.set_extra(
        "samples_ms",
        secs.iter().map(|s| round3(s * 1e3)).collect::<Vec<f64>>(),
    );
    if let Some(n) = samples.last().and_then(|s| s.removed) {
        row.set_extra("removed", n);
    }
    let most = samples.iter().map(|s| s.footprint).max().unwrap_or(0);
    row.set_extra("files_mib", round3(most as f64 / MIB as f64));
    if samples.iter().any(|s| s.estimated) {
        row.set_extra("estimated", true);
    }
    if phase == Phase::Sorted
        && let Some((n, d)) = t.digest
    {
        row.set_extra("final_entries", n);
        row.set_extra("digest", format!("{d:016x}"));
    }
    row
}
