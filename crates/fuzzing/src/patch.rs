//! The fuzz input of an image target: which base image, then patches.
//!
//! Byte layout (missing bytes read as zero, so every input is valid):
//!
//! | bytes | meaning                                                        |
//! |------:|----------------------------------------------------------------|
//! | 0     | base image: index modulo the number of images                  |
//! | 1     | flags: bit 0 truncates the image (length from the next 4 bytes, little-endian, modulo the image length); bit 2 re-seals the image's checksummed records after patching ([`crate::image::Seal`]); bits 1..8 (bit 2 included) are the target's options |
//! | 2..   | operations until the input ends, each a tag byte then operands |
//!
//! Operations (`tag & 3`; `n = (tag >> 2) % 32 + 1`):
//!
//! | tag & 3 | operands                     | effect                                        |
//! |--------:|------------------------------|-----------------------------------------------|
//! | 0       | line u16, offset u8, n bytes | write the bytes at hot line `line` (modulo the hot-line count) + offset |
//! | 1       | offset u32, n bytes          | write the bytes at `offset` modulo the image length |
//! | 2       | line u16, value u64          | store `value` in word `(tag >> 2) % 8` of the hot line |
//! | 3       | from u16, to u16             | copy hot line `from` over hot line `to` (stale or misdirected data) |
//!
//! Writes past the end of the image are cut off.

use crate::image::{Bases, LINE};

/// A decoded input header and the operations still to apply.
pub struct Input<'a> {
    pub image: usize,
    /// Target options (the flags byte without its truncation bit).
    pub options: u8,
    truncate: Option<u32>,
    ops: &'a [u8],
}

/// A little reader that yields zeros past the end.
struct Cursor<'a> {
    b: &'a [u8],
}

impl Cursor<'_> {
    fn u8(&mut self) -> u8 {
        match self.b.split_first() {
            Some((&x, rest)) => {
                self.b = rest;
                x
            }
            None => 0,
        }
    }

    fn take(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.u8()).collect()
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }
}

impl<'a> Input<'a> {
    pub fn decode(data: &'a [u8]) -> Input<'a> {
        let mut c = Cursor { b: data };
        let image = usize::from(c.u8());
        let flags = c.u8();
        let truncate = (flags & 1 == 1).then(|| c.u32());
        Input {
            image,
            options: flags >> 1,
            truncate,
            ops: c.b,
        }
    }

    /// The patched copy of the selected base image and the index of that image.
    pub fn apply(&self, bases: &Bases) -> (Vec<u8>, usize) {
        self.apply_with(bases, |_| {})
    }

    /// [`Input::apply`] with `fixup` run on the patched image before it is
    /// truncated (e.g. to recompute a checksum).
    pub fn apply_with(&self, bases: &Bases, fixup: impl FnOnce(&mut [u8])) -> (Vec<u8>, usize) {
        let which = self.image % bases.images.len();
        let mut img = bases.images[which].bytes.clone();
        self.patch(&mut img, &bases.hot);
        if self.options & 2 == 2 {
            for s in &bases.seals[which] {
                s.apply(&mut img);
            }
        }
        fixup(&mut img);
        if let Some(t) = self.truncate {
            let len = img.len().max(1);
            img.truncate(t as usize % len);
        }
        (img, which)
    }

    /// Applies the operations to `img`.
    pub fn patch(&self, img: &mut [u8], hot: &[usize]) {
        if img.is_empty() {
            return;
        }
        let line = |i: u16| -> usize {
            if hot.is_empty() {
                0
            } else {
                hot[usize::from(i) % hot.len()]
            }
        };
        let put = |img: &mut [u8], at: usize, bytes: &[u8]| {
            if at < img.len() {
                let n = bytes.len().min(img.len() - at);
                img[at..at + n].copy_from_slice(&bytes[..n]);
            }
        };
        let mut c = Cursor { b: self.ops };
        while !c.b.is_empty() {
            let tag = c.u8();
            let n = usize::from(tag >> 2) % 32 + 1;
            match tag & 3 {
                0 => {
                    let at = line(c.u16()) + usize::from(c.u8());
                    let bytes = c.take(n);
                    put(img, at, &bytes);
                }
                1 => {
                    let at = c.u32() as usize % img.len();
                    let bytes = c.take(n);
                    put(img, at, &bytes);
                }
                2 => {
                    let at = line(c.u16()) + 8 * (usize::from(tag >> 2) % 8);
                    let v = c.u64();
                    put(img, at, &v.to_le_bytes());
                }
                _ => {
                    let from = line(c.u16());
                    let to = line(c.u16());
                    if from + LINE <= img.len() && to + LINE <= img.len() {
                        img.copy_within(from..from + LINE, to);
                    }
                }
            }
        }
    }
}

/// Builders of inputs (seed corpora, tests).
pub mod encode {
    /// The input that opens base image `image` unpatched with `options`.
    pub fn plain(image: u8, options: u8) -> Vec<u8> {
        vec![image, options << 1]
    }

    /// Appends "store `value` in word `word` of hot line `line`".
    pub fn word(out: &mut Vec<u8>, line: u16, word: u8, value: u64) {
        out.push(2 | (word % 8) << 2);
        out.extend_from_slice(&line.to_le_bytes());
        out.extend_from_slice(&value.to_le_bytes());
    }

    /// Appends "copy hot line `from` over `to`".
    pub fn copy_line(out: &mut Vec<u8>, from: u16, to: u16) {
        out.push(3);
        out.extend_from_slice(&from.to_le_bytes());
        out.extend_from_slice(&to.to_le_bytes());
    }

    /// Appends "write `bytes` (1..=32) at absolute offset `at`".
    pub fn at(out: &mut Vec<u8>, at: u32, bytes: &[u8]) {
        assert!((1..=32).contains(&bytes.len()));
        out.push(1 | ((bytes.len() - 1) as u8) << 2);
        out.extend_from_slice(&at.to_le_bytes());
        out.extend_from_slice(bytes);
    }
}
