//! Random byte flips inside the records of the structures built on the
//! PTM (issue 27): the hash map's nodes, the red-black tree's nodes and
//! the B+tree's leaf entries — their key, value and check words. One flip
//! per trial, on a copy of a filled pool, reopened (recovery runs). After
//! each, every lookup of every key returns the stored value or
//! `PtmError::CorruptRecord` — never other bytes, never "absent" for a
//! key that is there; the damaged record's own lookup is refused; and the
//! structure's `check` (the walk a deep check runs) names it.
//!
//! The links (chains, children, parents, the leaf chain) carry no check
//! and are not flipped here.

use ferrite_pmem::{Domain, Pool, PoolOptions};
use ferrite_ptm::ds::bptree::PBTree;
use ferrite_ptm::ds::hash::PHashMap;
use ferrite_ptm::ds::rbtree::PRbTree;
use ferrite_ptm::{Algorithm, Ptm, PtmError, PtmOptions, PtmThread, Tx, TxResult};

/// Flips per structure.
const FLIPS: usize = 400;
const KEYS: u64 = 120;
const FANOUT: u64 = 8;

#[derive(Clone, Copy, Debug)]
enum Kind {
    Hash,
    RbTree,
    BpTree,
}

/// A structure opened in a transaction, behind one interface.
#[derive(Clone, Copy)]
enum Map {
    Hash(PHashMap),
    Rb(PRbTree),
    Bp(PBTree),
}

impl Map {
    fn open(kind: Kind, tx: &mut Tx<'_>, hdr: u64) -> TxResult<Map> {
        Ok(match kind {
            Kind::Hash => Map::Hash(PHashMap::open(tx, hdr)?),
            Kind::RbTree => Map::Rb(PRbTree::open(tx, hdr)?),
            Kind::BpTree => Map::Bp(PBTree::open(tx, hdr)?),
        })
    }

    fn get(&self, tx: &mut Tx<'_>, k: u64) -> TxResult<Option<u64>> {
        match self {
            Map::Hash(m) => m.get(tx, k),
            Map::Rb(m) => m.get(tx, k),
            Map::Bp(m) => m.get(tx, k),
        }
    }

    fn check(&self, th: &mut PtmThread<'_>) -> Result<u64, String> {
        match self {
            Map::Hash(m) => m.check(th),
            Map::Rb(m) => m.check(th),
            Map::Bp(m) => m.check(th),
        }
    }
}

fn key(i: u64) -> u64 {
    ferrite_ptm::ds::mix64(i + 1) | 1
}

fn value(i: u64) -> u64 {
    ferrite_ptm::ds::mix64(!(i + 1)) | 2
}

fn options() -> PtmOptions {
    let mut o = PtmOptions::new(Algorithm::Lazy);
    o.nonce = Some(7);
    o
}

/// Fills a fresh pool with one structure of `kind`; returns its image and
/// the header's offset.
fn filled(kind: Kind) -> (Vec<u8>, u64) {
    let pool = Pool::create_in_memory(&PoolOptions::new("ptm-flips", 8 << 20).domain(Domain::Adr))
        .unwrap();
    let ptm = Ptm::create(&pool, &options()).unwrap();
    let mut th = ptm.thread().unwrap();
    let hdr = th
        .atomic(|tx| {
            let m = match kind {
                Kind::Hash => Map::Hash(PHashMap::create_in(tx, 16)?),
                Kind::RbTree => Map::Rb(PRbTree::create_in(tx)?),
                Kind::BpTree => Map::Bp(PBTree::create_in(tx, FANOUT)?),
            };
            Ok(match m {
                Map::Hash(m) => m.header(),
                Map::Rb(m) => m.header(),
                Map::Bp(m) => m.header(),
            })
        })
        .unwrap();
    for i in 0..KEYS {
        th.atomic(|tx| {
            let m = Map::open(kind, tx, hdr)?;
            match m {
                Map::Hash(m) => m.insert(tx, key(i), value(i)).map(|_| ()),
                Map::Rb(m) => m.insert(tx, key(i), value(i)).map(|_| ()),
                Map::Bp(m) => m.insert(tx, key(i), value(i)).map(|_| ()),
            }
        })
        .unwrap();
    }
    let m = th.atomic(|tx| Map::open(kind, tx, hdr)).unwrap();
    assert_eq!(m.check(&mut th), Ok(KEYS));
    drop(th);
    drop(ptm);
    (pool.image(), hdr)
}

/// Bytes of the largest node (a B+tree node of fanout [`FANOUT`]).
const NODE_MAX: usize = ferrite_ptm::ds::bptree::node_bytes(FANOUT);

/// The node offset in a finding "… (node at 0x…)" or "… (node 0x… key i)".
fn node_in(line: &str) -> Option<usize> {
    let rest = &line[line.find("(node ")? + 6..];
    let rest = rest.strip_prefix("at ").unwrap_or(rest);
    let hex = rest.strip_prefix("0x")?;
    let end = hex
        .find(|c: char| !c.is_ascii_hexdigit())
        .unwrap_or(hex.len());
    usize::from_str_radix(&hex[..end], 16).ok()
}

fn word(img: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(img[at..at + 8].try_into().unwrap())
}

/// The B+tree's live leaf entries in the image: key → offset of its key
/// word (splits leave stale copies past a leaf's count: not records).
fn bptree_entries(img: &[u8], hdr: u64) -> std::collections::BTreeMap<u64, usize> {
    const LEAF: u64 = 1 << 63;
    let f = FANOUT as usize;
    let mut at = word(img, hdr as usize + 16) as usize;
    while word(img, at) & LEAF == 0 {
        at = word(img, at + 16 + 8 * f) as usize;
    }
    let mut out = std::collections::BTreeMap::new();
    while at != 0 {
        for i in 0..(word(img, at) & 0xFFFF_FFFF) as usize {
            out.insert(word(img, at + 16 + 8 * i), at + 16 + 8 * i);
        }
        at = word(img, at + 8) as usize;
    }
    out
}

/// The record words of key `i` in the image: (key word, value word,
/// check word) offsets, found by the layout of `kind` around the key.
fn record_words(kind: Kind, img: &[u8], hdr: u64, i: u64) -> [usize; 3] {
    let (k, v) = (key(i), value(i));
    let f = FANOUT as usize;
    if let Kind::BpTree = kind {
        let a = bptree_entries(img, hdr)[&k];
        assert_eq!(word(img, a + 8 * f), v);
        // Key i of a leaf at `a`: value at +8F, check at +16F + 8.
        return [a, a + 8 * f, a + 16 * f + 8];
    }
    let hits: Vec<usize> = (0..img.len() / 8)
        .map(|w| w * 8)
        .filter(|&a| word(img, a) == k)
        .filter(|&a| word(img, a + 8) == v)
        .collect();
    assert_eq!(hits.len(), 1, "{kind:?} key {i}: {hits:?}");
    let a = hits[0];
    match kind {
        Kind::Hash => [a, a + 8, a + 24],
        _ => [a, a + 8, a + 48],
    }
}

#[derive(Debug, Default)]
struct Figures {
    flips: usize,
    wrong_values: usize,
    lost_keys: usize,
    refused_by_read: usize,
    named_by_check: usize,
}

fn flips(kind: Kind, seed: u64) -> Figures {
    let (img, hdr) = filled(kind);
    let words: Vec<[usize; 3]> = (0..KEYS)
        .map(|i| record_words(kind, &img, hdr, i))
        .collect();
    let mut rng = seed;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut f = Figures::default();
    for _ in 0..FLIPS {
        let victim = next() % KEYS;
        let at = words[victim as usize][(next() % 3) as usize] + (next() % 8) as usize;
        let mask = 1 + (next() % 255) as u8;
        let mut bad = img.clone();
        bad[at] ^= mask;
        f.flips += 1;
        let pool =
            Pool::open_image(&bad, &PoolOptions::new("ptm-flips", 0), Domain::Adr, None).unwrap();
        let ptm = Ptm::open(&pool, &options()).unwrap();
        let mut th = ptm.thread().unwrap();
        let m = th.atomic(|tx| Map::open(kind, tx, hdr)).unwrap();
        for i in 0..KEYS {
            match th.atomic(|tx| m.get(tx, key(i))) {
                Ok(Some(v)) if v == value(i) => {}
                Ok(Some(_)) => f.wrong_values += 1,
                Ok(None) => f.lost_keys += 1,
                Err(PtmError::CorruptRecord { .. }) => {
                    if i == victim {
                        f.refused_by_read += 1;
                    }
                }
                Err(e) => panic!("{kind:?} key {i}: untyped damage {e}"),
            }
        }
        let key_at = words[victim as usize][0];
        match m.check(&mut th) {
            Ok(n) => panic!("{kind:?}: flip at {at:#x} not found by check ({n} entries)"),
            Err(e) => {
                // A record is named by its key or, when the key itself is
                // what changed, by the node holding it.
                let named = e.lines().any(|l| {
                    l.contains(&format!("record key {}: ", key(victim)))
                        || node_in(l).is_some_and(|n| n <= key_at && key_at < n + NODE_MAX)
                            && l.contains("key check mismatch")
                });
                f.named_by_check += usize::from(named);
            }
        }
        drop(th);
    }
    println!("{kind:?}: {f:?}");
    f
}

fn assert_all_caught(kind: Kind, f: &Figures) {
    assert_eq!(f.flips, FLIPS);
    assert_eq!(f.wrong_values, 0, "{kind:?}: wrong values returned");
    assert_eq!(f.lost_keys, 0, "{kind:?}: present keys read as absent");
    assert_eq!(f.refused_by_read, FLIPS, "{kind:?}: damaged records read");
    assert_eq!(
        f.named_by_check, FLIPS,
        "{kind:?}: damaged records not named"
    );
}

#[test]
fn hash_record_flips_are_refused_and_named() {
    assert_all_caught(Kind::Hash, &flips(Kind::Hash, 0x9e37_79b9_7f4a_7c15));
}

#[test]
fn rbtree_record_flips_are_refused_and_named() {
    assert_all_caught(Kind::RbTree, &flips(Kind::RbTree, 0x2545_f491_4f6c_dd1d));
}

#[test]
fn bptree_record_flips_are_refused_and_named() {
    assert_all_caught(Kind::BpTree, &flips(Kind::BpTree, 0x1234_5678_9abc_def1));
}
