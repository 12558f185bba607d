//! The thread table, `pthread_create`/`pthread_exit` interposition and the
//! failure (capture) handler.
//!
//! A failure is the capture signal sent to the process by the supervisor.
//! The thread that takes it first sends it to every other registered thread
//! (Zhuque's `tgkill` relay, P1 §4.5.1); each thread's handler then records
//! where the kernel put its signal frame — on the thread's own stack, which
//! is persistent, so the frame (every register, the FPU state, the signal
//! mask) survives — plus its thread pointer and robust-futex list, detaches
//! the two kernel hooks that would write into persistent memory when the
//! thread dies (`clear_child_tid`, the robust list), counts itself captured
//! and parks. The supervisor kills the process once all are parked.

use super::{ctx, lock, unlock};
use crate::sys::{self, sc};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use ferrite_wpp::format::tstate;

/// Set by the first thread that takes the capture signal.
static COORD: AtomicBool = AtomicBool::new(false);
static REAL_CREATE: AtomicUsize = AtomicUsize::new(0);
static REAL_EXIT: AtomicUsize = AtomicUsize::new(0);
static PARK: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);

type StartFn = extern "C" fn(*mut libc::c_void) -> *mut libc::c_void;
type CreateFn = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    StartFn,
    *mut libc::c_void,
) -> i32;

fn real(slot: &AtomicUsize, name: &core::ffi::CStr) -> usize {
    let mut f = slot.load(Ordering::Acquire);
    if f == 0 {
        // SAFETY: dlsym with RTLD_NEXT finds libc's definition.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        if f == 0 {
            super::die(b"cannot find libc's pthread functions");
        }
        slot.store(f, Ordering::Release);
    }
    f
}

/// Blocks every signal around a table edit (the capture signal, so a
/// failure never sees half an edit; the others, so no handler of the
/// program can run here and trap into the runtime's lock, which this
/// thread holds); returns the old mask.
pub(crate) fn block_signals() -> u64 {
    let set: u64 = u64::MAX;
    let mut old: u64 = 0;
    // SAFETY: rt_sigprocmask with 8-byte sets on the stack.
    unsafe {
        sys::syscall6(
            libc::SYS_rt_sigprocmask,
            [
                libc::SIG_BLOCK as u64,
                &set as *const u64 as u64,
                &mut old as *mut u64 as u64,
                8,
                0,
                0,
            ],
        )
    };
    old
}

pub(crate) fn restore_mask(old: u64) {
    // SAFETY: as block_signals.
    unsafe {
        sys::syscall6(
            libc::SYS_rt_sigprocmask,
            [
                libc::SIG_SETMASK as u64,
                &old as *const u64 as u64,
                0,
                8,
                0,
                0,
            ],
        )
    };
}

fn register(main: bool) {
    let old = block_signals();
    lock();
    let c = ctx();
    let tid = sys::gettid() as u32;
    if let Some(t) = c
        .threads
        .iter_mut()
        .find(|t| t.state.load(Ordering::Relaxed) == tstate::FREE)
    {
        t.fs_base = sys::fs_base();
        t.uc = 0;
        t.pending = 0;
        t.main = main as u32;
        t.tid.store(tid, Ordering::Relaxed);
        t.state.store(tstate::LIVE, Ordering::Release);
    } else {
        unlock();
        super::die(b"thread table full (1024 threads)");
    }
    unlock();
    if !main {
        let _ = c
            .creating
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1));
    }
    restore_mask(old);
    // Pairs with the coordinator's swap of COORD (a full barrier): either
    // it sees this thread in the table, or this thread sees COORD.
    core::sync::atomic::fence(Ordering::SeqCst);
    if COORD.load(Ordering::Acquire) {
        // A failure began while this thread was being born: stop it too.
        // SAFETY: tgkill to ourselves.
        unsafe {
            sc(
                libc::SYS_tgkill,
                sc(libc::SYS_getpid, 0, 0, 0) as u64,
                tid as u64,
                super::CAPTURE_SIG.load(Ordering::Relaxed) as u64,
            )
        };
    }
}

fn deregister() {
    let old = block_signals();
    lock();
    let tid = sys::gettid() as u32;
    for t in ctx().threads.iter() {
        if t.state.load(Ordering::Relaxed) == tstate::LIVE && t.tid.load(Ordering::Relaxed) == tid {
            t.state.store(tstate::FREE, Ordering::Release);
        }
    }
    unlock();
    restore_mask(old);
}

pub(crate) fn register_main() {
    register(true);
}

#[repr(C)]
struct Start {
    f: StartFn,
    arg: *mut libc::c_void,
}

extern "C" fn trampoline(p: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: p is the Box<Start> leaked by pthread_create below.
    let s = unsafe { Box::from_raw(p as *mut Start) };
    let (f, arg) = (s.f, s.arg);
    drop(s);
    register(false);
    let r = f(arg);
    deregister();
    r
}

/// Interposed `pthread_create`: the new thread registers itself in the
/// thread table before it runs the program's start routine.
///
/// # Safety
/// As libc's `pthread_create`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_create(
    th: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    f: StartFn,
    arg: *mut libc::c_void,
) -> i32 {
    let realf = real(&REAL_CREATE, c"pthread_create");
    // SAFETY: realf is libc's pthread_create, which has this signature.
    let realf: CreateFn = unsafe { core::mem::transmute::<usize, CreateFn>(realf) };
    if !super::active() {
        // SAFETY: the program's own call.
        return unsafe { realf(th, attr, f, arg) };
    }
    let s = Box::into_raw(Box::new(Start { f, arg }));
    ctx().creating.fetch_add(1, Ordering::AcqRel);
    // SAFETY: the program's own call, with our trampoline as entry point.
    let r = unsafe { realf(th, attr, trampoline, s as *mut libc::c_void) };
    if r != 0 {
        let _ = ctx()
            .creating
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1));
        // SAFETY: the thread was not created; the box is still ours.
        drop(unsafe { Box::from_raw(s) });
    }
    r
}

/// Interposed `pthread_exit`: leave the thread table first.
///
/// # Safety
/// As libc's `pthread_exit`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_exit(v: *mut libc::c_void) -> ! {
    let realf = real(&REAL_EXIT, c"pthread_exit");
    if super::active() {
        deregister();
    }
    // SAFETY: realf is libc's pthread_exit.
    let realf: extern "C" fn(*mut libc::c_void) -> ! =
        unsafe { core::mem::transmute::<usize, extern "C" fn(*mut libc::c_void) -> !>(realf) };
    realf(v)
}

/// The capture handler (see the module documentation). Runs with every
/// signal blocked (its `sa_mask`).
pub(crate) extern "C" fn on_capture(sig: i32, _info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    let c = ctx();
    // SAFETY: getpid takes no arguments.
    let pid = unsafe { sc(libc::SYS_getpid, 0, 0, 0) } as u64;
    let me = sys::gettid() as u32;
    if !COORD.swap(true, Ordering::AcqRel) {
        c.state.store(
            ferrite_wpp::format::State::Capturing as u32,
            Ordering::Release,
        );
        for t in c.threads.iter() {
            let tid = t.tid.load(Ordering::Relaxed);
            if t.state.load(Ordering::Acquire) == tstate::LIVE && tid != me {
                // SAFETY: tgkill to a thread of this process.
                unsafe { sc(libc::SYS_tgkill, pid, tid as u64, sig as u64) };
            }
        }
    }
    let slot = c.threads.iter_mut().find(|t| {
        t.state.load(Ordering::Acquire) == tstate::LIVE && t.tid.load(Ordering::Relaxed) == me
    });
    if let Some(t) = slot {
        t.uc = uc as u64;
        t.fs_base = sys::fs_base();
        let mut head: u64 = 0;
        let mut len: u64 = 0;
        // SAFETY: get_robust_list(0 = self) writes a pointer and a length;
        // set_robust_list(NULL) and set_tid_address(NULL) stop the kernel
        // from writing into (persistent) thread memory when we are killed.
        unsafe {
            sc(
                libc::SYS_get_robust_list,
                0,
                &mut head as *mut u64 as u64,
                &mut len as *mut u64 as u64,
            );
            sc(libc::SYS_set_robust_list, 0, len.max(24), 0);
            sc(libc::SYS_set_tid_address, 0, 0, 0);
        }
        t.robust_head = head;
        t.robust_len = len;
        t.state.store(tstate::CAPTURED, Ordering::Release);
        c.captured.fetch_add(1, Ordering::AcqRel);
    } else {
        // Not in the table: a thread on its way out (it left the table in
        // pthread_exit or after its start routine). Let it finish exiting;
        // the supervisor waits for it to be gone.
        return;
    }
    loop {
        // SAFETY: waits on a private word that is never woken; the
        // supervisor's SIGKILL ends the thread here.
        unsafe {
            sys::syscall6(
                libc::SYS_futex,
                [
                    PARK.as_ptr() as u64,
                    (libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG) as u64,
                    0,
                    0,
                    0,
                    0,
                ],
            )
        };
    }
}
