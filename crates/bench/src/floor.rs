//! The floor: the cheapest way this machine can make `N` bytes durable.
//!
//! One non-temporal copy of the `N` bytes ([`Region::write_nt`]) followed by
//! one fence ([`Region::fence`]) — no cache-line flush, one barrier. Any
//! technique that persists the same bytes does at least this much work, so
//! suites include a floor variant in their interleaved group and report
//! techniques against it (`baseline = "floor"`, or [`Row::times`]: "k× the
//! physical limit").
//!
//! Destinations rotate through the region in line-aligned steps so the copy
//! never hits the same lines back to back; for sizes that are multiples of
//! 16 bytes the whole copy is non-temporal (`nt_bytes_per_op == N`,
//! `lines_per_op == 0`, `fences_per_op == 1` in `adr`).

use crate::ctx::BenchCtx;
use crate::error::BenchError;
use crate::measure::{Variant, run_interleaved};
use crate::row::Row;
use ferrite_pmem::{CACHE_LINE, Domain, FlushKind, Pool, PoolOptions, Region};

/// Name of the floor variant.
pub const FLOOR: &str = "floor";

/// The floor variant for `bytes`-byte persists over `region` (which must
/// hold at least one `bytes`-sized slot). Run it in the same group as the
/// techniques it bounds. `params` records `bytes`.
pub fn floor_variant(region: &Region, bytes: usize, ops: u64) -> Variant<'_> {
    assert!(bytes > 0, "floor of 0 bytes");
    let step = bytes.div_ceil(CACHE_LINE) * CACHE_LINE;
    let slots = (region.len() / step).max(1);
    assert!(
        region.len() >= bytes,
        "floor region of {} bytes cannot hold {bytes}",
        region.len()
    );
    let src: Vec<u8> = (0..bytes).map(|i| (i as u8).wrapping_mul(31)).collect();
    let mut slot = 0usize;
    Variant::new(
        FLOOR,
        serde_json::json!({ "bytes": bytes, "domain": region.medium().domain().name() }),
        ops,
        move |n| {
            for _ in 0..n {
                region.write_nt(slot * step, &src);
                region.fence();
                slot += 1;
                if slot == slots {
                    slot = 0;
                }
            }
        },
    )
    .bytes_per_op(bytes as u64)
}

/// An in-memory pool of `bytes` data bytes in the `adr` domain with the
/// CPU's best flush instruction (or `eadr`, fences only, on a CPU without
/// flush instructions): where floors and barrier probes run.
pub fn floor_pool(bytes: usize) -> Result<Pool, BenchError> {
    let size = (bytes + ferrite_pmem::HEADER_SIZE).max(2 * ferrite_pmem::HEADER_SIZE) as u64;
    let domain = if FlushKind::best().is_some() {
        Domain::Adr
    } else {
        Domain::Eadr
    };
    Ok(Pool::create_in_memory(
        &PoolOptions::new("ferrite-bench-floor", size).domain(domain),
    )?)
}

/// Measures the floor alone for `bytes`-byte persists (its own pool of
/// `span` bytes) and returns its row. Prefer [`floor_variant`] inside the
/// group being compared: comparisons belong to one interleaved run.
pub fn measure_floor(
    ctx: &BenchCtx,
    suite: &str,
    bytes: usize,
    span: usize,
    ops: u64,
) -> Result<Row, BenchError> {
    let pool = floor_pool(span.max(bytes))?;
    let region = pool.data();
    region.fill(0, region.len(), 0);
    let mut v = [floor_variant(&region, bytes, ops)];
    let mut rows = run_interleaved(ctx, suite, &mut v);
    Ok(rows.remove(0))
}
