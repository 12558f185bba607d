//! P3's B+tree microbenchmarks (reading notes B5):
//! - `bptree` ([`BptreeInsert`]): inserts of unique random keys into an
//!   initially empty tree (P3: 2 M insertions; the caller decides how many
//!   transactions to run). Keys are uniform random 64-bit numbers: among 2 M
//!   of them a repeat has probability ≈ 1e-7, and a repeat only replaces a
//!   value, so the tree stays correct either way.
//! - `bptree-mixed` ([`BptreeMixed`]): an equal mix of inserts, lookups and
//!   removes of uniform keys in `0..R` (P3: R = 2^21), on a tree loaded with
//!   a seeded random half of the range.
//!
//! Every value is `key ^ VALUE_XOR`, so the check verifies each entry.
//!
//! ## Persistent layout
//! Workload root block, 24 bytes:
//! ```text
//! +0  magic = BPTREE_WL_MAGIC ("WLBPTREE") or MIXED_MAGIC ("WLBPMIXD")
//! +8  offset of the B+tree header (fanout BPTREE_FANOUT)
//! +16 key range R (mixed), 0 (insert-only: all of u64)
//! ```

use super::{
    BPTREE_FANOUT, PtmWorkload, Rng, Scale, WorkloadKind, ptm_err, require_empty_root, root_block,
    root_of,
};
use crate::ds::bptree::PBTree;
use crate::ds::{CORRUPT, check_result, mix64};
use crate::{Abort, Ptm, PtmError, PtmThread, Tx, TxResult};
use rand::Rng as _;

/// "WLBPTREE".
pub const BPTREE_WL_MAGIC: u64 = u64::from_le_bytes(*b"WLBPTREE");
/// "WLBPMIXD".
pub const MIXED_MAGIC: u64 = u64::from_le_bytes(*b"WLBPMIXD");
/// Values are `key ^ VALUE_XOR`.
pub const VALUE_XOR: u64 = 0x5A5A_0F0F_A5A5_F0F0;

fn open(tx: &mut Tx<'_>, root: u64, magic: u64) -> TxResult<(PBTree, u64)> {
    let block = root_block(tx, root, magic)?;
    let hdr = tx.load(block + 8)?;
    let tree = PBTree::open(tx, hdr)?;
    Ok((tree, tx.load(block + 16)?))
}

fn load_tree(
    ptm: &Ptm,
    magic: u64,
    range: u64,
    mut keys: impl Iterator<Item = u64>,
) -> Result<(), PtmError> {
    let root = ptm.root().raw();
    let mut th = ptm.thread()?;
    require_empty_root(&mut th, root)?;
    let tree = th.atomic(|tx| PBTree::create_in(tx, BPTREE_FANOUT))?;
    loop {
        let batch: Vec<u64> = keys.by_ref().take(64).collect();
        if batch.is_empty() {
            break;
        }
        th.atomic(|tx| {
            for &k in &batch {
                tree.insert(tx, k, k ^ VALUE_XOR)?;
            }
            Ok(())
        })?;
    }
    th.atomic(|tx| {
        let block = tx.alloc(24)?.raw();
        tx.store(block, magic)?;
        tx.store(block + 8, tree.header())?;
        tx.store(block + 16, range)?;
        tx.store(root, block)
    })
}

/// Checks the tree's structure, that every value is `key ^ VALUE_XOR` and
/// (when `range` ≠ 0) every key is below `range`. Returns the entries.
fn check_tree(ptm: &Ptm, magic: u64, range: u64) -> Result<u64, String> {
    let root = ptm.root().raw();
    let mut th = ptm.thread().map_err(ptm_err)?;
    let (tree, r) = check_result(th.atomic(|tx| Ok(Ok(open(tx, root, magic)?))))?;
    if r != range {
        return Err(format!("key range {r}, expected {range}"));
    }
    let entries = tree.check(&mut th)?;
    let mut from = 0u64;
    let mut seen = 0u64;
    loop {
        let mut part = Vec::new();
        check_result(th.atomic(|tx| {
            part.clear();
            tree.scan(tx, from, 4096, &mut |k, v| part.push((k, v)))?;
            Ok(Ok(()))
        }))?;
        for &(k, v) in &part {
            if v != k ^ VALUE_XOR {
                return Err(format!("key {k}: value {v:#x}"));
            }
            if range != 0 && k >= range {
                return Err(format!("key {k} outside 0..{range}"));
            }
        }
        seen += part.len() as u64;
        match part.last() {
            Some(&(k, _)) if part.len() == 4096 && k < u64::MAX => from = k + 1,
            _ => break,
        }
    }
    if seen != entries {
        return Err(format!(
            "scan saw {seen} entries, structure check {entries}"
        ));
    }
    Ok(entries)
}

/// `bptree`: insert-only (module docs).
pub struct BptreeInsert;

impl BptreeInsert {
    /// The workload (its scale and seed do not change it: every thread inserts fresh keys).
    pub fn new(_scale: Scale, _seed: u64) -> BptreeInsert {
        BptreeInsert
    }
}

impl PtmWorkload for BptreeInsert {
    fn kind(&self) -> WorkloadKind {
        WorkloadKind::Bptree
    }

    fn load(&self, ptm: &Ptm) -> Result<(), PtmError> {
        load_tree(ptm, BPTREE_WL_MAGIC, 0, std::iter::empty())
    }

    fn run_one(
        &self,
        th: &mut PtmThread<'_>,
        _thread: usize,
        _threads: usize,
        rng: &mut Rng,
    ) -> Result<(), PtmError> {
        let key: u64 = rng.random();
        let root = root_of(th);
        th.atomic(|tx| {
            let (tree, _) = open(tx, root, BPTREE_WL_MAGIC)?;
            tree.insert(tx, key, key ^ VALUE_XOR)?;
            Ok(())
        })
    }

    fn check(&self, ptm: &Ptm) -> Result<(), String> {
        check_tree(ptm, BPTREE_WL_MAGIC, 0).map(|_| ())
    }
}

/// `bptree-mixed` (module docs).
pub struct BptreeMixed {
    range: u64,
    seed: u64,
}

impl BptreeMixed {
    /// The workload at `scale` (the key range), its random choices from `seed`.
    pub fn new(scale: Scale, seed: u64) -> BptreeMixed {
        let range = match scale {
            Scale::Tiny => 64,
            Scale::Quick => 1 << 16,
            Scale::Full => 1 << 21,
        };
        BptreeMixed { range, seed }
    }
}

impl PtmWorkload for BptreeMixed {
    fn kind(&self) -> WorkloadKind {
        WorkloadKind::BptreeMixed
    }

    fn load(&self, ptm: &Ptm) -> Result<(), PtmError> {
        // A seeded random half of the range, inserted in a shuffled-enough
        // order (by hash) so the tree is not built by pure appends.
        let seed = self.seed;
        let mut keys: Vec<u64> = (0..self.range)
            .filter(|k| mix64(k ^ seed) & 1 == 0)
            .collect();
        keys.sort_unstable_by_key(|k| mix64(k.wrapping_add(seed)));
        load_tree(ptm, MIXED_MAGIC, self.range, keys.into_iter())
    }

    fn run_one(
        &self,
        th: &mut PtmThread<'_>,
        _thread: usize,
        _threads: usize,
        rng: &mut Rng,
    ) -> Result<(), PtmError> {
        let op = rng.random_range(0..3u32);
        let key = rng.random_range(0..self.range);
        let root = root_of(th);
        th.atomic(|tx| {
            let (tree, _) = open(tx, root, MIXED_MAGIC)?;
            match op {
                0 => {
                    tree.insert(tx, key, key ^ VALUE_XOR)?;
                }
                1 => {
                    if let Some(v) = tree.get(tx, key)?
                        && v != key ^ VALUE_XOR
                    {
                        return Err(Abort::User(CORRUPT));
                    }
                }
                _ => {
                    tree.remove(tx, key)?;
                }
            }
            Ok(())
        })
    }

    fn check(&self, ptm: &Ptm) -> Result<(), String> {
        check_tree(ptm, MIXED_MAGIC, self.range).map(|_| ())
    }
}
