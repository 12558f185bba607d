//! Build script for `ferrite-bench`.
//!
//! Does nothing unless the `rocksdb` feature is on, so the crate builds on
//! machines without RocksDB. With it, links the system's shared
//! `librocksdb` (Debian: `librocksdb-dev`), which `src/peers/rocksdb.rs` calls
//! through RocksDB's C API; nothing of RocksDB is compiled here.
//!
//! PMDK: the `pmdk` cfg is on wherever ferrite-pmdk linked PMDK
//! ([`pmdk_cfg`]), so the default build has the PMDK rows where PMDK is
//! installed.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    pmdk_cfg();
    if std::env::var_os("CARGO_FEATURE_ROCKSDB").is_some() {
        println!("cargo:rustc-link-lib=dylib=rocksdb");
    }
}

/// Turns on this crate's `feature = "pmdk"` cfg when ferrite-pmdk linked
/// PMDK (found installed, `FERRITE_PMDK=1`, or the feature asked for):
/// ferrite-pmdk's build.rs decides once for every crate and says so in
/// `DEP_FERRITE_PMDK_LINKED`. `FERRITE_PMDK=0` builds without PMDK.
fn pmdk_cfg() {
    if std::env::var("DEP_FERRITE_PMDK_LINKED").as_deref() == Ok("1") {
        println!("cargo:rustc-cfg=feature=\"pmdk\"");
    }
}
