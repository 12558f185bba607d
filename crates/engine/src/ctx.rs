//! What an engine ([`crate::inp`], [`crate::cow`], [`crate::lsm`]) is
//! handed to create or open itself: the pool, its fixed area, the decoded
//! superblock and the allocator. Its own module so that the engines depend
//! on it, and not on [`crate::store`], which depends on them.

use crate::Superblock;
use ferrite_alloc::PAllocator;
use ferrite_pmem::Region;
use std::sync::Arc;

/// What an engine module is handed to create or open itself.
pub struct EngineCtx {
    /// The whole pool, header included, so that region offsets *are* pool
    /// offsets (the allocator's offsets index it directly).
    pub pool: Region,
    /// The engine's fixed area (after the superblock), as pool offsets
    /// `[area_off, area_off + area_len)`.
    pub area_off: u64,
    /// Bytes of the fixed area.
    pub area_len: u64,
    /// The store's superblock.
    pub sb: Superblock,
    /// The allocator the engine allocates from.
    pub alloc: Arc<dyn PAllocator>,
}
