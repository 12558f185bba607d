//! The workloads of the `engine` suite and how each is sized.
//!
//! | name     | mix (P2 Table 1)   | dataset loaded          | values |
//! |----------|--------------------|-------------------------|--------|
//! | `p2-a`   | R100               | `records`               | 1000 B |
//! | `p2-b`   | R90 I10            | `records`               | 1000 B |
//! | `p2-c`   | R50 I50            | `records`               | 1000 B |
//! | `p2-d`   | R10 I90            | `records`               | 1000 B |
//! | `p2-e`   | R90 U10            | `records`               | 1000 B |
//! | `p2-f`   | R50 U50            | `records`               | 1000 B |
//! | `p2-g`   | R10 U90            | `records`               | 1000 B |
//! | `p2-h`   | D100               | exactly what is deleted | 1000 B |
//! | `p2-var` | R50 I50            | `records`               | 1-256 B uniform (P2 §4.3.1) |
//! | `tpcc`   | the standard mix   | `warehouses`            | TPC-C rows |
//!
//! Keys are P2's 8-byte primary keys; values are P2's tuple of 5 columns
//! × 200 B. Reads and updates pick loaded keys; inserts take fresh keys
//! (each thread its own sequence, so threads never collide); `p2-h`'s
//! dataset is `threads × ops_per_thread × (reps + 1)` records and each
//! thread deletes its own partition in order, so the warm-up and the
//! timed repetitions delete every key once and the last repetition
//! leaves the store empty — P2's "delete until empty", with every batch
//! deleting keys that exist.
//!
//! Every system of a group gets the same dataset and, per thread, the
//! same seeded operation stream.

use super::DynKv;
use super::Plan;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Bytes of a P2 tuple: 5 columns × 200 B.
pub const TUPLE_BYTES: usize = 1000;
/// Bytes of a key.
pub const KEY_BYTES: usize = 8;

/// One thread's operation stream on one system.
pub trait Driver: Send {
    /// Performs one operation (a TPC-C transaction counts as one).
    fn step(&mut self, kv: &mut DynKv<'_>) -> Result<(), String>;
}

/// A workload, sized for one group.
pub trait Workload: Sync {
    fn name(&self) -> String;
    /// The `value_bytes` param: bytes of every value, or a description.
    fn value_bytes(&self) -> serde_json::Value;
    /// Most bytes of keys and values a store holds during the group.
    fn capacity_bytes(&self) -> u64;
    /// Loads the dataset through `kv`; returns the records written.
    fn load(&self, kv: &mut DynKv<'_>) -> Result<u64, String>;
    /// The operation stream of thread `thread` of `threads`.
    fn driver(&self, thread: usize, threads: usize) -> Box<dyn Driver>;
}

/// The workloads by name, before sizing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadSpec {
    /// P2 Table 1: read, insert, update, delete percentages.
    P2 {
        name: &'static str,
        read: u8,
        insert: u8,
        update: u8,
        delete: u8,
    },
    /// P2 §4.3.1: R50/I50 with values of 1-256 bytes.
    Var,
    Tpcc,
}

const fn p2(name: &'static str, read: u8, insert: u8, update: u8, delete: u8) -> WorkloadSpec {
    WorkloadSpec::P2 {
        name,
        read,
        insert,
        update,
        delete,
    }
}

impl WorkloadSpec {
    pub fn all() -> Vec<WorkloadSpec> {
        vec![
            p2("p2-a", 100, 0, 0, 0),
            p2("p2-b", 90, 10, 0, 0),
            p2("p2-c", 50, 50, 0, 0),
            p2("p2-d", 10, 90, 0, 0),
            p2("p2-e", 90, 0, 10, 0),
            p2("p2-f", 50, 0, 50, 0),
            p2("p2-g", 10, 0, 90, 0),
            p2("p2-h", 0, 0, 0, 100),
            WorkloadSpec::Var,
            WorkloadSpec::Tpcc,
        ]
    }

    pub fn name(&self) -> &'static str {
        match self {
            WorkloadSpec::P2 { name, .. } => name,
            WorkloadSpec::Var => "p2-var",
            WorkloadSpec::Tpcc => "tpcc",
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
        match *self {
            WorkloadSpec::P2 {
                name,
                read,
                insert,
                update,
                delete,
            } => {
                let records = if delete > 0 {
                    threads * ops_per_thread
                } else {
                    plan.records
                };
                Ok(Box::new(Mix {
                    name,
                    read,
                    insert,
                    update,
                    delete,
                    records,
                    value: ValueSize::Fixed(TUPLE_BYTES),
                    inserts_max: threads * ops_per_thread * u64::from(insert) / 100 + threads,
                }))
            }
            WorkloadSpec::Var => Ok(Box::new(Mix {
                name: "p2-var",
                read: 50,
                insert: 50,
                update: 0,
                delete: 0,
                records: plan.records,
                value: ValueSize::Uniform(1, 256),
                inserts_max: threads * ops_per_thread / 2 + threads,
            })),
            WorkloadSpec::Tpcc => Err("TPC-C generator not available in ferrite-workload yet".into()),
        }
    }
}

/// A load-only dataset of about `bytes` bytes of 1000-byte tuples (the
/// recovery rows).
pub fn recovery_dataset(bytes: u64) -> Box<dyn Workload> {
    Box::new(Mix {
        name: "recovery",
        read: 100,
        insert: 0,
        update: 0,
        delete: 0,
        records: (bytes / (TUPLE_BYTES + KEY_BYTES) as u64).max(1),
        value: ValueSize::Fixed(TUPLE_BYTES),
        inserts_max: 0,
    })
}

#[derive(Clone, Copy, Debug)]
enum ValueSize {
    Fixed(usize),
    /// Uniform in `lo..=hi`.
    Uniform(usize, usize),
}

impl ValueSize {
    fn max(self) -> usize {
        match self {
            ValueSize::Fixed(n) => n,
            ValueSize::Uniform(_, hi) => hi,
        }
    }

    fn mean(self) -> usize {
        match self {
            ValueSize::Fixed(n) => n,
            ValueSize::Uniform(lo, hi) => (lo + hi) / 2,
        }
    }
}

/// A P2 mix (see the module documentation).
struct Mix {
    name: &'static str,
    read: u8,
    insert: u8,
    update: u8,
    delete: u8,
    records: u64,
    value: ValueSize,
    /// Most inserts the group can make, over all threads.
    inserts_max: u64,
}

/// The key of record `i`: its FNV-1a 64 hash, big-endian, so that keys
/// land all over the ordered index as P2's hashed keys do.
pub fn key_of(i: u64) -> [u8; KEY_BYTES] {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in i.to_le_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h.to_be_bytes()
}

/// Fills `buf` with `len` bytes of the value of record `i` at version `v`.
fn fill_value(buf: &mut Vec<u8>, i: u64, v: u64, len: usize) {
    buf.clear();
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ v;
    while buf.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        let take = (len - buf.len()).min(8);
        buf.extend_from_slice(&b[..take]);
    }
}

impl Mix {
    fn value_len(&self, rng: &mut ChaCha8Rng) -> usize {
        match self.value {
            ValueSize::Fixed(n) => n,
            ValueSize::Uniform(lo, hi) => rng.random_range(lo..=hi),
        }
    }
}

impl Workload for Mix {
    fn name(&self) -> String {
        self.name.to_string()
    }

    fn value_bytes(&self) -> serde_json::Value {
        match self.value {
            ValueSize::Fixed(n) => serde_json::json!(n),
            ValueSize::Uniform(lo, hi) => serde_json::json!(format!("{lo}-{hi}")),
        }
    }

    fn capacity_bytes(&self) -> u64 {
        let per = (KEY_BYTES + self.value.mean()) as u64;
        (self.records + self.inserts_max) * per + (self.value.max() as u64) * 64
    }

    fn load(&self, kv: &mut DynKv<'_>) -> Result<u64, String> {
        let mut rng = ChaCha8Rng::seed_from_u64(0x10ad);
        let mut v = Vec::with_capacity(self.value.max());
        for i in 0..self.records {
            let len = self.value_len(&mut rng);
            fill_value(&mut v, i, 0, len);
            kv.put(&key_of(i), &v)?;
        }
        Ok(self.records)
    }

    fn driver(&self, thread: usize, threads: usize) -> Box<dyn Driver> {
        Box::new(MixDriver {
            rng: ChaCha8Rng::seed_from_u64(0x5eed ^ (thread as u64) << 32),
            read: self.read,
            insert: self.insert,
            update: self.update,
            delete: self.delete,
            records: self.records,
            value: self.value,
            thread: thread as u64,
            threads: threads.max(1) as u64,
            next_insert: 0,
            next_delete: 0,
            version: 0,
            buf: Vec::with_capacity(self.value.max()),
            out: Vec::with_capacity(self.value.max()),
        })
    }
}

struct MixDriver {
    rng: ChaCha8Rng,
    read: u8,
    insert: u8,
    update: u8,
    delete: u8,
    records: u64,
    value: ValueSize,
    thread: u64,
    threads: u64,
    next_insert: u64,
    next_delete: u64,
    version: u64,
    buf: Vec<u8>,
    out: Vec<u8>,
}

impl Driver for MixDriver {
    fn step(&mut self, kv: &mut DynKv<'_>) -> Result<(), String> {
        let p: u8 = self.rng.random_range(0..100);
        if p < self.read {
            let i = self.rng.random_range(0..self.records);
            if !kv.get(&key_of(i), &mut self.out)? {
                return Err(format!("loaded record {i} not found"));
            }
        } else if p < self.read + self.insert {
            let i = self.records + self.thread + self.threads * self.next_insert;
            self.next_insert += 1;
            let len = match self.value {
                ValueSize::Fixed(n) => n,
                ValueSize::Uniform(lo, hi) => self.rng.random_range(lo..=hi),
            };
            fill_value(&mut self.buf, i, 0, len);
            kv.put(&key_of(i), &self.buf)?;
        } else if p < self.read + self.insert + self.update {
            let i = self.rng.random_range(0..self.records);
            self.version += 1;
            let len = match self.value {
                ValueSize::Fixed(n) => n,
                ValueSize::Uniform(lo, hi) => self.rng.random_range(lo..=hi),
            };
            fill_value(&mut self.buf, i, self.version, len);
            kv.put(&key_of(i), &self.buf)?;
        } else if self.delete > 0 {
            let i = self.thread + self.threads * self.next_delete;
            if i >= self.records {
                return Err("p2-h ran out of keys to delete".into());
            }
            self.next_delete += 1;
            if !kv.delete(&key_of(i))? {
                return Err(format!("record {i} to delete was absent"));
            }
        }
        Ok(())
    }
}
