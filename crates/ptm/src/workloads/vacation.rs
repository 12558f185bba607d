//! STAMP Vacation on the PTM (P3's high and low contention runs): four
//! red-black trees — cars, flights, rooms (id → reservation row) and
//! customers (id → customer row) — and the three client actions as STAMP's
//! `client.c` and `manager.c` run them (see [`ferrite_workload::vacation`]
//! for the inputs). One action = one transaction; the inputs are drawn
//! before it starts (STAMP's non-transactional work).
//!
//! ## Persistent layout
//! Workload root block, 48 bytes:
//! ```text
//! +0  magic = VACATION_MAGIC ("WLVACATN")
//! +8  cars tree   +16 flights tree   +24 rooms tree   +32 customers tree
//! +40 r (relations)
//! ```
//! Reservation row block, 40 bytes (STAMP's `reservation_t`):
//! ```text
//! +0 id   +8 num_used   +16 num_free   +24 num_total   +32 price
//! ```
//! Customer row block, 16 bytes: `+0 id, +8 head of its reservation list`.
//! Reservation-info node, 32 bytes (STAMP's `reservation_info_t`, the list
//! kept sorted by (type, id), no duplicates):
//! ```text
//! +0 type (0 car, 1 flight, 2 room)   +8 id   +16 price paid   +24 next
//! ```
//! Invariants (the check): `num_used + num_free = num_total ≥ 1` for every
//! item; each customer's list is strictly sorted and names existing items;
//! for every item, the number of list entries naming it equals `num_used`.

use super::{
    PtmWorkload, Rng, Scale, WorkloadKind, ptm_err, require_empty_root, root_block, root_of,
};
use crate::ds::rbtree::PRbTree;
use crate::ds::{CORRUPT, check_result};
use crate::{Abort, Ptm, PtmError, PtmThread, Tx, TxResult};
use ferrite_pmem::POff;
use ferrite_workload::vacation::{
    ActionKind, ItemOp, Resource, Table, UPDATE_UNITS, VacationAction, VacationConfig,
    VacationScale, load_rows,
};
use std::collections::HashMap;

/// "WLVACATN".
pub const VACATION_MAGIC: u64 = u64::from_le_bytes(*b"WLVACATN");

const R_ID: u64 = 0;
const R_USED: u64 = 8;
const R_FREE: u64 = 16;
const R_TOTAL: u64 = 24;
const R_PRICE: u64 = 32;
const C_ID: u64 = 0;
const C_LIST: u64 = 8;
const I_TYPE: u64 = 0;
const I_ID: u64 = 8;
const I_PRICE: u64 = 16;
const I_NEXT: u64 = 24;

/// The four trees, opened.
#[derive(Clone, Copy)]
struct Manager {
    /// Cars, flights, rooms (index = [`Resource`] as usize).
    items: [PRbTree; 3],
    customers: PRbTree,
    relations: u64,
}

fn bad<T>() -> TxResult<T> {
    Err(Abort::User(CORRUPT))
}

impl Manager {
    fn open(tx: &mut Tx<'_>, root: u64) -> TxResult<Manager> {
        let b = root_block(tx, root, VACATION_MAGIC)?;
        let first = tx.load(b + 8)?;
        let mut t = [PRbTree::open(tx, first)?; 4];
        for (i, slot) in t.iter_mut().enumerate().skip(1) {
            let hdr = tx.load(b + 8 + 8 * i as u64)?;
            *slot = PRbTree::open(tx, hdr)?;
        }
        Ok(Manager {
            items: [t[0], t[1], t[2]],
            customers: t[3],
            relations: tx.load(b + 40)?,
        })
    }

    /// STAMP `addReservation`: add `num` units (negative: remove) at
    /// `price` (negative: keep the price); creates the item if absent and
    /// `num ≥ 1`, `price ≥ 0`; deletes it when its total reaches 0.
    fn add_reservation(
        &self,
        tx: &mut Tx<'_>,
        r: Resource,
        id: u64,
        num: i64,
        price: i64,
    ) -> TxResult<bool> {
        let tree = self.items[r as usize];
        let Some(row) = tree.get(tx, id)? else {
            if num < 1 || price < 0 {
                return Ok(false);
            }
            let row = tx.alloc(40)?.raw();
            tx.store(row + R_ID, id)?;
            tx.store(row + R_USED, 0)?;
            tx.store(row + R_FREE, num as u64)?;
            tx.store(row + R_TOTAL, num as u64)?;
            tx.store(row + R_PRICE, price as u64)?;
            tree.insert(tx, id, row)?;
            return Ok(true);
        };
        let free = tx.load(row + R_FREE)? as i64;
        if free + num < 0 {
            return Ok(false);
        }
        let total = tx.load(row + R_TOTAL)? as i64 + num;
        tx.store(row + R_FREE, (free + num) as u64)?;
        tx.store(row + R_TOTAL, total as u64)?;
        if total == 0 {
            // total = used + free and free ≥ 0, so nothing is reserved.
            if tx.load(row + R_USED)? != 0 {
                return bad();
            }
            tree.remove(tx, id)?;
            tx.free(POff::new(row))?;
        } else if price >= 0 {
            tx.store(row + R_PRICE, price as u64)?;
        }
        Ok(true)
    }

    /// STAMP `manager_deleteFlight`: only when no seat is reserved.
    fn delete_flight(&self, tx: &mut Tx<'_>, id: u64) -> TxResult<bool> {
        let Some(row) = self.items[Resource::Flight as usize].get(tx, id)? else {
            return Ok(false);
        };
        if tx.load(row + R_USED)? > 0 {
            return Ok(false);
        }
        let total = tx.load(row + R_TOTAL)? as i64;
        self.add_reservation(tx, Resource::Flight, id, -total, -1)
    }

    /// STAMP `manager_addCustomer`: false if present.
    fn add_customer(&self, tx: &mut Tx<'_>, id: u64) -> TxResult<bool> {
        if self.customers.contains(tx, id)? {
            return Ok(false);
        }
        let row = tx.alloc(16)?.raw();
        tx.store(row + C_ID, id)?;
        tx.store(row + C_LIST, 0)?;
        self.customers.insert(tx, id, row)?;
        Ok(true)
    }

    /// STAMP `reserve`: one unit of item (`r`, `id`) for customer `cid`.
    fn reserve(&self, tx: &mut Tx<'_>, cid: u64, r: Resource, id: u64) -> TxResult<bool> {
        let Some(cust) = self.customers.get(tx, cid)? else {
            return Ok(false);
        };
        let Some(row) = self.items[r as usize].get(tx, id)? else {
            return Ok(false);
        };
        let free = tx.load(row + R_FREE)?;
        if free < 1 {
            return Ok(false);
        }
        // Find the sorted insertion point; a duplicate (type, id) fails
        // (STAMP then cancels the reservation it just made: same effect).
        let want = (r as u64, id);
        let mut link = cust + C_LIST;
        loop {
            let node = tx.load(link)?;
            if node == 0 {
                break;
            }
            let have = (tx.load(node + I_TYPE)?, tx.load(node + I_ID)?);
            if have == want {
                return Ok(false);
            }
            if have > want {
                break;
            }
            link = node + I_NEXT;
        }
        let used = tx.load(row + R_USED)?;
        tx.store(row + R_USED, used + 1)?;
        tx.store(row + R_FREE, free - 1)?;
        let price = tx.load(row + R_PRICE)?;
        let next = tx.load(link)?;
        let info = tx.alloc(32)?.raw();
        tx.store(info + I_TYPE, want.0)?;
        tx.store(info + I_ID, id)?;
        tx.store(info + I_PRICE, price)?;
        tx.store(info + I_NEXT, next)?;
        tx.store(link, info)?;
        Ok(true)
    }

    /// STAMP `manager_deleteCustomer` after `queryCustomerBill`: cancels
    /// every reservation of `cid` and removes it; returns the bill, or
    /// `None` when there is no such customer.
    fn delete_customer(&self, tx: &mut Tx<'_>, cid: u64) -> TxResult<Option<u64>> {
        let Some(cust) = self.customers.get(tx, cid)? else {
            return Ok(None);
        };
        let mut bill = 0u64;
        let mut node = tx.load(cust + C_LIST)?;
        while node != 0 {
            let t = tx.load(node + I_TYPE)?;
            let id = tx.load(node + I_ID)?;
            bill = bill.wrapping_add(tx.load(node + I_PRICE)?);
            let Some(r) = Resource::from_index(t as usize) else {
                return bad();
            };
            // An entry naming a missing item or an unreserved one is the
            // inconsistency STAMP restarts on; here it cannot happen.
            let Some(row) = self.items[r as usize].get(tx, id)? else {
                return bad();
            };
            let used = tx.load(row + R_USED)?;
            if used < 1 {
                return bad();
            }
            tx.store(row + R_USED, used - 1)?;
            let free = tx.load(row + R_FREE)?;
            tx.store(row + R_FREE, free + 1)?;
            let next = tx.load(node + I_NEXT)?;
            tx.free(POff::new(node))?;
            node = next;
        }
        self.customers.remove(tx, cid)?;
        tx.free(POff::new(cust))?;
        Ok(Some(bill))
    }

    /// One client action (STAMP `client_run`'s switch).
    fn run(&self, tx: &mut Tx<'_>, a: &VacationAction) -> TxResult<()> {
        match a.kind {
            ActionKind::MakeReservation => {
                let mut max_price = [-1i64; 3];
                let mut max_id = [0u64; 3];
                let mut found = false;
                for item in &a.items {
                    let t = item.resource as usize;
                    if let Some(row) = self.items[t].get(tx, item.id)? {
                        let price = tx.load(row + R_PRICE)? as i64;
                        if price > max_price[t] {
                            max_price[t] = price;
                            max_id[t] = item.id;
                            found = true;
                        }
                    }
                }
                if found {
                    self.add_customer(tx, a.customer)?;
                }
                for r in Resource::ALL {
                    if max_id[r as usize] > 0 {
                        self.reserve(tx, a.customer, r, max_id[r as usize])?;
                    }
                }
            }
            ActionKind::DeleteCustomer => {
                self.delete_customer(tx, a.customer)?;
            }
            ActionKind::UpdateTables => {
                for item in &a.items {
                    match item.op {
                        ItemOp::Add { price } => {
                            self.add_reservation(
                                tx,
                                item.resource,
                                item.id,
                                UPDATE_UNITS as i64,
                                price as i64,
                            )?;
                        }
                        ItemOp::Remove if item.resource == Resource::Flight => {
                            self.delete_flight(tx, item.id)?;
                        }
                        ItemOp::Remove => {
                            self.add_reservation(
                                tx,
                                item.resource,
                                item.id,
                                -(UPDATE_UNITS as i64),
                                -1,
                            )?;
                        }
                        ItemOp::Query => return bad(),
                    }
                }
            }
        }
        Ok(())
    }
}

/// STAMP Vacation (module docs).
pub struct Vacation {
    high: bool,
    cfg: VacationConfig,
    seed: u64,
}

impl Vacation {
    /// `high`: P3's `-n4 -q60 -u90`; else `-n2 -q90 -u98`.
    pub fn new(high: bool, scale: Scale, seed: u64) -> Vacation {
        let s = match scale {
            Scale::Tiny => VacationScale::Tiny,
            Scale::Quick => VacationScale::Quick,
            Scale::Full => VacationScale::Full,
        };
        let cfg = if high {
            VacationConfig::high(s)
        } else {
            VacationConfig::low(s)
        };
        Vacation { high, cfg, seed }
    }
}

impl PtmWorkload for Vacation {
    fn kind(&self) -> WorkloadKind {
        if self.high {
            WorkloadKind::VacationHigh
        } else {
            WorkloadKind::VacationLow
        }
    }

    fn load(&self, ptm: &Ptm) -> Result<(), PtmError> {
        let root = ptm.root().raw();
        let mut th = ptm.thread()?;
        require_empty_root(&mut th, root)?;
        let trees = th.atomic(|tx| {
            let mut t = [PRbTree::create_in(tx)?; 4];
            for slot in t.iter_mut().skip(1) {
                *slot = PRbTree::create_in(tx)?;
            }
            Ok(t)
        })?;
        let mut rows = Vec::with_capacity(4 * self.cfg.relations as usize);
        load_rows(&self.cfg, self.seed, |r| rows.push(r));
        for chunk in rows.chunks(32) {
            th.atomic(|tx| {
                for r in chunk {
                    let (tree, row) = match r.table {
                        Table::Customer => {
                            let row = tx.alloc(16)?.raw();
                            tx.store(row + C_ID, r.id)?;
                            tx.store(row + C_LIST, 0)?;
                            (trees[3], row)
                        }
                        t => {
                            let Some(res) = t.resource() else {
                                return bad();
                            };
                            let row = tx.alloc(40)?.raw();
                            tx.store(row + R_ID, r.id)?;
                            tx.store(row + R_USED, 0)?;
                            tx.store(row + R_FREE, r.num)?;
                            tx.store(row + R_TOTAL, r.num)?;
                            tx.store(row + R_PRICE, r.price)?;
                            (trees[res as usize], row)
                        }
                    };
                    tree.insert(tx, r.id, row)?;
                }
                Ok(())
            })?;
        }
        th.atomic(|tx| {
            let b = tx.alloc(48)?.raw();
            tx.store(b, VACATION_MAGIC)?;
            for (i, t) in trees.iter().enumerate() {
                tx.store(b + 8 + 8 * i as u64, t.header())?;
            }
            tx.store(b + 40, self.cfg.relations)?;
            tx.store(root, b)
        })
    }

    fn run_one(
        &self,
        th: &mut PtmThread<'_>,
        _thread: usize,
        _threads: usize,
        rng: &mut Rng,
    ) -> Result<(), PtmError> {
        let mut action = VacationAction::default();
        self.cfg.draw_action(rng, &mut action);
        let root = root_of(th);
        th.atomic(|tx| {
            let m = Manager::open(tx, root)?;
            m.run(tx, &action)
        })
    }

    fn check(&self, ptm: &Ptm) -> Result<(), String> {
        let root = ptm.root().raw();
        let mut th = ptm.thread().map_err(ptm_err)?;
        let m = check_result(th.atomic(|tx| Ok(Ok(Manager::open(tx, root)?))))?;
        if m.relations != self.cfg.relations {
            return Err(format!(
                "r = {}, expected {}",
                m.relations, self.cfg.relations
            ));
        }
        // used per (type, id), from the items.
        let mut used: HashMap<(u64, u64), u64> = HashMap::new();
        for r in Resource::ALL {
            let tree = m.items[r as usize];
            tree.check(&mut th)?;
            let entries = tree.collect(&mut th, 1024)?;
            for part in entries.chunks(1024) {
                check_result(th.atomic(|tx| {
                    let mut seen = Vec::with_capacity(part.len());
                    for &(id, row) in part {
                        let (rid, u, f, t) = (
                            tx.load(row + R_ID)?,
                            tx.load(row + R_USED)?,
                            tx.load(row + R_FREE)?,
                            tx.load(row + R_TOTAL)?,
                        );
                        if rid != id || u.checked_add(f) != Some(t) || t == 0 {
                            return Ok(Err(format!(
                                "{r:?} {id}: id {rid}, used {u} + free {f} vs total {t}"
                            )));
                        }
                        seen.push(((r as u64, id), u));
                    }
                    Ok(Ok(seen))
                }))?
                .into_iter()
                .for_each(|(k, u)| {
                    used.insert(k, u);
                });
            }
        }
        m.customers.check(&mut th)?;
        let customers = m.customers.collect(&mut th, 1024)?;
        let mut reserved: HashMap<(u64, u64), u64> = HashMap::new();
        for part in customers.chunks(256) {
            let found = check_result(th.atomic(|tx| {
                let mut found = Vec::new();
                for &(cid, row) in part {
                    if tx.load(row + C_ID)? != cid {
                        return Ok(Err(format!("customer {cid}: row names another")));
                    }
                    let mut prev: Option<(u64, u64)> = None;
                    let mut node = tx.load(row + C_LIST)?;
                    let mut len = 0u64;
                    while node != 0 {
                        let k = (tx.load(node + I_TYPE)?, tx.load(node + I_ID)?);
                        if prev.is_some_and(|p| p >= k) || k.0 > 2 {
                            return Ok(Err(format!("customer {cid}: list unsorted at {k:?}")));
                        }
                        prev = Some(k);
                        len += 1;
                        if len > 3 * m.relations + 3 {
                            return Ok(Err(format!("customer {cid}: list cyclic")));
                        }
                        found.push(k);
                        node = tx.load(node + I_NEXT)?;
                    }
                }
                Ok(Ok(found))
            }))?;
            for k in found {
                *reserved.entry(k).or_default() += 1;
            }
        }
        for (k, n) in &reserved {
            match used.get(k) {
                None => return Err(format!("customers reserve missing item {k:?}")),
                Some(u) if u != n => {
                    return Err(format!("item {k:?}: used {u}, customers hold {n}"));
                }
                _ => {}
            }
        }
        for (k, u) in &used {
            if *u != 0 && !reserved.contains_key(k) {
                return Err(format!("item {k:?}: used {u}, no customer holds it"));
            }
        }
        Ok(())
    }
}
