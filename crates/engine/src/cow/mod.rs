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
//! # Planted faults ([`Fault`], checks only)
//!
//! - [`Fault::SwitchBeforeFlush`]: the new nodes and blobs are written but
//!   not flushed before the publish that switches the root, so a crash can
//!   leave a durable root pointing at nodes that never reached the media.
//! - [`Fault::FreeBeforeSwitch`]: the blocks of the old version are freed
//!   by a publish of their own *before* the switch (and not deferred), so
//!   a crash between the two leaves the durable root referencing freed
//!   blocks.
//! - [`Fault::RecordOmitsRetired`]: the switch record leaves out the
//!   blocks the switch itself retires, so a crash before they are freed
//!   leaks them (the fast path trusts the record and does not walk).

pub mod format;
pub mod tree;

#[cfg(test)]
mod tests;

use crate::breakdown::{self, Phase};
use crate::gate::{SessionGate, Ticket};
use crate::store::EngineCtx;
use crate::{
    Damage, Engine, EngineError, EngineKind, EngineRecovery, EngineStats, Op, Result, Scrub,
    Session, SnapshotRead, StoreOptions, Walk, check_key, check_ops, check_value,
};
use ferrite_alloc::{AllocThread, Link, PAllocator, Publish, Reservation};
use ferrite_pmem::{LockHeld, POff, Region};
use format::{Ent, KIND_LEAF, MAX_HEIGHT, ValRef};
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tree::Shadow;

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

/// Planted bugs of this engine (checks only); see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Switch the root without flushing the new nodes and blobs first.
    SwitchBeforeFlush,
    /// Free the old version's blocks in a publish before the root switch.
    FreeBeforeSwitch,
    /// Leave the blocks a switch retires out of its switch record's
    /// pending list.
    RecordOmitsRetired,
}

impl Fault {
    /// Every planted bug, for the checks' planted runs.
    pub const ALL: &'static [Fault] = &[
        Fault::SwitchBeforeFlush,
        Fault::FreeBeforeSwitch,
        Fault::RecordOmitsRetired,
    ];
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

pub(crate) fn open(
    ctx: EngineCtx,
    opts: &StoreOptions,
) -> Result<(Box<dyn Engine>, EngineRecovery)> {
    check_options(&opts.cow)?;
    if (ctx.area_len as usize) < format::AREA_BYTES {
        return Err(EngineError::Corrupt("cow: fixed area too small".into()));
    }
    let area = ctx.area_off as usize;
    let mut head = [0u8; 64];
    ctx.pool.read(area, &mut head);
    format::check_area(&head, ctx.sb.nonce)?;
    let line = area + format::ROOT_AT as usize;
    let word = |i: usize| ctx.pool.load_u64(line + 8 * i);
    let (root, root_crc) = (word(0), word(1) as u32);
    let (prev, prev_crc) = (word(2), word(3) as u32);
    let (sr, sr_crc) = (
        word(format::W_SR as usize),
        word(format::W_SR_CRC as usize) as u32,
    );
    let gc = word(format::W_GC as usize);

    // Fast path: the switch record vouches for the newest switch and lists
    // every allocated block the tree does not reference.
    let why = if gc != 0 {
        "a switch that published in pieces may have been cut short".to_string()
    } else if sr == 0 {
        "no switch record".to_string()
    } else {
        match open_fast(&ctx, line as u64, (root, root_crc), (sr, sr_crc)) {
            Ok(fast) => {
                let recovery = EngineRecovery {
                    keys: fast.keys,
                    detail: format!(
                        "fast path (switch record {sr:#x}): root {root:#x}: {} keys; verified the {} blocks of the last switch; freed {} blocks pending free",
                        fast.keys, fast.verified, fast.freed
                    ),
                    ..EngineRecovery::default()
                };
                let e = CowEngine::new(
                    ctx,
                    opts,
                    (root, root_crc),
                    fast.keys,
                    fast.sr,
                    recovery.clone(),
                );
                return Ok((Box::new(e), recovery));
            }
            Err(e) => e.to_string(),
        }
    };

    // Slow path. The newest version, or — when its switch's record reached the media
    // before all of its nodes did (see `format`) — the previous one.
    let (root, root_crc, found, reverted) =
        match walk_tree(&ctx.pool, ctx.sb.nonce, root, root_crc, false) {
            Ok(f) => (root, root_crc, f, false),
            Err(e) => match walk_tree(&ctx.pool, ctx.sb.nonce, prev, prev_crc, false) {
                Ok(f) if (prev, prev_crc) != (root, root_crc) => (prev, prev_crc, f, true),
                _ => return Err(e),
            },
        };

    // Compare with the allocator: every referenced block allocated and
    // large enough; every other allocated block is garbage of an earlier
    // switch (or of a switch that crashed) and is freed here.
    let mut allocated: HashMap<u64, usize> = HashMap::new();
    ctx.alloc.for_each_allocated(&mut |off, size| {
        allocated.insert(off.raw(), size);
    });
    for &(off, need) in &found.blocks {
        match allocated.remove(&off) {
            Some(size) if size as u64 >= need => {}
            Some(size) => {
                return Err(EngineError::Corrupt(format!(
                    "cow: block {off:#x} holds {size} bytes, the tree uses {need}"
                )));
            }
            None => {
                return Err(EngineError::Corrupt(format!(
                    "cow: the tree references block {off:#x}, which is not allocated"
                )));
            }
        }
    }
    let mut orphans: Vec<POff<u8>> = allocated.into_keys().map(POff::new).collect();
    orphans.sort_unstable_by_key(|o| o.raw());
    let mut th = ctx.alloc.thread()?;
    let max = th.max_publish_ops().max(8);
    if !orphans.is_empty() || reverted {
        // The switch back goes with the first frees, atomically: the
        // newest version's blocks must not be free while the root line
        // may still point to them. So does clearing the switch record:
        // the blocks it lists as pending may be among the frees, and a
        // crash after them must not let the next recovery free them again.
        let mut first_links = sr_links(line as u64, 0, 0).to_vec();
        if reverted {
            first_links.extend(root_links(line as u64, (root, root_crc), (root, root_crc)));
        }
        let mut first = true;
        let mut rest = &orphans[..];
        while first || !rest.is_empty() {
            let links: &[Link] = if first { &first_links } else { &[] };
            let n = rest.len().min(max - links.len());
            th.publish(&Publish {
                allocs: &[],
                frees: &rest[..n],
                links,
            })?;
            rest = &rest[n..];
            first = false;
        }
    }
    // Every allocated block is now referenced: a fresh switch record with
    // nothing pending, and no garbage collection needed, so that the next
    // recovery takes the fast path. (An empty store that never switched
    // has nothing to record: its walk costs nothing, and opening it
    // writes nothing.)
    let mut sr_now = (0, 0);
    let untouched = orphans.is_empty() && !reverted && gc == 0 && sr == 0 && root == 0;
    if !untouched {
        let new_sr = write_sr(&ctx.pool, ctx.sb.nonce, &mut *th, found.keys, &[], &[]);
        let mut allocs = Vec::new();
        let mut links = vec![gc_link(line as u64, 0)];
        match new_sr {
            Some((r, c, len)) => {
                sr_now = (r.off().raw(), len as u64);
                links.extend(sr_links(line as u64, r.off().raw(), c));
                allocs.push(r);
            }
            None => links.extend(sr_links(line as u64, 0, 0)),
        }
        if let Err(e) = th.publish(&Publish {
            allocs: &allocs,
            frees: &[],
            links: &links,
        }) {
            cancel_all(&mut *th, allocs);
            return Err(e.into());
        }
    }
    drop(th);
    let recovery = EngineRecovery {
        replayed: usize::from(reverted),
        keys: found.keys,
        detail: format!(
            "slow path ({why}): root {root:#x}{}: {} keys in {} blocks; freed {} unreferenced blocks",
            if reverted {
                " (the newest switch was torn: went back to the previous version)"
            } else {
                ""
            },
            found.keys,
            found.blocks.len(),
            orphans.len()
        ),
        ..EngineRecovery::default()
    };
    let e = CowEngine::new(
        ctx,
        opts,
        (root, root_crc),
        found.keys,
        sr_now,
        recovery.clone(),
    );
    Ok((Box::new(e), recovery))
}

/// What the fast path of recovery found.
struct Fast {
    keys: u64,
    verified: usize,
    freed: usize,
    /// The switch record now linked: offset (0: none) and bytes.
    sr: (u64, u64),
}

/// Recovery without a walk: verifies the switch record, the blocks the
/// last switch wrote and the root node, then frees the blocks pending
/// free in one publish that also replaces the record by one with nothing
/// pending. Any error sends the caller to the slow path; nothing durable
/// changed then.
fn open_fast(ctx: &EngineCtx, line: u64, root: (u64, u32), sr: (u64, u32)) -> Result<Fast> {
    let pool = &ctx.pool;
    let nonce = ctx.sb.nonce;
    let at = usize::try_from(sr.0)
        .ok()
        .filter(|&o| pool.check(o, format::SR_HEADER).is_ok())
        .ok_or_else(|| EngineError::Corrupt("cow: switch record outside the pool".into()))?;
    let mut b = vec![0u8; format::SR_HEADER];
    pool.read(at, &mut b);
    let len = format::sr_len(&b)?;
    pool.check(at, len)
        .map_err(|_| EngineError::Corrupt("cow: switch record outside the pool".into()))?;
    b.resize(len, 0);
    pool.read(at, &mut b);
    let rec = format::decode_sr(&b, nonce, sr.1)?;
    let mut buf = Vec::new();
    for f in &rec.fresh {
        if f.node {
            let h = tree::read_node(pool, f.off, &mut buf)?;
            if h.len != f.len as usize {
                return Err(EngineError::Corrupt(format!(
                    "cow: node {:#x} is {} bytes, the switch record says {}",
                    f.off, h.len, f.len
                )));
            }
            format::check_node_crc(&buf, nonce, f.crc)?;
        } else {
            buf.clear();
            tree::read_blob(pool, f.off, f.len as usize, &mut buf)?;
            let c = format::crc(nonce, &buf);
            if c != f.crc {
                return Err(EngineError::Corrupt(format!(
                    "cow: blob {:#x} checksum {c:#010x}, the switch record says {:#010x}",
                    f.off, f.crc
                )));
            }
        }
    }
    if root.0 != 0 {
        tree::read_node(pool, root.0, &mut buf)?;
        format::check_node_crc(&buf, nonce, root.1)?;
    }
    if rec.pending.is_empty() {
        return Ok(Fast {
            keys: rec.keys,
            verified: rec.fresh.len(),
            freed: 0,
            sr: (sr.0, len as u64),
        });
    }
    let mut th = ctx.alloc.thread()?;
    // Frees, the old record, the new record and two links in one publish.
    if rec.pending.len() + 4 > th.max_publish_ops() {
        return Err(EngineError::Corrupt(format!(
            "cow: {} blocks pending free do not fit one publish",
            rec.pending.len()
        )));
    }
    let new = write_sr(pool, nonce, &mut *th, rec.keys, &[], &[]);
    let mut allocs = Vec::new();
    let mut sr_now = (0, 0);
    let links = match new {
        Some((r, c, l)) => {
            sr_now = (r.off().raw(), l as u64);
            let links = sr_links(line, r.off().raw(), c);
            allocs.push(r);
            links
        }
        None => sr_links(line, 0, 0),
    };
    let mut frees: Vec<POff<u8>> = rec.pending.iter().map(|&o| POff::new(o)).collect();
    frees.push(POff::new(sr.0));
    if let Err(e) = th.publish(&Publish {
        allocs: &allocs,
        frees: &frees,
        links: &links,
    }) {
        cancel_all(&mut *th, allocs);
        return Err(e.into());
    }
    Ok(Fast {
        keys: rec.keys,
        verified: rec.fresh.len(),
        freed: rec.pending.len(),
        sr: sr_now,
    })
}

/// Reserves a block for a switch record and writes and flushes it (no
/// fence: the publish linking it orders it, and recovery checks its
/// checksum). `None` when it would exceed [`format::MAX_SR`] or the pool
/// has no room for it: the publish then links no record, and the next
/// recovery walks.
fn write_sr(
    pool: &Region,
    nonce: u64,
    th: &mut dyn AllocThread,
    keys: u64,
    fresh: &[format::Fresh],
    pending: &[u64],
) -> Option<(Reservation, u32, usize)> {
    let len = format::sr_bytes(fresh.len(), pending.len());
    if len > format::MAX_SR {
        return None;
    }
    let r = th.reserve(len).ok()?;
    let mut b = Vec::with_capacity(len);
    let c = format::encode_sr(&mut b, nonce, keys, fresh, pending.iter().copied());
    pool.write_nodrain(r.off().raw() as usize, &b);
    Some((r, c, len))
}

/// The two links naming the switch record (offset 0: none).
fn sr_links(line: u64, off: u64, crc: u32) -> [Link; 2] {
    [
        Link {
            at: POff::new(line + 8 * format::W_SR),
            value: off,
        },
        Link {
            at: POff::new(line + 8 * format::W_SR_CRC),
            value: u64::from(crc),
        },
    ]
}

/// The link setting `gc_needed`.
fn gc_link(line: u64, v: u64) -> Link {
    Link {
        at: POff::new(line + 8 * format::W_GC),
        value: v,
    }
}

/// The four links of a root switch: the new root and its checksum, the
/// version it replaces and its checksum (the root line, see [`format`](mod@format)).
fn root_links(line: u64, new: (u64, u32), prev: (u64, u32)) -> [Link; 4] {
    let l = |i: u64, value: u64| Link {
        at: POff::new(line + 8 * i),
        value,
    };
    [
        l(0, new.0),
        l(1, u64::from(new.1)),
        l(2, prev.0),
        l(3, u64::from(prev.1)),
    ]
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

    /// Publishes every block no reader can reach (quiesce, a full pool).
    /// Each publish also replaces the switch record by one listing what
    /// stays pending (and frees the old one), so that recovery never frees
    /// a block twice.
    fn release(&self, th: &mut dyn AllocThread, w: &mut Writer) -> Result<()> {
        w.collect();
        // Frees, plus the old record, the new record and two links.
        let max = th.max_publish_ops().max(5) - 4;
        let keys = self.snapshot().keys;
        while !w.ready.is_empty() {
            let n = w.ready.len().min(max);
            let pending = w.pending_after(n, &[]);
            let new = write_sr(&self.pool, self.nonce, th, keys, &[], &pending);
            let (allocs, links, sr) = match new {
                Some((r, c, len)) => {
                    let o = r.off().raw();
                    (vec![r], sr_links(self.root_at, o, c), (o, len as u64))
                }
                None => (Vec::new(), sr_links(self.root_at, 0, 0), (0, 0)),
            };
            let mut frees = w.ready[..n].to_vec();
            if w.sr.0 != 0 {
                frees.push(POff::new(w.sr.0));
            }
            if let Err(e) = th.publish(&Publish {
                allocs: &allocs,
                frees: &frees,
                links: &links,
            }) {
                cancel_all(th, allocs);
                return Err(e.into());
            }
            w.sr = sr;
            self.counts.publishes.fetch_add(1, Ordering::Relaxed);
            self.counts.freed.fetch_add(n as u64, Ordering::Relaxed);
            w.ready.drain(..n);
        }
        Ok(())
    }

    /// Commits `reqs` as one group; on failure, one request at a time.
    fn lead(&self, th: &mut dyn AllocThread, reqs: &[&[Op<'_>]]) -> Vec<Result<bool>> {
        let mut w = self.writer.lock();
        match self.commit(th, &mut w, reqs) {
            Ok(v) => v.into_iter().map(Ok).collect(),
            Err(e) if reqs.len() == 1 => vec![Err(e)],
            Err(_) => reqs
                .iter()
                .map(|r| {
                    self.commit(th, &mut w, std::slice::from_ref(r))
                        .map(|v| v[0])
                })
                .collect(),
        }
    }

    /// One commit, retried once after freeing what can be freed when the
    /// pool is full.
    fn commit(
        &self,
        th: &mut dyn AllocThread,
        w: &mut Writer,
        reqs: &[&[Op<'_>]],
    ) -> Result<Vec<bool>> {
        match self.try_commit(th, w, reqs) {
            Err(EngineError::Full(_)) if w.pending() > 0 => {
                self.release(th, w)?;
                self.try_commit(th, w, reqs)
            }
            r => r,
        }
    }

    fn try_commit(
        &self,
        th: &mut dyn AllocThread,
        w: &mut Writer,
        reqs: &[&[Op<'_>]],
    ) -> Result<Vec<bool>> {
        let base = self.snapshot();
        let mut sh = Shadow::new(
            self.pool.clone(),
            self.nonce,
            (base.root, base.crc),
            self.opts.node_bytes,
            self.opts.inline_max,
        );
        let mut out = Vec::with_capacity(reqs.len());
        for req in reqs {
            let mut found = true;
            for op in req.iter() {
                match *op {
                    Op::Put { key, value } => sh.put(key, value)?,
                    Op::Delete { key } => found = sh.delete(key)?,
                }
            }
            out.push(found);
        }
        if !sh.changed() {
            return Ok(out);
        }
        w.collect();
        let mut res: Vec<Reservation> = Vec::new();
        if let Err(e) = sh.reserve(th, &mut res) {
            cancel_all(th, res);
            return Err(e);
        }
        let new_root = sh.write(self.fault != Some(Fault::SwitchBeforeFlush));
        let mut retired = std::mem::take(&mut sh.retired);
        let fresh = std::mem::take(&mut sh.fresh);
        let keys = (base.keys as i64 + sh.key_delta).max(0) as u64;
        if self.fault == Some(Fault::FreeBeforeSwitch) {
            // Planted: the old version freed before the switch is durable.
            let frees: Vec<POff<u8>> = retired.drain(..).map(POff::new).collect();
            let max = th.max_publish_ops().max(1);
            for chunk in frees.chunks(max) {
                if let Err(e) = th.publish(&Publish {
                    allocs: &[],
                    frees: chunk,
                    links: &[],
                }) {
                    cancel_all(th, res);
                    return Err(e.into());
                }
            }
        }
        let listed: &[u64] = match self.fault {
            // Planted: the record does not list what this switch retires.
            Some(Fault::RecordOmitsRetired) => &[],
            _ => &retired,
        };
        self.publish_switch(
            th,
            w,
            res,
            (new_root, (base.root, base.crc)),
            keys,
            &fresh,
            listed,
        )?;
        drop(base);
        let newv = Arc::new(Version {
            root: new_root.0,
            crc: new_root.1,
            keys,
        });
        let old = std::mem::replace(&mut *self.current.write(), newv);
        w.retired.push_back((old, retired));
        self.counts.switches.fetch_add(1, Ordering::Relaxed);
        self.counts
            .requests
            .fetch_add(reqs.len() as u64, Ordering::Relaxed);
        Ok(out)
    }

    /// Publishes `res` and the ready frees with the root switch — in one
    /// publish unless they exceed the allocator's limit, in which case the
    /// surplus allocations go first (unreferenced until the switch: a
    /// crash leaves them to recovery, which frees them).
    ///
    /// The final publish also allocates and links a new switch record
    /// (`fresh`: the blocks written; pending: everything retired and not
    /// freed, `retiring` included) and frees the previous one. The first
    /// surplus publish sets `gc_needed`, the final one clears it.
    #[allow(clippy::too_many_arguments)]
    fn publish_switch(
        &self,
        th: &mut dyn AllocThread,
        w: &mut Writer,
        mut res: Vec<Reservation>,
        (new_root, prev): ((u64, u32), (u64, u32)),
        keys: u64,
        fresh: &[format::Fresh],
        retiring: &[u64],
    ) -> Result<()> {
        let line = self.root_at;
        let mut links = root_links(line, new_root, prev).to_vec();
        // Root links, two record links, the gc link, the record's
        // allocation and the old record's free.
        let fixed = links.len() + 5;
        let max = th.max_publish_ops().max(fixed + 1);
        let mut done = 0;
        while res.len() - done + fixed > max {
            let end = done + (max - fixed);
            let gc = [gc_link(line, 1)];
            if let Err(e) = th.publish(&Publish {
                allocs: &res[done..end],
                frees: &[],
                links: if w.gc { &[] } else { &gc },
            }) {
                return Err(self.abandon(th, w, res, done, e.into()));
            }
            w.gc = true;
            self.counts.publishes.fetch_add(1, Ordering::Relaxed);
            done = end;
        }
        let nfree = w.ready.len().min(max - (res.len() - done) - fixed);
        let pending = w.pending_after(nfree, retiring);
        let sr = match write_sr(&self.pool, self.nonce, th, keys, fresh, &pending) {
            Some((r, c, len)) => {
                let o = r.off().raw();
                res.push(r);
                links.extend(sr_links(line, o, c));
                (o, len as u64)
            }
            None => {
                links.extend(sr_links(line, 0, 0));
                (0, 0)
            }
        };
        if w.gc {
            links.push(gc_link(line, 0));
        }
        let mut frees = w.ready[..nfree].to_vec();
        if w.sr.0 != 0 {
            frees.push(POff::new(w.sr.0));
        }
        if let Err(e) = th.publish(&Publish {
            allocs: &res[done..],
            frees: &frees,
            links: &links,
        }) {
            return Err(self.abandon(th, w, res, done, e.into()));
        }
        self.counts.publishes.fetch_add(1, Ordering::Relaxed);
        self.counts.freed.fetch_add(nfree as u64, Ordering::Relaxed);
        w.ready.drain(..nfree);
        w.sr = sr;
        w.gc = false;
        Ok(())
    }

    /// A failed switch: the first `done` reservations were published
    /// (allocated, unreferenced: free them later), the rest are cancelled.
    fn abandon(
        &self,
        th: &mut dyn AllocThread,
        w: &mut Writer,
        mut res: Vec<Reservation>,
        done: usize,
        e: EngineError,
    ) -> EngineError {
        let rest = res.split_off(done);
        w.ready.extend(res.iter().map(|r| r.off()));
        cancel_all(th, rest);
        e
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

/// One thread's session.
struct CowSession<'e> {
    eng: &'e CowEngine,
    th: Box<dyn AllocThread + Send + 'e>,
    buf: Vec<u8>,
    _ticket: Ticket<'e>,
}

impl CowSession<'_> {
    /// Commits `ops` atomically, in a group; the delete result of the
    /// last op (true for puts).
    /// [`write_group`](Self::write_group), one commit point of the persist
    /// trace once the group holding `ops` is durable (on the leader's
    /// thread and on each follower's: each returns at its commit).
    fn write(&mut self, ops: &[Op<'_>]) -> Result<bool> {
        let scope = ferrite_pmem::trace::commit_scope();
        let r = self.write_group(ops);
        if r.is_ok() {
            scope.mark();
        }
        r
    }

    fn write_group(&mut self, ops: &[Op<'_>]) -> Result<bool> {
        let eng = self.eng;
        let held = LockHeld::enter();
        let mut g = eng.gate.lock();
        if g.poisoned {
            return Err(poisoned());
        }
        if !g.leader {
            g.leader = true;
            let others = std::mem::take(&mut g.queue);
            drop(g);
            let lead = Leading { eng, _held: held };
            let (own, rest) = self.lead_group(Some(ops), others);
            eng.gate.lock().results.extend(rest);
            drop(lead);
            return own.unwrap_or_else(|| Err(poisoned()));
        }
        drop(held);
        let ticket = g.next_ticket;
        g.next_ticket += 1;
        g.queue.push(Pending {
            ticket,
            ops: ops
                .iter()
                .map(|op| match *op {
                    Op::Put { key, value } => (key.to_vec(), Some(value.to_vec())),
                    Op::Delete { key } => (key.to_vec(), None),
                })
                .collect(),
        });
        loop {
            if let Some(r) = g.results.remove(&ticket) {
                return r;
            }
            if g.poisoned {
                return Err(poisoned());
            }
            if !g.leader {
                // The last leader left our request queued: lead it.
                let held = LockHeld::enter();
                g.leader = true;
                let others = std::mem::take(&mut g.queue);
                drop(g);
                let lead = Leading { eng, _held: held };
                let (_, rest) = self.lead_group(None, others);
                eng.gate.lock().results.extend(rest);
                drop(lead);
                g = eng.gate.lock();
                continue;
            }
            eng.cv.wait(&mut g);
        }
    }

    fn lead_group(
        &mut self,
        own: Option<&[Op<'_>]>,
        others: Vec<Pending>,
    ) -> (Option<Result<bool>>, Vec<Answer>) {
        let owned: Vec<Vec<Op<'_>>> = others
            .iter()
            .map(|p| {
                p.ops
                    .iter()
                    .map(|(k, v)| match v {
                        Some(v) => Op::Put { key: k, value: v },
                        None => Op::Delete { key: k },
                    })
                    .collect()
            })
            .collect();
        let mut reqs: Vec<&[Op<'_>]> = Vec::with_capacity(owned.len() + 1);
        reqs.extend(own);
        reqs.extend(owned.iter().map(Vec::as_slice));
        let mut results = self.eng.lead(&mut *self.th, &reqs).into_iter();
        let own_r = if own.is_some() { results.next() } else { None };
        let rest = others.iter().map(|p| p.ticket).zip(results).collect();
        (own_r, rest)
    }
}

fn poisoned() -> EngineError {
    EngineError::Corrupt("cow: a group-commit leader panicked; reopen the store".into())
}

impl Session for CowSession<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        let _p = breakdown::phase(Phase::Scan);
        let v = self.eng.snapshot();
        let _v = tree::VerifyScope::new(self.eng.verify);
        get_at(&self.eng.pool, self.eng.nonce, &v, key, out, &mut self.buf)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key)?;
        check_value(value)?;
        self.write(&[Op::Put { key, value }]).map(drop)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        check_key(key)?;
        // An absent key changes nothing: answer without a group.
        let mut scratch = Vec::new();
        match self.get_into(key, &mut scratch) {
            Ok(false) => return Ok(false),
            // A damaged value is there all the same, and a delete (which
            // never reads it) is how it goes.
            Ok(true) | Err(EngineError::DamagedValue { .. }) => {}
            Err(e) => return Err(e),
        }
        self.write(&[Op::Delete { key }])
    }

    fn scan_with(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _p = breakdown::phase(Phase::Scan);
        let v = self.eng.snapshot();
        let _v = tree::VerifyScope::new(self.eng.verify);
        scan_at(&self.eng.pool, self.eng.nonce, &v, from, limit, f)
    }

    fn scan_back_with(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _p = breakdown::phase(Phase::Scan);
        let v = self.eng.snapshot();
        let _v = tree::VerifyScope::new(self.eng.verify);
        scan_back_at(&self.eng.pool, self.eng.nonce, &v, upto, limit, f)
    }

    fn batch(&mut self, ops: &[Op<'_>]) -> Result<()> {
        check_ops(ops)?;
        if ops.is_empty() {
            return Ok(());
        }
        self.write(ops).map(drop)
    }
}

/// A descending scan of one version: every pair below `upto`, greatest
/// first, until `limit` pairs were visited.
struct BackWalk<'a, 'f> {
    pool: &'a Region,
    nonce: u64,
    upto: Bound<&'a [u8]>,
    limit: usize,
    n: &'a mut usize,
    f: &'a mut (dyn FnMut(&[u8], &[u8]) -> bool + 'f),
    val: &'a mut Vec<u8>,
}

impl BackWalk<'_, '_> {
    fn below(&self, k: &[u8]) -> bool {
        match self.upto {
            Bound::Included(u) => k <= u,
            Bound::Excluded(u) => k < u,
            Bound::Unbounded => true,
        }
    }

    /// Visits the subtree at `off`; false once the walk is over (the
    /// limit reached or the visitor stopped).
    fn node(&mut self, off: u64, crc: u32, depth: usize) -> Result<bool> {
        if depth > MAX_HEIGHT as usize {
            return Err(EngineError::Corrupt(
                "cow: tree deeper than the limit".into(),
            ));
        }
        let mut buf = Vec::new();
        let h = tree::read_node_checked(self.pool, self.nonce, off, crc, &mut buf)?;
        if h.kind == KIND_LEAF {
            let mut pairs = Vec::with_capacity(h.count as usize);
            for e in format::Entries::new(&h, &buf) {
                if let Ent::Leaf(k, v) = e? {
                    pairs.push((k, v));
                }
            }
            for &(k, v) in pairs.iter().rev() {
                if !self.below(k) {
                    continue;
                }
                let go = match v {
                    ValRef::Inline(x) => (self.f)(k, x),
                    ValRef::Blob { off, len, crc } => {
                        self.val.clear();
                        tree::read_blob_checked(
                            self.pool,
                            self.nonce,
                            k,
                            (off, len, crc),
                            self.val,
                        )?;
                        (self.f)(k, self.val)
                    }
                };
                *self.n += 1;
                if !go || *self.n >= self.limit {
                    return Ok(false);
                }
            }
            return Ok(true);
        }
        let mut children: Vec<(&[u8], u64, u32)> = Vec::with_capacity(h.count as usize);
        for e in format::Entries::new(&h, &buf) {
            if let Ent::Branch(k, c, ccrc) = e? {
                children.push((k, c, ccrc));
            }
        }
        // Child i holds keys from its separator up to the next one: the
        // last child that can hold a key below the bound, then every
        // earlier one.
        let end = match self.upto {
            _ if children.len() <= 1 => children.len(),
            Bound::Included(u) => 1 + children[1..].partition_point(|(k, ..)| *k <= u),
            Bound::Excluded(u) => 1 + children[1..].partition_point(|(k, ..)| *k < u),
            Bound::Unbounded => children.len(),
        };
        for &(_, c, ccrc) in children[..end].iter().rev() {
            if !self.node(c, ccrc, depth + 1)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Looks `key` up in version `v`.
fn get_at(
    pool: &Region,
    nonce: u64,
    v: &Version,
    key: &[u8],
    out: &mut Vec<u8>,
    buf: &mut Vec<u8>,
) -> Result<bool> {
    out.clear();
    let (mut off, mut crc) = (v.root, v.crc);
    if off == 0 {
        return Ok(false);
    }
    for _ in 0..=MAX_HEIGHT {
        let h = tree::read_node_checked(pool, nonce, off, crc, buf)?;
        let mut next = None;
        for e in format::Entries::new(&h, buf) {
            match e? {
                Ent::Leaf(k, val) => {
                    if k == key {
                        match val {
                            ValRef::Inline(x) => out.extend_from_slice(x),
                            ValRef::Blob { off, len, crc } => {
                                tree::read_blob_checked(pool, nonce, k, (off, len, crc), out)?
                            }
                        }
                        return Ok(true);
                    }
                    if k > key {
                        return Ok(false);
                    }
                }
                Ent::Branch(k, child, ccrc) => {
                    if next.is_some() && k > key {
                        break;
                    }
                    next = Some((child, ccrc));
                }
            }
        }
        match next {
            Some(c) if h.kind != KIND_LEAF => (off, crc) = c,
            _ => return Ok(false),
        }
    }
    Err(EngineError::Corrupt(
        "cow: tree deeper than the limit".into(),
    ))
}

/// Up to `limit` pairs of version `v` with keys `>= from`, ascending.
fn scan_at(
    pool: &Region,
    nonce: u64,
    v: &Version,
    from: &[u8],
    limit: usize,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<usize> {
    let mut n = 0;
    if v.root != 0 && limit > 0 {
        let mut val = Vec::new();
        scan_node(
            pool,
            nonce,
            (v.root, v.crc),
            from,
            limit,
            &mut n,
            f,
            0,
            &mut val,
        )?;
    }
    Ok(n)
}

/// Up to `limit` pairs of version `v` below `upto`, descending.
fn scan_back_at(
    pool: &Region,
    nonce: u64,
    v: &Version,
    upto: Bound<&[u8]>,
    limit: usize,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<usize> {
    let mut n = 0;
    if v.root != 0 && limit > 0 {
        let mut val = Vec::new();
        let mut walk = BackWalk {
            pool,
            nonce,
            upto,
            limit,
            n: &mut n,
            f,
            val: &mut val,
        };
        walk.node(v.root, v.crc, 0)?;
    }
    Ok(n)
}

/// A read-only view of one version: the writer frees none of its blocks
/// while the view holds the version's `Arc` ([`Writer::collect`]).
struct CowSnapshot<'e> {
    eng: &'e CowEngine,
    v: Arc<Version>,
    buf: Vec<u8>,
}

/// A live reader: reads the current version at each call.
struct CowReader<'e> {
    eng: &'e CowEngine,
    buf: Vec<u8>,
}

impl SnapshotRead for CowReader<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        let _p = breakdown::phase(Phase::Scan);
        let _v = tree::VerifyScope::new(self.eng.verify);
        get_at(
            &self.eng.pool,
            self.eng.nonce,
            &self.eng.snapshot(),
            key,
            out,
            &mut self.buf,
        )
    }

    fn scan_with(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _v = tree::VerifyScope::new(self.eng.verify);
        scan_at(
            &self.eng.pool,
            self.eng.nonce,
            &self.eng.snapshot(),
            from,
            limit,
            f,
        )
    }

    fn scan_back_with(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _v = tree::VerifyScope::new(self.eng.verify);
        scan_back_at(
            &self.eng.pool,
            self.eng.nonce,
            &self.eng.snapshot(),
            upto,
            limit,
            f,
        )
    }

    fn len(&mut self) -> Result<u64> {
        Ok(self.eng.snapshot().keys)
    }
}

impl SnapshotRead for CowSnapshot<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        let _v = tree::VerifyScope::new(self.eng.verify);
        get_at(
            &self.eng.pool,
            self.eng.nonce,
            &self.v,
            key,
            out,
            &mut self.buf,
        )
    }

    fn scan_with(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _v = tree::VerifyScope::new(self.eng.verify);
        scan_at(&self.eng.pool, self.eng.nonce, &self.v, from, limit, f)
    }

    fn scan_back_with(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _v = tree::VerifyScope::new(self.eng.verify);
        scan_back_at(&self.eng.pool, self.eng.nonce, &self.v, upto, limit, f)
    }

    fn len(&mut self) -> Result<u64> {
        Ok(self.v.keys)
    }
}

/// Visits the subtree at `off` from `from` on; false once the walk is
/// over (the limit reached or the visitor stopped).
#[allow(clippy::too_many_arguments)]
fn scan_node(
    pool: &Region,
    nonce: u64,
    (off, crc): (u64, u32),
    from: &[u8],
    limit: usize,
    n: &mut usize,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    depth: usize,
    val: &mut Vec<u8>,
) -> Result<bool> {
    if depth > MAX_HEIGHT as usize {
        return Err(EngineError::Corrupt(
            "cow: tree deeper than the limit".into(),
        ));
    }
    let mut buf = Vec::new();
    let h = tree::read_node_checked(pool, nonce, off, crc, &mut buf)?;
    if h.kind == KIND_LEAF {
        for e in format::Entries::new(&h, &buf) {
            let Ent::Leaf(k, v) = e? else {
                continue;
            };
            if k < from {
                continue;
            }
            let go = match v {
                ValRef::Inline(x) => f(k, x),
                ValRef::Blob { off, len, crc } => {
                    val.clear();
                    tree::read_blob_checked(pool, nonce, k, (off, len, crc), val)?;
                    f(k, val)
                }
            };
            *n += 1;
            if !go || *n >= limit {
                return Ok(false);
            }
        }
        return Ok(true);
    }
    let mut children: Vec<(&[u8], u64, u32)> = Vec::with_capacity(h.count as usize);
    for e in format::Entries::new(&h, &buf) {
        if let Ent::Branch(k, c, ccrc) = e? {
            children.push((k, c, ccrc));
        }
    }
    // The child covering `from`, then every later one.
    let start = if children.len() <= 1 {
        0
    } else {
        children[1..].partition_point(|(k, ..)| *k <= from)
    };
    for &(_, c, ccrc) in &children[start..] {
        if !scan_node(pool, nonce, (c, ccrc), from, limit, n, f, depth + 1, val)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// What a full walk found.
struct Found {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    blocks: Vec<(u64, u64)>,
    keys: u64,
}

/// Walks and verifies the whole tree at `root`: checksums, levels, key
/// order and bounds, each block referenced once. With `values`, collects
/// the contents too.
/// Scrubs the subtree of the node at `off` (checksum `crc` as its parent
/// recorded, level `level` when known) holding keys `lo..hi`: every node
/// and blob verified, every damaged one recorded, going on past it.
fn scrub_node(
    pool: &Region,
    nonce: u64,
    (off, crc, level): (u64, u32, Option<u8>),
    (lo, hi): (Option<&[u8]>, Option<&[u8]>),
    seen: &mut HashSet<u64>,
    out: &mut Scrub,
    pace: &mut dyn FnMut(u64),
) {
    let node = |detail: String| Damage {
        key: None,
        off,
        detail: format!(
            "cow: node {off:#x}: {detail}; keys from {} to {} unreadable",
            lo.map_or_else(|| "the start".into(), crate::error::show_key),
            hi.map_or_else(|| "the end".into(), crate::error::show_key),
        ),
        leaf: 0,
        slot: 0,
        span: Some((lo.map(<[u8]>::to_vec), hi.map(<[u8]>::to_vec))),
    };
    if !seen.insert(off) {
        out.damaged.push(node("referenced twice".into()));
        return;
    }
    let mut buf = Vec::new();
    let h = match tree::read_node(pool, off, &mut buf)
        .and_then(|h| format::check_node_crc(&buf, nonce, crc).map(|_| h))
    {
        Ok(h) => h,
        Err(e) => {
            let e = e.to_string();
            out.damaged.push(node(
                e.strip_prefix("corrupt store: ").unwrap_or(&e).to_string(),
            ));
            return;
        }
    };
    if level.is_some_and(|l| l != h.level) {
        out.damaged
            .push(node(format!("level {} where {level:?} expected", h.level)));
        return;
    }
    out.bytes += h.len as u64;
    let in_bounds = |k: &[u8]| lo.is_none_or(|l| k >= l) && hi.is_none_or(|h| k < h);
    let ents: std::result::Result<Vec<Ent<'_>>, _> = format::Entries::new(&h, &buf).collect();
    let ents = match ents {
        Ok(e) => e,
        Err(e) => {
            out.damaged.push(node(e.to_string()));
            return;
        }
    };
    if h.kind == KIND_LEAF {
        for e in ents {
            let Ent::Leaf(k, v) = e else {
                out.damaged.push(node("branch entry in a leaf".into()));
                return;
            };
            if !in_bounds(k) {
                out.damaged
                    .push(node("key outside its parent's range".into()));
                return;
            }
            if let ValRef::Blob { off: b, len, crc } = v {
                let mut x = Vec::new();
                let r = match tree::read_blob(pool, b, len as usize, &mut x) {
                    Err(e) => Err(e.to_string()),
                    Ok(()) => {
                        let c = format::crc(nonce, &x);
                        if c == crc {
                            Ok(())
                        } else {
                            Err(format!(
                                "cow: value blob {b:#x}+{len} fails its checksum (computed {c:#010x}, the leaf recorded {crc:#010x})"
                            ))
                        }
                    }
                };
                out.bytes += u64::from(len);
                if let Err(detail) = r {
                    out.damaged.push(Damage {
                        key: Some(k.to_vec()),
                        off: b,
                        detail,
                        leaf: off,
                        slot: 0,
                        span: None,
                    });
                    continue;
                }
            }
            out.records += 1;
        }
        pace(out.bytes);
        return;
    }
    let mut kids: Vec<(&[u8], u64, u32)> = Vec::with_capacity(ents.len());
    for e in ents {
        let Ent::Branch(k, c, ccrc) = e else {
            out.damaged.push(node("leaf entry in a branch".into()));
            return;
        };
        kids.push((k, c, ccrc));
    }
    pace(out.bytes);
    for i in 0..kids.len() {
        let clo = if i == 0 { lo } else { Some(kids[i].0) };
        let chi = kids.get(i + 1).map(|k| k.0).or(hi);
        let (_, c, ccrc) = kids[i];
        let lvl = h.level.checked_sub(1);
        scrub_node(pool, nonce, (c, ccrc, lvl), (clo, chi), seen, out, pace);
    }
}

fn walk_tree(pool: &Region, nonce: u64, root: u64, crc: u32, values: bool) -> Result<Found> {
    let mut f = Found {
        entries: Vec::new(),
        blocks: Vec::new(),
        keys: 0,
    };
    if root == 0 {
        return Ok(f);
    }
    let mut seen = HashSet::new();
    let mut buf = Vec::new();
    let first = tree::read_node(pool, root, &mut buf)?;
    walk_node(
        pool,
        nonce,
        root,
        crc,
        first.level,
        None,
        None,
        values,
        &mut seen,
        &mut f,
    )?;
    Ok(f)
}

#[allow(clippy::too_many_arguments)]
fn walk_node(
    pool: &Region,
    nonce: u64,
    off: u64,
    crc: u32,
    level: u8,
    lo: Option<&[u8]>,
    hi: Option<&[u8]>,
    values: bool,
    seen: &mut HashSet<u64>,
    f: &mut Found,
) -> Result<()> {
    let corrupt = |what: String| EngineError::Corrupt(format!("cow: node {off:#x}: {what}"));
    if !seen.insert(off) {
        return Err(corrupt("referenced twice".into()));
    }
    let mut buf = Vec::new();
    let h = tree::read_node(pool, off, &mut buf)?;
    format::check_node_crc(&buf, nonce, crc)?;
    if h.level != level {
        return Err(corrupt(format!("level {} where {level} expected", h.level)));
    }
    f.blocks.push((off, h.len as u64));
    let in_bounds = |k: &[u8]| lo.is_none_or(|l| k >= l) && hi.is_none_or(|h| k < h);
    let mut it = format::Entries::new(&h, &buf);
    if h.kind == KIND_LEAF {
        let mut prev: Option<&[u8]> = None;
        for e in it.by_ref() {
            let Ent::Leaf(k, v) = e? else {
                return Err(corrupt("branch entry in a leaf".into()));
            };
            if prev.is_some_and(|p| p >= k) || !in_bounds(k) {
                return Err(corrupt("keys out of order".into()));
            }
            prev = Some(k);
            f.keys += 1;
            let value = match v {
                ValRef::Inline(x) => values.then(|| x.to_vec()),
                ValRef::Blob { off: b, len, crc } => {
                    if !seen.insert(b) {
                        return Err(corrupt(format!("blob {b:#x} referenced twice")));
                    }
                    f.blocks.push((b, len as u64));
                    let mut x = Vec::new();
                    tree::read_blob(pool, b, len as usize, &mut x)?;
                    let computed = format::crc(nonce, &x);
                    if computed != crc {
                        return Err(corrupt(format!(
                            "blob {b:#x} checksum {computed:#010x}, the leaf recorded {crc:#010x}"
                        )));
                    }
                    values.then_some(x)
                }
            };
            if let Some(x) = value {
                f.entries.push((k.to_vec(), x));
            }
        }
    } else {
        let mut kids: Vec<(&[u8], u64, u32)> = Vec::with_capacity(h.count as usize);
        for e in it.by_ref() {
            let Ent::Branch(k, c, ccrc) = e? else {
                return Err(corrupt("leaf entry in a branch".into()));
            };
            if let Some(&(p, ..)) = kids.last()
                && (p >= k || !in_bounds(k))
            {
                return Err(corrupt("keys out of order".into()));
            }
            kids.push((k, c, ccrc));
        }
        for i in 0..kids.len() {
            let clo = if i == 0 { lo } else { Some(kids[i].0) };
            let chi = kids.get(i + 1).map(|k| k.0).or(hi);
            let (_, c, ccrc) = kids[i];
            walk_node(pool, nonce, c, ccrc, level - 1, clo, chi, values, seen, f)?;
        }
    }
    if !it.exhausted() {
        return Err(corrupt("length disagrees with the entries".into()));
    }
    Ok(())
}
