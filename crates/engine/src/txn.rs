//! Transactions over a [`Store`]: [`WriteTxn`] (reads its own writes,
//! commits them as one atomic batch, serialized against every other
//! write) and [`Snapshot`] (a consistent read-only view).
//!
//! A write transaction keeps its writes in DRAM, in key order, until
//! [`WriteTxn::commit`] hands them to the engine as one batch: the engine's
//! batch is what makes them atomic and durable (all or nothing after a
//! crash: `ferrite check engine-*`). Reads merge those writes over the
//! store; no other write can land meanwhile (the store's writers' gate,
//! held exclusively), so what the transaction read is still true when it
//! commits: serializable, as LMDB's and redb's single writer.
//!
//! The batch has any size the heap has room for (an InP record larger
//! than its log area is stored in a heap block of its own; an LSM record
//! may reach 4 GiB): a 5 M-put transaction commits whole on every engine
//! (`examples/big_batch.rs`). Only InP's intent protocol (stores on PMDK's
//! allocator) still bounds it by its log area
//! ([`EngineError::BatchTooLarge`](crate::EngineError::BatchTooLarge),
//! nothing applied).

use crate::range::{Scan, SessionScan, Walker};
use crate::store::Core;
use crate::{
    Durability, KeyRange, Op, Result, SnapshotRead, Store, StoreSession, check_key, check_value,
};
use parking_lot::{ArcRwLockWriteGuard, RawRwLock};
use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

/// A write transaction (see [`Store::write`]). Dropped without
/// [`commit`](Self::commit), it applies nothing.
pub struct WriteTxn {
    store: Store,
    session: Option<StoreSession>,
    /// Key → new value (`None`: deleted), the transaction's writes.
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Puts not yet sorted into `writes`, in the order made: a
    /// transaction that only writes (a bulk load) never pays for an
    /// ordered map — the engine's batch orders them itself. The first
    /// read [settles](Self::settle) them into `writes`.
    unsorted: Vec<(Vec<u8>, Vec<u8>)>,
    /// The greatest key [`pop_first`](Self::pop_first) removed, while
    /// every key of the store up to it is deleted in `writes` (a put at
    /// or below it clears this): the next pop reads the store from there,
    /// not from its start past all it popped.
    front: Option<Vec<u8>>,
    /// The same for [`pop_last`](Self::pop_last), from the end.
    back: Option<Vec<u8>>,
    durability: Durability,
    /// The writers' gate, exclusively; released after the session goes
    /// back (field order: dropped last).
    _gate: ArcRwLockWriteGuard<RawRwLock, ()>,
}

impl std::fmt::Debug for WriteTxn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteTxn")
            .field("writes", &(self.writes.len() + self.unsorted.len()))
            .finish()
    }
}

impl Drop for WriteTxn {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            self.store.checkin(s);
        }
    }
}

/// BTreeMap::range panics on a start past the end: such a range is empty.
fn valid(start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    match (start, end) {
        (Bound::Included(s), Bound::Included(e)) => s <= e,
        (Bound::Included(s) | Bound::Excluded(s), Bound::Excluded(e))
        | (Bound::Excluded(s), Bound::Included(e)) => s < e,
        _ => true,
    }
}

impl WriteTxn {
    pub(crate) fn begin(store: Store, session: StoreSession) -> WriteTxn {
        let gate = session.writers().write_arc();
        WriteTxn {
            store,
            session: Some(session),
            writes: BTreeMap::new(),
            unsorted: Vec::new(),
            front: None,
            back: None,
            durability: Durability::Immediate,
            _gate: gate,
        }
    }

    fn session(&mut self) -> &mut StoreSession {
        self.session
            .as_mut()
            .expect("a live transaction has its session")
    }

    /// Moves the unsorted puts into `writes` (later ones win), before a
    /// read of the transaction's own writes.
    fn settle(&mut self) {
        for (k, v) in self.unsorted.drain(..) {
            self.writes.insert(k, Some(v));
        }
    }

    /// Reads `key` as this transaction sees it.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        self.settle();
        if let Some(v) = self.writes.get(key) {
            return Ok(v.clone());
        }
        self.session().get(key)
    }

    /// Inserts or replaces `key` (applied at commit).
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key)?;
        check_value(value)?;
        if self.front.as_deref().is_some_and(|f| key <= f) {
            self.front = None;
        }
        if self.back.as_deref().is_some_and(|b| key >= b) {
            self.back = None;
        }
        self.unsorted.push((key.to_vec(), value.to_vec()));
        Ok(())
    }

    /// Removes `key` (at commit); false when it was absent.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool> {
        let existed = self.get(key)?.is_some();
        if existed {
            self.writes.insert(key.to_vec(), None);
        }
        Ok(existed)
    }

    /// When the commit is durable (default [`Durability::Immediate`]).
    pub fn set_durability(&mut self, d: Durability) {
        self.durability = d;
    }

    /// Writes buffered so far (puts and deletes, one per key).
    pub fn pending(&mut self) -> usize {
        self.settle();
        self.writes.len()
    }

    /// Visits `range` as this transaction sees it (the store with the
    /// transaction's writes over it) until `f` returns false; returns the
    /// pairs `f` saw.
    pub fn range_with(
        &mut self,
        range: &KeyRange,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        self.settle();
        let session = self.session.as_mut().expect("live");
        merged(&mut SessionScan(session), &self.writes, range, f)
    }

    /// The pairs of `range` as this transaction sees them.
    pub fn range(&mut self, range: &KeyRange) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        crate::range::collect(|f| self.range_with(range, f))
    }

    /// The pair with the least key.
    pub fn first(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        // Nothing live at or below `front` (see the field).
        let range = match &self.front {
            Some(k) => KeyRange::bounds(Bound::Excluded(k.clone()), Bound::Unbounded),
            None => KeyRange::all(),
        };
        crate::range::first_of(|f| self.range_with(&range, f))
    }

    /// The pair with the greatest key.
    pub fn last(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let range = match &self.back {
            Some(k) => KeyRange::bounds(Bound::Unbounded, Bound::Excluded(k.clone())),
            None => KeyRange::all(),
        };
        crate::range::first_of(|f| self.range_with(&range.rev(), f))
    }

    /// Removes and returns the pair with the least key. Successive pops
    /// cost a seek each, not a walk past what was popped.
    pub fn pop_first(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let p = self.first()?;
        if let Some((k, _)) = &p {
            self.writes.insert(k.clone(), None);
            // Every store key below `k` was deleted here (`k` came
            // first), and now `k` too.
            self.front = Some(k.clone());
        }
        Ok(p)
    }

    /// Removes and returns the pair with the greatest key.
    pub fn pop_last(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let p = self.last()?;
        if let Some((k, _)) = &p {
            self.writes.insert(k.clone(), None);
            self.back = Some(k.clone());
        }
        Ok(p)
    }

    /// Keeps the pairs of `range` for which `keep` is true and removes the
    /// others; returns how many it removed.
    pub fn retain(
        &mut self,
        range: &KeyRange,
        mut keep: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let mut gone = Vec::new();
        self.range_with(range, &mut |k, v| {
            if !keep(k, v) {
                gone.push(k.to_vec());
            }
            true
        })?;
        let n = gone.len();
        for k in gone {
            self.writes.insert(k, None);
        }
        Ok(n)
    }

    /// Removes the pairs of `range` for which `take` is true and returns
    /// them, in the range's order.
    pub fn extract_if(
        &mut self,
        range: &KeyRange,
        mut take: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        self.range_with(range, &mut |k, v| {
            if take(k, v) {
                out.push((k.to_vec(), v.to_vec()));
            }
            true
        })?;
        for (k, _) in &out {
            self.writes.insert(k.clone(), None);
        }
        Ok(out)
    }

    /// Removes every pair of `range`; returns how many.
    pub fn delete_range(&mut self, range: &KeyRange) -> Result<usize> {
        self.retain(range, |_, _| false)
    }

    /// Applies every write at once, atomically and durably. On an error
    /// nothing was applied (and the transaction is gone).
    pub fn commit(mut self) -> Result<()> {
        if !self.writes.is_empty() {
            self.settle();
        }
        let writes = std::mem::take(&mut self.writes);
        let unsorted = std::mem::take(&mut self.unsorted);
        if writes.is_empty() && unsorted.is_empty() {
            return Ok(());
        }
        // Only blind puts: as made (a batch applies the last put of a key).
        let ops: Vec<Op<'_>> = if writes.is_empty() {
            unsorted
                .iter()
                .map(|(k, v)| Op::Put { key: k, value: v })
                .collect()
        } else {
            writes
                .iter()
                .map(|(k, v)| match v {
                    Some(v) => Op::Put { key: k, value: v },
                    None => Op::Delete { key: k },
                })
                .collect()
        };
        let d = self.durability;
        self.session().batch_in_txn(&ops, d)
    }

    /// Drops every write (the same as dropping the transaction).
    pub fn abort(self) {}
}

/// One buffered write: key and new value (`None`: deleted).
type Write<'a> = (&'a Vec<u8>, &'a Option<Vec<u8>>);

/// Visits `range` of the store read through `s`, with `writes` over it,
/// until `f` returns false.
fn merged(
    s: &mut dyn Scan,
    writes: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    range: &KeyRange,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<usize> {
    let rev = range.is_reverse();
    let mut over: Box<dyn Iterator<Item = Write<'_>>> = if !valid(range.start(), range.end()) {
        Box::new(std::iter::empty())
    } else if rev {
        Box::new(writes.range::<[u8], _>((range.start(), range.end())).rev())
    } else {
        Box::new(writes.range::<[u8], _>((range.start(), range.end())))
    };
    let mut next_over = over.next();
    let mut walker = Walker::new(range.clone());
    let mut buf: VecDeque<(Vec<u8>, Vec<u8>)> = VecDeque::new();
    let mut n = 0;
    loop {
        while buf.is_empty() && !walker.done() {
            walker.step(s, &mut |k, v| {
                buf.push_back((k.to_vec(), v.to_vec()));
                true
            })?;
        }
        // Which comes first in the range's order: the store's pair or
        // the transaction's write (which wins a tie).
        let take_over = match (buf.front(), next_over) {
            (None, None) => return Ok(n),
            (None, Some(_)) => true,
            (Some(_), None) => false,
            (Some((sk, _)), Some((ok, _))) => {
                if sk == ok {
                    buf.pop_front();
                    true
                } else {
                    (ok.as_slice() < sk.as_slice()) != rev
                }
            }
        };
        if take_over {
            let (k, v) = next_over.expect("chosen");
            next_over = over.next();
            let Some(v) = v else { continue };
            n += 1;
            if !f(k, v) {
                return Ok(n);
            }
        } else {
            let (k, v) = buf.pop_front().expect("chosen");
            n += 1;
            if !f(&k, &v) {
                return Ok(n);
            }
        }
    }
}

type SnapBox<'a> = Box<dyn SnapshotRead + Send + 'a>;

self_cell::self_cell!(
    /// A snapshot together with the engine it borrows.
    struct OwnedSnapshot {
        owner: Arc<Core>,
        #[covariant]
        dependent: SnapBox,
    }
);

/// A consistent read-only view of a [`Store`] (see [`Store::snapshot`] for
/// each engine's isolation). Owned: it may move to another thread and
/// outlive the handle it came from.
pub struct Snapshot(OwnedSnapshot);

/// A live reader of a [`Store`] ([`Store::reader`]): each read sees the
/// store as it is then. It holds no session, lane or lock between reads:
/// any number of threads may each have one. Owned, like a [`Snapshot`].
pub struct Reader(OwnedSnapshot);

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader").finish_non_exhaustive()
    }
}

impl Snapshot {
    pub(crate) fn take(core: Arc<Core>) -> Result<Snapshot> {
        OwnedSnapshot::try_new(core, |c| c.engine.snapshot()).map(Snapshot)
    }
}

impl Reader {
    pub(crate) fn new(core: Arc<Core>) -> Reader {
        Reader(OwnedSnapshot::new(core, |c| c.engine.reader()))
    }

    /// The reader as a [`Scan`] (ranges read in chunks through it).
    pub(crate) fn scan(&mut self) -> ReaderScan<'_> {
        ReaderScan(&mut self.0)
    }
}

/// A [`Reader`] seen as a [`Scan`].
pub(crate) struct ReaderScan<'a>(&'a mut OwnedSnapshot);

impl Scan for ReaderScan<'_> {
    fn scan_fwd(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        self.0
            .with_dependent_mut(|_, s| s.scan_with(from, limit, f))
    }

    fn scan_back(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        self.0
            .with_dependent_mut(|_, s| s.scan_back_with(upto, limit, f))
    }
}

/// The read methods of a view: one body for [`Snapshot`] and [`Reader`].
macro_rules! view_reads {
    ($t:ty) => {
        impl $t {
            /// Reads `key` into `out` (cleared first); false when absent.
            pub fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
                self.0.with_dependent_mut(|_, s| s.get_into(key, out))
            }

            /// Reads `key`.
            pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
                let mut out = Vec::new();
                Ok(self.get_into(key, &mut out)?.then_some(out))
            }

            /// Visits `range` until `f` returns false; returns the pairs `f` saw.
            pub fn range_with(
                &mut self,
                range: &KeyRange,
                f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
            ) -> Result<usize> {
                self.0
                    .with_dependent_mut(|_, s| crate::range::drive(s, range, f))
            }

            /// The pairs of `range`.
            pub fn range(&mut self, range: &KeyRange) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
                crate::range::collect(|f| self.range_with(range, f))
            }

            /// The pair with the least key.
            pub fn first(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
                crate::range::first_of(|f| self.range_with(&KeyRange::all(), f))
            }

            /// The pair with the greatest key.
            pub fn last(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
                crate::range::first_of(|f| self.range_with(&KeyRange::all().rev(), f))
            }

            /// Live keys (exact; LSM: a merge of everything).
            pub fn len(&mut self) -> Result<u64> {
                self.0.with_dependent_mut(|_, s| s.len())
            }

            /// True when there is no key.
            pub fn is_empty(&mut self) -> Result<bool> {
                Ok(self.first()?.is_none())
            }
        }
    };
}

view_reads!(Snapshot);
view_reads!(Reader);
