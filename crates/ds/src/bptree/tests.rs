//! The B+tree's unit tests.

use super::*;
use crate::{self as ds, KvMap};
use ferrite_pmem::{Domain, Pool, PoolOptions, Region};
use ferrite_tx::{Strategy, TxOptions};
use std::collections::{BTreeMap, BTreeSet};

fn pool() -> Pool {
    Pool::create_in_memory(&PoolOptions::new("bptree-test", 8 << 20).domain(Domain::Adr)).unwrap()
}

fn txpool(p: &Pool, strategy: Strategy) -> TxPool {
    TxPool::create(
        p,
        &TxOptions::new(strategy).slots(6).area_bytes(64 << 10),
        ds::registry(),
    )
    .unwrap()
}

fn opts(fanout: usize) -> DsOptions {
    DsOptions {
        value_len: 16,
        fanout,
        ..DsOptions::default()
    }
}

fn val(k: u64, v: u64) -> Vec<u8> {
    (0..16u64)
        .map(|i| (k ^ v.rotate_left(5) ^ i) as u8)
        .collect()
}

fn height(t: &BpTree<'_>) -> u64 {
    t.root_height().unwrap().1
}

/// The tree holds `model`, is well formed (shape, with the occupancy
/// minimum), and the heap holds exactly its blocks (once `th` handed
/// clobber's held-back frees to the allocator).
fn agrees(t: &BpTree<'_>, th: &mut TxThread<'_>, model: &BTreeMap<u64, Vec<u8>>, what: &str) {
    th.quiesce();
    let txp = th.pool();
    let shape = t.shape().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(&shape.entries, model, "{what}");
    let blocks: BTreeSet<u64> = shape.blocks.iter().map(|b| b.0).collect();
    let mut alloc = BTreeSet::new();
    txp.heap().for_each_allocated(&mut |o, _| {
        alloc.insert(o.raw());
    });
    assert_eq!(blocks, alloc, "{what}: allocated blocks = the tree's");
}

/// Random insert/remove mixes against a model with the shape checked
/// after every operation, under every strategy and several fanouts:
/// grow, churn, delete everything (the root collapses to a leaf),
/// reinsert. Every kind of rebalancing happens.
#[test]
fn removals_rebalance_and_match_a_model() {
    for strategy in Strategy::ALL {
        for fanout in [3usize, 4, 5, 8, 16] {
            let p = pool();
            let txp = txpool(&p, strategy);
            let mut th = txp.thread().unwrap();
            let t = BpTree::create(&mut th, opts(fanout)).unwrap();
            let mut model = BTreeMap::new();
            let mut x = fanout as u64;
            let step = |th: &mut TxThread<'_>,
                        model: &mut BTreeMap<u64, Vec<u8>>,
                        ins: bool,
                        k: u64,
                        i: u64| {
                let what = format!("{strategy} F={fanout} op {i} key {k}");
                if ins {
                    let v = val(k, i);
                    assert_eq!(
                        t.insert(th, k, &v).unwrap(),
                        model.insert(k, v).is_none(),
                        "{what}"
                    );
                } else {
                    assert_eq!(
                        t.remove(th, k).unwrap(),
                        model.remove(&k).is_some(),
                        "{what}"
                    );
                }
                agrees(&t, th, model, &what);
            };
            let mut i = 0u64;
            for round in 0..2 {
                // Grow (mostly inserts), churn (even), shrink (mostly removes).
                for (ops, ins_per_10) in [(300, 8), (300, 5), (300, 2)] {
                    for _ in 0..ops {
                        x = ds::mix64(x);
                        i += 1;
                        step(&mut th, &mut model, x % 10 < ins_per_10, (x >> 8) % 200, i);
                    }
                }
                // Delete everything left, in random order.
                let mut keys: Vec<u64> = model.keys().copied().collect();
                while !keys.is_empty() {
                    x = ds::mix64(x);
                    let k = keys.swap_remove((x % keys.len() as u64) as usize);
                    i += 1;
                    step(&mut th, &mut model, false, k, i);
                }
                assert_eq!(
                    height(&t),
                    1,
                    "{strategy} F={fanout} round {round}: empty tree is one leaf"
                );
                assert_eq!(t.shape().unwrap().blocks.len(), 2, "header and root leaf");
            }
            let r = t.rebalances();
            assert!(
                r.borrow_left > 0
                    && r.borrow_right > 0
                    && r.merges > 0
                    // (200 keys are too few for F=16 to merge twice in a row.)
                    && (r.cascades > 0 || fanout > 8)
                    && r.collapses > 0,
                "{strategy} F={fanout}: {r:?}"
            );
        }
    }
}

/// Deleting every key gives the space back: the heap's in-use bytes
/// return to those of the empty tree, and a second fill-and-empty
/// claims no more pages than the first.
#[test]
fn deleting_everything_gives_space_back() {
    for strategy in Strategy::ALL {
        let p = pool();
        let txp = txpool(&p, strategy);
        let mut th = txp.thread().unwrap();
        let t = BpTree::create(&mut th, opts(4)).unwrap();
        let empty = txp.heap().stats();
        let mut claimed = Vec::new();
        for round in 0..3u64 {
            // mix64 is a bijection: 600 distinct keys in random order.
            for k in 0..600 {
                t.insert(&mut th, ds::mix64(k), &val(k, round)).unwrap();
            }
            assert!(height(&t) >= 4, "{strategy}: a deep tree");
            let full = txp.heap().stats();
            claimed.push(full.claimed);
            for k in 0..600 {
                assert!(t.remove(&mut th, ds::mix64(k)).unwrap());
            }
            th.quiesce();
            let st = txp.heap().stats();
            assert_eq!(
                (st.in_use, st.blocks),
                (empty.in_use, empty.blocks),
                "{strategy} round {round}: in use after deleting everything"
            );
            assert_eq!(height(&t), 1);
            t.shape().unwrap();
        }
        assert!(
            claimed[1] <= claimed[0] && claimed[2] <= claimed[0],
            "{strategy}: freed nodes and values are reused: {claimed:?}"
        );
    }
}

/// Sequential deletions in both directions: ascending keys make the
/// leftmost leaf underflow (borrow from the right, merge with the right),
/// descending the rightmost (borrow from the left, merge with the left).
#[test]
fn ascending_and_descending_deletions() {
    for strategy in [Strategy::Undo, Strategy::Clobber] {
        for desc in [false, true] {
            let p = pool();
            let txp = txpool(&p, strategy);
            let mut th = txp.thread().unwrap();
            let t = BpTree::create(&mut th, opts(4)).unwrap();
            let mut model = BTreeMap::new();
            // Inserted in random order, so nodes are not all at the
            // minimum (sequential inserts leave every left half there).
            let mut keys: Vec<u64> = (0..120).collect();
            keys.sort_by_key(|&k| ds::mix64(k));
            for k in keys {
                t.insert(&mut th, k, &val(k, 0)).unwrap();
                model.insert(k, val(k, 0));
            }
            let h0 = height(&t);
            let order: Vec<u64> = if desc {
                (0..120).rev().collect()
            } else {
                (0..120).collect()
            };
            let mut heights = vec![h0];
            for k in order {
                assert!(t.remove(&mut th, k).unwrap());
                model.remove(&k);
                agrees(
                    &t,
                    &mut th,
                    &model,
                    &format!("{strategy} desc {desc} key {k}"),
                );
                if heights.last() != Some(&height(&t)) {
                    heights.push(height(&t));
                }
            }
            // The height only ever decreases, one level at a time, to 1.
            let want: Vec<u64> = (1..=h0).rev().collect();
            assert_eq!(heights, want, "{strategy} desc {desc}");
            let r = t.rebalances();
            if desc {
                assert!(r.borrow_left > 0 && r.merges > 0, "{r:?}");
            } else {
                assert!(r.borrow_right > 0 && r.merges > 0, "{r:?}");
            }
            assert_eq!(r.collapses, h0 - 1);
        }
    }
}

/// Writers removing and inserting their own keys (forcing merges and
/// splits) while readers look up keys nobody touches: every lookup
/// finds its value, and the final tree is the writers' models.
#[test]
fn readers_stay_correct_while_writers_merge() {
    const W: u64 = 3;
    for strategy in [Strategy::Undo, Strategy::Redo, Strategy::Clobber] {
        let p = pool();
        let txp = txpool(&p, strategy);
        let t = {
            let mut th = txp.thread().unwrap();
            let t = BpTree::create(&mut th, opts(4)).unwrap();
            // Fixed keys ≡ W (mod W+1), never removed.
            for k in 0..100u64 {
                let k = k * (W + 1) + W;
                t.insert(&mut th, k, &val(k, 0)).unwrap();
            }
            t
        };
        let models: Vec<BTreeMap<u64, Vec<u8>>> = std::thread::scope(|sc| {
            let (t, txp) = (&t, &txp);
            let readers: Vec<_> = (0..2u64)
                .map(|r| {
                    sc.spawn(move || {
                        let mut x = r + 100;
                        for _ in 0..3000 {
                            x = ds::mix64(x);
                            let k = (x % 100) * (W + 1) + W;
                            assert_eq!(t.get(k).unwrap(), Some(val(k, 0)), "key {k}");
                        }
                    })
                })
                .collect();
            let writers: Vec<_> = (0..W)
                .map(|w| {
                    sc.spawn(move || {
                        let mut th = txp.thread().unwrap();
                        let mut model = BTreeMap::new();
                        let mut x = w + 1;
                        for i in 0..800u64 {
                            x = ds::mix64(x);
                            let k = (x % 80) * (W + 1) + w;
                            // Alternate insert-heavy and remove-heavy phases.
                            if (x >> 16) % 10 < if (i / 100) % 2 == 0 { 8 } else { 2 } {
                                let v = val(k, i);
                                assert_eq!(
                                    t.insert(&mut th, k, &v).unwrap(),
                                    model.insert(k, v).is_none()
                                );
                            } else {
                                assert_eq!(
                                    t.remove(&mut th, k).unwrap(),
                                    model.remove(&k).is_some()
                                );
                            }
                        }
                        model
                    })
                })
                .collect();
            for r in readers {
                r.join().unwrap();
            }
            writers.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut want: BTreeMap<u64, Vec<u8>> = models.into_iter().flatten().collect();
        for k in 0..100u64 {
            let k = k * (W + 1) + W;
            want.insert(k, val(k, 0));
        }
        let mut th = txp.thread().unwrap();
        agrees(&t, &mut th, &want, &format!("{strategy}"));
        assert!(
            t.rebalances().merges > 0,
            "{strategy}: {:?}",
            t.rebalances()
        );
    }
}

/// The descent's word-wise comparison is `memcmp` order.
#[test]
fn key_cmp_is_bytewise_order() {
    let mut x = 5u64;
    let mut next = || {
        x = ds::mix64(x);
        let mut k = key32(x % 7);
        // Equal prefixes of every length, so each word decides once.
        k[(x >> 8) as usize % KEY] ^= (x >> 16) as u8 & 3;
        k
    };
    for _ in 0..20_000 {
        let (a, b) = (next(), next());
        assert_eq!(key_cmp(&a, &key_words(&b)), a.cmp(&b), "{a:?} {b:?}");
    }
}

/// The in-DRAM search answers as `binary_search` on sorted keys, for
/// keys present and missing, at every node size up to the largest.
#[test]
fn search_is_binary_search() {
    let mut x = 11u64;
    for n in 0..=MAXF {
        let mut keys: Vec<[u8; KEY]> = (0..n)
            .map(|_| {
                x = ds::mix64(x);
                key32(x % 1000)
            })
            .collect();
        keys.sort();
        keys.dedup();
        for probe in 0..1000u64 {
            let k = key32(probe);
            assert_eq!(
                search(&keys, &key_words(&k)),
                keys.binary_search(&k),
                "{n} keys, probe {probe}"
            );
        }
    }
}

/// A node claiming more keys than the fanout, or a header claiming a
/// fanout or height out of range, fails with `Corrupt` — from the
/// lock walk, `get`, and inside the insert and remove transactions —
/// and never panics; restored, the tree works again.
#[test]
fn corrupt_counts_fail_cleanly() {
    for strategy in Strategy::ALL {
        let p = pool();
        let txp = txpool(&p, strategy);
        // The whole pool, addressed by pool offset as `txp` does: for
        // writes outside a transaction.
        let whole = Region::whole(p.medium().clone());
        let mut th = txp.thread().unwrap();
        let t = BpTree::create(&mut th, opts(4)).unwrap();
        // Even keys: odd ones are missing keys inside the leftmost leaf.
        for k in 0..60u64 {
            t.insert(&mut th, 2 * k, &val(2 * k, 0)).unwrap();
        }
        let (root, h) = t.root_height().unwrap();
        assert!(h >= 3);
        let mut leaf = root;
        for _ in 1..h {
            leaf = t.ptr(leaf, 0).unwrap();
        }
        let corrupt = |r: Result<u64>| matches!(r, Err(TxError::Corrupt(_)));
        let run = |th: &mut TxThread<'_>, f: &'static TxFunc, k: u64| {
            let v = val(k, 1);
            let bufs: &[&[u8]] = if f.id == INSERT.id { &[&v] } else { &[] };
            th.run(f, &pack_args(&[t.header, k]), bufs)
        };
        for x in [root, leaf] {
            let n = t.count(x).unwrap();
            whole.store_u64((x + N_N) as usize, 5);
            assert!(matches!(t.get(0), Err(TxError::Corrupt(_))), "{strategy}");
            let r = t.insert(&mut th, 1, &val(1, 0));
            assert!(
                matches!(r, Err(TxError::Corrupt(_))),
                "{strategy} {x:#x} {r:?}"
            );
            assert!(matches!(t.remove(&mut th, 0), Err(TxError::Corrupt(_))));
            for f in [&INSERT, &REMOVE] {
                assert!(corrupt(run(&mut th, f, 0)), "{strategy} {}", f.name);
                assert!(corrupt(run(&mut th, f, 1)), "{strategy} {}", f.name);
            }
            whole.store_u64((x + N_N) as usize, n as u64);
        }
        for (word, bad) in [
            (H_FANOUT, 1000),
            (H_FANOUT, 2),
            (H_HEIGHT, 0),
            (H_HEIGHT, 1 << 40),
        ] {
            let old = t.txp.read_u64(t.header + word).unwrap();
            whole.store_u64((t.header + word) as usize, bad);
            for f in [&INSERT, &REMOVE] {
                assert!(
                    corrupt(run(&mut th, f, 7)),
                    "{strategy} {} {word} {bad}",
                    f.name
                );
            }
            whole.store_u64((t.header + word) as usize, old);
        }
        th.quiesce();
        t.shape().unwrap();
        assert!(t.insert(&mut th, 1000, &val(1000, 0)).unwrap());
        assert!(t.remove(&mut th, 0).unwrap());
        assert_eq!(t.get(1000).unwrap(), Some(val(1000, 0)));
    }
}

/// `shape` refuses an underfull node and an empty non-root leaf.
#[test]
fn shape_refuses_underfull_nodes() {
    let p = pool();
    let txp = txpool(&p, Strategy::Undo);
    let whole = Region::whole(p.medium().clone());
    let mut th = txp.thread().unwrap();
    let t = BpTree::create(&mut th, opts(4)).unwrap();
    for k in 0..20u64 {
        t.insert(&mut th, k, &val(k, 0)).unwrap();
    }
    t.shape().unwrap();
    // Shrink the leftmost leaf's count by hand (outside a transaction).
    let (root, h) = t.root_height().unwrap();
    let mut x = root;
    for _ in 1..h {
        x = t.ptr(x, 0).unwrap();
    }
    let n = t.count(x).unwrap();
    for bad in [min_keys(4) as u64 - 1, 0] {
        whole.store_u64((x + N_N) as usize, bad);
        let e = t.shape().unwrap_err();
        assert!(e.contains("below the minimum"), "{e}");
    }
    whole.store_u64((x + N_N) as usize, n as u64);
    t.shape().unwrap();
}
