//! The systems the suite starts: memcached (plain, restartable, under
//! `ferrite run`) and `ferrite serve`, as child processes killed on drop,
//! with their scratch files and the tools they need.

use super::*;

/// A server child process; killed (SIGKILL) and reaped on drop. Its memory
/// file is left alone (the kill test restarts on it): callers remove it.
pub(crate) struct Server {
    pub(super) child: Child,
    pub(crate) addr: SocketAddr,
    log: PathBuf,
    /// `ferrite run`: stopped with SIGUSR1 (an injected failure, which
    /// kills the program it supervises) rather than SIGKILL, which would
    /// orphan the program.
    supervised: bool,
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.supervised {
            // SAFETY: kill sends a signal to our child.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGUSR1) };
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = self.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// How to start one system.
#[derive(Clone, Debug)]
pub(crate) enum System {
    Memcached {
        threads: usize,
        file: Option<PathBuf>,
    },
    /// memcached under whole-process persistence (`ferrite run`), its state
    /// directory `state` (the `wpp` suite).
    MemcachedWpp {
        threads: usize,
        state: PathBuf,
        bin: PathBuf,
    },
    Ferrite {
        store: String,
        threads: usize,
        pool: PathBuf,
        bin: PathBuf,
        group_commit: Option<usize>,
    },
}

impl System {
    pub(crate) fn variant(&self) -> String {
        match self {
            System::MemcachedWpp { .. } => "wpp".into(),
            System::Memcached { file: None, .. } => MEMCACHED.into(),
            System::Memcached { file: Some(_), .. } => MEMCACHED_RESTARTABLE.into(),
            System::Ferrite { store, .. } => format!("ferrite-{store}"),
        }
    }

    /// Starts the system on a free loopback port and waits until it
    /// accepts connections.
    pub(crate) fn start(&self) -> Result<Server, BenchError> {
        let port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let log = unique_path("log");
        let mut cmd;
        match self {
            System::Memcached { threads, file: f } => {
                cmd = Command::new("memcached");
                cmd.args(["-l", "127.0.0.1", "-U", "0", "-c", "4096", "-m", "1024"])
                    .args(["-p", &port.to_string(), "-t", &threads.to_string()]);
                if let Some(f) = f {
                    cmd.arg("-e").arg(f);
                }
                if running_as_root() {
                    // memcached refuses to run as root without -u.
                    cmd.args(["-u", "root"]);
                }
            }
            System::MemcachedWpp {
                threads,
                state,
                bin,
            } => {
                let _ = std::fs::remove_dir_all(state);
                cmd = Command::new(bin);
                cmd.arg("run").arg("--state").arg(state).arg("--");
                cmd.args([
                    "memcached",
                    "-l",
                    "127.0.0.1",
                    "-U",
                    "0",
                    "-c",
                    "4096",
                    "-m",
                    "1024",
                ])
                .args(["-p", &port.to_string(), "-t", &threads.to_string()]);
                if running_as_root() {
                    cmd.args(["-u", "root"]);
                }
            }
            System::Ferrite {
                store,
                threads,
                pool,
                bin,
                group_commit,
            } => {
                cmd = Command::new(bin);
                if store == PMDK_STORE {
                    // The pool is in /dev/shm: without forcing, libpmem
                    // would persist it with msync, not flush+fence.
                    cmd.env("PMEM_IS_PMEM_FORCE", "1");
                }
                cmd.arg("serve")
                    .arg("--pool")
                    .arg(pool)
                    .args(["--listen", &addr.to_string(), "--store", store])
                    .args(["--threads", &threads.to_string(), "--memory", "1G"]);
                if let Some(g) = group_commit {
                    cmd.args(["--group-commit", &g.to_string()]);
                }
            }
        }
        let err = std::fs::File::create(&log).map_err(|e| io(&log, e))?;
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(err);
        let child = cmd
            .spawn()
            .map_err(|e| BenchError::Unsupported(format!("starting {}: {e}", self.variant())))?;
        let mut server = Server {
            child,
            addr,
            log,
            supervised: matches!(self, System::MemcachedWpp { .. }),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(server);
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                let msg = std::fs::read_to_string(&server.log).unwrap_or_default();
                return Err(BenchError::Unsupported(format!(
                    "{} exited ({status}) before listening: {}",
                    self.variant(),
                    msg.trim()
                )));
            }
            if Instant::now() > deadline {
                return Err(BenchError::Unsupported(format!(
                    "{} did not listen on {addr} within 60 s",
                    self.variant()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

pub(crate) fn io(path: &Path, source: std::io::Error) -> BenchError {
    BenchError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Whether this process runs as root (memcached then needs `-u`).
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// A loopback port nobody listens on now (the kernel's pick; another
/// process could take it before the server binds, which `start` reports).
fn free_port() -> Result<u16, BenchError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| io(Path::new("127.0.0.1:0"), e))?;
    let port = l
        .local_addr()
        .map_err(|e| io(Path::new("127.0.0.1:0"), e))?;
    Ok(port.port())
}

/// A scratch file (pool, memory file, config) removed when dropped, so a
/// panic or an error leaves nothing in /dev/shm. Declared before the
/// servers using it, so those are killed first.
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A fresh file name in /dev/shm (tmpfs: the memory the pools model).
pub(crate) fn unique_path(ext: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    dir.join(format!(
        "ferrite-bench-server-{}-{}.{ext}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Whether `prog` can be run (found on PATH and executable).
pub(crate) fn have(prog: &str, arg: &str) -> bool {
    Command::new(prog)
        .arg(arg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// The `ferrite` binary to spawn `serve` from: `$FERRITE_BIN`, else this
/// executable when it is `ferrite` (the CLI runs the suites itself), else
/// the newest `ferrite` beside a test binary's `deps/` directory or in
/// `target/{release,debug}`.
pub fn ferrite_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FERRITE_BIN").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let exe = std::env::current_exe().ok()?;
    // Linux names a binary replaced while it runs (rebuilt during a long
    // bench) `PATH (deleted)`; the new build is at PATH.
    let exe = (exe.to_str())
        .and_then(|s| s.strip_suffix(" (deleted)"))
        .map_or(exe.clone(), PathBuf::from);
    if exe.file_stem().and_then(|s| s.to_str()) == Some("ferrite") {
        return Some(exe);
    }
    let profile = exe.parent()?.parent()?;
    let target = profile.parent()?;
    // The newest of those present: a stale build may predate `serve`.
    [
        profile.join("ferrite"),
        target.join("release/ferrite"),
        target.join("debug/ferrite"),
    ]
    .into_iter()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max_by_key(|(t, _)| *t)
    .map(|(_, p)| p)
}

/// Why the suite cannot run here, if it cannot (one line).
pub fn missing_tools() -> Option<String> {
    let mut gone = Vec::new();
    if !have("memcaslap", "-V") {
        gone.push("memcaslap (Debian: libmemcached-tools)");
    }
    if !have("memcached", "-V") {
        gone.push("memcached");
    }
    if ferrite_bin().is_none() {
        gone.push("the ferrite binary (build it, or set FERRITE_BIN)");
    }
    (!gone.is_empty()).then(|| format!("bench server: skipped, not installed: {}", gone.join(", ")))
}
