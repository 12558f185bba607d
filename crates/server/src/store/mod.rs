//! The cache: memcached's item semantics over a durable key-value map.
//!
//! [`Cache`] implements [`Store`] (get, the six storage modes, delete,
//! incr/decr, touch, get-and-touch, flush_all, expiry, CAS) over any
//! [`Kv`]: a per-thread handle on a map whose `put` and `delete` are
//! durable when they return ([`engine::EngineKv`] over `ferrite-engine`,
//! [`ptm::PtmKv`] over `ferrite-ptm`, [`tx::TxKv`] over `ferrite-tx`, and
//! with the feature `pmdk` `pmdk::PmdkKv` over libpmemobj transactions).
//!
//! # Atomicity
//!
//! A `Cache` is one thread's handle and its read-modify-write commands
//! (append, cas, incr, add...) are a `get` followed by a `put`. They are
//! atomic against other connections because the server routes every key to
//! exactly one shard thread ([`crate::server`]): a key's commands execute one
//! after another on that thread, which is a striped lock whose stripe is the
//! key's hash modulo the shard count, held for the whole get+put. State
//! shared by all shards ([`Shared`]: the CAS counter, the flush marker,
//! statistics) is atomics or a mutex.
//!
//! # Keys in the map
//!
//! A client key `K` (1 to 250 arbitrary bytes; binary keys may hold any
//! byte) is stored under `b'k' ++ K`. The server's own records start with
//! a `0x00` byte, so no client key can collide with them:
//!
//! * `\0cas`: the CAS high-water mark, 8 bytes little-endian. No item ever
//!   carries a CAS `>=` this value; after a restart counting resumes at it,
//!   so CAS values stay unique across restarts (ids are reserved
//!   [`CAS_BATCH`] at a time, one durable write per batch).
//! * `\0flush`: the last `flush_all`, 16 bytes: `[at u64 LE][cas u64 LE]`.
//!   An item is flushed if its CAS is `<= cas` (an immediate flush), or if
//!   `at != 0`, the clock has reached `at`, and the item was stored before
//!   `at` (a delayed flush).
//!
//! * `\0fmt`: the item format of this map, 8 bytes: `FRSRVIT2` (format 2,
//!   below). Written by [`Shared::open`] on a map that holds no item yet;
//!   a map with items but without it (the first format, which had no
//!   checksum), or with another version, is refused with
//!   [`StoreError::Format`]: its items are never misread as damaged ones
//!   nor trusted unchecked.
//!
//! # Item format 2 (the map's value)
//!
//! ```text
//!  0  4  client flags, u32 LE
//!  4  8  expiry: absolute unix seconds, u64 LE; 0 = never
//! 12  8  CAS, u64 LE (nonzero)
//! 20  7  stored-at: unix seconds of the last write, u56 LE (delayed flush_all)
//! 27  1  state: bit 0 = stale (meta X: `md I`, `ms I`), bit 1 = a client
//!        was sent the recache win (meta W; later fetches see Z);
//!        bits 2-7 zero
//! 28  4  checksum: CRC32C (Castagnoli) of, in this order, the map key
//!        (`k` ++ client key), bytes 0..28 of this value (flags, expiry,
//!        CAS, stored-at, state, exactly as stored) and the data bytes
//! 32  ..  the data bytes
//! ```
//!
//! The checksum is computed by [`Item::encode`] from the bytes it writes,
//! so it is part of the one value the map writes atomically: it becomes
//! durable in the same flush and fence as the item and is reachable only
//! with it (no extra fence per store). Every read that returns an item or
//! acts on it (get, gets, gat, touch, meta get, append/prepend, cas,
//! incr/decr, delete with a CAS, the read fast path) verifies it first
//! ([`Item::decode`]); a mismatch is [`StoreError::Damaged`] naming the
//! key, which the server answers with `SERVER_ERROR damaged item …` for
//! that key alone. A plain `set` (no CAS) or `delete` of a damaged item
//! replaces or removes it: that is how a client repairs a key. The key is
//! covered so that an entry whose key bytes were changed (it would then
//! sit under another key) does not verify either.
//!
//! The map writes a value atomically, so an item is never torn, and its
//! stale and win state are as crash-consistent as its value: a reply that
//! reports them (`W` to the winner, `X`) is sent only after the item that
//! records them is durable, so after a crash no second client can win the
//! same recache. A value shorter than 32 bytes, with a state bit 2-7 set
//! or whose checksum does not match is reported as
//! [`StoreError::Damaged`], never a panic.
//!
//! Expired and flushed items are removed lazily when a command finds
//! them.
//!
//! # Eviction and the item counts
//!
//! Each `Cache` (one shard) keeps a DRAM-only CLOCK ([`evict::Clock`]) over
//! the keys it owns, charging each item its map key, header and data
//! ([`charge`]). A write that would take the shard past its budget (the
//! server's `--memory` divided among the shards), or that the map refuses
//! as full, first deletes the least recently used items through the map —
//! in the same group commit as the write, so the eviction is as
//! crash-consistent as any delete. Nothing about eviction is persistent:
//! after a restart the view is rebuilt from a scan of the map that runs
//! while the server already serves ([`Cache::seed`]); until it ends the
//! counts are partial and a shard may hold more than its budget.
//! `curr_items` and `bytes` in [`Stats`] are the sums of the shards' views.

pub mod engine;
pub mod evict;
#[cfg(feature = "pmdk")]
pub mod pmdk;
pub mod ptm;
pub mod slabs;
pub mod tx;

use crate::protocol::{DeleteOpts, Expiry, StoreMode, StoreOpts, deadline};
use evict::Clock;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};

/// The store variants `ferrite serve --store` accepts (and the bench and
/// tests run): the three engines, the two PTM algorithms and the byte map
/// on undo, redo and clobber transactions.
pub const STORES: [&str; 8] = [
    "engine-inp",
    "engine-lsm",
    "engine-cow",
    "ptm-lazy",
    "ptm-eager",
    "tx-undo",
    "tx-redo",
    "tx-clobber",
];

/// The store on PMDK's undo transactions ([`pmdk`], feature `pmdk`): not
/// in [`STORES`], which every build serves.
pub const PMDK_STORE: &str = "pmdk-undo";

/// Bytes before the data in a stored item.
pub const HEADER: usize = 32;
/// Where the item's checksum lies (module docs, "Item format 2").
const CRC_AT: usize = 28;
/// The `\0fmt` record: the item format this build writes and reads.
pub const FORMAT: [u8; 8] = *b"FRSRVIT2";
/// State byte bit: the item is stale (meta `X`).
const STATE_STALE: u8 = 1;
/// State byte bit: a client has been sent the recache win (meta `W`/`Z`).
const STATE_TOKEN_SENT: u8 = 2;
/// Largest stored-at time the 7-byte field holds.
const TIME_MAX: u64 = (1 << 56) - 1;
/// CAS ids reserved per durable write of the high-water mark.
pub const CAS_BATCH: u64 = 1 << 16;

const META_CAS: &[u8] = b"\0cas";
const META_FLUSH: &[u8] = b"\0flush";
/// The map key of the item format record (module docs).
pub const META_FORMAT: &[u8] = b"\0fmt";

/// Errors of the underlying map (or a corrupt item). The server answers
/// them with `SERVER_ERROR <message>`.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    Backend(String),
    /// A server record (the CAS mark, the flush marker) does not decode.
    #[error("corrupt item: {0}")]
    Corrupt(&'static str),
    /// The item stored under client key `key` fails its checks (its
    /// checksum, its length, its state bits): its bytes are not returned.
    #[error("damaged item '{key}': {reason}")]
    Damaged {
        /// The client key, non-printable bytes escaped (`\xNN`).
        key: String,
        reason: &'static str,
    },
    /// The map holds items of a format this build does not read.
    #[error(
        "the pool's items are in {found}, not item format 2 (`FRSRVIT2`, with a checksum per item): this build refuses to read them; serve it with the build that wrote it, or start a new pool"
    )]
    Format { found: String },
    #[error("out of memory storing object")]
    Full,
}

impl StoreError {
    /// A damaged item under map key `map_key` (`k` ++ client key).
    fn damaged(map_key: &[u8], reason: &'static str) -> StoreError {
        StoreError::Damaged {
            key: client_key_shown(map_key),
            reason,
        }
    }
}

/// The client key of map key `map_key`, printable (`\xNN` escapes).
pub fn client_key_shown(map_key: &[u8]) -> String {
    let k = map_key.strip_prefix(b"k").unwrap_or(map_key);
    k.escape_ascii().to_string()
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// One thread's handle on a durable map. `put` and `delete` return only
/// when their effect is durable.
pub trait Kv {
    /// Read `key` into `out` (cleared first); false when absent.
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()>;
    /// False when the key was absent.
    fn delete(&mut self, key: &[u8]) -> Result<bool>;
    /// Call `f` on every pair whose key starts with `prefix`.
    fn scan_prefix(&mut self, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> Result<()>;
    /// Apply every write atomically (all or nothing after a crash) and
    /// durably; later writes to a key win. `None` deletes.
    fn batch(&mut self, ops: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<()>;
    /// A put that is durable when it returns even inside a [`Group`]
    /// (the CAS reservation and the flush marker: shared state other shards
    /// act on at once).
    fn put_now(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.put(key, value)
    }
}

/// A handle for the read fast path: a plain `get`/`gets` answered on the
/// connection's own thread instead of the key's shard ([`crate::server`]).
///
/// Its reads run beside the shards' writes, so a reader must see every
/// write whole and only once it is durable: the byte map's batch holds
/// its sub-map write locks until its transaction is durable, and the PTM
/// reads under ownership records, so both qualify ([`tx`], [`ptm`]).
/// A group commit's writes are applied to the map only by its durable
/// batch, so no reader sees them before. The engines qualify too, with a
/// session per reader ([`KvReader`]).
pub trait Reader {
    /// [`Kv::get_into`] from any thread.
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;
}

/// The map key of client key `key` (module docs, "Keys in the map"),
/// into `out`.
fn map_key_into(out: &mut Vec<u8>, key: &[u8]) {
    out.clear();
    out.push(b'k');
    out.extend_from_slice(key);
}

/// A [`Kv`] handle of its own serving as a [`Reader`]: for stores whose
/// `serve` argues that this handle's reads see only durable writes (the
/// engines' sessions, the PTM's threads, the PMDK map).
pub struct KvReader<K>(pub K);

impl<K: Kv> Reader for KvReader<K> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.0.get_into(key, out)
    }
}

/// What [`read_live`] found.
#[derive(Debug)]
pub enum ReadPath {
    /// A live item (its data left empty: it is `buf[HEADER..]` of the
    /// [`read_live`] call) and its charge ([`charge`]).
    Hit(Item, u64),
    /// No item under the key.
    Miss,
    /// The item is expired or flushed: only the key's shard may remove it
    /// (a write), so the request goes there.
    Shard,
}

/// The read fast path's lookup of client key `key` through `r`: the same
/// visibility rules as the shard's own load (expiry, `flush_all`), but
/// read-only. `map_key` and `buf` are scratch space.
pub fn read_live(
    r: &mut dyn Reader,
    shared: &Shared,
    key: &[u8],
    map_key: &mut Vec<u8>,
    buf: &mut Vec<u8>,
    now: u64,
) -> Result<ReadPath> {
    map_key_into(map_key, key);
    if !r.get_into(map_key, buf)? {
        return Ok(ReadPath::Miss);
    }
    let it = if shared.verifies() {
        Item::decode_header(map_key, buf)?
    } else {
        Item::decode_header_unverified(map_key, buf)?
    };
    if it.expired(now) || shared.flushed(&it, now) {
        return Ok(ReadPath::Shard);
    }
    Ok(ReadPath::Hit(it, charge(map_key.len(), buf.len())))
}

/// Group commit: a [`Kv`] that, between [`Group::begin`] and
/// [`Group::commit`], keeps writes in DRAM (reads see them) and then
/// applies them all with one [`Kv::batch`]. Outside a group it passes
/// every call through. The shard thread runs a group over the requests
/// queued at once and sends their replies only after the commit returns,
/// so no reply ever describes a write that is not durable; many requests
/// share one durable commit (fewer fences per request under load).
pub struct Group<K> {
    kv: K,
    active: bool,
    overlay: std::collections::HashMap<Vec<u8>, Option<Vec<u8>>>,
    ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl<K: Kv> Group<K> {
    pub fn new(kv: K) -> Self {
        Group {
            kv,
            active: false,
            overlay: Default::default(),
            ops: Vec::new(),
        }
    }

    /// Start collecting writes.
    pub fn begin(&mut self) {
        self.active = true;
        self.overlay.clear();
        self.ops.clear();
    }

    /// Apply the collected writes in one batch. On error nothing was
    /// applied (the batch is atomic) and the overlay is dropped.
    pub fn commit(&mut self) -> Result<()> {
        self.active = false;
        self.overlay.clear();
        let ops = std::mem::take(&mut self.ops);
        if ops.is_empty() {
            return Ok(());
        }
        let r = self.kv.batch(&ops);
        self.ops = ops;
        self.ops.clear();
        r
    }
}

impl<K: Kv> Kv for Group<K> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        if self.active
            && let Some(v) = self.overlay.get(key)
        {
            out.clear();
            return Ok(match v {
                Some(v) => {
                    out.extend_from_slice(v);
                    true
                }
                None => false,
            });
        }
        self.kv.get_into(key, out)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        if !self.active {
            return self.kv.put(key, value);
        }
        self.overlay.insert(key.to_vec(), Some(value.to_vec()));
        self.ops.push((key.to_vec(), Some(value.to_vec())));
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        if !self.active {
            return self.kv.delete(key);
        }
        let mut scratch = Vec::new();
        let existed = self.get_into(key, &mut scratch)?;
        self.overlay.insert(key.to_vec(), None);
        self.ops.push((key.to_vec(), None));
        Ok(existed)
    }

    fn scan_prefix(&mut self, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        self.kv.scan_prefix(prefix, f)
    }

    fn batch(&mut self, ops: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<()> {
        self.kv.batch(ops)
    }

    fn put_now(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.kv.put_now(key, value)
    }
}

/// A decoded item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub flags: u32,
    /// Absolute unix seconds; 0 = never.
    pub exptime: u64,
    pub cas: u64,
    /// Unix seconds of the last write (at most 2^56 - 1).
    pub time: u64,
    /// Marked stale (`md I`, `ms I` with an older CAS): meta `X`.
    pub stale: bool,
    /// A client has been sent the win (`W`) for recaching this item; later
    /// fetches see `Z` until the item is replaced or invalidated again.
    pub token_sent: bool,
    pub data: Vec<u8>,
}

impl Item {
    /// The on-map bytes of this item under map key `map_key` (`k` ++
    /// client key), its checksum included (see the module docs).
    pub fn encode(&self, map_key: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.reserve(HEADER + self.data.len());
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.extend_from_slice(&self.exptime.to_le_bytes());
        out.extend_from_slice(&self.cas.to_le_bytes());
        out.extend_from_slice(&self.time.min(TIME_MAX).to_le_bytes()[..7]);
        let mut state = 0;
        if self.stale {
            state |= STATE_STALE;
        }
        if self.token_sent {
            state |= STATE_TOKEN_SENT;
        }
        out.push(state);
        let crc = item_crc(map_key, &out[..CRC_AT], &self.data);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&self.data);
    }

    /// The item stored as `b` under map key `map_key`, verified.
    pub fn decode(map_key: &[u8], b: &[u8]) -> Result<Item> {
        let mut it = Item::decode_header(map_key, b)?;
        it.data = b[HEADER..].to_vec();
        Ok(it)
    }

    /// [`Item::decode`] without the data (left empty): for a reader that
    /// uses the data where it lies, `&b[HEADER..]`. The checksum still
    /// covers the data: it is verified here.
    pub fn decode_header(map_key: &[u8], b: &[u8]) -> Result<Item> {
        let it = Item::decode_header_unverified(map_key, b)?;
        let stored = u32::from_le_bytes([b[CRC_AT], b[CRC_AT + 1], b[CRC_AT + 2], b[CRC_AT + 3]]);
        if item_crc(map_key, &b[..CRC_AT], &b[HEADER..]) != stored {
            return Err(StoreError::damaged(map_key, "checksum mismatch"));
        }
        Ok(it)
    }

    /// [`Item::decode_header`] without the checksum (the measurement of
    /// its cost, [`Shared::set_verify`]; the deep check reports a
    /// mismatch itself). Lengths and state bits are still checked: they
    /// keep a damaged value from panicking the decoder.
    pub fn decode_header_unverified(map_key: &[u8], b: &[u8]) -> Result<Item> {
        if b.len() < HEADER {
            return Err(StoreError::damaged(map_key, "shorter than its header"));
        }
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        let mut f = [0u8; 4];
        f.copy_from_slice(&b[0..4]);
        let state = b[27];
        if state & !(STATE_STALE | STATE_TOKEN_SENT) != 0 {
            return Err(StoreError::damaged(map_key, "unknown item state bits"));
        }
        Ok(Item {
            flags: u32::from_le_bytes(f),
            exptime: u64_at(4),
            cas: u64_at(12),
            time: u64_at(20) & TIME_MAX,
            stale: state & STATE_STALE != 0,
            token_sent: state & STATE_TOKEN_SENT != 0,
            data: Vec::new(),
        })
    }

    /// Has the item's expiry passed at `now`?
    pub fn expired(&self, now: u64) -> bool {
        self.exptime != 0 && now >= self.exptime
    }

    /// Seconds of life left at `now` (`None` = never expires).
    pub fn ttl(&self, now: u64) -> Option<u64> {
        (self.exptime != 0).then(|| self.exptime.saturating_sub(now))
    }
}

/// The checksum of an item (module docs, "Item format 2"): CRC32C of the
/// map key, the 28 header bytes before the checksum, and the data.
fn item_crc(map_key: &[u8], head: &[u8], data: &[u8]) -> u32 {
    let c = crc32c::crc32c(map_key);
    let c = crc32c::crc32c_append(c, head);
    crc32c::crc32c_append(c, data)
}

/// Checks item `value` stored under map key `map_key` as every read does
/// (the deep check's walk, [`verify_items`]).
pub fn verify_item(map_key: &[u8], value: &[u8]) -> Result<()> {
    Item::decode_header(map_key, value).map(|_| ())
}

/// What [`verify_items`] found in a map.
#[derive(Debug, Default)]
pub struct ItemCheck {
    /// Items whose checksum and fields verified.
    pub items: u64,
    /// The damaged ones: (client key shown, reason).
    pub damaged: Vec<(String, &'static str)>,
    /// The map keys of the damaged ones, in the same order (what a repair
    /// deletes them by).
    pub damaged_keys: Vec<Vec<u8>>,
}

/// Verifies every item of the map behind `kv` (the deep check of a
/// server pool): refuses a map of another item format
/// ([`StoreError::Format`]), lists each damaged item by key.
pub fn verify_items(kv: &mut dyn Kv) -> Result<ItemCheck> {
    check_format(kv)?;
    let mut c = ItemCheck::default();
    // Every record, not only the `k` ones: an item whose first key byte
    // was damaged is no longer under `k` and must be reported too.
    kv.scan_prefix(b"", &mut |k, v| {
        let why = match k.first() {
            Some(b'k') => match verify_item(k, v) {
                Ok(()) => {
                    c.items += 1;
                    return;
                }
                Err(StoreError::Damaged { reason, .. }) => reason,
                Err(_) => "does not decode",
            },
            _ if k == META_FORMAT || k == META_CAS => return,
            _ if k == META_FLUSH && v.len() == 16 => return,
            _ if k == META_FLUSH => "a flush marker of the wrong length",
            _ => "a key that is neither an item's nor a server record's (a damaged key byte)",
        };
        c.damaged.push((client_key_shown(k), why));
        c.damaged_keys.push(k.to_vec());
    })?;
    Ok(c)
}

/// Is the map's item format this build's? `Ok(true)`: it says so;
/// `Ok(false)`: the map holds no item and no format record (new); an
/// error: another format ([`StoreError::Format`]).
fn check_format(kv: &mut dyn Kv) -> Result<bool> {
    let mut buf = Vec::new();
    if kv.get_into(META_FORMAT, &mut buf)? {
        if buf == FORMAT {
            return Ok(true);
        }
        return Err(StoreError::Format {
            found: format!("format record '{}'", buf.escape_ascii()),
        });
    }
    // No record: a new map, or one the first format filled. Every item
    // store of that format reserved CAS ids first (`\0cas`), except one
    // given its CAS by the client (meta E) — hence the scan, which on a
    // new map sees nothing.
    let old = || StoreError::Format {
        found: "item format 1 (no checksum, no format record)".into(),
    };
    if kv.get_into(META_CAS, &mut buf)? {
        return Err(old());
    }
    let mut any = false;
    kv.scan_prefix(b"k", &mut |_, _| any = true)?;
    if any {
        return Err(old());
    }
    Ok(false)
}

/// An expiry as stored: 0 = never, 1 = long ago (already expired).
fn stored_exptime(e: Expiry) -> u64 {
    match e {
        Expiry::Never => 0,
        Expiry::At(t) => t.max(1),
        Expiry::Expired => 1,
    }
}

/// State every shard shares: the CAS counter, the flush marker, statistics.
#[derive(Debug)]
pub struct Shared {
    next_cas: AtomicU64,
    /// CAS ids below this are reserved durably (`\0cas`).
    reserved: AtomicU64,
    reserve_lock: Mutex<()>,
    flush: Mutex<(u64, u64)>,
    flush_at: AtomicU64,
    flush_cas: AtomicU64,
    pub max_item_size: usize,
    pub stats: Stats,
    /// Shards whose start-up seeding ([`Cache::seed`]) is not finished.
    seeding: AtomicUsize,
    /// The start-up scan failed: counts and eviction miss the keys it did
    /// not reach.
    pub scan_failed: AtomicBool,
    /// `stats detail` (per-prefix counts).
    pub detail: crate::observe::Detail,
    /// Log watchers (`watch`).
    pub log: crate::observe::Log,
    /// Items by memcached slab class (`stats slabs`, `stats items`).
    pub slabs: slabs::SlabStats,
    /// Reads verify each item's checksum (always, but for the measurement
    /// of what verifying costs: [`Shared::set_verify`]).
    verify: AtomicBool,
}

/// Counters for `stats` (volatile, since start). `curr_items` and `bytes`
/// are the sums of the shards' eviction views ([`evict::Clock`]): exact
/// once the start-up scan has seeded them ([`Shared::counted`]). `bytes`
/// charges an item its map key, header and data, as memcached's counts
/// item sizes.
#[derive(Debug, Default)]
pub struct Stats {
    pub curr_items: AtomicI64,
    pub total_items: AtomicU64,
    pub bytes: AtomicI64,
    pub cmd_get: AtomicU64,
    pub cmd_set: AtomicU64,
    pub cmd_touch: AtomicU64,
    pub cmd_flush: AtomicU64,
    pub get_hits: AtomicU64,
    pub get_misses: AtomicU64,
    pub get_expired: AtomicU64,
    pub get_flushed: AtomicU64,
    pub delete_hits: AtomicU64,
    pub delete_misses: AtomicU64,
    pub incr_hits: AtomicU64,
    pub incr_misses: AtomicU64,
    pub decr_hits: AtomicU64,
    pub decr_misses: AtomicU64,
    pub cas_hits: AtomicU64,
    pub cas_misses: AtomicU64,
    pub cas_badval: AtomicU64,
    pub touch_hits: AtomicU64,
    pub touch_misses: AtomicU64,
    /// Group commits of more than one request, and the requests in them.
    pub group_commits: AtomicU64,
    pub grouped_requests: AtomicU64,
    /// Items deleted to make room (memcached's `evictions`).
    pub evictions: AtomicU64,
    /// Gets answered on the read fast path (hits and misses), not by a
    /// shard ([`crate::server`]).
    pub fast_gets: AtomicU64,
}

impl Stats {
    /// `stats reset`: the command and hit counters start again at 0 (the
    /// item counts stay, as in memcached).
    pub fn reset(&self) {
        for c in [
            &self.total_items,
            &self.cmd_get,
            &self.cmd_set,
            &self.cmd_touch,
            &self.cmd_flush,
            &self.get_hits,
            &self.get_misses,
            &self.get_expired,
            &self.get_flushed,
            &self.delete_hits,
            &self.delete_misses,
            &self.incr_hits,
            &self.incr_misses,
            &self.decr_hits,
            &self.decr_misses,
            &self.cas_hits,
            &self.cas_misses,
            &self.cas_badval,
            &self.touch_hits,
            &self.touch_misses,
            &self.group_commits,
            &self.grouped_requests,
            &self.evictions,
            &self.fast_gets,
        ] {
            c.store(0, Relaxed);
        }
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Relaxed);
}

impl Shared {
    /// Load the persisted CAS mark and flush marker through `kv` (one
    /// thread, before serving). Two reads: the items are counted later, by
    /// [`Cache::seed_all`] or the server's background scan.
    /// Refuses a map of another item format ([`StoreError::Format`]); on
    /// a new map, durably records this build's ([`META_FORMAT`]) before
    /// any item is written.
    pub fn open(kv: &mut dyn Kv, max_item_size: usize) -> Result<Shared> {
        if !check_format(kv)? {
            kv.put_now(META_FORMAT, &FORMAT)?;
        }
        let mut buf = Vec::new();
        let mark = if kv.get_into(META_CAS, &mut buf)? {
            read_u64(&buf, 0).ok_or(StoreError::Corrupt("CAS mark"))?
        } else {
            1
        };
        let (at, fcas) = if kv.get_into(META_FLUSH, &mut buf)? {
            (
                read_u64(&buf, 0).ok_or(StoreError::Corrupt("flush marker"))?,
                read_u64(&buf, 8).ok_or(StoreError::Corrupt("flush marker"))?,
            )
        } else {
            (0, 0)
        };
        let stats = Stats::default();
        Ok(Shared {
            next_cas: AtomicU64::new(mark.max(1)),
            reserved: AtomicU64::new(mark.max(1)),
            reserve_lock: Mutex::new(()),
            flush: Mutex::new((at, fcas)),
            flush_at: AtomicU64::new(at),
            flush_cas: AtomicU64::new(fcas),
            max_item_size,
            stats,
            seeding: AtomicUsize::new(0),
            scan_failed: AtomicBool::new(false),
            detail: Default::default(),
            log: Default::default(),
            slabs: Default::default(),
            verify: AtomicBool::new(true),
        })
    }

    /// Do reads verify item checksums? (True unless turned off.)
    pub fn verifies(&self) -> bool {
        self.verify.load(Relaxed)
    }

    /// Turn checksum verification on reads off or on: only for measuring
    /// its cost (the bench); a server never turns it off, and items are
    /// written with their checksum either way.
    pub fn set_verify(&self, on: bool) {
        self.verify.store(on, Relaxed);
    }

    /// `n` shards will be seeded by a background scan.
    pub fn start_seeding(&self, n: usize) {
        self.seeding.store(n, Relaxed);
    }

    /// One shard's seeding is over.
    pub fn seeded_one(&self) {
        self.seeding
            .fetch_sub(1, std::sync::atomic::Ordering::Release);
    }

    /// Are `curr_items` and `bytes` complete (no seeding in progress)?
    pub fn counted(&self) -> bool {
        self.seeding.load(std::sync::atomic::Ordering::Acquire) == 0
    }

    /// A fresh CAS, never handed out before (also across restarts: the
    /// reservation is durable before the id is returned).
    fn new_cas(&self, kv: &mut dyn Kv) -> Result<u64> {
        let c = self.next_cas.fetch_add(1, Relaxed);
        if c >= self.reserved.load(Relaxed) {
            let _g = self.reserve_lock.lock();
            let mut r = self.reserved.load(Relaxed);
            if c >= r {
                while c >= r {
                    r += CAS_BATCH;
                }
                kv.put_now(META_CAS, &r.to_le_bytes())?;
                self.reserved.store(r, Relaxed);
            }
        }
        Ok(c)
    }

    /// Is `it` invisible at `now` because of a `flush_all`?
    fn flushed(&self, it: &Item, now: u64) -> bool {
        if it.cas <= self.flush_cas.load(Relaxed) {
            return true;
        }
        let at = self.flush_at.load(Relaxed);
        at != 0 && now >= at && it.time < at
    }

    /// Items in the map (expired ones not yet removed included).
    pub fn items(&self) -> u64 {
        self.stats.curr_items.load(Relaxed).max(0) as u64
    }
}

fn read_u64(b: &[u8], off: usize) -> Option<u64> {
    let s = b.get(off..off + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(u64::from_le_bytes(a))
}

/// Outcome of a storage command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOutcome {
    Stored(u64),
    NotStored,
    Exists,
    NotFound,
    TooLarge,
}

/// Outcome of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    Deleted,
    NotFound,
    Exists,
}

/// Outcome of incr/decr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOutcome {
    /// New value, new CAS, TTL left.
    Value(u64, u64, Option<u64>),
    NotFound,
    Exists,
    NonNumeric,
}

/// An arithmetic command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arith<'a> {
    pub incr: bool,
    pub delta: u64,
    /// On a miss, store this value with this client exptime.
    pub create: Option<(u64, i64)>,
    pub cas: Option<u64>,
    /// Client exptime to set on success.
    pub ttl: Option<i64>,
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
    fn set_exptime(&self, it: &mut Item, created: bool, now: u64) -> Option<u64> {
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
    /// [`evict::Clock::fetched`]).
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
    fn arith(&mut self, key: &[u8], a: Arith<'_>, now: u64) -> Result<ArithOutcome>;
    /// Make every item stored before `now + delay` (exptime rule) invisible
    /// from then on; `delay <= 0` flushes now.
    fn flush_all(&mut self, delay: i64, now: u64) -> Result<()>;
    fn shared(&self) -> &Shared;
}

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
    /// A planted bug (the crash checks show they catch it).
    fault: ItemFault,
}

/// A bug the crash checks plant in item writes ([`Cache::plant`]) to show
/// that `ferrite check server-items` catches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ItemFault {
    #[default]
    None,
    /// The item is first written with a zero checksum and the checksum
    /// in a second durable write, as if it were computed after the item's
    /// fence: a crash between leaves an item that does not verify.
    ChecksumLate,
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
    /// The map handle (to begin and commit a [`Group`]).
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
    pub fn with_budget(kv: K, shared: &'s Shared, budget: u64, seeding: bool) -> Self {
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
            fault: ItemFault::None,
        }
    }

    /// Plant `f` in this handle's item writes (the crash checks only).
    #[doc(hidden)]
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
    pub fn remote_hit(&mut self, map_key: &[u8], charge: u64) {
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
        if self.fault == ItemFault::ChecksumLate {
            let whole = self.buf.clone();
            self.buf[CRC_AT..HEADER].fill(0);
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

#[cfg(test)]
mod tests;
