//! Sizes on the command line: the one parser every size option uses, and
//! the one way sizes are printed.
//!
//! # Accepted forms
//!
//! A number, optional spaces, an optional unit (case-insensitive):
//!
//! | unit                  | bytes |
//! |-----------------------|-------|
//! | none, `B`             | 1     |
//! | `K`, `KB`, `KiB`      | 2^10  |
//! | `M`, `MB`, `MiB`      | 2^20  |
//! | `G`, `GB`, `GiB`      | 2^30  |
//! | `T`, `TB`, `TiB`      | 2^40  |
//! | `P`, `PB`, `PiB`      | 2^50  |
//!
//! **`MB` means 2^20, like `MiB`.** These options size memory (pools are
//! mapped, `serve --memory` is memcached's `-m`), and memory tools —
//! memcached, `free`, JEDEC — count kilo/mega/giga in powers of two. A
//! decimal reading would also make common sizes such as `1GB` (10^9 =
//! 244140.625 pages) impossible pool sizes. Whoever wants 10^6 bytes writes
//! `1000000`.
//!
//! The number may have a fraction (`1.5G`, `0.25M`) when the result is a
//! whole number of bytes: `1.5K` is 1536, `0.3K` (307.2 bytes) is refused.
//! Refused too, each with a one-line reason: empty input, a sign (`-1M`,
//! `+1M`), an unknown unit, and anything above 2^64 - 1 bytes.
//!
//! Zero parses (it is a size); the options decide whether they accept it
//! ([`parse_pool`] does not).
//!
//! # Pool sizes
//!
//! A pool is mapped page by page, so [`parse_pool`] wants a multiple of
//! [`PAGE`] and at least [`ferrite_pmem::header::MIN_POOL_SIZE`]. It refuses a
//! size that is not, naming the page multiples on either side, rather than
//! rounding: the size is recorded in the pool's header and allocated on
//! disk, and which way to round (less room than asked, or more disk than
//! asked) is the user's decision, not ours.

use std::fmt;

/// Bytes of a page (the pool mapping's): pool sizes are multiples of it.
pub const PAGE: u64 = ferrite_pmem::PAGE as u64;

/// Why a size was refused. `Display` is one line naming the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("empty size (write e.g. 4096, 64M, 64MiB or 1.5G)")]
    Empty,
    #[error("size '{0}' is negative")]
    Negative(String),
    #[error("size '{0}' is not a number (write e.g. 4096, 64M, 64MiB or 1.5G)")]
    NotANumber(String),
    #[error(
        "size '{input}' has an unknown unit '{unit}' (use B, K, M, G, T or P, optionally followed by B or iB)"
    )]
    UnknownUnit { input: String, unit: String },
    #[error("size '{0}' is not a whole number of bytes")]
    Fractional(String),
    #[error("size '{0}' is too large (at most 16 EiB - 1 byte)")]
    Overflow(String),
    #[error("pool size {} is too small (at least {min} bytes)", said(input, *bytes))]
    TooSmallForPool { input: String, bytes: u64, min: u64 },
    #[error(
        "pool size {} is not a multiple of the {PAGE}-byte page (use {below} or {above})",
        said(input, *bytes)
    )]
    NotPageAligned {
        input: String,
        bytes: u64,
        below: u64,
        above: u64,
    },
}

/// `'64.5K' = 66048 bytes`, or `'1000'` alone when that is the byte count.
fn said(input: &str, bytes: u64) -> String {
    if input == bytes.to_string() {
        format!("'{input}'")
    } else {
        format!("'{input}' = {bytes} bytes")
    }
}

/// The multiplier of a unit (already trimmed), or `None` when unknown.
fn unit(u: &str) -> Option<u64> {
    let u = u.to_ascii_lowercase();
    // "b" alone is bytes; otherwise a prefix letter, then "", "b" or "ib".
    if u.is_empty() || u == "b" {
        return Some(1);
    }
    let mut chars = u.chars();
    let shift = match chars.next()? {
        'k' => 10,
        'm' => 20,
        'g' => 30,
        't' => 40,
        'p' => 50,
        _ => return None,
    };
    match chars.as_str() {
        "" | "b" | "ib" => Some(1u64 << shift),
        _ => None,
    }
}

/// Parses a size (see the module documentation for the forms).
pub fn parse(input: &str) -> Result<u64, SizeError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(SizeError::Empty);
    }
    if s.starts_with('-') {
        return Err(SizeError::Negative(s.into()));
    }
    // The number: digits with at most one '.', at least one digit.
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, rest) = s.split_at(num_end);
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') {
        return Err(SizeError::NotANumber(s.into()));
    }
    let unit_str = rest.trim_start();
    let mult = unit(unit_str).ok_or_else(|| {
        if unit_str.starts_with(|c: char| c.is_ascii_alphabetic()) {
            SizeError::UnknownUnit {
                input: s.into(),
                unit: unit_str.into(),
            }
        } else {
            SizeError::NotANumber(s.into())
        }
    })?;
    let over = || SizeError::Overflow(s.into());
    // value = (int . frac) * mult = (int * 10^f + frac) * mult / 10^f, in
    // u128 so that every intermediate of an in-range result fits.
    let frac = frac.trim_end_matches('0');
    // 10^38 is the largest power of ten in a u128; beyond 30 decimals no
    // multiplier up to 2^50 can make a whole number anyway.
    if frac.len() > 30 {
        return Err(SizeError::Fractional(s.into()));
    }
    let digits = |d: &str| -> Result<u128, SizeError> {
        d.bytes().try_fold(0u128, |acc, b| {
            acc.checked_mul(10)
                .and_then(|a| a.checked_add(u128::from(b - b'0')))
                .ok_or_else(over)
        })
    };
    let scale = 10u128.pow(frac.len() as u32);
    let scaled = digits(int)?
        .checked_mul(scale)
        .and_then(|v| v.checked_add(digits(frac).ok()?))
        .ok_or_else(over)?;
    let total = scaled.checked_mul(u128::from(mult)).ok_or_else(over)?;
    if total % scale != 0 {
        return Err(SizeError::Fractional(s.into()));
    }
    u64::try_from(total / scale).map_err(|_| over())
}

/// Parses a pool size: a size ([`parse`]) that is a whole number of pages
/// and at least the smallest pool.
pub fn parse_pool(input: &str) -> Result<u64, SizeError> {
    let bytes = parse(input)?;
    check_pool(input.trim(), bytes)?;
    Ok(bytes)
}

/// Checks that `bytes` (given as `input`) can be a pool's size.
pub fn check_pool(input: &str, bytes: u64) -> Result<(), SizeError> {
    let min = ferrite_pmem::header::MIN_POOL_SIZE;
    if bytes < min {
        return Err(SizeError::TooSmallForPool {
            input: input.into(),
            bytes,
            min,
        });
    }
    if !bytes.is_multiple_of(PAGE) {
        let below = bytes / PAGE * PAGE;
        return Err(SizeError::NotPageAligned {
            input: input.into(),
            bytes,
            below,
            above: below.saturating_add(PAGE),
        });
    }
    Ok(())
}

/// `bytes` in the largest binary unit it reaches: exact when it is a whole
/// number of that unit (`64 MiB`), else to at most two decimals (`1.5 GiB`,
/// `1.49 GiB`);
/// below 1 KiB in bytes (`512 B`).
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut pick = None;
    for (i, u) in UNITS.iter().enumerate() {
        let shift = 10 * (i as u32 + 1);
        if bytes >> shift == 0 {
            break;
        }
        pick = Some((shift, *u));
    }
    match pick {
        None => format!("{bytes} B"),
        Some((shift, u)) if bytes.trailing_zeros() >= shift => {
            format!("{} {u}", bytes >> shift)
        }
        Some((shift, u)) => {
            let v = format!("{:.2}", bytes as f64 / (1u64 << shift) as f64);
            format!("{} {u}", v.trim_end_matches('0').trim_end_matches('.'))
        }
    }
}

/// `64 MiB (67108864 bytes)`: human and exact.
pub struct Both(pub u64);

impl fmt::Display for Both {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 < 1024 {
            write!(f, "{} bytes", self.0)
        } else {
            write!(f, "{} ({} bytes)", human(self.0), self.0)
        }
    }
}

/// The clap value parser for size options.
pub fn arg(s: &str) -> Result<u64, String> {
    parse(s).map_err(|e| e.to_string())
}

/// The clap value parser for pool sizes.
pub fn pool_arg(s: &str) -> Result<u64, String> {
    parse_pool(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = 1 << 10;
    const M: u64 = 1 << 20;
    const G: u64 = 1 << 30;
    const T: u64 = 1 << 40;

    #[test]
    fn every_spelling_of_every_unit() {
        let cases: &[(&str, u64)] = &[
            ("4096", 4096),
            ("0", 0),
            ("7B", 7),
            ("7 b", 7),
            ("64K", 64 * K),
            ("64k", 64 * K),
            ("64KiB", 64 * K),
            ("64kib", 64 * K),
            ("64KB", 64 * K),
            ("64M", 64 * M),
            ("64MiB", 64 * M),
            ("64MB", 64 * M),
            ("64mb", 64 * M),
            ("64 MiB", 64 * M),
            (" 64M ", 64 * M),
            ("1G", G),
            ("1GiB", G),
            ("1GB", G),
            ("1gB", G),
            ("1T", T),
            ("2TiB", 2 * T),
            ("3TB", 3 * T),
            ("1P", 1 << 50),
            ("1.5G", G + G / 2),
            ("1.5 GiB", G + G / 2),
            ("0.25M", M / 4),
            (".5K", 512),
            ("2.", 2),
            ("1.500K", 1536),
            ("0001K", K),
            ("15.75P", 15 * (1 << 50) + 3 * (1 << 48)),
        ];
        for &(s, want) in cases {
            assert_eq!(parse(s), Ok(want), "{s}");
        }
        // Exact decimals are exact however long; one that is not is refused.
        assert_eq!(parse("0.000000000931322574615478515625G"), Ok(1));
        assert!(matches!(
            parse("15.999999999999999999P"),
            Err(SizeError::Fractional(_))
        ));
    }

    #[test]
    fn the_largest_size_and_one_past_it() {
        assert_eq!(parse("18446744073709551615"), Ok(u64::MAX));
        assert!(matches!(
            parse("18446744073709551616"),
            Err(SizeError::Overflow(_))
        ));
        assert_eq!(parse("16383P"), Ok(16383 << 50));
        assert!(matches!(parse("16384P"), Err(SizeError::Overflow(_))));
        assert!(matches!(
            parse("99999999999999999999999999999999999999999T"),
            Err(SizeError::Overflow(_))
        ));
        assert!(matches!(parse("20000000T"), Err(SizeError::Overflow(_))));
    }

    #[test]
    fn refusals_are_typed_and_one_line() {
        type Is = fn(&SizeError) -> bool;
        let bad: &[(&str, Is)] = &[
            ("", |e| matches!(e, SizeError::Empty)),
            ("   ", |e| matches!(e, SizeError::Empty)),
            ("-1", |e| matches!(e, SizeError::Negative(_))),
            ("-64M", |e| matches!(e, SizeError::Negative(_))),
            ("+64M", |e| matches!(e, SizeError::NotANumber(_))),
            ("M", |e| matches!(e, SizeError::NotANumber(_))),
            (".", |e| matches!(e, SizeError::NotANumber(_))),
            ("1.2.3K", |e| matches!(e, SizeError::NotANumber(_))),
            ("1,5G", |e| matches!(e, SizeError::NotANumber(_))),
            ("0x10", |e| matches!(e, SizeError::UnknownUnit { .. })),
            ("12Q", |e| matches!(e, SizeError::UnknownUnit { .. })),
            ("64MiBs", |e| matches!(e, SizeError::UnknownUnit { .. })),
            ("64Mi", |e| matches!(e, SizeError::UnknownUnit { .. })),
            ("64 M B", |e| matches!(e, SizeError::UnknownUnit { .. })),
            ("1E", |e| matches!(e, SizeError::UnknownUnit { .. })),
            ("0.3K", |e| matches!(e, SizeError::Fractional(_))),
            ("1.5", |e| matches!(e, SizeError::Fractional(_))),
            ("0.1B", |e| matches!(e, SizeError::Fractional(_))),
        ];
        for (s, ok) in bad {
            let e = parse(s).expect_err(s);
            assert!(ok(&e), "{s}: {e:?}");
            let msg = e.to_string();
            assert_eq!(msg.lines().count(), 1, "{msg}");
            if !s.trim().is_empty() {
                assert!(msg.contains(s.trim()), "{msg} names {s}");
            }
        }
    }

    #[test]
    fn pool_sizes_are_whole_pages_and_not_tiny() {
        assert_eq!(parse_pool("64M"), Ok(64 * M));
        assert_eq!(parse_pool("8K"), Ok(8 * K));
        assert_eq!(parse_pool("1.5G"), Ok(G + G / 2));
        let e = parse_pool("1000000").unwrap_err();
        assert_eq!(
            e,
            SizeError::NotPageAligned {
                input: "1000000".into(),
                bytes: 1_000_000,
                below: 999_424,
                above: 1_003_520
            }
        );
        assert_eq!(
            e.to_string(),
            "pool size '1000000' is not a multiple of the 4096-byte page (use 999424 or 1003520)"
        );
        assert_eq!(
            parse_pool("4.5K").unwrap_err().to_string(),
            "pool size '4.5K' = 4608 bytes is too small (at least 8192 bytes)"
        );
        assert!(matches!(
            parse_pool("0"),
            Err(SizeError::TooSmallForPool { .. })
        ));
        assert!(matches!(
            parse_pool("4K"),
            Err(SizeError::TooSmallForPool { .. })
        ));
        assert!(matches!(
            parse_pool("1.0001M"),
            Err(SizeError::Fractional(_))
        ));
        // The largest page multiple parses; rounding up from above it
        // saturates instead of wrapping.
        let e = check_pool("x", u64::MAX).unwrap_err();
        assert!(matches!(
            e,
            SizeError::NotPageAligned {
                above: u64::MAX,
                ..
            }
        ));
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(1024), "1 KiB");
        assert_eq!(human(64 * M), "64 MiB");
        assert_eq!(human(G + G / 2), "1.5 GiB");
        assert_eq!(human(G + G / 2 - 1), "1.5 GiB");
        assert_eq!(human(G + 10 * M), "1.01 GiB");
        assert_eq!(human(1_000_000), "976.56 KiB");
        assert_eq!(human(2 * T), "2 TiB");
        assert_eq!(human(u64::MAX), "16 EiB");
        assert_eq!(Both(64 * M).to_string(), "64 MiB (67108864 bytes)");
        assert_eq!(Both(100).to_string(), "100 bytes");
        // What is printed parses back to the same size when exact.
        for b in [K, 64 * M, 3 * G, 5 * T] {
            assert_eq!(parse(&human(b)), Ok(b));
        }
    }
}
