//! What the examples share: redb's benchmark shapes (24-byte keys,
//! 150-byte values) and a store of each engine loaded with them.

#![allow(dead_code)] // each example uses part of it

use ferrite_engine::{Domain, EngineKind, Op, Store, StoreOptions};

/// Value bytes of redb's benchmark.
pub const VALUE: [u8; 150] = [7u8; 150];

/// The `i`-th key: distinct, scattered over the key space.
pub fn key(i: u64) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
    k[8..16].copy_from_slice(&i.to_le_bytes());
    k
}

/// The engines an example runs: the one `arg` names, or all three (no
/// name, or a name that is none of them).
pub fn engines(arg: Option<&str>) -> Vec<EngineKind> {
    match arg.and_then(EngineKind::parse) {
        Some(k) => vec![k],
        None => EngineKind::ALL.to_vec(),
    }
}

/// A new store of `kind` in a temporary directory of /dev/shm (ADR
/// domain), loaded with `keys` (value [`VALUE`]) in one batch. Keep the
/// directory alive as long as the store.
pub fn loaded(
    kind: EngineKind,
    keys: &[[u8; 24]],
) -> Result<(tempfile::TempDir, Store), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir_in("/dev/shm")?;
    let store = Store::create_new(
        dir.path().join("store.pool"),
        &StoreOptions::new(kind).domain(Domain::Adr),
    )?;
    let ops: Vec<Op<'_>> = keys
        .iter()
        .map(|k| Op::Put {
            key: k,
            value: &VALUE,
        })
        .collect();
    store.batch(&ops)?;
    Ok((dir, store))
}
