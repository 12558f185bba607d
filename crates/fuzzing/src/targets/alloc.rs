//! `ferrite-alloc`: the Ferrite heap and the lock heap, opened (recovered)
//! from the pool's data area.

use super::{reopen, run_image};
use crate::image::{Bases, Recipe, build};
use ferrite_alloc::heap::{Heap, HeapOptions};
use ferrite_alloc::lock::{LockHeap, LockOptions};
use ferrite_alloc::verify::allocated;
use ferrite_alloc::{AllocError, PAllocator};
use ferrite_pmem::{POff, Pool, Region};
use std::sync::OnceLock;

const LAYOUT: &str = "fuzz-heap";
const SIZE: u64 = 512 << 10;
const NONCE: u64 = crate::image::NONCES[1];
const CRASHES: &[u64] = &[250, 500, 800];

fn open_heap(config: usize, r: Region) -> Result<Box<dyn PAllocator>, AllocError> {
    Ok(match config {
        0 => Box::new(Heap::open(r)?),
        _ => Box::new(LockHeap::open(r)?),
    })
}

pub(crate) fn bases() -> &'static Bases {
    static B: OnceLock<Bases> = OnceLock::new();
    B.get_or_init(|| {
        let mut images = Vec::new();
        for config in 0..2usize {
            let setup = move |p: &Pool| match config {
                0 => drop(
                    Heap::create(p.data(), HeapOptions::default().lanes(2).nonce(NONCE))
                        .expect("create heap"),
                ),
                _ => drop(
                    LockHeap::create(
                        p.data(),
                        LockOptions {
                            nonce: Some(NONCE),
                            ..LockOptions::default()
                        },
                    )
                    .expect("create lock heap"),
                ),
            };
            let work = move |p: &Pool| {
                let h = open_heap(config, p.data()).expect("open heap");
                let mut th = h.thread().expect("attach");
                th.root(64).expect("root");
                let mut live = Vec::new();
                for (k, size) in [16usize, 100, 1000, 5000, 40_000, 24, 300, 70_000]
                    .into_iter()
                    .enumerate()
                {
                    live.push(th.alloc(size, None).expect("alloc"));
                    if k % 3 == 2 {
                        let off = live.remove(0);
                        th.free(off, None).expect("free");
                    }
                }
            };
            images.extend(build(
                &Recipe {
                    layout: LAYOUT,
                    size: SIZE,
                    setup: &setup,
                    work: &work,
                    crashes: CRASHES,
                },
                config,
            ));
        }
        Bases::new(LAYOUT, images)
    })
}

/// `Heap::open` / `LockHeap::open` on a patched heap (the base image picks
/// which). Checks: published blocks lie inside the heap's region and do not
/// overlap, the accounting does not claim more than the capacity, a second
/// open of what the first left finds the same blocks, and (option bit 0)
/// allocating and freeing work or fail with an error.
pub fn heap(data: &[u8]) {
    let b = bases();
    run_image(b, data, |pool, config, options| {
        let r = pool.data();
        let (lo, hi) = (r.base() as u64, (r.base() + r.len()) as u64);
        let Ok(h) = open_heap(config, r) else {
            return;
        };
        let blocks = allocated(h.as_ref());
        let mut end = lo;
        for (&off, &size) in &blocks {
            assert!(
                off >= end && off.checked_add(size).is_some_and(|e| e <= hi),
                "block {off:#x}+{size} overlaps the previous one (ending {end:#x}) or leaves the heap {lo:#x}..{hi:#x}"
            );
            end = off + size;
        }
        let st = h.stats();
        assert!(
            st.in_use <= st.capacity,
            "in use {} > capacity {}",
            st.in_use,
            st.capacity
        );
        let again = open_heap(config, reopen(pool, b.layout).data()).expect("open is idempotent");
        assert_eq!(blocks, allocated(again.as_ref()), "a second open differs");
        drop(again);
        if options & 1 == 1
            && let Ok(mut th) = h.thread()
        {
            if let Ok(off) = th.alloc(200, None) {
                let _ = th.free(off, None);
            }
            if let Some((&off, _)) = blocks.first_key_value() {
                let _ = th.free(POff::new(off), None);
            }
        }
    });
}
