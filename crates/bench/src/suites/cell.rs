//! `ferrite bench cell`: failure-atomic in-place updates [P0 §3.4, Fig. 10].
//!
//! For each value size, one array per technique (CoW, log, FAM) of equal
//! bytes — much larger than the last-level cache — in an in-memory `adr`
//! pool, and one interleaved group measuring per technique:
//! - `update-seq` / `update-rand`: failure-atomic updates, sequential and
//!   random cell order;
//! - `read-seq` / `read-rand`: reads (FAM decodes its blocks);
//! - `dep-read`: dependent reads — each value holds the index of the next
//!   cell (a random cyclic permutation), so every read waits for the last.
//!
//! Every row's `ratio_vs_baseline` is against CoW's row of the same
//! measurement, so FAM's update rows state the FAM/CoW speed-up directly;
//! `extra.vs_log` gives the ratio against the log cell's row.

use crate::ctx::{BenchCtx, Scale};
use crate::error::BenchError;
use crate::measure::{Variant, run_interleaved};
use crate::row::Row;
use ferrite_blocks::cell::{CellArray, CellKind, ValueSize, format_any};
use ferrite_pmem::{Domain, FlushKind, Pool, PoolOptions};
use serde_json::json;
use std::cell::RefCell;

fn sizes(scale: Scale) -> &'static [ValueSize] {
    scale.pick(&[ValueSize::B16, ValueSize::B64], &ValueSize::ALL)
}

/// xorshift64: cheap, deterministic index stream for random patterns.
fn next_rand(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn bench_err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Unsupported(format!("{what}: {e}"))
}

/// A filled array: its pool, the array, and the cycle it holds (`perm[i]` is
/// the cell after `i`).
type Built = (Pool, Box<dyn CellArray>, Vec<u64>);

/// An array whose values form one random cycle: value `i` starts with the
/// index of the cell after `i` (Sattolo's algorithm).
fn build(kind: CellKind, size: ValueSize, bytes: usize) -> Result<Built, BenchError> {
    let count = bytes / kind.stride(size);
    let len = kind
        .region_len(size, count)
        .map_err(|e| bench_err("cell array", e))?;
    let domain = if FlushKind::best().is_some() {
        Domain::Adr
    } else {
        Domain::Eadr
    };
    let pool = Pool::create_in_memory(
        &PoolOptions::new("bench-cell", (len + (1 << 21)) as u64).domain(domain),
    )?;
    let region = pool
        .data()
        .sub(0, len)
        .map_err(|e| bench_err("cell region", e))?;
    let mut arr =
        format_any(kind, region, size, count).map_err(|e| bench_err("format cells", e))?;
    let mut perm: Vec<u64> = (0..count as u64).collect();
    let mut x = 0x2545_f491_4f6c_dd1d;
    for i in (1..count).rev() {
        let j = (next_rand(&mut x) % i as u64) as usize;
        perm.swap(i, j);
    }
    let mut v = vec![0u8; size.bytes()];
    for (i, next) in perm.iter().enumerate() {
        v[..8].copy_from_slice(&next.to_le_bytes());
        arr.update(i, &v).map_err(|e| bench_err("fill cells", e))?;
    }
    Ok((pool, arr, perm))
}

/// Runs the suite.
pub fn run(ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    let bytes: usize = ctx.scale.pick(64 << 20, 256 << 20);
    let ops: u64 = ctx.scale.pick(100_000, 1_000_000);
    let mut all = Vec::new();
    for &size in sizes(ctx.scale) {
        ctx.note(format!(
            "value size {} B: filling 3 arrays of {} MiB",
            size.bytes(),
            bytes >> 20
        ));
        let mut arrays = Vec::new();
        for kind in CellKind::ALL {
            let (pool, arr, perm) = build(kind, size, bytes)?;
            arrays.push((kind, pool, RefCell::new(arr), perm));
        }
        let mut variants: Vec<Variant<'_>> = Vec::new();
        for (kind, _, arr, perm) in &arrays {
            let count = arr.borrow().len();
            let p = |m: &str| json!({ "bytes": size.bytes(), "technique": kind.name(), "measure": m, "array_bytes": bytes });
            let name = |m: &str| format!("{}-{m}", kind.name());
            let base = |m: &str| format!("cow-{m}");
            for random in [false, true] {
                let m = if random { "update-rand" } else { "update-seq" };
                let (mut i, mut x, mut stamp) = (0usize, 0x9e37_79b9_7f4a_7c15u64, 0u64);
                let mut v = vec![0u8; size.bytes()];
                variants.push(
                    Variant::new(name(m), p(m), ops, move |n| {
                        let mut a = arr.borrow_mut();
                        for _ in 0..n {
                            i = if random {
                                (next_rand(&mut x) % count as u64) as usize
                            } else {
                                (i + 1) % count
                            };
                            // A blind write that keeps the cycle link (from
                            // DRAM) in bytes 0..8 and changes the rest.
                            v[..8].copy_from_slice(&perm[i].to_le_bytes());
                            stamp += 1;
                            v[8..16].copy_from_slice(&stamp.to_le_bytes());
                            a.update(i, &v).expect("update cell");
                        }
                    })
                    .bytes_per_op(size.bytes() as u64)
                    .baseline(base(m)),
                );
            }
            for random in [false, true] {
                let m = if random { "read-rand" } else { "read-seq" };
                let (mut i, mut x) = (0usize, 0x2545_f491_4f6c_dd1du64);
                let mut v = vec![0u8; size.bytes()];
                variants.push(
                    Variant::new(name(m), p(m), ops, move |n| {
                        let a = arr.borrow();
                        for _ in 0..n {
                            i = if random {
                                (next_rand(&mut x) % count as u64) as usize
                            } else {
                                (i + 1) % count
                            };
                            a.read(i, &mut v).expect("read cell");
                        }
                        std::hint::black_box(&v);
                    })
                    .baseline(base(m)),
                );
            }
            let mut i = 0usize;
            let mut v = vec![0u8; size.bytes()];
            variants.push(
                Variant::new(name("dep-read"), p("dep-read"), ops, move |n| {
                    let a = arr.borrow();
                    for _ in 0..n {
                        a.read(i, &mut v).expect("read cell");
                        i = u64::from_le_bytes(v[..8].try_into().unwrap()) as usize % count;
                    }
                })
                .baseline(base("dep-read")),
            );
        }
        let mut rows = run_interleaved(ctx, "cell", &mut variants);
        drop(variants);
        let snapshot = rows.clone();
        for r in rows.iter_mut().filter(|r| !r.variant.starts_with("log-")) {
            let m = r.variant.split_once('-').map(|(_, m)| m).unwrap_or("");
            let log = snapshot.iter().find(|o| o.variant == format!("log-{m}"));
            if let Some(l) = log.filter(|l| l.ops_per_s > 0.0) {
                r.set_extra("vs_log", r.ops_per_s / l.ops_per_s);
            }
        }
        all.extend(rows);
    }
    Ok(all)
}
