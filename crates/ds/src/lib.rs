//! `ferrite-ds`: persistent data structures on `ferrite-tx` transactions
//! [P1 §3.4.2], each usable with any [`Strategy`](ferrite_tx::Strategy):
//! the same registered functions run under undo, redo, clobber and no-log.
//!
//! - [`hashmap`]: 256 sub-maps (PMDK's `hashmap_tx`, rehashing), one
//!   reader-writer lock each; 8-byte keys.
//! - [`bptree`]: a B+tree with 32-byte keys and per-node reader-writer
//!   locks.
//! - [`skiplist`]: 32 levels, one lock; 8-byte keys.
//! - [`rbtree`]: a red-black tree (parent pointers, Linux-style
//!   rebalancing), one reader-writer lock; 8-byte keys.
//! - [`bytemap`]: the hash map's table with byte-string keys and values
//!   of any length, written in batches (the server's `tx-*` stores).
//!
//! All store fixed-size values (256 bytes by default) and share the
//! [`KvMap`] interface the checks and benchmarks drive. Keys are given as
//! `u64`; the B+tree widens them to 32 bytes ([`bptree::key32`]).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bptree;
pub mod bytemap;
pub mod hashmap;
pub mod rbtree;
pub mod skiplist;
pub mod verify;

#[cfg(any(test, feature = "checks"))]
pub mod checks;

use ferrite_tx::{Registry, Result, TxError, TxPool, TxThread};
use std::collections::BTreeMap;

/// Which structure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Structure {
    /// PMDK's `hashmap_tx` layout in 256 sub-maps ([`hashmap`]).
    HashMap,
    /// A B+tree with 32-byte keys ([`bptree`]).
    BpTree,
    /// A skiplist ([`skiplist`]).
    SkipList,
    /// A red-black tree ([`rbtree`]).
    RbTree,
}

impl Structure {
    /// Every structure, in the order the checks and benchmarks run them.
    pub const ALL: [Structure; 4] = [
        Structure::HashMap,
        Structure::BpTree,
        Structure::SkipList,
        Structure::RbTree,
    ];

    /// The structure's name (`hashmap`, `bptree`, `skiplist`, `rbtree`): in check targets, reports and findings.
    pub fn name(self) -> &'static str {
        match self {
            Structure::HashMap => "hashmap",
            Structure::BpTree => "bptree",
            Structure::SkipList => "skiplist",
            Structure::RbTree => "rbtree",
        }
    }

    /// The structure named `s` ([`Structure::name`]), if any.
    pub fn parse(s: &str) -> Option<Structure> {
        Structure::ALL.into_iter().find(|x| x.name() == s)
    }
}

impl std::fmt::Display for Structure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a structure holds, read back by walking it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// Key → value.
    pub entries: BTreeMap<u64, Vec<u8>>,
    /// Every block the structure references: (pool offset, bytes it needs).
    pub blocks: Vec<(u64, u64)>,
    /// Records whose checksum fails: (key as stored, what), not in
    /// `entries`.
    pub damaged: Vec<(u64, String)>,
}

/// The interface the checks and benchmarks drive.
pub trait KvMap: Send + Sync {
    /// Which structure this is.
    fn structure(&self) -> Structure;
    /// Inserts or updates; true when the key was new.
    fn insert(&self, th: &mut TxThread<'_>, key: u64, value: &[u8]) -> Result<bool>;
    /// Removes; true when the key was there.
    fn remove(&self, th: &mut TxThread<'_>, key: u64) -> Result<bool>;
    /// Looks a key up (under the structure's read locks, no transaction).
    fn get(&self, key: u64) -> Result<Option<Vec<u8>>>;
    /// Walks the whole structure checking every invariant; returns its
    /// contents and blocks, or what is wrong.
    fn shape(&self) -> std::result::Result<Shape, String>;
    /// Pool offset of the structure's header block.
    fn header(&self) -> u64;
    /// Bytes of every value.
    fn value_len(&self) -> usize;
    /// Named event counters of this handle (DRAM only, since it was
    /// opened), e.g. the B+tree's rebalancing; none by default.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// The lock group of `key`: `Some(g)` when every lock an operation on
    /// `key` takes is the one lock of group `g` (so operations on keys of
    /// different groups never wait for each other), `None` when the
    /// locks an operation takes may be shared with any other operation
    /// (one structure-wide lock, or lock paths that depend on the shape).
    /// Schedulers that must never block on these locks (the interleaved
    /// crash checks) run two operations at once only on different groups.
    fn lock_group(&self, _key: u64) -> Option<u64> {
        None
    }
}

/// Options shared by the structures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DsOptions {
    /// Bytes of every value (1..=4096).
    pub value_len: usize,
    /// Hash map: sub-maps (a power of two, at most 256).
    pub subs: usize,
    /// Hash map: initial buckets per sub-map (a power of two).
    pub buckets: usize,
    /// B+tree: keys per node (3..=64).
    pub fanout: usize,
    /// Skiplist: levels (1..=32).
    pub levels: usize,
}

impl Default for DsOptions {
    fn default() -> Self {
        DsOptions {
            value_len: 256,
            subs: 256,
            buckets: 16,
            fanout: 16,
            levels: 32,
        }
    }
}

/// Every structure's transaction functions.
pub fn registry() -> Registry {
    let mut r = Registry::new();
    for f in hashmap::FUNCS
        .iter()
        .chain(bytemap::FUNCS.iter())
        .chain(bptree::FUNCS.iter())
        .chain(skiplist::FUNCS.iter())
        .chain(rbtree::FUNCS.iter())
    {
        r.register(f).expect("structure function ids are distinct");
    }
    r
}

/// Creates an empty structure of kind `s` and makes it the pool's root.
pub fn create<'p>(
    s: Structure,
    th: &mut TxThread<'p>,
    opts: DsOptions,
) -> Result<Box<dyn KvMap + 'p>> {
    Ok(match s {
        Structure::HashMap => Box::new(hashmap::HashMap::create(th, opts)?),
        Structure::BpTree => Box::new(bptree::BpTree::create(th, opts)?),
        Structure::SkipList => Box::new(skiplist::SkipList::create(th, opts)?),
        Structure::RbTree => Box::new(rbtree::RbTree::create(th, opts)?),
    })
}

/// Opens the structure of kind `s` whose header is at pool offset `header`.
pub fn open<'p>(s: Structure, txp: &'p TxPool, header: u64) -> Result<Box<dyn KvMap + 'p>> {
    Ok(match s {
        Structure::HashMap => Box::new(hashmap::HashMap::open(txp, header)?),
        Structure::BpTree => Box::new(bptree::BpTree::open(txp, header)?),
        Structure::SkipList => Box::new(skiplist::SkipList::open(txp, header)?),
        Structure::RbTree => Box::new(rbtree::RbTree::open(txp, header)?),
    })
}

/// splitmix64: the keys' hash (deterministic, so recovery and the PMDK
/// baseline agree with it).
/// Refuses a value whose length is not the structure's fixed `expected`
/// (`what` names the structure in the error: "map", "tree", "list").
pub fn check_value_len(value: &[u8], expected: usize, what: &str) -> Result<()> {
    if value.len() != expected {
        return Err(TxError::BadOption(format!(
            "value of {} bytes, the {what} stores {expected}",
            value.len()
        )));
    }
    Ok(())
}

/// splitmix64's finaliser (with its increment): the keys' hash, deterministic, so recovery, every open and the PMDK baseline agree on it.
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Little-endian u64 at byte `i` of `b`.
pub fn le(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

/// Reads `n` bytes at pool offset `off` outside a transaction.
pub(crate) fn peek(txp: &TxPool, off: u64, n: usize) -> Result<Vec<u8>> {
    let mut v = vec![0u8; n];
    txp.read(off, &mut v)?;
    Ok(v)
}

/// Format version 2 of the rbtree, skiplist and B+tree headers: the first
/// through [`ferrite_pmem::superblock`] (version 1 had no version and no
/// checksum). Each structure now writes its own version 3
/// ([`rbtree::VERSION`], [`skiplist::VERSION`], [`bptree::VERSION`]: its
/// records carry a checksum) and refuses 1 and 2 with
/// [`TxError::HeaderVersion`].
pub const HEADER_VERSION: u16 = 2;

/// A structure's 64-byte header: the [`ferrite_pmem::superblock`] frame
/// (magic 0..8, version 8..10, CRC32C at 60..64) with the structure's
/// `mutable` words (one range) — its root and count, updated in place by every
/// transaction that changes them, under the transaction's log — left out
/// of the checksum.
pub(crate) struct Header {
    pub magic: [u8; 8],
    /// Name in errors (`rbtree`, …).
    pub name: &'static str,
    pub mutable: std::ops::Range<usize>,
    /// The format version this build writes and reads
    /// ([`HEADER_VERSION`], or the structure's own when its nodes changed).
    pub version: u16,
}

impl Header {
    /// A new header with `fields` (offset, value) set and its checksum sealed.
    pub fn encode(&self, fields: &[(usize, u64)]) -> [u8; 64] {
        let mut w = ferrite_pmem::SuperblockWriter::new(&self.magic, self.version);
        for &(at, v) in fields {
            w.u64(at, v);
        }
        w.seal_masked(std::slice::from_ref(&self.mutable))
    }

    /// Reads and validates the header at pool offset `at`: magic, then the
    /// checksum (a header whose checksum field is zero is a version-1
    /// header, which had none), then the version. Returns its 64 bytes.
    pub fn read(&self, txp: &TxPool, at: u64) -> Result<Vec<u8>> {
        let h = peek(txp, at, 64)?;
        let view = ferrite_pmem::SuperblockView::new(&h).expect("64 bytes");
        if !view.has_magic(&self.magic) {
            return Err(TxError::Corrupt(format!(
                "no {} at {at:#x}",
                String::from_utf8_lossy(&self.magic)
            )));
        }
        let old = |found| TxError::HeaderVersion {
            structure: self.name,
            at,
            found,
            supported: self.version,
        };
        if let Err(e) = view.checksum_masked(std::slice::from_ref(&self.mutable)) {
            if e.stored == 0 {
                return Err(old(1));
            }
            return Err(TxError::HeaderChecksum {
                structure: self.name,
                at,
                stored: e.stored,
                computed: e.computed,
            });
        }
        if view.version() != self.version {
            return Err(old(view.version()));
        }
        Ok(h)
    }
}
