//! TPC-C's random fields (2.1.6, 4.3.2): NURand, a-strings, n-strings,
//! addresses, data fields with `ORIGINAL`, and the syllable last names.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y - x + 1)) + x.
#[inline]
pub(super) fn nurand(rng: &mut ChaCha8Rng, a: u32, x: u32, y: u32, c: u32) -> u32 {
    let r = rng.random_range(0..=a) | rng.random_range(x..=y);
    ((r + c) % (y - x + 1)) + x
}

const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// Random a-string of length min..=max into `field` (zero-padded).
pub(super) fn astring(rng: &mut ChaCha8Rng, field: &mut [u8], min: usize, max: usize) {
    let max = max.min(field.len());
    let len = rng.random_range(min.min(max)..=max);
    for (k, b) in field.iter_mut().enumerate() {
        *b = if k < len {
            ALNUM[rng.random_range(0..ALNUM.len())]
        } else {
            0
        };
    }
}

/// Random n-string (digits) filling `field`.
pub(super) fn nstring(rng: &mut ChaCha8Rng, field: &mut [u8]) {
    for b in field {
        *b = b'0' + rng.random_range(0..10u8);
    }
}

/// The TPC-C address block: street_1, street_2, city (10..20), state (2
/// letters), zip (4 random digits + "11111").
pub(super) fn address(rng: &mut ChaCha8Rng, field: &mut [u8]) {
    astring(rng, &mut field[0..20], 10, 20);
    astring(rng, &mut field[20..40], 10, 20);
    astring(rng, &mut field[40..60], 10, 20);
    for b in &mut field[60..62] {
        *b = b'A' + rng.random_range(0..26u8);
    }
    nstring(rng, &mut field[62..66]);
    field[66..71].copy_from_slice(b"11111");
}

/// A data field of min..=max characters, 10 % containing "ORIGINAL".
pub(super) fn data_field(rng: &mut ChaCha8Rng, field: &mut [u8], min: usize, max: usize) {
    astring(rng, field, min, max);
    if rng.random_range(0..10) == 0 {
        let len = field.iter().position(|b| *b == 0).unwrap_or(field.len());
        let at = rng.random_range(0..=len - 8);
        field[at..at + 8].copy_from_slice(b"ORIGINAL");
    }
}

const SYLLABLES: [&[u8]; 10] = [
    b"BAR", b"OUGHT", b"ABLE", b"PRI", b"PRES", b"ESE", b"ANTI", b"CALLY", b"ATION", b"EING",
];

/// TPC-C's last name of number `n` (0..=999): three syllables for its
/// three digits, zero-padded to 16 bytes.
pub fn last_name(n: u32) -> [u8; 16] {
    let mut out = [0u8; 16];
    let mut at = 0;
    for digit in [n / 100 % 10, n / 10 % 10, n % 10] {
        let s = SYLLABLES[digit as usize];
        out[at..at + s.len()].copy_from_slice(s);
        at += s.len();
    }
    out
}
