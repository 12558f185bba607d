//! Unit tests of the PTM on ordinary (unsimulated) pools.

use crate::*;
use ferrite_pmem::{Domain, POff, Pool, PoolOptions};

fn pool(domain: Domain) -> Pool {
    Pool::create_in_memory(&PoolOptions::new("ptm-test", 16 << 20).domain(domain)).unwrap()
}

/// A block of `n` zeroed counters linked from the root.
fn counters(th: &mut PtmThread<'_>, root: POff<u64>, n: usize) -> u64 {
    th.atomic(|tx| {
        let b = tx.alloc_zeroed(8 * n)?;
        tx.set(root, b.raw())?;
        Ok(b.raw())
    })
    .unwrap()
}

#[test]
fn counters_commit_and_survive_reopen_under_every_domain() {
    for alg in Algorithm::ALL {
        for d in [
            Domain::Adr,
            Domain::Eadr,
            Domain::PdramLite,
            Domain::Volatile,
        ] {
            let p = pool(d);
            let opts = PtmOptions::new(alg).log_bytes(4096).orecs(1 << 12);
            {
                let ptm = Ptm::create(&p, &opts).unwrap();
                let mut th = ptm.thread().unwrap();
                let b = counters(&mut th, ptm.root(), 4);
                for i in 0..50u64 {
                    th.atomic(|tx| {
                        for k in 0..4 {
                            let v = tx.load(b + 8 * k)?;
                            tx.store(b + 8 * k, v + i)?;
                        }
                        Ok(())
                    })
                    .unwrap();
                }
                let s = th.stats();
                assert_eq!(s.commits, 51, "{alg} {d:?}");
                assert_eq!(s.aborts, 0);
            }
            let ptm = Ptm::open(&p, &opts).unwrap();
            let b = ptm.peek(ptm.root().raw()).unwrap();
            for k in 0..4 {
                assert_eq!(
                    ptm.peek(b + 8 * k).unwrap(),
                    (0..50).sum::<u64>(),
                    "{alg} {d:?}"
                );
            }
        }
    }
}

#[test]
fn fences_per_writer_follow_the_protocols() {
    for alg in Algorithm::ALL {
        let p = pool(Domain::Adr);
        let ptm = Ptm::create(&p, &PtmOptions::new(alg).log_bytes(4096)).unwrap();
        let mut th = ptm.thread().unwrap();
        let b = counters(&mut th, ptm.root(), 16);
        for w in [1u64, 4, 16] {
            let before = th.stats();
            th.atomic(|tx| {
                for k in 0..w {
                    tx.store(b + 8 * k, k)?;
                }
                Ok(())
            })
            .unwrap();
            let f = th.stats().sub(&before).fences;
            let want = match alg {
                Algorithm::Eager => w + 2,
                Algorithm::Lazy => 3,
            };
            assert_eq!(f, want, "{alg}, {w} words");
        }
        // Read-only: no fence.
        let before = th.stats();
        th.atomic(|tx| tx.load(b)).unwrap();
        assert_eq!(th.stats().sub(&before).fences, 0);
    }
}

#[test]
fn eadr_issues_no_fence() {
    for alg in Algorithm::ALL {
        let p = pool(Domain::Eadr);
        let ptm = Ptm::create(&p, &PtmOptions::new(alg).log_bytes(4096)).unwrap();
        let mut th = ptm.thread().unwrap();
        let b = counters(&mut th, ptm.root(), 4);
        let before = th.stats();
        th.atomic(|tx| tx.store(b, 7)).unwrap();
        assert_eq!(th.stats().sub(&before).fences, 0);
    }
}

#[test]
fn user_abort_rolls_back_writes_and_allocations() {
    for alg in Algorithm::ALL {
        let p = pool(Domain::Adr);
        let ptm = Ptm::create(&p, &PtmOptions::new(alg).log_bytes(4096)).unwrap();
        let mut th = ptm.thread().unwrap();
        let b = counters(&mut th, ptm.root(), 2);
        let blocks = ferrite_alloc::PAllocator::stats(ptm.heap()).blocks;
        let r = th.atomic(|tx| {
            tx.store(b, 99)?;
            let n = tx.alloc(64)?;
            tx.store(b + 8, n.raw())?;
            tx.abort::<()>(7)
        });
        assert!(matches!(r, Err(PtmError::Aborted { code: 7 })), "{r:?}");
        assert_eq!(th.atomic(|tx| tx.load(b)).unwrap(), 0);
        assert_eq!(th.atomic(|tx| tx.load(b + 8)).unwrap(), 0);
        assert_eq!(
            ferrite_alloc::PAllocator::stats(ptm.heap()).blocks,
            blocks,
            "{alg}: allocation leaked"
        );
    }
}

#[test]
fn alloc_and_free_commit_with_the_transaction() {
    for alg in Algorithm::ALL {
        let p = pool(Domain::Adr);
        let opts = PtmOptions::new(alg).log_bytes(8192);
        {
            let ptm = Ptm::create(&p, &opts).unwrap();
            let mut th = ptm.thread().unwrap();
            let b = counters(&mut th, ptm.root(), 8);
            let base = ferrite_alloc::PAllocator::stats(ptm.heap()).blocks;
            // Eight nodes, then free half, then allocate-and-free in one tx.
            th.atomic(|tx| {
                for k in 0..8 {
                    let n = tx.alloc(48)?;
                    tx.store(n.raw(), 1000 + k)?;
                    tx.store(b + 8 * k, n.raw())?;
                }
                Ok(())
            })
            .unwrap();
            assert_eq!(
                ferrite_alloc::PAllocator::stats(ptm.heap()).blocks,
                base + 8
            );
            th.atomic(|tx| {
                for k in 0..4 {
                    let n = tx.load(b + 8 * k)?;
                    tx.free(POff::new(n))?;
                    tx.store(b + 8 * k, 0)?;
                }
                let t = tx.alloc(16)?;
                tx.free(t)
            })
            .unwrap();
            assert_eq!(
                ferrite_alloc::PAllocator::stats(ptm.heap()).blocks,
                base + 4
            );
        }
        let ptm = Ptm::open(&p, &opts).unwrap();
        let b = ptm.peek(ptm.root().raw()).unwrap();
        for k in 4..8 {
            let n = ptm.peek(b + 8 * k).unwrap();
            assert_eq!(ptm.peek(n).unwrap(), 1000 + k, "{alg}");
        }
    }
}

#[test]
fn bad_accesses_and_oversize_transactions_are_typed_errors() {
    for alg in Algorithm::ALL {
        let p = pool(Domain::Adr);
        let ptm = Ptm::create(&p, &PtmOptions::new(alg).log_bytes(1024)).unwrap();
        let mut th = ptm.thread().unwrap();
        let b = counters(&mut th, ptm.root(), 128);
        let r = th.atomic(|tx| tx.load(64));
        assert!(matches!(r, Err(PtmError::OutOfBounds { .. })), "{r:?}");
        let r = th.atomic(|tx| tx.load(b + 4));
        assert!(matches!(r, Err(PtmError::Misaligned(_))), "{r:?}");
        let r = th.atomic(|tx| {
            for k in 0..128 {
                tx.store(b + 8 * k, 5)?;
            }
            Ok(())
        });
        assert!(matches!(r, Err(PtmError::LogFull { .. })), "{alg}: {r:?}");
        // Rolled back whole.
        assert_eq!(th.atomic(|tx| tx.load(b)).unwrap(), 0);
        // And the thread still works.
        th.atomic(|tx| tx.store(b, 1)).unwrap();
    }
}

#[test]
fn two_threads_conflict_abort_and_lose_no_increment() {
    for alg in Algorithm::ALL {
        let p = pool(Domain::Adr);
        let ptm = Ptm::create(&p, &PtmOptions::new(alg).log_bytes(4096)).unwrap();
        let b = {
            let mut th = ptm.thread().unwrap();
            counters(&mut th, ptm.root(), 2)
        };
        let per = 3000u64;
        let stats: Vec<PtmStats> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let mut th = ptm.thread().unwrap();
                        for _ in 0..per {
                            th.atomic(|tx| {
                                // Two words that must stay equal.
                                let x = tx.load(b)?;
                                let y = tx.load(b + 8)?;
                                if x != y {
                                    return Err(Abort::Error(PtmError::Corrupt(format!(
                                        "inconsistent snapshot {x} != {y}"
                                    ))));
                                }
                                tx.store(b, x + 1)?;
                                tx.store(b + 8, y + 1)
                            })
                            .unwrap();
                        }
                        th.stats()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(ptm.peek(b).unwrap(), 2 * per, "{alg}");
        assert_eq!(ptm.peek(b + 8).unwrap(), 2 * per, "{alg}");
        let commits: u64 = stats.iter().map(|s| s.commits).sum();
        assert_eq!(commits, 2 * per);
    }
}
