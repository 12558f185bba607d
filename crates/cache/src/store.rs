//! A small LSM-shaped key-value store on the page cache, shaped like
//! SplinterDB's use of it in P1 §5.5: a memtable of hash-bucket pages
//! updated in place under page locks (each put is one inferred
//! transaction), immutable sorted *branches* built inside
//! non-transactions and linked into the root by a transaction, and
//! size-tiered compaction: after a flush, a run of the newest branches of
//! similar size is merged into one, built the same way ([`pick_compaction`]
//! has the rule). Keys up to 24 bytes, values up to 100 bytes.
//!
//! The same code runs over Persistron (every put durable when it returns:
//! the cache's transaction is the durability) or over a volatile DRAM
//! cache ([`CacheOptions::transactions`] off, no sync on eviction) with a
//! write-ahead log ([`Wal`]: synced per operation — durable — or per
//! batch — not durable).
//!
//! # Pages (all on the cache's disk)
//!
//! Root (the first page allocated, number = bitmap pages):
//! ```text
//!    0.. 8  magic "FERSTOR2" (2: 32-byte branch descriptors with a filter;
//!           a root of the first format, "FERSTORE", is refused)
//!    8..12  active memtable set (0 or 1)
//!   12..16  memtable pages per set M
//!   16..20  branches n (≤ 15), newest last
//!   20..24  1 while the other set is an immutable memtable being flushed
//!   32..32+8M  page numbers of set 0 then set 1 (u32 each)
//!   2048 + 32 i  branch i: root page (u32), height (u32), records (u64),
//!                filter directory page (u32, 0: no filter), 12 zero bytes
//! ```
//! Memtable and branch data page: bytes 0..4 record count, records of
//! [`REC`] bytes from offset 128 (31 per page): klen u8, vlen u8, flags u8
//! (1 = tombstone), pad, key at 4 (24 B), value at 28 (100 B). Branch data
//! pages hold records sorted by key. Index page: bytes 0..4 entry count,
//! bytes 4..8 level, entries of 32 bytes from offset 32: klen u8, pad 3,
//! first key (24 B), child page (u32).
//!
//! Each non-empty branch has a Bloom filter (SplinterDB keeps one per
//! branch too), built with the branch and freed with it, so that a get
//! probes only the branches that may hold its key. Filter directory page:
//! bytes 0..4 filter pages n (1 ..= 1022), then n page numbers (u32) from
//! offset 8. Filter page: 64 blocks of 64 bytes (512 bits); a key sets
//! [`FILTER_PROBES`] bits of one block of one page ([`filter_bits`]), about
//! [`FILTER_BITS_PER_KEY`] bits per key (1–2 % false positives).
//!
//! # The write-ahead log (the baseline's durability)
//!
//! A file of records appended back to back, no header:
//! ```text
//!   0         klen u8 (≤ 24)
//!   1         vlen u8 (≤ 100), or 0xff for a delete (no value bytes)
//!   2..2+k    key
//!   ..+v      value
//!   then 4    CRC32C of the record's bytes before it, u32 LE
//! ```
//! Records reach the file only at a sync point (every `sync_every`
//! operations: the buffer is written, then `fdatasync`), so the synced
//! content is always a prefix of whole records; a crash can add a torn
//! tail (a partial record, zeros, or garbage from a write cut short).
//! [`Wal::replay`] applies records from the start up to the first one
//! that is truncated, out of range or fails its checksum, and stops there:
//! a torn tail is refused, never applied. The volatile baseline keeps no
//! checkpoint (its disk pages are written back unsynced, in any order),
//! so recovery ([`Store::recover_from_wal`]) formats a fresh cache and
//! store and replays the whole log into it, then truncates the log to its
//! valid prefix so new records do not follow the torn tail.
//!
//! # Recovery
//!
//! Over Persistron, [`Store::open`] runs P1 §5.5's allocation recovery:
//! it walks the root, the memtable pages and the branches' index pages and
//! rewrites the allocation bitmap to exactly that, which frees the pages
//! of a branch whose construction a crash interrupted (they were
//! allocated in place inside a non-transaction, never linked).

mod wal;
pub use wal::{Wal, WalReplay};

use crate::cache::{Cache, Mode, PageGuard, Session};
use crate::error::{CacheError, Result};
use crate::fault::StoreFault;
use crate::format::PAGE;
use std::path::Path;
use std::sync::Arc;

pub const MAX_KEY: usize = 24;
pub const MAX_VALUE: usize = 100;
pub const REC: usize = 128;
const REC_BASE: usize = 128;
const PER_PAGE: usize = (PAGE - REC_BASE) / REC;
const IDX_BASE: usize = 32;
const IDX: usize = 32;
const PER_INDEX: usize = (PAGE - IDX_BASE) / IDX;
const MAX_BRANCHES: usize = 15;
const _: () = assert!(BRANCH_BASE + BRANCH_DESC * MAX_BRANCHES <= PAGE);
const BRANCH_BASE: usize = 2048;
/// Bytes of a branch descriptor in the root page.
const BRANCH_DESC: usize = 32;
/// Bloom filter sizing: bits per key, bits set per key.
pub const FILTER_BITS_PER_KEY: u64 = 10;
pub const FILTER_PROBES: usize = 6;
/// Filter pages a directory page can list (larger branches get more false
/// positives, never an error).
const FILTER_MAX_PAGES: usize = (PAGE - 8) / 4;
const FILTER_BLOCK: usize = 64;
const MAGIC: &[u8; 8] = b"FERSTOR2";
/// Branches at which [`pick_compaction`] looks for a run to merge.
const COMPACT_AT: usize = 4;
/// Size ratio of the tiers: a branch joins the run of newer branches being
/// merged when it holds at most `TIER_RATIO` times their records.
const TIER_RATIO: u64 = 4;
/// Branches at which the smallest adjacent pair is merged even when no
/// run of similar sizes exists (bounds the branches a get probes).
const FORCE_AT: usize = 8;

/// Which branches to merge after a flush, given each branch's record
/// count, oldest first; `None`: none.
///
/// Size-tiered, as in SplinterDB's trunk nodes: with at least
/// [`COMPACT_AT`] branches, the run grows from the newest branch towards
/// older ones while the next older holds at most [`TIER_RATIO`] times the
/// records gathered so far, and is merged if it has two branches or more.
/// A record is thus rewritten about once per tier (log base 5 of the
/// data over a memtable), where merging every branch each time rewrote
/// the whole dataset every few flushes. With [`FORCE_AT`] branches and no
/// such run (sizes spread by more than the ratio), the adjacent pair with
/// the fewest records is merged. Both keep the branches in age order, so
/// "newest version wins" holds across a merge; after the caller's loop
/// there are fewer than [`FORCE_AT`] branches.
pub fn pick_compaction(records: &[u64]) -> Option<std::ops::Range<usize>> {
    let n = records.len();
    if n < COMPACT_AT {
        return None;
    }
    let (mut sum, mut first) = (records[n - 1], n - 1);
    for j in (0..n - 1).rev() {
        if records[j] > TIER_RATIO.saturating_mul(sum) {
            break;
        }
        sum += records[j];
        first = j;
    }
    if first + 2 <= n {
        return Some(first..n);
    }
    if n >= FORCE_AT {
        let i = (0..n - 1).min_by_key(|&i| records[i] + records[i + 1])?;
        return Some(i..i + 2);
    }
    None
}

/// The store. See the module documentation.
pub struct Store {
    cache: Arc<Cache>,
    root: u32,
    wal: Option<Wal>,
    /// One flusher at a time. Taken with `try_lock` and waited for through
    /// the medium's wait hint, never blocking: a flush holds it across
    /// many persistent-memory events, and a lockstep crash run must be
    /// able to hand over to its holder.
    flush: parking_lot::Mutex<()>,
    fault: Option<StoreFault>,
}

fn rec_off(i: usize) -> usize {
    REC_BASE + i * REC
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    key: Vec<u8>,
    value: Option<Vec<u8>>,
}

fn encode_rec(r: &Record) -> [u8; REC] {
    let mut b = [0u8; REC];
    b[0] = r.key.len() as u8;
    b[4..4 + r.key.len()].copy_from_slice(&r.key);
    match &r.value {
        Some(v) => {
            b[1] = v.len() as u8;
            b[28..28 + v.len()].copy_from_slice(v);
        }
        None => b[2] = 1,
    }
    b
}

fn decode_rec(b: &[u8], page: u32) -> Result<Record> {
    let (kl, vl) = (b[0] as usize, b[1] as usize);
    if kl > MAX_KEY || vl > MAX_VALUE || b[2] > 1 {
        return Err(CacheError::Corrupt(format!(
            "bad record in store page {page}"
        )));
    }
    Ok(Record {
        key: b[4..4 + kl].to_vec(),
        value: (b[2] == 0).then(|| b[28..28 + vl].to_vec()),
    })
}

fn count(p: &[u8], max: usize, page: u32) -> Result<usize> {
    let n = u32::from_le_bytes(p[0..4].try_into().expect("4")) as usize;
    if n > max {
        return Err(CacheError::Corrupt(format!(
            "store page {page} claims {n} entries"
        )));
    }
    Ok(n)
}

/// A memtable or branch data page (read-locked in `g`) and its record
/// count, reading only the bytes of its records (the rest stays zero).
fn read_data_page(g: &PageGuard<'_, '_>) -> Result<(Vec<u8>, usize)> {
    let mut p = vec![0u8; PAGE];
    g.read(0, &mut p[..4]);
    let n = count(&p, PER_PAGE, g.page())?;
    g.read(REC_BASE, &mut p[REC_BASE..rec_off(n)]);
    Ok((p, n))
}

/// The key of record `i` of a data page (read-locked in `g`), read alone.
fn read_key(g: &PageGuard<'_, '_>, i: usize, buf: &mut [u8; 4 + MAX_KEY]) -> usize {
    g.read(rec_off(i), buf);
    (buf[0] as usize).min(MAX_KEY)
}

fn u32_at(p: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(p[o..o + 4].try_into().expect("4"))
}

fn hash(key: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in key {
        h = (h ^ *b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h ^ (h >> 29)
}

#[derive(Clone, Copy, Debug)]
struct Branch {
    root: u32,
    height: u32,
    records: u64,
    /// Filter directory page, 0 for none (page 0 is the allocation
    /// bitmap's, never a store page).
    filter: u32,
}

impl Branch {
    /// The descriptor in the root page (module documentation).
    fn encode(&self) -> [u8; BRANCH_DESC] {
        let mut d = [0u8; BRANCH_DESC];
        d[0..4].copy_from_slice(&self.root.to_le_bytes());
        d[4..8].copy_from_slice(&self.height.to_le_bytes());
        d[8..16].copy_from_slice(&self.records.to_le_bytes());
        d[16..20].copy_from_slice(&self.filter.to_le_bytes());
        d
    }

    fn decode(d: &[u8]) -> Branch {
        Branch {
            root: u32_at(d, 0),
            height: u32_at(d, 4),
            records: u64::from_le_bytes(d[8..16].try_into().expect("8")),
            filter: u32_at(d, 16),
        }
    }
}

/// Where `key` lives in a Bloom filter of `pages` pages: the page, the
/// byte offset of its 64-byte block in that page, and the
/// [`FILTER_PROBES`] bit numbers (0..512) within the block. Its own hash
/// (not the memtable's bucket hash), so a memtable bucket's keys spread
/// over the whole filter.
pub fn filter_bits(key: &[u8], pages: usize) -> (usize, usize, [u16; FILTER_PROBES]) {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let h = mix(hash(key) ^ 0x9e37_79b9_7f4a_7c15);
    let page = (((h & 0xffff_ffff) * pages as u64) >> 32) as usize;
    let block = ((h >> 32) as usize % (PAGE / FILTER_BLOCK)) * FILTER_BLOCK;
    let h2 = mix(h);
    let mut bits = [0u16; FILTER_PROBES];
    for (i, b) in bits.iter_mut().enumerate() {
        *b = ((h2 >> (9 * i)) & 511) as u16;
    }
    (page, block, bits)
}

/// The filter pages a directory page (read-locked in `g`) lists.
fn filter_count(g: &PageGuard<'_, '_>) -> Result<usize> {
    let mut b = [0u8; 4];
    g.read(0, &mut b);
    let n = u32::from_le_bytes(b) as usize;
    if n == 0 || n > FILTER_MAX_PAGES {
        return Err(CacheError::Corrupt(format!(
            "filter directory page {} claims {n} pages",
            g.page()
        )));
    }
    Ok(n)
}

/// Filter pages for a branch of `records` records.
fn filter_pages(records: usize) -> usize {
    (records as u64 * FILTER_BITS_PER_KEY)
        .div_ceil(8 * PAGE as u64)
        .clamp(1, FILTER_MAX_PAGES as u64) as usize
}

struct RootView {
    active: usize,
    m: usize,
    sets: [Vec<u32>; 2],
    pending: bool,
    branches: Vec<Branch>,
}

/// The root view of the read-locked root page `g`, reading only the
/// bytes it uses (header, memtable page lists, branch descriptors): every
/// operation reads the root, and copying all 4 KiB of it was a visible
/// share of a cached get.
fn read_root(g: &PageGuard<'_, '_>) -> Result<RootView> {
    let mut p = vec![0u8; PAGE];
    g.read(0, &mut p[..32]);
    let (m, n) = (u32_at(&p, 12) as usize, u32_at(&p, 16) as usize);
    if 32 + 8 * m <= BRANCH_BASE && n <= MAX_BRANCHES {
        g.read(32, &mut p[32..32 + 8 * m]);
        g.read(
            BRANCH_BASE,
            &mut p[BRANCH_BASE..BRANCH_BASE + BRANCH_DESC * n],
        );
    }
    parse_root(&p, g.page())
}

fn parse_root(p: &[u8], root: u32) -> Result<RootView> {
    if &p[0..8] == b"FERSTORE" {
        return Err(CacheError::Config(format!(
            "page {root} is a store root of the first format (16-byte branch \
             descriptors, no filters): not readable by this version"
        )));
    }
    if &p[0..8] != MAGIC {
        return Err(CacheError::Corrupt(format!(
            "page {root} is not a store root"
        )));
    }
    let active = u32_at(p, 8) as usize;
    let m = u32_at(p, 12) as usize;
    let n = u32_at(p, 16) as usize;
    if active > 1 || m == 0 || 32 + 8 * m > BRANCH_BASE || n > MAX_BRANCHES {
        return Err(CacheError::Corrupt("store root fields out of range".into()));
    }
    let set = |k: usize| (0..m).map(|i| u32_at(p, 32 + 4 * (k * m + i))).collect();
    let branches = (0..n)
        .map(|i| Branch::decode(&p[BRANCH_BASE + BRANCH_DESC * i..]))
        .collect();
    Ok(RootView {
        active,
        m,
        sets: [set(0), set(1)],
        pending: u32_at(p, 20) == 1,
        branches,
    })
}

impl Store {
    /// Makes a new store on a freshly created cache: allocates the root and
    /// `2 × memtable_pages` memtable pages in one transaction.
    pub fn create(cache: Arc<Cache>, memtable_pages: usize, wal: Option<Wal>) -> Result<Store> {
        if memtable_pages == 0 || 32 + 8 * memtable_pages > BRANCH_BASE {
            return Err(CacheError::Config(format!(
                "{memtable_pages} memtable pages (1 ..= {})",
                (BRANCH_BASE - 32) / 8
            )));
        }
        let s = cache.session()?;
        let root = s.alloc_page()?;
        if root != cache.geometry().bitmap_pages {
            return Err(CacheError::Config("the store needs a fresh cache".into()));
        }
        let mut g = s.get_page(root, Mode::Write)?;
        let mut p = vec![0u8; PAGE];
        p[0..8].copy_from_slice(MAGIC);
        p[12..16].copy_from_slice(&(memtable_pages as u32).to_le_bytes());
        let mut pages = Vec::new();
        for i in 0..2 * memtable_pages {
            let n = s.alloc_page()?;
            p[32 + 4 * i..36 + 4 * i].copy_from_slice(&n.to_le_bytes());
            pages.push(s.get_new_page(n)?);
        }
        for pg in &mut pages {
            pg.write(0, &[0u8; PAGE]);
        }
        g.write(0, &p);
        drop(pages);
        drop(g);
        drop(s);
        Ok(Store {
            cache,
            root,
            wal,
            flush: parking_lot::Mutex::new(()),
            fault: None,
        })
    }

    /// Opens the store of `cache` (already recovered by [`Cache::open`]) and
    /// rebuilds the allocation bitmap from what the root reaches. Returns
    /// the store and the number of leaked pages freed.
    pub fn open(cache: Arc<Cache>, wal: Option<Wal>) -> Result<(Store, usize)> {
        Self::open_with(cache, wal, true)
    }

    /// The volatile baseline's recovery after a crash: `cache` must be
    /// freshly created (the old disk content is not trusted — it was
    /// written back unsynced, in any order); makes a new store on it,
    /// replays the valid prefix of the log at `wal_path` into it (with
    /// no logging) and reopens the log for appending after that prefix
    /// (see [`Wal::open`]).
    pub fn recover_from_wal(
        cache: Arc<Cache>,
        memtable_pages: usize,
        wal_path: impl AsRef<Path>,
        sync_every: u64,
    ) -> Result<(Store, WalReplay)> {
        let mut st = Store::create(cache, memtable_pages, None)?;
        {
            let s = st.session()?;
            Wal::replay(&wal_path, |k, v| match v {
                Some(v) => s.put(k, v),
                None => s.delete(k),
            })?;
        }
        let (wal, rep) = Wal::open(&wal_path, sync_every)?;
        st.wal = Some(wal);
        Ok((st, rep))
    }

    /// [`Store::open`], optionally *without* the allocation rebuild — a
    /// planted bug for the crash check (pages of a branch a crash cut
    /// short stay allocated and leak), never for real use.
    pub fn open_with(cache: Arc<Cache>, wal: Option<Wal>, rebuild: bool) -> Result<(Store, usize)> {
        let root = cache.geometry().bitmap_pages;
        let st = Store {
            cache,
            root,
            wal,
            flush: parking_lot::Mutex::new(()),
            fault: None,
        };
        let s = st.cache.session()?;
        let live = st.reachable(&s)?;
        let freed = if rebuild {
            s.rebuild_allocation(&live)?
        } else {
            0
        };
        drop(s);
        Ok((st, freed))
    }

    /// Every page the root reaches (root, memtables, branch pages).
    fn reachable(&self, s: &Session) -> Result<Vec<u32>> {
        let r = s.get_page(self.root, Mode::Read)?;
        let v = read_root(&r)?;
        let mut out = vec![self.root];
        out.extend(v.sets[0].iter().chain(&v.sets[1]));
        for b in &v.branches {
            self.branch_pages(s, b, &mut out)?;
        }
        Ok(out)
    }

    /// Every page of branch `b`: its filter (directory, then filter
    /// pages), then its levels from the root down, the data pages last,
    /// in key order. Returns how many data pages it appended (the tail
    /// of `out`).
    fn branch_pages(&self, s: &Session, b: &Branch, out: &mut Vec<u32>) -> Result<usize> {
        if b.filter != 0 {
            out.push(b.filter);
            out.extend(self.filter_dir(s, b.filter)?);
        }
        let mut level = vec![b.root];
        for _ in 0..b.height {
            out.extend(&level);
            let mut next = Vec::new();
            for &pg in &level {
                let g = s.get_page(pg, Mode::Read)?;
                let p = g.read_vec();
                let n = count(&p, PER_INDEX, pg)?;
                next.extend((0..n).map(|i| u32_at(&p, IDX_BASE + i * IDX + 28)));
            }
            level = next;
        }
        out.extend(&level);
        Ok(level.len())
    }

    /// The filter pages listed by directory page `dir`.
    fn filter_dir(&self, s: &Session, dir: u32) -> Result<Vec<u32>> {
        let g = s.get_page(dir, Mode::Read)?;
        let n = filter_count(&g)?;
        let mut list = vec![0u8; 4 * n];
        g.read(8, &mut list);
        Ok(list
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4")))
            .collect())
    }

    /// Checks that the allocation bitmap holds exactly the pages the root
    /// reaches (no leak, nothing reachable unallocated). For tests and
    /// crash checks.
    pub fn verify_allocation(&self) -> std::result::Result<(), String> {
        let s = self.cache.session().map_err(|e| e.to_string())?;
        let mut live = self.reachable(&s).map_err(|e| e.to_string())?;
        live.sort_unstable();
        let n = live.len();
        live.dedup();
        if live.len() != n {
            return Err("a page is reachable twice".into());
        }
        let g = self.cache.geometry();
        for p in g.bitmap_pages..g.disk_pages {
            let a = s.is_allocated(p).map_err(|e| e.to_string())?;
            if a != live.binary_search(&p).is_ok() {
                return Err(format!("page {p}: allocated {a}, reachable {}", !a));
            }
        }
        Ok(())
    }

    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// Plants a store-level bug (crash checks only).
    #[cfg(any(test, feature = "checks"))]
    pub fn plant(&mut self, fault: Option<StoreFault>) {
        self.fault = fault;
    }

    pub fn wal(&self) -> Option<&Wal> {
        self.wal.as_ref()
    }

    pub fn session(&self) -> Result<StoreSession<'_>> {
        Ok(StoreSession {
            store: self,
            s: self.cache.session()?,
        })
    }
}

/// One thread's handle on a [`Store`].
pub struct StoreSession<'a> {
    store: &'a Store,
    s: Session<'a>,
}

impl StoreSession<'_> {
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        if value.len() > MAX_VALUE {
            return Err(CacheError::Config(format!(
                "value of {} bytes",
                value.len()
            )));
        }
        self.write(key, Some(value))
    }

    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.write(key, None)
    }

    fn write(&self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        if key.len() > MAX_KEY {
            return Err(CacheError::Config(format!("key of {} bytes", key.len())));
        }
        if let Some(w) = &self.store.wal {
            w.append(key, value)?;
        }
        let rec = Record {
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
        };
        loop {
            if self.try_write(&rec)? {
                return Ok(());
            }
            self.flush()?;
        }
    }

    /// Puts into the active memtable; `false` when its bucket is full.
    fn try_write(&self, rec: &Record) -> Result<bool> {
        let s = &self.s;
        let r = s.get_page(self.store.root, Mode::Read)?;
        let v = read_root(&r)?;
        let pg = v.sets[v.active][(hash(&rec.key) % v.m as u64) as usize];
        // The root's read lock (held until the bucket is written) is what
        // keeps a flush from switching the memtables under this put.
        let mut g = s.get_page(pg, Mode::Write)?;
        let p = g.read_vec();
        let n = count(&p, PER_PAGE, pg)?;
        for i in 0..n {
            let o = rec_off(i);
            if p[o] as usize == rec.key.len() && p[o + 4..o + 4 + rec.key.len()] == rec.key[..] {
                g.write(o, &encode_rec(rec));
                return Ok(true);
            }
        }
        if n == PER_PAGE {
            return Ok(false);
        }
        g.write(rec_off(n), &encode_rec(rec));
        g.write(0, &((n + 1) as u32).to_le_bytes());
        drop(g);
        drop(r);
        Ok(true)
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let s = &self.s;
        let r = s.get_page(self.store.root, Mode::Read)?;
        let v = read_root(&r)?;
        let b = (hash(key) % v.m as u64) as usize;
        let mut sets = vec![v.active];
        if v.pending {
            sets.push(1 - v.active);
        }
        for k in sets {
            let pg = v.sets[k][b];
            let (p, n) = read_data_page(&s.get_page(pg, Mode::Read)?)?;
            for i in 0..n {
                let o = rec_off(i);
                if p[o] as usize == key.len() && &p[o + 4..o + 4 + key.len()] == key {
                    return Ok(decode_rec(&p[o..o + REC], pg)?.value);
                }
            }
        }
        for br in v.branches.iter().rev() {
            if !self.may_contain(br, key)? {
                continue;
            }
            if let Some(rec) = self.branch_get(br, key)? {
                return Ok(rec.value);
            }
        }
        Ok(None)
    }

    /// `false` when branch `br`'s filter proves `key` absent (`true` for a
    /// branch without one). Reads the directory's entry and one 64-byte
    /// block: two page accesses, both of pages every get of the branch
    /// touches, so they stay cached.
    fn may_contain(&self, br: &Branch, key: &[u8]) -> Result<bool> {
        if br.filter == 0 {
            return Ok(true);
        }
        let s = &self.s;
        let dir = s.get_page(br.filter, Mode::Read)?;
        let (page, block, bits) = filter_bits(key, filter_count(&dir)?);
        let mut b = [0u8; 4];
        dir.read(8 + 4 * page, &mut b);
        drop(dir);
        let fp = u32::from_le_bytes(b);
        let mut blk = [0u8; FILTER_BLOCK];
        s.get_page(fp, Mode::Read)?.read(block, &mut blk);
        Ok(bits
            .iter()
            .all(|&i| blk[i as usize / 8] & (1 << (i % 8)) != 0))
    }

    /// Looks `key` up in branch `br`: a binary search down its index
    /// pages, then in the data page, reading only the entries and keys it
    /// compares (a handful of small reads, not a copy of each 4 KiB page).
    fn branch_get(&self, br: &Branch, key: &[u8]) -> Result<Option<Record>> {
        let s = &self.s;
        let mut pg = br.root;
        for _ in 0..br.height {
            let g = s.get_page(pg, Mode::Read)?;
            let mut head = [0u8; 4];
            g.read(0, &mut head);
            let n = count(&head, PER_INDEX, pg)?;
            if n == 0 {
                return Ok(None);
            }
            let entry = |i: usize| {
                let mut e = [0u8; IDX];
                g.read(IDX_BASE + i * IDX, &mut e);
                e
            };
            // Last child whose first key is <= key.
            let (mut lo, mut hi) = (0usize, n);
            while hi - lo > 1 {
                let mid = (lo + hi) / 2;
                let e = entry(mid);
                if e[4..4 + (e[0] as usize).min(MAX_KEY)] <= *key {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            pg = u32_at(&entry(lo), 28);
        }
        let g = s.get_page(pg, Mode::Read)?;
        let mut head = [0u8; 4];
        g.read(0, &mut head);
        let n = count(&head, PER_PAGE, pg)?;
        let mut k = [0u8; 4 + MAX_KEY];
        let (mut lo, mut hi) = (0usize, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let kl = read_key(&g, mid, &mut k);
            match k[4..4 + kl].cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => {
                    let mut r = [0u8; REC];
                    g.read(rec_off(mid), &mut r);
                    return decode_rec(&r, pg).map(Some);
                }
            }
        }
        Ok(None)
    }

    /// Up to `len` live records with key ≥ `start`, in key order, each
    /// with its newest value (a range scan, YCSB-E's operation).
    ///
    /// The root stays read-locked for the whole scan, so no flush links
    /// or compaction frees a branch under it: the result is the store's
    /// content at one moment (puts to memtable buckets not yet visited may
    /// or may not show, as for any non-transactional scan). Sources,
    /// newest first: the active memtable, the immutable one being flushed,
    /// the branches newest to oldest; a key's first version found wins and
    /// tombstones hide older versions. Memtables are read whole (their
    /// buckets are unsorted); each branch yields at most `limit` records
    /// from `start`, so the merge is exact only up to the smallest last key
    /// of a branch that hit its limit — when that leaves fewer than `len`
    /// live records, the scan retries with twice the limit.
    pub fn scan(&self, start: &[u8], len: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if len == 0 {
            return Ok(Vec::new());
        }
        let s = &self.s;
        let r = s.get_page(self.store.root, Mode::Read)?;
        let v = read_root(&r)?;
        let mut mem: Vec<Vec<Record>> = Vec::new();
        let mut sets = vec![v.active];
        if v.pending {
            sets.push(1 - v.active);
        }
        for k in sets {
            let mut recs = Vec::new();
            for &pg in &v.sets[k] {
                let g = s.get_page(pg, Mode::Read)?;
                let p = g.read_vec();
                for i in 0..count(&p, PER_PAGE, pg)? {
                    let rec = decode_rec(&p[rec_off(i)..rec_off(i) + REC], pg)?;
                    if rec.key.as_slice() >= start {
                        recs.push(rec);
                    }
                }
            }
            recs.sort_by(|a, b| a.key.cmp(&b.key));
            mem.push(recs);
        }
        let mut limit = len.max(8);
        loop {
            let mut newest: std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>> =
                std::collections::BTreeMap::new();
            for recs in &mem {
                for rec in recs {
                    newest
                        .entry(rec.key.clone())
                        .or_insert_with(|| rec.value.clone());
                }
            }
            let mut bound: Option<Vec<u8>> = None;
            for br in v.branches.iter().rev() {
                let mut recs = Vec::new();
                self.branch_range(br.root, br.height, start, limit, &mut recs)?;
                if recs.len() >= limit {
                    let last = &recs[recs.len() - 1].key;
                    if bound.as_ref().is_none_or(|b| last < b) {
                        bound = Some(last.clone());
                    }
                }
                for rec in recs {
                    newest.entry(rec.key).or_insert(rec.value);
                }
            }
            let out: Vec<(Vec<u8>, Vec<u8>)> = newest
                .into_iter()
                .take_while(|(k, _)| bound.as_ref().is_none_or(|b| k <= b))
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .take(len)
                .collect();
            if out.len() == len || bound.is_none() {
                drop(r);
                return Ok(out);
            }
            limit *= 2;
        }
    }

    /// Appends to `out` the records of the subtree at `pg` (`height`
    /// index levels above its data pages) with key ≥ `start`, in key
    /// order, until `out` holds `limit`.
    fn branch_range(
        &self,
        pg: u32,
        height: u32,
        start: &[u8],
        limit: usize,
        out: &mut Vec<Record>,
    ) -> Result<()> {
        let p = self.s.get_page(pg, Mode::Read)?.read_vec();
        if height == 0 {
            let n = count(&p, PER_PAGE, pg)?;
            let key = |i: usize| {
                let o = rec_off(i);
                &p[o + 4..o + 4 + (p[o] as usize).min(MAX_KEY)]
            };
            // First record with key >= start.
            let (mut lo, mut hi) = (0usize, n);
            while lo < hi {
                let mid = (lo + hi) / 2;
                if key(mid) < start {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            for i in lo..n {
                if out.len() >= limit {
                    break;
                }
                out.push(decode_rec(&p[rec_off(i)..rec_off(i) + REC], pg)?);
            }
            return Ok(());
        }
        let n = count(&p, PER_INDEX, pg)?;
        let first = |i: usize| {
            let o = IDX_BASE + i * IDX;
            &p[o + 4..o + 4 + (p[o] as usize).min(MAX_KEY)]
        };
        // The last child whose first key is <= start holds the first
        // record >= start (or none, then its right neighbours do).
        let mut lo = 0usize;
        for i in 1..n {
            if first(i) <= start {
                lo = i;
            } else {
                break;
            }
        }
        for i in lo..n {
            if out.len() >= limit {
                break;
            }
            let child = u32_at(&p, IDX_BASE + i * IDX + 28);
            self.branch_range(child, height - 1, start, limit, out)?;
        }
        Ok(())
    }

    /// Appends every record of a branch to `out`, in key order, and every
    /// page of it to `pages` (see [`Store::branch_pages`]).
    fn branch_scan(&self, br: &Branch, out: &mut Vec<Record>, pages: &mut Vec<u32>) -> Result<()> {
        let leaves = self.store.branch_pages(&self.s, br, pages)?;
        for &pg in &pages[pages.len() - leaves..] {
            let g = self.s.get_page(pg, Mode::Read)?;
            let p = g.read_vec();
            for i in 0..count(&p, PER_PAGE, pg)? {
                out.push(decode_rec(&p[rec_off(i)..rec_off(i) + REC], pg)?);
            }
        }
        Ok(())
    }

    /// Builds a branch from sorted records inside a non-transaction:
    /// its pages are allocated and written in place, reachable from
    /// nothing until a transaction links the returned descriptor.
    fn build_branch(&self, recs: &[Record]) -> Result<Branch> {
        self.s.non_tx(|s| -> Result<Branch> {
            let mut level: Vec<(Vec<u8>, u32)> = Vec::new();
            for chunk in recs
                .chunks(PER_PAGE)
                .chain(recs.is_empty().then_some(&recs[..0]))
            {
                let pg = s.alloc_page()?;
                let mut p = vec![0u8; PAGE];
                p[0..4].copy_from_slice(&(chunk.len() as u32).to_le_bytes());
                for (i, r) in chunk.iter().enumerate() {
                    p[rec_off(i)..rec_off(i) + REC].copy_from_slice(&encode_rec(r));
                }
                let mut g = s.get_new_page(pg)?;
                g.write(0, &p);
                level.push((chunk.first().map(|r| r.key.clone()).unwrap_or_default(), pg));
            }
            let mut height = 0u32;
            while level.len() > 1 || height == 0 {
                height += 1;
                let mut next = Vec::new();
                for chunk in level.chunks(PER_INDEX) {
                    let pg = s.alloc_page()?;
                    let mut p = vec![0u8; PAGE];
                    p[0..4].copy_from_slice(&(chunk.len() as u32).to_le_bytes());
                    p[4..8].copy_from_slice(&height.to_le_bytes());
                    for (i, (k, child)) in chunk.iter().enumerate() {
                        let o = IDX_BASE + i * IDX;
                        p[o] = k.len() as u8;
                        p[o + 4..o + 4 + k.len()].copy_from_slice(k);
                        p[o + 28..o + 32].copy_from_slice(&child.to_le_bytes());
                    }
                    let mut g = s.get_new_page(pg)?;
                    g.write(0, &p);
                    next.push((chunk[0].0.clone(), pg));
                }
                level = next;
            }
            let filter = if recs.is_empty() {
                0
            } else {
                let n = filter_pages(recs.len());
                let mut bits = vec![vec![0u8; PAGE]; n];
                for r in recs {
                    let (page, block, set) = filter_bits(&r.key, n);
                    for i in set {
                        bits[page][block + i as usize / 8] |= 1 << (i % 8);
                    }
                }
                let mut dir = vec![0u8; PAGE];
                dir[0..4].copy_from_slice(&(n as u32).to_le_bytes());
                for (i, b) in bits.iter().enumerate() {
                    let pg = s.alloc_page()?;
                    s.get_new_page(pg)?.write(0, b);
                    dir[8 + 4 * i..12 + 4 * i].copy_from_slice(&pg.to_le_bytes());
                }
                let pg = s.alloc_page()?;
                s.get_new_page(pg)?.write(0, &dir);
                pg
            };
            Ok(Branch {
                root: level[0].1,
                height,
                records: recs.len() as u64,
                filter,
            })
        })?
    }

    /// Turns the active memtable into a branch (and compacts when there are
    /// too many branches). One flusher at a time.
    fn flush(&self) -> Result<()> {
        let _one = {
            let mut round = 0u32;
            loop {
                if let Some(g) = self.store.flush.try_lock() {
                    break g;
                }
                self.store.cache.wait_hint(round);
                round = round.saturating_add(1);
            }
        };
        let s = &self.s;
        let root = self.store.root;
        // Transaction 1: the other (empty) set becomes active; this one immutable.
        let imm = {
            let mut r = s.get_page(root, Mode::Write)?;
            let p = r.read_vec();
            let v = parse_root(&p, root)?;
            // Another thread may have flushed while this one waited.
            let full = v.sets[v.active].iter().try_fold(false, |acc, &pg| {
                let g = s.get_page(pg, Mode::Read)?;
                Ok::<_, CacheError>(acc || count(&g.read_vec(), PER_PAGE, pg)? == PER_PAGE)
            })?;
            if !full {
                return Ok(());
            }
            r.write(8, &((1 - v.active) as u32).to_le_bytes());
            r.write(20, &1u32.to_le_bytes());
            v.active
        };
        let v = read_root(&s.get_page(root, Mode::Read)?)?;
        let mut recs = Vec::new();
        for &pg in &v.sets[imm] {
            let g = s.get_page(pg, Mode::Read)?;
            let p = g.read_vec();
            for i in 0..count(&p, PER_PAGE, pg)? {
                recs.push(decode_rec(&p[rec_off(i)..rec_off(i) + REC], pg)?);
            }
        }
        recs.sort_by(|a, b| a.key.cmp(&b.key));
        let br = self.build_branch(&recs)?;
        if self.store.fault == Some(StoreFault::EmptyBeforeLink) {
            let mut guards = Vec::new();
            for &pg in &v.sets[imm] {
                let mut g = s.get_page(pg, Mode::Write)?;
                g.write(0, &0u32.to_le_bytes());
                guards.push(g);
            }
        }
        // Transaction 2: link the branch, empty the immutable memtable.
        {
            let mut r = s.get_page(root, Mode::Write)?;
            let p = r.read_vec();
            let v = parse_root(&p, root)?;
            if v.branches.len() >= MAX_BRANCHES {
                return Err(CacheError::Config("too many branches".into()));
            }
            let mut guards = Vec::new();
            for &pg in &v.sets[imm] {
                let mut g = s.get_page(pg, Mode::Write)?;
                g.write(0, &0u32.to_le_bytes());
                guards.push(g);
            }
            r.write(BRANCH_BASE + BRANCH_DESC * v.branches.len(), &br.encode());
            r.write(16, &((v.branches.len() + 1) as u32).to_le_bytes());
            r.write(20, &0u32.to_le_bytes());
            drop(guards);
        }
        loop {
            let v = read_root(&s.get_page(root, Mode::Read)?)?;
            let sizes: Vec<u64> = v.branches.iter().map(|b| b.records).collect();
            let Some(run) = pick_compaction(&sizes) else {
                return Ok(());
            };
            self.compact(&v.branches, run)?;
        }
    }

    /// Merges `branches[run]` (newest version of each key wins) into one
    /// branch built in a non-transaction; a transaction puts it in the
    /// run's place and frees the old branches' pages. Tombstones are
    /// dropped only when the run includes the oldest branch: otherwise an
    /// older branch may still hold a version they hide.
    fn compact(&self, branches: &[Branch], run: std::ops::Range<usize>) -> Result<()> {
        let (mut all, mut old): (Vec<Record>, Vec<u32>) = (Vec::new(), Vec::new());
        // Newest first, so a stable dedup keeps the newest version.
        for br in branches[run.clone()].iter().rev() {
            self.branch_scan(br, &mut all, &mut old)?;
        }
        all.sort_by(|a, b| a.key.cmp(&b.key));
        all.dedup_by(|later, first| later.key == first.key);
        if run.start == 0 {
            all.retain(|r| r.value.is_some());
        }
        let merged = self.build_branch(&all)?;
        let root = self.store.root;
        let mut r = self.s.get_page(root, Mode::Write)?;
        let p = r.read_vec();
        let v = parse_root(&p, root)?;
        // Only flushes change the branch list, and they hold the same
        // mutex as this compaction: the list is the one the run was
        // picked from.
        if v.branches.len() != branches.len()
            || v.branches
                .iter()
                .zip(branches)
                .any(|(a, b)| a.root != b.root)
        {
            return Err(CacheError::Corrupt(
                "the store's branches changed during a compaction".into(),
            ));
        }
        let list: Vec<&Branch> = branches[..run.start]
            .iter()
            .chain(std::iter::once(&merged))
            .chain(&branches[run.end..])
            .collect();
        let d: Vec<u8> = list.iter().flat_map(|b| b.encode()).collect();
        r.write(BRANCH_BASE, &d);
        r.write(16, &(list.len() as u32).to_le_bytes());
        for pg in old {
            self.s.free_page(pg)?;
        }
        drop(r);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
