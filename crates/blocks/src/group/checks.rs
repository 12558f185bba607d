//! Crash check of the leaf array under interleaved groups, run through the
//! `ferrite-crash` explorer (feature `checks`; also compiled for tests).
//!
//! [`check_fptree_group`] covers group sizes 1, 4 and 16 ([`GROUP_SIZES`]);
//! [`check_fptree_group_fault`] the same with a planted bug; [`check_group`]
//! one group size; [`check_group_run`] replays one named run.
//!
//! The table under test is small — [`CHECK_LEAVES`] leaves, 96 slots — so
//! the inserts of one group land in the same leaves and share bitmap words
//! and header lines, and leaves fill up. Each group size is explored in
//! several *runs*, the budget split between them:
//!
//! - **main** (`g16`): a fresh table gets five chunks of 20 operations, each
//!   chunk one [`FpLeaves::run`] with the group size: about 5/8 inserts of
//!   new keys, 1/8 re-inserts of keys already tried (duplicates, in flight
//!   or durable), 1/8 lookups of acknowledged keys, the rest lookups of keys
//!   never inserted. The workload itself checks every result: an insert
//!   acknowledged twice, a duplicate reported for a key that is not there
//!   at the end of its chunk, a full leaf that is not full, a lookup that
//!   misses a key acknowledged before its chunk or returns a value never
//!   acknowledged — each panics, which the explorer reports.
//! - **restart** (`g16/restart0`): the main workload is crashed at a seeded
//!   fence, a post-crash image is picked at random (about half of the
//!   in-flight lines survive, so it usually holds half-written slots), and
//!   the explored workload recovers it and runs three more chunks with
//!   other values: the scrub, the rebuilt mirror and slot reuse after a
//!   crash are exercised, and crash points fall inside recovery's scrub.
//! - **store** (`g16/store`): the main workload crashed also before every
//!   store, so states between the key/value write, the fingerprint write
//!   and the bit store are seen with their live content;
//! - each of these line-granular and in tearing mode (8-byte units),
//!   unless the configuration already asks for tearing;
//! - what the runs leave of the budget (small crash states are enumerated
//!   exhaustively, recovery without fences has no nested crashes) goes to
//!   extra main runs with new seeds that also crash between stores.
//!
//! The invariant after every recovery (nested crashes of recovery are on
//! unless the configuration turns them off), reading bitmaps and slots
//! from the medium:
//! - **no half-inserted slot is visible**: every slot whose bit is set holds
//!   a key that some insert carried, the value that insert carried, and the
//!   key's fingerprint, in the key's leaf; no key is visible twice;
//! - **every acknowledged insert survives**, with its value, and
//!   [`FpLeaves::get`] finds it;
//! - the recovered state passes [`FpLeaves::audit`]: mirror equals bitmaps,
//!   the count is right, free slots are zero (the scrub ran).

use super::{Fault, FpLeaves, GroupError, Op, Outcome, SLOTS, bits, mix};
use ferrite_crash::{
    CheckSubject, Config, CrashAt, ExploreError, Explorer, Report, RunMods, SimRun, SpecError,
    failed_restart, spend_budget,
};
use ferrite_pmem::{HEADER_SIZE, Pool, PoolOptions, Region};
use std::collections::{BTreeMap, BTreeSet};

/// Size of the simulated pool every check uses (the configuration's is
/// overridden: images are copied for every crash state).
pub const CHECK_POOL_SIZE: u64 = 8192;
/// Leaves of the table under test.
pub const CHECK_LEAVES: usize = 3;
/// Group sizes [`check_fptree_group`] covers.
pub const GROUP_SIZES: [usize; 3] = [1, 4, 16];
const HASH_SEED: u64 = 0x6772_6f75_7073_6565;
const MAIN_SCRIPT: u64 = 0x6d61_696e;
const RESTART_SCRIPT: u64 = 0x7265_7374;
const MAIN_CHUNKS: usize = 5;
const RESTART_CHUNKS: usize = 3;
const CHUNK_OPS: usize = 20;
/// Restart runs per mode (each from a different crash image).
const RESTARTS: u32 = 2;
/// Most extra runs spent on a leftover budget, per group size.
const MAX_EXTRA: u64 = 8;

/// Why a check could not run (a violation is not an error: it is in the
/// report): the shared [`ferrite_crash::CheckError`] with the leaf array's
/// errors.
pub type GroupCheckError = ferrite_crash::CheckError<GroupError>;

impl CheckSubject for GroupError {
    const WHAT: &'static str = "leaf array";
    const RUNS: &'static str = "gN[/torn][/store][/restartN]";
}

// ---- deterministic keys and values -------------------------------------------------

fn key_of(id: u64) -> u64 {
    mix(id ^ 0x6b65_7973)
}

/// The value inserted with `key` in incarnation `inc` (0 before the crash a
/// restart run recovers from, 1 after). Never zero, so a slot whose value
/// line did not become durable (zero after create and scrub) cannot pass.
fn value_of(key: u64, inc: u64) -> u64 {
    mix(key ^ inc.wrapping_mul(0xa076_1d64_78bd_642f) ^ 0x7661_6c75_6573) | 1
}

// ---- the model: what the workload saw acknowledged ---------------------------------

#[derive(Clone, Debug, Default)]
struct Model {
    /// Inserts that completed (durable), key → value.
    acked: BTreeMap<u64, u64>,
    /// Every value an insert of the key carried (acknowledged or not).
    attempted: BTreeMap<u64, Vec<u64>>,
    /// Key id of the next new key.
    next_id: u64,
}

impl Model {
    /// The state a restart run starts from: the table as recovered.
    fn recovered(t: &FpLeaves) -> Model {
        let acked: BTreeMap<u64, u64> = t.entries().into_iter().collect();
        let attempted = acked.iter().map(|(&k, &v)| (k, vec![v])).collect();
        Model {
            next_id: acked.len() as u64 / 2,
            acked,
            attempted,
        }
    }
}

/// The `n`-th key of a map (mod its length).
fn nth_key<V>(m: &BTreeMap<u64, V>, n: u64) -> Option<u64> {
    (!m.is_empty())
        .then(|| m.keys().nth((n % m.len() as u64) as usize).copied())
        .flatten()
}

/// Runs `chunks` chunks of the script `script` on `t` with group size
/// `group`, checking every result as it comes (see the module documentation).
fn drive(t: &mut FpLeaves, m: &mut Model, group: usize, script: u64, inc: u64, chunks: usize) {
    let mut rng = mix(script ^ ((group as u64) << 32));
    for _ in 0..chunks {
        let mut ops = Vec::with_capacity(CHUNK_OPS);
        for _ in 0..CHUNK_OPS {
            rng = mix(rng);
            let pick = rng >> 8;
            let insert = |key| Op::Insert {
                key,
                value: value_of(key, inc),
            };
            let op = match rng % 8 {
                5 if !m.attempted.is_empty() => insert(nth_key(&m.attempted, pick).unwrap_or(0)),
                6 if !m.acked.is_empty() => Op::Lookup {
                    key: nth_key(&m.acked, pick).unwrap_or(0),
                },
                6 | 7 => Op::Lookup {
                    key: key_of(u64::MAX - pick % 1024),
                },
                _ => {
                    let key = key_of(m.next_id);
                    m.next_id += 1;
                    insert(key)
                }
            };
            ops.push(op);
        }
        for op in &ops {
            if let Op::Insert { key, value } = *op {
                m.attempted.entry(key).or_default().push(value);
            }
        }
        let acked_before: BTreeSet<u64> = m.acked.keys().copied().collect();
        let mut dups = Vec::new();
        let mut full = Vec::new();
        let ops_ref = &ops;
        t.run(ops.iter().copied(), group, |i, r| match (ops_ref[i], r) {
            (Op::Insert { key, value }, Ok(Outcome::Inserted)) => {
                if m.acked.insert(key, value).is_some() {
                    panic!("key {key:#x} acknowledged as inserted twice");
                }
            }
            (Op::Insert { key, .. }, Err(GroupError::Duplicate { key: k })) if k == key => {
                dups.push(key)
            }
            (Op::Insert { .. }, Err(GroupError::LeafFull { leaf })) => full.push(leaf),
            (Op::Lookup { key }, Ok(Outcome::Found(v))) => match m.acked.get(&key) {
                Some(&a) if a == v => {}
                other => {
                    panic!("lookup of {key:#x} returned {v:#x}, acknowledged value is {other:?}")
                }
            },
            (Op::Lookup { key }, Ok(Outcome::Missing)) => {
                if acked_before.contains(&key) {
                    panic!("lookup of {key:#x} missed a key acknowledged before it started");
                }
            }
            (op, r) => panic!("{op:?} returned {r:?}"),
        })
        .expect("the group size is valid");
        for key in dups {
            if !m.acked.contains_key(&key) {
                panic!("insert of {key:#x} reported a duplicate, but the key is absent");
            }
        }
        for leaf in full {
            if t.bitmap(leaf) != u32::MAX {
                panic!("leaf {leaf} reported full with free slots");
            }
        }
    }
}

/// The invariant (module documentation); `audit` adds [`FpLeaves::audit`].
fn check(t: &FpLeaves, m: &Model, audit: bool) -> Result<(), String> {
    let mut seen = BTreeMap::new();
    for leaf in 0..t.leaves() {
        let lo = t.leaf_off(leaf);
        let bitmap = t.region.load_u64(lo);
        for s in bits(bitmap as u32) {
            let (key, value) = (t.key_at(leaf, s), t.value_at(leaf, s));
            let mut fp = [0u8; 1];
            t.region.read(lo + super::FPS + s, &mut fp);
            let here = format!("leaf {leaf} slot {s} (key {key:#x}, value {value:#x})");
            if t.place(key) != (leaf, fp[0]) {
                return Err(format!(
                    "{here} is visible with fingerprint {:#04x}, the key's is {:?}: half-inserted",
                    fp[0],
                    t.place(key)
                ));
            }
            match m.attempted.get(&key) {
                None => return Err(format!("{here} is visible, no insert carried that key")),
                Some(vs) if !vs.contains(&value) => {
                    return Err(format!("{here} is visible with a value never inserted"));
                }
                Some(_) => {}
            }
            if seen.insert(key, value).is_some() {
                return Err(format!("key {key:#x} is visible twice"));
            }
        }
    }
    for (&k, &v) in &m.acked {
        match seen.get(&k) {
            Some(&x) if x == v => {}
            Some(&x) => return Err(format!("acknowledged {k:#x} reads {x:#x}, not {v:#x}")),
            None => return Err(format!("acknowledged insert of {k:#x} is lost")),
        }
        if t.get(k) != Some(v) {
            return Err(format!("lookup misses acknowledged {k:#x}"));
        }
    }
    if t.len() != seen.len() {
        return Err(format!(
            "{} entries visible, the table counts {}",
            seen.len(),
            t.len()
        ));
    }
    if audit {
        t.audit().map_err(|e| e.to_string())?;
    }
    Ok(())
}

// ---- runs ---------------------------------------------------------------------------

/// One exploration: a group size, a crash model and a starting point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RunSpec {
    group: usize,
    torn: bool,
    store: bool,
    restart: Option<u32>,
}

impl RunSpec {
    fn name(&self) -> String {
        let mods = RunMods::new(self.torn, self.store, self.restart);
        format!("g{}{}", self.group, mods.suffix(&[]))
    }

    fn parse(name: &str) -> Result<RunSpec, SpecError> {
        let mut parts = name.split('/');
        let base = parts.next().unwrap_or_default();
        let group = base
            .strip_prefix('g')
            .and_then(|g| g.parse::<usize>().ok())
            .filter(|&g| g != 0 && g <= super::MAX_GROUP)
            .ok_or_else(|| SpecError::UnknownBase(base.to_string()))?;
        let m = RunMods::parse(parts, &[])?;
        Ok(RunSpec {
            group,
            torn: m.torn,
            store: m.store,
            restart: m.restart,
        })
    }
}

fn table_region(pool: &Pool) -> Region {
    pool.data()
        .sub(0, FpLeaves::region_len(CHECK_LEAVES))
        .expect("the check pool holds the table")
}

fn open(pool: &Pool, fault: Fault) -> Result<FpLeaves, GroupError> {
    let mut t = FpLeaves::recover_with_fault(table_region(pool), fault)?;
    t.set_fault(fault);
    Ok(t)
}

fn main_workload(pool: &Pool, group: usize, fault: Fault, m: &mut Model) {
    *m = Model::default();
    let mut t = open(pool, fault).expect("open the new table");
    drive(&mut t, m, group, MAIN_SCRIPT, 0, MAIN_CHUNKS);
}

fn pool_opts(cfg: &Config) -> PoolOptions {
    PoolOptions::new(&cfg.layout, cfg.pool_size)
}

fn create(pool: &Pool) -> Result<FpLeaves, GroupError> {
    FpLeaves::create(table_region(pool), CHECK_LEAVES, HASH_SEED)
}

/// Runs the main workload on a simulated copy of `initial`, crashing at
/// `at` (or not; [`CrashAt::End`] crashes after it). Returns the post-crash
/// image picked by the seed `pick` (about half of the in-flight units
/// survive), or the fences of an uncrashed run.
fn crash_main(
    cfg: &Config,
    group: usize,
    fault: Fault,
    initial: &[u8],
    at: Option<CrashAt>,
    pick: u64,
) -> Result<Result<Vec<u8>, u64>, GroupCheckError> {
    let (end, counts) = Explorer::new(cfg.clone())
        .simulate(initial, at, |pool, m| main_workload(pool, group, fault, m))?;
    let st = match end {
        SimRun::Crashed(st, _) => st,
        SimRun::Finished(st, _) if at == Some(CrashAt::End) => st,
        SimRun::Finished(..) => return Ok(Err(counts.fences)),
        SimRun::Panicked(m) => {
            return Err(GroupCheckError::Explore(ExploreError::Workload(m)));
        }
    };
    Ok(Ok(st.build_seeded(pick)))
}

/// Explores one run with budget `cfg.budget`.
fn run_one(spec: RunSpec, cfg: &Config, fault: Fault) -> Result<Report, GroupCheckError> {
    let g = spec.group;
    let cfg = cfg
        .clone()
        .pool_size(CHECK_POOL_SIZE)
        .tearing(cfg.tearing || spec.torn)
        .crash_on_store(cfg.crash_on_store || spec.store);
    let recover = |pool: &Pool| {
        FpLeaves::recover_with_fault(table_region(pool), fault).map_err(|e| e.to_string())
    };
    let check = |_: &Pool, t: &FpLeaves, m: &Model| check(t, m, true);
    let Some(r) = spec.restart else {
        return Ok(Explorer::new(cfg.clone())
            .setup(|pool| {
                create(pool).expect("create the table");
            })
            .explore(
                |pool, m: &mut Model| main_workload(pool, g, fault, m),
                recover,
                check,
            )?);
    };

    // Restart: crash the main workload at a seeded fence into a seeded image.
    let initial = {
        let p = Pool::create_in_memory(&pool_opts(&cfg).domain(cfg.domain))?;
        create(&p)?;
        p.image()
    };
    let fences = match crash_main(&cfg, g, fault, &initial, None, 0)? {
        Err(f) => f,
        Ok(_) => unreachable!("no crash was requested"),
    };
    let salt = mix(cfg.seed ^ mix(u64::from(r) + 1) ^ ((g as u64) << 40));
    // (Only a planted bug runs without fences; then crash at the end.)
    let at = if fences == 0 {
        CrashAt::End
    } else {
        CrashAt::Fence(1 + salt % fences)
    };
    let base = match crash_main(&cfg, g, fault, &initial, Some(at), salt)? {
        Ok(img) => img,
        Err(_) => unreachable!("the crash point is within the workload"),
    };
    // A restart image that is already broken (only a planted bug makes
    // one) is a violation of the crash it came from, reported as such.
    let broken = |message: String| failed_restart(&cfg, at, salt, message);
    let opened = Pool::open_image(&base, &pool_opts(&cfg), cfg.domain, None)?;
    let start = match FpLeaves::recover_with_fault(table_region(&opened), fault) {
        Ok(t) => match t.audit() {
            Ok(()) => Model::recovered(&t),
            Err(e) => return Ok(broken(format!("the recovered restart image: {e}"))),
        },
        Err(e) => return Ok(broken(format!("recovery of the restart image failed: {e}"))),
    };
    drop(opened);
    let explored = Explorer::new(cfg.clone())
        .setup(move |pool| pool.data().write(0, &base[HEADER_SIZE..]))
        .explore(
            |pool, m: &mut Model| {
                *m = start.clone();
                let mut t = open(pool, fault).expect("recover the restart image");
                drive(&mut t, m, g, RESTART_SCRIPT, 1, RESTART_CHUNKS);
            },
            recover,
            check,
        );
    match explored {
        Err(ExploreError::Workload(m)) => Ok(broken(format!(
            "the workload fails on the recovered restart image: {m}"
        ))),
        r => Ok(r?),
    }
}

/// The runs [`check_group`] starts with, and their budget weights.
fn plan(group: usize, cfg: &Config) -> Vec<(RunSpec, usize)> {
    let modes: &[bool] = if cfg.tearing { &[true] } else { &[false, true] };
    let mut out = Vec::new();
    for &torn in modes {
        let spec = RunSpec {
            group,
            torn,
            store: false,
            restart: None,
        };
        out.push((spec, 2));
        out.push((
            RunSpec {
                store: true,
                ..spec
            },
            1,
        ));
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

/// The run names [`check_group`] starts with for `cfg` (extra runs reuse
/// the names of the `/store` forms).
pub fn run_names(group: usize, cfg: &Config) -> Vec<String> {
    plan(group, cfg).iter().map(|(s, _)| s.name()).collect()
}

/// Checks one group size with `cfg.budget` crash states split over its
/// runs; `fault` plants a bug ([`Fault::None`] for the real thing). Returns
/// one report per run, named as [`check_group_run`] accepts.
pub fn check_group(
    group: usize,
    cfg: Config,
    fault: Fault,
) -> Result<Vec<(String, Report)>, GroupCheckError> {
    if group == 0 || group > super::MAX_GROUP {
        return Err(GroupError::BadGroup(group).into());
    }
    // Spend what is left on main runs with new seeds that also crash
    // between stores (new crash points, not repeats of the ones above).
    let modes: &[bool] = if cfg.tearing { &[true] } else { &[false, true] };
    let extra = |i: u64| RunSpec {
        group,
        torn: modes[i as usize % modes.len()],
        store: true,
        restart: None,
    };
    spend_budget(
        &cfg,
        plan(group, &cfg),
        MAX_EXTRA,
        extra,
        RunSpec::name,
        |spec, c| run_one(spec, c, fault),
    )
}

/// `ferrite check fptree-group`: the leaf array under interleaved groups of
/// 1, 4 and 16 operations, `cfg.budget` crash states split between them.
/// The pool size of `cfg` is replaced by [`CHECK_POOL_SIZE`]; its layout
/// name, domain, tearing, crash points, seed, nesting and progress settings
/// are used. Reports are named `gG[/torn][/store][/restartN]`.
pub fn check_fptree_group(cfg: Config) -> Result<Vec<(String, Report)>, GroupCheckError> {
    check_fptree_group_fault(cfg, Fault::None)
}

/// [`check_fptree_group`] with a planted bug ([`Fault`]): must report
/// violations at every group size (e.g. `Fault::BitWithSlot`, the bitmap
/// bit set under the same fence as the slot write).
pub fn check_fptree_group_fault(
    cfg: Config,
    fault: Fault,
) -> Result<Vec<(String, Report)>, GroupCheckError> {
    let mut left = cfg.budget;
    let mut out = Vec::new();
    for (i, &g) in GROUP_SIZES.iter().enumerate() {
        let share = (left / (GROUP_SIZES.len() - i)).max(1);
        let reps = check_group(g, cfg.clone().budget(share), fault)?;
        left = left.saturating_sub(reps.iter().map(|(_, r)| r.states).sum());
        out.extend(reps);
    }
    Ok(out)
}

/// Replays one run by name (`g16/torn/restart1`), e.g. with `cfg.only` set
/// to a violation's reproducer and `cfg.seed` to its seed.
pub fn check_group_run(name: &str, cfg: Config) -> Result<Report, GroupCheckError> {
    let spec = RunSpec::parse(name).map_err(|why| GroupCheckError::unknown_run(name, why))?;
    run_one(spec, &cfg, Fault::None)
}

// `drive` recognises a full leaf by an all-ones 32-bit bitmap.
const _: () = assert!(SLOTS == 32, "a full leaf is u32::MAX");

#[cfg(test)]
mod tests;
