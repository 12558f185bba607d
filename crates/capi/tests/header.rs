//! include/ferrite.h is generated from the crate by cbindgen and committed;
//! this test regenerates it and fails when the committed file differs (run
//! with FERRITE_BLESS=1 to rewrite it).

use std::path::Path;

#[test]
fn committed_header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen parses crates/capi")
        .write(&mut generated);
    let header = dir.join("../../include/ferrite.h");
    if std::env::var_os("FERRITE_BLESS").is_some() {
        std::fs::write(&header, &generated).expect("write include/ferrite.h");
    }
    let committed = std::fs::read(&header).unwrap_or_default();
    assert!(
        committed == generated,
        "include/ferrite.h is not what crates/capi declares: regenerate it with \
         FERRITE_BLESS=1 cargo test -p ferrite-capi --test header"
    );
    let text = String::from_utf8(generated).expect("UTF-8");
    for name in [
        "typedef struct ferrite_store ferrite_store;",
        "int ferrite_store_open(const char *path, const char *options, ferrite_store **out);",
        "void ferrite_free(void *p);",
        "const char *ferrite_last_error(void);",
        "#define FERRITE_NOT_FOUND 1",
    ] {
        assert!(text.contains(name), "the header lacks `{name}`");
    }
}
