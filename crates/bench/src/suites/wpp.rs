//! The `wpp` suite: whole-process persistence (`ferrite run`, P1 ch4).
//!
//! 1. **memcached** (Debian's, unmodified) under `ferrite run` against the
//!    same memcached plain, and against `ferrite serve` on the byte map with
//!    undo and redo logging (`tx-undo`, `tx-redo`: the stand-ins for P1's
//!    PMDK port, which logs every update where WPP logs nothing), driven by
//!    `memcaslap` with P1's mixes (16 B keys, 64 B values), 2 server
//!    threads, interleaved rep by rep. Variants `native`, `wpp`, `tx-undo`,
//!    `tx-redo`; `params.program` = `memcached`; `ratio_vs_baseline` is
//!    against `native` of the same mix. P1 reports ≈ 0.8× of volatile.
//! 2. **Interposition costs** (P1 Fig. 4.5): a C program (`wpp_micro.c`)
//!    times anonymous mappings (one 16 MiB slab touched; 128 chunks of
//!    128 KiB; one 4 KiB map+unmap), thread create+join, and malloc/free
//!    (no interposed call), natively and under `ferrite run`, interleaved.
//!    `params.program` = `micro`, `params.op`; `ns_per_op` is the program's
//!    own figure (median of the repetitions).
//! 3. **Restart time against process size**: the same program holds N MiB
//!    touched, a failure is injected, and `--resume` is timed from spawn to
//!    every thread running again (`params.program` = `restart`,
//!    `params.size_mib`; `extra.restart_ms`). The bar: 1 GiB < 1 s.
//!
//! `--quick`: mixes 95/5 and 5/95, 2 s runs, 2 reps, restart at 64 MiB
//! and 1 GiB (the bar, so the quick run judges it too). `--full`:
//! P1's four mixes, 10 s runs, 5 reps, restart at 64, 256 and 1024 MiB.
//! Tools missing (memcaslap, memcached, cc, the runtime library): the
//! parts that need them print one line and yield no rows.

use crate::ctx::BenchCtx;
use crate::error::BenchError;
use crate::measure::{median, spread};
use crate::row::{Row, set_ratios};
use crate::suites::server::{self, Mix, Plan, Scratch, System, unique_path};
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

pub const SUITE: &str = "wpp";
pub const NATIVE: &str = "native";
pub const WPP: &str = "wpp";

pub fn run(ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    let Some(bin) = server::ferrite_bin() else {
        println!("bench wpp: skipped, no ferrite binary (build it, or set FERRITE_BIN)");
        return Ok(vec![]);
    };
    let lib = bin.parent().and_then(ferrite_wpp::find_runtime);
    let Some(lib) = lib else {
        println!(
            "bench wpp: skipped, the runtime library {} is not built beside {} (cargo build --release -p ferrite-wpp-rt)",
            ferrite_wpp::RUNTIME_LIB,
            bin.display()
        );
        return Ok(vec![]);
    };
    let mut rows = Vec::new();
    match server::missing_tools() {
        Some(why) => println!("{}", why.replace("bench server", "bench wpp (memcached)")),
        None => rows.extend(memcached_rows(ctx, &bin)?),
    }
    match micro_program() {
        Some(prog) => {
            rows.extend(micro_rows(ctx, &bin, &prog.0)?);
            rows.extend(restart_rows(ctx, &lib, &prog.0)?);
        }
        None => println!("bench wpp: micro-benchmarks skipped, no C compiler (cc)"),
    }
    Ok(rows)
}

fn plan(ctx: &BenchCtx) -> Plan {
    let mut p = Plan::for_ctx(ctx);
    p.mixes = match ctx.scale {
        crate::Scale::Quick => ["95/5", "5/95"]
            .iter()
            .filter_map(|m| Mix::named(m))
            .collect(),
        crate::Scale::Full => ["95/5", "75/25", "25/75", "5/95"]
            .iter()
            .filter_map(|m| Mix::named(m))
            .collect(),
    };
    p.group_commit = Some(1);
    p
}

fn memcached_rows(ctx: &BenchCtx, bin: &Path) -> Result<Vec<Row>, BenchError> {
    let plan = plan(ctx);
    let mut out = Vec::new();
    for mix in &plan.mixes {
        let cfg = Scratch(unique_path("cfg"));
        std::fs::write(&cfg.0, mix.config()).map_err(|e| server::io(&cfg.0, e))?;
        let state = Scratch(unique_path("wpp"));
        let pools = [Scratch(unique_path("pool")), Scratch(unique_path("pool"))];
        let systems = [
            (
                NATIVE,
                System::Memcached {
                    threads: plan.server_threads,
                    file: None,
                },
            ),
            (
                WPP,
                System::MemcachedWpp {
                    threads: plan.server_threads,
                    state: state.0.clone(),
                    bin: bin.to_path_buf(),
                },
            ),
            (
                "tx-undo",
                System::Ferrite {
                    store: "tx-undo".into(),
                    threads: plan.server_threads,
                    pool: pools[0].0.clone(),
                    bin: bin.to_path_buf(),
                    group_commit: plan.group_commit,
                },
            ),
            (
                "tx-redo",
                System::Ferrite {
                    store: "tx-redo".into(),
                    threads: plan.server_threads,
                    pool: pools[1].0.clone(),
                    bin: bin.to_path_buf(),
                    group_commit: plan.group_commit,
                },
            ),
        ];
        let mut servers = Vec::new();
        for (_, s) in &systems {
            servers.push(s.start()?);
        }
        let mut runs = vec![Vec::new(); systems.len()];
        for rep in 0..plan.reps {
            for (i, ((name, _), srv)) in systems.iter().zip(&servers).enumerate() {
                let r = server::slap(&plan, srv.addr, &cfg.0)?;
                ctx.note(format!(
                    "[wpp] memcached {} rep {}/{}: {name} {:.0} ops/s",
                    mix.name,
                    rep + 1,
                    plan.reps,
                    r.tps
                ));
                runs[i].push(r);
            }
        }
        drop(servers);
        let _ = std::fs::remove_dir_all(&state.0);
        let mut rows: Vec<Row> = systems
            .iter()
            .zip(&runs)
            .map(|((name, _), rs)| {
                let mut r = server::row(&plan, mix, name, rs);
                r.suite = SUITE.into();
                if let Some(p) = r.params.as_object_mut() {
                    p.insert("program".into(), json!("memcached"));
                }
                r.baseline = (*name != NATIVE).then(|| NATIVE.to_string());
                r
            })
            .collect();
        set_ratios(&mut rows);
        out.extend(rows);
    }
    Ok(out)
}

/// Compiles `wpp_micro.c` into a scratch file.
fn micro_program() -> Option<Scratch> {
    let src = Scratch(unique_path("c"));
    std::fs::write(&src.0, include_str!("wpp_micro.c")).ok()?;
    let exe = Scratch(unique_path("bin"));
    let ok = Command::new("cc")
        .args(["-O2", "-pthread", "-x", "c", "-o"])
        .arg(&exe.0)
        .arg(&src.0)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    ok.then_some(exe)
}

/// One run of the micro program: (op, ns) lines.
fn micro_once(
    bin: &Path,
    prog: &Path,
    wpp: bool,
    n: usize,
) -> Result<Vec<(String, f64)>, BenchError> {
    let state = Scratch(unique_path("wpp"));
    let out = if wpp {
        Command::new(bin)
            .arg("run")
            .arg("--state")
            .arg(&state.0)
            .arg("--")
            .arg(prog)
            .arg(n.to_string())
            .output()
    } else {
        Command::new(prog).arg(n.to_string()).output()
    }
    .map_err(|e| BenchError::Unsupported(format!("running the micro program: {e}")))?;
    let _ = std::fs::remove_dir_all(&state.0);
    if !out.status.success() {
        return Err(BenchError::Unsupported(format!(
            "micro program ({}) failed: {}",
            if wpp { "wpp" } else { "native" },
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (op, ns) = l.split_once(' ')?;
            Some((op.to_string(), ns.trim().parse().ok()?))
        })
        .collect())
}

fn micro_rows(ctx: &BenchCtx, bin: &Path, prog: &Path) -> Result<Vec<Row>, BenchError> {
    let n = ctx.scale.pick(50, 200);
    let reps = ctx.reps.max(1);
    let mut samples: Vec<(String, bool, Vec<f64>)> = Vec::new();
    for rep in 0..reps {
        for wpp in [false, true] {
            for (op, ns) in micro_once(bin, prog, wpp, n)? {
                match samples.iter_mut().find(|s| s.0 == op && s.1 == wpp) {
                    Some(s) => s.2.push(ns),
                    None => samples.push((op, wpp, vec![ns])),
                }
            }
        }
        ctx.note(format!("[wpp] micro rep {}/{reps}", rep + 1));
    }
    let mut rows = Vec::new();
    for (op, wpp, ns) in &samples {
        let mut r = Row::empty(
            SUITE,
            if *wpp { WPP } else { NATIVE },
            json!({"program": "micro", "op": op}),
        );
        r.threads = 1;
        r.reps = ns.len();
        r.ns_per_op = median(ns);
        r.ns_per_op_spread = spread(ns);
        r.ops_per_s = if r.ns_per_op > 0.0 {
            1e9 / r.ns_per_op
        } else {
            0.0
        };
        r.counters_observed = false;
        if *wpp {
            r.baseline = Some(NATIVE.into());
            let base = samples
                .iter()
                .find(|s| &s.0 == op && !s.1)
                .map(|s| median(&s.2));
            r.ratio_vs_baseline = base.filter(|b| *b > 0.0).map(|b| b / r.ns_per_op);
        }
        rows.push(r);
    }
    Ok(rows)
}

/// Holds `mib` MiB under WPP, fails it, and times the resume.
fn restart_once(lib: &Path, prog: &Path, mib: u64) -> Result<(Duration, u64), BenchError> {
    use ferrite_wpp::supervisor::{self, Options, Outcome};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let state = Scratch(unique_path("wpp"));
    let out = Scratch(unique_path("out"));
    let trigger = Arc::new(AtomicBool::new(false));
    let opts = Options {
        state: state.0.clone(),
        lib: lib.to_path_buf(),
        fail_after: None,
        trigger: Some(trigger.clone()),
        stdin: None,
        stdout: Some(out.0.clone()),
        env: vec![],
    };
    let err = |e: ferrite_wpp::WppError| BenchError::Unsupported(format!("restart benchmark: {e}"));
    let argv: Vec<std::ffi::OsString> = vec![prog.into(), "hold".into(), mib.to_string().into()];
    let o = opts.clone();
    let sup = std::thread::spawn(move || supervisor::start(&o, &argv));
    let t = Instant::now();
    while !std::fs::read_to_string(&out.0)
        .unwrap_or_default()
        .contains("ready")
    {
        if t.elapsed() > Duration::from_secs(120) || sup.is_finished() {
            trigger.store(true, Ordering::Release);
            return Err(BenchError::Unsupported(
                "the holding program did not get ready".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    trigger.store(true, Ordering::Release);
    match sup
        .join()
        .map_err(|_| BenchError::Unsupported("supervisor panicked".into()))?
    {
        Ok(Outcome::Failed(_)) => {}
        Ok(o) => return Err(BenchError::Unsupported(format!("no failure: {o:?}"))),
        Err(e) => return Err(err(e)),
    }
    let o = opts.clone();
    let sup = std::thread::spawn(move || supervisor::resume(&o));
    // The resume returns after the next failure: inject it once running.
    std::thread::sleep(Duration::from_millis(50));
    let t = Instant::now();
    loop {
        let (state_now, ..) = supervisor::status(&state.0).map_err(err)?;
        if state_now == ferrite_wpp::format::State::Running || t.elapsed() > Duration::from_secs(60)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    trigger.store(true, Ordering::Release);
    let (_, resumed) = sup
        .join()
        .map_err(|_| BenchError::Unsupported("supervisor panicked".into()))?
        .map_err(err)?;
    let _ = std::fs::remove_dir_all(&state.0);
    Ok((resumed.restart, resumed.bytes))
}

fn restart_rows(ctx: &BenchCtx, lib: &Path, prog: &Path) -> Result<Vec<Row>, BenchError> {
    let sizes: Vec<u64> = ctx.scale.pick(vec![64, 1024], vec![64, 256, 1024]);
    let reps = ctx.reps.max(1);
    let mut rows = Vec::new();
    for mib in sizes {
        let mut ms = Vec::new();
        let mut bytes = 0;
        for _ in 0..reps {
            let (d, b) = restart_once(lib, prog, mib)?;
            ms.push(d.as_secs_f64() * 1e3);
            bytes = b;
        }
        ctx.note(format!("[wpp] restart {mib} MiB: {:.1} ms", median(&ms)));
        let mut r = Row::empty(SUITE, WPP, json!({"program": "restart", "size_mib": mib}));
        r.threads = 1;
        r.reps = ms.len();
        r.ns_per_op = median(&ms) * 1e6;
        r.ns_per_op_spread = spread(&ms);
        r.ops_per_s = if r.ns_per_op > 0.0 {
            1e9 / r.ns_per_op
        } else {
            0.0
        };
        r.counters_observed = false;
        r.set_extra("restart_ms", median(&ms));
        r.set_extra("persistent_mib", bytes as f64 / (1u64 << 20) as f64);
        rows.push(r);
    }
    Ok(rows)
}
