//! Random byte flips inside the used bytes of a hash map and a byte map
//! (issue 27): one flip per trial, on a copy of a filled pool. After each,
//! every read of every key returns the stored value or a typed
//! `Corrupt` error — never other bytes, and never "absent" for a key that
//! is there; the key whose record (key, value, checks) the flip hit is
//! refused by its read and named by the deep check's walk
//! (`ds::verify::verify_pool`); and the walk reports every flip (a link,
//! a table, a sub-map header's count or checksum, the header: a finding
//! of its own).
//!
//! "Used bytes" are the bytes the walk says each block needs
//! ([`ds::Shape::blocks`]), less a sub-map header's 36 reserved bytes.

use ferrite_ds::bytemap::{self, ByteMap};
use ferrite_ds::{self as ds, DsOptions, Structure, hashmap};
use ferrite_pmem::{Domain, Pool, PoolOptions};
use ferrite_tx::{Strategy, TxError, TxOptions, TxPool};
use std::collections::BTreeMap;

/// Flips per structure.
const FLIPS: usize = 1000;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn pool(mib: u64) -> Pool {
    Pool::create_in_memory(&PoolOptions::new("flips", mib << 20).domain(Domain::Adr)).unwrap()
}

fn copy(img: &[u8]) -> Pool {
    Pool::open_image(img, &PoolOptions::new("flips", 0), Domain::Volatile, None).unwrap()
}

/// What a flip hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hit {
    /// A record's own bytes (key, hash, lengths, checks, value) of the
    /// entry at this offset.
    Record(u64),
    /// Anything else: a link word, a table, a sub-map header, the header.
    Structure,
}

/// The used bytes of every block of a walk: (offset, bytes). Sub-map
/// headers (the 64-byte blocks `subs` linked from the header) use only
/// bytes 0..28.
fn used(blocks: &[(u64, u64)], subs: &[u64]) -> Vec<(u64, u64)> {
    blocks
        .iter()
        .map(|&(off, n)| (off, if subs.contains(&off) { 28 } else { n }))
        .collect()
}

/// Picks a uniformly random used byte.
fn pick(rng: &mut Rng, regions: &[(u64, u64)]) -> u64 {
    let total: u64 = regions.iter().map(|r| r.1).sum();
    let mut i = rng.below(total);
    for &(off, n) in regions {
        if i < n {
            return off + i;
        }
        i -= n;
    }
    unreachable!()
}

/// Counts printed at the end of each test.
#[derive(Default, Debug)]
struct Figures {
    flips: usize,
    record_flips: usize,
    wrong_values: usize,
    lost_keys: usize,
    records_refused_by_read: usize,
    records_named_by_walk: usize,
    flips_found_by_walk: usize,
}

impl Figures {
    fn assert_all_caught(&self, what: &str) {
        println!("{what}: {self:?}");
        assert_eq!(self.flips, FLIPS);
        assert_eq!(self.wrong_values, 0, "{what}: wrong values returned");
        assert_eq!(self.lost_keys, 0, "{what}: present keys read as absent");
        assert_eq!(
            self.records_refused_by_read, self.record_flips,
            "{what}: damaged records read without an error"
        );
        assert_eq!(
            self.records_named_by_walk, self.record_flips,
            "{what}: damaged records the deep check's walk did not name"
        );
        assert_eq!(
            self.flips_found_by_walk, self.flips,
            "{what}: flips the deep check's walk did not report"
        );
        assert!(
            self.record_flips > FLIPS / 2,
            "{what}: too few record flips"
        );
    }
}

/// The link word's offset (bits 0..48).
fn off_of(w: u64) -> u64 {
    w & ((1 << 48) - 1)
}

fn le(img: &[u8], at: u64) -> u64 {
    u64::from_le_bytes(img[at as usize..at as usize + 8].try_into().unwrap())
}

fn hash_value(k: u64, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (k as u8).wrapping_mul(13) ^ i as u8)
        .collect()
}

#[test]
fn hashmap_flips_are_refused_by_reads_and_named_by_the_walk() {
    let p = pool(4);
    let txp = TxPool::create(
        &p,
        &TxOptions::new(Strategy::Undo).slots(2).nonce(7),
        ds::registry(),
    )
    .unwrap();
    let opts = DsOptions {
        value_len: 32,
        subs: 4,
        buckets: 2,
        ..DsOptions::default()
    };
    let mut model = BTreeMap::new();
    let header = {
        let mut th = txp.thread().unwrap();
        let m = ds::create(Structure::HashMap, &mut th, opts).unwrap();
        for k in 1..=150u64 {
            m.insert(&mut th, k * 7919, &hash_value(k, 32)).unwrap();
            model.insert(k * 7919, hash_value(k, 32));
        }
        for k in (1..=150u64).step_by(5) {
            m.remove(&mut th, k * 7919).unwrap();
            model.remove(&(k * 7919));
        }
        for k in (3..=150u64).step_by(7) {
            m.insert(&mut th, k * 7919, &hash_value(k + 1, 32)).unwrap();
            model.insert(k * 7919, hash_value(k + 1, 32));
        }
        m.header()
    };
    let shape = ds::open(Structure::HashMap, &txp, header)
        .unwrap()
        .shape()
        .unwrap();
    assert_eq!(shape.entries, model);
    drop(txp);
    let img = p.image();
    let subs: Vec<u64> = (0..4)
        .map(|s| off_of(le(&img, header + 64 + 8 * s)))
        .collect();
    // Entries: the blocks of 24 + 32 bytes.
    let entry_of: BTreeMap<u64, u64> = shape
        .blocks
        .iter()
        .filter(|b| b.1 == hashmap::ENTRY_HDR + 32)
        .map(|b| (b.0, le(&img, b.0)))
        .collect();
    assert_eq!(entry_of.len(), model.len());
    let regions = used(&shape.blocks, &subs);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut f = Figures::default();
    for _ in 0..FLIPS {
        let at = pick(&mut rng, &regions);
        let mask = 1 + rng.below(255) as u8;
        let hit = match entry_of.range(..=at).next_back() {
            Some((&e, _)) if at < e + hashmap::ENTRY_HDR + 32 && !(e + 8..e + 16).contains(&at) => {
                Hit::Record(e)
            }
            _ => Hit::Structure,
        };
        let mut bad = img.clone();
        bad[at as usize] ^= mask;
        f.flips += 1;
        let copy_pool = copy(&bad);
        let txp = TxPool::open(&copy_pool, ds::registry(), None).unwrap();
        let mut refused = false;
        match ds::open(Structure::HashMap, &txp, header) {
            // A damaged header frame: nothing is read through it.
            Err(e) => {
                assert!(
                    matches!(
                        e,
                        TxError::HeaderChecksum { .. }
                            | TxError::HeaderVersion { .. }
                            | TxError::Corrupt(_)
                    ),
                    "{e}"
                );
                refused = true;
            }
            Ok(m) => {
                for (k, v) in &model {
                    match m.get(*k) {
                        Ok(Some(got)) if &got == v => {}
                        Ok(Some(_)) => f.wrong_values += 1,
                        Ok(None) => f.lost_keys += 1,
                        Err(TxError::Corrupt(_)) => {
                            if let Hit::Record(e) = hit
                                && entry_of[&e] == *k
                            {
                                refused = true;
                            }
                        }
                        Err(e) => panic!("key {k}: untyped damage {e}"),
                    }
                }
                // An absent key is absent or refused, never a value.
                for k in [1u64, 2, 3, 7919 * 200] {
                    assert!(!matches!(m.get(k), Ok(Some(_))));
                }
            }
        }
        if let Hit::Record(_) = hit {
            f.record_flips += 1;
            f.records_refused_by_read += usize::from(refused);
        }
        drop(txp);
        let c = ds::verify::verify_pool(&copy(&bad));
        let found: Vec<String> = c.findings.iter().map(|x| x.to_string()).collect();
        let tx_found = !c.tx.findings.is_empty();
        f.flips_found_by_walk += usize::from(!found.is_empty() || tx_found);
        if let Hit::Record(e) = hit {
            let k = entry_of[&e];
            let named = found.iter().any(|x| {
                x.starts_with(&format!("hashmap: record key {k}: "))
                    || x.contains(&format!("(entry at {e:#x})"))
            });
            f.records_named_by_walk += usize::from(named);
        }
    }
    f.assert_all_caught("hashmap");
}

#[test]
fn bytemap_flips_are_refused_by_reads_and_named_by_the_walk() {
    let p = pool(4);
    let txp = TxPool::create(
        &p,
        &TxOptions::new(Strategy::Redo).slots(2).nonce(7),
        ds::registry(),
    )
    .unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let header = {
        let mut th = txp.thread().unwrap();
        let m = ByteMap::create(&mut th, 4, 2).unwrap();
        for i in 0..150u64 {
            let k = format!("key-{i}").into_bytes();
            let v = hash_value(i, (i as usize * 37) % 90);
            m.put(&mut th, &k, &v).unwrap();
            model.insert(k, v);
        }
        for i in (0..150u64).step_by(6) {
            let k = format!("key-{i}").into_bytes();
            m.remove(&mut th, &k).unwrap();
            model.remove(&k);
        }
        m.header()
    };
    let shape = ByteMap::open(&txp, header).unwrap().shape().unwrap();
    assert_eq!(shape.entries, model);
    drop(txp);
    let img = p.image();
    let subs: Vec<u64> = (0..4)
        .map(|s| off_of(le(&img, header + 64 + 8 * s)))
        .collect();
    // Entries: the blocks whose first word is the hash of the key they hold.
    let entry_of: BTreeMap<u64, (Vec<u8>, u64)> = shape
        .blocks
        .iter()
        .filter_map(|&(off, n)| {
            let klen = u32::from_le_bytes(
                img[off as usize + 16..off as usize + 20]
                    .try_into()
                    .unwrap(),
            );
            let start = (off + bytemap::ENTRY_HDR) as usize;
            let k = img.get(start..start + klen as usize)?.to_vec();
            (model.contains_key(&k) && le(&img, off) == bytemap::hash_bytes(&k))
                .then_some((off, (k, n)))
        })
        .collect();
    assert_eq!(entry_of.len(), model.len());
    let regions = used(&shape.blocks, &subs);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut f = Figures::default();
    let mut out = Vec::new();
    for _ in 0..FLIPS {
        let at = pick(&mut rng, &regions);
        let mask = 1 + rng.below(255) as u8;
        let hit = match entry_of.range(..=at).next_back() {
            Some((&e, (_, n))) if at < e + n && !(e + 8..e + 16).contains(&at) => Hit::Record(e),
            _ => Hit::Structure,
        };
        let mut bad = img.clone();
        bad[at as usize] ^= mask;
        f.flips += 1;
        let copy_pool = copy(&bad);
        let txp = TxPool::open(&copy_pool, ds::registry(), None).unwrap();
        let mut refused = false;
        match ByteMap::open(&txp, header) {
            Err(e) => {
                assert!(
                    matches!(
                        e,
                        TxError::HeaderChecksum { .. }
                            | TxError::HeaderVersion { .. }
                            | TxError::Corrupt(_)
                    ),
                    "{e}"
                );
                refused = true;
            }
            Ok(m) => {
                for (k, v) in &model {
                    match m.get_into(k, &mut out) {
                        Ok(true) if &out == v => {}
                        Ok(true) => f.wrong_values += 1,
                        Ok(false) => f.lost_keys += 1,
                        Err(TxError::Corrupt(_)) => {
                            assert!(out.is_empty(), "bytes left in `out` with an error");
                            if let Hit::Record(e) = hit
                                && &entry_of[&e].0 == k
                            {
                                refused = true;
                            }
                        }
                        Err(e) => panic!("key {k:?}: untyped damage {e}"),
                    }
                }
                for k in [&b"key-0"[..], b"absent", b"key-1000"] {
                    assert!(!matches!(m.get_into(k, &mut out), Ok(true)));
                }
                // A scan returns exactly the stored pairs, or an error.
                let mut seen = BTreeMap::new();
                match m.scan_prefix(b"", &mut |k, v| {
                    seen.insert(k.to_vec(), v.to_vec());
                }) {
                    Ok(()) => {
                        if seen != model {
                            f.wrong_values += 1;
                        }
                    }
                    Err(TxError::Corrupt(_)) => {}
                    Err(e) => panic!("scan: untyped damage {e}"),
                }
            }
        }
        if let Hit::Record(_) = hit {
            f.record_flips += 1;
            f.records_refused_by_read += usize::from(refused);
        }
        drop(txp);
        let c = ds::verify::verify_pool(&copy(&bad));
        let found: Vec<String> = c.findings.iter().map(|x| x.to_string()).collect();
        f.flips_found_by_walk += usize::from(!found.is_empty() || !c.tx.findings.is_empty());
        if let Hit::Record(e) = hit {
            let named = found.iter().any(|x| {
                x.starts_with("bytemap: record key") && x.contains(&format!("(entry at {e:#x})"))
            });
            f.records_named_by_walk += usize::from(named);
        }
    }
    f.assert_all_caught("bytemap");
}
