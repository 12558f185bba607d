//! YCSB-style workloads: P2's eight mixes (its Table 1, reading notes
//! A7.1), P2's variable-length-tuple workload (YCSB-var, A7.2) and YCSB's
//! core workloads A–F, all named, parsed and generated here.
//!
//! ## Names
//! `BASE[:OPTION]*`, e.g. `p2-c`, `p2-a:uniform:records=1m`,
//! `ycsb-e:keys=ordered`. Bases:
//!
//! | base | mix | default distribution | keys | values |
//! |---|---|---|---|---|
//! | `p2-a` | R100 | zipfian | int | 5 × 200 B |
//! | `p2-b` | R90 I10 | zipfian | int | 5 × 200 B |
//! | `p2-c` | R50 I50 | zipfian | int | 5 × 200 B |
//! | `p2-d` | R10 I90 | zipfian | int | 5 × 200 B |
//! | `p2-e` | R90 U10 | zipfian | int | 5 × 200 B |
//! | `p2-f` | R50 U50 | zipfian | int | 5 × 200 B |
//! | `p2-g` | R10 U90 | zipfian | int | 5 × 200 B |
//! | `p2-h` | D100, delete every loaded key once, then stop | sequential | int | 5 × 200 B |
//! | `p2-var` (alias `ycsb-var`) | R50 I50 | zipfian | int | 1..=256 B |
//! | `ycsb-a` | R50 U50 | zipfian | user | 10 × 100 B |
//! | `ycsb-b` | R95 U5 | zipfian | user | 10 × 100 B |
//! | `ycsb-c` | R100 | zipfian | user | 10 × 100 B |
//! | `ycsb-d` | R95 I5 | latest | user | 10 × 100 B |
//! | `ycsb-e` | S95 I5, scan length uniform 1..=100 | zipfian | user | 10 × 100 B |
//! | `ycsb-f` | R50 RMW50 | zipfian | user | 10 × 100 B |
//!
//! P2 never names its key distribution; its code uses N-Store's hot-set
//! skew (notes §E10). These workloads default to YCSB's scrambled Zipfian
//! (θ = 0.99), the distribution the issue asks for; `:skew-low` gives the
//! N-Store "low skew" P2's scripts ran. P2-h deletes key numbers 0, 1, 2, …
//! in order, as N-Store's code does (notes A7.1).
//!
//! Options: `zipfian`, `zipfian=THETA` (0 < θ < 1), `uniform`, `latest`,
//! `skew-low`, `skew-high` (request distribution; not for `p2-h`);
//! `records=N`, `ops=N` (N may end in `k`, `m`, `g` = 10^3, 10^6, 10^9);
//! `keys=user|int|ordered`; `fields=COUNTxLEN`; `var=MIN-MAX`.
//! Defaults: P2's 10 M records and 10 M operations for `p2-*`; 1 M and 1 M
//! for `ycsb-*` (YCSB's own workload files say 1000, too small to measure).
//!
//! ## Operations
//! Reads get the whole record (YCSB `readallfields=true`). Updates and
//! read-modify-writes put a whole new version of the record, as P2's
//! N-Store runs (`ycsb_update_one = false`, notes A7.1); YCSB core's
//! default updates one field, which its key-value bindings turn into a
//! read, a merge and a write of the whole record — here the update is a
//! blind write and the read belongs to `ycsb-f`'s read-modify-write.
//! Scans start at a key chosen like a read's and ask for a length uniform
//! in `1..=scan_max`. Inserts use fresh keys (below).
//!
//! ## Threads
//! Each thread runs its own [`Generator`] (`thread` of `threads`), so the
//! stream of every thread is a function of (workload, seed, thread,
//! threads) alone — no shared counter whose interleaving would differ
//! between systems. The loaded key numbers `0..records` are shared; thread
//! t's k-th insert gets key number `records + k·threads + t`, so threads
//! never collide, and a thread's reads choose among the loaded keys plus its
//! own inserts (every read finds its key). Deletes (`p2-h`) split the
//! loaded keys by `keynum % threads`.

use crate::Kv;
use crate::dist::{HotSet, ScrambledZipfian, SkewedLatest, Uniform, ZIPFIAN_CONSTANT};
use crate::record::{KeyMode, ValueLayout};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Why a workload name did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    #[error("unknown workload '{0}' (known: p2-a … p2-h, p2-var, ycsb-a … ycsb-f, tpcc)")]
    /// Not a known base name. ([`Workload::parse`] takes the YCSB-style
    /// names; [`crate::AnyWorkload::parse`] also takes `tpcc`.)
    Unknown(String),
    #[error("workload '{workload}': unknown option '{option}'")]
    UnknownOption { workload: String, option: String },
    #[error("thread {thread} of {threads}: threads are numbered 0..{threads}")]
    Thread { thread: u32, threads: u32 },
    #[error("workload '{workload}': bad value in '{option}': {why}")]
    BadValue {
        workload: String,
        option: String,
        why: String,
    },
}

/// Operation proportions in per mille (they sum to 1000).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mix {
    pub read: u16,
    pub update: u16,
    pub insert: u16,
    pub scan: u16,
    pub rmw: u16,
    pub delete: u16,
}

impl Mix {
    const fn ru(read: u16, update: u16) -> Mix {
        Mix {
            read,
            update,
            insert: 0,
            scan: 0,
            rmw: 0,
            delete: 0,
        }
    }
    const fn ri(read: u16, insert: u16) -> Mix {
        Mix {
            read,
            update: 0,
            insert,
            scan: 0,
            rmw: 0,
            delete: 0,
        }
    }

    /// Cumulative thresholds in the order read, update, insert, scan, rmw,
    /// delete: a draw `d` in 0..1000 picks the first kind with `d < t`.
    fn thresholds(&self) -> [u16; 6] {
        let mut t = [0u16; 6];
        let mut acc = 0;
        for (i, p) in [
            self.read,
            self.update,
            self.insert,
            self.scan,
            self.rmw,
            self.delete,
        ]
        .into_iter()
        .enumerate()
        {
            acc += p;
            t[i] = acc;
        }
        t
    }

    /// The fraction of operations that insert.
    pub fn insert_fraction(&self) -> f64 {
        self.insert as f64 / 1000.0
    }
}

/// How read, update, scan and read-modify-write operations choose keys
/// (inserts always take fresh keys; see the module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Distribution {
    /// YCSB's scrambled Zipfian over the loaded keys plus the inserts a
    /// thread expects (2 × its operations × the insert fraction, YCSB's
    /// fudge factor), redrawing keys not yet inserted — as YCSB's
    /// CoreWorkload does, so popular keys do not move as keys are added.
    Zipfian { theta: f64 },
    /// Uniform over the loaded keys (YCSB's `uniform`).
    Uniform,
    /// YCSB's skewed-latest: Zipfian back from the newest key.
    Latest { theta: f64 },
    /// N-Store's hot set (see [`HotSet`]) over the loaded keys.
    HotSet { hot_fraction: f64, hot_prob: f64 },
    /// Key numbers in order, each once (`p2-h`'s deletes).
    Sequential,
}

/// A parsed workload (module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// The base name (`p2-a`, `ycsb-e`, …).
    pub base: &'static str,
    pub mix: Mix,
    pub distribution: Distribution,
    /// Records loaded before the run.
    pub records: u64,
    /// Operations of the run, over all threads.
    pub operations: u64,
    pub keys: KeyMode,
    pub value: ValueLayout,
    /// Scan lengths are uniform in `1..=scan_max` (YCSB `maxscanlength`).
    pub scan_max: u32,
}

struct Base {
    name: &'static str,
    mix: Mix,
    latest: bool,
    p2: bool,
    var: bool,
}

const BASES: &[Base] = &[
    Base::p2("p2-a", Mix::ri(1000, 0)),
    Base::p2("p2-b", Mix::ri(900, 100)),
    Base::p2("p2-c", Mix::ri(500, 500)),
    Base::p2("p2-d", Mix::ri(100, 900)),
    Base::p2("p2-e", Mix::ru(900, 100)),
    Base::p2("p2-f", Mix::ru(500, 500)),
    Base::p2("p2-g", Mix::ru(100, 900)),
    Base::p2(
        "p2-h",
        Mix {
            read: 0,
            update: 0,
            insert: 0,
            scan: 0,
            rmw: 0,
            delete: 1000,
        },
    ),
    Base {
        name: "p2-var",
        mix: Mix::ri(500, 500),
        latest: false,
        p2: true,
        var: true,
    },
    Base::ycsb("ycsb-a", Mix::ru(500, 500), false),
    Base::ycsb("ycsb-b", Mix::ru(950, 50), false),
    Base::ycsb("ycsb-c", Mix::ru(1000, 0), false),
    Base::ycsb("ycsb-d", Mix::ri(950, 50), true),
    Base::ycsb(
        "ycsb-e",
        Mix {
            read: 0,
            update: 0,
            insert: 50,
            scan: 950,
            rmw: 0,
            delete: 0,
        },
        false,
    ),
    Base::ycsb(
        "ycsb-f",
        Mix {
            read: 500,
            update: 0,
            insert: 0,
            scan: 0,
            rmw: 500,
            delete: 0,
        },
        false,
    ),
];

impl Base {
    const fn p2(name: &'static str, mix: Mix) -> Base {
        Base {
            name,
            mix,
            latest: false,
            p2: true,
            var: false,
        }
    }
    const fn ycsb(name: &'static str, mix: Mix, latest: bool) -> Base {
        Base {
            name,
            mix,
            latest,
            p2: false,
            var: false,
        }
    }
}

/// Every base name [`Workload::parse`] accepts (TPC-C is [`crate::tpcc`]).
pub fn workload_names() -> impl Iterator<Item = &'static str> {
    BASES.iter().map(|b| b.name)
}

fn parse_count(s: &str) -> Option<u64> {
    let (digits, mult) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1_000),
        b'm' | b'M' => (&s[..s.len() - 1], 1_000_000),
        b'g' | b'G' => (&s[..s.len() - 1], 1_000_000_000),
        _ => (s, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

impl Workload {
    /// Parses a workload name (module docs); unknown names and options
    /// are typed errors.
    pub fn parse(name: &str) -> Result<Workload, WorkloadError> {
        let mut parts = name.split(':');
        let base_name = parts.next().unwrap_or_default();
        let canonical = if base_name == "ycsb-var" {
            "p2-var"
        } else {
            base_name
        };
        let base = BASES
            .iter()
            .find(|b| b.name == canonical)
            .ok_or_else(|| WorkloadError::Unknown(name.to_string()))?;
        let mut w = Workload {
            base: base.name,
            mix: base.mix,
            distribution: if base.mix.delete > 0 {
                Distribution::Sequential
            } else if base.latest {
                Distribution::Latest {
                    theta: ZIPFIAN_CONSTANT,
                }
            } else {
                Distribution::Zipfian {
                    theta: ZIPFIAN_CONSTANT,
                }
            },
            records: if base.p2 { 10_000_000 } else { 1_000_000 },
            operations: if base.p2 { 10_000_000 } else { 1_000_000 },
            keys: if base.p2 { KeyMode::Int } else { KeyMode::User },
            value: if base.var {
                ValueLayout::P2_VAR
            } else if base.p2 {
                ValueLayout::P2
            } else {
                ValueLayout::YCSB
            },
            scan_max: 100,
        };
        for opt in parts {
            let bad = |why: &str| WorkloadError::BadValue {
                workload: name.to_string(),
                option: opt.to_string(),
                why: why.to_string(),
            };
            let (k, v) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            };
            let dist = match (k, v) {
                ("zipfian", None) => Some(Distribution::Zipfian {
                    theta: ZIPFIAN_CONSTANT,
                }),
                ("zipfian", Some(t)) | ("latest", Some(t)) => {
                    let theta: f64 = t.parse().map_err(|_| bad("theta is not a number"))?;
                    if !(theta > 0.0 && theta < 1.0) {
                        return Err(bad("theta must be in (0, 1)"));
                    }
                    Some(if k == "zipfian" {
                        Distribution::Zipfian { theta }
                    } else {
                        Distribution::Latest { theta }
                    })
                }
                ("uniform", None) => Some(Distribution::Uniform),
                ("latest", None) => Some(Distribution::Latest {
                    theta: ZIPFIAN_CONSTANT,
                }),
                ("skew-low", None) | ("skew-high", None) => {
                    let (hot_fraction, hot_prob) = if k == "skew-low" {
                        HotSet::LOW
                    } else {
                        HotSet::HIGH
                    };
                    Some(Distribution::HotSet {
                        hot_fraction,
                        hot_prob,
                    })
                }
                _ => None,
            };
            if let Some(d) = dist {
                if w.distribution == Distribution::Sequential {
                    return Err(bad("p2-h deletes keys in order; it takes no distribution"));
                }
                w.distribution = d;
                continue;
            }
            match (k, v) {
                ("records", Some(n)) => {
                    w.records = parse_count(n)
                        .filter(|n| *n > 0)
                        .ok_or_else(|| bad("need a positive count"))?;
                }
                ("ops", Some(n)) => {
                    w.operations = parse_count(n).ok_or_else(|| bad("need a count"))?;
                }
                ("keys", Some(m)) => {
                    w.keys = match m {
                        "user" => KeyMode::User,
                        "int" => KeyMode::Int,
                        "ordered" => KeyMode::Ordered,
                        _ => return Err(bad("keys are user, int or ordered")),
                    };
                }
                ("fields", Some(f)) => {
                    let (c, l) = f.split_once('x').ok_or_else(|| bad("want COUNTxLEN"))?;
                    let count: u32 = c.parse().map_err(|_| bad("bad field count"))?;
                    let len: u32 = l.parse().map_err(|_| bad("bad field length"))?;
                    if count == 0 || count as u64 * len as u64 > 1 << 20 {
                        return Err(bad("1 or more fields, at most 1 MiB in all"));
                    }
                    w.value = ValueLayout::Fields { count, len };
                }
                ("var", Some(r)) => {
                    let (a, b) = r.split_once('-').ok_or_else(|| bad("want MIN-MAX"))?;
                    let min: u32 = a.parse().map_err(|_| bad("bad minimum"))?;
                    let max: u32 = b.parse().map_err(|_| bad("bad maximum"))?;
                    if min > max || max > 1 << 20 {
                        return Err(bad("need MIN <= MAX <= 1 MiB"));
                    }
                    w.value = ValueLayout::Var { min, max };
                }
                _ => {
                    return Err(WorkloadError::UnknownOption {
                        workload: name.to_string(),
                        option: opt.to_string(),
                    });
                }
            }
        }
        Ok(w)
    }

    /// Same workload with `records` loaded records.
    pub fn with_records(mut self, records: u64) -> Self {
        self.records = records.max(1);
        self
    }

    /// Same workload with `operations` operations in the run.
    pub fn with_operations(mut self, operations: u64) -> Self {
        self.operations = operations;
        self
    }

    /// Operations thread `thread` of `threads` runs: the run's operations
    /// split as evenly as possible. For `p2-h` its share of the deletes
    /// (the loaded keys with `keynum % threads == thread`), whatever
    /// `operations` says.
    pub fn ops_for_thread(&self, thread: u32, threads: u32) -> u64 {
        let (n, t, k) = (
            if self.distribution == Distribution::Sequential {
                self.records
            } else {
                self.operations
            },
            threads.max(1) as u64,
            thread as u64,
        );
        n / t + u64::from(k < n % t)
    }
}

/// One generated operation; keys and values borrow the generator's
/// buffers (valid until its next call).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op<'a> {
    Read {
        key: &'a [u8],
    },
    Insert {
        key: &'a [u8],
        value: &'a [u8],
    },
    Update {
        key: &'a [u8],
        value: &'a [u8],
    },
    Delete {
        key: &'a [u8],
    },
    /// Up to `len` records from `key` on.
    Scan {
        key: &'a [u8],
        len: usize,
    },
    /// Read `key`, then write `value` (YCSB's read-modify-write).
    ReadModifyWrite {
        key: &'a [u8],
        value: &'a [u8],
    },
}

/// The kind of an [`Op`], for counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    Read,
    Update,
    Insert,
    Scan,
    ReadModifyWrite,
    Delete,
}

impl Op<'_> {
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Read { .. } => OpKind::Read,
            Op::Insert { .. } => OpKind::Insert,
            Op::Update { .. } => OpKind::Update,
            Op::Delete { .. } => OpKind::Delete,
            Op::Scan { .. } => OpKind::Scan,
            Op::ReadModifyWrite { .. } => OpKind::ReadModifyWrite,
        }
    }

    pub fn key(&self) -> &[u8] {
        match *self {
            Op::Read { key }
            | Op::Insert { key, .. }
            | Op::Update { key, .. }
            | Op::Delete { key }
            | Op::Scan { key, .. }
            | Op::ReadModifyWrite { key, .. } => key,
        }
    }
}

enum Chooser {
    Zipf(ScrambledZipfian),
    Uniform(Uniform),
    Latest(SkewedLatest),
    Hot(HotSet),
    Sequential,
}

/// The seeded operation stream of one thread (module docs). Generation
/// allocates nothing after the first few calls (the key and value buffers
/// reach their largest size and stay).
pub struct Generator {
    rng: ChaCha8Rng,
    thresholds: [u16; 6],
    keys: KeyMode,
    value_layout: ValueLayout,
    scan_max: u32,
    chooser: Chooser,
    thread: u64,
    threads: u64,
    loaded: u64,
    inserted: u64,
    /// Operations generated so far (makes versions unique).
    seq: u64,
    /// `p2-h`: the next key number to delete.
    next_delete: u64,
    key: Vec<u8>,
    value: Vec<u8>,
}

impl Generator {
    /// The stream of thread `thread` of `threads` (0-based) for `seed`.
    /// `thread` must be below `threads` (else [`WorkloadError::Thread`]).
    pub fn new(
        w: &Workload,
        seed: u64,
        thread: u32,
        threads: u32,
    ) -> Result<Generator, WorkloadError> {
        if thread >= threads {
            return Err(WorkloadError::Thread { thread, threads });
        }
        let (thread, threads) = (thread as u64, threads as u64);
        // One independent ChaCha stream per thread of the same seed.
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(thread);
        let ops = w.ops_for_thread(thread as u32, threads as u32);
        let chooser = match w.distribution {
            Distribution::Zipfian { theta } => {
                let expected_new = (ops as f64 * w.mix.insert_fraction() * 2.0).ceil() as u64;
                Chooser::Zipf(ScrambledZipfian::new(w.records + expected_new, theta))
            }
            Distribution::Uniform => Chooser::Uniform(Uniform::new(w.records)),
            Distribution::Latest { theta } => Chooser::Latest(SkewedLatest::new(w.records, theta)),
            Distribution::HotSet {
                hot_fraction,
                hot_prob,
            } => Chooser::Hot(HotSet::new(w.records, hot_fraction, hot_prob)),
            Distribution::Sequential => Chooser::Sequential,
        };
        let (_, max_value) = w.value.bounds();
        Ok(Generator {
            rng,
            thresholds: w.mix.thresholds(),
            keys: w.keys,
            value_layout: w.value,
            scan_max: w.scan_max.max(1),
            chooser,
            thread,
            threads,
            loaded: w.records,
            inserted: 0,
            seq: 0,
            next_delete: thread,
            key: Vec::with_capacity(w.keys.max_len()),
            value: Vec::with_capacity(max_value),
        })
    }

    /// Key number of this thread's `i`-th known key (loaded keys first,
    /// then its own inserts).
    #[inline]
    fn keynum_of(&self, i: u64) -> u64 {
        if i < self.loaded {
            i
        } else {
            self.loaded + (i - self.loaded) * self.threads + self.thread
        }
    }

    /// Index (in this thread's known keys) of the next existing key.
    #[inline]
    fn choose(&mut self) -> u64 {
        let known = self.loaded + self.inserted;
        match &mut self.chooser {
            Chooser::Zipf(z) => loop {
                let i = z.next(&mut self.rng);
                if i < known {
                    break i;
                }
            },
            Chooser::Uniform(u) => u.next(&mut self.rng),
            Chooser::Latest(l) => l.next(known, &mut self.rng),
            Chooser::Hot(h) => h.next(&mut self.rng),
            Chooser::Sequential => 0,
        }
    }

    /// A fresh version number: never 0 (the loaded version), unique over
    /// all threads of the run.
    #[inline]
    fn fresh_version(&self) -> u64 {
        1 + (self.seq - 1) * self.threads + self.thread
    }

    /// Keys chosen so far that exist: the loaded records plus this
    /// thread's inserts.
    pub fn known_keys(&self) -> u64 {
        self.loaded + self.inserted
    }

    /// The next operation; `None` only when a `p2-h` thread has deleted its
    /// share of the keys (other workloads never end: run
    /// [`Workload::ops_for_thread`] of them).
    pub fn next_op(&mut self) -> Option<Op<'_>> {
        self.seq += 1;
        if let Chooser::Sequential = self.chooser {
            if self.next_delete >= self.loaded {
                return None;
            }
            let n = self.next_delete;
            self.next_delete += self.threads;
            self.keys.write_key(n, &mut self.key);
            return Some(Op::Delete { key: &self.key });
        }
        let d = self.rng.random_range(0..1000u16);
        let kind = self.thresholds.iter().position(|t| d < *t).unwrap_or(0);
        Some(match kind {
            // read
            0 => {
                let i = self.choose();
                self.keys.write_key(self.keynum_of(i), &mut self.key);
                Op::Read { key: &self.key }
            }
            // update
            1 => {
                let i = self.choose();
                self.keys.write_key(self.keynum_of(i), &mut self.key);
                let v = self.fresh_version();
                self.value_layout.write_value(&self.key, v, &mut self.value);
                Op::Update {
                    key: &self.key,
                    value: &self.value,
                }
            }
            // insert
            2 => {
                let n = self.loaded + self.inserted * self.threads + self.thread;
                self.inserted += 1;
                self.keys.write_key(n, &mut self.key);
                let v = self.fresh_version();
                self.value_layout.write_value(&self.key, v, &mut self.value);
                Op::Insert {
                    key: &self.key,
                    value: &self.value,
                }
            }
            // scan
            3 => {
                let i = self.choose();
                self.keys.write_key(self.keynum_of(i), &mut self.key);
                let len = self.rng.random_range(1..=self.scan_max) as usize;
                Op::Scan {
                    key: &self.key,
                    len,
                }
            }
            // read-modify-write
            4 => {
                let i = self.choose();
                self.keys.write_key(self.keynum_of(i), &mut self.key);
                let v = self.fresh_version();
                self.value_layout.write_value(&self.key, v, &mut self.value);
                Op::ReadModifyWrite {
                    key: &self.key,
                    value: &self.value,
                }
            }
            // delete, in a mix with other operations: a uniform draw among
            // the known keys (no named workload mixes deletes with others).
            _ => {
                let known = self.loaded + self.inserted;
                let i = self.rng.random_range(0..known);
                self.keys.write_key(self.keynum_of(i), &mut self.key);
                Op::Delete { key: &self.key }
            }
        })
    }
}

/// The initial records of a workload (key numbers `start..end`, version
/// 0), reusing one key and one value buffer.
pub struct Loader {
    keys: KeyMode,
    layout: ValueLayout,
    next: u64,
    end: u64,
    key: Vec<u8>,
    value: Vec<u8>,
}

impl Loader {
    /// Every record of the workload.
    pub fn new(w: &Workload) -> Loader {
        Self::range(w, 0, w.records)
    }

    /// Thread `thread` of `threads`'s contiguous share of the records.
    pub fn for_thread(w: &Workload, thread: u32, threads: u32) -> Result<Loader, WorkloadError> {
        if thread >= threads {
            return Err(WorkloadError::Thread { thread, threads });
        }
        let (k, t) = (thread as u64, threads as u64);
        let n = w.records as u128;
        let start = (n * k as u128 / t as u128) as u64;
        let end = (n * (k as u128 + 1) / t as u128) as u64;
        Ok(Self::range(w, start, end))
    }

    /// Records with key numbers `start..end`.
    pub fn range(w: &Workload, start: u64, end: u64) -> Loader {
        Loader {
            keys: w.keys,
            layout: w.value,
            next: start,
            end: end.min(w.records),
            key: Vec::with_capacity(w.keys.max_len()),
            value: Vec::with_capacity(w.value.bounds().1),
        }
    }

    /// The next (key, value), or `None` when done.
    pub fn next_record(&mut self) -> Option<(&[u8], &[u8])> {
        if self.next >= self.end {
            return None;
        }
        self.keys.write_key(self.next, &mut self.key);
        self.layout.write_value(&self.key, 0, &mut self.value);
        self.next += 1;
        Some((&self.key, &self.value))
    }

    /// Records left.
    pub fn remaining(&self) -> u64 {
        self.end.saturating_sub(self.next)
    }

    /// Puts every remaining record into `kv`, `batch` records per atomic
    /// batch (1 = one `put` each); returns how many.
    pub fn load_into<K: Kv>(&mut self, kv: &mut K, batch: usize) -> Result<u64, K::Error> {
        let batch = batch.max(1);
        let mut n = 0;
        if batch == 1 {
            while let Some((k, v)) = self.next_record() {
                kv.put(k, v)?;
                n += 1;
            }
            return Ok(n);
        }
        let mut keys: Vec<Vec<u8>> = Vec::with_capacity(batch);
        let mut values: Vec<Vec<u8>> = Vec::with_capacity(batch);
        loop {
            keys.clear();
            values.clear();
            while keys.len() < batch {
                match self.next_record() {
                    Some((k, v)) => {
                        keys.push(k.to_vec());
                        values.push(v.to_vec());
                    }
                    None => break,
                }
            }
            if keys.is_empty() {
                return Ok(n);
            }
            let ops: Vec<crate::BatchOp<'_>> = keys
                .iter()
                .zip(&values)
                .map(|(key, value)| crate::BatchOp::Put { key, value })
                .collect();
            kv.batch(&ops)?;
            n += keys.len() as u64;
        }
    }
}

/// What one operation found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpOutcome {
    /// Read / read-modify-write / delete found the key.
    Hit,
    /// Read / read-modify-write / delete did not find the key (an RMW
    /// still writes).
    Miss,
    /// Insert or update written.
    Written,
    /// A scan visited this many records.
    Scanned(usize),
}

/// Executes one operation against any [`Kv`] — the one code path every
/// system runs. `scratch` receives values read (reuse it across calls).
#[inline]
pub fn run_op<K: Kv>(
    kv: &mut K,
    op: &Op<'_>,
    scratch: &mut Vec<u8>,
) -> Result<OpOutcome, K::Error> {
    Ok(match *op {
        Op::Read { key } => hit(kv.get(key, scratch)?),
        Op::Insert { key, value } | Op::Update { key, value } => {
            kv.put(key, value)?;
            OpOutcome::Written
        }
        Op::Delete { key } => hit(kv.delete(key)?),
        Op::Scan { key, len } => {
            // Touch what is visited, as a reader would.
            let mut bytes = 0usize;
            let n = kv.scan(key, len, &mut |k, v| bytes += k.len() + v.len())?;
            std::hint::black_box(bytes);
            OpOutcome::Scanned(n)
        }
        Op::ReadModifyWrite { key, value } => {
            let found = kv.get(key, scratch)?;
            kv.put(key, value)?;
            hit(found)
        }
    })
}

fn hit(found: bool) -> OpOutcome {
    if found {
        OpOutcome::Hit
    } else {
        OpOutcome::Miss
    }
}
