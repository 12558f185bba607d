//! Crash checks of the cells (feature `checks`): the scenarios behind
//! `ferrite check cell-cow | cell-log | cell-fam`.
//!
//! Workload, per kind and value size: an array of [`CELLS`] cells is
//! formatted (durable before the workload starts), then updated with
//! distinct pseudo-random values, cells chosen pseudo-randomly so cells are
//! updated several times in a row and FAM versions wrap around. The
//! workload always issues [`FENCES`] fences (24 updates of the two-fence
//! kinds, 48 FAM updates), so a reproducer `fence:K/…` names the same
//! point in every value size.
//!
//! Invariant after recovery, for every cell: it reads exactly the value of
//! its last acknowledged update (`update` returned) or, if the crash hit
//! an update of that cell, the value being written — never a mix of the
//! two, never an older value. FAM cells must also be consistent (one
//! version in all blocks) after recovery.
//!
//! Crash model: in `adr` the checks always use 8-byte units (`tearing`),
//! x86's real failure-atomicity guarantee and the one FAM relies on; in the
//! cache-persistent domains they also crash between stores (otherwise no
//! intermediate state is visible). Nested crashes (crashing recovery and
//! recovering again) follow `cfg.nested`, on by default: they are what
//! shows FAM recovery idempotent.
//!
//! Every planted [`Fault`] is caught (see the tests), including
//! [`Fault::FamTwoPhaseRollback`], which only nested crashes can catch.

use super::{
    CellArray, CellError, CellKind, CowCells, FamCells, Fault, LogCells, Recovery, ValueSize,
};
use ferrite_crash::{Config, ExploreError, Explorer, Report};
use ferrite_pmem::{Domain, HEADER_SIZE, PAGE, Pool, Region};

/// Cells in a checked array.
pub const CELLS: usize = 5;
/// Fences the workload issues (with the correct protocols).
pub const FENCES: usize = 48;

/// Explores the correct protocol of `kind` in all four value sizes, the
/// budget split across them (budget a size leaves unused goes to the next).
/// Returns one report per size, named `16B`, `32B`, `48B`, `64B`, then —
/// when budget is left over — reports of the 64-byte workload under the
/// next seeds, named `64B/seed2`, … (their violations print that seed).
/// The states of all reports add up to `cfg.budget` (fewer only when
/// replaying one state with `cfg.only`, which runs each size once).
pub fn check_cell(kind: CellKind, cfg: Config) -> Result<Vec<(String, Report)>, ExploreError> {
    check_sizes(kind, Fault::None, cfg)
}

/// Explores a planted bug in all four value sizes (see [`check_cell`]):
/// every report should carry violations. Empty for [`Fault::None`].
pub fn check_cell_fault(fault: Fault, cfg: Config) -> Result<Vec<(String, Report)>, ExploreError> {
    match fault.kind() {
        Some(kind) => check_sizes(kind, fault, cfg),
        None => Ok(Vec::new()),
    }
}

fn check_sizes(
    kind: CellKind,
    fault: Fault,
    cfg: Config,
) -> Result<Vec<(String, Report)>, ExploreError> {
    let sizes = ValueSize::ALL;
    let mut left = cfg.budget;
    let mut out = Vec::with_capacity(sizes.len());
    for (k, size) in sizes.into_iter().enumerate() {
        let budget = (left / (sizes.len() - k)).max(1);
        let rep = check_size(kind, size, fault, cfg.clone().budget(budget))?;
        left = left.saturating_sub(rep.states);
        out.push((size.to_string(), rep));
    }
    // A run ends short of its budget when its last points have few images
    // (the end of the workload has nothing in flight), and the smallest
    // sizes are explored exhaustively within their share. Spend what is
    // left on the largest size under the next seeds, whose sampled points
    // then draw new images, so a target explores its whole budget (reports
    // named `64B/seed2`, …; a violation's reproducer carries its seed).
    // Not when replaying one state.
    let largest = sizes[sizes.len() - 1];
    let mut round = 0u64;
    while left > 0 && cfg.only.is_none() && round < 16 {
        round += 1;
        let seed = cfg.seed.wrapping_add(round);
        let rep = check_size(kind, largest, fault, cfg.clone().budget(left).seed(seed))?;
        if rep.states == 0 {
            break;
        }
        left = left.saturating_sub(rep.states);
        out.push((format!("{largest}/seed{seed}"), rep));
    }
    Ok(out)
}

/// What the workload saw acknowledged.
#[derive(Default)]
struct Model {
    /// Value of each cell's last acknowledged update (empty: all zero).
    acked: Vec<Vec<u8>>,
    /// The update in flight: (cell, value).
    pending: Option<(usize, Vec<u8>)>,
}

/// An array after recovery, with the FAM cells recovery left torn.
struct Recovered {
    cells: Box<dyn CellArray>,
    torn: Vec<usize>,
}

fn mix(mut x: u64) -> u64 {
    // splitmix64
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The cell written by update `u`.
fn cell_of(u: usize) -> usize {
    (mix(u as u64 ^ 0xCE11) % CELLS as u64) as usize
}

/// The value of update `u`: pseudo-random words, so any two updates differ
/// in every 8-byte word (a test checks it for the workload) and a mix of
/// two values is never equal to either; chunk top bits vary too.
fn value_of(u: usize, size: ValueSize) -> Vec<u8> {
    (0..size.bytes() / 8)
        .flat_map(|w| mix(((u as u64) << 8) | w as u64).to_le_bytes())
        .collect()
}

fn cells_region(pool: &Pool, kind: CellKind, size: ValueSize) -> Region {
    let len = kind.region_len(size, CELLS).expect("small array");
    pool.data().sub(0, len).expect("pool sized for the array")
}

/// Opens (recovers) the array with `fault` planted.
fn open(
    kind: CellKind,
    region: Region,
    fault: Fault,
) -> Result<(Box<dyn CellArray>, Recovery), CellError> {
    Ok(match kind {
        CellKind::Cow => {
            let (mut a, r) = CowCells::recover(region)?;
            a.fault = fault;
            (Box::new(a), r)
        }
        CellKind::Log => {
            let (a, r) = LogCells::recover_with(region, fault)?;
            (Box::new(a), r)
        }
        CellKind::Fam => {
            let (a, r) = FamCells::recover_with(region, fault)?;
            (Box::new(a), r)
        }
    })
}

/// Recovery as the check sees it: recover, then list FAM cells left torn.
fn recover(
    pool: &Pool,
    kind: CellKind,
    size: ValueSize,
    fault: Fault,
) -> Result<Recovered, String> {
    let region = cells_region(pool, kind, size);
    if kind == CellKind::Fam {
        let (a, _) = FamCells::recover_with(region, fault).map_err(|e| e.to_string())?;
        let torn = (0..CELLS)
            .filter(|&i| !a.is_consistent(i).unwrap_or(false))
            .collect();
        return Ok(Recovered {
            cells: Box::new(a),
            torn,
        });
    }
    let (cells, _) = open(kind, region, fault).map_err(|e| e.to_string())?;
    Ok(Recovered {
        cells,
        torn: Vec::new(),
    })
}

fn hex(v: &[u8]) -> String {
    v.iter().map(|b| format!("{b:02x}")).collect()
}

fn check(r: &Recovered, m: &Model, size: ValueSize) -> Result<(), String> {
    if let Some(&i) = r.torn.first() {
        return Err(format!(
            "FAM cell {i} (of cells {:?}) still carries two versions after recovery",
            r.torn
        ));
    }
    let zero = vec![0u8; size.bytes()];
    let mut got = vec![0u8; size.bytes()];
    for c in 0..CELLS {
        r.cells.read(c, &mut got).map_err(|e| e.to_string())?;
        let acked = m.acked.get(c).unwrap_or(&zero);
        let in_flight = m.pending.as_ref().filter(|p| p.0 == c).map(|p| &p.1);
        if &got == acked || in_flight == Some(&got) {
            continue;
        }
        return Err(match in_flight {
            Some(v) => format!(
                "cell {c} reads {} — neither its acknowledged value {} nor the value in flight {}",
                hex(&got),
                hex(acked),
                hex(v)
            ),
            None => format!(
                "cell {c} reads {}, not its acknowledged value {} (no update of it was in flight)",
                hex(&got),
                hex(acked)
            ),
        });
    }
    Ok(())
}

/// The explorer settings a check uses: `cfg`, with the pool sized for the
/// array, 8-byte units in `adr` and crashes between stores where caches
/// are persistent.
pub fn check_config(kind: CellKind, size: ValueSize, cfg: Config) -> Config {
    let len = kind.region_len(size, CELLS).expect("small array");
    let pool = (HEADER_SIZE + len.next_multiple_of(PAGE)).max(2 * HEADER_SIZE);
    let mut c = cfg.pool_size(pool as u64);
    if c.domain == Domain::Adr {
        c = c.tearing(true);
    }
    if c.domain.caches_persistent() {
        c = c.crash_on_store(true);
    }
    c
}

/// Explores one kind, value size and (planted) fault.
pub fn check_size(
    kind: CellKind,
    size: ValueSize,
    fault: Fault,
    cfg: Config,
) -> Result<Report, ExploreError> {
    let updates = FENCES / kind.fences_per_update() as usize;
    Explorer::new(check_config(kind, size, cfg))
        .setup(move |pool| {
            let region = cells_region(pool, kind, size);
            super::format_any(kind, region, size, CELLS).expect("format the checked array");
        })
        .explore(
            move |pool: &Pool, m: &mut Model| {
                let (mut a, _) =
                    open(kind, cells_region(pool, kind, size), fault).expect("open the array");
                m.acked = vec![vec![0u8; size.bytes()]; CELLS];
                for u in 0..updates {
                    let (c, v) = (cell_of(u), value_of(u, size));
                    m.pending = Some((c, v.clone()));
                    a.update(c, &v).expect("update");
                    m.acked[c] = v;
                    m.pending = None;
                }
            },
            move |pool| recover(pool, kind, size, fault),
            move |_pool, r, m| check(r, m, size),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(budget: usize) -> Config {
        Config::new("cells-check").budget(budget)
    }

    #[test]
    fn workload_values_are_distinct_and_cells_repeat() {
        for size in ValueSize::ALL {
            let vals: Vec<Vec<u8>> = (0..48).map(|u| value_of(u, size)).collect();
            for (i, a) in vals.iter().enumerate() {
                for b in &vals[i + 1..] {
                    // Every 8-byte word differs, so any mix is detectable.
                    for (x, y) in a.chunks(8).zip(b.chunks(8)) {
                        assert_ne!(x, y);
                    }
                }
            }
        }
        let mut per_cell = [0; CELLS];
        for u in 0..48 {
            per_cell[cell_of(u)] += 1;
        }
        assert!(
            per_cell.iter().all(|&n| n >= 5),
            "{per_cell:?}: FAM versions wrap"
        );
        assert!(
            (1..24).any(|u| cell_of(u) == cell_of(u - 1)),
            "back-to-back updates"
        );
    }

    #[test]
    fn correct_protocols_pass_in_adr_with_tearing() {
        for kind in CellKind::ALL {
            let reps = check_cell(kind, cfg(2000)).unwrap();
            let states: usize = reps.iter().map(|r| r.1.states).sum();
            for (name, rep) in &reps {
                assert!(rep.ok(), "{kind} {name}: {rep}");
                assert_eq!(rep.fences as usize, FENCES, "{kind} {name}");
            }
            assert_eq!(states, 2000, "{kind}");
            if kind == CellKind::Fam {
                let nested: usize = reps.iter().map(|r| r.1.nested_states).sum();
                assert!(nested > 0, "FAM recovery was never crashed");
            }
        }
    }

    #[test]
    fn correct_protocols_pass_in_eadr_between_stores_and_msync() {
        for kind in CellKind::ALL {
            for domain in [Domain::Eadr, Domain::Msync] {
                let rep =
                    check_size(kind, ValueSize::B32, Fault::None, cfg(150).domain(domain)).unwrap();
                assert!(rep.ok(), "{kind} {domain}: {rep}");
            }
        }
    }

    fn assert_caught(fault: Fault, c: Config) {
        let reps = check_cell_fault(fault, c).unwrap();
        assert!(reps.len() >= 4);
        // The four sizes (top-up rounds are too small to count on).
        for (size, rep) in reps.into_iter().take(4) {
            assert!(
                !rep.ok(),
                "planted {} not caught for {size}: {rep}",
                fault.name()
            );
        }
    }

    #[test]
    fn cow_flipping_the_flag_before_the_copy_is_caught() {
        assert_caught(Fault::CowFlipBeforeCopy, cfg(800));
    }

    #[test]
    fn log_writing_in_place_before_the_entry_is_caught() {
        assert_caught(Fault::LogInPlaceFirst, cfg(800));
    }

    #[test]
    fn log_replaying_without_checksum_is_caught() {
        assert_caught(Fault::LogNoChecksum, cfg(800));
    }

    #[test]
    fn fam_recovery_without_rollback_is_caught() {
        assert_caught(Fault::FamNoRollback, cfg(800));
    }

    #[test]
    fn fam_without_version_bits_is_caught() {
        assert_caught(Fault::FamNoVersion, cfg(800));
    }

    #[test]
    fn fam_two_phase_rollback_is_caught_only_by_nested_crashes() {
        let c = || cfg(1200);
        // One uninterrupted recovery is correct …
        for (size, rep) in check_cell_fault(Fault::FamTwoPhaseRollback, c().nested(false)).unwrap()
        {
            assert!(rep.ok(), "{size}: {rep}");
        }
        // … but crashing between its two fences leaves a mixed cell that
        // looks consistent.
        assert_caught(Fault::FamTwoPhaseRollback, c());
    }

    #[test]
    fn a_violation_replays_from_its_reproducer() {
        let rep = check_size(
            CellKind::Fam,
            ValueSize::B16,
            Fault::FamNoRollback,
            cfg(800),
        )
        .unwrap();
        let v = rep.violations.first().expect("violations").clone();
        let again = check_size(
            CellKind::Fam,
            ValueSize::B16,
            Fault::FamNoRollback,
            cfg(800).only(Some(v.repro)),
        )
        .unwrap();
        assert_eq!((again.states, again.violation_count), (1, 1), "{again}");
        assert_eq!(again.violations[0].message, v.message);
    }
}
