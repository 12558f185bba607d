use super::*;
use ferrite_pmem::Domain;

fn cfg(budget: usize) -> Config {
    Config::new("group-check").budget(budget)
}

fn total(reps: &[(String, Report)]) -> (usize, usize) {
    reps.iter().fold((0, 0), |(s, v), (_, r)| {
        (s + r.states, v + r.violation_count)
    })
}

fn show(reps: &[(String, Report)]) -> String {
    reps.iter().map(|(n, r)| format!("{n}: {r}")).collect()
}

#[test]
fn every_group_size_passes_and_spends_the_budget() {
    let budget = 1200;
    let reps = check_fptree_group(cfg(budget)).unwrap();
    assert_eq!(total(&reps), (budget, 0), "{}", show(&reps));
    for g in GROUP_SIZES {
        for run in run_names(g, &cfg(budget)) {
            assert!(reps.iter().any(|(n, _)| *n == run), "{run} missing");
        }
    }
    // Restart images hold half-written slots, so recovery scrubs (fences)
    // and its crashes are explored.
    assert!(
        reps.iter().any(|(_, r)| r.nested_states > 0),
        "{}",
        show(&reps)
    );
}

#[test]
fn tearing_only_and_other_domains_pass() {
    let reps = check_group(16, cfg(300).tearing(true), Fault::None).unwrap();
    assert!(reps.iter().all(|(n, _)| n.contains("/torn")));
    assert_eq!(total(&reps), (300, 0), "{}", show(&reps));
    for g in [1, 16] {
        let c = cfg(200).domain(Domain::Eadr).crash_on_store(true);
        let reps = check_group(g, c, Fault::None).unwrap();
        assert_eq!(total(&reps).1, 0, "{}", show(&reps));
        let reps = check_group(g, cfg(200).domain(Domain::Msync), Fault::None).unwrap();
        assert_eq!(total(&reps).1, 0, "{}", show(&reps));
    }
    assert!(matches!(
        check_group(4, cfg(10).domain(Domain::Volatile), Fault::None),
        Err(GroupCheckError::Explore(ExploreError::Volatile(_)))
    ));
    assert!(matches!(
        check_group(0, cfg(10), Fault::None),
        Err(GroupCheckError::Subject(GroupError::BadGroup(0)))
    ));
}

#[test]
fn every_planted_bug_is_caught_at_every_group_size() {
    for fault in [
        Fault::BitWithSlot,
        Fault::AckBeforeFence,
        Fault::StaleEpoch,
        Fault::NoScrub,
    ] {
        for g in GROUP_SIZES {
            let reps = check_group(g, cfg(600), fault).unwrap();
            let (states, violations) = total(&reps);
            assert!(
                violations > 0,
                "{fault:?} at g={g} passed {states} states:\n{}",
                show(&reps)
            );
        }
    }
}

#[test]
fn the_planted_target_fails_at_every_group_size() {
    let reps = check_fptree_group_fault(cfg(1800), Fault::BitWithSlot).unwrap();
    for g in GROUP_SIZES {
        let v: usize = reps
            .iter()
            .filter(|(n, _)| n.split('/').next() == Some(&format!("g{g}")))
            .map(|(_, r)| r.violation_count)
            .sum();
        assert!(v > 0, "g{g}:\n{}", show(&reps));
    }
}

#[test]
fn the_bit_under_the_slot_fence_is_caught_by_the_invariant_not_the_audit() {
    // The main run alone (no restart images, no audit involvement in the
    // message): a visible slot with a missing key/value line.
    let spec = RunSpec {
        group: 16,
        torn: false,
        store: false,
        restart: None,
    };
    let rep = run_one(spec, &cfg(400), Fault::BitWithSlot).unwrap();
    assert!(!rep.ok(), "{rep}");
    assert!(
        rep.violations
            .iter()
            .any(|v| v.message.contains("half-inserted")
                || v.message.contains("no insert carried")
                // Since fuzzing (fuzz/regressions/fp_leaves/) recovery itself
                // refuses a visible slot whose key is not its leaf's.
                || v.message.contains("recovery failed: leaf")),
        "{rep}"
    );
    // And the acknowledgement before the bit's fence loses inserts.
    let rep = run_one(spec, &cfg(400), Fault::AckBeforeFence).unwrap();
    assert!(
        rep.violations.iter().any(|v| v.message.contains("is lost")),
        "{rep}"
    );
}

#[test]
fn a_violation_replays_from_its_reproducer() {
    let spec = RunSpec {
        group: 4,
        torn: false,
        store: false,
        restart: None,
    };
    let rep = run_one(spec, &cfg(300), Fault::BitWithSlot).unwrap();
    let v = rep.violations.first().expect("violations").clone();
    let again = run_one(spec, &cfg(300).only(Some(v.repro)), Fault::BitWithSlot).unwrap();
    assert_eq!(again.states, 1);
    assert_eq!(again.violation_count, 1, "{again}");
    assert_eq!(again.violations[0].message, v.message);
}

#[test]
fn run_names_parse_back() {
    for name in ["g1", "g16/torn", "g4/store", "g16/torn/store/restart1"] {
        assert_eq!(RunSpec::parse(name).unwrap().name(), name);
    }
    for bad in [
        "g0",
        "g65",
        "x1",
        "g4/what",
        "g4/torn/torn",
        "g4/restart0/restart1",
    ] {
        assert!(RunSpec::parse(bad).is_err(), "{bad}");
    }
    assert!(matches!(
        check_group_run("nope", cfg(1)),
        Err(GroupCheckError::UnknownRun { .. })
    ));
    let rep = check_group_run("g4/torn", cfg(50)).unwrap();
    assert!(rep.ok() && (40..=50).contains(&rep.states), "{rep}");
}
