//! A damaged item on a real pool file, served: its key is answered with
//! `SERVER_ERROR damaged item …` (text and meta) or status 0x84 (binary),
//! every other key on the same connection is served as before, and a
//! plain `set` repairs the key.

use ferrite_pmem::{Domain, Pool, PoolOptions};
use ferrite_server::protocol::{Limits, StoreMode, StoreOpts};
use ferrite_server::server::Options;
use ferrite_server::store::{Cache, Shared, Store, tx};
use ferrite_tx::Strategy;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const NOW: u64 = 1_800_000_000;

fn options() -> Options {
    Options {
        threads: 1,
        shards: 2,
        limits: Limits::default(),
        group_commit: 8,
        memory: 32 << 20,
        store_name: "tx-undo".into(),
        auth: None,
        max_conns: 16,
        idle_timeout: None,
        tls: None,
    }
}

/// Fills a `tx-undo` pool file with `good0..good9` and `bad`.
fn fill(path: &std::path::Path) {
    let pool = Pool::create(
        path,
        &PoolOptions::new("ferrite-serve-tx", 16 << 20).domain(Domain::Adr),
    )
    .unwrap();
    let txp = tx::create(&pool, Strategy::Undo, 4).unwrap();
    let map = tx::map(&txp).unwrap();
    let mut kv = tx::TxKv::new(&map).unwrap();
    let sh = Shared::open(&mut kv, 1 << 20).unwrap();
    let mut c = Cache::new(kv, &sh);
    let o = StoreOpts::default();
    for i in 0..10 {
        let v = format!("good value {i}");
        c.store(
            StoreMode::Set,
            format!("good{i}").as_bytes(),
            3,
            0,
            v.as_bytes(),
            None,
            &o,
            NOW,
        )
        .unwrap();
    }
    c.store(
        StoreMode::Set,
        b"bad",
        3,
        0,
        b"the-damaged-one",
        None,
        &o,
        NOW,
    )
    .unwrap();
    drop(c);
    drop(map);
    drop(txp);
    pool.close().unwrap();
}

/// Flips one bit of the only occurrence of `needle` in the file.
fn flip(path: &std::path::Path, needle: &[u8]) {
    let mut img = std::fs::read(path).unwrap();
    let at: Vec<usize> = img
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "{needle:?} found at {at:?}");
    img[at[0] + 4] ^= 0x08;
    std::fs::write(path, img).unwrap();
}

struct Conn {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Conn {
    fn ask(&mut self, req: &[u8], lines: usize) -> String {
        self.w.write_all(req).unwrap();
        let mut out = String::new();
        for _ in 0..lines {
            self.r.read_line(&mut out).unwrap();
        }
        out
    }
}

#[test]
fn a_damaged_item_is_a_server_error_for_its_key_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.pool");
    fill(&path);
    flip(&path, b"the-damaged-one");

    let pool = Pool::open(&path, &PoolOptions::new("ferrite-serve-tx", 0)).unwrap();
    let txp = tx::open(&pool).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    std::thread::scope(|s| {
        let server = s.spawn(|| tx::serve(&txp, options(), listener, Some(stop_rx), |_| {}));
        let sock = TcpStream::connect(addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut c = Conn {
            r: BufReader::new(sock.try_clone().unwrap()),
            w: sock,
        };
        let bad = "SERVER_ERROR damaged item 'bad': checksum mismatch\r\n";
        assert_eq!(c.ask(b"get bad\r\n", 1), bad);
        assert_eq!(
            c.ask(b"get good1\r\n", 3),
            "VALUE good1 3 12\r\ngood value 1\r\nEND\r\n"
        );
        // A multi-get with the damaged key fails whole, as memcached
        // answers a get that fails: the error line alone, no END.
        assert_eq!(c.ask(b"get good2 bad good3\r\n", 1), bad);
        assert_eq!(
            c.ask(b"get good2 good3\r\n", 5),
            "VALUE good2 3 12\r\ngood value 2\r\nVALUE good3 3 12\r\ngood value 3\r\nEND\r\n"
        );
        assert_eq!(c.ask(b"gets bad\r\n", 1), bad);
        assert_eq!(c.ask(b"touch bad 100\r\n", 1), bad);
        assert_eq!(c.ask(b"gat 100 bad\r\n", 1), bad);
        assert_eq!(c.ask(b"incr bad 1\r\n", 1), bad);
        assert_eq!(c.ask(b"append bad 0 0 1\r\nx\r\n", 1), bad);
        assert_eq!(c.ask(b"prepend bad 0 0 1\r\nx\r\n", 1), bad);
        assert_eq!(c.ask(b"cas bad 0 0 1 5\r\nx\r\n", 1), bad);
        assert_eq!(c.ask(b"mg bad v\r\n", 1), bad);
        assert_eq!(c.ask(b"mg good4 v\r\n", 2), "VA 12\r\ngood value 4\r\n");
        // Binary get: status 0x84 (internal error), then a hit.
        let bin_get = |key: &[u8]| {
            let mut p = vec![0x80, 0x00];
            p.extend_from_slice(&(key.len() as u16).to_be_bytes());
            p.extend_from_slice(&[0, 0, 0, 0]);
            p.extend_from_slice(&(key.len() as u32).to_be_bytes());
            p.extend_from_slice(&[0; 12]);
            p.extend_from_slice(key);
            p
        };
        let read_packet = |c: &mut Conn| {
            let mut h = [0u8; 24];
            c.r.read_exact(&mut h).unwrap();
            let body = u32::from_be_bytes(h[8..12].try_into().unwrap()) as usize;
            let mut b = vec![0u8; body];
            c.r.read_exact(&mut b).unwrap();
            (u16::from_be_bytes([h[6], h[7]]), b)
        };
        c.w.write_all(&bin_get(b"bad")).unwrap();
        assert_eq!(read_packet(&mut c).0, 0x0084);
        c.w.write_all(&bin_get(b"good5")).unwrap();
        let (status, body) = read_packet(&mut c);
        assert_eq!(status, 0);
        assert!(body.ends_with(b"good value 5"));
        // A plain set repairs the key.
        assert_eq!(c.ask(b"set bad 0 0 2\r\nok\r\n", 1), "STORED\r\n");
        assert_eq!(c.ask(b"get bad\r\n", 3), "VALUE bad 0 2\r\nok\r\nEND\r\n");
        stop_tx.send(()).unwrap();
        server.join().unwrap().unwrap();
    });
}
