//! The PMDK byte map (`ferrite_pmdk::bytemap`, the server store
//! `pmdk-undo`): agreement with a model, reopening, aborted transactions
//! (planted, and a batch that runs out of pool midway) leaving the map
//! unchanged, bad input, damaged pools, threads. Pools in /dev/shm.
#![cfg(feature = "link")]

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use ferrite_pmdk::bytemap::{self, MAX_KEY, MAX_SUBS, MAX_VALUE, PmemByteMap};
use ferrite_pmdk::{Error, PmemObj, SHM_DIR};
use tempfile::TempDir;

fn shm_dir() -> TempDir {
    tempfile::Builder::new()
        .prefix("ferrite-pmdk-bytemap-")
        .tempdir_in(SHM_DIR)
        .expect("tempdir under /dev/shm")
}

const POOL: usize = 64 << 20;

/// Everything in the map, by a full scan.
fn contents(m: &PmemByteMap) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut all = BTreeMap::new();
    m.scan_prefix(b"", &mut |k, v| {
        assert!(all.insert(k.to_vec(), v.to_vec()).is_none(), "key twice");
    })
    .unwrap();
    all
}

/// A deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn key(i: u64) -> Vec<u8> {
    // Lengths 1..=MAX_KEY, some keys sharing prefixes.
    let len = 1 + (i * 37 % MAX_KEY as u64) as usize;
    let mut k = format!("k{i}:").into_bytes();
    k.resize(len.max(k.len()).min(MAX_KEY), b'.');
    k
}

#[test]
fn the_shims_limits_are_the_rust_constants() {
    assert_eq!(PmemByteMap::shim_limits(), (MAX_KEY, MAX_VALUE, MAX_SUBS));
}

#[test]
fn the_hash_is_ferrite_ds_hash_bytes() {
    // FNV-1a, then h ^ (h >> 29): computed here independently.
    let fnv = |k: &[u8]| {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in k {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^ (h >> 29)
    };
    for k in [&b"a"[..], b"kfoo", &[0u8; 251], b"\0cas"] {
        assert_eq!(bytemap::hash(k), fnv(k));
    }
}

#[test]
fn puts_deletes_batches_and_doubling_agree_with_a_model() {
    let dir = shm_dir();
    // 4 sub-maps of one bucket: they double many times.
    let m = PmemByteMap::create(&dir.path().join("map"), POOL, 4, 1).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for round in 0..3000u64 {
        let r = rng.next();
        let k = key(r % 500);
        match r % 10 {
            0..=5 => {
                let v = vec![(round % 251) as u8; (r >> 20) as usize % 300];
                assert_eq!(m.put(&k, &v).unwrap(), model.insert(k, v).is_some());
            }
            6..=7 => assert_eq!(m.delete(&k).unwrap(), model.remove(&k).is_some()),
            _ => {
                // A batch touching one key twice: the later op wins, and
                // `present` counts each op that found its key.
                let k2 = key((r >> 8) % 500);
                let v1 = vec![1u8; 5];
                let v2 = vec![2u8; (r >> 30) as usize % 64];
                let ops: Vec<(&[u8], Option<&[u8]>)> = vec![
                    (k.as_slice(), Some(v1.as_slice())),
                    (k2.as_slice(), None),
                    (k.as_slice(), Some(v2.as_slice())),
                ];
                let mut want = 0;
                want += u64::from(model.insert(k.clone(), v1.clone()).is_some());
                want += u64::from(model.remove(&k2).is_some());
                want += u64::from(model.insert(k.clone(), v2.clone()).is_some());
                assert_eq!(m.batch(&ops).unwrap(), want);
            }
        }
    }
    assert_eq!(m.len(), model.len() as u64);
    assert_eq!(contents(&m), model);
    let mut out = vec![9u8; 3];
    for (k, v) in &model {
        assert!(m.get_into(k, &mut out).unwrap());
        assert_eq!(&out, v);
    }
    assert!(!m.get_into(b"absent", &mut out).unwrap());
    assert!(out.is_empty());
    // A prefix scan sees exactly the keys with the prefix.
    let mut seen = Vec::new();
    m.scan_prefix(b"k1", &mut |k, _| seen.push(k.to_vec()))
        .unwrap();
    seen.sort();
    let want: Vec<Vec<u8>> = model
        .keys()
        .filter(|k| k.starts_with(b"k1"))
        .cloned()
        .collect();
    assert_eq!(seen, want);
}

#[test]
fn big_and_empty_values_and_reopening() {
    let dir = shm_dir();
    let path = dir.path().join("map");
    let big: Vec<u8> = (0..(1 << 20) + 28).map(|i| (i % 253) as u8).collect();
    {
        let m = PmemByteMap::create(&path, POOL, MAX_SUBS, 16).unwrap();
        assert_eq!(m.subs(), MAX_SUBS);
        m.put(b"kbig", &big).unwrap();
        m.put(b"kempty", b"").unwrap();
        m.put(b"\0cas", &7u64.to_le_bytes()).unwrap();
        for i in 0..1000u64 {
            m.put(&key(i), &i.to_le_bytes()).unwrap();
        }
        for i in (0..1000u64).step_by(3) {
            assert!(m.delete(&key(i)).unwrap());
        }
    }
    let m = PmemByteMap::open(&path).unwrap();
    assert_eq!(m.get(b"kbig").unwrap().as_deref(), Some(&big[..]));
    assert_eq!(m.get(b"kempty").unwrap().as_deref(), Some(&b""[..]));
    assert_eq!(
        m.get(b"\0cas").unwrap().as_deref(),
        Some(&7u64.to_le_bytes()[..])
    );
    for i in 0..1000u64 {
        let want = (i % 3 != 0).then(|| i.to_le_bytes().to_vec());
        assert_eq!(m.get(&key(i)).unwrap(), want, "key {i}");
    }
    assert_eq!(m.len(), 3 + 666);
    let mut n = 0;
    m.scan_prefix(b"\0", &mut |k, _| {
        assert_eq!(k, b"\0cas");
        n += 1;
    })
    .unwrap();
    assert_eq!(n, 1);
}

#[test]
fn a_planted_abort_leaves_the_map_unchanged() {
    let dir = shm_dir();
    let path = dir.path().join("map");
    let m = PmemByteMap::create(&path, POOL, 4, 2).unwrap();
    for i in 0..200u64 {
        m.put(&key(i), &[i as u8; 40]).unwrap();
    }
    let before = contents(&m);
    let len = m.len();
    // Replaces, inserts (enough to pass the doubling threshold), deletes,
    // one key twice; then the shim aborts after the last write.
    let vals: Vec<Vec<u8>> = (0..300u64).map(|i| vec![0xEE; i as usize % 90]).collect();
    let keys: Vec<Vec<u8>> = (100..400u64).map(key).collect();
    let mut ops: Vec<(&[u8], Option<&[u8]>)> = keys
        .iter()
        .zip(&vals)
        .map(|(k, v)| (k.as_slice(), Some(v.as_slice())))
        .collect();
    let dels: Vec<Vec<u8>> = (0..50u64).map(key).collect();
    ops.extend(dels.iter().map(|k| (k.as_slice(), None)));
    ops.push((keys[0].as_slice(), None));
    let e = m.batch_then_abort(&ops);
    assert_eq!(e.errno(), Some(libc::ECANCELED), "{e}");
    assert_eq!(m.len(), len);
    assert_eq!(contents(&m), before);
    // The map still works, and the same batch applied for real changes it.
    assert_eq!(m.batch(&ops).unwrap(), 100 + 50 + 1);
    assert_ne!(contents(&m), before);
    drop(m);
    let m = PmemByteMap::open(&path).unwrap();
    assert_eq!(m.len(), len - 50 + 200 - 1);
}

#[test]
fn a_batch_that_runs_out_of_pool_midway_changes_nothing() {
    let dir = shm_dir();
    let path = dir.path().join("map");
    let m = PmemByteMap::create(&path, 24 << 20, 8, 4).unwrap();
    for i in 0..20u64 {
        m.put(&key(i), &[i as u8; 100]).unwrap();
    }
    let before = contents(&m);
    // A delete, a replace, then more 1 MiB values than the pool holds.
    let big = vec![0x55u8; 1 << 20];
    let keys: Vec<Vec<u8>> = (1000..1040u64).map(key).collect();
    let mut ops: Vec<(&[u8], Option<&[u8]>)> = vec![
        (&before.keys().next().unwrap()[..], None),
        (&before.keys().nth(1).unwrap()[..], Some(&b"new"[..])),
    ];
    ops.extend(keys.iter().map(|k| (k.as_slice(), Some(big.as_slice()))));
    match m.batch(&ops) {
        Err(Error::Full { .. }) => {}
        other => panic!("expected Full, got {other:?}"),
    }
    assert_eq!(contents(&m), before);
    assert_eq!(m.len(), 20);
    // A smaller batch still fits afterwards.
    m.batch(&ops[..4]).unwrap();
    assert_eq!(m.get(&keys[0]).unwrap().as_deref(), Some(&big[..]));
    drop(m);
    let m = PmemByteMap::open(&path).unwrap();
    assert_eq!(m.len(), 20 - 1 + 2);
}

#[test]
fn bad_input_is_a_typed_error() {
    let dir = shm_dir();
    let m = PmemByteMap::create(&dir.path().join("map"), POOL, 2, 2).unwrap();
    let long = vec![b'x'; MAX_KEY + 1];
    assert!(matches!(m.put(b"", b"v"), Err(Error::Param { .. })));
    assert!(matches!(m.put(&long, b"v"), Err(Error::Param { .. })));
    assert!(matches!(m.get(&long), Err(Error::Param { .. })));
    assert!(matches!(m.delete(b""), Err(Error::Param { .. })));
    let huge = vec![0u8; MAX_VALUE + 1];
    assert!(matches!(m.put(b"k", &huge), Err(Error::Param { .. })));
    // A bad op anywhere refuses the whole batch before it starts.
    let ops: Vec<(&[u8], Option<&[u8]>)> =
        vec![(&b"a"[..], Some(&b"1"[..])), (long.as_slice(), None)];
    assert!(matches!(m.batch(&ops), Err(Error::Param { .. })));
    assert_eq!(m.get(b"a").unwrap(), None);
    assert_eq!(m.batch(&[]).unwrap(), 0);
    assert!(matches!(
        PmemByteMap::create(&dir.path().join("m2"), POOL, 3, 2),
        Err(Error::Param { .. })
    ));
    assert!(matches!(
        PmemByteMap::create(&dir.path().join("m3"), POOL, 2, 6),
        Err(Error::Param { .. })
    ));
}

#[test]
fn pools_that_hold_no_map_are_refused() {
    let dir = shm_dir();
    // A pmemobj pool with the map's layout but no root object.
    let p = dir.path().join("empty");
    drop(PmemObj::create(&p, bytemap::LAYOUT, POOL).unwrap());
    assert!(matches!(PmemByteMap::open(&p), Err(Error::Corrupt { .. })));
    // Another layout: pmemobj_open refuses it.
    let q = dir.path().join("other");
    drop(PmemObj::create(&q, "something-else", POOL).unwrap());
    assert!(matches!(PmemByteMap::open(&q), Err(Error::Pmdk { .. })));
    // Not a pool at all.
    let r = dir.path().join("junk");
    std::fs::write(&r, vec![0x5a; 1 << 20]).unwrap();
    assert!(matches!(PmemByteMap::open(&r), Err(Error::Pmdk { .. })));
    assert!(PmemByteMap::open(&dir.path().join("missing")).is_err());
}

fn read_u64(path: &Path, off: u64) -> u64 {
    let mut f = std::fs::File::open(path).unwrap();
    f.seek(SeekFrom::Start(off)).unwrap();
    let mut b = [0u8; 8];
    f.read_exact(&mut b).unwrap();
    u64::from_le_bytes(b)
}

fn write_at(path: &Path, off: u64, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(off)).unwrap();
    f.write_all(bytes).unwrap();
}

#[test]
fn a_damaged_pool_gives_errors_not_panics_or_hangs() {
    let dir = shm_dir();
    let path = dir.path().join("map");
    // One sub-map of one bucket holding one entry: its offsets are found
    // by following the format from the sub-map header.
    let sub = {
        let m = PmemByteMap::create(&path, POOL, 1, 1).unwrap();
        m.put(b"kx", b"value").unwrap();
        m.sub_offset(0)
    };
    assert_ne!(sub, 0);
    let table = read_u64(&path, sub + 16);
    let entry = read_u64(&path, table);
    assert_eq!(
        read_u64(&path, entry + 8),
        0,
        "the only entry ends its chain"
    );
    let pristine = std::fs::read(&path).unwrap();
    let damage = |off: u64, bytes: &[u8]| {
        std::fs::write(&path, &pristine).unwrap();
        write_at(&path, off, bytes);
    };

    // A table outside the pool: refused at open.
    damage(sub + 16, &u64::MAX.to_le_bytes());
    assert!(matches!(
        PmemByteMap::open(&path),
        Err(Error::Corrupt { .. })
    ));
    // nbuckets not a power of two: refused at open.
    damage(sub + 8, &3u64.to_le_bytes());
    assert!(matches!(
        PmemByteMap::open(&path),
        Err(Error::Corrupt { .. })
    ));

    // A next link outside the pool: lookups past the entry, scans and
    // writes of the bucket report it.
    damage(entry + 8, &(u64::MAX - 7).to_le_bytes());
    let m = PmemByteMap::open(&path).unwrap();
    assert_eq!(m.get(b"kx").unwrap().as_deref(), Some(&b"value"[..]));
    assert!(matches!(m.get(b"ky"), Err(Error::Corrupt { .. })));
    assert!(matches!(
        m.scan_prefix(b"", &mut |_, _| {}),
        Err(Error::Corrupt { .. })
    ));
    assert!(matches!(m.delete(b"ky"), Err(Error::Corrupt { .. })));
    drop(m);

    // A chain that loops back on itself ends in an error, not a hang.
    damage(entry + 8, &entry.to_le_bytes());
    let m = PmemByteMap::open(&path).unwrap();
    assert!(matches!(m.get(b"ky"), Err(Error::Corrupt { .. })));
    assert!(matches!(
        m.scan_prefix(b"", &mut |_, _| {}),
        Err(Error::Corrupt { .. })
    ));
    drop(m);

    // Lengths that run past the pool, or a zero key length.
    for lens in [
        [0u8, 0, 0, 0, 5, 0, 0, 0],
        [2, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f],
    ] {
        damage(entry + 16, &lens);
        let m = PmemByteMap::open(&path).unwrap();
        assert!(matches!(m.get(b"kx"), Err(Error::Corrupt { .. })));
        assert!(matches!(m.put(b"kx", b"v"), Err(Error::Corrupt { .. })));
    }
}

#[test]
fn threads_write_and_scan_at_once() {
    let dir = shm_dir();
    let m = PmemByteMap::create(&dir.path().join("map"), POOL, 16, 2).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let m = &m;
            s.spawn(move || {
                for i in 0..500u64 {
                    let k = format!("t{t}:{i}").into_bytes();
                    m.put(&k, &i.to_le_bytes()).unwrap();
                    if i % 5 == 0 {
                        assert!(m.delete(&k).unwrap());
                    }
                }
            });
        }
        let m = &m;
        s.spawn(move || {
            for _ in 0..20 {
                m.scan_prefix(b"t", &mut |k, v| {
                    assert!(k.starts_with(b"t") && v.len() == 8);
                })
                .unwrap();
            }
        });
    });
    assert_eq!(m.len(), 4 * 400);
    assert_eq!(contents(&m).len(), 1600);
}
