//! The reserve/publish action API, the root object and object iteration,
//! on pools under /dev/shm (independent of PMEM_IS_PMEM_FORCE).
#![cfg(feature = "link")]

use ferrite_pmdk::{Error, PmemObj, SHM_DIR};

const POOL: usize = 32 << 20;
const TYPE: u64 = 7;

fn pool() -> (tempfile::TempDir, PmemObj) {
    let dir = tempfile::Builder::new()
        .prefix("ferrite-pmdk-actions-")
        .tempdir_in(SHM_DIR)
        .unwrap();
    let p = PmemObj::create(&dir.path().join("obj"), "actions", POOL).unwrap();
    (dir, p)
}

fn objects(p: &PmemObj) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    p.for_each_object(&mut |o| v.push((o.off, o.type_num)))
        .unwrap();
    v.sort();
    v
}

#[test]
fn layout_base_and_root() {
    assert!(PmemObj::action_layout_ok());
    let (_d, p) = pool();
    assert_eq!(p.mapped_len(), POOL);
    assert!(!p.base().is_null());
    assert_eq!(p.root_if_any().unwrap(), None);
    let r = p.root(4096).unwrap();
    assert!(r > 0 && r as usize + 4096 <= POOL);
    assert!(p.root_size() >= 4096);
    assert_eq!(p.root_if_any().unwrap(), Some(r));
    assert_eq!(
        p.root(100).unwrap(),
        r,
        "an existing root is returned as is"
    );
    assert_eq!(objects(&p), vec![], "the iterator never returns the root");
    assert_eq!(PmemObj::root_type_num(), 0);
}

#[test]
fn publish_is_atomic_and_cancel_returns() {
    let (dir, p) = pool();
    let root = p.root(64).unwrap();
    let a = p.reserve(100, TYPE).unwrap();
    let b = p.reserve(5000, TYPE).unwrap();
    assert!(a.usable >= 100 && b.usable >= 5000);
    assert_ne!(a.off, b.off);
    assert_eq!(objects(&p).len(), 0, "reservations are not objects yet");
    // Link both from the root, in the same publish.
    // SAFETY: the words are in the root object.
    let la = unsafe { p.set_value_action(root, a.off) }.unwrap();
    let lb = unsafe { p.set_value_action(root + 8, b.off) }.unwrap();
    let mut acts = vec![a.action, b.action, la, lb];
    p.publish(&mut acts).unwrap();
    let objs = objects(&p);
    assert!(objs.contains(&(a.off, TYPE)) && objs.contains(&(b.off, TYPE)));
    // SAFETY: both are live objects.
    unsafe {
        assert_eq!(p.usable_size_at(a.off).unwrap(), a.usable);
        assert_eq!(p.usable_size_at(b.off).unwrap(), b.usable);
    }

    // A cancelled reservation leaves nothing behind.
    let c = p.reserve(64, TYPE).unwrap();
    let mut ca = [c.action];
    p.cancel(&mut ca);

    // Free `a` and clear its link atomically.
    // SAFETY: `a` is live and freed once; the word is in the root.
    let mut acts = unsafe {
        vec![
            p.defer_free_action(a.off).unwrap(),
            p.set_value_action(root, 0).unwrap(),
        ]
    };
    p.publish(&mut acts).unwrap();
    assert_eq!(objects(&p), vec![(b.off, TYPE)], "only b");

    // Reopen: the links are durable and the objects still there.
    let path = dir.path().join("obj");
    drop(p);
    let p = PmemObj::open(&path, "actions").unwrap();
    assert_eq!(p.root_if_any().unwrap(), Some(root));
    assert_eq!(objects(&p), vec![(b.off, TYPE)]);
}

#[test]
fn misuse_is_a_typed_error() {
    let (_d, p) = pool();
    assert!(matches!(p.reserve(0, TYPE), Err(Error::Param { .. })));
    assert!(matches!(
        p.reserve(PmemObj::max_alloc_size() + 1, TYPE),
        Err(Error::Param { .. })
    ));
    let e = p.reserve(POOL, TYPE).unwrap_err();
    assert_eq!(e.errno(), Some(libc::ENOMEM), "{e}");
    // SAFETY: every call below is refused before PMDK sees the offset.
    unsafe {
        assert!(matches!(
            p.set_value_action(3, 1),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            p.set_value_action(POOL as u64, 1),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            p.defer_free_action(0),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            p.usable_size_at(u64::MAX),
            Err(Error::OutOfRange { .. })
        ));
    }
    p.publish(&mut []).unwrap();
}

#[test]
fn a_large_publish_goes_through() {
    let (_d, p) = pool();
    let root = p.root(8 * 1024).unwrap();
    let mut acts = Vec::new();
    let mut offs = Vec::new();
    for i in 0..512u64 {
        let r = p.reserve(64, TYPE).unwrap();
        offs.push(r.off);
        acts.push(r.action);
        // SAFETY: the word is in the root object.
        acts.push(unsafe { p.set_value_action(root + 8 * i, r.off) }.unwrap());
    }
    p.publish(&mut acts).unwrap();
    assert_eq!(objects(&p).len(), 512);
    // SAFETY: reads the root's words, inside the mapping.
    let linked: Vec<u64> = (0..512)
        .map(|i| unsafe { p.base().add(root as usize + 8 * i).cast::<u64>().read() })
        .collect();
    assert_eq!(linked, offs);
}

/// With feature `count`, libpmemobj's flushes and fences are counted: a
/// publish of one reservation and its link costs PMDK some fences.
#[cfg(feature = "count")]
#[test]
fn pmdk_fences_are_counted() {
    use ferrite_pmdk::PmdkCounts;
    let (_d, p) = pool();
    let root = p.root(64).unwrap();
    let before = PmdkCounts::snapshot();
    let r = p.reserve(64, TYPE).unwrap();
    let after_reserve = PmdkCounts::snapshot();
    // SAFETY: the word is in the root object.
    let l = unsafe { p.set_value_action(root, r.off) }.unwrap();
    p.publish(&mut [r.action, l]).unwrap();
    let d = PmdkCounts::snapshot() - after_reserve;
    eprintln!(
        "reserve: {:?}; publish of 1 block + 1 link: {d:?}",
        after_reserve - before
    );
    assert!(d.fences >= 1, "{d:?}");
    assert!(d.lines >= 1, "{d:?}");
}
