//! Random byte flips in the items of real server pool files (issue 27's
//! flip test, for the server's stores whose map does not checksum values
//! itself: `tx-undo` and `ptm-eager`).
//!
//! A pool file is filled through the server's [`Cache`] with items of
//! random data; the bytes of every item as stored (header, checksum, data
//! and, where the map keeps it right before, the map key) are located in
//! the file — each exactly once, so every flip lands in live item bytes.
//! Each round flips 100 random bytes of those (XOR a nonzero byte) in a
//! copy of the file, reopens it and:
//!
//! - reads every key through the [`Cache`]: each read returns the item's
//!   right data or a typed error ([`StoreError::Damaged`]); 0 wrong values.
//!   A flipped key makes its item unreachable under its own key (a miss),
//!   which is counted apart;
//! - walks the map with [`verify_items`] (what `ferrite pool check --deep`
//!   runs): the items reported damaged are exactly the items hit, the
//!   ones hit only in their value named by their own key.
//!
//! 10 rounds of 100 flips per store: 1000 flips each.

use ferrite_pmem::{Domain, Pool, PoolOptions};
use ferrite_ptm::{Algorithm, Ptm, PtmOptions};
use ferrite_server::protocol::{StoreMode, StoreOpts};
use ferrite_server::store::{Cache, Kv, Shared, Store, StoreError, ptm, tx, verify_items};
use ferrite_tx::Strategy;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const NOW: u64 = 1_800_000_000;
const ITEMS: usize = 300;
const ROUNDS: usize = 10;
const FLIPS: usize = 100;

#[derive(Clone, Copy, Debug)]
enum Kind {
    TxUndo,
    PtmEager,
}

const TX_LAYOUT: &str = "ferrite-serve-tx";
const PTM_LAYOUT: &str = "ferrite-serve-ptm-eager";

fn ptm_opts() -> PtmOptions {
    PtmOptions::new(Algorithm::Eager).slots(4)
}

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

fn client_key(i: usize) -> Vec<u8> {
    format!("item:{i:04}").into_bytes()
}

/// Runs `f` on the cache of the pool file at `path` (opening or creating).
fn with_cache<T>(
    kind: Kind,
    path: &Path,
    create: bool,
    f: &mut dyn FnMut(&mut dyn Store, &mut dyn Kv) -> T,
) -> T {
    match kind {
        Kind::TxUndo => {
            let pool = if create {
                Pool::create(
                    path,
                    &PoolOptions::new(TX_LAYOUT, 24 << 20).domain(Domain::Adr),
                )
            } else {
                Pool::open(path, &PoolOptions::new(TX_LAYOUT, 0))
            }
            .unwrap();
            let txp = if create {
                tx::create(&pool, Strategy::Undo, 4).unwrap()
            } else {
                tx::open(&pool).unwrap()
            };
            let map = tx::map(&txp).unwrap();
            let mut kv = tx::TxKv::new(&map).unwrap();
            let sh = Shared::open(&mut kv, 1 << 20).unwrap();
            let mut c = Cache::new(kv, &sh);
            let mut raw = tx::TxKv::new(&map).unwrap();
            f(&mut c, &mut raw)
        }
        Kind::PtmEager => {
            let pool = if create {
                Pool::create(
                    path,
                    &PoolOptions::new(PTM_LAYOUT, 8 << 20).domain(Domain::Adr),
                )
            } else {
                Pool::open(path, &PoolOptions::new(PTM_LAYOUT, 0))
            }
            .unwrap();
            let p = if create {
                Ptm::create(&pool, &ptm_opts()).unwrap()
            } else {
                Ptm::open(&pool, &ptm_opts()).unwrap()
            };
            let map = ptm::open_map(&p).unwrap();
            let mut kv = ptm::PtmKv::new(&p, map).unwrap();
            let sh = Shared::open(&mut kv, 1 << 20).unwrap();
            let mut c = Cache::new(kv, &sh);
            let mut raw = ptm::PtmKv::new(&p, map).unwrap();
            f(&mut c, &mut raw)
        }
    }
}

/// Where item `i`'s bytes lie in the file: (start, end, where its value
/// starts: bytes before it are its map key).
type Regions = Vec<(usize, usize, usize)>;

fn fill(kind: Kind, path: &Path, rng: &mut Rng) -> (BTreeMap<Vec<u8>, Vec<u8>>, Regions) {
    let mut data = BTreeMap::new();
    let stored: Vec<(Vec<u8>, Vec<u8>)> = with_cache(kind, path, true, &mut |c, raw| {
        let o = StoreOpts::default();
        for i in 0..ITEMS {
            let len = 16 + rng.below(300) as usize;
            let v: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            c.store(StoreMode::Set, &client_key(i), 7, 0, &v, None, &o, NOW)
                .unwrap();
            data.insert(client_key(i), v);
        }
        let mut all = Vec::new();
        raw.scan_prefix(b"k", &mut |k, v| all.push((k.to_vec(), v.to_vec())))
            .unwrap();
        all
    });
    assert_eq!(stored.len(), ITEMS);
    // In key order, as `data` (the scan runs in the map's order).
    let mut stored = stored;
    stored.sort();
    let image = std::fs::read(path).unwrap();
    let mut regions = Vec::new();
    for (map_key, value) in &stored {
        let at: Vec<usize> = memchr_all(&image, value);
        assert_eq!(
            at.len(),
            1,
            "{kind:?}: an item's bytes are in the file {} times",
            at.len()
        );
        let v = at[0];
        // The byte map keeps the key right before the value, the PTM's
        // map zero-padded to 8 bytes.
        let start = [map_key.len(), map_key.len().next_multiple_of(8)]
            .into_iter()
            .find(|&back| v >= back && image[v - back..v - back + map_key.len()] == map_key[..])
            .map_or(v, |back| v - back);
        regions.push((start, v + value.len(), v));
    }
    (data, regions)
}

fn memchr_all(hay: &[u8], needle: &[u8]) -> Vec<usize> {
    hay.windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect()
}

fn flips(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("items.pool");
    let mut rng = Rng(0x1234_5678_9abc_def1 ^ kind as u64);
    let (data, regions) = fill(kind, &path, &mut rng);
    let keys: Vec<Vec<u8>> = data.keys().cloned().collect();
    let pristine = std::fs::read(&path).unwrap();
    let used: usize = regions.iter().map(|r| r.1 - r.0).sum();
    let (mut wrong, mut errors, mut vanished, mut flipped, mut hit_total) = (0, 0, 0, 0, 0);
    for round in 0..ROUNDS {
        let mut image = pristine.clone();
        // Item index -> (a key byte was hit, a value byte was hit).
        let mut hit: BTreeMap<usize, (bool, bool)> = BTreeMap::new();
        let mut done = 0;
        while done < FLIPS {
            let mut off = rng.below(used as u64) as usize;
            let (i, r) = regions
                .iter()
                .enumerate()
                .find(|(_, r)| {
                    if off < r.1 - r.0 {
                        true
                    } else {
                        off -= r.1 - r.0;
                        false
                    }
                })
                .unwrap();
            let at = r.0 + off;
            // The PTM's key padding is not read: not a used byte; draw
            // again.
            if at < r.2 && at >= r.0 + (keys[i].len() + 1) {
                continue;
            }
            image[at] ^= 1 + rng.below(255) as u8;
            let e = hit.entry(i).or_default();
            if at < r.2 {
                e.0 = true;
            } else {
                e.1 = true;
            }
            flipped += 1;
            done += 1;
        }
        // A key whose flips cancelled out is not damaged.
        hit.retain(|&i, _| {
            image[regions[i].0..regions[i].1] != pristine[regions[i].0..regions[i].1]
        });
        hit_total += hit.len();
        std::fs::write(&path, &image).unwrap();
        let (reads, reported) = with_cache(kind, &path, false, &mut |c, raw| {
            let reads: Vec<Result<Option<Vec<u8>>, StoreError>> = keys
                .iter()
                .map(|k| c.get(k, NOW).map(|o| o.map(|it| it.data)))
                .collect();
            let reported = verify_items(raw).unwrap().damaged;
            (reads, reported)
        });
        for (i, r) in reads.iter().enumerate() {
            let k = &keys[i];
            match r {
                Ok(Some(v)) if *v == data[k] => {}
                Ok(Some(_)) => wrong += 1,
                Err(StoreError::Damaged { key, .. }) => {
                    assert_eq!(key.as_bytes(), &k[..], "the error names another key");
                    assert!(
                        hit.contains_key(&i),
                        "round {round}: intact {key} reported damaged"
                    );
                    errors += 1;
                }
                Err(e) => panic!("round {round}: untyped error {e}"),
                Ok(None) => {
                    assert!(
                        hit.get(&i).is_some_and(|h| h.0),
                        "round {round}: {k:?} vanished"
                    );
                    vanished += 1;
                }
            }
        }
        assert_eq!(
            reported.len(),
            hit.len(),
            "round {round}: the walk reported {reported:?}"
        );
        let named: BTreeSet<&str> = reported.iter().map(|(k, _)| k.as_str()).collect();
        for (&i, &(key_hit, _)) in &hit {
            if !key_hit {
                let k = std::str::from_utf8(&keys[i]).unwrap();
                assert!(named.contains(k), "round {round}: {k} not reported");
            }
        }
    }
    std::fs::remove_file(&path).unwrap();
    println!(
        "{kind:?}: {flipped} flips over {ROUNDS} rounds in {used} bytes of {ITEMS} items; {hit_total} items damaged: {errors} reads refused, {vanished} keys unreachable (key bytes hit), {wrong} wrong values; all {hit_total} reported by the walk"
    );
    assert_eq!(wrong, 0, "{kind:?}: wrong values returned");
    assert_eq!(flipped, ROUNDS * FLIPS);
}

#[test]
fn flips_in_tx_undo_items_are_refused_and_reported() {
    flips(Kind::TxUndo);
}

#[test]
fn flips_in_ptm_eager_items_are_refused_and_reported() {
    flips(Kind::PtmEager);
}
