//! What a growth costs, and whether readers notice: a growable pool file
//! grows from 1 MiB to 4 GiB in 50 % steps (the heap's policy above 2 MiB)
//! while a reader thread reads random lines of what is mapped.
//! `cargo run --release -p ferrite-pmem --example growth_cost [DIR]`
//! (default /dev/shm). Prints the growths' median and total time and the
//! reader's throughput during and after them.

use ferrite_pmem::{Pool, PoolOptions};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "/dev/shm".into());
    let path = std::path::Path::new(&dir).join("growth-cost.pool");
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(
        &path,
        &PoolOptions::new("growth", 1 << 20).max_size(8 << 30),
    )?;
    let medium = pool.medium().clone();
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let reader = {
        let (m, stop, reads) = (medium.clone(), stop.clone(), reads.clone());
        std::thread::spawn(move || {
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            let mut buf = [0u8; 64];
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..1024 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let len = m.map().mapped();
                    let off = (x as usize % (len / 64)) * 64;
                    m.map().read(off, &mut buf);
                }
                reads.fetch_add(1024, Ordering::Relaxed);
            }
        })
    };
    let mut times = Vec::new();
    let mut now = 1usize << 20;
    let t0 = Instant::now();
    while now < 4 << 30 {
        let want = (now + now / 2).min(4 << 30);
        let t = Instant::now();
        now = medium.grow_to(want)?;
        times.push(t.elapsed());
        // Touch the new part, as an allocator would.
        medium.map().write(now - 64, &[1u8; 64]);
    }
    let during = t0.elapsed();
    let r_during = reads.swap(0, Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(300));
    let r_after = reads.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    reader.join().expect("reader");
    times.sort();
    let total: Duration = times.iter().sum();
    println!(
        "{} growths 1 MiB -> 4 GiB: median {:.0} us, max {:.0} us, total {:.1} ms; reader {:.1} M lines/s during, {:.1} M lines/s after",
        times.len(),
        times[times.len() / 2].as_secs_f64() * 1e6,
        times[times.len() - 1].as_secs_f64() * 1e6,
        total.as_secs_f64() * 1e3,
        r_during as f64 / during.as_secs_f64() / 1e6,
        r_after as f64 / 0.3 / 1e6,
    );
    drop(medium);
    pool.close()?;
    std::fs::remove_file(&path)?;
    Ok(())
}
