//! The planted bug of the crash checks (`ferrite check
//! server-items-planted`). Public only with the `checks` feature.

/// A bug the crash checks plant in item writes
/// ([`Cache::plant`](super::Cache::plant)) to show that `ferrite check
/// server-items` catches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ItemFault {
    /// No bug: items are written whole, checksum included, in one put.
    #[default]
    None,
    /// The item is first written with a zero checksum and the checksum
    /// in a second durable write, as if it were computed after the item's
    /// fence: a crash between leaves an item that does not verify.
    ChecksumLate,
}
