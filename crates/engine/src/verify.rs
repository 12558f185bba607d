//! Read-only verification of a store for `ferrite pool check --deep`.
//!
//! [`verify_image`] is handed the bytes of a pool of layout
//! [`crate::LAYOUT`] and never writes to the pool they came
//! from: everything runs on in-memory copies, so the engine's and the
//! allocator's own recovery can run to learn what they would do.
//!
//! 1. The superblock is decoded ([`Superblock::decode`]: magic, version,
//!    checksum, areas in bounds).
//! 2. On one copy, the heap alone is opened (its own open validates every
//!    piece of its metadata) and its allocated blocks are listed, *before*
//!    the engine's recovery runs: that recovery may free blocks it finds
//!    unreferenced (the CoW engine does), which would hide a leak.
//! 3. On a second copy, the store is opened (allocator recovery, then the
//!    engine's: log replay, torn-switch rollback), quiesced and walked
//!    ([`Store::walk`]: every node's checksum, key order, every referenced
//!    block).
//! 4. The walk's blocks are compared with the allocator's after recovery
//!    (a reference to a free block, a block referenced twice or too small),
//!    and the blocks allocated on the media with those the walk reaches
//!    (leaks), with [`ferrite_alloc::verify::compare`].
//!
//! What recovery reported doing (log records replayed, a switch rolled
//! back, lane records replayed) is a finding too: a cleanly closed store
//! needs none of it.

use crate::{AllocKind, Damage, EngineError, EngineKind, LAYOUT, Store, StoreOptions, Superblock};
use ferrite_alloc::verify::{self as av, HeapFinding};
use ferrite_alloc::{Heap, LockHeap, PAllocator};
use ferrite_pmem::{Domain, HEADER_SIZE, Pool, PoolOptions};
use std::collections::BTreeMap;

/// One thing wrong with a store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EngineFinding {
    /// The superblock does not decode (not a store, checksum, bounds).
    Superblock(String),
    /// The engine's open refuses the store (corrupt fixed area, log or
    /// tree found by its recovery).
    Refused(String),
    /// The engine's recovery would act: the store was not closed cleanly.
    Recovery {
        /// How many 64-byte lines of the pool recovery changes.
        lines: usize,
        /// Recovery's one-line account of what it did.
        detail: String,
    },
    /// The walk of the recovered store fails (a node's checksum, order).
    Walk(String),
    /// One damaged record or node, as the engine's scrub lists them
    /// ([`crate::Engine::scrub`]): its key when it can be trusted, its
    /// offset, and for a node the keys lost with it.
    Damaged(Damage),
    /// The allocator holding the store's blocks.
    Heap(HeapFinding),
}

impl EngineFinding {
    /// The part of the pool the finding is about: `engine` or `heap`.
    pub fn component(&self) -> &'static str {
        match self {
            EngineFinding::Heap(_) => "heap",
            _ => "engine",
        }
    }

    /// A short name of the kind of problem.
    pub fn kind(&self) -> &'static str {
        match self {
            EngineFinding::Superblock(_) => "engine-superblock",
            EngineFinding::Refused(_) => "engine-refused",
            EngineFinding::Recovery { .. } => "engine-recovery",
            EngineFinding::Walk(_) => "engine-walk",
            EngineFinding::Damaged(_) => "engine-damaged",
            EngineFinding::Heap(h) => h.kind(),
        }
    }
}

impl std::fmt::Display for EngineFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineFinding::Superblock(e) => write!(f, "superblock: {e}"),
            EngineFinding::Refused(e) => write!(f, "does not open: {e}"),
            EngineFinding::Recovery { lines, detail } => write!(
                f,
                "not closed cleanly: recovery would change {lines} cache line{} ({detail})",
                if *lines == 1 { "" } else { "s" }
            ),
            EngineFinding::Walk(e) => write!(f, "walk: {e}"),
            EngineFinding::Damaged(d) => write!(f, "damaged record: {d}"),
            EngineFinding::Heap(h) => h.fmt(f),
        }
    }
}

/// What [`verify_image`] found.
#[derive(Clone, Debug, Default)]
pub struct EngineCheck {
    /// The superblock, when it decoded.
    pub superblock: Option<Superblock>,
    /// Everything found wrong; empty for a sound, cleanly closed store.
    pub findings: Vec<EngineFinding>,
    /// Live keys the walk found (when it ran).
    pub keys: u64,
    /// Blocks the walk found referenced (when it ran).
    pub blocks: usize,
    /// Blocks allocated on the media (before recovery).
    pub allocated: usize,
    /// What the engine's recovery said it did (its one-line detail).
    pub recovery: String,
}

fn copy(image: &[u8], layout: &str) -> Result<Pool, String> {
    Pool::open_image(image, &PoolOptions::new(layout, 0), Domain::Volatile, None)
        .map_err(|e| e.to_string())
}

/// Opens the heap of the store described by `sb` alone, on its own copy:
/// its recovery report and its allocated blocks as the media has them.
fn heap_before(
    image: &[u8],
    layout: &str,
    sb: &Superblock,
) -> Result<(ferrite_alloc::RecoveryReport, BTreeMap<u64, u64>), String> {
    let pool = copy(image, layout)?;
    let region = pool
        .data()
        .sub(sb.heap_off as usize, sb.heap_len as usize)
        .map_err(|e| e.to_string())?;
    let heap: Box<dyn PAllocator> = match sb.allocator {
        AllocKind::Ferrite => Box::new(Heap::open(region).map_err(|e| e.to_string())?),
        AllocKind::Lock => Box::new(LockHeap::open(region).map_err(|e| e.to_string())?),
        AllocKind::Pmdk => return Err("the store is on PMDK's allocator".into()),
    };
    Ok((heap.recovery().clone(), av::allocated(&*heap)))
}

/// Verifies the store in the pool image `image` (a whole pool file,
/// header included, of layout `layout`). Never panics on any input and
/// never writes to `image`.
pub fn verify_image(image: &[u8], layout: &str) -> EngineCheck {
    let mut out = EngineCheck::default();
    // A growable pool's store spans its reservation, not just its image.
    let pool_len = match ferrite_pmem::Header::decode(image, image.len() as u64) {
        Ok(h) if h.growable() => h.max_size,
        _ => image.len() as u64,
    };
    let data_len = pool_len.saturating_sub(HEADER_SIZE as u64);
    let raw = image.get(HEADER_SIZE..HEADER_SIZE + 64).unwrap_or(&[]);
    let sb = match Superblock::decode(raw, data_len) {
        Ok(sb) => sb,
        Err(e) => {
            out.findings.push(EngineFinding::Superblock(e.to_string()));
            return out;
        }
    };
    out.superblock = Some(sb);
    if sb.heap_len == 0 {
        out.findings.push(EngineFinding::Superblock(
            "a store on an external allocator in a Ferrite pool".into(),
        ));
        return out;
    }
    let before = match heap_before(image, layout, &sb) {
        Ok((rec, alloc)) => {
            out.findings.extend(
                av::recovery_findings(&rec)
                    .into_iter()
                    .map(EngineFinding::Heap),
            );
            alloc
        }
        Err(e) => {
            out.findings
                .push(EngineFinding::Heap(HeapFinding::Refused(e)));
            return out;
        }
    };
    out.allocated = before.len();
    let pool = match copy(image, layout) {
        Ok(p) => p,
        Err(e) => {
            out.findings.push(EngineFinding::Refused(e));
            return out;
        }
    };
    let store = match Store::open(&pool, &StoreOptions::default()) {
        Ok(s) => s,
        Err(EngineError::Alloc(e)) => {
            out.findings.push(EngineFinding::Heap(av::refused(&e)));
            return out;
        }
        Err(e) => {
            out.findings.push(EngineFinding::Refused(e.to_string()));
            return out;
        }
    };
    let rec = store.recovery();
    out.recovery = rec.detail.clone();
    // The InP engine replays its newest records on every open (they are
    // idempotent and a clean close does not retire them), so what counts
    // is whether recovery changed any byte of the pool.
    let lines = changed_lines(image, &pool, sb.engine);
    if lines > 0 {
        out.findings.push(EngineFinding::Recovery {
            lines,
            detail: rec.detail.clone(),
        });
    }
    if let Err(e) = store.quiesce() {
        out.findings.push(EngineFinding::Walk(e.to_string()));
        return out;
    }
    // Every record's checksum: each engine's scrub lists every damaged
    // record (InP, CoW) or data block (LSM, with the keys it holds) and
    // goes on past it; an engine without its own scrub falls back on the
    // walk below, which stops at the first.
    match store.scrub(&mut |_| {}) {
        Ok(s) if s.per_record && !s.damaged.is_empty() => {
            out.keys = s.records;
            out.findings
                .extend(s.damaged.into_iter().map(EngineFinding::Damaged));
            return out;
        }
        Ok(_) => {}
        Err(e) => {
            out.findings.push(EngineFinding::Walk(e.to_string()));
            return out;
        }
    }
    let walk = match store.walk() {
        Ok(w) => w,
        Err(e) => {
            out.findings.push(EngineFinding::Walk(e.to_string()));
            return out;
        }
    };
    out.keys = walk.entries.len() as u64;
    out.blocks = walk.blocks.len();
    if let Some(w) = walk.entries.windows(2).find(|w| w[0].0 >= w[1].0) {
        out.findings.push(EngineFinding::Walk(format!(
            "keys out of order or duplicated at {:?}",
            String::from_utf8_lossy(&w[1].0)
        )));
    }
    let after = av::allocated(store.allocator());
    // References against the allocator as recovery leaves it (recovery
    // may allocate, e.g. a new switch record). Leaks: blocks allocated on
    // the media that recovery keeps allocated and the walk does not
    // reach. (Blocks recovery frees — an uncommitted transaction's, the
    // CoW engine's orphans — are its business: the recovery finding
    // above counts the lines that changes.) Taking them from the heap
    // opened alone, before the engine's recovery, keeps a leak visible
    // even when recovery would allocate and reference the same block.
    let reached: std::collections::BTreeSet<u64> = walk.blocks.iter().map(|b| b.0).collect();
    let mut findings: Vec<HeapFinding> = av::compare(&after, &walk.blocks)
        .into_iter()
        .filter(|f| !matches!(f, HeapFinding::Leak { .. }))
        .collect();
    findings.extend(
        before
            .iter()
            .filter(|(off, _)| after.contains_key(off) && !reached.contains(off))
            .map(|(&off, &size)| HeapFinding::Leak { off, size }),
    );
    out.findings
        .extend(findings.into_iter().map(EngineFinding::Heap));
    out
}

/// How many 64-byte lines of `pool` differ from `image`, leaving out the
/// InP log headers' retired word, which every InP open rewrites. Reads
/// the pool a chunk at a time, so a large pool is not copied again.
fn changed_lines(image: &[u8], pool: &Pool, kind: EngineKind) -> usize {
    const CHUNK: usize = 1 << 20;
    let map = pool.medium().map();
    let len = image.len().min(map.len());
    let mut buf = vec![0u8; CHUNK];
    let mut n = 0;
    for start in (0..len).step_by(CHUNK) {
        let end = (start + CHUNK).min(len);
        let now = &mut buf[..end - start];
        map.read(start, now);
        n += image[start..end]
            .chunks(64)
            .zip(now.chunks(64))
            .filter(|(x, y)| {
                x != y && !(kind == EngineKind::Inp && crate::inp::only_retired_changed(x, y))
            })
            .count();
    }
    n
}

/// True when the pool holds a store: its layout is [`LAYOUT`] or its data
/// area starts with the store superblock's magic.
pub fn recognise(image: &[u8], layout: &str) -> bool {
    layout == LAYOUT
        || image
            .get(HEADER_SIZE..HEADER_SIZE + 8)
            .is_some_and(|m| m == b"FRTENGN1")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(kind: EngineKind, alloc: AllocKind) -> (Pool, Vec<u8>) {
        let pool = Pool::create_in_memory(&PoolOptions::new(LAYOUT, 8 << 20)).unwrap();
        {
            let store = Store::create(&pool, &StoreOptions::new(kind).allocator(alloc)).unwrap();
            let mut s = store.session().unwrap();
            for i in 0..200u32 {
                s.put(format!("key{i:04}").as_bytes(), &[i as u8; 40])
                    .unwrap();
            }
            drop(s);
            store.close().unwrap();
        }
        let img = pool.image();
        (pool, img)
    }

    #[test]
    fn clean_stores_verify_clean_and_a_leak_is_found() {
        for kind in EngineKind::ALL {
            for alloc in AllocKind::ALL {
                let (pool, img) = image(kind, alloc);
                let c = verify_image(&img, LAYOUT);
                assert!(c.findings.is_empty(), "{kind}/{alloc}: {:?}", c.findings);
                assert_eq!(c.keys, 200, "{kind}/{alloc}");
                // Leak one block: allocated, never linked.
                let store = Store::open(&pool, &StoreOptions::new(kind)).unwrap();
                let off = {
                    let mut t = store.allocator().thread().unwrap();
                    t.alloc(48, None).unwrap()
                };
                drop(store);
                let c = verify_image(&pool.image(), LAYOUT);
                assert!(
                    c.findings.contains(&EngineFinding::Heap(HeapFinding::Leak {
                        off: off.raw(),
                        size: c
                            .findings
                            .iter()
                            .find_map(|f| match f {
                                EngineFinding::Heap(HeapFinding::Leak { off: o, size })
                                    if *o == off.raw() =>
                                    Some(*size),
                                _ => None,
                            })
                            .unwrap_or(0)
                    })) && c
                        .findings
                        .iter()
                        .any(|f| f.to_string().contains("unreachable")),
                    "{kind}/{alloc}: {:?}",
                    c.findings
                );
            }
        }
    }

    #[test]
    fn a_flipped_superblock_checksum_is_found() {
        let (_, mut img) = image(EngineKind::Cow, AllocKind::Ferrite);
        img[HEADER_SIZE + 60] ^= 1;
        let c = verify_image(&img, LAYOUT);
        assert!(
            matches!(&c.findings[..], [EngineFinding::Superblock(e)] if e.contains("checksum")),
            "{:?}",
            c.findings
        );
    }
}
