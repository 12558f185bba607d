//! Crash checks of transactions on the data structures, run through the
//! `ferrite-crash` explorer (feature `checks`; also compiled for this
//! crate's tests). `ferrite check tx-<strategy>-<structure>` calls
//! [`check_tx`].
//!
//! # Workload
//!
//! A transactional pool (two log slots) in a 512 KiB simulated pool holds
//! one structure (small values and nodes, so splits, rehashes and
//! rebalancing happen within a few dozen operations). Two *simulated
//! threads* — two [`TxThread`]s on the one OS thread the explorer requires,
//! alternating by a seeded script, each a [`SimThread`] whose fences
//! complete only its own flushes — insert new keys, update and remove
//! existing ones (a key space of 40, so all three happen), remove missing
//! keys and look keys up, checking each lookup against the model. Every
//! operation is one transaction; the model records what each returned.
//! The B+tree's script grows the tree for its first half and then mostly
//! removes keys it holds, so leaves underflow: borrows, merges (cascading
//! ones too) and root collapses are among what is crashed.
//!
//! Here transactions run whole, one after the other: a crash catches at
//! most one in the middle (beside finished ones whose completion is not
//! yet durable).
//!
//! The *interleaved* workload ([`interleaved`]) closes that gap: a pool
//! with two instances of the structure, two threads on their own OS
//! threads under [`ferrite_crash::lockstep`], handing over at stores,
//! flushes and fences by a seeded schedule, so a crash catches two
//! transactions mid-flight — on different instances for every structure,
//! and on different sub-maps of one hash map (operations whose lock sets
//! may meet run one after the other, as strict 2PL makes them).
//!
//! # Invariant (after recovery from every crash state, nested crashes too)
//!
//! - the pool opens: undo transactions are rolled back, redo records
//!   replayed, clobber transactions restored and re-executed, and no
//!   re-execution diverged from the crashed run (non-determinism);
//! - the structure is well formed ([`crate::KvMap::shape`]: ordering, balance,
//!   counts, links, every block allocated and large enough);
//! - its contents equal the model of acknowledged operations, plus the
//!   operation in flight (each of the two, in the interleaved run) if it
//!   took effect. Under clobber logging this is exact: an operation in
//!   flight took effect if and only if recovery re-executed it or its
//!   v_log was durable ("committed plus re-executed");
//! - nothing leaks and nothing is shared: the heap's allocated blocks are
//!   exactly the structure's (structures') blocks;
//! - the recovered pool works: a new key can be inserted, found and
//!   removed, leaving the structure well formed.
//!
//! # Runs
//!
//! The budget is split ([`ferrite_crash::explorer::spend_budget`]) between:
//! the main workload (line granularity, weight 2), the same in tearing
//! mode (8-byte failure atomicity), a *restart* run that crashes the
//! main workload at a seeded point, recovers a seeded image of it and
//! explores a second workload on top, and the *interleaved* run (weight
//! 2). Budget left over goes to main and interleaved runs in turn, with
//! new seeds. The run's seed picks the script (and the interleaving);
//! `--seed S --at P` replays a state of any run, the interleaved one too.
//!
//! [`Fault::FirstSlotOnly`] (recovery that handles one slot's interrupted
//! transactions) is caught by the interleaved run; the sequential runs
//! can expose it only when a nested crash interrupts recovery's own use
//! of the pool beside a forgotten transaction (rarely, and never without
//! a nested crash).

use crate::{self as ds, DsOptions, Shape, Structure};
use ferrite_alloc::PAllocator;
use ferrite_crash::explorer::spend_budget;
use ferrite_crash::sim::SimThread;
use ferrite_crash::{Config, CrashAt, ExploreError, Explorer, Report, SimRun};
use ferrite_pmem::{Pool, PoolOptions};
use ferrite_tx::{Fault, Strategy, TxOptions, TxPool, TxRecovery, TxThread};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub mod bytemap;
pub mod interleaved;

/// Size of the simulated pool every check uses.
pub const CHECK_POOL_SIZE: u64 = 512 * 1024;
/// Keys the script draws from.
pub const KEYS: u64 = 40;
/// Bytes of each value in the checks.
pub const VALUE_LEN: usize = 24;
const MAIN_STEPS: usize = 36;
const RESTART_STEPS: usize = 14;
const MAIN_SCRIPT: u64 = 0x6d61_696e;
const RESTART_SCRIPT: u64 = 0x7265_7374;
const INTERLEAVED_SCRIPT: u64 = 0x696e_746c;
const MAX_EXTRA: u64 = 16;
const NONCE: u64 = 0x7e57_7a11_5eed_0001;
/// Inserts and removes out of 10 draws (the rest are lookups).
const MIX: (u64, u64) = (6, 3);
/// The B+tree's script grows the tree in its first half and shrinks it in
/// the second, removing keys it holds: removals then leave leaves below
/// the minimum, so borrows, merges and root collapses are crashed too
/// (with the uniform mix they hardly happen within a script).
const BPTREE_GROW: (u64, u64) = (8, 1);
const BPTREE_SHRINK: (u64, u64) = (2, 7);
/// Accesses one transaction of the checks may make: far above what the
/// small structures need, low enough that a transaction looping over a
/// structure a planted bug corrupted fails fast instead of hanging.
const ACCESS_LIMIT: u64 = 20_000;

/// Why a check could not run (a violation is not an error: it is in the report).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("explorer: {0}")]
    /// The crash explorer failed.
    Explore(#[from] ExploreError),
    #[error("setup: {0}")]
    /// The pool or the structure could not be set up.
    Setup(String),
    #[error("no-log is not failure-atomic: there is nothing to check")]
    /// No-log transactions promise nothing after a crash.
    NoLog,
}

/// Structure options of the checks: small values, two buckets per
/// sub-map and four sub-maps (rehashes), fanout 4 (splits), 6 levels.
pub fn check_options() -> DsOptions {
    DsOptions {
        value_len: VALUE_LEN,
        subs: 4,
        buckets: 2,
        fanout: 4,
        levels: 6,
    }
}

fn pool_opts() -> PoolOptions {
    PoolOptions::new("tx-check", CHECK_POOL_SIZE)
}

fn tx_opts(s: Strategy) -> TxOptions {
    TxOptions::new(s).slots(2).area_bytes(8192).nonce(NONCE)
}

/// Deterministic value of `key` at `version`.
pub fn value(key: u64, version: u64) -> Vec<u8> {
    let mut x = ds::mix64(key.wrapping_mul(31).wrapping_add(version));
    (0..VALUE_LEN)
        .map(|_| {
            x = ds::mix64(x);
            x as u8
        })
        .collect()
}

/// One scripted operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Insert or update `key` with [`value`]`(key, version)`.
    Insert {
        /// The key.
        key: u64,
        /// Which of the key's values ([`value`]).
        version: u64,
    },
    /// Remove `key`.
    Remove {
        /// The key.
        key: u64,
    },
    /// Look `key` up (a read: nothing to recover).
    Get {
        /// The key.
        key: u64,
    },
}

impl Op {
    /// True when a re-executed transaction's v_log buffers (arguments
    /// `[header, key]`, then the value for inserts) are this operation's.
    /// (Two removes of one key are indistinguishable, and equivalent.)
    fn is(&self, bufs: &[Vec<u8>]) -> bool {
        let key_of = |b: &[Vec<u8>]| (b[0].len() >= 16).then(|| ds::le(&b[0], 8));
        if bufs.is_empty() {
            return false;
        }
        match *self {
            Op::Insert { key, version } => {
                bufs.len() == 2 && key_of(bufs) == Some(key) && bufs[1] == value(key, version)
            }
            Op::Remove { key } => bufs.len() == 1 && key_of(bufs) == Some(key),
            Op::Get { .. } => false,
        }
    }

    fn apply(&self, m: &mut BTreeMap<u64, Vec<u8>>) {
        match *self {
            Op::Insert { key, version } => {
                m.insert(key, value(key, version));
            }
            Op::Remove { key } => {
                m.remove(&key);
            }
            Op::Get { .. } => {}
        }
    }
}

/// What the workload saw acknowledged.
#[derive(Debug, Default)]
pub struct Model {
    /// Key → value of every acknowledged operation.
    pub committed: BTreeMap<u64, Vec<u8>>,
    /// The operation that was running when the crash came.
    pub inflight: Option<Op>,
    /// Operations acknowledged.
    pub ops: usize,
    /// Clobber v_log fences completed so far ([`TxThread::set_witness`]),
    /// and their number when the operation in flight began: when it grew,
    /// that operation's v_log was durable and it must take effect.
    pub witness: Arc<AtomicU64>,
    /// [`Model::witness`] when the operation in flight began.
    pub witness_at_start: u64,
    /// The structure's event counters ([`ds::KvMap::counters`]) after a
    /// run that was not crashed: shows what the script makes happen
    /// (e.g. B+tree merges).
    pub counters: Vec<(&'static str, u64)>,
}

/// splitmix64 stream for the scripts.
pub(crate) struct Script(u64);

impl Script {
    pub(crate) fn next(&mut self, m: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        ds::mix64(self.0) % m
    }
}

/// Runs `steps` scripted operations of `seed` on the structure in `pool`.
fn run_script(
    pool: &Pool,
    strategy: Strategy,
    s: Structure,
    fault: Fault,
    seed: u64,
    steps: usize,
    model: &mut Model,
) {
    let txp = TxPool::open_inner(pool, ds::registry(), Some(strategy), fault, ACCESS_LIMIT)
        .unwrap_or_else(|e| panic!("open: {e}"));
    let map = ds::open(s, &txp, txp.root()).unwrap_or_else(|e| panic!("open {s}: {e}"));
    let mut th: Vec<TxThread<'_>> = (0..2)
        .map(|_| {
            let mut t = txp.thread().unwrap_or_else(|e| panic!("attach: {e}"));
            t.set_witness(model.witness.clone());
            t
        })
        .collect();
    let mut rng = Script(seed);
    let mut versions: BTreeMap<u64, u64> = BTreeMap::new();
    for step in 0..steps {
        let t = rng.next(2) as usize;
        let key = rng.next(KEYS);
        let draw = rng.next(10);
        let shrink = s == Structure::BpTree && step >= steps / 2;
        let (inserts, removes) = match (s, shrink) {
            (Structure::BpTree, false) => BPTREE_GROW,
            (Structure::BpTree, true) => BPTREE_SHRINK,
            _ => MIX,
        };
        let op = if draw < inserts {
            let v = versions.entry(key).or_insert(0);
            *v += 1;
            Op::Insert { key, version: *v }
        } else if draw < inserts + removes {
            // Shrinking, remove keys the tree holds, so nodes underflow.
            let held = model.committed.len() as u64;
            let key = match model.committed.keys().nth((key % held.max(1)) as usize) {
                Some(&k) if shrink => k,
                _ => key,
            };
            Op::Remove { key }
        } else {
            Op::Get { key }
        };
        model.inflight = Some(op);
        model.witness_at_start = model.witness.load(Ordering::Acquire);
        // Each handle is its own simulated thread: its fences complete only
        // its own flushes (what `sfence` does), so completion hand-offs
        // between slots must work as the real hardware would.
        let _sim = SimThread::enter(t as u32);
        match op {
            Op::Insert { key, version } => {
                let new = map
                    .insert(&mut th[t], key, &value(key, version))
                    .unwrap_or_else(|e| panic!("insert {key}: {e}"));
                assert_eq!(
                    new,
                    !model.committed.contains_key(&key),
                    "insert {key}: 'new' disagrees with the model"
                );
            }
            Op::Remove { key } => {
                let was = map
                    .remove(&mut th[t], key)
                    .unwrap_or_else(|e| panic!("remove {key}: {e}"));
                assert_eq!(
                    was,
                    model.committed.contains_key(&key),
                    "remove {key}: disagrees with the model"
                );
            }
            Op::Get { key } => {
                let got = map.get(key).unwrap_or_else(|e| panic!("get {key}: {e}"));
                assert_eq!(got.as_ref(), model.committed.get(&key), "get {key}");
            }
        }
        op.apply(&mut model.committed);
        model.inflight = None;
        model.ops += 1;
    }
    model.counters = map.counters();
}

/// What recovery left, for the invariant check.
#[derive(Debug)]
pub struct Recovered {
    /// What recovery did (slots rolled back, replayed, re-executed).
    pub report: TxRecovery,
    /// The structure's walk after recovery.
    pub shape: Shape,
    /// Allocated blocks: offset → usable size.
    pub allocated: BTreeMap<u64, usize>,
}

/// Recovery as every crash state runs it: open (recover), walk the
/// structure, and use it once.
pub fn recover(
    pool: &Pool,
    strategy: Strategy,
    s: Structure,
    fault: Fault,
) -> Result<Recovered, String> {
    let mut r = recover_maps(pool, strategy, s, fault, None)?;
    Ok(Recovered {
        report: r.report,
        shape: r.shapes.pop().expect("one structure"),
        allocated: r.allocated,
    })
}

/// What recovery left of a pool holding several structures.
#[derive(Debug)]
pub struct RecoveredMaps {
    /// What recovery did (slots rolled back, replayed, re-executed).
    pub report: TxRecovery,
    /// One per header, in the order given.
    pub shapes: Vec<Shape>,
    /// Allocated blocks: offset → usable size.
    pub allocated: BTreeMap<u64, usize>,
}

/// [`recover`] for the structures whose headers are `headers` (the root's
/// when `None`): open (recover), then walk and use each.
fn recover_maps(
    pool: &Pool,
    strategy: Strategy,
    s: Structure,
    fault: Fault,
    headers: Option<&[u64]>,
) -> Result<RecoveredMaps, String> {
    let txp = TxPool::open_inner(pool, ds::registry(), Some(strategy), fault, ACCESS_LIMIT)
        .map_err(|e| format!("open: {e}"))?;
    let report = txp.recovery().clone();
    let root = [txp.root()];
    let headers = headers.unwrap_or(&root);
    let mut shapes = Vec::with_capacity(headers.len());
    for (i, &h) in headers.iter().enumerate() {
        let map = ds::open(s, &txp, h).map_err(|e| format!("open {s} #{i}: {e}"))?;
        shapes.push(use_recovered(&txp, map.as_ref()).map_err(|e| {
            if headers.len() > 1 {
                format!("{s} #{i}: {e}")
            } else {
                e
            }
        })?);
    }
    let mut allocated = BTreeMap::new();
    txp.heap().for_each_allocated(&mut |off, n| {
        allocated.insert(off.raw(), n);
    });
    Ok(RecoveredMaps {
        report,
        shapes,
        allocated,
    })
}

/// Walks a recovered structure and uses it once; returns its shape.
fn use_recovered(txp: &TxPool, map: &dyn ds::KvMap) -> Result<Shape, String> {
    let s = map.structure();
    let k = KEYS + 1000;
    let mut before = map.shape().map_err(|e| format!("malformed {s}: {e}"))?;
    // The recovered pool must work: remove, insert, find and remove a key
    // outside the script's. (A nested crash may have interrupted this very
    // step in an earlier recovery, so the key may be there already.)
    {
        let mut th = txp.thread().map_err(|e| format!("attach: {e}"))?;
        map.remove(&mut th, k)
            .map_err(|e| format!("remove after recovery: {e}"))?;
        let v = value(k, 0);
        let new = map
            .insert(&mut th, k, &v)
            .map_err(|e| format!("insert after recovery: {e}"))?;
        if !new || map.get(k).map_err(|e| e.to_string())? != Some(v) {
            return Err("insert after recovery did not take".into());
        }
        if !map.remove(&mut th, k).map_err(|e| e.to_string())? {
            return Err("remove after recovery did not find the key".into());
        }
    }
    let shape = map
        .shape()
        .map_err(|e| format!("malformed {s} after using the recovered pool: {e}"))?;
    before.entries.remove(&k);
    if before.entries != shape.entries {
        return Err("using the recovered pool changed its contents".into());
    }
    Ok(shape)
}

/// The invariant.
pub fn check(strategy: Strategy, r: &Recovered, m: &Model) -> Result<(), String> {
    if let Some(d) = r.report.nondeterministic.first() {
        return Err(format!("re-execution diverged: {d}"));
    }
    let got = &r.shape.entries;
    let mut with = m.committed.clone();
    let reexecuted = m.inflight.is_some_and(|op| {
        r.report
            .reexecuted_inputs
            .iter()
            .any(|(_, bufs)| op.is(bufs))
    });
    if let Some(op) = m.inflight {
        op.apply(&mut with);
    }
    // A clobber transaction whose v_log is durable has begun and is never
    // rolled back: it must have taken effect (re-executed now, or by an
    // earlier recovery that a nested crash interrupted later).
    let begun = m.inflight.is_some() && m.witness.load(Ordering::Acquire) > m.witness_at_start;
    let ok = match strategy {
        Strategy::Clobber if reexecuted || begun => *got == with,
        _ => *got == m.committed || *got == with,
    };
    if !ok {
        return Err(format!(
            "contents differ from the model after {} ops (in flight {:?}, begun {begun}, re-executed {}): \
             keys wrong or extra {:?}, keys missing or stale {:?}",
            m.ops,
            m.inflight,
            reexecuted,
            diff(got, &m.committed),
            diff(&m.committed, got)
        ));
    }
    check_blocks(&[&r.shape.blocks], &r.allocated)
}

/// Nothing leaks and nothing is shared: the allocated blocks are exactly
/// the blocks the structures reference, each referenced once.
fn check_blocks(shapes: &[&[(u64, u64)]], allocated: &BTreeMap<u64, usize>) -> Result<(), String> {
    let mut blocks: BTreeMap<u64, u64> = BTreeMap::new();
    for &(off, n) in shapes.iter().flat_map(|s| s.iter()) {
        if blocks.insert(off, n).is_some() {
            return Err(format!("block {off:#x} is referenced twice"));
        }
    }
    for (&off, &n) in allocated {
        if !blocks.contains_key(&off) {
            return Err(format!(
                "block {off:#x} ({n} bytes) is allocated but unreachable (leak)"
            ));
        }
    }
    for &off in blocks.keys() {
        if !allocated.contains_key(&off) {
            return Err(format!("block {off:#x} is reachable but not allocated"));
        }
    }
    Ok(())
}

/// Keys whose values differ between `a` and `b` or that only `a` has.
fn diff(a: &BTreeMap<u64, Vec<u8>>, b: &BTreeMap<u64, Vec<u8>>) -> Vec<u64> {
    a.iter()
        .filter(|(k, v)| b.get(k) != Some(v))
        .map(|(k, _)| *k)
        .collect()
}

/// The durable starting image: an empty structure of kind `s`.
fn setup(pool: &Pool, strategy: Strategy, s: Structure) {
    let txp = TxPool::create(pool, &tx_opts(strategy), ds::registry())
        .unwrap_or_else(|e| panic!("create: {e}"));
    let mut th = txp.thread().expect("a slot");
    ds::create(s, &mut th, check_options()).unwrap_or_else(|e| panic!("create {s}: {e}"));
}

fn explorer<'a>(cfg: Config, strategy: Strategy, s: Structure) -> Explorer<'a> {
    let mut cfg = cfg;
    cfg.layout = "tx-check".into();
    cfg.pool_size = CHECK_POOL_SIZE;
    Explorer::new(cfg).setup(move |p| setup(p, strategy, s))
}

/// Explores `steps` operations of script `seed` with a planted `fault`.
pub fn check_fault(
    strategy: Strategy,
    s: Structure,
    cfg: Config,
    fault: Fault,
    seed: u64,
    steps: usize,
) -> Result<Report, CheckError> {
    if strategy == Strategy::NoLog {
        return Err(CheckError::NoLog);
    }
    Ok(explorer(cfg, strategy, s).explore(
        |pool: &Pool, m: &mut Model| run_script(pool, strategy, s, fault, seed, steps, m),
        |pool| recover(pool, strategy, s, fault),
        |_, r, m| check(strategy, r, m),
    )?)
}

/// The restart run: crashes the main workload at a seeded fence, picks a
/// seeded image of that crash, recovers it, and explores a second
/// workload on top of the recovered pool.
fn check_restart(
    strategy: Strategy,
    s: Structure,
    cfg: Config,
    fault: Fault,
) -> Result<Report, CheckError> {
    let seed = cfg.seed;
    // Count the main workload's fences, then crash it at one of them.
    let base = {
        let p = Pool::create_in_memory(&pool_opts().domain(cfg.domain))
            .map_err(|e| CheckError::Setup(e.to_string()))?;
        setup(&p, strategy, s);
        p.image()
    };
    let mut c = cfg;
    c.layout = "tx-check".into();
    c.pool_size = CHECK_POOL_SIZE;
    let main = Explorer::new(c.clone());
    let run = |at: Option<CrashAt>| {
        main.simulate::<Model>(&base, at, |pool, m| {
            run_script(pool, strategy, s, Fault::None, seed, MAIN_STEPS, m)
        })
    };
    let (_, counts) = run(None)?;
    let fences = counts.fences.max(1);
    let mut rng = Script(seed ^ 0xc4a5);
    let at = CrashAt::Fence(1 + rng.next(fences));
    let state = match run(Some(at))?.0 {
        SimRun::Crashed(st, _) => st,
        SimRun::Finished(..) => {
            return Err(CheckError::Setup("the crash point was not reached".into()));
        }
        SimRun::Panicked(m) => {
            return Err(CheckError::Setup(format!(
                "the main workload panicked: {m}"
            )));
        }
    };
    // A sampled image: usually some of what was in flight survived.
    let image = state.build(|_, u| (rng.next(2) as usize) * u.candidates.len().min(1));
    let recovered = {
        let p = Pool::open_image(&image, &pool_opts(), c.domain, None)
            .map_err(|e| CheckError::Setup(e.to_string()))?;
        recover(&p, strategy, s, Fault::None)
            .map_err(|e| CheckError::Setup(format!("recovering the restart image: {e}")))?;
        p.image()
    };
    let start = recovered.clone();
    Ok(Explorer::new(c)
        .setup(move |p| {
            let whole = ferrite_pmem::Region::whole(p.medium().clone());
            whole.write(0, &start);
            whole.persist(0, start.len());
        })
        .explore(
            |pool: &Pool, m: &mut Model| {
                // The model starts from what the recovered pool holds.
                let txp = TxPool::open(pool, ds::registry(), Some(strategy)).expect("open");
                let map = ds::open(s, &txp, txp.root()).expect("open structure");
                m.committed = map.shape().expect("recovered shape").entries;
                drop(map);
                drop(txp);
                run_script(
                    pool,
                    strategy,
                    s,
                    fault,
                    seed ^ RESTART_SCRIPT,
                    RESTART_STEPS,
                    m,
                )
            },
            |pool| recover(pool, strategy, s, fault),
            |_, r, m| check(strategy, r, m),
        )?)
}

/// One run of a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Run {
    /// The main workload, line granularity.
    Main,
    /// The main workload, 8-byte failure atomicity.
    Tearing,
    /// A second workload on a recovered crash image of the main one.
    Restart,
    /// Two threads on their own OS threads, interleaved at medium events:
    /// two transactions in flight at once ([`interleaved`]).
    Interleaved,
}

impl Run {
    /// The run's name in reports (`main`, `restart`, …).
    pub fn name(self) -> &'static str {
        match self {
            Run::Main => "main",
            Run::Tearing => "tearing",
            Run::Restart => "restart",
            Run::Interleaved => "interleaved",
        }
    }
}

/// The runs a check starts with, and their weights in the budget (extra
/// runs are [`Run::Main`] with new seeds).
pub fn plan(cfg: &Config) -> Vec<(Run, usize)> {
    let mut v = vec![(Run::Main, 2)];
    if !cfg.tearing {
        v.push((Run::Tearing, 1));
    }
    v.push((Run::Restart, 1));
    v.push((Run::Interleaved, 2));
    v
}

/// Extra run `i` (budget left over): main and interleaved in turn.
pub fn extra_run(i: u64) -> Run {
    if i.is_multiple_of(2) {
        Run::Main
    } else {
        Run::Interleaved
    }
}

/// The run names [`check_tx`] starts with for `cfg`.
pub fn run_names(cfg: &Config) -> Vec<String> {
    plan(cfg)
        .iter()
        .map(|(r, _)| r.name().to_string())
        .collect()
}

/// Explores one run with `cfg` (its seed picks the script) and a planted
/// `fault` ([`Fault::None`] for the real thing).
pub fn check_run(
    strategy: Strategy,
    s: Structure,
    run: Run,
    cfg: Config,
    fault: Fault,
) -> Result<Report, CheckError> {
    let script = cfg.seed ^ MAIN_SCRIPT;
    match run {
        Run::Main => check_fault(strategy, s, cfg, fault, script, MAIN_STEPS),
        Run::Tearing => check_fault(strategy, s, cfg.tearing(true), fault, script, MAIN_STEPS),
        Run::Restart => check_restart(strategy, s, cfg, fault),
        Run::Interleaved => check_interleaved(strategy, s, cfg, fault),
    }
}

/// The interleaved run ([`interleaved`]): two threads' scripts of the
/// run's seed on two instances of `s`, interleaved by a schedule of that
/// seed.
pub fn check_interleaved(
    strategy: Strategy,
    s: Structure,
    cfg: Config,
    fault: Fault,
) -> Result<Report, CheckError> {
    if strategy == Strategy::NoLog {
        return Err(CheckError::NoLog);
    }
    let hs =
        interleaved::headers(&pool_opts(), cfg.domain, strategy, s).map_err(CheckError::Setup)?;
    let seed = cfg.seed ^ INTERLEAVED_SCRIPT;
    let mut cfg = cfg;
    cfg.layout = "tx-check".into();
    cfg.pool_size = CHECK_POOL_SIZE;
    Ok(Explorer::new(cfg)
        .setup(move |p| {
            interleaved::setup(p, strategy, s);
        })
        .explore(
            |pool: &Pool, m: &mut interleaved::Model| {
                interleaved::run(pool, strategy, s, fault, hs, seed, m)
            },
            |pool| interleaved::recover(pool, strategy, s, fault, &hs),
            |_, r, m| interleaved::check(strategy, &hs, r, m),
        )?)
}

/// `ferrite check tx-<strategy>-<structure>`: transactions with
/// `strategy` on structure `s`, `cfg.budget` crash states split over the
/// runs of [`plan`] (leftover budget: main runs with seeds `cfg.seed + 1`,
/// `+ 2`, …), with a planted `fault` or [`Fault::None`]. The pool size and
/// layout of `cfg` are replaced; its domain, tearing, crash points, seed,
/// nesting, progress and `only` are used (`only` replays one state in
/// every run; a violation of an extra run replays with its own seed).
/// Returns one report per run.
pub fn check_tx_fault(
    strategy: Strategy,
    s: Structure,
    cfg: Config,
    fault: Fault,
) -> Result<Vec<(String, Report)>, CheckError> {
    if strategy == Strategy::NoLog {
        return Err(CheckError::NoLog);
    }
    spend_budget(
        &cfg,
        plan(&cfg),
        MAX_EXTRA,
        extra_run,
        |r| r.name().to_string(),
        |r, c| check_run(strategy, s, r, c.clone(), fault),
    )
}

/// [`check_tx_fault`] without a planted bug: what `ferrite check
/// tx-<strategy>-<structure>` runs.
pub fn check_tx(
    strategy: Strategy,
    s: Structure,
    cfg: Config,
) -> Result<Vec<(String, Report)>, CheckError> {
    check_tx_fault(strategy, s, cfg, Fault::None)
}

/// A planted bug the check of `strategy` must catch.
pub fn planted_fault(strategy: Strategy) -> Fault {
    match strategy {
        Strategy::Undo => Fault::UndoNoFence,
        Strategy::Redo => Fault::RedoApplyEarly,
        Strategy::Clobber | Strategy::NoLog => Fault::ClobberNoInputLog,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_workload_runs_clean_without_crashes() {
        for s in Structure::ALL {
            for strategy in Strategy::LOGGED {
                let p =
                    Pool::create_in_memory(&pool_opts().domain(ferrite_pmem::Domain::Adr)).unwrap();
                setup(&p, strategy, s);
                let mut m = Model::default();
                run_script(
                    &p,
                    strategy,
                    s,
                    Fault::None,
                    MAIN_SCRIPT,
                    MAIN_STEPS,
                    &mut m,
                );
                let r = recover(&p, strategy, s, Fault::None).unwrap();
                check(strategy, &r, &m).unwrap();
                assert_eq!(r.shape.entries, m.committed);
                // (The B+tree's script shrinks it again: it ends small.)
                if s != Structure::BpTree {
                    assert!(m.committed.len() >= 8, "{s}: {} keys", m.committed.len());
                }
                match s {
                    // Some sub-map outgrew its two initial buckets: rehashes
                    // are part of what is crashed.
                    Structure::HashMap => assert!(r.shape.blocks.iter().any(|&(_, n)| n == 8 * 4)),
                    // Splits grew it and merges shrank it.
                    Structure::BpTree => {
                        let c: BTreeMap<_, _> = m.counters.iter().copied().collect();
                        assert!(c["merges"] > 0, "{c:?}");
                    }
                    _ => {}
                }
            }
        }
    }

    /// The B+tree scripts rebalance: the one `ferrite check` runs by
    /// default (seed 1) merges nodes and collapses the root, and the first
    /// few seeds (the extra runs of a large budget) also borrow from both
    /// sides and cascade merges. Crash points are every fence of the
    /// script, so those transactions are crashed.
    #[test]
    fn the_bptree_check_scripts_borrow_merge_and_collapse() {
        let counters = |seed: u64| {
            let p = Pool::create_in_memory(&pool_opts().domain(ferrite_pmem::Domain::Adr)).unwrap();
            setup(&p, Strategy::Undo, Structure::BpTree);
            let mut m = Model::default();
            let s = Structure::BpTree;
            run_script(
                &p,
                Strategy::Undo,
                s,
                Fault::None,
                seed ^ MAIN_SCRIPT,
                MAIN_STEPS,
                &mut m,
            );
            m.counters.into_iter().collect::<BTreeMap<_, _>>()
        };
        let c1 = counters(1);
        assert!(c1["merges"] > 0 && c1["collapses"] > 0, "seed 1: {c1:?}");
        let mut all: BTreeMap<&str, u64> = BTreeMap::new();
        for seed in 0..4 {
            for (k, v) in counters(seed) {
                *all.entry(k).or_default() += v;
            }
        }
        assert_eq!(all.len(), 5);
        assert!(all.values().all(|&v| v > 0), "seeds 0..4: {all:?}");
    }

    fn cfg(budget: usize) -> Config {
        Config::new("tx-check").budget(budget)
    }

    fn assert_clean(what: &str, runs: &[(String, Report)]) {
        for (name, r) in runs {
            assert!(r.ok(), "{what} {name}: {r}");
        }
    }

    #[test]
    fn every_structure_survives_every_crash_under_every_strategy() {
        for s in Structure::ALL {
            for strategy in Strategy::LOGGED {
                let runs = check_tx(strategy, s, cfg(300)).unwrap();
                assert_clean(&format!("{strategy}-{s}"), &runs);
                let states: usize = runs.iter().map(|(_, r)| r.states).sum();
                assert!(states >= 300, "{strategy}-{s}: {states} states");
                assert!(runs.iter().any(|(_, r)| r.nested_states > 0));
            }
        }
    }

    /// Every `tx-<strategy>-<structure>` check catches its strategy's
    /// planted bug (and clobber's also a recovery that does not re-execute).
    #[test]
    fn planted_bugs_are_caught_on_every_structure() {
        for s in Structure::ALL {
            for strategy in Strategy::LOGGED {
                let mut faults = vec![planted_fault(strategy)];
                if strategy == Strategy::Clobber {
                    faults.push(Fault::NoReexecute);
                }
                for fault in faults {
                    let r =
                        check_fault(strategy, s, cfg(400), fault, MAIN_SCRIPT, MAIN_STEPS).unwrap();
                    assert!(!r.ok(), "{strategy}-{s}: planted {fault:?} not caught: {r}");
                }
            }
        }
    }

    /// The interleaved workload really overlaps transactions (on every
    /// structure: at least across the two instances), and its results
    /// match the model when nothing crashes.
    #[test]
    fn the_interleaved_workload_overlaps_transactions() {
        use ferrite_crash::SimMedium;
        for s in Structure::ALL {
            for strategy in Strategy::LOGGED {
                let domain = ferrite_pmem::Domain::Adr;
                let base = Pool::create_in_memory(&pool_opts().domain(domain)).unwrap();
                let hs = interleaved::setup(&base, strategy, s);
                assert_eq!(
                    hs,
                    interleaved::headers(&pool_opts(), domain, strategy, s).unwrap()
                );
                let img = base.image();
                // Events reach the scheduler only through a simulated medium.
                let sim = Arc::new(SimMedium::new(domain, false, img.clone(), None));
                let p = Pool::open_image(&img, &pool_opts(), domain, Some(sim)).unwrap();
                let mut m = interleaved::Model::default();
                let seed = 1 ^ INTERLEAVED_SCRIPT;
                interleaved::run(&p, strategy, s, Fault::None, hs, seed, &mut m);
                let name = format!("{strategy}-{s}");
                if std::env::var("FERRITE_TX_RUNS").is_ok() {
                    println!(
                        "{name}: {} switches, {} overlapped",
                        m.switches, m.overlapped
                    );
                }
                assert_eq!(m.ops, 2 * interleaved::STEPS_PER_THREAD, "{name}");
                assert!(m.switches > 10, "{name}: {} switches", m.switches);
                assert!(m.overlapped >= 3, "{name}: {} overlapped", m.overlapped);
                let r = interleaved::recover(&p, strategy, s, Fault::None, &hs).unwrap();
                interleaved::check(strategy, &hs, &r, &m).unwrap();
                for (i, shape) in r.shapes.iter().enumerate() {
                    assert_eq!(shape.entries, m.committed[i], "{name} #{i}");
                }
            }
        }
    }

    /// A recovery that handles only one slot's interrupted transactions
    /// ([`Fault::FirstSlotOnly`]) is caught by the interleaved run, where
    /// a crash leaves two transactions to undo, replay or re-execute. The
    /// sequential runs leave one: they can catch it only when a nested
    /// crash interrupts recovery's own use of the pool beside a forgotten
    /// transaction, so every violation they report is a nested one.
    ///
    /// Budget 600: at 300 the interleaved run of undo on the rbtree caught
    /// the bug only with nested crashes once its nodes grew a record
    /// checksum (48-byte node header: other blocks, other sampled crash
    /// points); at 600 every combination is caught at the top level.
    #[test]
    fn first_slot_only_recovery_is_caught_by_interleaving() {
        let budget = std::env::var("FERRITE_TX_FAULT_BUDGET").map_or(600, |v| v.parse().unwrap());
        for s in Structure::ALL {
            for strategy in Strategy::LOGGED {
                let name = format!("{strategy}-{s}");
                let mut found = Vec::new();
                for run in [Run::Main, Run::Tearing, Run::Restart, Run::Interleaved] {
                    let mut c = cfg(budget);
                    c.keep_violations = usize::MAX;
                    let r = check_run(strategy, s, run, c, Fault::FirstSlotOnly).unwrap();
                    let top = r
                        .violations
                        .iter()
                        .filter(|v| v.repro.nested.is_none())
                        .count();
                    if std::env::var("FERRITE_TX_RUNS").is_ok() {
                        println!(
                            "{name} {}: {} states, {} violations ({top} without a nested crash)",
                            run.name(),
                            r.states,
                            r.violation_count
                        );
                    }
                    found.push((run, r.violation_count, top));
                    // Every interleaved crash state replays from its seed
                    // and reproducer alone (`--seed S --at P`).
                    if run == Run::Interleaved
                        && let Some(v) = r.violations.first()
                    {
                        let c = cfg(budget).only(Some(v.repro));
                        let again = check_run(strategy, s, run, c, Fault::FirstSlotOnly).unwrap();
                        assert_eq!(again.states, 1, "{name}: replay of {}", v.repro);
                        assert_eq!(
                            again.violations.first().map(|w| &w.message),
                            Some(&v.message),
                            "{name}: replay of {}",
                            v.repro
                        );
                    }
                }
                for &(run, n, top) in &found {
                    if std::env::var("FERRITE_TX_FAULT_REPORT_ONLY").is_ok() {
                        break;
                    }
                    if run == Run::Interleaved {
                        assert!(
                            top > 0,
                            "{name}: interleaving missed FirstSlotOnly: {found:?}"
                        );
                    } else {
                        assert_eq!(
                            top,
                            0,
                            "{name}: {} caught FirstSlotOnly: {found:?}",
                            run.name()
                        );
                        assert!(
                            n <= 2,
                            "{name}: {} caught FirstSlotOnly: {found:?}",
                            run.name()
                        );
                    }
                }
            }
        }
    }

    /// Interleaved runs only, many seeds (many scripts and schedules):
    /// `cargo test --release -p ferrite-ds -- --ignored --nocapture interleaved_sweep`
    /// (FERRITE_TX_SEEDS=n seeds, FERRITE_TX_BUDGET=b states each,
    /// FERRITE_TX_CHECK=strategy-structure to pick one pair).
    #[test]
    #[ignore]
    fn interleaved_sweep() {
        let env = |k: &str, d: u64| std::env::var(k).map_or(d, |v| v.parse().unwrap());
        let (seeds, budget) = (env("FERRITE_TX_SEEDS", 10), env("FERRITE_TX_BUDGET", 1000));
        let only = std::env::var("FERRITE_TX_CHECK").ok();
        let mut bad = 0;
        for s in Structure::ALL {
            for strategy in Strategy::LOGGED {
                let name = format!("{strategy}-{s}");
                if only.as_deref().is_some_and(|o| o != name) {
                    continue;
                }
                let (mut states, mut v) = (0, 0);
                for seed in 1..=seeds {
                    let c = cfg(budget as usize).seed(seed);
                    let r = check_interleaved(strategy, s, c, Fault::None).unwrap();
                    states += r.states;
                    v += r.violation_count;
                    for x in &r.violations {
                        println!("  tx-{name} interleaved: VIOLATION {x}");
                    }
                }
                bad += v;
                println!("tx-{name} interleaved: {seeds} seeds, {states} states, {v} violations");
            }
        }
        assert_eq!(bad, 0);
    }

    /// `cargo test --release -p ferrite-ds -- --ignored --nocapture budget_5000`
    /// (set FERRITE_TX_CHECK=strategy-structure to pick one pair).
    #[test]
    #[ignore]
    fn budget_5000() {
        let only = std::env::var("FERRITE_TX_CHECK").ok();
        for s in Structure::ALL {
            for strategy in Strategy::LOGGED {
                let name = format!("{strategy}-{s}");
                if only.as_deref().is_some_and(|o| o != name) {
                    continue;
                }
                let t0 = std::time::Instant::now();
                let seed = std::env::var("FERRITE_TX_SEED").map_or(1, |v| v.parse().unwrap());
                let runs = match check_tx(strategy, s, cfg(5000).seed(seed)) {
                    Ok(r) => r,
                    Err(e) => {
                        println!("tx-{name}: {e}");
                        continue;
                    }
                };
                let states: usize = runs.iter().map(|(_, r)| r.states).sum();
                let v: usize = runs.iter().map(|(_, r)| r.violation_count).sum();
                println!(
                    "tx-{name}: {states} states, {v} violations, {:.1?}",
                    t0.elapsed()
                );
                for (n, r) in &runs {
                    if !r.ok() || std::env::var("FERRITE_TX_RUNS").is_ok() {
                        print!("  {n}: {r}");
                    }
                }
            }
        }
    }
}
