//! Single-put throughput after a bulk load ÷ the same on a fresh store
//! (issue 26's long-run row): `cargo run --release -p ferrite-engine
//! --example long_run -- ENGINE N [BATCH] [PUTS]` loads N keys (24 B,
//! 150 B values) in batches of BATCH (default N: one batch), then times
//! PUTS (default 20 000) durable single puts of new keys; the same on a
//! fresh store first.

use ferrite_engine::{EngineKind, Op, Store, StoreOptions};
use std::time::Instant;

fn key(i: u64) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
    k[8..16].copy_from_slice(&i.to_le_bytes());
    k
}

fn puts(store: &Store, from: u64, n: u64) -> Result<f64, ferrite_engine::EngineError> {
    let v = [3u8; 150];
    let t = Instant::now();
    for i in from..from + n {
        store.put(&key(i), &v)?;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let engine = EngineKind::parse(args.get(1).map_or("lsm", String::as_str))
        .ok_or("engine: inp, cow or lsm")?;
    let n: u64 = args.get(2).map_or(Ok(1_000_000), |s| s.parse())?;
    let batch: u64 = args.get(3).map_or(Ok(n), |s| s.parse())?;
    let singles: u64 = args.get(4).map_or(Ok(20_000), |s| s.parse())?;
    let path = std::path::Path::new("/dev/shm").join(format!("long-run-{engine}.pool"));
    let opts = StoreOptions::new(engine);
    let _ = std::fs::remove_file(&path);
    let fresh = {
        let s = Store::open_or_create(&path, &opts)?;
        let r = puts(&s, 1 << 40, singles)?;
        s.close()?;
        r
    };
    std::fs::remove_file(&path)?;
    let store = Store::open_or_create(&path, &opts)?;
    let v = [7u8; 150];
    let t = Instant::now();
    let mut i = 0;
    while i < n {
        let end = (i + batch).min(n);
        let keys: Vec<[u8; 24]> = (i..end).map(key).collect();
        let ops: Vec<Op<'_>> = keys.iter().map(|k| Op::Put { key: k, value: &v }).collect();
        store.batch(&ops)?;
        i = end;
    }
    let load = t.elapsed();
    let after = puts(&store, 1 << 40, singles)?;
    println!(
        "{engine}: {n} keys loaded in batches of {batch} in {:.1} s; single puts fresh {:.0}/s, after the load {:.0}/s: {:.2}x",
        load.as_secs_f64(),
        fresh,
        after,
        after / fresh
    );
    if std::env::var_os("LONG_RUN_DETAIL").is_some() {
        println!("{}", store.stats().detail);
    }
    store.close()?;
    std::fs::remove_file(&path)?;
    Ok(())
}
