//! `ferrite run`: a program under whole-process persistence (ferrite-wpp).

use ferrite_wpp::supervisor::{self, Options, Outcome};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// Exit status of `ferrite run` after an injected failure.
pub const FAILED_EXIT: u8 = 3;

#[derive(clap::Args)]
#[command(after_help = "\
The program's heap, stacks and static data live in files of DIR (mapped shared at the
addresses it uses); its address-space, thread and signal tables in a Ferrite pool there
(DIR/context.pool). A failure (--fail-after, or SIGUSR1 sent to `ferrite run`) stops every
thread at the instruction it was running, saves its registers on its own persistent stack,
records the open files and sockets, and kills the process: exit status 3, one line on
stderr saying what was saved and how many writable bytes were not persistent (the
coverage gap, always 0 unless something is wrong). `--resume` continues it: every thread
goes on from where it stopped; a SIGPWR handler, if the program has one, runs first.

Needs a dynamically linked x86-64 glibc program; address randomisation is turned off for
it. Not restored: connections (the program reads end-of-file on them), child processes,
timers, shared memory with other processes. A directory on /dev/shm survives a killed
process, not a power loss of this machine. docs/wpp.md says more.

Examples:
  ferrite run --state /dev/shm/counter -- ./counter out.txt
  ferrite run --state /dev/shm/counter --fail-after 150ms -- ./counter out.txt
  ferrite run --state /dev/shm/counter --resume
  ferrite run --state /dev/shm/mc --fail-after random -- memcached -p 11311 -t 2")]
pub struct RunArgs {
    /// State directory (created; a finished program's is reused).
    #[arg(long)]
    state: PathBuf,
    /// Continue the process saved in the state directory.
    #[arg(long)]
    resume: bool,
    /// Inject a failure after DURATION (250ms, 2s, 1.5s) or at a random
    /// moment in the first --fail-window.
    #[arg(long)]
    fail_after: Option<String>,
    /// Window for --fail-after random.
    #[arg(long, default_value = "1s")]
    fail_window: String,
    /// The runtime library (default: libferrite_wpp_rt.so beside this
    /// executable).
    #[arg(long)]
    lib: Option<PathBuf>,
    /// Print the outcome as one JSON line on stdout.
    #[arg(long)]
    json: bool,
    /// The program and its arguments (not with --resume).
    #[arg(last = true)]
    program: Vec<OsString>,
}

fn duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| c.is_ascii_alphabetic())
        .map(|i| s.split_at(i))
        .unwrap_or((s, "s"));
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad duration {s:?} (use 250ms, 2s, 1.5s)"))?;
    let mul = match unit {
        "ns" => 1e-9,
        "us" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        _ => return Err(format!("bad duration unit in {s:?} (ns, us, ms, s, min)")),
    };
    if !(v >= 0.0 && v.is_finite()) {
        return Err(format!("bad duration {s:?}"));
    }
    Ok(Duration::from_secs_f64(v * mul))
}

fn default_lib() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().map(|p| p.to_path_buf()).unwrap_or_default();
    ferrite_wpp::find_runtime(&dir).unwrap_or_else(|| dir.join(ferrite_wpp::RUNTIME_LIB))
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

pub fn run(a: RunArgs) -> Result<ExitCode, String> {
    let fail_after = match a.fail_after.as_deref() {
        None => None,
        Some("random") => {
            let w = duration(&a.fail_window)?;
            Some(w.mul_f64(rand::random::<f64>()))
        }
        Some(d) => Some(duration(d)?),
    };
    let trigger = Arc::new(AtomicBool::new(false));
    signal_hook_flag(&trigger)?;
    let opts = Options {
        state: a.state.clone(),
        lib: a.lib.unwrap_or_else(default_lib),
        fail_after,
        trigger: Some(trigger),
        stdin: None,
        stdout: None,
        env: vec![],
    };
    let (out, resumed) = if a.resume {
        if !a.program.is_empty() {
            return Err("--resume continues the saved command line; give no program".into());
        }
        let (o, r) = supervisor::resume(&opts).map_err(|e| e.to_string())?;
        (o, Some(r))
    } else {
        if a.program.is_empty() {
            return Err("no program to run (ferrite run --state DIR -- PROGRAM ARGS…)".into());
        }
        (
            supervisor::start(&opts, &a.program).map_err(|e| e.to_string())?,
            None,
        )
    };
    if let Some(r) = &resumed {
        eprintln!(
            "ferrite run: resumed in {:.1} ms ({} persistent){}",
            r.restart.as_secs_f64() * 1e3,
            mib(r.bytes),
            if r.report.is_empty() {
                String::new()
            } else {
                format!("; {}", r.report.join("; "))
            }
        );
    }
    match out {
        Outcome::Exited { code, signal } => {
            if a.json {
                println!(
                    "{}",
                    serde_json::json!({"outcome": "exited", "code": code, "signal": signal,
                        "restart_ms": resumed.as_ref().map(|r| r.restart.as_secs_f64() * 1e3)})
                );
            }
            match (code, signal) {
                (Some(c), _) => Ok(ExitCode::from(c.clamp(0, 255) as u8)),
                (None, Some(s)) => {
                    eprintln!("ferrite run: the program was killed by signal {s}");
                    Ok(ExitCode::from((128 + s).clamp(0, 255) as u8))
                }
                _ => Ok(ExitCode::FAILURE),
            }
        }
        Outcome::Failed(f) => {
            eprintln!(
                "ferrite run: failure after {:.1} ms: {} thread(s) stopped in {:.2} ms; {} persistent, {} B not (coverage gap), {} of runtime; {} fds saved; resume with --resume",
                f.after.as_secs_f64() * 1e3,
                f.threads,
                f.capture.as_secs_f64() * 1e3,
                mib(f.persistent_bytes),
                f.gap_bytes,
                mib(f.runtime_bytes),
                f.fds
            );
            if f.failure_handler {
                eprintln!(
                    "ferrite run: the program's SIGPWR handler will run first on resume{}",
                    if f.failure_handler_merged {
                        " (once for this failure and the one before: the last resume's run had not begun)"
                    } else {
                        ""
                    }
                );
            }
            for g in &f.gaps {
                eprintln!("ferrite run: not persistent: {g}");
            }
            if a.json {
                println!(
                    "{}",
                    serde_json::json!({"outcome": "failed", "failure": f,
                        "restart_ms": resumed.as_ref().map(|r| r.restart.as_secs_f64() * 1e3)})
                );
            }
            Ok(ExitCode::from(FAILED_EXIT))
        }
    }
}

/// SIGUSR1 to `ferrite run` injects a failure now.
fn signal_hook_flag(flag: &Arc<AtomicBool>) -> Result<(), String> {
    signal_hook::flag::register(libc::SIGUSR1, Arc::clone(flag))
        .map(|_| ())
        .map_err(|e| format!("installing the SIGUSR1 handler: {e}"))
}
