//! The process context: the on-media format of `DIR/context.pool`.
//!
//! The context is a Ferrite pool (`ferrite-pmem`'s 4 KiB header, layout name
//! [`LAYOUT`]) whose data area holds one [`Context`] at [`CONTEXT_OFF`]. The
//! runtime maps the whole file at [`CONTEXT_BASE`] in the program's address
//! space (the same address in every run, so nothing in it needs swizzling)
//! and updates it as the program changes its address space, threads and
//! signal handlers; the supervisor reads it through its own mapping.
//!
//! Every field is a plain little-endian integer (or an atomic one), so any
//! bit pattern is a valid `Context`: a damaged file yields wrong numbers,
//! which readers bound-check ([`Context::check`]), never undefined behaviour.
//!
//! Layout of [`Context`] (offsets from [`CONTEXT_OFF`], x86-64, `repr(C)`):
//!
//! | offset    | size      | field |
//! |----------:|----------:|-------|
//! | 0         | 8         | magic `b"FWPPCTX1"` |
//! | 8         | 4         | state ([`State`]) |
//! | 12        | 4         | offset of `tid` in glibc's `struct pthread` (from the thread pointer) |
//! | 16        | 4         | PID of the run that last wrote the context |
//! | 20        | 4         | resumes so far |
//! | 24        | 8         | next mapping-file number (`DIR/m<N>`) |
//! | 32        | 4         | `pthread_create` calls whose thread has not registered yet (diagnostic) |
//! | 36        | 4         | threads captured at the last failure |
//! | 40        | 8         | writable bytes *not* persistent at the last failure (coverage gap) |
//! | 48        | 8         | writable bytes persistent at the last failure |
//! | 56        | 8         | writable bytes owned by the runtime itself (recreated on resume) |
//! | 64        | 16        | the runtime library's load range `[lo, hi)` |
//! | 80        | 8         | capture time in nanoseconds (signal to last thread parked) |
//! | 88        | 4         | runtime fd of the state directory (excluded from the fd table) |
//! | 92        | 4         | runtime fd of this file (excluded from the fd table) |
//! | 96        | 4         | failures so far |
//! | 100       | 4         | resume barrier word (futex) |
//! | 104       | 8         | signals pending for the process at the last failure (bit N-1 = signal N) |
//! | 112       | 4         | threads that came back under a new TID at the last resume (0: every one kept its TID) |
//! | 116       | 3980      | reserved, zero |
//! | 4096      | 64 × 16384| mapping table ([`MapRec`]) |
//! | …         | 256 × 1024| path table ([`PathRec`]) |
//! | …         | 64 × 1024 | thread table ([`ThreadRec`]) |
//! | …         | 40 × 65   | signal table ([`SigRec`], index = signal number) |
//! | …         | 8 + 4 + 4 + 1 MiB | fd table: length, CRC32C, reserved, JSON ([`crate::fds::FdTable`]) |
//! | …         | 8 + 4 + 4 + 256 KiB | launch record: length, CRC32C, reserved, JSON ([`crate::launch::Launch`]) |
//!
//! Updates and failures: the runtime changes the tables only inside its
//! trap handler, with the failure signal masked, so an emulated failure
//! never sees half an update (a departure from a real power failure, where
//! each record would need a failure-atomic commit; written down in
//! ARCHITECTURE.md). Under the flush-on-fail domain WPP requires, stores
//! need no flushes.

use core::sync::atomic::{AtomicU32, AtomicU64};

/// Layout name of the context pool.
pub const LAYOUT: &str = "ferrite-wpp";
/// Magic at the start of [`Context`].
pub const MAGIC: u64 = u64::from_le_bytes(*b"FWPPCTX1");
/// Where the runtime maps the context pool in every run.
pub const CONTEXT_BASE: u64 = 0x6f00_0000_0000;
/// The runtime's private stacks (resume and remap work), beside the pool.
pub const PRIVATE_BASE: u64 = 0x6f10_0000_0000;
/// Size of one private stack.
pub const PRIVATE_STACK: u64 = 256 * 1024;
/// Offset of [`Context`] in the pool file (after the pool header).
pub const CONTEXT_OFF: u64 = ferrite_pmem::HEADER_SIZE as u64;

pub const MAX_MAPS: usize = 16384;
pub const MAX_PATHS: usize = 1024;
pub const MAX_THREADS: usize = 1024;
pub const NSIG: usize = 65;
pub const FD_BLOB: usize = 1 << 20;
pub const LAUNCH_BLOB: usize = 256 << 10;
pub const PATH_MAX_LEN: usize = 216;

/// Life-cycle state of a context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum State {
    /// Created by the supervisor; the program has not started yet.
    Created = 0,
    /// The program runs (first run or resumed).
    Running = 1,
    /// A failure was signalled; threads are being stopped.
    Capturing = 2,
    /// Every thread's registers and the kernel state are saved; the
    /// process is dead. `--resume` continues it.
    Captured = 3,
    /// `--resume` is rebuilding the process.
    Resuming = 4,
    /// The program exited by itself; nothing to resume.
    Exited = 5,
}

impl State {
    pub fn from_u32(v: u32) -> Option<State> {
        Some(match v {
            0 => State::Created,
            1 => State::Running,
            2 => State::Capturing,
            3 => State::Captured,
            4 => State::Resuming,
            5 => State::Exited,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            State::Created => "created",
            State::Running => "running",
            State::Capturing => "capturing",
            State::Captured => "captured",
            State::Resuming => "resuming",
            State::Exited => "exited",
        }
    }
}

/// Kind of a mapping record.
pub mod kind {
    /// Free record.
    pub const FREE: u32 = 0;
    /// Private memory made persistent: a shared mapping of `DIR/m<file>`
    /// at `file_off` (anonymous memory, stacks, copied private data).
    pub const PERSISTENT: u32 = 1;
    /// A mapping of an outside file (read-only or executable private
    /// mappings: program text, libraries; or a shared file mapping),
    /// remapped from `paths[file]` at `file_off` on resume.
    pub const EXTERNAL: u32 = 2;
}

/// One mapping (64 bytes). `start`/`len` are page-aligned.
#[repr(C)]
pub struct MapRec {
    pub start: u64,
    pub len: u64,
    /// `PROT_*` bits.
    pub prot: u32,
    /// [`kind`].
    pub kind: u32,
    /// Mapping-file number (PERSISTENT) or path index (EXTERNAL).
    pub file: u64,
    /// Offset in the file that `start` maps.
    pub file_off: u64,
    /// `MAP_SHARED` or `MAP_PRIVATE` (EXTERNAL only).
    pub flags: u32,
    pub reserved: [u32; 5],
}

impl MapRec {
    /// A PERSISTENT record: `[start, start+len)` maps file `file` from
    /// offset `file_off`.
    pub fn persistent(start: u64, len: u64, prot: u32, file: u64, file_off: u64) -> MapRec {
        MapRec {
            start,
            len,
            prot,
            kind: kind::PERSISTENT,
            file,
            file_off,
            flags: 0,
            reserved: [0; 5],
        }
    }
}

/// A file that EXTERNAL mappings name (256 bytes), with the identity it had
/// so that a changed library is refused on resume.
#[repr(C)]
pub struct PathRec {
    /// Bytes of `path` in use; 0 = free.
    pub len: u32,
    pub reserved: u32,
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
    pub path: [u8; PATH_MAX_LEN],
}

/// Thread record states.
pub mod tstate {
    pub const FREE: u32 = 0;
    pub const LIVE: u32 = 1;
    pub const CAPTURED: u32 = 2;
}

/// One thread (64 bytes).
#[repr(C)]
pub struct ThreadRec {
    /// [`tstate`].
    pub state: AtomicU32,
    /// Linux TID in the current run.
    pub tid: AtomicU32,
    /// Thread pointer (glibc TCB, `struct pthread`).
    pub fs_base: u64,
    /// Address of the `ucontext` of the signal frame saved at failure, on
    /// the thread's own (persistent) stack.
    pub uc: u64,
    /// `set_robust_list` head and length.
    pub robust_head: u64,
    pub robust_len: u64,
    /// 1 for the process's main thread.
    pub main: u32,
    pub reserved0: u32,
    /// Signals pending for this thread at the failure (bit N-1 = signal
    /// N), raised again on resume: a pending signal is kernel state that
    /// the kill would lose.
    pub pending: u64,
    pub reserved: [u32; 2],
}

/// A program-installed signal disposition (kernel `struct sigaction`).
#[repr(C)]
pub struct SigRec {
    /// 1 when the program set this signal's disposition.
    pub set: u32,
    pub reserved: u32,
    pub handler: u64,
    pub flags: u64,
    pub restorer: u64,
    pub mask: u64,
}

/// A length-prefixed, checksummed JSON record.
#[repr(C)]
pub struct Blob<const N: usize> {
    pub len: u64,
    pub crc: u32,
    pub reserved: u32,
    pub bytes: [u8; N],
}

impl<const N: usize> Blob<N> {
    /// The stored bytes, if the length is in bounds and the checksum holds.
    pub fn get(&self) -> Option<&[u8]> {
        let len = usize::try_from(self.len).ok()?;
        let b = self.bytes.get(..len)?;
        (crc32c::crc32c(b) == self.crc).then_some(b)
    }
    /// Stores `b`; false when it does not fit.
    pub fn set(&mut self, b: &[u8]) -> bool {
        if b.len() > N {
            return false;
        }
        self.bytes[..b.len()].copy_from_slice(b);
        self.crc = crc32c::crc32c(b);
        self.len = b.len() as u64;
        true
    }
}

/// The process context (see the module documentation for offsets).
#[repr(C)]
pub struct Context {
    pub magic: u64,
    pub state: AtomicU32,
    pub tid_off: u32,
    pub pid: AtomicU32,
    pub resumes: u32,
    pub next_file: AtomicU64,
    pub creating: AtomicU32,
    pub captured: AtomicU32,
    pub gap_bytes: u64,
    pub persistent_bytes: u64,
    pub runtime_bytes: u64,
    pub lib_lo: u64,
    pub lib_hi: u64,
    pub capture_ns: u64,
    pub dir_fd: i32,
    pub ctx_fd: i32,
    pub failures: u32,
    pub gate: AtomicU32,
    pub shared_pending: u64,
    pub new_tids: u32,
    pub reserved: [u8; 4096 - 116],
    pub maps: [MapRec; MAX_MAPS],
    pub paths: [PathRec; MAX_PATHS],
    pub threads: [ThreadRec; MAX_THREADS],
    pub sigs: [SigRec; NSIG],
    pub fds: Blob<FD_BLOB>,
    pub launch: Blob<LAUNCH_BLOB>,
}

/// Size of the pool file: header plus context, rounded to 4 KiB.
pub const POOL_SIZE: u64 =
    (CONTEXT_OFF + core::mem::size_of::<Context>() as u64).div_ceil(4096) * 4096;

impl Context {
    /// The state, if it is a known one.
    pub fn state(&self) -> Option<State> {
        State::from_u32(self.state.load(core::sync::atomic::Ordering::Acquire))
    }

    /// Whether the context looks like one this build wrote.
    pub fn check(&self) -> Result<(), &'static str> {
        if self.magic != MAGIC {
            return Err("not a Ferrite WPP context (bad magic)");
        }
        if self.state().is_none() {
            return Err("unknown context state");
        }
        Ok(())
    }

    /// The path of path record `i`, if valid.
    pub fn path(&self, i: u64) -> Option<&[u8]> {
        let r = self.paths.get(usize::try_from(i).ok()?)?;
        r.path.get(..r.len as usize).filter(|p| !p.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_fields_sit_where_the_table_says() {
        assert_eq!(core::mem::offset_of!(Context, gate), 100);
        assert_eq!(core::mem::offset_of!(Context, shared_pending), 104);
        assert_eq!(core::mem::offset_of!(Context, new_tids), 112);
        assert_eq!(core::mem::offset_of!(Context, maps), 4096);
        assert_eq!(core::mem::size_of::<MapRec>(), 64);
        assert_eq!(core::mem::size_of::<PathRec>(), 256);
        assert_eq!(core::mem::size_of::<ThreadRec>(), 64);
        assert_eq!(core::mem::size_of::<SigRec>(), 40);
        const { assert!(POOL_SIZE < 8 << 20) };
    }

    #[test]
    fn blob_refuses_a_bad_checksum_or_length() {
        let mut b = Box::new(Blob::<16> {
            len: 0,
            crc: 0,
            reserved: 0,
            bytes: [0; 16],
        });
        assert!(b.set(b"hello"));
        assert_eq!(b.get(), Some(&b"hello"[..]));
        b.bytes[0] ^= 1;
        assert_eq!(b.get(), None);
        b.bytes[0] ^= 1;
        b.len = 17;
        assert_eq!(b.get(), None);
        assert!(!b.set(&[0; 17]));
    }
}
