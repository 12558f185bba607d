//! Standard base64 (RFC 4648, `+/`, `=` padding) for meta `b` keys.
//!
//! Decoding is strict: the length must be a multiple of 4, padding only at
//! the end, and unused low bits of the last symbol must be zero, so each
//! binary key has exactly one wire spelling and echoing the wire key (`k`)
//! equals re-encoding the stored key.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Encode `data`.
pub fn encode(data: &[u8], out: &mut Vec<u8>) {
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
}

fn value(c: u8) -> Option<u32> {
    Some(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    } as u32)
}

/// Decode `text`; `None` if it is not canonical base64 or decodes to nothing.
pub fn decode(text: &[u8]) -> Option<Vec<u8>> {
    if text.is_empty() || !text.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let groups = text.len() / 4;
    for (g, quad) in text.chunks(4).enumerate() {
        let last = g + 1 == groups;
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &c in &quad[..4 - pad] {
            n = (n << 6) | value(c)?;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        let keep = 3 - pad;
        // Canonical form: the bits padding drops must be zero.
        if bytes[keep..].iter().any(|&b| b != 0) {
            return None;
        }
        out.extend_from_slice(&bytes[..keep]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(d: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        encode(d, &mut v);
        v
    }

    #[test]
    fn rfc4648_vectors() {
        let cases: [(&[u8], &[u8]); 6] = [
            (b"f", b"Zg=="),
            (b"fo", b"Zm8="),
            (b"foo", b"Zm9v"),
            (b"foob", b"Zm9vYg=="),
            (b"fooba", b"Zm9vYmE="),
            (b"foobar", b"Zm9vYmFy"),
        ];
        for (plain, coded) in cases {
            assert_eq!(enc(plain), coded);
            assert_eq!(decode(coded).as_deref(), Some(plain));
        }
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            &b""[..],
            b"Zg",
            b"Zg=",
            b"Z===",
            b"Zh==",
            b"Zg==Zg==",
            b"Zm9v!A==",
            b"====",
        ] {
            assert_eq!(decode(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn round_trips_all_byte_values() {
        let data: Vec<u8> = (0..=255u8).collect();
        for len in 1..data.len() {
            assert_eq!(decode(&enc(&data[..len])).as_deref(), Some(&data[..len]));
        }
    }
}
