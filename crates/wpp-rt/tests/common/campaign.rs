//! The failure campaigns the resume tests share: build a test program, run
//! it plainly for the expected output, then fail it at random moments and
//! resume it until it finishes. (Each test binary uses part of this.)
#![allow(dead_code)]

use super::runtime_lib;
use ferrite_wpp::supervisor::{self, Options, Outcome};
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Builds `tests/programs/NAME.c` with the system C compiler into the temp
/// directory (named after this test process); returns the binary.
pub fn build(name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c"));
    let out = std::env::temp_dir().join(format!("ferrite-wpp-{}-{name}", std::process::id()));
    let st = std::process::Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("running cc");
    assert!(st.success(), "cc {}", src.display());
    out
}

/// What `prog args` prints on stdout when nothing interrupts it (it must
/// succeed).
pub fn uninterrupted(prog: &Path, args: &[&std::ffi::OsStr]) -> String {
    let out = std::process::Command::new(prog)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", prog.display()));
    assert!(
        out.status.success(),
        "{} exits {:?}",
        prog.display(),
        out.status
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Failures per campaign: `FERRITE_WPP_FAILURES`, default 200.
pub fn failures_wanted() -> usize {
    std::env::var("FERRITE_WPP_FAILURES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

/// The state directory of campaign `name` (on /dev/shm where there is one).
pub fn state_dir(name: &str) -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    base.join(format!("ferrite-wpp-test-{}-{name}", std::process::id()))
}

/// Totals over every run of one program.
#[derive(Default, Debug)]
pub struct Tally {
    pub failures: usize,
    /// Failures that found the program's SIGPWR handler installed.
    pub with_handler: usize,
    /// Of those, failures that found the last resume's SIGPWR still
    /// pending (its run merges with the next resume's).
    pub merged: usize,
    pub runs: usize,
    pub max_gap: u64,
}

/// Runs `argv` to completion with failures at random moments in `window`
/// after each (re)start; returns its stdout and adds to `tally`.
pub fn run_to_completion(
    argv: &[String],
    stdin: Option<&Path>,
    window: std::ops::Range<Duration>,
    rng: &mut impl Rng,
    tally: &mut Tally,
    name: &str,
    env: &[(String, String)],
) -> Result<String, String> {
    let (opts, outcome) = first_run(argv, stdin, &window, rng, name, env)?;
    resume_to_completion(opts, outcome, &window, rng, tally, name)
}

/// The first run of `argv`, failed at a random moment in `window`.
pub fn first_run(
    argv: &[String],
    stdin: Option<&Path>,
    window: &std::ops::Range<Duration>,
    rng: &mut impl Rng,
    name: &str,
    env: &[(String, String)],
) -> Result<(Options, Outcome), String> {
    let dir = state_dir(name);
    let _ = std::fs::remove_dir_all(&dir);
    let opts = Options {
        state: dir.clone(),
        lib: runtime_lib(),
        fail_after: Some(draw(window, rng)),
        trigger: None,
        stdin: stdin.map(Path::to_path_buf),
        stdout: Some(dir.with_extension("out")),
        env: env.to_vec(),
    };
    let args: Vec<std::ffi::OsString> = argv.iter().map(Into::into).collect();
    let outcome = supervisor::start(&opts, &args).map_err(|e| e.to_string())?;
    Ok((opts, outcome))
}

/// A run's failures are bounded: a resumed program that stops making
/// progress (it spins, or waits for something that never comes) fails the
/// test instead of failing and resuming until CI's time runs out. The
/// campaigns' programs need 1 to 8 failures a run on average (python's
/// 206 failures over 27 runs is the most), so 500 is far from any.
pub const MAX_FAILURES_PER_RUN: usize = 500;

/// Fails and resumes the program of `first_run` until it exits by itself;
/// returns its stdout.
pub fn resume_to_completion(
    mut opts: Options,
    mut outcome: Outcome,
    window: &std::ops::Range<Duration>,
    rng: &mut impl Rng,
    tally: &mut Tally,
    name: &str,
) -> Result<String, String> {
    let mut failures = 0;
    loop {
        match outcome {
            Outcome::Exited { code, signal } => {
                tally.runs += 1;
                if code != Some(0) {
                    return Err(format!(
                        "{name}: exited with {code:?} (signal {signal:?}) after {} failures",
                        tally.failures
                    ));
                }
                break;
            }
            Outcome::Failed(f) => {
                tally.failures += 1;
                tally.with_handler += f.failure_handler as usize;
                tally.merged += f.failure_handler_merged as usize;
                tally.max_gap = tally.max_gap.max(f.gap_bytes);
                if f.gap_bytes != 0 {
                    return Err(format!(
                        "{name}: {} writable bytes not persistent: {:?}",
                        f.gap_bytes, f.gaps
                    ));
                }
                failures += 1;
                if failures > MAX_FAILURES_PER_RUN {
                    return Err(format!(
                        "{name}: still running after {failures} failures (no progress?)"
                    ));
                }
            }
        }
        opts.fail_after = Some(draw(window, rng));
        outcome = supervisor::resume(&opts)
            .map_err(|e| format!("{name}: resume: {e}"))?
            .0;
    }
    let out = opts.stdout.as_deref().expect("first_run sets stdout");
    let text = std::fs::read_to_string(out).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&opts.state);
    let _ = std::fs::remove_file(out);
    Ok(text)
}

pub fn draw(w: &std::ops::Range<Duration>, rng: &mut impl Rng) -> Duration {
    w.start + (w.end - w.start).mul_f64(rng.random::<f64>())
}

pub fn seed() -> u64 {
    std::env::var("FERRITE_WPP_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20261127)
}

/// Fails and resumes `argv` until `failures_wanted()` failures have been
/// injected, checking every completed run's stdout with `check`.
pub fn campaign(
    name: &str,
    argv: Vec<String>,
    stdin: Option<&Path>,
    window: Duration,
    check: impl Fn(&str) -> Result<(), String>,
) -> Tally {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed() ^ name.len() as u64);
    let mut tally = Tally::default();
    while tally.failures < failures_wanted() {
        let out = run_to_completion(
            &argv,
            stdin,
            Duration::ZERO..window,
            &mut rng,
            &mut tally,
            name,
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        check(&out).unwrap_or_else(|e| panic!("{name} after {} failures: {e}", tally.failures));
    }
    eprintln!(
        "{name}: {} failures over {} runs, every run resumed to the right output; coverage gap 0",
        tally.failures, tally.runs
    );
    tally
}

/// [`campaign`] for a program every run of which must print what an
/// uninterrupted run prints.
pub fn campaign_same_output(name: &str, argv: Vec<String>, window: Duration) -> Tally {
    let expect = uninterrupted_argv(&argv);
    campaign(name, argv, None, window, move |out| {
        if out == expect {
            Ok(())
        } else {
            Err(format!("stdout {out:?}, expected {expect:?}"))
        }
    })
}

/// [`uninterrupted`] of a command line (program first).
pub fn uninterrupted_argv(argv: &[String]) -> String {
    let args: Vec<&std::ffi::OsStr> = argv[1..].iter().map(|a| a.as_ref()).collect();
    uninterrupted(Path::new(&argv[0]), &args)
}
