//! What is simulated: the machine of P4 Table II, the media profile and the
//! commit mode.
//!
//! Time is counted in core cycles at [`Config::ghz`] (2.7 GHz in Table II);
//! nanosecond figures are converted once, rounding up.

use std::fmt;

/// How software makes data durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// PCOMMIT-style [P4 §II-B, Fig. 2b]: a commit stops the memory
    /// controller from accepting writes from *every* core until every write
    /// queue has drained and the media has completed every write, then one
    /// credit-synchronisation read confirms it. Commits that arrive while a
    /// period runs join it (their writes were accepted before it began,
    /// since none are accepted during one).
    Global,
    /// P4's per-task committing [§III]: each task's range is bound to a
    /// write sub-queue (`PersistenceMalloc`); a commit
    /// (`PersistenceCommit`) stops only that sub-queue from accepting
    /// writes until it is empty and its credit is back at the maximum.
    /// Commits of tasks sharing a sub-queue serialise (`Lock(q)`).
    FineGrained,
    /// x86 with ADR: the write queues are in the persistence domain, so a
    /// commit is `clwb` + `sfence`: durable once the memory controller has
    /// accepted the core's writes.
    Adr,
    /// x86 with eADR: caches are persistent too; flushes are dropped, a
    /// commit is only an `sfence` (non-temporal stores still need one).
    Eadr,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::Global, Mode::FineGrained, Mode::Adr, Mode::Eadr];

    /// The name used in bench rows (`variant`).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Global => "global",
            Mode::FineGrained => "fine-grained",
            Mode::Adr => "adr",
            Mode::Eadr => "eadr",
        }
    }

    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == s)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Timing of the non-volatile medium behind the memory controller.
///
/// Each access occupies one bank for `*_busy_ns` and completes after
/// `*_ns`; each 64-byte line it transfers also occupies its channel's data
/// bus for [`Config::bus_ns`].
///
/// Writes reach the media in blocks of `block_lines` aligned lines: a
/// line written while a write of its block still waits in the same write
/// queue joins that entry (write combining), and one media write —
/// `write_busy_ns` whatever its line count — writes the block. A block
/// write that covers fewer than `block_lines` lines is a read-modify-write
/// inside the media, counted in
/// [`Stats::media_partial_blocks`](crate::Stats::media_partial_blocks);
/// its time is already the block's. A bank holds whole
/// blocks (the block, not the line, picks the bank). Reads stay one line
/// each.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NvmProfile {
    pub name: &'static str,
    pub read_ns: f64,
    pub read_busy_ns: f64,
    pub write_ns: f64,
    pub write_busy_ns: f64,
    /// Lines per media block (1: every line is written on its own).
    pub block_lines: u64,
    /// How long a queued block that is still partial waits for the rest
    /// of its lines before it may be written (P0 §2.3's write-combining
    /// buffer; P0 gives no figure): ignored when a block is one line.
    pub combine_ns: f64,
}

impl NvmProfile {
    /// PCM of P4 Table II: read 55 ns, write 150 ns; a bank is busy for the
    /// whole access (the paper gives nothing finer).
    pub const PCM: NvmProfile = NvmProfile {
        name: "pcm",
        read_ns: 55.0,
        read_busy_ns: 55.0,
        write_ns: 150.0,
        write_busy_ns: 150.0,
        block_lines: 1,
        combine_ns: 0.0,
    };

    /// Optane-like, from P0 (van Renen et al.) §2: random reads 3.3× DRAM's
    /// latency (Fig. 1; ≈100 ns DRAM → 330 ns); peak bandwidths of Table 2,
    /// 39.1 GB/s read and 12.5 GB/s write, turned into bank occupancy over
    /// the 32 banks of [`Config::table2`].
    ///
    /// Writes go to the media in P0's 256-byte blocks (§2.3: "PMem works on
    /// 256-byte blocks", peak bandwidth only with whole blocks, at most
    /// three lines of amplification): 4 lines per block, and Table 2's write
    /// peak, measured with whole blocks, makes a block write occupy its
    /// bank 32 × 256 B / 12.5 GB/s = 655 ns — so a lone 64-byte line costs
    /// as much media time as four combined ones. A write completes when
    /// its bank is done (P0 measures ≈100 ns per persist barrier into the
    /// DIMM's buffers, §3.3; the media write behind it is what the
    /// bandwidth bounds). A partial block waits 20 ns for the rest of its
    /// lines — the time its other three lines take to cross a channel
    /// (4 × [`Config::bus_ns`]) — before it is written as it is.
    /// Reads: 32 × 64 B / 39.1 GB/s = 52 ns per line;
    /// their 256-byte amplification is not modelled.
    pub const OPTANE: NvmProfile = NvmProfile {
        name: "optane",
        read_ns: 330.0,
        read_busy_ns: 52.0,
        write_ns: 655.0,
        write_busy_ns: 655.0,
        block_lines: 4,
        combine_ns: 20.0,
    };

    pub fn parse(s: &str) -> Option<NvmProfile> {
        [NvmProfile::PCM, NvmProfile::OPTANE]
            .into_iter()
            .find(|p| p.name == s)
    }
}

/// A set-associative cache level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheGeometry {
    pub bytes: usize,
    pub ways: usize,
    pub hit_cycles: u64,
}

impl CacheGeometry {
    pub fn sets(&self) -> usize {
        (self.bytes / 64 / self.ways).max(1)
    }
}

/// Everything the model needs besides the programs.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub mode: Mode,
    pub nvm: NvmProfile,
    /// Core clock (Table II: 2.7 GHz).
    pub ghz: f64,
    /// Reorder-buffer entries (Table II: 256).
    pub rob: u64,
    /// Instructions retired per cycle at most (Table II: 2; fetch 4 never
    /// binds when retirement is 2).
    pub retire_width: u64,
    /// Writes a core may have waiting for the memory controller to accept
    /// them (its write-combining / store buffer) before it stalls.
    pub write_buffer: usize,
    pub l1: CacheGeometry,
    pub l2: CacheGeometry,
    /// Shared last-level cache *per core* (Table II: 1 MB/core); the model
    /// sizes it as `l3_per_core × cores`.
    pub l3_per_core: CacheGeometry,
    pub channels: usize,
    /// Independently busy units (Table II: 2 channels × 2 ranks × 8
    /// sub-ranks = 32).
    pub banks: usize,
    /// Data-bus time of one 64-byte transfer on a channel.
    pub bus_ns: f64,
    /// One-way time from a core to the memory controller (a write leaving
    /// the core, an acknowledgment or a commit answer coming back). A
    /// `clwb` + `sfence` costs two of these at least: P3 §III-B measures
    /// `clwb` at 86 ns to DRAM and 94 ns to Optane, nearly
    /// media-independent, so 45 ns each way. Table II gives none.
    pub mc_path_ns: f64,
    /// Read queue entries (Table II: 64).
    pub read_queue: usize,
    /// Write sub-queues (Table II leaves it unstated; 8 × 8 = the 64-entry
    /// write queue).
    pub sub_queues: usize,
    /// Entries per write sub-queue and in the default queue (Table II: 8).
    pub queue_entries: usize,
    /// Address-range registers per sub-queue (P4 §IV-A: 4).
    pub ranges_per_queue: usize,
    /// Non-memory instructions per nanosecond of recorded gap, when a
    /// recorded trace is turned into a program. The default,
    /// `ghz × retire_width` (5.4), makes a gap last as long in the model as
    /// it did when it was recorded (the model retires compute at its full
    /// width), so projected times compare with times measured here.
    pub instr_per_ns: f64,
    /// Global mode: a commit that arrives during another's period joins it
    /// (`true`), or waits and runs a period of its own (`false`, the
    /// default: one PCOMMIT, one drain, one sync — P4 counts "one
    /// synchronization operation in one committing period" and is silent
    /// on combining; its 2.4× sync ratio fits one period per commit, see
    /// the crate's README notes in `ferrite bench sim`).
    pub merge_global_commits: bool,
}

impl Config {
    /// P4 Table II with the PCM profile and `mode`.
    pub fn table2(mode: Mode) -> Config {
        Config {
            mode,
            nvm: NvmProfile::PCM,
            ghz: 2.7,
            rob: 256,
            retire_width: 2,
            write_buffer: 16,
            l1: CacheGeometry {
                bytes: 32 << 10,
                ways: 4,
                hit_cycles: 4,
            },
            l2: CacheGeometry {
                bytes: 256 << 10,
                ways: 8,
                hit_cycles: 10,
            },
            l3_per_core: CacheGeometry {
                bytes: 1 << 20,
                ways: 16,
                hit_cycles: 40,
            },
            channels: 2,
            banks: 32,
            // DDR3-1600 on a 64-bit channel: 12.8 GB/s, 64 B in 5 ns.
            bus_ns: 5.0,
            mc_path_ns: 45.0,
            read_queue: 64,
            sub_queues: 8,
            queue_entries: 8,
            ranges_per_queue: 4,
            instr_per_ns: 2.7 * 2.0,
            merge_global_commits: false,
        }
    }

    pub fn with_mode(mut self, mode: Mode) -> Config {
        self.mode = mode;
        self
    }

    /// Nanoseconds to cycles, rounded up, at least 1.
    pub fn cycles(&self, ns: f64) -> u64 {
        ((ns * self.ghz).ceil() as u64).max(1)
    }

    /// The highest rate at which the media can absorb writes, in bytes per
    /// cycle: every bank writing whole blocks back to back, or the
    /// channels' buses, whichever is lower.
    pub fn write_bound_bytes_per_cycle(&self) -> f64 {
        let block = 64.0 * self.nvm.block_lines as f64;
        let banks = self.banks as f64 * block / self.cycles(self.nvm.write_busy_ns) as f64;
        let bus = self.channels as f64 * 64.0 / self.cycles(self.bus_ns) as f64;
        banks.min(bus)
    }

    /// Checks what the model relies on.
    pub fn validate(&self) -> Result<(), crate::SimError> {
        let bad = |what: &str| Err(crate::SimError::Config(what.to_string()));
        if self.rob == 0 || self.retire_width == 0 {
            return bad("rob and retire width must be positive");
        }
        if self.channels == 0 || self.banks == 0 || !self.banks.is_multiple_of(self.channels) {
            return bad("banks must be a positive multiple of channels");
        }
        if self.sub_queues == 0 || self.queue_entries == 0 || self.ranges_per_queue == 0 {
            return bad("sub-queues, entries and range registers must be positive");
        }
        if self.read_queue == 0 || self.write_buffer == 0 {
            return bad("read queue and write buffer must be positive");
        }
        for c in [self.l1, self.l2, self.l3_per_core] {
            if c.ways == 0 || c.bytes < 64 * c.ways {
                return bad("every cache needs at least one set of its ways");
            }
        }
        if !(self.ghz > 0.0 && self.instr_per_ns >= 0.0) {
            return bad("clock must be positive and instructions per ns non-negative");
        }
        let p = self.nvm;
        if !(1..=64).contains(&p.block_lines) || p.combine_ns.is_nan() || p.combine_ns < 0.0 {
            return bad("a media block holds 1 to 64 lines, combined for 0 ns or more");
        }
        if !(p.read_busy_ns > 0.0
            && p.write_busy_ns > 0.0
            && p.read_ns >= p.read_busy_ns
            && p.write_ns >= p.write_busy_ns)
        {
            return bad("media latencies must be positive and at least their bank occupancy");
        }
        Ok(())
    }
}
