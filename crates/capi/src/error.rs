//! Error codes, the per-thread last error message, and the guard every
//! exported function runs its body in (no panic crosses the boundary).

use ferrite_engine::EngineError;
use ferrite_pmem::PoolError;
use std::cell::RefCell;
use std::ffi::{CString, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Success.
pub const FERRITE_OK: c_int = 0;
/// `ferrite_*_get`: the key is absent; `ferrite_store_delete`: there was
/// nothing to delete. Not an error: `ferrite_last_error` is not set.
pub const FERRITE_NOT_FOUND: c_int = 1;
/// `ferrite_iter_next`: the scan is over. Not an error.
pub const FERRITE_END: c_int = 2;
/// A null pointer where one is not allowed, an option string or path that
/// does not parse, an option the store refuses (wrong engine, sessions).
pub const FERRITE_ERR_INVALID: c_int = -1;
/// The store handle was closed with `ferrite_store_close`.
pub const FERRITE_ERR_CLOSED: c_int = -2;
/// A key is empty or longer than 1024 bytes.
pub const FERRITE_ERR_KEY_SIZE: c_int = -3;
/// A value is longer than 1 MiB.
pub const FERRITE_ERR_VALUE_SIZE: c_int = -4;
/// A batch is larger than the engine commits at once (nothing applied).
pub const FERRITE_ERR_BATCH_TOO_LARGE: c_int = -5;
/// The pool is full (its size is fixed at create).
pub const FERRITE_ERR_FULL: c_int = -6;
/// The pool file could not be created, opened, read, mapped or closed.
pub const FERRITE_ERR_IO: c_int = -7;
/// The file is not a Ferrite pool, or the pool holds no store (or one of
/// a format version this build does not read).
pub const FERRITE_ERR_NOT_A_STORE: c_int = -8;
/// The store is corrupt (a checksum or structure check failed); the
/// message says where. `ferrite_pool_check` lists every finding.
pub const FERRITE_ERR_CORRUPT: c_int = -9;
/// The pool file is open elsewhere (locked), every session is taken, or a
/// write would wait for a snapshot of the same handle (InP, LSM).
pub const FERRITE_ERR_BUSY: c_int = -10;
/// The store's allocator refused an operation or its heap.
pub const FERRITE_ERR_ALLOC: c_int = -11;
/// A panic inside the library was caught at the boundary: a bug in
/// Ferrite. The store may still be used; please report the message.
pub const FERRITE_ERR_PANIC: c_int = -12;

/// Everything an exported function can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CapiError {
    /// The store's own error.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A null pointer where one is not allowed.
    #[error("{0} is a null pointer")]
    Null(&'static str),
    /// An argument that does not parse or is out of range.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The store was closed.
    #[error("the store is closed")]
    Closed,
    /// The operation would wait for something the caller holds.
    #[error("{0}")]
    Busy(String),
    /// A file could not be read (`ferrite_pool_check`).
    #[error("{0}")]
    Io(String),
    /// A panic, caught at the boundary.
    #[error("internal error (panic caught at the C boundary): {0}")]
    Panic(String),
}

impl CapiError {
    /// The `FERRITE_ERR_*` code of this error.
    pub fn code(&self) -> c_int {
        match self {
            CapiError::Null(_) | CapiError::Invalid(_) => FERRITE_ERR_INVALID,
            CapiError::Closed => FERRITE_ERR_CLOSED,
            CapiError::Busy(_) => FERRITE_ERR_BUSY,
            CapiError::Io(_) => FERRITE_ERR_IO,
            CapiError::Panic(_) => FERRITE_ERR_PANIC,
            CapiError::Engine(e) => match e {
                EngineError::KeySize { .. } => FERRITE_ERR_KEY_SIZE,
                EngineError::ValueSize { .. } => FERRITE_ERR_VALUE_SIZE,
                EngineError::BatchTooLarge { .. } => FERRITE_ERR_BATCH_TOO_LARGE,
                EngineError::Full(_) => FERRITE_ERR_FULL,
                EngineError::DamagedValue { .. }
                | EngineError::Checksum { .. }
                | EngineError::Corrupt(_) => FERRITE_ERR_CORRUPT,
                EngineError::TooManySessions { .. } => FERRITE_ERR_BUSY,
                EngineError::Alloc(_) => FERRITE_ERR_ALLOC,
                EngineError::NotAStore | EngineError::UnsupportedVersion { .. } => {
                    FERRITE_ERR_NOT_A_STORE
                }
                EngineError::WrongEngine { .. } | EngineError::BadOption(_) => FERRITE_ERR_INVALID,
                EngineError::Pool(p) => match p {
                    PoolError::NotAPool { .. }
                    | PoolError::WrongLayout { .. }
                    | PoolError::UnsupportedVersion { .. } => FERRITE_ERR_NOT_A_STORE,
                    PoolError::Checksum { .. }
                    | PoolError::Corrupt { .. }
                    | PoolError::Truncated { .. } => FERRITE_ERR_CORRUPT,
                    PoolError::Locked { .. } => FERRITE_ERR_BUSY,
                    PoolError::OutOfSpace { .. } => FERRITE_ERR_FULL,
                    PoolError::TooSmall { .. }
                    | PoolError::BadLayoutName(_)
                    | PoolError::Config(_) => FERRITE_ERR_INVALID,
                    _ => FERRITE_ERR_IO,
                },
                // EngineError is not exhaustive in spirit: anything new is
                // reported, never hidden.
                #[allow(unreachable_patterns)]
                _ => FERRITE_ERR_IO,
            },
        }
    }
}

/// A result whose error is [`CapiError`].
pub type Result<T, E = CapiError> = std::result::Result<T, E>;

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `msg` as this thread's last error message.
pub fn set_last_error(msg: &str) {
    // Interior NULs would end the C string early: show them instead.
    let c = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

/// This thread's last error message (a pointer into thread-local storage,
/// valid until this thread's next failing call).
pub fn last_error_ptr() -> *const std::ffi::c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".into()
    }
}

/// Runs `f`, turning its error (or a panic) into a negative code and this
/// thread's last error message.
pub fn guard(f: impl FnOnce() -> Result<c_int>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => {
            set_last_error(&e.to_string());
            e.code()
        }
        Err(p) => {
            let e = CapiError::Panic(panic_message(&*p));
            set_last_error(&e.to_string());
            e.code()
        }
    }
}
