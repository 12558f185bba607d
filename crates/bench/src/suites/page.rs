//! `ferrite bench page`: failure-atomic page propagation [P0 §3.2, Fig. 7]
//! — copy-on-write, micro-log and hybrid — side by side with PMDK's
//! `pmemblk_write` and the floor, over dirty lines and threads.
//!
//! One interleaved group per (page size, threads), page sizes 4 KiB and
//! 16 KiB, threads 1 and 2. Each group runs:
//!
//! - `cow`: copy-on-write of the whole page (every line resident in DRAM,
//!   the paper's faster variant); independent of the dirty count;
//! - `microlog-kN` and `hybrid-kN` for each dirty count N (16 KiB: 1, 4,
//!   16, 64, 256 at `--quick`; more points at `--full`), the N lines spread
//!   evenly over the page;
//! - `pmdk-pmemblk` (feature `pmdk`): `pmemblk_write` of a block of the
//!   same size, a pool in `/dev/shm` with `PMEM_IS_PMEM_FORCE=1` (set by the
//!   CLI) so libpmem flushes and fences like Ferrite's `adr`;
//! - `floor`: one non-temporal copy of the page and one fence.
//!
//! Ferrite's store lives in an in-memory `adr` pool (the same DRAM PMDK's
//! `/dev/shm` pool lives in), created with a calibrated crossover; every
//! page is written once before timing, so the micro-log has a slot to
//! write in place. With two threads each writes its own half of the pages
//! (different pages: the store's per-page locks never contend) through its
//! own lane. Writers cycle through pages larger than the last-level cache.
//!
//! Each Ferrite row's `ratio_vs_baseline` is against the PMDK row of the
//! same page size and thread count (against the floor when built without
//! `pmdk`); `extra.gb_per_s` is page bytes per second (pages/s × page
//! size, as P0 converts), `extra.x_floor` the row's time as a multiple of
//! the floor's, `extra.dirty_gb_per_s` dirty bytes per second. A
//! `crossover` row per group reports where the micro-log stops beating
//! copy-on-write: the first measured dirty count at which it is not
//! faster, and the crossing interpolated between that point and the one
//! before, next to the crossover the store calibrated at creation (which
//! the hybrid uses).

use crate::ctx::{BenchCtx, Scale};
use crate::error::BenchError;
use crate::floor::FLOOR;
use crate::measure::{Variant, run_interleaved};
use crate::row::Row;
use ferrite_blocks::page::{
    CrossoverSource, DirtyLines, PageAlgorithm, PageStore, PageStoreOptions,
};
use ferrite_pmem::{CACHE_LINE, Domain, FlushKind, Pool, PoolOptions, Region};
use serde_json::json;

/// Name of the PMDK rows.
pub const PMDK: &str = "pmdk-pmemblk";

/// Bytes of pages per store (and per PMDK pool, and per floor area): twice
/// the last-level cache of the development machine.
const SPAN: usize = 64 << 20;

/// Page sizes measured.
pub const PAGE_SIZES: [usize; 2] = [4096, 16384];

/// Dirty-line counts measured for `page_size` at `scale`.
pub fn dirty_points(scale: Scale, page_size: usize) -> Vec<usize> {
    let lines = page_size / CACHE_LINE;
    let pts: &[usize] = scale.pick(
        &[1, 4, 16, 64, 256],
        &[
            1, 2, 4, 8, 12, 16, 20, 24, 32, 40, 48, 64, 96, 128, 192, 256,
        ],
    );
    pts.iter().copied().filter(|&k| k <= lines).collect()
}

fn domain() -> Domain {
    if FlushKind::best().is_some() {
        Domain::Adr
    } else {
        Domain::Eadr
    }
}

/// `k` lines spread evenly over a page of `lines` lines.
fn spread(k: usize, lines: usize) -> DirtyLines {
    DirtyLines::from_lines((0..k).map(|i| i * lines / k))
}

fn unsupported(what: impl std::fmt::Display) -> BenchError {
    BenchError::Unsupported(what.to_string())
}

/// A store of `SPAN` bytes of `page_size` pages, every page written once.
fn make_store(page_size: usize) -> Result<(Pool, PageStore), BenchError> {
    let pages = (SPAN / page_size) as u32;
    let opts = PageStoreOptions::new(page_size, pages)
        .lanes(4)
        .crossover(CrossoverSource::Calibrate);
    let len = opts.region_len().map_err(unsupported)?;
    let pool = Pool::create_in_memory(
        &PoolOptions::new("bench-page", (len + (1 << 20)) as u64).domain(domain()),
    )?;
    let region = pool.data().sub(0, len).map_err(unsupported)?;
    let store = PageStore::create(region, &opts).map_err(unsupported)?;
    let page = page_bytes(page_size, 0);
    let all = DirtyLines::all(page_size / CACHE_LINE);
    for p in 0..pages {
        store
            .write_page_with(PageAlgorithm::Cow, p, &page, &all)
            .map_err(unsupported)?;
    }
    Ok((pool, store))
}

fn page_bytes(page_size: usize, seed: u8) -> Vec<u8> {
    (0..page_size)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A floor over `threads` disjoint parts of `region`: each thread copies
/// pages non-temporally into its part and fences after each.
fn floor_variant<'a>(
    region: &'a Region,
    page_size: usize,
    threads: usize,
    ops: u64,
) -> Variant<'a> {
    let part = region.len() / threads / page_size;
    let src = page_bytes(page_size, 7);
    let body = move |t: usize, n: u64| {
        let base = t * part * page_size;
        let mut slot = 0;
        for _ in 0..n {
            region.write_nt(base + slot * page_size, &src);
            region.fence();
            slot = (slot + 1) % part;
        }
    };
    let params = json!({ "page_size": page_size, "domain": region.medium().domain().name() });
    if threads == 1 {
        Variant::new(FLOOR, params, ops, move |n| body(0, n))
    } else {
        Variant::threaded(FLOOR, params, threads, ops, body)
    }
    .bytes_per_op(page_size as u64)
}

/// Runs the suite.
pub fn run(ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    let mut all = Vec::new();
    for page_size in PAGE_SIZES {
        let (_pool, store) = make_store(page_size)?;
        let floor_pool = Pool::create_in_memory(
            &PoolOptions::new("bench-page-floor", (SPAN + (1 << 20)) as u64).domain(domain()),
        )?;
        let floor_region = floor_pool.data().sub(0, SPAN).map_err(unsupported)?;
        floor_region.fill(0, SPAN, 0);
        #[cfg(feature = "pmdk")]
        let (pmdk_path, pmdk) = pmdk_blk(page_size)?;
        for threads in [1usize, 2] {
            ctx.note(format!("page size {page_size} B, {threads} thread(s)"));
            #[cfg(feature = "pmdk")]
            let rows = group(ctx, &store, &floor_region, Some(&pmdk), page_size, threads);
            #[cfg(not(feature = "pmdk"))]
            let rows = group(ctx, &store, &floor_region, None::<&()>, page_size, threads);
            all.extend(rows);
        }
        #[cfg(feature = "pmdk")]
        {
            drop(pmdk);
            let _ = std::fs::remove_file(&pmdk_path);
        }
    }
    Ok(all)
}

/// Something a PMDK row can write blocks to (`()` when PMDK is not built).
trait Blocks: Sync {
    fn write_block(&self, block: u64, data: &[u8]);
    fn blocks(&self) -> u64;
    /// Whether libpmem flushes and fences (rather than `msync`s).
    fn forced(&self) -> bool;
}

impl Blocks for () {
    fn write_block(&self, _: u64, _: &[u8]) {}
    fn blocks(&self) -> u64 {
        1
    }
    fn forced(&self) -> bool {
        false
    }
}

#[cfg(feature = "pmdk")]
impl Blocks for ferrite_pmdk::PmemBlk {
    fn write_block(&self, block: u64, data: &[u8]) {
        self.write(block, data).expect("pmemblk_write");
    }
    fn blocks(&self) -> u64 {
        self.nblock()
    }
    fn forced(&self) -> bool {
        ferrite_pmdk::pmem_forced()
    }
}

/// One interleaved group: every variant for one page size and thread count.
fn group<B: Blocks>(
    ctx: &BenchCtx,
    store: &PageStore,
    floor_region: &Region,
    pmdk: Option<&B>,
    page_size: usize,
    threads: usize,
) -> Vec<Row> {
    let lines = page_size / CACHE_LINE;
    let pages = store.pages() as usize;
    // Operations per thread per timed batch: 128 MiB of pages (512 MiB at
    // full scale) over all threads: each batch cycles twice through the
    // pages, and lasts milliseconds even for the cheapest variant.
    let ops = (ctx.scale.pick(128usize << 20, 512 << 20) / page_size / threads) as u64;
    let baseline = if pmdk.is_some() { PMDK } else { FLOOR };
    let per_thread = pages / threads;
    let data: Vec<Vec<u8>> = (0..threads)
        .map(|t| page_bytes(page_size, t as u8 + 1))
        .collect();
    let data = &data;
    let crossover = store.crossover().for_writers(threads as u32);

    // One Ferrite variant: `alg` with `dirty` lines, each thread cycling
    // through its own pages.
    let ferrite = |name: String, alg: PageAlgorithm, dirty: DirtyLines, k: usize| {
        let body = move |t: usize, n: u64| {
            let first = t * per_thread;
            let mut i = 0usize;
            for _ in 0..n {
                let page = (first + i) as u32;
                store
                    .write_page_with(alg, page, &data[t], &dirty)
                    .expect("page write");
                i += 1;
                if i == per_thread {
                    i = 0;
                }
            }
        };
        let params = json!({ "page_size": page_size, "dirty_lines": k, "algorithm": alg.name() });
        let v = if threads == 1 {
            Variant::new(name, params, ops, move |n| body(0, n))
        } else {
            Variant::threaded(name, params, threads, ops, body)
        };
        v.bytes_per_op(page_size as u64).baseline(baseline)
    };

    let mut variants: Vec<Variant<'_>> = Vec::new();
    variants.push(ferrite(
        "cow".into(),
        PageAlgorithm::Cow,
        DirtyLines::all(lines),
        lines,
    ));
    let points = dirty_points(ctx.scale, page_size);
    for &k in &points {
        let d = spread(k, lines);
        variants.push(ferrite(
            format!("microlog-k{k}"),
            PageAlgorithm::MicroLog,
            d,
            k,
        ));
        variants.push(ferrite(format!("hybrid-k{k}"), PageAlgorithm::Hybrid, d, k));
    }
    if let Some(blk) = pmdk {
        let nblock = blk.blocks() as usize;
        let per = nblock / threads;
        let body = move |t: usize, n: u64| {
            let mut i = 0usize;
            for _ in 0..n {
                blk.write_block((t * per + i) as u64, &data[t]);
                i += 1;
                if i == per {
                    i = 0;
                }
            }
        };
        let params = json!({ "page_size": page_size, "pmem_is_pmem_forced": blk.forced() });
        let v = if threads == 1 {
            Variant::new(PMDK, params, ops, move |n| body(0, n))
        } else {
            Variant::threaded(PMDK, params, threads, ops, body)
        };
        variants.push(v.bytes_per_op(page_size as u64));
    }
    variants.push(floor_variant(floor_region, page_size, threads, ops));

    let mut rows = run_interleaved(ctx, "page", &mut variants);
    drop(variants);
    let floor = rows.iter().find(|r| r.variant == FLOOR).cloned();
    for r in rows.iter_mut() {
        r.set_param("page_size", page_size);
        if r.variant == PMDK {
            r.counters_observed = false;
        }
        if let Some(f) = &floor
            && r.variant != FLOOR
        {
            let x = r.times(f);
            r.set_extra("x_floor", x);
        }
        if let Some(k) = r.params.get("dirty_lines").and_then(|v| v.as_u64())
            && r.ns_per_op > 0.0
        {
            r.set_extra(
                "dirty_gb_per_s",
                (k as usize * CACHE_LINE) as f64 / r.ns_per_op,
            );
        }
        if r.variant.starts_with("hybrid-") {
            let k = r.params["dirty_lines"].as_u64().unwrap_or(0) as usize;
            let chose = if k < usize::from(crossover) {
                "microlog"
            } else {
                "cow"
            };
            r.set_extra("chose", chose);
        }
    }
    let xrow = crossover_row(&rows, &points, page_size, threads, crossover);
    rows.push(xrow);
    rows
}

/// Where the micro-log stops beating copy-on-write in this group's rows.
fn crossover_row(
    rows: &[Row],
    points: &[usize],
    page_size: usize,
    threads: usize,
    calibrated: u16,
) -> Row {
    let find = |name: &str| rows.iter().find(|r| r.variant == name);
    let mut row = Row::empty(
        "page",
        "crossover",
        json!({ "page_size": page_size, "figure": "P0 Fig. 7" }),
    );
    row.threads = threads;
    row.set_extra("calibrated_lines", calibrated);
    let Some(cow) = find("cow") else {
        return row;
    };
    let series: Vec<(usize, f64)> = points
        .iter()
        .filter_map(|&k| find(&format!("microlog-k{k}")).map(|r| (k, r.ns_per_op)))
        .collect();
    row.set_extra("cow_ns", cow.ns_per_op);
    row.set_extra(
        "microlog_ns",
        serde_json::Value::Array(series.iter().map(|&(k, ns)| json!([k, ns])).collect()),
    );
    match series.iter().position(|&(_, ns)| ns >= cow.ns_per_op) {
        None => {
            row.set_extra("measured_lines", "never (micro-log wins at every point)");
        }
        Some(0) => {
            row.set_extra("measured_lines", "never wins");
        }
        Some(i) => {
            let ((k0, t0), (k1, t1)) = (series[i - 1], series[i]);
            let k = if t1 > t0 {
                k0 as f64 + (cow.ns_per_op - t0) / (t1 - t0) * (k1 - k0) as f64
            } else {
                k1 as f64
            };
            row.set_extra("measured_lines", (k * 10.0).round() / 10.0);
            row.set_extra("bracket", json!([k0, k1]));
        }
    }
    row
}

#[cfg(feature = "pmdk")]
fn pmdk_blk(page_size: usize) -> Result<(std::path::PathBuf, ferrite_pmdk::PmemBlk), BenchError> {
    let path = std::path::PathBuf::from(format!(
        "{}/ferrite-bench-pmemblk-{}-{page_size}",
        ferrite_pmdk::SHM_DIR,
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    // Block metadata (BTT map, flog) takes a few percent beyond the data.
    let pool = SPAN + SPAN / 16 + (16 << 20);
    let blk = ferrite_pmdk::PmemBlk::create(&path, page_size, pool)
        .map_err(|e| unsupported(format!("pmemblk_create {}: {e}", path.display())))?;
    Ok((path, blk))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(variant: &str, ns: f64) -> Row {
        let mut r = Row::empty("page", variant, json!({}));
        r.ns_per_op = ns;
        r
    }

    #[test]
    fn points_fit_the_page() {
        assert_eq!(dirty_points(Scale::Quick, 16384), vec![1, 4, 16, 64, 256]);
        assert_eq!(dirty_points(Scale::Quick, 4096), vec![1, 4, 16, 64]);
        assert!(dirty_points(Scale::Full, 4096).iter().all(|&k| k <= 64));
        assert_eq!(
            spread(4, 256).iter().collect::<Vec<_>>(),
            vec![0, 64, 128, 192]
        );
    }

    #[test]
    fn the_crossover_is_interpolated_between_the_bracketing_points() {
        let rows = vec![
            row("cow", 1000.0),
            row("microlog-k1", 300.0),
            row("microlog-k4", 500.0),
            row("microlog-k16", 900.0),
            row("microlog-k64", 2500.0),
        ];
        let x = crossover_row(&rows, &[1, 4, 16, 64], 16384, 1, 20);
        let extra = x.extra.unwrap();
        // 900 at 16, 2500 at 64: 1000 is reached at 16 + 48 · 100/1600 = 19.
        assert_eq!(extra["measured_lines"], json!(19.0));
        assert_eq!(extra["bracket"], json!([16, 64]));
        assert_eq!(extra["calibrated_lines"], json!(20));
        let never = crossover_row(&rows[..3], &[1, 4], 16384, 1, 20);
        assert!(never.extra.unwrap()["measured_lines"].is_string());
    }
}
