//! One batch of N puts (redb's benchmark shapes: 24-byte keys, 150-byte
//! values) committed as one transaction, then the store reopened and
//! checked: `cargo run --release -p ferrite-engine --example big_batch --
//! ENGINE N [DIR]` (default 5000000 in /dev/shm). Prints the commit time,
//! the reopen (recovery) time and the file size; then removes every other
//! key in one more batch (redb's removal phase is half the table in one
//! transaction) and prints its time.

use ferrite_engine::{EngineKind, Op, Store, StoreOptions};
use std::time::Instant;

fn key(i: u64) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
    k[8..16].copy_from_slice(&i.to_le_bytes());
    k
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let engine = EngineKind::parse(args.get(1).map_or("inp", String::as_str))
        .ok_or("engine: inp, cow or lsm")?;
    let n: u64 = args.get(2).map_or(Ok(5_000_000), |s| s.parse())?;
    let dir = args.get(3).map_or("/dev/shm", String::as_str);
    let path = std::path::Path::new(dir).join(format!("big-batch-{engine}.pool"));
    let _ = std::fs::remove_file(&path);
    let opts = StoreOptions::new(engine);
    let store = Store::open_or_create(&path, &opts)?;
    let keys: Vec<[u8; 24]> = (0..n).map(key).collect();
    let value = [7u8; 150];
    let ops: Vec<Op<'_>> = keys
        .iter()
        .map(|k| Op::Put {
            key: k,
            value: &value,
        })
        .collect();
    let t = Instant::now();
    store.batch(&ops)?;
    let commit = t.elapsed();
    drop(ops);
    store.close()?;
    let t = Instant::now();
    let store = Store::open_file(&path, &opts)?;
    let reopen = t.elapsed();
    let len = store.len()?;
    let sample = (0..n).step_by((n as usize / 1000).max(1));
    let mut found = 0;
    for i in sample.clone() {
        found += usize::from(store.get(&key(i))?.as_deref() == Some(&value[..]));
    }
    let size = std::fs::metadata(&path)?.len();
    let dels: Vec<Op<'_>> = keys
        .iter()
        .step_by(2)
        .map(|k| Op::Delete { key: k })
        .collect();
    let t = Instant::now();
    store.batch(&dels)?;
    let removal = t.elapsed();
    let left = store.len()?;
    println!(
        "{engine}: one batch of {n} puts committed in {:.1} s ({:.0} keys/s); reopened in {:.2} s: {len} keys, {found}/{} sampled found; file {} MiB",
        commit.as_secs_f64(),
        n as f64 / commit.as_secs_f64(),
        reopen.as_secs_f64(),
        sample.count(),
        size >> 20
    );
    println!(
        "{engine}: one batch removing {} keys in {:.1} s ({:.0} keys/s); {left} left",
        dels.len(),
        removal.as_secs_f64(),
        dels.len() as f64 / removal.as_secs_f64()
    );
    store.close()?;
    std::fs::remove_file(&path)?;
    if len != n {
        return Err(format!("{len} keys after reopen, not {n}").into());
    }
    if left != n - dels.len() as u64 {
        return Err(format!(
            "{left} keys after the removal, not {}",
            n - dels.len() as u64
        )
        .into());
    }
    Ok(())
}
