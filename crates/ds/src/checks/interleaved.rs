//! The interleaved run: two transactions in flight at once.
//!
//! The pool holds **two instances** of the structure under test (`#0` and
//! `#1`, created one after the other; the pool's root names `#1`, and
//! `#0`'s header is found by replaying the deterministic setup). Two
//! simulated threads, each a [`TxThread`] on its own OS thread, run their
//! own scripts under [`ferrite_crash::lockstep`]: only one runs at a time,
//! and at each store, flush and fence the baton may pass to the other by
//! a seeded schedule (switching one event in 2, 4 or 8, by seed). So
//! a crash can catch both threads mid-transaction: two undo rollbacks, two
//! clobber re-executions, a redo replay beside a rollback, two threads
//! allocating and freeing in the one heap.
//!
//! # Which operations overlap
//!
//! Strict two-phase locking is the caller's: an operation takes its
//! structure's locks before its transaction and releases them after. A
//! thread that blocked on a lock held by the other (waiting for the
//! baton) would stall the run, so before each operation a thread takes a
//! lockstep *token* for its lock set — the instance, and for the hash map
//! the sub-map ([`crate::KvMap::lock_group`]) — and while the other
//! thread holds the same token it hands over the baton instead. Hence:
//! - operations on **different instances** always overlap (every
//!   structure): they share the heap, the log slots' completion hand-offs
//!   and recovery, and nothing else;
//! - on the **same hash map**, operations on different sub-maps overlap;
//! - on the same B+tree, skiplist or red-black tree they run one after the
//!   other (their lock sets may always meet: one lock, or lock paths
//!   through the shared upper levels and the tree's head lock).
//!
//! Each thread works on its own instance seven times in eight: pairs on
//! different instances are the rule, same-instance pairs (sub-map
//! concurrency, or waits for the other's token) still frequent.
//!
//! # Model
//!
//! Operations that overlap hold disjoint tokens, so touch disjoint keys:
//! after recovery each instance must hold its acknowledged contents plus
//! each in-flight operation on it either applied or not — under clobber
//! logging applied exactly when recovery re-executed it (matched by the
//! instance's header and the key in its v_log) or its v_log was durable
//! (that thread's witness grew since the operation began).

use super::{
    ACCESS_LIMIT, KEYS, Op, Script, check_blocks, check_options, diff, recover_maps, tx_opts, value,
};
use crate::{self as ds, Structure};
use ferrite_crash::lockstep::{self, Lockstep};
use ferrite_pmem::{Pool, PoolOptions};
use ferrite_tx::{Fault, Strategy, TxPool, TxRecovery, TxThread};
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Structures in the pool, and threads.
pub const INSTANCES: usize = 2;
/// Operations each thread runs.
pub const STEPS_PER_THREAD: usize = 16;

/// One scripted operation of one thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// Which of the [`INSTANCES`] structures it runs on.
    pub instance: usize,
    /// The operation.
    pub op: Op,
}

/// What the two threads saw acknowledged.
#[derive(Debug, Default)]
pub struct Model {
    /// Per instance.
    pub committed: Vec<BTreeMap<u64, Vec<u8>>>,
    /// Per thread: the operation it was running when the crash came.
    pub inflight: [Option<Step>; INSTANCES],
    /// Operations acknowledged, both threads.
    pub ops: usize,
    /// Operations that began while the other thread's was in flight.
    pub overlapped: usize,
    /// Per thread: clobber v_log fences completed ([`TxThread::set_witness`]),
    /// and their number when its operation in flight began.
    pub witness: [Arc<AtomicU64>; INSTANCES],
    /// Per thread: [`Model::witness`] when its operation in flight began.
    pub witness_at_start: [u64; INSTANCES],
    /// Baton hand-offs of the run (0 when it crashed before the end).
    pub switches: u64,
}

/// Creates the two instances; returns their headers.
pub fn setup(pool: &Pool, strategy: Strategy, s: Structure) -> [u64; INSTANCES] {
    let txp = TxPool::create(pool, &tx_opts(strategy), ds::registry())
        .unwrap_or_else(|e| panic!("create: {e}"));
    let mut th = txp.thread().expect("a slot");
    std::array::from_fn(|i| {
        ds::create(s, &mut th, check_options())
            .unwrap_or_else(|e| panic!("create {s} #{i}: {e}"))
            .header()
    })
}

/// The headers [`setup`] gives (it is deterministic: fixed nonce, one
/// thread), found by running it on a scratch pool.
pub fn headers(
    opts: &PoolOptions,
    domain: ferrite_pmem::Domain,
    strategy: Strategy,
    s: Structure,
) -> Result<[u64; INSTANCES], String> {
    let p = Pool::create_in_memory(&opts.clone().domain(domain)).map_err(|e| e.to_string())?;
    Ok(setup(&p, strategy, s))
}

/// The two threads' scripts of `seed`: thread `t` works on instance `t`
/// seven times in eight.
pub fn scripts(seed: u64) -> [Vec<Step>; INSTANCES] {
    let mut rng = Script(seed);
    let mut versions: BTreeMap<(usize, u64), u64> = BTreeMap::new();
    let mut out: [Vec<Step>; INSTANCES] = Default::default();
    for _ in 0..STEPS_PER_THREAD {
        for (t, steps) in out.iter_mut().enumerate() {
            let instance = if rng.next(8) == 0 { 1 - t } else { t };
            let key = rng.next(KEYS);
            let op = match rng.next(10) {
                0..=5 => {
                    let v = versions.entry((instance, key)).or_insert(0);
                    *v += 1;
                    Op::Insert { key, version: *v }
                }
                6..=8 => Op::Remove { key },
                _ => Op::Get { key },
            };
            steps.push(Step { instance, op });
        }
    }
    out
}

/// Runs both threads' scripts of `seed` on the instances at `headers`.
pub fn run(
    pool: &Pool,
    strategy: Strategy,
    s: Structure,
    fault: Fault,
    headers: [u64; INSTANCES],
    seed: u64,
    model: &mut Model,
) {
    let txp = TxPool::open_inner(pool, ds::registry(), Some(strategy), fault, ACCESS_LIMIT)
        .unwrap_or_else(|e| panic!("open: {e}"));
    let maps: Vec<Box<dyn ds::KvMap + '_>> = headers
        .iter()
        .map(|&h| ds::open(s, &txp, h).unwrap_or_else(|e| panic!("open {s}: {e}")))
        .collect();
    model.committed.resize_with(INSTANCES, BTreeMap::new);
    // Attached in thread order on this thread: thread t has slot t.
    let threads: Vec<TxThread<'_>> = (0..INSTANCES)
        .map(|t| {
            let mut th = txp.thread().unwrap_or_else(|e| panic!("attach: {e}"));
            th.set_witness(model.witness[t].clone());
            th
        })
        .collect();
    let scripts = scripts(seed);
    let shared = Mutex::new(std::mem::take(model));
    let r = catch_unwind(AssertUnwindSafe(|| {
        let bodies: Vec<Box<dyn FnOnce() + Send + '_>> = threads
            .into_iter()
            .zip(scripts)
            .enumerate()
            .map(|(t, (th, steps))| {
                let (maps, shared) = (&maps, &shared);
                Box::new(move || thread_body(t, th, &steps, maps, shared))
                    as Box<dyn FnOnce() + Send + '_>
            })
            .collect();
        // The schedule's own seed: the script seed picks the ops, this the
        // interleaving and its grain.
        let sched = ds::mix64(seed ^ 0x5c4e_d01e);
        lockstep::run(sched, 2 << (sched % 3), bodies)
    }));
    *model = shared.into_inner().unwrap_or_else(|p| p.into_inner());
    match r {
        Ok((_, stats)) => model.switches = stats.switches,
        Err(p) => resume_unwind(p),
    }
}

/// One thread: its script, one operation at a time under its lock-set token.
fn thread_body(
    t: usize,
    mut th: TxThread<'_>,
    steps: &[Step],
    maps: &[Box<dyn ds::KvMap + '_>],
    shared: &Mutex<Model>,
) {
    let (ls, me) = Lockstep::current().expect("inside a lockstep run");
    let lock = || shared.lock().unwrap_or_else(|p| p.into_inner());
    for &step in steps {
        let map = &maps[step.instance];
        let key = match step.op {
            Op::Insert { key, .. } | Op::Remove { key } | Op::Get { key } => key,
        };
        let group = map.lock_group(key).map_or(u64::MAX, |g| g);
        ls.acquire(me, (step.instance as u64) << 32 ^ group);
        // Under the token nobody else touches this key: the model's view
        // of it is what the structure must answer.
        let had = {
            let mut m = lock();
            m.inflight[t] = Some(step);
            if m.inflight.iter().flatten().count() > 1 {
                m.overlapped += 1;
            }
            m.witness_at_start[t] = m.witness[t].load(Ordering::Acquire);
            m.committed[step.instance].get(&key).cloned()
        };
        let ctx = |what: &str| format!("thread {t}: {what} {key} on #{}", step.instance);
        match step.op {
            Op::Insert { key, version } => {
                let new = map
                    .insert(&mut th, key, &value(key, version))
                    .unwrap_or_else(|e| panic!("{}: {e}", ctx("insert")));
                assert_eq!(new, had.is_none(), "{}: 'new' disagrees", ctx("insert"));
            }
            Op::Remove { key } => {
                let was = map
                    .remove(&mut th, key)
                    .unwrap_or_else(|e| panic!("{}: {e}", ctx("remove")));
                assert_eq!(was, had.is_some(), "{}: disagrees", ctx("remove"));
            }
            Op::Get { key } => {
                let got = map
                    .get(key)
                    .unwrap_or_else(|e| panic!("{}: {e}", ctx("get")));
                assert_eq!(got, had, "{}", ctx("get"));
            }
        }
        {
            let mut m = lock();
            step.op.apply(&mut m.committed[step.instance]);
            m.inflight[t] = None;
            m.ops += 1;
        }
        ls.release(me);
    }
    // Detach with the baton: dropping flushes and fences.
    drop(th);
}

/// The invariant (see the module docs): contents, then blocks.
pub fn check(
    strategy: Strategy,
    headers: &[u64; INSTANCES],
    r: &super::RecoveredMaps,
    m: &Model,
) -> Result<(), String> {
    let rep: &TxRecovery = &r.report;
    if let Some(d) = rep.nondeterministic.first() {
        return Err(format!("re-execution diverged: {d}"));
    }
    // Per in-flight operation: must it have taken effect?
    let forced: Vec<(usize, Step, bool)> = (0..INSTANCES)
        .filter_map(|t| m.inflight[t].map(|st| (t, st)))
        .map(|(t, st)| {
            let reexecuted = rep.reexecuted_inputs.iter().any(|(_, bufs)| {
                bufs.first()
                    .is_some_and(|a| a.len() >= 16 && ds::le(a, 0) == headers[st.instance])
                    && st.op.is(bufs)
            });
            let begun = m.witness[t].load(Ordering::Acquire) > m.witness_at_start[t];
            (
                t,
                st,
                strategy == Strategy::Clobber && (reexecuted || begun),
            )
        })
        .collect();
    for (i, got) in r.shapes.iter().map(|s| &s.entries).enumerate() {
        let mine: Vec<&(usize, Step, bool)> = forced
            .iter()
            .filter(|(_, st, _)| st.instance == i)
            .collect();
        // Every subset of the in-flight operations on this instance that
        // includes the forced ones (they touch distinct keys: any order).
        let ok = (0..1u32 << mine.len()).any(|mask| {
            let mut want = m.committed[i].clone();
            for (b, &&(_, st, must)) in mine.iter().enumerate() {
                let apply = mask & (1 << b) != 0;
                if must && !apply {
                    return false;
                }
                if apply {
                    st.op.apply(&mut want);
                }
            }
            *got == want
        });
        if !ok {
            return Err(format!(
                "#{i}: contents differ from the model after {} ops (in flight, with 'must have taken \
                 effect': {:?}): keys wrong or extra {:?}, keys missing or stale {:?}",
                m.ops,
                forced,
                diff(got, &m.committed[i]),
                diff(&m.committed[i], got)
            ));
        }
    }
    let blocks: Vec<&[(u64, u64)]> = r.shapes.iter().map(|s| s.blocks.as_slice()).collect();
    check_blocks(&blocks, &r.allocated)
}

/// Recovery of the two-instance pool.
pub fn recover(
    pool: &Pool,
    strategy: Strategy,
    s: Structure,
    fault: Fault,
    headers: &[u64; INSTANCES],
) -> Result<super::RecoveredMaps, String> {
    recover_maps(pool, strategy, s, fault, Some(headers))
}
