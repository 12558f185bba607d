//! One place that tells what a Ferrite pool holds and opens it: `ferrite
//! serve` (a server store, by the layout it records), `ferrite pool check
//! --deep` (what to check, by the contents; what `--repair` runs recovery
//! on) and `ferrite kv` (an engine store) all go through it, so a new
//! kind of pool is taught to the three at once.
//!
//! | holds ([`Holds`]) | recognised by ([`recognise`]) | opened by [`open`] with |
//! |---|---|---|
//! | an engine store | layout `ferrite-kv` or magic `FRTENGN1` at the data start | `Store::open`, the caller's [`StoreOptions`] |
//! | a transactional pool | the header's root points at magic `FERRTXPL` | `TxPool::open` with every ferrite-ds structure registered |
//! | a PTM pool | the root is the PTM superblock's offset and holds magic `FERPTM01` | `Ptm::open` with the algorithm, slots and log size its superblock records |
//! | a log or a page store | magic `FERRLOG\0` / `FERPAGE\0` at the data start | not opened as a store ([`OpenError::NotAStore`]) |
//! | a heap on its own | magic `FERRHEAP` / `FERRLOCK` at the data start | not opened as a store |
//!
//! A server store also names what it holds in its layout
//! ([`server_layout`]): `ferrite-kv` (an engine), [`TX_LAYOUT`] (the byte
//! map on transactions), `ferrite-serve-ptm-lazy` / `-eager`
//! ([`ptm_layout`]). `ferrite serve` opens by that name without reading the
//! pool's contents first, and refuses any other layout.

use ferrite_engine::{EngineError, LAYOUT, Store, StoreOptions};
use ferrite_pmem::{HEADER_SIZE, Pool, PoolError, PoolOptions};
use ferrite_ptm::{Algorithm, Ptm, PtmError, PtmOptions};
use ferrite_tx::{TxError, TxPool};
use std::path::Path;

/// The pool layout of the `tx-*` server stores.
pub const TX_LAYOUT: &str = "ferrite-serve-tx";

/// The pool layout of the server store on the PTM of `alg`
/// (`ferrite-serve-ptm-lazy`, `ferrite-serve-ptm-eager`).
pub fn ptm_layout(alg: Algorithm) -> String {
    match alg {
        Algorithm::Lazy => "ferrite-serve-ptm-lazy".into(),
        Algorithm::Eager => "ferrite-serve-ptm-eager".into(),
    }
}

/// What a pool holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holds {
    Engine,
    Tx,
    Ptm,
    Blocks,
    Heap,
    Unknown,
}

impl Holds {
    /// What it is, for messages (`a transactional pool`).
    pub fn describe(self) -> &'static str {
        match self {
            Holds::Engine => "an engine store",
            Holds::Tx => "a transactional pool",
            Holds::Ptm => "a PTM pool",
            Holds::Blocks => "a log or page store",
            Holds::Heap => "a heap",
            Holds::Unknown => "contents not recognised",
        }
    }
}

/// What the pool image `image` (its header has layout `layout`) holds,
/// from its contents (the table of the module documentation, in that
/// order). `image` must be at least a pool header long.
pub fn recognise(image: &[u8], layout: &str) -> Holds {
    if ferrite_engine::verify::recognise(image, layout) {
        Holds::Engine
    } else if ferrite_tx::verify::recognise(image) {
        Holds::Tx
    } else if ferrite_ptm::verify::recognise(image) {
        Holds::Ptm
    } else if ferrite_blocks::verify::recognise(&image[HEADER_SIZE..]).is_some() {
        Holds::Blocks
    } else if ferrite_alloc::verify::recognise(&image[HEADER_SIZE..]).is_some() {
        Holds::Heap
    } else {
        Holds::Unknown
    }
}

/// What a server store's `layout` says it holds; `None` for a layout no
/// server store records.
pub fn server_layout(layout: &str) -> Option<Holds> {
    if layout == LAYOUT {
        Some(Holds::Engine)
    } else if layout == TX_LAYOUT {
        Some(Holds::Tx)
    } else if Algorithm::ALL.iter().any(|a| ptm_layout(*a) == layout) {
        Some(Holds::Ptm)
    } else {
        None
    }
}

/// A store opened by [`open`] (recovery has run).
pub enum Opened {
    Engine(Box<Store>),
    Tx(Box<TxPool>),
    Ptm(Box<Ptm>),
}

impl Opened {
    /// Closes the store, making everything durable (its pool stays open:
    /// close it after).
    pub fn close(self) -> Result<(), OpenError> {
        match self {
            Opened::Engine(store) => store.close()?,
            Opened::Tx(txp) => drop(txp),
            Opened::Ptm(ptm) => drop(ptm),
        }
        Ok(())
    }
}

/// Why a pool could not be opened (shown as one line after the path).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Tx(#[from] TxError),
    #[error(transparent)]
    Ptm(#[from] PtmError),
    /// `ferrite serve` was pointed at a pool no server store made.
    #[error("pool layout '{0}' is not a server store")]
    NotServerStore(String),
    /// The pool's layout marks another store than the one asked for.
    #[error("the pool's layout '{layout}' marks {}, not {}", found.describe(), wanted.describe())]
    Holds {
        layout: String,
        found: Holds,
        wanted: Holds,
    },
    /// A log, page store or heap: checked and recovered, not opened.
    #[error("{} is not opened as a store", .0.describe())]
    NotAStore(Holds),
}

/// Opens the pool at `path` (with the layout its header records) and the
/// store `holds` says is in it; `engine` are the options of an engine
/// store. Recovery runs. The pool is returned beside the store (an engine
/// store does not own it): close the store, then the pool.
pub fn open(path: &Path, holds: Holds, engine: &StoreOptions) -> Result<(Pool, Opened), OpenError> {
    if !matches!(holds, Holds::Engine | Holds::Tx | Holds::Ptm) {
        return Err(OpenError::NotAStore(holds));
    }
    let (header, _) = Pool::inspect(path)?;
    let pool = Pool::open(path, &PoolOptions::new(&header.layout, 0))?;
    let opened = open_in(&pool, holds, engine)?;
    Ok((pool, opened))
}

/// Opens the store `holds` says is in `pool`.
fn open_in(pool: &Pool, holds: Holds, engine: &StoreOptions) -> Result<Opened, OpenError> {
    Ok(match holds {
        Holds::Engine => Opened::Engine(Box::new(Store::open(pool, engine)?)),
        Holds::Tx => Opened::Tx(Box::new(TxPool::open(pool, ferrite_ds::registry(), None)?)),
        Holds::Ptm => {
            // The PTM's options are not in the pool header: its superblock
            // records the algorithm and the slots' geometry it was made with.
            let mut raw = [0u8; ferrite_ptm::format::SB_BYTES];
            ferrite_pmem::Region::whole(pool.medium().clone())
                .read(ferrite_ptm::format::SB_OFF as usize, &mut raw);
            let sb = ferrite_ptm::format::Superblock::decode(&raw, pool.header().size)?;
            let alg = if sb.algorithm == 1 {
                Algorithm::Eager
            } else {
                Algorithm::Lazy
            };
            let opts = PtmOptions::new(alg).slots(sb.slots).log_bytes(sb.log_bytes);
            Opened::Ptm(Box::new(Ptm::open(pool, &opts)?))
        }
        other => return Err(OpenError::NotAStore(other)),
    })
}

/// Opens the server store at `path` by the layout it records
/// ([`server_layout`]); any other layout is [`OpenError::NotServerStore`].
pub fn open_server_store(path: &Path) -> Result<(Pool, Opened), OpenError> {
    let (header, _) = Pool::inspect(path)?;
    let holds =
        server_layout(&header.layout).ok_or(OpenError::NotServerStore(header.layout.clone()))?;
    open(path, holds, &StoreOptions::default())
}

/// Opens the engine store at `path` (`ferrite kv`): a pool of another
/// server store is refused by name, anything else is the engine's to
/// judge (a foreign layout, a damaged superblock).
pub fn open_engine_store(path: &Path, opts: &StoreOptions) -> Result<Store, OpenError> {
    let (header, _) = Pool::inspect(path)?;
    if let Some(found) = server_layout(&header.layout).filter(|h| *h != Holds::Engine) {
        return Err(OpenError::Holds {
            layout: header.layout,
            found,
            wanted: Holds::Engine,
        });
    }
    Ok(Store::open_file(path, opts)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_engine::EngineKind;
    use ferrite_tx::{Strategy, TxOptions};

    fn new_pool(dir: &tempfile::TempDir, name: &str, layout: &str) -> (std::path::PathBuf, Pool) {
        let path = dir.path().join(name);
        let pool = Pool::create(&path, &PoolOptions::new(layout, 8 << 20)).unwrap();
        (path, pool)
    }

    #[test]
    fn server_layouts_name_what_they_hold() {
        assert_eq!(server_layout(LAYOUT), Some(Holds::Engine));
        assert_eq!(server_layout(TX_LAYOUT), Some(Holds::Tx));
        for alg in Algorithm::ALL {
            assert_eq!(server_layout(&ptm_layout(alg)), Some(Holds::Ptm));
        }
        assert_eq!(server_layout("ferrite-serve-ptm-other"), None);
        assert_eq!(server_layout("tx"), None);
    }

    /// Every server store reopens as what its layout says, with what it
    /// was made with (a PTM's algorithm and slots come from its
    /// superblock, not from defaults).
    #[test]
    fn each_server_store_reopens_as_itself() {
        let dir = tempfile::tempdir().unwrap();
        let (p, pool) = new_pool(&dir, "engine.pool", LAYOUT);
        Store::create(&pool, &StoreOptions::new(EngineKind::Cow))
            .unwrap()
            .close()
            .unwrap();
        pool.close().unwrap();
        let (pool, o) = open_server_store(&p).unwrap();
        assert!(matches!(&o, Opened::Engine(s) if s.kind() == EngineKind::Cow));
        o.close().unwrap();
        pool.close().unwrap();

        let (p, pool) = pool_tx(&dir);
        pool.close().unwrap();
        let (pool, o) = open_server_store(&p).unwrap();
        assert!(matches!(&o, Opened::Tx(t) if t.strategy() == Strategy::Redo));
        o.close().unwrap();
        pool.close().unwrap();

        for alg in Algorithm::ALL {
            let (p, pool) = new_pool(&dir, &format!("{}.pool", alg.name()), &ptm_layout(alg));
            drop(Ptm::create(&pool, &PtmOptions::new(alg).slots(3).log_bytes(8192)).unwrap());
            pool.close().unwrap();
            let (pool, o) = open_server_store(&p).unwrap();
            let Opened::Ptm(ptm) = &o else {
                panic!("{alg:?}: not opened as a PTM");
            };
            assert_eq!(ptm.algorithm(), alg);
            assert_eq!(ptm.options().slots, 3);
            assert_eq!(ptm.options().log_bytes, 8192);
            o.close().unwrap();
            pool.close().unwrap();
        }
    }

    fn pool_tx(dir: &tempfile::TempDir) -> (std::path::PathBuf, Pool) {
        let (p, pool) = new_pool(dir, "tx.pool", TX_LAYOUT);
        let opts = TxOptions::new(Strategy::Redo).slots(2).area_bytes(8192);
        drop(TxPool::create(&pool, &opts, ferrite_ds::registry()).unwrap());
        (p, pool)
    }

    #[test]
    fn a_foreign_layout_is_not_a_server_store_and_kv_refuses_other_stores_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let (p, pool) = new_pool(&dir, "other.pool", "my-app");
        pool.close().unwrap();
        let e = open_server_store(&p).err().expect("refused");
        assert_eq!(e.to_string(), "pool layout 'my-app' is not a server store");

        let (p, pool) = pool_tx(&dir);
        pool.close().unwrap();
        let e = open_engine_store(&p, &StoreOptions::default()).expect_err("refused");
        assert!(
            matches!(
                e,
                OpenError::Holds {
                    found: Holds::Tx,
                    wanted: Holds::Engine,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "the pool's layout 'ferrite-serve-tx' marks a transactional pool, not an engine store"
        );
        // A log or heap is checked and recovered, never opened as a store.
        let e = open(&p, Holds::Heap, &StoreOptions::default())
            .err()
            .expect("refused");
        assert!(matches!(e, OpenError::NotAStore(Holds::Heap)), "{e}");
    }

    #[test]
    fn recognise_reads_the_contents_not_the_name() {
        let dir = tempfile::tempdir().unwrap();
        // A transactional pool under a layout no server store uses.
        let (p, pool) = new_pool(&dir, "plain.pool", "anything");
        let opts = TxOptions::new(Strategy::Undo).slots(2).area_bytes(8192);
        drop(TxPool::create(&pool, &opts, ferrite_ds::registry()).unwrap());
        pool.close().unwrap();
        let image = std::fs::read(&p).unwrap();
        assert_eq!(recognise(&image, "anything"), Holds::Tx);
        let (pool, o) = open(&p, Holds::Tx, &StoreOptions::default()).unwrap();
        assert!(matches!(&o, Opened::Tx(t) if t.strategy() == Strategy::Undo));
        o.close().unwrap();
        pool.close().unwrap();
        let blank = vec![0u8; 2 * HEADER_SIZE];
        assert_eq!(recognise(&blank, "anything"), Holds::Unknown);
    }
}
