//! Programs failed at random moments and resumed, again and again, until
//! they finish: the output must equal an uninterrupted run's every time,
//! and no writable byte may be outside persistent memory at any failure.
//!
//! `FERRITE_WPP_FAILURES` sets the failures per program (default 200, the
//! issue's bar); `FERRITE_WPP_SEED` the random seed. The C programs are in
//! tests/programs and are built with the system C compiler.

mod common;
use common::campaign::*;
use rand::SeedableRng;
use std::path::Path;
use std::time::Duration;

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
    campaign_same_output(
        "hashbuild",
        vec![prog.display().to_string(), "4".into(), "15000".into()],
        Duration::from_millis(60),
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
    let expect = uninterrupted_argv(argv);
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
/// interrupted code goes on — except that a resume whose run had not begun
/// when the next failure came (the program was still inside the previous
/// run, SIGPWR blocked) shares one run with the next resume: a standard
/// signal does not queue twice. The supervisor reports each such merge
/// from the kernel's pending set, and the count must match exactly.
#[test]
fn a_programs_sigpwr_failure_handler_runs_once_per_resume() {
    let prog = build("pwr");
    let expect = uninterrupted(&prog, &["4000".as_ref()]);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed() ^ 0x5057);
    let (mut total, mut merged) = (0, 0);
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
        // One line per resume, less the runs that merged: a failure that
        // found the last resume's SIGPWR still pending (the kernel's
        // pending set, read at the failure) shares its run with the next.
        let runs = tally.with_handler - tally.merged;
        let want = "failure handler ran\n".repeat(runs) + &expect;
        assert_eq!(
            out, want,
            "after {} failures ({} with the handler installed, {} merged)",
            tally.failures, tally.with_handler, tally.merged
        );
        total += tally.with_handler;
        merged += tally.merged;
    }
    assert!(total > 0, "no failure landed before the program ended");
    eprintln!(
        "pwr: the failure handler ran once per resume ({total} resumes, {merged} merged with the next)"
    );
}

#[test]
fn every_trapped_mapping_call_survives_random_failures() {
    let prog = build("remap");
    campaign_same_output(
        "remap",
        vec![prog.display().to_string(), "300".into()],
        Duration::from_millis(150),
    );
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
    campaign_same_output(
        "owners",
        vec![prog.display().to_string(), "20000".into()],
        Duration::from_millis(60),
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
