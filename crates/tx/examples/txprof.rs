//! Profiling driver (temporary): YCSB-like inserts into each strategy's
//! structure, interleaved in rounds; reports the best round (robust to
//! other tenants) per strategy.
use ferrite_pmem::{Domain, Pool, PoolOptions};
use ferrite_tx::ds::{self, DsOptions, KvMap, Structure};
use ferrite_tx::{Strategy, TxOptions, TxPool};
use std::time::Instant;

fn main() {
    let s = Structure::parse(&std::env::args().nth(1).unwrap_or("hashmap".into())).unwrap();
    let n: u64 = std::env::args()
        .nth(2)
        .map(|x| x.parse().unwrap())
        .unwrap_or(200_000);
    let rounds: u64 = std::env::var("ROUNDS").map_or(10, |v| v.parse().unwrap());
    let buckets = std::env::var("BUCKETS").map_or(16, |v| v.parse().unwrap());
    let strategies: Vec<Strategy> = std::env::var("STRATS")
        .map(|v| v.split(',').map(|x| Strategy::parse(x).unwrap()).collect())
        .unwrap_or(Strategy::ALL.to_vec());
    let pools: Vec<Pool> = strategies
        .iter()
        .map(|_| {
            let p = Pool::create_in_memory(
                &PoolOptions::new("p", n * 900 + (128 << 20)).domain(Domain::Adr),
            )
            .unwrap();
            let d = p.data();
            d.fill(0, d.len(), 0);
            p
        })
        .collect();
    let txps: Vec<TxPool> = strategies
        .iter()
        .zip(&pools)
        .map(|(&st, p)| TxPool::create(p, &TxOptions::new(st).slots(2), ds::registry()).unwrap())
        .collect();
    let mut ths: Vec<_> = txps.iter().map(|t| t.thread().unwrap()).collect();
    let maps: Vec<Box<dyn KvMap + '_>> = ths
        .iter_mut()
        .map(|th| {
            ds::create(
                s,
                th,
                DsOptions {
                    buckets,
                    ..DsOptions::default()
                },
            )
            .unwrap()
        })
        .collect();
    let v = [7u8; 256];
    let per = n / rounds;
    let mut best = vec![f64::MAX; strategies.len()];
    for r in 0..rounds {
        for i in 0..strategies.len() {
            let t0 = Instant::now();
            for q in r * per..(r + 1) * per {
                maps[i].insert(&mut ths[i], ds::mix64(q), &v).unwrap();
            }
            let ns = t0.elapsed().as_nanos() as f64 / per as f64;
            best[i] = best[i].min(ns);
        }
    }
    for (i, st) in strategies.iter().enumerate() {
        let s0 = ths[i].stats();
        println!(
            "{st:8} {s}: best {:6.0} ns/insert  fences/tx {:.2} log_entries/tx {:.2}",
            best[i],
            s0.fences as f64 / s0.txs as f64,
            s0.log_entries as f64 / s0.txs as f64
        );
    }
}
