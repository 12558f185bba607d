//! Every bad input to a pool file yields its own typed error, never a panic.

use ferrite_pmem::{Domain, HEADER_SIZE, Pool, PoolError, PoolOptions};
use std::path::PathBuf;

const SIZE: u64 = 1 << 20;

fn fresh(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    let p = dir.path().join(name);
    let pool = Pool::create(
        &p,
        &PoolOptions::new("test-layout", SIZE).domain(Domain::Msync),
    )
    .unwrap();
    pool.close().unwrap();
    p
}

fn open(p: &PathBuf) -> Result<Pool, PoolError> {
    Pool::open(p, &PoolOptions::new("test-layout", 0))
}

fn patch(p: &PathBuf, off: usize, f: impl FnOnce(&mut u8)) {
    let mut b = std::fs::read(p).unwrap();
    f(&mut b[off]);
    std::fs::write(p, b).unwrap();
}

#[test]
fn create_open_round_trip_keeps_header_and_root() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.pool");
    let pool = Pool::create(
        &p,
        &PoolOptions::new("test-layout", SIZE).domain(Domain::Msync),
    )
    .unwrap();
    let h = pool.header().clone();
    assert_eq!(h.size, SIZE);
    assert_eq!(h.domain, Domain::Msync);
    assert!(!pool.is_pmem(), "a file on tmp is not DAX");
    pool.data().write(0, b"payload");
    pool.data().persist(0, 7);
    pool.set_root(ferrite_pmem::POff::<u8>::new(HEADER_SIZE as u64))
        .unwrap();
    pool.close().unwrap();

    let pool = open(&p).unwrap();
    assert_eq!(pool.header(), &h);
    assert_eq!(pool.root::<u8>().raw(), HEADER_SIZE as u64);
    assert_eq!(pool.data().read_vec(0, 7), b"payload");
    assert!(
        pool.set_root(ferrite_pmem::POff::<u8>::new(8)).is_err(),
        "root inside the header is refused"
    );
    drop(pool);
    let (h2, root) = Pool::inspect(&p).unwrap();
    assert_eq!(h2, h);
    assert_eq!(root, HEADER_SIZE as u64);
}

#[test]
fn missing_file() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        open(&dir.path().join("nope")),
        Err(PoolError::NotFound { .. })
    ));
}

#[test]
fn create_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let p = fresh(&dir, "a.pool");
    let e = Pool::create(&p, &PoolOptions::new("test-layout", SIZE)).unwrap_err();
    assert!(matches!(e, PoolError::AlreadyExists { .. }), "{e}");
}

#[test]
fn not_a_pool() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("text");
    std::fs::write(&p, vec![b'x'; 10000]).unwrap();
    assert!(matches!(open(&p), Err(PoolError::NotAPool { .. })));
    std::fs::write(&p, b"").unwrap();
    assert!(matches!(open(&p), Err(PoolError::NotAPool { .. })));
}

#[test]
fn every_magic_byte_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..8 {
        let p = fresh(&dir, &format!("m{i}.pool"));
        patch(&p, i, |b| *b ^= 0x01);
        assert!(
            matches!(open(&p), Err(PoolError::NotAPool { .. })),
            "magic byte {i}"
        );
    }
}

#[test]
fn wrong_layout() {
    let dir = tempfile::tempdir().unwrap();
    let p = fresh(&dir, "a.pool");
    let e = Pool::open(&p, &PoolOptions::new("other", 0)).unwrap_err();
    assert!(
        matches!(&e, PoolError::WrongLayout { found, .. } if found == "test-layout"),
        "{e}"
    );
}

#[test]
fn header_checksum_catches_every_checked_byte() {
    let dir = tempfile::tempdir().unwrap();
    let p = fresh(&dir, "a.pool");
    let orig = std::fs::read(&p).unwrap();
    // Bytes 12..124 are the checksummed fields (magic and version have their
    // own errors, tested separately); 124..128 is the CRC itself.
    for i in 12..128 {
        let mut b = orig.clone();
        b[i] ^= 0x80;
        std::fs::write(&p, &b).unwrap();
        match open(&p) {
            Err(PoolError::Checksum { .. }) => {}
            other => panic!("byte {i}: expected checksum error, got {other:?}"),
        }
    }
}

#[test]
fn unsupported_version() {
    let dir = tempfile::tempdir().unwrap();
    let p = fresh(&dir, "a.pool");
    patch(&p, 8, |b| *b = 9);
    assert!(matches!(
        open(&p),
        Err(PoolError::UnsupportedVersion { found: 9, .. })
    ));
}

#[test]
fn truncation_at_every_interesting_length() {
    let dir = tempfile::tempdir().unwrap();
    let p = fresh(&dir, "a.pool");
    let orig = std::fs::read(&p).unwrap();
    for len in [
        1usize,
        7,
        8,
        100,
        HEADER_SIZE - 1,
        HEADER_SIZE,
        HEADER_SIZE + 1,
        SIZE as usize - 1,
    ] {
        std::fs::write(&p, &orig[..len]).unwrap();
        match open(&p) {
            Err(PoolError::Truncated { .. }) => {}
            other => panic!("length {len}: expected truncated, got {other:?}"),
        }
    }
}

#[test]
fn second_open_is_refused_while_locked() {
    let dir = tempfile::tempdir().unwrap();
    let p = fresh(&dir, "a.pool");
    let first = open(&p).unwrap();
    assert!(matches!(open(&p), Err(PoolError::Locked { .. })));
    drop(first);
    open(&p).expect("lock released on drop");
}

#[test]
fn size_too_small_and_bad_layout_name() {
    let dir = tempfile::tempdir().unwrap();
    let e = Pool::create(dir.path().join("s"), &PoolOptions::new("x", 4096)).unwrap_err();
    assert!(matches!(e, PoolError::TooSmall { .. }));
    assert!(!dir.path().join("s").exists());
    let e = Pool::create(dir.path().join("l"), &PoolOptions::new("", SIZE)).unwrap_err();
    assert!(matches!(e, PoolError::BadLayoutName(_)));
}

#[test]
fn out_of_space_is_reported_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("huge");
    let e = Pool::create(&p, &PoolOptions::new("x", 1 << 50)).unwrap_err();
    assert!(matches!(e, PoolError::OutOfSpace { .. }), "{e}");
    assert!(!p.exists());
}

#[test]
fn random_corruption_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let p = fresh(&dir, "a.pool");
    let orig = std::fs::read(&p).unwrap();
    let mut x = 0x9e3779b97f4a7c15u64;
    for _ in 0..300 {
        let mut b = orig.clone();
        for _ in 0..4 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = (x as usize) % HEADER_SIZE;
            b[i] = (x >> 32) as u8;
        }
        std::fs::write(&p, &b).unwrap();
        let _ = open(&p); // any error is fine; a panic fails the test
    }
}
