//! Transactions over a [`Store`]: [`WriteTxn`] (reads its own writes,
//! commits them as one atomic batch, serialized against every other
//! write) and [`Snapshot`] (a consistent read-only view).
//!
//! A write transaction keeps its writes in DRAM until
//! [`WriteTxn::commit`] hands them to the engine as one batch: the engine's
//! batch is what makes them atomic and durable (all or nothing after a
//! crash: `ferrite check engine-*`). Reads merge those writes over the
//! store; no other write can land meanwhile (the store's writers' gate,
//! held exclusively), so what the transaction read is still true when it
//! commits: serializable, as LMDB's and redb's single writer.
//!
//! The writes live in an ordered map, except where a workload would pay
//! for order it never reads: blind puts, the removals of `retain` /
//! `extract_if` / `delete_range`, and pops stay in plain lists (oldest
//! first), and point reads and deletes go through a hash map, until a
//! range read needs them ordered or the commit sorts the batch once (a
//! transaction of random deletes, each reading its key first, costs a
//! hash look-up per key rather than two searches of an ordered map whose
//! keys are each a cache miss). Pops read the store ahead at each end
//! (`PopEnd`), so a run of `pop_first` / `pop_last` costs neither an
//! index descent nor an ordered insert per pair.
//!
//! The batch has any size the heap has room for (an InP record larger
//! than its log area is stored in a heap block of its own; an LSM record
//! may reach 4 GiB): a 5 M-put transaction commits whole on every engine
//! (`examples/big_batch.rs`). Only InP's intent protocol (stores on PMDK's
//! allocator) still bounds it by its log area
//! ([`EngineError::BatchTooLarge`](crate::EngineError::BatchTooLarge),
//! nothing applied).

use crate::range::{Scan, SessionScan, Walker};

/// Pairs the first read-ahead of a pop end reads.
const FIRST_AHEAD: usize = 16;
use crate::store::Core;
use crate::{
    Durability, KeyRange, Op, Result, SnapshotRead, Store, StoreSession, check_key, check_value,
};
use parking_lot::{ArcRwLockWriteGuard, RawRwLock};
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

/// A write transaction (see [`Store::write`]). Dropped without
/// [`commit`](Self::commit), it applies nothing.
pub struct WriteTxn {
    store: Store,
    session: Option<StoreSession>,
    /// Key → new value (`None`: deleted): the transaction's oldest writes,
    /// ordered for range reads.
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Key → new value, newer than `writes` and older than the lists
    /// below: the writes point reads settled (the lists moved here) and
    /// [`delete`](Self::delete)'s. A range read moves them to `writes`.
    point: FxHashMap<Vec<u8>, Option<Vec<u8>>>,
    /// Puts not yet sorted into `writes`, in the order made: a
    /// transaction that only writes (a bulk load) never pays for an
    /// ordered map — the engine's batch orders them itself. The first
    /// point read [settles](Self::settle_point) them into `point`, the
    /// first range read into `writes`.
    unsorted: Unsorted,
    /// Keys removed by [`retain`](Self::retain), [`extract_if`](Self::extract_if)
    /// and [`delete_range`](Self::delete_range), not yet in `writes`: each
    /// was live when removed, and all are older than every unsorted put
    /// (those made them settled first). A retain followed by the commit
    /// never builds an ordered map of its removals.
    removed: Vec<Vec<u8>>,
    /// [`delete`](Self::delete)'s buffer for the value it finds.
    scratch: Vec<u8>,
    /// [`pop_first`](Self::pop_first)'s end of the store.
    front: PopEnd,
    /// [`pop_last`](Self::pop_last)'s end.
    back: PopEnd,
    durability: Durability,
    /// The writers' gate, exclusively; released after the session goes
    /// back (field order: dropped last).
    _gate: ArcRwLockWriteGuard<RawRwLock, ()>,
}

impl std::fmt::Debug for WriteTxn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteTxn")
            .field(
                "writes",
                &(self.writes.len() + self.point.len() + self.unsorted.len()),
            )
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

/// One end of the store as successive pops see it.
///
/// Invariants (`cursor` set): every key of the store from the end up to
/// `cursor` (included) is deleted, in `writes` or in `popped`; the pairs
/// of `ahead` are the store's next pairs after `cursor`, in pop order,
/// live, with no write of the transaction on them or between `cursor`
/// and the last of them. A pop then takes `ahead`'s first pair and
/// records its key in `popped`: no index descent, no ordered insert. Any
/// write at or inside `ahead`'s span drops `ahead`; one at or past
/// `cursor` clears it all (its `popped` keys moved to `writes` first).
#[derive(Default)]
struct PopEnd {
    cursor: Option<Vec<u8>>,
    /// Keys popped here and not yet in `writes` (the commit and every
    /// read other than a pop move them there).
    popped: Vec<Vec<u8>>,
    ahead: VecDeque<(Vec<u8>, Vec<u8>)>,
    /// Pairs the next refill of `ahead` reads (doubles up to
    /// [`MAX_CHUNK`](crate::range::MAX_CHUNK)).
    chunk: usize,
}

impl PopEnd {
    /// True when `key` lies inside `ahead`'s span, seen from this end
    /// (`rev`: the last end).
    fn covers(&self, key: &[u8], rev: bool) -> bool {
        match (self.cursor.as_deref(), self.ahead.back()) {
            (_, None) => false,
            (c, Some((last, _))) => {
                if rev {
                    key >= last.as_slice() && c.is_none_or(|c| key < c)
                } else {
                    key <= last.as_slice() && c.is_none_or(|c| key > c)
                }
            }
        }
    }

    /// True when `key` is at or past the cursor (deleted territory).
    fn behind(&self, key: &[u8], rev: bool) -> bool {
        self.cursor
            .as_deref()
            .is_some_and(|c| if rev { key >= c } else { key <= c })
    }
}

impl WriteTxn {
    pub(crate) fn begin(store: Store, session: StoreSession) -> WriteTxn {
        let gate = session.writers().write_arc();
        WriteTxn {
            store,
            session: Some(session),
            writes: BTreeMap::new(),
            point: FxHashMap::default(),
            unsorted: Unsorted::default(),
            removed: Vec::new(),
            scratch: Vec::new(),
            front: PopEnd::default(),
            back: PopEnd::default(),
            durability: Durability::Immediate,
            _gate: gate,
        }
    }

    fn session(&mut self) -> &mut StoreSession {
        self.session
            .as_mut()
            .expect("a live transaction has its session")
    }

    /// Moves the lists (popped keys, removals, unsorted puts, oldest
    /// first: later writes win) into `point`, before a point read of the
    /// transaction's own writes.
    fn settle_point(&mut self) {
        self.settle_pops();
        drain_lists(&mut self.removed, &mut self.unsorted, &mut self.point);
    }

    /// Moves every write into `writes`, oldest first, before a read of
    /// the transaction's own writes in key order.
    fn settle(&mut self) {
        self.settle_ordered(true);
    }

    /// `point`, then the removals and the unsorted puts (and, with
    /// `pops`, before them the popped keys) into `writes`.
    fn settle_ordered(&mut self, pops: bool) {
        if pops {
            self.settle_pops();
        }
        self.writes.extend(self.point.drain());
        drain_lists(&mut self.removed, &mut self.unsorted, &mut self.writes);
    }

    /// Moves the popped keys into `point`: they have no other write of
    /// the transaction (a write at or behind a cursor settles them
    /// first), so where they go among the older writes does not matter.
    fn settle_pops(&mut self) {
        for k in self
            .front
            .popped
            .drain(..)
            .chain(self.back.popped.drain(..))
        {
            self.point.insert(k, None);
        }
    }

    /// Keeps both ends' invariants (see [`PopEnd`]) over a write at `key`
    /// that is not a pop of `ahead`'s first pair.
    fn wrote(&mut self, key: &[u8]) {
        if self.front.behind(key, false) || self.back.behind(key, true) {
            self.settle_pops();
        }
        for (end, rev) in [(&mut self.front, false), (&mut self.back, true)] {
            if end.behind(key, rev) {
                end.cursor = None;
                end.ahead.clear();
            } else if end.covers(key, rev) {
                end.ahead.clear();
            }
        }
    }

    /// Drops both ends' read-ahead (after writes at many keys).
    fn forget_ahead(&mut self) {
        self.front.ahead.clear();
        self.back.ahead.clear();
    }

    /// Reads `key` as this transaction sees it.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Ok(self.get_into(key, &mut out)?.then_some(out))
    }

    /// Reads `key` as this transaction sees it into `out` (cleared
    /// first); false when absent.
    pub fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        self.settle_point();
        out.clear();
        if let Some(v) = self.point.get(key).or_else(|| self.writes.get(key)) {
            if let Some(v) = v {
                out.extend_from_slice(v);
            }
            return Ok(v.is_some());
        }
        self.session().get_into(key, out)
    }

    /// Inserts or replaces `key` (applied at commit).
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key)?;
        check_value(value)?;
        self.wrote(key);
        self.unsorted.push(key, value);
        Ok(())
    }

    /// Removes `key` (at commit); false when it was absent.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool> {
        // The old value into a buffer kept for it: a transaction of many
        // deletes allocates none per key.
        let mut old = std::mem::take(&mut self.scratch);
        let existed = self.get_into(key, &mut old);
        self.scratch = old;
        let existed = existed?;
        if existed {
            self.wrote(key);
            self.point.insert(key.to_vec(), None);
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
        if !valid(range.start(), range.end())
            || self
                .writes
                .range::<[u8], _>((range.start(), range.end()))
                .next()
                .is_none()
        {
            // Nothing of the transaction's in the range: the store's
            // pairs straight to `f`, with no copy of each.
            return crate::range::drive(&mut SessionScan(session), range, f);
        }
        merged(&mut SessionScan(session), &self.writes, range, f)
    }

    /// The pairs of `range` as this transaction sees them.
    pub fn range(&mut self, range: &KeyRange) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        crate::range::collect(|f| self.range_with(range, f))
    }

    /// The keys between the two pop cursors (everything outside is
    /// deleted), ascending.
    fn between_cursors(&self) -> KeyRange {
        KeyRange::bounds(
            self.front
                .cursor
                .clone()
                .map_or(Bound::Unbounded, Bound::Excluded),
            self.back
                .cursor
                .clone()
                .map_or(Bound::Unbounded, Bound::Excluded),
        )
    }

    /// The pair with the least key.
    pub fn first(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let range = self.between_cursors();
        crate::range::first_of(|f| self.range_with(&range, f))
    }

    /// The pair with the greatest key.
    pub fn last(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let range = self.between_cursors().rev();
        crate::range::first_of(|f| self.range_with(&range, f))
    }

    /// Removes and returns the pair with the least key. Successive pops
    /// take the store's pairs from a read-ahead of its next pairs: a pop
    /// costs neither an index descent nor an ordered insert.
    pub fn pop_first(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        self.pop(false)
    }

    /// Removes and returns the pair with the greatest key.
    pub fn pop_last(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        self.pop(true)
    }

    fn end(&mut self, rev: bool) -> (&mut PopEnd, &mut PopEnd) {
        if rev {
            (&mut self.back, &mut self.front)
        } else {
            (&mut self.front, &mut self.back)
        }
    }

    fn pop(&mut self, rev: bool) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        if self.end(rev).0.ahead.is_empty() {
            self.refill(rev)?;
        }
        let (end, other) = self.end(rev);
        if let Some((k, v)) = end.ahead.pop_front() {
            end.cursor = Some(k.clone());
            end.popped.push(k.clone());
            // The other end's read-ahead may reach this key (a table
            // nearly emptied from both ends).
            if other.covers(&k, !rev) {
                other.ahead.clear();
            }
            return Ok(Some((k, v)));
        }
        // Nothing of the store's before the next write: the merged view.
        let p = if rev { self.last()? } else { self.first()? };
        if let Some((k, _)) = &p {
            self.wrote(k);
            self.point.insert(k.clone(), None);
            // Every key up to `k` is deleted now (`k` came first).
            self.end(rev).0.cursor = Some(k.clone());
        }
        Ok(p)
    }

    /// Reads the store's next pairs at one end into its `ahead`: those
    /// after its cursor, before the first write of the transaction beyond
    /// it and before the other end's cursor.
    fn refill(&mut self, rev: bool) -> Result<()> {
        self.settle_ordered(false);
        let (end, other) = if rev {
            (&self.back, &self.front)
        } else {
            (&self.front, &self.back)
        };
        let from = end.cursor.clone();
        let next_write = if rev {
            let upto = from.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            self.writes
                .range::<[u8], _>((Bound::Unbounded, upto))
                .next_back()
        } else {
            let after = from.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            self.writes
                .range::<[u8], _>((after, Bound::Unbounded))
                .next()
        };
        // The nearer of the next write and the other end's cursor.
        let limit = match (next_write.map(|(k, _)| k), other.cursor.as_ref()) {
            (Some(w), Some(c)) => Some(if (w < c) != rev { w } else { c }),
            (w, c) => w.or(c),
        }
        .cloned();
        let far = limit.map_or(Bound::Unbounded, Bound::Excluded);
        let near = from.map_or(Bound::Unbounded, Bound::Excluded);
        let range = if rev {
            KeyRange::bounds(far, near).rev()
        } else {
            KeyRange::bounds(near, far)
        };
        let chunk = end.chunk.clamp(FIRST_AHEAD, crate::range::MAX_CHUNK);
        let mut ahead = VecDeque::with_capacity(chunk);
        let session = self.session.as_mut().expect("live");
        let mut walker = Walker::with_chunk(range, chunk);
        walker.step(&mut SessionScan(session), &mut |k, v| {
            ahead.push_back((k.to_vec(), v.to_vec()));
            true
        })?;
        let end = if rev { &mut self.back } else { &mut self.front };
        end.ahead = ahead;
        end.chunk = (chunk * 2).min(crate::range::MAX_CHUNK);
        Ok(())
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
        if n > 0 {
            self.forget_ahead();
        }
        self.removed.append(&mut gone);
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
        if !out.is_empty() {
            self.forget_ahead();
        }
        self.removed.extend(out.iter().map(|(k, _)| k.clone()));
        Ok(out)
    }

    /// Removes every pair of `range`; returns how many.
    pub fn delete_range(&mut self, range: &KeyRange) -> Result<usize> {
        self.retain(range, |_, _| false)
    }

    /// Applies every write at once, atomically and durably. On an error
    /// nothing was applied (and the transaction is gone).
    pub fn commit(mut self) -> Result<()> {
        let writes = std::mem::take(&mut self.writes);
        let point = std::mem::take(&mut self.point);
        let removed = std::mem::take(&mut self.removed);
        let unsorted = std::mem::take(&mut self.unsorted);
        let popped: Vec<Vec<u8>> = std::mem::take(&mut self.front.popped)
            .into_iter()
            .chain(std::mem::take(&mut self.back.popped))
            .collect();
        let sources = [
            !writes.is_empty() || !point.is_empty(),
            !removed.is_empty(),
            !popped.is_empty(),
            !unsorted.is_empty(),
        ];
        if !sources.contains(&true) {
            return Ok(());
        }
        // Oldest first — the ordered writes, the point ones, then the
        // removals and pops (a removal may follow a put of `writes`; a
        // write after a removal or a pop settled it first), then the puts
        // made after them — so the batch's rule, the last operation on a
        // key wins, gives each key its final state.
        let mut ops: Vec<Op<'_>> = writes
            .iter()
            .chain(point.iter())
            .map(|(k, v)| match v {
                Some(v) => Op::Put { key: k, value: v },
                None => Op::Delete { key: k },
            })
            .chain(removed.iter().chain(&popped).map(|k| Op::Delete { key: k }))
            .chain(unsorted.iter().map(|(k, v)| Op::Put { key: k, value: v }))
            .collect();
        // In key order (the engines apply a sorted batch fastest; a sort
        // of sorted runs is linear), stable so that later still wins;
        // blind puts alone go as made (the engine orders them itself).
        if sources != [false, false, false, true] {
            sort_ops(&mut ops);
        }
        let d = self.durability;
        self.session().batch_in_txn(&ops, d)
    }

    /// Drops every write (the same as dropping the transaction).
    pub fn abort(self) {}
}

/// Moves the removals, then the unsorted puts made after them, into `map`
/// (the point map or the ordered one), in that order: later writes win.
fn drain_lists(
    removed: &mut Vec<Vec<u8>>,
    unsorted: &mut Unsorted,
    map: &mut impl Extend<(Vec<u8>, Option<Vec<u8>>)>,
) {
    map.extend(removed.drain(..).map(|k| (k, None)));
    map.extend(unsorted.iter().map(|(k, v)| (k.to_vec(), Some(v.to_vec()))));
    unsorted.clear();
}

/// Puts in the order made, their keys and values packed in one buffer:
/// a bulk load of blind puts costs no allocation per pair.
#[derive(Default)]
struct Unsorted {
    bytes: Vec<u8>,
    /// Per put: where its key starts in `bytes`, its key's and its
    /// value's length (the value follows the key).
    puts: Vec<(usize, u32, u32)>,
}

impl Unsorted {
    fn push(&mut self, key: &[u8], value: &[u8]) {
        // Checked by the caller: a key and a value fit u32 (MAX_KEY,
        // MAX_VALUE).
        self.puts
            .push((self.bytes.len(), key.len() as u32, value.len() as u32));
        self.bytes.extend_from_slice(key);
        self.bytes.extend_from_slice(value);
    }

    fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.puts.iter().map(|&(at, k, v)| {
            let (k, v) = (k as usize, v as usize);
            (&self.bytes[at..at + k], &self.bytes[at + k..at + k + v])
        })
    }

    fn len(&self) -> usize {
        self.puts.len()
    }

    fn is_empty(&self) -> bool {
        self.puts.is_empty()
    }

    fn clear(&mut self) {
        self.puts.clear();
        self.bytes.clear();
    }
}

/// Sorts `ops` by key, stably (of two operations on a key the later
/// stays later). Each is tagged with its key's first 8 bytes as a
/// big-endian number: most comparisons are of those integers, in the
/// vector itself, rather than of keys that each live in an allocation of
/// their own (a cache miss per comparison in a batch of random keys). A
/// stable sort merges sorted runs in linear time: pops from both ends are
/// an ascending and a descending run.
fn sort_ops(ops: &mut Vec<Op<'_>>) {
    let mut tagged: Vec<(u64, Op<'_>)> = ops
        .drain(..)
        .map(|op| (crate::key_prefix(op.key()), op))
        .collect();
    tagged.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.key().cmp(b.1.key())));
    ops.extend(tagged.into_iter().map(|(_, op)| op));
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
