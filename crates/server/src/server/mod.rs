//! The network server: connection threads in front of shard threads that
//! own the store.
//!
//! # Threads
//!
//! * An acceptor thread takes connections (and SIGINT/SIGTERM) and hands
//!   them round-robin to `threads` connection threads, as memcached's
//!   listener hands them to its workers.
//! * Each connection thread runs a single-threaded tokio runtime that
//!   drives its connections: a connection reads into a buffer,
//!   [`parse`](crate::protocol::parse)s every complete request in it
//!   (pipelining), answers each and appends the encoded reply to a write
//!   buffer, which is written out when the input holds no complete request
//!   any more.
//! * `shards` plain threads each own one [`Cache`] (one store session:
//!   sessions are per-thread handles). A key's writes always go to shard
//!   `fnv1a(key) % shards`, so every read-modify-write of a key runs alone
//!   (see [`crate::store`]'s "Atomicity").
//!
//! Under load a shard commits the writes of all the requests queued at once
//! in one durable batch (group commit, [`Group`]), up to
//! [`Options::group_commit`] requests.
//!
//! # The read fast path
//!
//! A plain `get`/`gets` (text or binary; not meta, not get-and-touch) does
//! not cross to the shard: the connection thread looks the key up through
//! its own [`Reader`] (one per connection thread, where the store has one)
//! and answers a hit or a miss at once, as memcached answers a get on the
//! thread that read it. Only an expired or flushed item (whose removal is a
//! write) and a read error go to the shard. The shard still keeps its
//! eviction view exact: the hit is queued for it as a hint (the key's
//! referenced bit and fetched mark), applied before its next request. When
//! a shard's hint queue is full (`HINTS_MAX`, 4096 hits: a shard that has
//! had no request for that long) the get goes to the shard instead, so no
//! fetch is ever lost from the view. Readers see only durable writes
//! ([`Reader`]), so the rule below holds for fast replies too.
//!
//! # Start-up
//!
//! The server listens as soon as the store is open (its recovery is bounded
//! by the logs, not the data). The item counts and the shards' eviction
//! views are then built by a scan of the store on the calling thread, in
//! the background of serving ([`run`]); `stats` waits for it.
//!
//! # Durability of replies
//!
//! A shard runs a write to completion — the [`Kv`]'s `put`/`delete`
//! return only when durable — before it hands the encoded reply back; the
//! connection sends nothing it has not received. So every reply a client
//! sees describes a durable state.

use crate::auth::Auth;
use crate::protocol::Limits;
use crate::store::{Cache, Group, Kv, Reader, Shared, StoreError};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

mod conn;
mod exec;
mod get;
mod shard;
mod stats;
pub use conn::FLUSH_AT;
use conn::{Flow, MULTIGET_BATCH, acceptor, flush, on_shard, to_shard, worker};
use exec::execute;
use get::{GetEnd, encode_hit, get_keys};
use shard::{Hints, Job, Msg, seed_shards, shard_loop};
use stats::{admin, stats};

/// The version string: memcached 1.6's protocol, Ferrite's server.
pub const VERSION: &str = concat!("1.6.21-ferrite-", env!("CARGO_PKG_VERSION"));

/// Serving options.
#[derive(Debug, Clone)]
pub struct Options {
    /// Connection threads (each a single-threaded tokio runtime).
    pub threads: usize,
    /// Store shard threads (each holds one store session).
    pub shards: usize,
    /// Parsing limits (key, value and line sizes).
    pub limits: Limits,
    /// Most queued requests a shard commits with one durable batch (group
    /// commit); 1 = every write commits alone.
    pub group_commit: usize,
    /// Bytes of items the server keeps (`limit_maxbytes`; an item charges
    /// its key, 32-byte header and data): each shard keeps at most its
    /// share and evicts its least recently used items beyond it. Writes
    /// also evict when the pool itself is full.
    pub memory: u64,
    /// What `stats` reports as the store (`ferrite_store`).
    pub store_name: String,
    /// Require authentication (memcached `-Y`; binary SASL PLAIN from the
    /// same file): see [`crate::auth`].
    pub auth: Option<Arc<Auth>>,
    /// Most connections at once (memcached `-c`): one more is told
    /// `ERROR Too many open connections` and closed.
    pub max_conns: usize,
    /// Close a connection that sends nothing, or takes none of its
    /// replies, for this long (memcached `-o idle_timeout`; `None`: never).
    pub idle_timeout: Option<Duration>,
    /// Also serve TLS on this listener.
    pub tls: Option<Tls>,
}

/// memcached's default `-c`.
pub const DEFAULT_MAX_CONNS: usize = 1024;

/// Why serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A socket, listener or thread could not be set up.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The store could not be opened or its shared state read.
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

/// Told to the caller once the server accepts connections (the items are
/// still being counted in the background then).
#[derive(Debug, Clone)]
pub struct Ready {
    /// The plain listener's address (the port when 0 was asked for).
    pub addr: SocketAddr,
    /// The TLS listener's address ([`Options::tls`]).
    pub tls_addr: Option<SocketAddr>,
    /// Shard threads started (at least 1).
    pub shards: usize,
}

/// A TLS listener beside the plain one ([`crate::tls`]).
#[derive(Debug, Clone)]
pub struct Tls {
    /// The certificates and key to serve with ([`crate::tls::server_config`]).
    pub config: Arc<tokio_rustls::rustls::ServerConfig>,
    /// The TLS listener, already bound.
    pub listener: Arc<std::net::TcpListener>,
}

/// State every connection shares.
struct Ctx<'s> {
    shards: Vec<mpsc::Sender<Msg>>,
    /// One per shard.
    hints: &'s [Hints],
    shared: &'s Shared,
    opts: Options,
    started: Instant,
    curr_conns: AtomicU32,
    total_conns: AtomicU64,
    /// The start-up scan is over and its store handle closed.
    scan_over: AtomicBool,
    /// Live connections by id (`stats conns`).
    conns: Mutex<BTreeMap<u64, ConnInfo>>,
    next_conn: AtomicU64,
    /// Connections refused for `max_conns`.
    rejected_conns: AtomicU64,
}

/// A live connection, for `stats conns`.
struct ConnInfo {
    peer: String,
    local: String,
    last_cmd: Instant,
}

impl Ctx<'_> {
    /// The shard that owns `key`.
    fn shard_of(&self, key: &[u8]) -> usize {
        (fnv1a(key) % self.shards.len() as u64) as usize
    }
}

/// Opens a read fast path handle (`None`: none to be had).
type MakeReader<'r> = dyn Fn() -> Option<Box<dyn Reader + 'r>> + Sync + 'r;

/// A connection thread's read fast path: its reader and scratch space.
/// Borrowed by one connection at a time, never across an await.
struct Fast<'r> {
    reader: Option<Box<dyn Reader + 'r>>,
    make: &'r MakeReader<'r>,
    /// A thread that found no reader at start tries once more when the
    /// start-up scan is over: the scan's store handle is free then.
    retried: bool,
    map_key: Vec<u8>,
    buf: Vec<u8>,
}

type FastCell<'r> = RefCell<Fast<'r>>;

/// Unix time in seconds.
pub(crate) fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// 64-bit FNV-1a: which shard owns a key.
fn fnv1a(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Serve on `listener` until SIGINT/SIGTERM or until `stop` fires.
///
/// `make_kv` opens one store handle; it is called once on the calling
/// thread and once on each shard thread, and all these handles are open at
/// once (the store needs `shards + 1` sessions). `make_reader` opens a
/// connection thread's read fast path handle ([`Reader`]); it is called
/// on each connection thread, and `Ok(None)` or an error leaves that
/// thread sending every get to the shards. The calling thread loads the
/// shared state (two reads), starts the shards, the connection threads and
/// the acceptor, calls `ready`, and only then scans the store with its
/// handle, in the background of serving: the scan seeds each shard's
/// eviction view and item counts (`stats` waits for it; gets and sets do
/// not).
pub fn run<K, F, R, G>(
    make_kv: F,
    make_reader: G,
    opts: Options,
    listener: std::net::TcpListener,
    stop: Option<oneshot::Receiver<()>>,
    ready: impl FnOnce(&Ready),
) -> Result<(), ServeError>
where
    K: Kv,
    F: Fn() -> Result<K, StoreError> + Sync,
    R: Reader,
    G: Fn() -> Result<Option<R>, StoreError> + Sync,
{
    let mut scan_kv = make_kv()?;
    let shared = Shared::open(&mut scan_kv, opts.limits.max_item_size)?;
    let nshards = opts.shards.max(1);
    let hints: Vec<Hints> = (0..nshards).map(|_| Mutex::default()).collect();
    shared.start_seeding(nshards);
    std::thread::scope(|scope| -> Result<(), ServeError> {
        let senders = start_shards(scope, &make_kv, &shared, &hints, &opts)?;
        let seeders = senders.clone();
        let make = || {
            make_reader()
                .ok()
                .flatten()
                .map(|r| Box::new(r) as Box<dyn Reader + '_>)
        };
        let make: &MakeReader<'_> = &make;
        let ctx = Ctx {
            shards: senders,
            hints: &hints,
            shared: &shared,
            opts,
            started: Instant::now(),
            curr_conns: AtomicU32::new(0),
            total_conns: AtomicU64::new(0),
            scan_over: AtomicBool::new(false),
            conns: Mutex::new(BTreeMap::new()),
            next_conn: AtomicU64::new(1),
            rejected_conns: AtomicU64::new(0),
        };
        // The connection threads and the acceptor borrow `ctx`: they end
        // within this inner scope, and only then is `ctx` (with the shards'
        // senders) dropped, which ends the shards.
        let result = std::thread::scope(|conns| -> Result<(), ServeError> {
            let workers = start_conn_threads(conns, &ctx, make)?;
            let accept = start_acceptor(conns, listener, workers, stop, &ctx, ready)?;
            seed_shards(&mut scan_kv, &seeders, &shared);
            drop(seeders);
            drop(scan_kv);
            ctx.scan_over
                .store(true, std::sync::atomic::Ordering::Release);
            accept
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the acceptor panicked").into()))
        });
        drop(ctx);
        result
    })
}

/// Start one shard thread per hint queue, each on its own store handle
/// from `make_kv`, and wait until every one has opened its handle; the
/// senders to the shards, in shard order.
fn start_shards<'scope, 'env, K, F>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    make_kv: &'env F,
    shared: &'env Shared,
    hints: &'env [Hints],
    opts: &Options,
) -> Result<Vec<mpsc::Sender<Msg>>, ServeError>
where
    K: Kv,
    F: Fn() -> Result<K, StoreError> + Sync,
{
    let nshards = hints.len();
    let group = opts.group_commit.max(1);
    let budget = (opts.memory / nshards as u64).max(1);
    let mut senders = Vec::with_capacity(nshards);
    let (up_tx, up_rx) = mpsc::channel::<Result<(), StoreError>>();
    for (i, hints) in hints.iter().enumerate() {
        let (tx, rx) = mpsc::channel::<Msg>();
        senders.push(tx);
        let up = up_tx.clone();
        std::thread::Builder::new()
            .name(format!("ferrite-shard-{i}"))
            .spawn_scoped(scope, move || {
                let mut cache = match make_kv() {
                    Ok(kv) => {
                        let _ = up.send(Ok(()));
                        Cache::with_budget(Group::new(kv), shared, budget, true)
                    }
                    Err(e) => {
                        let _ = up.send(Err(e));
                        return;
                    }
                };
                drop(up);
                shard_loop(&mut cache, shared, hints, &rx, group);
            })?;
    }
    drop(up_tx);
    for _ in 0..nshards {
        match up_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => return Err(StoreError::Backend("a shard thread died".into()).into()),
        }
    }
    Ok(senders)
}

/// Where the acceptor deals a connection (and whether it came on the TLS
/// listener) to a connection thread.
type Dealer = tokio::sync::mpsc::UnboundedSender<(std::net::TcpStream, bool)>;

/// Start the connection threads ([`Options::threads`]), each a
/// single-threaded tokio runtime with its own read fast path; the senders
/// that deal connections to them.
fn start_conn_threads<'scope, 'env>(
    conns: &'scope std::thread::Scope<'scope, 'env>,
    ctx: &'env Ctx<'env>,
    make: &'env MakeReader<'env>,
) -> Result<Vec<Dealer>, ServeError> {
    let nthreads = ctx.opts.threads.max(1);
    let mut workers = Vec::with_capacity(nthreads);
    for i in 0..nthreads {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<(std::net::TcpStream, bool)>();
        workers.push(tx);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name(format!("ferrite-conn-{i}"))
            .spawn_scoped(conns, move || {
                let fast = RefCell::new(Fast {
                    reader: make(),
                    make,
                    retried: false,
                    map_key: Vec::with_capacity(256),
                    buf: Vec::new(),
                });
                rt.block_on(worker(rx, ctx, &fast));
            })?;
    }
    Ok(workers)
}

/// Bind the listeners and the signals to the acceptor's runtime, tell
/// `ready`, and start the acceptor thread; joining it gives how serving
/// ended.
fn start_acceptor<'scope, 'env>(
    conns: &'scope std::thread::Scope<'scope, 'env>,
    listener: std::net::TcpListener,
    workers: Vec<Dealer>,
    stop: Option<oneshot::Receiver<()>>,
    ctx: &'env Ctx<'env>,
    ready: impl FnOnce(&Ready),
) -> Result<std::thread::ScopedJoinHandle<'scope, Result<(), ServeError>>, ServeError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let _rt = rt.enter();
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    let tls_listener = match &ctx.opts.tls {
        Some(t) => {
            let l = t.listener.try_clone()?;
            l.set_nonblocking(true)?;
            Some(TcpListener::from_std(l)?)
        }
        None => None,
    };
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    ready(&Ready {
        addr: listener.local_addr()?,
        tls_addr: tls_listener.as_ref().and_then(|l| l.local_addr().ok()),
        shards: ctx.shards.len(),
    });
    Ok(std::thread::Builder::new()
        .name("ferrite-accept".into())
        .spawn_scoped(conns, move || {
            // Returning drops `workers`: every connection thread then
            // ends, cancelling its connections (a write already on a
            // shard still completes durably).
            rt.block_on(acceptor(
                listener,
                tls_listener,
                workers,
                term,
                int,
                stop,
                ctx,
            ))
        })?)
}
