//! P2's time breakdown of an operation [P2 §4.5, Fig. 8]: where the time
//! of a get, put or delete goes —
//!
//! - **SCAN**: finding things (index descent, run and filter probes, reading);
//! - **CC**: crash consistency (writing logs, flushing, fencing, root switches
//!   outside the allocator);
//! - **MM**: memory management (every call into the persistent allocator,
//!   its own flushes and fences included);
//! - **MOD**: modifying the data (building new nodes, copying values, in-place
//!   writes) and everything not marked otherwise.
//!
//! Off by default: a disabled [`phase`] costs one thread-local read. A
//! benchmark pass calls [`enable`] on its thread, runs operations, and
//! reads [`take`]. Time is charged to the innermost open phase: a
//! [`Guard`] switches to its phase and back to the enclosing one on drop,
//! charging the elapsed time at each switch.

use std::cell::Cell;
use std::time::Instant;

/// A share of P2's breakdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// SCAN: finding things (index descent, run and filter probes, reads).
    Scan = 0,
    /// CC: crash consistency (logs, flushes, fences, root switches) outside
    /// the allocator.
    Cc = 1,
    /// MM: memory management, every call into the persistent allocator.
    Mm = 2,
    /// MOD: modifying the data, and all time not charged elsewhere (the
    /// phase in force when none is open).
    Mod = 3,
}

/// Nanoseconds charged to each phase, indexed by `Phase as usize`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Breakdown {
    /// Nanoseconds per phase, indexed by `Phase as usize`.
    pub ns: [u64; 4],
}

impl Breakdown {
    /// Shares of the total (0 when nothing was charged).
    pub fn shares(&self) -> [f64; 4] {
        let total: u64 = self.ns.iter().sum();
        if total == 0 {
            return [0.0; 4];
        }
        self.ns.map(|n| n as f64 / total as f64)
    }
}

struct State {
    enabled: Cell<bool>,
    current: Cell<Phase>,
    since: Cell<Option<Instant>>,
    acc: Cell<[u64; 4]>,
}

thread_local! {
    static STATE: State = const {
        State {
            enabled: Cell::new(false),
            current: Cell::new(Phase::Mod),
            since: Cell::new(None),
            acc: Cell::new([0; 4]),
        }
    };
}

fn switch(s: &State, to: Phase) {
    let now = Instant::now();
    if let Some(t) = s.since.get() {
        let mut a = s.acc.get();
        a[s.current.get() as usize] += now.duration_since(t).as_nanos() as u64;
        s.acc.set(a);
    }
    s.current.set(to);
    s.since.set(Some(now));
}

/// Starts charging time on this thread (to MOD until a phase opens).
pub fn enable() {
    STATE.with(|s| {
        s.enabled.set(true);
        s.current.set(Phase::Mod);
        s.since.set(Some(Instant::now()));
        s.acc.set([0; 4]);
    });
}

/// Stops charging and returns what was charged since [`enable`].
pub fn take() -> Breakdown {
    STATE.with(|s| {
        if s.enabled.get() {
            switch(s, Phase::Mod);
        }
        s.enabled.set(false);
        s.since.set(None);
        Breakdown {
            ns: s.acc.replace([0; 4]),
        }
    })
}

/// Charges time to `p` until the guard drops (then to the enclosing phase).
#[must_use = "the phase ends when the guard drops"]
pub struct Guard {
    prev: Option<Phase>,
}

/// Opens phase `p` on this thread.
#[inline]
pub fn phase(p: Phase) -> Guard {
    STATE.with(|s| {
        if !s.enabled.get() {
            return Guard { prev: None };
        }
        let prev = s.current.get();
        if prev != p {
            switch(s, p);
        }
        Guard { prev: Some(prev) }
    })
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        if let Some(prev) = self.prev {
            STATE.with(|s| {
                if s.enabled.get() && s.current.get() != prev {
                    switch(s, prev);
                }
            });
        }
    }
}

/// A [`PAllocator`] whose thread handles charge every call to
/// [`Phase::Mm`]: the store wraps its allocator in it, so every engine's
/// memory-management time is measured without marking each call site.
pub struct Measured<A: ?Sized>(pub std::sync::Arc<A>);

use ferrite_alloc::{
    AllocStats, AllocThread, MetaOp, PAllocator, Publish, RecoveryReport, Reservation,
    Result as AResult,
};
use ferrite_pmem::POff;

impl<A: PAllocator + ?Sized> PAllocator for Measured<A> {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn thread(&self) -> AResult<Box<dyn AllocThread + Send + '_>> {
        let _g = phase(Phase::Mm);
        Ok(Box::new(MeasuredThread(self.0.thread()?)))
    }
    fn usable_size(&self, off: POff<u8>) -> AResult<usize> {
        self.0.usable_size(off)
    }
    fn root(&self) -> POff<u8> {
        self.0.root()
    }
    fn stats(&self) -> AllocStats {
        self.0.stats()
    }
    fn recovery(&self) -> &RecoveryReport {
        self.0.recovery()
    }
    fn for_each_allocated(&self, f: &mut dyn FnMut(POff<u8>, usize)) {
        self.0.for_each_allocated(f)
    }
    fn max_publish_ops(&self) -> usize {
        self.0.max_publish_ops()
    }
}

struct MeasuredThread<'a>(Box<dyn AllocThread + Send + 'a>);

impl AllocThread for MeasuredThread<'_> {
    fn reserve(&mut self, size: usize) -> AResult<Reservation> {
        let _g = phase(Phase::Mm);
        self.0.reserve(size)
    }
    fn cancel(&mut self, r: Reservation) -> AResult<()> {
        let _g = phase(Phase::Mm);
        self.0.cancel(r)
    }
    fn publish(&mut self, p: &Publish<'_>) -> AResult<()> {
        let _g = phase(Phase::Mm);
        self.0.publish(p)
    }
    fn prepare(&mut self, p: &Publish<'_>, out: &mut Vec<MetaOp>) -> AResult<()> {
        let _g = phase(Phase::Mm);
        self.0.prepare(p, out)
    }
    fn commit_prepared(&mut self, p: &Publish<'_>) {
        let _g = phase(Phase::Mm);
        self.0.commit_prepared(p)
    }
    fn abort_prepared(&mut self, p: &Publish<'_>) {
        let _g = phase(Phase::Mm);
        self.0.abort_prepared(p)
    }
    fn root(&mut self, size: usize) -> AResult<POff<u8>> {
        let _g = phase(Phase::Mm);
        self.0.root(size)
    }
    fn max_publish_ops(&self) -> usize {
        self.0.max_publish_ops()
    }
    fn alloc(&mut self, size: usize, link: Option<POff<u64>>) -> AResult<POff<u8>> {
        let _g = phase(Phase::Mm);
        self.0.alloc(size, link)
    }
    fn free(&mut self, off: POff<u8>, unlink: Option<POff<u64>>) -> AResult<()> {
        let _g = phase(Phase::Mm);
        self.0.free(off, unlink)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn spin(d: Duration) {
        let t = Instant::now();
        while t.elapsed() < d {}
    }

    #[test]
    fn time_goes_to_the_innermost_phase() {
        enable();
        {
            let _s = phase(Phase::Scan);
            spin(Duration::from_millis(4));
            {
                let _m = phase(Phase::Mm);
                spin(Duration::from_millis(8));
            }
            spin(Duration::from_millis(4));
        }
        spin(Duration::from_millis(2));
        let b = take();
        let [scan, cc, mm, modify] = b.ns;
        assert_eq!(cc, 0);
        // Lower bounds only (a preempted spin runs long, never short): time
        // after the inner phase must return to SCAN (else scan < 8 ms), and
        // the inner phase's must not stay in SCAN (else mm < 8 ms).
        assert!(scan >= 8_000_000, "{b:?}");
        assert!(mm >= 8_000_000, "{b:?}");
        assert!(modify >= 2_000_000, "{b:?}");
        // Scan's 8 ms were not charged to MM, nor MM's to scan.
        assert!(
            scan < mm + 4_000_000 + (modify - 2_000_000).max(scan / 2),
            "{b:?}"
        );
        let sh = b.shares();
        assert!((sh.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn disabled_charges_nothing() {
        let _ = take();
        {
            let _s = phase(Phase::Scan);
            spin(Duration::from_millis(1));
        }
        assert_eq!(take(), Breakdown::default());
    }
}
