//! A tiny append-then-publish protocol the explorer is proven on, correct and
//! deliberately broken (ARCHITECTURE.md: "the explorer must be shown to fail").
//!
//! On-media layout in the pool's data area:
//! - offset 0: `count` (u64 LE), the number of published records;
//! - offset 64 + 40·i: record i, 40 bytes (so records straddle cache lines),
//!   a deterministic function of i (no checksum: only the protocol protects it).
//!
//! Correct append: write record, persist it (flush + **fence**), then store
//! `count + 1` and persist it. Broken variants: [`Variant::PublishFirst`]
//! persists the count before the record; [`Variant::MissingFence`] flushes the
//! record but omits its fence, so record and count are in flight together.

use crate::explorer::{Config, ExploreError, Explorer, Report};
use ferrite_pmem::{Pool, Region};

const RECORD: usize = 40;
const FIRST: usize = 64;

/// Which protocol to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    Correct,
    PublishFirst,
    MissingFence,
}

fn record(i: u64) -> [u8; RECORD] {
    let mut r = [0u8; RECORD];
    for (j, b) in r.iter_mut().enumerate() {
        *b = (i as u8)
            .wrapping_mul(31)
            .wrapping_add(j as u8)
            .wrapping_add(1);
    }
    r
}

/// Appends record `count` using `variant`.
pub fn append(r: &Region, variant: Variant) {
    let n = r.load_u64(0);
    let off = FIRST + n as usize * RECORD;
    r.write(off, &record(n));
    match variant {
        Variant::Correct => {
            r.persist(off, RECORD);
            r.store_u64_persist(0, n + 1);
        }
        Variant::PublishFirst => {
            r.store_u64_persist(0, n + 1);
            r.persist(off, RECORD);
        }
        Variant::MissingFence => {
            r.flush(off, RECORD);
            r.store_u64_persist(0, n + 1);
        }
    }
}

/// Recovery: the published count, validated against the area's capacity.
pub fn recover(r: &Region) -> Result<u64, String> {
    let n = r.load_u64(0);
    let cap = (r.len() - FIRST) / RECORD;
    if n as usize > cap {
        return Err(format!("count {n} exceeds capacity {cap}"));
    }
    Ok(n)
}

/// Invariant: every acknowledged record is published, at most one more (the
/// append in flight) is, and every published record is intact.
pub fn check(r: &Region, count: u64, acked: u64) -> Result<(), String> {
    if count < acked || count > acked + 1 {
        return Err(format!("{count} records published, {acked} acknowledged"));
    }
    for i in 0..count {
        let got = r.read_vec(FIRST + i as usize * RECORD, RECORD);
        if got != record(i) {
            return Err(format!("published record {i} is torn or missing"));
        }
    }
    Ok(())
}

/// Runs the explorer over `appends` appends of `variant`.
pub fn explore(cfg: Config, variant: Variant, appends: u64) -> Result<Report, ExploreError> {
    Explorer::new(cfg).explore(
        |pool: &Pool, acked: &mut u64| {
            let r = pool.data();
            for _ in 0..appends {
                append(&r, variant);
                *acked += 1;
            }
        },
        |pool| recover(&pool.data()),
        |pool, count, acked| check(&pool.data(), *count, *acked),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_pmem::Domain;

    fn cfg() -> Config {
        Config::new("selftest").budget(600)
    }

    #[test]
    fn correct_protocol_has_no_violations_in_any_domain_or_granularity() {
        for (domain, tearing) in [
            (Domain::Adr, false),
            (Domain::Adr, true),
            (Domain::Eadr, false),
            (Domain::Msync, false),
        ] {
            let c = cfg()
                .domain(domain)
                .tearing(tearing)
                .crash_on_flush(true)
                .crash_on_store(true);
            let rep = explore(c, Variant::Correct, 20).unwrap();
            assert!(rep.ok(), "{domain} tearing={tearing}: {rep}");
            // 20 appends: 40 fences, 40 stores (and 40 flushes where the
            // domain flushes), plus the end; at least one image each.
            assert!(rep.crash_points >= 81, "{domain}: {rep}");
            assert!(rep.states >= rep.crash_points, "{domain}: {rep}");
        }
    }

    #[test]
    fn publishing_first_is_caught() {
        let rep = explore(cfg(), Variant::PublishFirst, 20).unwrap();
        assert!(!rep.ok(), "broken protocol passed: {rep}");
    }

    #[test]
    fn missing_fence_is_caught() {
        let rep = explore(cfg(), Variant::MissingFence, 20).unwrap();
        assert!(!rep.ok(), "broken protocol passed: {rep}");
    }

    #[test]
    fn persist_order_is_irrelevant_under_eadr_but_store_order_is_not() {
        // Under eADR caches are persistent and x86 stores reach them in program
        // order, so both broken *persist* orders are in fact correct …
        let c = || cfg().domain(Domain::Eadr).crash_on_store(true);
        assert!(explore(c(), Variant::MissingFence, 20).unwrap().ok());
        assert!(explore(c(), Variant::PublishFirst, 20).unwrap().ok());
        // … while publishing the count before *storing* the record is caught,
        // but only with crash points between stores.
        let rep = |c: Config| {
            Explorer::new(c)
                .explore(
                    |pool: &Pool, acked: &mut u64| {
                        let r = pool.data();
                        for n in 0..10u64 {
                            r.store_u64(0, n + 1);
                            r.write(FIRST + n as usize * RECORD, &record(n));
                            r.persist(0, 4096);
                            *acked += 1;
                        }
                    },
                    |pool| recover(&pool.data()),
                    |pool, count, acked| check(&pool.data(), *count, *acked),
                )
                .unwrap()
        };
        assert!(!rep(c()).ok(), "store-order bug missed under eADR");
        assert!(
            rep(cfg().domain(Domain::Eadr)).ok(),
            "fence-only crash points cannot see it"
        );
    }

    #[test]
    fn a_violation_replays_from_its_reproducer() {
        let rep = explore(cfg(), Variant::MissingFence, 20).unwrap();
        let v = rep.violations.first().expect("violations").clone();
        let again = explore(cfg().only(Some(v.repro)), Variant::MissingFence, 20).unwrap();
        assert_eq!(again.states, 1);
        assert_eq!(again.violation_count, 1, "{again}");
        assert_eq!(again.violations[0].message, v.message);
    }

    #[test]
    fn recovery_that_is_not_idempotent_is_caught_by_nested_crashes() {
        // Recovery that "repairs" by appending a record each time it runs
        // (persisting twice) is fine once but breaks when crashed midway and
        // rerun: the nested crash finds states with a count past `acked + 1`.
        let rep = Explorer::new(cfg().budget(400))
            .explore(
                |pool: &Pool, acked: &mut u64| {
                    for _ in 0..5 {
                        append(&pool.data(), Variant::Correct);
                        *acked += 1;
                    }
                },
                |pool| {
                    let r = pool.data();
                    let n = recover(&r)?;
                    // Non-idempotent "repair": bump the count by one in two steps.
                    r.store_u64_persist(8, r.load_u64(8) + 1);
                    r.store_u64_persist(16, r.load_u64(16) + 1);
                    Ok(n)
                },
                |pool, count, acked| {
                    check(&pool.data(), *count, *acked)?;
                    let (a, b) = (pool.data().load_u64(8), pool.data().load_u64(16));
                    if a != b {
                        Err(format!("repair counters diverged: {a} vs {b}"))
                    } else {
                        Ok(())
                    }
                },
            )
            .unwrap();
        assert!(rep.nested_states > 0);
        assert!(
            !rep.ok(),
            "nested crash did not expose non-idempotent recovery: {rep}"
        );
    }
}
