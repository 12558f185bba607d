//! P3's TPC-C: New-Order only, one warehouse, tables in one index — a
//! [`PHashMap`] (`tpcc-hash`) or a [`PBTree`] (`tpcc-bptree`) — with rows as
//! blocks (reading notes B5). Inputs from
//! [`ferrite_workload::neworder`]. No orders exist at load (every
//! district's `d_next_o_id` starts at 1): the run's New-Orders are the only
//! orders, so the check can account for every one.
//!
//! ## Keys (one index for all tables)
//! `table << 60 | w << 52 | d << 44 | rest`, with `rest` = `c` (customer),
//! `i` (item; w = d = 0), `i` (stock; d = 0), `o` (order, new-order), or
//! `o << 8 | ol_number` (order line). Tables: 1 warehouse, 2 district,
//! 3 customer, 4 item, 5 stock, 6 order, 7 new-order, 8 order line.
//!
//! ## Persistent layout
//! Workload root block, 48 bytes:
//! ```text
//! +0  magic = TPCC_HASH_MAGIC ("WLTPCCHA") or TPCC_TREE_MAGIC ("WLTPCCBT")
//! +8  offset of the index header
//! +16 districts   +24 customers per district   +32 items   +40 warehouses (1)
//! ```
//! Row blocks (each word a little-endian u64; money in cents, rates in
//! basis points):
//! ```text
//! warehouse  16 B: +0 w_tax, +8 w_ytd
//! district   64 B: +0 d_tax, +8 d_next_o_id, +16 d_ytd, rest 0
//!                  (64 B so two districts never share a cache line)
//! customer   24 B: +0 c_discount, +8 c_balance, +16 c_credit (0 good, 1 bad)
//! item       16 B: +0 i_price, +8 i_im_id
//! stock      32 B: +0 s_quantity, +8 s_ytd, +16 s_order_cnt, +24 s_remote_cnt
//! order      32 B: +0 o_c_id, +8 o_entry_d (the order's sequence: o_id),
//!                  +16 o_ol_cnt, +24 o_all_local (1)
//! new-order   —    the index value is o_id itself
//! order line 32 B: +0 ol_i_id, +8 ol_supply_w_id, +16 ol_quantity,
//!                  +24 ol_amount (= ol_quantity × i_price)
//! ```
//! New-Order (TPC-C 2.4.2 without the 1 % rollback, as P3 runs it): read the
//! warehouse's tax, read and increment the district's `d_next_o_id`, read
//! the customer's discount, insert the order and the new-order, and for each
//! line read the item's price, update the stock (quantity down by the order
//! quantity, refilled by 91 if it would fall below 10; `s_ytd` up,
//! `s_order_cnt` up) and insert the order line.

use super::{
    BPTREE_FANOUT, PtmWorkload, Rng, Scale, WorkloadKind, ptm_err, require_empty_root, root_block,
    root_of,
};
use crate::ds::bptree::PBTree;
use crate::ds::hash::PHashMap;
use crate::ds::{CORRUPT, check_result};
use crate::{Abort, Ptm, PtmError, PtmThread, Tx, TxResult};
use ferrite_workload::neworder::{NewOrderConfig, NewOrderScale};
use rand::{Rng as _, SeedableRng};

/// "WLTPCCHA".
pub const TPCC_HASH_MAGIC: u64 = u64::from_le_bytes(*b"WLTPCCHA");
/// "WLTPCCBT".
pub const TPCC_TREE_MAGIC: u64 = u64::from_le_bytes(*b"WLTPCCBT");

const T_WAREHOUSE: u64 = 1;
const T_DISTRICT: u64 = 2;
const T_CUSTOMER: u64 = 3;
const T_ITEM: u64 = 4;
const T_STOCK: u64 = 5;
const T_ORDER: u64 = 6;
const T_NEW_ORDER: u64 = 7;
const T_ORDER_LINE: u64 = 8;

fn key(table: u64, w: u64, d: u64, rest: u64) -> u64 {
    table << 60 | w << 52 | d << 44 | rest
}

/// Which index holds the tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TpccIndexKind {
    /// [`crate::ds::hash::PHashMap`].
    Hash,
    /// [`crate::ds::bptree::PBTree`].
    Bptree,
}

/// An opened index.
#[derive(Clone, Copy)]
enum Index {
    Hash(PHashMap),
    Tree(PBTree),
}

impl Index {
    fn open(tx: &mut Tx<'_>, kind: TpccIndexKind, hdr: u64) -> TxResult<Index> {
        Ok(match kind {
            TpccIndexKind::Hash => Index::Hash(PHashMap::open(tx, hdr)?),
            TpccIndexKind::Bptree => Index::Tree(PBTree::open(tx, hdr)?),
        })
    }
    fn header(&self) -> u64 {
        match self {
            Index::Hash(m) => m.header(),
            Index::Tree(t) => t.header(),
        }
    }
    fn get(&self, tx: &mut Tx<'_>, k: u64) -> TxResult<Option<u64>> {
        match self {
            Index::Hash(m) => m.get(tx, k),
            Index::Tree(t) => t.get(tx, k),
        }
    }
    /// The row of `k`, which must exist.
    fn row(&self, tx: &mut Tx<'_>, k: u64) -> TxResult<u64> {
        match self.get(tx, k)? {
            Some(r) if r != 0 => Ok(r),
            _ => Err(Abort::User(CORRUPT)),
        }
    }
    fn insert(&self, tx: &mut Tx<'_>, k: u64, v: u64) -> TxResult<()> {
        let old = match self {
            Index::Hash(m) => m.insert(tx, k, v)?,
            Index::Tree(t) => t.insert(tx, k, v)?,
        };
        // Orders and lines are new keys; a repeat means the district counter
        // went backwards.
        if old.is_some() {
            return Err(Abort::User(CORRUPT));
        }
        Ok(())
    }
    fn check(&self, th: &mut PtmThread<'_>) -> Result<u64, String> {
        match self {
            Index::Hash(m) => m.check(th),
            Index::Tree(t) => t.check(th),
        }
    }
}

/// P3's New-Order TPC-C (module docs).
pub struct TpccNewOrder {
    index: TpccIndexKind,
    cfg: NewOrderConfig,
    scale: Scale,
    seed: u64,
}

impl TpccNewOrder {
    /// The workload on `index` at `scale` (warehouses and items), its random choices from `seed`.
    pub fn new(index: TpccIndexKind, scale: Scale, seed: u64) -> TpccNewOrder {
        let s = match scale {
            Scale::Tiny => NewOrderScale::Tiny,
            Scale::Quick => NewOrderScale::Quick,
            Scale::Full => NewOrderScale::P3,
        };
        TpccNewOrder {
            index,
            cfg: NewOrderConfig::new(s),
            scale,
            seed,
        }
    }

    fn magic(&self) -> u64 {
        match self.index {
            TpccIndexKind::Hash => TPCC_HASH_MAGIC,
            TpccIndexKind::Bptree => TPCC_TREE_MAGIC,
        }
    }

    /// The index, for a transaction of the run (the dimensions were
    /// checked by [`TpccNewOrder::open_checked`] in `check`).
    fn open(&self, tx: &mut Tx<'_>, root: u64) -> TxResult<Index> {
        let block = root_block(tx, root, self.magic())?;
        let hdr = tx.load(block + 8)?;
        Index::open(tx, self.index, hdr)
    }

    /// The index, after checking the root block's dimensions against the
    /// configuration.
    fn open_checked(&self, tx: &mut Tx<'_>, root: u64) -> TxResult<Index> {
        let block = root_block(tx, root, self.magic())?;
        let hdr = tx.load(block + 8)?;
        let index = Index::open(tx, self.index, hdr)?;
        let dims = [
            tx.load(block + 16)?,
            tx.load(block + 24)?,
            tx.load(block + 32)?,
            tx.load(block + 40)?,
        ];
        let c = &self.cfg;
        if dims
            != [
                c.districts as u64,
                c.customers_per_district as u64,
                c.items as u64,
                c.warehouses as u64,
            ]
        {
            return Err(Abort::User(CORRUPT));
        }
        Ok(index)
    }

    fn initial_rows(&self) -> u64 {
        let c = &self.cfg;
        let w = c.warehouses as u64;
        w + w * c.districts as u64 * (1 + c.customers_per_district as u64)
            + c.items as u64
            + w * c.items as u64
    }
}

impl PtmWorkload for TpccNewOrder {
    fn kind(&self) -> WorkloadKind {
        match self.index {
            TpccIndexKind::Hash => WorkloadKind::TpccHash,
            TpccIndexKind::Bptree => WorkloadKind::TpccBptree,
        }
    }

    fn load(&self, ptm: &Ptm) -> Result<(), PtmError> {
        let root = ptm.root().raw();
        let mut th = ptm.thread()?;
        require_empty_root(&mut th, root)?;
        let index = match self.index {
            // The map does not grow: room for the orders a run adds (about
            // 5 rows per New-Order; 2^21 buckets keep chains short for some
            // 400 000 New-Orders) so that a New-Order does not slow down
            // with the run's length. Tiny scale (crash checks) stays small.
            TpccIndexKind::Hash => Index::Hash(PHashMap::create(
                &mut th,
                if self.scale == Scale::Tiny {
                    (8 * self.initial_rows()).max(1024)
                } else {
                    (8 * self.initial_rows()).max(1 << 21)
                },
            )?),
            TpccIndexKind::Bptree => {
                Index::Tree(th.atomic(|tx| PBTree::create_in(tx, BPTREE_FANOUT))?)
            }
        };
        let c = self.cfg;
        let mut rng = Rng::seed_from_u64(self.seed);
        // (key, row words) for every loaded row, inserted 128 per transaction.
        let mut rows: Vec<(u64, usize, [u64; 4])> = Vec::new();
        for w in 1..=c.warehouses as u64 {
            rows.push((
                key(T_WAREHOUSE, w, 0, 0),
                16,
                [rng.random_range(0..=2000), 0, 0, 0],
            ));
            for d in 1..=c.districts as u64 {
                rows.push((
                    key(T_DISTRICT, w, d, 0),
                    64,
                    [rng.random_range(0..=2000), 1, 0, 0],
                ));
                for cid in 1..=c.customers_per_district as u64 {
                    let credit = u64::from(rng.random_range(0..10u32) == 0);
                    rows.push((
                        key(T_CUSTOMER, w, d, cid),
                        24,
                        [rng.random_range(0..=5000), 0, credit, 0],
                    ));
                }
            }
        }
        for i in 1..=c.items as u64 {
            rows.push((
                key(T_ITEM, 0, 0, i),
                16,
                [
                    rng.random_range(100..=10_000),
                    rng.random_range(1..=10_000),
                    0,
                    0,
                ],
            ));
        }
        for w in 1..=c.warehouses as u64 {
            for i in 1..=c.items as u64 {
                rows.push((
                    key(T_STOCK, w, 0, i),
                    32,
                    [rng.random_range(10..=100), 0, 0, 0],
                ));
            }
        }
        for chunk in rows.chunks(32) {
            th.atomic(|tx| {
                for &(k, bytes, words) in chunk {
                    let row = tx.alloc_zeroed(bytes)?.raw();
                    for (j, &v) in words.iter().enumerate().take(bytes / 8) {
                        if v != 0 {
                            tx.store(row + 8 * j as u64, v)?;
                        }
                    }
                    index.insert(tx, k, row)?;
                }
                Ok(())
            })?;
        }
        th.atomic(|tx| {
            let block = tx.alloc(48)?.raw();
            tx.store(block, self.magic())?;
            tx.store(block + 8, index.header())?;
            tx.store(block + 16, c.districts as u64)?;
            tx.store(block + 24, c.customers_per_district as u64)?;
            tx.store(block + 32, c.items as u64)?;
            tx.store(block + 40, c.warehouses as u64)?;
            tx.store(root, block)
        })
    }

    fn run_one(
        &self,
        th: &mut PtmThread<'_>,
        _thread: usize,
        _threads: usize,
        rng: &mut Rng,
    ) -> Result<(), PtmError> {
        let input = self.cfg.draw(rng);
        let root = root_of(th);
        th.atomic(|tx| {
            let index = self.open(tx, root)?;
            let (w, d, cid) = (input.w_id as u64, input.d_id as u64, input.c_id as u64);
            let wrow = index.row(tx, key(T_WAREHOUSE, w, 0, 0))?;
            let w_tax = tx.load(wrow)?;
            let drow = index.row(tx, key(T_DISTRICT, w, d, 0))?;
            let d_tax = tx.load(drow)?;
            let o_id = tx.load(drow + 8)?;
            if o_id == 0 || o_id >= 1 << 36 {
                return Err(Abort::User(CORRUPT));
            }
            tx.store(drow + 8, o_id + 1)?;
            let crow = index.row(tx, key(T_CUSTOMER, w, d, cid))?;
            let c_discount = tx.load(crow)?;
            let lines = input.lines();
            let order = tx.alloc(32)?.raw();
            tx.store(order, cid)?;
            tx.store(order + 8, o_id)?;
            tx.store(order + 16, lines.len() as u64)?;
            tx.store(order + 24, 1)?;
            index.insert(tx, key(T_ORDER, w, d, o_id), order)?;
            index.insert(tx, key(T_NEW_ORDER, w, d, o_id), o_id)?;
            let mut total = 0u64;
            for (n, line) in lines.iter().enumerate() {
                let (i, qty) = (line.i_id as u64, line.quantity as u64);
                let irow = index.row(tx, key(T_ITEM, 0, 0, i))?;
                let price = tx.load(irow)?;
                let srow = index.row(tx, key(T_STOCK, w, 0, i))?;
                let q = tx.load(srow)?;
                let q2 = if q >= qty + 10 { q - qty } else { q + 91 - qty };
                tx.store(srow, q2)?;
                let ytd = tx.load(srow + 8)?;
                tx.store(srow + 8, ytd + qty)?;
                let cnt = tx.load(srow + 16)?;
                tx.store(srow + 16, cnt + 1)?;
                let amount = qty * price;
                total += amount;
                let ol = tx.alloc(32)?.raw();
                tx.store(ol, i)?;
                tx.store(ol + 8, w)?;
                tx.store(ol + 16, qty)?;
                tx.store(ol + 24, amount)?;
                index.insert(tx, key(T_ORDER_LINE, w, d, o_id << 8 | (n as u64 + 1)), ol)?;
            }
            // TPC-C's total: sum × (1 − discount) × (1 + w_tax + d_tax); the
            // terminal would display it. Kept so the reads are used.
            let _total = total * (10_000 - c_discount.min(10_000)) / 10_000
                * (10_000 + w_tax + d_tax)
                / 10_000;
            Ok(())
        })
    }

    fn check(&self, ptm: &Ptm) -> Result<(), String> {
        let root = ptm.root().raw();
        let mut th = ptm.thread().map_err(ptm_err)?;
        let index = check_result(th.atomic(|tx| Ok(Ok(self.open_checked(tx, root)?))))?;
        let entries = index.check(&mut th)?;
        let c = self.cfg;
        let mut orders = 0u64;
        let mut lines = 0u64;
        // Per item: (quantity ordered, order lines) from the order lines.
        let mut per_item = vec![(0u64, 0u64); c.items as usize + 1];
        for w in 1..=c.warehouses as u64 {
            for d in 1..=c.districts as u64 {
                let next = check_result(th.atomic(|tx| {
                    let drow = index.row(tx, key(T_DISTRICT, w, d, 0))?;
                    Ok(Ok(tx.load(drow + 8)?))
                }))?;
                if next == 0 {
                    return Err(format!("district {d}: d_next_o_id 0"));
                }
                // Orders 1..next exist, with their new-orders and lines; order
                // `next` does not.
                let mut o = 1;
                while o <= next {
                    let end = (o + 255).min(next);
                    let mut found = Vec::new();
                    check_result(th.atomic(|tx| {
                        found.clear();
                        for o_id in o..=end {
                            let order = index.get(tx, key(T_ORDER, w, d, o_id))?;
                            if o_id == next {
                                if order.is_some() {
                                    return Ok(Err(format!(
                                        "district {d}: order {o_id} = d_next_o_id exists"
                                    )));
                                }
                                break;
                            }
                            let Some(order) = order else {
                                return Ok(Err(format!("district {d}: order {o_id} missing")));
                            };
                            if index.get(tx, key(T_NEW_ORDER, w, d, o_id))? != Some(o_id) {
                                return Ok(Err(format!("district {d}: new-order {o_id} missing")));
                            }
                            let cid = tx.load(order)?;
                            let cnt = tx.load(order + 16)?;
                            if !(1..=c.customers_per_district as u64).contains(&cid)
                                || !(c.min_lines as u64..=c.max_lines as u64).contains(&cnt)
                                || tx.load(order + 8)? != o_id
                            {
                                return Ok(Err(format!("district {d}: order {o_id} malformed")));
                            }
                            for n in 1..=cnt + 1 {
                                let ol = index.get(tx, key(T_ORDER_LINE, w, d, o_id << 8 | n))?;
                                match ol {
                                    None if n <= cnt => {
                                        return Ok(Err(format!(
                                            "district {d}: order {o_id} line {n} missing"
                                        )));
                                    }
                                    Some(_) if n > cnt => {
                                        return Ok(Err(format!(
                                            "district {d}: order {o_id} has line {n} > o_ol_cnt"
                                        )));
                                    }
                                    None => {}
                                    Some(ol) => {
                                        let i = tx.load(ol)?;
                                        let qty = tx.load(ol + 16)?;
                                        let amount = tx.load(ol + 24)?;
                                        if !(1..=c.items as u64).contains(&i)
                                            || !(1..=c.max_quantity as u64).contains(&qty)
                                        {
                                            return Ok(Err(format!(
                                                "order {o_id} line {n}: item {i} qty {qty}"
                                            )));
                                        }
                                        let irow = index.row(tx, key(T_ITEM, 0, 0, i))?;
                                        if amount != qty * tx.load(irow)? {
                                            return Ok(Err(format!(
                                                "order {o_id} line {n}: amount {amount}"
                                            )));
                                        }
                                        found.push((i, qty));
                                    }
                                }
                            }
                        }
                        Ok(Ok(()))
                    }))?;
                    for &(i, qty) in &found {
                        per_item[i as usize].0 += qty;
                        per_item[i as usize].1 += 1;
                    }
                    lines += found.len() as u64;
                    o = end + 1;
                }
                orders += next - 1;
            }
        }
        // Stock agrees with the order lines.
        let mut i = 1u64;
        while i <= c.items as u64 {
            let end = (i + 1023).min(c.items as u64);
            check_result(th.atomic(|tx| {
                for item in i..=end {
                    let srow = index.row(tx, key(T_STOCK, 1, 0, item))?;
                    let q = tx.load(srow)?;
                    let (ytd, cnt) = (tx.load(srow + 8)?, tx.load(srow + 16)?);
                    if !(10..=100).contains(&q) {
                        return Ok(Err(format!("stock {item}: quantity {q}")));
                    }
                    if (ytd, cnt) != per_item[item as usize] {
                        return Ok(Err(format!(
                            "stock {item}: s_ytd {ytd}, s_order_cnt {cnt}; lines say {:?}",
                            per_item[item as usize]
                        )));
                    }
                }
                Ok(Ok(()))
            }))?;
            i = end + 1;
        }
        let want = self.initial_rows() + 2 * orders + lines;
        if entries != want {
            return Err(format!(
                "index holds {entries} entries; loaded rows + orders + new-orders + lines = {want}"
            ));
        }
        Ok(())
    }
}
