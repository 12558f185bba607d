//! Crash scenarios for `ferrite check cache` (feature `checks`).
//!
//! The simulated pool holds both the cache's persistent tier and the disk
//! ([`PoolDisk`]: a page written but not synced may be lost or torn at
//! 64-byte granularity, a synced one is durable). The cache is small (14
//! slots, 2 DRAM frames) over 16 data pages, so the workload pages in,
//! evicts dirty and clean pages (write-back + sync), promotes hot pages to
//! DRAM and demotes them back, besides committing transactions.
//!
//! Under `eadr` (one scenario) the disk region is eADR-like too: every
//! store survives, so that scenario crashes the cache's own protocol only;
//! the `adr` scenarios are the ones that lose and tear unsynced pages.
//!
//! Workload: each of two sessions (lockstep threads, so both have
//! transactions in flight at once; or one thread) runs bank transfers:
//! transaction `(i, seq)` write-locks two data pages `x < y` (its plan is
//! a function of `(i, seq)`), moves one unit from `x` to `y`, stamps both
//! with `seq` in its own stamp field, and toggles `x`'s *owned page*
//! (allocates a disk page with [`Session::alloc_page`], fills it through
//! [`Session::get_new_page`] and records it in `x`, or frees the one
//! recorded) — the allocation and the page's content commit with the
//! transfer. It releases `x` before it writes `y`, which is what lets an
//! early lock release show. Every fourth transaction reads pages twice
//! (promotion to DRAM), every sixth writes back everything.
//!
//! Data page format: bytes 0..8 balance + 2^32 (u64), 8..16 and 16..24
//! the two sessions' stamps, 24..28 owned page (0: none), 64..4096 a
//! pattern derived from those fields (a torn page does not pass).
//!
//! Invariant after recovery:
//! - [`Cache::verify`]: no uncommitted slot or transaction word left, no
//!   slot leaked or mapped twice, clean slots and DRAM frames equal the disk;
//! - every data page's pattern matches its fields;
//! - for each session `i` the highest stamp `c_i` is its last acknowledged
//!   transaction or the one after; then every page's stamp, balance and
//!   owned-page parity equal what exactly the transactions `(i, 1..=c_i)`
//!   produce (all-or-nothing, durability of acknowledged ones, no
//!   uncommitted effect visible), and each owned page holds what the
//!   transaction that allocated it wrote;
//! - the allocation bitmap holds exactly the bitmap page, the data pages
//!   and the owned pages, which are distinct (no page leaked or lost).
//!
//! The store scenarios ([`explore_store_scenario`]) run the LSM-shaped
//! store over a 24-slot cache from one session or two in lockstep (each
//! with its own keys; one session's flush or compaction runs while the
//! other puts). What lockstep cannot show: it hands over only at
//! persistent-memory events (and at lock waits), so a race whose window
//! holds none is never interleaved — a put that drops the root's read lock
//! before locking its bucket (tried as a planted bug) was not caught.

use crate::cache::{Cache, CacheOptions, Mode, Session};
use crate::disk::PoolDisk;
use crate::fault::{Fault, StoreFault};
use crate::format::PAGE;
use ferrite_crash::{Config, ExploreError, Explorer, Report, spend_budget};
use ferrite_pmem::{Domain, HEADER_SIZE, Pool, Region};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const SLOTS: u32 = 14;
const SESSIONS: u32 = 2;
const DRAM: usize = 2;
const DATA: u32 = 16;
const DISK_PAGES: u32 = 40;
const BASE: u64 = 1 << 32;
const INITIAL: u64 = BASE + 100;

/// One explored configuration.
#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    pub threads: usize,
    pub txs: u32,
    pub domain: Domain,
    pub tearing: bool,
    pub fault: Option<Fault>,
}

impl Scenario {
    pub fn name(&self) -> String {
        format!(
            "{}{}-{}t",
            self.domain,
            if self.tearing { "-tearing" } else { "" },
            self.threads
        )
    }
}

fn cache_bytes() -> usize {
    Cache::required_bytes(SLOTS, SESSIONS, DISK_PAGES)
        .expect("valid geometry")
        .next_multiple_of(PAGE)
}

fn pool_size() -> u64 {
    (HEADER_SIZE + cache_bytes() + DISK_PAGES as usize * PAGE) as u64
}

fn regions(pool: &Pool) -> (Region, Arc<PoolDisk>) {
    let d = pool.data();
    let c = d.sub(0, cache_bytes()).expect("cache region");
    let disk = d
        .sub(cache_bytes(), DISK_PAGES as usize * PAGE)
        .expect("disk region");
    (c, Arc::new(PoolDisk::new(disk)))
}

fn opts(fault: Option<Fault>) -> CacheOptions {
    CacheOptions {
        dram_pages: DRAM,
        honour_non_tx: true,
        fault,
        ..CacheOptions::default()
    }
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The two data pages of transaction `(i, seq)`, `x < y`.
fn plan(i: usize, seq: u64) -> (u32, u32) {
    let r = mix((i as u64) << 32 | seq);
    let a = (r % DATA as u64) as u32;
    let b = ((r >> 16) % (DATA as u64 - 1)) as u32;
    let b = if b >= a { b + 1 } else { b };
    (1 + a.min(b), 1 + a.max(b))
}

/// Fields of a data page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fields {
    balance: u64,
    stamps: [u64; 2],
    owned: u32,
}

fn pattern_byte(page: u32, f: &Fields, k: usize) -> u8 {
    let seed = mix(page as u64 ^ f.balance.rotate_left(7) ^ f.stamps[0].rotate_left(19))
        ^ mix(f.stamps[1] ^ (f.owned as u64) << 40);
    (mix(seed ^ (k as u64 / 8)) >> ((k % 8) * 8)) as u8
}

fn encode(page: u32, f: &Fields) -> Vec<u8> {
    let mut b = vec![0u8; PAGE];
    b[0..8].copy_from_slice(&f.balance.to_le_bytes());
    b[8..16].copy_from_slice(&f.stamps[0].to_le_bytes());
    b[16..24].copy_from_slice(&f.stamps[1].to_le_bytes());
    b[24..28].copy_from_slice(&f.owned.to_le_bytes());
    for (k, x) in b.iter_mut().enumerate().skip(64) {
        *x = pattern_byte(page, f, k);
    }
    b
}

/// What the transaction that allocates `owned` for data page `x` writes
/// into it: both numbers, then a pattern of them.
fn owned_content(x: u32, owned: u32) -> Vec<u8> {
    let mut b = vec![0u8; PAGE];
    b[0..4].copy_from_slice(&x.to_le_bytes());
    b[4..8].copy_from_slice(&owned.to_le_bytes());
    for (k, v) in b.iter_mut().enumerate().skip(64) {
        *v = (mix(((x as u64) << 32 | owned as u64) ^ (k as u64 / 8)) >> ((k % 8) * 8)) as u8;
    }
    b
}

fn decode(page: u32, b: &[u8]) -> Result<Fields, String> {
    let u = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
    let f = Fields {
        balance: u(0),
        stamps: [u(8), u(16)],
        owned: u32::from_le_bytes(b[24..28].try_into().expect("4 bytes")),
    };
    if encode(page, &f) != b {
        return Err(format!("page {page} is torn or garbage ({f:?})"));
    }
    Ok(f)
}

/// Acknowledged transactions per session (the model).
#[derive(Default)]
pub struct Acked([AtomicU64; 2]);

fn setup(pool: &Pool) {
    let (r, disk) = regions(pool);
    let c = Cache::create(r, disk, SLOTS, SESSIONS, opts(None)).expect("create");
    let s = c.session().expect("session");
    for p in 1..=DATA {
        let n = s.alloc_page().expect("alloc");
        assert_eq!(n, p, "fresh disk allocates in order");
        let mut g = s.get_page(p, Mode::Write).expect("page");
        g.write(
            0,
            &encode(
                p,
                &Fields {
                    balance: INITIAL,
                    stamps: [0, 0],
                    owned: 0,
                },
            ),
        );
    }
    drop(s);
    c.sync_all().expect("sync");
}

fn transfer(s: &Session, i: usize, seq: u64) -> crate::Result<()> {
    let (x, y) = plan(i, seq);
    let mut gx = s.get_page(x, Mode::Write)?;
    let mut gy = s.get_page(y, Mode::Write)?;
    let mut fx = decode(x, &gx.read_vec()).expect("x readable under its lock");
    let mut fy = decode(y, &gy.read_vec()).expect("y readable under its lock");
    fx.balance -= 1;
    fx.stamps[i] = seq;
    if fx.owned != 0 {
        s.free_page(fx.owned)?;
        fx.owned = 0;
    } else {
        fx.owned = s.alloc_page()?;
        // Fresh page: written through `get_new_page` (no disk read; the
        // transaction's copy is a zeroed slot), committed with the rest.
        s.get_new_page(fx.owned)?
            .write(0, &owned_content(x, fx.owned));
    }
    gx.write(0, &encode(x, &fx));
    drop(gx);
    fy.balance += 1;
    fy.stamps[i] = seq;
    gy.write(0, &encode(y, &fy));
    drop(gy);
    Ok(())
}

fn body(c: &Cache, acked: &Acked, i: usize, txs: u32) {
    let s = c.session().expect("session");
    for seq in 1..=txs as u64 {
        transfer(&s, i, seq).expect("transfer");
        acked.0[i].store(seq, Ordering::SeqCst);
        if seq % 4 == 0 {
            for k in 0..3u64 {
                let p = 1 + (mix(seq * 7 + k + i as u64) % DATA as u64) as u32;
                for _ in 0..2 {
                    let g = s.get_page(p, Mode::Read).expect("read");
                    decode(p, &g.read_vec()).expect("readable");
                }
            }
        }
        if seq % 6 == 0 {
            c.sync_all().expect("sync");
        }
    }
}

fn workload(pool: &Pool, acked: &mut Acked, sc: Scenario, seed: u64) {
    let (r, disk) = regions(pool);
    let (c, _) = Cache::open(r, disk, opts(sc.fault)).expect("open");
    if sc.threads == 1 {
        body(&c, acked, 0, sc.txs);
        return;
    }
    let acked = &*acked;
    let c = &c;
    let bodies: Vec<Box<dyn FnOnce() + Send + '_>> = (0..sc.threads)
        .map(|i| Box::new(move || body(c, acked, i, sc.txs)) as Box<dyn FnOnce() + Send + '_>)
        .collect();
    ferrite_crash::lockstep::run(seed, 3, bodies);
}

fn recover(pool: &Pool) -> Result<Cache, String> {
    let (r, disk) = regions(pool);
    Cache::open(r, disk, opts(None))
        .map(|(c, _)| c)
        .map_err(|e| e.to_string())
}

/// The invariant of the module documentation.
fn check(c: &Cache, acked: &Acked, threads: usize, txs: u32) -> Result<(), String> {
    c.verify()?;
    let s = c.session().map_err(|e| e.to_string())?;
    let mut fields = Vec::new();
    for p in 1..=DATA {
        let g = s.get_page(p, Mode::Read).map_err(|e| e.to_string())?;
        fields.push(decode(p, &g.read_vec())?);
    }
    // Expected state from the committed prefix of each session.
    let mut exp: Vec<Fields> = (1..=DATA)
        .map(|_| Fields {
            balance: INITIAL,
            stamps: [0, 0],
            owned: 0,
        })
        .collect();
    let mut owned_parity = vec![false; DATA as usize];
    for i in 0..threads {
        let a = acked.0[i].load(Ordering::SeqCst);
        let ci = fields.iter().map(|f| f.stamps[i]).max().unwrap_or(0);
        if ci < a || ci > (a + 1).min(txs as u64) {
            return Err(format!(
                "session {i}: last committed transaction {ci}, acknowledged {a}"
            ));
        }
        for seq in 1..=ci {
            let (x, y) = plan(i, seq);
            let (x, y) = ((x - 1) as usize, (y - 1) as usize);
            exp[x].balance -= 1;
            exp[x].stamps[i] = seq;
            owned_parity[x] = !owned_parity[x];
            exp[y].balance += 1;
            exp[y].stamps[i] = seq;
        }
    }
    let mut owned = Vec::new();
    for (k, (f, e)) in fields.iter().zip(&exp).enumerate() {
        let p = k + 1;
        if f.balance != e.balance || f.stamps != e.stamps {
            return Err(format!(
                "page {p}: balance {} stamps {:?}, expected {} {:?}",
                f.balance as i64 - BASE as i64,
                f.stamps,
                e.balance as i64 - BASE as i64,
                e.stamps
            ));
        }
        if (f.owned != 0) != owned_parity[k] {
            return Err(format!(
                "page {p}: owned page {} against the committed toggles",
                f.owned
            ));
        }
        if f.owned != 0 {
            owned.push(f.owned);
            let g = s.get_page(f.owned, Mode::Read).map_err(|e| e.to_string())?;
            if g.read_vec() != owned_content(p as u32, f.owned) {
                return Err(format!(
                    "page {p}: its owned page {} lost what the allocating transaction wrote",
                    f.owned
                ));
            }
        }
    }
    for n in 0..DISK_PAGES {
        let want = n == 0 || (1..=DATA).contains(&n) || owned.contains(&n);
        let have = s.is_allocated(n).map_err(|e| e.to_string())?;
        if want != have {
            return Err(format!(
                "disk page {n}: allocated {have}, reachable {want} (owned {owned:?})"
            ));
        }
    }
    let mut o = owned.clone();
    o.sort_unstable();
    o.dedup();
    if o.len() != owned.len() || o.iter().any(|n| *n <= DATA) {
        return Err(format!("owned pages overlap: {owned:?}"));
    }
    drop(s);
    c.verify()
}

/// Explores one scenario.
pub fn explore(sc: Scenario, cfg: &Config) -> Result<Report, ExploreError> {
    let cfg = cfg
        .clone()
        .domain(sc.domain)
        .tearing(sc.tearing)
        .pool_size(pool_size());
    let cfg = Config {
        layout: "ferrite-cache-check".into(),
        ..cfg
    };
    let seed = cfg.seed;
    Explorer::new(cfg).setup(setup).explore(
        |pool, acked: &mut Acked| workload(pool, acked, sc, seed),
        recover,
        |_, c, acked| check(c, acked, sc.threads, sc.txs),
    )
}

// ---- the store over the cache -------------------------------------------

const STORE_SLOTS: u32 = 24;
const STORE_DISK: u32 = 96;

fn store_cache_bytes() -> usize {
    Cache::required_bytes(STORE_SLOTS, SESSIONS, STORE_DISK)
        .expect("valid geometry")
        .next_multiple_of(PAGE)
}

fn store_regions(pool: &Pool) -> (Region, Arc<PoolDisk>) {
    let d = pool.data();
    let c = d.sub(0, store_cache_bytes()).expect("cache region");
    let disk = d
        .sub(store_cache_bytes(), STORE_DISK as usize * PAGE)
        .expect("disk region");
    (c, Arc::new(PoolDisk::new(disk)))
}

/// Put `j` of session `i` in a store run of `threads` sessions: 170
/// distinct keys in all (each session its own), so the one-page memtable
/// fills and flushes about every 31 puts, and the fourth branch of
/// similar size triggers a compaction.
fn store_put(threads: usize, i: usize, j: u64) -> (Vec<u8>, Vec<u8>) {
    let keys = 170 / threads as u64;
    let k = format!("s{i}key{:05}", mix(j % keys) % 100_000).into_bytes();
    let v = format!("v{i}{j:06}-{}", mix(j) % 1000).into_bytes();
    (k, v)
}

/// Puts per session: 200 alone, 120 each of two (a compaction either way).
fn store_puts(threads: usize) -> u64 {
    if threads == 1 { 200 } else { 120 }
}

fn store_open(
    pool: &Pool,
    rebuild: bool,
    fault: Option<StoreFault>,
) -> Result<crate::store::Store, String> {
    let (r, disk) = store_regions(pool);
    let (c, _) = Cache::open(r, disk, opts(None)).map_err(|e| e.to_string())?;
    let (mut st, _) =
        crate::store::Store::open_with(Arc::new(c), None, rebuild).map_err(|e| e.to_string())?;
    st.plant(fault);
    Ok(st)
}

/// One configuration of the store check.
#[derive(Clone, Copy, Debug)]
pub struct StoreScenario {
    pub threads: usize,
    /// `false` plants the missing allocation recovery (P1 §5.5).
    pub rebuild: bool,
    pub fault: Option<StoreFault>,
}

impl StoreScenario {
    pub fn name(&self) -> String {
        format!("store-adr-{}t", self.threads)
    }
}

/// The store (one memtable page per set) under puts that flush branches
/// built in non-transactions and compact them, crashed anywhere; one
/// session, or two in lockstep (both with puts in flight at once, one
/// flushing or compacting while the other puts). After recovery (the
/// cache's, then the store's allocation rebuild), for each session every
/// acknowledged put is readable with its latest value and the put in
/// flight is all or nothing; the bitmap holds exactly the reachable
/// pages and the cache verifies.
pub fn explore_store(cfg: &Config) -> Result<Report, ExploreError> {
    explore_store_scenario(
        cfg,
        StoreScenario {
            threads: 1,
            rebuild: true,
            fault: None,
        },
    )
}

/// [`explore_store`] with one session, `rebuild = false` planting the
/// missing allocation recovery, which must be caught as leaked pages.
pub fn explore_store_with(cfg: &Config, rebuild: bool) -> Result<Report, ExploreError> {
    explore_store_scenario(
        cfg,
        StoreScenario {
            threads: 1,
            rebuild,
            fault: None,
        },
    )
}

fn store_body(st: &crate::store::Store, acked: &Acked, threads: usize, i: usize) {
    let s = st.session().expect("session");
    for j in 1..=store_puts(threads) {
        let (k, v) = store_put(threads, i, j);
        s.put(&k, &v).expect("put");
        acked.0[i].store(j, Ordering::SeqCst);
    }
}

fn store_check(st: &crate::store::Store, acked: &Acked, threads: usize) -> Result<(), String> {
    st.cache().verify()?;
    st.verify_allocation()?;
    let s = st.session().map_err(|e| e.to_string())?;
    let puts = store_puts(threads);
    for i in 0..threads {
        let a = acked.0[i].load(Ordering::SeqCst);
        let mut latest = std::collections::HashMap::new();
        for j in 1..=a {
            let (k, v) = store_put(threads, i, j);
            latest.insert(k, v);
        }
        let (kn, vn) = store_put(threads, i, a + 1);
        for j in 1..=puts {
            let k = store_put(threads, i, j).0;
            let got = s.get(&k).map_err(|e| e.to_string())?;
            let want = latest.get(&k).cloned();
            let ok = got == want || (a < puts && k == kn && got.as_deref() == Some(&vn[..]));
            if !ok {
                return Err(format!(
                    "session {i}: key {} after {a} acknowledged puts: {:?}, expected {:?}",
                    String::from_utf8_lossy(&k),
                    got.map(|v| String::from_utf8_lossy(&v).into_owned()),
                    want.map(|v| String::from_utf8_lossy(&v).into_owned())
                ));
            }
        }
    }
    drop(s);
    st.cache().verify()
}

/// Explores one store scenario (see [`explore_store`]).
pub fn explore_store_scenario(cfg: &Config, sc: StoreScenario) -> Result<Report, ExploreError> {
    let size = (HEADER_SIZE + store_cache_bytes() + STORE_DISK as usize * PAGE) as u64;
    let cfg = Config {
        layout: "ferrite-cache-store-check".into(),
        ..cfg.clone().domain(Domain::Adr).pool_size(size)
    };
    let seed = cfg.seed;
    Explorer::new(cfg)
        .setup(|pool| {
            let (r, disk) = store_regions(pool);
            let c = Cache::create(r, disk, STORE_SLOTS, SESSIONS, opts(None)).expect("create");
            let st = crate::store::Store::create(Arc::new(c), 1, None).expect("store");
            st.cache().sync_all().expect("sync");
        })
        .explore(
            |pool, acked: &mut Acked| {
                let st = store_open(pool, sc.rebuild, sc.fault).expect("open");
                if sc.threads == 1 {
                    store_body(&st, acked, 1, 0);
                    return;
                }
                let (st, acked) = (&st, &*acked);
                let bodies: Vec<Box<dyn FnOnce() + Send + '_>> = (0..sc.threads)
                    .map(|i| {
                        Box::new(move || store_body(st, acked, sc.threads, i))
                            as Box<dyn FnOnce() + Send + '_>
                    })
                    .collect();
                ferrite_crash::lockstep::run(seed, 3, bodies);
            },
            |pool| store_open(pool, sc.rebuild, None),
            |_, st, acked| store_check(st, acked, sc.threads),
        )
}

/// The store scenarios of `ferrite check cache` with their budget weights.
pub fn store_scenarios(fault: Option<StoreFault>) -> Vec<(StoreScenario, usize)> {
    let s = |threads| StoreScenario {
        threads,
        rebuild: true,
        fault,
    };
    vec![(s(2), 2), (s(1), 1)]
}

/// The store part of the check: every store scenario under one budget.
pub fn check_store(
    cfg: &Config,
    fault: Option<StoreFault>,
) -> Result<Vec<(String, Report)>, ExploreError> {
    let plan = store_scenarios(fault);
    let first = plan[0].0;
    spend_budget(
        cfg,
        plan,
        4,
        |_| first,
        |s| s.name(),
        |s, c| explore_store_scenario(c, s),
    )
}

/// The scenarios of `ferrite check cache` with their budget weights.
pub fn scenarios(fault: Option<Fault>) -> Vec<(Scenario, usize)> {
    let s = |threads, txs, domain, tearing| Scenario {
        threads,
        txs,
        domain,
        tearing,
        fault,
    };
    vec![
        (s(2, 10, Domain::Adr, false), 4),
        (s(1, 14, Domain::Adr, false), 2),
        (s(2, 10, Domain::Adr, true), 2),
        (s(2, 10, Domain::Eadr, false), 1),
    ]
}

/// `ferrite check cache`: every scenario under one budget; extra runs
/// with new seeds (new lockstep schedules) spend what is left.
pub fn check_cache(cfg: &Config) -> Result<Vec<(String, Report)>, ExploreError> {
    // A quarter of the budget crashes the store; the rest the transfers.
    let share = (cfg.budget / 4).max(1);
    let store = check_store(&cfg.clone().budget(share), None)?;
    let spent: usize = store.iter().map(|(_, r)| r.states).sum();
    let left = cfg.budget.saturating_sub(spent).max(1);
    let mut runs = check_fault(&cfg.clone().budget(left), None)?;
    runs.extend(store);
    Ok(runs)
}

/// The same with a planted fault (each must be caught).
pub fn check_fault(
    cfg: &Config,
    fault: Option<Fault>,
) -> Result<Vec<(String, Report)>, ExploreError> {
    let plan = scenarios(fault);
    let first = plan[0].0;
    spend_budget(cfg, plan, 8, |_| first, |s| s.name(), explore)
}

/// The planted bugs of `ferrite check cache-planted`.
pub const PLANTED: [Fault; 3] = [
    Fault::CommitBeforeCopy,
    Fault::EarlyRelease,
    Fault::EvictBeforeSync,
];

/// The planted store-level bugs of `ferrite check cache-planted`.
pub const STORE_PLANTED: [StoreFault; 1] = [StoreFault::EmptyBeforeLink];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_passes() {
        let runs = check_cache(&Config::new("x").budget(600)).unwrap();
        let states: usize = runs.iter().map(|(_, r)| r.states).sum();
        for (n, r) in &runs {
            assert!(r.ok(), "{n}: {r}");
        }
        assert!(states >= 500, "{states} states");
    }

    #[test]
    fn store_check_passes_and_catches_a_missing_allocation_rebuild() {
        let ok = explore_store(&Config::new("x").budget(120)).unwrap();
        assert!(ok.ok(), "{ok}");
        let bad = explore_store_with(&Config::new("x").budget(300), false).unwrap();
        eprintln!(
            "no rebuild: {} violations in {} states",
            bad.violation_count, bad.states
        );
        assert!(
            !bad.ok(),
            "a missing allocation rebuild was not caught: {bad}"
        );
    }

    #[test]
    fn two_session_store_check_passes() {
        let runs = check_store(&Config::new("x").budget(300), None).unwrap();
        for (n, r) in &runs {
            assert!(r.ok(), "{n}: {r}");
        }
        assert!(
            runs.iter()
                .any(|(n, r)| n == "store-adr-2t" && r.states > 0)
        );
    }

    #[test]
    fn planted_store_bugs_are_caught() {
        for f in STORE_PLANTED {
            let runs = check_store(&Config::new("x").budget(600), Some(f)).unwrap();
            for (n, r) in &runs {
                eprintln!(
                    "{f:?} {n}: {} violations in {} states",
                    r.violation_count, r.states
                );
            }
            let caught: usize = runs.iter().map(|(_, r)| r.violation_count).sum();
            assert!(caught > 0, "planted {f:?} not caught");
        }
    }

    #[test]
    fn planted_bugs_are_caught() {
        for f in PLANTED {
            let runs = check_fault(&Config::new("x").budget(800), Some(f)).unwrap();
            let caught: usize = runs.iter().map(|(_, r)| r.violation_count).sum();
            let states: usize = runs.iter().map(|(_, r)| r.states).sum();
            eprintln!("{f:?}: {caught} violations in {states} states");
            assert!(caught > 0, "planted {f:?} not caught in {states} states");
        }
    }
}

#[cfg(test)]
mod coverage_tests {
    use super::*;

    /// The workload reaches every path the check claims to crash: page-in,
    /// eviction with write-back, DRAM promotion and demotion, commits.
    #[test]
    fn workload_exercises_every_migration_path() {
        let pool = Pool::create_in_memory(
            &ferrite_pmem::PoolOptions::new("ferrite-cache-check", pool_size()).domain(Domain::Adr),
        )
        .unwrap();
        setup(&pool);
        let a = Acked::default();
        let (r, disk) = regions(&pool);
        let (c, _) = Cache::open(r, disk, opts(None)).unwrap();
        let (cr, ar) = (&c, &a);
        let bodies: Vec<Box<dyn FnOnce() + Send + '_>> = (0..2)
            .map(|i| Box::new(move || body(cr, ar, i, 10)) as Box<dyn FnOnce() + Send + '_>)
            .collect();
        ferrite_crash::lockstep::run(1, 3, bodies);
        let st = &c.stats;
        let n = |x: &AtomicU64| x.load(Ordering::Relaxed);
        eprintln!("{st:?}");
        assert_eq!(
            n(&st.commits),
            20,
            "one commit per transfer (the allocation joins it)"
        );
        assert!(n(&st.page_ins) > 0 && n(&st.evictions) > 0 && n(&st.write_backs) > 0);
        assert!(n(&st.promotions) > 0 && n(&st.demotions) > 0);
        check(&c, &a, 2, 10).unwrap();
    }
}
