//! The Rust half of the C-overhead benchmark (bench/overhead.sh): the same
//! N durable puts and N gets as c/bench.c, through the Rust API
//! (`Store::put`, `Store::get`); prints "rust put_ns=X get_ns=Y".
//! Usage: overhead POOL N OPTIONS

use std::time::Instant;

fn key_of(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    let s = format!("{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 8);
    k.copy_from_slice(s.as_bytes());
    k
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, path, n, opts] = &args[..] else {
        return Err("usage: overhead POOL N OPTIONS".into());
    };
    let n: u64 = n.parse()?;
    let _ = std::fs::remove_file(path);
    let o = ferrite::options::parse_options(Some(opts))?;
    let store = ferrite::options::open(path.as_ref(), &o)?;
    let val = [b'v'; 100];
    let t0 = Instant::now();
    for i in 0..n {
        // The key is formatted in the loop in both programs.
        store.put(&key_of(i), &val)?;
    }
    let t1 = Instant::now();
    let mut total = 0;
    for i in 0..n {
        total += store.get(&key_of(i))?.ok_or("missing")?.len();
    }
    let t2 = Instant::now();
    assert_eq!(total as u64, n * 100);
    println!(
        "rust put_ns={:.1} get_ns={:.1}",
        (t1 - t0).as_nanos() as f64 / n as f64,
        (t2 - t1).as_nanos() as f64 / n as f64
    );
    store.close()?;
    let _ = std::fs::remove_file(path);
    Ok(())
}
