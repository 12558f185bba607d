//! P3's workloads on the PTM (reading notes B5): TATP, TPC-C New-Order over
//! a hash map and over a B+tree, the B+tree insert-only and mixed
//! microbenchmarks, and STAMP Vacation at high and low contention. The
//! benchmark and the crash checks drive them through [`PtmWorkload`]:
//! [`PtmWorkload::load`] once, then [`PtmWorkload::run_one`] from any number
//! of threads (one call = one committed transaction), then
//! [`PtmWorkload::check`].
//!
//! Inputs come from `ferrite-workload`'s generators ([`ferrite_workload::tatp`],
//! [`ferrite_workload::neworder`], [`ferrite_workload::vacation`]) drawing
//! from the caller's per-thread [`Rng`], so two systems given the same seeds
//! run the same transactions.
//!
//! Every workload keeps its data reachable from the PTM's root word, which
//! holds the offset of a *workload root block* whose first word is a magic
//! number naming the workload (layouts in each module). A transaction reads
//! the root word and the handles it needs at its start (a few read-only
//! words that never conflict), so a workload value holds no persistent
//! state and works on any PTM opened on a loaded pool — including one
//! recovered after a crash.
//!
//! ## Scales
//! | workload | Tiny (crash checks) | Quick | Full |
//! |---|---|---|---|
//! | `tatp` | 32 subscribers | 10 000 | 100 000 (P3) |
//! | `tpcc-hash`, `tpcc-bptree` | 2 districts × 8 customers, 32 items | 10 × 300, 10 000 items | 10 × 3 000, 100 000 items (P3) |
//! | `bptree` | empty tree, random 64-bit keys | same | same (P3: 2 M inserts; the caller decides how many) |
//! | `bptree-mixed` | keys 0..64 | 0..2^16 | 0..2^21 (P3) |
//! | `vacation-high`, `vacation-low` | r = 64 | r = 16 384 | r = 2^20 (P3: 2^22) |

mod bptree;
mod tatp;
mod tpcc;
mod vacation;

use crate::{Ptm, PtmError, PtmThread};
use rand::SeedableRng;

pub use bptree::{BptreeInsert, BptreeMixed};
pub use tatp::Tatp;
pub use tpcc::{TpccIndexKind, TpccNewOrder};
pub use vacation::Vacation;

/// The per-thread random generator workloads draw inputs from.
pub type Rng = rand_chacha::ChaCha8Rng;

/// The generator of thread `thread` for `seed`: one independent ChaCha
/// stream per thread (as `ferrite-workload`'s generators do).
pub fn thread_rng(seed: u64, thread: usize) -> Rng {
    let mut r = Rng::seed_from_u64(seed);
    r.set_stream(thread as u64);
    r
}

/// User-abort code of [`PtmWorkload::load`] on a PTM whose root is already
/// in use.
pub const ALREADY_LOADED: u64 = 0x4C4F_4144_4544_0001;

/// B+tree fanout of the B+tree workloads (keys per node; nodes of
/// 24 + 24 × 16 = 408 bytes with their check words).
pub const BPTREE_FANOUT: u64 = 16;

/// The workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkloadKind {
    /// TATP (telecom: subscriber reads and updates) on the hash map.
    Tatp,
    /// TPC-C New-Order with its tables indexed by the hash map.
    TpccHash,
    /// TPC-C New-Order with its tables indexed by the B+tree.
    TpccBptree,
    /// Insert-only.
    Bptree,
    /// B+tree inserts, lookups and removes mixed.
    BptreeMixed,
    /// STAMP Vacation, high contention.
    VacationHigh,
    /// STAMP Vacation, low contention.
    VacationLow,
}

impl WorkloadKind {
    /// Every workload, in the order the tables list them.
    pub const ALL: [WorkloadKind; 7] = [
        WorkloadKind::Tatp,
        WorkloadKind::TpccHash,
        WorkloadKind::TpccBptree,
        WorkloadKind::Bptree,
        WorkloadKind::BptreeMixed,
        WorkloadKind::VacationHigh,
        WorkloadKind::VacationLow,
    ];

    /// The workload's name in rows and on command lines.
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::Tatp => "tatp",
            WorkloadKind::TpccHash => "tpcc-hash",
            WorkloadKind::TpccBptree => "tpcc-bptree",
            WorkloadKind::Bptree => "bptree",
            WorkloadKind::BptreeMixed => "bptree-mixed",
            WorkloadKind::VacationHigh => "vacation-high",
            WorkloadKind::VacationLow => "vacation-low",
        }
    }

    /// The kind named `s` (see [`WorkloadKind::name`]).
    pub fn parse(s: &str) -> Option<Self> {
        WorkloadKind::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// Data sizes (module docs, "Scales").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scale {
    /// Crash checks: a few dozen rows.
    Tiny,
    /// Benchmarks' quick runs (module docs).
    Quick,
    /// P3's data sizes (module docs).
    Full,
}

impl Scale {
    /// Every scale, smallest first.
    pub const ALL: [Scale; 3] = [Scale::Tiny, Scale::Quick, Scale::Full];

    /// `tiny`, `quick` or `full`.
    pub fn name(self) -> &'static str {
        match self {
            Scale::Tiny => "tiny",
            Scale::Quick => "quick",
            Scale::Full => "full",
        }
    }

    /// The scale named `s` (see [`Scale::name`]).
    pub fn parse(s: &str) -> Option<Scale> {
        Scale::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// A workload on the PTM (module docs).
pub trait PtmWorkload: Send + Sync {
    /// Which workload this is.
    fn kind(&self) -> WorkloadKind;
    /// Builds the initial data in `ptm` (several transactions, one thread)
    /// and links it from `ptm.root()` in the last one. Fails with
    /// `Aborted { code: ALREADY_LOADED }` when the root is not 0.
    fn load(&self, ptm: &Ptm) -> Result<(), PtmError>;
    /// One transaction of thread `thread` of `threads` (one commit = one
    /// unit of throughput), drawing its inputs from `rng`.
    fn run_one(
        &self,
        th: &mut PtmThread<'_>,
        thread: usize,
        threads: usize,
        rng: &mut Rng,
    ) -> Result<(), PtmError>;
    /// Invariants of the data after any number of completed transactions
    /// (run with no transaction in flight).
    fn check(&self, ptm: &Ptm) -> Result<(), String>;
}

/// The workload `kind` at `scale`; `seed` fixes the initial data.
pub fn make(kind: WorkloadKind, scale: Scale, seed: u64) -> Box<dyn PtmWorkload> {
    match kind {
        WorkloadKind::Tatp => Box::new(Tatp::new(scale, seed)),
        WorkloadKind::TpccHash => Box::new(TpccNewOrder::new(TpccIndexKind::Hash, scale, seed)),
        WorkloadKind::TpccBptree => Box::new(TpccNewOrder::new(TpccIndexKind::Bptree, scale, seed)),
        WorkloadKind::Bptree => Box::new(BptreeInsert::new(scale, seed)),
        WorkloadKind::BptreeMixed => Box::new(BptreeMixed::new(scale, seed)),
        WorkloadKind::VacationHigh => Box::new(Vacation::new(true, scale, seed)),
        WorkloadKind::VacationLow => Box::new(Vacation::new(false, scale, seed)),
    }
}

/// Reads the workload root block from the PTM root word and checks its
/// magic; rolls back with [`crate::ds::CORRUPT`] when either is wrong.
pub(crate) fn root_block(
    tx: &mut crate::Tx<'_>,
    ptm_root: u64,
    magic: u64,
) -> crate::TxResult<u64> {
    let block = tx.load(ptm_root)?;
    if block == 0 || !block.is_multiple_of(8) || tx.load(block)? != magic {
        return Err(crate::Abort::User(crate::ds::CORRUPT));
    }
    Ok(block)
}

/// Fails with [`ALREADY_LOADED`] unless the PTM root word is 0.
pub(crate) fn require_empty_root(th: &mut PtmThread<'_>, ptm_root: u64) -> Result<(), PtmError> {
    th.atomic(|tx| {
        if tx.load(ptm_root)? != 0 {
            return tx.abort(ALREADY_LOADED);
        }
        Ok(())
    })
}

/// The offset of the PTM root word of the PTM `th` belongs to (the same
/// constant for every PTM: [`crate::Ptm::root`]).
pub(crate) fn root_of(_th: &PtmThread<'_>) -> u64 {
    crate::format::ROOT_OFF
}

/// Text for a PTM error met while checking.
pub(crate) fn ptm_err(e: PtmError) -> String {
    format!("transaction failed while checking: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Algorithm, PtmOptions};
    use ferrite_pmem::{Domain, Pool, PoolOptions};

    #[test]
    fn names_round_trip() {
        for k in WorkloadKind::ALL {
            assert_eq!(WorkloadKind::parse(k.name()), Some(k));
        }
        assert_eq!(WorkloadKind::parse("vacation"), None);
        for s in Scale::ALL {
            assert_eq!(Scale::parse(s.name()), Some(s));
        }
        assert_eq!(Scale::parse("huge"), None);
    }

    /// Every workload loads at Tiny scale, runs transactions on 2 threads
    /// with both algorithms, and its check passes; loading twice fails.
    #[test]
    fn every_workload_runs_and_checks_on_both_algorithms() {
        for kind in WorkloadKind::ALL {
            for alg in Algorithm::ALL {
                let pool = Pool::create_in_memory(
                    &PoolOptions::new("ferrite-ptm", 64 << 20).domain(Domain::Adr),
                )
                .unwrap();
                let ptm = Ptm::create(&pool, &PtmOptions::new(alg)).unwrap();
                let w = make(kind, Scale::Tiny, 7);
                assert_eq!(w.kind(), kind);
                w.load(&ptm).unwrap();
                w.check(&ptm)
                    .unwrap_or_else(|e| panic!("{} {}: after load: {e}", kind.name(), alg.name()));
                let again = w.load(&ptm);
                assert!(
                    matches!(
                        again,
                        Err(PtmError::Aborted {
                            code: ALREADY_LOADED
                        })
                    ),
                    "{} loaded twice",
                    kind.name()
                );
                let start = std::sync::Barrier::new(2);
                std::thread::scope(|s| {
                    for t in 0..2 {
                        let (w, ptm, start) = (&w, &ptm, &start);
                        s.spawn(move || {
                            let mut th = ptm.thread().unwrap();
                            let mut rng = thread_rng(99, t);
                            start.wait();
                            for i in 0..300 {
                                w.run_one(&mut th, t, 2, &mut rng).unwrap_or_else(|e| {
                                    panic!("{} {} thread {t} txn {i}: {e}", kind.name(), alg.name())
                                });
                            }
                        });
                    }
                });
                w.check(&ptm)
                    .unwrap_or_else(|e| panic!("{} {}: after run: {e}", kind.name(), alg.name()));
            }
        }
    }
}

/// Throughput probe (not a benchmark: the bench crate measures): every
/// workload at Quick scale (`FERRITE_PTM_PROBE_SCALE=full` for Full, then
/// in a 4 GiB pool), both algorithms, 1 and 2 threads, for
/// `FERRITE_PTM_PROBE_MS` milliseconds each (default 1000); only the
/// workloads named in `FERRITE_PTM_PROBE_ONLY` (comma-separated) if set. Run with
/// `cargo test -p ferrite-ptm --release --lib workloads::probe -- --ignored --nocapture`.
#[cfg(test)]
mod probe {
    use super::*;
    use crate::{Algorithm, PtmOptions, PtmStats};
    use ferrite_pmem::{Domain, Pool, PoolOptions};
    use std::time::{Duration, Instant};

    #[test]
    #[ignore = "a timing probe; run by hand in release"]
    fn probe_quick() {
        let ms: u64 = std::env::var("FERRITE_PTM_PROBE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000);
        let full = std::env::var("FERRITE_PTM_PROBE_SCALE").is_ok_and(|v| v == "full");
        let (scale, pool_bytes) = if full {
            (Scale::Full, 4u64 << 30)
        } else {
            (Scale::Quick, 512 << 20)
        };
        let only = std::env::var("FERRITE_PTM_PROBE_ONLY").unwrap_or_default();
        println!(
            "workload       algorithm   thr  load_ms   commits/s  aborts/commit  fences/tx  max_log_lines  check"
        );
        for kind in WorkloadKind::ALL {
            if !only.is_empty() && !only.split(',').any(|n| n == kind.name()) {
                continue;
            }
            for alg in Algorithm::ALL {
                for threads in [1usize, 2] {
                    let pool = Pool::create_in_memory(
                        &PoolOptions::new("ferrite-ptm", pool_bytes).domain(Domain::Adr),
                    )
                    .unwrap();
                    let ptm = Ptm::create(&pool, &PtmOptions::new(alg)).unwrap();
                    let w = make(kind, scale, 1);
                    let t0 = Instant::now();
                    w.load(&ptm).unwrap();
                    let load_ms = t0.elapsed().as_millis();
                    let stop = Instant::now() + Duration::from_millis(ms);
                    let t1 = Instant::now();
                    let stats: Vec<PtmStats> = std::thread::scope(|s| {
                        let hs: Vec<_> = (0..threads)
                            .map(|t| {
                                let (w, ptm) = (&w, &ptm);
                                s.spawn(move || {
                                    let mut th = ptm.thread().unwrap();
                                    let mut rng = thread_rng(5, t);
                                    while Instant::now() < stop {
                                        for _ in 0..64 {
                                            w.run_one(&mut th, t, threads, &mut rng).unwrap();
                                        }
                                    }
                                    th.stats()
                                })
                            })
                            .collect();
                        hs.into_iter().map(|h| h.join().unwrap()).collect()
                    });
                    let secs = t1.elapsed().as_secs_f64();
                    let commits: u64 = stats.iter().map(|s| s.commits).sum();
                    let aborts: u64 = stats.iter().map(|s| s.aborts).sum();
                    let fences: u64 = stats.iter().map(|s| s.fences).sum();
                    let lines = stats.iter().map(|s| s.max_log_lines).max().unwrap_or(0);
                    let check = match w.check(&ptm) {
                        Ok(()) => "ok".to_string(),
                        Err(e) => e,
                    };
                    println!(
                        "{:<14} {:<11} {:>3} {:>8} {:>11.0} {:>14.4} {:>10.2} {:>14} {}",
                        kind.name(),
                        alg.name(),
                        threads,
                        load_ms,
                        commits as f64 / secs,
                        aborts as f64 / commits.max(1) as f64,
                        fences as f64 / commits.max(1) as f64,
                        lines,
                        check
                    );
                }
            }
        }
    }
}
