//! The engine suite's recovery rows (module docs of [`super`], "Recovery"):
//! every engine × allocator, LMDB and the peers loaded with one dataset,
//! then timed reopening a copy of what a crash leaves, at most
//! [`RECOVERY_REPS`] times.

use super::workloads::{self, Workload};
use super::{FerriteStore, MIB, Opened, SUITE, System, mem_available, params, skipped_row};
use crate::ctx::BenchCtx;
use crate::measure::{median, spread};
use crate::peers::lmdb::SHM;
use crate::row::Row;
use ferrite_engine::{EngineKind, LAYOUT, Store, StoreOptions};
use ferrite_pmem::{Domain, Pool, PoolOptions};
use serde_json::json;
use std::time::Instant;

/// Pool bytes for a recovery dataset of `capacity` bytes on `system`:
/// tighter than [`pool_bytes`] (nothing is written after the load), so
/// that a 4 GiB dataset, its pool image and the reopened copy fit in
/// memory — 1.5× the data for InP and CoW, 2.5× for LSM, whose merges
/// write a run's replacement before freeing it (at 1.5× its load stops
/// with "no room left to merge the runs").
pub fn recovery_pool_bytes(system: System, capacity: u64) -> u64 {
    let extra = match system {
        System::Ferrite {
            engine: EngineKind::Lsm,
            ..
        } => capacity + capacity / 2,
        _ => capacity / 2,
    };
    (capacity + extra + 64 * MIB).next_multiple_of(MIB)
}

/// Recovery rows for a dataset of `bytes` bytes of 1000-byte values, for
/// every engine × allocator and LMDB.
pub fn recovery(ctx: &BenchCtx, bytes: u64, domain: Domain) -> Vec<Row> {
    let w = workloads::recovery_dataset(bytes);
    let mut rows = Vec::new();
    let mut systems = System::ferrite_all(domain);
    systems.push(System::Lmdb);
    systems.extend(System::peers());
    for system in systems {
        let mut p = params(system, &*w);
        p["dataset_bytes"] = json!(bytes);
        // The pool file, its image and the reopened copy (the file is
        // dropped first, so two of the three at once) plus the generator's
        // own buffers.
        let need = recovery_pool_bytes(system, w.capacity_bytes()) * 2 + 512 * MIB;
        let room = mem_available().is_none_or(|a| a > need + need / 8);
        if !room {
            rows.push(skipped_row(
                system.variant(),
                p,
                1,
                &format!(
                    "needs {} MiB of memory for the pool and its image",
                    need / MIB
                ),
            ));
            continue;
        }
        ctx.note(format!(
            "[engine] recovery {} MiB {}: loading",
            bytes / MIB,
            system.label()
        ));
        match recover_one(ctx, system, &*w) {
            Ok(mut r) => {
                r.params = p;
                rows.push(r)
            }
            Err(e) => rows.push(skipped_row(system.variant(), p, 1, &e)),
        }
    }
    rows
}

/// Most timed opens per recovery row: each needs a fresh copy of the
/// pool image (gigabytes at full scale), so `ctx.reps` is capped.
pub const RECOVERY_REPS: usize = 5;

fn recover_one(ctx: &BenchCtx, system: System, w: &dyn Workload) -> Result<Row, String> {
    let reps = ctx.reps.clamp(1, RECOVERY_REPS);
    let cap = w.capacity_bytes();
    let opened = Opened::create_sized(system, cap, recovery_pool_bytes(system, cap), 1)?;
    let keys = opened.load(|kv| w.load(kv))?;
    let mut ms = Vec::with_capacity(reps);
    let mut detail = String::new();
    let mut recovered = 0u64;
    match opened {
        Opened::Ferrite(f) => {
            let FerriteStore { store, file } = *f;
            store.quiesce().map_err(|e| format!("quiesce: {e}"))?;
            // The crash: the pool as it is, the store never closed.
            let image = file.pool.image();
            let opts = PoolOptions::new(LAYOUT, image.len() as u64);
            let domain = file.pool.domain();
            drop(store);
            drop(file);
            for _ in 0..reps {
                let pool = Pool::open_image(&image, &opts, domain, None)
                    .map_err(|e| format!("image: {e}"))?;
                let t0 = Instant::now();
                let s = Store::open(&pool, &StoreOptions::default())
                    .map_err(|e| format!("recovery: {e}"))?;
                ms.push(t0.elapsed().as_secs_f64() * 1e3);
                recovered = s.recovery().keys;
                detail = s.recovery().detail.clone();
            }
        }
        Opened::Lmdb(l) => {
            // LMDB is consistent at every commit: opening is mapping the
            // file and reading the meta pages. Time a fresh open of the
            // same files (the first handle closed, as after a crash).
            let dir = tempfile::Builder::new()
                .prefix("ferrite-bench-lmdb-copy-")
                .tempdir_in(SHM)
                .map_err(|e| e.to_string())?;
            let map = l.map_bytes();
            std::fs::copy(l.path().join("data.mdb"), dir.path().join("data.mdb"))
                .map_err(|e| format!("copy: {e}"))?;
            drop(l);
            for _ in 0..reps {
                let t0 = Instant::now();
                let n = crate::peers::lmdb::open_existing(dir.path(), map)
                    .map_err(|e| format!("lmdb reopen: {e}"))?;
                ms.push(t0.elapsed().as_secs_f64() * 1e3);
                recovered = n;
            }
            detail = "mdb_env_open + first read txn".into();
        }
        #[cfg(feature = "rocksdb")]
        Opened::Rocksdb(r) => {
            // Like LMDB: close the loaded database (with the WAL enabled
            // RocksDB does not flush its memtable at close, so the files
            // are what a crash after the last synced write leaves: SST
            // files, MANIFEST and the WAL still to replay) and time
            // `rocksdb_open` of a fresh copy each time (an open replays
            // the WAL into a new SST file, changing the files).
            let dir = r.close();
            let src = dir.path().join("db");
            for i in 0..reps {
                let copy = tempfile::Builder::new()
                    .prefix("ferrite-bench-rocksdb-copy-")
                    .tempdir_in(SHM)
                    .map_err(|e| e.to_string())?;
                let to = copy.path().join("db");
                crate::peers::rocksdb::copy_dir(&src, &to).map_err(|e| e.to_string())?;
                let t0 = Instant::now();
                let db = crate::peers::rocksdb::RocksDb::open(&to, false)
                    .map_err(|e| format!("rocksdb reopen: {e}"))?;
                ms.push(t0.elapsed().as_secs_f64() * 1e3);
                // Counting is a full scan, not part of reopening: once.
                if i == 0 {
                    recovered = db.count_keys().map_err(|e| e.to_string())?;
                }
            }
            detail = "rocksdb_open (MANIFEST + WAL replay)".into();
        }
        #[cfg(feature = "pmdk")]
        Opened::Pmdk(_) => {
            return Err("recovery rows copy a Ferrite pool image; a PMDK pool has none".into());
        }
    }
    let mut row = Row::empty(SUITE, system.variant(), serde_json::Value::Null);
    row.reps = reps;
    row.ops = 1;
    let med = median(&ms);
    row.secs = med / 1e3;
    row.ns_per_op = med * 1e6;
    row.ops_per_s = if med > 0.0 { 1e3 / med } else { 0.0 };
    row.ns_per_op_spread = spread(&ms);
    row.set_extra("ms", (med * 1000.0).round() / 1000.0);
    row.set_extra("keys", recovered);
    row.set_extra("loaded", keys);
    row.set_extra("detail", detail);
    if !system.counters_observed() {
        row.counters_observed = false;
    }
    Ok(row)
}
