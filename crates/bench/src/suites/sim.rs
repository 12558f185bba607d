//! `ferrite bench sim`: P4's fine-grained data committing on `ferrite-sim`'s
//! memory-controller model, fed by Ferrite's own persist traces [P4].
//!
//! Workloads, one task per simulated core (16, P4 §IV-A):
//! - `synthetic`: `ferrite_sim::synthetic`, reads:writes 1.96:1 (P4 §IV-B),
//!   one seeded stream per core;
//! - recorded (feature `trace`, on in the `ferrite` binary): a persist trace
//!   of one thread of a Ferrite component, recorded here and now on an
//!   in-memory `eadr` pool (so the recorded gaps hold no flush cost), with
//!   the commit points the components mark themselves (ferrite-pmem's
//!   `trace::CommitScope`: one per durable commit of the outermost
//!   component; reads commit nothing): `log` (Classic log appends of 64 B),
//!   `tx-hashmap` (undo-logged hash-map inserts, YCSB load),
//!   `engine-ycsb-a` (the CoW engine under YCSB A after a load),
//!   `engine-tpcc` (the InP engine under TPC-C's mix, one warehouse at
//!   the quick cardinalities, each transaction's writes one batch; half
//!   as many transactions as the others' operations),
//!   `server-95/5` (the memcached server's item store — `Cache` over the
//!   undo-logged byte map, what a shard thread runs per request — serving
//!   P1's 95 % sets / 5 % gets of 16 B keys and 64 B values over a
//!   preloaded key space; in process, not under memcaslap: the server runs
//!   as a child `ferrite serve` there, which `ferrite trace` does not
//!   record, and the network path adds no persists). Each core
//!   replays the same trace in its own address space, started at a
//!   different point (core `c` at op `c × len / 16`) so the tasks do not
//!   move in lockstep; the cores share one copy of the program
//!   (`ferrite_sim::Task`). A recording that would exceed
//!   `trace::MAX_EVENTS` is an error, not a silently cut trace.
//!
//! Rows (suite `sim`): `variant` is the commit mode (`global`,
//! `fine-grained`, `adr`, `eadr`); `params` has `workload`, `cores`,
//! `commit_every`, `sweep` (`main`, `commit-frequency`, `sub-queues`
//! (16 tasks share them: tasks per queue = 16 ÷ sub-queues),
//! `queue-entries`, `write-latency`, `global-combining`,
//! `optane-projection`) and the swept
//! value; `extra` has `ipc`, `commit_cycles` (mean), `commit_p50`,
//! `commit_p99`, `sync_reads` (with `commit_syncs`, `credit_syncs`), media
//! traffic, and the model's own speed (`events`, `events_per_s`,
//! `wall_secs`). The time fields of these rows are **simulated**:
//! `ops` = instructions retired by all cores, `secs` = simulated seconds
//! (every mode runs the same cycles, as in P4), so `ops_per_s` is the
//! simulated machine's throughput and every non-global row's
//! `ratio_vs_baseline` is its IPC ÷ the global row's of the same
//! configuration. Counter columns are `n/a`: nothing ran through a pool.
//!
//! Each main fine-grained row also says whether a second replay of the
//! same programs gave identical statistics (`replayed_identically`).
//!
//! Also: a row `workload = average` (variant `fine-grained`) with the
//! means over the main workloads of the per-workload ratios `ipc_ratio`,
//! `commit_cycles_ratio` and `sync_reads_ratio` (the headline claims), and
//! a row `model` with the events per wall-clock second of the whole suite.
//! The `optane-projection` rows run each recorded trace once on one core
//! under `adr` with the Optane-like profile and state the projected time
//! per operation beside the time measured on this machine for the same
//! operations (without recording).

use crate::ctx::BenchCtx;
use crate::error::BenchError;
use crate::row::Row;
use ferrite_sim::{
    Config, Mode, NvmProfile, Program, Run, Stats, Synthetic, Task, simulate_tasks, synthetic,
};
use serde_json::json;
use std::time::Instant;

/// Simulated cores (P4 runs 16).
pub const CORES: usize = 16;

/// Commit intervals of the commit-frequency sweep (P4 Fig. 10: 1…100).
pub const COMMIT_EVERY: [u32; 7] = [1, 2, 5, 10, 20, 50, 100];

/// Sub-queue counts of the sweep P4 lacks.
pub const SUB_QUEUES: [usize; 5] = [1, 2, 4, 8, 16];

/// Entries per write sub-queue (and credits per queue) of a sweep P4 lacks.
pub const QUEUE_ENTRIES: [usize; 3] = [4, 8, 16];

/// Media write latencies (ns) of the other sweep P4 lacks.
pub const WRITE_NS: [f64; 3] = [150.0, 300.0, 600.0];

/// One workload: what each core runs.
pub struct Workload {
    pub name: String,
    /// The distinct programs.
    pub programs: Vec<Program>,
    /// Per core: the index of its program and the op it begins at.
    pub cores: Vec<(usize, usize)>,
}

impl Workload {
    /// One program per core, each from its start.
    pub fn distinct(name: &str, programs: Vec<Program>) -> Workload {
        Workload {
            name: name.into(),
            cores: (0..programs.len()).map(|c| (c, 0)).collect(),
            programs,
        }
    }

    /// `cores` tasks sharing `program` (a recorded trace: no copy of it per
    /// core), core `c` begun at op `c × len / cores` so the tasks do not
    /// move in lockstep ([`ferrite_sim::Task::staggered`]).
    pub fn shared(name: &str, program: Program, cores: usize) -> Workload {
        let len = program.ops.len();
        Workload {
            name: name.into(),
            programs: vec![program],
            cores: (0..cores).map(|c| (0, c * len / cores.max(1))).collect(),
        }
    }

    /// The cores' tasks.
    pub fn tasks(&self) -> Vec<Task<'_>> {
        self.cores
            .iter()
            .map(|&(p, start)| Task {
                program: &self.programs[p],
                start,
            })
            .collect()
    }
}

/// The synthetic workload at `commit_every`, one seeded stream per core.
pub fn synthetic_workload(cores: usize, commit_every: u32, updates: u32) -> Workload {
    let p = Synthetic {
        updates,
        commit_every,
        ..Synthetic::default()
    };
    Workload::distinct(
        "synthetic",
        (0..cores).map(|c| synthetic(&p, 1, c)).collect(),
    )
}

/// Tallies the model's speed over the suite.
#[derive(Default)]
struct Speed {
    events: u64,
    secs: f64,
}

/// Simulates and turns the statistics into a row.
#[allow(clippy::too_many_arguments)]
fn sim_row(
    cfg: &Config,
    w: &Workload,
    run: Run,
    commit_every: u32,
    sweep: &str,
    extra_params: serde_json::Value,
    speed: &mut Speed,
) -> Result<(Row, Stats), BenchError> {
    let t = Instant::now();
    let s = simulate_tasks(cfg, &w.tasks(), run)
        .map_err(|e| BenchError::Unsupported(format!("sim {}: {e}", w.name)))?;
    let wall = t.elapsed().as_secs_f64();
    speed.events += s.events;
    speed.secs += wall;
    let mut r = Row::empty(
        "sim",
        cfg.mode.name(),
        json!({
            "workload": w.name,
            "cores": w.cores.len(),
            "commit_every": commit_every,
            "sweep": sweep,
            "nvm": cfg.nvm.name,
        }),
    );
    if let Some(map) = extra_params.as_object() {
        for (k, v) in map {
            r.set_param(k, v.clone());
        }
    }
    r.threads = w.cores.len().max(1);
    r.ops = s.instructions.iter().sum();
    r.secs = s.cycles as f64 / (cfg.ghz * 1e9);
    if r.secs > 0.0 && r.ops > 0 {
        r.ops_per_s = r.ops as f64 / r.secs;
        r.ns_per_op = 1e9 / r.ops_per_s;
    }
    r.reps = 1;
    r.counters_observed = false;
    if cfg.mode != Mode::Global {
        r.baseline = Some("global".into());
    }
    r.set_extra("ipc", s.ipc());
    r.set_extra("cycles", s.cycles);
    r.set_extra("commits", s.commits());
    r.set_extra("commit_cycles", s.mean_commit_cycles());
    r.set_extra("commit_p50", s.commit_quantile(0.5));
    r.set_extra("commit_p99", s.commit_quantile(0.99));
    r.set_extra("sync_reads", s.sync_reads);
    r.set_extra("commit_syncs", s.commit_syncs);
    r.set_extra("credit_syncs", s.credit_syncs);
    r.set_extra("media_reads", s.media_reads);
    r.set_extra("media_writes", s.media_writes);
    r.set_extra("media_blocks", s.media_blocks);
    r.set_extra("media_partial_blocks", s.media_partial_blocks);
    r.set_extra("write_stall_cycles", s.write_stall_cycles);
    r.set_extra("events", s.events);
    r.set_extra("wall_secs", wall);
    if wall > 0.0 {
        r.set_extra("events_per_s", s.events as f64 / wall);
    }
    Ok((r, s))
}

/// Fills the ratios of one group (rows of one configuration, `global`
/// among them): `ratio_vs_baseline` (IPC), and for the others
/// `commit_cycles_ratio` and `sync_reads_ratio` against global.
fn ratios(group: &mut [(Row, Stats)]) {
    let Some(g) = group
        .iter()
        .find(|(r, _)| r.variant == "global")
        .map(|(_, s)| s.clone())
    else {
        return;
    };
    for (r, s) in group.iter_mut().filter(|(r, _)| r.variant != "global") {
        if g.ipc() > 0.0 {
            r.ratio_vs_baseline = Some(s.ipc() / g.ipc());
        }
        if g.mean_commit_cycles() > 0.0 {
            r.set_extra(
                "commit_cycles_ratio",
                s.mean_commit_cycles() / g.mean_commit_cycles(),
            );
        }
        if g.sync_reads > 0 {
            r.set_extra(
                "sync_reads_ratio",
                s.sync_reads as f64 / g.sync_reads as f64,
            );
        }
    }
}

/// Runs `modes` on one configuration and returns the rows with ratios.
#[allow(clippy::too_many_arguments)]
fn group(
    base: &Config,
    modes: &[Mode],
    w: &Workload,
    cycles: u64,
    commit_every: u32,
    sweep: &str,
    extra_params: serde_json::Value,
    speed: &mut Speed,
) -> Result<Vec<(Row, Stats)>, BenchError> {
    let mut g = Vec::new();
    for &m in modes {
        let cfg = base.clone().with_mode(m);
        g.push(sim_row(
            &cfg,
            w,
            Run::Cycles(cycles),
            commit_every,
            sweep,
            extra_params.clone(),
            speed,
        )?);
    }
    ratios(&mut g);
    Ok(g)
}

/// Runs the suite.
pub fn run(ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    let cycles: u64 = ctx.scale.pick(200_000, 2_000_000);
    let updates: u32 = ctx.scale.pick(2_000, 20_000);
    let mut speed = Speed::default();
    let mut rows: Vec<Row> = Vec::new();
    let table2 = Config::table2(Mode::Global);

    let recorded = record::all(ctx)?;
    let workloads = main_workloads(&table2, &recorded, updates);

    let per_workload = main_comparison(ctx, &table2, &workloads, cycles, &mut speed, &mut rows)?;
    if let Some(avg) = average_row(&per_workload, &workloads) {
        rows.push(avg);
    }
    commit_frequency_sweep(ctx, &table2, cycles, updates, &mut speed, &mut rows)?;
    config_sweeps(ctx, &table2, cycles, updates, &mut speed, &mut rows)?;
    optane_projection(&table2, &recorded, &mut speed, &mut rows)?;
    rows.push(model_row(&speed));
    Ok(rows)
}

/// The workloads of the main comparison: the synthetic one (a commit per
/// update) first, then each recorded trace shared by [`CORES`] cores, in
/// `recorded`'s order.
fn main_workloads(table2: &Config, recorded: &[Recorded], updates: u32) -> Vec<Workload> {
    let mut workloads = vec![synthetic_workload(CORES, 1, updates)];
    for r in recorded {
        workloads.push(Workload::shared(
            r.name,
            Program::from_trace(&r.trace, table2.instr_per_ns, 1),
            CORES,
        ));
    }
    workloads
}

/// The main comparison: every workload, every mode, 16 cores, a commit per
/// update. Appends the rows to `rows` and returns, per workload whose
/// fine-grained row has all three, its (IPC, commit cycles, sync reads)
/// ratios against global, the inputs of [`average_row`].
fn main_comparison(
    ctx: &BenchCtx,
    table2: &Config,
    workloads: &[Workload],
    cycles: u64,
    speed: &mut Speed,
    rows: &mut Vec<Row>,
) -> Result<Vec<(f64, f64, f64)>, BenchError> {
    let mut per_workload: Vec<(f64, f64, f64)> = Vec::new();
    for w in workloads {
        ctx.note(format!("sim: {} on {CORES} cores, 4 modes", w.name));
        let mut g = group(table2, &Mode::ALL, w, cycles, 1, "main", json!({}), speed)?;
        // Determinism, measured: the fine-grained run replayed on the same
        // programs must give the very same statistics.
        if let Some((r, s)) = g.iter_mut().find(|(r, _)| r.variant == "fine-grained") {
            let again = simulate_tasks(
                &table2.clone().with_mode(Mode::FineGrained),
                &w.tasks(),
                Run::Cycles(cycles),
            )
            .map_err(|e| BenchError::Unsupported(format!("sim {}: {e}", w.name)))?;
            r.set_extra("replayed_identically", again == *s);
        }
        if let Some((r, _)) = g.iter().find(|(r, _)| r.variant == "fine-grained") {
            let x = |k: &str| r.extra.as_ref().and_then(|e| e.get(k)?.as_f64());
            if let (Some(i), Some(c), Some(s)) = (
                r.ratio_vs_baseline,
                x("commit_cycles_ratio"),
                x("sync_reads_ratio"),
            ) {
                per_workload.push((i, c, s));
            }
        }
        rows.extend(g.into_iter().map(|(r, _)| r));
    }
    Ok(per_workload)
}

/// The `workload = average` row: the means of the per-workload ratios of
/// [`main_comparison`]; `None` when no workload gave all three.
fn average_row(per_workload: &[(f64, f64, f64)], workloads: &[Workload]) -> Option<Row> {
    if per_workload.is_empty() {
        return None;
    }
    let n = per_workload.len() as f64;
    let mean = |f: fn(&(f64, f64, f64)) -> f64| per_workload.iter().map(f).sum::<f64>() / n;
    let mut avg = Row::empty(
        "sim",
        "fine-grained",
        json!({"workload": "average", "cores": CORES, "commit_every": 1, "sweep": "main", "nvm": "pcm"}),
    );
    avg.threads = CORES;
    avg.counters_observed = false;
    avg.baseline = Some("global".into());
    avg.set_extra(
        "summary",
        "means over the main workloads of fine-grained ÷ global",
    );
    avg.set_extra(
        "workloads",
        workloads.iter().map(|w| w.name.clone()).collect::<Vec<_>>(),
    );
    avg.set_extra("ipc_ratio", mean(|t| t.0));
    avg.set_extra("commit_cycles_ratio", mean(|t| t.1));
    avg.set_extra("sync_reads_ratio", mean(|t| t.2));
    Some(avg)
}

/// P4 Fig. 10: the synthetic workload committing every 1…100 updates,
/// global against fine-grained.
fn commit_frequency_sweep(
    ctx: &BenchCtx,
    table2: &Config,
    cycles: u64,
    updates: u32,
    speed: &mut Speed,
    rows: &mut Vec<Row>,
) -> Result<(), BenchError> {
    for every in COMMIT_EVERY {
        ctx.note(format!("sim: commit every {every} updates"));
        let w = synthetic_workload(CORES, every, updates);
        let g = group(
            table2,
            &[Mode::Global, Mode::FineGrained],
            &w,
            cycles,
            every,
            "commit-frequency",
            json!({}),
            speed,
        )?;
        rows.extend(g.into_iter().map(|(r, _)| r));
    }
    Ok(())
}

/// Sweeps P4 lacks, global against fine-grained on the synthetic
/// workload: sub-queues, entries per sub-queue, media write latency, and
/// how concurrent global commits combine.
fn config_sweeps(
    ctx: &BenchCtx,
    table2: &Config,
    cycles: u64,
    updates: u32,
    speed: &mut Speed,
    rows: &mut Vec<Row>,
) -> Result<(), BenchError> {
    let modes = [Mode::Global, Mode::FineGrained];
    let w = synthetic_workload(CORES, 1, updates);
    for q in SUB_QUEUES {
        ctx.note(format!("sim: {q} sub-queues"));
        let mut cfg = table2.clone();
        cfg.sub_queues = q;
        let params = json!({ "sub_queues": q });
        let g = group(&cfg, &modes, &w, cycles, 1, "sub-queues", params, speed)?;
        rows.extend(g.into_iter().map(|(r, _)| r));
    }
    // At one write per commit a queue never holds more than a write or two
    // per task; committing every 10 updates lets depth and credits bind.
    let w10 = synthetic_workload(CORES, 10, updates);
    for n in QUEUE_ENTRIES {
        ctx.note(format!("sim: {n} entries per sub-queue"));
        let mut cfg = table2.clone();
        cfg.queue_entries = n;
        let params = json!({ "queue_entries": n });
        let g = group(
            &cfg,
            &modes,
            &w10,
            cycles,
            10,
            "queue-entries",
            params,
            speed,
        )?;
        rows.extend(g.into_iter().map(|(r, _)| r));
    }
    for ns in WRITE_NS {
        ctx.note(format!("sim: media writes of {ns} ns"));
        let mut cfg = table2.clone();
        cfg.nvm.write_ns = ns;
        cfg.nvm.write_busy_ns = ns;
        let params = json!({ "write_ns": ns });
        let g = group(&cfg, &modes, &w, cycles, 1, "write-latency", params, speed)?;
        rows.extend(g.into_iter().map(|(r, _)| r));
    }
    for merge in [false, true] {
        let mut cfg = table2.clone();
        cfg.merge_global_commits = merge;
        let params = json!({ "merge_global_commits": merge });
        let g = group(
            &cfg,
            &modes,
            &w,
            cycles,
            1,
            "global-combining",
            params,
            speed,
        )?;
        rows.extend(g.into_iter().map(|(r, _)| r));
    }
    Ok(())
}

/// What each recorded technique would cost on Optane-like media: each
/// trace once on one core under `adr`, per media profile, with the
/// projected time per operation beside the measured one.
fn optane_projection(
    table2: &Config,
    recorded: &[Recorded],
    speed: &mut Speed,
    rows: &mut Vec<Row>,
) -> Result<(), BenchError> {
    for r in recorded {
        let prog = Program::from_trace(&r.trace, table2.instr_per_ns, 1);
        let ops = r.ops.max(1) as f64;
        let w = Workload::distinct(r.name, vec![prog]);
        for nvm in [NvmProfile::OPTANE, NvmProfile::PCM] {
            let mut cfg = table2.clone().with_mode(Mode::Adr);
            cfg.nvm = nvm;
            let (mut row, s) = sim_row(
                &cfg,
                &w,
                Run::ToCompletion,
                1,
                "optane-projection",
                json!({}),
                speed,
            )?;
            row.baseline = None;
            let projected = s.cycles as f64 / cfg.ghz / ops;
            row.set_extra("operations", ops);
            row.set_extra("projected_ns_per_op", projected);
            row.set_extra("measured_ns_per_op", r.measured_ns_per_op);
            row.set_extra("measured_domain", r.measured_domain);
            rows.push(row);
        }
    }
    Ok(())
}

/// The `model` row: discrete events per wall-clock second over the whole
/// suite (`speed` as tallied by every simulation above).
fn model_row(speed: &Speed) -> Row {
    let mut m = Row::empty(
        "sim",
        "model",
        json!({"workload": "all", "cores": CORES, "commit_every": 1, "sweep": "model"}),
    );
    m.ops = speed.events;
    m.secs = speed.secs;
    if speed.secs > 0.0 {
        m.ops_per_s = speed.events as f64 / speed.secs;
        m.ns_per_op = 1e9 / m.ops_per_s;
    }
    m.reps = 1;
    m.counters_observed = false;
    m.set_extra("events_per_s", m.ops_per_s);
    m.set_extra(
        "what",
        "discrete events processed by ferrite-sim per wall-clock second, whole suite",
    );
    m
}

/// A recorded workload.
pub struct Recorded {
    pub name: &'static str,
    pub trace: ferrite_pmem::trace::ThreadTrace,
    /// Operations the driver ran while recording (an operation may commit
    /// zero times — a read — or more than once).
    pub ops: u64,
    /// Wall ns per operation measured on this machine without recording.
    pub measured_ns_per_op: f64,
    /// The domain that measurement ran in.
    pub measured_domain: &'static str,
}

#[cfg(not(feature = "trace"))]
mod record {
    use super::*;

    /// Without the feature `trace` nothing can be recorded: the suite runs
    /// the synthetic workload only, and says so.
    pub fn all(ctx: &BenchCtx) -> Result<Vec<Recorded>, BenchError> {
        ctx.note("sim: built without feature `trace`: recorded workloads skipped");
        Ok(Vec::new())
    }
}

#[cfg(feature = "trace")]
pub mod record {
    //! Records the persist traces of Ferrite components (feature `trace`).

    use super::*;
    use ferrite_blocks::log::{Algorithm, Log, LogError};
    use ferrite_ds::{self as ds, DsOptions, Structure};
    use ferrite_engine::{EngineKind, LAYOUT, Store, StoreOptions};
    use ferrite_pmem::trace::{self, ThreadTrace};
    use ferrite_pmem::{Domain, FlushKind, Pool, PoolOptions};
    use ferrite_tx::{Strategy, TxOptions, TxPool};

    fn bad(what: &str, e: impl std::fmt::Display) -> BenchError {
        BenchError::Unsupported(format!("sim recording, {what}: {e}"))
    }

    /// The domain timings run in: `adr` when the CPU can flush.
    fn timing_domain() -> Domain {
        if FlushKind::best().is_some() {
            Domain::Adr
        } else {
            Domain::Eadr
        }
    }

    /// The measured part of a workload: between [`Phase::begin`] and
    /// [`Phase::end`] (the components mark their own commit points).
    pub struct Phase {
        recording: bool,
        started: Option<Instant>,
        elapsed_ns: f64,
        /// The recording and which of its threads is this one.
        trace: Option<(trace::Trace, Option<usize>)>,
    }

    impl Phase {
        pub fn begin(&mut self) {
            if self.recording {
                trace::start();
            }
            self.started = Some(Instant::now());
        }

        pub fn end(&mut self) {
            if let Some(t) = self.started.take() {
                self.elapsed_ns = t.elapsed().as_nanos() as f64;
            }
            if self.recording {
                self.trace = Some(trace::stop_with_caller());
            }
        }
    }

    /// Recording is process-wide (`trace::start` forgets every thread's
    /// events): one recording at a time in this process, tests included.
    pub static RECORDING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Runs `work` twice on fresh state: timed in `timing_domain()`, then
    /// recorded in `eadr`. Returns this thread's trace and ns per op.
    fn record_with(
        ops: u64,
        work: impl Fn(Domain, &mut Phase) -> Result<(), BenchError>,
    ) -> Result<(ThreadTrace, f64, &'static str), BenchError> {
        let _one = RECORDING.lock().unwrap_or_else(|p| p.into_inner());
        let d = timing_domain();
        let mut timed = Phase {
            recording: false,
            started: None,
            elapsed_ns: 0.0,
            trace: None,
        };
        work(d, &mut timed)?;
        let mut rec = Phase {
            recording: true,
            started: None,
            elapsed_ns: 0.0,
            trace: None,
        };
        let res = work(Domain::Eadr, &mut rec);
        if rec.trace.is_none() && rec.started.is_some() {
            // Stopped early by an error: end the recording.
            rec.end();
        }
        res?;
        if rec.trace.as_ref().is_some_and(|(t, _)| t.truncated) {
            // A cut trace would replay a different workload than it says.
            return Err(bad(
                "trace",
                format!(
                    "more than {} events: recording truncated",
                    trace::MAX_EVENTS
                ),
            ));
        }
        // This thread's trace is the one with the commit points. Not the
        // busiest thread's: in a test binary, other tests' threads record
        // too (CI once replayed a neighbour's 299 commits as this one's).
        let mine = match rec.trace {
            Some((mut t, Some(i))) => t.threads.swap_remove(i),
            _ => ThreadTrace::default(),
        };
        Ok((mine, timed.elapsed_ns / ops.max(1) as f64, d.name()))
    }

    pub fn log(ops: u64) -> Result<Recorded, BenchError> {
        let v = Algorithm::Classic.variants()[0];
        let rec = [0x5au8; 64];
        let (trace, ns, dom) = record_with(ops, |d, ph| {
            let pool = Pool::create_in_memory(&PoolOptions::new("sim-log", 8 << 20).domain(d))?;
            let mut log = Log::create(pool.data(), v).map_err(|e| bad("log", e))?;
            ph.begin();
            for _ in 0..ops {
                match log.append(&rec) {
                    Ok(_) => {}
                    Err(LogError::Full { .. }) => {
                        let end = log.next_lsn();
                        log.truncate(end).map_err(|e| bad("truncate", e))?;
                        log.append(&rec).map_err(|e| bad("append", e))?;
                    }
                    Err(e) => return Err(bad("append", e)),
                }
            }
            ph.end();
            Ok(())
        })?;
        Ok(Recorded {
            name: "log",
            trace,
            ops,
            measured_ns_per_op: ns,
            measured_domain: dom,
        })
    }

    pub fn tx_hashmap(ops: u64) -> Result<Recorded, BenchError> {
        let value = [0x33u8; crate::suites::tx::VALUE_LEN];
        let (trace, ns, dom) = record_with(ops, |d, ph| {
            let pool = Pool::create_in_memory(
                &PoolOptions::new("sim-tx", (ops * 400 + (96 << 20)).next_multiple_of(1 << 20))
                    .domain(d),
            )?;
            crate::suites::tx::prefault(&pool);
            let txp = TxPool::create(
                &pool,
                &TxOptions::new(Strategy::Undo).slots(2),
                ds::registry(),
            )
            .map_err(|e| bad("tx pool", e))?;
            let mut th = txp.thread().map_err(|e| bad("attach", e))?;
            let map = ds::create(Structure::HashMap, &mut th, DsOptions::default())
                .map_err(|e| bad("hash map", e))?;
            ph.begin();
            for i in 0..ops {
                map.insert(&mut th, crate::suites::tx::ycsb_key(i), &value)
                    .map_err(|e| bad("insert", e))?;
            }
            ph.end();
            Ok(())
        })?;
        Ok(Recorded {
            name: "tx-hashmap",
            trace,
            ops,
            measured_ns_per_op: ns,
            measured_domain: dom,
        })
    }

    pub fn engine_ycsb_a(ops: u64) -> Result<Recorded, BenchError> {
        use ferrite_workload::{Generator, Loader, Op, Workload};
        let records = ops.max(100);
        let w = Workload::parse("ycsb-a")
            .map_err(|e| bad("workload", e))?
            .with_records(records)
            .with_operations(ops);
        let (trace, ns, dom) = record_with(ops, |d, ph| {
            let pool = Pool::create_in_memory(&PoolOptions::new(LAYOUT, 128 << 20).domain(d))?;
            let store = Store::create(&pool, &StoreOptions::new(EngineKind::Cow))
                .map_err(|e| bad("store", e))?;
            let mut s = store.session().map_err(|e| bad("session", e))?;
            let mut l = Loader::new(&w);
            while let Some((k, v)) = l.next_record() {
                s.put(k, v).map_err(|e| bad("load", e))?;
            }
            let mut g = Generator::new(&w, 7, 0, 1).map_err(|e| bad("generator", e))?;
            ph.begin();
            for _ in 0..ops {
                let r = match g.next_op() {
                    Some(Op::Read { key }) => s.get(key).map(|_| ()),
                    Some(Op::Insert { key, value }) | Some(Op::Update { key, value }) => {
                        s.put(key, value)
                    }
                    Some(Op::ReadModifyWrite { key, value }) => {
                        s.get(key).and_then(|_| s.put(key, value))
                    }
                    Some(Op::Delete { key }) => s.delete(key).map(|_| ()),
                    Some(Op::Scan { key, len }) => s.scan(key, len).map(|_| ()),
                    None => Ok(()),
                };
                r.map_err(|e| bad("ycsb op", e))?;
            }
            ph.end();
            Ok(())
        })?;
        Ok(Recorded {
            name: "engine-ycsb-a",
            trace,
            ops,
            measured_ns_per_op: ns,
            measured_domain: dom,
        })
    }

    /// The InP engine under TPC-C (one warehouse, quick cardinalities):
    /// `ops` transactions of the standard mix after the load. Read-only
    /// transactions (Order-Status, Stock-Level) commit nothing; a NewOrder
    /// that rolls back (1 %) neither.
    pub fn engine_tpcc(ops: u64) -> Result<Recorded, BenchError> {
        use crate::suites::engine::FerriteKv;
        use ferrite_workload::tpcc::{Terminal, TpccConfig, TpccLoader};
        let cfg = TpccConfig::quick(1);
        // The load is about 2.5 MB of rows at this scale; a transaction adds
        // at most ~1.5 KB (suites::engine's TPCC_GROWTH_PER_TXN).
        let bytes = ((64 << 20) + ops * 4096).next_multiple_of(1 << 20);
        let (trace, ns, dom) = record_with(ops, |d, ph| {
            let pool = Pool::create_in_memory(&PoolOptions::new(LAYOUT, bytes).domain(d))?;
            let store = Store::create(&pool, &StoreOptions::new(EngineKind::Inp))
                .map_err(|e| bad("store", e))?;
            let mut kv = FerriteKv(Box::new(store.session().map_err(|e| bad("session", e))?));
            TpccLoader::new::<ferrite_engine::EngineError>(&cfg, 7)
                .and_then(|l| l.load_all(&mut kv, 64))
                .map_err(|e| bad("tpcc load", e))?;
            let mut term = Terminal::new::<ferrite_engine::EngineError>(&cfg, 7, 0, 1)
                .map_err(|e| bad("tpcc terminal", e))?;
            ph.begin();
            for _ in 0..ops {
                term.run(&mut kv).map_err(|e| bad("tpcc txn", e))?;
            }
            ph.end();
            Ok(())
        })?;
        Ok(Recorded {
            name: "engine-tpcc",
            trace,
            ops,
            measured_ns_per_op: ns,
            measured_domain: dom,
        })
    }

    /// The memcached server's item store (`Cache` over the undo-logged
    /// byte map: what one shard thread runs per request) serving P1's
    /// 95/5 set/get mix of 16 B keys and 64 B values over `ops` preloaded
    /// keys, xorshift-chosen as `bench server`'s in-process rows do.
    pub fn server(ops: u64) -> Result<Recorded, BenchError> {
        use ferrite_server::protocol::{StoreMode, StoreOpts};
        use ferrite_server::store::tx::{TxKv, create, map};
        use ferrite_server::store::{Cache, Shared, Store as _};
        let keys = ops.max(100);
        let key = |i: u64| format!("key:{i:012}").into_bytes();
        let value = [b'v'; 64];
        let now = 1_700_000_000;
        let e = |what: &'static str| move |x: ferrite_server::store::StoreError| bad(what, x);
        let (trace, ns, dom) = record_with(ops, |d, ph| {
            let pool = Pool::create_in_memory(
                &PoolOptions::new("sim-server", (64 << 20) + keys * 1024).domain(d),
            )?;
            let txp = create(&pool, Strategy::Undo, 4).map_err(e("tx pool"))?;
            let m = map(&txp).map_err(e("map"))?;
            let shared =
                Shared::open(&mut TxKv::new(&m).map_err(e("kv"))?, 1 << 20).map_err(e("shared"))?;
            let mut cache = Cache::new(TxKv::new(&m).map_err(e("kv"))?, &shared);
            let opts = StoreOpts::default();
            for i in 0..keys {
                cache
                    .store(StoreMode::Set, &key(i), 0, 0, &value, None, &opts, now)
                    .map_err(e("preload"))?;
            }
            let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ keys;
            ph.begin();
            for _ in 0..ops {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = key(x % keys);
                if x % 100 < 95 {
                    cache
                        .store(StoreMode::Set, &k, 0, 0, &value, None, &opts, now)
                        .map_err(e("set"))?;
                } else {
                    cache.get(&k, now).map_err(e("get"))?;
                }
            }
            ph.end();
            Ok(())
        })?;
        Ok(Recorded {
            name: "server-95/5",
            trace,
            ops,
            measured_ns_per_op: ns,
            measured_domain: dom,
        })
    }

    /// Every recorded workload at the context's scale.
    pub fn all(ctx: &BenchCtx) -> Result<Vec<Recorded>, BenchError> {
        let ops: u64 = ctx.scale.pick(1_000, 10_000);
        ctx.note(format!(
            "sim: recording log, tx-hashmap, engine-ycsb-a, server-95/5 ({ops} ops each), engine-tpcc ({} transactions)",
            ops / 2
        ));
        Ok(vec![
            log(ops)?,
            tx_hashmap(ops)?,
            engine_ycsb_a(ops)?,
            // A TPC-C transaction is a dozen key-value operations and
            // ~1300 trace events: half as many keep the full-scale trace
            // well inside `trace::MAX_EVENTS`.
            engine_tpcc(ops / 2)?,
            server(ops)?,
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_sim::Op;

    #[test]
    fn shared_workloads_stagger_one_program_over_the_cores() {
        let p = Program {
            ops: (0..8).map(Op::Load).collect(),
            footprint: 8,
        };
        let w = Workload::shared("p", p.clone(), 4);
        assert_eq!(w.programs, vec![p.clone()]);
        assert_eq!(w.cores, vec![(0, 0), (0, 2), (0, 4), (0, 6)]);
        let t = w.tasks();
        assert_eq!(t.len(), 4);
        assert!(t.iter().all(|t| std::ptr::eq(t.program, &w.programs[0])));
        let d = Workload::distinct("d", vec![p.clone(), Program::default()]);
        assert_eq!(d.cores, vec![(0, 0), (1, 0)]);
        assert!(
            Workload::shared("e", Program::default(), 3)
                .tasks()
                .iter()
                .all(|t| t.start == 0)
        );
    }

    #[test]
    fn fine_grained_rows_carry_the_ipc_ratio_against_global() {
        let w = synthetic_workload(4, 1, 300);
        let mut speed = Speed::default();
        let g = group(
            &Config::table2(Mode::Global),
            &Mode::ALL,
            &w,
            50_000,
            1,
            "main",
            json!({}),
            &mut speed,
        )
        .unwrap();
        let find = |v: &str| g.iter().find(|(r, _)| r.variant == v).unwrap();
        let (gr, gs) = find("global");
        let (fr, fs) = find("fine-grained");
        assert_eq!(gr.ratio_vs_baseline, None);
        assert_eq!(fr.baseline.as_deref(), Some("global"));
        let want = fs.ipc() / gs.ipc();
        assert!((fr.ratio_vs_baseline.unwrap() - want).abs() < 1e-12);
        // The harness's own ratio (ops/s) is the same number: equal cycles.
        let mut rows: Vec<Row> = g.iter().map(|(r, _)| r.clone()).collect();
        crate::row::set_ratios(&mut rows);
        let f2 = rows.iter().find(|r| r.variant == "fine-grained").unwrap();
        assert!((f2.ratio_vs_baseline.unwrap() - want).abs() < 1e-9);
        let x = |k: &str| fr.extra.as_ref().unwrap()[k].as_f64().unwrap();
        assert!(
            (x("commit_cycles_ratio") - fs.mean_commit_cycles() / gs.mean_commit_cycles()).abs()
                < 1e-12
        );
        assert_eq!(fr.params["workload"], "synthetic");
        assert_eq!(fr.params["cores"], 4);
        assert_eq!(fr.params["commit_every"], 1);
        assert!(speed.events > 0);
    }

    /// Records `work` on this thread (one recording at a time) and returns
    /// this thread's events (other tests' threads record too).
    #[cfg(feature = "trace")]
    fn record_here(work: impl FnOnce()) -> ferrite_pmem::trace::ThreadTrace {
        use ferrite_pmem::trace;
        let _one = record::RECORDING.lock().unwrap_or_else(|p| p.into_inner());
        trace::start();
        work();
        match trace::stop_with_caller() {
            (mut t, Some(i)) => t.threads.swap_remove(i),
            _ => trace::ThreadTrace::default(),
        }
    }

    /// Each component marks its own commits, once per durable commit of the
    /// outermost one: a transaction's allocator publish and log append do
    /// not add commit points, reads add none.
    #[cfg(feature = "trace")]
    #[test]
    fn components_mark_one_commit_point_per_commit() {
        use ferrite_ds::{self as ds, DsOptions, Structure};
        use ferrite_engine::{EngineKind, LAYOUT, Op as KvOp, Store, StoreOptions};
        use ferrite_pmem::trace::EventKind;
        use ferrite_pmem::{Domain, Pool, PoolOptions};
        use ferrite_tx::{Strategy, TxOptions, TxPool};
        const N: u64 = 40;
        let commits = |t: &ferrite_pmem::trace::ThreadTrace| t.count(EventKind::Commit);

        for strategy in [Strategy::Undo, Strategy::Redo, Strategy::Clobber] {
            let pool =
                Pool::create_in_memory(&PoolOptions::new("t-tx", 32 << 20).domain(Domain::Eadr))
                    .unwrap();
            let txp =
                TxPool::create(&pool, &TxOptions::new(strategy).slots(2), ds::registry()).unwrap();
            let mut th = txp.thread().unwrap();
            let map = ds::create(Structure::HashMap, &mut th, DsOptions::default()).unwrap();
            let t = record_here(|| {
                for i in 0..N {
                    map.insert(&mut th, i, &[7u8; crate::suites::tx::VALUE_LEN])
                        .unwrap();
                    assert!(map.get(i).unwrap().is_some());
                }
            });
            assert_eq!(commits(&t), N as usize, "{strategy:?}: one per insert");
            assert!(t.count(EventKind::Fence) >= N as usize, "{strategy:?}");
            // The commit point follows the transaction's last fence.
            let last_fence = t.events.iter().rposition(|e| e.kind == EventKind::Fence);
            let last_commit = t.events.iter().rposition(|e| e.kind == EventKind::Commit);
            assert!(last_fence < last_commit, "{strategy:?}");
        }

        for kind in [EngineKind::Inp, EngineKind::Cow, EngineKind::Lsm] {
            let pool =
                Pool::create_in_memory(&PoolOptions::new(LAYOUT, 64 << 20).domain(Domain::Eadr))
                    .unwrap();
            let store = Store::create(&pool, &StoreOptions::new(kind)).unwrap();
            let mut s = store.session().unwrap();
            let t = record_here(|| {
                for i in 0..N {
                    s.put(&i.to_be_bytes(), &[3u8; 100]).unwrap();
                    assert!(s.get(&i.to_be_bytes()).unwrap().is_some());
                }
                s.batch(&[
                    KvOp::Put {
                        key: b"a",
                        value: b"1",
                    },
                    KvOp::Put {
                        key: b"b",
                        value: b"2",
                    },
                    KvOp::Delete { key: b"c" },
                ])
                .unwrap();
            });
            assert_eq!(
                commits(&t),
                N as usize + 1,
                "{kind:?}: one per put and one per batch"
            );
        }

        {
            use ferrite_ptm::{Algorithm, Ptm, PtmOptions};
            for alg in Algorithm::ALL {
                let pool = Pool::create_in_memory(
                    &PoolOptions::new("t-ptm", 16 << 20).domain(Domain::Eadr),
                )
                .unwrap();
                let ptm = Ptm::create(&pool, &PtmOptions::new(alg)).unwrap();
                let mut th = ptm.thread().unwrap();
                let root = ptm.root();
                th.atomic(|tx| {
                    let b = tx.alloc_zeroed(8)?;
                    tx.set(root, b.raw())
                })
                .unwrap();
                let t = record_here(|| {
                    for _ in 0..N {
                        th.atomic(|tx| {
                            let c = tx.get(root)?;
                            let n = tx.load(c)? + 1;
                            tx.store(c, n)
                        })
                        .unwrap();
                        // Read-only: commits nothing.
                        th.atomic(|tx| tx.get(root)).unwrap();
                    }
                });
                assert_eq!(commits(&t), N as usize, "{alg:?}: one per writer");
            }
        }

        // The log: one per append, also when an append needs a truncation.
        {
            use ferrite_blocks::log::{Algorithm, Log};
            let pool =
                Pool::create_in_memory(&PoolOptions::new("t-log", 1 << 20).domain(Domain::Eadr))
                    .unwrap();
            let mut log = Log::create(pool.data(), Algorithm::Classic.variants()[0]).unwrap();
            let t = record_here(|| {
                for _ in 0..N {
                    log.append(&[1u8; 64]).unwrap();
                }
                log.append_batch(&[&[2u8; 8], &[3u8; 8]]).unwrap();
            });
            assert_eq!(commits(&t), N as usize + 1);
        }
    }

    #[cfg(feature = "trace")]
    #[test]
    fn tpcc_and_server_traces_commit_their_writes_only() {
        use ferrite_pmem::trace::EventKind;
        let t = record::engine_tpcc(60).unwrap();
        let c = t.trace.count(EventKind::Commit);
        // Every transaction commits at most once; the read-only share
        // (8 %) and NewOrder rollbacks commit nothing.
        assert!(c > 30 && c <= 60, "tpcc: {c} commits for 60 transactions");
        assert_eq!(t.ops, 60);
        let s = record::server(200).unwrap();
        let c = s.trace.count(EventKind::Commit);
        assert!(c > 150 && c <= 200, "server: {c} commits for 200 requests");
        // One recorded trace replayed twice on 16 staggered cores: the
        // same statistics in every mode.
        let w = Workload::shared("server", Program::from_trace(&s.trace, 5.4, 1), CORES);
        for m in Mode::ALL {
            let cfg = Config::table2(m);
            let a = simulate_tasks(&cfg, &w.tasks(), Run::Cycles(60_000)).unwrap();
            let b = simulate_tasks(&cfg, &w.tasks(), Run::Cycles(60_000)).unwrap();
            assert!(a.events > 0 && a.commits() > 0, "{m}");
            assert_eq!(a, b, "{m}");
        }
    }

    #[cfg(feature = "trace")]
    #[test]
    fn recorded_log_has_one_commit_per_append_and_its_persists() {
        use ferrite_pmem::trace::EventKind;
        let r = record::log(50).unwrap();
        assert_eq!(r.trace.count(EventKind::Commit), 50);
        assert!(r.trace.count(EventKind::Fence) >= 50);
        assert!(r.trace.count(EventKind::Flush) + r.trace.count(EventKind::NtStore) >= 50);
        assert!(r.measured_ns_per_op > 0.0);
        let p = Program::from_trace(&r.trace, 2.0, 1);
        assert_eq!(p.commits(), 50);
        let s = ferrite_sim::simulate(&Config::table2(Mode::Adr), &[p], Run::ToCompletion).unwrap();
        assert_eq!(s.commits(), 50);
        assert!(s.media_writes > 0);
    }
}
