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

/// A server child process; killed (SIGKILL) and reaped on drop. Its memory
/// file is left alone (the kill test restarts on it): callers remove it.
pub(crate) struct Server {
    child: Child,
    pub(crate) addr: SocketAddr,
    log: PathBuf,
    /// `ferrite run`: stopped with SIGUSR1 (an injected failure, which
    /// kills the program it supervises) rather than SIGKILL, which would
    /// orphan the program.
    supervised: bool,
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.supervised {
            // SAFETY: kill sends a signal to our child.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGUSR1) };
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = self.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// How to start one system.
#[derive(Clone, Debug)]
pub(crate) enum System {
    Memcached {
        threads: usize,
        file: Option<PathBuf>,
    },
    /// memcached under whole-process persistence (`ferrite run`), its state
    /// directory `state` (the `wpp` suite).
    MemcachedWpp {
        threads: usize,
        state: PathBuf,
        bin: PathBuf,
    },
    Ferrite {
        store: String,
        threads: usize,
        pool: PathBuf,
        bin: PathBuf,
        group_commit: Option<usize>,
    },
}

impl System {
    pub(crate) fn variant(&self) -> String {
        match self {
            System::MemcachedWpp { .. } => "wpp".into(),
            System::Memcached { file: None, .. } => MEMCACHED.into(),
            System::Memcached { file: Some(_), .. } => MEMCACHED_RESTARTABLE.into(),
            System::Ferrite { store, .. } => format!("ferrite-{store}"),
        }
    }

    /// Starts the system on a free loopback port and waits until it
    /// accepts connections.
    pub(crate) fn start(&self) -> Result<Server, BenchError> {
        let port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let log = unique_path("log");
        let mut cmd;
        match self {
            System::Memcached { threads, file: f } => {
                cmd = Command::new("memcached");
                cmd.args(["-l", "127.0.0.1", "-U", "0", "-c", "4096", "-m", "1024"])
                    .args(["-p", &port.to_string(), "-t", &threads.to_string()]);
                if let Some(f) = f {
                    cmd.arg("-e").arg(f);
                }
                if running_as_root() {
                    // memcached refuses to run as root without -u.
                    cmd.args(["-u", "root"]);
                }
            }
            System::MemcachedWpp {
                threads,
                state,
                bin,
            } => {
                let _ = std::fs::remove_dir_all(state);
                cmd = Command::new(bin);
                cmd.arg("run").arg("--state").arg(state).arg("--");
                cmd.args([
                    "memcached",
                    "-l",
                    "127.0.0.1",
                    "-U",
                    "0",
                    "-c",
                    "4096",
                    "-m",
                    "1024",
                ])
                .args(["-p", &port.to_string(), "-t", &threads.to_string()]);
                if running_as_root() {
                    cmd.args(["-u", "root"]);
                }
            }
            System::Ferrite {
                store,
                threads,
                pool,
                bin,
                group_commit,
            } => {
                cmd = Command::new(bin);
                if store == PMDK_STORE {
                    // The pool is in /dev/shm: without forcing, libpmem
                    // would persist it with msync, not flush+fence.
                    cmd.env("PMEM_IS_PMEM_FORCE", "1");
                }
                cmd.arg("serve")
                    .arg("--pool")
                    .arg(pool)
                    .args(["--listen", &addr.to_string(), "--store", store])
                    .args(["--threads", &threads.to_string(), "--memory", "1G"]);
                if let Some(g) = group_commit {
                    cmd.args(["--group-commit", &g.to_string()]);
                }
            }
        }
        let err = std::fs::File::create(&log).map_err(|e| io(&log, e))?;
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(err);
        let child = cmd
            .spawn()
            .map_err(|e| BenchError::Unsupported(format!("starting {}: {e}", self.variant())))?;
        let mut server = Server {
            child,
            addr,
            log,
            supervised: matches!(self, System::MemcachedWpp { .. }),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(server);
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                let msg = std::fs::read_to_string(&server.log).unwrap_or_default();
                return Err(BenchError::Unsupported(format!(
                    "{} exited ({status}) before listening: {}",
                    self.variant(),
                    msg.trim()
                )));
            }
            if Instant::now() > deadline {
                return Err(BenchError::Unsupported(format!(
                    "{} did not listen on {addr} within 60 s",
                    self.variant()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

pub(crate) fn io(path: &Path, source: std::io::Error) -> BenchError {
    BenchError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Whether this process runs as root (memcached then needs `-u`).
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// A loopback port nobody listens on now (the kernel's pick; another
/// process could take it before the server binds, which `start` reports).
fn free_port() -> Result<u16, BenchError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| io(Path::new("127.0.0.1:0"), e))?;
    let port = l
        .local_addr()
        .map_err(|e| io(Path::new("127.0.0.1:0"), e))?;
    Ok(port.port())
}

/// A scratch file (pool, memory file, config) removed when dropped, so a
/// panic or an error leaves nothing in /dev/shm. Declared before the
/// servers using it, so those are killed first.
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A fresh file name in /dev/shm (tmpfs: the memory the pools model).
pub(crate) fn unique_path(ext: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    dir.join(format!(
        "ferrite-bench-server-{}-{}.{ext}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Whether `prog` can be run (found on PATH and executable).
pub(crate) fn have(prog: &str, arg: &str) -> bool {
    Command::new(prog)
        .arg(arg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// The `ferrite` binary to spawn `serve` from: `$FERRITE_BIN`, else this
/// executable when it is `ferrite` (the CLI runs the suites itself), else
/// the newest `ferrite` beside a test binary's `deps/` directory or in
/// `target/{release,debug}`.
pub fn ferrite_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FERRITE_BIN").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let exe = std::env::current_exe().ok()?;
    if exe.file_stem().and_then(|s| s.to_str()) == Some("ferrite") {
        return Some(exe);
    }
    let profile = exe.parent()?.parent()?;
    let target = profile.parent()?;
    // The newest of those present: a stale build may predate `serve`.
    [
        profile.join("ferrite"),
        target.join("release/ferrite"),
        target.join("debug/ferrite"),
    ]
    .into_iter()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max_by_key(|(t, _)| *t)
    .map(|(_, p)| p)
}

/// Why the suite cannot run here, if it cannot (one line).
pub fn missing_tools() -> Option<String> {
    let mut gone = Vec::new();
    if !have("memcaslap", "-V") {
        gone.push("memcaslap (Debian: libmemcached-tools)");
    }
    if !have("memcached", "-V") {
        gone.push("memcached");
    }
    if ferrite_bin().is_none() {
        gone.push("the ferrite binary (build it, or set FERRITE_BIN)");
    }
    (!gone.is_empty()).then(|| format!("bench server: skipped, not installed: {}", gone.join(", ")))
}

/// What one memcaslap run reported.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlapResult {
    pub ops: u64,
    pub secs: f64,
    pub tps: f64,
    pub avg_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub get_misses: Option<u64>,
}

/// Parses memcaslap's output: the final `Run time: 2.0s Ops: N TPS: N …`
/// line, `get_misses: N`, and from the `Total Statistics (N events)` block
/// (printed with `-S`) `Avg:` and the `Log2 Dist:` rows (`i: a b c d` are
/// the counts of latencies in `[2^i, 2^(i+1))`, `[2^(i+1), …)`, … µs).
/// `None` when the final line is missing.
pub fn parse_memcaslap(out: &str) -> Option<SlapResult> {
    let mut r = SlapResult::default();
    let last = out.lines().rev().find(|l| l.contains("TPS:"))?;
    let mut w = last.split_whitespace();
    let mut found = (false, false);
    while let Some(t) = w.next() {
        match t {
            "time:" => r.secs = w.next()?.trim_end_matches('s').parse().ok()?,
            "Ops:" => {
                r.ops = w.next()?.parse().ok()?;
                found.0 = true;
            }
            "TPS:" => {
                r.tps = w.next()?.parse().ok()?;
                found.1 = true;
            }
            _ => {}
        }
    }
    if !(found.0 && found.1) {
        return None;
    }
    for l in out.lines() {
        if let Some(v) = l.trim().strip_prefix("get_misses:") {
            r.get_misses = v.trim().parse().ok();
        }
    }
    // The Total Statistics block with its event count.
    let mut lines = out
        .lines()
        .skip_while(|l| !l.starts_with("Total Statistics ("));
    let head = lines.next();
    let events: Option<u64> =
        head.and_then(|h| h.split('(').nth(1)?.split_whitespace().next()?.parse().ok());
    let mut buckets: Vec<(u32, u64)> = Vec::new();
    let mut in_dist = false;
    for l in lines {
        let t = l.trim();
        if t.is_empty() {
            break;
        }
        if let Some(v) = t.strip_prefix("Avg:") {
            r.avg_us = v.trim().parse().ok();
        } else if t.starts_with("Log2 Dist:") {
            in_dist = true;
        } else if in_dist {
            let Some((first, counts)) = t.split_once(':') else {
                break;
            };
            let Ok(first) = first.trim().parse::<u32>() else {
                break;
            };
            for (i, c) in counts.split_whitespace().enumerate() {
                if let Ok(c) = c.parse::<u64>() {
                    buckets.push((first + i as u32, c));
                }
            }
        }
    }
    let total: u64 = buckets.iter().map(|b| b.1).sum();
    let total = events.filter(|&e| e >= total).unwrap_or(total);
    if total > 0 {
        let want = (total as f64 * 0.99).ceil() as u64;
        let mut seen = 0;
        for (i, c) in &buckets {
            seen += c;
            if seen >= want {
                r.p99_us = Some(2f64.powi(*i as i32 + 1));
                break;
            }
        }
    }
    Some(r)
}

/// Runs memcaslap against `addr` with `cfg` (a config file) once.
pub(crate) fn slap(plan: &Plan, addr: SocketAddr, cfg: &Path) -> Result<SlapResult, BenchError> {
    let mut child = Command::new("memcaslap")
        .arg("-s")
        .arg(addr.to_string())
        .args(["-T", &plan.client_threads.to_string()])
        .args(["-c", &plan.concurrency.to_string()])
        .args(["-t", &format!("{}s", plan.secs)])
        .args(["-S", &format!("{}s", plan.secs)])
        .arg("-F")
        .arg(cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| BenchError::Unsupported(format!("memcaslap: {e}")))?;
    // Read stdout on a thread so a full pipe never stalls memcaslap; kill it
    // if it overruns its run time by far (a hung server).
    let mut stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = stdout.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let mut stderr = child.stderr.take();
    let ereader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = stderr.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let deadline = Instant::now() + Duration::from_secs(u64::from(plan.secs) + 30);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => break None,
        }
    };
    let out = reader.join().unwrap_or_default();
    let err = ereader.join().unwrap_or_default();
    match (status, parse_memcaslap(&out)) {
        (Some(_), Some(r)) if r.ops > 0 => Ok(r),
        (status, _) => Err(BenchError::Unsupported(format!(
            "memcaslap against {addr}: {} ; {}",
            status.map_or("killed after its deadline".into(), |s| s.to_string()),
            err.trim().lines().last().unwrap_or("no result line")
        ))),
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

/// P1's comparison below the network ([`STORE_LAYER`] rows): the item
/// store of each [`p1_stores`] variant driven in process by one thread —
/// P1's `95/5` mix of 16 B keys and 64 B values over a preloaded key
/// space, each set one durable transaction — measured interleaved, with
/// the fences and lines each operation cost. Baseline: `store-tx-undo`.
///
/// The Ferrite stores' pools are anonymous memory in the `adr` domain
/// (`eadr` on a CPU without a flush instruction); `store-pmdk-undo`'s is a
/// libpmemobj pool of the same size in /dev/shm, on the flush+fence path
/// when `PMEM_IS_PMEM_FORCE=1` is in effect (the CLI sets it;
/// `params.pmem_is_pmem_forced` records it). Its counters are PMDK's and
/// not observed (`n/a`), unless the feature `pmdk-count` counts them.
fn store_rows(ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    use ferrite_pmem::{Domain, FlushKind, Pool, PoolOptions};
    use ferrite_server::store::Shared;
    use ferrite_server::store::tx::{TxKv, create, map};
    use ferrite_tx::Strategy;
    const POOL_BYTES: u64 = 128 << 20;
    let keys: u64 = ctx.scale.pick(10_000, 100_000);
    let ops: u64 = ctx.scale.pick(20_000, 200_000);
    let domain = if FlushKind::best().is_some() {
        Domain::Adr
    } else {
        Domain::Eadr
    };
    let e = store_err;
    let strategies = [Strategy::Undo, Strategy::Redo, Strategy::Clobber];
    let pools = strategies
        .iter()
        .map(|_| {
            Pool::create_in_memory(&PoolOptions::new("bench-store", POOL_BYTES).domain(domain))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let txps = pools
        .iter()
        .zip(strategies)
        .map(|(p, s)| create(p, s, 4).map_err(e))
        .collect::<Result<Vec<_>, _>>()?;
    let maps = txps
        .iter()
        .map(|t| map(t).map_err(e))
        .collect::<Result<Vec<_>, _>>()?;
    let shareds = maps
        .iter()
        .map(|m| {
            let mut kv = TxKv::new(m).map_err(e)?;
            Shared::open(&mut kv, 1 << 20).map_err(e)
        })
        .collect::<Result<Vec<_>, _>>()?;
    // PMDK's peer: its pool file is removed after the map is closed (the
    // Scratch is declared first, so it is dropped last).
    #[cfg(feature = "pmdk")]
    let pmdk_file = Scratch(unique_path("pmdk"));
    #[cfg(feature = "pmdk")]
    let pmdk_map = ferrite_server::store::pmdk::create(&pmdk_file.0, POOL_BYTES).map_err(e)?;
    #[cfg(feature = "pmdk")]
    let pmdk_shared = {
        let mut kv = ferrite_server::store::pmdk::PmdkKv::new(&pmdk_map);
        Shared::open(&mut kv, 1 << 20).map_err(e)?
    };
    #[cfg(feature = "pmdk-count")]
    let pmdk_counts = std::cell::RefCell::new(PmdkTally::default());
    let now = now_unix();
    let mut variants = Vec::new();
    for ((m, sh), strategy) in maps.iter().zip(&shareds).zip(strategies) {
        let cache = Cache::new(TxKv::new(m).map_err(e)?, sh);
        let v = store_variant(cache, &format!("tx-{strategy}"), keys, ops, now, || ())?;
        variants.push(if strategy == Strategy::Undo {
            v
        } else {
            v.baseline("store-tx-undo")
        });
    }
    #[cfg(feature = "pmdk")]
    {
        let cache = Cache::new(
            ferrite_server::store::pmdk::PmdkKv::new(&pmdk_map),
            &pmdk_shared,
        );
        #[cfg(not(feature = "pmdk-count"))]
        let tally = || ();
        #[cfg(feature = "pmdk-count")]
        let tally = {
            let counts = &pmdk_counts;
            let mut last = ferrite_pmdk::PmdkCounts::snapshot();
            move || {
                let now = ferrite_pmdk::PmdkCounts::snapshot();
                counts.borrow_mut().add(now - last);
                last = now;
            }
        };
        let v = store_variant(cache, PMDK_STORE, keys, ops, now, tally)?
            .baseline("store-tx-undo")
            .param("pmem_is_pmem_forced", ferrite_pmdk::pmem_forced());
        variants.push(v);
    }
    let mut rows = crate::measure::run_interleaved(ctx, SUITE, &mut variants);
    drop(variants);
    for r in rows.iter_mut() {
        if r.variant == format!("store-{PMDK_STORE}") {
            r.counters_observed = false;
            #[cfg(feature = "pmdk-count")]
            {
                let t = pmdk_counts.borrow();
                // The warm-up batch is the first; the rest were timed.
                let n = (r.ops * r.reps as u64).max(1) as f64;
                r.counters_observed = true;
                r.fences_per_op = t.timed.fences as f64 / n;
                r.lines_per_op = t.timed.lines as f64 / n;
                r.flushes_per_op = t.timed.flush_calls as f64 / n;
                r.msyncs_per_op = t.timed.msyncs as f64 / n;
                r.set_extra("counters", "PMDK's, at the libpmem calls");
            }
        }
    }
    Ok(rows)
}

fn store_err(e: ferrite_server::store::StoreError) -> BenchError {
    BenchError::Unsupported(format!("store: {e}"))
}

/// PMDK's flushes and fences over the timed batches of the
/// `store-pmdk-undo` variant (feature `pmdk-count`): the first batch, the
/// warm-up, is left out.
#[cfg(feature = "pmdk-count")]
#[derive(Default)]
struct PmdkTally {
    batches: u64,
    timed: ferrite_pmdk::PmdkCounts,
}

#[cfg(feature = "pmdk-count")]
impl PmdkTally {
    fn add(&mut self, d: ferrite_pmdk::PmdkCounts) {
        if self.batches > 0 {
            self.timed.fences += d.fences;
            self.timed.flush_calls += d.flush_calls;
            self.timed.lines += d.lines;
            self.timed.msyncs += d.msyncs;
        }
        self.batches += 1;
    }
}

/// The in-process variant `store-<name>` of [`store_rows`]: preloads
/// `keys` items through `cache`, then each batch runs P1's 95/5 mix over
/// them (xorshift keys, each set one durable write) and calls `after`
/// once at its end (outside the operations; PMDK's counts).
fn store_variant<'a, K: ferrite_server::store::Kv + 'a>(
    mut cache: Cache<'a, K>,
    name: &str,
    keys: u64,
    ops: u64,
    now: u64,
    mut after: impl FnMut() + 'a,
) -> Result<crate::measure::Variant<'a>, BenchError> {
    use ferrite_server::protocol::{StoreMode, StoreOpts};
    use ferrite_server::store::Store;
    let mix = Mix::p1();
    let key = |i: u64| format!("key:{i:012}").into_bytes();
    let value = vec![b'v'; mix.value_bytes];
    let opts = StoreOpts::default();
    for i in 0..keys {
        cache
            .store(StoreMode::Set, &key(i), 0, 0, &value, None, &opts, now)
            .map_err(store_err)?;
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ keys;
    let params = json!({
        "mix": P1_MIX,
        "layer": STORE_LAYER,
        "key_bytes": mix.key_bytes,
        "value_bytes": mix.value_bytes,
        "keys": keys,
        "server_threads": 1,
    });
    Ok(crate::measure::Variant::new(
        format!("store-{name}"),
        params,
        ops,
        move |n| {
            for _ in 0..n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = key(x % keys);
                let r = if x % 100 < u64::from(mix.set_pct) {
                    cache
                        .store(StoreMode::Set, &k, 0, 0, &value, None, &opts, now)
                        .map(|_| ())
                } else {
                    cache.get(&k, now).map(|_| ())
                };
                r.expect("an in-process store operation");
            }
            after();
        },
    ))
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
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

/// A minimal memcached text-protocol client for the kill test.
struct Client {
    rd: BufReader<TcpStream>,
    wr: TcpStream,
}

impl Client {
    fn connect(addr: SocketAddr) -> std::io::Result<Client> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Client {
            rd: BufReader::new(s.try_clone()?),
            wr: s,
        })
    }

    fn line(&mut self) -> std::io::Result<String> {
        let mut l = String::new();
        if self.rd.read_line(&mut l)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(l.trim_end().to_string())
    }

    /// `set`; true when the server answered `STORED`.
    fn set(&mut self, key: &str, value: &[u8]) -> std::io::Result<bool> {
        let mut m = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
        m.extend_from_slice(value);
        m.extend_from_slice(b"\r\n");
        self.wr.write_all(&m)?;
        Ok(self.line()? == "STORED")
    }

    /// How many of `keys` a multi-key `get` finds.
    fn count(&mut self, keys: &[String]) -> std::io::Result<usize> {
        self.wr
            .write_all(format!("get {}\r\n", keys.join(" ")).as_bytes())?;
        let mut n = 0;
        loop {
            let l = self.line()?;
            if l == "END" {
                return Ok(n);
            }
            let Some(len) = l
                .strip_prefix("VALUE ")
                .and_then(|v| v.split_whitespace().nth(2))
                .and_then(|b| b.parse::<usize>().ok())
            else {
                return Err(std::io::Error::other(format!("unexpected reply '{l}'")));
            };
            let mut data = vec![0; len + 2];
            self.rd.read_exact(&mut data)?;
            n += 1;
        }
    }
}

/// The kill -9 test of `sys` (module documentation).
fn survival(ctx: &BenchCtx, plan: &Plan, sys: &System) -> Result<Row, BenchError> {
    let fail = |what: &str, e: std::io::Error| {
        BenchError::Unsupported(format!("kill test of {}: {what}: {e}", sys.variant()))
    };
    let keys: Vec<String> = (0..plan.kill_keys)
        .map(|i| format!("kill9:{i:08}"))
        .collect();
    let value = [b'v'; 64];
    let mut server = sys.start()?;
    let mut acked = 0usize;
    let loading = Instant::now();
    {
        let mut c = Client::connect(server.addr).map_err(|e| fail("connect", e))?;
        for k in &keys {
            if c.set(k, &value).map_err(|e| fail("set", e))? {
                acked += 1;
            }
        }
    }
    let load_secs = loading.elapsed().as_secs_f64();
    // SIGKILL, then the same command line on the same file.
    server.child.kill().map_err(|e| fail("kill", e))?;
    let _ = server.child.wait();
    drop(server);
    let t0 = Instant::now();
    let server = sys.start()?;
    let restart_ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut c = Client::connect(server.addr).map_err(|e| fail("connect", e))?;
    let mut survived = 0;
    for chunk in keys.chunks(100) {
        survived += c.count(chunk).map_err(|e| fail("get", e))?;
    }
    drop(server);
    ctx.note(format!(
        "[server] kill -9: {} kept {survived} of {acked} acknowledged keys",
        sys.variant()
    ));
    let mut r = Row::empty(
        SUITE,
        &sys.variant(),
        json!({
            "mix": KILL_MIX,
            "key_bytes": 14,
            "value_bytes": value.len(),
            "client_threads": 1,
        }),
    );
    r.counters_observed = false;
    // The timed part is the loading: one set at a time, each acknowledged
    // before the next is sent (the latency of a durable set, for Ferrite).
    r.ops = keys.len() as u64;
    r.secs = load_secs;
    if load_secs > 0.0 {
        r.ops_per_s = keys.len() as f64 / load_secs;
        r.ns_per_op = load_secs * 1e9 / keys.len() as f64;
    }
    r.reps = 1;
    r.set_extra("acknowledged", acked);
    r.set_extra("survived", survived);
    r.set_extra("restart_ms", (restart_ms * 10.0).round() / 10.0);
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "Total Statistics (1000 events)\n   Min:        12\n   Avg:       152\n   Log2 Dist:\n       4:     100    800    80    10\n       8:    9     1     0     0\n\ncmd_get: 950\nget_misses: 3\n\nRun time: 2.0s Ops: 209200 TPS: 104590 Net_rate: 12.1M/s\n";

    #[test]
    fn memcaslap_output_parses() {
        let r = parse_memcaslap(SAMPLE).expect("parses");
        assert_eq!(r.ops, 209_200);
        assert_eq!(r.tps, 104_590.0);
        assert_eq!(r.secs, 2.0);
        assert_eq!(r.avg_us, Some(152.0));
        assert_eq!(r.get_misses, Some(3));
        // 99% of 1000 events = 990 = 100+800+80+10, reached in bucket 7:
        // the p99 lies in [128, 256).
        assert_eq!(r.p99_us, Some(256.0));
        assert!(parse_memcaslap("no result").is_none());
    }

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
