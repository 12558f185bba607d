//! `ferrite bench ptm`: persistent transactional memory with ownership
//! records under every durability domain [P3], against Ferrite's
//! lock-based transactions and PMDK's.
//!
//! # The matrix
//!
//! For each of P3's workloads (`ferrite_ptm::workloads`: `tatp`,
//! `tpcc-hash`, `tpcc-bptree`, `bptree` (insert-only), `bptree-mixed`,
//! `vacation-high`, `vacation-low`) and each thread count (1, 2), one
//! interleaved group ([`crate::measure`]: A B C … A B C …, median over the
//! repetitions) runs every algorithm (`orec-eager`, `orec-lazy`) under every
//! domain (`adr`, `eadr`, `pdram`, `pdram-lite`, and `volatile`: the DRAM
//! upper bound P3 plots as "DRAM", where flushes and fences do nothing), plus
//! the fence-removal ablation: both algorithms under `adr` with
//! [`PtmOptions::fence_removal`] on (P3 Table III; the variant is *not*
//! crash-safe, see `ferrite_ptm`'s documentation). So 12 variants per
//! group, each on a pool of its own.
//!
//! Every variant of a workload starts from the same data: the workload is
//! loaded once per algorithm into an in-memory pool, whose image each
//! variant then opens under its own domain (`Pool::open_image`, which also
//! prefaults every page, so page faults stay out of the timed batches).
//! One operation is one [`PtmWorkload::run_one`] call: one committed
//! transaction (aborted attempts are re-executed inside it). Each thread
//! draws its inputs from its own seeded generator
//! (`ferrite_ptm::workloads::thread_rng`), the same seeds for every variant,
//! so every variant runs the same transactions. A variant's batch attaches a
//! fresh `PtmThread` per thread; the repetitions continue on the data the
//! previous ones left (the `bptree` tree grows, TPC-C's orders accumulate),
//! the same for every variant.
//!
//! # Peers
//!
//! In the same run, the B+tree insert workload and a hash-map insert/update
//! workload on the PTM, on `ferrite-tx` (redo and clobber: the `ferrite-ds`
//! structures, whose callers take locks) and on PMDK transactions
//! (`pmdk-tx`, feature `pmdk`: `ferrite_pmdk::txbtree` / `txmap`), all under
//! `adr` on the same keys: see [`peers`].
//!
//! # Rows
//!
//! Suite `ptm`; variant `orec-eager`, `orec-lazy`, `tx-redo`, `tx-clobber`
//! or `pmdk-tx`; `params`: `workload`, `domain`, `threads`, `experiment`
//! (`matrix` or `peers`), `fence_removal` (PTM rows), `scale`. `extra`:
//!
//! | key | meaning |
//! |---|---|
//! | `aborts_per_commit` | conflict aborts (re-executed attempts) per committed transaction (`PtmThread::stats`); 0 for the lock-based peers, which never abort |
//! | `commits_per_s` | committed transactions per second (`ops_per_s` × commits per op) |
//! | `p50_us`, `p99_us`, `p999_us` | latency of one operation (hdrhistogram, every timed repetition and thread) |
//! | `fences_per_tx`, `lines_per_tx`, `flushes_per_tx` | every fence / distinct line / flush the pool saw (the allocator's included) per committed transaction |
//! | `ptm_fences_per_writer` | the PTM's own fences per writing transaction (orec-eager: W + 2; orec-lazy: 3; 0 without fences) |
//! | `log_entries_per_writer` | undo or redo entries per writing transaction |
//! | `writer_share` | writing transactions / all committed ones |
//! | `max_log_lines` | largest redo log of one transaction, in 64-byte lines (orec-lazy; P3 §IV-B: ≤ 36 on TPC-C, ≤ 37 on Vacation) |
//! | `fence_removal` | P3's fence-free (incorrect) `adr` variant |
//! | `check` | `ok`, or what the workload's invariant check found after the run |
//! | `rep_ns_per_op` | ns/op of each timed repetition, in order (rows of a group ran their `k`-th repetitions in the same round) |
//! | `failed` | the error that stopped the variant, if any |
//!
//! `ratio_vs_baseline`: matrix rows against `orec-eager` under `adr` of the
//! same group (workload and threads); peer rows against `pmdk-tx` (against
//! `tx-redo` without the feature).
//!
//! # Summary
//!
//! [`summarize`] states the targets as ratios of rows of this run
//! each marked `met` or `missed`; they are part of the
//! headline claims `ferrite bench` ends with ([`crate::claims`]).
//!
//! # Scale
//!
//! `--quick` runs the workloads' `Quick` sizes with at most 7 repetitions
//! and batches of about 50 ms (the whole suite in 1–2 minutes on 2 cores);
//! `--full` their `Full` sizes (P3's), `ctx.reps` repetitions and 2.5× the
//! batches, on 1 GiB pools.
//! `FERRITE_PTM_WORKLOADS=tatp,bptree` runs a subset (workload names, plus
//! `vacation` for both Vacations, `peers` for the peer groups, `none` for
//! nothing; unset: everything).

use crate::ctx::{BenchCtx, Scale};
use crate::error::BenchError;
use crate::measure::{Variant, run_interleaved};
use crate::row::{Row, set_ratios};
use crate::suites::engine::{new_histogram, set_latency};
use ferrite_pmem::{Domain, Pool, PoolOptions};
use ferrite_ptm::workloads::{self as wl, PtmWorkload, WorkloadKind};
use ferrite_ptm::{Algorithm, Ptm, PtmOptions, PtmStats};
use hdrhistogram::Histogram;
use serde_json::json;
use std::sync::Mutex;
use std::time::Instant;

pub mod peers;

// The suite's targets are computed with the other claims (ferrite-rows).
pub use ferrite_rows::claims::Verdict;
pub use ferrite_rows::claims::ptm::{SUITE, Target, print_summary, summarize};

/// Environment variable choosing the workloads (module documentation).
pub const WORKLOADS_ENV: &str = "FERRITE_PTM_WORKLOADS";
/// The domains of the matrix, `volatile` (the DRAM upper bound) last.
pub const DOMAINS: [Domain; 5] = [
    Domain::Adr,
    Domain::Eadr,
    Domain::Pdram,
    Domain::PdramLite,
    Domain::Volatile,
];
/// Layout name of the suite's pools.
pub const LAYOUT: &str = "bench-ptm";
/// Seed of the workloads' data and of every thread's input stream.
pub const SEED: u64 = 0x5033_7074_6d00_0001;
const MIB: u64 = 1 << 20;

/// What one run of the suite does.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Data sizes of the workloads.
    pub wl_scale: wl::Scale,
    pub workloads: Vec<WorkloadKind>,
    pub threads: Vec<usize>,
    pub domains: Vec<Domain>,
    /// Add the fence-removal variants (adr) to every matrix group.
    pub fence_removal: bool,
    /// Timed repetitions (a warm-up batch precedes them).
    pub reps: usize,
    /// Transactions per thread per batch of the cheapest workloads (see
    /// [`Plan::ops_per_thread`]).
    pub ops: u64,
    /// Bytes of each matrix pool.
    pub pool_bytes: u64,
    /// Run the peer groups ([`peers`]).
    pub peers: bool,
    /// Keys the peers insert over the warm-up and the repetitions
    /// (summed over threads).
    pub peer_keys: u64,
    /// Run each workload's invariant check after its group.
    pub check: bool,
}

impl Plan {
    /// The plan of `ctx`'s scale, with the workloads of [`WORKLOADS_ENV`].
    pub fn for_ctx(ctx: &BenchCtx) -> Result<Plan, BenchError> {
        let mut p = match ctx.scale {
            Scale::Quick => Plan {
                wl_scale: wl::Scale::Quick,
                workloads: WorkloadKind::ALL.to_vec(),
                threads: vec![1, 2],
                domains: DOMAINS.to_vec(),
                fence_removal: true,
                reps: ctx.reps.clamp(1, 7),
                ops: 40_000,
                pool_bytes: 128 * MIB,
                peers: true,
                peer_keys: 150_000,
                check: true,
            },
            Scale::Full => Plan {
                wl_scale: wl::Scale::Full,
                workloads: WorkloadKind::ALL.to_vec(),
                threads: vec![1, 2],
                domains: DOMAINS.to_vec(),
                fence_removal: true,
                reps: ctx.reps.max(1),
                ops: 100_000,
                pool_bytes: 1024 * MIB,
                peers: true,
                peer_keys: 1_000_000,
                check: true,
            },
        };
        if let Ok(v) = std::env::var(WORKLOADS_ENV) {
            p.select(&v)?;
        }
        Ok(p)
    }

    /// A plan small enough for tests: `Tiny` data, one repetition, tiny
    /// batches, 1 and 2 threads.
    pub fn tiny() -> Plan {
        Plan {
            wl_scale: wl::Scale::Tiny,
            workloads: WorkloadKind::ALL.to_vec(),
            threads: vec![1, 2],
            domains: DOMAINS.to_vec(),
            fence_removal: true,
            reps: 1,
            ops: 200,
            pool_bytes: 32 * MIB,
            peers: true,
            peer_keys: 600,
            check: true,
        }
    }

    /// Keeps only what `list` names (comma-separated, module documentation).
    pub fn select(&mut self, list: &str) -> Result<(), BenchError> {
        let mut kinds = Vec::new();
        let mut peers = false;
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "peers" => peers = true,
                "none" => {}
                "vacation" => {
                    kinds.extend([WorkloadKind::VacationHigh, WorkloadKind::VacationLow])
                }
                _ => kinds.push(WorkloadKind::parse(name).ok_or_else(|| {
                    BenchError::Unsupported(format!(
                        "{WORKLOADS_ENV}: unknown workload '{name}' (known: {}, vacation, peers, none)",
                        WorkloadKind::ALL.map(|k| k.name()).join(", ")
                    ))
                })?),
            }
        }
        self.workloads = WorkloadKind::ALL
            .into_iter()
            .filter(|k| kinds.contains(k))
            .collect();
        self.peers = peers;
        Ok(())
    }

    /// Transactions per thread in one batch of `kind`: [`Plan::ops`] ×
    /// the kind's share, chosen so that a batch of the slowest variant
    /// (orec-eager under adr) takes about 50 ms at quick scale on this
    /// machine (quick): the kinds cost ≈ 1 µs (TATP's one update, the mixed
    /// B+tree's lookups), 4 µs (a B+tree insert), 7 µs (a Vacation client
    /// action), 12–20 µs (a New-Order) per transaction.
    ///
    /// `tpcc-hash` gets shorter batches (≈ 10 ms): its hash index has a
    /// fixed bucket array of twice the loaded rows, and every New-Order
    /// adds about 5 rows (order, new-order, 2–4 lines) that stay, so the
    /// warm-up and the repetitions of a variant together may add only about
    /// as many rows as were loaded (quick: ≈ 4 600 New-Orders per thread
    /// count) before the chains grow and a New-Order slows down rep after
    /// rep (measured: from 7 to 14 µs over 7 repetitions of 4 000 per
    /// thread), which would mix the index's overload into every ratio.
    pub fn ops_per_thread(&self, kind: WorkloadKind) -> u64 {
        let per_mille = match kind {
            WorkloadKind::Tatp => 1000,
            WorkloadKind::BptreeMixed => 600,
            WorkloadKind::Bptree => 300,
            WorkloadKind::VacationHigh | WorkloadKind::VacationLow => 175,
            WorkloadKind::TpccHash => 15,
            WorkloadKind::TpccBptree => 60,
        };
        (self.ops * per_mille / 1000).max(1)
    }
}

/// Runs the suite at `ctx`'s scale.
pub fn run(ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    run_plan(ctx, &Plan::for_ctx(ctx)?)
}

/// Runs the suite with an explicit plan.
pub fn run_plan(ctx: &BenchCtx, plan: &Plan) -> Result<Vec<Row>, BenchError> {
    let started = Instant::now();
    let ctx = ctx.clone().with_reps(plan.reps);
    let mut rows = Vec::new();
    for &kind in &plan.workloads {
        let w = wl::make(kind, plan.wl_scale, SEED);
        let t0 = Instant::now();
        let images = load_images(&*w, plan)?;
        ctx.note(format!(
            "[ptm] {}: loaded in {:.2} s ({:.0} s so far)",
            kind.name(),
            t0.elapsed().as_secs_f64(),
            started.elapsed().as_secs_f64()
        ));
        for &threads in &plan.threads {
            rows.extend(matrix_group(&ctx, plan, &*w, &images, threads)?);
        }
    }
    if plan.peers {
        for &threads in &plan.threads {
            for s in peers::PeerWorkload::ALL {
                ctx.note(format!(
                    "[ptm] peers {} x{threads} ({:.0} s so far)",
                    s.name(),
                    started.elapsed().as_secs_f64()
                ));
                rows.extend(peers::group(&ctx, plan, s, threads)?);
            }
        }
    }
    ctx.note(format!(
        "[ptm] done in {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(rows)
}

/// The PTM options of every pool of the suite: a slot per thread plus one
/// (loading and checking).
pub fn ptm_options(alg: Algorithm, plan: &Plan) -> PtmOptions {
    let slots = plan.threads.iter().copied().max().unwrap_or(1) as u16 + 1;
    PtmOptions::new(alg).slots(slots)
}

fn ptm_err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Unsupported(format!("ptm {what}: {e}"))
}

/// The pool image of `w` loaded under each algorithm (in that order).
fn load_images(w: &dyn PtmWorkload, plan: &Plan) -> Result<Vec<Vec<u8>>, BenchError> {
    Algorithm::ALL
        .iter()
        .map(|&alg| {
            // Loaded without flushes or fences: only the image matters.
            let pool = Pool::create_in_memory(
                &PoolOptions::new(LAYOUT, plan.pool_bytes).domain(Domain::Volatile),
            )?;
            let ptm =
                Ptm::create(&pool, &ptm_options(alg, plan)).map_err(|e| ptm_err("create", e))?;
            w.load(&ptm)
                .map_err(|e| ptm_err(&format!("loading {}", w.kind().name()), e))?;
            drop(ptm);
            Ok(pool.image())
        })
        .collect()
}

/// One PTM configuration of a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    pub algorithm: Algorithm,
    pub domain: Domain,
    pub fence_removal: bool,
}

impl Config {
    /// The name unique within a group (rows carry `algorithm.name()`).
    pub fn key(&self) -> String {
        format!(
            "{}/{}{}",
            self.algorithm.name(),
            self.domain.name(),
            if self.fence_removal { "/no-fences" } else { "" }
        )
    }
}

/// The configurations of a matrix group, in the order they are measured.
pub fn configs(plan: &Plan) -> Vec<Config> {
    let mut v = Vec::new();
    for &domain in &plan.domains {
        for algorithm in Algorithm::ALL {
            v.push(Config {
                algorithm,
                domain,
                fence_removal: false,
            });
        }
    }
    if plan.fence_removal && plan.domains.contains(&Domain::Adr) {
        for algorithm in Algorithm::ALL {
            v.push(Config {
                algorithm,
                domain: Domain::Adr,
                fence_removal: true,
            });
        }
    }
    v
}

/// What one thread of a PTM variant accumulates over the timed batches.
pub(crate) struct Lane {
    pub rng: wl::Rng,
    pub hist: Histogram<u64>,
    /// Batches run (the first is the warm-up, not recorded).
    pub batches: u64,
    pub stats: PtmStats,
    /// Start and end of each timed batch on this thread ([`retime`]).
    pub spans: Vec<(Instant, Instant)>,
}

impl Lane {
    pub fn new(thread: usize) -> Lane {
        Lane {
            rng: wl::thread_rng(SEED, thread),
            hist: new_histogram(),
            batches: 0,
            stats: PtmStats::default(),
            spans: Vec::new(),
        }
    }
}

/// Replaces a row's timing with the one its threads measured themselves:
/// the wall time of repetition `k` is from the earliest start to the
/// latest end of the threads' `k`-th timed batch (`spans[thread][k]`); the
/// row gets the median over repetitions and its spread, and
/// `extra.rep_ns_per_op`, the ns/op of every repetition in order (the
/// summary pairs the repetitions of two variants of a group).
///
/// Why not the harness's own clock: it starts after the start barrier on
/// the calling thread, and on a loaded 2-core machine that thread can be
/// descheduled right after the barrier while the workers run the whole
/// batch, which then measures as nearly nothing (seen here: rows of
/// 10^9 transactions/s). The workers' own clocks cannot miss their work.
pub fn retime(row: &mut Row, spans: &[Vec<(Instant, Instant)>]) {
    let reps = spans.iter().map(Vec::len).min().unwrap_or(0);
    if reps == 0 || row.ops == 0 {
        return;
    }
    let ns: Vec<f64> = (0..reps)
        .map(|k| {
            let start = spans.iter().map(|s| s[k].0).min();
            let end = spans.iter().map(|s| s[k].1).max();
            match (start, end) {
                (Some(a), Some(b)) => b.duration_since(a).as_secs_f64() * 1e9 / row.ops as f64,
                _ => 0.0,
            }
        })
        .collect();
    let med = crate::measure::median(&ns);
    row.set_extra(
        "rep_ns_per_op",
        ns.iter()
            .map(|v| (v * 10.0).round() / 10.0)
            .collect::<Vec<f64>>(),
    );
    if med > 0.0 {
        row.ns_per_op = med;
        row.ops_per_s = 1e9 / med;
        row.secs = med * row.ops as f64 / 1e9;
        row.ns_per_op_spread = crate::measure::spread(&ns);
    }
}

/// `a + b`, the largest log of both.
pub fn add_stats(a: &PtmStats, b: &PtmStats) -> PtmStats {
    PtmStats {
        commits: a.commits + b.commits,
        writer_commits: a.writer_commits + b.writer_commits,
        aborts: a.aborts + b.aborts,
        user_aborts: a.user_aborts + b.user_aborts,
        fences: a.fences + b.fences,
        log_entries: a.log_entries + b.log_entries,
        max_log_lines: a.max_log_lines.max(b.max_log_lines),
    }
}

/// A PTM variant of a group: its pool, its lanes and what went wrong.
struct Member {
    config: Config,
    _pool: Pool,
    ptm: Ptm,
    lanes: Vec<Mutex<Lane>>,
    failed: Mutex<Option<String>>,
}

/// Records `e` as the reason member `failed` stopped (the first one wins).
pub(crate) fn fail(failed: &Mutex<Option<String>>, e: impl std::fmt::Display) {
    if let Ok(mut f) = failed.lock() {
        f.get_or_insert_with(|| e.to_string());
    }
}

pub(crate) fn has_failed(failed: &Mutex<Option<String>>) -> bool {
    failed.lock().map(|f| f.is_some()).unwrap_or(true)
}

/// One batch of `n` operations of thread `t` of `threads` on `ptm`: `op`
/// runs one operation on the thread's handle and generator.
pub(crate) fn ptm_batch(
    ptm: &Ptm,
    lane: &Mutex<Lane>,
    failed: &Mutex<Option<String>>,
    n: u64,
    mut op: impl FnMut(&mut ferrite_ptm::PtmThread<'_>, &mut wl::Rng) -> Result<(), String>,
) {
    if has_failed(failed) {
        return;
    }
    let Ok(mut lane) = lane.lock() else {
        return;
    };
    let lane = &mut *lane;
    let record = lane.batches > 0;
    lane.batches += 1;
    let started = Instant::now();
    let mut th = match ptm.thread() {
        Ok(th) => th,
        Err(e) => return fail(failed, e),
    };
    for _ in 0..n {
        let t0 = Instant::now();
        if let Err(e) = op(&mut th, &mut lane.rng) {
            return fail(failed, e);
        }
        if record {
            let ns = t0.elapsed().as_nanos() as u64;
            lane.hist.saturating_record(ns.max(1));
        }
    }
    if record {
        lane.stats = add_stats(&lane.stats, &th.stats());
        lane.spans.push((started, Instant::now()));
    }
}

/// The timed spans of `lanes` ([`retime`]).
fn spans_of(lanes: &[Mutex<Lane>]) -> Vec<Vec<(Instant, Instant)>> {
    lanes
        .iter()
        .map(|l| l.lock().map(|l| l.spans.clone()).unwrap_or_default())
        .collect()
}

/// Fills a PTM row's `extra` from its lanes (see the module documentation).
pub(crate) fn ptm_extra(row: &mut Row, lanes: &[Mutex<Lane>], failed: &Mutex<Option<String>>) {
    let mut hist = new_histogram();
    let mut st = PtmStats::default();
    for l in lanes {
        if let Ok(l) = l.lock() {
            let _ = hist.add(&l.hist);
            st = add_stats(&st, &l.stats);
        }
    }
    ptm_extra_from(row, &hist, &st, failed);
}

/// Fills a PTM row's `extra` from its latencies and transaction counts.
pub(crate) fn ptm_extra_from(
    row: &mut Row,
    hist: &Histogram<u64>,
    st: &PtmStats,
    failed: &Mutex<Option<String>>,
) {
    set_latency(row, hist);
    let ops = (row.ops * row.reps as u64) as f64;
    let commits = st.commits.max(1) as f64;
    let writers = st.writer_commits.max(1) as f64;
    let commits_per_op = if ops > 0.0 {
        st.commits as f64 / ops
    } else {
        0.0
    };
    row.set_extra("commits_per_s", row.ops_per_s * commits_per_op);
    row.set_extra("aborts_per_commit", st.aborts as f64 / commits);
    row.set_extra("user_aborts", st.user_aborts);
    row.set_extra("writer_share", st.writer_commits as f64 / commits);
    if commits_per_op > 0.0 {
        row.set_extra("fences_per_tx", row.fences_per_op / commits_per_op);
        row.set_extra("lines_per_tx", row.lines_per_op / commits_per_op);
        row.set_extra("flushes_per_tx", row.flushes_per_op / commits_per_op);
    }
    row.set_extra("ptm_fences_per_writer", st.fences as f64 / writers);
    row.set_extra("log_entries_per_writer", st.log_entries as f64 / writers);
    row.set_extra("max_log_lines", st.max_log_lines);
    set_failed(row, failed);
}

/// `extra.failed` when the variant stopped on an error.
pub(crate) fn set_failed(row: &mut Row, failed: &Mutex<Option<String>>) {
    if let Ok(f) = failed.lock()
        && let Some(e) = f.as_ref()
    {
        row.set_extra("failed", e.as_str());
    }
}

/// One matrix group: every configuration of `plan` on workload `w` with
/// `threads` threads.
fn matrix_group(
    ctx: &BenchCtx,
    plan: &Plan,
    w: &dyn PtmWorkload,
    images: &[Vec<u8>],
    threads: usize,
) -> Result<Vec<Row>, BenchError> {
    let kind = w.kind();
    let t_open = Instant::now();
    let mut members = Vec::new();
    for config in configs(plan) {
        let i = Algorithm::ALL
            .iter()
            .position(|&a| a == config.algorithm)
            .unwrap_or(0);
        let pool = Pool::open_image(
            &images[i],
            &PoolOptions::new(LAYOUT, plan.pool_bytes),
            config.domain,
            None,
        )?;
        let opts = ptm_options(config.algorithm, plan).fence_removal(config.fence_removal);
        let ptm = Ptm::open(&pool, &opts).map_err(|e| ptm_err("open", e))?;
        members.push(Member {
            config,
            _pool: pool,
            ptm,
            lanes: (0..threads).map(|t| Mutex::new(Lane::new(t))).collect(),
            failed: Mutex::new(None),
        });
    }
    ctx.note(format!(
        "[ptm] {} x{threads}: {} pools opened in {:.2} s",
        kind.name(),
        members.len(),
        t_open.elapsed().as_secs_f64()
    ));
    let per_thread = plan.ops_per_thread(kind);
    let base = Config {
        algorithm: Algorithm::Eager,
        domain: Domain::Adr,
        fence_removal: false,
    };
    let has_base = members.iter().any(|m| m.config == base);
    let mut variants: Vec<Variant<'_>> = Vec::new();
    for m in &members {
        let (ptm, lanes, failed) = (&m.ptm, &m.lanes, &m.failed);
        let body = move |t: usize, n: u64| {
            ptm_batch(ptm, &lanes[t], failed, n, |th, rng| {
                w.run_one(th, t, threads, rng).map_err(|e| e.to_string())
            });
        };
        let mut v = Variant::threaded(
            m.config.key(),
            json!({
                "workload": kind.name(),
                "domain": m.config.domain.name(),
                "threads": threads,
                "experiment": "matrix",
                "fence_removal": m.config.fence_removal,
                "scale": format!("{:?}", plan.wl_scale).to_lowercase(),
            }),
            threads,
            per_thread,
            body,
        );
        if has_base && m.config != base {
            v = v.baseline(base.key());
        }
        variants.push(v);
    }
    let mut rows = run_interleaved(ctx, SUITE, &mut variants);
    drop(variants);
    for (row, m) in rows.iter_mut().zip(&members) {
        retime(row, &spans_of(&m.lanes));
    }
    set_ratios(&mut rows);
    let t_check = Instant::now();
    for (row, m) in rows.iter_mut().zip(&members) {
        row.variant = m.config.algorithm.name().to_string();
        if row.baseline.is_some() {
            row.baseline = Some(base.algorithm.name().to_string());
        }
        ptm_extra(row, &m.lanes, &m.failed);
        row.set_extra("fence_removal", m.config.fence_removal);
        if plan.check {
            let verdict = match w.check(&m.ptm) {
                Ok(()) => "ok".to_string(),
                Err(e) => e,
            };
            row.set_extra("check", verdict);
        }
    }
    ctx.note(format!(
        "[ptm] {} x{threads}: checked in {:.2} s",
        kind.name(),
        t_check.elapsed().as_secs_f64()
    ));
    let t_drop = Instant::now();
    drop(members);
    ctx.note(format!(
        "[ptm] {} x{threads}: pools dropped in {:.2} s",
        kind.name(),
        t_drop.elapsed().as_secs_f64()
    ));
    Ok(rows)
}
