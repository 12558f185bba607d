//! Keys and values of the YCSB-style workloads.
//!
//! A record is named by its *key number* (0, 1, 2, … in insertion order)
//! and its value is a pure function of (key bytes, version, layout), so a
//! check can verify any value it reads without a model of the run.
//!
//! ## Keys ([`KeyMode`])
//! - [`KeyMode::User`]: YCSB's `CoreWorkload.buildKeyName` with its
//!   defaults (`insertorder=hashed`, `zeropadding=1`): `"user"` followed by
//!   the decimal digits of [`fnvhash64`]`(keynum)` — 5 to 23 ASCII bytes.
//! - [`KeyMode::Int`]: P2's 8-byte integer primary key, YCSB's hashed
//!   order: `fnvhash64(keynum)` as 8 bytes big-endian (so byte order is
//!   numeric order, and inserts land all over the key space as in YCSB).
//! - [`KeyMode::Ordered`]: `keynum` itself, 8 bytes big-endian (YCSB's
//!   `insertorder=ordered`): inserts append at the end of the key space.
//!
//! ## Values ([`ValueLayout`])
//! `Fields { count, len }` is `count` columns of `len` bytes concatenated
//! (P2: 5 × 200 B; YCSB core: 10 × 100 B); `Var { min, max }` has a length
//! in `min..=max` chosen by a hash of (key, version) — uniform over the
//! range, so a verifier can recompute it (P2's YCSB-var: 1..=256 B).
//!
//! Value bytes, for a value of length L:
//! - bytes 0..16 (only when L >= 16): the version as 16 lowercase hex
//!   digits, so a verifier can tell which version it holds;
//! - the rest, as 64-bit words i = 0, 1, … written low byte first (the
//!   last one cut short): `P[i % 512] ^ (s + i·G)` where G =
//!   0x9E3779B97F4A7C15, P = the first 512 SplitMix64 outputs from state
//!   0, and s = one SplitMix64 step from `fnv1a64(key) ^ version·G`; each
//!   byte then mapped to `b'0' + (b & 63)` (printable ASCII `'0'..='o'`,
//!   like YCSB's random strings).
//!
//! Loaded records are version 0; a generator's writes use fresh versions
//! (see [`crate::ycsb::Generator`]).

use crate::dist::fnvhash64;

/// How key numbers become key bytes (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyMode {
    User,
    Int,
    Ordered,
}

impl KeyMode {
    /// The longest key this mode produces.
    pub const fn max_len(self) -> usize {
        match self {
            KeyMode::User => 4 + 20,
            KeyMode::Int | KeyMode::Ordered => 8,
        }
    }

    /// Writes the key of `keynum` into `out` (cleared first).
    #[inline]
    pub fn write_key(self, keynum: u64, out: &mut Vec<u8>) {
        out.clear();
        match self {
            KeyMode::User => {
                out.extend_from_slice(b"user");
                push_decimal(fnvhash64(keynum), out);
            }
            KeyMode::Int => out.extend_from_slice(&fnvhash64(keynum).to_be_bytes()),
            KeyMode::Ordered => out.extend_from_slice(&keynum.to_be_bytes()),
        }
    }

    /// The key of `keynum` as a new vector (for tests and tools; the
    /// generators reuse a buffer).
    pub fn key(self, keynum: u64) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.max_len());
        self.write_key(keynum, &mut v);
        v
    }
}

/// Appends the decimal digits of `v` without allocating.
fn push_decimal(mut v: u64, out: &mut Vec<u8>) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// The shape of values (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueLayout {
    Fields { count: u32, len: u32 },
    Var { min: u32, max: u32 },
}

/// Why a value failed verification.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("value of {len} bytes: this layout's values are {min}..={max} bytes")]
    Length { len: usize, min: usize, max: usize },
    #[error("value of {len} bytes has no version header (values shorter than 16 bytes carry none)")]
    NoHeader { len: usize },
    #[error("value header is not a version (16 hex digits)")]
    BadHeader,
    #[error("value bytes differ from version {version} of this key at byte {at}")]
    Mismatch { version: u64, at: usize },
}

/// Values of at least this many bytes start with the version header.
pub const HEADER_LEN: usize = 16;

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// 64-bit FNV-1a over bytes (seeds the value stream from the key).
#[inline]
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(1_099_511_628_211);
    }
    h
}

#[inline]
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(GOLDEN);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl ValueLayout {
    /// P2's tuple: 5 columns × 200 B.
    pub const P2: ValueLayout = ValueLayout::Fields { count: 5, len: 200 };
    /// YCSB core: 10 fields × 100 B.
    pub const YCSB: ValueLayout = ValueLayout::Fields {
        count: 10,
        len: 100,
    };
    /// P2's YCSB-var: 1..=256 B.
    pub const P2_VAR: ValueLayout = ValueLayout::Var { min: 1, max: 256 };

    /// Smallest and largest value length.
    pub fn bounds(self) -> (usize, usize) {
        match self {
            ValueLayout::Fields { count, len } => {
                let l = count as usize * len as usize;
                (l, l)
            }
            ValueLayout::Var { min, max } => (min as usize, max as usize),
        }
    }

    /// Column `i` of a `Fields` value (None past the last column, for a
    /// `Var` layout, or when `value` is too short). The header is part of
    /// column 0.
    pub fn field(self, value: &[u8], i: u32) -> Option<&[u8]> {
        match self {
            ValueLayout::Fields { count, len } if i < count => {
                let (at, len) = (i as usize * len as usize, len as usize);
                value.get(at..at + len)
            }
            _ => None,
        }
    }

    /// Length of version `version` of `key`'s value.
    #[inline]
    pub fn len_of(self, key: &[u8], version: u64) -> usize {
        match self {
            ValueLayout::Fields { count, len } => count as usize * len as usize,
            ValueLayout::Var { min, max } => {
                let span = (max - min) as u64 + 1;
                let h = fnvhash64(fnv1a64(key) ^ version.wrapping_mul(GOLDEN));
                min as usize + (h % span) as usize
            }
        }
    }

    /// Writes version `version` of `key`'s value into `out` (cleared
    /// first). No allocation once `out` has grown to the largest value.
    pub fn write_value(self, key: &[u8], version: u64, out: &mut Vec<u8>) {
        let len = self.len_of(key, version);
        // Every byte is overwritten by `fill`: only grow, never re-zero.
        out.truncate(len);
        out.resize(len, 0);
        fill(key, version, out);
    }

    /// The version `value` holds, after checking every byte against it.
    pub fn verify(self, key: &[u8], value: &[u8]) -> Result<u64, ValueError> {
        let (min, max) = self.bounds();
        if value.len() < min || value.len() > max {
            return Err(ValueError::Length {
                len: value.len(),
                min,
                max,
            });
        }
        if value.len() < HEADER_LEN {
            return Err(ValueError::NoHeader { len: value.len() });
        }
        let mut version = 0u64;
        for &c in &value[..HEADER_LEN] {
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                _ => return Err(ValueError::BadHeader),
            };
            version = (version << 4) | d as u64;
        }
        self.verify_version(key, version, value)?;
        Ok(version)
    }

    /// Checks that `value` is exactly version `version` of `key`'s value
    /// (works for every length, header or not).
    pub fn verify_version(self, key: &[u8], version: u64, value: &[u8]) -> Result<(), ValueError> {
        let want = self.len_of(key, version);
        if value.len() != want {
            return Err(ValueError::Length {
                len: value.len(),
                min: want,
                max: want,
            });
        }
        let mut buf = [0u8; 256];
        let mut expect = Vec::new();
        let exp: &mut [u8] = if want <= buf.len() {
            &mut buf[..want]
        } else {
            expect.resize(want, 0);
            &mut expect
        };
        fill(key, version, exp);
        match exp.iter().zip(value).position(|(a, b)| a != b) {
            Some(at) => Err(ValueError::Mismatch { version, at }),
            None => Ok(()),
        }
    }
}

/// Fills `out` (its length fixed by the caller) per the module docs.
fn fill(key: &[u8], version: u64, out: &mut [u8]) {
    let body = if out.len() >= HEADER_LEN {
        for (i, b) in out[..HEADER_LEN].iter_mut().enumerate() {
            let nib = (version >> (60 - 4 * i)) & 0xf;
            *b = b"0123456789abcdef"[nib as usize];
        }
        &mut out[HEADER_LEN..]
    } else {
        out
    };
    // Word i of the body is PATTERN[i % 512] ^ (seed + i·GOLDEN): a fixed
    // random pattern (so neighbouring words differ) under a per-(key,
    // version) Weyl sequence (so every word depends on key and version).
    // Two operations per eight bytes: generation stays well under the cost
    // of the operation it feeds.
    let seed = splitmix(&mut (fnv1a64(key) ^ version.wrapping_mul(GOLDEN)));
    let pattern = pattern();
    let word = |i: usize| {
        let w = pattern[i % PATTERN_WORDS] ^ seed.wrapping_add((i as u64).wrapping_mul(GOLDEN));
        ((w & 0x3f3f_3f3f_3f3f_3f3f) + 0x3030_3030_3030_3030).to_le_bytes()
    };
    let mut chunks = body.chunks_exact_mut(8);
    let mut i = 0;
    for chunk in &mut chunks {
        chunk.copy_from_slice(&word(i));
        i += 1;
    }
    let tail = chunks.into_remainder();
    if !tail.is_empty() {
        let n = tail.len();
        tail.copy_from_slice(&word(i)[..n]);
    }
}

const PATTERN_WORDS: usize = 512;

/// SplitMix64 outputs 1..=512 from state 0, computed once.
fn pattern() -> &'static [u64; PATTERN_WORDS] {
    static PATTERN: std::sync::OnceLock<[u64; PATTERN_WORDS]> = std::sync::OnceLock::new();
    PATTERN.get_or_init(|| {
        let mut state = 0u64;
        std::array::from_fn(|_| splitmix(&mut state))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_keys_are_ycsb_names() {
        let k = KeyMode::User.key(0);
        assert!(k.starts_with(b"user"));
        let digits = std::str::from_utf8(&k[4..]).unwrap();
        assert_eq!(digits.parse::<u64>().unwrap(), fnvhash64(0));
        assert_eq!(KeyMode::Ordered.key(258), 258u64.to_be_bytes());
        assert_eq!(KeyMode::Int.key(3), fnvhash64(3).to_be_bytes());
        assert!(KeyMode::User.key(u64::MAX).len() <= KeyMode::User.max_len());
    }

    #[test]
    fn values_verify_and_detect_damage() {
        for layout in [ValueLayout::P2, ValueLayout::YCSB] {
            let key = KeyMode::Int.key(42);
            let mut v = Vec::new();
            layout.write_value(&key, 77, &mut v);
            assert_eq!(v.len(), 1000);
            assert_eq!(layout.verify(&key, &v), Ok(77));
            let ValueLayout::Fields { count, len } = layout else {
                panic!()
            };
            assert_eq!(
                layout.field(&v, count - 1).map(<[u8]>::len),
                Some(len as usize)
            );
            assert_eq!(layout.field(&v, count), None);
            v[500] ^= 1;
            assert!(matches!(
                layout.verify(&key, &v),
                Err(ValueError::Mismatch {
                    version: 77,
                    at: 500
                })
            ));
            // Another key's value does not verify under this key.
            let mut w = Vec::new();
            layout.write_value(&KeyMode::Int.key(43), 77, &mut w);
            assert!(layout.verify(&key, &w).is_err());
        }
    }

    #[test]
    fn var_lengths_cover_the_range_and_verify() {
        let l = ValueLayout::P2_VAR;
        let mut seen = [false; 257];
        let mut v = Vec::new();
        for n in 0..20_000u64 {
            let key = KeyMode::Int.key(n);
            l.write_value(&key, n % 3, &mut v);
            assert!((1..=256).contains(&v.len()));
            seen[v.len()] = true;
            assert_eq!(l.verify_version(&key, n % 3, &v), Ok(()));
            if v.len() >= HEADER_LEN {
                assert_eq!(l.verify(&key, &v), Ok(n % 3));
            } else {
                assert!(matches!(
                    l.verify(&key, &v),
                    Err(ValueError::NoHeader { .. })
                ));
            }
        }
        assert!(seen[1..].iter().all(|s| *s), "every length 1..=256 drawn");
    }
}
