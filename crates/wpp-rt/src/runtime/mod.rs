//! The preloaded runtime (`libferrite_wpp_rt.so`): makes every byte of the
//! program's writable memory a shared mapping of a file in the state
//! directory, keeps the process context ([`crate::format`]) up to date,
//! stops every thread at a failure with its registers saved on its own
//! persistent stack, and on `--resume` rebuilds the process and continues
//! each thread where it stopped.
//!
//! Inert unless `FERRITE_WPP_STATE` names a state directory (set by
//! `ferrite run`). Everything here is `unsafe` by nature (it rewrites the
//! address space it runs in); each block says why it holds.
//!
//! - [`trap`]: the seccomp filter and the SIGSYS handler that turn the
//!   program's (and libc's internal) anonymous and private mappings into
//!   persistent ones, and record signal dispositions;
//! - [`threads`]: `pthread_create`/`pthread_exit` interposition, the thread
//!   table and the failure (capture) handler;
//! - [`restore`]: the resume path.

mod restore;
mod threads;
mod trap;

use crate::sys::{self, sc, syscall6};
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use ferrite_wpp::format::{self, CONTEXT_BASE, Context, MapRec, PATH_MAX_LEN, POOL_SIZE, kind};
use ferrite_wpp::maps;

use ferrite_wpp::{ENV_CLOEXEC, ENV_MODE, ENV_STATE, capture_signal};

/// Runtime state that is *not* persistent (re-created by every run).
static ACTIVE: AtomicBool = AtomicBool::new(false);
static LOCK: AtomicBool = AtomicBool::new(false);
static DIR_FD: AtomicI32 = AtomicI32::new(-1);
static CAPTURE_SIG: AtomicI32 = AtomicI32::new(0);
static LIB_LO: AtomicU64 = AtomicU64::new(0);
static LIB_HI: AtomicU64 = AtomicU64::new(0);
/// A planted bug for the tests (`FERRITE_WPP_PLANT=private-anon`: anonymous
/// memory mapped after start stays private, as a runtime that forgot it
/// would leave it), which the resume tests must catch.
pub(crate) static PLANT_PRIVATE_ANON: AtomicBool = AtomicBool::new(false);
/// A planted bug for the tests (`FERRITE_WPP_PLANT=new-tids`: a resume
/// re-creates every thread under a new TID, as the runtime did before it
/// asked for the old ones), which the mutex-owner test must catch.
pub(crate) static PLANT_NEW_TIDS: AtomicBool = AtomicBool::new(false);

/// The state directory path, copied out of the environment (which lives on
/// the main stack, rewritten by a resume).
static mut STATE_PATH: [u8; 4096] = [0; 4096];
/// Scratch for reading `/proc/self/maps` at start (runtime-owned memory).
static mut MAPS_BUF: [u8; 1 << 20] = [0; 1 << 20];

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn(i32, *const *const u8, *const *const u8) = init;

pub(crate) fn ctx() -> &'static mut Context {
    // SAFETY: only called once ACTIVE is set, after `map_context` mapped the
    // pool at CONTEXT_BASE for the life of the process; every bit pattern is
    // a valid Context (plain integers), and concurrent edits of the tables
    // happen under LOCK.
    unsafe { &mut *((CONTEXT_BASE + format::CONTEXT_OFF) as *mut Context) }
}

pub(crate) fn active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

/// Takes the runtime lock (a spin lock: held only for table edits).
pub(crate) fn lock() {
    while LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        // SAFETY: sched_yield takes no arguments.
        unsafe { sc(sys::SYS_sched_yield, 0, 0, 0) };
    }
}

pub(crate) fn unlock() {
    LOCK.store(false, Ordering::Release);
}

/// Prints `ferrite-wpp: <msg>` on stderr and ends the process (exit 121).
pub(crate) fn die(msg: &[u8]) -> ! {
    sys::write_all(2, b"ferrite-wpp: ");
    sys::write_all(2, msg);
    sys::write_all(2, b"\n");
    sys::exit_group(121)
}

fn die_errno(what: &[u8], e: i64) -> ! {
    let mut buf = [0u8; 256];
    let mut w = Buf::new(&mut buf);
    w.push(what);
    w.push(b" failed: errno ");
    w.num(-e as u64);
    let n = w.len;
    die(&buf[..n])
}

/// A fixed buffer written without allocating.
pub(crate) struct Buf<'a> {
    pub b: &'a mut [u8],
    pub len: usize,
}

impl<'a> Buf<'a> {
    pub fn new(b: &'a mut [u8]) -> Buf<'a> {
        Buf { b, len: 0 }
    }
    pub fn push(&mut self, s: &[u8]) {
        let n = s.len().min(self.b.len() - self.len);
        self.b[self.len..self.len + n].copy_from_slice(&s[..n]);
        self.len += n;
    }
    pub fn num(&mut self, mut v: u64) {
        let mut d = [0u8; 20];
        let mut i = d.len();
        loop {
            i -= 1;
            d[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.push(&d[i..]);
    }
    /// NUL-terminated copy for system calls.
    pub fn cstr(&mut self) -> *const u8 {
        if self.len < self.b.len() {
            self.b[self.len] = 0;
        } else {
            let l = self.b.len() - 1;
            self.b[l] = 0;
        }
        self.b.as_ptr()
    }
}

fn env_get<'a>(envp: *const *const u8, name: &str) -> Option<&'a [u8]> {
    if envp.is_null() {
        return None;
    }
    let mut i = 0;
    loop {
        // SAFETY: envp is the NULL-terminated environment vector glibc
        // passes to constructors; each entry is a NUL-terminated string.
        let p = unsafe { *envp.add(i) };
        if p.is_null() {
            return None;
        }
        // SAFETY: as above.
        let s = unsafe { core::ffi::CStr::from_ptr(p as *const libc::c_char) }.to_bytes();
        if s.len() > name.len() && s.starts_with(name.as_bytes()) && s[name.len()] == b'=' {
            return Some(&s[name.len() + 1..]);
        }
        i += 1;
    }
}

extern "C" fn init(_argc: i32, _argv: *const *const u8, envp: *const *const u8) {
    let Some(dir) = env_get(envp, ENV_STATE) else {
        return;
    };
    let resume = env_get(envp, ENV_MODE) == Some(b"resume");
    let cloexec = env_get(envp, ENV_CLOEXEC).unwrap_or(b"");
    match env_get(envp, "FERRITE_WPP_PLANT") {
        Some(b"private-anon") => PLANT_PRIVATE_ANON.store(true, Ordering::Relaxed),
        Some(b"new-tids") => PLANT_NEW_TIDS.store(true, Ordering::Relaxed),
        _ => {}
    }
    if dir.len() >= 4000 {
        die(b"state directory path too long");
    }
    // SAFETY: single-threaded constructor; STATE_PATH is only written here.
    unsafe {
        let p = &mut *core::ptr::addr_of_mut!(STATE_PATH);
        p[..dir.len()].copy_from_slice(dir);
        p[dir.len()] = 0;
    }
    CAPTURE_SIG.store(capture_signal(), Ordering::Relaxed);
    find_own_range();
    map_context();
    let c = ctx();
    if let Err(e) = c.check() {
        die(e.as_bytes());
    }
    if resume {
        for fd in cloexec.split(|&b| b == b',') {
            if let Some(fd) = parse_dec(fd) {
                // SAFETY: F_SETFD on an fd number; a bad number just fails.
                unsafe {
                    sc(
                        sys::SYS_fcntl,
                        fd,
                        libc::F_SETFD as u64,
                        libc::FD_CLOEXEC as u64,
                    )
                };
            }
        }
        restore::resume()
    } else {
        start();
    }
}

fn parse_dec(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    let mut v = 0u64;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (b - b'0') as u64;
    }
    Some(v)
}

fn parse_hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut v = 0u64;
    for &b in s {
        let d = (b as char).to_digit(16)? as u64;
        v = v * 16 + d;
    }
    Some(v)
}

/// Moves `fd` to a high number (out of the program's way) and closes it.
fn high_fd(fd: i64) -> i32 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) };
    let min = rl.rlim_cur.clamp(64, 1 << 20) - 16;
    // SAFETY: fcntl/close on an fd we own.
    let h = unsafe { sc(sys::SYS_fcntl, fd as u64, libc::F_DUPFD_CLOEXEC as u64, min) };
    if h < 0 {
        return fd as i32;
    }
    // SAFETY: as above.
    unsafe { sc(sys::SYS_close, fd as u64, 0, 0) };
    h as i32
}

fn map_context() {
    // SAFETY: STATE_PATH holds a NUL-terminated path (init).
    let dir = unsafe {
        sc(
            sys::SYS_openat,
            libc::AT_FDCWD as u64,
            core::ptr::addr_of!(STATE_PATH) as u64,
            (libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64,
        )
    };
    if dir < 0 {
        die_errno(b"opening the state directory", dir);
    }
    let dir = high_fd(dir);
    DIR_FD.store(dir, Ordering::Relaxed);
    // SAFETY: a literal NUL-terminated name relative to dir.
    let fd = unsafe {
        sc(
            sys::SYS_openat,
            dir as u64,
            c"context.pool".as_ptr() as u64,
            (libc::O_RDWR | libc::O_CLOEXEC) as u64,
        )
    };
    if fd < 0 {
        die_errno(b"opening context.pool", fd);
    }
    let fd = high_fd(fd);
    // SAFETY: maps the pool at a fixed address that nothing else uses
    // (MAP_FIXED_NOREPLACE refuses if something does).
    let r = unsafe {
        syscall6(
            sys::SYS_mmap,
            [
                CONTEXT_BASE,
                POOL_SIZE,
                (libc::PROT_READ | libc::PROT_WRITE) as u64,
                (libc::MAP_SHARED | libc::MAP_FIXED_NOREPLACE) as u64,
                fd as u64,
                0,
            ],
        )
    };
    if r != CONTEXT_BASE as i64 {
        die_errno(b"mapping context.pool", r.min(-1));
    }
    let c = ctx();
    c.dir_fd = dir;
    c.ctx_fd = fd;
    ACTIVE.store(true, Ordering::Release);
}

extern "C" fn phdr_cb(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    _data: *mut libc::c_void,
) -> i32 {
    let me = init as *const () as u64;
    // SAFETY: dl_iterate_phdr passes a valid info with dlpi_phnum headers.
    let info = unsafe { &*info };
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    for i in 0..info.dlpi_phnum as usize {
        // SAFETY: i < dlpi_phnum.
        let ph = unsafe { &*info.dlpi_phdr.add(i) };
        if ph.p_type == libc::PT_LOAD {
            lo = lo.min(info.dlpi_addr + ph.p_vaddr);
            hi = hi.max(info.dlpi_addr + ph.p_vaddr + ph.p_memsz);
        }
    }
    if lo <= me && me < hi {
        LIB_LO.store(lo & !(maps::PAGE - 1), Ordering::Relaxed);
        LIB_HI.store(maps::page_up(hi), Ordering::Relaxed);
        return 1;
    }
    0
}

fn find_own_range() {
    // SAFETY: the callback only reads the headers it is given.
    unsafe { libc::dl_iterate_phdr(Some(phdr_cb), core::ptr::null_mut()) };
    if LIB_HI.load(Ordering::Relaxed) == 0 {
        die(b"cannot find the runtime's own load range");
    }
}

/// Whether `[lo, hi)` is runtime-owned memory (never made persistent:
/// re-created by each run).
pub(crate) fn runtime_owned(lo: u64, hi: u64) -> bool {
    let ov = |a: u64, b: u64| lo < b && a < hi;
    ov(
        LIB_LO.load(Ordering::Relaxed),
        LIB_HI.load(Ordering::Relaxed),
    ) || ov(CONTEXT_BASE, CONTEXT_BASE + POOL_SIZE)
        || ov(format::PRIVATE_BASE, format::PRIVATE_BASE + (1 << 32))
}

/// Maps private stack `i` of the runtime and returns its top.
pub(crate) fn private_stack(i: u64) -> u64 {
    let lo = format::PRIVATE_BASE + i * format::PRIVATE_STACK;
    // SAFETY: the private region is reserved for the runtime; NOREPLACE
    // refuses to clobber anything else.
    let r = unsafe {
        syscall6(
            sys::SYS_mmap,
            [
                lo,
                format::PRIVATE_STACK,
                (libc::PROT_READ | libc::PROT_WRITE) as u64,
                (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE) as u64,
                u64::MAX,
                0,
            ],
        )
    };
    if r != lo as i64 && r != -(libc::EEXIST as i64) {
        die_errno(b"mapping a private stack", r.min(-1));
    }
    lo + format::PRIVATE_STACK
}

/// `openat` (or, with `unlink`, `unlinkat`) of mapping file `DIR/m<N>`.
fn at_file(n: u64, unlink: bool, flags: i32, mode: u64) -> i64 {
    let mut name = [0u8; 32];
    let mut w = Buf::new(&mut name);
    w.push(b"m");
    w.num(n);
    let p = w.cstr();
    let (nr, arg) = if unlink {
        (sys::SYS_unlinkat, 0)
    } else {
        (sys::SYS_openat, flags as u64)
    };
    // SAFETY: p is NUL-terminated; the dir fd is the runtime's.
    unsafe {
        syscall6(
            nr,
            [
                DIR_FD.load(Ordering::Relaxed) as u64,
                p as u64,
                arg,
                mode,
                0,
                0,
            ],
        )
    }
}

/// Creates mapping file `DIR/m<N>` of `len` bytes; returns (N, fd).
pub(crate) fn new_file(len: u64) -> Result<(u64, i32), i64> {
    let n = ctx().next_file.fetch_add(1, Ordering::Relaxed);
    let fd = at_file(
        n,
        false,
        libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
        0o600,
    );
    if fd < 0 {
        return Err(fd);
    }
    // SAFETY: ftruncate on the fd just opened.
    let r = unsafe { sc(sys::SYS_ftruncate, fd as u64, len, 0) };
    if r < 0 {
        // SAFETY: close our own fd.
        unsafe { sc(sys::SYS_close, fd as u64, 0, 0) };
        return Err(r);
    }
    Ok((n, fd as i32))
}

/// Opens mapping file `DIR/m<N>`.
pub(crate) fn open_file(n: u64) -> i64 {
    at_file(n, false, libc::O_RDWR | libc::O_CLOEXEC, 0)
}

/// Deletes mapping file `DIR/m<N>`.
pub(crate) fn unlink_file(n: u64) {
    at_file(n, true, 0, 0);
}

/// Frees a file range of mapping file `n` (reads back zero, as anonymous
/// memory does after `MADV_DONTNEED`).
pub(crate) fn punch(n: u64, off: u64, len: u64) {
    let fd = open_file(n);
    if fd < 0 {
        return;
    }
    // SAFETY: fallocate and close on our own fd.
    unsafe {
        syscall6(
            sys::SYS_fallocate,
            [
                fd as u64,
                (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE) as u64,
                off,
                len,
                0,
                0,
            ],
        );
        sc(sys::SYS_close, fd as u64, 0, 0);
    }
}

/// Copies `[lo, lo+len)` into a new mapping file and maps that file over
/// it, shared, with `prot`: from here on the bytes live in the file.
/// Returns the file number. The range must be mapped.
pub(crate) fn make_persistent(lo: u64, len: u64, prot: u32) -> Result<u64, i64> {
    let (n, fd) = new_file(len)?;
    let readable = prot & libc::PROT_READ as u32 != 0;
    if !readable {
        // SAFETY: adds read permission to a range the caller says is mapped,
        // only to copy it; the final mmap sets `prot`.
        unsafe {
            sc(
                sys::SYS_mprotect,
                lo,
                len,
                (prot | libc::PROT_READ as u32) as u64,
            )
        };
    }
    copy_into(fd, lo, len, 0);
    let r = map_file_fixed(lo, len, prot, libc::MAP_SHARED, fd, 0);
    if r < 0 {
        unlink_file(n);
        return Err(r);
    }
    Ok(n)
}

/// Copies `[addr, addr+len)` into `fd` at `file_off`. A page that cannot
/// be read (a private file mapping past its file's end) is left as the
/// file's zeros, which is what the memory would read as.
pub(crate) fn copy_into(fd: i32, addr: u64, len: u64, file_off: u64) {
    let mut off = 0;
    while off < len {
        // SAFETY: pwrite only reads [addr+off, addr+len), which the caller
        // says is mapped; a fault returns an error instead of a signal.
        let w = unsafe {
            syscall6(
                sys::SYS_pwrite64,
                [fd as u64, addr + off, len - off, file_off + off, 0, 0],
            )
        };
        if w == -(libc::EINTR as i64) {
            continue;
        }
        off += if w <= 0 { maps::PAGE } else { w as u64 };
    }
}

/// Maps `fd` at `file_off` over `[addr, addr+len)` (`MAP_FIXED` with
/// `flags`), then closes `fd` (the mapping keeps the file). Returns the
/// kernel's answer.
pub(crate) fn map_file_fixed(
    addr: u64,
    len: u64,
    prot: u32,
    flags: i32,
    fd: i32,
    file_off: u64,
) -> i64 {
    // SAFETY: the callers replace a range they own with the file's bytes
    // (the same bytes the range held, or the saved ones on resume), and no
    // code runs on that range meanwhile: the trap handler holds the lock,
    // and the stack is never the range being replaced.
    let r = unsafe {
        syscall6(
            sys::SYS_mmap,
            [
                addr,
                len,
                prot as u64,
                (flags | libc::MAP_FIXED) as u64,
                fd as u64,
                file_off,
            ],
        )
    };
    // SAFETY: closing our own fd.
    unsafe { sc(sys::SYS_close, fd as u64, 0, 0) };
    r
}

/// Index of a path record for `path` with the identity of `fd` (or of the
/// path when `fd` < 0), adding one if needed.
pub(crate) fn path_index(path: &[u8], fd: i64) -> Option<u64> {
    if path.is_empty() || path.len() > PATH_MAX_LEN || path.ends_with(b" (deleted)") {
        return None;
    }
    let mut st: libc::stat = unsafe_zeroed_stat();
    let r = if fd >= 0 {
        // SAFETY: fstat writes one stat.
        unsafe { sc(sys::SYS_fstat, fd as u64, &mut st as *mut _ as u64, 0) }
    } else {
        let mut p = [0u8; PATH_MAX_LEN + 1];
        p[..path.len()].copy_from_slice(path);
        // SAFETY: p is NUL-terminated; newfstatat writes one stat.
        unsafe {
            syscall6(
                libc::SYS_newfstatat,
                [
                    libc::AT_FDCWD as u64,
                    p.as_ptr() as u64,
                    &mut st as *mut _ as u64,
                    0,
                    0,
                    0,
                ],
            )
        }
    };
    if r < 0 {
        return None;
    }
    let c = ctx();
    let mtime = st.st_mtime * 1_000_000_000 + st.st_mtime_nsec;
    if let Some(i) = c.paths.iter().position(|p| {
        p.len as usize == path.len()
            && &p.path[..path.len()] == path
            && p.dev == st.st_dev
            && p.ino == st.st_ino
    }) {
        return Some(i as u64);
    }
    let i = c.paths.iter().position(|p| p.len == 0)?;
    let r = &mut c.paths[i];
    r.path[..path.len()].copy_from_slice(path);
    r.dev = st.st_dev;
    r.ino = st.st_ino;
    r.size = st.st_size as u64;
    r.mtime_ns = mtime;
    r.len = path.len() as u32;
    Some(i as u64)
}

pub(crate) fn unsafe_zeroed_stat() -> libc::stat {
    // SAFETY: libc::stat is plain integers; all-zero is a valid value.
    unsafe { core::mem::zeroed() }
}

/// Offset of `tid` in glibc's `struct pthread` (0x2d0 in Debian 12's
/// glibc). A resume needs it: that field is each re-created thread's
/// parent-set and child-clear word (`pthread_join` waits on it), and takes
/// the thread's TID if it could not have its old one.
///
/// Asked, not guessed: glibc registers the main thread's `&pd->tid` with
/// `set_tid_address` before any constructor runs, and the kernel hands that
/// address back through `PR_GET_TID_ADDRESS`; where a kernel lacks that
/// prctl (it needs `CONFIG_CHECKPOINT_RESTORE`), glibc's own descriptor for
/// debuggers, `_thread_db_pthread_tid` (field bits, count, offset), says
/// the same. Either answer must hold this thread's TID.
///
/// The earlier way, scanning the descriptor for the first word equal to the
/// TID, went wrong at PID 32767 (`pid_max`'s default): the upper half of
/// the `self` pointer at offset 0x10, `0x00007fff`, matched, and every
/// resume then wrote each thread's TID over that half, and the program
/// crashed when it next used `self`. PIDs wrap often enough under the
/// resume tests that one run of them in about eight met it.
fn find_tid_off() -> u32 {
    let fs = sys::fs_base();
    let tid = sys::gettid();
    let holds_tid = |off: u64| {
        (16..4096).contains(&off) && off.is_multiple_of(4) && {
            // SAFETY: the main thread's `struct pthread` (glibc's TCB, about
            // 2.3 KiB, then its static TLS) starts at the thread pointer and
            // is mapped; the offset is inside its first 4 KiB.
            unsafe { core::ptr::read_volatile((fs + off) as *const i32) == tid }
        }
    };
    let mut addr: u64 = 0;
    // SAFETY: PR_GET_TID_ADDRESS writes one pointer through arg2.
    let r = unsafe {
        syscall6(
            sys::SYS_prctl,
            [PR_GET_TID_ADDRESS, &mut addr as *mut u64 as u64, 0, 0, 0, 0],
        )
    };
    if r == 0 && addr.wrapping_sub(fs) < 4096 && holds_tid(addr - fs) {
        return (addr - fs) as u32;
    }
    // SAFETY: dlsym looks up a symbol by a NUL-terminated name.
    let d = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_thread_db_pthread_tid".as_ptr()) }
        as *const u32;
    if !d.is_null() {
        // SAFETY: glibc defines the symbol as `const uint32_t [3]`.
        let [bits, count, off] = unsafe { core::ptr::read(d as *const [u32; 3]) };
        if bits == 32 && count == 1 && holds_tid(off as u64) {
            return off;
        }
    }
    die(b"cannot find the thread id in glibc's thread descriptor (neither PR_GET_TID_ADDRESS nor _thread_db_pthread_tid answered)")
}

/// `prctl` code (linux/prctl.h): the calling thread's `clear_child_tid`.
const PR_GET_TID_ADDRESS: u64 = 40;

/// First run: take over the address space, then let `main` run.
fn start() {
    let c = ctx();
    if c.state() != Some(format::State::Created) {
        die(b"the state directory holds a process already; use --resume");
    }
    c.tid_off = find_tid_off();
    c.lib_lo = LIB_LO.load(Ordering::Relaxed);
    c.lib_hi = LIB_HI.load(Ordering::Relaxed);
    let top = private_stack(0);
    // SAFETY: the private stack is mapped and unused; remap_existing runs
    // to completion on it and returns.
    unsafe { sys::on_stack(top, remap_existing, 0) };
    trap::install_handlers();
    threads::register_main();
    trap::install_filter();
    // SAFETY: getpid takes no arguments.
    c.pid.store(
        unsafe { sc(sys::SYS_getpid, 0, 0, 0) } as u32,
        Ordering::Relaxed,
    );
    c.state
        .store(format::State::Running as u32, Ordering::Release);
}

/// Parsed line of `/proc/self/maps`.
struct MapsLine<'a> {
    lo: u64,
    hi: u64,
    perms: &'a [u8],
    off: u64,
    path: &'a [u8],
}

fn parse_maps_line(l: &[u8]) -> Option<MapsLine<'_>> {
    let mut it = l.splitn(6, |&b| b == b' ');
    let range = it.next()?;
    let perms = it.next()?;
    let off = parse_hex(it.next()?)?;
    let _dev = it.next()?;
    let _ino = it.next()?;
    let path = it.next().unwrap_or(b"");
    let path = &path[path.iter().position(|&b| b != b' ').unwrap_or(path.len())..];
    let dash = range.iter().position(|&b| b == b'-')?;
    Some(MapsLine {
        lo: parse_hex(&range[..dash])?,
        hi: parse_hex(&range[dash + 1..])?,
        perms,
        off,
        path,
    })
}

fn prot_of(perms: &[u8]) -> u32 {
    let mut p = 0;
    if perms.first() == Some(&b'r') {
        p |= libc::PROT_READ;
    }
    if perms.get(1) == Some(&b'w') {
        p |= libc::PROT_WRITE;
    }
    if perms.get(2) == Some(&b'x') {
        p |= libc::PROT_EXEC;
    }
    p as u32
}

/// Reads `/proc/self/smaps` into MAPS_BUF; returns its length.
fn read_maps() -> usize {
    // SAFETY: literal path.
    let fd = unsafe {
        sc(
            sys::SYS_openat,
            libc::AT_FDCWD as u64,
            c"/proc/self/smaps".as_ptr() as u64,
            (libc::O_RDONLY | libc::O_CLOEXEC) as u64,
        )
    };
    if fd < 0 {
        die_errno(b"reading /proc/self/maps", fd);
    }
    let buf = core::ptr::addr_of_mut!(MAPS_BUF) as *mut u8;
    let cap = 1usize << 20;
    let mut len = 0usize;
    loop {
        // SAFETY: reads into the runtime's own buffer, within its size;
        // only the single-threaded start path uses it.
        let n = unsafe {
            sc(
                sys::SYS_read,
                fd as u64,
                buf.add(len) as u64,
                (cap - len) as u64,
            )
        };
        if n <= 0 {
            break;
        }
        len += n as usize;
        if len == cap {
            die(b"/proc/self/smaps larger than 1 MiB");
        }
    }
    // SAFETY: close our fd.
    unsafe { sc(sys::SYS_close, fd as u64, 0, 0) };
    len
}

/// Zhuque's retroactive remap (P1 §4.5.1): every writable private mapping
/// that exists before `main` (program and library data, bss, the heap, the
/// main stack) and every anonymous one becomes a shared mapping of a file
/// holding its bytes; file mappings are recorded to be mapped again on
/// resume. Runs on a private stack, because it replaces the main stack.
extern "C" fn remap_existing(_: u64) {
    let len = read_maps();
    // SAFETY: MAPS_BUF[..len] was filled by read_maps; nothing writes it
    // while this single-threaded pass reads it.
    let text: &[u8] = unsafe { &(&*core::ptr::addr_of!(MAPS_BUF))[..len] };
    // The kernel places the main stack top-down; the limit this run has.
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit.
    unsafe { libc::getrlimit(libc::RLIMIT_STACK, &mut rl) };
    let stack_size = maps::page_up(rl.rlim_cur.clamp(1 << 20, 64 << 20));
    let mut prev_hi = 0u64;
    let mut lines = text.split(|&b| b == b'\n').peekable();
    while let Some(line) = lines.next() {
        let Some(m) = parse_maps_line(line) else {
            continue;
        };
        // The smaps fields of this mapping: "Anonymous:" counts pages the
        // process wrote into a private file mapping (relocations of a
        // library's RELRO segment, now read-only): those bytes are the
        // process's, not the file's.
        let mut written = false;
        while let Some(f) = lines.peek() {
            if parse_maps_line(f).is_some() {
                break;
            }
            if let Some(v) = f.strip_prefix(b"Anonymous:") {
                written = v.iter().any(|&b| (b'1'..=b'9').contains(&b));
            }
            lines.next();
        }
        let below = prev_hi;
        prev_hi = m.hi;
        if runtime_owned(m.lo, m.hi) || m.hi > 0x8000_0000_0000 {
            continue;
        }
        if m.path.starts_with(b"[v") {
            // [vvar], [vdso], [vvar_vclock]: the kernel's, the same in every
            // run with address randomisation off.
            continue;
        }
        let prot = prot_of(m.perms);
        let shared = m.perms.get(3) == Some(&b's');
        let anonymous = m.path.is_empty() || m.path.starts_with(b"[");
        let r = if m.path == b"[stack]" {
            persist_main_stack(m.lo, m.hi, below, stack_size, prot)
        } else if anonymous || (!shared && (written || prot & libc::PROT_WRITE as u32 != 0)) {
            make_persistent(m.lo, m.hi - m.lo, prot)
                .map(|n| MapRec::persistent(m.lo, m.hi - m.lo, prot, n, 0))
        } else {
            let Some(p) = path_index(m.path, -1) else {
                let mut msg = [0u8; 512];
                let mut w = Buf::new(&mut msg);
                w.push(b"cannot record the mapped file ");
                w.push(m.path);
                let n = w.len;
                die(&msg[..n]);
            };
            Ok(MapRec {
                start: m.lo,
                len: m.hi - m.lo,
                prot,
                kind: kind::EXTERNAL,
                file: p,
                file_off: m.off,
                flags: if shared {
                    libc::MAP_SHARED as u32
                } else {
                    libc::MAP_PRIVATE as u32
                },
                reserved: [0; 5],
            })
        };
        match r {
            Ok(rec) => {
                if maps::insert(&mut ctx().maps, rec).is_err() {
                    die(b"mapping table full");
                }
            }
            Err(e) => die_errno(b"making a mapping persistent", e),
        }
    }
}

/// The main stack: the kernel's grows-down `[stack]` becomes a fixed,
/// `stack_size` shared mapping ending where it ends (the room below it is
/// free: the kernel keeps a gap of at least the stack limit there).
fn persist_main_stack(
    lo: u64,
    hi: u64,
    below: u64,
    stack_size: u64,
    prot: u32,
) -> Result<MapRec, i64> {
    let new_lo = (hi - stack_size).min(lo).max(below + (1 << 20));
    let len = hi - new_lo;
    let (n, fd) = new_file(len)?;
    // This code runs on a private stack: nothing writes the main stack
    // while it is copied and replaced.
    copy_into(fd, lo, hi - lo, lo - new_lo);
    let r = map_file_fixed(new_lo, len, prot, libc::MAP_SHARED, fd, 0);
    if r < 0 {
        unlink_file(n);
        return Err(r);
    }
    Ok(MapRec::persistent(new_lo, len, prot, n, 0))
}
