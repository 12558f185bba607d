//! Metadata operations: the persistent 8-byte stores a publish consists of.
//!
//! Every durable change an allocator makes when it publishes — setting or
//! clearing allocation bits, writing a block or extent header, storing the
//! caller's links — is one [`MetaOp`] on an 8-byte word of the pool. A
//! standalone publish writes them to a lane's redo record ([`crate::lane`])
//! before applying them; a transaction (issue 6) logs them in its own redo
//! log under its own commit instead, so an allocation costs it no fence of
//! its own.
//!
//! On media (inside lane records), an operation is 16 bytes, little-endian:
//!
//! | bytes | field                                                              |
//! |-------|--------------------------------------------------------------------|
//! | 0..8  | `kind << 56 | pool offset` (offset < 2⁵⁶, a multiple of 8)            |
//! | 8..16 | operand                                                            |
//!
//! Kinds: 1 = [`OpKind::Set`] (word = operand), 2 = [`OpKind::Or`] (word |=
//! operand), 3 = [`OpKind::AndNot`] (word &= !operand).
//!
//! All three are idempotent: applying an operation twice leaves the word as
//! applying it once does, which is what lets recovery replay a record
//! without knowing how far the crashed publish got. `Or`/`AndNot` (rather
//! than absolute values) let two threads change different bits of one
//! bitmap word concurrently — the owner of a run allocating while another
//! thread frees — without either record overwriting the other's bit.

use ferrite_pmem::Region;

/// Bytes of one encoded operation.
pub const OP_BYTES: usize = 16;
/// Offsets must fit below the kind byte.
const OFF_MASK: u64 = (1 << 56) - 1;

/// What an operation does to its word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// `word = operand`.
    Set,
    /// `word |= operand`.
    Or,
    /// `word &= !operand`.
    AndNot,
}

impl OpKind {
    fn code(self) -> u64 {
        match self {
            OpKind::Set => 1,
            OpKind::Or => 2,
            OpKind::AndNot => 3,
        }
    }

    fn from_code(c: u64) -> Option<OpKind> {
        match c {
            1 => Some(OpKind::Set),
            2 => Some(OpKind::Or),
            3 => Some(OpKind::AndNot),
            _ => None,
        }
    }
}

/// One persistent 8-byte store of a publish, addressed by pool offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MetaOp {
    pub kind: OpKind,
    /// Pool offset of the word (a multiple of 8).
    pub off: u64,
    pub val: u64,
}

impl MetaOp {
    pub fn set(off: u64, val: u64) -> MetaOp {
        MetaOp {
            kind: OpKind::Set,
            off,
            val,
        }
    }

    pub fn or(off: u64, val: u64) -> MetaOp {
        MetaOp {
            kind: OpKind::Or,
            off,
            val,
        }
    }

    pub fn and_not(off: u64, val: u64) -> MetaOp {
        MetaOp {
            kind: OpKind::AndNot,
            off,
            val,
        }
    }

    /// The word as it is after this operation, given the word before.
    pub fn result(&self, cur: u64) -> u64 {
        match self.kind {
            OpKind::Set => self.val,
            OpKind::Or => cur | self.val,
            OpKind::AndNot => cur & !self.val,
        }
    }

    /// Applies the operation to the live word (not flushed). `pool` is the
    /// whole pool ([`Region::whole`]); the offset must have been validated.
    /// `Or`/`AndNot` use compare-and-swap, so concurrent changes to other
    /// bits of the same word are kept.
    pub fn apply(&self, pool: &Region) {
        let off = self.off as usize;
        match self.kind {
            OpKind::Set => pool.store_u64(off, self.val),
            _ => {
                let mut cur = pool.load_u64(off);
                loop {
                    let new = self.result(cur);
                    if new == cur {
                        return;
                    }
                    match pool.cas_u64(off, cur, new) {
                        Ok(_) => return,
                        Err(seen) => cur = seen,
                    }
                }
            }
        }
    }

    /// True when the live word already shows this operation's effect.
    pub fn is_applied(&self, pool: &Region) -> bool {
        let cur = pool.load_u64(self.off as usize);
        self.result(cur) == cur
    }

    pub fn encode(&self) -> [u8; OP_BYTES] {
        let mut b = [0u8; OP_BYTES];
        let w0 = (self.kind.code() << 56) | (self.off & OFF_MASK);
        b[0..8].copy_from_slice(&w0.to_le_bytes());
        b[8..16].copy_from_slice(&self.val.to_le_bytes());
        b
    }

    /// Decodes an operation; `None` for an unknown kind or an unaligned offset.
    pub fn decode(b: &[u8]) -> Option<MetaOp> {
        let w0 = u64::from_le_bytes(b[0..8].try_into().ok()?);
        let val = u64::from_le_bytes(b[8..16].try_into().ok()?);
        let kind = OpKind::from_code(w0 >> 56)?;
        let off = w0 & OFF_MASK;
        if !off.is_multiple_of(8) {
            return None;
        }
        Some(MetaOp { kind, off, val })
    }
}

/// Operations a merge looks back over when adding one; beyond it,
/// [`merge_ops`] merges in one pass (a publish of many blocks stays linear).
const MERGE_WINDOW: usize = 16;

/// Adds `op` to `ops`, merging it into a recent operation of the same kind
/// on the same word (two allocation bits of one bitmap word become one
/// `Or`). A list longer than [`MERGE_WINDOW`] may keep duplicates of older
/// words: [`merge_ops`] finishes the job.
pub(crate) fn push_merged(ops: &mut Vec<MetaOp>, op: MetaOp) {
    let recent = ops.len().saturating_sub(MERGE_WINDOW);
    if op.kind != OpKind::Set
        && let Some(o) = ops[recent..]
            .iter_mut()
            .find(|o| o.kind == op.kind && o.off == op.off)
    {
        o.val |= op.val;
        return;
    }
    ops.push(op);
}

/// Merges every `Or` (and every `AndNot`) on one word into its first
/// occurrence, keeping the order of first occurrences: what
/// [`push_merged`] does for a short list, in O(n) for any length.
pub(crate) fn merge_ops(ops: &mut Vec<MetaOp>) {
    if ops.len() <= MERGE_WINDOW {
        return;
    }
    let mut first: std::collections::HashMap<(OpKind, u64), usize> =
        std::collections::HashMap::with_capacity(ops.len());
    let mut kept = 0;
    for i in 0..ops.len() {
        let op = ops[i];
        if op.kind != OpKind::Set {
            if let Some(&j) = first.get(&(op.kind, op.off)) {
                ops[j].val |= op.val;
                continue;
            }
            first.insert((op.kind, op.off), kept);
        }
        ops[kept] = op;
        kept += 1;
    }
    ops.truncate(kept);
}

/// Flushes the line of every operation's word once (no fence).
pub(crate) fn flush_words(pool: &Region, ops: &[MetaOp], lines: &mut Vec<u64>) -> usize {
    lines.clear();
    if ops.len() <= MERGE_WINDOW {
        for op in ops {
            let l = op.off / 64;
            if !lines.contains(&l) {
                lines.push(l);
                pool.flush(op.off as usize, 8);
            }
        }
        return lines.len();
    }
    // A long list (a publish of many blocks): a set, not a scan per word.
    let mut seen = std::collections::HashSet::with_capacity(ops.len());
    for op in ops {
        let l = op.off / 64;
        if seen.insert(l) {
            lines.push(l);
            pool.flush(op.off as usize, 8);
        }
    }
    lines.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_round_trip_and_reject_garbage() {
        for op in [
            MetaOp::set(4096, 7),
            MetaOp::or(8, u64::MAX),
            MetaOp::and_not(OFF_MASK & !7, 1),
        ] {
            assert_eq!(MetaOp::decode(&op.encode()), Some(op));
        }
        assert_eq!(MetaOp::decode(&[0u8; 16]), None, "kind 0");
        let mut b = MetaOp::set(16, 1).encode();
        b[0] = 17;
        assert_eq!(MetaOp::decode(&b), None, "unaligned");
    }

    #[test]
    fn results_are_idempotent() {
        for op in [MetaOp::set(0, 5), MetaOp::or(0, 6), MetaOp::and_not(0, 6)] {
            for cur in [0u64, 5, 6, u64::MAX] {
                let once = op.result(cur);
                assert_eq!(op.result(once), once);
            }
        }
    }

    #[test]
    fn merging_combines_bits_of_one_word() {
        let mut v = Vec::new();
        push_merged(&mut v, MetaOp::or(8, 1));
        push_merged(&mut v, MetaOp::or(8, 4));
        push_merged(&mut v, MetaOp::and_not(8, 2));
        push_merged(&mut v, MetaOp::set(16, 1));
        push_merged(&mut v, MetaOp::set(16, 2));
        assert_eq!(
            v,
            vec![
                MetaOp::or(8, 5),
                MetaOp::and_not(8, 2),
                MetaOp::set(16, 1),
                MetaOp::set(16, 2)
            ]
        );
    }

    /// The windowed push plus the final pass merge exactly what a search
    /// of the whole list would, in the same order.
    #[test]
    fn merging_a_long_list_matches_a_full_search() {
        let mut naive: Vec<MetaOp> = Vec::new();
        let mut fast = Vec::new();
        let mut x = 7u64;
        for i in 0..5000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let word = 8 * ((x >> 33) % 300);
            let op = match i % 5 {
                0 => MetaOp::and_not(word, 1 << (x % 64)),
                1 => MetaOp::set(word, i),
                _ => MetaOp::or(word, 1 << (x % 64)),
            };
            match naive
                .iter_mut()
                .find(|o| op.kind != OpKind::Set && o.kind == op.kind && o.off == op.off)
            {
                Some(o) => o.val |= op.val,
                None => naive.push(op),
            }
            push_merged(&mut fast, op);
        }
        assert!(fast.len() > naive.len(), "the window leaves far duplicates");
        merge_ops(&mut fast);
        assert_eq!(fast, naive);
    }
}
