//! Opening an InP store: finding the live log records, checking them
//! whole, replaying them, completing what the last transaction owed the
//! allocator, and retiring the records (module docs of [`super`] for the
//! log protocol). Each step is a function of its own; [`open`] runs them
//! in order. Nothing is written before every record was checked whole.

use super::*;
use std::collections::BTreeSet;

/// A live record: its sequence number and its bytes.
type Rec = (u64, Vec<u8>);

/// Where a recovery may read and write, and what the allocator holds.
struct Bounds<'a> {
    p: &'a Region,
    /// The fixed area's offset.
    a: u64,
    /// The heap's range.
    lo: u64,
    hi: u64,
}

impl Bounds<'_> {
    /// `off..off+len` inside the heap or the fixed area's header, and
    /// mapped.
    fn in_bounds(&self, off: u64, len: usize) -> bool {
        let end = off.checked_add(len as u64);
        ((off >= self.lo && end.is_some_and(|e| e <= self.hi))
            || (off >= self.a && end.is_some_and(|e| e <= self.a + HDR_BYTES)))
            && self.p.check(off as usize, len).is_ok()
    }

    /// `off..off+len` inside the fixed area's header.
    fn in_header(&self, off: u64, len: usize) -> bool {
        off >= self.a
            && off
                .checked_add(len as u64)
                .is_some_and(|e| e <= self.a + HDR_BYTES)
    }
}

/// Calls `f` on every item of every record; a malformed record is
/// [`EngineError::Corrupt`] naming it.
fn each_item(recs: &[Rec], mut f: impl FnMut(Item<'_>) -> bool) -> Result<()> {
    for (seq, rec) in recs {
        log::for_each_item(rec, |it| {
            if f(it) {
                Ok(())
            } else {
                Err("item outside the heap, or of the other protocol".into())
            }
        })
        .map_err(|e| corrupt(format!("log record {seq}: {e}")))?;
    }
    Ok(())
}

/// The valid records of both log areas newer than the retired mark, by
/// sequence number.
fn read_records(b: &Bounds<'_>, cap: usize, seed: u32, retired: u64) -> Vec<Rec> {
    let mut recs = Vec::new();
    for area in 0..2u64 {
        let at = (b.a + HDR_BYTES) as usize + area as usize * cap;
        let mut h = [0u8; REC_HDR];
        b.p.read(at, &mut h);
        if let Some((len, seq)) = log::header(&h, cap) {
            let rec = b.p.read_vec(at, len);
            if seq > retired && seq % 2 == area && log::validate(&rec, seed) {
                recs.push((seq, rec));
            }
        }
    }
    recs.sort_by_key(|r| r.0);
    recs
}

/// Drops the records that need no replay: those made durable before the
/// last intent (intent protocol: the intent of transaction i is written
/// only after record i-1's commit fence completed, which made the
/// in-place stores of every record up to i-2 durable — and they must not
/// be replayed: the frees owed by record i-1 may have been published with
/// transaction i's blocks, and record i-2 may have written into them),
/// and a stale older record (only consecutive records can both be live).
fn skip_superseded(recs: &mut Vec<Rec>, intent: Option<u64>, detail: &mut String) {
    if let Some(iseq) = intent {
        let before = recs.len();
        recs.retain(|r| r.0 + 2 > iseq);
        if recs.len() != before {
            detail.push_str("record made durable before the last intent skipped; ");
        }
    }
    if recs.len() == 2 && recs[0].0 + 1 != recs[1].0 {
        recs.remove(0);
        detail.push_str("stale record ignored; ");
    }
}

/// Replaces each pointer record by the record in its overflow block and
/// returns those blocks. One that is not there whole never committed if
/// it is the newest; if it is the older of two, the newer committed after
/// its writes were durable, so it needs no replay (its block may be
/// reused already).
fn load_overflows(b: &Bounds<'_>, recs: &mut Vec<Rec>, seed: u32, detail: &mut String) -> Vec<u64> {
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < recs.len() {
        let Some((off, len, crc)) = log::overflow_of(&recs[i].1) else {
            i += 1;
            continue;
        };
        let seq = recs[i].0;
        let body = (off >= b.lo && b.in_bounds(off, len)).then(|| b.p.read_vec(off as usize, len));
        let whole = body.filter(|r| {
            crc32c::crc32c(r) == crc
                && log::validate(r, seed)
                && r.get(8..16)
                    .map(|x| u64::from_le_bytes(x.try_into().expect("8 bytes")))
                    == Some(seq)
        });
        match whole {
            Some(r) => {
                recs[i].1 = r;
                blocks.push(off);
                i += 1;
            }
            None => {
                detail.push_str(if i + 1 == recs.len() {
                    "newest record discarded (its overflow block did not survive); "
                } else {
                    "older record skipped (superseded; its overflow block was reused); "
                });
                recs.remove(i);
            }
        }
    }
    blocks
}

/// Blocks an earlier, interrupted run of this recovery may have freed
/// already (the frees records owe, an uncommitted transaction's blocks):
/// an older record's writes into them are then skipped — they are dead in
/// the committed state either way.
fn dead_blocks(recs: &[Rec], intent: Option<&(u64, Vec<u64>)>) -> Result<BTreeSet<u64>> {
    let mut dead = BTreeSet::new();
    each_item(recs, |it| {
        if let Item::Free { off } = it {
            dead.insert(off);
        }
        true
    })?;
    if let Some((_, blocks)) = intent {
        dead.extend(blocks.iter().copied());
    }
    Ok(dead)
}

/// Drops the newest record when the blocks it wrote directly did not
/// survive its fence (then it never committed; the older one's did).
fn drop_unfenced_newest(p: &Region, recs: &mut Vec<Rec>, detail: &mut String) -> Result<()> {
    let Some(last) = recs.last() else {
        return Ok(());
    };
    let mut whole = true;
    each_item(std::slice::from_ref(last), |it| {
        if let Item::Fresh { off, len, crc } = it
            && crc32c::crc32c(&p.read_vec(off as usize, len)) != crc
        {
            whole = false;
        }
        true
    })?;
    if !whole {
        recs.pop();
        detail.push_str("newest record discarded (its new blocks did not survive); ");
    }
    Ok(())
}

/// Applies every record's writes and allocator operations (flushed, not
/// yet fenced); true when an allocator word changed.
fn replay(p: &Region, recs: &[Rec], in_block: &dyn Fn(u64, u64) -> bool) -> Result<bool> {
    let mut changed_meta = false;
    each_item(recs, |it| {
        match it {
            Item::Write { off, data } => {
                p.write(off as usize, data);
                p.flush(off as usize, data.len());
            }
            Item::WriteIn { base, off, data } => {
                if in_block(base, off - base + data.len() as u64) {
                    p.write(off as usize, data);
                    p.flush(off as usize, data.len());
                }
            }
            Item::Meta(m) => {
                if !m.is_applied(p) {
                    changed_meta = true;
                }
                m.apply(p);
                p.flush(m.off as usize, 8);
            }
            Item::Fresh { .. } | Item::Free { .. } | Item::Overflow { .. } => {}
        }
        true
    })?;
    Ok(changed_meta)
}

/// Intent protocol: completes the frees the newest committed record owes
/// and frees the blocks of a transaction that published them but did not
/// commit (no committed record links them). Both only while the allocator
/// holds them: a free already done is not done twice (nothing allocates
/// between a published free and this recovery without writing a new
/// intent first, which would have replaced that intent). Returns how many
/// it freed.
fn free_owed(
    ctx: &EngineCtx,
    recs: &[Rec],
    intent: Option<&(u64, Vec<u64>)>,
    retired: u64,
    allocated: &HashMap<u64, u64>,
    detail: &mut String,
) -> Result<usize> {
    let committed = recs.last().map_or(retired, |r| r.0);
    let mut owed = BTreeSet::new();
    each_item(recs.last().map(std::slice::from_ref).unwrap_or(&[]), |it| {
        if let Item::Free { off } = it {
            owed.insert(off);
        }
        true
    })?;
    if let Some((iseq, blocks)) = intent
        && *iseq > committed
    {
        owed.extend(blocks.iter().copied());
        detail.push_str("uncommitted transaction's blocks freed; ");
    }
    let frees: Vec<POff<u8>> = owed
        .into_iter()
        .filter(|o| allocated.contains_key(o))
        .map(POff::new)
        .collect();
    if !frees.is_empty() {
        let mut th = ctx.alloc.thread()?;
        let max = th.max_publish_ops().max(1);
        for chunk in frees.chunks(max) {
            th.publish(&Publish {
                allocs: &[],
                frees: chunk,
                links: &[],
            })?;
        }
    }
    Ok(frees.len())
}

/// After a replay: fences it, reopens the allocator when the replay
/// changed its words, frees the overflow blocks that die with their
/// records, clears the intent and retires every record up to `seq`.
fn retire(
    ctx: &mut EngineCtx,
    b: &Bounds<'_>,
    (seq, changed_meta): (u64, bool),
    ovf_blocks: &[u64],
    intent_at: Option<usize>,
    detail: &mut String,
) -> Result<()> {
    let p = b.p;
    p.fence();
    if changed_meta {
        // The heap was opened on the image as the crash left it; it must
        // see the replayed allocations and frees.
        let region = p
            .sub(b.lo as usize, (b.hi - b.lo) as usize)
            .map_err(|e| corrupt(e.to_string()))?;
        let alloc: Arc<dyn PAllocator> = match ctx.sb.allocator {
            AllocKind::Ferrite => Arc::new(Measured(Arc::new(Heap::open(region)?))),
            AllocKind::Lock => Arc::new(Measured(Arc::new(LockHeap::open(region)?))),
            // prepare() is Ferrite's: an external allocator commits
            // through its own publish, so no record holds its operations.
            AllocKind::Pmdk => {
                return Err(corrupt(
                    "a log record holds allocator operations, but the store is on the pmdk allocator",
                ));
            }
        };
        ctx.alloc = alloc;
        detail.push_str("allocator reopened after replay; ");
    }
    // The blocks of records too large for their area die with them: freed
    // (those still allocated) before the records retire, so a crash in
    // between finds them to free again, and none leaks.
    if !ovf_blocks.is_empty() {
        let mut live = Vec::new();
        ctx.alloc.for_each_allocated(&mut |off, _| {
            if ovf_blocks.contains(&off.raw()) {
                live.push(off);
            }
        });
        if !live.is_empty() {
            ctx.alloc.thread()?.publish(&Publish {
                allocs: &[],
                frees: &live,
                links: &[],
            })?;
            detail.push_str(&format!("{} overflow blocks freed; ", live.len()));
        }
    }
    if let Some(at) = intent_at {
        // Resolved: a later recovery must not act on it again.
        p.store_u64_persist(at, 0);
    }
    // Retire them: replaying them again after later writes would undo
    // those, and a discarded one must never validate later.
    p.store_u64_persist((b.a + RETIRED_AT) as usize, seq);
    Ok(())
}

/// Opens an InP store: recovers its log (the steps above, in order),
/// then counts its keys.
pub(crate) fn open(
    mut ctx: EngineCtx,
    opts: &StoreOptions,
) -> Result<(Box<dyn Engine>, EngineRecovery)> {
    let p = ctx.pool.clone();
    let a = ctx.area_off;
    let (intent_len, cap) = fixed_layout(&ctx)?;
    let intent_mode = intent_len != 0;
    let (lo, hi) = heap_bounds(&ctx);
    let b = Bounds { p: &p, a, lo, hi };
    let seed = log::seed(ctx.sb.nonce);
    let retired = p.load_u64((a + RETIRED_AT) as usize);
    let mut recs = read_records(&b, cap, seed, retired);
    let mut detail = String::new();
    let intent_at = (a + HDR_BYTES) as usize + 2 * cap;
    let intent = if intent_mode {
        log::read_intent(&p, intent_at, intent_len as usize, seed).filter(|i| i.0 > retired)
    } else {
        None
    };
    skip_superseded(&mut recs, intent.as_ref().map(|i| i.0), &mut detail);
    let ovf_blocks = load_overflows(&b, &mut recs, seed, &mut detail);
    // The allocator's word on a block: `base..base + need` lies in a block
    // it holds allocated (intent protocol: there is no heap range). From
    // one walk of its blocks, not `usable_size`: an allocator need not
    // tell a freed block from a live one by its offset alone (the lock
    // heap reads a stale header inside a coalesced free span as live),
    // and recovery must never free a block twice.
    let mut allocated: HashMap<u64, u64> = HashMap::new();
    if intent_mode && (!recs.is_empty() || intent.is_some()) {
        ctx.alloc.for_each_allocated(&mut |off, n| {
            allocated.insert(off.raw(), n as u64);
        });
    }
    let in_block = |base: u64, need: u64| allocated.get(&base).is_some_and(|&n| n >= need);
    let dead = if intent_mode {
        dead_blocks(&recs, intent.as_ref())?
    } else {
        BTreeSet::new()
    };
    let live_or_dead = |base: u64, need: u64| {
        in_block(base, need)
            || (dead.contains(&base)
                && b.in_bounds(base, usize::try_from(need).unwrap_or(usize::MAX)))
    };
    // Check every record whole before applying any of it.
    each_item(&recs, |it| match it {
        Item::Write { off, data } if intent_mode => b.in_header(off, data.len()),
        Item::Write { off, data } => b.in_bounds(off, data.len()),
        Item::Meta(m) => !intent_mode && m.off.is_multiple_of(8) && b.in_bounds(m.off, 8),
        Item::Fresh { off, len, .. } if intent_mode => live_or_dead(off, len as u64),
        Item::Fresh { off, len, .. } => off >= lo && b.in_bounds(off, len),
        Item::WriteIn { base, off, data } => {
            intent_mode && live_or_dead(base, off - base + data.len() as u64)
        }
        Item::Free { .. } => intent_mode,
        // Pointer records were replaced by their records above.
        Item::Overflow { .. } => false,
    })?;
    // Every record found is dead after this recovery, replayed or not.
    let seq = recs.last().map_or(retired, |r| r.0);
    drop_unfenced_newest(&p, &mut recs, &mut detail)?;
    let changed_meta = replay(&p, &recs, &in_block)?;
    let freed = if intent_mode {
        free_owed(
            &ctx,
            &recs,
            intent.as_ref(),
            retired,
            &allocated,
            &mut detail,
        )?
    } else {
        0
    };
    if seq != retired || intent.is_some() {
        let resolved = intent.is_some().then_some(intent_at);
        retire(
            &mut ctx,
            &b,
            (seq, changed_meta),
            &ovf_blocks,
            resolved,
            &mut detail,
        )?;
    }
    let replayed = recs.len();
    let mut rec = EngineRecovery {
        replayed,
        ..EngineRecovery::default()
    };
    let mut eng = Inp::new(ctx, opts, seq, 0, rec.clone());
    let (keys, damaged) = eng.count_keys()?;
    eng.keys.store(keys, Ordering::Relaxed);
    rec.keys = keys;
    if damaged > 0 {
        detail.push_str(&format!(
            "{damaged} damaged nodes not counted (their keys read as errors; `ferrite pool check --deep` lists them); "
        ));
    }
    rec.detail =
        format!("{detail}{replayed} log records replayed, {freed} blocks freed, {keys} keys");
    eng.recovery = rec.clone();
    Ok((Box::new(eng), rec))
}
