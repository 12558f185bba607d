//! The supervisor: what `ferrite run` does.
//!
//! - [`start`]: create the state directory and its context pool, launch the
//!   program with the runtime preloaded and address randomisation off (so
//!   the program, its libraries and the vDSO land at the same addresses on
//!   resume), and wait for it to exit or for the failure moment.
//! - a failure: send the capture signal, wait until every registered thread
//!   is parked with its registers saved, read the fd table and the coverage
//!   (writable bytes not backed by a persistent file), kill the process.
//! - [`resume`]: rebuild the fds, relaunch the same command line with the
//!   saved environment; the runtime maps the memory back and continues the
//!   threads.
//!
//! The persistence domain is the state directory's: a mapped file on
//! `/dev/shm` (or any file system) survives a killed process, not a power
//! loss of this machine; on a DAX device it would.

use crate::fds::{self, FdTable};
use crate::format::{self, Context, State, tstate};
use crate::{ENV_CLOEXEC, ENV_MODE, ENV_STATE, Result, WppError, io};
use serde::{Deserialize, Serialize};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The command line and environment of the first run (stored in the pool).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Launch {
    pub argv: Vec<Vec<u8>>,
    pub env: Vec<(Vec<u8>, Vec<u8>)>,
    pub cwd: Vec<u8>,
}

/// How a run is supervised.
#[derive(Clone, Debug)]
pub struct Options {
    pub state: PathBuf,
    /// The runtime library.
    pub lib: PathBuf,
    /// Inject a failure this long after the (re)start.
    pub fail_after: Option<Duration>,
    /// Inject a failure when this becomes true (a signal to the supervisor).
    pub trigger: Option<Arc<AtomicBool>>,
    /// First run only: the program's stdin and stdout (default: inherited).
    /// Regular files come back at their offsets on resume.
    pub stdin: Option<PathBuf>,
    pub stdout: Option<PathBuf>,
    /// First run only: extra environment for the program.
    pub env: Vec<(String, String)>,
}

/// What a failure left behind.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    /// Time from (re)start to the capture signal.
    pub after: Duration,
    /// Threads stopped and saved.
    pub threads: u32,
    /// Capture signal to the last thread parked.
    pub capture: Duration,
    /// Writable bytes not persistent at the failure (must be 0).
    pub gap_bytes: u64,
    /// Writable bytes in persistent files.
    pub persistent_bytes: u64,
    /// Writable bytes of the runtime itself (re-created by a resume).
    pub runtime_bytes: u64,
    /// The non-persistent writable ranges, if any (for the error message).
    pub gaps: Vec<String>,
    pub fds: usize,
    /// The program had a SIGPWR handler (its failure handler) installed:
    /// it runs first on resume.
    pub failure_handler: bool,
    /// The last resume's SIGPWR was still pending for the main thread (it
    /// had SIGPWR blocked since, inside the handler of the resume before):
    /// that handler run had not begun, and it becomes one with the next
    /// resume's, because a standard signal does not queue twice.
    pub failure_handler_merged: bool,
}

#[derive(Debug)]
pub enum Outcome {
    /// The program ended by itself (exit code, or the signal that ended it).
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
    /// A failure was injected; `--resume` continues.
    Failed(Failure),
}

/// What a resume rebuilt.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Resumed {
    /// From spawn to every thread running again.
    pub restart: Duration,
    /// Persistent bytes mapped back.
    pub bytes: u64,
    /// Fds that could not be rebuilt as they were.
    pub report: Vec<String>,
}

/// The pool file mapped into the supervisor.
struct CtxFile {
    ptr: *mut Context,
    len: usize,
}

impl CtxFile {
    fn open(dir: &Path) -> Result<CtxFile> {
        let path = dir.join("context.pool");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io(format!("opening {}", path.display())))?;
        let len = f.metadata().map_err(io("stat context.pool"))?.len();
        if len < format::POOL_SIZE {
            return Err(WppError::Corrupt(format!(
                "context.pool is {len} bytes, expected {}",
                format::POOL_SIZE
            )));
        }
        ferrite_pmem::Pool::inspect(&path)
            .map_err(|e| WppError::Corrupt(format!("context.pool: {e}")))
            .and_then(|(h, _)| {
                if h.layout == format::LAYOUT {
                    Ok(())
                } else {
                    Err(WppError::Corrupt(format!(
                        "context.pool has layout {:?}",
                        h.layout
                    )))
                }
            })?;
        // SAFETY: maps the whole file shared; the mapping lives as long as
        // CtxFile and is unmapped in Drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                format::POOL_SIZE as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io("mapping context.pool")(std::io::Error::last_os_error()));
        }
        let c = CtxFile {
            // SAFETY: the context sits at CONTEXT_OFF inside the mapping.
            ptr: unsafe { (p as *mut u8).add(format::CONTEXT_OFF as usize) } as *mut Context,
            len: format::POOL_SIZE as usize,
        };
        c.get().check().map_err(|e| WppError::Corrupt(e.into()))?;
        Ok(c)
    }

    fn get(&self) -> &Context {
        // SAFETY: the mapping is live and large enough; every bit pattern is
        // a valid Context (integers and atomics), so a damaged file cannot
        // make this reference invalid.
        unsafe { &*self.ptr }
    }

    #[allow(clippy::mut_from_ref)]
    fn get_mut(&self) -> &mut Context {
        // SAFETY: as get; the supervisor writes only fields the runtime does
        // not touch at that moment (the process is stopped or dead).
        unsafe { &mut *self.ptr }
    }
}

impl Drop for CtxFile {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what open mapped.
        unsafe {
            libc::munmap(
                (self.ptr as *mut u8).sub(format::CONTEXT_OFF as usize) as *mut libc::c_void,
                self.len,
            )
        };
    }
}

fn check_platform() -> Result<()> {
    if cfg!(all(
        target_os = "linux",
        target_arch = "x86_64",
        target_env = "gnu"
    )) {
        Ok(())
    } else {
        Err(WppError::Unsupported)
    }
}

/// The state directory's context, if any: its state and counters.
pub fn status(dir: &Path) -> Result<(State, u32, u32)> {
    let c = CtxFile::open(dir)?;
    let ctx = c.get();
    Ok((
        ctx.state()
            .ok_or_else(|| WppError::Corrupt("unknown state".into()))?,
        ctx.failures,
        ctx.resumes,
    ))
}

/// Starts `argv` under whole-process persistence in a new state directory.
pub fn start(opts: &Options, argv: &[std::ffi::OsString]) -> Result<Outcome> {
    check_platform()?;
    if argv.is_empty() {
        return Err(WppError::Corrupt("no program to run".into()));
    }
    if !opts.lib.is_file() {
        return Err(WppError::NoRuntime(opts.lib.display().to_string()));
    }
    let dir = &opts.state;
    if dir.join("context.pool").exists() {
        if let Ok((s, ..)) = status(dir)
            && s != State::Exited
        {
            return Err(WppError::StateInUse(dir.display().to_string()));
        }
        // A finished process's directory is reused: clear it.
        for e in std::fs::read_dir(dir).map_err(io("reading the state directory"))? {
            let e = e.map_err(io("reading the state directory"))?;
            let _ = std::fs::remove_file(e.path());
        }
    }
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let dir = dir
        .canonicalize()
        .map_err(io("resolving the state directory"))?;
    let pool_path = dir.join("context.pool");
    let pool = ferrite_pmem::Pool::create(
        &pool_path,
        &ferrite_pmem::PoolOptions::new(format::LAYOUT, format::POOL_SIZE)
            .domain(ferrite_pmem::Domain::Eadr),
    )
    .map_err(|e| WppError::Corrupt(format!("creating context.pool: {e}")))?;
    pool.close()
        .map_err(|e| WppError::Corrupt(format!("closing context.pool: {e}")))?;
    let lib = opts
        .lib
        .canonicalize()
        .map_err(io("resolving the runtime library"))?;
    let mut env: Vec<(Vec<u8>, Vec<u8>)> = std::env::vars_os()
        .filter(|(k, _)| {
            let k = k.as_bytes();
            k != b"LD_PRELOAD"
                && k != ENV_STATE.as_bytes()
                && k != ENV_MODE.as_bytes()
                && k != b"GLIBC_TUNABLES"
        })
        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
    env.push((b"LD_PRELOAD".to_vec(), lib.as_os_str().as_bytes().to_vec()));
    env.push((
        ENV_STATE.as_bytes().to_vec(),
        dir.as_os_str().as_bytes().to_vec(),
    ));
    // rseq areas would be written by the kernel behind the program's back
    // and are not re-registered on resume: keep glibc from using them.
    env.push((b"GLIBC_TUNABLES".to_vec(), b"glibc.pthread.rseq=0".to_vec()));
    for (k, v) in &opts.env {
        env.push((k.as_bytes().to_vec(), v.as_bytes().to_vec()));
    }
    let launch = Launch {
        argv: argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
        env,
        cwd: std::env::current_dir()
            .map_err(io("current directory"))?
            .as_os_str()
            .as_bytes()
            .to_vec(),
    };
    let ctx = CtxFile::open_fresh(&dir)?;
    let json = serde_json::to_vec(&launch).map_err(|e| WppError::Corrupt(e.to_string()))?;
    if !ctx.get_mut().launch.set(&json) {
        return Err(WppError::Corrupt(
            "command line and environment larger than 256 KiB".into(),
        ));
    }
    let mut stdio = (None, None);
    if let Some(p) = &opts.stdin {
        stdio.0 = Some(std::fs::File::open(p).map_err(io(format!("opening {}", p.display())))?);
    }
    if let Some(p) = &opts.stdout {
        stdio.1 = Some(std::fs::File::create(p).map_err(io(format!("creating {}", p.display())))?);
    }
    let child = spawn(&launch, b"start", &fds::Prepared::default(), stdio)?;
    supervise(&ctx, child, opts, Instant::now())
}

impl CtxFile {
    /// A new pool's context: stamp the magic (the runtime refuses a pool
    /// without it).
    fn open_fresh(dir: &Path) -> Result<CtxFile> {
        let path = dir.join("context.pool");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io("opening context.pool"))?;
        let mut magic = [0u8; 8];
        magic.copy_from_slice(&format::MAGIC.to_le_bytes());
        std::os::unix::fs::FileExt::write_all_at(&f, &magic, format::CONTEXT_OFF)
            .map_err(io("writing context.pool"))?;
        CtxFile::open(dir)
    }
}

type Stdio = (Option<std::fs::File>, Option<std::fs::File>);

fn spawn(launch: &Launch, mode: &[u8], fds: &fds::Prepared, stdio: Stdio) -> Result<Child> {
    use std::ffi::OsStr;
    let argv0 = OsStr::from_bytes(&launch.argv[0]);
    let mut cmd = Command::new(argv0);
    cmd.args(launch.argv[1..].iter().map(|a| OsStr::from_bytes(a)));
    cmd.env_clear();
    for (k, v) in &launch.env {
        cmd.env(OsStr::from_bytes(k), OsStr::from_bytes(v));
    }
    cmd.env(ENV_MODE, OsStr::from_bytes(mode));
    if !fds.cloexec.is_empty() {
        let list: Vec<String> = fds.cloexec.iter().map(|f| f.to_string()).collect();
        cmd.env(ENV_CLOEXEC, list.join(","));
    }
    cmd.current_dir(OsStr::from_bytes(&launch.cwd));
    if let Some(f) = stdio.0 {
        cmd.stdin(f);
    }
    if let Some(f) = stdio.1 {
        cmd.stdout(f);
    }
    let moves: Vec<(i32, i32)> = fds.moves.iter().map(|(s, t)| (s.as_raw_fd(), *t)).collect();
    let adds = fds.epoll_adds.clone();
    // Keep the low fd numbers the child's fds will take occupied here, so
    // the spawn machinery's own fds are numbered above them.
    let top = moves.iter().map(|m| m.1).max().unwrap_or(-1);
    let mut fillers = vec![];
    for n in 3..=top {
        // SAFETY: fcntl(F_GETFD) only probes whether n is open.
        if unsafe { libc::fcntl(n, libc::F_GETFD) } < 0 {
            let f = std::fs::File::open("/dev/null").map_err(io("opening /dev/null"))?;
            fillers.push(f);
        }
    }
    // SAFETY: the closure runs in the child between fork and exec and makes
    // only async-signal-safe system calls (personality, dup2, epoll_ctl).
    unsafe {
        cmd.pre_exec(move || {
            if libc::personality(libc::ADDR_NO_RANDOMIZE as libc::c_ulong) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            for &(src, dst) in &moves {
                if libc::dup2(src, dst) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for &(ep, tfd, events, data) in &adds {
                let mut ev = libc::epoll_event { events, u64: data };
                libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, tfd, &mut ev);
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(io(format!(
        "starting {}",
        String::from_utf8_lossy(&launch.argv[0])
    )));
    drop(fillers);
    child
}

fn supervise(ctx: &CtxFile, mut child: Child, opts: &Options, t0: Instant) -> Result<Outcome> {
    let fail_at = opts.fail_after.map(|d| t0 + d);
    loop {
        if let Some(st) = child.try_wait().map_err(io("waiting for the program"))? {
            return Ok(exited(ctx, st));
        }
        let now = Instant::now();
        let triggered = opts
            .trigger
            .as_ref()
            .is_some_and(|t| t.swap(false, Ordering::AcqRel));
        if triggered || fail_at.is_some_and(|f| now >= f) {
            return fail(ctx, child, now - t0);
        }
        let nap = fail_at
            .map(|f| f.saturating_duration_since(now))
            .unwrap_or(Duration::from_millis(5))
            .min(Duration::from_millis(5));
        std::thread::sleep(nap);
    }
}

fn exited(ctx: &CtxFile, st: std::process::ExitStatus) -> Outcome {
    use std::os::unix::process::ExitStatusExt;
    let c = ctx.get();
    if matches!(c.state(), Some(State::Running)) {
        c.state.store(State::Exited as u32, Ordering::Release);
    }
    Outcome::Exited {
        code: st.code(),
        signal: st.signal(),
    }
}

fn live_threads(c: &Context) -> u32 {
    c.threads
        .iter()
        .filter(|t| {
            let s = t.state.load(Ordering::Acquire);
            s == tstate::LIVE || s == tstate::CAPTURED
        })
        .count() as u32
}

fn fail(ctx: &CtxFile, mut child: Child, after: Duration) -> Result<Outcome> {
    let c = ctx.get();
    let pid = child.id() as i32;
    let t_sig = Instant::now();
    // The runtime may still be starting: wait for it (briefly) to run.
    while c.state() == Some(State::Created) || c.state() == Some(State::Resuming) {
        if let Some(st) = child.try_wait().map_err(io("waiting for the program"))? {
            return Ok(exited(ctx, st));
        }
        if t_sig.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(WppError::RuntimeNotLoaded);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let t_sig = Instant::now();
    // SAFETY: kill sends a signal to our child.
    unsafe { libc::kill(pid, crate::capture_signal()) };
    loop {
        if let Some(st) = child.try_wait().map_err(io("waiting for the program"))? {
            // It ended (by itself, or crashed) before the capture finished.
            return Ok(exited(ctx, st));
        }
        let live = live_threads(c);
        let captured = c.captured.load(Ordering::Acquire);
        // Every kernel thread must be registered and stopped: a thread
        // being born (cloned, not yet registered) registers and stops
        // itself; one that is exiting leaves.
        let tasks = program_tasks(pid, c);
        if captured >= live && live > 0 && tasks <= live {
            break;
        }
        if t_sig.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(WppError::ThreadsDidNotStop(
                tasks.max(live).saturating_sub(captured),
                10_000,
            ));
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    let capture = t_sig.elapsed();
    let threads = c.captured.load(Ordering::Acquire);
    save_pending(pid, ctx.get_mut());
    let table = fds::capture(pid, &[c.dir_fd, c.ctx_fd]);
    let cov = coverage(pid, c);
    let _ = child.kill();
    let _ = child.wait();
    let table = table?;
    let cov = cov?;
    let cm = ctx.get_mut();
    let json = serde_json::to_vec(&table).map_err(|e| WppError::Corrupt(e.to_string()))?;
    if !cm.fds.set(&json) {
        return Err(WppError::Corrupt("fd table larger than 1 MiB".into()));
    }
    cm.gap_bytes = cov.0;
    cm.persistent_bytes = cov.1;
    cm.runtime_bytes = cov.2;
    cm.capture_ns = capture.as_nanos() as u64;
    cm.failures += 1;
    cm.state.store(State::Captured as u32, Ordering::Release);
    let handler = {
        let p = &c.sigs[libc::SIGPWR as usize];
        p.set == 1 && p.handler > 1
    };
    Ok(Outcome::Failed(Failure {
        after,
        threads,
        capture,
        gap_bytes: cov.0,
        persistent_bytes: cov.1,
        runtime_bytes: cov.2,
        gaps: cov.3,
        fds: table.fds.len(),
        failure_handler: handler,
        failure_handler_merged: handler
            && c.threads.iter().any(|t| {
                t.main == 1
                    && t.state.load(Ordering::Acquire) == tstate::CAPTURED
                    && t.pending & (1 << (libc::SIGPWR - 1)) != 0
            }),
    }))
}

/// The process's kernel threads, less its first thread where that one is
/// not a thread of the program: after a resume that gave the main thread
/// its old TID, the process's first thread (TID = PID) stays parked in the
/// runtime, every signal blocked, until the process ends.
fn program_tasks(pid: i32, c: &Context) -> u32 {
    let n = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count() as u32)
        .unwrap_or(0);
    let first_is_program = c.threads.iter().any(|t| {
        let s = t.state.load(Ordering::Acquire);
        (s == tstate::LIVE || s == tstate::CAPTURED) && t.tid.load(Ordering::Relaxed) == pid as u32
    });
    if first_is_program {
        n
    } else {
        n.saturating_sub(1)
    }
}

/// Records the signals pending at the failure, per thread and for the
/// process (from `/proc/PID/task/*/status`), leaving out the capture
/// signal itself. Standard signals come back exactly; a real-time signal
/// queued more than once comes back once, without its value.
fn save_pending(pid: i32, c: &mut Context) {
    let drop_bits = !(1u64 << (crate::capture_signal() - 1));
    let hex = |st: &str, key: &str| {
        st.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return;
    };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|t| t.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(st) = std::fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        c.shared_pending = hex(&st, "ShdPnd:") & drop_bits;
        if let Some(t) = c.threads.iter_mut().find(|t| {
            t.state.load(Ordering::Acquire) == tstate::CAPTURED
                && t.tid.load(Ordering::Relaxed) == tid
        }) {
            t.pending = hex(&st, "SigPnd:") & drop_bits;
        }
    }
}

/// (gap, persistent, runtime, gap ranges): every writable mapping of the
/// stopped process, classified.
fn coverage(pid: i32, c: &Context) -> Result<(u64, u64, u64, Vec<String>)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(io("reading /proc/PID/maps"))?;
    let (mut gap, mut pers, mut rt) = (0u64, 0u64, 0u64);
    let mut gaps = vec![];
    for l in maps.lines() {
        let mut it = l.split_whitespace();
        let (Some(range), Some(perms)) = (it.next(), it.next()) else {
            continue;
        };
        let path = it.nth(3).unwrap_or("");
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) else {
            continue;
        };
        if !perms.contains('w') {
            continue;
        }
        let len = hi - lo;
        let ov = |a: u64, b: u64| lo < b && a < hi;
        if ov(c.lib_lo, c.lib_hi)
            || ov(
                format::CONTEXT_BASE,
                format::CONTEXT_BASE + format::POOL_SIZE,
            )
            || ov(format::PRIVATE_BASE, format::PRIVATE_BASE + (1 << 32))
        {
            rt += len;
        } else if perms.contains('s') && path.starts_with('/') {
            pers += len;
        } else {
            gap += len;
            gaps.push(l.to_string());
        }
    }
    Ok((gap, pers, rt, gaps))
}

/// How long a resumed process may take to rebuild itself and run (a
/// resume takes milliseconds; the limit only keeps a stuck one from
/// hanging the supervisor).
const RESUME_LIMIT: Duration = Duration::from_secs(30);

/// Continues the process saved in `opts.state`.
pub fn resume(opts: &Options) -> Result<(Outcome, Resumed)> {
    check_platform()?;
    let dir = opts
        .state
        .canonicalize()
        .map_err(io(format!("opening {}", opts.state.display())))?;
    let ctx = CtxFile::open(&dir)?;
    let c = ctx.get();
    match c.state() {
        Some(State::Captured) => {}
        Some(s) => {
            return Err(WppError::NotCaptured {
                dir: dir.display().to_string(),
                state: s.name(),
            });
        }
        None => return Err(WppError::Corrupt("unknown state".into())),
    }
    let launch: Launch = c
        .launch
        .get()
        .and_then(|b| serde_json::from_slice(b).ok())
        .ok_or_else(|| WppError::Corrupt("launch record unreadable".into()))?;
    let table: FdTable = c
        .fds
        .get()
        .and_then(|b| serde_json::from_slice(b).ok())
        .ok_or_else(|| WppError::Corrupt("fd table unreadable".into()))?;
    let prepared = fds::prepare(&table)?;
    let bytes = c.persistent_bytes;
    let t0 = Instant::now();
    let mut child = spawn(&launch, b"resume", &prepared, (None, None))?;
    let report = prepared.report.clone();
    drop(prepared);
    // Wait until the runtime says Running (or the child dies trying).
    loop {
        if let Some(st) = child.try_wait().map_err(io("waiting for the program"))? {
            if c.state() == Some(State::Running) || c.state() == Some(State::Exited) {
                let out = exited(&ctx, st);
                return Ok((
                    out,
                    Resumed {
                        restart: t0.elapsed(),
                        bytes,
                        report,
                    },
                ));
            }
            // Leave the context as it was so the resume can be retried.
            c.state.store(State::Captured as u32, Ordering::Release);
            return Err(WppError::ResumeFailed(format!("it ended first ({st})")));
        }
        if c.state() == Some(State::Running) {
            break;
        }
        if t0.elapsed() > RESUME_LIMIT {
            // Stuck before it ran (a runtime that waits for something that
            // will not come): end it and leave the context as it was.
            let _ = child.kill();
            let _ = child.wait();
            c.state.store(State::Captured as u32, Ordering::Release);
            return Err(WppError::ResumeFailed(format!(
                "still rebuilding itself after {} s (killed)",
                RESUME_LIMIT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    let restart = t0.elapsed();
    let mut report = report;
    if c.new_tids > 0 {
        report.push(format!(
            "{} thread(s) came back under a new thread ID (choosing it needs root, and the ID free): \
             a recursive or error-checking mutex held at the failure stays held",
            c.new_tids
        ));
    }
    // --fail-after counts from the moment the program runs again.
    let out = supervise(&ctx, child, opts, Instant::now())?;
    Ok((
        out,
        Resumed {
            restart,
            bytes,
            report,
        },
    ))
}
