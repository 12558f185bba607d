//! `ferrite serve --tls-listen` (issue 28): the same protocols over rustls
//! beside the plain listener, client certificates when `--tls-ca` is
//! given, and (ignored by default; run it on a release build) the cost of
//! TLS on a 5/95 set/get mix against the plain listener of the same
//! server, rounds interleaved. Certificates come from the `openssl`
//! command; without it the tests print why and pass without running.

mod common;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A CA, a server certificate for localhost/127.0.0.1 it signed, and a
/// client certificate it signed, in `dir`; false without openssl.
fn make_certs(dir: &Path) -> bool {
    let sh = format!(
        "set -e; cd {d}
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=test-ca 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > san.ext
openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost 2>/dev/null
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile san.ext 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=client 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' > client.ext
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 2 -extfile client.ext 2>/dev/null",
        d = dir.display()
    );
    Command::new("sh")
        .args(["-c", &sh])
        .status()
        .is_ok_and(|s| s.success())
}

struct Server {
    child: Child,
    addr: String,
    tls_addr: String,
}

impl Server {
    fn start(dir: &Path, extra: &[&str]) -> Server {
        let pool = dir.join("p.pool");
        let cert = dir.join("server.pem");
        let key = dir.join("server.key");
        let mut args = vec![
            "--pool",
            pool.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--tls-listen",
            "127.0.0.1:0",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--memory",
            "128M",
        ];
        args.extend(extra);
        let s = common::spawn_serve(&args, Stdio::null()).unwrap_or_else(|(mut c, l)| {
            let _ = c.kill();
            panic!("no ready line: {l}")
        });
        let tls_addr = s
            .line
            .split("TLS on ")
            .nth(1)
            .and_then(|r| r.split(')').next())
            .expect("TLS address in the ready line")
            .to_string();
        Server {
            child: s.child,
            addr: s.addr,
            tls_addr,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client_config(dir: &Path, with_cert: bool) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(dir.join("ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let b = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    Arc::new(if with_cert {
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(dir.join("client.pem"))
                .unwrap()
                .map(Result::unwrap)
                .collect();
        let key = PrivateKeyDer::from_pem_file(dir.join("client.key")).unwrap();
        b.with_client_auth_cert(chain, key).unwrap()
    } else {
        b.with_no_client_auth()
    })
}

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

fn tls_connect(addr: &str, cfg: &Arc<rustls::ClientConfig>) -> BufReader<Tls> {
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_nodelay(true).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let conn = rustls::ClientConnection::new(
        cfg.clone(),
        ServerName::try_from("localhost").unwrap().to_owned(),
    )
    .unwrap();
    BufReader::new(rustls::StreamOwned::new(conn, tcp))
}

fn check<S: Read + Write>(c: &mut BufReader<S>, req: &str, expect: &str) {
    c.get_mut().write_all(req.as_bytes()).unwrap();
    c.get_mut().flush().unwrap();
    let mut got = vec![0u8; expect.len()];
    c.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), expect, "reply to {req:?}");
}

#[test]
fn tls_beside_plain_and_client_certificates() {
    let dir = tempfile::tempdir().unwrap();
    if !make_certs(dir.path()) {
        println!("skipped: no openssl command to make test certificates");
        return;
    }
    let srv = Server::start(dir.path(), &[]);
    let cfg = client_config(dir.path(), false);
    let mut t = tls_connect(&srv.tls_addr, &cfg);
    check(&mut t, "set k 0 0 3\r\ntls\r\n", "STORED\r\n");
    check(&mut t, "mg k v\r\n", "VA 3\r\ntls\r\n");
    // The plain listener serves the same items.
    let p = TcpStream::connect(&srv.addr).unwrap();
    let mut p = BufReader::new(p);
    check(&mut p, "get k\r\n", "VALUE k 0 3\r\ntls\r\nEND\r\n");
    // Plain bytes on the TLS port are no request.
    let mut raw = TcpStream::connect(&srv.tls_addr).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    raw.write_all(b"get k\r\n").unwrap();
    let mut buf = Vec::new();
    let _ = raw.read_to_end(&mut buf);
    assert!(!String::from_utf8_lossy(&buf).contains("VALUE"));
    drop(srv);

    // With --tls-ca a client without a certificate is refused; one with a
    // certificate the CA signed is served.
    let ca = dir.path().join("ca.pem");
    std::fs::remove_file(dir.path().join("p.pool")).unwrap();
    let srv = Server::start(dir.path(), &["--tls-ca", ca.to_str().unwrap()]);
    let mut anon = tls_connect(&srv.tls_addr, &cfg);
    let _ = anon.get_mut().write_all(b"version\r\n");
    let _ = anon.get_mut().flush();
    let mut l = String::new();
    assert!(
        anon.read_line(&mut l).is_err() || l.is_empty(),
        "served without a client certificate: {l:?}"
    );
    let mut signed = tls_connect(&srv.tls_addr, &client_config(dir.path(), true));
    check(&mut signed, "set k 0 0 1\r\nx\r\n", "STORED\r\n");
}

/// One client's requests for `dur`: 5 % sets, 95 % gets of 1000 keys
/// (100-byte values), one request at a time; requests done.
fn mix<S: Read + Write>(c: &mut BufReader<S>, dur: Duration, seed: u64) -> u64 {
    let value = "v".repeat(100);
    let mut x = seed | 1;
    let mut n = 0u64;
    let t0 = Instant::now();
    let mut line = String::new();
    while t0.elapsed() < dur {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let key = x % 1000;
        if x % 100 < 5 {
            write!(c.get_mut(), "set k{key} 0 0 100\r\n{value}\r\n").unwrap();
            c.get_mut().flush().unwrap();
            line.clear();
            c.read_line(&mut line).unwrap();
            assert_eq!(line, "STORED\r\n");
        } else {
            write!(c.get_mut(), "get k{key}\r\n").unwrap();
            c.get_mut().flush().unwrap();
            loop {
                line.clear();
                c.read_line(&mut line).unwrap();
                if line == "END\r\n" {
                    break;
                }
                assert!(line.starts_with("VALUE") || line.len() == 102, "{line:?}");
            }
        }
        n += 1;
    }
    n
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// `cargo test --release -p ferrite --test serve_tls -- --ignored --nocapture`
#[test]
#[ignore = "a measurement: run on a release build"]
fn tls_cost_on_a_5_95_mix() {
    let dir = tempfile::tempdir().unwrap();
    if !make_certs(dir.path()) {
        println!("skipped: no openssl command to make test certificates");
        return;
    }
    let srv = Server::start(dir.path(), &["--threads", "2"]);
    let cfg = client_config(dir.path(), false);
    let clients = 4;
    let round = Duration::from_millis(1500);
    let run = |tls: bool, seed: u64| -> f64 {
        let total: u64 = std::thread::scope(|s| {
            let hs: Vec<_> = (0..clients)
                .map(|i| {
                    let (cfg, srv) = (&cfg, &srv);
                    s.spawn(move || {
                        if tls {
                            let mut c = tls_connect(&srv.tls_addr, cfg);
                            mix(&mut c, round, seed + i)
                        } else {
                            let tcp = TcpStream::connect(&srv.addr).unwrap();
                            tcp.set_nodelay(true).unwrap();
                            mix(&mut BufReader::new(tcp), round, seed + i)
                        }
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        total as f64 / round.as_secs_f64()
    };
    // Warm up (fills the keys), then interleave.
    run(false, 1);
    let (mut plain, mut tls) = (Vec::new(), Vec::new());
    for r in 0..7u64 {
        if r % 2 == 0 {
            plain.push(run(false, 100 + r));
            tls.push(run(true, 200 + r));
        } else {
            tls.push(run(true, 200 + r));
            plain.push(run(false, 100 + r));
        }
    }
    println!("plain ops/s: {plain:.0?}");
    println!("tls   ops/s: {tls:.0?}");
    let (mp, mt) = (median(&mut plain), median(&mut tls));
    let spread = |v: &[f64], m: f64| (v[v.len() - 1] - v[0]) / m * 100.0;
    println!(
        "median plain {mp:.0} ops/s (spread {:.0} %), TLS {mt:.0} ops/s (spread {:.0} %): TLS costs {:.1} %",
        spread(&plain, mp),
        spread(&tls, mt),
        (1.0 - mt / mp) * 100.0
    );
    assert!(mt >= 0.75 * mp, "TLS costs more than 25 %");
}
