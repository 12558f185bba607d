//! Read-only verification of a heap for `ferrite pool check --deep`.
//!
//! Two halves, because a heap alone cannot tell a leak from a live block:
//!
//! - [`open_copy`] opens a heap (Ferrite or lock heap) on a region the
//!   caller made from a *copy* of the pool (an in-memory image, so the
//!   heap's own recovery may write to it freely) and reports what that
//!   recovery did and which blocks are allocated. Every structural check
//!   is the heap's own open: [`crate::Heap::open`] validates the
//!   superblock, every header word and every bitmap bit, and the lock
//!   heap walks and checks every block header; the first problem is a
//!   [`HeapFinding::Refused`].
//! - [`compare`] takes the blocks the heap's user references (walked from
//!   its roots by the engine or data structure that owns them) and
//!   reports every difference with the allocated set: a reference to a
//!   free block, a block referenced twice, a block too small for what it
//!   holds, an allocated block nobody references (a leak).
//!
//! Nothing here writes to the region it is handed except through the
//! heap's own recovery, which is why callers pass a copy.

use crate::{AllocError, Heap, LockHeap, PAllocator, RecoveryReport};
use ferrite_pmem::Region;
use std::collections::BTreeMap;

/// One thing wrong with a heap or with how its user references it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeapFinding {
    /// The heap refuses to open: its metadata is corrupt (the error says
    /// which check failed).
    Refused(String),
    /// Recovery would replay committed-but-unapplied lane records.
    Replay { records: usize },
    /// Allocated, but no root reaches it.
    Leak { off: u64, size: u64 },
    /// Referenced, but free in the heap (a dangling reference: the block
    /// may be handed out again and overwritten).
    ReferencedFree { off: u64, need: u64 },
    /// Referenced from two places (a shared block the owner believes it
    /// holds alone: freeing one frees the other).
    ReferencedTwice { off: u64 },
    /// Allocated but smaller than what its referrer stores in it.
    TooSmall { off: u64, size: u64, need: u64 },
}

impl std::fmt::Display for HeapFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeapFinding::Refused(e) => write!(f, "does not open: {e}"),
            HeapFinding::Replay { records } => write!(
                f,
                "recovery would replay {records} committed lane record{}",
                if *records == 1 { "" } else { "s" }
            ),
            HeapFinding::Leak { off, size } => {
                write!(f, "block {off:#x} ({size} B) allocated but unreachable")
            }
            HeapFinding::ReferencedFree { off, need } => {
                write!(f, "block {off:#x} ({need} B) referenced but free")
            }
            HeapFinding::ReferencedTwice { off } => {
                write!(f, "block {off:#x} referenced twice")
            }
            HeapFinding::TooSmall { off, size, need } => write!(
                f,
                "block {off:#x} holds {size} B but its referrer needs {need} B"
            ),
        }
    }
}

impl HeapFinding {
    /// A short name of the kind of problem (for JSON and counting).
    pub fn kind(&self) -> &'static str {
        match self {
            HeapFinding::Refused(_) => "heap-refused",
            HeapFinding::Replay { .. } => "heap-replay",
            HeapFinding::Leak { .. } => "leak",
            HeapFinding::ReferencedFree { .. } => "referenced-free",
            HeapFinding::ReferencedTwice { .. } => "referenced-twice",
            HeapFinding::TooSmall { .. } => "too-small",
        }
    }
}

/// Every allocated block of `a`: pool offset → usable bytes.
pub fn allocated(a: &dyn PAllocator) -> BTreeMap<u64, u64> {
    let mut m = BTreeMap::new();
    a.for_each_allocated(&mut |off, size| {
        m.insert(off.raw(), size as u64);
    });
    m
}

/// What recovery did, as findings: replayed lane records are a finding
/// (the pool was not closed cleanly, or a crash interrupted a publish);
/// markers written for complete records are not (they change no block).
pub fn recovery_findings(r: &RecoveryReport) -> Vec<HeapFinding> {
    if r.replayed > 0 {
        vec![HeapFinding::Replay {
            records: r.replayed,
        }]
    } else {
        Vec::new()
    }
}

/// The open error of a heap as a finding.
pub fn refused(e: &AllocError) -> HeapFinding {
    HeapFinding::Refused(e.to_string())
}

/// Compares the blocks a heap's user references (`(pool offset, bytes it
/// needs)`, walked from its roots) with the heap's allocated blocks
/// (from [`allocated`]). Findings come in offset order: references first
/// (free, twice, too small), then leaks.
pub fn compare(allocated: &BTreeMap<u64, u64>, referenced: &[(u64, u64)]) -> Vec<HeapFinding> {
    let mut out = Vec::new();
    let mut seen: BTreeMap<u64, u64> = BTreeMap::new();
    let mut refs = referenced.to_vec();
    refs.sort_unstable();
    for (off, need) in refs {
        if seen.insert(off, need).is_some() {
            out.push(HeapFinding::ReferencedTwice { off });
            continue;
        }
        match allocated.get(&off) {
            None => out.push(HeapFinding::ReferencedFree { off, need }),
            Some(&size) if size < need => out.push(HeapFinding::TooSmall { off, size, need }),
            Some(_) => {}
        }
    }
    for (&off, &size) in allocated {
        if !seen.contains_key(&off) {
            out.push(HeapFinding::Leak { off, size });
        }
    }
    out
}

/// `"rolled back 1 undo transaction, replayed 2 redo records"` from
/// `(count, verb, noun)` triples, leaving out zero counts; `"nothing to
/// do"` when every count is zero. For the recovery summaries of the
/// components above the heap.
pub fn counted(parts: &[(usize, &str, &str)]) -> String {
    let v: Vec<String> = parts
        .iter()
        .filter(|p| p.0 > 0)
        .map(|&(n, verb, noun)| format!("{verb} {n} {noun}{}", if n == 1 { "" } else { "s" }))
        .collect();
    if v.is_empty() {
        "nothing to do".into()
    } else {
        v.join(", ")
    }
}

/// Which allocator's superblock starts `bytes` (`FERRHEAP`: the Ferrite
/// heap; `FERRLOCK`: the lock heap).
pub fn recognise(bytes: &[u8]) -> Option<&'static str> {
    match bytes.get(..8)? {
        m if m == crate::heap::MAGIC => Some("ferrite"),
        m if m == crate::lock::MAGIC => Some("nstore-lock"),
        _ => None,
    }
}

/// What [`verify_region`] found in a heap on its own.
#[derive(Clone, Debug, Default)]
pub struct RegionCheck {
    /// `ferrite` or `nstore-lock`, when recognised.
    pub allocator: Option<&'static str>,
    pub findings: Vec<HeapFinding>,
    /// Allocated blocks (when it opened) and bytes they hold.
    pub blocks: usize,
    pub bytes: u64,
    /// The heap's root object (0 when none).
    pub root: u64,
}

/// Verifies a heap that stands alone at the start of `region` (a region
/// over a copy of the pool: the heap's recovery runs on it). Without the
/// structure that owns its blocks nothing is known to reach them except
/// the heap's root object, so no leak is reported; what is checked is
/// everything the heap's own open validates, and whether its recovery
/// would replay lane records.
pub fn verify_region(region: &Region) -> RegionCheck {
    let head = region.read_vec(0, region.len().min(8));
    let mut out = RegionCheck {
        allocator: recognise(&head),
        ..RegionCheck::default()
    };
    let heap: Box<dyn PAllocator> = match out.allocator {
        Some("ferrite") => match Heap::open(region.clone()) {
            Ok(h) => Box::new(h),
            Err(e) => {
                out.findings.push(refused(&e));
                return out;
            }
        },
        Some(_) => match LockHeap::open(region.clone()) {
            Ok(h) => Box::new(h),
            Err(e) => {
                out.findings.push(refused(&e));
                return out;
            }
        },
        None => {
            out.findings
                .push(HeapFinding::Refused("no heap superblock magic".into()));
            return out;
        }
    };
    out.findings.extend(recovery_findings(heap.recovery()));
    let a = allocated(&*heap);
    out.blocks = a.len();
    out.bytes = a.values().sum();
    out.root = heap.root().raw();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Heap, HeapOptions, LockHeap, LockOptions};
    use ferrite_pmem::{Pool, PoolOptions};

    fn pool() -> Pool {
        Pool::create_in_memory(&PoolOptions::new("verify", 4 << 20)).unwrap()
    }

    #[test]
    fn counted_says_what_was_done() {
        assert_eq!(
            counted(&[
                (1, "rolled back", "undo transaction"),
                (0, "x", "y"),
                (2, "replayed", "redo record")
            ]),
            "rolled back 1 undo transaction, replayed 2 redo records"
        );
        assert_eq!(counted(&[(0, "x", "y")]), "nothing to do");
    }

    #[test]
    fn compare_reports_every_kind() {
        let alloc: BTreeMap<u64, u64> = [(0x1000, 64), (0x2000, 64), (0x3000, 16)].into();
        let refs = [(0x1000, 64), (0x1000, 64), (0x4000, 32), (0x3000, 32)];
        let f = compare(&alloc, &refs);
        assert_eq!(
            f,
            vec![
                HeapFinding::ReferencedTwice { off: 0x1000 },
                HeapFinding::TooSmall {
                    off: 0x3000,
                    size: 16,
                    need: 32
                },
                HeapFinding::ReferencedFree {
                    off: 0x4000,
                    need: 32
                },
                HeapFinding::Leak {
                    off: 0x2000,
                    size: 64
                },
            ]
        );
        assert_eq!(
            f[3].to_string(),
            "block 0x2000 (64 B) allocated but unreachable"
        );
        assert!(compare(&alloc, &[(0x1000, 1), (0x2000, 64), (0x3000, 16)]).is_empty());
    }

    /// A new lock heap (`lock`) or Ferrite heap in `region`.
    fn create(lock: bool, region: &Region) -> Box<dyn PAllocator> {
        if lock {
            Box::new(LockHeap::create(region.clone(), LockOptions::default()).unwrap())
        } else {
            Box::new(Heap::create(region.clone(), HeapOptions::default()).unwrap())
        }
    }

    #[test]
    fn a_block_allocated_without_a_link_is_a_leak_on_both_heaps() {
        for lock in [false, true] {
            let p = pool();
            let region = p.data().sub(0, 2 << 20).unwrap();
            let heap = create(lock, &region);
            let (kept, lost) = {
                let mut t = heap.thread().unwrap();
                (t.alloc(100, None).unwrap(), t.alloc(3000, None).unwrap())
            };
            drop(heap);
            let reopened: Box<dyn PAllocator> = if lock {
                Box::new(LockHeap::open(region).unwrap())
            } else {
                Box::new(Heap::open(region).unwrap())
            };
            assert!(recovery_findings(reopened.recovery()).is_empty());
            let a = allocated(&*reopened);
            let f = compare(&a, &[(kept.raw(), 100)]);
            assert_eq!(f.len(), 1, "{f:?}");
            assert!(
                matches!(f[0], HeapFinding::Leak { off, .. } if off == lost.raw()),
                "{f:?}"
            );
        }
    }

    #[test]
    fn a_heap_alone_is_recognised_and_verified() {
        for lock in [false, true] {
            let p = pool();
            let region = p.data().sub(0, 2 << 20).unwrap();
            let heap = create(lock, &region);
            heap.thread().unwrap().alloc(100, None).unwrap();
            drop(heap);
            let c = verify_region(&region);
            assert_eq!(
                c.allocator,
                Some(if lock { "nstore-lock" } else { "ferrite" })
            );
            assert!(c.findings.is_empty(), "{:?}", c.findings);
            assert_eq!(c.blocks, 1);
            region.write(20, &[0xaa; 4]);
            let c = verify_region(&region);
            assert!(
                matches!(&c.findings[..], [HeapFinding::Refused(_)]),
                "{:?}",
                c.findings
            );
        }
    }

    #[test]
    fn a_corrupt_superblock_is_refused_not_a_panic() {
        let p = pool();
        let region = p.data().sub(0, 2 << 20).unwrap();
        drop(Heap::create(region.clone(), HeapOptions::default()).unwrap());
        let mut b = [0u8; 1];
        region.read(60, &mut b);
        region.write(60, &[b[0] ^ 0xff]);
        let Err(e) = Heap::open(region) else {
            panic!("a heap with a corrupt superblock opened");
        };
        let f = refused(&e);
        assert!(f.to_string().contains("checksum"), "{f}");
    }
}
