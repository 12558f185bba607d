//! The map keys of every table (module docs, "Keys"): a table byte then
//! big-endian fields, built on the stack.

use super::Table;

/// A key under construction (at most 40 bytes: CustomerByName).
#[derive(Clone, Copy)]
pub(super) struct Key {
    b: [u8; 40],
    n: usize,
}

impl Key {
    pub(super) fn new(t: Table) -> Key {
        let mut k = Key { b: [0; 40], n: 1 };
        k.b[0] = t as u8;
        k
    }
    pub(super) fn bytes(mut self, v: &[u8]) -> Key {
        self.b[self.n..self.n + v.len()].copy_from_slice(v);
        self.n += v.len();
        self
    }
    pub(super) fn u8(self, v: u8) -> Key {
        self.bytes(&[v])
    }
    pub(super) fn u16(self, v: u16) -> Key {
        self.bytes(&v.to_be_bytes())
    }
    pub(super) fn u32(self, v: u32) -> Key {
        self.bytes(&v.to_be_bytes())
    }
    fn u64(self, v: u64) -> Key {
        self.bytes(&v.to_be_bytes())
    }
    pub(super) fn as_slice(&self) -> &[u8] {
        &self.b[..self.n]
    }
}

pub(super) fn k_warehouse(w: u16) -> Key {
    Key::new(Table::Warehouse).u16(w)
}
pub(super) fn k_district(w: u16, d: u8) -> Key {
    Key::new(Table::District).u16(w).u8(d)
}
pub(super) fn k_customer(w: u16, d: u8, c: u32) -> Key {
    Key::new(Table::Customer).u16(w).u8(d).u32(c)
}
pub(super) fn k_by_name(w: u16, d: u8, last: &[u8]) -> Key {
    Key::new(Table::CustomerByName).u16(w).u8(d).bytes(last)
}
pub(super) fn k_history(w: u16, seq: u64) -> Key {
    Key::new(Table::History).u16(w).u64(seq)
}
pub(super) fn k_new_order(w: u16, d: u8, o: u32) -> Key {
    Key::new(Table::NewOrder).u16(w).u8(d).u32(o)
}
pub(super) fn k_order(w: u16, d: u8, o: u32) -> Key {
    Key::new(Table::Order).u16(w).u8(d).u32(o)
}
pub(super) fn k_order_by_customer(w: u16, d: u8, c: u32) -> Key {
    Key::new(Table::OrderByCustomer).u16(w).u8(d).u32(c)
}
pub(super) fn k_order_line(w: u16, d: u8, o: u32) -> Key {
    Key::new(Table::OrderLine).u16(w).u8(d).u32(o)
}
pub(super) fn k_item(i: u32) -> Key {
    Key::new(Table::Item).u32(i)
}
pub(super) fn k_stock(w: u16, i: u32) -> Key {
    Key::new(Table::Stock).u16(w).u32(i)
}
