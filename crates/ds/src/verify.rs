//! Read-only verification of a transactional pool holding one of this
//! crate's structures, for `ferrite pool check --deep`.
//!
//! [`verify_pool`] runs [`ferrite_tx::verify::verify`] (superblock, slots,
//! logs, recovery on the copy) with every structure's functions
//! registered, so that a clobber re-execution can run; then, when the
//! pool's root word names a structure (recognised by its header magic:
//! the four [`Structure`]s and the server's [`crate::bytemap`]),
//! walks it ([`crate::KvMap::shape`] checks every invariant of the
//! structure) and compares the blocks it reaches with the heap's
//! allocated blocks ([`ferrite_alloc::verify::compare`]): a reference to a
//! free block, a block referenced twice or too small, a leak.
//!
//! A root that names no known structure is not a finding (an application
//! may keep its own data there); its reachability is then not checked,
//! and [`DsCheck::structure`] says so.

use crate::{Structure, bptree, hashmap, rbtree, skiplist};
use ferrite_alloc::verify::{self as av, HeapFinding};
use ferrite_pmem::Pool;
use ferrite_tx::TxPool;
use ferrite_tx::verify::TxCheck;

/// One thing wrong with a structure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DsFinding {
    /// The pool's root word points outside the heap's data.
    Root(String),
    /// The structure does not open, or its walk breaks an invariant.
    Walk {
        /// The structure's name (a [`Structure`]'s, or `bytemap`).
        structure: &'static str,
        /// What is wrong, naming the record, block or sub-map.
        what: String,
    },
    /// A record whose own checks fail (its key or value damaged): the
    /// structure around it is sound, and removing the key removes it.
    Damaged {
        /// The structure's name.
        structure: &'static str,
        /// The key as stored, and what failed.
        what: String,
    },
    /// Its blocks against the heap's.
    Heap(HeapFinding),
}

impl DsFinding {
    /// `ds` or `heap`.
    pub fn component(&self) -> &'static str {
        match self {
            DsFinding::Heap(_) => "heap",
            DsFinding::Walk { .. } | DsFinding::Damaged { .. } | DsFinding::Root(_) => "ds",
        }
    }

    /// The finding's kind in the deep check's report: `ds-walk`,
    /// `ds-damaged`, `ds-root`, or the heap finding's.
    pub fn kind(&self) -> &'static str {
        match self {
            DsFinding::Walk { .. } => "ds-walk",
            DsFinding::Damaged { .. } => "ds-damaged",
            DsFinding::Root(_) => "ds-root",
            DsFinding::Heap(h) => h.kind(),
        }
    }
}

impl std::fmt::Display for DsFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DsFinding::Walk { structure, what } | DsFinding::Damaged { structure, what } => {
                write!(f, "{structure}: {what}")
            }
            DsFinding::Root(e) => e.fmt(f),
            DsFinding::Heap(h) => h.fmt(f),
        }
    }
}

/// What [`verify_pool`] found.
#[derive(Debug, Default)]
pub struct DsCheck {
    /// The transactional layer's findings (superblock, slots, recovery).
    pub tx: TxCheck,
    /// The structure at the root (its name: a [`Structure`]'s, or
    /// `bytemap`), when one was recognised.
    pub structure: Option<&'static str>,
    /// The root word (0 when none).
    pub root: u64,
    /// What is wrong with the structure (its walk, its blocks against the heap's).
    pub findings: Vec<DsFinding>,
    /// Keys and blocks the walk found.
    pub keys: usize,
    /// Blocks the walk reached.
    pub blocks: usize,
    /// Blocks the heap has allocated.
    pub allocated: usize,
}

/// The structure whose header magic starts `magic`.
pub fn structure_of(magic: &[u8]) -> Option<Structure> {
    [
        (hashmap::MAGIC, Structure::HashMap),
        (bptree::MAGIC, Structure::BpTree),
        (skiplist::MAGIC, Structure::SkipList),
        (rbtree::MAGIC, Structure::RbTree),
    ]
    .into_iter()
    .find(|(m, _)| magic.get(..8) == Some(&m[..]))
    .map(|(_, s)| s)
}

/// The structure (a [`Structure`]'s name or `bytemap`) whose magic
/// differs from `magic` in exactly one byte.
fn near_magic(magic: &[u8; 8]) -> Option<&'static str> {
    [
        (hashmap::MAGIC, "hashmap"),
        (bptree::MAGIC, "bptree"),
        (skiplist::MAGIC, "skiplist"),
        (rbtree::MAGIC, "rbtree"),
        (crate::bytemap::MAGIC, "bytemap"),
    ]
    .into_iter()
    .find(|(m, _)| m.iter().zip(magic).filter(|(a, b)| a != b).count() == 1)
    .map(|(_, n)| n)
}

/// Verifies the transactional pool in `copy` (recovery runs on it; pass
/// an in-memory copy of the pool). Never panics on any input.
pub fn verify_pool(copy: &Pool) -> DsCheck {
    let mut tx = ferrite_tx::verify::verify(copy, crate::registry());
    let txp = tx.pool.take();
    let mut out = DsCheck::default();
    if let Some(txp) = &txp {
        walk_root(txp, &mut out);
    }
    tx.pool = txp;
    out.tx = tx;
    out
}

fn walk_root(txp: &TxPool, out: &mut DsCheck) {
    let allocated = av::allocated(txp.heap());
    out.allocated = allocated.len();
    out.root = txp.root();
    if out.root == 0 {
        // No structure: every allocated block is unreachable.
        out.findings.extend(
            av::compare(&allocated, &[])
                .into_iter()
                .map(DsFinding::Heap),
        );
        return;
    }
    let mut magic = [0u8; 8];
    if txp.read(out.root, &mut magic).is_err() {
        out.findings.push(DsFinding::Root(format!(
            "root word {:#x} points outside the heap's data",
            out.root
        )));
        return;
    }
    // (keys, blocks) of the walk, or what broke it.
    type Walked = Result<(usize, Vec<(u64, u64)>), String>;
    let (name, walked): (&'static str, Walked) = if magic == crate::bytemap::MAGIC {
        let w = match crate::bytemap::ByteMap::open(txp, out.root) {
            Ok(m) => m.shape().map(|sh| {
                // Entries whose checks fail: one finding each, naming the
                // key as stored and the entry.
                for (e, k, what) in &sh.damaged {
                    out.findings.push(DsFinding::Damaged {
                        structure: "bytemap",
                        what: format!(
                            "record key {:?} (entry at {e:#x}): {what}",
                            String::from_utf8_lossy(k)
                        ),
                    });
                }
                (sh.entries.len() + sh.damaged.len(), sh.blocks)
            }),
            Err(e) => Err(format!("does not open: {e}")),
        };
        ("bytemap", w)
    } else if let Some(s) = structure_of(&magic) {
        let w = match crate::open(s, txp, out.root) {
            Ok(m) => m.shape().map(|sh| {
                // Records whose checksum fails: one finding each.
                for (k, what) in &sh.damaged {
                    out.findings.push(DsFinding::Damaged {
                        structure: s.name(),
                        what: format!("record key {k}: {what}"),
                    });
                }
                (sh.entries.len() + sh.damaged.len(), sh.blocks)
            }),
            Err(e) => Err(format!("does not open: {e}")),
        };
        (s.name(), w)
    } else {
        // Not a structure this crate knows, but one byte away from one's
        // magic: most likely that structure with a damaged header (an
        // application's own root block is not expected to look like it).
        if let Some(name) = near_magic(&magic) {
            out.findings.push(DsFinding::Root(format!(
                "root {:#x}: magic {:?} differs in one byte from the {name}'s: a damaged header",
                out.root,
                String::from_utf8_lossy(&magic)
            )));
        }
        return;
    };
    out.structure = Some(name);
    let shape = match walked {
        Ok(w) => w,
        Err(what) => {
            out.findings.push(DsFinding::Walk {
                structure: name,
                what,
            });
            return;
        }
    };
    out.keys = shape.0;
    out.blocks = shape.1.len();
    out.findings.extend(
        av::compare(&allocated, &shape.1)
            .into_iter()
            .map(DsFinding::Heap),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DsOptions;
    use ferrite_pmem::{Domain, PoolOptions};
    use ferrite_tx::{Strategy, TxOptions};

    fn copy(img: &[u8]) -> Pool {
        Pool::open_image(img, &PoolOptions::new("ds", 0), Domain::Volatile, None).unwrap()
    }

    /// The server's byte map is recognised and walked too: clean, then a
    /// block unlinked behind its back is reported as a leak.
    #[test]
    fn the_byte_map_is_walked_and_a_leak_found() {
        let pool = Pool::create_in_memory(&PoolOptions::new("ds", 16 << 20)).unwrap();
        let opts = TxOptions::new(Strategy::Clobber).slots(2);
        let txp = TxPool::create(&pool, &opts, crate::registry()).unwrap();
        let header = {
            let mut th = txp.thread().unwrap();
            let map = crate::bytemap::ByteMap::create(&mut th, 4, 4).unwrap();
            for k in 0..40u32 {
                map.put(&mut th, &k.to_le_bytes(), &[k as u8; 100]).unwrap();
            }
            map.header()
        };
        drop(txp);
        let c = verify_pool(&copy(&pool.image()));
        assert!(c.findings.is_empty(), "{:?}", c.findings);
        assert_eq!((c.structure, c.keys), (Some("bytemap"), 40));
        // Unlink sub-map 0's first chain by writing a (well-checked) null
        // link in its bucket word: its entries become unreachable.
        let txp = TxPool::open(&pool, crate::registry(), None).unwrap();
        let nonce = txp.read_u64(header + 40).unwrap();
        let link = |at| crate::hashmap::link_at(&txp, nonce, at, "test").unwrap();
        let sub = link(header + 64);
        let table = txp.read_u64(sub + 16).unwrap();
        let nb = txp.read_u64(sub + 8).unwrap();
        let b = (0..nb).find(|b| link(table + 8 * b) != 0).unwrap();
        drop(txp);
        let mut img = pool.image();
        let at = (table + 8 * b) as usize;
        img[at..at + 8].copy_from_slice(&crate::hashmap::enc_link(nonce, 0).to_le_bytes());
        let c = verify_pool(&copy(&img));
        assert!(
            c.findings.iter().any(|f| matches!(
                f,
                DsFinding::Walk {
                    structure: "bytemap",
                    ..
                }
            ) || matches!(f, DsFinding::Heap(HeapFinding::Leak { .. }))),
            "{:?}",
            c.findings
        );
    }

    #[test]
    fn every_structure_is_clean_then_a_leak_is_found() {
        for s in Structure::ALL {
            let pool = Pool::create_in_memory(&PoolOptions::new("ds", 16 << 20)).unwrap();
            let opts = TxOptions::new(Strategy::Redo).slots(2);
            let txp = TxPool::create(&pool, &opts, crate::registry()).unwrap();
            {
                let mut th = txp.thread().unwrap();
                let map = crate::create(s, &mut th, DsOptions::default()).unwrap();
                for k in 0..50 {
                    map.insert(&mut th, k, &[k as u8; 256]).unwrap();
                }
            }
            drop(txp);
            let c = verify_pool(&copy(&pool.image()));
            assert!(c.tx.findings.is_empty(), "{s}: {:?}", c.tx.findings);
            assert!(c.findings.is_empty(), "{s}: {:?}", c.findings);
            assert_eq!((c.structure, c.keys), (Some(s.name()), 50), "{s}");

            // Leak: a block allocated through the heap, never linked.
            let txp = TxPool::open(&pool, crate::registry(), None).unwrap();
            let leaked = {
                use ferrite_alloc::PAllocator;
                let mut t = txp.heap().thread().unwrap();
                t.alloc(64, None).unwrap().raw()
            };
            drop(txp);
            let c = verify_pool(&copy(&pool.image()));
            assert!(
                c.findings.iter().any(|f| matches!(
                    f,
                    DsFinding::Heap(HeapFinding::Leak { off, .. }) if *off == leaked
                )),
                "{s}: {:?}",
                c.findings
            );
        }
    }
}
