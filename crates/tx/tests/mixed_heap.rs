//! Transactions sharing their heap with standalone allocator publishes.
//!
//! A standalone publish leaves its lane's "done" marker flushed but not
//! fenced; a transaction that frees the published block flushes that
//! marker in `prepare`, and its commit fence makes both durable — or, if
//! the power fails during that fence, any subset of them. Recovery must
//! let the heap judge its lane records on the image as the crash left it
//! *before* it replays the transaction's allocator operations: replaying
//! the free first makes the lane's complete allocation look unapplied, and
//! the heap then re-applies it, leaking the block the transaction freed.
//! The explorer finds that state at the transaction's commit fence.

use ferrite_alloc::{AllocThread, Link, PAllocator, Publish};
use ferrite_crash::sim::SimThread;
use ferrite_crash::{Config, Explorer};
use ferrite_pmem::{Domain, POff, Pool};
use ferrite_tx::{Fault, Inputs, Registry, Result, Strategy, Tx, TxFunc, TxOptions, TxPool};

/// Frees the block whose offset is argument 0.
static FREE_IT: TxFunc = TxFunc {
    id: 0x7e51,
    name: "free-it",
    body: free_it,
};

fn free_it(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    tx.free(POff::new(inp.arg_u64(0)))?;
    Ok(0)
}

fn registry() -> Registry {
    Registry::new().with(&[&FREE_IT]).expect("one function")
}

/// What the workload saw: the block's offset, and whether the freeing
/// transaction returned.
#[derive(Default)]
struct Model {
    /// The block that links to `block` (never freed).
    holder: Option<u64>,
    block: Option<u64>,
    freed: bool,
}

fn allocated(txp: &TxPool) -> Vec<u64> {
    let mut v = Vec::new();
    txp.heap()
        .for_each_allocated(&mut |off, _| v.push(off.raw()));
    v
}

fn explore(strategy: Strategy, fault: Fault, budget: usize) -> ferrite_crash::Report {
    Explorer::new(
        Config::new("tx-mixed-heap")
            .budget(budget)
            .seed(7)
            .domain(Domain::Adr)
            .pool_size(1 << 20),
    )
    .setup(move |pool| {
        TxPool::create(
            pool,
            &TxOptions::new(strategy).slots(2).area_bytes(8192),
            registry(),
        )
        .expect("create");
    })
    .explore(
        |pool: &Pool, m: &mut Model| {
            let txp = TxPool::open(pool, registry(), Some(strategy)).expect("open");
            // Thread 1: a standalone allocation, published on its own.
            // The handle stays attached: detaching would fence its marker.
            let mut h = txp.heap().attach().expect("a lane");
            let block = {
                let _t = SimThread::enter(1);
                // Two blocks and a link from one to the other: a
                // multi-word publish, committed through the lane's log.
                let a = h.reserve(64).expect("reserve");
                let b = h.reserve(64).expect("reserve");
                let (ao, bo) = (a.off().raw(), b.off().raw());
                h.publish(&Publish {
                    allocs: &[a, b],
                    frees: &[],
                    links: &[Link {
                        at: POff::new(ao),
                        value: bo,
                    }],
                })
                .expect("publish");
                m.holder = Some(ao);
                bo
            };
            m.block = Some(block);
            // Thread 2: a transaction frees it.
            let _t = SimThread::enter(2);
            let mut th = txp.thread().expect("a slot");
            th.run(&FREE_IT, &block.to_le_bytes(), &[]).expect("free");
            m.freed = true;
            th.quiesce();
            drop(th);
            let _t = SimThread::enter(1);
            drop(h);
        },
        |pool| {
            TxPool::open_with_fault(pool, registry(), Some(strategy), fault)
                .map_err(|e| e.to_string())
        },
        |_, txp, m| {
            let Some(block) = m.block else {
                return Ok(());
            };
            let now = allocated(txp);
            let replayed = txp.recovery().replayed > 0;
            // The free must have taken effect when the transaction
            // returned or its REDO record was replayed. (Whether an
            // interrupted one took effect depends on how far it got: undo
            // and clobber finish or roll back as a whole, so either is
            // fine, and the checks below still forbid any other change.)
            let live = now.contains(&block);
            if m.freed && live {
                return Err(format!(
                    "block {block:#x} freed by a returned transaction is allocated again"
                ));
            }
            if replayed && live {
                return Err(format!(
                    "block {block:#x} freed by a replayed commit is allocated again"
                ));
            }
            let holder = m.holder.expect("set with the block");
            if !now.contains(&holder) {
                return Err(format!("published block {holder:#x} is free"));
            }
            if now.iter().any(|&b| b != block && b != holder) {
                return Err(format!("unexpected allocated blocks {now:x?}"));
            }
            Ok(())
        },
    )
    .expect("explore")
}

#[test]
fn a_replayed_free_of_a_standalone_allocation_stays_freed() {
    for strategy in [Strategy::Redo, Strategy::Undo, Strategy::Clobber] {
        let r = explore(strategy, Fault::None, 2000);
        assert!(r.violations.is_empty(), "{strategy:?}: {r}");
        assert!(r.states > 0, "{strategy:?}: no crash states explored");
    }
}

/// The old order — replay, then let the heap judge its lanes — is caught.
#[test]
fn replaying_before_the_heap_judges_its_lanes_is_caught() {
    let r = explore(Strategy::Redo, Fault::RedoBeforeHeap, 2000);
    assert!(
        r.violations
            .iter()
            .any(|v| v.to_string().contains("allocated again")),
        "{r}"
    );
}
