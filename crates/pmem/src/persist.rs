//! The persister: the one door through which every flush and fence passes
//! (ARCHITECTURE.md, rule 1).
//!
//! A [`Medium`] is a mapping plus the persister of the durability domain it
//! was opened with. Components never see either directly; they hold
//! [`Region`](crate::Region)s, windows onto a medium whose persist methods
//! end here. Because everything funnels through this file, the counters are
//! exact and the crash simulator (an optional [`SimObserver`]) sees every
//! flush and fence.
//!
//! Per-domain behaviour of the primitives:
//!
//! | domain                     | `flush(range)`                   | `fence()`                  | big copies (≥ threshold) |
//! |----------------------------|----------------------------------|----------------------------|--------------------------|
//! | `adr`                      | clwb/clflushopt/clflush per line | `sfence`                   | non-temporal + flush ends |
//! | `eadr`/`pdram`/`pdram-lite`| nothing (counts media blocks)    | `sfence`                   | non-temporal             |
//! | `msync`                    | remembers the pages              | `msync(MS_SYNC)` of them   | ordinary copy            |
//! | `volatile`                 | nothing                          | nothing                    | ordinary copy            |

use crate::arch::{self, CACHE_LINE, FlushKind};
use crate::counters;
use crate::domain::Domain;
use crate::map::{Mapping, line_span};
use std::io;
use std::sync::{Arc, Mutex};

/// Default size at or above which persistent copies use non-temporal stores
/// (PMDK's `PMEM_MOVNT_THRESHOLD` default).
pub const DEFAULT_NT_THRESHOLD: usize = 256;

/// Hook through which the crash simulator watches a simulated medium.
///
/// Implemented by `ferrite-crash`. `flushed` is called for every range written
/// back (by a flush or by non-temporal stores) *after* the bytes are in the
/// mapping, so the observer can capture the content in flight; `fenced` is
/// called for every fence before it takes effect. Either may end the workload
/// by unwinding (`std::panic::resume_unwind`) to inject a crash. `storing`
/// is called before every ordinary store made through a [`Region`](crate::Region),
/// so a crash can also fall between two stores.
pub trait SimObserver: Send + Sync {
    /// Bytes `off..off + len` of `map` were written back (flush or
    /// non-temporal stores); their new content is already in `map`. They
    /// become durable at the next [`fenced`](Self::fenced).
    fn flushed(&self, map: &Mapping, off: usize, len: usize);
    /// A fence is about to order every earlier write-back on this thread:
    /// the simulator makes them durable, or crashes first.
    fn fenced(&self, map: &Mapping);
    /// An ordinary store to `off..off + len` of `map` is about to happen
    /// (default: ignored; only crash-on-store explorations use it).
    fn storing(&self, _map: &Mapping, _off: usize, _len: usize) {}
    /// The medium grew to `len` accessible bytes ([`Medium::grow_to`]); the
    /// new bytes are zero and, like a file's new length, durable.
    fn grown(&self, _map: &Mapping, _len: usize) {}
    /// The caller waits for another thread (a lock it found taken, a
    /// transaction it must let finish): a simulator that runs threads one at
    /// a time hands control over here, or the wait would never end.
    fn waiting(&self) {}
}

thread_local! {
    static LOCK_HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Marks a critical section in which this thread holds a volatile lock
/// that other threads may wait for *across* persistent-memory events
/// (stores, flushes, fences) — e.g. an allocator's central lock held while
/// it persists a page header. A crash simulator that interleaves threads
/// at those events (a [`SimObserver`]: `ferrite-crash`'s lockstep runs)
/// must not hand control to another thread inside one, or that thread
/// could block on the lock while the holder waits for its turn. Nests;
/// costs one thread-local update on entry and on exit, and nothing else
/// outside a simulation.
#[must_use = "the section ends when the guard drops"]
pub struct LockHeld {
    /// The count is this thread's: the guard must stay on it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl LockHeld {
    /// Enters a section on this thread; it ends when the guard drops.
    pub fn enter() -> LockHeld {
        LOCK_HELD.with(|c| c.set(c.get() + 1));
        LockHeld {
            _not_send: std::marker::PhantomData,
        }
    }

    /// True while this thread is inside such a section.
    pub fn active() -> bool {
        LOCK_HELD.with(|c| c.get() > 0)
    }
}

impl Drop for LockHeld {
    fn drop(&mut self) {
        LOCK_HELD.with(|c| c.set(c.get() - 1));
    }
}

/// How a medium persists, fixed when it is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PersistConfig {
    /// The durability domain: decides what flush, fence and persist do.
    pub domain: Domain,
    /// Flush instruction for `adr`; ignored by other domains.
    pub flush: FlushKind,
    /// Copies of at least this many bytes use non-temporal stores.
    pub nt_threshold: usize,
}

impl PersistConfig {
    /// A configuration for `domain` with the CPU's best flush instruction
    /// (or `FERRITE_FLUSH`). Fails for `adr` on a CPU without any flush.
    pub fn for_domain(domain: Domain) -> Result<PersistConfig, String> {
        let flush = crate::domain::flush_kind_from_env()?;
        let flush =
            match (domain, flush) {
                (_, Some(k)) => k,
                (Domain::Adr, None) => return Err(
                    "the adr domain needs a cache-line flush instruction, and this CPU has none"
                        .into(),
                ),
                (_, None) => FlushKind::Clflush,
            };
        Ok(PersistConfig {
            domain,
            flush,
            nt_threshold: DEFAULT_NT_THRESHOLD,
        })
    }
}

/// A mapping and its persister.
pub struct Medium {
    map: Mapping,
    cfg: PersistConfig,
    observer: Option<Arc<dyn SimObserver>>,
    /// `msync` domain: page ranges flushed since the last fence.
    msync_pending: Mutex<Vec<(usize, usize)>>,
}

impl std::fmt::Debug for Medium {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Medium")
            .field("len", &self.map.len())
            .field("kind", &self.map.kind())
            .field("cfg", &self.cfg)
            .field("simulated", &self.observer.is_some())
            .finish()
    }
}

impl Medium {
    /// A medium over `map` that persists as `cfg` says; `observer` (a crash
    /// simulator) sees every write-back, fence and store when given.
    pub fn new(map: Mapping, cfg: PersistConfig, observer: Option<Arc<dyn SimObserver>>) -> Medium {
        Medium {
            map,
            cfg,
            observer,
            msync_pending: Mutex::new(Vec::new()),
        }
    }

    /// The mapped bytes.
    pub fn map(&self) -> &Mapping {
        &self.map
    }

    /// How this medium persists (fixed at open).
    pub fn config(&self) -> PersistConfig {
        self.cfg
    }

    /// Makes at least `want` bytes of a growable medium accessible
    /// ([`Mapping::grow_to`]: for a file, its new length is durable when
    /// this returns) and tells the simulator, whose durable image grows
    /// with it. Returns the accessible length.
    pub fn grow_to(&self, want: usize) -> io::Result<usize> {
        let before = self.map.mapped();
        let now = self.map.grow_to(want)?;
        if now > before
            && let Some(o) = &self.observer
        {
            o.grown(&self.map, now);
        }
        Ok(now)
    }

    /// The durability domain ([`PersistConfig::domain`]).
    pub fn domain(&self) -> Domain {
        self.cfg.domain
    }

    /// True when this medium is watched by the crash simulator.
    pub fn is_simulated(&self) -> bool {
        self.observer.is_some()
    }

    /// Called in a wait loop for another thread's progress: a spin hint
    /// (and, after many rounds, a yield) on real hardware; under the crash
    /// simulator it lets the scheduler of lockstep runs hand over, since the
    /// thread waited for cannot run otherwise. `round` counts the waits of
    /// this loop from 0.
    #[inline]
    pub fn wait_hint(&self, round: u32) {
        if let Some(o) = &self.observer {
            o.waiting();
        } else if round < 64 {
            for _ in 0..(1u32 << round.min(6)) {
                std::hint::spin_loop();
            }
        } else {
            std::thread::yield_now();
        }
    }

    /// Tells the simulator (if any) that `off..off+len` is about to be stored
    /// to, and records the store in a persist trace (feature `trace`).
    #[inline(always)]
    pub(crate) fn before_store(&self, off: usize, len: usize) {
        self.observe_store(off, len);
        #[cfg(feature = "trace")]
        crate::trace::note(crate::trace::EventKind::Store, self.map.addr(off), len);
    }

    /// Records a load of `off..off+len` in a persist trace (feature
    /// `trace`); nothing otherwise.
    #[inline(always)]
    pub(crate) fn before_load(&self, off: usize, len: usize) {
        #[cfg(feature = "trace")]
        crate::trace::note(crate::trace::EventKind::Load, self.map.addr(off), len);
        #[cfg(not(feature = "trace"))]
        let _ = (off, len);
    }

    /// The simulator's half of [`before_store`](Self::before_store): copies
    /// trace their stores themselves, as ordinary or non-temporal.
    #[inline(always)]
    fn observe_store(&self, off: usize, len: usize) {
        if let Some(o) = &self.observer {
            o.storing(&self.map, off, len);
        }
    }

    /// Records a store of a copy or fill that took the non-temporal path
    /// (`nt`) or the ordinary one.
    #[inline(always)]
    fn trace_copy(&self, off: usize, len: usize, nt: bool) {
        #[cfg(feature = "trace")]
        crate::trace::note(
            if nt {
                crate::trace::EventKind::NtStore
            } else {
                crate::trace::EventKind::Store
            },
            self.map.addr(off),
            len,
        );
        #[cfg(not(feature = "trace"))]
        let _ = (off, len, nt);
    }

    /// Writes back the lines overlapping `off..off+len`; they are durable only
    /// after the next [`fence`](Self::fence).
    #[inline]
    pub fn flush(&self, off: usize, len: usize) {
        if len == 0 {
            return;
        }
        // Recorded in every domain: the trace is what the program asked of
        // the door; the model decides what a flush costs in its domain.
        #[cfg(feature = "trace")]
        crate::trace::note(crate::trace::EventKind::Flush, self.map.addr(off), len);
        match self.cfg.domain {
            Domain::Adr => {
                let (first, n) = if self.observer.is_some() {
                    self.map.check(off, len).unwrap_or_else(|e| panic!("{e}"));
                    line_span(self.map.addr(off), len)
                } else {
                    self.map.flush_lines(self.cfg.flush, off, len)
                };
                counters::note_lines_flushed(first, n, true);
                if let Some(o) = &self.observer {
                    o.flushed(&self.map, off, len);
                }
            }
            Domain::Eadr | Domain::Pdram | Domain::PdramLite => {
                self.map.check(off, len).unwrap_or_else(|e| panic!("{e}"));
                counters::note_blocks(self.map.addr(off), len);
            }
            Domain::Msync => {
                self.map.check(off, len).unwrap_or_else(|e| panic!("{e}"));
                let (first, n) = line_span(self.map.addr(off), len);
                counters::note_lines_flushed(first, n, false);
                self.msync_pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((off, off + len));
                if let Some(o) = &self.observer {
                    o.flushed(&self.map, off, len);
                }
            }
            Domain::Volatile => {}
        }
    }

    /// Orders and completes everything flushed before it. In `msync` this is
    /// where the pages are written.
    #[inline]
    pub fn fence(&self) {
        #[cfg(feature = "trace")]
        crate::trace::note(crate::trace::EventKind::Fence, 0, 0);
        match self.cfg.domain {
            Domain::Volatile => {
                counters::note_fence(false);
                return;
            }
            Domain::Msync => {
                if let Some(o) = &self.observer {
                    o.fenced(&self.map);
                }
                let mut pending = std::mem::take(
                    &mut *self.msync_pending.lock().unwrap_or_else(|p| p.into_inner()),
                );
                if self.observer.is_none() {
                    for (s, e) in coalesce_pages(&mut pending) {
                        match self.map.msync(s, e - s) {
                            Ok(bytes) => counters::note_msync(bytes),
                            // A failed msync means acknowledged data may not be on disk and
                            // the kernel may already have dropped the dirty pages (the
                            // "fsyncgate" lesson): carrying on would silently lie.
                            Err(err) => panic!("msync failed, durability lost: {err}"),
                        }
                    }
                } else {
                    for (s, e) in coalesce_pages(&mut pending) {
                        counters::note_msync(e - s);
                    }
                }
                counters::note_fence(true);
                return;
            }
            _ => {}
        }
        if let Some(o) = &self.observer {
            o.fenced(&self.map);
        } else {
            arch::sfence();
        }
        counters::note_fence(true);
    }

    /// `flush` then `fence`.
    #[inline]
    pub fn persist(&self, off: usize, len: usize) {
        self.flush(off, len);
        self.fence();
    }

    /// Copies `src` to `off` and writes it back, without the final fence
    /// (PMDK's `PMEM_F_MEM_NODRAIN`). Uses non-temporal stores at or above the
    /// threshold in the domains where that helps.
    pub(crate) fn copy_nodrain(&self, off: usize, src: &[u8]) {
        self.observe_store(off, src.len());
        let nt_domain = matches!(
            self.cfg.domain,
            Domain::Adr | Domain::Eadr | Domain::Pdram | Domain::PdramLite
        );
        let nt = nt_domain && src.len() >= self.cfg.nt_threshold;
        self.trace_copy(off, src.len(), nt);
        if nt {
            let (s, e) = self.map.nt_copy(off, src);
            self.after_nt(off, src.len(), s, e);
        } else {
            self.map.write(off, src);
            self.flush(off, src.len());
        }
    }

    /// Fills `len` bytes with `byte` and writes them back, without the fence.
    pub fn fill_nodrain(&self, off: usize, len: usize, byte: u8) {
        self.observe_store(off, len);
        let nt_domain = matches!(
            self.cfg.domain,
            Domain::Adr | Domain::Eadr | Domain::Pdram | Domain::PdramLite
        );
        let nt = nt_domain && len >= self.cfg.nt_threshold;
        self.trace_copy(off, len, nt);
        if nt {
            let (s, e) = self.map.nt_fill(off, len, byte);
            self.after_nt(off, len, s, e);
        } else {
            self.map.fill(off, len, byte);
            self.flush(off, len);
        }
    }

    /// Copies with non-temporal stores regardless of size (the unaligned head
    /// and tail are flushed); durable after the next fence.
    pub(crate) fn copy_nt(&self, off: usize, src: &[u8]) {
        self.observe_store(off, src.len());
        let nt = !matches!(self.cfg.domain, Domain::Msync | Domain::Volatile);
        self.trace_copy(off, src.len(), nt);
        match self.cfg.domain {
            Domain::Msync | Domain::Volatile => {
                self.map.write(off, src);
                self.flush(off, src.len());
            }
            _ => {
                let (s, e) = self.map.nt_copy(off, src);
                self.after_nt(off, src.len(), s, e);
            }
        }
    }

    /// Bookkeeping after a non-temporal write of `off..off+len` whose
    /// relative sub-range `s..e` went around the cache.
    fn after_nt(&self, off: usize, len: usize, s: usize, e: usize) {
        counters::note_nt_bytes(e - s);
        counters::note_blocks(self.map.addr(off + s), e - s);
        // Head and tail were ordinary stores: flush their lines.
        if s > 0 {
            self.flush_quiet(off, s);
        }
        if e < len {
            self.flush_quiet(off + e, len - e);
        }
        if let Some(o) = &self.observer {
            o.flushed(&self.map, off, len);
        }
    }

    /// Flush without notifying the observer (the caller notifies for the
    /// whole range).
    fn flush_quiet(&self, off: usize, len: usize) {
        match self.cfg.domain {
            Domain::Adr => {
                let (first, n) = if self.observer.is_some() {
                    line_span(self.map.addr(off), len)
                } else {
                    self.map.flush_lines(self.cfg.flush, off, len)
                };
                counters::note_lines_flushed(first, n, true);
            }
            _ => counters::note_blocks(self.map.addr(off), len),
        }
    }

    /// Synchronises an `msync`-domain medium completely (used at close).
    pub fn sync_all(&self) -> io::Result<()> {
        if self.cfg.domain == Domain::Msync && self.observer.is_none() {
            self.map.msync(0, self.map.mapped())?;
        }
        Ok(())
    }
}

/// Sorts and merges page-rounded ranges so each dirty page is synced once.
fn coalesce_pages(ranges: &mut [(usize, usize)]) -> Vec<(usize, usize)> {
    let page = crate::map::PAGE;
    for r in ranges.iter_mut() {
        *r = (r.0 / page * page, r.1.div_ceil(page) * page);
    }
    ranges.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    for &(s, e) in ranges.iter() {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// Cache lines overlapping a byte range of `len` bytes at `off` (offset-based
/// helper for components sizing their writes).
pub fn lines_in(off: usize, len: usize) -> usize {
    if len == 0 {
        0
    } else {
        (off + len - 1) / CACHE_LINE - off / CACHE_LINE + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesce_merges_overlapping_pages() {
        let mut v = vec![(5000, 5001), (0, 10), (4095, 4097), (20000, 20001)];
        assert_eq!(coalesce_pages(&mut v), vec![(0, 8192), (16384, 20480)]);
    }

    #[test]
    fn lines_in_counts() {
        assert_eq!(lines_in(0, 64), 1);
        assert_eq!(lines_in(60, 8), 2);
        assert_eq!(lines_in(0, 0), 0);
    }
}
