//! Crash checks of the page store, run through the `ferrite-crash` explorer
//! (feature `checks`; also compiled for this crate's tests).
//!
//! [`check_page`] checks one algorithm; [`check_page_run`] replays one
//! named run (the names appear in the returned reports).
//!
//! Every algorithm is explored in several *runs*, the budget split between
//! them:
//!
//! - **main** (`ALG/4k`): a fresh store of four 4 KiB pages, two lanes and
//!   six slots (a 64 KiB pool, so images are cheap) gets 28 writes: each
//!   page's first (a copy-on-write whatever the algorithm), then pages
//!   picked at random with repeats, under dirty patterns — first line, last
//!   line, a run, every 8th line, scattered lines, the whole page, nothing,
//!   17 random lines, two middle lines, 12 and 11 lines (either side of the
//!   hybrid's crossover, fixed at 12 here so the workload is deterministic).
//!   Lanes rotate, so successive micro-log writes of a page sit in
//!   different lanes.
//! - **16k** (`ALG/16k`): the same with three 16 KiB pages (a 160 KiB pool).
//! - **restart** (`ALG/4k/restartN`): the main workload is crashed at a
//!   seeded fence into a seeded image (so it usually holds half-done
//!   writes); the explored workload recovers it — itself a source of crash
//!   points — and goes on writing other content. This shows that recovery
//!   leaves nothing a later write could be completed by, and that no slot
//!   was lost (a lost slot runs a later copy-on-write out of slots).
//! - each of these line-granular and with 8-byte tearing (`/torn`), unless
//!   the configuration already asks for tearing;
//! - what the runs leave of the budget goes to more main runs with new
//!   seeds that also crash between stores (`/store`).
//!
//! The invariant after every recovery (and after crashed recoveries: nested
//! crashes are on unless the configuration turns them off):
//! - every page reads exactly as after its last acknowledged write, except
//!   the page of the write in flight, which may instead read exactly as
//!   that write made it — never a mix of the two;
//! - the page map and free list agree with the medium: every live slot
//!   carries its page's valid header and version, each slot is live for at
//!   most one page, and the free list holds every other slot exactly once.

use super::{
    Crossover, CrossoverSource, DirtyLines, Fault, PageAlgorithm, PageError, PageStore,
    PageStoreOptions,
};
use ferrite_crash::{
    CheckSubject, Config, CrashAt, ExploreError, Explorer, Report, RunMods, SimRun, SpecError,
    failed_restart, spend_budget,
};
use ferrite_pmem::{HEADER_SIZE, Pool, PoolOptions, Region};

const NONCE: u64 = 0x9a6e_5709_e5ca_fe01;
/// The hybrid's crossover in the checks: patterns of 11 and 12 lines fall
/// either side of it.
pub const CHECK_CROSSOVER: u16 = 12;
const MAIN_SCRIPT: u64 = 0x7061_6765;
const RESTART_SCRIPT: u64 = 0x6167_6169;
const MAIN_STEPS: usize = 28;
const RESTART_STEPS: usize = 12;
/// Most extra runs spent on a leftover budget.
const MAX_EXTRA: u64 = 8;

/// Why a check could not run (a violation is not an error: it is in the
/// report): the shared [`ferrite_crash::CheckError`] with the store's errors.
pub type PageCheckError = ferrite_crash::CheckError<PageError>;

impl CheckSubject for PageError {
    const WHAT: &'static str = "page store";
    const RUNS: &'static str = "ALG/4k|16k[/torn][/store][/restartN]";
}

// ---- the store under test --------------------------------------------------------

/// The store's shape in a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shape {
    page_size: usize,
    pages: u32,
    pool: u64,
}

const SHAPE_4K: Shape = Shape {
    page_size: 4096,
    pages: 4,
    pool: 64 * 1024,
};
const SHAPE_16K: Shape = Shape {
    page_size: 16384,
    pages: 3,
    pool: 160 * 1024,
};

fn options(alg: PageAlgorithm, shape: Shape) -> PageStoreOptions {
    PageStoreOptions::new(shape.page_size, shape.pages)
        .lanes(2)
        .algorithm(alg)
        .crossover(CrossoverSource::Fixed(Crossover {
            single: CHECK_CROSSOVER,
            multi: CHECK_CROSSOVER,
        }))
        .nonce(NONCE)
}

fn store_region(pool: &Pool, alg: PageAlgorithm, shape: Shape) -> Region {
    let len = options(alg, shape)
        .region_len()
        .expect("the check shapes are valid");
    pool.data()
        .sub(0, len)
        .expect("the check pool holds the store")
}

// ---- deterministic workload --------------------------------------------------------

/// splitmix64.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One write of the script: which page, which lines change.
#[derive(Clone, Copy, Debug)]
struct Op {
    page: u32,
    dirty: DirtyLines,
}

/// Dirty pattern `i` for a page of `lines` lines (`s` seeds the random one).
fn pattern(i: u64, lines: usize, s: u64) -> DirtyLines {
    let c = CHECK_CROSSOVER as usize;
    match i % 11 {
        0 => DirtyLines::from_lines([0]),
        1 => DirtyLines::from_lines([lines - 1]),
        2 => DirtyLines::from_lines(5..9),
        3 => DirtyLines::from_lines((0..lines).step_by(8)),
        4 => DirtyLines::from_lines([1, 2, lines - 2]),
        5 => DirtyLines::all(lines),
        6 => DirtyLines::none(),
        7 => {
            let mut d = DirtyLines::none();
            let mut x = s;
            while d.count() < 17 {
                x = mix(x);
                d.set(x as usize % lines);
            }
            d
        }
        8 => DirtyLines::from_lines([lines / 2 - 1, lines / 2]),
        9 => DirtyLines::from_lines(20..20 + c),
        _ => DirtyLines::from_lines(30..30 + c - 1),
    }
}

fn script(seed: u64, steps: usize, shape: Shape, fresh: bool) -> Vec<Op> {
    let lines = shape.page_size / 64;
    let mut s = seed;
    let mut prev = 0u32;
    (0..steps)
        .map(|j| {
            s = mix(s);
            // A fresh store first writes every page once (whole pages).
            let page = if fresh && j < shape.pages as usize {
                j as u32
            } else if s % 100 < 35 {
                prev
            } else {
                ((s >> 8) % u64::from(shape.pages)) as u32
            };
            prev = page;
            let dirty = if fresh && j < shape.pages as usize {
                DirtyLines::all(lines)
            } else {
                pattern(s >> 20, lines, s)
            };
            Op { page, dirty }
        })
        .collect()
}

/// New content of `line` of `page` written by step `step` of incarnation `inc`.
fn line_bytes(inc: u64, step: usize, page: u32, line: usize) -> [u8; 64] {
    let seed = mix(inc ^ mix(step as u64 ^ mix(u64::from(page) << 32 | line as u64)));
    let mut b = [0u8; 64];
    for (i, chunk) in b.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&mix(seed ^ i as u64).to_le_bytes());
    }
    b
}

/// The script and every page content it produces.
struct Plan {
    base: Vec<Vec<u8>>,
    ops: Vec<Op>,
    /// `after[j]`: content of `ops[j].page` once write `j` is done.
    after: Vec<Vec<u8>>,
}

impl Plan {
    fn new(base: Vec<Vec<u8>>, ops: Vec<Op>, inc: u64) -> Plan {
        let mut cur = base.clone();
        let mut after = Vec::with_capacity(ops.len());
        for (j, op) in ops.iter().enumerate() {
            let page = &mut cur[op.page as usize];
            for l in op.dirty.iter() {
                page[l * 64..(l + 1) * 64].copy_from_slice(&line_bytes(inc, j, op.page, l));
            }
            after.push(page.clone());
        }
        Plan { base, ops, after }
    }

    /// Content of `page` after the first `n` writes.
    fn content(&self, page: u32, n: usize) -> &[u8] {
        (0..n)
            .rev()
            .find(|&j| self.ops[j].page == page)
            .map_or(&self.base[page as usize], |j| &self.after[j])
    }
}

/// What the workload saw: writes `0..acked` returned, `0..started` began.
#[derive(Clone, Copy, Debug, Default)]
struct Model {
    acked: usize,
    started: usize,
}

fn drive(store: &PageStore, plan: &Plan, m: &mut Model) {
    for (j, op) in plan.ops.iter().enumerate() {
        m.started = j + 1;
        store
            .write_page(op.page, &plan.after[j], &op.dirty)
            .unwrap_or_else(|e| panic!("write {j} of page {}: {e}", op.page));
        m.acked = j + 1;
    }
}

/// The invariant (module documentation).
fn check(store: &PageStore, plan: &Plan, m: &Model) -> Result<(), String> {
    let mut buf = vec![0u8; store.page_size()];
    let inflight = (m.started > m.acked).then_some(m.acked);
    for page in 0..store.pages() {
        store.read_page(page, &mut buf).map_err(|e| e.to_string())?;
        let old = plan.content(page, m.acked);
        if buf == old {
            continue;
        }
        if let Some(j) = inflight.filter(|&j| plan.ops[j].page == page)
            && buf == plan.after[j]
        {
            continue;
        }
        let differ = |want: &[u8]| {
            buf.chunks(64)
                .zip(want.chunks(64))
                .filter(|(a, b)| a != b)
                .count()
        };
        let new_note = match inflight.filter(|&j| plan.ops[j].page == page) {
            Some(j) => format!(", {} from write {j} in flight", differ(&plan.after[j])),
            None => String::new(),
        };
        return Err(format!(
            "page {page} is torn or stale: {} lines differ from its last acknowledged content (after {} writes){new_note}",
            differ(old),
            m.acked
        ));
    }
    store.audit()
}

// ---- runs ---------------------------------------------------------------------------

/// One exploration: an algorithm, a shape, a crash model and a start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RunSpec {
    alg: PageAlgorithm,
    shape: Shape,
    torn: bool,
    store: bool,
    restart: Option<u32>,
}

impl RunSpec {
    fn name(&self) -> String {
        let mods = RunMods::new(self.torn, self.store, self.restart);
        format!(
            "{}/{}k{}",
            self.alg,
            self.shape.page_size / 1024,
            mods.suffix(&[])
        )
    }

    fn parse(name: &str) -> Result<RunSpec, SpecError> {
        let mut parts = name.split('/');
        let base = parts.next().unwrap_or_default();
        let unknown = || SpecError::UnknownBase(name.to_string());
        let alg: PageAlgorithm = base.parse().map_err(|_| unknown())?;
        let shape = match parts.next() {
            Some("4k") => SHAPE_4K,
            Some("16k") => SHAPE_16K,
            _ => return Err(unknown()),
        };
        let m = RunMods::parse(parts, &[])?;
        Ok(RunSpec {
            alg,
            shape,
            torn: m.torn,
            store: m.store,
            restart: m.restart,
        })
    }
}

fn pool_opts(cfg: &Config) -> PoolOptions {
    PoolOptions::new(&cfg.layout, cfg.pool_size)
}

fn zero_pages(shape: Shape) -> Vec<Vec<u8>> {
    vec![vec![0u8; shape.page_size]; shape.pages as usize]
}

fn main_plan(shape: Shape, seed: u64) -> Plan {
    Plan::new(
        zero_pages(shape),
        script(MAIN_SCRIPT ^ seed, MAIN_STEPS, shape, true),
        0,
    )
}

fn open(pool: &Pool, spec: &RunSpec, fault: Fault) -> Result<PageStore, PageError> {
    PageStore::open_with_fault(store_region(pool, spec.alg, spec.shape), fault)
}

/// Crashes the main workload on a copy of `initial` at `at` and builds the
/// image seeded by `pick` (about half the in-flight units survive, each
/// with one of its possible contents); `None` if it did not crash.
fn crash_main(
    cfg: &Config,
    spec: &RunSpec,
    fault: Fault,
    initial: &[u8],
    at: Option<CrashAt>,
    pick: u64,
) -> Result<(Option<Vec<u8>>, u64), PageCheckError> {
    let plan = main_plan(spec.shape, 0);
    let (end, counts) = Explorer::new(cfg.clone()).simulate(initial, at, |pool, m| {
        let store = open(pool, spec, fault).expect("open the new store");
        drive(&store, &plan, m);
    })?;
    match end {
        SimRun::Finished(..) => Ok((None, counts.fences)),
        SimRun::Crashed(st, _) => Ok((Some(st.build_seeded(pick)), 0)),
        SimRun::Panicked(m) => Err(PageCheckError::Explore(ExploreError::Workload(m))),
    }
}

/// Explores one run with budget `cfg.budget`.
fn run_one(spec: RunSpec, cfg: &Config, fault: Fault) -> Result<Report, PageCheckError> {
    let cfg = cfg
        .clone()
        .pool_size(spec.shape.pool)
        .tearing(cfg.tearing || spec.torn)
        .crash_on_store(cfg.crash_on_store || spec.store);
    let (alg, shape) = (spec.alg, spec.shape);
    let recover = |pool: &Pool| open(pool, &spec, fault).map_err(|e| e.to_string());
    let create = move |pool: &Pool| {
        PageStore::create(store_region(pool, alg, shape), &options(alg, shape))
            .expect("create the store");
    };
    let Some(r) = spec.restart else {
        // Extra runs get new seeds: let them also vary the script.
        let plan = main_plan(shape, if spec.store { cfg.seed } else { 0 });
        return Ok(Explorer::new(cfg.clone()).setup(create).explore(
            |pool, m: &mut Model| {
                let store = open(pool, &spec, fault).expect("open the new store");
                drive(&store, &plan, m);
            },
            recover,
            |_, store: &PageStore, m| check(store, &plan, m),
        )?);
    };

    // Restart: crash the main workload at a seeded fence into a seeded image.
    let initial = {
        let p = Pool::create_in_memory(&pool_opts(&cfg).domain(cfg.domain))?;
        PageStore::create(store_region(&p, alg, shape), &options(alg, shape))?;
        p.image()
    };
    let main = RunSpec {
        restart: None,
        ..spec
    };
    let (_, fences) = crash_main(&cfg, &main, fault, &initial, None, 0)?;
    let salt = mix(cfg.seed ^ mix(u64::from(r) + 1));
    let at = CrashAt::Fence(1 + salt % fences.max(1));
    let (Some(base_img), _) = crash_main(&cfg, &main, fault, &initial, Some(at), salt)? else {
        unreachable!("the crash point is within the workload");
    };
    // The restart starts from the base image as recovered.
    let opened = Pool::open_image(&base_img, &pool_opts(&cfg), cfg.domain, None)?;
    let base = match open(&opened, &spec, fault) {
        Ok(store) => {
            let mut pages = zero_pages(shape);
            for (p, buf) in pages.iter_mut().enumerate() {
                store.read_page(p as u32, buf)?;
            }
            pages
        }
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
    let plan = Plan::new(
        base,
        script(RESTART_SCRIPT ^ u64::from(r), RESTART_STEPS, shape, false),
        1 + u64::from(r),
    );
    Ok(Explorer::new(cfg.clone())
        .setup(move |pool| pool.data().write(0, &base_img[HEADER_SIZE..]))
        .explore(
            |pool, m: &mut Model| {
                let store = open(pool, &spec, fault).expect("recover the restart image");
                drive(&store, &plan, m);
            },
            recover,
            |_, store: &PageStore, m| check(store, &plan, m),
        )?)
}

/// The runs [`check_page`] starts with, and their budget weights.
fn plan_runs(alg: PageAlgorithm, cfg: &Config) -> Vec<(RunSpec, usize)> {
    let modes: &[bool] = if cfg.tearing { &[true] } else { &[false, true] };
    let mut out = Vec::new();
    for (i, &torn) in modes.iter().enumerate() {
        let spec = RunSpec {
            alg,
            shape: SHAPE_4K,
            torn,
            store: false,
            restart: None,
        };
        out.push((spec, 3));
        out.push((
            RunSpec {
                restart: Some(i as u32),
                ..spec
            },
            1,
        ));
        out.push((
            RunSpec {
                shape: SHAPE_16K,
                ..spec
            },
            1,
        ));
    }
    out
}

/// The run names [`check_page`] starts with for `cfg`.
pub fn run_names(alg: PageAlgorithm, cfg: &Config) -> Vec<String> {
    plan_runs(alg, cfg).iter().map(|(s, _)| s.name()).collect()
}

/// Checks one algorithm with `cfg.budget` crash states split over its runs;
/// the pool size of `cfg` is replaced by the run's (64 KiB for 4 KiB pages,
/// 160 KiB for 16 KiB pages); its layout name, domain, tearing, crash
/// points, seed, nesting and progress settings are used. Returns one report
/// per run, named as [`check_page_run`] accepts.
pub fn check_page(
    alg: PageAlgorithm,
    cfg: Config,
) -> Result<Vec<(String, Report)>, PageCheckError> {
    check_page_with_fault(alg, cfg, Fault::None)
}

/// [`check_page`] with a planted bug (to show the check catches it).
#[doc(hidden)]
pub fn check_page_with_fault(
    alg: PageAlgorithm,
    cfg: Config,
    fault: Fault,
) -> Result<Vec<(String, Report)>, PageCheckError> {
    // Spend what is left on main runs with new seeds that also crash
    // between stores (new crash points, not repeats of the ones above).
    let modes: &[bool] = if cfg.tearing { &[true] } else { &[false, true] };
    let extra = |i: u64| RunSpec {
        alg,
        shape: SHAPE_4K,
        torn: modes[i as usize % modes.len()],
        store: true,
        restart: None,
    };
    spend_budget(
        &cfg,
        plan_runs(alg, &cfg),
        MAX_EXTRA,
        extra,
        RunSpec::name,
        |spec, c| run_one(spec, c, fault),
    )
}

/// Replays one run by name (`hybrid/4k/torn/restart1`), e.g. with
/// `cfg.only` set to a violation's reproducer and `cfg.seed` to its seed.
pub fn check_page_run(name: &str, cfg: Config) -> Result<Report, PageCheckError> {
    let spec = RunSpec::parse(name).map_err(|why| PageCheckError::unknown_run(name, why))?;
    run_one(spec, &cfg, Fault::None)
}

#[cfg(test)]
mod tests;
