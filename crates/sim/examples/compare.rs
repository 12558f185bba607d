//! Prints global vs fine-grained vs adr vs eadr on the synthetic workload
//! (compute per memory op: lo..=3·lo instructions, default 100):
//! `cargo run --release -p ferrite-sim --example compare -- [cores] [commit_every] [cycles] [lo]`.
use ferrite_sim::*;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let cores: usize = a.get(1).and_then(|s| s.parse().ok()).unwrap_or(16);
    let every: u32 = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    let cycles: u64 = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(2_000_000);
    let lo: u32 = a.get(4).and_then(|s| s.parse().ok()).unwrap_or(100);
    let syn = Synthetic {
        commit_every: every,
        compute: (lo, lo * 3),
        ..Synthetic::default()
    };
    let progs: Vec<Program> = (0..cores).map(|c| synthetic(&syn, 1, c)).collect();
    for m in Mode::ALL {
        let t = std::time::Instant::now();
        let s = simulate(&Config::table2(m), &progs, Run::Cycles(cycles)).unwrap();
        let secs = t.elapsed().as_secs_f64();
        println!(
            "{:13} ipc {:.3} commits {} mean {:.0} p99 {} syncs {} (commit {} credit {}) mreads {} mwrites {} stall {} events {} ({:.1} M/s)",
            m.name(),
            s.ipc(),
            s.commits(),
            s.mean_commit_cycles(),
            s.commit_quantile(0.99),
            s.sync_reads,
            s.commit_syncs,
            s.credit_syncs,
            s.media_reads,
            s.media_writes,
            s.write_stall_cycles,
            s.events,
            s.events as f64 / secs / 1e6
        );
    }
}
