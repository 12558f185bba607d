//! What memcached lets an operator watch: per-prefix statistics (`stats
//! detail on|off|dump`) and log watchers (`watch fetchers mutations`).
//!
//! Both are off (one relaxed atomic load per request) until a client turns
//! them on.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{SystemTime, UNIX_EPOCH};

/// memcached's `prefix_delimiter` (`-D`, default `:`).
pub(crate) const PREFIX_DELIMITER: u8 = b':';

/// Most distinct prefixes counted: beyond it new prefixes are not counted
/// (memcached's table grows without bound; ours may not).
pub(crate) const MAX_PREFIXES: usize = 10_000;

/// `stats detail`: per key prefix (the bytes before the first `:`), the
/// gets, hits, sets and deletes since `on` (or the last `stats reset`).
#[derive(Default)]
pub struct Detail {
    on: AtomicBool,
    map: Mutex<BTreeMap<Vec<u8>, [u64; 4]>>,
}

/// Which count [`Detail::record`] bumps.
#[derive(Clone, Copy)]
pub enum DetailOp {
    /// A get; `true` when it hit.
    Get(bool),
    /// A store command (`set`, `add`, ..., whatever its outcome).
    Set,
    /// A delete.
    Delete,
}

impl std::fmt::Debug for Detail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detail").field("on", &self.is_on()).finish()
    }
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("mask", &self.mask.load(Relaxed))
            .finish()
    }
}

impl Detail {
    pub(crate) fn set_on(&self, on: bool) {
        self.on.store(on, Relaxed);
    }

    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Relaxed)
    }

    /// Count `op` on `key` if collection is on and the key has a prefix.
    pub fn record(&self, key: &[u8], op: DetailOp) {
        if !self.is_on() {
            return;
        }
        let Some(end) = key.iter().position(|&b| b == PREFIX_DELIMITER) else {
            return;
        };
        let mut map = self.map.lock();
        let prefix = &key[..end];
        if !map.contains_key(prefix) && map.len() >= MAX_PREFIXES {
            return;
        }
        let c = map.entry(prefix.to_vec()).or_default();
        match op {
            DetailOp::Get(hit) => {
                c[0] += 1;
                c[1] += u64::from(hit);
            }
            DetailOp::Set => c[2] += 1,
            DetailOp::Delete => c[3] += 1,
        }
    }

    /// `stats reset`.
    pub fn reset(&self) {
        self.map.lock().clear();
    }

    /// memcached's `stats_prefix_dump`: a `PREFIX` line per prefix, `END`.
    pub fn dump(&self) -> Vec<u8> {
        let map = self.map.lock();
        let mut out = Vec::new();
        for (p, c) in map.iter() {
            out.extend_from_slice(b"PREFIX ");
            out.extend_from_slice(p);
            out.extend_from_slice(
                format!(" get {} hit {} set {} del {}\r\n", c[0], c[1], c[2], c[3]).as_bytes(),
            );
        }
        out.extend_from_slice(b"END\r\n");
        out
    }
}

/// Log categories a watcher asks for (memcached's `LOG_*` bits).
pub(crate) const LOG_FETCHERS: u8 = 1;
pub(crate) const LOG_MUTATIONS: u8 = 2;

/// Lines queued for one watcher before new ones are dropped (a watcher
/// that does not read cannot make the server buffer without bound).
pub(crate) const WATCHER_QUEUE: usize = 1024;

/// Most log watchers at once (memcached: 20; `WATCHER_TOO_MANY`).
pub(crate) const MAX_WATCHERS: usize = 20;

struct Watcher {
    mask: u8,
    tx: tokio::sync::mpsc::Sender<Vec<u8>>,
}

/// Log watchers: connections that turned into a stream of log lines.
#[derive(Default)]
pub struct Log {
    /// Union of the watchers' masks (0: nobody watches, nothing formatted).
    mask: AtomicUsize,
    gid: AtomicU64,
    watchers: Mutex<Vec<Watcher>>,
}

/// How an item fetch ended, as memcached logs it.
pub(crate) fn get_status(found: bool) -> &'static str {
    if found { "found" } else { "not_found" }
}

impl Log {
    /// Add a watcher for `mask`; `None` when [`MAX_WATCHERS`] watch.
    pub(crate) fn watch(&self, mask: u8) -> Option<tokio::sync::mpsc::Receiver<Vec<u8>>> {
        let mut w = self.watchers.lock();
        w.retain(|w| !w.tx.is_closed());
        if w.len() >= MAX_WATCHERS {
            return None;
        }
        let (tx, rx) = tokio::sync::mpsc::channel(WATCHER_QUEUE);
        w.push(Watcher { mask, tx });
        self.mask
            .store(w.iter().fold(0, |m, w| m | usize::from(w.mask)), Relaxed);
        Some(rx)
    }

    /// Whether anyone watches `cat`.
    pub fn wants(&self, cat: u8) -> bool {
        self.mask.load(Relaxed) & usize::from(cat) != 0
    }

    fn emit(&self, cat: u8, body: std::fmt::Arguments<'_>) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let gid = self.gid.fetch_add(1, Relaxed);
        let line = format!(
            "ts={}.{:06} gid={gid} {body}\n",
            now.as_secs(),
            now.subsec_micros()
        )
        .into_bytes();
        let mut w = self.watchers.lock();
        let before = w.len();
        w.retain(|w| !w.tx.is_closed());
        for x in w.iter().filter(|x| x.mask & cat != 0) {
            // A full queue drops the line (memcached skips too).
            let _ = x.tx.try_send(line.clone());
        }
        if w.len() != before {
            self.mask
                .store(w.iter().fold(0, |m, w| m | usize::from(w.mask)), Relaxed);
        }
    }

    /// memcached's `item_get` line.
    pub(crate) fn item_get(&self, key: &[u8], found: bool, size: usize, conn: u64) {
        if !self.wants(LOG_FETCHERS) {
            return;
        }
        self.emit(
            LOG_FETCHERS,
            format_args!(
                "type=item_get key={} status={} clsid=0 cfd={conn} size={size}",
                uri_encode(key),
                get_status(found)
            ),
        );
    }

    /// memcached's `item_store` line.
    pub(crate) fn item_store(
        &self,
        key: &[u8],
        status: &str,
        cmd: &str,
        ttl: u64,
        conn: u64,
        size: usize,
    ) {
        if !self.wants(LOG_MUTATIONS) {
            return;
        }
        self.emit(
            LOG_MUTATIONS,
            format_args!(
                "type=item_store key={} status={status} cmd={cmd} ttl={ttl} clsid=0 cfd={conn} size={size}",
                uri_encode(key)
            ),
        );
    }
}

/// memcached's `uriencode` of a key in log lines.
fn uri_encode(key: &[u8]) -> String {
    let mut s = String::with_capacity(key.len());
    for &b in key {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            s.push(char::from(b));
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detail_counts_by_prefix_only_when_on() {
        let d = Detail::default();
        d.record(b"foo:1", DetailOp::Set);
        assert_eq!(d.dump(), b"END\r\n");
        d.set_on(true);
        d.record(b"foo:1", DetailOp::Set);
        d.record(b"foo:2", DetailOp::Get(false));
        d.record(b"foo:1", DetailOp::Get(true));
        d.record(b"bar:1", DetailOp::Delete);
        d.record(b"noprefix", DetailOp::Set);
        assert_eq!(
            String::from_utf8(d.dump()).unwrap(),
            "PREFIX bar get 0 hit 0 set 0 del 1\r\nPREFIX foo get 2 hit 1 set 1 del 0\r\nEND\r\n"
        );
        d.reset();
        assert_eq!(d.dump(), b"END\r\n");
    }

    #[test]
    fn a_watcher_gets_only_its_categories_and_a_full_queue_drops() {
        let log = Log::default();
        assert!(!log.wants(LOG_FETCHERS));
        let mut rx = log.watch(LOG_MUTATIONS).unwrap();
        assert!(log.wants(LOG_MUTATIONS) && !log.wants(LOG_FETCHERS));
        log.item_get(b"k", true, 1, 7);
        log.item_store(b"k y", "stored", "set", 0, 7, 2);
        let line = String::from_utf8(rx.try_recv().unwrap()).unwrap();
        assert!(
            line.contains("type=item_store key=k%20y status=stored cmd=set ttl=0 clsid=0 cfd=7")
        );
        assert!(rx.try_recv().is_err());
        for _ in 0..WATCHER_QUEUE + 10 {
            log.item_store(b"k", "stored", "set", 0, 7, 1);
        }
        let mut n = 0;
        while rx.try_recv().is_ok() {
            n += 1;
        }
        assert_eq!(n, WATCHER_QUEUE);
        drop(rx);
        log.item_store(b"k", "stored", "set", 0, 7, 1);
        assert!(!log.wants(LOG_MUTATIONS));
    }
}
