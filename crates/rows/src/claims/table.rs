//! The static list of headline claims ([`CLAIMS`]), in figure order, each
//! with the paper's value and where its target comes from.

use super::{Claim, Field, Goal, How, Pick, pick};

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
