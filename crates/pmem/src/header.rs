//! The pool header: the first 4 KiB of every pool.
//!
//! On-media format, version 1 (all integers little-endian):
//!
//! | offset | size | field                                                        |
//! |-------:|-----:|--------------------------------------------------------------|
//! |      0 |    8 | magic `b"FERRITE\0"`                                          |
//! |      8 |    4 | format version (`1`)                                          |
//! |     12 |    4 | header length in bytes (`4096`)                               |
//! |     16 |    4 | feature flags (bit 0 [`FEATURE_GROWABLE`]; unknown bits are refused) |
//! |     20 |    4 | durability domain created for ([`Domain::code`])              |
//! |     24 |    8 | pool size in bytes at creation (the file length; a growable pool's file may be longer) |
//! |     32 |    8 | creation time, nanoseconds since the Unix epoch               |
//! |     40 |   16 | UUID (random, version 4)                                      |
//! |     56 |   64 | layout name, UTF-8, NUL-padded (1–63 bytes)                   |
//! |    120 |    4 | growable pools: the most the pool may grow to, in MiB (≥ the size); else zero |
//! |    124 |    4 | CRC32C of bytes 0..124                                        |
//! |    128 |    8 | root offset ([`POff`](crate::POff); 0 = none) — not checksummed |
//! |    136 |   56 | reserved, zero                                                |
//! |    192 |   64 | open record ([`crate::opened`]): who has the file open — zero when closed; not checksummed here (its own CRC) |
//! |    256 | 3840 | reserved, zero                                                |
//!
//! A growable pool reserves address space for its maximum when mapped and
//! extends its file on demand ([`crate::Mapping::grow_to`]); what it uses of
//! the grown part is recorded by its owner (the allocator's page count), so
//! the header itself never changes.
//!
//! Bytes 0..128 are written once, at creation, and never change; the CRC
//! covers them. The root offset is the only mutable field: it sits alone in
//! the header's third cache line and is updated with one 8-byte atomic store
//! and persisted, which x86 makes failure atomic, so it needs no checksum.
//! Validation order on open: length, magic, version, checksum, fields
//! (reserved bytes 120..124 included), layout.

use crate::domain::Domain;
use crate::error::{PoolError, Result};

/// Bytes 0..8 of every pool.
pub const MAGIC: [u8; 8] = *b"FERRITE\0";
/// The header format version this build writes and reads (bytes 8..12).
pub const FORMAT_VERSION: u32 = 1;
/// Bytes reserved for the header at the start of every pool.
pub const HEADER_SIZE: usize = 4096;
/// Offset of the root word.
pub const ROOT_OFF: usize = 128;
/// Smallest pool: the header and one page of data.
pub const MIN_POOL_SIZE: u64 = 2 * HEADER_SIZE as u64;
/// Maximum layout name length in bytes.
pub const MAX_LAYOUT: usize = 63;
/// Feature bit: the pool grows on demand up to [`Header::max_size`].
pub const FEATURE_GROWABLE: u32 = 1;
/// Feature bits this build understands.
pub const KNOWN_FEATURES: u32 = FEATURE_GROWABLE;
/// Unit of the recorded maximum size of a growable pool.
pub const MAX_SIZE_UNIT: u64 = 1 << 20;

const CRC_OFF: usize = 124;

/// The immutable part of a pool header.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Header {
    /// Format version (bytes 8..12); always [`FORMAT_VERSION`] once decoded.
    pub version: u32,
    /// Feature flags (bytes 16..20), a subset of [`KNOWN_FEATURES`].
    pub features: u32,
    /// The durability domain the pool was created for (bytes 20..24).
    pub domain: Domain,
    /// Pool size in bytes at creation (bytes 24..32), at least
    /// [`MIN_POOL_SIZE`].
    pub size: u64,
    /// The most a growable pool may grow to (a multiple of
    /// [`MAX_SIZE_UNIT`], at least `size`); 0 for a fixed-size pool. Set
    /// exactly when `features` has [`FEATURE_GROWABLE`].
    pub max_size: u64,
    /// Creation time in nanoseconds since the Unix epoch (bytes 32..40).
    pub created_ns: u64,
    /// Random version-4 UUID (bytes 40..56), distinct per pool.
    pub uuid: [u8; 16],
    /// Layout name (bytes 56..120, NUL-padded): which component owns the
    /// data area; 1 to [`MAX_LAYOUT`] bytes without NUL.
    pub layout: String,
}

impl Header {
    /// Encodes the first 128 bytes (with checksum) into `out[..HEADER_SIZE]`,
    /// zeroing the rest of the header including the root word.
    pub fn encode(&self, out: &mut [u8]) {
        let out = &mut out[..HEADER_SIZE];
        out.fill(0);
        out[0..8].copy_from_slice(&MAGIC);
        out[8..12].copy_from_slice(&self.version.to_le_bytes());
        out[12..16].copy_from_slice(&(HEADER_SIZE as u32).to_le_bytes());
        out[16..20].copy_from_slice(&self.features.to_le_bytes());
        out[20..24].copy_from_slice(&self.domain.code().to_le_bytes());
        out[24..32].copy_from_slice(&self.size.to_le_bytes());
        out[32..40].copy_from_slice(&self.created_ns.to_le_bytes());
        out[40..56].copy_from_slice(&self.uuid);
        out[56..56 + self.layout.len()].copy_from_slice(self.layout.as_bytes());
        let max_units = (self.max_size / MAX_SIZE_UNIT) as u32;
        out[120..124].copy_from_slice(&max_units.to_le_bytes());
        let crc = crc32c::crc32c(&out[..CRC_OFF]);
        out[CRC_OFF..CRC_OFF + 4].copy_from_slice(&crc.to_le_bytes());
    }

    /// Decodes and validates a header from the first bytes of a pool.
    /// `actual_len` is the length of the file or image it came from.
    pub fn decode(bytes: &[u8], actual_len: u64) -> Result<Header> {
        if bytes.len() < 8 {
            // Too short to even hold the magic: say "not a pool" if what is
            // there does not start like one, "truncated" otherwise.
            let mut found = [0u8; 8];
            found[..bytes.len()].copy_from_slice(bytes);
            if bytes.is_empty() || MAGIC[..bytes.len()] != *bytes {
                return Err(PoolError::NotAPool { found });
            }
            return Err(PoolError::Truncated {
                expected: HEADER_SIZE as u64,
                actual: actual_len,
            });
        }
        let magic: [u8; 8] = bytes[0..8].try_into().unwrap();
        if magic != MAGIC {
            return Err(PoolError::NotAPool { found: magic });
        }
        if bytes.len() < HEADER_SIZE {
            return Err(PoolError::Truncated {
                expected: HEADER_SIZE as u64,
                actual: actual_len,
            });
        }
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
        let version = u32_at(8);
        if version != FORMAT_VERSION {
            return Err(PoolError::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let stored = u32_at(CRC_OFF);
        let computed = crc32c::crc32c(&bytes[..CRC_OFF]);
        if stored != computed {
            return Err(PoolError::Checksum { stored, computed });
        }
        let corrupt = |what: String| Err(PoolError::Corrupt { what });
        let hlen = u32_at(12);
        if hlen as usize != HEADER_SIZE {
            return corrupt(format!("header length {hlen}, expected {HEADER_SIZE}"));
        }
        let features = u32_at(16);
        if features & !KNOWN_FEATURES != 0 {
            return corrupt(format!("unknown feature flags {features:#x}"));
        }
        let Some(domain) = Domain::from_code(u32_at(20)) else {
            return corrupt(format!("unknown durability domain code {}", u32_at(20)));
        };
        let size = u64_at(24);
        if size < MIN_POOL_SIZE {
            return corrupt(format!(
                "recorded size {size} is below the minimum {MIN_POOL_SIZE}"
            ));
        }
        if actual_len < size {
            return Err(PoolError::Truncated {
                expected: size,
                actual: actual_len,
            });
        }
        // Bytes 120..124: the maximum of a growable pool, else reserved and
        // zero (a header with bits set there was not written by this format
        // and would not encode back to its bytes).
        let max_size = u64::from(u32_at(120)) * MAX_SIZE_UNIT;
        if features & FEATURE_GROWABLE == 0 && max_size != 0 {
            return corrupt(format!(
                "reserved bytes 120..124 are {:#010x}, not zero",
                u32_at(120)
            ));
        }
        if features & FEATURE_GROWABLE != 0 && max_size < size {
            return corrupt(format!(
                "growable pool's maximum {max_size} is below its size {size}"
            ));
        }
        let name = &bytes[56..120];
        let n = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        if n == 0 || n > MAX_LAYOUT || name[n..].iter().any(|&b| b != 0) {
            return corrupt("layout name is not NUL-padded".into());
        }
        let Ok(layout) = std::str::from_utf8(&name[..n]) else {
            return corrupt("layout name is not UTF-8".into());
        };
        Ok(Header {
            version,
            features,
            domain,
            size,
            max_size,
            created_ns: u64_at(32),
            uuid: bytes[40..56].try_into().unwrap(),
            layout: layout.to_string(),
        })
    }

    /// True for a pool that grows on demand.
    pub fn growable(&self) -> bool {
        self.features & FEATURE_GROWABLE != 0
    }

    /// The UUID in canonical 8-4-4-4-12 form.
    pub fn uuid_string(&self) -> String {
        let h: String = self.uuid.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }
}

/// Validates a layout name for [`Header::layout`].
pub fn check_layout_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_LAYOUT || name.contains('\0') {
        return Err(PoolError::BadLayoutName(format!(
            "'{name}' must be 1 to {MAX_LAYOUT} bytes without NUL"
        )));
    }
    Ok(())
}

/// A random version-4 UUID.
pub fn new_uuid() -> [u8; 16] {
    let mut u: [u8; 16] = rand::random();
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        Header {
            version: FORMAT_VERSION,
            features: 0,
            domain: Domain::Adr,
            size: 1 << 20,
            max_size: 0,
            created_ns: 123,
            uuid: new_uuid(),
            layout: "test".into(),
        }
    }

    #[test]
    fn round_trip() {
        let h = sample();
        let mut b = vec![0u8; HEADER_SIZE];
        h.encode(&mut b);
        assert_eq!(Header::decode(&b, 1 << 20).unwrap(), h);
        assert_eq!(h.uuid_string().len(), 36);
    }

    #[test]
    fn every_single_byte_corruption_of_the_checked_part_is_detected() {
        let h = sample();
        let mut b = vec![0u8; HEADER_SIZE];
        h.encode(&mut b);
        for i in 0..128 {
            let mut c = b.clone();
            c[i] ^= 0x5a;
            assert!(
                Header::decode(&c, 1 << 20).is_err(),
                "byte {i} corruption undetected"
            );
        }
    }

    /// Fuzzing found (fuzz/regressions/pool_header/): non-zero reserved
    /// bytes 120..124 under a valid checksum were accepted.
    #[test]
    fn nonzero_reserved_bytes_are_refused_even_with_a_valid_checksum() {
        let mut b = vec![0u8; HEADER_SIZE];
        sample().encode(&mut b);
        b[122] = 4;
        let crc = crc32c::crc32c(&b[..CRC_OFF]);
        b[CRC_OFF..CRC_OFF + 4].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            Header::decode(&b, 1 << 20),
            Err(PoolError::Corrupt { .. })
        ));
    }

    #[test]
    fn a_growable_header_round_trips_and_a_maximum_below_the_size_is_refused() {
        let h = Header {
            features: FEATURE_GROWABLE,
            max_size: 64 << 20,
            ..sample()
        };
        let mut b = vec![0u8; HEADER_SIZE];
        h.encode(&mut b);
        assert_eq!(Header::decode(&b, 1 << 20).unwrap(), h);
        assert!(h.growable() && !sample().growable());
        let small = Header {
            max_size: 0,
            ..h.clone()
        };
        small.encode(&mut b);
        assert!(matches!(
            Header::decode(&b, 1 << 20),
            Err(PoolError::Corrupt { .. })
        ));
    }

    #[test]
    fn short_inputs_are_errors_not_panics() {
        for n in 0..HEADER_SIZE {
            let mut b = vec![0u8; HEADER_SIZE];
            sample().encode(&mut b);
            assert!(Header::decode(&b[..n], n as u64).is_err());
        }
    }
}
