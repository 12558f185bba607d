//! redb's comparison workload (`ferrite bench engine`, workload `redb`)
//! at a tiny scale: every phase on every system, the rows' shape, and
//! that every system holds the right data after the phases.

use ferrite_bench::Row;
use ferrite_bench::engine_suite::redb_bench::subjects::{self, apply_batches};
use ferrite_bench::engine_suite::redb_bench::{self, Counts, Peer, Phase};
use ferrite_bench::engine_suite::{LMDB, SUITE};
use ferrite_bench::{BenchCtx, claims};
use ferrite_engine::{EngineKind, Op, Store, StoreOptions};

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
            if phase == Phase::Nosync && ferrite {
                let why = extra(r, "skipped").and_then(|s| s.as_str()).unwrap();
                assert!(why.contains("nosync"), "{why}");
                assert!(r.ratio_vs_baseline.is_none());
                continue;
            }
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
            if ferrite && phase.workload() != "redb-len" && r.params.get("durable").is_some() {
                assert!(r.fences_per_op > 0.0, "{r:?}");
            }
        }
        let ops = |p: Peer| group[peers.iter().position(|&q| q == p).unwrap()].ops;
        match phase {
            Phase::Bulk => {
                for r in group {
                    assert_eq!(r.ops, counts.bulk);
                    let (b, c) = (
                        r.params["batch_ops"].as_u64().unwrap(),
                        r.params["commits"].as_u64().unwrap(),
                    );
                    assert!(b * c >= counts.bulk && b <= counts.bulk, "{r:?}");
                }
                assert_eq!(group[0].params["batch_ops"], counts.bulk);
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
    // One claim per phase (and thread count); nosync not run for Ferrite.
    let outcomes = redb_bench::summarize(&rows);
    assert_eq!(outcomes.len(), phases.len());
    let nosync = outcomes
        .iter()
        .find(|o| o.name.contains("redb-nosync"))
        .unwrap();
    assert_eq!(nosync.verdict, claims::Verdict::NotRun);
    assert!(
        outcomes
            .iter()
            .filter(|o| !o.name.contains("redb-nosync"))
            .all(|o| o.measured.is_some_and(|m| m > 0.0)),
        "{outcomes:?}"
    );
}

/// A batch the engine refuses as too large is applied in the largest
/// batches it takes, exactly once each. InP commits a batch of any size
/// now (a record larger than its log area goes to a block of its own);
/// only its intent protocol (stores on PMDK's allocator) still bounds a
/// batch by its 128 KiB log, which takes far fewer than 20 000 of these
/// 174-byte writes at once.
#[test]
fn a_refused_batch_is_split_and_applied_whole() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let mut opts = StoreOptions::new(EngineKind::Inp);
    opts.inp.intent_allocs = true;
    let store = Store::create_file(dir.path().join("p"), 64 << 20, &opts).unwrap();
    let mut s = store.session().unwrap();
    let mut g = redb_bench::Gen::new();
    let pairs: Vec<_> = (0..24_000).map(|_| g.pair()).collect();
    let ops: Vec<Op<'_>> = pairs
        .iter()
        .map(|(k, v)| Op::Put { key: k, value: v })
        .collect();
    let mut limit = usize::MAX;
    let c = apply_batches(&mut s, &ops[..20_000], &mut limit).unwrap();
    assert!(c.refused >= 1 && c.commits >= 2, "{c:?}");
    assert!(c.batch_ops < 20_000 && limit < 20_000, "{c:?} {limit}");
    assert_eq!(store.stats().keys, 20_000);
    // What was learned bounds the next batches at once.
    let learned = limit;
    let c2 = apply_batches(&mut s, &ops[20_000..], &mut limit).unwrap();
    assert!(c2.batch_ops <= learned as u64, "{c2:?} {learned}");
    assert_eq!(store.stats().keys, 24_000);
    let mut out = Vec::new();
    for (k, v) in &pairs {
        assert!(s.get_into(k, &mut out).unwrap());
        assert_eq!(&out[..], &v[..]);
    }
    assert_eq!(subjects::INP_LOG_BYTES, 1 << 20);
}
