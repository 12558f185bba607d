//! The part of `ferrite pool check --deep` that reads a server pool's
//! items (item format 2 of `ferrite_server::store`: a CRC32C per item):
//! each item whose checksum or fields fail is a finding naming its key.
//! Kept apart from [`crate::deep`], which recognises the pool and walks
//! its components; this runs after, on its own in-memory copy.
//!
//! Also here: the kernel's bad blocks under the pool file
//! ([`ferrite_pmem::badblocks`]), one finding (kind `bad-block`) per
//! damaged range of the pool; nothing where the platform lists none.
//! `FERRITE_SYSFS_ROOT` replaces `/sys` (tests).
//!
//! | store                         | recognised by                              |
//! |-------------------------------|--------------------------------------------|
//! | `tx-undo`, `tx-redo`, `tx-clobber` | layout `ferrite-serve-tx`             |
//! | `ptm-lazy`, `ptm-eager`       | layout `ferrite-serve-ptm-lazy` / `-eager` |
//! | `engine-inp`, `-lsm`, `-cow`  | layout `ferrite-kv` and the server's format record `\0fmt` (a `ferrite kv` store has none) |

use crate::deep::{Finding, Report};
use crate::opener::Opened;
use ferrite_engine::{Store, StoreOptions};
use ferrite_pmem::{Domain, Header, Pool, PoolOptions};
use ferrite_ptm::{Algorithm, Ptm, PtmOptions};
use ferrite_server::store::{ItemCheck, Kv, StoreError, verify_items};
use std::path::Path;

/// The kind of the finding of one damaged server item.
pub const ITEM_DAMAGED: &str = "server-item-damaged";

/// The layout of the server's `tx-*` pools (`ferrite serve`).
const TX_LAYOUT: &str = "ferrite-serve-tx";

fn finding(kind: &'static str, message: String) -> Finding {
    Finding {
        component: "server",
        kind,
        message,
    }
}

/// Verifies every item of the server store `image` holds, if it holds
/// one; adds a finding per damaged item (kind `server-item-damaged`) and a
/// note with the counts. A component the walk already found unreadable
/// is left to its own findings.
pub fn server_items(image: &[u8], header: &Header, r: &mut Report) {
    let checked = match header.layout.as_str() {
        TX_LAYOUT => with_copy(image, header, tx_items),
        l if l.starts_with("ferrite-serve-ptm-") => with_copy(image, header, ptm_items),
        l if l == ferrite_engine::LAYOUT => match with_copy(image, header, engine_items) {
            // A `ferrite kv` store: not the server's.
            Ok(None) => return,
            other => other,
        },
        _ => return,
    };
    match checked {
        Ok(Some(c)) => {
            // The byte map's own record check names the same items (its
            // record is the item): one finding per item, the server's.
            let same: Vec<String> = (c.damaged_keys.iter())
                .map(|k| format!("record key {:?} ", String::from_utf8_lossy(k)))
                .collect();
            r.findings.retain(|f| {
                f.kind != "ds-damaged" || !same.iter().any(|s| f.message.contains(s.as_str()))
            });
            r.notes.push(format!(
                "server items: {} verified, {} damaged (CRC32C per item)",
                c.items,
                c.damaged.len()
            ));
            r.findings.extend(c.damaged.into_iter().map(|(key, why)| {
                finding(
                    ITEM_DAMAGED,
                    format!("item '{key}': {why} (reads of it answer SERVER_ERROR; a client's set or delete replaces it; --repair removes it)"),
                )
            }));
        }
        Ok(None) => {}
        Err(Some(e @ StoreError::Format { .. })) => {
            r.findings.push(finding("server-format", e.to_string()))
        }
        Err(Some(e)) => r.notes.push(format!("server items not checked: {e}")),
        // The store does not open: its component's findings say why.
        Err(None) => r
            .notes
            .push("server items not checked: the store does not open on a copy".into()),
    }
}

type Checked = Result<Option<ItemCheck>, Option<StoreError>>;

/// Runs `f` on an in-memory copy of the pool (recovery writes only the copy).
fn with_copy(image: &[u8], header: &Header, f: fn(&Pool) -> Checked) -> Checked {
    let pool = Pool::open_image(
        image,
        &PoolOptions::new(&header.layout, 0),
        Domain::Volatile,
        None,
    )
    .map_err(|_| None)?;
    f(&pool)
}

fn walk(kv: &mut dyn Kv) -> Checked {
    verify_items(kv).map(Some).map_err(Some)
}

fn tx_items(pool: &Pool) -> Checked {
    let txp = ferrite_server::store::tx::open(pool).map_err(|_| None)?;
    let map = ferrite_server::store::tx::map(&txp).map_err(|_| None)?;
    let mut kv = ferrite_server::store::tx::TxKv::new(&map).map_err(Some)?;
    walk(&mut kv)
}

fn ptm_items(pool: &Pool) -> Checked {
    let mut raw = [0u8; ferrite_ptm::format::SB_BYTES];
    ferrite_pmem::Region::whole(pool.medium().clone())
        .read(ferrite_ptm::format::SB_OFF as usize, &mut raw);
    let sb = ferrite_ptm::format::Superblock::decode(&raw, pool.header().size).map_err(|_| None)?;
    let alg = if sb.algorithm == 1 {
        Algorithm::Eager
    } else {
        Algorithm::Lazy
    };
    let opts = PtmOptions::new(alg).slots(sb.slots).log_bytes(sb.log_bytes);
    let ptm = Ptm::open(pool, &opts).map_err(|_| None)?;
    // On a pool the server never wrote to this creates an empty map (on
    // the copy), which verifies no item.
    let map = ferrite_server::store::ptm::open_map(&ptm).map_err(Some)?;
    let mut kv = ferrite_server::store::ptm::PtmKv::new(&ptm, map).map_err(Some)?;
    walk(&mut kv)
}

fn engine_items(pool: &Pool) -> Checked {
    let store = Store::open(pool, &StoreOptions::default()).map_err(|_| None)?;
    let session = store.session().map_err(|_| None)?;
    let mut kv = ferrite_server::store::engine::EngineKv::new(Box::new(session));
    let mut rec = Vec::new();
    if !kv
        .get_into(ferrite_server::store::META_FORMAT, &mut rec)
        .map_err(Some)?
    {
        return Ok(None);
    }
    walk(&mut kv)
}

/// `--repair` of a server pool whose damage is items failing their
/// checksums: the store is opened on the file (its recovery runs), each
/// damaged item is deleted through the map by its key — one durable write
/// each, as a client's `delete` — and the map is verified again. A cache
/// may lose an item; it must never serve a wrong one, so removing is the
/// repair (the client's next get misses and refills it).
///
/// Refused whole, with the reason, when the pool also holds damage the
/// item walk does not cover (a header, the map's own structure, leaks):
/// a write could make it worse. An item whose key bytes are damaged may
/// lie where the map's lookup of that key never looks: it is named as
/// not removed.
pub fn repair_items(path: &Path, report: &Report) -> Result<(Vec<String>, Vec<String>), String> {
    let other: Vec<&Finding> = report
        .findings
        .iter()
        // The byte map's findings of the items' own records were folded
        // into the items' ([`server_items`]): a `ds-damaged` one left is
        // a record no item covers, which deleting items would not remove.
        .filter(|f| f.kind != ITEM_DAMAGED && !crate::deep::RECOVERABLE.contains(&f.kind))
        .collect();
    if let Some(f) = other.first() {
        return Ok((
            Vec::new(),
            vec![format!(
                "{}: {} (the damaged items are not removed while the pool also holds this: restore the pool from a backup)",
                f.component, f.message
            )],
        ));
    }
    let e = |x: &dyn std::fmt::Display| crate::at(path, format!("repair: {x}"));
    let (pool, opened) = crate::opener::open_server_store(path).map_err(|x| e(&x))?;
    let mut done = Vec::new();
    if let Some(f) = report
        .findings
        .iter()
        .find(|f| crate::deep::RECOVERABLE.contains(&f.kind))
    {
        done.push(format!("{}: recovery ran ({})", f.component, f.message));
    }
    let removed = match &opened {
        Opened::Tx(txp) => {
            let map = ferrite_server::store::tx::map(txp).map_err(|x| e(&x))?;
            let mut kv = ferrite_server::store::tx::TxKv::new(&map).map_err(|x| e(&x))?;
            remove_damaged(&mut kv)
        }
        Opened::Ptm(ptm) => {
            let map = ferrite_server::store::ptm::open_map(ptm).map_err(|x| e(&x))?;
            let mut kv = ferrite_server::store::ptm::PtmKv::new(ptm, map).map_err(|x| e(&x))?;
            remove_damaged(&mut kv)
        }
        Opened::Engine(store) => {
            let session = store.session().map_err(|x| e(&x))?;
            let mut kv = ferrite_server::store::engine::EngineKv::new(Box::new(session));
            remove_damaged(&mut kv)
        }
    };
    let (removed, refused) = removed.map_err(|x| e(&x))?;
    done.extend(removed);
    opened.close().map_err(|x| e(&x))?;
    pool.close().map_err(|x| e(&x))?;
    Ok((done, refused))
}

/// Deletes each damaged item of the map behind `kv`; returns what was
/// removed and what is still damaged after (each named, with why).
fn remove_damaged(kv: &mut dyn Kv) -> Result<(Vec<String>, Vec<String>), StoreError> {
    let found = verify_items(kv)?;
    let mut failed = Vec::new();
    for (key, (shown, _)) in found.damaged_keys.iter().zip(&found.damaged) {
        if let Err(x) = kv.delete(key) {
            failed.push((shown.clone(), x.to_string()));
        }
    }
    let left = verify_items(kv)?;
    let removed = found
        .damaged
        .iter()
        .filter(|(shown, _)| !left.damaged.iter().any(|(l, _)| l == shown))
        .map(|(shown, why)| {
            format!("server: item '{shown}' removed ({why}): a get of it now misses")
        })
        .collect();
    let refused = left
        .damaged
        .iter()
        .map(|(shown, why)| match failed.iter().find(|(f, _)| f == shown) {
            Some((_, x)) => format!("server: item '{shown}' ({why}) not removed: {x}"),
            None => format!(
                "server: item '{shown}' ({why}) not removed: the map does not find it by its key (its key bytes may be damaged): restore the pool from a backup"
            ),
        })
        .collect();
    Ok((removed, refused))
}

/// Adds a finding per range of the pool at `path` that the kernel lists
/// as bad; a note when the list cannot be mapped; nothing where the
/// platform lists none.
pub fn bad_blocks(path: &std::path::Path, r: &mut Report) {
    let Ok((h, _)) = Pool::inspect(path) else {
        return;
    };
    let Ok(file) = std::fs::File::open(path) else {
        return;
    };
    let len = match file.metadata() {
        Ok(m) if h.growable() => m.len().min(h.max_size),
        Ok(_) => h.size,
        Err(_) => return,
    };
    let probe = match std::env::var_os("FERRITE_SYSFS_ROOT") {
        Some(root) => ferrite_pmem::badblocks::Probe { root: root.into() },
        None => ferrite_pmem::badblocks::Probe::default(),
    };
    match ferrite_pmem::badblocks::probe(&file, path, len, &probe) {
        Ok(Some(b)) => {
            for x in &b.ranges {
                r.findings.push(Finding {
                    component: "pool",
                    kind: "bad-block",
                    message: format!(
                        "bytes {:#x}..{:#x} ({} B) lie on a bad block the kernel lists ({}): what they hold cannot be read",
                        x.offset,
                        x.offset + x.len,
                        x.len,
                        b.source.display()
                    ),
                });
            }
        }
        Ok(None) => {}
        Err(e) => r.notes.push(format!("bad blocks: {e}")),
    }
}
