//! Crash checks of the server's items (feature `checks`): `ferrite check
//! server-items` calls [`check_items`], `server-items-planted` runs it
//! with [`ItemFault::ChecksumLate`] planted, which must be caught.
//!
//! # Workload
//!
//! The server's [`Cache`] over the `tx-<strategy>` store ([`TxKv`] on a
//! byte map of two sub-maps of two buckets, 16 KiB log areas) in a
//! 512 KiB simulated pool: [`Shared::open`] (which records the item
//! format), then a seeded script of 24 steps over 8 keys, each one
//! request alone (durable when it returns) or a group commit of two or
//! three ([`Group`]): set (values of 0 to 119 bytes), append, incr,
//! touch, delete.
//!
//! # Invariant (after recovery from every crash state)
//!
//! - the pool and the map open; [`Shared::open`] accepts the format;
//! - [`verify_items`] finds no damaged item: a checksum never reports a
//!   crash as corruption (the map writes an item, checksum included,
//!   atomically);
//! - a `get` of every key succeeds and the data equal the acknowledged
//!   requests, plus the request or group in flight whole or not at all.

use crate::protocol::{DeleteOpts, StoreMode, StoreOpts};
use crate::store::{Arith, Cache, Group, ItemFault, Kv, Shared, Store, tx::TxKv, verify_items};
use ferrite_crash::explorer::spend_budget;
use ferrite_crash::{Config, ExploreError, Explorer, Report};
use ferrite_ds::bytemap::ByteMap;
use ferrite_pmem::Pool;
use ferrite_tx::{Fault, Strategy, TxOptions, TxPool};
use std::collections::BTreeMap;

const STEPS: usize = 24;
const KEYS: u64 = 8;
const NOW: u64 = 1_800_000_000;
const SCRIPT: u64 = 0x5e12_7e45;
/// Bounds a recovery walking a damaged image (as the ds checks do).
const ACCESS_LIMIT: u64 = 20_000;
const POOL_SIZE: u64 = 512 * 1024;

/// The planted bugs `server-items-planted` runs.
pub const PLANTED: [ItemFault; 1] = [ItemFault::ChecksumLate];

type Data = BTreeMap<Vec<u8>, Vec<u8>>;

/// What the workload saw acknowledged.
#[derive(Debug, Default)]
pub struct Model {
    /// The contents every acknowledged request has made durable.
    pub committed: Data,
    /// The contents once the request or group in flight is applied.
    pub inflight: Option<Data>,
    /// Script steps (requests or groups) acknowledged so far: a violation
    /// report says after how many the crash came.
    pub steps: usize,
}

/// A seeded script (splitmix64).
struct Script(u64);

impl Script {
    fn next(&mut self, m: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % m
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i}").into_bytes()
}

fn tx_opts(s: Strategy) -> TxOptions {
    TxOptions::new(s).slots(2).area_bytes(16 << 10)
}

fn setup(pool: &Pool, strategy: Strategy) {
    let txp = TxPool::create(pool, &tx_opts(strategy), crate::store::tx::registry())
        .unwrap_or_else(|e| panic!("create: {e}"));
    let mut th = txp.thread().expect("a slot");
    ByteMap::create(&mut th, 2, 2).unwrap_or_else(|e| panic!("create byte map: {e}"));
}

/// One request of the script, on the cache and on the model.
enum Req {
    Set(Vec<u8>, Vec<u8>),
    Append(Vec<u8>, Vec<u8>),
    Incr(Vec<u8>),
    Touch(Vec<u8>),
    Delete(Vec<u8>),
}

impl Req {
    fn draw(rng: &mut Script, version: &mut u64) -> Req {
        let k = key(rng.next(KEYS));
        *version += 1;
        match rng.next(10) {
            0..=4 => {
                let len = rng.next(120) as usize;
                let v = if rng.next(3) == 0 {
                    version.to_string().into_bytes()
                } else {
                    (0..len)
                        .map(|j| b'a' + ((*version as usize + j) % 26) as u8)
                        .collect()
                };
                Req::Set(k, v)
            }
            5 | 6 => Req::Append(k, format!("+{version}").into_bytes()),
            7 => Req::Incr(k),
            8 => Req::Touch(k),
            _ => Req::Delete(k),
        }
    }

    fn model(&self, m: &mut Data) {
        match self {
            Req::Set(k, v) => {
                m.insert(k.clone(), v.clone());
            }
            Req::Append(k, v) => {
                if let Some(d) = m.get_mut(k) {
                    d.extend_from_slice(v);
                }
            }
            Req::Incr(k) => {
                if let Some(d) = m.get_mut(k)
                    && let Some(n) = std::str::from_utf8(d)
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok())
                {
                    *d = n.wrapping_add(1).to_string().into_bytes();
                }
            }
            Req::Touch(_) => {}
            Req::Delete(k) => {
                m.remove(k);
            }
        }
    }

    fn run<K: Kv>(&self, c: &mut Cache<'_, K>) {
        let o = StoreOpts::default();
        let r = match self {
            Req::Set(k, v) => c
                .store(StoreMode::Set, k, 0, 0, v, None, &o, NOW)
                .map(|_| ()),
            Req::Append(k, v) => c
                .store(StoreMode::Append, k, 0, 0, v, None, &o, NOW)
                .map(|_| ()),
            Req::Incr(k) => {
                let a = Arith {
                    incr: true,
                    delta: 1,
                    create: None,
                    cas: None,
                    ttl: None,
                    new_cas: None,
                    order: b"",
                };
                c.arith(k, a, NOW).map(|_| ())
            }
            Req::Touch(k) => c.touch(k, 100_000, NOW).map(|_| ()),
            Req::Delete(k) => c.delete(k, None, &DeleteOpts::default(), NOW).map(|_| ()),
        };
        r.unwrap_or_else(|e| panic!("request: {e}"));
    }
}

fn run_script(pool: &Pool, strategy: Strategy, fault: ItemFault, seed: u64, m: &mut Model) {
    let txp = TxPool::open_inner(
        pool,
        crate::store::tx::registry(),
        Some(strategy),
        Fault::None,
        ACCESS_LIMIT,
    )
    .unwrap_or_else(|e| panic!("open: {e}"));
    let map = ByteMap::open(&txp, txp.root()).unwrap_or_else(|e| panic!("open map: {e}"));
    let mut kv = Group::new(TxKv::new(&map).unwrap_or_else(|e| panic!("attach: {e}")));
    m.inflight = Some(m.committed.clone());
    let sh = Shared::open(&mut kv, 1 << 20).unwrap_or_else(|e| panic!("shared: {e}"));
    m.inflight = None;
    let mut c = Cache::new(kv, &sh);
    c.plant(fault);
    let mut rng = Script(seed);
    let mut version = 0;
    for _ in 0..STEPS {
        let n = if rng.next(3) == 0 { 2 + rng.next(2) } else { 1 };
        let reqs: Vec<Req> = (0..n).map(|_| Req::draw(&mut rng, &mut version)).collect();
        let mut after = m.committed.clone();
        for r in &reqs {
            r.model(&mut after);
        }
        m.inflight = Some(after.clone());
        if n == 1 {
            reqs[0].run(&mut c);
        } else {
            c.kv().begin();
            for r in &reqs {
                r.run(&mut c);
            }
            c.kv()
                .commit()
                .unwrap_or_else(|e| panic!("group commit: {e}"));
        }
        c.settle(true);
        m.committed = after;
        m.inflight = None;
        m.steps += 1;
    }
}

fn recover(pool: &Pool, strategy: Strategy) -> Result<Data, String> {
    let txp = TxPool::open_inner(
        pool,
        crate::store::tx::registry(),
        Some(strategy),
        Fault::None,
        ACCESS_LIMIT,
    )
    .map_err(|e| format!("open: {e}"))?;
    let map = ByteMap::open(&txp, txp.root()).map_err(|e| format!("open map: {e}"))?;
    let mut kv = TxKv::new(&map).map_err(|e| format!("attach: {e}"))?;
    let v = verify_items(&mut kv).map_err(|e| format!("verify: {e}"))?;
    if let Some((k, why)) = v.damaged.first() {
        return Err(format!(
            "{} damaged item(s) after recovery, first '{k}': {why}",
            v.damaged.len()
        ));
    }
    let sh = Shared::open(&mut kv, 1 << 20).map_err(|e| format!("shared: {e}"))?;
    let mut c = Cache::new(kv, &sh);
    let mut got = Data::new();
    for i in 0..KEYS {
        let k = key(i);
        match c.get(&k, NOW) {
            Ok(Some(it)) => {
                got.insert(k, it.data);
            }
            Ok(None) => {}
            Err(e) => return Err(format!("get {}: {e}", String::from_utf8_lossy(&k))),
        }
    }
    Ok(got)
}

fn check(got: &Data, m: &Model) -> Result<(), String> {
    if *got == m.committed || m.inflight.as_ref() == Some(got) {
        return Ok(());
    }
    let show = |d: &Data| {
        d.iter()
            .map(|(k, v)| {
                format!(
                    "{}={}",
                    String::from_utf8_lossy(k),
                    String::from_utf8_lossy(v)
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    Err(format!(
        "after {} steps: recovered {{{}}}, acknowledged {{{}}}, with the one in flight {:?}",
        m.steps,
        show(got),
        show(&m.committed),
        m.inflight.as_ref().map(show)
    ))
}

/// The runs of a check.
#[derive(Debug, Clone, Copy)]
enum Run {
    Main,
    Tearing,
}

fn check_run(
    strategy: Strategy,
    run: Run,
    cfg: Config,
    fault: ItemFault,
) -> Result<Report, ExploreError> {
    let mut cfg = match run {
        Run::Tearing => cfg.tearing(true),
        Run::Main => cfg,
    };
    let seed = cfg.seed ^ SCRIPT;
    cfg.layout = "server-check".into();
    cfg.pool_size = POOL_SIZE;
    Explorer::new(cfg)
        .setup(move |p| setup(p, strategy))
        .explore(
            |pool: &Pool, m: &mut Model| run_script(pool, strategy, fault, seed, m),
            |pool| recover(pool, strategy),
            |_, got, m| check(got, m),
        )
}

/// `ferrite check server-items` on the `tx-<strategy>` store with a
/// planted `fault` (or none): the budget over a line run (weight 2) and a
/// tearing run (1), leftover budget to line runs with new seeds.
pub fn check_items_fault(
    strategy: Strategy,
    cfg: Config,
    fault: ItemFault,
) -> Result<Vec<(String, Report)>, ExploreError> {
    let mut plan = vec![(Run::Main, 2)];
    if !cfg.tearing {
        plan.push((Run::Tearing, 1));
    }
    spend_budget(
        &cfg,
        plan,
        8,
        |_| Run::Main,
        |r| {
            format!(
                "tx-{strategy}-{}",
                if matches!(r, Run::Main) {
                    "main"
                } else {
                    "tearing"
                }
            )
        },
        |r, c| check_run(strategy, r, c.clone(), fault),
    )
}

/// [`check_items_fault`] without a planted bug.
pub fn check_items(strategy: Strategy, cfg: Config) -> Result<Vec<(String, Report)>, ExploreError> {
    check_items_fault(strategy, cfg, ItemFault::None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_pmem::{Domain, PoolOptions};

    #[test]
    fn the_script_runs_clean_and_touches_every_request_kind() {
        let p = Pool::create_in_memory(
            &PoolOptions::new("server-check", POOL_SIZE).domain(Domain::Adr),
        )
        .unwrap();
        setup(&p, Strategy::Undo);
        let mut m = Model::default();
        run_script(&p, Strategy::Undo, ItemFault::None, SCRIPT, &mut m);
        let got = recover(&p, Strategy::Undo).unwrap();
        assert_eq!(got, m.committed);
        assert!(m.committed.len() >= 3, "{:?}", m.committed.keys());
    }

    #[test]
    fn crash_states_recover_clean_and_the_planted_bug_is_caught() {
        let cfg = Config::new("server-items").budget(300).domain(Domain::Adr);
        for (run, rep) in check_items(Strategy::Undo, cfg.clone()).unwrap() {
            assert!(rep.violations.is_empty(), "{run}: {rep}");
            assert!(rep.states > 0, "{run}");
        }
        let caught: usize = check_items_fault(Strategy::Undo, cfg, ItemFault::ChecksumLate)
            .unwrap()
            .iter()
            .map(|(_, r)| r.violation_count)
            .sum();
        assert!(caught > 0, "ChecksumLate not caught");
    }
}
