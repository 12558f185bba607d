//! Read-only verification of a transactional pool for
//! `ferrite pool check --deep`.
//!
//! [`verify`] is handed a pool that is a *copy* (an in-memory image, from
//! [`ferrite_pmem::Pool::open_image`]): it reads the superblock and every
//! log slot, says which transactions recovery would have to act on and
//! how far each log parses, then runs the real recovery
//! ([`TxPool::open_limited`]) on the copy to learn whether it succeeds and
//! what it does. The opened [`TxPool`] is handed back so that the owner of
//! the data (`ferrite_ds::verify`) can walk its structures from the root
//! and compare the blocks it reaches with the heap's.
//!
//! What is checked, in order:
//! 1. the pool header's root points at a superblock that decodes (magic,
//!    version, checksum, geometry);
//! 2. each slot's header line: `done`, then 56 reserved bytes that must be
//!    zero;
//! 3. each slot's two log areas, parsed from their start to the end of
//!    their valid prefix (records of one epoch with valid checksums): an
//!    area whose transaction is newer than `done` is interrupted, and
//!    recovery would roll it back (undo), replay or discard it (redo), or
//!    re-execute it (clobber). One interrupted in the wrong area, or with
//!    a record sequence no writer produces, makes recovery refuse the pool;
//! 4. recovery itself, on the copy (a failure is a finding, with its
//!    error), and the heap's own lane recovery inside it.

use crate::format::Layout;
use crate::format::{self, Kind, Superblock};
use crate::recovery::{self, TxRecovery};
use crate::tx::{Registry, TxPool};
use ferrite_alloc::verify::{self as av, HeapFinding};
use ferrite_pmem::{CACHE_LINE, Pool, Region};

/// Most reads and writes one re-execution may make during the check's
/// recovery: a function looping over corrupt data stops with an error.
pub const ACCESS_LIMIT: u64 = 50_000_000;

/// Why a log area's valid prefix ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefixEnd {
    /// Zero bytes (never written) or the end of the area.
    Clean,
    /// A valid record of another epoch (an older transaction's leftovers).
    Stale,
    /// Bytes that do not form a valid record: torn by a crash, or corrupt.
    Invalid,
}

/// How one log area parses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AreaLog {
    /// The slot the area belongs to.
    pub slot: u16,
    /// Which of the slot's two areas (0 or 1).
    pub area: u8,
    /// Epoch and kind of the area's first record (none when it has none).
    pub epoch: Option<u64>,
    /// Kind of that first record.
    pub kind: Option<Kind>,
    /// Valid records of that epoch, from the start.
    pub records: usize,
    /// Area offset where the valid prefix ends (the next record's place).
    pub end: usize,
    /// What stops the valid prefix.
    pub stop: PrefixEnd,
    /// True when the transaction is newer than the slot's `done`.
    pub interrupted: bool,
}

impl AreaLog {
    fn describe(&self) -> String {
        let stop = match self.stop {
            PrefixEnd::Clean => "",
            PrefixEnd::Stale => " before an older transaction's record",
            PrefixEnd::Invalid => " at a torn or corrupt record",
        };
        format!(
            "area {}: {} record{}, log ends at byte {:#x}{stop}",
            self.area,
            self.records,
            if self.records == 1 { "" } else { "s" },
            self.end
        )
    }
}

/// One thing wrong with a transactional pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxFinding {
    /// No root, or the superblock does not decode.
    Superblock(String),
    /// A slot header's reserved bytes are not zero.
    SlotHeader {
        /// The slot.
        slot: u16,
        /// Which bytes, and what they hold.
        what: String,
    },
    /// A transaction recovery would have to act on.
    Interrupted {
        /// The transaction's log area as parsed.
        log: AreaLog,
        /// What recovery would do: roll it back, replay or discard it,
        /// restore its inputs and re-execute it, or refuse the pool.
        action: &'static str,
    },
    /// Recovery refuses the pool (or a re-execution fails).
    Refused(String),
    /// Re-executions logged different inputs than the crashed runs.
    Nondeterministic(String),
    /// The heap inside the pool.
    Heap(HeapFinding),
}

impl TxFinding {
    /// `tx` or `heap`.
    pub fn component(&self) -> &'static str {
        match self {
            TxFinding::Heap(_) => "heap",
            _ => "tx",
        }
    }

    /// A short name of the kind of problem.
    pub fn kind(&self) -> &'static str {
        match self {
            TxFinding::Superblock(_) => "tx-superblock",
            TxFinding::SlotHeader { .. } => "tx-slot-header",
            TxFinding::Interrupted { .. } => "tx-interrupted",
            TxFinding::Refused(_) => "tx-refused",
            TxFinding::Nondeterministic(_) => "tx-nondeterministic",
            TxFinding::Heap(h) => h.kind(),
        }
    }
}

impl std::fmt::Display for TxFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TxFinding::Superblock(e) => write!(f, "superblock: {e}"),
            TxFinding::SlotHeader { slot, what } => write!(f, "slot {slot}: {what}"),
            TxFinding::Interrupted { log, action } => write!(
                f,
                "slot {}: interrupted {} transaction (epoch {}, {}): recovery would {action}",
                log.slot,
                kind_name(log.kind),
                log.epoch.unwrap_or(0),
                log.describe()
            ),
            TxFinding::Refused(e) => write!(f, "recovery fails: {e}"),
            TxFinding::Nondeterministic(e) => write!(f, "re-execution differs: {e}"),
            TxFinding::Heap(h) => h.fmt(f),
        }
    }
}

fn kind_name(k: Option<Kind>) -> &'static str {
    match k {
        Some(Kind::Undo) => "undo",
        Some(Kind::Redo) => "redo",
        Some(Kind::Vlog) => "clobber",
        Some(_) => "malformed",
        None => "empty",
    }
}

/// What [`verify`] found.
#[derive(Debug, Default)]
pub struct TxCheck {
    /// The decoded superblock (`None` when there is no valid one).
    pub superblock: Option<Superblock>,
    /// The pool's default strategy (from the superblock).
    pub strategy: Option<crate::Strategy>,
    /// Everything wrong, in the order found; empty for a sound pool.
    pub findings: Vec<TxFinding>,
    /// Every non-empty log area, parsed.
    pub logs: Vec<AreaLog>,
    /// What recovery did on the copy (when it ran).
    pub recovery: Option<TxRecovery>,
    /// The recovered pool (when recovery succeeded), for structure walks.
    pub pool: Option<TxPool>,
}

/// Parses area `area` of slot `slot` up to the end of its valid prefix.
pub(crate) fn parse_area(a: &Region, slot: u16, area: u8, nonce: u64, done: u64) -> AreaLog {
    let seed = format::crc_seed(nonce);
    let mut log = AreaLog {
        slot,
        area,
        epoch: None,
        kind: None,
        records: 0,
        end: 0,
        stop: PrefixEnd::Clean,
        interrupted: false,
    };
    let mut pos = 0usize;
    loop {
        let Some(r) = format::read_record(a, pos, slot, seed) else {
            let left = a.len().saturating_sub(pos).min(format::REC_HDR);
            let zero = left == 0 || a.read_vec(pos, left).iter().all(|&b| b == 0);
            log.stop = if zero {
                PrefixEnd::Clean
            } else {
                PrefixEnd::Invalid
            };
            break;
        };
        match log.epoch {
            None => {
                log.epoch = Some(r.epoch);
                log.kind = Some(r.kind);
                log.interrupted = r.epoch > done;
            }
            Some(e) if e != r.epoch => {
                log.stop = PrefixEnd::Stale;
                break;
            }
            Some(_) => {}
        }
        log.records += 1;
        pos = r.end;
    }
    log.end = pos;
    log
}

fn action(k: Option<Kind>) -> &'static str {
    match k {
        Some(Kind::Undo) => "roll it back",
        Some(Kind::Redo) => "replay it if its fresh data survived, else discard it",
        Some(Kind::Vlog) => "restore its inputs and re-execute it",
        _ => "refuse the pool",
    }
}

/// Verifies the transactional pool in `copy` (a pool the caller may lose:
/// recovery runs on it). `registry` holds the functions a clobber
/// re-execution may need. Never panics on any input.
pub fn verify(copy: &Pool, registry: Registry) -> TxCheck {
    let mut out = TxCheck::default();
    let whole = Region::whole(copy.medium().clone());
    let at = copy.root::<u8>().raw();
    if at == 0 {
        out.findings
            .push(TxFinding::Superblock("the pool has no root".into()));
        return out;
    }
    if at
        .checked_add(format::SLOTS_REL)
        .is_none_or(|e| e > whole.len() as u64)
    {
        out.findings.push(TxFinding::Superblock(format!(
            "root {at:#x} outside the pool"
        )));
        return out;
    }
    let sb = match Superblock::decode(
        &whole.read_vec(at as usize, CACHE_LINE),
        at,
        whole.len() as u64,
    ) {
        Ok(sb) => sb,
        Err(e) => {
            out.findings.push(TxFinding::Superblock(e.to_string()));
            return out;
        }
    };
    out.superblock = Some(sb);
    out.strategy = crate::Strategy::from_code(sb.strategy);
    let layout = match crate::pool::heap_bounds(&whole, &sb) {
        Ok((meta_lo, data_lo, data_hi)) => Layout {
            sb,
            root_word: at + CACHE_LINE as u64,
            data_lo,
            data_hi,
            meta_lo,
        },
        Err(e) => {
            out.findings.push(TxFinding::Superblock(e.to_string()));
            return out;
        }
    };
    // A GROUP record that completed transactions but whose `done` words
    // were not all written counts those as done (recovery, step 1).
    if let Err(e) = recovery::roll_group_forward(&whole, &layout) {
        out.findings.push(TxFinding::Refused(e.to_string()));
        return out;
    }
    for slot in 0..sb.slots {
        let s = layout.slot_off(slot) as usize;
        let done = whole.load_u64(s);
        let reserved = whole.read_vec(s + 8, CACHE_LINE - 8);
        if let Some(i) = reserved.iter().position(|&b| b != 0) {
            out.findings.push(TxFinding::SlotHeader {
                slot,
                what: format!(
                    "reserved byte {} of the header line is {:#04x}, not zero",
                    8 + i,
                    reserved[i]
                ),
            });
        }
        for area in 0..2u8 {
            let Ok(a) = whole.sub(
                layout.area_off(slot, u64::from(area)) as usize,
                sb.area_bytes as usize,
            ) else {
                continue;
            };
            let log = parse_area(&a, slot, area, sb.nonce, done);
            if log.interrupted {
                out.findings.push(TxFinding::Interrupted {
                    log: log.clone(),
                    action: action(log.kind),
                });
            }
            if log.records > 0 || log.stop == PrefixEnd::Invalid {
                out.logs.push(log);
            }
        }
    }
    match TxPool::open_limited(copy, registry, None, ACCESS_LIMIT) {
        Ok(txp) => {
            let r = txp.recovery().clone();
            out.findings.extend(
                av::recovery_findings(&r.heap)
                    .into_iter()
                    .map(TxFinding::Heap),
            );
            out.findings.extend(
                r.nondeterministic
                    .iter()
                    .map(|n| TxFinding::Nondeterministic(n.clone())),
            );
            out.recovery = Some(r);
            out.pool = Some(txp);
        }
        Err(crate::TxError::Alloc(e)) => out.findings.push(TxFinding::Heap(av::refused(&e))),
        Err(e) => out.findings.push(TxFinding::Refused(e.to_string())),
    }
    out
}

/// One line on what a recovery did, e.g. `rolled back 1 undo transaction,
/// replayed 2 redo records` (`nothing to do` when it did nothing).
pub fn describe(r: &TxRecovery) -> String {
    ferrite_alloc::verify::counted(&[
        (r.rolled_back, "rolled back", "undo transaction"),
        (r.replayed, "replayed", "redo record"),
        (r.discarded, "discarded", "uncommitted redo record"),
        (r.reexecuted, "re-executed", "clobber transaction"),
        (r.heap.replayed, "replayed", "heap lane record"),
    ])
}

/// True when the pool header's root points at a transactional pool
/// superblock (by its magic) in `image`.
pub fn recognise(image: &[u8]) -> bool {
    let root = image
        .get(ferrite_pmem::header::ROOT_OFF..ferrite_pmem::header::ROOT_OFF + 8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    usize::try_from(root)
        .ok()
        .and_then(|r| image.get(r..r.checked_add(8)?))
        .is_some_and(|m| m == format::MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Strategy, TxOptions};
    use ferrite_pmem::{Domain, PoolOptions};

    fn image() -> Vec<u8> {
        let pool = Pool::create_in_memory(&PoolOptions::new("tx", 4 << 20)).unwrap();
        let opts = TxOptions::new(Strategy::Undo).slots(2).area_bytes(8192);
        let txp = TxPool::create(&pool, &opts, Registry::new()).unwrap();
        drop(txp);
        pool.image()
    }

    fn check(img: &[u8]) -> TxCheck {
        let copy =
            Pool::open_image(img, &PoolOptions::new("tx", 0), Domain::Volatile, None).unwrap();
        verify(&copy, Registry::new())
    }

    #[test]
    fn a_fresh_pool_is_clean_and_recognised() {
        let img = image();
        assert!(recognise(&img));
        let c = check(&img);
        assert!(c.findings.is_empty(), "{:?}", c.findings);
        assert_eq!(describe(c.recovery.as_ref().unwrap()), "nothing to do");
    }

    #[test]
    fn slot_header_and_superblock_corruption_is_found() {
        let img = image();
        let at = u64::from_le_bytes(img[128..136].try_into().unwrap()) as usize;
        let mut bad = img.clone();
        bad[at + 61] ^= 0x10;
        let c = check(&bad);
        assert!(
            matches!(&c.findings[..], [TxFinding::Superblock(e)] if e.contains("checksum")),
            "{:?}",
            c.findings
        );
        let mut bad = img.clone();
        let slot0 = at + format::SLOTS_REL as usize;
        bad[slot0 + 20] = 0x77;
        let c = check(&bad);
        assert!(
            c.findings.iter().any(|f| f.to_string()
                == "slot 0: reserved byte 20 of the header line is 0x77, not zero"),
            "{:?}",
            c.findings
        );
    }
}
