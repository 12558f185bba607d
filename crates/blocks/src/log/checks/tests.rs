use super::*;
use crate::log::Algorithm;
use ferrite_pmem::Domain;

fn cfg(budget: usize) -> Config {
    Config::new("log-check").budget(budget)
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
    for alg in Algorithm::ALL {
        let budget = 300 * alg.variants().len();
        let reps = check_log(alg, cfg(budget)).unwrap();
        let (states, violations) = total(&reps);
        assert_eq!(violations, 0, "{alg}:\n{}", show(&reps));
        assert_eq!(states, budget, "{alg}:\n{}", show(&reps));
        for &v in alg.variants() {
            for run in run_names(v, &cfg(budget)) {
                assert!(reps.iter().any(|(n, _)| *n == run), "{run} missing");
            }
        }
        if matches!(alg, Algorithm::Rawl | Algorithm::PopLog) {
            // Their recovery writes (the scrub), so crashing it is explored.
            assert!(reps.iter().any(|(_, r)| r.nested_states > 0), "{alg}");
        }
    }
}

#[test]
fn tearing_only_and_cache_persistent_domains_pass() {
    let reps = check_log(Algorithm::PopLog, cfg(600).tearing(true)).unwrap();
    assert!(reps.iter().all(|(n, _)| n.contains("/torn")));
    assert_eq!(total(&reps), (600, 0), "{}", show(&reps));
    for alg in [Algorithm::Header, Algorithm::Rawl] {
        let c = cfg(400).domain(Domain::Eadr).crash_on_store(true);
        let reps = check_log(alg, c).unwrap();
        assert_eq!(total(&reps).1, 0, "{}", show(&reps));
        let c = cfg(300).domain(Domain::Msync);
        assert_eq!(total(&check_log(alg, c).unwrap()).1, 0);
    }
    assert!(matches!(
        check_log(Algorithm::Classic, cfg(10).domain(Domain::Volatile)),
        Err(CheckError::Explore(ExploreError::Volatile(_)))
    ));
}

/// Each planted bug, and the variants it applies to.
const PLANTED: [(Fault, &[Variant]); 7] = [
    (
        Fault::ClassicNoFirstFence,
        &[Variant::CLASSIC_PACKED, Variant::CLASSIC_PADDED],
    ),
    (
        Fault::HeaderPublishFirst,
        &[
            Variant::HEADER_PACKED,
            Variant::HEADER_PADDED,
            Variant::HEADER_DANCING,
        ],
    ),
    (
        Fault::RawlNoValidityCheck,
        &[Variant::RAWL_PACKED, Variant::RAWL_PADDED],
    ),
    (
        Fault::RawlNoFlip,
        &[Variant::RAWL_PACKED, Variant::RAWL_PADDED],
    ),
    (
        Fault::RawlNoScrub,
        &[Variant::RAWL_PACKED, Variant::RAWL_PADDED],
    ),
    (
        Fault::PopLogNoPopcountCheck,
        &[
            Variant::POPLOG_PACKED,
            Variant::POPLOG_PADDED,
            Variant::POPLOG_STAGED,
        ],
    ),
    (
        Fault::PopLogNoScrub,
        &[
            Variant::POPLOG_PACKED,
            Variant::POPLOG_PADDED,
            Variant::POPLOG_STAGED,
        ],
    ),
];

#[test]
fn every_planted_bug_is_caught() {
    for (fault, variants) in PLANTED {
        for &v in variants {
            let reps = check_variant(v, cfg(1000), fault).unwrap();
            let (states, violations) = total(&reps);
            assert!(
                violations > 0,
                "{v} with {fault:?} passed {states} crash states:\n{}",
                show(&reps)
            );
        }
    }
}

#[test]
fn scrub_bugs_show_up_as_torn_records_after_a_restart() {
    // The free-space audit catches a missing scrub at once; without it the
    // restart runs must still catch the consequence: a record that a later
    // append left half-written, completed by the leftovers of an earlier one.
    for (v, fault) in [
        (Variant::RAWL_PACKED, Fault::RawlNoScrub),
        (Variant::POPLOG_PACKED, Fault::PopLogNoScrub),
    ] {
        let mut found = Vec::new();
        for torn in [false, true] {
            for r in 0..8 {
                let spec = RunSpec {
                    variant: v,
                    torn,
                    store: false,
                    restart: Some(r),
                };
                let rep = run_one_audited(spec, &cfg(400), fault, false).unwrap();
                found.extend(rep.violations.into_iter().map(|x| x.message));
                // The same states pass without the bug.
                let ok = run_one_audited(spec, &cfg(400), Fault::None, false).unwrap();
                assert!(ok.ok(), "{ok}");
            }
        }
        assert!(
            found.iter().any(|m| m.contains("torn")),
            "{v} {fault:?}: {found:?}"
        );
    }
}

#[test]
fn a_violation_replays_from_its_run_name_and_reproducer() {
    let fault = Fault::PopLogNoPopcountCheck;
    let reps = check_variant(Variant::POPLOG_PACKED, cfg(1000), fault).unwrap();
    let (name, v) = reps
        .iter()
        .find_map(|(n, r)| r.violations.first().map(|v| (n.clone(), v.clone())))
        .expect("a violation");
    let spec = RunSpec::parse(&name).unwrap();
    assert_eq!(spec.name(), name);
    let again = run_one(spec, &cfg(1000).seed(v.seed).only(Some(v.repro)), fault).unwrap();
    assert_eq!((again.states, again.violation_count), (1, 1), "{again}");
    assert_eq!(again.violations[0].message, v.message);
    // Without the bug, the same state is fine.
    let fixed = check_run(&name, cfg(1000).seed(v.seed).only(Some(v.repro))).unwrap();
    assert!(fixed.ok(), "{fixed}");
}

#[test]
fn run_names_round_trip() {
    for n in [
        "classic-packed",
        "header-dancing/torn",
        "poplog-staged/torn/store",
        "rawl-padded/restart1",
        "poplog-padded/torn/restart0",
    ] {
        assert_eq!(RunSpec::parse(n).unwrap().name(), n);
    }
    for bad in [
        "",
        "poplog",
        "poplog-packed/sideways",
        "rawl-packed/restartX",
        // A repeated modifier is refused (it used to replace the first
        // restart), as in every check (`ferrite_crash::harness`).
        "rawl-packed/torn/torn",
        "rawl-packed/restart0/restart1",
    ] {
        assert!(RunSpec::parse(bad).is_err(), "{bad}");
    }
    assert!(matches!(
        check_run("nope", cfg(10)),
        Err(CheckError::UnknownRun { .. })
    ));
    let e = check_run("rawl-packed/restart0/restart1", cfg(10)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown check run 'rawl-packed/restart0/restart1': modifier 'restartN' given twice \
         (expected VARIANT[/torn][/store][/restartN])"
    );
    assert_eq!(run_names(Variant::RAWL_PACKED, &cfg(10)).len(), 6);
    assert_eq!(
        run_names(Variant::RAWL_PACKED, &cfg(10).tearing(true)).len(),
        3
    );
}

#[test]
fn records_vary_by_incarnation() {
    let lens: std::collections::HashSet<usize> = (1..200).map(|l| record(l, 0).len()).collect();
    assert!(lens.len() > 15, "sizes vary: {lens:?}");
    assert!(lens.iter().any(|l| l % 8 != 0) && lens.iter().any(|l| *l > 128));
    let differ = (1..100).filter(|&l| record(l, 0) != record(l, 1)).count();
    assert!(differ >= 95);
}

/// `B=5000 SEEDS=1 D=0|1|2 STORE=0|1 FLUSH=0|1 cargo test --release -p
/// ferrite-blocks --lib stress -- --ignored --nocapture`: every target at a
/// given budget, with timings.
#[test]
#[ignore]
fn stress() {
    let env = |k: &str, d: u64| std::env::var(k).map_or(d, |v| v.parse().unwrap());
    let domain = match env("D", 0) {
        0 => Domain::Adr,
        1 => Domain::Eadr,
        _ => Domain::Msync,
    };
    for seed in 1..=env("SEEDS", 1) {
        for alg in Algorithm::ALL {
            let c = cfg(env("B", 5000) as usize)
                .seed(seed)
                .domain(domain)
                .crash_on_store(env("STORE", 0) == 1)
                .crash_on_flush(env("FLUSH", 0) == 1);
            let t = std::time::Instant::now();
            let reps = check_log(alg, c).unwrap();
            let (s, v) = total(&reps);
            eprintln!(
                "checked log-{alg} (seed {seed}): {s} crash states, {v} violations, {:.2?}",
                t.elapsed()
            );
            assert_eq!(v, 0, "{}", show(&reps));
        }
    }
}
