//! Eviction: one shard's approximate LRU (CLOCK) over the keys it owns.
//!
//! The structure lives in DRAM only. The shard is the only writer of its
//! keys ([`crate::server`] routes a key to one shard), so it can keep an
//! exact view of which of its keys exist and how many bytes they charge:
//! every write and delete the shard does updates it, and the keys that were
//! already in the store at start arrive as *seeds* from a background scan
//! ([`Clock::seed`]). A seed is ignored for a key the shard has written or
//! deleted since start (the shard's own view is newer than the scan's).
//!
//! Eviction deletes through the store ([`super::Cache`]), inside the same
//! group commit as the write that needed the room: a crash shows either the
//! state before both or after both, and an evicted item is simply gone
//! (a cache may lose items; it never loses one because of a crash).
//!
//! # CLOCK
//!
//! `ring` holds `(key, generation)` in insertion order; `map` holds each
//! live key's charge, generation and referenced bit. A hit sets the bit.
//! The hand pops the front: a ring entry whose generation is not the key's
//! current one is stale (the key was deleted or re-inserted) and dropped; a
//! referenced entry loses its bit and goes to the back (a second chance);
//! otherwise it is the victim. Each entry is passed over at most once per
//! bit it holds, so a sweep ends within two rounds of the ring.
//!
//! # Failed group commits
//!
//! Changes since the last [`Clock::settle`] are journaled; when a group's
//! batch fails (nothing was applied) they are undone so the view keeps
//! matching the store.

use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;

/// A key, shared by the map and the ring (one allocation per key).
type Key = Rc<[u8]>;

#[derive(Debug, Clone, Copy)]
struct Entry {
    charge: u64,
    generation: u64,
    referenced: bool,
    /// Fetched since it was written (meta `h`, `me`'s fetch): memcached's
    /// `ITEM_FETCHED`, as volatile as memcached's (after a restart no
    /// item has been fetched).
    fetched: bool,
}

/// One shard's CLOCK (module docs).
#[derive(Debug, Default)]
pub struct Clock {
    map: HashMap<Key, Entry>,
    ring: VecDeque<(Key, u64)>,
    bytes: u64,
    next_gen: u64,
    /// Before-images since the last settle, oldest first.
    undo: Vec<(Key, Option<Entry>)>,
    /// Seeds are still arriving.
    seeding: bool,
    /// Keys written or deleted while seeding (their seeds are stale).
    touched: HashSet<Key>,
    /// Per memcached slab class ([`super::slabs`]): items and their
    /// memcached sizes.
    classes: Vec<(i64, i64)>,
}

impl Clock {
    /// An empty clock; `seeding`: a background scan will send seeds.
    pub fn new(seeding: bool) -> Clock {
        Clock {
            seeding,
            ..Clock::default()
        }
    }

    /// Keys tracked.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// No key is tracked.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Bytes charged by the tracked keys.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The charge of `key` (0 when untracked).
    pub(crate) fn charge_of(&self, key: &[u8]) -> u64 {
        self.map.get(key).map_or(0, |e| e.charge)
    }

    /// The start-up scan has not finished seeding this view (counts are
    /// partial).
    pub fn seeding(&self) -> bool {
        self.seeding
    }

    /// Per memcached slab class: items and their sizes.
    pub fn classes(&self) -> &[(i64, i64)] {
        &self.classes
    }

    fn count(&mut self, charge: u64, sign: i64) {
        if self.classes.is_empty() {
            self.classes = vec![(0, 0); super::slabs::CLASSES];
        }
        let c = &mut self.classes[super::slabs::class_of(charge)];
        c.0 += sign;
        c.1 += sign * super::slabs::ntotal(charge) as i64;
    }

    fn set(&mut self, key: &[u8], new: Option<Entry>) {
        let key: Key = match self.map.get_key_value(key) {
            Some((k, _)) => k.clone(),
            None => key.into(),
        };
        let old = match new {
            Some(e) => self.map.insert(key.clone(), e),
            None => self.map.remove(&key),
        };
        if let Some(o) = old {
            self.bytes -= o.charge;
            self.count(o.charge, -1);
        }
        if let Some(e) = new {
            self.bytes += e.charge;
            self.count(e.charge, 1);
            self.ring.push_back((key.clone(), e.generation));
        }
        self.undo.push((key, old));
    }

    /// `key` now exists and charges `charge` bytes (a write).
    pub fn insert(&mut self, key: &[u8], charge: u64) {
        self.next_gen += 1;
        let e = Entry {
            charge,
            generation: self.next_gen,
            referenced: false,
            fetched: false,
        };
        if self.seeding {
            self.touched.insert(key.into());
        }
        self.set(key, Some(e));
    }

    /// `key` no longer exists (delete, expiry, eviction).
    pub fn remove(&mut self, key: &[u8]) {
        if self.seeding {
            self.touched.insert(key.into());
        }
        if self.map.contains_key(key) {
            self.set(key, None);
        }
    }

    /// `key` was read and exists with `charge` bytes: mark it recently
    /// used (track it if the scan has not reached it yet).
    pub fn hit(&mut self, key: &[u8], charge: u64) {
        match self.map.get_mut(key) {
            Some(e) => e.referenced = true,
            None => self.insert(key, charge),
        }
    }

    /// `key` was fetched, charging `charge`, by a read that ran on another
    /// thread (the server's read fast path) and is told to this shard only
    /// now. If the shard still tracks the key it is marked referenced and
    /// fetched. If not, the shard has deleted it since (its view is newer:
    /// the hint is dropped) — unless the start-up scan has not reached the
    /// key and the shard has not touched it, in which case it exists (the
    /// read found it) and is tracked as [`Clock::hit`] would. Not
    /// journaled: the shard applies hints between requests and settles.
    ///
    /// The read and its hint are not one step: a write of the same key
    /// that the shard runs in between gets the read's mark (a `h` flag one
    /// fetch early, a referenced bit). Both are hints memcached keeps as
    /// loosely; the item itself is never affected.
    pub(crate) fn remote_hit(&mut self, key: &[u8], charge: u64) {
        if let Some(e) = self.map.get_mut(key) {
            e.referenced = true;
            e.fetched = true;
        } else if self.seeding && !self.touched.contains(key) {
            self.insert(key, charge);
            if let Some(e) = self.map.get_mut(key) {
                e.fetched = true;
            }
        }
    }

    /// Has `key` been fetched since it was written?
    pub fn fetched(&self, key: &[u8]) -> bool {
        self.map.get(key).is_some_and(|e| e.fetched)
    }

    /// `key` (tracked) was fetched by a client, or (`false`) its item was
    /// replaced in place and keeps the flag it had. Not journaled: the
    /// flag is a hint, not part of the store's state.
    pub(crate) fn set_fetched(&mut self, key: &[u8], fetched: bool) {
        if let Some(e) = self.map.get_mut(key) {
            e.fetched = fetched;
        }
    }

    /// `key` was read without a bump (meta `u`): track it if the scan has
    /// not reached it yet, leave its referenced bit as it is.
    pub fn track(&mut self, key: &[u8], charge: u64) {
        if !self.map.contains_key(key) {
            self.insert(key, charge);
        }
    }

    /// A key the start-up scan found.
    pub fn seed(&mut self, key: &[u8], charge: u64) {
        if self.map.contains_key(key) || self.touched.contains(key) {
            return;
        }
        self.next_gen += 1;
        let e = Entry {
            charge,
            generation: self.next_gen,
            referenced: false,
            fetched: false,
        };
        let key: Key = key.into();
        self.map.insert(key.clone(), e);
        self.bytes += charge;
        self.count(charge, 1);
        self.ring.push_back((key, e.generation));
    }

    /// The scan is over: every key of the shard is tracked.
    pub fn seeded(&mut self) {
        self.seeding = false;
        self.touched = HashSet::new();
    }

    /// The next key to evict and its charge (still tracked: the caller
    /// deletes it from the store, then calls [`Clock::remove`]).
    pub fn victim(&mut self) -> Option<(Key, u64)> {
        while let Some((key, generation)) = self.ring.pop_front() {
            let Some(e) = self.map.get_mut(&key) else {
                continue;
            };
            if e.generation != generation {
                continue;
            }
            if e.referenced {
                e.referenced = false;
                self.ring.push_back((key, generation));
                continue;
            }
            let charge = e.charge;
            // Kept in the ring until removed, in case the delete fails.
            self.ring.push_back((key.clone(), generation));
            return Some((key, charge));
        }
        None
    }

    /// End of a request or group: keep the changes (`applied`) or undo
    /// them (the batch failed and the store is unchanged).
    pub fn settle(&mut self, applied: bool) {
        let undo = std::mem::take(&mut self.undo);
        if applied {
            return;
        }
        for (key, before) in undo.into_iter().rev() {
            let cur = match before {
                Some(e) => self.map.insert(key.clone(), e),
                None => self.map.remove(&key),
            };
            if let Some(c) = cur {
                self.bytes -= c.charge;
                self.count(c.charge, -1);
            }
            if let Some(e) = before {
                self.bytes += e.charge;
                self.count(e.charge, 1);
                self.ring.push_back((key, e.generation));
            }
        }
        // Keep the ring from growing without bound under churn: stale
        // entries are dropped when it is twice the live set.
        self.compact();
    }

    /// Drop stale ring entries when they dominate.
    pub fn compact(&mut self) {
        if self.ring.len() > 2 * self.map.len() + 1024 {
            let map = &self.map;
            self.ring
                .retain(|(k, g)| map.get(k).is_some_and(|e| e.generation == *g));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_oldest_unreferenced_first_and_gives_second_chances() {
        let mut c = Clock::new(false);
        for k in [b"a", b"b", b"c"] {
            c.insert(k, 10);
        }
        c.settle(true);
        assert_eq!(c.bytes(), 30);
        c.hit(b"a", 10);
        let (v, ch) = c.victim().unwrap();
        assert_eq!((&*v, ch), (&b"b"[..], 10));
        c.remove(&v);
        let (v, _) = c.victim().unwrap();
        assert_eq!(&*v, b"c");
        c.remove(&v);
        let (v, _) = c.victim().unwrap();
        assert_eq!(&*v, b"a");
        c.remove(&v);
        assert!(c.victim().is_none());
        assert_eq!((c.len(), c.bytes()), (0, 0));
    }

    #[test]
    fn reinsert_makes_old_ring_entry_stale_and_undo_restores() {
        let mut c = Clock::new(false);
        c.insert(b"a", 5);
        c.insert(b"b", 7);
        c.settle(true);
        c.insert(b"a", 9); // a moves to the back
        c.remove(b"b");
        assert_eq!(c.bytes(), 9);
        c.settle(false);
        assert_eq!((c.len(), c.bytes()), (2, 12));
        c.insert(b"a", 9);
        c.settle(true);
        assert_eq!(&*c.victim().unwrap().0, b"b");
    }

    #[test]
    fn seeds_do_not_override_the_shards_own_writes() {
        let mut c = Clock::new(true);
        c.insert(b"new", 3);
        c.remove(b"gone");
        c.seed(b"gone", 100);
        c.seed(b"new", 100);
        c.seed(b"old", 4);
        c.seeded();
        assert_eq!((c.len(), c.bytes()), (2, 7));
    }
}
