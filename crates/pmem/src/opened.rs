//! The open record: who has a pool file open, written into the header at
//! open and cleared at close, so that a byte copy of a pool taken while it
//! was open (`cp` of a live pool) is recognised as such and not opened.
//!
//! Why: a copy made by reading the file while its owner writes it reads
//! different pages at different instants, so it is in general no state the
//! pool was ever in, nor a crash image of one; recovery cannot be trusted
//! on it (issue 31: tx stores copied that way failed their checks and then
//! corrupted further). A crash image left in place by a killed owner is
//! fine: it is the same file. So the record names the file it was written
//! for (device and inode); [`Pool::open`](crate::Pool::open) of a file
//! whose header holds a record naming another file refuses with
//! [`PoolError::CopiedWhileOpen`](crate::PoolError::CopiedWhileOpen).
//!
//! On-media format, in the header's fourth cache line (bytes 192..256,
//! reserved and zero before; outside the header checksum, so readers that
//! predate it ignore it). All integers little-endian:
//!
//! | offset | size | field                                                |
//! |-------:|-----:|------------------------------------------------------|
//! |    192 |    8 | magic `b"FRTOPEN1"`; all 64 bytes zero when closed    |
//! |    200 |    4 | pid of the opener                                     |
//! |    204 |    4 | reserved, zero                                        |
//! |    208 |    8 | `st_dev` of the file it was opened as                 |
//! |    216 |    8 | `st_ino` of the file it was opened as                 |
//! |    224 |    8 | when, nanoseconds since the Unix epoch                |
//! |    232 |   16 | the kernel's boot id (`/proc/sys/kernel/random/boot_id`, 16 bytes; zero if unknown) |
//! |    248 |    4 | CRC32C of bytes 192..248                              |
//! |    252 |    4 | reserved, zero                                        |
//!
//! Written (64 bytes, persisted) after the file is locked and before the
//! pool is handed to anyone; cleared (zeroed, persisted) by
//! [`Pool::close`](crate::Pool::close). A record whose checksum fails
//! (a crash tore it while being written) is ignored. A pool that is
//! dropped without `close` keeps its record: harmless for the file itself
//! (same device and inode), and a copy of it is refused like any copy of
//! an open pool — open the original first (its recovery runs there), then
//! copy it, or use `ferrite pool backup`.

/// Offset of the record in the pool.
pub const OPEN_OFF: usize = 192;
/// Bytes of the record.
pub const OPEN_LEN: usize = 64;
/// The record's magic.
pub const OPEN_MAGIC: [u8; 8] = *b"FRTOPEN1";

/// A decoded open record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenRecord {
    /// Process id of the opener (bytes 200..204).
    pub pid: u32,
    /// `st_dev` of the file as it was opened (bytes 208..216).
    pub dev: u64,
    /// `st_ino` of the file as it was opened (bytes 216..224).
    pub ino: u64,
    /// When it was opened, nanoseconds since the Unix epoch (bytes 224..232).
    pub opened_ns: u64,
    /// The kernel's boot id then (bytes 232..248); zero if unknown.
    pub boot_id: [u8; 16],
}

impl OpenRecord {
    /// The record for this process opening the file (`dev`, `ino`) now.
    pub fn now(dev: u64, ino: u64) -> OpenRecord {
        OpenRecord {
            pid: std::process::id(),
            dev,
            ino,
            opened_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0),
            boot_id: boot_id(),
        }
    }

    /// The 64 bytes to store at [`OPEN_OFF`]: magic, fields and the
    /// CRC32C of the first 56 bytes (see the module documentation).
    pub fn encode(&self) -> [u8; OPEN_LEN] {
        let mut b = [0u8; OPEN_LEN];
        b[0..8].copy_from_slice(&OPEN_MAGIC);
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        b[16..24].copy_from_slice(&self.dev.to_le_bytes());
        b[24..32].copy_from_slice(&self.ino.to_le_bytes());
        b[32..40].copy_from_slice(&self.opened_ns.to_le_bytes());
        b[40..56].copy_from_slice(&self.boot_id);
        let crc = crc32c::crc32c(&b[..56]);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The record in a pool's first bytes (`pool[OPEN_OFF..]`), if there
    /// is a whole one: `None` when closed (no magic), torn or too short.
    pub fn decode(pool: &[u8]) -> Option<OpenRecord> {
        let b = pool.get(OPEN_OFF..OPEN_OFF + OPEN_LEN)?;
        if b[0..8] != OPEN_MAGIC {
            return None;
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        if u32_at(56) != crc32c::crc32c(&b[..56]) {
            return None;
        }
        Some(OpenRecord {
            pid: u32_at(8),
            dev: u64_at(16),
            ino: u64_at(24),
            opened_ns: u64_at(32),
            boot_id: b[40..56].try_into().unwrap(),
        })
    }

    /// Whether the record was written for the file (`dev`, `ino`).
    pub fn is_for(&self, dev: u64, ino: u64) -> bool {
        self.dev == dev && self.ino == ino
    }
}

/// The kernel's boot id (16 bytes of its UUID), zero if unreadable.
fn boot_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") {
        let hex: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
        for (i, pair) in hex.chunks(2).take(16).enumerate() {
            let s = std::str::from_utf8(pair).unwrap_or("0");
            id[i] = u8::from_str_radix(s, 16).unwrap_or(0);
        }
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let r = OpenRecord::now(0xfe00, 1234);
        let mut pool = vec![0u8; 4096];
        assert_eq!(OpenRecord::decode(&pool), None, "zero = closed");
        pool[OPEN_OFF..OPEN_OFF + OPEN_LEN].copy_from_slice(&r.encode());
        assert_eq!(OpenRecord::decode(&pool), Some(r.clone()));
        assert!(r.is_for(0xfe00, 1234) && !r.is_for(0xfe00, 1235));
        for i in 0..60 {
            let mut c = pool.clone();
            c[OPEN_OFF + i] ^= 0x10;
            assert_eq!(OpenRecord::decode(&c), None, "byte {i}");
        }
        assert_eq!(OpenRecord::decode(&pool[..200]), None);
    }

    /// A byte copy of an open pool is refused; a copy of a closed one, and
    /// the file itself after its opener died (a crash image), open.
    #[test]
    fn a_copy_of_an_open_pool_is_refused_and_nothing_else() {
        use crate::{Domain, Pool, PoolError, PoolOptions};
        let dir = tempfile::tempdir().unwrap();
        let opts = PoolOptions::new("t", 1 << 16).domain(Domain::Msync);
        let a = dir.path().join("a.pool");
        let live = dir.path().join("live-copy.pool");
        let closed = dir.path().join("closed-copy.pool");
        let p = Pool::create(&a, &opts).unwrap();
        std::fs::copy(&a, &live).unwrap();
        match Pool::open(&live, &opts) {
            Err(PoolError::CopiedWhileOpen { pid, .. }) => assert_eq!(pid, std::process::id()),
            other => panic!("a live copy opened: {other:?}"),
        }
        p.close().unwrap();
        std::fs::copy(&a, &closed).unwrap();
        Pool::open(&closed, &opts).unwrap().close().unwrap();
        // Dropped without close (its opener "died"): the file itself opens.
        drop(Pool::open(&a, &opts).unwrap());
        assert!(OpenRecord::decode(&std::fs::read(&a).unwrap()).is_some());
        Pool::open(&a, &opts).unwrap().close().unwrap();
        assert!(OpenRecord::decode(&std::fs::read(&a).unwrap()).is_none());
        // The refusal stays a refusal (the copy is not rewritten).
        assert!(matches!(
            Pool::open(&live, &opts),
            Err(PoolError::CopiedWhileOpen { .. })
        ));
    }
}
