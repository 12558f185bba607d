//! Merged iteration: cursors over a run's records forwards ([`RunCursor`])
//! and backwards ([`RunBackCursor`]), and [`Merge`], which merges the
//! memtable's entries with the runs newest first (a newer entry of a key
//! shadows the older ones; tombstones are returned as `None`).

use super::*;

/// A cursor over a run's records from a key on; its current record is
/// read in place from the block buffer.
struct RunCursor<'a> {
    pool: &'a Region,
    run: &'a Run,
    block: usize,
    buf: Vec<u8>,
    /// The current record: (start, end) of key and value in `buf`, and
    /// whether it is a tombstone; `None` at the end.
    cur: Option<(usize, usize, usize, bool)>,
    /// Where the record after the current one starts.
    next: usize,
}

impl<'a> RunCursor<'a> {
    fn seek(pool: &'a Region, run: &'a Run, from: &[u8]) -> Result<RunCursor<'a>> {
        let i = run
            .meta
            .blocks
            .partition_point(|b| &*b.first <= from)
            .saturating_sub(1);
        let mut c = RunCursor {
            pool,
            run,
            block: i,
            buf: Vec::new(),
            cur: None,
            next: 0,
        };
        c.load()?;
        c.advance()?;
        // Skip the records before `from`.
        while c.current().is_some_and(|(k, _)| k < from) {
            c.advance()?;
        }
        Ok(c)
    }

    fn load(&mut self) -> Result<()> {
        self.next = 0;
        self.buf.clear();
        if let Some(b) = self.run.meta.blocks.get(self.block) {
            format::read_block(self.pool, self.run.off, &self.run.meta, b, &mut self.buf)?;
        }
        Ok(())
    }

    fn advance(&mut self) -> Result<()> {
        while self.next >= self.buf.len() {
            if self.block >= self.run.meta.blocks.len() {
                self.cur = None;
                return Ok(());
            }
            self.block += 1;
            self.load()?;
        }
        let p = self.next;
        let (k, v, next) = parse_run_record(&self.buf, p)?;
        let ks = p + format::REC_FIXED;
        let ke = ks + k.len();
        self.cur = Some((ks, ke, next, v.is_none()));
        self.next = next;
        Ok(())
    }

    fn current(&self) -> Option<MergedEntry<'_>> {
        self.cur.map(|(ks, ke, end, tomb)| {
            let v = (!tomb).then(|| &self.buf[ke..end]);
            (&self.buf[ks..ke], v)
        })
    }
}

/// A run read backwards: every record of the current block is indexed
/// when the block is loaded, then visited from the last.
pub(super) struct RunBackCursor<'a> {
    pool: &'a Region,
    run: &'a Run,
    /// The block loaded; `None` before the first.
    block: Option<usize>,
    buf: Vec<u8>,
    /// Every record of `buf`: (key start, key end, record end, tombstone).
    recs: Vec<(usize, usize, usize, bool)>,
    /// One past the current record in `recs`; 0 when exhausted.
    at: usize,
}

impl<'a> RunBackCursor<'a> {
    /// A cursor at the greatest record below `upto`.
    pub(super) fn seek(
        pool: &'a Region,
        run: &'a Run,
        upto: Bound<&[u8]>,
    ) -> Result<RunBackCursor<'a>> {
        let blocks = &run.meta.blocks;
        let end = match upto {
            Bound::Included(u) => blocks.partition_point(|b| &*b.first <= u),
            Bound::Excluded(u) => blocks.partition_point(|b| &*b.first < u),
            Bound::Unbounded => blocks.len(),
        };
        let mut c = RunBackCursor {
            pool,
            run,
            block: end.checked_sub(1),
            buf: Vec::new(),
            recs: Vec::new(),
            at: 0,
        };
        c.load()?;
        let below = |k: &[u8]| match upto {
            Bound::Included(u) => k <= u,
            Bound::Excluded(u) => k < u,
            Bound::Unbounded => true,
        };
        while c.current().is_some_and(|(k, _)| !below(k)) {
            c.retreat()?;
        }
        Ok(c)
    }

    /// Loads block `self.block` (nothing when `None`) and stands on its
    /// last record.
    fn load(&mut self) -> Result<()> {
        self.buf.clear();
        self.recs.clear();
        self.at = 0;
        let Some(b) = self.block.and_then(|i| self.run.meta.blocks.get(i)) else {
            return Ok(());
        };
        format::read_block(self.pool, self.run.off, &self.run.meta, b, &mut self.buf)?;
        let mut p = 0;
        while p < self.buf.len() {
            let (k, v, next) = parse_run_record(&self.buf, p)?;
            let ks = p + format::REC_FIXED;
            self.recs.push((ks, ks + k.len(), next, v.is_none()));
            p = next;
        }
        self.at = self.recs.len();
        Ok(())
    }

    /// Steps to the previous record (the previous block's last at a block
    /// start).
    pub(super) fn retreat(&mut self) -> Result<()> {
        self.at = self.at.saturating_sub(1);
        while self.at == 0 {
            match self.block {
                Some(i) if i > 0 => {
                    self.block = Some(i - 1);
                    self.load()?;
                }
                _ => {
                    self.block = None;
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    pub(super) fn current(&self) -> Option<MergedEntry<'_>> {
        let &(ks, ke, end, tomb) = self.recs.get(self.at.checked_sub(1)?)?;
        let v = (!tomb).then(|| &self.buf[ke..end]);
        Some((&self.buf[ks..ke], v))
    }
}

/// A merged entry: key and value (`None`: tombstone).
pub(super) type MergedEntry<'a> = (&'a [u8], Option<&'a [u8]>);

/// Memtable entries in key order (value or tombstone).
type MemIter<'a> = Box<dyn Iterator<Item = MergedEntry<'a>> + 'a>;

pub(super) fn entries_iter(mem: &[Entry]) -> MemIter<'_> {
    Box::new(mem.iter().map(|(k, v)| (k.as_slice(), v.as_deref())))
}

pub(super) fn mem_iter<'a>(
    mem: impl Iterator<Item = (&'a Vec<u8>, &'a Option<Vec<u8>>)> + 'a,
) -> MemIter<'a> {
    Box::new(mem.map(|(k, v)| (k.as_slice(), v.as_deref())))
}

enum Source<'a> {
    Mem {
        it: MemIter<'a>,
        cur: Option<MergedEntry<'a>>,
    },
    Run(RunCursor<'a>),
}

impl Source<'_> {
    fn advance(&mut self) -> Result<()> {
        match self {
            Source::Mem { it, cur } => {
                *cur = it.next();
                Ok(())
            }
            Source::Run(c) => c.advance(),
        }
    }

    fn current(&self) -> Option<MergedEntry<'_>> {
        match self {
            Source::Mem { cur, .. } => *cur,
            Source::Run(c) => c.current(),
        }
    }
}

/// K-way merge, newest source first: for equal keys the newest wins and
/// the older versions are skipped. Yields tombstones too. Entries are
/// read in place (memtable, or a run's block buffer): a merge copies and
/// allocates nothing per entry.
pub(super) struct Merge<'a> {
    srcs: Vec<Source<'a>>,
    /// The source whose entry the last `next` returned (advanced lazily).
    cur: Option<usize>,
}

impl<'a> Merge<'a> {
    /// `mem` (already starting at `from`), then `runs` newest first from `from`.
    pub(super) fn new(
        pool: &'a Region,
        mut mem: MemIter<'a>,
        runs: &'a [Arc<Run>],
        from: &[u8],
    ) -> Result<Self> {
        let first = mem.next();
        let mut srcs = vec![Source::Mem {
            it: mem,
            cur: first,
        }];
        for r in runs {
            srcs.push(Source::Run(RunCursor::seek(pool, r, from)?));
        }
        Ok(Merge { srcs, cur: None })
    }

    #[allow(clippy::should_implement_trait)]
    pub(super) fn next(&mut self) -> Result<Option<MergedEntry<'_>>> {
        if let Some(c) = self.cur.take() {
            self.srcs[c].advance()?;
        }
        let mut best: Option<usize> = None;
        for i in 0..self.srcs.len() {
            if let Some((k, _)) = self.srcs[i].current()
                && best.is_none_or(|b| k < self.srcs[b].current().expect("live").0)
            {
                best = Some(i);
            }
        }
        let Some(b) = best else { return Ok(None) };
        // Older versions of the same key are shadowed: skip them.
        for i in b + 1..self.srcs.len() {
            let (lo, hi) = self.srcs.split_at_mut(i);
            let key = lo[b].current().expect("live").0;
            while hi[0].current().is_some_and(|(k, _)| k <= key) {
                hi[0].advance()?;
            }
        }
        self.cur = Some(b);
        Ok(self.srcs[b].current())
    }
}
