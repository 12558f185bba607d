//! Crash checks of the logs, run through the `ferrite-crash` explorer
//! (feature `checks`; also compiled for this crate's tests).
//!
//! [`check_log`] checks every variant of one algorithm; [`check_variant`]
//! one variant, optionally with a planted bug; [`check_run`] replays one
//! named run (the names appear in the returned reports).
//!
//! Each variant is explored in several *runs*, the budget split between them:
//!
//! - **main**: a fresh log in a small data area (1.5 KiB, so it wraps many
//!   times) gets single appends of 0–250 bytes (sizes around multiples of 8
//!   and of 64, entries crossing lines and the ring's end), batches of 2–5
//!   records, truncations, a record that is too large (refused), and
//!   truncation to make room when the log is full.
//! - **restart**: the main workload is crashed at a fence, a post-crash image
//!   is picked at random (so it usually holds half-written entries), and the
//!   explored workload recovers it and goes on appending records with
//!   different content and lengths. This is what shows that recovery
//!   leaves nothing behind that a later append could be completed by.
//! - each of these line-granular and in tearing mode (8-byte units),
//!   unless the configuration already asks for tearing.
//! - what the runs leave of the budget (recovery without fences has no
//!   nested crashes; small crash states are enumerated exhaustively) is
//!   spent on extra main runs with new seeds that also crash between stores.
//!
//! The invariant after every recovery (and after crashed recoveries —
//! nested crashes are on unless the configuration turns them off):
//! - every record whose append returned is present and intact;
//! - no record is torn or invented: each one returned is byte-for-byte the
//!   record appended with that LSN, and none has an LSN never handed out;
//! - records come back with consecutive LSNs, in order;
//! - the log starts exactly at the last completed truncation, or at one in
//!   flight — truncated records never reappear;
//! - the free space is safe to reuse (PopLog: zero; RAWL: no valid bit).

use super::{Fault, Log, LogError, LogOptions, Lsn, Variant};
use ferrite_crash::{
    CheckSubject, Config, CrashAt, ExploreError, Explorer, Report, RunMods, SimRun, SpecError,
    failed_restart, spend_budget,
};
use ferrite_pmem::{HEADER_SIZE, Pool, PoolOptions, Region};

/// Size of the simulated pool every check uses (the configuration's is
/// overridden: images are copied for every crash state, and the log must be
/// small to wrap).
pub const CHECK_POOL_SIZE: u64 = 16 * 1024;
/// Data-area bytes of the log under test.
pub const CHECK_CAPACITY: usize = 1536;
const NONCE: u64 = 0x5eed_1095_f00d_cafe;
const MAIN_SCRIPT: u64 = 0x6d61_696e;
const RESTART_SCRIPT: u64 = 0x7265_7374;
const MAIN_STEPS: usize = 56;
const RESTART_STEPS: usize = 16;
/// Restart runs per mode (each from a different crash image).
const RESTARTS: u32 = 2;
/// Most extra runs spent on a leftover budget.
const MAX_EXTRA: u64 = 8;

/// Why a check could not run (a violation is not an error: it is in the
/// report): the shared [`ferrite_crash::CheckError`] with the log's errors.
pub type CheckError = ferrite_crash::CheckError<LogError>;

impl CheckSubject for LogError {
    const WHAT: &'static str = "log";
    const RUNS: &'static str = "VARIANT[/torn][/store][/restartN]";
}

// ---- deterministic records -------------------------------------------------------

const SIZES: [usize; 24] = [
    0, 1, 3, 7, 8, 9, 15, 16, 17, 24, 31, 40, 48, 55, 56, 63, 64, 65, 100, 127, 128, 129, 200, 250,
];

/// splitmix64: cheap, well-mixed, and needs no dependency.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The record appended with `lsn` in incarnation `inc` (0 before the crash a
/// restart run recovers from, 1 after): a re-appended LSN gets another
/// length and other bytes, so leftovers of the first attempt cannot pass
/// for the second.
fn record(lsn: u64, inc: u64) -> Vec<u8> {
    let seed = mix(lsn ^ inc.wrapping_mul(0xa076_1d64_78bd_642f));
    let len = SIZES[(seed % SIZES.len() as u64) as usize];
    (0..len)
        .map(|i| (mix(seed ^ (i as u64 / 8)) >> (8 * (i % 8))) as u8)
        .collect()
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Append,
    Batch(u64),
    /// Truncate, keeping at most this many records.
    Truncate(u64),
    TooLarge,
}

fn script(seed: u64, steps: usize) -> Vec<Op> {
    let mut s = seed;
    (0..steps)
        .map(|_| {
            s = mix(s);
            match s % 16 {
                0..=8 => Op::Append,
                9..=11 => Op::Batch(2 + (s >> 8) % 4),
                12..=13 => Op::Truncate((s >> 8) % 4),
                14 => Op::TooLarge,
                _ => Op::Append,
            }
        })
        .collect()
}

// ---- the model: what the workload saw acknowledged ----------------------------------

#[derive(Clone, Copy, Debug, Default)]
struct Model {
    /// Every LSN below this was acknowledged.
    acked: u64,
    /// No LSN at or above this was ever handed to an append.
    started: u64,
    /// Last truncation that returned: the log must start at or after it …
    trunc_done: u64,
    /// … and at or before the one in flight (or the last done).
    trunc_pending: u64,
    /// LSNs from here on were appended in incarnation 1.
    inc_from: u64,
}

impl Model {
    fn fresh() -> Model {
        Model {
            acked: 1,
            started: 1,
            trunc_done: 1,
            trunc_pending: 1,
            inc_from: u64::MAX,
        }
    }

    /// The state a restart run starts from: the log as recovered.
    fn recovered(log: &Log) -> Model {
        let (first, next) = (log.first_lsn().0, log.next_lsn().0);
        Model {
            acked: next,
            started: next,
            trunc_done: first,
            trunc_pending: first,
            inc_from: next,
        }
    }

    fn inc(&self, lsn: u64) -> u64 {
        u64::from(lsn >= self.inc_from)
    }
}

fn truncate(log: &mut Log, m: &mut Model, to: u64) {
    m.trunc_pending = to;
    log.truncate(Lsn(to)).expect("truncate");
    m.trunc_done = to;
}

/// Appends `recs` as one batch, truncating the older half of the log while it is full.
fn append_all(log: &mut Log, m: &mut Model, recs: &[Vec<u8>]) {
    let slices: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
    let first = log.next_lsn().0;
    m.started = first + recs.len() as u64;
    let range = loop {
        match log.append_batch(&slices) {
            Err(LogError::Full { .. }) if !log.is_empty() => {
                let to = log.first_lsn().0 + log.len().div_ceil(2);
                truncate(log, m, to);
            }
            r => break r.expect("append"),
        }
    };
    assert_eq!(range.start.0, first, "LSNs must be consecutive");
    m.acked = range.end.0;
}

fn drive(log: &mut Log, ops: &[Op], inc: u64, m: &mut Model) {
    for &op in ops {
        let next = log.next_lsn().0;
        match op {
            Op::Append => append_all(log, m, &[record(next, inc)]),
            Op::Batch(k) => {
                // Keep a batch within an empty log's room.
                let mut recs = Vec::new();
                let mut room = log.capacity() - 64;
                for l in next..next + k {
                    let r = record(l, inc);
                    let ext = log.entry_extent(r.len());
                    if ext > room {
                        break;
                    }
                    room -= ext;
                    recs.push(r);
                }
                append_all(log, m, &recs);
            }
            Op::Truncate(keep) => {
                let to = next.saturating_sub(keep).max(log.first_lsn().0);
                truncate(log, m, to);
            }
            Op::TooLarge => {
                let big = vec![0xa5u8; log.max_record_len() + 1];
                let r = log.append(&big);
                assert!(
                    matches!(r, Err(LogError::RecordTooLarge { .. })),
                    "oversized record: {r:?}"
                );
            }
        }
    }
}

/// The invariant (module documentation); `audit` adds the free-space audit.
fn check(log: &Log, m: &Model, audit: bool) -> Result<(), String> {
    let (first, next) = (log.first_lsn().0, log.next_lsn().0);
    if first < m.trunc_done {
        return Err(format!(
            "records below {} were truncated, yet the log starts at {first}",
            m.trunc_done
        ));
    }
    if first > m.trunc_done.max(m.trunc_pending) {
        return Err(format!(
            "log starts at {first}, but truncation only reached {}",
            m.trunc_done.max(m.trunc_pending)
        ));
    }
    if next < m.acked {
        return Err(format!(
            "acknowledged records {next}..{} are missing (log {first}..{next})",
            m.acked
        ));
    }
    if next > m.started {
        return Err(format!(
            "log ends at {next}, but only LSNs below {} were handed out",
            m.started
        ));
    }
    let mut it = log.iter();
    let mut buf = Vec::new();
    let mut want = first;
    while let Some(lsn) = it.next_into(&mut buf) {
        if lsn.0 != want {
            return Err(format!("record {} came back as LSN {lsn}", want));
        }
        let expected = record(lsn.0, m.inc(lsn.0));
        if buf != expected {
            return Err(format!(
                "record {lsn} is torn: {} bytes read, {} appended{}",
                buf.len(),
                expected.len(),
                if buf.len() == expected.len() {
                    ", contents differ"
                } else {
                    ""
                }
            ));
        }
        want += 1;
    }
    if want != next {
        return Err(format!("iteration stopped at {want}, log ends at {next}"));
    }
    if audit {
        log.audit_free_space()
    } else {
        Ok(())
    }
}

// ---- runs ---------------------------------------------------------------------------

/// One exploration: a variant, a crash model and a starting point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RunSpec {
    variant: Variant,
    torn: bool,
    store: bool,
    restart: Option<u32>,
}

impl RunSpec {
    fn mods(&self) -> RunMods {
        RunMods::new(self.torn, self.store, self.restart)
    }

    fn name(&self) -> String {
        format!("{}{}", self.variant.name(), self.mods().suffix(&[]))
    }

    fn parse(name: &str) -> Result<RunSpec, SpecError> {
        let mut parts = name.split('/');
        let base = parts.next().unwrap_or_default();
        let variant: Variant = base
            .parse()
            .map_err(|_| SpecError::UnknownBase(base.to_string()))?;
        let m = RunMods::parse(parts, &[])?;
        Ok(RunSpec {
            variant,
            torn: m.torn,
            store: m.store,
            restart: m.restart,
        })
    }
}

fn log_region(pool: &Pool, v: Variant) -> Region {
    let len = LogOptions::new(v).region_len(CHECK_CAPACITY);
    pool.data()
        .sub(0, len)
        .expect("the check pool holds the log")
}

fn create(pool: &Pool, v: Variant) -> Result<Log, LogError> {
    Log::create_with(log_region(pool, v), LogOptions::new(v).nonce(NONCE))
}

fn open(pool: &Pool, v: Variant, fault: Fault) -> Result<Log, LogError> {
    let mut log = Log::recover_with_fault(log_region(pool, v), fault)?;
    log.set_fault(fault);
    Ok(log)
}

fn main_workload(pool: &Pool, v: Variant, fault: Fault, m: &mut Model) {
    *m = Model::fresh();
    let mut log = open(pool, v, fault).expect("open the new log");
    drive(&mut log, &script(MAIN_SCRIPT, MAIN_STEPS), 0, m);
}

fn pool_opts(cfg: &Config) -> PoolOptions {
    PoolOptions::new(&cfg.layout, cfg.pool_size)
}

/// Image of a freshly created log.
fn initial_image(cfg: &Config, v: Variant) -> Result<Vec<u8>, CheckError> {
    let p = Pool::create_in_memory(&pool_opts(cfg).domain(cfg.domain))?;
    create(&p, v)?;
    Ok(p.image())
}

/// How a simulated run of the main workload ended.
enum Outcome {
    /// Crashed: the post-crash image that was picked.
    Crashed(Vec<u8>),
    /// Ran to the end, issuing this many fences.
    Finished(u64),
}

/// Runs the main workload on a simulated copy of `initial`, crashing at
/// `at` (or not); a crash image is chosen by the seed `pick`.
fn crash_main(
    cfg: &Config,
    v: Variant,
    fault: Fault,
    initial: &[u8],
    at: Option<CrashAt>,
    pick: u64,
) -> Result<Outcome, CheckError> {
    let (end, counts) = Explorer::new(cfg.clone())
        .simulate(initial, at, |pool, m| main_workload(pool, v, fault, m))?;
    match end {
        SimRun::Finished(..) => Ok(Outcome::Finished(counts.fences)),
        // Where half-written entries are.
        SimRun::Crashed(st, _) => Ok(Outcome::Crashed(st.build_seeded(pick))),
        SimRun::Panicked(m) => Err(CheckError::Explore(ExploreError::Workload(m))),
    }
}

/// Explores one run with budget `cfg.budget`.
fn run_one(spec: RunSpec, cfg: &Config, fault: Fault) -> Result<Report, CheckError> {
    run_one_audited(spec, cfg, fault, true)
}

/// [`run_one`], optionally without the free-space audit (to show that the
/// restart runs catch a missing scrub by its consequence alone).
fn run_one_audited(
    spec: RunSpec,
    cfg: &Config,
    fault: Fault,
    audit: bool,
) -> Result<Report, CheckError> {
    let v = spec.variant;
    let cfg = cfg
        .clone()
        .pool_size(CHECK_POOL_SIZE)
        .tearing(cfg.tearing || spec.torn)
        .crash_on_store(cfg.crash_on_store || spec.store);
    let recover = |pool: &Pool| {
        Log::recover_with_fault(log_region(pool, v), fault).map_err(|e| e.to_string())
    };
    let check = |_: &Pool, log: &Log, m: &Model| check(log, m, audit);
    let Some(r) = spec.restart else {
        return Ok(Explorer::new(cfg.clone())
            .setup(move |pool| {
                create(pool, v).expect("create the log");
            })
            .explore(
                |pool, m: &mut Model| main_workload(pool, v, fault, m),
                recover,
                check,
            )?);
    };

    // Restart: crash the main workload at a seeded fence into a seeded image.
    let initial = initial_image(&cfg, v)?;
    let fences = match crash_main(&cfg, v, fault, &initial, None, 0)? {
        Outcome::Finished(f) => f,
        Outcome::Crashed(_) => unreachable!("no crash was requested"),
    };
    let salt = mix(cfg.seed ^ mix(u64::from(r) + 1));
    let at = CrashAt::Fence(1 + salt % fences.max(1));
    let base = match crash_main(&cfg, v, fault, &initial, Some(at), salt)? {
        Outcome::Crashed(img) => img,
        Outcome::Finished(_) => unreachable!("the crash point is within the workload"),
    };
    // What the restart starts from: the base image as recovered.
    let opened = Pool::open_image(&base, &pool_opts(&cfg), cfg.domain, None)?;
    let start = match Log::recover_with_fault(log_region(&opened, v), fault) {
        Ok(log) => Model::recovered(&log),
        Err(e) => {
            // Nothing to continue from: that is a violation in itself.
            return Ok(failed_restart(
                &cfg,
                at,
                salt,
                format!("recovery of the restart image failed: {e}"),
            ));
        }
    };
    drop(opened);
    Ok(Explorer::new(cfg.clone())
        .setup(move |pool| pool.data().write(0, &base[HEADER_SIZE..]))
        .explore(
            |pool, m: &mut Model| {
                *m = start;
                let mut log = open(pool, v, fault).expect("recover the restart image");
                drive(&mut log, &script(RESTART_SCRIPT, RESTART_STEPS), 1, m);
            },
            recover,
            check,
        )?)
}

/// The run names [`check_variant`] starts with for `cfg` (extra runs reuse
/// the names of the `/store` forms).
pub fn run_names(v: Variant, cfg: &Config) -> Vec<String> {
    plan(v, cfg).iter().map(|(s, _)| s.name()).collect()
}

fn plan(v: Variant, cfg: &Config) -> Vec<(RunSpec, usize)> {
    let modes: &[bool] = if cfg.tearing { &[true] } else { &[false, true] };
    let mut out = Vec::new();
    for &torn in modes {
        let spec = RunSpec {
            variant: v,
            torn,
            store: false,
            restart: None,
        };
        out.push((spec, 2));
        for r in 0..RESTARTS {
            out.push((
                RunSpec {
                    restart: Some(r),
                    ..spec
                },
                1,
            ));
        }
    }
    out
}

/// Checks one variant with `cfg.budget` crash states split over its runs;
/// `fault` plants a bug ([`Fault::None`] for the real thing). Returns one
/// report per run, named as [`check_run`] accepts.
pub fn check_variant(
    v: Variant,
    cfg: Config,
    fault: Fault,
) -> Result<Vec<(String, Report)>, CheckError> {
    // Spend what is left on main runs with new seeds that also crash
    // between stores (new crash points, not repeats of the ones above).
    let modes: &[bool] = if cfg.tearing { &[true] } else { &[false, true] };
    let extra = |i: u64| RunSpec {
        variant: v,
        torn: modes[i as usize % modes.len()],
        store: true,
        restart: None,
    };
    spend_budget(
        &cfg,
        plan(v, &cfg),
        MAX_EXTRA,
        extra,
        RunSpec::name,
        |spec, c| run_one(spec, c, fault),
    )
}

/// Checks every variant of `alg` (Classic: packed, padded; Header: packed,
/// padded, dancing; RAWL: packed, padded; PopLog: packed, padded, staged),
/// splitting `cfg.budget` crash states between them. The pool size of `cfg`
/// is replaced by [`CHECK_POOL_SIZE`]; its layout name, domain, tearing,
/// crash points, seed, nesting and progress settings are used.
pub fn check_log(alg: super::Algorithm, cfg: Config) -> Result<Vec<(String, Report)>, CheckError> {
    let variants = alg.variants();
    let mut left = cfg.budget;
    let mut out = Vec::new();
    for (i, &v) in variants.iter().enumerate() {
        let share = (left / (variants.len() - i)).max(1);
        let reps = check_variant(v, cfg.clone().budget(share), Fault::None)?;
        let used: usize = reps.iter().map(|(_, r)| r.states).sum();
        left = left.saturating_sub(used);
        out.extend(reps);
    }
    Ok(out)
}

/// Replays one run by name (`poplog-staged/torn/restart1`), e.g. with
/// `cfg.only` set to a violation's reproducer and `cfg.seed` to its seed.
pub fn check_run(name: &str, cfg: Config) -> Result<Report, CheckError> {
    let spec = RunSpec::parse(name).map_err(|why| CheckError::unknown_run(name, why))?;
    run_one(spec, &cfg, Fault::None)
}

#[cfg(test)]
mod tests;
