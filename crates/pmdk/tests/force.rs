//! When libpmem reads `PMEM_IS_PMEM_FORCE`.
//!
//! libpmem decides once per process, so each case runs in a fresh child
//! process: this test binary re-executes itself with `CHILD_VAR` naming the
//! case and the environment set up for it.
#![cfg(feature = "link")]

use std::process::Command;

use ferrite_pmdk::{PMEM_IS_PMEM_FORCE, PmemLog, PmemMap, SHM_DIR, force_pmem, pmem_forced};

const CHILD_VAR: &str = "FERRITE_PMDK_FORCE_CASE";
const TEST_NAME: &str = "pmem_is_pmem_force_is_read_lazily_once";

#[test]
fn pmem_is_pmem_force_is_read_lazily_once() {
    if let Ok(case) = std::env::var(CHILD_VAR) {
        child(&case);
        return;
    }
    // (case, value of PMEM_IS_PMEM_FORCE at exec, or None for unset)
    let cases = [
        ("set_before_first_use", None),
        ("set_after_first_use", None),
        ("exported", Some("1")),
        ("exported_off", Some("0")),
    ];
    for (case, value) in cases {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD_VAR, case);
        match value {
            Some(v) => cmd.env(PMEM_IS_PMEM_FORCE, v),
            None => cmd.env_remove(PMEM_IS_PMEM_FORCE),
        };
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "case {case} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn child(case: &str) {
    match case {
        // Not in the environment at exec; set from Rust before libpmem's
        // first pmem_is_pmem: honoured, because libpmem reads it lazily.
        "set_before_first_use" => {
            // SAFETY: this child runs only this test, on one test thread,
            // and nothing else touches the environment meanwhile.
            assert!(
                unsafe { force_pmem() },
                "setenv before first use must take effect"
            );
            let dir = tempfile::tempdir_in(SHM_DIR).unwrap();
            let map = PmemMap::create(&dir.path().join("map"), 1 << 20).unwrap();
            assert!(map.is_pmem());
            // And pools take the flush path too (append still works).
            let mut log =
                PmemLog::create(&dir.path().join("log"), PmemLog::min_pool_size()).unwrap();
            log.append(b"forced").unwrap();
        }
        // A pool is created first: libpmem has decided "detect", and setting
        // the variable afterwards changes nothing.
        "set_after_first_use" => {
            let dir = tempfile::tempdir_in(SHM_DIR).unwrap();
            drop(PmemLog::create(&dir.path().join("log"), PmemLog::min_pool_size()).unwrap());
            // SAFETY: as above.
            assert!(
                !unsafe { force_pmem() },
                "setenv after first use must be ignored"
            );
            assert_eq!(std::env::var(PMEM_IS_PMEM_FORCE).as_deref(), Ok("1"));
            assert!(
                !PmemMap::create(&dir.path().join("map"), 1 << 20)
                    .unwrap()
                    .is_pmem()
            );
        }
        "exported" => assert!(pmem_forced()),
        "exported_off" => assert!(!pmem_forced()),
        other => panic!("unknown case {other}"),
    }
}
