//! The peer groups of `ferrite bench ptm`: the same B+tree and hash-map
//! workloads on the PTM, on Ferrite's lock-based `ferrite-tx` and on PMDK.
//!
//! # Workloads
//!
//! - `bptree` ([`PeerWorkload::BptreeInsert`]): inserts of new keys into a
//!   tree that starts empty (P3's B+tree insert-only benchmark; the `tx`
//!   suite's YCSB load), one transaction per insert.
//! - `hash` ([`PeerWorkload::HashUpsert`]): into a hash map that starts
//!   empty, every thread alternates an insert of a new key and an update
//!   of a key it inserted before (uniformly chosen), one transaction each.
//!
//! Keys: thread `t` of `T` inserts its `j`-th new key as `ycsb_key(t + T·j)`
//! (FNV-1a of the sequence number, as the `tx` suite does), and every
//! thread's update choices come from its own seeded generator, so every
//! system runs exactly the same operations. Values: 8 bytes (the key xor a
//! per-thread operation counter).
//!
//! # Key and value shapes (as equal as the structures allow)
//!
//! | system | B+tree | hash map |
//! |---|---|---|
//! | `orec-eager`, `orec-lazy` (`ferrite_ptm::ds`) | fanout 16, **8-byte keys**; the value in an 8-byte block of its own, allocated in the inserting transaction, its offset the tree's value | fixed bucket array (the smallest power of two ≥ half the keys: 1–2 entries per bucket at the end, what the rehashing maps keep), chained 24-byte nodes {key, value, next}, value inline |
//! | `tx-redo`, `tx-clobber` (`ferrite_ds`) | fanout 16, **32-byte keys** (the u64 widened, [`ferrite_ds::bptree::key32`]), 8-byte value blocks, per-node locks | 256 sub-maps of PMDK's `hashmap_tx` doubling above 2 entries per bucket, 24-byte entries {key, next, value}, one lock per sub-map |
//! | `pmdk-tx` (`ferrite_pmdk`) | Ferrite's B+tree in C: fanout 16, 32-byte keys, 8-byte value blocks (`pmemobj_tx_alloc`) | the same hash map in C |
//!
//! So the hash maps hold identical entries; the B+trees differ only in the
//! key width, which the PTM tree cannot change (its keys are words): its
//! nodes are 280 bytes against 680 for the 32-byte-key trees, which favours
//! the PTM (fewer lines per node) — stated beside the ratio. Every system
//! allocates one value block (B+tree) or one entry (hash map) per insert.
//!
//! Every pool is in DRAM under the `adr` domain (`eadr` on a CPU without a
//! flush instruction): Ferrite's and the PTM's in anonymous memory, PMDK's
//! in `/dev/shm` with `PMEM_IS_PMEM_FORCE=1` (set by the CLI) so that it
//! takes the same flush+fence path; all prefaulted before timing.

use super::{
    Plan, SEED, SUITE, add_stats, fail, has_failed, ptm_extra_from, ptm_options, retime, set_failed,
};
use crate::error::BenchError;
use crate::measure::{Variant, run_interleaved};
use crate::row::{Row, set_ratios};
use crate::suites::engine::{new_histogram, set_latency};
use crate::suites::tx::{self, ycsb_key};
use ferrite_ds::{self as ds, DsOptions, KvMap, Structure};
use ferrite_pmem::{Pool, PoolOptions};
use ferrite_ptm::ds::bptree::PBTree;
use ferrite_ptm::ds::hash::PHashMap;
use ferrite_ptm::workloads::{self as wl, BPTREE_FANOUT};
use ferrite_ptm::{Algorithm, Ptm, PtmStats, PtmThread};
use ferrite_tx::{Strategy, TxPool};
use hdrhistogram::Histogram;
use rand::Rng as _;
use serde_json::json;
use std::sync::Mutex;
use std::time::Instant;

/// Bytes of every value.
pub const VALUE_LEN: usize = 8;
/// Keys per B+tree node, every system.
pub const FANOUT: usize = BPTREE_FANOUT as usize;
/// Name of the PMDK rows.
pub const PMDK: &str = tx::PMDK;
/// Name of the baseline without PMDK.
pub const TX_REDO: &str = "tx-redo";
const MIB: u64 = 1 << 20;

/// A peer workload (module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PeerWorkload {
    BptreeInsert,
    HashUpsert,
}

impl PeerWorkload {
    pub const ALL: [PeerWorkload; 2] = [PeerWorkload::BptreeInsert, PeerWorkload::HashUpsert];

    /// `params.workload` of its rows.
    pub fn name(self) -> &'static str {
        match self {
            PeerWorkload::BptreeInsert => "bptree",
            PeerWorkload::HashUpsert => "hash",
        }
    }

    /// The `ferrite-ds` structure of the lock-based and PMDK rows.
    pub fn structure(self) -> Structure {
        match self {
            PeerWorkload::BptreeInsert => Structure::BpTree,
            PeerWorkload::HashUpsert => Structure::HashMap,
        }
    }
}

/// The structure options of the `ferrite-ds` and PMDK peers.
pub fn ds_options() -> DsOptions {
    DsOptions {
        value_len: VALUE_LEN,
        fanout: FANOUT,
        ..DsOptions::default()
    }
}

/// One thread's operation stream: the same for every system.
#[derive(Clone)]
struct Stream {
    thread: u64,
    threads: u64,
    /// New keys inserted so far.
    inserted: u64,
    /// Operations so far.
    op: u64,
    rng: wl::Rng,
}

impl Stream {
    fn new(thread: usize, threads: usize) -> Stream {
        Stream {
            thread: thread as u64,
            threads: threads as u64,
            inserted: 0,
            op: 0,
            rng: wl::thread_rng(SEED ^ 0x7065_6572, thread),
        }
    }

    /// The next operation: `(key, value, is a new key)`.
    fn next(&mut self, w: PeerWorkload) -> (u64, u64, bool) {
        self.op += 1;
        let update =
            w == PeerWorkload::HashUpsert && self.op.is_multiple_of(2) && self.inserted > 0;
        let (key, new) = if update {
            let j = self.rng.random_range(0..self.inserted);
            (ycsb_key(self.thread + self.threads * j), false)
        } else {
            self.inserted += 1;
            (
                ycsb_key(self.thread + self.threads * (self.inserted - 1)),
                true,
            )
        };
        (key, key ^ self.op.wrapping_mul(0x9e37_79b9), new)
    }
}

/// One thread of one peer variant.
struct PeerLane {
    stream: Stream,
    hist: Histogram<u64>,
    batches: u64,
    stats: PtmStats,
    spans: Vec<(Instant, Instant)>,
}

/// How a variant's structure is reached.
enum System {
    Ptm {
        alg: Algorithm,
        _pool: Pool,
        ptm: Ptm,
        /// The structure's header offset.
        header: u64,
    },
    Tx {
        strategy: Strategy,
        _pool: Pool,
        txp: TxPool,
        header: u64,
    },
    #[cfg(feature = "pmdk")]
    Pmdk {
        path: std::path::PathBuf,
        peer: tx::PmdkPeer,
    },
}

impl System {
    fn name(&self) -> String {
        match self {
            System::Ptm { alg, .. } => alg.name().to_string(),
            System::Tx { strategy, .. } => format!("tx-{}", strategy.name()),
            #[cfg(feature = "pmdk")]
            System::Pmdk { .. } => PMDK.to_string(),
        }
    }
}

fn ptm_err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Unsupported(format!("ptm peer {what}: {e}"))
}

/// A PTM pool holding an empty structure of `w` for `keys` keys.
fn ptm_system(
    plan: &Plan,
    w: PeerWorkload,
    alg: Algorithm,
    keys: u64,
) -> Result<System, BenchError> {
    let bytes = (keys * 160 + 64 * MIB).next_multiple_of(MIB);
    let pool =
        Pool::create_in_memory(&PoolOptions::new(super::LAYOUT, bytes).domain(tx::domain()))?;
    tx::prefault(&pool);
    let ptm = Ptm::create(&pool, &ptm_options(alg, plan)).map_err(|e| ptm_err("create", e))?;
    let header = {
        let mut th = ptm.thread().map_err(|e| ptm_err("attach", e))?;
        let h = match w {
            PeerWorkload::BptreeInsert => th
                .atomic(|tx| PBTree::create_in(tx, FANOUT as u64))
                .map(|t| t.header()),
            PeerWorkload::HashUpsert => {
                let buckets = (keys / 2).max(1).next_power_of_two();
                PHashMap::create(&mut th, buckets).map(|m| m.header())
            }
        }
        .map_err(|e| ptm_err("create structure", e))?;
        let root = ptm.root();
        th.atomic(|tx| tx.set(root, h))
            .map_err(|e| ptm_err("root", e))?;
        h
    };
    Ok(System::Ptm {
        alg,
        _pool: pool,
        ptm,
        header,
    })
}

/// A PTM structure handle, opened once per batch (its header's immutable
/// fields).
#[derive(Clone, Copy)]
enum PtmMap {
    Tree(PBTree),
    Hash(PHashMap),
}

fn open_ptm_map(th: &mut PtmThread<'_>, w: PeerWorkload, header: u64) -> Result<PtmMap, String> {
    th.atomic(|tx| {
        Ok(match w {
            PeerWorkload::BptreeInsert => PtmMap::Tree(PBTree::open(tx, header)?),
            PeerWorkload::HashUpsert => PtmMap::Hash(PHashMap::open(tx, header)?),
        })
    })
    .map_err(|e| e.to_string())
}

/// One operation on the PTM: a transaction.
fn ptm_op(th: &mut PtmThread<'_>, m: PtmMap, key: u64, value: u64) -> Result<(), String> {
    th.atomic(|tx| {
        match m {
            PtmMap::Tree(t) => {
                // The value in a block of its own, as the 32-byte-key trees
                // keep theirs.
                let vb = tx.alloc(VALUE_LEN)?.raw();
                tx.store(vb, value)?;
                if let Some(old) = t.insert(tx, key, vb)? {
                    tx.free(ferrite_pmem::POff::new(old))?;
                }
            }
            PtmMap::Hash(h) => {
                h.insert(tx, key, value)?;
            }
        }
        Ok(())
    })
    .map_err(|e| e.to_string())
}

/// Runs `n` operations of `lane`'s stream through `op`, timing each.
fn timed(
    lane: &mut PeerLane,
    w: PeerWorkload,
    n: u64,
    record: bool,
    mut op: impl FnMut(u64, u64) -> Result<(), String>,
) -> Result<(), String> {
    for _ in 0..n {
        let (k, v, _) = lane.stream.next(w);
        let t0 = Instant::now();
        op(k, v)?;
        if record {
            let ns = t0.elapsed().as_nanos() as u64;
            lane.hist.saturating_record(ns.max(1));
        }
    }
    Ok(())
}

/// Runs one peer group: every system on `w` with `threads` threads.
pub fn group(
    ctx: &crate::ctx::BenchCtx,
    plan: &Plan,
    w: PeerWorkload,
    threads: usize,
) -> Result<Vec<Row>, BenchError> {
    let reps = ctx.reps.max(1) as u64;
    let keys = plan.peer_keys.max(1);
    let per_thread = (keys / (reps + 1) / threads as u64).max(1);
    let s = w.structure();
    let systems = open_systems(plan, w, threads, keys)?;
    let baseline = if cfg!(feature = "pmdk") {
        PMDK
    } else {
        TX_REDO
    };
    // The ferrite-ds handles borrow their TxPools.
    let maps: Vec<Option<Box<dyn KvMap + '_>>> = systems
        .iter()
        .map(|sys| match sys {
            System::Tx { txp, header, .. } => ds::open(s, txp, *header)
                .map(Some)
                .map_err(|e| ptm_err("open structure", e)),
            _ => Ok(None),
        })
        .collect::<Result<_, _>>()?;
    let lanes: Vec<Vec<Mutex<PeerLane>>> = systems
        .iter()
        .map(|_| {
            (0..threads)
                .map(|t| {
                    Mutex::new(PeerLane {
                        stream: Stream::new(t, threads),
                        hist: new_histogram(),
                        batches: 0,
                        stats: PtmStats::default(),
                        spans: Vec::new(),
                    })
                })
                .collect()
        })
        .collect();
    let failed: Vec<Mutex<Option<String>>> = systems.iter().map(|_| Mutex::new(None)).collect();

    let mut variants: Vec<Variant<'_>> = Vec::new();
    for (i, sys) in systems.iter().enumerate() {
        let (lanes, failed, map) = (&lanes[i], &failed[i], &maps[i]);
        let body = move |t: usize, n: u64| {
            if has_failed(failed) {
                return;
            }
            let Ok(mut lane) = lanes[t].lock() else {
                return;
            };
            if let Err(e) = run_batch(sys, map, &mut lane, w, n) {
                fail(failed, e);
            }
        };
        let name = sys.name();
        let params = peer_params(sys, w, threads, keys);
        let mut v = Variant::threaded(name.clone(), params, threads, per_thread, body);
        let has_baseline = systems.iter().any(|x| x.name() == baseline);
        if name != baseline && has_baseline {
            v = v.baseline(baseline);
        }
        variants.push(v);
    }
    let mut rows = run_interleaved(ctx, SUITE, &mut variants);
    drop(variants);
    for (row, ls) in rows.iter_mut().zip(&lanes) {
        let spans: Vec<_> = ls
            .iter()
            .map(|l| l.lock().map(|l| l.spans.clone()).unwrap_or_default())
            .collect();
        retime(row, &spans);
    }
    set_ratios(&mut rows);

    // Every new key must be in the structure afterwards.
    for (i, (row, sys)) in rows.iter_mut().zip(&systems).enumerate() {
        check_row(row, sys, &maps[i], &lanes[i], &failed[i], w);
    }
    drop(maps);
    #[cfg(feature = "pmdk")]
    for sys in systems {
        if let System::Pmdk { path, peer } = sys {
            drop(peer);
            let _ = std::fs::remove_file(path);
        }
    }
    Ok(rows)
}

/// Every system of a group, each with its empty structure for `w`: the
/// PTMs, `ferrite-tx` (redo, clobber), and PMDK where built with it.
fn open_systems(
    plan: &Plan,
    w: PeerWorkload,
    threads: usize,
    keys: u64,
) -> Result<Vec<System>, BenchError> {
    let s = w.structure();
    let o = ds_options();
    let mut systems = Vec::new();
    for alg in Algorithm::ALL {
        systems.push(ptm_system(plan, w, alg, keys)?);
    }
    for strategy in [Strategy::Redo, Strategy::Clobber] {
        let (pool, header) = tx::ferrite_pool_with(s, strategy, threads, keys, &o)?;
        let txp = TxPool::open(&pool, ds::registry(), Some(strategy))
            .map_err(|e| ptm_err("tx open", e))?;
        systems.push(System::Tx {
            strategy,
            _pool: pool,
            txp,
            header,
        });
    }
    #[cfg(feature = "pmdk")]
    {
        let (path, peer) = tx::pmdk_peer_with(s, threads, keys, &o, "ptm")?;
        systems.push(System::Pmdk { path, peer });
    }
    Ok(systems)
}

/// One timed batch of `n` operations of one thread (`lane`) on `sys`;
/// the first batch of a lane is the warm-up, recorded nowhere.
fn run_batch(
    sys: &System,
    map: &Option<Box<dyn KvMap + '_>>,
    lane: &mut PeerLane,
    w: PeerWorkload,
    n: u64,
) -> Result<(), String> {
    let record = lane.batches > 0;
    lane.batches += 1;
    let started = Instant::now();
    let r = match sys {
        System::Ptm { ptm, header, .. } => (|| {
            let mut th = ptm.thread().map_err(|e| e.to_string())?;
            let m = open_ptm_map(&mut th, w, *header)?;
            let s0 = th.stats();
            timed(lane, w, n, record, |k, v| ptm_op(&mut th, m, k, v))?;
            if record {
                lane.stats = add_stats(&lane.stats, &th.stats().sub(&s0));
            }
            Ok(())
        })(),
        System::Tx { txp, .. } => (|| {
            let Some(map) = map else {
                return Err("no structure".to_string());
            };
            let mut th = txp.thread().map_err(|e| e.to_string())?;
            timed(lane, w, n, record, |k, v| {
                map.insert(&mut th, k, &v.to_le_bytes())
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
        })(),
        #[cfg(feature = "pmdk")]
        System::Pmdk { peer, .. } => timed(lane, w, n, record, |k, v| {
            peer.insert(k, &v.to_le_bytes())
                .map(|_| ())
                .map_err(|e| e.to_string())
        }),
    };
    if record {
        lane.spans.push((started, Instant::now()));
    }
    r
}

/// `params` of `sys`'s row: the workload, the shapes (key bytes differ:
/// module docs) and the domain.
fn peer_params(sys: &System, w: PeerWorkload, threads: usize, keys: u64) -> serde_json::Value {
    let s = w.structure();
    let mut params = json!({
        "workload": w.name(),
        "domain": tx::domain().name(),
        "threads": threads,
        "experiment": "peers",
        "structure": s.name(),
        "keys": keys,
        "value_bytes": VALUE_LEN,
        "fanout": FANOUT,
    });
    let key_bytes = match sys {
        System::Ptm { .. } => 8,
        _ if s == Structure::BpTree => 32,
        _ => 8,
    };
    params["key_bytes"] = key_bytes.into();
    if matches!(sys, System::Ptm { .. }) {
        params["fence_removal"] = false.into();
    }
    params
}

/// `extra` of `sys`'s row, and its `check`: "ok" when the structure holds
/// exactly the new keys the lanes inserted, else what it holds instead.
fn check_row(
    row: &mut Row,
    sys: &System,
    map: &Option<Box<dyn KvMap + '_>>,
    lanes: &[Mutex<PeerLane>],
    failed: &Mutex<Option<String>>,
    w: PeerWorkload,
) {
    let expected: u64 = lanes
        .iter()
        .map(|l| l.lock().map(|l| l.stream.inserted).unwrap_or(0))
        .sum();
    let mut hist = new_histogram();
    let mut st = PtmStats::default();
    for l in lanes {
        if let Ok(l) = l.lock() {
            let _ = hist.add(&l.hist);
            st = add_stats(&st, &l.stats);
        }
    }
    let entries: Result<u64, String> = match sys {
        System::Ptm { ptm, header, .. } => {
            ptm_extra_from(row, &hist, &st, failed);
            ptm.thread().map_err(|e| e.to_string()).and_then(|mut th| {
                match open_ptm_map(&mut th, w, *header)? {
                    PtmMap::Tree(t) => t.check(&mut th),
                    PtmMap::Hash(h) => h.check(&mut th),
                }
            })
        }
        System::Tx { .. } => {
            lock_based_extra(row, &hist, failed);
            match map {
                Some(m) => m
                    .shape()
                    .map(|sh| sh.entries.len() as u64)
                    .map_err(|e| e.to_string()),
                None => Err("no structure".into()),
            }
        }
        #[cfg(feature = "pmdk")]
        System::Pmdk { peer, .. } => {
            row.counters_observed = false;
            lock_based_extra(row, &hist, failed);
            match peer {
                tx::PmdkPeer::Tree(t) => {
                    t.check().map(|k| k.len() as u64).map_err(|e| e.to_string())
                }
                // No walk in the shim: look every inserted key up.
                tx::PmdkPeer::Map(m) => {
                    let mut found = 0u64;
                    for l in lanes {
                        let Ok(l) = l.lock() else { continue };
                        let st = &l.stream;
                        for j in 0..st.inserted {
                            let k = ycsb_key(st.thread + st.threads * j);
                            if matches!(m.get(k), Ok(Some(_))) {
                                found += 1;
                            }
                        }
                    }
                    Ok(found)
                }
            }
        }
    };
    let verdict = match entries {
        Ok(n) if n == expected => "ok".to_string(),
        Ok(n) => format!("{n} entries, expected {expected}"),
        Err(e) => e,
    };
    row.set_extra("check", verdict);
}

/// `extra` of a lock-based row (one transaction per operation, no aborts:
/// the callers' locks serialise conflicting transactions).
fn lock_based_extra(row: &mut Row, hist: &Histogram<u64>, failed: &Mutex<Option<String>>) {
    set_latency(row, hist);
    row.set_extra("commits_per_s", row.ops_per_s);
    row.set_extra("aborts_per_commit", 0.0);
    if row.counters_observed {
        row.set_extra("fences_per_tx", row.fences_per_op);
        row.set_extra("lines_per_tx", row.lines_per_op);
        row.set_extra("flushes_per_tx", row.flushes_per_op);
    }
    set_failed(row, failed);
}
