//! Crash checks of the engines, run through the `ferrite-crash` explorer
//! (feature `checks`; also compiled for this crate's tests).
//! `ferrite check engine-inp | engine-cow | engine-lsm` calls
//! [`check_engine`]; one harness serves all three engines.
//!
//! # Workload
//!
//! A store in a small simulated pool ([`CHECK_POOL_SIZE`]) with the
//! engine's check options (small nodes, a small memtable: splits, merges,
//! root switches, memtable flushes and compactions happen within a few
//! dozen operations). A seeded script of puts (new keys and updates),
//! deletes (present and absent keys), atomic batches of 2–4 operations
//! (repeated keys too), gets and scans, over [`KEYS`] keys of 1 to 90
//! bytes and values of 0 B to 1.5 KiB (inline and out-of-line paths). Gets
//! and scans are checked against the model as the script runs: a wrong
//! answer without a crash is a workload failure.
//!
//! The *threads* run has two sessions on two OS threads under
//! [`ferrite_crash::lockstep`] (handing over at stores, flushes and fences
//! by a seeded schedule; each a simulated thread whose fences complete
//! only its own flushes), each with its own script over its own half of
//! the key space, so two operations are caught in flight at once.
//!
//! # Invariant (after recovery from every crash state, nested crashes too)
//!
//! - the store opens (recovery succeeds);
//! - a walk of it is ordered (strictly increasing keys, so no duplicates)
//!   and equals the model of acknowledged operations plus, for each
//!   session, its operation in flight applied entirely or not at all (a
//!   batch all or nothing);
//! - a scan through a session returns the same pairs as the walk;
//! - no space leaks and nothing dangles: the blocks the engine references
//!   are exactly the allocator's allocated blocks, each large enough;
//! - the recovered store works: a new key is put, read back and deleted,
//!   and the walk's blocks still equal the allocator's.
//!
//! # Runs
//!
//! The budget is split ([`spend_budget`]) between: the main run on the
//! Ferrite heap (weight 3), the same on the single-lock heap (weight 2),
//! the main run in tearing mode (8-byte failure atomicity, weight 1), the
//! threads run (weight 2) and `eadr` crashing before every store (weight
//! 1), the grow run (weight 2: the main script on a growable pool that
//! starts with a few heap pages, so the heap grows under it), and on the
//! LSM the relaxed run (weight 2). Budget left over goes to further main
//! and threads runs with new seeds.

use crate::{
    AllocKind, Durability, EngineKind, Fault, Op, Session, Store, StoreOptions, StoreSession, Walk,
};
use ferrite_crash::explorer::spend_budget;
use ferrite_crash::lockstep;
use ferrite_crash::{Config, ExploreError, Explorer, Report};
use ferrite_pmem::{Domain, Pool};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// Size of the simulated pool every check uses.
pub const CHECK_POOL_SIZE: u64 = 1536 * 1024;
/// Keys a script draws from (the threads run splits them).
pub const KEYS: usize = 20;
const MAIN_STEPS: usize = 40;
const THREAD_STEPS: usize = 16;
const MAIN_SCRIPT: u64 = 0x656e_6769_6e65;
const THREAD_SCRIPT: u64 = 0x7468_7264;
const MAX_EXTRA: u64 = 16;
const NONCE: u64 = 0x7e57_e6e1_5eed_0011;
/// Initial size of the growable pool of the grow run (the store's setup
/// grows it to hold its fixed area and four heap pages).
pub const GROW_INITIAL: u64 = 64 * 1024;
/// The most the grow run's pool may grow to.
pub const GROW_MAX: u64 = 2 << 20;

/// Why a check could not run (a violation is not an error: it is in the report).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The explorer itself failed (setup, pool or configuration), not the
    /// invariant.
    #[error("explorer: {0}")]
    Explore(#[from] ExploreError),
}

/// One run of a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Run {
    /// One session, one script, on the given allocator.
    Main(AllocKind),
    /// The main run on the Ferrite heap in tearing mode (8-byte failure
    /// atomicity).
    Tearing,
    /// Two sessions on two lockstep threads, disjoint halves of the keys.
    Threads,
    /// The main run in the `eadr` domain, crashing before every store.
    Eadr,
    /// InP's intent protocol (what a store on PMDK's allocator runs, which
    /// the simulator cannot host) on a Ferrite allocator.
    Intent(AllocKind),
    /// The same with two lockstep sessions.
    IntentThreads,
    /// The main run with relaxed commits ([`crate::Durability::Eventual`])
    /// and syncs among the durable ones: a crash may lose a suffix of the
    /// relaxed commits since the last durable point, nothing else.
    Relaxed,
    /// The main run on a growable pool that starts with the store's fixed
    /// area and a few heap pages ([`GROW_INITIAL`], up to
    /// [`GROW_MAX`]): the heap grows as the script adds data, so crashes
    /// fall inside growths.
    Grow,
    /// Batches of every key with values near InP's in-place limit (single
    /// puts between them): in InP most records exceed the check's log
    /// area and are stored in blocks of their own; in the LSM the batches
    /// exceed the memtable and are ingested as runs.
    BigBatch,
}

impl Run {
    /// The run's name in reports, e.g. `main-ferrite`, `threads-2`.
    pub fn name(self) -> String {
        match self {
            Run::Main(a) => format!("main-{a}"),
            Run::Tearing => "main-ferrite-tearing".into(),
            Run::Threads => "threads-2".into(),
            Run::Eadr => "eadr-stores".into(),
            Run::Intent(a) => format!("intent-{a}"),
            Run::IntentThreads => "intent-threads-2".into(),
            Run::Relaxed => "relaxed".into(),
            Run::Grow => "grow".into(),
            Run::BigBatch => "big-batch".into(),
        }
    }
}

/// [`check_options`] with InP's intent protocol
/// ([`crate::inp::Options::intent_allocs`]).
fn intent_options(alloc: AllocKind, fault: Fault) -> StoreOptions {
    let mut o = check_options(EngineKind::Inp, alloc, fault);
    o.inp.intent_allocs = true;
    o
}

/// The store options of the checks for `kind` on `alloc`: the engine's
/// small check configuration, two sessions, a fixed nonce.
pub fn check_options(kind: EngineKind, alloc: AllocKind, fault: Fault) -> StoreOptions {
    let mut o = StoreOptions::new(kind)
        .allocator(alloc)
        .sessions(2)
        .nonce(NONCE)
        .fault(fault);
    o.inp = crate::inp::Options::for_checks();
    o.cow = crate::cow::Options::for_checks();
    o.lsm = crate::lsm::Options::for_checks();
    o
}

/// Key number `i`: lengths vary from 1 to 90 bytes, and keys share
/// prefixes (so prefix comparisons tie and full keys decide).
pub fn key(i: usize) -> Vec<u8> {
    match i % 4 {
        0 => vec![b'a' + (i / 4) as u8],
        1 => format!("key-{i:03}").into_bytes(),
        2 => {
            let mut k = b"key-".to_vec();
            k.extend(std::iter::repeat_n(b'k', 30 + i));
            k
        }
        _ => {
            let mut k = format!("key-{i:03}").into_bytes();
            k.extend_from_slice(&[0xff; 8]);
            k.push(i as u8);
            k
        }
    }
}

/// Deterministic value of length `len` for (`key`, `version`).
pub fn value(key: &[u8], version: u64, len: usize) -> Vec<u8> {
    let mut x = version.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ crc32c::crc32c(key) as u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A key and its new value, or `None` for a delete.
pub(crate) type Change = (Vec<u8>, Option<Vec<u8>>);

/// What the workload saw acknowledged, and what each session had in
/// flight (its changes in order) when the crash hit.
#[derive(Default)]
pub struct Model {
    inner: Mutex<Inner>,
}

#[derive(Default, Clone)]
struct Inner {
    acked: BTreeMap<Vec<u8>, Vec<u8>>,
    inflight: [Option<Vec<Change>>; 2],
    /// Relaxed commits acknowledged since the last durable point, in
    /// commit order (the main run only: one thread).
    relaxed: Vec<Vec<Change>>,
}

impl Inner {
    /// A durable point: every relaxed commit before it is durable.
    fn settle(&mut self) {
        for ch in std::mem::take(&mut self.relaxed) {
            apply(&mut self.acked, &ch);
        }
    }
}

impl Model {
    fn begin(&self, t: usize, changes: Vec<Change>) {
        self.inner.lock().expect("model lock").inflight[t] = Some(changes);
    }

    fn ack(&self, t: usize) {
        let mut g = self.inner.lock().expect("model lock");
        if let Some(ch) = g.inflight[t].take() {
            g.settle();
            apply(&mut g.acked, &ch);
        }
    }

    /// An operation that changed nothing returned (a delete of an absent
    /// key): it committed nothing, so it is no durable point.
    fn ack_noop(&self, t: usize) {
        self.inner.lock().expect("model lock").inflight[t] = None;
    }

    /// A relaxed commit returned: visible, durable at the next durable point.
    fn ack_relaxed(&self, t: usize) {
        let mut g = self.inner.lock().expect("model lock");
        if let Some(ch) = g.inflight[t].take() {
            g.relaxed.push(ch);
        }
    }

    /// A sync returned.
    fn synced(&self) {
        self.inner.lock().expect("model lock").settle();
    }

    /// What reads see: the acknowledged state with the relaxed commits.
    fn snapshot(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let g = self.inner.lock().expect("model lock");
        let mut m = g.acked.clone();
        for ch in &g.relaxed {
            apply(&mut m, ch);
        }
        m
    }
}

/// The batch operations of `changes`.
pub(crate) fn batch_ops(changes: &[Change]) -> Vec<Op<'_>> {
    changes
        .iter()
        .map(|(k, v)| match v {
            Some(v) => Op::Put { key: k, value: v },
            None => Op::Delete { key: k },
        })
        .collect()
}

/// Applies `changes` in order to the model `m`.
pub(crate) fn apply(m: &mut BTreeMap<Vec<u8>, Vec<u8>>, changes: &[Change]) {
    for (k, v) in changes {
        match v {
            Some(v) => m.insert(k.clone(), v.clone()),
            None => m.remove(k),
        };
    }
}

/// Runs a script of `steps` operations drawn from `seed` over keys
/// `keys` on session `s`, as model thread `t`.
#[allow(clippy::too_many_arguments)]
fn script(
    s: &mut dyn Session,
    m: &Model,
    t: usize,
    keys: &[usize],
    seed: u64,
    steps: usize,
    version: &mut u64,
    relaxed: Option<&Store>,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // The relaxed run draws from a stream of its own, so that the other
    // runs' scripts stay what they were.
    let mut rrng = ChaCha8Rng::seed_from_u64(seed ^ 0x0052_454c_4158_4544);
    const LENS: [usize; 6] = [0, 8, 40, 200, 700, 1500];
    let mut out = Vec::new();
    for step in 0..steps {
        let pick = |rng: &mut ChaCha8Rng| key(keys[rng.random_range(0..keys.len())]);
        let mut value_of = |rng: &mut ChaCha8Rng, k: &[u8]| {
            *version += 1;
            value(k, *version, LENS[rng.random_range(0..LENS.len())])
        };
        let d = rng.random_range(0..100);
        if d < 35 {
            let k = pick(&mut rng);
            let v = value_of(&mut rng, &k);
            m.begin(t, vec![(k.clone(), Some(v.clone()))]);
            if relaxed.is_some() && rrng.random_range(0..2) == 0 {
                s.batch_with(&[Op::Put { key: &k, value: &v }], Durability::Eventual)
                    .unwrap_or_else(|e| panic!("step {step}: relaxed put: {e}"));
                m.ack_relaxed(t);
                maybe_sync(relaxed, &mut rrng, m, step);
            } else {
                s.put(&k, &v)
                    .unwrap_or_else(|e| panic!("step {step}: put: {e}"));
                m.ack(t);
            }
        } else if d < 55 {
            let k = pick(&mut rng);
            let had = m.snapshot().contains_key(&k);
            m.begin(t, vec![(k.clone(), None)]);
            let r = s
                .delete(&k)
                .unwrap_or_else(|e| panic!("step {step}: delete: {e}"));
            assert_eq!(r, had, "step {step}: delete of {k:?} returned {r}");
            if r {
                m.ack(t);
            } else {
                // Nothing to delete: no commit, so no durable point for
                // the relaxed commits before it.
                m.ack_noop(t);
            }
        } else if d < 72 {
            let n = rng.random_range(2..=4);
            let mut changes: Vec<Change> = Vec::new();
            for _ in 0..n {
                let k = pick(&mut rng);
                if rng.random_range(0..3) == 0 {
                    changes.push((k, None));
                } else {
                    let v = value_of(&mut rng, &k);
                    changes.push((k, Some(v)));
                }
            }
            let ops = batch_ops(&changes);
            m.begin(t, changes.clone());
            // In the relaxed run, most batches are relaxed, and now and
            // then a sync makes them durable.
            if relaxed.is_some() && rrng.random_range(0..4) != 0 {
                s.batch_with(&ops, Durability::Eventual)
                    .unwrap_or_else(|e| panic!("step {step}: relaxed batch: {e}"));
                m.ack_relaxed(t);
                maybe_sync(relaxed, &mut rrng, m, step);
            } else {
                s.batch(&ops)
                    .unwrap_or_else(|e| panic!("step {step}: batch: {e}"));
                m.ack(t);
            }
        } else if d < 86 {
            let k = pick(&mut rng);
            let want = m.snapshot().get(&k).cloned();
            let found = s
                .get_into(&k, &mut out)
                .unwrap_or_else(|e| panic!("step {step}: get: {e}"));
            assert_eq!(
                found.then_some(out.as_slice()),
                want.as_deref(),
                "step {step}: get of {k:?}"
            );
        } else {
            let from = pick(&mut rng);
            let limit = rng.random_range(1..=6);
            let got = s
                .scan(&from, limit)
                .unwrap_or_else(|e| panic!("step {step}: scan: {e}"));
            // Only this thread's keys are certain (the other thread may be
            // in flight): compare on them.
            let mine: BTreeSet<Vec<u8>> = keys.iter().map(|&i| key(i)).collect();
            let snap = m.snapshot();
            let got_mine: Vec<_> = got.iter().filter(|(k, _)| mine.contains(k)).collect();
            let want: Vec<_> = snap
                .range(from.clone()..)
                .take(limit)
                .filter(|(k, _)| mine.contains(*k))
                .collect();
            if keys.len() == KEYS {
                assert_eq!(got.len(), want.len(), "step {step}: scan from {from:?}");
            }
            for (g, w) in got_mine.iter().zip(want.iter()) {
                assert_eq!((&g.0, &g.1), (w.0, w.1), "step {step}: scan from {from:?}");
            }
            assert!(
                got.windows(2).all(|w| w[0].0 < w[1].0),
                "step {step}: scan out of order"
            );
        }
    }
}

/// The relaxed run, after a relaxed commit: a sync one time in three.
fn maybe_sync(store: Option<&Store>, rng: &mut ChaCha8Rng, m: &Model, step: usize) {
    if let Some(store) = store
        && rng.random_range(0..3) == 0
    {
        store
            .sync()
            .unwrap_or_else(|e| panic!("step {step}: sync: {e}"));
        m.synced();
    }
}

/// What recovery produced: the walk and the store.
pub struct Recovered {
    /// The walk of the recovered, quiesced store.
    pub walk: Walk,
    /// The store as recovery left it (still open, for the work-after test).
    pub store: Store,
}

fn recover(pool: &Pool, opts: &StoreOptions) -> Result<Recovered, String> {
    let store = Store::open(pool, opts).map_err(|e| e.to_string())?;
    store.quiesce().map_err(|e| e.to_string())?;
    let walk = store.walk().map_err(|e| format!("walk: {e}"))?;
    Ok(Recovered { walk, store })
}

/// The blocks `walk` references are exactly the allocator's allocated
/// blocks, each referenced once and large enough.
pub(crate) fn blocks_match(store: &Store, walk: &Walk) -> Result<(), String> {
    let mut referenced = BTreeMap::new();
    for &(off, need) in &walk.blocks {
        if referenced.insert(off, need).is_some() {
            return Err(format!("block {off:#x} referenced twice"));
        }
    }
    let mut allocated = BTreeMap::new();
    store.allocator().for_each_allocated(&mut |off, size| {
        allocated.insert(off.raw(), size as u64);
    });
    for (off, need) in &referenced {
        match allocated.get(off) {
            None => return Err(format!("block {off:#x} is referenced but not allocated")),
            Some(&size) if size < *need => {
                return Err(format!(
                    "block {off:#x} holds {size} bytes, the engine needs {need}"
                ));
            }
            _ => {}
        }
    }
    let leaked: Vec<_> = allocated
        .keys()
        .filter(|o| !referenced.contains_key(o))
        .collect();
    if !leaked.is_empty() {
        return Err(format!(
            "{} allocated blocks are not referenced (leak), first {:#x}",
            leaked.len(),
            leaked[0]
        ));
    }
    Ok(())
}

fn check(r: &Recovered, m: &Model) -> Result<(), String> {
    let entries = &r.walk.entries;
    if let Some(w) = entries.windows(2).find(|w| w[0].0 >= w[1].0) {
        return Err(format!("walk out of order or duplicated at {:?}", w[1].0));
    }
    let found: BTreeMap<Vec<u8>, Vec<u8>> = entries.iter().cloned().collect();
    let g = m.inner.lock().expect("model lock").clone();
    // Every prefix of the relaxed commits, with every combination of the
    // in-flight operations applied or not (an in-flight commit comes after
    // every relaxed one: it is there only with all of them).
    let mut ok = false;
    'prefixes: for p in 0..=g.relaxed.len() {
        let mut base = g.acked.clone();
        for ch in &g.relaxed[..p] {
            apply(&mut base, ch);
        }
        for mask in 0..4u32 {
            let mut want = base.clone();
            let mut skip = false;
            for t in 0..2 {
                if mask & (1 << t) != 0 {
                    match &g.inflight[t] {
                        Some(ch) if p == g.relaxed.len() => apply(&mut want, ch),
                        _ => skip = true,
                    }
                }
            }
            if !skip && want == found {
                ok = true;
                break 'prefixes;
            }
        }
    }
    if !ok {
        let diff: Vec<String> = g
            .acked
            .iter()
            .filter(|(k, v)| found.get(*k) != Some(v))
            .map(|(k, _)| format!("{:?}", String::from_utf8_lossy(k)))
            .chain(
                found
                    .keys()
                    .filter(|k| !g.acked.contains_key(*k))
                    .map(|k| format!("+{:?}", String::from_utf8_lossy(k))),
            )
            .take(4)
            .collect();
        return Err(format!(
            "contents differ from every acknowledged state (in flight: {}, {}); keys differing from acked: {}",
            g.inflight[0].as_ref().map_or(0, |c| c.len()),
            g.inflight[1].as_ref().map_or(0, |c| c.len()),
            diff.join(", ")
        ));
    }
    blocks_match(&r.store, &r.walk)?;
    let mut s = r.store.session().map_err(|e| format!("session: {e}"))?;
    let scanned = s
        .scan(&[0u8], usize::MAX)
        .map_err(|e| format!("scan: {e}"))?;
    if scanned != *entries {
        return Err(format!(
            "a session's scan ({} pairs) differs from the walk ({} pairs)",
            scanned.len(),
            entries.len()
        ));
    }
    // The recovered store works.
    let probe = b"zz-probe-after-recovery";
    s.put(probe, b"alive")
        .map_err(|e| format!("put after recovery: {e}"))?;
    match s
        .get(probe)
        .map_err(|e| format!("get after recovery: {e}"))?
    {
        Some(v) if v == b"alive" => {}
        other => return Err(format!("put after recovery read back {other:?}")),
    }
    if !s
        .delete(probe)
        .map_err(|e| format!("delete after recovery: {e}"))?
    {
        return Err("delete after recovery found nothing".into());
    }
    drop(s);
    r.store.quiesce().map_err(|e| e.to_string())?;
    let w = r
        .store
        .walk()
        .map_err(|e| format!("walk after probe: {e}"))?;
    blocks_match(&r.store, &w).map_err(|e| format!("after a put and a delete: {e}"))?;
    Ok(())
}

fn explorer(cfg: Config, opts: &StoreOptions) -> Explorer<'_> {
    let mut cfg = cfg;
    cfg.layout = crate::LAYOUT.into();
    if cfg.max_size.is_none() {
        cfg.pool_size = CHECK_POOL_SIZE;
    }
    Explorer::new(cfg).setup(move |p| {
        Store::create(p, opts).unwrap_or_else(|e| panic!("creating the store: {e}"));
    })
}

/// The main run: one session, one script.
fn check_main(cfg: Config, opts: &StoreOptions) -> Result<Report, CheckError> {
    let seed = cfg.seed ^ MAIN_SCRIPT;
    let all: Vec<usize> = (0..KEYS).collect();
    Ok(explorer(cfg, opts).explore(
        |pool: &Pool, m: &mut Model| {
            let store = Store::open(pool, opts).unwrap_or_else(|e| panic!("open: {e}"));
            let mut s = store.session().unwrap_or_else(|e| panic!("session: {e}"));
            let mut version = 0;
            script(&mut s, m, 0, &all, seed, MAIN_STEPS, &mut version, None);
        },
        |pool| recover(pool, opts),
        |_, r, m| check(r, m),
    )?)
}

/// The relaxed run: the main run's script with relaxed batches and syncs.
fn check_relaxed(cfg: Config, opts: &StoreOptions) -> Result<Report, CheckError> {
    let seed = cfg.seed ^ MAIN_SCRIPT;
    let all: Vec<usize> = (0..KEYS).collect();
    Ok(explorer(cfg, opts).explore(
        |pool: &Pool, m: &mut Model| {
            let store = Store::open(pool, opts).unwrap_or_else(|e| panic!("open: {e}"));
            let mut s = store.session().unwrap_or_else(|e| panic!("session: {e}"));
            let mut version = 0;
            script(
                &mut s,
                m,
                0,
                &all,
                seed,
                MAIN_STEPS,
                &mut version,
                Some(&store),
            );
        },
        |pool| recover(pool, opts),
        |_, r, m| check(r, m),
    )?)
}

/// Steps of the big-batch run.
const BIG_STEPS: usize = 12;
const BIG_SCRIPT: u64 = 0x6269_6762;

/// Keys of a big batch.
const BIG_BATCH: usize = 300;

/// The big-batch workload: batches of 300 new keys, batches deleting or
/// updating 300 of the keys there are, and single puts between them.
fn big_script(s: &mut StoreSession, m: &Model, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut version = 0u64;
    let mut next = 0usize;
    let big_key = |i: usize| format!("big-{i:05}").into_bytes();
    for step in 0..BIG_STEPS {
        let live: Vec<Vec<u8>> = m.snapshot().keys().cloned().collect();
        let d = rng.random_range(0..4);
        let changes: Vec<Change> = if d == 0 {
            version += 1;
            let k = key(rng.random_range(0..KEYS));
            vec![(
                k.clone(),
                Some(value(&k, version, rng.random_range(0..200))),
            )]
        } else if d == 1 && live.len() >= BIG_BATCH {
            // Delete or update a window of the live keys.
            let from = rng.random_range(0..=live.len() - BIG_BATCH);
            let delete = rng.random_range(0..2) == 0;
            live[from..from + BIG_BATCH]
                .iter()
                .map(|k| {
                    version += 1;
                    let v = (!delete).then(|| value(k, version, rng.random_range(0..40)));
                    (k.clone(), v)
                })
                .collect()
        } else {
            (0..BIG_BATCH)
                .map(|_| {
                    next += 1;
                    version += 1;
                    let k = big_key(next);
                    let v = value(&k, version, rng.random_range(0..40));
                    (k, Some(v))
                })
                .collect()
        };
        m.begin(0, changes.clone());
        s.batch(&batch_ops(&changes))
            .unwrap_or_else(|e| panic!("step {step}: batch: {e}"));
        m.ack(0);
    }
}

/// The options of the big-batch run: the check options with InP's
/// smallest log areas (4 KiB), which a batch of 300 inserts overflows.
fn big_options(kind: EngineKind, fault: Fault) -> StoreOptions {
    let mut o = check_options(kind, AllocKind::Ferrite, fault);
    o.inp.log_bytes = 4096;
    o
}

/// The big-batch run (InP, LSM).
fn check_big(cfg: Config, opts: &StoreOptions) -> Result<Report, CheckError> {
    let seed = cfg.seed ^ BIG_SCRIPT;
    Ok(explorer(cfg, opts).explore(
        |pool: &Pool, m: &mut Model| {
            let store = Store::open(pool, opts).unwrap_or_else(|e| panic!("open: {e}"));
            let mut s = store.session().unwrap_or_else(|e| panic!("session: {e}"));
            big_script(&mut s, m, seed);
        },
        |pool| recover(pool, opts),
        |_, r, m| check(r, m),
    )?)
}

/// The threads run: two sessions on two lockstep threads, disjoint keys.
fn check_threads(cfg: Config, opts: &StoreOptions) -> Result<Report, CheckError> {
    let seed = cfg.seed ^ THREAD_SCRIPT;
    Ok(explorer(cfg, opts).explore(
        |pool: &Pool, m: &mut Model| {
            let store = Store::open(pool, opts).unwrap_or_else(|e| panic!("open: {e}"));
            let m: &Model = m;
            let store = &store;
            let bodies: Vec<Box<dyn FnOnce() + Send + '_>> = (0..2)
                .map(|t| {
                    Box::new(move || {
                        let keys: Vec<usize> = (0..KEYS).filter(|i| i % 2 == t).collect();
                        let mut s = store.session().unwrap_or_else(|e| panic!("session: {e}"));
                        let mut version = (t as u64) << 32;
                        script(
                            &mut s,
                            m,
                            t,
                            &keys,
                            seed.wrapping_add(t as u64),
                            THREAD_STEPS,
                            &mut version,
                            None,
                        );
                    }) as Box<dyn FnOnce() + Send + '_>
                })
                .collect();
            lockstep::run(seed, 3, bodies);
        },
        |pool| recover(pool, opts),
        |_, r, m| check(r, m),
    )?)
}

/// Runs one run of the check of `kind` with `fault`.
pub fn check_run(
    kind: EngineKind,
    run: Run,
    cfg: Config,
    fault: Fault,
) -> Result<Report, CheckError> {
    match run {
        Run::Main(a) => check_main(cfg, &check_options(kind, a, fault)),
        Run::Tearing => check_main(
            cfg.tearing(true),
            &check_options(kind, AllocKind::Ferrite, fault),
        ),
        Run::Threads => check_threads(cfg, &check_options(kind, AllocKind::Ferrite, fault)),
        Run::Eadr => check_main(
            cfg.domain(Domain::Eadr).crash_on_store(true),
            &check_options(kind, AllocKind::Ferrite, fault),
        ),
        Run::Intent(a) => check_main(cfg, &intent_options(a, fault)),
        Run::IntentThreads => check_threads(cfg, &intent_options(AllocKind::Ferrite, fault)),
        Run::Relaxed => check_relaxed(cfg, &check_options(kind, AllocKind::Ferrite, fault)),
        Run::BigBatch => check_big(cfg, &big_options(kind, fault)),
        Run::Grow => check_main(
            cfg.pool_size(GROW_INITIAL).max_size(GROW_MAX),
            &check_options(kind, AllocKind::Ferrite, fault),
        ),
    }
}

fn plan(cfg: &Config, kind: EngineKind, fault: Fault) -> Vec<(Run, usize)> {
    let intent = vec![
        (Run::Intent(AllocKind::Ferrite), 2),
        (Run::Intent(AllocKind::Lock), 1),
        (Run::IntentThreads, 1),
    ];
    // The intent protocol's own planted bugs live only there.
    if let Fault::Inp(f) = fault
        && crate::inp::Fault::INTENT.contains(&f)
    {
        return intent;
    }
    // A domain or tearing mode chosen by the user applies to every run.
    let mut p = if cfg.domain != Domain::Adr || cfg.tearing {
        vec![
            (Run::Main(AllocKind::Ferrite), 3),
            (Run::Main(AllocKind::Lock), 2),
            (Run::Threads, 2),
        ]
    } else {
        vec![
            (Run::Main(AllocKind::Ferrite), 3),
            (Run::Main(AllocKind::Lock), 2),
            (Run::Tearing, 1),
            (Run::Threads, 2),
            (Run::Eadr, 1),
        ]
    };
    if kind == EngineKind::Inp {
        p.extend(intent);
    }
    // InP: records larger than the log area; LSM: batches larger than the
    // memtable, ingested as runs of their own.
    if kind != EngineKind::Cow {
        p.push((Run::BigBatch, 2));
    }
    p.push((Run::Grow, 2));
    // Only the LSM commits relaxed for real (the others commit at once).
    if kind == EngineKind::Lsm {
        p.push((Run::Relaxed, 2));
    }
    p
}

/// `ferrite check engine-<kind>` with a planted `fault` (or
/// [`Fault::None`]): `cfg.budget` crash states split over the runs. The
/// pool size and layout of `cfg` are replaced. One report per run.
pub fn check_engine_fault(
    kind: EngineKind,
    cfg: Config,
    fault: Fault,
) -> Result<Vec<(String, Report)>, CheckError> {
    spend_budget(
        &cfg,
        plan(&cfg, kind, fault),
        MAX_EXTRA,
        |i| {
            if i % 2 == 0 {
                Run::Main(AllocKind::Ferrite)
            } else {
                Run::Threads
            }
        },
        |r| r.name(),
        |r, c| check_run(kind, r, c.clone(), fault),
    )
}

/// [`check_engine_fault`] without a planted bug.
pub fn check_engine(kind: EngineKind, cfg: Config) -> Result<Vec<(String, Report)>, CheckError> {
    check_engine_fault(kind, cfg, Fault::None)
}

/// The planted bugs of `kind` the checks must catch.
pub fn planted_faults(kind: EngineKind) -> Vec<Fault> {
    let heap = [Fault::Heap(ferrite_alloc::heap::Fault::UnpersistedGrowth)];
    let engine: Vec<Fault> = match kind {
        EngineKind::Inp => crate::inp::Fault::ALL
            .iter()
            .chain(crate::inp::Fault::INTENT)
            .map(|&f| Fault::Inp(f))
            .collect(),
        EngineKind::Cow => crate::cow::Fault::ALL
            .iter()
            .map(|&f| Fault::Cow(f))
            .collect(),
        EngineKind::Lsm => crate::lsm::Fault::ALL
            .iter()
            .map(|&f| Fault::Lsm(f))
            .collect(),
    };
    engine.into_iter().chain(heap).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the main script on one session of the store in `p` (seed
    /// `seed`) and returns what it saw acknowledged.
    fn run_main_script(p: &Pool, opts: &StoreOptions, seed: u64) -> Model {
        let m = Model::default();
        let store = Store::open(p, opts).unwrap();
        let mut s = store.session().unwrap();
        let all: Vec<usize> = (0..KEYS).collect();
        let mut v = 0;
        script(&mut s, &m, 0, &all, seed, MAIN_STEPS, &mut v, None);
        m
    }

    /// The script runs clean without crashes on every engine and both
    /// allocators, and exercises deletes of present keys and batches.
    #[test]
    fn the_check_workload_runs_clean_without_crashes() {
        for kind in EngineKind::ALL {
            for alloc in AllocKind::ALL {
                let opts = check_options(kind, alloc, Fault::None);
                let p = Pool::create_in_memory(
                    &ferrite_pmem::PoolOptions::new(crate::LAYOUT, CHECK_POOL_SIZE)
                        .domain(Domain::Adr),
                )
                .unwrap();
                Store::create(&p, &opts).unwrap();
                let m = run_main_script(&p, &opts, MAIN_SCRIPT ^ 1);
                let r = recover(&p, &opts).unwrap();
                check(&r, &m).unwrap_or_else(|e| panic!("{kind}/{alloc}: {e}"));
                assert!(r.walk.entries.len() >= 5, "{kind}/{alloc}: few keys left");
            }
        }
    }

    /// The big-batch run's records do overflow their log area, and its
    /// crash states recover.
    #[test]
    fn the_big_batch_run_overflows_the_log_and_recovers() {
        let opts = big_options(EngineKind::Inp, Fault::None);
        let p = Pool::create_in_memory(
            &ferrite_pmem::PoolOptions::new(crate::LAYOUT, CHECK_POOL_SIZE).domain(Domain::Adr),
        )
        .unwrap();
        Store::create(&p, &opts).unwrap();
        let m = Model::default();
        let store = Store::open(&p, &opts).unwrap();
        big_script(&mut store.session().unwrap(), &m, 1 ^ BIG_SCRIPT);
        let detail = store.stats().detail;
        let n: u64 = detail
            .rsplit("records in blocks of their own ")
            .next()
            .and_then(|x| x.parse().ok())
            .unwrap();
        assert!(n >= 4, "{detail}");
        drop(store);
        let r = recover(&p, &opts).unwrap();
        check(&r, &m).unwrap();
        let rep = check_run(
            EngineKind::Inp,
            Run::BigBatch,
            Config::new("x").budget(300),
            Fault::None,
        )
        .unwrap();
        assert!(rep.ok() && rep.states > 50, "{rep}");
    }

    /// The grow run's script does grow its pool, on every engine, and its
    /// crash states recover.
    #[test]
    fn the_grow_run_grows_its_pool_and_recovers() {
        for kind in EngineKind::ALL {
            let opts = check_options(kind, AllocKind::Ferrite, Fault::None);
            let p = Pool::create_in_memory(
                &ferrite_pmem::PoolOptions::new(crate::LAYOUT, GROW_INITIAL)
                    .max_size(GROW_MAX)
                    .domain(Domain::Adr),
            )
            .unwrap();
            Store::create(&p, &opts).unwrap();
            let created = p.medium().map().mapped();
            let m = run_main_script(&p, &opts, Config::new("x").seed ^ MAIN_SCRIPT);
            let grown = p.medium().map().mapped();
            assert!(
                grown > created,
                "{kind}: the pool did not grow ({created} bytes)"
            );
            let r = recover(&p, &opts).unwrap();
            check(&r, &m).unwrap_or_else(|e| panic!("{kind}: {e}"));
            let rep =
                check_run(kind, Run::Grow, Config::new("x").budget(300), Fault::None).unwrap();
            assert!(rep.ok() && rep.states > 50, "{kind}: {rep}");
        }
    }

    /// The engine's check passes a small budget, and catches each of its
    /// planted bugs.
    fn small_check_passes_and_planted_bugs_are_caught(kind: EngineKind) {
        let runs = check_engine(kind, Config::new("x").budget(200)).unwrap();
        for (name, rep) in &runs {
            assert!(rep.ok(), "{kind} {name}: {rep}");
        }
        for f in planted_faults(kind) {
            // 1500 states: the grow and big-batch runs share the budget.
            let runs = check_engine_fault(kind, Config::new("x").budget(1500), f).unwrap();
            let caught: usize = runs.iter().map(|(_, r)| r.violation_count).sum();
            assert!(caught > 0, "{kind}: planted {f:?} not caught");
        }
    }

    #[test]
    fn inp_check_passes_and_catches_its_planted_bugs() {
        small_check_passes_and_planted_bugs_are_caught(EngineKind::Inp);
    }

    #[test]
    fn cow_check_passes_and_catches_its_planted_bugs() {
        small_check_passes_and_planted_bugs_are_caught(EngineKind::Cow);
    }

    #[test]
    fn lsm_check_passes_and_catches_its_planted_bugs() {
        small_check_passes_and_planted_bugs_are_caught(EngineKind::Lsm);
    }
}
