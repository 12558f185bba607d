//! The seccomp filter and the SIGSYS handler.
//!
//! The filter traps, from anywhere but the runtime's own `syscall`
//! instruction: `mmap`, `munmap`, `mprotect`, `mremap`, `madvise`, `brk`,
//! `rt_sigaction`, `fork`, `vfork` and `clone` without `CLONE_THREAD`. This
//! catches libc's internal calls too (malloc's arenas, thread stacks,
//! `dlopen`), which an `LD_PRELOAD` symbol could not. The handler performs
//! the call the persistent way and writes the answer into the trapped
//! thread's `rax`.
//!
//! - Anonymous memory (private or shared) becomes a shared mapping of a new
//!   file `DIR/m<N>`; a private writable file mapping becomes a shared
//!   mapping of a copy; other file mappings are recorded (EXTERNAL).
//! - `munmap` frees the file range (and the file when nothing maps it).
//! - `mprotect` adding write to a private file mapping copies it first.
//! - `madvise(DONTNEED|FREE|REMOVE)` called by the program (an exported
//!   `madvise`, not a trap: glibc calls it on thread exit with every signal
//!   blocked, and a trapped call with SIGSYS blocked kills the process)
//!   punches the file range, so the memory reads back zero as anonymous
//!   memory would. glibc's own calls (thread exit) only drop pages.
//! - `brk` never grows: glibc's malloc then takes its memory from `mmap`.
//! - `rt_sigaction` is recorded; the runtime's two signals are refused.
//! - `fork` is refused with `ENOSYS`: a child would share the parent's
//!   persistent memory (written down in the limits).
//!
//! The handler runs with every signal blocked, so a failure never sees a
//! half-done edit.

use super::{Buf, ctx, lock, make_persistent, new_file, punch, unlink_file, unlock};
use crate::sys::{self, sc, syscall6};
use core::sync::atomic::Ordering;
use ferrite_wpp::format::{MapRec, kind};
use ferrite_wpp::maps::{self, page_up};

const TRAPPED: [i64; 9] = [
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mprotect,
    libc::SYS_mremap,
    libc::SYS_brk,
    libc::SYS_rt_sigaction,
    libc::SYS_fork,
    libc::SYS_vfork,
    libc::SYS_clone,
];

/// Installs a handler through the runtime's own `rt_sigaction`.
pub(crate) fn set_handler(
    sig: i32,
    h: extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void),
    flags: u64,
) {
    let act: [u64; 4] = [
        h as *const () as u64,
        flags | libc::SA_SIGINFO as u64 | 0x0400_0000, // SA_RESTORER
        sys::restorer(),
        u64::MAX,
    ];
    // SAFETY: act is a kernel sigaction with our restorer; 8 = sigset size.
    let r = unsafe {
        syscall6(
            libc::SYS_rt_sigaction,
            [sig as u64, act.as_ptr() as u64, 0, 8, 0, 0],
        )
    };
    if r < 0 {
        super::die_errno(b"installing a signal handler", r);
    }
}

pub(crate) fn install_handlers() {
    set_handler(libc::SIGSYS, on_sigsys, 0);
    set_handler(
        super::CAPTURE_SIG.load(Ordering::Relaxed),
        super::threads::on_capture,
        libc::SA_RESTART as u64,
    );
}

#[repr(C)]
struct SockFilter {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const SockFilter,
}

const LD_ABS_W: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_TRAP: u32 = 0x0003_0000;
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;

/// Installs the filter (no allocation: also used on the resume path).
pub(crate) fn install_filter() {
    let ip = sys::allowed_ip();
    let f = |code, jt, jf, k| SockFilter { code, jt, jf, k };
    // Layout: 0..=6 prologue, then one JEQ per trapped call, then the clone
    // check, then ALLOW, TRAP.
    let mut p: [SockFilter; 24] = core::array::from_fn(|_| f(RET_K, 0, 0, RET_ALLOW));
    let n = TRAPPED.len() as u8; // JEQs 7 .. 7+n-1; clone is the last
    let allow = 7 + n + 2; // index of RET ALLOW
    let trap = allow + 1;
    p[0] = f(LD_ABS_W, 0, 0, 4); // arch
    p[1] = f(JEQ_K, 0, allow - 2, AUDIT_ARCH_X86_64);
    p[2] = f(LD_ABS_W, 0, 0, 8); // instruction pointer, low half
    p[3] = f(JEQ_K, 0, 2, ip as u32);
    p[4] = f(LD_ABS_W, 0, 0, 12); // high half
    p[5] = f(JEQ_K, allow - 6, 0, (ip >> 32) as u32);
    p[6] = f(LD_ABS_W, 0, 0, 0); // syscall number
    for (i, &nr) in TRAPPED.iter().enumerate() {
        let at = 7 + i as u8;
        if nr == libc::SYS_clone {
            // clone: trap unless CLONE_THREAD (that is, a fork).
            p[at as usize] = f(JEQ_K, 0, allow - at - 1, nr as u32);
        } else {
            p[at as usize] = f(JEQ_K, trap - at - 1, 0, nr as u32);
        }
    }
    let c = 7 + n;
    p[c as usize] = f(LD_ABS_W, 0, 0, 16); // clone flags, low half
    p[c as usize + 1] = f(
        JSET_K,
        allow - c - 2,
        trap - c - 2,
        libc::CLONE_THREAD as u32,
    );
    p[allow as usize] = f(RET_K, 0, 0, RET_ALLOW);
    p[trap as usize] = f(RET_K, 0, 0, RET_TRAP);
    let prog = SockFprog {
        len: trap as u16 + 1,
        filter: p.as_ptr(),
    };
    // SAFETY: no_new_privs then a well-formed filter program on the stack.
    unsafe {
        let r = sc(sys::SYS_prctl, libc::PR_SET_NO_NEW_PRIVS as u64, 1, 0);
        if r < 0 {
            super::die_errno(b"prctl(NO_NEW_PRIVS)", r);
        }
        let r = sc(sys::SYS_seccomp, 1, 0, &prog as *const _ as u64);
        if r < 0 {
            super::die_errno(b"installing the seccomp filter", r);
        }
    }
}

fn neg(e: i32) -> i64 {
    -(e as i64)
}

extern "C" fn on_sigsys(_sig: i32, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo and ucontext for SIGSYS;
    // si_syscall is the int at byte 24 of a SIGSYS siginfo.
    let (nr, gregs) = unsafe {
        let nr = *((info as *const u8).add(24) as *const i32) as i64;
        (nr, &mut (*(uc as *mut libc::ucontext_t)).uc_mcontext.gregs)
    };
    let a = [
        gregs[libc::REG_RDI as usize] as u64,
        gregs[libc::REG_RSI as usize] as u64,
        gregs[libc::REG_RDX as usize] as u64,
        gregs[libc::REG_R10 as usize] as u64,
        gregs[libc::REG_R8 as usize] as u64,
        gregs[libc::REG_R9 as usize] as u64,
    ];
    lock();
    let r = match nr {
        libc::SYS_mmap => do_mmap(a),
        libc::SYS_munmap => do_munmap(a[0], a[1]),
        libc::SYS_mprotect => do_mprotect(a[0], a[1], a[2] as u32),
        libc::SYS_mremap => do_mremap(a),
        // SAFETY: brk(0) only reads the current break.
        libc::SYS_brk => unsafe { sc(libc::SYS_brk, 0, 0, 0) },
        libc::SYS_rt_sigaction => do_sigaction(a),
        _ => neg(libc::ENOSYS),
    };
    unlock();
    gregs[libc::REG_RAX as usize] = r;
}

fn real_mmap(a: [u64; 6]) -> i64 {
    // SAFETY: the program's own request, performed for it.
    unsafe { syscall6(libc::SYS_mmap, a) }
}

fn do_mmap(a: [u64; 6]) -> i64 {
    let [addr, len, prot, flags, fd, off] = a;
    let prot32 = prot as u32;
    let flags32 = flags as i32;
    if len == 0 {
        return neg(libc::EINVAL);
    }
    let len_r = page_up(len);
    if flags32 & libc::MAP_ANONYMOUS != 0 && super::PLANT_PRIVATE_ANON.load(Ordering::Relaxed) {
        return real_mmap(a);
    }
    if flags32 & libc::MAP_ANONYMOUS != 0 {
        let (n, f) = match new_file(len_r) {
            Ok(x) => x,
            Err(e) => return e,
        };
        // Shared file mapping instead: drop the type, anonymous, grows-down
        // and huge-page bits (and the huge page size field).
        let keep = flags32
            & !(libc::MAP_ANONYMOUS
                | libc::MAP_PRIVATE
                | libc::MAP_SHARED
                | libc::MAP_GROWSDOWN
                | libc::MAP_HUGETLB
                | (0x3f << 26));
        let r = real_mmap([
            addr,
            len_r,
            prot,
            (keep | libc::MAP_SHARED) as u64,
            f as u64,
            0,
        ]);
        // SAFETY: close our fd; the mapping keeps the file.
        unsafe { sc(libc::SYS_close, f as u64, 0, 0) };
        if r < 0 {
            unlink_file(n);
            return r;
        }
        let start = r as u64;
        forget(start, start + len_r);
        record(MapRec::persistent(start, len_r, prot32, n, 0));
        return r;
    }
    let r = real_mmap(a);
    if r < 0 {
        return r;
    }
    let start = r as u64;
    forget(start, start + len_r);
    let private = flags32 & (libc::MAP_SHARED | libc::MAP_PRIVATE) == libc::MAP_PRIVATE;
    if private && prot32 & libc::PROT_WRITE as u32 != 0 {
        match make_persistent(start, len_r, prot32) {
            Ok(n) => record(MapRec::persistent(start, len_r, prot32, n, 0)),
            Err(e) => {
                // SAFETY: undo the mapping we made for the program.
                unsafe { sc(libc::SYS_munmap, start, len_r, 0) };
                return e;
            }
        }
    } else {
        let p = fd_path(fd as i64);
        record(MapRec {
            start,
            len: len_r,
            prot: prot32,
            kind: kind::EXTERNAL,
            file: p.unwrap_or(u64::MAX),
            file_off: off,
            flags: if private {
                libc::MAP_PRIVATE as u32
            } else {
                libc::MAP_SHARED as u32
            },
            reserved: [0; 5],
        });
    }
    r
}

/// The path record of an open fd (None: not reopenable, e.g. a memfd).
fn fd_path(fd: i64) -> Option<u64> {
    let mut name = [0u8; 48];
    let mut w = Buf::new(&mut name);
    w.push(b"/proc/self/fd/");
    w.num(fd as u64);
    let p = w.cstr();
    let mut out = [0u8; 512];
    // SAFETY: p is NUL-terminated; readlinkat writes at most out.len().
    let n = unsafe {
        syscall6(
            libc::SYS_readlinkat,
            [
                libc::AT_FDCWD as u64,
                p as u64,
                out.as_mut_ptr() as u64,
                out.len() as u64,
                0,
                0,
            ],
        )
    };
    if n <= 0 || out[0] != b'/' {
        return None;
    }
    super::path_index(&out[..n as usize], fd)
}

fn record(rec: MapRec) {
    if maps::insert(&mut ctx().maps, rec).is_err() {
        super::die(b"mapping table full (16384 mappings)");
    }
}

/// Drops `[lo, hi)` from the table (the kernel already replaced or removed
/// those pages), freeing file space nothing maps any more.
fn forget(lo: u64, hi: u64) {
    let c = ctx();
    let mut freed = [(0u64, 0u64, 0u64); 32];
    let mut nf = 0;
    if maps::cut(&mut c.maps, lo, hi, |r| {
        if r.kind == kind::PERSISTENT && nf < freed.len() {
            freed[nf] = (r.file, r.file_off, r.len);
            nf += 1;
        }
    })
    .is_err()
    {
        super::die(b"mapping table full (16384 mappings)");
    }
    for &(file, off, len) in &freed[..nf] {
        if maps::file_in_use(&c.maps, file) {
            punch(file, off, len);
        } else {
            unlink_file(file);
        }
    }
}

fn do_munmap(addr: u64, len: u64) -> i64 {
    // SAFETY: the program's own request.
    let r = unsafe { sc(libc::SYS_munmap, addr, len, 0) };
    if r == 0 {
        forget(addr, addr + page_up(len));
    }
    r
}

fn do_mprotect(addr: u64, len: u64, prot: u32) -> i64 {
    let hi = addr + page_up(len);
    let c = ctx();
    if prot & libc::PROT_WRITE as u32 != 0 {
        // Private file pieces about to become writable are copied first.
        if maps::split_at(&mut c.maps, addr).is_err() || maps::split_at(&mut c.maps, hi).is_err() {
            return neg(libc::ENOMEM);
        }
        for i in 0..c.maps.len() {
            let r = &c.maps[i];
            if r.kind == kind::EXTERNAL
                && r.flags == libc::MAP_PRIVATE as u32
                && r.start >= addr
                && r.start + r.len <= hi
            {
                let (start, len, rp) = (r.start, r.len, r.prot);
                match make_persistent(start, len, rp) {
                    Ok(n) => {
                        let r = &mut c.maps[i];
                        r.kind = kind::PERSISTENT;
                        r.file = n;
                        r.file_off = 0;
                        r.flags = 0;
                    }
                    Err(e) => return e,
                }
            }
        }
    }
    // SAFETY: the program's own request.
    let r = unsafe { sc(libc::SYS_mprotect, addr, len, prot as u64) };
    if r == 0 && maps::set_prot(&mut c.maps, addr, hi, prot).is_err() {
        super::die(b"mapping table full (16384 mappings)");
    }
    r
}

fn file_size(n: u64) -> Option<(i64, u64)> {
    let fd = super::open_file(n);
    if fd < 0 {
        return None;
    }
    let mut st = super::unsafe_zeroed_stat();
    // SAFETY: fstat writes one stat.
    unsafe { sc(libc::SYS_fstat, fd as u64, &mut st as *mut _ as u64, 0) };
    Some((fd, st.st_size as u64))
}

fn do_mremap(a: [u64; 6]) -> i64 {
    let [old, old_len, new_len, flags, _new_addr, _] = a;
    let c = ctx();
    let old_hi = old + page_up(old_len);
    let Some(i) = maps::find(&c.maps, old) else {
        // SAFETY: not a mapping we know: the program's own request.
        return unsafe { syscall6(libc::SYS_mremap, a) };
    };
    let r = &c.maps[i];
    if r.kind != kind::PERSISTENT || old_hi > r.start + r.len || page_up(new_len) == 0 {
        // SAFETY: as above (external mappings keep their file).
        let res = unsafe { syscall6(libc::SYS_mremap, a) };
        if res >= 0 && r.kind == kind::EXTERNAL {
            let mut rec = MapRec { ..copy(r) };
            rec.file_off += old - r.start;
            rec.start = res as u64;
            rec.len = page_up(new_len);
            forget(old, old_hi);
            forget(rec.start, rec.start + rec.len);
            record(rec);
        }
        return res;
    }
    let (file, off) = (r.file, r.file_off + (old - r.start));
    let new_r = page_up(new_len);
    if new_r > page_up(old_len) {
        if maps::file_range_taken(&c.maps, file, off, new_r, old, old_hi) {
            // Growing in place would alias another piece of the same file:
            // give the memory a file of its own first.
            let Ok(n) = make_persistent(old, old_hi - old, r.prot) else {
                return neg(libc::ENOMEM);
            };
            let prot = r.prot;
            forget(old, old_hi);
            record(MapRec::persistent(old, old_hi - old, prot, n, 0));
            return do_mremap(a);
        }
        let Some((fd, size)) = file_size(file) else {
            return neg(libc::ENOMEM);
        };
        if size < off + new_r {
            // SAFETY: ftruncate on our own file.
            unsafe { sc(libc::SYS_ftruncate, fd as u64, off + new_r, 0) };
        }
        // SAFETY: close our fd.
        unsafe { sc(libc::SYS_close, fd as u64, 0, 0) };
    }
    let rec = copy(&c.maps[i]);
    // SAFETY: the program's own request, on a mapping whose file now covers
    // the new length.
    let res = unsafe { syscall6(libc::SYS_mremap, [old, old_len, new_len, flags, a[4], 0]) };
    if res < 0 {
        return res;
    }
    // Remove the old range from the table without freeing its file range
    // (the new mapping uses it), then record the new one.
    if maps::cut(&mut c.maps, old, old_hi, |_| {}).is_err() {
        super::die(b"mapping table full (16384 mappings)");
    }
    if new_r < old_hi - old {
        punch(file, off + new_r, old_hi - old - new_r);
    }
    forget(res as u64, res as u64 + new_r);
    record(MapRec::persistent(res as u64, new_r, rec.prot, file, off));
    res
}

fn copy(r: &MapRec) -> MapRec {
    MapRec {
        start: r.start,
        len: r.len,
        prot: r.prot,
        kind: r.kind,
        file: r.file,
        file_off: r.file_off,
        flags: r.flags,
        reserved: [0; 5],
    }
}

/// Interposed `madvise` (see the module documentation).
///
/// # Safety
/// As libc's `madvise`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn madvise(addr: *mut libc::c_void, len: usize, advice: i32) -> i32 {
    if !super::active() {
        // SAFETY: the program's own request.
        let r = unsafe { sc(libc::SYS_madvise, addr as u64, len as u64, advice as u64) };
        return set_errno(r);
    }
    let old = super::threads::block_signals();
    lock();
    let r = do_madvise([
        addr as u64,
        len as u64,
        advice as u64 as u32 as u64,
        0,
        0,
        0,
    ]);
    unlock();
    super::threads::restore_mask(old);
    set_errno(r)
}

fn set_errno(r: i64) -> i32 {
    if r < 0 {
        // SAFETY: errno is the calling thread's.
        unsafe { *libc::__errno_location() = -r as i32 };
        -1
    } else {
        r as i32
    }
}

fn do_madvise(a: [u64; 6]) -> i64 {
    let [addr, len, advice, ..] = a;
    // SAFETY: the program's own request.
    let r = unsafe { sc(libc::SYS_madvise, addr, len, advice) };
    let advice = advice as i32;
    if r == 0
        && (advice == libc::MADV_DONTNEED
            || advice == libc::MADV_FREE
            || advice == libc::MADV_REMOVE)
    {
        let hi = addr + page_up(len);
        for rec in ctx().maps.iter() {
            if rec.kind == kind::PERSISTENT && rec.start < hi && addr < rec.start + rec.len {
                let lo = rec.start.max(addr);
                let h = (rec.start + rec.len).min(hi);
                punch(rec.file, rec.file_off + (lo - rec.start), h - lo);
            }
        }
    }
    r
}

fn do_sigaction(a: [u64; 6]) -> i64 {
    let [sig, act, _oact, _size, ..] = a;
    let own =
        sig as i32 == libc::SIGSYS || sig as i32 == super::CAPTURE_SIG.load(Ordering::Relaxed);
    if own && act != 0 {
        return neg(libc::EINVAL);
    }
    // SAFETY: the program's own request.
    let r = unsafe { syscall6(libc::SYS_rt_sigaction, a) };
    if r == 0 && act != 0 && (sig as usize) < ferrite_wpp::format::NSIG {
        // SAFETY: the kernel just read a whole sigaction from `act`.
        let k = unsafe { core::ptr::read_unaligned(act as *const [u64; 4]) };
        let s = &mut ctx().sigs[sig as usize];
        s.handler = k[0];
        s.flags = k[1];
        s.restorer = k[2];
        s.mask = k[3];
        s.set = 1;
    }
    r
}
