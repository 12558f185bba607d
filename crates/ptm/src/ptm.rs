//! The PTM object: creating and opening (recovering) a pool, attaching
//! threads.

use crate::error::{PtmError, Result};
use crate::format::{self, Superblock, Target};
use crate::orec::Orecs;
use crate::tx::PtmThread;
use crate::{Algorithm, Fault, PtmOptions};
use ferrite_alloc::{Heap, HeapOptions, MetaOp, RecoveryReport};
use ferrite_pmem::{Domain, POff, Pool, Region};
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

/// What opening a PTM pool did.
#[derive(Clone, Debug, Default)]
pub struct PtmRecovery {
    /// Transactions rolled back from their undo logs (orec-eager).
    pub undone: usize,
    /// Committed transactions whose redo logs were replayed (orec-lazy).
    pub replayed: usize,
    /// Redo logs found with a commit that never became durable whole.
    pub discarded: usize,
    /// Log entries applied.
    pub entries: usize,
    /// The heap's own recovery.
    pub heap: RecoveryReport,
    /// Wall time of the recovery.
    pub elapsed: Duration,
}

/// A persistent transactional memory over a pool: ownership records, a
/// global clock, one log slot per attached thread, a Ferrite heap. Share
/// it by reference; each thread attaches with [`Ptm::thread`].
pub struct Ptm {
    pub(crate) region: Region,
    pub(crate) sb: Superblock,
    pub(crate) opts: PtmOptions,
    pub(crate) heap: Heap,
    pub(crate) orecs: Orecs,
    /// Per slot: in use by a thread, and the last `epoch` it used.
    pub(crate) slots: Mutex<Vec<(bool, u64)>>,
    /// Per slot: a lower bound of the start time of the transaction the
    /// slot's thread runs, `u64::MAX` when it runs none (quiescence before
    /// freed blocks are reused).
    pub(crate) active: Box<[AtomicU64]>,
    /// `(data_lo, data_hi)`: the heap's pages, where transactional words live
    /// (and the root word).
    pub(crate) data: (u64, u64),
    /// The domain needs fences to order persistence (adr, msync); under
    /// eadr / pdram / pdram-lite the caches are persistent and x86-TSO
    /// orders stores, so the PTM issues none [P3 §II-B].
    pub(crate) fences: bool,
    domain: Domain,
    recovery: PtmRecovery,
}

impl std::fmt::Debug for Ptm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ptm")
            .field("algorithm", &self.opts.algorithm)
            .field("domain", &self.domain)
            .field("slots", &self.sb.slots)
            .finish()
    }
}

fn check_opts(opts: &PtmOptions) -> Result<()> {
    if opts.slots == 0 || opts.slots > format::MAX_SLOTS {
        return Err(PtmError::BadOption(format!(
            "slots must be 1..={}, not {}",
            format::MAX_SLOTS,
            opts.slots
        )));
    }
    if opts.log_bytes < format::MIN_LOG || !opts.log_bytes.is_multiple_of(64) {
        return Err(PtmError::BadOption(format!(
            "log_bytes must be a multiple of 64 and at least {}, not {}",
            format::MIN_LOG,
            opts.log_bytes
        )));
    }
    if opts.orecs == 0 || opts.orecs > 1 << 26 {
        return Err(PtmError::BadOption(format!(
            "orecs must be 1..=2^26, not {}",
            opts.orecs
        )));
    }
    Ok(())
}

impl Ptm {
    /// Formats `pool`'s data area as an empty PTM and opens it. Anything in
    /// the data area is lost. A crash while formatting leaves a pool
    /// without a root, which [`Ptm::open`] refuses.
    pub fn create(pool: &Pool, opts: &PtmOptions) -> Result<Ptm> {
        check_opts(opts)?;
        let region = Region::whole(pool.medium().clone());
        let len = region.len() as u64;
        pool.set_root::<u8>(POff::NULL)?;
        let slot_bytes = format::SLOT_HDR + u64::from(opts.log_bytes);
        let slots_end = format::SLOTS_OFF + u64::from(opts.slots) * slot_bytes;
        let heap_off = slots_end.next_multiple_of(4096);
        if heap_off + 64 * 4096 > len {
            return Err(PtmError::BadOption(format!(
                "a pool of {len} bytes is too small for {} slots of {} log bytes and a heap",
                opts.slots, opts.log_bytes
            )));
        }
        let sb = Superblock {
            algorithm: match opts.algorithm {
                Algorithm::Eager => 1,
                Algorithm::Lazy => 2,
            },
            slots: opts.slots,
            log_bytes: opts.log_bytes,
            slots_off: format::SLOTS_OFF,
            heap_off,
            heap_len: len - heap_off,
            nonce: opts.nonce.unwrap_or_else(|| {
                u64::from_le_bytes(
                    ferrite_pmem::header::new_uuid()[..8]
                        .try_into()
                        .expect("8 bytes"),
                )
            }),
        };
        // Superblock, root line and every slot header zeroed (IDLE, epoch 0).
        let sb_off = format::SB_OFF as usize;
        region.fill_nodrain(sb_off, 128, 0);
        for s in 0..usize::from(opts.slots) {
            region.fill_nodrain(sb.slot_off(s) as usize, format::SLOT_HDR as usize, 0);
        }
        region.fence();
        let heap_region = region
            .sub(heap_off as usize, (len - heap_off) as usize)
            .map_err(|e| PtmError::BadOption(e.to_string()))?;
        let mut ho = HeapOptions::default().lanes(opts.slots).lane_bytes(1024);
        ho.nonce = opts.nonce;
        drop(Heap::create(heap_region, ho)?);
        region.write(sb_off, &sb.encode());
        region.persist(sb_off, format::SB_BYTES);
        pool.set_root::<u8>(POff::new(format::SB_OFF))?;
        Ptm::open(pool, opts)
    }

    /// Opens the PTM in `pool`, finishing every transaction a crash
    /// interrupted: in-flight undo logs are rolled back, committed redo
    /// logs replayed ([`crate::format`], "Crash states").
    pub fn open(pool: &Pool, opts: &PtmOptions) -> Result<Ptm> {
        check_opts(opts)?;
        let t0 = Instant::now();
        let region = Region::whole(pool.medium().clone());
        if pool.root::<u8>().raw() != format::SB_OFF {
            return Err(PtmError::NotAPtm(
                "the pool's root does not point at a PTM superblock".into(),
            ));
        }
        let mut raw = [0u8; format::SB_BYTES];
        region.read(format::SB_OFF as usize, &mut raw);
        let sb = Superblock::decode(&raw, region.len() as u64)?;
        let heap_region = region
            .sub(sb.heap_off as usize, sb.heap_len as usize)
            .map_err(|e| PtmError::Corrupt(e.to_string()))?;
        let mut heap = Heap::open(heap_region.clone())?;
        let (meta_lo, data_lo, data_hi) = heap.bounds();
        let mut rec = PtmRecovery::default();
        let mut epochs = vec![0u64; usize::from(sb.slots)];
        let skip = opts.fault == Some(Fault::SkipRecovery);
        let mut ops_applied = false;
        // Undo first, then redo: two slots never log the same data word
        // (each held the word's orec), and allocator operations of
        // different transactions touch different bits, so the order among
        // slots does not matter; the heap is reopened afterwards so that
        // its volatile state sees what the logs changed.
        let bounds = Bounds {
            data: (data_lo, data_hi),
            meta_lo,
        };
        for (s, slot_epoch) in epochs.iter_mut().enumerate() {
            let so = sb.slot_off(s) as usize;
            let st = region.load_u64(so);
            let epoch = format::status_epoch(st);
            *slot_epoch = epoch;
            let area = so + format::SLOT_HDR as usize;
            match format::status_state(st) {
                format::IDLE => continue,
                format::NEEDS_UNDO => {
                    let mut entries = Vec::new();
                    let mut b = [0u8; format::UNDO_ENTRY];
                    let mut pos = 0;
                    while pos + format::UNDO_ENTRY <= sb.log_bytes as usize {
                        region.read(area + pos, &mut b);
                        match format::undo_decode(sb.nonce, s, &b, epoch) {
                            Some(t) => entries.push(t),
                            None => break,
                        }
                        pos += format::UNDO_ENTRY;
                    }
                    if !skip {
                        ops_applied |= apply_all(&region, &bounds, entries.iter().rev())?;
                    }
                    rec.entries += entries.len();
                    rec.undone += 1;
                }
                format::NEEDS_REDO => {
                    let count = region.read_u32(so + 8) as usize;
                    let crc = region.read_u32(so + 12);
                    let n = count.saturating_mul(format::REDO_ENTRY);
                    let targets = if n <= sb.log_bytes as usize {
                        redo_log(&region, &bounds, &sb, s, st, count, crc)?
                    } else {
                        None
                    };
                    match targets {
                        Some(targets) => {
                            if !skip {
                                ops_applied |= apply_all(&region, &bounds, targets.iter())?;
                            }
                            rec.entries += targets.len();
                            rec.replayed += 1;
                        }
                        None => rec.discarded += 1,
                    }
                }
                _ => {
                    return Err(PtmError::Corrupt(format!(
                        "slot {s}: unknown status {st:#x}"
                    )));
                }
            }
            // The slot's log is done with (applied, or never committed):
            // after a fence that makes the applied words durable, IDLE.
            region.fence();
            region.store_u64(so, format::status(epoch, format::IDLE));
            region.persist(so, 8);
        }
        if ops_applied {
            drop(heap);
            heap = Heap::open(heap_region)?;
        }
        rec.heap = heap.recovery().clone();
        rec.elapsed = t0.elapsed();
        let domain = pool.domain();
        let fences = matches!(domain, Domain::Adr | Domain::Msync | Domain::Volatile);
        Ok(Ptm {
            sb,
            opts: opts.clone(),
            orecs: Orecs::new(opts.orecs),
            slots: Mutex::new(epochs.into_iter().map(|g| (false, g)).collect()),
            active: (0..sb.slots).map(|_| AtomicU64::new(u64::MAX)).collect(),
            data: (data_lo, data_hi),
            fences,
            domain,
            recovery: rec,
            heap,
            region,
        })
    }

    /// Attaches the calling thread: a log slot and an allocator lane.
    /// Dropping the handle detaches it.
    pub fn thread(&self) -> Result<PtmThread<'_>> {
        PtmThread::attach(self)
    }

    /// The PTM's root word (0 after [`Ptm::create`]); read and write it in
    /// transactions like any other word.
    pub fn root(&self) -> POff<u64> {
        POff::new(format::ROOT_OFF)
    }

    /// The PTM's algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.opts.algorithm
    }

    /// The pool's durability domain.
    pub fn domain(&self) -> Domain {
        self.domain
    }

    /// The options it was created or opened with.
    pub fn options(&self) -> &PtmOptions {
        &self.opts
    }

    /// What opening the pool did.
    pub fn recovery(&self) -> &PtmRecovery {
        &self.recovery
    }

    /// The heap (inspection: its blocks, accounting).
    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    /// Reads a word outside any transaction, without synchronisation: for
    /// inspection after all threads are done (checks, tools).
    pub fn peek(&self, at: u64) -> Result<u64> {
        if !self.word_ok(at) {
            return Err(PtmError::OutOfBounds { off: at, len: 8 });
        }
        Ok(self.region.load_u64(at as usize))
    }

    /// True when `at` is a word transactions may access.
    #[inline]
    pub(crate) fn word_ok(&self, at: u64) -> bool {
        at.is_multiple_of(8) && ((at >= self.data.0 && at < self.data.1) || at == format::ROOT_OFF)
    }
}

struct Bounds {
    data: (u64, u64),
    meta_lo: u64,
}

/// The entries of slot `s`'s redo log if its checksum (over the entries
/// and the captured ranges' bytes) matches; `None` if the commit did not
/// become durable whole.
fn redo_log(
    region: &Region,
    b: &Bounds,
    sb: &Superblock,
    s: usize,
    status: u64,
    count: usize,
    crc: u32,
) -> Result<Option<Vec<Target>>> {
    let area = sb.slot_off(s) as usize + format::SLOT_HDR as usize;
    let bytes = region.read_vec(area, count * format::REDO_ENTRY);
    let mut c = format::redo_crc(sb.nonce, s, status, count as u32, &bytes);
    let mut targets = Vec::with_capacity(count);
    for e in bytes.chunks_exact(format::REDO_ENTRY) {
        let Some(t) = Target::decode(e) else {
            // Garbage a torn commit left: the checksum decides below.
            return Ok(None);
        };
        if let Target::Range { off, len } = t {
            let ok = off >= b.data.0 && off.checked_add(len).is_some_and(|e| e <= b.data.1);
            if !ok {
                return Ok(None);
            }
            c = crc32c::crc32c_append(c, &region.read_vec(off as usize, len as usize));
        }
        targets.push(t);
    }
    Ok((c == crc).then_some(targets))
}

/// Applies logged targets in recovery, in the order given, then flushes
/// them (no fence; no flush in flight across an operation's atomic
/// update). Returns true if one was an allocator operation.
fn apply_all<'a>(
    region: &Region,
    b: &Bounds,
    targets: impl Iterator<Item = &'a Target>,
) -> Result<bool> {
    let mut ops = false;
    let mut touched = Vec::new();
    for t in targets {
        ops |= apply(region, b, t)?;
        match *t {
            Target::Word { off, .. } => touched.push(off),
            Target::Op(op) => touched.push(op.off),
            Target::Range { .. } => {}
        }
    }
    for off in touched {
        region.flush(off as usize, 8);
    }
    Ok(ops)
}

/// Applies one logged target (a store or an atomic update, no flush).
/// Returns true for an allocator operation.
fn apply(region: &Region, b: &Bounds, t: &Target) -> Result<bool> {
    match *t {
        Target::Word { off, value } => {
            let ok = (off >= b.data.0 && off + 8 <= b.data.1) || off == format::ROOT_OFF;
            if !ok {
                return Err(PtmError::Corrupt(format!(
                    "log entry targets {off:#x}, outside the PTM's data"
                )));
            }
            region.store_u64(off as usize, value);
            Ok(false)
        }
        Target::Op(op) => {
            if !op_ok(b, &op) {
                return Err(PtmError::Corrupt(format!(
                    "log entry's allocator operation targets {:#x}, outside the heap's metadata",
                    op.off
                )));
            }
            op.apply(region);
            Ok(true)
        }
        Target::Range { .. } => Ok(false),
    }
}

fn op_ok(b: &Bounds, op: &MetaOp) -> bool {
    op.off.is_multiple_of(8) && op.off >= b.meta_lo && op.off + 8 <= b.data.0
}
