//! The store over Persistron (file disk) and over the volatile baseline.

use ferrite_cache::store::{Store, Wal};
use ferrite_cache::{Cache, CacheOptions, Disk, FileDisk, Mode};
use ferrite_pmem::{Domain, Pool, PoolOptions};
use std::collections::BTreeMap;
use std::sync::Arc;

fn key(i: u64) -> Vec<u8> {
    format!(
        "user{:020}",
        i.wrapping_mul(0x9e37_79b9_7f4a_7c15) % 1_000_003
    )
    .into_bytes()
}

fn value(i: u64, round: u64) -> Vec<u8> {
    (0..100).map(|k| (i * 31 + k + round * 7) as u8).collect()
}

fn pool(slots: u32, disk_pages: u32, domain: Domain) -> Pool {
    let bytes = Cache::required_bytes(slots, 4, disk_pages).unwrap() + 4096;
    Pool::create_in_memory(
        &PoolOptions::new("store-test", bytes.next_multiple_of(4096) as u64).domain(domain),
    )
    .unwrap()
}

/// A new store with `memtable_pages` per set on a Persistron cache of
/// `slots` slots and 8 DRAM frames over a 4096-page file disk; the
/// directory and pool are returned to outlive it.
fn store_on_file(slots: u32, memtable_pages: usize) -> (tempfile::TempDir, Pool, Store) {
    let dir = tempfile::tempdir().unwrap();
    let disk: Arc<dyn Disk> = Arc::new(FileDisk::create(dir.path().join("disk"), 4096).unwrap());
    let p = pool(slots, 4096, Domain::Adr);
    let c = Cache::create(
        p.data(),
        disk,
        slots,
        4,
        CacheOptions {
            dram_pages: 8,
            ..Default::default()
        },
    )
    .unwrap();
    let st = Store::create(Arc::new(c), memtable_pages, None).unwrap();
    (dir, p, st)
}

fn run(opts: CacheOptions, wal: bool, reopen: bool, n: u64) {
    let dir = tempfile::tempdir().unwrap();
    let disk: Arc<dyn Disk> = Arc::new(FileDisk::create(dir.path().join("disk"), 4096).unwrap());
    let domain = if opts.transactions {
        Domain::Adr
    } else {
        Domain::Volatile
    };
    let p = pool(200, 4096, domain);
    let c = Arc::new(Cache::create(p.data(), disk.clone(), 200, 4, opts.clone()).unwrap());
    let w = wal.then(|| Wal::create(dir.path().join("wal"), 1).unwrap());
    let st = Store::create(c.clone(), 8, w).unwrap();
    let mut model = BTreeMap::new();
    {
        let s = st.session().unwrap();
        for round in 0..3 {
            for i in 0..n {
                if round == 2 && i % 5 == 0 {
                    s.delete(&key(i)).unwrap();
                    model.remove(&key(i));
                } else {
                    s.put(&key(i), &value(i, round)).unwrap();
                    model.insert(key(i), value(i, round));
                }
            }
        }
        for i in 0..n + 100 {
            assert_eq!(
                s.get(&key(i)).unwrap(),
                model.get(&key(i)).cloned(),
                "key {i}"
            );
        }
    }
    let st_ = &c.stats;
    eprintln!("{st_:?}");
    drop(st);
    if !reopen {
        return;
    }
    drop(c);
    let (c, rep) = Cache::open(p.data(), disk.clone(), opts).unwrap();
    eprintln!("{rep:?}");
    c.verify().unwrap();
    let (st, freed) = Store::open(Arc::new(c), None).unwrap();
    assert_eq!(freed, 0, "a clean shutdown leaks nothing");
    let s = st.session().unwrap();
    for i in 0..n + 100 {
        assert_eq!(
            s.get(&key(i)).unwrap(),
            model.get(&key(i)).cloned(),
            "key {i} after reopen"
        );
    }
}

#[test]
fn store_on_persistron_survives_reopen() {
    run(
        CacheOptions {
            dram_pages: 16,
            ..CacheOptions::default()
        },
        false,
        true,
        3000,
    );
}

#[test]
fn store_on_volatile_cache_with_wal() {
    run(
        CacheOptions {
            transactions: false,
            sync_on_evict: false,
            ..CacheOptions::default()
        },
        true,
        false,
        1000,
    );
}

#[test]
fn two_threads_put_and_get() {
    let (_dir, _p, st) = store_on_file(300, 8);
    std::thread::scope(|sc| {
        for t in 0..2u64 {
            let st = &st;
            sc.spawn(move || {
                let s = st.session().unwrap();
                for i in 0..2000u64 {
                    let k = key(i * 2 + t);
                    s.put(&k, &value(i, t)).unwrap();
                    assert_eq!(s.get(&k).unwrap(), Some(value(i, t)));
                }
            });
        }
    });
    let s = st.session().unwrap();
    for t in 0..2u64 {
        for i in 0..2000u64 {
            assert_eq!(s.get(&key(i * 2 + t)).unwrap(), Some(value(i, t)));
        }
    }
}

#[test]
fn damaged_entry_table_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let disk: Arc<dyn Disk> = Arc::new(FileDisk::create(dir.path().join("disk"), 64).unwrap());
    let p = pool(8, 64, Domain::Adr);
    let c = Cache::create(p.data(), disk.clone(), 8, 4, CacheOptions::default()).unwrap();
    {
        let s = c.session().unwrap();
        let mut g = s.get_page(5, Mode::Write).unwrap();
        g.write(0, b"hello");
    }
    drop(c);
    // The entry table starts at region offset 64, 8 bytes per slot: flip
    // one bit of the occupied entry.
    let r = p.data();
    let off = (0..8)
        .map(|s| 64 + 8 * s)
        .find(|&o| r.load_u64(o) != 0)
        .expect("an occupied slot");
    let w = r.load_u64(off);
    r.store_u64(off, w ^ 0x4);
    let e = Cache::open(p.data(), disk.clone(), CacheOptions::default())
        .err()
        .expect("must fail");
    assert!(matches!(e, ferrite_cache::CacheError::Corrupt(_)), "{e}");
    r.store_u64(off, w);
    assert!(Cache::open(p.data(), disk.clone(), CacheOptions::default()).is_ok());
    // Superblock damage.
    let b = r.read_vec(20, 1);
    r.write(20, &[b[0] ^ 1]);
    assert!(Cache::open(p.data(), disk, CacheOptions::default()).is_err());
}

#[test]
fn locks_upgrade_downgrade_and_non_tx() {
    let dir = tempfile::tempdir().unwrap();
    let disk: Arc<dyn Disk> = Arc::new(FileDisk::create(dir.path().join("disk"), 64).unwrap());
    let p = pool(16, 64, Domain::Adr);
    let c = Cache::create(p.data(), disk.clone(), 16, 4, CacheOptions::default()).unwrap();
    let s = c.session().unwrap();
    let s2 = c.session().unwrap();
    {
        let r = s.get_page(3, Mode::Read).unwrap();
        let r2 = s2.get_page(3, Mode::Read).unwrap();
        // Another reader: the upgrade is refused, the read lock kept.
        let r = r.try_upgrade().err().expect("refused while s2 reads");
        drop(r2);
        let mut w = r.try_upgrade().ok().expect("sole reader upgrades");
        assert!(s.in_tx());
        w.write_u64(0, 42);
        let r = w.downgrade(); // last write lock gone: commits
        assert!(!s.in_tx());
        assert_eq!(r.read_u64(0), 42);
    }
    s.non_tx(|s| {
        let mut w = s.get_page(4, Mode::Write).unwrap();
        assert!(!s.in_tx());
        w.write_u64(8, 7);
    })
    .unwrap();
    drop((s, s2));
    assert_eq!(c.sync_all().unwrap(), 2);
    c.verify().unwrap();
    let mut b = vec![0u8; 4096];
    disk.read(4, &mut b).unwrap();
    assert_eq!(b[8], 7);
}

/// A store root of the first format (magic "FERSTORE", 16-byte branch
/// descriptors) is refused with a typed error, not misread.
#[test]
fn a_root_of_the_first_format_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let disk: Arc<dyn Disk> = Arc::new(FileDisk::create(dir.path().join("disk"), 256).unwrap());
    let p = pool(32, 256, Domain::Adr);
    let c =
        Arc::new(Cache::create(p.data(), disk.clone(), 32, 4, CacheOptions::default()).unwrap());
    let st = Store::create(c.clone(), 2, None).unwrap();
    st.session().unwrap().put(b"k", b"v").unwrap();
    drop(st);
    let root = c.geometry().bitmap_pages;
    c.session()
        .unwrap()
        .get_page(root, Mode::Write)
        .unwrap()
        .write(0, b"FERSTORE");
    let e = Store::open(c, None).err().expect("refused");
    assert!(matches!(e, ferrite_cache::CacheError::Config(_)), "{e}");
    assert!(e.to_string().contains("first format"), "{e}");
}

/// `get_new_page` does not read an uncached page from the disk (it shows
/// zeros), in a non-transaction and in a transaction, and the writes made
/// through it reach the disk; a cached page keeps its bytes.
#[test]
fn new_pages_are_not_read_from_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let disk: Arc<dyn Disk> = Arc::new(FileDisk::create(dir.path().join("disk"), 64).unwrap());
    for n in 10..13 {
        disk.write(n, &[0xee; 4096]).unwrap();
    }
    disk.sync().unwrap();
    let p = pool(16, 64, Domain::Adr);
    let c = Cache::create(p.data(), disk.clone(), 16, 4, CacheOptions::default()).unwrap();
    let ins = || c.stats.page_ins.load(std::sync::atomic::Ordering::Relaxed);
    let s = c.session().unwrap();
    let before = ins();
    s.non_tx(|s| {
        let mut g = s.get_new_page(10).unwrap();
        assert_eq!(g.read_u64(0), 0, "zeros, not the disk's bytes");
        g.write_u64(0, 1);
    })
    .unwrap();
    {
        let mut g = s.get_new_page(11).unwrap();
        assert!(s.in_tx(), "a transaction's copy");
        assert_eq!(g.read_u64(8), 0);
        g.write_u64(0, 2);
    }
    assert!(!s.in_tx(), "committed at the last release");
    assert_eq!(ins(), before, "no page-in");
    assert_eq!(
        s.get_page(12, Mode::Read).unwrap().read_u64(0),
        0xeeee_eeee_eeee_eeee
    );
    assert_eq!(
        s.get_new_page(12).unwrap().read_u64(0),
        0xeeee_eeee_eeee_eeee
    );
    drop(s);
    c.verify().unwrap();
    c.sync_all().unwrap();
    let mut b = vec![0u8; 4096];
    for (n, want) in [(10u32, 1u8), (11, 2)] {
        disk.read(n, &mut b).unwrap();
        assert_eq!(b[0], want, "page {n}");
        assert!(
            b[8..].iter().all(|&x| x == 0),
            "page {n} is zeros elsewhere"
        );
    }
}

/// Range scans against a model, over memtables, several branches and a
/// compaction, with deletes (tombstones must hide older versions) and
/// scans starting before, inside and past the keys.
#[test]
fn scans_match_a_model() {
    // Two memtable pages: flushes every ~60 puts, so branches pile up.
    let (_dir, _p, st) = store_on_file(200, 2);
    let s = st.session().unwrap();
    let mut model = BTreeMap::new();
    let mut checked = 0;
    for step in 0..1500u64 {
        let i = step.wrapping_mul(7919) % 400;
        if step % 9 == 4 {
            s.delete(&key(i)).unwrap();
            model.remove(&key(i));
        } else {
            s.put(&key(i), &value(i, step)).unwrap();
            model.insert(key(i), value(i, step));
        }
        if step % 50 == 49 {
            for (q, len) in [
                (0u64, 1usize),
                (step, 10),
                (step * 3, 100),
                (step * 5, 1000),
            ] {
                let start = if q == 0 { Vec::new() } else { key(q % 500) };
                let got = s.scan(&start, len).unwrap();
                let want: Vec<(Vec<u8>, Vec<u8>)> = model
                    .range(start.clone()..)
                    .take(len)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(got, want, "scan from {start:?} len {len} at step {step}");
                checked += 1;
            }
        }
    }
    assert!(checked > 100);
    assert_eq!(s.scan(b"zzzz", 5).unwrap(), vec![]);
}
