//! PMDK's transactional B+tree insert, the peer of ferrite-ds's B+tree
//! (`ferrite_ds::bptree`) in `ferrite bench tx` [P1 §3.4.2].
//!
//! The tree and its transactions are in `csrc/txbtree.c` (`TX_BEGIN` uses
//! `setjmp`), which documents the on-media format: Ferrite's, byte for
//! byte in the nodes (32-byte keys made by [`key32`], fanout F keys per
//! node, leaves linked by `next`, values in blocks of their own), with the
//! header in the pool's root object and pointers stored as pool offsets.
//! An insert is one libpmemobj transaction: every change to an existing
//! node is snapshotted first with `pmemobj_tx_add_range_direct` (only the
//! bytes it changes), the value block and the nodes a split creates come
//! from `pmemobj_tx_alloc`.
//!
//! # Locking (as Ferrite's, strict two-phase, taken before the transaction)
//!
//! One reader-writer lock for the root object (root pointer and height)
//! and one per node, in a DRAM table indexed by the node's pool offset
//! shifted right by ⌊log2 node size⌋ (two nodes are at least a node size
//! apart, so they never share a lock). A writer descends with read locks
//! on the header and the internal nodes and a write lock on the leaf; if
//! the leaf is full it releases everything and write-locks the header and
//! the whole path, since the split may climb to the root. Locks are taken
//! top-down and held until the transaction returns; readers read-lock the
//! path. So writers never deadlock and conflicting transactions never run
//! at once, as in Ferrite, and two threads insert into different leaves in
//! parallel.
#![cfg(feature = "link")]

use std::ffi::{CString, c_int, c_void};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::error::{Error, Lib, Result, c_path, last_error, pmdk_error};
use crate::ffi;
use crate::txmap::{mix64, set_prefault};

/// Bytes of a key.
pub const KEY: usize = 32;
/// Smallest and largest fanout (keys per node) the tree supports.
pub const FANOUT: std::ops::RangeInclusive<u64> = 3..=64;
/// Largest value length the tree supports.
pub const MAX_VALUE: usize = 4096;
const LAYOUT: &str = "ferrite-txbtree";

// csrc/txbtree.c
unsafe extern "C" {
    #[cfg(test)]
    fn ferrite_pmdk_txbtree_key32(k: u64, out: *mut u8);
    fn ferrite_pmdk_txbtree_create(
        pop: *mut ffi::PMEMobjpool,
        fanout: u64,
        value_len: u64,
    ) -> c_int;
    fn ferrite_pmdk_txbtree_params(
        pop: *mut ffi::PMEMobjpool,
        fanout: *mut u64,
        value_len: *mut u64,
    ) -> c_int;
    fn ferrite_pmdk_txbtree_root(pop: *mut ffi::PMEMobjpool, height: *mut u64) -> u64;
    fn ferrite_pmdk_txbtree_child(pop: *mut ffi::PMEMobjpool, node: u64, k: *const u8) -> u64;
    fn ferrite_pmdk_txbtree_node_n(pop: *mut ffi::PMEMobjpool, node: u64) -> u64;
    fn ferrite_pmdk_txbtree_insert(
        pop: *mut ffi::PMEMobjpool,
        key: u64,
        value: *const c_void,
        len: usize,
        inserted: *mut c_int,
    ) -> c_int;
    fn ferrite_pmdk_txbtree_insert_aborted(
        pop: *mut ffi::PMEMobjpool,
        key: u64,
        value: *const c_void,
        len: usize,
    ) -> c_int;
    fn ferrite_pmdk_txbtree_get(
        pop: *mut ffi::PMEMobjpool,
        key: u64,
        out: *mut c_void,
        len: usize,
    ) -> c_int;
    fn ferrite_pmdk_txbtree_check(
        pop: *mut ffi::PMEMobjpool,
        pool_size: u64,
        keys: *mut u64,
        cap: usize,
        count: *mut u64,
    ) -> c_int;
}

/// The 32-byte key of `k`, as ferrite-ds's `bptree::key32` makes it: `k`
/// big-endian, then three big-endian rounds of `mix64` chained from `k`.
pub fn key32(k: u64) -> [u8; KEY] {
    let mut b = [0u8; KEY];
    b[0..8].copy_from_slice(&k.to_be_bytes());
    let mut h = k;
    for i in 1..4 {
        h = mix64(h);
        b[8 * i..8 * i + 8].copy_from_slice(&h.to_be_bytes());
    }
    b
}

/// Bytes of a node of fanout `f` (as in ferrite-ds).
fn node_bytes(f: u64) -> u64 {
    32 + 32 * f + 8 * (f + 1)
}

/// A held lock of the descent.
enum Held<'a> {
    R(#[allow(dead_code)] RwLockReadGuard<'a, ()>),
    W(#[allow(dead_code)] RwLockWriteGuard<'a, ()>),
}

/// A libpmemobj pool holding one transactional B+tree. Closed on drop.
#[derive(Debug)]
pub struct PmemTxBtree {
    pop: NonNull<ffi::PMEMobjpool>,
    pool_size: u64,
    fanout: u64,
    value_len: usize,
    /// Guards the root object's `root` and `height`.
    head: RwLock<()>,
    /// One per `node_bytes`-aligned stretch of the pool.
    locks: Vec<RwLock<()>>,
    /// log2 of the stretch.
    shift: u32,
}

// SAFETY: the pool handle is a pointer libpmemobj lets any thread use;
// transactions are per thread, and every access to the tree is under the
// header lock and the locks of the nodes it touches (writers exclusive),
// so no two threads race on its bytes.
unsafe impl Send for PmemTxBtree {}
// SAFETY: as above; `&self` methods take the locks first.
unsafe impl Sync for PmemTxBtree {}

impl PmemTxBtree {
    /// Creates a pool of `pool_size` bytes at `path` (which must not exist)
    /// holding an empty tree of `fanout` keys per node storing values of
    /// `value_len` bytes. The pool is prefaulted at creation (as for
    /// `PmemTxMap`), so page faults are not part of what a benchmark times.
    pub fn create(
        path: &Path,
        pool_size: usize,
        fanout: usize,
        value_len: usize,
    ) -> Result<PmemTxBtree> {
        let (f, vlen) = (fanout as u64, value_len as u64);
        if !FANOUT.contains(&f) {
            return Err(Error::Param {
                what: "txbtree fanout",
                value: f,
                min: *FANOUT.start(),
                max: *FANOUT.end(),
            });
        }
        if value_len == 0 || value_len > MAX_VALUE {
            return Err(Error::Param {
                what: "txbtree value_len",
                value: vlen,
                min: 1,
                max: MAX_VALUE as u64,
            });
        }
        let cpath = c_path(path)?;
        let layout = CString::new(LAYOUT).expect("no NUL");
        set_prefault(true)?;
        // SAFETY: both strings are valid and NUL-terminated for the call.
        let pop = unsafe { ffi::pmemobj_create(cpath.as_ptr(), layout.as_ptr(), pool_size, 0o600) };
        // The setting is process-wide: put it back for other pools.
        set_prefault(false)?;
        let pop = NonNull::new(pop).ok_or_else(|| last_error(Lib::Obj, "pmemobj_create"))?;
        // SAFETY: `pop` is open and not yet shared; the shim keeps
        // setjmp/longjmp inside its own frame and leaves no transaction
        // open.
        let err = unsafe { ferrite_pmdk_txbtree_create(pop.as_ptr(), f, vlen) };
        if err != 0 {
            // SAFETY: `pop` is open and has no other user.
            unsafe { ffi::pmemobj_close(pop.as_ptr()) };
            return Err(pmdk_error(Lib::Obj, "txbtree create transaction", err));
        }
        PmemTxBtree::with_pool(pop, pool_size as u64)
    }

    /// Opens the tree in the pool at `path` (made by [`PmemTxBtree::create`]).
    pub fn open(path: &Path) -> Result<PmemTxBtree> {
        let pool_size = std::fs::metadata(path)
            .map_err(|e| Error::Pmdk {
                call: "stat",
                errno: e.raw_os_error().unwrap_or(0),
                msg: e.to_string(),
            })?
            .len();
        let cpath = c_path(path)?;
        let layout = CString::new(LAYOUT).expect("no NUL");
        // SAFETY: both strings are valid and NUL-terminated for the call.
        let pop = unsafe { ffi::pmemobj_open(cpath.as_ptr(), layout.as_ptr()) };
        let pop = NonNull::new(pop).ok_or_else(|| last_error(Lib::Obj, "pmemobj_open"))?;
        PmemTxBtree::with_pool(pop, pool_size)
    }

    /// Wraps an open pool (closing it on error): reads the tree's
    /// parameters and sizes the lock table for the pool.
    fn with_pool(pop: NonNull<ffi::PMEMobjpool>, pool_size: u64) -> Result<PmemTxBtree> {
        let (mut fanout, mut value_len) = (0u64, 0u64);
        // SAFETY: `pop` is open and not shared; the out-parameters are live.
        let rc = unsafe { ferrite_pmdk_txbtree_params(pop.as_ptr(), &mut fanout, &mut value_len) };
        if rc != 0 {
            // SAFETY: `pop` is open and has no other user.
            unsafe { ffi::pmemobj_close(pop.as_ptr()) };
            return Err(Error::Corrupt {
                what: "the pool's root object is not a txbtree header".into(),
            });
        }
        let shift = 63 - node_bytes(fanout).leading_zeros();
        let n = (pool_size >> shift) as usize + 1;
        Ok(PmemTxBtree {
            pop,
            pool_size,
            fanout,
            value_len: value_len as usize,
            head: RwLock::new(()),
            locks: (0..n).map(|_| RwLock::new(())).collect(),
            shift,
        })
    }

    fn check_len(&self, what: &'static str, n: usize) -> Result<()> {
        if n != self.value_len {
            return Err(Error::Length {
                what,
                expected: self.value_len,
                got: n,
            });
        }
        Ok(())
    }

    fn lock(&self, node: u64) -> Result<&RwLock<()>> {
        self.locks
            .get((node >> self.shift) as usize)
            .ok_or_else(|| Error::Corrupt {
                what: format!("txbtree node {node:#x} outside the pool"),
            })
    }

    /// Locks the path to `k`'s leaf, top-down: write locks everywhere with
    /// `write_all`, else read locks above the leaf and `leaf_write` on it.
    /// Returns the leaf. The caller holds the header lock.
    fn lock_path(
        &self,
        k: &[u8; KEY],
        write_all: bool,
        leaf_write: bool,
    ) -> Result<(u64, Vec<Held<'_>>)> {
        let mut height = 0u64;
        // SAFETY: `pop` is open and the header is locked, so root and
        // height are stable; the out-parameter is live.
        let mut x = unsafe { ferrite_pmdk_txbtree_root(self.pop.as_ptr(), &mut height) };
        let mut held = Vec::with_capacity(height as usize);
        for depth in 1..=height {
            let l = self.lock(x)?;
            let is_leaf = depth == height;
            held.push(if write_all || (is_leaf && leaf_write) {
                Held::W(l.write().unwrap_or_else(|p| p.into_inner()))
            } else {
                Held::R(l.read().unwrap_or_else(|p| p.into_inner()))
            });
            if !is_leaf {
                // SAFETY: `x` is an internal node (depth < height) and is
                // locked, so its keys and pointers are stable; `k` is 32
                // bytes.
                x = unsafe { ferrite_pmdk_txbtree_child(self.pop.as_ptr(), x, k.as_ptr()) };
            }
        }
        Ok((x, held))
    }

    fn run_insert(&self, key: u64, value: &[u8]) -> Result<bool> {
        let mut inserted: c_int = 0;
        // SAFETY: `pop` is open; `value` is valid for `len` bytes and
        // `inserted` is a live out-parameter; the caller holds the locks
        // of every node the insert can change.
        let err = unsafe {
            ferrite_pmdk_txbtree_insert(
                self.pop.as_ptr(),
                key,
                value.as_ptr().cast(),
                value.len(),
                &mut inserted,
            )
        };
        if err != 0 {
            return Err(pmdk_error(Lib::Obj, "txbtree insert transaction", err));
        }
        Ok(inserted != 0)
    }

    /// Inserts `key` (or overwrites its value) in one PMDK transaction.
    /// True when the key was new. On error nothing changed (the
    /// transaction aborted).
    pub fn insert(&self, key: u64, value: &[u8]) -> Result<bool> {
        self.check_len("txbtree insert", value.len())?;
        let k = key32(key);
        {
            // Optimistic: the leaf has room, so nothing above it changes.
            let _h = self.head.read().unwrap_or_else(|p| p.into_inner());
            let (leaf, _held) = self.lock_path(&k, false, true)?;
            // SAFETY: `leaf` is a node and write-locked.
            if unsafe { ferrite_pmdk_txbtree_node_n(self.pop.as_ptr(), leaf) } < self.fanout {
                return self.run_insert(key, value);
            }
        }
        // The leaf may split, up to the root: write-lock the whole path.
        let _h = self.head.write().unwrap_or_else(|p| p.into_inner());
        let _held = self.lock_path(&k, true, true)?;
        self.run_insert(key, value)
    }

    /// Runs the insert of `key` and aborts its transaction after the last
    /// write, as a failure would: afterwards the tree is as before (every
    /// change was snapshotted). Returns the abort's error (`ECANCELED`).
    #[doc(hidden)]
    pub fn insert_aborted(&self, key: u64, value: &[u8]) -> Result<()> {
        self.check_len("txbtree insert", value.len())?;
        let k = key32(key);
        let _h = self.head.write().unwrap_or_else(|p| p.into_inner());
        let _held = self.lock_path(&k, true, true)?;
        // SAFETY: as in `run_insert`; the whole path is write-locked.
        let err = unsafe {
            ferrite_pmdk_txbtree_insert_aborted(
                self.pop.as_ptr(),
                key,
                value.as_ptr().cast(),
                value.len(),
            )
        };
        Err(pmdk_error(Lib::Obj, "txbtree insert transaction", err))
    }

    /// The value of `key`, if present (under read locks on its path).
    pub fn get(&self, key: u64) -> Result<Option<Vec<u8>>> {
        let k = key32(key);
        let _h = self.head.read().unwrap_or_else(|p| p.into_inner());
        let _held = self.lock_path(&k, false, false)?;
        let mut out = vec![0u8; self.value_len];
        // SAFETY: `pop` is open, `out` is writable for `len` bytes, and the
        // path is read-locked, so no transaction changes it.
        let rc = unsafe {
            ferrite_pmdk_txbtree_get(self.pop.as_ptr(), key, out.as_mut_ptr().cast(), out.len())
        };
        match rc {
            1 => Ok(Some(out)),
            0 => Ok(None),
            _ => Err(Error::Corrupt {
                what: "the pool's root object is not a txbtree header".into(),
            }),
        }
    }

    /// Checks the whole tree (see `ferrite_pmdk_txbtree_check`: blocks
    /// allocated, leaves at one depth, keys ordered within their parents'
    /// bounds, every key a [`key32`], leaves chained left to right) and
    /// returns its keys in the order the leaf chain gives them, which is
    /// ascending when the check passes. Write-locks the header, so no
    /// operation runs meanwhile.
    pub fn check(&self) -> Result<Vec<u64>> {
        let _h = self.head.write().unwrap_or_else(|p| p.into_inner());
        let mut count = 0u64;
        // SAFETY: `pop` is open and the tree quiescent (header locked);
        // with a zero capacity the (dangling, aligned) key pointer is never
        // written.
        let rc = unsafe {
            ferrite_pmdk_txbtree_check(
                self.pop.as_ptr(),
                self.pool_size,
                std::ptr::NonNull::<u64>::dangling().as_ptr(),
                0,
                &mut count,
            )
        };
        check_rc(rc)?;
        let mut keys = vec![0u64; count as usize];
        // SAFETY: as above; `keys` is writable for `cap` entries.
        let rc = unsafe {
            ferrite_pmdk_txbtree_check(
                self.pop.as_ptr(),
                self.pool_size,
                keys.as_mut_ptr(),
                keys.len(),
                &mut count,
            )
        };
        check_rc(rc)?;
        keys.truncate(count as usize);
        Ok(keys)
    }

    /// Height of the tree (1: the root is a leaf).
    pub fn height(&self) -> u64 {
        let _h = self.head.read().unwrap_or_else(|p| p.into_inner());
        let mut height = 0u64;
        // SAFETY: `pop` is open, the header read-locked; `height` is live.
        unsafe { ferrite_pmdk_txbtree_root(self.pop.as_ptr(), &mut height) };
        height
    }

    pub fn fanout(&self) -> usize {
        self.fanout as usize
    }

    pub fn value_len(&self) -> usize {
        self.value_len
    }
}

/// Names the failure `ferrite_pmdk_txbtree_check` reported (its
/// `CHECK_*` codes).
fn check_rc(rc: c_int) -> Result<()> {
    let what = match rc {
        0 => return Ok(()),
        -1 => "no txbtree header, or bad fanout, value length or height",
        -2 => "a node or value block outside the pool or too small",
        -3 => "a leaf flag disagrees with the node's depth",
        -4 => "a node holds more than F keys, or an internal node none",
        -5 => "keys not increasing, or outside their parent's bounds",
        -6 => "a key that is not the key32 of its first word",
        -7 => "the leaf chain skips, repeats or reorders leaves",
        _ => "unknown txbtree check failure",
    };
    Err(Error::Corrupt {
        what: format!("txbtree check: {what}"),
    })
}

/// C's own key widening, for tests that hold it to [`key32`].
#[cfg(test)]
fn c_key32(k: u64) -> [u8; KEY] {
    let mut b = [0u8; KEY];
    // SAFETY: `b` is writable for the 32 bytes the function writes.
    unsafe { ferrite_pmdk_txbtree_key32(k, b.as_mut_ptr()) };
    b
}

impl Drop for PmemTxBtree {
    fn drop(&mut self) {
        // SAFETY: `pop` is open and this is its last use.
        unsafe { ffi::pmemobj_close(self.pop.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn dir() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("ferrite-pmdk-txbtree-")
            .tempdir_in(crate::SHM_DIR)
            .unwrap()
    }

    fn value(k: u64, round: u64, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (mix64(k ^ round) >> (8 * (i % 8))) as u8 ^ i as u8)
            .collect()
    }

    /// Inserts `n` pseudo-random keys (some repeated, so some inserts are
    /// updates) and holds the tree to a model after every phase.
    fn load(t: &PmemTxBtree, model: &mut BTreeMap<u64, Vec<u8>>, n: u64, seed: u64) {
        for i in 0..n {
            let k = mix64(seed ^ i) % (n * 3 / 4);
            let v = value(k, seed ^ i, t.value_len());
            assert_eq!(t.insert(k, &v).unwrap(), model.insert(k, v).is_none());
        }
    }

    fn agrees(t: &PmemTxBtree, model: &BTreeMap<u64, Vec<u8>>) {
        let keys = t.check().unwrap();
        assert!(keys.iter().eq(model.keys()), "leaf walk is not the model");
        for (k, v) in model {
            assert_eq!(t.get(*k).unwrap().as_ref(), Some(v), "key {k}");
        }
    }

    #[test]
    fn key32_is_the_same_in_c_and_rust() {
        for k in [0, 1, 2, 0xdead_beef, u64::MAX, mix64(7)] {
            assert_eq!(c_key32(k), key32(k));
        }
        assert_eq!(
            &key32(0x0102_0304_0506_0708)[..8],
            &[1, 2, 3, 4, 5, 6, 7, 8]
        );
        assert_eq!(&key32(5)[8..16], &mix64(5).to_be_bytes());
        assert_eq!(&key32(5)[16..24], &mix64(mix64(5)).to_be_bytes());
    }

    #[test]
    fn splits_at_every_level_keep_every_key_in_order() {
        for (fanout, n) in [(3usize, 3000u64), (4, 3000), (16, 20_000)] {
            let d = dir();
            let t = PmemTxBtree::create(&d.path().join("tree"), 64 << 20, fanout, 40).unwrap();
            let mut model = BTreeMap::new();
            load(&t, &mut model, n, fanout as u64);
            // 3000 keys in nodes of at most 3 or 4 keys, or 15 000 in
            // nodes of 16, need several levels of internal splits.
            assert!(t.height() >= 4, "fanout {fanout}: height {}", t.height());
            agrees(&t, &model);
            // Updates replace values in place and add no keys.
            let ks: Vec<u64> = model.keys().copied().step_by(3).collect();
            for k in ks {
                let v = value(k, 999, 40);
                assert!(!t.insert(k, &v).unwrap());
                model.insert(k, v);
            }
            agrees(&t, &model);
            assert_eq!(t.get(u64::MAX).unwrap(), None);
        }
    }

    #[test]
    fn ascending_and_descending_loads_split_at_the_edges() {
        let d = dir();
        let t = PmemTxBtree::create(&d.path().join("tree"), 32 << 20, 5, 8).unwrap();
        let mut model = BTreeMap::new();
        for k in (0..1000u64).chain((2000..3000).rev()) {
            let v = k.to_le_bytes().to_vec();
            assert!(t.insert(k, &v).unwrap());
            model.insert(k, v);
        }
        agrees(&t, &model);
    }

    #[test]
    fn reopened_pool_holds_the_tree() {
        let d = dir();
        let path = d.path().join("tree");
        let mut model = BTreeMap::new();
        {
            let t = PmemTxBtree::create(&path, 32 << 20, 6, 64).unwrap();
            load(&t, &mut model, 4000, 1);
        }
        let t = PmemTxBtree::open(&path).unwrap();
        assert_eq!((t.fanout(), t.value_len()), (6, 64));
        agrees(&t, &model);
        load(&t, &mut model, 1000, 2);
        drop(t);
        agrees(&PmemTxBtree::open(&path).unwrap(), &model);
    }

    #[test]
    fn an_aborted_insert_changes_nothing() {
        // A pool too small for the load: inserts fail once the heap is
        // full, each in a transaction that aborts and rolls back.
        let d = dir();
        let min = crate::obj::PmemObj::min_pool_size();
        let t = PmemTxBtree::create(&d.path().join("tree"), min, 4, 4096).unwrap();
        let mut model = BTreeMap::new();
        let mut failed = 0;
        for i in 0..10_000u64 {
            let k = mix64(i);
            let v = value(k, 0, 4096);
            match t.insert(k, &v) {
                Ok(fresh) => assert_eq!(fresh, model.insert(k, v).is_none()),
                Err(Error::Pmdk { errno, .. }) => {
                    assert_eq!(errno, libc::ENOMEM);
                    failed += 1;
                    if failed == 20 {
                        break;
                    }
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(failed, 20, "the pool never filled");
        agrees(&t, &model);
    }

    #[test]
    fn every_write_of_an_insert_is_rolled_back_by_an_abort() {
        // Fanout 3: most inserts split, many up to the root, so aborts
        // roll back shifts, splits, leaf links and root changes.
        let d = dir();
        let t = PmemTxBtree::create(&d.path().join("tree"), 32 << 20, 3, 16).unwrap();
        let mut model = BTreeMap::new();
        for i in 0..1500u64 {
            // Edges and middle: ascending, descending and random keys.
            let k = match i % 3 {
                0 => 1 << 40 | i,
                1 => (1 << 40) - i,
                _ => mix64(i) >> 1,
            };
            let v = value(k, i, 16);
            let old = model.get(&k).cloned();
            match t.insert_aborted(k, &v) {
                Err(Error::Pmdk { errno, .. }) => assert_eq!(errno, libc::ECANCELED),
                r => panic!("{r:?}"),
            }
            assert_eq!(t.get(k).unwrap(), old, "key {k} after its abort");
            if i % 100 == 0 {
                agrees(&t, &model);
            }
            let height = t.height();
            t.insert(k, &v).unwrap();
            model.insert(k, v.clone());
            // Updates are logged too.
            t.insert_aborted(k, &value(k, !i, 16)).unwrap_err();
            assert_eq!(t.get(k).unwrap(), Some(v));
            assert!(t.height() >= height);
        }
        agrees(&t, &model);
        assert!(t.height() >= 5);
    }

    #[test]
    fn two_threads_insert_into_one_tree() {
        let d = dir();
        let t = PmemTxBtree::create(&d.path().join("tree"), 64 << 20, 16, 32).unwrap();
        std::thread::scope(|s| {
            for th in 0..2u64 {
                let t = &t;
                s.spawn(move || {
                    for i in 0..5000u64 {
                        let k = mix64(2 * i + th);
                        assert!(t.insert(k, &value(k, 0, 32)).unwrap());
                    }
                });
            }
        });
        let model: BTreeMap<u64, Vec<u8>> = (0..10_000u64)
            .map(|i| (mix64(i), value(mix64(i), 0, 32)))
            .collect();
        agrees(&t, &model);
    }

    #[test]
    fn bad_arguments_are_typed_errors() {
        let d = dir();
        let p = d.path().join("tree");
        assert!(matches!(
            PmemTxBtree::create(&p, 16 << 20, 2, 8),
            Err(Error::Param { value: 2, .. })
        ));
        assert!(matches!(
            PmemTxBtree::create(&p, 16 << 20, 8, 0),
            Err(Error::Param { value: 0, .. })
        ));
        let t = PmemTxBtree::create(&p, 16 << 20, 8, 8).unwrap();
        assert!(matches!(t.insert(1, &[0; 3]), Err(Error::Length { .. })));
        drop(t);
        assert!(matches!(
            PmemTxBtree::open(&d.path().join("missing")),
            Err(Error::Pmdk { .. })
        ));
    }
}
