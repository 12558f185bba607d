//! redb's removal phase through a write transaction: `cargo run --release
//! -p ferrite-engine --example txn_removal -- [N] [ENGINE]` loads N pairs
//! (24-byte keys, 150-byte values) in one batch, then removes every other
//! key with `WriteTxn::delete` (which reads the key, as redb's `remove`
//! returns the old value) in one transaction; prints the time of the
//! deletes and of the commit per engine.

use ferrite_engine::{Domain, EngineKind, Op, Store, StoreOptions};
use std::time::Instant;

fn key(i: u64) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
    k[8..16].copy_from_slice(&i.to_le_bytes());
    k
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: u64 = args.first().map_or(Ok(1_000_000), |s| s.parse())?;
    let only = args.get(1).and_then(|e| EngineKind::parse(e));
    let keys: Vec<[u8; 24]> = (0..n).map(key).collect();
    let value = [5u8; 150];
    let ops: Vec<Op<'_>> = keys
        .iter()
        .map(|k| Op::Put {
            key: k,
            value: &value,
        })
        .collect();
    for kind in EngineKind::ALL
        .into_iter()
        .filter(|k| only.is_none_or(|o| o == *k))
    {
        let dir = tempfile::tempdir_in("/dev/shm")?;
        let store = Store::create_new(
            dir.path().join("p"),
            &StoreOptions::new(kind).domain(Domain::Adr),
        )?;
        store.batch(&ops)?;
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
