//! Build script for `ferrite-bench`.
//!
//! Does nothing unless the `rocksdb` feature is on, so the crate builds on
//! machines without RocksDB. With it, links the system's shared
//! `librocksdb` (Debian: `librocksdb-dev`), which `src/rocksdb.rs` calls
//! through RocksDB's C API; nothing of RocksDB is compiled here.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_ROCKSDB").is_some() {
        println!("cargo:rustc-link-lib=dylib=rocksdb");
    }
}
