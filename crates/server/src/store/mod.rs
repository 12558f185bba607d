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

mod cache;
#[cfg(any(test, feature = "checks"))]
mod fault;
mod group;
mod item;
mod ops;
mod shared;
pub use cache::{Cache, charge};
#[cfg(feature = "checks")]
pub use fault::ItemFault;
pub use group::Group;
pub use item::{Item, ItemCheck, verify_items};
use item::{check_format, stored_exptime};
pub use ops::{Arith, ArithOutcome, DeleteOutcome, MetaGet, MetaHit, Store, StoreOutcome};
use shared::bump;
pub use shared::{Shared, Stats};

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
pub(crate) const CAS_BATCH: u64 = 1 << 16;

const META_CAS: &[u8] = b"\0cas";
const META_FLUSH: &[u8] = b"\0flush";
/// The map key of the item format record (module docs).
pub const META_FORMAT: &[u8] = b"\0fmt";

/// Errors of the underlying map (or a corrupt item). The server answers
/// them with `SERVER_ERROR <message>`.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The durable map failed (its own error, as text).
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
        /// Which check failed.
        reason: &'static str,
    },
    /// The map holds items of a format this build does not read.
    #[error(
        "the pool's items are in {found}, not item format 2 (`FRSRVIT2`, with a checksum per item): this build refuses to read them; serve it with the build that wrote it, or start a new pool"
    )]
    Format {
        /// What the map holds instead, in words: its format record, or
        /// item format 1 (no record, but items or a CAS mark).
        found: String,
    },
    /// The map has no room for the write, even after eviction.
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
pub(crate) fn client_key_shown(map_key: &[u8]) -> String {
    let k = map_key.strip_prefix(b"k").unwrap_or(map_key);
    k.escape_ascii().to_string()
}

/// A store result.
pub type Result<T> = std::result::Result<T, StoreError>;

/// What [`Kv::scan_checked`] calls with each record: its key, and its
/// value or what the map's own checks found damaged.
pub type CheckedPair<'a> = dyn FnMut(&[u8], std::result::Result<&[u8], String>) + 'a;

/// One thread's handle on a durable map. `put` and `delete` return only
/// when their effect is durable.
pub trait Kv {
    /// Read `key` into `out` (cleared first); false when absent.
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;
    /// Write `key` = `value`, durable when it returns (unless inside a
    /// [`Group`]).
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
    /// Every pair of the map, for the deep check ([`verify_items`]): `f`
    /// gets each pair whose record the map verified (`Ok(value)`) and the
    /// key of each record the map's own checks found damaged
    /// (`Err(what)`), and the walk goes on past it. The default is
    /// [`scan_prefix`](Self::scan_prefix) over everything: a map whose
    /// records carry no checks of their own.
    fn scan_checked(&mut self, f: &mut CheckedPair<'_>) -> Result<()> {
        self.scan_prefix(b"", &mut |k, v| f(k, Ok(v)))
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
pub(crate) struct KvReader<K>(pub K);

impl<K: Kv> Reader for KvReader<K> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.0.get_into(key, out)
    }
}

/// What [`read_live`] found.
#[derive(Debug)]
pub(crate) enum ReadPath {
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
pub(crate) fn read_live(
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

#[cfg(test)]
mod tests;
