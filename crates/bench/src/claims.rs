//! The headline claims: one list of what Ferrite reproduces, each computed
//! from rows of one run and set beside the paper's figure and value.
//!
//! A [`Claim`] names the rows it is computed from — suite, variants,
//! params, threads ([`Pick`]) — how ([`How`]: a ratio of the throughputs of
//! the median repetitions, a ratio of times, or a per-operation counter),
//! the paper's figure and reported value, and the target ([`Goal`]: `≥`,
//! `≤` or within a band). Targets come from the issue that built the suite
//! when it set one (the issue number is in the claim's `source`), else
//! from the direction of the paper's finding (≥ 1×: the same winner; the
//! magnitude depends on the medium — Optane there, DRAM here).
//!
//! [`evaluate`] computes every claim of [`CLAIMS`] plus the targets the
//! `ptm` suite ([`crate::ptm_suite::summarize`]), the `server` suite
//! ([`crate::server_suite::summarize`]) and the `engine` suite's redb and
//! long-run rows ([`crate::engine_suite::redb_bench::summarize`],
//! [`crate::engine_suite::long_run::summarize`]) compute themselves, into
//! [`Outcome`]s; a claim whose rows are absent is [`Verdict::NotRun`].
//! [`format_summary`] is what `ferrite bench` prints at its end and what
//! `ferrite report` puts in its page.
//!
//! Paper values are taken from the papers' text (`../shared/papers/`): P0
//! is cited by section and figure and by the line of the text copy
//! (`000_….txt`, which carries no page numbers); P1 (a thesis) by figure
//! and page of its list of figures.

use crate::row::Row;
use std::fmt::Write as _;

/// The target a measured value must reach.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Goal {
    /// `value >= x`.
    AtLeast(f64),
    /// `value <= x`.
    AtMost(f64),
    /// `lo <= value <= hi`.
    Within(f64, f64),
    /// Measured and stated, no target.
    Stated,
}

impl Goal {
    /// Whether `v` meets the goal (`None` for [`Goal::Stated`]).
    pub fn holds(self, v: f64) -> Option<bool> {
        match self {
            Goal::AtLeast(x) => Some(v >= x),
            Goal::AtMost(x) => Some(v <= x),
            Goal::Within(lo, hi) => Some(v >= lo && v <= hi),
            Goal::Stated => None,
        }
    }

    /// The goal as text, e.g. `≥ 2.5×`.
    pub fn describe(self) -> String {
        match self {
            Goal::AtLeast(x) => format!("≥ {}", num(x)),
            Goal::AtMost(x) => format!("≤ {}", num(x)),
            Goal::Within(lo, hi) if lo == hi => format!("= {}", num(lo)),
            Goal::Within(lo, hi) => format!("{}–{}", num(lo), num(hi)),
            Goal::Stated => "stated".into(),
        }
    }
}

/// `x` with as few decimals as it needs (at most 2).
fn num(x: f64) -> String {
    let s = format!("{x:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// How a claim came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Met,
    Missed,
    /// Measured, no target.
    Info,
    /// The rows it needs are not in this run.
    NotRun,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::Missed => "missed",
            Verdict::Info => "info",
            Verdict::NotRun => "not run",
        }
    }
}

/// Which rows of a suite a claim reads: the first row (in run order) of
/// one of `variants` with `threads` threads and every `(key, value)` of
/// `params` (values compared as text: `64`, `true`, `p2-f`). With several
/// variants, the one giving the largest value is taken (the best Ferrite
/// engine, say).
#[derive(Clone, Copy, Debug)]
pub struct Pick {
    pub variants: &'static [&'static str],
    pub params: &'static [(&'static str, &'static str)],
    pub threads: usize,
}

/// A counter of a row.
#[derive(Clone, Copy, Debug)]
pub enum Field {
    FencesPerOp,
    LinesPerOp,
    /// `extra[key]`, a number.
    Extra(&'static str),
}

/// How a claim's value is computed.
#[derive(Clone, Copy, Debug)]
pub enum How {
    /// `num.ops_per_s / den.ops_per_s`: the ratio of the throughputs of
    /// the two rows' median repetitions (> 1: `num` is faster).
    Throughput { num: Pick, den: Pick },
    /// `num.ns_per_op / den.ns_per_op`: `num`'s time as a multiple of
    /// `den`'s (against the floor: how far from the physical limit).
    Time { num: Pick, den: Pick },
    /// A counter of one row.
    Value { of: Pick, field: Field },
    /// `field(num) / field(den)`.
    FieldRatio { num: Pick, den: Pick, field: Field },
}

/// One headline claim. See the module documentation.
#[derive(Clone, Copy, Debug)]
pub struct Claim {
    /// Suite whose rows it reads.
    pub suite: &'static str,
    /// The paper's figure (or table) it reproduces, e.g. `P0 Fig. 8`.
    pub figure: &'static str,
    /// What is compared, e.g. `poplog-padded ÷ pmdk-pmemlog, 64 B`.
    pub name: &'static str,
    pub how: How,
    /// The paper's value, when it states one.
    pub paper: Option<f64>,
    /// The paper's statement, e.g. `≈2× (§3.3.2)`.
    pub paper_note: &'static str,
    pub goal: Goal,
    /// Where the target comes from (`issue 3`, `paper`).
    pub source: &'static str,
}

/// A claim (or a suite's own target) computed from rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub suite: String,
    pub figure: String,
    pub name: String,
    pub measured: Option<f64>,
    pub paper: Option<f64>,
    pub paper_note: String,
    pub goal: Goal,
    pub verdict: Verdict,
    /// Figures beside the value (counters, ranges, rows used).
    pub detail: String,
    /// `×` for ratios, empty for counts (fences per op, lines).
    pub unit: &'static str,
}

impl Outcome {
    /// A value of this outcome as text: `2.91×`, `1.00`, `-` when absent.
    pub fn show(&self, v: Option<f64>) -> String {
        match v {
            Some(_) if self.unit.is_empty() => show(v).trim_end_matches('×').to_string(),
            _ => show(v),
        }
    }
}

impl Outcome {
    /// The verdict of `measured` against `goal`.
    pub fn judge(measured: Option<f64>, goal: Goal) -> Verdict {
        match measured {
            None => Verdict::NotRun,
            Some(v) => match goal.holds(v) {
                None => Verdict::Info,
                Some(true) => Verdict::Met,
                Some(false) => Verdict::Missed,
            },
        }
    }
}

/// Rows of `variants` whose params hold every `(key, value)` of `params`,
/// at one thread.
pub const fn pick(
    variants: &'static [&'static str],
    params: &'static [(&'static str, &'static str)],
) -> Pick {
    Pick {
        variants,
        params,
        threads: 1,
    }
}

/// Every claim of the static list, in figure order. Paper values: see the
/// comment above each group.
pub const CLAIMS: &[Claim] = &[
    // P0 Fig. 7 (§3.2.4; caption line 275 of the text copy, values lines
    // 295-297): "Using the µLog yields performance gains for up to 28 dirty
    // cache lines" (1 thread); CoW reaches 4.9 GB/s against PMem's raw 7.7 GB/s,
    // i.e. 7.7/4.9 = 1.57× the floor. The PMDK and floor targets are issue 4's.
    Claim {
        suite: "page",
        figure: "P0 Fig. 7",
        name: "cow ÷ pmdk-pmemblk, 16 KiB, 1 thread",
        how: How::Throughput {
            num: pick(&["cow"], &[("page_size", "16384")]),
            den: pick(&["pmdk-pmemblk"], &[("page_size", "16384")]),
        },
        paper: None,
        paper_note: "no PMDK curve in Fig. 7",
        goal: Goal::AtLeast(2.0),
        source: "issue 4",
    },
    Claim {
        suite: "page",
        figure: "P0 Fig. 7",
        name: "cow time ÷ floor, 16 KiB, 1 thread",
        how: How::Time {
            num: pick(&["cow"], &[("page_size", "16384")]),
            den: pick(&["floor"], &[("page_size", "16384")]),
        },
        paper: Some(7.7 / 4.9),
        paper_note: "4.9 GB/s vs raw 7.7 GB/s (§3.2.4)",
        goal: Goal::AtMost(1.5),
        source: "issue 4",
    },
    Claim {
        suite: "page",
        figure: "P0 Fig. 7",
        name: "microlog-k1 ÷ cow, 16 KiB, 1 thread",
        how: How::Throughput {
            num: pick(&["microlog-k1"], &[("page_size", "16384")]),
            den: pick(&["cow"], &[("page_size", "16384")]),
        },
        paper: None,
        paper_note: "µLog ahead below 28 dirty lines (§3.2.4)",
        goal: Goal::AtLeast(1.0),
        source: "issue 4",
    },
    Claim {
        suite: "page",
        figure: "P0 Fig. 7",
        name: "µLog/CoW crossover (dirty lines), 16 KiB, 1 thread",
        how: How::Value {
            of: pick(&["crossover"], &[("page_size", "16384")]),
            field: Field::Extra("measured_lines"),
        },
        paper: Some(28.0),
        paper_note: "28 lines, 1 thread (§3.2.4)",
        goal: Goal::Stated,
        source: "paper",
    },
    // P0 Fig. 8 (§3.3.2; caption line 346, values lines 385-391): RAWL and
    // PopLog ≈2× faster than Classic and Header; libpmemlog = the naive Header;
    // padding ≈8×. The PMDK and floor targets are issue 3's.
    Claim {
        suite: "log",
        figure: "P0 Fig. 8",
        name: "poplog-padded ÷ pmdk-pmemlog, 64 B",
        how: How::Throughput {
            num: pick(&["poplog-padded"], &[("bytes", "64")]),
            den: pick(&["pmdk-pmemlog"], &[("bytes", "64")]),
        },
        paper: Some(2.0),
        paper_note: "≈2× the Header log = libpmemlog (§3.3.2)",
        goal: Goal::AtLeast(2.5),
        source: "issue 3",
    },
    Claim {
        suite: "log",
        figure: "P0 Fig. 8",
        name: "poplog-padded ÷ pmdk-pmemlog, 256 B",
        how: How::Throughput {
            num: pick(&["poplog-padded"], &[("bytes", "256")]),
            den: pick(&["pmdk-pmemlog"], &[("bytes", "256")]),
        },
        paper: Some(2.0),
        paper_note: "≈2× the Header log = libpmemlog (§3.3.2)",
        goal: Goal::AtLeast(2.0),
        source: "issue 3",
    },
    Claim {
        suite: "log",
        figure: "P0 Fig. 8",
        name: "poplog-padded ÷ classic-padded, 64 B",
        how: How::Throughput {
            num: pick(&["poplog-padded"], &[("bytes", "64")]),
            den: pick(&["classic-padded"], &[("bytes", "64")]),
        },
        paper: Some(2.0),
        paper_note: "RAWL, PopLog ≈2× Classic (§3.3.2)",
        goal: Goal::AtLeast(1.0),
        source: "paper",
    },
    Claim {
        suite: "log",
        figure: "P0 Fig. 8",
        name: "poplog-padded time ÷ floor, 64 B",
        how: How::Time {
            num: pick(&["poplog-padded"], &[("bytes", "64")]),
            den: pick(&["floor"], &[("bytes", "64")]),
        },
        paper: None,
        paper_note: "no floor in Fig. 8",
        goal: Goal::AtMost(1.3),
        source: "issue 3",
    },
    Claim {
        suite: "log",
        figure: "P0 Fig. 8",
        name: "poplog-padded fences per append",
        how: How::Value {
            of: pick(&["poplog-padded"], &[("bytes", "64")]),
            field: Field::FencesPerOp,
        },
        paper: Some(1.0),
        paper_note: "one persistency barrier (§3.3.1)",
        goal: Goal::Within(1.0, 1.0),
        source: "issue 3",
    },
    Claim {
        suite: "log",
        figure: "P0 Fig. 8",
        name: "classic-padded ÷ classic-packed, 64 B",
        how: How::Throughput {
            num: pick(&["classic-padded"], &[("bytes", "64")]),
            den: pick(&["classic-packed"], &[("bytes", "64")]),
        },
        paper: Some(8.0),
        paper_note: "padding ≈8× (§3.3.2, Optane's same-line penalty)",
        goal: Goal::Stated,
        source: "paper",
    },
    // P0 Fig. 10 (§3.4.4; caption line 505, values line 517): FAM "2× for
    // sequential and 1.6× for random" 16-byte updates over CoW. Targets: issue
    // 4.
    Claim {
        suite: "cell",
        figure: "P0 Fig. 10",
        name: "fam ÷ cow, 16 B sequential updates",
        how: How::Throughput {
            num: pick(&["fam-update-seq"], &[("bytes", "16")]),
            den: pick(&["cow-update-seq"], &[("bytes", "16")]),
        },
        paper: Some(2.0),
        paper_note: "2× sequential (§3.4.4)",
        goal: Goal::AtLeast(1.6),
        source: "issue 4",
    },
    Claim {
        suite: "cell",
        figure: "P0 Fig. 10",
        name: "fam ÷ cow, 16 B random updates",
        how: How::Throughput {
            num: pick(&["fam-update-rand"], &[("bytes", "16")]),
            den: pick(&["cow-update-rand"], &[("bytes", "16")]),
        },
        paper: Some(1.6),
        paper_note: "1.6× random (§3.4.4)",
        goal: Goal::AtLeast(1.6),
        source: "issue 4",
    },
    Claim {
        suite: "cell",
        figure: "P0 Fig. 10",
        name: "fam ÷ log, 16 B random updates",
        how: How::Throughput {
            num: pick(&["fam-update-rand"], &[("bytes", "16")]),
            den: pick(&["log-update-rand"], &[("bytes", "16")]),
        },
        paper: None,
        paper_note: "FAM above the log cell (Fig. 10d)",
        goal: Goal::AtLeast(1.6),
        source: "issue 4",
    },
    Claim {
        suite: "cell",
        figure: "P0 Fig. 10",
        name: "fam fences per update",
        how: How::Value {
            of: pick(&["fam-update-rand"], &[("bytes", "16")]),
            field: Field::FencesPerOp,
        },
        paper: Some(1.0),
        paper_note: "one barrier instead of two (§3.4.3)",
        goal: Goal::Within(1.0, 1.0),
        source: "issue 4",
    },
    // P0 Fig. 12 (§3.5.4; caption line 562, values line 572): interleaving gives
    // "6.2× for inserts on PMem and 5× speed up for lookups, compared to 2.6×
    // for lookups on DRAM". Insert target: issue 4.
    Claim {
        suite: "group",
        figure: "P0 Fig. 12",
        name: "insert-g16 ÷ insert-g1",
        how: How::Throughput {
            num: pick(&["insert-g16"], &[]),
            den: pick(&["insert-g1"], &[]),
        },
        paper: Some(6.2),
        paper_note: "6.2× on PMem (Fig. 12a)",
        goal: Goal::AtLeast(3.0),
        source: "issue 4",
    },
    Claim {
        suite: "group",
        figure: "P0 Fig. 12",
        name: "lookup-g16 ÷ lookup-g1",
        how: How::Throughput {
            num: pick(&["lookup-g16"], &[]),
            den: pick(&["lookup-g1"], &[]),
        },
        paper: Some(2.6),
        paper_note: "2.6× on DRAM, 5× on PMem (Fig. 12b-c)",
        goal: Goal::AtLeast(1.0),
        source: "paper",
    },
    // P1 Fig. 3.6 (p. 28; text of §3.4.2, line 722 of the text copy): clobber
    // "1.82× of [PMDK's] performance on average, and can perform up to 2× ... on
    // hashmap and skiplist" (one thread). Fig. 3.7 (p. 30; §3.4.3, line 738):
    // clobber "uses 21.5% to 42.3% as many log entries as PMDK", entries counted
    // as PMDK counts them: one per ordered log append (`records_vs_undo`).
    // Targets: issue 6.
    Claim {
        suite: "tx",
        figure: "P1 Fig. 3.6",
        name: "clobber ÷ pmdk-tx, hash map insert",
        how: How::Throughput {
            num: pick(&["clobber"], &[("structure", "hashmap")]),
            den: pick(&["pmdk-tx"], &[("structure", "hashmap")]),
        },
        paper: Some(2.0),
        paper_note: "up to 2× on the hash map (p. 28)",
        goal: Goal::AtLeast(1.8),
        source: "issue 6",
    },
    Claim {
        suite: "tx",
        figure: "P1 Fig. 3.6",
        name: "clobber ÷ pmdk-tx, B+tree insert",
        how: How::Throughput {
            num: pick(&["clobber"], &[("structure", "bptree")]),
            den: pick(&["pmdk-tx"], &[("structure", "bptree")]),
        },
        paper: Some(1.82),
        paper_note: "1.82× on average (p. 28)",
        goal: Goal::AtLeast(1.5),
        source: "issue 6",
    },
    Claim {
        suite: "tx",
        figure: "P1 Fig. 3.7",
        name: "clobber log records ÷ undo's, hash map",
        how: How::Value {
            of: pick(&["clobber"], &[("structure", "hashmap")]),
            field: Field::Extra("records_vs_undo"),
        },
        paper: Some(0.423),
        paper_note: "21.5–42.3 % of PMDK's (p. 30)",
        goal: Goal::AtMost(0.45),
        source: "issue 6",
    },
    Claim {
        suite: "tx",
        figure: "P1 Fig. 3.7",
        name: "clobber log records ÷ undo's, B+tree",
        how: How::Value {
            of: pick(&["clobber"], &[("structure", "bptree")]),
            field: Field::Extra("records_vs_undo"),
        },
        paper: Some(0.423),
        paper_note: "21.5–42.3 % of PMDK's (p. 30)",
        goal: Goal::AtMost(0.45),
        source: "issue 6",
    },
    Claim {
        suite: "tx",
        figure: "P1 Fig. 3.7",
        name: "clobber log records ÷ undo's, skiplist",
        how: How::Value {
            of: pick(&["clobber"], &[("structure", "skiplist")]),
            field: Field::Extra("records_vs_undo"),
        },
        paper: Some(0.423),
        paper_note: "21.5–42.3 % of PMDK's (p. 30)",
        goal: Goal::AtMost(0.45),
        source: "issue 6",
    },
    Claim {
        suite: "tx",
        figure: "P1 Fig. 3.7",
        name: "clobber log records ÷ undo's, rbtree",
        how: How::Value {
            of: pick(&["clobber"], &[("structure", "rbtree")]),
            field: Field::Extra("records_vs_undo"),
        },
        paper: Some(0.423),
        paper_note: "21.5–42.3 % of PMDK's (p. 30)",
        goal: Goal::AtMost(0.45),
        source: "issue 6",
    },
    Claim {
        suite: "tx",
        figure: "P1 Fig. 3.8",
        name: "clobber fences ÷ undo fences, hash map",
        how: How::FieldRatio {
            num: pick(&["clobber"], &[("structure", "hashmap")]),
            den: pick(&["undo"], &[("structure", "hashmap")]),
            field: Field::FencesPerOp,
        },
        paper: None,
        paper_note: "fewer logging points than the alternatives (p. 33)",
        goal: Goal::AtMost(1.0),
        source: "issue 6",
    },
    Claim {
        suite: "tx",
        figure: "P1 Fig. 3.8",
        name: "clobber fences ÷ undo fences, B+tree",
        how: How::FieldRatio {
            num: pick(&["clobber"], &[("structure", "bptree")]),
            den: pick(&["undo"], &[("structure", "bptree")]),
            field: Field::FencesPerOp,
        },
        paper: None,
        paper_note: "fewer logging points than the alternatives (p. 33)",
        goal: Goal::AtMost(1.0),
        source: "issue 6",
    },
    // P2 §2.2 (allocators): no PMDK ratio in the paper; issue 5's target.
    Claim {
        suite: "alloc",
        figure: "P2 §2.2",
        name: "ferrite ÷ pmdk, 256 B alloc+free, 1 thread",
        how: How::Throughput {
            num: pick(&["ferrite"], &[("size", "256")]),
            den: pick(&["pmdk"], &[("size", "256")]),
        },
        paper: None,
        paper_note: "allocators ≈36 % of engine cycles (§1, Fig. 8)",
        goal: Goal::AtLeast(2.0),
        source: "issue 5",
    },
    // P2 Fig. 2 (engines): no LMDB in P2; issue 11's targets, best engine of the
    // Ferrite heap, adr, one thread.
    Claim {
        suite: "engine",
        figure: "P2 Fig. 2",
        name: "best engine ÷ lmdb, p2-f (R50/U50)",
        how: How::Throughput {
            num: pick(
                &["inp", "cow", "lsm"],
                &[
                    ("workload", "p2-f"),
                    ("allocator", "ferrite"),
                    ("domain", "adr"),
                ],
            ),
            den: pick(&["lmdb"], &[("workload", "p2-f")]),
        },
        paper: None,
        paper_note: "no LMDB in P2",
        goal: Goal::AtLeast(2.0),
        source: "issue 11",
    },
    Claim {
        suite: "engine",
        figure: "P2 Fig. 2",
        name: "best engine ÷ lmdb, p2-a (read-only)",
        how: How::Throughput {
            num: pick(
                &["inp", "cow", "lsm"],
                &[
                    ("workload", "p2-a"),
                    ("allocator", "ferrite"),
                    ("domain", "adr"),
                ],
            ),
            den: pick(&["lmdb"], &[("workload", "p2-a")]),
        },
        paper: None,
        paper_note: "no LMDB in P2",
        goal: Goal::AtLeast(1.0),
        source: "issue 11",
    },
    // P2 Fig. 12b (§4.8; text copy line 464): with eADR, TPC-C throughput
    // "improved by 11.5%, 9.5%, and 10.9%" for InP, LSM, CoW.
    Claim {
        suite: "engine",
        figure: "P2 Fig. 12",
        name: "inp eadr ÷ adr, TPC-C",
        how: How::Throughput {
            num: pick(
                &["inp"],
                &[
                    ("workload", "tpcc"),
                    ("allocator", "ferrite"),
                    ("domain", "eadr"),
                ],
            ),
            den: pick(
                &["inp"],
                &[
                    ("workload", "tpcc"),
                    ("allocator", "ferrite"),
                    ("domain", "adr"),
                ],
            ),
        },
        paper: Some(1.115),
        paper_note: "+11.5 % (§4.8)",
        goal: Goal::AtLeast(1.0),
        source: "paper",
    },
    Claim {
        suite: "engine",
        figure: "P2 Fig. 12",
        name: "cow eadr ÷ adr, TPC-C",
        how: How::Throughput {
            num: pick(
                &["cow"],
                &[
                    ("workload", "tpcc"),
                    ("allocator", "ferrite"),
                    ("domain", "eadr"),
                ],
            ),
            den: pick(
                &["cow"],
                &[
                    ("workload", "tpcc"),
                    ("allocator", "ferrite"),
                    ("domain", "adr"),
                ],
            ),
        },
        paper: Some(1.109),
        paper_note: "+10.9 % (§4.8)",
        goal: Goal::AtLeast(1.0),
        source: "paper",
    },
    Claim {
        suite: "engine",
        figure: "P2 Fig. 12",
        name: "lsm eadr ÷ adr, TPC-C",
        how: How::Throughput {
            num: pick(
                &["lsm"],
                &[
                    ("workload", "tpcc"),
                    ("allocator", "ferrite"),
                    ("domain", "eadr"),
                ],
            ),
            den: pick(
                &["lsm"],
                &[
                    ("workload", "tpcc"),
                    ("allocator", "ferrite"),
                    ("domain", "adr"),
                ],
            ),
        },
        paper: Some(1.095),
        paper_note: "+9.5 % (§4.8)",
        goal: Goal::AtLeast(1.0),
        source: "paper",
    },
    Claim {
        suite: "cache",
        figure: "P1 Fig. 5.6",
        name: "persistron ÷ dram-wal-sync, YCSB-C, equal cost",
        how: How::Throughput {
            num: pick(&["persistron"], &[("workload", "ycsb-c")]),
            den: pick(&["dram-wal-sync"], &[("workload", "ycsb-c")]),
        },
        paper: Some(1.41),
        paper_note: "queries +30–46 %, ≈+41 % at 4 GiB DRAM + 16 GiB PMEM (§5.6.1)",
        goal: Goal::AtLeast(1.3),
        source: "issue 15",
    },
    Claim {
        suite: "cache",
        figure: "P1 Fig. 5.6",
        name: "persistron ÷ dram-wal-sync, YCSB Load, equal cost",
        how: How::Throughput {
            num: pick(&["persistron"], &[("workload", "ycsb-load")]),
            den: pick(&["dram-wal-sync"], &[("workload", "ycsb-load")]),
        },
        paper: Some(1.05),
        paper_note: "inserts ≈+5 % vs SplinterDB, whose log is not synced per insert (§5.6.1)",
        goal: Goal::AtLeast(1.0),
        source: "issue 15",
    },
    Claim {
        suite: "cache",
        figure: "P1 Fig. 5.6",
        name: "persistron ÷ dram-wal-batch (not durable), YCSB Load",
        how: How::Throughput {
            num: pick(&["persistron"], &[("workload", "ycsb-load")]),
            den: pick(&["dram-wal-batch"], &[("workload", "ycsb-load")]),
        },
        paper: Some(1.05),
        paper_note: "inserts ≈+5 % (§5.6.1)",
        goal: Goal::Stated,
        source: "paper",
    },
    Claim {
        suite: "cache",
        figure: "P1 Fig. 5.6",
        name: "persistron-d25 (d = C/4) ÷ dram-wal-sync, YCSB-C, equal cost",
        how: How::Throughput {
            num: pick(&["persistron-d25"], &[("workload", "ycsb-c")]),
            den: pick(&["dram-wal-sync"], &[("workload", "ycsb-c")]),
        },
        paper: Some(1.46),
        paper_note: "queries +30–46 %, improving as DRAM is traded for PMEM: the most PMEM, (2D, 24P), is the +46 % end (§5.6.2)",
        goal: Goal::Stated,
        source: "paper",
    },
    Claim {
        suite: "cache",
        figure: "P1 Fig. 5.6",
        name: "persistron-d75 (d = 3C/4) ÷ dram-wal-sync, YCSB-C, equal cost",
        how: How::Throughput {
            num: pick(&["persistron-d75"], &[("workload", "ycsb-c")]),
            den: pick(&["dram-wal-sync"], &[("workload", "ycsb-c")]),
        },
        paper: Some(1.30),
        paper_note: "queries +30–46 %, improving as DRAM is traded for PMEM: the least PMEM, (6D, 8P), is the +30 % end (§5.6.2)",
        goal: Goal::Stated,
        source: "paper",
    },
    // The bound on the equal-cost YCSB-C target on this machine: the same
    // store over a volatile cache as large as Persistron's two tiers.
    Claim {
        suite: "cache",
        figure: "P1 Fig. 5.6",
        name: "capacity-bound (volatile, 2.5 C, no log) ÷ dram-wal-sync, YCSB-C",
        how: How::Throughput {
            num: pick(&["capacity-bound"], &[("workload", "ycsb-c")]),
            den: pick(&["dram-wal-sync"], &[("workload", "ycsb-c")]),
        },
        paper: None,
        paper_note: "what 2.5× the cache buys here, whatever its medium: the ceiling of the persistron ratio",
        goal: Goal::Stated,
        source: "issue 15",
    },
    Claim {
        suite: "cache",
        figure: "P1 Fig. 5.6",
        name: "persistron ÷ capacity-bound, YCSB-C",
        how: How::Throughput {
            num: pick(&["persistron"], &[("workload", "ycsb-c")]),
            den: pick(&["capacity-bound"], &[("workload", "ycsb-c")]),
        },
        paper: None,
        paper_note: "Persistron's throughput as a share of the bound's: what its persistent and DRAM tiers cost",
        goal: Goal::Stated,
        source: "issue 15",
    },
    Claim {
        suite: "cache",
        figure: "P1 Fig. 5.9",
        name: "DRAM tier: persistron ÷ persistron-no-dram, YCSB-C",
        how: How::Throughput {
            num: pick(&["persistron"], &[("workload", "ycsb-c")]),
            den: pick(&["persistron-no-dram"], &[("workload", "ycsb-c")]),
        },
        paper: Some(1.14),
        paper_note: "+14 % on C (Optane reads; here the tiers are both DRAM)",
        goal: Goal::Stated,
        source: "paper",
    },
    Claim {
        suite: "cache",
        figure: "P1 Fig. 5.9",
        name: "strict 2PL: persistron ÷ persistron-early-release, YCSB-A",
        how: How::Throughput {
            num: pick(&["persistron"], &[("workload", "ycsb-a")]),
            den: pick(&["persistron-early-release"], &[("workload", "ycsb-a")]),
        },
        paper: Some(1.0),
        paper_note: "\"little or no overhead\" (§5.3.4)",
        goal: Goal::Stated,
        source: "paper",
    },
    Claim {
        suite: "cache",
        figure: "P1 Fig. 5.9",
        name: "non-transactions: persistron ÷ persistron-no-nontx, YCSB Load",
        how: How::Throughput {
            num: pick(&["persistron"], &[("workload", "ycsb-load")]),
            den: pick(&["persistron-no-nontx"], &[("workload", "ycsb-load")]),
        },
        paper: None,
        paper_note: "Non-Tx recovers \"almost all\" of PMEM CoW's overhead on inserts",
        goal: Goal::Stated,
        source: "paper",
    },
    // P4 (Lu, Liu, Chen; `004_….txt`), §IV-B, 16 cores. The `sim` suite's
    // row `workload = average` holds the means over its workloads of the
    // per-workload ratios fine-grained ÷ global. Fig. 8: "an improvement of
    // 1.78 times"; Fig. 9: "the time cost of single committing operation is
    // reduced by 60.4%" (ratio 0.396; the abstract's "2.07 times" would be
    // 0.483); Fig. 11: "synchronization operations 2.4 times more". The
    // targets are the direction of each finding (issue 16 sets none); the
    // model runs Ferrite's programs, not WHISPER, so only trends compare.
    Claim {
        suite: "sim",
        figure: "P4 Fig. 8",
        name: "fine-grained ÷ global IPC, mean over workloads, 16 cores",
        how: How::Value {
            of: P4_AVERAGE,
            field: Field::Extra("ipc_ratio"),
        },
        paper: Some(1.78),
        paper_note: "1.78× on WHISPER (§IV-B)",
        goal: Goal::AtLeast(1.0),
        source: "paper",
    },
    Claim {
        suite: "sim",
        figure: "P4 Fig. 9",
        name: "fine-grained ÷ global commit latency, mean over workloads",
        how: How::Value {
            of: P4_AVERAGE,
            field: Field::Extra("commit_cycles_ratio"),
        },
        paper: Some(0.396),
        paper_note: "−60.4 % (§IV-B)",
        goal: Goal::AtMost(1.0),
        source: "paper",
    },
    Claim {
        suite: "sim",
        figure: "P4 Fig. 11",
        name: "fine-grained ÷ global credit-sync reads, mean over workloads",
        how: How::Value {
            of: P4_AVERAGE,
            field: Field::Extra("sync_reads_ratio"),
        },
        paper: Some(2.4),
        paper_note: "2.4× more (§IV-B)",
        goal: Goal::AtLeast(1.0),
        source: "paper",
    },
    // P4 Fig. 10 (§IV-B): committing every 100 updates, "a performance
    // improvement of 6.0%"; every update, "may reach 100%".
    Claim {
        suite: "sim",
        figure: "P4 Fig. 10",
        name: "fine-grained ÷ global IPC, commit every 100 updates",
        how: How::Throughput {
            num: P4_EVERY_100[0],
            den: P4_EVERY_100[1],
        },
        paper: Some(1.06),
        paper_note: "+6.0 % (§IV-B)",
        goal: Goal::AtLeast(1.0),
        source: "paper",
    },
    Claim {
        suite: "sim",
        figure: "P4 Fig. 10",
        name: "fine-grained ÷ global IPC, commit every update",
        how: How::Throughput {
            num: P4_EVERY_1[0],
            den: P4_EVERY_1[1],
        },
        paper: Some(2.0),
        paper_note: "\"may reach 100%\" (§IV-B)",
        goal: Goal::AtLeast(1.0),
        source: "paper",
    },
    // P1 §4.6.4 / Fig. 4.8: memcached on Zhuque runs at about 80 % of the
    // volatile one, and 1.81× PMDK's (FoF) port; ferrite serve on undo /
    // redo logging stands in for the port. Restart: issue 17's bar.
    Claim {
        suite: "wpp",
        figure: "P1 Fig. 4.8",
        name: "memcached under ferrite run ÷ plain memcached, 5/95",
        how: How::Throughput {
            num: Pick {
                variants: &["wpp"],
                params: &[("program", "memcached"), ("mix", "5/95")],
                threads: 2,
            },
            den: Pick {
                variants: &["native"],
                params: &[("program", "memcached"), ("mix", "5/95")],
                threads: 2,
            },
        },
        paper: Some(0.8),
        paper_note: "Zhuque ≈ 80 % of volatile musl memcached on every mix (§4.6.4)",
        goal: Goal::AtLeast(0.8),
        source: "issue 17",
    },
    Claim {
        suite: "wpp",
        figure: "P1 Fig. 4.8",
        name: "memcached under ferrite run ÷ ferrite serve tx-undo, 95/5",
        how: How::Throughput {
            num: Pick {
                variants: &["wpp"],
                params: &[("program", "memcached"), ("mix", "95/5")],
                threads: 2,
            },
            den: Pick {
                variants: &["tx-undo"],
                params: &[("program", "memcached"), ("mix", "95/5")],
                threads: 2,
            },
        },
        paper: Some(1.81),
        paper_note: "up to 1.81× PMDK-FoF's memcached (§4.6.4); here undo logging with flushes stands in",
        goal: Goal::Stated,
        source: "paper",
    },
    Claim {
        suite: "wpp",
        figure: "issue 17",
        name: "restart of a 1 GiB process, ms",
        how: How::Value {
            of: pick(&["wpp"], &[("program", "restart"), ("size_mib", "1024")]),
            field: Field::Extra("restart_ms"),
        },
        paper: None,
        paper_note: "no figure in P1; issue 17 asks < 1 s",
        goal: Goal::AtMost(1000.0),
        source: "issue 17",
    },
];

/// The `sim` suite's summary row (16 simulated cores).
const P4_AVERAGE: Pick = Pick {
    variants: &["fine-grained"],
    params: &[("workload", "average"), ("sweep", "main")],
    threads: 16,
};

/// Rows of the `sim` suite's commit-frequency sweep (16 simulated cores):
/// `[fine-grained, global]` at one commit interval.
const fn p4_sweep(params: &'static [(&'static str, &'static str)]) -> [Pick; 2] {
    [
        Pick {
            variants: &["fine-grained"],
            params,
            threads: 16,
        },
        Pick {
            variants: &["global"],
            params,
            threads: 16,
        },
    ]
}

const P4_EVERY_1: [Pick; 2] = p4_sweep(&[("sweep", "commit-frequency"), ("commit_every", "1")]);
const P4_EVERY_100: [Pick; 2] = p4_sweep(&[("sweep", "commit-frequency"), ("commit_every", "100")]);

/// `params[key]` as text (`64`, `true`, `p2-f`), `None` when absent.
pub fn param_text(r: &Row, key: &str) -> Option<String> {
    r.params.get(key).and_then(|v| match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    })
}

/// Whether a row measured something (not a skipped or failed system, not
/// a data row such as `fig8-series`).
fn measured(r: &Row) -> bool {
    let flagged = r
        .extra
        .as_ref()
        .is_some_and(|e| e.get("skipped").is_some() || e.get("failed").is_some());
    !flagged
}

impl Pick {
    /// The rows of `suite` this pick selects, one per variant (the first
    /// in run order), in the order of `variants`.
    pub fn rows<'a>(&self, suite: &str, rows: &'a [Row]) -> Vec<&'a Row> {
        self.variants
            .iter()
            .filter_map(|v| {
                rows.iter().find(|r| {
                    r.suite == suite
                        && r.variant == *v
                        && r.threads == self.threads
                        && measured(r)
                        && self
                            .params
                            .iter()
                            .all(|(k, want)| param_text(r, k).as_deref() == Some(*want))
                })
            })
            .collect()
    }
}

impl Field {
    fn of(self, r: &Row) -> Option<f64> {
        let v = match self {
            Field::FencesPerOp => r.counters_observed.then_some(r.fences_per_op)?,
            Field::LinesPerOp => r.counters_observed.then_some(r.lines_per_op)?,
            Field::Extra(k) => r.extra.as_ref()?.get(k)?.as_f64()?,
        };
        v.is_finite().then_some(v)
    }

    fn name(self) -> &'static str {
        match self {
            Field::FencesPerOp => "fences/op",
            Field::LinesPerOp => "lines/op",
            Field::Extra(k) => k,
        }
    }
}

fn positive(v: f64) -> Option<f64> {
    (v.is_finite() && v > 0.0).then_some(v)
}

impl Claim {
    /// The claim's value from `rows` and a note naming the rows used.
    pub fn compute(&self, rows: &[Row]) -> (Option<f64>, String) {
        let s = self.suite;
        // The best of the numerator's variants against one denominator.
        let ratio_of = |num: &Pick, den: &Pick, f: &dyn Fn(&Row, &Row) -> Option<f64>| {
            let Some(d) = den.rows(s, rows).into_iter().next() else {
                return (None, String::new());
            };
            let best = num
                .rows(s, rows)
                .into_iter()
                .filter_map(|n| f(n, d).map(|v| (v, n)))
                .max_by(|a, b| a.0.total_cmp(&b.0));
            match best {
                Some((v, n)) => (Some(v), format!("{} vs {}", n.variant, d.variant)),
                None => (None, String::new()),
            }
        };
        match self.how {
            How::Throughput { num, den } => ratio_of(&num, &den, &|n, d| {
                positive(n.ops_per_s)
                    .zip(positive(d.ops_per_s))
                    .map(|(a, b)| a / b)
            }),
            How::Time { num, den } => ratio_of(&num, &den, &|n, d| {
                positive(n.ns_per_op)
                    .zip(positive(d.ns_per_op))
                    .map(|(a, b)| a / b)
            }),
            How::FieldRatio { num, den, field } => ratio_of(&num, &den, &|n, d| {
                field
                    .of(n)
                    .zip(field.of(d).and_then(positive))
                    .map(|(a, b)| a / b)
            }),
            How::Value { of, field } => {
                let best = of
                    .rows(s, rows)
                    .into_iter()
                    .filter_map(|r| field.of(r).map(|v| (v, r)))
                    .max_by(|a, b| a.0.total_cmp(&b.0));
                match best {
                    Some((v, r)) => (Some(v), format!("{} of {}", field.name(), r.variant)),
                    None => (None, String::new()),
                }
            }
        }
    }

    /// The claim computed from `rows`.
    pub fn evaluate(&self, rows: &[Row]) -> Outcome {
        let (measured, detail) = self.compute(rows);
        Outcome {
            suite: self.suite.to_string(),
            figure: self.figure.to_string(),
            name: self.name.to_string(),
            measured,
            paper: self.paper,
            paper_note: self.paper_note.to_string(),
            goal: self.goal,
            verdict: Outcome::judge(measured, self.goal),
            detail: if detail.is_empty() {
                format!("target from {}", self.source)
            } else {
                format!("{detail}; target from {}", self.source)
            },
            // A counter of one row is a count; everything else a ratio.
            unit: match self.how {
                How::Value { .. } => "",
                _ => "×",
            },
        }
    }
}

/// Every claim computed from `rows`: [`CLAIMS`], then the `ptm` suite's
/// targets, the `server` suite's, the redb workload's and the long run's.
pub fn evaluate(rows: &[Row]) -> Vec<Outcome> {
    let mut out: Vec<Outcome> = CLAIMS.iter().map(|c| c.evaluate(rows)).collect();
    out.extend(
        crate::ptm_suite::summarize(rows)
            .into_iter()
            .map(Outcome::from),
    );
    out.extend(crate::server_suite::summarize(rows));
    out.extend(crate::engine_suite::redb_bench::summarize(rows));
    out.extend(crate::engine_suite::long_run::summarize(rows));
    out
}

impl From<crate::ptm_suite::Target> for Outcome {
    fn from(t: crate::ptm_suite::Target) -> Outcome {
        use crate::ptm_suite::Verdict as V;
        Outcome {
            suite: crate::ptm_suite::SUITE.to_string(),
            figure: t.figure.to_string(),
            name: t.name,
            measured: t.ratio,
            paper: None,
            paper_note: t.paper.to_string(),
            goal: match (t.goal, t.band) {
                (Some(g), _) => Goal::AtLeast(g),
                (None, Some((lo, hi))) => Goal::Within(lo, hi),
                (None, None) => Goal::Stated,
            },
            verdict: match t.verdict {
                V::Met => Verdict::Met,
                V::Missed => Verdict::Missed,
                V::Info => Verdict::Info,
                V::NotMeasured => Verdict::NotRun,
            },
            detail: t.detail,
            unit: "×",
        }
    }
}

/// A value as the summary prints it: `2.91×`, `-` when absent.
pub fn show(v: Option<f64>) -> String {
    match v {
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}×"),
        Some(v) => format!("{v:.2}×"),
        None => "-".into(),
    }
}

/// The outcomes as text lines: verdict, figure, name, measured value,
/// paper value, target; the detail on the next line when `detail`.
pub fn format_outcomes(outcomes: &[Outcome], detail: bool) -> String {
    let mut out = String::new();
    for o in outcomes {
        let paper = match (o.paper, o.paper_note.is_empty()) {
            (Some(p), _) => format!("paper {} ({})", o.show(Some(p)), o.paper_note),
            (None, false) => format!("paper: {}", o.paper_note),
            (None, true) => "paper: -".into(),
        };
        let _ = writeln!(
            out,
            "  [{:<7}] {:<14} {:<48} {:>8}  target {:<9} {paper}",
            o.verdict.name(),
            o.figure,
            o.name,
            o.show(o.measured),
            o.goal.describe(),
        );
        if detail && !o.detail.is_empty() {
            let _ = writeln!(out, "{:>24}{}", "", o.detail);
        }
    }
    out
}

/// The summary `ferrite bench` ends with: every claim, one line each,
/// and a count of verdicts.
pub fn format_summary(rows: &[Row]) -> String {
    // Claims of suites with no row in this run are counted, not listed:
    // after `ferrite bench server`, forty `not run` lines would bury the
    // server's own.
    let ran: std::collections::HashSet<&str> = rows.iter().map(|r| r.suite.as_str()).collect();
    let (outcomes, absent): (Vec<Outcome>, Vec<Outcome>) = evaluate(rows)
        .into_iter()
        .partition(|o| ran.contains(o.suite.as_str()));
    let count = |v: Verdict| outcomes.iter().filter(|o| o.verdict == v).count();
    let mut out = format!(
        "\nheadline claims ({} met, {} missed, {} stated, {} not run; measured ÷ paper where the paper states a value)\n",
        count(Verdict::Met),
        count(Verdict::Missed),
        count(Verdict::Info),
        count(Verdict::NotRun),
    );
    out.push_str(&format_outcomes(&outcomes, false));
    if !absent.is_empty() {
        out.push_str(&format!(
            "  ({} claims of suites that did not run are left out)\n",
            absent.len()
        ));
    }
    out
}

/// Prints [`format_summary`] on stdout.
pub fn print_summary(rows: &[Row]) {
    print!("{}", format_summary(rows));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(suite: &str, variant: &str, params: serde_json::Value, ops_per_s: f64) -> Row {
        let mut r = Row::empty(suite, variant, params);
        r.ops_per_s = ops_per_s;
        r.ns_per_op = 1e9 / ops_per_s;
        r.fences_per_op = 1.0;
        r
    }

    #[test]
    fn throughput_claim_is_a_ratio_of_the_picked_rows() {
        let c = CLAIMS
            .iter()
            .find(|c| c.name == "poplog-padded ÷ pmdk-pmemlog, 64 B")
            .unwrap();
        let rows = vec![
            row("log", "poplog-padded", json!({"bytes": 256}), 9.0),
            row("log", "poplog-padded", json!({"bytes": 64}), 6.0),
            row("log", "pmdk-pmemlog", json!({"bytes": 64}), 2.0),
        ];
        let o = c.evaluate(&rows);
        assert_eq!(o.measured, Some(3.0));
        assert_eq!(o.verdict, Verdict::Met);
        let slow = vec![
            rows[1].clone(),
            row("log", "pmdk-pmemlog", json!({"bytes": 64}), 4.0),
        ];
        assert_eq!(c.evaluate(&slow).verdict, Verdict::Missed);
        // Without the PMDK row the claim is not run, never a guess.
        assert_eq!(c.evaluate(&rows[..2]).verdict, Verdict::NotRun);
    }

    #[test]
    fn several_variants_take_the_best_and_skipped_rows_do_not_count() {
        let c = CLAIMS
            .iter()
            .find(|c| c.name == "best engine ÷ lmdb, p2-f (R50/U50)")
            .unwrap();
        let p = |v: &str| json!({"workload": "p2-f", "allocator": v, "domain": "adr"});
        let mut skipped = row("engine", "lsm", p("ferrite"), 100.0);
        skipped.set_extra("skipped", "not built");
        let rows = vec![
            row("engine", "inp", p("ferrite"), 3.0),
            row("engine", "cow", p("ferrite"), 5.0),
            row("engine", "cow", p("nstore-lock"), 50.0),
            skipped,
            row(
                "engine",
                "lmdb",
                json!({"workload": "p2-f", "allocator": "lmdb", "domain": "tmpfs"}),
                2.0,
            ),
        ];
        let o = c.evaluate(&rows);
        assert_eq!(o.measured, Some(2.5));
        assert!(o.detail.contains("cow vs lmdb"), "{}", o.detail);
    }

    #[test]
    fn goals_and_values() {
        assert_eq!(Goal::AtLeast(2.0).holds(2.0), Some(true));
        assert_eq!(Goal::AtMost(1.3).holds(1.31), Some(false));
        assert_eq!(Goal::Within(1.0, 1.0).holds(1.0), Some(true));
        assert_eq!(Goal::Stated.holds(1.0), None);
        assert_eq!(Goal::AtLeast(2.5).describe(), "≥ 2.5");
        assert_eq!(Goal::Within(1.0, 1.0).describe(), "= 1");
        let c = CLAIMS
            .iter()
            .find(|c| c.name == "poplog-padded fences per append")
            .unwrap();
        let mut r = row("log", "poplog-padded", json!({"bytes": 64}), 1.0);
        assert_eq!(c.evaluate(std::slice::from_ref(&r)).verdict, Verdict::Met);
        r.fences_per_op = 2.0;
        assert_eq!(
            c.evaluate(std::slice::from_ref(&r)).verdict,
            Verdict::Missed
        );
        // A peer whose counters are not observed has no fence count.
        r.counters_observed = false;
        assert_eq!(c.evaluate(&[r]).verdict, Verdict::NotRun);
    }

    #[test]
    fn summary_lists_the_claims_of_the_suites_that_ran_and_counts_the_rest() {
        // One row of the log suite: every log claim is listed (those its
        // rows cannot compute as `not run`), the others only counted.
        let rows = vec![row("log", "poplog-padded", json!({"bytes": 64}), 6.0)];
        let text = format_summary(&rows);
        let (log, other): (Vec<&Claim>, Vec<&Claim>) =
            CLAIMS.iter().partition(|c| c.suite == "log");
        assert!(!log.is_empty() && !other.is_empty());
        for c in &log {
            assert!(text.contains(c.name), "{} missing:\n{text}", c.name);
        }
        for c in &other {
            assert!(
                !text.contains(&format!(" {} ", c.name)),
                "{} listed:\n{text}",
                c.name
            );
        }
        assert!(text.contains("[not run]"));
        let absent = evaluate(&rows).iter().filter(|o| o.suite != "log").count();
        assert!(
            text.contains(&format!(
                "({absent} claims of suites that did not run are left out)"
            )),
            "{text}"
        );
    }

    #[test]
    fn sim_claims_read_the_average_row_and_the_sweep() {
        let mut avg = Row::empty(
            "sim",
            "fine-grained",
            json!({"workload": "average", "sweep": "main", "cores": 16, "commit_every": 1}),
        );
        avg.threads = 16;
        avg.set_extra("ipc_ratio", 1.5);
        avg.set_extra("commit_cycles_ratio", 0.5);
        avg.set_extra("sync_reads_ratio", 3.0);
        let sweep = |v: &str, ops: f64| {
            let mut r = row(
                "sim",
                v,
                json!({"workload": "synthetic", "sweep": "commit-frequency", "commit_every": 100}),
                ops,
            );
            r.threads = 16;
            r
        };
        let rows = vec![avg, sweep("global", 2.0), sweep("fine-grained", 2.2)];
        let get = |name: &str| {
            CLAIMS
                .iter()
                .find(|c| c.name == name)
                .unwrap()
                .evaluate(&rows)
        };
        let ipc = get("fine-grained ÷ global IPC, mean over workloads, 16 cores");
        assert_eq!((ipc.measured, ipc.verdict), (Some(1.5), Verdict::Met));
        let lat = get("fine-grained ÷ global commit latency, mean over workloads");
        assert_eq!((lat.measured, lat.verdict), (Some(0.5), Verdict::Met));
        let syn = get("fine-grained ÷ global credit-sync reads, mean over workloads");
        assert_eq!(syn.measured, Some(3.0));
        let f10 = get("fine-grained ÷ global IPC, commit every 100 updates");
        assert!((f10.measured.unwrap() - 1.1).abs() < 1e-9);
        // The every-update point is not in these rows.
        let f1 = get("fine-grained ÷ global IPC, commit every update");
        assert_eq!(f1.verdict, Verdict::NotRun);
    }
}
