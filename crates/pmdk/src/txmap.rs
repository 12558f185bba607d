//! PMDK's transactional hash-map insert, the peer of ferrite-ds's hash map
//! in `ferrite bench tx` [P1 ch3].
//!
//! The map and its transactions are in `csrc/shim.c` (`TX_BEGIN` uses
//! `setjmp`): 256 sub-maps of chained buckets that double when they hold
//! more than two entries per bucket, each write undo-logged with
//! `pmemobj_tx_add_range_direct`, the entry allocated with
//! `pmemobj_tx_alloc` — the same structure and algorithm as Ferrite's.
//! This wrapper owns the pool and, like Ferrite's map, one reader-writer
//! lock per sub-map (strict two-phase locking is the caller's job in both
//! libraries).
#![cfg(feature = "link")]

use std::ffi::{CString, c_char, c_int, c_void};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::RwLock;

use crate::error::{Error, Lib, Result, c_path, last_error, pmdk_error};
use crate::ffi;

// csrc/shim.c
unsafe extern "C" {
    fn ferrite_pmdk_txmap_create(
        pop: *mut ffi::PMEMobjpool,
        subs: u64,
        buckets: u64,
        value_len: u64,
    ) -> c_int;
    fn ferrite_pmdk_txmap_insert(
        pop: *mut ffi::PMEMobjpool,
        key: u64,
        value: *const c_void,
        len: usize,
        inserted: *mut c_int,
    ) -> c_int;
    fn ferrite_pmdk_txmap_get(
        pop: *mut ffi::PMEMobjpool,
        key: u64,
        out: *mut c_void,
        len: usize,
    ) -> c_int;
    fn ferrite_pmdk_txmap_count(pop: *mut ffi::PMEMobjpool) -> u64;
    fn pmemobj_ctl_set(pop: *mut ffi::PMEMobjpool, name: *const c_char, arg: *mut c_void) -> c_int;
}

/// Most sub-maps (the root object's fixed table).
pub const MAX_SUBS: usize = 256;

/// splitmix64, as the shim and ferrite-ds hash keys.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A libpmemobj pool holding one transactional hash map. Closed on drop.
#[derive(Debug)]
pub struct PmemTxMap {
    pop: NonNull<ffi::PMEMobjpool>,
    subs: u64,
    value_len: usize,
    locks: Vec<RwLock<()>>,
}

// SAFETY: the pool handle is a pointer libpmemobj lets any thread use;
// transactions are per thread, and every access to a sub-map is under its
// lock (writers exclusive), so no two threads race on its bytes.
unsafe impl Send for PmemTxMap {}
// SAFETY: as above; `&self` methods take the sub-map's lock first.
unsafe impl Sync for PmemTxMap {}

impl PmemTxMap {
    /// Creates a pool of `pool_size` bytes at `path` (which must not exist)
    /// holding an empty map of `subs` sub-maps (a power of two, at most
    /// 256) of `buckets` initial buckets (a power of two), storing values
    /// of `value_len` bytes. The pool is prefaulted at creation (PMDK's
    /// `prefault.at_create`), so page faults are not part of what a
    /// benchmark times — as for Ferrite's pools, which the benchmark
    /// touches before it starts.
    pub fn create(
        path: &Path,
        pool_size: usize,
        subs: usize,
        buckets: usize,
        value_len: usize,
    ) -> Result<PmemTxMap> {
        if !subs.is_power_of_two() || subs > MAX_SUBS || !buckets.is_power_of_two() {
            return Err(Error::OutOfRange {
                what: "txmap subs/buckets",
                start: subs as u64,
                end: buckets as u64,
                limit: MAX_SUBS as u64,
            });
        }
        let cpath = c_path(path)?;
        let layout = CString::new("ferrite-txmap").expect("no NUL");
        set_prefault(true)?;
        // SAFETY: both strings are valid and NUL-terminated for the call.
        let pop = unsafe { ffi::pmemobj_create(cpath.as_ptr(), layout.as_ptr(), pool_size, 0o600) };
        // The setting is process-wide: put it back for other pools.
        set_prefault(false)?;
        let pop = NonNull::new(pop).ok_or_else(|| last_error(Lib::Obj, "pmemobj_create"))?;
        let map = PmemTxMap {
            pop,
            subs: subs as u64,
            value_len,
            locks: (0..subs).map(|_| RwLock::new(())).collect(),
        };
        // SAFETY: `pop` is open; the shim keeps setjmp/longjmp inside its
        // own frame and leaves no transaction open.
        let err = unsafe {
            ferrite_pmdk_txmap_create(pop.as_ptr(), subs as u64, buckets as u64, value_len as u64)
        };
        if err != 0 {
            return Err(pmdk_error(Lib::Obj, "txmap create transaction", err));
        }
        Ok(map)
    }

    fn lock(&self, key: u64) -> &RwLock<()> {
        &self.locks[((mix64(key) >> 56) & (self.subs - 1)) as usize]
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

    /// Inserts `key` (or overwrites its value) in one PMDK transaction,
    /// under the key's sub-map lock. True when the key was new.
    pub fn insert(&self, key: u64, value: &[u8]) -> Result<bool> {
        self.check_len("txmap insert", value.len())?;
        let _g = self.lock(key).write().unwrap_or_else(|p| p.into_inner());
        let mut inserted: c_int = 0;
        // SAFETY: `pop` is open; `value` is valid for `len` bytes and
        // `inserted` is a live out-parameter; the sub-map is locked.
        let err = unsafe {
            ferrite_pmdk_txmap_insert(
                self.pop.as_ptr(),
                key,
                value.as_ptr().cast(),
                value.len(),
                &mut inserted,
            )
        };
        if err != 0 {
            return Err(pmdk_error(Lib::Obj, "txmap insert transaction", err));
        }
        Ok(inserted != 0)
    }

    /// The value of `key`, if present (under the sub-map's read lock).
    pub fn get(&self, key: u64) -> Result<Option<Vec<u8>>> {
        let _g = self.lock(key).read().unwrap_or_else(|p| p.into_inner());
        let mut out = vec![0u8; self.value_len];
        // SAFETY: `pop` is open, `out` is writable for `len` bytes, and
        // the sub-map is read-locked, so no transaction changes it.
        let rc = unsafe {
            ferrite_pmdk_txmap_get(self.pop.as_ptr(), key, out.as_mut_ptr().cast(), out.len())
        };
        match rc {
            1 => Ok(Some(out)),
            0 => Ok(None),
            _ => self.check_len("txmap get", usize::MAX).map(|()| None),
        }
    }

    /// Entries in the map. Takes every lock (in order), so it sees a
    /// consistent count.
    pub fn len(&self) -> u64 {
        let _g: Vec<_> = self
            .locks
            .iter()
            .map(|l| l.read().unwrap_or_else(|p| p.into_inner()))
            .collect();
        // SAFETY: `pop` is open and every sub-map is read-locked.
        unsafe { ferrite_pmdk_txmap_count(self.pop.as_ptr()) }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn value_len(&self) -> usize {
        self.value_len
    }
}

/// Sets libpmemobj's process-wide `prefault.at_create`.
pub(crate) fn set_prefault(on: bool) -> Result<()> {
    let name = CString::new("prefault.at_create").expect("no NUL");
    let mut arg: c_int = c_int::from(on);
    // SAFETY: a NULL pool addresses the global namespace; the name is a
    // valid NUL-terminated string and `arg` a live int, as this entry point
    // documents (`prefault.at_create | rw | global | int`).
    let rc = unsafe {
        pmemobj_ctl_set(
            std::ptr::null_mut(),
            name.as_ptr(),
            (&mut arg as *mut c_int).cast(),
        )
    };
    if rc != 0 {
        return Err(last_error(Lib::Obj, "pmemobj_ctl_set(prefault.at_create)"));
    }
    Ok(())
}

impl Drop for PmemTxMap {
    fn drop(&mut self) {
        // SAFETY: `pop` is open and this is its last use.
        unsafe { ffi::pmemobj_close(self.pop.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserts_updates_and_rehashes_agree_with_a_model() {
        let dir = tempfile::Builder::new()
            .prefix("ferrite-pmdk-txmap-")
            .tempdir_in(crate::SHM_DIR)
            .unwrap();
        let m = PmemTxMap::create(&dir.path().join("map"), 64 << 20, 4, 2, 32).unwrap();
        let mut model = std::collections::BTreeMap::new();
        for i in 0..2000u64 {
            let k = mix64(i) % 700;
            let v = vec![(i % 251) as u8; 32];
            assert_eq!(m.insert(k, &v).unwrap(), model.insert(k, v).is_none());
        }
        for (k, v) in &model {
            assert_eq!(m.get(*k).unwrap().as_ref(), Some(v));
        }
        assert_eq!(m.get(10_000).unwrap(), None);
        assert_eq!(m.len(), model.len() as u64);
        assert!(matches!(m.insert(1, &[0; 3]), Err(Error::Length { .. })));
    }
}
