//! Starting `ferrite serve` from the integration tests (serve, client,
//! fleet).

// Each test crate that includes this module uses only part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A started server: the child and the ready line it printed.
pub struct Started {
    pub child: Child,
    /// `ferrite serve: listening on ADDR (...)`.
    pub line: String,
    /// The address it listens on.
    pub addr: String,
}

/// Runs `ferrite serve ARGS` (stdout piped for the ready line, stderr as
/// given) and waits up to 60 s for its ready line. `Err` holds the child
/// and what it printed instead, when it exited without one.
pub fn spawn_serve(args: &[&str], stderr: Stdio) -> Result<Started, (Child, String)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .arg("serve")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("run ferrite serve");
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(l) => l,
        Err(_) => {
            let _ = child.kill();
            panic!("ferrite serve printed no ready line in 60 s");
        }
    };
    match line.split("listening on ").nth(1) {
        Some(rest) => {
            let addr = rest.split(' ').next().unwrap_or_default().to_string();
            Ok(Started { child, line, addr })
        }
        None => Err((child, line)),
    }
}
