//! The suite registry: every suite the CLI can run, by name.
//!
//! Adding a suite is one line in [`REGISTRY`]: a name, a one-line
//! description and a function `fn(&BenchCtx) -> Result<Vec<Row>, BenchError>`.

use crate::ctx::BenchCtx;
use crate::error::BenchError;
use crate::row::Row;
use std::sync::OnceLock;

/// What a suite is: it runs its experiments and yields rows.
pub type SuiteFn = fn(&BenchCtx) -> Result<Vec<Row>, BenchError>;

/// One registered suite.
#[derive(Clone, Copy, Debug)]
pub struct SuiteDef {
    pub name: &'static str,
    pub description: &'static str,
    pub run: SuiteFn,
}

/// Every suite, in the order `ferrite bench --list` shows them.
pub const REGISTRY: &[SuiteDef] = &[
    SuiteDef {
        name: "probe",
        description: "persist barriers (clwb/clflushopt/clflush/nt), fence batching, same-line and random persists, load latency, nt bandwidth [P0 §2]",
        run: crate::suites::probe::probe,
    },
    SuiteDef {
        name: "log",
        description: "log appends: Classic / Header (+dancing) / RAWL / PopLog x layouts x record sizes vs PMDK pmemlog_append and the floor [P0 §3.3, Fig. 8]",
        run: crate::suites::log::run,
    },
    SuiteDef {
        name: "page",
        description: "page propagation: CoW+pvn / micro-log / hybrid x dirty lines x threads vs PMDK pmemblk_write and the floor [P0 §3.2]",
        run: crate::suites::page::run,
    },
    SuiteDef {
        name: "cell",
        description: "failure-atomic cells: CoW / log / FAM x 16-64 B, updates, reads, dependent reads, seq and random [P0 §3.4, Fig. 10]",
        run: crate::suites::cell::run,
    },
    SuiteDef {
        name: "group",
        description: "FP-Tree leaf inserts and lookups interleaved in groups of 1..64 [P0 §3.5, Fig. 12]",
        run: crate::suites::group::run,
    },
    SuiteDef {
        name: "alloc",
        description: "persistent allocators: reserve+publish+free of 64 B-4 KiB and mixed sizes, 1-2 threads, vs pmemobj_alloc/free; recovery time [P2 §2.2]",
        run: crate::suites::alloc::run,
    },
    SuiteDef {
        name: "tx",
        description: "failure-atomic transactions: undo / redo / clobber x hashmap / B+tree / skiplist / rbtree, YCSB-load inserts, vs PMDK pmemobj tx [P1 ch3]",
        run: crate::suites::tx::run,
    },
    SuiteDef {
        name: "engine",
        description: "storage engines inp / cow / lsm x ferrite / nstore-lock heaps vs LMDB on /dev/shm: P2 mixes p2-a..h, variable tuples, TPC-C, 1-2 threads, adr/eadr, p50/p99/p99.9, recovery time [P2 §4]; redb's benchmark phases vs LMDB, redb, fjall; long-run single puts after a bulk load vs fresh [issue 26]",
        run: crate::suites::engine::run,
    },
    SuiteDef {
        name: "ptm",
        description: "persistent transactional memory: orec-eager / orec-lazy x adr / eadr / pdram / pdram-lite / volatile x TATP, TPC-C (hash, B+tree), B+tree, Vacation, 1-2 threads; fence removal; vs ferrite-tx and PMDK transactions; summary of the targets [P3]",
        run: crate::suites::ptm::run,
    },
    SuiteDef {
        name: "cache",
        description: "Persistron page cache under an LSM-shaped store vs the same store on a DRAM cache + write-ahead log at equal cost: YCSB load/a/b/c/d/f, 1-2 threads; DRAM tier, non-transactions, strict-2PL ablations [P1 ch5]",
        run: crate::suites::cache::run,
    },
    SuiteDef {
        name: "server",
        description: "ferrite serve (every store) vs Debian's memcached under memcaslap over loopback: P1 set/get mixes 95/5..5/95 (16 B keys, 64 B values), P3 50/50 (128 B / 1 KiB), p99; kill -9 survival vs memcached -e [issue 13]",
        run: crate::suites::server::run,
    },
    SuiteDef {
        name: "wpp",
        description: "whole-process persistence (ferrite run): Debian's memcached under it vs plain and vs ferrite serve tx-undo / tx-redo under memcaslap (P1 mixes); mmap / thread-create interposition costs; restart time vs process size [P1 ch4]",
        run: crate::suites::wpp::run,
    },
    SuiteDef {
        name: "sim",
        description: "memory-controller model fed by Ferrite's persist traces: global vs fine-grained committing (+ adr, eadr) x synthetic / log / tx-hashmap / engine-ycsb-a at 16 cores; commit-frequency, sub-queue, write-latency sweeps; Optane projection [P4]",
        run: crate::suites::sim::run,
    },
];

/// `(name, description)` of every registered suite.
pub fn suites() -> &'static [(&'static str, &'static str)] {
    static LIST: OnceLock<Vec<(&'static str, &'static str)>> = OnceLock::new();
    LIST.get_or_init(|| REGISTRY.iter().map(|s| (s.name, s.description)).collect())
}

/// Runs suite `name` and returns its rows (it neither prints nor writes
/// JSON: see [`crate::report`]). An unknown name is
/// [`BenchError::UnknownSuite`], listing the known ones.
pub fn run_suite(name: &str, ctx: &BenchCtx) -> Result<Vec<Row>, BenchError> {
    let def = REGISTRY
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| BenchError::UnknownSuite {
            name: name.to_string(),
            known: REGISTRY
                .iter()
                .map(|s| s.name)
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    (def.run)(ctx)
}
