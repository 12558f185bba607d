//! Deterministic interleaving of simulated threads on real OS threads.
//!
//! [`run`] runs one body per simulated thread, each on its own OS thread
//! (so each can be in the middle of its own call stack: two transactions
//! in flight at once), but only the holder of a *baton* ever runs. At each
//! medium event (store, flush, fence — the [`SimMedium`](crate::SimMedium)
//! callbacks, before the event takes effect) the holder may hand the baton
//! to another live thread; a seeded generator decides. Because exactly one
//! thread runs between two events and every hand-off happens at an event,
//! the global sequence of events — and so every crash point `k` — is a
//! function of the seed alone: a crash run replays the count run's events
//! up to its crash point, and `--seed S --at P` replays a state.
//!
//! # Invariants
//!
//! - At most one thread of a [`run`] executes outside a wait at any time
//!   (the baton holder). A thread waits only inside [`Lockstep`] (for the
//!   baton, or for a [`Lockstep::acquire`] token); it never blocks on
//!   anything else while another thread of the run holds what it needs —
//!   **the bodies must never block on a lock another body can hold across
//!   an event** (e.g. two data-structure operations with conflicting lock
//!   sets): take a [`Lockstep::acquire`] token for such a lock set instead,
//!   which waits by handing the baton over. Locks held across events
//!   inside the library (an allocator's central lock) are marked with
//!   [`ferrite_pmem::LockHeld`]: no hand-off happens inside such a
//!   section. A body that does block anyway
//!   stalls the run; the waiting thread then fails it after
//!   [`STALL`] with a panic naming the cause rather than hanging.
//! - When a body unwinds — the crash injected by the medium ([`Crashed`]),
//!   or a real panic — the run *stops*: every other thread unwinds with a
//!   private payload at its next event (or before it starts), so nothing
//!   runs past the crash. [`run`] joins all threads and resumes the unwind
//!   of the first body that unwound, on the caller's thread: to the
//!   explorer the workload unwound exactly as a single-threaded one does.
//! - Events issued while a thread unwinds (drops that flush or fence) pass
//!   without a scheduling decision: the crash state is already captured.
//! - A thread that is not inside [`run`] pays one thread-local lookup per
//!   event (the single-threaded path is otherwise unchanged).

use crate::thread::{Crashed, SimThread};
use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How long a thread waits for the baton before declaring the run stalled
/// (a body blocked on a lock the waiting thread holds).
pub const STALL: Duration = Duration::from_secs(60);

/// Payload of the unwind that stops the other threads of a run.
struct Stopped;

thread_local! {
    /// The run this OS thread takes part in, and its index there.
    static CURRENT: RefCell<Option<(Arc<Lockstep>, usize)>> = const { RefCell::new(None) };
}

/// Called by the simulated medium before each event takes effect.
#[inline]
pub(crate) fn at_event() {
    CURRENT.with(|c| {
        if let Some((ls, me)) = &*c.borrow() {
            ls.event(*me);
        }
    });
}

/// Called by the simulated medium when the running thread waits for
/// another's progress: hands the baton to the next live thread (if any),
/// which is the only way the awaited thread can run. Deterministic: the
/// hand-off is forced, not drawn.
#[inline]
pub(crate) fn at_wait() {
    CURRENT.with(|c| {
        if let Some((ls, me)) = &*c.borrow() {
            ls.wait_for_others(*me);
        }
    });
}

/// What a run did, for reports and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Medium events seen while another thread was live (scheduling decisions).
    pub decisions: u64,
    /// Baton hand-offs.
    pub switches: u64,
    /// Hand-offs forced by a [`Lockstep::acquire`] token.
    pub token_waits: u64,
}

struct Inner {
    /// The thread allowed to run.
    running: usize,
    /// Threads whose body returned or unwound.
    finished: Vec<bool>,
    /// Lock-set token each thread holds (see [`Lockstep::acquire`]).
    tokens: Vec<Option<u64>>,
    /// Token each thread waits for.
    waiting: Vec<Option<u64>>,
    /// Set when a body unwound: everyone else unwinds too.
    stopped: bool,
    /// splitmix64 state of the schedule.
    rng: u64,
    /// A decision switches when `next()` is a multiple of it.
    switch_one_in: u64,
    stats: Stats,
}

impl Inner {
    fn next(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The next live thread after `me` (round robin), if any.
    fn other(&self, me: usize) -> Option<usize> {
        let n = self.finished.len();
        (1..n).map(|d| (me + d) % n).find(|&t| !self.finished[t])
    }
}

/// The scheduler of one [`run`]. Bodies reach it through
/// [`Lockstep::current`] to take lock-set tokens.
pub struct Lockstep {
    inner: Mutex<Inner>,
    cv: Condvar,
}

impl Lockstep {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The run the calling thread takes part in, and its index.
    pub fn current() -> Option<(Arc<Lockstep>, usize)> {
        CURRENT.with(|c| c.borrow().clone())
    }

    /// Gives the baton to `to` and waits until it comes back to `me`.
    /// Unwinds with the stop payload when the run stopped meanwhile.
    fn hand_to<'a>(
        &'a self,
        mut g: MutexGuard<'a, Inner>,
        me: usize,
        to: usize,
    ) -> MutexGuard<'a, Inner> {
        g.running = to;
        g.stats.switches += 1;
        self.cv.notify_all();
        self.wait_turn(g, me)
    }

    /// Waits until `me` holds the baton; unwinds if the run stopped.
    fn wait_turn<'a>(&'a self, mut g: MutexGuard<'a, Inner>, me: usize) -> MutexGuard<'a, Inner> {
        while g.running != me && !g.stopped {
            let (ng, to) = self
                .cv
                .wait_timeout(g, STALL)
                .unwrap_or_else(|p| p.into_inner());
            g = ng;
            if to.timed_out() && g.running != me && !g.stopped {
                let holder = g.running;
                drop(g);
                panic!(
                    "lockstep: thread {holder} made no progress for {STALL:?} while thread {me} \
                     waited for it (a body blocked on a lock another body holds?)"
                );
            }
        }
        if g.stopped {
            drop(g);
            resume_unwind(Box::new(Stopped));
        }
        g
    }

    /// The scheduler's state at an event of the baton holder, or `None`
    /// when no decision is taken: while unwinding (the crash state is
    /// captured, nothing to schedule) or inside a `LockHeld` section
    /// (another thread could block on the lock held, so the holder keeps
    /// the baton, deterministically: the section is part of the serialized
    /// execution). Unwinds if the run stopped.
    fn decide(&self) -> Option<MutexGuard<'_, Inner>> {
        if std::thread::panicking() || ferrite_pmem::LockHeld::active() {
            return None;
        }
        let g = self.lock();
        if g.stopped {
            drop(g);
            resume_unwind(Box::new(Stopped));
        }
        Some(g)
    }

    /// Thread `me` waits for another thread's progress: hand over.
    fn wait_for_others(&self, me: usize) {
        let Some(mut g) = self.decide() else {
            return;
        };
        if let Some(to) = g.other(me) {
            g.stats.token_waits += 1;
            drop(self.hand_to(g, me, to));
        }
    }

    /// A medium event of thread `me` (the baton holder): maybe hand over.
    fn event(&self, me: usize) {
        let Some(mut g) = self.decide() else {
            return;
        };
        let Some(to) = g.other(me) else {
            return;
        };
        g.stats.decisions += 1;
        let one_in = g.switch_one_in;
        if g.next().is_multiple_of(one_in) {
            drop(self.hand_to(g, me, to));
        }
    }

    /// Takes lock-set token `token` for the calling body: while another
    /// live body holds the same token, hands it the baton (so it runs until
    /// it releases the token) instead of blocking. A body holds at most one
    /// token; [`Lockstep::release`] gives it back — and the baton with it
    /// to a body waiting for that token, which would otherwise starve
    /// (hand-offs happen at events, and the holder is between events only
    /// while it holds no token). Use it around operations whose real locks
    /// may conflict, so that a body never blocks on them.
    pub fn acquire(&self, me: usize, token: u64) {
        let mut g = self.lock();
        assert!(g.tokens[me].is_none(), "lockstep: one token per body");
        loop {
            let holder = (0..g.tokens.len()).find(|&t| t != me && g.tokens[t] == Some(token));
            match holder {
                None => break,
                Some(h) => {
                    g.stats.token_waits += 1;
                    g.waiting[me] = Some(token);
                    g = self.hand_to(g, me, h);
                    g.waiting[me] = None;
                }
            }
        }
        g.tokens[me] = Some(token);
    }

    /// Releases the calling body's token; a body waiting for it runs next.
    pub fn release(&self, me: usize) {
        let mut g = self.lock();
        let Some(token) = g.tokens[me].take() else {
            return;
        };
        let n = g.waiting.len();
        let waiter = (1..n)
            .map(|d| (me + d) % n)
            .find(|&t| !g.finished[t] && g.waiting[t] == Some(token));
        if let Some(w) = waiter {
            drop(self.hand_to(g, me, w));
        }
    }

    /// Body `me` is done (returned, or unwound when `unwound`): the baton
    /// goes to the next live thread.
    fn finish(&self, me: usize, unwound: bool) {
        let mut g = self.lock();
        g.finished[me] = true;
        g.tokens[me] = None;
        g.waiting[me] = None;
        if unwound {
            g.stopped = true;
        }
        if let Some(to) = g.other(me) {
            g.running = to;
        }
        self.cv.notify_all();
    }
}

/// Runs `bodies[i]` as simulated thread `i` ([`SimThread::enter`]), each on
/// its own OS thread, interleaved at medium events by a schedule drawn from
/// `seed`: at each event of the running body while another is live, the
/// baton passes on with probability `1 / switch_one_in`. Body 0 starts.
/// Returns the bodies' results and the scheduling statistics, or resumes
/// the unwind of the first body that unwound (see the module docs).
pub fn run<R: Send>(
    seed: u64,
    switch_one_in: u64,
    bodies: Vec<Box<dyn FnOnce() -> R + Send + '_>>,
) -> (Vec<R>, Stats) {
    let n = bodies.len();
    let ls = Arc::new(Lockstep {
        inner: Mutex::new(Inner {
            running: 0,
            finished: vec![false; n],
            tokens: vec![None; n],
            waiting: vec![None; n],
            stopped: false,
            rng: seed,
            switch_one_in: switch_one_in.max(1),
            stats: Stats::default(),
        }),
        cv: Condvar::new(),
    });
    // (index, payload) of the first body to unwind, in unwind order.
    let first_unwind: Mutex<Option<Box<dyn std::any::Any + Send>>> = Mutex::new(None);
    let results: Vec<Option<R>> = std::thread::scope(|scope| {
        let handles: Vec<_> = bodies
            .into_iter()
            .enumerate()
            .map(|(i, body)| {
                let ls = ls.clone();
                let first_unwind = &first_unwind;
                std::thread::Builder::new()
                    .name(format!("lockstep-{i}"))
                    .spawn_scoped(scope, move || {
                        let _sim = SimThread::enter(i as u32);
                        CURRENT.with(|c| *c.borrow_mut() = Some((ls.clone(), i)));
                        let r = catch_unwind(AssertUnwindSafe(|| {
                            drop(ls.wait_turn(ls.lock(), i));
                            body()
                        }));
                        CURRENT.with(|c| *c.borrow_mut() = None);
                        match r {
                            Ok(v) => {
                                ls.finish(i, false);
                                Some(v)
                            }
                            Err(p) => {
                                if !p.is::<Stopped>() {
                                    let mut f =
                                        first_unwind.lock().unwrap_or_else(|p| p.into_inner());
                                    if f.is_none() {
                                        *f = Some(p);
                                    }
                                }
                                ls.finish(i, true);
                                None
                            }
                        }
                    })
                    .expect("spawn a lockstep thread")
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(None))
            .collect()
    });
    if let Some(p) = first_unwind.into_inner().unwrap_or_else(|p| p.into_inner()) {
        resume_unwind(p);
    }
    let stats = ls.lock().stats;
    match results.into_iter().collect::<Option<Vec<R>>>() {
        Some(v) => (v, stats),
        // Only a stop unwinds with `Stopped`, and a stop has a first unwind.
        None => resume_unwind(Box::new(Crashed)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{CrashAt, SimMedium};
    use ferrite_pmem::{Domain, Pool, PoolOptions};

    fn sim_pool(at: Option<CrashAt>) -> (Pool, Arc<SimMedium>) {
        let opts = PoolOptions::new("ls", 16384);
        let base = Pool::create_in_memory(&opts.clone().domain(Domain::Adr)).unwrap();
        let img = base.image();
        let sim = Arc::new(SimMedium::new(Domain::Adr, false, img.clone(), at));
        let p = Pool::open_image(&img, &opts, Domain::Adr, Some(sim.clone())).unwrap();
        (p, sim)
    }

    /// Each body persists its own words; the order of (thread, i) pairs
    /// observed is the schedule.
    fn trace(p: &Pool, seed: u64) -> Vec<(usize, usize)> {
        let log = Mutex::new(Vec::new());
        let r = p.data();
        let bodies: Vec<Box<dyn FnOnce() + Send + '_>> = (0..2)
            .map(|t| {
                let (r, log) = (&r, &log);
                Box::new(move || {
                    for i in 0..20 {
                        log.lock().unwrap().push((t, i));
                        r.write(64 * (t * 20 + i), &[t as u8 + 1; 8]);
                        r.persist(64 * (t * 20 + i), 8);
                    }
                }) as Box<dyn FnOnce() + Send + '_>
            })
            .collect();
        let (_, stats) = run(seed, 2, bodies);
        assert!(stats.switches > 0);
        log.into_inner().unwrap()
    }

    #[test]
    fn the_schedule_is_a_function_of_the_seed() {
        let (p, _) = sim_pool(None);
        let a = trace(&p, 7);
        let (p, _) = sim_pool(None);
        assert_eq!(a, trace(&p, 7));
        let (p, _) = sim_pool(None);
        assert_ne!(a, trace(&p, 8), "another seed, another interleaving");
        assert!(a.windows(2).any(|w| w[0].0 != w[1].0));
    }

    #[test]
    fn a_crash_stops_every_thread_and_unwinds_the_caller() {
        let (p, sim) = sim_pool(Some(CrashAt::Fence(9)));
        let done = Mutex::new(Vec::new());
        let r = catch_unwind(AssertUnwindSafe(|| {
            let bodies: Vec<Box<dyn FnOnce() + Send + '_>> = (0..2)
                .map(|t| {
                    let (r, done) = (p.data(), &done);
                    Box::new(move || {
                        for i in 0..20 {
                            r.write(64 * (t * 20 + i), &[1; 8]);
                            r.persist(64 * (t * 20 + i), 8);
                        }
                        done.lock().unwrap().push(t);
                    }) as Box<dyn FnOnce() + Send + '_>
                })
                .collect();
            run(3, 2, bodies)
        }));
        let e = r.expect_err("the crash unwinds the caller");
        assert!(e.is::<Crashed>());
        assert!(done.lock().unwrap().is_empty(), "nobody ran to the end");
        assert_eq!(sim.take_captured().unwrap().at, CrashAt::Fence(9));
        assert_eq!(sim.counts().fences, 9, "no fence after the crash point");
    }

    #[test]
    fn tokens_serialize_conflicting_bodies_without_blocking() {
        let (p, _) = sim_pool(None);
        let inside = Mutex::new(Vec::new());
        let bodies: Vec<Box<dyn FnOnce() + Send + '_>> = (0..2)
            .map(|t| {
                let (r, inside) = (p.data(), &inside);
                Box::new(move || {
                    let (ls, me) = Lockstep::current().unwrap();
                    for i in 0..6 {
                        ls.acquire(me, 42);
                        inside.lock().unwrap().push((t, true));
                        for j in 0..4 {
                            r.persist(64 * (t * 24 + i * 4 + j), 8);
                        }
                        inside.lock().unwrap().push((t, false));
                        ls.release(me);
                    }
                }) as Box<dyn FnOnce() + Send + '_>
            })
            .collect();
        let (_, stats) = run(5, 1, bodies);
        // Enter and leave alternate: never two bodies inside at once.
        let v = inside.into_inner().unwrap();
        for w in v.chunks(2) {
            assert_eq!((w[0].0, w[0].1, w[1].1), (w[1].0, true, false));
        }
        assert!(stats.token_waits > 0);
    }
}
