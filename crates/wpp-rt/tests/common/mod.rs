//! What the integration tests share.

pub mod campaign;

use std::path::PathBuf;

/// The runtime library this test run built: testing this package builds
/// its library, and target/<profile>/ holds it, beside the test binary's
/// deps/.
pub fn runtime_lib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    ferrite_wpp::find_runtime(exe.parent().unwrap()).unwrap_or_else(|| {
        panic!(
            "{} not built beside {}",
            ferrite_wpp::RUNTIME_LIB,
            exe.display()
        )
    })
}
