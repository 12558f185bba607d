//! `ferrite trace`: records a persist trace of a bench suite or a check
//! target (ferrite-pmem's feature `trace`), or verifies and summarises a
//! trace file. The format is ferrite-pmem's `trace` module's.

use clap::Args;
use ferrite_pmem::trace::{EventKind, Trace};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct TraceArgs {
    /// Where to write the trace.
    #[arg(long, default_value = "ferrite.trace", conflicts_with = "show")]
    out: PathBuf,
    /// Keep at most this many events (the rest are dropped and the file's
    /// header says so).
    #[arg(long, default_value_t = 1_000_000)]
    max_events: u64,
    /// Verify a trace file and print what it holds, instead of recording.
    #[arg(long, value_name = "FILE")]
    show: Option<PathBuf>,
    /// The command to trace, after `--`: `bench SUITE …` or `check TARGET …`.
    #[arg(last = true)]
    command: Vec<String>,
}

/// One line per thread and a total: events by kind.
fn summary(t: &Trace) -> String {
    let kinds = [
        EventKind::Load,
        EventKind::Store,
        EventKind::Flush,
        EventKind::NtStore,
        EventKind::Fence,
        EventKind::Commit,
    ];
    let line = |count: &dyn Fn(EventKind) -> usize| {
        kinds
            .iter()
            .map(|&k| format!("{} {}", count(k), k.name()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = format!(
        "{} threads, {} events{}: {}\n",
        t.threads.len(),
        t.events(),
        if t.truncated { " (truncated)" } else { "" },
        line(&|k| t.count(k))
    );
    for (i, th) in t.threads.iter().enumerate() {
        out.push_str(&format!("  thread {i}: {}\n", line(&|k| th.count(k))));
    }
    out
}

/// Runs `ferrite trace`; `inner` runs the traced command line.
pub fn run(
    a: TraceArgs,
    inner: impl FnOnce(Vec<String>) -> Result<ExitCode, String>,
) -> Result<ExitCode, String> {
    if let Some(path) = a.show {
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let t = Trace::from_bytes(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        print!("{}: {}", path.display(), summary(&t));
        return Ok(ExitCode::SUCCESS);
    }
    if a.command.is_empty() {
        return Err("nothing to trace: give `-- bench SUITE` or `-- check TARGET`".into());
    }
    record(a, inner)
}

#[cfg(feature = "trace")]
fn record(
    a: TraceArgs,
    inner: impl FnOnce(Vec<String>) -> Result<ExitCode, String>,
) -> Result<ExitCode, String> {
    use ferrite_pmem::trace;
    trace::start_with_limit(a.max_events);
    let res = inner(a.command);
    let t = trace::stop();
    let code = res?;
    std::fs::write(&a.out, t.to_bytes()).map_err(|e| format!("{}: {e}", a.out.display()))?;
    eprint!("wrote {}: {}", a.out.display(), summary(&t));
    Ok(code)
}

#[cfg(not(feature = "trace"))]
fn record(
    _a: TraceArgs,
    _inner: impl FnOnce(Vec<String>) -> Result<ExitCode, String>,
) -> Result<ExitCode, String> {
    Err("this ferrite was built without the feature `trace` (cargo build --features trace)".into())
}
