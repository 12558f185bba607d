//! Programs failed at random moments and resumed, again and again, until
//! they finish: the output must equal an uninterrupted run's every time,
//! and no writable byte may be outside persistent memory at any failure.
//!
//! `FERRITE_WPP_FAILURES` sets the failures per program (default 200, the
//! issue's bar); `FERRITE_WPP_SEED` the random seed. The C programs are in
//! tests/programs and are built with the system C compiler.

mod common;
use common::runtime_lib;
use ferrite_wpp::supervisor::{self, Options, Outcome};
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn build(name: &str) -> PathBuf {
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
fn uninterrupted(prog: &Path, args: &[&std::ffi::OsStr]) -> String {
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

fn failures_wanted() -> usize {
    std::env::var("FERRITE_WPP_FAILURES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

fn state_dir(name: &str) -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    base.join(format!("ferrite-wpp-test-{}-{name}", std::process::id()))
}

/// Totals over every run of one program.
#[derive(Default, Debug)]
struct Tally {
    failures: usize,
    /// Failures that found the program's SIGPWR handler installed.
    with_handler: usize,
    runs: usize,
    max_gap: u64,
}

/// Runs `argv` to completion with failures at random moments in `window`
/// after each (re)start; returns its stdout and adds to `tally`.
fn run_to_completion(
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
fn first_run(
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
const MAX_FAILURES_PER_RUN: usize = 500;

/// Fails and resumes the program of `first_run` until it exits by itself;
/// returns its stdout.
fn resume_to_completion(
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

fn draw(w: &std::ops::Range<Duration>, rng: &mut impl Rng) -> Duration {
    w.start + (w.end - w.start).mul_f64(rng.random::<f64>())
}

fn seed() -> u64 {
    std::env::var("FERRITE_WPP_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20261127)
}

/// Fails and resumes `argv` until `failures_wanted()` failures have been
/// injected, checking every completed run's stdout with `check`.
fn campaign(
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

#[test]
fn counter_resumes_after_every_random_failure() {
    let prog = build("counter");
    let reference =
        std::env::temp_dir().join(format!("ferrite-wpp-{}-counter.ref", std::process::id()));
    let expect_out = uninterrupted(&prog, &[reference.as_os_str(), "6000".as_ref()]);
    let expect_file = std::fs::read(&reference).unwrap();
    let progress = std::env::temp_dir().join(format!(
        "ferrite-wpp-{}-counter.progress",
        std::process::id()
    ));
    let p = progress.clone();
    campaign(
        "counter",
        vec![
            prog.display().to_string(),
            progress.display().to_string(),
            "6000".into(),
        ],
        None,
        Duration::from_millis(80),
        move |out| {
            if out != expect_out {
                return Err(format!("stdout {out:?}, expected {expect_out:?}"));
            }
            if std::fs::read(&p).unwrap() != expect_file {
                return Err("progress file differs from an uninterrupted run's".into());
            }
            Ok(())
        },
    );
}

#[test]
fn threaded_hash_table_builder_resumes_after_every_random_failure() {
    let prog = build("hashbuild");
    let expect = uninterrupted(&prog, &["4".as_ref(), "15000".as_ref()]);
    campaign(
        "hashbuild",
        vec![prog.display().to_string(), "4".into(), "15000".into()],
        None,
        Duration::from_millis(60),
        move |out| {
            if out == expect {
                Ok(())
            } else {
                Err(format!("stdout {out:?}, expected {expect:?}"))
            }
        },
    );
}

#[test]
fn fase_counterexample_of_fig_4_1_resumes_after_every_random_failure() {
    let prog = build("fig41");
    let input = std::env::temp_dir().join(format!("ferrite-wpp-{}-fig41.in", std::process::id()));
    std::fs::write(&input, "42\n").unwrap();
    let p = prog.clone();
    campaign(
        "fig41",
        vec![prog.display().to_string()],
        Some(&input),
        Duration::from_millis(120),
        move |out| {
            // "x=" exactly once (the output already issued is never
            // repeated), then the final x the seed and the input determine.
            let lines: Vec<&str> = out.lines().collect();
            let [first, last] = lines[..] else {
                return Err(format!("expected two lines, got {out:?}"));
            };
            let (seed, x) = last
                .strip_prefix("seed=")
                .and_then(|r| r.split_once(" final x="))
                .ok_or(format!("bad last line {last:?}"))?;
            let v = std::process::Command::new(&p)
                .args(["--verify", seed, "42"])
                .output()
                .unwrap();
            let want = String::from_utf8(v.stdout).unwrap();
            if want.trim() != format!("x={x}") {
                return Err(format!(
                    "final x={x}, an uninterrupted computation gives {}",
                    want.trim()
                ));
            }
            if !first.starts_with("x=") {
                return Err(format!("first line {first:?}"));
            }
            Ok(())
        },
    );
}

/// The planted bug (anonymous memory left private, as a runtime that
/// missed those mappings would): the campaign must catch it.
#[test]
fn a_runtime_that_leaves_anonymous_memory_private_is_caught() {
    let prog = build("hashbuild");
    let e = planted_bug_is_caught(
        &[prog.display().to_string(), "4".into(), "15000".into()],
        "private-anon",
        seed(),
    );
    assert!(
        e.contains("not persistent") || e.contains("wrong output") || e.contains("exited"),
        "{e}"
    );
}

/// Runs `argv` with planted bug `plant` (`FERRITE_WPP_PLANT`), failed at
/// random moments, up to 20 times until a run goes wrong (an error, or
/// output other than an uninterrupted run's); returns what went wrong.
fn planted_bug_is_caught(argv: &[String], plant: &str, seed: u64) -> String {
    let args: Vec<&std::ffi::OsStr> = argv[1..].iter().map(|a| a.as_ref()).collect();
    let expect = uninterrupted(Path::new(&argv[0]), &args);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let env = [("FERRITE_WPP_PLANT".to_string(), plant.to_string())];
    let name = format!("plant-{plant}");
    let mut caught = None;
    for _ in 0..20 {
        let mut tally = Tally::default();
        let r = run_to_completion(
            argv,
            None,
            Duration::ZERO..Duration::from_millis(60),
            &mut rng,
            &mut tally,
            &name,
            &env,
        );
        match r {
            Err(e) => {
                caught = Some(e);
                break;
            }
            Ok(out) if out != expect => {
                caught = Some(format!("wrong output {out:?}"));
                break;
            }
            Ok(_) => {}
        }
    }
    let _ = std::fs::remove_dir_all(state_dir(&name));
    let _ = std::fs::remove_file(state_dir(&name).with_extension("out"));
    let e = caught.unwrap_or_else(|| panic!("planted bug {plant} went unnoticed in 20 runs"));
    eprintln!("planted bug {plant} caught: {e}");
    e
}

#[test]
fn debian_python_running_a_benchmark_resumes_after_every_random_failure() {
    let py = Path::new("/usr/bin/python3");
    if !py.is_file() {
        eprintln!("/usr/bin/python3 not installed: test skipped");
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/pybench.py");
    let expect = uninterrupted(py, &[script.as_os_str(), "4".as_ref()]);
    assert!(expect.starts_with("pybench 4 "), "{expect:?}");
    campaign(
        "python",
        vec![
            py.display().to_string(),
            script.display().to_string(),
            "4".into(),
        ],
        None,
        Duration::from_millis(80),
        move |out| {
            if out == expect {
                Ok(())
            } else {
                Err(format!("stdout {out:?}, expected {expect:?}"))
            }
        },
    );
}

/// The program's failure handler (SIGPWR) runs once per resume, before the
/// interrupted code goes on.
#[test]
fn a_programs_sigpwr_failure_handler_runs_once_per_resume() {
    let prog = build("pwr");
    let expect = uninterrupted(&prog, &["4000".as_ref()]);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed() ^ 0x5057);
    let mut total = 0;
    for _ in 0..10 {
        let mut tally = Tally::default();
        let out = run_to_completion(
            &[prog.display().to_string(), "4000".into()],
            None,
            Duration::ZERO..Duration::from_millis(40),
            &mut rng,
            &mut tally,
            "pwr",
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let want = "failure handler ran\n".repeat(tally.with_handler) + &expect;
        assert_eq!(
            out, want,
            "after {} failures ({} with the handler installed)",
            tally.failures, tally.with_handler
        );
        total += tally.with_handler;
    }
    assert!(total > 0, "no failure landed before the program ended");
    eprintln!("pwr: the failure handler ran once per resume ({total} resumes)");
}

#[test]
fn every_trapped_mapping_call_survives_random_failures() {
    let prog = build("remap");
    let expect = uninterrupted(&prog, &["300".as_ref()]);
    campaign(
        "remap",
        vec![prog.display().to_string(), "300".into()],
        None,
        Duration::from_millis(150),
        move |out| {
            if out == expect {
                Ok(())
            } else {
                Err(format!("stdout {out:?}, expected {expect:?}"))
            }
        },
    );
}

/// A program whose first run has PID 32767 resumes. `pid_max` defaults to
/// 32768, so every wrap of the PIDs meets 32767, and the resume tests wrap
/// them often. The runtime used to find glibc's thread-ID field by
/// scanning the thread descriptor for the TID, and at 32767 it took the
/// upper half of the `self` pointer (0x00007fff) for it: every resume then
/// wrote each thread's TID there, and the program crashed.
///
/// The next PID is steered through `/proc/sys/kernel/ns_last_pid` (root
/// only; the test says so and returns where it cannot write it). A process
/// forked elsewhere in between can take 32767, so it tries again, up to 50
/// times.
#[test]
fn a_program_whose_first_run_is_pid_32767_resumes() {
    const NEXT: &str = "/proc/sys/kernel/ns_last_pid";
    if std::fs::write(NEXT, "32766").is_err() {
        eprintln!("{NEXT} not writable (not root?): test skipped");
        return;
    }
    let prog = build("selfuse");
    let plain = uninterrupted(&prog, &["30000".as_ref()]);
    let expect = plain.split_once('\n').unwrap().1.to_string();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed() ^ 32767);
    let argv = [prog.display().to_string(), "30000".into()];
    let window = Duration::ZERO..Duration::from_millis(60);
    for attempt in 1..=50 {
        std::fs::write(NEXT, "32766").unwrap();
        let (opts, outcome) = first_run(&argv, None, &window, &mut rng, "pid32767", &[]).unwrap();
        let out = opts.stdout.clone().unwrap();
        let first = std::fs::read_to_string(&out).unwrap_or_default();
        if first != "pid 32767\n" || !matches!(outcome, Outcome::Failed(_)) {
            // Another process took the PID, or the failure came too late.
            let _ = std::fs::remove_dir_all(&opts.state);
            let _ = std::fs::remove_file(&out);
            continue;
        }
        let mut tally = Tally::default();
        let text = resume_to_completion(opts, outcome, &window, &mut rng, &mut tally, "pid32767")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            text,
            format!("pid 32767\n{expect}"),
            "after {} failures",
            tally.failures
        );
        eprintln!(
            "pid 32767 (attempt {attempt}): {} failures, resumed to the right output",
            tally.failures
        );
        return;
    }
    panic!("no first run got PID 32767 in 50 attempts");
}

/// Whether this process may ask for thread IDs (`clone3`'s `set_tid`):
/// root (strictly, `CAP_CHECKPOINT_RESTORE` or `CAP_SYS_ADMIN`).
fn may_choose_tids() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Mutexes whose owner glibc records by TID (recursive, error-checking),
/// held when failures land, are released by their holders after every
/// resume: the runtime gives each thread its old TID back. Root only
/// (otherwise threads come back under new TIDs, a documented limit).
#[test]
fn mutexes_held_at_a_failure_are_released_after_resume() {
    if !may_choose_tids() {
        eprintln!("not root: thread IDs cannot be chosen, test skipped");
        return;
    }
    let prog = build("owners");
    let expect = uninterrupted(&prog, &["20000".as_ref()]);
    campaign(
        "owners",
        vec![prog.display().to_string(), "20000".into()],
        None,
        Duration::from_millis(60),
        move |out| {
            if out == expect {
                Ok(())
            } else {
                Err(format!("stdout {out:?}, expected {expect:?}"))
            }
        },
    );
}

/// The planted bug (`FERRITE_WPP_PLANT=new-tids`: threads re-created under
/// new TIDs, as before): the mutex-owner program must catch it.
#[test]
fn a_resume_under_new_thread_ids_is_caught() {
    if !may_choose_tids() {
        eprintln!("not root: thread IDs cannot be chosen, test skipped");
        return;
    }
    let prog = build("owners");
    let e = planted_bug_is_caught(
        &[prog.display().to_string(), "20000".into()],
        "new-tids",
        seed() ^ 0x7d,
    );
    assert!(
        e.contains("exited with Some(3)") || e.contains("failures"),
        "{e}"
    );
}
