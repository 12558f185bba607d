//! The client side of the codec: write a [`Request`] in its protocol.
//!
//! Used by the tests (every request written here parses back to itself)
//! and by load generators and crash tests that talk to the server.
//! The request must be one [`super::parse`] can produce for its protocol:
//! e.g. a text `Get` has no meta options, a binary command has a binary
//! opcode in its context.

use super::binary::{Header, REQ_MAGIC};
use super::response::{push_i64, push_u64};
use super::{Command, MetaCtx, MetaRet, Proto, Request, StoreMode, base64};

/// Append the wire form of `req` to `out`.
pub fn encode_request(req: &Request, out: &mut Vec<u8>) {
    match req.ctx.proto {
        Proto::Text => text(req, out),
        Proto::Meta => meta(req, out),
        Proto::Binary => binary(req, out),
    }
}

fn tail(out: &mut Vec<u8>, noreply: bool) {
    if noreply {
        out.extend_from_slice(b" noreply");
    }
    out.extend_from_slice(b"\r\n");
}

fn text(req: &Request, out: &mut Vec<u8>) {
    let noreply = req.ctx.noreply;
    match &req.cmd {
        Command::Get {
            keys,
            touch,
            with_cas,
            ..
        } => {
            let name: &[u8] = match (touch.is_some(), with_cas) {
                (false, false) => b"get",
                (false, true) => b"gets",
                (true, false) => b"gat",
                (true, true) => b"gats",
            };
            out.extend_from_slice(name);
            if let Some(t) = touch {
                out.push(b' ');
                push_i64(out, *t);
            }
            for k in keys {
                out.push(b' ');
                out.extend_from_slice(k);
            }
            out.extend_from_slice(b"\r\n");
        }
        Command::Store {
            mode,
            key,
            flags,
            exptime,
            data,
            cas,
            ..
        } => {
            let name: &[u8] = match mode {
                StoreMode::Set => b"set",
                StoreMode::Add => b"add",
                StoreMode::Replace => b"replace",
                StoreMode::Append => b"append",
                StoreMode::Prepend => b"prepend",
                StoreMode::Cas => b"cas",
            };
            out.extend_from_slice(name);
            out.push(b' ');
            out.extend_from_slice(key);
            out.push(b' ');
            push_u64(out, u64::from(*flags));
            out.push(b' ');
            push_i64(out, *exptime);
            out.push(b' ');
            push_u64(out, data.len() as u64);
            if *mode == StoreMode::Cas {
                out.push(b' ');
                push_u64(out, cas.unwrap_or(0));
            }
            tail(out, noreply);
            out.extend_from_slice(data);
            out.extend_from_slice(b"\r\n");
        }
        Command::Delete { key, .. } => {
            out.extend_from_slice(b"delete ");
            out.extend_from_slice(key);
            tail(out, noreply);
        }
        Command::Arith {
            key, incr, delta, ..
        } => {
            out.extend_from_slice(if *incr { b"incr " } else { b"decr " });
            out.extend_from_slice(key);
            out.push(b' ');
            push_u64(out, *delta);
            tail(out, noreply);
        }
        Command::Touch { key, exptime } => {
            out.extend_from_slice(b"touch ");
            out.extend_from_slice(key);
            out.push(b' ');
            push_i64(out, *exptime);
            tail(out, noreply);
        }
        Command::FlushAll { delay } => {
            out.extend_from_slice(b"flush_all");
            if *delay != 0 {
                out.push(b' ');
                push_i64(out, *delay);
            }
            tail(out, noreply);
        }
        Command::Stats { args } => {
            out.extend_from_slice(b"stats");
            for a in args {
                out.push(b' ');
                out.extend_from_slice(a);
            }
            out.extend_from_slice(b"\r\n");
        }
        Command::Version => out.extend_from_slice(b"version\r\n"),
        Command::Verbosity { level } => {
            out.extend_from_slice(b"verbosity ");
            push_u64(out, u64::from(*level));
            tail(out, noreply);
        }
        Command::Quit => out.extend_from_slice(b"quit\r\n"),
        Command::NoOp => out.extend_from_slice(b"mn\r\n"),
        Command::MetaDebug { key } => {
            out.extend_from_slice(b"me ");
            out.extend_from_slice(key);
            out.extend_from_slice(b"\r\n");
        }
        Command::Admin { args } => {
            out.extend_from_slice(&args.join(&b' '));
            out.extend_from_slice(b"\r\n");
        }
    }
}

fn flag_num(out: &mut Vec<u8>, c: u8, v: i64) {
    out.push(b' ');
    out.push(c);
    push_i64(out, v);
}

fn flag_u(out: &mut Vec<u8>, c: u8, v: u64) {
    out.push(b' ');
    out.push(c);
    push_u64(out, v);
}

fn flag(out: &mut Vec<u8>, c: u8) {
    out.push(b' ');
    out.push(c);
}

/// The key token (base64 when `b`) and the return flags.
fn meta_head(out: &mut Vec<u8>, name: &[u8], key: &[u8], m: &MetaCtx) {
    out.extend_from_slice(name);
    out.push(b' ');
    if m.base64 {
        base64::encode(key, out);
    } else {
        out.extend_from_slice(key);
    }
}

fn meta_flags(out: &mut Vec<u8>, m: &MetaCtx, quiet: bool) {
    meta_flags_around_t(out, m, quiet, &mut |_| {});
}

/// [`meta_flags`], calling `before_t` just before the `t` return flag: the
/// modifiers a request named before its `t` are written there, so `t`
/// keeps its place among them ([`MetaCtx::order`]) as well as among the
/// return flags.
fn meta_flags_around_t(
    out: &mut Vec<u8>,
    m: &MetaCtx,
    quiet: bool,
    before_t: &mut dyn FnMut(&mut Vec<u8>),
) {
    if m.base64 {
        flag(out, b'b');
    }
    for r in &m.ret {
        match r {
            MetaRet::Cas => flag(out, b'c'),
            MetaRet::Flags => flag(out, b'f'),
            MetaRet::Hit => flag(out, b'h'),
            MetaRet::Key => flag(out, b'k'),
            MetaRet::LastAccess => flag(out, b'l'),
            MetaRet::Size => flag(out, b's'),
            MetaRet::Ttl => {
                before_t(out);
                flag(out, b't');
            }
            MetaRet::Opaque(tok) => {
                flag(out, b'O');
                out.extend_from_slice(tok);
            }
        }
    }
    if m.value {
        flag(out, b'v');
    }
    if quiet {
        flag(out, b'q');
    }
}

/// The characters of `all` in `order`'s order, then those it does not
/// name, split into those `order` names before `t` and the rest.
fn split_at_t(order: &[u8], all: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let v = ordered(order, all);
    let t = order.iter().position(|&c| c == b't');
    let before = |c: u8| t.is_some_and(|t| order[..t].contains(&c));
    v.into_iter().partition(|&c| before(c))
}

/// The characters of `all` in the order `order` names them, then those it
/// does not name.
fn ordered(order: &[u8], all: &[u8]) -> Vec<u8> {
    let mut v: Vec<u8> = order.iter().copied().filter(|c| all.contains(c)).collect();
    v.dedup();
    for &c in all {
        if !v.contains(&c) {
            v.push(c);
        }
    }
    v
}

fn meta(req: &Request, out: &mut Vec<u8>) {
    let default = MetaCtx::default();
    let m = req.ctx.meta.as_deref().unwrap_or(&default);
    let q = req.ctx.noreply;
    match &req.cmd {
        Command::Get {
            keys, touch, opts, ..
        } => {
            meta_head(out, b"mg", keys.first().map_or(&[][..], |k| k), m);
            // The modifiers in the request's order (the server applies
            // them in order, `t` reporting the TTL at its own place), then
            // any it does not name.
            let emit = |out: &mut Vec<u8>, c: u8| {
                let tok = match c {
                    b'T' => *touch,
                    b'N' => opts.vivify,
                    _ => opts.recache,
                };
                if let Some(t) = tok {
                    flag_num(out, c, t);
                }
            };
            let (pre, post) = split_at_t(&m.order, b"TNR");
            meta_flags_around_t(out, m, q, &mut |out| pre.iter().for_each(|&c| emit(out, c)));
            post.iter().for_each(|&c| emit(out, c));
            if opts.no_bump {
                flag(out, b'u');
            }
            if let Some(c) = opts.new_cas {
                flag_u(out, b'E', c);
            }
            out.extend_from_slice(b"\r\n");
        }
        Command::Store {
            mode,
            key,
            flags,
            exptime,
            data,
            cas,
            opts,
        } => {
            meta_head(out, b"ms", key, m);
            out.push(b' ');
            push_u64(out, data.len() as u64);
            meta_flags(out, m, q);
            if *flags != 0 {
                flag_u(out, b'F', u64::from(*flags));
            }
            if *exptime != 0 {
                flag_num(out, b'T', *exptime);
            }
            match mode {
                StoreMode::Set | StoreMode::Cas => {}
                StoreMode::Add => out.extend_from_slice(b" ME"),
                StoreMode::Replace => out.extend_from_slice(b" MR"),
                StoreMode::Append => out.extend_from_slice(b" MA"),
                StoreMode::Prepend => out.extend_from_slice(b" MP"),
            }
            if let Some(c) = cas {
                flag_u(out, b'C', *c);
            }
            if opts.invalidate {
                flag(out, b'I');
            }
            if let Some(t) = opts.vivify {
                flag_num(out, b'N', t);
            }
            if let Some(c) = opts.new_cas {
                flag_u(out, b'E', c);
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(data);
            out.extend_from_slice(b"\r\n");
        }
        Command::Delete { key, cas, opts } => {
            meta_head(out, b"md", key, m);
            meta_flags(out, m, q);
            if let Some(c) = cas {
                flag_u(out, b'C', *c);
            }
            if opts.invalidate {
                flag(out, b'I');
            }
            if let Some(t) = opts.ttl {
                flag_num(out, b'T', t);
            }
            if opts.drop_value {
                flag(out, b'x');
            }
            if let Some(c) = opts.new_cas {
                flag_u(out, b'E', c);
            }
            out.extend_from_slice(b"\r\n");
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
            meta_head(out, b"ma", key, m);
            let emit = |out: &mut Vec<u8>, c: u8| match (c, create, ttl) {
                (b'N', Some((initial, t)), _) => {
                    flag_num(out, b'N', *t);
                    flag_u(out, b'J', *initial);
                }
                (b'T', _, Some(t)) => flag_num(out, b'T', *t),
                _ => {}
            };
            let (pre, post) = split_at_t(&m.order, b"NT");
            meta_flags_around_t(out, m, q, &mut |out| pre.iter().for_each(|&c| emit(out, c)));
            post.iter().for_each(|&c| emit(out, c));
            flag_u(out, b'D', *delta);
            if !incr {
                out.extend_from_slice(b" MD");
            }
            if let Some(c) = cas {
                flag_u(out, b'C', *c);
            }
            if let Some(c) = new_cas {
                flag_u(out, b'E', *c);
            }
            out.extend_from_slice(b"\r\n");
        }
        Command::MetaDebug { key } => {
            meta_head(out, b"me", key, m);
            if m.base64 {
                flag(out, b'b');
            }
            out.extend_from_slice(b"\r\n");
        }
        Command::NoOp => out.extend_from_slice(b"mn\r\n"),
        // Not meta commands: fall back to their text spelling.
        _ => text(req, out),
    }
}

fn binary(req: &Request, out: &mut Vec<u8>) {
    let mut extras: Vec<u8> = Vec::new();
    let mut key: &[u8] = &[];
    let mut value: &[u8] = &[];
    let mut cas = 0u64;
    match &req.cmd {
        Command::Get { keys, touch, .. } => {
            key = keys.first().map_or(&[][..], |k| k);
            if let Some(t) = touch {
                extras.extend_from_slice(&(*t as u32).to_be_bytes());
            }
        }
        Command::Touch { key: k, exptime } => {
            key = k;
            extras.extend_from_slice(&(*exptime as u32).to_be_bytes());
        }
        Command::Store {
            mode,
            key: k,
            flags,
            exptime,
            data,
            cas: c,
            ..
        } => {
            key = k;
            value = data;
            cas = c.unwrap_or(0);
            if !matches!(mode, StoreMode::Append | StoreMode::Prepend) {
                extras.extend_from_slice(&flags.to_be_bytes());
                extras.extend_from_slice(&(*exptime as u32).to_be_bytes());
            }
        }
        Command::Delete { key: k, cas: c, .. } => {
            key = k;
            cas = c.unwrap_or(0);
        }
        Command::Arith {
            key: k,
            delta,
            create,
            cas: c,
            ..
        } => {
            key = k;
            cas = c.unwrap_or(0);
            extras.extend_from_slice(&delta.to_be_bytes());
            let (initial, exp) = create.map_or((0, u32::MAX), |(i, e)| (i, e as u32));
            extras.extend_from_slice(&initial.to_be_bytes());
            extras.extend_from_slice(&exp.to_be_bytes());
        }
        Command::FlushAll { delay } => {
            if *delay != 0 {
                extras.extend_from_slice(&(*delay as u32).to_be_bytes());
            }
        }
        Command::Verbosity { level } => extras.extend_from_slice(&level.to_be_bytes()),
        Command::Stats { args } => key = args.first().map_or(&[][..], |a| a),
        Command::Version
        | Command::Quit
        | Command::NoOp
        | Command::MetaDebug { .. }
        | Command::Admin { .. } => {}
    }
    let op = req.ctx.opcode;
    Header {
        magic: REQ_MAGIC,
        opcode: op,
        key_len: key.len() as u16,
        extras_len: extras.len() as u8,
        data_type: 0,
        vbucket_or_status: 0,
        body_len: (extras.len() + key.len() + value.len()) as u32,
        opaque: req.ctx.opaque,
        cas,
    }
    .write(out);
    out.extend_from_slice(&extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}
