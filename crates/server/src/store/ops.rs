//! What a store does: the [`Store`] trait, its arguments and outcomes.

use super::{Item, Result, Shared, stored_exptime};
use crate::protocol::{DeleteOpts, StoreMode, StoreOpts, deadline};

/// Outcome of a storage command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOutcome {
    /// Stored, with the item's new CAS.
    Stored(u64),
    /// The mode's condition was not met (add found the key; replace, append,
    /// prepend did not).
    NotStored,
    /// The CAS did not match.
    Exists,
    /// A CAS store found no item.
    NotFound,
    /// The value exceeds the item size limit.
    TooLarge,
}

/// Outcome of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The item was removed (or marked stale).
    Deleted,
    /// No such item.
    NotFound,
    /// The CAS did not match.
    Exists,
}

/// Outcome of incr/decr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOutcome {
    /// New value, new CAS, TTL left.
    Value(u64, u64, Option<u64>),
    /// No such item (and no `create`).
    NotFound,
    /// The CAS did not match.
    Exists,
    /// The value is not a decimal u64.
    NonNumeric,
}

/// An arithmetic command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arith<'a> {
    /// True: add `delta`; false: subtract it, saturating at 0.
    pub incr: bool,
    /// The amount.
    pub delta: u64,
    /// On a miss, store this value with this client exptime.
    pub create: Option<(u64, i64)>,
    /// Only when the item's CAS equals this.
    pub cas: Option<u64>,
    /// Client exptime to set on success.
    pub ttl: Option<i64>,
    /// Meta `E`: the CAS to give the result instead of a fresh one.
    pub new_cas: Option<u64>,
    /// ma: the flags `N`, `T` and `t` in request order. memcached sets the
    /// exptime from `N` (a created item only) and `T` one flag after the
    /// other and reports `t` at its place; what `order` does not name runs
    /// after it in the order N, T, t (so with `N` and `T` on a miss, `T`
    /// wins, and the reported TTL is the final one).
    pub order: &'a [u8],
}

impl Arith<'_> {
    /// Apply `N`/`T` to `it` in request order; the TTL `t` reports.
    pub(super) fn set_exptime(&self, it: &mut Item, created: bool, now: u64) -> Option<u64> {
        let mut echo = None;
        let mut done: Vec<u8> = Vec::with_capacity(3);
        for &c in self.order.iter().chain(b"NTt") {
            if done.contains(&c) {
                continue;
            }
            done.push(c);
            match c {
                b'N' => {
                    if let (true, Some((_, t))) = (created, self.create) {
                        it.exptime = stored_exptime(deadline(t, now));
                    }
                }
                b'T' => {
                    if let Some(t) = self.ttl {
                        it.exptime = stored_exptime(deadline(t, now));
                    }
                }
                b't' => echo = Some(it.ttl(now)),
                _ => {}
            }
        }
        echo.unwrap_or_else(|| it.ttl(now))
    }
}

/// A meta get's item modifiers (`mg` flags `T`, `N`, `R`, `E`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetaGet<'a> {
    /// `T<ttl>`: set the exptime of the item found.
    pub touch: Option<i64>,
    /// `N<ttl>`: on a miss, create an empty item with this exptime and win.
    pub vivify: Option<i64>,
    /// `R<ttl>`: win if the item's remaining TTL is below this.
    pub recache: Option<i64>,
    /// `E<cas>`: the CAS of a vivified item.
    pub new_cas: Option<u64>,
    /// `u`: do not count this as a fetch (the item's `h` stays as it was).
    pub no_bump: bool,
    /// The flags `T`, `N`, `R` and the return flag `t` in request order
    /// (memcached applies them, and reads the TTL for `t`, in that order);
    /// the modifiers given but not named here run after those named, in
    /// the order T, N, R, and `t` (if absent) reports the final TTL.
    pub order: &'a [u8],
}

/// What a meta get found (see [`Store::meta_get`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaHit {
    /// The item after the command.
    pub item: Item,
    /// The TTL the `t` return flag reports (the TTL at its place in the
    /// request).
    pub echo_ttl: Option<u64>,
    /// This request won the recache (`W`).
    pub win: bool,
    /// Another request had already won (`Z`).
    pub token_sent: bool,
    /// The item was created by `N` (a miss).
    pub created: bool,
    /// The item had been fetched before this request (`h`; volatile, see
    /// [`evict::Clock::fetched`](super::evict::Clock::fetched)).
    pub fetched: bool,
}

/// memcached's item commands. `now` is the unix time in seconds; client
/// exptimes are raw (see [`crate::protocol::deadline`]).
pub trait Store {
    /// The live item under `key` (expired and flushed items are absent);
    /// a fetch, so the item is marked fetched (meta `h`).
    fn get(&mut self, key: &[u8], now: u64) -> Result<Option<Item>>;
    /// memcached's `mg` with its item modifiers, in request order: `T`
    /// touches; `N` creates an empty item on a miss (its exptime from the
    /// token; the creator wins); `R` wins when the item has a TTL below
    /// the token and nobody won before. A stale item whose win was not yet
    /// sent is won by this request. A win is recorded in the item (durably,
    /// as every item change) so later requests see `Z` instead. `None`: a
    /// miss without `N`.
    fn meta_get(&mut self, key: &[u8], m: &MetaGet<'_>, now: u64) -> Result<Option<MetaHit>>;
    /// The live item and whether it was fetched, without counting as a
    /// fetch (meta `me`).
    fn peek(&mut self, key: &[u8], now: u64) -> Result<Option<(Item, bool)>>;
    /// Set a live item's expiry and return it (touch, gat).
    fn touch(&mut self, key: &[u8], exptime: i64, now: u64) -> Result<Option<Item>>;
    /// A storage command. `opts` (meta only): `invalidate` lets a CAS store
    /// whose CAS is *older* than the item's succeed, keeping the old
    /// exptime and win state and marking the item stale; `vivify` lets an
    /// append/prepend that misses create the item with that exptime;
    /// `new_cas` is the CAS to give the item.
    #[allow(clippy::too_many_arguments)]
    fn store(
        &mut self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime: i64,
        data: &[u8],
        cas: Option<u64>,
        opts: &StoreOpts,
        now: u64,
    ) -> Result<StoreOutcome>;
    /// Remove `key` (only if its CAS is `cas`, when given). `opts` (meta):
    /// `invalidate` marks the item stale instead, with a new CAS, its win
    /// cleared (the next fetch wins) and, with `ttl`, a new exptime;
    /// otherwise `drop_value` keeps the item with an empty value and zero
    /// flags instead of removing it.
    fn delete(
        &mut self,
        key: &[u8],
        cas: Option<u64>,
        opts: &DeleteOpts,
        now: u64,
    ) -> Result<DeleteOutcome>;
    /// incr or decr `key` as `a` says; increments wrap at 2^64.
    fn arith(&mut self, key: &[u8], a: Arith<'_>, now: u64) -> Result<ArithOutcome>;
    /// Make every item stored before `now + delay` (exptime rule) invisible
    /// from then on; `delay <= 0` flushes now.
    fn flush_all(&mut self, delay: i64, now: u64) -> Result<()>;
    /// The state every shard shares (CAS counter, flush marker, statistics).
    fn shared(&self) -> &Shared;
}
