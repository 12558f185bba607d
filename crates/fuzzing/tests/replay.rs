//! Replays every corpus and regression input of every fuzz target without
//! libFuzzer: `fuzz/corpus/<target>/*` (the seeds and whatever a run added
//! and was committed) and `fuzz/regressions/<target>/*` (each crash a fuzzer
//! found, kept after its fix). A panic here is the bug the input found.

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn inputs(target: &str) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for sub in ["corpus", "regressions"] {
        if let Ok(rd) = std::fs::read_dir(fuzz_dir().join(sub).join(target)) {
            v.extend(
                rd.filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .filter(|p| p.is_file()),
            );
        }
    }
    v.sort();
    v
}

fn replay(name: &str) {
    let t = ferrite_fuzzing::target(name).expect("a known target");
    let files = inputs(name);
    assert!(
        !files.is_empty(),
        "no corpus for {name} under {}",
        fuzz_dir().display()
    );
    for f in &files {
        let data = std::fs::read(f).expect("read input");
        let r = std::panic::catch_unwind(|| (t.run)(&data));
        assert!(r.is_ok(), "{name}: input {} fails", f.display());
    }
}

macro_rules! replay_tests {
    ($($name:ident),*) => {$(
        #[test]
        fn $name() {
            replay(stringify!($name));
        }
    )*};
}

replay_tests!(
    pool_header,
    protocol,
    log,
    page_store,
    cells,
    fp_leaves,
    heap,
    tx_ds,
    bytemap,
    ptm,
    engine_inp,
    engine_cow,
    engine_lsm
);

/// Every target has a replay test above, and its seeds are in the repo.
#[test]
fn every_target_is_replayed() {
    let listed = [
        "pool_header",
        "protocol",
        "log",
        "page_store",
        "cells",
        "fp_leaves",
        "heap",
        "tx_ds",
        "bytemap",
        "ptm",
        "engine_inp",
        "engine_cow",
        "engine_lsm",
    ];
    for t in ferrite_fuzzing::TARGETS {
        assert!(listed.contains(&t.name), "{} has no replay test", t.name);
        for s in ferrite_fuzzing::seeds::seeds(t) {
            let f = fuzz_dir()
                .join("corpus")
                .join(t.name)
                .join(ferrite_fuzzing::seeds::file_name(&s));
            assert!(
                f.is_file(),
                "seed {} missing: run `cargo run -p ferrite-fuzzing --bin fuzz-seeds -- fuzz/corpus`",
                f.display()
            );
        }
    }
}
