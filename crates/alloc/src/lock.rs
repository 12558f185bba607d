//! A single-lock allocator with per-block headers: the N-Store default
//! [P2 §4.1 "Memory Management"] that P2 replaces with better allocators,
//! kept as the baseline engines can be run over.
//!
//! # Design
//!
//! One mutex guards everything; every operation holds it from start to
//! end, as N-Store's allocator locks the whole PMem file per allocation.
//! The arena is a sequence of blocks, each starting with a 16-byte header
//! that gives its length and whether it is allocated. Free blocks are kept
//! in DRAM (best fit by length, coalesced by address).
//!
//! - **reserve** takes a free block; if the rest is worth keeping it is
//!   split off: the remainder's header is persisted first (**fence**) —
//!   inside the old free block, where nothing reads it — and then the
//!   block's own shortened header (**fence**). Either crash state walks
//!   correctly.
//! - **publish** logs `Set` operations (headers marked allocated or free,
//!   coalesced with free neighbours, and the links) in the heap's single
//!   lane ([`crate::lane`], two fences; one when it is a single word).
//!   The lane's marker is written unflushed and kept *pending* (under the
//!   lock). A multi-word publish needs nothing for it: its record, once
//!   durable, is the lane's newest entry, and it applies nothing before
//!   that. A one-word publish writes no record, and its word may be one of
//!   the newest record's: it flushes a pending marker and fences before its
//!   store (two fences then). A prepared publish flushes it too, and the
//!   transaction's commit fence completes it before the operations are
//!   applied. (The heap module's invariant 5 and "Markers across threads":
//!   a fence completes only its own thread's flushes, so the marker's own
//!   thread cannot be left to complete it.)
//! - **recovery** replays the lane, then **walks every block header** from
//!   the start of the arena to rebuild the free lists: its time grows with
//!   the number of blocks, which is the trade-off the Ferrite heap's
//!   out-of-band bitmaps avoid.
//!
//! # On-media format (version 1, little-endian)
//!
//! | region offset     | bytes      | content                                   |
//! |-------------------|------------|-------------------------------------------|
//! | 0                 | 64         | superblock — written once at creation     |
//! | 64                | 64         | root line: root object pool offset, u64   |
//! | 128               | lane_bytes | the lane                                  |
//! | arena_off         | arena_len  | blocks (arena_off = 128 + lane_bytes, a multiple of 64) |
//!
//! Superblock:
//!
//! | bytes  | field                                                             |
//! |--------|-------------------------------------------------------------------|
//! | 0..8   | magic `FERRLOCK`                                                  |
//! | 8..10  | format version, u16 = 1                                           |
//! | 10..12 | zero                                                              |
//! | 12..16 | lane_bytes, u32                                                   |
//! | 16..24 | arena_off, u64                                                    |
//! | 24..32 | arena_len, u64 (multiple of 16)                                   |
//! | 32..40 | region length, u64                                                |
//! | 40..48 | nonce, u64                                                        |
//! | 48..60 | reserved, zero                                                    |
//! | 60..64 | crc32c of bytes 0..60                                             |
//!
//! Block header (16 bytes at the block's start; the payload follows, so
//! payloads are 16-byte aligned):
//!
//! | bits / bytes | field                                                      |
//! |--------------|------------------------------------------------------------|
//! | bits 0..32   | block length in 16-byte units, header included (≥ 2)        |
//! | bits 32..34  | state: 0 free, 1 allocated                                  |
//! | bits 34..64  | low 30 bits of crc32c(nonce ‖ header pool offset u64 ‖ bits 0..34 as u64) |
//! | bytes 8..16  | zero                                                       |
//!
//! The first word is written with one 8-byte store, so it is failure
//! atomic; the checksum binds it to its position. Headers that lie inside
//! a block (left over from splits and merges) are never read: the walk
//! goes from header to header by length.

use crate::error::{AllocError, Result};
use crate::heap::Fault;
use crate::lane::{Cursor, ENTRY_HEADER, Lane, Latest, MIN_LANE_BYTES};
use crate::ops::{MetaOp, OpKind, flush_words};
use crate::{AllocStats, AllocThread, Link, Loc, PAllocator, Publish, RecoveryReport, Reservation};
use ferrite_pmem::{
    CACHE_LINE, ChecksumMismatch, HEADER_SIZE, POff, Region, SuperblockView, SuperblockWriter,
};
use parking_lot::{Mutex, MutexGuard};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

pub(crate) const MAGIC: [u8; 8] = *b"FERRLOCK";
const VERSION: u16 = 1;
const ROOT_OFF: usize = CACHE_LINE;
const LANE_OFF: usize = 2 * CACHE_LINE;
/// Bytes of a block header.
pub const BLOCK_HEADER: u64 = 16;
/// Smallest block: a header and 16 bytes.
const MIN_BLOCK: u64 = 32;
const STATE_FREE: u64 = 0;
const STATE_ALLOC: u64 = 1;

/// How to create a lock heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockOptions {
    pub lane_bytes: u32,
    pub nonce: Option<u64>,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            lane_bytes: 8192,
            nonce: None,
        }
    }
}

fn hdr_crc(nonce: u64, pool_off: u64, low: u64) -> u64 {
    // One call over a contiguous buffer: small calls are costly.
    let mut b = [0u8; 24];
    b[..8].copy_from_slice(&nonce.to_le_bytes());
    b[8..16].copy_from_slice(&pool_off.to_le_bytes());
    b[16..].copy_from_slice(&low.to_le_bytes());
    u64::from(crc32c::crc32c(&b)) & ((1 << 30) - 1)
}

fn encode_hdr(nonce: u64, pool_off: u64, state: u64, len: u64) -> u64 {
    let low = (len / 16) | (state << 32);
    low | (hdr_crc(nonce, pool_off, low) << 34)
}

/// `(state, length in bytes)` of a header word, if it is valid.
fn decode_hdr(nonce: u64, pool_off: u64, w: u64) -> Option<(u64, u64)> {
    let low = w & ((1 << 34) - 1);
    if hdr_crc(nonce, pool_off, low) != w >> 34 {
        return None;
    }
    let state = low >> 32;
    let len = (low & 0xffff_ffff) * 16;
    (state <= STATE_ALLOC && len >= MIN_BLOCK).then_some((state, len))
}

/// Everything behind the lock.
struct Inner {
    /// Free blocks: arena offset → length, and (length, offset).
    free: BTreeMap<u64, u64>,
    by_len: BTreeSet<(u64, u64)>,
    /// Reserved, unpublished blocks (arena offsets).
    reserved: HashSet<u64>,
    cur: Cursor,
    /// The lane's marker if it is pending (not known durable): its region
    /// offset and the handle that wrote it. One-word and prepared publishes
    /// flush it; a multi-word publish supersedes it.
    marker: Option<(usize, u64)>,
    in_use: u64,
    blocks: u64,
    claimed: u64,
    meta_lines: u64,
    fences: u64,
    attaches: u64,
    ops: Vec<MetaOp>,
    buf: Vec<u8>,
    lines: Vec<u64>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1 << 62);

/// The single-lock heap. See the module documentation.
pub struct LockHeap {
    region: Region,
    pool: Region,
    nonce: u64,
    lane: Lane,
    arena_off: usize,
    arena_len: u64,
    id: u64,
    inner: Mutex<Inner>,
    recovery: RecoveryReport,
    fault: Fault,
}

impl std::fmt::Debug for LockHeap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockHeap")
            .field("base", &self.region.base())
            .field("arena_len", &self.arena_len)
            .finish()
    }
}

impl Inner {
    fn insert_free(&mut self, mut off: u64, mut len: u64) {
        if let Some((&po, &pl)) = self.free.range(..off).next_back()
            && po + pl == off
        {
            self.free.remove(&po);
            self.by_len.remove(&(pl, po));
            off = po;
            len += pl;
        }
        if let Some(nl) = self.free.remove(&(off + len)) {
            self.by_len.remove(&(nl, off + len));
            len += nl;
        }
        self.free.insert(off, len);
        self.by_len.insert((len, off));
    }

    fn remove_free(&mut self, off: u64, len: u64) {
        self.free.remove(&off);
        self.by_len.remove(&(len, off));
    }
}

impl LockHeap {
    /// Formats `region` as an empty lock heap (one free block) and opens it.
    pub fn create(region: Region, opts: LockOptions) -> Result<LockHeap> {
        let lb = opts.lane_bytes as usize;
        if lb < MIN_LANE_BYTES || !lb.is_multiple_of(CACHE_LINE) || lb > 1 << 20 {
            return Err(AllocError::BadOption(format!(
                "lane_bytes must be a multiple of 64 in {MIN_LANE_BYTES}..=1048576, not {lb}"
            )));
        }
        if !region.is_line_aligned(0) {
            return Err(AllocError::Misaligned {
                base: region.base(),
                align: CACHE_LINE,
            });
        }
        let arena_off = LANE_OFF + lb;
        let arena_len = (region.len().saturating_sub(arena_off) as u64 / 16 * 16).min(16 << 32);
        if arena_len < 4096 {
            return Err(AllocError::RegionTooSmall {
                len: region.len(),
                min: arena_off + 4096,
            });
        }
        let nonce = opts.nonce.unwrap_or_else(|| {
            let u = ferrite_pmem::header::new_uuid();
            u64::from_le_bytes(u[..8].try_into().expect("8 bytes"))
        });
        region.fill_persist(0, CACHE_LINE, 0);
        region.fill_nodrain(CACHE_LINE, arena_off - CACHE_LINE, 0);
        let first = (region.base() + arena_off) as u64;
        region.store_u64(arena_off, encode_hdr(nonce, first, STATE_FREE, arena_len));
        region.store_u64(arena_off + 8, 0);
        region.flush(arena_off, 16);
        region.fence();
        let b = SuperblockWriter::new(&MAGIC, VERSION)
            .u32(12, opts.lane_bytes)
            .u64(16, arena_off as u64)
            .u64(24, arena_len)
            .u64(32, region.len() as u64)
            .u64(40, nonce)
            .seal();
        region.write(0, &b);
        region.persist(0, CACHE_LINE);
        LockHeap::open(region)
    }

    /// Opens (recovers) a lock heap: lane replay, then a walk of every block.
    pub fn open(region: Region) -> Result<LockHeap> {
        LockHeap::open_inner(region, Fault::None)
    }

    /// [`LockHeap::open`] with a planted bug that stays active for the
    /// heap's lifetime (crash checks only).
    #[cfg(any(test, feature = "checks"))]
    pub fn open_with_fault(region: Region, fault: Fault) -> Result<LockHeap> {
        LockHeap::open_inner(region, fault)
    }

    fn open_inner(region: Region, fault: Fault) -> Result<LockHeap> {
        let t0 = Instant::now();
        if region.len() < CACHE_LINE {
            return Err(AllocError::RegionTooSmall {
                len: region.len(),
                min: 2 * CACHE_LINE + MIN_LANE_BYTES + 4096,
            });
        }
        let b = region.read_vec(0, CACHE_LINE);
        let view = SuperblockView::new(&b).filter(|v| v.has_magic(&MAGIC));
        let Some(view) = view else {
            return Err(AllocError::NotAHeap { what: "lock heap" });
        };
        let (u32_at, u64_at) = (|o| view.u32(o), |o| view.u64(o));
        let version = view.version();
        if version != VERSION {
            return Err(AllocError::UnsupportedVersion {
                what: "lock heap",
                found: version,
                supported: VERSION,
            });
        }
        if let Err(ChecksumMismatch { stored, computed }) = view.checksum() {
            return Err(AllocError::Checksum {
                what: "lock heap superblock".into(),
                stored,
                computed,
            });
        }
        let lane_bytes = u32_at(12) as usize;
        let arena_off = u64_at(16) as usize;
        let arena_len = u64_at(24);
        if u64_at(32) != region.len() as u64
            || lane_bytes < MIN_LANE_BYTES
            || !lane_bytes.is_multiple_of(CACHE_LINE)
            || arena_off != LANE_OFF + lane_bytes
            || !arena_len.is_multiple_of(16)
            || arena_off as u64 + arena_len > region.len() as u64
            || b[10..12] != [0, 0]
            || b[48..60].iter().any(|&x| x != 0)
        {
            return Err(AllocError::Corrupt(
                "lock heap superblock geometry does not match its region".into(),
            ));
        }
        let pool = Region::whole(region.medium().clone());
        let lane = Lane {
            off: LANE_OFF,
            len: lane_bytes,
            index: 0,
        };
        let nonce = u64_at(40);
        let mut heap = LockHeap {
            region,
            pool,
            nonce,
            lane,
            arena_off,
            arena_len,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            inner: Mutex::new(Inner {
                free: BTreeMap::new(),
                by_len: BTreeSet::new(),
                reserved: HashSet::new(),
                cur: Lane::fresh(),
                marker: None,
                in_use: 0,
                blocks: 0,
                claimed: 0,
                meta_lines: 0,
                fences: 0,
                attaches: 0,
                ops: Vec::new(),
                buf: Vec::new(),
                lines: Vec::new(),
            }),
            recovery: RecoveryReport::default(),
            fault,
        };
        let mut report = RecoveryReport::default();
        heap.replay(&mut report)?;
        heap.walk(&mut report)?;
        report.elapsed = t0.elapsed();
        heap.recovery = report;
        Ok(heap)
    }

    fn arena_pool(&self) -> u64 {
        (self.region.base() + self.arena_off) as u64
    }

    fn root_word(&self) -> u64 {
        (self.region.base() + ROOT_OFF) as u64
    }

    fn validate_op(&self, op: &MetaOp) -> Result<()> {
        let a = op.off;
        let base = self.region.base() as u64;
        let arena = self.arena_pool();
        // Inside the arena a Set is a block header or a link into a block's
        // payload; the two cannot be told apart, so only bounds are checked.
        let ok = op.kind == OpKind::Set
            && a >= HEADER_SIZE as u64
            && a + 8 <= self.pool.len() as u64
            && (a < base || a >= arena || a == self.root_word());
        if ok {
            Ok(())
        } else {
            Err(AllocError::Corrupt(format!(
                "lock heap lane operation {op:?} is not one a publish writes"
            )))
        }
    }

    fn replay(&mut self, report: &mut RecoveryReport) -> Result<()> {
        let (latest, cur) = self.lane.scan(&self.region, self.nonce)?;
        self.inner.get_mut().cur = cur;
        if let Latest::Record { pos, len, seq, ops } = latest {
            for op in &ops {
                self.validate_op(op)?;
            }
            if self.fault != Fault::NoReplay && !ops.iter().all(|o| o.is_applied(&self.pool)) {
                for op in &ops {
                    op.apply(&self.pool);
                }
                flush_words(&self.pool, &ops, &mut Vec::new());
                self.region.fence();
                report.replayed = 1;
            }
            self.lane
                .mark_recovered(&self.region, self.nonce, pos, len, seq);
            self.region.fence();
            report.marked = 1;
        }
        Ok(())
    }

    /// Walks every header, rebuilding the free lists and the accounting.
    fn walk(&mut self, report: &mut RecoveryReport) -> Result<()> {
        let arena = self.arena_pool();
        let nonce = self.nonce;
        let inner = self.inner.get_mut();
        let mut off = 0u64;
        let mut free_run: Option<(u64, u64)> = None;
        while off < self.arena_len {
            let at = arena + off;
            let w = self.pool.load_u64(at as usize);
            let Some((state, len)) = decode_hdr(nonce, at, w) else {
                return Err(AllocError::Corrupt(format!(
                    "lock heap block header at pool offset {at:#x} is invalid ({w:#018x})"
                )));
            };
            if off + len > self.arena_len {
                return Err(AllocError::Corrupt(format!(
                    "lock heap block at {at:#x} runs past the arena"
                )));
            }
            if state == STATE_FREE {
                free_run = Some(match free_run {
                    Some((s, l)) => (s, l + len),
                    None => (off, len),
                });
            } else {
                if let Some((s, l)) = free_run.take() {
                    inner.free.insert(s, l);
                    inner.by_len.insert((l, s));
                }
                inner.in_use += len - BLOCK_HEADER;
                inner.claimed += len;
                inner.blocks += 1;
            }
            off += len;
        }
        if let Some((s, l)) = free_run {
            inner.free.insert(s, l);
            inner.by_len.insert((l, s));
        }
        report.blocks = inner.blocks;
        Ok(())
    }

    fn check_link(&self, at: POff<u64>) -> Result<()> {
        let a = at.raw();
        let base = self.region.base() as u64;
        let ok = a.is_multiple_of(8)
            && a >= HEADER_SIZE as u64
            && a + 8 <= self.pool.len() as u64
            && (a < base || a >= self.arena_pool() || a == self.root_word());
        if ok {
            Ok(())
        } else {
            Err(AllocError::BadLink { off: a })
        }
    }

    /// Header word and length of the allocated block whose payload is at `off`.
    fn allocated(&self, off: u64) -> Result<(u64, u64)> {
        let bad = AllocError::NotAllocated { off };
        let arena = self.arena_pool();
        let hdr = off.checked_sub(BLOCK_HEADER).ok_or(bad)?;
        if hdr < arena || hdr >= arena + self.arena_len || !(hdr - arena).is_multiple_of(16) {
            return Err(AllocError::NotAllocated { off });
        }
        match decode_hdr(self.nonce, hdr, self.pool.load_u64(hdr as usize)) {
            Some((STATE_ALLOC, len)) => Ok((hdr, len)),
            _ => Err(AllocError::NotAllocated { off }),
        }
    }

    /// Attaches a handle. All handles share the heap's one lane and lock.
    pub fn attach(&self) -> LockThread<'_> {
        let id = {
            let mut i = self.inner.lock();
            i.attaches += 1;
            i.attaches
        };
        LockThread {
            heap: self,
            id,
            held: None,
        }
    }

    pub fn region(&self) -> &Region {
        &self.region
    }

    /// Flushes (no fence) the lane's pending marker for handle `id`, if
    /// there is one (under [`Fault::LocalMarkers`] and
    /// [`Fault::UnfencedMarkers`] only its writer's own).
    /// Returns whether it did: the marker is durable after the next fence.
    fn flush_marker(&self, inner: &Inner, id: u64) -> bool {
        match inner.marker {
            Some((off, writer))
                if !matches!(self.fault, Fault::LocalMarkers | Fault::UnfencedMarkers)
                    || writer == id =>
            {
                self.region.flush(off, ENTRY_HEADER);
                true
            }
            _ => false,
        }
    }

    /// Makes `inner.ops` durable for handle `id`: one fence for one word
    /// (two when the lane's marker is pending), two otherwise.
    fn persist_ops(&self, inner: &mut Inner, id: u64) {
        if inner.ops.is_empty() {
            return;
        }
        if inner.ops.len() == 1 {
            // No record supersedes the lane's newest one, whose words this
            // one may be: its pending marker is completed by a fence of its
            // own before the store.
            if self.flush_marker(inner, id) {
                self.region.fence();
                inner.marker = None;
                inner.fences += 1;
                inner.meta_lines += 1;
            }
            let op = inner.ops[0];
            op.apply(&self.pool);
            self.pool.flush(op.off as usize, 8);
            self.region.fence();
            inner.fences += 1;
            inner.meta_lines += 1;
            return;
        }
        // The lane's pending marker needs no flush: once this record is
        // durable it is the lane's newest entry, and the old record is never
        // read again; until then nothing of this publish is written.
        let Inner {
            ops,
            cur,
            buf,
            lines,
            marker,
            ..
        } = inner;
        let (rec, n) = self.lane.commit(&self.region, self.nonce, cur, ops, buf);
        if self.fault != Fault::NoLogFence {
            self.region.fence();
        }
        for op in ops.iter() {
            op.apply(&self.pool);
        }
        let touched = flush_words(&self.pool, ops, lines);
        self.region.fence();
        if self.fault == Fault::NoMarker {
            self.lane.advance(cur, rec);
            *marker = None;
        } else {
            let m = self.lane.mark(&self.region, self.nonce, cur, rec);
            if self.fault == Fault::UnfencedMarkers {
                self.region.flush(self.lane.marker_off(m), ENTRY_HEADER);
            }
            *marker = Some((self.lane.marker_off(m), id));
        }
        inner.fences += 2;
        inner.meta_lines += (n + touched) as u64;
    }
}

/// A thread's handle on a [`LockHeap`].
pub struct LockThread<'h> {
    heap: &'h LockHeap,
    id: u64,
    /// The lock, held from [`AllocThread::prepare`] to commit or abort.
    held: Option<MutexGuard<'h, Inner>>,
}

impl std::fmt::Debug for LockThread<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockThread").field("id", &self.id).finish()
    }
}

/// Length of the block reserved as `r` by handle `id`.
fn check_reserved(heap: &LockHeap, inner: &Inner, id: u64, r: &Reservation) -> Result<u64> {
    if r.heap != heap.id {
        return Err(AllocError::Foreign { what: "heap" });
    }
    if r.owner != id {
        return Err(AllocError::Foreign {
            what: "thread handle",
        });
    }
    let rel = r.off - BLOCK_HEADER - heap.arena_pool();
    match r.loc {
        Loc::Header { units } if inner.reserved.contains(&rel) => Ok(units * 16),
        _ => Err(AllocError::StaleReservation { off: r.off }),
    }
}

/// Validates `p` and builds its operations in `inner.ops`. Every check
/// comes first; then the free lists take the frees (coalesced), which no
/// other thread can see before the lock is released — after they are
/// durable. `limit`: refuse more operations than the lane holds.
fn stage(heap: &LockHeap, inner: &mut Inner, id: u64, p: &Publish<'_>, limit: bool) -> Result<()> {
    for r in p.allocs {
        check_reserved(heap, inner, id, r)?;
    }
    for l in p.links {
        heap.check_link(l.at)?;
    }
    for (i, f) in p.frees.iter().enumerate() {
        heap.allocated(f.raw())?;
        if p.frees[..i].contains(f) {
            return Err(AllocError::DoubleFree { off: f.raw() });
        }
    }
    let n = p.allocs.len() + p.frees.len() + p.links.len();
    if limit && n > heap.lane.max_ops() {
        return Err(AllocError::BatchTooLarge {
            ops: n,
            max: heap.lane.max_ops(),
        });
    }
    let arena = heap.arena_pool();
    let mut ops = std::mem::take(&mut inner.ops);
    ops.clear();
    for r in p.allocs {
        let hdr = r.off - BLOCK_HEADER;
        let len = check_reserved(heap, inner, id, r)?;
        ops.push(MetaOp::set(
            hdr,
            encode_hdr(heap.nonce, hdr, STATE_ALLOC, len),
        ));
    }
    for f in p.frees {
        let (hdr, len) = heap.allocated(f.raw())?;
        let (mut start, mut total) = (hdr - arena, len);
        if let Some((&po, &pl)) = inner.free.range(..start).next_back()
            && po + pl == start
        {
            inner.remove_free(po, pl);
            start = po;
            total += pl;
        }
        if let Some(&nl) = inner.free.get(&(start + total)) {
            inner.remove_free(start + total, nl);
            total += nl;
        }
        inner.free.insert(start, total);
        inner.by_len.insert((total, start));
        inner.in_use -= len - BLOCK_HEADER;
        inner.claimed -= len;
        ops.push(MetaOp::set(
            arena + start,
            encode_hdr(heap.nonce, arena + start, STATE_FREE, total),
        ));
    }
    for l in p.links {
        ops.push(MetaOp::set(l.at.raw(), l.value));
    }
    inner.ops = ops;
    Ok(())
}

/// Volatile bookkeeping once a publish is durable.
fn finish(heap: &LockHeap, inner: &mut Inner, p: &Publish<'_>) {
    let arena = heap.arena_pool();
    for r in p.allocs {
        inner.reserved.remove(&(r.off - BLOCK_HEADER - arena));
        if let Loc::Header { units } = r.loc {
            inner.in_use += units * 16 - BLOCK_HEADER;
            inner.claimed += units * 16;
        }
    }
    inner.blocks += p.allocs.len() as u64;
    inner.blocks -= p.frees.len() as u64;
}

impl LockThread<'_> {
    fn not_prepared(&self) -> Result<()> {
        if self.held.is_some() {
            Err(AllocError::PreparePending)
        } else {
            Ok(())
        }
    }
}

impl AllocThread for LockThread<'_> {
    fn reserve(&mut self, size: usize) -> Result<Reservation> {
        self.not_prepared()?;
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        let heap = self.heap;
        let max = (heap.arena_len - BLOCK_HEADER) as usize;
        if size > max {
            return Err(AllocError::TooLarge { size, max });
        }
        let need = (size as u64 + BLOCK_HEADER)
            .next_multiple_of(16)
            .max(MIN_BLOCK);
        let mut inner = heap.inner.lock();
        let Some(&(len, off)) = inner.by_len.range((need, 0)..).next() else {
            return Err(AllocError::OutOfSpace {
                size,
                free: inner.free.values().sum(),
            });
        };
        inner.remove_free(off, len);
        let arena = heap.arena_pool();
        let take = if len - need >= MIN_BLOCK {
            // Remainder first (the walk cannot reach it until the block's own
            // header shrinks), then the shortened header.
            let rem = off + need;
            heap.pool.store_u64(
                (arena + rem) as usize,
                encode_hdr(heap.nonce, arena + rem, STATE_FREE, len - need),
            );
            heap.pool.persist((arena + rem) as usize, 8);
            heap.pool.store_u64(
                (arena + off) as usize,
                encode_hdr(heap.nonce, arena + off, STATE_FREE, need),
            );
            heap.pool.persist((arena + off) as usize, 8);
            inner.fences += 2;
            inner.meta_lines += 2;
            inner.insert_free(rem, len - need);
            need
        } else {
            len
        };
        inner.reserved.insert(off);
        Ok(Reservation {
            heap: heap.id,
            owner: self.id,
            off: arena + off + BLOCK_HEADER,
            size: take - BLOCK_HEADER,
            loc: Loc::Header { units: take / 16 },
        })
    }

    fn cancel(&mut self, r: Reservation) -> Result<()> {
        self.not_prepared()?;
        let heap = self.heap;
        let mut inner = heap.inner.lock();
        let len = check_reserved(heap, &inner, self.id, &r)?;
        let rel = r.off - BLOCK_HEADER - heap.arena_pool();
        inner.reserved.remove(&rel);
        // Coalesced in DRAM only: the headers on media still describe the
        // pieces, which walk to the same free space.
        inner.insert_free(rel, len);
        Ok(())
    }

    fn publish(&mut self, p: &Publish<'_>) -> Result<()> {
        self.not_prepared()?;
        let heap = self.heap;
        let mut inner = heap.inner.lock();
        // A standalone publish is a commit of the persist trace; inside a
        // caller's commit (an engine's write) the caller's scope hides it.
        let scope = ferrite_pmem::trace::commit_scope();
        stage(heap, &mut inner, self.id, p, true)?;
        heap.persist_ops(&mut inner, self.id);
        finish(heap, &mut inner, p);
        scope.mark();
        Ok(())
    }

    fn prepare(&mut self, p: &Publish<'_>, out: &mut Vec<MetaOp>) -> Result<()> {
        self.not_prepared()?;
        let heap = self.heap;
        let mut g = heap.inner.lock();
        stage(heap, &mut g, self.id, p, false)?;
        out.extend_from_slice(&g.ops);
        // The transaction writes none of the lane: the lane's newest record
        // stays newest, so its marker must be durable before any word of
        // the transaction is — the caller's commit fence completes it. It
        // stays pending (this handle cannot see that fence): a later
        // one-word publish flushes it again.
        if heap.flush_marker(&g, self.id) {
            g.meta_lines += 1;
        }
        self.held = Some(g);
        Ok(())
    }

    fn commit_prepared(&mut self, p: &Publish<'_>) {
        if let Some(mut g) = self.held.take() {
            finish(self.heap, &mut g, p);
        }
    }

    fn abort_prepared(&mut self, _p: &Publish<'_>) {
        // `prepare` merged the frees into the free lists; nothing of it
        // reached the media, so re-walking the headers restores them.
        if let Some(mut g) = self.held.take() {
            let heap = self.heap;
            g.free.clear();
            g.by_len.clear();
            let (mut in_use, mut claimed) = (0, 0);
            let arena = heap.arena_pool();
            let mut off = 0u64;
            while off < heap.arena_len {
                let at = arena + off;
                let (state, len) = decode_hdr(heap.nonce, at, heap.pool.load_u64(at as usize))
                    .expect("headers stay valid while the lock is held");
                if state == STATE_FREE {
                    if !g.reserved.contains(&off) {
                        g.insert_free(off, len);
                    }
                } else {
                    in_use += len - BLOCK_HEADER;
                    claimed += len;
                }
                off += len;
            }
            g.in_use = in_use;
            g.claimed = claimed;
        }
    }

    fn root(&mut self, size: usize) -> Result<POff<u8>> {
        let cur = PAllocator::root(self.heap);
        if !cur.is_null() {
            let have = PAllocator::usable_size(self.heap, cur)?;
            if have < size {
                return Err(AllocError::BadOption(format!(
                    "the root object has {have} bytes, {size} requested"
                )));
            }
            return Ok(cur);
        }
        let r = self.reserve(size)?;
        self.heap.pool.fill_nodrain(r.off as usize, size, 0);
        let off = r.off();
        let link = Link {
            at: POff::new(self.heap.root_word()),
            value: r.off,
        };
        let allocs = [r];
        if let Err(e) = self.publish(&Publish {
            allocs: &allocs,
            frees: &[],
            links: &[link],
        }) {
            let [r] = allocs;
            let _ = self.cancel(r);
            return Err(e);
        }
        Ok(off)
    }

    fn max_publish_ops(&self) -> usize {
        self.heap.lane.max_ops()
    }
}

impl PAllocator for LockHeap {
    fn name(&self) -> &'static str {
        "nstore-lock"
    }

    fn thread(&self) -> Result<Box<dyn AllocThread + Send + '_>> {
        Ok(Box::new(self.attach()))
    }

    fn usable_size(&self, off: POff<u8>) -> Result<usize> {
        let _g = self.inner.lock();
        self.allocated(off.raw())
            .map(|(_, len)| (len - BLOCK_HEADER) as usize)
    }

    fn root(&self) -> POff<u8> {
        POff::new(self.pool.load_u64(self.root_word() as usize))
    }

    fn stats(&self) -> AllocStats {
        let i = self.inner.lock();
        let free_total: u64 = i.free.values().sum();
        let largest = i.by_len.last().map_or(0, |&(l, _)| l);
        AllocStats {
            capacity: self.arena_len,
            in_use: i.in_use,
            free: self.arena_len - i.in_use,
            blocks: i.blocks,
            claimed: i.claimed,
            fragmentation: if i.claimed > 0 {
                1.0 - i.in_use as f64 / i.claimed as f64
            } else {
                0.0
            },
            external_fragmentation: if free_total > 0 {
                1.0 - largest as f64 / free_total as f64
            } else {
                0.0
            },
            largest_free: largest,
            meta_lines: i.meta_lines,
            fences: i.fences,
            grow_room: 0,
        }
    }

    fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    fn for_each_allocated(&self, f: &mut dyn FnMut(POff<u8>, usize)) {
        let _g = self.inner.lock();
        let arena = self.arena_pool();
        let mut off = 0u64;
        while off < self.arena_len {
            let at = arena + off;
            let Some((state, len)) = decode_hdr(self.nonce, at, self.pool.load_u64(at as usize))
            else {
                return;
            };
            if state == STATE_ALLOC {
                f(POff::new(at + BLOCK_HEADER), (len - BLOCK_HEADER) as usize);
            }
            off += len;
        }
    }

    fn max_publish_ops(&self) -> usize {
        self.lane.max_ops()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The superblock's bytes, as the version that wrote them laid them out
    /// (hex of one fixed superblock, taken before the encoding moved to
    /// `ferrite_pmem::superblock`): pools written by older builds must keep
    /// opening, byte for byte.
    #[test]
    fn superblock_bytes_are_the_format_on_media() {
        let hex: String = {
            let p = pool();
            let opts = LockOptions {
                lane_bytes: 4096,
                nonce: Some(0x1234_5678_9abc_def0),
            };
            LockHeap::create(region(&p), opts).unwrap();
            region(&p).read_vec(0, CACHE_LINE)
        }
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect();
        assert_eq!(
            hex,
            concat!(
                "464552524c4f434b0100000000100000801000000000000080cf3f0000000000",
                "00e03f0000000000f0debc9a7856341200000000000000000000000026e7415c"
            )
        );
    }
    use ferrite_pmem::{Counters, Domain, Pool, PoolOptions};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn pool() -> Pool {
        Pool::create_in_memory(&PoolOptions::new("lock-test", 4 << 20).domain(Domain::Adr)).unwrap()
    }

    fn region(p: &Pool) -> Region {
        let d = p.data();
        d.sub(4096, d.len() - 4096).unwrap()
    }

    fn slot(p: &Pool, i: usize) -> POff<u64> {
        POff::new((p.data().base() + 8 * i) as u64)
    }

    fn opts() -> LockOptions {
        LockOptions {
            lane_bytes: 2048,
            nonce: Some(3),
        }
    }

    fn live(h: &LockHeap) -> Vec<(u64, usize)> {
        let mut v = Vec::new();
        h.for_each_allocated(&mut |o, s| v.push((o.raw(), s)));
        v
    }

    #[test]
    fn alloc_free_coalesce_and_reopen() {
        let p = pool();
        let h = LockHeap::create(region(&p), opts()).unwrap();
        let mut t = h.attach();
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut v = Vec::new();
        for i in 0..2000 {
            if v.len() > 100 || (rng.random_bool(0.4) && !v.is_empty()) {
                let (off, s): (POff<u8>, usize) = v.swap_remove(rng.random_range(0..v.len()));
                t.free(off, Some(slot(&p, s))).unwrap();
            } else {
                let off = t
                    .alloc(rng.random_range(1..3000), Some(slot(&p, i % 500)))
                    .unwrap();
                v.push((off, i % 500));
            }
        }
        let before = live(&h);
        assert_eq!(before.len(), v.len());
        let s = h.stats();
        drop(t);
        drop(h);
        let h = LockHeap::open(region(&p)).unwrap();
        assert_eq!(live(&h), before);
        assert_eq!(h.stats().in_use, s.in_use);
        let mut t = h.attach();
        for (off, _) in v {
            t.free(off, None).unwrap();
        }
        assert_eq!(h.stats().in_use, 0);
        // Everything coalesced back into one free block.
        assert_eq!(h.stats().largest_free, h.arena_len);
        drop(t);
        drop(h);
        let h = LockHeap::open(region(&p)).unwrap();
        assert_eq!(h.stats().largest_free, h.arena_len);
    }

    #[test]
    fn fences_and_misuse() {
        let p = pool();
        let h = LockHeap::create(region(&p), opts()).unwrap();
        let mut t = h.attach();
        let c0 = Counters::snapshot();
        let a = t.alloc(100, Some(slot(&p, 0))).unwrap();
        assert_eq!(
            (Counters::snapshot() - c0).fences,
            4,
            "split (2) + publish (2)"
        );
        assert_eq!(h.usable_size(a).unwrap(), 112);
        t.free(a, Some(slot(&p, 0))).unwrap();
        assert!(matches!(
            t.free(a, None),
            Err(AllocError::NotAllocated { .. })
        ));
        let b = t.alloc(100, None).unwrap();
        assert!(matches!(
            t.publish(&Publish {
                frees: &[b, b],
                ..Publish::default()
            }),
            Err(AllocError::DoubleFree { .. })
        ));
        let mut u = h.attach();
        let r = u.reserve(10).unwrap();
        assert!(matches!(t.cancel(r), Err(AllocError::Foreign { .. })));
    }

    #[test]
    fn prepare_then_abort_restores_the_free_lists() {
        let p = pool();
        let h = LockHeap::create(region(&p), opts()).unwrap();
        let mut t = h.attach();
        let a = t.alloc(100, None).unwrap();
        let b = t.alloc(100, None).unwrap();
        let before = h.stats();
        let frees = [a, b];
        let pb = Publish {
            frees: &frees,
            ..Publish::default()
        };
        let mut ops = Vec::new();
        t.prepare(&pb, &mut ops).unwrap();
        assert_eq!(ops.len(), 2);
        assert!(matches!(t.reserve(8), Err(AllocError::PreparePending)));
        t.abort_prepared(&pb);
        assert_eq!(h.stats(), before);
        t.free(a, None).unwrap();
    }

    #[test]
    fn corrupt_headers_are_reported() {
        let p = pool();
        let h = LockHeap::create(region(&p), opts()).unwrap();
        let mut t = h.attach();
        let a = t.alloc(100, None).unwrap();
        drop(t);
        drop(h);
        let r = Region::whole(p.medium().clone());
        let hdr = a.raw() as usize - 16;
        r.store_u64(hdr, r.load_u64(hdr) ^ 4);
        assert!(matches!(
            LockHeap::open(region(&p)),
            Err(AllocError::Corrupt(_))
        ));
        r.store_u64(hdr, r.load_u64(hdr) ^ 4);
        assert!(LockHeap::open(region(&p)).is_ok());
        let rg = region(&p);
        rg.write(30, &[1]);
        assert!(matches!(
            LockHeap::open(region(&p)),
            Err(AllocError::Checksum { .. })
        ));
    }

    /// A reserve (splitting a block), publish or free returns, and drops
    /// the lock, with no flush in flight: an unlock is a locked
    /// instruction, which would wait for such a flush's write-back as a
    /// fence does (see the heap's test of the same name). Only `prepare`
    /// leaves its marker flush for the caller's commit fence (it keeps the
    /// lock). The planted [`Fault::UnfencedMarkers`] is caught.
    #[test]
    fn operations_return_with_no_flush_in_flight() {
        for fault in [Fault::None, Fault::UnfencedMarkers] {
            let p = pool();
            drop(LockHeap::create(region(&p), opts()).unwrap());
            let img = p.image();
            let (q, obs) = ferrite_crash::InFlight::open(
                &img,
                &PoolOptions::new("lock-test", img.len() as u64),
            )
            .unwrap();
            let h = LockHeap::open_with_fault(region(&q), fault).unwrap();
            let mut t = h.attach();
            let mut worst = 0;
            let mut after = |what: &str| {
                let n = obs.count();
                if fault == Fault::None {
                    assert_eq!(n, 0, "flushes in flight after {what}");
                }
                worst = worst.max(n);
            };
            let a = t.alloc(100, Some(slot(&q, 0))).unwrap();
            after("a linked alloc (a split, a record)");
            let b = t.alloc(100, None).unwrap();
            after("an unlinked alloc (one word, marker pending)");
            t.free(a, Some(slot(&q, 0))).unwrap();
            after("a linked free");
            t.free(b, None).unwrap();
            after("an unlinked free");
            assert_eq!(worst > 0, fault == Fault::UnfencedMarkers, "{fault:?}");
        }
    }
}
