//! `ferrite-server`: a memcached-compatible server that loses nothing it
//! acknowledged (issue 13).
//!
//! - [`protocol`]: the wire codec. It parses memcached's text, meta and
//!   binary requests into a protocol-independent [`protocol::Request`] and
//!   encodes the store's [`protocol::Response`] back in the framing the
//!   client used; no I/O, no state.
//! - [`store`]: memcached's item semantics (modes, CAS unique across
//!   restarts, arithmetic, expiry, `flush_all`, eviction under a memory
//!   limit) over a durable map: the engines (`engine-inp|lsm|cow`), the
//!   PTM (`ptm-lazy|eager`) or the byte map on undo, redo or clobber
//!   transactions (`tx-undo|redo|clobber`); with the feature `pmdk`, a
//!   byte map on libpmemobj's undo transactions (`pmdk-undo`), P1's peer.
//! - [`server`]: the tokio server behind `ferrite serve`: connections hand
//!   requests to per-key shard threads that own the store sessions; a
//!   reply leaves only after its write is durable, and a shard commits the
//!   writes queued at once as one group.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod auth;
#[cfg(feature = "checks")]
pub mod checks;
pub mod observe;
pub mod protocol;
pub mod server;
pub mod store;
pub mod tls;
