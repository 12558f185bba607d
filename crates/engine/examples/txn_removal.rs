//! redb's removal phase through a write transaction: `cargo run --release
//! -p ferrite-engine --example txn_removal -- [N] [ENGINE]` loads N pairs
//! (24-byte keys, 150-byte values) in one batch, then removes every other
//! key with `WriteTxn::delete` (which reads the key, as redb's `remove`
//! returns the old value) in one transaction; prints the time of the
//! deletes and of the commit per engine.

mod common;

use common::key;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: u64 = args.first().map_or(Ok(1_000_000), |s| s.parse())?;
    let kinds = common::engines(args.get(1).map(String::as_str));
    let keys: Vec<[u8; 24]> = (0..n).map(key).collect();
    for kind in kinds {
        let (_dir, store) = common::loaded(kind, &keys)?;
        let t = Instant::now();
        let mut txn = store.write()?;
        for k in keys.iter().step_by(2) {
            assert!(txn.delete(k)?);
        }
        let deletes = t.elapsed();
        let t = Instant::now();
        txn.commit()?;
        let commit = t.elapsed();
        println!(
            "{kind}: {} deletes {:.3} s ({:.0} ns each), commit {:.3} s; len {}",
            n / 2,
            deletes.as_secs_f64(),
            deletes.as_nanos() as f64 / (n / 2) as f64,
            commit.as_secs_f64(),
            store.len()?
        );
    }
    Ok(())
}
