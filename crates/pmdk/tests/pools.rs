//! Round trips through every wrapper, on pools in a temporary directory
//! under /dev/shm. These tests do not depend on PMEM_IS_PMEM_FORCE; the
//! forcing behaviour itself is tested in `force.rs`.
#![cfg(feature = "link")]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use ferrite_pmdk::{
    Error, PmemBlk, PmemLog, PmemMap, PmemObj, SHM_DIR, flush_path_in, is_pmem, pmem_forced,
};
use tempfile::TempDir;

fn shm_dir() -> TempDir {
    tempfile::Builder::new()
        .prefix("ferrite-pmdk-test-")
        .tempdir_in(SHM_DIR)
        .expect("tempdir under /dev/shm")
}

/// Record `i` of the log tests: `len` bytes that identify `i`.
fn record(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j) as u8).collect()
}

/// libpmemobj's minimum pool (8 MiB) is too cramped for allocations of a
/// few hundred KiB; the tests use this instead.
const OBJ_POOL: usize = 64 << 20;

fn pmdk_errno(err: &Error) -> i32 {
    err.errno()
        .unwrap_or_else(|| panic!("expected a PMDK error, got {err:?}"))
}

#[test]
fn log_append_walk_in_order() {
    let dir = shm_dir();
    let path = dir.path().join("log");
    let mut log = PmemLog::create(&path, PmemLog::min_pool_size()).unwrap();
    assert!(log.nbyte() > 0 && log.nbyte() <= PmemLog::min_pool_size());
    assert_eq!(log.tell(), 0);

    let mut expected = Vec::new();
    for i in 0..100 {
        let r = record(i, 64);
        log.append(&r).unwrap();
        expected.extend_from_slice(&r);
    }
    assert_eq!(log.tell(), 6400);

    // One chunk per record, in append order.
    let mut n = 0;
    log.walk(64, |chunk| {
        assert_eq!(chunk, record(n, 64).as_slice(), "record {n}");
        n += 1;
        true
    });
    assert_eq!(n, 100);

    // chunk 0: everything at once.
    let mut all = Vec::new();
    log.walk(0, |chunk| {
        all.extend_from_slice(chunk);
        true
    });
    assert_eq!(all, expected);

    // Returning false stops the walk.
    let mut calls = 0;
    log.walk(64, |_| {
        calls += 1;
        false
    });
    assert_eq!(calls, 1);

    // The contents survive close and reopen.
    drop(log);
    let mut log = PmemLog::open(&path).unwrap();
    assert_eq!(log.tell(), 6400);
    let mut reopened = Vec::new();
    log.walk(1000, |chunk| {
        assert!(chunk.len() <= 1000);
        reopened.extend_from_slice(chunk);
        true
    });
    assert_eq!(reopened, expected);

    log.rewind();
    assert_eq!(log.tell(), 0);
    let mut calls = 0;
    log.walk(0, |_| {
        calls += 1;
        true
    });
    assert_eq!(calls, 0, "an empty log has no chunks");
}

#[test]
fn log_appendv_is_one_append_in_order() {
    let dir = shm_dir();
    let mut log = PmemLog::create(&dir.path().join("log"), PmemLog::min_pool_size()).unwrap();
    let (a, b, c) = (record(1, 10), record(2, 0), record(3, 300));
    log.appendv(&[&a, &b, &c]).unwrap();
    log.appendv(&[]).unwrap();
    assert_eq!(log.tell(), 310);
    let mut all = Vec::new();
    log.walk(0, |chunk| {
        all.extend_from_slice(chunk);
        true
    });
    assert_eq!(all, [a, b, c].concat());
}

#[test]
fn log_errors_are_typed() {
    let dir = shm_dir();
    let path = dir.path().join("log");

    let err = PmemLog::create(&path, 4096).unwrap_err();
    assert_eq!(pmdk_errno(&err), libc::EINVAL, "{err}");

    assert!(matches!(
        PmemLog::create(Path::new("/dev/shm/a\0b"), 1 << 21),
        Err(Error::Nul { what: "path" })
    ));
    assert_eq!(
        pmdk_errno(&PmemLog::open(&dir.path().join("missing")).unwrap_err()),
        libc::ENOENT
    );

    let mut log = PmemLog::create(&path, PmemLog::min_pool_size()).unwrap();
    assert_eq!(
        pmdk_errno(&PmemLog::create(&path, PmemLog::min_pool_size()).unwrap_err()),
        libc::EEXIST
    );

    // Full log: ENOSPC, and nothing is written.
    let too_big = vec![7u8; log.nbyte() + 1];
    let err = log.append(&too_big).unwrap_err();
    assert_eq!(pmdk_errno(&err), libc::ENOSPC, "{err}");
    assert!(err.to_string().contains("pmemlog_append"), "{err}");
    assert_eq!(log.tell(), 0);
}

#[test]
fn log_walk_resumes_callback_panic() {
    let dir = shm_dir();
    let mut log = PmemLog::create(&dir.path().join("log"), PmemLog::min_pool_size()).unwrap();
    log.append(&[1; 128]).unwrap();
    let mut calls = 0;
    let res = catch_unwind(AssertUnwindSafe(|| {
        log.walk(16, |_| {
            calls += 1;
            panic!("boom");
        })
    }));
    assert!(res.is_err());
    assert_eq!(calls, 1, "the walk stops at the panic");
    // The pool's lock was released: appending still works.
    log.append(&[2; 16]).unwrap();
    assert_eq!(log.tell(), 144);
}

#[test]
fn blk_write_read_round_trip() {
    let dir = shm_dir();
    let path = dir.path().join("blk");
    let bsize = 512;
    let blk = PmemBlk::create(&path, bsize, PmemBlk::min_pool_size()).unwrap();
    assert_eq!(blk.bsize(), bsize);
    let n = blk.nblock();
    assert!(n > 1000, "nblock {n}");

    let block = |i: u64| record(i as usize, bsize);
    for i in [0, 1, n / 2, n - 1] {
        blk.write(i, &block(i)).unwrap();
    }
    let mut buf = vec![0xffu8; bsize];
    for i in [0, 1, n / 2, n - 1] {
        blk.read(i, &mut buf).unwrap();
        assert_eq!(buf, block(i), "block {i}");
    }
    blk.read(2, &mut buf).unwrap();
    assert!(
        buf.iter().all(|&b| b == 0),
        "unwritten block reads as zeros"
    );

    blk.write(1, &block(99)).unwrap();
    blk.read(1, &mut buf).unwrap();
    assert_eq!(buf, block(99), "overwrite");

    blk.set_zero(1).unwrap();
    blk.read(1, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));

    // Bad input is rejected before PMDK sees it.
    assert!(matches!(
        blk.write(0, &[0; 100]),
        Err(Error::Length {
            expected: 512,
            got: 100,
            ..
        })
    ));
    assert!(matches!(
        blk.read(0, &mut [0; 1024]),
        Err(Error::Length { .. })
    ));
    assert!(matches!(
        blk.write(n, &block(0)),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        blk.read(u64::MAX, &mut buf),
        Err(Error::OutOfRange { .. })
    ));

    drop(blk);
    let blk = PmemBlk::open(&path, bsize).unwrap();
    assert_eq!(blk.nblock(), n);
    blk.read(n - 1, &mut buf).unwrap();
    assert_eq!(buf, block(n - 1), "survives reopen");
    drop(blk);
    assert!(PmemBlk::open(&path, 4096).is_err(), "block size mismatch");
    assert_eq!(
        PmemBlk::open(&path, 0).unwrap().bsize(),
        bsize,
        "0 accepts the stored size"
    );
}

#[test]
fn blk_is_shareable_between_threads() {
    let dir = shm_dir();
    let blk = PmemBlk::create(&dir.path().join("blk"), 512, PmemBlk::min_pool_size()).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let blk = &blk;
            s.spawn(move || {
                for i in 0..50 {
                    let no = t * 100 + i;
                    blk.write(no, &record(no as usize, 512)).unwrap();
                }
            });
        }
    });
    let mut buf = vec![0u8; 512];
    for no in (0..4).flat_map(|t| (0..50).map(move |i| t * 100 + i)) {
        blk.read(no, &mut buf).unwrap();
        assert_eq!(buf, record(no as usize, 512));
    }
}

#[test]
fn obj_atomic_alloc_free() {
    let dir = shm_dir();
    let path = dir.path().join("obj");
    let pool = PmemObj::create(&path, "ferrite-test", OBJ_POOL).unwrap();

    let a = pool.alloc(64).unwrap();
    let b = pool.alloc(1000).unwrap();
    assert_ne!(a.offset(), b.offset());
    assert_eq!(a.pool_uuid_lo(), b.pool_uuid_lo());
    assert!(pool.usable_size(&a).unwrap() >= 64);
    assert!(pool.usable_size(&b).unwrap() >= 1000);
    pool.free(a).unwrap();
    pool.free(b).unwrap();

    // Far more than the pool holds in total: only works if free really
    // gives the space back.
    for _ in 0..2000 {
        let oid = pool.alloc(1 << 20).unwrap();
        pool.free(oid).unwrap();
    }

    assert_eq!(pmdk_errno(&pool.alloc(0).unwrap_err()), libc::EINVAL);
    assert_eq!(pmdk_errno(&pool.alloc(1 << 30).unwrap_err()), libc::ENOMEM);

    drop(pool);
    assert!(PmemObj::open(&path, "other-layout").is_err());
    let pool = PmemObj::open(&path, "ferrite-test").unwrap();
    pool.free(pool.alloc(8).unwrap()).unwrap();
}

#[test]
fn obj_tx_alloc_free() {
    let dir = shm_dir();
    let pool = PmemObj::create(&dir.path().join("obj"), "ferrite-test", OBJ_POOL).unwrap();
    for size in [1, 64, 4096, 256 * 1024, 4 << 20] {
        pool.tx_alloc_free(size).unwrap();
    }
    for _ in 0..2000 {
        pool.tx_alloc_free(1 << 20).unwrap();
    }
    // Aborted transactions report their error and leave the pool usable.
    let err = pool.tx_alloc_free(1 << 30).unwrap_err();
    assert_eq!(pmdk_errno(&err), libc::ENOMEM, "{err}");
    let err = pool.tx_alloc_free(0).unwrap_err();
    assert_eq!(pmdk_errno(&err), libc::EINVAL, "{err}");
    pool.tx_alloc_free(64).unwrap();
    pool.free(pool.alloc(64).unwrap()).unwrap();
}

#[test]
fn obj_rejects_foreign_oid() {
    let dir = shm_dir();
    let a = PmemObj::create(&dir.path().join("a"), "l", OBJ_POOL).unwrap();
    let b = PmemObj::create(&dir.path().join("b"), "l", OBJ_POOL).unwrap();
    let oid = a.alloc(64).unwrap();
    assert!(matches!(b.usable_size(&oid), Err(Error::ForeignOid)));
    let oid2 = a.alloc(64).unwrap();
    assert!(matches!(b.free(oid2), Err(Error::ForeignOid)));
    a.free(oid).unwrap();
    assert!(matches!(
        PmemObj::create(&dir.path().join("c"), "a\0b", PmemObj::min_pool_size()),
        Err(Error::Nul { what: "layout" })
    ));
    let long = "x".repeat(PmemObj::max_layout_len());
    assert!(PmemObj::create(&dir.path().join("d"), &long, PmemObj::min_pool_size()).is_err());
}

#[test]
fn map_memcpy_persist() {
    let dir = shm_dir();
    let mut map = PmemMap::create(&dir.path().join("map"), 1 << 20).unwrap();
    assert_eq!(map.len(), 1 << 20);
    assert!(!map.is_empty());
    assert!(map.as_slice().iter().all(|&b| b == 0));

    let data = record(5, 3000);
    map.memcpy_persist(100, &data).unwrap();
    assert_eq!(&map.as_slice()[100..3100], data.as_slice());

    map.memcpy_nodrain(8192, &data[..777]).unwrap();
    map.drain();
    assert_eq!(&map.as_slice()[8192..8192 + 777], &data[..777]);

    map.as_mut_slice()[..4].copy_from_slice(b"abcd");
    map.persist(0, 4).unwrap();
    map.persist(0, map.len()).unwrap();
    map.persist(map.len(), 0).unwrap();

    let len = map.len();
    assert!(matches!(
        map.memcpy_persist(len - 10, &data),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        map.memcpy_persist(usize::MAX, &data),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(map.persist(1, len), Err(Error::OutOfRange { .. })));
    assert!(matches!(
        map.persist(usize::MAX, 2),
        Err(Error::OutOfRange { .. })
    ));

    // libpmem's verdict on this mapping is the process-wide one.
    let p = map.as_slice().as_ptr();
    assert_eq!(map.is_pmem(), is_pmem(p, len));
    assert_eq!(map.is_pmem(), flush_path_in(dir.path()).unwrap());
    assert_eq!(map.is_pmem(), pmem_forced());

    drop(map);
    let err = PmemMap::create(&dir.path().join("zero"), 0).unwrap_err();
    assert_eq!(pmdk_errno(&err), libc::EINVAL, "{err}");
    assert!(flush_path_in(&dir.path().join("no-such-dir")).is_err());
}
