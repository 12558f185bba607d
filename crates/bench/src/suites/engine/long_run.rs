//! The long-run row of the `engine` suite [issue 26, item 6]: single-put
//! throughput after a bulk load ÷ the same on a fresh store, on every
//! engine (`workload = long-run`, variants `inp`, `cow`, `lsm`). A store
//! that falls off a cliff after a big transaction (an LSM memtable or run
//! merge left behind for the next writers, an index grown slow) shows
//! here; issue 26 targets ≥ 0.5× ([`TARGET`]).
//!
//! # What runs
//!
//! For each engine, in each repetition, two stores as a user opens them
//! ([`Store::create_new`]: no size, growable; `adr` domain; defaults
//! otherwise) in pool files on `/dev/shm`:
//!
//! - **fresh**: empty;
//! - **loaded**: [`Counts::bulk`] pairs of redb's workload (24-byte
//!   random keys, 150-byte random values, [`redb_bench::Gen`]) committed
//!   as one batch ([`Store::batch`]) — timed apart, `extra.load_ms`.
//!
//! Then [`Counts::puts`] single durable puts ([`Store::put`]) of new
//! keys (a stream of their own, the same on both stores) go to the two
//! stores **interleaved** in [`SLICES`] slices: a slice on one, a slice on
//! the other (which one first alternates from one repetition to the
//! next), so that the machine's noise falls on both alike. Nothing waits
//! between the load and the puts: whatever the load left to do (a
//! memtable flush, a merge) is on the puts' path or beside it, as for a
//! user.
//!
//! # Rows
//!
//! Two rows per engine, `params.store` `fresh` and `loaded`
//! (`params.bulk` the pairs loaded: 0 for the fresh one, `params.puts`):
//! the time is the **median** over the repetitions of the puts' total
//! time on that store, `ns_per_op_spread` `(max - min) / median`, fences,
//! flushes and lines per put summed over every repetition (the writing
//! thread's: work of an engine's background threads is not counted). The
//! loaded row carries `extra.ratio_vs_fresh` (its throughput ÷ the fresh
//! row's, medians), `extra.rep_ratios` (the same ratio within each
//! repetition) and `extra.load_ms` / `extra.load_keys_per_s` (the bulk
//! commit's median). A store whose puts or load fail (a typed error)
//! gives skipped rows saying so; the watchdog of [`redb_bench`] is not
//! needed: one loaded store at a time, removed after each repetition.
//!
//! [`summarize`] gives one claim per engine: loaded ÷ fresh, ≥ 0.5×.

use crate::ctx::BenchCtx;
use crate::measure::{median, spread};
use crate::peers::lmdb::SHM;
use crate::row::Row;
use ferrite_engine::{Domain, EngineKind, Op, Store, StoreOptions};
use ferrite_pmem::Counters;
use serde_json::json;
use std::time::Instant;

use super::redb_bench::{self, KEY_BYTES, VALUE_BYTES};
use super::{SUITE, skipped_row};
// The workload's name and target live with its claim.
pub use ferrite_rows::claims::engine::{
    LONG_RUN as NAME, LONG_RUN_TARGET as TARGET, long_run_summarize as summarize,
};

/// Slices the puts are cut in, alternating between the two stores.
pub const SLICES: u64 = 10;

/// Sizes of the long-run row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counts {
    /// Pairs loaded in one batch before the puts.
    pub bulk: u64,
    /// Single puts timed on each store.
    pub puts: u64,
    /// Most repetitions.
    pub max_reps: usize,
}

impl Counts {
    /// Issue 26's: a 5 M-pair load, 20 000 puts.
    pub fn full() -> Counts {
        Counts {
            bulk: 5_000_000,
            puts: 20_000,
            max_reps: 3,
        }
    }

    /// Seconds per engine: a 200 000-pair load, 10 000 puts.
    pub fn quick() -> Counts {
        Counts {
            bulk: 200_000,
            puts: 10_000,
            max_reps: 5,
        }
    }

    /// For tests.
    pub fn tiny() -> Counts {
        Counts {
            bulk: 5_000,
            puts: 400,
            max_reps: 2,
        }
    }

    /// The counts of `ctx`'s scale.
    pub fn for_ctx(ctx: &BenchCtx) -> Counts {
        ctx.scale.pick(Counts::quick(), Counts::full())
    }
}

/// A store in a temporary directory on `/dev/shm` (removed with it).
struct Subject {
    // Field order: the store closes before its directory goes.
    store: Store,
    _dir: tempfile::TempDir,
}

impl Subject {
    fn create(kind: EngineKind) -> Result<Subject, String> {
        let dir = tempfile::Builder::new()
            .prefix("ferrite-bench-long-run-")
            .tempdir_in(SHM)
            .map_err(|e| format!("temporary directory in {SHM}: {e}"))?;
        let opts = StoreOptions::new(kind).domain(Domain::Adr);
        let store = Store::create_new(dir.path().join("store.pool"), &opts)
            .map_err(|e| format!("{kind} store: {e}"))?;
        Ok(Subject { store, _dir: dir })
    }
}

/// The `i`-th key of the timed puts: 24 random bytes of a stream of its
/// own (the same on both stores), spread over the key space as the
/// load's are; one of them equals a loaded key with odds of 2^-192.
fn put_key(i: u64) -> [u8; KEY_BYTES] {
    let mut k = [0u8; KEY_BYTES];
    fastrand::Rng::with_seed(PUT_SEED ^ i).fill(&mut k);
    k
}

/// Seed of the puts' keys (redb's stream has seed 3).
const PUT_SEED: u64 = 0x2600_0000_0000_0000;

/// Timed puts `from..to` on `store`: seconds and the thread's counters.
fn puts(store: &Store, from: u64, to: u64) -> Result<(f64, Counters), String> {
    let v = [0x5Au8; VALUE_BYTES];
    let c0 = Counters::snapshot();
    let t0 = Instant::now();
    for i in from..to {
        store
            .put(&put_key(i), &v)
            .map_err(|e| format!("put {i}: {e}"))?;
    }
    Ok((t0.elapsed().as_secs_f64(), Counters::snapshot() - c0))
}

/// Loads `n` pairs of redb's stream in one batch; returns its seconds.
fn load(store: &Store, n: u64) -> Result<f64, String> {
    let mut g = redb_bench::Gen::new();
    let pairs: Vec<_> = (0..n).map(|_| g.pair()).collect();
    let ops: Vec<Op<'_>> = pairs
        .iter()
        .map(|(k, v)| Op::Put { key: k, value: v })
        .collect();
    let t0 = Instant::now();
    store
        .batch(&ops)
        .map_err(|e| format!("bulk load of {n}: {e}"))?;
    Ok(t0.elapsed().as_secs_f64())
}

/// One repetition on one engine.
#[derive(Clone, Debug, Default)]
struct Sample {
    fresh: (f64, Counters),
    loaded: (f64, Counters),
    load_secs: f64,
}

fn one_rep(kind: EngineKind, counts: &Counts, fresh_first: bool) -> Result<Sample, String> {
    let fresh = Subject::create(kind)?;
    let loaded = Subject::create(kind)?;
    let load_secs = load(&loaded.store, counts.bulk)?;
    let mut s = Sample {
        load_secs,
        ..Sample::default()
    };
    let slice = counts.puts.div_ceil(SLICES).max(1);
    let mut at = 0;
    while at < counts.puts {
        let to = (at + slice).min(counts.puts);
        for which in [fresh_first, !fresh_first] {
            let (store, acc) = if which {
                (&fresh.store, &mut s.fresh)
            } else {
                (&loaded.store, &mut s.loaded)
            };
            let (secs, c) = puts(store, at, to)?;
            acc.0 += secs;
            acc.1 = acc.1.add(&c);
        }
        at = to;
    }
    // Every put landed on both stores.
    for (name, sub, want) in [
        ("fresh", &fresh, counts.puts),
        ("loaded", &loaded, counts.bulk + counts.puts),
    ] {
        let n = sub.store.len().map_err(|e| format!("{name} len: {e}"))?;
        if n != want {
            return Err(format!("the {name} store holds {n} keys, not {want}"));
        }
    }
    Ok(s)
}

/// Runs the long-run row at `counts` on every engine.
pub fn run(ctx: &BenchCtx, counts: &Counts) -> Vec<Row> {
    run_engines(ctx, counts, &EngineKind::ALL)
}

/// As [`run`], on `kinds` only.
pub fn run_engines(ctx: &BenchCtx, counts: &Counts, kinds: &[EngineKind]) -> Vec<Row> {
    let started = Instant::now();
    let reps = ctx.reps.clamp(1, counts.max_reps.max(1));
    ctx.note(format!(
        "[engine] long-run: {} pairs loaded, {} puts, {reps} reps, {} engines",
        counts.bulk,
        counts.puts,
        kinds.len()
    ));
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); kinds.len()];
    let mut failed: Vec<Option<String>> = vec![None; kinds.len()];
    for rep in 0..reps {
        for j in 0..kinds.len() {
            let i = (j + rep) % kinds.len();
            if failed[i].is_some() {
                continue;
            }
            ctx.note(format!(
                "[engine] long-run rep {}/{reps}: {} ({:.0} s so far)",
                rep + 1,
                kinds[i],
                started.elapsed().as_secs_f64()
            ));
            match one_rep(kinds[i], counts, rep % 2 == 0) {
                Ok(s) => samples[i].push(s),
                Err(e) => failed[i] = Some(e),
            }
        }
    }
    let mut out = Vec::new();
    for (i, &kind) in kinds.iter().enumerate() {
        out.extend(rows(kind, counts, &samples[i], failed[i].as_deref()));
    }
    out
}

fn per_op(total: u64, ops: u64) -> f64 {
    if ops == 0 {
        0.0
    } else {
        total as f64 / ops as f64
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn rows(kind: EngineKind, counts: &Counts, samples: &[Sample], failed: Option<&str>) -> Vec<Row> {
    let params = |store: &str, bulk: u64| {
        json!({
            "workload": NAME,
            "allocator": "ferrite",
            "domain": "adr",
            "key_bytes": KEY_BYTES,
            "value_bytes": VALUE_BYTES,
            "store": store,
            "bulk": bulk,
            "puts": counts.puts,
            "durable": true,
            "growable": true,
            "interleave": "slice",
        })
    };
    let why = match failed {
        Some(e) => Some(format!("failed: {e}")),
        None if samples.is_empty() => Some("not run".to_string()),
        None => None,
    };
    if let Some(why) = why {
        return vec![
            skipped_row(kind.name(), params("fresh", 0), 1, &why),
            skipped_row(kind.name(), params("loaded", counts.bulk), 1, &why),
        ];
    }
    let mut fresh = measured(kind, counts, params("fresh", 0), samples, |s| &s.fresh);
    let mut loaded = measured(kind, counts, params("loaded", counts.bulk), samples, |s| {
        &s.loaded
    });
    let ratio = if fresh.ops_per_s > 0.0 {
        loaded.ops_per_s / fresh.ops_per_s
    } else {
        0.0
    };
    loaded.set_extra("ratio_vs_fresh", round3(ratio));
    loaded.set_extra(
        "rep_ratios",
        samples
            .iter()
            .map(|s| round3(s.fresh.0 / s.loaded.0.max(f64::MIN_POSITIVE)))
            .collect::<Vec<f64>>(),
    );
    let load = median(&samples.iter().map(|s| s.load_secs).collect::<Vec<_>>());
    loaded.set_extra("load_ms", round3(load * 1e3));
    if load > 0.0 {
        loaded.set_extra("load_keys_per_s", (counts.bulk as f64 / load).round());
    }
    fresh.set_extra("ratio_vs_fresh", 1.0);
    vec![fresh, loaded]
}

fn measured(
    kind: EngineKind,
    counts: &Counts,
    params: serde_json::Value,
    samples: &[Sample],
    pick: impl Fn(&Sample) -> &(f64, Counters),
) -> Row {
    let mut row = Row::empty(SUITE, kind.name(), params);
    let secs: Vec<f64> = samples.iter().map(|s| pick(s).0).collect();
    let ops = counts.puts.max(1);
    let med = median(&secs);
    row.threads = 1;
    row.ops = ops;
    row.secs = med;
    row.ns_per_op = med * 1e9 / ops as f64;
    row.ops_per_s = if med > 0.0 { ops as f64 / med } else { 0.0 };
    row.ns_per_op_spread = spread(&secs);
    row.reps = samples.len();
    let all_ops = ops * samples.len() as u64;
    let c = samples
        .iter()
        .fold(Counters::default(), |acc, s| acc.add(&pick(s).1));
    row.fences_per_op = per_op(c.fences, all_ops);
    row.flushes_per_op = per_op(c.flush_insns, all_ops);
    row.lines_per_op = per_op(c.lines_flushed, all_ops);
    row.blocks_per_op = per_op(c.blocks_written, all_ops);
    row.nt_bytes_per_op = per_op(c.nt_bytes, all_ops);
    row.msyncs_per_op = per_op(c.msync_calls, all_ops);
    row.msync_bytes_per_op = per_op(c.msync_bytes, all_ops);
    row.counters_observed = true;
    row.set_extra("median_ms", round3(med * 1e3));
    row.set_extra(
        "samples_ms",
        secs.iter().map(|s| round3(s * 1e3)).collect::<Vec<f64>>(),
    );
    row
}
