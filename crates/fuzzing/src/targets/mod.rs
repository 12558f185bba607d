//! The fuzz targets, one function per reader of untrusted bytes.
//!
//! Image targets share one shape ([`run_image`]): decode the input
//! ([`crate::patch`]), patch a copy of the chosen base image, open it as a
//! pool (an image the pool layer refuses ends the run: the header has its
//! own target), then hand the pool to the component's open/recovery and, if
//! that succeeds, to checks of what it promised.

pub mod alloc;
pub mod blocks;
pub mod bytemap;
pub mod engine;
pub mod pool;
pub mod protocol;
pub mod ptm;
pub mod tx;

use crate::image::{self, Bases};
use crate::patch::Input;
use ferrite_pmem::Pool;

/// Runs `body(pool, config, options)` on the patched image `data` selects.
pub(crate) fn run_image(bases: &Bases, data: &[u8], body: impl FnOnce(&Pool, usize, u8)) {
    let input = Input::decode(data);
    let (img, which) = input.apply(bases);
    let Some(pool) = image::open(&img, bases.layout) else {
        return;
    };
    body(&pool, bases.images[which].config, input.options);
}

/// A fresh pool from the same image bytes as `pool` holds now (for
/// "recovery is idempotent" checks: recover, then recover what that left).
pub(crate) fn reopen(pool: &Pool, layout: &str) -> Pool {
    image::open(&pool.image(), layout).expect("an image that opened once opens again")
}
