//! The InP writer: a session ([`InpSession`]) runs each write under the
//! writer lock ([`InpSession::write`]); a [`Writer`] stages the tree changes
//! of a put, delete or batch in DRAM copies of the nodes it touches (leaf
//! inserts and splits, separator inserts, emptied leaves unlinked), which
//! [`Inp::commit`] then logs and applies.

use super::*;

/// Where a writer found a key: its leaf, and its slot and tuple if present
/// (`None`: the tree is empty).
type Found = Option<(u64, Option<(usize, u64)>)>;

/// Nodes as a writer sees them: its staged copies over the pool.
struct WSrc<'x> {
    geo: &'x Geo,
    staged: &'x Staging,
}

impl Src for WSrc<'_> {
    fn load(&self, base: u64, b: &mut NodeBuf) -> Result<Node> {
        match self.staged.get(&base) {
            // The writer's own copy, verified when it was staged (or made
            // by it): taken as it is.
            Some(s) => {
                b[..s.buf.len()].copy_from_slice(&s.buf);
                match tree::u32_at(&s.buf, 8) {
                    tree::MAGIC_LEAF => Ok(Node::Leaf),
                    // Its header's child count: no decode (and no
                    // allocation) per level of every descent.
                    _ => Ok(Node::Inner(tree::inner_hdr(&s.buf, base)?.0)),
                }
            }
            None => self.geo.load(base, b),
        }
    }

    fn pick(
        &self,
        off: u64,
        b: &mut NodeBuf,
        pick: &mut dyn FnMut(&[u8], usize) -> Result<usize>,
    ) -> Result<Option<(usize, u64, usize)>> {
        match self.staged.get(&off) {
            // A staged inner node is searched where it lies (a batch
            // descends once per key: copying 8 KiB per level was most of
            // a large batch's time).
            Some(s) if tree::u32_at(&s.buf, 8) != tree::MAGIC_LEAF => {
                tree::pick_in(&s.buf, off, pick).map(Some)
            }
            Some(_) => tree::pick_by_load(self, off, b, pick),
            None => self.geo.pick(off, b, pick),
        }
    }
}

/// A writer's view during one operation.
pub(super) struct Writer<'e, 't> {
    eng: &'e Inp,
    th: &'t mut (dyn AllocThread + 'e),
    op: &'t mut OpState,
    path: &'t mut Vec<(u64, usize)>,
    kbuf: &'t mut [u8; MAX_KEY],
    nb: &'t mut NodeBuf,
}

impl Writer<'_, '_> {
    fn root(&self) -> u64 {
        self.op.new_root.unwrap_or_else(|| self.eng.root())
    }

    /// The staged copy of node `off` (staging it first).
    fn stage(&mut self, off: u64, size: usize) -> Result<&mut Vec<u8>> {
        if !self.op.staged.contains_key(&off) {
            self.eng.geo.check(off, size)?;
            let buf = self.eng.pool().read_vec(off as usize, size);
            // A writer changes only what it verified: a damaged node is
            // never sealed again with a fresh checksum.
            if self.eng.geo.verify {
                tree::verify_copy(self.eng.geo.seed, off, &buf)?;
            }
            self.op.staged.insert(off, Staged { buf, fresh: false });
        }
        Ok(&mut self.op.staged.get_mut(&off).expect("staged").buf)
    }

    fn new_node(&mut self, size: usize) -> Result<u64> {
        // A split or a new root: the path the finger relies on changes.
        self.op.finger = None;
        let r = self.th.reserve(size)?;
        let off = r.off().raw();
        self.op.res.push(r);
        self.op.staged.insert(
            off,
            Staged {
                buf: vec![0u8; size],
                fresh: true,
            },
        );
        Ok(off)
    }

    /// A new tuple, written now (flushed at commit).
    fn new_tuple(&mut self, key: &[u8], value: &[u8]) -> Result<u64> {
        let len = TUPLE_HDR + key.len() + value.len();
        let r = self.th.reserve(len)?;
        let off = r.off().raw();
        let cap = r.usable_size().min(u32::MAX as usize) as u32;
        self.op.res.push(r);
        if off >= tree::MAX_TUPLE_OFF {
            return Err(EngineError::Full(format!(
                "inp: a tuple at {off:#x}, past the 256 TiB a leaf slot addresses"
            )));
        }
        self.eng.geo.check(off, len)?;
        let p = self.eng.pool();
        let g = &self.eng.geo;
        let h = tree::tuple_header(g.seed, off, key, value, cap as usize, g.verify);
        p.write(off as usize, &h);
        p.write(off as usize + TUPLE_HDR, key);
        p.write(off as usize + TUPLE_HDR + key.len(), value);
        let crc = crc32c::crc32c_append(crc32c::crc32c_append(crc32c::crc32c(&h), key), value);
        self.op.fresh_tuples.push((off, len, crc));
        Ok(off)
    }

    fn free_tuple(&mut self, t: u64, cap: usize) {
        self.op.frees.push(POff::new(t));
        self.op.free_ranges.push((t, t + cap as u64));
    }

    /// Finds `key`: `(leaf, slot, tuple)` or the leaf it belongs in.
    fn find(&mut self, key: &[u8]) -> Result<Found> {
        let root = self.root();
        if root == 0 {
            return Ok(None);
        }
        let finger = self.op.finger;
        let near = match finger {
            Some(leaf) if self.finger_holds(key)? => Some(leaf),
            _ => None,
        };
        let src = WSrc {
            geo: &self.eng.geo,
            staged: &self.op.staged,
        };
        let leaf = match near {
            Some(leaf) => {
                src.load(leaf, self.nb)?;
                leaf
            }
            None => descend(&src, root, key, self.path, self.nb)?,
        };
        self.op.finger = Some(leaf);
        let hit = leaf_find(
            &self.eng.geo,
            &self.nb[..LEAF_BYTES],
            key,
            prefix(key),
            self.kbuf,
            false,
        )?;
        Ok(Some((leaf, hit)))
    }

    /// Whether `key` lies in the span of the finger's leaf: the tightest
    /// bounds on the path to it, the deepest parent giving a lower one
    /// and the deepest giving an upper one (spans nest down a tree). The
    /// rightmost leaf has no upper bound: ascending keys stay in it with
    /// no comparison past the first level.
    fn finger_holds(&mut self, key: &[u8]) -> Result<bool> {
        let src = WSrc {
            geo: &self.eng.geo,
            staged: &self.op.staged,
        };
        let kp = prefix(key);
        let (mut lower, mut upper) = (None, None);
        for &(p, i) in self.path.iter().rev() {
            src.pick(p, self.nb, &mut |b, n| {
                let (lo, hi) = tree::child_span(b, p, n, i, key, kp)?;
                lower = lower.or(lo);
                upper = upper.or(hi);
                Ok(i.min(n - 1))
            })?;
            if lower == Some(false) || upper == Some(false) {
                return Ok(false);
            }
            if lower.is_some() && upper.is_some() {
                break;
            }
        }
        Ok(true)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.op.ops += 1;
        let kp = prefix(key);
        match self.find(key)? {
            None => {
                let t = self.new_tuple(key, value)?;
                let leaf = self.new_node(LEAF_BYTES)?;
                let fingerprints = self.eng.geo.fingerprints;
                let b = self.stage(leaf, LEAF_BYTES)?;
                init_leaf(b, fingerprints);
                set_slot(b, 0, kp, t, key);
                set_bitmap(b, 1);
                self.op.new_root = Some(leaf);
                self.op.keys_delta += 1;
            }
            Some((leaf, Some((i, t)))) => {
                let (kl, vl, cap) = self.eng.geo.tuple_hdr(t)?;
                let budget = self.eng.log_cap / 2;
                if TUPLE_HDR + kl + value.len() <= cap
                    && value.len() <= self.eng.opts.inplace_max
                    && self.op.inplace_bytes + value.len() + 64 <= budget
                {
                    self.op.inplace_bytes += value.len() + 64;
                    // The value, its length and its checksum change in
                    // one record (bytes 4..16: length, capacity as it
                    // was, checksum), so a replay restores them together.
                    // The old tuple is verified first: a damaged length
                    // or capacity must not steer the write.
                    let g = &self.eng.geo;
                    if g.verify {
                        g.tuple_verify(t)?;
                    }
                    debug_assert_eq!(kl, key.len());
                    let h = tree::tuple_header(g.seed, t, key, value, cap, g.verify);
                    if self.eng.fault == Some(Fault::ChecksumAfterFence) {
                        // The planted bug: the checksum is stored after the
                        // commit, outside the record and every flush.
                        self.op.writes.push((t, t + 4, h[4..tree::CRC_AT].to_vec()));
                        let mut c = [0u8; 4];
                        c.copy_from_slice(&h[tree::CRC_AT..TUPLE_HDR]);
                        self.op.late.push((t + tree::CRC_AT as u64, c));
                    } else if vl != value.len() || self.eng.geo.verify {
                        self.op.writes.push((t, t + 4, h[4..TUPLE_HDR].to_vec()));
                    }
                    if !value.is_empty() {
                        self.op
                            .writes
                            .push((t, t + (TUPLE_HDR + kl) as u64, value.to_vec()));
                    }
                    self.op.inplace += 1;
                } else {
                    let t2 = self.new_tuple(key, value)?;
                    let b = self.stage(leaf, LEAF_BYTES)?;
                    set_slot(b, i, kp, t2, key);
                    self.free_tuple(t, cap);
                    self.op.outplace += 1;
                }
            }
            Some((leaf, None)) => {
                let t = self.new_tuple(key, value)?;
                self.leaf_insert(leaf, key, kp, t)?;
                self.op.keys_delta += 1;
            }
        }
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        self.op.ops += 1;
        let Some((leaf, Some((i, t)))) = self.find(key)? else {
            return Ok(false);
        };
        let (_, _, cap) = self.eng.geo.tuple_hdr(t)?;
        let b = self.stage(leaf, LEAF_BYTES)?;
        let bm = leaf_bitmap(b)? & !(1 << i);
        set_bitmap(b, bm);
        self.free_tuple(t, cap);
        self.op.keys_delta -= 1;
        if bm == 0 {
            self.drop_empty_leaf(leaf)?;
        }
        Ok(true)
    }

    /// Clears slot `i` of `leaf` if it still links tuple `t`, and frees the
    /// tuple's block (a damaged record, removed by repair). The leaf must
    /// verify (staging checks it). An emptied leaf stays (valid).
    pub(super) fn unlink_slot(&mut self, leaf: u64, i: usize, t: u64) -> Result<bool> {
        if i >= SLOTS {
            return Ok(false);
        }
        let b = self.stage(leaf, LEAF_BYTES)?;
        let bm = leaf_bitmap(b)?;
        if bm & (1 << i) == 0 || slot(b, i).1 != t {
            return Ok(false);
        }
        set_bitmap(b, bm & !(1 << i));
        self.op.ops += 1;
        self.op.keys_delta -= 1;
        // The tuple's own capacity may be damaged: no write touches it
        // anyway, so its header alone bounds the range kept from writes.
        self.free_tuple(t, TUPLE_HDR);
        Ok(true)
    }

    /// Unlinks and frees an emptied leaf when its parent keeps at least
    /// two children (its key range joins a neighbour's). A leaf this
    /// operation allocated, or one whose parent would be left with one
    /// child, stays (empty leaves are valid).
    fn drop_empty_leaf(&mut self, leaf: u64) -> Result<()> {
        let Some(&(p, i)) = self.path.last() else {
            return Ok(());
        };
        if self.op.staged.get(&leaf).is_some_and(|s| s.fresh) {
            return Ok(());
        }
        let b = self.stage(p, INNER_BYTES)?;
        let mut d = InnerD::decode(b, p)?;
        if d.children.len() < 3 || d.children.get(i) != Some(&leaf) {
            return Ok(());
        }
        d.children.remove(i);
        // Child i covered sep[i-1]..sep[i]: the left neighbour takes it
        // (the right one, for the first child).
        d.seps.remove(i.saturating_sub(1));
        d.encode(b);
        self.op.finger = None;
        self.op.frees.push(POff::new(leaf));
        self.op.free_ranges.push((leaf, leaf + LEAF_BYTES as u64));
        self.op.leaves_freed += 1;
        Ok(())
    }

    /// Inserts `(kp, t)` for `key` into `leaf` (path in `self.path`),
    /// splitting it when full.
    fn leaf_insert(&mut self, leaf: u64, key: &[u8], kp: u64, t: u64) -> Result<()> {
        let b = self.stage(leaf, LEAF_BYTES)?;
        let bm = leaf_bitmap(b)?;
        if bm != FULL {
            let i = (!bm & FULL).trailing_zeros() as usize;
            set_slot(b, i, kp, t, key);
            set_bitmap(b, bm | (1 << i));
            return Ok(());
        }
        let copy = b.clone();
        self.op.splits += 1;
        // The leaf's 32 entries and the new key's, in key order where it
        // matters: by prefix (the leaf's own, verified bytes), keys read
        // only to order entries that share a prefix and to cut the
        // separator — two key reads for random keys, not 32 tuples.
        let geo = &self.eng.geo;
        let mut ents: Vec<SplitEnt> = (0..SLOTS)
            .map(|i| {
                let (p, tt) = slot(&copy, i);
                SplitEnt {
                    prefix: p,
                    slot: Some(i),
                    tuple: tt,
                    key: None,
                }
            })
            .collect();
        ents.push(SplitEnt {
            prefix: kp,
            slot: None,
            tuple: t,
            key: Some(key.to_vec()),
        });
        ents.sort_by_key(|e| e.prefix);
        let n = ents.len();
        // An append: the new key is past every key of the rightmost leaf
        // (ascending inserts). The full leaf keeps 7/8 of its slots and
        // the new one takes the rest with the new key: an ascending load
        // leaves its leaves 7/8 full rather than half full, and a random
        // put after it finds room rather than splitting each leaf it
        // lands in (PostgreSQL's B-tree leaves a rightmost split
        // fillfactor full for the same reason).
        // Keys are read only when the new key ties the greatest prefix;
        // a greater prefix last is an old slot's: no append.
        if ents[n - 1].prefix == kp {
            order_group(geo, self.kbuf, &mut ents, n - 1)?;
        }
        let append = ents[n - 1].slot.is_none() && self.rightmost()?;
        let m = if append {
            self.op.appends += 1;
            APPEND_KEEP
        } else {
            n / 2
        };
        order_group(geo, self.kbuf, &mut ents, m - 1)?;
        order_group(geo, self.kbuf, &mut ents, m)?;
        let right = self.new_node(LEAF_BYTES)?;
        {
            let rb = self.stage(right, LEAF_BYTES)?;
            // The new half is of its store's format, as the left one.
            init_leaf(rb, tree::leaf_has_fp(&copy));
            for (j, e) in ents[m..].iter().enumerate() {
                match e.slot {
                    Some(s) => tree::copy_slot(&copy, s, rb, j),
                    None => set_slot(rb, j, kp, t, key),
                }
            }
            set_bitmap(rb, (1u64 << (n - m)) - 1);
        }
        let mut nbm = 0u64;
        let mut new_left = false;
        for e in &ents[..m] {
            match e.slot {
                Some(s) => nbm |= 1 << s,
                None => new_left = true,
            }
        }
        let lb = self.stage(leaf, LEAF_BYTES)?;
        if new_left {
            let i = (!nbm & FULL).trailing_zeros() as usize;
            set_slot(lb, i, kp, t, key);
            nbm |= 1 << i;
        }
        set_bitmap(lb, nbm);
        let (Some(lo), Some(hi)) = (&ents[m - 1].key, &ents[m].key) else {
            unreachable!("order_group read the keys on both sides of the cut")
        };
        let sep = shortest_sep(lo, hi);
        self.split_parent(sep, leaf, right)
    }

    /// Links `right`, split off `leaf` at `sep`, into the parent on the
    /// path of the last look-up.
    fn split_parent(&mut self, sep: Vec<u8>, leaf: u64, right: u64) -> Result<()> {
        let mut path = std::mem::take(self.path);
        let r = self.insert_parent(&mut path, sep, leaf, right, 0);
        *self.path = path;
        r
    }

    /// Whether the path found by the last [`find`](Self::find) ends in the
    /// rightmost leaf: the last child at every level.
    fn rightmost(&mut self) -> Result<bool> {
        let src = WSrc {
            geo: &self.eng.geo,
            staged: &self.op.staged,
        };
        for &(p, i) in self.path.iter() {
            let mut n = 0;
            src.pick(p, self.nb, &mut |_, k| {
                n = k;
                Ok(0)
            })?;
            if i + 1 != n {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Inserts separator `sep` and its right child after `left` into the
    /// parent on `path`, splitting inner nodes up to a new root as needed.
    fn insert_parent(
        &mut self,
        path: &mut Vec<(u64, usize)>,
        mut sep: Vec<u8>,
        mut left: u64,
        mut right: u64,
        mut level: u16,
    ) -> Result<()> {
        loop {
            let Some((p, i)) = path.pop() else {
                let r = self.new_node(INNER_BYTES)?;
                let d = InnerD {
                    level: level + 1,
                    children: vec![left, right],
                    seps: vec![sep],
                };
                d.encode(self.stage(r, INNER_BYTES)?);
                self.op.new_root = Some(r);
                return Ok(());
            };
            let b = self.stage(p, INNER_BYTES)?;
            let mut d = InnerD::decode(b, p)?;
            if d.children.get(i) != Some(&left) {
                return Err(corrupt(format!("inner {p:#x}: path does not match")));
            }
            d.children.insert(i + 1, right);
            d.seps.insert(i, sep);
            if d.fits() {
                d.encode(b);
                return Ok(());
            }
            level = d.level;
            let (l, up, r) = d.split()?;
            l.encode(self.stage(p, INNER_BYTES)?);
            let rn = self.new_node(INNER_BYTES)?;
            r.encode(self.stage(rn, INNER_BYTES)?);
            sep = up;
            left = p;
            right = rn;
        }
    }
}

/// Slots a rightmost leaf keeps when a key past all of it splits it
/// (an append, [`Writer::leaf_insert`]): 7/8, so a bulk load leaves room
/// for later random puts.
const APPEND_KEEP: usize = SLOTS - SLOTS / 8;

/// One entry of a leaf being split: a slot of the full leaf (`slot`) or
/// the new key (`None`), its key read only when [`order_group`] needs it.
struct SplitEnt {
    prefix: u64,
    slot: Option<usize>,
    tuple: u64,
    key: Option<Vec<u8>>,
}

/// Puts the entries sharing entry `at`'s prefix (a run of `ents`, which
/// are ordered by prefix) in key order, reading the keys it lacks, each
/// checked against its key check: the keys decide the split and the
/// separator, so only verified ones may.
fn order_group(
    geo: &Geo,
    kbuf: &mut [u8; MAX_KEY],
    ents: &mut [SplitEnt],
    at: usize,
) -> Result<()> {
    let p = ents[at].prefix;
    let lo = ents[..at]
        .iter()
        .rposition(|e| e.prefix != p)
        .map_or(0, |i| i + 1);
    let hi = ents[at..]
        .iter()
        .position(|e| e.prefix != p)
        .map_or(ents.len(), |i| at + i);
    let group = &mut ents[lo..hi];
    for e in group.iter_mut().filter(|e| e.key.is_none()) {
        e.key = Some(geo.tuple_key_verify(e.tuple, kbuf)?.to_vec());
    }
    group.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(())
}

pub(super) struct InpSession<'e> {
    pub(super) eng: &'e Inp,
    pub(super) th: Box<dyn AllocThread + Send + 'e>,
    pub(super) op: OpState,
    pub(super) path: Vec<(u64, usize)>,
    pub(super) bufs: Bufs,
    pub(super) _ticket: Ticket<'e>,
}

impl<'e> InpSession<'e> {
    /// Runs one write operation under the writer lock: `f` stages it, then
    /// it commits. On an error everything it reserved is given back; a full
    /// pool with frees held back retries once after releasing them.
    pub(super) fn write<R>(
        &mut self,
        mut f: impl FnMut(&mut Writer<'e, '_>) -> Result<R>,
    ) -> Result<R> {
        let eng = self.eng;
        let _held = LockHeld::enter();
        let mut w = eng.w.lock();
        // One commit point of the persist trace per write that committed a
        // record (an empty operation commits none); a rotation it needed
        // and the allocator's publishes are part of it.
        let scope = ferrite_pmem::trace::commit_scope();
        let seq = w.seq;
        // Intent protocol: the next record lists the frees still owed;
        // publish a large backlog first (one empty record), so that it
        // never crowds this write's record out of the log area.
        if eng.intent_cap != 0 && w.owed.len() * 16 > eng.log_cap / 4 {
            eng.rotate(&mut w, &mut *self.th)?;
        }
        let mut retried = false;
        loop {
            self.op.clear();
            let r = {
                let mut wr = Writer {
                    eng,
                    th: &mut *self.th,
                    op: &mut self.op,
                    path: &mut self.path,
                    kbuf: &mut self.bufs.kbuf,
                    nb: &mut self.bufs.nb,
                };
                f(&mut wr)
            };
            let r = r.and_then(|v| {
                eng.commit(&mut w, &mut *self.th, &mut self.op, false)
                    .map(|()| v)
            });
            match r {
                Ok(v) => {
                    if w.seq != seq {
                        scope.mark();
                    }
                    return Ok(v);
                }
                Err(e) => {
                    for res in self.op.res.drain(..) {
                        let _ = self.th.cancel(res);
                    }
                    if matches!(e, EngineError::Full(_))
                        && !retried
                        && (!w.held.is_empty() || !w.owed.is_empty())
                    {
                        retried = true;
                        self.op.clear();
                        eng.rotate(&mut w, &mut *self.th)?;
                        continue;
                    }
                    return Err(e);
                }
            }
        }
    }
}

impl Session for InpSession<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        let _p = breakdown::phase(Phase::Scan);
        let _r = self.eng.rw.read();
        get_locked(self.eng, key, out, &mut self.path, &mut self.bufs)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key)?;
        check_value(value)?;
        self.write(|w| w.put(key, value))
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        check_key(key)?;
        self.write(|w| w.delete(key))
    }

    fn scan_with(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _p = breakdown::phase(Phase::Scan);
        let _r = self.eng.rw.read();
        scan_locked(self.eng, from, limit, f, &mut self.bufs)
    }

    fn scan_back_with(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let _p = breakdown::phase(Phase::Scan);
        let _r = self.eng.rw.read();
        scan_back_locked(self.eng, upto, limit, f, &mut self.bufs)
    }

    fn batch(&mut self, ops: &[Op<'_>]) -> Result<()> {
        check_ops(ops)?;
        // Applied in key order: consecutive keys descend to the same or
        // neighbouring leaves, whose staged copies are then still in cache
        // (a large batch in arrival order touches the whole tree at
        // random). Later operations on a key win: only the last one per key
        // is applied, so that no tuple is touched twice in a record.
        let idx = crate::key_order(ops);
        self.write(|w| {
            for (n, &i) in idx.iter().enumerate() {
                let op = &ops[i];
                if idx
                    .get(n + 1)
                    .is_some_and(|&next| ops[next].key() == op.key())
                {
                    continue;
                }
                match op {
                    Op::Put { key, value } => w.put(key, value)?,
                    Op::Delete { key } => {
                        w.delete(key)?;
                    }
                }
            }
            Ok(())
        })
    }
}
