//! The planted bugs of CoW ([`Fault`]): each breaks one step of the
//! engine's protocol on purpose, so that the crash checks
//! (`ferrite check engine-planted`) show they catch it. Public only with
//! the `checks` feature; a production build never sets one (the engine's
//! `fault` field stays `None`).

/// Planted bugs of this engine (checks only); see the module docs.
// Without `checks` nothing outside the crate can name it, and only the
// checks plant one: the variants the engine merely matches on are then
// never constructed, which is expected.
#[cfg_attr(not(any(test, feature = "checks")), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Switch the root without flushing the new nodes and blobs first.
    SwitchBeforeFlush,
    /// Free the old version's blocks in a publish before the root switch.
    FreeBeforeSwitch,
    /// Leave the blocks a switch retires out of its switch record's
    /// pending list.
    RecordOmitsRetired,
}

impl Fault {
    /// Every planted bug, for the checks' planted runs.
    #[cfg(any(test, feature = "checks"))]
    pub const ALL: &'static [Fault] = &[
        Fault::SwitchBeforeFlush,
        Fault::FreeBeforeSwitch,
        Fault::RecordOmitsRetired,
    ];
}
