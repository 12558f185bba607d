//! A byte-keyed hash map on libpmemobj's undo transactions: the PMDK peer
//! of ferrite-ds's byte map, behind the server store `pmdk-undo`, so P1's
//! memcached comparison (clobber logging ÷ PMDK's undo transactions, 95/5
//! mix, one thread [P1 §3.4.6, Fig. 3.10]) runs against the real peer.
//!
//! The map and its transactions are in `csrc/txbytemap.c` (`TX_BEGIN`
//! uses `setjmp`), whose header comment documents the on-media format byte
//! by byte. In short: the pool's root object (magic `FERRPBYT`, version 1,
//! the sub-map count, the sub-maps' offsets) heads up to 256 sub-maps,
//! each a chained hash table that doubles past two entries per bucket;
//! an entry is one object of `24 + K + V` bytes (hash, next, the two
//! lengths, the key, the value) — Ferrite's entry layout. Keys hash as in
//! ferrite-ds (`hash_bytes`, then `mix64` for sub-map and bucket).
//!
//! # Writes
//!
//! [`PmemByteMap::batch`] runs one PMDK transaction for a batch of puts
//! and deletes, applied in order (a later operation on a key wins). A put
//! allocates a fresh entry with `pmemobj_tx_alloc`, links it where the old
//! entry was (or at the head of its bucket) and frees the old one with
//! `pmemobj_tx_free` — memcached's item replace, as P1's PMDK port of
//! memcached did; every existing word the batch changes (a link, a
//! sub-map's count) is snapshotted first with
//! `pmemobj_tx_add_range_direct`, so PMDK's undo log makes the batch all
//! or nothing after a crash or an abort. A full pool aborts the
//! transaction ([`Error::Full`]) and changes nothing. A sub-map that has
//! grown past two entries per bucket is doubled after the batch commits,
//! in a transaction of its own (a failed doubling leaves the map correct,
//! with longer chains).
//!
//! # Locking
//!
//! One reader-writer lock per sub-map, in DRAM: a batch write-locks the
//! sub-maps of its keys in ascending order (strict two-phase locking, no
//! deadlock) and holds them until its transaction and any doubling have
//! returned; a lookup read-locks one, a scan one at a time. So a
//! [`PmemByteMap`] is shared by threads, each running its own PMDK
//! transactions.
//!
//! # Damaged pools
//!
//! Opening checks the root object and every sub-map header and table;
//! every entry offset followed later is bounds-checked, and a chain longer
//! than its sub-map's count is reported: a damaged pool gives
//! [`Error::Corrupt`], never a panic or a read outside the pool.
#![cfg(feature = "link")]

use std::ffi::{CString, c_int, c_void};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::{RwLock, RwLockWriteGuard};

use crate::error::{Error, Lib, Result, c_path, last_error, pmdk_error};
use crate::ffi;
use crate::txmap::set_prefault;

/// The layout name of a map's pool (checked by `pmemobj_open`).
pub const LAYOUT: &str = "ferrite-bytemap";
/// Longest key: memcached's 250 bytes and the server's one-byte prefix.
pub const MAX_KEY: usize = 251;
/// Longest value (the server's items are at most 1 MiB + 28 bytes).
pub const MAX_VALUE: usize = 16 << 20;
/// Most sub-maps (the root object's fixed table).
pub const MAX_SUBS: usize = 256;

/// One operation of a batch as the shim takes it
/// (`struct ferrite_pmdk_bmap_op`).
#[repr(C)]
struct FfiOp {
    key: *const u8,
    klen: u64,
    value: *const u8,
    vlen: u64,
    put: u64,
}

/// A batch ready for the shim: its sub-maps (ascending), their write
/// locks (held while the guards live), and the shim's view of the ops.
struct Prepared<'a> {
    subs: Vec<usize>,
    _guards: Vec<RwLockWriteGuard<'a, ()>>,
    ops: Vec<FfiOp>,
}

type Visit = unsafe extern "C" fn(*mut c_void, *const u8, u64, *const u8, u64);

// csrc/txbytemap.c
unsafe extern "C" {
    fn ferrite_pmdk_bmap_max_key() -> u64;
    fn ferrite_pmdk_bmap_max_value() -> u64;
    fn ferrite_pmdk_bmap_max_subs() -> u64;
    fn ferrite_pmdk_bmap_hash(key: *const u8, len: u64) -> u64;
    fn ferrite_pmdk_bmap_sub_index(hash: u64, subs: u64) -> u64;
    fn ferrite_pmdk_bmap_create(pop: *mut ffi::PMEMobjpool, subs: u64, buckets: u64) -> c_int;
    fn ferrite_pmdk_bmap_open(pop: *mut ffi::PMEMobjpool, size: u64, subs: *mut u64) -> c_int;
    fn ferrite_pmdk_bmap_find(
        pop: *mut ffi::PMEMobjpool,
        size: u64,
        key: *const u8,
        klen: u64,
        value: *mut *const u8,
        vlen: *mut u64,
    ) -> c_int;
    fn ferrite_pmdk_bmap_apply(
        pop: *mut ffi::PMEMobjpool,
        size: u64,
        ops: *const FfiOp,
        n: u64,
        present: *mut u64,
    ) -> c_int;
    fn ferrite_pmdk_bmap_apply_aborted(
        pop: *mut ffi::PMEMobjpool,
        size: u64,
        ops: *const FfiOp,
        n: u64,
    ) -> c_int;
    fn ferrite_pmdk_bmap_rehash(pop: *mut ffi::PMEMobjpool, size: u64, sub: u64) -> c_int;
    fn ferrite_pmdk_bmap_scan_sub(
        pop: *mut ffi::PMEMobjpool,
        size: u64,
        sub: u64,
        prefix: *const u8,
        plen: u64,
        visit: Visit,
        arg: *mut c_void,
    ) -> c_int;
    fn ferrite_pmdk_bmap_count_sub(pop: *mut ffi::PMEMobjpool, size: u64, sub: u64) -> u64;
    fn ferrite_pmdk_bmap_sub_offset(pop: *mut ffi::PMEMobjpool, sub: u64) -> u64;
}

/// The map's key hash (ferrite-ds's `bytemap::hash_bytes`, computed by the
/// shim so the format has one definition).
pub fn hash(key: &[u8]) -> u64 {
    // SAFETY: reads `key.len()` bytes of a live slice.
    unsafe { ferrite_pmdk_bmap_hash(key.as_ptr(), key.len() as u64) }
}

/// A libpmemobj pool holding one byte map. Closed on drop.
#[derive(Debug)]
pub struct PmemByteMap {
    pop: NonNull<ffi::PMEMobjpool>,
    /// Bytes mapped at `pop` (every offset followed is checked against it).
    size: u64,
    subs: u64,
    locks: Vec<RwLock<()>>,
}

// SAFETY: the pool handle is a pointer libpmemobj lets any thread use;
// transactions are per thread, and every access to a sub-map's bytes is
// under its lock (writers exclusive), so no two threads race on them.
unsafe impl Send for PmemByteMap {}
// SAFETY: as above; `&self` methods take the sub-maps' locks first.
unsafe impl Sync for PmemByteMap {}

impl PmemByteMap {
    /// Creates a pool of `pool_size` bytes at `path` (which must not
    /// exist) holding an empty map of `subs` sub-maps (a power of two, at
    /// most 256) of `buckets` initial buckets each (a power of two). The
    /// pool is prefaulted at creation (PMDK's `prefault.at_create`), so
    /// page faults are not part of what a benchmark times.
    pub fn create(
        path: &Path,
        pool_size: usize,
        subs: usize,
        buckets: usize,
    ) -> Result<PmemByteMap> {
        if !subs.is_power_of_two() || subs > MAX_SUBS {
            return Err(Error::Param {
                what: "bytemap subs",
                value: subs as u64,
                min: 1,
                max: MAX_SUBS as u64,
            });
        }
        if !buckets.is_power_of_two() || buckets > 1 << 40 {
            return Err(Error::Param {
                what: "bytemap buckets (a power of two)",
                value: buckets as u64,
                min: 1,
                max: 1 << 40,
            });
        }
        let cpath = c_path(path)?;
        let layout = CString::new(LAYOUT).expect("no NUL");
        set_prefault(true)?;
        // SAFETY: both strings are valid and NUL-terminated for the call.
        let pop = unsafe { ffi::pmemobj_create(cpath.as_ptr(), layout.as_ptr(), pool_size, 0o600) };
        // The setting is process-wide: put it back for other pools.
        let reset = set_prefault(false);
        let pop = NonNull::new(pop).ok_or_else(|| last_error(Lib::Obj, "pmemobj_create"))?;
        // SAFETY: `pop` is open and not yet shared; the shim keeps
        // setjmp/longjmp inside its own frame and leaves no transaction
        // open.
        let err = unsafe { ferrite_pmdk_bmap_create(pop.as_ptr(), subs as u64, buckets as u64) };
        let made = if err != 0 {
            Err(if err == libc::ENOMEM {
                Error::Full {
                    what: "bytemap create",
                }
            } else {
                pmdk_error(Lib::Obj, "bytemap create transaction", err)
            })
        } else {
            reset
        };
        if let Err(e) = made {
            // SAFETY: `pop` is open and has no other user.
            unsafe { ffi::pmemobj_close(pop.as_ptr()) };
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
        PmemByteMap::with_pool(pop, path)
    }

    /// Opens the map in the pool at `path` (made by
    /// [`PmemByteMap::create`]). libpmemobj rolls back a transaction a
    /// crash interrupted while it opens the pool; then the map's root
    /// object and sub-maps are checked.
    pub fn open(path: &Path) -> Result<PmemByteMap> {
        let cpath = c_path(path)?;
        let layout = CString::new(LAYOUT).expect("no NUL");
        // SAFETY: both strings are valid and NUL-terminated for the call.
        let pop = unsafe { ffi::pmemobj_open(cpath.as_ptr(), layout.as_ptr()) };
        let pop = NonNull::new(pop).ok_or_else(|| last_error(Lib::Obj, "pmemobj_open"))?;
        PmemByteMap::with_pool(pop, path)
    }

    /// Wraps the open pool `pop` of the file at `path` (closing it on
    /// error): the pool's size, then the map's check.
    fn with_pool(pop: NonNull<ffi::PMEMobjpool>, path: &Path) -> Result<PmemByteMap> {
        let close = |e: Error| {
            // SAFETY: `pop` is open and has no other user.
            unsafe { ffi::pmemobj_close(pop.as_ptr()) };
            e
        };
        // A single-file pool is mapped whole: its offsets index the file's
        // bytes (page-rounded, as libpmemobj maps it).
        let size = std::fs::metadata(path)
            .map_err(|e| {
                close(Error::Corrupt {
                    what: format!("size of pool file {}: {e}", path.display()),
                })
            })?
            .len()
            & !4095;
        let mut subs = 0u64;
        // SAFETY: `pop` is open and not shared; `subs` is a live
        // out-parameter.
        let rc = unsafe { ferrite_pmdk_bmap_open(pop.as_ptr(), size, &mut subs) };
        let what = match rc {
            0 => None,
            libc::EINVAL => Some("the pool's root object is not a byte map".to_string()),
            libc::EPROTO => Some("the byte map has an unknown format version".to_string()),
            _ => Some("the byte map is damaged (a sub-map outside the pool)".to_string()),
        };
        if let Some(what) = what {
            return Err(close(Error::Corrupt { what }));
        }
        Ok(PmemByteMap {
            pop,
            size,
            subs,
            locks: (0..subs).map(|_| RwLock::new(())).collect(),
        })
    }

    fn check_key(key: &[u8]) -> Result<()> {
        if key.is_empty() || key.len() > MAX_KEY {
            return Err(Error::Param {
                what: "bytemap key length",
                value: key.len() as u64,
                min: 1,
                max: MAX_KEY as u64,
            });
        }
        Ok(())
    }

    fn sub_of(&self, key: &[u8]) -> usize {
        // SAFETY: pure arithmetic on two integers.
        unsafe { ferrite_pmdk_bmap_sub_index(hash(key), self.subs) as usize }
    }

    fn damaged(&self, what: &str) -> Error {
        Error::Corrupt {
            what: format!("byte map damaged: {what}"),
        }
    }

    /// Copies `key`'s value into `out` (cleared first); false when absent.
    pub fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        Self::check_key(key)?;
        let _g = self.locks[self.sub_of(key)]
            .read()
            .unwrap_or_else(|p| p.into_inner());
        let mut value: *const u8 = std::ptr::null();
        let mut vlen = 0u64;
        // SAFETY: `pop` is open; the key is a live slice; the out-
        // parameters are live; the sub-map is read-locked, so no
        // transaction changes it while the shim walks it.
        let rc = unsafe {
            ferrite_pmdk_bmap_find(
                self.pop.as_ptr(),
                self.size,
                key.as_ptr(),
                key.len() as u64,
                &mut value,
                &mut vlen,
            )
        };
        match rc {
            1 => {
                // SAFETY: the shim checked that the entry's `vlen` bytes
                // at `value` lie inside the mapped pool, and the sub-map
                // stays read-locked while they are copied, so no
                // transaction frees or rewrites them meanwhile.
                let v = unsafe { std::slice::from_raw_parts(value, vlen as usize) };
                out.extend_from_slice(v);
                Ok(true)
            }
            0 => Ok(false),
            _ => Err(self.damaged("a chain of the key's bucket")),
        }
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Ok(self.get_into(key, &mut out)?.then_some(out))
    }

    /// Inserts or replaces `key` in one transaction; true when it replaced.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        Ok(self.batch(&[(key, Some(value))])? == 1)
    }

    /// Deletes `key` in one transaction; false when it was absent.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        Ok(self.batch(&[(key, None)])? == 1)
    }

    /// Validates `ops`, write-locks their sub-maps in ascending order and
    /// builds the shim's view of them.
    fn prepare<'a>(&'a self, ops: &[(&[u8], Option<&[u8]>)]) -> Result<Prepared<'a>> {
        for (k, v) in ops {
            Self::check_key(k)?;
            if let Some(v) = v
                && v.len() > MAX_VALUE
            {
                return Err(Error::Param {
                    what: "bytemap value length",
                    value: v.len() as u64,
                    min: 0,
                    max: MAX_VALUE as u64,
                });
            }
        }
        let mut subs: Vec<usize> = ops.iter().map(|(k, _)| self.sub_of(k)).collect();
        subs.sort_unstable();
        subs.dedup();
        let guards = subs
            .iter()
            .map(|&s| self.locks[s].write().unwrap_or_else(|p| p.into_inner()))
            .collect();
        let ffi_ops = ops
            .iter()
            .map(|(k, v)| FfiOp {
                key: k.as_ptr(),
                klen: k.len() as u64,
                value: v.map_or(std::ptr::null(), |v| v.as_ptr()),
                vlen: v.map_or(0, |v| v.len() as u64),
                put: u64::from(v.is_some()),
            })
            .collect();
        Ok(Prepared {
            subs,
            _guards: guards,
            ops: ffi_ops,
        })
    }

    fn tx_error(&self, err: c_int) -> Error {
        match err {
            libc::ENOMEM => Error::Full {
                what: "bytemap batch",
            },
            libc::EUCLEAN => self.damaged("a chain the batch walked"),
            e => pmdk_error(Lib::Obj, "bytemap batch transaction", e),
        }
    }

    /// Applies `ops` (`None` deletes) in order, in one PMDK transaction:
    /// all or nothing. Returns how many of them found their key present.
    /// On error nothing changed.
    pub fn batch(&self, ops: &[(&[u8], Option<&[u8]>)]) -> Result<u64> {
        if ops.is_empty() {
            return Ok(0);
        }
        let Prepared {
            subs,
            _guards,
            ops: ffi_ops,
        } = self.prepare(ops)?;
        let mut present = 0u64;
        // SAFETY: `pop` is open; `ffi_ops` points at `ops.len()` live
        // records whose key and value pointers are valid for their lengths
        // (borrowed from `ops`, alive across the call); `present` is live;
        // every sub-map the batch touches is write-locked. The shim keeps
        // setjmp/longjmp inside its own frame.
        let err = unsafe {
            ferrite_pmdk_bmap_apply(
                self.pop.as_ptr(),
                self.size,
                ffi_ops.as_ptr(),
                ffi_ops.len() as u64,
                &mut present,
            )
        };
        if err != 0 {
            return Err(self.tx_error(err));
        }
        for s in subs {
            // SAFETY: `pop` is open and sub-map `s` is write-locked. A
            // failed doubling is rolled back by PMDK and leaves the map
            // correct (longer chains), and the batch has committed, so its
            // result is not turned into an error.
            let _ = unsafe { ferrite_pmdk_bmap_rehash(self.pop.as_ptr(), self.size, s as u64) };
        }
        Ok(present)
    }

    /// Runs `ops` as [`PmemByteMap::batch`] does, then aborts the
    /// transaction after its last write (a planted abort, for tests: PMDK's
    /// undo log must restore every byte). Returns the abort's error.
    #[doc(hidden)]
    pub fn batch_then_abort(&self, ops: &[(&[u8], Option<&[u8]>)]) -> Error {
        let Prepared {
            _guards,
            ops: ffi_ops,
            ..
        } = match self.prepare(ops) {
            Ok(p) => p,
            Err(e) => return e,
        };
        // SAFETY: as in `batch`.
        let err = unsafe {
            ferrite_pmdk_bmap_apply_aborted(
                self.pop.as_ptr(),
                self.size,
                ffi_ops.as_ptr(),
                ffi_ops.len() as u64,
            )
        };
        pmdk_error(Lib::Obj, "bytemap aborted batch", err)
    }

    /// Calls `f` on every pair whose key starts with `prefix`, one sub-map
    /// at a time: the pairs of a sub-map are copied under its read lock and
    /// handed to `f` after it is released (so `f` may take its time).
    pub fn scan_prefix(&self, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        unsafe extern "C" fn visit(arg: *mut c_void, k: *const u8, kl: u64, v: *const u8, vl: u64) {
            // SAFETY: `arg` is the `Vec` `scan_prefix` passed, alive and
            // not otherwise borrowed during the call; the shim checked
            // that `kl` bytes at `k` and `vl` bytes at `v` lie inside the
            // mapped pool, and the sub-map is read-locked.
            unsafe {
                let pairs = &mut *arg.cast::<Vec<(Vec<u8>, Vec<u8>)>>();
                pairs.push((
                    std::slice::from_raw_parts(k, kl as usize).to_vec(),
                    std::slice::from_raw_parts(v, vl as usize).to_vec(),
                ));
            }
        }
        let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for s in 0..self.subs {
            pairs.clear();
            let rc = {
                let _g = self.locks[s as usize]
                    .read()
                    .unwrap_or_else(|p| p.into_inner());
                // SAFETY: `pop` is open and sub-map `s` read-locked;
                // `prefix` is a live slice; `visit` matches the shim's
                // callback type and `pairs` outlives the call.
                unsafe {
                    ferrite_pmdk_bmap_scan_sub(
                        self.pop.as_ptr(),
                        self.size,
                        s,
                        prefix.as_ptr(),
                        prefix.len() as u64,
                        visit,
                        (&mut pairs as *mut Vec<(Vec<u8>, Vec<u8>)>).cast(),
                    )
                }
            };
            for (k, v) in &pairs {
                f(k, v);
            }
            if rc != 0 {
                return Err(self.damaged(&format!("sub-map {s}")));
            }
        }
        Ok(())
    }

    /// Entries in the map (each sub-map's count, under its lock).
    pub fn len(&self) -> u64 {
        (0..self.subs)
            .map(|s| {
                let _g = self.locks[s as usize]
                    .read()
                    .unwrap_or_else(|p| p.into_inner());
                // SAFETY: `pop` is open and sub-map `s` is read-locked.
                unsafe { ferrite_pmdk_bmap_count_sub(self.pop.as_ptr(), self.size, s) }
            })
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sub-maps of the map.
    pub fn subs(&self) -> usize {
        self.subs as usize
    }

    /// Pool offset of sub-map `s`'s header (0 if none): for tests that
    /// damage a pool file on purpose.
    #[doc(hidden)]
    pub fn sub_offset(&self, s: usize) -> u64 {
        // SAFETY: `pop` is open; the shim bounds-checks `s`.
        unsafe { ferrite_pmdk_bmap_sub_offset(self.pop.as_ptr(), s as u64) }
    }

    /// The shim's limits, for a test that they match the Rust constants.
    #[doc(hidden)]
    pub fn shim_limits() -> (usize, usize, usize) {
        // SAFETY: each returns a compile-time constant of the shim.
        unsafe {
            (
                ferrite_pmdk_bmap_max_key() as usize,
                ferrite_pmdk_bmap_max_value() as usize,
                ferrite_pmdk_bmap_max_subs() as usize,
            )
        }
    }
}

impl Drop for PmemByteMap {
    fn drop(&mut self) {
        // SAFETY: `pop` is open and this is its last use.
        unsafe { ffi::pmemobj_close(self.pop.as_ptr()) };
    }
}
