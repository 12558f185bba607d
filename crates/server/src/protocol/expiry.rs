//! memcached's expiration-time rule (`protocol.txt` "Expiration times").
//!
//! A client exptime of 0 means never; 1 to 2 592 000 (30 days) is a number
//! of seconds from now; anything larger is an absolute unix time; a
//! negative value expires the item immediately (memcached maps it to an
//! absolute time in 1970). The same rule applies to `flush_all`'s delay,
//! `touch`, `gat` and the meta `T`/`N` tokens.

/// Longest relative exptime; larger values are absolute unix times.
pub const RELATIVE_MAX: i64 = 60 * 60 * 24 * 30;

/// When an item stops being visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Expiry {
    /// Never expires (it may still be evicted).
    Never,
    /// Invisible once the unix time is `>=` this.
    At(u64),
    /// Already expired: a store with this exptime leaves nothing visible.
    Expired,
}

impl Expiry {
    /// Is an item with this expiry gone at unix time `now`?
    pub fn is_expired(self, now_unix: u64) -> bool {
        match self {
            Expiry::Never => false,
            Expiry::At(t) => now_unix >= t,
            Expiry::Expired => true,
        }
    }

    /// Seconds left at `now` (`None` = never expires; 0 once expired): the
    /// meta `t` flag's value.
    pub fn remaining(self, now_unix: u64) -> Option<u64> {
        match self {
            Expiry::Never => None,
            Expiry::At(t) => Some(t.saturating_sub(now_unix)),
            Expiry::Expired => Some(0),
        }
    }
}

/// The deadline of a client exptime received at unix time `now_unix`.
pub fn deadline(exptime: i64, now_unix: u64) -> Expiry {
    if exptime == 0 {
        Expiry::Never
    } else if exptime < 0 {
        Expiry::Expired
    } else if exptime <= RELATIVE_MAX {
        Expiry::At(now_unix.saturating_add(exptime.unsigned_abs()))
    } else {
        let at = exptime.unsigned_abs();
        if at <= now_unix {
            Expiry::Expired
        } else {
            Expiry::At(at)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000;

    #[test]
    fn zero_is_never() {
        assert_eq!(deadline(0, NOW), Expiry::Never);
        assert!(!Expiry::Never.is_expired(u64::MAX));
        assert_eq!(Expiry::Never.remaining(NOW), None);
    }

    #[test]
    fn negative_is_expired() {
        assert_eq!(deadline(-1, NOW), Expiry::Expired);
        assert_eq!(deadline(i64::MIN, NOW), Expiry::Expired);
        assert!(Expiry::Expired.is_expired(0));
    }

    #[test]
    fn up_to_thirty_days_is_relative() {
        assert_eq!(deadline(1, NOW), Expiry::At(NOW + 1));
        assert_eq!(deadline(RELATIVE_MAX, NOW), Expiry::At(NOW + 2_592_000));
        let e = deadline(10, NOW);
        assert!(!e.is_expired(NOW + 9));
        assert!(e.is_expired(NOW + 10));
        assert_eq!(e.remaining(NOW + 4), Some(6));
    }

    #[test]
    fn beyond_thirty_days_is_absolute() {
        assert_eq!(deadline(RELATIVE_MAX + 1, NOW), Expiry::Expired);
        assert_eq!(deadline(NOW as i64 + 100, NOW), Expiry::At(NOW + 100));
        assert_eq!(deadline(NOW as i64, NOW), Expiry::Expired);
        assert_eq!(deadline(i64::MAX, 0), Expiry::At(i64::MAX as u64));
    }
}
