//! Persist traces: what each thread asked of the one door (ARCHITECTURE.md,
//! rule 1), recorded for `ferrite-sim`'s memory-controller model \[P4\].
//!
//! With the cargo feature `trace` the persister and [`Region`](crate::Region)
//! note, per thread, every load and store made through a region, every flush
//! (with its range), every non-temporal store, every fence, and every
//! commit point a caller marks with [`commit_point`]. Without the feature
//! the hooks are compiled out (`#[cfg]`), and [`commit_point`] is an empty
//! inline function: recording costs nothing in a build that cannot record.
//! With the feature but no recording running, each hook costs one relaxed
//! atomic load and a predictable branch.
//!
//! Recording: [`start`] clears every thread's buffer and turns recording on;
//! [`stop`] turns it off and returns a [`Trace`] — one [`ThreadTrace`] per
//! thread that recorded anything, in the order threads first recorded. At
//! most [`MAX_EVENTS`] events (or the limit given to `start_with_limit`)
//! are kept per recording; the rest are dropped and the trace says so
//! ([`Trace::truncated`]).
//!
//! What the door cannot see: loads and stores that bypass a `Region`
//! (volatile DRAM, the stack) and the instructions between persist calls.
//! The latter appear as the wall-clock gap since the thread's previous event
//! (`gap_ns`): from the moment the previous event was noted to the moment
//! this one is. Events are noted *before* the primitive runs, so a gap also
//! holds the previous primitive's own cost on this machine — negligible for
//! `eadr` and `volatile` pools (a flush is a no-op, a fence an `sfence`), so
//! record in one of those when the gaps matter. Gaps are not reproducible
//! between recordings; everything else in a single-threaded trace is.
//!
//! Commit points: each component marks its own durable commit moments —
//! a log's append, a transaction's commit, a PTM commit, an engine's
//! commit, an allocator's standalone publish — through a [`CommitScope`]
//! ([`commit_scope`], then [`CommitScope::mark`] once the commit is
//! durable). Components nest (a transaction publishes through the
//! allocator, an engine appends to a log): only the **outermost** scope of
//! a thread marks, so one commit of the component the caller drives is one
//! commit point, whatever it is built from. A driver that knows better
//! (a workload of raw persists) may still call [`commit_point`], which
//! marks only outside every scope.
//!
//! A scope counts itself only when it begins during a recording; one that
//! began before [`start`] neither marks nor hides inner marks, so the
//! operation in flight when a recording starts may show its inner
//! components' commit points instead of its own.
//!
//! # Binary format (version 1), all integers little-endian
//!
//! ```text
//! file header, 32 bytes
//!   0..8    magic  b"FRTRACE\0"
//!   8..10   u16    format version = 1
//!   10..12  u16    flags: bit 0 = truncated (events were dropped), other bits 0
//!   12..16  u32    thread count T
//!   16..24  u64    total events over all threads
//!   24..28  u32    reserved, 0
//!   28..32  u32    CRC32C of bytes 0..28
//! then T thread sections, each:
//!   thread header, 24 bytes
//!     0..4    u32  thread index (0..T, in order)
//!     4..8    u32  reserved, 0
//!     8..16   u64  event count N of this thread
//!     16..20  u32  CRC32C of the N*16 event bytes that follow
//!     20..24  u32  CRC32C of bytes 0..20 of this thread header
//!   N events, 16 bytes each
//!     0       u8   kind: 1 load, 2 store, 3 flush, 4 nt-store, 5 fence, 6 commit
//!     1       u8   reserved, 0
//!     2..4    u16  gap_ns: wall-clock ns since the thread's previous event (saturating)
//!     4..8    u32  length in bytes (0 for fence and commit)
//!     8..16   u64  virtual address of the first byte (0 for fence and commit)
//! ```
//!
//! The sum of the thread counts must equal the header's total, and the file
//! must end right after the last event. [`Trace::from_bytes`] checks all of
//! it and answers a [`TraceError`] for anything else; it never panics.

use thiserror::Error;

/// Magic bytes at offset 0 of a trace file.
pub const MAGIC: [u8; 8] = *b"FRTRACE\0";
/// The format version this build writes and reads.
pub const VERSION: u16 = 1;
/// Bytes of the file header.
pub const FILE_HEADER: usize = 32;
/// Bytes of a thread header.
pub const THREAD_HEADER: usize = 24;
/// Bytes of one event.
pub const EVENT_BYTES: usize = 16;
/// Events kept per recording; later events are dropped (and flagged).
pub const MAX_EVENTS: u64 = 1 << 24;
/// Header flag: events were dropped.
pub const FLAG_TRUNCATED: u16 = 1;

/// What one traced event was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EventKind {
    /// A load through a region.
    Load = 1,
    /// An ordinary (cached) store through a region.
    Store = 2,
    /// A cache-line write-back request (`clwb` and friends) of a range.
    Flush = 3,
    /// Stores that bypass the cache (the whole range of one copy or fill).
    NtStore = 4,
    /// A persist fence.
    Fence = 5,
    /// A commit point marked by [`commit_point`].
    Commit = 6,
}

impl EventKind {
    /// The kind whose code (byte 0 of an encoded event) is `b`; `None`
    /// for an unknown code.
    pub fn from_u8(b: u8) -> Option<EventKind> {
        Some(match b {
            1 => EventKind::Load,
            2 => EventKind::Store,
            3 => EventKind::Flush,
            4 => EventKind::NtStore,
            5 => EventKind::Fence,
            6 => EventKind::Commit,
            _ => return None,
        })
    }

    /// Lower-case name for reports (`nt-store` for [`EventKind::NtStore`]).
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Load => "load",
            EventKind::Store => "store",
            EventKind::Flush => "flush",
            EventKind::NtStore => "nt-store",
            EventKind::Fence => "fence",
            EventKind::Commit => "commit",
        }
    }
}

/// One traced event (see the module documentation for its encoding).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Event {
    /// What the thread did.
    pub kind: EventKind,
    /// Wall-clock ns since this thread's previous event, saturated.
    pub gap_ns: u16,
    /// Bytes touched (0 for fences and commit points).
    pub len: u32,
    /// Virtual address of the first byte (0 for fences and commit points).
    pub addr: u64,
}

impl Event {
    /// An event of `kind` over `len` bytes at `addr`, `gap_ns` after the
    /// thread's previous one.
    pub fn new(kind: EventKind, addr: u64, len: u32, gap_ns: u16) -> Event {
        Event {
            kind,
            gap_ns,
            len,
            addr,
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.kind as u8);
        out.push(0);
        out.extend_from_slice(&self.gap_ns.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.addr.to_le_bytes());
    }
}

/// One thread's events, in program order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadTrace {
    /// The events, oldest first.
    pub events: Vec<Event>,
}

impl ThreadTrace {
    /// Events of `kind` in this thread.
    pub fn count(&self, kind: EventKind) -> usize {
        self.events.iter().filter(|e| e.kind == kind).count()
    }
}

/// A whole recording: one [`ThreadTrace`] per thread.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    /// One entry per thread that recorded anything, in the order threads
    /// first recorded.
    pub threads: Vec<ThreadTrace>,
    /// Events were dropped because the recording exceeded [`MAX_EVENTS`].
    pub truncated: bool,
}

/// Why bytes are not a valid trace.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TraceError {
    #[error("trace is truncated: needs {needed} bytes at offset {at}, has {have}")]
    /// The bytes end inside a header or an event.
    Truncated {
        /// Offset of the part that does not fit.
        at: usize,
        /// Bytes that part needs.
        needed: usize,
        /// Bytes left from `at`.
        have: usize,
    },
    #[error("not a Ferrite trace (bad magic {found:02x?})")]
    /// The first 8 bytes are not the trace magic.
    BadMagic {
        /// The bytes found.
        found: [u8; 8],
    },
    #[error("unsupported trace format version {found} (this build reads version {VERSION})")]
    /// A format version this build does not read.
    UnsupportedVersion {
        /// The version in the file header.
        found: u16,
    },
    #[error("trace {what} checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    /// A CRC32C does not match what it covers.
    Checksum {
        /// Which part: the file header, or a thread's header or events.
        what: String,
        /// The checksum stored.
        stored: u32,
        /// The checksum of the bytes as read.
        computed: u32,
    },
    /// Counts that disagree (threads out of order, a total that is not
    /// the sum, an unknown event kind); the payload says which.
    #[error("trace is corrupt: {0}")]
    Corrupt(String),
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// `bytes[at..at+n]`, or [`TraceError::Truncated`].
fn take(bytes: &[u8], at: usize, n: usize) -> Result<&[u8], TraceError> {
    at.checked_add(n)
        .and_then(|end| bytes.get(at..end))
        .ok_or(TraceError::Truncated {
            at,
            needed: n,
            have: bytes.len().saturating_sub(at),
        })
}

impl Trace {
    /// Total events over all threads.
    pub fn events(&self) -> u64 {
        self.threads.iter().map(|t| t.events.len() as u64).sum()
    }

    /// Events of `kind` over all threads.
    pub fn count(&self, kind: EventKind) -> usize {
        self.threads.iter().map(|t| t.count(kind)).sum()
    }

    /// The trace in the binary format of the module documentation.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            FILE_HEADER + self.threads.len() * THREAD_HEADER + self.events() as usize * EVENT_BYTES,
        );
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        let flags = if self.truncated { FLAG_TRUNCATED } else { 0 };
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&(self.threads.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.events().to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        let crc = crc32c::crc32c(&out[..28]);
        out.extend_from_slice(&crc.to_le_bytes());
        let mut body = Vec::new();
        for (i, t) in self.threads.iter().enumerate() {
            body.clear();
            for e in &t.events {
                e.encode(&mut body);
            }
            let start = out.len();
            out.extend_from_slice(&(i as u32).to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
            out.extend_from_slice(&(t.events.len() as u64).to_le_bytes());
            out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
            let hcrc = crc32c::crc32c(&out[start..start + 20]);
            out.extend_from_slice(&hcrc.to_le_bytes());
            out.extend_from_slice(&body);
        }
        out
    }

    /// Parses and verifies a trace; any damage is a [`TraceError`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Trace, TraceError> {
        let h = take(bytes, 0, FILE_HEADER)?;
        let mut magic = [0u8; 8];
        magic.copy_from_slice(&h[..8]);
        if magic != MAGIC {
            return Err(TraceError::BadMagic { found: magic });
        }
        let stored = u32_at(h, 28);
        let computed = crc32c::crc32c(&h[..28]);
        if stored != computed {
            return Err(TraceError::Checksum {
                what: "header".into(),
                stored,
                computed,
            });
        }
        let version = u16_at(h, 8);
        if version != VERSION {
            return Err(TraceError::UnsupportedVersion { found: version });
        }
        let flags = u16_at(h, 10);
        if flags & !FLAG_TRUNCATED != 0 {
            return Err(TraceError::Corrupt(format!(
                "unknown header flags {flags:#06x}"
            )));
        }
        if u32_at(h, 24) != 0 {
            return Err(TraceError::Corrupt(
                "reserved header bytes are not zero".into(),
            ));
        }
        let nthreads = u32_at(h, 12) as usize;
        let total = u64_at(h, 16);
        // Every thread needs at least its header: bound the count before
        // allocating anything from it.
        let room = (bytes.len() - FILE_HEADER) / THREAD_HEADER;
        if nthreads > room {
            return Err(TraceError::Truncated {
                at: FILE_HEADER,
                needed: nthreads.saturating_mul(THREAD_HEADER),
                have: bytes.len() - FILE_HEADER,
            });
        }
        let mut at = FILE_HEADER;
        let mut threads = Vec::with_capacity(nthreads);
        let mut seen: u64 = 0;
        for i in 0..nthreads {
            let th = take(bytes, at, THREAD_HEADER)?;
            let stored = u32_at(th, 20);
            let computed = crc32c::crc32c(&th[..20]);
            if stored != computed {
                return Err(TraceError::Checksum {
                    what: format!("thread {i} header"),
                    stored,
                    computed,
                });
            }
            if u32_at(th, 0) as usize != i {
                return Err(TraceError::Corrupt(format!(
                    "thread section {i} says it is thread {}",
                    u32_at(th, 0)
                )));
            }
            if u32_at(th, 4) != 0 {
                return Err(TraceError::Corrupt(format!(
                    "thread {i}: reserved bytes are not zero"
                )));
            }
            let n = u64_at(th, 8);
            let body_crc = u32_at(th, 16);
            at += THREAD_HEADER;
            let body_len = usize::try_from(n)
                .ok()
                .and_then(|n| n.checked_mul(EVENT_BYTES))
                .ok_or_else(|| TraceError::Corrupt(format!("thread {i}: {n} events")))?;
            let body = take(bytes, at, body_len)?;
            let computed = crc32c::crc32c(body);
            if computed != body_crc {
                return Err(TraceError::Checksum {
                    what: format!("thread {i} events"),
                    stored: body_crc,
                    computed,
                });
            }
            let mut events = Vec::with_capacity(n as usize);
            for (j, e) in body.chunks_exact(EVENT_BYTES).enumerate() {
                let kind = EventKind::from_u8(e[0]).ok_or_else(|| {
                    TraceError::Corrupt(format!("thread {i} event {j}: unknown kind {}", e[0]))
                })?;
                if e[1] != 0 {
                    return Err(TraceError::Corrupt(format!(
                        "thread {i} event {j}: reserved byte is not zero"
                    )));
                }
                events.push(Event::new(kind, u64_at(e, 8), u32_at(e, 4), u16_at(e, 2)));
            }
            at += body_len;
            seen += n;
            threads.push(ThreadTrace { events });
        }
        if seen != total {
            return Err(TraceError::Corrupt(format!(
                "header says {total} events, the threads hold {seen}"
            )));
        }
        if at != bytes.len() {
            return Err(TraceError::Corrupt(format!(
                "{} bytes after the last thread",
                bytes.len() - at
            )));
        }
        Ok(Trace {
            threads,
            truncated: flags & FLAG_TRUNCATED != 0,
        })
    }
}

/// Marks a commit point of the calling thread: the data it made durable
/// before here is what one commit covers. Outside every [`CommitScope`]
/// only (inside one, the scope's owner marks the commit). A no-op unless
/// recording (and nothing at all without the feature `trace`).
#[inline(always)]
pub fn commit_point() {
    #[cfg(feature = "trace")]
    if recorder::is_recording() && recorder::depth() == 0 {
        recorder::note(EventKind::Commit, 0, 0);
    }
}

/// One component operation that ends in a durable commit (see the module
/// documentation, "Commit points"). While it lives, commit points of the
/// components it calls on this thread are not recorded; its own
/// [`mark`](CommitScope::mark) is, when it is the thread's outermost scope.
///
/// Without the feature `trace` this is a zero-sized value and every method
/// is empty; with it but no recording running, beginning a scope costs one
/// relaxed atomic load.
#[must_use = "a scope hides inner commit points only while it lives"]
pub struct CommitScope {
    /// Whether this scope counted itself in the thread's depth (it began
    /// during a recording), so its drop must uncount it.
    #[cfg(feature = "trace")]
    armed: bool,
}

/// Begins a [`CommitScope`] on the calling thread.
#[inline(always)]
pub fn commit_scope() -> CommitScope {
    #[cfg(feature = "trace")]
    {
        let armed = recorder::is_recording();
        if armed {
            recorder::enter();
        }
        CommitScope { armed }
    }
    #[cfg(not(feature = "trace"))]
    CommitScope {}
}

impl CommitScope {
    /// The commit of this scope's operation is durable: records one commit
    /// point if this is the thread's outermost scope.
    #[inline(always)]
    pub fn mark(&self) {
        #[cfg(feature = "trace")]
        if self.armed && recorder::is_recording() && recorder::depth() == 1 {
            recorder::note(EventKind::Commit, 0, 0);
        }
    }
}

impl Drop for CommitScope {
    #[inline(always)]
    fn drop(&mut self) {
        #[cfg(feature = "trace")]
        if self.armed {
            recorder::leave();
        }
    }
}

/// True when this build can record (the feature `trace` is on).
pub const fn available() -> bool {
    cfg!(feature = "trace")
}

#[cfg(feature = "trace")]
pub use recorder::{is_recording, start, start_with_limit, stop, stop_with_caller};

#[cfg(feature = "trace")]
pub(crate) use recorder::note;

#[cfg(feature = "trace")]
mod recorder {
    use super::{Event, EventKind, MAX_EVENTS, ThreadTrace, Trace};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    static RECORDING: AtomicBool = AtomicBool::new(false);
    /// Bumped by [`start`]: a thread buffer from an older recording is
    /// cleared before it takes a new event.
    static GENERATION: AtomicU64 = AtomicU64::new(0);
    static KEPT: AtomicU64 = AtomicU64::new(0);
    static LIMIT: AtomicU64 = AtomicU64::new(MAX_EVENTS);
    static DROPPED: AtomicBool = AtomicBool::new(false);
    /// Every thread buffer that ever recorded, in the order threads first
    /// recorded. Buffers outlive their threads so [`stop`] can collect them.
    static BUFFERS: Mutex<Vec<Arc<Mutex<Buffer>>>> = Mutex::new(Vec::new());

    #[derive(Default)]
    struct Buffer {
        generation: u64,
        /// Order of the first event of this generation, to sort threads.
        first: u64,
        last_end: Option<Instant>,
        events: Vec<Event>,
    }

    thread_local! {
        static MINE: Arc<Mutex<Buffer>> = {
            let b = Arc::new(Mutex::new(Buffer::default()));
            BUFFERS.lock().unwrap_or_else(|p| p.into_inner()).push(b.clone());
            b
        };
    }

    static ORDER: AtomicU64 = AtomicU64::new(0);

    thread_local! {
        /// Armed [`CommitScope`](super::CommitScope)s alive on this thread.
        static DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }

    #[inline]
    pub(super) fn depth() -> u32 {
        DEPTH.with(|d| d.get())
    }

    #[inline]
    pub(super) fn enter() {
        DEPTH.with(|d| d.set(d.get() + 1));
    }

    #[inline]
    pub(super) fn leave() {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }

    /// True while a recording runs.
    #[inline(always)]
    pub fn is_recording() -> bool {
        RECORDING.load(Ordering::Relaxed)
    }

    /// Records one event of the calling thread (if recording).
    #[inline(always)]
    pub(crate) fn note(kind: EventKind, addr: usize, len: usize) {
        if is_recording() {
            note_slow(kind, addr, len)
        }
    }

    #[cold]
    #[inline(never)]
    fn note_slow(kind: EventKind, addr: usize, len: usize) {
        let now = Instant::now();
        let generation = GENERATION.load(Ordering::Acquire);
        MINE.with(|b| {
            let mut b = b.lock().unwrap_or_else(|p| p.into_inner());
            if b.generation != generation {
                b.generation = generation;
                b.events.clear();
                b.last_end = None;
                b.first = ORDER.fetch_add(1, Ordering::Relaxed);
            } else if b.events.is_empty() {
                b.first = ORDER.fetch_add(1, Ordering::Relaxed);
            }
            let gap = b
                .last_end
                .map(|t| {
                    now.saturating_duration_since(t)
                        .as_nanos()
                        .min(u16::MAX as u128) as u16
                })
                .unwrap_or(0);
            // Lengths beyond u32 are split into several events.
            let mut addr = addr as u64;
            let mut len = len as u64;
            let mut first = true;
            loop {
                if KEPT.fetch_add(1, Ordering::Relaxed) >= LIMIT.load(Ordering::Relaxed) {
                    DROPPED.store(true, Ordering::Relaxed);
                    break;
                }
                let part = len.min(u32::MAX as u64);
                b.events.push(Event::new(
                    kind,
                    addr,
                    part as u32,
                    if first { gap } else { 0 },
                ));
                first = false;
                addr += part;
                len -= part;
                if len == 0 {
                    break;
                }
            }
            // Taken after the push, so the next gap excludes the cost of
            // recording (but not of the primitive, which runs after `note`).
            b.last_end = Some(Instant::now());
        });
    }

    /// Starts a recording: forgets every earlier event, then records.
    /// Recordings do not nest; a second `start` restarts.
    pub fn start() {
        start_with_limit(MAX_EVENTS);
    }

    /// [`start`] keeping at most `limit` events (at most [`MAX_EVENTS`]).
    pub fn start_with_limit(limit: u64) {
        RECORDING.store(false, Ordering::SeqCst);
        LIMIT.store(limit.min(MAX_EVENTS), Ordering::SeqCst);
        GENERATION.fetch_add(1, Ordering::SeqCst);
        KEPT.store(0, Ordering::SeqCst);
        DROPPED.store(false, Ordering::SeqCst);
        ORDER.store(0, Ordering::SeqCst);
        RECORDING.store(true, Ordering::SeqCst);
    }

    /// Ends the recording and returns every thread's events (threads with
    /// none are left out), in the order threads first recorded.
    pub fn stop() -> Trace {
        stop_with_caller().0
    }

    /// [`stop`], also saying which of the returned threads is the calling
    /// one (`None` if it recorded nothing). Recording is process-wide: in a
    /// process where unrelated threads touch pools (a test binary), the
    /// caller's index is the only way to tell its events from theirs.
    pub fn stop_with_caller() -> (Trace, Option<usize>) {
        RECORDING.store(false, Ordering::SeqCst);
        let generation = GENERATION.load(Ordering::SeqCst);
        let buffers = BUFFERS.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mine = MINE.with(|m| m.clone());
        let mut got: Vec<(u64, bool, ThreadTrace)> = Vec::new();
        for b in buffers {
            let caller = Arc::ptr_eq(&b, &mine);
            let mut b = b.lock().unwrap_or_else(|p| p.into_inner());
            if b.generation == generation && !b.events.is_empty() {
                let events = std::mem::take(&mut b.events);
                got.push((b.first, caller, ThreadTrace { events }));
            }
        }
        got.sort_by_key(|(first, _, _)| *first);
        let caller = got.iter().position(|(_, c, _)| *c);
        let trace = Trace {
            threads: got.into_iter().map(|(_, _, t)| t).collect(),
            truncated: DROPPED.load(Ordering::SeqCst),
        };
        (trace, caller)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recording is process-wide and `start` forgets every thread's events:
    /// the tests that record take turns.
    #[cfg(feature = "trace")]
    static ONE_RECORDING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[cfg(feature = "trace")]
    fn one_recording() -> std::sync::MutexGuard<'static, ()> {
        ONE_RECORDING.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sample() -> Trace {
        Trace {
            threads: vec![
                ThreadTrace {
                    events: vec![
                        Event::new(EventKind::Store, 0x1000, 64, 5),
                        Event::new(EventKind::Flush, 0x1000, 64, 1),
                        Event::new(EventKind::Fence, 0, 0, 0),
                        Event::new(EventKind::Commit, 0, 0, 3),
                    ],
                },
                ThreadTrace {
                    events: vec![
                        Event::new(EventKind::Load, 0x2000, 8, 9),
                        Event::new(EventKind::NtStore, 0x2040, 256, 65535),
                    ],
                },
            ],
            truncated: false,
        }
    }

    #[test]
    fn round_trips() {
        let t = sample();
        let b = t.to_bytes();
        assert_eq!(b.len(), FILE_HEADER + 2 * THREAD_HEADER + 6 * EVENT_BYTES);
        assert_eq!(Trace::from_bytes(&b), Ok(t));
        let empty = Trace::default();
        assert_eq!(Trace::from_bytes(&empty.to_bytes()), Ok(empty));
    }

    #[test]
    fn layout_is_as_documented() {
        let b = sample().to_bytes();
        assert_eq!(&b[0..8], b"FRTRACE\0");
        assert_eq!(u16_at(&b, 8), 1);
        assert_eq!(u32_at(&b, 12), 2);
        assert_eq!(u64_at(&b, 16), 6);
        // First event of thread 0: store, gap 5, len 64, addr 0x1000.
        let e = FILE_HEADER + THREAD_HEADER;
        assert_eq!(b[e], 2);
        assert_eq!(u16_at(&b, e + 2), 5);
        assert_eq!(u32_at(&b, e + 4), 64);
        assert_eq!(u64_at(&b, e + 8), 0x1000);
    }

    #[test]
    fn every_truncation_is_refused() {
        let b = sample().to_bytes();
        for n in 0..b.len() {
            assert!(Trace::from_bytes(&b[..n]).is_err(), "prefix {n} accepted");
        }
        let mut long = b.clone();
        long.push(0);
        assert!(matches!(
            Trace::from_bytes(&long),
            Err(TraceError::Corrupt(_))
        ));
    }

    #[test]
    fn every_bit_flip_is_refused() {
        let b = sample().to_bytes();
        for i in 0..b.len() {
            for bit in 0..8 {
                let mut c = b.clone();
                c[i] ^= 1 << bit;
                assert!(
                    Trace::from_bytes(&c).is_err(),
                    "flip of bit {bit} of byte {i} accepted"
                );
            }
        }
    }

    #[test]
    fn typed_errors() {
        let mut b = sample().to_bytes();
        b[0] = b'X';
        assert!(matches!(
            Trace::from_bytes(&b),
            Err(TraceError::BadMagic { .. })
        ));
        let mut b = sample().to_bytes();
        b[8] = 2;
        let crc = crc32c::crc32c(&b[..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            Trace::from_bytes(&b),
            Err(TraceError::UnsupportedVersion { found: 2 })
        );
        // A huge thread count in a valid header must not allocate or panic.
        let mut b = Trace::default().to_bytes();
        b[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        let crc = crc32c::crc32c(&b[..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            Trace::from_bytes(&b),
            Err(TraceError::Truncated { .. })
        ));
    }

    #[cfg(feature = "trace")]
    #[test]
    fn records_through_the_door() {
        let _one = one_recording();
        use crate::{Domain, Pool, PoolOptions};
        let pool =
            Pool::create_in_memory(&PoolOptions::new("trace-test", 1 << 20).domain(Domain::Eadr))
                .unwrap();
        let r = pool.data();
        start();
        r.write(0, &[1u8; 100]);
        r.flush(0, 100);
        r.fence();
        commit_point();
        let mut buf = [0u8; 8];
        r.read(0, &mut buf);
        r.write_nt(4096, &[7u8; 512]);
        let t = stop();
        // Another test may record on its own thread at the same time; this
        // thread's trace is the one holding our store.
        let mine = t
            .threads
            .iter()
            .find(|th| {
                th.events
                    .iter()
                    .any(|e| e.kind == EventKind::NtStore && e.len == 512)
            })
            .expect("this thread was recorded");
        let kinds: Vec<EventKind> = mine.events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            vec![
                EventKind::Store,
                EventKind::Flush,
                EventKind::Fence,
                EventKind::Commit,
                EventKind::Load,
                EventKind::NtStore
            ]
        );
        assert_eq!(mine.events[0].len, 100);
        assert_eq!(mine.events[1].addr, mine.events[0].addr);
        assert_eq!(mine.events[5].addr, mine.events[0].addr + 4096);
        // Not recording: nothing is added.
        r.fence();
        assert_eq!(stop().events(), 0);
    }

    #[cfg(feature = "trace")]
    #[test]
    fn only_the_outermost_scope_marks() {
        let _one = one_recording();
        // Commit events only, on this thread: count them by a marker store.
        use crate::{Domain, Pool, PoolOptions};
        let pool =
            Pool::create_in_memory(&PoolOptions::new("scope-test", 1 << 20).domain(Domain::Eadr))
                .unwrap();
        let r = pool.data();
        let before = commit_scope(); // began outside the recording: inert
        start();
        r.write_nt(8192, &[9u8; 320]);
        {
            let outer = commit_scope();
            {
                let inner = commit_scope();
                inner.mark(); // hidden: nested
                commit_point(); // hidden: inside a scope
            }
            outer.mark();
        }
        commit_point(); // outside every scope: recorded
        {
            let inner = commit_scope();
            inner.mark(); // the inert scope does not count: recorded
        }
        before.mark(); // inert
        drop(before);
        let t = stop();
        let mine = t
            .threads
            .iter()
            .find(|th| {
                th.events
                    .iter()
                    .any(|e| e.kind == EventKind::NtStore && e.len == 320)
            })
            .expect("this thread was recorded");
        assert_eq!(mine.count(EventKind::Commit), 3);
    }

    /// A busier thread recording at the same time (another test's, in a
    /// test binary) does not pass for the caller.
    #[cfg(feature = "trace")]
    #[test]
    fn stop_names_the_calling_thread() {
        let _one = one_recording();
        start();
        commit_point();
        std::thread::spawn(|| {
            for _ in 0..5 {
                commit_point();
            }
        })
        .join()
        .unwrap();
        let (t, caller) = stop_with_caller();
        let i = caller.expect("this thread recorded");
        assert_eq!(t.threads[i].count(EventKind::Commit), 1);
        assert!(t.threads.iter().any(|th| th.count(EventKind::Commit) == 5));
    }
}
