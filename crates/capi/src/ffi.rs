//! The raw-pointer helpers every exported function uses: the only place
//! (with the `unsafe extern "C"` entry points in `lib.rs`) that touches C
//! memory.

use crate::error::{CapiError, Result};
use std::ffi::{CStr, c_char, c_void};

/// `len` bytes at `p`; null is allowed only for zero bytes.
///
/// # Safety
/// `p` is null or points to `len` readable bytes that stay valid and
/// unchanged for `'a`.
pub unsafe fn bytes<'a>(p: *const c_void, len: usize, what: &'static str) -> Result<&'a [u8]> {
    if p.is_null() {
        return if len == 0 {
            Ok(&[])
        } else {
            Err(CapiError::Null(what))
        };
    }
    // SAFETY: non-null, and the caller promises `len` readable bytes for 'a.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// An optional bound: null means none.
///
/// # Safety
/// As [`bytes`].
pub unsafe fn opt_bytes<'a>(p: *const c_void, len: usize) -> Option<&'a [u8]> {
    if p.is_null() {
        None
    } else {
        // SAFETY: non-null, and the caller promises `len` readable bytes.
        Some(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
    }
}

/// A NUL-terminated UTF-8 string; null is `None`.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string valid for `'a`.
pub unsafe fn opt_str<'a>(p: *const c_char, what: &'static str) -> Result<Option<&'a str>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null and NUL-terminated, as the caller promises.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .map(Some)
        .map_err(|_| CapiError::Invalid(format!("{what} is not UTF-8")))
}

/// Writes `v` through the out-pointer `p`.
///
/// # Safety
/// `p` is null (an error) or valid for a write of `T`.
pub unsafe fn put_out<T>(p: *mut T, v: T, what: &'static str) -> Result<()> {
    if p.is_null() {
        return Err(CapiError::Null(what));
    }
    // SAFETY: non-null and writable, as the caller promises.
    unsafe { p.write(v) };
    Ok(())
}

/// Checks that an out-pointer is not null (before doing the work).
pub fn need<T>(p: *mut T, what: &'static str) -> Result<()> {
    if p.is_null() {
        Err(CapiError::Null(what))
    } else {
        Ok(())
    }
}

/// A copy of `b` in memory from `malloc` (at least one byte, so a
/// zero-length value is still a non-null pointer), for `ferrite_free`.
pub fn malloc_copy(b: &[u8]) -> Result<*mut c_void> {
    // SAFETY: malloc has no preconditions; the result is checked for null.
    let p = unsafe { libc::malloc(b.len().max(1)) };
    if p.is_null() {
        return Err(CapiError::Io(format!("out of memory ({} bytes)", b.len())));
    }
    // SAFETY: `p` is a fresh allocation of at least `b.len()` bytes, which
    // cannot overlap `b`.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), p.cast::<u8>(), b.len()) };
    Ok(p)
}

/// A NUL-terminated copy of `s` from `malloc`, for `ferrite_free`.
pub fn malloc_str(s: &str) -> Result<*mut c_char> {
    let mut v = s.replace('\0', "\\0").into_bytes();
    v.push(0);
    Ok(malloc_copy(&v)?.cast())
}

/// Frees memory the library handed out.
///
/// # Safety
/// `p` is null or came from [`malloc_copy`] / [`malloc_str`] and was not freed.
pub unsafe fn free(p: *mut c_void) {
    // SAFETY: `p` is null or a live malloc'd block, as the caller promises.
    unsafe { libc::free(p) }
}

/// Takes back a `Box` handed to C with [`Box::into_raw`].
///
/// # Safety
/// `p` is null or came from `Box::into_raw` of a `T` and was not freed.
pub unsafe fn unbox<T>(p: *mut T) -> Option<Box<T>> {
    if p.is_null() {
        None
    } else {
        // SAFETY: as the caller promises, `p` is a live Box of T.
        Some(unsafe { Box::from_raw(p) })
    }
}

/// Borrows a handle handed to C with [`Box::into_raw`].
///
/// # Safety
/// `p` is null or a live handle of type `T` (not yet freed) for `'a`.
pub unsafe fn handle<'a, T>(p: *const T, what: &'static str) -> Result<&'a T> {
    // SAFETY: null or live, as the caller promises.
    unsafe { p.as_ref() }.ok_or(CapiError::Null(what))
}
