//! `ferrite-rows`: the result rows every benchmark yields and the headline
//! claims computed from them — what `ferrite bench` writes and `ferrite
//! report` reads, apart from the harness that measures them
//! (`ferrite-bench`), so the report does not link the suites and their
//! peers.
//!
//! - [`row`]: the [`Row`] type, its ratios and its JSON lines.
//! - [`claims`]: the headline claims, each a ratio of rows beside the
//!   paper's value, with its verdict; the `ptm`, `server` and `engine`
//!   suites' own targets ([`claims::ptm`], [`claims::server`],
//!   [`claims::engine`]).
//! - [`names`]: the names of systems owned by other crates that the claims
//!   look rows up by (checked against their owners by ferrite-bench's
//!   tests).
//! - [`median`] / [`spread`]: the statistics rows and claims are made of.

#![forbid(unsafe_code)]

pub mod claims;
pub mod error;
pub mod names;
pub mod row;

pub use error::RowsError;
pub use row::{Row, read_json, set_ratios, write_json};

/// The median of `v` (NaN when empty; the mean of the middle two when its
/// length is even).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

/// `(max - min) / median` of `v`: the noise of a row (0 when empty or the
/// median is not positive).
pub fn spread(v: &[f64]) -> f64 {
    let med = median(v);
    if v.is_empty() || med <= 0.0 {
        return 0.0;
    }
    let max = v.iter().copied().fold(f64::MIN, f64::max);
    let min = v.iter().copied().fold(f64::MAX, f64::min);
    (max - min) / med
}
