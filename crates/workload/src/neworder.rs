//! P3's TPC-C: the write-only, New-Order-only TPC-C of DudeTM that P3 runs
//! over a hash table and over a B+tree (reading notes B5). One warehouse,
//! 10 districts, 3 000 customers per district, 100 000 items; each order has
//! 2–4 order lines with quantities 1–10; every transaction is a New-Order.
//! (The full TPC-C over a [`crate::Kv`] is [`crate::tpcc`]; this module
//! only draws New-Order inputs for systems that hold the tables
//! themselves, such as the PTM's.)
//!
//! ## Inputs
//! District uniform in `1..=districts`; customer and items uniform in
//! `1..=customers_per_district` and `1..=items` (P3's description names no
//! skew; [`IdDist::NuRand`] gives TPC-C's NURand(1023) and NURand(8191)
//! with A scaled to the ranges like [`crate::TpccConfig::nurand_a`] and a
//! fixed C); line count uniform in `2..=4`; the items of one order are
//! distinct (so an order never locks one stock row twice); quantity
//! uniform in `1..=10`.
//!
//! ## Scale
//! [`NewOrderScale::P3`] is P3's sizes; `Quick` keeps the 1 warehouse and 10
//! districts with 300 customers per district and 10 000 items; `Tiny` (crash
//! checks) 2 districts, 8 customers, 32 items.
//!
//! ## Threads
//! [`NewOrderGenerator::new`] gives thread `t` its own ChaCha stream of the
//! seed (stream `t`), like [`crate::Generator`].

use crate::WorkloadError;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Most order lines a New-Order of this workload has.
pub const MAX_LINES: usize = 4;

/// How customer and item ids are drawn (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdDist {
    Uniform,
    NuRand,
}

/// Sizes (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewOrderScale {
    Tiny,
    Quick,
    P3,
}

/// P3's TPC-C cardinalities and input rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewOrderConfig {
    pub warehouses: u32,
    pub districts: u32,
    pub customers_per_district: u32,
    pub items: u32,
    pub min_lines: u32,
    pub max_lines: u32,
    pub max_quantity: u32,
    pub dist: IdDist,
}

impl NewOrderConfig {
    /// The configuration of `scale` (module docs), uniform ids.
    pub fn new(scale: NewOrderScale) -> NewOrderConfig {
        let (districts, customers_per_district, items) = match scale {
            NewOrderScale::Tiny => (2, 8, 32),
            NewOrderScale::Quick => (10, 300, 10_000),
            NewOrderScale::P3 => (10, 3000, 100_000),
        };
        NewOrderConfig {
            warehouses: 1,
            districts,
            customers_per_district,
            items,
            min_lines: 2,
            max_lines: MAX_LINES as u32,
            max_quantity: 10,
            dist: IdDist::Uniform,
        }
    }

    /// Checks the ranges: every count ≥ 1, `1 ≤ min_lines ≤ max_lines ≤
    /// MAX_LINES`, and at least `max_lines` items (lines use distinct items).
    pub fn validate(&self) -> Result<(), String> {
        if self.warehouses == 0
            || self.districts == 0
            || self.customers_per_district == 0
            || self.max_quantity == 0
        {
            return Err("warehouses, districts, customers and quantity must be ≥ 1".into());
        }
        if self.min_lines == 0
            || self.min_lines > self.max_lines
            || self.max_lines as usize > MAX_LINES
        {
            return Err(format!(
                "order lines must satisfy 1 ≤ min ≤ max ≤ {MAX_LINES}"
            ));
        }
        if self.items < self.max_lines {
            return Err("fewer items than order lines".into());
        }
        Ok(())
    }

    /// NURand's A for (customer, item) ranges: TPC-C's 1023 and 8191 at
    /// standard sizes, scaled down with the range (as [`crate::tpcc`]).
    pub fn nurand_a(&self) -> (u32, u32) {
        fn scaled(standard_a: u32, standard_range: u32, range: u32) -> u32 {
            if range >= standard_range {
                standard_a
            } else {
                // The largest 2^k - 1 not above range / 3 keeps the skew's shape.
                let target = (range / 3).max(1);
                (1u32 << (31 - target.leading_zeros())) - 1
            }
        }
        (
            scaled(1023, 3000, self.customers_per_district),
            scaled(8191, 100_000, self.items),
        )
    }

    fn draw_id<R: Rng + ?Sized>(&self, rng: &mut R, a: u32, c: u32, range: u32) -> u32 {
        match self.dist {
            IdDist::Uniform => rng.random_range(1..=range),
            IdDist::NuRand => {
                let r = rng.random_range(0..=a) | rng.random_range(1..=range);
                (r + c) % range + 1
            }
        }
    }

    /// Draws one New-Order's inputs from `rng` (module docs).
    pub fn draw<R: Rng + ?Sized>(&self, rng: &mut R) -> NewOrderInput {
        // Fixed NURand C constants (TPC-C lets them be any value in range).
        const C_CID: u32 = 259;
        const C_ITEM: u32 = 7911;
        let (a_cid, a_item) = self.nurand_a();
        let w_id = rng.random_range(1..=self.warehouses);
        let d_id = rng.random_range(1..=self.districts);
        let c_id = self.draw_id(rng, a_cid, C_CID, self.customers_per_district);
        let count = rng.random_range(self.min_lines..=self.max_lines) as usize;
        let mut lines = [OrderLine::default(); MAX_LINES];
        let mut k = 0;
        while k < count {
            let item = self.draw_id(rng, a_item, C_ITEM, self.items);
            if lines[..k].iter().any(|l| l.i_id == item) {
                continue;
            }
            lines[k] = OrderLine {
                i_id: item,
                quantity: rng.random_range(1..=self.max_quantity),
            };
            k += 1;
        }
        NewOrderInput {
            w_id,
            d_id,
            c_id,
            count: count as u8,
            lines,
        }
    }
}

/// One order line's inputs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OrderLine {
    /// In `1..=items`.
    pub i_id: u32,
    /// In `1..=max_quantity`.
    pub quantity: u32,
}

/// One New-Order's inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewOrderInput {
    pub w_id: u32,
    pub d_id: u32,
    pub c_id: u32,
    /// Lines used of `lines`.
    pub count: u8,
    pub lines: [OrderLine; MAX_LINES],
}

impl NewOrderInput {
    /// The order's lines.
    pub fn lines(&self) -> &[OrderLine] {
        &self.lines[..self.count as usize]
    }
}

/// One thread's seeded New-Order stream.
pub struct NewOrderGenerator {
    cfg: NewOrderConfig,
    rng: ChaCha8Rng,
}

impl NewOrderGenerator {
    /// Thread `thread` of `threads` for `seed`.
    pub fn new(
        cfg: NewOrderConfig,
        seed: u64,
        thread: u32,
        threads: u32,
    ) -> Result<NewOrderGenerator, WorkloadError> {
        if thread >= threads {
            return Err(WorkloadError::Thread { thread, threads });
        }
        cfg.validate().map_err(|why| WorkloadError::BadValue {
            workload: "tpcc-neworder".into(),
            option: format!("{cfg:?}"),
            why,
        })?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(thread as u64);
        Ok(NewOrderGenerator { cfg, rng })
    }

    /// The next New-Order's inputs.
    pub fn next_order(&mut self) -> NewOrderInput {
        self.cfg.draw(&mut self.rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproducible_per_thread() {
        let cfg = NewOrderConfig::new(NewOrderScale::Quick);
        let take = |seed, t| {
            let mut g = NewOrderGenerator::new(cfg, seed, t, 2).unwrap();
            (0..100).map(|_| g.next_order()).collect::<Vec<_>>()
        };
        assert_eq!(take(1, 0), take(1, 0));
        assert_ne!(take(1, 0), take(1, 1));
        assert_ne!(take(1, 0), take(2, 0));
        assert!(NewOrderGenerator::new(cfg, 1, 2, 2).is_err());
    }

    #[test]
    fn ranges_and_distinct_items() {
        for scale in [NewOrderScale::Tiny, NewOrderScale::Quick, NewOrderScale::P3] {
            for dist in [IdDist::Uniform, IdDist::NuRand] {
                let cfg = NewOrderConfig {
                    dist,
                    ..NewOrderConfig::new(scale)
                };
                cfg.validate().unwrap();
                let mut g = NewOrderGenerator::new(cfg, 3, 0, 1).unwrap();
                let mut line_counts = [0u32; MAX_LINES + 1];
                let mut districts = vec![0u32; cfg.districts as usize + 1];
                let n = 20_000;
                for _ in 0..n {
                    let o = g.next_order();
                    assert_eq!(o.w_id, 1);
                    assert!((1..=cfg.districts).contains(&o.d_id));
                    districts[o.d_id as usize] += 1;
                    assert!((1..=cfg.customers_per_district).contains(&o.c_id));
                    assert!((2..=4).contains(&o.count));
                    line_counts[o.count as usize] += 1;
                    for (i, l) in o.lines().iter().enumerate() {
                        assert!((1..=cfg.items).contains(&l.i_id));
                        assert!((1..=10).contains(&l.quantity));
                        assert!(o.lines()[..i].iter().all(|m| m.i_id != l.i_id));
                    }
                }
                // 2, 3, 4 lines each about a third; districts about uniform.
                for c in &line_counts[2..] {
                    let f = *c as f64 / n as f64;
                    assert!((f - 1.0 / 3.0).abs() < 0.03, "line count share {f}");
                }
                let per = n as f64 / cfg.districts as f64;
                for c in &districts[1..] {
                    assert!(
                        (*c as f64 - per).abs() < per * 0.15,
                        "district {c} vs {per}"
                    );
                }
            }
        }
    }

    #[test]
    fn bad_configs_rejected() {
        let ok = NewOrderConfig::new(NewOrderScale::Tiny);
        assert!(NewOrderConfig { items: 3, ..ok }.validate().is_err());
        assert!(NewOrderConfig { max_lines: 5, ..ok }.validate().is_err());
        assert!(NewOrderConfig { districts: 0, ..ok }.validate().is_err());
        assert_eq!(
            NewOrderConfig::new(NewOrderScale::P3).nurand_a(),
            (1023, 8191)
        );
    }
}
