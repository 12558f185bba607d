//! The text protocol (memcached 1.6 `protocol.txt`), as memcached parses it.
//!
//! Wire format: a command line of space-separated tokens ending in `\n`
//! (a `\r` right before it is dropped); storage commands then send
//! `<bytes>` bytes of data and `\r\n`.
//!
//! ```text
//! get|gets <key>*                          gat|gats <exptime> <key>*
//! set|add|replace|append|prepend <key> <flags> <exptime> <bytes> [noreply]
//! cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]
//! delete <key> [0] [noreply]               touch <key> <exptime> [noreply]
//! incr|decr <key> <value> [noreply]        flush_all [delay] [noreply]
//! stats [args]   version   verbosity <n> [noreply]   quit
//! ```
//!
//! Replies to errors follow memcached's `proto_text.c`: a wrong token count
//! or unknown command is `ERROR`; a key over 250 bytes or a bad number is
//! `CLIENT_ERROR bad command line format` (the data block, if any, is *not*
//! skipped: memcached then reads it as a command line); a value over the
//! item size limit is `SERVER_ERROR object too large for cache` and its data
//! block is skipped; a data block not followed by `\r\n` is `CLIENT_ERROR
//! bad data chunk`. `noreply` is recognised as the last token and (as
//! memcached's `out_string`) suppresses error replies too.
//!
//! Lines starting with a two-letter `m?` command go to [`super::meta`].

use super::{
    Command, Failure, GetOpts, Limits, Op, ParseResult, ProtoError, Recovery, ReqCtx, Request,
    StoreMode, StoreOpts, meta, parse_i32, parse_u32, parse_u64,
};

fn is_multiget(buf: &[u8]) -> bool {
    let start = buf.iter().take_while(|&&b| b == b' ').count();
    let b = &buf[start..];
    // While the command name is still arriving ("ga", or only spaces so
    // far), the line may yet be a retrieval: answering "no" would refuse as
    // too long a `get` line whose first bytes happened to arrive alone —
    // a verdict that must not depend on how the bytes were split (found by
    // fuzzing, fuzz/regressions/protocol/). The undecided buffer is still
    // bounded, by the retrieval limit.
    [&b"get "[..], b"gets ", b"gat ", b"gats "]
        .iter()
        .any(|name| b.starts_with(name) || name.starts_with(b))
}

/// Parse one text or meta request at the front of `buf` (not binary).
pub(crate) fn parse(buf: &[u8], limits: &Limits) -> ParseResult {
    let Some(line) = split_line(buf, limits)? else {
        return Ok(None);
    };
    let Some(&cmd) = line.tokens.first() else {
        return line.err(Failure::UnknownCommand, Op::NoOp, false);
    };
    if cmd.len() < 2 {
        return line.err(Failure::UnknownCommand, Op::NoOp, false);
    }
    if cmd.len() == 2 && cmd[0] == b'm' {
        return meta::parse(cmd[1], &line.tokens, buf, line.len, limits);
    }
    match cmd {
        b"get" | b"gets" | b"gat" | b"gats" => retrieval(cmd, &line, limits),
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            parse_storage(cmd, &line.tokens, buf, line.len, limits)
        }
        b"incr" | b"decr" => arith(cmd, &line, limits),
        b"delete" => delete(&line, limits),
        b"touch" => touch(&line, limits),
        b"flush_all" => flush_all(&line),
        b"verbosity" => verbosity(&line),
        _ => other(cmd, &line),
    }
}

/// One command line at the front of the input, split into its tokens.
struct Line<'a> {
    /// The space-separated tokens (runs of spaces count as one; a `\r`
    /// before the `\n` is dropped). Never empty past [`parse`]'s check.
    tokens: Vec<&'a [u8]>,
    /// Bytes of the line, its `\n` included.
    len: usize,
}

/// Frames the command line at the front of `buf`: `None` while its `\n`
/// has not arrived; a line longer than the limit (a retrieval line's own
/// limit for `get`/`gat` lines) closes the connection.
fn split_line<'a>(buf: &'a [u8], limits: &Limits) -> Result<Option<Line<'a>>, ProtoError> {
    let limit = if is_multiget(buf) {
        limits.max_get_line().max(limits.max_line)
    } else {
        limits.max_line
    };
    // Only look at limit + 1 bytes so the verdict on an overlong line does
    // not depend on how much of it has arrived.
    let window = &buf[..buf.len().min(limit.saturating_add(1))];
    let Some(nl) = memchr::memchr(b'\n', window) else {
        if buf.len() > limit {
            return Err(ProtoError::close(
                Failure::client("line too long"),
                ReqCtx::text(Op::Get, false),
            ));
        }
        return Ok(None);
    };
    let mut line = &buf[..nl];
    if let Some((b'\r', rest)) = line.split_last() {
        line = rest;
    }
    let tokens = line
        .split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .collect();
    Ok(Some(Line {
        tokens,
        len: nl + 1,
    }))
}

impl Line<'_> {
    /// Tokens on the line.
    fn n(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the last token is `noreply`.
    fn last_noreply(&self) -> bool {
        self.tokens[self.n() - 1] == b"noreply"
    }

    /// Refuses the request with `f`, skipping the line.
    fn err(&self, f: Failure, op: Op, noreply: bool) -> ParseResult {
        Err(ProtoError::skip(f, ReqCtx::text(op, noreply), self.len))
    }

    /// The request `cmd`, consuming the line.
    fn ok(&self, cmd: Command, op: Op, noreply: bool) -> ParseResult {
        Ok(Some((
            Request {
                cmd,
                ctx: ReqCtx::text(op, noreply),
            },
            self.len,
        )))
    }
}

/// `get|gets <key>*`, `gat|gats <exptime> <key>*`.
fn retrieval(cmd: &[u8], line: &Line<'_>, limits: &Limits) -> ParseResult {
    let (op, touch_arg) = match cmd {
        b"get" => (Op::Get, false),
        b"gets" => (Op::Gets, false),
        b"gat" => (Op::Gat, true),
        _ => (Op::Gats, true),
    };
    let tokens = &line.tokens;
    if line.n() < 2 {
        return line.err(Failure::UnknownCommand, op, false);
    }
    let (touch, keys) = if touch_arg {
        match parse_i32(tokens[1]) {
            Some(t) => (Some(i64::from(t)), &tokens[2..]),
            None => {
                return line.err(Failure::client("invalid exptime argument"), op, false);
            }
        }
    } else {
        (None, &tokens[1..])
    };
    if keys.len() > limits.max_keys_per_get || !keys.iter().all(|k| k.len() <= limits.max_key) {
        return line.err(Failure::BAD_FORMAT, op, false);
    }
    line.ok(
        Command::Get {
            keys: keys.iter().map(|k| k.to_vec()).collect(),
            touch,
            with_cas: matches!(op, Op::Gets | Op::Gats),
            opts: GetOpts::default(),
        },
        op,
        false,
    )
}

/// `incr|decr <key> <value> [noreply]`.
fn arith(cmd: &[u8], line: &Line<'_>, limits: &Limits) -> ParseResult {
    let op = if cmd == b"incr" { Op::Incr } else { Op::Decr };
    let (n, tokens, last_noreply) = (line.n(), &line.tokens, line.last_noreply());
    if n != 3 && n != 4 {
        return line.err(Failure::UnknownCommand, op, false);
    }
    if tokens[1].len() > limits.max_key {
        return line.err(Failure::BAD_FORMAT, op, last_noreply);
    }
    let Some(delta) = parse_u64(tokens[2]) else {
        return line.err(
            Failure::client("invalid numeric delta argument"),
            op,
            last_noreply,
        );
    };
    line.ok(
        Command::Arith {
            key: tokens[1].to_vec(),
            incr: op == Op::Incr,
            delta,
            create: None,
            cas: None,
            ttl: None,
            new_cas: None,
        },
        op,
        last_noreply,
    )
}

/// `delete <key> [0] [noreply]`.
fn delete(line: &Line<'_>, limits: &Limits) -> ParseResult {
    let (n, tokens) = (line.n(), &line.tokens);
    if !(2..=4).contains(&n) {
        return line.err(Failure::UnknownCommand, Op::Delete, false);
    }
    let mut noreply = false;
    if n > 2 {
        // memcached still accepts the legacy hold time, but only 0.
        let hold_zero = tokens[2] == b"0";
        noreply = line.last_noreply();
        let valid = (n == 3 && (hold_zero || noreply)) || (n == 4 && hold_zero && noreply);
        if !valid {
            return line.err(
                Failure::client("bad command line format.  Usage: delete <key> [noreply]"),
                Op::Delete,
                noreply,
            );
        }
    }
    if tokens[1].len() > limits.max_key {
        return line.err(Failure::BAD_FORMAT, Op::Delete, noreply);
    }
    line.ok(
        Command::Delete {
            key: tokens[1].to_vec(),
            cas: None,
            opts: Default::default(),
        },
        Op::Delete,
        noreply,
    )
}

/// `touch <key> <exptime> [noreply]`.
fn touch(line: &Line<'_>, limits: &Limits) -> ParseResult {
    let (n, tokens, last_noreply) = (line.n(), &line.tokens, line.last_noreply());
    if n != 3 && n != 4 {
        return line.err(Failure::UnknownCommand, Op::Touch, false);
    }
    if tokens[1].len() > limits.max_key {
        return line.err(Failure::BAD_FORMAT, Op::Touch, last_noreply);
    }
    let Some(exptime) = parse_i32(tokens[2]) else {
        return line.err(
            Failure::client("invalid exptime argument"),
            Op::Touch,
            last_noreply,
        );
    };
    line.ok(
        Command::Touch {
            key: tokens[1].to_vec(),
            exptime: i64::from(exptime),
        },
        Op::Touch,
        last_noreply,
    )
}

/// `flush_all [delay] [noreply]`.
fn flush_all(line: &Line<'_>) -> ParseResult {
    let n = line.n();
    if n > 3 {
        return line.err(Failure::UnknownCommand, Op::FlushAll, false);
    }
    let noreply = n >= 2 && line.last_noreply();
    let mut delay = 0;
    if n != if noreply { 2 } else { 1 } {
        match parse_i32(line.tokens[1]) {
            Some(d) => delay = i64::from(d),
            None => {
                return line.err(
                    Failure::client("invalid exptime argument"),
                    Op::FlushAll,
                    noreply,
                );
            }
        }
    }
    line.ok(Command::FlushAll { delay }, Op::FlushAll, noreply)
}

/// `verbosity <n> [noreply]`.
fn verbosity(line: &Line<'_>) -> ParseResult {
    let (n, last_noreply) = (line.n(), line.last_noreply());
    if n != 2 && n != 3 {
        return line.err(Failure::UnknownCommand, Op::Verbosity, false);
    }
    match parse_u32(line.tokens[1]) {
        Some(level) => line.ok(Command::Verbosity { level }, Op::Verbosity, last_noreply),
        None => line.err(Failure::BAD_FORMAT, Op::Verbosity, last_noreply),
    }
}

/// `stats`, the administrative commands, `version`, `quit`, and anything
/// else: `ERROR`, or a silent close for what looks like an HTTP request.
fn other(cmd: &[u8], line: &Line<'_>) -> ParseResult {
    let tokens = &line.tokens;
    match cmd {
        b"stats" => line.ok(
            Command::Stats {
                args: tokens[1..].iter().map(|t| t.to_vec()).collect(),
            },
            Op::Stats,
            false,
        ),
        b"slabs" | b"watch" | b"shutdown" | b"lru_crawler" | b"lru" | b"cache_memlimit" => line.ok(
            Command::Admin {
                args: tokens.iter().map(|t| t.to_vec()).collect(),
            },
            Op::NoOp,
            false,
        ),
        b"version" => line.ok(Command::Version, Op::Version, false),
        b"quit" => line.ok(Command::Quit, Op::Quit, false),
        _ => {
            if tokens[line.n() - 1].starts_with(b"HTTP/") {
                Err(ProtoError {
                    failure: Failure::UnknownCommand,
                    ctx: ReqCtx::text(Op::NoOp, false),
                    recovery: Recovery::CloseSilently,
                    unlink: None,
                })
            } else {
                line.err(Failure::UnknownCommand, Op::NoOp, false)
            }
        }
    }
}

fn parse_storage(
    cmd: &[u8],
    tokens: &[&[u8]],
    buf: &[u8],
    line_len: usize,
    limits: &Limits,
) -> ParseResult {
    let (op, mode) = match cmd {
        b"set" => (Op::Set, StoreMode::Set),
        b"add" => (Op::Add, StoreMode::Add),
        b"replace" => (Op::Replace, StoreMode::Replace),
        b"append" => (Op::Append, StoreMode::Append),
        b"prepend" => (Op::Prepend, StoreMode::Prepend),
        _ => (Op::Cas, StoreMode::Cas),
    };
    let n = tokens.len();
    let want = if mode == StoreMode::Cas { 6 } else { 5 };
    if n != want && n != want + 1 {
        return Err(ProtoError::skip(
            Failure::UnknownCommand,
            ReqCtx::text(op, false),
            line_len,
        ));
    }
    let noreply = tokens[n - 1] == b"noreply";
    let ctx = ReqCtx::text(op, noreply);
    let bad = |ctx: ReqCtx| Err(ProtoError::skip(Failure::BAD_FORMAT, ctx, line_len));
    let key = tokens[1];
    if key.len() > limits.max_key {
        return bad(ctx);
    }
    let (Some(flags), Some(exptime), Some(vlen)) = (
        parse_u32(tokens[2]),
        parse_i32(tokens[3]),
        parse_i32(tokens[4]),
    ) else {
        return bad(ctx);
    };
    let cas = if mode == StoreMode::Cas {
        match parse_u64(tokens[5]) {
            Some(c) => Some(c),
            None => return bad(ctx),
        }
    } else {
        None
    };
    if !(0..=i32::MAX - 2).contains(&vlen) {
        return bad(ctx);
    }
    let vlen = vlen.unsigned_abs() as usize;
    let total = line_len + vlen + 2;
    if vlen > limits.max_item_size {
        return Err(ProtoError {
            failure: Failure::TooLarge,
            ctx,
            recovery: Recovery::Skip(total),
            unlink: (mode == StoreMode::Set).then(|| key.to_vec()),
        });
    }
    if buf.len() < total {
        return Ok(None);
    }
    if &buf[line_len + vlen..total] != b"\r\n" {
        return Err(ProtoError::skip(
            Failure::client("bad data chunk"),
            ctx,
            total,
        ));
    }
    Ok(Some((
        Request {
            cmd: Command::Store {
                mode,
                key: key.to_vec(),
                flags,
                exptime: i64::from(exptime),
                data: buf[line_len..line_len + vlen].to_vec(),
                cas,
                opts: StoreOpts::default(),
            },
            ctx,
        },
        total,
    )))
}

/// A `get`/`gets` line longer than this with no newline yet is answered
/// as it arrives ([`long_get`]).
pub(crate) const STREAM_GET_AT: usize = 16 << 10;

/// What [`long_get`] found at the front of the input.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LongGet {
    /// Parse normally.
    No,
    /// Answer these keys now (no `END`): the line goes on. The caller
    /// consumes `rest - name.len()` bytes and writes `name` (the command
    /// and a space) over the consumed bytes' end, so the rest of the line
    /// is again a `get` line.
    Chunk {
        op: Op,
        keys: Vec<Vec<u8>>,
        rest: usize,
        name: &'static [u8],
    },
    /// A streamed line ends with no keys left: answer `END`, consume this
    /// many bytes.
    End(usize),
    /// A key over the limit in a streamed line: `CLIENT_ERROR bad command
    /// line format`, then discard the rest of the line.
    BadKey,
}

/// memcached takes a `get` line of any length and answers its keys as they
/// arrive. A `get`/`gets` line with no newline in its first
/// [`STREAM_GET_AT`] bytes is answered in chunks of whole keys (up to the
/// last space buffered); `streaming` says an earlier chunk of this line
/// was answered (so a remainder without keys is the `END`).
pub(crate) fn long_get(buf: &[u8], limits: &Limits, streaming: bool) -> LongGet {
    let (op, name): (Op, &'static [u8]) = if buf.starts_with(b"get ") {
        (Op::Get, b"get ")
    } else if buf.starts_with(b"gets ") {
        (Op::Gets, b"gets ")
    } else {
        return LongGet::No;
    };
    let window = &buf[..buf.len().min(STREAM_GET_AT)];
    if let Some(nl) = memchr::memchr(b'\n', window) {
        if streaming && buf[name.len()..nl].iter().all(|&b| b == b' ' || b == b'\r') {
            return LongGet::End(nl + 1);
        }
        return LongGet::No;
    }
    if buf.len() < STREAM_GET_AT {
        return LongGet::No;
    }
    let Some(last) = memchr::memrchr(b' ', buf) else {
        return LongGet::No;
    };
    let keys: Vec<Vec<u8>> = buf[name.len()..last]
        .split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    if keys.is_empty() || keys.iter().any(|k| k.len() > limits.max_key) {
        return LongGet::BadKey;
    }
    LongGet::Chunk {
        op,
        keys,
        rest: last + 1,
        name,
    }
}
