//! The in-process rows of P1's comparison ([`STORE_LAYER`]): each
//! server store driven directly, one thread, no network, so its logging
//! strategy is what the ratio measures.

use super::*;

/// P1's comparison below the network ([`STORE_LAYER`] rows): the item
/// store of each [`p1_stores`] variant driven in process by one thread —
/// P1's `95/5` mix of 16 B keys and 64 B values over a preloaded key
/// space, each set one durable transaction — measured interleaved, with
/// the fences and lines each operation cost. Baseline: `store-tx-undo`.
///
/// The Ferrite stores' pools are anonymous memory in the `adr` domain
/// (`eadr` on a CPU without a flush instruction); `store-pmdk-undo`'s is a
/// libpmemobj pool of the same size in /dev/shm, on the flush+fence path
/// when `PMEM_IS_PMEM_FORCE=1` is in effect (the CLI sets it;
/// `params.pmem_is_pmem_forced` records it). Its counters are PMDK's and
/// not observed (`n/a`), unless the feature `pmdk-count` counts them.
pub(super) fn store_rows(ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    use ferrite_pmem::{Domain, FlushKind, Pool, PoolOptions};
    use ferrite_server::store::Shared;
    use ferrite_server::store::tx::{TxKv, create, map};
    use ferrite_tx::Strategy;
    const POOL_BYTES: u64 = 128 << 20;
    let keys: u64 = ctx.scale.pick(10_000, 100_000);
    let ops: u64 = ctx.scale.pick(20_000, 200_000);
    let domain = if FlushKind::best().is_some() {
        Domain::Adr
    } else {
        Domain::Eadr
    };
    let e = store_err;
    let strategies = [Strategy::Undo, Strategy::Redo, Strategy::Clobber];
    let pools = strategies
        .iter()
        .map(|_| {
            Pool::create_in_memory(&PoolOptions::new("bench-store", POOL_BYTES).domain(domain))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let txps = pools
        .iter()
        .zip(strategies)
        .map(|(p, s)| create(p, s, 4).map_err(e))
        .collect::<Result<Vec<_>, _>>()?;
    let maps = txps
        .iter()
        .map(|t| map(t).map_err(e))
        .collect::<Result<Vec<_>, _>>()?;
    let shareds = maps
        .iter()
        .map(|m| {
            let mut kv = TxKv::new(m).map_err(e)?;
            Shared::open(&mut kv, 1 << 20).map_err(e)
        })
        .collect::<Result<Vec<_>, _>>()?;
    // PMDK's peer: its pool file is removed after the map is closed (the
    // Scratch is declared first, so it is dropped last).
    #[cfg(feature = "pmdk")]
    let pmdk_file = Scratch(unique_path("pmdk"));
    #[cfg(feature = "pmdk")]
    let pmdk_map = ferrite_server::store::pmdk::create(&pmdk_file.0, POOL_BYTES).map_err(e)?;
    #[cfg(feature = "pmdk")]
    let pmdk_shared = {
        let mut kv = ferrite_server::store::pmdk::PmdkKv::new(&pmdk_map);
        Shared::open(&mut kv, 1 << 20).map_err(e)?
    };
    #[cfg(feature = "pmdk-count")]
    let pmdk_counts = std::cell::RefCell::new(PmdkTally::default());
    let now = now_unix();
    let mut variants = Vec::new();
    for ((m, sh), strategy) in maps.iter().zip(&shareds).zip(strategies) {
        let cache = Cache::new(TxKv::new(m).map_err(e)?, sh);
        let v = store_variant(cache, &format!("tx-{strategy}"), keys, ops, now, || ())?;
        variants.push(if strategy == Strategy::Undo {
            v
        } else {
            v.baseline("store-tx-undo")
        });
    }
    #[cfg(feature = "pmdk")]
    {
        let cache = Cache::new(
            ferrite_server::store::pmdk::PmdkKv::new(&pmdk_map),
            &pmdk_shared,
        );
        #[cfg(not(feature = "pmdk-count"))]
        let tally = || ();
        #[cfg(feature = "pmdk-count")]
        let tally = {
            let counts = &pmdk_counts;
            let mut last = ferrite_pmdk::PmdkCounts::snapshot();
            move || {
                let now = ferrite_pmdk::PmdkCounts::snapshot();
                counts.borrow_mut().add(now - last);
                last = now;
            }
        };
        let v = store_variant(cache, PMDK_STORE, keys, ops, now, tally)?
            .baseline("store-tx-undo")
            .param("pmem_is_pmem_forced", ferrite_pmdk::pmem_forced());
        variants.push(v);
    }
    let mut rows = crate::measure::run_interleaved(ctx, SUITE, &mut variants);
    drop(variants);
    for r in rows.iter_mut() {
        if r.variant == format!("store-{PMDK_STORE}") {
            r.counters_observed = false;
            #[cfg(feature = "pmdk-count")]
            {
                let t = pmdk_counts.borrow();
                // The warm-up batch is the first; the rest were timed.
                let n = (r.ops * r.reps as u64).max(1) as f64;
                r.counters_observed = true;
                r.fences_per_op = t.timed.fences as f64 / n;
                r.lines_per_op = t.timed.lines as f64 / n;
                r.flushes_per_op = t.timed.flush_calls as f64 / n;
                r.msyncs_per_op = t.timed.msyncs as f64 / n;
                r.set_extra("counters", "PMDK's, at the libpmem calls");
            }
        }
    }
    Ok(rows)
}

fn store_err(e: ferrite_server::store::StoreError) -> BenchError {
    BenchError::Unsupported(format!("store: {e}"))
}

/// PMDK's flushes and fences over the timed batches of the
/// `store-pmdk-undo` variant (feature `pmdk-count`): the first batch, the
/// warm-up, is left out.
#[cfg(feature = "pmdk-count")]
#[derive(Default)]
struct PmdkTally {
    batches: u64,
    timed: ferrite_pmdk::PmdkCounts,
}

#[cfg(feature = "pmdk-count")]
impl PmdkTally {
    fn add(&mut self, d: ferrite_pmdk::PmdkCounts) {
        if self.batches > 0 {
            self.timed.fences += d.fences;
            self.timed.flush_calls += d.flush_calls;
            self.timed.lines += d.lines;
            self.timed.msyncs += d.msyncs;
        }
        self.batches += 1;
    }
}

/// The in-process variant `store-<name>` of [`store_rows`]: preloads
/// `keys` items through `cache`, then each batch runs P1's 95/5 mix over
/// them (xorshift keys, each set one durable write) and calls `after`
/// once at its end (outside the operations; PMDK's counts).
fn store_variant<'a, K: ferrite_server::store::Kv + 'a>(
    mut cache: Cache<'a, K>,
    name: &str,
    keys: u64,
    ops: u64,
    now: u64,
    mut after: impl FnMut() + 'a,
) -> Result<crate::measure::Variant<'a>, BenchError> {
    use ferrite_server::protocol::{StoreMode, StoreOpts};
    use ferrite_server::store::Store;
    let mix = Mix::p1();
    let key = |i: u64| format!("key:{i:012}").into_bytes();
    let value = vec![b'v'; mix.value_bytes];
    let opts = StoreOpts::default();
    for i in 0..keys {
        cache
            .store(StoreMode::Set, &key(i), 0, 0, &value, None, &opts, now)
            .map_err(store_err)?;
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ keys;
    let params = json!({
        "mix": P1_MIX,
        "layer": STORE_LAYER,
        "key_bytes": mix.key_bytes,
        "value_bytes": mix.value_bytes,
        "keys": keys,
        "server_threads": 1,
    });
    Ok(crate::measure::Variant::new(
        format!("store-{name}"),
        params,
        ops,
        move |n| {
            for _ in 0..n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = key(x % keys);
                let r = if x % 100 < u64::from(mix.set_pct) {
                    cache
                        .store(StoreMode::Set, &k, 0, 0, &value, None, &opts, now)
                        .map(|_| ())
                } else {
                    cache.get(&k, now).map(|_| ())
                };
                r.expect("an in-process store operation");
            }
            after();
        },
    ))
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
