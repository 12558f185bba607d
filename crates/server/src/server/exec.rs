//! What a shard does with a request: run it against its [`Store`] and
//! encode the reply, logging what `watch` asked for.

use super::encode_hit;
use crate::observe::{DetailOp, LOG_FETCHERS, LOG_MUTATIONS};
use crate::protocol::{self, Command, Failure, ItemView, Proto, Request, Response};
use crate::store::{
    Arith, ArithOutcome, DeleteOutcome, MetaGet, Shared, Store, StoreError, StoreOutcome,
};
use std::sync::atomic::Ordering::Relaxed;

fn store_error(e: &StoreError) -> Failure {
    match e {
        StoreError::Full => Failure::OutOfMemory,
        e => Failure::Server(e.to_string().into()),
    }
}

/// Execute one single-key (or keyless) request on a shard's store and
/// append the encoded reply (for a retrieval: the hit or miss, not the
/// `END`).
/// A meta-protocol get (`mg`): one key, with its flags.
fn exec_meta_get(
    store: &mut dyn Store,
    st: &crate::store::Stats,
    req: &Request,
    (key, touch, opts): (&[u8], Option<i64>, &protocol::GetOpts),
    now: u64,
    out: &mut Vec<u8>,
) {
    let m = MetaGet {
        touch,
        vivify: opts.vivify,
        recache: opts.recache,
        new_cas: opts.new_cas,
        no_bump: opts.no_bump,
        order: req.ctx.meta.as_deref().map_or(&[][..], |m| &m.order),
    };
    st.cmd_get.fetch_add(1, Relaxed);
    if touch.is_some() {
        st.cmd_touch.fetch_add(1, Relaxed);
    }
    match store.meta_get(key, &m, now) {
        Ok(Some(hit)) => {
            let it = &hit.item;
            if hit.created {
                st.get_misses.fetch_add(1, Relaxed);
            } else {
                st.get_hits.fetch_add(1, Relaxed);
                if touch.is_some() {
                    st.touch_hits.fetch_add(1, Relaxed);
                }
            }
            let mut v = ItemView::new(key, it.flags, &it.data, it.cas);
            v.ttl = hit.echo_ttl;
            v.last_access = now.saturating_sub(it.time);
            v.fetched = hit.fetched;
            v.stale = it.stale;
            v.win = hit.win;
            v.token_sent = hit.token_sent;
            protocol::encode(&Response::Hit(v), &req.ctx, out);
        }
        Ok(None) => {
            st.get_misses.fetch_add(1, Relaxed);
            if touch.is_some() {
                st.touch_misses.fetch_add(1, Relaxed);
            }
            protocol::encode(&Response::Miss { key }, &req.ctx, out);
        }
        Err(e) => protocol::encode(&Response::Error(store_error(&e)), &req.ctx, out),
    }
}

/// A text or binary get / gets / gat / gats: each key answered in turn;
/// a store error (a damaged item) ends the reply with its error line.
fn exec_get(
    store: &mut dyn Store,
    shared: &Shared,
    req: &Request,
    (keys, touch): (&[Vec<u8>], Option<i64>),
    now: u64,
    out: &mut Vec<u8>,
) {
    let st = &shared.stats;
    for key in keys {
        let r = match touch {
            Some(t) => {
                st.cmd_touch.fetch_add(1, Relaxed);
                store.touch(key, t, now)
            }
            None => store.get(key, now),
        };
        st.cmd_get.fetch_add(1, Relaxed);
        if let Ok(found) = &r {
            shared.detail.record(key, DetailOp::Get(found.is_some()));
            let size = found.as_ref().map_or(0, |it| it.data.len());
            shared
                .log
                .item_get(key, found.is_some(), size, req.ctx.conn);
        }
        match r {
            Ok(Some(it)) => {
                st.get_hits.fetch_add(1, Relaxed);
                if touch.is_some() {
                    st.touch_hits.fetch_add(1, Relaxed);
                }
                encode_hit(key, &it, &it.data, now, &req.ctx, out);
            }
            Ok(None) => {
                st.get_misses.fetch_add(1, Relaxed);
                if touch.is_some() {
                    st.touch_misses.fetch_add(1, Relaxed);
                }
                protocol::encode(&Response::Miss { key }, &req.ctx, out);
            }
            Err(e) => {
                return protocol::encode(&Response::Error(store_error(&e)), &req.ctx, out);
            }
        }
    }
}

/// A set / add / replace / append / prepend / cas.
fn exec_store(store: &mut dyn Store, shared: &Shared, req: &Request, now: u64, out: &mut Vec<u8>) {
    let Command::Store {
        mode,
        key,
        flags,
        exptime,
        data,
        cas,
        opts,
    } = &req.cmd
    else {
        return;
    };
    let st = &shared.stats;
    st.cmd_set.fetch_add(1, Relaxed);
    shared.detail.record(key, DetailOp::Set);
    if shared.log.wants(LOG_FETCHERS) {
        // memcached's store fetches the old item first, and logs it.
        let old = store.peek(key, now).ok().flatten();
        let size = old.as_ref().map_or(0, |(it, _)| it.data.len());
        shared.log.item_get(key, old.is_some(), size, req.ctx.conn);
    }
    let r = store.store(*mode, key, *flags, *exptime, data, *cas, opts, now);
    if shared.log.wants(LOG_MUTATIONS) {
        log_store(shared, req, (*mode, key, *exptime, data.len()), &r, now);
    }
    let resp = match r {
        Ok(StoreOutcome::Stored(cas)) => Response::Stored { cas },
        Ok(StoreOutcome::NotStored) => Response::NotStored,
        Ok(StoreOutcome::Exists) => Response::Exists,
        Ok(StoreOutcome::NotFound) => Response::NotFound,
        Ok(StoreOutcome::TooLarge) => Response::Error(Failure::TooLarge),
        Err(e) => Response::Error(store_error(&e)),
    };
    protocol::encode(&resp, &req.ctx, out);
}

/// memcached's mutation log line for a store command.
fn log_store(
    shared: &Shared,
    req: &Request,
    (mode, key, exptime, len): (protocol::StoreMode, &[u8], i64, usize),
    r: &Result<StoreOutcome, StoreError>,
    now: u64,
) {
    let status = match &r {
        Ok(StoreOutcome::Stored(_)) => "stored",
        Ok(StoreOutcome::NotStored) => "not_stored",
        Ok(StoreOutcome::Exists) => "exists",
        Ok(StoreOutcome::NotFound) => "not_found",
        Ok(StoreOutcome::TooLarge) => "too_large",
        Err(_) => "no_memory",
    };
    let cmd = match mode {
        protocol::StoreMode::Set => "set",
        protocol::StoreMode::Add => "add",
        protocol::StoreMode::Replace => "replace",
        protocol::StoreMode::Append => "append",
        protocol::StoreMode::Prepend => "prepend",
        protocol::StoreMode::Cas => "cas",
    };
    let ttl = match protocol::deadline(exptime, now) {
        protocol::Expiry::At(t) => t.saturating_sub(now),
        _ => 0,
    };
    shared
        .log
        .item_store(key, status, cmd, ttl, req.ctx.conn, len);
}

/// Run `req` against `store` at unix time `now` and append its encoded
/// reply to `out` (nothing under `noreply` where the protocol suppresses
/// it): what a shard does with every request it is sent.
pub(crate) fn execute(
    store: &mut dyn Store,
    shared: &Shared,
    req: &Request,
    now: u64,
    out: &mut Vec<u8>,
) {
    let resp_err = |f: Failure, out: &mut Vec<u8>| {
        protocol::encode(&Response::Error(f), &req.ctx, out);
    };
    let st = &shared.stats;
    match &req.cmd {
        Command::Get {
            keys, touch, opts, ..
        } if req.ctx.proto == Proto::Meta => {
            if let Some(key) = keys.first() {
                exec_meta_get(store, st, req, (key, *touch, opts), now, out);
            }
        }
        Command::Get { keys, touch, .. } => exec_get(store, shared, req, (keys, *touch), now, out),
        Command::Store { .. } => exec_store(store, shared, req, now, out),
        Command::Delete { key, cas, opts } => {
            shared.detail.record(key, DetailOp::Delete);
            let resp = match store.delete(key, *cas, opts, now) {
                Ok(DeleteOutcome::Deleted) => Response::Deleted,
                Ok(DeleteOutcome::NotFound) => Response::NotFound,
                Ok(DeleteOutcome::Exists) => Response::Exists,
                Err(e) => Response::Error(store_error(&e)),
            };
            protocol::encode(&resp, &req.ctx, out);
        }
        Command::Arith {
            key,
            incr,
            delta,
            create,
            cas,
            ttl,
            new_cas,
        } => {
            let a = Arith {
                incr: *incr,
                delta: *delta,
                create: *create,
                cas: *cas,
                ttl: *ttl,
                new_cas: *new_cas,
                order: req.ctx.meta.as_deref().map_or(&[][..], |m| &m.order),
            };
            let resp = match store.arith(key, a, now) {
                Ok(ArithOutcome::Value(value, cas, ttl)) => Response::Arith { value, cas, ttl },
                Ok(ArithOutcome::NotFound) => Response::NotFound,
                Ok(ArithOutcome::Exists) => Response::Exists,
                Ok(ArithOutcome::NonNumeric) => Response::Error(Failure::NonNumeric),
                Err(e) => Response::Error(store_error(&e)),
            };
            protocol::encode(&resp, &req.ctx, out);
        }
        Command::Touch { key, exptime } => {
            st.cmd_touch.fetch_add(1, Relaxed);
            let resp = match store.touch(key, *exptime, now) {
                Ok(Some(it)) => {
                    st.touch_hits.fetch_add(1, Relaxed);
                    Response::Touched {
                        flags: it.flags,
                        cas: it.cas,
                    }
                }
                Ok(None) => {
                    st.touch_misses.fetch_add(1, Relaxed);
                    Response::NotFound
                }
                Err(e) => Response::Error(store_error(&e)),
            };
            protocol::encode(&resp, &req.ctx, out);
        }
        Command::MetaDebug { key } => match store.peek(key, now) {
            Ok(Some((it, fetched))) => {
                let mut v = ItemView::new(key, it.flags, &it.data, it.cas);
                v.ttl = it.ttl(now);
                v.last_access = now.saturating_sub(it.time);
                v.fetched = fetched;
                protocol::encode(&Response::Debug(v), &req.ctx, out);
            }
            Ok(None) => protocol::encode(&Response::Miss { key }, &req.ctx, out),
            Err(e) => resp_err(store_error(&e), out),
        },
        Command::FlushAll { delay } => {
            let resp = match store.flush_all(*delay, now) {
                Ok(()) => Response::Ok,
                Err(e) => Response::Error(store_error(&e)),
            };
            protocol::encode(&resp, &req.ctx, out);
        }
        // Keyless commands are answered by the connection itself.
        Command::Stats { .. }
        | Command::Version
        | Command::Verbosity { .. }
        | Command::Quit
        | Command::Admin { .. }
        | Command::NoOp => resp_err(Failure::Server("not a store command".into()), out),
    }
}
