//! Replays a trace file written by `ferrite trace` on every core in all four
//! modes: `cargo run --release -p ferrite-sim --example replay -- FILE [cores] [cycles]`.
use ferrite_pmem::trace::Trace;
use ferrite_sim::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    let path = a.get(1).ok_or("usage: replay FILE [cores] [cycles]")?;
    let cores: usize = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(16);
    let cycles: u64 = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let t = Trace::from_bytes(&std::fs::read(path)?)?;
    let th = t
        .threads
        .iter()
        .max_by_key(|t| t.events.len())
        .ok_or("empty trace")?;
    let p = Program::from_trace(th, 2.0, 1);
    let progs: Vec<Program> = (0..cores)
        .map(|c| {
            let mut q = p.clone();
            let k = c * q.ops.len() / cores;
            q.ops.rotate_left(k);
            q
        })
        .collect();
    for m in Mode::ALL {
        let t0 = std::time::Instant::now();
        let s = simulate(&Config::table2(m), &progs, Run::Cycles(cycles))?;
        let secs = t0.elapsed().as_secs_f64();
        println!(
            "{:13} ipc {:.3} commits {} mean {:.0} syncs {} events {} ({:.2} M/s, {:.2} s)",
            m.name(),
            s.ipc(),
            s.commits(),
            s.mean_commit_cycles(),
            s.sync_reads,
            s.events,
            s.events as f64 / secs / 1e6,
            secs
        );
    }
    Ok(())
}
