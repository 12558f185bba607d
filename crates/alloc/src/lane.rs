//! Lanes: small per-thread redo rings that make a multi-word publish atomic.
//!
//! A publish changes several words at once — allocation bits, headers, the
//! caller's links — and they must become durable together. The lane
//! protocol does it with two fences:
//!
//! 1. write a **record** (the [`MetaOp`]s) into the lane's ring and flush
//!    it — **fence** — the publish is now committed: recovery will finish it;
//! 2. apply the operations to their words and flush them — **fence** — the
//!    publish is complete;
//! 3. write a **marker** on the line after the record, and return. The
//!    marker is *not* flushed here: the allocator makes it durable with a
//!    later fence (see below), so a publish costs two fences.
//!
//! Recovery looks only at the newest entry of each lane. If it is a marker,
//! there is nothing to do. If it is a record, the publish may have crashed
//! between steps 1 and 2: the record is replayed unless every operation in
//! it already shows its effect (replay is idempotent), and a marker is then
//! written for it. Older entries never matter: a lane starts its next
//! record only after the previous publish completed.
//!
//! **Why the marker.** A record whose publish completed stays the newest
//! entry of its lane until the lane publishes again. Without a marker, a
//! later publish that changes one of the record's words — another lane
//! freeing the block the record allocated (clearing its bit), reallocating
//! the extent it freed (setting the header it cleared), rewriting a link
//! it stored — would make the record look unapplied, and a crash would
//! replay it over that later publish: a freed block resurrected, an
//! acknowledged allocation lost, bits on a page whose header says free.
//!
//! **When the marker is durable.** It must be durable before any such
//! later publish changes the media — or a newer record of the same lane
//! must be, which supersedes the old one. A fence completes only the
//! write-backs of the thread that issues it (x86 `sfence` orders the
//! issuing core's `clwb`s, not another core's), so a marker flushed by its
//! own thread and left for that thread's next fence could still be in
//! flight when another thread's conflicting publish is durable — the
//! window PMDK's lazy log clobber leaves. So the marker is left unflushed
//! and its allocator records it as *pending*; a later publish of any
//! thread that may change the record's words first flushes the pending
//! markers itself, so that a fence of its own completes them before it
//! changes anything ([`crate::heap`] states the rule as its invariant 5 and
//! argues it; [`crate::lock`] has the single-lane version). Recovery's
//! markers are flushed and fenced at once.
//!
//! **Placement.** The marker sits on its own line so that consecutive
//! operations never flush the same line twice in a row (NVAlloc's lesson
//! [P2 §2.2]): record, marker and the next record are three distinct lines.
//! A record and its marker form a *group*; a new group starts after the
//! previous one, or at the ring's start when it does not fit, and never
//! overlaps the previous group. Groups are at most a third of the ring,
//! which guarantees that one of the two places is free.
//!
//! # On-media format (version 1, little-endian)
//!
//! A lane is `lane_bytes` bytes (a multiple of 64, at least 768) on a line
//! boundary. Entries start on lines. An entry is a 16-byte header followed
//! (records only) by `count` operations of 16 bytes ([`crate::ops`]):
//!
//! | bytes  | field                                                              |
//! |--------|--------------------------------------------------------------------|
//! | 0..8   | sequence number, u64 (≥ 1; 0 = no entry)                           |
//! | 8..10  | operation count, u16 (records ≥ 1, markers 0)                      |
//! | 10     | kind, u8: 1 record, 2 marker                                       |
//! | 11     | zero                                                               |
//! | 12..16 | crc32c(nonce ‖ lane index u32 ‖ the entry with this field zero)  |
//!
//! A record with sequence `s` is followed by its marker with `s + 1`; the
//! next record has `s + 2`. The nonce is the heap's, so bytes copied from
//! another heap, or a record of another lane, never validate.

use crate::error::{AllocError, Result};
use crate::ops::{MetaOp, OP_BYTES};
use ferrite_pmem::{CACHE_LINE, Region};

pub(crate) const ENTRY_HEADER: usize = 16;
const KIND_RECORD: u8 = 1;
const KIND_MARKER: u8 = 2;
/// Smallest lane: a group of 4 lines fits three times.
pub const MIN_LANE_BYTES: usize = 12 * CACHE_LINE;

/// One lane's ring inside its allocator's region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lane {
    /// Region offset of the ring (line aligned).
    pub off: usize,
    /// Ring bytes (multiple of 64).
    pub len: usize,
    /// Lane number (part of every checksum).
    pub index: u32,
}

/// Where a lane will write next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Cursor {
    /// Ring offset and length of the newest group (record + marker), which
    /// the next group must not overlap. Length 0: nothing to protect.
    prev_start: usize,
    prev_len: usize,
    /// Sequence number of the next record.
    next_seq: u64,
}

/// A record written and flushed, not yet marked.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pending {
    pos: usize,
    len: usize,
    seq: u64,
}

/// A marker written by [`Lane::mark`], not yet flushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Marker {
    /// Ring line of the marker (below 2¹⁴: rings are at most 1 MiB).
    pub line: usize,
    /// Its sequence number.
    pub seq: u64,
}

/// The newest entry of a lane found by [`Lane::scan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Latest {
    None,
    Marker,
    /// A record that may or may not have been applied.
    Record {
        pos: usize,
        len: usize,
        seq: u64,
        ops: Vec<MetaOp>,
    },
}

fn group_len(ops: usize) -> usize {
    (ENTRY_HEADER + ops * OP_BYTES).next_multiple_of(CACHE_LINE) + CACHE_LINE
}

/// Bytes before an entry in a checksum buffer: nonce and lane index.
const PREFIX: usize = 12;

/// The entry checksum: `buf` is the nonce, the lane index and the entry
/// with its checksum field zero, contiguous, so the crate makes one call
/// (several small calls cost four times as much).
fn checksum(buf: &[u8]) -> u32 {
    crc32c::crc32c(buf)
}

fn prefix(nonce: u64, lane: u32) -> [u8; PREFIX] {
    let mut p = [0u8; PREFIX];
    p[..8].copy_from_slice(&nonce.to_le_bytes());
    p[8..].copy_from_slice(&lane.to_le_bytes());
    p
}

fn header(seq: u64, count: u16, kind: u8) -> [u8; ENTRY_HEADER] {
    let mut h = [0u8; ENTRY_HEADER];
    h[0..8].copy_from_slice(&seq.to_le_bytes());
    h[8..10].copy_from_slice(&count.to_le_bytes());
    h[10] = kind;
    h
}

impl Lane {
    /// Largest group (record + marker) the ring accepts: a third of it.
    fn max_group(&self) -> usize {
        self.len / 3 / CACHE_LINE * CACHE_LINE
    }

    /// Most operations one record can hold.
    pub fn max_ops(&self) -> usize {
        (self.max_group() - CACHE_LINE - ENTRY_HEADER) / OP_BYTES
    }

    /// A cursor for a freshly formatted (all-zero) lane.
    pub fn fresh() -> Cursor {
        Cursor {
            prev_start: 0,
            prev_len: 0,
            next_seq: 1,
        }
    }

    /// Writes a record of `ops` (at most [`max_ops`](Self::max_ops)) and
    /// flushes it; the caller fences. Returns the record and the number of
    /// lines written.
    pub fn commit(
        &self,
        region: &Region,
        nonce: u64,
        cur: &Cursor,
        ops: &[MetaOp],
        buf: &mut Vec<u8>,
    ) -> (Pending, usize) {
        debug_assert!(!ops.is_empty() && ops.len() <= self.max_ops());
        let glen = group_len(ops.len());
        let after = cur.prev_start + cur.prev_len;
        let pos = if cur.prev_len > 0 && after + glen <= self.len {
            after
        } else {
            // The group is at most a third of the ring, so it fits before
            // the previous group whenever it does not fit after it.
            debug_assert!(cur.prev_len == 0 || glen <= cur.prev_start);
            0
        };
        let rec_len = glen - CACHE_LINE;
        buf.clear();
        buf.extend_from_slice(&prefix(nonce, self.index));
        buf.extend_from_slice(&header(cur.next_seq, ops.len() as u16, KIND_RECORD));
        for op in ops {
            buf.extend_from_slice(&op.encode());
        }
        let crc = checksum(buf);
        buf[PREFIX + 12..PREFIX + 16].copy_from_slice(&crc.to_le_bytes());
        let used = buf.len() - PREFIX;
        region.write(self.off + pos, &buf[PREFIX..]);
        region.flush(self.off + pos, used);
        (
            Pending {
                pos,
                len: rec_len,
                seq: cur.next_seq,
            },
            used.div_ceil(CACHE_LINE),
        )
    }

    /// Writes (does not flush) the marker of `rec`, whose publish is
    /// complete, and advances the cursor past the group. Returns the
    /// marker, which the caller makes durable.
    pub fn mark(&self, region: &Region, nonce: u64, cur: &mut Cursor, rec: Pending) -> Marker {
        let mut b = [0u8; PREFIX + ENTRY_HEADER];
        b[..PREFIX].copy_from_slice(&prefix(nonce, self.index));
        b[PREFIX..].copy_from_slice(&header(rec.seq + 1, 0, KIND_MARKER));
        let crc = checksum(&b);
        b[PREFIX + 12..].copy_from_slice(&crc.to_le_bytes());
        let at = self.off + rec.pos + rec.len;
        region.write(at, &b[PREFIX..]);
        *cur = Cursor {
            prev_start: rec.pos,
            prev_len: rec.len + CACHE_LINE,
            next_seq: rec.seq + 2,
        };
        Marker {
            line: (rec.pos + rec.len) / CACHE_LINE,
            seq: rec.seq + 1,
        }
    }

    /// Region offset of `m`'s line (to flush it).
    pub fn marker_off(&self, m: Marker) -> usize {
        self.off + m.line * CACHE_LINE
    }

    /// Advances the cursor past `rec` without writing its marker (only for
    /// the planted [`NoMarker`](crate::heap::Fault::NoMarker) bug).
    pub fn advance(&self, cur: &mut Cursor, rec: Pending) {
        *cur = Cursor {
            prev_start: rec.pos,
            prev_len: rec.len + CACHE_LINE,
            next_seq: rec.seq + 2,
        };
    }

    /// Finds the newest valid entry and the cursor that continues after it.
    /// For a [`Latest::Record`] the cursor assumes its marker will be
    /// written ([`mark_recovered`](Self::mark_recovered)).
    pub fn scan(&self, region: &Region, nonce: u64) -> Result<(Latest, Cursor)> {
        let mut best: Option<(u64, usize, u16, u8)> = None;
        let mut buf = Vec::new();
        let mut pos = 0;
        while pos + ENTRY_HEADER <= self.len {
            let mut h = [0u8; ENTRY_HEADER];
            region.read(self.off + pos, &mut h);
            let seq = u64::from_le_bytes(h[0..8].try_into().expect("8 bytes"));
            let count = u16::from_le_bytes([h[8], h[9]]);
            let kind = h[10];
            let plausible = seq != 0
                && best.is_none_or(|b| seq > b.0)
                && h[11] == 0
                && match kind {
                    KIND_MARKER => count == 0,
                    KIND_RECORD => {
                        count >= 1 && pos + ENTRY_HEADER + count as usize * OP_BYTES <= self.len
                    }
                    _ => false,
                };
            if plausible {
                let n = ENTRY_HEADER + count as usize * OP_BYTES;
                buf.clear();
                buf.extend_from_slice(&prefix(nonce, self.index));
                buf.resize(PREFIX + n, 0);
                region.read(self.off + pos, &mut buf[PREFIX..]);
                buf[PREFIX + 12..PREFIX + 16].fill(0);
                let stored = u32::from_le_bytes(h[12..16].try_into().expect("4 bytes"));
                if checksum(&buf) == stored {
                    best = Some((seq, pos, count, kind));
                }
            }
            pos += CACHE_LINE;
        }
        let Some((seq, pos, count, kind)) = best else {
            return Ok((Latest::None, Lane::fresh()));
        };
        if kind == KIND_MARKER {
            return Ok((
                Latest::Marker,
                Cursor {
                    prev_start: pos,
                    prev_len: CACHE_LINE,
                    next_seq: seq + 1,
                },
            ));
        }
        let mut ops_buf = vec![0u8; count as usize * OP_BYTES];
        region.read(self.off + pos + ENTRY_HEADER, &mut ops_buf);
        let ops = ops_buf
            .chunks_exact(OP_BYTES)
            .map(MetaOp::decode)
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                AllocError::Corrupt(format!(
                    "lane {} record {seq} has a valid checksum but an undecodable operation",
                    self.index
                ))
            })?;
        let len = group_len(count as usize) - CACHE_LINE;
        if pos + len + CACHE_LINE > self.len {
            return Err(AllocError::Corrupt(format!(
                "lane {} record {seq} leaves no room for its marker",
                self.index
            )));
        }
        Ok((
            Latest::Record { pos, len, seq, ops },
            Cursor {
                prev_start: pos,
                prev_len: len + CACHE_LINE,
                next_seq: seq + 2,
            },
        ))
    }

    /// Recovery: writes the marker of the newest record found by
    /// [`scan`](Self::scan) and flushes it; the caller fences.
    pub fn mark_recovered(&self, region: &Region, nonce: u64, pos: usize, len: usize, seq: u64) {
        let mut cur = Cursor::default();
        let m = self.mark(region, nonce, &mut cur, Pending { pos, len, seq });
        region.flush(self.marker_off(m), ENTRY_HEADER);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_pmem::{Domain, Pool, PoolOptions};

    fn setup() -> (Pool, Lane) {
        let pool = Pool::create_in_memory(&PoolOptions::new("lane", 64 * 1024).domain(Domain::Adr))
            .unwrap();
        (
            pool,
            Lane {
                off: 128,
                len: 1024,
                index: 3,
            },
        )
    }

    #[test]
    fn newest_entry_wins_and_groups_never_overlap() {
        let (pool, lane) = setup();
        let r = pool.data();
        let mut cur = Lane::fresh();
        let mut buf = Vec::new();
        assert_eq!(lane.scan(&r, 9).unwrap().0, Latest::None);
        let mut prev: Option<(usize, usize)> = None;
        for i in 0..50u64 {
            let n = 1 + (i as usize * 7) % lane.max_ops();
            let ops: Vec<MetaOp> = (0..n as u64).map(|k| MetaOp::set(8 * k, i)).collect();
            let (p, _) = lane.commit(&r, 9, &cur, &ops, &mut buf);
            if let Some((s, l)) = prev {
                let (a, b) = (p.pos, p.pos + p.len + CACHE_LINE);
                assert!(
                    b <= s || a >= s + l,
                    "group {a}..{b} overlaps {s}..{}",
                    s + l
                );
            }
            match lane.scan(&r, 9).unwrap().0 {
                Latest::Record { seq, ops: got, .. } => {
                    assert_eq!(seq, p.seq);
                    assert_eq!(got, ops);
                }
                other => panic!("expected the record, found {other:?}"),
            }
            lane.mark(&r, 9, &mut cur, p);
            assert_eq!(lane.scan(&r, 9).unwrap().0, Latest::Marker);
            // After a durable marker the record no longer needs protecting,
            // so the rebuilt cursor only keeps the marker's line.
            let rebuilt = lane.scan(&r, 9).unwrap().1;
            assert_eq!(rebuilt.next_seq, cur.next_seq, "scan rebuilds the sequence");
            assert_eq!(
                rebuilt.prev_start + rebuilt.prev_len,
                cur.prev_start + cur.prev_len
            );
            prev = Some((p.pos, p.len + CACHE_LINE));
        }
        // Another nonce or lane index validates nothing.
        assert_eq!(lane.scan(&r, 10).unwrap().0, Latest::None);
        let other = Lane { index: 4, ..lane };
        assert_eq!(other.scan(&r, 9).unwrap().0, Latest::None);
    }

    #[test]
    fn a_torn_record_is_ignored() {
        let (pool, lane) = setup();
        let r = pool.data();
        let mut cur = Lane::fresh();
        let mut buf = Vec::new();
        let (p, _) = lane.commit(&r, 1, &cur, &[MetaOp::set(0, 1)], &mut buf);
        lane.mark(&r, 1, &mut cur, p);
        let ops: Vec<MetaOp> = (0..8).map(|k| MetaOp::or(8 * k, 1)).collect();
        let (p2, _) = lane.commit(&r, 1, &cur, &ops, &mut buf);
        // Lose the record's second line.
        r.fill(lane.off + p2.pos + 64, 64, 0);
        assert_eq!(lane.scan(&r, 1).unwrap().0, Latest::Marker);
    }
}
