//! Crash checks of the PTM through the `ferrite-crash` explorer (feature
//! `checks`; also compiled for this crate's tests). `ferrite check
//! ptm-eager | ptm-lazy` calls [`check_ptm`]; `ptm-planted` calls
//! [`check_ptm_fault`] for every [`Fault`] and the fence-removal variant.
//!
//! # Workload
//!
//! A PTM in a small simulated pool, created by the explorer's setup with a
//! *bank* linked from the root word: a block of words holding a global
//! counter `G`, one counter `c[t]` per thread, eight accounts and, per
//! thread, the head and length of a list of nodes. Every transaction of
//! thread `t` (seeded, so reproducible):
//!
//! - increments `G` and `c[t]` (so threads conflict on `G`);
//! - moves a random amount between two random accounts;
//! - every third transaction allocates a node `{seq, next}`, fills it and
//!   pushes it on its list; every fifth pops its list's head and frees it.
//!
//! So a transaction writes 6 to 9 words, allocates or frees, and under
//! orec-eager pays one fence per word.
//!
//! # Invariant (after recovery from every crash state, nested crashes too)
//!
//! - the PTM opens (recovery succeeds);
//! - one thread: the bank equals, word for word, the state after the
//!   acknowledged transactions or after the one in flight too;
//! - two threads: the accounts sum to their initial total, `G = Σ c[t]`,
//!   `c[t]` is the thread's acknowledged count or one more, each list has
//!   the length its word says and strictly decreasing sequence numbers;
//! - no leak and nothing dangles: the heap's allocated blocks are exactly
//!   the bank and the listed nodes;
//! - the recovered PTM works: a transaction commits and reads back.
//!
//! # Runs
//!
//! The budget is split ([`spend_budget`]) over: `adr` one thread, `adr`
//! with 8-byte tearing, `adr` with two lockstep threads (real conflicts,
//! aborts and re-executions, each simulated thread's fences completing only
//! its own flushes), `eadr` crashing before every store, `pdram` (same
//! crash model as eadr, whole pool), `pdram-lite` with one and with two
//! threads (before recovery, the log areas of every slot not at its commit
//! point are overwritten: P3's rule that an in-flight transaction's redo
//! log is lost at power failure).

use crate::format::{self, Superblock};
use crate::{Algorithm, Fault, Ptm, PtmOptions, PtmThread, TxResult};
use ferrite_crash::explorer::spend_budget;
use ferrite_crash::lockstep;
use ferrite_crash::{Config, ExploreError, Explorer, PowerFail, Report};
use ferrite_pmem::{Domain, POff, Pool};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Size of the simulated pool every check uses.
pub const CHECK_POOL_SIZE: u64 = 640 * 1024;
const LAYOUT: &str = "ferrite-ptm";
const THREADS: usize = 2;
const ACCOUNTS: usize = 8;
const INITIAL: u64 = 1000;
const MAIN_TXS: u64 = 14;
const THREAD_TXS: u64 = 8;

// Bank words (index into the bank block).
const G: usize = 0;
const C: usize = 1; // c[t] at C + t
const ACC: usize = C + THREADS;
const HEAD: usize = ACC + ACCOUNTS; // head[t]
const LEN: usize = HEAD + THREADS; // len[t]
const BANK_WORDS: usize = LEN + THREADS;

/// Why a check could not run (a violation is not an error: it is in the report).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("explorer: {0}")]
    /// The crash explorer failed.
    Explore(#[from] ExploreError),
}

/// One run of a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunSpec {
    /// The durability domain simulated.
    pub domain: Domain,
    /// Threads (1, or 2 in lockstep).
    pub threads: usize,
    /// 8-byte failure atomicity instead of whole cache lines.
    pub tearing: bool,
    /// Added to the seed (a run's own sampling).
    pub seed_shift: u64,
}

impl RunSpec {
    fn new(domain: Domain, threads: usize) -> RunSpec {
        RunSpec {
            domain,
            threads,
            tearing: false,
            seed_shift: 0,
        }
    }

    /// The run's name in reports: `{domain}[-tearing]-{threads}t`.
    pub fn name(&self) -> String {
        format!(
            "{}{}-{}t",
            self.domain.name(),
            if self.tearing { "-tearing" } else { "" },
            self.threads
        )
    }
}

/// The options the checks open the PTM with.
pub fn check_options(alg: Algorithm) -> PtmOptions {
    PtmOptions::new(alg)
        .slots(THREADS as u16)
        .log_bytes(2048)
        .orecs(1024)
}

/// The runs of a full check, with their budget weights.
fn plan() -> Vec<(RunSpec, usize)> {
    vec![
        (RunSpec::new(Domain::Adr, 1), 3),
        (
            RunSpec {
                tearing: true,
                ..RunSpec::new(Domain::Adr, 1)
            },
            1,
        ),
        (RunSpec::new(Domain::Adr, 2), 3),
        (RunSpec::new(Domain::Eadr, 1), 1),
        (RunSpec::new(Domain::Eadr, 2), 1),
        (RunSpec::new(Domain::Pdram, 1), 1),
        (RunSpec::new(Domain::PdramLite, 1), 1),
        (RunSpec::new(Domain::PdramLite, 2), 1),
    ]
}

/// Explores `alg` under every run of the plan within `cfg.budget`.
pub fn check_ptm(alg: Algorithm, cfg: Config) -> Result<Vec<(String, Report)>, CheckError> {
    check_with(check_options(alg), cfg)
}

/// As [`check_ptm`] with a planted fault (or P3's fence removal when
/// `fault` is `None` and `fence_removal` is set in `opts`).
pub fn check_ptm_fault(
    alg: Algorithm,
    cfg: Config,
    fault: Option<Fault>,
    fence_removal: bool,
) -> Result<Vec<(String, Report)>, CheckError> {
    check_with(
        check_options(alg).fault(fault).fence_removal(fence_removal),
        cfg,
    )
}

fn check_with(opts: PtmOptions, cfg: Config) -> Result<Vec<(String, Report)>, CheckError> {
    spend_budget(
        &cfg,
        plan(),
        8,
        |i| RunSpec {
            seed_shift: i + 1,
            ..RunSpec::new(Domain::Adr, 1 + (i as usize % 2))
        },
        |s| s.name(),
        |spec, c| run(&opts, spec, c.clone()),
    )
}

/// The PDRAM-Lite power-failure rule on an image: the log area of every
/// slot whose status is not NEEDS_REDO (no transaction at its commit
/// point) is lost — overwritten here with a pattern, so that recovery
/// reading it would see garbage. Undo logs (NEEDS_UNDO) are not in the
/// PDRAM-Lite pages: eADR keeps them.
pub fn pdram_lite_rule(image: &mut [u8]) {
    let sbo = format::SB_OFF as usize;
    let Some(raw) = image.get(sbo..sbo + format::SB_BYTES) else {
        return;
    };
    let raw: [u8; format::SB_BYTES] = raw.try_into().expect("64 bytes");
    let Ok(sb) = Superblock::decode(&raw, image.len() as u64) else {
        return;
    };
    for s in 0..usize::from(sb.slots) {
        let so = sb.slot_off(s) as usize;
        let st = u64::from_le_bytes(image[so..so + 8].try_into().expect("8 bytes"));
        if format::status_state(st) == format::IDLE {
            let a = so + format::SLOT_HDR as usize;
            image[a..a + sb.log_bytes as usize].fill(0xa5);
        }
    }
}

/// What the workload saw: per thread, transactions acknowledged; for one
/// thread, the bank's expected states (initial, then after each
/// transaction begun).
#[derive(Default)]
pub struct Model {
    acked: [u64; THREADS],
    /// Conflict aborts each thread saw (re-executed transactions).
    aborts: [u64; THREADS],
    states: Vec<Vec<u64>>,
}

/// A DRAM mirror of the bank (node addresses aside: lists by their
/// sequence numbers).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Mirror {
    words: Vec<u64>,
    lists: [Vec<u64>; THREADS],
}

impl Mirror {
    fn initial() -> Mirror {
        let mut words = vec![0u64; BANK_WORDS];
        for a in 0..ACCOUNTS {
            words[ACC + a] = INITIAL;
        }
        Mirror {
            words,
            lists: Default::default(),
        }
    }

    /// Canonical form: the words with list heads blanked, then each list.
    fn digest(&self) -> Vec<u64> {
        let mut d = self.words.clone();
        for t in 0..THREADS {
            d[HEAD + t] = 0;
        }
        for l in &self.lists {
            d.push(u64::MAX);
            d.extend_from_slice(l);
        }
        d
    }
}

/// The inputs of transaction `i` of thread `t`.
struct Step {
    from: usize,
    to: usize,
    amount: u64,
    push: bool,
    pop: bool,
}

fn step(seed: u64, t: usize, i: u64) -> Step {
    let mut x = seed ^ ((t as u64 + 1) << 40) ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let from = (next() % ACCOUNTS as u64) as usize;
    let to = (next() % ACCOUNTS as u64) as usize;
    Step {
        from,
        to,
        amount: next() % 50,
        push: i.is_multiple_of(3),
        pop: i % 5 == 4,
    }
}

impl Mirror {
    fn apply(&mut self, t: usize, s: &Step) {
        self.words[G] += 1;
        self.words[C + t] += 1;
        if s.from != s.to {
            self.words[ACC + s.from] = self.words[ACC + s.from].wrapping_sub(s.amount);
            self.words[ACC + s.to] = self.words[ACC + s.to].wrapping_add(s.amount);
        }
        if s.push {
            let seq = self.words[C + t];
            self.lists[t].insert(0, seq);
            self.words[LEN + t] += 1;
        } else if s.pop && !self.lists[t].is_empty() {
            self.lists[t].remove(0);
            self.words[LEN + t] -= 1;
        }
    }
}

/// Transaction `s` of thread `t` on the bank at `bank`.
fn bank_tx(th: &mut PtmThread<'_>, bank: u64, t: usize, s: &Step) {
    let w = |i: usize| bank + 8 * i as u64;
    th.atomic(|tx| -> TxResult<()> {
        let g = tx.load(w(G))?;
        tx.store(w(G), g + 1)?;
        let c = tx.load(w(C + t))? + 1;
        tx.store(w(C + t), c)?;
        if s.from != s.to {
            let a = tx.load(w(ACC + s.from))?;
            let b = tx.load(w(ACC + s.to))?;
            tx.store(w(ACC + s.from), a.wrapping_sub(s.amount))?;
            tx.store(w(ACC + s.to), b.wrapping_add(s.amount))?;
        }
        let head = tx.load(w(HEAD + t))?;
        let len = tx.load(w(LEN + t))?;
        if s.push {
            let n = tx.alloc(16)?.raw();
            tx.store(n, c)?;
            tx.store(n + 8, head)?;
            tx.store(w(HEAD + t), n)?;
            tx.store(w(LEN + t), len + 1)?;
        } else if s.pop && head != 0 {
            let next = tx.load(head + 8)?;
            tx.store(w(HEAD + t), next)?;
            tx.store(w(LEN + t), len - 1)?;
            tx.free(POff::new(head))?;
        }
        Ok(())
    })
    .unwrap_or_else(|e| panic!("thread {t}: transaction failed: {e}"));
}

fn setup(p: &Pool, opts: &PtmOptions) {
    let ptm = Ptm::create(p, opts).unwrap_or_else(|e| panic!("creating the PTM: {e}"));
    let mut th = ptm.thread().expect("thread");
    let root = ptm.root();
    th.atomic(|tx| {
        let b = tx.alloc_zeroed(8 * BANK_WORDS)?.raw();
        for a in 0..ACCOUNTS {
            tx.store(b + 8 * (ACC + a) as u64, INITIAL)?;
        }
        tx.set(root, b)
    })
    .expect("bank");
}

/// Reads the bank of a recovered PTM: the mirror and the blocks it uses.
fn read_bank(ptm: &Ptm) -> Result<(Mirror, BTreeSet<u64>), String> {
    let peek = |a: u64| ptm.peek(a).map_err(|e| format!("bank read: {e}"));
    let bank = peek(ptm.root().raw())?;
    let mut m = Mirror::initial();
    let mut blocks = BTreeSet::from([bank]);
    for i in 0..BANK_WORDS {
        m.words[i] = peek(bank + 8 * i as u64)?;
    }
    for t in 0..THREADS {
        let mut n = m.words[HEAD + t];
        while n != 0 {
            if !blocks.insert(n) {
                return Err(format!("list {t} loops at {n:#x}"));
            }
            m.lists[t].push(peek(n)?);
            n = peek(n + 8)?;
        }
    }
    Ok((m, blocks))
}

fn check(ptm: &Ptm, model: &Model, threads: usize) -> Result<(), String> {
    let (m, blocks) = read_bank(ptm)?;
    let allocated: BTreeSet<u64> = {
        let mut s = BTreeSet::new();
        ferrite_alloc::PAllocator::for_each_allocated(ptm.heap(), &mut |off, _| {
            s.insert(off.raw());
        });
        s
    };
    if allocated != blocks {
        let leak: Vec<_> = allocated.difference(&blocks).take(3).collect();
        let dangling: Vec<_> = blocks.difference(&allocated).take(3).collect();
        return Err(format!(
            "allocated blocks differ from the bank's: leaked {leak:x?}, dangling {dangling:x?}"
        ));
    }
    if threads == 1 {
        let got = m.digest();
        let k = model.acked[0] as usize;
        let ok = model.states.get(k) == Some(&got) || model.states.get(k + 1) == Some(&got);
        if !ok {
            return Err(format!(
                "bank {:?} is neither the state after {k} acknowledged transactions ({:?}) nor after {} ({:?})",
                got,
                model.states.get(k),
                k + 1,
                model.states.get(k + 1)
            ));
        }
    } else {
        let sum = (0..ACCOUNTS).fold(0u64, |s, a| s.wrapping_add(m.words[ACC + a]));
        if sum != INITIAL * ACCOUNTS as u64 {
            return Err(format!(
                "accounts sum to {sum}, not {}",
                INITIAL * ACCOUNTS as u64
            ));
        }
        let cs: u64 = (0..THREADS).map(|t| m.words[C + t]).sum();
        if m.words[G] != cs {
            return Err(format!(
                "G = {} but the thread counters sum to {cs}",
                m.words[G]
            ));
        }
        for t in 0..THREADS {
            let c = m.words[C + t];
            if c != model.acked[t] && c != model.acked[t] + 1 {
                return Err(format!(
                    "thread {t} counted {c} transactions, {} were acknowledged",
                    model.acked[t]
                ));
            }
            if m.lists[t].len() as u64 != m.words[LEN + t] {
                return Err(format!(
                    "list {t} has {} nodes, its length word says {}",
                    m.lists[t].len(),
                    m.words[LEN + t]
                ));
            }
            if m.lists[t].windows(2).any(|w| w[0] <= w[1]) {
                return Err(format!("list {t} out of order: {:?}", m.lists[t]));
            }
        }
    }
    // The recovered PTM works.
    let mut th = ptm
        .thread()
        .map_err(|e| format!("thread after recovery: {e}"))?;
    let bank = ptm.root().raw();
    let r = th.atomic(|tx| {
        let b = tx.load(bank)?;
        let g = tx.load(b)?;
        tx.store(b, g + 1)?;
        Ok(g + 1)
    });
    match r {
        Ok(g) if g == m.words[G] + 1 => Ok(()),
        other => Err(format!("a transaction after recovery gave {other:?}")),
    }
}

fn run(opts: &PtmOptions, spec: RunSpec, cfg: Config) -> Result<Report, CheckError> {
    let mut cfg = cfg;
    cfg.layout = LAYOUT.into();
    cfg.pool_size = CHECK_POOL_SIZE;
    cfg.domain = spec.domain;
    cfg.tearing = spec.tearing;
    cfg.seed = cfg.seed.wrapping_add(spec.seed_shift);
    if spec.domain != Domain::Adr {
        // The live image is what survives: crash between any two stores.
        cfg.crash_on_store = true;
    }
    if spec.domain == Domain::PdramLite {
        cfg = cfg.power_fail(PowerFail(Arc::new(pdram_lite_rule)));
    }
    let seed = cfg.seed;
    let threads = spec.threads;
    let explorer = Explorer::new(cfg).setup(move |p| setup(p, opts));
    Ok(explorer.explore(
        |pool: &Pool, m: &mut Model| workload(pool, m, opts, seed, threads),
        |pool| Ptm::open(pool, opts).map_err(|e| e.to_string()),
        |_, ptm, m| check(ptm, m, threads),
    )?)
}

/// The workload of one run: `threads` threads (1, or 2 in lockstep).
fn workload(pool: &Pool, m: &mut Model, opts: &PtmOptions, seed: u64, threads: usize) {
    {
        {
            let ptm = Ptm::open(pool, opts).unwrap_or_else(|e| panic!("open: {e}"));
            let bank = ptm.peek(ptm.root().raw()).expect("bank");
            if threads == 1 {
                let mut th = ptm.thread().expect("thread");
                let mut mirror = Mirror::initial();
                m.states.push(mirror.digest());
                for i in 0..MAIN_TXS {
                    let s = step(seed, 0, i);
                    mirror.apply(0, &s);
                    m.states.push(mirror.digest());
                    bank_tx(&mut th, bank, 0, &s);
                    m.acked[0] += 1;
                }
            } else {
                let ptm = &ptm;
                let bodies: Vec<Box<dyn FnOnce() + Send + '_>> = m
                    .acked
                    .iter_mut()
                    .zip(m.aborts.iter_mut())
                    .enumerate()
                    .map(|(t, (acked, aborts))| {
                        Box::new(move || {
                            let mut th = ptm.thread().expect("thread");
                            for i in 0..THREAD_TXS {
                                bank_tx(&mut th, bank, t, &step(seed, t, i));
                                *acked += 1;
                                *aborts = th.stats().aborts;
                            }
                        }) as Box<dyn FnOnce() + Send + '_>
                    })
                    .collect();
                lockstep::run(seed, 3, bodies);
            }
        }
    }
}

/// Size of the simulated pool of the workload checks.
pub const WORKLOAD_POOL_SIZE: u64 = 1536 * 1024;
const WORKLOAD_TXS: u64 = 6;
const WORKLOAD_THREAD_TXS: u64 = 3;

/// Crash checks of P3's workloads ([`crate::workloads`]) at their Tiny
/// scale: the data loaded by the setup, then transactions of one thread
/// (`adr`, and `eadr` crashing before every store) and of two lockstep
/// threads (`adr`); after recovery the workload's own invariants hold
/// (its `check`: structure, row counts, TPC-C's order and stock sums,
/// Vacation's reservations) and one more transaction runs and checks.
/// The hash map, the B+tree (splits) and the red-black trees (rotations,
/// frees) crash in the middle of real transactions this way.
pub fn check_workload(
    kind: crate::workloads::WorkloadKind,
    alg: Algorithm,
    cfg: Config,
) -> Result<Vec<(String, Report)>, CheckError> {
    let opts = check_options(alg).log_bytes(16384);
    let plan = vec![
        (RunSpec::new(Domain::Adr, 1), 2),
        (RunSpec::new(Domain::Adr, 2), 2),
        (RunSpec::new(Domain::Eadr, 1), 1),
    ];
    spend_budget(
        &cfg,
        plan,
        4,
        |i| RunSpec {
            seed_shift: i + 1,
            ..RunSpec::new(Domain::Adr, 1 + (i as usize % 2))
        },
        |s| format!("{}/{}", kind.name(), s.name()),
        |spec, c| run_workload(kind, &opts, spec, c.clone()),
    )
}

fn run_workload(
    kind: crate::workloads::WorkloadKind,
    opts: &PtmOptions,
    spec: RunSpec,
    cfg: Config,
) -> Result<Report, CheckError> {
    use crate::workloads::{Scale, make, thread_rng};
    let mut cfg = cfg;
    cfg.layout = LAYOUT.into();
    cfg.pool_size = WORKLOAD_POOL_SIZE;
    cfg.domain = spec.domain;
    cfg.seed = cfg.seed.wrapping_add(spec.seed_shift);
    if spec.domain != Domain::Adr {
        cfg.crash_on_store = true;
    }
    let seed = cfg.seed;
    let threads = spec.threads;
    let w = make(kind, Scale::Tiny, 7);
    let w = &*w;
    let explorer = Explorer::new(cfg).setup(move |p| {
        let ptm = Ptm::create(p, opts).unwrap_or_else(|e| panic!("creating the PTM: {e}"));
        w.load(&ptm)
            .unwrap_or_else(|e| panic!("loading {}: {e}", kind.name()));
    });
    Ok(explorer.explore(
        |pool: &Pool, _m: &mut ()| {
            let ptm = Ptm::open(pool, opts).unwrap_or_else(|e| panic!("open: {e}"));
            if threads == 1 {
                let mut th = ptm.thread().expect("thread");
                let mut rng = thread_rng(seed, 0);
                for i in 0..WORKLOAD_TXS {
                    w.run_one(&mut th, 0, 1, &mut rng)
                        .unwrap_or_else(|e| panic!("transaction {i}: {e}"));
                }
            } else {
                let ptm = &ptm;
                let bodies: Vec<Box<dyn FnOnce() + Send + '_>> = (0..threads)
                    .map(|t| {
                        Box::new(move || {
                            let mut th = ptm.thread().expect("thread");
                            let mut rng = thread_rng(seed, t);
                            for i in 0..WORKLOAD_THREAD_TXS {
                                w.run_one(&mut th, t, threads, &mut rng)
                                    .unwrap_or_else(|e| panic!("thread {t} transaction {i}: {e}"));
                            }
                        }) as Box<dyn FnOnce() + Send + '_>
                    })
                    .collect();
                lockstep::run(seed, 3, bodies);
            }
        },
        |pool| Ptm::open(pool, opts).map_err(|e| e.to_string()),
        |_, ptm, _| {
            w.check(ptm)?;
            let mut th = ptm
                .thread()
                .map_err(|e| format!("thread after recovery: {e}"))?;
            let mut rng = thread_rng(seed ^ 0xabcd, 0);
            w.run_one(&mut th, 0, 1, &mut rng)
                .map_err(|e| format!("a transaction after recovery: {e}"))?;
            drop(th);
            w.check(ptm)
                .map_err(|e| format!("after one more transaction: {e}"))
        },
    )?)
}

/// Faults a check must catch for `alg`, and P3's fence removal.
pub fn planted(alg: Algorithm) -> Vec<(String, Option<Fault>, bool)> {
    let mut v: Vec<(String, Option<Fault>, bool)> = Fault::ALL
        .into_iter()
        .filter(|f| f.algorithm().is_none_or(|a| a == alg))
        .map(|f| (f.name().to_string(), Some(f), false))
        .collect();
    v.push(("fence-removal".into(), None, true));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(runs: &[(String, Report)]) -> (usize, usize) {
        runs.iter().fold((0, 0), |(s, v), (_, r)| {
            (s + r.states, v + r.violation_count)
        })
    }

    #[test]
    fn both_algorithms_survive_every_crash() {
        for alg in Algorithm::ALL {
            let runs = check_ptm(alg, Config::new(LAYOUT).budget(400).seed(3)).unwrap();
            for (name, r) in &runs {
                assert!(
                    r.ok(),
                    "{alg} {name}: {:?}",
                    r.violations.first().map(|v| v.to_string())
                );
            }
            let (states, _) = total(&runs);
            assert!(states >= 300, "{alg}: only {states} states");
            let names: BTreeSet<String> = runs.iter().map(|(n, _)| n.clone()).collect();
            for d in ["adr-1t", "adr-2t", "eadr-1t", "pdram-1t", "pdram-lite-2t"] {
                assert!(names.contains(d), "{alg}: run {d} missing from {names:?}");
            }
        }
    }

    #[test]
    fn planted_bugs_are_caught() {
        for alg in Algorithm::ALL {
            for (name, fault, fr) in planted(alg) {
                let runs =
                    check_ptm_fault(alg, Config::new(LAYOUT).budget(3000).seed(5), fault, fr)
                        .unwrap();
                let (states, violations) = total(&runs);
                assert!(
                    violations > 0,
                    "{alg}: planted {name} not caught in {states} states"
                );
            }
        }
    }

    #[test]
    fn workloads_survive_crashes() {
        for kind in crate::workloads::WorkloadKind::ALL {
            for alg in Algorithm::ALL {
                let runs =
                    check_workload(kind, alg, Config::new(LAYOUT).budget(60).seed(2)).unwrap();
                for (name, r) in &runs {
                    assert!(
                        r.ok(),
                        "{alg} {name}: {:?}",
                        r.violations.first().map(|v| v.to_string())
                    );
                }
            }
        }
    }

    #[test]
    fn pdram_lite_rule_drops_only_idle_logs() {
        let pool = Pool::create_in_memory(
            &ferrite_pmem::PoolOptions::new(LAYOUT, CHECK_POOL_SIZE).domain(Domain::PdramLite),
        )
        .unwrap();
        let ptm = Ptm::create(&pool, &check_options(Algorithm::Lazy)).unwrap();
        drop(ptm);
        let mut img = pool.image();
        let sb = {
            let raw: [u8; 64] = img[format::SB_OFF as usize..][..64].try_into().unwrap();
            Superblock::decode(&raw, img.len() as u64).unwrap()
        };
        let s1 = sb.slot_off(1) as usize;
        img[s1..s1 + 8].copy_from_slice(&format::status(3, format::NEEDS_REDO).to_le_bytes());
        img[s1 + 64..s1 + 72].copy_from_slice(&[7; 8]);
        pdram_lite_rule(&mut img);
        let s0 = sb.slot_off(0) as usize + 64;
        assert_eq!(img[s0], 0xa5, "idle slot's log kept");
        assert_eq!(img[s1 + 64], 7, "committed slot's log dropped");
    }

    #[test]
    fn lockstep_runs_conflict_and_abort() {
        // The two-thread runs of the checks really conflict: replay the
        // uncrashed workload of a few seeds and count the re-executions.
        for alg in Algorithm::ALL {
            let opts = check_options(alg);
            let mut aborts = 0;
            for seed in 0..4 {
                let pool = Pool::create_in_memory(
                    &ferrite_pmem::PoolOptions::new(LAYOUT, CHECK_POOL_SIZE).domain(Domain::Adr),
                )
                .unwrap();
                setup(&pool, &opts);
                let ex = Explorer::new(
                    Config::new(LAYOUT)
                        .pool_size(CHECK_POOL_SIZE)
                        .domain(Domain::Adr),
                );
                let (end, _) = ex
                    .simulate::<Model>(&pool.image(), None, |p, m| workload(p, m, &opts, seed, 2))
                    .unwrap();
                match end {
                    ferrite_crash::SimRun::Finished(_, m) => {
                        assert_eq!(m.acked, [THREAD_TXS; 2]);
                        aborts += m.aborts.iter().sum::<u64>();
                    }
                    _ => panic!("{alg}: the workload did not finish"),
                }
            }
            assert!(aborts > 0, "{alg}: no conflict in the lockstep runs");
            eprintln!("{alg}: {aborts} aborts in 4 lockstep runs of 2 × {THREAD_TXS}");
        }
    }

    #[test]
    fn abort_is_exercised_by_two_threads() {
        // The lockstep bank run really conflicts: count aborts outside the
        // explorer with the same schedule machinery.
        let pool = Pool::create_in_memory(
            &ferrite_pmem::PoolOptions::new(LAYOUT, CHECK_POOL_SIZE).domain(Domain::Adr),
        )
        .unwrap();
        for alg in Algorithm::ALL {
            let opts = check_options(alg);
            setup(&pool, &opts);
            let ptm = Ptm::open(&pool, &opts).unwrap();
            let bank = ptm.peek(ptm.root().raw()).unwrap();
            let aborts = std::sync::atomic::AtomicU64::new(0);
            std::thread::scope(|s| {
                for t in 0..THREADS {
                    let (ptm, aborts) = (&ptm, &aborts);
                    s.spawn(move || {
                        let mut th = ptm.thread().unwrap();
                        for i in 0..2000 {
                            bank_tx(&mut th, bank, t, &step(9, t, i));
                        }
                        aborts.fetch_add(th.stats().aborts, std::sync::atomic::Ordering::Relaxed);
                    });
                }
            });
            let (m, _) = read_bank(&ptm).unwrap();
            assert_eq!(m.words[G], 4000, "{alg}");
            eprintln!("{alg}: {} aborts in 4000 transactions", aborts.into_inner());
        }
    }
}
