//! memcached's binary protocol.
//!
//! Every packet starts with a 24-byte header, all fields big-endian:
//!
//! ```text
//! byte  0      magic       0x80 request, 0x81 response
//!       1      opcode
//!       2..4   key length
//!       4      extras length
//!       5      data type   (0 = raw bytes)
//!       6..8   vbucket id (request) / status (response)
//!       8..12  total body length = extras + key + value
//!      12..16  opaque      (copied into the response)
//!      16..24  CAS
//! ```
//!
//! followed by the extras, the key and the value. Extras per opcode:
//! Set/Add/Replace: flags u32, expiration u32; Incr/Decr: delta u64,
//! initial u64, expiration u32 (0xffffffff = fail on a miss rather than
//! create); Flush: optional expiration u32; Touch/GAT: expiration u32. Get-family responses carry the flags u32 as
//! extras; Incr/Decr responses the new value as an 8-byte value.
//!
//! Malformed packets are handled as memcached does: a bad shape
//! (extras/key/body lengths that do not fit the opcode, a key over 250
//! bytes) gets `InvalidArguments` and the connection is closed, since the
//! stream cannot be trusted (extras + key longer than the body: memcached
//! says `UnknownCommand`, then closes); an unknown opcode gets
//! `UnknownCommand` and its body is skipped; a value over the item size limit gets `ValueTooLarge`
//! and its body is skipped (and, for Set, the old item is removed).
//! SASL opcodes are answered `UnknownCommand` (no authentication), and so
//! is Verbosity (0x1b), which memcached 1.6 does not implement in binary.

use super::{
    Command, Failure, GetOpts, Limits, Op, ParseResult, ProtoError, Recovery, ReqCtx, Request,
    StoreMode, StoreOpts,
};

/// Byte 0 of every request packet.
pub const REQ_MAGIC: u8 = 0x80;
/// Byte 0 of every response packet.
pub const RES_MAGIC: u8 = 0x81;
/// Bytes of the fixed packet header before the extras, key and value.
pub const HEADER_LEN: usize = 24;

/// Binary opcodes (the ones this server implements, plus SASL for
/// recognition).
pub mod opcode {
    /// `0x00`: Get a key (reply without the key).
    pub const GET: u8 = 0x00;
    /// `0x01`: Store unconditionally (extras: flags, exptime).
    pub const SET: u8 = 0x01;
    /// `0x02`: Store only if absent.
    pub const ADD: u8 = 0x02;
    /// `0x03`: Store only if present.
    pub const REPLACE: u8 = 0x03;
    /// `0x04`: Remove a key.
    pub const DELETE: u8 = 0x04;
    /// `0x05`: Add to a decimal value (extras: delta, initial, exptime).
    pub const INCREMENT: u8 = 0x05;
    /// `0x06`: Subtract from a decimal value, saturating at 0.
    pub const DECREMENT: u8 = 0x06;
    /// `0x07`: Reply, then close the connection.
    pub const QUIT: u8 = 0x07;
    /// `0x08`: Invalidate every item (optional extras: delay).
    pub const FLUSH: u8 = 0x08;
    /// `0x09`: quiet [`GET`]: no reply on a miss.
    pub const GETQ: u8 = 0x09;
    /// `0x0a`: Reply at once: marks the end of a pipeline of quiet requests.
    pub const NOOP: u8 = 0x0a;
    /// `0x0b`: The server version string.
    pub const VERSION: u8 = 0x0b;
    /// `0x0c`: Get a key, the key echoed in the reply.
    pub const GETK: u8 = 0x0c;
    /// `0x0d`: quiet [`GETK`]: no reply on a miss.
    pub const GETKQ: u8 = 0x0d;
    /// `0x0e`: Append to a present item's value.
    pub const APPEND: u8 = 0x0e;
    /// `0x0f`: Prepend to a present item's value.
    pub const PREPEND: u8 = 0x0f;
    /// `0x10`: Statistics: one packet per value, an empty one last.
    pub const STAT: u8 = 0x10;
    /// `0x11`: quiet [`SET`]: no reply on success.
    pub const SETQ: u8 = 0x11;
    /// `0x12`: quiet [`ADD`]: no reply on success.
    pub const ADDQ: u8 = 0x12;
    /// `0x13`: quiet [`REPLACE`]: no reply on success.
    pub const REPLACEQ: u8 = 0x13;
    /// `0x14`: quiet [`DELETE`]: no reply on success.
    pub const DELETEQ: u8 = 0x14;
    /// `0x15`: quiet [`INCREMENT`]: no reply on success.
    pub const INCREMENTQ: u8 = 0x15;
    /// `0x16`: quiet [`DECREMENT`]: no reply on success.
    pub const DECREMENTQ: u8 = 0x16;
    /// `0x17`: quiet [`QUIT`]: close without a reply.
    pub const QUITQ: u8 = 0x17;
    /// `0x18`: quiet [`FLUSH`]: no reply on success.
    pub const FLUSHQ: u8 = 0x18;
    /// `0x19`: quiet [`APPEND`]: no reply on success.
    pub const APPENDQ: u8 = 0x19;
    /// `0x1a`: quiet [`PREPEND`]: no reply on success.
    pub const PREPENDQ: u8 = 0x1a;
    /// `0x1b`: Set the log verbosity (answered `UnknownCommand`, as memcached
    /// 1.6).
    pub const VERBOSITY: u8 = 0x1b;
    /// `0x1c`: Set an item's exptime (extras: exptime).
    pub const TOUCH: u8 = 0x1c;
    /// `0x1d`: Get and touch (extras: exptime).
    pub const GAT: u8 = 0x1d;
    /// `0x1e`: quiet [`GAT`]: no reply on a miss.
    pub const GATQ: u8 = 0x1e;
    /// `0x20`: SASL: list the mechanisms (`PLAIN`).
    pub const SASL_LIST_MECHS: u8 = 0x20;
    /// `0x21`: SASL: authenticate (`PLAIN`: `\0user\0password`).
    pub const SASL_AUTH: u8 = 0x21;
    /// `0x22`: SASL: a further step (none for `PLAIN`).
    pub const SASL_STEP: u8 = 0x22;
    /// `0x23`: Get and touch, the key echoed in the reply.
    pub const GATK: u8 = 0x23;
    /// `0x24`: quiet [`GATK`]: no reply on a miss.
    pub const GATKQ: u8 = 0x24;
}

/// Response status codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Status {
    /// Success.
    NoError = 0x0000,
    /// The key is not there (get, delete, incr, touch, replace).
    KeyNotFound = 0x0001,
    /// The CAS did not match, or add found the key.
    KeyExists = 0x0002,
    /// The value exceeds the item size limit.
    ValueTooLarge = 0x0003,
    /// Malformed packet or argument (wrong extras or key lengths).
    InvalidArguments = 0x0004,
    /// Append/prepend found no item; add/replace condition not met.
    ItemNotStored = 0x0005,
    /// incr/decr on a value that is not a decimal u64.
    NonNumeric = 0x0006,
    /// An opcode this server does not implement.
    UnknownCommand = 0x0081,
    /// The store is full and eviction could not make room.
    OutOfMemory = 0x0082,
    /// A feature this server does not support.
    NotSupported = 0x0083,
    /// The store failed (`SERVER_ERROR` in text).
    InternalError = 0x0084,
}

/// A decoded packet header (request or response).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Header {
    /// [`REQ_MAGIC`] or [`RES_MAGIC`].
    pub magic: u8,
    /// The command ([`opcode`]).
    pub opcode: u8,
    /// Bytes of key after the extras (big-endian on the wire).
    pub key_len: u16,
    /// Bytes of extras after the header.
    pub extras_len: u8,
    /// Data type: 0 (raw bytes) in every reply; not checked in requests.
    pub data_type: u8,
    /// vbucket id in requests, status in responses.
    pub vbucket_or_status: u16,
    /// Bytes after the header: extras, key and value together.
    pub body_len: u32,
    /// Copied from request to response unchanged (the client's tag).
    pub opaque: u32,
    /// The item's CAS (0: none / do not compare).
    pub cas: u64,
}

impl Header {
    /// Decode the first 24 bytes of `b` (`None` if shorter).
    pub fn read(b: &[u8]) -> Option<Header> {
        let h: &[u8; HEADER_LEN] = b.get(..HEADER_LEN)?.try_into().ok()?;
        Some(Header {
            magic: h[0],
            opcode: h[1],
            key_len: u16::from_be_bytes([h[2], h[3]]),
            extras_len: h[4],
            data_type: h[5],
            vbucket_or_status: u16::from_be_bytes([h[6], h[7]]),
            body_len: u32::from_be_bytes([h[8], h[9], h[10], h[11]]),
            opaque: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
            cas: u64::from_be_bytes([h[16], h[17], h[18], h[19], h[20], h[21], h[22], h[23]]),
        })
    }

    /// Append the 24-byte encoding.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(self.magic);
        out.push(self.opcode);
        out.extend_from_slice(&self.key_len.to_be_bytes());
        out.push(self.extras_len);
        out.push(self.data_type);
        out.extend_from_slice(&self.vbucket_or_status.to_be_bytes());
        out.extend_from_slice(&self.body_len.to_be_bytes());
        out.extend_from_slice(&self.opaque.to_be_bytes());
        out.extend_from_slice(&self.cas.to_be_bytes());
    }
}

/// The [`Op`] and quietness of an opcode this server implements.
pub(crate) fn op_of(opc: u8) -> Option<(Op, bool)> {
    use opcode::*;
    Some(match opc {
        GET | GETK => (Op::Get, false),
        GETQ | GETKQ => (Op::Get, true),
        GAT | GATK => (Op::Gat, false),
        GATQ | GATKQ => (Op::Gat, true),
        SET => (Op::Set, false),
        SETQ => (Op::Set, true),
        ADD => (Op::Add, false),
        ADDQ => (Op::Add, true),
        REPLACE => (Op::Replace, false),
        REPLACEQ => (Op::Replace, true),
        APPEND => (Op::Append, false),
        APPENDQ => (Op::Append, true),
        PREPEND => (Op::Prepend, false),
        PREPENDQ => (Op::Prepend, true),
        DELETE => (Op::Delete, false),
        DELETEQ => (Op::Delete, true),
        INCREMENT => (Op::Incr, false),
        INCREMENTQ => (Op::Incr, true),
        DECREMENT => (Op::Decr, false),
        DECREMENTQ => (Op::Decr, true),
        QUIT => (Op::Quit, false),
        QUITQ => (Op::Quit, true),
        FLUSH => (Op::FlushAll, false),
        FLUSHQ => (Op::FlushAll, true),
        NOOP => (Op::NoOp, false),
        VERSION => (Op::Version, false),
        STAT => (Op::Stats, false),
        TOUCH => (Op::Touch, false),
        _ => return None,
    })
}

/// Does this get-family opcode return the key?
pub(crate) fn returns_key(opc: u8) -> bool {
    matches!(
        opc,
        opcode::GETK | opcode::GETKQ | opcode::GATK | opcode::GATKQ
    )
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Parse the binary request at the front of `buf` (`buf[0] == 0x80`).
pub(crate) fn parse(buf: &[u8], limits: &Limits) -> ParseResult {
    let Some(h) = Header::read(buf) else {
        return Ok(None);
    };
    if h.magic != REQ_MAGIC {
        return Err(ProtoError {
            failure: Failure::UnknownCommand,
            ctx: ReqCtx::binary(Op::NoOp, h.opcode, h.opaque, false),
            recovery: Recovery::CloseSilently,
            unlink: None,
        });
    }
    let total = HEADER_LEN + h.body_len as usize;
    let key_len = usize::from(h.key_len);
    let ext = usize::from(h.extras_len);
    let body = h.body_len as usize;
    let Some((op, quiet)) = op_of(h.opcode) else {
        return Err(ProtoError::skip(
            Failure::UnknownCommand,
            ReqCtx::binary(Op::NoOp, h.opcode, h.opaque, false),
            total,
        ));
    };
    let ctx = ReqCtx::binary(op, h.opcode, h.opaque, quiet);
    let invalid = |ctx: ReqCtx| Err(ProtoError::close(Failure::client("invalid arguments"), ctx));
    if ext + key_len > body {
        // memcached answers UnknownCommand and closes: the lengths cannot
        // be trusted to find the next packet.
        return Err(ProtoError::close(Failure::UnknownCommand, ctx));
    }
    if key_len > limits.max_key {
        return invalid(ctx);
    }
    let vlen = body - ext - key_len;
    // Shape check per opcode, from the header alone (memcached's
    // dispatch_bin_command), so a bad packet costs no buffering.
    let shape_ok = match op {
        Op::Get => ext == 0 && key_len > 0 && vlen == 0,
        Op::Gat | Op::Touch => ext == 4 && key_len > 0 && vlen == 0,
        Op::Set | Op::Add | Op::Replace => ext == 8 && key_len > 0,
        Op::Append | Op::Prepend => ext == 0 && key_len > 0,
        Op::Delete => ext == 0 && key_len > 0 && vlen == 0,
        Op::Incr | Op::Decr => ext == 20 && key_len > 0 && vlen == 0,
        Op::FlushAll => (ext == 0 || ext == 4) && key_len == 0 && vlen == 0,
        Op::Stats => ext == 0 && vlen == 0,
        _ => body == 0,
    };
    if !shape_ok {
        return invalid(ctx);
    }
    if matches!(
        op,
        Op::Set | Op::Add | Op::Replace | Op::Append | Op::Prepend
    ) && vlen > limits.max_item_size
    {
        // Set must name the key to unlink: wait for it (at most 250 bytes
        // past the extras) so the verdict does not depend on how much of
        // the packet has arrived.
        let key_end = HEADER_LEN + ext + key_len;
        let unlink = if op == Op::Set {
            if buf.len() < key_end {
                return Ok(None);
            }
            Some(buf[HEADER_LEN + ext..key_end].to_vec())
        } else {
            None
        };
        return Err(ProtoError {
            failure: Failure::TooLarge,
            ctx,
            recovery: Recovery::Skip(total),
            unlink,
        });
    }
    if buf.len() < total {
        return Ok(None);
    }
    let extras = &buf[HEADER_LEN..HEADER_LEN + ext];
    let key = buf[HEADER_LEN + ext..HEADER_LEN + ext + key_len].to_vec();
    let value = &buf[HEADER_LEN + ext + key_len..total];
    let cas = (h.cas != 0).then_some(h.cas);
    let cmd = command(op, ext, key, extras, value, cas);
    Ok(Some((Request { cmd, ctx }, total)))
}

/// The command of a request whose shape [`parse`] checked: `extras`,
/// `key` and `value` are its body's parts (`ext` bytes of extras), `cas`
/// the header's CAS (0: none).
fn command(
    op: Op,
    ext: usize,
    key: Vec<u8>,
    extras: &[u8],
    value: &[u8],
    cas: Option<u64>,
) -> Command {
    match op {
        Op::Get => Command::Get {
            keys: vec![key],
            touch: None,
            with_cas: true,
            opts: GetOpts::default(),
        },
        Op::Gat => Command::Get {
            keys: vec![key],
            touch: Some(i64::from(be32(extras))),
            with_cas: true,
            opts: GetOpts::default(),
        },
        Op::Touch => Command::Touch {
            key,
            exptime: i64::from(be32(extras)),
        },
        Op::Set | Op::Add | Op::Replace => {
            let mode = match (op, cas) {
                (_, Some(_)) => StoreMode::Cas,
                (Op::Set, None) => StoreMode::Set,
                (Op::Add, None) => StoreMode::Add,
                _ => StoreMode::Replace,
            };
            Command::Store {
                mode,
                key,
                flags: be32(extras),
                exptime: i64::from(be32(&extras[4..])),
                data: value.to_vec(),
                cas,
                opts: StoreOpts::default(),
            }
        }
        Op::Append | Op::Prepend => Command::Store {
            mode: if op == Op::Append {
                StoreMode::Append
            } else {
                StoreMode::Prepend
            },
            key,
            flags: 0,
            exptime: 0,
            data: value.to_vec(),
            cas,
            opts: StoreOpts::default(),
        },
        Op::Delete => Command::Delete {
            key,
            cas,
            opts: Default::default(),
        },
        Op::Incr | Op::Decr => {
            let exp = be32(&extras[16..]);
            Command::Arith {
                key,
                incr: op == Op::Incr,
                delta: be64(extras),
                create: (exp != u32::MAX).then(|| (be64(&extras[8..]), i64::from(exp))),
                cas,
                ttl: None,
                new_cas: None,
            }
        }
        Op::FlushAll => Command::FlushAll {
            delay: if ext == 4 { i64::from(be32(extras)) } else { 0 },
        },
        Op::Stats => Command::Stats {
            args: if key.is_empty() { vec![] } else { vec![key] },
        },
        Op::Version => Command::Version,
        Op::Quit => Command::Quit,
        _ => Command::NoOp,
    }
}
