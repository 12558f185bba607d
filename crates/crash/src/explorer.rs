//! The crash-state explorer.
//!
//! A test hands it a workload, a recovery function and an invariant check:
//!
//! ```ignore
//! let report = Explorer::new(Config::new("my-layout").budget(2000))
//!     .explore(
//!         |pool, model: &mut Vec<u64>| { /* mutate the pool, push what was acknowledged */ },
//!         |pool| MyThing::recover(pool).map_err(|e| e.to_string()),
//!         |pool, thing, model| thing.check_against(model),
//!     )?;
//! assert!(report.violations.is_empty(), "{report}");
//! ```
//!
//! How it works:
//! 1. Builds the initial pool image (header plus the optional `setup`), all
//!    durable.
//! 2. Runs the workload once on a simulated medium to count its fences F
//!    (and flushes L).
//! 3. Chooses crash points — every fence 1..=F, the end of the workload, and
//!    with `crash_on_flush` every flush — or a seeded sample of them when
//!    they exceed the budget.
//! 4. For each point re-runs the workload from the initial image until the
//!    crash is injected, which unwinds out of the workload. The model the
//!    workload filled in so far (what it saw acknowledged) is kept.
//! 5. Enumerates post-crash images: all of them when their number fits the
//!    per-point quota, else a seeded sample that always includes "nothing in
//!    flight survived" and "everything in flight survived".
//! 6. Opens each image as a fresh pool, runs recovery, then the check. With
//!    `nested`, recovery is also crashed at one of its own fences and run
//!    again on the resulting image, proving it idempotent.
//!
//! The workload must be deterministic (same fences on every run) and run on
//! the calling thread — or on threads of a [`crate::lockstep`] run it
//! starts, which serializes them at medium events by a seeded schedule
//! and, at the crash, stops them all and unwinds the calling thread as a
//! single-threaded workload would. Every violation carries a [`Repro`]
//! that replays exactly that state (`Config::only`).

use crate::sim::{Counts, CrashAt, CrashState, SimMedium};
use crate::thread::Crashed;
use ferrite_pmem::{Domain, Pool, PoolOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which post-crash image of a crash state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageSel {
    /// Index in the full enumeration (mixed radix over the in-flight units).
    Exhaustive(u128),
    /// Seeded sample: 0 = no in-flight unit survives, 1 = all survive with
    /// their newest content, n ≥ 2 = random subset derived from (seed, point, n).
    Sampled(u64),
}

impl fmt::Display for ImageSel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageSel::Exhaustive(i) => write!(f, "e{i}"),
            ImageSel::Sampled(i) => write!(f, "s{i}"),
        }
    }
}

impl std::str::FromStr for ImageSel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("bad image id '{s}' (expected eN or sN)");
        match s.split_at_checked(1) {
            Some(("e", n)) => n.parse().map(ImageSel::Exhaustive).map_err(|_| bad()),
            Some(("s", n)) => n.parse().map(ImageSel::Sampled).map_err(|_| bad()),
            _ => Err(bad()),
        }
    }
}

/// Identifies one explored crash state; with the seed it replays it exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repro {
    pub at: CrashAt,
    pub image: ImageSel,
    /// A crash injected into recovery of that image, and the image chosen then.
    pub nested: Option<(CrashAt, ImageSel)>,
}

impl fmt::Display for Repro {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.at, self.image)?;
        if let Some((at, img)) = self.nested {
            write!(f, "+{at}/{img}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Repro {
    type Err = String;
    /// Parses `fence:17/s5` or `fence:17/e3+fence:2/s9`.
    fn from_str(s: &str) -> Result<Self, String> {
        let one = |p: &str| -> Result<(CrashAt, ImageSel), String> {
            let (a, i) = p
                .split_once('/')
                .ok_or_else(|| format!("bad reproducer '{s}' (expected POINT/IMAGE)"))?;
            Ok((a.parse()?, i.parse()?))
        };
        let (first, nested) = match s.split_once('+') {
            Some((a, b)) => (a, Some(one(b)?)),
            None => (s, None),
        };
        let (at, image) = one(first)?;
        Ok(Repro { at, image, nested })
    }
}

/// Explorer settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Layout name of the simulated pool.
    pub layout: String,
    /// Size of the simulated pool in bytes (keep it small: images are copied).
    pub pool_size: u64,
    /// Makes the simulated pool growable from `pool_size` up to this many
    /// bytes ([`PoolOptions::max_size`]); its growths are crash points like
    /// any other (the simulator's durable image grows with the medium).
    pub max_size: Option<u64>,
    pub domain: Domain,
    /// 8-byte units instead of cache lines (x86's real atomicity guarantee).
    pub tearing: bool,
    /// Also crash at every flush, not only at fences.
    pub crash_on_flush: bool,
    /// Also crash before every store: needed to see states between two
    /// stores under `eadr` (where the image is the live image) and partially
    /// written lines under `adr`.
    pub crash_on_store: bool,
    /// Upper bound on crash states (recover + check runs), nested ones included.
    pub budget: usize,
    pub seed: u64,
    /// Crash recovery itself once per explored image that fences.
    pub nested: bool,
    /// Progress lines on stderr.
    pub progress: bool,
    /// Explore only this state.
    pub only: Option<Repro>,
    /// Violations kept in the report (all are counted).
    pub keep_violations: usize,
    /// What the platform does to the image at power failure beyond the
    /// domain's crash model (e.g. PDRAM-Lite dropping the redo logs of
    /// transactions in flight): applied to every crash image, nested ones
    /// included, before recovery sees it.
    pub power_fail: Option<PowerFail>,
}

/// A platform rule applied to a crash image (see [`Config::power_fail`]).
#[derive(Clone)]
pub struct PowerFail(pub std::sync::Arc<ImageRule>);

/// A function that rewrites a crash image in place.
pub type ImageRule = dyn Fn(&mut [u8]) + Send + Sync;

impl std::fmt::Debug for PowerFail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PowerFail(..)")
    }
}

impl Config {
    pub fn new(layout: &str) -> Config {
        Config {
            layout: layout.to_string(),
            pool_size: 64 * 1024,
            max_size: None,
            domain: Domain::Adr,
            tearing: false,
            crash_on_flush: false,
            crash_on_store: false,
            budget: 1000,
            seed: 1,
            nested: true,
            progress: false,
            only: None,
            keep_violations: 10,
            power_fail: None,
        }
    }

    /// Applies `rule` to every crash image (see [`Config::power_fail`]).
    pub fn power_fail(mut self, rule: PowerFail) -> Config {
        self.power_fail = Some(rule);
        self
    }
    pub fn budget(mut self, b: usize) -> Config {
        self.budget = b;
        self
    }
    pub fn seed(mut self, s: u64) -> Config {
        self.seed = s;
        self
    }
    pub fn domain(mut self, d: Domain) -> Config {
        self.domain = d;
        self
    }
    pub fn pool_size(mut self, n: u64) -> Config {
        self.pool_size = n;
        self
    }
    /// Makes the simulated pool growable up to `n` bytes.
    pub fn max_size(mut self, n: u64) -> Config {
        self.max_size = Some(n);
        self
    }
    pub fn tearing(mut self, t: bool) -> Config {
        self.tearing = t;
        self
    }
    pub fn crash_on_flush(mut self, t: bool) -> Config {
        self.crash_on_flush = t;
        self
    }
    pub fn crash_on_store(mut self, t: bool) -> Config {
        self.crash_on_store = t;
        self
    }
    pub fn nested(mut self, t: bool) -> Config {
        self.nested = t;
        self
    }
    pub fn progress(mut self, t: bool) -> Config {
        self.progress = t;
        self
    }
    pub fn only(mut self, r: Option<Repro>) -> Config {
        self.only = r;
        self
    }
}

/// One failed crash state.
#[derive(Clone, Debug)]
pub struct Violation {
    pub repro: Repro,
    pub seed: u64,
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "crash {} (reproduce: --seed {} --at {}): {}",
            self.repro, self.seed, self.repro, self.message
        )
    }
}

/// One exploration's walk over its crash points ([`Explorer::explore`]).
struct Walk {
    report: Report,
    /// Crash states to explore at most.
    budget: usize,
    /// Samples the crash points, then each nested crash.
    rng: ChaCha8Rng,
    /// States one image costs: 2 once a recovery is seen to fence (the
    /// image and one nested crash of its recovery), else 1.
    nested_cost: usize,
}

/// What an exploration did and found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Fences, flushes and stores of one uncrashed workload run.
    pub fences: u64,
    pub flushes: u64,
    pub stores: u64,
    pub crash_points: usize,
    /// Crash states explored (recover + check runs), nested included.
    pub states: usize,
    pub nested_states: usize,
    pub exhaustive_points: usize,
    pub sampled_points: usize,
    /// Largest number of in-flight units seen at a crash point.
    pub max_in_flight: usize,
    pub violation_count: usize,
    pub violations: Vec<Violation>,
    pub elapsed: Duration,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.violation_count == 0
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} crash states ({} nested) at {} crash points ({} exhaustive, {} sampled); workload: {} fences, {} flushes, {} stores; max {} units in flight; {:.2?}",
            self.states,
            self.nested_states,
            self.crash_points,
            self.exhaustive_points,
            self.sampled_points,
            self.fences,
            self.flushes,
            self.stores,
            self.max_in_flight,
            self.elapsed
        )?;
        for v in &self.violations {
            writeln!(f, "  VIOLATION {v}")?;
        }
        if self.violation_count > self.violations.len() {
            writeln!(
                f,
                "  … and {} more",
                self.violation_count - self.violations.len()
            )?;
        }
        Ok(())
    }
}

/// Errors that stop an exploration before it starts.
#[derive(Debug, thiserror::Error)]
pub enum ExploreError {
    #[error("cannot build the simulated pool: {0}")]
    Pool(#[from] ferrite_pmem::PoolError),
    #[error("the {0} domain loses everything on a crash; there is nothing to explore")]
    Volatile(Domain),
    #[error("workload failed without a crash: {0}")]
    Workload(String),
}

type Setup<'a> = Box<dyn Fn(&Pool) + 'a>;

/// The explorer. See the module documentation.
pub struct Explorer<'a> {
    cfg: Config,
    setup: Option<Setup<'a>>,
}

/// The text of a panic payload (`panic!` with a literal or a format).
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic".into()
    }
}

/// Mixes values into one seed (splitmix64 finaliser over a running hash).
fn mix(parts: &[u64]) -> u64 {
    let mut h = 0x243f_6a88_85a3_08d3u64;
    for &p in parts {
        h ^= p
            .wrapping_add(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(h << 6)
            .wrapping_add(h >> 2);
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^= h >> 31;
    }
    h
}

/// A stable number for a crash point, used to salt sampled images.
pub(crate) fn crash_point_key(at: CrashAt) -> u64 {
    match at {
        CrashAt::Fence(n) => n << 2,
        CrashAt::Flush(n) => (n << 2) | 1,
        CrashAt::Store(n) => (n << 2) | 3,
        CrashAt::End => 2,
    }
}

/// Builds the image `sel` of crash state `st`; `salt` identifies the state
/// (the explorer salts with the crash point, see [`crash_point_key`]), so
/// `(seed, salt, sel)` always names the same image. (Checks with several
/// simulated threads no longer need their own crash loop: the explorer
/// fences per simulated thread, see [`crate::sim::SimThread`] and
/// [`crate::lockstep`].)
pub(crate) fn build_image(st: &CrashState, sel: ImageSel, seed: u64, salt: &[u64]) -> Vec<u8> {
    match sel {
        ImageSel::Exhaustive(mut i) => st.build(|_, u| {
            let radix = 1 + u.candidates.len() as u128;
            let d = (i % radix) as usize;
            i /= radix;
            d
        }),
        ImageSel::Sampled(0) => st.build(|_, _| 0),
        ImageSel::Sampled(1) => st.build(|_, u| u.candidates.len()),
        ImageSel::Sampled(n) => {
            let mut parts = vec![seed];
            parts.extend_from_slice(salt);
            parts.push(n);
            let mut rng = ChaCha8Rng::seed_from_u64(mix(&parts));
            // A per-image survival probability mixes "almost nothing" and
            // "almost everything survived" images, not only half-and-half.
            let p: f64 = rng.random();
            st.build(|_, u| {
                if rng.random::<f64>() < p {
                    rng.random_range(1..=u.candidates.len())
                } else {
                    0
                }
            })
        }
    }
}

/// How a simulated run ([`Explorer::simulate`]) ended, with the model the
/// workload filled in.
pub enum SimRun<M> {
    /// The crash was injected: the state at the crash point.
    Crashed(CrashState, M),
    /// The workload returned: the state after it (as [`CrashAt::End`]).
    Finished(CrashState, M),
    /// The workload panicked with something other than the crash.
    Panicked(String),
}

impl<'a> Explorer<'a> {
    pub fn new(cfg: Config) -> Explorer<'a> {
        Explorer { cfg, setup: None }
    }

    /// State created before the workload starts and considered durable
    /// (e.g. formatting the structure under test).
    pub fn setup(mut self, f: impl Fn(&Pool) + 'a) -> Explorer<'a> {
        self.setup = Some(Box::new(f));
        self
    }

    fn opts(&self) -> PoolOptions {
        let o = PoolOptions::new(&self.cfg.layout, self.cfg.pool_size);
        match self.cfg.max_size {
            Some(m) => o.max_size(m),
            None => o,
        }
    }

    fn initial_image(&self) -> Result<Vec<u8>, ExploreError> {
        let p = Pool::create_in_memory(&self.opts().domain(self.cfg.domain))?;
        if let Some(s) = &self.setup {
            s(&p);
        }
        Ok(p.image())
    }

    /// Runs `f` on a simulated pool opened from `image` (this explorer's
    /// layout, size, domain and tearing mode), crashing at `at`. For checks
    /// that build their own starting points — a restart run crashes a
    /// workload once and explores on top of a recovered image of it.
    pub fn simulate<M: Default>(
        &self,
        image: &[u8],
        at: Option<CrashAt>,
        f: impl FnOnce(&Pool, &mut M),
    ) -> Result<(SimRun<M>, Counts), ExploreError> {
        let sim = Arc::new(SimMedium::new(
            self.cfg.domain,
            self.cfg.tearing,
            image.to_vec(),
            at,
        ));
        let pool = Pool::open_image(image, &self.opts(), self.cfg.domain, Some(sim.clone()))?;
        let mut model = M::default();
        let r = catch_unwind(AssertUnwindSafe(|| f(&pool, &mut model)));
        let counts = sim.counts();
        let end = match r {
            Ok(()) => SimRun::Finished(sim.capture_now(pool.medium().map(), CrashAt::End), model),
            Err(p) if p.is::<Crashed>() => SimRun::Crashed(
                sim.take_captured()
                    .expect("crash unwinding without a captured state"),
                model,
            ),
            Err(p) => SimRun::Panicked(panic_message(p.as_ref())),
        };
        Ok((end, counts))
    }

    /// Recovers `image` (crashing recovery at `nested` if given, then
    /// recovering again) and checks it. Returns the recovery's fence count of
    /// the final, uncrashed recovery.
    fn recover_and_check<M, T>(
        &self,
        image: Vec<u8>,
        model: &M,
        nested: Option<(CrashAt, ImageSel)>,
        salt: &[u64],
        recover: &impl Fn(&Pool) -> Result<T, String>,
        check: &impl Fn(&Pool, &T, &M) -> Result<(), String>,
    ) -> Result<u64, String> {
        let mut image = image;
        if let Some(pf) = &self.cfg.power_fail {
            (pf.0)(&mut image);
        }
        if let Some((at, sel)) = nested {
            let (end, _) = self
                .simulate::<()>(&image, Some(at), |p, _| {
                    if let Err(e) = recover(p) {
                        panic!("recovery failed: {e}");
                    }
                })
                .map_err(|e| format!("pool does not open after the crash: {e}"))?;
            image = match end {
                SimRun::Crashed(st, _) | SimRun::Finished(st, _) => {
                    let mut s = salt.to_vec();
                    s.extend_from_slice(&[crash_point_key(at), 0xdead]);
                    let mut img = build_image(&st, sel, self.cfg.seed, &s);
                    if let Some(pf) = &self.cfg.power_fail {
                        (pf.0)(&mut img);
                    }
                    img
                }
                SimRun::Panicked(m) => return Err(format!("first recovery: {m}")),
            };
        }
        let sim = Arc::new(SimMedium::new(
            self.cfg.domain,
            self.cfg.tearing,
            image.clone(),
            None,
        ));
        let pool = Pool::open_image(&image, &self.opts(), self.cfg.domain, Some(sim.clone()))
            .map_err(|e| format!("pool does not open after the crash: {e}"))?;
        let r = catch_unwind(AssertUnwindSafe(|| {
            let t = recover(&pool).map_err(|e| format!("recovery failed: {e}"))?;
            check(&pool, &t, model).map_err(|e| format!("invariant violated: {e}"))
        }));
        match r {
            Ok(Ok(())) => Ok(sim.counts().fences),
            Ok(Err(e)) => Err(e),
            Err(p) => Err(format!("panic: {}", panic_message(p.as_ref()))),
        }
    }

    /// Explores crashes of `workload`. See the module documentation.
    pub fn explore<M, T>(
        &self,
        workload: impl Fn(&Pool, &mut M),
        recover: impl Fn(&Pool) -> Result<T, String>,
        check: impl Fn(&Pool, &T, &M) -> Result<(), String>,
    ) -> Result<Report, ExploreError>
    where
        M: Default,
    {
        if self.cfg.domain == Domain::Volatile {
            return Err(ExploreError::Volatile(self.cfg.domain));
        }
        let start = Instant::now();
        let initial = self.initial_image()?;
        let mut walk = Walk {
            report: Report::default(),
            budget: self.cfg.budget.max(1),
            rng: ChaCha8Rng::seed_from_u64(mix(&[self.cfg.seed, 0x9017])),
            nested_cost: 1,
        };

        // Count run.
        let (end, counts) = self.simulate::<M>(&initial, None, &workload)?;
        if let SimRun::Panicked(m) = end {
            return Err(ExploreError::Workload(m));
        }
        walk.report.fences = counts.fences;
        walk.report.flushes = counts.flushes;
        walk.report.stores = counts.stores;
        let points = self.crash_points(&counts, walk.budget, &mut walk.rng);
        walk.report.crash_points = points.len();

        let mut last_progress = Instant::now();
        for (pi, &at) in points.iter().enumerate() {
            if walk.report.states >= walk.budget {
                break;
            }
            let Some((state, model)) = self.crash_at(&mut walk.report, &initial, at, &workload)?
            else {
                continue;
            };
            let report = &mut walk.report;
            report.max_in_flight = report.max_in_flight.max(state.units.len());
            // Budget left over by points with few images flows to later ones.
            let quota = (walk.budget.saturating_sub(report.states)
                / (points.len() - pi)
                / walk.nested_cost)
                .max(1) as u128;
            let images = self.pick_images(report, &state, quota);
            let salt = [crash_point_key(at)];
            for sel in images {
                if walk.report.states >= walk.budget {
                    break;
                }
                let image = build_image(&state, sel, self.cfg.seed, &salt);
                self.check_image(&mut walk, image, &model, (at, sel), &recover, &check);
            }
            let report = &walk.report;
            if self.cfg.progress && last_progress.elapsed() > Duration::from_secs(2) {
                last_progress = Instant::now();
                eprintln!(
                    "  … crash point {}/{}, {} states, {} violations, {:.0?}",
                    pi + 1,
                    points.len(),
                    report.states,
                    report.violation_count,
                    start.elapsed()
                );
            }
        }
        walk.report.elapsed = start.elapsed();
        Ok(walk.report)
    }

    /// The crash points to explore: every fence (and flush, store, with
    /// those options) of the count run and the end; when there are more
    /// than half the budget, a seeded uniform sample of them in crash
    /// order, the end always kept (at least two images per point).
    fn crash_points(&self, counts: &Counts, budget: usize, rng: &mut ChaCha8Rng) -> Vec<CrashAt> {
        let mut points: Vec<CrashAt> = (1..=counts.fences).map(CrashAt::Fence).collect();
        if self.cfg.crash_on_flush {
            points.extend((1..=counts.flushes).map(CrashAt::Flush));
        }
        if self.cfg.crash_on_store {
            points.extend((1..=counts.stores).map(CrashAt::Store));
        }
        points.push(CrashAt::End);

        if let Some(only) = self.cfg.only {
            points = vec![only.at];
        }
        // At least two images per point: sample the points when they are too many.
        let max_points = (budget / 2).max(1);
        if points.len() > max_points {
            let end = points.pop();
            let keep = max_points.saturating_sub(1);
            // Partial Fisher–Yates: a seeded uniform sample, then crash order.
            for i in 0..keep.min(points.len()) {
                let j = rng.random_range(i..points.len());
                points.swap(i, j);
            }
            points.truncate(keep);
            points.sort();
            points.extend(end);
        }
        points
    }

    /// Runs `workload` from `initial` to the crash point `at`: the state
    /// there and the model, or `None` (recorded as a violation) when the
    /// workload does not reach it or panics.
    fn crash_at<M: Default>(
        &self,
        report: &mut Report,
        initial: &[u8],
        at: CrashAt,
        workload: &impl Fn(&Pool, &mut M),
    ) -> Result<Option<(CrashState, M)>, ExploreError> {
        let (end, _) = self.simulate::<M>(initial, (at != CrashAt::End).then_some(at), workload)?;
        let repro = Repro {
            at,
            image: ImageSel::Sampled(0),
            nested: None,
        };
        Ok(match end {
            SimRun::Crashed(s, m) => Some((s, m)),
            SimRun::Finished(s, m) if at == CrashAt::End => Some((s, m)),
            SimRun::Finished(..) => {
                self.record(
                    report,
                    repro,
                    format!("workload finished before reaching {at}: it is not deterministic"),
                );
                None
            }
            SimRun::Panicked(m) => {
                self.record(report, repro, format!("workload panicked: {m}"));
                None
            }
        })
    }

    /// The post-crash images of `state` to check: all of them when they
    /// are at most `quota`, else `quota` sampled ones (or the one image
    /// of a replay).
    fn pick_images(&self, report: &mut Report, state: &CrashState, quota: u128) -> Vec<ImageSel> {
        let count = state.image_count();
        if let Some(only) = self.cfg.only {
            vec![only.image]
        } else if count <= quota {
            report.exhaustive_points += 1;
            (0..count).map(ImageSel::Exhaustive).collect()
        } else {
            report.sampled_points += 1;
            (0..quota as u64).map(ImageSel::Sampled).collect()
        }
    }

    /// Recovers and checks one post-crash `image` of the crash point `at`
    /// (image `sel`), then, when recovery fenced and the budget allows,
    /// the same image with a crash sampled inside its recovery.
    fn check_image<M, T>(
        &self,
        walk: &mut Walk,
        image: Vec<u8>,
        model: &M,
        (at, sel): (CrashAt, ImageSel),
        recover: &impl Fn(&Pool) -> Result<T, String>,
        check: &impl Fn(&Pool, &T, &M) -> Result<(), String>,
    ) {
        let salt = [crash_point_key(at)];
        let nested_only = self.cfg.only.and_then(|o| o.nested);
        walk.report.states += 1;
        let repro = Repro {
            at,
            image: sel,
            nested: nested_only,
        };
        let mut salt2 = salt.to_vec();
        salt2.push(match sel {
            ImageSel::Exhaustive(i) => i as u64,
            ImageSel::Sampled(i) => i ^ (1 << 63),
        });
        match self.recover_and_check(image.clone(), model, nested_only, &salt2, recover, check) {
            Err(msg) => self.record(&mut walk.report, repro, msg),
            Ok(rec_fences) => {
                if self.cfg.nested
                    && self.cfg.only.is_none()
                    && rec_fences > 0
                    && walk.report.states < walk.budget
                {
                    walk.nested_cost = 2;
                    let j = walk.rng.random_range(1..=rec_fences);
                    let sel2 = ImageSel::Sampled(walk.rng.random_range(0..1u64 << 32));
                    let nested = Some((CrashAt::Fence(j), sel2));
                    walk.report.states += 1;
                    walk.report.nested_states += 1;
                    if let Err(msg) =
                        self.recover_and_check(image, model, nested, &salt2, recover, check)
                    {
                        self.record(
                            &mut walk.report,
                            Repro {
                                at,
                                image: sel,
                                nested,
                            },
                            msg,
                        );
                    }
                }
            }
        }
    }

    fn record(&self, report: &mut Report, repro: Repro, message: String) {
        report.violation_count += 1;
        if report.violations.len() < self.cfg.keep_violations {
            report.violations.push(Violation {
                repro,
                seed: self.cfg.seed,
                message,
            });
        }
    }
}

/// Runs a check made of several explorer runs under one budget.
///
/// Each run of `plan` gets `left · weight / remaining weight` crash states
/// (at least 1), so budget a run leaves unused flows to the later ones.
/// What is still left goes to extra runs: `extra(i)` is made with seed
/// `cfg.seed + 1 + i`, until the budget is spent, `max_extra` runs were
/// made, or a run explores nothing. No extra runs when `cfg.only` replays
/// one state. Returns `(name(run), report)` per run.
pub fn spend_budget<S, E>(
    cfg: &Config,
    plan: Vec<(S, usize)>,
    max_extra: u64,
    extra: impl Fn(u64) -> S,
    name: impl Fn(&S) -> String,
    mut run: impl FnMut(S, &Config) -> Result<Report, E>,
) -> Result<Vec<(String, Report)>, E> {
    let mut left = cfg.budget;
    let mut weight: usize = plan.iter().map(|(_, w)| w).sum();
    let mut out = Vec::new();
    for (spec, w) in plan {
        let share = (left * w / weight).max(1);
        weight -= w;
        let n = name(&spec);
        let rep = run(spec, &cfg.clone().budget(share))?;
        left = left.saturating_sub(rep.states);
        out.push((n, rep));
    }
    let mut i = 0u64;
    while left > 0 && cfg.only.is_none() && i < max_extra {
        let spec = extra(i);
        let n = name(&spec);
        let c = cfg.clone().budget(left).seed(cfg.seed.wrapping_add(1 + i));
        let rep = run(spec, &c)?;
        i += 1;
        if rep.states == 0 {
            break;
        }
        left = left.saturating_sub(rep.states);
        out.push((n, rep));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repro_round_trips() {
        for s in ["fence:17/s5", "end/e3", "flush:2/e0+fence:4/s99"] {
            let r: Repro = s.parse().unwrap();
            assert_eq!(r.to_string(), s);
        }
        assert!("fence:1".parse::<Repro>().is_err());
        assert!("fence:1/x1".parse::<Repro>().is_err());
    }

    #[test]
    fn exhaustive_enumeration_covers_every_subset_once() {
        use crate::sim::InFlight;
        let st = CrashState {
            at: CrashAt::End,
            durable: vec![0; 3],
            units: vec![
                InFlight {
                    offset: 0,
                    candidates: vec![vec![1]],
                },
                InFlight {
                    offset: 1,
                    candidates: vec![vec![1], vec![2]],
                },
                InFlight {
                    offset: 2,
                    candidates: vec![vec![1]],
                },
            ],
        };
        assert_eq!(st.image_count(), 12);
        let mut seen: Vec<Vec<u8>> = (0..12)
            .map(|i| build_image(&st, ImageSel::Exhaustive(i), 0, &[]))
            .collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 12);
        assert_eq!(
            build_image(&st, ImageSel::Sampled(0), 0, &[]),
            vec![0, 0, 0]
        );
        assert_eq!(
            build_image(&st, ImageSel::Sampled(1), 0, &[]),
            vec![1, 2, 1]
        );
        assert_eq!(
            build_image(&st, ImageSel::Sampled(7), 5, &[1]),
            build_image(&st, ImageSel::Sampled(7), 5, &[1])
        );
    }
}
