//! [`Kv`] over a `ferrite-engine` session (in-place, LSM or copy-on-write):
//! each `put`/`delete` is durable when it returns (the engine's contract).

use super::{Kv, Result, StoreError};
use ferrite_engine::{EngineError, KeyRange, Op, Session};

/// One thread's engine session.
pub struct EngineKv<'a> {
    session: Box<dyn Session + 'a>,
}

impl<'a> EngineKv<'a> {
    /// A map on one engine session (the server's records share the engine's key
    /// space).
    pub fn new(session: Box<dyn Session + 'a>) -> Self {
        EngineKv { session }
    }
}

fn err(e: EngineError) -> StoreError {
    match e {
        EngineError::Full(_) => StoreError::Full,
        e => StoreError::Backend(e.to_string()),
    }
}

impl Kv for EngineKv<'_> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.session.get_into(key, out).map_err(err)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.session.put(key, value).map_err(err)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        self.session.delete(key).map_err(err)
    }

    fn scan_prefix(&mut self, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        // Bounded by the prefix: the scan stops at the first key past it.
        self.session
            .range_with(&KeyRange::prefix(prefix), &mut |k, v| {
                f(k, v);
                true
            })
            .map(|_| ())
            .map_err(err)
    }

    fn batch(&mut self, ops: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<()> {
        let ops: Vec<Op<'_>> = ops
            .iter()
            .map(|(k, v)| match v {
                Some(v) => Op::Put { key: k, value: v },
                None => Op::Delete { key: k },
            })
            .collect();
        self.session.batch(&ops).map_err(err)
    }
}

/// A connection thread's read fast path: an engine reader, which holds
/// no session, so every connection thread has one.
pub(crate) struct EngineReader(ferrite_engine::Reader);

impl super::Reader for EngineReader {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.0.get_into(key, out).map_err(err)
    }
}

/// Serve `store` (see [`crate::server::run`]); the shard count is capped
/// at the sessions the store was created with, less the one the start-up
/// scan holds (a store with one session cannot serve); connection threads
/// read through readers of their own ([`EngineReader`]).
pub fn serve(
    store: &ferrite_engine::Store,
    mut opts: crate::server::Options,
    listener: std::net::TcpListener,
    stop: Option<tokio::sync::oneshot::Receiver<()>>,
    ready: impl FnOnce(&crate::server::Ready),
) -> std::result::Result<(), crate::server::ServeError> {
    let sessions = usize::from(store.superblock().sessions).max(1);
    opts.shards = opts.shards.clamp(1, (sessions - 1).max(1));
    crate::server::run(
        || {
            store
                .session()
                .map(|s| EngineKv::new(Box::new(s)))
                .map_err(err)
        },
        // Every engine publishes a write to readers only after its commit
        // is durable (InP applies its redo record after the fence, LSM
        // inserts into the memtable after its record's fence, CoW switches
        // the version after the publish), so a reader never sees a write
        // that was not acknowledged durable.
        || Ok(Some(EngineReader(store.reader()))),
        opts,
        listener,
        stop,
        ready,
    )
}
