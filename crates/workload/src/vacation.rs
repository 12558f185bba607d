//! STAMP's Vacation (C. Cao Minh et al., *STAMP: Stanford Transactional
//! Applications for Multi-Processing*, IISWC 2008): a travel agency with
//! four tables — cars, flights, rooms (each `id → {total, used, free,
//! price}`) and customers (`id → list of reservations`) — and client
//! threads running three actions. This module draws the client's actions
//! and the loader's initial rows exactly as STAMP's `client.c` and
//! `vacation.c` do; the tables belong to the system measured.
//!
//! ## Parameters (STAMP's flags)
//! | field | flag | meaning |
//! |---|---|---|
//! | `queries` | `-n` | items queried (or updated) per action: each action draws `1..=n` |
//! | `query_percent` | `-q` | ids are drawn from `1..=query_range`, `query_range = round(q % × r)` |
//! | `user_percent` | `-u` | % of actions that are MAKE_RESERVATION |
//! | `relations` | `-r` | rows per table: ids `1..=r` of cars, flights, rooms, customers |
//! | `tasks` | `-t` | actions over all client threads (`t / threads` each) |
//!
//! P3's runs (notes B5): high contention `-n4 -q60 -u90`, low `-n2 -q90
//! -u98`, both `-r4194304 -t16777216`. Presets here ([`VacationConfig::high`],
//! [`VacationConfig::low`]) keep n, q, u and scale r and t to this machine:
//! [`VacationScale::Quick`] r = 16 384, t = 65 536; [`VacationScale::Full`]
//! r = 2^20, t = 2^22 (STAMP's published non-simulator sizes).
//!
//! ## Actions (STAMP `client_run`)
//! A draw `x = random % 100` picks MAKE_RESERVATION when `x < u`, otherwise
//! DELETE_CUSTOMER when `x` is odd and UPDATE_TABLES when `x` is even.
//! - **MAKE_RESERVATION**: `k = random % n + 1` queries, a customer id, and
//!   for each query a type (car, flight, room; uniform) and an id. The
//!   transaction reads the price of each queried item that exists, keeps per
//!   type the *highest* price seen (STAMP's `maxPrices`, ties keep the first),
//!   adds the customer if any item was found, then reserves the kept item of
//!   each type for the customer.
//! - **DELETE_CUSTOMER**: a customer id; if the customer exists (its bill is
//!   ≥ 0), cancel each of its reservations and remove it.
//! - **UPDATE_TABLES**: `k = random % n + 1` updates, each a type, an id and
//!   add-or-remove (`random % 2`); an add carries a price `(random % 5) × 10
//!   + 50` and adds 100 units (creating the item if absent); a remove takes
//!   100 units away (cars, rooms) or deletes the flight outright (STAMP's
//!   `manager_deleteFlight`, refused while seats are reserved).
//!
//! ## Initial rows (STAMP `initializeManager`)
//! For each table in the order cars, flights, rooms, customers: shuffle the
//! ids `1..=r` (r random swaps, the shuffle continuing from the previous
//! table's order), then for each id in that order draw `num = (random % 5 +
//! 1) × 100` and `price = (random % 5) × 10 + 50` (customers have neither).
//!
//! ## Threads
//! [`VacationClient::new`] gives thread `t` its own ChaCha stream of the
//! seed (stream `t`); the loader uses stream `u64::MAX`, so loading does not
//! shift any client's stream. [`VacationConfig::draw_action`] draws from any
//! caller-owned generator.

use crate::WorkloadError;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The three reservation types (STAMP's `reservation_type_t`, same order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    Car = 0,
    Flight = 1,
    Room = 2,
}

impl Resource {
    pub const ALL: [Resource; 3] = [Resource::Car, Resource::Flight, Resource::Room];

    /// The resource of index 0, 1, 2.
    pub fn from_index(i: usize) -> Option<Resource> {
        Resource::ALL.get(i).copied()
    }
}

/// The four tables, in the loader's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Table {
    Car,
    Flight,
    Room,
    Customer,
}

impl Table {
    pub const ALL: [Table; 4] = [Table::Car, Table::Flight, Table::Room, Table::Customer];

    /// The reservation type of a resource table (`None` for customers).
    pub fn resource(self) -> Option<Resource> {
        match self {
            Table::Car => Some(Resource::Car),
            Table::Flight => Some(Resource::Flight),
            Table::Room => Some(Resource::Room),
            Table::Customer => None,
        }
    }
}

/// Units an UPDATE_TABLES add or remove moves (STAMP's constant 100).
pub const UPDATE_UNITS: u64 = 100;

/// Prices STAMP draws: `(random % 5) * 10 + 50`.
pub fn draw_price<R: Rng + ?Sized>(rng: &mut R) -> u64 {
    rng.random_range(0..5u64) * 10 + 50
}

/// How large the tables are (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VacationScale {
    /// r = 64, t = 256: crash checks and unit tests.
    Tiny,
    /// r = 16 384, t = 65 536.
    Quick,
    /// r = 2^20, t = 2^22.
    Full,
    /// P3's r = 2^22, t = 2^24.
    P3,
}

impl VacationScale {
    /// (relations, tasks).
    pub fn sizes(self) -> (u64, u64) {
        match self {
            VacationScale::Tiny => (64, 256),
            VacationScale::Quick => (16_384, 65_536),
            VacationScale::Full => (1 << 20, 1 << 22),
            VacationScale::P3 => (1 << 22, 1 << 24),
        }
    }
}

/// STAMP Vacation's parameters (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VacationConfig {
    /// `-n`.
    pub queries: u32,
    /// `-q`, 1..=100.
    pub query_percent: u32,
    /// `-u`, 0..=100.
    pub user_percent: u32,
    /// `-r`.
    pub relations: u64,
    /// `-t`.
    pub tasks: u64,
}

impl VacationConfig {
    /// P3's high contention run `-n4 -q60 -u90` at `scale`.
    pub fn high(scale: VacationScale) -> VacationConfig {
        let (relations, tasks) = scale.sizes();
        VacationConfig {
            queries: 4,
            query_percent: 60,
            user_percent: 90,
            relations,
            tasks,
        }
    }

    /// P3's low contention run `-n2 -q90 -u98` at `scale`.
    pub fn low(scale: VacationScale) -> VacationConfig {
        let (relations, tasks) = scale.sizes();
        VacationConfig {
            queries: 2,
            query_percent: 90,
            user_percent: 98,
            relations,
            tasks,
        }
    }

    /// Parses `vacation-high` / `vacation-low` with options `tiny`,
    /// `quick` (the default), `full`, `p3`, and `n=`, `q=`, `u=`, `r=`,
    /// `t=` overriding STAMP's flags, e.g. `vacation-low:full:t=1000000`.
    pub fn parse(name: &str) -> Result<VacationConfig, WorkloadError> {
        let mut parts = name.split(':');
        let base = parts.next().unwrap_or("");
        let high = match base {
            "vacation-high" => true,
            "vacation-low" => false,
            _ => return Err(WorkloadError::Unknown(name.to_string())),
        };
        let opts: Vec<&str> = parts.collect();
        let mut scale = VacationScale::Quick;
        for o in &opts {
            match *o {
                "tiny" => scale = VacationScale::Tiny,
                "quick" => scale = VacationScale::Quick,
                "full" => scale = VacationScale::Full,
                "p3" => scale = VacationScale::P3,
                _ => {}
            }
        }
        let mut cfg = if high {
            VacationConfig::high(scale)
        } else {
            VacationConfig::low(scale)
        };
        let bad = |o: &str, why: &str| WorkloadError::BadValue {
            workload: name.to_string(),
            option: o.to_string(),
            why: why.to_string(),
        };
        for o in opts {
            if matches!(o, "tiny" | "quick" | "full" | "p3") {
                continue;
            }
            let Some((k, v)) = o.split_once('=') else {
                return Err(WorkloadError::UnknownOption {
                    workload: name.to_string(),
                    option: o.to_string(),
                });
            };
            let v: u64 = v.parse().map_err(|_| bad(o, "not a number"))?;
            match k {
                "n" => cfg.queries = u32::try_from(v).map_err(|_| bad(o, "too large"))?,
                "q" => cfg.query_percent = u32::try_from(v).map_err(|_| bad(o, "too large"))?,
                "u" => cfg.user_percent = u32::try_from(v).map_err(|_| bad(o, "too large"))?,
                "r" => cfg.relations = v,
                "t" => cfg.tasks = v,
                _ => {
                    return Err(WorkloadError::UnknownOption {
                        workload: name.to_string(),
                        option: o.to_string(),
                    });
                }
            }
        }
        cfg.validate().map_err(|why| bad(name, &why))?;
        Ok(cfg)
    }

    /// Checks the ranges STAMP needs: n ≥ 1, 1 ≤ q ≤ 100, u ≤ 100, r ≥ 1
    /// and a non-empty query range.
    pub fn validate(&self) -> Result<(), String> {
        if self.queries == 0 {
            return Err("n (queries per task) must be at least 1".into());
        }
        if self.query_percent == 0 || self.query_percent > 100 {
            return Err("q must be in 1..=100".into());
        }
        if self.user_percent > 100 {
            return Err("u must be in 0..=100".into());
        }
        if self.relations == 0 {
            return Err("r must be at least 1".into());
        }
        if self.query_range() == 0 {
            return Err("q % of r rounds to an empty query range".into());
        }
        Ok(())
    }

    /// STAMP's `queryRange = (long)(q / 100.0 * r + 0.5)`.
    pub fn query_range(&self) -> u64 {
        (self.query_percent as f64 / 100.0 * self.relations as f64 + 0.5) as u64
    }

    /// Actions of client `thread` of `threads`: STAMP gives each client
    /// `t / threads`; the remainder goes to the first clients so the total
    /// is exactly `t`.
    pub fn tasks_for_thread(&self, thread: u32, threads: u32) -> u64 {
        let threads = threads.max(1) as u64;
        self.tasks / threads + u64::from((thread as u64) < self.tasks % threads)
    }

    /// Draws the next action into `out` (its vector is reused), as STAMP's
    /// `client_run` does before `TM_BEGIN` (module docs).
    pub fn draw_action<R: Rng + ?Sized>(&self, rng: &mut R, out: &mut VacationAction) {
        let range = self.query_range().max(1);
        let x = rng.random_range(0..100u32);
        out.items.clear();
        if x < self.user_percent {
            out.kind = ActionKind::MakeReservation;
            let k = rng.random_range(0..self.queries.max(1)) + 1;
            out.customer = rng.random_range(1..=range);
            for _ in 0..k {
                let resource = Resource::ALL[rng.random_range(0..3usize)];
                let id = rng.random_range(1..=range);
                out.items.push(VacationItem {
                    resource,
                    id,
                    op: ItemOp::Query,
                });
            }
        } else if x & 1 == 1 {
            out.kind = ActionKind::DeleteCustomer;
            out.customer = rng.random_range(1..=range);
        } else {
            out.kind = ActionKind::UpdateTables;
            out.customer = 0;
            let k = rng.random_range(0..self.queries.max(1)) + 1;
            for _ in 0..k {
                let resource = Resource::ALL[rng.random_range(0..3usize)];
                let id = rng.random_range(1..=range);
                let op = if rng.random_bool(0.5) {
                    ItemOp::Add {
                        price: draw_price(rng),
                    }
                } else {
                    ItemOp::Remove
                };
                out.items.push(VacationItem { resource, id, op });
            }
        }
    }
}

/// The three client actions (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActionKind {
    MakeReservation,
    DeleteCustomer,
    UpdateTables,
}

/// What an item of an action does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemOp {
    /// MAKE_RESERVATION: query the item's price.
    Query,
    /// UPDATE_TABLES: add [`UPDATE_UNITS`] units at `price` (creating the
    /// item if absent; an existing item takes the new price).
    Add { price: u64 },
    /// UPDATE_TABLES: remove [`UPDATE_UNITS`] units (cars, rooms) or the
    /// whole flight.
    Remove,
}

/// One item an action touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VacationItem {
    pub resource: Resource,
    /// In `1..=query_range`.
    pub id: u64,
    pub op: ItemOp,
}

/// One client action's inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VacationAction {
    pub kind: ActionKind,
    /// The customer (MAKE_RESERVATION, DELETE_CUSTOMER); 0 for UPDATE_TABLES.
    pub customer: u64,
    /// The queried (MAKE_RESERVATION) or updated (UPDATE_TABLES) items.
    pub items: Vec<VacationItem>,
}

impl Default for VacationAction {
    fn default() -> Self {
        VacationAction {
            kind: ActionKind::DeleteCustomer,
            customer: 0,
            items: Vec::new(),
        }
    }
}

/// One client thread's seeded action stream.
pub struct VacationClient {
    cfg: VacationConfig,
    rng: ChaCha8Rng,
    remaining: u64,
    action: VacationAction,
}

impl VacationClient {
    /// Client `thread` of `threads` for `seed` (module docs, "Threads").
    pub fn new(
        cfg: VacationConfig,
        seed: u64,
        thread: u32,
        threads: u32,
    ) -> Result<VacationClient, WorkloadError> {
        if thread >= threads {
            return Err(WorkloadError::Thread { thread, threads });
        }
        cfg.validate().map_err(|why| WorkloadError::BadValue {
            workload: "vacation".into(),
            option: format!("{cfg:?}"),
            why,
        })?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(thread as u64);
        Ok(VacationClient {
            cfg,
            rng,
            remaining: cfg.tasks_for_thread(thread, threads),
            action: VacationAction::default(),
        })
    }

    /// Actions this client has left of its `t / threads`.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// The next action, or `None` when the client's share is done.
    pub fn next_action(&mut self) -> Option<&VacationAction> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        self.cfg.draw_action(&mut self.rng, &mut self.action);
        Some(&self.action)
    }
}

/// One initial row (customers have `num = price = 0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VacationRow {
    pub table: Table,
    pub id: u64,
    /// Units (`numTotal` = `numFree`; none used).
    pub num: u64,
    pub price: u64,
}

/// STAMP's `initializeManager` (module docs): calls `f` for every initial
/// row, tables in the order cars, flights, rooms, customers, rows in
/// STAMP's shuffled order. A function of (`relations`, `seed`) alone.
pub fn load_rows(cfg: &VacationConfig, seed: u64, mut f: impl FnMut(VacationRow)) {
    let r = cfg.relations;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(u64::MAX);
    let mut ids: Vec<u64> = (1..=r).collect();
    for table in Table::ALL {
        for _ in 0..r {
            let x = rng.random_range(0..r) as usize;
            let y = rng.random_range(0..r) as usize;
            ids.swap(x, y);
        }
        for &id in &ids {
            let (num, price) = if table == Table::Customer {
                (0, 0)
            } else {
                let num = (rng.random_range(0..5u64) + 1) * 100;
                (num, draw_price(&mut rng))
            };
            f(VacationRow {
                table,
                id,
                num,
                price,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn stream(cfg: VacationConfig, seed: u64, t: u32, n: usize) -> Vec<VacationAction> {
        let mut c = VacationClient::new(cfg, seed, t, 2).unwrap();
        let mut out = Vec::new();
        while let Some(a) = c.next_action() {
            out.push(a.clone());
            if out.len() == n {
                break;
            }
        }
        out
    }

    #[test]
    fn reproducible_per_thread() {
        let cfg = VacationConfig::high(VacationScale::Quick);
        assert_eq!(stream(cfg, 1, 0, 300), stream(cfg, 1, 0, 300));
        assert_ne!(stream(cfg, 1, 0, 300), stream(cfg, 1, 1, 300));
        assert_ne!(stream(cfg, 1, 0, 300), stream(cfg, 2, 0, 300));
    }

    #[test]
    fn presets_and_parse() {
        let h = VacationConfig::parse("vacation-high").unwrap();
        assert_eq!(
            (
                h.queries,
                h.query_percent,
                h.user_percent,
                h.relations,
                h.tasks
            ),
            (4, 60, 90, 16_384, 65_536)
        );
        let l = VacationConfig::parse("vacation-low:full").unwrap();
        assert_eq!(
            (l.queries, l.query_percent, l.user_percent, l.relations),
            (2, 90, 98, 1 << 20)
        );
        let o = VacationConfig::parse("vacation-low:tiny:r=10:t=7:n=3").unwrap();
        assert_eq!((o.relations, o.tasks, o.queries), (10, 7, 3));
        assert!(VacationConfig::parse("vacation-mid").is_err());
        assert!(VacationConfig::parse("vacation-low:x=1").is_err());
        assert!(VacationConfig::parse("vacation-low:q=0").is_err());
        assert!(VacationConfig::parse("vacation-low:r=0").is_err());
        assert!(VacationConfig::parse("vacation-low:n=abc").is_err());
        // STAMP's rounding: 60 % of 16384 = 9830.4 -> 9830.
        assert_eq!(h.query_range(), 9830);
        assert_eq!(l.with_r(3).query_range(), 3);
    }

    impl VacationConfig {
        fn with_r(mut self, r: u64) -> Self {
            self.relations = r;
            self
        }
    }

    #[test]
    fn tasks_split_exactly() {
        let mut cfg = VacationConfig::low(VacationScale::Tiny);
        cfg.tasks = 1001;
        let total: u64 = (0..3).map(|t| cfg.tasks_for_thread(t, 3)).sum();
        assert_eq!(total, 1001);
        let mut c = VacationClient::new(cfg, 1, 2, 3).unwrap();
        let mut n = 0;
        while c.next_action().is_some() {
            n += 1;
        }
        assert_eq!(n, cfg.tasks_for_thread(2, 3));
    }

    #[test]
    fn action_mix_and_ranges() {
        for (cfg, user) in [
            (VacationConfig::high(VacationScale::Quick), 90.0),
            (VacationConfig::low(VacationScale::Quick), 98.0),
        ] {
            let mut rng = ChaCha8Rng::seed_from_u64(9);
            let mut a = VacationAction::default();
            let n = 100_000;
            let (mut make, mut del, mut upd) = (0u32, 0u32, 0u32);
            let mut sizes = HashSet::new();
            for _ in 0..n {
                cfg.draw_action(&mut rng, &mut a);
                match a.kind {
                    ActionKind::MakeReservation => {
                        make += 1;
                        assert!((1..=cfg.query_range()).contains(&a.customer));
                        assert!(a.items.iter().all(|i| i.op == ItemOp::Query));
                    }
                    ActionKind::DeleteCustomer => {
                        del += 1;
                        assert!(a.items.is_empty());
                        assert!((1..=cfg.query_range()).contains(&a.customer));
                    }
                    ActionKind::UpdateTables => {
                        upd += 1;
                        for i in &a.items {
                            match i.op {
                                ItemOp::Add { price } => {
                                    assert!([50, 60, 70, 80, 90].contains(&price))
                                }
                                ItemOp::Remove => {}
                                ItemOp::Query => panic!("query in an update"),
                            }
                        }
                    }
                }
                sizes.insert(a.items.len());
                assert!(a.items.len() <= cfg.queries as usize);
                for i in &a.items {
                    assert!((1..=cfg.query_range()).contains(&i.id));
                }
            }
            let pct = |c: u32| c as f64 / n as f64 * 100.0;
            assert!((pct(make) - user).abs() < 0.5, "make {}", pct(make));
            // The rest splits evenly between odd (delete) and even (update) draws.
            let rest = 100.0 - user;
            assert!((pct(del) - rest / 2.0).abs() < 0.4, "delete {}", pct(del));
            assert!((pct(upd) - rest / 2.0).abs() < 0.4, "update {}", pct(upd));
            let want: HashSet<usize> = (0..=cfg.queries as usize).collect();
            assert_eq!(sizes, want, "item counts 1..=n (0 for delete)");
        }
    }

    #[test]
    fn loader_rows_cover_every_id_once() {
        let cfg = VacationConfig::high(VacationScale::Tiny);
        let mut rows = Vec::new();
        load_rows(&cfg, 4, |r| rows.push(r));
        assert_eq!(rows.len() as u64, 4 * cfg.relations);
        for table in Table::ALL {
            let ids: HashSet<u64> = rows
                .iter()
                .filter(|r| r.table == table)
                .map(|r| r.id)
                .collect();
            assert_eq!(ids, (1..=cfg.relations).collect());
        }
        for r in &rows {
            if r.table == Table::Customer {
                assert_eq!((r.num, r.price), (0, 0));
            } else {
                assert!([100, 200, 300, 400, 500].contains(&r.num));
                assert!([50, 60, 70, 80, 90].contains(&r.price));
            }
        }
        // Shuffled, and reproducible.
        let first: Vec<u64> = rows
            .iter()
            .take(cfg.relations as usize)
            .map(|r| r.id)
            .collect();
        assert_ne!(first, (1..=cfg.relations).collect::<Vec<_>>());
        let mut again = Vec::new();
        load_rows(&cfg, 4, |r| again.push(r));
        assert_eq!(rows, again);
    }
}
