//! The bindings of the systems Ferrite is measured against, apart from the
//! suites that run them: LMDB (through `heed`), RocksDB (its C API, feature
//! `rocksdb`) and PMDK's allocator under Ferrite's engines (feature
//! `pmdk`). PMDK's logs, blocks and transactions are ferrite-pmdk's; redb
//! and fjall are used as crates by the engine suite's redb workload.

pub mod lmdb;
#[cfg(feature = "pmdk")]
pub mod pmdk_alloc;
#[cfg(feature = "rocksdb")]
pub mod rocksdb;
