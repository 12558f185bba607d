//! On-media formats of the LSM engine: log records, the manifest, sorted
//! runs (data blocks, fence-pointer index, bloom filter). All integers are
//! little-endian; every checksum is CRC32C seeded with the store nonce
//! (`crc32c(nonce as 8 LE bytes ‖ …)`), so bytes left by an earlier store
//! never validate. Everything read from the pool is untrusted: decoders
//! bound every length and return [`EngineError::Corrupt`], never panic.

use crate::{EngineError, Op, Result};
use ferrite_pmem::Region;

pub(crate) const LINE: u64 = 64;

/// Rounds `n` up to a whole number of cache lines.
pub(crate) fn round_line(n: u64) -> u64 {
    n.div_ceil(LINE) * LINE
}

pub(crate) fn corrupt(what: impl Into<String>) -> EngineError {
    EngineError::Corrupt(format!("lsm: {}", what.into()))
}

/// CRC32C of `parts`, seeded with the store nonce.
pub(crate) fn crc(nonce: u64, parts: &[&[u8]]) -> u32 {
    let mut c = crc32c::crc32c(&nonce.to_le_bytes());
    for p in parts {
        c = crc32c::crc32c_append(c, p);
    }
    c
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}
fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

/// Reads `len` bytes at pool offset `off` after checking the bounds (an
/// untrusted offset must not make [`Region::read`] panic).
pub(crate) fn read_checked(pool: &Region, off: u64, len: u64, dst: &mut Vec<u8>) -> Result<()> {
    let (o, l) = (usize::try_from(off), usize::try_from(len));
    let (Ok(o), Ok(l)) = (o, l) else {
        return Err(corrupt(format!("range {off:#x}+{len} out of the pool")));
    };
    if pool.check(o, l).is_err() {
        return Err(corrupt(format!("range {off:#x}+{len} out of the pool")));
    }
    dst.clear();
    dst.resize(l, 0);
    pool.read(o, dst);
    Ok(())
}

// ---------------------------------------------------------------------------
// Log records
// ---------------------------------------------------------------------------

/// Bytes of a log record header.
///
/// A record starts on a cache line of the log segment:
///
/// ```text
///  0  4  crc32c(nonce ‖ bytes 4 .. 24 + body length)
///  4  4  body length n (bits 0..31); bit 31 set: every earlier record of
///        the log was durable when this one was written (see below)
///  8  8  sequence number (consecutive from the manifest's first sequence)
/// 16  8  log generation (the manifest's; stale records of earlier generations never match)
/// 24  n  body: op count u32, then per op: kind u8 (1 put, 2 delete), key length u16,
///        value length u32 (0 for a delete), key, value
/// ```
///
/// The record occupies `round_line(24 + n)` bytes; the next one starts on
/// the following line (so consecutive appends never flush the same line).
/// A whole batch is one record: its CRC makes it all or nothing.
///
/// Bit 31 of the length tells a torn tail from media damage. A crash can
/// leave a record torn only if it was never fenced, and then no record
/// written after it says its predecessors were durable (relaxed commits
/// are fenced together with a later one, whose bit is clear). So an
/// invalid record followed, anywhere later in the segment, by a valid
/// record of the next sequence number with the bit set was damaged after
/// it was durable: recovery reports it instead of cutting the log there
/// (which would silently drop that record and every one after it).
/// Records written before the bit existed have it clear (cut, as before).
pub(crate) const REC_HEADER: usize = 24;
/// Bit 31 of a record's length word: its predecessors were durable.
const PRED_DURABLE: u32 = 1 << 31;
/// Largest body a log record may have (the length's other 31 bits).
pub(crate) const MAX_REC_BODY: usize = (PRED_DURABLE - 1) as usize;
const OP_HEADER: usize = 7;
pub(crate) const OP_PUT: u8 = 1;
pub(crate) const OP_DEL: u8 = 2;

/// Encodes `ops` as a record body after a zeroed header into `buf`.
pub(crate) fn encode_ops(buf: &mut Vec<u8>, ops: &[Op<'_>]) {
    buf.clear();
    buf.resize(REC_HEADER, 0);
    buf.extend_from_slice(&(ops.len() as u32).to_le_bytes());
    for op in ops {
        match op {
            Op::Put { key, value } => {
                buf.push(OP_PUT);
                buf.extend_from_slice(&(key.len() as u16).to_le_bytes());
                buf.extend_from_slice(&(value.len() as u32).to_le_bytes());
                buf.extend_from_slice(key);
                buf.extend_from_slice(value);
            }
            Op::Delete { key } => {
                buf.push(OP_DEL);
                buf.extend_from_slice(&(key.len() as u16).to_le_bytes());
                buf.extend_from_slice(&0u32.to_le_bytes());
                buf.extend_from_slice(key);
            }
        }
    }
}

/// Fills the header of a record built by [`encode_ops`]; `pred_durable`:
/// every earlier record of the log is durable (fenced) now.
pub(crate) fn seal_record(buf: &mut [u8], nonce: u64, seq: u64, gen_: u64, pred_durable: bool) {
    let n = (buf.len() - REC_HEADER) as u32;
    debug_assert!(n < PRED_DURABLE);
    let word = if pred_durable { n | PRED_DURABLE } else { n };
    buf[4..8].copy_from_slice(&word.to_le_bytes());
    buf[8..16].copy_from_slice(&seq.to_le_bytes());
    buf[16..24].copy_from_slice(&gen_.to_le_bytes());
    let c = crc(nonce, &[&buf[4..]]);
    buf[0..4].copy_from_slice(&c.to_le_bytes());
}

/// Calls `f(kind, key, value)` for each op of a record body; a malformed
/// body is corruption (its CRC matched, so it was written that way).
pub(crate) fn for_each_op(body: &[u8], mut f: impl FnMut(u8, &[u8], &[u8])) -> Result<()> {
    if body.len() < 4 {
        return Err(corrupt("log record body shorter than its op count"));
    }
    let count = u32_at(body, 0) as usize;
    let mut p = 4;
    for _ in 0..count {
        if p + OP_HEADER > body.len() {
            return Err(corrupt("log record op header past the body"));
        }
        let kind = body[p];
        let kl = u16_at(body, p + 1) as usize;
        let vl = u32_at(body, p + 3) as usize;
        p += OP_HEADER;
        if kl == 0 || kl > crate::MAX_KEY || vl > crate::MAX_VALUE || p + kl + vl > body.len() {
            return Err(corrupt("log record op out of bounds"));
        }
        if kind != OP_PUT && kind != OP_DEL {
            return Err(corrupt(format!("log record op kind {kind}")));
        }
        f(kind, &body[p..p + kl], &body[p + kl..p + kl + vl]);
        p += kl + vl;
    }
    if p != body.len() {
        return Err(corrupt("log record body has trailing bytes"));
    }
    Ok(())
}

/// Reads the record at segment position `pos` if it is valid (right
/// sequence and generation, checksum matches): its body into `body`, and
/// its footprint in bytes. `None` ends the log's valid prefix.
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_record(
    pool: &Region,
    seg: u64,
    cap: u64,
    pos: u64,
    nonce: u64,
    seq: u64,
    gen_: u64,
    body: &mut Vec<u8>,
) -> Result<Option<u64>> {
    if pos + REC_HEADER as u64 > cap {
        return Ok(None);
    }
    Ok(read_header_and_body(pool, seg, cap, pos, nonce, seq, gen_, body)?.map(|(len, _)| len))
}

/// [`read_record`], also returning the record's predecessors-durable bit.
#[allow(clippy::too_many_arguments)]
fn read_header_and_body(
    pool: &Region,
    seg: u64,
    cap: u64,
    pos: u64,
    nonce: u64,
    seq: u64,
    gen_: u64,
    body: &mut Vec<u8>,
) -> Result<Option<(u64, bool)>> {
    if pos + REC_HEADER as u64 > cap {
        return Ok(None);
    }
    let mut h = [0u8; REC_HEADER];
    pool.read((seg + pos) as usize, &mut h);
    let word = u32_at(&h, 4);
    let n = u64::from(word & !PRED_DURABLE);
    if u64_at(&h, 8) != seq || u64_at(&h, 16) != gen_ || pos + REC_HEADER as u64 + n > cap {
        return Ok(None);
    }
    read_checked(pool, seg + pos + REC_HEADER as u64, n, body)?;
    if crc(nonce, &[&h[4..], body]) != u32_at(&h, 0) {
        return Ok(None);
    }
    Ok(Some((
        round_line(REC_HEADER as u64 + n),
        word & PRED_DURABLE != 0,
    )))
}

/// After the log's valid prefix ends at `pos` (the record of sequence
/// `seq` there is invalid or absent): the position of a later valid record
/// of sequence `seq + 1` whose predecessors were durable — proof that the
/// record at `pos` was damaged after it was written, not torn by a crash.
/// Scans the rest of the segment line by line (only at open, and only
/// headers until one matches).
#[allow(clippy::too_many_arguments)]
pub(crate) fn durable_successor(
    pool: &Region,
    seg: u64,
    cap: u64,
    pos: u64,
    nonce: u64,
    seq: u64,
    gen_: u64,
) -> Result<Option<u64>> {
    let mut body = Vec::new();
    let mut p = pos + LINE;
    while p + REC_HEADER as u64 <= cap {
        if pool.load_u64((seg + p + 8) as usize) == seq + 1
            && let Some((_, true)) =
                read_header_and_body(pool, seg, cap, p, nonce, seq + 1, gen_, &mut body)?
        {
            return Ok(Some(p));
        }
        p += LINE;
    }
    Ok(None)
}

// ---------------------------------------------------------------------------
// Manifest
// ---------------------------------------------------------------------------

/// The manifest: one allocator block, linked from the first word of the
/// engine's fixed area. It is never modified; a new one replaces it.
///
/// ```text
///  0  8  magic "FRLSMMF2" (written by this build; "FRLSMMF1", of stores
///        whose log records never carry the predecessors-durable bit, is
///        still read — an older build refuses MF2, whose records it would
///        misread as torn)
///  8  8  generation (every manifest a new, larger one)
/// 16  8  log segment pool offset
/// 24  8  log segment capacity (bytes, multiple of 64)
/// 32  8  log generation: records of this generation are the memtable's
/// 40  8  sequence number of the log's first record
/// 48  4  run count r
/// 52  4  crc32c(nonce ‖ bytes 0..52 ‖ run entries)
/// 56  8  zero
/// 64 16r runs, newest first: pool offset u64, length u64
/// ```
pub(crate) const MANIFEST_MAGIC: &[u8; 8] = b"FRLSMMF2";
/// The magic of manifests written before log records carried bit 31.
const MANIFEST_MAGIC_V1: &[u8; 8] = b"FRLSMMF1";
pub(crate) const MANIFEST_HEADER: usize = 64;
/// Most runs a manifest may list (bounds decoding untrusted bytes).
pub(crate) const MAX_MANIFEST_RUNS: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Manifest {
    pub gen_: u64,
    pub seg: u64,
    pub cap: u64,
    pub log_gen: u64,
    pub first_seq: u64,
    /// (pool offset, length), newest first.
    pub runs: Vec<(u64, u64)>,
    /// Records appended under this manifest carry the
    /// predecessors-durable bit (every manifest this build writes; not a
    /// "FRLSMMF1" one read from an older store, whose build may still
    /// append to the same log).
    pub marks: bool,
}

impl Manifest {
    pub fn len(&self) -> usize {
        MANIFEST_HEADER + 16 * self.runs.len()
    }

    pub fn encode(&self, nonce: u64) -> Vec<u8> {
        let mut b = vec![0u8; self.len()];
        b[0..8].copy_from_slice(MANIFEST_MAGIC);
        b[8..16].copy_from_slice(&self.gen_.to_le_bytes());
        b[16..24].copy_from_slice(&self.seg.to_le_bytes());
        b[24..32].copy_from_slice(&self.cap.to_le_bytes());
        b[32..40].copy_from_slice(&self.log_gen.to_le_bytes());
        b[40..48].copy_from_slice(&self.first_seq.to_le_bytes());
        b[48..52].copy_from_slice(&(self.runs.len() as u32).to_le_bytes());
        for (i, (o, l)) in self.runs.iter().enumerate() {
            let p = MANIFEST_HEADER + 16 * i;
            b[p..p + 8].copy_from_slice(&o.to_le_bytes());
            b[p + 8..p + 16].copy_from_slice(&l.to_le_bytes());
        }
        let c = crc(nonce, &[&b[0..52], &b[MANIFEST_HEADER..]]);
        b[52..56].copy_from_slice(&c.to_le_bytes());
        b
    }

    pub fn read(pool: &Region, off: u64, nonce: u64) -> Result<Manifest> {
        let mut h = Vec::new();
        read_checked(pool, off, MANIFEST_HEADER as u64, &mut h)?;
        let marks = &h[0..8] == MANIFEST_MAGIC;
        if !marks && &h[0..8] != MANIFEST_MAGIC_V1 {
            return Err(corrupt(format!("no manifest at {off:#x}")));
        }
        let r = u32_at(&h, 48) as usize;
        if r > MAX_MANIFEST_RUNS {
            return Err(corrupt(format!("manifest lists {r} runs")));
        }
        let mut runs_raw = Vec::new();
        read_checked(
            pool,
            off + MANIFEST_HEADER as u64,
            16 * r as u64,
            &mut runs_raw,
        )?;
        let stored = u32_at(&h, 52);
        if crc(nonce, &[&h[0..52], &runs_raw]) != stored {
            return Err(corrupt(format!("manifest at {off:#x}: checksum mismatch")));
        }
        let m = Manifest {
            gen_: u64_at(&h, 8),
            seg: u64_at(&h, 16),
            cap: u64_at(&h, 24),
            log_gen: u64_at(&h, 32),
            first_seq: u64_at(&h, 40),
            runs: (0..r)
                .map(|i| (u64_at(&runs_raw, 16 * i), u64_at(&runs_raw, 16 * i + 8)))
                .collect(),
            marks,
        };
        if m.cap < LINE || !m.cap.is_multiple_of(LINE) {
            return Err(corrupt(format!("manifest: log capacity {}", m.cap)));
        }
        Ok(m)
    }
}

// ---------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------

/// A sorted run: one allocator block, written once, never modified.
///
/// ```text
/// header, 64 bytes:
///  0  8  magic "FRLSMRN1"
///  8  8  entries (records, tombstones included)
/// 16  8  data bytes D
/// 24  4  data blocks B (= index entries)
/// 28  4  index bytes I
/// 32  4  bloom filter bytes F (multiple of 8)
/// 36  1  bloom hash count k
/// 37 11  zero
/// 48  4  crc32c(nonce ‖ index)
/// 52  4  crc32c(nonce ‖ bloom filter)
/// 56  4  zero
/// 60  4  crc32c(nonce ‖ bytes 0..60)
/// 64          D  data blocks: records in strictly increasing key order;
///                record = key length u16, kind u8 (0 value, 1 tombstone),
///                value length u32, key, value
/// 64+D        I  index (fence pointers), per block: data offset u64 (from
///                the data start), length u32, crc32c(nonce ‖ block) u32,
///                first key length u16, first key
/// 64+D+I      F  bloom filter bits (u64 words), bit i of word w = bit 64w+i
/// ```
///
/// A data block is a maximal group of whole records starting where the
/// previous one ended, closed once it reaches the target block size (a
/// record larger than the target forms a block of its own).
pub(crate) const RUN_MAGIC: &[u8; 8] = b"FRLSMRN1";
pub(crate) const RUN_HEADER: usize = 64;
pub(crate) const REC_FIXED: usize = 7;
const INDEX_FIXED: usize = 18;

/// A fence pointer: one data block of a run.
#[derive(Clone, Debug)]
pub(crate) struct BlockRef {
    pub first: Box<[u8]>,
    /// Offset from the run's data start.
    pub off: u64,
    pub len: u32,
    /// crc32c(nonce ‖ block), as the index records it: every read of the
    /// block verifies it ([`read_block`]).
    pub crc: u32,
}

/// A 64-bit hash of a key for the bloom filter (multiply-xorshift over
/// 8-byte words, then the murmur3 finalizer).
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    let mut h = 0x9e37_79b9_7f4a_7c15u64 ^ (key.len() as u64).wrapping_mul(0xff51_afd7_ed55_8ccd);
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        h = (h ^ w).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^= h >> 29;
    }
    let mut tail = [0u8; 8];
    let rest = chunks.remainder();
    tail[..rest.len()].copy_from_slice(rest);
    h = (h ^ u64::from_le_bytes(tail)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Bloom filter probe positions (double hashing).
fn bloom_bits(h: u64, k: u32, m: u64) -> impl Iterator<Item = u64> {
    let h1 = h;
    let h2 = h.rotate_left(32) | 1;
    (0..u64::from(k)).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % m)
}

pub(crate) fn bloom_may_contain(bloom: &[u64], k: u32, key: &[u8]) -> bool {
    if bloom.is_empty() {
        return true;
    }
    let m = bloom.len() as u64 * 64;
    bloom_bits(key_hash(key), k, m).all(|b| bloom[(b / 64) as usize] & (1 << (b % 64)) != 0)
}

/// Builds a run image from entries in strictly increasing key order, in
/// one buffer (the header's room first, then the data blocks as they are
/// made, then index and bloom filter), which the caller may reuse.
pub(crate) struct RunBuilder {
    out: Vec<u8>,
    index: Vec<u8>,
    hashes: Vec<u64>,
    /// Buffer offset where the open block starts.
    block_start: usize,
    /// Index offset of the open block's entry.
    index_open: usize,
    target: usize,
    /// The fence pointers, for the DRAM copy of the finished run.
    refs: Vec<BlockRef>,
    entries: u64,
}

impl RunBuilder {
    /// A builder writing into `buf` (cleared; its capacity is reused).
    pub fn new(block_bytes: usize, mut buf: Vec<u8>) -> RunBuilder {
        buf.clear();
        buf.resize(RUN_HEADER, 0);
        RunBuilder {
            out: buf,
            index: Vec::new(),
            hashes: Vec::new(),
            block_start: RUN_HEADER,
            index_open: 0,
            target: block_bytes.max(64),
            refs: Vec::new(),
            entries: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Gives the buffer back (for reuse) without finishing.
    pub fn into_buffer(self) -> Vec<u8> {
        self.out
    }

    fn close_block(&mut self, nonce: u64) {
        if self.out.len() > self.block_start {
            let blk = &self.out[self.block_start..];
            let c = crc(nonce, &[blk]);
            // The index entry was opened with the block; fill length and crc.
            let e = self.index_open;
            self.index[e + 8..e + 12].copy_from_slice(&(blk.len() as u32).to_le_bytes());
            self.index[e + 12..e + 16].copy_from_slice(&c.to_le_bytes());
            if let Some(r) = self.refs.last_mut() {
                r.len = blk.len() as u32;
                r.crc = c;
            }
            self.block_start = self.out.len();
        }
    }

    /// Appends one entry (`None`: tombstone).
    pub fn push(&mut self, nonce: u64, key: &[u8], value: Option<&[u8]>) {
        if self.out.len() - self.block_start >= self.target {
            self.close_block(nonce);
        }
        if self.out.len() == self.block_start {
            let rel = (self.block_start - RUN_HEADER) as u64;
            self.index_open = self.index.len();
            self.refs.push(BlockRef {
                first: key.into(),
                off: rel,
                len: 0,
                crc: 0,
            });
            self.index.extend_from_slice(&rel.to_le_bytes());
            self.index.extend_from_slice(&[0u8; 8]);
            self.index
                .extend_from_slice(&(key.len() as u16).to_le_bytes());
            self.index.extend_from_slice(key);
        }
        let v = value.unwrap_or(&[]);
        let mut h = [0u8; REC_FIXED];
        h[0..2].copy_from_slice(&(key.len() as u16).to_le_bytes());
        h[2] = u8::from(value.is_none());
        h[3..7].copy_from_slice(&(v.len() as u32).to_le_bytes());
        self.out.extend_from_slice(&h);
        self.out.extend_from_slice(key);
        self.out.extend_from_slice(v);
        self.hashes.push(key_hash(key));
        self.entries += 1;
    }

    /// The finished image, and its DRAM metadata (what [`load_run`] would
    /// decode from it).
    pub fn finish(mut self, nonce: u64, bits_per_key: u32) -> (Vec<u8>, RunMeta) {
        self.close_block(nonce);
        let data_len = (self.out.len() - RUN_HEADER) as u64;
        let bits = (self.entries * u64::from(bits_per_key.max(1))).max(64);
        let words = bits.div_ceil(64) as usize;
        let k = ((f64::from(bits_per_key.max(1)) * 0.69).round() as u32).clamp(1, 16);
        let mut bloom = vec![0u64; words];
        let m = words as u64 * 64;
        for &h in &self.hashes {
            for b in bloom_bits(h, k, m) {
                bloom[(b / 64) as usize] |= 1 << (b % 64);
            }
        }
        let ci = crc(nonce, &[&self.index]);
        let bloom_at = self.out.len() + self.index.len();
        self.out.extend_from_slice(&self.index);
        for w in &bloom {
            self.out.extend_from_slice(&w.to_le_bytes());
        }
        let cb = crc(nonce, &[&self.out[bloom_at..]]);
        let out = &mut self.out;
        out[0..8].copy_from_slice(RUN_MAGIC);
        out[8..16].copy_from_slice(&self.entries.to_le_bytes());
        out[16..24].copy_from_slice(&data_len.to_le_bytes());
        out[24..28].copy_from_slice(&(self.refs.len() as u32).to_le_bytes());
        out[28..32].copy_from_slice(&(self.index.len() as u32).to_le_bytes());
        out[32..36].copy_from_slice(&((words * 8) as u32).to_le_bytes());
        out[36] = k as u8;
        out[48..52].copy_from_slice(&ci.to_le_bytes());
        out[52..56].copy_from_slice(&cb.to_le_bytes());
        let ch = crc(nonce, &[&out[0..60]]);
        out[60..64].copy_from_slice(&ch.to_le_bytes());
        let meta = RunMeta {
            entries: self.entries,
            data_bytes: data_len,
            blocks: self.refs,
            bloom,
            k,
            nonce,
            verify: true,
            damaged: Vec::new(),
        };
        (self.out, meta)
    }
}

/// One record of a data block: key, and value (`None`: tombstone), and
/// the position of the next record.
/// A record parsed from a data block: key, value (`None`: tombstone),
/// position of the next record.
pub(crate) type RunRecord<'a> = (&'a [u8], Option<&'a [u8]>, usize);

pub(crate) fn parse_run_record(b: &[u8], p: usize) -> Result<RunRecord<'_>> {
    if p + REC_FIXED > b.len() {
        return Err(corrupt("run record header past its block"));
    }
    let kl = u16_at(b, p) as usize;
    let kind = b[p + 2];
    let vl = u32_at(b, p + 3) as usize;
    let ks = p + REC_FIXED;
    if kl == 0 || kind > 1 || ks + kl + vl > b.len() || (kind == 1 && vl != 0) {
        return Err(corrupt("run record out of bounds"));
    }
    let key = &b[ks..ks + kl];
    let val = (kind == 0).then(|| &b[ks + kl..ks + kl + vl]);
    Ok((key, val, ks + kl + vl))
}

/// The decoded, validated header of a run and its DRAM metadata.
pub(crate) struct RunMeta {
    pub entries: u64,
    pub data_bytes: u64,
    pub blocks: Vec<BlockRef>,
    pub bloom: Vec<u64>,
    pub k: u32,
    /// The store nonce that seeds the block checksums.
    pub nonce: u64,
    /// Verify each block read (off only for the cost measurement,
    /// `StoreOptions::verify`).
    pub verify: bool,
    /// Indexes (into `blocks`) of the data blocks that failed their
    /// checksums when the run was loaded: damage on the media. The run
    /// stays in use — a read of a key in such a block fails with
    /// [`EngineError::Corrupt`] naming the block, every other key reads —
    /// rather than the whole store refusing to open over one bad byte.
    pub damaged: Vec<usize>,
}

impl RunMeta {
    /// This run's metadata without its damaged blocks (counting the keys
    /// that can be read at open).
    pub(crate) fn readable(&self) -> RunMeta {
        RunMeta {
            entries: self.entries,
            data_bytes: self.data_bytes,
            blocks: (self.blocks.iter().enumerate())
                .filter(|(i, _)| !self.damaged.contains(i))
                .map(|(_, b)| b.clone())
                .collect(),
            bloom: self.bloom.clone(),
            k: self.k,
            nonce: self.nonce,
            verify: self.verify,
            damaged: Vec::new(),
        }
    }
}

/// Reads data block `b` of the run at `run_off` into `dst` and verifies
/// its checksum: a block that fails it is [`EngineError::Corrupt`] naming
/// the run, the block's offset and its first key — never parsed, so a
/// damaged record is never returned. Each read verifies the block once
/// (a point read reads one block per run it searches).
pub(crate) fn read_block(
    pool: &Region,
    run_off: u64,
    meta: &RunMeta,
    b: &BlockRef,
    dst: &mut Vec<u8>,
) -> Result<()> {
    let at = run_off + RUN_HEADER as u64 + b.off;
    read_checked(pool, at, u64::from(b.len), dst)?;
    if meta.verify {
        let c = crc(meta.nonce, &[dst]);
        if c != b.crc {
            dst.clear();
            return Err(corrupt(format!(
                "run at {run_off:#x}: data block at {at:#x} (keys from {}) fails its checksum (stored {:#010x}, computed {c:#010x})",
                crate::error::show_key(&b.first),
                b.crc
            )));
        }
    }
    Ok(())
}

/// Reads and validates the run at `off` (`len` bytes): header, index and
/// bloom checksums, every data block's checksum, and the strict key order
/// of all its records. A data block that fails its checksum is listed in
/// [`RunMeta::damaged`] (the index, checksummed apart, still says where
/// it lies and which keys it holds); damage to the header, the index or
/// the bloom filter is an error (the run's layout is unknown).
pub(crate) fn load_run(pool: &Region, off: u64, len: u64, nonce: u64) -> Result<RunMeta> {
    let bad = |w: &str| corrupt(format!("run at {off:#x}: {w}"));
    if len < RUN_HEADER as u64 {
        return Err(bad("shorter than its header"));
    }
    let mut h = Vec::new();
    read_checked(pool, off, RUN_HEADER as u64, &mut h)?;
    if &h[0..8] != RUN_MAGIC {
        return Err(bad("bad magic"));
    }
    if crc(nonce, &[&h[0..60]]) != u32_at(&h, 60) {
        return Err(bad("header checksum mismatch"));
    }
    let entries = u64_at(&h, 8);
    let d = u64_at(&h, 16);
    let nblocks = u32_at(&h, 24) as u64;
    let i = u64::from(u32_at(&h, 28));
    let f = u64::from(u32_at(&h, 32));
    let k = u32::from(h[36]);
    let total = (RUN_HEADER as u64)
        .checked_add(d)
        .and_then(|x| x.checked_add(i))
        .and_then(|x| x.checked_add(f));
    if total.is_none_or(|t| t > len) || f % 8 != 0 || f == 0 || k == 0 || k > 16 {
        return Err(bad("sections out of bounds"));
    }
    let data_off = off + RUN_HEADER as u64;
    let mut index = Vec::new();
    read_checked(pool, data_off + d, i, &mut index)?;
    if crc(nonce, &[&index]) != u32_at(&h, 48) {
        return Err(bad("index checksum mismatch"));
    }
    let mut bloom_raw = Vec::new();
    read_checked(pool, data_off + d + i, f, &mut bloom_raw)?;
    if crc(nonce, &[&bloom_raw]) != u32_at(&h, 52) {
        return Err(bad("bloom filter checksum mismatch"));
    }
    let bloom: Vec<u64> = bloom_raw
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    // Index: blocks tile the data area in order.
    let mut blocks = Vec::new();
    let mut p = 0usize;
    let mut expect = 0u64;
    let mut crcs = Vec::new();
    while p < index.len() {
        if p + INDEX_FIXED > index.len() || blocks.len() as u64 >= nblocks {
            return Err(bad("index entry out of bounds"));
        }
        let boff = u64_at(&index, p);
        let blen = u32_at(&index, p + 8);
        let bcrc = u32_at(&index, p + 12);
        let kl = u16_at(&index, p + 16) as usize;
        p += INDEX_FIXED;
        if p + kl > index.len() || boff != expect || blen == 0 || kl == 0 {
            return Err(bad("index entry inconsistent"));
        }
        expect = boff + u64::from(blen);
        blocks.push(BlockRef {
            first: index[p..p + kl].into(),
            off: boff,
            len: blen,
            crc: bcrc,
        });
        crcs.push(bcrc);
        p += kl;
    }
    if blocks.len() as u64 != nblocks || expect != d {
        return Err(bad("index does not cover the data"));
    }
    // Every block: checksum, records in strictly increasing order.
    let mut buf = Vec::new();
    let mut prev: Vec<u8> = Vec::new();
    let mut count = 0u64;
    let mut damaged = Vec::new();
    for (i, (b, c)) in blocks.iter().zip(crcs).enumerate() {
        read_checked(pool, data_off + b.off, u64::from(b.len), &mut buf)?;
        if crc(nonce, &[&buf]) != c {
            damaged.push(i);
            continue;
        }
        let mut q = 0;
        let mut first = true;
        while q < buf.len() {
            let (key, _, next) = parse_run_record(&buf, q)?;
            if (first && key != &*b.first) || (count > 0 && key <= &prev[..]) {
                return Err(bad("keys out of order"));
            }
            first = false;
            prev.clear();
            prev.extend_from_slice(key);
            count += 1;
            q = next;
        }
    }
    // The records of a damaged block cannot be counted.
    if damaged.is_empty() && count != entries {
        return Err(bad("entry count mismatch"));
    }
    Ok(RunMeta {
        entries,
        data_bytes: d,
        blocks,
        bloom,
        k,
        nonce,
        verify: true,
        damaged,
    })
}
