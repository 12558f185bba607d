//! Seed corpora: for every image target, one input per base image (the
//! real pool, clean or crashed, unpatched) with and without the target's
//! option bit, plus a few patches of the first hot lines; for the protocol,
//! real requests of the three protocols. `cargo run -p ferrite-fuzzing
//! --bin fuzz-seeds -- fuzz/corpus` writes them (file names are the content
//! hash, as libFuzzer names corpus files).

use crate::patch::encode;
use crate::{TARGETS, Target};

/// Requests of the text, meta and binary protocols, pipelined in places.
const PROTOCOL: &[&[u8]] = &[
    b"set k 7 0 2\r\nhi\r\nget k nope\r\n",
    b"gets a b c\r\ngat 10 a\r\ncas k 0 0 1 5 noreply\r\nx\r\n",
    b"incr n 5\r\ndecr n 1\r\ntouch k 10\r\ndelete k\r\nflush_all 0\r\nstats settings\r\nversion\r\nverbosity 1\r\nquit\r\n",
    b"append k 0 0 3\r\nabc\r\nprepend k 0 0 1\r\nz\r\nadd q 1 2 0\r\n\r\nreplace q 0 0 1\r\nr\r\n",
    b"mg k v f t c s k O123 q\r\nms k 2 T10 F5 I\r\nhi\r\nmd k q\r\nma n D5 MI N10\r\nmn\r\nme k\r\n",
    b"mg a2V5 b v\r\nms a2V5 S2 b MA\r\nhi\r\n",
    // Binary: get "k" (opcode 0x00), then a set "k"="v" with flags/expiry extras.
    b"\x80\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x07\x00\x00\x00\x00\x00\x00\x00\x00k\
\x80\x01\x00\x01\x08\x00\x00\x00\x00\x00\x00\x0a\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x00\x00\
\x00\x00\x00\x05\x00\x00\x00\x00kv",
    // Binary: incr with its 20 bytes of extras, noop, version.
    b"\x80\x05\x00\x01\x14\x00\x00\x00\x00\x00\x00\x15\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\
\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00n\
\x80\x0a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\
\x80\x0b\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
    b"get \r\nset k 0 0 99999999999\r\nGET / HTTP/1.1\r\n",
];

/// The seed inputs of `t`.
pub fn seeds(t: &Target) -> Vec<Vec<u8>> {
    let Some(bases) = t.bases else {
        return PROTOCOL.iter().map(|s| s.to_vec()).collect();
    };
    let b = bases();
    let mut out = Vec::new();
    for i in 0..b.images.len() {
        let i = i as u8;
        out.push(encode::plain(i, 0));
        out.push(encode::plain(i, 1));
    }
    // A few structured patches on the first image: zero and all-ones words
    // in the first hot lines, and a stale copy of one line over the next.
    // The same with the checksummed records re-sealed (option bit 1), so
    // the fields behind the checksums are reached.
    for line in 0..4u16.min(b.hot.len() as u16) {
        for opt in [1, 3] {
            let mut x = encode::plain(0, opt);
            encode::word(&mut x, line, 0, 0);
            out.push(x);
            let mut x = encode::plain(0, opt);
            encode::word(&mut x, line, 1, u64::MAX);
            out.push(x);
        }
    }
    if b.hot.len() > 2 {
        let mut x = encode::plain(0, 0);
        encode::copy_line(&mut x, 1, 2);
        out.push(x);
    }
    out
}

/// The file name libFuzzer gives an input: a hash of its content (here
/// FNV-1a, 64 bits, in hex; any stable name works).
pub fn file_name(data: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("seed-{h:016x}")
}

/// Writes every target's seeds under `dir/<target>/`.
pub fn write_all(dir: &std::path::Path) -> std::io::Result<usize> {
    let mut n = 0;
    for t in TARGETS {
        if let Some(b) = t.bases {
            let b = b();
            println!(
                "{}: {} base images, {} hot lines, {} checksummed records",
                t.name,
                b.images.len(),
                b.hot.len(),
                b.seals.iter().map(Vec::len).sum::<usize>()
            );
        }
        let d = dir.join(t.name);
        std::fs::create_dir_all(&d)?;
        for s in seeds(t) {
            std::fs::write(d.join(file_name(&s)), &s)?;
            n += 1;
        }
    }
    Ok(n)
}
