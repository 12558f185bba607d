//! libpmemobj's reserve/publish ("action") API, the root object and object
//! iteration: what it takes to run Ferrite's storage engines over PMDK's
//! allocator (`ferrite-bench`'s `pmdk_alloc`).
//!
//! `pmemobj_reserve` picks a block in DRAM and returns an [`Action`];
//! `pmemobj_set_value` and `pmemobj_defer_free` make actions for an 8-byte
//! store and a free; `pmemobj_publish` makes any array of actions durable
//! **atomically** through the lane's redo log; `pmemobj_cancel` drops
//! reservations. That is exactly the reserve → publish contract of
//! `ferrite_alloc::AllocThread`.
//!
//! Offsets: a `PMEMoid.off` is a byte offset from the pool's base address
//! ([`PmemObj::base`]), which is where libpmemobj mapped the pool file, so
//! the pool's `[0, len)` range ([`PmemObj::mapped_len`]) is indexed by the
//! same numbers `pmemobj_reserve` returns.
//!
//! Safety split: calls that only read PMDK's answer or check ranges are
//! safe. The ones that make PMDK write or interpret pool memory at a
//! caller's offset ([`PmemObj::set_value_action`],
//! [`PmemObj::defer_free_action`], [`PmemObj::usable_size_at`]) are `unsafe`:
//! an offset inside PMDK's own metadata, or a free of something that is not
//! a live object, corrupts the heap, which PMDK then trusts.

use std::ffi::c_void;

use crate::error::{Error, Lib, Result, last_error};
use crate::ffi;
use crate::obj::PmemObj;

/// One pending `struct pobj_action`: a reservation, a deferred free or a
/// deferred 8-byte store, until it is published or cancelled.
///
/// Plain data (PMDK copies them freely); an `Action` must be published or
/// cancelled on the pool that made it, at most once. Dropping a
/// reservation's action without either leaks the reserved block until the
/// pool is reopened (never durably: reservations live in DRAM).
#[derive(Clone, Copy)]
pub struct Action {
    raw: ffi::PobjAction,
}

impl std::fmt::Debug for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // SAFETY: reads two fields of a struct PMDK initialised.
        let (off, usable) = unsafe {
            (
                ffi::ferrite_pmdk_action_offset(&self.raw),
                ffi::ferrite_pmdk_action_usable_size(&self.raw),
            )
        };
        f.debug_struct("Action")
            .field("heap_offset", &off)
            .field("usable_size", &usable)
            .finish()
    }
}

impl Action {
    fn empty() -> Action {
        Action {
            raw: ffi::PobjAction { words: [0; 16] },
        }
    }

    /// Pool offset of the block of a reserve or free action (0 for a
    /// store action).
    pub fn block_offset(&self) -> u64 {
        // SAFETY: reads the action's type and heap fields, which PMDK
        // initialised when it made the action.
        unsafe { ffi::ferrite_pmdk_action_offset(&self.raw) }
    }
}

/// A reservation made by [`PmemObj::reserve`].
#[derive(Debug)]
pub struct Reserved {
    /// What to publish (or cancel).
    pub action: Action,
    /// Pool offset of the reserved block (its `PMEMoid.off`).
    pub off: u64,
    /// Bytes usable in the block (at least the size asked for).
    pub usable: usize,
}

/// One allocated object, as [`PmemObj::for_each_object`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Object {
    /// Pool offset (`PMEMoid.off`).
    pub off: u64,
    /// Usable bytes.
    pub usable: usize,
    /// The type number it was allocated with.
    pub type_num: u64,
}

impl PmemObj {
    /// Whether this build's mirror of `struct pobj_action` has the C size.
    /// Every action method checks it and fails with [`Error::Length`]
    /// otherwise (a libpmemobj built with another layout).
    pub fn action_layout_ok() -> bool {
        // SAFETY: returns a compile-time constant.
        unsafe { ffi::ferrite_pmdk_action_size() == std::mem::size_of::<ffi::PobjAction>() }
    }

    fn check_layout() -> Result<()> {
        if Self::action_layout_ok() {
            return Ok(());
        }
        Err(Error::Length {
            what: "struct pobj_action",
            // SAFETY: returns a compile-time constant.
            expected: unsafe { ffi::ferrite_pmdk_action_size() },
            got: std::mem::size_of::<ffi::PobjAction>(),
        })
    }

    /// Largest object libpmemobj allocates (`PMEMOBJ_MAX_ALLOC_SIZE`).
    pub fn max_alloc_size() -> usize {
        // SAFETY: returns a compile-time constant.
        unsafe { ffi::ferrite_pmdk_max_alloc_size() }
    }

    /// The type number libpmemobj gives the root object.
    pub fn root_type_num() -> u64 {
        // SAFETY: returns a compile-time constant.
        unsafe { ffi::ferrite_pmdk_root_type_num() }
    }

    /// Address at which the pool is mapped: `PMEMoid.off` is relative to it.
    pub fn base(&self) -> *mut u8 {
        self.pop.as_ptr().cast::<u8>()
    }

    /// Bytes mapped at [`base`](Self::base) (the pool file's size).
    pub fn mapped_len(&self) -> usize {
        self.len
    }

    /// The root object's offset, creating it zeroed with `size` bytes if
    /// there is none (`pmemobj_root`). libpmemobj grows (and may move) an
    /// existing smaller root; callers that must not move it check
    /// [`root_size`](Self::root_size) first.
    pub fn root(&self, size: usize) -> Result<u64> {
        // SAFETY: `pop` is open; pmemobj_root validates `size` itself.
        let oid = unsafe { ffi::pmemobj_root(self.pop.as_ptr(), size) };
        if oid.off == 0 {
            return Err(last_error(Lib::Obj, "pmemobj_root"));
        }
        self.check_off("pmemobj_root", oid.off, size)?;
        // The offsets-equal-mapping-offsets claim of this module, checked
        // where it is cheap: PMDK's own translation of the root.
        // SAFETY: `oid` is this open pool's root object.
        let direct = unsafe { ffi::pmemobj_direct(oid) } as usize;
        if direct != self.base() as usize + oid.off as usize {
            return Err(Error::Corrupt {
                what: format!(
                    "pmemobj_direct(root) is {direct:#x}, not base {:#x} + offset {:#x}",
                    self.base() as usize,
                    oid.off
                ),
            });
        }
        Ok(oid.off)
    }

    /// The root object's offset, if there is one (without creating it).
    pub fn root_if_any(&self) -> Result<Option<u64>> {
        if self.root_size() == 0 {
            return Ok(None);
        }
        // With a root present, size 0 returns it unchanged.
        self.root(0).map(Some)
    }

    /// Bytes of the root object (0 when there is none).
    pub fn root_size(&self) -> usize {
        // SAFETY: `pop` is open.
        unsafe { ffi::pmemobj_root_size(self.pop.as_ptr()) }
    }

    /// Reserves `size` bytes of type `type_num` (`pmemobj_reserve`):
    /// DRAM only, nothing durable until the action is
    /// [`publish`](Self::publish)ed; a crash forgets it.
    /// Size 0 (on which libpmemobj 1.12 crashes) and sizes above
    /// [`max_alloc_size`](Self::max_alloc_size) are refused with
    /// [`Error::Param`] before PMDK is called.
    pub fn reserve(&self, size: usize, type_num: u64) -> Result<Reserved> {
        Self::check_layout()?;
        if size == 0 || size > Self::max_alloc_size() {
            return Err(Error::Param {
                what: "pmemobj_reserve size",
                value: size as u64,
                min: 1,
                max: Self::max_alloc_size() as u64,
            });
        }
        let mut action = Action::empty();
        // SAFETY: `pop` is open and `action` is a live, writable struct of
        // the size PMDK expects (checked above).
        let oid =
            unsafe { ffi::pmemobj_reserve(self.pop.as_ptr(), &mut action.raw, size, type_num) };
        if oid.off == 0 {
            return Err(last_error(Lib::Obj, "pmemobj_reserve"));
        }
        // SAFETY: PMDK filled the action's heap fields.
        let usable = unsafe { ffi::ferrite_pmdk_action_usable_size(&action.raw) } as usize;
        if let Err(e) = self.check_off("pmemobj_reserve", oid.off, usable.max(size)) {
            self.cancel(std::slice::from_mut(&mut action));
            return Err(e);
        }
        Ok(Reserved {
            action,
            off: oid.off,
            usable,
        })
    }

    /// An action that stores `value` at pool offset `off` when published
    /// (`pmemobj_set_value`). Fails for an offset that is not an 8-byte
    /// aligned word of the pool.
    ///
    /// # Safety
    ///
    /// The word must not be part of libpmemobj's own metadata (pool and
    /// heap headers, chunk and object headers, lanes): it must lie in the
    /// root object or in an object allocated or reserved by the caller.
    pub unsafe fn set_value_action(&self, off: u64, value: u64) -> Result<Action> {
        Self::check_layout()?;
        if !off.is_multiple_of(8) {
            return Err(Error::OutOfRange {
                what: "pmemobj_set_value (unaligned word)",
                start: off,
                end: off.saturating_add(8),
                limit: self.len as u64,
            });
        }
        self.check_off("pmemobj_set_value", off, 8)?;
        let mut action = Action::empty();
        // SAFETY: `off + 8 <= len` (checked), so the pointer is an aligned
        // word of the mapped pool; the caller guarantees it is not PMDK
        // metadata. PMDK only records the pointer now and stores at publish.
        unsafe {
            let ptr = self.base().add(off as usize).cast::<u64>();
            ffi::pmemobj_set_value(self.pop.as_ptr(), &mut action.raw, ptr, value);
        }
        Ok(action)
    }

    /// An action that frees the object at `off` when published
    /// (`pmemobj_defer_free`).
    ///
    /// # Safety
    ///
    /// `off` must be a live (published) object of this pool, and no other
    /// pending action may free it.
    pub unsafe fn defer_free_action(&self, off: u64) -> Result<Action> {
        Self::check_layout()?;
        self.check_off("pmemobj_defer_free", off, 1)?;
        let mut action = Action::empty();
        // SAFETY: `off` is in the pool (checked) and, per the caller, a live
        // object, so `pmemobj_oid` of its address yields its PMEMoid and
        // PMDK can read its header.
        unsafe {
            let oid = ffi::pmemobj_oid(self.base().add(off as usize).cast::<c_void>());
            if oid.off != off {
                return Err(Error::ForeignOid);
            }
            ffi::pmemobj_defer_free(self.pop.as_ptr(), oid, &mut action.raw);
        }
        Ok(action)
    }

    /// Makes every action durable, all or none after a crash
    /// (`pmemobj_publish`: one redo log for the lot). The actions are
    /// consumed either way: on error PMDK has applied none of them, and
    /// its reservations are still reserved (cancel them to return them).
    pub fn publish(&self, actions: &mut [Action]) -> Result<()> {
        Self::check_layout()?;
        if actions.is_empty() {
            return Ok(());
        }
        // SAFETY: `pop` is open; the slice is a contiguous array of
        // `struct pobj_action` made by this pool (an `Action` only comes
        // from this module's constructors, each of which PMDK filled).
        let rc = unsafe {
            ffi::pmemobj_publish(
                self.pop.as_ptr(),
                actions.as_mut_ptr().cast::<ffi::PobjAction>(),
                actions.len(),
            )
        };
        if rc != 0 {
            return Err(last_error(Lib::Obj, "pmemobj_publish"));
        }
        Ok(())
    }

    /// Drops the actions unpublished (`pmemobj_cancel`): reservations go
    /// back to the heap; frees and stores are simply forgotten.
    pub fn cancel(&self, actions: &mut [Action]) {
        if actions.is_empty() || !Self::action_layout_ok() {
            return;
        }
        // SAFETY: as in `publish`.
        unsafe {
            ffi::pmemobj_cancel(
                self.pop.as_ptr(),
                actions.as_mut_ptr().cast::<ffi::PobjAction>(),
                actions.len(),
            )
        };
    }

    /// Usable bytes of the object at `off` (`pmemobj_alloc_usable_size`).
    ///
    /// # Safety
    ///
    /// `off` must be a live object of this pool (PMDK reads its header).
    pub unsafe fn usable_size_at(&self, off: u64) -> Result<usize> {
        self.check_off("pmemobj_alloc_usable_size", off, 1)?;
        // SAFETY: a live object of this open pool, per the caller.
        unsafe {
            let oid = ffi::pmemobj_oid(self.base().add(off as usize).cast::<c_void>());
            if oid.off != off {
                return Err(Error::ForeignOid);
            }
            Ok(ffi::pmemobj_alloc_usable_size(oid))
        }
    }

    /// Calls `f` for every allocated object except the root object (which
    /// libpmemobj's iterator never returns), in PMDK's heap order
    /// (`pmemobj_first`/`pmemobj_next`). Published objects only. No other
    /// thread may allocate or free meanwhile. An object outside the
    /// mapping (a corrupt heap) ends the walk with [`Error::Corrupt`].
    pub fn for_each_object(&self, f: &mut dyn FnMut(Object)) -> Result<()> {
        // SAFETY: `pop` is open; iteration reads PMDK's heap metadata.
        let mut oid = unsafe { ffi::pmemobj_first(self.pop.as_ptr()) };
        // A heap of `len` bytes holds fewer than len/16 objects: bounds the
        // walk if the metadata were corrupt enough to loop.
        let mut budget = self.len / 16 + 1;
        while oid.off != 0 {
            budget = budget.checked_sub(1).ok_or_else(|| Error::Corrupt {
                what: "pmemobj_next does not terminate".into(),
            })?;
            // SAFETY: `oid` was returned by PMDK's iterator for this pool.
            let (usable, type_num) = unsafe {
                (
                    ffi::pmemobj_alloc_usable_size(oid),
                    ffi::pmemobj_type_num(oid),
                )
            };
            self.check_off("pmemobj_next", oid.off, usable)
                .map_err(|e| Error::Corrupt {
                    what: format!("object outside the pool: {e}"),
                })?;
            f(Object {
                off: oid.off,
                usable,
                type_num,
            });
            // SAFETY: as above.
            oid = unsafe { ffi::pmemobj_next(oid) };
        }
        Ok(())
    }

    /// Checks that `off..off + len` lies inside the mapping.
    fn check_off(&self, what: &'static str, off: u64, len: usize) -> Result<()> {
        match off.checked_add(len as u64) {
            Some(end) if off > 0 && end <= self.len as u64 => Ok(()),
            end => Err(Error::OutOfRange {
                what,
                start: off,
                end: end.unwrap_or(u64::MAX),
                limit: self.len as u64,
            }),
        }
    }
}
