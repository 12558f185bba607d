//! `ferrite serve`: the memcached-compatible server on a pool file.

use ferrite_engine::{EngineKind, LAYOUT, MAX_VALUE, Store, StoreOptions};
use ferrite_pmem::{Domain, Pool, PoolOptions};
use ferrite_server::protocol::Limits;
use ferrite_server::server::Options;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The store variants `--store` accepts.
pub const STORES: [&str; 3] = ["engine-inp", "engine-lsm", "engine-cow"];

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Pool file (created if missing). Default: serve.pool in
    /// $FERRITE_DATA_DIR, else $XDG_DATA_HOME/ferrite, else ~/.local/share/ferrite.
    #[arg(long)]
    pool: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:11211")]
    listen: String,
    /// Size of a new pool (K/M/G suffix); an existing pool keeps its size.
    #[arg(long, default_value = "1G", value_parser = crate::parse_size)]
    memory: u64,
    /// Connection threads (and store shards).
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Store variant for a new pool: engine-inp, engine-lsm or engine-cow
    /// (an existing pool keeps its own; naming another is an error).
    #[arg(long)]
    store: Option<String>,
    /// Durability domain of a new pool (default: auto-detected, or FERRITE_DOMAIN).
    #[arg(long)]
    domain: Option<Domain>,
    /// Largest item value in bytes (memcached -I); at most 1 MiB minus the
    /// item header.
    #[arg(long, value_parser = crate::parse_size)]
    max_item_size: Option<u64>,
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

fn engine_of(store: &str) -> Result<EngineKind, String> {
    store
        .strip_prefix("engine-")
        .and_then(EngineKind::parse)
        .ok_or_else(|| format!("unknown --store '{store}' (one of {})", STORES.join(", ")))
}

pub fn run(a: ServeArgs) -> Result<ExitCode, String> {
    let kind = a.store.as_deref().map(engine_of).transpose()?;
    if a.threads == 0 || a.threads > 1024 {
        return Err(format!("--threads {}: use 1 to 1024", a.threads));
    }
    let item_max = (MAX_VALUE - ferrite_server::store::HEADER) as u64;
    let max_item = a.max_item_size.unwrap_or(item_max);
    if max_item == 0 || max_item > item_max {
        return Err(format!("--max-item-size {max_item}: use 1 to {item_max}"));
    }
    let path = match a.pool {
        Some(p) => p,
        None => {
            let d = data_dir()?;
            std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
            d.join("serve.pool")
        }
    };
    // Bind first: a busy port fails fast, before any recovery.
    let listener = std::net::TcpListener::bind(&a.listen)
        .map_err(|e| format!("cannot listen on {}: {e}", a.listen))?;
    let (pool, store, created) = open(&path, kind, a.memory, a.threads, a.domain)?;
    let name = format!("engine-{}", store.kind());
    let rec = store.recovery().clone();
    let domain = pool.domain();
    let opts = Options {
        threads: a.threads,
        shards: a.threads,
        limits: Limits {
            max_item_size: max_item as usize,
            ..Limits::default()
        },
        memory: pool.header().size,
        store_name: name.clone(),
    };
    let shown = path.display().to_string();
    let res = ferrite_server::store::engine::serve(&store, opts, listener, None, |r| {
        let what = if created {
            "created a new pool".to_string()
        } else {
            format!(
                "recovered {} items in {:.1} ms",
                r.items,
                rec.elapsed.as_secs_f64() * 1e3
            )
        };
        println!(
            "ferrite serve: listening on {} ({name}, pool {shown}, domain {domain}, {} shards; {what})",
            r.addr, r.shards
        );
    });
    let closed = store
        .close()
        .map_err(|e| format!("{}: {e}", path.display()))
        .and_then(|()| pool.close().map_err(|e| format!("{}: {e}", path.display())));
    res.map_err(|e| e.to_string())?;
    closed?;
    Ok(ExitCode::SUCCESS)
}

/// Open the store at `path`, or create pool and store.
fn open(
    path: &Path,
    kind: Option<EngineKind>,
    size: u64,
    threads: usize,
    domain: Option<Domain>,
) -> Result<(Pool, Store, bool), String> {
    let e = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let sessions = u16::try_from(threads.max(4)).unwrap_or(u16::MAX);
    if path.exists() {
        let pool = Pool::open(path, &PoolOptions::new(LAYOUT, 0)).map_err(|x| e(&x))?;
        let store = Store::open(&pool, &StoreOptions::new(kind.unwrap_or(EngineKind::Inp)))
            .map_err(|x| e(&x))?;
        if let Some(k) = kind
            && k != store.kind()
        {
            return Err(e(&format!(
                "the pool holds store engine-{}, not engine-{k}",
                store.kind()
            )));
        }
        Ok((pool, store, false))
    } else {
        let mut po = PoolOptions::new(LAYOUT, size);
        if let Some(d) = domain {
            po = po.domain(d);
        }
        let pool = Pool::create(path, &po).map_err(|x| e(&x))?;
        let so = StoreOptions::new(kind.unwrap_or(EngineKind::Inp)).sessions(sessions);
        let store = match Store::create(&pool, &so) {
            Ok(s) => s,
            Err(x) => {
                drop(pool);
                let _ = std::fs::remove_file(path);
                return Err(e(&x));
            }
        };
        Ok((pool, store, true))
    }
}
