//! `ferrite-wpp`: whole-process persistence in user space (P1 ch4, Zhuque,
//! without its kernel patch and modified libc).
//!
//! An unmodified, dynamically linked program runs under `ferrite run`
//! with the runtime `libferrite_wpp_rt.so` preloaded (crate
//! `ferrite-wpp-rt`). Every byte of its writable memory lives in files of a
//! state directory, mapped shared at the addresses the program uses; the
//! tables that describe the process live in a Ferrite pool there
//! ([`format`]). A failure stops every thread at the instruction it was
//! running, with its registers saved on its own (persistent) stack, and
//! kills the process; `--resume` rebuilds the address space, the file
//! descriptors, the signal handlers and the threads, and every thread
//! continues where it stopped.
//!
//! - [`format`]: the process context's on-media format;
//! - [`maps`]: mapping-table edits (shared with the runtime);
//! - [`fds`]: the file-descriptor table, saved at a failure and rebuilt;
//! - [`supervisor`]: start, fail, resume (what `ferrite run` calls).
//!
//! Limits are written in `docs/wpp.md` and in [`supervisor`].

pub mod fds;
pub mod format;
pub mod maps;
pub mod supervisor;

/// Environment variable naming the state directory (set by the supervisor).
pub const ENV_STATE: &str = "FERRITE_WPP_STATE";
/// `start` or `resume`.
pub const ENV_MODE: &str = "FERRITE_WPP_MODE";
/// Comma-separated fds to mark close-on-exec after a resume.
pub const ENV_CLOEXEC: &str = "FERRITE_WPP_CLOEXEC";
/// File name of the runtime library.
pub const RUNTIME_LIB: &str = "libferrite_wpp_rt.so";

/// The runtime library near a build's executables: in `dir` (where
/// `cargo build -p ferrite-wpp-rt` puts it), in `dir/deps` (where it lands
/// when built as a dependency of the `ferrite` command), or in `dir/..`
/// (`dir` being a test binary's `deps`).
pub fn find_runtime(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    [
        dir.join(RUNTIME_LIB),
        dir.join("deps").join(RUNTIME_LIB),
        dir.join("..").join(RUNTIME_LIB),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// The signal that stops a thread at a failure: the third-highest
/// real-time signal (glibc keeps the lowest ones for itself).
pub fn capture_signal() -> i32 {
    libc::SIGRTMAX() - 2
}

/// Errors of the supervisor.
#[derive(Debug, thiserror::Error)]
pub enum WppError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("whole-process persistence needs x86-64 Linux with glibc")]
    Unsupported,
    #[error(
        "runtime library {0} not found (build it with `cargo build --release -p ferrite-wpp-rt`, or name it with --lib)"
    )]
    NoRuntime(String),
    #[error(
        "state directory {0} already holds a process (resume it with --resume, or choose another)"
    )]
    StateInUse(String),
    #[error("nothing to resume: the process in {dir} is {state}")]
    NotCaptured { dir: String, state: &'static str },
    #[error("corrupt process context: {0}")]
    Corrupt(String),
    #[error("the program did not load the runtime (statically linked, or setuid?)")]
    RuntimeNotLoaded,
    #[error("{0} thread(s) did not stop within {1} ms (blocking the capture signal?)")]
    ThreadsDidNotStop(u32, u64),
    #[error("the resumed process did not run: {0}")]
    ResumeFailed(String),
}

pub type Result<T, E = WppError> = std::result::Result<T, E>;

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> WppError {
    let what = what.into();
    move |source| WppError::Io { what, source }
}
