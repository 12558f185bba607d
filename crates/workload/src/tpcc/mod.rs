//! TPC-C (TPC Benchmark C, standard specification revision 5.11) over any
//! ordered [`Kv`](crate::Kv): its nine tables as ordered keys, a loader, the
//! five transactions with the standard mix and input rules, and consistency
//! checks. P2 runs TPC-C on every engine (reading notes A7.4, P2 Table 2).
//!
//! ## Keys
//! Every key is one table prefix byte ([`Table`]) followed by the table's
//! primary key, big-endian so that byte order is key order:
//!
//! | table | key after the prefix byte | value |
//! |---|---|---|
//! | Warehouse (1) | w u16 | [`w`] row |
//! | District (2) | w u16, d u8 | [`d`] row |
//! | Customer (3) | w u16, d u8, c u32 | [`c`] row |
//! | CustomerByName (4) | w u16, d u8, c_last 16 B, c_first 16 B, c u32 | empty |
//! | History (5) | w u16, seq u64 | [`h`] row |
//! | NewOrder (6) | w u16, d u8, o u32 | empty |
//! | Order (7) | w u16, d u8, o u32 | [`o`] row |
//! | OrderByCustomer (8) | w u16, d u8, c u32, !o u32 (newest first) | empty |
//! | OrderLine (9) | w u16, d u8, o u32, ol u8 | [`ol`] row |
//! | Item (10) | i u32 | [`i`] row |
//! | Stock (11) | w u16, i u32 | [`s`] row |
//!
//! CustomerByName and OrderByCustomer are the secondary indexes TPC-C's
//! by-last-name lookups and Order-Status need; they are written in the same
//! batch as the rows they index. TPC-C's History has no primary key; its
//! key here is (home warehouse, sequence), the sequence kept in the
//! warehouse row (`w::NEXT_H`) and advanced in the Payment's batch, so keys
//! never repeat, across restarts too.
//!
//! ## Rows
//! Fixed layouts, numbers little-endian at the byte offsets the modules
//! [`w`], [`d`], [`c`], [`h`], [`o`], [`ol`], [`i`], [`s`] give. Money is
//! in cents (i64), tax and discount rates in 1/10000 (u32), text fields are
//! fixed width, zero-padded. Dates are a logical clock (1 at load, then one
//! tick per transaction of a terminal) so runs are reproducible. A row
//! whose length is not its table's size is a typed [`TpccError::Corrupt`].
//!
//! ## Transactions and concurrency
//! Each transaction does its reads with `get`/`scan` and all its writes in
//! ONE atomic [`Kv::batch`](crate::Kv::batch) at the end (a NewOrder
//! rollback issues none).
//! Terminals ([`Terminal`]) are meant to run one per thread with disjoint
//! home warehouses (thread t of T owns warehouses w with (w-1) % T = t).
//! A transaction's reads are NOT isolated from other threads' batches:
//! only the home warehouse's rows are written by one thread alone. Remote
//! accesses — NewOrder's 1 % remote stock lines, Payment's 15 % remote
//! customers — read-modify-write rows another thread may be writing, so
//! under concurrency such a stock quantity or customer balance can lose an
//! update. [`check_consistency`] (TPC-C conditions 1–9) only reads rows
//! written by their home thread (warehouse, district, history, order,
//! new-order, order-line), so it holds under any interleaving;
//! [`check_customers`] (conditions 10 and 12) holds after one thread, or
//! with [`TpccConfig::remote`] = false, which removes remote accesses.
//!
//! ## Scale
//! [`TpccConfig::standard`] has TPC-C's cardinalities (10 districts per
//! warehouse, 100 000 items, 3000 customers and 3000 orders per district,
//! the last 900 undelivered). [`TpccConfig::quick`] keeps 10 districts and
//! the mix but loads 2000 items, 100 customers and 100 orders per district
//! (30 undelivered): per warehouse about 17 000 records instead of 560 000
//! (1/30 of the records and bytes), for tests and quick runs.
//! NURand's A constants scale with the ranges (they equal TPC-C's at
//! standard scale; [`TpccConfig::nurand_a`]).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

mod access;
mod check;
mod fields;
mod keys;
mod load;
mod txn;
use access::{
    Batch, add_i64, add_u32, add_u64, check_len, get_i32, get_i64, get_row, get_u8, get_u32,
    get_u64, scan_prefix, set_i32, set_i64, set_u16, set_u32, set_u64,
};
pub use check::{check_consistency, check_customers};
pub use fields::last_name;
use fields::{address, astring, data_field, nstring, nurand};
use keys::{
    Key, k_by_name, k_customer, k_district, k_history, k_item, k_new_order, k_order,
    k_order_by_customer, k_order_line, k_stock, k_warehouse,
};
pub use load::{RecordSink, TpccLoader};
pub use txn::{Terminal, TxnKind, TxnOutcome};

/// Districts per warehouse (TPC-C's fixed 10).
pub const DISTRICTS: u8 = 10;

/// Table prefix bytes (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Table {
    Warehouse = 1,
    District = 2,
    Customer = 3,
    CustomerByName = 4,
    History = 5,
    NewOrder = 6,
    Order = 7,
    OrderByCustomer = 8,
    OrderLine = 9,
    Item = 10,
    Stock = 11,
}

impl Table {
    /// Row size of the table's values.
    pub const fn row_size(self) -> usize {
        match self {
            Table::Warehouse => w::SIZE,
            Table::District => d::SIZE,
            Table::Customer => c::SIZE,
            Table::History => h::SIZE,
            Table::Order => o::SIZE,
            Table::OrderLine => ol::SIZE,
            Table::Item => i::SIZE,
            Table::Stock => s::SIZE,
            Table::CustomerByName | Table::NewOrder | Table::OrderByCustomer => 0,
        }
    }
}

/// Warehouse row: 101 bytes.
pub mod w {
    /// w_tax, u32, 1/10000.
    pub const TAX: usize = 0;
    /// w_ytd, i64 cents.
    pub const YTD: usize = 4;
    /// Next History sequence of this warehouse, u64 (Ferrite's History key).
    pub const NEXT_H: usize = 12;
    /// w_name, 10 B.
    pub const NAME: usize = 20;
    /// w_street_1 20, w_street_2 20, w_city 20, w_state 2, w_zip 9: 71 B.
    pub const ADDR: usize = 30;
    pub const SIZE: usize = 101;
}

/// District row: 97 bytes.
pub mod d {
    /// d_tax, u32, 1/10000.
    pub const TAX: usize = 0;
    /// d_ytd, i64 cents.
    pub const YTD: usize = 4;
    /// d_next_o_id, u32.
    pub const NEXT_O: usize = 12;
    /// d_name, 10 B.
    pub const NAME: usize = 16;
    /// Address, 71 B as in [`super::w::ADDR`].
    pub const ADDR: usize = 26;
    pub const SIZE: usize = 97;
}

/// Customer row: 667 bytes.
pub mod c {
    /// c_first, 16 B.
    pub const FIRST: usize = 0;
    /// c_middle, 2 B ("OE").
    pub const MIDDLE: usize = 16;
    /// c_last, 16 B.
    pub const LAST: usize = 18;
    /// Address, 71 B.
    pub const ADDR: usize = 34;
    /// c_phone, 16 B.
    pub const PHONE: usize = 105;
    /// c_since, u64 logical date.
    pub const SINCE: usize = 121;
    /// c_credit, 2 B: "GC" or "BC".
    pub const CREDIT: usize = 129;
    /// c_credit_lim, i64 cents.
    pub const CREDIT_LIM: usize = 131;
    /// c_discount, u32, 1/10000.
    pub const DISCOUNT: usize = 139;
    /// c_balance, i64 cents.
    pub const BALANCE: usize = 143;
    /// c_ytd_payment, i64 cents.
    pub const YTD_PAYMENT: usize = 151;
    /// c_payment_cnt, u32.
    pub const PAYMENT_CNT: usize = 159;
    /// c_delivery_cnt, u32.
    pub const DELIVERY_CNT: usize = 163;
    /// c_data, 500 B.
    pub const DATA: usize = 167;
    pub const DATA_LEN: usize = 500;
    pub const SIZE: usize = 667;
}

/// History row: 50 bytes.
pub mod h {
    /// h_c_id u32.
    pub const C_ID: usize = 0;
    /// h_c_d_id u8.
    pub const C_D: usize = 4;
    /// h_c_w_id u16.
    pub const C_W: usize = 5;
    /// h_d_id u8.
    pub const D: usize = 7;
    /// h_w_id u16.
    pub const W: usize = 8;
    /// h_date u64.
    pub const DATE: usize = 10;
    /// h_amount i64 cents.
    pub const AMOUNT: usize = 18;
    /// h_data, 24 B.
    pub const DATA: usize = 26;
    pub const SIZE: usize = 50;
}

/// Order row: 15 bytes.
pub mod o {
    /// o_c_id u32.
    pub const C_ID: usize = 0;
    /// o_entry_d u64.
    pub const ENTRY_D: usize = 4;
    /// o_carrier_id u8, 0 = null.
    pub const CARRIER: usize = 12;
    /// o_ol_cnt u8.
    pub const OL_CNT: usize = 13;
    /// o_all_local u8.
    pub const ALL_LOCAL: usize = 14;
    pub const SIZE: usize = 15;
}

/// Order-line row: 47 bytes.
pub mod ol {
    /// ol_i_id u32.
    pub const I_ID: usize = 0;
    /// ol_supply_w_id u16.
    pub const SUPPLY_W: usize = 4;
    /// ol_delivery_d u64, 0 = null.
    pub const DELIVERY_D: usize = 6;
    /// ol_quantity u8.
    pub const QUANTITY: usize = 14;
    /// ol_amount i64 cents.
    pub const AMOUNT: usize = 15;
    /// ol_dist_info, 24 B.
    pub const DIST_INFO: usize = 23;
    pub const SIZE: usize = 47;
}

/// Item row: 86 bytes.
pub mod i {
    /// i_im_id u32.
    pub const IM_ID: usize = 0;
    /// i_price i64 cents.
    pub const PRICE: usize = 4;
    /// i_name, 24 B.
    pub const NAME: usize = 12;
    /// i_data, 50 B.
    pub const DATA: usize = 36;
    pub const SIZE: usize = 86;
}

/// Stock row: 310 bytes.
pub mod s {
    /// s_quantity i32.
    pub const QUANTITY: usize = 0;
    /// s_dist_01 … s_dist_10, 10 × 24 B.
    pub const DIST: usize = 4;
    /// s_ytd u64.
    pub const YTD: usize = 244;
    /// s_order_cnt u32.
    pub const ORDER_CNT: usize = 252;
    /// s_remote_cnt u32.
    pub const REMOTE_CNT: usize = 256;
    /// s_data, 50 B.
    pub const DATA: usize = 260;
    pub const SIZE: usize = 310;
}

/// Everything a TPC-C transaction, load or check can fail with.
#[derive(Debug, thiserror::Error)]
pub enum TpccError<E> {
    #[error("store: {0}")]
    Kv(E),
    #[error("{table:?} row {key} is missing")]
    Missing { table: Table, key: String },
    #[error("{table:?} row {key} is {len} bytes, not {want}")]
    Corrupt {
        table: Table,
        key: String,
        len: usize,
        want: usize,
    },
    #[error("bad TPC-C configuration: {0}")]
    Config(String),
    #[error("consistency condition {condition} fails: {detail}")]
    Inconsistent { condition: u8, detail: String },
}

fn hex(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// Cardinalities (module docs, "Scale").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TpccConfig {
    pub warehouses: u16,
    pub items: u32,
    pub customers_per_district: u32,
    /// Orders loaded per district (at most `customers_per_district`: each
    /// order goes to a distinct customer, as TPC-C's permutation does).
    pub orders_per_district: u32,
    /// The last this many loaded orders are undelivered (NEW-ORDER rows).
    pub new_orders_per_district: u32,
    /// Remote accesses on (TPC-C's 1 % remote order lines, 15 % remote
    /// payments) when there is more than one warehouse.
    pub remote: bool,
}

impl TpccConfig {
    /// TPC-C's cardinalities for `warehouses` warehouses.
    pub fn standard(warehouses: u16) -> Self {
        TpccConfig {
            warehouses,
            items: 100_000,
            customers_per_district: 3000,
            orders_per_district: 3000,
            new_orders_per_district: 900,
            remote: true,
        }
    }

    /// The scaled-down configuration (module docs).
    pub fn quick(warehouses: u16) -> Self {
        TpccConfig {
            warehouses,
            items: 2000,
            customers_per_district: 100,
            orders_per_district: 100,
            new_orders_per_district: 30,
            remote: true,
        }
    }

    /// Parses `tpcc[:OPTION]*`: `quick` (scaled-down cardinalities, 2
    /// warehouses unless `w=` says otherwise), `w=N` / `warehouses=N`,
    /// `local` (no remote accesses). Plain `tpcc` is TPC-C's cardinalities
    /// with P2's 8 warehouses (reading notes A7.4).
    pub fn parse(name: &str) -> Result<TpccConfig, crate::WorkloadError> {
        let mut parts = name.split(':');
        if parts.next() != Some("tpcc") {
            return Err(crate::WorkloadError::Unknown(name.to_string()));
        }
        let mut quick = false;
        let mut warehouses = None;
        let mut remote = true;
        for opt in parts {
            let bad = |why: &str| crate::WorkloadError::BadValue {
                workload: name.to_string(),
                option: opt.to_string(),
                why: why.to_string(),
            };
            match opt.split_once('=') {
                None if opt == "quick" => quick = true,
                None if opt == "standard" => quick = false,
                None if opt == "local" => remote = false,
                Some(("w" | "warehouses", n)) => {
                    warehouses = Some(
                        n.parse::<u16>()
                            .ok()
                            .filter(|n| *n > 0)
                            .ok_or_else(|| bad("need 1 to 65535 warehouses"))?,
                    );
                }
                _ => {
                    return Err(crate::WorkloadError::UnknownOption {
                        workload: name.to_string(),
                        option: opt.to_string(),
                    });
                }
            }
        }
        let mut cfg = if quick {
            TpccConfig::quick(warehouses.unwrap_or(2))
        } else {
            TpccConfig::standard(warehouses.unwrap_or(8))
        };
        cfg.remote = remote;
        Ok(cfg)
    }

    fn validate<E>(&self) -> Result<(), TpccError<E>> {
        let bad = |s: &str| Err(TpccError::Config(s.to_string()));
        if self.warehouses == 0 {
            return bad("need at least one warehouse");
        }
        if self.items < 2 || self.customers_per_district == 0 {
            return bad("need at least 2 items and 1 customer per district");
        }
        if self.orders_per_district > self.customers_per_district {
            return bad("more orders than customers per district");
        }
        if self.new_orders_per_district > self.orders_per_district {
            return bad("more undelivered orders than orders");
        }
        Ok(())
    }

    /// Number of distinct last names: TPC-C's 1000, or the customer count
    /// when smaller (so every name exists in every district).
    pub fn last_names(&self) -> u32 {
        self.customers_per_district.min(1000)
    }

    /// NURand's A for the three ranges: (c_last, c_id, ol_i_id). TPC-C
    /// fixes 255, 1023 and 8191 for 1000 names, 3000 customers and 100 000
    /// items; for other ranges the next 2^k - 1 at or above range/4,
    /// range/3 and range/16, which gives exactly those constants at
    /// standard scale.
    pub fn nurand_a(&self) -> (u32, u32, u32) {
        let a = |n: u32, div: u32| (n / div).max(1).next_power_of_two() - 1;
        (
            a(self.last_names(), 4),
            a(self.customers_per_district, 3),
            a(self.items, 16),
        )
    }
}

/// NURand's run-time C constants (TPC-C 2.1.6), drawn from the seed: the
/// load and run C for c_last differ by a delta in 65..=119, not 96 or 112
/// (2.1.6.1).
#[derive(Clone, Copy, Debug)]
struct Constants {
    c_last_load: u32,
    c_last_run: u32,
    c_id: u32,
    ol_i_id: u32,
}

impl Constants {
    fn from_seed(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7470_6363_636f_6e73);
        let c_last_load = rng.random_range(0..=255u32);
        let delta = loop {
            let d = rng.random_range(65..=119u32);
            if d != 96 && d != 112 {
                break d;
            }
        };
        Constants {
            c_last_load,
            c_last_run: (c_last_load + delta) % 256,
            c_id: rng.random_range(0..=1023),
            ol_i_id: rng.random_range(0..=8191),
        }
    }
}

#[cfg(test)]
mod tests;
