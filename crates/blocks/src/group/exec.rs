//! The interleaving executor and the two operations as `async fn`s.
//!
//! Scheduling rules (the module documentation of [`super`] says why):
//!
//! - The window holds at most `group` operations. Each *round* polls every
//!   operation in it once, in window order. An operation that completes
//!   hands its result to the caller and its place is refilled from the
//!   operation stream at once; the new operation is polled in the same
//!   round, so it issues its prefetches without waiting a round.
//! - An operation returns `Pending` for one of two reasons: it issued a
//!   prefetch and yields (it is ready again next round), or it waits for
//!   *a fence issued after its flushes*. The executor fences after a round
//!   in which every operation still in the window is waiting for a fence —
//!   then all of them share it — or when operations have been waiting for
//!   [`MAX_FENCE_DELAY`] rounds since the last fence, so a stream of lookups
//!   that never waits for a fence cannot starve the inserts beside it.
//! - "A fence after my flushes" is a counter comparison: an insert notes
//!   the executor's fence count when it has flushed, and is ready once the
//!   count is larger.
//! - The inserts in flight — from the poll that reserves a slot and writes
//!   it to the poll that completes — are listed as (leaf, slot). An insert
//!   counts their slots as taken; a lookup does not see them. The list is
//!   at most `group` entries long, scanned linearly behind a per-bucket
//!   count that answers the common "nothing in flight in this leaf" at
//!   once: cheaper than any per-leaf structure in DRAM, which would cost a
//!   cache miss of its own.
//!
//! Nothing else synchronises operations: they run on one thread and never
//! hold a borrow across an `.await`.

use super::{Fault, FpLeaves, GroupError, MAX_GROUP, Op, Outcome, bits};
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// Rounds operations may wait for a fence while others in the window still
/// make progress of another kind (a mix of lookups and inserts) before the
/// executor fences anyway.
pub const MAX_FENCE_DELAY: u64 = 4;

/// What one [`FpLeaves::run`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Operations completed (successfully or not).
    pub ops: u64,
    /// Fences the executor issued.
    pub fences: u64,
    /// Rounds over the window.
    pub rounds: u64,
}

/// State shared by the executor and the operations of one run.
struct Sched {
    /// Fences issued so far in this run.
    fences: Cell<u64>,
    /// Set by an operation that returns `Pending` to wait for a fence;
    /// read and cleared by the executor after each such poll.
    fence_wait: Cell<bool>,
    /// Inserts in flight, `leaf << 32 | slot bit` each, in the first
    /// `in_flight_len` cells (a leaf index is below 2³², see `MAX_LEAVES`).
    /// Plain cells rather than a `RefCell<Vec>`: scanned by every
    /// operation, so no borrow flag, and at most `MAX_GROUP` entries.
    in_flight: [Cell<u64>; MAX_GROUP],
    in_flight_len: Cell<usize>,
    /// Entries of the list per `leaf % BUCKETS`: a zero count (the common
    /// case — a group is scattered over a large table) answers "nothing in
    /// flight in this leaf" without scanning the list.
    buckets: [Cell<u8>; BUCKETS],
    fault: Fault,
}

/// Buckets of the in-flight filter: four times the largest group, so at
/// most a quarter are occupied.
const BUCKETS: usize = 4 * MAX_GROUP;

impl Sched {
    fn new(fault: Fault) -> Sched {
        Sched {
            fences: Cell::new(0),
            fence_wait: Cell::new(false),
            in_flight: std::array::from_fn(|_| Cell::new(0)),
            in_flight_len: Cell::new(0),
            buckets: std::array::from_fn(|_| Cell::new(0)),
            fault,
        }
    }

    /// Slots of `leaf` held by inserts in flight.
    #[inline]
    fn in_flight(&self, leaf: usize) -> u32 {
        if self.buckets[leaf % BUCKETS].get() == 0 {
            return 0;
        }
        let tag = (leaf as u64) << 32;
        self.in_flight[..self.in_flight_len.get()]
            .iter()
            .map(Cell::get)
            .filter(|e| e & !0xffff_ffff == tag)
            .fold(0, |m, e| m | e as u32)
    }

    #[inline]
    fn reserve(&self, leaf: usize, slot: usize) {
        // At most one entry per operation in the window (≤ MAX_GROUP).
        let n = self.in_flight_len.get();
        self.in_flight[n].set((leaf as u64) << 32 | 1 << slot);
        self.in_flight_len.set(n + 1);
        let b = &self.buckets[leaf % BUCKETS];
        b.set(b.get() + 1);
    }

    /// The insert of `slot` completed: it leaves the list and joins the count.
    #[inline]
    fn complete(&self, t: &FpLeaves, leaf: usize, slot: usize) {
        let e = (leaf as u64) << 32 | 1 << slot;
        let n = self.in_flight_len.get();
        if let Some(i) = self.in_flight[..n].iter().position(|c| c.get() == e) {
            self.in_flight[i].set(self.in_flight[n - 1].get());
            self.in_flight_len.set(n - 1);
            let b = &self.buckets[leaf % BUCKETS];
            b.set(b.get() - 1);
        }
        t.len.set(t.len.get() + 1);
    }
}

/// Lowest slot not in `taken`.
#[inline]
fn free_slot(taken: u32) -> Option<usize> {
    (taken != u32::MAX).then(|| (!taken).trailing_zeros() as usize)
}

/// Returns `Pending` once: "the prefetch is issued, run someone else".
struct Yield(bool);

impl Future for Yield {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

fn yield_now() -> Yield {
    Yield(false)
}

/// Ready once the executor has fenced after the moment it was created.
struct Durable<'a> {
    sched: &'a Sched,
    /// The fence count when the caller's flushes were issued.
    seen: u64,
}

impl Future for Durable<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        let now = self.sched.fences.get();
        // The planted bug accepts the fence count it started with: it does
        // not wait for a fence at all.
        let ready = if self.sched.fault == Fault::StaleEpoch {
            now >= self.seen
        } else {
            now > self.seen
        };
        if ready {
            Poll::Ready(())
        } else {
            self.sched.fence_wait.set(true);
            Poll::Pending
        }
    }
}

/// Waits for a fence issued after everything the caller has flushed so far.
fn durable(sched: &Sched) -> Durable<'_> {
    Durable {
        sched,
        seen: sched.fences.get(),
    }
}

async fn lookup(t: &FpLeaves, sched: &Sched, key: u64) -> Result<Outcome, GroupError> {
    let (leaf, fp) = t.place(key);
    t.region.prefetch(t.leaf_off(leaf));
    yield_now().await;
    let h = t.header(leaf);
    let cand = h.matches(fp) & h.bitmap & !sched.in_flight(leaf);
    if cand == 0 {
        return Ok(Outcome::Missing);
    }
    // Usually one match; a fingerprint collision adds lines, all fetched
    // under the same yield.
    for s in bits(cand) {
        t.region.prefetch(t.slot_off(leaf, s));
    }
    yield_now().await;
    match bits(cand).find(|&s| t.key_at(leaf, s) == key) {
        Some(s) => Ok(Outcome::Found(t.value_at(leaf, s))),
        None => Ok(Outcome::Missing),
    }
}

async fn insert(t: &FpLeaves, sched: &Sched, key: u64, value: u64) -> Result<Outcome, GroupError> {
    let (leaf, fp) = t.place(key);
    // Header line: bitmap and fingerprints.
    t.region.prefetch(t.leaf_off(leaf));
    yield_now().await;
    // The slot line we expect to write, so the stores below do not wait for
    // it. (Key lines of fingerprint matches are not prefetched: with 16
    // keys in a leaf a match occurs in 6 % of inserts, and scanning for it
    // here costs every insert more than the rare miss below.)
    if let Some(s) = free_slot(t.bitmap(leaf) | sched.in_flight(leaf)) {
        t.region.prefetch(t.slot_off(leaf, s));
    }
    yield_now().await;
    // Decide from the state now, and reserve and write in this same poll:
    // no insert of the same key or into the same slot can come in between.
    // Slots of inserts in flight hold their keys already (they are written
    // in the poll that reserves them), so the duplicate check sees them.
    let h = t.header(leaf);
    let taken = h.bitmap | sched.in_flight(leaf);
    if bits(h.matches(fp) & taken).any(|s| t.key_at(leaf, s) == key) {
        return Err(GroupError::Duplicate { key });
    }
    let Some(slot) = free_slot(taken) else {
        return Err(GroupError::LeafFull { leaf });
    };
    sched.reserve(leaf, slot);
    t.write_slot(leaf, slot, key, value, fp);
    if sched.fault == Fault::BitWithSlot {
        // Planted bug: the bit rides on the same fence as the slot.
        t.set_bit(leaf, slot);
        durable(sched).await;
        sched.complete(t, leaf, slot);
        return Ok(Outcome::Inserted);
    }
    // Step 2: a fence after the slot's flushes (shared with the group).
    durable(sched).await;
    // Step 3: the slot is durable; publish its bit.
    t.set_bit(leaf, slot);
    if sched.fault == Fault::AckBeforeFence {
        sched.complete(t, leaf, slot);
        return Ok(Outcome::Inserted);
    }
    // Step 4: a fence after the bit's flush; then the insert is done.
    durable(sched).await;
    sched.complete(t, leaf, slot);
    Ok(Outcome::Inserted)
}

async fn operation(t: &FpLeaves, sched: &Sched, op: Op) -> Result<Outcome, GroupError> {
    match op {
        Op::Insert { key, value } => insert(t, sched, key, value).await,
        Op::Lookup { key } => lookup(t, sched, key).await,
    }
}

/// One place of the window.
struct Place<F> {
    /// Index of the operation in the caller's stream.
    index: usize,
    /// Boxed once per run and reused: `Pin::set` swaps operations in place.
    fut: Pin<Box<Option<F>>>,
}

impl FpLeaves {
    /// Runs `ops` with up to `group` of them interleaved (1 = one at a
    /// time, the classic code path), calling `done(i, result)` as the
    /// `i`-th operation of the stream completes. Completion order is not
    /// stream order. An insert's `done` is called only once its slot and
    /// its bitmap bit are durable; a lookup sees the inserts that completed
    /// before it read the leaf.
    ///
    /// Errors only for a bad `group`; per-operation errors (a full leaf, a
    /// duplicate key) go to `done`. If a fence unwinds (a simulated power
    /// failure), the volatile state is stale: recover the table from the
    /// medium.
    pub fn run<I, D>(&mut self, ops: I, group: usize, mut done: D) -> Result<RunStats, GroupError>
    where
        I: IntoIterator<Item = Op>,
        D: FnMut(usize, Result<Outcome, GroupError>),
    {
        if group == 0 || group > MAX_GROUP {
            return Err(GroupError::BadGroup(group));
        }
        let t: &FpLeaves = self;
        let sched = Sched::new(t.fault);
        let sched = &sched;
        let mut ops = ops.into_iter().enumerate();
        let mut window = Vec::with_capacity(group);
        for (index, op) in ops.by_ref().take(group) {
            window.push(Place {
                index,
                fut: Box::pin(Some(operation(t, sched, op))),
            });
        }
        let mut cx = Context::from_waker(Waker::noop());
        let mut stats = RunStats::default();
        // Rounds with an operation waiting for a fence since the last one.
        let mut stalled = 0u64;
        loop {
            let (mut live, mut waiting) = (0usize, 0usize);
            for place in window.iter_mut() {
                while let Some(fut) = place.fut.as_mut().as_pin_mut() {
                    match fut.poll(&mut cx) {
                        Poll::Ready(r) => {
                            done(place.index, r);
                            stats.ops += 1;
                            let next = ops.next();
                            if let Some((index, _)) = next {
                                place.index = index;
                            }
                            // Refill and poll the newcomer right away.
                            place
                                .fut
                                .as_mut()
                                .set(next.map(|(_, op)| operation(t, sched, op)));
                        }
                        Poll::Pending => {
                            live += 1;
                            // `Durable` raises the flag when it returns Pending.
                            waiting += usize::from(sched.fence_wait.replace(false));
                            break;
                        }
                    }
                }
            }
            stats.rounds += 1;
            if live == 0 {
                break;
            }
            if waiting == 0 {
                continue;
            }
            stalled += 1;
            if waiting == live || stalled >= MAX_FENCE_DELAY {
                t.region.fence();
                sched.fences.set(sched.fences.get() + 1);
                stats.fences += 1;
                stalled = 0;
            }
        }
        Ok(stats)
    }
}
