//! A CoW session and group commit: a write joins the gate's pending
//! group, and the first writer to find no leader commits every waiting
//! session's batch at once (one publish for the group); the others wait
//! for their answers.

use super::*;

/// One thread's session.
pub(super) struct CowSession<'e> {
    pub(super) eng: &'e CowEngine,
    pub(super) th: Box<dyn AllocThread + Send + 'e>,
    pub(super) buf: Vec<u8>,
    pub(super) _ticket: Ticket<'e>,
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
