//! Thread handles and transactions: the two orec algorithms [P3 §III].
//!
//! # orec-eager (undo logging, encounter-time locking)
//!
//! A write locks the word's orec at once (aborting if another thread holds
//! it), appends an undo entry with the word's old value — the first one
//! together with the slot's status NEEDS_UNDO — and fences before storing
//! in place. The in-place stores are flushed lazily, at the next fence
//! point (the next undo entry's fence or the commit). Commit: flush what is
//! dirty, fence, store IDLE, fence. So a writer pays **W + 2 fences** for W
//! distinct words written (P3: W + 3, with the status on its own fence).
//!
//! # orec-lazy (redo logging, commit-time locking)
//!
//! Writes go to a DRAM write set; reads look there first (read-your-own
//! writes). Commit locks the write set's orecs, ticks the clock, validates
//! the read set, writes the redo log and its header (NEEDS_REDO with a
//! checksum over the log), flushes, **fence 1** (the commit point); writes
//! back in place, flushes, **fence 2**; stores IDLE, flushes, **fence 3**;
//! releases the orecs. So **3 fences** per writer, whatever W (P3 §IV-B).
//! Fence 3 must come before the release: otherwise a later transaction of
//! another thread could commit a new value of a word this log still holds,
//! and a crash would replay the stale log over it.
//!
//! The order of lock, tick and log (rather than P3's log, lock, tick) keeps
//! the flushes of the log out of the way of the locked instructions that
//! take the orecs and tick the clock (ARCHITECTURE.md rule 8): a `clwb` in
//! flight makes a younger locked instruction wait for its write-back.
//!
//! # Both
//!
//! - Reads are validated against the orecs and the transaction's start time
//!   (TL2 / TinySTM-style, with timestamp extension): a read whose orec is
//!   newer than the start extends the start after revalidating every
//!   earlier read, so a transaction never sees an inconsistent snapshot
//!   (opacity), and a read-only transaction commits with no validation, no
//!   clock tick and no fence.
//! - Conflicts abort and re-execute the body with randomised exponential
//!   back-off; an orec released by an aborted eager writer gets a fresh
//!   version (a reader that saw the speculative value must notice).
//! - Allocation and free go through the allocator's prepare/commit: the
//!   operations are applied at commit — after their inverses are durable in
//!   the undo log (riding on the next undo entry's fence) or inside the redo
//!   log — so a block commits or vanishes with its transaction at no extra
//!   fence in the common case. Memory allocated in the transaction is
//!   *captured*: accessed in place without orecs or logging (nobody else can
//!   reach it before the commit) and flushed before the commit point.
//! - Freed blocks go back to the allocator only after every transaction
//!   that started before the free's commit has finished (quiescence), so no
//!   running transaction can see a reused block's new content.
//! - Under `eadr`, `pdram` and `pdram-lite` no fence is issued (the caches
//!   are in the persistence domain and x86-TSO makes stores durable in
//!   program order); only the compiler is kept from reordering.

use crate::error::{PtmError, Result};
use crate::format::{self, Target};
use crate::orec::{self, is_locked, owner, version};
use crate::word::Word;
use crate::{Algorithm, Fault, Ptm};
use ferrite_alloc::{AllocThread, HeapThread, MetaOp, OpKind, Publish, Reservation};
use ferrite_pmem::POff;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{Ordering, compiler_fence};

/// Why a transaction body stopped: use `?` on [`Tx`]'s methods.
#[derive(Debug)]
pub enum Abort {
    /// Another transaction got in the way: the body runs again.
    Conflict,
    /// The body asked to roll back ([`Tx::abort`]).
    User(u64),
    /// An error that retrying cannot fix.
    Error(PtmError),
}

impl From<PtmError> for Abort {
    fn from(e: PtmError) -> Abort {
        Abort::Error(e)
    }
}

impl From<ferrite_alloc::AllocError> for Abort {
    fn from(e: ferrite_alloc::AllocError) -> Abort {
        Abort::Error(e.into())
    }
}

/// A transaction body's result: `?` on [`Tx`]'s methods propagates its [`Abort`].
pub type TxResult<T> = std::result::Result<T, Abort>;

/// Cumulative counts of one thread handle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PtmStats {
    /// Transactions committed (read-only ones included).
    pub commits: u64,
    /// Committed transactions that wrote, allocated or freed.
    pub writer_commits: u64,
    /// Attempts aborted by a conflict (and re-executed).
    pub aborts: u64,
    /// Transactions rolled back by their bodies.
    pub user_aborts: u64,
    /// Fences issued by the PTM (the allocator's own excluded).
    pub fences: u64,
    /// Log entries written (undo entries, redo entries).
    pub log_entries: u64,
    /// Largest redo log of one transaction, in cache lines.
    pub max_log_lines: u64,
}

impl PtmStats {
    /// The counts since `o` (an earlier snapshot of the same handle).
    pub fn sub(&self, o: &PtmStats) -> PtmStats {
        PtmStats {
            commits: self.commits - o.commits,
            writer_commits: self.writer_commits - o.writer_commits,
            aborts: self.aborts - o.aborts,
            user_aborts: self.user_aborts - o.user_aborts,
            fences: self.fences - o.fences,
            log_entries: self.log_entries - o.log_entries,
            max_log_lines: self.max_log_lines.max(o.max_log_lines),
        }
    }
}

/// Fibonacci hashing of word offsets (they are multiples of 8).
#[derive(Default)]
struct WordHasher(u64);

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, w: u64) {
        self.0 = (w >> 3).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type WordMap<V> = HashMap<u64, V, BuildHasherDefault<WordHasher>>;

/// One allocator operation of the transaction, with its inverse.
struct OpEntry {
    fwd: MetaOp,
    inv: MetaOp,
    /// Its inverse is in the undo log (eager).
    logged: bool,
    /// Not applied at commit (an allocation freed again in the transaction).
    dead: bool,
}

/// A reservation of this transaction and its operations.
struct Alloc {
    res: Reservation,
    ops: std::ops::Range<usize>,
    dead: bool,
}

/// Per-thread transaction state, kept between transactions to reuse the
/// buffers.
#[derive(Default)]
struct TxState {
    start: u64,
    /// The epoch this attempt logs under (eager: once the status is written).
    epoch: u64,
    /// Orecs read (may repeat).
    reads: Vec<u32>,
    /// Orecs held, with the value each had before.
    locks: Vec<(u32, u64)>,
    /// Eager: words with an undo entry (offset → old value).
    undo: WordMap<u64>,
    undo_order: Vec<u64>,
    /// Eager: undo entries appended; the status is NEEDS_UNDO once > 0.
    undo_n: usize,
    /// Words stored in place and not yet flushed (eager data; captured
    /// memory under both).
    dirty: Vec<u64>,
    /// Lazy: the write set (offset → index in `ws`).
    ws_index: WordMap<usize>,
    ws: Vec<(u64, u64)>,
    allocs: Vec<Alloc>,
    /// Blocks allocated in this transaction: `[start, end)`.
    captured: Vec<(u64, u64)>,
    frees: Vec<POff<u8>>,
    ops: Vec<OpEntry>,
    prep: Vec<MetaOp>,
    lockset: Vec<u32>,
    buf: Vec<u8>,
    scratch: Vec<u8>,
}

impl TxState {
    fn clear(&mut self) {
        self.reads.clear();
        self.locks.clear();
        self.undo.clear();
        self.undo_order.clear();
        self.undo_n = 0;
        self.dirty.clear();
        self.ws_index.clear();
        self.ws.clear();
        self.allocs.clear();
        self.captured.clear();
        self.frees.clear();
        self.ops.clear();
    }

    #[inline]
    fn captured(&self, off: u64) -> bool {
        self.captured.iter().any(|&(s, e)| off >= s && off < e)
    }

    fn writes_anything(&self) -> bool {
        !self.locks.is_empty()
            || !self.ws.is_empty()
            || !self.allocs.is_empty()
            || !self.frees.is_empty()
    }
}

/// One thread's handle on a [`Ptm`]: a log slot and an allocator lane.
pub struct PtmThread<'p> {
    ptm: &'p Ptm,
    heap: HeapThread<'p>,
    c: Core,
}

/// A thread's state without lifetimes.
struct Core {
    slot: usize,
    /// Last epoch used by this slot.
    epoch: u64,
    st: TxState,
    stats: PtmStats,
    rng: u64,
    /// See [`MAX_REFUSED_FREES`].
    refused_frees: u32,
}

/// What the protocol works on during one attempt: the PTM, the thread's
/// allocator handle and its state.
struct Run<'a> {
    ptm: &'a Ptm,
    heap: &'a mut (dyn AllocThread + 'a),
    c: &'a mut Core,
}

impl std::fmt::Debug for PtmThread<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtmThread")
            .field("slot", &self.c.slot)
            .finish()
    }
}

/// Attempts before [`PtmError::Starved`].
const MAX_ATTEMPTS: u64 = 1 << 20;
/// Consecutive attempts in which the allocator refuses a free while the
/// read set is valid (another transaction's free of the block is in flight)
/// before the refusal is taken for a real double free.
const MAX_REFUSED_FREES: u32 = 256;

impl<'p> PtmThread<'p> {
    pub(crate) fn attach(ptm: &'p Ptm) -> Result<PtmThread<'p>> {
        let (slot, epoch) = {
            let mut s = ptm.slots.lock().unwrap_or_else(|p| p.into_inner());
            let Some(i) = s.iter().position(|&(used, _)| !used) else {
                return Err(PtmError::NoSlot(ptm.sb.slots));
            };
            s[i].0 = true;
            (i, s[i].1)
        };
        let heap = match ptm.heap.attach() {
            Ok(h) => h,
            Err(e) => {
                ptm.slots.lock().unwrap_or_else(|p| p.into_inner())[slot].0 = false;
                return Err(e.into());
            }
        };
        Ok(PtmThread {
            ptm,
            heap,
            c: Core {
                slot,
                epoch,
                st: TxState::default(),
                stats: PtmStats::default(),
                rng: 0x9e37_79b9_7f4a_7c15 ^ (slot as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9),
                refused_frees: 0,
            },
        })
    }

    /// This handle's log slot.
    pub fn slot(&self) -> usize {
        self.c.slot
    }

    /// Counts since the handle was attached.
    pub fn stats(&self) -> PtmStats {
        self.c.stats
    }

    /// Runs `body` as one atomic, isolated and durable transaction and
    /// returns its value once it committed. On a conflict the body's
    /// effects are rolled back and it runs again, so a body must be safe
    /// to re-execute: every persistent access goes through `tx`, and any
    /// DRAM state it changes is reset at its start. `Err(Abort::User(c))`
    /// (see [`Tx::abort`]) rolls back and returns [`PtmError::Aborted`];
    /// errors ([`Abort::Error`]) roll back and are returned.
    pub fn atomic<R>(&mut self, mut body: impl FnMut(&mut Tx<'_>) -> TxResult<R>) -> Result<R> {
        let mut attempt = 0u64;
        // A writer's commit is one commit point of the persist trace (after
        // its last fence); aborted attempts and read-only ones are none.
        let scope = ferrite_pmem::trace::commit_scope();
        let writer_commits = self.c.stats.writer_commits;
        loop {
            let mut tx = Tx {
                t: Run {
                    ptm: self.ptm,
                    heap: &mut self.heap,
                    c: &mut self.c,
                },
            };
            tx.t.begin();
            let r = match body(&mut tx) {
                Ok(v) => tx.t.commit().map(|()| v),
                Err(e) => Err(e),
            };
            let mut run = tx.t;
            match r {
                Ok(v) => {
                    run.c.stats.commits += 1;
                    run.c.refused_frees = 0;
                    if run.c.stats.writer_commits > writer_commits {
                        scope.mark();
                    }
                    return Ok(v);
                }
                Err(Abort::Conflict) => {
                    run.rollback();
                    run.c.stats.aborts += 1;
                    attempt += 1;
                    if attempt >= MAX_ATTEMPTS {
                        return Err(PtmError::Starved(attempt));
                    }
                    run.backoff(attempt);
                }
                Err(Abort::User(code)) => {
                    run.rollback();
                    run.c.stats.user_aborts += 1;
                    return Err(PtmError::Aborted { code });
                }
                Err(Abort::Error(e)) => {
                    run.rollback();
                    return Err(e);
                }
            }
        }
    }
}

impl Run<'_> {
    fn begin(&mut self) {
        self.c.st.clear();
        let a = &self.ptm.active[self.c.slot];
        // Announce "in a transaction" before reading the clock, so a
        // quiescing free either waits for us or happened before our start.
        a.store(0, Ordering::SeqCst);
        self.c.st.start = self.ptm.orecs.now();
        // A later, larger bound: the announcement above already holds.
        a.store(self.c.st.start, Ordering::Release);
        self.c.st.epoch = self.c.epoch + 1;
    }

    fn end(&mut self) {
        self.ptm.active[self.c.slot].store(u64::MAX, Ordering::SeqCst);
    }

    fn backoff(&mut self, attempt: u64) {
        // xorshift; a random number of rounds below 2^min(attempt, 8).
        self.c.rng ^= self.c.rng << 13;
        self.c.rng ^= self.c.rng >> 7;
        self.c.rng ^= self.c.rng << 17;
        let cap = 1u64 << attempt.min(8);
        let rounds = 1 + self.c.rng % cap;
        let m = self.ptm.region.medium();
        for r in 0..rounds {
            m.wait_hint(r as u32);
        }
    }

    /// A fence where the domain needs one (none under P3's incorrect
    /// fence-removal diagnostic).
    #[inline]
    fn fence(&mut self) {
        if self.ptm.fences && !self.ptm.opts.fence_removal {
            self.ptm.region.fence();
            self.c.stats.fences += 1;
        } else {
            compiler_fence(Ordering::SeqCst);
        }
    }

    fn fault(&self, f: Fault) -> bool {
        self.ptm.opts.fault == Some(f)
    }

    fn slot_off(&self) -> usize {
        self.ptm.sb.slot_off(self.c.slot) as usize
    }

    /// Stores this attempt's status word with `state` and flushes it (no
    /// fence). Taking the attempt's epoch makes it the slot's last one.
    fn set_status(&mut self, state: u64) {
        let so = self.slot_off();
        self.ptm
            .region
            .store_u64(so, format::status(self.c.st.epoch, state));
        self.ptm.region.flush(so, 8);
        self.c.epoch = self.c.st.epoch;
    }

    /// Revalidates every read: unchanged since `start` (or locked by this
    /// thread from a version not newer than `start`).
    fn validate(&self) -> TxResult<()> {
        let o = &self.ptm.orecs;
        for &i in &self.c.st.reads {
            let v = o.load(i);
            if is_locked(v) {
                if owner(v) != self.c.slot as u64 {
                    return Err(Abort::Conflict);
                }
                let prev = self
                    .c
                    .st
                    .locks
                    .iter()
                    .find(|&&(j, _)| j == i)
                    .map(|&(_, p)| p)
                    .unwrap_or(0);
                if version(prev) > self.c.st.start {
                    return Err(Abort::Conflict);
                }
            } else if version(v) > self.c.st.start {
                return Err(Abort::Conflict);
            }
        }
        Ok(())
    }

    /// Moves the start time to now if every read is still valid.
    fn extend(&mut self) -> TxResult<()> {
        let now = self.ptm.orecs.now();
        self.validate()?;
        self.c.st.start = now;
        Ok(())
    }

    /// An orec-validated read of the word at `off`.
    fn read_word(&mut self, off: u64) -> TxResult<u64> {
        let p = self.ptm;
        let i = p.orecs.index(off);
        let mut round = 0u32;
        loop {
            let v1 = p.orecs.load(i);
            if is_locked(v1) {
                if owner(v1) == self.c.slot as u64 {
                    return Ok(p.region.load_u64(off as usize));
                }
                // Eager writers hold orecs for whole transactions: abort.
                // Lazy ones only through their commit: wait a little.
                if p.opts.algorithm == Algorithm::Eager || round >= 32 {
                    return Err(Abort::Conflict);
                }
                p.region.medium().wait_hint(round);
                round += 1;
                continue;
            }
            let val = p.region.load_u64(off as usize);
            let v2 = p.orecs.load(i);
            if v1 != v2 {
                continue;
            }
            if version(v1) > self.c.st.start {
                self.extend()?;
                continue;
            }
            self.c.st.reads.push(i);
            return Ok(val);
        }
    }

    /// Eager: takes the orec of `off` (or finds it taken by this thread).
    fn acquire(&mut self, off: u64) -> TxResult<()> {
        let p = self.ptm;
        let i = p.orecs.index(off);
        loop {
            let v = p.orecs.load(i);
            if is_locked(v) {
                if owner(v) == self.c.slot as u64 {
                    return Ok(());
                }
                return Err(Abort::Conflict);
            }
            if version(v) > self.c.st.start {
                self.extend()?;
                continue;
            }
            if p.orecs.try_lock(i, v, self.c.slot) {
                self.c.st.locks.push((i, v));
                return Ok(());
            }
        }
    }

    /// Eager: appends undo entries — pending operation inverses first, then
    /// `t` if given — with the status NEEDS_UNDO before the first, flushes
    /// them and the dirty words, and fences.
    fn log_undo(&mut self, t: Option<Target>) -> TxResult<()> {
        let p = self.ptm;
        let pending = self.c.st.ops.iter().filter(|o| !o.logged).count();
        let n = pending + usize::from(t.is_some());
        let cap = p.sb.log_bytes as usize;
        let need = (self.c.st.undo_n + n) * format::UNDO_ENTRY;
        if need > cap {
            return Err(PtmError::LogFull { need, have: cap }.into());
        }
        if n == 0 {
            return Ok(());
        }
        if self.c.st.undo_n == 0 {
            self.set_status(format::NEEDS_UNDO);
        }
        let area = self.slot_off() + format::SLOT_HDR as usize;
        let first = self.c.st.undo_n;
        let (nonce, slot, epoch) = (p.sb.nonce, self.c.slot, self.c.st.epoch);
        let mut buf = std::mem::take(&mut self.c.st.buf);
        buf.clear();
        for o in self.c.st.ops.iter_mut().filter(|o| !o.logged) {
            buf.extend_from_slice(&format::undo_entry(nonce, slot, &Target::Op(o.inv), epoch));
            o.logged = true;
        }
        if let Some(t) = t {
            buf.extend_from_slice(&format::undo_entry(nonce, slot, &t, epoch));
        }
        let at = area + first * format::UNDO_ENTRY;
        p.region.write(at, &buf);
        p.region.flush(at, buf.len());
        self.c.st.buf = buf;
        self.c.st.undo_n += n;
        self.c.stats.log_entries += n as u64;
        self.flush_dirty();
        if !self.fault(Fault::UndoNoFence) {
            self.fence();
        }
        Ok(())
    }

    fn flush_dirty(&mut self) {
        let r = &self.ptm.region;
        for &w in &self.c.st.dirty {
            r.flush(w as usize, 8);
        }
        self.c.st.dirty.clear();
    }

    /// Commits the attempt (see the module documentation).
    fn commit(&mut self) -> TxResult<()> {
        if !self.c.st.writes_anything() {
            self.end();
            return Ok(());
        }
        let p = self.ptm;
        if p.opts.algorithm == Algorithm::Lazy {
            self.lock_write_set()?;
        }
        let end = p.orecs.tick();
        if end != self.c.st.start + 1 {
            self.validate()?;
        }
        match p.opts.algorithm {
            Algorithm::Eager => self.commit_eager(),
            Algorithm::Lazy => self.commit_lazy()?,
        }
        // Durable. Release the orecs, then let freed blocks go once no
        // transaction that may still see them runs.
        for &(i, _) in &self.c.st.locks {
            p.orecs.release(i, end);
        }
        self.c.st.locks.clear();
        self.end();
        if !self.c.st.frees.is_empty() {
            self.quiesce(end);
        }
        self.finish_allocs(true);
        self.c.stats.writer_commits += 1;
        Ok(())
    }

    fn commit_eager(&mut self) {
        if self.c.st.ops.iter().any(|o| !o.logged && !o.dead) {
            // Inverses not yet durable: they go first, with the dirty words.
            self.log_undo(None)
                .unwrap_or_else(|_| unreachable!("room for the inverses was checked at prepare"));
        }
        if self.c.st.undo_n == 0 {
            // Only allocations and captured writes: the status must still
            // guard the operations about to be applied.
            self.set_status(format::NEEDS_UNDO);
            self.fence();
        }
        self.apply_ops();
        self.flush_dirty();
        if !self.fault(Fault::CommitBeforeData) {
            self.fence();
        }
        self.set_status(format::IDLE);
        self.fence();
    }

    /// Applies the live allocator operations in place (their words are
    /// flushed with the dirty words).
    fn apply_ops(&mut self) {
        let r = &self.ptm.region;
        for o in self.c.st.ops.iter().filter(|o| !o.dead) {
            o.fwd.apply(r);
            self.c.st.dirty.push(o.fwd.off);
        }
    }

    /// Lazy: locks the orecs of the write set.
    fn lock_write_set(&mut self) -> TxResult<()> {
        let p = self.ptm;
        let mut set = std::mem::take(&mut self.c.st.lockset);
        set.clear();
        set.extend(self.c.st.ws.iter().map(|&(off, _)| p.orecs.index(off)));
        set.sort_unstable();
        set.dedup();
        let mut r = Ok(());
        'all: for &i in &set {
            loop {
                let v = p.orecs.load(i);
                if is_locked(v) {
                    r = Err(Abort::Conflict);
                    break 'all;
                }
                if p.orecs.try_lock(i, v, self.c.slot) {
                    self.c.st.locks.push((i, v));
                    break;
                }
            }
        }
        self.c.st.lockset = set;
        r
    }

    fn commit_lazy(&mut self) -> TxResult<()> {
        let p = self.ptm;
        let live_ops = self.c.st.ops.iter().filter(|o| !o.dead).count();
        let ranges = if self.fault(Fault::UncheckedNewBlocks) {
            0
        } else {
            self.c.st.captured.len()
        };
        let count = self.c.st.ws.len() + live_ops + ranges;
        let bytes = count * format::REDO_ENTRY;
        let cap = p.sb.log_bytes as usize;
        if bytes > cap {
            return Err(PtmError::LogFull {
                need: bytes,
                have: cap,
            }
            .into());
        }
        let so = self.slot_off();
        let area = so + format::SLOT_HDR as usize;
        let mut buf = std::mem::take(&mut self.c.st.buf);
        buf.clear();
        for &(off, value) in &self.c.st.ws {
            buf.extend_from_slice(&Target::Word { off, value }.encode());
        }
        for o in self.c.st.ops.iter().filter(|o| !o.dead) {
            buf.extend_from_slice(&Target::Op(o.fwd).encode());
        }
        for &(s, e) in &self.c.st.captured[..ranges] {
            buf.extend_from_slice(&Target::Range { off: s, len: e - s }.encode());
        }
        let status = format::status(self.c.st.epoch, format::NEEDS_REDO);
        let mut crc = format::redo_crc(p.sb.nonce, self.c.slot, status, count as u32, &buf);
        // The new blocks' bytes join the checksum and are flushed whole, so
        // that the commit point covers them (see `format`).
        for &(s, e) in &self.c.st.captured[..ranges] {
            let len = (e - s) as usize;
            let mut tmp = std::mem::take(&mut self.c.st.scratch);
            tmp.resize(len, 0);
            p.region.read(s as usize, &mut tmp);
            crc = crc32c::crc32c_append(crc, &tmp);
            self.c.st.scratch = tmp;
            p.region.flush(s as usize, len);
        }
        if ranges == self.c.st.captured.len() {
            let st = &mut self.c.st;
            st.dirty
                .retain(|&w| !st.captured.iter().any(|&(s, e)| w >= s && w < e));
        }
        p.region.write(area, &buf);
        p.region.flush(area, buf.len());
        let mut hdr = [0u8; 16];
        hdr[..8].copy_from_slice(&status.to_le_bytes());
        hdr[8..12].copy_from_slice(&(count as u32).to_le_bytes());
        hdr[12..16].copy_from_slice(&crc.to_le_bytes());
        p.region.write(so, &hdr);
        p.region.flush(so, 16);
        self.c.epoch = self.c.st.epoch;
        self.c.stats.log_entries += count as u64;
        self.c.stats.max_log_lines = self
            .c
            .stats
            .max_log_lines
            .max(bytes.div_ceil(64) as u64 + 1);
        self.c.st.buf = buf;
        // Captured memory must be durable before the links to it are.
        self.flush_dirty();
        if !self.fault(Fault::WriteBackBeforeLog) {
            self.fence(); // fence 1: the commit point
        }
        // Write back: operations (atomic updates) before the stores, so no
        // flush is in flight across them.
        self.apply_ops();
        for &(off, value) in &self.c.st.ws {
            p.region.store_u64(off as usize, value);
            self.c.st.dirty.push(off);
        }
        self.flush_dirty();
        self.fence(); // fence 2
        if self.fault(Fault::ReleaseBeforeApplied) {
            // Planted: the orecs go before the log is marked applied.
            for &(i, _) in &self.c.st.locks {
                p.orecs.release(i, p.orecs.now());
            }
            self.c.st.locks.clear();
        }
        self.set_status(format::IDLE);
        self.fence(); // fence 3
        Ok(())
    }

    /// Waits until no other thread runs a transaction that started before
    /// `end` (so none can still hold a pointer into a block freed at `end`).
    fn quiesce(&mut self, end: u64) {
        let p = self.ptm;
        for (s, a) in p.active.iter().enumerate() {
            if s == self.c.slot {
                continue;
            }
            let mut round = 0u32;
            while a.load(Ordering::SeqCst) < end {
                p.region.medium().wait_hint(round);
                round = round.saturating_add(1);
            }
        }
    }

    /// Tells the allocator how the transaction ended: commit (live
    /// allocations and the frees are now the heap's) or not.
    fn finish_allocs(&mut self, committed: bool) {
        if self.c.st.allocs.is_empty() && self.c.st.frees.is_empty() {
            return;
        }
        let allocs = std::mem::take(&mut self.c.st.allocs);
        let (live, dead): (Vec<Alloc>, Vec<Alloc>) = allocs.into_iter().partition(|a| !a.dead);
        let live: Vec<Reservation> = live.into_iter().map(|a| a.res).collect();
        let dead: Vec<Reservation> = dead.into_iter().map(|a| a.res).collect();
        let frees = std::mem::take(&mut self.c.st.frees);
        let (allocs, frees): (&[Reservation], &[POff<u8>]) = (&live, &frees);
        let p = Publish {
            allocs,
            frees,
            links: &[],
        };
        if committed {
            self.heap.commit_prepared(&p);
        } else {
            self.heap.abort_prepared(&p);
        }
        // Allocations freed again in the transaction never happened.
        self.heap.abort_prepared(&Publish {
            allocs: &dead,
            frees: &[],
            links: &[],
        });
        let gone = if committed { Vec::new() } else { live };
        for r in gone.into_iter().chain(dead) {
            let _ = self.heap.cancel(r);
        }
    }

    /// Undoes an attempt that did not commit.
    fn rollback(&mut self) {
        let p = self.ptm;
        match p.opts.algorithm {
            Algorithm::Eager => {
                if self.c.st.undo_n > 0 {
                    for &off in self.c.st.undo_order.iter().rev() {
                        p.region.store_u64(off as usize, self.c.st.undo[&off]);
                        p.region.flush(off as usize, 8);
                    }
                    self.c.st.dirty.clear();
                    self.fence();
                    self.set_status(format::IDLE);
                    self.fence();
                }
                // A reader may have seen the speculative values between two
                // loads of an orec: give every released orec a new version.
                if !self.c.st.locks.is_empty() {
                    let v = p.orecs.tick();
                    for &(i, _) in &self.c.st.locks {
                        p.orecs.release(i, v);
                    }
                }
            }
            Algorithm::Lazy => {
                // Nothing was written in place: the old versions stand.
                for &(i, prev) in &self.c.st.locks {
                    p.orecs.release(i, orec::version(prev));
                }
            }
        }
        self.c.st.locks.clear();
        self.finish_allocs(false);
        self.end();
    }
}

impl Drop for PtmThread<'_> {
    fn drop(&mut self) {
        let mut s = self.ptm.slots.lock().unwrap_or_else(|p| p.into_inner());
        s[self.c.slot] = (false, self.c.epoch);
    }
}

/// The view a transaction body gets. All persistent access inside a
/// transaction goes through it.
pub struct Tx<'a> {
    t: Run<'a>,
}

impl Tx<'_> {
    #[inline]
    fn check(&self, at: u64) -> TxResult<()> {
        if !at.is_multiple_of(8) {
            return Err(PtmError::Misaligned(at).into());
        }
        if !self.t.ptm.word_ok(at) {
            return Err(PtmError::OutOfBounds { off: at, len: 8 }.into());
        }
        Ok(())
    }

    /// Reads the word at pool offset `at` (8-byte aligned).
    #[inline]
    pub fn load(&mut self, at: u64) -> TxResult<u64> {
        self.check(at)?;
        let t = &mut self.t;
        if t.c.st.captured(at) {
            return Ok(t.ptm.region.load_u64(at as usize));
        }
        if t.ptm.opts.algorithm == Algorithm::Lazy
            && let Some(&i) = t.c.st.ws_index.get(&at)
        {
            return Ok(t.c.st.ws[i].1);
        }
        t.read_word(at)
    }

    /// Writes the word at pool offset `at` (8-byte aligned).
    #[inline]
    pub fn store(&mut self, at: u64, v: u64) -> TxResult<()> {
        self.check(at)?;
        let t = &mut self.t;
        if t.c.st.captured(at) {
            t.ptm.region.store_u64(at as usize, v);
            t.c.st.dirty.push(at);
            return Ok(());
        }
        match t.ptm.opts.algorithm {
            Algorithm::Lazy => {
                match t.c.st.ws_index.get(&at) {
                    Some(&i) => t.c.st.ws[i].1 = v,
                    None => {
                        t.c.st.ws_index.insert(at, t.c.st.ws.len());
                        t.c.st.ws.push((at, v));
                    }
                }
                Ok(())
            }
            Algorithm::Eager => {
                t.acquire(at)?;
                if !t.c.st.undo.contains_key(&at) {
                    let old = t.ptm.region.load_u64(at as usize);
                    t.log_undo(Some(Target::Word {
                        off: at,
                        value: old,
                    }))?;
                    t.c.st.undo.insert(at, old);
                    t.c.st.undo_order.push(at);
                }
                t.ptm.region.store_u64(at as usize, v);
                t.c.st.dirty.push(at);
                Ok(())
            }
        }
    }

    /// Reads a typed word.
    #[inline]
    pub fn get<T: Word>(&mut self, at: POff<T>) -> TxResult<T> {
        self.load(at.raw()).map(T::from_word)
    }

    /// Writes a typed word.
    #[inline]
    pub fn set<T: Word>(&mut self, at: POff<T>, v: T) -> TxResult<()> {
        self.store(at.raw(), v.to_word())
    }

    /// Reads `dst.len()` bytes from `at` (8-byte aligned), word by word.
    pub fn read_bytes(&mut self, at: u64, dst: &mut [u8]) -> TxResult<()> {
        for (i, chunk) in dst.chunks_mut(8).enumerate() {
            let w = self.load(at + 8 * i as u64)?.to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
        Ok(())
    }

    /// Writes `src` at `at` (8-byte aligned), word by word; a partial last
    /// word keeps its other bytes.
    pub fn write_bytes(&mut self, at: u64, src: &[u8]) -> TxResult<()> {
        for (i, chunk) in src.chunks(8).enumerate() {
            let off = at + 8 * i as u64;
            let w = if chunk.len() == 8 {
                u64::from_le_bytes(chunk.try_into().expect("8 bytes"))
            } else {
                let mut b = self.load(off)?.to_le_bytes();
                b[..chunk.len()].copy_from_slice(chunk);
                u64::from_le_bytes(b)
            };
            self.store(off, w)?;
        }
        Ok(())
    }

    /// Allocates at least `bytes` (8-aligned offset) that exist only if
    /// the transaction commits. The content is undefined: write before
    /// reading (or use [`Tx::alloc_zeroed`]).
    pub fn alloc(&mut self, bytes: usize) -> TxResult<POff<u8>> {
        let t = &mut self.t;
        let r = t.heap.reserve(bytes.max(8))?;
        t.c.st.prep.clear();
        let res = t.heap.prepare(
            &Publish {
                allocs: std::slice::from_ref(&r),
                frees: &[],
                links: &[],
            },
            &mut t.c.st.prep,
        );
        if let Err(e) = res {
            let _ = t.heap.cancel(r);
            return Err(e.into());
        }
        let first = t.c.st.ops.len();
        for &fwd in &t.c.st.prep {
            t.c.st.ops.push(OpEntry {
                fwd,
                inv: inverse(&fwd, &t.ptm.region),
                logged: false,
                dead: false,
            });
        }
        if t.ptm.opts.algorithm == Algorithm::Eager {
            let need = (t.c.st.undo_n + t.c.st.ops.iter().filter(|o| !o.logged).count())
                * format::UNDO_ENTRY;
            if need > t.ptm.sb.log_bytes as usize {
                // Keep it so that rollback releases it.
                t.c.st.allocs.push(Alloc {
                    res: r,
                    ops: first..t.c.st.ops.len(),
                    dead: false,
                });
                return Err(PtmError::LogFull {
                    need,
                    have: t.ptm.sb.log_bytes as usize,
                }
                .into());
            }
        }
        let off = r.off();
        t.c.st
            .captured
            .push((off.raw(), off.raw() + r.usable_size() as u64));
        t.c.st.allocs.push(Alloc {
            res: r,
            ops: first..t.c.st.ops.len(),
            dead: false,
        });
        Ok(off)
    }

    /// [`Tx::alloc`] with the block zeroed.
    pub fn alloc_zeroed(&mut self, bytes: usize) -> TxResult<POff<u8>> {
        let off = self.alloc(bytes)?;
        let n = self
            .t
            .c
            .st
            .captured
            .last()
            .map(|&(s, e)| e - s)
            .unwrap_or(0);
        let r = &self.t.ptm.region;
        r.fill(off.raw() as usize, n as usize, 0);
        let mut w = off.raw();
        while w < off.raw() + n {
            self.t.c.st.dirty.push(w);
            w += 64;
        }
        Ok(off)
    }

    /// Frees `block` (a block's offset as [`Tx::alloc`] returned it) when
    /// the transaction commits; freeing a block allocated in this
    /// transaction drops the allocation.
    pub fn free(&mut self, block: POff<u8>) -> TxResult<()> {
        let t = &mut self.t;
        if let Some(a) =
            t.c.st
                .allocs
                .iter_mut()
                .find(|a| !a.dead && a.res.off() == block)
        {
            a.dead = true;
            for o in &mut t.c.st.ops[a.ops.clone()] {
                o.dead = true;
            }
            let b = block.raw();
            t.c.st.captured.retain(|&(s, _)| s != b);
            return Ok(());
        }
        if t.c.st.frees.contains(&block) {
            return Err(PtmError::Alloc(ferrite_alloc::AllocError::DoubleFree {
                off: block.raw(),
            })
            .into());
        }
        t.c.st.prep.clear();
        let r = t.heap.prepare(
            &Publish {
                allocs: &[],
                frees: std::slice::from_ref(&block),
                links: &[],
            },
            &mut t.c.st.prep,
        );
        if let Err(e) = r {
            // The block may be freed (or being freed) by a transaction that
            // changed what this one read: a conflict, not a double free —
            // unless every read is still valid and the refusal persists.
            if matches!(
                e,
                ferrite_alloc::AllocError::DoubleFree { .. }
                    | ferrite_alloc::AllocError::NotAllocated { .. }
            ) {
                let stale = t.validate().is_err();
                t.c.refused_frees += 1;
                if stale || t.c.refused_frees < MAX_REFUSED_FREES {
                    return Err(Abort::Conflict);
                }
            }
            t.c.refused_frees = 0;
            return Err(e.into());
        }
        t.c.refused_frees = 0;
        t.c.st.frees.push(block);
        for &fwd in &t.c.st.prep {
            t.c.st.ops.push(OpEntry {
                fwd,
                inv: inverse(&fwd, &t.ptm.region),
                logged: false,
                dead: false,
            });
        }
        Ok(())
    }

    /// Rolls the transaction back: `return tx.abort(code)`. The
    /// [`PtmThread::atomic`] call returns [`PtmError::Aborted`] with `code`.
    pub fn abort<T>(&mut self, code: u64) -> TxResult<T> {
        Err(Abort::User(code))
    }

    /// The PTM this transaction runs on.
    pub fn ptm(&self) -> &Ptm {
        self.t.ptm
    }
}

/// The inverse of an allocator operation, exact because the bits it
/// changes belong to this transaction until it commits.
fn inverse(op: &MetaOp, region: &ferrite_pmem::Region) -> MetaOp {
    match op.kind {
        OpKind::Or => MetaOp::and_not(op.off, op.val),
        OpKind::AndNot => MetaOp::or(op.off, op.val),
        OpKind::Set => MetaOp::set(op.off, region.load_u64(op.off as usize)),
    }
}
