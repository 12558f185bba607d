//! What the item checksums cost the server's store layer (issue 27):
//! `cargo run --release -p ferrite-server --example item_crc_cost [REPS]`.
//!
//! For each store (`tx-undo`, `ptm-lazy`, `engine-inp`, `engine-lsm`,
//! `engine-cow`; pool files in /dev/shm, domain `adr`: flushes and
//! fences as on persistent memory) and value size (64 B, 1 KiB), 20 000
//! items are loaded through the server's [`Cache`], then rounds alternate
//! verification on and off ([`Shared::set_verify`]), REPS rounds each
//! (default 31), each round 5 000 random gets then 1 000 random sets
//! (a set reads the old item first, so it verifies too). Printed: the
//! median ns per get and per set with verification on and off, the median
//! of the on/off ratios of each pair of rounds and their middle half
//! (25th..75th percentile: the noise),
//! fences per set (both ways: the checksum is written inside the item,
//! so none is added), and, alone, encoding one item with its CRC32C and
//! decoding it with and without verification.
//!
//! Items are always written with their checksum (the format has it);
//! "off" skips the verification of reads only. The checksum computed at
//! write time is the last column, measured alone.

use ferrite_engine::{EngineKind, Store as Engine, StoreOptions};
use ferrite_pmem::{Counters, Domain, Pool, PoolOptions};
use ferrite_ptm::{Algorithm, Ptm, PtmOptions};
use ferrite_server::protocol::{StoreMode, StoreOpts};
use ferrite_server::store::{Cache, Item, Kv, Shared, Store, engine, ptm, tx};
use std::time::Instant;

const ITEMS: usize = 20_000;
const GETS: usize = 5_000;
const SETS: usize = 1_000;
const NOW: u64 = 1_800_000_000;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("key:{i:012}").into_bytes()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// (ns per get, ns per set, fences per set) of one round.
fn round<K: Kv>(c: &mut Cache<'_, K>, value: &[u8], rng: &mut Rng) -> (f64, f64, f64) {
    let t = Instant::now();
    let mut found = 0;
    for _ in 0..GETS {
        let k = key(rng.next() % ITEMS as u64);
        found += c.get(&k, NOW).unwrap().is_some() as usize;
    }
    let get = t.elapsed().as_nanos() as f64 / GETS as f64;
    assert_eq!(found, GETS);
    let before = Counters::snapshot();
    let t = Instant::now();
    for _ in 0..SETS {
        let k = key(rng.next() % ITEMS as u64);
        c.store(
            StoreMode::Set,
            &k,
            0,
            0,
            value,
            None,
            &StoreOpts::default(),
            NOW,
        )
        .unwrap();
        c.settle(true);
    }
    let set = t.elapsed().as_nanos() as f64 / SETS as f64;
    let per = (Counters::snapshot() - before).per_op(SETS as u64);
    (get, set, per.fences)
}

fn measure<K: Kv>(name: &str, mut c: Cache<'_, K>, sh: &Shared, vlen: usize, reps: usize) {
    let value = vec![0x61u8; vlen];
    for i in 0..ITEMS as u64 {
        c.store(
            StoreMode::Set,
            &key(i),
            0,
            0,
            &value,
            None,
            &StoreOpts::default(),
            NOW,
        )
        .unwrap();
        c.settle(true);
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // Warm-up round, not counted.
    round(&mut c, &value, &mut rng);
    let (mut on_get, mut off_get, mut on_set, mut off_set) = (vec![], vec![], vec![], vec![]);
    let (mut gr, mut sr) = (vec![], vec![]);
    let (mut f_on, mut f_off) = (0.0, 0.0);
    for rep in 0..reps {
        // Alternate which goes first, so a drift favours neither.
        let order = if rep % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        let mut pair = [(0.0, 0.0); 2];
        for on in order {
            sh.set_verify(on);
            let (g, s, f) = round(&mut c, &value, &mut rng);
            pair[on as usize] = (g, s);
            if on {
                on_get.push(g);
                on_set.push(s);
                f_on = f;
            } else {
                off_get.push(g);
                off_set.push(s);
                f_off = f;
            }
        }
        gr.push(pair[1].0 / pair[0].0);
        sr.push(pair[1].1 / pair[0].1);
    }
    sh.set_verify(true);
    // The middle half of the per-pair ratios: the noise between rounds.
    let span = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        format!("{:.3}..{:.3}", v[v.len() / 4], v[v.len() * 3 / 4])
    };
    // The CRC of one item alone (what every write computes).
    let it = Item {
        flags: 0,
        exptime: 0,
        cas: 1,
        time: NOW,
        stale: false,
        token_sent: false,
        data: value.clone(),
    };
    let mut buf = Vec::new();
    let n = 200_000;
    let t = Instant::now();
    for _ in 0..n {
        it.encode(b"kkey:000000000001", &mut buf);
        std::hint::black_box(&buf);
    }
    let enc = t.elapsed().as_nanos() as f64 / n as f64;
    // Verifying one item alone, and decoding it without verifying.
    let mk = b"kkey:000000000001";
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(Item::decode_header(mk, std::hint::black_box(&buf)).unwrap());
    }
    let ver = t.elapsed().as_nanos() as f64 / n as f64;
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(
            Item::decode_header_unverified(mk, std::hint::black_box(&buf)).unwrap(),
        );
    }
    let unver = t.elapsed().as_nanos() as f64 / n as f64;
    let (og, fg, os, fs) = (
        median(&mut on_get),
        median(&mut off_get),
        median(&mut on_set),
        median(&mut off_set),
    );
    println!(
        "{name:<11} {vlen:>5} B | get on {og:>7.0} off {fg:>7.0} ns  ratio {:.3} (pairs {}) | set on {os:>7.0} off {fs:>7.0} ns  ratio {:.3} (pairs {}) | fences/set on {f_on:.2} off {f_off:.2} | encode with CRC {enc:.0} ns, decode verified {ver:.0} / unverified {unver:.0} ns",
        median(&mut gr.clone()),
        span(&gr),
        median(&mut sr.clone()),
        span(&sr),
    );
}

fn main() {
    let reps: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(31);
    let dir = std::path::Path::new("/dev/shm");
    for vlen in [64usize, 1024] {
        for store in [
            "tx-undo",
            "ptm-lazy",
            "engine-inp",
            "engine-lsm",
            "engine-cow",
        ] {
            let path = dir.join(format!("item-crc-cost-{}-{store}.pool", std::process::id()));
            let _ = std::fs::remove_file(&path);
            let layout = match store {
                "tx-undo" => "ferrite-serve-tx",
                "ptm-lazy" => "ferrite-serve-ptm-lazy",
                _ => ferrite_engine::LAYOUT,
            };
            let pool = Pool::create(
                &path,
                &PoolOptions::new(layout, 256 << 20).domain(Domain::Adr),
            )
            .unwrap();
            match store {
                "tx-undo" => {
                    let txp = tx::create(&pool, ferrite_tx::Strategy::Undo, 4).unwrap();
                    let map = tx::map(&txp).unwrap();
                    let mut kv = tx::TxKv::new(&map).unwrap();
                    let sh = Shared::open(&mut kv, 1 << 20).unwrap();
                    measure(store, Cache::new(kv, &sh), &sh, vlen, reps);
                }
                "ptm-lazy" => {
                    let p = Ptm::create(&pool, &PtmOptions::new(Algorithm::Lazy).slots(4)).unwrap();
                    let map = ptm::open_map(&p).unwrap();
                    let mut kv = ptm::PtmKv::new(&p, map).unwrap();
                    let sh = Shared::open(&mut kv, 1 << 20).unwrap();
                    measure(store, Cache::new(kv, &sh), &sh, vlen, reps);
                }
                _ => {
                    let kind = EngineKind::parse(store.trim_start_matches("engine-")).unwrap();
                    let e = Engine::create(&pool, &StoreOptions::new(kind).sessions(4)).unwrap();
                    let mut kv = engine::EngineKv::new(Box::new(e.session().unwrap()));
                    let sh = Shared::open(&mut kv, 1 << 20).unwrap();
                    measure(store, Cache::new(kv, &sh), &sh, vlen, reps);
                    drop(sh);
                    e.close().unwrap();
                }
            }
            pool.close().unwrap();
            std::fs::remove_file(&path).unwrap();
        }
    }
}
