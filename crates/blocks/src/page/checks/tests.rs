use super::*;
use ferrite_pmem::Domain;

fn cfg(budget: usize) -> Config {
    Config::new("page-check").budget(budget)
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
fn every_algorithm_passes_its_crash_check_and_spends_the_budget() {
    for alg in PageAlgorithm::ALL {
        let reps = check_page(alg, cfg(900)).unwrap();
        let (states, violations) = total(&reps);
        assert_eq!(violations, 0, "{alg}:\n{}", show(&reps));
        assert_eq!(states, 900, "{alg}:\n{}", show(&reps));
        for run in run_names(alg, &cfg(900)) {
            assert!(reps.iter().any(|(n, _)| *n == run), "{run} missing");
        }
        // Recovery fences (replay, scrub), so crashing it is explored.
        assert!(reps.iter().any(|(_, r)| r.nested_states > 0), "{alg}");
    }
}

#[test]
fn tearing_only_and_other_domains_pass() {
    let reps = check_page(PageAlgorithm::Hybrid, cfg(300).tearing(true)).unwrap();
    assert!(reps.iter().all(|(n, _)| n.contains("/torn")));
    assert_eq!(total(&reps), (300, 0), "{}", show(&reps));
    for alg in [PageAlgorithm::Cow, PageAlgorithm::MicroLog] {
        let c = cfg(300).domain(Domain::Eadr).crash_on_store(true);
        let reps = check_page(alg, c).unwrap();
        assert_eq!(total(&reps).1, 0, "{}", show(&reps));
        let reps = check_page(alg, cfg(200).domain(Domain::Msync)).unwrap();
        assert_eq!(total(&reps).1, 0, "{}", show(&reps));
    }
    assert!(matches!(
        check_page(PageAlgorithm::Cow, cfg(10).domain(Domain::Volatile)),
        Err(PageCheckError::Explore(ExploreError::Volatile(_)))
    ));
}

/// Each planted bug, and the algorithms it applies to.
const PLANTED: [(Fault, &[PageAlgorithm]); 5] = [
    (
        Fault::CowPublishEarly,
        &[PageAlgorithm::Cow, PageAlgorithm::Hybrid],
    ),
    (
        Fault::MicroLogApplyEarly,
        &[PageAlgorithm::MicroLog, PageAlgorithm::Hybrid],
    ),
    (Fault::MicroLogSamePvn, &[PageAlgorithm::MicroLog]),
    (
        Fault::RecoveryNoReplay,
        &[PageAlgorithm::MicroLog, PageAlgorithm::Hybrid],
    ),
    (
        Fault::RecoveryFirstValid,
        &[PageAlgorithm::Cow, PageAlgorithm::Hybrid],
    ),
];

#[test]
fn every_planted_bug_is_caught() {
    for (fault, algs) in PLANTED {
        for &alg in algs {
            let reps = check_page_with_fault(alg, cfg(2000), fault).unwrap();
            let (states, violations) = total(&reps);
            assert!(
                violations > 0,
                "{alg} with {fault:?} passed {states} crash states:\n{}",
                show(&reps)
            );
        }
    }
}

#[test]
fn a_violation_replays_from_its_run_name_and_reproducer() {
    let reps = check_page_with_fault(PageAlgorithm::Cow, cfg(400), Fault::CowPublishEarly).unwrap();
    let (name, rep) = reps
        .iter()
        .find(|(_, r)| !r.violations.is_empty())
        .expect("a violation");
    let v = rep.violations[0].clone();
    let spec = RunSpec::parse(name).unwrap();
    assert_eq!(spec.name(), *name);
    let again = run_one(
        spec,
        &cfg(400).seed(v.seed).only(Some(v.repro)),
        Fault::CowPublishEarly,
    )
    .unwrap();
    assert_eq!(again.states, 1, "{again}");
    assert_eq!(again.violation_count, 1, "{again}");
    assert_eq!(again.violations[0].message, v.message);
    // The correct protocol passes the same state.
    let ok = check_page_run(name, cfg(400).seed(v.seed).only(Some(v.repro))).unwrap();
    assert!(ok.ok(), "{ok}");
    assert!(check_page_run("cow/8k", cfg(1)).is_err());
    assert!(check_page_run("cow/4k/torn/torn", cfg(1)).is_err());
}
