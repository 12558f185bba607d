//! redb's extract-if and pop phases through a write transaction, the
//! transaction's own work timed apart from its commit: `cargo run
//! --release -p ferrite-engine --example txn_edges -- [N] [ENGINE]` loads N
//! pairs (24-byte keys, 150-byte values) in one batch, then (1) removes
//! every other pair of the keys `[0x55; 24]..[0xAA; 24]` with
//! `WriteTxn::extract_if` in one transaction, (2) pops N/10 pairs,
//! alternately the first and the last, in another; prints, per engine,
//! the time of the transaction's calls and of its commit. With a third
//! argument `aged`, the store first goes through what redb's benchmark
//! does to it before these phases: the first half of the pairs deleted in
//! one transaction, then every other remaining pair in key order (retain),
//! then as many fresh pairs inserted again.

mod common;

use common::key;
use ferrite_engine::KeyRange;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: u64 = args.first().map_or(Ok(1_000_000), |s| s.parse())?;
    let kinds = common::engines(args.get(1).map(String::as_str));
    let keys: Vec<[u8; 24]> = (0..n).map(key).collect();
    for kind in kinds {
        let (_dir, store) = common::loaded(kind, &keys)?;
        if args.get(2).is_some_and(|a| a == "aged") {
            let t = Instant::now();
            let mut txn = store.write()?;
            for k in &keys[..n as usize / 2] {
                txn.delete(k)?;
            }
            txn.commit()?;
            let mut txn = store.write()?;
            let mut i = 0u64;
            let gone = txn.retain(&KeyRange::all(), |_, _| {
                i += 1;
                i.is_multiple_of(2)
            })?;
            txn.commit()?;
            let mut txn = store.write()?;
            for j in 0..gone as u64 {
                txn.put(&key(n + j), &common::VALUE)?;
            }
            txn.commit()?;
            println!(
                "{kind}: aged in {:.3} s (retain removed {gone}); len {}",
                t.elapsed().as_secs_f64(),
                store.len()?
            );
        }
        let t = Instant::now();
        let mut txn = store.write()?;
        let mut i = 0u64;
        let range = KeyRange::new(&[0x55u8; 24][..]..&[0xAAu8; 24][..]);
        let got = txn.extract_if(&range, |_, _| {
            i += 1;
            i.is_multiple_of(2)
        })?;
        let calls = t.elapsed();
        let t = Instant::now();
        txn.commit()?;
        let commit = t.elapsed();
        println!(
            "{kind}: extract_if of {} pairs {:.3} s, commit {:.3} s ({:.0} ns per pair in all)",
            got.len(),
            calls.as_secs_f64(),
            commit.as_secs_f64(),
            (calls + commit).as_nanos() as f64 / got.len() as f64
        );
        let pops = n / 10;
        let t = Instant::now();
        let mut txn = store.write()?;
        for j in 0..pops {
            let p = if j.is_multiple_of(2) {
                txn.pop_first()?
            } else {
                txn.pop_last()?
            };
            assert!(p.is_some());
        }
        let calls = t.elapsed();
        let t = Instant::now();
        txn.commit()?;
        let commit = t.elapsed();
        println!(
            "{kind}: {pops} pops {:.3} s, commit {:.3} s ({:.0} ns per pop in all); len {}",
            calls.as_secs_f64(),
            commit.as_secs_f64(),
            (calls + commit).as_nanos() as f64 / pops as f64,
            store.len()?
        );
    }
    Ok(())
}
