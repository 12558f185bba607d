//! What a run measured.

use crate::config::Mode;

/// Statistics of one run. Two runs of the same programs and configuration
/// give equal `Stats` (the model is deterministic).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    pub mode: Mode,
    pub cores: usize,
    /// Simulated cycles: the budget, or (run to completion) when the last
    /// core finished its program.
    pub cycles: u64,
    /// Instructions retired per core within `cycles`.
    pub instructions: Vec<u64>,
    /// Commit latencies in cycles, in completion order: from the commit
    /// op's start (its implicit fence included) to its completion.
    pub commit_latencies: Vec<u64>,
    /// Credit-synchronisation reads the memory controller sent to the NVM
    /// controller: `commit_syncs + credit_syncs`.
    pub sync_reads: u64,
    /// Sync reads that confirmed a commit (global: one per commit period).
    pub commit_syncs: u64,
    /// Sync reads sent because a sub-queue's credit reached 0.
    pub credit_syncs: u64,
    /// Loads executed, stores executed (ordinary and non-temporal).
    pub loads: u64,
    pub stores: u64,
    /// Reads performed by the media; lines the media wrote.
    pub media_reads: u64,
    pub media_writes: u64,
    /// Media write operations, one per media block written
    /// ([`NvmProfile::block_lines`](crate::NvmProfile::block_lines) lines
    /// at most, combined in the write queue); equals `media_writes` when a
    /// block is one line (PCM).
    pub media_blocks: u64,
    /// Media block writes that covered only part of their block: the
    /// media read-modify-writes the block (P0 §2.3, Optane's 256-byte
    /// XPLine), so they cost a whole block's time.
    pub media_partial_blocks: u64,
    /// Cycle at which the last media write completed.
    pub last_write_done: u64,
    /// Cycles cores spent blocked on writes: a full write buffer, a fence,
    /// or a commit.
    pub write_stall_cycles: u64,
    /// Events the model processed.
    pub events: u64,
}

impl Stats {
    /// Aggregate instructions per cycle over all cores (P4 Fig. 8's metric).
    pub fn ipc(&self) -> f64 {
        if self.cycles == 0 {
            0.0
        } else {
            self.instructions.iter().sum::<u64>() as f64 / self.cycles as f64
        }
    }

    pub fn commits(&self) -> u64 {
        self.commit_latencies.len() as u64
    }

    /// Mean commit latency in cycles (0 without commits).
    pub fn mean_commit_cycles(&self) -> f64 {
        if self.commit_latencies.is_empty() {
            0.0
        } else {
            self.commit_latencies.iter().sum::<u64>() as f64 / self.commit_latencies.len() as f64
        }
    }

    /// The `p`-quantile (0..=1) of commit latency, nearest rank.
    pub fn commit_quantile(&self, p: f64) -> u64 {
        if self.commit_latencies.is_empty() {
            return 0;
        }
        let mut v = self.commit_latencies.clone();
        v.sort_unstable();
        let rank = ((p.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1]
    }

    /// Media write bandwidth over the run, bytes per cycle.
    pub fn write_bytes_per_cycle(&self) -> f64 {
        if self.last_write_done == 0 {
            0.0
        } else {
            self.media_writes as f64 * 64.0 / self.last_write_done as f64
        }
    }
}
