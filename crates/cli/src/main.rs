//! `ferrite`: probe the machine, benchmark, explore crash states, manage
//! pools, use an embedded key-value store.
//!
//! Errors are printed as one line (`ferrite: …`) with a non-zero exit status.

mod checks;
mod kv;
mod serve;

use clap::{Parser, Subcommand};
use ferrite_pmem::{Domain, Pool, PoolOptions};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ferrite",
    version,
    about = "Crash-consistent persistent memory toolkit"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Measure persist-barrier costs, latency and bandwidth on this machine [P0 §2].
    Probe {
        /// Append the rows as JSON lines to FILE.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Larger arrays and more repetitions.
        #[arg(long)]
        full: bool,
    },
    /// Run a benchmark suite (`ferrite bench list` shows them).
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
    Check {
        /// Target name, or `list`.
        target: String,
        /// Maximum crash states to explore.
        #[arg(long, default_value_t = 2000)]
        budget: usize,
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
    Kv {
        /// The pool file holding the store.
        path: PathBuf,
        /// Keys and values are hexadecimal.
        #[arg(long, global = true)]
        hex: bool,
        #[command(subcommand)]
        cmd: kv::KvCmd,
    },
    /// Serve the memcached protocols from a pool: every acknowledged write survives kill -9.
    Serve(serve::ServeArgs),
    /// Write a self-contained HTML report (DIR/index.html): every reproduced figure beside the paper's value, the headline table, the claims, the machine.
    Report(ferrite_report::ReportArgs),
    /// Create, inspect and verify pool files.
    Pool {
        #[command(subcommand)]
        cmd: PoolCmd,
    },
}

#[derive(Subcommand)]
enum PoolCmd {
    /// Create a pool file.
    Create {
        path: PathBuf,
        /// Size, with optional K/M/G suffix.
        #[arg(long, default_value = "64M", value_parser = parse_size)]
        size: u64,
        /// Layout name recorded in the header.
        #[arg(long, default_value = "ferrite")]
        layout: String,
        /// Durability domain (default: auto-detected, or FERRITE_DOMAIN).
        #[arg(long)]
        domain: Option<Domain>,
    },
    /// Print a pool's header.
    Info {
        path: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Verify a pool's header (and layout, if given); exit 1 when bad.
    Check {
        path: PathBuf,
        #[arg(long)]
        layout: Option<String>,
    },
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(format!("unknown size suffix '{c}' (use K, M, G or T)")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let n: u64 = num.parse().map_err(|_| format!("bad size '{s}'"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("size '{s}' overflows"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.cmd) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ferrite: {e}");
            ExitCode::FAILURE
        }
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
        Cmd::Kv { path, hex, cmd } => kv::run(&path, hex, cmd),
        Cmd::Serve(a) => serve::run(a),
        Cmd::Report(a) => {
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
            ferrite_report::run(&a, &checks).map_err(|e| e.to_string())?;
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
    let outcomes = runner(cfg)?;
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
            let p = Pool::create(&path, &opts).map_err(|e| e.to_string())?;
            let pmem = if p.is_pmem() {
                "persistent memory (MAP_SYNC)"
            } else {
                "not persistent memory (no MAP_SYNC)"
            };
            println!(
                "created {} ({} bytes, domain {}, {pmem})",
                path.display(),
                p.header().size,
                p.domain()
            );
            p.close().map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        PoolCmd::Info { path, json } => {
            let (h, root) = Pool::inspect(&path).map_err(|e| e.to_string())?;
            if json {
                let mut v = serde_json::to_value(&h).map_err(|e| e.to_string())?;
                v["uuid"] = h.uuid_string().into();
                v["root"] = root.into();
                println!("{v}");
            } else {
                let created = h.created_ns / 1_000_000_000;
                println!("path:      {}", path.display());
                println!("layout:    {}", h.layout);
                println!("version:   {}", h.version);
                println!("uuid:      {}", h.uuid_string());
                println!("size:      {} bytes", h.size);
                println!("domain:    {}", h.domain);
                println!("features:  {:#x}", h.features);
                println!("created:   {created} (unix seconds)");
                println!("root:      {root:#x}");
            }
            Ok(ExitCode::SUCCESS)
        }
        PoolCmd::Check { path, layout } => {
            let (h, root) = Pool::inspect(&path).map_err(|e| e.to_string())?;
            if let Some(l) = layout.filter(|l| *l != h.layout) {
                return Err(format!("pool has layout '{}', expected '{l}'", h.layout));
            }
            if root != 0 && (root < ferrite_pmem::HEADER_SIZE as u64 || root >= h.size) {
                return Err(format!(
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
    let mut all = Vec::new();
    for name in &names {
        eprintln!("== bench {name} ({})", ctx.scale.name());
        let rows = ferrite_bench::run_suite(name, &ctx).map_err(|e| e.to_string())?;
        ferrite_bench::report(&rows, &ctx).map_err(|e| e.to_string())?;
        all.extend(rows);
    }
    // The probe has no claims: `ferrite probe` ends with its table.
    if names.iter().any(|n| n != "probe") {
        ferrite_bench::claims::print_summary(&all);
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
