//! [`Cache`]: memcached's item semantics ([`Store`](super::Store)) over a
//! [`Kv`](super::Kv), with its shard's eviction view and memory budget.

use super::evict::Clock;
#[cfg(any(test, feature = "checks"))]
use super::fault::ItemFault;
use super::{
    Arith, ArithOutcome, DeleteOutcome, HEADER, Item, Kv, META_FLUSH, MetaGet, MetaHit, Result,
    Shared, Store, StoreError, StoreOutcome, bump, map_key_into, slabs, stored_exptime,
};
use crate::protocol::{DeleteOpts, Expiry, StoreMode, StoreOpts, deadline};
use std::sync::atomic::Ordering::Relaxed;

/// [`Store`] over a [`Kv`].
pub struct Cache<'s, K> {
    kv: K,
    shared: &'s Shared,
    key: Vec<u8>,
    buf: Vec<u8>,
    /// Unpublished (total_items, evictions) deltas (see [`Cache::settle`]).
    pend: (i64, u64),
    /// This shard's view of its keys, for eviction and the item counts.
    clock: Clock,
    /// Bytes ([`charge`]) this shard may keep; writes evict beyond it.
    budget: u64,
    /// (items, bytes) of `clock` last added to the shared statistics.
    published: (i64, i64),
    /// The clock's per-class counts last added to the shared statistics.
    published_classes: Vec<(i64, i64)>,
    /// The last [`Cache::load`] removed an expired item (a store that
    /// follows reuses its room: memcached's `reclaimed`).
    found_expired: bool,
    /// A planted bug (the crash checks show they catch it); not compiled
    /// into a build without the `checks` feature.
    #[cfg(any(test, feature = "checks"))]
    fault: ItemFault,
}
/// Bytes an item charges against the memory limit: its map key, header
/// and data.
pub fn charge(map_key_len: usize, value_len: usize) -> u64 {
    (map_key_len + value_len) as u64
}

/// Most victims one write evicts when the map reports it full before the
/// write is refused (`SERVER_ERROR out of memory`).
const MAX_EVICT_ON_FULL: usize = 4096;

impl<'s, K: Kv> Cache<'s, K> {
    /// The map handle (to begin and commit a [`Group`](super::Group)).
    pub fn kv(&mut self) -> &mut K {
        &mut self.kv
    }

    /// A handle with no memory limit whose view of the keys starts empty
    /// (call [`Cache::seed_all`] on a non-empty map).
    pub fn new(kv: K, shared: &'s Shared) -> Self {
        Self::with_budget(kv, shared, u64::MAX, false)
    }

    /// A handle that keeps at most `budget` bytes ([`charge`]) of items,
    /// evicting the least recently used; `seeding`: a background scan will
    /// [`seed`](Cache::seed) the keys already in the map.
    pub(crate) fn with_budget(kv: K, shared: &'s Shared, budget: u64, seeding: bool) -> Self {
        Cache {
            kv,
            shared,
            key: Vec::with_capacity(256),
            buf: Vec::new(),
            pend: (0, 0),
            clock: Clock::new(seeding),
            budget,
            published: (0, 0),
            published_classes: vec![(0, 0); slabs::CLASSES],
            found_expired: false,
            #[cfg(any(test, feature = "checks"))]
            fault: ItemFault::None,
        }
    }

    /// Plant `f` in this handle's item writes (the crash checks only).
    #[cfg(any(test, feature = "checks"))]
    pub fn plant(&mut self, f: ItemFault) {
        self.fault = f;
    }

    /// A key (as in the map, with its `k` prefix) the start-up scan found,
    /// whose value is `value_len` bytes.
    pub fn seed(&mut self, map_key: &[u8], value_len: usize) {
        self.clock.seed(map_key, charge(map_key.len(), value_len));
    }

    /// The start-up scan is over for this shard.
    pub fn seeded(&mut self) {
        self.clock.seeded();
        self.publish();
    }

    /// Seed every item in the map, on this thread (tests, tools).
    pub fn seed_all(&mut self) -> Result<()> {
        let mut found = Vec::new();
        self.kv
            .scan_prefix(b"k", &mut |k, v| found.push((k.to_vec(), v.len())))?;
        for (k, l) in found {
            self.seed(&k, l);
        }
        self.seeded();
        Ok(())
    }

    /// A fetch on the read fast path found `map_key` live, charging
    /// `charge` bytes: mark it recently used and fetched, as the shard's own
    /// get would have ([`evict::Clock::remote_hit`]).
    pub(crate) fn remote_hit(&mut self, map_key: &[u8], charge: u64) {
        self.clock.remote_hit(map_key, charge);
    }

    /// Items and bytes this handle tracks.
    pub fn tracked(&self) -> (usize, u64) {
        (self.clock.len(), self.clock.bytes())
    }

    /// Add the change of the clock's counts to the shared statistics.
    pub fn publish(&mut self) {
        let now = (self.clock.len() as i64, self.clock.bytes() as i64);
        let st = &self.shared.stats;
        st.curr_items.fetch_add(now.0 - self.published.0, Relaxed);
        st.bytes.fetch_add(now.1 - self.published.1, Relaxed);
        self.published = now;
        let classes = self.clock.classes();
        if classes.len() == self.published_classes.len() && classes != self.published_classes {
            let delta: Vec<(i64, i64)> = classes
                .iter()
                .zip(&self.published_classes)
                .map(|(n, p)| (n.0 - p.0, n.1 - p.1))
                .collect();
            self.shared.slabs.add(&delta);
            self.published_classes.copy_from_slice(classes);
        }
    }

    /// Evict one item (not the one being written); false when there is
    /// nothing left to evict.
    fn evict_one(&mut self) -> Result<bool> {
        let Some((victim, ch)) = self.clock.victim() else {
            return Ok(false);
        };
        if *victim == *self.key {
            // The item being replaced: give it a second chance.
            self.clock.hit(&victim, ch);
            return Ok(self.clock.len() > 1);
        }
        if self.kv.delete(&victim)? {
            self.pend.1 += 1;
        }
        self.clock.remove(&victim);
        Ok(true)
    }

    /// Evict until an item charging `ch` at the mapped key fits the budget.
    fn make_room(&mut self, ch: u64) -> Result<()> {
        let mut guard = 2 * self.clock.len() + 2;
        loop {
            let cur = self.clock.charge_of(&self.key);
            if self.clock.bytes() - cur + ch <= self.budget || guard == 0 {
                return Ok(());
            }
            guard -= 1;
            if !self.evict_one()? {
                return Ok(());
            }
        }
    }

    fn map_key(&mut self, key: &[u8]) {
        map_key_into(&mut self.key, key);
    }

    /// The live item at the mapped key, removing it if expired or flushed.
    fn load(&mut self, now: u64) -> Result<Option<Item>> {
        self.load_with(now, true)
    }

    /// [`Cache::load`]; `bump`: mark the item recently used for eviction
    /// (all but meta `u`).
    fn load_with(&mut self, now: u64, bump_lru: bool) -> Result<Option<Item>> {
        if !self.kv.get_into(&self.key, &mut self.buf)? {
            return Ok(None);
        }
        let mut it = if self.shared.verifies() {
            Item::decode_header(&self.key, &self.buf)?
        } else {
            Item::decode_header_unverified(&self.key, &self.buf)?
        };
        it.data = self.buf[HEADER..].to_vec();
        let ch = charge(self.key.len(), self.buf.len());
        let expired = it.expired(now);
        self.found_expired = expired;
        let flushed = !expired && self.shared.flushed(&it, now);
        if expired || flushed {
            if expired {
                bump(&self.shared.stats.get_expired);
            } else {
                bump(&self.shared.stats.get_flushed);
            }
            self.remove()?;
            return Ok(None);
        }
        if bump_lru {
            self.clock.hit(&self.key, ch);
        } else {
            self.clock.track(&self.key, ch);
        }
        Ok(Some(it))
    }

    fn remove(&mut self) -> Result<()> {
        self.kv.delete(&self.key)?;
        self.clock.remove(&self.key);
        Ok(())
    }

    /// Publish (`applied`) or drop the item and byte counts of the writes
    /// since the last call. The shard calls it after every request it ran
    /// alone and after every group commit, so a group whose batch failed
    /// (and applied nothing) leaves the counts as they were.
    pub fn settle(&mut self, applied: bool) {
        let (total, evicted) = std::mem::take(&mut self.pend);
        self.clock.settle(applied);
        self.clock.compact();
        self.publish();
        if applied {
            let st = &self.shared.stats;
            st.evictions.fetch_add(evicted, Relaxed);
            if total >= 0 {
                st.total_items.fetch_add(total as u64, Relaxed);
            } else {
                st.total_items.fetch_sub(total.unsigned_abs(), Relaxed);
            }
        }
    }

    /// Write `it` at the mapped key, evicting other items first if the
    /// budget or the map's space requires it (in the same group commit).
    fn write(&mut self, it: &Item) -> Result<()> {
        let ch = charge(self.key.len(), HEADER + it.data.len());
        self.make_room(ch)?;
        it.encode(&self.key, &mut self.buf);
        #[cfg(any(test, feature = "checks"))]
        if self.fault == ItemFault::ChecksumLate {
            let whole = self.buf.clone();
            self.buf[super::CRC_AT..HEADER].fill(0);
            self.kv.put(&self.key, &self.buf)?;
            self.buf = whole;
        }
        let mut evicted = 0;
        loop {
            match self.kv.put(&self.key, &self.buf) {
                Err(StoreError::Full) if evicted < MAX_EVICT_ON_FULL && self.evict_one()? => {
                    evicted += 1;
                }
                r => break r?,
            }
        }
        self.clock.insert(&self.key, ch);
        self.pend.0 += 1;
        Ok(())
    }

    fn cas_or_new(&mut self, given: Option<u64>) -> Result<u64> {
        match given {
            Some(c) if c != 0 => Ok(c),
            _ => self.shared.new_cas(&mut self.kv),
        }
    }
}

impl<K: Kv> Store for Cache<'_, K> {
    fn shared(&self) -> &Shared {
        self.shared
    }

    fn get(&mut self, key: &[u8], now: u64) -> Result<Option<Item>> {
        self.map_key(key);
        let it = self.load(now)?;
        if it.is_some() {
            self.clock.set_fetched(&self.key, true);
        }
        Ok(it)
    }

    fn peek(&mut self, key: &[u8], now: u64) -> Result<Option<(Item, bool)>> {
        self.map_key(key);
        Ok(self
            .load(now)?
            .map(|it| (it, self.clock.fetched(&self.key))))
    }

    fn meta_get(&mut self, key: &[u8], m: &MetaGet<'_>, now: u64) -> Result<Option<MetaHit>> {
        self.map_key(key);
        let (mut it, created) = match self.load_with(now, !m.no_bump)? {
            Some(it) => (it, false),
            None if m.vivify.is_some() => {
                // memcached links an empty item with no expiry, then the
                // N step below gives it its exptime.
                let it = Item {
                    flags: 0,
                    exptime: 0,
                    cas: self.cas_or_new(m.new_cas)?,
                    time: now,
                    stale: false,
                    token_sent: false,
                    data: Vec::new(),
                };
                (it, true)
            }
            None => return Ok(None),
        };
        let token_sent = it.token_sent;
        let fetched = !created && self.clock.fetched(&self.key);
        let mut win = false;
        let mut changed = created;
        let mut echo_ttl = None;
        for step in meta_steps(m) {
            match step {
                b'T' => {
                    if let Some(t) = m.touch {
                        it.exptime = stored_exptime(deadline(t, now));
                        changed = true;
                    }
                }
                b'N' => {
                    if let (true, Some(t)) = (created, m.vivify) {
                        it.exptime = stored_exptime(deadline(t, now));
                        win = true;
                    }
                }
                b'R' => {
                    // memcached: no earlier win, not just created, has a
                    // TTL, and it ends before now + token.
                    if let (Some(r), false, false) = (m.recache, token_sent, created)
                        && let Expiry::At(limit) = deadline(r, now)
                        && it.exptime != 0
                        && it.exptime < limit
                    {
                        win = true;
                    }
                }
                _ => echo_ttl = Some(it.ttl(now)),
            }
        }
        // A stale item's first fetch wins the recache.
        if it.stale && !token_sent {
            win = true;
        }
        if win {
            it.token_sent = true;
            changed = true;
        }
        if changed {
            self.write(&it)?;
            if !created {
                // A touch or a win is not a new item in the counters.
                self.pend.0 -= 1;
            }
        }
        // memcached marks the item fetched unless `u` (a vivified stub
        // too: the next fetch reports h1).
        self.clock.set_fetched(&self.key, fetched || !m.no_bump);
        Ok(Some(MetaHit {
            echo_ttl: echo_ttl.unwrap_or_else(|| it.ttl(now)),
            item: it,
            win,
            token_sent,
            created,
            fetched,
        }))
    }

    fn touch(&mut self, key: &[u8], exptime: i64, now: u64) -> Result<Option<Item>> {
        self.map_key(key);
        let Some(mut it) = self.load(now)? else {
            return Ok(None);
        };
        it.exptime = stored_exptime(deadline(exptime, now));
        self.write(&it)?;
        // A touch is not an item write in memcached's counters, and it
        // fetches the item.
        self.pend.0 -= 1;
        self.clock.set_fetched(&self.key, true);
        Ok(Some(it))
    }

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
    ) -> Result<StoreOutcome> {
        let new_cas = opts.new_cas;
        self.map_key(key);
        self.found_expired = false;
        let old = match self.load(now) {
            // A plain set replaces a damaged item: the old one is not
            // read (a client's way to repair a key).
            Err(StoreError::Damaged { .. })
                if mode == StoreMode::Set && cas.is_none_or(|c| c == 0) =>
            {
                None
            }
            r => r?,
        };
        if std::mem::take(&mut self.found_expired) {
            let ch = charge(self.key.len(), HEADER + data.len());
            self.shared.slabs.reclaimed[slabs::class_of(ch)].fetch_add(1, Relaxed);
        }
        // Binary append/prepend and meta carry an optional CAS check.
        if let (Some(c), Some(o)) = (cas, &old)
            && c != 0
            && mode != StoreMode::Cas
            && o.cas != c
        {
            return Ok(StoreOutcome::Exists);
        }
        let exp = stored_exptime(deadline(exptime, now));
        let new_item = |data: Vec<u8>, flags: u32, exptime: u64| Item {
            flags,
            exptime,
            cas: 0,
            time: now,
            stale: false,
            token_sent: false,
            data,
        };
        let mut it = match (mode, old.as_ref()) {
            (StoreMode::Set, _) => new_item(data.to_vec(), flags, exp),
            (StoreMode::Add, Some(_)) => return Ok(StoreOutcome::NotStored),
            (StoreMode::Add, None) => new_item(data.to_vec(), flags, exp),
            (StoreMode::Replace, None) => return Ok(StoreOutcome::NotStored),
            (StoreMode::Replace, Some(_)) => new_item(data.to_vec(), flags, exp),
            (StoreMode::Append | StoreMode::Prepend, None) => match opts.vivify {
                // ms N: an append that misses creates the item.
                Some(t) => new_item(data.to_vec(), flags, stored_exptime(deadline(t, now))),
                None => return Ok(StoreOutcome::NotStored),
            },
            (StoreMode::Append | StoreMode::Prepend, Some(o)) => {
                if o.data.len() + data.len() > self.shared.max_item_size {
                    return Ok(StoreOutcome::TooLarge);
                }
                let mut d = Vec::with_capacity(o.data.len() + data.len());
                if mode == StoreMode::Append {
                    d.extend_from_slice(&o.data);
                    d.extend_from_slice(data);
                } else {
                    d.extend_from_slice(data);
                    d.extend_from_slice(&o.data);
                }
                new_item(d, o.flags, o.exptime)
            }
            (StoreMode::Cas, None) => {
                bump(&self.shared.stats.cas_misses);
                return Ok(StoreOutcome::NotFound);
            }
            (StoreMode::Cas, Some(o)) => match cas {
                Some(c) if c == o.cas => {
                    bump(&self.shared.stats.cas_hits);
                    new_item(data.to_vec(), flags, exp)
                }
                // ms I: an older CAS still stores, as a stale item that
                // keeps the old one's exptime and win state (memcached's
                // do_store_item).
                Some(c) if opts.invalidate && c < o.cas => {
                    bump(&self.shared.stats.cas_hits);
                    let mut it = new_item(data.to_vec(), flags, o.exptime);
                    it.stale = true;
                    it.token_sent = o.token_sent;
                    it
                }
                _ => {
                    bump(&self.shared.stats.cas_badval);
                    return Ok(StoreOutcome::Exists);
                }
            },
        };
        // A store whose exptime is already past leaves nothing visible
        // (memcached stores it and it is never found): remove the old one.
        if it.exptime == 1 {
            self.remove()?;
            let c = self.cas_or_new(new_cas)?;
            return Ok(StoreOutcome::Stored(c));
        }
        it.cas = self.cas_or_new(new_cas)?;
        self.write(&it)?;
        Ok(StoreOutcome::Stored(it.cas))
    }

    fn delete(
        &mut self,
        key: &[u8],
        cas: Option<u64>,
        opts: &DeleteOpts,
        now: u64,
    ) -> Result<DeleteOutcome> {
        self.map_key(key);
        let found = match self.load(now) {
            // A plain delete removes a damaged item unread (a client's
            // way to repair a key); one with a CAS or a meta mode needs
            // the item and reports it damaged.
            Err(StoreError::Damaged { .. })
                if cas.is_none_or(|c| c == 0) && !opts.invalidate && !opts.drop_value =>
            {
                bump(&self.shared.stats.delete_hits);
                self.remove()?;
                return Ok(DeleteOutcome::Deleted);
            }
            r => r?,
        };
        let Some(mut it) = found else {
            bump(&self.shared.stats.delete_misses);
            return Ok(DeleteOutcome::NotFound);
        };
        if let Some(c) = cas
            && c != 0
            && c != it.cas
        {
            return Ok(DeleteOutcome::Exists);
        }
        if opts.invalidate {
            // md I: stale, a new CAS, the win open again; T only with I.
            if let Some(t) = opts.ttl {
                it.exptime = stored_exptime(deadline(t, now));
            }
            it.stale = true;
            it.token_sent = false;
            it.cas = self.cas_or_new(opts.new_cas)?;
            let fetched = self.clock.fetched(&self.key);
            self.write(&it)?;
            // The same item (memcached marks it in place): not a new one
            // in the counters, and as fetched as it was.
            self.pend.0 -= 1;
            self.clock.set_fetched(&self.key, fetched);
            return Ok(DeleteOutcome::Deleted);
        }
        bump(&self.shared.stats.delete_hits);
        if opts.drop_value {
            it.data.clear();
            it.flags = 0;
            it.time = now;
            it.stale = false;
            it.token_sent = false;
            it.cas = self.cas_or_new(opts.new_cas)?;
            self.write(&it)?;
        } else {
            self.remove()?;
        }
        Ok(DeleteOutcome::Deleted)
    }

    fn arith(&mut self, key: &[u8], a: Arith<'_>, now: u64) -> Result<ArithOutcome> {
        self.map_key(key);
        let st = &self.shared.stats;
        let (hits, misses) = if a.incr {
            (&st.incr_hits, &st.incr_misses)
        } else {
            (&st.decr_hits, &st.decr_misses)
        };
        let Some(mut it) = self.load(now)? else {
            bump(misses);
            let Some((initial, _)) = a.create else {
                return Ok(ArithOutcome::NotFound);
            };
            let mut it = Item {
                flags: 0,
                exptime: 0,
                cas: 0,
                time: now,
                stale: false,
                token_sent: false,
                data: initial.to_string().into_bytes(),
            };
            let echo = a.set_exptime(&mut it, true, now);
            it.cas = self.cas_or_new(a.new_cas)?;
            self.write(&it)?;
            return Ok(ArithOutcome::Value(initial, it.cas, echo));
        };
        if let Some(c) = a.cas
            && c != 0
            && c != it.cas
        {
            return Ok(ArithOutcome::Exists);
        }
        // memcached's safe_strtoull: digits, optionally followed by
        // whitespace (an earlier decr may have left padding).
        let digits = it.data.trim_ascii_end();
        let Some(cur) = parse_decimal(digits) else {
            return Ok(ArithOutcome::NonNumeric);
        };
        bump(hits);
        let v = if a.incr {
            cur.wrapping_add(a.delta)
        } else {
            cur.saturating_sub(a.delta)
        };
        it.data = v.to_string().into_bytes();
        let echo = a.set_exptime(&mut it, false, now);
        it.time = now;
        it.cas = self.cas_or_new(a.new_cas)?;
        self.write(&it)?;
        Ok(ArithOutcome::Value(v, it.cas, echo))
    }

    fn flush_all(&mut self, delay: i64, now: u64) -> Result<()> {
        let mut g = self.shared.flush.lock();
        let (at, cas) = if delay <= 0 {
            // Every CAS handed out so far is flushed.
            let c = self.shared.new_cas(&mut self.kv)?;
            (0, c)
        } else {
            let at = match deadline(delay, now) {
                Expiry::At(t) => t,
                _ => now,
            };
            (at, g.1)
        };
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&at.to_le_bytes());
        b[8..].copy_from_slice(&cas.to_le_bytes());
        self.kv.put_now(META_FLUSH, &b)?;
        *g = (at, cas);
        self.shared.flush_at.store(at, Relaxed);
        self.shared.flush_cas.store(cas, Relaxed);
        bump(&self.shared.stats.cmd_flush);
        Ok(())
    }
}

/// The steps of a meta get: `m.order` (its known characters, each once),
/// then the modifiers it does not name in the order T, N, R, then `t`.
fn meta_steps(m: &MetaGet<'_>) -> Vec<u8> {
    let mut steps: Vec<u8> = Vec::with_capacity(4);
    for &c in m.order.iter().chain(b"TNRt") {
        let given = match c {
            b'T' => m.touch.is_some(),
            b'N' => m.vivify.is_some(),
            b'R' => m.recache.is_some(),
            b't' => true,
            _ => false,
        };
        if given && !steps.contains(&c) {
            steps.push(c);
        }
    }
    steps
}

/// Decimal digits only (no sign), fitting u64; empty is not a number.
fn parse_decimal(t: &[u8]) -> Option<u64> {
    if t.is_empty() || t.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in t {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(v)
}
