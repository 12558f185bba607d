//! `ferrite-server`: a memcached-compatible server that loses nothing it
//! acknowledged (issue 13).
//!
//! This first piece is the wire codec only: [`protocol`] parses memcached's
//! text, meta and binary requests into a protocol-independent
//! [`protocol::Request`] and encodes the store's [`protocol::Response`]
//! back in the framing the client used. It does no I/O and holds no state.

#![forbid(unsafe_code)]

pub mod protocol;
pub mod server;
pub mod store;
