//! Codec tests: per-command parsing, every error reply, reply encoding,
//! incremental/pipelined parsing at every split point, and properties
//! (random bytes never panic; random valid requests round-trip).

use super::binary::{self, Header, Status, opcode};
use super::response::encode_error;
use super::*;

// ---------------------------------------------------------------- helpers

fn lim() -> Limits {
    Limits::default()
}

/// Parse exactly one complete request that fills `b`.
fn one(b: &[u8]) -> Request {
    match parse(b, &lim()) {
        Ok(Some((r, n))) => {
            assert_eq!(n, b.len(), "consumed {n} of {}", b.len());
            r
        }
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(b)),
    }
}

fn perr(b: &[u8]) -> ProtoError {
    match parse(b, &lim()) {
        Err(e) => e,
        other => panic!(
            "{:?}: expected an error, got {other:?}",
            String::from_utf8_lossy(b)
        ),
    }
}

/// The bytes a server would send for a parse error.
fn err_reply(e: &ProtoError) -> Vec<u8> {
    let mut out = Vec::new();
    encode_error(e, &mut out);
    out
}

fn reply(resp: &Response<'_>, ctx: &ReqCtx) -> Vec<u8> {
    let mut out = Vec::new();
    encode(resp, ctx, &mut out);
    out
}

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn k(x: &str) -> Vec<u8> {
    x.as_bytes().to_vec()
}

fn store(
    mode: StoreMode,
    key: &str,
    flags: u32,
    exptime: i64,
    data: &[u8],
    cas: Option<u64>,
) -> Command {
    Command::Store {
        mode,
        key: k(key),
        flags,
        exptime,
        data: data.to_vec(),
        cas,
        opts: StoreOpts::default(),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Req(Request),
    Err(ProtoError),
}

/// A connection's read loop: feed `chunks`, parse everything parseable,
/// honour `Recovery` (including skips longer than what is buffered).
fn drive<'a>(chunks: impl IntoIterator<Item = &'a [u8]>, limits: &Limits) -> Vec<Outcome> {
    let mut out = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut skip = 0usize;
    for chunk in chunks {
        let d = skip.min(chunk.len());
        skip -= d;
        buf.extend_from_slice(&chunk[d..]);
        loop {
            match parse(&buf, limits) {
                Ok(None) => break,
                Ok(Some((r, n))) => {
                    assert!(n > 0 && n <= buf.len());
                    buf.drain(..n);
                    out.push(Outcome::Req(r));
                }
                Err(e) => {
                    let rec = e.recovery;
                    out.push(Outcome::Err(e));
                    match rec {
                        Recovery::Skip(n) => {
                            assert!(n > 0);
                            if n <= buf.len() {
                                buf.drain(..n);
                            } else {
                                skip = n - buf.len();
                                buf.clear();
                            }
                        }
                        Recovery::Close | Recovery::CloseSilently => return out,
                    }
                }
            }
        }
    }
    out
}

// ------------------------------------------------------------- text parse

#[test]
fn text_get_family() {
    let r = one(b"get a bb ccc\r\n");
    assert_eq!(r.ctx, ReqCtx::text(Op::Get, false));
    assert_eq!(
        r.cmd,
        Command::Get {
            keys: vec![k("a"), k("bb"), k("ccc")],
            touch: None,
            with_cas: false,
            opts: GetOpts::default()
        }
    );
    let r = one(b"gets  a\n");
    assert_eq!(r.ctx.op, Op::Gets);
    assert!(matches!(r.cmd, Command::Get { with_cas: true, .. }));
    let r = one(b"gat 100 a b\r\n");
    assert_eq!(r.ctx.op, Op::Gat);
    assert_eq!(
        r.cmd,
        Command::Get {
            keys: vec![k("a"), k("b")],
            touch: Some(100),
            with_cas: false,
            opts: GetOpts::default()
        }
    );
    let r = one(b"gats -1 a\r\n");
    assert!(matches!(
        r.cmd,
        Command::Get {
            touch: Some(-1),
            with_cas: true,
            ..
        }
    ));
}

#[test]
fn text_storage_commands() {
    let cases: [(&[u8], Op, Command, bool); 7] = [
        (
            b"set k 5 100 3\r\nabc\r\n",
            Op::Set,
            store(StoreMode::Set, "k", 5, 100, b"abc", None),
            false,
        ),
        (
            b"add k 0 0 0\r\n\r\n",
            Op::Add,
            store(StoreMode::Add, "k", 0, 0, b"", None),
            false,
        ),
        (
            b"replace k 4294967295 -1 2 noreply\r\n\r\n\r\n",
            Op::Replace,
            store(StoreMode::Replace, "k", u32::MAX, -1, b"\r\n", None),
            true,
        ),
        (
            b"append k 0 0 1\r\nx\r\n",
            Op::Append,
            store(StoreMode::Append, "k", 0, 0, b"x", None),
            false,
        ),
        (
            b"prepend k 0 0 1 noreply\r\ny\r\n",
            Op::Prepend,
            store(StoreMode::Prepend, "k", 0, 0, b"y", None),
            true,
        ),
        (
            b"cas k 1 2 3 18446744073709551615\r\nabc\r\n",
            Op::Cas,
            store(StoreMode::Cas, "k", 1, 2, b"abc", Some(u64::MAX)),
            false,
        ),
        (
            b"cas k 1 2 3 9 noreply\r\nabc\r\n",
            Op::Cas,
            store(StoreMode::Cas, "k", 1, 2, b"abc", Some(9)),
            true,
        ),
    ];
    for (wire, op, cmd, noreply) in cases {
        let r = one(wire);
        assert_eq!(r.ctx, ReqCtx::text(op, noreply), "{}", s(wire));
        assert_eq!(r.cmd, cmd, "{}", s(wire));
    }
    // A set with an unrecognised sixth token: memcached ignores it.
    assert!(!one(b"set k 0 0 1 junk\r\nx\r\n").ctx.noreply);
}

#[test]
fn text_other_commands() {
    let r = one(b"delete k\r\n");
    assert_eq!(
        r.cmd,
        Command::Delete {
            key: k("k"),
            cas: None,
            opts: DeleteOpts::default()
        }
    );
    assert!(!r.ctx.noreply);
    assert!(one(b"delete k noreply\r\n").ctx.noreply);
    assert!(!one(b"delete k 0\r\n").ctx.noreply);
    assert!(one(b"delete k 0 noreply\r\n").ctx.noreply);

    let r = one(b"incr n 18446744073709551615\r\n");
    assert_eq!(
        r.cmd,
        Command::Arith {
            key: k("n"),
            incr: true,
            delta: u64::MAX,
            create: None,
            cas: None,
            ttl: None,
            new_cas: None
        }
    );
    let r = one(b"decr n 3 noreply\r\n");
    assert!(matches!(
        r.cmd,
        Command::Arith {
            incr: false,
            delta: 3,
            ..
        }
    ));
    assert_eq!(r.ctx, ReqCtx::text(Op::Decr, true));

    let r = one(b"touch k 2592001 noreply\r\n");
    assert_eq!(
        r.cmd,
        Command::Touch {
            key: k("k"),
            exptime: 2_592_001
        }
    );
    assert!(r.ctx.noreply);

    assert_eq!(one(b"flush_all\r\n").cmd, Command::FlushAll { delay: 0 });
    let r = one(b"flush_all noreply\r\n");
    assert_eq!(
        (r.cmd, r.ctx.noreply),
        (Command::FlushAll { delay: 0 }, true)
    );
    let r = one(b"flush_all 10 noreply\r\n");
    assert_eq!(
        (r.cmd, r.ctx.noreply),
        (Command::FlushAll { delay: 10 }, true)
    );
    assert_eq!(
        one(b"flush_all -5\r\n").cmd,
        Command::FlushAll { delay: -5 }
    );

    assert_eq!(one(b"stats\r\n").cmd, Command::Stats { args: vec![] });
    assert_eq!(
        one(b"stats detail dump\r\n").cmd,
        Command::Stats {
            args: vec![k("detail"), k("dump")]
        }
    );
    assert_eq!(one(b"version\r\n").cmd, Command::Version);
    assert_eq!(one(b"quit\r\n").cmd, Command::Quit);
    let r = one(b"verbosity 1 noreply\r\n");
    assert_eq!(
        (r.cmd, r.ctx.noreply),
        (Command::Verbosity { level: 1 }, true)
    );
}

#[test]
fn text_lines_need_only_newline() {
    assert_eq!(one(b"get a\n").cmd, one(b"get a\r\n").cmd);
    assert_eq!(
        one(b"set a 0 0 1\nx\r\n").cmd,
        one(b"set a 0 0 1\r\nx\r\n").cmd
    );
}

#[test]
fn text_incomplete_requests_wait() {
    for wire in [
        &b"get a b\r\n"[..],
        b"set k 0 0 5\r\nhello\r\n",
        b"delete k noreply\r\n",
    ] {
        for cut in 0..wire.len() {
            assert_eq!(
                parse(&wire[..cut], &lim()),
                Ok(None),
                "{:?}",
                s(&wire[..cut])
            );
        }
    }
}

// ------------------------------------------------------------- text errors

/// (request, reply bytes, bytes skipped) for errors that keep the
/// connection open.
fn text_error_cases() -> Vec<(&'static [u8], &'static [u8], usize)> {
    let long_key = Box::leak(
        format!("get {}\r\n", "k".repeat(251))
            .into_bytes()
            .into_boxed_slice(),
    );
    let long_set = Box::leak(
        format!("set {} 0 0 1\r\n", "k".repeat(251))
            .into_bytes()
            .into_boxed_slice(),
    );
    vec![
        (b"bogus\r\n", b"ERROR\r\n", 7),
        (b"\r\n", b"ERROR\r\n", 2),
        (b"g\r\n", b"ERROR\r\n", 3),
        (b"get\r\n", b"ERROR\r\n", 5),
        (b"mx a\r\n", b"ERROR\r\n", 6),
        (b"set k 0 0\r\n", b"ERROR\r\n", 11),
        (b"set k 0 0 1 noreply extra\r\n", b"ERROR\r\n", 27),
        (b"cas k 0 0 1\r\n", b"ERROR\r\n", 13),
        (b"incr k\r\n", b"ERROR\r\n", 8),
        (b"touch k\r\n", b"ERROR\r\n", 9),
        (b"delete\r\n", b"ERROR\r\n", 8),
        (b"delete a b c d\r\n", b"ERROR\r\n", 16),
        (b"flush_all 1 2 3\r\n", b"ERROR\r\n", 17),
        (b"verbosity\r\n", b"ERROR\r\n", 11),
        (
            long_key,
            b"CLIENT_ERROR bad command line format\r\n",
            long_key.len(),
        ),
        (
            long_set,
            b"CLIENT_ERROR bad command line format\r\n",
            long_set.len(),
        ),
        (
            b"set k x 0 1\r\n",
            b"CLIENT_ERROR bad command line format\r\n",
            13,
        ),
        (
            b"set k -1 0 1\r\n",
            b"CLIENT_ERROR bad command line format\r\n",
            14,
        ),
        (
            b"set k 4294967296 0 1\r\n",
            b"CLIENT_ERROR bad command line format\r\n",
            22,
        ),
        (
            b"set k 0 x 1\r\n",
            b"CLIENT_ERROR bad command line format\r\n",
            13,
        ),
        (
            b"set k 0 0 -1\r\n",
            b"CLIENT_ERROR bad command line format\r\n",
            14,
        ),
        (
            b"set k 0 0 2147483648\r\n",
            b"CLIENT_ERROR bad command line format\r\n",
            22,
        ),
        (
            b"cas k 0 0 1 -3\r\n",
            b"CLIENT_ERROR bad command line format\r\n",
            16,
        ),
        (
            b"set k 0 0 1\r\nxyz\r\n",
            b"CLIENT_ERROR bad data chunk\r\n",
            16,
        ),
        (
            b"incr k x\r\n",
            b"CLIENT_ERROR invalid numeric delta argument\r\n",
            10,
        ),
        (
            b"decr k -1\r\n",
            b"CLIENT_ERROR invalid numeric delta argument\r\n",
            11,
        ),
        (
            b"touch k x\r\n",
            b"CLIENT_ERROR invalid exptime argument\r\n",
            11,
        ),
        (
            b"gat x k\r\n",
            b"CLIENT_ERROR invalid exptime argument\r\n",
            9,
        ),
        (
            b"delete k 5\r\n",
            b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n",
            12,
        ),
        (
            b"flush_all x\r\n",
            b"CLIENT_ERROR invalid exptime argument\r\n",
            13,
        ),
        (
            b"verbosity x\r\n",
            b"CLIENT_ERROR bad command line format\r\n",
            13,
        ),
    ]
}

#[test]
fn text_error_replies() {
    for (wire, want, n) in text_error_cases() {
        let e = perr(wire);
        assert_eq!(s(&err_reply(&e)), s(want), "{}", s(wire));
        assert_eq!(e.recovery, Recovery::Skip(n), "{}", s(wire));
        assert_eq!(e.unlink, None);
    }
}

#[test]
fn text_noreply_suppresses_errors() {
    // memcached's out_string drops every reply once noreply is seen.
    for wire in [
        &b"set k x 0 1 noreply\r\n"[..],
        b"set k 0 0 1 noreply\r\nxyz\r\n",
        b"incr k x noreply\r\n",
        b"delete k 5 noreply\r\n",
    ] {
        let e = perr(wire);
        assert!(e.ctx.noreply, "{}", s(wire));
        assert!(err_reply(&e).is_empty(), "{}", s(wire));
    }
}

#[test]
fn too_large_set_is_swallowed_and_unlinks() {
    let limits = Limits {
        max_item_size: 10,
        ..Limits::default()
    };
    let wire = b"set big 0 0 11\r\n";
    let e = parse(wire, &limits).unwrap_err();
    assert_eq!(e.failure, Failure::TooLarge);
    assert_eq!(
        s(&err_reply(&e)),
        "SERVER_ERROR object too large for cache\r\n"
    );
    // The verdict comes from the line alone, before the data arrives.
    assert_eq!(e.recovery, Recovery::Skip(wire.len() + 11 + 2));
    assert_eq!(e.unlink, Some(k("big")));
    // Only `set` removes the old item.
    let e = parse(b"add big 0 0 11\r\n", &limits).unwrap_err();
    assert_eq!((e.failure, e.unlink), (Failure::TooLarge, None));
    // Exactly the limit is fine.
    assert!(matches!(
        parse(b"set k 0 0 10\r\n0123456789\r\n", &limits),
        Ok(Some(_))
    ));
    // The stream stays in sync: the next command after the swallowed data
    // is parsed, even when the data arrives later in small pieces.
    let stream = b"set big 0 0 11\r\nget get get\r\nget a\r\n";
    let chunks: Vec<&[u8]> = stream.chunks(3).collect();
    let got = drive(chunks, &limits);
    assert_eq!(got.len(), 2);
    assert!(matches!(&got[0], Outcome::Err(e) if e.failure == Failure::TooLarge));
    assert!(matches!(&got[1], Outcome::Req(r) if r.cmd == Command::Get {
        keys: vec![k("a")], touch: None, with_cas: false, opts: GetOpts::default() }));
}

#[test]
fn overlong_lines_close() {
    let limits = lim();
    let line = vec![b'x'; limits.max_line + 1];
    let e = parse(&line, &limits).unwrap_err();
    assert_eq!(e.recovery, Recovery::Close);
    assert_eq!(s(&err_reply(&e)), "CLIENT_ERROR line too long\r\n");
    // Same verdict when the newline is already there.
    let mut with_nl = line.clone();
    with_nl.extend_from_slice(b"\r\n");
    assert_eq!(
        parse(&with_nl, &limits).unwrap_err().recovery,
        Recovery::Close
    );
    // A line at the limit is parsed (here: an unknown command).
    let mut ok = vec![b'x'; limits.max_line];
    ok.push(b'\n');
    assert_eq!(
        parse(&ok, &limits).unwrap_err().recovery,
        Recovery::Skip(ok.len())
    );
    // Multi-gets may be much longer.
    let mut get = b"get".to_vec();
    for i in 0..1000 {
        get.extend_from_slice(format!(" key{i:04}").as_bytes());
    }
    get.extend_from_slice(b"\r\n");
    assert!(get.len() > limits.max_line);
    match one(&get).cmd {
        Command::Get { keys, .. } => assert_eq!(keys.len(), 1000),
        c => panic!("{c:?}"),
    }
    // ...but not have more keys than the limit.
    let small = Limits {
        max_keys_per_get: 2,
        ..lim()
    };
    let e = parse(b"get a b c\r\n", &small).unwrap_err();
    assert_eq!(e.failure, Failure::BAD_FORMAT);
}

#[test]
fn http_request_closes_silently() {
    let e = perr(b"GET / HTTP/1.1\r\n");
    assert_eq!(e.recovery, Recovery::CloseSilently);
    assert!(err_reply(&e).is_empty());
}

// ------------------------------------------------------------------- meta

fn meta_ctx(r: &Request) -> &MetaCtx {
    r.ctx.meta.as_deref().expect("meta ctx")
}

#[test]
fn meta_get_flags() {
    let r = one(b"mg foo s v t c f O123 k q h l T30 N60 R10 u E77\r\n");
    assert_eq!(r.ctx.proto, Proto::Meta);
    assert_eq!(r.ctx.op, Op::MetaGet);
    assert!(r.ctx.noreply);
    let m = meta_ctx(&r);
    assert_eq!(
        m.ret,
        vec![
            MetaRet::Size,
            MetaRet::Ttl,
            MetaRet::Cas,
            MetaRet::Flags,
            MetaRet::Opaque(k("123")),
            MetaRet::Key,
            MetaRet::Hit,
            MetaRet::LastAccess
        ]
    );
    assert!(m.value && !m.base64);
    assert_eq!(m.order, b"tTNR");
    assert_eq!(
        r.cmd,
        Command::Get {
            keys: vec![k("foo")],
            touch: Some(30),
            with_cas: true,
            opts: GetOpts {
                vivify: Some(60),
                recache: Some(10),
                no_bump: true,
                new_cas: Some(77)
            }
        }
    );
    // No flags at all is a plain existence check.
    assert!(matches!(one(b"mg foo\r\n").cmd, Command::Get { .. }));
}

/// memcached applies mg's and ma's T, N, R (and reads the TTL for t) in
/// request order: the parser keeps that order; the other commands (whose
/// T and t do not interact) record none.
#[test]
fn meta_modifier_order() {
    assert_eq!(meta_ctx(&one(b"mg k R30 v T10 N5 t\r\n")).order, b"RTNt");
    assert_eq!(meta_ctx(&one(b"mg k t T10\r\n")).order, b"tT");
    assert_eq!(meta_ctx(&one(b"mg k v\r\n")).order, b"");
    assert_eq!(meta_ctx(&one(b"ma k T9 t N0 J3\r\n")).order, b"TtN");
    assert_eq!(meta_ctx(&one(b"md k I T9\r\n")).order, b"");
    assert_eq!(meta_ctx(&one(b"ms k 1 T9\r\nx\r\n")).order, b"");
    // The client spells a request so that it parses back to the same order.
    for wire in [&b"mg k t R30 T10 N5\r\n"[..], b"ma k t T9 N0 J3\r\n"] {
        let r = one(wire);
        let mut again = Vec::new();
        crate::protocol::client::encode_request(&r, &mut again);
        assert_eq!(one(&again), r, "{}", s(&again));
    }
}

#[test]
fn meta_base64_key() {
    let r = one(b"mg Zm9v b k v\r\n");
    assert!(matches!(&r.cmd, Command::Get { keys, .. } if keys == &vec![k("foo")]));
    let m = meta_ctx(&r);
    assert!(m.base64);
    assert_eq!(m.wire_key, k("Zm9v"));
    let e = perr(b"mg Zm9v! b\r\n");
    assert_eq!(s(&err_reply(&e)), "CLIENT_ERROR error decoding key\r\n");
}

#[test]
fn meta_set_modes() {
    let r = one(b"ms foo 2 T90 F1 c k O9\r\nhi\r\n");
    assert_eq!(r.ctx.op, Op::MetaSet);
    assert_eq!(
        meta_ctx(&r).ret,
        vec![MetaRet::Cas, MetaRet::Key, MetaRet::Opaque(k("9"))]
    );
    assert_eq!(r.cmd, store(StoreMode::Set, "foo", 1, 90, b"hi", None));
    let modes: [(&[u8], StoreMode); 7] = [
        (b"ms k 1 ME\r\nx\r\n", StoreMode::Add),
        (b"ms k 1 Ma\r\nx\r\n", StoreMode::Append),
        (b"ms k 1 MP\r\nx\r\n", StoreMode::Prepend),
        (b"ms k 1 MR\r\nx\r\n", StoreMode::Replace),
        (b"ms k 1 MS\r\nx\r\n", StoreMode::Set),
        (b"ms k 1 C5\r\nx\r\n", StoreMode::Cas),
        (b"ms k 1 MR C5\r\nx\r\n", StoreMode::Cas),
    ];
    for (wire, mode) in modes {
        assert!(
            matches!(one(wire).cmd, Command::Store { mode: m, .. } if m == mode),
            "{}",
            s(wire)
        );
    }
    // Add ignores a CAS; append checks it; N vivifies only appends.
    assert!(matches!(
        one(b"ms k 1 ME C5\r\nx\r\n").cmd,
        Command::Store { cas: None, .. }
    ));
    let r = one(b"ms k 1 MA C5 N30 I E8 q\r\nx\r\n");
    assert!(r.ctx.noreply);
    assert!(matches!(
        r.cmd,
        Command::Store {
            mode: StoreMode::Append,
            cas: Some(5),
            opts: StoreOpts {
                invalidate: true,
                vivify: Some(30),
                new_cas: Some(8)
            },
            ..
        }
    ));
    assert!(matches!(
        one(b"ms k 1 N30\r\nx\r\n").cmd,
        Command::Store {
            opts: StoreOpts { vivify: None, .. },
            ..
        }
    ));
}

#[test]
fn meta_delete_arith_debug_noop() {
    let r = one(b"md foo q C3 I T30 x k E4\r\n");
    assert!(r.ctx.noreply);
    assert_eq!(meta_ctx(&r).ret, vec![MetaRet::Key]);
    assert_eq!(
        r.cmd,
        Command::Delete {
            key: k("foo"),
            cas: Some(3),
            opts: DeleteOpts {
                invalidate: true,
                ttl: Some(30),
                drop_value: true,
                new_cas: Some(4)
            }
        }
    );
    let r = one(b"ma n\r\n");
    assert_eq!(
        r.cmd,
        Command::Arith {
            key: k("n"),
            incr: true,
            delta: 1,
            create: None,
            cas: None,
            ttl: None,
            new_cas: None
        }
    );
    let r = one(b"ma n MD D7 N0 J13 T5 C2 v t c\r\n");
    assert_eq!(
        r.cmd,
        Command::Arith {
            key: k("n"),
            incr: false,
            delta: 7,
            create: Some((13, 0)),
            cas: Some(2),
            ttl: Some(5),
            new_cas: None
        }
    );
    assert!(meta_ctx(&r).value);
    assert_eq!(meta_ctx(&r).ret, vec![MetaRet::Ttl, MetaRet::Cas]);
    assert!(matches!(
        one(b"ma n M-\r\n").cmd,
        Command::Arith { incr: false, .. }
    ));
    assert!(matches!(
        one(b"ma n M+\r\n").cmd,
        Command::Arith { incr: true, .. }
    ));
    assert_eq!(one(b"me foo\r\n").cmd, Command::MetaDebug { key: k("foo") });
    assert_eq!(
        one(b"me Zm9v b\r\n").cmd,
        Command::MetaDebug { key: k("foo") }
    );
    let r = one(b"mn\r\n");
    assert_eq!((r.cmd, r.ctx.op), (Command::NoOp, Op::MetaNoOp));
}

/// W, X and Z are reply flags: a request naming them is refused as
/// memcached refuses it, and so is ms's pre-1.6 `S<size>`.
#[test]
fn reply_only_and_unsupported_meta_flags_are_invalid() {
    for wire in [
        &b"mg k v W\r\n"[..],
        b"mg k X\r\n",
        b"mg k Z v\r\n",
        b"mg k S\r\n",
    ] {
        assert_eq!(
            s(&err_reply(&perr(wire))),
            "CLIENT_ERROR invalid flag\r\n",
            "{}",
            s(wire)
        );
    }
    // ms: refused, and its data block is skipped with the line.
    let e = perr(b"ms k 1 S1\r\nx\r\n");
    assert_eq!(s(&err_reply(&e)), "CLIENT_ERROR invalid flag\r\n");
    assert_eq!(e.recovery, Recovery::Skip(14));
}

#[test]
fn meta_error_replies() {
    let opaque33 = Box::leak(
        format!("mg k O{}\r\n", "o".repeat(33))
            .into_bytes()
            .into_boxed_slice(),
    );
    let many = Box::leak(
        format!("mg k{}\r\n", " v".repeat(18))
            .into_bytes()
            .into_boxed_slice(),
    );
    let cases: Vec<(&[u8], &str, usize)> = vec![
        (b"mg\r\n", "ERROR", 4),
        (b"me\r\n", "CLIENT_ERROR bad command line format", 4),
        (
            b"me Zm9v! b\r\n",
            "CLIENT_ERROR bad command line format",
            12,
        ),
        (b"mg k v v\r\n", "CLIENT_ERROR duplicate flag", 10),
        (b"mg k !\r\n", "CLIENT_ERROR invalid flag", 8),
        (
            b"mg k Tx\r\n",
            "CLIENT_ERROR bad token in command line format",
            9,
        ),
        (
            b"mg k N\r\n",
            "CLIENT_ERROR bad token in command line format",
            8,
        ),
        (
            opaque33,
            "CLIENT_ERROR opaque token too long",
            opaque33.len(),
        ),
        (many, "CLIENT_ERROR options flags are too long", many.len()),
        // md and ma: memcached 1.6.18's one message for every flag error.
        (b"ma k Dx\r\n", "CLIENT_ERROR invalid or duplicate flag", 9),
        (b"ma k Jx\r\n", "CLIENT_ERROR invalid or duplicate flag", 9),
        (
            b"ma k v v\r\n",
            "CLIENT_ERROR invalid or duplicate flag",
            10,
        ),
        (b"md k !\r\n", "CLIENT_ERROR invalid or duplicate flag", 8),
        (b"md k W\r\n", "CLIENT_ERROR invalid or duplicate flag", 8),
        (
            b"ma k MX\r\n",
            "CLIENT_ERROR invalid mode for ma M token",
            9,
        ),
        (
            b"ma k MDD\r\n",
            "CLIENT_ERROR invalid or duplicate flag",
            10,
        ),
        (b"md k Cx\r\n", "CLIENT_ERROR invalid or duplicate flag", 9),
        (b"ms k\r\n", "CLIENT_ERROR bad command line format", 6),
        (b"ms k x\r\n", "CLIENT_ERROR bad command line format", 8),
        (b"ms k -1\r\n", "CLIENT_ERROR bad command line format", 9),
        // Once the length is known, the data block is swallowed too.
        (
            b"ms k 2 MX\r\nhi\r\n",
            "CLIENT_ERROR invalid mode for ms M token",
            15,
        ),
        (
            b"ms k 2 Fx\r\nhi\r\n",
            "CLIENT_ERROR bad command line format",
            15,
        ),
        (b"ms k 2 q\r\nhiX\r\n", "CLIENT_ERROR bad data chunk", 14),
    ];
    for (wire, want, n) in cases {
        let e = perr(wire);
        assert_eq!(s(&err_reply(&e)), format!("{want}\r\n"), "{}", s(wire));
        assert_eq!(e.recovery, Recovery::Skip(n), "{}", s(wire));
    }
    // ms too large: SERVER_ERROR, data swallowed, old item removed.
    let limits = Limits {
        max_item_size: 4,
        ..lim()
    };
    let e = parse(b"ms k 5 MA\r\n", &limits).unwrap_err();
    assert_eq!(
        s(&err_reply(&e)),
        "SERVER_ERROR object too large for cache\r\n"
    );
    assert_eq!(
        (e.recovery, e.unlink),
        (Recovery::Skip(11 + 7), Some(k("k")))
    );
}

// ------------------------------------------------------------ text replies

#[test]
fn text_reply_encoding() {
    let get = ReqCtx::text(Op::Get, false);
    let gets = ReqCtx::text(Op::Gets, false);
    let it = ItemView::new(b"k", 42, b"v\r\nx", 99);
    let mut out = Vec::new();
    encode(&Response::Hit(it), &get, &mut out);
    encode(&Response::Miss { key: b"m" }, &get, &mut out);
    encode(&Response::End, &get, &mut out);
    assert_eq!(s(&out), "VALUE k 42 4\r\nv\r\nx\r\nEND\r\n");
    assert_eq!(
        s(&reply(&Response::Hit(it), &gets)),
        "VALUE k 42 4 99\r\nv\r\nx\r\n"
    );
    let set = ReqCtx::text(Op::Set, false);
    let cases: Vec<(Response<'_>, &str)> = vec![
        (Response::Stored { cas: 1 }, "STORED\r\n"),
        (Response::NotStored, "NOT_STORED\r\n"),
        (Response::Exists, "EXISTS\r\n"),
        (Response::NotFound, "NOT_FOUND\r\n"),
        (Response::Deleted, "DELETED\r\n"),
        (Response::Touched { flags: 0, cas: 0 }, "TOUCHED\r\n"),
        (
            Response::Arith {
                value: 18446744073709551615,
                cas: 0,
                ttl: None,
            },
            "18446744073709551615\r\n",
        ),
        (Response::Ok, "OK\r\n"),
        (Response::Version("1.6.21"), "VERSION 1.6.21\r\n"),
        (Response::Line("RESET"), "RESET\r\n"),
        (
            Response::Error(Failure::NonNumeric),
            "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
        ),
        (
            Response::Error(Failure::OutOfMemory),
            "SERVER_ERROR out of memory storing object\r\n",
        ),
        (
            Response::Error(Failure::Server("busy".into())),
            "SERVER_ERROR busy\r\n",
        ),
    ];
    for (resp, want) in &cases {
        assert_eq!(s(&reply(resp, &set)), *want);
        assert!(
            reply(resp, &ReqCtx::text(Op::Set, true)).is_empty(),
            "noreply: {want}"
        );
    }
    let stats = vec![
        ("pid".to_string(), "1".to_string()),
        ("uptime".to_string(), "2".to_string()),
    ];
    assert_eq!(
        s(&reply(
            &Response::Stats(&stats),
            &ReqCtx::text(Op::Stats, false)
        )),
        "STAT pid 1\r\nSTAT uptime 2\r\nEND\r\n"
    );
}

// ------------------------------------------------------------ meta replies

#[test]
fn meta_reply_encoding() {
    let r = one(b"mg foo s v t c f Oab k h l\r\n");
    let mut it = ItemView::new(b"foo", 7, b"hi", 12);
    it.ttl = Some(30);
    it.last_access = 5;
    it.fetched = true;
    assert_eq!(
        s(&reply(&Response::Hit(it), &r.ctx)),
        "VA 2 s2 t30 c12 f7 Oab kfoo h1 l5\r\nhi\r\n"
    );
    assert_eq!(
        s(&reply(&Response::Miss { key: b"foo" }, &r.ctx)),
        "EN Oab kfoo\r\n"
    );
    it.ttl = None;
    it.stale = true;
    it.win = true;
    it.token_sent = true;
    let r = one(b"mg foo t\r\n");
    assert_eq!(s(&reply(&Response::Hit(it), &r.ctx)), "HD t-1 Z X W\r\n");
    // q hides EN but never a hit.
    let q = one(b"mg foo q v\r\n");
    assert!(reply(&Response::Miss { key: b"foo" }, &q.ctx).is_empty());
    assert_eq!(
        s(&reply(
            &Response::Hit(ItemView::new(b"foo", 0, b"", 1)),
            &q.ctx
        )),
        "VA 0\r\n\r\n"
    );
    // base64 keys echo with a trailing b.
    let r = one(b"mg Zm9v b k\r\n");
    assert_eq!(
        s(&reply(&Response::Miss { key: b"foo" }, &r.ctx)),
        "EN kZm9v b\r\n"
    );

    let ms = one(b"ms foo 2 c O1 k\r\nhi\r\n");
    assert_eq!(
        s(&reply(&Response::Stored { cas: 44 }, &ms.ctx)),
        "HD c44 O1 kfoo\r\n"
    );
    assert_eq!(
        s(&reply(&Response::NotStored, &ms.ctx)),
        "NS c0 O1 kfoo\r\n"
    );
    assert_eq!(s(&reply(&Response::Exists, &ms.ctx)), "EX c0 O1 kfoo\r\n");
    assert_eq!(s(&reply(&Response::NotFound, &ms.ctx)), "NF c0 O1 kfoo\r\n");
    let msq = one(b"ms foo 2 q\r\nhi\r\n");
    assert!(reply(&Response::Stored { cas: 1 }, &msq.ctx).is_empty());
    assert_eq!(s(&reply(&Response::NotStored, &msq.ctx)), "NS\r\n");
    assert_eq!(
        s(&reply(&Response::Error(Failure::TooLarge), &msq.ctx)),
        "SERVER_ERROR object too large for cache\r\n"
    );

    let md = one(b"md foo q O5\r\n");
    assert!(reply(&Response::Deleted, &md.ctx).is_empty());
    assert_eq!(s(&reply(&Response::NotFound, &md.ctx)), "NF O5\r\n");
    assert_eq!(s(&reply(&Response::Exists, &md.ctx)), "EX O5\r\n");
    let md = one(b"md foo\r\n");
    assert_eq!(s(&reply(&Response::Deleted, &md.ctx)), "HD\r\n");

    let ma = one(b"ma n v t c k\r\n");
    assert_eq!(
        s(&reply(
            &Response::Arith {
                value: 105,
                cas: 9,
                ttl: None
            },
            &ma.ctx
        )),
        "VA 3 t-1 c9 kn\r\n105\r\n"
    );
    assert_eq!(s(&reply(&Response::NotFound, &ma.ctx)), "NF kn\r\n");
    let ma = one(b"ma n\r\n");
    assert_eq!(
        s(&reply(
            &Response::Arith {
                value: 1,
                cas: 9,
                ttl: None
            },
            &ma.ctx
        )),
        "HD\r\n"
    );
    assert_eq!(
        s(&reply(&Response::Error(Failure::NonNumeric), &ma.ctx)),
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    );

    let me = one(b"me foo\r\n");
    let mut it = ItemView::new(b"foo", 0, b"abc", 3);
    it.ttl = Some(10);
    assert_eq!(
        s(&reply(&Response::Debug(it), &me.ctx)),
        "ME foo exp=10 la=0 cas=3 fetch=no cls=1 size=6\r\n"
    );
    assert_eq!(
        s(&reply(&Response::Miss { key: b"foo" }, &me.ctx)),
        "EN\r\n"
    );
    assert_eq!(s(&reply(&Response::Ok, &one(b"mn\r\n").ctx)), "MN\r\n");
}

// ----------------------------------------------------------------- binary

fn bin_req(opc: u8, extras: &[u8], key: &[u8], value: &[u8], opaque: u32, cas: u64) -> Vec<u8> {
    let mut out = Vec::new();
    Header {
        magic: binary::REQ_MAGIC,
        opcode: opc,
        key_len: key.len() as u16,
        extras_len: extras.len() as u8,
        data_type: 0,
        vbucket_or_status: 0,
        body_len: (extras.len() + key.len() + value.len()) as u32,
        opaque,
        cas,
    }
    .write(&mut out);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out
}

/// One decoded reply packet: header, extras, key, value.
type Packet = (Header, Vec<u8>, Vec<u8>, Vec<u8>);

/// Split a reply stream into packets.
fn packets(mut b: &[u8]) -> Vec<Packet> {
    let mut v = Vec::new();
    while !b.is_empty() {
        let h = Header::read(b).expect("header");
        assert_eq!(h.magic, binary::RES_MAGIC);
        let body = &b[24..24 + h.body_len as usize];
        let (e, rest) = body.split_at(h.extras_len as usize);
        let (k, val) = rest.split_at(h.key_len as usize);
        v.push((h, e.to_vec(), k.to_vec(), val.to_vec()));
        b = &b[24 + h.body_len as usize..];
    }
    v
}

#[test]
fn binary_header_layout() {
    let h = Header {
        magic: 0x80,
        opcode: 0x01,
        key_len: 0x0102,
        extras_len: 8,
        data_type: 0,
        vbucket_or_status: 0x0304,
        body_len: 0x05060708,
        opaque: 0xdeadbeef,
        cas: 0x1122334455667788,
    };
    let mut out = Vec::new();
    h.write(&mut out);
    assert_eq!(
        out,
        [
            0x80, 0x01, 0x01, 0x02, 8, 0, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0xde, 0xad, 0xbe,
            0xef, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88
        ]
    );
    assert_eq!(Header::read(&out), Some(h));
    assert_eq!(Header::read(&out[..23]), None);
}

#[test]
fn binary_requests_parse() {
    let r = one(&bin_req(opcode::GETKQ, &[], b"key", &[], 7, 0));
    assert_eq!(r.ctx, ReqCtx::binary(Op::Get, opcode::GETKQ, 7, true));
    assert_eq!(
        r.cmd,
        Command::Get {
            keys: vec![k("key")],
            touch: None,
            with_cas: true,
            opts: GetOpts::default()
        }
    );
    let mut ext = Vec::new();
    ext.extend_from_slice(&5u32.to_be_bytes());
    ext.extend_from_slice(&100u32.to_be_bytes());
    let r = one(&bin_req(opcode::SETQ, &ext, b"k", b"val", 1, 0));
    assert_eq!(r.ctx, ReqCtx::binary(Op::Set, opcode::SETQ, 1, true));
    assert_eq!(r.cmd, store(StoreMode::Set, "k", 5, 100, b"val", None));
    // A nonzero CAS turns set/add/replace into a CAS store (memcached).
    for opc in [opcode::SET, opcode::ADD, opcode::REPLACE] {
        let r = one(&bin_req(opc, &ext, b"k", b"val", 1, 9));
        assert!(matches!(
            r.cmd,
            Command::Store {
                mode: StoreMode::Cas,
                cas: Some(9),
                ..
            }
        ));
    }
    let r = one(&bin_req(opcode::APPEND, &[], b"k", b"++", 0, 3));
    assert_eq!(r.cmd, store(StoreMode::Append, "k", 0, 0, b"++", Some(3)));
    let r = one(&bin_req(opcode::DELETEQ, &[], b"k", &[], 0, 0));
    assert_eq!(
        (r.cmd, r.ctx.noreply),
        (
            Command::Delete {
                key: k("k"),
                cas: None,
                opts: DeleteOpts::default()
            },
            true
        )
    );
    let mut ext = Vec::new();
    ext.extend_from_slice(&3u64.to_be_bytes());
    ext.extend_from_slice(&10u64.to_be_bytes());
    ext.extend_from_slice(&60u32.to_be_bytes());
    let r = one(&bin_req(opcode::DECREMENT, &ext, b"n", &[], 0, 0));
    assert_eq!(
        r.cmd,
        Command::Arith {
            key: k("n"),
            incr: false,
            delta: 3,
            create: Some((10, 60)),
            cas: None,
            ttl: None,
            new_cas: None
        }
    );
    ext[16..].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(
        one(&bin_req(opcode::INCREMENT, &ext, b"n", &[], 0, 0)).cmd,
        Command::Arith {
            create: None,
            incr: true,
            ..
        }
    ));
    let r = one(&bin_req(
        opcode::GATQ,
        &30u32.to_be_bytes(),
        b"k",
        &[],
        0,
        0,
    ));
    assert!(
        matches!(
            r.cmd,
            Command::Get {
                touch: Some(30),
                ..
            }
        ) && r.ctx.noreply
    );
    assert_eq!(
        one(&bin_req(
            opcode::TOUCH,
            &30u32.to_be_bytes(),
            b"k",
            &[],
            0,
            0
        ))
        .cmd,
        Command::Touch {
            key: k("k"),
            exptime: 30
        }
    );
    assert_eq!(
        one(&bin_req(opcode::FLUSH, &[], &[], &[], 0, 0)).cmd,
        Command::FlushAll { delay: 0 }
    );
    assert_eq!(
        one(&bin_req(
            opcode::FLUSHQ,
            &9u32.to_be_bytes(),
            &[],
            &[],
            0,
            0
        ))
        .cmd,
        Command::FlushAll { delay: 9 }
    );
    assert_eq!(
        one(&bin_req(opcode::NOOP, &[], &[], &[], 0, 0)).cmd,
        Command::NoOp
    );
    assert_eq!(
        one(&bin_req(opcode::VERSION, &[], &[], &[], 0, 0)).cmd,
        Command::Version
    );
    assert_eq!(
        one(&bin_req(opcode::QUITQ, &[], &[], &[], 0, 0)).cmd,
        Command::Quit
    );
    assert_eq!(
        one(&bin_req(opcode::STAT, &[], &[], &[], 0, 0)).cmd,
        Command::Stats { args: vec![] }
    );
    assert_eq!(
        one(&bin_req(opcode::STAT, &[], b"items", &[], 0, 0)).cmd,
        Command::Stats {
            args: vec![k("items")]
        }
    );
}

#[test]
fn binary_request_errors() {
    // Bad shapes: InvalidArguments, then close.
    let bad: Vec<Vec<u8>> = vec![
        bin_req(opcode::GET, &[], &[], &[], 0, 0),
        bin_req(opcode::GET, &[0; 4], b"k", &[], 0, 0),
        bin_req(opcode::GET, &[], b"k", b"v", 0, 0),
        bin_req(opcode::SET, &[0; 4], b"k", b"v", 0, 0),
        bin_req(opcode::DELETE, &[], b"k", b"v", 0, 0),
        bin_req(opcode::INCREMENT, &[0; 8], b"k", &[], 0, 0),
        bin_req(opcode::NOOP, &[], b"k", &[], 0, 0),
        bin_req(opcode::FLUSH, &[0; 2], &[], &[], 0, 0),
        bin_req(opcode::TOUCH, &[], b"k", &[], 0, 0),
        bin_req(opcode::GET, &[], &[b'k'; 251], &[], 0, 0),
    ];
    for wire in bad {
        let e = parse(&wire[..24], &lim()).unwrap_err();
        assert_eq!(e.recovery, Recovery::Close, "{:?}", &wire[..24]);
        let p = packets(&err_reply(&e));
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].0.vbucket_or_status, Status::InvalidArguments as u16);
        assert_eq!(p[0].3, b"Invalid arguments");
    }
    // key_len + extras_len > body_len: memcached says UnknownCommand, closes.
    let mut w = bin_req(opcode::GET, &[], b"key", &[], 0, 0);
    w[11] = 2;
    let e = parse(&w, &lim()).unwrap_err();
    assert_eq!(
        (e.failure, e.recovery),
        (Failure::UnknownCommand, Recovery::Close)
    );
    // Unknown opcode: UnknownCommand, body skipped, opaque echoed.
    let w = bin_req(0x55, &[1, 2], b"k", b"body", 0xabcd, 0);
    let e = parse(&w[..24], &lim()).unwrap_err();
    assert_eq!(e.recovery, Recovery::Skip(w.len()));
    let p = packets(&err_reply(&e));
    assert_eq!((p[0].0.opcode, p[0].0.opaque), (0x55, 0xabcd));
    assert_eq!(p[0].0.vbucket_or_status, Status::UnknownCommand as u16);
    let e = parse(
        &bin_req(opcode::SASL_LIST_MECHS, &[], &[], &[], 0, 0),
        &lim(),
    )
    .unwrap_err();
    assert_eq!(e.failure, Failure::UnknownCommand);
    // memcached 1.6 has no binary Verbosity: unknown, body skipped.
    let w = bin_req(opcode::VERBOSITY, &2u32.to_be_bytes(), &[], &[], 0, 0);
    let e = parse(&w, &lim()).unwrap_err();
    assert_eq!(
        (e.failure, e.recovery),
        (Failure::UnknownCommand, Recovery::Skip(28))
    );
    // Too large: ValueTooLarge, body skipped, Set unlinks.
    let limits = Limits {
        max_item_size: 3,
        ..lim()
    };
    let w = bin_req(opcode::SET, &[0; 8], b"k", b"four", 0, 0);
    let e = parse(&w[..24 + 9], &limits).unwrap_err();
    assert_eq!(
        (e.recovery, e.unlink.clone()),
        (Recovery::Skip(w.len()), Some(k("k")))
    );
    let p = packets(&err_reply(&e));
    assert_eq!(p[0].0.vbucket_or_status, Status::ValueTooLarge as u16);
    let e = parse(&bin_req(opcode::APPENDQ, &[], b"k", b"four", 0, 0), &limits).unwrap_err();
    assert_eq!((e.failure, e.unlink), (Failure::TooLarge, None));
    // Incomplete packets wait.
    let w = bin_req(opcode::SET, &[0; 8], b"k", b"val", 0, 0);
    for cut in 0..w.len() {
        assert_eq!(parse(&w[..cut], &lim()), Ok(None));
    }
}

#[test]
fn binary_reply_encoding() {
    let it = ItemView::new(b"key", 0x01020304, b"value", 77);
    let get = ReqCtx::binary(Op::Get, opcode::GET, 5, false);
    let p = packets(&reply(&Response::Hit(it), &get));
    assert_eq!(p.len(), 1);
    let (h, e, key, v) = &p[0];
    assert_eq!(
        (h.opcode, h.opaque, h.cas, h.vbucket_or_status),
        (opcode::GET, 5, 77, 0)
    );
    assert_eq!(
        (e.as_slice(), key.as_slice(), v.as_slice()),
        (&[1u8, 2, 3, 4][..], &b""[..], &b"value"[..])
    );
    let getk = ReqCtx::binary(Op::Get, opcode::GETK, 5, false);
    assert_eq!(packets(&reply(&Response::Hit(it), &getk))[0].2, b"key");
    // Misses: error for Get, key for GetK, nothing for quiet gets.
    let p = packets(&reply(&Response::Miss { key: b"key" }, &get));
    assert_eq!(
        (p[0].0.vbucket_or_status, p[0].3.as_slice()),
        (Status::KeyNotFound as u16, &b"Not found"[..])
    );
    let p = packets(&reply(&Response::Miss { key: b"key" }, &getk));
    assert_eq!(
        (p[0].0.vbucket_or_status, p[0].2.as_slice()),
        (Status::KeyNotFound as u16, &b"key"[..])
    );
    for opc in [opcode::GETQ, opcode::GETKQ, opcode::GATQ, opcode::GATKQ] {
        let (op, quiet) = binary::op_of(opc).unwrap();
        let ctx = ReqCtx::binary(op, opc, 0, quiet);
        assert!(reply(&Response::Miss { key: b"k" }, &ctx).is_empty());
        assert_eq!(packets(&reply(&Response::Hit(it), &ctx)).len(), 1);
    }
    assert!(reply(&Response::End, &get).is_empty());
    // Stores: CAS in the header; quiet success is silent, errors are not.
    let set = ReqCtx::binary(Op::Set, opcode::SET, 0, false);
    assert_eq!(
        packets(&reply(&Response::Stored { cas: 8 }, &set))[0].0.cas,
        8
    );
    let setq = ReqCtx::binary(Op::Set, opcode::SETQ, 0, true);
    assert!(reply(&Response::Stored { cas: 8 }, &setq).is_empty());
    let st = |r: Response<'_>, ctx: &ReqCtx| packets(&reply(&r, ctx))[0].0.vbucket_or_status;
    assert_eq!(st(Response::Exists, &setq), Status::KeyExists as u16);
    assert_eq!(
        st(
            Response::NotStored,
            &ReqCtx::binary(Op::Add, opcode::ADD, 0, false)
        ),
        Status::KeyExists as u16
    );
    assert_eq!(
        st(
            Response::NotStored,
            &ReqCtx::binary(Op::Replace, opcode::REPLACE, 0, false)
        ),
        Status::KeyNotFound as u16
    );
    assert_eq!(
        st(
            Response::NotStored,
            &ReqCtx::binary(Op::Append, opcode::APPEND, 0, false)
        ),
        Status::ItemNotStored as u16
    );
    assert_eq!(
        st(Response::Error(Failure::NonNumeric), &set),
        Status::NonNumeric as u16
    );
    assert_eq!(
        st(Response::Error(Failure::OutOfMemory), &set),
        Status::OutOfMemory as u16
    );
    assert_eq!(
        st(Response::Error(Failure::TooLarge), &set),
        Status::ValueTooLarge as u16
    );
    // incr: 8-byte big-endian value.
    let incr = ReqCtx::binary(Op::Incr, opcode::INCREMENT, 0, false);
    let p = packets(&reply(
        &Response::Arith {
            value: 258,
            cas: 3,
            ttl: None,
        },
        &incr,
    ));
    assert_eq!(
        (p[0].3.as_slice(), p[0].0.cas),
        (&258u64.to_be_bytes()[..], 3)
    );
    assert!(
        reply(
            &Response::Arith {
                value: 1,
                cas: 1,
                ttl: None
            },
            &ReqCtx::binary(Op::Incr, opcode::INCREMENTQ, 0, true)
        )
        .is_empty()
    );
    // touch: flags extras, no value.
    let touch = ReqCtx::binary(Op::Touch, opcode::TOUCH, 0, false);
    let p = packets(&reply(&Response::Touched { flags: 9, cas: 4 }, &touch));
    assert_eq!(
        (p[0].1.as_slice(), p[0].3.len(), p[0].0.cas),
        (&9u32.to_be_bytes()[..], 0, 4)
    );
    // version, stats, quiet flush/quit, noop.
    let p = packets(&reply(
        &Response::Version("1.6.21"),
        &ReqCtx::binary(Op::Version, opcode::VERSION, 0, false),
    ));
    assert_eq!(p[0].3, b"1.6.21");
    let stats = vec![
        ("a".to_string(), "1".to_string()),
        ("b".to_string(), "2".to_string()),
    ];
    let p = packets(&reply(
        &Response::Stats(&stats),
        &ReqCtx::binary(Op::Stats, opcode::STAT, 3, false),
    ));
    assert_eq!(p.len(), 3);
    assert_eq!(
        (p[1].2.as_slice(), p[1].3.as_slice()),
        (&b"b"[..], &b"2"[..])
    );
    assert_eq!((p[2].0.key_len, p[2].0.body_len, p[2].0.opaque), (0, 0, 3));
    assert!(
        reply(
            &Response::Ok,
            &ReqCtx::binary(Op::FlushAll, opcode::FLUSHQ, 0, true)
        )
        .is_empty()
    );
    assert_eq!(
        packets(&reply(
            &Response::Ok,
            &ReqCtx::binary(Op::NoOp, opcode::NOOP, 0, false)
        ))
        .len(),
        1
    );
}

// -------------------------------------------------------------- pipelining

fn mixed_stream() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(b"set a 1 0 5\r\nhello\r\n");
    b.extend_from_slice(b"get a b\r\n");
    b.extend_from_slice(&bin_req(opcode::GETK, &[], b"a", &[], 1, 0));
    b.extend_from_slice(b"bogus line\r\n");
    b.extend_from_slice(b"ms m 3 T10 q\r\nabc\r\n");
    b.extend_from_slice(&bin_req(0x44, &[], &[], b"junk", 2, 0));
    b.extend_from_slice(b"set big 0 0 2000\r\n");
    b.extend_from_slice(&[b'z'; 2000]);
    b.extend_from_slice(b"\r\n");
    b.extend_from_slice(b"mg m v k O1\r\n");
    b.extend_from_slice(b"set c 0 0 2\r\nxyz\r\n");
    b.extend_from_slice(b"incr n 5 noreply\r\n");
    b.extend_from_slice(&bin_req(opcode::NOOP, &[], &[], &[], 3, 0));
    b.extend_from_slice(b"mn\r\n");
    b
}

#[test]
fn pipelined_buffer_split_anywhere_gives_same_requests() {
    let limits = Limits {
        max_item_size: 1000,
        ..lim()
    };
    let stream = mixed_stream();
    let whole = drive([stream.as_slice()], &limits);
    let kinds: Vec<bool> = whole.iter().map(|o| matches!(o, Outcome::Req(_))).collect();
    assert_eq!(
        kinds,
        // set, get, GETK, bogus (ERROR), ms, unknown opcode, too-large set,
        // mg, bad data chunk (consumes "xyz\r"), the left-over "\n" (ERROR),
        // incr, NOOP, mn
        vec![
            true, true, true, false, true, false, false, true, false, false, true, true, true
        ]
    );
    for cut in 0..=stream.len() {
        let (a, b) = stream.split_at(cut);
        assert_eq!(drive([a, b], &limits), whole, "split at {cut}");
    }
    // And byte by byte.
    assert_eq!(drive(stream.chunks(1), &limits), whole);
}

// --------------------------------------------------------------- proptest

mod props {
    use super::super::*;
    use super::{Outcome, drive};
    use proptest::prelude::*;
    use proptest::sample::subsequence;

    fn text_key() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(0x21u8..=0x7e, 1..=40)
            .prop_filter("not noreply", |k| k != b"noreply")
    }

    fn bin_key() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 1..=40)
    }

    fn data() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..64)
    }

    fn exptime() -> impl Strategy<Value = i64> {
        any::<i32>().prop_map(i64::from)
    }

    fn text_request() -> impl Strategy<Value = Request> {
        let get = (
            proptest::collection::vec(text_key(), 1..5),
            proptest::option::of(exptime()),
            any::<bool>(),
        )
            .prop_map(|(keys, touch, with_cas)| {
                let op = match (touch.is_some(), with_cas) {
                    (false, false) => Op::Get,
                    (false, true) => Op::Gets,
                    (true, false) => Op::Gat,
                    (true, true) => Op::Gats,
                };
                Request {
                    cmd: Command::Get {
                        keys,
                        touch,
                        with_cas,
                        opts: GetOpts::default(),
                    },
                    ctx: ReqCtx::text(op, false),
                }
            });
        let modes = prop_oneof![
            Just((StoreMode::Set, Op::Set)),
            Just((StoreMode::Add, Op::Add)),
            Just((StoreMode::Replace, Op::Replace)),
            Just((StoreMode::Append, Op::Append)),
            Just((StoreMode::Prepend, Op::Prepend)),
            Just((StoreMode::Cas, Op::Cas)),
        ];
        let st = (
            modes,
            text_key(),
            any::<u32>(),
            exptime(),
            data(),
            any::<u64>(),
            any::<bool>(),
        )
            .prop_map(
                |((mode, op), key, flags, exptime, data, cas, noreply)| Request {
                    cmd: Command::Store {
                        mode,
                        key,
                        flags,
                        exptime,
                        data,
                        cas: (mode == StoreMode::Cas).then_some(cas),
                        opts: StoreOpts::default(),
                    },
                    ctx: ReqCtx::text(op, noreply),
                },
            );
        let misc = (
            text_key(),
            any::<u64>(),
            exptime(),
            any::<bool>(),
            0u8..8,
            any::<u32>(),
            proptest::collection::vec(text_key(), 0..3),
        )
            .prop_map(|(key, n, t, noreply, which, level, args)| {
                let (cmd, op, nr) = match which {
                    0 => (
                        Command::Delete {
                            key,
                            cas: None,
                            opts: DeleteOpts::default(),
                        },
                        Op::Delete,
                        noreply,
                    ),
                    1 => (
                        Command::Arith {
                            key,
                            incr: noreply,
                            delta: n,
                            create: None,
                            cas: None,
                            ttl: None,
                            new_cas: None,
                        },
                        if noreply { Op::Incr } else { Op::Decr },
                        noreply,
                    ),
                    2 => (Command::Touch { key, exptime: t }, Op::Touch, noreply),
                    3 => (Command::FlushAll { delay: t }, Op::FlushAll, noreply),
                    4 => (Command::Stats { args }, Op::Stats, false),
                    5 => (Command::Version, Op::Version, false),
                    6 => (Command::Verbosity { level }, Op::Verbosity, noreply),
                    _ => (Command::Quit, Op::Quit, false),
                };
                Request {
                    cmd,
                    ctx: ReqCtx::text(op, nr),
                }
            });
        prop_oneof![get, st, misc]
    }

    fn meta_request() -> impl Strategy<Value = Request> {
        let key = prop_oneof![
            text_key().prop_map(|k| (k, false)),
            proptest::collection::vec(any::<u8>(), 1..=120).prop_map(|k| (k, true)),
        ];
        let opaque = proptest::collection::vec(0x21u8..=0x7e, 0..=32);
        let rets = (opaque, any::<u64>()).prop_flat_map(|(o, seed)| {
            let all = vec![
                MetaRet::Cas,
                MetaRet::Flags,
                MetaRet::Hit,
                MetaRet::Key,
                MetaRet::LastAccess,
                MetaRet::Opaque(o),
                MetaRet::Size,
                MetaRet::Ttl,
            ];
            subsequence(all, 0..=8)
                .prop_shuffle()
                .prop_map(move |v| (v, seed))
        });
        let opt_t = || proptest::option::of(exptime());
        let opt_c = || proptest::option::of(any::<u64>());
        (
            key,
            rets,
            any::<bool>(),
            any::<bool>(),
            0u8..6,
            data(),
            (
                opt_t(),
                opt_t(),
                opt_t(),
                opt_c(),
                opt_c(),
                any::<u32>(),
                any::<u64>(),
                any::<bool>(),
                any::<bool>(),
            ),
        )
            .prop_map(
                |(
                    (key, b64),
                    (rets, _),
                    v,
                    q,
                    which,
                    data,
                    (t1, t2, t3, c1, c2, flags, n, f1, f2),
                )| {
                    let wire_key = if b64 {
                        let mut w = Vec::new();
                        base64::encode(&key, &mut w);
                        w
                    } else {
                        key.clone()
                    };
                    let keep = |codes: &[fn(&MetaRet) -> bool]| -> Vec<MetaRet> {
                        rets.iter()
                            .filter(|r| codes.iter().any(|f| f(r)))
                            .cloned()
                            .collect()
                    };
                    let is_o: fn(&MetaRet) -> bool = |r| matches!(r, MetaRet::Opaque(_));
                    let is_k: fn(&MetaRet) -> bool = |r| matches!(r, MetaRet::Key);
                    let is_c: fn(&MetaRet) -> bool = |r| matches!(r, MetaRet::Cas);
                    let is_t: fn(&MetaRet) -> bool = |r| matches!(r, MetaRet::Ttl);
                    let mk = |op, ret: Vec<MetaRet>, value, q, cmd: Command| {
                        // mg/ma record T N R t in request order: the
                        // client sends the return flags (t) first, then
                        // the modifiers in the order asked for (a
                        // permutation picked by n).
                        let mut mods: Vec<u8> = match &cmd {
                            Command::Get { touch, opts, .. } => [
                                (b'T', touch.is_some()),
                                (b'N', opts.vivify.is_some()),
                                (b'R', opts.recache.is_some()),
                            ]
                            .iter()
                            .filter(|x| x.1)
                            .map(|x| x.0)
                            .collect(),
                            Command::Arith { create, ttl, .. } => {
                                [(b'N', create.is_some()), (b'T', ttl.is_some())]
                                    .iter()
                                    .filter(|x| x.1)
                                    .map(|x| x.0)
                                    .collect()
                            }
                            _ => Vec::new(),
                        };
                        if mods.len() > 1 {
                            let k = mods.len();
                            mods.swap(0, (n % k as u64) as usize);
                            mods.swap(1, 1 + ((n / 7) % (k as u64 - 1)) as usize);
                        }
                        let mut order = Vec::new();
                        if matches!(op, Op::MetaGet | Op::MetaArith) {
                            if ret.contains(&MetaRet::Ttl) {
                                order.push(b't');
                            }
                            order.extend(mods);
                        }
                        Request {
                            cmd,
                            ctx: ReqCtx::meta(
                                op,
                                q,
                                MetaCtx {
                                    ret,
                                    wire_key: wire_key.clone(),
                                    base64: b64,
                                    value,
                                    order,
                                },
                            ),
                        }
                    };
                    match which {
                        0 => mk(
                            Op::MetaGet,
                            rets.clone(),
                            v,
                            q,
                            Command::Get {
                                keys: vec![key.clone()],
                                touch: t1,
                                with_cas: true,
                                opts: GetOpts {
                                    vivify: t2,
                                    recache: t3,
                                    no_bump: f1,
                                    new_cas: c1,
                                },
                            },
                        ),
                        1 => {
                            let mode = [
                                StoreMode::Set,
                                StoreMode::Add,
                                StoreMode::Replace,
                                StoreMode::Append,
                                StoreMode::Prepend,
                                StoreMode::Cas,
                            ][(n % 6) as usize];
                            let cas = match mode {
                                StoreMode::Cas => Some(c1.unwrap_or(0)),
                                StoreMode::Append | StoreMode::Prepend => c1,
                                _ => None,
                            };
                            let vivify = if matches!(mode, StoreMode::Append | StoreMode::Prepend) {
                                t2
                            } else {
                                None
                            };
                            mk(
                                Op::MetaSet,
                                keep(&[is_o, is_k, is_c]),
                                false,
                                q,
                                Command::Store {
                                    mode,
                                    key: key.clone(),
                                    flags,
                                    exptime: t1.unwrap_or(0),
                                    data,
                                    cas,
                                    opts: StoreOpts {
                                        invalidate: f1,
                                        vivify,
                                        new_cas: c2,
                                    },
                                },
                            )
                        }
                        2 => mk(
                            Op::MetaDelete,
                            keep(&[is_o, is_k]),
                            false,
                            q,
                            Command::Delete {
                                key: key.clone(),
                                cas: c1,
                                opts: DeleteOpts {
                                    invalidate: f1,
                                    ttl: t1,
                                    drop_value: f2,
                                    new_cas: c2,
                                },
                            },
                        ),
                        3 => mk(
                            Op::MetaArith,
                            keep(&[is_c, is_t, is_o, is_k]),
                            v,
                            q,
                            Command::Arith {
                                key: key.clone(),
                                incr: f1,
                                delta: n,
                                create: t2.map(|t| (c2.unwrap_or(0), t)),
                                cas: c1,
                                ttl: t1,
                                new_cas: c2,
                            },
                        ),
                        4 => mk(
                            Op::MetaDebug,
                            vec![],
                            false,
                            false,
                            Command::MetaDebug { key: key.clone() },
                        ),
                        _ => Request {
                            cmd: Command::NoOp,
                            ctx: ReqCtx::meta(Op::MetaNoOp, false, MetaCtx::default()),
                        },
                    }
                },
            )
    }

    fn binary_request() -> impl Strategy<Value = Request> {
        use super::super::binary::{op_of, opcode as o};
        let opcodes = vec![
            o::GET,
            o::GETQ,
            o::GETK,
            o::GETKQ,
            o::GAT,
            o::GATQ,
            o::GATK,
            o::GATKQ,
            o::TOUCH,
            o::SET,
            o::SETQ,
            o::ADD,
            o::ADDQ,
            o::REPLACE,
            o::REPLACEQ,
            o::APPEND,
            o::APPENDQ,
            o::PREPEND,
            o::PREPENDQ,
            o::DELETE,
            o::DELETEQ,
            o::INCREMENT,
            o::INCREMENTQ,
            o::DECREMENT,
            o::DECREMENTQ,
            o::QUIT,
            o::QUITQ,
            o::FLUSH,
            o::FLUSHQ,
            o::NOOP,
            o::VERSION,
            o::STAT,
        ];
        (
            proptest::sample::select(opcodes),
            bin_key(),
            data(),
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            any::<bool>(),
            any::<u32>(),
        )
            .prop_map(|(opc, key, data, opaque, t, cas, n, flag, flags)| {
                let (op, quiet) = match op_of(opc) {
                    Some(x) => x,
                    None => (Op::NoOp, false),
                };
                let t64 = i64::from(t);
                let cas = if flag { Some(cas.max(1)) } else { None };
                let cmd = match op {
                    Op::Get => Command::Get {
                        keys: vec![key],
                        touch: None,
                        with_cas: true,
                        opts: GetOpts::default(),
                    },
                    Op::Gat => Command::Get {
                        keys: vec![key],
                        touch: Some(t64),
                        with_cas: true,
                        opts: GetOpts::default(),
                    },
                    Op::Touch => Command::Touch { key, exptime: t64 },
                    Op::Set | Op::Add | Op::Replace => Command::Store {
                        mode: match (op, cas) {
                            (_, Some(_)) => StoreMode::Cas,
                            (Op::Set, _) => StoreMode::Set,
                            (Op::Add, _) => StoreMode::Add,
                            _ => StoreMode::Replace,
                        },
                        key,
                        flags,
                        exptime: t64,
                        data,
                        cas,
                        opts: StoreOpts::default(),
                    },
                    Op::Append | Op::Prepend => Command::Store {
                        mode: if op == Op::Append {
                            StoreMode::Append
                        } else {
                            StoreMode::Prepend
                        },
                        key,
                        flags: 0,
                        exptime: 0,
                        data,
                        cas,
                        opts: StoreOpts::default(),
                    },
                    Op::Delete => Command::Delete {
                        key,
                        cas,
                        opts: DeleteOpts::default(),
                    },
                    Op::Incr | Op::Decr => Command::Arith {
                        key,
                        incr: op == Op::Incr,
                        delta: n,
                        create: (t != u32::MAX && flag).then_some((n / 3, t64)),
                        cas,
                        ttl: None,
                        new_cas: None,
                    },
                    Op::FlushAll => Command::FlushAll { delay: t64 },
                    Op::Stats => Command::Stats {
                        args: if flag { vec![key] } else { vec![] },
                    },
                    Op::Version => Command::Version,
                    Op::Quit => Command::Quit,
                    _ => Command::NoOp,
                };
                Request {
                    cmd,
                    ctx: ReqCtx::binary(op, opc, opaque, quiet),
                }
            })
    }

    fn any_request() -> impl Strategy<Value = Request> {
        prop_oneof![text_request(), meta_request(), binary_request()]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let limits = Limits { max_item_size: 64, max_line: 100, max_keys_per_get: 4, ..Limits::default() };
            let _ = drive([bytes.as_slice()], &limits);
            let _ = drive(bytes.chunks(7), &limits);
        }

        #[test]
        fn random_protocolish_bytes_never_panic(
            parts in proptest::collection::vec(prop_oneof![
                Just(&b"get "[..]), Just(&b"set k 0 0 "[..]), Just(&b"mg "[..]), Just(&b"ms k "[..]),
                Just(&b"ma "[..]), Just(&b"\r\n"[..]), Just(&b" "[..]), Just(&b"\x80"[..]),
                Just(&b"\x80\x01\x00\x01\x08\x00\x00\x00\x00\x00\x00\x0a"[..]), Just(&b"9"[..]),
                Just(&b"-"[..]), Just(&b"b"[..]), Just(&b"k"[..]), Just(&b"noreply"[..]),
                Just(&b"Zm9v"[..]), Just(&b"O"[..]), Just(&b"T"[..]), Just(&b"\n"[..]),
            ], 0..60)
        ) {
            let bytes: Vec<u8> = parts.concat();
            let limits = Limits { max_item_size: 64, max_line: 100, max_keys_per_get: 4, ..Limits::default() };
            let whole = drive([bytes.as_slice()], &limits);
            prop_assert_eq!(drive(bytes.chunks(3), &limits), whole);
        }

        #[test]
        fn mutated_pipelines_parse_the_same_at_any_split(
            reqs in proptest::collection::vec(any_request(), 1..5),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut wire = Vec::new();
            for r in &reqs {
                client::encode_request(r, &mut wire);
            }
            for (at, byte) in flips {
                let i = at.index(wire.len());
                wire[i] = byte;
            }
            let limits = Limits { max_item_size: 48, max_line: 120, ..Limits::default() };
            let whole = drive([wire.as_slice()], &limits);
            let at = cut.index(wire.len() + 1);
            let (a, b) = wire.split_at(at);
            prop_assert_eq!(drive([a, b], &limits), whole.clone());
            prop_assert_eq!(drive(wire.chunks(5), &limits), whole);
        }

        #[test]
        fn valid_requests_round_trip(req in any_request()) {
            let mut wire = Vec::new();
            client::encode_request(&req, &mut wire);
            let got = parse(&wire, &Limits::default());
            prop_assert_eq!(got, Ok(Some((req, wire.len()))));
        }

        #[test]
        fn pipelines_round_trip_at_any_split(reqs in proptest::collection::vec(any_request(), 1..6), cut in any::<prop::sample::Index>()) {
            let mut wire = Vec::new();
            for r in &reqs {
                client::encode_request(r, &mut wire);
            }
            let want: Vec<Outcome> = reqs.into_iter().map(Outcome::Req).collect();
            let at = cut.index(wire.len() + 1);
            let (a, b) = wire.split_at(at);
            prop_assert_eq!(drive([a, b], &Limits::default()), want);
        }
    }
}

/// Fuzzing found (fuzz/regressions/protocol/): a retrieval line longer than
/// `max_line` (allowed: retrievals have their own limit) was refused as too
/// long when a prefix ending inside its command name arrived first — the
/// verdict depended on how the bytes were split.
#[test]
fn a_long_retrieval_line_is_not_refused_while_its_name_arrives() {
    let limits = Limits {
        max_key: 16,
        max_item_size: 64,
        max_line: 96,
        max_keys_per_get: 4,
    };
    let mut line = vec![b' '; 94];
    line.extend_from_slice(b"gat 1 nor\r  a\n");
    let whole = parse(&line, &limits);
    assert!(
        matches!(whole, Ok(Some((_, n))) if n == line.len()),
        "{whole:?}"
    );
    for k in 0..line.len() {
        assert_eq!(parse(&line[..k], &limits), Ok(None), "prefix of {k} bytes");
    }
    // A line that cannot become a retrieval is still refused at the limit.
    let mut set = vec![b' '; 94];
    set.extend_from_slice(b"set k 0 0 1\r\n");
    assert!(matches!(parse(&set[..97], &limits), Err(e) if e.recovery == Recovery::Close));
}

#[test]
fn a_long_get_line_streams_in_chunks_of_whole_keys() {
    use super::text::{LongGet, STREAM_GET_AT, long_get};
    let limits = Limits::default();
    assert_eq!(long_get(b"get a b\r\n", &limits, false), LongGet::No);
    let mut line = b"get ".to_vec();
    while line.len() < STREAM_GET_AT + 5 {
        line.extend_from_slice(b"foobarbaz ");
    }
    line.extend_from_slice(b"foob");
    let LongGet::Chunk {
        op,
        keys,
        rest,
        name,
    } = long_get(&line, &limits, false)
    else {
        panic!("not streamed");
    };
    assert_eq!((op, name), (Op::Get, &b"get "[..]));
    assert_eq!(&line[rest..], b"foob");
    assert!(keys.iter().all(|k| k == b"foobarbaz"));
    assert_eq!(keys.len(), (rest - 4) / 10);
    // The rest, rewritten as a get line, parses as usual once whole.
    assert_eq!(long_get(b"get foob\r\n", &limits, true), LongGet::No);
    assert_eq!(long_get(b"get \r\n", &limits, true), LongGet::End(6));
    assert_eq!(long_get(b"get \r\n", &limits, false), LongGet::No);
    let mut bad = b"gets ".to_vec();
    bad.extend(std::iter::repeat_n(b'k', STREAM_GET_AT));
    bad.push(b' ');
    assert_eq!(long_get(&bad, &limits, false), LongGet::BadKey);
}
