//! Read-only verification of a PTM pool for `ferrite pool check --deep`.
//!
//! [`verify`] is handed a *copy* of the pool (an in-memory image): it
//! decodes the superblock, reads every slot's status word and log —
//! counting the valid prefix of an undo log, checking a redo log's count
//! against its area — and then runs the real recovery ([`Ptm::open`]) on
//! the copy to learn whether it succeeds and what it does.
//!
//! What the PTM's root word leads to is the application's (the server's
//! hash map of entries, a workload's tables), so reachability from it is
//! not checked here; the heap's own open still validates every piece of
//! its metadata.

use crate::format::{self, Superblock};
use crate::{Algorithm, Ptm, PtmError, PtmOptions, PtmRecovery};
use ferrite_alloc::verify::{self as av, HeapFinding};
use ferrite_pmem::{Pool, Region};

/// One thing wrong with a PTM pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PtmFinding {
    /// No root at the superblock, or the superblock does not decode.
    Superblock(String),
    /// A slot's header line has an unknown state or non-zero reserved bytes.
    SlotHeader {
        /// The slot.
        slot: usize,
        /// What is wrong with its header line.
        what: String,
    },
    /// A slot recovery would have to act on.
    Interrupted {
        /// The slot.
        slot: usize,
        /// What recovery would do.
        what: String,
    },
    /// Recovery refuses the pool.
    Refused(String),
    /// The heap's own findings.
    Heap(HeapFinding),
}

impl PtmFinding {
    /// `ptm` or `heap`.
    pub fn component(&self) -> &'static str {
        match self {
            PtmFinding::Heap(_) => "heap",
            _ => "ptm",
        }
    }

    /// The finding's kind in the deep check's report (`ptm-superblock`, …, or the heap finding's).
    pub fn kind(&self) -> &'static str {
        match self {
            PtmFinding::Superblock(_) => "ptm-superblock",
            PtmFinding::SlotHeader { .. } => "ptm-slot-header",
            PtmFinding::Interrupted { .. } => "ptm-interrupted",
            PtmFinding::Refused(_) => "ptm-refused",
            PtmFinding::Heap(h) => h.kind(),
        }
    }
}

impl std::fmt::Display for PtmFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PtmFinding::Superblock(e) => write!(f, "superblock: {e}"),
            PtmFinding::SlotHeader { slot, what } | PtmFinding::Interrupted { slot, what } => {
                write!(f, "slot {slot}: {what}")
            }
            PtmFinding::Refused(e) => write!(f, "recovery fails: {e}"),
            PtmFinding::Heap(h) => h.fmt(f),
        }
    }
}

/// What [`verify`] found.
#[derive(Debug, Default)]
pub struct PtmCheck {
    /// The decoded superblock, when it decodes.
    pub superblock: Option<Superblock>,
    /// Everything wrong found.
    pub findings: Vec<PtmFinding>,
    /// What recovery did on the copy (when it ran).
    pub recovery: Option<PtmRecovery>,
    /// Blocks the heap has allocated (after recovery).
    pub allocated: usize,
}

/// Valid undo entries of `epoch` from the start of slot `s`'s log: their
/// count (the log's valid prefix ends at `count · 32`).
fn undo_prefix(region: &Region, sb: &Superblock, s: usize, epoch: u64) -> usize {
    let area = sb.slot_off(s) as usize + format::SLOT_HDR as usize;
    let mut b = [0u8; format::UNDO_ENTRY];
    let mut n = 0;
    while (n + 1) * format::UNDO_ENTRY <= sb.log_bytes as usize {
        region.read(area + n * format::UNDO_ENTRY, &mut b);
        if format::undo_decode(sb.nonce, s, &b, epoch).is_none() {
            break;
        }
        n += 1;
    }
    n
}

/// Verifies the PTM pool in `copy` (recovery runs on it). Never panics on
/// any input.
pub fn verify(copy: &Pool) -> PtmCheck {
    let mut out = PtmCheck::default();
    let region = Region::whole(copy.medium().clone());
    let root = copy.root::<u8>().raw();
    if root != format::SB_OFF {
        out.findings.push(PtmFinding::Superblock(format!(
            "the pool's root is {root:#x}, not the superblock at {:#x}",
            format::SB_OFF
        )));
        return out;
    }
    let mut raw = [0u8; format::SB_BYTES];
    region.read(format::SB_OFF as usize, &mut raw);
    let sb = match Superblock::decode(&raw, region.len() as u64) {
        Ok(sb) => sb,
        Err(e) => {
            out.findings.push(PtmFinding::Superblock(e.to_string()));
            return out;
        }
    };
    out.superblock = Some(sb);
    for s in 0..usize::from(sb.slots) {
        let so = sb.slot_off(s) as usize;
        if so + format::SLOT_HDR as usize > region.len() {
            break;
        }
        let st = region.load_u64(so);
        let epoch = format::status_epoch(st);
        let reserved = region.read_vec(so + 16, format::SLOT_HDR as usize - 16);
        if let Some(i) = reserved.iter().position(|&b| b != 0) {
            out.findings.push(PtmFinding::SlotHeader {
                slot: s,
                what: format!(
                    "reserved byte {} of the header line is {:#04x}, not zero",
                    16 + i,
                    reserved[i]
                ),
            });
        }
        match format::status_state(st) {
            format::IDLE => {}
            format::NEEDS_UNDO => {
                let n = undo_prefix(&region, &sb, s, epoch);
                out.findings.push(PtmFinding::Interrupted {
                    slot: s,
                    what: format!(
                        "interrupted orec-eager transaction (epoch {epoch}, {n} undo entr{}, log ends at byte {:#x}): recovery would roll it back",
                        if n == 1 { "y" } else { "ies" },
                        n * format::UNDO_ENTRY
                    ),
                });
            }
            format::NEEDS_REDO => {
                let count = u64::from(region.read_u32(so + 8));
                let fits = count * format::REDO_ENTRY as u64 <= u64::from(sb.log_bytes);
                out.findings.push(PtmFinding::Interrupted {
                    slot: s,
                    what: if fits {
                        format!(
                            "committing orec-lazy transaction (epoch {epoch}, {count} redo entries, log ends at byte {:#x}): recovery would replay it if its checksum holds, else discard it",
                            count * format::REDO_ENTRY as u64
                        )
                    } else {
                        format!(
                            "committing orec-lazy transaction (epoch {epoch}) whose {count} redo entries overrun the {}-byte log: recovery would discard it",
                            sb.log_bytes
                        )
                    },
                });
            }
            _ => out.findings.push(PtmFinding::SlotHeader {
                slot: s,
                what: format!("unknown status word {st:#x}"),
            }),
        }
    }
    let alg = if sb.algorithm == 1 {
        Algorithm::Eager
    } else {
        Algorithm::Lazy
    };
    let opts = PtmOptions::new(alg).slots(sb.slots).log_bytes(sb.log_bytes);
    match Ptm::open(copy, &opts) {
        Ok(p) => {
            let r = p.recovery().clone();
            out.findings.extend(
                av::recovery_findings(&r.heap)
                    .into_iter()
                    .map(PtmFinding::Heap),
            );
            out.allocated = av::allocated(p.heap()).len();
            out.recovery = Some(r);
        }
        Err(PtmError::Alloc(e)) => out.findings.push(PtmFinding::Heap(av::refused(&e))),
        Err(e) => out.findings.push(PtmFinding::Refused(e.to_string())),
    }
    out
}

/// One line on what a recovery did (`nothing to do` when nothing).
pub fn describe(r: &PtmRecovery) -> String {
    ferrite_alloc::verify::counted(&[
        (r.undone, "rolled back", "undo log"),
        (r.replayed, "replayed", "redo log"),
        (r.discarded, "discarded", "uncommitted redo log"),
        (r.heap.replayed, "replayed", "heap lane record"),
    ])
}

/// True when the pool's root points at a PTM superblock in `image`.
pub fn recognise(image: &[u8]) -> bool {
    let root = image
        .get(ferrite_pmem::header::ROOT_OFF..ferrite_pmem::header::ROOT_OFF + 8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    root == format::SB_OFF
        && image
            .get(format::SB_OFF as usize..format::SB_OFF as usize + 8)
            .is_some_and(|m| m == format::MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_pmem::{Domain, PoolOptions};

    fn copy(img: &[u8]) -> Pool {
        Pool::open_image(img, &PoolOptions::new("ptm", 0), Domain::Volatile, None).unwrap()
    }

    #[test]
    fn clean_then_interrupted_then_corrupt() {
        for alg in Algorithm::ALL {
            let pool = Pool::create_in_memory(&PoolOptions::new("ptm", 8 << 20)).unwrap();
            let opts = PtmOptions::new(alg).slots(2).log_bytes(4096);
            drop(Ptm::create(&pool, &opts).unwrap());
            let img = pool.image();
            assert!(recognise(&img));
            let c = verify(&copy(&img));
            assert!(c.findings.is_empty(), "{alg}: {:?}", c.findings);
            assert_eq!(describe(c.recovery.as_ref().unwrap()), "nothing to do");

            let sb = c.superblock.unwrap();
            let so = sb.slot_off(1) as usize;
            // A slot left mid-transaction (no entries yet).
            let mut bad = img.clone();
            let state = if alg == Algorithm::Eager {
                format::NEEDS_UNDO
            } else {
                format::NEEDS_REDO
            };
            bad[so..so + 8].copy_from_slice(&format::status(5, state).to_le_bytes());
            let c = verify(&copy(&bad));
            assert!(
                c.findings
                    .iter()
                    .any(|f| matches!(f, PtmFinding::Interrupted { slot: 1, .. })),
                "{alg}: {:?}",
                c.findings
            );
            // An unknown state and garbage in the superblock.
            let mut bad = img.clone();
            bad[so] |= 3;
            let c = verify(&copy(&bad));
            assert!(
                c.findings
                    .iter()
                    .any(|f| f.to_string().contains("unknown status")),
                "{alg}: {:?}",
                c.findings
            );
            let mut bad = img.clone();
            bad[format::SB_OFF as usize + 12] ^= 0x40;
            let c = verify(&copy(&bad));
            assert!(
                matches!(&c.findings[..], [PtmFinding::Superblock(_)]),
                "{alg}: {:?}",
                c.findings
            );
        }
    }
}
