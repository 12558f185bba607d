//! Operating a live store (issue 31): `ferrite pool backup` of every store
//! while a server writes to it, raw `cp` copies of a live pool, and deep
//! checks beside a loaded server.
//!
//! Sizes: a few copies and checks per store here (CI); the issue's targets
//! (100 of each per store) with
//!
//! ```text
//! FERRITE_LIVE_COPIES=100 FERRITE_LIVE_CHECKS=100 FERRITE_LIVE_RAW=100 \
//!   cargo test --release -p ferrite --test live -- --nocapture --test-threads 1
//! ```
//!
//! Every test prints its counts (`--nocapture` shows them).

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const STORES: &[&str] = &[
    "engine-inp",
    "engine-cow",
    "engine-lsm",
    "tx-undo",
    "tx-redo",
    "tx-clobber",
    "ptm-lazy",
    "ptm-eager",
];

fn count(var: &str, ci: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ci)
}

fn ferrite(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .output()
        .expect("run ferrite")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start(pool: &Path, store: Option<&str>) -> Result<Server, String> {
        let mut args = vec![
            "--pool",
            pool.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--memory",
            "32M",
            "--threads",
            "2",
        ];
        if let Some(s) = store {
            args.extend(["--store", s]);
        }
        match common::spawn_serve(&args, Stdio::piped()) {
            Ok(s) => Ok(Server {
                child: s.child,
                addr: s.addr,
            }),
            Err((mut child, line)) => {
                let mut err = String::new();
                child.stderr.take().unwrap().read_to_string(&mut err).ok();
                let st = child.wait().unwrap();
                Err(format!("{line}{err}(exit {:?})", st.code()))
            }
        }
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

struct Conn {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Conn {
    fn new(addr: &str) -> Conn {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.set_nodelay(true).unwrap();
        Conn {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        l
    }

    fn set(&mut self, key: &str, v: &[u8]) -> bool {
        let mut req = format!("set {key} 0 0 {}\r\n", v.len()).into_bytes();
        req.extend_from_slice(v);
        req.extend_from_slice(b"\r\n");
        self.w.write_all(&req).unwrap();
        self.line() == "STORED\r\n"
    }

    /// The value of `key`; `Err` with the server's line when it refuses
    /// the item (`SERVER_ERROR`: a damaged item fails its checksum).
    fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>, String> {
        self.w
            .write_all(format!("get {key}\r\n").as_bytes())
            .unwrap();
        let head = self.line();
        if head == "END\r\n" {
            return Ok(None);
        }
        if head.starts_with("SERVER_ERROR") {
            return Err(head.trim_end().to_string());
        }
        let len: usize = head
            .trim_end()
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("bad get reply {head:?}"));
        let mut v = vec![0u8; len + 2];
        self.r.read_exact(&mut v).unwrap();
        v.truncate(len);
        assert_eq!(self.line(), "END\r\n");
        Ok(Some(v))
    }
}

/// The value of `key` at write `seq`: says both, so any value read back
/// tells which write it is and whether it is whole.
fn value_for(key: &str, seq: u64) -> Vec<u8> {
    let unit = format!("{key}/{seq}/");
    let len = 20 + (seq as usize * 37) % 300;
    unit.bytes().cycle().take(len).collect()
}

/// Parses a value back: the seq, if it is exactly `value_for(key, seq)`.
fn seq_of(key: &str, v: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(v).ok()?;
    let rest = s.strip_prefix(key)?.strip_prefix('/')?;
    let seq: u64 = rest.split('/').next()?.parse().ok()?;
    (value_for(key, seq) == v).then_some(seq)
}

const KEYS: u64 = 150;

/// Writers: each thread sets its keys over and over with rising seqs;
/// `acked` holds each key's last acknowledged seq.
struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<HashMap<String, u64>>>,
    threads: Vec<std::thread::JoinHandle<u64>>,
}

impl Load {
    fn start(addr: &str, writers: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(HashMap::new()));
        let threads = (0..writers)
            .map(|t| {
                let (stop, acked, addr) = (stop.clone(), acked.clone(), addr.to_string());
                std::thread::spawn(move || {
                    let mut c = Conn::new(&addr);
                    let mut seq = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        seq += 1;
                        let key = format!("w{t}-{}", seq % KEYS);
                        if c.set(&key, &value_for(&key, seq)) {
                            acked.lock().unwrap().insert(key, seq);
                        }
                    }
                    seq
                })
            })
            .collect();
        // Let the writers get going.
        while acked.lock().unwrap().len() < 20 {
            std::thread::sleep(Duration::from_millis(5));
        }
        Load {
            stop,
            acked,
            threads,
        }
    }

    fn acked(&self) -> HashMap<String, u64> {
        self.acked.lock().unwrap().clone()
    }

    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.threads.into_iter().map(|t| t.join().unwrap()).sum()
    }
}

/// Serves the pool at `copy` and reads every key: each value must be a
/// whole write of its key, at least as new as the write acknowledged
/// before the copy began (`before`), at most as new as the last write
/// sent after it ended (`after` + 1: one in flight per key). Returns the
/// problems found.
fn validate(
    copy: &Path,
    before: &HashMap<String, u64>,
    after: &HashMap<String, u64>,
) -> Vec<String> {
    let srv = match Server::start(copy, None) {
        Ok(s) => s,
        Err(e) => return vec![format!("does not serve: {e}")],
    };
    let mut c = Conn::new(&srv.addr);
    let mut bad = Vec::new();
    for (key, &last) in after {
        let got = c.get(key);
        let min = before.get(key).copied();
        match (got, min) {
            (Err(e), _) => bad.push(format!("{key}: refused by the server: {e}")),
            (Ok(None), Some(m)) => bad.push(format!("{key}: lost (seq {m} was acknowledged)")),
            (Ok(None), None) => {}
            (Ok(Some(v)), _) => match seq_of(key, &v) {
                None => bad.push(format!("{key}: torn or foreign value {:?}", text(&v))),
                Some(s) if min.is_some_and(|m| s < m) => {
                    bad.push(format!("{key}: seq {s} older than acknowledged {min:?}"))
                }
                // The writers' seqs step by the thread's key count.
                Some(s) if s > last + KEYS => bad.push(format!("{key}: seq {s} never written")),
                Some(_) => {}
            },
        }
    }
    srv.stop();
    bad
}

fn pool_dir() -> tempfile::TempDir {
    // Pools on /dev/shm when there is one (fast), else the temp dir.
    let base = PathBuf::from("/dev/shm");
    if base.is_dir() {
        tempfile::tempdir_in(base).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

#[test]
fn backups_of_every_store_under_write_load_are_consistent() {
    let copies = count("FERRITE_LIVE_COPIES", 2);
    let mut total = (0usize, 0usize);
    for store in STORES {
        let dir = pool_dir();
        let pool = dir.path().join("live.pool");
        let srv = Server::start(&pool, Some(store)).unwrap();
        let load = Load::start(&srv.addr, 2);
        let mut good = 0;
        for i in 0..copies {
            let b = dir.path().join(format!("b{i}.pool"));
            let before = load.acked();
            let o = ferrite(&[
                "pool",
                "backup",
                pool.to_str().unwrap(),
                b.to_str().unwrap(),
            ]);
            let after = load.acked();
            assert_eq!(
                o.status.code(),
                Some(0),
                "{store} copy {i}: {}{}",
                text(&o.stdout),
                text(&o.stderr)
            );
            assert!(text(&o.stdout).contains("paused"), "{}", text(&o.stdout));
            let d = ferrite(&["pool", "check", b.to_str().unwrap(), "--deep"]);
            assert_eq!(
                d.status.code(),
                Some(0),
                "{store} copy {i}: {}",
                text(&d.stdout)
            );
            let bad = validate(&b, &before, &after);
            assert!(bad.is_empty(), "{store} copy {i}: {bad:?}");
            good += 1;
            std::fs::remove_file(&b).unwrap();
        }
        let writes = load.finish();
        srv.stop();
        println!("{store}: {good} of {copies} live backups consistent ({writes} writes during)");
        total.0 += good;
        total.1 += copies;
    }
    println!(
        "pool backup under load: {} of {} consistent",
        total.0, total.1
    );
}

/// The validator is not blind: a copy with one value overwritten (through
/// `ferrite kv`, as a torn copy would hold it) is caught.
#[test]
fn the_backup_validator_catches_a_planted_wrong_value() {
    let dir = pool_dir();
    let pool = dir.path().join("live.pool");
    let srv = Server::start(&pool, Some("engine-inp")).unwrap();
    let load = Load::start(&srv.addr, 2);
    let b = dir.path().join("b.pool");
    let before = load.acked();
    let o = ferrite(&[
        "pool",
        "backup",
        pool.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let after = load.acked();
    load.finish();
    srv.stop();
    assert!(validate(&b, &before, &after).is_empty());
    // Plant: a key's item replaced by one holding another key's bytes
    // (a whole item copied). Its checksum covers its own key, so the
    // server refuses it (`SERVER_ERROR`) rather than serve the other
    // key's value: the validator reports that key, and only it.
    let (k1, k2) = {
        let mut ks: Vec<&String> = before.keys().collect();
        ks.sort();
        (ks[0].clone(), ks[1].clone())
    };
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let bs = b.to_str().unwrap();
    // The server's map key is `k` + the client's key.
    let mk = |k: &str| hex(format!("k{k}").as_bytes());
    let o = ferrite(&["kv", bs, "--hex", "get", &mk(&k2)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let item = text(&o.stdout).trim().to_string();
    let o = ferrite(&["kv", bs, "--hex", "put", &mk(&k1), &item]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let bad = validate(&b, &before, &after);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].starts_with(&format!(
            "{k1}: refused by the server: SERVER_ERROR damaged item"
        )),
        "{bad:?}"
    );
}

#[test]
fn raw_copies_of_a_live_pool_are_refused_never_served() {
    let raws = count("FERRITE_LIVE_RAW", 2);
    let (mut refused, mut total, mut torn) = (0usize, 0usize, 0usize);
    for store in STORES {
        let dir = pool_dir();
        let pool = dir.path().join("live.pool");
        let srv = Server::start(&pool, Some(store)).unwrap();
        let load = Load::start(&srv.addr, 2);
        let mut store_refused = 0;
        let mut store_torn = 0;
        for i in 0..raws {
            let raw = dir.path().join(format!("raw{i}.pool"));
            std::fs::copy(&pool, &raw).unwrap(); // what `cp` does
            let rs = raw.to_str().unwrap();
            total += 1;
            // serve refuses it, in one line, exit 2.
            match Server::start(&raw, None) {
                Ok(s) => {
                    s.stop();
                    panic!("{store}: serve opened a raw copy of a live pool");
                }
                Err(e) => {
                    assert!(e.contains("copy of a pool that was open"), "{store}: {e}");
                    assert!(e.contains("exit Some(2)"), "{store}: {e}");
                }
            }
            // kv too (engine stores; others are not kv stores).
            if store.starts_with("engine-") {
                let o = ferrite(&["kv", rs, "get", "w0-1"]);
                assert_eq!(o.status.code(), Some(2), "{store}: {}", text(&o.stderr));
                assert!(text(&o.stderr).contains("copy of a pool that was open"));
            }
            // The deep check says so (a finding, exit 1).
            let d = ferrite(&["pool", "check", rs, "--deep"]);
            assert_eq!(d.status.code(), Some(1), "{store}: {}", text(&d.stdout));
            assert!(text(&d.stdout).contains("a copy of a pool that was open"));
            // How many of them would have been torn: the same bytes
            // without the record, deep-checked (what `serve` would have
            // recovered and served before the record).
            let mut bytes = std::fs::read(&raw).unwrap();
            bytes[192..256].fill(0);
            std::fs::write(&raw, &bytes).unwrap();
            let d = ferrite(&["pool", "check", rs, "--deep"]);
            let out = text(&d.stdout);
            let damage = out.lines().any(|l| {
                l.starts_with(rs)
                    && !l.contains("not closed cleanly")
                    && !l.contains("recovery would")
                    && !l.contains(": clean (")
                    && !l.contains(" finding")
            });
            if damage {
                store_torn += 1;
            }
            store_refused += 1;
            std::fs::remove_file(&raw).unwrap();
        }
        load.finish();
        srv.stop();
        println!(
            "{store}: {store_refused} of {raws} raw copies refused by serve/kv/check; {store_torn} of them torn beyond recovery"
        );
        refused += store_refused;
        torn += store_torn;
    }
    println!("raw cp of a live pool: {refused} of {total} refused, 0 served; {torn} were torn");
    assert_eq!(refused, total);
}

#[test]
fn deep_checks_beside_a_loaded_server_find_nothing() {
    let checks = count("FERRITE_LIVE_CHECKS", 3);
    let (mut clean, mut total) = (0usize, 0usize);
    for store in STORES {
        let dir = pool_dir();
        let pool = dir.path().join("live.pool");
        let srv = Server::start(&pool, Some(store)).unwrap();
        let load = Load::start(&srv.addr, 2);
        let ps = pool.to_str().unwrap();
        let mut false_findings = 0;
        for _ in 0..checks {
            let o = ferrite(&["pool", "check", ps, "--deep"]);
            total += 1;
            let out = text(&o.stdout);
            match o.status.code() {
                Some(0) => {
                    assert!(out.contains(": clean ("), "{out}");
                    assert!(out.contains("paused"), "{out}");
                    clean += 1;
                }
                c => {
                    false_findings += 1;
                    eprintln!("{store}: exit {c:?}: {out}{}", text(&o.stderr));
                }
            }
        }
        // --repair on an open pool: refused, one line, exit 2.
        let o = ferrite(&["pool", "check", ps, "--deep", "--repair"]);
        assert_eq!(o.status.code(), Some(2));
        let e = text(&o.stderr);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains("--repair needs the pool closed"), "{e}");
        load.finish();
        srv.stop();
        // Closed: clean after its own recovery (a stopped LSM server
        // leaves its log to replay, which the check reports).
        let o = ferrite(&["pool", "check", ps, "--deep", "--repair"]);
        assert_eq!(o.status.code(), Some(0), "{store}: {}", text(&o.stdout));
        println!(
            "{store}: {checks} deep checks beside the loaded server, {false_findings} false findings"
        );
        assert_eq!(false_findings, 0, "{store}");
    }
    println!(
        "deep checks beside a loaded server: {clean} of {total} clean, {} false findings",
        total - clean
    );
}
