//! `ferrite bench tx`: failure-atomic transactions on persistent data
//! structures [P1 ch3, Fig. 3.6 and 3.7].
//!
//! # Throughput and logging cost
//!
//! For each structure (hash map, B+tree, skiplist, red-black tree) and
//! each thread count (1, 2) one interleaved group loads keys as YCSB's
//! load phase does: every operation inserts a new key (the FNV-1a hash of
//! an insertion sequence number; threads take disjoint sequence numbers)
//! with a 256-byte value, one transaction per insert. Each timed
//! repetition continues the load where the previous one stopped, so the
//! warm-up and the repetitions together insert `keys` keys (quick:
//! 100 000, full: 1 000 000). Variants:
//!
//! - `undo`, `redo`, `clobber`: ferrite-tx with that strategy;
//! - `nolog`: the same code writing in place with one flush+fence at
//!   commit and no log — not failure-atomic; the cost floor of the
//!   structure itself [P1 Fig. 3.7 "No-log"];
//! - `pmdk-tx` (hash map and B+tree, feature `pmdk`): the same structure
//!   and algorithm in C with libpmemobj transactions (`TX_BEGIN`,
//!   `pmemobj_tx_add_range_direct` before each write to existing data,
//!   `pmemobj_tx_alloc` for the value and new nodes) —
//!   `ferrite_pmdk::txmap` and `ferrite_pmdk::txbtree` (the B+tree with
//!   Ferrite's node format, 32-byte keys and fanout, and Ferrite's per-node
//!   locks) — on a pool in `/dev/shm` with `PMEM_IS_PMEM_FORCE=1` set by
//!   the CLI so it takes the same flush+fence path as Ferrite's `adr`. Its
//!   counters are not observed (`n/a`).
//!
//! Ferrite's pools are in-memory `adr` pools: the same DRAM PMDK's
//! `/dev/shm` pool lives in. Both are prefaulted before timing (Ferrite's
//! by touching every page, PMDK's with `prefault.at_create`), so neither
//! pays for zeroing fresh pages inside the timed loop. Every hash-map and
//! B+tree row's `ratio_vs_baseline` is against `pmdk-tx` (against `undo`
//! without the feature); the other structures' rows are against `undo`,
//! the PMDK-style strategy.
//!
//! Per operation, besides the counters every row has (`fences_per_op`,
//! `lines_per_op`, …), `extra` carries the transaction layer's own counts
//! [P1 Fig. 3.7]: `vlog_entries` and `vlog_bytes` (the v_log, with the END
//! record that completes it), and for the strategy's log (undo snapshots,
//! redo writes, clobbered inputs) `log_records` (separately ordered
//! appends — a log entry in P1's and PMDK's sense, where each `TX_ADD` is
//! one), `log_entries` (logged byte ranges; a clobber or redo record holds
//! several), `alloc_entries` (allocator operations logged with them) and
//! `log_bytes` (records, headers included). Against undo, the PMDK-style
//! strategy: `records_vs_undo` (log records), `ranges_vs_undo` (logged
//! ranges) and `entries_vs_undo` ((v_log + logged ranges) over undo's
//! ranges). Counts cover the timed repetitions only.
//!
//! # Recovery
//!
//! For each strategy a hash map is loaded with `keys / 4` keys, then one
//! more insert is interrupted: under undo and clobber the transaction
//! function (the insert, then a write of the root word so that clobber's
//! staged writes reach the medium) stops before commit (the pool image is
//! taken then — a crash in which everything in flight survived); under
//! redo, whose transaction has no effect before its record is durable,
//! the image is taken after commit with the transaction's `done` word
//! still zero (its completion not yet durable, which the protocol allows).
//! Opening the image — heap recovery included — is timed `reps` times:
//! rows `<strategy>-recover`, `extra.ms`, `extra.tx_ms` (the transaction
//! layer's part), and what recovery did.

use crate::ctx::BenchCtx;
use crate::error::BenchError;
use crate::measure::{Variant, median, run_interleaved, spread};
use crate::row::Row;
use ferrite_ds::{self as ds, DsOptions, KvMap, Structure};
use ferrite_pmem::{Domain, Pool, PoolOptions};
use ferrite_tx::{Inputs, Registry, Strategy, Tx, TxFunc, TxOptions, TxPool, TxStats};
use serde_json::json;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Name of the PMDK row.
pub const PMDK: &str = ferrite_rows::names::PMDK_TX;
/// Bytes of every value [P1 §3.4.2].
pub const VALUE_LEN: usize = 256;
/// Structures the suite covers.
pub const STRUCTURES: [Structure; 4] = Structure::ALL;
const MIB: u64 = 1 << 20;

pub(crate) fn domain() -> Domain {
    // One definition: the ptm claims find the peers' rows by it.
    ferrite_rows::claims::ptm::peer_domain()
}

/// YCSB's key for insertion number `seq`: FNV-1a 64 of its 8 bytes.
pub fn ycsb_key(seq: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in seq.to_le_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn value_of(key: u64) -> [u8; VALUE_LEN] {
    let mut v = [0u8; VALUE_LEN];
    for (i, c) in v.chunks_mut(8).enumerate() {
        c.copy_from_slice(&(key ^ i as u64).to_le_bytes());
    }
    v
}

pub(crate) fn unsupported(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Unsupported(format!("{what}: {e}"))
}

/// Pool bytes for `keys` entries of structure `s`.
fn pool_bytes(s: Structure, keys: u64) -> u64 {
    let per = match s {
        Structure::HashMap => 340,
        Structure::BpTree => 700,
        Structure::SkipList => 420,
        Structure::RbTree => 360,
    };
    (keys * per + 96 * MIB).next_multiple_of(MIB)
}

fn opts() -> DsOptions {
    DsOptions::default()
}

/// A Ferrite pool with an empty structure, ready for `threads` threads.
fn ferrite_pool(
    s: Structure,
    strategy: Strategy,
    threads: usize,
    keys: u64,
) -> Result<(Pool, u64), BenchError> {
    ferrite_pool_with(s, strategy, threads, keys, &opts())
}

/// [`ferrite_pool`] with the structure's options `o` (the `ptm` suite's
/// peers use 8-byte values).
pub(crate) fn ferrite_pool_with(
    s: Structure,
    strategy: Strategy,
    threads: usize,
    keys: u64,
    o: &DsOptions,
) -> Result<(Pool, u64), BenchError> {
    let pool = Pool::create_in_memory(
        &PoolOptions::new("bench-tx", pool_bytes(s, keys)).domain(domain()),
    )?;
    prefault(&pool);
    let txp = TxPool::create(
        &pool,
        &TxOptions::new(strategy).slots(threads as u16 + 1),
        ds::registry(),
    )
    .map_err(|e| unsupported("tx pool", e))?;
    let mut th = txp.thread().map_err(|e| unsupported("attach", e))?;
    let map = ds::create(s, &mut th, *o).map_err(|e| unsupported("create", e))?;
    let h = map.header();
    drop(map);
    drop(th);
    Ok((pool, h))
}

/// Touches every page of an in-memory pool, so that zeroing fresh pages
/// is not part of what is timed (PMDK's pool is prefaulted at creation).
pub(crate) fn prefault(pool: &Pool) {
    let d = pool.data();
    d.fill(0, d.len(), 0);
}

/// Log counts of one variant over its timed batches.
#[derive(Default)]
struct LogAcc {
    stats: TxStats,
    /// Batches seen per thread (the first one is the warm-up).
    batches: Vec<u64>,
}

/// Opened pools of one group (kept alive while the variants run).
struct Opened {
    strategy: Strategy,
    txp: TxPool,
    header: u64,
}

/// Runs the suite.
pub fn run(ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    let keys: u64 = ctx.scale.pick(100_000, 1_000_000);
    let mut all = Vec::new();
    for s in STRUCTURES {
        for threads in [1usize, 2] {
            ctx.note(format!("tx: {s} x {threads} thread(s), {keys} keys"));
            all.extend(group(ctx, s, threads, keys)?);
        }
    }
    all.extend(recovery(ctx, keys / 4)?);
    Ok(all)
}

/// One group: the YCSB load of structure `s` at `threads` threads under
/// every logging strategy (each on its own pool) and, where it exists, the
/// PMDK peer, interleaved; each row then carries the log counts per op
/// and their ratios to undo's.
fn group(ctx: &BenchCtx, s: Structure, threads: usize, keys: u64) -> Result<Vec<Row>, BenchError> {
    let reps = ctx.reps.max(1) as u64;
    let load = Load {
        s,
        threads,
        per_thread: (keys / (reps + 1) / threads as u64).max(1),
        keys,
    };
    let baseline = if has_pmdk_peer(s) { PMDK } else { "undo" };
    let strategies = [
        Strategy::Undo,
        Strategy::Redo,
        Strategy::Clobber,
        Strategy::NoLog,
    ];
    let mut pools = Vec::new();
    for strategy in strategies {
        pools.push((strategy, ferrite_pool(s, strategy, threads, keys)?));
    }
    let opened: Vec<Opened> = pools
        .iter()
        .map(|(strategy, (pool, header))| {
            Ok(Opened {
                strategy: *strategy,
                txp: TxPool::open(pool, ds::registry(), Some(*strategy))
                    .map_err(|e| unsupported("open", e))?,
                header: *header,
            })
        })
        .collect::<Result<_, BenchError>>()?;
    let maps: Vec<Box<dyn KvMap + '_>> = opened
        .iter()
        .map(|o| ds::open(s, &o.txp, o.header).map_err(|e| unsupported("open structure", e)))
        .collect::<Result<_, _>>()?;
    let accs: Vec<Mutex<LogAcc>> = strategies
        .iter()
        .map(|_| {
            Mutex::new(LogAcc {
                batches: vec![0; threads],
                ..LogAcc::default()
            })
        })
        .collect();
    // Next insertion number of each thread, per variant.
    let seqs: Vec<Vec<AtomicU64>> = (0..=strategies.len())
        .map(|_| (0..threads).map(|t| AtomicU64::new(t as u64)).collect())
        .collect();

    #[cfg(feature = "pmdk")]
    let pmdk = pmdk_peer(s, threads, keys)?;
    let mut variants: Vec<Variant<'_>> = Vec::new();
    for (i, o) in opened.iter().enumerate() {
        let name = o.strategy.name();
        let v = strategy_variant(&load, name, &o.txp, maps[i].as_ref(), &accs[i], &seqs[i]);
        variants.push(if name == baseline {
            v
        } else {
            v.baseline(baseline)
        });
    }
    #[cfg(feature = "pmdk")]
    if let Some((_, m)) = &pmdk {
        variants.push(pmdk_variant(&load, m, &seqs[strategies.len()]));
    }

    let mut rows = run_interleaved(ctx, "tx", &mut variants);
    drop(variants);
    set_log_counts(&mut rows, &accs, threads);
    #[cfg(feature = "pmdk")]
    if let Some((path, m)) = pmdk {
        drop(m);
        let _ = std::fs::remove_file(path);
    }
    drop(maps);
    Ok(rows)
}

/// What every variant of a [`group`] runs: `per_thread` inserts per batch
/// per thread into structure `s`, out of a YCSB load of `keys` keys.
struct Load {
    s: Structure,
    threads: usize,
    per_thread: u64,
    keys: u64,
}

/// The variant of one logging strategy (`name`): each thread takes a log
/// slot of `txp` and inserts the next keys of its stream (`seq[t]`,
/// stepping by the thread count) into `map`; the log counts of every
/// batch but each thread's first (the warm-up) add up in `acc`.
fn strategy_variant<'a>(
    load: &Load,
    name: &str,
    txp: &'a TxPool,
    map: &'a dyn KvMap,
    acc: &'a Mutex<LogAcc>,
    seq: &'a [AtomicU64],
) -> Variant<'a> {
    let threads = load.threads;
    Variant::threaded(
        name,
        json!({
            "structure": load.s.name(),
            "strategy": name,
            "keys": load.keys,
            "value_bytes": VALUE_LEN,
            "workload": "YCSB load (inserts of new keys)",
        }),
        threads,
        load.per_thread,
        move |t, n| {
            let mut th = txp.thread().expect("a free log slot");
            let s0 = th.stats();
            for _ in 0..n {
                let q = seq[t].fetch_add(threads as u64, Ordering::Relaxed);
                let k = ycsb_key(q);
                map.insert(&mut th, k, &value_of(k)).expect("insert");
            }
            let d = th.stats().sub(&s0);
            let mut a = acc.lock().expect("log counts");
            if a.batches[t] > 0 {
                a.stats = a.stats.add(&d);
            }
            a.batches[t] += 1;
        },
    )
}

/// The PMDK peer's variant: the same key streams (`seq`) inserted with
/// pmemobj transactions.
#[cfg(feature = "pmdk")]
fn pmdk_variant<'a>(load: &Load, m: &'a PmdkPeer, seq: &'a [AtomicU64]) -> Variant<'a> {
    let threads = load.threads;
    Variant::threaded(
        PMDK,
        json!({
            "structure": load.s.name(),
            "strategy": "pmemobj tx (undo)",
            "keys": load.keys,
            "value_bytes": VALUE_LEN,
            "workload": "YCSB load (inserts of new keys)",
            "pmem_is_pmem_forced": true,
        }),
        threads,
        load.per_thread,
        move |t, n| {
            for _ in 0..n {
                let q = seq[t].fetch_add(threads as u64, Ordering::Relaxed);
                let k = ycsb_key(q);
                m.insert(k, &value_of(k)).expect("pmdk insert");
            }
        },
    )
}

/// Sets each row's `threads` param and, for Ferrite's rows, its log counts
/// per timed op (`accs[i]` belongs to `rows[i]`) and their ratios to the
/// undo row's; PMDK's rows instead say their counters were not observed.
fn set_log_counts(rows: &mut [Row], accs: &[Mutex<LogAcc>], threads: usize) {
    let timed_ops = |r: &Row| (r.ops * r.reps as u64).max(1) as f64;
    let undo = rows.iter().position(|r| r.variant == "undo").map(|i| {
        let st = accs[i].lock().expect("log counts").stats;
        let n = timed_ops(&rows[i]);
        (
            (st.vlog_entries + st.log_entries) as f64 / n,
            st.log_entries as f64 / n,
            st.records as f64 / n,
        )
    });
    for (i, r) in rows.iter_mut().enumerate() {
        r.set_param("threads", threads);
        if r.variant == PMDK {
            r.counters_observed = false;
            continue;
        }
        let st = accs[i].lock().expect("log counts").stats;
        let n = timed_ops(r);
        let per = |x: u64| x as f64 / n;
        r.set_extra("vlog_entries", per(st.vlog_entries));
        r.set_extra("vlog_bytes", per(st.vlog_bytes));
        r.set_extra("log_entries", per(st.log_entries));
        r.set_extra("alloc_entries", per(st.alloc_entries));
        r.set_extra("log_bytes", per(st.log_bytes));
        r.set_extra("log_records", per(st.records));
        r.set_extra("tx_fences", per(st.fences));
        if let Some((all, ranges, records)) = undo
            && all > 0.0
            && records > 0.0
        {
            r.set_extra(
                "entries_vs_undo",
                per(st.vlog_entries + st.log_entries) / all,
            );
            r.set_extra("ranges_vs_undo", per(st.log_entries) / ranges);
            r.set_extra("records_vs_undo", per(st.records) / records);
        }
    }
}

/// Whether structure `s` has a `pmdk-tx` row (and it is every other row's
/// baseline).
fn has_pmdk_peer(s: Structure) -> bool {
    cfg!(feature = "pmdk") && matches!(s, Structure::HashMap | Structure::BpTree)
}

/// The PMDK structure of a `pmdk-tx` row.
#[cfg(feature = "pmdk")]
pub(crate) enum PmdkPeer {
    Map(ferrite_pmdk::txmap::PmemTxMap),
    Tree(ferrite_pmdk::txbtree::PmemTxBtree),
}

#[cfg(feature = "pmdk")]
impl PmdkPeer {
    pub(crate) fn insert(&self, key: u64, value: &[u8]) -> ferrite_pmdk::Result<bool> {
        match self {
            PmdkPeer::Map(m) => m.insert(key, value),
            PmdkPeer::Tree(t) => t.insert(key, value),
        }
    }
}

/// An empty PMDK peer of `s` (if it has one) in a fresh pool in
/// `/dev/shm`, with the options Ferrite's structure gets.
#[cfg(feature = "pmdk")]
fn pmdk_peer(
    s: Structure,
    threads: usize,
    keys: u64,
) -> Result<Option<(std::path::PathBuf, PmdkPeer)>, BenchError> {
    if !has_pmdk_peer(s) {
        return Ok(None);
    }
    pmdk_peer_with(s, threads, keys, &opts(), "tx").map(Some)
}

/// The PMDK peer of `s` (the hash map or the B+tree) with the structure
/// options `o`, in a fresh pool `/dev/shm/ferrite-bench-<tag>-…`.
#[cfg(feature = "pmdk")]
pub(crate) fn pmdk_peer_with(
    s: Structure,
    threads: usize,
    keys: u64,
    o: &DsOptions,
    tag: &str,
) -> Result<(std::path::PathBuf, PmdkPeer), BenchError> {
    let path = std::path::PathBuf::from(format!(
        "{}/ferrite-bench-{tag}-{}-{}-{threads}",
        ferrite_pmdk::SHM_DIR,
        std::process::id(),
        s.name()
    ));
    let _ = std::fs::remove_file(&path);
    let what = |e| unsupported(&format!("pmdk {s} {}", path.display()), e);
    let peer = if s == Structure::BpTree {
        PmdkPeer::Tree(
            ferrite_pmdk::txbtree::PmemTxBtree::create(
                &path,
                (keys * 700 + 128 * MIB) as usize,
                o.fanout,
                o.value_len,
            )
            .map_err(what)?,
        )
    } else {
        PmdkPeer::Map(
            ferrite_pmdk::txmap::PmemTxMap::create(
                &path,
                (keys * 400 + 128 * MIB) as usize,
                o.subs,
                o.buckets,
                o.value_len,
            )
            .map_err(what)?,
        )
    };
    Ok((path, peer))
}

// ---- recovery -------------------------------------------------------------------------

/// Marker payload: unwinds out of a transaction function to freeze the
/// pool with the transaction in flight (`resume_unwind` skips the panic hook).
struct Interrupt;

/// The insert, then a write of the root word (the map's header, unread:
/// a pure output), so that under clobber logging the v_log and clobbered
/// inputs are durable and the staged writes in place — a transaction
/// recovery must restore and re-execute.
fn insert_and_touch_root(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> ferrite_tx::Result<u64> {
    let r = (ds::hashmap::INSERT.body)(tx, inp)?;
    tx.set_root(inp.arg_u64(0))?;
    Ok(r)
}

fn insert_then_stop(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> ferrite_tx::Result<u64> {
    insert_and_touch_root(tx, inp)?;
    std::panic::resume_unwind(Box::new(Interrupt))
}

/// The interrupted insert: a distinct id, so that recovery can map it to
/// the plain insert ([`RESUME`]).
static STOP: TxFunc = TxFunc {
    id: 0xbe01,
    name: "bench-insert-then-stop",
    body: insert_then_stop,
};
/// What recovery re-executes for [`STOP`]'s id: the insert itself.
static RESUME: TxFunc = TxFunc {
    id: 0xbe01,
    name: "bench-insert",
    body: insert_and_touch_root,
};

fn registry(f: &'static TxFunc) -> Result<Registry, BenchError> {
    let mut r = ds::registry();
    r.register(f).map_err(|e| unsupported("registry", e))?;
    Ok(r)
}

/// A pool image with one hash-map insert in flight, after `keys` inserts.
fn crashed_image(strategy: Strategy, keys: u64) -> Result<(Vec<u8>, u64), BenchError> {
    let bytes = pool_bytes(Structure::HashMap, keys);
    let pool = Pool::create_in_memory(&PoolOptions::new("bench-tx", bytes).domain(domain()))?;
    let txp = TxPool::create(&pool, &TxOptions::new(strategy).slots(2), registry(&STOP)?)
        .map_err(|e| unsupported("tx pool", e))?;
    let mut th = txp.thread().map_err(|e| unsupported("attach", e))?;
    let map =
        ds::create(Structure::HashMap, &mut th, opts()).map_err(|e| unsupported("create", e))?;
    for q in 0..keys {
        let k = ycsb_key(q);
        map.insert(&mut th, k, &value_of(k))
            .map_err(|e| unsupported("insert", e))?;
    }
    let k = ycsb_key(keys);
    let args = ferrite_tx::pack_args(&[map.header(), k]);
    let v = value_of(k);
    if strategy == Strategy::Redo {
        th.run(&ds::hashmap::INSERT, &args, &[&v])
            .map_err(|e| unsupported("insert", e))?;
        // Its completion is pending (`done` written but not yet fenced):
        // the crash state in which it is not durable (the previous
        // transaction's is: this one's first fence made it so).
        let mut img = pool.image();
        let sb = pool.root::<u8>().raw() as usize;
        let at = ferrite_tx::format::Superblock::decode(&img[sb..sb + 64], sb as u64, bytes)
            .map_err(|e| unsupported("superblock", e))?
            .slot_off(th.slot()) as usize;
        let done = u64::from_le_bytes(img[at..at + 8].try_into().expect("8 bytes"));
        img[at..at + 8].copy_from_slice(&(done - 1).to_le_bytes());
        return Ok((img, bytes));
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| th.run(&STOP, &args, &[&v])));
    match r {
        Err(p) if p.is::<Interrupt>() => {}
        Err(p) => std::panic::resume_unwind(p),
        Ok(_) => {
            return Err(unsupported(
                "interrupt",
                "the transaction was not interrupted",
            ));
        }
    }
    let img = pool.image();
    // The handle is mid-transaction: forget it rather than let it finish.
    std::mem::forget(th);
    Ok((img, bytes))
}

fn recovery(ctx: &BenchCtx, keys: u64) -> Result<Vec<Row>, BenchError> {
    let reps = ctx.reps.max(1);
    let mut rows = Vec::new();
    for strategy in Strategy::LOGGED {
        ctx.note(format!("tx: recovery, {strategy}, {keys} keys"));
        let (img, bytes) = crashed_image(strategy, keys)?;
        let opts = PoolOptions::new("bench-tx", bytes);
        let mut samples = Vec::with_capacity(reps);
        let mut tx_ms = Vec::with_capacity(reps);
        let mut last = None;
        for _ in 0..reps {
            let pool = Pool::open_image(&img, &opts, domain(), None)?;
            let t0 = Instant::now();
            let txp = TxPool::open(&pool, registry(&RESUME)?, None)
                .map_err(|e| unsupported("recover", e))?;
            samples.push(t0.elapsed().as_secs_f64() * 1e9);
            let r = txp.recovery().clone();
            tx_ms.push((r.elapsed.saturating_sub(r.heap.elapsed)).as_secs_f64() * 1e3);
            last = Some(r);
        }
        let r = last.unwrap_or_default();
        let ns = median(&samples);
        let mut row = Row::empty(
            "tx",
            &format!("{strategy}-recover"),
            json!({
                "experiment": "recovery",
                "structure": "hashmap",
                "keys": keys,
                "pool_mib": bytes / MIB,
            }),
        );
        row.ops = 1;
        row.reps = samples.len();
        row.ns_per_op = ns;
        row.secs = ns / 1e9;
        row.ops_per_s = if ns > 0.0 { 1e9 / ns } else { 0.0 };
        row.ns_per_op_spread = spread(&samples);
        row.set_extra("ms", ns / 1e6);
        row.set_extra("tx_ms", median(&tx_ms));
        row.set_extra("rolled_back", r.rolled_back);
        row.set_extra("replayed", r.replayed);
        row.set_extra("reexecuted", r.reexecuted);
        row.set_extra("items_applied", r.items);
        rows.push(row);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ycsb_keys_are_distinct() {
        let mut s = std::collections::BTreeSet::new();
        for q in 0..10_000 {
            assert!(s.insert(ycsb_key(q)));
        }
    }

    /// The PMDK peer widens keys as Ferrite does and, running the same
    /// algorithm on the same keys, builds a tree of the same height with
    /// the same keys and values.
    #[cfg(feature = "pmdk")]
    #[test]
    fn pmdk_btree_peer_builds_ferrites_tree() {
        use ferrite_pmdk::txbtree::key32;
        for k in [0, 1, ycsb_key(3), u64::MAX] {
            assert_eq!(key32(k), ds::bptree::key32(k));
        }
        let n = 5000u64;
        let (pool, h) = ferrite_pool(Structure::BpTree, Strategy::Undo, 1, n).unwrap();
        let txp = TxPool::open(&pool, ds::registry(), Some(Strategy::Undo)).unwrap();
        let map = ds::open(Structure::BpTree, &txp, h).unwrap();
        let Some((path, PmdkPeer::Tree(t))) = pmdk_peer(Structure::BpTree, 1, n).unwrap() else {
            panic!("the B+tree's peer is a PMDK B+tree");
        };
        let mut th = txp.thread().unwrap();
        for q in 0..n {
            let k = ycsb_key(q);
            assert!(map.insert(&mut th, k, &value_of(k)).unwrap());
            assert!(t.insert(k, &value_of(k)).unwrap());
        }
        let shape = map.shape().unwrap();
        assert!(t.check().unwrap().iter().eq(shape.entries.keys()));
        for (k, v) in &shape.entries {
            assert_eq!(t.get(*k).unwrap().as_ref(), Some(v));
        }
        let height = txp.read_u64(h + 32).unwrap();
        assert!(height >= 3);
        assert_eq!(t.height(), height);
        drop(t);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn every_strategy_recovers_the_interrupted_insert() {
        for strategy in Strategy::LOGGED {
            let (img, bytes) = crashed_image(strategy, 500).unwrap();
            let pool = Pool::open_image(&img, &PoolOptions::new("bench-tx", bytes), domain(), None)
                .unwrap();
            let txp = TxPool::open(&pool, registry(&RESUME).unwrap(), None).unwrap();
            let r = txp.recovery();
            let map = ds::open(Structure::HashMap, &txp, txp.root()).unwrap();
            let n = map.shape().unwrap().entries.len();
            match strategy {
                Strategy::Undo => assert_eq!((r.rolled_back, n), (1, 500)),
                Strategy::Redo => assert_eq!((r.replayed, n), (1, 501)),
                _ => assert_eq!((r.reexecuted, n), (1, 501)),
            }
        }
    }
}
