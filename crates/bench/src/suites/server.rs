//! The `server` suite: `ferrite serve` against Debian's memcached, driven by
//! `memcaslap` over loopback TCP (issue 13, item 5).
//!
//! # What runs
//!
//! For every mix, one fresh server per system is started as a child process
//! on a free loopback port: `memcached` (the baseline, `-t` as many threads
//! as Ferrite's, `-U 0`) and `ferrite serve --store S` for each store `S`,
//! each on a new pool file in `/dev/shm`. Then `memcaslap` drives them for
//! `secs` seconds each, interleaved rep by rep (memcached, ferrite-…, …,
//! then again), so every system sees the same background noise; a row
//! reports the median throughput over the repetitions. Servers are killed
//! when dropped (also when a panic unwinds), and their pool files removed.
//!
//! The mixes are P1's insert/search mixes `95/5`, `75/25`, `25/75`, `5/95`
//! (percent sets / percent gets, 16-byte keys, 64-byte values) and P3's
//! `p3-50/50` (128-byte keys, 1 KiB values).
//!
//! Then P1's own setting [P1 §3.4.6] ([`Plan::p1`], mix `p1-95/5`): one
//! server thread, four client threads, the 95/5 mix, no group commit (each
//! set its own transaction, as in P1's memcached), memcached with one
//! thread against the stores `tx-undo`, `tx-redo` and `tx-clobber` — the
//! same byte map on each logging strategy — and, with the feature `pmdk`,
//! `pmdk-undo`: the same map on libpmemobj's undo transactions, P1's
//! baseline (its pool in /dev/shm, the server started with
//! `PMEM_IS_PMEM_FORCE=1` so libpmem flushes and fences as Ferrite's `adr`
//! does). The same stores also run in process ([`STORE_LAYER`] rows
//! `store-<store>`, interleaved). The summary states clobber ÷ PMDK's undo
//! store against P1's 1.8× when the PMDK rows exist, and otherwise the
//! fallback: clobber ÷ Ferrite's own undo store ([`p1_outcomes`]). PMDK
//! rows print their counters as `n/a` (PMDK flushes outside Ferrite's
//! door), unless the feature `pmdk-count` counts PMDK's own flushes and
//! fences at the libpmem calls (lines then count every line of every
//! flushing call, not distinct lines per fence).
//!
//! # Rows
//!
//! suite `server`; variant `memcached` or `ferrite-<store>`; `params` has
//! `mix`, `key_bytes`, `value_bytes`, `client_threads`, `concurrency`,
//! `server_threads`; `threads` = client threads; `ops` / `secs` / `ops_per_s`
//! are memcaslap's `Ops`, run time and `TPS` of the median repetition;
//! `ratio_vs_baseline` is against `memcached` of the same mix in this run.
//! The persistence counters are not observed (they happen in the server
//! process): `counters_observed = false`. `extra` holds `avg_us` (memcaslap's
//! mean latency over all requests), `p99_us` (the upper edge of the
//! power-of-two latency bucket holding the 99th percentile: memcaslap only
//! prints a log2 histogram, so this is exact to a factor of two) and
//! `get_misses`.
//!
//! # Survival of `kill -9`
//!
//! Rows with `params.mix = "kill-9"`: `n` keys are set one by one (each
//! acknowledged with `STORED`), the server is killed with SIGKILL and
//! started again on the same memory file / pool, and the keys still found
//! are counted: `extra.survived` of `extra.acknowledged`, `extra.restart_ms`
//! (from spawn to accepting connections). `ops_per_s` / `ns_per_op` time the
//! loading (one client, one set at a time, each waiting for its reply). For memcached, the variant is
//! `memcached-restartable` (`-e /dev/shm/…`: its restartable mode only
//! restores after a graceful stop — SIGUSR1 then a restart keeps the items,
//! checked by hand with memcached 1.6.18 — so kill -9 leaves it empty); for
//! Ferrite, one store.
//!
//! # Scale
//!
//! `--quick`: 2 s runs, 2 reps, mixes `95/5` and `5/95` (or those named by
//! `FERRITE_SERVER_MIXES=95/5,75/25,25/75,5/95,p3-50/50`, `all` for all;
//! `p1` runs only P1's comparison: no other mix, no kill test),
//! 1000 keys for the kill test: about a minute. `--full`: all mixes, 5 reps,
//! 10 s runs, 10000 keys. An explicit `--reps` wins.
//!
//! If `memcaslap`, `memcached` or the `ferrite` binary is missing, the suite
//! prints one line saying so and yields no rows.

use crate::ctx::BenchCtx;
use crate::error::BenchError;
use crate::measure::{median, spread};
use crate::row::{Row, set_ratios};
// The names the suite's claims read its rows by, and the claims.
pub use ferrite_rows::claims::server::{
    KILL_MIX, MEMCACHED_RESTARTABLE, P1_MIX, SUITE, p1_outcomes, print_summary, summarize,
};
use ferrite_server::store::Cache;
use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

// The parts: the processes, memcaslap's output, the in-process store
// rows, the kill test.
mod kill;
mod memcaslap;
mod process;
mod store_layer;

use kill::survival;
pub(crate) use memcaslap::slap;
pub use memcaslap::{SlapResult, parse_memcaslap};
pub(crate) use process::{Scratch, System, io, unique_path};
pub use process::{ferrite_bin, missing_tools};
use store_layer::store_rows;

/// Variant name of the baseline rows.
pub const MEMCACHED: &str = "memcached";
/// Environment variable naming the mixes (module documentation).
pub const MIXES_ENV: &str = "FERRITE_SERVER_MIXES";
/// `params.layer` of the in-process store rows of P1's comparison.
pub const STORE_LAYER: &str = "store";
/// The stores of P1's comparison: the byte map on each logging strategy.
pub const P1_STORES: [&str; 3] = ["tx-undo", "tx-redo", "tx-clobber"];
/// `FERRITE_SERVER_MIXES` value that runs only P1's comparison.
pub const P1_ONLY: &str = "p1";
pub use ferrite_server::store::{PMDK_STORE, STORES};

/// The stores of P1's comparison in this build: [`P1_STORES`], and with
/// the feature `pmdk` P1's baseline, [`PMDK_STORE`].
pub fn p1_stores() -> Vec<String> {
    let mut v: Vec<String> = P1_STORES.iter().map(|s| s.to_string()).collect();
    if cfg!(feature = "pmdk") {
        v.push(PMDK_STORE.to_string());
    }
    v
}

/// One memcaslap workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mix {
    /// `95/5` … (`sets/gets` in percent), `p3-50/50`.
    pub name: String,
    /// Percent of requests that are sets (the rest are gets).
    pub set_pct: u32,
    pub key_bytes: usize,
    pub value_bytes: usize,
}

impl Mix {
    fn new(name: &str, set_pct: u32, key_bytes: usize, value_bytes: usize) -> Mix {
        Mix {
            name: name.to_string(),
            set_pct,
            key_bytes,
            value_bytes,
        }
    }

    /// P1's one-thread comparison of the logging strategies [P1 §3.4.6]:
    /// `95/5` with 16 B keys and 64 B values, run by [`Plan::p1`].
    pub fn p1() -> Mix {
        Mix::new(P1_MIX, 95, 16, 64)
    }

    /// All mixes: P1's four with 16 B keys / 64 B values, P3's 50/50.
    pub fn all() -> Vec<Mix> {
        vec![
            Mix::new("95/5", 95, 16, 64),
            Mix::new("75/25", 75, 16, 64),
            Mix::new("25/75", 25, 16, 64),
            Mix::new("5/95", 5, 16, 64),
            Mix::new("p3-50/50", 50, 128, 1024),
        ]
    }

    /// The mix called `name`, if any.
    pub fn named(name: &str) -> Option<Mix> {
        Mix::all().into_iter().find(|m| m.name == name)
    }

    /// memcaslap's `-F` configuration file: fixed key and value sizes and
    /// the set (command 0) / get (command 1) proportions.
    pub fn config(&self) -> String {
        let set = f64::from(self.set_pct) / 100.0;
        format!(
            "key\n{k} {k} 1\nvalue\n{v} {v} 1\ncmd\n0 {set:.2}\n1 {get:.2}\n",
            k = self.key_bytes,
            v = self.value_bytes,
            get = 1.0 - set
        )
    }
}

/// What one run of the suite does.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Ferrite stores to measure (names of [`STORES`]).
    pub stores: Vec<String>,
    pub mixes: Vec<Mix>,
    pub reps: usize,
    /// Seconds per memcaslap run.
    pub secs: u32,
    /// memcaslap `-T`.
    pub client_threads: usize,
    /// memcaslap `-c` (simulated clients, over all its threads).
    pub concurrency: usize,
    /// memcached `-t` and ferrite `--threads`.
    pub server_threads: usize,
    /// Keys set before the kill -9 (0: no survival rows).
    pub kill_keys: usize,
    /// The Ferrite store of the kill -9 row.
    pub kill_store: String,
    /// Ferrite's `--group-commit` (None: its default).
    pub group_commit: Option<usize>,
    /// Also run P1's one-thread comparison ([`Plan::p1`]).
    pub p1: bool,
}

impl Plan {
    /// The plan of `ctx`'s scale (module documentation, "Scale").
    pub fn for_ctx(ctx: &BenchCtx) -> Plan {
        let quick = ctx.scale == crate::Scale::Quick;
        let env = std::env::var(MIXES_ENV).ok().filter(|s| !s.is_empty());
        let p1_only = env.as_deref() == Some(P1_ONLY);
        let mixes = match env {
            Some(_) if p1_only => Vec::new(),
            Some(s) if s == "all" => Mix::all(),
            Some(s) => s
                .split(',')
                .filter_map(|n| {
                    let m = Mix::named(n.trim());
                    if m.is_none() {
                        // Said once, not fatal: the other named mixes run.
                        eprintln!(
                            "{MIXES_ENV}: no mix '{}' (known: 95/5, 75/25, 25/75, 5/95, p3-50/50, all, p1)",
                            n.trim()
                        );
                    }
                    m
                })
                .collect(),
            None if quick => vec![Mix::named("95/5"), Mix::named("5/95")]
                .into_iter()
                .flatten()
                .collect(),
            None => Mix::all(),
        };
        let reps = if ctx.reps == ctx.scale.default_reps() {
            ctx.scale.pick(2, 5)
        } else {
            ctx.reps
        };
        Plan {
            stores: STORES.iter().map(|s| s.to_string()).collect(),
            mixes,
            reps,
            secs: ctx.scale.pick(2, 10),
            client_threads: 2,
            concurrency: 32,
            server_threads: 2,
            kill_keys: if p1_only {
                0
            } else {
                ctx.scale.pick(1000, 10_000)
            },
            kill_store: "engine-inp".into(),
            group_commit: None,
            p1: true,
        }
    }

    /// P1's memcached comparison [P1 §3.4.6]: one server thread, four
    /// client threads, the `95/5` mix, and no group commit (every set is
    /// its own transaction, as in P1's memcached), over the stores of
    /// [`p1_stores`] and memcached with one thread.
    pub fn p1(&self) -> Plan {
        Plan {
            stores: p1_stores(),
            mixes: vec![Mix::p1()],
            server_threads: 1,
            client_threads: 4,
            group_commit: Some(1),
            kill_keys: 0,
            p1: false,
            ..self.clone()
        }
    }
}

/// The suite with the plan of `ctx`'s scale.
pub fn run(ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    run_plan(ctx, &Plan::for_ctx(ctx))
}

/// Runs `plan`: no rows (and one printed line) when a tool is missing.
pub fn run_plan(ctx: &BenchCtx, plan: &Plan) -> Result<Vec<Row>, BenchError> {
    if let Some(why) = missing_tools() {
        println!("{why}");
        return Ok(Vec::new());
    }
    let bin = ferrite_bin().ok_or_else(|| BenchError::Unsupported("no ferrite binary".into()))?;
    let mut rows = Vec::new();
    for mix in &plan.mixes {
        rows.extend(run_mix(ctx, plan, mix, &bin)?);
    }
    if plan.p1 {
        let p1 = plan.p1();
        for mix in &p1.mixes {
            rows.extend(run_mix(ctx, &p1, mix, &bin)?);
        }
        rows.extend(store_rows(ctx)?);
    }
    if plan.kill_keys > 0 {
        let mc_file = Scratch(unique_path("memfile"));
        let _meta = Scratch(mc_file.0.with_extension("memfile.meta"));
        let mc = System::Memcached {
            threads: plan.server_threads,
            file: Some(mc_file.0.clone()),
        };
        rows.push(survival(ctx, plan, &mc)?);
        let pool = Scratch(unique_path("pool"));
        let fe = System::Ferrite {
            store: plan.kill_store.clone(),
            threads: plan.server_threads,
            pool: pool.0.clone(),
            bin: bin.clone(),
            group_commit: plan.group_commit,
        };
        rows.push(survival(ctx, plan, &fe)?);
    }
    Ok(rows)
}

fn params(plan: &Plan, mix: &Mix) -> serde_json::Value {
    json!({
        "mix": mix.name,
        "key_bytes": mix.key_bytes,
        "value_bytes": mix.value_bytes,
        "client_threads": plan.client_threads,
        "concurrency": plan.concurrency,
        "server_threads": plan.server_threads,
        "group_commit": plan.group_commit,
    })
}

/// One mix: every system started fresh, memcaslap interleaved rep by rep.
fn run_mix(ctx: &BenchCtx, plan: &Plan, mix: &Mix, bin: &Path) -> Result<Vec<Row>, BenchError> {
    let cfg = Scratch(unique_path("cfg"));
    std::fs::write(&cfg.0, mix.config()).map_err(|e| io(&cfg.0, e))?;
    let mut systems = vec![System::Memcached {
        threads: plan.server_threads,
        file: None,
    }];
    let mut pools = Vec::new();
    for s in &plan.stores {
        let pool = Scratch(unique_path("pool"));
        systems.push(System::Ferrite {
            store: s.clone(),
            threads: plan.server_threads,
            pool: pool.0.clone(),
            bin: bin.to_path_buf(),
            group_commit: plan.group_commit,
        });
        pools.push(pool);
    }
    let mut servers = Vec::new();
    for s in &systems {
        servers.push(s.start()?);
    }
    let mut runs: Vec<Vec<SlapResult>> = vec![Vec::new(); systems.len()];
    for rep in 0..plan.reps {
        for (i, (s, srv)) in systems.iter().zip(&servers).enumerate() {
            let r = slap(plan, srv.addr, &cfg.0)?;
            ctx.note(format!(
                "[server] {} rep {}/{}: {} {:.0} ops/s",
                mix.name,
                rep + 1,
                plan.reps,
                s.variant(),
                r.tps
            ));
            runs[i].push(r);
        }
    }
    drop(servers);
    let mut rows: Vec<Row> = systems
        .iter()
        .zip(&runs)
        .map(|(s, rs)| row(plan, mix, &s.variant(), rs))
        .collect();
    set_ratios(&mut rows);
    Ok(rows)
}

/// The row of one system on one mix from its repetitions: the median by
/// throughput.
pub(crate) fn row(plan: &Plan, mix: &Mix, variant: &str, runs: &[SlapResult]) -> Row {
    let mut r = Row::empty(SUITE, variant, params(plan, mix));
    r.threads = plan.client_threads;
    r.counters_observed = false;
    r.reps = runs.len();
    let tps: Vec<f64> = runs.iter().map(|x| x.tps).collect();
    let ns: Vec<f64> = tps
        .iter()
        .map(|t| if *t > 0.0 { 1e9 / t } else { 0.0 })
        .collect();
    let med = median(&tps);
    // The repetition closest to the median carries ops / secs / latency.
    let pick = runs
        .iter()
        .min_by(|a, b| (a.tps - med).abs().total_cmp(&(b.tps - med).abs()));
    r.ops_per_s = med;
    r.ns_per_op = if med > 0.0 { 1e9 / med } else { 0.0 };
    r.ns_per_op_spread = spread(&ns);
    if let Some(p) = pick {
        r.ops = p.ops;
        r.secs = p.secs;
        if let Some(v) = p.avg_us {
            r.set_extra("avg_us", v);
        }
        if let Some(v) = p.p99_us {
            r.set_extra("p99_us", v);
        }
    }
    let misses: u64 = runs.iter().filter_map(|x| x.get_misses).sum();
    r.set_extra("get_misses", misses);
    if variant != MEMCACHED {
        r.baseline = Some(MEMCACHED.into());
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_config_states_sizes_and_proportions() {
        let c = Mix::named("5/95").unwrap().config();
        assert!(
            c.contains("key\n16 16 1\nvalue\n64 64 1\ncmd\n0 0.05\n1 0.95\n"),
            "{c}"
        );
        assert_eq!(Mix::all().len(), 5);
    }
}
