//! Unix time as a UTC calendar date: the report's run date, and `ferrite
//! pool info` (the pool header records its creation as nanoseconds since
//! 1970-01-01 00:00:00 UTC).
//!
//! The conversion counts 400-year eras of the proleptic Gregorian calendar
//! (146097 days each) starting on 0000-03-01, so that the leap day is the
//! last day of its year and month lengths follow a fixed 153-day pattern
//! (March–July, August–December). No leap seconds: Unix time has none.

/// `(year, month 1-12, day 1-31)` of day `days` after 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // Shift the epoch to 0000-03-01 (719468 days before 1970-01-01).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era, 0..=146096
    // Year of era, 0..=399: remove the leap days of 4-, 100- and 400-year cycles.
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // 0..=365, from March 1
    let mp = (5 * doy + 2) / 153; // month from March, 0..=11
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `YYYY-MM-DD HH:MM:SS UTC` of `secs` seconds after the Unix epoch.
pub fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The same instant in RFC 3339 form (`YYYY-MM-DDTHH:MM:SSZ`), for JSON.
pub fn rfc3339(secs: u64) -> String {
    utc(secs).replacen(' ', "T", 1).replace(" UTC", "Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(951_868_799), "2000-02-29 23:59:59 UTC");
        assert_eq!(utc(1_709_164_800), "2024-02-29 00:00:00 UTC");
        assert_eq!(utc(4_107_542_400), "2100-03-01 00:00:00 UTC");
        assert_eq!(utc(2_147_483_647), "2038-01-19 03:14:07 UTC");
        assert_eq!(utc(1_795_580_249), "2026-11-25 04:17:29 UTC");
        assert_eq!(rfc3339(1_795_580_249), "2026-11-25T04:17:29Z");
        // u64::MAX nanoseconds, the largest the header can hold.
        assert_eq!(utc(u64::MAX / 1_000_000_000), "2554-07-21 23:34:33 UTC");
    }

    /// Day by day against a plain count of month lengths, 1970 to 2400
    /// (every rule of the leap years: 4, 100 and 400).
    #[test]
    fn every_day_from_1970_to_2400() {
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let mut days = 0i64;
        for y in 1970..2400 {
            for m in 1..=12u32 {
                let len = match m {
                    2 if leap(y) => 29,
                    2 => 28,
                    4 | 6 | 9 | 11 => 30,
                    _ => 31,
                };
                for d in 1..=len {
                    assert_eq!(civil_from_days(days), (y, m, d), "day {days}");
                    days += 1;
                }
            }
        }
    }
}
