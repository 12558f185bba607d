//! `ferrite-wpp-rt`: the whole-process-persistence runtime, a shared
//! library that `ferrite run` preloads into an unmodified program
//! (`LD_PRELOAD`). See [`runtime`] and `ferrite-wpp` (format, supervisor).
//!
//! x86-64 Linux with glibc only; elsewhere the library is empty.

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod runtime;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod sys;
