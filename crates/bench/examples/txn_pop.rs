//! Pops inside one write transaction slow down with the pops made before
//! them: `cargo run --release -p ferrite-bench --example txn_pop -- [N]
//! [POPS]` loads N pairs (24-byte random keys, 150-byte values) into a
//! store of each engine, then in one `Store::write` transaction pops
//! POPS times alternately the first and the last pair, printing the pace
//! of each tenth of them. A pop reads the store from its end and steps
//! over the keys the transaction already deleted (its buffered writes
//! are merged over the store, and a chunk of pairs is copied per pop), so
//! pop k costs O(k): the whole is quadratic (redb-pop of issue 26).

use ferrite_engine::{Domain, EngineKind, Op, Store, StoreOptions};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let n = args.first().copied().unwrap_or(100_000);
    let pops = args.get(1).copied().unwrap_or(10_000);
    let mut rng = fastrand::Rng::with_seed(3);
    let pairs: Vec<([u8; 24], [u8; 150])> = (0..n)
        .map(|_| {
            let (mut k, mut v) = ([0u8; 24], [0u8; 150]);
            rng.fill(&mut k);
            rng.fill(&mut v);
            (k, v)
        })
        .collect();
    let ops: Vec<Op<'_>> = pairs
        .iter()
        .map(|(k, v)| Op::Put { key: k, value: v })
        .collect();
    for kind in EngineKind::ALL {
        let dir = tempfile::tempdir_in("/dev/shm")?;
        let store = Store::create_new(
            dir.path().join("p"),
            &StoreOptions::new(kind).domain(Domain::Adr),
        )?;
        store.batch(&ops)?;
        let mut txn = store.write()?;
        let tenth = (pops / 10).max(1);
        let mut paces = Vec::new();
        let mut t = Instant::now();
        for i in 0..pops {
            let p = if i % 2 == 0 {
                txn.pop_first()?
            } else {
                txn.pop_last()?
            };
            assert!(p.is_some());
            if (i + 1) % tenth == 0 {
                paces.push(format!("{:.0}", tenth as f64 / t.elapsed().as_secs_f64()));
                t = Instant::now();
            }
        }
        txn.commit()?;
        println!(
            "{kind}: {n} pairs, {pops} pops in one transaction, pops/s per tenth: {}",
            paces.join(" ")
        );
        assert_eq!(store.len()?, n - pops);
    }
    Ok(())
}
