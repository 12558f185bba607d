//! Request distributions, as YCSB defines them.
//!
//! Every generator here is a pure function of its parameters and the
//! random numbers it is handed: the caller owns the seeded
//! [`rand_chacha::ChaCha8Rng`], so one seed gives one stream on every
//! system. None of them allocates after construction.
//!
//! Sources: J. Gray, P. Sundaresan, S. Englert, K. Baclawski, P. J.
//! Weinberger, *Quickly Generating Billion-Record Synthetic Databases*
//! (SIGMOD 1994) for the Zipfian draw; B. F. Cooper et al., *Benchmarking
//! Cloud Serving Systems with YCSB* (SoCC 2010) and YCSB's `core` generator
//! package (`ZipfianGenerator`, `ScrambledZipfianGenerator`,
//! `SkewedLatestGenerator`, `UniformLongGenerator`, `CounterGenerator`,
//! `Utils.fnvhash64`) for how YCSB applies it. The N-Store hot-set
//! distribution P2 measured is [`HotSet`] (reading notes A7.1, §E10).

use rand::Rng;

/// YCSB's default Zipfian constant θ.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;

/// The item space YCSB's scrambled Zipfian draws from before hashing
/// (`ScrambledZipfianGenerator.ITEM_COUNT` = 10^10).
pub const SCRAMBLED_ITEM_COUNT: u64 = 10_000_000_000;

/// ζ(10^10, 0.99) as YCSB hard-codes it (`ScrambledZipfianGenerator.ZETAN`),
/// so the scrambled generator never sums ten billion terms.
pub const SCRAMBLED_ZETAN_099: f64 = 26.469_028_201_783_02;

/// Below this many items ζ(n, θ) is summed term by term (as YCSB does);
/// above, it is evaluated with the Euler–Maclaurin formula, which agrees
/// with the sum to ~1e-12 relative (tested against YCSB's constant).
const ZETA_EXACT_LIMIT: u64 = 1 << 20;

/// 64-bit FNV-1a over the eight bytes of `v`, low byte first, then made
/// non-negative as Java's `Math.abs` does on a `long` — YCSB's
/// `Utils.fnvhash64`, used to scramble Zipfian draws and to name keys.
/// (`Math.abs(Long.MIN_VALUE)` stays `Long.MIN_VALUE`; read as unsigned it
/// is 2^63, which is what this returns for that one input.)
#[inline]
pub fn fnvhash64(v: u64) -> u64 {
    const OFFSET_BASIS: u64 = 0xCBF2_9CE4_8422_2325;
    const PRIME: u64 = 1_099_511_628_211;
    let mut h = OFFSET_BASIS;
    let mut v = v;
    for _ in 0..8 {
        h ^= v & 0xff;
        h = h.wrapping_mul(PRIME);
        v >>= 8;
    }
    (h as i64).wrapping_abs() as u64
}

/// ζ(n, θ) = Σ_{i=1..n} 1/i^θ.
pub fn zeta(n: u64, theta: f64) -> f64 {
    if n <= ZETA_EXACT_LIMIT {
        zeta_range(0, n, theta, 0.0)
    } else {
        zeta_euler_maclaurin(n, theta)
    }
}

/// Adds the terms for items `from+1 ..= to` to `sum` (YCSB's incremental
/// `zeta(st, n, theta, initialsum)`).
fn zeta_range(from: u64, to: u64, theta: f64, sum: f64) -> f64 {
    let mut s = sum;
    for i in from..to {
        s += 1.0 / ((i + 1) as f64).powf(theta);
    }
    s
}

/// Σ_{i=1..n} i^-θ as the first M-1 terms exactly plus the Euler–Maclaurin
/// tail ∫_M^n x^-θ dx + (f(M)+f(n))/2 + (f'(n)-f'(M))/12 - (f'''(n)-f'''(M))/720.
fn zeta_euler_maclaurin(n: u64, theta: f64) -> f64 {
    const M: u64 = 1000;
    let head = zeta_range(0, M - 1, theta, 0.0);
    let (m, nn) = (M as f64, n as f64);
    let f = |x: f64| x.powf(-theta);
    let f1 = |x: f64| -theta * x.powf(-theta - 1.0);
    let f3 = |x: f64| -theta * (theta + 1.0) * (theta + 2.0) * x.powf(-theta - 3.0);
    let integral = if (theta - 1.0).abs() < 1e-12 {
        nn.ln() - m.ln()
    } else {
        (nn.powf(1.0 - theta) - m.powf(1.0 - theta)) / (1.0 - theta)
    };
    head + integral + (f(m) + f(nn)) / 2.0 + (f1(nn) - f1(m)) / 12.0 - (f3(nn) - f3(m)) / 720.0
}

/// Zipfian over `0..items` (item 0 most popular), Gray et al.'s algorithm
/// as YCSB's `ZipfianGenerator` implements it:
///
/// ```text
/// α = 1/(1-θ),  ζ2 = ζ(2,θ),  ζn = ζ(n,θ),  η = (1 - (2/n)^(1-θ)) / (1 - ζ2/ζn)
/// u ∈ [0,1);  uz = u·ζn
/// uz < 1          → 0
/// uz < 1 + 0.5^θ  → 1
/// else            → ⌊n · (η·u - η + 1)^α⌋
/// ```
///
/// ζn is precomputed; when the item count grows ([`Self::next_with`] with a
/// larger n) it is extended incrementally, one term per new item, as YCSB
/// does. YCSB's incremental path keeps the constructor's n inside η (a
/// quirk); this one uses the current n, as Gray et al. define η.
/// θ must be in (0, 1); [`crate::WorkloadError`] rejects other values at
/// parse time.
#[derive(Clone, Debug)]
pub struct Zipfian {
    items: u64,
    theta: f64,
    alpha: f64,
    zeta2: f64,
    zetan: f64,
    eta: f64,
    half_pow_theta: f64,
}

impl Zipfian {
    /// Zipfian over `0..items` with constant `theta` (ζn computed here).
    pub fn new(items: u64, theta: f64) -> Self {
        Self::with_zetan(items, theta, zeta(items, theta))
    }

    /// As [`Self::new`] with ζn supplied (YCSB's precomputed constants).
    pub fn with_zetan(items: u64, theta: f64, zetan: f64) -> Self {
        let items = items.max(1);
        let zeta2 = zeta(2, theta);
        let mut z = Zipfian {
            items,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zeta2,
            zetan,
            eta: 0.0,
            half_pow_theta: 0.5f64.powf(theta),
        };
        z.eta = z.eta_for(items);
        z
    }

    fn eta_for(&self, n: u64) -> f64 {
        (1.0 - (2.0 / n as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan)
    }

    /// The item count ζn currently covers.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// ζ(n, θ) for the current n.
    pub fn zetan(&self) -> f64 {
        self.zetan
    }

    /// One draw in `0..items`.
    #[inline]
    pub fn next<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        let u: f64 = rng.random();
        self.draw(u)
    }

    #[inline]
    fn draw(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + self.half_pow_theta {
            return 1.min(self.items - 1);
        }
        let v = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        v.min(self.items - 1)
    }

    /// One draw in `0..items` after growing the item count to `items` if it
    /// is larger (ζn extended incrementally; it never shrinks: a smaller
    /// `items` is served from the larger distribution and clamped, which
    /// YCSB's default `allowitemcountdecrease=false` also refuses to redo).
    #[inline]
    pub fn next_with<R: Rng + ?Sized>(&mut self, items: u64, rng: &mut R) -> u64 {
        if items > self.items {
            self.zetan = zeta_range(self.items, items, self.theta, self.zetan);
            self.items = items;
            self.eta = self.eta_for(items);
        }
        self.next(rng).min(items.max(1) - 1)
    }
}

/// YCSB's `ScrambledZipfianGenerator`: a Zipfian draw over a fixed large
/// space of [`SCRAMBLED_ITEM_COUNT`] items, hashed with [`fnvhash64`] and
/// taken modulo the item count, so the popular items are scattered over the
/// key space instead of clustered at its start. The item space is fixed so
/// that growing the item count does not move which items are popular
/// (YCSB's CoreWorkload sizes it for the inserts it expects).
#[derive(Clone, Debug)]
pub struct ScrambledZipfian {
    zipf: Zipfian,
    items: u64,
}

impl ScrambledZipfian {
    /// Scrambled Zipfian over `0..items` with constant `theta`. For θ =
    /// 0.99 YCSB's precomputed ζ(10^10) is used; for any other θ it is
    /// computed (Euler–Maclaurin, microseconds).
    pub fn new(items: u64, theta: f64) -> Self {
        let zetan = if theta == ZIPFIAN_CONSTANT {
            SCRAMBLED_ZETAN_099
        } else {
            zeta(SCRAMBLED_ITEM_COUNT, theta)
        };
        ScrambledZipfian {
            zipf: Zipfian::with_zetan(SCRAMBLED_ITEM_COUNT, theta, zetan),
            items: items.max(1),
        }
    }

    /// One draw in `0..items`.
    #[inline]
    pub fn next<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        fnvhash64(self.zipf.next(rng)) % self.items
    }

    /// The item count draws are reduced to.
    pub fn items(&self) -> u64 {
        self.items
    }
}

/// YCSB's `SkewedLatestGenerator` (the "latest" request distribution):
/// a Zipfian offset back from the newest item, so the most recently
/// inserted items are the most popular. Over `0..count` (count = items
/// inserted so far) it returns `count - 1 - z`, z Zipfian in `0..count`.
/// (YCSB returns `last - z` with `last` = newest key number and z in
/// `0..last`, which never picks item 0; this one can.)
#[derive(Clone, Debug)]
pub struct SkewedLatest {
    zipf: Zipfian,
}

impl SkewedLatest {
    /// Starts with `count` items and constant `theta`.
    pub fn new(count: u64, theta: f64) -> Self {
        SkewedLatest {
            zipf: Zipfian::new(count.max(1), theta),
        }
    }

    /// One draw in `0..count`; `count` may have grown since the last call.
    #[inline]
    pub fn next<R: Rng + ?Sized>(&mut self, count: u64, rng: &mut R) -> u64 {
        let count = count.max(1);
        count - 1 - self.zipf.next_with(count, rng)
    }
}

/// Uniform over `0..items` (YCSB's `UniformLongGenerator`).
#[derive(Clone, Copy, Debug)]
pub struct Uniform {
    items: u64,
}

impl Uniform {
    pub fn new(items: u64) -> Self {
        Uniform {
            items: items.max(1),
        }
    }

    #[inline]
    pub fn next<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        rng.random_range(0..self.items)
    }
}

/// N-Store's `simple_skew` as P2 ran it (reading notes A7.1): with
/// probability `hot_prob` a uniform draw from the first `hot_fraction` of
/// the items, otherwise a uniform draw from the rest. P2's scripts pass
/// "low skew" (about half the accesses to a fifth of the keys, [`Self::LOW`])
/// and N-Store's "high skew" is about 90 % to 10 % ([`Self::HIGH`]). The
/// N-Store code's exact sets are sloppier (notes A7.1); this is the stated
/// intent.
#[derive(Clone, Copy, Debug)]
pub struct HotSet {
    hot: u64,
    items: u64,
    hot_prob: f64,
}

impl HotSet {
    /// (hot fraction, hot probability) of N-Store's low skew.
    pub const LOW: (f64, f64) = (0.2, 0.5);
    /// (hot fraction, hot probability) of N-Store's high skew.
    pub const HIGH: (f64, f64) = (0.1, 0.9);

    pub fn new(items: u64, hot_fraction: f64, hot_prob: f64) -> Self {
        let items = items.max(1);
        let hot = ((items as f64 * hot_fraction) as u64).clamp(1, items);
        HotSet {
            hot,
            items,
            hot_prob,
        }
    }

    #[inline]
    pub fn next<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        let p: f64 = rng.random();
        if p < self.hot_prob || self.hot == self.items {
            rng.random_range(0..self.hot)
        } else {
            rng.random_range(self.hot..self.items)
        }
    }
}

/// YCSB's `CounterGenerator`: hands out consecutive numbers from `start`
/// (the key numbers of inserts). `last` is the newest number handed out.
#[derive(Clone, Copy, Debug)]
pub struct Counter {
    next: u64,
}

impl Counter {
    pub fn new(start: u64) -> Self {
        Counter { next: start }
    }

    /// The next number.
    #[inline]
    pub fn next_value(&mut self) -> u64 {
        let v = self.next;
        self.next += 1;
        v
    }

    /// How many numbers below the next one exist (= the next number).
    pub fn peek(&self) -> u64 {
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn fnv_matches_a_hand_computed_value() {
        // FNV-1a of eight zero bytes: each step is h = h * prime.
        let mut h: u64 = 0xCBF2_9CE4_8422_2325;
        for _ in 0..8 {
            h = h.wrapping_mul(1_099_511_628_211);
        }
        assert_eq!(fnvhash64(0), (h as i64).wrapping_abs() as u64);
        assert_ne!(fnvhash64(1), fnvhash64(2));
        assert!(fnvhash64(12345) <= i64::MAX as u64);
    }

    #[test]
    fn euler_maclaurin_reproduces_ycsb_zetan_constant() {
        let z = zeta(SCRAMBLED_ITEM_COUNT, ZIPFIAN_CONSTANT);
        assert!(
            ((z - SCRAMBLED_ZETAN_099) / SCRAMBLED_ZETAN_099).abs() < 1e-9,
            "{z}"
        );
        // And agrees with the exact sum just above the switch-over.
        let n = ZETA_EXACT_LIMIT + 17;
        let exact = zeta_range(0, n, 0.8, 0.0);
        assert!(((zeta_euler_maclaurin(n, 0.8) - exact) / exact).abs() < 1e-10);
    }

    #[test]
    fn incremental_zeta_equals_fresh_zeta() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut z = Zipfian::new(100, 0.99);
        z.next_with(1000, &mut rng);
        let fresh = Zipfian::new(1000, 0.99);
        assert!((z.zetan() - fresh.zetan()).abs() < 1e-9);
    }

    #[test]
    fn zipfian_top_one_percent_gets_a_large_share() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let n = 10_000u64;
        let z = Zipfian::new(n, ZIPFIAN_CONSTANT);
        let draws = 200_000;
        let mut top = 0;
        let mut zero = 0;
        for _ in 0..draws {
            let v = z.next(&mut rng);
            assert!(v < n);
            if v < n / 100 {
                top += 1;
            }
            if v == 0 {
                zero += 1;
            }
        }
        // θ=0.99, n=10^4: ζ(100)/ζ(10^4) ≈ 5.0/9.4 ≈ 0.53 of draws in the top 1 %.
        let share = top as f64 / draws as f64;
        assert!((0.45..0.62).contains(&share), "top-1% share {share}");
        // Item 0 alone: 1/ζn ≈ 0.106.
        let p0 = zero as f64 / draws as f64;
        assert!((0.09..0.125).contains(&p0), "p(0) = {p0}");
    }

    #[test]
    fn scrambled_zipfian_is_skewed_but_scattered() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let n = 10_000u64;
        let z = ScrambledZipfian::new(n, ZIPFIAN_CONSTANT);
        let mut counts = vec![0u32; n as usize];
        let draws = 200_000;
        for _ in 0..draws {
            counts[z.next(&mut rng) as usize] += 1;
        }
        let mut sorted = counts.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let top: u32 = sorted[..(n / 100) as usize].iter().sum();
        let share = top as f64 / draws as f64;
        // Skewed (uniform would give 1 %): the 100 hottest of the 10^10
        // underlying items alone carry ζ(100)/ζ(10^10) ≈ 5.2/26.47 ≈ 0.196
        // (YCSB's scrambling flattens Zipf: the long tail of the big space
        // spreads over all items). And the hottest item is not item 0.
        assert!((0.18..0.3).contains(&share), "top-1% share {share}");
        let hottest = counts
            .iter()
            .enumerate()
            .max_by_key(|(_, c)| **c)
            .unwrap()
            .0;
        assert_eq!(hottest as u64, fnvhash64(0) % n);
        // The first 1 % of item numbers is not where the mass is.
        let prefix: u32 = counts[..(n / 100) as usize].iter().sum();
        assert!((prefix as f64 / draws as f64) < share / 2.0);
    }

    #[test]
    fn uniform_is_roughly_flat() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let u = Uniform::new(100);
        let mut counts = [0u32; 100];
        for _ in 0..100_000 {
            counts[u.next(&mut rng) as usize] += 1;
        }
        let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(*lo > 850 && *hi < 1150, "{lo}..{hi}");
    }

    #[test]
    fn latest_favours_recent_items() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut l = SkewedLatest::new(1000, ZIPFIAN_CONSTANT);
        let mut newest_share = 0;
        let mut count = 1000;
        for i in 0..50_000 {
            if i % 10 == 0 {
                count += 1; // an insert
            }
            let v = l.next(count, &mut rng);
            assert!(v < count);
            if v + 10 >= count {
                newest_share += 1;
            }
        }
        // The newest 10 items get far more than 10/1000 of the draws.
        assert!(newest_share as f64 / 50_000.0 > 0.3, "{newest_share}");
    }

    #[test]
    fn hotset_hits_the_hot_fraction() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let (f, p) = HotSet::LOW;
        let h = HotSet::new(1000, f, p);
        let hot = (0..100_000).filter(|_| h.next(&mut rng) < 200).count();
        let share = hot as f64 / 100_000.0;
        assert!((0.48..0.52).contains(&share), "{share}");
    }

    #[test]
    fn counter_counts() {
        let mut c = Counter::new(10);
        assert_eq!((c.next_value(), c.next_value(), c.peek()), (10, 11, 12));
    }
}
