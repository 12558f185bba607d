//! The interleaved runner: how every number in a row is obtained.
//!
//! An experiment is a group of [`Variant`]s — closures that each perform a
//! batch of operations — measured together by [`run_interleaved`]:
//!
//! 1. each variant runs one untimed warm-up batch (page faults, caches,
//!    branch predictors, lazily built state), in order;
//! 2. then `ctx.reps` rounds run the variants interleaved, A B C A B C …,
//!    each timing one batch of the variant's `ops` operations with
//!    [`Instant`] and taking the delta of the calling thread's
//!    [`Counters::snapshot`] (of every worker thread, summed, for threaded
//!    variants) around it;
//! 3. a row reports the **median** ns/op over the repetitions, the spread
//!    `(max-min)/median`, and the counters summed over all timed
//!    repetitions divided by the operations they ran.
//!
//! Interleaving puts every variant under the same background noise (other
//! tenants, frequency changes), so ratios between rows of one group are
//! meaningful on shared machines even when absolute numbers drift.
//! Snapshots are taken outside the timed interval; the closure call itself
//! is inside it, once per batch, so per-op overhead is only what the
//! closure's own loop adds.

use crate::ctx::{BenchCtx, Progress};
use crate::row::{Row, set_ratios};
use ferrite_pmem::Counters;
use std::sync::Barrier;
use std::time::Instant;

enum Body<'a> {
    /// Runs `ops` operations on the calling thread.
    Single(Box<dyn FnMut(u64) + 'a>),
    /// Runs `ops` operations on each of `threads` threads: `f(thread, ops)`.
    Threads {
        threads: usize,
        f: Box<dyn Fn(usize, u64) + Sync + 'a>,
    },
}

/// One thing to measure: a name, its parameters and a batch closure.
pub struct Variant<'a> {
    name: String,
    params: serde_json::Value,
    ops: u64,
    warmup_ops: u64,
    baseline: Option<String>,
    bytes_per_op: Option<u64>,
    body: Body<'a>,
}

impl<'a> Variant<'a> {
    /// A single-threaded variant: `body(n)` must perform exactly `n`
    /// operations (keeping any state — a rotating offset, an RNG — in the
    /// closure). Each timed repetition calls it with `ops`.
    pub fn new(
        name: impl Into<String>,
        params: serde_json::Value,
        ops: u64,
        body: impl FnMut(u64) + 'a,
    ) -> Variant<'a> {
        Variant {
            name: name.into(),
            params,
            ops: ops.max(1),
            warmup_ops: ops.max(1),
            baseline: None,
            bytes_per_op: None,
            body: Body::Single(Box::new(body)),
        }
    }

    /// A variant run by `threads` threads at once: each calls
    /// `body(thread_index, ops_per_thread)`. The row's `ops` is the total
    /// over threads and its time is the wall time from a common start
    /// barrier to the last thread's end.
    pub fn threaded(
        name: impl Into<String>,
        params: serde_json::Value,
        threads: usize,
        ops_per_thread: u64,
        body: impl Fn(usize, u64) + Sync + 'a,
    ) -> Variant<'a> {
        Variant {
            name: name.into(),
            params,
            ops: ops_per_thread.max(1),
            warmup_ops: ops_per_thread.max(1),
            baseline: None,
            bytes_per_op: None,
            body: Body::Threads {
                threads: threads.max(1),
                f: Box::new(body),
            },
        }
    }

    /// Compares this variant's throughput against variant `name` of the same group.
    pub fn baseline(mut self, name: impl Into<String>) -> Variant<'a> {
        self.baseline = Some(name.into());
        self
    }

    /// Operations in the warm-up batch (default: the timed batch size; 0
    /// skips the warm-up).
    pub fn warmup(mut self, ops: u64) -> Variant<'a> {
        self.warmup_ops = ops;
        self
    }

    /// Bytes moved per operation: the row gets `extra.gb_per_s`
    /// (`bytes_per_op / ns_per_op`, decimal GB/s).
    pub fn bytes_per_op(mut self, bytes: u64) -> Variant<'a> {
        self.bytes_per_op = Some(bytes);
        self
    }

    /// Renames the variant.
    pub fn named(mut self, name: impl Into<String>) -> Variant<'a> {
        self.name = name.into();
        self
    }

    /// Adds `params[key] = value`.
    pub fn param(mut self, key: &str, value: impl Into<serde_json::Value>) -> Variant<'a> {
        if !self.params.is_object() {
            self.params = serde_json::Value::Object(Default::default());
        }
        if let Some(m) = self.params.as_object_mut() {
            m.insert(key.to_string(), value.into());
        }
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn threads(&self) -> usize {
        match &self.body {
            Body::Single(_) => 1,
            Body::Threads { threads, .. } => *threads,
        }
    }

    /// Runs one batch of `ops` (per thread); returns wall seconds and the
    /// counter delta of every thread that ran it.
    fn batch(&mut self, ops: u64) -> (f64, Counters) {
        match &mut self.body {
            Body::Single(f) => {
                let c0 = Counters::snapshot();
                let t0 = Instant::now();
                f(ops);
                let secs = t0.elapsed().as_secs_f64();
                (secs, Counters::snapshot() - c0)
            }
            Body::Threads { threads, f } => {
                let f: &(dyn Fn(usize, u64) + Sync) = &**f;
                let n = *threads;
                let start = Barrier::new(n);
                // The workers time themselves (first start to last end): a
                // clock read by this thread could be descheduled right after
                // the barrier and time a whole batch as nearly nothing.
                std::thread::scope(|s| {
                    let handles: Vec<_> = (0..n)
                        .map(|t| {
                            let start = &start;
                            s.spawn(move || {
                                let c0 = Counters::snapshot();
                                start.wait();
                                let t0 = Instant::now();
                                f(t, ops);
                                let t1 = Instant::now();
                                (t0, t1, Counters::snapshot() - c0)
                            })
                        })
                        .collect();
                    let runs: Vec<(Instant, Instant, Counters)> = handles
                        .into_iter()
                        .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                        .collect();
                    let first = runs.iter().map(|r| r.0).min().expect("threads >= 1");
                    let last = runs.iter().map(|r| r.1).max().expect("threads >= 1");
                    let secs = (last - first).as_secs_f64();
                    let sum = runs
                        .iter()
                        .fold(Counters::default(), |acc, r| acc.add(&r.2));
                    (secs, sum)
                })
            }
        }
    }
}

// The statistics live with the rows, which the claims also compute from.
pub use ferrite_rows::{median, spread};

/// Measures `variants` interleaved (see the module documentation) and
/// returns one row per variant, in order, with ratios against their
/// baselines filled in (baselines are looked up within this group).
pub fn run_interleaved(ctx: &BenchCtx, suite: &str, variants: &mut [Variant<'_>]) -> Vec<Row> {
    let reps = ctx.reps.max(1);
    if variants.is_empty() {
        return Vec::new();
    }
    let names: Vec<&str> = variants.iter().map(|v| v.name.as_str()).collect();
    ctx.report_progress(&Progress::GroupStart {
        suite,
        variants: &names,
        reps,
    });
    let started = Instant::now();
    for v in variants.iter_mut() {
        if v.warmup_ops > 0 {
            let w = v.warmup_ops;
            v.batch(w);
        }
    }
    let mut ns: Vec<Vec<f64>> = vec![Vec::with_capacity(reps); variants.len()];
    let mut counters = vec![Counters::default(); variants.len()];
    for rep in 0..reps {
        for (i, v) in variants.iter_mut().enumerate() {
            let ops = v.ops;
            let (secs, delta) = v.batch(ops);
            let total_ops = ops * v.threads() as u64;
            ns[i].push(secs * 1e9 / total_ops as f64);
            counters[i] = counters[i].add(&delta);
        }
        ctx.report_progress(&Progress::Round {
            suite,
            done: rep + 1,
            reps,
            elapsed: started.elapsed(),
        });
    }
    ctx.report_progress(&Progress::GroupDone {
        suite,
        variants: variants.len(),
        reps,
        elapsed: started.elapsed(),
    });
    let mut rows: Vec<Row> = variants
        .iter()
        .zip(ns.iter().zip(&counters))
        .map(|(v, (samples, c))| {
            let ops = v.ops * v.threads() as u64;
            let ns_per_op = median(samples);
            let secs = ns_per_op * ops as f64 / 1e9;
            let all_ops = (ops * reps as u64) as f64;
            let mut row = Row::empty(suite, &v.name, v.params.clone());
            row.threads = v.threads();
            row.ops = ops;
            row.secs = secs;
            row.ops_per_s = if ns_per_op > 0.0 {
                1e9 / ns_per_op
            } else {
                0.0
            };
            row.ns_per_op = ns_per_op;
            row.ns_per_op_spread = spread(samples);
            row.reps = reps;
            row.fences_per_op = c.fences as f64 / all_ops;
            row.flushes_per_op = c.flush_insns as f64 / all_ops;
            row.lines_per_op = c.lines_flushed as f64 / all_ops;
            row.blocks_per_op = c.blocks_written as f64 / all_ops;
            row.nt_bytes_per_op = c.nt_bytes as f64 / all_ops;
            row.msyncs_per_op = c.msync_calls as f64 / all_ops;
            row.msync_bytes_per_op = c.msync_bytes as f64 / all_ops;
            row.baseline = v.baseline.clone();
            if let Some(b) = v.bytes_per_op
                && ns_per_op > 0.0
            {
                row.set_extra("gb_per_s", b as f64 / ns_per_op);
            }
            row
        })
        .collect();
    set_ratios(&mut rows);
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A threaded batch lasts from the first worker's start to the last
    /// one's end: here the slower thread's 30 ms, never less.
    #[test]
    fn a_threaded_batch_is_timed_by_its_workers() {
        let mut v = Variant::threaded("sleep", serde_json::json!({}), 2, 1, |t, _| {
            std::thread::sleep(std::time::Duration::from_millis(if t == 0 {
                30
            } else {
                5
            }));
        });
        let (secs, _) = v.batch(1);
        assert!((0.03..1.0).contains(&secs), "{secs} s");
    }

    /// A progress hook sees each group start, each round and the end, in
    /// order, with the group's names; without `progress` it sees nothing.
    #[test]
    fn a_progress_hook_sees_start_rounds_and_end() {
        use std::sync::{Arc, Mutex};
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = seen.clone();
        let hook = move |ev: &Progress<'_>| sink.lock().unwrap().push(ev.line());
        let mut vs = [
            Variant::new("a", serde_json::json!({}), 1, |_| {}),
            Variant::new("b", serde_json::json!({}), 1, |_| {}),
        ];
        let quiet = BenchCtx::quick().with_reps(2).with_progress_hook(hook);
        run_interleaved(&quiet, "t", &mut vs);
        assert!(seen.lock().unwrap().is_empty());
        let ctx = quiet.with_progress(true);
        let rows = run_interleaved(&ctx, "t", &mut vs);
        assert_eq!(rows.len(), 2);
        ctx.note("a note");
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 5, "{seen:?}");
        assert_eq!(seen[0], "[t] 2 variants x 2 reps: a | b");
        assert!(seen[1].starts_with("[t]   rep 1/2 done ("), "{}", seen[1]);
        assert!(seen[2].starts_with("[t]   rep 2/2 done ("), "{}", seen[2]);
        assert!(
            seen[3].starts_with("[t] measured 2 variants x 2 reps in "),
            "{}",
            seen[3]
        );
        assert_eq!(seen[4], "a note");
    }
}
