//! `ferrite bench group`: FP-Tree leaf inserts and lookups interleaved in
//! groups of 1, 2, 4, …, 64 operations [P0 §3.5, Fig. 12].
//!
//! One table of FP-Tree leaves ([`FpLeaves`], 576 B each) far larger than
//! the last-level cache — 256 Ki leaves (144 MiB) quick, 1 Mi leaves
//! (576 MiB) full — lives in an in-memory `adr` pool (`eadr` on a CPU
//! without flush instructions), so every insert pays real `clwb`s and
//! `sfence`s and every leaf visit a real cache miss. It is prefilled with
//! four keys per leaf on average (group 64) before anything is timed.
//!
//! Two interleaved groups run, each variant measured A B C … A B C … in
//! the same run (so the ratios are meaningful on a shared machine):
//!
//! - **inserts** (`insert-gN`, P0 Fig. 12a): each batch inserts fresh keys
//!   through [`FpLeaves::run`] with group size N. An insert is durable —
//!   slot and bitmap bit — before it completes; a group shares one fence
//!   for its slots and one for its bitmaps, so `fences_per_op` is 2/N and
//!   `lines_per_op` about 3 (slot line and header line, then the header
//!   line again for the bit). The variants share the table, so it fills up
//!   at the same pace for all of them (to about 15 keys per leaf of 32).
//! - **lookups** (`lookup-gN`, Fig. 12b): positive lookups of prefilled
//!   keys at random, with prefetch + yield before each leaf line; plus
//!   `lookup-plain`, the same lookup without executor, prefetch or yield
//!   (the left-hand listing of P0 §3.5.2), to show what the executor costs
//!   at group size 1.
//!
//! Every row's `ratio_vs_baseline` is against group size 1 of its kind
//! (`insert-g1`, `lookup-g1`). Insert rows carry `extra.leaf_full`, the
//! inserts refused because their leaf was full (they cost no persist; with
//! this fill they are a handful in millions). A last row, `fig12-series`,
//! carries throughput over group size for both kinds as data.

use crate::ctx::BenchCtx;
use crate::error::BenchError;
use crate::measure::{Variant, run_interleaved};
use crate::row::Row;
use ferrite_blocks::group::{FpLeaves, GroupError, LEAF_BYTES, Op, Outcome, SLOTS};
use ferrite_pmem::{Domain, FlushKind, Pool, PoolOptions};
use serde_json::json;
use std::cell::{Cell, RefCell};

/// Group sizes measured [P0 Fig. 12 sweeps 1..~30; Ferrite's executor goes to 64].
pub const GROUPS: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];

/// Keys per leaf inserted before timing, on average.
const PREFILL_PER_LEAF: usize = 4;
const HASH_SEED: u64 = 0x5eed_0ff7_7ee5;

/// splitmix64: keys and lookup order, cheap and reproducible.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The `i`-th key of stream `stream` (0 = prefill, N = inserts of group N).
fn key(stream: u64, i: u64) -> u64 {
    mix((stream << 48) ^ i)
}

fn value(key: u64) -> u64 {
    key.rotate_left(23) ^ 0x0123_4567_89ab_cdef
}

/// Runs the suite.
pub fn run(ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    let leaves: usize = ctx.scale.pick(256 << 10, 1 << 20);
    let insert_ops: u64 = ctx.scale.pick(50_000, 100_000);
    let lookup_ops: u64 = ctx.scale.pick(200_000, 500_000);
    let domain = if FlushKind::best().is_some() {
        Domain::Adr
    } else {
        Domain::Eadr
    };
    let bytes = FpLeaves::region_len(leaves);
    ctx.note(format!(
        "[group] formatting {leaves} leaves ({} MiB, {domain})",
        bytes >> 20
    ));
    let pool = Pool::create_in_memory(
        &PoolOptions::new("bench-group", (bytes + (1 << 20)) as u64).domain(domain),
    )?;
    let table = prefilled_table(ctx, &pool, leaves)?;
    let shape = TableShape {
        leaves,
        bytes,
        domain,
    };
    let table = RefCell::new(table);
    let table = &table;

    let full: Vec<Cell<u64>> = GROUPS.iter().map(|_| Cell::new(0)).collect();
    let mut variants = insert_variants(table, &full, &shape, insert_ops);
    let mut rows = run_interleaved(ctx, "group", &mut variants);
    drop(variants);
    for (r, f) in rows.iter_mut().zip(&full) {
        r.set_extra("leaf_full", f.get());
    }

    let prefill = (leaves * PREFILL_PER_LEAF) as u64;
    let mut variants = lookup_variants(table, prefill, &shape, lookup_ops);
    rows.extend(run_interleaved(ctx, "group", &mut variants));
    drop(variants);
    let mut series_row = fig12_row(&rows);
    series_row.set_param("leaf_bytes", LEAF_BYTES);
    series_row.set_extra(
        "fill_per_leaf_at_end",
        table.borrow().len() as f64 / leaves as f64,
    );
    rows.push(series_row);
    Ok(rows)
}

/// Maps a leaf-table error to the suite's "cannot run" error.
fn unsupported(e: GroupError) -> BenchError {
    BenchError::Unsupported(format!("FP-Tree leaves: {e}"))
}

/// Formats `leaves` FP-Tree leaves over `pool`'s data and inserts
/// [`PREFILL_PER_LEAF`] keys per leaf on average (stream 0, group 64);
/// a refused prefill insert is an error (a full leaf or a duplicate at
/// this fill is a bug).
fn prefilled_table(ctx: &BenchCtx, pool: &Pool, leaves: usize) -> Result<FpLeaves, BenchError> {
    let mut table = FpLeaves::create(pool.data(), leaves, HASH_SEED).map_err(unsupported)?;

    let prefill = (leaves * PREFILL_PER_LEAF) as u64;
    ctx.note(format!("[group] prefilling {prefill} keys"));
    let mut refused = 0u64;
    table
        .run(
            (0..prefill).map(|i| {
                let k = key(0, i);
                Op::Insert {
                    key: k,
                    value: value(k),
                }
            }),
            64,
            |_, r| {
                if r.is_err() {
                    refused += 1;
                }
            },
        )
        .map_err(unsupported)?;
    if refused > 0 {
        // Four keys per 32-slot leaf: a full leaf or a duplicate is a bug.
        return Err(BenchError::Unsupported(format!(
            "{refused} of {prefill} prefill inserts refused"
        )));
    }
    Ok(table)
}

/// What every row's params say about the table.
struct TableShape {
    leaves: usize,
    /// The table's region length.
    bytes: usize,
    domain: Domain,
}

impl TableShape {
    /// A row's params: the op kind, its group size (`None`: no executor)
    /// and the table's shape.
    fn params(&self, op: &str, group: Option<usize>) -> serde_json::Value {
        json!({
            "op": op,
            "group": group,
            "leaves": self.leaves,
            "slots": SLOTS,
            "table_mib": (self.bytes >> 20),
            "prefill_per_leaf": PREFILL_PER_LEAF,
            "domain": self.domain.name(),
        })
    }
}

/// The insert variants, one per group size N (`insert-gN`, against
/// `insert-g1`): each batch inserts fresh keys of stream N; a refusal
/// because the leaf was full is counted in `full[i]` (the i-th group
/// size), any other failure panics.
fn insert_variants<'a>(
    table: &'a RefCell<FpLeaves>,
    full: &'a [Cell<u64>],
    shape: &TableShape,
    insert_ops: u64,
) -> Vec<Variant<'a>> {
    let mut variants: Vec<Variant<'_>> = Vec::new();
    for (gi, &g) in GROUPS.iter().enumerate() {
        let full = &full[gi];
        let mut next = 0u64;
        variants.push(
            Variant::new(
                format!("insert-g{g}"),
                shape.params("insert", Some(g)),
                insert_ops,
                move |n| {
                    let first = next;
                    next += n;
                    table
                        .borrow_mut()
                        .run(
                            (first..first + n).map(|i| {
                                let k = key(g as u64, i);
                                Op::Insert {
                                    key: k,
                                    value: value(k),
                                }
                            }),
                            g,
                            |_, r| match r {
                                Ok(Outcome::Inserted) => {}
                                Err(GroupError::LeafFull { .. }) => full.set(full.get() + 1),
                                other => panic!("insert failed: {other:?}"),
                            },
                        )
                        .expect("valid group size");
                },
            )
            .baseline("insert-g1"),
        );
    }
    variants
}

/// The lookup variants (against `lookup-g1`): `lookup-plain` (no
/// executor, prefetch or yield), then one per group size N
/// (`lookup-gN`); each looks up random prefilled keys and panics on a
/// missing one.
fn lookup_variants<'a>(
    table: &'a RefCell<FpLeaves>,
    prefill: u64,
    shape: &TableShape,
    lookup_ops: u64,
) -> Vec<Variant<'a>> {
    // Random prefilled keys; the order is a function of the op's position
    // in the variant's stream, so `done` can tell what each result must be.
    let pick = move |stream: u64, i: u64| key(0, mix((stream << 40) ^ i) % prefill);
    let mut variants: Vec<Variant<'_>> = Vec::new();
    let mut plain_next = 0u64;
    variants.push(
        Variant::new(
            "lookup-plain",
            shape.params("lookup-plain", None),
            lookup_ops,
            move |n| {
                let t = table.borrow();
                for i in plain_next..plain_next + n {
                    let k = pick(1000, i);
                    assert_eq!(t.get(k), Some(value(k)), "prefilled key missing");
                }
                plain_next += n;
            },
        )
        .baseline("lookup-g1"),
    );
    for &g in GROUPS.iter() {
        let mut next = 0u64;
        variants.push(
            Variant::new(
                format!("lookup-g{g}"),
                shape.params("lookup", Some(g)),
                lookup_ops,
                move |n| {
                    let first = next;
                    next += n;
                    let s = g as u64;
                    table
                        .borrow_mut()
                        .run(
                            (first..first + n).map(|i| Op::Lookup { key: pick(s, i) }),
                            g,
                            |j, r| {
                                let k = pick(s, first + j as u64);
                                assert_eq!(
                                    r,
                                    Ok(Outcome::Found(value(k))),
                                    "prefilled key missing"
                                );
                            },
                        )
                        .expect("valid group size");
                },
            )
            .baseline("lookup-g1"),
        );
    }
    variants
}

/// P0 Fig. 12 as data: ops/s over group size, inserts and lookups.
fn fig12_row(rows: &[Row]) -> Row {
    let mut series = serde_json::Map::new();
    for r in rows {
        let (Some(op), Some(g)) = (
            r.params.get("op").and_then(|v| v.as_str()),
            r.params.get("group").and_then(|v| v.as_u64()),
        ) else {
            continue;
        };
        let e = series.entry(op.to_string()).or_insert_with(|| json!([]));
        if let Some(a) = e.as_array_mut() {
            a.push(json!([g, r.ops_per_s]));
        }
    }
    let mut row = Row::empty(
        "group",
        "fig12-series",
        json!({ "figure": "P0 Fig. 12", "x": "group size", "y": "ops/s" }),
    );
    row.set_extra("series", serde_json::Value::Object(series));
    row
}
