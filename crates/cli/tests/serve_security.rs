//! `ferrite serve`'s access control and limits (issue 28): the auth file
//! (text, meta and binary SASL PLAIN; SIGHUP reload; passwords never
//! printed), the refusal of a non-loopback address without auth, `-c`,
//! the idle timeout, and memory under 1000 idle connections and 100
//! clients that never read their replies.

mod common;

use ferrite_server::protocol::binary::{Header, REQ_MAGIC, opcode};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start(pool: &Path, extra: &[&str]) -> Server {
        let mut args = vec!["--pool", pool.to_str().unwrap(), "--listen", "127.0.0.1:0"];
        for (flag, v) in [("--memory", "64M"), ("--threads", "2")] {
            if !extra.contains(&flag) {
                args.extend([flag, v]);
            }
        }
        args.extend(extra);
        match common::spawn_serve(&args, Stdio::piped()) {
            Ok(s) => Server {
                child: s.child,
                addr: s.addr,
            },
            Err((mut child, line)) => {
                let mut err = String::new();
                child.stderr.take().unwrap().read_to_string(&mut err).ok();
                let _ = child.wait();
                panic!("no ready line: {line:?} {err}");
            }
        }
    }

    fn connect(&self) -> Conn {
        let s = TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_nodelay(true).unwrap();
        Conn {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    /// SIGTERM, wait, and everything it wrote to stderr.
    fn stop(mut self) -> String {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let st = self.child.wait().unwrap();
        assert!(st.success(), "serve exited {st}");
        let mut err = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        err
    }

    fn rss_kib(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        s.lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Conn {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Conn {
    fn send(&mut self, b: &[u8]) {
        self.w.write_all(b).unwrap();
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        l
    }

    fn check(&mut self, req: &str, expect: &str) {
        self.send(req.as_bytes());
        let mut got = vec![0u8; expect.len()];
        self.r.read_exact(&mut got).unwrap_or_else(|e| {
            panic!("{req:?}: {e}, wanted {expect:?}");
        });
        assert_eq!(String::from_utf8_lossy(&got), expect, "reply to {req:?}");
    }

    fn bin(&mut self, op: u8, extras: &[u8], key: &[u8], value: &[u8]) {
        let mut p = Vec::new();
        Header {
            magic: REQ_MAGIC,
            opcode: op,
            key_len: key.len() as u16,
            extras_len: extras.len() as u8,
            data_type: 0,
            vbucket_or_status: 0,
            body_len: (extras.len() + key.len() + value.len()) as u32,
            opaque: 7,
            cas: 0,
        }
        .write(&mut p);
        p.extend_from_slice(extras);
        p.extend_from_slice(key);
        p.extend_from_slice(value);
        self.send(&p);
    }

    /// (status, body).
    fn bin_reply(&mut self) -> (u16, Vec<u8>) {
        let mut h = [0u8; 24];
        self.r.read_exact(&mut h).unwrap();
        let h = Header::read(&h).unwrap();
        assert_eq!(h.magic, 0x81);
        let mut body = vec![0u8; h.body_len as usize];
        self.r.read_exact(&mut body).unwrap();
        (h.vbucket_or_status, body)
    }

    /// The server closed: the next read returns 0 bytes.
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.r.read(&mut b), Ok(0))
    }
}

const PASSWORD: &str = "s3cret-pw-7f1d";
const NEW_PASSWORD: &str = "n3w-pw-b00c";

fn set_extras() -> Vec<u8> {
    let mut e = 0u32.to_be_bytes().to_vec();
    e.extend_from_slice(&0u32.to_be_bytes());
    e
}

#[test]
fn without_credentials_nothing_is_read_or_written_text_meta_binary() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    std::fs::write(
        &users,
        format!("alice:{PASSWORD}\n# a comment\nbob:other\n"),
    )
    .unwrap();
    let srv = Server::start(
        &dir.path().join("p"),
        &["--auth-file", users.to_str().unwrap()],
    );

    // An authenticated text client stores a secret.
    let mut a = srv.connect();
    a.check(
        &format!(
            "set auth 0 0 {}\r\nalice {PASSWORD}\r\n",
            6 + PASSWORD.len()
        ),
        "STORED\r\n",
    );
    a.check("set secret 0 0 6\r\nhidden\r\n", "STORED\r\n");
    a.check("get secret\r\n", "VALUE secret 0 6\r\nhidden\r\nEND\r\n");
    a.check("mg secret v\r\n", "VA 6\r\nhidden\r\n");

    // Text: reads and writes refused; a set is an auth attempt.
    let mut t = srv.connect();
    t.check("get secret\r\n", "CLIENT_ERROR unauthenticated\r\n");
    t.check("delete secret\r\n", "CLIENT_ERROR unauthenticated\r\n");
    t.check("incr secret 1\r\n", "CLIENT_ERROR unauthenticated\r\n");
    t.check("flush_all\r\n", "CLIENT_ERROR unauthenticated\r\n");
    t.check("stats\r\n", "CLIENT_ERROR unauthenticated\r\n");
    t.check(
        "set secret 0 0 5\r\nstole\r\n",
        "CLIENT_ERROR bad authentication token format\r\n",
    );
    t.check(
        "set x 0 0 9\r\nalice bad\r\n",
        "CLIENT_ERROR authentication failure\r\n",
    );
    // Meta: the same.
    t.check("mg secret v\r\n", "CLIENT_ERROR unauthenticated\r\n");
    t.check("md secret\r\n", "CLIENT_ERROR unauthenticated\r\n");
    t.check("ms secret 2\r\n", "CLIENT_ERROR unauthenticated\r\n");
    // (the data line of that ms is a line of its own to the auth parser)
    t.check("xx\r\n", "CLIENT_ERROR unauthenticated\r\n");
    // Then it authenticates (the second user) and may.
    t.check("set x 0 0 9\r\nbob other\r\n", "STORED\r\n");
    t.check("mg secret v\r\n", "VA 6\r\nhidden\r\n");

    // Binary: a get is refused with the auth error and the connection
    // closed, as memcached does.
    let mut b = srv.connect();
    b.bin(opcode::GET, &[], b"secret", &[]);
    let (st, body) = b.bin_reply();
    assert_eq!((st, body.as_slice()), (0x20, &b"Auth failure."[..]));
    assert!(b.closed());
    let mut b = srv.connect();
    b.bin(opcode::SET, &set_extras(), b"secret", b"evil");
    assert_eq!(b.bin_reply().0, 0x20);
    assert!(b.closed());
    // SASL: mechanisms, a wrong password, then the right one.
    let mut b = srv.connect();
    b.bin(opcode::SASL_LIST_MECHS, &[], &[], &[]);
    assert_eq!(b.bin_reply(), (0, b"PLAIN".to_vec()));
    b.bin(opcode::SASL_AUTH, &[], b"PLAIN", b"\0alice\0wrong");
    assert_eq!(b.bin_reply().0, 0x20);
    b.bin(
        opcode::SASL_AUTH,
        &[],
        b"PLAIN",
        format!("\0alice\0{PASSWORD}").as_bytes(),
    );
    assert_eq!(b.bin_reply(), (0, b"Authenticated".to_vec()));
    b.bin(opcode::GET, &[], b"secret", &[]);
    let (st, body) = b.bin_reply();
    assert_eq!(st, 0);
    assert_eq!(&body[4..], b"hidden");
    b.bin(opcode::SET, &set_extras(), b"bin", b"ok");
    assert_eq!(b.bin_reply().0, 0);

    // Nothing the refused clients sent changed anything.
    a.check(
        "get secret bin\r\n",
        "VALUE secret 0 6\r\nhidden\r\nVALUE bin 0 2\r\nok\r\nEND\r\n",
    );
    a.send(b"stats\r\n");
    let mut stats = String::new();
    loop {
        let l = a.line();
        if l == "END\r\n" || l.is_empty() {
            break;
        }
        stats.push_str(&l);
    }
    // Text: 3 tries (alice ok, alice bad, bob ok; a block that is not a
    // user and password is no try, as in memcached); binary: 2 SASL tries.
    assert!(stats.contains("STAT auth_cmds 5\r\n"), "{stats}");
    assert!(stats.contains("STAT auth_errors 2\r\n"), "{stats}");

    // Reload on SIGHUP: alice's new password works, the old one not.
    std::fs::write(&users, format!("alice:{NEW_PASSWORD}\n")).unwrap();
    let ok = Command::new("kill")
        .args(["-HUP", &srv.child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let t0 = Instant::now();
    loop {
        let mut c = srv.connect();
        c.send(
            format!(
                "set a 0 0 {}\r\nalice {NEW_PASSWORD}\r\n",
                6 + NEW_PASSWORD.len()
            )
            .as_bytes(),
        );
        if c.line() == "STORED\r\n" {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no reload");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut c = srv.connect();
    c.check(
        &format!("set a 0 0 {}\r\nalice {PASSWORD}\r\n", 6 + PASSWORD.len()),
        "CLIENT_ERROR authentication failure\r\n",
    );
    // A broken file keeps the credentials it had.
    std::fs::write(&users, format!("{PASSWORD}\n")).unwrap();
    Command::new("kill")
        .args(["-HUP", &srv.child.id().to_string()])
        .status()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut c = srv.connect();
    c.check(
        &format!(
            "set a 0 0 {}\r\nalice {NEW_PASSWORD}\r\n",
            6 + NEW_PASSWORD.len()
        ),
        "STORED\r\n",
    );
    drop((a, b, c, t));
    let err = srv.stop();
    assert!(err.contains("reloaded"), "{err}");
    assert!(err.contains("kept the old credentials"), "{err}");
    for pw in [PASSWORD, NEW_PASSWORD, "wrong", "other"] {
        assert!(!err.contains(pw), "password {pw} in the log: {err}");
    }
}

#[test]
fn non_loopback_without_auth_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("p");
    let o = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args([
            "serve",
            "--pool",
            pool.to_str().unwrap(),
            "--listen",
            "0.0.0.0:0",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("not loopback") && err.contains("--insecure"),
        "{err}"
    );
    assert!(!pool.exists(), "refused before creating the pool");
    // A bad credentials file is one line too, and names no secret.
    let users = dir.path().join("users");
    std::fs::write(&users, "justapassword\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["serve", "--pool", pool.to_str().unwrap()])
        .args([
            "--listen",
            "127.0.0.1:0",
            "--auth-file",
            users.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("line 1") && !err.contains("justapassword"),
        "{err}"
    );
}

#[test]
fn max_connections_and_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(&dir.path().join("p"), &["-c", "3", "--idle-timeout", "2"]);
    let mut held: Vec<Conn> = (0..3).map(|_| srv.connect()).collect();
    for c in &mut held {
        c.check(
            "version\r\n",
            &format!("VERSION {}\r\n", ferrite_server::server::VERSION),
        );
    }
    let mut extra = srv.connect();
    assert_eq!(extra.line(), "ERROR Too many open connections\r\n");
    assert!(extra.closed());
    drop(held.pop());
    // The slot frees once the server sees the close.
    let t0 = Instant::now();
    let mut c = loop {
        let mut c = srv.connect();
        c.send(b"version\r\n");
        if c.line().starts_with("VERSION") {
            break c;
        }
        assert!(t0.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(20));
    };
    c.check("stats settings\r\n", "STAT maxbytes ");
    // Idle connections are closed after 2 s; a busy one is not.
    let t0 = Instant::now();
    let mut busy = held.pop().unwrap();
    while t0.elapsed() < Duration::from_millis(3500) {
        busy.check("version\r\n", "VERSION ");
        busy.line();
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(held[0].closed(), "idle connection still open");
    let mut s = srv.connect();
    s.send(b"stats\r\n");
    let mut rejected = String::new();
    loop {
        let l = s.line();
        if l == "END\r\n" || l.is_empty() {
            break;
        }
        if l.starts_with("STAT rejected_connections") {
            rejected = l;
        }
    }
    assert!(
        rejected.starts_with("STAT rejected_connections "),
        "{rejected}"
    );
    assert_ne!(rejected.trim_end(), "STAT rejected_connections 0");
}

/// The target: 1000 idle connections and 100 that request far
/// more than they read; the server's RSS stays under a stated bound and a
/// fresh client is served at once.
#[test]
fn idle_and_non_reading_clients_keep_memory_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(
        &dir.path().join("p"),
        &["-c", "2000", "--memory", "256M", "--threads", "2"],
    );
    let value = vec![b'v'; 256 << 10];
    let mut c = srv.connect();
    c.send(format!("set big 0 0 {}\r\n", value.len()).as_bytes());
    c.send(&value);
    c.check("\r\n", "STORED\r\n");
    let base = srv.rss_kib();
    let idle: Vec<Conn> = (0..1000).map(|_| srv.connect()).collect();
    // Each slow reader asks for 400 × 256 KiB = 100 MiB and reads nothing.
    let mut slow: Vec<TcpStream> = Vec::new();
    let req = "get big\r\n".repeat(400);
    for _ in 0..100 {
        let s = TcpStream::connect(&srv.addr).unwrap();
        s.set_nonblocking(true).unwrap();
        slow.push(s);
    }
    for s in &mut slow {
        // Non-blocking: what the socket takes (the server stops reading
        // once its replies back up).
        let _ = s.write(req.as_bytes());
    }
    std::thread::sleep(Duration::from_secs(3));
    let loaded = srv.rss_kib();
    // A fresh client, served at once (best of 5 round trips, each bounded).
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let t0 = Instant::now();
        let mut f = srv.connect();
        f.check("get nothing\r\n", "END\r\n");
        best = best.min(t0.elapsed());
    }
    let grown_mib = loaded.saturating_sub(base) as f64 / 1024.0;
    println!(
        "RSS: {:.1} MiB before, {:.1} MiB with 1000 idle + 100 non-reading clients \
         (+{grown_mib:.1} MiB); fresh client served in {:.2} ms",
        base as f64 / 1024.0,
        loaded as f64 / 1024.0,
        best.as_secs_f64() * 1e3
    );
    // The bound: per connection at most its input (one request) and the
    // replies it has not taken up to FLUSH_AT plus one item; 100 × (256
    // KiB + 256 KiB + 64 KiB) + 1000 × 8 KiB, plus allocator slack: 100 MiB.
    assert!(grown_mib < 100.0, "RSS grew {grown_mib:.1} MiB");
    assert!(
        best < Duration::from_millis(10),
        "fresh client took {best:?}"
    );
    drop((idle, slow));
}
