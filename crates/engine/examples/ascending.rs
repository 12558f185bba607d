//! Ascending inserts (redb's `redb-sorted` phase): `cargo run --release
//! -p ferrite-engine --example ascending -- [N] [M] [POPS] [THIN] [ENGINE]` loads N random
//! 24-byte keys with 150-byte values in one batch, removes every other key in one batch when THIN is 1, pops POPS pairs (default 0) alternately from each end in
//! one transaction (as redb's pop phase before its sorted one), then inserts M keys
//! past every key, in ascending order, in one write transaction; prints,
//! per engine, the load and the ascending commit times and the ascending
//! keys per second. A store that appends (every new key lands in the
//! last leaf) should take them about as fast as a random batch of M.

mod common;

use ferrite_engine::{Domain, Op, Store, StoreOptions};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .take(4)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let n = args.first().copied().unwrap_or(1_000_000);
    let m = args.get(1).copied().unwrap_or(200_000);
    let pops = args.get(2).copied().unwrap_or(0);
    let thin = args.get(3).copied().unwrap_or(0) != 0;
    let keys: Vec<[u8; 24]> = (0..n)
        .map(|i| {
            let mut k = [0u8; 24];
            k[..8].copy_from_slice(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
            k[8..16].copy_from_slice(&i.to_le_bytes());
            // Below the ascending keys' 0xFF prefix.
            k[0] &= 0x7f;
            k
        })
        .collect();
    let value = [9u8; 150];
    let ops: Vec<Op<'_>> = keys
        .iter()
        .map(|k| Op::Put {
            key: k,
            value: &value,
        })
        .collect();
    let ascending: Vec<Vec<u8>> = (0..m)
        .map(|i| {
            let mut k = vec![0xFFu8; 32];
            k[24..].copy_from_slice(&i.to_be_bytes());
            k
        })
        .collect();
    let kinds = common::engines(std::env::args().nth(5).as_deref());
    for kind in kinds {
        let dir = tempfile::tempdir_in("/dev/shm")?;
        let store = Store::create_new(
            dir.path().join("p"),
            &StoreOptions::new(kind).domain(Domain::Adr),
        )?;
        let t = Instant::now();
        store.batch(&ops)?;
        let load = t.elapsed();
        if thin {
            // As redb's removal phase: every other key, one transaction.
            let t = Instant::now();
            let dels: Vec<Op<'_>> = keys
                .iter()
                .step_by(2)
                .map(|k| Op::Delete { key: k })
                .collect();
            store.batch(&dels)?;
            println!(
                "{kind}: removed {} keys {:.3} s",
                dels.len(),
                t.elapsed().as_secs_f64()
            );
        }
        if pops > 0 {
            let t = Instant::now();
            let mut txn = store.write()?;
            for i in 0..pops {
                let p = if i % 2 == 0 {
                    txn.pop_first()?
                } else {
                    txn.pop_last()?
                };
                assert!(p.is_some());
            }
            txn.commit()?;
            println!("{kind}: {pops} pops {:.3} s", t.elapsed().as_secs_f64());
        }
        let t = Instant::now();
        let mut txn = store.write()?;
        for k in &ascending {
            txn.put(k, &value)?;
        }
        txn.commit()?;
        let asc = t.elapsed();
        println!(
            "{kind}: load {n} random {:.2} s; {m} ascending in one transaction {:.3} s ({:.0} keys/s); len {}",
            load.as_secs_f64(),
            asc.as_secs_f64(),
            m as f64 / asc.as_secs_f64(),
            store.len()?
        );
    }
    Ok(())
}
