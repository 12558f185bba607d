//! What a simulated core runs: a [`Program`] of [`Op`]s, made from a
//! recorded persist trace ([`Program::from_trace`]) or generated
//! ([`synthetic`]).
//!
//! Addresses are 64-byte line numbers in the core's own address space:
//! programs are multi-programmed (one task per core, P4's "per-task"
//! scenario), so the model places core `c`'s lines at `c << CORE_SHIFT`
//! and binds that range to a write sub-queue (`PersistenceMalloc`).

use ferrite_pmem::trace::{EventKind, ThreadTrace};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Line-number bits of one core's address space (2^36 lines = 4 TiB).
pub const CORE_SHIFT: u32 = 36;

/// One step of a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `n` instructions that touch no persistent memory.
    Compute(u32),
    /// A load of one line.
    Load(u64),
    /// An ordinary store to one line (write-allocate, no read for ownership).
    Store(u64),
    /// `clwb` of one line: writes it back if it is dirty.
    Flush(u64),
    /// A non-temporal store of one line: straight to the memory controller.
    NtStore(u64),
    /// `sfence`: waits until the memory controller has accepted every write
    /// this core issued.
    Fence,
    /// A commit point: an implicit fence, then what the mode makes a commit
    /// cost (see [`crate::Mode`]).
    Commit,
}

/// A core's program: its ops and the lines it may touch (`0..footprint`
/// before placement).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Program {
    pub ops: Vec<Op>,
    /// Lines spanned by the program's addresses (its persistent range).
    pub footprint: u64,
}

impl Program {
    /// Instructions the program retires in one pass.
    pub fn instructions(&self) -> u64 {
        self.ops
            .iter()
            .map(|op| match op {
                Op::Compute(n) => *n as u64,
                _ => 1,
            })
            .sum()
    }

    /// Commit points in one pass.
    pub fn commits(&self) -> usize {
        self.ops.iter().filter(|o| matches!(o, Op::Commit)).count()
    }

    /// Loads and writes (stores + non-temporal stores) in one pass.
    pub fn reads_writes(&self) -> (usize, usize) {
        let r = self.ops.iter().filter(|o| matches!(o, Op::Load(_))).count();
        let w = self
            .ops
            .iter()
            .filter(|o| matches!(o, Op::Store(_) | Op::NtStore(_)))
            .count();
        (r, w)
    }

    /// Turns one thread of a recorded trace into a program.
    ///
    /// - each range event becomes one op per 64-byte line it touches;
    /// - `gap_ns` becomes `Compute(gap_ns × instr_per_ns)`;
    /// - addresses are rebased to the lowest line the thread touches;
    /// - only every `commit_every`-th commit point is kept (1 keeps all);
    ///   the fences around dropped ones stay, so dropping commits models a
    ///   program that batches updates and commits every N of them (P4
    ///   Fig. 10);
    /// - a fence directly followed by a kept commit is folded into it (the
    ///   commit begins with an implicit fence).
    pub fn from_trace(t: &ThreadTrace, instr_per_ns: f64, commit_every: u32) -> Program {
        let commit_every = commit_every.max(1);
        let base = t
            .events
            .iter()
            .filter(|e| e.len > 0)
            .map(|e| e.addr / 64)
            .min()
            .unwrap_or(0);
        let mut ops = Vec::with_capacity(t.events.len() * 2);
        let mut top = 0u64;
        let mut commits_seen = 0u32;
        for e in &t.events {
            let gap = (e.gap_ns as f64 * instr_per_ns).round() as u32;
            if gap > 0 {
                ops.push(Op::Compute(gap));
            }
            let lines = if e.len == 0 {
                0..0
            } else {
                let first = e.addr / 64 - base;
                let last = (e.addr + e.len as u64 - 1) / 64 - base;
                top = top.max(last + 1);
                first..last + 1
            };
            match e.kind {
                EventKind::Load => ops.extend(lines.map(Op::Load)),
                EventKind::Store => ops.extend(lines.map(Op::Store)),
                EventKind::Flush => ops.extend(lines.map(Op::Flush)),
                EventKind::NtStore => ops.extend(lines.map(Op::NtStore)),
                EventKind::Fence => ops.push(Op::Fence),
                EventKind::Commit => {
                    commits_seen += 1;
                    if commits_seen.is_multiple_of(commit_every) {
                        if ops.last() == Some(&Op::Fence) {
                            ops.pop();
                        }
                        ops.push(Op::Commit);
                    }
                }
            }
        }
        Program {
            ops,
            footprint: top,
        }
    }
}

/// Parameters of the synthetic workload (P4 §IV-B: reads:writes 1.96:1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Synthetic {
    /// Persistent updates in the program (one pass).
    pub updates: u32,
    /// Loads per update on average; 1.96 is P4's read:write ratio.
    pub reads_per_write: f64,
    /// Commit after every this many updates.
    pub commit_every: u32,
    /// Lines of the task's region (8 MiB by default: beyond its L2 and its
    /// share of the L3, so a good part of the loads reach the media).
    pub footprint_lines: u64,
    /// Non-memory instructions before each memory op: uniform in this
    /// range. P4 gives no instruction mix; the default (100..=300) keeps
    /// 16 cores' writes below the PCM write bound of Table II's 32 banks
    /// (≈ 0.079 lines per cycle), as WHISPER's programs are not
    /// write-bandwidth bound. At 20..=60 the model saturates the media and
    /// every commit mode is bandwidth bound.
    pub compute: (u32, u32),
}

impl Default for Synthetic {
    fn default() -> Synthetic {
        Synthetic {
            updates: 2000,
            reads_per_write: 1.96,
            commit_every: 1,
            footprint_lines: (8 << 20) / 64,
            compute: (100, 300),
        }
    }
}

/// A synthetic program for core `core` from `seed`: each update loads
/// `reads_per_write` lines on average (the fraction is a coin flip) and
/// stores one, flushing it right away (`clwb` after the store, as
/// PMDK-style code does); every `commit_every` updates end with a commit.
/// The same `(params, seed, core)` always gives the same program.
pub fn synthetic(p: &Synthetic, seed: u64, core: usize) -> Program {
    let mut rng =
        ChaCha8Rng::seed_from_u64(seed ^ (core as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let foot = p.footprint_lines.max(1);
    let mut ops = Vec::with_capacity(p.updates as usize * 6);
    let whole = p.reads_per_write.floor() as u32;
    let frac = p.reads_per_write - whole as f64;
    let (lo, hi) = (p.compute.0, p.compute.1.max(p.compute.0));
    let every = p.commit_every.max(1);
    for u in 0..p.updates {
        let reads = whole + u32::from(rng.random_bool(frac.clamp(0.0, 1.0)));
        for _ in 0..reads {
            ops.push(Op::Compute(rng.random_range(lo..=hi)));
            ops.push(Op::Load(rng.random_range(0..foot)));
        }
        ops.push(Op::Compute(rng.random_range(lo..=hi)));
        let line = rng.random_range(0..foot);
        ops.push(Op::Store(line));
        ops.push(Op::Flush(line));
        if (u + 1) % every == 0 {
            ops.push(Op::Commit);
        }
    }
    Program {
        ops,
        footprint: foot,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_pmem::trace::Event;

    #[test]
    fn synthetic_is_calibrated_and_deterministic() {
        let p = Synthetic {
            updates: 20_000,
            ..Synthetic::default()
        };
        let a = synthetic(&p, 7, 3);
        assert_eq!(a, synthetic(&p, 7, 3));
        assert_ne!(a, synthetic(&p, 7, 4));
        let (r, w) = a.reads_writes();
        let ratio = r as f64 / w as f64;
        assert!((ratio - 1.96).abs() < 0.02, "read:write {ratio}");
        assert_eq!(a.commits(), 20_000);
        let b = synthetic(
            &Synthetic {
                commit_every: 10,
                ..p
            },
            7,
            3,
        );
        assert_eq!(b.commits(), 2_000);
    }

    #[test]
    fn trace_becomes_lines_and_commits() {
        let t = ThreadTrace {
            events: vec![
                Event::new(EventKind::Store, 0x1010, 100, 10),
                Event::new(EventKind::Flush, 0x1010, 100, 0),
                Event::new(EventKind::Fence, 0, 0, 0),
                Event::new(EventKind::Commit, 0, 0, 0),
                Event::new(EventKind::Load, 0x1000, 8, 0),
                Event::new(EventKind::Fence, 0, 0, 0),
                Event::new(EventKind::Commit, 0, 0, 0),
            ],
        };
        let p = Program::from_trace(&t, 2.0, 1);
        assert_eq!(
            p.ops,
            vec![
                Op::Compute(20),
                Op::Store(0),
                Op::Store(1),
                Op::Flush(0),
                Op::Flush(1),
                Op::Commit,
                Op::Load(0),
                Op::Commit
            ]
        );
        assert_eq!(p.footprint, 2);
        let q = Program::from_trace(&t, 2.0, 2);
        assert_eq!(q.commits(), 1);
        assert!(
            q.ops.contains(&Op::Fence),
            "the dropped commit's fence stays"
        );
    }
}
