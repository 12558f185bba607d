//! TATP (Telecom Application Transaction Processing) inputs: the
//! transaction mix of the TATP specification (IBM/Solid, "TATP Benchmark
//! Description", v1.0) and the write-only variant P3 runs (reading notes
//! B5: only `UPDATE_LOCATION`, a uniform random subscriber of a population
//! of 100 000, a new 32-bit location — the DudeTM port P3 measured).
//!
//! This module draws *inputs* only; the systems measured own the tables.
//! Subscriber ids are `1..=subscribers` as in TATP (`s_id`); a system that
//! stores them zero-based subtracts one.
//!
//! ## Mixes
//! | mix | transactions |
//! |---|---|
//! | [`TatpMix::UpdateLocation`] (P3) | `UPDATE_LOCATION` 100 % |
//! | [`TatpMix::Standard`] (TATP) | `GET_SUBSCRIBER_DATA` 35 %, `GET_NEW_DESTINATION` 10 %, `GET_ACCESS_DATA` 35 %, `UPDATE_SUBSCRIBER_DATA` 2 %, `UPDATE_LOCATION` 14 %, `INSERT_CALL_FORWARDING` 2 %, `DELETE_CALL_FORWARDING` 2 % |
//!
//! ## Subscriber ids
//! [`SubscriberDist::Uniform`] is what P3 runs. [`SubscriberDist::NonUniform`]
//! is TATP's rule: `s_id = NURand(A, 1, N) = ((random(0, A) | random(1, N))
//! % N) + 1` with A = 65 535 for N ≤ 1 000 000, 1 048 575 for N ≤ 10 000 000
//! and 2 097 151 above (TATP has no run-time constant C, unlike TPC-C).
//!
//! ## Other inputs (TATP §3)
//! `sf_type`, `ai_type` uniform in 1..=4; `start_time` uniform in
//! {0, 8, 16}; `end_time` uniform in 1..=24; `bit_1` uniform in 0..=1;
//! `data_a` uniform in 0..=255; `vlr_location` a uniform 32-bit number;
//! `numberx` a uniform 15-digit number (0..10^15).
//!
//! ## Threads
//! [`TatpGenerator::new`] gives thread `t` of `T` its own ChaCha stream of
//! the seed (stream number `t`), like [`crate::Generator`]: the inputs of
//! every thread are a function of (config, mix, seed, thread) alone.
//! [`TatpConfig::draw`] draws from any caller-owned generator instead.

use crate::WorkloadError;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The subscriber population P3 (and DudeTM) uses.
pub const P3_SUBSCRIBERS: u64 = 100_000;

/// How subscriber ids are chosen (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubscriberDist {
    /// Uniform in `1..=N` (P3, DudeTM).
    Uniform,
    /// TATP's NURand rule.
    NonUniform,
}

/// Which transactions are drawn (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TatpMix {
    /// P3's write-only TATP: `UPDATE_LOCATION` only.
    UpdateLocation,
    /// TATP's standard mix (80 % reads, 20 % writes).
    Standard,
}

/// The seven TATP transaction kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TatpKind {
    GetSubscriberData,
    GetNewDestination,
    GetAccessData,
    UpdateSubscriberData,
    UpdateLocation,
    InsertCallForwarding,
    DeleteCallForwarding,
}

impl TatpKind {
    /// Every kind, in the order of [`STANDARD_MIX`].
    pub const ALL: [TatpKind; 7] = [
        TatpKind::GetSubscriberData,
        TatpKind::GetNewDestination,
        TatpKind::GetAccessData,
        TatpKind::UpdateSubscriberData,
        TatpKind::UpdateLocation,
        TatpKind::InsertCallForwarding,
        TatpKind::DeleteCallForwarding,
    ];

    /// TATP's name of the transaction.
    pub fn name(self) -> &'static str {
        match self {
            TatpKind::GetSubscriberData => "GET_SUBSCRIBER_DATA",
            TatpKind::GetNewDestination => "GET_NEW_DESTINATION",
            TatpKind::GetAccessData => "GET_ACCESS_DATA",
            TatpKind::UpdateSubscriberData => "UPDATE_SUBSCRIBER_DATA",
            TatpKind::UpdateLocation => "UPDATE_LOCATION",
            TatpKind::InsertCallForwarding => "INSERT_CALL_FORWARDING",
            TatpKind::DeleteCallForwarding => "DELETE_CALL_FORWARDING",
        }
    }

    /// True for the four read-only transactions.
    pub fn is_read_only(self) -> bool {
        matches!(
            self,
            TatpKind::GetSubscriberData | TatpKind::GetNewDestination | TatpKind::GetAccessData
        )
    }
}

/// TATP's standard mix in percent, in the order of [`TatpKind::ALL`].
pub const STANDARD_MIX: [u32; 7] = [35, 10, 35, 2, 14, 2, 2];

/// One TATP transaction's inputs (field names as in TATP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TatpTxn {
    GetSubscriberData {
        s_id: u64,
    },
    GetNewDestination {
        s_id: u64,
        sf_type: u8,
        start_time: u8,
        end_time: u8,
    },
    GetAccessData {
        s_id: u64,
        ai_type: u8,
    },
    UpdateSubscriberData {
        s_id: u64,
        bit_1: bool,
        sf_type: u8,
        data_a: u8,
    },
    /// TATP passes `sub_nbr` (the 15-digit string of `s_id`); the id is
    /// given here, the string is [`sub_nbr`] of it.
    UpdateLocation {
        s_id: u64,
        vlr_location: u32,
    },
    InsertCallForwarding {
        s_id: u64,
        sf_type: u8,
        start_time: u8,
        end_time: u8,
        numberx: u64,
    },
    DeleteCallForwarding {
        s_id: u64,
        sf_type: u8,
        start_time: u8,
    },
}

impl TatpTxn {
    /// The kind of transaction.
    pub fn kind(&self) -> TatpKind {
        match self {
            TatpTxn::GetSubscriberData { .. } => TatpKind::GetSubscriberData,
            TatpTxn::GetNewDestination { .. } => TatpKind::GetNewDestination,
            TatpTxn::GetAccessData { .. } => TatpKind::GetAccessData,
            TatpTxn::UpdateSubscriberData { .. } => TatpKind::UpdateSubscriberData,
            TatpTxn::UpdateLocation { .. } => TatpKind::UpdateLocation,
            TatpTxn::InsertCallForwarding { .. } => TatpKind::InsertCallForwarding,
            TatpTxn::DeleteCallForwarding { .. } => TatpKind::DeleteCallForwarding,
        }
    }

    /// The subscriber the transaction touches.
    pub fn s_id(&self) -> u64 {
        match *self {
            TatpTxn::GetSubscriberData { s_id }
            | TatpTxn::GetNewDestination { s_id, .. }
            | TatpTxn::GetAccessData { s_id, .. }
            | TatpTxn::UpdateSubscriberData { s_id, .. }
            | TatpTxn::UpdateLocation { s_id, .. }
            | TatpTxn::InsertCallForwarding { s_id, .. }
            | TatpTxn::DeleteCallForwarding { s_id, .. } => s_id,
        }
    }
}

/// TATP's `sub_nbr`: `s_id` as 15 decimal digits, zero-padded.
pub fn sub_nbr(s_id: u64) -> [u8; 15] {
    let mut out = [b'0'; 15];
    let mut v = s_id;
    for b in out.iter_mut().rev() {
        *b = b'0' + (v % 10) as u8;
        v /= 10;
    }
    out
}

/// A TATP population and how ids are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TatpConfig {
    /// N: subscribers `1..=N` (at least 1).
    pub subscribers: u64,
    pub dist: SubscriberDist,
    pub mix: TatpMix,
}

impl TatpConfig {
    /// P3's TATP: 100 000 subscribers, uniform ids, `UPDATE_LOCATION` only.
    pub fn p3() -> TatpConfig {
        TatpConfig {
            subscribers: P3_SUBSCRIBERS,
            dist: SubscriberDist::Uniform,
            mix: TatpMix::UpdateLocation,
        }
    }

    /// TATP's standard benchmark for `subscribers` subscribers (NURand ids,
    /// the standard mix).
    pub fn standard(subscribers: u64) -> TatpConfig {
        TatpConfig {
            subscribers,
            dist: SubscriberDist::NonUniform,
            mix: TatpMix::Standard,
        }
    }

    /// The same with another population.
    pub fn with_subscribers(mut self, subscribers: u64) -> TatpConfig {
        self.subscribers = subscribers;
        self
    }

    /// TATP's A for NURand, by population size (module docs).
    pub fn nurand_a(&self) -> u64 {
        if self.subscribers <= 1_000_000 {
            65_535
        } else if self.subscribers <= 10_000_000 {
            1_048_575
        } else {
            2_097_151
        }
    }

    fn check(&self) -> Result<(), WorkloadError> {
        if self.subscribers == 0 {
            return Err(WorkloadError::BadValue {
                workload: "tatp".into(),
                option: "subscribers=0".into(),
                why: "the population needs at least one subscriber".into(),
            });
        }
        Ok(())
    }

    /// A subscriber id in `1..=N`.
    pub fn draw_s_id<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        let n = self.subscribers.max(1);
        match self.dist {
            SubscriberDist::Uniform => rng.random_range(1..=n),
            SubscriberDist::NonUniform => {
                let r = rng.random_range(0..=self.nurand_a()) | rng.random_range(1..=n);
                r % n + 1
            }
        }
    }

    /// The next transaction's inputs, drawn from `rng`.
    pub fn draw<R: Rng + ?Sized>(&self, rng: &mut R) -> TatpTxn {
        let kind = match self.mix {
            TatpMix::UpdateLocation => TatpKind::UpdateLocation,
            TatpMix::Standard => {
                let mut d = rng.random_range(0..100u32);
                let mut pick = TatpKind::DeleteCallForwarding;
                for (k, p) in TatpKind::ALL.iter().zip(STANDARD_MIX) {
                    if d < p {
                        pick = *k;
                        break;
                    }
                    d -= p;
                }
                pick
            }
        };
        let s_id = self.draw_s_id(rng);
        let sf_type = |rng: &mut R| rng.random_range(1..=4u8);
        let start_time = |rng: &mut R| 8 * rng.random_range(0..3u8);
        let end_time = |rng: &mut R| rng.random_range(1..=24u8);
        match kind {
            TatpKind::GetSubscriberData => TatpTxn::GetSubscriberData { s_id },
            TatpKind::GetNewDestination => TatpTxn::GetNewDestination {
                s_id,
                sf_type: sf_type(rng),
                start_time: start_time(rng),
                end_time: end_time(rng),
            },
            TatpKind::GetAccessData => TatpTxn::GetAccessData {
                s_id,
                ai_type: rng.random_range(1..=4u8),
            },
            TatpKind::UpdateSubscriberData => TatpTxn::UpdateSubscriberData {
                s_id,
                bit_1: rng.random_bool(0.5),
                sf_type: sf_type(rng),
                data_a: rng.random(),
            },
            TatpKind::UpdateLocation => TatpTxn::UpdateLocation {
                s_id,
                vlr_location: rng.random(),
            },
            TatpKind::InsertCallForwarding => TatpTxn::InsertCallForwarding {
                s_id,
                sf_type: sf_type(rng),
                start_time: start_time(rng),
                end_time: end_time(rng),
                numberx: rng.random_range(0..1_000_000_000_000_000u64),
            },
            TatpKind::DeleteCallForwarding => TatpTxn::DeleteCallForwarding {
                s_id,
                sf_type: sf_type(rng),
                start_time: start_time(rng),
            },
        }
    }
}

/// The seeded input stream of one thread (module docs, "Threads").
pub struct TatpGenerator {
    cfg: TatpConfig,
    rng: ChaCha8Rng,
}

impl TatpGenerator {
    /// The stream of thread `thread` of `threads` for `seed`.
    pub fn new(
        cfg: TatpConfig,
        seed: u64,
        thread: u32,
        threads: u32,
    ) -> Result<TatpGenerator, WorkloadError> {
        if thread >= threads {
            return Err(WorkloadError::Thread { thread, threads });
        }
        cfg.check()?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(thread as u64);
        Ok(TatpGenerator { cfg, rng })
    }

    /// The configuration drawn from.
    pub fn config(&self) -> &TatpConfig {
        &self.cfg
    }

    /// The next transaction's inputs.
    pub fn next_txn(&mut self) -> TatpTxn {
        self.cfg.draw(&mut self.rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_threads_differ() {
        let cfg = TatpConfig::standard(1000);
        let take = |seed, t| {
            let mut g = TatpGenerator::new(cfg, seed, t, 2).unwrap();
            (0..200).map(|_| g.next_txn()).collect::<Vec<_>>()
        };
        assert_eq!(take(7, 0), take(7, 0));
        assert_ne!(take(7, 0), take(7, 1));
        assert_ne!(take(7, 0), take(8, 0));
        assert!(TatpGenerator::new(cfg, 1, 2, 2).is_err());
        assert!(TatpGenerator::new(cfg.with_subscribers(0), 1, 0, 1).is_err());
    }

    #[test]
    fn p3_is_update_location_uniform_over_population() {
        let cfg = TatpConfig::p3().with_subscribers(100);
        let mut g = TatpGenerator::new(cfg, 3, 0, 1).unwrap();
        let mut seen = [0u32; 101];
        let mut locations = std::collections::HashSet::new();
        for _ in 0..100_000 {
            match g.next_txn() {
                TatpTxn::UpdateLocation { s_id, vlr_location } => {
                    assert!((1..=100).contains(&s_id));
                    seen[s_id as usize] += 1;
                    locations.insert(vlr_location);
                }
                other => panic!("P3 mix drew {other:?}"),
            }
        }
        assert_eq!(seen[0], 0);
        // Uniform: every id near 1000 draws (5 sigma ≈ 160).
        for (id, &c) in seen.iter().enumerate().skip(1) {
            assert!((840..=1160).contains(&c), "id {id} drawn {c} times");
        }
        assert!(locations.len() > 99_000, "locations are 32-bit random");
    }

    #[test]
    fn standard_mix_within_tolerance_and_ranges() {
        let cfg = TatpConfig::standard(5000);
        let mut g = TatpGenerator::new(cfg, 11, 1, 4).unwrap();
        let n = 200_000;
        let mut counts = [0u32; 7];
        for _ in 0..n {
            let t = g.next_txn();
            let k = TatpKind::ALL.iter().position(|k| *k == t.kind()).unwrap();
            counts[k] += 1;
            assert!((1..=5000).contains(&t.s_id()));
            match t {
                TatpTxn::GetNewDestination {
                    sf_type,
                    start_time,
                    end_time,
                    ..
                }
                | TatpTxn::InsertCallForwarding {
                    sf_type,
                    start_time,
                    end_time,
                    ..
                } => {
                    assert!((1..=4).contains(&sf_type));
                    assert!([0, 8, 16].contains(&start_time));
                    assert!((1..=24).contains(&end_time));
                }
                TatpTxn::GetAccessData { ai_type, .. } => assert!((1..=4).contains(&ai_type)),
                TatpTxn::UpdateSubscriberData { sf_type, .. }
                | TatpTxn::DeleteCallForwarding { sf_type, .. } => {
                    assert!((1..=4).contains(&sf_type))
                }
                _ => {}
            }
        }
        for (i, &c) in counts.iter().enumerate() {
            let got = c as f64 / n as f64 * 100.0;
            let want = STANDARD_MIX[i] as f64;
            assert!(
                (got - want).abs() < 0.5,
                "{}: {got:.2} % (want {want} %)",
                TatpKind::ALL[i].name()
            );
        }
    }

    #[test]
    fn nonuniform_ids_in_range_and_skewed() {
        // With A = 65535 ≫ N the OR sets most low bits, so NURand favours
        // ids whose (id - 1) has many one bits; uniform would not.
        let cfg = TatpConfig {
            subscribers: 1024,
            dist: SubscriberDist::NonUniform,
            mix: TatpMix::UpdateLocation,
        };
        let mut g = TatpGenerator::new(cfg, 5, 0, 1).unwrap();
        let mut counts = vec![0u32; 1025];
        for _ in 0..200_000 {
            let id = g.next_txn().s_id();
            assert!((1..=1024).contains(&id));
            counts[id as usize] += 1;
        }
        let max = *counts.iter().max().unwrap();
        let min = *counts[1..].iter().min().unwrap();
        assert!(
            max > 10 * (min + 1),
            "NURand is skewed: max {max}, min {min}"
        );
        assert_eq!(cfg.nurand_a(), 65_535);
        assert_eq!(cfg.with_subscribers(2_000_000).nurand_a(), 1_048_575);
        assert_eq!(cfg.with_subscribers(20_000_000).nurand_a(), 2_097_151);
    }

    #[test]
    fn sub_nbr_is_fifteen_digits() {
        assert_eq!(&sub_nbr(1), b"000000000000001");
        assert_eq!(&sub_nbr(100_000), b"000000000100000");
    }
}
