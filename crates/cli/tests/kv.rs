//! `ferrite kv` end to end: every engine through the shell, typed errors
//! as one line, and nothing acknowledged lost to `kill -9`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn ferrite(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .output()
        .expect("run ferrite")
}

fn kv(path: &Path, args: &[&str]) -> Output {
    let mut a = vec!["kv", path.to_str().unwrap()];
    a.extend_from_slice(args);
    ferrite(&a)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn every_engine_gets_puts_deletes_batches_and_scans_from_the_shell() {
    let dir = tempfile::tempdir().unwrap();
    for engine in ["inp", "cow", "lsm"] {
        let p = dir.path().join(format!("{engine}.pool"));
        let o = kv(&p, &["create", "--engine", engine, "--size", "16M"]);
        assert!(o.status.success(), "{engine}: {}", text(&o.stderr));
        assert!(kv(&p, &["put", "b", "2"]).status.success());
        assert!(kv(&p, &["put", "a", "1"]).status.success());
        assert!(kv(&p, &["batch", "c=3", "d=4", "-b"]).status.success());
        let o = kv(&p, &["get", "a"]);
        assert_eq!(text(&o.stdout), "1\n", "{engine}");
        let o = kv(&p, &["get", "b"]);
        assert_eq!(o.status.code(), Some(1), "{engine}: deleted key found");
        let o = kv(&p, &["scan"]);
        assert_eq!(text(&o.stdout), "a\t1\nc\t3\nd\t4\n", "{engine}");
        let o = kv(&p, &["scan", "b", "--limit", "1"]);
        assert_eq!(text(&o.stdout), "c\t3\n", "{engine}");
        assert!(kv(&p, &["del", "a"]).status.success());
        assert_eq!(kv(&p, &["del", "a"]).status.code(), Some(1));
        let o = kv(&p, &["--hex", "put", "00ff", "beef"]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let o = kv(&p, &["--hex", "get", "00ff"]);
        assert_eq!(text(&o.stdout), "beef\n");
        let o = kv(&p, &["info"]);
        assert!(
            text(&o.stdout).contains(&format!("engine:     {engine}")),
            "{}",
            text(&o.stdout)
        );
    }
}

#[test]
fn bad_input_is_one_line_and_a_non_zero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.pool");
    // No store yet.
    let o = kv(&p, &["get", "a"]);
    assert!(!o.status.success());
    assert_eq!(text(&o.stderr).lines().count(), 1, "{}", text(&o.stderr));
    assert!(kv(&p, &["create", "--size", "16M"]).status.success());
    // Exists already.
    assert!(!kv(&p, &["create"]).status.success());
    // Oversize key: refused, store unchanged.
    let long = "k".repeat(1025);
    let o = kv(&p, &["put", &long, "v"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("keys are 1 to 1024 bytes"),
        "{}",
        text(&o.stderr)
    );
    let o = kv(&p, &["scan"]);
    assert_eq!(text(&o.stdout), "");
    let o = kv(&p, &["--hex", "put", "zz", "00"]);
    assert!(!o.status.success());
    let o = kv(&p, &["batch", "nonsense"]);
    assert!(!o.status.success());
    // Not a store: a plain pool of another layout.
    let q = dir.path().join("plain.pool");
    assert!(
        ferrite(&["pool", "create", q.to_str().unwrap(), "--size", "1M"])
            .status
            .success()
    );
    let o = kv(&q, &["get", "a"]);
    assert!(!o.status.success());
    assert_eq!(text(&o.stderr).lines().count(), 1, "{}", text(&o.stderr));
}

/// A writer printing each key once its put returned is killed with
/// SIGKILL mid-run; reopening finds every printed key (and recovery
/// handles whatever put was in flight).
#[test]
fn nothing_acknowledged_is_lost_to_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    for engine in ["inp", "cow", "lsm"] {
        let p = dir.path().join(format!("{engine}.pool"));
        assert!(
            kv(&p, &["create", "--engine", engine, "--size", "64M"])
                .status
                .success()
        );
        let mut child = Command::new(env!("CARGO_BIN_EXE_ferrite"))
            .args(["kv", p.to_str().unwrap(), "fill", "--count", "100000000"])
            .args(["--value-bytes", "300"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut acked = Vec::new();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        while acked.len() < 3000 {
            acked.push(lines.next().unwrap().unwrap());
        }
        child.kill().unwrap();
        child.wait().unwrap();
        // The pipe may hold more acknowledged keys.
        for l in lines {
            match l {
                Ok(l) => acked.push(l),
                Err(_) => break,
            }
        }
        for key in acked.iter().step_by(97).chain(acked.last()) {
            let o = kv(&p, &["get", key]);
            assert!(
                o.status.success(),
                "{engine}: {key} lost: {}",
                text(&o.stderr)
            );
            assert_eq!(text(&o.stdout).trim_end().len(), 300);
        }
        let o = kv(&p, &["info"]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let keys: usize = text(&o.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("keys:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap();
        // Every acknowledged key, plus at most the one in flight.
        assert!(
            keys == acked.len() || keys == acked.len() + 1,
            "{engine}: {keys} keys, {} acked",
            acked.len()
        );
    }
}
