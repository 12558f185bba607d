//! A quick look at what one transaction costs: `W` random words of an
//! array updated per transaction, each algorithm under each domain, on a
//! pool in `/dev/shm` (or memory). Not a benchmark suite (see `ferrite
//! bench ptm`): a sanity check of the protocols' fence counts and speed.
//!
//! `cargo run --release -p ferrite-ptm --example micro -- [W] [TXS]`

use ferrite_pmem::{Domain, Pool, PoolOptions};
use ferrite_ptm::{Algorithm, Ptm, PtmOptions};
use std::time::Instant;

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers"))
        .collect();
    let w = args.first().copied().unwrap_or(8);
    let txs = args.get(1).copied().unwrap_or(200_000);
    let words = 1u64 << 16;
    for domain in [Domain::Adr, Domain::Eadr, Domain::Volatile] {
        for alg in Algorithm::ALL {
            let pool = Pool::create_in_memory(&PoolOptions::new("micro", 64 << 20).domain(domain))
                .expect("pool");
            let ptm = Ptm::create(&pool, &PtmOptions::new(alg)).expect("ptm");
            let mut th = ptm.thread().expect("thread");
            let root = ptm.root();
            let arr = th
                .atomic(|tx| {
                    let b = tx.alloc_zeroed((8 * words) as usize)?.raw();
                    tx.set(root, b)?;
                    Ok(b)
                })
                .expect("array");
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            let t0 = Instant::now();
            for _ in 0..txs {
                th.atomic(|tx| {
                    let mut y = x;
                    for _ in 0..w {
                        y ^= y << 13;
                        y ^= y >> 7;
                        y ^= y << 17;
                        let a = arr + 8 * (y % words);
                        let v = tx.load(a)?;
                        tx.store(a, v + 1)?;
                    }
                    Ok(())
                })
                .expect("tx");
                x = x.wrapping_add(0x2545_f491_4f6c_dd1d);
            }
            let dt = t0.elapsed();
            let s = th.stats();
            println!(
                "{:<9} {:<10} W={w}: {:>7.0} ns/tx, {:.2} fences/tx",
                domain.name(),
                alg.name(),
                dt.as_nanos() as f64 / txs as f64,
                s.fences as f64 / s.commits as f64
            );
        }
    }
}
