//! Opening a CoW store (module docs of [`super`]): the fast path
//! ([`open_fast`]) verifies the switch record, the blocks the last switch
//! wrote and the root, and frees what was pending; otherwise the slow
//! path walks the newest version (or the previous one, when the switch
//! record reached the media before all of its nodes did), compares the
//! blocks it reaches with the allocator's, and frees the garbage of earlier
//! or crashed switches.

use super::*;

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

    let orphans = unreferenced(&ctx, &found.blocks)?;
    let mut th = ctx.alloc.thread()?;
    if !orphans.is_empty() || reverted {
        free_orphans(
            &mut *th,
            line as u64,
            &orphans,
            reverted.then_some((root, root_crc)),
        )?;
    }
    // Every allocated block is now referenced: a fresh switch record with
    // nothing pending, and no garbage collection needed, so that the next
    // recovery takes the fast path. (An empty store that never switched
    // has nothing to record: its walk costs nothing, and opening it
    // writes nothing.)
    let untouched = orphans.is_empty() && !reverted && gc == 0 && sr == 0 && root == 0;
    let sr_now = if untouched {
        (0, 0)
    } else {
        fresh_switch_record(&ctx, &mut *th, line as u64, found.keys)?
    };
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

/// The allocated blocks the walked tree does not reference (garbage of an
/// earlier switch, or of a switch that crashed), sorted; an error when a
/// block the tree references (`blocks`: offset, bytes it needs) is not
/// allocated or is too small.
fn unreferenced(ctx: &EngineCtx, blocks: &[(u64, u64)]) -> Result<Vec<POff<u8>>> {
    let mut allocated: HashMap<u64, usize> = HashMap::new();
    ctx.alloc.for_each_allocated(&mut |off, size| {
        allocated.insert(off.raw(), size);
    });
    for &(off, need) in blocks {
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
    Ok(orphans)
}

/// Frees `orphans` in publishes of at most the allocator's size; the
/// first also clears the switch record and, when the newest version was
/// torn, switches the root line back to `reverted_to` (root, checksum).
fn free_orphans(
    th: &mut dyn AllocThread,
    line: u64,
    orphans: &[POff<u8>],
    reverted_to: Option<(u64, u32)>,
) -> Result<()> {
    let max = th.max_publish_ops().max(8);
    // The switch back goes with the first frees, atomically: the
    // newest version's blocks must not be free while the root line
    // may still point to them. So does clearing the switch record:
    // the blocks it lists as pending may be among the frees, and a
    // crash after them must not let the next recovery free them again.
    let mut first_links = sr_links(line, 0, 0).to_vec();
    if let Some(r) = reverted_to {
        first_links.extend(root_links(line, r, r));
    }
    let mut first = true;
    let mut rest = orphans;
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
    Ok(())
}

/// Writes a switch record with nothing pending for a store of `keys`
/// keys and publishes it with the garbage-collection word cleared;
/// returns the record's (offset, length), `(0, 0)` when none was needed.
fn fresh_switch_record(
    ctx: &EngineCtx,
    th: &mut dyn AllocThread,
    line: u64,
    keys: u64,
) -> Result<(u64, u64)> {
    let new_sr = write_sr(&ctx.pool, ctx.sb.nonce, th, keys, &[], &[]);
    let mut allocs = Vec::new();
    let mut links = vec![gc_link(line, 0)];
    let mut sr_now = (0, 0);
    match new_sr {
        Some((r, c, len)) => {
            sr_now = (r.off().raw(), len as u64);
            links.extend(sr_links(line, r.off().raw(), c));
            allocs.push(r);
        }
        None => links.extend(sr_links(line, 0, 0)),
    }
    if let Err(e) = th.publish(&Publish {
        allocs: &allocs,
        frees: &[],
        links: &links,
    }) {
        cancel_all(th, allocs);
        return Err(e.into());
    }
    Ok(sr_now)
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
