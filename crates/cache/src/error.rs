//! Typed errors of the cache.

use std::io;

/// Everything that can go wrong opening or using a cache.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("pool: {0}")]
    Pool(#[from] ferrite_pmem::PoolError),
    #[error("disk I/O: {0}")]
    Io(#[from] io::Error),
    #[error("not a cache: {0}")]
    NotACache(String),
    #[error("corrupt cache metadata: {0}")]
    Corrupt(String),
    #[error("configuration: {0}")]
    Config(String),
    #[error("disk page {0} is outside the disk ({1} pages)")]
    OutOfRange(u32, u32),
    #[error(
        "every persistent slot is locked or part of a transaction in flight; no slot can be evicted"
    )]
    CacheFull,
    #[error("every session slot ({0}) is in use")]
    NoSession(usize),
    #[error("the disk is full: no free page to allocate")]
    DiskFull,
    #[error("page {0} is not allocated")]
    NotAllocated(u32),
    #[error("page {0} is locked by another session")]
    Busy(u32),
}

pub type Result<T> = std::result::Result<T, CacheError>;
