//! TPC-C (TPC Benchmark C, standard specification revision 5.11) over any
//! ordered [`Kv`]: its nine tables as ordered keys, a loader, the five
//! transactions with the standard mix and input rules, and consistency
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
//! ONE atomic [`Kv::batch`] at the end (a NewOrder rollback issues none).
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

use crate::{BatchOp, Kv};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

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

/// NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y - x + 1)) + x.
#[inline]
fn nurand(rng: &mut ChaCha8Rng, a: u32, x: u32, y: u32, c: u32) -> u32 {
    let r = rng.random_range(0..=a) | rng.random_range(x..=y);
    ((r + c) % (y - x + 1)) + x
}

const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// Random a-string of length min..=max into `field` (zero-padded).
fn astring(rng: &mut ChaCha8Rng, field: &mut [u8], min: usize, max: usize) {
    let max = max.min(field.len());
    let len = rng.random_range(min.min(max)..=max);
    for (k, b) in field.iter_mut().enumerate() {
        *b = if k < len {
            ALNUM[rng.random_range(0..ALNUM.len())]
        } else {
            0
        };
    }
}

/// Random n-string (digits) filling `field`.
fn nstring(rng: &mut ChaCha8Rng, field: &mut [u8]) {
    for b in field {
        *b = b'0' + rng.random_range(0..10u8);
    }
}

/// The TPC-C address block: street_1, street_2, city (10..20), state (2
/// letters), zip (4 random digits + "11111").
fn address(rng: &mut ChaCha8Rng, field: &mut [u8]) {
    astring(rng, &mut field[0..20], 10, 20);
    astring(rng, &mut field[20..40], 10, 20);
    astring(rng, &mut field[40..60], 10, 20);
    for b in &mut field[60..62] {
        *b = b'A' + rng.random_range(0..26u8);
    }
    nstring(rng, &mut field[62..66]);
    field[66..71].copy_from_slice(b"11111");
}

/// A data field of min..=max characters, 10 % containing "ORIGINAL".
fn data_field(rng: &mut ChaCha8Rng, field: &mut [u8], min: usize, max: usize) {
    astring(rng, field, min, max);
    if rng.random_range(0..10) == 0 {
        let len = field.iter().position(|b| *b == 0).unwrap_or(field.len());
        let at = rng.random_range(0..=len - 8);
        field[at..at + 8].copy_from_slice(b"ORIGINAL");
    }
}

const SYLLABLES: [&[u8]; 10] = [
    b"BAR", b"OUGHT", b"ABLE", b"PRI", b"PRES", b"ESE", b"ANTI", b"CALLY", b"ATION", b"EING",
];

/// TPC-C's last name of number `n` (0..=999): three syllables for its
/// three digits, zero-padded to 16 bytes.
pub fn last_name(n: u32) -> [u8; 16] {
    let mut out = [0u8; 16];
    let mut at = 0;
    for digit in [n / 100 % 10, n / 10 % 10, n % 10] {
        let s = SYLLABLES[digit as usize];
        out[at..at + s.len()].copy_from_slice(s);
        at += s.len();
    }
    out
}

// ---------------------------------------------------------------- keys

/// A key under construction (at most 40 bytes: CustomerByName).
#[derive(Clone, Copy)]
struct Key {
    b: [u8; 40],
    n: usize,
}

impl Key {
    fn new(t: Table) -> Key {
        let mut k = Key { b: [0; 40], n: 1 };
        k.b[0] = t as u8;
        k
    }
    fn bytes(mut self, v: &[u8]) -> Key {
        self.b[self.n..self.n + v.len()].copy_from_slice(v);
        self.n += v.len();
        self
    }
    fn u8(self, v: u8) -> Key {
        self.bytes(&[v])
    }
    fn u16(self, v: u16) -> Key {
        self.bytes(&v.to_be_bytes())
    }
    fn u32(self, v: u32) -> Key {
        self.bytes(&v.to_be_bytes())
    }
    fn u64(self, v: u64) -> Key {
        self.bytes(&v.to_be_bytes())
    }
    fn as_slice(&self) -> &[u8] {
        &self.b[..self.n]
    }
}

fn k_warehouse(w: u16) -> Key {
    Key::new(Table::Warehouse).u16(w)
}
fn k_district(w: u16, d: u8) -> Key {
    Key::new(Table::District).u16(w).u8(d)
}
fn k_customer(w: u16, d: u8, c: u32) -> Key {
    Key::new(Table::Customer).u16(w).u8(d).u32(c)
}
fn k_by_name(w: u16, d: u8, last: &[u8]) -> Key {
    Key::new(Table::CustomerByName).u16(w).u8(d).bytes(last)
}
fn k_history(w: u16, seq: u64) -> Key {
    Key::new(Table::History).u16(w).u64(seq)
}
fn k_new_order(w: u16, d: u8, o: u32) -> Key {
    Key::new(Table::NewOrder).u16(w).u8(d).u32(o)
}
fn k_order(w: u16, d: u8, o: u32) -> Key {
    Key::new(Table::Order).u16(w).u8(d).u32(o)
}
fn k_order_by_customer(w: u16, d: u8, c: u32) -> Key {
    Key::new(Table::OrderByCustomer).u16(w).u8(d).u32(c)
}
fn k_order_line(w: u16, d: u8, o: u32) -> Key {
    Key::new(Table::OrderLine).u16(w).u8(d).u32(o)
}
fn k_item(i: u32) -> Key {
    Key::new(Table::Item).u32(i)
}
fn k_stock(w: u16, i: u32) -> Key {
    Key::new(Table::Stock).u16(w).u32(i)
}

// ---------------------------------------------------------------- row access

fn get_u8(r: &[u8], off: usize) -> u8 {
    r[off]
}
fn get_u32(r: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(r[off..off + 4].try_into().unwrap_or_default())
}
fn get_i64(r: &[u8], off: usize) -> i64 {
    i64::from_le_bytes(r[off..off + 8].try_into().unwrap_or_default())
}
fn get_u64(r: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(r[off..off + 8].try_into().unwrap_or_default())
}
fn set_u16(r: &mut [u8], off: usize, v: u16) {
    r[off..off + 2].copy_from_slice(&v.to_le_bytes());
}
fn set_u32(r: &mut [u8], off: usize, v: u32) {
    r[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
fn set_i64(r: &mut [u8], off: usize, v: i64) {
    r[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
fn set_u64(r: &mut [u8], off: usize, v: u64) {
    r[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
fn add_i64(r: &mut [u8], off: usize, v: i64) {
    let x = get_i64(r, off).wrapping_add(v);
    set_i64(r, off, x);
}
fn add_u32(r: &mut [u8], off: usize, v: u32) {
    let x = get_u32(r, off).wrapping_add(v);
    set_u32(r, off, x);
}
fn add_u64(r: &mut [u8], off: usize, v: u64) {
    let x = get_u64(r, off).wrapping_add(v);
    set_u64(r, off, x);
}
/// Fields written as i32 (s_quantity) share the u32 encoding.
fn get_i32(r: &[u8], off: usize) -> i32 {
    get_u32(r, off) as i32
}
fn set_i32(r: &mut [u8], off: usize, v: i32) {
    set_u32(r, off, v as u32)
}

/// Reads a row that must exist and have its table's size.
fn get_row<K: Kv>(
    kv: &mut K,
    table: Table,
    key: &Key,
    out: &mut Vec<u8>,
) -> Result<(), TpccError<K::Error>> {
    if !kv.get(key.as_slice(), out).map_err(TpccError::Kv)? {
        return Err(TpccError::Missing {
            table,
            key: hex(key.as_slice()),
        });
    }
    check_len(table, key.as_slice(), out)
}

fn check_len<E>(table: Table, key: &[u8], row: &[u8]) -> Result<(), TpccError<E>> {
    if row.len() != table.row_size() {
        return Err(TpccError::Corrupt {
            table,
            key: hex(key),
            len: row.len(),
            want: table.row_size(),
        });
    }
    Ok(())
}

/// Calls `f` for every pair whose key starts with `prefix`, from `from`
/// (which must start with `prefix`) on, in key order, `chunk` pairs per
/// [`Kv::scan`] call, until `f` returns false or the prefix ends.
fn scan_prefix<K: Kv>(
    kv: &mut K,
    prefix: &[u8],
    from: &[u8],
    chunk: usize,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<(), K::Error> {
    let mut cursor = from.to_vec();
    loop {
        let mut done = false;
        let mut seen = 0;
        let mut last = Vec::new();
        kv.scan(&cursor, chunk, &mut |k, v| {
            seen += 1;
            if done {
                return;
            }
            if !k.starts_with(prefix) || !f(k, v) {
                done = true;
                return;
            }
            last.clear();
            last.extend_from_slice(k);
        })?;
        if done || seen < chunk {
            return Ok(());
        }
        // The smallest key after `last`.
        cursor.clear();
        cursor.extend_from_slice(&last);
        cursor.push(0);
    }
}

// ---------------------------------------------------------------- batches

/// The writes of one transaction, in one arena, applied by one
/// [`Kv::batch`].
#[derive(Default)]
struct Batch {
    arena: Vec<u8>,
    /// (key start, key len, value start, value len or u32::MAX = delete)
    ops: Vec<(u32, u32, u32, u32)>,
}

impl Batch {
    fn clear(&mut self) {
        self.arena.clear();
        self.ops.clear();
    }
    fn put(&mut self, key: &[u8], value: &[u8]) {
        let k = self.arena.len() as u32;
        self.arena.extend_from_slice(key);
        let v = self.arena.len() as u32;
        self.arena.extend_from_slice(value);
        self.ops.push((k, key.len() as u32, v, value.len() as u32));
    }
    fn delete(&mut self, key: &[u8]) {
        let k = self.arena.len() as u32;
        self.arena.extend_from_slice(key);
        self.ops.push((k, key.len() as u32, 0, u32::MAX));
    }
    fn len(&self) -> usize {
        self.ops.len()
    }
    fn commit<K: Kv>(&self, kv: &mut K) -> Result<(), K::Error> {
        if self.ops.is_empty() {
            return Ok(());
        }
        let a = &self.arena;
        let ops: Vec<BatchOp<'_>> = self
            .ops
            .iter()
            .map(|&(k, kl, v, vl)| {
                let key = &a[k as usize..(k + kl) as usize];
                if vl == u32::MAX {
                    BatchOp::Delete { key }
                } else {
                    BatchOp::Put {
                        key,
                        value: &a[v as usize..(v + vl) as usize],
                    }
                }
            })
            .collect();
        kv.batch(&ops)
    }
}

// ---------------------------------------------------------------- loader

/// Receives the loader's (key, value) records.
pub type RecordSink<'a, E> = dyn FnMut(&[u8], &[u8]) -> Result<(), E> + 'a;

/// Generates the initial database and hands each record to a sink.
/// Each warehouse's records depend only on (config, seed, warehouse), so
/// warehouses may be loaded by different threads in any order.
pub struct TpccLoader {
    cfg: TpccConfig,
    seed: u64,
    consts: Constants,
}

impl TpccLoader {
    pub fn new<E>(cfg: &TpccConfig, seed: u64) -> Result<Self, TpccError<E>> {
        cfg.validate()?;
        Ok(TpccLoader {
            cfg: cfg.clone(),
            seed,
            consts: Constants::from_seed(seed),
        })
    }

    /// The ITEM table (shared by all warehouses; load it once).
    pub fn items<E>(&self, sink: &mut RecordSink<'_, E>) -> Result<u64, E> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(0);
        let mut row = [0u8; i::SIZE];
        for id in 1..=self.cfg.items {
            set_u32(&mut row, i::IM_ID, rng.random_range(1..=10_000));
            set_i64(&mut row, i::PRICE, rng.random_range(100..=10_000));
            astring(&mut rng, &mut row[i::NAME..i::NAME + 24], 14, 24);
            data_field(&mut rng, &mut row[i::DATA..i::DATA + 50], 26, 50);
            sink(k_item(id).as_slice(), &row)?;
        }
        Ok(self.cfg.items as u64)
    }

    /// Every record of warehouse `wid` (1-based): WAREHOUSE, STOCK,
    /// DISTRICT, CUSTOMER (+ by-name index), HISTORY, ORDER (+ by-customer
    /// index), ORDER-LINE, NEW-ORDER, per TPC-C 4.3.3.1.
    pub fn warehouse<E>(&self, wid: u16, sink: &mut RecordSink<'_, E>) -> Result<u64, E> {
        let cfg = &self.cfg;
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(wid as u64);
        let mut n = 0u64;
        let mut put = |k: &[u8], v: &[u8]| -> Result<(), E> {
            n += 1;
            sink(k, v)
        };
        let customers = cfg.customers_per_district;
        // WAREHOUSE
        let mut row = vec![0u8; w::SIZE];
        set_u32(&mut row, w::TAX, rng.random_range(0..=2000));
        // TPC-C's 300 000.00 and 30 000.00 are what the loaded HISTORY
        // sums to (10.00 per customer); derived so conditions 8 and 9
        // hold at every scale (equal to the spec's at standard scale).
        let d_ytd = customers as i64 * 1000;
        set_i64(&mut row, w::YTD, d_ytd * DISTRICTS as i64);
        set_u64(&mut row, w::NEXT_H, DISTRICTS as u64 * customers as u64 + 1);
        astring(&mut rng, &mut row[w::NAME..w::NAME + 10], 6, 10);
        address(&mut rng, &mut row[w::ADDR..w::ADDR + 71]);
        put(k_warehouse(wid).as_slice(), &row)?;
        // STOCK
        let mut row = vec![0u8; s::SIZE];
        for item in 1..=cfg.items {
            set_i32(&mut row, s::QUANTITY, rng.random_range(10..=100));
            for dist in 0..DISTRICTS as usize {
                let at = s::DIST + 24 * dist;
                astring(&mut rng, &mut row[at..at + 24], 24, 24);
            }
            set_u64(&mut row, s::YTD, 0);
            set_u32(&mut row, s::ORDER_CNT, 0);
            set_u32(&mut row, s::REMOTE_CNT, 0);
            data_field(&mut rng, &mut row[s::DATA..s::DATA + 50], 26, 50);
            put(k_stock(wid, item).as_slice(), &row)?;
        }
        let (a_last, _, _) = cfg.nurand_a();
        let names = cfg.last_names();
        let mut seq = 0u64;
        for did in 1..=DISTRICTS {
            // DISTRICT
            let mut row = vec![0u8; d::SIZE];
            set_u32(&mut row, d::TAX, rng.random_range(0..=2000));
            set_i64(&mut row, d::YTD, d_ytd);
            set_u32(&mut row, d::NEXT_O, cfg.orders_per_district + 1);
            astring(&mut rng, &mut row[d::NAME..d::NAME + 10], 6, 10);
            address(&mut rng, &mut row[d::ADDR..d::ADDR + 71]);
            put(k_district(wid, did).as_slice(), &row)?;
            // CUSTOMER, its by-name entry and its HISTORY row
            let mut row = vec![0u8; c::SIZE];
            let mut hist = vec![0u8; h::SIZE];
            for cid in 1..=customers {
                let name_no = if cid <= names {
                    cid - 1
                } else {
                    nurand(&mut rng, a_last, 0, names - 1, self.consts.c_last_load)
                };
                astring(&mut rng, &mut row[c::FIRST..c::FIRST + 16], 8, 16);
                row[c::MIDDLE..c::MIDDLE + 2].copy_from_slice(b"OE");
                row[c::LAST..c::LAST + 16].copy_from_slice(&last_name(name_no));
                address(&mut rng, &mut row[c::ADDR..c::ADDR + 71]);
                nstring(&mut rng, &mut row[c::PHONE..c::PHONE + 16]);
                set_u64(&mut row, c::SINCE, 1);
                let credit: &[u8] = if rng.random_range(0..10) == 0 {
                    b"BC"
                } else {
                    b"GC"
                };
                row[c::CREDIT..c::CREDIT + 2].copy_from_slice(credit);
                set_i64(&mut row, c::CREDIT_LIM, 5_000_000);
                set_u32(&mut row, c::DISCOUNT, rng.random_range(0..=5000));
                set_i64(&mut row, c::BALANCE, -1000);
                set_i64(&mut row, c::YTD_PAYMENT, 1000);
                set_u32(&mut row, c::PAYMENT_CNT, 1);
                set_u32(&mut row, c::DELIVERY_CNT, 0);
                astring(&mut rng, &mut row[c::DATA..c::DATA + c::DATA_LEN], 300, 500);
                put(k_customer(wid, did, cid).as_slice(), &row)?;
                let by_name = k_by_name(wid, did, &row[c::LAST..c::LAST + 16])
                    .bytes(&row[c::FIRST..c::FIRST + 16])
                    .u32(cid);
                put(by_name.as_slice(), &[])?;
                set_u32(&mut hist, h::C_ID, cid);
                hist[h::C_D] = did;
                set_u16(&mut hist, h::C_W, wid);
                hist[h::D] = did;
                set_u16(&mut hist, h::W, wid);
                set_u64(&mut hist, h::DATE, 1);
                set_i64(&mut hist, h::AMOUNT, 1000);
                astring(&mut rng, &mut hist[h::DATA..h::DATA + 24], 12, 24);
                seq += 1;
                put(k_history(wid, seq).as_slice(), &hist)?;
            }
            // ORDER, ORDER-LINE, NEW-ORDER: customers in a random permutation.
            let mut perm: Vec<u32> = (1..=customers).collect();
            for k in (1..perm.len()).rev() {
                let j = rng.random_range(0..=k);
                perm.swap(k, j);
            }
            let delivered = cfg.orders_per_district - cfg.new_orders_per_district;
            let mut orow = [0u8; o::SIZE];
            let mut lrow = [0u8; ol::SIZE];
            for oid in 1..=cfg.orders_per_district {
                let cid = perm[(oid - 1) as usize];
                let is_delivered = oid <= delivered;
                let ol_cnt = rng.random_range(5..=15u8);
                set_u32(&mut orow, o::C_ID, cid);
                set_u64(&mut orow, o::ENTRY_D, 1);
                orow[o::CARRIER] = if is_delivered {
                    rng.random_range(1..=10)
                } else {
                    0
                };
                orow[o::OL_CNT] = ol_cnt;
                orow[o::ALL_LOCAL] = 1;
                put(k_order(wid, did, oid).as_slice(), &orow)?;
                put(k_order_by_customer(wid, did, cid).u32(!oid).as_slice(), &[])?;
                for line in 1..=ol_cnt {
                    set_u32(&mut lrow, ol::I_ID, rng.random_range(1..=cfg.items));
                    set_u16(&mut lrow, ol::SUPPLY_W, wid);
                    set_u64(&mut lrow, ol::DELIVERY_D, u64::from(is_delivered));
                    lrow[ol::QUANTITY] = 5;
                    let amount = if is_delivered {
                        0
                    } else {
                        rng.random_range(1..=999_999)
                    };
                    set_i64(&mut lrow, ol::AMOUNT, amount);
                    astring(
                        &mut rng,
                        &mut lrow[ol::DIST_INFO..ol::DIST_INFO + 24],
                        24,
                        24,
                    );
                    put(k_order_line(wid, did, oid).u8(line).as_slice(), &lrow)?;
                }
                if !is_delivered {
                    put(k_new_order(wid, did, oid).as_slice(), &[])?;
                }
            }
        }
        Ok(n)
    }

    /// Loads the items and every warehouse into `kv`, `batch` records per
    /// atomic batch; returns the record count.
    pub fn load_all<K: Kv>(&self, kv: &mut K, batch: usize) -> Result<u64, TpccError<K::Error>> {
        let mut n = self.load_items_into(kv, batch)?;
        for wid in 1..=self.cfg.warehouses {
            n += self.load_warehouse_into(kv, wid, batch)?;
        }
        Ok(n)
    }

    /// Loads the ITEM table into `kv`.
    pub fn load_items_into<K: Kv>(
        &self,
        kv: &mut K,
        batch: usize,
    ) -> Result<u64, TpccError<K::Error>> {
        let mut b = Batch::default();
        let batch = batch.max(1);
        let n = self.items(&mut |k, v| {
            b.put(k, v);
            if b.len() >= batch {
                b.commit(kv)?;
                b.clear();
            }
            Ok(())
        });
        let n = n.map_err(TpccError::Kv)?;
        b.commit(kv).map_err(TpccError::Kv)?;
        Ok(n)
    }

    /// Loads warehouse `wid` into `kv`.
    pub fn load_warehouse_into<K: Kv>(
        &self,
        kv: &mut K,
        wid: u16,
        batch: usize,
    ) -> Result<u64, TpccError<K::Error>> {
        let mut b = Batch::default();
        let batch = batch.max(1);
        let n = self.warehouse(wid, &mut |k, v| {
            b.put(k, v);
            if b.len() >= batch {
                b.commit(kv)?;
                b.clear();
            }
            Ok(())
        });
        let n = n.map_err(TpccError::Kv)?;
        b.commit(kv).map_err(TpccError::Kv)?;
        Ok(n)
    }
}

// ---------------------------------------------------------------- transactions

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

    fn commit<K: Kv>(
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

// ---------------------------------------------------------------- checks

/// An order as the checks see it.
struct OrderInfo {
    id: u32,
    customer: u32,
    carrier: u8,
    ol_cnt: u8,
}

/// An order line as the checks see it.
struct LineInfo {
    order: u32,
    delivered: bool,
    amount: i64,
}

/// (orders, lines) of one district.
type DistrictOrders = (Vec<OrderInfo>, Vec<LineInfo>);

/// Every order and order line of a district, in o_id order.
fn district_orders<K: Kv>(
    kv: &mut K,
    wid: u16,
    did: u8,
) -> Result<DistrictOrders, TpccError<K::Error>> {
    let mut orders = Vec::new();
    let mut lines = Vec::new();
    let mut bad = None;
    let op = Key::new(Table::Order).u16(wid).u8(did);
    scan_prefix(kv, op.as_slice(), op.as_slice(), 64, &mut |k, v| {
        if v.len() != o::SIZE {
            bad = Some((Table::Order, k.to_vec(), v.len()));
            return false;
        }
        orders.push(OrderInfo {
            id: u32::from_be_bytes(k[k.len() - 4..].try_into().unwrap_or_default()),
            customer: get_u32(v, o::C_ID),
            carrier: get_u8(v, o::CARRIER),
            ol_cnt: get_u8(v, o::OL_CNT),
        });
        true
    })
    .map_err(TpccError::Kv)?;
    let lp = Key::new(Table::OrderLine).u16(wid).u8(did);
    if bad.is_none() {
        scan_prefix(kv, lp.as_slice(), lp.as_slice(), 256, &mut |k, v| {
            if v.len() != ol::SIZE {
                bad = Some((Table::OrderLine, k.to_vec(), v.len()));
                return false;
            }
            lines.push(LineInfo {
                order: u32::from_be_bytes(
                    k[k.len() - 5..k.len() - 1].try_into().unwrap_or_default(),
                ),
                delivered: get_u64(v, ol::DELIVERY_D) != 0,
                amount: get_i64(v, ol::AMOUNT),
            });
            true
        })
        .map_err(TpccError::Kv)?;
    }
    if let Some((table, key, len)) = bad {
        return Err(TpccError::Corrupt {
            table,
            key: hex(&key),
            len,
            want: table.row_size(),
        });
    }
    Ok((orders, lines))
}

/// Σ H_AMOUNT of warehouse `wid`'s HISTORY rows, per h_d_id (index 0 =
/// district 1), and per paying customer (c_w, c_d, c_id) into `per_customer`.
fn history_sums<K: Kv>(
    kv: &mut K,
    wid: u16,
    per_customer: Option<&mut std::collections::HashMap<(u16, u8, u32), i64>>,
) -> Result<[i64; DISTRICTS as usize], TpccError<K::Error>> {
    let mut sums = [0i64; DISTRICTS as usize];
    let mut bad = None;
    let mut per_customer = per_customer;
    let hp = Key::new(Table::History).u16(wid);
    scan_prefix(kv, hp.as_slice(), hp.as_slice(), 256, &mut |k, v| {
        let d = v.get(h::D).copied().unwrap_or(0);
        if v.len() != h::SIZE || d == 0 || d > DISTRICTS {
            bad = Some((k.to_vec(), v.len()));
            return false;
        }
        let amount = get_i64(v, h::AMOUNT);
        sums[d as usize - 1] += amount;
        if let Some(map) = per_customer.as_deref_mut() {
            let c = (
                u16::from_le_bytes([v[h::C_W], v[h::C_W + 1]]),
                v[h::C_D],
                get_u32(v, h::C_ID),
            );
            *map.entry(c).or_default() += amount;
        }
        true
    })
    .map_err(TpccError::Kv)?;
    if let Some((key, len)) = bad {
        return Err(TpccError::Corrupt {
            table: Table::History,
            key: hex(&key),
            len,
            want: h::SIZE,
        });
    }
    Ok(sums)
}

/// TPC-C's consistency conditions 1–9 (clause 3.3.2), for every warehouse
/// and district:
///
/// 1. W_YTD = Σ D_YTD over the warehouse's districts.
/// 2. D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID).
/// 3. max(NO_O_ID) - min(NO_O_ID) + 1 = number of NEW-ORDER rows.
/// 4. Σ O_OL_CNT = number of ORDER-LINE rows.
/// 5. O_CARRIER_ID is null exactly when a NEW-ORDER row exists for the order.
/// 6. O_OL_CNT = number of the order's ORDER-LINE rows.
/// 7. OL_DELIVERY_D is null exactly when the order's O_CARRIER_ID is null.
/// 8. W_YTD = Σ H_AMOUNT of the warehouse's HISTORY.
/// 9. D_YTD = Σ H_AMOUNT of the district's HISTORY.
///
/// Plus (reported as condition 0): every order has its by-customer index
/// entry. All of these read only rows a home-warehouse thread writes, so
/// they hold under any interleaving of terminals with disjoint homes.
/// Reads every order, line and history row: for tests and after quick runs.
pub fn check_consistency<K: Kv>(kv: &mut K, cfg: &TpccConfig) -> Result<(), TpccError<K::Error>> {
    let fail = |condition: u8, detail: String| Err(TpccError::Inconsistent { condition, detail });
    let mut row = Vec::new();
    for wid in 1..=cfg.warehouses {
        get_row(kv, Table::Warehouse, &k_warehouse(wid), &mut row)?;
        let w_ytd = get_i64(&row, w::YTD);
        let h_sums = history_sums(kv, wid, None)?;
        let mut d_sum = 0i64;
        for did in 1..=DISTRICTS {
            let here = format!("warehouse {wid} district {did}");
            get_row(kv, Table::District, &k_district(wid, did), &mut row)?;
            let d_ytd = get_i64(&row, d::YTD);
            d_sum += d_ytd;
            let next_o = get_u32(&row, d::NEXT_O);
            if d_ytd != h_sums[did as usize - 1] {
                return fail(
                    9,
                    format!(
                        "{here}: D_YTD {d_ytd} ≠ Σ H_AMOUNT {}",
                        h_sums[did as usize - 1]
                    ),
                );
            }
            let mut no_ids = Vec::new();
            let np = Key::new(Table::NewOrder).u16(wid).u8(did);
            scan_prefix(kv, np.as_slice(), np.as_slice(), 64, &mut |k, _| {
                no_ids.push(u32::from_be_bytes(
                    k[k.len() - 4..].try_into().unwrap_or_default(),
                ));
                true
            })
            .map_err(TpccError::Kv)?;
            let (orders, lines) = district_orders(kv, wid, did)?;
            let max_o = orders.iter().map(|o| o.id).max().unwrap_or(0);
            if next_o.wrapping_sub(1) != max_o {
                return fail(
                    2,
                    format!(
                        "{here}: D_NEXT_O_ID - 1 = {} but max(O_ID) = {max_o}",
                        next_o.wrapping_sub(1)
                    ),
                );
            }
            if let (Some(&min_no), Some(&max_no)) = (no_ids.first(), no_ids.last()) {
                if max_no != max_o {
                    return fail(
                        2,
                        format!("{here}: max(NO_O_ID) = {max_no}, max(O_ID) = {max_o}"),
                    );
                }
                if (max_no - min_no + 1) as usize != no_ids.len() {
                    return fail(
                        3,
                        format!(
                            "{here}: NO_O_ID {min_no}..={max_no} but {} rows",
                            no_ids.len()
                        ),
                    );
                }
            }
            let sum_ol: u64 = orders.iter().map(|o| o.ol_cnt as u64).sum();
            if sum_ol != lines.len() as u64 {
                return fail(
                    4,
                    format!("{here}: Σ O_OL_CNT = {sum_ol}, {} order lines", lines.len()),
                );
            }
            // Orders and lines are both in o_id order: walk them together.
            let mut li = 0;
            for o in &orders {
                let has_no = no_ids.binary_search(&o.id).is_ok();
                if (o.carrier == 0) != has_no {
                    return fail(
                        5,
                        format!(
                            "{here} order {}: carrier {}, new-order row {has_no}",
                            o.id, o.carrier
                        ),
                    );
                }
                let start = li;
                while li < lines.len() && lines[li].order == o.id {
                    if lines[li].delivered != (o.carrier != 0) {
                        return fail(
                            7,
                            format!(
                                "{here} order {}: carrier {} but a line's delivery date disagrees",
                                o.id, o.carrier
                            ),
                        );
                    }
                    li += 1;
                }
                if li - start != o.ol_cnt as usize {
                    return fail(
                        6,
                        format!(
                            "{here} order {}: O_OL_CNT {}, {} lines",
                            o.id,
                            o.ol_cnt,
                            li - start
                        ),
                    );
                }
                let idx = k_order_by_customer(wid, did, o.customer).u32(!o.id);
                if !kv.get(idx.as_slice(), &mut row).map_err(TpccError::Kv)? {
                    return fail(
                        0,
                        format!("{here} order {}: no by-customer index entry", o.id),
                    );
                }
            }
            if li != lines.len() {
                return fail(6, format!("{here}: order lines of missing orders"));
            }
        }
        if w_ytd != d_sum {
            return fail(
                1,
                format!("warehouse {wid}: W_YTD {w_ytd} ≠ Σ D_YTD {d_sum}"),
            );
        }
        let h_total: i64 = h_sums.iter().sum();
        if w_ytd != h_total {
            return fail(
                8,
                format!("warehouse {wid}: W_YTD {w_ytd} ≠ Σ H_AMOUNT {h_total}"),
            );
        }
    }
    Ok(())
}

/// TPC-C's customer conditions 10 and 12 (clause 3.3.2), for every
/// customer:
///
/// 10. C_BALANCE = Σ OL_AMOUNT of the customer's delivered order lines
///     - Σ H_AMOUNT of the customer's payments.
/// 12. C_BALANCE + C_YTD_PAYMENT = Σ OL_AMOUNT of delivered lines.
///
/// Unlike [`check_consistency`] these read customer rows that remote
/// transactions of other threads also write: they hold after a
/// single-threaded run, or any run with [`TpccConfig::remote`] off, but a
/// concurrent run with remote accesses may lose customer updates (module
/// docs) and fail them.
pub fn check_customers<K: Kv>(kv: &mut K, cfg: &TpccConfig) -> Result<(), TpccError<K::Error>> {
    let mut paid = std::collections::HashMap::new();
    for wid in 1..=cfg.warehouses {
        history_sums(kv, wid, Some(&mut paid))?;
    }
    let mut row = Vec::new();
    for wid in 1..=cfg.warehouses {
        for did in 1..=DISTRICTS {
            let (orders, lines) = district_orders(kv, wid, did)?;
            let mut delivered = vec![0i64; cfg.customers_per_district as usize + 1];
            let mut li = 0;
            for o in &orders {
                while li < lines.len() && lines[li].order == o.id {
                    if lines[li].delivered
                        && let Some(sum) = delivered.get_mut(o.customer as usize)
                    {
                        *sum += lines[li].amount;
                    }
                    li += 1;
                }
            }
            for cid in 1..=cfg.customers_per_district {
                get_row(kv, Table::Customer, &k_customer(wid, did, cid), &mut row)?;
                let balance = get_i64(&row, c::BALANCE);
                let ytd = get_i64(&row, c::YTD_PAYMENT);
                let ol_sum = delivered[cid as usize];
                let h_sum = paid.get(&(wid, did, cid)).copied().unwrap_or(0);
                let who = format!("customer {cid} of warehouse {wid} district {did}");
                if balance != ol_sum - h_sum {
                    return Err(TpccError::Inconsistent {
                        condition: 10,
                        detail: format!(
                            "{who}: C_BALANCE {balance} ≠ {ol_sum} delivered - {h_sum} paid"
                        ),
                    });
                }
                if balance + ytd != ol_sum {
                    return Err(TpccError::Inconsistent {
                        condition: 12,
                        detail: format!(
                            "{who}: C_BALANCE + C_YTD_PAYMENT = {} ≠ {ol_sum} delivered",
                            balance + ytd
                        ),
                    });
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "tpcc_tests.rs"]
mod tests;
