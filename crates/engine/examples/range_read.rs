//! Short range reads through a snapshot (redb's `redb-range-read`
//! phase): `cargo run --release -p ferrite-engine --example range_read --
//! [N] [RANGES] [LEN] [ENGINE]` loads N pairs (24-byte keys, 150-byte values)
//! in one batch, then reads RANGES ranges of LEN pairs from random keys
//! through one [`Store::snapshot`], touching every value as redb's
//! benchmark does; prints ns per range and per pair for each engine.

mod common;

use common::key;
use ferrite_engine::{EngineKind, KeyRange};
use std::time::Instant;

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
    for kind in kinds {
        let (_dir, store) = common::loaded(kind, &keys)?;
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
