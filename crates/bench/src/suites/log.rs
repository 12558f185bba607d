//! `ferrite bench log`: the four log algorithms of [P0 §3.3] in every layout,
//! side by side with PMDK's `pmemlog_append` and the floor, per record size.
//!
//! For each record size one interleaved group runs: every Ferrite variant,
//! PMDK (feature `pmdk`: a pool in `/dev/shm`, `PMEM_IS_PMEM_FORCE=1` set by
//! the CLI so libpmem takes its flush+fence path, like Ferrite's `adr`), and
//! the floor — the same bytes persisted with one non-temporal copy and one
//! fence, no log logic. Ferrite logs live in an in-memory `adr` pool: the
//! same DRAM PMDK's `/dev/shm` pool lives in.
//!
//! Every Ferrite row's `ratio_vs_baseline` is against PMDK at the same size
//! (against the floor when built without `pmdk`; the `baseline` field names
//! which); `extra.x_floor` is its time as a multiple of the floor's. When a
//! log fills up, it is truncated to its end (PMDK: rewound), so both pay
//! for reuse.
//!
//! A last row, `fig8-series`, carries P0 Fig. 8 as data: throughput over
//! record size for every variant (naive/packed vs padded).

use crate::ctx::{BenchCtx, Scale};
use crate::error::BenchError;
use crate::floor::{FLOOR, floor_pool, floor_variant};
use crate::measure::{Variant, run_interleaved};
use crate::row::Row;
use ferrite_blocks::log::{Algorithm, Log, LogError};
use ferrite_pmem::{Domain, FlushKind, Pool, PoolOptions};
use serde_json::json;

/// Record sizes per scale.
pub fn sizes(scale: Scale) -> &'static [usize] {
    scale.pick(&[64, 256, 1024], &[8, 16, 32, 64, 128, 256, 512, 1024])
}

/// Bytes of log area per variant: large enough that wrap-around is rare
/// but real.
const LOG_BYTES: usize = 32 << 20;

/// Name of the PMDK row.
pub const PMDK: &str = "pmdk-pmemlog";

fn log_pool() -> Result<Pool, BenchError> {
    let domain = if FlushKind::best().is_some() {
        Domain::Adr
    } else {
        Domain::Eadr
    };
    Ok(Pool::create_in_memory(
        &PoolOptions::new("bench-log", (LOG_BYTES + (1 << 20)) as u64).domain(domain),
    )?)
}

fn append_or_wrap(log: &mut Log, rec: &[u8]) {
    match log.append(rec) {
        Ok(_) => {}
        Err(LogError::Full { .. }) => {
            let end = log.next_lsn();
            log.truncate(end).expect("truncate to the end of the log");
            log.append(rec).expect("append into an empty log");
        }
        Err(e) => panic!("log append failed: {e}"),
    }
}

/// Runs the suite.
pub fn run(ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    let ops: u64 = ctx.scale.pick(20_000, 200_000);
    let mut all = Vec::new();
    for &size in sizes(ctx.scale) {
        ctx.note(format!("record size {size} B"));
        let rec: Vec<u8> = (0..size)
            .map(|i| (i as u8).wrapping_mul(7).wrapping_add(1))
            .collect();
        let rec = &rec;

        let mut pools = Vec::new();
        let mut logs = Vec::new();
        for alg in Algorithm::ALL {
            for &v in alg.variants() {
                let pool = log_pool()?;
                let log = Log::create(pool.data(), v)
                    .map_err(|e| BenchError::Unsupported(format!("{v}: {e}")))?;
                pools.push(pool);
                logs.push((v, log));
            }
        }
        let floor = floor_pool(1 << 20)?;
        let floor_region = floor.data();

        #[cfg(feature = "pmdk")]
        let (pmdk_path, mut pmdk) = pmdk_log(size)?;
        let baseline = if cfg!(feature = "pmdk") { PMDK } else { FLOOR };

        let mut variants: Vec<Variant<'_>> = Vec::new();
        for (v, log) in logs.iter_mut() {
            let name = v.name();
            variants.push(
                Variant::new(
                    name,
                    json!({ "bytes": size, "algorithm": v.algorithm.name(), "padded": v.padded() }),
                    ops,
                    move |n| {
                        for _ in 0..n {
                            append_or_wrap(log, rec);
                        }
                    },
                )
                .bytes_per_op(size as u64)
                .baseline(baseline),
            );
        }
        #[cfg(feature = "pmdk")]
        variants.push(
            Variant::new(
                PMDK,
                json!({ "bytes": size, "pmem_is_pmem_forced": true }),
                ops,
                move |n| {
                    for _ in 0..n {
                        if pmdk.append(rec).is_err() {
                            pmdk.rewind();
                            pmdk.append(rec).expect("pmemlog_append into a rewound log");
                        }
                    }
                },
            )
            .bytes_per_op(size as u64),
        );
        variants.push(floor_variant(&floor_region, size, ops));

        let mut rows = run_interleaved(ctx, "log", &mut variants);
        drop(variants);
        for r in rows.iter_mut().filter(|r| r.variant == PMDK) {
            r.counters_observed = false;
        }
        if let Some(f) = rows.iter().find(|r| r.variant == FLOOR).cloned() {
            for r in rows.iter_mut().filter(|r| r.variant != FLOOR) {
                let x = r.times(&f);
                r.set_extra("x_floor", x);
            }
        }
        #[cfg(feature = "pmdk")]
        let _ = std::fs::remove_file(&pmdk_path);
        all.extend(rows);
    }
    all.push(fig8_row(&all));
    Ok(all)
}

/// P0 Fig. 8 as data: ops/s over record size per variant.
fn fig8_row(rows: &[Row]) -> Row {
    let mut series = serde_json::Map::new();
    for r in rows.iter().filter(|r| r.suite == "log") {
        let size = r.params.get("bytes").cloned().unwrap_or(json!(null));
        let e = series.entry(r.variant.clone()).or_insert_with(|| json!([]));
        if let Some(a) = e.as_array_mut() {
            a.push(json!([size, r.ops_per_s]));
        }
    }
    let mut row = Row::empty(
        "log",
        "fig8-series",
        json!({ "figure": "P0 Fig. 8", "x": "record bytes", "y": "appends/s" }),
    );
    row.set_extra("series", serde_json::Value::Object(series));
    row
}

#[cfg(feature = "pmdk")]
fn pmdk_log(size: usize) -> Result<(std::path::PathBuf, ferrite_pmdk::PmemLog), BenchError> {
    let path = std::path::PathBuf::from(format!(
        "{}/ferrite-bench-pmemlog-{}-{size}",
        ferrite_pmdk::SHM_DIR,
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let log = ferrite_pmdk::PmemLog::create(&path, LOG_BYTES + (1 << 20))
        .map_err(|e| BenchError::Unsupported(format!("pmemlog_create {}: {e}", path.display())))?;
    Ok((path, log))
}
