//! Short range reads through a snapshot (redb's `redb-range-read`
//! phase): `cargo run --release -p ferrite-engine --example range_read --
//! [N] [RANGES] [LEN] [ENGINE]` loads N pairs (24-byte keys, 150-byte values)
//! in one batch, then reads RANGES ranges of LEN pairs from random keys
//! through one [`Store::snapshot`], touching every value as redb's
//! benchmark does; prints ns per range and per pair for each engine.

use ferrite_engine::{Domain, EngineKind, KeyRange, Op, Store, StoreOptions};
use std::time::Instant;

fn key(i: u64) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
    k[8..16].copy_from_slice(&i.to_le_bytes());
    k
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: u64| args.get(i).map_or(Ok(d), |s| s.parse());
    let n = num(0, 1_000_000)?;
    let ranges = num(1, 200_000)?;
    let len = num(2, 10)? as usize;
    let kinds: Vec<EngineKind> = match args.get(3) {
        Some(s) => vec![EngineKind::parse(s).ok_or("engine: inp, cow or lsm")?],
        None => EngineKind::ALL.to_vec(),
    };
    let keys: Vec<[u8; 24]> = (0..n).map(key).collect();
    let value = [3u8; 150];
    let ops: Vec<Op<'_>> = keys
        .iter()
        .map(|k| Op::Put {
            key: k,
            value: &value,
        })
        .collect();
    for kind in kinds {
        let dir = tempfile::tempdir_in("/dev/shm")?;
        let store = Store::create_new(
            dir.path().join("p"),
            &StoreOptions::new(kind).domain(Domain::Adr),
        )?;
        store.batch(&ops)?;
        let mut snap = store.snapshot()?;
        let mut sum = 0u64;
        let mut pairs = 0u64;
        let t = Instant::now();
        for i in 0..ranges {
            let from = key(i.wrapping_mul(7919) % n);
            let mut left = len;
            pairs += snap.range_with(&KeyRange::new(from.as_slice()..), &mut |_, v| {
                sum = sum.wrapping_add(v[0] as u64 + v[v.len() - 1] as u64);
                left -= 1;
                left > 0
            })? as u64;
        }
        let secs = t.elapsed().as_secs_f64();
        println!(
            "{kind}: {ranges} ranges of {len}: {:.0} ns/range, {:.0} ns/pair (checksum {sum})",
            secs * 1e9 / ranges as f64,
            secs * 1e9 / pairs as f64
        );
    }
    Ok(())
}
