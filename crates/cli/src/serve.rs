//! `ferrite serve`: the memcached-compatible server on a pool file.

use ferrite_engine::{EngineKind, LAYOUT, MAX_VALUE, Store, StoreOptions};
use ferrite_pmem::{Domain, Pool, PoolOptions};
use ferrite_ptm::{Algorithm, Ptm, PtmOptions};
use ferrite_server::protocol::Limits;
use ferrite_server::server::Options;
use ferrite_tx::{Strategy, TxPool};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::opener::TX_LAYOUT;
use ferrite_server::store::{PMDK_STORE, STORES};

#[derive(clap::Args)]
#[command(after_help = "\
Start-up: the pool is opened and recovered (progress on stderr when that takes more
than a few seconds), then the ready line `ferrite serve: listening on …` goes to stdout.

Examples:
  ferrite serve
  ferrite serve --pool cache.pool --memory 1G --listen 0.0.0.0:11211
  ferrite serve --pool cache.pool --memory 256MiB --store ptm-lazy --threads 8
  ferrite serve --pool cache.pool --max-item-size 512K --group-commit 1
  ferrite serve --listen 0.0.0.0:11211 --auth-file users.txt -c 4096 --idle-timeout 300")]
pub struct ServeArgs {
    /// Pool file (created if missing). Default: serve.pool in
    /// $FERRITE_DATA_DIR, else $XDG_DATA_HOME/ferrite, else ~/.local/share/ferrite.
    #[arg(long)]
    pool: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:11211")]
    listen: String,
    /// Bytes of items to keep (memcached -m, but in bytes: 64M, 1G, 1.5GiB;
    /// M = MB = MiB = 2^20): beyond it the least recently used items are
    /// evicted. Also the size of a new pool (default 1G; a whole number of
    /// 4 KiB pages); an existing pool keeps its size. Default: the pool's
    /// size (items are also evicted whenever the pool is full).
    #[arg(long, value_parser = crate::size::arg)]
    memory: Option<u64>,
    /// Connection threads (and store shards).
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Store variant for a new pool: engine-inp, engine-lsm, engine-cow,
    /// ptm-lazy, ptm-eager, tx-undo, tx-redo or tx-clobber, and in a build
    /// with the feature `pmdk` pmdk-undo (a libpmemobj pool on PMDK's undo
    /// transactions; libpmem persists it with flushes and fences only on
    /// pmem or with PMEM_IS_PMEM_FORCE=1, else with msync). An existing
    /// pool keeps its own; naming another is an error. Default engine-inp.
    #[arg(long)]
    store: Option<String>,
    /// Durability domain of a new pool (default: auto-detected, or FERRITE_DOMAIN).
    #[arg(long)]
    domain: Option<Domain>,
    /// Most queued requests a store shard commits in one durable batch
    /// (group commit; 1 = off; 1 to 4096).
    #[arg(long, default_value_t = 32, value_parser = group_commit)]
    group_commit: usize,
    /// Largest item value (memcached -I; 4096, 64K, 512KiB); at most 1 MiB
    /// minus the item header.
    #[arg(long, value_parser = crate::size::arg)]
    max_item_size: Option<u64>,
    /// Require authentication (memcached -Y): a file of `user:password`
    /// lines. Text and meta clients authenticate with `set <any> 0 0 <n>`
    /// and the data `<user> <password>`; binary clients with SASL PLAIN.
    /// SIGHUP reloads it.
    #[arg(long, short = 'Y', value_name = "FILE")]
    auth_file: Option<PathBuf>,
    /// Most connections at once (memcached -c); one more is told `ERROR
    /// Too many open connections` and closed.
    #[arg(long, short = 'c', default_value_t = ferrite_server::server::DEFAULT_MAX_CONNS)]
    max_connections: usize,
    /// Close a connection idle (sending nothing, or taking none of its
    /// replies) for this many seconds (memcached -o idle_timeout; 0 = never).
    #[arg(long, default_value_t = 0)]
    idle_timeout: u64,
    /// Also serve TLS on this address (memcached -Z), beside --listen;
    /// needs --tls-cert and --tls-key.
    #[arg(long, value_name = "ADDR")]
    tls_listen: Option<String>,
    /// TLS certificate chain, PEM (memcached -o ssl_chain_cert).
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// TLS private key, PEM (memcached -o ssl_key).
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// CA certificates, PEM: TLS clients must present a certificate it
    /// signed (memcached -o ssl_ca_cert with ssl_verify_mode=2).
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// Listen on a non-loopback address without --auth-file (refused
    /// otherwise: anyone who reaches the port could read and overwrite
    /// every item).
    #[arg(long)]
    insecure: bool,
}

/// `--group-commit`: 1 (off) to 4096; 0 was accepted and meant nothing.
fn group_commit(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n @ 1..=4096) => Ok(n),
        _ => Err(format!("'{s}' is not a batch size from 1 (off) to 4096")),
    }
}

/// The data directory of a bare `ferrite serve`.
pub fn data_dir() -> Result<PathBuf, String> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(d) = env("FERRITE_DATA_DIR") {
        return Ok(PathBuf::from(d));
    }
    if let Some(d) = env("XDG_DATA_HOME") {
        return Ok(PathBuf::from(d).join("ferrite"));
    }
    match env("HOME") {
        Some(h) => Ok(PathBuf::from(h).join(".local/share/ferrite")),
        None => Err("no data directory: set FERRITE_DATA_DIR or HOME, or pass --pool".into()),
    }
}

/// Size of a new pool when `--memory` is not given.
const DEFAULT_POOL: u64 = 1 << 30;

/// PTM thread slots of a server pool (fixed, so a restart with other
/// `--threads` opens it with the same options).
const PTM_SLOTS: u16 = 32;

/// A store variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Engine(EngineKind),
    Ptm(Algorithm),
    Tx(Strategy),
    /// `pmdk-undo`: a libpmemobj pool, not a Ferrite pool (feature `pmdk`).
    Pmdk,
}

/// Why `pmdk-undo` is refused by a build without the feature (one line).
const NO_PMDK: &str = "this ferrite was built without PMDK: store pmdk-undo needs `cargo build --features pmdk` (Debian: libpmemobj-dev)";

/// Whether the file at `path` is a libpmemobj pool (its header's
/// signature, "PMEMOBJ\0", opens the file).
fn is_pmdk_pool(path: &Path) -> bool {
    use std::io::Read;
    let mut sig = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut sig))
        .is_ok()
        && sig == *b"PMEMOBJ\0"
}

impl Variant {
    fn parse(s: &str) -> Result<Variant, String> {
        let bad = || {
            let pmdk = if cfg!(feature = "pmdk") {
                format!(", {PMDK_STORE}")
            } else {
                String::new()
            };
            format!("unknown --store '{s}' (one of {}{pmdk})", STORES.join(", "))
        };
        if s == PMDK_STORE {
            return if cfg!(feature = "pmdk") {
                Ok(Variant::Pmdk)
            } else {
                Err(format!("--store {PMDK_STORE}: {NO_PMDK}"))
            };
        }
        if let Some(e) = s.strip_prefix("engine-") {
            return EngineKind::parse(e).map(Variant::Engine).ok_or_else(bad);
        }
        match s {
            "ptm-lazy" => Ok(Variant::Ptm(Algorithm::Lazy)),
            "ptm-eager" => Ok(Variant::Ptm(Algorithm::Eager)),
            "tx-undo" => Ok(Variant::Tx(Strategy::Undo)),
            "tx-redo" => Ok(Variant::Tx(Strategy::Redo)),
            "tx-clobber" => Ok(Variant::Tx(Strategy::Clobber)),
            _ => Err(bad()),
        }
    }

    fn name(self) -> String {
        match self {
            Variant::Engine(k) => format!("engine-{k}"),
            Variant::Ptm(Algorithm::Lazy) => "ptm-lazy".into(),
            Variant::Ptm(Algorithm::Eager) => "ptm-eager".into(),
            Variant::Tx(s) => format!("tx-{s}"),
            Variant::Pmdk => PMDK_STORE.into(),
        }
    }

    /// The pool layout name that records a PTM variant (engine pools have
    /// the engine's own layout and superblock; transactional pools record
    /// their strategy in their own superblock).
    fn layout(self) -> String {
        match self {
            Variant::Engine(_) => LAYOUT.to_string(),
            Variant::Ptm(alg) => crate::opener::ptm_layout(alg),
            Variant::Tx(_) => TX_LAYOUT.to_string(),
            // Not a Ferrite pool: libpmemobj checks its own layout name.
            Variant::Pmdk => "ferrite-bytemap".to_string(),
        }
    }
}

enum Opened {
    Engine(Box<Store>),
    Ptm(Box<Ptm>),
    Tx(Box<TxPool>),
    /// The map, the pool file's size, and how long opening it took
    /// (libpmemobj's recovery included).
    #[cfg(feature = "pmdk")]
    Pmdk(
        Box<ferrite_pmdk::bytemap::PmemByteMap>,
        u64,
        std::time::Duration,
    ),
}

/// `ferrite serve`: checks the flags, binds the listeners, opens (or
/// creates) the store, serves until stopped, then closes store and pool.
pub fn run(a: ServeArgs) -> Result<ExitCode, String> {
    let started = std::time::Instant::now();
    let want = a.store.as_deref().map(Variant::parse).transpose()?;
    if a.threads == 0 || a.threads > 1024 {
        return Err(format!("--threads {}: use 1 to 1024", a.threads));
    }
    let item_max = (MAX_VALUE - ferrite_server::store::HEADER) as u64;
    let max_item = a.max_item_size.unwrap_or(item_max);
    if max_item == 0 || max_item > item_max {
        return Err(format!("--max-item-size {max_item}: use 1 to {item_max}"));
    }
    let path = match a.pool.clone() {
        Some(p) => p,
        None => {
            let d = data_dir()?;
            std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
            d.join("serve.pool")
        }
    };
    if a.max_connections == 0 {
        return Err("--max-connections 0: use at least 1".into());
    }
    let auth = auth_for_listen(&a)?;
    let (listener, tls) = bind_listeners(&a)?;
    let size = a.memory.unwrap_or(DEFAULT_POOL);
    let step = crate::progress::Step::start(format!("opening {}", path.display()));
    let (pool, opened, variant, created) = open(&path, want, size, a.threads, a.domain)?;
    let name = variant.name();
    let elapsed = recovery_elapsed(&opened);
    let (domain, pool_size) = match (&pool, &opened) {
        (Some(p), _) => (p.domain().to_string(), p.header().size),
        #[cfg(feature = "pmdk")]
        (None, Opened::Pmdk(_, size, _)) => (pmdk_domain(&path), *size),
        (None, _) => return Err(format!("{}: no pool", path.display())),
    };
    step.done(&if created {
        format!("created, {}", crate::size::Both(pool_size))
    } else {
        format!(
            "{}, store recovery {:.1} s",
            crate::size::Both(pool_size),
            elapsed.as_secs_f64()
        )
    });
    let opts = Options {
        threads: a.threads,
        shards: a.threads,
        limits: Limits {
            max_item_size: max_item as usize,
            ..Limits::default()
        },
        group_commit: a.group_commit,
        memory: a.memory.unwrap_or(pool_size),
        store_name: name.clone(),
        auth,
        max_conns: a.max_connections,
        idle_timeout: (a.idle_timeout > 0).then(|| std::time::Duration::from_secs(a.idle_timeout)),
        tls,
    };
    let shown = path.display().to_string();
    let ready = |r: &ferrite_server::server::Ready| {
        let what = if created {
            "created a new pool".to_string()
        } else {
            format!(
                "serving {:.1} ms after start, store recovery {:.1} ms; items counted in the background",
                started.elapsed().as_secs_f64() * 1e3,
                elapsed.as_secs_f64() * 1e3
            )
        };
        let tls = r
            .tls_addr
            .map_or(String::new(), |t| format!("; TLS on {t}"));
        println!(
            "ferrite serve: listening on {} ({name}, pool {shown}, domain {domain}, {} shards; {what}{tls})",
            r.addr, r.shards
        );
    };
    let pe = |e: &dyn std::fmt::Display| crate::at(&path, e);
    let (res, closed) = serve_opened(opened, opts, listener, ready, &pe);
    let closed = match pool {
        Some(pool) => closed.and_then(|()| pool.close().map_err(|e| pe(&e))),
        None => closed,
    };
    res.map_err(|e| e.to_string())?;
    closed?;
    Ok(ExitCode::SUCCESS)
}

/// The `--auth-file` credentials, if given; refuses to listen on an
/// address that is not loopback without them unless `--insecure`.
fn auth_for_listen(
    a: &ServeArgs,
) -> Result<Option<std::sync::Arc<ferrite_server::auth::Auth>>, String> {
    let auth = match &a.auth_file {
        Some(p) => Some(std::sync::Arc::new(
            ferrite_server::auth::Auth::open(p).map_err(|e| format!("--auth-file {e}"))?,
        )),
        None => None,
    };
    let addrs: Vec<std::net::SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(&a.listen)
        .map_err(|e| format!("--listen {}: {e}", a.listen))?
        .collect();
    if auth.is_none() && !a.insecure && addrs.iter().any(|x| !x.ip().is_loopback()) {
        return Err(format!(
            "refusing to listen on {} (not loopback) without --auth-file: anyone who reaches it could read and overwrite every item; add --auth-file FILE, or --insecure to accept that",
            a.listen
        ));
    }
    Ok(auth)
}

/// The plain listener on `--listen` and, with `--tls-listen`, the TLS one
/// with its server configuration (the TLS flags come together or not at
/// all). Bound before anything is opened: a busy port fails fast, before
/// any recovery.
fn bind_listeners(
    a: &ServeArgs,
) -> Result<(std::net::TcpListener, Option<ferrite_server::server::Tls>), String> {
    let tls = match (&a.tls_listen, &a.tls_cert, &a.tls_key) {
        (None, None, None) if a.tls_ca.is_none() => None,
        (Some(l), Some(c), Some(k)) => Some((
            l.clone(),
            ferrite_server::tls::server_config(c, k, a.tls_ca.as_deref())
                .map_err(|e| e.to_string())?,
        )),
        _ => return Err("TLS needs --tls-listen, --tls-cert and --tls-key together".into()),
    };
    // Bind first: a busy port fails fast, before any recovery.
    let listener = std::net::TcpListener::bind(&a.listen)
        .map_err(|e| format!("cannot listen on {}: {e}", a.listen))?;
    let tls = match tls {
        Some((l, config)) => Some(ferrite_server::server::Tls {
            config,
            listener: std::sync::Arc::new(
                std::net::TcpListener::bind(&l)
                    .map_err(|e| format!("cannot listen on {l}: {e}"))?,
            ),
        }),
        None => None,
    };
    Ok((listener, tls))
}

/// How long the store's recovery took at open.
fn recovery_elapsed(opened: &Opened) -> std::time::Duration {
    match opened {
        Opened::Engine(s) => s.recovery().elapsed,
        Opened::Ptm(p) => p.recovery().elapsed,
        Opened::Tx(t) => t.recovery().elapsed,
        #[cfg(feature = "pmdk")]
        Opened::Pmdk(_, _, took) => *took,
    }
}

/// Serves `opened` until the server stops, then closes the store
/// (errors through `pe`). Returns the server's result and the store's
/// close result; the pool itself is closed by the caller.
fn serve_opened(
    opened: Opened,
    opts: Options,
    listener: std::net::TcpListener,
    ready: impl FnOnce(&ferrite_server::server::Ready),
    pe: &dyn Fn(&dyn std::fmt::Display) -> String,
) -> (
    Result<(), ferrite_server::server::ServeError>,
    Result<(), String>,
) {
    match opened {
        Opened::Engine(store) => {
            let res = ferrite_server::store::engine::serve(&store, opts, listener, None, ready);
            (res, (*store).close().map_err(|e| pe(&e)))
        }
        Opened::Ptm(ptm) => {
            let res = ferrite_server::store::ptm::serve(&ptm, opts, listener, None, ready);
            drop(ptm);
            (res, Ok(()))
        }
        Opened::Tx(txp) => {
            let res = ferrite_server::store::tx::serve(&txp, opts, listener, None, ready);
            drop(txp);
            (res, Ok(()))
        }
        #[cfg(feature = "pmdk")]
        Opened::Pmdk(map, _, _) => {
            let res = ferrite_server::store::pmdk::serve(&map, opts, listener, None, ready);
            // Dropping the map closes the libpmemobj pool.
            drop(map);
            (res, Ok(()))
        }
    }
}

/// Open the store at `path`, or create pool and store.
fn open(
    path: &Path,
    want: Option<Variant>,
    size: u64,
    threads: usize,
    domain: Option<Domain>,
) -> Result<(Option<Pool>, Opened, Variant, bool), String> {
    let e = |e: &dyn std::fmt::Display| crate::at(path, e);
    if path.exists() && is_pmdk_pool(path) {
        if let Some(w) = want
            && w != Variant::Pmdk
        {
            return Err(e(&format!(
                "the pool holds store {PMDK_STORE}, not {}",
                w.name()
            )));
        }
        return open_pmdk(path, None).map(|o| (None, o, Variant::Pmdk, false));
    }
    if path.exists() {
        let (pool, opened) = crate::opener::open_server_store(path).map_err(|x| e(&x))?;
        let (opened, found) = match opened {
            crate::opener::Opened::Ptm(p) => {
                let alg = p.algorithm();
                (Opened::Ptm(p), Variant::Ptm(alg))
            }
            crate::opener::Opened::Tx(t) => {
                let s = t.strategy();
                (Opened::Tx(t), Variant::Tx(s))
            }
            crate::opener::Opened::Engine(st) => {
                let k = st.kind();
                (Opened::Engine(st), Variant::Engine(k))
            }
        };
        if let Some(w) = want
            && w != found
        {
            return Err(e(&format!(
                "the pool holds store {}, not {}",
                found.name(),
                w.name()
            )));
        }
        Ok((Some(pool), opened, found, false))
    } else {
        let v = want.unwrap_or(Variant::Engine(EngineKind::Inp));
        crate::size::check_pool(&size.to_string(), size).map_err(|x| e(&x))?;
        if v == Variant::Pmdk {
            if domain.is_some() {
                return Err(e(&format!(
                    "--domain does not apply to {PMDK_STORE}: libpmem chooses how to persist (PMEM_IS_PMEM_FORCE=1 forces flush+fence)"
                )));
            }
            return open_pmdk(path, Some(size)).map(|o| (None, o, v, true));
        }
        let mut po = PoolOptions::new(&v.layout(), size);
        if let Some(d) = domain {
            po = po.domain(d);
        }
        let pool = Pool::create(path, &po).map_err(|x| e(&x))?;
        let made = match v {
            Variant::Engine(k) => {
                // One session per shard, one per connection thread's read
                // fast path, and the start-up scan's (at most the engine's
                // 1000).
                let sessions = u16::try_from((2 * threads + 1).clamp(4, 1000)).unwrap_or(1000);
                Store::create(&pool, &StoreOptions::new(k).sessions(sessions))
                    .map(|s| Opened::Engine(Box::new(s)))
                    .map_err(|x| e(&x))
            }
            Variant::Ptm(alg) => Ptm::create(&pool, &ptm_options(alg))
                .map(|p| Opened::Ptm(Box::new(p)))
                .map_err(|x| e(&x)),
            Variant::Tx(strategy) => {
                // One log slot per shard plus the start-up scan's.
                let slots = u16::try_from((threads + 1).clamp(4, 64)).unwrap_or(64);
                ferrite_server::store::tx::create(&pool, strategy, slots)
                    .map(|t| Opened::Tx(Box::new(t)))
                    .map_err(|x| e(&x))
            }
            Variant::Pmdk => Err(e(&"a PMDK store is not a Ferrite pool")),
        };
        match made {
            Ok(o) => Ok((Some(pool), o, v, true)),
            Err(x) => {
                drop(pool);
                let _ = std::fs::remove_file(path);
                Err(x)
            }
        }
    }
}

/// Opens the `pmdk-undo` map at `path`, or with `create` (a size) makes
/// a new pool of that size.
#[cfg(feature = "pmdk")]
fn open_pmdk(path: &Path, create: Option<u64>) -> Result<Opened, String> {
    let e = |e: &dyn std::fmt::Display| crate::at(path, e);
    let t0 = std::time::Instant::now();
    let map = match create {
        Some(size) => ferrite_server::store::pmdk::create(path, size),
        None => ferrite_server::store::pmdk::open(path),
    }
    .map_err(|x| e(&x))?;
    let size = std::fs::metadata(path).map_err(|x| e(&x))?.len();
    Ok(Opened::Pmdk(Box::new(map), size, t0.elapsed()))
}

#[cfg(not(feature = "pmdk"))]
fn open_pmdk(path: &Path, _create: Option<u64>) -> Result<Opened, String> {
    Err(format!(
        "{}: a libpmemobj pool (store {PMDK_STORE}): {NO_PMDK}",
        path.display()
    ))
}

/// How libpmem persists the pool at `path`: `libpmem-flush` (cache
/// flushes and fences: pmem, or PMEM_IS_PMEM_FORCE=1) or `libpmem-msync`.
#[cfg(feature = "pmdk")]
fn pmdk_domain(path: &Path) -> String {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    match ferrite_pmdk::flush_path_in(dir) {
        Ok(true) => "libpmem-flush".into(),
        Ok(false) => "libpmem-msync".into(),
        Err(_) => "libpmem".into(),
    }
}

fn ptm_options(alg: Algorithm) -> PtmOptions {
    PtmOptions::new(alg).slots(PTM_SLOTS)
}
