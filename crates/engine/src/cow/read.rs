//! CoW reads over one version's root: lookups ([`get_at`]: a hit
//! checksums its leaf and value, a miss the whole path), scans in either
//! direction ([`scan_at`], [`scan_back_at`]), every node verified on the
//! way, and the two read-only views over them — a live reader taking the
//! newest version per read, and a snapshot holding one.

use super::*;

/// A descending scan of one version: every pair below `upto`, greatest
/// first, until `limit` pairs were visited.
struct BackWalk<'a, 'f> {
    pool: &'a Region,
    nonce: u64,
    upto: Bound<&'a [u8]>,
    limit: usize,
    n: &'a mut usize,
    f: &'a mut (dyn FnMut(&[u8], &[u8]) -> bool + 'f),
    val: &'a mut Vec<u8>,
}

impl BackWalk<'_, '_> {
    fn below(&self, k: &[u8]) -> bool {
        match self.upto {
            Bound::Included(u) => k <= u,
            Bound::Excluded(u) => k < u,
            Bound::Unbounded => true,
        }
    }

    /// Visits the subtree at `off`; false once the walk is over (the
    /// limit reached or the visitor stopped).
    fn node(&mut self, off: u64, crc: u32, depth: usize) -> Result<bool> {
        if depth > MAX_HEIGHT as usize {
            return Err(EngineError::Corrupt(
                "cow: tree deeper than the limit".into(),
            ));
        }
        let mut buf = Vec::new();
        let h = tree::read_node_checked(self.pool, self.nonce, off, crc, &mut buf)?;
        if h.kind == KIND_LEAF {
            let mut pairs = Vec::with_capacity(h.count as usize);
            for e in format::Entries::new(&h, &buf) {
                if let Ent::Leaf(k, v) = e? {
                    pairs.push((k, v));
                }
            }
            for &(k, v) in pairs.iter().rev() {
                if !self.below(k) {
                    continue;
                }
                let go = match v {
                    ValRef::Inline(x) => (self.f)(k, x),
                    ValRef::Blob { off, len, crc } => {
                        self.val.clear();
                        tree::read_blob_checked(
                            self.pool,
                            self.nonce,
                            k,
                            (off, len, crc),
                            self.val,
                        )?;
                        (self.f)(k, self.val)
                    }
                };
                *self.n += 1;
                if !go || *self.n >= self.limit {
                    return Ok(false);
                }
            }
            return Ok(true);
        }
        let mut children: Vec<(&[u8], u64, u32)> = Vec::with_capacity(h.count as usize);
        for e in format::Entries::new(&h, &buf) {
            if let Ent::Branch(k, c, ccrc) = e? {
                children.push((k, c, ccrc));
            }
        }
        // Child i holds keys from its separator up to the next one: the
        // last child that can hold a key below the bound, then every
        // earlier one.
        let end = match self.upto {
            _ if children.len() <= 1 => children.len(),
            Bound::Included(u) => 1 + children[1..].partition_point(|(k, ..)| *k <= u),
            Bound::Excluded(u) => 1 + children[1..].partition_point(|(k, ..)| *k < u),
            Bound::Unbounded => children.len(),
        };
        for &(_, c, ccrc) in children[..end].iter().rev() {
            if !self.node(c, ccrc, depth + 1)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Looks `key` up in version `v`, verifying lazily.
///
/// The descent first checksums only what a hit returns: each branch node
/// on the way is checked to be the node its parent recorded (the checksum
/// it stores equals the one in its parent's entry, or the root line's for
/// the root: a comparison, [`tree::read_node_linked`]), and the leaf that
/// holds the key is checksummed whole, then a blob value against the
/// checksum the leaf recorded. Such a hit is what was written: the leaf's
/// bytes match its own checksum and that is the checksum the entry
/// followed recorded, and a version's leaves hold disjoint keys, so a
/// damaged branch (a pointer, a separator, a count) can steer the descent
/// only to a block whose stored checksum does not match (an error), or to
/// a leaf of this version that does not hold the key, or to a freed copy
/// of identical bytes (the same checksum: the same pairs, up to CRC-32C's
/// one chance in 2³²).
///
/// A miss, or an error of the lazy descent, is looked up again with every
/// node on the path checksummed ([`Check::Whole`]): its answer is the
/// one returned, so a damaged branch that steered the lazy descent wrong
/// is an error, never a false "absent". Reads checksum one 512-byte leaf
/// instead of the whole path (4 nodes in a million-key tree), and a miss
/// pays the path twice.
pub(super) fn get_at(
    pool: &Region,
    nonce: u64,
    v: &Version,
    key: &[u8],
    out: &mut Vec<u8>,
    buf: &mut Vec<u8>,
) -> Result<bool> {
    match descend(pool, nonce, v, key, out, buf, Check::Lazy) {
        Ok(true) => Ok(true),
        // Not verifying at all (the cost measurement's baseline): the
        // first answer is the answer.
        r if !tree::verifying() => r,
        _ => descend(pool, nonce, v, key, out, buf, Check::Whole),
    }
}

/// What a descent checks of the nodes it reads (leaves are always
/// checksummed).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Branch nodes: only the link to their parent's entry.
    Lazy,
    /// Every node: its checksum.
    Whole,
}

fn descend(
    pool: &Region,
    nonce: u64,
    v: &Version,
    key: &[u8],
    out: &mut Vec<u8>,
    buf: &mut Vec<u8>,
    check: Check,
) -> Result<bool> {
    out.clear();
    let (mut off, mut crc) = (v.root, v.crc);
    if off == 0 {
        return Ok(false);
    }
    for _ in 0..=MAX_HEIGHT {
        let h = match check {
            Check::Lazy => {
                let h = tree::read_node_linked(pool, off, crc, buf)?;
                if h.kind == KIND_LEAF {
                    tree::check_read_node(nonce, off, crc, buf)?;
                }
                h
            }
            Check::Whole => tree::read_node_checked(pool, nonce, off, crc, buf)?,
        };
        let mut next = None;
        for e in format::Entries::new(&h, buf) {
            match e? {
                Ent::Leaf(k, val) => {
                    if k == key {
                        match val {
                            ValRef::Inline(x) => out.extend_from_slice(x),
                            ValRef::Blob { off, len, crc } => {
                                tree::read_blob_checked(pool, nonce, k, (off, len, crc), out)?
                            }
                        }
                        return Ok(true);
                    }
                    if k > key {
                        return Ok(false);
                    }
                }
                Ent::Branch(k, child, ccrc) => {
                    if next.is_some() && k > key {
                        break;
                    }
                    next = Some((child, ccrc));
                }
            }
        }
        match next {
            Some(c) if h.kind != KIND_LEAF => (off, crc) = c,
            _ => return Ok(false),
        }
    }
    Err(EngineError::Corrupt(
        "cow: tree deeper than the limit".into(),
    ))
}

/// Up to `limit` pairs of version `v` with keys `>= from`, ascending.
pub(super) fn scan_at(
    pool: &Region,
    nonce: u64,
    v: &Version,
    from: &[u8],
    limit: usize,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<usize> {
    let mut n = 0;
    if v.root != 0 && limit > 0 {
        let mut val = Vec::new();
        scan_node(
            pool,
            nonce,
            (v.root, v.crc),
            from,
            limit,
            &mut n,
            f,
            0,
            &mut val,
        )?;
    }
    Ok(n)
}

/// Up to `limit` pairs of version `v` below `upto`, descending.
pub(super) fn scan_back_at(
    pool: &Region,
    nonce: u64,
    v: &Version,
    upto: Bound<&[u8]>,
    limit: usize,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<usize> {
    let mut n = 0;
    if v.root != 0 && limit > 0 {
        let mut val = Vec::new();
        let mut walk = BackWalk {
            pool,
            nonce,
            upto,
            limit,
            n: &mut n,
            f,
            val: &mut val,
        };
        walk.node(v.root, v.crc, 0)?;
    }
    Ok(n)
}

/// A read-only view of one version: the writer frees none of its blocks
/// while the view holds the version's `Arc` ([`Writer::collect`]).
pub(super) struct CowSnapshot<'e> {
    pub(super) eng: &'e CowEngine,
    pub(super) v: Arc<Version>,
    pub(super) buf: Vec<u8>,
}

/// A live reader: reads the current version at each call.
pub(super) struct CowReader<'e> {
    pub(super) eng: &'e CowEngine,
    pub(super) buf: Vec<u8>,
}

impl SnapshotRead for CowReader<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        let _p = breakdown::phase(Phase::Scan);
        let _v = tree::VerifyScope::new(self.eng.verify);
        get_at(
            &self.eng.pool,
            self.eng.nonce,
            &self.eng.snapshot(),
            key,
            out,
            &mut self.buf,
        )
    }

    fn scan_with(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _v = tree::VerifyScope::new(self.eng.verify);
        scan_at(
            &self.eng.pool,
            self.eng.nonce,
            &self.eng.snapshot(),
            from,
            limit,
            f,
        )
    }

    fn scan_back_with(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _v = tree::VerifyScope::new(self.eng.verify);
        scan_back_at(
            &self.eng.pool,
            self.eng.nonce,
            &self.eng.snapshot(),
            upto,
            limit,
            f,
        )
    }

    fn len(&mut self) -> Result<u64> {
        Ok(self.eng.snapshot().keys)
    }
}

impl SnapshotRead for CowSnapshot<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        let _v = tree::VerifyScope::new(self.eng.verify);
        get_at(
            &self.eng.pool,
            self.eng.nonce,
            &self.v,
            key,
            out,
            &mut self.buf,
        )
    }

    fn scan_with(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _v = tree::VerifyScope::new(self.eng.verify);
        scan_at(&self.eng.pool, self.eng.nonce, &self.v, from, limit, f)
    }

    fn scan_back_with(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _v = tree::VerifyScope::new(self.eng.verify);
        scan_back_at(&self.eng.pool, self.eng.nonce, &self.v, upto, limit, f)
    }

    fn len(&mut self) -> Result<u64> {
        Ok(self.v.keys)
    }
}

/// Visits the subtree at `off` from `from` on; false once the walk is
/// over (the limit reached or the visitor stopped).
#[allow(clippy::too_many_arguments)]
fn scan_node(
    pool: &Region,
    nonce: u64,
    (off, crc): (u64, u32),
    from: &[u8],
    limit: usize,
    n: &mut usize,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    depth: usize,
    val: &mut Vec<u8>,
) -> Result<bool> {
    if depth > MAX_HEIGHT as usize {
        return Err(EngineError::Corrupt(
            "cow: tree deeper than the limit".into(),
        ));
    }
    let mut buf = Vec::new();
    let h = tree::read_node_checked(pool, nonce, off, crc, &mut buf)?;
    if h.kind == KIND_LEAF {
        for e in format::Entries::new(&h, &buf) {
            let Ent::Leaf(k, v) = e? else {
                continue;
            };
            if k < from {
                continue;
            }
            let go = match v {
                ValRef::Inline(x) => f(k, x),
                ValRef::Blob { off, len, crc } => {
                    val.clear();
                    tree::read_blob_checked(pool, nonce, k, (off, len, crc), val)?;
                    f(k, val)
                }
            };
            *n += 1;
            if !go || *n >= limit {
                return Ok(false);
            }
        }
        return Ok(true);
    }
    let mut children: Vec<(&[u8], u64, u32)> = Vec::with_capacity(h.count as usize);
    for e in format::Entries::new(&h, &buf) {
        if let Ent::Branch(k, c, ccrc) = e? {
            children.push((k, c, ccrc));
        }
    }
    // The child covering `from`, then every later one.
    let start = if children.len() <= 1 {
        0
    } else {
        children[1..].partition_point(|(k, ..)| *k <= from)
    };
    for &(_, c, ccrc) in &children[start..] {
        if !scan_node(pool, nonce, (c, ccrc), from, limit, n, f, depth + 1, val)? {
            return Ok(false);
        }
    }
    Ok(true)
}
