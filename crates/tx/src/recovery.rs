//! Recovery: what opening a transactional pool does to interrupted
//! transactions, whatever strategy wrote them.
//!
//! 1. **Scan** every slot: a transaction is *interrupted* when an area's
//!    first record is valid and its epoch is above the slot's `done`. A
//!    slot has at most two (the newest finished one, whose completion may
//!    not be durable, and the one after it).
//! 2. **Undo** transactions are rolled back: their UNDO items are applied
//!    newest first (old bytes, inverse allocator operations).
//! 3. **Clobber** transactions have their clobbered inputs restored: CLOB
//!    items newest first, transactions in reverse of their order.
//! 4. **Redo** records are replayed in ticket order (their REDO items) —
//!    unless the bytes they link to in freshly allocated blocks do not
//!    match their checksums: then the record's fence never completed and
//!    it is discarded.
//! 5. One fence.
//! 6. The heap is opened: its bitmaps are now those of a state in which
//!    no interrupted transaction allocated or freed anything (undo, clobber)
//!    or every committed one did (redo). When a REDO record with allocator
//!    operations is interrupted, the heap is also opened once *before*
//!    step 2 (and dropped): it must judge its own lane records on the
//!    image as the crash left it. A transaction's `prepare` flushed the
//!    pending markers of other lanes' records, and its commit fence may
//!    have made the REDO record durable without them; replaying a free
//!    first would make such a lane's complete allocation look unapplied,
//!    and the heap would re-apply it ([`ferrite_alloc::AllocThread::prepare`];
//!    `tests/mixed_heap.rs` shows the leak). Rollbacks need no such order:
//!    their operations were applied after that fence.
//! 7. **Re-execution**: each clobber transaction's function runs again
//!    from its v_log, in order — finished ones by the ticket of their END
//!    record, then unfinished ones by slot — to its END record.
//! 8. **Completion**, of all of them at once: a GROUP record naming every
//!    transaction handled, fence, their `done` words, fence (a valid GROUP
//!    record is rolled forward before step 1, so a crash between the two
//!    fences cannot complete part of a group). Then the blocks the
//!    re-executions freed go back to the allocator.
//!
//! # Order across slots
//!
//! Under strict two-phase locking a transaction that saw another's writes
//! started after that one released its locks, i.e. after it finished
//! executing and wrote its END record (with a global ticket). So two
//! interrupted clobber transactions that depend on each other are both
//! finished with tickets in dependency order, or the later one is still
//! unfinished; unfinished ones (all of whose locks were still held)
//! depend on nothing else unfinished. Restoring in reverse and
//! re-executing forward in that order rebuilds every input exactly: a
//! later transaction's logged inputs (the earlier one's first outputs) are
//! overwritten by the earlier one's restore before anything reads them.
//! Redo records are ordered by their tickets the same way.
//!
//! # Idempotence
//!
//! Steps 2–4 write logged values, so running them again after a crash
//! during recovery gives the same bytes. The re-executions of one recovery
//! form a group: none is marked done before all have run. A crash during
//! them leaves every v_log and the crashed runs' records in place, plus
//! what each re-execution appended (inverses of its allocations, inputs
//! past the point the crashed run reached); the next recovery restores
//! all of them — newest first, so a block one re-execution allocated after
//! another's restore freed it ends up free, and a later transaction's
//! logged inputs (an earlier one's first outputs) are overwritten by the
//! earlier one's restore — and re-executes the group again. Blocks the
//! group frees stay unavailable until it is done, for the same reason
//! clobber holds them back in normal operation: a restore un-frees them
//! and needs their content. Marking each
//! re-execution done on its own would be wrong on both counts: a nested
//! crash would then re-apply the stale allocation inverses of the
//! remaining ones to blocks a completed re-execution now owns, and
//! restore inputs that name blocks it no longer has. A re-execution logs an input again only past the
//! crashed run's log; where both logged, it compares them, and a
//! difference — the function is not deterministic — is reported in
//! [`TxRecovery::nondeterministic`].

use crate::args::Inputs;
use crate::error::{Result, TxError};
use crate::format::Layout;
use crate::format::{self, Item, Kind, Record};
use crate::options::Strategy;
use crate::tx::{Replay, TxPool, TxThread};
use ferrite_pmem::Region;
// The report type lives in its own leaf module so that the pool (which
// keeps the report of its open) needs nothing of recovery itself.
pub use crate::report::TxRecovery;

/// One interrupted transaction.
#[derive(Debug)]
pub(crate) struct Candidate {
    pub slot: u16,
    pub epoch: u64,
    pub kind: Kind,
    pub records: Vec<Record>,
    /// Area offset past the last valid record (where a re-execution appends).
    pub end: usize,
    /// REDO: its ticket; clobber: its END ticket if it finished.
    pub ticket: Option<u64>,
}

impl Candidate {
    fn items(&self) -> Result<Vec<Item>> {
        let mut v = Vec::new();
        for r in &self.records {
            match r.kind {
                Kind::Undo | Kind::Redo | Kind::Clob => {
                    v.extend(format::items(&r.payload, r.items).ok_or_else(|| {
                        TxError::Corrupt(format!(
                            "slot {} epoch {}: malformed {:?} record",
                            self.slot, self.epoch, r.kind
                        ))
                    })?);
                }
                Kind::Vlog | Kind::End | Kind::Group => {}
            }
        }
        Ok(v)
    }

    /// Re-execution order of clobber transactions.
    fn order(&self) -> (u64, u16, u64) {
        (self.ticket.unwrap_or(u64::MAX), self.slot, self.epoch)
    }
}

/// Everything the scan found.
#[derive(Debug, Default)]
pub(crate) struct Found {
    pub cands: Vec<Candidate>,
    /// Per slot: the highest epoch seen (`done` or an interrupted one).
    pub max_epoch: Vec<u64>,
    pub max_ticket: u64,
}

impl Found {
    /// The first epoch a slot may use after recovery: two past the highest
    /// known one. The transaction after the highest known one may have
    /// written records (a CLOB record can survive a crash that tore its
    /// v_log, which makes the transaction invisible); reusing its epoch
    /// would let a later scan attach those records to a new v_log.
    pub fn next_epoch(&self, slot: u16) -> u64 {
        self.max_epoch[slot as usize] + 2
    }

    /// [`crate::fault::Fault::FirstSlotOnly`]: forgets every interrupted
    /// transaction outside the lowest slot that has one.
    pub fn keep_first_slot_only(&mut self) {
        if let Some(first) = self.cands.iter().map(|c| c.slot).min() {
            self.cands.retain(|c| c.slot == first);
        }
    }

    fn by_kind(&self, k: Kind) -> impl Iterator<Item = &Candidate> {
        self.cands.iter().filter(move |c| c.kind == k)
    }

    /// True when some interrupted REDO record carries allocator operations
    /// (whether it replays is decided later, by its fresh data).
    pub(crate) fn redo_has_ops(&self) -> Result<bool> {
        for c in self.by_kind(Kind::Redo) {
            if c.items()?.iter().any(|it| matches!(it, Item::Op(_))) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn clobber_order(&self) -> Vec<&Candidate> {
        let mut v: Vec<&Candidate> = self.by_kind(Kind::Vlog).collect();
        v.sort_by_key(|c| c.order());
        v
    }
}

/// Step 1: finds the interrupted transactions of every slot.
pub(crate) fn scan(region: &Region, layout: &Layout) -> Result<Found> {
    let sb = &layout.sb;
    let mut found = Found {
        max_epoch: vec![0; sb.slots as usize],
        ..Found::default()
    };
    for slot in 0..sb.slots {
        let done = region.load_u64(layout.slot_off(slot) as usize);
        found.max_epoch[slot as usize] = done;
        for area in 0..2u64 {
            let a = region.sub(layout.area_off(slot, area) as usize, sb.area_bytes as usize)?;
            let (records, end) = format::scan_area(&a, slot, sb.nonce, done);
            let Some(first) = records.first() else {
                continue;
            };
            let (epoch, kind) = (first.epoch, first.kind);
            let corrupt = |why: &str| {
                Err(TxError::Corrupt(format!(
                    "slot {slot} area {area} epoch {epoch}: {why}"
                )))
            };
            if epoch % 2 != area {
                return corrupt("transaction logged in the wrong area");
            }
            let ok = match kind {
                Kind::Undo => records.iter().all(|r| r.kind == Kind::Undo),
                Kind::Redo => records.len() == 1,
                Kind::Vlog => records[1..]
                    .iter()
                    .all(|r| matches!(r.kind, Kind::Clob | Kind::End)),
                Kind::Clob | Kind::End | Kind::Group => false,
            };
            if !ok {
                return corrupt("unexpected record sequence");
            }
            let ticket = match kind {
                Kind::Redo => Some(first.aux),
                Kind::Vlog => records
                    .iter()
                    .rev()
                    .find(|r| r.kind == Kind::End)
                    .map(|r| r.aux),
                _ => None,
            };
            if let Some(t) = ticket {
                found.max_ticket = found.max_ticket.max(t);
            }
            let m = &mut found.max_epoch[slot as usize];
            *m = (*m).max(epoch);
            found.cands.push(Candidate {
                slot,
                epoch,
                kind,
                records,
                end,
                ticket,
            });
        }
    }
    Ok(found)
}

/// Applies one item, validating its target first.
fn apply(
    region: &Region,
    layout: &Layout,
    it: &Item,
    flush: &mut Vec<(usize, usize)>,
) -> Result<()> {
    match it {
        Item::Bytes { off, data } => {
            if !layout.may_touch(*off, data.len() as u64) {
                return Err(TxError::Corrupt(format!(
                    "logged bytes at {off:#x} (+{}) outside the data area",
                    data.len()
                )));
            }
            region.write(*off as usize, data);
            flush.push((*off as usize, data.len()));
        }
        Item::Check { .. } => {}
        Item::Op(op) => {
            if !layout.op_target_ok(op.off) {
                return Err(TxError::Corrupt(format!(
                    "logged allocator operation on {:#x} outside the heap's metadata",
                    op.off
                )));
            }
            op.apply(region);
            flush.push((op.off as usize, 8));
        }
    }
    Ok(())
}

/// True when every fresh-data check of a REDO record matches.
fn fresh_data_matches(region: &Region, layout: &Layout, items: &[Item]) -> bool {
    items.iter().all(|it| match *it {
        Item::Check { off, len, crc } => {
            layout.may_touch(off, u64::from(len))
                && crc32c::crc32c(&region.read_vec(off as usize, len as usize)) == crc
        }
        _ => true,
    })
}

/// Steps 2–5: rolls back, restores and replays on the raw image.
pub(crate) fn restore(region: &Region, layout: &Layout, found: &Found) -> Result<TxRecovery> {
    let mut rep = TxRecovery::default();
    let mut flush = Vec::new();
    for c in found.by_kind(Kind::Undo) {
        for it in c.items()?.iter().rev() {
            apply(region, layout, it, &mut flush)?;
            rep.items += 1;
        }
        rep.rolled_back += 1;
    }
    for c in found.clobber_order().iter().rev() {
        for it in c.items()?.iter().rev() {
            apply(region, layout, it, &mut flush)?;
            rep.items += 1;
        }
    }
    let mut redo: Vec<&Candidate> = found.by_kind(Kind::Redo).collect();
    redo.sort_by_key(|c| (c.ticket, c.slot, c.epoch));
    for c in &redo {
        let items = c.items()?;
        if !fresh_data_matches(region, layout, &items) {
            // The record survived without the bytes it links to: its
            // fence never completed, so nothing of it was applied.
            rep.discarded += 1;
            continue;
        }
        for it in &items {
            apply(region, layout, it, &mut flush)?;
            rep.items += 1;
        }
        rep.replayed += 1;
    }
    if !flush.is_empty() {
        for &(a, n) in &flush {
            region.flush(a, n);
        }
        region.fence();
    }
    Ok(rep)
}

/// Raises each slot's `done` to the epochs a valid GROUP record lists:
/// finishes the completion of the last recovery's group if a crash
/// interrupted it.
pub(crate) fn roll_group_forward(region: &Region, layout: &Layout) -> Result<()> {
    let area = region.sub(layout.group_off() as usize, format::GROUP_BYTES)?;
    let seed = format::crc_seed(layout.sb.nonce);
    let Some(r) = format::read_record(&area, 0, format::GROUP_SLOT, seed) else {
        return Ok(());
    };
    if r.kind != Kind::Group || r.payload.len() != 16 * r.items as usize {
        return Ok(());
    }
    let mut marked = false;
    for p in r.payload.chunks(16) {
        let slot = u64::from_le_bytes(p[0..8].try_into().expect("8 bytes"));
        let epoch = u64::from_le_bytes(p[8..16].try_into().expect("8 bytes"));
        if slot >= u64::from(layout.sb.slots) {
            return Err(TxError::Corrupt(format!("group record names slot {slot}")));
        }
        let at = layout.slot_off(slot as u16) as usize;
        if region.load_u64(at) < epoch {
            region.store_u64(at, epoch);
            region.flush(at, 8);
            marked = true;
        }
    }
    if marked {
        region.fence();
    }
    Ok(())
}

/// Step 8: completes every transaction recovery handled, atomically: a
/// GROUP record naming them all, fence, then their `done` words, fence.
/// Idempotent (a second call finds nothing left to mark).
pub(crate) fn complete(txp: &TxPool, found: &Found) -> Result<()> {
    let region = &txp.region;
    let layout = &txp.layout;
    let todo: Vec<&Candidate> = found
        .cands
        .iter()
        .filter(|c| region.load_u64(layout.slot_off(c.slot) as usize) < c.epoch)
        .collect();
    if todo.is_empty() {
        return Ok(());
    }
    let mut payload = Vec::with_capacity(16 * todo.len());
    for c in &todo {
        payload.extend_from_slice(&u64::from(c.slot).to_le_bytes());
        payload.extend_from_slice(&c.epoch.to_le_bytes());
    }
    let mut rec = Vec::new();
    format::encode_record(
        &mut rec,
        txp.seed,
        &format::RecHead {
            kind: Kind::Group,
            slot: format::GROUP_SLOT,
            epoch: 0,
            aux: 0,
            items: todo.len() as u32,
        },
        &payload,
    );
    if rec.len() > format::GROUP_BYTES {
        return Err(TxError::Corrupt("too many interrupted transactions".into()));
    }
    let at = layout.group_off() as usize;
    region.write(at, &rec);
    region.persist(at, rec.len());
    for c in &todo {
        let d = layout.slot_off(c.slot) as usize;
        if region.load_u64(d) < c.epoch {
            region.store_u64(d, c.epoch);
            region.flush(d, 8);
        }
    }
    region.fence();
    Ok(())
}

/// Step 7: re-executes the interrupted clobber transactions, in order.
pub(crate) fn reexecute(txp: &TxPool, found: &Found, rep: &mut TxRecovery) -> Result<()> {
    // Blocks the group frees: given back only once the group is done, so
    // that a later re-execution cannot reuse one whose old content a
    // nested crash would need again (the restore un-frees it).
    let mut freed = Vec::new();
    let mut earlier = crate::interval::Ranges::default();
    for c in found.clobber_order() {
        let vlog = &c.records[0];
        let id = vlog.aux as u32;
        let f = txp
            .registry
            .get(id)
            .ok_or(TxError::UnknownFunction { id })?;
        let bufs = format::buffers(&vlog.payload, vlog.items)
            .filter(|b| !b.is_empty())
            .ok_or_else(|| {
                TxError::Corrupt(format!(
                    "slot {} epoch {}: malformed v_log",
                    c.slot, c.epoch
                ))
            })?;
        let rest: Vec<&[u8]> = bufs[1..].iter().map(Vec::as_slice).collect();
        let inputs = Inputs::new(&bufs[0], &rest);
        // The crashed run's own clobbered inputs (CLOB records with aux 0;
        // those of earlier re-executions log every write and say aux 1).
        let mut expected = Vec::new();
        for r in c
            .records
            .iter()
            .filter(|r| r.kind == Kind::Clob && r.aux == 0)
        {
            for it in format::items(&r.payload, r.items).unwrap_or_default() {
                if let Item::Bytes { off, data } = it {
                    expected.push((off, data));
                }
            }
        }
        let mut th = TxThread::attach(txp, Some(c.slot), Strategy::Clobber)?;
        let (diverged, wrote) = th
            .reexecute(
                f,
                inputs,
                c.epoch,
                c.end,
                Replay {
                    expected,
                    earlier: std::mem::take(&mut earlier),
                    ..Replay::default()
                },
            )
            .map_err(|e| TxError::Reexecution {
                id,
                source: Box::new(e),
            })?;
        earlier = wrote;
        freed.extend(th.take_deferred());
        drop(th);
        if let Some(d) = diverged {
            rep.nondeterministic
                .push(format!("function {id} ({}): {d}", f.name));
        }
        rep.reexecuted += 1;
        rep.reexecuted_inputs.push((id, bufs.clone()));
    }
    // The group is done: now, and only now, its logs are dead, and the
    // blocks it freed may be reused.
    complete(txp, found)?;
    if !freed.is_empty() {
        let mut th = TxThread::attach(txp, None, Strategy::Clobber)?;
        th.release_frees(&freed);
    }
    Ok(())
}
