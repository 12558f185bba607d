//! Unit tests of the transaction layer without crashes: misuse, aborts and
//! argument passing on small functions of their own. The tests that drive
//! the data structures, and the crash checks, are in `ferrite-ds`.

use crate::{Inputs, Registry, TxFunc, pack_args};
use crate::{Strategy, Tx, TxError, TxOptions, TxPool};
use ferrite_alloc::PAllocator;
use ferrite_pmem::{Domain, POff, Pool, PoolOptions};

fn pool(mib: u64) -> Pool {
    Pool::create_in_memory(&PoolOptions::new("tx-test", mib << 20).domain(Domain::Adr)).unwrap()
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
fn args_reach_the_function() {
    let i = Inputs::new(&[1, 0, 0, 0, 0, 0, 0, 0, 2], &[]);
    assert_eq!(i.arg_u64(0), 1);
    assert_eq!(i.arg_u64(1), 0, "past the end");
    assert_eq!(i.buf(3), &[] as &[u8]);
}

/// A committed transaction returns with no flush in flight, under every
/// strategy: the caller's unlock is a locked instruction, which would wait
/// for such a flush's write-back as a fence does (see `crate::tx`). Redo
/// and clobber leave their `done` word unflushed for the next fence point.
#[test]
fn a_committed_transaction_leaves_no_flush_in_flight() {
    let opts = PoolOptions::new("tx-test", 4 << 20);
    for strategy in [
        Strategy::Undo,
        Strategy::Redo,
        Strategy::Clobber,
        Strategy::NoLog,
    ] {
        let (p, obs) = ferrite_crash::InFlight::open(&pool(4).image(), &opts).unwrap();
        let txp = TxPool::create(
            &p,
            &TxOptions::new(strategy).slots(2).area_bytes(8192),
            reg(),
        )
        .unwrap();
        let mut th = txp.thread().unwrap();
        let blk = th.run(&ALLOC1, &[], &[]).unwrap();
        let in_flight = || obs.count();
        assert_eq!(
            in_flight(),
            0,
            "{strategy}: after an allocating transaction"
        );
        for _ in 0..3 {
            th.run(&BOOM, &pack_args(&[blk, 0]), &[]).unwrap();
            assert_eq!(in_flight(), 0, "{strategy}: after a writing transaction");
        }
    }
}
