//! The store's planted bug ([`Fault`]): which engine's (or the heap's)
//! protocol step a store breaks on purpose, so that the crash checks show
//! they catch it ([`crate::StoreOptions`]'s `fault`, checks only). Public
//! only with the `checks` feature; a production build always holds
//! `Fault::None`.

use crate::{cow, inp, lsm};

/// A bug planted on purpose, to show that the crash checks catch it.
/// Never set outside the checks.
// Without `checks` nothing outside the crate can name it, and only the
// checks plant one: the variants the engine merely matches on are then
// never constructed, which is expected.
#[cfg_attr(not(any(test, feature = "checks")), allow(dead_code))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    /// No planted bug: the real protocols.
    #[default]
    None,
    /// A bug in InP's protocol.
    Inp(inp::Fault),
    /// A bug in CoW's protocol.
    Cow(cow::Fault),
    /// A bug in LSM's protocol.
    Lsm(lsm::Fault),
    /// A bug in the Ferrite heap under the store (its growth, say).
    #[cfg(any(test, feature = "checks"))]
    Heap(ferrite_alloc::heap::Fault),
}
