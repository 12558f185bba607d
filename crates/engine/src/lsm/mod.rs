//! **LSM engine**: a log-structured merge tree [P2 §3.1; notes A4, A5].
//!
//! # Design
//!
//! - **Memtable.** A DRAM ordered map (`BTreeMap`, key → value or
//!   tombstone) over an append-only persistent **log segment** (one
//!   allocator block). Every write — a put, a delete, or a whole batch —
//!   is *one* self-validating record (CRC32C over the nonce, sequence
//!   number, log generation and body; format in [`format`]) appended on a
//!   fresh cache line, flushed, and fenced once. Recovery replays the
//!   longest prefix of valid records with consecutive sequence numbers and
//!   the manifest's log generation, so a torn record (and everything that
//!   was never written after it) is simply absent, and a batch — one
//!   record — is all or nothing. No commit mark, so no second fence.
//! - **Runs.** When the log passes [`Options::memtable_bytes`], the
//!   memtable is written as an immutable **sorted run** into one allocator
//!   block: data blocks of sorted records (about [`Options::block_bytes`]
//!   each, each with its own CRC), a **fence-pointer index** (every block's
//!   first key, offset, length, CRC) and a persisted **bloom filter**. The
//!   index and the bloom filter are also kept in DRAM, so a lookup in a run
//!   costs a bloom probe, a binary search and one block read. The image is
//!   built in one reused DRAM buffer (so a merge needs DRAM for its whole
//!   output — a limit for runs of many GiB) and written with non-temporal
//!   stores.
//! - **Manifest.** One allocator block listing the log segment, its
//!   generation and first sequence number, and the runs (newest first),
//!   linked from the first word of the engine's fixed area. A flush writes
//!   the run and a new manifest, flushes them and fences, then makes the
//!   switch with ONE [`AllocThread::publish`]: the run's and manifest's
//!   allocations, the frees of the old manifest and of every run merged
//!   away, and the fixed-area link. The log segment is *reused*: the new
//!   manifest carries a new log generation, which invalidates every record
//!   in the segment at once (truncation costs nothing and cannot happen
//!   before the switch: it *is* the switch). A segment is replaced
//!   (allocated and freed in the same publish) only when a record does not
//!   fit in it.
//! - **Compaction** is separate from the flush, and off the writers'
//!   path: a flush writes the memtable as the newest run, merging
//!   nothing, and a background thread ([`Options::background`]) then
//!   merges the newest runs while the next run is at most
//!   [`Options::merge_ratio`] times what is merged so far, or while there
//!   would be more than [`Options::max_runs`] runs — a binary-counter
//!   (size-tiered) policy: each byte is rewritten `O(log(data /
//!   memtable))` times. A compaction builds its output from runs that are
//!   immutable, with no lock but its own, writes it to a reserved block,
//!   and only then takes the writer lock to write a new manifest — the
//!   same log segment, generation and first sequence number, so the
//!   memtable's records stay valid — and publish the switch (its output's
//!   allocation, the frees of its inputs and of the old manifest, the
//!   link), under one fence for the run and manifest and the publish's
//!   two. A writer waits for the compactor only when it has fallen
//!   behind by twice `max_runs` runs (a bounded stall, counted in the
//!   stats with its time). Shadowed versions are dropped by the merge;
//!   tombstones when the output becomes the oldest run. Without the
//!   thread (the option off, or under the crash simulator, whose runs
//!   must be deterministic) the compaction steps run on the next write
//!   after its record, so the checks crash inside the same steps with the
//!   memtable holding log records, as they are with the thread.
//! - **Ingest.** A batch whose log record would exceed
//!   [`Options::ingest_bytes`] (default: the memtable's size) never
//!   passes through the log or the memtable: after the memtable is
//!   flushed (its entries are older), the batch is sorted (the last op of
//!   a key wins), written as a run of its own and linked as the newest by
//!   one publish — its commit point. So a bulk load of millions of keys
//!   is one transaction that costs one run write, leaves no record to
//!   replay at open, and no memtable of its size for the next write to
//!   flush.
//!
//! Stats and the key count of [`EngineRecovery`] are computed by a merge
//! over everything (O(data)); nothing on the write path counts keys.
//! - **A full pool.** Size-tiered merging needs room for its output
//!   before it frees its inputs, so a flush that would leave less free
//!   space than the runs' bytes plus twice the memtable's (the room a
//!   merge of everything needs) is refused to writes that add data
//!   ([`EngineError::Full`]), which may still use half of the log's slack
//!   ([`Options::log_slack`]); deletes may use all of it, and a delete that
//!   needs a flush then merges *every* run, dropping its tombstones and
//!   what they shadow. A write refused for want of room first asks for a
//!   compaction of every run and is tried once more after it (once per
//!   manifest generation: a store really full answers at once) — so
//!   deleting keys of a full store frees space and later puts succeed
//!   again. (The ceiling is the usual size-tiered one: about half the
//!   pool for live data.)
//! - **Readers** never take the writer lock: a get looks up the memtable
//!   under a short read lock, clones the `Arc` of the current run list
//!   (the *version*), and searches the runs newest first without any lock.
//!   A flush installs the new version and clears the memtable under one
//!   short write lock, so a reader sees either (old memtable, old runs) or
//!   (new memtable, new runs). Runs a flush or compaction merged away are
//!   freed in its publish, but their blocks cannot be *reused* before
//!   every reader that may still read them has dropped its version: every
//!   path that reserves blocks (flush, ingest, compaction) first waits
//!   until no version but the graveyard holds them. (So a scan callback must not write to
//!   the same store: it would wait for its own scan.)
//!
//! # Fences and flushed lines per operation
//!
//! | operation              | fences | lines flushed                                  |
//! |------------------------|--------|------------------------------------------------|
//! | put / delete           | 1      | `⌈(24 + 11 + key + value) / 64⌉` (1000-B value, 16-B key: 17) |
//! | delete of an absent key| 0      | 0                                              |
//! | batch of n ops         | 1      | `⌈(28 + Σ(7 + key + value)) / 64⌉`            |
//! | get / scan             | 0      | 0                                              |
//! | flush                  | 3 (+ the allocator's reserve fences) | the run image, the manifest, the allocator's record and words |
//! | compaction (background)| 3 (+ reserve fences)  | the merged run, the manifest, the allocator's record and words |
//! | batch over `ingest_bytes` | 3 (+ a flush of a non-empty memtable) | the batch's run, the manifest, the allocator's record and words |
//! | open (recovery)        | 0–1    | the scrubbed tail of the log segment          |
//!
//! One fence per write is the floor for a durable write whose record must
//! be durable before it returns. A flush costs one fence for the run and
//! manifest (they must be durable before the allocator's redo record that
//! links them can be: the allocator's first fence would complete them
//! *together* with its record, so a crash before that fence could leave
//! the record but not the run) plus the publish's two. With the default
//! 4 MiB memtable and 1 KB values that is 3 fences per ~4 000 writes on
//! the writer's path (the lock heap fences twice more for each block it
//! splits to reserve). A compaction costs the same 3 (its run and
//! manifest share one fence: both are stored by the compacting thread),
//! on the background thread; with merging no longer folded into the
//! flush, the memtable's data is written once more (as its own run) than
//! before, and the merges' rewrites cost flushed lines (about
//! `log2(data / 4 MiB)` times the data), not fences. The stats report
//! the write amplification: log and run bytes written over the bytes of
//! the users' operations.
//!
//! # Recovery
//!
//! Open reads the manifest (bounds and CRC checked, every block checked
//! against the allocator), loads and validates every run (header, index,
//! bloom and block CRCs, strictly increasing keys; a data block that fails
//! its CRC is damage on the media, not a torn write — a run is complete
//! before a manifest names it — so it is listed, not fatal: its keys fail
//! to read, every other key reads, the scrub names it with its key span,
//! and a compaction that would merge that run fails and is reported
//! rather than drop the block's keys), replays the log's valid
//! prefix into the memtable — refusing the store if a later valid record
//! says its predecessors were durable (the record that ended the prefix
//! was damaged, not torn: [`format`]'s record docs) — and then *scrubs*
//! the rest of the segment
//! (zeroes every non-zero line after the valid prefix, one fence), so that
//! the remains of a torn record can never be mistaken for a later record
//! once new records are appended over it. Recovery writes nothing else, so
//! it is idempotent.
//!
//! # Planted faults (`Fault`)
//!
//! - `Fault::RunUnflushed`: a flush publishes the manifest without
//!   flushing the run block: after a crash the manifest can name a run
//!   whose lines never reached the media (recovery reports corruption or
//!   loses acknowledged writes).
//! - `Fault::AppendUnfenced`: a write returns after flushing its record
//!   without fencing: an acknowledged write can be lost.
//! - `Fault::TruncateBeforeSwitch`: a flush resets the log segment for
//!   its next generation (zeroes the records it just copied into the run)
//!   *before* the publish that switches the manifest: a crash in between
//!   leaves the old manifest, whose log lost its records — acknowledged
//!   writes vanish.
//! - `Fault::SyncUnfenced`: `sync` does not fence the relaxed commits
//!   it reports durable.
//! - `Fault::CompactionNewLogGen`: a compaction's manifest starts a new
//!   log generation, as a flush's does: the memtable's records in the log
//!   no longer replay, so acknowledged writes vanish after a crash.
//! - `Fault::IngestOverMemtable`: an ingest drops the batch's keys from
//!   the memtable instead of flushing it: after a crash the replayed log
//!   shadows the batch's run with older versions.
//! - `Fault::RunUnflushed` covers the runs of compactions and ingests too.
//!
//! A "batch applied without its commit record" cannot be planted: a batch
//! is one record, with no separate commit record to forget.

mod compact;
mod fault;
mod flush;
mod format;
mod merge;
mod read;
mod recovery;
mod scrub;
#[cfg(test)]
mod tests;
mod write;

use crate::breakdown::{self, Phase};
use crate::ctx::EngineCtx;
use crate::gate::{SessionGate, Ticket};
use crate::{
    Durability, Engine, EngineError, EngineKind, EngineRecovery, EngineStats, Op, Result, Session,
    SnapshotRead, StoreOptions, Walk, check_key, check_ops, check_value,
};
use ferrite_alloc::{AllocThread, Link, PAllocator, Publish, Reservation};
use ferrite_pmem::{LockHeld, POff, Region};
use format::{
    Manifest, RunBuilder, RunMeta, bloom_may_contain, corrupt, parse_run_record, round_line,
};
use merge::{Merge, RunBackCursor, entries_iter, mem_iter};
use parking_lot::{Condvar, Mutex, RwLock};
use read::{LsmReader, LsmSnapshot};
pub(crate) use recovery::open;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use write::LsmSession;

// Planted bugs: public only with the `checks` feature (`fault.rs`).
#[cfg(feature = "checks")]
pub use fault::Fault;
#[cfg(not(feature = "checks"))]
pub(crate) use fault::Fault;

/// Tuning knobs of this engine.
#[derive(Clone, Debug)]
pub struct Options {
    /// Log bytes after which the memtable is flushed into a run.
    pub memtable_bytes: u64,
    /// Log capacity beyond `memtable_bytes`, used only while a flush
    /// cannot get space (a full pool): deletes still go through.
    pub log_slack: u64,
    /// Target size of a run's data block (one fence pointer each).
    pub block_bytes: usize,
    /// Bloom filter bits per key.
    pub bloom_bits_per_key: u32,
    /// Most runs before a flush merges regardless of sizes.
    pub max_runs: usize,
    /// A compaction also merges the next run while its data is at most
    /// this many times the bytes merged so far.
    pub merge_ratio: u64,
    /// Compact on a background thread (the default). When false — and
    /// always under the crash simulator, whose runs must be deterministic
    /// — the writer that flushed compacts at once, by the same steps.
    pub background: bool,
    /// A batch whose log record would be larger than this is written as a
    /// run of its own (ingested) instead of through the
    /// log and the memtable. Default: `memtable_bytes`.
    pub ingest_bytes: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            memtable_bytes: 4 << 20,
            log_slack: 1 << 20,
            block_bytes: 4096,
            bloom_bits_per_key: 10,
            max_runs: 8,
            merge_ratio: 2,
            background: true,
            ingest_bytes: None,
        }
    }
}

impl Options {
    /// Small sizes for the crash checks: a memtable of a few writes, tiny
    /// data blocks and at most 3 runs, so flushes, merges and segment
    /// replacements happen within a short script.
    pub fn for_checks() -> Options {
        Options {
            memtable_bytes: 2048,
            log_slack: 512,
            block_bytes: 128,
            max_runs: 3,
            background: false,
            ..Options::default()
        }
    }
}

/// The engine's fixed area: the manifest link word, alone on its line.
pub(crate) fn fixed_area_bytes(_opts: &StoreOptions) -> usize {
    64
}

type Entry = (Vec<u8>, Option<Vec<u8>>);

/// A run in DRAM: where it is and its validated fence pointers and bloom filter.
struct Run {
    /// Unique in the process (a block offset is not: blocks are reused).
    id: u64,
    off: u64,
    len: u64,
    meta: RunMeta,
}

impl Run {
    fn new(off: u64, len: u64, meta: RunMeta) -> Run {
        static IDS: AtomicU64 = AtomicU64::new(1);
        Run {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            off,
            len,
            meta,
        }
    }
}

/// The runs readers search, newest first. Immutable; replaced whole.
struct Version {
    runs: Vec<Arc<Run>>,
}

struct State {
    mem: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    version: Arc<Version>,
}

/// What only writers touch (under the writer lock).
struct Writer {
    man: Manifest,
    man_off: u64,
    /// Append position in the log segment.
    pos: u64,
    next_seq: u64,
    /// The run image buffer, reused by every flush.
    buf: Vec<u8>,
    /// After a flush failed for want of space, the log position before
    /// which no flush is tried again (0: none failed).
    retry_at: u64,
    /// Log bytes `[start, end)` appended by relaxed commits and not fenced
    /// since: the next durable commit, `sync` or flush makes them durable.
    unfenced: Option<(u64, u64)>,
    /// No background thread: a run was added, and the next write compacts
    /// after its record (so that, as with the thread, a compaction runs
    /// while the memtable holds records of the log).
    compact_due: bool,
    /// The manifest generation at which a write that found no room last
    /// asked for a compaction of every run (one try per generation).
    full_tried_gen: u64,
}

pub(crate) struct Lsm {
    pool: Region,
    area_off: u64,
    nonce: u64,
    alloc: Arc<dyn PAllocator>,
    opts: Options,
    fault: Option<Fault>,
    writer: Mutex<Writer>,
    state: RwLock<State>,
    sessions: SessionGate,
    recovery: EngineRecovery,
    flushes: AtomicU64,
    merged_runs: AtomicU64,
    full_fallbacks: AtomicU64,
    /// Wall time spent flushing (and merging in a flush), nanoseconds.
    flush_nanos: AtomicU64,
    /// Bytes of runs written (flushes, compactions, ingests).
    run_bytes: AtomicU64,
    /// Runs freed by a publish that readers may still hold: every path
    /// that reserves blocks first waits until no reader holds them.
    graveyard: Mutex<Vec<Arc<Run>>>,
    /// Held by a compaction from its choice of runs to its switch (one at
    /// a time); the buffer its run image is built in.
    compaction: Mutex<Vec<u8>>,
    /// Compacting on a background thread (see [`Options::background`];
    /// cleared if the thread cannot be started).
    background: AtomicBool,
    /// The background thread's work flags.
    bg: Mutex<BgFlags>,
    /// A write found no room: the next compaction merges every run.
    major_requested: AtomicBool,
    /// Signalled when work is posted or a compaction step ends.
    bg_cv: Condvar,
    compactions: AtomicU64,
    compact_nanos: AtomicU64,
    /// Run bytes written by compactions (part of `run_bytes`).
    compact_bytes: AtomicU64,
    /// Writes that waited for the background compaction, and how long.
    stalls: AtomicU64,
    stall_nanos: AtomicU64,
    /// Batches written as runs of their own.
    ingests: AtomicU64,
    /// Bytes of the users' operations (keys, values, op headers): the
    /// denominator of the write amplification.
    user_bytes: AtomicU64,
    /// Log bytes written (records, rounded to lines).
    log_bytes: AtomicU64,
}

/// What the background compaction thread is asked and tells.
#[derive(Default)]
struct BgFlags {
    /// A flush or ingest added a run since the thread last looked.
    pending: bool,
    /// A compaction step is running.
    busy: bool,
    /// The engine is closing: the thread ends.
    stop: bool,
    /// The last background compaction error (none since: `None`).
    error: Option<String>,
}

/// A compaction's output, written (its fence is the install's), not yet
/// linked.
struct Prepared {
    /// Ids of the merged runs, newest first. Not the runs themselves: a
    /// compactor waiting for the writer lock must not hold runs that a
    /// writer, holding that lock, may be waiting to see released.
    inputs: Vec<u64>,
    /// The output block (`None`: everything merged away, no run).
    out: Option<(Reservation, u64, RunMeta)>,
}

fn fault_of(opts: &StoreOptions) -> Option<Fault> {
    match opts.fault {
        crate::Fault::Lsm(f) => Some(f),
        _ => None,
    }
}

fn check_opts(o: &Options) -> Result<()> {
    if o.memtable_bytes < 256 || o.block_bytes == 0 || o.max_runs == 0 || o.bloom_bits_per_key == 0
    {
        return Err(EngineError::BadOption(format!(
            "lsm options out of range: {o:?}"
        )));
    }
    Ok(())
}

/// Default log segment capacity.
fn default_cap(o: &Options) -> u64 {
    round_line(o.memtable_bytes + o.log_slack)
}

/// Reserves blocks of `sizes`, cancelling what it got if one fails.
fn reserve_all(at: &mut dyn AllocThread, sizes: &[usize]) -> Result<Vec<Reservation>> {
    let mut out = Vec::with_capacity(sizes.len());
    for &s in sizes {
        match at.reserve(s) {
            Ok(r) => out.push(r),
            Err(e) => {
                cancel_all(at, out);
                return Err(e.into());
            }
        }
    }
    Ok(out)
}

fn cancel_all(at: &mut dyn AllocThread, rs: Vec<Reservation>) {
    for r in rs {
        // A reservation of this very handle cannot be refused.
        let _ = at.cancel(r);
    }
}

pub(crate) fn create(ctx: EngineCtx, opts: &StoreOptions) -> Result<Box<dyn Engine>> {
    let o = opts.lsm.clone();
    check_opts(&o)?;
    let nonce = ctx.sb.nonce;
    let cap = default_cap(&o);
    let man_off;
    let man;
    {
        let mut at = ctx.alloc.thread()?;
        let m0 = Manifest {
            gen_: 1,
            seg: 0,
            cap,
            log_gen: 1,
            first_seq: 1,
            runs: Vec::new(),
            marks: true,
        };
        let rs = reserve_all(&mut *at, &[cap as usize, m0.len()])?;
        man = Manifest {
            seg: rs[0].off().raw(),
            ..m0
        };
        man_off = rs[1].off().raw();
        let bytes = man.encode(nonce);
        ctx.pool.write(man_off as usize, &bytes);
        ctx.pool.flush(man_off as usize, bytes.len());
        ctx.pool.fence();
        let links = [Link {
            at: POff::new(ctx.area_off),
            value: man_off,
        }];
        if let Err(e) = at.publish(&Publish {
            allocs: &rs,
            frees: &[],
            links: &links,
        }) {
            cancel_all(&mut *at, rs);
            return Err(e.into());
        }
    }
    Ok(Box::new(LsmEngine::start(Lsm::new(
        ctx,
        opts,
        man,
        man_off,
        0,
        BTreeMap::new(),
        Vec::new(),
        EngineRecovery {
            detail: "created".into(),
            ..EngineRecovery::default()
        },
    ))))
}

/// The LSM engine as a store holds it: the engine, shared with its
/// background compactor thread (when it has one), which is stopped and
/// joined on drop — before the store can unmap the pool.
pub(crate) struct LsmEngine {
    lsm: Arc<Lsm>,
    compactor: Option<std::thread::JoinHandle<()>>,
}

impl LsmEngine {
    /// Starts the compactor (if the engine compacts in the background)
    /// and gives it a first look: an opened store may have runs to merge.
    fn start(lsm: Lsm) -> LsmEngine {
        let lsm = Arc::new(lsm);
        let mut compactor = None;
        if lsm.background.load(Ordering::Relaxed) {
            let l = lsm.clone();
            match std::thread::Builder::new()
                .name("ferrite-lsm-compactor".into())
                .spawn(move || l.compactor())
            {
                Ok(h) => {
                    compactor = Some(h);
                    lsm.bg.lock().pending = true;
                    lsm.bg_cv.notify_all();
                }
                // No thread to be had: writers compact, as in the checks.
                Err(_) => lsm.background.store(false, Ordering::Relaxed),
            }
        }
        LsmEngine { lsm, compactor }
    }
}

impl std::ops::Deref for LsmEngine {
    type Target = Lsm;
    fn deref(&self) -> &Lsm {
        &self.lsm
    }
}

impl Drop for LsmEngine {
    fn drop(&mut self) {
        self.lsm.bg.lock().stop = true;
        self.lsm.bg_cv.notify_all();
        if let Some(h) = self.compactor.take() {
            // A panic of the compactor was its own; the store closes anyway.
            let _ = h.join();
        }
    }
}

impl Lsm {
    #[allow(clippy::too_many_arguments)]
    fn new(
        ctx: EngineCtx,
        opts: &StoreOptions,
        man: Manifest,
        man_off: u64,
        pos: u64,
        mem: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
        runs: Vec<Arc<Run>>,
        recovery: EngineRecovery,
    ) -> Lsm {
        let next_seq = man.first_seq;
        let ctx_simulated = ctx.pool.medium().is_simulated();
        Lsm {
            pool: ctx.pool,
            area_off: ctx.area_off,
            nonce: ctx.sb.nonce,
            alloc: ctx.alloc,
            opts: opts.lsm.clone(),
            fault: fault_of(opts),
            writer: Mutex::new(Writer {
                man,
                man_off,
                pos,
                next_seq,
                buf: Vec::new(),
                retry_at: 0,
                unfenced: None,
                compact_due: false,
                full_tried_gen: 0,
            }),
            state: RwLock::new(State {
                mem,
                version: Arc::new(Version { runs }),
            }),
            sessions: SessionGate::new(usize::from(ctx.sb.sessions)),
            recovery,
            flushes: AtomicU64::new(0),
            merged_runs: AtomicU64::new(0),
            full_fallbacks: AtomicU64::new(0),
            flush_nanos: AtomicU64::new(0),
            run_bytes: AtomicU64::new(0),
            graveyard: Mutex::new(Vec::new()),
            compaction: Mutex::new(Vec::new()),
            background: AtomicBool::new(opts.lsm.background && !ctx_simulated),
            bg: Mutex::new(BgFlags::default()),
            major_requested: AtomicBool::new(false),
            bg_cv: Condvar::new(),
            compactions: AtomicU64::new(0),
            compact_nanos: AtomicU64::new(0),
            compact_bytes: AtomicU64::new(0),
            stalls: AtomicU64::new(0),
            stall_nanos: AtomicU64::new(0),
            ingests: AtomicU64::new(0),
            user_bytes: AtomicU64::new(0),
            log_bytes: AtomicU64::new(0),
        }
    }
}

impl Engine for LsmEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Lsm
    }

    fn session(&self) -> Result<Box<dyn Session + Send + '_>> {
        let eng: &Lsm = &self.lsm;
        let (ticket, at) = eng.sessions.enter(&*eng.alloc)?;
        Ok(Box::new(LsmSession {
            eng,
            at,
            _ticket: ticket,
            rec: Vec::new(),
            blk: Vec::new(),
            scratch: Vec::new(),
        }))
    }

    fn reader(&self) -> Box<dyn SnapshotRead + Send + '_> {
        Box::new(LsmReader {
            eng: self,
            blk: Vec::new(),
        })
    }

    fn snapshot(&self) -> Result<Box<dyn SnapshotRead + Send + '_>> {
        let (mem, version) = {
            let st = self.state.read();
            (st.mem.clone(), st.version.clone())
        };
        Ok(Box::new(LsmSnapshot {
            eng: self,
            mem,
            version,
            blk: Vec::new(),
        }))
    }

    fn len(&self) -> Result<u64> {
        self.lsm.live_len()
    }

    fn allocator(&self) -> &dyn PAllocator {
        &*self.alloc
    }

    fn recovery(&self) -> &EngineRecovery {
        &self.recovery
    }

    fn stats(&self) -> EngineStats {
        let (mem, version) = {
            let st = self.state.read();
            let mem: Vec<Entry> = st.mem.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            (mem, st.version.clone())
        };
        // Stats are informational: a damaged run shows as 0 keys here and
        // as an error from `len` and the reads.
        let keys = self.count(&mem, &version).unwrap_or(0);
        let (pos, cap, gen_) = {
            let w = self.writer.lock();
            (w.pos, w.man.cap, w.man.gen_)
        };
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let user = ld(&self.user_bytes);
        let written = ld(&self.log_bytes) + ld(&self.run_bytes);
        let bg_error = self.bg.lock().error.clone();
        EngineStats {
            keys,
            detail: format!(
                "memtable {} entries, log {pos}/{cap} bytes, {} runs ({} records), {} flushes, {} ingests, {} compactions ({}) merging {} runs, {} full fallbacks, {} run bytes written ({} by compactions), flushes {:.3} s, compactions {:.3} s, {} write stalls {:.3} s, write amplification {}, manifest gen {gen_}{}",
                mem.len(),
                version.runs.len(),
                version.runs.iter().map(|r| r.meta.entries).sum::<u64>(),
                ld(&self.flushes),
                ld(&self.ingests),
                ld(&self.compactions),
                if self.background.load(Ordering::Relaxed) {
                    "background"
                } else {
                    "inline"
                },
                ld(&self.merged_runs),
                ld(&self.full_fallbacks),
                ld(&self.run_bytes),
                ld(&self.compact_bytes),
                ld(&self.flush_nanos) as f64 * 1e-9,
                ld(&self.compact_nanos) as f64 * 1e-9,
                ld(&self.stalls),
                ld(&self.stall_nanos) as f64 * 1e-9,
                if user == 0 {
                    "-".to_string()
                } else {
                    format!("{:.2}", written as f64 / user as f64)
                },
                bg_error.map_or(String::new(), |e| format!(
                    ", last background compaction error: {e}"
                )),
            ),
        }
    }

    fn quiesce(&self) -> Result<()> {
        // The background compactor finishes what it has; relaxed commits
        // become durable.
        self.wait_compactor()?;
        {
            let mut w = self.writer.lock();
            let _held = LockHeld::enter();
            if w.compact_due {
                let mut at = self.alloc.thread()?;
                self.compact_inline(&mut w, &mut *at);
            }
            if let Some(e) = &self.bg.lock().error {
                return Err(corrupt(format!("compaction: {e}")));
            }
        }
        self.sync()
    }

    fn sync(&self) -> Result<()> {
        let mut w = self.writer.lock();
        let _held = LockHeld::enter();
        self.sync_unfenced(&mut w);
        Ok(())
    }

    fn scrub(&self, pace: &mut dyn FnMut(u64)) -> Result<crate::Scrub> {
        // A version's runs are immutable: no lock past taking it.
        let version = self.state.read().version.clone();
        scrub::runs(&self.pool, &version.runs, pace)
    }

    fn walk(&self) -> Result<Walk> {
        let w = self.writer.lock();
        let (mem, version) = {
            let st = self.state.read();
            let mem: Vec<Entry> = st.mem.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            (mem, st.version.clone())
        };
        let mut entries = Vec::new();
        let mut m = Merge::new(&self.pool, entries_iter(&mem), &version.runs, &[])?;
        while let Some((k, v)) = m.next()? {
            if let Some(v) = v {
                entries.push((k.to_vec(), v.to_vec()));
            }
        }
        let mut blocks = vec![(w.man_off, w.man.len() as u64), (w.man.seg, w.man.cap)];
        blocks.extend(version.runs.iter().map(|r| (r.off, r.len)));
        Ok(Walk { entries, blocks })
    }
}
