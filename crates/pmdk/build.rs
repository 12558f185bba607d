//! Build script for `ferrite-pmdk`.
//!
//! Does nothing unless the `link` feature is on, so the crate builds on
//! machines without PMDK. With `link`, it compiles `csrc/shim.c`,
//! `csrc/txbtree.c` and `csrc/txbytemap.c` (the code that has to be C
//! because PMDK's transaction macros use `setjmp`) and links the four PMDK 1.12 libraries.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    for f in [
        "csrc/shim.c",
        "csrc/txbtree.c",
        "csrc/txbytemap.c",
        "csrc/count.c",
        "csrc/ferrite_pmdk.h",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }

    if std::env::var_os("CARGO_FEATURE_LINK").is_none() {
        return;
    }

    let mut build = cc::Build::new();
    build
        .file("csrc/shim.c")
        .file("csrc/txbtree.c")
        .file("csrc/txbytemap.c");
    // Feature `count`: interpose libpmem's persistence calls to count
    // PMDK's own flushes and fences (csrc/count.c explains how).
    if std::env::var_os("CARGO_FEATURE_COUNT").is_some() {
        build.file("csrc/count.c");
        println!("cargo:rustc-link-lib=dylib=dl");
    }
    build
        .warnings(true)
        .extra_warnings(true)
        .flag_if_supported("-std=gnu11")
        .compile("ferrite_pmdk_shim");

    // The shim is a static library that refers to PMDK symbols, so the
    // shared libraries must come after it on the link line; cc already
    // emitted the shim's own directive above.
    for lib in ["pmemobj", "pmemblk", "pmemlog", "pmem"] {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
}
