//! Sessions: one per thread, each with its transaction slot. Page locks
//! (strict 2PL), copy-on-write preparation of written pages, commit, the
//! non-transaction scope, page allocation, and the [`PageGuard`] a locked
//! page is read and written through.

use super::*;

impl Cache {
    /// A session: one per thread; it owns a transaction slot.
    pub fn session(&self) -> Result<Session<'_>> {
        let id = self
            .meta()
            .free_sessions
            .pop()
            .ok_or(CacheError::NoSession(self.geo.sessions as usize))?;
        Ok(Session {
            cache: self,
            id,
            st: RefCell::new(SessState::default()),
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phys {
    Read,
    Write,
}

struct Held {
    reads: u32,
    writes: u32,
    phys: Phys,
    loc: Loc,
    /// Lines written in a non-transaction (flushed at release).
    lines: u64,
}

struct TxPage {
    page: u32,
    new: u32,
    old: Option<u32>,
}

#[derive(Default)]
struct SessState {
    held: HashMap<u32, Held>,
    writes: u32,
    in_tx: bool,
    tx: Vec<TxPage>,
    non_tx: u32,
}

/// A thread's handle on the cache; it owns one transaction slot.
pub struct Session<'c> {
    cache: &'c Cache,
    id: u8,
    st: RefCell<SessState>,
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        self.cache.meta().free_sessions.push(self.id);
    }
}

impl<'c> Session<'c> {
    pub fn cache(&self) -> &'c Cache {
        self.cache
    }

    /// True while a transaction is open (a write lock is held outside a
    /// non-transaction scope).
    pub fn in_tx(&self) -> bool {
        self.st.borrow().in_tx
    }

    /// Locks `page` in `mode` (waiting for other sessions), paging it in
    /// if needed. A write lock inside a transaction (the default) makes
    /// the page part of it; see the module documentation. Upgrading a read
    /// lock another session also holds waits for it: two sessions
    /// upgrading the same page deadlock (use [`PageGuard::try_upgrade`]).
    pub fn get_page(&self, page: u32, mode: Mode) -> Result<PageGuard<'_, 'c>> {
        self.lock_page(page, mode, false)
    }

    /// Write-locks `page`, which the caller has just allocated and will
    /// overwrite whole, without reading its old content from the disk
    /// when it is not cached: the guard shows zeros instead (a cached
    /// page keeps its bytes). Otherwise as [`Session::get_page`] in
    /// [`Mode::Write`] — in a transaction the zeroed slot is the page's
    /// copy (its committed version stays the disk's), in a
    /// non-transaction it is the page, DIRTY. Building a branch of `n`
    /// pages thus costs `n` disk writes, not `n` reads and `n` writes.
    pub fn get_new_page(&self, page: u32) -> Result<PageGuard<'_, 'c>> {
        self.lock_page(page, Mode::Write, true)
    }

    fn lock_page(&self, page: u32, mode: Mode, fresh: bool) -> Result<PageGuard<'_, 'c>> {
        let c = self.cache;
        if page >= c.geo.disk_pages {
            return Err(CacheError::OutOfRange(page, c.geo.disk_pages));
        }
        let mut round = 0u32;
        loop {
            if self.try_lock(page, mode, fresh)? {
                return Ok(PageGuard {
                    s: self,
                    page,
                    mode,
                    released: false,
                });
            }
            c.region.medium().wait_hint(round);
            round = round.saturating_add(1);
        }
    }

    /// One attempt; `Ok(false)` when another session holds a conflicting lock.
    fn try_lock(&self, page: u32, mode: Mode, fresh: bool) -> Result<bool> {
        let c = self.cache;
        let mut m = c.meta();
        let mut st = self.st.borrow_mut();
        let me = self.id;
        let held_phys = st.held.get(&page).map(|h| h.phys);
        match (mode, held_phys) {
            (Mode::Read, Some(_)) => {
                st.held.get_mut(&page).expect("held").reads += 1;
                return Ok(true);
            }
            (Mode::Write, Some(Phys::Write)) => {
                st.held.get_mut(&page).expect("held").writes += 1;
                st.writes += 1;
                return Ok(true);
            }
            (Mode::Write, Some(Phys::Read)) => {
                let l = m.locks.get_mut(&page).expect("held lock");
                if l.readers != 1 || l.writer.is_some() {
                    return Ok(false);
                }
                l.readers = 0;
                l.writer = Some(me);
                let h = st.held.get_mut(&page).expect("held");
                h.phys = Phys::Write;
                h.writes += 1;
                st.writes += 1;
            }
            (_, None) => {
                if m.loading.contains(&page) {
                    // Another session is paging it in: wait on the page.
                    return Ok(false);
                }
                let l = m.locks.entry(page).or_default();
                match mode {
                    Mode::Read if l.writer.is_none() => l.readers += 1,
                    Mode::Write if l.writer.is_none() && l.readers == 0 => l.writer = Some(me),
                    _ => return Ok(false),
                }
                let found = if fresh && !m.lookup.contains_key(&page) {
                    self.install_fresh(&mut m, &mut st, page).map(Some)
                } else {
                    c.resident(&mut m, page)
                };
                let loc = match found {
                    Ok(Some(l)) => l,
                    Ok(None) => {
                        unlock(&mut m, page, me);
                        return Ok(false);
                    }
                    Err(e) => {
                        unlock(&mut m, page, me);
                        return Err(e);
                    }
                };
                let mut loc = loc;
                if mode == Mode::Read {
                    match loc {
                        Loc::Pmem(s) => {
                            let hot = m.accessed[s as usize];
                            m.accessed[s as usize] = true;
                            if hot
                                && !c.frames.is_empty()
                                && m.locks[&page].readers == 1
                                && m.entries[s as usize].map(|e| e.state) == Some(SlotState::Clean)
                            {
                                loc = c.promote(&mut m, page, s)?;
                            }
                        }
                        Loc::Dram(f) => {
                            m.frame_accessed[f as usize] = true;
                            c.stats.dram_hits.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                } else if let Loc::Pmem(s) = loc {
                    m.accessed[s as usize] = true;
                }
                st.held.insert(
                    page,
                    Held {
                        reads: (mode == Mode::Read) as u32,
                        writes: (mode == Mode::Write) as u32,
                        phys: if mode == Mode::Read {
                            Phys::Read
                        } else {
                            Phys::Write
                        },
                        loc,
                        lines: 0,
                    },
                );
                if mode == Mode::Write {
                    st.writes += 1;
                }
            }
        }
        if mode == Mode::Write
            && let Err(e) = self.prepare_write(&mut m, &mut st, page)
        {
            // Undo the logical lock taken above; the physical one follows
            // the usual release rules.
            drop(m);
            drop(st);
            self.release(page, Mode::Write);
            return Err(e);
        }
        Ok(true)
    }

    /// Whether a write lock taken now writes in place (inside a honoured
    /// non-transaction scope, or with transactions off) rather than into
    /// a transaction's copy.
    fn writes_in_place(&self, st: &SessState) -> bool {
        let o = &self.cache.opts;
        (st.non_tx > 0 && o.honour_non_tx) || !o.transactions
    }

    /// Gives the write-locked, uncached `page` a zeroed slot instead of
    /// paging it in ([`Session::get_new_page`]): in a transaction, the
    /// transaction's copy (UNCOMMITTED, no old slot: the committed version
    /// is the disk's, as for a page write-locked from DRAM), flushed by
    /// the commit; otherwise the page itself, zeros durable before its
    /// entry says DIRTY. The page is marked loading while a victim slot is
    /// found, as for a page-in.
    fn install_fresh(&self, m: &mut MetaGuard<'_>, st: &mut SessState, page: u32) -> Result<Loc> {
        let c = self.cache;
        m.loading.insert(page);
        let s = c.alloc_slot(m);
        m.loading.remove(&page);
        let s = s?;
        // Our write lock kept every other session from paging it in while
        // a write-back ran unlocked; a mapping found here is a bug.
        if let Some(&loc) = m.lookup.get(&page) {
            m.free_slots.push(s);
            debug_assert!(false, "page {page} cached during install_fresh");
            return Ok(loc);
        }
        if self.writes_in_place(st) {
            c.install(m, s, page, &[0u8; PAGE], SlotState::Dirty);
        } else {
            // The commit flushes the copy.
            c.region.write(c.geo.slot_off(s), &[0u8; PAGE]);
            st.in_tx = true;
            self.add_copy(m, st, page, s, None);
        }
        Ok(Loc::Pmem(s))
    }

    /// Makes slot `new` (holding its bytes already) the transaction's copy
    /// of `page`: UNCOMMITTED for this session, mapped, and listed with the
    /// committed slot `old` it replaces at commit (`None`: the committed
    /// version is the disk's).
    fn add_copy(&self, m: &mut Meta, st: &mut SessState, page: u32, new: u32, old: Option<u32>) {
        let c = self.cache;
        c.set_entry(
            m,
            new,
            Some(Entry {
                page,
                state: SlotState::Uncommitted(self.id),
            }),
        );
        m.accessed[new as usize] = true;
        m.lookup.insert(page, Loc::Pmem(new));
        st.tx.push(TxPage { page, new, old });
        c.stats.cow_copies.fetch_add(1, Ordering::Relaxed);
    }

    /// Makes the write-locked `page` writable: a copy in the transaction,
    /// or (non-transaction) the page itself in a slot, DIRTY before any
    /// store to it.
    fn prepare_write(&self, m: &mut MetaGuard<'_>, st: &mut SessState, page: u32) -> Result<()> {
        let c = self.cache;
        let loc = st.held[&page].loc;
        let non_tx = self.writes_in_place(st);
        if non_tx {
            let s = match loc {
                Loc::Pmem(s) => {
                    // An in-place write: a write-back in flight must not
                    // mark this slot CLEAN afterwards.
                    m.slot_gen[s as usize] += 1;
                    if m.entries[s as usize].map(|e| e.state) == Some(SlotState::Clean) {
                        c.set_entry_persist(
                            m,
                            s,
                            Some(Entry {
                                page,
                                state: SlotState::Dirty,
                            }),
                        );
                    }
                    s
                }
                Loc::Dram(f) => {
                    let s = c.alloc_slot(m)?;
                    let data = c.frames[f as usize].lock().to_vec();
                    c.install(m, s, page, &data, SlotState::Dirty);
                    m.frame_page[f as usize] = None;
                    m.free_frames.push(f);
                    s
                }
            };
            st.held.get_mut(&page).expect("held").loc = Loc::Pmem(s);
            return Ok(());
        }
        st.in_tx = true;
        if st.tx.iter().any(|p| p.page == page) {
            return Ok(());
        }
        let new = c.alloc_slot(m)?;
        let mut data = vec![0u8; PAGE];
        c.read_loc(loc, 0, &mut data);
        c.region.write(c.geo.slot_off(new), &data);
        let old = match loc {
            Loc::Pmem(s) => Some(s),
            Loc::Dram(f) => {
                m.frame_page[f as usize] = None;
                m.free_frames.push(f);
                None
            }
        };
        self.add_copy(m, st, page, new, old);
        st.held.get_mut(&page).expect("held").loc = Loc::Pmem(new);
        Ok(())
    }

    /// Logical release of one lock of `page` in `mode`.
    fn release(&self, page: u32, mode: Mode) {
        let c = self.cache;
        let mut st = self.st.borrow_mut();
        let h = st.held.get_mut(&page).expect("released page is held");
        match mode {
            Mode::Read => h.reads -= 1,
            Mode::Write => h.writes -= 1,
        }
        let (reads, writes, lines, loc) = (h.reads, h.writes, h.lines, h.loc);
        if mode == Mode::Write {
            st.writes -= 1;
        }
        if st.in_tx {
            if st.writes == 0 {
                self.commit(&mut st);
            } else if c.opts.fault() == Some(Fault::EarlyRelease) && reads == 0 && writes == 0 {
                st.held.remove(&page);
                unlock(&mut c.meta(), page, self.id);
            }
            return;
        }
        // Outside a transaction: a non-transactional write is persisted
        // when the page's last write lock goes.
        if writes == 0 && lines != 0 {
            if let Loc::Pmem(s) = loc {
                let off = c.geo.slot_off(s);
                for l in 0..64 {
                    if lines & (1 << l) != 0 {
                        c.region.flush(off + l * 64, 64);
                    }
                }
                c.region.fence();
            }
            st.held.get_mut(&page).expect("held").lines = 0;
        }
        if reads == 0 && writes == 0 {
            st.held.remove(&page);
            unlock(&mut c.meta(), page, self.id);
        } else if writes == 0 && st.held[&page].phys == Phys::Write {
            downgrade(&mut c.meta(), page);
            st.held.get_mut(&page).expect("held").phys = Phys::Read;
        }
    }

    /// Commits the open transaction (see the module documentation), then
    /// performs the releases it delayed.
    fn commit(&self, st: &mut SessState) {
        let c = self.cache;
        let r = &c.region;
        let g = &c.geo;
        let mut m = c.meta();
        if !st.tx.is_empty() {
            for p in &st.tx {
                if c.opts.fault() != Some(Fault::CommitBeforeCopy) {
                    r.flush(g.slot_off(p.new), PAGE);
                }
                r.flush(g.entry_off(p.new), 8);
            }
            r.fence();
            let seq = c.commit_seq.fetch_add(1, Ordering::Relaxed);
            r.store_u64_persist(g.tx_off(self.id as usize), TxWord::committed(seq));
            let mut any_old = false;
            for p in &st.tx {
                if let Some(o) = p.old {
                    c.set_entry(&mut m, o, None);
                    r.flush(g.entry_off(o), 8);
                    any_old = true;
                }
            }
            if any_old {
                r.fence();
            }
            for p in &st.tx {
                c.set_entry(
                    &mut m,
                    p.new,
                    Some(Entry {
                        page: p.page,
                        state: SlotState::Dirty,
                    }),
                );
                r.flush(g.entry_off(p.new), 8);
            }
            r.fence();
            r.store_u64_persist(g.tx_off(self.id as usize), 0);
            for p in st.tx.drain(..) {
                if let Some(o) = p.old {
                    m.free_slots.push(o);
                }
            }
            c.stats.commits.fetch_add(1, Ordering::Relaxed);
        }
        st.in_tx = false;
        let pages: Vec<u32> = st.held.keys().copied().collect();
        for page in pages {
            let h = &st.held[&page];
            if h.reads == 0 && h.writes == 0 {
                st.held.remove(&page);
                unlock(&mut m, page, self.id);
            } else if h.writes == 0 && h.phys == Phys::Write {
                downgrade(&mut m, page);
                st.held.get_mut(&page).expect("held").phys = Phys::Read;
            }
        }
    }

    /// Runs `f` as a non-transaction: pages written in it are modified in
    /// place (DIRTY, persisted at each page's last write release), with no
    /// copy and no commit. After a crash such pages may hold any mix of
    /// old and new content, so use it only for structures not yet linked
    /// into anything reachable (P1 §5.3.5); link them with a transaction
    /// afterwards. Fails when a transaction is open.
    pub fn non_tx<R>(&self, f: impl FnOnce(&Self) -> R) -> Result<R> {
        {
            let mut st = self.st.borrow_mut();
            if st.in_tx {
                return Err(CacheError::Config(
                    "a non-transaction cannot start inside a transaction".into(),
                ));
            }
            st.non_tx += 1;
        }
        struct Exit<'a, 'c>(&'a Session<'c>);
        impl Drop for Exit<'_, '_> {
            fn drop(&mut self) {
                self.0.st.borrow_mut().non_tx -= 1;
            }
        }
        let _exit = Exit(self);
        Ok(f(self))
    }

    /// Allocates a disk page: sets its bit in the allocation bitmap, which
    /// is itself a cached page, so inside a transaction the allocation
    /// commits or rolls back with it (outside one it is a transaction of
    /// its own; inside a non-transaction it is in place: after a crash the
    /// application rebuilds the bitmap, P1 §5.5, with
    /// [`Session::rebuild_allocation`]).
    pub fn alloc_page(&self) -> Result<u32> {
        let c = self.cache;
        let g = c.geo;
        let hint = c.meta().alloc_hint;
        for k in 0..g.bitmap_pages {
            let b = (hint + k) % g.bitmap_pages;
            let lo = b * BITS_PER_PAGE;
            let hi = (lo + BITS_PER_PAGE).min(g.disk_pages);
            let guard = self.get_page(b, Mode::Read)?;
            let bits = guard.read_vec();
            let free =
                (lo..hi).find(|n| bits[((n - lo) / 8) as usize] & (1 << ((n - lo) % 8)) == 0);
            let Some(n) = free else { continue };
            let mut w = guard.upgrade()?;
            let i = (n - lo) as usize;
            let mut byte = [0u8];
            w.read(i / 8, &mut byte);
            byte[0] |= 1 << (i % 8);
            w.write(i / 8, &byte);
            c.meta().alloc_hint = b;
            return Ok(n);
        }
        Err(CacheError::DiskFull)
    }

    /// Frees a disk page (clears its bit, transactionally like [`Session::alloc_page`]).
    pub fn free_page(&self, n: u32) -> Result<()> {
        let g = self.cache.geo;
        if n >= g.disk_pages || n < g.bitmap_pages {
            return Err(CacheError::NotAllocated(n));
        }
        let b = n / BITS_PER_PAGE;
        let i = (n - b * BITS_PER_PAGE) as usize;
        let mut w = self.get_page(b, Mode::Write)?;
        let mut byte = [0u8];
        w.read(i / 8, &mut byte);
        if byte[0] & (1 << (i % 8)) == 0 {
            return Err(CacheError::NotAllocated(n));
        }
        byte[0] &= !(1 << (i % 8));
        w.write(i / 8, &byte);
        Ok(())
    }

    /// True when disk page `n` is allocated.
    pub fn is_allocated(&self, n: u32) -> Result<bool> {
        let g = self.cache.geo;
        if n >= g.disk_pages {
            return Err(CacheError::OutOfRange(n, g.disk_pages));
        }
        let b = n / BITS_PER_PAGE;
        let i = (n - b * BITS_PER_PAGE) as usize;
        let r = self.get_page(b, Mode::Read)?;
        let mut byte = [0u8];
        r.read(i / 8, &mut byte);
        Ok(byte[0] & (1 << (i % 8)) != 0)
    }

    /// P1 §5.5's allocation recovery: rewrites the bitmap (in one
    /// transaction) so exactly the bitmap pages and `live` are allocated —
    /// `live` being what the application reaches from its roots after a
    /// crash. Returns how many pages were freed (leaked by a crash).
    pub fn rebuild_allocation(&self, live: &[u32]) -> Result<usize> {
        let g = self.cache.geo;
        let mut want = vec![0u8; g.bitmap_pages as usize * PAGE];
        let mut set = |n: u32| want[(n / 8) as usize] |= 1 << (n % 8);
        for n in 0..g.bitmap_pages {
            set(n);
        }
        for &n in live {
            if n >= g.disk_pages {
                return Err(CacheError::OutOfRange(n, g.disk_pages));
            }
            set(n);
        }
        let mut guards = Vec::new();
        let mut freed = 0usize;
        for b in 0..g.bitmap_pages {
            let mut w = self.get_page(b, Mode::Write)?;
            let have = w.read_vec();
            let want = &want[b as usize * PAGE..(b as usize + 1) * PAGE];
            freed += have
                .iter()
                .zip(want)
                .map(|(h, w)| (h & !w).count_ones() as usize)
                .sum::<usize>();
            if have != want {
                w.write(0, want);
            }
            guards.push(w);
        }
        drop(guards);
        Ok(freed)
    }
}

fn unlock(m: &mut Meta, page: u32, me: u8) {
    if let Some(l) = m.locks.get_mut(&page) {
        if l.writer == Some(me) {
            l.writer = None;
        } else {
            l.readers -= 1;
        }
        if l.readers == 0 && l.writer.is_none() {
            m.locks.remove(&page);
        }
    }
}

fn downgrade(m: &mut Meta, page: u32) {
    let l = m.locks.get_mut(&page).expect("downgraded page is locked");
    l.writer = None;
    l.readers += 1;
}

/// A lock on one page; dropping it is a (logical) release.
pub struct PageGuard<'s, 'c> {
    s: &'s Session<'c>,
    page: u32,
    mode: Mode,
    released: bool,
}

impl<'s, 'c> PageGuard<'s, 'c> {
    pub fn page(&self) -> u32 {
        self.page
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    fn loc(&self) -> Loc {
        self.s.st.borrow().held[&self.page].loc
    }

    /// Reads `buf.len()` bytes at `off` of the page.
    pub fn read(&self, off: usize, buf: &mut [u8]) {
        assert!(off + buf.len() <= PAGE, "read past the page");
        self.s.cache.read_loc(self.loc(), off, buf);
    }

    pub fn read_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; PAGE];
        self.read(0, &mut v);
        v
    }

    pub fn read_u64(&self, off: usize) -> u64 {
        let mut b = [0u8; 8];
        self.read(off, &mut b);
        u64::from_le_bytes(b)
    }

    /// Writes `data` at `off` (write lock only).
    pub fn write(&mut self, off: usize, data: &[u8]) {
        assert_eq!(self.mode, Mode::Write, "write through a read lock");
        assert!(off + data.len() <= PAGE, "write past the page");
        if data.is_empty() {
            return;
        }
        let c = self.s.cache;
        let Loc::Pmem(s) = self.loc() else {
            unreachable!("a write-locked page is always in a persistent slot")
        };
        c.region.write(c.geo.slot_off(s) + off, data);
        let mut st = self.s.st.borrow_mut();
        if !st.in_tx {
            let h = st.held.get_mut(&self.page).expect("held");
            for l in off / 64..=(off + data.len() - 1) / 64 {
                h.lines |= 1 << l;
            }
        }
    }

    pub fn write_u64(&mut self, off: usize, v: u64) {
        self.write(off, &v.to_le_bytes());
    }

    /// Read lock → write lock; waits while other sessions read the page.
    pub fn upgrade(mut self) -> Result<PageGuard<'s, 'c>> {
        let w = self.s.get_page(self.page, Mode::Write)?;
        self.released = true;
        self.s.release(self.page, Mode::Read);
        Ok(w)
    }

    /// Read lock → write lock when no other session reads the page; else
    /// gives the read lock back (the caller restarts, P1 §5.1).
    pub fn try_upgrade(mut self) -> std::result::Result<PageGuard<'s, 'c>, PageGuard<'s, 'c>> {
        if self.mode == Mode::Write {
            return Ok(self);
        }
        match self.s.try_lock(self.page, Mode::Write, false) {
            Ok(true) => {
                self.released = true;
                self.s.release(self.page, Mode::Read);
                Ok(PageGuard {
                    s: self.s,
                    page: self.page,
                    mode: Mode::Write,
                    released: false,
                })
            }
            _ => Err(self),
        }
    }

    /// Write lock → read lock: counts as releasing the write lock (a
    /// transaction ends when the session's last write lock goes, P1 §5.5).
    pub fn downgrade(mut self) -> PageGuard<'s, 'c> {
        if self.mode == Mode::Read {
            return self;
        }
        self.s
            .st
            .borrow_mut()
            .held
            .get_mut(&self.page)
            .expect("held")
            .reads += 1;
        self.released = true;
        self.s.release(self.page, Mode::Write);
        PageGuard {
            s: self.s,
            page: self.page,
            mode: Mode::Read,
            released: false,
        }
    }
}

impl Drop for PageGuard<'_, '_> {
    fn drop(&mut self) {
        if !self.released {
            self.s.release(self.page, self.mode);
        }
    }
}
