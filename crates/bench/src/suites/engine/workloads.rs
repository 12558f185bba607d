//! The workloads of the `engine` suite and how each is sized.
//!
//! Generation is [`ferrite_workload`]'s: the same [`Generator`] stream
//! (seeded per thread), the same [`Loader`] and the same [`run_op`]
//! drive every system, so a ratio never hides a difference in what the
//! systems were asked. The names are its names:
//!
//! | name     | mix (P2 Table 1) | keys chosen        | values |
//! |----------|------------------|--------------------|--------|
//! | `p2-a`…`p2-g` | R/I/U as P2 | scrambled Zipfian θ = 0.99 | 5 × 200 B |
//! | `p2-h`   | D100             | each thread its share, in order | 5 × 200 B |
//! | `p2-var` | R50 I50          | scrambled Zipfian  | 1-256 B uniform (P2 §4.3.1) |
//! | `tpcc`   | the standard mix (45 % NewOrder, 43 % Payment, 4 % each other) | TPC-C's NURand | TPC-C rows |
//!
//! TPC-C runs `Plan::warehouses` warehouses (2: each of the two threads'
//! terminals owns one; P2 runs 8), at TPC-C's cardinalities at full scale
//! and at ferrite-workload's quick cardinalities (about 1/60 of the data)
//! at quick scale; one operation is one transaction, whose writes are one
//! atomic batch.
//! Sizing: `records` loaded (the suite's plan; P2 loads 10 M), and the
//! generator is told the group's total operations (warm-up included) so
//! its Zipfian covers the keys inserts add. `p2-h` (delete until empty)
//! loads exactly the records its batches delete — `threads ×
//! ops_per_thread × batches`, the batches being the warm-up, every timed
//! repetition and, with one thread, the breakdown pass — so each batch
//! deletes keys that exist and the last one leaves the store empty. Every read must find its key and every delete its record (the
//! generator only picks keys that exist): a miss fails the row.

use super::{DynKv, Plan};
use ferrite_workload::tpcc::{Terminal, TpccConfig, TpccLoader};
use ferrite_workload::{BatchOp, Generator, Kv, Loader, OpKind, OpOutcome, run_op};

/// Seed of every operation stream (per thread: a ChaCha stream of it).
pub const SEED: u64 = 0x00f3_2217_e000_0001;

/// One thread's operation stream on one system.
pub trait Driver: Send {
    /// Performs one operation (a TPC-C transaction counts as one).
    fn step(&mut self, kv: &mut DynKv<'_>) -> Result<(), String>;

    /// As [`step`](Self::step), calling `around(true)` just before the
    /// system is called and `around(false)` just after, so that a
    /// breakdown pass charges the system's time only, not the generator's.
    fn step_marked(
        &mut self,
        kv: &mut DynKv<'_>,
        around: &mut dyn FnMut(bool),
    ) -> Result<(), String> {
        around(true);
        let r = self.step(kv);
        around(false);
        r
    }
}

/// A workload, sized for one group.
pub trait Workload: Sync {
    fn name(&self) -> String;
    /// The `value_bytes` param: bytes of every value, or `"MIN-MAX"`.
    fn value_bytes(&self) -> serde_json::Value;
    /// Most bytes of keys and values a store holds during the group.
    fn capacity_bytes(&self) -> u64;
    /// Loads the dataset through `kv`; returns the records written.
    fn load(&self, kv: &mut DynKv<'_>) -> Result<u64, String>;
    /// The operation stream of thread `thread` of `threads`.
    fn driver(&self, thread: usize, threads: usize) -> Box<dyn Driver>;
}

/// The workloads by name, before sizing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkloadSpec {
    /// A [`ferrite_workload::Workload`] name (options included, e.g.
    /// `ycsb-e` or `p2-f:uniform`).
    Ycsb(String),
    Tpcc,
}

impl WorkloadSpec {
    /// Every workload of the suite, in order.
    pub fn all() -> Vec<WorkloadSpec> {
        let mut v: Vec<WorkloadSpec> = [
            "p2-a", "p2-b", "p2-c", "p2-d", "p2-e", "p2-f", "p2-g", "p2-h", "p2-var",
        ]
        .into_iter()
        .map(WorkloadSpec::parse)
        .collect();
        v.push(WorkloadSpec::Tpcc);
        v
    }

    /// `tpcc` is TPC-C; any other name is a ferrite-workload YCSB-style
    /// workload (checked when the group is built: an unknown name yields
    /// skipped rows saying why).
    pub fn parse(name: &str) -> WorkloadSpec {
        if name == "tpcc" {
            WorkloadSpec::Tpcc
        } else {
            WorkloadSpec::Ycsb(name.to_string())
        }
    }

    pub fn name(&self) -> &str {
        match self {
            WorkloadSpec::Ycsb(n) => n,
            WorkloadSpec::Tpcc => "tpcc",
        }
    }

    /// How many times the plan's operations a batch of this workload
    /// runs: 4 for the read-heavy mixes (≥ 90 % reads: `p2-a`, `p2-b`,
    /// `p2-e`), whose operations take about a microsecond, so that their
    /// batches last as long as the write-heavy ones' and the noise of a
    /// shared machine averages out within a batch; 1 otherwise.
    pub fn batch_scale(&self) -> u64 {
        match self {
            WorkloadSpec::Ycsb(n) => match ferrite_workload::Workload::parse(n) {
                Ok(w) if w.mix.read >= 900 => 4,
                _ => 1,
            },
            WorkloadSpec::Tpcc => 1,
        }
    }

    /// Sizes the workload for a group of `threads` threads each running
    /// `ops_per_thread` operations in all (warm-up included).
    pub fn build(
        &self,
        plan: &Plan,
        threads: usize,
        ops_per_thread: u64,
    ) -> Result<Box<dyn Workload>, String> {
        let threads = threads.max(1) as u64;
        match self {
            WorkloadSpec::Ycsb(name) => {
                let w = ferrite_workload::Workload::parse(name).map_err(|e| e.to_string())?;
                let total = threads * ops_per_thread;
                let records = if w.mix.delete > 0 {
                    total
                } else {
                    plan.records
                };
                Ok(Box::new(Ycsb {
                    name: name.clone(),
                    w: w.with_records(records).with_operations(total),
                }))
            }
            WorkloadSpec::Tpcc => {
                let cfg = if plan.tpcc_standard {
                    TpccConfig::standard(plan.warehouses)
                } else {
                    TpccConfig::quick(plan.warehouses)
                };
                Tpcc::new(cfg, threads * ops_per_thread).map(|t| Box::new(t) as Box<dyn Workload>)
            }
        }
    }
}

/// A load-only P2 dataset of about `bytes` bytes of 1000-byte tuples
/// (the recovery rows).
pub fn recovery_dataset(bytes: u64) -> Box<dyn Workload> {
    let w = ferrite_workload::Workload::parse("p2-a").expect("p2-a is a workload");
    let (_, v) = w.value.bounds();
    let per = (v + w.keys.max_len()) as u64;
    Box::new(Ycsb {
        name: "recovery".into(),
        w: w.with_records((bytes / per).max(1)).with_operations(0),
    })
}

/// A YCSB-style workload of ferrite-workload.
struct Ycsb {
    /// The row's `workload` param.
    name: String,
    w: ferrite_workload::Workload,
}

/// [`DynKv`] as a sized [`Kv`], for ferrite-workload's generic functions.
struct Fwd<'a, 'b>(&'a mut DynKv<'b>);

impl Kv for Fwd<'_, '_> {
    type Error = String;
    #[inline]
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, String> {
        self.0.get(key, out)
    }
    #[inline]
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        self.0.put(key, value)
    }
    #[inline]
    fn delete(&mut self, key: &[u8]) -> Result<bool, String> {
        self.0.delete(key)
    }
    fn scan(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, String> {
        self.0.scan(from, limit, f)
    }
    fn batch(&mut self, ops: &[BatchOp<'_>]) -> Result<(), String> {
        self.0.batch(ops)
    }
}

impl Workload for Ycsb {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn value_bytes(&self) -> serde_json::Value {
        match self.w.value.bounds() {
            (lo, hi) if lo == hi => serde_json::json!(lo),
            (lo, hi) => serde_json::json!(format!("{lo}-{hi}")),
        }
    }

    fn capacity_bytes(&self) -> u64 {
        let (lo, hi) = self.w.value.bounds();
        let per = (self.w.keys.max_len() + (lo + hi).div_ceil(2)) as u64;
        let inserts = (self.w.operations as f64 * self.w.mix.insert_fraction()).ceil() as u64;
        (self.w.records + inserts) * per + hi as u64 * 64
    }

    fn load(&self, kv: &mut DynKv<'_>) -> Result<u64, String> {
        Loader::new(&self.w).load_into(&mut Fwd(kv), 1)
    }

    fn driver(&self, thread: usize, threads: usize) -> Box<dyn Driver> {
        let (_, hi) = self.w.value.bounds();
        match Generator::new(&self.w, SEED, thread as u32, threads as u32) {
            Ok(generator) => Box::new(YcsbDriver {
                generator,
                scratch: Vec::with_capacity(hi),
            }),
            Err(e) => Box::new(Failing(format!("generator: {e}"))),
        }
    }
}

struct YcsbDriver {
    generator: Generator,
    scratch: Vec<u8>,
}

impl Driver for YcsbDriver {
    #[inline]
    fn step(&mut self, kv: &mut DynKv<'_>) -> Result<(), String> {
        self.step_marked(kv, &mut |_| {})
    }

    #[inline]
    fn step_marked(
        &mut self,
        kv: &mut DynKv<'_>,
        around: &mut dyn FnMut(bool),
    ) -> Result<(), String> {
        let op = self
            .generator
            .next_op()
            .ok_or_else(|| "the workload ran out of keys to delete".to_string())?;
        let kind = op.kind();
        around(true);
        let r = run_op(&mut Fwd(kv), &op, &mut self.scratch);
        around(false);
        match r? {
            OpOutcome::Miss if kind != OpKind::ReadModifyWrite => Err(format!(
                "{kind:?} of key {:02x?} found nothing, yet the generator only picks keys that exist",
                op.key()
            )),
            _ => Ok(()),
        }
    }
}

/// TPC-C: [`ferrite_workload::tpcc`]'s loader and terminals (one per
/// thread, each owning its home warehouses). One operation is one
/// transaction of the standard mix, its writes one atomic batch.
struct Tpcc {
    cfg: TpccConfig,
    /// Bytes of keys and values the load writes.
    loaded_bytes: u64,
    /// Transactions of the group, over all threads.
    txns: u64,
}

/// Bytes a TPC-C transaction can add at most, about: a NewOrder's order,
/// new-order and index rows and up to 15 order lines; a Payment's history row.
const TPCC_GROWTH_PER_TXN: u64 = 1536;

impl Tpcc {
    fn new(cfg: TpccConfig, txns: u64) -> Result<Tpcc, String> {
        let loader = TpccLoader::new::<String>(&cfg, SEED).map_err(|e| e.to_string())?;
        let mut bytes = 0u64;
        let mut count = |k: &[u8], v: &[u8]| -> Result<(), String> {
            bytes += (k.len() + v.len()) as u64;
            Ok(())
        };
        loader.items(&mut count)?;
        for w in 1..=cfg.warehouses {
            loader.warehouse(w, &mut count)?;
        }
        Ok(Tpcc {
            cfg,
            loaded_bytes: bytes,
            txns,
        })
    }
}

impl Workload for Tpcc {
    fn name(&self) -> String {
        "tpcc".into()
    }

    fn value_bytes(&self) -> serde_json::Value {
        serde_json::json!("tpcc-rows")
    }

    fn capacity_bytes(&self) -> u64 {
        self.loaded_bytes + self.txns * TPCC_GROWTH_PER_TXN
    }

    fn load(&self, kv: &mut DynKv<'_>) -> Result<u64, String> {
        let loader = TpccLoader::new::<String>(&self.cfg, SEED).map_err(|e| e.to_string())?;
        loader.load_all(&mut Fwd(kv), 1).map_err(|e| e.to_string())
    }

    fn driver(&self, thread: usize, threads: usize) -> Box<dyn Driver> {
        match Terminal::new::<String>(&self.cfg, SEED, thread as u32, threads as u32) {
            Ok(t) => Box::new(TpccDriver(t)),
            Err(e) => Box::new(Failing(e.to_string())),
        }
    }
}

struct TpccDriver(Terminal);

impl Driver for TpccDriver {
    fn step(&mut self, kv: &mut DynKv<'_>) -> Result<(), String> {
        self.0
            .run(&mut Fwd(kv))
            .map(|_| ())
            .map_err(|e| format!("tpcc: {e}"))
    }
}

/// A driver that cannot run (e.g. a TPC-C thread without a warehouse).
struct Failing(String);

impl Driver for Failing {
    fn step(&mut self, _kv: &mut DynKv<'_>) -> Result<(), String> {
        Err(self.0.clone())
    }
}
