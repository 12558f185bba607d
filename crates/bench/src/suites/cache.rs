//! `ferrite bench cache`: Persistron [P1 ch5] under the LSM-shaped store
//! of `ferrite-cache`, against the same store on a volatile DRAM page cache
//! with a write-ahead log, at equal hardware cost (P1 §5.6: persistent
//! memory costs a quarter of DRAM per byte).
//!
//! Configurations for a DRAM budget of C MiB (`dram_mib`):
//! - `dram-wal-sync` (the baseline): a C MiB volatile cache, the log synced
//!   (`fdatasync`) before every write returns — durable;
//! - `dram-wal-batch`: the same, the log synced every 256 writes — not durable;
//! - `persistron`: d = C/2 MiB of DRAM tier plus 4·(C − d) MiB of
//!   persistent tier (`pmem_mib`, an `adr` pool in memory: `clwb` +
//!   `sfence` through the persister), every write durable on return;
//! - ablations of Persistron: `persistron-no-dram` (DRAM tier off, same
//!   persistent tier), `persistron-no-nontx` (branches built as ordinary
//!   transactions), `persistron-early-release` (locks released before
//!   commit: unsafe, measurement only — P1's strict-2PL overhead);
//! - P1 Fig. 5.6's other cost-equivalent points: `persistron-d75`
//!   (d = 3C/4, P1's (6D, 8P)) and `persistron-d25` (d = C/4, (2D, 24P));
//!   `persistron` is P1's chosen (4D, 16P);
//! - `capacity-bound`, YCSB-C only: a volatile DRAM cache of
//!   `persistron`'s total capacity, 2.5 C, no log — neither durable nor
//!   of equal cost. Its ratio to `dram-wal-sync` is what capacity alone
//!   buys over this store and disk, so the most any cache of
//!   `persistron`'s size can show against the baseline here; `persistron`
//!   ÷ `capacity-bound` is what its persistent tier and DRAM tier cost.
//!
//! Rows carry `dram_mib` (C), `tier_dram_mib` (d; 2.5 C for
//! `capacity-bound`) and `pmem_mib`.
//!
//! Every configuration runs the same store over a disk file in a temporary
//! directory under `/var/tmp` (`O_DIRECT` when the filesystem allows it),
//! loaded with the same records (24 B YCSB user keys, 100 B values; a
//! dataset of 3.7 × C at quick scale, 8.3 × C — 3.3 × Persistron's two
//! tiers — at full) before the run. Workloads, in this order on the same
//! stores: `ycsb-c`, `ycsb-b`, `ycsb-a`, `ycsb-f`, `ycsb-d`, `ycsb-e`
//! (95 % range scans of 1..=100 records, batches a twentieth as long),
//! then `ycsb-load` (inserts of fresh keys), Zipfian θ 0.99
//! (`ferrite-workload`), 1 and 2 threads, interleaved rep by rep.
//!
//! Environment: `FERRITE_CACHE_DRAM_MIB` sets C (default 1 MiB quick,
//! 8 MiB full; the dataset scales with it), `FERRITE_CACHE_WORKLOADS`
//! (e.g. `ycsb-c,ycsb-load`) runs only those groups,
//! `FERRITE_CACHE_THREADS` (e.g. `1,2,8`) the thread counts (default 1
//! and 2; P1 ran 8), `FERRITE_CACHE_DOMAIN`
//! = `eadr` runs the persistent tier without flushes, as P1 assumes
//! (default `adr`: `clwb` + `sfence`). Rows say which in `domain`.
//!
//! What this machine cannot show: its "persistent memory" is DRAM, so the
//! DRAM tier's gain (P1: +14 % on C) comes only from skipping the
//! persistent tier's bookkeeping, not from Optane's 2–3× read latency, and
//! Persistron's low-thread Load slowdown (Optane write bandwidth) does not
//! appear. The gains from capacity (4× more cache per dollar) appear,
//! but small, for two reasons `capacity-bound` makes measurable:
//! - YCSB's scrambled Zipfian draws a rank among 10^10 items and hashes
//!   it onto the records, so at 512k records about 45 % of reads land
//!   as if uniformly at random, and a page holds 31 records: page popularity
//!   is flat, and 2.5× the cache cuts page-ins per get only from 0.71 to
//!   0.53 (a ratio of 1.35, the limit of any time ratio here);
//! - this virtio disk reads a 4 KiB page in ~25 µs (O_DIRECT, measured
//!   idle) while a get whose pages are all cached takes ~3.2 µs of CPU
//!   (about 15 page locks, filter probes, the generator), which both
//!   configurations pay, so the 1.35 shows as ~1.25 even for a volatile
//!   cache of Persistron's capacity with no persistence at all.
//!
//! A small write plus `fdatasync` costs ~0.11 ms when the disk is idle
//! (several times that under a concurrent load): that sync is what the
//! durable baseline pays per write.

use crate::ctx::{BenchCtx, Scale};
use crate::error::BenchError;
use crate::measure::{Variant, run_interleaved};
use crate::row::Row;
use ferrite_cache::store::{Store, Wal};
use ferrite_cache::{Cache, CacheOptions, Disk, Fault, FileDisk, PAGE};
use ferrite_pmem::{Domain, Pool, PoolOptions};
use ferrite_workload::ycsb::{Generator, Loader, Op, Workload};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const SEED: u64 = 0x5eed_cace;
const MEMTABLE_PAGES: usize = 16;

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Unsupported(format!("cache suite: {e}"))
}

struct System {
    name: &'static str,
    store: Store,
    /// Key numbers handed to `ycsb-load` inserts.
    next_insert: AtomicU64,
    /// Persistron's DRAM tier d and persistent tier, MiB (0 for the
    /// DRAM-cache baselines).
    tier_dram_mib: f64,
    pmem_mib: f64,
    /// Runs in the read-only group only ([`Config::capacity_bound`]).
    reads_only: bool,
}

#[derive(Clone, Copy)]
struct Config {
    name: &'static str,
    persistron: bool,
    dram_tier: bool,
    non_tx: bool,
    early_release: bool,
    wal_sync_every: u64,
    /// Persistron's d as a share of the budget C; the persistent tier is
    /// 4·(C − d) (P1 §5.6: a byte of persistent memory costs a quarter
    /// of a byte of DRAM).
    dram_share: f64,
    /// A volatile DRAM cache as large as `persistron`'s two tiers
    /// together (2.5 C), without a log: the read throughput any cache of
    /// that capacity reaches over this store and disk. Not durable and
    /// 2.5 times the cost, so it runs in the read-only group only, as the
    /// bound `persistron`'s equal-cost YCSB-C ratio is measured against.
    capacity_bound: bool,
}

impl Config {
    /// (DRAM, persistent tier) in MiB for a budget of `c` MiB; (0, 0) for
    /// the equal-cost DRAM caches, whose DRAM is the budget itself.
    fn tiers(&self, c: f64) -> (f64, f64) {
        let d = c * self.dram_share;
        if self.capacity_bound {
            return (d + 4.0 * (c - d), 0.0);
        }
        if !self.persistron {
            return (0.0, 0.0);
        }
        (d, 4.0 * (c - d))
    }
}

/// The durable DRAM-cache baseline; the other configurations change
/// what differs from it.
const WAL_SYNC: Config = Config {
    name: "dram-wal-sync",
    persistron: false,
    dram_tier: false,
    non_tx: true,
    early_release: false,
    wal_sync_every: 1,
    dram_share: 0.0,
    capacity_bound: false,
};

/// Persistron at P1's chosen point, d = C/2 (its (4D, 16P)).
const PERSISTRON: Config = Config {
    name: "persistron",
    persistron: true,
    dram_tier: true,
    wal_sync_every: 0,
    dram_share: 0.5,
    ..WAL_SYNC
};

const CONFIGS: &[Config] = &[
    WAL_SYNC,
    Config {
        name: "dram-wal-batch",
        wal_sync_every: 256,
        ..WAL_SYNC
    },
    PERSISTRON,
    Config {
        name: "persistron-no-dram",
        dram_tier: false,
        ..PERSISTRON
    },
    Config {
        name: "persistron-no-nontx",
        non_tx: false,
        ..PERSISTRON
    },
    Config {
        name: "persistron-early-release",
        early_release: true,
        ..PERSISTRON
    },
    // P1 Fig. 5.6's other cost-equivalent points: (6D, 8P) and (2D, 24P)
    // for its C = 8 GiB, i.e. d = 3C/4 and d = C/4 (`persistron` is its
    // chosen (4D, 16P), d = C/2).
    Config {
        name: "persistron-d75",
        dram_share: 0.75,
        ..PERSISTRON
    },
    Config {
        name: "persistron-d25",
        dram_share: 0.25,
        ..PERSISTRON
    },
    Config {
        name: "capacity-bound",
        persistron: false,
        dram_tier: false,
        wal_sync_every: 0,
        capacity_bound: true,
        ..PERSISTRON
    },
];

/// Pages in `mib` MiB.
fn pages(mib: f64) -> u64 {
    (mib * ((1u64 << 20) / PAGE as u64) as f64).round() as u64
}

fn build(
    cfg: &Config,
    dir: &std::path::Path,
    dram_mib: f64,
    disk_pages: u32,
    pmem_domain: Domain,
    sessions: u32,
) -> Result<System, BenchError> {
    let disk: Arc<dyn Disk> = Arc::new(
        FileDisk::create(dir.join(format!("{}.disk", cfg.name)), disk_pages).map_err(err)?,
    );
    let (d, pmem) = cfg.tiers(dram_mib);
    let (slots, frames, domain) = if cfg.persistron {
        (
            pages(pmem),
            if cfg.dram_tier { pages(d) } else { 0 },
            pmem_domain,
        )
    } else if cfg.capacity_bound {
        (pages(d), 0, Domain::Volatile)
    } else {
        (pages(dram_mib), 0, Domain::Volatile)
    };
    let bytes = Cache::required_bytes(slots as u32, sessions, disk_pages).map_err(err)?;
    let size = (ferrite_pmem::HEADER_SIZE + bytes).next_multiple_of(PAGE) as u64;
    let pool =
        Pool::create_in_memory(&PoolOptions::new("ferrite-cache-bench", size).domain(domain))?;
    let opts = CacheOptions {
        dram_pages: frames as usize,
        honour_non_tx: cfg.non_tx,
        transactions: cfg.persistron,
        sync_on_evict: cfg.persistron,
        fault: cfg.early_release.then_some(Fault::EarlyRelease),
    };
    let cache = Cache::create(pool.data(), disk, slots as u32, sessions, opts).map_err(err)?;
    let wal = if cfg.persistron || cfg.capacity_bound {
        None
    } else {
        // The bulk load syncs rarely; the measured run at its own period.
        Some(Wal::create(dir.join(format!("{}.wal", cfg.name)), 1 << 20).map_err(err)?)
    };
    let store = Store::create(Arc::new(cache), MEMTABLE_PAGES, wal).map_err(err)?;
    Ok(System {
        name: cfg.name,
        store,
        next_insert: AtomicU64::new(0),
        tier_dram_mib: d,
        pmem_mib: pmem,
        reads_only: cfg.capacity_bound,
    })
}

fn apply(s: &ferrite_cache::store::StoreSession, op: Op) {
    let r = match op {
        Op::Read { key } => s.get(key).map(|v| {
            std::hint::black_box(v);
        }),
        Op::Insert { key, value } | Op::Update { key, value } => s.put(key, value),
        Op::ReadModifyWrite { key, value } => s.get(key).and_then(|v| {
            std::hint::black_box(v);
            s.put(key, value)
        }),
        Op::Delete { key } => s.delete(key),
        Op::Scan { key, len } => s.scan(key, len).map(|v| {
            std::hint::black_box(v);
        }),
    };
    r.expect("store operation");
}

/// Names of [`events`], as row extras (per operation).
const EVENTS: [&str; 5] = [
    "page_ins_per_op",
    "write_backs_per_op",
    "syncs_per_op",
    "promotions_per_op",
    "demotions_per_op",
];

/// The cache's event counts of `sys`, in the order of [`EVENTS`].
fn events(sys: &System) -> [u64; 5] {
    let st = &sys.store.cache().stats;
    let n = |x: &AtomicU64| x.load(Ordering::Relaxed);
    [
        n(&st.page_ins),
        n(&st.write_backs),
        n(&st.syncs),
        n(&st.promotions),
        n(&st.demotions),
    ]
}

/// The workload groups, in the order they run (the read-only one first,
/// right after the warm-up).
const WORKLOADS: [&str; 7] = [
    "ycsb-c",
    "ycsb-b",
    "ycsb-a",
    "ycsb-f",
    "ycsb-d",
    "ycsb-e",
    "ycsb-load",
];

/// What one run measures: the environment's choices and the sizes that
/// follow from the scale.
struct Plan {
    /// `FERRITE_CACHE_WORKLOADS`: only these groups (`None`: all).
    only: Option<Vec<String>>,
    /// `FERRITE_CACHE_DOMAIN`: the persistent tier's domain.
    pmem_domain: Domain,
    /// `FERRITE_CACHE_THREADS`: thread counts of every group.
    thread_counts: Vec<usize>,
    /// Store sessions each system is built with.
    sessions: u32,
    quick: bool,
    /// The DRAM budget C, MiB.
    dram_mib: f64,
    /// Records loaded before the first group.
    records: u64,
    /// Operations of one batch (every configuration alike).
    ops: u64,
    /// Persistron's persistent tier, MiB.
    pmem_mib: f64,
    /// Pages of the (sparse) disk file.
    disk_pages: u32,
}

impl Plan {
    /// The plan at `ctx`'s scale with the environment's choices; an
    /// unknown workload, domain or thread count is an error.
    fn new(ctx: &BenchCtx) -> Result<Plan, BenchError> {
        // FERRITE_CACHE_WORKLOADS=ycsb-c,ycsb-load runs only those groups (the
        // load and the warm-up still run; rows of the others are absent).
        let only: Option<Vec<String>> = std::env::var("FERRITE_CACHE_WORKLOADS")
            .ok()
            .map(|v| v.split(',').map(|w| w.trim().to_string()).collect());
        if let Some(only) = &only
            && let Some(bad) = only.iter().find(|w| !WORKLOADS.contains(&w.as_str()))
        {
            return Err(err(format!(
                "FERRITE_CACHE_WORKLOADS: unknown workload {bad:?} (one of {})",
                WORKLOADS.join(", ")
            )));
        }
        // FERRITE_CACHE_DOMAIN=eadr runs the persistent tier as P1 assumes
        // (eADR: stores durable once visible, fences only, no flushes); the
        // default `adr` flushes every line it persists.
        let pmem_domain = match std::env::var("FERRITE_CACHE_DOMAIN") {
            Ok(v) => match Domain::parse(&v) {
                Some(d @ (Domain::Adr | Domain::Eadr)) => d,
                _ => {
                    return Err(err(format!("FERRITE_CACHE_DOMAIN: {v:?} (adr or eadr)")));
                }
            },
            Err(_) => Domain::Adr,
        };
        // FERRITE_CACHE_THREADS=1,2,8 sets the thread counts (default 1 and 2;
        // P1 ran 8 threads, with a disk that serves that many reads at once).
        let thread_counts: Vec<usize> = match std::env::var("FERRITE_CACHE_THREADS") {
            Ok(v) => v
                .split(',')
                .map(|t| match t.trim().parse::<usize>() {
                    Ok(n @ 1..=64) => Ok(n),
                    _ => Err(err(format!(
                        "FERRITE_CACHE_THREADS: {t:?} is not a thread count (1 ..= 64)"
                    ))),
                })
                .collect::<Result<_, _>>()?,
            Err(_) => vec![1, 2],
        };
        let sessions = thread_counts.iter().copied().max().unwrap_or(1).max(4) as u32;
        let quick = ctx.scale == Scale::Quick;
        let dram_mib: f64 = std::env::var("FERRITE_CACHE_DRAM_MIB")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|m: &f64| *m >= 0.125)
            .unwrap_or(ctx.scale.pick(1.0, 8.0));
        // Records of 128 B in the branches (31 per 4 KiB page, plus index
        // pages and memtables): full ≈ 8.3 × the DRAM budget C, 3.3 ×
        // Persistron's two tiers (d + 4·(C − d) = 2.5 C; P1: 60 GiB over
        // 8 GiB DRAM, or 4 + 16 GiB, 3 ×); quick ≈ 3.7 × C and 1.5 × (a load
        // of 6 × takes most of a minute here). The C ratio shrinks as the
        // dataset outgrows Persistron's tiers.
        let records = (dram_mib * ctx.scale.pick(30_000.0, 64_000.0)) as u64;
        // Every configuration runs batches of the same length. They start
        // from the same loaded store and draw the same operations, so a
        // batch's flushes and compactions fall at the same operations in
        // every configuration, and the medians compare like with like (a
        // shorter batch for the slow synced log would leave most of its
        // batches without the compactions the others pay for).
        let ops: u64 = ctx.scale.pick(2_500, 40_000);
        let pmem_mib = 4.0 * (dram_mib - dram_mib / 2.0);
        // Room for the loaded records and every record the run can insert
        // (ycsb-load: (reps + 1 warm-up) batches at each thread count; D and
        // E insert 5 %, one more share), each three times over (a compaction
        // writes the merged branch before freeing the old ones); the file is
        // sparse.
        let inserts = (thread_counts.len() as u64 + 1) * (ctx.reps.max(1) as u64 + 1) * ops;
        let disk_pages =
            (((records + inserts) * 3 * 128) / PAGE as u64 + 4096).min(u32::MAX as u64 / 2) as u32;
        Ok(Plan {
            only,
            pmem_domain,
            thread_counts,
            sessions,
            quick,
            dram_mib,
            records,
            ops,
            pmem_mib,
            disk_pages,
        })
    }

    /// Whether the group of workload `w` runs.
    fn runs(&self, w: &str) -> bool {
        self.only.as_ref().is_none_or(|o| o.iter().any(|x| x == w))
    }
}

/// Builds and loads every configuration (in `dir`) at once: the loads
/// mostly wait for the disk. The read-only bound is built only when its
/// group runs.
fn load_systems(
    ctx: &BenchCtx,
    plan: &Plan,
    dir: &std::path::Path,
) -> Result<Vec<System>, BenchError> {
    let reads_run = plan.runs("ycsb-c");
    let records = plan.records;
    let built: Vec<Result<System, BenchError>> = std::thread::scope(|sc| {
        let hs: Vec<_> = CONFIGS
            .iter()
            .filter(|cfg| reads_run || !cfg.capacity_bound)
            .map(|cfg| {
                sc.spawn(move || -> Result<System, BenchError> {
                    let t0 = std::time::Instant::now();
                    let sys = build(
                        cfg,
                        dir,
                        plan.dram_mib,
                        plan.disk_pages,
                        plan.pmem_domain,
                        plan.sessions,
                    )?;
                    let w = Workload::parse(&format!("ycsb-a:records={records}:fields=1x100"))
                        .map_err(err)?;
                    let mut l = Loader::new(&w);
                    {
                        let s = sys.store.session().map_err(err)?;
                        while let Some((k, v)) = l.next_record() {
                            s.put(k, v).map_err(err)?;
                        }
                    }
                    sys.next_insert.store(records * 4, Ordering::Relaxed);
                    if let Some(wal) = sys.store.wal() {
                        wal.set_sync_every(cfg.wal_sync_every);
                    }
                    ctx.note(format!(
                        "cache: loaded {records} records into {} in {:.1} s",
                        cfg.name,
                        t0.elapsed().as_secs_f64()
                    ));
                    Ok(sys)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(err("a load thread panicked")))
            })
            .collect()
    });
    built.into_iter().collect()
}

/// Warms every cache with the read distribution before the first
/// (read-only) group, untimed: after the load each holds the pages the
/// load wrote last, not the Zipfian working set.
fn warm(systems: &[System], records: u64) -> Result<(), BenchError> {
    let warm =
        Workload::parse(&format!("ycsb-c:records={records}:fields=1x100:ops=1g")).map_err(err)?;
    std::thread::scope(|sc| {
        for sys in systems {
            let warm = &warm;
            sc.spawn(move || {
                let s = sys.store.session().expect("session");
                let mut g = Generator::new(warm, SEED ^ 1, 0, 1).expect("generator");
                for _ in 0..records {
                    apply(&s, g.next_op().expect("endless run"));
                }
            });
        }
    });
    Ok(())
}

/// One group: workload `wname` at `threads` threads on every system that
/// takes part, interleaved (at `rctx`'s repetitions), with each row's disk
/// and tier events per operation.
fn run_group(
    ctx: &BenchCtx,
    rctx: &BenchCtx,
    plan: &Plan,
    systems: &[System],
    wname: &str,
    threads: usize,
) -> Result<Vec<Row>, BenchError> {
    let records = plan.records;
    let spec = if wname == "ycsb-load" {
        "ycsb-a"
    } else {
        wname
    };
    let w =
        Workload::parse(&format!("{spec}:records={records}:fields=1x100:ops=1g")).map_err(err)?;
    let mut variants = Vec::new();
    for sys in systems {
        if plan.quick && threads > 1 && sys.name.starts_with("persistron-") {
            continue;
        }
        if sys.reads_only && wname != "ycsb-c" {
            continue;
        }
        let gens: Vec<Mutex<Generator>> = (0..threads)
            .map(|t| {
                Generator::new(&w, SEED + threads as u64, t as u32, threads as u32).map(Mutex::new)
            })
            .collect::<Result<_, _>>()
            .map_err(err)?;
        // A scan reads up to 100 records over every memtable page
        // and each branch: YCSB-E batches are a twentieth as long
        // (for every configuration alike).
        let ops = plan.ops;
        let per_thread = if wname == "ycsb-e" { ops / 20 } else { ops } / threads as u64;
        let w2 = w.clone();
        let params = serde_json::json!({
            "workload": wname,
            "dram_mib": plan.dram_mib,
            "pmem_mib": sys.pmem_mib,
            "tier_dram_mib": sys.tier_dram_mib,
            "domain": if sys.pmem_mib > 0.0 { plan.pmem_domain.to_string() } else { "volatile".to_string() },
            "records": records,
        });
        let load = wname == "ycsb-load";
        let v = Variant::threaded(sys.name, params, threads, per_thread.max(1), move |t, n| {
            let s = sys.store.session().expect("session");
            if load {
                let (mut key, mut value) = (Vec::new(), Vec::new());
                for _ in 0..n {
                    let k = sys.next_insert.fetch_add(1, Ordering::Relaxed);
                    w2.keys.write_key(k, &mut key);
                    w2.value.write_value(&key, 0, &mut value);
                    s.put(&key, &value).expect("insert");
                }
            } else {
                let mut g = gens[t].lock();
                for _ in 0..n {
                    let op = g.next_op().expect("endless run");
                    apply(&s, op);
                }
            }
        })
        .baseline("dram-wal-sync")
        .warmup(per_thread.max(1) / 4);
        variants.push(v);
    }
    ctx.note(format!("cache: {wname}, {threads} thread(s)"));
    // Disk and tier events per operation of this group (warm-up
    // included): where the time goes when a ratio misses.
    let before: Vec<[u64; 5]> = systems.iter().map(events).collect();
    let mut group = run_interleaved(rctx, "cache", &mut variants);
    for row in &mut group {
        let Some(i) = systems.iter().position(|s| s.name == row.variant) else {
            continue;
        };
        let per_thread = row.ops / row.threads.max(1) as u64;
        let total = ((per_thread.max(1) / 4 + per_thread * row.reps as u64) * row.threads as u64)
            .max(1) as f64;
        let after = events(&systems[i]);
        for (k, name) in EVENTS.iter().enumerate() {
            row.set_extra(name, (after[k] - before[i][k]) as f64 / total);
        }
    }
    Ok(group)
}

/// Runs the suite: plan, load, warm, then every group (workload × thread
/// count) in [`WORKLOADS`] order.
pub fn run(ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    let plan = Plan::new(ctx)?;
    let dir = tempfile::Builder::new()
        .prefix("ferrite-cache-bench")
        .tempdir_in("/var/tmp")
        .or_else(|_| tempfile::tempdir())
        .map_err(|e| err(format!("temporary directory: {e}")))?;
    let systems = load_systems(ctx, &plan, dir.path())?;
    if let Some(sys) = systems.first() {
        ctx.note(format!(
            "cache: disk {}; C = {} MiB, persistron d = {} MiB + {} MiB persistent",
            sys.store.cache().disk().describe(),
            plan.dram_mib,
            plan.dram_mib / 2.0,
            plan.pmem_mib
        ));
    }
    // Quick: at most 3 repetitions, and the ablations at 1 thread only —
    // every batch here reaches the disk, and the suite must stay well
    // under a minute.
    // (An explicit `--reps` other than the default is honoured.)
    let mut rctx = ctx.clone();
    if plan.quick && ctx.reps == Scale::Quick.default_reps() {
        rctx.reps = 3;
    }
    warm(&systems, plan.records)?;
    let mut rows = Vec::new();
    for wname in WORKLOADS {
        if !plan.runs(wname) {
            continue;
        }
        for &threads in &plan.thread_counts {
            rows.extend(run_group(ctx, &rctx, &plan, &systems, wname, threads)?);
        }
    }
    if plan.quick {
        ctx.note("cache: quick scale — ratios are indicative");
    }
    for sys in &systems {
        let st = &sys.store.cache().stats;
        ctx.note(format!("cache: {} {st:?}", sys.name));
    }
    Ok(rows)
}
