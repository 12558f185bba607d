//! A consistent image of a pool file, even one another process has open
//! and is writing (`ferrite pool check --deep`, `ferrite pool backup`).
//!
//! Every opener of a pool holds an exclusive `flock` on it for as long as
//! it is open ([`ferrite_pmem::Pool`]). So:
//!
//! - **Nobody has it open**: a shared `flock` is granted. While it is held
//!   no process can open the pool (their exclusive lock is refused), so the
//!   bytes read are the file's one state: a cleanly closed pool, or the
//!   crash image a killed owner left.
//! - **A process has it open** (the shared lock is refused): its pid is in
//!   `/proc/locks` (the `FLOCK … WRITE` line of the file's device and
//!   inode). The owner is paused with `SIGSTOP`, every one of its threads
//!   is seen stopped (`/proc/PID/task/*/stat`), the lock is checked to be
//!   still the owner's, the file is read, and `SIGCONT` resumes it.
//!
//! Why the paused image is a crash image. The owner writes the pool only
//! through its shared mapping, whose pages are the page cache that
//! `read(2)` returns. When every thread is stopped, each is between two
//! instructions: every store it executed is visible (the kernel entry that
//! stops a thread drains its store and write-combining buffers), none of
//! the stores it has not executed is. The image is therefore "every store
//! up to one instant", which is the crash state in which every store
//! issued before the failure, flushed or not, had reached the media — a
//! state every durability domain allows (under ADR a cache may write back
//! any line at any time, in any order; under eADR and `msync` it is the
//! normal case). It is the crash explorer's image `s1` ("every in-flight
//! unit survives with its newest content", `ferrite_crash::ImageSel`),
//! which it builds at every crash point it explores — at every fence, and
//! with `--crash-on-store` before every store, i.e. at every instant the
//! image can differ — so `ferrite check engine-inp|engine-cow|engine-lsm|
//! bytemap-undo|bytemap-redo|bytemap-clobber|ptm-lazy|ptm-eager
//! --crash-on-store` (the server's stores) proves that each recovers such
//! an image to a state its owner acknowledged. A copy made by `cp`
//! while the owner runs is not such a state: the copy reads different
//! pages at different instants, after the owner has written some of them
//! and before others (issue 31: 14 of 30 `cp` copies of tx stores did not
//! recover).
//!
//! The pause lasts as long as reading the file (a page-cache copy: about
//! 0.5 s per GiB). If this process dies while the owner is stopped, a
//! forked watchdog that only waits on a pipe resumes the owner: the owner
//! is never left stopped.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// How the image was taken.
#[derive(Clone, Debug)]
pub enum View {
    /// Nobody had the pool open: read under a shared lock.
    Closed,
    /// A process had it open: read while it was paused.
    Live {
        pid: i32,
        /// The owner's command name (`/proc/PID/comm`).
        name: String,
        /// How long the owner was paused.
        paused: Duration,
    },
}

impl View {
    /// "pid 123 (ferrite), paused 4.1 ms".
    pub fn describe(&self) -> String {
        match self {
            View::Closed => "not open".into(),
            View::Live { pid, name, paused } => format!(
                "open by pid {pid} ({name}), paused {:.1} ms for a consistent image",
                paused.as_secs_f64() * 1e3
            ),
        }
    }
}

/// A consistent image of a pool file.
pub struct Snapshot {
    pub image: Vec<u8>,
    pub view: View,
    /// The file's device and inode (what its open record must name).
    pub dev: u64,
    pub ino: u64,
}

/// How long to wait for every thread of the owner to stop.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// Reads the file at `path` consistently (module docs). Errors are one
/// line naming the path once.
pub fn snapshot(path: &Path) -> Result<Snapshot, String> {
    let e = |x: &dyn std::fmt::Display| crate::at(path, x);
    for _attempt in 0..20 {
        let mut file = File::open(path).map_err(|x| e(&x))?;
        if file.metadata().map_err(|x| e(&x))?.is_dir() {
            return Err(e(&"is a directory, not a pool file"));
        }
        // SAFETY: flock on a descriptor this function owns.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
        if rc == 0 {
            let mut image = Vec::new();
            file.read_to_end(&mut image).map_err(|x| e(&x))?;
            let meta = file.metadata().map_err(|x| e(&x))?;
            // Closing the file releases the shared lock.
            return Ok(Snapshot {
                image,
                view: View::Closed,
                dev: meta.dev(),
                ino: meta.ino(),
            });
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(e(&err));
        }
        let meta = file.metadata().map_err(|x| e(&x))?;
        let Some(pid) = lock_owner(meta.dev(), meta.ino()) else {
            // Released between the two looks: try again.
            std::thread::sleep(Duration::from_millis(5));
            continue;
        };
        let name = comm(pid);
        let frozen = Frozen::stop(pid).map_err(|why| {
            e(&format!(
                "open by pid {pid} ({name}), which cannot be paused for a consistent image ({why}); stop it, or run this as its user"
            ))
        })?;
        // The pid that held the lock may have closed the pool (and another
        // opened it) before the stop: then the image could be anyone's.
        if lock_owner(meta.dev(), meta.ino()) != Some(pid) {
            drop(frozen);
            continue;
        }
        let mut image = Vec::new();
        let read = file.read_to_end(&mut image);
        let paused = frozen.started.elapsed();
        drop(frozen);
        read.map_err(|x| e(&x))?;
        return Ok(Snapshot {
            image,
            view: View::Live { pid, name, paused },
            dev: meta.dev(),
            ino: meta.ino(),
        });
    }
    Err(e(
        &"its owner kept changing (opened and closed over and over): no consistent image",
    ))
}

/// The pid holding the exclusive `flock` on the file (device `dev`, inode
/// `ino`), from `/proc/locks`, if any (not this process).
pub fn lock_owner(dev: u64, ino: u64) -> Option<i32> {
    let text = std::fs::read_to_string("/proc/locks").ok()?;
    owner_in(&text, dev, ino, std::process::id() as i32)
}

/// Parses `/proc/locks` (`1: FLOCK  ADVISORY  WRITE 123 fe:00:4567 0 EOF`;
/// the device as hexadecimal major:minor).
fn owner_in(text: &str, dev: u64, ino: u64, me: i32) -> Option<i32> {
    // glibc's major()/minor() of a dev_t.
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let want = format!("{major:02x}:{minor:02x}:{ino}");
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // A blocked waiter's line starts "1: ->": skip it.
        if f.len() < 6 || f[1] != "FLOCK" || f[3] != "WRITE" || f[5] != want {
            return None;
        }
        f[4].parse::<i32>().ok().filter(|&p| p > 0 && p != me)
    })
}

/// The command name of `pid` ("?" when gone).
pub fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// A process paused with `SIGSTOP`; resumed (`SIGCONT`) on drop, or by
/// the watchdog if this process dies first.
struct Frozen {
    pid: i32,
    /// The write end of the watchdog's pipe: closing it (drop, or this
    /// process dying) wakes the watchdog, which resumes `pid` and exits.
    watchdog_pipe: Option<OwnedFd>,
    watchdog: libc::pid_t,
    started: Instant,
}

impl Frozen {
    fn stop(pid: i32) -> Result<Frozen, String> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 fills the two-element array with new descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        // SAFETY: both descriptors were just created and are owned here.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: fork; the child calls only async-signal-safe functions
        // (close, read, kill, _exit) on memory that exists before the fork,
        // so the other threads of this process do not matter to it.
        let child = unsafe { libc::fork() };
        if child < 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        if child == 0 {
            // SAFETY: the watchdog child: async-signal-safe calls only.
            unsafe {
                libc::close(wr.as_raw_fd());
                let mut b = 0u8;
                loop {
                    let n = libc::read(rd.as_raw_fd(), (&raw mut b).cast(), 1);
                    if n < 0 && *libc::__errno_location() == libc::EINTR {
                        continue;
                    }
                    break;
                }
                libc::kill(pid, libc::SIGCONT);
                libc::_exit(0);
            }
        }
        drop(rd);
        let frozen = Frozen {
            pid,
            watchdog_pipe: Some(wr),
            watchdog: child,
            started: Instant::now(),
        };
        // SAFETY: kill has no memory-safety preconditions.
        if unsafe { libc::kill(pid, libc::SIGSTOP) } != 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        let deadline = Instant::now() + STOP_WAIT;
        while !all_stopped(pid) {
            if Instant::now() > deadline {
                return Err(format!(
                    "its threads did not all stop within {} s",
                    STOP_WAIT.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        Ok(frozen)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        // SAFETY: kill and waitpid have no memory-safety preconditions;
        // the watchdog is this process's child.
        unsafe {
            libc::kill(self.pid, libc::SIGCONT);
        }
        drop(self.watchdog_pipe.take());
        let mut status = 0;
        // SAFETY: as above.
        unsafe {
            libc::waitpid(self.watchdog, &mut status, 0);
        }
    }
}

/// Whether every thread of `pid` is stopped (or gone).
fn all_stopped(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true; // the process is gone
    };
    tasks.flatten().all(|t| {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            return true; // the thread is gone
        };
        // "tid (comm) S …": the state follows the last ')'.
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next());
        matches!(state, Some("T" | "t" | "Z" | "X"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_locks_lines_are_parsed() {
        let text = "1: FLOCK  ADVISORY  WRITE 17900 fe:00:10117562 0 EOF\n\
                    1: -> FLOCK  ADVISORY  WRITE 18000 fe:00:10117562 0 EOF\n\
                    2: POSIX  ADVISORY  WRITE 5 fe:00:99 0 EOF\n\
                    3: FLOCK  ADVISORY  READ 6 103:02:7 0 EOF\n";
        assert_eq!(owner_in(text, 0xfe00, 10117562, 1), Some(17900));
        assert_eq!(owner_in(text, 0xfe00, 10117562, 17900), None);
        assert_eq!(owner_in(text, 0xfe00, 99, 1), None, "POSIX lock");
        // Shared locks are readers like this one, not owners.
        assert_eq!(owner_in(text, (0x103 << 8) | 2, 7, 1), None);
    }
}
