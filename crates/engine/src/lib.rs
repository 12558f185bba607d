//! `ferrite-engine`: the embedded key-value store, with the three storage
//! engine designs P2 measures (N-Store's) over any persistent allocator.
//!
//! - [`inp`]: **in place** — values updated where they live, a per-session
//!   write-ahead log for atomicity, a persistent B+tree index.
//! - [`cow`]: **copy on write** — a shadow-paged B+tree, an atomic root
//!   switch, many updates per switch under group commit.
//! - [`lsm`]: **log-structured merge tree** — a persistent memtable,
//!   immutable sorted runs in the pool, compaction, fence pointers and
//!   bloom filters.
//!
//! Each runs over any allocator behind `ferrite-alloc`'s
//! [`ferrite_alloc::PAllocator`] ([`AllocKind`]): P2's
//! allocator axis. PMDK's included: InP, which folds allocator operations
//! into its own log on Ferrite's allocators, runs an intent protocol on an
//! allocator that cannot `prepare` them ([`inp`] module docs).
//!
//! # API
//!
//! A [`Store`] is one open engine on a pool, and a cheap handle: clones
//! share it and may be used from any thread. Its own methods
//! ([`Store::get`], [`Store::put`], [`Store::batch`], [`Store::range`], …)
//! read through cached [`Reader`]s (no session: any number of threads
//! read at once) and write through one of a few cached sessions. A [`StoreSession`]
//! (from [`Store::session`]) is one thread's own handle, like a PMDK lane:
//! it owns that thread's allocator handle and log, and it is owned — it
//! may sit in a struct beside the store and move between threads; see
//! [`Session`] for its operations. [`Store::write`] opens a serializable
//! [`WriteTxn`] that reads its own writes; [`Store::snapshot`] a consistent
//! read-only [`Snapshot`]. Keys are 1 to [`MAX_KEY`] bytes, values 0 to
//! [`MAX_VALUE`] bytes; keys order bytewise; a [`KeyRange`] has bounds, a
//! prefix and a direction.
//!
//! ```no_run
//! use ferrite_engine::{EngineKind, KeyRange, Store, StoreOptions};
//! # fn main() -> Result<(), ferrite_engine::EngineError> {
//! let store = Store::create_file("/dev/shm/kv.pool", 64 << 20, &StoreOptions::new(EngineKind::Cow))?;
//! store.put(b"apple", b"red")?;
//! let mut s = store.session()?; // owned: Send + 'static
//! s.put(b"avocado", b"green")?;
//! let fruit: Vec<_> = store.range(KeyRange::prefix(b"a")).collect::<Result<_, _>>()?;
//! assert_eq!(fruit.len(), 2);
//! # Ok(()) }
//! ```
//!
//! # Durability contract
//!
//! `put`, `delete` and `batch` return only when their effect is durable in
//! the pool's domain; a batch is all or nothing after a crash. Opening a
//! store runs its recovery. `ferrite check engine-*` proves both on
//! simulated power failures.
//!
//! # Pool layout
//!
//! Data area of a pool of layout [`LAYOUT`] (offsets relative to it):
//!
//! ```text
//! 0 .. 4096                superblock (below)
//! 4096 .. engine_area      the engine's fixed area (its own format: roots, logs)
//! heap_off .. +heap_len    the allocator's heap (its own format)
//! ```
//!
//! Superblock, little-endian, written once at create and persisted (the
//! `ferrite_pmem::superblock` frame: magic, version, CRC32C of bytes 0..60;
//! `superblock.rs` encodes it):
//!
//! ```text
//!  0  8  magic "FRTENGN1"
//!  8  2  format version (1)
//! 10  1  engine: 1 inp, 2 cow, 3 lsm
//! 11  1  allocator: 1 ferrite heap, 2 lock heap, 3 PMDK (external)
//! 12  4  sessions: most sessions open at once
//! 16  8  engine area length (bytes from data start, multiple of 4096)
//! 24  8  heap offset (from data start, multiple of 4096); 0 with an external allocator
//! 32  8  heap length; 0 with an external allocator
//! 40  8  nonce (seeds record checksums, so stale records of an earlier store never validate)
//! 48 12  reserved, zero
//! 60  4  CRC32C of bytes 0..60
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod breakdown;
pub mod cow;
mod ctx;
pub mod error;
mod fault;
mod gate;
pub mod inp;
pub mod lsm;
pub mod range;
pub mod store;
mod superblock;
pub mod txn;
pub mod verify;

#[cfg(any(test, feature = "checks"))]
pub mod checks;

pub use error::{EngineError, Result};
// Planted bugs: public only with the `checks` feature (`fault.rs`).
#[cfg(feature = "checks")]
pub use fault::Fault;
#[cfg(not(feature = "checks"))]
pub(crate) use fault::Fault;
pub use range::KeyRange;
pub use store::{RangeIter, Store, StoreSession, area_bytes};
pub use superblock::Superblock;
pub use txn::{Reader, Snapshot, WriteTxn};

use ferrite_alloc::{PAllocator, RecoveryReport};
pub use ferrite_pmem::Domain;
use std::ops::Bound;
use std::time::Duration;

/// Layout name of every engine pool (the superblock says which engine).
pub const LAYOUT: &str = "ferrite-kv";
/// Longest key, bytes.
pub const MAX_KEY: usize = 1024;
/// Longest value, bytes.
pub const MAX_VALUE: usize = 1 << 20;

/// Which engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// In place: values updated where they live, a redo log per session.
    Inp,
    /// Copy on write: a shadow-paged B+tree, atomic root switches.
    Cow,
    /// Log-structured merge tree: memtable, sorted runs, compaction.
    Lsm,
}

impl EngineKind {
    /// Every engine.
    pub const ALL: [EngineKind; 3] = [EngineKind::Inp, EngineKind::Cow, EngineKind::Lsm];

    /// Short name (`inp`, `cow`, `lsm`): tables, the CLI, options.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Inp => "inp",
            EngineKind::Cow => "cow",
            EngineKind::Lsm => "lsm",
        }
    }

    /// The engine named `s` ([`name`](Self::name)).
    pub fn parse(s: &str) -> Option<EngineKind> {
        EngineKind::ALL.into_iter().find(|k| k.name() == s)
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            EngineKind::Inp => 1,
            EngineKind::Cow => 2,
            EngineKind::Lsm => 3,
        }
    }

    pub(crate) fn from_code(c: u8) -> Option<EngineKind> {
        EngineKind::ALL.into_iter().find(|k| k.code() == c)
    }
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which persistent allocator holds the engine's blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AllocKind {
    /// `ferrite_alloc::Heap`: size-class runs, per-thread lanes.
    Ferrite,
    /// `ferrite_alloc::LockHeap`: one lock, per-block headers (N-Store's default).
    Lock,
    /// PMDK's `pmemobj` heap (reserve / publish / defer-free), in a PMDK
    /// pool: only through [`Store::create_with`] (ferrite-bench, feature `pmdk`).
    Pmdk,
}

impl AllocKind {
    /// The allocators of a Ferrite pool (PMDK's needs its own pool).
    pub const ALL: [AllocKind; 2] = [AllocKind::Ferrite, AllocKind::Lock];

    /// Short name (`ferrite`, `nstore-lock`, `pmdk`).
    pub fn name(self) -> &'static str {
        match self {
            AllocKind::Ferrite => "ferrite",
            AllocKind::Lock => "nstore-lock",
            AllocKind::Pmdk => "pmdk",
        }
    }

    /// The allocator named `s` (`lock` also names `nstore-lock`).
    pub fn parse(s: &str) -> Option<AllocKind> {
        match s {
            "ferrite" => Some(AllocKind::Ferrite),
            "nstore-lock" | "lock" => Some(AllocKind::Lock),
            "pmdk" => Some(AllocKind::Pmdk),
            _ => None,
        }
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            AllocKind::Ferrite => 1,
            AllocKind::Lock => 2,
            AllocKind::Pmdk => 3,
        }
    }

    pub(crate) fn from_code(c: u8) -> Option<AllocKind> {
        [AllocKind::Ferrite, AllocKind::Lock, AllocKind::Pmdk]
            .into_iter()
            .find(|k| k.code() == c)
    }
}

impl std::fmt::Display for AllocKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How to create (or open) a store. Every setting has a default that needs
/// no tuning: `StoreOptions::default()` creates an InP store with 8
/// sessions on the Ferrite heap, in the domain `FERRITE_DOMAIN` names or
/// detection finds, and opens any store.
///
/// At open, the engine and the session count come from the store's
/// superblock; the ones set here are *expectations*: a store of another
/// engine is refused with [`EngineError::WrongEngine`], one created for
/// fewer sessions than asked with [`EngineError::BadOption`] (the count is
/// fixed at create: each session has its log and allocator lane). Left
/// unset, any store opens.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    pub(crate) engine: EngineKind,
    engine_set: bool,
    pub(crate) allocator: AllocKind,
    pub(crate) sessions: u16,
    sessions_set: bool,
    pub(crate) domain: Option<Domain>,
    pub(crate) size: Option<u64>,
    pub(crate) max_size: Option<u64>,
    pub(crate) nonce: Option<u64>,
    /// InP's knobs (log size per session, intent log).
    pub inp: inp::Options,
    /// CoW's knobs (node size, inline values, group commit).
    pub cow: cow::Options,
    /// LSM's knobs (memtable size, run fan-out, bloom bits).
    pub lsm: lsm::Options,
    pub(crate) fault: Fault,
    pub(crate) verify: bool,
}

/// Pool size of a store on the single-lock allocator (which cannot grow)
/// when no [`size`](StoreOptions::size) is given: 64 MiB.
pub const DEFAULT_SIZE: u64 = 64 << 20;

/// The most a store [`Store::open_or_create`] creates without a
/// [`size`](StoreOptions::size) or [`max_size`](StoreOptions::max_size)
/// may grow to: 1 TiB (address space is reserved for it; the file holds
/// only what is used).
pub const DEFAULT_MAX_SIZE: u64 = 1 << 40;

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            engine: EngineKind::Inp,
            engine_set: false,
            allocator: AllocKind::Ferrite,
            sessions: 8,
            sessions_set: false,
            domain: None,
            size: None,
            max_size: None,
            nonce: None,
            inp: inp::Options::default(),
            cow: cow::Options::default(),
            lsm: lsm::Options::default(),
            fault: Fault::None,
            verify: true,
        }
    }
}

impl StoreOptions {
    /// Whether reads verify the checksums of what they return (default
    /// true). Off **only to measure what verification costs**
    /// (`examples/verify_cost.rs`): reads then return damaged bytes as
    /// data, and an InP store also skips computing its tuples' and nodes'
    /// checksums on writes — a store written so fails verification later.
    pub fn verify(mut self, on: bool) -> StoreOptions {
        self.verify = on;
        self
    }

    /// Options for a store of `engine` (and an open that expects it).
    pub fn new(engine: EngineKind) -> StoreOptions {
        StoreOptions::default().engine(engine)
    }

    /// The engine to create, and to expect at open.
    pub fn engine(mut self, e: EngineKind) -> StoreOptions {
        self.engine = e;
        self.engine_set = true;
        self
    }

    /// The persistent allocator (create only; recorded in the superblock).
    pub fn allocator(mut self, a: AllocKind) -> StoreOptions {
        self.allocator = a;
        self
    }

    /// Most sessions open at once, 1..=1000 (each holds a log and an
    /// allocator lane). Store-level operations ([`Store::get`],
    /// [`Store::put`], …) wait for a free session instead of failing.
    pub fn sessions(mut self, n: u16) -> StoreOptions {
        self.sessions = n;
        self.sessions_set = true;
        self
    }

    /// The durability domain of a pool file the store creates or opens
    /// (default: `FERRITE_DOMAIN`, else detection: `adr` on a DAX mapping,
    /// `msync` on an ordinary file).
    pub fn domain(mut self, d: Domain) -> StoreOptions {
        self.domain = Some(d);
        self
    }

    /// Size in bytes of a pool file [`Store::open_or_create`] creates (a
    /// whole number of 4 KiB pages). Alone, it fixes the size, as LMDB's
    /// map size does: the store never grows and reports
    /// [`EngineError::Full`] when it is. With [`max_size`](Self::max_size)
    /// it is the initial size. Without either, a store starts small and
    /// grows on demand up to [`DEFAULT_MAX_SIZE`].
    pub fn size(mut self, bytes: u64) -> StoreOptions {
        self.size = Some(bytes);
        self
    }

    /// Lets a store created with these options grow on demand up to
    /// `bytes` (rounded up to a MiB): its file is extended and mapped
    /// further in place, without moving what readers hold (see
    /// `ferrite_pmem::Mapping::grow_to`). Growth is crash-safe: the
    /// allocator records the pages it uses only after the file holds them.
    /// Only the default allocator grows ([`AllocKind::Ferrite`]).
    pub fn max_size(mut self, bytes: u64) -> StoreOptions {
        self.max_size = Some(bytes);
        self
    }

    /// A fixed nonce instead of a random one: reproducible pool images for
    /// tests. Two stores with one nonce can mistake each other's stale
    /// records for their own; never use it for data.
    #[doc(hidden)]
    pub fn nonce(mut self, n: u64) -> StoreOptions {
        self.nonce = Some(n);
        self
    }

    /// Plants a bug on purpose (the crash checks show they catch it).
    #[cfg(any(test, feature = "checks"))]
    #[doc(hidden)]
    pub fn fault(mut self, f: Fault) -> StoreOptions {
        self.fault = f;
        self
    }

    /// The engine these options create.
    pub fn engine_kind(&self) -> EngineKind {
        self.engine
    }

    /// The domain set with [`domain`](Self::domain), if any.
    pub fn domain_choice(&self) -> Option<Domain> {
        self.domain
    }

    /// Refuses a store whose superblock disagrees with what was asked.
    pub(crate) fn expect(&self, found: EngineKind, sessions: u16) -> Result<()> {
        if self.engine_set && found != self.engine {
            return Err(EngineError::WrongEngine {
                found: found.name().into(),
                asked: self.engine.name().into(),
            });
        }
        if self.sessions_set && self.sessions > sessions {
            return Err(EngineError::BadOption(format!(
                "the store was created for at most {sessions} sessions, not {}",
                self.sessions
            )));
        }
        Ok(())
    }
}

/// When a commit is durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Durability {
    /// Durable when the call returns (the default of every write).
    #[default]
    Immediate,
    /// Relaxed (redb's `Durability::None`, LMDB's `MDB_NOSYNC`): the
    /// commit is visible at once and durable at the next immediate commit,
    /// [`Store::sync`] or close. A crash loses a suffix of relaxed commits
    /// — never part of one, never one without all after it. The LSM
    /// engine skips the commit's fence; InP and CoW commit immediately
    /// anyway (what they would save is not the fence).
    Eventual,
}

/// One write of an atomic batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op<'a> {
    /// Insert or replace `key`.
    Put {
        /// The key (1 to [`MAX_KEY`] bytes).
        key: &'a [u8],
        /// Its new value (up to [`MAX_VALUE`] bytes).
        value: &'a [u8],
    },
    /// Remove `key` (nothing when absent).
    Delete {
        /// The key.
        key: &'a [u8],
    },
}

impl Op<'_> {
    /// The key the operation writes.
    pub fn key(&self) -> &[u8] {
        match self {
            Op::Put { key, .. } | Op::Delete { key } => key,
        }
    }
}

/// What opening a store did.
#[derive(Clone, Debug, Default)]
pub struct EngineRecovery {
    /// Wall time of the whole open (allocator recovery included).
    pub elapsed: Duration,
    /// The allocator's own recovery.
    pub alloc: RecoveryReport,
    /// Log records (or batches) recovery replayed or rolled back.
    pub replayed: usize,
    /// Live keys found.
    pub keys: u64,
    /// One line on what the engine's recovery did.
    pub detail: String,
}

/// Counters of an open store (volatile; since open).
#[derive(Clone, Debug, Default)]
pub struct EngineStats {
    /// Live keys (LSM: 0 when a run could not be read; [`Store::len`]
    /// reports the error).
    pub keys: u64,
    /// Root switches (CoW), memtable flushes and compactions (LSM), log
    /// truncations (InP): one line of engine-specific counts.
    pub detail: String,
}

/// What a full walk of a quiesced store found (checks and `pool check`).
#[derive(Clone, Debug, Default)]
pub struct Walk {
    /// Live key → value pairs, in key order as the engine returned them.
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
    /// Every allocator block the engine references: (pool offset, bytes
    /// the engine needs in it). Each block once.
    pub blocks: Vec<(u64, u64)>,
}

/// One damaged record found by [`Engine::scrub`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// The record's key as stored, when it could be read (a tuple whose
    /// checksum fails: its key bytes may be among the damaged ones);
    /// `None` for an index node.
    pub key: Option<Vec<u8>>,
    /// Pool offset of the damaged block (tuple or node).
    pub off: u64,
    /// What is wrong, and for a node the key range it held (every key
    /// in it is unreadable).
    pub detail: String,
    /// Where the engine links it (InP: the leaf and slot of a tuple), for
    /// [`Engine::remove_damaged`]; 0 when nothing can unlink it alone.
    pub leaf: u64,
    /// The slot in `leaf` (InP).
    pub slot: u32,
    /// For a damaged node: the keys it held, `lo <= key < hi` (`None`:
    /// unbounded) — every one of them is unreadable. For a record: its key
    /// range is its key alone (`lo` = `hi` = `None` here).
    pub span: Option<KeySpan>,
}

/// A key range `lo <= key < hi` (`None`: unbounded).
pub type KeySpan = (Option<Vec<u8>>, Option<Vec<u8>>);

impl Damage {
    /// True when the damage makes `key` unreadable (its record, or a node
    /// whose span holds it).
    pub fn covers(&self, key: &[u8]) -> bool {
        match &self.span {
            Some((lo, hi)) => {
                lo.as_deref().is_none_or(|l| key >= l) && hi.as_deref().is_none_or(|h| key < h)
            }
            None => self.key.as_deref() == Some(key),
        }
    }
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.key {
            Some(k) => write!(f, "key {}: {}", error::show_key(k), self.detail),
            None => write!(f, "block {:#x}: {}", self.off, self.detail),
        }
    }
}

/// What [`Engine::scrub`] found.
#[derive(Clone, Debug, Default)]
pub struct Scrub {
    /// Records (key-value pairs) read and verified.
    pub records: u64,
    /// Bytes of records and nodes read.
    pub bytes: u64,
    /// Every damaged record and node, in key order as far as known.
    pub damaged: Vec<Damage>,
    /// True when the engine lists each damaged record (InP, CoW; the
    /// LSM each damaged data block, with the keys it holds); false when
    /// it stops at the first damage it meets (the default: a walk).
    pub per_record: bool,
}

/// One thread's handle on a [`Store`]. Not shared between threads.
///
/// Every write is durable when it returns. Errors leave the store as it
/// was before the call (a failed batch applied nothing).
pub trait Session {
    /// Reads `key` into `out` (cleared first); false when absent.
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;
    /// Inserts or replaces.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Removes; false when the key was absent.
    fn delete(&mut self, key: &[u8]) -> Result<bool>;
    /// Calls `f` for up to `limit` pairs with keys `>= from`, in key order,
    /// until it returns false (the engine then reads no further pair);
    /// returns how many it visited.
    fn scan_with(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize>;
    /// Calls `f` for up to `limit` pairs with keys below `upto`
    /// (`Included`: `<=`, `Excluded`: `<`, `Unbounded`: every key), in
    /// descending key order, until it returns false; returns how many it
    /// visited.
    fn scan_back_with(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize>;
    /// Applies every operation atomically (all or nothing after a crash);
    /// later operations on the same key win.
    fn batch(&mut self, ops: &[Op<'_>]) -> Result<()>;

    /// [`batch`](Self::batch) with a choice of [`Durability`] (the
    /// engines without a relaxed commit commit immediately).
    fn batch_with(&mut self, ops: &[Op<'_>], d: Durability) -> Result<()> {
        let _ = d;
        self.batch(ops)
    }

    /// Visits the pairs of `range` in its order until `f` returns false;
    /// returns how many pairs `f` saw. Read in chunks of up to
    /// [`range::MAX_CHUNK`] pairs, each a consistent view of its own.
    fn range_with(
        &mut self,
        range: &KeyRange,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        range::drive(&mut range::SessionScan(self), range, f)
    }

    /// The pairs of `range`, in its order (collected: for long ranges
    /// prefer [`range_with`](Self::range_with) or [`Store::range`]).
    fn range(&mut self, range: &KeyRange) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        range::collect(|f| self.range_with(range, f))
    }

    /// The pair with the least key.
    fn first(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let mut out = None;
        self.scan_with(&[], 1, &mut |k, v| {
            out = Some((k.to_vec(), v.to_vec()));
            false
        })?;
        Ok(out)
    }

    /// The pair with the greatest key.
    fn last(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let mut out = None;
        self.scan_back_with(Bound::Unbounded, 1, &mut |k, v| {
            out = Some((k.to_vec(), v.to_vec()));
            false
        })?;
        Ok(out)
    }

    /// Reads `key`.
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Ok(self.get_into(key, &mut out)?.then_some(out))
    }

    /// Up to `limit` pairs with keys `>= from`, in key order.
    fn scan(&mut self, from: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut v = Vec::new();
        self.scan_with(from, limit, &mut |k, val| {
            v.push((k.to_vec(), val.to_vec()));
            true
        })?;
        Ok(v)
    }
}

/// A consistent, read-only view of an engine: what [`Store::snapshot`]
/// wraps. Every read sees the store as it was when the view was taken,
/// whatever commits after. Not shared between threads.
pub trait SnapshotRead {
    /// Reads `key` into `out` (cleared first); false when absent.
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;
    /// As [`Session::scan_with`].
    fn scan_with(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize>;
    /// As [`Session::scan_back_with`].
    fn scan_back_with(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize>;
    /// Live keys in the view (InP, CoW: a counter; LSM: a merge of the
    /// memtable and every run).
    fn len(&mut self) -> Result<u64>;
    /// True when the view holds no key.
    fn is_empty(&mut self) -> Result<bool> {
        let mut any = false;
        self.scan_with(&[], 1, &mut |_, _| {
            any = true;
            false
        })?;
        Ok(!any)
    }
}

/// An open engine. Implemented by [`inp`], [`cow`] and [`lsm`]; reached
/// through [`Store`].
pub trait Engine: Send + Sync {
    /// Which engine this is.
    fn kind(&self) -> EngineKind;
    /// Opens a session for the calling thread.
    fn session(&self) -> Result<Box<dyn Session + Send + '_>>;
    /// A consistent read-only view (isolation per engine: [`Store::snapshot`]).
    fn snapshot(&self) -> Result<Box<dyn SnapshotRead + Send + '_>>;
    /// A live reader: each read sees the store as it is then (no view
    /// across reads). It holds no session, allocator lane or lock between
    /// reads, so any number may be open.
    fn reader(&self) -> Box<dyn SnapshotRead + Send + '_>;
    /// Live keys now (InP, CoW: a counter; LSM: a merge of every run).
    fn len(&self) -> Result<u64>;
    /// True when the engine holds no key.
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
    /// The allocator holding the engine's blocks.
    fn allocator(&self) -> &dyn PAllocator;
    /// What open did.
    fn recovery(&self) -> &EngineRecovery;
    /// Counters since open.
    fn stats(&self) -> EngineStats;
    /// Reads every record and index node and verifies its checksum,
    /// going on past damage: every damaged record is listed. `pace` is
    /// called with the bytes read so far after each node (the caller may
    /// sleep there to bound the rate). Holds the engine's read lock
    /// throughout (writers wait). The default (an engine without its own) is its
    /// [`walk`](Self::walk), which verifies every node and value but stops
    /// at the first damage: one entry, naming the block.
    fn scrub(&self, pace: &mut dyn FnMut(u64)) -> Result<Scrub> {
        let mut out = Scrub::default();
        match self.walk() {
            Ok(w) => {
                out.records = w.entries.len() as u64;
                out.bytes = w.blocks.iter().map(|b| b.1).sum();
                pace(out.bytes);
            }
            // The walk stops at the first damage: everything is suspect.
            Err(e) => out.damaged.push(Damage {
                key: None,
                off: 0,
                detail: e.to_string(),
                leaf: 0,
                slot: 0,
                span: Some((None, None)),
            }),
        }
        Ok(out)
    }
    /// Unlinks the damaged records `damaged` (from [`scrub`](Self::scrub))
    /// that can be removed alone — InP: a tuple whose leaf verifies —
    /// as one durable write: they read as absent afterwards. Returns a
    /// line per record removed; damage it cannot remove (a node: the keys
    /// below it are unreadable) is left and not listed.
    fn remove_damaged(&self, damaged: &[Damage]) -> Result<Vec<String>> {
        let _ = damaged;
        Ok(Vec::new())
    }
    /// Finishes background work (LSM compaction, a pending group commit,
    /// relaxed commits made durable) so that a [`walk`](Self::walk) sees a
    /// settled store.
    fn quiesce(&self) -> Result<()>;
    /// Makes every relaxed commit ([`Durability::Eventual`]) durable.
    fn sync(&self) -> Result<()> {
        Ok(())
    }
    /// Walks the whole store (no session may be writing): contents in key
    /// order and every referenced block. Corruption is an error, never a panic.
    fn walk(&self) -> Result<Walk>;
}

/// Refuses keys outside 1..=[`MAX_KEY`] bytes.
pub fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY {
        return Err(EngineError::KeySize {
            len: key.len(),
            max: MAX_KEY,
        });
    }
    Ok(())
}

/// Refuses values over [`MAX_VALUE`] bytes.
pub fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE {
        return Err(EngineError::ValueSize {
            len: value.len(),
            max: MAX_VALUE,
        });
    }
    Ok(())
}

/// A key's first 8 bytes as a big-endian number (zero-padded): ordering
/// by it agrees with the keys' order wherever it differs.
#[inline]
pub(crate) fn key_prefix(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

/// The positions of `ops` in key order, stably: of two operations on one
/// key the later comes later (a batch's rule: the last one wins). A batch
/// already in key order (a write transaction's commit sorts its own) is
/// checked in one pass, not sorted again.
pub(crate) fn key_order(ops: &[Op<'_>]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..ops.len()).collect();
    if !ops.windows(2).all(|w| w[0].key() <= w[1].key()) {
        idx.sort_by(|&a, &b| ops[a].key().cmp(ops[b].key()));
    }
    idx
}

/// Refuses a batch any of whose keys or values is out of bounds.
pub fn check_ops(ops: &[Op<'_>]) -> Result<()> {
    for op in ops {
        check_key(op.key())?;
        if let Op::Put { value, .. } = op {
            check_value(value)?;
        }
    }
    Ok(())
}
