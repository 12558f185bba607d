//! Crash checks of the byte map ([`crate::bytemap`]), the server's `tx-*`
//! stores: `ferrite check bytemap-<strategy>` calls [`check_bytemap`].
//!
//! # Workload
//!
//! The transactional pool of the structure checks (512 KiB, two log
//! slots) holds a byte map of two sub-maps of two buckets, so chains are
//! long and sub-maps double within the script. Two simulated threads
//! alternate by a seeded script; each step is one batch of one to three
//! puts and deletes over 24 keys of 1 to 19 bytes, with values of 0 to 199
//! bytes (a key may appear twice in a batch: the later operation wins), or
//! a lookup checked against the model.
//!
//! # Invariant (after recovery from every crash state, nested crashes too)
//!
//! - the pool opens and no clobber re-execution diverged;
//! - the map is well formed ([`ByteMap::shape`]);
//! - its contents equal the acknowledged batches, plus the batch in flight
//!   whole or not at all (exactly, under clobber, when its v_log was
//!   durable or recovery re-executed it);
//! - the heap's allocated blocks are exactly the map's;
//! - the recovered map works: a put, a lookup and a delete of a new key.
//!
//! Runs: the script at line granularity (weight 2) and with 8-byte
//! failure atomicity (weight 1); leftover budget goes to more line runs
//! with new seeds.

use super::{ACCESS_LIMIT, CheckError, MAX_EXTRA, Run, Script, check_blocks, tx_opts};
use crate::bytemap::ByteMap;
use crate::{self as ds};
use ferrite_alloc::PAllocator;
use ferrite_crash::explorer::spend_budget;
use ferrite_crash::sim::SimThread;
use ferrite_crash::{Config, Explorer, Report};
use ferrite_pmem::Pool;
use ferrite_tx::{Fault, Strategy, TxPool, TxRecovery, TxThread};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const STEPS: usize = 30;
const KEYS: u64 = 24;
const SCRIPT: u64 = 0x6279_7465;

type Batch = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// What the workload saw acknowledged.
#[derive(Debug, Default)]
pub struct Model {
    /// Key → value of every acknowledged batch.
    pub committed: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The batch running when the crash came, and its encoding (the
    /// transaction's buffer 0).
    pub inflight: Option<(Batch, Vec<u8>)>,
    /// Batches acknowledged.
    pub ops: usize,
    /// Clobber v_log fences so far, and their number when the batch in
    /// flight began (see the structure checks).
    pub witness: Arc<AtomicU64>,
    /// [`Model::witness`] when the batch in flight began.
    pub witness_at_start: u64,
}

fn apply(m: &mut BTreeMap<Vec<u8>, Vec<u8>>, batch: &Batch) {
    for (k, v) in batch {
        match v {
            Some(v) => m.insert(k.clone(), v.clone()),
            None => m.remove(k),
        };
    }
}

fn key(i: u64) -> Vec<u8> {
    // Lengths 1..=19: keys differ in length and in bytes.
    let len = 1 + (ds::mix64(i) % 19) as usize;
    (0..len)
        .map(|j| b'a' + ((i + j as u64) % 26) as u8)
        .collect()
}

fn value(k: u64, version: u64) -> Vec<u8> {
    let mut x = ds::mix64(k.wrapping_mul(131).wrapping_add(version));
    let len = (x % 200) as usize;
    (0..len)
        .map(|_| {
            x = ds::mix64(x);
            x as u8
        })
        .collect()
}

fn setup(pool: &Pool, strategy: Strategy) {
    let txp = TxPool::create(pool, &tx_opts(strategy), ds::registry())
        .unwrap_or_else(|e| panic!("create: {e}"));
    let mut th = txp.thread().expect("a slot");
    ByteMap::create(&mut th, 2, 2).unwrap_or_else(|e| panic!("create byte map: {e}"));
}

fn run_script(pool: &Pool, strategy: Strategy, fault: Fault, seed: u64, m: &mut Model) {
    let txp = TxPool::open_inner(pool, ds::registry(), Some(strategy), fault, ACCESS_LIMIT)
        .unwrap_or_else(|e| panic!("open: {e}"));
    let map = ByteMap::open(&txp, txp.root()).unwrap_or_else(|e| panic!("open map: {e}"));
    let mut th: Vec<TxThread<'_>> = (0..2)
        .map(|_| {
            let mut t = txp.thread().unwrap_or_else(|e| panic!("attach: {e}"));
            t.set_witness(m.witness.clone());
            t
        })
        .collect();
    let mut rng = Script(seed);
    let mut version = 0u64;
    let mut out = Vec::new();
    for _ in 0..STEPS {
        let t = rng.next(2) as usize;
        let _sim = SimThread::enter(t as u32);
        if rng.next(5) == 0 {
            let k = key(rng.next(KEYS));
            let found = map
                .get_into(&k, &mut out)
                .unwrap_or_else(|e| panic!("get: {e}"));
            assert_eq!(found.then_some(&out), m.committed.get(&k), "get {k:?}");
            continue;
        }
        let n = 1 + rng.next(3);
        let batch: Batch = (0..n)
            .map(|_| {
                let i = rng.next(KEYS);
                version += 1;
                let v = (rng.next(4) != 0).then(|| value(i, version));
                (key(i), v)
            })
            .collect();
        let refs: Vec<(&[u8], Option<&[u8]>)> = batch
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
            .collect();
        let mut enc = Vec::new();
        for (k, v) in &refs {
            crate::bytemap::encode_op(&mut enc, k, *v);
        }
        let distinct: std::collections::BTreeSet<&[u8]> = refs.iter().map(|(k, _)| *k).collect();
        let present = distinct
            .iter()
            .filter(|k| m.committed.contains_key(**k))
            .count() as u64;
        // Doublings first, in transactions of their own: the witness then
        // counts only the batch's v_log.
        map.reserve(&mut th[t], &refs)
            .unwrap_or_else(|e| panic!("reserve: {e}"));
        m.inflight = Some((batch.clone(), enc));
        m.witness_at_start = m.witness.load(Ordering::Acquire);
        let got = map
            .apply(&mut th[t], &refs)
            .unwrap_or_else(|e| panic!("apply: {e}"));
        assert_eq!(got, present, "keys present before the batch");
        apply(&mut m.committed, &batch);
        m.inflight = None;
        m.ops += 1;
    }
}

/// What recovery left.
#[derive(Debug)]
pub struct Recovered {
    /// What recovery did (slots rolled back, replayed, re-executed).
    pub report: TxRecovery,
    /// Key → value the walk found.
    pub entries: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Every block the map references: (pool offset, bytes it needs).
    pub blocks: Vec<(u64, u64)>,
    /// Allocated blocks: offset → usable size.
    pub allocated: BTreeMap<u64, usize>,
}

fn recover(pool: &Pool, strategy: Strategy, fault: Fault) -> Result<Recovered, String> {
    let txp = TxPool::open_inner(pool, ds::registry(), Some(strategy), fault, ACCESS_LIMIT)
        .map_err(|e| format!("open: {e}"))?;
    let report = txp.recovery().clone();
    let map = ByteMap::open(&txp, txp.root()).map_err(|e| format!("open map: {e}"))?;
    let mut before = map
        .shape()
        .map_err(|e| format!("malformed byte map: {e}"))?;
    // The recovered map must work (a nested crash may have interrupted
    // this very step before, so the key may be there already).
    let k: &[u8] = b"after-recovery";
    {
        let mut th = txp.thread().map_err(|e| format!("attach: {e}"))?;
        let e = |e: ferrite_tx::TxError| format!("using the recovered map: {e}");
        map.remove(&mut th, k).map_err(e)?;
        if !map.put(&mut th, k, b"v").map_err(e)? {
            return Err("put after recovery found the key".into());
        }
        let mut out = Vec::new();
        if !map.get_into(k, &mut out).map_err(e)? || out != b"v" {
            return Err("put after recovery did not take".into());
        }
        if !map.remove(&mut th, k).map_err(e)? {
            return Err("delete after recovery did not find the key".into());
        }
    }
    let shape = map
        .shape()
        .map_err(|e| format!("malformed byte map after using it: {e}"))?;
    before.entries.remove(k);
    if before.entries != shape.entries {
        return Err("using the recovered map changed its contents".into());
    }
    let mut allocated = BTreeMap::new();
    txp.heap().for_each_allocated(&mut |off, n| {
        allocated.insert(off.raw(), n);
    });
    Ok(Recovered {
        report,
        entries: shape.entries,
        blocks: shape.blocks,
        allocated,
    })
}

fn check(strategy: Strategy, r: &Recovered, m: &Model) -> Result<(), String> {
    if let Some(d) = r.report.nondeterministic.first() {
        return Err(format!("re-execution diverged: {d}"));
    }
    let mut with = m.committed.clone();
    let reexecuted = m.inflight.as_ref().is_some_and(|(_, enc)| {
        r.report
            .reexecuted_inputs
            .iter()
            .any(|(_, bufs)| bufs.len() == 2 && bufs[1] == *enc)
    });
    if let Some((batch, _)) = &m.inflight {
        apply(&mut with, batch);
    }
    let begun = m.inflight.is_some() && m.witness.load(Ordering::Acquire) > m.witness_at_start;
    let got = &r.entries;
    let ok = match strategy {
        Strategy::Clobber if reexecuted || begun => *got == with,
        _ => *got == m.committed || *got == with,
    };
    if !ok {
        let differ = |a: &BTreeMap<Vec<u8>, Vec<u8>>, b: &BTreeMap<Vec<u8>, Vec<u8>>| {
            a.iter()
                .filter(|(k, v)| b.get(*k) != Some(v))
                .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                .collect::<Vec<_>>()
        };
        return Err(format!(
            "contents differ from the model after {} batches (in flight {:?}, begun {begun}, re-executed {reexecuted}): \
             keys wrong or extra {:?}, keys missing or stale {:?}",
            m.ops,
            m.inflight.as_ref().map(|(b, _)| b.len()),
            differ(got, &m.committed),
            differ(&m.committed, got)
        ));
    }
    check_blocks(&[&r.blocks], &r.allocated)
}

/// Explores one run of script `seed` with a planted `fault`.
pub fn check_run(
    strategy: Strategy,
    run: Run,
    cfg: Config,
    fault: Fault,
) -> Result<Report, CheckError> {
    let mut cfg = match run {
        Run::Tearing => cfg.tearing(true),
        _ => cfg,
    };
    let seed = cfg.seed ^ SCRIPT;
    cfg.layout = "tx-check".into();
    cfg.pool_size = super::CHECK_POOL_SIZE;
    Ok(Explorer::new(cfg)
        .setup(move |p| setup(p, strategy))
        .explore(
            |pool: &Pool, m: &mut Model| run_script(pool, strategy, fault, seed, m),
            |pool| recover(pool, strategy, fault),
            |_, r, m| check(strategy, r, m),
        )?)
}

/// `ferrite check bytemap-<strategy>` with a planted `fault` (or
/// [`Fault::None`]): the budget split over a line run (weight 2) and a
/// tearing run (1, unless `cfg` tears already); leftover budget to line
/// runs with seeds `cfg.seed + 1`, `+ 2`, …. One report per run.
pub fn check_bytemap_fault(
    strategy: Strategy,
    cfg: Config,
    fault: Fault,
) -> Result<Vec<(String, Report)>, CheckError> {
    if strategy == Strategy::NoLog {
        return Err(CheckError::NoLog);
    }
    let mut plan = vec![(Run::Main, 2)];
    if !cfg.tearing {
        plan.push((Run::Tearing, 1));
    }
    spend_budget(
        &cfg,
        plan,
        MAX_EXTRA,
        |_| Run::Main,
        |r| r.name().to_string(),
        |r, c| check_run(strategy, r, c.clone(), fault),
    )
}

/// [`check_bytemap_fault`] without a planted bug.
pub fn check_bytemap(strategy: Strategy, cfg: Config) -> Result<Vec<(String, Report)>, CheckError> {
    check_bytemap_fault(strategy, cfg, Fault::None)
}

#[cfg(test)]
mod tests {
    use super::super::pool_opts;
    use super::*;
    use ferrite_pmem::Domain;

    #[test]
    fn the_script_runs_clean_grows_sub_maps_and_repeats_keys_in_batches() {
        for strategy in Strategy::LOGGED {
            let p = Pool::create_in_memory(&pool_opts().domain(Domain::Adr)).unwrap();
            setup(&p, strategy);
            let mut m = Model::default();
            run_script(&p, strategy, Fault::None, SCRIPT ^ 1, &mut m);
            let r = recover(&p, strategy, Fault::None).unwrap();
            check(strategy, &r, &m).unwrap();
            assert_eq!(r.entries, m.committed);
            assert!(m.committed.len() >= 8, "{strategy}: {}", m.committed.len());
            // Some sub-map outgrew its two buckets: doublings are crashed.
            let txp = TxPool::open(&p, ds::registry(), Some(strategy)).unwrap();
            let buckets = |s: u64| {
                // A link word: the offset is in bits 0..48.
                let sub = txp.read_u64(txp.root() + 64 + 8 * s).unwrap() & ((1 << 48) - 1);
                txp.read_u64(sub + 8).unwrap()
            };
            assert!(buckets(0) > 2 || buckets(1) > 2, "{strategy}");
        }
    }

    #[test]
    fn every_strategy_survives_its_crash_states() {
        for strategy in Strategy::LOGGED {
            let cfg = Config::new("bytemap").budget(300).domain(Domain::Adr);
            for (run, rep) in check_bytemap(strategy, cfg).unwrap() {
                assert!(rep.violations.is_empty(), "{strategy} {run}: {rep}");
                assert!(rep.states > 0, "{strategy} {run}");
            }
        }
    }

    /// The planted protocol bugs of each strategy are caught on this map.
    #[test]
    fn planted_bugs_are_caught() {
        for strategy in Strategy::LOGGED {
            let fault = super::super::planted_fault(strategy);
            let cfg = Config::new("bytemap").budget(600).domain(Domain::Adr);
            let caught: usize = check_bytemap_fault(strategy, cfg, fault)
                .unwrap()
                .iter()
                .map(|(_, r)| r.violations.len())
                .sum();
            assert!(caught > 0, "{strategy}: {fault:?} not caught");
        }
    }
}
