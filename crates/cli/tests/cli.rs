//! The `ferrite` command end to end: exit codes and one-line errors.

use std::process::{Command, Output};

fn ferrite(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .output()
        .expect("run ferrite")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn closing_counts(out: &str, target: &str) -> (usize, usize) {
    let line = out.lines().last().expect("output");
    let prefix = format!("checked {target}: ");
    let rest = line
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("closing line: {line}"));
    let (s, v) = rest.split_once(" crash states, ").unwrap();
    (
        s.parse().unwrap(),
        v.trim_end_matches(" violations").parse().unwrap(),
    )
}

#[test]
fn check_selftest_passes_and_broken_is_caught() {
    let o = ferrite(&["check", "selftest", "--budget", "400"]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let (states, violations) = closing_counts(&stdout(&o), "selftest");
    assert!(states >= 300, "{states}");
    assert_eq!(violations, 0);

    let o = ferrite(&["check", "selftest-broken", "--budget", "400"]);
    assert_eq!(o.status.code(), Some(1));
    let (_, violations) = closing_counts(&stdout(&o), "selftest-broken");
    assert!(violations > 0);
    // The printed reproducer replays a violation on its own.
    let out = stdout(&o);
    let repro = out
        .split("--at ")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap()
        .to_string();
    let o = ferrite(&["check", "selftest-broken", "--at", &repro]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
}

#[test]
fn every_log_target_passes_a_small_budget() {
    for t in ["log-classic", "log-header", "log-rawl", "log-poplog"] {
        let o = ferrite(&["check", t, "--budget", "300"]);
        assert!(o.status.success(), "{t}: {}{}", stdout(&o), stderr(&o));
        let (states, violations) = closing_counts(&stdout(&o), t);
        assert!(states >= 250, "{t}: {states} states");
        assert_eq!(violations, 0);
    }
}

#[test]
fn unknown_target_is_one_line_and_nonzero() {
    let o = ferrite(&["check", "no-such-target"]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.starts_with("ferrite: unknown check target"));
}

#[test]
fn pool_create_info_check_and_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.pool");
    let ps = p.to_str().unwrap();
    let o = ferrite(&[
        "pool", "create", ps, "--size", "1M", "--layout", "demo", "--domain", "msync",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = ferrite(&["pool", "info", ps, "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["layout"], "demo");
    assert_eq!(v["size"], 1 << 20);
    assert!(
        ferrite(&["pool", "check", ps, "--layout", "demo"])
            .status
            .success()
    );
    let o = ferrite(&["pool", "check", ps, "--layout", "other"]);
    assert_eq!(o.status.code(), Some(1));

    // Flip a checksummed byte: one clear line, exit 1, no panic.
    let mut b = std::fs::read(&p).unwrap();
    b[60] ^= 1;
    std::fs::write(&p, &b).unwrap();
    for cmd in ["info", "check"] {
        let o = ferrite(&["pool", cmd, ps]);
        assert_eq!(o.status.code(), Some(1));
        let e = stderr(&o);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains("checksum"), "{e}");
    }
    // Truncate: still one line.
    std::fs::write(&p, &b[..100]).unwrap();
    let o = ferrite(&["pool", "check", ps]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("truncated"), "{}", stderr(&o));
    // Not a pool at all, and a missing file.
    std::fs::write(&p, b"hello").unwrap();
    assert!(stderr(&ferrite(&["pool", "info", ps])).contains("not a Ferrite pool"));
    assert!(stderr(&ferrite(&["pool", "info", "/nonexistent/x"])).contains("no such pool file"));
    // Bad size argument.
    assert!(
        !ferrite(&["pool", "create", ps, "--size", "12Q"])
            .status
            .success()
    );
}
