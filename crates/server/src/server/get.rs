//! Retrievals: the read fast path on the connection thread, and the
//! keys of a multiget fanned out to their shards and collected in order.

use super::{Ctx, FLUSH_AT, Fast, FastCell, MULTIGET_BATCH, flush, now_unix, on_shard, to_shard};
use crate::observe::DetailOp;
use crate::protocol::{self, Command, ItemView, Proto, ReqCtx, Request, Response};
use crate::store::{Item, ReadPath};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use tokio::io::AsyncWrite;
use tokio::sync::oneshot;

/// The read fast path (module docs) for one key of a plain get: answer a
/// hit or a miss into `out` and return true, or return false and leave
/// `out` alone when the key's shard must answer (an expired or flushed
/// item, a read error, the shard's hint queue full).
fn fast_get(ctx: &Ctx<'_>, f: &mut Fast<'_>, key: &[u8], rctx: &ReqCtx, out: &mut Vec<u8>) -> bool {
    if f.reader.is_none() {
        if f.retried || !ctx.scan_over.load(std::sync::atomic::Ordering::Acquire) {
            return false;
        }
        f.retried = true;
        f.reader = (f.make)();
    }
    let shard = ctx.shard_of(key);
    let now = now_unix();
    let Fast {
        reader: Some(reader),
        map_key,
        buf,
        ..
    } = f
    else {
        return false;
    };
    match crate::store::read_live(&mut **reader, ctx.shared, key, map_key, buf, now) {
        Ok(ReadPath::Hit(it, charge)) => {
            if !ctx.hints[shard].lock().push(map_key, charge) {
                return false;
            }
            let st = &ctx.shared.stats;
            st.cmd_get.fetch_add(1, Relaxed);
            st.get_hits.fetch_add(1, Relaxed);
            st.fast_gets.fetch_add(1, Relaxed);
            ctx.shared.detail.record(key, DetailOp::Get(true));
            let size = buf.len().saturating_sub(crate::store::HEADER);
            ctx.shared.log.item_get(key, true, size, rctx.conn);
            encode_hit(key, &it, &buf[crate::store::HEADER..], now, rctx, out);
            true
        }
        Ok(ReadPath::Miss) => {
            let st = &ctx.shared.stats;
            st.cmd_get.fetch_add(1, Relaxed);
            st.get_misses.fetch_add(1, Relaxed);
            st.fast_gets.fetch_add(1, Relaxed);
            ctx.shared.detail.record(key, DetailOp::Get(false));
            ctx.shared.log.item_get(key, false, 0, rctx.conn);
            protocol::encode(&Response::Miss { key }, rctx, out);
            true
        }
        Ok(ReadPath::Shard) | Err(_) => false,
    }
}

/// A get's hit for `key` (text, binary or a non-meta get of any kind)
/// with data `data`.
pub(super) fn encode_hit(
    key: &[u8],
    it: &Item,
    data: &[u8],
    now: u64,
    rctx: &ReqCtx,
    out: &mut Vec<u8>,
) {
    let mut v = ItemView::new(key, it.flags, data, it.cas);
    v.ttl = it.ttl(now);
    v.last_access = now.saturating_sub(it.time);
    protocol::encode(&Response::Hit(v), rctx, out);
}

/// How [`get_keys`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GetEnd {
    /// Every key answered: the caller adds the `END`.
    End,
    /// A text get failed on some key (a damaged item, a store error): as
    /// memcached does, the reply is that key's error line alone, which
    /// replaced the get's hits in `out` — no `END`, so a client that stops
    /// reading at the error stays in step with the stream.
    Failed,
    /// The client is gone.
    Gone,
}

/// Answer every key of a retrieval (not the `END`) into `out`, writing
/// `out` to `sock` whenever it exceeds [`FLUSH_AT`]. Keys go to the shards
/// [`MULTIGET_BATCH`] at a time. A text get whose key fails is answered
/// with the first error line only ([`GetEnd::Failed`]), unless hits of it
/// were already written to the socket (a reply past [`FLUSH_AT`]): then
/// the error line takes that key's place, and the `END` follows; so it
/// does in a chunk of a long get (`chunk`), whose earlier chunks' hits may
/// be out already.
pub(super) async fn get_keys<S: AsyncWrite + Unpin>(
    ctx: &Ctx<'_>,
    fast: &FastCell<'_>,
    req: &Request,
    out: &mut Vec<u8>,
    sock: &mut S,
    idle: Option<Duration>,
    chunk: bool,
) -> GetEnd {
    let Command::Get {
        keys,
        touch,
        with_cas,
        opts,
    } = &req.cmd
    else {
        return GetEnd::End;
    };
    let text = req.ctx.proto == Proto::Text;
    let start = out.len();
    let mut flushed = chunk;
    let mut failed: Option<Vec<u8>> = None;
    // One key's reply: in a text get an error line (a hit starts with
    // `VALUE `, a miss is empty) ends the get's reply.
    let take = |part: Vec<u8>, out: &mut Vec<u8>, failed: &mut Option<Vec<u8>>, flushed: bool| {
        if text && part.starts_with(b"SERVER_ERROR") && !flushed {
            failed.get_or_insert(part);
        } else if failed.is_none() {
            out.extend(part);
        }
    };
    let plain = touch.is_none() && req.ctx.proto != Proto::Meta;
    let fast = Some(fast).filter(|_| plain);
    if keys.len() == 1 {
        let key = &keys[0];
        let mut here = Vec::new();
        if let Some(f) = fast
            && fast_get(ctx, &mut f.borrow_mut(), key, &req.ctx, &mut here)
        {
        } else {
            here = on_shard(ctx, key, req.clone()).await;
        }
        take(here, out, &mut failed, flushed);
    } else {
        // Answer what the read fast path can at once; send every other key
        // to its shard first, then collect in order: shards work in
        // parallel.
        for batch in keys.chunks(MULTIGET_BATCH) {
            let mut parts: Vec<Result<Vec<u8>, oneshot::Receiver<Vec<u8>>>> =
                Vec::with_capacity(batch.len());
            for key in batch {
                if let Some(f) = fast {
                    let mut here = Vec::new();
                    if fast_get(ctx, &mut f.borrow_mut(), key, &req.ctx, &mut here) {
                        parts.push(Ok(here));
                        continue;
                    }
                }
                let sub = Request {
                    cmd: Command::Get {
                        keys: vec![key.clone()],
                        touch: *touch,
                        with_cas: *with_cas,
                        opts: opts.clone(),
                    },
                    ctx: req.ctx.clone(),
                };
                if let Some(rx) = to_shard(ctx, key, sub) {
                    parts.push(Err(rx));
                }
            }
            for part in parts {
                let part = match part {
                    Ok(here) => here,
                    Err(rx) => rx.await.unwrap_or_default(),
                };
                take(part, out, &mut failed, flushed);
                if out.len() >= FLUSH_AT && failed.is_none() {
                    if !flush(sock, out, idle).await {
                        return GetEnd::Gone;
                    }
                    flushed = true;
                }
            }
        }
    }
    match failed {
        Some(line) => {
            out.truncate(start);
            out.extend(line);
            GetEnd::Failed
        }
        None => GetEnd::End,
    }
}
