//! InP reads: point lookups ([`get_locked`]) and scans in either direction
//! ([`scan_dir`]) under the shared lock, every node and tuple verified on
//! the way, and the two read-only views over them — a live reader taking the
//! lock per read, and a snapshot holding it for its whole life.

use super::*;

/// Looks `key` up; the caller holds `eng.rw` (read). Every node on the
/// path, and the tuple returned, is verified (`tree` module docs).
pub(super) fn get_locked(
    eng: &Inp,
    key: &[u8],
    out: &mut Vec<u8>,
    path: &mut Vec<(u64, usize)>,
    bufs: &mut Bufs,
) -> Result<bool> {
    let root = eng.root();
    out.clear();
    if root == 0 {
        return Ok(false);
    }
    descend(&eng.geo, root, key, path, &mut bufs.nb)?;
    match leaf_find(
        &eng.geo,
        &bufs.nb[..LEAF_BYTES],
        key,
        prefix(key),
        &mut bufs.kbuf,
        true,
    )? {
        Some((_, t)) => {
            eng.geo.tuple_read(t, &mut bufs.kbuf, out)?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Tuples a scan asks the CPU to fetch ahead of reading them.
const PREFETCH_TUPLES: usize = 16;
/// Bytes of each such tuple fetched: three cache lines, a header, a
/// 24-byte key and a 150-byte value (redb's shapes); longer tuples miss
/// on their rest.
const PREFETCH_BYTES: usize = 192;

/// Up to `limit` pairs with keys `>= from` (ascending), or with keys below
/// `upto` (descending, `back`); the caller holds `eng.rw` (read). Every
/// node and tuple visited is verified.
fn scan_dir(
    eng: &Inp,
    from: &[u8],
    upto: Bound<&[u8]>,
    back: bool,
    limit: usize,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    bufs: &mut Bufs,
) -> Result<usize> {
    let g = &eng.geo;
    let root = eng.root();
    if root == 0 || limit == 0 {
        return Ok(0);
    }
    let mut path = Vec::with_capacity(MAX_DEPTH);
    // Going back, the leaf that holds the bound holds every key below it
    // that a later leaf could not.
    let start = if back { upto } else { Bound::Included(from) };
    match start {
        Bound::Included(u) | Bound::Excluded(u) if !u.is_empty() || back => {
            descend(g, root, u, &mut path, &mut bufs.nb)?
        }
        _ => tree::edge(g, root, back, &mut path, &mut bufs.nb)?,
    };
    // Which keys the scan returns, decided on a slot's prefix where it
    // can (prefixes order as their keys do, and a prefix above or below
    // the bound's settles the comparison), on the full key otherwise.
    let bound = if back {
        match upto {
            Bound::Included(u) | Bound::Excluded(u) => Some(u),
            Bound::Unbounded => None,
        }
    } else {
        Some(from)
    };
    let bound_prefix = bound.map(prefix);
    let wanted = |k: &[u8]| {
        if back {
            match upto {
                Bound::Included(u) => k <= u,
                Bound::Excluded(u) => k < u,
                Bound::Unbounded => true,
            }
        } else {
            k >= from
        }
    };
    let mut n = 0;
    let max_leaves = ((g.hi - g.lo) as usize / LEAF_BYTES).max(1);
    for _ in 0..max_leaves {
        leaf_order(g, &bufs.nb[..LEAF_BYTES], &mut bufs.order)?;
        let count = bufs.order.len();
        // The tuples this leaf will likely return, fetched together (the
        // first of them may lie below the start: a few wasted hints).
        let ahead = (limit - n).min(count).min(PREFETCH_TUPLES);
        let skip = match bound_prefix {
            Some(bp) if !back => bufs.order.partition_point(|e| e.0 < bp),
            Some(bp) => count - bufs.order.partition_point(|e| e.0 <= bp),
            None => 0,
        };
        for j in skip..(skip + ahead).min(count) {
            let (_, t) = bufs.order[if back { count - 1 - j } else { j }];
            g.prefetch_tuple(t, PREFETCH_BYTES);
        }
        for j in 0..count {
            let (p, t) = bufs.order[if back { count - 1 - j } else { j }];
            let by_prefix = bound_prefix.map_or(std::cmp::Ordering::Greater, |bp| {
                if back { bp.cmp(&p) } else { p.cmp(&bp) }
            });
            match by_prefix {
                std::cmp::Ordering::Less => continue,
                std::cmp::Ordering::Equal if !wanted(g.tuple_key(t, &mut bufs.kbuf)?) => continue,
                _ => {}
            }
            let kl = g.tuple_read(t, &mut bufs.kbuf, &mut bufs.val)?;
            // The key verified with the value must be the one the leaf
            // ordered by: a damaged slot never reaches the visitor.
            let k = &bufs.kbuf[..kl];
            if prefix(k) != p || !wanted(k) {
                return Err(corrupt(format!(
                    "tuple {t:#x}: key does not match its leaf slot"
                )));
            }
            n += 1;
            if !f(k, &bufs.val) || n == limit {
                return Ok(n);
            }
        }
        if tree::step(g, &mut path, back, &mut bufs.nb)?.is_none() {
            return Ok(n);
        }
    }
    Err(corrupt("scan visited more leaves than the heap holds"))
}

pub(super) fn scan_locked(
    eng: &Inp,
    from: &[u8],
    limit: usize,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    bufs: &mut Bufs,
) -> Result<usize> {
    scan_dir(eng, from, Bound::Unbounded, false, limit, f, bufs)
}

pub(super) fn scan_back_locked(
    eng: &Inp,
    upto: Bound<&[u8]>,
    limit: usize,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    bufs: &mut Bufs,
) -> Result<usize> {
    scan_dir(eng, &[], upto, true, limit, f, bufs)
}

/// A read-only view: holds `rw` (read) for its whole life, so no write
/// applies while it lives (InP updates in place: there is no older
/// version to read). Writers wait for it.
pub(super) struct InpSnapshot<'e> {
    pub(super) eng: &'e Inp,
    pub(super) _r: parking_lot::RwLockReadGuard<'e, ()>,
    pub(super) path: Vec<(u64, usize)>,
    pub(super) bufs: Bufs,
}

/// A live reader: takes `rw` (read) for each read only.
pub(super) struct InpReader<'e> {
    pub(super) eng: &'e Inp,
    pub(super) path: Vec<(u64, usize)>,
    pub(super) bufs: Bufs,
}

impl SnapshotRead for InpReader<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        let _p = breakdown::phase(Phase::Scan);
        let _r = self.eng.rw.read();
        get_locked(self.eng, key, out, &mut self.path, &mut self.bufs)
    }

    fn scan_with(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _r = self.eng.rw.read();
        scan_locked(self.eng, from, limit, f, &mut self.bufs)
    }

    fn scan_back_with(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _r = self.eng.rw.read();
        scan_back_locked(self.eng, upto, limit, f, &mut self.bufs)
    }

    fn len(&mut self) -> Result<u64> {
        Ok(self.eng.keys.load(Ordering::Acquire))
    }
}

impl SnapshotRead for InpSnapshot<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        get_locked(self.eng, key, out, &mut self.path, &mut self.bufs)
    }

    fn scan_with(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        scan_locked(self.eng, from, limit, f, &mut self.bufs)
    }

    fn scan_back_with(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        scan_back_locked(self.eng, upto, limit, f, &mut self.bufs)
    }

    fn len(&mut self) -> Result<u64> {
        Ok(self.eng.keys.load(Ordering::Acquire))
    }
}
