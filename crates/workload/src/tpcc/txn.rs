//! The five transactions (TPC-C 2.4-2.8) run by a [`Terminal`].

use super::{
    Batch, Constants, DISTRICTS, Key, Table, TpccConfig, TpccError, add_i64, add_u32, add_u64, c,
    check_len, d, get_i32, get_i64, get_row, get_u32, get_u64, h, hex, i, k_by_name, k_customer,
    k_district, k_history, k_item, k_new_order, k_order, k_order_by_customer, k_order_line,
    k_stock, k_warehouse, last_name, nurand, o, ol, s, scan_prefix, set_i32, set_i64, set_u16,
    set_u32, set_u64, w,
};
use crate::Kv;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The five transaction types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TxnKind {
    NewOrder,
    Payment,
    OrderStatus,
    Delivery,
    StockLevel,
}

impl TxnKind {
    pub const ALL: [TxnKind; 5] = [
        TxnKind::NewOrder,
        TxnKind::Payment,
        TxnKind::OrderStatus,
        TxnKind::Delivery,
        TxnKind::StockLevel,
    ];
}

/// What one transaction did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnOutcome {
    pub kind: TxnKind,
    /// False for NewOrder's 1 % rollback (nothing written).
    pub committed: bool,
    /// Writes in its batch (0 for read-only and rolled back transactions).
    pub writes: usize,
    /// Rows read (gets plus scanned pairs used).
    pub reads: usize,
}

/// One TPC-C terminal: draws transactions with the standard mix (45 %
/// NewOrder, 43 % Payment, 4 % each OrderStatus, Delivery, StockLevel) and
/// TPC-C's input rules (2.4.1, 2.5.1, 2.6.1, 2.7.1, 2.8.1), and executes
/// them against any [`Kv`]. Its stream of transaction inputs depends only
/// on (config, seed, thread, threads).
pub struct Terminal {
    cfg: TpccConfig,
    consts: Constants,
    rng: ChaCha8Rng,
    homes: Vec<u16>,
    clock: u64,
    batch: Batch,
    row: Vec<u8>,
    row2: Vec<u8>,
    ids: Vec<u32>,
    lines: Vec<Line>,
}

#[derive(Clone, Copy, Debug)]
struct Line {
    item: u32,
    supply_w: u16,
    qty: u8,
}

impl Terminal {
    /// Terminal of thread `thread` of `threads`; it owns the warehouses w
    /// with (w-1) % threads == thread, and needs at least one.
    pub fn new<E>(
        cfg: &TpccConfig,
        seed: u64,
        thread: u32,
        threads: u32,
    ) -> Result<Self, TpccError<E>> {
        cfg.validate()?;
        let threads = threads.max(1);
        let homes: Vec<u16> = (1..=cfg.warehouses)
            .filter(|w| (*w as u32 - 1) % threads == thread)
            .collect();
        if homes.is_empty() {
            return Err(TpccError::Config(format!(
                "thread {thread} of {threads} owns no warehouse ({} warehouses)",
                cfg.warehouses
            )));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7465_726d_696e_616c);
        rng.set_stream(thread as u64);
        Ok(Terminal {
            cfg: cfg.clone(),
            consts: Constants::from_seed(seed),
            rng,
            homes,
            clock: 1,
            batch: Batch::default(),
            row: Vec::with_capacity(c::SIZE),
            row2: Vec::with_capacity(c::SIZE),
            ids: Vec::new(),
            lines: Vec::with_capacity(15),
        })
    }

    /// The warehouses this terminal owns.
    pub fn homes(&self) -> &[u16] {
        &self.homes
    }

    /// Draws the next transaction type from the standard mix.
    pub fn next_kind(&mut self) -> TxnKind {
        match self.rng.random_range(0..1000u32) {
            0..450 => TxnKind::NewOrder,
            450..880 => TxnKind::Payment,
            880..920 => TxnKind::OrderStatus,
            920..960 => TxnKind::Delivery,
            _ => TxnKind::StockLevel,
        }
    }

    /// Draws and executes one transaction.
    pub fn run<K: Kv>(&mut self, kv: &mut K) -> Result<TxnOutcome, TpccError<K::Error>> {
        let kind = self.next_kind();
        self.run_kind(kv, kind)
    }

    /// Executes one transaction of type `kind` with freshly drawn inputs.
    pub fn run_kind<K: Kv>(
        &mut self,
        kv: &mut K,
        kind: TxnKind,
    ) -> Result<TxnOutcome, TpccError<K::Error>> {
        self.clock += 1;
        self.batch.clear();
        let home = self.homes[self.rng.random_range(0..self.homes.len())];
        match kind {
            TxnKind::NewOrder => self.new_order(kv, home),
            TxnKind::Payment => self.payment(kv, home),
            TxnKind::OrderStatus => self.order_status(kv, home),
            TxnKind::Delivery => self.delivery(kv, home),
            TxnKind::StockLevel => self.stock_level(kv, home),
        }
    }

    fn other_warehouse(&mut self, home: u16) -> u16 {
        if self.cfg.warehouses == 1 || !self.cfg.remote {
            return home;
        }
        let r = self.rng.random_range(1..self.cfg.warehouses);
        if r >= home { r + 1 } else { r }
    }

    /// Customer selection of Payment and OrderStatus: 60 % by last name
    /// (NURand(255, 0, 999) with the run-time C), else by id
    /// (NURand(1023, 1, 3000)). Returns the name number or the id.
    fn draw_customer(&mut self) -> CustomerSel {
        let (a_last, a_cid, _) = self.cfg.nurand_a();
        if self.rng.random_range(1..=100) <= 60 {
            let n = nurand(
                &mut self.rng,
                a_last,
                0,
                self.cfg.last_names() - 1,
                self.consts.c_last_run,
            );
            CustomerSel::Name(n)
        } else {
            CustomerSel::Id(nurand(
                &mut self.rng,
                a_cid,
                1,
                self.cfg.customers_per_district,
                self.consts.c_id,
            ))
        }
    }

    /// Resolves a customer selection: by name, the customer at position
    /// ⌈n/2⌉ of those with that last name sorted by first name (2.5.2.2).
    fn resolve_customer<K: Kv>(
        &mut self,
        kv: &mut K,
        w: u16,
        d: u8,
        sel: CustomerSel,
        reads: &mut usize,
    ) -> Result<u32, TpccError<K::Error>> {
        match sel {
            CustomerSel::Id(c) => Ok(c),
            CustomerSel::Name(n) => {
                let name = last_name(n);
                let prefix = k_by_name(w, d, &name);
                self.ids.clear();
                let ids = &mut self.ids;
                scan_prefix(kv, prefix.as_slice(), prefix.as_slice(), 8, &mut |k, _| {
                    let c = u32::from_be_bytes(k[k.len() - 4..].try_into().unwrap_or_default());
                    ids.push(c);
                    true
                })
                .map_err(TpccError::Kv)?;
                *reads += ids.len();
                if ids.is_empty() {
                    return Err(TpccError::Missing {
                        table: Table::CustomerByName,
                        key: hex(prefix.as_slice()),
                    });
                }
                Ok(ids[(ids.len() - 1) / 2])
            }
        }
    }

    /// New-Order (2.4): read W, D (advance D_NEXT_O_ID), C; per line read
    /// ITEM and STOCK, update STOCK, insert ORDER-LINE; insert ORDER,
    /// NEW-ORDER (and the by-customer index). 1 % roll back on an unused
    /// item id: nothing is written. Duplicate items within one order are
    /// redrawn (one stock row is updated once per transaction).
    fn new_order<K: Kv>(&mut self, kv: &mut K, w: u16) -> Result<TxnOutcome, TpccError<K::Error>> {
        let (_, a_cid, a_item) = self.cfg.nurand_a();
        let d = self.rng.random_range(1..=DISTRICTS);
        let cid = nurand(
            &mut self.rng,
            a_cid,
            1,
            self.cfg.customers_per_district,
            self.consts.c_id,
        );
        let ol_cnt = self.rng.random_range(5..=15u8);
        let rollback = self.rng.random_range(1..=100) == 1;
        self.lines.clear();
        let mut all_local = true;
        for n in 0..ol_cnt {
            let item = if rollback && n == ol_cnt - 1 {
                self.cfg.items + 1 // unused item id
            } else {
                loop {
                    let it = nurand(
                        &mut self.rng,
                        a_item,
                        1,
                        self.cfg.items,
                        self.consts.ol_i_id,
                    );
                    if !self.lines.iter().any(|l| l.item == it) {
                        break it;
                    }
                }
            };
            let supply_w = if self.rng.random_range(1..=100) > 1 {
                w
            } else {
                self.other_warehouse(w)
            };
            all_local &= supply_w == w;
            let qty = self.rng.random_range(1..=10u8);
            self.lines.push(Line {
                item,
                supply_w,
                qty,
            });
        }
        let mut reads = 0;
        // Taken out of `self` so the batch can be filled while it is
        // borrowed; put back at the end (an error just drops the buffer).
        let mut row = std::mem::take(&mut self.row);
        {
            get_row(kv, Table::Warehouse, &k_warehouse(w), &mut row)?;
            let w_tax = get_u32(&row, w::TAX);
            let dk = k_district(w, d);
            get_row(kv, Table::District, &dk, &mut row)?;
            let d_tax = get_u32(&row, d::TAX);
            let oid = get_u32(&row, d::NEXT_O);
            set_u32(&mut row, d::NEXT_O, oid + 1);
            self.batch.put(dk.as_slice(), &row);
            get_row(kv, Table::Customer, &k_customer(w, d, cid), &mut row)?;
            let discount = get_u32(&row, c::DISCOUNT);
            reads += 3;
            let mut orow = [0u8; o::SIZE];
            set_u32(&mut orow, o::C_ID, cid);
            set_u64(&mut orow, o::ENTRY_D, self.clock);
            orow[o::OL_CNT] = ol_cnt;
            orow[o::ALL_LOCAL] = u8::from(all_local);
            self.batch.put(k_order(w, d, oid).as_slice(), &orow);
            self.batch.put(k_new_order(w, d, oid).as_slice(), &[]);
            self.batch
                .put(k_order_by_customer(w, d, cid).u32(!oid).as_slice(), &[]);
            let mut total: i64 = 0;
            for (n, line) in self.lines.iter().enumerate() {
                let ik = k_item(line.item);
                if !kv.get(ik.as_slice(), &mut row).map_err(TpccError::Kv)? {
                    // Rollback: the batch is dropped unapplied.
                    self.batch.clear();
                    self.row = row;
                    return Ok(TxnOutcome {
                        kind: TxnKind::NewOrder,
                        committed: false,
                        writes: 0,
                        reads,
                    });
                }
                check_len(Table::Item, ik.as_slice(), &row)?;
                let price = get_i64(&row, i::PRICE);
                let sk = k_stock(line.supply_w, line.item);
                get_row(kv, Table::Stock, &sk, &mut row)?;
                reads += 2;
                let q = get_i32(&row, s::QUANTITY);
                let qty = line.qty as i32;
                let new_q = if q >= qty + 10 { q - qty } else { q - qty + 91 };
                set_i32(&mut row, s::QUANTITY, new_q);
                add_u64(&mut row, s::YTD, line.qty as u64);
                add_u32(&mut row, s::ORDER_CNT, 1);
                if line.supply_w != w {
                    add_u32(&mut row, s::REMOTE_CNT, 1);
                }
                self.batch.put(sk.as_slice(), &row);
                let amount = line.qty as i64 * price;
                total += amount;
                let mut lrow = [0u8; ol::SIZE];
                set_u32(&mut lrow, ol::I_ID, line.item);
                set_u16(&mut lrow, ol::SUPPLY_W, line.supply_w);
                lrow[ol::QUANTITY] = line.qty;
                set_i64(&mut lrow, ol::AMOUNT, amount);
                let dist = s::DIST + 24 * (d as usize - 1);
                lrow[ol::DIST_INFO..ol::DIST_INFO + 24].copy_from_slice(&row[dist..dist + 24]);
                self.batch
                    .put(k_order_line(w, d, oid).u8(n as u8 + 1).as_slice(), &lrow);
            }
            // total · (1 - discount) · (1 + w_tax + d_tax), computed as the
            // terminal would display it.
            let t = total as i128
                * (10_000 - discount as i128)
                * (10_000 + w_tax as i128 + d_tax as i128);
            std::hint::black_box(t);
        }
        self.row = row;
        self.commit(kv, TxnKind::NewOrder, reads)
    }

    pub(super) fn commit<K: Kv>(
        &mut self,
        kv: &mut K,
        kind: TxnKind,
        reads: usize,
    ) -> Result<TxnOutcome, TpccError<K::Error>> {
        self.batch.commit(kv).map_err(TpccError::Kv)?;
        let writes = self.batch.len();
        self.batch.clear();
        Ok(TxnOutcome {
            kind,
            committed: true,
            writes,
            reads,
        })
    }

    /// Payment (2.5): W_YTD and D_YTD += amount; customer (85 % home
    /// district, else a remote warehouse's) balance -= amount, ytd and
    /// count up, BC customers get the payment prepended to C_DATA (500 B
    /// kept); insert HISTORY.
    fn payment<K: Kv>(&mut self, kv: &mut K, w: u16) -> Result<TxnOutcome, TpccError<K::Error>> {
        let d = self.rng.random_range(1..=DISTRICTS);
        let (cw, cd) =
            if self.rng.random_range(1..=100) <= 85 || self.cfg.warehouses == 1 || !self.cfg.remote
            {
                (w, d)
            } else {
                let cd = self.rng.random_range(1..=DISTRICTS);
                (self.other_warehouse(w), cd)
            };
        let sel = self.draw_customer();
        let amount: i64 = self.rng.random_range(100..=500_000);
        let mut reads = 0;
        let cid = self.resolve_customer(kv, cw, cd, sel, &mut reads)?;
        let mut row = std::mem::take(&mut self.row);
        let mut row2 = std::mem::take(&mut self.row2);
        {
            let wk = k_warehouse(w);
            get_row(kv, Table::Warehouse, &wk, &mut row)?;
            add_i64(&mut row, w::YTD, amount);
            let seq = get_u64(&row, w::NEXT_H);
            set_u64(&mut row, w::NEXT_H, seq + 1);
            self.batch.put(wk.as_slice(), &row);
            let mut hdata = [0u8; 24];
            let wname = &row[w::NAME..w::NAME + 10];
            let wlen = wname.iter().position(|b| *b == 0).unwrap_or(10);
            hdata[..wlen].copy_from_slice(&wname[..wlen]);
            hdata[wlen..wlen + 4].copy_from_slice(b"    ");
            let dk = k_district(w, d);
            get_row(kv, Table::District, &dk, &mut row)?;
            add_i64(&mut row, d::YTD, amount);
            self.batch.put(dk.as_slice(), &row);
            let dname = &row[d::NAME..d::NAME + 10];
            let dlen = dname.iter().position(|b| *b == 0).unwrap_or(10);
            hdata[wlen + 4..wlen + 4 + dlen].copy_from_slice(&dname[..dlen]);
            reads += 2;
            let ck = k_customer(cw, cd, cid);
            get_row(kv, Table::Customer, &ck, &mut row2)?;
            reads += 1;
            add_i64(&mut row2, c::BALANCE, -amount);
            add_i64(&mut row2, c::YTD_PAYMENT, amount);
            add_u32(&mut row2, c::PAYMENT_CNT, 1);
            if &row2[c::CREDIT..c::CREDIT + 2] == b"BC" {
                let entry = format!("{cid} {cd} {cw} {d} {w} {amount}|");
                let data = &mut row2[c::DATA..c::DATA + c::DATA_LEN];
                let keep = c::DATA_LEN.saturating_sub(entry.len());
                data.copy_within(0..keep, entry.len().min(c::DATA_LEN));
                let e = entry.len().min(c::DATA_LEN);
                data[..e].copy_from_slice(&entry.as_bytes()[..e]);
            }
            self.batch.put(ck.as_slice(), &row2);
            let mut hrow = [0u8; h::SIZE];
            set_u32(&mut hrow, h::C_ID, cid);
            hrow[h::C_D] = cd;
            set_u16(&mut hrow, h::C_W, cw);
            hrow[h::D] = d;
            set_u16(&mut hrow, h::W, w);
            set_u64(&mut hrow, h::DATE, self.clock);
            set_i64(&mut hrow, h::AMOUNT, amount);
            hrow[h::DATA..h::DATA + 24].copy_from_slice(&hdata);
            self.batch.put(k_history(w, seq).as_slice(), &hrow);
        }
        self.row = row;
        self.row2 = row2;
        self.commit(kv, TxnKind::Payment, reads)
    }

    /// Order-Status (2.6), read-only: the customer, their newest order
    /// (via the by-customer index) and its order lines.
    fn order_status<K: Kv>(
        &mut self,
        kv: &mut K,
        w: u16,
    ) -> Result<TxnOutcome, TpccError<K::Error>> {
        let d = self.rng.random_range(1..=DISTRICTS);
        let sel = self.draw_customer();
        let mut reads = 0;
        let cid = self.resolve_customer(kv, w, d, sel, &mut reads)?;
        let mut row = std::mem::take(&mut self.row);
        'txn: {
            get_row(kv, Table::Customer, &k_customer(w, d, cid), &mut row)?;
            std::hint::black_box(get_i64(&row, c::BALANCE));
            reads += 1;
            let prefix = k_order_by_customer(w, d, cid);
            let mut newest = None;
            scan_prefix(kv, prefix.as_slice(), prefix.as_slice(), 1, &mut |k, _| {
                newest = Some(!u32::from_be_bytes(
                    k[k.len() - 4..].try_into().unwrap_or_default(),
                ));
                false
            })
            .map_err(TpccError::Kv)?;
            let Some(oid) = newest else {
                // A customer without orders (only when the configuration
                // loads fewer orders than customers).
                break 'txn;
            };
            get_row(kv, Table::Order, &k_order(w, d, oid), &mut row)?;
            let ol_cnt = row[o::OL_CNT] as usize;
            reads += 2;
            let lp = k_order_line(w, d, oid);
            let mut lines = 0usize;
            let mut sum = 0i64;
            scan_prefix(
                kv,
                lp.as_slice(),
                lp.as_slice(),
                ol_cnt.max(1),
                &mut |_, v| {
                    if v.len() == ol::SIZE {
                        sum += get_i64(v, ol::AMOUNT);
                    }
                    lines += 1;
                    true
                },
            )
            .map_err(TpccError::Kv)?;
            std::hint::black_box(sum);
            reads += lines;
        }
        self.row = row;
        Ok(TxnOutcome {
            kind: TxnKind::OrderStatus,
            committed: true,
            writes: 0,
            reads,
        })
    }

    /// Delivery (2.7): for each district, the oldest NEW-ORDER is deleted,
    /// its ORDER gets the carrier, its lines the delivery date, and the
    /// customer's balance grows by the lines' total and delivery count by
    /// one — all ten districts in one batch. Districts with no undelivered
    /// order are skipped.
    fn delivery<K: Kv>(&mut self, kv: &mut K, w: u16) -> Result<TxnOutcome, TpccError<K::Error>> {
        let carrier = self.rng.random_range(1..=10u8);
        let mut reads = 0;
        let mut row = std::mem::take(&mut self.row);
        let clock = self.clock;
        let batch = &mut self.batch;
        {
            for d in 1..=DISTRICTS {
                let np = Key::new(Table::NewOrder).u16(w).u8(d);
                let mut oldest = None;
                scan_prefix(kv, np.as_slice(), np.as_slice(), 1, &mut |k, _| {
                    oldest = Some(u32::from_be_bytes(
                        k[k.len() - 4..].try_into().unwrap_or_default(),
                    ));
                    false
                })
                .map_err(TpccError::Kv)?;
                let Some(oid) = oldest else { continue };
                batch.delete(k_new_order(w, d, oid).as_slice());
                let ok = k_order(w, d, oid);
                get_row(kv, Table::Order, &ok, &mut row)?;
                let cid = get_u32(&row, o::C_ID);
                let ol_cnt = row[o::OL_CNT] as usize;
                row[o::CARRIER] = carrier;
                batch.put(ok.as_slice(), &row);
                reads += 2;
                let lp = k_order_line(w, d, oid);
                let mut total = 0i64;
                let mut bad = None;
                scan_prefix(
                    kv,
                    lp.as_slice(),
                    lp.as_slice(),
                    ol_cnt.max(1),
                    &mut |k, v| {
                        if v.len() != ol::SIZE {
                            bad = Some((k.to_vec(), v.len()));
                            return false;
                        }
                        total += get_i64(v, ol::AMOUNT);
                        let mut line = [0u8; ol::SIZE];
                        line.copy_from_slice(v);
                        set_u64(&mut line, ol::DELIVERY_D, clock);
                        batch.put(k, &line);
                        reads += 1;
                        true
                    },
                )
                .map_err(TpccError::Kv)?;
                if let Some((k, len)) = bad {
                    return Err(TpccError::Corrupt {
                        table: Table::OrderLine,
                        key: hex(&k),
                        len,
                        want: ol::SIZE,
                    });
                }
                let ck = k_customer(w, d, cid);
                get_row(kv, Table::Customer, &ck, &mut row)?;
                reads += 1;
                add_i64(&mut row, c::BALANCE, total);
                add_u32(&mut row, c::DELIVERY_CNT, 1);
                batch.put(ck.as_slice(), &row);
            }
        }
        self.row = row;
        self.commit(kv, TxnKind::Delivery, reads)
    }

    /// Stock-Level (2.8), read-only: the distinct items of the district's
    /// last 20 orders whose home-warehouse stock is below a threshold drawn
    /// in 10..=20.
    fn stock_level<K: Kv>(
        &mut self,
        kv: &mut K,
        w: u16,
    ) -> Result<TxnOutcome, TpccError<K::Error>> {
        let d = self.rng.random_range(1..=DISTRICTS);
        let threshold = self.rng.random_range(10..=20i32);
        let mut reads = 0;
        let mut row = std::mem::take(&mut self.row);
        let ids = &mut self.ids;
        {
            get_row(kv, Table::District, &k_district(w, d), &mut row)?;
            reads += 1;
            let next = get_u32(&row, d::NEXT_O);
            let first = next.saturating_sub(20).max(1);
            ids.clear();
            let prefix = Key::new(Table::OrderLine).u16(w).u8(d);
            let from = k_order_line(w, d, first);
            scan_prefix(kv, prefix.as_slice(), from.as_slice(), 32, &mut |k, v| {
                let o =
                    u32::from_be_bytes(k[k.len() - 5..k.len() - 1].try_into().unwrap_or_default());
                if o >= next {
                    return false;
                }
                if v.len() == ol::SIZE {
                    ids.push(get_u32(v, ol::I_ID));
                }
                true
            })
            .map_err(TpccError::Kv)?;
            reads += ids.len();
            ids.sort_unstable();
            ids.dedup();
            let mut low = 0;
            for &item in ids.iter() {
                get_row(kv, Table::Stock, &k_stock(w, item), &mut row)?;
                if get_i32(&row, s::QUANTITY) < threshold {
                    low += 1;
                }
            }
            reads += ids.len();
            std::hint::black_box(low);
        }
        self.row = row;
        Ok(TxnOutcome {
            kind: TxnKind::StockLevel,
            committed: true,
            writes: 0,
            reads,
        })
    }
}

#[derive(Clone, Copy, Debug)]
enum CustomerSel {
    Name(u32),
    Id(u32),
}
