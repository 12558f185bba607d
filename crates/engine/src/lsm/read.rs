//! LSM reads: point lookups (memtable, then runs newest first), scans in
//! either direction over the memtable merged with the runs, the live key
//! count, and the two read-only views over them — a live reader and a
//! snapshot holding a copy of the memtable and one version's runs.

use super::*;

impl Lsm {
    /// Looks `key` up: memtable, then runs newest first. `blk` is scratch.
    pub(super) fn get_into(
        &self,
        key: &[u8],
        out: &mut Vec<u8>,
        blk: &mut Vec<u8>,
    ) -> Result<bool> {
        let version = {
            let st = self.state.read();
            if let Some(v) = st.mem.get(key) {
                out.clear();
                return Ok(match v {
                    Some(v) => {
                        out.extend_from_slice(v);
                        true
                    }
                    None => false,
                });
            }
            st.version.clone()
        };
        self.runs_get(&version, key, out, blk)
    }

    /// `Some(true)`: value in `out`; `Some(false)`: tombstone; `None`: not in this run.
    fn run_get(
        &self,
        run: &Run,
        key: &[u8],
        out: &mut Vec<u8>,
        blk: &mut Vec<u8>,
    ) -> Result<Option<bool>> {
        if !bloom_may_contain(&run.meta.bloom, run.meta.k, key) {
            return Ok(None);
        }
        let i = run.meta.blocks.partition_point(|b| &*b.first <= key);
        if i == 0 {
            return Ok(None);
        }
        let b = &run.meta.blocks[i - 1];
        format::read_block(&self.pool, run.off, &run.meta, b, blk)?;
        let mut q = 0;
        while q < blk.len() {
            let (k, v, next) = parse_run_record(blk, q)?;
            match k.cmp(key) {
                std::cmp::Ordering::Less => q = next,
                std::cmp::Ordering::Equal => {
                    out.clear();
                    if let Some(v) = v {
                        out.extend_from_slice(v);
                        return Ok(Some(true));
                    }
                    return Ok(Some(false));
                }
                std::cmp::Ordering::Greater => return Ok(None),
            }
        }
        Ok(None)
    }

    pub(super) fn scan(
        &self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        if limit == 0 {
            return Ok(0);
        }
        // A batch of the memtable at a time, each with the runs of the
        // same moment (one lock): every key is read from one consistent
        // state, and a memtable of tombstones is cloned once per scan,
        // not whole per call.
        self.scan_batched(
            from,
            limit,
            &mut |at, l| {
                let st = self.state.read();
                let (mem, cut) = mem_from(&st.mem, at, l);
                (mem, cut, st.version.clone())
            },
            f,
        )
    }

    /// An ascending scan of up to `limit` pairs from `from`, in memtable
    /// batches: `state(at, l)` gives the memtable's entries from `at` on
    /// ([`mem_from`]: for `l` values, and the key of the first entry left
    /// out) and the runs of the same moment, merged below that key before
    /// the next batch is asked for.
    pub(super) fn scan_batched(
        &self,
        from: &[u8],
        limit: usize,
        state: &mut dyn FnMut(&[u8], usize) -> MemBatch,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let mut at = from.to_vec();
        let mut n = 0;
        loop {
            let (mem, cut, version) = state(&at, limit - n);
            let (got, stopped) =
                self.merge_from(&mem, &version, &at, cut.as_deref(), limit - n, f)?;
            n += got;
            match cut {
                Some(c) if n < limit && !stopped => at = c,
                _ => return Ok(n),
            }
        }
    }

    /// Merges `mem` (the memtable's entries from `from` on, all of them
    /// below `cut`) with the runs of `version`: up to `limit` pairs,
    /// ascending, below `cut`. Returns the pairs visited and whether `f`
    /// stopped the scan.
    fn merge_from(
        &self,
        mem: &[Entry],
        version: &Version,
        from: &[u8],
        cut: Option<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(usize, bool)> {
        let mut m = Merge::new(&self.pool, entries_iter(mem), &version.runs, from)?;
        let mut n = 0;
        while n < limit {
            match m.next()? {
                None => break,
                // Past the memtable batch: its next entries are unknown.
                Some((k, _)) if cut.is_some_and(|c| k >= c) => break,
                Some((k, Some(v))) => {
                    n += 1;
                    if !f(k, v) {
                        return Ok((n, true));
                    }
                }
                Some((_, None)) => {}
            }
        }
        Ok((n, false))
    }

    /// Live keys of (`mem`, `version`): a merge of everything.
    pub(super) fn count(&self, mem: &[Entry], version: &Version) -> Result<u64> {
        let mut m = Merge::new(&self.pool, entries_iter(mem), &version.runs, &[])?;
        let mut n = 0;
        while let Some((_, v)) = m.next()? {
            if v.is_some() {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Live keys now: a merge of the memtable and every run.
    pub(super) fn live_len(&self) -> Result<u64> {
        let (mem, version) = {
            let st = self.state.read();
            let mem: Vec<Entry> = st.mem.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            (mem, st.version.clone())
        };
        self.count(&mem, &version)
    }

    /// Looks `key` up in the runs of `version`, newest first.
    fn runs_get(
        &self,
        version: &Version,
        key: &[u8],
        out: &mut Vec<u8>,
        blk: &mut Vec<u8>,
    ) -> Result<bool> {
        for run in &version.runs {
            if let Some(found) = self.run_get(run, key, out, blk)? {
                return Ok(found);
            }
        }
        out.clear();
        Ok(false)
    }

    /// [`scan`](Self::scan) descending: pairs below `upto`, greatest first.
    pub(super) fn scan_back(
        &self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        if limit == 0 {
            return Ok(0);
        }
        // In memtable batches, as `scan`.
        self.scan_back_batched(
            upto,
            limit,
            &mut |at, l| {
                let st = self.state.read();
                let (mem, cut) = mem_below(&st.mem, at, l);
                (mem, cut, st.version.clone())
            },
            f,
        )
    }

    /// [`scan_batched`](Self::scan_batched) descending: `state(at, l)`
    /// gives the memtable's entries below `at` ([`mem_below`]).
    pub(super) fn scan_back_batched(
        &self,
        upto: Bound<&[u8]>,
        limit: usize,
        state: &mut dyn FnMut(Bound<&[u8]>, usize) -> MemBatch,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let mut at: Bound<Vec<u8>> = upto.map(<[u8]>::to_vec);
        let mut n = 0;
        loop {
            let upto = at.as_ref().map(Vec::as_slice);
            let (mem, cut, version) = state(upto, limit - n);
            let (got, stopped) =
                self.merge_below(&mem, &version, upto, cut.as_deref(), limit - n, f)?;
            n += got;
            match cut {
                Some(c) if n < limit && !stopped => at = Bound::Included(c),
                _ => return Ok(n),
            }
        }
    }

    /// Merges `mem` (the memtable's entries below `upto`, descending, all
    /// of them above `cut`) with the runs of `version`: up to `limit`
    /// pairs, descending, above `cut`. Returns the pairs visited and
    /// whether `f` stopped the scan.
    fn merge_below(
        &self,
        mem: &[Entry],
        version: &Version,
        upto: Bound<&[u8]>,
        cut: Option<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(usize, bool)> {
        let mut srcs = Vec::with_capacity(version.runs.len());
        for r in &version.runs {
            srcs.push(RunBackCursor::seek(&self.pool, r, upto)?);
        }
        let mut mem_at = 0;
        let mut n = 0;
        while n < limit {
            // The greatest current key; the newest source wins a tie
            // (the memtable, then the runs newest first).
            let mut best: Option<(usize, &[u8])> = mem.get(mem_at).map(|(k, _)| (0, k.as_slice()));
            for (i, c) in srcs.iter().enumerate() {
                if let Some((k, _)) = c.current()
                    && best.is_none_or(|(_, b)| k > b)
                {
                    best = Some((i + 1, k));
                }
            }
            let Some((b, key)) = best else { break };
            // Below the memtable batch: its next entries are unknown.
            if cut.is_some_and(|c| key <= c) {
                break;
            }
            let key = key.to_vec();
            let value = if b == 0 {
                mem[mem_at].1.clone()
            } else {
                srcs[b - 1].current().expect("live").1.map(<[u8]>::to_vec)
            };
            if let Some(v) = &value {
                n += 1;
                if !f(&key, v) {
                    return Ok((n, true));
                }
            }
            // The chosen entry and every older version of its key.
            if mem.get(mem_at).is_some_and(|(k, _)| *k == key) {
                mem_at += 1;
            }
            for c in &mut srcs {
                while c.current().is_some_and(|(k, _)| k >= key.as_slice()) {
                    c.retreat()?;
                }
            }
        }
        Ok((n, false))
    }
}

/// One batch of a scan: memtable entries, the key of the first entry left
/// out, and the runs of the same moment.
pub(super) type MemBatch = (Vec<Entry>, Option<Vec<u8>>, Arc<Version>);

/// Memtable entries a scan clones at a time beyond the `limit` live ones
/// it wants: a memtable of tombstones (a large delete not yet flushed) is
/// then cloned in batches as the scan goes, not whole by every call.
const MEM_BATCH: usize = 256;

/// The memtable's entries from `from` on, ascending: until `limit` of
/// them are values, or [`MEM_BATCH`] more than `limit` entries were taken;
/// and the key of the first entry left out (`None`: none was), below
/// which the merge of this batch must stay.
fn mem_from(
    mem: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    from: &[u8],
    limit: usize,
) -> (Vec<Entry>, Option<Vec<u8>>) {
    take_batch(
        mem.range::<[u8], _>((Bound::Included(from), Bound::Unbounded)),
        limit,
    )
}

/// [`mem_from`] descending: the entries below `upto`, and the key of the
/// first one left out, above which the merge must stay.
fn mem_below(
    mem: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    upto: Bound<&[u8]>,
    limit: usize,
) -> (Vec<Entry>, Option<Vec<u8>>) {
    take_batch(mem.range::<[u8], _>((Bound::Unbounded, upto)).rev(), limit)
}

fn take_batch<'m>(
    entries: impl Iterator<Item = (&'m Vec<u8>, &'m Option<Vec<u8>>)>,
    limit: usize,
) -> (Vec<Entry>, Option<Vec<u8>>) {
    let mut v = Vec::new();
    let mut puts = 0;
    let cap = limit.saturating_add(MEM_BATCH);
    for (k, val) in entries {
        if puts >= limit || v.len() >= cap {
            return (v, Some(k.clone()));
        }
        v.push((k.clone(), val.clone()));
        if val.is_some() {
            puts += 1;
        }
    }
    (v, None)
}

/// A read-only view: a copy of the memtable and the run list of one
/// moment. The runs it holds are not reused while it lives: the next
/// memtable flush waits for it (`Lsm::wait_graveyard`), so a snapshot
/// held across a flush stalls the writer that flushes.
pub(super) struct LsmSnapshot<'e> {
    pub(super) eng: &'e Lsm,
    pub(super) mem: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    pub(super) version: Arc<Version>,
    pub(super) blk: Vec<u8>,
}

/// A live reader: the engine's own lock-free read path.
pub(super) struct LsmReader<'e> {
    pub(super) eng: &'e Lsm,
    pub(super) blk: Vec<u8>,
}

impl SnapshotRead for LsmReader<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        let _p = breakdown::phase(Phase::Scan);
        self.eng.get_into(key, out, &mut self.blk)
    }

    fn scan_with(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        self.eng.scan(from, limit, f)
    }

    fn scan_back_with(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        self.eng.scan_back(upto, limit, f)
    }

    fn len(&mut self) -> Result<u64> {
        self.eng.live_len()
    }
}

impl SnapshotRead for LsmSnapshot<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        if let Some(v) = self.mem.get(key) {
            out.clear();
            if let Some(v) = v {
                out.extend_from_slice(v);
            }
            return Ok(v.is_some());
        }
        self.eng.runs_get(&self.version, key, out, &mut self.blk)
    }

    fn scan_with(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        if limit == 0 {
            return Ok(0);
        }
        let (mem, version) = (&self.mem, &self.version);
        self.eng.scan_batched(
            from,
            limit,
            &mut |at, l| {
                let (m, cut) = mem_from(mem, at, l);
                (m, cut, version.clone())
            },
            f,
        )
    }

    fn scan_back_with(
        &mut self,
        upto: Bound<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        if limit == 0 {
            return Ok(0);
        }
        let (mem, version) = (&self.mem, &self.version);
        self.eng.scan_back_batched(
            upto,
            limit,
            &mut |at, l| {
                let (m, cut) = mem_below(mem, at, l);
                (m, cut, version.clone())
            },
            f,
        )
    }

    fn len(&mut self) -> Result<u64> {
        let mem: Vec<Entry> = self
            .mem
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        self.eng.count(&mem, &self.version)
    }
}
