//! **Copy-on-write** engine [P2 §3.1, notes A3]: a shadow-paged B+tree
//! whose root switches atomically, with many updates per switch under
//! group commit.
//!
//! # Design
//!
//! - **Nodes are allocator blocks, immutable once reachable** from the
//!   durable root (the root line in the fixed area; formats in
//!   [`format`](mod@format)). Values longer than [`Options::inline_max`]
//!   live in their own blob blocks, referenced from the leaves (with their
//!   checksum); shorter ones inline. A
//!   node is split when its encoding passes [`Options::node_bytes`] and
//!   merged with a neighbour when under a quarter of it.
//! - **An update copies its leaf-to-root path** into DRAM ([`tree`]),
//!   changes it there, reserves one new block per copied node and new
//!   blob, writes and flushes them (no fence), and commits with **one
//!   allocator publish**: the new blocks' allocations, the frees of blocks
//!   that no reader can reach any more, and four [`Link`]s storing the
//!   new root, its checksum, and the replaced root and its checksum in
//!   the root line — atomic, 2 fences (`ferrite_alloc`'s lane protocol).
//!   The same publish allocates a new **switch record** (below), links it
//!   and its checksum with two more words of the root line, and frees the
//!   previous record.
//!   There is no log. The publish's first fence makes the nodes durable
//!   together with the allocator's redo record; a crash at that fence can
//!   keep the record and lose node lines, which is why pointers carry
//!   checksums and the root line keeps the previous root (see
//!   [`format`](mod@format)): recovery then goes back one version instead
//!   of paying a third fence per switch.
//! - **Group commit.** A writing session joins the current group: if no
//!   leader is committing, it becomes the leader, takes every request
//!   queued so far, applies them all to one shadow tree (a node touched by
//!   several is copied once) and publishes one root switch; the others
//!   wait and return when the switch covering them is durable. A lone
//!   session therefore gets one switch per operation (durable per op,
//!   like the rest of the store); concurrent writers share switches and
//!   their fences. Each request stays all-or-nothing: a group that fails
//!   (a full pool) is retried one request at a time, so only the request
//!   that does not fit fails.
//! - **Readers take no lock but a shared one** for the instant of cloning
//!   the current version (`Arc<Version>`, the durable root); they walk
//!   immutable nodes. The blocks a switch makes unreachable are not freed
//!   by it: they are kept, with the superseded version, in a FIFO, and
//!   freed by a later publish (the next switch, or a free-only publish when
//!   the pool is full) once no reader holds that version or an older one.
//! - **Switch record (SR,** format in [`format`](mod@format)**).** Recovery
//!   has three things to find out, which a walk of the whole tree and heap
//!   (O(tree + heap): 0.9–1.4 s for 1 M keys of 1000 bytes) answers: (1)
//!   whether the last switch reached the media entirely (its nodes and
//!   blobs are flushed but not fenced before the publish); (2) which
//!   allocated blocks are retired but not yet freed (deferred frees live in
//!   DRAM, `Writer`); (3) whether a switch too large for one publish left
//!   surplus allocations durable without its root switch. The SR answers
//!   all three in O(last switch + pending frees): every publish that
//!   switches the root or frees deferred blocks writes one, listing (1)
//!   the blocks the switch newly wrote with their lengths and checksums,
//!   and (2) the complete list of blocks pending free after that publish;
//!   for (3) the first surplus publish of a switch links `gc_needed` to 1
//!   in the root line, and the switch's final publish links it back to 0.
//!   Every change of the root line, the SR words and the blocks the SR
//!   lists happens in one publish, so the durable SR always describes the
//!   durable root and the durable allocation state: a block listed as
//!   pending is allocated and unreferenced, and no block allocated and
//!   unreferenced is missing from it unless `gc_needed` is set. A record
//!   that would pass [`format::MAX_SR`] bytes, or that finds no room in a
//!   full pool, is not written: the publish links offset 0, and the next
//!   recovery walks.
//! - **Recovery, fast path** (`gc_needed` 0, an SR linked): read the SR,
//!   check its checksum against its own header and the root line, verify
//!   every block it lists as new (a node's header and checksum, a blob's
//!   checksum) and the root node against the root line. All good: the
//!   newest version is intact (the older ones were fenced by later
//!   publishes), the key count is the SR's, and the pending blocks are
//!   freed in **one** publish that also links a replacement SR listing
//!   nothing pending and frees the old SR — so a crash during it either
//!   leaves the old SR with its blocks allocated or the new one with them
//!   free, never a record naming freed blocks (no double free). No walk,
//!   no [`PAllocator::for_each_allocated`]: O(last switch + pending).
//! - **Recovery, slow path** (any check fails — a torn last switch —,
//!   `gc_needed` set, no SR, or more pending blocks than one publish
//!   holds): the root line's tree is consistent by construction, or — the
//!   switch in flight at the crash being torn — its predecessor is,
//!   intact. Open walks it (checksums, key order, levels, bounds; O(tree +
//!   heap)), counts the keys and compares the blocks it references with
//!   the allocator's: a referenced block that is not allocated is
//!   corruption; an allocated block that is not referenced (the deferred
//!   frees of the last switches, new blocks of a switch that crashed,
//!   the old SR) is freed. The first of those publishes also unlinks the
//!   SR (its pending blocks are among the frees; a crash after them must
//!   not let the next recovery free them again) and, when going back a
//!   version, switches the root back; a last publish links a fresh SR
//!   with nothing pending and clears `gc_needed`, so that the next
//!   recovery is fast. Idempotent: a crash during it leaves fewer such
//!   blocks to free and no SR, so the next recovery walks again.
//! - **Reads verify what they return.** Every node a get, a scan or a
//!   writer's descent reads is checked against its own checksum and the
//!   one its parent (or the root line) recorded, every value blob against
//!   the checksum its leaf recorded: damage on the medium (a stray write,
//!   a bad block) is [`EngineError::Corrupt`] or, for a value,
//!   [`EngineError::DamagedValue`] naming the key — never wrong bytes, and
//!   never copied into a new version under a fresh checksum. The cost: a
//!   CRC32C of each node on the path (≈ 5 × 512 B for 100 k keys).
//!
//! # Cost per operation (one session, durable per op)
//!
//! | operation              | fences | lines flushed                                              |
//! |------------------------|--------|------------------------------------------------------------|
//! | put / delete / batch   | 2      | new path nodes (≈ node bytes / 64 each) + new blobs + the SR (24 B + 16 B per new block + 8 B per pending free: 2–3 lines for a put) + allocator record and words |
//! | delete of absent key   | 0      | 0                                                          |
//! | get / scan             | 0      | 0                                                          |
//!
//! The switch record costs no fence: it is written and flushed with the
//! nodes and rides the switch's publish. It costs its lines above and
//! three more allocator operations per switch publish (its allocation,
//! the old record's free, two more links: the root-line word pair, one
//! line), plus the `gc_needed` link on the first and last publish of a
//! switch split over several. Publishes that free deferred blocks
//! (`release`: quiesce, a full pool) write a record too.
//!
//! Two fences is the floor for this design: the new blocks and the
//! allocation of them must be durable before the root line is (one
//! fence), and the root line before the operation returns (a second);
//! the allocator's publish does exactly this. With `n` writers in a group
//! the two fences are shared: `2/n` per operation. Allocator extras come
//! on top: the Ferrite heap fences once when a thread opens a new run
//! (measured: 2.13 fences per 1000-byte put into a 6000-key tree), the
//! lock heap twice per reserve that splits a free block (7.9 fences per
//! put, 7.6 before the switch record: a put reserves a blob, the path's
//! nodes and the record; the Ferrite heap stayed at 2.13). Bytes per put
//! with the default 512-byte nodes: the 1000-byte blob and 3–4 path nodes,
//! written non-temporally (≥ 256 B) or flushed (≈ 2.3 KB in all).
//! Measured (`fences_per_operation`, 2 cores shared with other jobs): 2
//! and 4 writer threads gave 2.13 and 2.09 fences/op — the writers seldom
//! overlapped inside a commit on this machine (1.00–1.09 requests per
//! switch), whose DRAM fences are cheap; `group_commit_shares_one_switch`
//! forces the overlap: three queued puts, one switch, 3 fences for the
//! three.
//!
//! # Planted faults (`Fault`, checks only)
//!
//! - `Fault::SwitchBeforeFlush`: the new nodes and blobs are written but
//!   not flushed before the publish that switches the root, so a crash can
//!   leave a durable root pointing at nodes that never reached the media.
//! - `Fault::FreeBeforeSwitch`: the blocks of the old version are freed
//!   by a publish of their own *before* the switch (and not deferred), so
//!   a crash between the two leaves the durable root referencing freed
//!   blocks.
//! - `Fault::RecordOmitsRetired`: the switch record leaves out the
//!   blocks the switch itself retires, so a crash before they are freed
//!   leaks them (the fast path trusts the record and does not walk).

mod commit;
mod fault;
pub mod format;
mod read;
mod recovery;
mod scrub;
mod session;
#[cfg(test)]
mod tests;
pub mod tree;

use crate::breakdown::{self, Phase};
use crate::ctx::EngineCtx;
use crate::gate::{SessionGate, Ticket};
use crate::{
    Damage, Engine, EngineError, EngineKind, EngineRecovery, EngineStats, Op, Result, Scrub,
    Session, SnapshotRead, StoreOptions, Walk, check_key, check_ops, check_value,
};
use commit::{gc_link, root_links, sr_links, write_sr};
use ferrite_alloc::{AllocThread, Link, PAllocator, Publish, Reservation};
use ferrite_pmem::{LockHeld, POff, Region};
use format::{Ent, KIND_LEAF, MAX_HEIGHT, ValRef};
use parking_lot::{Condvar, Mutex, RwLock};
use read::{CowReader, CowSnapshot, get_at, scan_at, scan_back_at};
pub(crate) use recovery::open;
use scrub::{scrub_node, walk_tree};
use session::CowSession;
use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tree::Shadow;

// Planted bugs: public only with the `checks` feature (`fault.rs`).
#[cfg(feature = "checks")]
pub use fault::Fault;
#[cfg(not(feature = "checks"))]
pub(crate) use fault::Fault;

/// Tuning knobs of this engine.
#[derive(Clone, Debug)]
pub struct Options {
    /// Split target of a node, bytes of its encoding (128 ..= 16384).
    pub node_bytes: usize,
    /// Values up to this many bytes are stored in the leaf; longer ones in
    /// a blob of their own (0 ..= 4096).
    pub inline_max: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            node_bytes: 512,
            inline_max: 128,
        }
    }
}

impl Options {
    /// Small sizes for the crash checks: nodes split past 128 bytes and
    /// values past 16 bytes go to blobs, so splits, merges, root changes
    /// and blob frees happen within a short script.
    pub fn for_checks() -> Options {
        Options {
            node_bytes: 128,
            inline_max: 16,
        }
    }
}

pub(crate) fn fixed_area_bytes(_opts: &StoreOptions) -> usize {
    format::AREA_BYTES
}

fn check_options(o: &Options) -> Result<()> {
    if !(128..=16384).contains(&o.node_bytes) {
        return Err(EngineError::BadOption(format!(
            "cow node_bytes must be 128..=16384, not {}",
            o.node_bytes
        )));
    }
    if o.inline_max > format::MAX_INLINE {
        return Err(EngineError::BadOption(format!(
            "cow inline_max must be at most {}, not {}",
            format::MAX_INLINE,
            o.inline_max
        )));
    }
    Ok(())
}

pub(crate) fn create(ctx: EngineCtx, opts: &StoreOptions) -> Result<Box<dyn Engine>> {
    check_options(&opts.cow)?;
    let area = ctx.area_off as usize;
    ctx.pool.write(area, &format::encode_area(ctx.sb.nonce));
    // Root line: empty tree, no previous root, no switch record, no
    // garbage collection needed.
    ctx.pool.write(
        area + format::ROOT_AT as usize,
        &[0u8; format::AREA_BYTES - 64],
    );
    ctx.pool.persist(area, format::AREA_BYTES);
    let recovery = EngineRecovery {
        detail: "created".into(),
        ..EngineRecovery::default()
    };
    Ok(Box::new(CowEngine::new(
        ctx,
        opts,
        (0, 0),
        0,
        (0, 0),
        recovery,
    )))
}

/// A committed version: the durable root it was switched to.
struct Version {
    root: u64,
    crc: u32,
    keys: u64,
}

/// State only the group-commit leader touches.
#[derive(Default)]
struct Writer {
    /// Superseded versions, oldest first, each with the blocks its
    /// successor no longer references. Those blocks may be freed once no
    /// reader holds that version or an older one.
    retired: VecDeque<(Arc<Version>, Vec<u64>)>,
    /// Blocks no reader can reach, to free with the next publish.
    ready: Vec<POff<u8>>,
    /// The durable switch record: offset (0: none) and bytes.
    sr: (u64, u64),
    /// `gc_needed` is durably 1 (surplus allocations published).
    gc: bool,
}

impl Writer {
    /// Moves the blocks of versions no reader holds any more to `ready`.
    fn collect(&mut self) {
        while let Some((v, _)) = self.retired.front() {
            // Only this queue holds it: the current version is another Arc,
            // and readers clone only the current one.
            if Arc::strong_count(v) != 1 {
                break;
            }
            let (_, blocks) = self.retired.pop_front().expect("front exists");
            self.ready.extend(blocks.into_iter().map(POff::new));
        }
    }

    fn pending(&self) -> usize {
        self.ready.len() + self.retired.iter().map(|(_, b)| b.len()).sum::<usize>()
    }

    /// The blocks pending free once `ready[..nfree]` is freed, plus
    /// `more` (retired by the switch being published).
    fn pending_after(&self, nfree: usize, more: &[u64]) -> Vec<u64> {
        self.retired
            .iter()
            .flat_map(|(_, b)| b.iter().copied())
            .chain(self.ready[nfree..].iter().map(|o| o.raw()))
            .chain(more.iter().copied())
            .collect()
    }
}

/// A queued request's ticket and result.
type Answer = (u64, Result<bool>);

/// A request queued by a session waiting for a leader.
struct Pending {
    ticket: u64,
    ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

#[derive(Default)]
struct Gate {
    leader: bool,
    /// A leader panicked mid-commit: the waiting requests cannot finish.
    poisoned: bool,
    queue: Vec<Pending>,
    results: HashMap<u64, Result<bool>>,
    next_ticket: u64,
}

#[derive(Default)]
struct Counts {
    switches: AtomicU64,
    requests: AtomicU64,
    publishes: AtomicU64,
    freed: AtomicU64,
}

/// The CoW engine open on a pool (reached through [`crate::Store`]).
pub struct CowEngine {
    pool: Region,
    nonce: u64,
    /// Reads verify checksums (`StoreOptions::verify`; off only to measure).
    verify: bool,
    /// Pool offset of the root line.
    root_at: u64,
    alloc: Arc<dyn PAllocator>,
    opts: Options,
    fault: Option<Fault>,
    sessions: SessionGate,
    current: RwLock<Arc<Version>>,
    gate: Mutex<Gate>,
    cv: Condvar,
    writer: Mutex<Writer>,
    recovery: EngineRecovery,
    counts: Counts,
}

impl CowEngine {
    fn new(
        ctx: EngineCtx,
        opts: &StoreOptions,
        root: (u64, u32),
        keys: u64,
        sr: (u64, u64),
        recovery: EngineRecovery,
    ) -> CowEngine {
        let fault = match opts.fault {
            crate::Fault::Cow(f) => Some(f),
            _ => None,
        };
        CowEngine {
            pool: ctx.pool,
            nonce: ctx.sb.nonce,
            verify: opts.verify,
            root_at: ctx.area_off + format::ROOT_AT,
            alloc: ctx.alloc,
            opts: opts.cow.clone(),
            fault,
            sessions: SessionGate::new(ctx.sb.sessions as usize),
            current: RwLock::new(Arc::new(Version {
                root: root.0,
                crc: root.1,
                keys,
            })),
            gate: Mutex::new(Gate::default()),
            cv: Condvar::new(),
            writer: Mutex::new(Writer {
                sr,
                ..Writer::default()
            }),
            recovery,
            counts: Counts::default(),
        }
    }

    fn snapshot(&self) -> Arc<Version> {
        self.current.read().clone()
    }
}

fn cancel_all(th: &mut dyn AllocThread, res: Vec<Reservation>) {
    for r in res {
        // A reservation of this handle that was never published: cancel
        // cannot fail for it, and there is nothing better to do if it did.
        let _ = th.cancel(r);
    }
}

/// Makes the calling thread the group's leader until dropped; a leader
/// that unwinds poisons the gate so that its followers do not wait forever.
struct Leading<'e> {
    eng: &'e CowEngine,
    _held: LockHeld,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        let mut g = self.eng.gate.lock();
        g.leader = false;
        if std::thread::panicking() {
            g.poisoned = true;
        }
        drop(g);
        self.eng.cv.notify_all();
    }
}

impl Engine for CowEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Cow
    }

    fn session(&self) -> Result<Box<dyn Session + Send + '_>> {
        let (ticket, th) = self.sessions.enter(&*self.alloc)?;
        Ok(Box::new(CowSession {
            eng: self,
            th,
            buf: Vec::new(),
            _ticket: ticket,
        }))
    }

    fn reader(&self) -> Box<dyn SnapshotRead + Send + '_> {
        Box::new(CowReader {
            eng: self,
            buf: Vec::new(),
        })
    }

    fn snapshot(&self) -> Result<Box<dyn SnapshotRead + Send + '_>> {
        Ok(Box::new(CowSnapshot {
            eng: self,
            v: self.snapshot(),
            buf: Vec::new(),
        }))
    }

    fn len(&self) -> Result<u64> {
        Ok(self.snapshot().keys)
    }

    fn allocator(&self) -> &dyn PAllocator {
        &*self.alloc
    }

    fn recovery(&self) -> &EngineRecovery {
        &self.recovery
    }

    fn stats(&self) -> EngineStats {
        let v = self.snapshot();
        let c = &self.counts;
        let switches = c.switches.load(Ordering::Relaxed);
        let requests = c.requests.load(Ordering::Relaxed);
        let pending = self.writer.try_lock().map(|w| w.pending());
        EngineStats {
            keys: v.keys,
            detail: format!(
                "{switches} root switches for {requests} write requests ({:.2} per switch), {} publishes, {} blocks freed, {} frees deferred",
                requests as f64 / switches.max(1) as f64,
                c.publishes.load(Ordering::Relaxed),
                c.freed.load(Ordering::Relaxed),
                pending.map_or_else(|| "?".to_string(), |p| p.to_string()),
            ),
        }
    }

    fn quiesce(&self) -> Result<()> {
        let mut g = self.gate.lock();
        while g.leader {
            self.cv.wait(&mut g);
        }
        let held = LockHeld::enter();
        g.leader = true;
        drop(g);
        let _lead = Leading {
            eng: self,
            _held: held,
        };
        let mut th = self.alloc.thread()?;
        let mut w = self.writer.lock();
        self.release(&mut *th, &mut w)
    }

    fn scrub(&self, pace: &mut dyn FnMut(u64)) -> Result<Scrub> {
        // A version is immutable: no lock needed past taking it.
        let v = self.snapshot();
        let mut out = Scrub {
            per_record: true,
            ..Scrub::default()
        };
        if v.root != 0 {
            let mut seen = HashSet::new();
            scrub_node(
                &self.pool,
                self.nonce,
                (v.root, v.crc, None),
                (None, None),
                &mut seen,
                &mut out,
                pace,
            );
        }
        Ok(out)
    }

    fn remove_damaged(&self, damaged: &[Damage]) -> Result<Vec<String>> {
        // A damaged value whose leaf verified: its key is known, and a
        // delete reads the leaf, not the value.
        let mut s = self.session()?;
        let mut done = Vec::new();
        for d in damaged {
            // One that cannot be deleted (its path damaged too) stays,
            // and is not listed.
            if let (Some(k), None) = (&d.key, &d.span)
                && s.delete(k).unwrap_or(false)
            {
                done.push(format!(
                    "removed the damaged record {} (value blob {:#x}; its block freed)",
                    crate::error::show_key(k),
                    d.off
                ));
            }
        }
        Ok(done)
    }

    fn walk(&self) -> Result<Walk> {
        // The writer lock keeps the version and its record together.
        let w = self.writer.lock();
        let v = self.snapshot();
        let mut t = walk_tree(&self.pool, self.nonce, v.root, v.crc, true)?;
        if w.sr.0 != 0 {
            t.blocks.push(w.sr);
        }
        Ok(Walk {
            entries: t.entries,
            blocks: t.blocks,
        })
    }
}
