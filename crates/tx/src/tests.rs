//! Unit tests of the transaction layer on the hash map, without crashes
//! (the crash checks are in [`crate::checks`]).

use crate::ds::{self, DsOptions, Structure};
use crate::registry::{Inputs, Registry, TxFunc, pack_args};
use crate::{Strategy, Tx, TxError, TxOptions, TxPool};
use ferrite_alloc::PAllocator;
use ferrite_pmem::{Counters, Domain, POff, Pool, PoolOptions};
use std::collections::{BTreeMap, BTreeSet};

fn pool(mib: u64) -> Pool {
    Pool::create_in_memory(&PoolOptions::new("tx-test", mib << 20).domain(Domain::Adr)).unwrap()
}

fn value(k: u64, v: u64, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (k as u8).wrapping_mul(7) ^ (v as u8) ^ i as u8)
        .collect()
}

fn small() -> DsOptions {
    DsOptions {
        value_len: 32,
        subs: 4,
        buckets: 2,
        ..DsOptions::default()
    }
}

/// Inserts, updates, removes and lookups agree with a model under every
/// strategy on every structure; nothing leaks; the pool reopens with the
/// same contents.
#[test]
fn structures_match_a_model_under_every_strategy() {
    for s in Structure::ALL {
        for strategy in Strategy::ALL {
            model_run(s, strategy);
        }
    }
}

fn model_run(s: Structure, strategy: Strategy) {
    {
        let p = pool(8);
        let img = {
            let txp = TxPool::create(
                &p,
                &TxOptions::new(strategy).slots(2).area_bytes(64 << 10),
                ds::registry(),
            )
            .unwrap();
            let mut th = txp.thread().unwrap();
            let opts = DsOptions {
                fanout: 4,
                levels: 8,
                ..small()
            };
            let map = ds::create(s, &mut th, opts).unwrap();
            let mut model = BTreeMap::new();
            let mut x = 1u64;
            for i in 0..3000u64 {
                x = ds::mix64(x);
                let k = x % 500;
                match x % 7 {
                    0..=3 => {
                        let v = value(k, i, 32);
                        let new = map.insert(&mut th, k, &v).unwrap();
                        assert_eq!(
                            new,
                            model.insert(k, v).is_none(),
                            "{s} {strategy} insert {k}"
                        );
                    }
                    4..=5 => {
                        assert_eq!(
                            map.remove(&mut th, k).unwrap(),
                            model.remove(&k).is_some(),
                            "{s} {strategy} remove {k}"
                        );
                    }
                    _ => assert_eq!(map.get(k).unwrap().as_ref(), model.get(&k)),
                }
            }
            let shape = map
                .shape()
                .unwrap_or_else(|e| panic!("{s} {strategy}: {e}"));
            assert_eq!(shape.entries, model, "{s} {strategy}");
            let blocks: BTreeSet<u64> = shape.blocks.iter().map(|b| b.0).collect();
            let mut alloc = BTreeSet::new();
            txp.heap().for_each_allocated(&mut |o, _| {
                alloc.insert(o.raw());
            });
            assert_eq!(
                blocks, alloc,
                "{strategy}: allocated blocks = the map's blocks"
            );
            drop(th);
            p.image()
        };
        let p2 = Pool::open_image(
            &img,
            &PoolOptions::new("tx-test", 8 << 20),
            Domain::Adr,
            None,
        )
        .unwrap();
        let txp = TxPool::open(&p2, ds::registry(), None).unwrap();
        assert_eq!(txp.strategy(), strategy);
        let r = txp.recovery();
        assert_eq!(
            (r.rolled_back, r.replayed, r.reexecuted),
            (0, 0, 0),
            "{strategy}: clean reopen"
        );
        let map = ds::open(s, &txp, txp.root()).unwrap();
        map.shape().unwrap();
    }
}

/// Fences, log entries and v_log entries per insert of a new key: the
/// protocols' costs, exactly.
#[test]
fn per_transaction_costs_are_as_documented() {
    let mut fences = BTreeMap::new();
    for strategy in Strategy::ALL {
        let p = pool(16);
        let txp = TxPool::create(
            &p,
            &TxOptions::new(strategy).slots(2).area_bytes(64 << 10),
            ds::registry(),
        )
        .unwrap();
        let mut th = txp.thread().unwrap();
        let opts = DsOptions {
            buckets: 1 << 12,
            ..small()
        };
        let map = ds::create(Structure::HashMap, &mut th, opts).unwrap();
        // Warm the allocator's runs.
        for k in 0..100 {
            map.insert(&mut th, k, &[1; 32]).unwrap();
        }
        let s0 = th.stats();
        let c0 = Counters::snapshot();
        let n = 200u64;
        for k in 1000..1000 + n {
            assert!(map.insert(&mut th, k, &[2; 32]).unwrap());
        }
        let c = Counters::snapshot() - c0;
        let s = th.stats().sub(&s0);
        let f = c.fences as f64 / n as f64;
        fences.insert(strategy.name(), f);
        match strategy {
            // bucket head, count: two snapshots; commit and done.
            Strategy::Undo => {
                assert_eq!(s.log_entries, 2 * n);
                assert_eq!(s.alloc_entries, n);
                assert!((f - 4.0).abs() < 0.05, "undo {f}");
            }
            Strategy::Redo => {
                assert_eq!(s.log_entries, 2 * n);
                assert!((f - 2.0).abs() < 0.05, "redo {f}");
            }
            // v_log + head + count (one flush point), commit.
            Strategy::Clobber => {
                assert_eq!(s.vlog_entries, n);
                assert_eq!(s.log_entries, 2 * n);
                assert_eq!(s.records, n, "one CLOB record each");
                assert!((f - 2.0).abs() < 0.05, "clobber {f}");
            }
            Strategy::NoLog => assert!((f - 1.0).abs() < 0.05, "nolog {f}"),
        }
    }
    assert!(fences["redo"] < fences["undo"] && fences["clobber"] < fences["undo"]);
}

/// Reads word 0 of a block, writes word 1 (a pure output: in place once
/// the v_log is durable) and word 0 (a clobbered input), and fails if told.
fn boom(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> crate::Result<u64> {
    let off = inp.arg_u64(0);
    let v = tx.read_u64(POff::new(off))?;
    tx.write_u64(POff::new(off + 8), v)?;
    tx.write_u64(POff::new(off), v + 1)?;
    if inp.arg_u64(1) == 1 {
        return Err(TxError::Abort("late".into()));
    }
    Ok(v)
}
static BOOM: TxFunc = TxFunc {
    id: 0x7001,
    name: "boom",
    body: boom,
};

fn bad_access(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> crate::Result<u64> {
    match inp.arg_u64(0) {
        0 => tx.write_u64(POff::new(inp.arg_u64(1)), 1).map(|_| 0),
        1 => {
            let b = tx.alloc(64)?;
            tx.write(b, &[0u8; 128]).map(|_| 0)
        }
        _ => {
            let off = POff::new(inp.arg_u64(1));
            tx.free(off)?;
            tx.write_u64(off.cast(), 5).map(|_| 0)
        }
    }
}
static BAD: TxFunc = TxFunc {
    id: 0x7002,
    name: "bad-access",
    body: bad_access,
};

fn alloc_one(tx: &mut Tx<'_, '_>, _inp: &Inputs<'_>) -> crate::Result<u64> {
    let b = tx.alloc(64)?;
    tx.write(b, &[3u8; 64])?;
    tx.set_root(b.raw())?;
    Ok(b.raw())
}
static ALLOC1: TxFunc = TxFunc {
    id: 0x7003,
    name: "alloc-one",
    body: alloc_one,
};

fn reg() -> Registry {
    Registry::new().with(&[&BOOM, &BAD, &ALLOC1]).unwrap()
}

#[test]
fn misuse_is_detected() {
    for strategy in Strategy::LOGGED {
        let p = pool(4);
        let txp = TxPool::create(
            &p,
            &TxOptions::new(strategy).slots(2).area_bytes(8192),
            reg(),
        )
        .unwrap();
        let mut th = txp.thread().unwrap();
        // Unregistered function.
        static OTHER: TxFunc = TxFunc {
            id: 0x7999,
            name: "other",
            body: alloc_one,
        };
        assert!(matches!(
            th.run(&OTHER, &[], &[]),
            Err(TxError::Unregistered { .. })
        ));
        let blk = th.run(&ALLOC1, &[], &[]).unwrap();
        // Writes into the log slots, the pool header, past the end.
        for off in [64u64, 4096 + 256, p.header().size] {
            assert!(
                matches!(
                    th.run(&BAD, &pack_args(&[0, off]), &[]),
                    Err(TxError::OutOfBounds { .. })
                ),
                "{strategy} {off}"
            );
        }
        assert!(matches!(
            th.run(&BAD, &pack_args(&[1]), &[]),
            Err(TxError::StraddlesBlock { .. })
        ));
        assert!(matches!(
            th.run(&BAD, &pack_args(&[2, blk]), &[]),
            Err(TxError::UseAfterFree { .. })
        ));
        // Aborted transactions left nothing behind: the block is still
        // allocated, and only it.
        let mut n = 0;
        txp.heap().for_each_allocated(&mut |_, _| n += 1);
        assert_eq!(n, 1, "{strategy}");
        // An abort before any write is clean under every strategy.
        assert_eq!(
            th.run(&BOOM, &pack_args(&[blk, 0]), &[]).unwrap(),
            u64::from_le_bytes([3; 8])
        );
    }
    // Duplicate ids.
    static DUP: TxFunc = TxFunc {
        id: 0x7001,
        name: "dup",
        body: alloc_one,
    };
    assert!(matches!(
        Registry::new().with(&[&BOOM, &DUP]),
        Err(TxError::DuplicateId { .. })
    ));
}

#[test]
fn aborts_roll_back_under_undo_and_redo_and_poison_clobber() {
    for strategy in Strategy::LOGGED {
        let p = pool(4);
        let txp = TxPool::create(
            &p,
            &TxOptions::new(strategy).slots(2).area_bytes(8192),
            reg(),
        )
        .unwrap();
        let mut th = txp.thread().unwrap();
        let blk = th.run(&ALLOC1, &[], &[]).unwrap();
        let before = txp.read_u64(blk).unwrap();
        let r = th.run(&BOOM, &pack_args(&[blk, 1]), &[]);
        if strategy == Strategy::Clobber {
            assert!(matches!(r, Err(TxError::AbortAfterWrite { .. })), "{r:?}");
            assert!(matches!(
                th.run(&BOOM, &pack_args(&[blk, 0]), &[]),
                Err(TxError::Poisoned)
            ));
            // Reopening re-executes it, and it fails again: the open says so.
            drop(th);
            let img = p.image();
            drop(txp);
            let p2 = Pool::open_image(
                &img,
                &PoolOptions::new("tx-test", 4 << 20),
                Domain::Adr,
                None,
            )
            .unwrap();
            assert!(matches!(
                TxPool::open(&p2, reg(), None),
                Err(TxError::Reexecution { .. })
            ));
        } else {
            assert!(matches!(r, Err(TxError::Abort(_))), "{r:?}");
            assert_eq!(
                txp.read_u64(blk).unwrap(),
                before,
                "{strategy}: rolled back"
            );
            assert_eq!(th.stats().aborted, 1);
        }
    }
}

#[test]
fn log_full_is_a_clean_error() {
    for strategy in Strategy::LOGGED {
        let p = pool(8);
        let txp = TxPool::create(
            &p,
            &TxOptions::new(strategy).slots(2).area_bytes(1024),
            ds::registry(),
        )
        .unwrap();
        let mut th = txp.thread().unwrap();
        let opts = DsOptions {
            value_len: 1500,
            subs: 1,
            buckets: 1,
            ..DsOptions::default()
        };
        let map = ds::create(Structure::HashMap, &mut th, opts).unwrap();
        // Clobber logs the value in the v_log of the insert already; undo
        // and redo log it when an update overwrites it. Neither fits.
        let expect = match map.insert(&mut th, 1, &[1; 1500]) {
            Ok(true) => {
                let r = map.insert(&mut th, 1, &[2; 1500]);
                assert!(
                    matches!(r, Err(TxError::LogFull { .. })),
                    "{strategy}: {r:?}"
                );
                Some(vec![1; 1500])
            }
            Err(TxError::LogFull { .. }) if strategy == Strategy::Clobber => None,
            r => panic!("{strategy}: {r:?}"),
        };
        assert_eq!(map.get(1).unwrap(), expect, "{strategy}");
        // And the pool goes on working.
        map.remove(&mut th, 1).unwrap();
        map.shape().unwrap();
    }
}

#[test]
fn args_reach_the_function() {
    let i = Inputs::new(&[1, 0, 0, 0, 0, 0, 0, 0, 2], &[]);
    assert_eq!(i.arg_u64(0), 1);
    assert_eq!(i.arg_u64(1), 0, "past the end");
    assert_eq!(i.buf(3), &[] as &[u8]);
}

/// Four threads attach at once and insert, update and remove disjoint keys
/// under the structures' own locks; the result is every thread's model,
/// nothing leaks, and every thread's transactions committed.
#[test]
fn concurrent_threads_on_every_structure_and_strategy() {
    const THREADS: u64 = 4;
    for s in Structure::ALL {
        for strategy in Strategy::ALL {
            let p = pool(16);
            let txp = TxPool::create(
                &p,
                &TxOptions::new(strategy)
                    .slots(THREADS as u16 + 1)
                    .area_bytes(64 << 10),
                ds::registry(),
            )
            .unwrap();
            let map = {
                let mut th = txp.thread().unwrap();
                let opts = DsOptions {
                    fanout: 4,
                    levels: 8,
                    ..small()
                };
                let h = ds::create(s, &mut th, opts).unwrap().header();
                ds::open(s, &txp, h).unwrap()
            };
            let models: Vec<BTreeMap<u64, Vec<u8>>> = std::thread::scope(|sc| {
                let hs: Vec<_> = (0..THREADS)
                    .map(|t| {
                        let (txp, map) = (&txp, &map);
                        sc.spawn(move || {
                            let mut th = txp.thread().unwrap();
                            let mut model = BTreeMap::new();
                            let mut x = t + 1;
                            for i in 0..600u64 {
                                x = ds::mix64(x);
                                // Thread t owns keys ≡ t (mod THREADS).
                                let k = (x % 150) * THREADS + t;
                                if x % 5 < 3 {
                                    let v = value(k, i, 32);
                                    let new = map.insert(&mut th, k, &v).unwrap();
                                    assert_eq!(new, model.insert(k, v).is_none());
                                } else {
                                    let was = map.remove(&mut th, k).unwrap();
                                    assert_eq!(was, model.remove(&k).is_some());
                                }
                            }
                            model
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let want: BTreeMap<u64, Vec<u8>> = models.into_iter().flatten().collect();
            let shape = map
                .shape()
                .unwrap_or_else(|e| panic!("{s} {strategy}: {e}"));
            assert_eq!(shape.entries, want, "{s} {strategy}");
            let blocks: BTreeSet<u64> = shape.blocks.iter().map(|b| b.0).collect();
            let mut alloc = BTreeSet::new();
            txp.heap().for_each_allocated(&mut |o, _| {
                alloc.insert(o.raw());
            });
            assert_eq!(blocks, alloc, "{s} {strategy}: no leak");
        }
    }
}
