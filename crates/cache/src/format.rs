//! The bytes the cache keeps in persistent memory, byte by byte.
//!
//! The cache lives in a [`Region`](ferrite_pmem::Region) of a Ferrite pool
//! (in practice the pool's whole data area). All integers little-endian.
//!
//! ```text
//! offset 0, 64 bytes: superblock
//!    0.. 8  magic "FERCACHE"
//!    8..12  format version (u32) = 1
//!   12..16  page size in bytes (u32) = 4096
//!   16..20  persistent slots S (u32), 1 ..= 2^24
//!   20..24  transaction slots T (u32), 1 ..= 255 (one per session)
//!   24..28  disk pages D (u32): size of the disk file in pages
//!   28..32  bitmap pages B (u32): pages 0..B of the disk hold the allocation bitmap
//!   32..36  CRC32C of bytes 0..32
//!   36..64  zero
//! offset 64: entry table, S words of 8 bytes (one per slot), see [`Entry`]
//! then, aligned to 64: transaction table, T lines of 64 bytes; word 0 of
//!   line t is session t's transaction word (see [`TxWord`]), the rest zero
//! then, aligned to the page size: S page slots of 4096 bytes
//! ```
//!
//! Every mutable word is 8 bytes, updated by one failure-atomic store, and
//! carries a 16-bit check so a damaged table is a typed error, not a wrong
//! answer. The superblock is written once, at format.
//!
//! # Entry word (slot `s`)
//!
//! `0` = FREE. Otherwise
//!
//! ```text
//! bits  0..32  disk page number held by the slot
//! bits 32..36  state: 1 CLEAN (equals the disk), 2 DIRTY (committed, newer
//!              than the disk), 3 UNCOMMITTED (a transaction's copy)
//! bits 36..44  session (transaction slot) of an UNCOMMITTED copy, else 0
//! bits 44..48  zero
//! bits 48..64  low 16 bits of CRC32C over bytes 0..6 of the word
//! ```
//!
//! # Transaction word (session `t`)
//!
//! `0` = no transaction past its commit point. Otherwise COMMITTED:
//!
//! ```text
//! bits  0..8   0xC7 (the COMMITTED tag)
//! bits  8..48  commit sequence number of the session (diagnostics)
//! bits 48..64  low 16 bits of CRC32C over bytes 0..6 of the word
//! ```
//!
//! # Invariants
//!
//! - I1: at most one CLEAN or DIRTY slot per disk page.
//! - An UNCOMMITTED slot of session `t` is only ever durable together with
//!   its page content before `t`'s word says COMMITTED; while the word is
//!   0 recovery frees it (roll back); once COMMITTED, recovery frees every
//!   CLEAN/DIRTY slot of the same page, fences, then marks the copy DIRTY
//!   (roll forward, two fenced phases so no image holds two committed
//!   slots of one page without the COMMITTED word to tell them apart).
//! - A transaction word goes back to 0 (fenced) before the session's next
//!   UNCOMMITTED entry is stored.
//! - A slot's content is durable before an entry naming it CLEAN or DIRTY
//!   is stored (page-in, migration), and a DIRTY page is written to the
//!   disk and synced before its entry goes FREE (eviction).

use crate::error::{CacheError, Result};

pub const MAGIC: &[u8; 8] = b"FERCACHE";
pub const VERSION: u32 = 1;
/// Page size of the cache and the disk.
pub const PAGE: usize = 4096;
pub const SUPERBLOCK: usize = 64;
pub const ENTRY_TABLE: usize = 64;
pub const TX_LINE: usize = 64;
pub const MAX_SESSIONS: usize = 255;
pub const MAX_SLOTS: usize = 1 << 24;
/// Pages one bitmap page covers.
pub const BITS_PER_PAGE: u32 = (PAGE * 8) as u32;

fn check16(word48: u64) -> u64 {
    (crc32c::crc32c(&word48.to_le_bytes()[..6]) & 0xffff) as u64
}

/// State of an occupied slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotState {
    Clean,
    Dirty,
    Uncommitted(u8),
}

/// A decoded entry word; `None` is FREE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub page: u32,
    pub state: SlotState,
}

impl Entry {
    pub fn encode(e: Option<Entry>) -> u64 {
        let Some(e) = e else { return 0 };
        let (st, tx) = match e.state {
            SlotState::Clean => (1u64, 0u64),
            SlotState::Dirty => (2, 0),
            SlotState::Uncommitted(t) => (3, t as u64),
        };
        let w = e.page as u64 | (st << 32) | (tx << 36);
        w | (check16(w) << 48)
    }

    pub fn decode(w: u64, slot: usize) -> Result<Option<Entry>> {
        if w == 0 {
            return Ok(None);
        }
        let low = w & ((1 << 48) - 1);
        if check16(low) != w >> 48 || (w >> 44) & 0xf != 0 {
            return Err(CacheError::Corrupt(format!(
                "entry of slot {slot} fails its check ({w:#018x})"
            )));
        }
        let page = w as u32;
        let tx = ((w >> 36) & 0xff) as u8;
        let state = match (w >> 32) & 0xf {
            1 if tx == 0 => SlotState::Clean,
            2 if tx == 0 => SlotState::Dirty,
            3 => SlotState::Uncommitted(tx),
            s => {
                return Err(CacheError::Corrupt(format!(
                    "entry of slot {slot} has state {s} (tx {tx})"
                )));
            }
        };
        Ok(Some(Entry { page, state }))
    }
}

/// A decoded transaction word.
pub struct TxWord;

impl TxWord {
    pub const TAG: u64 = 0xC7;

    pub fn committed(seq: u64) -> u64 {
        let w = Self::TAG | ((seq & ((1 << 40) - 1)) << 8);
        w | (check16(w) << 48)
    }

    /// `Ok(true)` when the word says COMMITTED.
    pub fn decode(w: u64, t: usize) -> Result<bool> {
        if w == 0 {
            return Ok(false);
        }
        let low = w & ((1 << 48) - 1);
        if w & 0xff != Self::TAG || check16(low) != w >> 48 {
            return Err(CacheError::Corrupt(format!(
                "transaction word of session {t} fails its check ({w:#018x})"
            )));
        }
        Ok(true)
    }
}

/// Geometry of a cache, from the superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub slots: u32,
    pub sessions: u32,
    pub disk_pages: u32,
    pub bitmap_pages: u32,
}

impl Geometry {
    pub fn new(slots: u32, sessions: u32, disk_pages: u32) -> Result<Geometry> {
        if slots == 0 || slots as usize > MAX_SLOTS {
            return Err(CacheError::Config(format!(
                "{slots} slots (1 ..= {MAX_SLOTS})"
            )));
        }
        if sessions == 0 || sessions as usize > MAX_SESSIONS {
            return Err(CacheError::Config(format!(
                "{sessions} sessions (1 ..= {MAX_SESSIONS})"
            )));
        }
        let bitmap_pages = disk_pages.div_ceil(BITS_PER_PAGE);
        if disk_pages <= bitmap_pages {
            return Err(CacheError::Config(format!(
                "a disk of {disk_pages} pages has no room beside its bitmap"
            )));
        }
        Ok(Geometry {
            slots,
            sessions,
            disk_pages,
            bitmap_pages,
        })
    }

    pub fn tx_table(&self) -> usize {
        (ENTRY_TABLE + 8 * self.slots as usize).next_multiple_of(64)
    }

    pub fn slot_base(&self) -> usize {
        (self.tx_table() + TX_LINE * self.sessions as usize).next_multiple_of(PAGE)
    }

    /// Bytes of persistent memory the cache needs.
    pub fn bytes(&self) -> usize {
        self.slot_base() + PAGE * self.slots as usize
    }

    pub fn entry_off(&self, slot: u32) -> usize {
        ENTRY_TABLE + 8 * slot as usize
    }

    pub fn tx_off(&self, t: usize) -> usize {
        self.tx_table() + TX_LINE * t
    }

    pub fn slot_off(&self, slot: u32) -> usize {
        self.slot_base() + PAGE * slot as usize
    }

    pub fn encode_superblock(&self) -> [u8; SUPERBLOCK] {
        let mut b = [0u8; SUPERBLOCK];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(PAGE as u32).to_le_bytes());
        b[16..20].copy_from_slice(&self.slots.to_le_bytes());
        b[20..24].copy_from_slice(&self.sessions.to_le_bytes());
        b[24..28].copy_from_slice(&self.disk_pages.to_le_bytes());
        b[28..32].copy_from_slice(&self.bitmap_pages.to_le_bytes());
        let c = crc32c::crc32c(&b[0..32]);
        b[32..36].copy_from_slice(&c.to_le_bytes());
        b
    }

    pub fn decode_superblock(b: &[u8], region_len: usize) -> Result<Geometry> {
        if b.len() < SUPERBLOCK {
            return Err(CacheError::NotACache(
                "region shorter than a superblock".into(),
            ));
        }
        if &b[0..8] != MAGIC {
            return Err(CacheError::NotACache("no FERCACHE magic".into()));
        }
        let u = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        if u(32) != crc32c::crc32c(&b[0..32]) {
            return Err(CacheError::Corrupt("superblock checksum mismatch".into()));
        }
        if u(8) != VERSION {
            return Err(CacheError::NotACache(format!("format version {}", u(8))));
        }
        if u(12) as usize != PAGE {
            return Err(CacheError::Corrupt(format!("page size {}", u(12))));
        }
        let g = Geometry::new(u(16), u(20), u(24))?;
        if g.bitmap_pages != u(28) {
            return Err(CacheError::Corrupt("bitmap page count".into()));
        }
        if g.bytes() > region_len {
            return Err(CacheError::Corrupt(format!(
                "cache needs {} bytes, region has {region_len}",
                g.bytes()
            )));
        }
        Ok(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_damage_is_typed() {
        for e in [
            Entry {
                page: 7,
                state: SlotState::Clean,
            },
            Entry {
                page: u32::MAX,
                state: SlotState::Dirty,
            },
            Entry {
                page: 0,
                state: SlotState::Uncommitted(254),
            },
        ] {
            let w = Entry::encode(Some(e));
            assert_eq!(Entry::decode(w, 0).unwrap(), Some(e));
            for bit in 0..64 {
                assert!(Entry::decode(w ^ (1 << bit), 0).is_err() || bit >= 64);
            }
        }
        assert_eq!(Entry::decode(0, 0).unwrap(), None);
        assert!(TxWord::decode(TxWord::committed(5), 0).unwrap());
        assert!(TxWord::decode(TxWord::committed(5) ^ 0x100, 0).is_err());
    }

    #[test]
    fn superblock_round_trips_and_rejects_damage() {
        let g = Geometry::new(10, 2, 100).unwrap();
        let b = g.encode_superblock();
        assert_eq!(Geometry::decode_superblock(&b, g.bytes()).unwrap(), g);
        assert!(Geometry::decode_superblock(&b, g.bytes() - 1).is_err());
        for i in 0..36 {
            let mut d = b;
            d[i] ^= 1;
            assert!(
                Geometry::decode_superblock(&d, g.bytes()).is_err(),
                "byte {i}"
            );
        }
    }
}
