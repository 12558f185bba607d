//! Values that live in one 8-byte persistent word.

use ferrite_pmem::POff;

/// A value stored in one 8-byte word of the pool (little-endian, the
/// value zero- or sign-extended to 64 bits).
pub trait Word: Copy {
    /// The value as a word.
    fn to_word(self) -> u64;
    /// The value of a word (truncated to the type).
    fn from_word(w: u64) -> Self;
}

macro_rules! unsigned_word {
    ($($t:ty),*) => {$(
        impl Word for $t {
            #[inline]
            fn to_word(self) -> u64 {
                self as u64
            }
            #[inline]
            fn from_word(w: u64) -> Self {
                w as $t
            }
        }
    )*};
}
unsigned_word!(u64, u32, u16, u8, usize);

macro_rules! signed_word {
    ($($t:ty),*) => {$(
        impl Word for $t {
            #[inline]
            fn to_word(self) -> u64 {
                self as i64 as u64
            }
            #[inline]
            fn from_word(w: u64) -> Self {
                w as i64 as $t
            }
        }
    )*};
}
signed_word!(i64, i32, i16, i8);

impl Word for bool {
    fn to_word(self) -> u64 {
        u64::from(self)
    }
    fn from_word(w: u64) -> Self {
        w != 0
    }
}

impl Word for f64 {
    fn to_word(self) -> u64 {
        self.to_bits()
    }
    fn from_word(w: u64) -> Self {
        f64::from_bits(w)
    }
}

impl<T: ?Sized> Word for POff<T> {
    fn to_word(self) -> u64 {
        self.raw()
    }
    fn from_word(w: u64) -> Self {
        POff::new(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        assert_eq!(i32::from_word((-5i32).to_word()), -5);
        assert_eq!(f64::from_word(2.5f64.to_word()), 2.5);
        assert!(bool::from_word(true.to_word()));
        assert_eq!(
            POff::<u8>::from_word(POff::<u8>::new(64).to_word()).raw(),
            64
        );
    }
}
