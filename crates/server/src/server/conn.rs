//! The connection threads: the acceptor deals connections to them; each
//! connection reads, parses every buffered request, answers it (on its
//! shard, or here), and writes the replies.

use super::{
    ConnInfo, Ctx, FastCell, GetEnd, Job, Msg, ServeError, VERSION, admin, get_keys, stats,
};
use crate::auth::{self, Auth};
use crate::protocol::{self, Command, Op, Proto, Recovery, ReqCtx, Request, Response};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// Accept connections and deal them round-robin to the connection
/// threads until a signal or `stop`. Beyond `max_conns` a connection is
/// told `ERROR Too many open connections` and closed (memcached). SIGHUP
/// reloads the credentials file.
pub(super) async fn acceptor(
    listener: TcpListener,
    tls_listener: Option<TcpListener>,
    workers: Vec<tokio::sync::mpsc::UnboundedSender<(std::net::TcpStream, bool)>>,
    mut term: tokio::signal::unix::Signal,
    mut int: tokio::signal::unix::Signal,
    stop: Option<oneshot::Receiver<()>>,
    ctx: &Ctx<'_>,
) -> Result<(), ServeError> {
    let stop = async move {
        match stop {
            Some(rx) => {
                let _ = rx.await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::pin!(stop);
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let mut next = 0usize;
    let tls_accept = async |l: &Option<TcpListener>| match l {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    };
    loop {
        tokio::select! {
            r = async {
                tokio::select! {
                    r = listener.accept() => r.map(|a| (a, false)),
                    r = tls_accept(&tls_listener) => r.map(|a| (a, true)),
                }
            } => match r.and_then(|((sock, _), tls)| sock.into_std().map(|s| (s, tls))) {
                Ok((sock, tls)) => {
                    if ctx.curr_conns.load(Relaxed) as usize >= ctx.opts.max_conns.max(1) {
                        ctx.rejected_conns.fetch_add(1, Relaxed);
                        let mut sock = sock;
                        let _ = sock.set_nonblocking(true);
                        let _ = std::io::Write::write(&mut sock, b"ERROR Too many open connections\r\n");
                        continue;
                    }
                    ctx.curr_conns.fetch_add(1, Relaxed);
                    ctx.total_conns.fetch_add(1, Relaxed);
                    let _ = sock.set_nodelay(true);
                    if workers[next % workers.len()].send((sock, tls)).is_err() {
                        ctx.curr_conns.fetch_sub(1, Relaxed);
                    }
                    next = next.wrapping_add(1);
                }
                // Out of descriptors and the like: keep serving the others.
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
            },
            _ = hup.recv() => {
                if let Some(a) = &ctx.opts.auth {
                    // One line, never the file's content.
                    match a.reload() {
                        Ok(n) => eprintln!("ferrite serve: reloaded {} ({n} users)", a.path().display()),
                        Err(e) => eprintln!("ferrite serve: kept the old credentials: {e}"),
                    }
                }
            }
            _ = int.recv() => return Ok(()),
            _ = term.recv() => return Ok(()),
            _ = &mut stop => return Ok(()),
        }
    }
}

/// A connection thread: drive every connection dealt to it until the
/// acceptor is gone.
pub(super) async fn worker(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<(std::net::TcpStream, bool)>,
    ctx: &Ctx<'_>,
    fast: &FastCell<'_>,
) {
    let mut live = FuturesUnordered::new();
    loop {
        tokio::select! {
            sock = rx.recv() => {
                let Some((sock, tls)) = sock else { return };
                // Registered with this thread's runtime.
                match sock.set_nonblocking(true).and_then(|()| TcpStream::from_std(sock)) {
                    Ok(sock) => live.push(async move {
                        let id = ctx.next_conn.fetch_add(1, Relaxed);
                        let info = ConnInfo {
                            peer: sock.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string()),
                            local: sock.local_addr().map_or_else(|_| "?".into(), |a| a.to_string()),
                            last_cmd: Instant::now(),
                        };
                        ctx.conns.lock().insert(id, info);
                        match (&ctx.opts.tls, tls) {
                            (Some(t), true) => {
                                let acc = tokio_rustls::TlsAcceptor::from(t.config.clone());
                                // A handshake that does not finish in 10 s
                                // holds nothing longer.
                                let hs = tokio::time::timeout(Duration::from_secs(10), acc.accept(sock)).await;
                                if let Ok(Ok(s)) = hs {
                                    connection(s, id, ctx, fast).await;
                                }
                            }
                            _ => connection(sock, id, ctx, fast).await,
                        }
                        ctx.conns.lock().remove(&id);
                        ctx.curr_conns.fetch_sub(1, Relaxed);
                    }),
                    Err(_) => {
                        ctx.curr_conns.fetch_sub(1, Relaxed);
                    }
                }
            }
            Some(()) = live.next(), if !live.is_empty() => {}
        }
    }
}

/// What a connection does after a request.
pub(super) enum Flow {
    Continue,
    Close,
    /// Become a log watcher for these categories.
    Watch(u8),
}

/// Largest reply buffer kept before writing mid-pipeline (and mid multiget):
/// with the input bound ([`Limits`](crate::protocol::Limits)) and one item,
/// what a connection buffers at most, whether or not its client reads.
pub const FLUSH_AT: usize = 256 << 10;

/// Keys of a multiget sent to the shards at once before the replies so
/// far are written out if they exceed [`FLUSH_AT`].
pub(super) const MULTIGET_BATCH: usize = 256;

/// A connection's buffers start this small (an idle connection costs
/// little) and shrink back to it after a large request.
const BUF_START: usize = 4 << 10;
const BUF_KEEP: usize = 64 << 10;

/// Write `out` (then clear it); false when the client is gone or took
/// nothing for the idle timeout.
pub(super) async fn flush<S: AsyncWrite + Unpin>(
    sock: &mut S,
    out: &mut Vec<u8>,
    idle: Option<Duration>,
) -> bool {
    if out.is_empty() {
        return true;
    }
    let ok = match idle {
        Some(t) => matches!(
            tokio::time::timeout(t, sock.write_all(out)).await,
            Ok(Ok(()))
        ),
        None => sock.write_all(out).await.is_ok(),
    };
    out.clear();
    if out.capacity() > BUF_KEEP {
        out.shrink_to(BUF_START);
    }
    ok
}

/// What the request loop over the buffered input leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// The buffered input is used up, or holds only part of a request:
    /// write the replies, then read more.
    Read,
    /// Write the replies, then shut the connection down.
    Close,
    /// Write the replies, then become a log watcher for these categories.
    Watch(u8),
    /// Drop the connection at once: the client is gone, or the input
    /// calls for closing without a word.
    Drop,
}

/// What one phase of [`Conn::answer_buffered`] did with the request at
/// `pos`.
enum Step {
    /// Not its kind of request: the next phase looks at it.
    Pass,
    /// Answered: start over at the next request (no mid-pipeline flush).
    Again,
    /// Stop answering the buffered input.
    Stop(Next),
}

/// A connection's input, replies and parser state across reads.
struct Conn {
    id: u64,
    input: Vec<u8>,
    out: Vec<u8>,
    /// Bytes of `input` already answered in this pass.
    pos: usize,
    /// Bytes still to discard (the unread rest of a skipped request).
    skip: usize,
    /// Discard up to the next newline (the rest of a refused long line).
    discard_line: bool,
    /// A long get line is being answered as it arrives.
    streaming: bool,
    authed: bool,
}

impl Conn {
    /// Answer every complete request in `input`; the replies collect in
    /// `out` (written out mid-pipeline past [`FLUSH_AT`]), `pos` ends at
    /// the first byte not consumed.
    async fn answer_buffered<S: AsyncWrite + Unpin>(
        &mut self,
        ctx: &Ctx<'_>,
        fast: &FastCell<'_>,
        sock: &mut S,
    ) -> Next {
        self.pos = 0;
        loop {
            if !self.discard() || self.pos >= self.input.len() {
                return Next::Read;
            }
            if let Some(a) = &ctx.opts.auth {
                match self.auth_step(a) {
                    Step::Pass => {}
                    Step::Again => continue,
                    Step::Stop(next) => return next,
                }
            }
            match self.long_get_step(ctx, fast, sock).await {
                Step::Pass => {}
                Step::Again => continue,
                Step::Stop(next) => return next,
            }
            if let Some(next) = self.request_step(ctx, fast, sock).await {
                return next;
            }
            if self.out.len() >= FLUSH_AT
                && !flush(sock, &mut self.out, ctx.opts.idle_timeout).await
            {
                return Next::Drop;
            }
        }
    }

    /// Discard what an earlier refusal left to skip; false when that
    /// takes all the buffered input.
    fn discard(&mut self) -> bool {
        if self.skip > 0 {
            let n = self.skip.min(self.input.len() - self.pos);
            self.pos += n;
            self.skip -= n;
            if self.skip > 0 {
                return false;
            }
        }
        if self.discard_line {
            match memchr::memchr(b'\n', &self.input[self.pos..]) {
                Some(i) => {
                    self.pos += i + 1;
                    self.discard_line = false;
                }
                None => {
                    self.pos = self.input.len();
                    return false;
                }
            }
        }
        true
    }

    /// Authentication ([`crate::auth`]): a binary request on any
    /// connection, anything on a connection not yet authenticated.
    fn auth_step(&mut self, a: &Auth) -> Step {
        let buf = &self.input[self.pos..];
        let step = if buf[0] == protocol::binary::REQ_MAGIC {
            auth::binary_step(a, buf, self.authed)
        } else if !self.authed {
            Some(auth::text_step(a, buf))
        } else {
            None
        };
        match step {
            None => Step::Pass,
            Some(auth::Step::More) => Step::Stop(Next::Read),
            Some(auth::Step::Close) => Step::Stop(Next::Drop),
            Some(auth::Step::Reply {
                consumed,
                reply,
                authed,
                close,
            }) => {
                self.pos += consumed;
                self.out.extend_from_slice(&reply);
                self.authed = authed;
                if close {
                    Step::Stop(Next::Close)
                } else {
                    Step::Again
                }
            }
        }
    }

    /// A get line too long to buffer, answered a chunk of keys at a time
    /// ([`protocol::text::long_get`]).
    async fn long_get_step<S: AsyncWrite + Unpin>(
        &mut self,
        ctx: &Ctx<'_>,
        fast: &FastCell<'_>,
        sock: &mut S,
    ) -> Step {
        let limits = &ctx.opts.limits;
        match protocol::text::long_get(&self.input[self.pos..], limits, self.streaming) {
            protocol::text::LongGet::No => Step::Pass,
            protocol::text::LongGet::Chunk {
                op,
                keys,
                rest,
                name,
            } => {
                let mut rctx = ReqCtx::text(op, false);
                rctx.conn = self.id;
                let req = Request {
                    cmd: Command::Get {
                        keys,
                        touch: None,
                        with_cas: op == Op::Gets,
                        opts: Default::default(),
                    },
                    ctx: rctx,
                };
                // A chunk of a long get: hits of earlier chunks may be
                // out already, so a failed key's error line stays in its
                // place.
                let idle = ctx.opts.idle_timeout;
                if get_keys(ctx, fast, &req, &mut self.out, sock, idle, true).await == GetEnd::Gone
                {
                    return Step::Stop(Next::Drop);
                }
                self.pos += rest - name.len();
                self.input[self.pos..self.pos + name.len()].copy_from_slice(name);
                self.streaming = true;
                Step::Again
            }
            protocol::text::LongGet::End(n) => {
                self.pos += n;
                self.streaming = false;
                self.out.extend_from_slice(b"END\r\n");
                Step::Again
            }
            protocol::text::LongGet::BadKey => {
                self.out
                    .extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
                self.streaming = false;
                self.discard_line = true;
                Step::Again
            }
        }
    }

    /// Parse and answer the request at `pos`, or refuse it; `None`: go on
    /// with the next one.
    async fn request_step<S: AsyncWrite + Unpin>(
        &mut self,
        ctx: &Ctx<'_>,
        fast: &FastCell<'_>,
        sock: &mut S,
    ) -> Option<Next> {
        match protocol::parse(&self.input[self.pos..], &ctx.opts.limits) {
            Ok(None) => Some(Next::Read),
            Ok(Some((mut req, n))) => {
                self.pos += n;
                self.streaming = false;
                req.ctx.conn = self.id;
                match handle(ctx, fast, req, &mut self.out, sock).await {
                    Flow::Continue => None,
                    Flow::Close => Some(Next::Close),
                    Flow::Watch(mask) => Some(Next::Watch(mask)),
                }
            }
            Err(e) => {
                self.streaming = false;
                if let Some(key) = e.unlink.clone() {
                    let del = Request {
                        cmd: Command::Delete {
                            key: key.clone(),
                            cas: None,
                            opts: Default::default(),
                        },
                        ctx: ReqCtx::text(Op::Delete, true),
                    };
                    let _ = on_shard(ctx, &key, del).await;
                }
                protocol::response::encode_error(&e, &mut self.out);
                match e.recovery {
                    Recovery::Skip(n) => {
                        self.skip = n;
                        None
                    }
                    Recovery::Close => Some(Next::Close),
                    Recovery::CloseSilently => Some(Next::Drop),
                }
            }
        }
    }

    /// Drop the answered input; a buffer grown by a large request shrinks
    /// back.
    fn consume(&mut self) {
        self.input.drain(..self.pos);
        if self.input.capacity() > BUF_KEEP && self.input.len() < BUF_START {
            self.input.shrink_to(BUF_START);
        }
    }

    /// Read more input (within the idle timeout); false when the client
    /// is gone or silent.
    async fn read_more<S: AsyncRead + Unpin>(&mut self, sock: &mut S, ctx: &Ctx<'_>) -> bool {
        if self.input.capacity() - self.input.len() < 1024 {
            self.input.reserve(16 << 10);
        }
        let read = match ctx.opts.idle_timeout {
            Some(t) => match tokio::time::timeout(t, sock.read_buf(&mut self.input)).await {
                Ok(r) => r,
                Err(_) => return false,
            },
            None => sock.read_buf(&mut self.input).await,
        };
        match read {
            Ok(0) | Err(_) => false,
            Ok(_) => {
                if let Some(c) = ctx.conns.lock().get_mut(&self.id) {
                    c.last_cmd = Instant::now();
                }
                true
            }
        }
    }
}

/// One connection: read, parse every complete request, answer, write.
async fn connection<S: AsyncRead + AsyncWrite + Unpin>(
    mut sock: S,
    id: u64,
    ctx: &Ctx<'_>,
    fast: &FastCell<'_>,
) {
    let mut c = Conn {
        id,
        input: Vec::with_capacity(BUF_START),
        out: Vec::new(),
        pos: 0,
        skip: 0,
        discard_line: false,
        streaming: false,
        authed: ctx.opts.auth.is_none(),
    };
    loop {
        let next = c.answer_buffered(ctx, fast, &mut sock).await;
        if next == Next::Drop {
            return;
        }
        c.consume();
        if !flush(&mut sock, &mut c.out, ctx.opts.idle_timeout).await {
            return;
        }
        match next {
            Next::Watch(mask) => {
                watch_loop(&mut sock, ctx, mask).await;
                return;
            }
            Next::Close => {
                let _ = sock.shutdown().await;
                return;
            }
            Next::Read | Next::Drop => {}
        }
        if !c.read_more(&mut sock, ctx).await {
            return;
        }
    }
}

/// A log watcher: `OK`, then the log lines it asked for until it goes.
async fn watch_loop<S: AsyncWrite + Unpin>(sock: &mut S, ctx: &Ctx<'_>, mask: u8) {
    let Some(mut rx) = ctx.shared.log.watch(mask) else {
        let _ = sock
            .write_all(b"WATCHER_TOO_MANY log watcher limit reached\r\n")
            .await;
        return;
    };
    if sock.write_all(b"OK\r\n").await.is_err() {
        return;
    }
    while let Some(line) = rx.recv().await {
        if sock.write_all(&line).await.is_err() {
            return;
        }
    }
}

/// Run `req` on the shard that owns `key`; the encoded reply.
pub(super) async fn on_shard(ctx: &Ctx<'_>, key: &[u8], req: Request) -> Vec<u8> {
    match to_shard(ctx, key, req) {
        Some(rx) => rx.await.unwrap_or_default(),
        None => Vec::new(),
    }
}

/// Queue `req` on the shard that owns `key`; where its encoded reply will
/// come (`None`: the shard is gone).
pub(super) fn to_shard(
    ctx: &Ctx<'_>,
    key: &[u8],
    req: Request,
) -> Option<oneshot::Receiver<Vec<u8>>> {
    let (tx, rx) = oneshot::channel();
    ctx.shards[ctx.shard_of(key)]
        .send(Msg::Job(Job { req, reply: tx }))
        .ok()?;
    Some(rx)
}
async fn handle<S: AsyncWrite + Unpin>(
    ctx: &Ctx<'_>,
    fast: &FastCell<'_>,
    req: Request,
    out: &mut Vec<u8>,
    sock: &mut S,
) -> Flow {
    match &req.cmd {
        Command::Get { .. } => {
            match get_keys(ctx, fast, &req, out, sock, ctx.opts.idle_timeout, false).await {
                GetEnd::Gone => return Flow::Close,
                GetEnd::Failed => {}
                GetEnd::End => protocol::encode(&Response::End, &req.ctx, out),
            }
        }
        Command::Store { key, .. }
        | Command::Delete { key, .. }
        | Command::Arith { key, .. }
        | Command::Touch { key, .. }
        | Command::MetaDebug { key } => {
            let key = key.clone();
            out.extend(on_shard(ctx, &key, req).await);
        }
        Command::FlushAll { .. } => out.extend(on_shard(ctx, b"", req).await),
        Command::Stats { args } => stats(ctx, &req, args, out).await,
        Command::Version => protocol::encode(&Response::Version(VERSION), &req.ctx, out),
        Command::Verbosity { .. } | Command::NoOp => protocol::encode(&Response::Ok, &req.ctx, out),
        Command::Admin { args } => return admin(args, out),
        Command::Quit => {
            if req.ctx.proto == Proto::Binary {
                protocol::encode(&Response::Ok, &req.ctx, out);
            }
            return Flow::Close;
        }
    }
    Flow::Continue
}
