//! Measuring the hybrid's crossover on the store's own medium [P0 Fig. 7].
//!
//! At creation, before the superblock makes the store valid (so a crash
//! here leaves no store at all), both protocols run on scratch slots — the
//! very code paths `write_page` uses, on the medium the store lives on:
//! copy-on-write of a whole page, and micro-log writes of `k` = 1, 2, 4, …,
//! `L` lines spread evenly over the page. Each runs in batches, the
//! variants interleaved round by round so drift hits all of them alike,
//! and the fastest batch's ns per write is kept: on a shared machine other
//! work only ever adds time, so the minimum is the steadiest estimate of
//! what a write costs (a median still moves with the load). Then the same
//! again with two threads at once (thread `t` on slot `t` and lane `t`),
//! which is where copy-on-write becomes bandwidth-bound and the crossover
//! moves up.
//!
//! The crossover is the `k` where the micro-log's cost line meets
//! copy-on-write's, interpolated linearly between the two measured points
//! around it; the hybrid uses the micro-log strictly below it. It takes a
//! few milliseconds.

use super::Crossover;
use super::core::{Core, Target};
use super::dirty::DirtyLines;
use std::sync::Barrier;
use std::time::Instant;

/// Writes per timed batch, and rounds.
const BATCH: usize = 16;
const ROUNDS: usize = 15;

/// The measurement behind a calibrated crossover.
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    pub crossover: Crossover,
    /// ns per copy-on-write per writer (fastest batch): `[one writer, two writers]`.
    pub cow_ns: [f64; 2],
    /// `(k, [ns one writer, ns two writers])` per micro-log write of `k` lines.
    pub microlog_ns: Vec<(usize, [f64; 2])>,
}

/// The `k` values measured for pages of `lines` lines.
fn points(lines: usize) -> Vec<usize> {
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |k| Some(k * 2))
        .take_while(|&k| k < lines)
        .collect();
    v.push(lines);
    v
}

/// `k` lines spread evenly over a page of `lines` lines.
fn spread(k: usize, lines: usize) -> DirtyLines {
    DirtyLines::from_lines((0..k).map(|i| i * lines / k))
}

fn fastest(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// One writer's measurement on slot `slot` and lane `lane`: `(cow ns, ns per k)`.
fn measure(core: &Core, slot: u32, lane: u32, start: Option<&Barrier>) -> (f64, Vec<f64>) {
    let geo = &core.geo;
    let page: Vec<u8> = (0..geo.page_size).map(|i| (i * 131 + 7) as u8).collect();
    let ks = points(geo.lines);
    let masks: Vec<DirtyLines> = ks.iter().map(|&k| spread(k, geo.lines)).collect();
    let mut buf = Vec::new();
    let t = Target {
        slot,
        pid: 0,
        pvn: 1,
    };
    let mut cow = Vec::with_capacity(ROUNDS);
    let mut ulog = vec![Vec::with_capacity(ROUNDS); ks.len()];
    if let Some(b) = start {
        b.wait();
    }
    // Round 0 warms up (page faults, caches) and is not kept.
    for round in 0..=ROUNDS {
        let start = Instant::now();
        for _ in 0..BATCH {
            core.cow_write(t, &page);
        }
        let ns = start.elapsed().as_nanos() as f64 / BATCH as f64;
        if round > 0 {
            cow.push(ns);
        }
        for (i, m) in masks.iter().enumerate() {
            let start = Instant::now();
            for _ in 0..BATCH {
                core.ulog_write((lane, &mut buf), t, &page, m);
            }
            let ns = start.elapsed().as_nanos() as f64 / BATCH as f64;
            if round > 0 {
                ulog[i].push(ns);
            }
        }
    }
    (fastest(&cow), ulog.iter().map(|v| fastest(v)).collect())
}

/// Where the micro-log stops beating copy-on-write (see the module
/// documentation); `lines + 1` if it never does, 1 if it never wins.
fn crossing(ks: &[usize], cow: f64, ulog: &[f64], lines: usize) -> u16 {
    let Some(i) = ulog.iter().position(|&t| t >= cow) else {
        return (lines + 1).min(u16::MAX as usize) as u16;
    };
    if i == 0 {
        return 1;
    }
    let (k0, k1) = (ks[i - 1] as f64, ks[i] as f64);
    let (t0, t1) = (ulog[i - 1], ulog[i]);
    let k = if t1 > t0 {
        k0 + (cow - t0) / (t1 - t0) * (k1 - k0)
    } else {
        k1
    };
    (k.ceil() as usize)
        .clamp(1, lines + 1)
        .min(u16::MAX as usize) as u16
}

/// Measures the crossovers on `core`'s scratch slots and lanes. Writes
/// valid-looking headers and entries there: the caller zeroes them before
/// the store becomes valid.
pub(crate) fn calibrate(core: &Core) -> Calibration {
    let lines = core.geo.lines;
    let ks = points(lines);
    let (cow1, ulog1) = measure(core, 0, 0, None);
    // Two writers need two lanes (the geometry then has at least 3 slots).
    let (cow2, ulog2) = if core.geo.lanes >= 2 {
        let barrier = Barrier::new(2);
        let results: Vec<(f64, Vec<f64>)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2u32)
                .map(|t| {
                    let barrier = &barrier;
                    s.spawn(move || measure(core, t, t, Some(barrier)))
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        let cow = (results[0].0 + results[1].0) / 2.0;
        let ulog = (0..ks.len())
            .map(|i| (results[0].1[i] + results[1].1[i]) / 2.0)
            .collect();
        (cow, ulog)
    } else {
        (cow1, ulog1.clone())
    };
    Calibration {
        crossover: Crossover {
            single: crossing(&ks, cow1, &ulog1, lines),
            multi: crossing(&ks, cow2, &ulog2, lines),
        },
        cow_ns: [cow1, cow2],
        microlog_ns: ks
            .iter()
            .enumerate()
            .map(|(i, &k)| (k, [ulog1[i], ulog2[i]]))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_and_spread() {
        assert_eq!(points(64), vec![1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(points(48), vec![1, 2, 4, 8, 16, 32, 48]);
        assert_eq!(
            spread(4, 64).iter().collect::<Vec<_>>(),
            vec![0, 16, 32, 48]
        );
        assert_eq!(spread(64, 64).count(), 64);
    }

    #[test]
    fn crossing_interpolates_between_the_bracketing_points() {
        let ks = [1, 2, 4, 8, 16];
        // Micro-log cost 100 + 10·k, CoW 220: equal at k = 12.
        let ulog: Vec<f64> = ks.iter().map(|&k| 100.0 + 10.0 * k as f64).collect();
        assert_eq!(crossing(&ks, 220.0, &ulog, 16), 12);
        assert_eq!(crossing(&ks, 1000.0, &ulog, 16), 17, "never loses");
        assert_eq!(crossing(&ks, 50.0, &ulog, 16), 1, "never wins");
    }
}
