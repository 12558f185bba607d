//! The registry of `ferrite check` targets: name → crash exploration.
//!
//! Each target splits its budget across the variants it covers and returns
//! one report per variant; the command sums them into the closing line
//! `checked TARGET: <S> crash states, <V> violations`.

use ferrite_blocks::cell::CellKind;
use ferrite_blocks::log::Algorithm;
use ferrite_blocks::page::PageAlgorithm;
use ferrite_crash::selftest::{self, Variant};
use ferrite_crash::{Config, Report};
use ferrite_ds::Structure;
use ferrite_engine::EngineKind;
use ferrite_tx::Strategy;

/// One explored variant of a target.
pub struct Outcome {
    pub variant: String,
    pub report: Report,
}

/// Crash states `ferrite check TARGET` explores without `--budget`: the
/// cache's scenarios (four configurations, two lockstep sessions) get more.
pub fn default_budget(target: &str) -> usize {
    match target {
        "cache" | "cache-planted" => 6000,
        _ => 2000,
    }
}

type Runner = fn(&Config) -> Result<Vec<Outcome>, String>;

/// Every target: (name, what it checks, whether it is expected to pass, runner).
pub const TARGETS: &[(&str, &str, bool, Runner)] = &[
    (
        "selftest",
        "append-then-publish protocol, correct (adr lines, adr 8-byte tearing, eadr, msync)",
        true,
        run_selftest,
    ),
    (
        "selftest-broken",
        "the same protocol publishing before its data is durable, and with a fence missing: must be caught",
        false,
        run_selftest_broken,
    ),
    (
        "log-classic",
        "Classic log (packed, padded): appends, batches, truncation, wrap-around [P0 §3.3]",
        true,
        |c| run_log(Algorithm::Classic, c),
    ),
    (
        "log-header",
        "Header log (packed, padded, dancing size slots) [P0 §3.3]",
        true,
        |c| run_log(Algorithm::Header, c),
    ),
    (
        "log-rawl",
        "RAWL log (packed, padded), 8-byte tearing [P0 §3.3]",
        true,
        |c| run_log(Algorithm::Rawl, c),
    ),
    (
        "log-poplog",
        "PopLog (packed, padded, staged non-temporal) [P0 §3.3]",
        true,
        |c| run_log(Algorithm::PopLog, c),
    ),
    (
        "page-cow",
        "page store, copy-on-write with store-unique page version numbers, 4 and 16 KiB pages [P0 §3.2.2]",
        true,
        |c| run_page(PageAlgorithm::Cow, c),
    ),
    (
        "page-microlog",
        "page store, micro-log of dirty lines then in place [P0 §3.2.3]",
        true,
        |c| run_page(PageAlgorithm::MicroLog, c),
    ),
    (
        "page-hybrid",
        "page store, CoW or micro-log per write by the calibrated crossover [P0 Fig. 7]",
        true,
        |c| run_page(PageAlgorithm::Hybrid, c),
    ),
    (
        "cell-cow",
        "copy-on-write cells (two copies + active flag), 16-64 B [P0 §3.4.1]",
        true,
        |c| run_cell(CellKind::Cow, c),
    ),
    (
        "cell-log",
        "log cells (redo slot, then in place), 16-64 B [P0 §3.4.2]",
        true,
        |c| run_cell(CellKind::Log, c),
    ),
    (
        "cell-fam",
        "FAM cells (versioned 31-bit chunks, one fence), 16-64 B, 8-byte tearing, nested recovery crashes [P0 §3.4.3]",
        true,
        |c| run_cell(CellKind::Fam, c),
    ),
    (
        "fptree-group",
        "FP-Tree leaf inserts interleaved in groups of 1, 4, 16 sharing fences [P0 §3.5]",
        true,
        run_group,
    ),
    (
        "tx-undo-hashmap",
        "undo-logged transactions on the hash map (256 buckets, 8 B keys, 256 B values): random inserts/updates/deletes, nested recovery crashes [P1 ch3]",
        true,
        |c| run_tx(Strategy::Undo, Structure::HashMap, c),
    ),
    (
        "tx-undo-bptree",
        "undo-logged transactions on the B+tree (32 B keys): random inserts/updates/deletes, nested recovery crashes [P1 ch3]",
        true,
        |c| run_tx(Strategy::Undo, Structure::BpTree, c),
    ),
    (
        "tx-undo-skiplist",
        "undo-logged transactions on the skiplist (32 levels): random inserts/updates/deletes, nested recovery crashes [P1 ch3]",
        true,
        |c| run_tx(Strategy::Undo, Structure::SkipList, c),
    ),
    (
        "tx-undo-rbtree",
        "undo-logged transactions on the red-black tree: random inserts/updates/deletes, nested recovery crashes [P1 ch3]",
        true,
        |c| run_tx(Strategy::Undo, Structure::RbTree, c),
    ),
    (
        "tx-redo-hashmap",
        "redo-logged transactions on the hash map (256 buckets, 8 B keys, 256 B values): random inserts/updates/deletes, nested recovery crashes [P1 ch3]",
        true,
        |c| run_tx(Strategy::Redo, Structure::HashMap, c),
    ),
    (
        "tx-redo-bptree",
        "redo-logged transactions on the B+tree (32 B keys): random inserts/updates/deletes, nested recovery crashes [P1 ch3]",
        true,
        |c| run_tx(Strategy::Redo, Structure::BpTree, c),
    ),
    (
        "tx-redo-skiplist",
        "redo-logged transactions on the skiplist (32 levels): random inserts/updates/deletes, nested recovery crashes [P1 ch3]",
        true,
        |c| run_tx(Strategy::Redo, Structure::SkipList, c),
    ),
    (
        "tx-redo-rbtree",
        "redo-logged transactions on the red-black tree: random inserts/updates/deletes, nested recovery crashes [P1 ch3]",
        true,
        |c| run_tx(Strategy::Redo, Structure::RbTree, c),
    ),
    (
        "tx-clobber-hashmap",
        "clobber-logged transactions on the hash map (256 buckets, 8 B keys, 256 B values): random inserts/updates/deletes, nested recovery crashes [P1 ch3]",
        true,
        |c| run_tx(Strategy::Clobber, Structure::HashMap, c),
    ),
    (
        "tx-clobber-bptree",
        "clobber-logged transactions on the B+tree (32 B keys): random inserts/updates/deletes, nested recovery crashes [P1 ch3]",
        true,
        |c| run_tx(Strategy::Clobber, Structure::BpTree, c),
    ),
    (
        "tx-clobber-skiplist",
        "clobber-logged transactions on the skiplist (32 levels): random inserts/updates/deletes, nested recovery crashes [P1 ch3]",
        true,
        |c| run_tx(Strategy::Clobber, Structure::SkipList, c),
    ),
    (
        "tx-clobber-rbtree",
        "clobber-logged transactions on the red-black tree: random inserts/updates/deletes, nested recovery crashes [P1 ch3]",
        true,
        |c| run_tx(Strategy::Clobber, Structure::RbTree, c),
    ),
    (
        "bytemap-undo",
        "undo-logged batches on the byte map (the server's tx-undo store: byte keys, values of any length, doublings): nested recovery crashes, tearing",
        true,
        |c| run_bytemap(Strategy::Undo, c),
    ),
    (
        "bytemap-redo",
        "redo-logged batches on the byte map (the server's tx-redo store): nested recovery crashes, tearing",
        true,
        |c| run_bytemap(Strategy::Redo, c),
    ),
    (
        "bytemap-clobber",
        "clobber-logged batches on the byte map (the server's tx-clobber store): nested recovery crashes, tearing [P1 §3.4.6]",
        true,
        |c| run_bytemap(Strategy::Clobber, c),
    ),
    (
        "engine-inp",
        "InP engine (in-place tuples, write-ahead log, persistent B+tree): puts, deletes, batches, scans; both allocators, tearing, 2 lockstep sessions, eadr [P2 §3]",
        true,
        |c| run_engine(EngineKind::Inp, c),
    ),
    (
        "engine-cow",
        "CoW engine (shadow-paged B+tree, atomic root switch, group commit): puts, deletes, batches, scans; both allocators, tearing, 2 lockstep sessions, eadr [P2 §3]",
        true,
        |c| run_engine(EngineKind::Cow, c),
    ),
    (
        "engine-lsm",
        "LSM engine (persistent memtable log, sorted runs, compaction): puts, deletes, batches, flushes, compactions; both allocators, tearing, 2 lockstep sessions, eadr [P2 §3]",
        true,
        |c| run_engine(EngineKind::Lsm, c),
    ),
    (
        "engine-planted",
        "every engine with each of its planted bugs: each must be caught",
        false,
        run_engine_planted,
    ),
    (
        "ptm-eager",
        "orec-eager PTM (encounter-time locking, undo log): bank transfers, counters, alloc/free lists; adr, adr tearing, 2 lockstep threads with conflicts and aborts, eadr, pdram, pdram-lite with its power-fail rule, nested recovery crashes [P3]",
        true,
        |c| run_ptm(ferrite_ptm::Algorithm::Eager, c),
    ),
    (
        "ptm-lazy",
        "orec-lazy PTM (commit-time locking, redo log): the same workload and runs [P3]",
        true,
        |c| run_ptm(ferrite_ptm::Algorithm::Lazy, c),
    ),
    (
        "ptm-workloads",
        "P3's workloads on both PTMs at tiny scale (TATP, TPC-C New-Order on the hash map and the B+tree, B+tree insert and mixed, Vacation high and low): crashes in 1 thread (adr, eadr) and 2 lockstep threads; each workload's invariants after recovery [P3]",
        true,
        run_ptm_workloads,
    ),
    (
        "ptm-planted",
        "both PTMs with each planted bug (missing undo fence, commit before data, write-back before the log, release before applied, new blocks outside the checksum, skipped recovery) and P3's fence removal: each must be caught",
        false,
        run_ptm_planted,
    ),
    (
        "cache",
        "Persistron page cache [P1 ch5]: bank transfers as inferred CoW transactions with page allocation, over a 14-slot persistent tier, 2 DRAM frames and a simulated disk (unsynced pages lost or torn); crashes in commit, page-in, write-back, eviction, DRAM migration; 2 lockstep sessions and 1 (adr, adr tearing, eadr), nested recovery crashes; and the LSM-shaped store on it (puts, flushes, compaction) from 2 lockstep sessions and 1",
        true,
        run_cache,
    ),
    (
        "cache-planted",
        "the cache with each planted bug (commit before the copy is durable, early lock release, eviction freeing a slot before its page is on disk and synced) and the store with one (a flush empties the memtable in a transaction before the one linking its branch): each must be caught",
        false,
        run_cache_planted,
    ),
    (
        "server-items",
        "the server's items (CRC32C per item) over its tx-undo, tx-redo and tx-clobber stores: sets, appends, incr, touch, deletes, alone and in group commits; after every crash no item fails its checksum and the contents are the acknowledged requests plus the one in flight whole or not at all",
        true,
        run_server_items,
    ),
    (
        "server-items-planted",
        "the server's items with the checksum written in a durable write after the item's (as if computed after its fence): must be caught",
        false,
        run_server_items_planted,
    ),
    (
        "alloc",
        "persistent allocators (Ferrite heap, single-lock heap): reserve/publish/free/cancel from 3 simulated threads [P2 §2.2]",
        true,
        run_alloc,
    ),
];

fn run_engine(kind: EngineKind, cfg: &Config) -> Result<Vec<Outcome>, String> {
    let runs =
        ferrite_engine::checks::check_engine(kind, cfg.clone()).map_err(|e| e.to_string())?;
    Ok(runs
        .into_iter()
        .map(|(variant, report)| Outcome { variant, report })
        .collect())
}

/// Every run of every planted bug: each bug must show violations in some run.
fn run_engine_planted(cfg: &Config) -> Result<Vec<Outcome>, String> {
    let faults: Vec<_> = EngineKind::ALL
        .into_iter()
        .flat_map(|k| {
            ferrite_engine::checks::planted_faults(k)
                .into_iter()
                .map(move |f| (k, f))
        })
        .collect();
    let mut out = Vec::new();
    for &(kind, fault) in &faults {
        let runs =
            ferrite_engine::checks::check_engine_fault(kind, split(cfg, faults.len()), fault)
                .map_err(|e| e.to_string())?;
        for (run, report) in runs {
            out.push(Outcome {
                variant: format!("{kind}-{fault:?}/{run}"),
                report,
            });
        }
    }
    Ok(out)
}

fn run_cache(cfg: &Config) -> Result<Vec<Outcome>, String> {
    let runs = ferrite_cache::checks::check_cache(cfg).map_err(|e| e.to_string())?;
    Ok(runs
        .into_iter()
        .map(|(variant, report)| Outcome { variant, report })
        .collect())
}

/// A check's runs: (scenario, report).
type Runs = Vec<(String, Report)>;

/// Runs a planted bug's check on its `share` of the budget; one not caught
/// in it is explored again with twice the budget, up to 16 times the share
/// (at least 4000 states): some bugs need a crash at one of a few fences,
/// and a small --budget (a quick report's) must not report a bug as
/// uncaught that a few thousand states catch. A replay (`--at`) runs once.
/// Returns the last runs, their crash states and their violations.
fn until_caught(
    mut share: Config,
    mut check: impl FnMut(&Config) -> Result<Runs, String>,
) -> Result<(Runs, usize, usize), String> {
    let cap = (share.budget * 16).max(4000);
    loop {
        let runs = check(&share)?;
        let (states, caught) = runs.iter().fold((0, 0), |(s, v), (_, r)| {
            (s + r.states, v + r.violation_count)
        });
        if caught > 0 || share.budget >= cap || share.only.is_some() {
            return Ok((runs, states, caught));
        }
        let b = share.budget * 2;
        share = share.budget(b);
    }
}

/// Each planted bug gets an equal share of the budget and must show
/// violations in it.
fn run_cache_planted(cfg: &Config) -> Result<Vec<Outcome>, String> {
    let faults = ferrite_cache::checks::PLANTED;
    let store_faults = ferrite_cache::checks::STORE_PLANTED;
    let n = faults.len() + store_faults.len();
    let mut out = Vec::new();
    for f in store_faults {
        planted_runs(
            cfg,
            n,
            "planted store bug",
            format!("{f:?}"),
            &mut out,
            |c| ferrite_cache::checks::check_store(c, Some(f)),
        )?;
    }
    for f in faults {
        planted_runs(cfg, n, "planted bug", format!("{f:?}"), &mut out, |c| {
            ferrite_cache::checks::check_fault(c, Some(f))
        })?;
    }
    Ok(out)
}

/// Runs one planted bug's check on its share (1/`n`) of the budget until
/// it is caught, and adds its runs to `out` as `<bug>/<run>`. Not caught
/// within the cap is an error naming `kind` and `bug`.
fn planted_runs<E: std::fmt::Display>(
    cfg: &Config,
    n: usize,
    kind: &str,
    bug: String,
    out: &mut Vec<Outcome>,
    mut check: impl FnMut(&Config) -> Result<Runs, E>,
) -> Result<(), String> {
    let (runs, states, caught) =
        until_caught(split(cfg, n), |c| check(c).map_err(|e| e.to_string()))?;
    if caught == 0 && cfg.only.is_none() {
        return Err(format!(
            "{kind} {bug} was not caught in {states} crash states (raise --budget)"
        ));
    }
    for (run, report) in runs {
        out.push(Outcome {
            variant: format!("{bug}/{run}"),
            report,
        });
    }
    Ok(())
}

fn run_ptm(alg: ferrite_ptm::Algorithm, cfg: &Config) -> Result<Vec<Outcome>, String> {
    let runs = ferrite_ptm::checks::check_ptm(alg, cfg.clone()).map_err(|e| e.to_string())?;
    Ok(runs
        .into_iter()
        .map(|(variant, report)| Outcome { variant, report })
        .collect())
}

fn run_ptm_workloads(cfg: &Config) -> Result<Vec<Outcome>, String> {
    use ferrite_ptm::Algorithm;
    use ferrite_ptm::workloads::WorkloadKind;
    let n = WorkloadKind::ALL.len() * Algorithm::ALL.len();
    let mut out = Vec::new();
    for kind in WorkloadKind::ALL {
        for alg in Algorithm::ALL {
            let runs = ferrite_ptm::checks::check_workload(kind, alg, split(cfg, n))
                .map_err(|e| e.to_string())?;
            out.extend(runs.into_iter().map(|(variant, report)| Outcome {
                variant: format!("{alg}/{variant}"),
                report,
            }));
        }
    }
    Ok(out)
}

/// Every planted bug of both PTMs; fails if one is not caught.
fn run_ptm_planted(cfg: &Config) -> Result<Vec<Outcome>, String> {
    use ferrite_ptm::Algorithm;
    let all: Vec<_> = Algorithm::ALL
        .into_iter()
        .flat_map(|a| {
            ferrite_ptm::checks::planted(a)
                .into_iter()
                .map(move |p| (a, p))
        })
        .collect();
    let mut out = Vec::new();
    for (alg, (name, fault, fence_removal)) in &all {
        planted_runs(
            cfg,
            all.len(),
            "planted bug",
            format!("{alg}-{name}"),
            &mut out,
            |c| ferrite_ptm::checks::check_ptm_fault(*alg, c.clone(), *fault, *fence_removal),
        )?;
    }
    Ok(out)
}

fn run_alloc(cfg: &Config) -> Result<Vec<Outcome>, String> {
    let runs = ferrite_alloc::checks::check_alloc(cfg.clone()).map_err(|e| e.to_string())?;
    Ok(runs
        .into_iter()
        .map(|(variant, report)| Outcome { variant, report })
        .collect())
}

fn run_page(alg: PageAlgorithm, cfg: &Config) -> Result<Vec<Outcome>, String> {
    let runs = ferrite_blocks::checks::check_page(alg, cfg.clone()).map_err(|e| e.to_string())?;
    Ok(runs
        .into_iter()
        .map(|(variant, report)| Outcome { variant, report })
        .collect())
}

fn run_group(cfg: &Config) -> Result<Vec<Outcome>, String> {
    let runs = ferrite_blocks::group::checks::check_fptree_group(cfg.clone())
        .map_err(|e| e.to_string())?;
    Ok(runs
        .into_iter()
        .map(|(variant, report)| Outcome { variant, report })
        .collect())
}

fn run_tx(strategy: Strategy, s: Structure, cfg: &Config) -> Result<Vec<Outcome>, String> {
    let runs = ferrite_ds::checks::check_tx(strategy, s, cfg.clone()).map_err(|e| e.to_string())?;
    Ok(runs
        .into_iter()
        .map(|(variant, report)| Outcome { variant, report })
        .collect())
}

fn run_bytemap(strategy: Strategy, cfg: &Config) -> Result<Vec<Outcome>, String> {
    let runs = ferrite_ds::checks::bytemap::check_bytemap(strategy, cfg.clone())
        .map_err(|e| e.to_string())?;
    Ok(runs
        .into_iter()
        .map(|(variant, report)| Outcome { variant, report })
        .collect())
}

fn run_cell(kind: CellKind, cfg: &Config) -> Result<Vec<Outcome>, String> {
    let runs = ferrite_blocks::checks::check_cell(kind, cfg.clone()).map_err(|e| e.to_string())?;
    Ok(runs
        .into_iter()
        .map(|(variant, report)| Outcome { variant, report })
        .collect())
}

fn run_log(alg: Algorithm, cfg: &Config) -> Result<Vec<Outcome>, String> {
    let runs = ferrite_blocks::checks::check_log(alg, cfg.clone()).map_err(|e| e.to_string())?;
    Ok(runs
        .into_iter()
        .map(|(variant, report)| Outcome { variant, report })
        .collect())
}

fn run_server_items(cfg: &Config) -> Result<Vec<Outcome>, String> {
    let mut out = Vec::new();
    for strategy in Strategy::LOGGED {
        let runs =
            ferrite_server::checks::check_items(strategy, split(cfg, Strategy::LOGGED.len()))
                .map_err(|e| e.to_string())?;
        out.extend(
            runs.into_iter()
                .map(|(variant, report)| Outcome { variant, report }),
        );
    }
    Ok(out)
}

/// Every planted item bug on every logged strategy; fails if one is not
/// caught.
fn run_server_items_planted(cfg: &Config) -> Result<Vec<Outcome>, String> {
    let all: Vec<_> = ferrite_server::checks::PLANTED
        .into_iter()
        .flat_map(|f| Strategy::LOGGED.into_iter().map(move |s| (f, s)))
        .collect();
    let mut out = Vec::new();
    for &(fault, strategy) in &all {
        planted_runs(
            cfg,
            all.len(),
            "planted bug",
            format!("{fault:?}-tx-{strategy}"),
            &mut out,
            |c| ferrite_server::checks::check_items_fault(strategy, c.clone(), fault),
        )?;
    }
    Ok(out)
}

/// Budget per variant when a target covers `n` variants.
pub fn split(cfg: &Config, n: usize) -> Config {
    let mut c = cfg.clone();
    c.budget = (cfg.budget / n.max(1)).max(1);
    c
}

fn explore_selftest(name: &str, cfg: Config, v: Variant) -> Result<Outcome, String> {
    let report = selftest::explore(cfg, v, 150).map_err(|e| e.to_string())?;
    Ok(Outcome {
        variant: name.to_string(),
        report,
    })
}

fn run_selftest(cfg: &Config) -> Result<Vec<Outcome>, String> {
    use ferrite_pmem::Domain;
    // The domain is part of what the target covers unless the user chose one.
    let variants: Vec<(String, Config)> = if cfg.domain != Domain::Adr || cfg.tearing {
        vec![(
            format!(
                "{}{}",
                cfg.domain,
                if cfg.tearing { "-tearing" } else { "" }
            ),
            cfg.clone(),
        )]
    } else {
        vec![
            ("adr".into(), cfg.clone()),
            ("adr-tearing".into(), cfg.clone().tearing(true)),
            (
                "eadr".into(),
                cfg.clone().domain(Domain::Eadr).crash_on_store(true),
            ),
            ("msync".into(), cfg.clone().domain(Domain::Msync)),
        ]
    };
    let n = variants.len();
    variants
        .into_iter()
        .map(|(name, c)| {
            let mut c = split(&c, n);
            if cfg.only.is_some() {
                c.only = cfg.only;
            }
            explore_selftest(&name, c, Variant::Correct)
        })
        .collect()
}

fn run_selftest_broken(cfg: &Config) -> Result<Vec<Outcome>, String> {
    Ok(vec![
        explore_selftest("publish-first", split(cfg, 2), Variant::PublishFirst)?,
        explore_selftest("missing-fence", split(cfg, 2), Variant::MissingFence)?,
    ])
}
