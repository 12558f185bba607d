//! Build script for `ferrite-pmdk`.
//!
//! Links PMDK when it is installed, so the default build of the workspace
//! has PMDK's rows wherever PMDK is, and still builds where it is not:
//!
//! - feature `link` on (`--features ferrite/pmdk`): link, as before; a
//!   missing PMDK is a build error.
//! - else the environment variable `FERRITE_PMDK`: `0` (or `off`) never
//!   links — how to build, test and run as on a machine without PMDK — and
//!   `1` (or `on`) always links;
//! - else detection: `pkg-config --exists libpmem libpmemobj libpmemblk
//!   libpmemlog` (Debian's `lib*-dev` packages install the `.pc` files), or,
//!   without pkg-config, a compile probe of the four headers.
//!
//! When it links, it compiles `csrc/shim.c`, `csrc/txbtree.c` and
//! `csrc/txbytemap.c` (the code that has to be C because PMDK's
//! transaction macros use `setjmp`), links the four PMDK 1.12 libraries,
//! turns on the crate's own `feature = "link"` cfg (the code behind it is
//! the binding), and tells the crates that depend on this one through the
//! `links` metadata `DEP_FERRITE_PMDK_LINKED=1`: the build scripts of
//! ferrite-bench, ferrite-server and ferrite then turn on their
//! `feature = "pmdk"` cfg. (A build script's cfg does not change Cargo's
//! feature resolution, which is why those crates depend on this one
//! unconditionally: without PMDK it is an empty crate.)

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

    println!("cargo:rerun-if-env-changed=FERRITE_PMDK");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");
    let link = if std::env::var_os("CARGO_FEATURE_LINK").is_some() {
        true
    } else {
        match std::env::var("FERRITE_PMDK").as_deref() {
            Ok("0" | "off") => false,
            Ok("1" | "on") => true,
            _ => pmdk_installed(),
        }
    };
    println!("cargo:linked={}", u8::from(link));
    if !link {
        return;
    }
    println!("cargo:rustc-cfg=feature=\"link\"");

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

/// Whether PMDK's four libraries and their headers are installed.
fn pmdk_installed() -> bool {
    const LIBS: [&str; 4] = ["libpmem", "libpmemobj", "libpmemblk", "libpmemlog"];
    match std::process::Command::new("pkg-config")
        .arg("--exists")
        .args(LIBS)
        .status()
    {
        Ok(s) => s.success(),
        // No pkg-config: do the headers compile?
        Err(_) => {
            let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
            let probe = out.join("pmdk_probe.c");
            let src = "#include <libpmem.h>\n#include <libpmemobj.h>\n\
                       #include <libpmemblk.h>\n#include <libpmemlog.h>\n\
                       int ferrite_pmdk_probe(void) { return 0; }\n";
            std::fs::write(&probe, src).is_ok()
                && cc::Build::new()
                    .file(&probe)
                    .cargo_metadata(false)
                    .cargo_warnings(false)
                    .try_compile("ferrite_pmdk_probe")
                    .is_ok()
        }
    }
}
