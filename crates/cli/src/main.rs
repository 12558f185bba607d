//! `ferrite`: probe the machine, benchmark, explore crash states, manage
//! pools, use an embedded key-value store.
//!
//! Errors are printed as one line (`ferrite: …`) with exit status 2
//! ([`ERROR_EXIT`]); exit status 1 is kept for answers that are not errors:
//! a key not found (`kv get`/`del`), findings of `pool check`, violations of
//! `check`. Scripts can tell "absent" from "broken".

mod backup;
mod checks;
mod deep;
mod deep_items;
mod kv;
mod live;
mod opener;
mod progress;
mod run;
mod scrub;
mod serve;
mod size;
mod trace;

use clap::{Parser, Subcommand};
use ferrite_pmem::{Domain, Pool, PoolOptions};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ferrite",
    version,
    about = "Crash-consistent persistent memory toolkit",
    after_help = "\
Sizes: 4096, 64K, 64M, 64MiB, 64MB, 1.5G, 1T (K, M, G, T and P are powers of 1024, with
or without B or iB; `ferrite help pool create` says more).

Examples:
  ferrite probe
  ferrite bench list
  ferrite bench log --json rows.jsonl
  ferrite check list
  ferrite check selftest --budget 300
  ferrite pool create demo.pool --size 64M
  ferrite pool info demo.pool
  ferrite kv store.pool create --engine lsm --size 64MiB
  ferrite kv store.pool put greeting hello
  ferrite kv store.pool get greeting
  ferrite serve --pool cache.pool --memory 1G
  ferrite trace --out selftest.trace -- check selftest --budget 20"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Measure persist-barrier costs, latency and bandwidth on this machine [P0 §2].
    #[command(after_help = "\
Examples:
  ferrite probe
  ferrite probe --full --json probe.jsonl")]
    Probe {
        /// Append the rows as JSON lines to FILE.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Larger arrays and more repetitions.
        #[arg(long)]
        full: bool,
    },
    /// Run a benchmark suite (`ferrite bench list` shows them).
    ///
    /// Tables go to stdout; progress (a line per group of variants as it
    /// starts and ends, a line per repetition) to stderr.
    #[command(after_help = "\
Examples:
  ferrite bench list
  ferrite bench log --reps 3
  ferrite bench alloc --json rows.jsonl
  ferrite bench all --quick --json rows.jsonl
  ferrite bench engine --full 2>progress.log")]
    Bench {
        /// Suite name, `all` (every suite) or `list`.
        #[arg(default_value = "all")]
        suite: String,
        /// Quick scale (the default).
        #[arg(long, conflicts_with = "full")]
        quick: bool,
        /// Full scale.
        #[arg(long)]
        full: bool,
        /// Append the rows as JSON lines to FILE.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Repetitions per variant (median reported).
        #[arg(long)]
        reps: Option<usize>,
    },
    /// Explore simulated power failures of a component (`ferrite check list`).
    ///
    /// Exit 0 when no crash state violates the component's invariants, 1
    /// otherwise (each violation printed with the `--at` that replays it).
    #[command(after_help = "\
Examples:
  ferrite check list
  ferrite check selftest --budget 300
  ferrite check log-classic --budget 5000 --seed 7
  ferrite check engine-lsm --budget 500 --crash-on-flush
  ferrite check selftest-broken --budget 400      # planted bugs: must exit 1
  ferrite check selftest-broken --at fence:17/s5  # replay one state a run printed")]
    Check {
        /// Target name, or `list`.
        target: String,
        /// Maximum crash states to explore (default 2000; `cache` and
        /// `cache-planted`: 6000).
        #[arg(long)]
        budget: Option<usize>,
        /// Seed for sampling crash points and images.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Durability domain to simulate (default: the target's own set).
        #[arg(long)]
        domain: Option<Domain>,
        /// 8-byte failure atomicity instead of whole cache lines.
        #[arg(long)]
        tearing: bool,
        /// Also crash at every flush.
        #[arg(long)]
        crash_on_flush: bool,
        /// Also crash before every store.
        #[arg(long)]
        crash_on_store: bool,
        /// Do not crash recovery itself.
        #[arg(long)]
        no_nested: bool,
        /// Replay one reported state, e.g. `fence:17/s5` (use with the same --seed).
        #[arg(long)]
        at: Option<ferrite_crash::Repro>,
    },
    /// Use an embedded key-value store in a pool file (`ferrite kv PATH create`, then get/put/del/batch/scan/info).
    #[command(after_help = "\
Examples:
  ferrite kv demo.pool create --engine cow --size 64M
  ferrite kv demo.pool put greeting hello
  ferrite kv demo.pool get greeting
  ferrite kv demo.pool batch a=1 b=2 -greeting
  ferrite kv demo.pool scan
  ferrite kv demo.pool info")]
    Kv {
        /// The pool file holding the store.
        path: PathBuf,
        /// Keys and values are hexadecimal.
        #[arg(long, global = true)]
        hex: bool,
        /// Durability domain of the pool: adr, eadr, pdram, pdram-lite,
        /// msync or volatile (default: auto-detected, or FERRITE_DOMAIN).
        #[arg(long, global = true)]
        domain: Option<Domain>,
        #[command(subcommand)]
        cmd: kv::KvCmd,
    },
    /// Serve the memcached protocols from a pool: every acknowledged write survives kill -9.
    Serve(serve::ServeArgs),
    /// Write a self-contained HTML report (DIR/index.html): every reproduced figure beside the paper's value, the headline table, the claims, the machine.
    #[command(after_help = "\
Examples:
  ferrite report --quick
  ferrite report --quick --out ferrite-report
  ferrite bench all --quick --json rows.jsonl
  ferrite report --from rows.jsonl --out ferrite-report
  ferrite report --full --out ferrite-report-full")]
    Report(ferrite_report::ReportArgs),
    /// Record a persist trace of a bench suite or a check target (for
    /// ferrite-sim), or show one.
    ///
    /// Every load, store, flush, non-temporal store and fence that goes
    /// through Ferrite's persister is recorded per thread, with the
    /// wall-clock gap since the thread's previous event; the file format
    /// is documented byte by byte in ferrite-pmem's `trace` module. Commit
    /// points appear only where code marks them (`bench sim`'s drivers do,
    /// after each operation; the components themselves do not yet).
    /// `--show` verifies a trace file and summarises it; a damaged file is
    /// refused with one line and exit status 2.
    #[command(after_help = "\
Examples:
  ferrite trace --out selftest.trace -- check selftest --budget 20
  ferrite trace --show selftest.trace
  ferrite trace --out log.trace --max-events 200000 -- bench log --quick --reps 1")]
    Trace(trace::TraceArgs),
    /// Run a program under whole-process persistence: after a failure,
    /// --resume continues every thread where it stopped [P1 ch4].
    Run(run::RunArgs),
    /// Create, inspect and verify pool files.
    #[command(after_help = "\
Examples:
  ferrite pool create demo.pool --size 64M
  ferrite pool info demo.pool
  ferrite pool info demo.pool --json
  ferrite pool check demo.pool --layout ferrite")]
    Pool {
        #[command(subcommand)]
        cmd: PoolCmd,
    },
}

#[derive(Subcommand)]
enum PoolCmd {
    /// Copy a pool — open or not, any layout — consistently, and verify
    /// the copy with the deep check.
    ///
    /// A pool another process has open (`ferrite serve` under load) is
    /// copied while that process is paused (SIGSTOP, then SIGCONT: about
    /// 0.5 s per GiB): the copy is a crash image of it, which the store's
    /// own recovery then turns into a cleanly closed pool. DEST must not
    /// exist. A plain `cp` of an open pool is not consistent. Exit 0 with
    /// a verified copy, 1 when SRC holds damage (nothing written), 2 on
    /// errors.
    #[command(after_help = "\
Examples:
  ferrite kv demo.pool create --size 16M
  ferrite pool backup demo.pool demo-backup.pool
  ferrite pool check demo-backup.pool --deep")]
    Backup { src: PathBuf, dest: PathBuf },
    /// Read every record of a store and verify its checksum, at a bounded
    /// rate, listing each damaged key. Works on a consistent image (a pool
    /// `ferrite serve` has open is copied while it is paused, as for
    /// `check --deep`; the rate bounds the verification of the copy).
    /// Never writes the file. Exit 0 clean, 1 damage found, 2 on errors.
    #[command(after_help = "\
Examples:
  ferrite kv demo.kv create --size 16M
  ferrite pool scrub demo.kv
  ferrite pool scrub demo.kv --rate 50")]
    Scrub {
        path: PathBuf,
        /// Most megabytes (10^6 bytes) of records verified per second.
        #[arg(long, value_parser = positive_rate)]
        rate: Option<f64>,
    },
    /// Create a pool file.
    #[command(after_help = "\
Sizes: a number of bytes with an optional unit, any case, spaces allowed: K, M, G, T, P
(alone or followed by B or iB) are 2^10, 2^20, 2^30, 2^40, 2^50 bytes, so 64M = 64MB =
64MiB = 67108864. Fractions are fine when exact (1.5G). A pool size must be a whole
number of 4096-byte pages, at least 8K: other sizes are refused (not rounded), with
the page multiples on either side named.

Examples:
  ferrite pool create demo.pool
  ferrite pool create app.pool --size 32MiB --layout myapp
  ferrite pool create slow.pool --size 1.5M --domain msync")]
    Create {
        path: PathBuf,
        /// Size: bytes, or with a unit (64M = 64MB = 64MiB = 2^26 bytes; 1.5G);
        /// a whole number of 4 KiB pages.
        #[arg(long, default_value = "64M", value_parser = size::pool_arg)]
        size: u64,
        /// Layout name recorded in the header.
        #[arg(long, default_value = "ferrite")]
        layout: String,
        /// Durability domain (default: auto-detected, or FERRITE_DOMAIN).
        #[arg(long)]
        domain: Option<Domain>,
    },
    /// Print a pool's header: layout, size, domain, creation time (UTC), root.
    #[command(after_help = "\
Examples:
  ferrite pool create demo.pool
  ferrite pool info demo.pool
  ferrite pool info demo.pool --json")]
    Info {
        path: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Verify a pool's header (and layout, if given); with --deep, walk
    /// what it holds (heap, transaction slots and logs, structures, PTM,
    /// logs, page store, engines). Exit 0 clean, 1 with one line per
    /// finding, 2 on usage errors.
    #[command(after_help = "\
Examples:
  ferrite pool create demo.pool
  ferrite pool check demo.pool
  ferrite pool check demo.pool --layout ferrite
  ferrite kv demo.kv create --size 16M
  ferrite pool check demo.kv --deep
  ferrite pool check demo.kv --deep --json
  ferrite pool check demo.kv --deep --repair")]
    Check {
        path: PathBuf,
        #[arg(long)]
        layout: Option<String>,
        /// Recognise what the pool holds and walk it: checksums,
        /// reachability from the roots, leaks, logs' valid prefixes,
        /// transactions recovery would act on (read-only: recovery runs on
        /// an in-memory copy).
        #[arg(long)]
        deep: bool,
        /// Run the component's own recovery on the file where that is
        /// safe, say what it did, and check again (refuses, with the
        /// reason, for corruption and leaks).
        #[arg(long, requires = "deep")]
        repair: bool,
        /// Print one JSON object instead of text.
        #[arg(long, requires = "deep")]
        json: bool,
    },
}

/// A `--rate`: a positive number of MB/s.
fn positive_rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if r > 0.0 && r.is_finite() => Ok(r),
        _ => Err(format!("'{s}' is not a positive rate in MB/s (e.g. 50)")),
    }
}

/// Exit status of an error (a readable line on stderr); 1 means "not
/// found" or "findings", 0 success (clap's usage errors are 2 as well).
pub const ERROR_EXIT: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Output into a closed pipe (`ferrite pool check … | head`) ends the
    // command quietly, as for other tools, instead of a panic; the server
    // and `run` keep Rust's ignored SIGPIPE (a client hanging up must not
    // kill them).
    if !matches!(cli.cmd, Cmd::Serve(_) | Cmd::Run(_)) {
        // SAFETY: restoring the default disposition of one signal, from
        // the main thread before any other thread exists.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    match run(cli.cmd) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ferrite: {e}");
            ExitCode::from(ERROR_EXIT)
        }
    }
}

/// `PATH: message`, once: the pool layer's errors about a file (not found,
/// already exists, locked, I/O) already start with its path, and a message
/// that does is not prefixed again (no "a.pool: a.pool: …").
pub fn at(path: &std::path::Path, e: impl std::fmt::Display) -> String {
    let msg = e.to_string();
    let shown = path.display().to_string();
    if msg
        .strip_prefix(shown.as_str())
        .is_some_and(|rest| rest.starts_with(": "))
    {
        msg
    } else {
        format!("{shown}: {msg}")
    }
}

fn run(cmd: Cmd) -> Result<ExitCode, String> {
    match cmd {
        Cmd::Probe { json, full } => bench(&["probe".into()], full, json, None),
        Cmd::Bench {
            suite,
            quick: _,
            full,
            json,
            reps,
        } => bench(&[suite], full, json, reps),
        Cmd::Check {
            target,
            budget,
            seed,
            domain,
            tearing,
            crash_on_flush,
            crash_on_store,
            no_nested,
            at,
        } => {
            let budget = budget.unwrap_or_else(|| checks::default_budget(&target));
            let mut cfg = ferrite_crash::Config::new("check")
                .budget(budget)
                .seed(seed)
                .progress(true);
            cfg = cfg
                .tearing(tearing)
                .crash_on_flush(crash_on_flush)
                .crash_on_store(crash_on_store)
                .nested(!no_nested)
                .only(at);
            if let Some(d) = domain {
                cfg = cfg.domain(d);
            }
            check(&target, &cfg)
        }
        Cmd::Pool { cmd } => pool(cmd),
        Cmd::Kv {
            path,
            hex,
            domain,
            cmd,
        } => kv::run(&path, hex, domain, cmd),
        Cmd::Serve(a) => serve::run(a),
        Cmd::Run(a) => run::run(a),
        Cmd::Trace(a) => trace::run(a, |args| {
            let cli = Cli::try_parse_from(std::iter::once("ferrite".to_string()).chain(args))
                .map_err(|e| e.to_string().lines().next().unwrap_or("").to_string())?;
            match cli.cmd {
                c @ (Cmd::Bench { .. } | Cmd::Check { .. }) => {
                    if let Cmd::Bench { suite, .. } = &c
                        && (suite == "sim" || suite == "all")
                    {
                        return Err(format!(
                            "bench {suite} records traces itself; trace one other suite"
                        ));
                    }
                    run(c)
                }
                _ => Err("ferrite trace runs `bench SUITE` or `check TARGET`".into()),
            }
        }),
        Cmd::Report(a) => {
            use ferrite_bench::{BenchCtx, Scale};
            // The check targets live in this binary: the report runs them
            // through this closure (states and violations summed per target).
            let run = |target: &str, budget: usize| -> Result<(usize, usize), String> {
                let (_, _, _, runner) = checks::TARGETS
                    .iter()
                    .find(|t| t.0 == target)
                    .ok_or_else(|| format!("unknown check target '{target}'"))?;
                let outcomes = runner(&ferrite_crash::Config::new("report").budget(budget))?;
                Ok(outcomes.iter().fold((0, 0), |(s, v), o| {
                    (s + o.report.states, v + o.report.violation_count)
                }))
            };
            let targets = checks::TARGETS
                .iter()
                .map(|t| (t.0.to_string(), !t.2))
                .collect();
            let checks = ferrite_report::Checks { targets, run: &run };
            // So are the suites: the report reads rows, it links no harness.
            let scale = if a.full { Scale::Full } else { Scale::Quick };
            let ctx = BenchCtx::new(scale).with_progress(true);
            let run_suite = |name: &str| -> Result<Vec<ferrite_bench::Row>, String> {
                let rows = ferrite_bench::run_suite(name, &ctx).map_err(|e| e.to_string())?;
                ferrite_bench::report(&rows, &ctx).map_err(|e| e.to_string())?;
                Ok(rows)
            };
            let names = ferrite_bench::suites()
                .iter()
                .map(|(n, _)| n.to_string())
                .collect();
            let suites = ferrite_report::Suites {
                names,
                run: &run_suite,
            };
            ferrite_report::run(&a, &suites, &checks).map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn check(target: &str, cfg: &ferrite_crash::Config) -> Result<ExitCode, String> {
    if target == "list" {
        for (name, what, expect_ok, _) in checks::TARGETS {
            println!(
                "{name:<20} {}{what}",
                if *expect_ok { "" } else { "[must fail] " }
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let Some((name, _, _, runner)) = checks::TARGETS.iter().find(|t| t.0 == target) else {
        let names: Vec<_> = checks::TARGETS.iter().map(|t| t.0).collect();
        return Err(format!(
            "unknown check target '{target}' (known: {})",
            names.join(", ")
        ));
    };
    eprintln!(
        "== check {name}: up to {} crash states, seed {}",
        cfg.budget, cfg.seed
    );
    let t0 = std::time::Instant::now();
    let outcomes = runner(cfg)?;
    eprintln!(
        "== check {name}: explored in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let (mut states, mut violations) = (0usize, 0usize);
    for o in &outcomes {
        println!("{name}/{}: {}", o.variant, o.report.to_string().trim_end());
        states += o.report.states;
        violations += o.report.violation_count;
    }
    println!("checked {name}: {states} crash states, {violations} violations");
    Ok(if violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn pool(cmd: PoolCmd) -> Result<ExitCode, String> {
    match cmd {
        PoolCmd::Create {
            path,
            size,
            layout,
            domain,
        } => {
            let mut opts = PoolOptions::new(&layout, size);
            opts.domain = domain;
            // Allocating a large pool file can take a while.
            let step = progress::Step::start(format!("creating {}", path.display()));
            let p = Pool::create(&path, &opts).map_err(|e| at(&path, e))?;
            step.done("");
            let pmem = if p.is_pmem() {
                "persistent memory (MAP_SYNC)"
            } else {
                "not persistent memory (no MAP_SYNC)"
            };
            println!(
                "created {}: {}, domain {}, {pmem}",
                path.display(),
                size::Both(p.header().size),
                p.domain()
            );
            p.close().map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        PoolCmd::Info { path, json } => {
            let (h, root) = Pool::inspect(&path).map_err(|e| at(&path, e))?;
            if json {
                let mut v = serde_json::to_value(&h).map_err(|e| e.to_string())?;
                v["uuid"] = h.uuid_string().into();
                v["root"] = root.into();
                // The raw fields stay as they are (`created_ns`, `size`);
                // these are the same values for people.
                v["created"] = created(h.created_ns, ferrite_report::date::rfc3339).into();
                v["size_human"] = size::human(h.size).into();
                println!("{v}");
            } else {
                println!("path:      {}", path.display());
                println!("layout:    {}", h.layout);
                println!("version:   {}", h.version);
                println!("uuid:      {}", h.uuid_string());
                println!("size:      {}", size::Both(h.size));
                println!("domain:    {}", h.domain);
                println!("features:  {:#x}", h.features);
                println!(
                    "created:   {}",
                    created(h.created_ns, ferrite_report::date::utc)
                );
                println!("root:      {root:#x}");
            }
            Ok(ExitCode::SUCCESS)
        }
        PoolCmd::Backup { src, dest } => backup::run(&src, &dest),
        PoolCmd::Scrub { path, rate } => scrub::run(&path, rate),
        PoolCmd::Check {
            path,
            layout,
            deep: true,
            repair,
            json,
        } => deep::run(&path, layout.as_deref(), repair, json),
        PoolCmd::Check { path, layout, .. } => {
            // A file that cannot be read is an error (exit 2); a header
            // that is wrong is a finding (exit 1).
            let finding = |what: String| {
                eprintln!("ferrite: {}", at(&path, what));
                Ok(ExitCode::FAILURE)
            };
            let (h, root) = match Pool::inspect(&path) {
                Ok(x) => x,
                Err(
                    e @ (ferrite_pmem::PoolError::NotFound { .. }
                    | ferrite_pmem::PoolError::Io { .. }),
                ) => return Err(at(&path, e)),
                Err(e) => return finding(e.to_string()),
            };
            if let Some(l) = layout.filter(|l| *l != h.layout) {
                return finding(format!("pool has layout '{}', expected '{l}'", h.layout));
            }
            if root != 0 && (root < ferrite_pmem::HEADER_SIZE as u64 || root >= h.size) {
                return finding(format!(
                    "root offset {root:#x} points outside the data area"
                ));
            }
            println!(
                "{}: ok (layout {}, {} bytes, domain {})",
                path.display(),
                h.layout,
                h.size,
                h.domain
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A pool's creation time (`created_ns`, nanoseconds since the Unix
/// epoch) as a date; 0 is what a pool made without a clock records.
fn created(ns: u64, form: fn(u64) -> String) -> String {
    if ns == 0 {
        "unknown".into()
    } else {
        form(ns / 1_000_000_000)
    }
}

fn bench(
    suites: &[String],
    full: bool,
    json: Option<PathBuf>,
    reps: Option<usize>,
) -> Result<ExitCode, String> {
    use ferrite_bench::{BenchCtx, Scale};
    if suites.len() == 1 && suites[0] == "list" {
        for (name, what) in ferrite_bench::suites() {
            println!("{name:<10} {what}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    #[cfg(feature = "pmdk")]
    force_pmdk_flush_path()?;
    let mut ctx = BenchCtx::new(if full { Scale::Full } else { Scale::Quick }).with_progress(true);
    // Bars on a terminal; plain lines (the bench's own) in a pipe or log.
    let bars = progress::BenchBars::default();
    if progress::terminal() {
        ctx = ctx.with_progress_hook(bars.hook());
    }
    if let Some(r) = reps {
        ctx = ctx.with_reps(r.max(1));
    }
    if let Some(j) = json {
        ctx = ctx.with_json(j);
    }
    let names: Vec<String> = if suites.len() == 1 && suites[0] == "all" {
        ferrite_bench::suites()
            .iter()
            .map(|(n, _)| n.to_string())
            .collect()
    } else {
        suites.to_vec()
    };
    let started = std::time::Instant::now();
    let mut all = Vec::new();
    for (i, name) in names.iter().enumerate() {
        eprintln!(
            "== bench {name} ({}, {} reps; suite {} of {})",
            ctx.scale.name(),
            ctx.reps,
            i + 1,
            names.len()
        );
        let t0 = std::time::Instant::now();
        let rows = ferrite_bench::run_suite(name, &ctx);
        bars.clear();
        let rows = rows.map_err(|e| e.to_string())?;
        eprintln!(
            "== bench {name}: {} rows in {:.1} s",
            rows.len(),
            t0.elapsed().as_secs_f64()
        );
        ferrite_bench::report(&rows, &ctx).map_err(|e| e.to_string())?;
        all.extend(rows);
    }
    // The probe has no claims: `ferrite probe` ends with its table.
    if names.iter().any(|n| n != "probe") {
        ferrite_bench::claims::print_summary(&all);
    }
    if names.len() > 1 {
        eprintln!(
            "== bench: {} suites in {:.1} s",
            names.len(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// PMDK decides flush-vs-msync once per process, at its first
/// `pmem_is_pmem`; pools on /dev/shm take the flush path (like Ferrite's
/// `adr`) only with `PMEM_IS_PMEM_FORCE=1` set before that.
#[cfg(feature = "pmdk")]
fn force_pmdk_flush_path() -> Result<(), String> {
    // SAFETY: called from the main thread before the benchmark starts any
    // thread, so no other thread reads the environment concurrently.
    if unsafe { ferrite_pmdk::force_pmem() } {
        Ok(())
    } else {
        Err("PMDK does not take its flush path on /dev/shm even with PMEM_IS_PMEM_FORCE=1; its rows would measure msync".into())
    }
}
