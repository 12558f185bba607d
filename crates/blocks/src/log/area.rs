//! Access to the log's data area by logical position: a position grows
//! without bound and maps to `pos % capacity`, so every read, write and
//! flush here splits at the wrap; entry headers and their checksums.

use super::{Algorithm, ENTRY_HEADER, Log};

impl Log {
    // ---- data-area access (logical positions; wrap handled here) --------------

    #[inline]
    pub(super) fn phys(&self, pos: u64) -> usize {
        (pos % self.geo.cap) as usize
    }

    /// `p + n` as a data-area offset, for `p` an offset and `n` at most the
    /// capacity: a compare instead of a division on the append path.
    #[inline]
    pub(super) fn wrap_add(&self, p: usize, n: usize) -> usize {
        let q = p + n;
        if q >= self.geo.cap as usize {
            q - self.geo.cap as usize
        } else {
            q
        }
    }

    /// Splits `len` bytes at data-area offset `p` into at most two pieces
    /// (region offset, length), the second starting at the data area's start.
    #[inline]
    pub(super) fn pieces_at(&self, p: usize, len: usize) -> [(usize, usize); 2] {
        let first = len.min(self.geo.cap as usize - p);
        [
            (self.geo.data_off + p, first),
            (self.geo.data_off, len - first),
        ]
    }

    #[inline]
    pub(super) fn pieces(&self, pos: u64, len: usize) -> [(usize, usize); 2] {
        self.pieces_at(self.phys(pos), len)
    }

    /// Stores `src` at data-area offset `p` (wrapping at the end).
    #[inline]
    pub(super) fn put_at(&self, p: usize, src: &[u8]) {
        let [(o1, n1), (o2, n2)] = self.pieces_at(p, src.len());
        self.region.write(o1, &src[..n1]);
        if n2 > 0 {
            self.region.write(o2, &src[n1..]);
        }
    }

    /// Flushes `len` bytes at data-area offset `p` (wrapping at the end).
    #[inline]
    pub(super) fn flush_at(&self, p: usize, len: usize) {
        let [(o1, n1), (o2, n2)] = self.pieces_at(p, len);
        self.region.flush(o1, n1);
        if n2 > 0 {
            self.region.flush(o2, n2);
        }
    }

    #[inline]
    pub(super) fn put(&self, pos: u64, src: &[u8]) {
        self.put_at(self.phys(pos), src)
    }

    pub(super) fn put_nt(&self, pos: u64, src: &[u8]) {
        let [(o1, n1), (o2, n2)] = self.pieces(pos, src.len());
        self.region.write_nt(o1, &src[..n1]);
        if n2 > 0 {
            self.region.write_nt(o2, &src[n1..]);
        }
    }

    #[inline]
    pub(super) fn flush_span(&self, pos: u64, len: usize) {
        self.flush_at(self.phys(pos), len)
    }

    pub(super) fn zero_span_nodrain(&self, pos: u64, len: usize) {
        let [(o1, n1), (o2, n2)] = self.pieces(pos, len);
        if n1 > 0 {
            self.region.fill_nodrain(o1, n1, 0);
        }
        if n2 > 0 {
            self.region.fill_nodrain(o2, n2, 0);
        }
    }

    pub(super) fn get(&self, pos: u64, dst: &mut [u8]) {
        let [(o1, n1), (o2, _)] = self.pieces(pos, dst.len());
        let (a, b) = dst.split_at_mut(n1);
        self.region.read(o1, a);
        if !b.is_empty() {
            self.region.read(o2, b);
        }
    }

    /// The 8-byte word at an 8-aligned logical position.
    #[inline]
    pub(super) fn word(&self, pos: u64) -> u64 {
        self.region.load_u64(self.geo.data_off + self.phys(pos))
    }

    #[inline]
    pub(super) fn store_word(&self, pos: u64, v: u64) {
        self.region.store_u64(self.geo.data_off + self.phys(pos), v)
    }

    /// The common 16-byte entry header (Classic, Header, PopLog).
    pub(super) fn entry_header(lsn: u64, len: u32, check: u32) -> [u8; 16] {
        let mut h = [0u8; 16];
        h[0..8].copy_from_slice(&lsn.to_le_bytes());
        h[8..12].copy_from_slice(&len.to_le_bytes());
        h[12..16].copy_from_slice(&check.to_le_bytes());
        h
    }

    /// Classic/Header header check: binds LSN and length to this log.
    #[inline]
    pub(super) fn header_check(&self, lsn: u64, len: u32) -> u32 {
        let mut b = [0u8; 20];
        b[0..8].copy_from_slice(&self.nonce.to_le_bytes());
        b[8..16].copy_from_slice(&lsn.to_le_bytes());
        b[16..20].copy_from_slice(&len.to_le_bytes());
        crc32c::crc32c(&b)
    }

    /// Payload length stored in the entry at `pos` (trusted: `pos` is a
    /// record boundary inside `[head, tail)`).
    pub(super) fn stored_len(&self, pos: u64) -> usize {
        match self.variant.algorithm {
            Algorithm::Rawl => (self.word(pos) & 0xffff_ffff) as usize,
            _ => (self.word(pos + 8) & 0xffff_ffff) as usize,
        }
    }

    /// Logical position of record `lsn` (walks the entry headers from the head).
    pub(super) fn position_of(&self, lsn: u64) -> u64 {
        let mut pos = self.head.pos;
        for _ in self.head.lsn..lsn {
            pos += self.entry_extent(self.stored_len(pos));
        }
        pos
    }

    /// Reads the payload of the entry at `pos` into `out` (replacing its content).
    pub(super) fn read_payload(&self, pos: u64, out: &mut Vec<u8>) {
        let len = self.stored_len(pos);
        out.clear();
        match self.variant.algorithm {
            Algorithm::Rawl => self.rawl_read_payload(pos, len, out),
            _ => {
                out.resize(len, 0);
                self.get(pos + ENTRY_HEADER, out);
            }
        }
    }
}
