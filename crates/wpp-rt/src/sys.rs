//! Raw system calls and the pieces of machine code the runtime needs.
//!
//! Every system call the runtime makes after its seccomp filter is installed
//! goes through [`syscall6`], whose `syscall` instruction sits at a fixed
//! place: the filter lets calls from that one address through and traps the
//! program's own memory and signal calls (see `runtime::trap`). The other
//! pieces are [`jump_sigreturn`] (resume a thread from a saved signal
//! frame) and [`clone_thread`] and [`clone3_thread_as`] (start a thread on
//! a stack of our choosing, with no libc involved; the second under a
//! thread ID of our choosing).
//!
//! x86-64 Linux only.

use core::arch::global_asm;

global_asm!(
    ".pushsection .text.ferrite_wpp,\"ax\",@progbits",
    ".globl ferrite_wpp_syscall6",
    ".hidden ferrite_wpp_syscall6",
    ".type ferrite_wpp_syscall6,@function",
    "ferrite_wpp_syscall6:",
    // (nr, a1, a2, a3, a4, a5, a6) in (rdi, rsi, rdx, rcx, r8, r9, [rsp+8])
    "    mov rax, rdi",
    "    mov rdi, rsi",
    "    mov rsi, rdx",
    "    mov rdx, rcx",
    "    mov r10, r8",
    "    mov r8, r9",
    "    mov r9, [rsp + 8]",
    "    syscall",
    ".globl ferrite_wpp_syscall_ip",
    ".hidden ferrite_wpp_syscall_ip",
    "ferrite_wpp_syscall_ip:",
    "    ret",
    //
    // jump_sigreturn(uc): the kernel's rt_sigreturn reads the frame at
    // rsp - 8 (just past the handler's return address), i.e. the ucontext.
    ".globl ferrite_wpp_jump_sigreturn",
    ".hidden ferrite_wpp_jump_sigreturn",
    ".type ferrite_wpp_jump_sigreturn,@function",
    "ferrite_wpp_jump_sigreturn:",
    "    mov rsp, rdi",
    "    mov eax, 15",
    "    syscall",
    "    ud2",
    //
    // clone_thread(flags, stack_top, ptid, ctid, tls, entry, arg):
    // (rdi, rsi, rdx, rcx, r8, r9, [rsp+8]). The child starts on
    // stack_top and calls entry(arg), which never returns.
    ".globl ferrite_wpp_clone_thread",
    ".hidden ferrite_wpp_clone_thread",
    ".type ferrite_wpp_clone_thread,@function",
    "ferrite_wpp_clone_thread:",
    "    mov r11, [rsp + 8]",
    "    sub rsi, 16",
    "    mov [rsi], r9",
    "    mov [rsi + 8], r11",
    "    mov r10, rcx",
    "    mov eax, 56",
    "    syscall",
    "    test rax, rax",
    "    jnz 2f",
    "    pop rax",
    "    pop rdi",
    "    and rsp, -16",
    "    call rax",
    "    ud2",
    "2:",
    "    ret",
    //
    // clone3_thread(args, size): clone3 with a clone_args whose stack ends
    // in (entry, arg), pushed there by the caller; the child pops them and
    // calls entry(arg), which never returns.
    ".globl ferrite_wpp_clone3_thread",
    ".hidden ferrite_wpp_clone3_thread",
    ".type ferrite_wpp_clone3_thread,@function",
    "ferrite_wpp_clone3_thread:",
    "    mov eax, 435",
    "    syscall",
    "    test rax, rax",
    "    jnz 3f",
    "    pop rax",
    "    pop rdi",
    "    and rsp, -16",
    "    call rax",
    "    ud2",
    "3:",
    "    ret",
    //
    // on_stack(stack_top, f, arg): run f(arg) on another stack and come
    // back to the caller's stack when it returns.
    ".globl ferrite_wpp_on_stack",
    ".hidden ferrite_wpp_on_stack",
    ".type ferrite_wpp_on_stack,@function",
    "ferrite_wpp_on_stack:",
    "    push rbp",
    "    mov rbp, rsp",
    "    and rdi, -16",
    "    mov rsp, rdi",
    "    mov rax, rsi",
    "    mov rdi, rdx",
    "    call rax",
    "    mov rsp, rbp",
    "    pop rbp",
    "    ret",
    //
    // The restorer every handler the runtime installs returns through.
    ".globl ferrite_wpp_restorer",
    ".hidden ferrite_wpp_restorer",
    ".type ferrite_wpp_restorer,@function",
    "ferrite_wpp_restorer:",
    "    mov eax, 15",
    "    syscall",
    "    ud2",
    ".popsection",
);

unsafe extern "C" {
    fn ferrite_wpp_syscall6(nr: i64, a1: u64, a2: u64, a3: u64, a4: u64, a5: u64, a6: u64) -> i64;
    static ferrite_wpp_syscall_ip: u8;
    fn ferrite_wpp_jump_sigreturn(uc: u64) -> !;
    fn ferrite_wpp_clone_thread(
        flags: u64,
        stack_top: u64,
        ptid: u64,
        ctid: u64,
        tls: u64,
        entry: extern "C" fn(u64) -> !,
        arg: u64,
    ) -> i64;
    fn ferrite_wpp_clone3_thread(args: *const CloneArgs, size: u64) -> i64;
    fn ferrite_wpp_on_stack(stack_top: u64, f: extern "C" fn(u64), arg: u64);
    fn ferrite_wpp_restorer();
}

/// Address of the signal restorer (`rt_sigreturn`) for `SA_RESTORER`.
pub fn restorer() -> u64 {
    ferrite_wpp_restorer as *const () as u64
}

/// A raw system call through the runtime's one allowed `syscall`
/// instruction. Returns the kernel's value: negative errno on failure.
///
/// # Safety
/// The call does whatever the kernel does with these arguments: the caller
/// answers for pointers passed and for mappings it changes.
#[inline]
pub unsafe fn syscall6(nr: i64, a: [u64; 6]) -> i64 {
    // SAFETY: the trampoline only moves registers and traps into the kernel;
    // the caller answers for what the call itself does.
    unsafe { ferrite_wpp_syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5]) }
}

/// Shorthand for calls with fewer arguments.
///
/// # Safety
/// As [`syscall6`].
#[inline]
pub unsafe fn sc(nr: i64, a1: u64, a2: u64, a3: u64) -> i64 {
    // SAFETY: as syscall6.
    unsafe { syscall6(nr, [a1, a2, a3, 0, 0, 0]) }
}

/// The address the kernel reports for calls made through [`syscall6`]
/// (the instruction after its `syscall`): seccomp lets exactly this through.
pub fn allowed_ip() -> u64 {
    // Only the address of the label is taken, never its contents.
    core::ptr::addr_of!(ferrite_wpp_syscall_ip) as u64
}

/// Restores every register, the signal mask and the FPU state from the
/// `ucontext` at `uc` (a frame the kernel pushed for a signal), continuing
/// at the instruction it interrupted.
///
/// # Safety
/// `uc` must be a kernel-built signal frame's ucontext in mapped memory,
/// with the rest of that frame (its FPU area) intact.
pub unsafe fn jump_sigreturn(uc: u64) -> ! {
    // SAFETY: the caller vouches for the frame.
    unsafe { ferrite_wpp_jump_sigreturn(uc) }
}

/// Starts a thread with `clone(2)` on `stack_top` that runs `entry(arg)`.
/// Returns the child's TID (or a negative errno) in the parent.
///
/// # Safety
/// The stack must be mapped and reserved for the child; `entry` must not
/// return and must not rely on anything of the parent's stack.
pub unsafe fn clone_thread(
    flags: u64,
    stack_top: u64,
    ptid: u64,
    ctid: u64,
    tls: u64,
    entry: extern "C" fn(u64) -> !,
    arg: u64,
) -> i64 {
    // SAFETY: the caller vouches for the stack and the entry point.
    unsafe { ferrite_wpp_clone_thread(flags, stack_top, ptid, ctid, tls, entry, arg) }
}

/// The kernel's `struct clone_args` up to `set_tid_size`
/// (`CLONE_ARGS_SIZE_VER1`, 80 bytes).
#[repr(C)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
}

/// As [`clone_thread`], with `clone3(2)` asking for thread ID `tid`
/// (`set_tid`: needs `CAP_CHECKPOINT_RESTORE` or `CAP_SYS_ADMIN`, and the
/// ID free). `stack_lo..stack_top` is the child's stack. Returns the
/// child's TID, or a negative errno (`-EPERM`, `-EEXIST`, `-ENOSYS`, ...)
/// with no thread started.
///
/// # Safety
/// As [`clone_thread`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn clone3_thread_as(
    tid: u32,
    flags: u64,
    stack_lo: u64,
    stack_top: u64,
    tidp: u64,
    tls: u64,
    entry: extern "C" fn(u64) -> !,
    arg: u64,
) -> i64 {
    let top = (stack_top & !15) - 16;
    // SAFETY: the caller reserves the stack for the child; the two words
    // below its top are what the child pops first.
    unsafe {
        core::ptr::write(top as *mut u64, entry as *const () as u64);
        core::ptr::write((top + 8) as *mut u64, arg);
    }
    let want = tid as i32;
    let args = CloneArgs {
        flags,
        pidfd: 0,
        child_tid: tidp,
        parent_tid: tidp,
        exit_signal: 0,
        stack: stack_lo,
        stack_size: top - stack_lo,
        tls,
        set_tid: &want as *const i32 as u64,
        set_tid_size: 1,
    };
    // SAFETY: args is a valid clone_args of the size passed; the caller
    // vouches for the stack and the entry point.
    unsafe { ferrite_wpp_clone3_thread(&args, core::mem::size_of::<CloneArgs>() as u64) }
}

/// Runs `f(arg)` on the stack ending at `stack_top`, then returns on the
/// caller's stack. Used to rewrite the main thread's own stack mapping.
///
/// # Safety
/// `stack_top` must be the top of a mapped stack no one else uses.
pub unsafe fn on_stack(stack_top: u64, f: extern "C" fn(u64), arg: u64) {
    // SAFETY: the caller vouches for the stack.
    unsafe { ferrite_wpp_on_stack(stack_top, f, arg) }
}

pub use libc::{
    SYS_arch_prctl, SYS_close, SYS_exit_group, SYS_fallocate, SYS_fcntl, SYS_fstat, SYS_ftruncate,
    SYS_getpid, SYS_gettid, SYS_mmap, SYS_mprotect, SYS_openat, SYS_prctl, SYS_pwrite64, SYS_read,
    SYS_sched_yield, SYS_seccomp, SYS_unlinkat, SYS_write,
};

/// `arch_prctl` codes (asm/prctl.h).
pub const ARCH_SET_FS: u64 = 0x1002;
pub const ARCH_GET_FS: u64 = 0x1003;

/// `write(2)` of a whole buffer to fd (best effort; for messages).
pub fn write_all(fd: i32, mut buf: &[u8]) {
    while !buf.is_empty() {
        // SAFETY: buf is a live slice; write only reads it.
        let n = unsafe { sc(SYS_write, fd as u64, buf.as_ptr() as u64, buf.len() as u64) };
        if n <= 0 {
            if n == -(libc::EINTR as i64) {
                continue;
            }
            return;
        }
        buf = &buf[n as usize..];
    }
}

/// The calling thread's TID.
pub fn gettid() -> i32 {
    // SAFETY: no arguments.
    unsafe { sc(SYS_gettid, 0, 0, 0) as i32 }
}

/// The calling thread's FS base (its thread pointer: glibc's TCB).
pub fn fs_base() -> u64 {
    let mut v: u64 = 0;
    // SAFETY: ARCH_GET_FS writes one u64 through the pointer.
    unsafe { sc(SYS_arch_prctl, ARCH_GET_FS, &mut v as *mut u64 as u64, 0) };
    v
}

/// Ends the whole process at once with `code` (no atexit, no unwinding).
pub fn exit_group(code: i32) -> ! {
    loop {
        // SAFETY: exit_group does not return.
        unsafe { sc(SYS_exit_group, code as u64, 0, 0) };
    }
}
