//! Names of systems owned by crates this one does not depend on, which
//! the claims look rows up by. Each list is the owner's, copied: depending
//! on the engine, the PTM or the server to read a name would link them
//! into `ferrite report`. ferrite-bench's test `names_match_their_owners`
//! compares every list with its owner's, so a rename there fails it.

/// `ferrite_engine::EngineKind::ALL`'s names, in that order.
pub const ENGINES: [&str; 3] = ["inp", "cow", "lsm"];

/// `ferrite_ptm::Algorithm::ALL`'s names, in that order.
pub const PTM_ALGORITHMS: [&str; 2] = ["orec-eager", "orec-lazy"];

/// `ferrite_server::store::STORES`: every store `ferrite serve` serves.
pub const SERVER_STORES: [&str; 8] = [
    "engine-inp",
    "engine-lsm",
    "engine-cow",
    "ptm-lazy",
    "ptm-eager",
    "tx-undo",
    "tx-redo",
    "tx-clobber",
];

/// `ferrite_server::store::PMDK_STORE`: the store on PMDK's undo
/// transactions (feature `pmdk`).
pub const PMDK_STORE: &str = "pmdk-undo";

/// The variant of PMDK's transactions in the `tx` and `ptm` suites' rows.
pub const PMDK_TX: &str = "pmdk-tx";
