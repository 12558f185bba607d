//! Typed errors for the PMDK wrappers.

use std::ffi::{CStr, CString, c_char};
use std::io;
use std::path::Path;

use crate::ffi;

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A PMDK call reported failure. `msg` is the library's own
    /// `*_errormsg()` text (or the errno description when that is empty).
    #[error("{call} failed: {msg} (errno {errno})")]
    Pmdk {
        /// The PMDK function that failed, e.g. `"pmemlog_create"`.
        call: &'static str,
        /// `errno` as it was right after the call (0 if PMDK left none).
        errno: i32,
        /// PMDK's description of the failure.
        msg: String,
    },
    /// A path or name handed to PMDK contains a NUL byte.
    #[error("{what} contains a NUL byte")]
    Nul {
        /// Which argument, e.g. `"path"` or `"layout"`.
        what: &'static str,
    },
    /// A buffer has the wrong length for the operation.
    #[error("{what}: buffer is {got} bytes, expected {expected}")]
    Length {
        /// The operation, e.g. `"pmemblk_write"`.
        what: &'static str,
        /// The length the operation needs.
        expected: usize,
        /// The length that was passed.
        got: usize,
    },
    /// An index or byte range lies outside the pool or mapping.
    #[error("{what}: {start}..{end} is outside 0..{limit}")]
    OutOfRange {
        /// The operation, e.g. `"memcpy_persist"`.
        what: &'static str,
        /// First index or offset asked for.
        start: u64,
        /// One past the last index or offset asked for.
        end: u64,
        /// The size of the pool or mapping.
        limit: u64,
    },
    /// A count does not fit the C type PMDK takes.
    #[error("{what}: {value} does not fit PMDK's argument type")]
    TooLarge {
        /// The operation, e.g. `"pmemlog_appendv"`.
        what: &'static str,
        /// The offending count.
        value: u64,
    },
    /// An object id was passed to a pool that did not allocate it (or that
    /// pool is not open in this process).
    #[error("object id does not belong to this pool")]
    ForeignOid,
    /// A structure parameter is outside what the structure supports.
    #[error("{what} is {value}, must be {min}..={max}")]
    Param {
        /// The parameter, e.g. `"txbtree fanout"`.
        what: &'static str,
        /// The value passed.
        value: u64,
        /// Smallest value allowed.
        min: u64,
        /// Largest value allowed.
        max: u64,
    },
    /// The pool has no room for what a transaction allocates (it aborted
    /// with `ENOMEM`, so nothing changed).
    #[error("{what}: the pool is full")]
    Full {
        /// The operation, e.g. `"bytemap batch"`.
        what: &'static str,
    },
    /// A pool does not hold the structure asked for, or the structure
    /// fails its consistency check.
    #[error("{what}")]
    Corrupt {
        /// What is wrong.
        what: String,
    },
}

impl Error {
    /// The `errno` of a failed PMDK call, if this is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Pmdk { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Which PMDK library a failed call belongs to; each keeps its own
/// thread-local error message.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Lib {
    Pmem,
    Log,
    Blk,
    Obj,
}

/// Builds an [`Error::Pmdk`] for `call`, which has just failed on this thread.
///
/// Reads `errno` first, before anything else can overwrite it, then the
/// library's message.
pub(crate) fn last_error(lib: Lib, call: &'static str) -> Error {
    let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
    pmdk_error(lib, call, errno)
}

/// Builds an [`Error::Pmdk`] for `call` with an errno the caller already has
/// (e.g. one returned by the C shim).
pub(crate) fn pmdk_error(lib: Lib, call: &'static str, errno: i32) -> Error {
    // SAFETY: each *_errormsg function takes no arguments and returns a
    // pointer to a thread-local buffer owned by the library (never freed while
    // the library is loaded), or NULL.
    let raw: *const c_char = unsafe {
        match lib {
            Lib::Pmem => ffi::pmem_errormsg(),
            Lib::Log => ffi::pmemlog_errormsg(),
            Lib::Blk => ffi::pmemblk_errormsg(),
            Lib::Obj => ffi::pmemobj_errormsg(),
        }
    };
    let text = if raw.is_null() {
        String::new()
    } else {
        // SAFETY: non-NULL, NUL-terminated per PMDK's documentation, and not
        // modified until the next PMDK call on this thread; we copy it out at
        // once.
        unsafe { CStr::from_ptr(raw) }
            .to_string_lossy()
            .into_owned()
    };
    let msg = if text.is_empty() {
        io::Error::from_raw_os_error(errno).to_string()
    } else {
        text
    };
    Error::Pmdk { call, errno, msg }
}

/// Converts a path for PMDK, which takes NUL-terminated byte strings.
pub(crate) fn c_path(path: &Path) -> Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes()).map_err(|_| Error::Nul { what: "path" })
}

/// Checks that `start..start + len` lies inside `0..limit` and returns the
/// end, so callers can index without overflow.
pub(crate) fn check_range(
    what: &'static str,
    start: usize,
    len: usize,
    limit: usize,
) -> Result<usize> {
    match start.checked_add(len) {
        Some(end) if end <= limit => Ok(end),
        end => Err(Error::OutOfRange {
            what,
            start: start as u64,
            end: end.map_or(u64::MAX, |e| e as u64),
            limit: limit as u64,
        }),
    }
}
