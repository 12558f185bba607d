//! Meta commands (memcached 1.6 `protocol.txt` "Meta Commands").
//!
//! ```text
//! mg <key> <flag>*\r\n                 -> VA <size> <flag>*\r\n<data>\r\n | HD <flag>*\r\n | EN\r\n
//! ms <key> <datalen> <flag>*\r\n<data>\r\n -> HD | NS | EX | NF <flag>*\r\n
//! md <key> <flag>*\r\n                 -> HD | NF | EX <flag>*\r\n
//! ma <key> <flag>*\r\n                 -> HD | VA <size> | NF | NS | EX <flag>*\r\n[<number>\r\n]
//! me <key> [b]\r\n                     -> ME <key> exp=.. la=.. cas=.. fetch=.. cls=.. size=..\r\n | EN\r\n
//! mn\r\n                               -> MN\r\n
//! ```
//!
//! A flag is one character, optionally followed by a token (`T30`,
//! `Oabc`). Accepted flags (memcached's `_meta_flag_preparse` set):
//!
//! * all: `b` base64 key, `O<opaque>` (<= 32 bytes, echoed), `k` echo key,
//!   `q` quiet (suppresses `EN` for mg and `HD` for ms/md/ma; errors are
//!   always sent), `P`/`L` (proxy hints, ignored as memcached does).
//! * mg: `v c f h l s t` (return value/CAS/flags/hit-before/last-access/
//!   size/TTL), `T<ttl>` touch, `N<ttl>` vivify on miss, `R<ttl>` recache
//!   win, `u` no LRU bump, `E<cas>` (CAS of a vivified item).
//! * ms: `<datalen>` positional, `c` return CAS, `C<cas>` compare,
//!   `F<flags>`, `T<ttl>`, `M<mode>` (`E` add, `A` append, `P` prepend,
//!   `R` replace, `S` set; lower case accepted), `I` invalidate, `N<ttl>`
//!   vivify for append modes, `E<cas>`.
//! * md: `C<cas>`, `I` mark stale, `T<ttl>` (with `I`), `x` drop value,
//!   `E<cas>`.
//! * ma: `N<ttl>` create on miss, `J<initial>`, `D<delta>` (default 1),
//!   `T<ttl>`, `M<mode>` (`I`/`+` incr, `D`/`-` decr; lower case accepted),
//!   `C<cas>`, `E<cas>`, `v c t` return value/CAS/TTL.
//!
//! # Stale items and the recache win (memcached 1.6 semantics)
//!
//! * `mg … N<ttl>` on a miss creates an empty item (0 bytes, flags 0) with
//!   that TTL and answers it as a hit with `W`: this client won the right
//!   to recache. Later fetches see `Z` (someone else won) until the item
//!   is replaced.
//! * `mg … R<ttl>` answers `W` when the item has a TTL, it is below the
//!   token, and no win was sent yet.
//! * `md … I [T<ttl>]` keeps the item but marks it stale, gives it a new
//!   CAS, reopens the win and (with `T`) sets its TTL; `T` without `I` is
//!   ignored. A stale item is answered with `X`, and its first fetch wins
//!   (`X W`; later ones `Z X`).
//! * `ms … C<cas> I`: a CAS *older* than the item's still stores, as a
//!   stale item that keeps the old TTL and win state (a newer mismatching
//!   CAS is `EX`); without `C`, `I` does nothing.
//! * Return order: the requested flags, then `Z`, `X`, `W`.
//! * mg's `T`, `N`, `R` and ma's `N`, `T` act in request order and `t`
//!   reports the TTL at its own place ([`MetaCtx::order`]), as memcached's
//!   flag loop does: `mg k t T30` shows the TTL before the touch.
//!
//! The stale mark and the win are fields of the stored item
//! ([`crate::store`]'s item format), written durably before the reply like
//! any other change, so a crash never lets a second client win.
//! `cargo test -p ferrite --test serve meta_session` replays a session of
//! these commands against Debian's memcached and compares every reply byte
//! for byte.
//!
//! Flags a command does not use are accepted and ignored, as memcached
//! does. Any other character is `CLIENT_ERROR invalid flag`; a repeated one
//! `CLIENT_ERROR duplicate flag`. `W`, `X` and `Z` are reply flags only:
//! sent in a request they are `CLIENT_ERROR invalid flag`, as in memcached.
//! md and ma answer every flag error (unknown, repeated, a bad token; not
//! an overlong opaque) with memcached's `CLIENT_ERROR invalid or duplicate
//! flag`.
//!
//! Not supported, or not as memcached:
//! * ms `S<size>` (the pre-1.6 spelling of the data length): `CLIENT_ERROR
//!   invalid flag`.
//! * ms `s` (return size): accepted, not echoed, like the memcached 1.6
//!   releases that predate it.
//! * ms `N<ttl>` follows memcached's later releases (an append or prepend
//!   that misses creates the item); memcached 1.6.18 (Debian 12) accepts
//!   the flag and answers `NS`.
//! * mg `h` (fetched before) is kept in the shard's DRAM, not in the
//!   item (recording every first fetch durably would make reads writes):
//!   like memcached's, it is lost on a restart. `u` leaves it unset and
//!   does not mark the item recently used for eviction.
//! * mg `l` is the seconds since the item was last written. memcached
//!   also counts a fetch as an access, but records one at most once a
//!   minute, so the two agree for a minute after each write.
//!
//! Meta errors are always replied (memcached's `out_errstring`), whatever
//! `q` says. A failed `ms` swallows its data block when the length token was
//! readable, so the connection stays in step.

use super::{
    Command, DeleteOpts, Failure, GetOpts, Limits, MetaCtx, MetaRet, Op, ParseResult, ProtoError,
    Recovery, ReqCtx, Request, StoreMode, StoreOpts, base64, parse_i32, parse_u32, parse_u64,
};

/// memcached's `MFLAG_MAX_OPT_LENGTH`: at most 20 tokens including the
/// command, the key and its terminator.
const MAX_TOKENS: usize = 19;
/// memcached's `MFLAG_MAX_OPAQUE_LENGTH`.
const MAX_OPAQUE: usize = 32;

/// The parsed flags of one meta command.
#[derive(Default)]
struct Flags {
    ret: Vec<MetaRet>,
    b: bool,
    q: bool,
    v: bool,
    u: bool,
    x: bool,
    invalidate: bool,
    t_ttl: Option<i64>,
    n_ttl: Option<i64>,
    r_ttl: Option<i64>,
    client_flags: Option<u32>,
    cas: Option<u64>,
    new_cas: Option<u64>,
    mode: Option<u8>,
    initial: Option<u64>,
    delta: Option<u64>,
    /// `T N R t` in request order (see [`MetaCtx::order`]).
    order: Vec<u8>,
}

fn bad_token() -> Failure {
    Failure::client("bad token in command line format")
}

/// Parse the flag tokens; `echo` lists the return flags this command
/// copies into its reply.
fn parse_flags(tokens: &[&[u8]], echo: &[u8]) -> Result<Flags, Failure> {
    let mut seen = [false; 128];
    let mut f = Flags::default();
    for &t in tokens {
        let c = t[0];
        let arg = &t[1..];
        if c >= 128 {
            return Err(Failure::client("invalid flag"));
        }
        if seen[c as usize] {
            return Err(Failure::client("duplicate flag"));
        }
        seen[c as usize] = true;
        if matches!(c, b'T' | b'N' | b'R' | b't') {
            f.order.push(c);
        }
        let ttl = || parse_i32(arg).map(i64::from).ok_or_else(bad_token);
        match c {
            b'b' => f.b = true,
            b'q' => f.q = true,
            b'v' => f.v = true,
            b'u' => f.u = true,
            b'x' => f.x = true,
            b'I' => f.invalidate = true,
            b'P' | b'L' => {}
            b'O' => {
                if arg.len() > MAX_OPAQUE {
                    return Err(Failure::client("opaque token too long"));
                }
            }
            b'c' | b'f' | b'h' | b'k' | b'l' | b's' | b't' => {}
            b'T' => f.t_ttl = Some(ttl()?),
            b'N' => f.n_ttl = Some(ttl()?),
            b'R' => f.r_ttl = Some(ttl()?),
            b'F' => f.client_flags = Some(parse_u32(arg).ok_or(Failure::BAD_FORMAT)?),
            b'C' => f.cas = Some(parse_u64(arg).ok_or_else(bad_token)?),
            b'E' => f.new_cas = Some(parse_u64(arg).ok_or_else(bad_token)?),
            b'M' => {
                if arg.len() != 1 {
                    return Err(Failure::client("incorrect length for M token"));
                }
                f.mode = Some(arg[0]);
            }
            b'J' => {
                f.initial =
                    Some(parse_u64(arg).ok_or(Failure::client("invalid numeric initial value"))?)
            }
            b'D' => {
                f.delta =
                    Some(parse_u64(arg).ok_or(Failure::client("invalid numeric delta value"))?)
            }
            _ => return Err(Failure::client("invalid flag")),
        }
        if echo.contains(&c) {
            f.ret.push(match c {
                b'c' => MetaRet::Cas,
                b'f' => MetaRet::Flags,
                b'h' => MetaRet::Hit,
                b'k' => MetaRet::Key,
                b'l' => MetaRet::LastAccess,
                b'O' => MetaRet::Opaque(arg.to_vec()),
                b's' => MetaRet::Size,
                _ => MetaRet::Ttl,
            });
        }
    }
    Ok(f)
}

/// Parse a meta command line whose command is `m` + `sub`.
pub(crate) fn parse(
    sub: u8,
    tokens: &[&[u8]],
    buf: &[u8],
    line_len: usize,
    limits: &Limits,
) -> ParseResult {
    let op = meta_op(sub, line_len)?;
    let fail = |f: Failure, n: usize| Err(refuse(op, f, n));
    if op == Op::MetaNoOp {
        return Ok(Some((
            Request {
                cmd: Command::NoOp,
                ctx: ReqCtx::meta(op, false, MetaCtx::default()),
            },
            line_len,
        )));
    }
    if tokens.len() < 2 {
        // memcached: ERROR for mg/ms/md/ma, bad format for me.
        let f = if op == Op::MetaDebug {
            Failure::BAD_FORMAT
        } else {
            Failure::UnknownCommand
        };
        return fail(f, line_len);
    }
    let wire_key = tokens[1];
    if wire_key.len() > limits.max_key {
        return fail(Failure::BAD_FORMAT, line_len);
    }
    if op == Op::MetaDebug {
        return debug(tokens, line_len);
    }
    let (flag_start, data) = data_len(op, tokens, line_len)?;
    if tokens.len() > MAX_TOKENS {
        return fail(Failure::client("options flags are too long"), line_len);
    }
    // After the length is known, errors skip the data block too.
    let skip = data.map_or(line_len, |(_, total)| total);
    let mut f = flags(op, &tokens[flag_start..], skip)?;
    let key = if f.b {
        match base64::decode(wire_key) {
            Some(k) => k,
            None => return fail(Failure::client("error decoding key"), skip),
        }
    } else {
        wire_key.to_vec()
    };
    let ctx = ReqCtx::meta(op, f.q, reply_ctx(op, &mut f, wire_key));
    let cmd = match op {
        Op::MetaGet => Command::Get {
            keys: vec![key],
            touch: f.t_ttl,
            with_cas: true,
            opts: GetOpts {
                vivify: f.n_ttl,
                recache: f.r_ttl,
                no_bump: f.u,
                new_cas: f.new_cas,
            },
        },
        Op::MetaDelete => Command::Delete {
            key,
            cas: f.cas,
            opts: DeleteOpts {
                invalidate: f.invalidate,
                ttl: f.t_ttl,
                drop_value: f.x,
                new_cas: f.new_cas,
            },
        },
        Op::MetaArith => arith(key, &f).map_err(|e| refuse(op, e, skip))?,
        _ => {
            let (vlen, total) = data.unwrap_or((0, line_len));
            return store(key, &f, ctx, buf, (line_len, vlen, total), limits);
        }
    };
    Ok(Some((Request { cmd, ctx }, line_len)))
}

/// A refusal of a meta request `op`, skipping `n` bytes.
fn refuse(op: Op, f: Failure, n: usize) -> ProtoError {
    ProtoError::skip(f, ReqCtx::meta(op, false, MetaCtx::default()), n)
}

/// The meta command `m` + `sub`; any other is `ERROR`, skipping the line.
fn meta_op(sub: u8, line_len: usize) -> Result<Op, ProtoError> {
    Ok(match sub {
        b'g' => Op::MetaGet,
        b's' => Op::MetaSet,
        b'd' => Op::MetaDelete,
        b'a' => Op::MetaArith,
        b'e' => Op::MetaDebug,
        b'n' => Op::MetaNoOp,
        _ => {
            return Err(ProtoError::skip(
                Failure::UnknownCommand,
                ReqCtx::text(Op::NoOp, false),
                line_len,
            ));
        }
    })
}

/// `me <key> [b]`: the key (base64 with `b`), no flags.
fn debug(tokens: &[&[u8]], line_len: usize) -> ParseResult {
    let op = Op::MetaDebug;
    let wire_key = tokens[1];
    let base64 = tokens.get(2).is_some_and(|t| *t == b"b");
    let key = if base64 {
        match base64::decode(wire_key) {
            Some(k) => k,
            None => return Err(refuse(op, Failure::BAD_FORMAT, line_len)),
        }
    } else {
        wire_key.to_vec()
    };
    let meta = MetaCtx {
        wire_key: wire_key.to_vec(),
        base64,
        ..MetaCtx::default()
    };
    Ok(Some((
        Request {
            cmd: Command::MetaDebug { key },
            ctx: ReqCtx::meta(op, false, meta),
        },
        line_len,
    )))
}

/// Where the flags start, and for `ms` (which carries its data length
/// before the flags) `(data length, bytes of line and data block)`.
fn data_len(
    op: Op,
    tokens: &[&[u8]],
    line_len: usize,
) -> Result<(usize, Option<(usize, usize)>), ProtoError> {
    if op != Op::MetaSet {
        return Ok((2, None));
    }
    if tokens.len() < 3 {
        return Err(refuse(op, Failure::BAD_FORMAT, line_len));
    }
    match parse_i32(tokens[2]) {
        Some(v) if (0..=i32::MAX - 2).contains(&v) => {
            let vlen = v.unsigned_abs() as usize;
            Ok((3, Some((vlen, line_len + vlen + 2))))
        }
        _ => Err(refuse(op, Failure::BAD_FORMAT, line_len)),
    }
}

/// The flags of `op`, refused as memcached words it (skipping `skip`
/// bytes).
fn flags(op: Op, tokens: &[&[u8]], skip: usize) -> Result<Flags, ProtoError> {
    let echo: &[u8] = match op {
        Op::MetaGet => b"cfhklOst",
        Op::MetaSet => b"Okc",
        Op::MetaDelete => b"Ok",
        _ => b"ctOk",
    };
    match parse_flags(tokens, echo) {
        Ok(f) => Ok(f),
        // memcached's md and ma do not pass the flag parser's message on
        // (only an overlong opaque keeps its own).
        Err(e)
            if matches!(op, Op::MetaDelete | Op::MetaArith)
                && e != Failure::client("opaque token too long") =>
        {
            Err(refuse(
                op,
                Failure::client("invalid or duplicate flag"),
                skip,
            ))
        }
        Err(e) => Err(refuse(op, e, skip)),
    }
}

/// What the reply of `op` echoes (its return flags and the modifiers it
/// acts on, in request order), taken out of `f`.
fn reply_ctx(op: Op, f: &mut Flags, wire_key: &[u8]) -> MetaCtx {
    // Only the modifiers the command acts on (ma accepts `R` and ignores
    // it, so it has no place in its order; found by fuzzing: the client
    // encoder could not write such an order back).
    let acts: &[u8] = match op {
        Op::MetaGet => b"TNRt",
        Op::MetaArith => b"NTt",
        _ => b"",
    };
    let order: Vec<u8> = std::mem::take(&mut f.order)
        .into_iter()
        .filter(|c| acts.contains(c))
        .collect();
    MetaCtx {
        ret: std::mem::take(&mut f.ret),
        wire_key: wire_key.to_vec(),
        base64: f.b,
        value: f.v,
        order,
    }
}

/// `ma`: increment (mode `I`, the default) or decrement (`D`).
fn arith(key: Vec<u8>, f: &Flags) -> Result<Command, Failure> {
    let incr = match f.mode {
        None | Some(b'I' | b'i' | b'+') => true,
        Some(b'D' | b'd' | b'-') => false,
        Some(_) => return Err(Failure::client("invalid mode for ma M token")),
    };
    Ok(Command::Arith {
        key,
        incr,
        delta: f.delta.unwrap_or(1),
        create: f.n_ttl.map(|ttl| (f.initial.unwrap_or(0), ttl)),
        cas: f.cas,
        ttl: f.t_ttl,
        new_cas: f.new_cas,
    })
}

/// `ms`: the store of its mode, once its data block (`vlen` bytes after
/// the `line_len` bytes of the line, `total` bytes in all) has arrived.
fn store(
    key: Vec<u8>,
    f: &Flags,
    ctx: ReqCtx,
    buf: &[u8],
    (line_len, vlen, total): (usize, usize, usize),
    limits: &Limits,
) -> ParseResult {
    let op = Op::MetaSet;
    let mut mode = match f.mode {
        None | Some(b'S' | b's') => StoreMode::Set,
        Some(b'E' | b'e') => StoreMode::Add,
        Some(b'A' | b'a') => StoreMode::Append,
        Some(b'P' | b'p') => StoreMode::Prepend,
        Some(b'R' | b'r') => StoreMode::Replace,
        // The data length is known: the refusal skips the data block too.
        Some(_) => {
            return Err(refuse(
                op,
                Failure::client("invalid mode for ms M token"),
                total,
            ));
        }
    };
    // memcached: a CAS turns set and replace into a CAS store; add
    // ignores it; append/prepend check it.
    let cas = match mode {
        StoreMode::Set | StoreMode::Replace if f.cas.is_some() => {
            mode = StoreMode::Cas;
            f.cas
        }
        StoreMode::Add => None,
        _ => f.cas,
    };
    if vlen > limits.max_item_size {
        return Err(ProtoError {
            failure: Failure::TooLarge,
            ctx: ReqCtx::meta(op, false, MetaCtx::default()),
            recovery: Recovery::Skip(total),
            unlink: Some(key),
        });
    }
    if buf.len() < total {
        return Ok(None);
    }
    if &buf[line_len + vlen..total] != b"\r\n" {
        return Err(refuse(op, Failure::client("bad data chunk"), total));
    }
    let vivify = matches!(mode, StoreMode::Append | StoreMode::Prepend)
        .then_some(f.n_ttl)
        .flatten();
    Ok(Some((
        Request {
            cmd: Command::Store {
                mode,
                key,
                flags: f.client_flags.unwrap_or(0),
                exptime: f.t_ttl.unwrap_or(0),
                data: buf[line_len..line_len + vlen].to_vec(),
                cas,
                opts: StoreOpts {
                    invalidate: f.invalidate,
                    vivify,
                    new_cas: f.new_cas,
                },
            },
            ctx,
        },
        total,
    )))
}
