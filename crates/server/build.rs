//! Build script for `ferrite-server`: the `pmdk-undo` store where PMDK is installed.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    pmdk_cfg();
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
