//! The resume path (P1 §4.5.1 "Restart after failure", in user space).
//!
//! Order (address space first, kernel state second, registers last):
//! 1. check that every recorded outside file (program, libraries) is the
//!    one that was mapped, and that the runtime sits where it sat;
//! 2. on a private stack, map every recorded mapping at its address: the
//!    persistent files bring back heap, stacks and static data as they were
//!    at the failure — this replaces the new process's memory wholesale;
//! 3. re-install the program's signal dispositions and the runtime's;
//! 4. start a kernel thread per captured thread on its saved thread
//!    pointer, under its old TID where the kernel grants it (see
//!    [`recreate`]; the main thread included, as a thread of this process),
//!    all held at a gate until every one exists;
//! 5. open the gate; every thread restores its robust list and returns
//!    through `rt_sigreturn` from the frame saved on its own stack, at the
//!    instruction it was stopped at. The process's first thread parks for
//!    good, or, if the main thread could not have its TID back, becomes
//!    the main thread (glibc's descriptor updated to the new TID) and
//!    returns last. A program that installed a SIGPWR handler receives
//!    SIGPWR first (its failure handler).
//!
//! The file descriptors were rebuilt by the supervisor before `exec`.

use super::{Buf, ctx, die, private_stack};
use crate::sys::{self, sc, syscall6};
use core::sync::atomic::Ordering;
use ferrite_wpp::format::{self, State, kind, tstate};

pub(crate) fn resume() -> ! {
    let c = ctx();
    if c.state() != Some(State::Captured) {
        die(b"nothing to resume: the context is not in the captured state");
    }
    if c.lib_lo != super::LIB_LO.load(Ordering::Relaxed) {
        die(b"the runtime library moved since the failure (address randomisation on?)");
    }
    check_files();
    c.state.store(State::Resuming as u32, Ordering::Release);
    // Block every signal until each thread returns through its own frame
    // (which restores its own mask).
    let all: u64 = u64::MAX;
    // SAFETY: rt_sigprocmask with an 8-byte set.
    unsafe {
        syscall6(
            libc::SYS_rt_sigprocmask,
            [
                libc::SIG_SETMASK as u64,
                &all as *const u64 as u64,
                0,
                8,
                0,
                0,
            ],
        )
    };
    // This thread's exit hooks point into the new process's main thread
    // descriptor, where the old one is about to be mapped back: detached
    // now, so that a kill at any moment of the resume (a failure right
    // after it) cannot make the kernel clear the old main thread's tid
    // field or walk its robust list as this thread's.
    // SAFETY: detaching the calling thread's hooks.
    unsafe {
        sc(libc::SYS_set_tid_address, 0, 0, 0);
        sc(libc::SYS_set_robust_list, 0, 24, 0);
    }
    let top = private_stack(0);
    // SAFETY: the private stack is mapped and unused; resume_on_private
    // never returns (it ends in rt_sigreturn).
    unsafe { sys::on_stack(top, resume_on_private, 0) };
    die(b"resume returned")
}

fn check_files() {
    let c = ctx();
    for r in c.maps.iter() {
        if r.kind != kind::EXTERNAL {
            continue;
        }
        let Some(path) = c.path(r.file) else {
            die(b"a mapping of a file that cannot be reopened (deleted or anonymous) cannot be resumed");
        };
        let p = &c.paths[r.file as usize];
        let mut z = [0u8; format::PATH_MAX_LEN + 1];
        z[..path.len()].copy_from_slice(path);
        let mut st = super::unsafe_zeroed_stat();
        // SAFETY: z is NUL-terminated; newfstatat writes one stat.
        let e = unsafe {
            syscall6(
                libc::SYS_newfstatat,
                [
                    libc::AT_FDCWD as u64,
                    z.as_ptr() as u64,
                    &mut st as *mut _ as u64,
                    0,
                    0,
                    0,
                ],
            )
        };
        let mtime = st.st_mtime * 1_000_000_000 + st.st_mtime_nsec;
        if e < 0 || st.st_ino != p.ino || st.st_size as u64 != p.size || mtime != p.mtime_ns {
            let mut msg = [0u8; 512];
            let mut w = Buf::new(&mut msg);
            w.push(b"cannot resume: ");
            w.push(path);
            w.push(b" changed or vanished since the failure");
            let n = w.len;
            die(&msg[..n]);
        }
    }
}

fn map_all() {
    let c = ctx();
    for r in c.maps.iter() {
        let fd = match r.kind {
            kind::PERSISTENT => super::open_file(r.file),
            kind::EXTERNAL => {
                let path = c.path(r.file).unwrap_or(b"");
                let mut z = [0u8; format::PATH_MAX_LEN + 1];
                z[..path.len()].copy_from_slice(path);
                let writable =
                    r.flags == libc::MAP_SHARED as u32 && r.prot & libc::PROT_WRITE as u32 != 0;
                let mode = if writable {
                    libc::O_RDWR
                } else {
                    libc::O_RDONLY
                };
                // SAFETY: z is NUL-terminated.
                unsafe {
                    sc(
                        libc::SYS_openat,
                        libc::AT_FDCWD as u64,
                        z.as_ptr() as u64,
                        (mode | libc::O_CLOEXEC) as u64,
                    )
                }
            }
            _ => continue,
        };
        if fd < 0 {
            super::die_errno(b"reopening a mapping's file", fd);
        }
        let flags = if r.kind == kind::PERSISTENT {
            libc::MAP_SHARED
        } else {
            r.flags as i32
        };
        // The saved bytes go back at their address, replacing whatever the
        // new process had there; this code runs on the private stack,
        // which no record covers.
        let m = super::map_file_fixed(r.start, r.len, r.prot, flags, fd as i32, r.file_off);
        if m != r.start as i64 {
            super::die_errno(b"mapping memory back", m.min(-1));
        }
    }
}

fn restore_signals() {
    let c = ctx();
    for (sig, s) in c.sigs.iter().enumerate() {
        if s.set == 1 && sig != libc::SIGKILL as usize && sig != libc::SIGSTOP as usize {
            let k = [s.handler, s.flags, s.restorer, s.mask];
            // SAFETY: a kernel sigaction the program installed before.
            unsafe {
                syscall6(
                    libc::SYS_rt_sigaction,
                    [sig as u64, k.as_ptr() as u64, 0, 8, 0, 0],
                )
            };
        }
    }
    super::trap::install_handlers();
}

fn raise(pid: u64, tid: u64, set: u64) {
    for sig in 1..=64u64 {
        if set & (1 << (sig - 1)) != 0 {
            // SAFETY: a signal to a thread of our own process.
            unsafe { sc(libc::SYS_tgkill, pid, tid, sig) };
        }
    }
}

extern "C" fn thread_entry(i: u64) -> ! {
    let c = ctx();
    while c.gate.load(Ordering::Acquire) == 0 {
        // SAFETY: futex wait on the gate word while it is 0.
        unsafe {
            syscall6(
                libc::SYS_futex,
                [c.gate.as_ptr() as u64, libc::FUTEX_WAIT as u64, 0, 0, 0, 0],
            )
        };
    }
    let t = &c.threads[i as usize];
    // SAFETY: re-registers the robust list the thread had; then returns
    // through its saved frame on its own (restored) stack.
    unsafe {
        if t.robust_head != 0 {
            sc(libc::SYS_set_robust_list, t.robust_head, t.robust_len, 0);
        }
        sys::jump_sigreturn(t.uc)
    }
}

/// `clone` flags of a re-created thread: glibc's, with its `tid` field as
/// the parent-set and child-clear word (so `pthread_join` keeps working).
const THREAD_FLAGS: i32 = libc::CLONE_VM
    | libc::CLONE_FS
    | libc::CLONE_FILES
    | libc::CLONE_SIGHAND
    | libc::CLONE_THREAD
    | libc::CLONE_SYSVSEM
    | libc::CLONE_SETTLS
    | libc::CLONE_PARENT_SETTID
    | libc::CLONE_CHILD_CLEARTID;

/// Starts thread `i` of the table again on private stack `n`, under the
/// TID it had when it was captured if the kernel grants it (`clone3` with
/// `set_tid`: root, and the ID still free, which it is unless the PIDs
/// wrapped all the way round since the failure). Otherwise, with
/// `new_tid_ok`, under a new TID; else not at all. Returns the TID or a
/// negative errno.
///
/// The same TID matters because glibc records owners by TID: a recursive
/// or error-checking mutex held at the failure (the loader's
/// `dl_load_lock`, taken by `dlsym`, `dlopen` and `exit`, among them)
/// could not be released by a thread with a new one, and the next lock
/// of it deadlocked.
fn recreate(i: usize, n: u64, tid_off: u64, new_tid_ok: bool) -> i64 {
    let t = &ctx().threads[i];
    let top = private_stack(n);
    let tidp = t.fs_base + tid_off;
    let old = t.tid.load(Ordering::Relaxed);
    let planted = super::PLANT_NEW_TIDS.load(Ordering::Relaxed);
    let r = if planted {
        -(libc::EPERM as i64)
    } else {
        // SAFETY: a fresh private stack, the thread's own thread pointer
        // and its glibc tid field; thread_entry never returns.
        unsafe {
            sys::clone3_thread_as(
                old,
                THREAD_FLAGS as u64,
                top - format::PRIVATE_STACK,
                top,
                tidp,
                t.fs_base,
                thread_entry,
                i as u64,
            )
        }
    };
    if r > 0 || !new_tid_ok {
        return r;
    }
    // SAFETY: as above, with plain clone and a new TID.
    unsafe {
        sys::clone_thread(
            THREAD_FLAGS as u64,
            top,
            tidp,
            tidp,
            t.fs_base,
            thread_entry,
            i as u64,
        )
    }
}

extern "C" fn resume_on_private(_: u64) {
    map_all();
    restore_signals();
    let c = ctx();
    // SAFETY: getpid takes no arguments.
    let pid = unsafe { sc(libc::SYS_getpid, 0, 0, 0) } as u64;
    let tid_off = c.tid_off as u64;
    super::trap::install_filter();
    c.gate.store(0, Ordering::Release);
    let mut main = None;
    let mut stack = 1;
    c.new_tids = 0;
    for (i, t) in c.threads.iter().enumerate() {
        match t.state.load(Ordering::Acquire) {
            tstate::CAPTURED => {}
            tstate::LIVE => die(b"a thread was not captured at the failure; cannot resume"),
            _ => continue,
        }
        if t.main == 1 {
            main = Some(i);
            continue;
        }
        let tid = recreate(i, stack, tid_off, true);
        stack += 1;
        if tid < 0 {
            super::die_errno(b"recreating a thread", tid);
        }
        if tid as u32 != t.tid.load(Ordering::Relaxed) {
            c.new_tids += 1;
        }
        t.tid.store(tid as u32, Ordering::Relaxed);
    }
    let Some(m) = main else {
        die(b"no main thread in the context");
    };
    // The main thread too gets its old TID back if it can: as a thread of
    // this process, while this one (the new process's first thread, whose
    // TID is the new PID) leaves once the others run. Otherwise this
    // thread becomes the main thread, under the new PID.
    let main_tid = recreate(m, stack, tid_off, false);
    let main_apart = main_tid > 0;
    if main_apart {
        c.threads[m].tid.store(main_tid as u32, Ordering::Relaxed);
    } else {
        if pid as u32 != c.threads[m].tid.load(Ordering::Relaxed) {
            c.new_tids += 1;
        }
        let main_fs = c.threads[m].fs_base;
        // SAFETY: the main thread's descriptor is mapped back; its tid
        // field takes this run's TID (the PID), as glibc expects.
        unsafe { core::ptr::write_volatile((main_fs + tid_off) as *mut i32, pid as i32) };
        c.threads[m].tid.store(pid as u32, Ordering::Relaxed);
    }
    for t in c.threads.iter() {
        if t.state.load(Ordering::Relaxed) == tstate::CAPTURED {
            t.state.store(tstate::LIVE, Ordering::Release);
        }
    }
    c.captured.store(0, Ordering::Release);
    c.resumes += 1;
    c.pid.store(pid as u32, Ordering::Relaxed);
    c.state.store(State::Running as u32, Ordering::Release);
    // Signals that were pending at the failure, raised again (every thread
    // still blocks everything, so they wait for its own mask).
    for t in c.threads.iter() {
        if t.state.load(Ordering::Relaxed) == tstate::LIVE && t.pending != 0 {
            raise(pid, t.tid.load(Ordering::Relaxed) as u64, t.pending);
        }
    }
    for sig in 1..=64u64 {
        if c.shared_pending & (1 << (sig - 1)) != 0 {
            // SAFETY: a signal to our own process.
            unsafe { sc(libc::SYS_kill, pid, sig, 0) };
        }
    }
    c.shared_pending = 0;
    for t in c.threads.iter_mut() {
        t.pending = 0;
    }
    let t = &c.threads[m];
    let pwr = &c.sigs[libc::SIGPWR as usize];
    if pwr.set == 1 && pwr.handler > 1 {
        // The program's failure handler: pending until the main thread's
        // own mask is back.
        // SAFETY: tgkill to the main thread.
        unsafe {
            sc(
                libc::SYS_tgkill,
                pid,
                c.threads[m].tid.load(Ordering::Relaxed) as u64,
                libc::SIGPWR as u64,
            )
        };
    }
    c.gate.store(1, Ordering::Release);
    // SAFETY: wakes the threads waiting at the gate.
    unsafe {
        syscall6(
            libc::SYS_futex,
            [
                c.gate.as_ptr() as u64,
                libc::FUTEX_WAKE as u64,
                i32::MAX as u64,
                0,
                0,
                0,
            ],
        )
    };
    if main_apart {
        // This thread stays, parked with every signal blocked and its exit
        // hooks detached (resume), until the process ends (glibc ends it
        // when the program's last thread exits): a process whose first
        // thread had exited would show no memory map or fds in /proc/PID,
        // which a failure reads.
        // SAFETY: a futex wait on a word no one wakes.
        unsafe {
            let word = 0u32;
            loop {
                syscall6(
                    libc::SYS_futex,
                    [
                        &word as *const u32 as u64,
                        (libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG) as u64,
                        0,
                        0,
                        0,
                        0,
                    ],
                );
            }
        }
    }
    // SAFETY: the main thread takes back its thread pointer, its exit hook
    // and robust list, then returns through its saved frame.
    unsafe {
        sc(libc::SYS_arch_prctl, sys::ARCH_SET_FS, t.fs_base, 0);
        sc(libc::SYS_set_tid_address, t.fs_base + tid_off, 0, 0);
        if t.robust_head != 0 {
            sc(libc::SYS_set_robust_list, t.robust_head, t.robust_len, 0);
        }
        sys::jump_sigreturn(t.uc)
    }
}
