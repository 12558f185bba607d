//! redb's comparison workload (`ferrite bench engine`, workload `redb`)
//! at a tiny scale: every phase on every system, the rows' shape, and
//! that every system holds the right data after the phases.

use ferrite_bench::Row;
use ferrite_bench::suites::engine::redb_bench::{self, Counts, Peer, Phase};
use ferrite_bench::suites::engine::{LMDB, SUITE};
use ferrite_bench::{BenchCtx, claims};
use ferrite_engine::EngineKind;

fn extra<'a>(r: &'a Row, k: &str) -> Option<&'a serde_json::Value> {
    r.extra.as_ref()?.get(k)
}

fn extra_u64(r: &Row, k: &str) -> Option<u64> {
    extra(r, k)?.as_u64()
}

#[test]
fn every_phase_runs_on_every_system_and_leaves_the_same_data() {
    let ctx = BenchCtx::quick().with_reps(2);
    let counts = Counts::tiny();
    let rows = redb_bench::run(&ctx, &counts);
    for r in &rows {
        if let Some(why) = extra(r, "skipped") {
            eprintln!("{} {}: {why}", r.variant, r.params["workload"]);
        }
    }
    let peers = Peer::all();
    let phases = counts.phases();
    assert_eq!(rows.len(), phases.len() * peers.len());
    let elements = counts.elements();
    let final_entries = elements - elements / 2 + counts.sorted;
    for (i, &phase) in phases.iter().enumerate() {
        let group = &rows[i * peers.len()..(i + 1) * peers.len()];
        for (r, &peer) in group.iter().zip(&peers) {
            assert_eq!(r.suite, SUITE);
            assert_eq!(r.variant, peer.variant());
            assert_eq!(r.params["workload"], phase.workload(), "{r:?}");
            assert_eq!(r.params["allocator"], peer.allocator());
            assert_eq!(r.params["domain"], peer.domain());
            assert_eq!(r.params["key_bytes"], 24);
            assert_eq!(r.params["value_bytes"], 150);
            assert_eq!(r.threads, phase.threads());
            assert_eq!(
                r.baseline.as_deref(),
                (peer != Peer::Lmdb).then_some(LMDB),
                "{r:?}"
            );
            let ferrite = matches!(peer, Peer::Ferrite(_));
            assert!(extra(r, "skipped").is_none(), "{r:?}");
            assert_eq!(r.reps, 2, "{r:?}");
            assert!(r.ops > 0 && r.secs > 0.0 && r.ns_per_op > 0.0, "{r:?}");
            assert_eq!(
                r.ratio_vs_baseline.is_some_and(|q| q > 0.0),
                peer != Peer::Lmdb,
                "{r:?}"
            );
            assert!(extra(r, "ratio_vs_redb").is_some(), "{r:?}");
            assert!(extra(r, "ratio_vs_fjall").is_some(), "{r:?}");
            assert_eq!(r.counters_observed, ferrite);
            // Ferrite's durable writes flush and fence.
            if ferrite && r.params["durable"] == true {
                assert!(r.fences_per_op > 0.0, "{r:?}");
            }
            // Its pool file grew from nothing given: the size reached.
            if ferrite {
                assert_eq!(r.params["growable"], true, "{r:?}");
                assert!(r.params["pool_bytes"].as_u64().unwrap() > 0, "{r:?}");
            }
        }
        let ops = |p: Peer| group[peers.iter().position(|&q| q == p).unwrap()].ops;
        match phase {
            Phase::Bulk => {
                // One transaction on every system, Ferrite's included.
                for r in group {
                    assert_eq!(r.ops, counts.bulk);
                    assert_eq!(r.params["batch_ops"], counts.bulk, "{r:?}");
                    assert_eq!(r.params["commits"], 1, "{r:?}");
                }
            }
            Phase::Nosync => {
                for r in group {
                    assert_eq!(r.params["durable"], false, "{r:?}");
                    assert_eq!(r.params["commits"], counts.nosync, "{r:?}");
                }
            }
            Phase::Batch => {
                assert_eq!(ops(Peer::Lmdb), counts.batches * counts.batch_size);
                assert!(
                    group
                        .iter()
                        .all(|r| r.params["batch_ops"] == counts.batch_size)
                );
            }
            Phase::ThreadedRead(t) => {
                assert_eq!(ops(Peer::Redb), elements / t as u64 * t as u64)
            }
            Phase::Retain | Phase::ExtractIf | Phase::Pop => {
                // Every system removed the same entries' count.
                let removed: Vec<u64> = group
                    .iter()
                    .map(|r| extra_u64(r, "removed").unwrap())
                    .collect();
                assert!(
                    removed.iter().all(|&n| n == removed[0] && n > 0),
                    "{removed:?}"
                );
            }
            Phase::Sorted => {
                // The whole table, walked after the last phase: the model's
                // count and one digest for every system.
                let digests: Vec<&str> = group
                    .iter()
                    .map(|r| {
                        assert_eq!(extra_u64(r, "final_entries"), Some(final_entries), "{r:?}");
                        extra(r, "digest").and_then(|d| d.as_str()).unwrap()
                    })
                    .collect();
                assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
            }
            _ => {}
        }
    }
    // LSM's relaxed commits skip the commit's fence: fewer fences per
    // insert than its durable individual writes (the nosync phase really
    // commits with Durability::Eventual).
    let lsm = |w: &str| {
        rows.iter()
            .find(|r| r.variant == "lsm" && r.params["workload"] == w)
            .unwrap()
            .fences_per_op
    };
    assert!(
        lsm("redb-nosync") < lsm("redb-individual"),
        "nosync {} vs individual {} fences per op",
        lsm("redb-nosync"),
        lsm("redb-individual")
    );
    // One claim per phase (and thread count), every one measured.
    let outcomes = redb_bench::summarize(&rows);
    assert_eq!(outcomes.len(), phases.len());
    assert!(
        outcomes
            .iter()
            .all(|o| o.measured.is_some_and(|m| m > 0.0) && o.verdict != claims::Verdict::NotRun),
        "{outcomes:?}"
    );
}

/// Ferrite's subject is a store as a user opens one: no size given, it
/// grows; a transaction of any size commits whole (one commit), and one
/// whose body fails applies nothing; retain and pop run inside one
/// write transaction that sees its own earlier writes.
#[test]
fn ferrite_subjects_grow_and_commit_whole_transactions() {
    use redb_bench::subjects::{FerriteSubject, Subject};
    for kind in EngineKind::ALL {
        let mut f = FerriteSubject::create(kind).unwrap();
        let start = f.file_bytes();
        let mut g = redb_bench::Gen::new();
        let n = 30_000u64;
        let c = f
            .write(&mut |t| {
                for _ in 0..n {
                    let (k, v) = g.pair();
                    t.insert(&k, &v)?;
                }
                Ok(n)
            })
            .unwrap();
        assert_eq!((c.commits, c.batch_ops), (1, n), "{kind}");
        assert_eq!(f.len().unwrap(), n, "{kind}");
        assert!(
            f.file_bytes() > start,
            "{kind}: {start} -> {}",
            f.file_bytes()
        );
        // A body that fails after writing: nothing of it lands.
        let (k0, _) = redb_bench::Gen::new().pair();
        let r = f.write(&mut |t| {
            t.remove(&k0)?;
            t.insert(b"half-done", b"x")?;
            Err("planted failure".into())
        });
        assert!(r.is_err(), "{kind}");
        assert_eq!(f.len().unwrap(), n, "{kind}");
        let mut out = Vec::new();
        assert!(f.reader().unwrap().get(&k0, &mut out).unwrap(), "{kind}");
        assert!(!f.reader().unwrap().get(b"half-done", &mut out).unwrap());
        // Insert, then retain every other entry and pop from both ends in
        // the same transaction: each step sees the earlier ones.
        let mut removed = 0;
        f.write(&mut |t| {
            t.insert(&[0u8; 24], &[1u8; 150])?;
            let mut i = 0u64;
            removed = t.retain(&mut |_, _| {
                i += 1;
                i % 2 == 1
            })?;
            // The inserted key sorts first and was kept: pop it.
            assert!(t.pop_first()? && t.pop_last()?);
            Ok(removed)
        })
        .unwrap();
        assert_eq!(removed, n.div_ceil(2), "{kind}");
        assert_eq!(f.len().unwrap(), n + 1 - removed - 2, "{kind}");
        assert!(!f.reader().unwrap().get(&[0u8; 24], &mut out).unwrap());
    }
}
