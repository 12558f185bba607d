//! Point reads from several threads (redb's `redb-threaded-read` phase):
//! `cargo run --release -p ferrite-engine --example threaded_read -- [N]
//! [THREADS] [READS] [ENGINE]` loads N pairs in one batch, then THREADS
//! threads each take a [`Store::snapshot`] and read READS random keys;
//! prints the reads per second of all threads together, per engine
//! (median of 5 rounds).

mod common;

use common::key;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: u64| args.get(i).map_or(Ok(d), |s| s.parse::<u64>());
    let n = num(0, 1_000_000)?;
    let threads = num(1, 4)?;
    let reads = num(2, 250_000)?;
    let kinds = common::engines(args.get(3).map(String::as_str));
    let keys: Vec<[u8; 24]> = (0..n).map(key).collect();
    for kind in kinds {
        let (_dir, store) = common::loaded(kind, &keys)?;
        let mut rounds = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            std::thread::scope(|s| -> Result<(), ferrite_engine::EngineError> {
                let workers: Vec<_> = (0..threads)
                    .map(|th| {
                        let store = store.clone();
                        s.spawn(move || -> Result<(), ferrite_engine::EngineError> {
                            let mut snap = store.snapshot()?;
                            let mut out = Vec::new();
                            for i in 0..reads {
                                let k = key((i * 7919 + th * 104_729) % n);
                                assert!(snap.get_into(&k, &mut out)?);
                            }
                            Ok(())
                        })
                    })
                    .collect();
                for w in workers {
                    w.join().expect("reader")?;
                }
                Ok(())
            })?;
            rounds.push((threads * reads) as f64 / t.elapsed().as_secs_f64());
        }
        rounds.sort_by(|a, b| a.total_cmp(b));
        println!(
            "{kind}: {threads} threads x {reads} reads: median {:.0} reads/s (min {:.0}, max {:.0})",
            rounds[2], rounds[0], rounds[4]
        );
    }
    Ok(())
}
