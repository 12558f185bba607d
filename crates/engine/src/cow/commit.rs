//! The CoW commit: a leader applies its group's batches to a shadow of
//! the tree ([`CowEngine::try_commit`]), writes the new nodes, and switches
//! the root by one publish ([`CowEngine::publish_switch`]) whose links
//! ([`root_links`], [`sr_links`], [`gc_link`]) move the root line and
//! link a new switch record ([`write_sr`]); the old version's blocks are
//! freed once no reader holds it ([`CowEngine::release`]).

use super::*;

/// Reserves a block for a switch record and writes and flushes it (no
/// fence: the publish linking it orders it, and recovery checks its
/// checksum). `None` when it would exceed [`format::MAX_SR`] or the pool
/// has no room for it: the publish then links no record, and the next
/// recovery walks.
pub(super) fn write_sr(
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
pub(super) fn sr_links(line: u64, off: u64, crc: u32) -> [Link; 2] {
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
pub(super) fn gc_link(line: u64, v: u64) -> Link {
    Link {
        at: POff::new(line + 8 * format::W_GC),
        value: v,
    }
}

/// The four links of a root switch: the new root and its checksum, the
/// version it replaces and its checksum (the root line, see [`format`](mod@format)).
pub(super) fn root_links(line: u64, new: (u64, u32), prev: (u64, u32)) -> [Link; 4] {
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

impl CowEngine {
    /// Publishes every block no reader can reach (quiesce, a full pool).
    /// Each publish also replaces the switch record by one listing what
    /// stays pending (and frees the old one), so that recovery never frees
    /// a block twice.
    pub(super) fn release(&self, th: &mut dyn AllocThread, w: &mut Writer) -> Result<()> {
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
    pub(super) fn lead(&self, th: &mut dyn AllocThread, reqs: &[&[Op<'_>]]) -> Vec<Result<bool>> {
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
