//! The file-descriptor table: read from the stopped process at a failure
//! (`/proc/PID/fd`, `/proc/PID/fdinfo`, and `pidfd_getfd` for what only a
//! duplicate can tell: socket addresses, unread pipe bytes), stored as JSON
//! in the context pool, and rebuilt by the supervisor before `exec` on
//! resume.
//!
//! This is a departure from Zhuque, which replays interposed `open`/
//! `socket`/`fcntl` calls: here the kernel's own table is read at the
//! failure moment, the way a flush-on-fail kernel would save it. What each
//! kind becomes on resume:
//!
//! | kind | on resume |
//! |------|-----------|
//! | regular file, device | reopened by path with its flags, at its offset |
//! | listening socket (TCP, UDP bound, Unix) | a new socket bound to the same address, listening |
//! | connected socket | one end of a socket pair whose peer is closed: the program reads end-of-file, as after a reset (reported) |
//! | pipe with both ends in the process | a new pipe holding the unread bytes |
//! | epoll | a new epoll with the same interest list (events, data) |
//! | eventfd | a new eventfd with the same count |
//! | fds 0–2 that are not regular files | taken from the resuming `ferrite run` |
//! | anything else (timerfd, signalfd, inotify, a pipe to another process) | `/dev/null` in its place (reported) |

use crate::{Result, WppError, io};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FdTable {
    pub fds: Vec<FdRec>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FdRec {
    pub fd: i32,
    pub cloexec: bool,
    /// File status flags (`O_*`, without `O_CLOEXEC`).
    pub flags: i32,
    pub kind: FdKind,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum FdKind {
    File {
        path: String,
        pos: i64,
    },
    Socket {
        domain: i32,
        ty: i32,
        proto: i32,
        listening: bool,
        connected: bool,
        addr: Vec<u8>,
        /// `IPV6_V6ONLY` (an IPv6 socket beside an IPv4 one on the same
        /// port needs it to bind again).
        #[serde(default)]
        v6only: bool,
    },
    Pipe {
        ino: u64,
        write_end: bool,
        /// Unread bytes (on the read end's record only).
        data: Vec<u8>,
    },
    Epoll {
        /// (target fd, events, data)
        entries: Vec<(i32, u32, u64)>,
    },
    EventFd {
        count: u64,
    },
    /// fd 0, 1 or 2, not a regular file: the resuming run's own is used.
    Inherited,
    /// Cannot be rebuilt; `/dev/null` stands in.
    Lost {
        what: String,
    },
}

fn read_fdinfo(pid: i32, fd: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).ok()
}

fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|l| {
        l.strip_prefix(name)
            .map(|v| v.trim_start_matches(':').trim())
    })
}

/// Parses the `tfd:` lines of an epoll fdinfo.
pub fn parse_epoll(info: &str) -> Vec<(i32, u32, u64)> {
    let mut v = vec![];
    for l in info.lines().filter(|l| l.starts_with("tfd:")) {
        let toks: Vec<&str> = l.split_whitespace().collect();
        let get = |k: &str| {
            toks.iter()
                .position(|t| *t == k)
                .and_then(|i| toks.get(i + 1))
                .copied()
        };
        let (Some(tfd), Some(ev), Some(data)) = (get("tfd:"), get("events:"), get("data:")) else {
            continue;
        };
        let (Ok(tfd), Ok(ev), Ok(data)) = (
            tfd.parse::<i32>(),
            u32::from_str_radix(ev, 16),
            u64::from_str_radix(data, 16),
        ) else {
            continue;
        };
        v.push((tfd, ev, data));
    }
    v
}

struct PidFd(OwnedFd);

impl PidFd {
    fn open(pid: i32) -> Result<PidFd> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd.
        let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if r < 0 {
            return Err(io("pidfd_open")(std::io::Error::last_os_error()));
        }
        // SAFETY: r is a fresh fd we own.
        Ok(PidFd(unsafe { OwnedFd::from_raw_fd(r as i32) }))
    }
    /// A duplicate of the target's `fd` in this process.
    fn get(&self, fd: i32) -> Option<OwnedFd> {
        // SAFETY: pidfd_getfd returns a new fd (close-on-exec) or -1.
        let r = unsafe { libc::syscall(libc::SYS_pidfd_getfd, self.0.as_raw_fd(), fd, 0) };
        // SAFETY: r is a fresh fd we own.
        (r >= 0).then(|| unsafe { OwnedFd::from_raw_fd(r as i32) })
    }
}

fn sockopt(fd: &OwnedFd, opt: i32) -> i32 {
    sockopt_at(fd, libc::SOL_SOCKET, opt)
}

fn sockopt_at(fd: &OwnedFd, level: i32, opt: i32) -> i32 {
    let mut v: i32 = 0;
    let mut len = 4 as libc::socklen_t;
    // SAFETY: getsockopt writes at most len bytes into v.
    unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            &mut v as *mut i32 as *mut libc::c_void,
            &mut len,
        )
    };
    v
}

fn sockaddr(fd: &OwnedFd, peer: bool) -> Option<Vec<u8>> {
    // SAFETY: sockaddr_storage is plain bytes.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let p = &mut ss as *mut _ as *mut libc::sockaddr;
    // SAFETY: the call writes at most len bytes into ss.
    let r = unsafe {
        if peer {
            libc::getpeername(fd.as_raw_fd(), p, &mut len)
        } else {
            libc::getsockname(fd.as_raw_fd(), p, &mut len)
        }
    };
    if r != 0 {
        return None;
    }
    // SAFETY: len bytes of ss were written.
    Some(unsafe { std::slice::from_raw_parts(p as *const u8, len as usize) }.to_vec())
}

/// Reads the fd table of stopped process `pid`, leaving out `skip` (the
/// runtime's own fds). Drains the unread bytes of pipes whose both ends
/// the process holds (it is about to be killed).
pub fn capture(pid: i32, skip: &[i32]) -> Result<FdTable> {
    let pidfd = PidFd::open(pid)?;
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd")).map_err(io("reading /proc/PID/fd"))?;
    let mut fds: Vec<i32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| !skip.contains(fd))
        .collect();
    fds.sort();
    let mut out = vec![];
    let mut pipe_ends: HashMap<u64, (bool, bool)> = HashMap::new();
    for &fd in &fds {
        let Ok(target) = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")) else {
            continue;
        };
        let target = target.to_string_lossy().into_owned();
        let info = read_fdinfo(pid, fd).unwrap_or_default();
        let raw_flags = field(&info, "flags")
            .and_then(|f| i32::from_str_radix(f, 8).ok())
            .unwrap_or(0);
        let cloexec = raw_flags & libc::O_CLOEXEC != 0;
        let flags = raw_flags & !libc::O_CLOEXEC;
        let pos = field(&info, "pos")
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let kind = if let Some(ino) = target
            .strip_prefix("pipe:[")
            .and_then(|s| s.strip_suffix(']'))
            .and_then(|s| s.parse::<u64>().ok())
        {
            let write_end = flags & libc::O_ACCMODE == libc::O_WRONLY;
            let e = pipe_ends.entry(ino).or_default();
            if write_end {
                e.1 = true
            } else {
                e.0 = true
            }
            FdKind::Pipe {
                ino,
                write_end,
                data: vec![],
            }
        } else if target.starts_with("socket:") {
            match pidfd.get(fd) {
                Some(s) => FdKind::Socket {
                    domain: sockopt(&s, libc::SO_DOMAIN),
                    ty: sockopt(&s, libc::SO_TYPE),
                    proto: sockopt(&s, libc::SO_PROTOCOL),
                    listening: sockopt(&s, libc::SO_ACCEPTCONN) != 0,
                    connected: sockaddr(&s, true).is_some(),
                    addr: sockaddr(&s, false).unwrap_or_default(),
                    v6only: sockopt_at(&s, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) != 0,
                },
                None => FdKind::Lost { what: target },
            }
        } else if target == "anon_inode:[eventpoll]" {
            FdKind::Epoll {
                entries: parse_epoll(&info),
            }
        } else if target == "anon_inode:[eventfd]" {
            FdKind::EventFd {
                count: field(&info, "eventfd-count")
                    .and_then(|c| u64::from_str_radix(c, 16).ok())
                    .unwrap_or(0),
            }
        } else if target.starts_with('/') && !target.ends_with(" (deleted)") {
            let regular = std::fs::metadata(&target)
                .map(|m| m.is_file())
                .unwrap_or(false);
            if fd <= 2 && !regular {
                FdKind::Inherited
            } else {
                FdKind::File { path: target, pos }
            }
        } else {
            FdKind::Lost { what: target }
        };
        let kind = match kind {
            FdKind::Lost { .. } | FdKind::Socket { .. } | FdKind::Pipe { .. } if fd <= 2 => {
                FdKind::Inherited
            }
            k => k,
        };
        out.push(FdRec {
            fd,
            cloexec,
            flags,
            kind,
        });
    }
    // Pipes: drain the read end of pipes held whole; a pipe with one end
    // outside (other than 0-2) cannot be rebuilt.
    for r in out.iter_mut() {
        if let FdKind::Pipe {
            ino,
            write_end,
            data,
        } = &mut r.kind
        {
            let (rd, wr) = pipe_ends[ino];
            if !(rd && wr) {
                r.kind = FdKind::Lost {
                    what: format!("pipe:[{ino}] (other end outside the process)"),
                };
            } else if !*write_end && let Some(dup) = pidfd.get(r.fd) {
                *data = drain(&dup);
            }
        }
    }
    Ok(FdTable { fds: out })
}

fn drain(fd: &OwnedFd) -> Vec<u8> {
    // SAFETY: fcntl on our duplicate (the shared status flags change too,
    // harmless: the process is about to be killed).
    unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    let mut out = vec![];
    let mut buf = [0u8; 65536];
    loop {
        // SAFETY: read into a local buffer.
        let n = unsafe {
            libc::read(
                fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
            )
        };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    out
}

/// The fds prepared in the supervisor for a resumed process: each `src`
/// (close-on-exec, numbered above every target) is `dup2`ed onto its
/// target fd in the child before `exec`, then epoll interest lists are
/// re-added (by target numbers, which is how epoll keys them).
#[derive(Debug, Default)]
pub struct Prepared {
    pub moves: Vec<(OwnedFd, i32)>,
    pub epoll_adds: Vec<(i32, i32, u32, u64)>,
    pub cloexec: Vec<i32>,
    /// What could not be rebuilt as it was, one line each.
    pub report: Vec<String>,
}

fn cvt(r: i32, what: &str) -> Result<i32> {
    if r < 0 {
        Err(io(what.to_string())(std::io::Error::last_os_error()))
    } else {
        Ok(r)
    }
}

fn owned(fd: i32) -> OwnedFd {
    // SAFETY: fd was just returned by a call that creates it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn dev_null() -> Result<OwnedFd> {
    // SAFETY: open of a literal path.
    let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    cvt(fd, "opening /dev/null").map(owned)
}

fn rebuild_socket(
    domain: i32,
    ty: i32,
    proto: i32,
    listening: bool,
    addr: &[u8],
    flags: i32,
    v6only: bool,
) -> Result<OwnedFd> {
    let nb = if flags & libc::O_NONBLOCK != 0 {
        libc::SOCK_NONBLOCK
    } else {
        0
    };
    // SAFETY: socket returns a new fd or -1.
    let s = owned(cvt(
        unsafe { libc::socket(domain, ty | nb | libc::SOCK_CLOEXEC, proto) },
        "socket",
    )?);
    if addr.len() > 2 {
        let one: i32 = 1;
        // SAFETY: setsockopt reads 4 bytes; bind reads addr.len() bytes.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_REUSEADDR,
                &one as *const i32 as *const libc::c_void,
                4,
            );
            if domain == libc::AF_INET6 && v6only {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::IPPROTO_IPV6,
                    libc::IPV6_V6ONLY,
                    &one as *const i32 as *const libc::c_void,
                    4,
                );
            }
            if domain == libc::AF_UNIX && addr.len() > 3 && addr[2] != 0 {
                // A filesystem socket: its old file is in the way.
                let path = &addr[2..];
                let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
                if let Ok(c) = CString::new(&path[..end]) {
                    libc::unlink(c.as_ptr());
                }
            }
            cvt(
                libc::bind(
                    s.as_raw_fd(),
                    addr.as_ptr() as *const libc::sockaddr,
                    addr.len() as libc::socklen_t,
                ),
                "bind (rebuilding a socket)",
            )?;
        }
    }
    if listening {
        // SAFETY: listen on our socket.
        cvt(
            unsafe { libc::listen(s.as_raw_fd(), libc::SOMAXCONN) },
            "listen",
        )?;
    }
    Ok(s)
}

/// Builds every fd of `t` in this process (see the module table).
pub fn prepare(t: &FdTable) -> Result<Prepared> {
    let mut p = Prepared::default();
    let mut pipes: HashMap<u64, (OwnedFd, OwnedFd)> = HashMap::new();
    for r in &t.fds {
        let fd: Option<OwnedFd> = match &r.kind {
            FdKind::Inherited => None,
            FdKind::File { path, pos } => Some(reopen_file(r, path, *pos, &mut p.report)?),
            FdKind::Socket {
                domain,
                ty,
                proto,
                listening,
                connected,
                addr,
                v6only,
            } => {
                if *connected || (*ty == libc::SOCK_STREAM && !*listening) {
                    Some(dead_connection(r, &mut p.report)?)
                } else {
                    Some(rebuild_socket(
                        *domain, *ty, *proto, *listening, addr, r.flags, *v6only,
                    )?)
                }
            }
            FdKind::Pipe {
                ino,
                write_end,
                data,
            } => Some(pipe_end(
                r,
                *ino,
                *write_end,
                data,
                &mut pipes,
                &mut p.report,
            )?),
            FdKind::Epoll { entries } => {
                // SAFETY: epoll_create1 returns a new fd or -1.
                let e = owned(cvt(
                    unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) },
                    "epoll_create1",
                )?);
                for &(tfd, ev, data) in entries {
                    p.epoll_adds.push((r.fd, tfd, ev, data));
                }
                Some(e)
            }
            FdKind::EventFd { count } => Some(rebuild_eventfd(r, *count)?),
            FdKind::Lost { what } => {
                p.report.push(format!(
                    "fd {}: {what} cannot be rebuilt; /dev/null stands in",
                    r.fd
                ));
                Some(dev_null()?)
            }
        };
        if let Some(fd) = fd {
            p.moves.push((fd, r.fd));
            if r.cloexec {
                p.cloexec.push(r.fd);
            }
        }
    }
    lift_sources_above_targets(&mut p.moves)?;
    Ok(p)
}

/// Reopens the file of record `r` at `path` (its flags without those that
/// would create or truncate) and seeks to `pos`; a file that cannot be
/// reopened is reported and `/dev/null` stands in.
fn reopen_file(r: &FdRec, path: &str, pos: i64, report: &mut Vec<String>) -> Result<OwnedFd> {
    let c = CString::new(path.as_bytes()).map_err(|_| WppError::Corrupt("NUL in a path".into()))?;
    let fl = r.flags & !(libc::O_CREAT | libc::O_TRUNC | libc::O_EXCL);
    // SAFETY: open of a NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), fl | libc::O_CLOEXEC) };
    if fd < 0 {
        report.push(format!(
            "fd {}: {path} cannot be reopened ({}); /dev/null stands in",
            r.fd,
            std::io::Error::last_os_error()
        ));
        dev_null()
    } else {
        let fd = owned(fd);
        // SAFETY: lseek on our fd.
        unsafe { libc::lseek(fd.as_raw_fd(), pos, libc::SEEK_SET) };
        Ok(fd)
    }
}

/// The stand-in for a connected socket of record `r` (a connection cannot
/// survive a failure): one end of a stream socket pair whose other end is
/// closed, so the program reads end-of-file; non-blocking if `r` was.
/// Reported.
fn dead_connection(r: &FdRec, report: &mut Vec<String>) -> Result<OwnedFd> {
    report.push(format!(
        "fd {}: a connection cannot survive a failure; the program reads end-of-file",
        r.fd
    ));
    let mut sv = [0i32; 2];
    // SAFETY: socketpair writes two fds.
    cvt(
        unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
                sv.as_mut_ptr(),
            )
        },
        "socketpair",
    )?;
    drop(owned(sv[1]));
    let a = owned(sv[0]);
    if r.flags & libc::O_NONBLOCK != 0 {
        // SAFETY: fcntl on our fd.
        unsafe {
            libc::fcntl(
                a.as_raw_fd(),
                libc::F_SETFL,
                libc::O_NONBLOCK | libc::O_RDWR,
            )
        };
    }
    Ok(a)
}

/// One end of the pipe `ino` (record `r`): the pipe is made at its first
/// end met and kept in `pipes` for the other; the read end's record puts
/// its unread `data` back into it (reported when not all of it fits).
/// Returns a duplicate of the end asked for.
fn pipe_end(
    r: &FdRec,
    ino: u64,
    write_end: bool,
    data: &[u8],
    pipes: &mut HashMap<u64, (OwnedFd, OwnedFd)>,
    report: &mut Vec<String>,
) -> Result<OwnedFd> {
    if let std::collections::hash_map::Entry::Vacant(e) = pipes.entry(ino) {
        let mut pf = [0i32; 2];
        // SAFETY: pipe2 writes two fds.
        cvt(
            unsafe { libc::pipe2(pf.as_mut_ptr(), libc::O_CLOEXEC) },
            "pipe2",
        )?;
        e.insert((owned(pf[0]), owned(pf[1])));
    }
    let (rd, wr) = &pipes[&ino];
    if !write_end && !data.is_empty() {
        // SAFETY: write from a live buffer; a pipe holds 64 KiB,
        // what the old one held at most by default.
        let n = unsafe {
            libc::write(
                wr.as_raw_fd(),
                data.as_ptr() as *const libc::c_void,
                data.len(),
            )
        };
        if n != data.len() as isize {
            report.push(format!(
                "fd {}: {} unread pipe bytes could not all be put back",
                r.fd,
                data.len()
            ));
        }
    }
    let src = if write_end { wr } else { rd };
    src.try_clone().map_err(io("dup"))
}

/// A new eventfd for record `r` (non-blocking if `r` was) holding `count`.
fn rebuild_eventfd(r: &FdRec, count: u64) -> Result<OwnedFd> {
    let mut fl = libc::EFD_CLOEXEC;
    if r.flags & libc::O_NONBLOCK != 0 {
        fl |= libc::EFD_NONBLOCK;
    }
    // SAFETY: eventfd returns a new fd or -1.
    let e = owned(cvt(unsafe { libc::eventfd(0, fl) }, "eventfd")?);
    if count > 0 {
        // SAFETY: writes 8 bytes from a local.
        unsafe {
            libc::write(
                e.as_raw_fd(),
                &count as *const u64 as *const libc::c_void,
                8,
            )
        };
    }
    Ok(e)
}

/// Renumbers every source fd of `moves` above every target (and above
/// 2), so the dup2 sequence in the child never overwrites a source it
/// still needs.
fn lift_sources_above_targets(moves: &mut [(OwnedFd, i32)]) -> Result<()> {
    let top = moves.iter().map(|m| m.1).max().unwrap_or(0) + 1;
    for m in moves.iter_mut() {
        // SAFETY: F_DUPFD_CLOEXEC returns a new fd >= top or -1.
        let h = cvt(
            unsafe { libc::fcntl(m.0.as_raw_fd(), libc::F_DUPFD_CLOEXEC, top.max(3)) },
            "fcntl(F_DUPFD)",
        )?;
        m.0 = owned(h);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoll_fdinfo_lines_parse() {
        let info = "pos:\t0\nflags:\t02\nmnt_id:\t15\nino:\t1057\n\
tfd:        5 events:       19 data:                5  pos:0 ino:2a sdev:8\n\
tfd:       12 events: 80000001 data:     7f0000000001  pos:0 ino:2b sdev:8\n";
        assert_eq!(
            parse_epoll(info),
            vec![(5, 0x19, 5), (12, 0x8000_0001, 0x7f00_0000_0001)]
        );
        assert!(parse_epoll("tfd: x events: y data: z").is_empty());
    }

    #[test]
    fn a_pipe_and_an_epoll_of_this_process_are_captured_and_rebuilt() {
        let mut pf = [0i32; 2];
        // SAFETY: pipe2/epoll_create1/epoll_ctl/write on fds this test owns.
        unsafe {
            assert_eq!(libc::pipe2(pf.as_mut_ptr(), libc::O_CLOEXEC), 0);
            libc::write(pf[1], b"hello".as_ptr() as *const libc::c_void, 5);
        }
        let (r, w) = (owned(pf[0]), owned(pf[1]));
        // SAFETY: as above.
        let ep = owned(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) });
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 77,
        };
        // SAFETY: as above.
        unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, r.as_raw_fd(), &mut ev) };
        // SAFETY: getpid takes no arguments.
        let pid = unsafe { libc::getpid() };
        let t = capture(pid, &[]).unwrap();
        let find = |fd: i32| t.fds.iter().find(|x| x.fd == fd).unwrap();
        match &find(r.as_raw_fd()).kind {
            FdKind::Pipe {
                data, write_end, ..
            } => {
                assert!(!write_end);
                assert_eq!(data, b"hello");
            }
            k => panic!("read end captured as {k:?}"),
        }
        match &find(ep.as_raw_fd()).kind {
            FdKind::Epoll { entries } => {
                // The kernel reports EPOLLERR|EPOLLHUP, which it always adds.
                let always = (libc::EPOLLERR | libc::EPOLLHUP) as u32;
                let e: Vec<_> = entries
                    .iter()
                    .map(|&(f, ev, d)| (f, ev & !always, d))
                    .collect();
                assert_eq!(e, vec![(r.as_raw_fd(), libc::EPOLLIN as u32, 77)])
            }
            k => panic!("epoll captured as {k:?}"),
        }
        assert!(find(w.as_raw_fd()).cloexec);
        let only: FdTable = FdTable {
            fds: t
                .fds
                .iter()
                .filter(|x| x.fd == r.as_raw_fd() || x.fd == w.as_raw_fd())
                .cloned()
                .collect(),
        };
        let p = prepare(&only).unwrap();
        let rd = &p.moves.iter().find(|m| m.1 == r.as_raw_fd()).unwrap().0;
        let mut buf = [0u8; 8];
        // SAFETY: read into a local buffer.
        let n = unsafe { libc::read(rd.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, 8) };
        assert_eq!(&buf[..n as usize], b"hello");
    }
}
