//! `ferrite-fuzzing`: the bodies of Ferrite's coverage-guided fuzz targets.
//!
//! Every function here takes the fuzzer's bytes and drives one reader of
//! untrusted input: the pool header, each component's open/recovery on a
//! pool image, and the server's protocol parser. The libFuzzer binaries in
//! `fuzz/fuzz_targets/` are one-line wrappers around them, and
//! `tests/replay.rs` runs every file of `fuzz/corpus/<target>/` and
//! `fuzz/regressions/<target>/` through them in a normal `cargo test`, so a
//! crash the fuzzer found stays a regression test without libFuzzer.
//!
//! # What counts as a bug
//!
//! A target panics (and libFuzzer reports a crash) when the code under test
//! panics, or when an open returns `Ok` on an image that breaks an
//! invariant the component documents and that is cheap to check (every
//! reader's own audit/walk is run after a successful open, and must answer
//! with an error, never a panic). Hangs are caught by libFuzzer's
//! `-timeout`. A corrupt image must give a typed error.
//!
//! # Structure-aware inputs
//!
//! Pool images are tens of kilobytes to megabytes, so the fuzz input is not
//! an image: it is a list of *patches* ([`patch`]) applied to one of a few
//! real base images built once per process ([`image`]) — a component
//! created and written with a few operations, cleanly closed or crashed
//! mid-operation by the crash simulator. Patches aim at the lines the
//! component actually wrote (its metadata), so most mutations land where a
//! reader looks.
//!
//! Base images are deterministic (fixed nonces and seeds, a normalised pool
//! header), so a corpus file means the same thing in every process.

#![forbid(unsafe_code)]

pub mod image;
pub mod patch;
pub mod seeds;
pub mod targets;

/// A fuzz target: its name (the directory of its corpus) and its body.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
    /// The base images of an image target (`None`: raw-byte target).
    pub bases: Option<fn() -> &'static image::Bases>,
}

/// Every target, in the order CI runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "pool_header",
        run: targets::pool::pool_header,
        bases: Some(targets::pool::bases),
    },
    Target {
        name: "protocol",
        run: targets::protocol::protocol,
        bases: None,
    },
    Target {
        name: "log",
        run: targets::blocks::log,
        bases: Some(targets::blocks::log_bases),
    },
    Target {
        name: "page_store",
        run: targets::blocks::page_store,
        bases: Some(targets::blocks::page_bases),
    },
    Target {
        name: "cells",
        run: targets::blocks::cells,
        bases: Some(targets::blocks::cell_bases),
    },
    Target {
        name: "fp_leaves",
        run: targets::blocks::fp_leaves,
        bases: Some(targets::blocks::leaves_bases),
    },
    Target {
        name: "heap",
        run: targets::alloc::heap,
        bases: Some(targets::alloc::bases),
    },
    Target {
        name: "tx_ds",
        run: targets::tx::tx_ds,
        bases: Some(targets::tx::bases),
    },
    Target {
        name: "bytemap",
        run: targets::bytemap::bytemap,
        bases: Some(targets::bytemap::bases),
    },
    Target {
        name: "ptm",
        run: targets::ptm::ptm,
        bases: Some(targets::ptm::bases),
    },
    Target {
        name: "engine_inp",
        run: targets::engine::engine_inp,
        bases: Some(targets::engine::bases_inp),
    },
    Target {
        name: "engine_cow",
        run: targets::engine::engine_cow,
        bases: Some(targets::engine::bases_cow),
    },
    Target {
        name: "engine_lsm",
        run: targets::engine::engine_lsm,
        bases: Some(targets::engine::bases_lsm),
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}
