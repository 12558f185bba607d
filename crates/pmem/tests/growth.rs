//! Growable pools: a pool file that grows in place, keeps what was written
//! before and after a growth across a reopen, and refuses to pass its
//! maximum.

use ferrite_pmem::{PAGE, Pool, PoolError, PoolOptions};

#[test]
fn a_growable_pool_grows_in_place_and_reopens_at_its_grown_length() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.pool");
    let opts = PoolOptions::new("growth", 64 * 1024).max_size(4 << 20);
    let pool = Pool::create(&path, &opts).unwrap();
    assert!(pool.growable());
    assert_eq!(pool.header().max_size, 4 << 20);
    let data = pool.data();
    assert_eq!(data.len(), (4 << 20) - 4096, "regions span the maximum");
    data.write(100, b"before");
    assert!(data.check(128 * 1024, 8).is_err(), "not grown yet");
    let m = pool.medium().clone();
    let base = m.map().addr(0);
    assert_eq!(m.grow_to(1 << 20).unwrap(), 1 << 20);
    assert_eq!(m.map().addr(0), base);
    data.write(900 * 1024, b"after");
    data.persist(0, 1 << 19);
    data.persist(900 * 1024, 8);
    assert!(m.grow_to((4 << 20) + PAGE).is_err(), "past the maximum");
    pool.close().unwrap();
    // The lock lasts while anything still maps the pool.
    drop((m, data));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 20);

    let pool = Pool::open(&path, &PoolOptions::new("growth", 0)).unwrap();
    assert_eq!(pool.medium().map().mapped(), 1 << 20);
    let mut b = [0u8; 6];
    pool.data().read(100, &mut b);
    assert_eq!(&b, b"before");
    pool.data().read(900 * 1024, &mut b[..5]);
    assert_eq!(&b[..5], b"after");
    assert_eq!(pool.image().len(), 1 << 20);
}

#[test]
fn a_maximum_below_the_size_is_refused_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.pool");
    let opts = PoolOptions::new("growth", 8 << 20).max_size(4 << 20);
    assert!(matches!(
        Pool::create(&path, &opts),
        Err(PoolError::Config(_))
    ));
    assert!(!path.exists());
}

#[test]
fn a_growable_in_memory_pool_grows_and_its_image_reopens() {
    let opts = PoolOptions::new("growth", 64 * 1024).max_size(2 << 20);
    let pool = Pool::create_in_memory(&opts).unwrap();
    pool.medium().grow_to(256 * 1024).unwrap();
    pool.data().write(200 * 1024, b"x");
    let img = pool.image();
    assert_eq!(img.len(), 256 * 1024);
    let again = Pool::open_image(&img, &opts, ferrite_pmem::Domain::Volatile, None).unwrap();
    assert_eq!(again.medium().map().mapped(), 256 * 1024);
    let mut b = [0u8; 1];
    again.data().read(200 * 1024, &mut b);
    assert_eq!(&b, b"x");
    again.medium().grow_to(2 << 20).unwrap();
}
