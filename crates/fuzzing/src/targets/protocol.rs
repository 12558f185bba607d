//! `ferrite-server`: the memcached text, meta and binary request parser,
//! fed the raw fuzz input as a connection's byte stream.

use ferrite_server::protocol::{self, Limits, Recovery, client, response};

/// Small limits, so the fuzzer reaches "too long" and "too large" paths
/// with short inputs (the defaults are exercised by the server's tests).
fn limits(small: bool) -> Limits {
    if small {
        Limits {
            max_key: 16,
            max_item_size: 64,
            max_line: 96,
            max_keys_per_get: 4,
        }
    } else {
        Limits::default()
    }
}

/// Parses the input as a pipelined stream, the way a connection's read
/// loop does: take a request, drop its bytes, or apply the error's
/// resynchronisation, until more bytes are needed or the connection would
/// close. The first input byte's low bit picks small limits (and is part
/// of the stream). Checks, per request taken:
/// - it used `1..=len` bytes;
/// - incremental decoding: the same bytes alone parse to the same
///   request, and every shorter prefix asks for more bytes;
/// - the client encoder writes it back as bytes that parse to itself;
/// - a `Skip` moves forward; error replies encode without panicking.
pub fn protocol(data: &[u8]) {
    let lim = limits(data.first().is_some_and(|b| b & 1 == 1));
    let mut buf = data;
    let mut out = Vec::new();
    // Every iteration consumes at least one byte, so this terminates.
    while !buf.is_empty() {
        match protocol::parse(buf, &lim) {
            Ok(None) => break,
            Ok(Some((req, n))) => {
                assert!(n >= 1 && n <= buf.len(), "took {n} of {} bytes", buf.len());
                let alone = protocol::parse(&buf[..n], &lim);
                assert_eq!(
                    alone,
                    Ok(Some((req.clone(), n))),
                    "the request's own bytes parse differently"
                );
                let step = (n / 64).max(1);
                for k in (0..n).step_by(step) {
                    assert_eq!(
                        protocol::parse(&buf[..k], &lim),
                        Ok(None),
                        "a {k}-byte prefix of a {n}-byte request did not ask for more"
                    );
                }
                let mut wire = Vec::new();
                client::encode_request(&req, &mut wire);
                match protocol::parse(&wire, &Limits::default()) {
                    Ok(Some((back, m))) => {
                        assert_eq!(m, wire.len(), "re-encoded request not consumed whole");
                        assert_eq!(
                            back, req,
                            "request does not round-trip through the client encoder"
                        );
                    }
                    other => panic!("re-encoded request {req:?} parses as {other:?}"),
                }
                buf = &buf[n..];
            }
            Err(e) => {
                out.clear();
                response::encode_error(&e, &mut out);
                match e.recovery {
                    Recovery::Skip(n) => {
                        assert!(n >= 1, "Skip(0) would loop forever");
                        buf = &buf[n.min(buf.len())..];
                    }
                    Recovery::Close | Recovery::CloseSilently => break,
                }
            }
        }
    }
}
