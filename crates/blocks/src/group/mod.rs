//! Interleaved reads and persists on FP-Tree leaf nodes [P0 §3.5].
//!
//! [`FpLeaves`] is an array of FP-Tree-style leaf nodes in a [`Region`]: a
//! key hashes to one leaf, and each leaf holds 32 key/value slots, a
//! 1-byte fingerprint per slot and a bitmap of the slots in use [P0 §3.5.1].
//! Operations run through [`FpLeaves::run`], a small executor that keeps a
//! *group* of 1–[`MAX_GROUP`] operations in flight and interleaves them:
//!
//! - a **lookup** prefetches its leaf's header line and yields; when resumed
//!   it compares the fingerprints and, if one matches, prefetches the
//!   matching slots' lines and yields again before comparing keys
//!   [P0 §3.5.2];
//! - an **insert** prefetches its header line and yields; then, knowing
//!   the bitmap, prefetches the line of the slot it expects to take and
//!   yields; then checks for a duplicate, writes key, value and
//!   fingerprint, flushes them and waits for a fence; then sets its bitmap
//!   bit, flushes it and waits for the next fence [P0 §3.5.3]. The
//!   executor issues a fence only when every operation in flight is
//!   waiting for one, so a group of `g` inserts pays **one fence for all
//!   slot writes and one for all bitmaps**: 2/g fences per insert instead
//!   of 2 (Fig. 11). Each insert still completes — its result is handed to
//!   the caller — only after its own slot *and* its bitmap bit are durable.
//!
//! Why interleave: a fence (`sfence` after `clwb`) stalls until every line
//! written back before it has reached the persistence domain, and a load of
//! a leaf that is not cached stalls for a memory round trip. Both are
//! latencies, not bandwidth: `g` operations that issue their flushes (or
//! prefetches) before anyone waits overlap their latencies, so the stall is
//! paid once per group [P0 §3.5, Fig. 12].
//!
//! # The executor: Rust `async`, no runtime
//!
//! Each operation is an `async fn` (in `exec.rs`): the compiler turns it into
//! the state machine one would otherwise write by hand (AMAC-style, with an
//! explicit "which step am I at" and the locals kept across steps), and the
//! code reads like the sequential algorithm with `.await` where P0 writes
//! `co_await`. The executor is a loop of rounds over a fixed window of
//! pinned futures, polled with a no-op waker (nobody is ever woken: the
//! round robin polls every pending operation each round), refilled from the
//! caller's operation stream as operations complete. Futures live in boxes
//! allocated once per [`FpLeaves::run`] call and reused for every operation
//! (`Pin::set`), so there is no allocation per operation and no `unsafe`.
//! A hand-rolled state machine would compile to the same kind of match on a
//! state tag, with the steps and the locals kept across them written out by
//! hand — easy to get wrong exactly where the ordering argument below
//! lives; a runtime crate would bring wakers, queues and thread-safety that
//! a single-threaded latency-hiding loop does not need.
//!
//! # Ordering argument (why no half-inserted slot is ever visible)
//!
//! A slot is *visible* (part of the table, after a crash too) exactly when
//! its bit in the leaf bitmap is set. An insert:
//!
//! 1. picks a free slot `s` (bit clear, not taken by an insert in flight),
//!    writes key, value and fingerprint, and flushes their lines;
//! 2. waits until a fence is issued **after** those flushes: now the slot's
//!    bytes are durable;
//! 3. sets bit `s` with one 8-byte store (failure atomic on x86) and flushes
//!    it;
//! 4. waits for the next fence: now the bit is durable, and only then does
//!    the insert complete.
//!
//! So the bit is persisted only after the slot is durable (step 3 follows
//! the fence of step 2), and a slot is visible only once its bit is durable:
//! a crash before step 4's fence leaves the bit either clear (the slot is
//! free and the insert never happened) or set over bytes already durable.
//! Sharing fences does not weaken this: a shared fence orders *every* flush
//! issued before it, and an insert enters step 3 only after a fence issued
//! after its own step-1 flushes. Other inserts' bytes in the same lines
//! (another fingerprint in the header line, another bit in the same bitmap
//! word) are written under the same rule and never touch slot `s`. Slots
//! are never rewritten while visible (there are no updates or deletes), so
//! a visible slot's bytes never change.
//!
//! Lookups ignore the slots of inserts still in flight in the same run
//! (bit clear, or set but not yet durable), so a lookup never returns a
//! value whose insert has not completed and could still be lost.
//!
//! # Volatile state
//!
//! Deliberately little, so that an operation touches no DRAM line besides
//! the leaf lines it prefetches (a per-leaf array in DRAM would be one more
//! cache miss per operation on a table this size): the bitmaps on the
//! medium *are* the free-slot map, the executor keeps the short list of
//! inserts in flight (leaf and slot: reservations that keep two inserts off
//! one slot, and slots lookups must not see yet), and the table keeps its
//! entry count.
//!
//! # On-media format (version 1, all integers little-endian)
//!
//! The region must start on a cache line. Offsets are from its start:
//!
//! | offset           | bytes | content                          |
//! |------------------|-------|----------------------------------|
//! | 0                | 64    | superblock                       |
//! | 64 + 576·i       | 576   | leaf `i`, for `i` in `0..leaves` |
//!
//! Superblock:
//!
//! | bytes  | field                                            |
//! |--------|--------------------------------------------------|
//! | 0..8   | magic `FERRFPG\0`                                |
//! | 8..10  | format version, u16 = 1                          |
//! | 10..12 | slots per leaf, u16 = 32                         |
//! | 12..16 | leaf size in bytes, u32 = 576                    |
//! | 16..24 | number of leaves, u64 (1 ..= 2³²)                |
//! | 24..32 | hash seed, u64                                   |
//! | 32..60 | reserved, zero                                   |
//! | 60..64 | crc32c of bytes 0..60                            |
//!
//! Leaf (nine cache lines; the first is the header line):
//!
//! | bytes        | field                                                         |
//! |--------------|---------------------------------------------------------------|
//! | 0..8         | bitmap, u64: bit `s` set ⇔ slot `s` is in use; bits 32..64 zero |
//! | 8..40        | fingerprints: byte `8 + s` is the fingerprint of slot `s`'s key |
//! | 40..64       | reserved, zero                                                |
//! | 64 + 16·s    | slot `s`: key, u64 (bytes 0..8), value, u64 (bytes 8..16)      |
//!
//! Four slots share a line. The fingerprint of a key is the low byte of
//! `h = mix(key ^ seed)` (a splitmix64 finaliser), and its leaf is
//! `((h >> 32) · leaves) >> 32` — independent bits of the same hash.
//! Fingerprint, key and value of a free slot (bit clear) mean nothing; after
//! [`FpLeaves::recover`] they are zero (see below).
//!
//! # Creation and recovery
//!
//! [`FpLeaves::create`] zeroes the superblock and fences (so a crash while
//! formatting cannot leave an old superblock over half-zeroed leaves), zeroes
//! every leaf and fences, then writes and persists the superblock.
//!
//! [`FpLeaves::recover`] validates the superblock and reads every leaf once.
//! The volatile state is rebuilt from the bitmaps alone: a slot whose bit
//! is clear is free, the entry count is the number of set bits, and no
//! insert is in flight (its reservation died with the executor that ran
//! it). Recovery also *scrubs*: it zeroes fingerprint, key and
//! value of every free slot that is not already zero (what an insert cut
//! short by a crash leaves behind), flushing them and fencing once at the
//! end, and only if there was something to scrub. The scrub is not needed
//! for correctness — bits alone decide visibility, and an insert rewrites
//! all of a slot before setting its bit — but it keeps the medium canonical
//! (no bytes of an insert that never completed stay readable, and
//! [`FpLeaves::audit`] can demand zero free slots), and it is idempotent:
//! it only writes zeros into free slots, so a crash during it leaves some
//! of them zeroed and a rerun finishes the job.

mod exec;

#[cfg(any(test, feature = "checks"))]
pub mod checks;
#[cfg(test)]
mod tests;

pub use exec::RunStats;

mod fault;
// Planted bugs exist for the crash checks only: outside the `checks` feature
// (and this crate's tests) they are not part of the API.
#[cfg(feature = "checks")]
pub use fault::Fault;
#[cfg(not(feature = "checks"))]
pub(crate) use fault::Fault;

use ferrite_pmem::{ChecksumMismatch, Region, SuperblockView, SuperblockWriter};
use std::cell::Cell;
use std::fmt;

/// Slots per leaf.
pub const SLOTS: usize = 32;
/// Bytes of one leaf: the header line plus 16 bytes per slot.
pub const LEAF_BYTES: usize = LINE + SLOTS * KV_LEN;
/// Bytes of the superblock at the start of the region.
pub const SUPERBLOCK: usize = 64;
/// Largest group [`FpLeaves::run`] accepts.
pub const MAX_GROUP: usize = 64;
/// Most leaves a table may have (the leaf index is taken from 32 hash
/// bits, and the executor packs it into 32 bits).
pub const MAX_LEAVES: usize = 1 << 32;
/// On-media format version.
pub const FORMAT_VERSION: u16 = 1;

const LINE: usize = 64;
const MAGIC: [u8; 8] = *b"FERRFPG\0";
/// Offset of the fingerprints in a leaf.
const FPS: usize = 8;
/// Offset of slot 0 in a leaf.
const KV: usize = LINE;
const KV_LEN: usize = 16;
/// Bitmap bits that may be set.
const SLOT_MASK: u64 = (1u64 << SLOTS) - 1;

/// Errors of the leaf array (ARCHITECTURE.md, rule 7).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// The region does not start with a leaf-array superblock.
    #[error("the region holds no FP-Tree leaf array (bad magic)")]
    NotATable,
    #[error("leaf array format version {found}, this build reads {FORMAT_VERSION}")]
    Version { found: u16 },
    #[error(
        "leaf array superblock checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
    )]
    Checksum { stored: u32, computed: u32 },
    /// Impossible geometry, recorded (corrupt superblock) or requested.
    #[error("bad leaf array geometry: {0}")]
    Geometry(String),
    /// The region is shorter than the leaves it must hold.
    #[error("{leaves} leaves need a {need}-byte region, this one has {have}")]
    TooSmall {
        leaves: usize,
        need: usize,
        have: usize,
    },
    #[error("the leaf array region must start on a cache line (pool offset {base:#x})")]
    Misaligned { base: usize },
    /// A bitmap has bits beyond the slot count: not written by this code.
    #[error("leaf {leaf}: bitmap {bitmap:#018x} has bits for slots {SLOTS} and up")]
    CorruptBitmap { leaf: usize, bitmap: u64 },
    /// A visible slot holds what no insert writes (its key belongs to
    /// another leaf or fingerprint, or is visible twice), or the leaf
    /// header's reserved bytes are not zero: the media was damaged.
    #[error("leaf {leaf}: {what}")]
    CorruptLeaf { leaf: usize, what: String },
    /// The key's leaf has no free slot (counting inserts in flight).
    #[error("leaf {leaf} is full")]
    LeafFull { leaf: usize },
    /// The key is present, or an insert of it is in flight in the same run.
    #[error("key {key:#x} is already present")]
    Duplicate { key: u64 },
    #[error("group size {0} is outside 1..={MAX_GROUP}")]
    BadGroup(usize),
    /// [`FpLeaves::audit`] found the medium inconsistent, or the entry count wrong.
    #[error("audit: {0}")]
    Audit(String),
}

/// One operation for [`FpLeaves::run`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Insert a new key (no updates: a present key is [`GroupError::Duplicate`]).
    Insert { key: u64, value: u64 },
    /// Point lookup.
    Lookup { key: u64 },
}

/// What a successful operation did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The insert is durable (slot and bitmap bit).
    Inserted,
    /// The lookup found the key with this value.
    Found(u64),
    /// The lookup did not find the key.
    Missing,
}

/// splitmix64 finaliser: a cheap, well-mixed 64-bit hash.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The decoded superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Superblock {
    leaves: usize,
    seed: u64,
}

impl Superblock {
    fn encode(&self) -> [u8; SUPERBLOCK] {
        SuperblockWriter::new(&MAGIC, FORMAT_VERSION)
            .u16(10, SLOTS as u16)
            .u32(12, LEAF_BYTES as u32)
            .u64(16, self.leaves as u64)
            .u64(24, self.seed)
            .seal()
    }

    fn decode(b: &[u8; SUPERBLOCK]) -> Result<Superblock, GroupError> {
        let view = SuperblockView::of(b);
        if !view.has_magic(&MAGIC) {
            return Err(GroupError::NotATable);
        }
        let (u16_at, u32_at, u64_at) = (|o| view.u16(o), |o| view.u32(o), |o| view.u64(o));
        // The checksum first: a torn or corrupt superblock must not be
        // believed about anything, including its version.
        if let Err(ChecksumMismatch { stored, computed }) = view.checksum() {
            return Err(GroupError::Checksum { stored, computed });
        }
        let version = view.version();
        if version != FORMAT_VERSION {
            return Err(GroupError::Version { found: version });
        }
        let (slots, leaf_bytes) = (u16_at(10) as usize, u32_at(12) as usize);
        if slots != SLOTS || leaf_bytes != LEAF_BYTES {
            return Err(GroupError::Geometry(format!(
                "{slots} slots of {leaf_bytes}-byte leaves recorded; version 1 has {SLOTS} and {LEAF_BYTES}"
            )));
        }
        let leaves = u64_at(16);
        if leaves == 0 || leaves > MAX_LEAVES as u64 {
            return Err(GroupError::Geometry(format!(
                "{leaves} leaves recorded (1..={MAX_LEAVES})"
            )));
        }
        Ok(Superblock {
            leaves: leaves as usize,
            seed: u64_at(24),
        })
    }
}

/// An array of FP-Tree leaf nodes in a region. See the module documentation.
///
/// Not `Sync`: a group is interleaved on one thread, and the entry count is
/// a plain cell. Operations that insert take `&mut self`.
pub struct FpLeaves {
    region: Region,
    leaves: usize,
    seed: u64,
    /// Entries present: set bits of completed inserts (or recovered).
    len: Cell<usize>,
    fault: Fault,
}

impl fmt::Debug for FpLeaves {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FpLeaves")
            .field("base", &self.region.base())
            .field("leaves", &self.leaves)
            .field("len", &self.len.get())
            .finish()
    }
}

const LOW_BYTES: u64 = 0x0101_0101_0101_0101;

/// A leaf's bitmap and fingerprints as read from its header line.
#[derive(Clone, Copy)]
struct Header {
    bitmap: u32,
    /// Fingerprints of slots `8w .. 8w + 8` in word `w`, slot `8w + k` in byte `k`.
    fps: [u64; SLOTS / 8],
}

impl Header {
    /// Slots whose fingerprint is `fp`, used or not (SWAR over the four
    /// words: a byte loop does not vectorise).
    #[inline]
    fn matches(&self, fp: u8) -> u32 {
        let pattern = u64::from(fp) * LOW_BYTES;
        self.fps
            .iter()
            .enumerate()
            .fold(0, |m, (w, &x)| m | zero_bytes(x ^ pattern) << (8 * w))
    }
}

/// Bit `k` set ⇔ byte `k` of `x` is zero.
#[inline]
fn zero_bytes(x: u64) -> u32 {
    const L: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    // High bit of each byte set exactly when the byte is zero: the low
    // seven bits plus 0x7f stay within the byte (no carry into the next),
    // and reach the high bit unless they are all zero; or-ing `x` catches
    // a set high bit.
    let t = !(((x & L) + L) | x | L);
    // Gather the eight high bits into one byte: byte k's bit, at 8k after
    // the shift, moves to bit 56 + k; no two partial products meet there.
    (((t >> 7).wrapping_mul(0x0102_0408_1020_4080)) >> 56) as u32
}

/// The slots set in a 32-bit mask, lowest first.
fn bits(mut m: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if m == 0 {
            None
        } else {
            let s = m.trailing_zeros() as usize;
            m &= m - 1;
            Some(s)
        }
    })
}

impl FpLeaves {
    /// Region bytes a table of `leaves` leaves needs.
    pub const fn region_len(leaves: usize) -> usize {
        SUPERBLOCK + leaves * LEAF_BYTES
    }

    /// Formats a new, empty table of `leaves` leaves at the start of
    /// `region` (see "Creation"); `hash_seed` picks the key → leaf and
    /// fingerprint functions and is recorded in the superblock.
    pub fn create(region: Region, leaves: usize, hash_seed: u64) -> Result<FpLeaves, GroupError> {
        if leaves == 0 || leaves > MAX_LEAVES {
            return Err(GroupError::Geometry(format!(
                "{leaves} leaves requested (1..={MAX_LEAVES})"
            )));
        }
        Self::check_region(&region, leaves)?;
        region.fill(0, SUPERBLOCK, 0);
        region.persist(0, SUPERBLOCK);
        region.fill_nodrain(SUPERBLOCK, leaves * LEAF_BYTES, 0);
        region.fence();
        let sb = Superblock {
            leaves,
            seed: hash_seed,
        };
        region.write(0, &sb.encode());
        region.persist(0, SUPERBLOCK);
        Ok(Self::empty(region, sb))
    }

    /// Reopens a table after a restart or a crash: validates the superblock,
    /// rebuilds the volatile state from the bitmaps and scrubs free slots
    /// (see "Creation and recovery").
    pub fn recover(region: Region) -> Result<FpLeaves, GroupError> {
        Self::recover_inner(region, Fault::None)
    }

    /// [`FpLeaves::recover`] with a planted bug in recovery and in the
    /// writers of the recovered table (crash checks only).
    #[cfg(any(test, feature = "checks"))]
    pub fn recover_with_fault(region: Region, fault: Fault) -> Result<FpLeaves, GroupError> {
        Self::recover_inner(region, fault)
    }

    fn recover_inner(region: Region, fault: Fault) -> Result<FpLeaves, GroupError> {
        if region.len() < SUPERBLOCK {
            return Err(GroupError::TooSmall {
                leaves: 0,
                need: SUPERBLOCK,
                have: region.len(),
            });
        }
        let mut b = [0u8; SUPERBLOCK];
        region.read(0, &mut b);
        let sb = Superblock::decode(&b)?;
        Self::check_region(&region, sb.leaves)?;
        let mut t = Self::empty(region, sb);
        t.fault = fault;
        let mut leaf_buf = [0u8; LEAF_BYTES];
        let mut scrubbed = false;
        let mut len = 0usize;
        for leaf in 0..t.leaves {
            let lo = t.leaf_off(leaf);
            t.region.read(lo, &mut leaf_buf);
            let mut w = [0u8; 8];
            w.copy_from_slice(&leaf_buf[..8]);
            let bitmap = u64::from_le_bytes(w);
            if bitmap & !SLOT_MASK != 0 {
                return Err(GroupError::CorruptBitmap { leaf, bitmap });
            }
            let used = bitmap as u32;
            len += used.count_ones() as usize;
            t.check_leaf(leaf, &leaf_buf, used)?;
            if fault == Fault::NoScrub {
                continue;
            }
            for s in bits(!used) {
                if leaf_buf[FPS + s] != 0 {
                    t.region.write(lo + FPS + s, &[0]);
                    t.region.flush(lo + FPS + s, 1);
                    scrubbed = true;
                }
                let kv = KV + s * KV_LEN;
                if leaf_buf[kv..kv + KV_LEN].iter().any(|&x| x != 0) {
                    t.region.fill(lo + kv, KV_LEN, 0);
                    t.region.flush(lo + kv, KV_LEN);
                    scrubbed = true;
                }
            }
        }
        if scrubbed {
            t.region.fence();
        }
        t.len.set(len);
        Ok(t)
    }

    /// Recovery's check of one leaf's visible slots (what [`FpLeaves::audit`]
    /// demands of them): an insert makes a slot visible only after its
    /// key, value and fingerprint are durable, so a visible slot whose key
    /// does not hash to this leaf and fingerprint, or a key visible twice,
    /// is damage, not a crash state — refused rather than served.
    fn check_leaf(&self, leaf: usize, buf: &[u8; LEAF_BYTES], used: u32) -> Result<(), GroupError> {
        let corrupt = |what: String| Err(GroupError::CorruptLeaf { leaf, what });
        if buf[40..64].iter().any(|&x| x != 0) {
            return corrupt("reserved header bytes are not zero".into());
        }
        let key_of = |s: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&buf[KV + s * KV_LEN..KV + s * KV_LEN + 8]);
            u64::from_le_bytes(w)
        };
        for s in bits(used) {
            let key = key_of(s);
            let fp = buf[FPS + s];
            if self.place(key) != (leaf, fp) {
                return corrupt(format!(
                    "slot {s}: key {key:#x} with fingerprint {fp:#04x} belongs to {:?}",
                    self.place(key)
                ));
            }
            if bits(used & ((1u32 << s) - 1)).any(|o| key_of(o) == key) {
                return corrupt(format!("slot {s}: key {key:#x} is visible twice"));
            }
        }
        Ok(())
    }

    fn check_region(region: &Region, leaves: usize) -> Result<(), GroupError> {
        if !region.is_line_aligned(0) {
            return Err(GroupError::Misaligned {
                base: region.base(),
            });
        }
        let need = leaves
            .checked_mul(LEAF_BYTES)
            .and_then(|n| n.checked_add(SUPERBLOCK))
            .ok_or_else(|| GroupError::Geometry(format!("{leaves} leaves overflow")))?;
        if region.len() < need {
            return Err(GroupError::TooSmall {
                leaves,
                need,
                have: region.len(),
            });
        }
        Ok(())
    }

    fn empty(region: Region, sb: Superblock) -> FpLeaves {
        FpLeaves {
            region,
            leaves: sb.leaves,
            seed: sb.seed,
            len: Cell::new(0),
            fault: Fault::None,
        }
    }

    /// Plants a bug in this table's writers (crash checks only).
    #[cfg(any(test, feature = "checks"))]
    pub fn set_fault(&mut self, fault: Fault) {
        self.fault = fault;
    }

    /// Number of leaves.
    pub fn leaves(&self) -> usize {
        self.leaves
    }

    /// Entries present (completed inserts, or recovered).
    pub fn len(&self) -> usize {
        self.len.get()
    }

    pub fn is_empty(&self) -> bool {
        self.len.get() == 0
    }

    /// Slots in all leaves.
    pub fn capacity(&self) -> usize {
        self.leaves * SLOTS
    }

    /// The hash seed recorded in the superblock.
    pub fn hash_seed(&self) -> u64 {
        self.seed
    }

    /// The region the table lives in.
    pub fn region(&self) -> &Region {
        &self.region
    }

    /// The leaf `key` belongs to and its fingerprint.
    #[inline]
    pub fn place(&self, key: u64) -> (usize, u8) {
        let h = mix(key ^ self.seed);
        ((((h >> 32) * self.leaves as u64) >> 32) as usize, h as u8)
    }

    // ---- layout ----------------------------------------------------------------

    #[inline]
    fn leaf_off(&self, leaf: usize) -> usize {
        SUPERBLOCK + leaf * LEAF_BYTES
    }

    #[inline]
    fn slot_off(&self, leaf: usize, slot: usize) -> usize {
        self.leaf_off(leaf) + KV + slot * KV_LEN
    }

    /// The bitmap of `leaf` as on the medium (durable bits plus bits of
    /// inserts in flight that reached step 3).
    #[inline]
    fn bitmap(&self, leaf: usize) -> u32 {
        // Bits 32..64 are zero: recovery refuses anything else and inserts
        // set bits below SLOTS only.
        self.region.load_u64(self.leaf_off(leaf)) as u32
    }

    // ---- medium access --------------------------------------------------------------

    /// The first 40 bytes of `leaf`'s header line — bitmap and
    /// fingerprints — in one bounds-checked read.
    #[inline]
    fn header(&self, leaf: usize) -> Header {
        let mut b = [0u8; FPS + SLOTS];
        self.region.read(self.leaf_off(leaf), &mut b);
        let word = |w: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[8 * w..8 * w + 8]);
            u64::from_le_bytes(x)
        };
        Header {
            bitmap: word(0) as u32,
            fps: [word(1), word(2), word(3), word(4)],
        }
    }

    #[inline]
    fn key_at(&self, leaf: usize, slot: usize) -> u64 {
        self.region.load_u64(self.slot_off(leaf, slot))
    }

    #[inline]
    fn value_at(&self, leaf: usize, slot: usize) -> u64 {
        self.region.load_u64(self.slot_off(leaf, slot) + 8)
    }

    /// Step 1 of an insert: key, value and fingerprint written and flushed.
    ///
    /// The flushes go right behind the stores on purpose. Deferring every
    /// insert's flushes to just before the group's shared fence (so that
    /// no `clwb` follows a store to its line at once) was tried: in 14
    /// interleaved runs of `bench group` against this it gained nothing at
    /// any group size (inserts' medians 5–33 % slower; the untouched
    /// lookups moved as much either way). Issued early, a flush's
    /// write-back overlaps the rest of the round instead of the fence.
    fn write_slot(&self, leaf: usize, slot: usize, key: u64, value: u64, fp: u8) {
        let so = self.slot_off(leaf, slot);
        let mut kv = [0u8; KV_LEN];
        kv[..8].copy_from_slice(&key.to_le_bytes());
        kv[8..].copy_from_slice(&value.to_le_bytes());
        self.region.write(so, &kv);
        let fo = self.leaf_off(leaf) + FPS + slot;
        self.region.write(fo, &[fp]);
        self.region.flush(so, KV_LEN);
        self.region.flush(fo, 1);
    }

    /// Step 3 of an insert: the bit set with one 8-byte store and flushed.
    /// Read-modify-write of the medium's word, not of the mirror: other
    /// inserts in flight may have set their bits in the same word already.
    fn set_bit(&self, leaf: usize, slot: usize) {
        let lo = self.leaf_off(leaf);
        let bitmap = self.region.load_u64(lo);
        self.region.store_u64(lo, bitmap | 1u64 << slot);
        self.region.flush(lo, 8);
    }

    // ---- synchronous API ------------------------------------------------------------

    /// Point lookup without interleaving (the left-hand listing of
    /// [P0 §3.5.2]): sees completed inserts only.
    pub fn get(&self, key: u64) -> Option<u64> {
        let (leaf, fp) = self.place(key);
        // No insert is in flight outside `run` (it borrows mutably), so
        // every set bit is a completed insert.
        let h = self.header(leaf);
        bits(h.matches(fp) & h.bitmap)
            .find(|&s| self.key_at(leaf, s) == key)
            .map(|s| self.value_at(leaf, s))
    }

    /// Inserts one key, durably, as a group of one (two fences).
    pub fn insert(&mut self, key: u64, value: u64) -> Result<(), GroupError> {
        let mut out = None;
        self.run([Op::Insert { key, value }], 1, |_, r| out = Some(r))?;
        out.expect("the executor completes every operation")
            .map(|_| ())
    }

    /// Every visible entry as `(key, value)`, by leaf and slot.
    pub fn entries(&self) -> Vec<(u64, u64)> {
        let mut v = Vec::with_capacity(self.len());
        for leaf in 0..self.leaves {
            for s in bits(self.bitmap(leaf)) {
                v.push((self.key_at(leaf, s), self.value_at(leaf, s)));
            }
        }
        v
    }

    /// Cross-checks the medium and the entry count (for tests and checks;
    /// reads the whole table): no bitmap has bits past slot 31, every
    /// visible slot's fingerprint and leaf are its key's, no key is visible
    /// twice, the entry count is right, and every free slot is zero.
    pub fn audit(&self) -> Result<(), GroupError> {
        let bad = |m: String| Err(GroupError::Audit(m));
        let mut buf = [0u8; LEAF_BYTES];
        let mut seen = std::collections::HashSet::with_capacity(self.len());
        for leaf in 0..self.leaves {
            self.region.read(self.leaf_off(leaf), &mut buf);
            let word = |o: usize| {
                let mut w = [0u8; 8];
                w.copy_from_slice(&buf[o..o + 8]);
                u64::from_le_bytes(w)
            };
            let bitmap = word(0);
            if bitmap & !SLOT_MASK != 0 {
                return bad(format!("leaf {leaf}: bitmap {bitmap:#x} past slot 31"));
            }
            if buf[40..64].iter().any(|&x| x != 0) {
                return bad(format!("leaf {leaf}: reserved header bytes are not zero"));
            }
            for s in 0..SLOTS {
                let (key, value) = (word(KV + s * KV_LEN), word(KV + s * KV_LEN + 8));
                let fp = buf[FPS + s];
                if bitmap & 1 << s == 0 {
                    if fp != 0 || key != 0 || value != 0 {
                        return bad(format!("leaf {leaf} slot {s}: free but not zero"));
                    }
                    continue;
                }
                if self.place(key) != (leaf, fp) {
                    return bad(format!(
                        "leaf {leaf} slot {s}: key {key:#x} with fingerprint {fp:#04x} belongs to {:?}",
                        self.place(key)
                    ));
                }
                if !seen.insert(key) {
                    return bad(format!("key {key:#x} is visible twice"));
                }
            }
        }
        if seen.len() != self.len() {
            return bad(format!(
                "{} entries on media, count says {}",
                seen.len(),
                self.len()
            ));
        }
        Ok(())
    }
}
