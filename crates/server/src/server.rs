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
//! a shard's hint queue is full ([`HINTS_MAX`], a shard that has had no
//! request for that long) the get goes to the shard instead, so no fetch is
//! ever lost from the view. Readers see only durable writes ([`Reader`]), so
//! the rule below holds for fast replies too.
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

use crate::auth::{self, Auth};
use crate::observe::{DetailOp, LOG_FETCHERS, LOG_MUTATIONS};
use crate::protocol::{
    self, Command, Failure, ItemView, Limits, Op, Proto, Recovery, ReqCtx, Request, Response,
};
use crate::store::{
    Arith, ArithOutcome, Cache, DeleteOutcome, Group, Item, Kv, MetaGet, ReadPath, Reader, Shared,
    Store, StoreError, StoreOutcome,
};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// The version string: memcached 1.6's protocol, Ferrite's server.
pub const VERSION: &str = concat!("1.6.21-ferrite-", env!("CARGO_PKG_VERSION"));

/// Serving options.
#[derive(Debug, Clone)]
pub struct Options {
    /// Connection threads (each a single-threaded tokio runtime).
    pub threads: usize,
    /// Store shard threads (each holds one store session).
    pub shards: usize,
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
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

/// Told to the caller once the server accepts connections (the items are
/// still being counted in the background then).
#[derive(Debug, Clone)]
pub struct Ready {
    pub addr: SocketAddr,
    /// The TLS listener's address ([`Options::tls`]).
    pub tls_addr: Option<SocketAddr>,
    pub shards: usize,
}

/// A TLS listener beside the plain one ([`crate::tls`]).
#[derive(Debug, Clone)]
pub struct Tls {
    pub config: Arc<tokio_rustls::rustls::ServerConfig>,
    pub listener: Arc<std::net::TcpListener>,
}

/// A request for a shard, and where its encoded reply goes.
struct Job {
    req: Request,
    reply: oneshot::Sender<Vec<u8>>,
}

/// What a shard thread receives.
enum Msg {
    Job(Job),
    /// Keys (map keys, value lengths) the start-up scan found.
    Seed(Vec<(Vec<u8>, usize)>),
    /// The scan is over.
    Seeded,
}

/// Keys per [`Msg::Seed`].
const SEED_BATCH: usize = 4096;

/// Most read fast path hits queued for one shard; beyond it gets go to the
/// shard (module docs).
pub const HINTS_MAX: usize = 4096;

/// Fetches on the read fast path that a shard has not applied to its
/// eviction view yet: map keys laid end to end (no allocation per hit),
/// each with its end and charge.
#[derive(Default)]
struct HintQueue {
    keys: Vec<u8>,
    /// (end of the key in `keys`, charge).
    ends: Vec<(usize, u64)>,
}

impl HintQueue {
    /// Queue a hit; false when the queue is full ([`HINTS_MAX`]).
    fn push(&mut self, map_key: &[u8], charge: u64) -> bool {
        if self.ends.len() >= HINTS_MAX {
            return false;
        }
        self.keys.extend_from_slice(map_key);
        self.ends.push((self.keys.len(), charge));
        true
    }

    /// Every queued hit, oldest first.
    fn iter(&self) -> impl Iterator<Item = (&[u8], u64)> {
        let mut start = 0;
        self.ends.iter().map(move |&(end, charge)| {
            let k = &self.keys[start..end];
            start = end;
            (k, charge)
        })
    }

    fn clear(&mut self) {
        self.keys.clear();
        self.ends.clear();
    }
}

type Hints = Mutex<HintQueue>;

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

/// A shard thread: take the next request and, if more are queued, up to
/// `group` of them; run them against one [`Group`] so their writes commit
/// in one durable batch; only then send their replies. If the batch fails
/// (nothing was applied: it is atomic), run them again one at a time.
fn shard_loop<K: Kv>(
    cache: &mut Cache<'_, Group<K>>,
    shared: &Shared,
    hints: &Hints,
    rx: &mpsc::Receiver<Msg>,
    group: usize,
) {
    let mut taken = HintQueue::default();
    let mut jobs: Vec<Job> = Vec::with_capacity(group);
    let mut outs: Vec<Vec<u8>> = Vec::with_capacity(group);
    // Seeds are applied between requests, never inside a group.
    let seed = |cache: &mut Cache<'_, Group<K>>, m: Msg| match m {
        Msg::Seed(keys) => {
            for (k, l) in keys {
                cache.seed(&k, l);
            }
            cache.publish();
            None
        }
        Msg::Seeded => {
            cache.seeded();
            shared.seeded_one();
            None
        }
        Msg::Job(j) => Some(j),
    };
    while let Ok(first) = rx.recv() {
        // Fetches answered on the read fast path since the last request
        // count for eviction and meta `h` before anything this shard runs
        // next (module docs).
        std::mem::swap(&mut *hints.lock(), &mut taken);
        if !taken.ends.is_empty() {
            for (k, ch) in taken.iter() {
                cache.remote_hit(k, ch);
            }
            taken.clear();
            cache.settle(true);
        }
        let Some(first) = seed(cache, first) else {
            continue;
        };
        jobs.clear();
        jobs.push(first);
        while jobs.len() < group {
            match rx.try_recv() {
                Ok(m) => {
                    if let Some(j) = seed(cache, m) {
                        jobs.push(j);
                    }
                }
                Err(_) => break,
            }
        }
        let now = now_unix();
        if jobs.len() == 1 {
            let job = jobs.pop().expect("one job");
            let mut out = Vec::new();
            execute(cache, shared, &job.req, now, &mut out);
            cache.settle(true);
            let _ = job.reply.send(out);
            continue;
        }
        outs.clear();
        cache.kv().begin();
        for job in &jobs {
            let mut out = Vec::new();
            execute(cache, shared, &job.req, now, &mut out);
            outs.push(out);
        }
        let committed = cache.kv().commit().is_ok();
        cache.settle(committed);
        if committed {
            let st = &shared.stats;
            st.group_commits.fetch_add(1, Relaxed);
            st.grouped_requests.fetch_add(jobs.len() as u64, Relaxed);
            for (job, out) in jobs.drain(..).zip(outs.drain(..)) {
                let _ = job.reply.send(out);
            }
        } else {
            for job in jobs.drain(..) {
                let mut out = Vec::new();
                execute(cache, shared, &job.req, now, &mut out);
                cache.settle(true);
                let _ = job.reply.send(out);
            }
        }
    }
}

/// Unix time in seconds.
pub fn now_unix() -> u64 {
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

/// The start-up scan: send every item's key and size to the shard that
/// owns it, then tell every shard the scan is over. A shard ignores a seed
/// for a key it has itself written or deleted since start (its own view is
/// newer), so the scan may run while the shards serve.
fn seed_shards<K: Kv>(kv: &mut K, shards: &[mpsc::Sender<Msg>], shared: &Shared) {
    let n = shards.len() as u64;
    let mut batches: Vec<Vec<(Vec<u8>, usize)>> = vec![Vec::new(); shards.len()];
    let r = kv.scan_prefix(b"k", &mut |k, v| {
        let s = (fnv1a(&k[1..]) % n) as usize;
        batches[s].push((k.to_vec(), v.len()));
        if batches[s].len() >= SEED_BATCH {
            let _ = shards[s].send(Msg::Seed(std::mem::take(&mut batches[s])));
        }
    });
    if r.is_err() {
        shared.scan_failed.store(true, Relaxed);
    }
    for (s, b) in batches.into_iter().enumerate() {
        if !b.is_empty() {
            let _ = shards[s].send(Msg::Seed(b));
        }
        let _ = shards[s].send(Msg::Seeded);
    }
}

/// Accept connections and deal them round-robin to the connection
/// threads until a signal or `stop`. Beyond `max_conns` a connection is
/// told `ERROR Too many open connections` and closed (memcached). SIGHUP
/// reloads the credentials file.
async fn acceptor(
    listener: TcpListener,
    tls_listener: Option<TcpListener>,
    workers: Vec<tokio::sync::mpsc::UnboundedSender<(std::net::TcpStream, bool)>>,
    mut term: tokio::signal::unix::Signal,
    mut int: tokio::signal::unix::Signal,
    stop: Option<oneshot::Receiver<()>>,
    ctx: &Ctx<'_>,
) -> Result<(), ServeError> {
    let stop = async move {
        match stop {
            Some(rx) => {
                let _ = rx.await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::pin!(stop);
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let mut next = 0usize;
    let tls_accept = async |l: &Option<TcpListener>| match l {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    };
    loop {
        tokio::select! {
            r = async {
                tokio::select! {
                    r = listener.accept() => r.map(|a| (a, false)),
                    r = tls_accept(&tls_listener) => r.map(|a| (a, true)),
                }
            } => match r.and_then(|((sock, _), tls)| sock.into_std().map(|s| (s, tls))) {
                Ok((sock, tls)) => {
                    if ctx.curr_conns.load(Relaxed) as usize >= ctx.opts.max_conns.max(1) {
                        ctx.rejected_conns.fetch_add(1, Relaxed);
                        let mut sock = sock;
                        let _ = sock.set_nonblocking(true);
                        let _ = std::io::Write::write(&mut sock, b"ERROR Too many open connections\r\n");
                        continue;
                    }
                    ctx.curr_conns.fetch_add(1, Relaxed);
                    ctx.total_conns.fetch_add(1, Relaxed);
                    let _ = sock.set_nodelay(true);
                    if workers[next % workers.len()].send((sock, tls)).is_err() {
                        ctx.curr_conns.fetch_sub(1, Relaxed);
                    }
                    next = next.wrapping_add(1);
                }
                // Out of descriptors and the like: keep serving the others.
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
            },
            _ = hup.recv() => {
                if let Some(a) = &ctx.opts.auth {
                    // One line, never the file's content.
                    match a.reload() {
                        Ok(n) => eprintln!("ferrite serve: reloaded {} ({n} users)", a.path().display()),
                        Err(e) => eprintln!("ferrite serve: kept the old credentials: {e}"),
                    }
                }
            }
            _ = int.recv() => return Ok(()),
            _ = term.recv() => return Ok(()),
            _ = &mut stop => return Ok(()),
        }
    }
}

/// A connection thread: drive every connection dealt to it until the
/// acceptor is gone.
async fn worker(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<(std::net::TcpStream, bool)>,
    ctx: &Ctx<'_>,
    fast: &FastCell<'_>,
) {
    let mut live = FuturesUnordered::new();
    loop {
        tokio::select! {
            sock = rx.recv() => {
                let Some((sock, tls)) = sock else { return };
                // Registered with this thread's runtime.
                match sock.set_nonblocking(true).and_then(|()| TcpStream::from_std(sock)) {
                    Ok(sock) => live.push(async move {
                        let id = ctx.next_conn.fetch_add(1, Relaxed);
                        let info = ConnInfo {
                            peer: sock.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string()),
                            local: sock.local_addr().map_or_else(|_| "?".into(), |a| a.to_string()),
                            last_cmd: Instant::now(),
                        };
                        ctx.conns.lock().insert(id, info);
                        match (&ctx.opts.tls, tls) {
                            (Some(t), true) => {
                                let acc = tokio_rustls::TlsAcceptor::from(t.config.clone());
                                // A handshake that does not finish in 10 s
                                // holds nothing longer.
                                let hs = tokio::time::timeout(Duration::from_secs(10), acc.accept(sock)).await;
                                if let Ok(Ok(s)) = hs {
                                    connection(s, id, ctx, fast).await;
                                }
                            }
                            _ => connection(sock, id, ctx, fast).await,
                        }
                        ctx.conns.lock().remove(&id);
                        ctx.curr_conns.fetch_sub(1, Relaxed);
                    }),
                    Err(_) => {
                        ctx.curr_conns.fetch_sub(1, Relaxed);
                    }
                }
            }
            Some(()) = live.next(), if !live.is_empty() => {}
        }
    }
}

/// What a connection does after a request.
enum Flow {
    Continue,
    Close,
    /// Become a log watcher for these categories.
    Watch(u8),
}

/// Largest reply buffer kept before writing mid-pipeline (and mid
/// multiget): with the input bound ([`Limits`]) and one item, what a
/// connection buffers at most, whether or not its client reads.
pub const FLUSH_AT: usize = 256 << 10;

/// Keys of a multiget sent to the shards at once before the replies so
/// far are written out if they exceed [`FLUSH_AT`].
const MULTIGET_BATCH: usize = 256;

/// A connection's buffers start this small (an idle connection costs
/// little) and shrink back to it after a large request.
const BUF_START: usize = 4 << 10;
const BUF_KEEP: usize = 64 << 10;

/// Write `out` (then clear it); false when the client is gone or took
/// nothing for the idle timeout.
async fn flush<S: AsyncWrite + Unpin>(
    sock: &mut S,
    out: &mut Vec<u8>,
    idle: Option<Duration>,
) -> bool {
    if out.is_empty() {
        return true;
    }
    let ok = match idle {
        Some(t) => matches!(
            tokio::time::timeout(t, sock.write_all(out)).await,
            Ok(Ok(()))
        ),
        None => sock.write_all(out).await.is_ok(),
    };
    out.clear();
    if out.capacity() > BUF_KEEP {
        out.shrink_to(BUF_START);
    }
    ok
}

/// What the request loop over the buffered input leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// The buffered input is used up, or holds only part of a request:
    /// write the replies, then read more.
    Read,
    /// Write the replies, then shut the connection down.
    Close,
    /// Write the replies, then become a log watcher for these categories.
    Watch(u8),
    /// Drop the connection at once: the client is gone, or the input
    /// calls for closing without a word.
    Drop,
}

/// What one phase of [`Conn::answer_buffered`] did with the request at
/// `pos`.
enum Step {
    /// Not its kind of request: the next phase looks at it.
    Pass,
    /// Answered: start over at the next request (no mid-pipeline flush).
    Again,
    /// Stop answering the buffered input.
    Stop(Next),
}

/// A connection's input, replies and parser state across reads.
struct Conn {
    id: u64,
    input: Vec<u8>,
    out: Vec<u8>,
    /// Bytes of `input` already answered in this pass.
    pos: usize,
    /// Bytes still to discard (the unread rest of a skipped request).
    skip: usize,
    /// Discard up to the next newline (the rest of a refused long line).
    discard_line: bool,
    /// A long get line is being answered as it arrives.
    streaming: bool,
    authed: bool,
}

impl Conn {
    /// Answer every complete request in `input`; the replies collect in
    /// `out` (written out mid-pipeline past [`FLUSH_AT`]), `pos` ends at
    /// the first byte not consumed.
    async fn answer_buffered<S: AsyncWrite + Unpin>(
        &mut self,
        ctx: &Ctx<'_>,
        fast: &FastCell<'_>,
        sock: &mut S,
    ) -> Next {
        self.pos = 0;
        loop {
            if !self.discard() || self.pos >= self.input.len() {
                return Next::Read;
            }
            if let Some(a) = &ctx.opts.auth {
                match self.auth_step(a) {
                    Step::Pass => {}
                    Step::Again => continue,
                    Step::Stop(next) => return next,
                }
            }
            match self.long_get_step(ctx, fast, sock).await {
                Step::Pass => {}
                Step::Again => continue,
                Step::Stop(next) => return next,
            }
            if let Some(next) = self.request_step(ctx, fast, sock).await {
                return next;
            }
            if self.out.len() >= FLUSH_AT
                && !flush(sock, &mut self.out, ctx.opts.idle_timeout).await
            {
                return Next::Drop;
            }
        }
    }

    /// Discard what an earlier refusal left to skip; false when that
    /// takes all the buffered input.
    fn discard(&mut self) -> bool {
        if self.skip > 0 {
            let n = self.skip.min(self.input.len() - self.pos);
            self.pos += n;
            self.skip -= n;
            if self.skip > 0 {
                return false;
            }
        }
        if self.discard_line {
            match memchr::memchr(b'\n', &self.input[self.pos..]) {
                Some(i) => {
                    self.pos += i + 1;
                    self.discard_line = false;
                }
                None => {
                    self.pos = self.input.len();
                    return false;
                }
            }
        }
        true
    }

    /// Authentication ([`crate::auth`]): a binary request on any
    /// connection, anything on a connection not yet authenticated.
    fn auth_step(&mut self, a: &Auth) -> Step {
        let buf = &self.input[self.pos..];
        let step = if buf[0] == protocol::binary::REQ_MAGIC {
            auth::binary_step(a, buf, self.authed)
        } else if !self.authed {
            Some(auth::text_step(a, buf))
        } else {
            None
        };
        match step {
            None => Step::Pass,
            Some(auth::Step::More) => Step::Stop(Next::Read),
            Some(auth::Step::Close) => Step::Stop(Next::Drop),
            Some(auth::Step::Reply {
                consumed,
                reply,
                authed,
                close,
            }) => {
                self.pos += consumed;
                self.out.extend_from_slice(&reply);
                self.authed = authed;
                if close {
                    Step::Stop(Next::Close)
                } else {
                    Step::Again
                }
            }
        }
    }

    /// A get line too long to buffer, answered a chunk of keys at a time
    /// ([`protocol::text::long_get`]).
    async fn long_get_step<S: AsyncWrite + Unpin>(
        &mut self,
        ctx: &Ctx<'_>,
        fast: &FastCell<'_>,
        sock: &mut S,
    ) -> Step {
        let limits = &ctx.opts.limits;
        match protocol::text::long_get(&self.input[self.pos..], limits, self.streaming) {
            protocol::text::LongGet::No => Step::Pass,
            protocol::text::LongGet::Chunk {
                op,
                keys,
                rest,
                name,
            } => {
                let mut rctx = ReqCtx::text(op, false);
                rctx.conn = self.id;
                let req = Request {
                    cmd: Command::Get {
                        keys,
                        touch: None,
                        with_cas: op == Op::Gets,
                        opts: Default::default(),
                    },
                    ctx: rctx,
                };
                // A chunk of a long get: hits of earlier chunks may be
                // out already, so a failed key's error line stays in its
                // place.
                let idle = ctx.opts.idle_timeout;
                if get_keys(ctx, fast, &req, &mut self.out, sock, idle, true).await == GetEnd::Gone
                {
                    return Step::Stop(Next::Drop);
                }
                self.pos += rest - name.len();
                self.input[self.pos..self.pos + name.len()].copy_from_slice(name);
                self.streaming = true;
                Step::Again
            }
            protocol::text::LongGet::End(n) => {
                self.pos += n;
                self.streaming = false;
                self.out.extend_from_slice(b"END\r\n");
                Step::Again
            }
            protocol::text::LongGet::BadKey => {
                self.out
                    .extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
                self.streaming = false;
                self.discard_line = true;
                Step::Again
            }
        }
    }

    /// Parse and answer the request at `pos`, or refuse it; `None`: go on
    /// with the next one.
    async fn request_step<S: AsyncWrite + Unpin>(
        &mut self,
        ctx: &Ctx<'_>,
        fast: &FastCell<'_>,
        sock: &mut S,
    ) -> Option<Next> {
        match protocol::parse(&self.input[self.pos..], &ctx.opts.limits) {
            Ok(None) => Some(Next::Read),
            Ok(Some((mut req, n))) => {
                self.pos += n;
                self.streaming = false;
                req.ctx.conn = self.id;
                match handle(ctx, fast, req, &mut self.out, sock).await {
                    Flow::Continue => None,
                    Flow::Close => Some(Next::Close),
                    Flow::Watch(mask) => Some(Next::Watch(mask)),
                }
            }
            Err(e) => {
                self.streaming = false;
                if let Some(key) = e.unlink.clone() {
                    let del = Request {
                        cmd: Command::Delete {
                            key: key.clone(),
                            cas: None,
                            opts: Default::default(),
                        },
                        ctx: ReqCtx::text(Op::Delete, true),
                    };
                    let _ = on_shard(ctx, &key, del).await;
                }
                protocol::response::encode_error(&e, &mut self.out);
                match e.recovery {
                    Recovery::Skip(n) => {
                        self.skip = n;
                        None
                    }
                    Recovery::Close => Some(Next::Close),
                    Recovery::CloseSilently => Some(Next::Drop),
                }
            }
        }
    }

    /// Drop the answered input; a buffer grown by a large request shrinks
    /// back.
    fn consume(&mut self) {
        self.input.drain(..self.pos);
        if self.input.capacity() > BUF_KEEP && self.input.len() < BUF_START {
            self.input.shrink_to(BUF_START);
        }
    }

    /// Read more input (within the idle timeout); false when the client
    /// is gone or silent.
    async fn read_more<S: AsyncRead + Unpin>(&mut self, sock: &mut S, ctx: &Ctx<'_>) -> bool {
        if self.input.capacity() - self.input.len() < 1024 {
            self.input.reserve(16 << 10);
        }
        let read = match ctx.opts.idle_timeout {
            Some(t) => match tokio::time::timeout(t, sock.read_buf(&mut self.input)).await {
                Ok(r) => r,
                Err(_) => return false,
            },
            None => sock.read_buf(&mut self.input).await,
        };
        match read {
            Ok(0) | Err(_) => false,
            Ok(_) => {
                if let Some(c) = ctx.conns.lock().get_mut(&self.id) {
                    c.last_cmd = Instant::now();
                }
                true
            }
        }
    }
}

/// One connection: read, parse every complete request, answer, write.
async fn connection<S: AsyncRead + AsyncWrite + Unpin>(
    mut sock: S,
    id: u64,
    ctx: &Ctx<'_>,
    fast: &FastCell<'_>,
) {
    let mut c = Conn {
        id,
        input: Vec::with_capacity(BUF_START),
        out: Vec::new(),
        pos: 0,
        skip: 0,
        discard_line: false,
        streaming: false,
        authed: ctx.opts.auth.is_none(),
    };
    loop {
        let next = c.answer_buffered(ctx, fast, &mut sock).await;
        if next == Next::Drop {
            return;
        }
        c.consume();
        if !flush(&mut sock, &mut c.out, ctx.opts.idle_timeout).await {
            return;
        }
        match next {
            Next::Watch(mask) => {
                watch_loop(&mut sock, ctx, mask).await;
                return;
            }
            Next::Close => {
                let _ = sock.shutdown().await;
                return;
            }
            Next::Read | Next::Drop => {}
        }
        if !c.read_more(&mut sock, ctx).await {
            return;
        }
    }
}

/// A log watcher: `OK`, then the log lines it asked for until it goes.
async fn watch_loop<S: AsyncWrite + Unpin>(sock: &mut S, ctx: &Ctx<'_>, mask: u8) {
    let Some(mut rx) = ctx.shared.log.watch(mask) else {
        let _ = sock
            .write_all(b"WATCHER_TOO_MANY log watcher limit reached\r\n")
            .await;
        return;
    };
    if sock.write_all(b"OK\r\n").await.is_err() {
        return;
    }
    while let Some(line) = rx.recv().await {
        if sock.write_all(&line).await.is_err() {
            return;
        }
    }
}

/// Run `req` on the shard that owns `key`; the encoded reply.
async fn on_shard(ctx: &Ctx<'_>, key: &[u8], req: Request) -> Vec<u8> {
    match to_shard(ctx, key, req) {
        Some(rx) => rx.await.unwrap_or_default(),
        None => Vec::new(),
    }
}

/// Queue `req` on the shard that owns `key`; where its encoded reply will
/// come (`None`: the shard is gone).
fn to_shard(ctx: &Ctx<'_>, key: &[u8], req: Request) -> Option<oneshot::Receiver<Vec<u8>>> {
    let (tx, rx) = oneshot::channel();
    ctx.shards[ctx.shard_of(key)]
        .send(Msg::Job(Job { req, reply: tx }))
        .ok()?;
    Some(rx)
}

/// The read fast path (module docs) for one key of a plain get: answer a
/// hit or a miss into `out` and return true, or return false and leave
/// `out` alone when the key's shard must answer (an expired or flushed
/// item, a read error, the shard's hint queue full).
fn fast_get(ctx: &Ctx<'_>, f: &mut Fast<'_>, key: &[u8], rctx: &ReqCtx, out: &mut Vec<u8>) -> bool {
    if f.reader.is_none() {
        if f.retried || !ctx.scan_over.load(std::sync::atomic::Ordering::Acquire) {
            return false;
        }
        f.retried = true;
        f.reader = (f.make)();
    }
    let shard = ctx.shard_of(key);
    let now = now_unix();
    let Fast {
        reader: Some(reader),
        map_key,
        buf,
        ..
    } = f
    else {
        return false;
    };
    match crate::store::read_live(&mut **reader, ctx.shared, key, map_key, buf, now) {
        Ok(ReadPath::Hit(it, charge)) => {
            if !ctx.hints[shard].lock().push(map_key, charge) {
                return false;
            }
            let st = &ctx.shared.stats;
            st.cmd_get.fetch_add(1, Relaxed);
            st.get_hits.fetch_add(1, Relaxed);
            st.fast_gets.fetch_add(1, Relaxed);
            ctx.shared.detail.record(key, DetailOp::Get(true));
            let size = buf.len().saturating_sub(crate::store::HEADER);
            ctx.shared.log.item_get(key, true, size, rctx.conn);
            encode_hit(key, &it, &buf[crate::store::HEADER..], now, rctx, out);
            true
        }
        Ok(ReadPath::Miss) => {
            let st = &ctx.shared.stats;
            st.cmd_get.fetch_add(1, Relaxed);
            st.get_misses.fetch_add(1, Relaxed);
            st.fast_gets.fetch_add(1, Relaxed);
            ctx.shared.detail.record(key, DetailOp::Get(false));
            ctx.shared.log.item_get(key, false, 0, rctx.conn);
            protocol::encode(&Response::Miss { key }, rctx, out);
            true
        }
        Ok(ReadPath::Shard) | Err(_) => false,
    }
}

/// A get's hit for `key` (text, binary or a non-meta get of any kind)
/// with data `data`.
fn encode_hit(key: &[u8], it: &Item, data: &[u8], now: u64, rctx: &ReqCtx, out: &mut Vec<u8>) {
    let mut v = ItemView::new(key, it.flags, data, it.cas);
    v.ttl = it.ttl(now);
    v.last_access = now.saturating_sub(it.time);
    protocol::encode(&Response::Hit(v), rctx, out);
}

/// How [`get_keys`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GetEnd {
    /// Every key answered: the caller adds the `END`.
    End,
    /// A text get failed on some key (a damaged item, a store error): as
    /// memcached does, the reply is that key's error line alone, which
    /// replaced the get's hits in `out` — no `END`, so a client that stops
    /// reading at the error stays in step with the stream.
    Failed,
    /// The client is gone.
    Gone,
}

/// Answer every key of a retrieval (not the `END`) into `out`, writing
/// `out` to `sock` whenever it exceeds [`FLUSH_AT`]. Keys go to the shards
/// [`MULTIGET_BATCH`] at a time. A text get whose key fails is answered
/// with the first error line only ([`GetEnd::Failed`]), unless hits of it
/// were already written to the socket (a reply past [`FLUSH_AT`]): then
/// the error line takes that key's place, and the `END` follows; so it
/// does in a chunk of a long get (`chunk`), whose earlier chunks' hits may
/// be out already.
async fn get_keys<S: AsyncWrite + Unpin>(
    ctx: &Ctx<'_>,
    fast: &FastCell<'_>,
    req: &Request,
    out: &mut Vec<u8>,
    sock: &mut S,
    idle: Option<Duration>,
    chunk: bool,
) -> GetEnd {
    let Command::Get {
        keys,
        touch,
        with_cas,
        opts,
    } = &req.cmd
    else {
        return GetEnd::End;
    };
    let text = req.ctx.proto == Proto::Text;
    let start = out.len();
    let mut flushed = chunk;
    let mut failed: Option<Vec<u8>> = None;
    // One key's reply: in a text get an error line (a hit starts with
    // `VALUE `, a miss is empty) ends the get's reply.
    let take = |part: Vec<u8>, out: &mut Vec<u8>, failed: &mut Option<Vec<u8>>, flushed: bool| {
        if text && part.starts_with(b"SERVER_ERROR") && !flushed {
            failed.get_or_insert(part);
        } else if failed.is_none() {
            out.extend(part);
        }
    };
    let plain = touch.is_none() && req.ctx.proto != Proto::Meta;
    let fast = Some(fast).filter(|_| plain);
    if keys.len() == 1 {
        let key = &keys[0];
        let mut here = Vec::new();
        if let Some(f) = fast
            && fast_get(ctx, &mut f.borrow_mut(), key, &req.ctx, &mut here)
        {
        } else {
            here = on_shard(ctx, key, req.clone()).await;
        }
        take(here, out, &mut failed, flushed);
    } else {
        // Answer what the read fast path can at once; send every other key
        // to its shard first, then collect in order: shards work in
        // parallel.
        for batch in keys.chunks(MULTIGET_BATCH) {
            let mut parts: Vec<Result<Vec<u8>, oneshot::Receiver<Vec<u8>>>> =
                Vec::with_capacity(batch.len());
            for key in batch {
                if let Some(f) = fast {
                    let mut here = Vec::new();
                    if fast_get(ctx, &mut f.borrow_mut(), key, &req.ctx, &mut here) {
                        parts.push(Ok(here));
                        continue;
                    }
                }
                let sub = Request {
                    cmd: Command::Get {
                        keys: vec![key.clone()],
                        touch: *touch,
                        with_cas: *with_cas,
                        opts: opts.clone(),
                    },
                    ctx: req.ctx.clone(),
                };
                if let Some(rx) = to_shard(ctx, key, sub) {
                    parts.push(Err(rx));
                }
            }
            for part in parts {
                let part = match part {
                    Ok(here) => here,
                    Err(rx) => rx.await.unwrap_or_default(),
                };
                take(part, out, &mut failed, flushed);
                if out.len() >= FLUSH_AT && failed.is_none() {
                    if !flush(sock, out, idle).await {
                        return GetEnd::Gone;
                    }
                    flushed = true;
                }
            }
        }
    }
    match failed {
        Some(line) => {
            out.truncate(start);
            out.extend(line);
            GetEnd::Failed
        }
        None => GetEnd::End,
    }
}

async fn handle<S: AsyncWrite + Unpin>(
    ctx: &Ctx<'_>,
    fast: &FastCell<'_>,
    req: Request,
    out: &mut Vec<u8>,
    sock: &mut S,
) -> Flow {
    match &req.cmd {
        Command::Get { .. } => {
            match get_keys(ctx, fast, &req, out, sock, ctx.opts.idle_timeout, false).await {
                GetEnd::Gone => return Flow::Close,
                GetEnd::Failed => {}
                GetEnd::End => protocol::encode(&Response::End, &req.ctx, out),
            }
        }
        Command::Store { key, .. }
        | Command::Delete { key, .. }
        | Command::Arith { key, .. }
        | Command::Touch { key, .. }
        | Command::MetaDebug { key } => {
            let key = key.clone();
            out.extend(on_shard(ctx, &key, req).await);
        }
        Command::FlushAll { .. } => out.extend(on_shard(ctx, b"", req).await),
        Command::Stats { args } => stats(ctx, &req, args, out).await,
        Command::Version => protocol::encode(&Response::Version(VERSION), &req.ctx, out),
        Command::Verbosity { .. } | Command::NoOp => protocol::encode(&Response::Ok, &req.ctx, out),
        Command::Admin { args } => return admin(args, out),
        Command::Quit => {
            if req.ctx.proto == Proto::Binary {
                protocol::encode(&Response::Ok, &req.ctx, out);
            }
            return Flow::Close;
        }
    }
    Flow::Continue
}

/// The text administration commands, as memcached answers them.
fn admin(args: &[Vec<u8>], out: &mut Vec<u8>) -> Flow {
    let arg = |i: usize| args.get(i).map_or(&[][..], Vec::as_slice);
    let line: &[u8] = match arg(0) {
        b"watch" => {
            let mut mask = 0u8;
            for a in &args[1..] {
                match a.as_slice() {
                    b"fetchers" => mask |= LOG_FETCHERS,
                    b"mutations" => mask |= LOG_MUTATIONS,
                    // Categories this server logs nothing for: watching
                    // them is allowed and quiet.
                    b"rawcmds" | b"evictions" | b"sysevents" | b"connevents" => {}
                    _ => {
                        out.extend_from_slice(b"ERROR\r\n");
                        return Flow::Continue;
                    }
                }
            }
            if args.len() == 1 {
                mask = LOG_FETCHERS;
            }
            return Flow::Watch(mask);
        }
        b"slabs" if args.len() >= 3 && arg(1) == b"automove" => {
            // ferrite has no slab classes to move pages between: the
            // setting is validated as memcached validates it and has no
            // effect.
            if arg(2) == b"ratio" {
                let ok = args.len() >= 4
                    && std::str::from_utf8(arg(3))
                        .ok()
                        .and_then(|t| t.parse::<f64>().ok())
                        .is_some();
                if ok { b"OK" } else { b"ERROR" }
            } else {
                match protocol::parse_u32(arg(2)) {
                    None => b"CLIENT_ERROR bad command line format",
                    Some(0..=2) => b"OK",
                    Some(_) => b"ERROR",
                }
            }
        }
        b"slabs" if args.len() == 4 && arg(1) == b"reassign" => {
            b"CLIENT_ERROR slab reassignment disabled"
        }
        b"lru_crawler" if args.len() >= 2 => b"CLIENT_ERROR lru crawler disabled",
        b"shutdown" => b"ERROR: shutdown not enabled",
        _ => b"ERROR",
    };
    out.extend_from_slice(line);
    out.extend_from_slice(b"\r\n");
    Flow::Continue
}

/// `stats [group]`, text and binary (whose group is the key, subcommand
/// and all).
async fn stats(ctx: &Ctx<'_>, req: &Request, args: &[Vec<u8>], out: &mut Vec<u8>) {
    let words: Vec<&[u8]> = if req.ctx.proto == Proto::Binary {
        args.first()
            .map(|a| a.split(|&b| b == b' ').filter(|t| !t.is_empty()).collect())
            .unwrap_or_default()
    } else {
        args.iter().map(Vec::as_slice).collect()
    };
    let binary = req.ctx.proto == Proto::Binary;
    let list;
    let resp = match words.as_slice() {
        [] => {
            // The item counts are complete once the start-up scan has
            // seeded every shard.
            while !ctx.shared.counted() {
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
            list = general_stats(ctx);
            Response::Stats(&list)
        }
        [b"settings"] => {
            list = settings_stats(ctx);
            Response::Stats(&list)
        }
        [b"reset"] => {
            ctx.shared.stats.reset();
            ctx.shared.detail.reset();
            if let Some(a) = &ctx.opts.auth {
                a.cmds.store(0, Relaxed);
                a.errors.store(0, Relaxed);
            }
            ctx.rejected_conns.store(0, Relaxed);
            if binary {
                Response::Stats(&[])
            } else {
                Response::Line("RESET")
            }
        }
        [b"detail", sub, ..] if matches!(*sub, b"on" | b"off") => {
            ctx.shared.detail.set_on(*sub == b"on");
            if binary {
                Response::Stats(&[])
            } else {
                Response::Ok
            }
        }
        [b"detail", b"dump", ..] => {
            let dump = ctx.shared.detail.dump();
            if binary {
                let v = String::from_utf8_lossy(&dump).into_owned();
                list = vec![("detailed".to_string(), v)];
                Response::Stats(&list)
            } else {
                out.extend_from_slice(&dump);
                return;
            }
        }
        [b"detail", ..] if !binary => {
            Response::Error(Failure::client("usage: stats detail on|off|dump"))
        }
        [b"conns"] => {
            list = conns_stats(ctx);
            Response::Stats(&list)
        }
        [b"slabs"] => {
            list = ctx.shared.slabs.slabs();
            Response::Stats(&list)
        }
        [b"items"] => {
            list = ctx.shared.slabs.items();
            Response::Stats(&list)
        }
        [b"sizes"] => Response::Stats(&[]),
        _ if binary => Response::NotFound,
        _ => Response::Error(Failure::UnknownCommand),
    };
    protocol::encode(&resp, &req.ctx, out);
}

fn conns_stats(ctx: &Ctx<'_>) -> Vec<(String, String)> {
    let now = Instant::now();
    let conns = ctx.conns.lock();
    let mut v = Vec::with_capacity(conns.len() * 4);
    for (id, c) in conns.iter() {
        v.push((format!("{id}:addr"), format!("tcp:{}", c.peer)));
        v.push((format!("{id}:listen_addr"), format!("tcp:{}", c.local)));
        v.push((format!("{id}:state"), "conn_parse_cmd".into()));
        v.push((
            format!("{id}:secs_since_last_cmd"),
            now.duration_since(c.last_cmd).as_secs().to_string(),
        ));
    }
    v
}

fn general_stats(ctx: &Ctx<'_>) -> Vec<(String, String)> {
    let s = &ctx.shared.stats;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut v: Vec<(String, String)> = Vec::with_capacity(40);
    let mut put = |k: &str, val: String| v.push((k.to_string(), val));
    put("pid", std::process::id().to_string());
    put("uptime", ctx.started.elapsed().as_secs().to_string());
    put("time", now.as_secs().to_string());
    put("version", VERSION.to_string());
    put("libevent", "tokio".to_string());
    put(
        "pointer_size",
        (8 * std::mem::size_of::<usize>()).to_string(),
    );
    put("max_connections", ctx.opts.max_conns.to_string());
    put(
        "rejected_connections",
        ctx.rejected_conns.load(Relaxed).to_string(),
    );
    put("curr_connections", ctx.curr_conns.load(Relaxed).to_string());
    put(
        "total_connections",
        ctx.total_conns.load(Relaxed).to_string(),
    );
    let g = |c: &AtomicU64| c.load(Relaxed).to_string();
    put("cmd_get", g(&s.cmd_get));
    put("cmd_set", g(&s.cmd_set));
    put("cmd_flush", g(&s.cmd_flush));
    put("cmd_touch", g(&s.cmd_touch));
    put("get_hits", g(&s.get_hits));
    put("get_misses", g(&s.get_misses));
    put("get_expired", g(&s.get_expired));
    put("get_flushed", g(&s.get_flushed));
    put("delete_misses", g(&s.delete_misses));
    put("delete_hits", g(&s.delete_hits));
    put("incr_misses", g(&s.incr_misses));
    put("incr_hits", g(&s.incr_hits));
    put("decr_misses", g(&s.decr_misses));
    put("decr_hits", g(&s.decr_hits));
    put("cas_misses", g(&s.cas_misses));
    put("cas_hits", g(&s.cas_hits));
    put("cas_badval", g(&s.cas_badval));
    put("touch_hits", g(&s.touch_hits));
    put("touch_misses", g(&s.touch_misses));
    put("threads", ctx.opts.threads.to_string());
    put("ferrite_shards", ctx.shards.len().to_string());
    put("ferrite_group_commits", g(&s.group_commits));
    put("ferrite_grouped_requests", g(&s.grouped_requests));
    put("ferrite_fast_gets", g(&s.fast_gets));
    put("ferrite_store", ctx.opts.store_name.clone());
    put("limit_maxbytes", ctx.opts.memory.to_string());
    put("bytes", s.bytes.load(Relaxed).max(0).to_string());
    put("curr_items", ctx.shared.items().to_string());
    put("total_items", g(&s.total_items));
    put("evictions", g(&s.evictions));
    if let Some(a) = &ctx.opts.auth {
        put("auth_cmds", a.cmds.load(Relaxed).to_string());
        put("auth_errors", a.errors.load(Relaxed).to_string());
    }
    if ctx.shared.scan_failed.load(Relaxed) {
        put("ferrite_scan_failed", "1".to_string());
    }
    v
}

fn settings_stats(ctx: &Ctx<'_>) -> Vec<(String, String)> {
    vec![
        ("maxbytes".into(), ctx.opts.memory.to_string()),
        ("num_threads".into(), ctx.opts.threads.to_string()),
        (
            "item_size_max".into(),
            ctx.opts.limits.max_item_size.to_string(),
        ),
        ("cas_enabled".into(), "yes".into()),
        ("evictions".into(), "on".into()),
        ("maxconns".into(), ctx.opts.max_conns.to_string()),
        ("domain_socket".into(), "NULL".into()),
        ("flush_enabled".into(), "yes".into()),
        ("binding_protocol".into(), "auto-negotiate".into()),
        (
            "idle_timeout".into(),
            ctx.opts.idle_timeout.map_or(0, |d| d.as_secs()).to_string(),
        ),
        ("auth_enabled_ascii".into(), yes_no(ctx.opts.auth.is_some())),
        ("auth_enabled_sasl".into(), yes_no(ctx.opts.auth.is_some())),
        ("detail_enabled".into(), yes_no(ctx.shared.detail.is_on())),
    ]
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

fn store_error(e: &StoreError) -> Failure {
    match e {
        StoreError::Full => Failure::OutOfMemory,
        e => Failure::Server(e.to_string().into()),
    }
}

/// Execute one single-key (or keyless) request on a shard's store and
/// append the encoded reply (for a retrieval: the hit or miss, not the
/// `END`).
/// A meta-protocol get (`mg`): one key, with its flags.
fn exec_meta_get(
    store: &mut dyn Store,
    st: &crate::store::Stats,
    req: &Request,
    (key, touch, opts): (&[u8], Option<i64>, &protocol::GetOpts),
    now: u64,
    out: &mut Vec<u8>,
) {
    let m = MetaGet {
        touch,
        vivify: opts.vivify,
        recache: opts.recache,
        new_cas: opts.new_cas,
        no_bump: opts.no_bump,
        order: req.ctx.meta.as_deref().map_or(&[][..], |m| &m.order),
    };
    st.cmd_get.fetch_add(1, Relaxed);
    if touch.is_some() {
        st.cmd_touch.fetch_add(1, Relaxed);
    }
    match store.meta_get(key, &m, now) {
        Ok(Some(hit)) => {
            let it = &hit.item;
            if hit.created {
                st.get_misses.fetch_add(1, Relaxed);
            } else {
                st.get_hits.fetch_add(1, Relaxed);
                if touch.is_some() {
                    st.touch_hits.fetch_add(1, Relaxed);
                }
            }
            let mut v = ItemView::new(key, it.flags, &it.data, it.cas);
            v.ttl = hit.echo_ttl;
            v.last_access = now.saturating_sub(it.time);
            v.fetched = hit.fetched;
            v.stale = it.stale;
            v.win = hit.win;
            v.token_sent = hit.token_sent;
            protocol::encode(&Response::Hit(v), &req.ctx, out);
        }
        Ok(None) => {
            st.get_misses.fetch_add(1, Relaxed);
            if touch.is_some() {
                st.touch_misses.fetch_add(1, Relaxed);
            }
            protocol::encode(&Response::Miss { key }, &req.ctx, out);
        }
        Err(e) => protocol::encode(&Response::Error(store_error(&e)), &req.ctx, out),
    }
}

/// A text or binary get / gets / gat / gats: each key answered in turn;
/// a store error (a damaged item) ends the reply with its error line.
fn exec_get(
    store: &mut dyn Store,
    shared: &Shared,
    req: &Request,
    (keys, touch): (&[Vec<u8>], Option<i64>),
    now: u64,
    out: &mut Vec<u8>,
) {
    let st = &shared.stats;
    for key in keys {
        let r = match touch {
            Some(t) => {
                st.cmd_touch.fetch_add(1, Relaxed);
                store.touch(key, t, now)
            }
            None => store.get(key, now),
        };
        st.cmd_get.fetch_add(1, Relaxed);
        if let Ok(found) = &r {
            shared.detail.record(key, DetailOp::Get(found.is_some()));
            let size = found.as_ref().map_or(0, |it| it.data.len());
            shared
                .log
                .item_get(key, found.is_some(), size, req.ctx.conn);
        }
        match r {
            Ok(Some(it)) => {
                st.get_hits.fetch_add(1, Relaxed);
                if touch.is_some() {
                    st.touch_hits.fetch_add(1, Relaxed);
                }
                encode_hit(key, &it, &it.data, now, &req.ctx, out);
            }
            Ok(None) => {
                st.get_misses.fetch_add(1, Relaxed);
                if touch.is_some() {
                    st.touch_misses.fetch_add(1, Relaxed);
                }
                protocol::encode(&Response::Miss { key }, &req.ctx, out);
            }
            Err(e) => {
                return protocol::encode(&Response::Error(store_error(&e)), &req.ctx, out);
            }
        }
    }
}

/// A set / add / replace / append / prepend / cas.
fn exec_store(store: &mut dyn Store, shared: &Shared, req: &Request, now: u64, out: &mut Vec<u8>) {
    let Command::Store {
        mode,
        key,
        flags,
        exptime,
        data,
        cas,
        opts,
    } = &req.cmd
    else {
        return;
    };
    let st = &shared.stats;
    st.cmd_set.fetch_add(1, Relaxed);
    shared.detail.record(key, DetailOp::Set);
    if shared.log.wants(LOG_FETCHERS) {
        // memcached's store fetches the old item first, and logs it.
        let old = store.peek(key, now).ok().flatten();
        let size = old.as_ref().map_or(0, |(it, _)| it.data.len());
        shared.log.item_get(key, old.is_some(), size, req.ctx.conn);
    }
    let r = store.store(*mode, key, *flags, *exptime, data, *cas, opts, now);
    if shared.log.wants(LOG_MUTATIONS) {
        log_store(shared, req, (*mode, key, *exptime, data.len()), &r, now);
    }
    let resp = match r {
        Ok(StoreOutcome::Stored(cas)) => Response::Stored { cas },
        Ok(StoreOutcome::NotStored) => Response::NotStored,
        Ok(StoreOutcome::Exists) => Response::Exists,
        Ok(StoreOutcome::NotFound) => Response::NotFound,
        Ok(StoreOutcome::TooLarge) => Response::Error(Failure::TooLarge),
        Err(e) => Response::Error(store_error(&e)),
    };
    protocol::encode(&resp, &req.ctx, out);
}

/// memcached's mutation log line for a store command.
fn log_store(
    shared: &Shared,
    req: &Request,
    (mode, key, exptime, len): (protocol::StoreMode, &[u8], i64, usize),
    r: &Result<StoreOutcome, StoreError>,
    now: u64,
) {
    let status = match &r {
        Ok(StoreOutcome::Stored(_)) => "stored",
        Ok(StoreOutcome::NotStored) => "not_stored",
        Ok(StoreOutcome::Exists) => "exists",
        Ok(StoreOutcome::NotFound) => "not_found",
        Ok(StoreOutcome::TooLarge) => "too_large",
        Err(_) => "no_memory",
    };
    let cmd = match mode {
        protocol::StoreMode::Set => "set",
        protocol::StoreMode::Add => "add",
        protocol::StoreMode::Replace => "replace",
        protocol::StoreMode::Append => "append",
        protocol::StoreMode::Prepend => "prepend",
        protocol::StoreMode::Cas => "cas",
    };
    let ttl = match protocol::deadline(exptime, now) {
        protocol::Expiry::At(t) => t.saturating_sub(now),
        _ => 0,
    };
    shared
        .log
        .item_store(key, status, cmd, ttl, req.ctx.conn, len);
}

pub fn execute(store: &mut dyn Store, shared: &Shared, req: &Request, now: u64, out: &mut Vec<u8>) {
    let resp_err = |f: Failure, out: &mut Vec<u8>| {
        protocol::encode(&Response::Error(f), &req.ctx, out);
    };
    let st = &shared.stats;
    match &req.cmd {
        Command::Get {
            keys, touch, opts, ..
        } if req.ctx.proto == Proto::Meta => {
            if let Some(key) = keys.first() {
                exec_meta_get(store, st, req, (key, *touch, opts), now, out);
            }
        }
        Command::Get { keys, touch, .. } => exec_get(store, shared, req, (keys, *touch), now, out),
        Command::Store { .. } => exec_store(store, shared, req, now, out),
        Command::Delete { key, cas, opts } => {
            shared.detail.record(key, DetailOp::Delete);
            let resp = match store.delete(key, *cas, opts, now) {
                Ok(DeleteOutcome::Deleted) => Response::Deleted,
                Ok(DeleteOutcome::NotFound) => Response::NotFound,
                Ok(DeleteOutcome::Exists) => Response::Exists,
                Err(e) => Response::Error(store_error(&e)),
            };
            protocol::encode(&resp, &req.ctx, out);
        }
        Command::Arith {
            key,
            incr,
            delta,
            create,
            cas,
            ttl,
            new_cas,
        } => {
            let a = Arith {
                incr: *incr,
                delta: *delta,
                create: *create,
                cas: *cas,
                ttl: *ttl,
                new_cas: *new_cas,
                order: req.ctx.meta.as_deref().map_or(&[][..], |m| &m.order),
            };
            let resp = match store.arith(key, a, now) {
                Ok(ArithOutcome::Value(value, cas, ttl)) => Response::Arith { value, cas, ttl },
                Ok(ArithOutcome::NotFound) => Response::NotFound,
                Ok(ArithOutcome::Exists) => Response::Exists,
                Ok(ArithOutcome::NonNumeric) => Response::Error(Failure::NonNumeric),
                Err(e) => Response::Error(store_error(&e)),
            };
            protocol::encode(&resp, &req.ctx, out);
        }
        Command::Touch { key, exptime } => {
            st.cmd_touch.fetch_add(1, Relaxed);
            let resp = match store.touch(key, *exptime, now) {
                Ok(Some(it)) => {
                    st.touch_hits.fetch_add(1, Relaxed);
                    Response::Touched {
                        flags: it.flags,
                        cas: it.cas,
                    }
                }
                Ok(None) => {
                    st.touch_misses.fetch_add(1, Relaxed);
                    Response::NotFound
                }
                Err(e) => Response::Error(store_error(&e)),
            };
            protocol::encode(&resp, &req.ctx, out);
        }
        Command::MetaDebug { key } => match store.peek(key, now) {
            Ok(Some((it, fetched))) => {
                let mut v = ItemView::new(key, it.flags, &it.data, it.cas);
                v.ttl = it.ttl(now);
                v.last_access = now.saturating_sub(it.time);
                v.fetched = fetched;
                protocol::encode(&Response::Debug(v), &req.ctx, out);
            }
            Ok(None) => protocol::encode(&Response::Miss { key }, &req.ctx, out),
            Err(e) => resp_err(store_error(&e), out),
        },
        Command::FlushAll { delay } => {
            let resp = match store.flush_all(*delay, now) {
                Ok(()) => Response::Ok,
                Err(e) => Response::Error(store_error(&e)),
            };
            protocol::encode(&resp, &req.ctx, out);
        }
        // Keyless commands are answered by the connection itself.
        Command::Stats { .. }
        | Command::Version
        | Command::Verbosity { .. }
        | Command::Quit
        | Command::Admin { .. }
        | Command::NoOp => resp_err(Failure::Server("not a store command".into()), out),
    }
}
