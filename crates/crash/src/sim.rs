//! The simulated medium: durable image, in-flight units, crash injection.
//!
//! Semantics (ARCHITECTURE.md, "Crash simulator semantics"):
//! - The pool's mapping is the **live** image (what the CPU sees). This
//!   observer keeps the **durable** image (what survives power loss).
//! - `flush(range)` captures the current content of every unit overlapping
//!   the flushed cache lines into a pending set (non-temporal stores arrive
//!   here the same way); `fence()` applies the pending set to the durable image.
//! - A crash is injected when the workload reaches its k-th fence (before it
//!   takes effect) or, optionally, its k-th flush (before it captures). The
//!   possible post-crash images are the durable image plus any subset of the
//!   *in-flight units*: units flushed but not fenced (with their flushed
//!   content) and units whose live content differs from durable (with live
//!   content — the hardware may evict any dirty line at any time).
//! - Several *simulated threads* (one OS thread switching with
//!   [`SimThread::enter`]) each have their own pending set: a fence completes
//!   only the flushes of the thread that issues it, as `sfence` orders only
//!   its own core's write-backs. A capture never overwrites newer durable
//!   content (coherence: a line written back after a newer one became durable
//!   carries content at least that new), so stale captures are dropped.
//!   Workloads that never switch threads run on thread 0 and see exactly the
//!   single-thread semantics above. Simulated threads may also run on
//!   their own OS threads, interleaved deterministically at these events
//!   by [`crate::lockstep`]; the state here is shared behind one mutex.
//! - A unit is a cache line, an aligned 8-byte word in tearing mode, or a
//!   4 KiB page for `msync`. For `eadr`/`pdram`/`pdram-lite` the image is the
//!   live image at the crash point.

// Re-exported where they were first defined (other crates name them
// `ferrite_crash::sim::…`).
pub use crate::thread::{Crashed, SimThread};
use ferrite_pmem::{CACHE_LINE, CrashModel, Domain, Mapping, SimObserver};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// A unit's content captured by a flush of simulated thread `thread`;
/// `seq` orders captures globally.
struct Capture {
    thread: u32,
    seq: u64,
    content: Vec<u8>,
}

/// Where to crash: the n-th fence or the n-th flush (1-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CrashAt {
    Fence(u64),
    Flush(u64),
    /// Before the n-th ordinary store through a region.
    Store(u64),
    /// After the workload has returned (everything not fenced is in flight).
    End,
}

impl std::fmt::Display for CrashAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CrashAt::Fence(n) => write!(f, "fence:{n}"),
            CrashAt::Flush(n) => write!(f, "flush:{n}"),
            CrashAt::Store(n) => write!(f, "store:{n}"),
            CrashAt::End => f.write_str("end"),
        }
    }
}

impl std::str::FromStr for CrashAt {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("bad crash point '{s}' (expected fence:N, flush:N, store:N or end)");
        if s == "end" {
            return Ok(CrashAt::End);
        }
        let (kind, n) = s.split_once(':').ok_or_else(bad)?;
        let n: u64 = n.parse().map_err(|_| bad())?;
        match kind {
            "fence" if n > 0 => Ok(CrashAt::Fence(n)),
            "flush" if n > 0 => Ok(CrashAt::Flush(n)),
            "store" if n > 0 => Ok(CrashAt::Store(n)),
            _ => Err(bad()),
        }
    }
}

/// One in-flight unit at a crash: `offset..offset+unit` may hold its durable
/// bytes or any one of `candidates`.
#[derive(Clone, Debug)]
pub struct InFlight {
    pub offset: usize,
    pub candidates: Vec<Vec<u8>>,
}

/// Everything a crash can leave behind.
#[derive(Clone, Debug)]
pub struct CrashState {
    pub at: CrashAt,
    pub durable: Vec<u8>,
    pub units: Vec<InFlight>,
}

impl CrashState {
    /// Number of distinct images (saturating): product of (1 + candidates).
    pub fn image_count(&self) -> u128 {
        self.units.iter().fold(1u128, |acc, u| {
            acc.saturating_mul(1 + u.candidates.len() as u128)
        })
    }

    /// Builds the image where unit `i` takes choice `choice(i)`: 0 keeps the
    /// durable bytes, `c ≥ 1` applies candidate `c - 1`.
    pub fn build(&self, mut choice: impl FnMut(usize, &InFlight) -> usize) -> Vec<u8> {
        let mut img = self.durable.clone();
        for (i, u) in self.units.iter().enumerate() {
            let c = choice(i, u);
            if c > 0 {
                let cand = &u.candidates[c - 1];
                img[u.offset..u.offset + cand.len()].copy_from_slice(cand);
            }
        }
        img
    }

    /// The image in which about half of the in-flight units survive, each
    /// with one of its possible contents, picked by the seed `pick` (a
    /// splitmix64 stream): where half-done operations are. Restart runs
    /// recover such an image and explore on top of it.
    pub fn build_seeded(&self, pick: u64) -> Vec<u8> {
        let mut s = splitmix64(pick);
        self.build(|_, u| {
            s = splitmix64(s);
            if s & 1 == 1 {
                1 + (s >> 1) as usize % u.candidates.len()
            } else {
                0
            }
        })
    }
}

/// splitmix64.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Events seen by a simulated medium.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub fences: u64,
    pub flushes: u64,
    pub stores: u64,
}

struct State {
    model: CrashModel,
    durable: Vec<u8>,
    /// Unit index → captures not yet fenced (at most one per thread).
    pending: BTreeMap<usize, Vec<Capture>>,
    /// Unit index → `seq` of the capture that made it durable.
    durable_seq: HashMap<usize, u64>,
    next_seq: u64,
    fences: u64,
    flushes: u64,
    stores: u64,
    crash_at: Option<CrashAt>,
    captured: Option<CrashState>,
}

/// The [`SimObserver`] that turns a pool on anonymous memory into a medium
/// that can lose power.
pub struct SimMedium {
    state: Mutex<State>,
}

impl SimMedium {
    /// A simulator whose durable image starts as `initial` (the pool image
    /// the live mapping is opened from).
    pub fn new(
        domain: Domain,
        tearing: bool,
        initial: Vec<u8>,
        crash_at: Option<CrashAt>,
    ) -> SimMedium {
        SimMedium {
            state: Mutex::new(State {
                model: domain.crash_model(tearing),
                durable: initial,
                pending: BTreeMap::new(),
                durable_seq: HashMap::new(),
                next_seq: 0,
                fences: 0,
                flushes: 0,
                stores: 0,
                crash_at,
                captured: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fences, flushes and stores seen so far.
    pub fn counts(&self) -> Counts {
        let s = self.lock();
        Counts {
            fences: s.fences,
            flushes: s.flushes,
            stores: s.stores,
        }
    }

    /// The crash state captured at the crash point, if it was reached.
    pub fn take_captured(&self) -> Option<CrashState> {
        self.lock().captured.take()
    }

    /// Captures the state now (used for [`CrashAt::End`]).
    pub fn capture_now(&self, map: &Mapping, at: CrashAt) -> CrashState {
        let s = self.lock();
        capture(&s, map, at)
    }

    fn crash(&self, mut s: std::sync::MutexGuard<'_, State>, map: &Mapping, at: CrashAt) -> ! {
        let st = capture(&s, map, at);
        s.captured = Some(st);
        drop(s); // never unwind holding the lock
        std::panic::resume_unwind(Box::new(Crashed))
    }
}

fn unit_size(model: CrashModel) -> usize {
    match model {
        CrashModel::InFlight { unit } => unit,
        _ => CACHE_LINE,
    }
}

fn capture(s: &State, map: &Mapping, at: CrashAt) -> CrashState {
    // A growable medium: what is accessible now (its durable image grew
    // with it, see `grown`).
    let mut live = vec![0u8; map.mapped()];
    map.read(0, &mut live);
    match s.model {
        CrashModel::LiveImage => CrashState {
            at,
            durable: live,
            units: Vec::new(),
        },
        CrashModel::Nothing => CrashState {
            at,
            durable: vec![0u8; map.mapped()],
            units: Vec::new(),
        },
        CrashModel::InFlight { unit } => {
            let mut units = Vec::new();
            for (idx, (l, d)) in live.chunks(unit).zip(s.durable.chunks(unit)).enumerate() {
                // Flushed contents in capture order, then the live content
                // (any dirty line may be evicted), each once and only where
                // it differs from what is durable.
                let mut candidates: Vec<Vec<u8>> = Vec::new();
                let captured = s.pending.get(&idx).map(|v| v.as_slice()).unwrap_or(&[]);
                for c in captured.iter().map(|c| c.content.as_slice()).chain([l]) {
                    if c != d && !candidates.iter().any(|x| x.as_slice() == c) {
                        candidates.push(c.to_vec());
                    }
                }
                if candidates.is_empty() {
                    continue;
                }
                units.push(InFlight {
                    offset: idx * unit,
                    candidates,
                });
            }
            CrashState {
                at,
                durable: s.durable.clone(),
                units,
            }
        }
    }
}

impl SimObserver for SimMedium {
    fn waiting(&self) {
        crate::lockstep::at_wait();
    }

    /// A growth extends the durable image with zeros at once: a grown
    /// file's length is durable before the growth returns
    /// ([`ferrite_pmem::Mapping::grow_to`]), and its new blocks read zero.
    fn grown(&self, _map: &Mapping, len: usize) {
        let mut s = self.lock();
        if s.durable.len() < len {
            s.durable.resize(len, 0);
        }
    }

    fn flushed(&self, map: &Mapping, off: usize, len: usize) {
        // Under a lockstep run the baton may pass here, before the event
        // counts: the schedule decides which thread's event comes next.
        crate::lockstep::at_event();
        let mut s = self.lock();
        s.flushes += 1;
        let n = s.flushes;
        if s.crash_at == Some(CrashAt::Flush(n)) {
            self.crash(s, map, CrashAt::Flush(n));
        }
        let unit = unit_size(s.model);
        if !matches!(s.model, CrashModel::InFlight { .. }) {
            return;
        }
        // The hardware writes back whole lines (or pages for msync): capture
        // every unit of every line the range touches.
        let gran = unit.max(CACHE_LINE);
        let start = off / gran * gran;
        let end = (off + len).div_ceil(gran) * gran;
        let end = end.min(map.mapped());
        let mut buf = vec![0u8; unit];
        let mut u = start;
        while u < end {
            map.read(u, &mut buf);
            let (thread, seq) = (SimThread::current(), s.next_seq);
            s.next_seq += 1;
            let caps = s.pending.entry(u / unit).or_default();
            caps.retain(|c| c.thread != thread);
            caps.push(Capture {
                thread,
                seq,
                content: buf.clone(),
            });
            u += unit;
        }
    }

    fn storing(&self, map: &Mapping, _off: usize, _len: usize) {
        // Under a lockstep run the baton may pass here, before the event
        // counts: the schedule decides which thread's event comes next.
        crate::lockstep::at_event();
        let mut s = self.lock();
        s.stores += 1;
        let n = s.stores;
        if s.crash_at == Some(CrashAt::Store(n)) {
            self.crash(s, map, CrashAt::Store(n));
        }
    }

    fn fenced(&self, map: &Mapping) {
        // Under a lockstep run the baton may pass here, before the event
        // counts: the schedule decides which thread's event comes next.
        crate::lockstep::at_event();
        let mut s = self.lock();
        s.fences += 1;
        if s.crash_at == Some(CrashAt::Fence(s.fences)) {
            let n = s.fences;
            self.crash(s, map, CrashAt::Fence(n));
        }
        if let CrashModel::InFlight { unit } = s.model {
            let thread = SimThread::current();
            let st = &mut *s;
            st.pending.retain(|&idx, caps| {
                if let Some(i) = caps.iter().position(|c| c.thread == thread) {
                    let c = caps.swap_remove(i);
                    let newest = st.durable_seq.get(&idx).copied();
                    if newest.is_none_or(|n| c.seq > n) {
                        st.durable[idx * unit..idx * unit + c.content.len()]
                            .copy_from_slice(&c.content);
                        st.durable_seq.insert(idx, c.seq);
                        // Older captures of other threads can never land now.
                        caps.retain(|o| o.seq > c.seq);
                    }
                }
                !caps.is_empty()
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_pmem::{Pool, PoolOptions};
    use std::sync::Arc;

    fn sim_pool(domain: Domain, tearing: bool) -> (Pool, Arc<SimMedium>) {
        let opts = PoolOptions::new("sim", 16384);
        let base = Pool::create_in_memory(&opts.clone().domain(domain)).unwrap();
        let img = base.image();
        let sim = Arc::new(SimMedium::new(domain, tearing, img.clone(), None));
        let p = Pool::open_image(&img, &opts, domain, Some(sim.clone())).unwrap();
        (p, sim)
    }

    #[test]
    fn unflushed_and_flushed_lines_are_in_flight_until_fenced() {
        let (p, sim) = sim_pool(Domain::Adr, false);
        let r = p.data();
        r.write(0, &[1; 8]); // dirty, not flushed
        r.write(64, &[2; 8]);
        r.flush(64, 8); // flushed, not fenced
        r.write(64, &[3; 8]); // and dirtied again
        let st = sim.capture_now(p.medium().map(), CrashAt::End);
        assert_eq!(st.units.len(), 2);
        assert_eq!(st.units[0].offset, 4096);
        assert_eq!(st.units[0].candidates.len(), 1);
        assert_eq!(
            st.units[1].candidates.len(),
            2,
            "flushed content and newer live content"
        );
        assert_eq!(st.image_count(), 2 * 3);
        r.fence();
        let st = sim.capture_now(p.medium().map(), CrashAt::End);
        // line 64 is durable with [2;8]; its live [3;8] and line 0 are dirty.
        assert_eq!(st.units.len(), 2);
        assert_eq!(&st.durable[4096 + 64..4096 + 72], &[2; 8]);
        r.persist(0, 128);
        let st = sim.capture_now(p.medium().map(), CrashAt::End);
        assert!(st.units.is_empty());
    }

    #[test]
    fn tearing_mode_splits_lines_into_words() {
        let (p, sim) = sim_pool(Domain::Adr, true);
        p.data().write(0, &[9; 64]);
        let st = sim.capture_now(p.medium().map(), CrashAt::End);
        assert_eq!(st.units.len(), 8);
    }

    #[test]
    fn eadr_image_is_live() {
        let (p, sim) = sim_pool(Domain::Eadr, false);
        p.data().write(0, &[9; 64]);
        let st = sim.capture_now(p.medium().map(), CrashAt::End);
        assert!(st.units.is_empty());
        assert_eq!(&st.durable[4096..4160], &[9; 64]);
    }

    #[test]
    fn msync_units_are_pages() {
        let (p, sim) = sim_pool(Domain::Msync, false);
        p.data().write(0, &[9; 1]);
        p.data().write(4095, &[9; 2]);
        let st = sim.capture_now(p.medium().map(), CrashAt::End);
        assert_eq!(st.units.len(), 2);
        assert_eq!(st.units[0].candidates[0].len(), 4096);
    }

    #[test]
    fn a_fence_completes_only_its_own_threads_flushes() {
        let (p, sim) = sim_pool(Domain::Adr, false);
        let r = p.data();
        {
            let _a = SimThread::enter(1);
            r.write(0, &[1; 8]);
            r.flush(0, 8); // thread 1 never fences
        }
        {
            let _b = SimThread::enter(2);
            r.write(64, &[2; 8]);
            r.persist(64, 8);
        }
        let st = sim.capture_now(p.medium().map(), CrashAt::End);
        assert_eq!(
            &st.durable[4096 + 64..4096 + 72],
            &[2; 8],
            "thread 2's own flush is durable"
        );
        assert_eq!(st.units.len(), 1, "thread 1's flush is still in flight");
        assert_eq!(st.units[0].offset, 4096);
        {
            let _a = SimThread::enter(1);
            r.fence();
        }
        assert!(
            sim.capture_now(p.medium().map(), CrashAt::End)
                .units
                .is_empty()
        );
        assert_eq!(
            SimThread::current(),
            0,
            "guards restore the previous thread"
        );
    }

    #[test]
    fn a_stale_capture_never_overwrites_newer_durable_content() {
        let (p, sim) = sim_pool(Domain::Adr, false);
        let r = p.data();
        let a = SimThread::enter(1);
        r.write(0, &[1; 8]);
        r.flush(0, 8); // captures [1; 8]
        drop(a);
        {
            let _b = SimThread::enter(2);
            r.write(0, &[2; 8]);
            r.persist(0, 8); // [2; 8] durable
        }
        let _a = SimThread::enter(1);
        r.fence(); // must not bring [1; 8] back
        let st = sim.capture_now(p.medium().map(), CrashAt::End);
        assert_eq!(&st.durable[4096..4104], &[2; 8]);
        assert!(st.units.is_empty());
    }

    #[test]
    fn crash_point_parsing() {
        assert_eq!("fence:3".parse::<CrashAt>(), Ok(CrashAt::Fence(3)));
        assert_eq!("end".parse::<CrashAt>(), Ok(CrashAt::End));
        assert!("fence:0".parse::<CrashAt>().is_err());
        assert!("x".parse::<CrashAt>().is_err());
    }
}
