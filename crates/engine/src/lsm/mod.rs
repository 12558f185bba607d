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
//! bloom and block CRCs, strictly increasing keys), replays the log's valid
//! prefix into the memtable — refusing the store if a later valid record
//! says its predecessors were durable (the record that ended the prefix
//! was damaged, not torn: [`format`]'s record docs) — and then *scrubs*
//! the rest of the segment
//! (zeroes every non-zero line after the valid prefix, one fence), so that
//! the remains of a torn record can never be mistaken for a later record
//! once new records are appended over it. Recovery writes nothing else, so
//! it is idempotent.
//!
//! # Planted faults ([`Fault`])
//!
//! - [`Fault::RunUnflushed`]: a flush publishes the manifest without
//!   flushing the run block: after a crash the manifest can name a run
//!   whose lines never reached the media (recovery reports corruption or
//!   loses acknowledged writes).
//! - [`Fault::AppendUnfenced`]: a write returns after flushing its record
//!   without fencing: an acknowledged write can be lost.
//! - [`Fault::TruncateBeforeSwitch`]: a flush resets the log segment for
//!   its next generation (zeroes the records it just copied into the run)
//!   *before* the publish that switches the manifest: a crash in between
//!   leaves the old manifest, whose log lost its records — acknowledged
//!   writes vanish.
//! - [`Fault::SyncUnfenced`]: `sync` does not fence the relaxed commits
//!   it reports durable.
//! - [`Fault::CompactionNewLogGen`]: a compaction's manifest starts a new
//!   log generation, as a flush's does: the memtable's records in the log
//!   no longer replay, so acknowledged writes vanish after a crash.
//! - [`Fault::IngestOverMemtable`]: an ingest drops the batch's keys from
//!   the memtable instead of flushing it: after a crash the replayed log
//!   shadows the batch's run with older versions.
//! - [`Fault::RunUnflushed`] covers the runs of compactions and ingests too.
//!
//! A "batch applied without its commit record" cannot be planted: a batch
//! is one record, with no separate commit record to forget.

mod format;
mod scrub;
#[cfg(test)]
mod tests;

use crate::breakdown::{self, Phase};
use crate::gate::{SessionGate, Ticket};
use crate::store::EngineCtx;
use crate::{
    Durability, Engine, EngineError, EngineKind, EngineRecovery, EngineStats, Op, Result, Session,
    SnapshotRead, StoreOptions, Walk, check_key, check_ops, check_value,
};
use ferrite_alloc::{AllocThread, Link, PAllocator, Publish, Reservation};
use ferrite_pmem::{LockHeld, POff, Region};
use format::{
    Manifest, RunBuilder, RunMeta, bloom_may_contain, corrupt, parse_run_record, round_line,
};
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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

/// Planted bugs of this engine (checks only). See the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Publish the manifest without flushing the run's block.
    RunUnflushed,
    /// Return from a write without fencing its log record.
    AppendUnfenced,
    /// Zero (truncate) the log before the manifest switch is durable.
    TruncateBeforeSwitch,
    /// `sync` forgets its fence: relaxed commits it reports durable are not.
    SyncUnfenced,
    /// A compaction's manifest starts a new log generation (as a flush's
    /// does), which invalidates the memtable's records in the log: after a
    /// crash, acknowledged writes not yet flushed are gone.
    CompactionNewLogGen,
    /// An ingest drops the batch's keys from the memtable instead of
    /// flushing it first: reads are right until a crash, after which
    /// recovery replays the log into the memtable and its older versions
    /// of those keys shadow the batch's run.
    IngestOverMemtable,
}

impl Fault {
    /// Every planted bug, for the checks' planted runs.
    pub const ALL: &'static [Fault] = &[
        Fault::RunUnflushed,
        Fault::AppendUnfenced,
        Fault::TruncateBeforeSwitch,
        Fault::SyncUnfenced,
        Fault::CompactionNewLogGen,
        Fault::IngestOverMemtable,
    ];
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

pub(crate) fn open(
    ctx: EngineCtx,
    opts: &StoreOptions,
) -> Result<(Box<dyn Engine>, EngineRecovery)> {
    check_opts(&opts.lsm)?;
    let nonce = ctx.sb.nonce;
    let pool = &ctx.pool;
    let alloc = &ctx.alloc;
    let block_len = |off: u64, what: &str| -> Result<u64> {
        alloc
            .usable_size(POff::new(off))
            .map(|n| n as u64)
            .map_err(|e| corrupt(format!("{what} at {off:#x} is not an allocated block: {e}")))
    };
    let man_off = pool.load_u64(ctx.area_off as usize);
    if man_off == 0 {
        return Err(corrupt("no manifest linked"));
    }
    let mlen = block_len(man_off, "manifest")?;
    let man = Manifest::read(pool, man_off, nonce)?;
    if man.len() as u64 > mlen {
        return Err(corrupt("manifest longer than its block"));
    }
    if block_len(man.seg, "log segment")? < man.cap {
        return Err(corrupt("log segment smaller than its capacity"));
    }
    // The manifest, segment and runs are distinct blocks.
    let mut seen = std::collections::BTreeSet::from([man_off, man.seg]);
    if seen.len() != 2 || man.runs.iter().any(|&(o, _)| !seen.insert(o)) {
        return Err(corrupt("manifest names a block twice"));
    }
    let mut runs = Vec::with_capacity(man.runs.len());
    for &(off, len) in &man.runs {
        if block_len(off, "run")? < len {
            return Err(corrupt(format!("run at {off:#x} longer than its block")));
        }
        let mut meta = format::load_run(pool, off, len, nonce)?;
        meta.verify = opts.verify;
        runs.push(Arc::new(Run::new(off, len, meta)));
    }
    // Replay the log's valid prefix.
    let mut mem = BTreeMap::new();
    let mut pos = 0u64;
    let mut seq = man.first_seq;
    let mut body = Vec::new();
    let mut replayed = 0usize;
    while let Some(len) = format::read_record(
        pool,
        man.seg,
        man.cap,
        pos,
        nonce,
        seq,
        man.log_gen,
        &mut body,
    )? {
        apply_body(&mut mem, &body)?;
        replayed += 1;
        seq += 1;
        pos += len;
    }
    // A damaged record, not a torn one (format docs): refuse rather than
    // drop it and every record after it.
    if let Some(at) =
        format::durable_successor(pool, man.seg, man.cap, pos, nonce, seq, man.log_gen)?
    {
        return Err(corrupt(format!(
            "log record {seq} at segment offset {pos} is damaged: record {} at {at}, written after it was durable, is intact",
            seq + 1
        )));
    }
    // Scrub everything after the valid prefix (see the module docs).
    scrub(pool, man.seg + pos, man.cap - pos);
    let keys = count_live(pool, &mem, &runs)?;
    let damaged: usize = runs.iter().map(|r| r.meta.damaged.len()).sum();
    let rec = EngineRecovery {
        replayed,
        keys,
        detail: format!(
            "manifest gen {}, {} runs, {} log records replayed ({} log bytes){}",
            man.gen_,
            runs.len(),
            replayed,
            pos,
            if damaged == 0 {
                String::new()
            } else {
                let (s, verb, its) = if damaged == 1 {
                    ("", "fails", "its")
                } else {
                    ("s", "fail", "their")
                };
                format!(
                    "; {damaged} data block{s} {verb} {its} checksum{s}: {its} keys cannot be read (`ferrite pool check --deep` lists them)"
                )
            }
        ),
        ..EngineRecovery::default()
    };
    let eng = Lsm::new(ctx, opts, man, man_off, pos, mem, runs, rec.clone());
    eng.writer.lock().next_seq = seq;
    Ok((Box::new(LsmEngine::start(eng)), rec))
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

/// Zeroes every non-zero line of `[off, off + len)`, under one fence.
fn scrub(pool: &Region, off: u64, len: u64) {
    const CHUNK: u64 = 64 << 10;
    let mut buf = vec![0u8; CHUNK as usize];
    let mut p = 0u64;
    let mut wrote = false;
    while p < len {
        let n = CHUNK.min(len - p) as usize;
        pool.read((off + p) as usize, &mut buf[..n]);
        for (i, line) in buf[..n].chunks(64).enumerate() {
            if line.iter().any(|&b| b != 0) {
                let at = (off + p) as usize + 64 * i;
                pool.fill(at, line.len(), 0);
                pool.flush(at, line.len());
                wrote = true;
            }
        }
        p += n as u64;
    }
    if wrote {
        pool.fence();
    }
}

fn apply_body(mem: &mut BTreeMap<Vec<u8>, Option<Vec<u8>>>, body: &[u8]) -> Result<()> {
    format::for_each_op(body, |kind, k, v| {
        let val = (kind == format::OP_PUT).then(|| v.to_vec());
        mem.insert(k.to_vec(), val);
    })
}

/// The live keys of the memtable over `runs`. A run's damaged blocks
/// (see [`format::RunMeta::damaged`]) are left out: the count is then of
/// the keys that can be read.
fn count_live(
    pool: &Region,
    mem: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    runs: &[Arc<Run>],
) -> Result<u64> {
    let readable: Vec<Arc<Run>>;
    let runs = if runs.iter().any(|r| !r.meta.damaged.is_empty()) {
        readable = (runs.iter())
            .map(|r| Arc::new(Run::new(r.off, r.len, r.meta.readable())))
            .collect();
        &readable[..]
    } else {
        runs
    };
    let mut m = Merge::new(pool, mem_iter(mem.iter()), runs, &[])?;
    let mut n = 0;
    while let Some((_, v)) = m.next()? {
        n += u64::from(v.is_some());
    }
    Ok(n)
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

    /// Looks `key` up: memtable, then runs newest first. `blk` is scratch.
    fn get_into(&self, key: &[u8], out: &mut Vec<u8>, blk: &mut Vec<u8>) -> Result<bool> {
        let version = {
            let st = self.state.read();
            if let Some(v) = st.mem.get(key) {
                out.clear();
                return Ok(match v {
                    Some(v) => {
                        out.extend_from_slice(v);
                        true
                    }
                    None => false,
                });
            }
            st.version.clone()
        };
        self.runs_get(&version, key, out, blk)
    }

    /// `Some(true)`: value in `out`; `Some(false)`: tombstone; `None`: not in this run.
    fn run_get(
        &self,
        run: &Run,
        key: &[u8],
        out: &mut Vec<u8>,
        blk: &mut Vec<u8>,
    ) -> Result<Option<bool>> {
        if !bloom_may_contain(&run.meta.bloom, run.meta.k, key) {
            return Ok(None);
        }
        let i = run.meta.blocks.partition_point(|b| &*b.first <= key);
        if i == 0 {
            return Ok(None);
        }
        let b = &run.meta.blocks[i - 1];
        format::read_block(&self.pool, run.off, &run.meta, b, blk)?;
        let mut q = 0;
        while q < blk.len() {
            let (k, v, next) = parse_run_record(blk, q)?;
            match k.cmp(key) {
                std::cmp::Ordering::Less => q = next,
                std::cmp::Ordering::Equal => {
                    out.clear();
                    if let Some(v) = v {
                        out.extend_from_slice(v);
                        return Ok(Some(true));
                    }
                    return Ok(Some(false));
                }
                std::cmp::Ordering::Greater => return Ok(None),
            }
        }
        Ok(None)
    }

    fn scan(
        &self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        if limit == 0 {
            return Ok(0);
        }
        let (mem, version) = {
            let st = self.state.read();
            (mem_from(&st.mem, from, limit), st.version.clone())
        };
        self.merge_from(&mem, &version, from, limit, f)
    }

    /// Merges `mem` (the memtable's entries from `from` on) with the runs
    /// of `version`: up to `limit` pairs, ascending.
    fn merge_from(
        &self,
        mem: &[Entry],
        version: &Version,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let mut m = Merge::new(&self.pool, entries_iter(mem), &version.runs, from)?;
        let mut n = 0;
        while n < limit {
            match m.next()? {
                None => break,
                Some((k, Some(v))) => {
                    n += 1;
                    if !f(k, v) {
                        break;
                    }
                }
                Some((_, None)) => {}
            }
        }
        Ok(n)
    }

    /// Live keys of (`mem`, `version`): a merge of everything.
    fn count(&self, mem: &[Entry], version: &Version) -> Result<u64> {
        let mut m = Merge::new(&self.pool, entries_iter(mem), &version.runs, &[])?;
        let mut n = 0;
        while let Some((_, v)) = m.next()? {
            if v.is_some() {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Live keys now: a merge of the memtable and every run.
    fn live_len(&self) -> Result<u64> {
        let (mem, version) = {
            let st = self.state.read();
            let mem: Vec<Entry> = st.mem.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            (mem, st.version.clone())
        };
        self.count(&mem, &version)
    }

    /// Looks `key` up in the runs of `version`, newest first.
    fn runs_get(
        &self,
        version: &Version,
        key: &[u8],
        out: &mut Vec<u8>,
        blk: &mut Vec<u8>,
    ) -> Result<bool> {
        for run in &version.runs {
            if let Some(found) = self.run_get(run, key, out, blk)? {
                return Ok(found);
            }
        }
        out.clear();
        Ok(false)
    }

    /// [`scan`](Self::scan) descending: pairs below `upto`, greatest first.
    fn scan_back(
        &self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        if limit == 0 {
            return Ok(0);
        }
        let (mem, version) = {
            let st = self.state.read();
            (mem_below(&st.mem, upto, limit), st.version.clone())
        };
        self.merge_below(&mem, &version, upto, limit, f)
    }

    /// Merges `mem` (the memtable's entries below `upto`, descending) with
    /// the runs of `version`: up to `limit` pairs, descending.
    fn merge_below(
        &self,
        mem: &[Entry],
        version: &Version,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let mut srcs = Vec::with_capacity(version.runs.len());
        for r in &version.runs {
            srcs.push(RunBackCursor::seek(&self.pool, r, upto)?);
        }
        let mut mem_at = 0;
        let mut n = 0;
        while n < limit {
            // The greatest current key; the newest source wins a tie
            // (the memtable, then the runs newest first).
            let mut best: Option<(usize, &[u8])> = mem.get(mem_at).map(|(k, _)| (0, k.as_slice()));
            for (i, c) in srcs.iter().enumerate() {
                if let Some((k, _)) = c.current()
                    && best.is_none_or(|(_, b)| k > b)
                {
                    best = Some((i + 1, k));
                }
            }
            let Some((b, key)) = best else { break };
            let key = key.to_vec();
            let value = if b == 0 {
                mem[mem_at].1.clone()
            } else {
                srcs[b - 1].current().expect("live").1.map(<[u8]>::to_vec)
            };
            if let Some(v) = &value {
                n += 1;
                if !f(&key, v) {
                    break;
                }
            }
            // The chosen entry and every older version of its key.
            if mem.get(mem_at).is_some_and(|(k, _)| *k == key) {
                mem_at += 1;
            }
            for c in &mut srcs {
                while c.current().is_some_and(|(k, _)| k >= key.as_slice()) {
                    c.retreat()?;
                }
            }
        }
        Ok(n)
    }

    /// Appends `rec` (ops encoded by [`format::encode_ops`]) durably and
    /// applies `ops` to the memtable. Called with the writer lock held.
    /// [`append_record`](Self::append_record), one commit point of the
    /// persist trace once the record is durable (a memtable flush or merge
    /// it triggers is part of the same commit).
    fn append(
        &self,
        w: &mut Writer,
        at: &mut dyn AllocThread,
        rec: &mut [u8],
        ops: &[Op<'_>],
        d: Durability,
    ) -> Result<()> {
        let scope = ferrite_pmem::trace::commit_scope();
        let r = self.append_record(w, at, rec, ops, d);
        if r.is_ok() && d == Durability::Immediate {
            scope.mark();
        }
        r
    }

    /// Makes the records of relaxed commits durable: flushes their log
    /// bytes — on this thread, so that its fence covers them whichever
    /// thread stored them — and fences. With the writer lock held.
    fn sync_unfenced(&self, w: &mut Writer) {
        if let Some((start, end)) = w.unfenced.take() {
            self.pool
                .flush((w.man.seg + start) as usize, (end - start) as usize);
            if self.fault != Some(Fault::SyncUnfenced) {
                self.pool.fence();
            }
        }
    }

    fn append_record(
        &self,
        w: &mut Writer,
        at: &mut dyn AllocThread,
        rec: &mut [u8],
        ops: &[Op<'_>],
        d: Durability,
    ) -> Result<()> {
        let len = round_line(rec.len() as u64);
        let over_threshold = w.pos > 0 && w.pos + len > self.opts.memtable_bytes;
        if over_threshold || w.pos + len > w.man.cap {
            let deletes_only = ops.iter().all(|o| matches!(o, Op::Delete { .. }));
            // Space is tight when a merge of everything could not get room
            // for its output any more: then writes that add data stop
            // (Full) and deletes flush with a full merge, which drops their
            // tombstones and what they shadow, and so frees space.
            let tight = !self.headroom_ok(w);
            let fits = w.pos + len <= w.man.cap;
            let r = if tight && !deletes_only {
                Err(EngineError::Full(
                    "no room left to merge the runs (deletes still go through)".into(),
                ))
            } else if fits && w.pos < w.retry_at {
                // A flush failed for want of space a moment ago: do not
                // rebuild the (maybe large) merge for every write.
                Err(EngineError::Full("no room for a run".into()))
            } else {
                let r = self.flush(w, at, len, tight);
                if let Err(EngineError::Full(_)) = r {
                    w.retry_at = w.pos + len + self.opts.log_slack / 8;
                }
                r
            };
            match r {
                Ok(()) => w.retry_at = 0,
                Err(EngineError::Full(m)) => {
                    // No run written: keep using the log's slack, half of
                    // it for writes that add data, all of it for deletes.
                    self.full_fallbacks.fetch_add(1, Ordering::Relaxed);
                    let limit = if deletes_only {
                        w.man.cap
                    } else {
                        w.man.cap.saturating_sub(self.opts.log_slack / 2)
                    };
                    if w.pos + len > limit {
                        return Err(EngineError::Full(m));
                    }
                }
                Err(e) => return Err(e),
            }
        }
        let cc = breakdown::phase(Phase::Cc);
        // Every earlier record durable now (none left by relaxed commits)?
        let pred_durable = w.man.marks && w.unfenced.is_none();
        format::seal_record(rec, self.nonce, w.next_seq, w.man.log_gen, pred_durable);
        let at_off = (w.man.seg + w.pos) as usize;
        match d {
            Durability::Eventual => {
                // Stored, not flushed (rule 8: no flush left in flight):
                // the next durable commit, sync or memtable flush flushes
                // and fences it. A crash may lose a suffix of such records,
                // never part of one (the record's checksum) and never one
                // without those after it (replay stops at the first
                // invalid record and scrubs the rest).
                self.pool.write(at_off, rec);
                let start = w.unfenced.map_or(w.pos, |(s, _)| s);
                w.unfenced = Some((start, w.pos + len));
            }
            Durability::Immediate => {
                // Stored and flushed (non-temporal stores for a large record).
                self.pool.write_nodrain(at_off, rec);
                if let Some((start, _)) = w.unfenced.take() {
                    // Earlier relaxed records, stored but not flushed,
                    // share this record's fence.
                    self.pool
                        .flush((w.man.seg + start) as usize, (w.pos - start) as usize);
                }
                if self.fault != Some(Fault::AppendUnfenced) {
                    self.pool.fence();
                }
            }
        }
        drop(cc);
        w.pos += len;
        w.next_seq += 1;
        self.log_bytes.fetch_add(len, Ordering::Relaxed);
        self.user_bytes
            .fetch_add((rec.len() - format::REC_HEADER) as u64, Ordering::Relaxed);
        let mut st = self.state.write();
        for op in ops {
            match op {
                Op::Put { key, value } => {
                    st.mem.insert(key.to_vec(), Some(value.to_vec()));
                }
                Op::Delete { key } => {
                    st.mem.insert(key.to_vec(), None);
                }
            }
        }
        drop(st);
        self.compact_inline(w, at);
        Ok(())
    }

    /// The writer lock, for a write. With a background compactor that
    /// has fallen behind (twice [`Options::max_runs`] runs), the write
    /// first waits for it (a bounded stall, counted in the stats): reads
    /// search every run, so their number must not grow without bound.
    fn lock_writer(&self) -> parking_lot::MutexGuard<'_, Writer> {
        if self.background.load(Ordering::Relaxed) {
            let limit = 2 * self.opts.max_runs;
            if self.state.read().version.runs.len() >= limit {
                let t = std::time::Instant::now();
                let mut f = self.bg.lock();
                while self.state.read().version.runs.len() >= limit
                    && (f.pending || f.busy)
                    && !f.stop
                {
                    self.bg_cv
                        .wait_for(&mut f, std::time::Duration::from_millis(50));
                }
                drop(f);
                self.stalls.fetch_add(1, Ordering::Relaxed);
                self.stall_nanos
                    .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
        }
        self.writer.lock()
    }

    /// Runs the write `f` under the writer lock. A write that finds no
    /// room ([`EngineError::Full`]) asks for a compaction of every run —
    /// the tombstones and what they and newer puts shadow may free room —
    /// and is tried once more after it; once per manifest generation, so
    /// that a store really full answers at once. `f` must have done
    /// nothing when it returns `Full`.
    fn write_with<T>(
        &self,
        at: &mut dyn AllocThread,
        mut f: impl FnMut(&mut Writer, &mut dyn AllocThread) -> Result<T>,
    ) -> Result<T> {
        let mut retried = false;
        loop {
            let mut w = self.lock_writer();
            let held = LockHeld::enter();
            let r = f(&mut w, at);
            if !matches!(r, Err(EngineError::Full(_)))
                || retried
                || w.man.gen_ == w.full_tried_gen
                || w.man.runs.is_empty()
            {
                return r;
            }
            w.full_tried_gen = w.man.gen_;
            retried = true;
            // On this writer, background thread or not (a compaction the
            // thread is running holds no lock this needs: its install
            // finds its inputs gone and drops its output).
            self.major_requested.store(true, Ordering::Relaxed);
            w.compact_due = true;
            self.compact_inline(&mut w, at);
            drop(held);
        }
    }

    /// The background compactor's loop: waits for work, compacts until
    /// nothing is left to merge, and tells waiters after each step. Its
    /// allocator handle is taken on its first work (one of the store's
    /// spare lanes).
    fn compactor(&self) {
        let mut at: Option<Box<dyn AllocThread + Send + '_>> = None;
        loop {
            {
                let mut f = self.bg.lock();
                while !f.pending && !f.stop {
                    self.bg_cv.wait(&mut f);
                }
                if f.stop {
                    return;
                }
                f.pending = false;
                f.busy = true;
            }
            let r = self.compact_all(&mut at);
            let mut f = self.bg.lock();
            f.busy = false;
            match r {
                Ok(()) => f.error = None,
                // Out of room: the runs stay; the next flush tries again.
                Err(EngineError::Full(_)) => {}
                Err(e) => f.error = Some(e.to_string()),
            }
            drop(f);
            self.bg_cv.notify_all();
        }
    }

    /// Compaction steps until nothing is left to merge (or the engine closes).
    fn compact_all<'a>(&'a self, at: &mut Option<Box<dyn AllocThread + Send + 'a>>) -> Result<()> {
        let at = match at {
            Some(a) => a,
            None => at.insert(self.alloc.thread()?),
        };
        while let Some(p) = self.compact_prepare(&mut **at, Some(&self.bg))? {
            let mut w = self.writer.lock();
            let _held = LockHeld::enter();
            self.compact_install(&mut w, &mut **at, p)?;
            drop(w);
            self.bg_cv.notify_all();
            if self.bg.lock().stop {
                break;
            }
        }
        Ok(())
    }

    /// Waits until the background compactor has nothing left to do; its
    /// last error, if any.
    fn wait_compactor(&self) -> Result<()> {
        if !self.background.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut f = self.bg.lock();
        while (f.pending || f.busy) && !f.stop {
            self.bg_cv.wait(&mut f);
        }
        match &f.error {
            Some(e) => Err(corrupt(format!("background compaction: {e}"))),
            None => Ok(()),
        }
    }

    /// Log bytes above which a batch is [ingested](Self::ingest).
    fn ingest_threshold(&self) -> u64 {
        self.opts.ingest_bytes.unwrap_or(self.opts.memtable_bytes)
    }

    /// Commits a large batch as a run of its own: sorted (the last op of a
    /// key wins, deletes kept as tombstones), written to a reserved block
    /// and fenced, then linked as the newest run by one publish
    /// ([`install`](Self::install)) — the commit point: a crash before it
    /// leaves nothing of the batch, after it all. The memtable is flushed
    /// first, since its entries are older than the batch's and a reader
    /// looks in the memtable before the runs. The batch never passes
    /// through the log or the memtable: no record of its size to replay at
    /// open, no memtable of its size to flush on the next write.
    fn ingest(&self, w: &mut Writer, at: &mut dyn AllocThread, ops: &[Op<'_>]) -> Result<()> {
        let t = std::time::Instant::now();
        if w.pos > 0 {
            if self.fault == Some(Fault::IngestOverMemtable) {
                let mut st = self.state.write();
                for op in ops {
                    st.mem.remove(op.key());
                }
            } else {
                self.flush(w, at, 0, false)?;
            }
        }
        let mut idx: Vec<usize> = (0..ops.len()).collect();
        idx.sort_unstable_by(|&a, &b| ops[a].key().cmp(ops[b].key()).then(a.cmp(&b)));
        let version = self.state.read().version.clone();
        // With no older data anywhere, tombstones shadow nothing.
        let oldest = version.runs.is_empty() && w.pos == 0;
        let mut b = RunBuilder::new(self.opts.block_bytes, std::mem::take(&mut w.buf));
        let mut user = 0u64;
        for (n, &i) in idx.iter().enumerate() {
            let op = &ops[i];
            user += 7 + op.key().len() as u64;
            if idx.get(n + 1).is_some_and(|&nx| ops[nx].key() == op.key()) {
                continue; // a later op of the batch on the same key wins
            }
            match op {
                Op::Put { key, value } => {
                    user += value.len() as u64;
                    b.push(self.nonce, key, Some(value));
                }
                Op::Delete { key } if !oldest => b.push(self.nonce, key, None),
                Op::Delete { .. } => {}
            }
        }
        self.user_bytes.fetch_add(user, Ordering::Relaxed);
        if b.is_empty() {
            w.buf = b.into_buffer();
            return Ok(());
        }
        let (img, meta) = b.finish(self.nonce, self.opts.bloom_bits_per_key);
        self.wait_graveyard_holding(Some(&version));
        let r = at.reserve(img.len()).map_err(EngineError::from);
        let r = r.and_then(|res| {
            let off = res.off().raw() as usize;
            if self.fault == Some(Fault::RunUnflushed) {
                self.pool.write(off, &img);
            } else {
                self.pool.write_nodrain(off, &img);
            }
            // In flight: the manifest's fence (this thread's) completes it.
            let len = img.len() as u64;
            self.install(w, at, &version, 0, 0, Some((res, len, meta)), true)?;
            self.run_bytes.fetch_add(len, Ordering::Relaxed);
            Ok(())
        });
        w.buf = self.keep_buffer(img);
        r?;
        self.ingests.fetch_add(1, Ordering::Relaxed);
        self.flush_nanos
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.after_new_run(w);
        self.compact_inline(w, at);
        Ok(())
    }

    /// A run image buffer, kept for the next run unless it is far larger
    /// than a memtable's run (one huge ingest or merge should not hold its
    /// memory for the store's life).
    fn keep_buffer(&self, mut buf: Vec<u8>) -> Vec<u8> {
        if buf.capacity() as u64 > 4 * self.opts.memtable_bytes.max(1 << 20) {
            buf = Vec::new();
        }
        buf.clear();
        buf
    }

    /// Waits until no reader holds a run freed by an earlier switch, so
    /// that its block may be reused. Every path that reserves blocks calls
    /// it first.
    fn wait_graveyard(&self) {
        self.wait_graveyard_holding(None);
    }

    /// [`wait_graveyard`](Self::wait_graveyard) for a caller that holds
    /// `mine` itself: its own references are not waited for (a compaction
    /// reading runs that a major flush then merged away would otherwise
    /// wait for itself). Blocks the caller reads need not outlive its own
    /// reservation: it is done reading them by then.
    fn wait_graveyard_holding(&self, mine: Option<&Version>) {
        let mut g = self.graveyard.lock();
        let held = |r: &Arc<Run>| {
            1 + mine.map_or(0, |v| v.runs.iter().filter(|m| Arc::ptr_eq(m, r)).count())
        };
        let mut round = 0;
        while g.iter().any(|r| Arc::strong_count(r) > held(r)) {
            self.pool.medium().wait_hint(round);
            round += 1;
        }
        g.clear();
    }

    /// True while the allocator has room for a flush and then a merge of
    /// every run: free bytes at least the runs' bytes plus twice the
    /// memtable's log bytes (size-tiered merging needs up to 2× the data).
    fn headroom_ok(&self, w: &Writer) -> bool {
        let runs: u64 = self.state.read().version.runs.iter().map(|r| r.len).sum();
        let need = runs + 2 * w.pos + 2 * format::LINE * 64;
        let st = self.alloc.stats();
        st.free + st.grow_room >= need
    }

    /// True when the room left (free and still to grow) is under twice
    /// what a merge of everything needs: a store near its size cap, where
    /// flushes merge on the writer as they did before compaction moved to
    /// the background. A store far from its cap never is.
    fn near_cap(&self, w: &Writer) -> bool {
        let runs: u64 = self.state.read().version.runs.iter().map(|r| r.len).sum();
        let need = runs + 2 * w.pos + 2 * format::LINE * 64;
        let st = self.alloc.stats();
        st.free.saturating_add(st.grow_room) < 2 * need
    }

    /// Flushes the memtable into a run (merging newer runs per the policy,
    /// or all of them when `major`), making room for a record of `need` bytes.
    fn flush(
        &self,
        w: &mut Writer,
        at: &mut dyn AllocThread,
        need: u64,
        major: bool,
    ) -> Result<()> {
        let t = std::time::Instant::now();
        let r = self.flush_inner(w, at, need, major);
        self.flush_nanos
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        r
    }

    fn flush_inner(
        &self,
        w: &mut Writer,
        at: &mut dyn AllocThread,
        need: u64,
        major: bool,
    ) -> Result<()> {
        self.wait_graveyard();
        let version = self.state.read().version.clone();
        let runs = &version.runs;
        // A flush writes the memtable as the newest run, merging nothing:
        // merging is the compaction's (off the writer's path). Only a
        // major flush — deletes in a store too full to compact — merges
        // every run at once, dropping tombstones and what they shadow.
        // Ops of the publish besides the merged runs' frees: run, manifest,
        // segment allocs and frees, the link, with room for split words.
        let max_merge = at.max_publish_ops().saturating_sub(10);
        let j = if major {
            runs.len().min(max_merge)
        } else if self.near_cap(w) {
            // Near the store's size cap: merge as the flush goes (the
            // memtable with the newest runs, by the compaction's size
            // rule), so that its data is not first written as a run of its
            // own, which a compaction would then need room to rewrite (and
            // whose hole, freed, fragments what is left).
            let mut j = 0;
            let mut acc = w.pos.max(1);
            while j < runs.len()
                && j < max_merge
                && (runs[j].meta.data_bytes <= self.opts.merge_ratio.saturating_mul(acc)
                    || runs.len() - j + 1 > self.opts.max_runs)
            {
                acc += runs[j].meta.data_bytes;
                j += 1;
            }
            j
        } else {
            0
        };
        match self.flush_with(w, at, runs, j, need) {
            Err(EngineError::Full(_)) if j > 0 => self.flush_with(w, at, runs, 0, need),
            r => r,
        }?;
        self.after_new_run(w);
        Ok(())
    }

    /// After a flush or an ingest added a run: the background thread is
    /// told, or (no background thread) the compaction is due at the end
    /// of this write or the next ([`compact_inline`](Self::compact_inline)).
    fn after_new_run(&self, w: &mut Writer) {
        // A store short of room compacts on the writer, at once: a
        // background compactor that cannot get room for its output would
        // leave the runs to pile up while flushes add more.
        if self.background.load(Ordering::Relaxed) && self.headroom_ok(w) {
            self.bg.lock().pending = true;
            self.bg_cv.notify_all();
        } else {
            w.compact_due = true;
        }
    }

    /// Without a background thread: the compaction steps due, by the
    /// writer, after its own commit. Their failure is not the write's
    /// (which is durable): out of room, the runs stay as they are (reads
    /// search one more); another error is kept for
    /// [`quiesce`](Engine::quiesce) and the stats, as the thread's is.
    fn compact_inline(&self, w: &mut Writer, at: &mut dyn AllocThread) {
        if !std::mem::take(&mut w.compact_due) {
            return;
        }
        let r = loop {
            match self.compact_prepare(at, None) {
                Ok(Some(p)) => {
                    if let Err(e) = self.compact_install(w, at, p) {
                        break Err(e);
                    }
                }
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        let mut f = self.bg.lock();
        match r {
            Ok(()) => f.error = None,
            Err(EngineError::Full(_)) => {}
            Err(e) => f.error = Some(e.to_string()),
        }
    }

    /// The runs a compaction of `runs` merges: the newest `j` (0 or 1:
    /// nothing to do). Size-tiered, a binary counter: the next run joins
    /// while its data is at most [`Options::merge_ratio`] times what is
    /// merged so far, or while more than [`Options::max_runs`] would
    /// remain; so each byte is rewritten `O(log(data / memtable))` times.
    fn compaction_window(&self, runs: &[Arc<Run>], max_publish_ops: usize) -> usize {
        let max_merge = max_publish_ops.saturating_sub(10);
        let Some(first) = runs.first() else { return 0 };
        let mut acc = first.meta.data_bytes.max(1);
        let mut j = 1;
        while j < runs.len()
            && j < max_merge
            && (runs[j].meta.data_bytes <= self.opts.merge_ratio.saturating_mul(acc)
                || runs.len() - j + 1 > self.opts.max_runs)
        {
            acc += runs[j].meta.data_bytes;
            j += 1;
        }
        j
    }

    /// A compaction's first half, with no writer lock: chooses the runs to
    /// merge from the current version, merges them into one run image
    /// (tombstones dropped when the output becomes the oldest run), and
    /// writes it to a reserved block and fences. `None`: nothing to merge
    /// (or `stop` was raised meanwhile). Holds the compaction lock only
    /// while it runs; [`compact_install`](Self::compact_install) links the
    /// output if its inputs are still current.
    fn compact_prepare(
        &self,
        at: &mut dyn AllocThread,
        stop: Option<&Mutex<BgFlags>>,
    ) -> Result<Option<Prepared>> {
        let t = std::time::Instant::now();
        let mut buf = self.compaction.lock();
        let version = self.state.read().version.clone();
        let runs = &version.runs;
        // Asked by a write that found no room: every run, so that the
        // tombstones and what they shadow go (one run alone too: its
        // tombstones go).
        let major = self.major_requested.swap(false, Ordering::Relaxed);
        let j = if major {
            runs.len().min(at.max_publish_ops().saturating_sub(10))
        } else {
            self.compaction_window(runs, at.max_publish_ops())
        };
        if j < 2 && !(major && j == 1) {
            return Ok(None);
        }
        let last = j == runs.len();
        let mut b = RunBuilder::new(self.opts.block_bytes, std::mem::take(&mut *buf));
        let mut m = Merge::new(&self.pool, entries_iter(&[]), &runs[..j], &[])?;
        let mut n = 0u64;
        while let Some((k, v)) = m.next()? {
            if last && v.is_none() {
                continue;
            }
            b.push(self.nonce, k, v);
            n += 1;
            if n.is_multiple_of(4096) && stop.is_some_and(|f| f.lock().stop) {
                *buf = b.into_buffer();
                return Ok(None);
            }
        }
        drop(m);
        let out = if b.is_empty() {
            *buf = b.into_buffer();
            None
        } else {
            let (img, meta) = b.finish(self.nonce, self.opts.bloom_bits_per_key);
            self.wait_graveyard_holding(Some(&version));
            let res = match at.reserve(img.len()) {
                Ok(r) => r,
                Err(e) => {
                    *buf = img;
                    return Err(e.into());
                }
            };
            let off = res.off().raw() as usize;
            if self.fault == Some(Fault::RunUnflushed) {
                self.pool.write(off, &img);
            } else {
                self.pool.write_nodrain(off, &img);
            }
            // Left in flight: the install's manifest fence, on this same
            // thread, makes the run durable before the record linking it.
            let len = img.len() as u64;
            *buf = self.keep_buffer(img);
            Some((res, len, meta))
        };
        self.compact_nanos
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(Some(Prepared {
            inputs: runs[..j].iter().map(|r| r.id).collect(),
            out,
        }))
    }

    /// A compaction's second half, under the writer lock: replaces its
    /// inputs by its output in a new manifest and publishes the switch.
    /// The log is untouched (same segment, generation and first sequence
    /// number), so the memtable's records stay valid. If a major flush
    /// merged the inputs away meanwhile, the output is dropped.
    fn compact_install(&self, w: &mut Writer, at: &mut dyn AllocThread, p: Prepared) -> Result<()> {
        let cur = self.state.read().version.clone();
        let j = p.inputs.len();
        let at_pos = (0..=cur.runs.len().saturating_sub(j)).find(|&i| {
            cur.runs.len() >= i + j
                && cur.runs[i..i + j]
                    .iter()
                    .zip(&p.inputs)
                    .all(|(a, &b)| a.id == b)
        });
        let Some(i) = at_pos else {
            // No flush left in flight (the output's lines).
            self.pool.fence();
            if let Some((res, _, _)) = p.out {
                let _ = at.cancel(res);
            }
            return Ok(());
        };
        let len = p.out.as_ref().map_or(0, |o| o.1);
        self.install(w, at, &cur, i, j, p.out, false)?;
        self.compactions.fetch_add(1, Ordering::Relaxed);
        self.merged_runs.fetch_add(j as u64, Ordering::Relaxed);
        self.compact_bytes.fetch_add(len, Ordering::Relaxed);
        self.run_bytes.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    /// Links a run written and fenced outside the log (a compaction's or
    /// an ingest's): a new manifest lists `cur.runs` with `cur.runs[i..i +
    /// j]` replaced by `out`, keeping the log as it is (`ingest` marks an
    /// ingest, for its planted fault). One publish: the run's and
    /// manifest's allocations, the frees of the replaced runs and of the
    /// old manifest, the fixed-area link. Then the new version is
    /// installed.
    #[allow(clippy::too_many_arguments)]
    fn install(
        &self,
        w: &mut Writer,
        at: &mut dyn AllocThread,
        cur: &Version,
        i: usize,
        j: usize,
        out: Option<(Reservation, u64, RunMeta)>,
        ingest: bool,
    ) -> Result<()> {
        let mut list: Vec<(u64, u64)> = cur.runs[..i].iter().map(|r| (r.off, r.len)).collect();
        if let Some((res, len, _)) = &out {
            list.push((res.off().raw(), *len));
        }
        list.extend(cur.runs[i + j..].iter().map(|r| (r.off, r.len)));
        let cancel = |at: &mut dyn AllocThread, out: Option<(Reservation, u64, RunMeta)>| {
            if let Some((res, _, _)) = out {
                let _ = at.cancel(res);
            }
        };
        if list.len() > format::MAX_MANIFEST_RUNS {
            cancel(at, out);
            return Err(EngineError::Full(format!(
                "{} runs: more than a manifest lists",
                list.len()
            )));
        }
        let log_gen = if self.fault == Some(Fault::CompactionNewLogGen) && !ingest {
            w.man.gen_ + 1
        } else {
            w.man.log_gen
        };
        let man = Manifest {
            gen_: w.man.gen_ + 1,
            seg: w.man.seg,
            cap: w.man.cap,
            log_gen,
            first_seq: w.man.first_seq,
            runs: list,
            marks: true,
        };
        let man_res = match at.reserve(man.len()) {
            Ok(r) => r,
            Err(e) => {
                cancel(at, out);
                return Err(e.into());
            }
        };
        let man_off = man_res.off().raw();
        let mb = man.encode(self.nonce);
        self.pool.write(man_off as usize, &mb);
        self.pool.flush(man_off as usize, mb.len());
        self.pool.fence();
        let mut allocs = Vec::with_capacity(2);
        let mut new_run = None;
        if let Some((res, len, meta)) = out {
            new_run = Some(Arc::new(Run::new(res.off().raw(), len, meta)));
            allocs.push(res);
        }
        allocs.push(man_res);
        let mut frees: Vec<POff<u8>> = cur.runs[i..i + j]
            .iter()
            .map(|r| POff::new(r.off))
            .collect();
        frees.push(POff::new(w.man_off));
        let links = [Link {
            at: POff::new(self.area_off),
            value: man_off,
        }];
        if let Err(e) = at.publish(&Publish {
            allocs: &allocs,
            frees: &frees,
            links: &links,
        }) {
            cancel_all(at, allocs);
            return Err(e.into());
        }
        let mut runs = Vec::with_capacity(cur.runs.len() + 1 - j);
        runs.extend(cur.runs[..i].iter().cloned());
        runs.extend(new_run);
        runs.extend(cur.runs[i + j..].iter().cloned());
        w.man = man;
        w.man_off = man_off;
        self.state.write().version = Arc::new(Version { runs });
        self.graveyard
            .lock()
            .extend(cur.runs[i..i + j].iter().cloned());
        Ok(())
    }

    /// Merges the memtable with `runs[..j]` into a run image built in
    /// `buf`; tombstones are dropped when the output is the oldest run.
    /// Returns the buffer (the image when there is a run) and the run's
    /// metadata (`None`: nothing left, no run).
    fn build_run(
        &self,
        runs: &[Arc<Run>],
        j: usize,
        buf: Vec<u8>,
    ) -> Result<(Vec<u8>, Option<RunMeta>)> {
        let nonce = self.nonce;
        let last = j == runs.len();
        let mut b = RunBuilder::new(self.opts.block_bytes, buf);
        // Only this writer changes the memtable, and it holds the writer
        // lock: the read lock just keeps the borrow honest (no medium
        // event happens under it).
        let st = self.state.read();
        let mut m = Merge::new(&self.pool, mem_iter(st.mem.iter()), &runs[..j], &[])?;
        while let Some((k, v)) = m.next()? {
            if last && v.is_none() {
                continue;
            }
            b.push(nonce, k, v);
        }
        drop(m);
        drop(st);
        Ok(if b.is_empty() {
            (b.into_buffer(), None)
        } else {
            let (img, meta) = b.finish(nonce, self.opts.bloom_bits_per_key);
            (img, Some(meta))
        })
    }

    fn flush_with(
        &self,
        w: &mut Writer,
        at: &mut dyn AllocThread,
        runs: &[Arc<Run>],
        j: usize,
        need: u64,
    ) -> Result<()> {
        let (buf, meta) = self.build_run(runs, j, std::mem::take(&mut w.buf))?;
        let image = meta.is_some().then_some(&buf[..]);
        let r = self.switch(w, at, runs, j, need, image, meta);
        w.buf = self.keep_buffer(buf);
        r
    }

    /// Writes the run image and a new manifest and publishes the switch;
    /// then installs the new version and empties the memtable.
    #[allow(clippy::too_many_arguments)]
    fn switch(
        &self,
        w: &mut Writer,
        at: &mut dyn AllocThread,
        runs: &[Arc<Run>],
        j: usize,
        need: u64,
        image: Option<&[u8]>,
        meta: Option<RunMeta>,
    ) -> Result<()> {
        let nonce = self.nonce;
        let want_cap = default_cap(&self.opts).max(round_line(need));
        let new_seg = want_cap != w.man.cap;
        let run_count = usize::from(image.is_some()) + runs.len() - j;
        if run_count > format::MAX_MANIFEST_RUNS {
            return Err(EngineError::Full(format!(
                "{run_count} runs: more than a manifest lists"
            )));
        }
        let man_len = format::MANIFEST_HEADER + 16 * run_count;
        let mut sizes = Vec::new();
        if let Some(img) = &image {
            sizes.push(img.len());
        }
        if new_seg {
            sizes.push(want_cap as usize);
        }
        sizes.push(man_len);
        let rs = reserve_all(at, &sizes)?;
        let mut it = rs.iter();
        let run_at = image.as_ref().map(|_| it.next().expect("run").off().raw());
        let seg = if new_seg {
            it.next().expect("segment").off().raw()
        } else {
            w.man.seg
        };
        let man_off = it.next().expect("manifest").off().raw();
        let mut list = Vec::with_capacity(run_count);
        if let (Some(o), Some(img)) = (run_at, &image) {
            list.push((o, img.len() as u64));
        }
        list.extend(runs[j..].iter().map(|r| (r.off, r.len)));
        let man = Manifest {
            gen_: w.man.gen_ + 1,
            seg,
            cap: want_cap,
            log_gen: w.man.gen_ + 1,
            first_seq: w.next_seq,
            runs: list,
            marks: true,
        };
        if let (Some(o), Some(img)) = (run_at, &image) {
            if self.fault == Some(Fault::RunUnflushed) {
                self.pool.write(o as usize, img);
            } else {
                // Large and sequential: non-temporal stores (no flushes).
                self.pool.write_nodrain(o as usize, img);
            }
        }
        let mb = man.encode(nonce);
        self.pool.write(man_off as usize, &mb);
        self.pool.flush(man_off as usize, mb.len());
        if self.fault == Some(Fault::TruncateBeforeSwitch) && w.pos > 0 {
            self.pool.fill(w.man.seg as usize, w.pos as usize, 0);
            self.pool.flush(w.man.seg as usize, w.pos as usize);
        }
        // Run and manifest durable before the record that links them.
        self.pool.fence();
        let mut frees: Vec<POff<u8>> = runs[..j].iter().map(|r| POff::new(r.off)).collect();
        frees.push(POff::new(w.man_off));
        if new_seg {
            frees.push(POff::new(w.man.seg));
        }
        let links = [Link {
            at: POff::new(self.area_off),
            value: man_off,
        }];
        if let Err(e) = at.publish(&Publish {
            allocs: &rs,
            frees: &frees,
            links: &links,
        }) {
            cancel_all(at, rs);
            return Err(e.into());
        }
        // Durable: switch the volatile state.
        let mut new_runs = Vec::with_capacity(run_count);
        if let (Some(o), Some(img), Some(meta)) = (run_at, &image, meta) {
            new_runs.push(Arc::new(Run::new(o, img.len() as u64, meta)));
        }
        new_runs.extend(runs[j..].iter().cloned());
        w.man = man;
        w.man_off = man_off;
        w.pos = 0;
        // The records of relaxed commits are in the run now, durable.
        w.unfenced = None;
        {
            let mut st = self.state.write();
            st.version = Arc::new(Version { runs: new_runs });
            st.mem.clear();
        }
        self.graveyard.lock().extend(runs[..j].iter().cloned());
        self.flushes.fetch_add(1, Ordering::Relaxed);
        self.merged_runs.fetch_add(j as u64, Ordering::Relaxed);
        self.run_bytes.fetch_add(
            image.as_ref().map_or(0, |i| i.len() as u64),
            Ordering::Relaxed,
        );
        Ok(())
    }
}

/// A cursor over a run's records from a key on; its current record is
/// read in place from the block buffer.
struct RunCursor<'a> {
    pool: &'a Region,
    run: &'a Run,
    block: usize,
    buf: Vec<u8>,
    /// The current record: (start, end) of key and value in `buf`, and
    /// whether it is a tombstone; `None` at the end.
    cur: Option<(usize, usize, usize, bool)>,
    /// Where the record after the current one starts.
    next: usize,
}

impl<'a> RunCursor<'a> {
    fn seek(pool: &'a Region, run: &'a Run, from: &[u8]) -> Result<RunCursor<'a>> {
        let i = run
            .meta
            .blocks
            .partition_point(|b| &*b.first <= from)
            .saturating_sub(1);
        let mut c = RunCursor {
            pool,
            run,
            block: i,
            buf: Vec::new(),
            cur: None,
            next: 0,
        };
        c.load()?;
        c.advance()?;
        // Skip the records before `from`.
        while c.current().is_some_and(|(k, _)| k < from) {
            c.advance()?;
        }
        Ok(c)
    }

    fn load(&mut self) -> Result<()> {
        self.next = 0;
        self.buf.clear();
        if let Some(b) = self.run.meta.blocks.get(self.block) {
            format::read_block(self.pool, self.run.off, &self.run.meta, b, &mut self.buf)?;
        }
        Ok(())
    }

    fn advance(&mut self) -> Result<()> {
        while self.next >= self.buf.len() {
            if self.block >= self.run.meta.blocks.len() {
                self.cur = None;
                return Ok(());
            }
            self.block += 1;
            self.load()?;
        }
        let p = self.next;
        let (k, v, next) = parse_run_record(&self.buf, p)?;
        let ks = p + format::REC_FIXED;
        let ke = ks + k.len();
        self.cur = Some((ks, ke, next, v.is_none()));
        self.next = next;
        Ok(())
    }

    fn current(&self) -> Option<MergedEntry<'_>> {
        self.cur.map(|(ks, ke, end, tomb)| {
            let v = (!tomb).then(|| &self.buf[ke..end]);
            (&self.buf[ks..ke], v)
        })
    }
}

/// The memtable's entries from `from` on, ascending, until `limit` of
/// them are puts (tombstones are kept: they shadow older runs).
fn mem_from(mem: &BTreeMap<Vec<u8>, Option<Vec<u8>>>, from: &[u8], limit: usize) -> Vec<Entry> {
    let mut v = Vec::new();
    let mut puts = 0;
    for (k, val) in mem.range::<[u8], _>((Bound::Included(from), Bound::Unbounded)) {
        v.push((k.clone(), val.clone()));
        if val.is_some() {
            puts += 1;
            if puts >= limit {
                break;
            }
        }
    }
    v
}

/// [`mem_from`] descending: the entries below `upto`.
fn mem_below(
    mem: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    upto: Bound<&[u8]>,
    limit: usize,
) -> Vec<Entry> {
    let mut v = Vec::new();
    let mut puts = 0;
    for (k, val) in mem.range::<[u8], _>((Bound::Unbounded, upto)).rev() {
        v.push((k.clone(), val.clone()));
        if val.is_some() {
            puts += 1;
            if puts >= limit {
                break;
            }
        }
    }
    v
}

/// A read-only view: a copy of the memtable and the run list of one
/// moment. The runs it holds are not reused while it lives: the next
/// memtable flush waits for it (`Lsm::wait_graveyard`), so a snapshot
/// held across a flush stalls the writer that flushes.
struct LsmSnapshot<'e> {
    eng: &'e Lsm,
    mem: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    version: Arc<Version>,
    blk: Vec<u8>,
}

/// A live reader: the engine's own lock-free read path.
struct LsmReader<'e> {
    eng: &'e Lsm,
    blk: Vec<u8>,
}

impl SnapshotRead for LsmReader<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        let _p = breakdown::phase(Phase::Scan);
        self.eng.get_into(key, out, &mut self.blk)
    }

    fn scan_with(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        self.eng.scan(from, limit, f)
    }

    fn scan_back_with(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        self.eng.scan_back(upto, limit, f)
    }

    fn len(&mut self) -> Result<u64> {
        self.eng.live_len()
    }
}

impl SnapshotRead for LsmSnapshot<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        if let Some(v) = self.mem.get(key) {
            out.clear();
            if let Some(v) = v {
                out.extend_from_slice(v);
            }
            return Ok(v.is_some());
        }
        self.eng.runs_get(&self.version, key, out, &mut self.blk)
    }

    fn scan_with(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        if limit == 0 {
            return Ok(0);
        }
        let mem = mem_from(&self.mem, from, limit);
        self.eng.merge_from(&mem, &self.version, from, limit, f)
    }

    fn scan_back_with(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        if limit == 0 {
            return Ok(0);
        }
        let mem = mem_below(&self.mem, upto, limit);
        self.eng.merge_below(&mem, &self.version, upto, limit, f)
    }

    fn len(&mut self) -> Result<u64> {
        let mem: Vec<Entry> = self
            .mem
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        self.eng.count(&mem, &self.version)
    }
}

/// A run read backwards: every record of the current block is indexed
/// when the block is loaded, then visited from the last.
struct RunBackCursor<'a> {
    pool: &'a Region,
    run: &'a Run,
    /// The block loaded; `None` before the first.
    block: Option<usize>,
    buf: Vec<u8>,
    /// Every record of `buf`: (key start, key end, record end, tombstone).
    recs: Vec<(usize, usize, usize, bool)>,
    /// One past the current record in `recs`; 0 when exhausted.
    at: usize,
}

impl<'a> RunBackCursor<'a> {
    /// A cursor at the greatest record below `upto`.
    fn seek(pool: &'a Region, run: &'a Run, upto: Bound<&[u8]>) -> Result<RunBackCursor<'a>> {
        let blocks = &run.meta.blocks;
        let end = match upto {
            Bound::Included(u) => blocks.partition_point(|b| &*b.first <= u),
            Bound::Excluded(u) => blocks.partition_point(|b| &*b.first < u),
            Bound::Unbounded => blocks.len(),
        };
        let mut c = RunBackCursor {
            pool,
            run,
            block: end.checked_sub(1),
            buf: Vec::new(),
            recs: Vec::new(),
            at: 0,
        };
        c.load()?;
        let below = |k: &[u8]| match upto {
            Bound::Included(u) => k <= u,
            Bound::Excluded(u) => k < u,
            Bound::Unbounded => true,
        };
        while c.current().is_some_and(|(k, _)| !below(k)) {
            c.retreat()?;
        }
        Ok(c)
    }

    /// Loads block `self.block` (nothing when `None`) and stands on its
    /// last record.
    fn load(&mut self) -> Result<()> {
        self.buf.clear();
        self.recs.clear();
        self.at = 0;
        let Some(b) = self.block.and_then(|i| self.run.meta.blocks.get(i)) else {
            return Ok(());
        };
        format::read_block(self.pool, self.run.off, &self.run.meta, b, &mut self.buf)?;
        let mut p = 0;
        while p < self.buf.len() {
            let (k, v, next) = parse_run_record(&self.buf, p)?;
            let ks = p + format::REC_FIXED;
            self.recs.push((ks, ks + k.len(), next, v.is_none()));
            p = next;
        }
        self.at = self.recs.len();
        Ok(())
    }

    /// Steps to the previous record (the previous block's last at a block
    /// start).
    fn retreat(&mut self) -> Result<()> {
        self.at = self.at.saturating_sub(1);
        while self.at == 0 {
            match self.block {
                Some(i) if i > 0 => {
                    self.block = Some(i - 1);
                    self.load()?;
                }
                _ => {
                    self.block = None;
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn current(&self) -> Option<MergedEntry<'_>> {
        let &(ks, ke, end, tomb) = self.recs.get(self.at.checked_sub(1)?)?;
        let v = (!tomb).then(|| &self.buf[ke..end]);
        Some((&self.buf[ks..ke], v))
    }
}

/// A merged entry: key and value (`None`: tombstone).
type MergedEntry<'a> = (&'a [u8], Option<&'a [u8]>);

/// Memtable entries in key order (value or tombstone).
type MemIter<'a> = Box<dyn Iterator<Item = MergedEntry<'a>> + 'a>;

fn entries_iter(mem: &[Entry]) -> MemIter<'_> {
    Box::new(mem.iter().map(|(k, v)| (k.as_slice(), v.as_deref())))
}

fn mem_iter<'a>(mem: impl Iterator<Item = (&'a Vec<u8>, &'a Option<Vec<u8>>)> + 'a) -> MemIter<'a> {
    Box::new(mem.map(|(k, v)| (k.as_slice(), v.as_deref())))
}

enum Source<'a> {
    Mem {
        it: MemIter<'a>,
        cur: Option<MergedEntry<'a>>,
    },
    Run(RunCursor<'a>),
}

impl Source<'_> {
    fn advance(&mut self) -> Result<()> {
        match self {
            Source::Mem { it, cur } => {
                *cur = it.next();
                Ok(())
            }
            Source::Run(c) => c.advance(),
        }
    }

    fn current(&self) -> Option<MergedEntry<'_>> {
        match self {
            Source::Mem { cur, .. } => *cur,
            Source::Run(c) => c.current(),
        }
    }
}

/// K-way merge, newest source first: for equal keys the newest wins and
/// the older versions are skipped. Yields tombstones too. Entries are
/// read in place (memtable, or a run's block buffer): a merge copies and
/// allocates nothing per entry.
struct Merge<'a> {
    srcs: Vec<Source<'a>>,
    /// The source whose entry the last `next` returned (advanced lazily).
    cur: Option<usize>,
}

impl<'a> Merge<'a> {
    /// `mem` (already starting at `from`), then `runs` newest first from `from`.
    fn new(
        pool: &'a Region,
        mut mem: MemIter<'a>,
        runs: &'a [Arc<Run>],
        from: &[u8],
    ) -> Result<Self> {
        let first = mem.next();
        let mut srcs = vec![Source::Mem {
            it: mem,
            cur: first,
        }];
        for r in runs {
            srcs.push(Source::Run(RunCursor::seek(pool, r, from)?));
        }
        Ok(Merge { srcs, cur: None })
    }

    #[allow(clippy::should_implement_trait)]
    fn next(&mut self) -> Result<Option<MergedEntry<'_>>> {
        if let Some(c) = self.cur.take() {
            self.srcs[c].advance()?;
        }
        let mut best: Option<usize> = None;
        for i in 0..self.srcs.len() {
            if let Some((k, _)) = self.srcs[i].current()
                && best.is_none_or(|b| k < self.srcs[b].current().expect("live").0)
            {
                best = Some(i);
            }
        }
        let Some(b) = best else { return Ok(None) };
        // Older versions of the same key are shadowed: skip them.
        for i in b + 1..self.srcs.len() {
            let (lo, hi) = self.srcs.split_at_mut(i);
            let key = lo[b].current().expect("live").0;
            while hi[0].current().is_some_and(|(k, _)| k <= key) {
                hi[0].advance()?;
            }
        }
        self.cur = Some(b);
        Ok(self.srcs[b].current())
    }
}

struct LsmSession<'a> {
    eng: &'a Lsm,
    at: Box<dyn AllocThread + Send + 'a>,
    rec: Vec<u8>,
    blk: Vec<u8>,
    scratch: Vec<u8>,
    _ticket: Ticket<'a>,
}

impl Session for LsmSession<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        let _p = breakdown::phase(Phase::Scan);
        self.eng.get_into(key, out, &mut self.blk)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key)?;
        check_value(value)?;
        let ops = [Op::Put { key, value }];
        format::encode_ops(&mut self.rec, &ops);
        let (eng, rec) = (self.eng, &mut self.rec);
        eng.write_with(&mut *self.at, |w, at| {
            eng.append(w, at, rec, &ops, Durability::Immediate)
        })
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        check_key(key)?;
        let ops = [Op::Delete { key }];
        format::encode_ops(&mut self.rec, &ops);
        let (eng, rec, scratch, blk) = (self.eng, &mut self.rec, &mut self.scratch, &mut self.blk);
        eng.write_with(&mut *self.at, |w, at| {
            // Under the writer lock no other write can change the answer.
            let scan = breakdown::phase(Phase::Scan);
            if !eng.get_into(key, scratch, blk)? {
                return Ok(false);
            }
            drop(scan);
            eng.append(w, at, rec, &ops, Durability::Immediate)
                .map(|()| true)
        })
    }

    fn scan_with(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _p = breakdown::phase(Phase::Scan);
        self.eng.scan(from, limit, f)
    }

    fn scan_back_with(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _p = breakdown::phase(Phase::Scan);
        self.eng.scan_back(upto, limit, f)
    }

    fn batch(&mut self, ops: &[Op<'_>]) -> Result<()> {
        self.batch_with(ops, Durability::Immediate)
    }

    fn batch_with(&mut self, ops: &[Op<'_>], d: Durability) -> Result<()> {
        check_ops(ops)?;
        if ops.is_empty() {
            return Ok(());
        }
        // A batch's log record body: its op count and ops.
        let bytes: usize = ops
            .iter()
            .map(|o| {
                7 + o.key().len()
                    + if let Op::Put { value, .. } = o {
                        value.len()
                    } else {
                        0
                    }
            })
            .sum();
        let eng = self.eng;
        if (format::REC_HEADER + 4 + bytes) as u64 > eng.ingest_threshold() {
            return eng.write_with(&mut *self.at, |w, at| {
                let scope = ferrite_pmem::trace::commit_scope();
                let r = eng.ingest(w, at, ops);
                if r.is_ok() {
                    scope.mark();
                }
                r
            });
        }
        // Only with `ingest_bytes` set past 2 GiB: a log record's body
        // length has 31 bits.
        if bytes + 4 > format::MAX_REC_BODY {
            return Err(EngineError::BatchTooLarge {
                ops: ops.len(),
                max: format::MAX_REC_BODY / (7 + crate::MAX_KEY + crate::MAX_VALUE),
            });
        }
        format::encode_ops(&mut self.rec, ops);
        let rec = &mut self.rec;
        eng.write_with(&mut *self.at, |w, at| eng.append(w, at, rec, ops, d))
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
