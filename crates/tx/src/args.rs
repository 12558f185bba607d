//! A transaction's volatile inputs ([`Inputs`]) and packed u64 arguments
//! ([`pack_args`]).

/// A transaction's volatile inputs: its arguments and the DRAM buffers it
/// names (P1's `vlog_preserve`). Under clobber logging they are copied into
/// the v_log before the transaction's first write, and re-execution gets
/// them back from there.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    args: &'a [u8],
    bufs: &'a [&'a [u8]],
}

impl<'a> Inputs<'a> {
    /// Inputs of argument bytes `args` and preserved buffers `bufs`.
    pub fn new(args: &'a [u8], bufs: &'a [&'a [u8]]) -> Inputs<'a> {
        Inputs { args, bufs }
    }

    /// The argument bytes (see [`Inputs::arg_u64`] for packed words).
    pub fn args(&self) -> &'a [u8] {
        self.args
    }

    /// Preserved buffer `i` (an empty slice if there is none: a function
    /// that needs a buffer checks its length).
    pub fn buf(&self, i: usize) -> &'a [u8] {
        self.bufs.get(i).copied().unwrap_or(&[])
    }

    /// Every preserved buffer, in the order the caller named them.
    pub fn bufs(&self) -> &'a [&'a [u8]] {
        self.bufs
    }

    /// Little-endian u64 number `i` of the arguments (0 past their end).
    pub fn arg_u64(&self, i: usize) -> u64 {
        self.args
            .get(8 * i..8 * i + 8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    /// Bytes the v_log needs for these inputs (payload only).
    pub fn vlog_len(&self) -> usize {
        8 + self.args.len().next_multiple_of(8)
            + self
                .bufs
                .iter()
                .map(|b| 8 + b.len().next_multiple_of(8))
                .sum::<usize>()
    }
}

/// Packs u64 arguments little-endian (for [`Inputs::arg_u64`]); derefs
/// to the bytes.
pub fn pack_args(words: &[u64]) -> PackedArgs {
    if words.len() <= INLINE_ARGS {
        let mut a = [0u8; 8 * INLINE_ARGS];
        for (c, w) in a.chunks_exact_mut(8).zip(words) {
            c.copy_from_slice(&w.to_le_bytes());
        }
        PackedArgs::Inline(a, 8 * words.len())
    } else {
        PackedArgs::Heap(words.iter().flat_map(|w| w.to_le_bytes()).collect())
    }
}

/// Words [`pack_args`] keeps without a heap allocation (it runs once per
/// operation of every structure).
const INLINE_ARGS: usize = 4;

/// Arguments packed by [`pack_args`].
#[derive(Clone, Debug)]
pub enum PackedArgs {
    /// Up to 4 words in place: the buffer and how many of its bytes
    /// are used.
    Inline([u8; 8 * INLINE_ARGS], usize),
    /// More words, on the heap.
    Heap(Vec<u8>),
}

impl std::ops::Deref for PackedArgs {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            PackedArgs::Inline(a, n) => &a[..*n],
            PackedArgs::Heap(v) => v,
        }
    }
}
