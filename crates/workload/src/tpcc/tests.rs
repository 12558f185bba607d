//! Tests of TPC-C against the reference [`MemKv`].

use super::*;
use crate::{Kv, MemKv};
use std::collections::BTreeMap;

fn loaded(cfg: &TpccConfig, seed: u64) -> MemKv {
    let mut kv = MemKv::new();
    let loader = TpccLoader::new::<std::convert::Infallible>(cfg, seed).unwrap();
    loader.load_all(&mut kv, 256).unwrap();
    kv
}

fn small() -> TpccConfig {
    TpccConfig {
        warehouses: 2,
        items: 500,
        customers_per_district: 30,
        orders_per_district: 30,
        new_orders_per_district: 9,
        remote: true,
    }
}

#[test]
fn last_names_and_nurand_follow_the_spec() {
    // TPC-C 4.3.2.3's example: 371 → PRICALLYOUGHT.
    assert_eq!(&last_name(371)[..13], b"PRICALLYOUGHT");
    assert_eq!(last_name(0)[..9], *b"BARBARBAR");
    assert_eq!(TpccConfig::standard(1).nurand_a(), (255, 1023, 8191));
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for _ in 0..10_000 {
        let v = nurand(&mut rng, 1023, 1, 3000, 259);
        assert!((1..=3000).contains(&v));
    }
    let c = Constants::from_seed(5);
    let delta = (c.c_last_run + 256 - c.c_last_load) % 256;
    assert!((65..=119).contains(&delta) && delta != 96 && delta != 112);
}

#[test]
fn load_has_tpcc_cardinalities_and_is_consistent() {
    let cfg = small();
    let mut kv = loaded(&cfg, 1);
    let mut per_table: BTreeMap<u8, usize> = BTreeMap::new();
    for (k, _) in kv.snapshot() {
        *per_table.entry(k[0]).or_default() += 1;
    }
    let w = cfg.warehouses as usize;
    let d = w * DISTRICTS as usize;
    assert_eq!(per_table[&(Table::Warehouse as u8)], w);
    assert_eq!(per_table[&(Table::District as u8)], d);
    assert_eq!(per_table[&(Table::Customer as u8)], d * 30);
    assert_eq!(per_table[&(Table::CustomerByName as u8)], d * 30);
    assert_eq!(per_table[&(Table::History as u8)], d * 30);
    assert_eq!(per_table[&(Table::Order as u8)], d * 30);
    assert_eq!(per_table[&(Table::OrderByCustomer as u8)], d * 30);
    assert_eq!(per_table[&(Table::NewOrder as u8)], d * 9);
    assert_eq!(per_table[&(Table::Item as u8)], 500);
    assert_eq!(per_table[&(Table::Stock as u8)], w * 500);
    let lines = per_table[&(Table::OrderLine as u8)];
    assert!(lines >= d * 30 * 5 && lines <= d * 30 * 15);
    check_consistency(&mut kv, &cfg).unwrap();
    check_customers(&mut kv, &cfg).unwrap();
    // The same seed loads the same bytes.
    assert_eq!(kv.snapshot(), loaded(&cfg, 1).snapshot());
    assert_ne!(kv.snapshot(), loaded(&cfg, 2).snapshot());
}

#[test]
fn mix_runs_and_stays_consistent() {
    let cfg = small();
    let mut kv = loaded(&cfg, 3);
    let mut t = Terminal::new::<std::convert::Infallible>(&cfg, 3, 0, 1).unwrap();
    let mut kinds: BTreeMap<TxnKind, usize> = BTreeMap::new();
    let (mut rollbacks, mut new_orders) = (0, 0);
    let n = 4000;
    for _ in 0..n {
        let out = t.run(&mut kv).unwrap();
        *kinds.entry(out.kind).or_default() += 1;
        match out.kind {
            TxnKind::NewOrder => {
                new_orders += 1;
                if !out.committed {
                    rollbacks += 1;
                    assert_eq!(out.writes, 0);
                } else {
                    assert!(out.writes >= 3 + 2 * 5);
                }
            }
            TxnKind::Payment => assert_eq!(out.writes, 4),
            TxnKind::OrderStatus | TxnKind::StockLevel => {
                assert_eq!(out.writes, 0);
                assert!(out.reads > 0);
            }
            TxnKind::Delivery => assert!(out.committed),
        }
    }
    for (kind, want) in [
        (TxnKind::NewOrder, 0.45),
        (TxnKind::Payment, 0.43),
        (TxnKind::OrderStatus, 0.04),
        (TxnKind::Delivery, 0.04),
        (TxnKind::StockLevel, 0.04),
    ] {
        let got = kinds[&kind] as f64 / n as f64;
        assert!((got - want).abs() < 0.025, "{kind:?}: {got}");
    }
    // 1 % of NewOrders roll back.
    let rb = rollbacks as f64 / new_orders as f64;
    assert!(rb > 0.002 && rb < 0.025, "rollback share {rb}");
    check_consistency(&mut kv, &cfg).unwrap();
    // One thread: no lost updates, so the customer conditions hold too
    // (remote payments and remote stock included).
    check_customers(&mut kv, &cfg).unwrap();
}

#[test]
fn new_order_and_delivery_move_the_district_state() {
    let cfg = small();
    let mut kv = loaded(&cfg, 4);
    let mut t = Terminal::new::<std::convert::Infallible>(&cfg, 4, 0, 1).unwrap();
    let count = |kv: &MemKv, table: Table| {
        kv.snapshot()
            .iter()
            .filter(|(k, _)| k[0] == table as u8)
            .count()
    };
    let orders0 = count(&kv, Table::Order);
    let mut committed = 0;
    for _ in 0..50 {
        if t.run_kind(&mut kv, TxnKind::NewOrder).unwrap().committed {
            committed += 1;
        }
    }
    assert_eq!(count(&kv, Table::Order), orders0 + committed);
    let new0 = count(&kv, Table::NewOrder);
    let out = t.run_kind(&mut kv, TxnKind::Delivery).unwrap();
    // One undelivered order per district of the home warehouse goes.
    assert_eq!(count(&kv, Table::NewOrder), new0 - DISTRICTS as usize);
    assert!(out.writes > 3 * DISTRICTS as usize);
    check_consistency(&mut kv, &cfg).unwrap();
    // Deliver everything: districts run dry and Delivery skips them.
    for _ in 0..200 {
        t.run_kind(&mut kv, TxnKind::Delivery).unwrap();
    }
    let w1_left = kv
        .snapshot()
        .iter()
        .filter(|(k, _)| k[0] == Table::NewOrder as u8 && k[1..3] == 1u16.to_be_bytes())
        .count();
    assert_eq!(w1_left, 0);
    check_consistency(&mut kv, &cfg).unwrap();
}

#[test]
fn same_seed_same_transactions() {
    let cfg = small();
    let run = |seed| {
        let mut kv = loaded(&cfg, 9);
        let mut t = Terminal::new::<std::convert::Infallible>(&cfg, seed, 0, 1).unwrap();
        let outs: Vec<TxnOutcome> = (0..300).map(|_| t.run(&mut kv).unwrap()).collect();
        (outs, kv.snapshot())
    };
    let a = run(5);
    assert_eq!(a, run(5));
    assert_ne!(a.1, run(6).1);
}

#[test]
fn two_threads_own_disjoint_warehouses_and_stay_consistent() {
    let cfg = TpccConfig {
        warehouses: 4,
        ..small()
    };
    let kv = loaded(&cfg, 11);
    std::thread::scope(|s| {
        for th in 0..2u32 {
            let mut kv = kv.clone();
            let cfg = &cfg;
            s.spawn(move || {
                let mut t = Terminal::new::<std::convert::Infallible>(cfg, 11, th, 2).unwrap();
                assert_eq!(t.homes().len(), 2);
                assert!(t.homes().iter().all(|w| (*w as u32 - 1) % 2 == th));
                for _ in 0..800 {
                    t.run(&mut kv).unwrap();
                }
            });
        }
    });
    let mut kv = kv;
    check_consistency(&mut kv, &cfg).unwrap();
}

#[test]
fn two_local_threads_keep_customer_balances() {
    let cfg = TpccConfig {
        warehouses: 2,
        remote: false,
        ..small()
    };
    let kv = loaded(&cfg, 13);
    std::thread::scope(|s| {
        for th in 0..2u32 {
            let mut kv = kv.clone();
            let cfg = &cfg;
            s.spawn(move || {
                let mut t = Terminal::new::<std::convert::Infallible>(cfg, 13, th, 2).unwrap();
                for _ in 0..800 {
                    t.run(&mut kv).unwrap();
                }
            });
        }
    });
    let mut kv = kv;
    check_consistency(&mut kv, &cfg).unwrap();
    check_customers(&mut kv, &cfg).unwrap();
}

#[test]
fn checks_catch_damage() {
    let cfg = small();
    let base = loaded(&cfg, 12);
    let damaged = |f: &dyn Fn(&mut MemKv)| {
        let mut kv = MemKv::new();
        for (k, v) in base.snapshot() {
            kv.put(&k, &v).unwrap();
        }
        f(&mut kv);
        check_consistency(&mut kv, &cfg)
    };
    // W_YTD off by a cent.
    let err = damaged(&|kv| {
        let k = k_warehouse(2);
        let mut row = Vec::new();
        kv.get(k.as_slice(), &mut row).unwrap();
        add_i64(&mut row, w::YTD, 1);
        kv.put(k.as_slice(), &row).unwrap();
    });
    assert!(
        matches!(err, Err(TpccError::Inconsistent { condition: 1, .. })),
        "{err:?}"
    );
    // A new-order row lost from the middle.
    let err = damaged(&|kv| {
        kv.delete(k_new_order(1, 3, 25).as_slice()).unwrap();
    });
    assert!(
        matches!(err, Err(TpccError::Inconsistent { condition: 3, .. })),
        "{err:?}"
    );
    // An order line lost.
    let err = damaged(&|kv| {
        kv.delete(k_order_line(1, 1, 1).u8(1).as_slice()).unwrap();
    });
    assert!(
        matches!(err, Err(TpccError::Inconsistent { condition: 4, .. })),
        "{err:?}"
    );
    // D_NEXT_O_ID advanced without an order.
    let err = damaged(&|kv| {
        let k = k_district(1, 2);
        let mut row = Vec::new();
        kv.get(k.as_slice(), &mut row).unwrap();
        add_u32(&mut row, d::NEXT_O, 1);
        kv.put(k.as_slice(), &row).unwrap();
    });
    assert!(
        matches!(err, Err(TpccError::Inconsistent { condition: 2, .. })),
        "{err:?}"
    );
    // A payment's history row lost.
    let err = damaged(&|kv| {
        let k = k_history(2, 7);
        let mut row = Vec::new();
        assert!(kv.get(k.as_slice(), &mut row).unwrap());
        kv.delete(k.as_slice()).unwrap();
    });
    assert!(
        matches!(err, Err(TpccError::Inconsistent { condition: 9, .. })),
        "{err:?}"
    );
    // A customer's balance off by a cent.
    let mut kv = MemKv::new();
    for (k, v) in base.snapshot() {
        kv.put(&k, &v).unwrap();
    }
    let ck = k_customer(1, 4, 17);
    let mut row = Vec::new();
    kv.get(ck.as_slice(), &mut row).unwrap();
    add_i64(&mut row, c::BALANCE, -1);
    kv.put(ck.as_slice(), &row).unwrap();
    check_consistency(&mut kv, &cfg).unwrap();
    let err = check_customers(&mut kv, &cfg);
    assert!(
        matches!(err, Err(TpccError::Inconsistent { condition: 10, .. })),
        "{err:?}"
    );
    // A truncated row is a typed error, not a panic.
    let err = damaged(&|kv| {
        kv.put(k_warehouse(1).as_slice(), &[1, 2, 3]).unwrap();
    });
    assert!(
        matches!(
            err,
            Err(TpccError::Corrupt {
                table: Table::Warehouse,
                ..
            })
        ),
        "{err:?}"
    );
    // And transactions meet corrupt rows with typed errors too.
    let mut kv = MemKv::new();
    for (k, v) in base.snapshot() {
        let v = if k[0] == Table::District as u8 {
            v[..5].to_vec()
        } else {
            v
        };
        kv.put(&k, &v).unwrap();
    }
    let mut t = Terminal::new::<std::convert::Infallible>(&cfg, 1, 0, 1).unwrap();
    for kind in [TxnKind::NewOrder, TxnKind::Payment, TxnKind::StockLevel] {
        assert!(matches!(
            t.run_kind(&mut kv, kind),
            Err(TpccError::Corrupt { .. })
        ));
    }
}

#[test]
fn bad_configurations_are_typed_errors() {
    let e = Terminal::new::<()>(&small(), 1, 2, 3);
    assert!(matches!(e, Err(TpccError::Config(_))));
    let cfg = TpccConfig {
        warehouses: 0,
        ..small()
    };
    assert!(matches!(
        TpccLoader::new::<()>(&cfg, 1),
        Err(TpccError::Config(_))
    ));
    let cfg = TpccConfig {
        orders_per_district: 31,
        ..small()
    };
    assert!(matches!(
        TpccLoader::new::<()>(&cfg, 1),
        Err(TpccError::Config(_))
    ));
}

#[test]
fn quick_scale_loads_and_runs() {
    let cfg = TpccConfig::quick(1);
    let mut kv = loaded(&cfg, 2);
    let mut t = Terminal::new::<std::convert::Infallible>(&cfg, 2, 0, 1).unwrap();
    for _ in 0..300 {
        t.run(&mut kv).unwrap();
    }
    check_consistency(&mut kv, &cfg).unwrap();
}

/// Load and transaction cost on the reference store (run in release:
/// `cargo test -p ferrite-workload --release --lib tpcc_cost -- --ignored --nocapture`).
#[test]
#[ignore = "timing, not a check"]
fn tpcc_cost() {
    for cfg in [TpccConfig::quick(2), TpccConfig::standard(1)] {
        let t0 = std::time::Instant::now();
        let mut kv = loaded(&cfg, 1);
        let load = t0.elapsed();
        let records = kv.len();
        let mut t = Terminal::new::<std::convert::Infallible>(&cfg, 1, 0, 1).unwrap();
        let n = 20_000;
        let t1 = std::time::Instant::now();
        for _ in 0..n {
            t.run(&mut kv).unwrap();
        }
        let run = t1.elapsed();
        let t2 = std::time::Instant::now();
        check_consistency(&mut kv, &cfg).unwrap();
        println!(
            "{} items, {} customers/district, {} warehouses: {records} records loaded in {:.2} s; \
             {:.0} txn/s on MemKv; check {:.2} s",
            cfg.items,
            cfg.customers_per_district,
            cfg.warehouses,
            load.as_secs_f64(),
            n as f64 / run.as_secs_f64(),
            t2.elapsed().as_secs_f64()
        );
    }
}
