//! Raw declarations of the PMDK 1.12 functions this crate uses, and of the C
//! shim in `csrc/shim.c`. Signatures follow `libpmem*.h` from
//! `libpmem*-dev` 1.12. The libraries themselves are linked by `build.rs`.

use std::ffi::{c_char, c_int, c_longlong, c_void};
use std::marker::{PhantomData, PhantomPinned};

use libc::{iovec, mode_t};

/// Declares an opaque C struct that Rust only ever holds by pointer.
macro_rules! opaque {
    ($name:ident) => {
        #[repr(C)]
        pub struct $name {
            _data: [u8; 0],
            _marker: PhantomData<(*mut u8, PhantomPinned)>,
        }
    };
}

opaque!(PMEMlogpool);
opaque!(PMEMblkpool);
opaque!(PMEMobjpool);

/// `PMEMoid` from `libpmemobj/base.h`: a persistent pointer.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PMEMoid {
    pub pool_uuid_lo: u64,
    pub off: u64,
}

/// `struct pobj_action` from `libpmemobj/action_base.h`: 4 + 12 bytes of
/// type and data, then a union of 14 `uint64_t` — 128 bytes, 8-aligned.
/// Only PMDK reads or writes its contents; Rust just holds arrays of them.
/// The size is checked against the C compiler's `sizeof` before first use
/// ([`crate::PmemObj::action_layout_ok`]).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct PobjAction {
    pub words: [u64; 16],
}

/// `PMEM_FILE_CREATE` from `libpmem.h`.
pub const PMEM_FILE_CREATE: c_int = 1 << 0;
/// `PMEM_FILE_TMPFILE` from `libpmem.h`.
pub const PMEM_FILE_TMPFILE: c_int = 1 << 3;

/// `pmemobj_constr` from `libpmemobj/atomic_base.h`.
pub type PmemobjConstr =
    Option<unsafe extern "C" fn(*mut PMEMobjpool, *mut c_void, *mut c_void) -> c_int>;

/// Callback type of `pmemlog_walk`.
pub type WalkFn = unsafe extern "C" fn(buf: *const c_void, len: usize, arg: *mut c_void) -> c_int;

unsafe extern "C" {
    pub fn pmem_errormsg() -> *const c_char;
    pub fn pmem_is_pmem(addr: *const c_void, len: usize) -> c_int;
    pub fn pmem_map_file(
        path: *const c_char,
        len: usize,
        flags: c_int,
        mode: mode_t,
        mapped_lenp: *mut usize,
        is_pmemp: *mut c_int,
    ) -> *mut c_void;
    pub fn pmem_unmap(addr: *mut c_void, len: usize) -> c_int;
    pub fn pmem_persist(addr: *const c_void, len: usize);
    pub fn pmem_msync(addr: *const c_void, len: usize) -> c_int;
    pub fn pmem_drain();
    pub fn pmem_memcpy_persist(dest: *mut c_void, src: *const c_void, len: usize) -> *mut c_void;
    pub fn pmem_memcpy_nodrain(dest: *mut c_void, src: *const c_void, len: usize) -> *mut c_void;
}

unsafe extern "C" {
    pub fn pmemlog_errormsg() -> *const c_char;
    pub fn pmemlog_create(path: *const c_char, poolsize: usize, mode: mode_t) -> *mut PMEMlogpool;
    pub fn pmemlog_open(path: *const c_char) -> *mut PMEMlogpool;
    pub fn pmemlog_close(plp: *mut PMEMlogpool);
    pub fn pmemlog_nbyte(plp: *mut PMEMlogpool) -> usize;
    pub fn pmemlog_append(plp: *mut PMEMlogpool, buf: *const c_void, count: usize) -> c_int;
    pub fn pmemlog_appendv(plp: *mut PMEMlogpool, iov: *const iovec, iovcnt: c_int) -> c_int;
    pub fn pmemlog_tell(plp: *mut PMEMlogpool) -> c_longlong;
    pub fn pmemlog_rewind(plp: *mut PMEMlogpool);
    pub fn pmemlog_walk(
        plp: *mut PMEMlogpool,
        chunksize: usize,
        process_chunk: WalkFn,
        arg: *mut c_void,
    );
}

unsafe extern "C" {
    pub fn pmemblk_errormsg() -> *const c_char;
    pub fn pmemblk_create(
        path: *const c_char,
        bsize: usize,
        poolsize: usize,
        mode: mode_t,
    ) -> *mut PMEMblkpool;
    pub fn pmemblk_open(path: *const c_char, bsize: usize) -> *mut PMEMblkpool;
    pub fn pmemblk_close(pbp: *mut PMEMblkpool);
    pub fn pmemblk_bsize(pbp: *mut PMEMblkpool) -> usize;
    pub fn pmemblk_nblock(pbp: *mut PMEMblkpool) -> usize;
    pub fn pmemblk_read(pbp: *mut PMEMblkpool, buf: *mut c_void, blockno: c_longlong) -> c_int;
    pub fn pmemblk_write(pbp: *mut PMEMblkpool, buf: *const c_void, blockno: c_longlong) -> c_int;
    pub fn pmemblk_set_zero(pbp: *mut PMEMblkpool, blockno: c_longlong) -> c_int;
}

unsafe extern "C" {
    pub fn pmemobj_errormsg() -> *const c_char;
    pub fn pmemobj_create(
        path: *const c_char,
        layout: *const c_char,
        poolsize: usize,
        mode: mode_t,
    ) -> *mut PMEMobjpool;
    pub fn pmemobj_open(path: *const c_char, layout: *const c_char) -> *mut PMEMobjpool;
    pub fn pmemobj_close(pop: *mut PMEMobjpool);
    pub fn pmemobj_alloc(
        pop: *mut PMEMobjpool,
        oidp: *mut PMEMoid,
        size: usize,
        type_num: u64,
        constructor: PmemobjConstr,
        arg: *mut c_void,
    ) -> c_int;
    pub fn pmemobj_free(oidp: *mut PMEMoid);
    pub fn pmemobj_alloc_usable_size(oid: PMEMoid) -> usize;
    pub fn pmemobj_pool_by_oid(oid: PMEMoid) -> *mut PMEMobjpool;
    pub fn pmemobj_direct(oid: PMEMoid) -> *mut c_void;
    pub fn pmemobj_oid(addr: *const c_void) -> PMEMoid;
    pub fn pmemobj_type_num(oid: PMEMoid) -> u64;
    pub fn pmemobj_root(pop: *mut PMEMobjpool, size: usize) -> PMEMoid;
    pub fn pmemobj_root_size(pop: *mut PMEMobjpool) -> usize;
    pub fn pmemobj_first(pop: *mut PMEMobjpool) -> PMEMoid;
    pub fn pmemobj_next(oid: PMEMoid) -> PMEMoid;
    pub fn pmemobj_reserve(
        pop: *mut PMEMobjpool,
        act: *mut PobjAction,
        size: usize,
        type_num: u64,
    ) -> PMEMoid;
    pub fn pmemobj_set_value(
        pop: *mut PMEMobjpool,
        act: *mut PobjAction,
        ptr: *mut u64,
        value: u64,
    );
    pub fn pmemobj_defer_free(pop: *mut PMEMobjpool, oid: PMEMoid, act: *mut PobjAction);
    pub fn pmemobj_publish(pop: *mut PMEMobjpool, actv: *mut PobjAction, actvcnt: usize) -> c_int;
    pub fn pmemobj_cancel(pop: *mut PMEMobjpool, actv: *mut PobjAction, actvcnt: usize);
}

// csrc/shim.c, compiled into a static library by build.rs.
unsafe extern "C" {
    pub fn ferrite_pmdk_log_min_pool() -> usize;
    pub fn ferrite_pmdk_blk_min_pool() -> usize;
    pub fn ferrite_pmdk_blk_min_block() -> usize;
    pub fn ferrite_pmdk_obj_min_pool() -> usize;
    pub fn ferrite_pmdk_obj_max_layout() -> usize;
    pub fn ferrite_pmdk_type_num() -> u64;
    pub fn ferrite_pmdk_tx_alloc_free(pop: *mut PMEMobjpool, size: usize) -> c_int;
    pub fn ferrite_pmdk_action_size() -> usize;
    pub fn ferrite_pmdk_max_alloc_size() -> usize;
    pub fn ferrite_pmdk_root_type_num() -> u64;
    pub fn ferrite_pmdk_action_offset(act: *const PobjAction) -> u64;
    pub fn ferrite_pmdk_action_usable_size(act: *const PobjAction) -> u64;
}
