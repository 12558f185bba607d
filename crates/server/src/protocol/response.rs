//! Replies: what the store answers ([`Response`]) and their encoding in the
//! request's protocol ([`encode`]).
//!
//! Text (memcached `protocol.txt`):
//!
//! ```text
//! hit       VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n   (cas for gets/gats)
//! end       END\r\n   (after the hits of a get/gets/gat/gats; misses print nothing)
//! store     STORED | NOT_STORED | EXISTS | NOT_FOUND
//! delete    DELETED | NOT_FOUND        touch  TOUCHED | NOT_FOUND
//! incr/decr <value> | NOT_FOUND        flush_all/verbosity  OK
//! version   VERSION <v>                stats  STAT <name> <value>\r\n ... END\r\n
//! errors    ERROR | CLIENT_ERROR <msg> | SERVER_ERROR <msg>
//! ```
//!
//! `noreply` suppresses every text reply, errors included (memcached's
//! `out_string`).
//!
//! Meta: see [`super::meta`]; return flags are echoed in request order
//! (`O` and `k` also on `EN`/`NF`/`NS`/`EX`); `q` hides `EN` (mg) and `HD`
//! (ms, md, ma); errors are always sent.
//!
//! Binary: one response packet per request (magic 0x81, the request's
//! opcode and opaque, status, CAS). Quiet opcodes send nothing on success,
//! GetQ/GetKQ/GATQ/GATKQ nothing on a miss; errors are always sent, with
//! memcached's message as the body. memcached's status mapping is kept:
//! an Add that finds the key is `KeyExists`, a Replace that misses
//! `KeyNotFound`, an Append/Prepend that misses `ItemNotStored`.

use super::binary::{self, HEADER_LEN, Header, RES_MAGIC, Status};
use super::{Failure, MetaCtx, MetaRet, Op, Proto, ReqCtx};

/// An item as the store shows it to a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemView<'a> {
    /// The client key.
    pub key: &'a [u8],
    /// The client flags.
    pub flags: u32,
    /// The value's bytes.
    pub value: &'a [u8],
    /// The item's CAS.
    pub cas: u64,
    /// Seconds of life left (`None` = never expires): meta `t`.
    pub ttl: Option<u64>,
    /// Seconds since the last access: meta `l`.
    pub last_access: u64,
    /// Fetched before this request: meta `h`.
    pub fetched: bool,
    /// Marked stale by `md I` / `ms I`: meta `X`.
    pub stale: bool,
    /// This request won the right to recache: meta `W`.
    pub win: bool,
    /// Another client already won: meta `Z`.
    pub token_sent: bool,
}

impl<'a> ItemView<'a> {
    /// A plain item (no meta state).
    pub fn new(key: &'a [u8], flags: u32, value: &'a [u8], cas: u64) -> Self {
        ItemView {
            key,
            flags,
            value,
            cas,
            ttl: None,
            last_access: 0,
            fetched: false,
            stale: false,
            win: false,
            token_sent: false,
        }
    }
}

/// The store's answer to one request (or, for a multi-key text get, to one
/// of its keys: send a `Hit`/`Miss` per key, then `End`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response<'a> {
    /// A retrieval found the item.
    Hit(ItemView<'a>),
    /// A retrieval (or `me`) missed `key`.
    Miss {
        /// The key that missed (meta `k` echoes it).
        key: &'a [u8],
    },
    /// End of a retrieval: `END` in text, nothing elsewhere.
    End,
    /// A store succeeded; `cas` is the item's new CAS.
    Stored {
        /// The item's new CAS.
        cas: u64,
    },
    /// add/replace/append/prepend condition not met.
    NotStored,
    /// CAS mismatch.
    Exists,
    /// The item does not exist (cas store, delete, incr, touch).
    NotFound,
    /// The delete removed the item (or marked it stale: meta `I`).
    Deleted,
    /// Touch succeeded (binary replies the flags and CAS).
    Touched {
        /// The item's client flags.
        flags: u32,
        /// The item's CAS after the touch.
        cas: u64,
    },
    /// incr/decr result; `ttl` for meta `t`.
    Arith {
        /// The new value.
        value: u64,
        /// The item's new CAS.
        cas: u64,
        /// Seconds of life left (`None`: never expires).
        ttl: Option<u64>,
    },
    /// flush_all, verbosity, binary quit/noop, meta `mn`.
    Ok,
    /// The version string (`VERSION <s>`).
    Version(&'a str),
    /// Statistics, in order.
    Stats(&'a [(String, String)]),
    /// A bare status line (text/meta; e.g. `RESET`). Binary: success.
    Line(&'a str),
    /// Meta `me` hit.
    Debug(ItemView<'a>),
    /// The request failed: the error in its protocol's form.
    Error(Failure),
}

/// Append the reply `resp` to the request framed by `ctx` to `out`.
pub fn encode(resp: &Response<'_>, ctx: &ReqCtx, out: &mut Vec<u8>) {
    match ctx.proto {
        Proto::Text => encode_text(resp, ctx, out),
        Proto::Meta => encode_meta(resp, ctx, out),
        Proto::Binary => encode_binary(resp, ctx, out),
    }
}

/// Append the decimal digits of `v`.
pub(crate) fn push_u64(out: &mut Vec<u8>, v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut v = v;
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

pub(crate) fn push_i64(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    push_u64(out, v.unsigned_abs());
}

fn line(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(s);
    out.extend_from_slice(b"\r\n");
}

fn encode_text(resp: &Response<'_>, ctx: &ReqCtx, out: &mut Vec<u8>) {
    if ctx.noreply {
        return;
    }
    match resp {
        Response::Hit(it) => {
            out.extend_from_slice(b"VALUE ");
            out.extend_from_slice(it.key);
            out.push(b' ');
            push_u64(out, u64::from(it.flags));
            out.push(b' ');
            push_u64(out, it.value.len() as u64);
            if matches!(ctx.op, Op::Gets | Op::Gats) {
                out.push(b' ');
                push_u64(out, it.cas);
            }
            out.extend_from_slice(b"\r\n");
            line(out, it.value);
        }
        Response::Miss { .. } => {}
        Response::End => line(out, b"END"),
        Response::Stored { .. } => line(out, b"STORED"),
        Response::NotStored => line(out, b"NOT_STORED"),
        Response::Exists => line(out, b"EXISTS"),
        Response::NotFound => line(out, b"NOT_FOUND"),
        Response::Deleted => line(out, b"DELETED"),
        Response::Touched { .. } => line(out, b"TOUCHED"),
        Response::Arith { value, .. } => {
            push_u64(out, *value);
            out.extend_from_slice(b"\r\n");
        }
        Response::Ok => line(out, b"OK"),
        Response::Version(v) => {
            out.extend_from_slice(b"VERSION ");
            line(out, v.as_bytes());
        }
        Response::Stats(stats) => {
            for (k, v) in stats.iter() {
                out.extend_from_slice(b"STAT ");
                out.extend_from_slice(k.as_bytes());
                out.push(b' ');
                line(out, v.as_bytes());
            }
            line(out, b"END");
        }
        Response::Line(s) => line(out, s.as_bytes()),
        Response::Debug(it) => encode_debug(it, &MetaCtx::default(), out),
        Response::Error(f) => line(out, f.line().as_bytes()),
    }
}

/// Values a meta reply may echo for its return flags.
#[derive(Default)]
struct Echo {
    cas: u64,
    flags: u32,
    fetched: bool,
    last_access: u64,
    size: u64,
    ttl: Option<u64>,
}

/// Write the return flags of `m` (`full = None`: only `O` and `k`, as on
/// a miss).
fn write_flags(out: &mut Vec<u8>, m: &MetaCtx, full: Option<&Echo>) {
    for r in &m.ret {
        match (r, full) {
            (MetaRet::Opaque(tok), _) => {
                out.extend_from_slice(b" O");
                out.extend_from_slice(tok);
            }
            (MetaRet::Key, _) => {
                out.extend_from_slice(b" k");
                out.extend_from_slice(&m.wire_key);
                if m.base64 {
                    out.extend_from_slice(b" b");
                }
            }
            (_, None) => {}
            (MetaRet::Cas, Some(e)) => {
                out.extend_from_slice(b" c");
                push_u64(out, e.cas);
            }
            (MetaRet::Flags, Some(e)) => {
                out.extend_from_slice(b" f");
                push_u64(out, u64::from(e.flags));
            }
            (MetaRet::Hit, Some(e)) => {
                out.extend_from_slice(if e.fetched { b" h1" } else { b" h0" });
            }
            (MetaRet::LastAccess, Some(e)) => {
                out.extend_from_slice(b" l");
                push_u64(out, e.last_access);
            }
            (MetaRet::Size, Some(e)) => {
                out.extend_from_slice(b" s");
                push_u64(out, e.size);
            }
            (MetaRet::Ttl, Some(e)) => {
                out.extend_from_slice(b" t");
                match e.ttl {
                    Some(t) => push_u64(out, t),
                    None => out.extend_from_slice(b"-1"),
                }
            }
        }
    }
}

fn status_line(out: &mut Vec<u8>, code: &[u8], m: &MetaCtx, full: Option<&Echo>) {
    out.extend_from_slice(code);
    write_flags(out, m, full);
    out.extend_from_slice(b"\r\n");
}

fn encode_debug(it: &ItemView<'_>, m: &MetaCtx, out: &mut Vec<u8>) {
    out.extend_from_slice(b"ME ");
    out.extend_from_slice(if m.wire_key.is_empty() {
        it.key
    } else {
        &m.wire_key
    });
    out.extend_from_slice(b" exp=");
    match it.ttl {
        Some(t) => push_u64(out, t),
        None => out.extend_from_slice(b"-1"),
    }
    out.extend_from_slice(b" la=");
    push_u64(out, it.last_access);
    out.extend_from_slice(b" cas=");
    push_u64(out, it.cas);
    out.extend_from_slice(if it.fetched {
        b" fetch=yes"
    } else {
        b" fetch=no"
    });
    out.extend_from_slice(b" cls=1 size=");
    push_u64(out, (it.key.len() + it.value.len()) as u64);
    out.extend_from_slice(b"\r\n");
}

fn encode_meta(resp: &Response<'_>, ctx: &ReqCtx, out: &mut Vec<u8>) {
    let default = MetaCtx::default();
    let m = ctx.meta.as_deref().unwrap_or(&default);
    let q = ctx.noreply;
    match resp {
        Response::Hit(it) => {
            let e = Echo {
                cas: it.cas,
                flags: it.flags,
                fetched: it.fetched,
                last_access: it.last_access,
                size: it.value.len() as u64,
                ttl: it.ttl,
            };
            if m.value {
                out.extend_from_slice(b"VA ");
                push_u64(out, it.value.len() as u64);
            } else {
                out.extend_from_slice(b"HD");
            }
            write_flags(out, m, Some(&e));
            // memcached's order: Z before W so a client never sees both
            // from one request's point of view; X for stale.
            if it.token_sent {
                out.extend_from_slice(b" Z");
            }
            if it.stale {
                out.extend_from_slice(b" X");
            }
            if it.win {
                out.extend_from_slice(b" W");
            }
            out.extend_from_slice(b"\r\n");
            if m.value {
                line(out, it.value);
            }
        }
        Response::Miss { .. } => {
            if ctx.op == Op::MetaDebug {
                line(out, b"EN");
            } else if !q {
                status_line(out, b"EN", m, None);
            }
        }
        Response::End => {}
        Response::Stored { cas } => {
            if !q {
                let e = Echo {
                    cas: *cas,
                    ..Echo::default()
                };
                status_line(out, b"HD", m, Some(&e));
            }
        }
        Response::NotStored | Response::Exists | Response::NotFound => {
            let code: &[u8] = match resp {
                Response::NotStored => b"NS",
                Response::Exists => b"EX",
                _ => b"NF",
            };
            // ms echoes c (memcached sends 0 when nothing was stored).
            let e = Echo::default();
            let full = (ctx.op == Op::MetaSet).then_some(&e);
            status_line(out, code, m, full);
        }
        Response::Deleted | Response::Ok | Response::Touched { .. } => {
            if ctx.op == Op::MetaNoOp {
                line(out, b"MN");
            } else if !q {
                status_line(out, b"HD", m, Some(&Echo::default()));
            }
        }
        Response::Arith { value, cas, ttl } => {
            if q {
                return;
            }
            let mut digits = Vec::with_capacity(20);
            push_u64(&mut digits, *value);
            let e = Echo {
                cas: *cas,
                ttl: *ttl,
                size: digits.len() as u64,
                ..Echo::default()
            };
            if m.value {
                out.extend_from_slice(b"VA ");
                push_u64(out, digits.len() as u64);
            } else {
                out.extend_from_slice(b"HD");
            }
            write_flags(out, m, Some(&e));
            out.extend_from_slice(b"\r\n");
            if m.value {
                line(out, &digits);
            }
        }
        Response::Debug(it) => encode_debug(it, m, out),
        Response::Version(_) | Response::Stats(_) | Response::Line(_) => {
            let text = ReqCtx::text(ctx.op, false);
            encode_text(resp, &text, out);
        }
        Response::Error(f) => line(out, f.line().as_bytes()),
    }
}

/// Append one binary response packet.
pub(crate) fn binary_packet(
    out: &mut Vec<u8>,
    ctx: &ReqCtx,
    status: Status,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    let body = extras.len() + key.len() + value.len();
    out.reserve(HEADER_LEN + body);
    Header {
        magic: RES_MAGIC,
        opcode: ctx.opcode,
        key_len: key.len() as u16,
        extras_len: extras.len() as u8,
        data_type: 0,
        vbucket_or_status: status as u16,
        body_len: body as u32,
        opaque: ctx.opaque,
        cas,
    }
    .write(out);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

fn encode_binary(resp: &Response<'_>, ctx: &ReqCtx, out: &mut Vec<u8>) {
    let quiet = ctx.noreply;
    let err = |out: &mut Vec<u8>, status: Status, msg: &str| {
        binary_packet(out, ctx, status, 0, &[], &[], msg.as_bytes());
    };
    match resp {
        Response::Hit(it) => {
            let key: &[u8] = if binary::returns_key(ctx.opcode) {
                it.key
            } else {
                &[]
            };
            binary_packet(
                out,
                ctx,
                Status::NoError,
                it.cas,
                &it.flags.to_be_bytes(),
                key,
                it.value,
            );
        }
        Response::Miss { key } => {
            if quiet {
                return;
            }
            if binary::returns_key(ctx.opcode) {
                binary_packet(out, ctx, Status::KeyNotFound, 0, &[], key, &[]);
            } else {
                err(out, Status::KeyNotFound, "Not found");
            }
        }
        Response::End => {}
        Response::Stored { cas } => {
            if !quiet {
                binary_packet(out, ctx, Status::NoError, *cas, &[], &[], &[]);
            }
        }
        Response::NotStored => match ctx.op {
            Op::Add => err(out, Status::KeyExists, "Data exists for key."),
            Op::Replace => err(out, Status::KeyNotFound, "Not found"),
            _ => err(out, Status::ItemNotStored, "Not stored."),
        },
        Response::Exists => err(out, Status::KeyExists, "Data exists for key."),
        Response::NotFound => err(out, Status::KeyNotFound, "Not found"),
        Response::Deleted | Response::Ok | Response::Line(_) => {
            if !quiet {
                binary_packet(out, ctx, Status::NoError, 0, &[], &[], &[]);
            }
        }
        Response::Touched { flags, cas } => {
            binary_packet(
                out,
                ctx,
                Status::NoError,
                *cas,
                &flags.to_be_bytes(),
                &[],
                &[],
            );
        }
        Response::Arith { value, cas, .. } => {
            if !quiet {
                binary_packet(
                    out,
                    ctx,
                    Status::NoError,
                    *cas,
                    &[],
                    &[],
                    &value.to_be_bytes(),
                );
            }
        }
        Response::Version(v) => {
            binary_packet(out, ctx, Status::NoError, 0, &[], &[], v.as_bytes());
        }
        Response::Stats(stats) => {
            for (k, v) in stats.iter() {
                binary_packet(
                    out,
                    ctx,
                    Status::NoError,
                    0,
                    &[],
                    k.as_bytes(),
                    v.as_bytes(),
                );
            }
            binary_packet(out, ctx, Status::NoError, 0, &[], &[], &[]);
        }
        Response::Debug(_) => binary_packet(out, ctx, Status::NoError, 0, &[], &[], &[]),
        Response::Error(f) => {
            let (status, msg) = f.binary_status();
            err(out, status, msg);
        }
    }
}

/// Append the reply to a request that failed to parse (see
/// [`super::ProtoError`]); nothing for [`super::Recovery::CloseSilently`].
pub fn encode_error(e: &super::ProtoError, out: &mut Vec<u8>) {
    if e.recovery == super::Recovery::CloseSilently {
        return;
    }
    encode(&Response::Error(e.failure.clone()), &e.ctx, out);
}
