//! The fleet of `deploy/fleet/`: three `ferrite serve` instances behind
//! nutcracker (twemproxy), end to end.
//!
//! The test runs the *shipped* `deploy/fleet/nutcracker.yml`: it reads the
//! file and substitutes only the ports (nutcracker's listen port and the
//! three servers' ports become free ephemeral ones, so parallel runs do not
//! collide); everything else — memcache protocol, ketama distribution,
//! `auto_eject_hosts: false`, the server names that place the keys on the
//! ring — is the file as shipped. It then
//!
//! 1. writes [`KEYS`] keys through nutcracker;
//! 2. queries each instance directly: each holds a share of the keys, no
//!    key is on two instances, and the shares sum to the total;
//! 3. kills one instance with SIGKILL: its keys answer `SERVER_ERROR`
//!    through nutcracker (not a miss, and a write to them lands nowhere
//!    else: nothing is remapped), the other instances' keys still work;
//! 4. restarts it on the same pool and port and checks every key, through
//!    nutcracker and directly, still holds its value.
//!
//! Skipped (one line printed, test passes) when `nutcracker` is not
//! installed (`apt-get install nutcracker`). Every step is bounded (socket
//! timeouts, deadlines on every wait) and every child is killed on the way
//! out, also when an assertion fails (the [`Proc`] guards).

mod common;

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Keys written through nutcracker.
const KEYS: usize = 3000;
/// Sets sent before their replies are read (each is a durable write: keep
/// the queue nutcracker builds per server well inside its timeout).
const SET_BATCH: usize = 24;
/// Keys per `get`.
const GET_BATCH: usize = 100;
/// The shipped configuration.
const YML: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/fleet/nutcracker.yml"
);

/// A child process that is killed (SIGKILL) and reaped when dropped.
struct Proc {
    child: Child,
}

impl Proc {
    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn kill9(&mut self) {
        self.child.kill().unwrap(); // SIGKILL on Unix
        self.child.wait().unwrap();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The nutcracker binary: on PATH, or where Debian puts it.
fn nutcracker() -> Option<PathBuf> {
    let ok = |p: &Path| {
        Command::new(p)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    [
        PathBuf::from("nutcracker"),
        PathBuf::from("/usr/sbin/nutcracker"),
    ]
    .into_iter()
    .find(|p| ok(p))
}

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Start `ferrite serve` on `pool` at `port` (0 = any); its port. Fails
/// (None) when the server exits before its ready line; panics after 60 s.
fn start_server(pool: &Path, port: u16, log: &Path) -> Option<(Proc, u16)> {
    let listen = format!("127.0.0.1:{port}");
    let args = [
        "--pool",
        pool.to_str().unwrap(),
        "--listen",
        &listen,
        "--memory",
        "64M",
        "--threads",
        "2",
    ];
    match common::spawn_serve(&args, Stdio::from(File::create(log).unwrap())) {
        Ok(s) => {
            let port = s.addr.rsplit(':').next().unwrap().parse().unwrap();
            Some((Proc { child: s.child }, port))
        }
        Err((child, line)) => {
            drop(Proc { child });
            eprintln!(
                "ferrite serve did not start: {line:?} {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            None
        }
    }
}

/// Start the server again on its pool and port, retrying for 30 s while
/// the port is still held (a killed listener's port is normally free at
/// once).
fn restart_server(pool: &Path, port: u16, log: &Path) -> Proc {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some((p, got)) = start_server(pool, port, log) {
            assert_eq!(got, port);
            return p;
        }
        assert!(Instant::now() < until, "could not restart on port {port}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The shipped yml with its ports replaced: `listen` by `listen`, the
/// servers' in order by `servers`. Checks the settings the fleet relies on.
fn config(listen: u16, servers: &[u16]) -> String {
    let yml = std::fs::read_to_string(YML).expect("read deploy/fleet/nutcracker.yml");
    for needed in [
        "distribution: ketama",
        "auto_eject_hosts: false",
        "redis: false",
    ] {
        assert!(
            yml.lines().any(|l| l.trim() == needed),
            "{YML} lacks `{needed}`"
        );
    }
    let mut out = String::new();
    let mut next = servers.iter();
    let (mut listens, mut nservers) = (0, 0);
    for line in yml.lines() {
        let t = line.trim_start();
        let port = if t.starts_with("listen:") {
            listens += 1;
            Some(listen)
        } else if t.starts_with("- 127.0.0.1:") {
            nservers += 1;
            Some(*next.next().expect("more servers in the yml than started"))
        } else {
            None
        };
        match port {
            Some(p) => {
                // 127.0.0.1:PORT[:weight name]: swap the digits after the
                // address, keep the rest.
                let at = line.find("127.0.0.1:").unwrap() + "127.0.0.1:".len();
                let digits = line[at..].bytes().take_while(u8::is_ascii_digit).count();
                assert!(digits > 0, "no port in {line:?}");
                out.push_str(&line[..at]);
                out.push_str(&p.to_string());
                out.push_str(&line[at + digits..]);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    assert_eq!((listens, nservers), (1, servers.len()), "{YML}: {out}");
    out
}

/// Start nutcracker on `cfg` (written to `dir`); its port. Retries with
/// other ports if one was taken meanwhile.
fn start_nutcracker(bin: &Path, dir: &Path, servers: &[u16]) -> (Proc, u16) {
    for _ in 0..5 {
        let (port, stats) = (free_port(), free_port());
        let cfg = dir.join("nutcracker.yml");
        std::fs::write(&cfg, config(port, servers)).unwrap();
        let out = Command::new(bin)
            .arg("-t")
            .arg("-c")
            .arg(&cfg)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "nutcracker -t rejects the config: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let child = Command::new(bin)
            .arg("-c")
            .arg(&cfg)
            .arg("-o")
            .arg(dir.join("nutcracker.log"))
            .args(["-s", &stats.to_string(), "-a", "127.0.0.1"])
            .arg("-p")
            .arg(dir.join("nutcracker.pid"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run nutcracker");
        let mut p = Proc { child };
        let until = Instant::now() + Duration::from_secs(10);
        while p.alive() && Instant::now() < until {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return (p, port);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!(
        "nutcracker did not start: {}",
        std::fs::read_to_string(dir.join("nutcracker.log")).unwrap_or_default()
    );
}

/// A memcached text-protocol connection.
struct Conn {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Conn {
    fn new(port: u16) -> Conn {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_nodelay(true).unwrap();
        Conn {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).expect("reply line");
        assert!(l.ends_with("\r\n"), "connection closed: {l:?}");
        l
    }

    /// Set every key to its value, [`SET_BATCH`] at a time; the reply
    /// lines.
    fn set_all(&mut self, kv: &[(String, Vec<u8>)]) -> Vec<String> {
        let mut replies = Vec::new();
        for chunk in kv.chunks(SET_BATCH) {
            let mut req = Vec::new();
            for (k, v) in chunk {
                write!(req, "set {k} 0 0 {}\r\n", v.len()).unwrap();
                req.extend_from_slice(v);
                req.extend_from_slice(b"\r\n");
            }
            self.w.write_all(&req).unwrap();
            for _ in chunk {
                replies.push(self.line());
            }
        }
        replies
    }

    /// `get` the keys ([`GET_BATCH`] per request): the values found, or the
    /// first error line.
    fn get_all(&mut self, keys: &[String]) -> Result<HashMap<String, Vec<u8>>, String> {
        let mut found = HashMap::new();
        for chunk in keys.chunks(GET_BATCH) {
            self.w
                .write_all(format!("get {}\r\n", chunk.join(" ")).as_bytes())
                .unwrap();
            loop {
                let l = self.line();
                if l == "END\r\n" {
                    break;
                }
                let Some(rest) = l.strip_prefix("VALUE ") else {
                    return Err(l);
                };
                let t: Vec<&str> = rest.trim_end().split(' ').collect();
                let len: usize = t[2].parse().unwrap();
                let mut v = vec![0u8; len + 2];
                self.r.read_exact(&mut v).unwrap();
                assert_eq!(&v[len..], b"\r\n");
                v.truncate(len);
                assert!(
                    found.insert(t[0].to_string(), v).is_none(),
                    "{} twice",
                    t[0]
                );
            }
        }
        Ok(found)
    }
}

fn value_for(i: usize) -> Vec<u8> {
    // Lengths 8..=300 so values differ in size as well as content.
    let mut v = format!("value-{i}-").into_bytes();
    v.resize(8 + (i * 37) % 293, b'a' + (i % 26) as u8);
    v
}

#[test]
fn three_servers_behind_nutcracker_keep_their_keys_across_kill_9() {
    let Some(bin) = nutcracker() else {
        println!("skipped: nutcracker not installed (apt-get install nutcracker)");
        return;
    };
    let t0 = Instant::now();
    // Declared first, so dropped last: after every process is gone.
    let dir = tempfile::tempdir().unwrap();
    let pool = |i: usize| dir.path().join(format!("ferrite-{i}.pool"));
    let log = |i: usize| dir.path().join(format!("ferrite-{i}.log"));
    let mut servers: Vec<Proc> = Vec::new();
    let mut ports = Vec::new();
    for i in 0..3 {
        let (p, port) = start_server(&pool(i), 0, &log(i)).expect("start ferrite serve");
        servers.push(p);
        ports.push(port);
    }
    let (_nc, nc_port) = start_nutcracker(&bin, dir.path(), &ports);

    // 1. Write through nutcracker.
    let kv: Vec<(String, Vec<u8>)> = (0..KEYS)
        .map(|i| (format!("fleet:{i}"), value_for(i)))
        .collect();
    let keys: Vec<String> = kv.iter().map(|(k, _)| k.clone()).collect();
    let mut nc = Conn::new(nc_port);
    for (r, (k, _)) in nc.set_all(&kv).iter().zip(&kv) {
        assert_eq!(r, "STORED\r\n", "set {k} through nutcracker");
    }

    // 2. Each instance holds a share; the shares partition the keys.
    let mut owner: HashMap<String, usize> = HashMap::new();
    let mut shares = Vec::new();
    for (s, &port) in ports.iter().enumerate() {
        let got = Conn::new(port).get_all(&keys).expect("direct get");
        for (k, v) in &got {
            let i: usize = k["fleet:".len()..].parse().unwrap();
            assert_eq!(*v, value_for(i), "{k} on server {s}");
            assert!(owner.insert(k.clone(), s).is_none(), "{k} on two servers");
        }
        shares.push(got.len());
    }
    println!("keys per instance: {shares:?} of {KEYS}");
    assert_eq!(shares.iter().sum::<usize>(), KEYS, "shares {shares:?}");
    for &n in &shares {
        // Ketama over three equal servers: about a third each.
        assert!(n >= KEYS / 10, "an instance holds too few keys: {shares:?}");
    }

    // 3. Kill one instance (the one with most keys) with SIGKILL.
    let victim = (0..3).max_by_key(|&s| shares[s]).unwrap();
    servers[victim].kill9();
    let theirs: Vec<String> = keys
        .iter()
        .filter(|k| owner[*k] == victim)
        .cloned()
        .collect();
    let others: Vec<String> = keys
        .iter()
        .filter(|k| owner[*k] != victim)
        .cloned()
        .collect();
    // Its keys fail (no remapping to the survivors: auto_eject_hosts is
    // false), the survivors' keys are served as before.
    let mut nc = Conn::new(nc_port);
    let err = nc.get_all(&theirs[..1]).expect_err("a dead server's key");
    assert!(err.starts_with("SERVER_ERROR"), "{err:?}");
    let replies = nc.set_all(&[(theirs[0].clone(), b"written-during-outage".to_vec())]);
    assert!(replies[0].starts_with("SERVER_ERROR"), "{replies:?}");
    let alive = nc.get_all(&others).expect("survivors serve");
    assert_eq!(alive.len(), others.len());
    for (s, &port) in ports.iter().enumerate() {
        if s != victim {
            let stray = Conn::new(port).get_all(&theirs[..1]).unwrap();
            assert!(stray.is_empty(), "the outage write went to server {s}");
        }
    }

    // 4. Restart it on the same pool and port: every key is back.
    servers[victim] = restart_server(&pool(victim), ports[victim], &log(victim));
    let direct = Conn::new(ports[victim]).get_all(&theirs).expect("direct");
    assert_eq!(
        direct.len(),
        theirs.len(),
        "keys lost by the killed instance"
    );
    // nutcracker reconnects on the next request to the instance.
    let until = Instant::now() + Duration::from_secs(20);
    let all = loop {
        match Conn::new(nc_port).get_all(&keys) {
            Ok(all) => break all,
            Err(e) => {
                assert!(Instant::now() < until, "nutcracker still fails: {e:?}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    assert_eq!(all.len(), KEYS, "keys missing through nutcracker");
    for (k, v) in &all {
        let i: usize = k["fleet:".len()..].parse().unwrap();
        assert_eq!(*v, value_for(i), "{k} through nutcracker");
    }
    for (s, &port) in ports.iter().enumerate() {
        let got = Conn::new(port).get_all(&keys).expect("direct get");
        assert_eq!(got.len(), shares[s], "server {s} after the restart");
        for k in got.keys() {
            assert_eq!(owner[k], s);
        }
    }
    println!(
        "fleet: {KEYS} keys over {shares:?}, server {victim} killed with SIGKILL and restarted, \
         every key intact ({:.1} s)",
        t0.elapsed().as_secs_f64()
    );
    for s in &mut servers {
        assert!(s.alive(), "a server died");
    }
}
