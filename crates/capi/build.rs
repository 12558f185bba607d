//! Writes `ferrite.pc` next to the libraries (`target/<profile>/pkgconfig/`),
//! so that `PKG_CONFIG_PATH=target/<profile>/pkgconfig pkg-config --cflags
//! --libs ferrite` works from the build tree.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    // OUT_DIR is target/<profile>/build/ferrite-capi-<hash>/out (or
    // target/<triple>/<profile>/…). Cargo writes libferrite.so and .a to
    // target/<profile>/deps on every build of the crate (also when it is
    // built for its tests or examples), and copies them up to
    // target/<profile> only on a `cargo build` of the library itself: the
    // .pc points at deps/, which always has them.
    let Some(profile) = out.ancestors().nth(3) else {
        return;
    };
    let libdir = profile.join("deps");
    let include = manifest.join("../../include");
    let include = include.canonicalize().unwrap_or(include);
    let pc = format!(
        "prefix={root}\n\
         includedir={inc}\n\
         libdir={lib}\n\
         \n\
         Name: ferrite\n\
         Description: Ferrite crash-consistent persistent-memory key-value store (C API)\n\
         Version: {ver}\n\
         Cflags: -I${{includedir}}\n\
         Libs: -L${{libdir}} -Wl,-rpath,${{libdir}} -lferrite\n\
         Libs.private: -lpthread -ldl -lm\n",
        root = manifest.display(),
        inc = include.display(),
        lib = libdir.display(),
        ver = std::env::var("CARGO_PKG_VERSION").unwrap_or_default(),
    );
    let dir = profile.join("pkgconfig");
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join("ferrite.pc"), pc);
    }
}
