//! A program whose first run had PID 32767 resumes. In a test binary of
//! its own: it steers the kernel's next PID (`/proc/sys/kernel/ns_last_pid`),
//! which sends the PID cursor back to the bottom of the range, and the
//! campaigns of resume.rs must not run meanwhile — a captured process whose
//! old thread IDs the cursor hands out again comes back under new ones.

mod common;
use common::campaign::*;
use ferrite_wpp::supervisor::Outcome;
use rand::SeedableRng;
use std::time::Duration;

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
