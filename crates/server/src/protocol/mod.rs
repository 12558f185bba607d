//! memcached 1.6's three wire protocols: parse requests, encode replies.
//!
//! * **Text** (`protocol.txt` "Commands"): `get gets gat gats set add replace
//!   append prepend cas delete incr decr touch flush_all stats version
//!   verbosity quit`, lines ending in `\n` (an optional `\r` before it is
//!   stripped), tokens separated by spaces, storage commands followed by a
//!   data block of exactly `<bytes>` bytes and `\r\n`. See [`text`].
//! * **Meta** (`protocol.txt` "Meta Commands"): `mg ms md ma mn me`, same
//!   line framing, single-character flags with optional tokens. See [`meta`].
//! * **Binary** (memcached's binary protocol): a 24-byte big-endian header,
//!   extras, key, value. See [`binary`].
//!
//! [`parse`] looks at one request at the front of a buffer and detects its
//! protocol from the first byte (0x80 = binary request magic, anything else
//! = a text or meta line), so a pipelined buffer is consumed by calling it
//! repeatedly. It never panics on any input: malformed requests become a
//! [`ProtoError`] that says what to reply and how to resynchronise.
//!
//! The store sees only [`Command`] (what to do); the reply framing the
//! encoder needs (protocol, binary opcode and opaque, quiet/noreply, meta
//! flags to echo) travels beside it in [`ReqCtx`]. The store answers with a
//! [`response::Response`] and [`response::encode`] writes the bytes.
//!
//! A connection's read loop, with a toy store:
//!
//! ```
//! use ferrite_server::protocol::{self, Command, ItemView, Limits, Recovery, Response};
//! use std::collections::HashMap;
//!
//! let mut store: HashMap<Vec<u8>, (u32, Vec<u8>)> = HashMap::new();
//! let mut input = b"set k 7 0 2\r\nhi\r\nget k nope\r\nbogus\r\n".to_vec();
//! let mut output = Vec::new();
//! let limits = Limits::default();
//! loop {
//!     match protocol::parse(&input, &limits) {
//!         Ok(None) => break, // read more bytes, then parse again
//!         Ok(Some((req, n))) => {
//!             input.drain(..n);
//!             match &req.cmd {
//!                 Command::Store { key, flags, data, .. } => {
//!                     store.insert(key.clone(), (*flags, data.clone()));
//!                     protocol::encode(&Response::Stored { cas: 1 }, &req.ctx, &mut output);
//!                 }
//!                 Command::Get { keys, .. } => {
//!                     for key in keys {
//!                         let resp = match store.get(key) {
//!                             Some((f, v)) => Response::Hit(ItemView::new(key, *f, v, 1)),
//!                             None => Response::Miss { key },
//!                         };
//!                         protocol::encode(&resp, &req.ctx, &mut output);
//!                     }
//!                     protocol::encode(&Response::End, &req.ctx, &mut output);
//!                 }
//!                 _ => unimplemented!("not in this example"),
//!             }
//!         }
//!         Err(e) => {
//!             protocol::response::encode_error(&e, &mut output);
//!             match e.recovery {
//!                 Recovery::Skip(n) => drop(input.drain(..n.min(input.len()))),
//!                 Recovery::Close | Recovery::CloseSilently => break,
//!             }
//!         }
//!     }
//! }
//! assert_eq!(output, b"STORED\r\nVALUE k 7 2\r\nhi\r\nEND\r\nERROR\r\n");
//! ```
//!
//! (A real server also discards the part of a `Skip` beyond what it has
//! buffered as it arrives, deletes [`ProtoError::unlink`], and closes after
//! [`Command::Quit`].)
//!
//! The text administration commands `slabs lru lru_crawler watch shutdown
//! cache_memlimit` parse to [`Command::Admin`]; the server answers what it
//! implements (`watch`, `slabs automove`) as memcached does and the rest as
//! memcached answers a disabled feature or an unknown command. Not
//! supported (text `ERROR`, binary `UnknownCommand`): `extstore`, the
//! legacy `bget`; binary Verbosity; binary SASL unless the server requires
//! authentication (the server answers it then, see `crate::auth`); the UDP frame header; the
//! pre-1.6 meta `S<size>` flag. Deliberate differences from memcached:
//! every line over [`Limits::max_line`] closes the connection with
//! `CLIENT_ERROR line too long` (memcached closes silently, and only when
//! 2048 bytes arrive without a newline); base64 keys must be canonical;
//! binary packets whose body is longer than the opcode allows are rejected
//! (`InvalidArguments`, close) instead of being misread.

pub mod base64;
pub mod binary;
pub mod client;
pub mod expiry;
pub mod meta;
pub mod response;
pub mod text;

#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::fmt;

pub use expiry::{Expiry, deadline};
pub use response::{ItemView, Response, encode};

/// memcached's `KEY_MAX_LENGTH`: keys are 1 to 250 bytes.
pub const MAX_KEY_LEN: usize = 250;

/// Size limits enforced while parsing (before any data is buffered, so an
/// oversize request costs no memory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Longest key in bytes (memcached: 250).
    pub max_key: usize,
    /// Largest value in bytes (memcached `-I`, default 1 MiB). Larger
    /// stores are answered "object too large" and their data is skipped.
    pub max_item_size: usize,
    /// Longest command line (bytes before the `\n`) of every command but the
    /// multi-key retrievals. memcached closes a connection that sends more
    /// than 2048 bytes without a newline; we allow 2048 plus a full key.
    pub max_line: usize,
    /// Most keys one `get`/`gets`/`gat`/`gats` line may name; their line
    /// may be up to `max_keys_per_get * (max_key + 1) + 64` bytes long.
    pub max_keys_per_get: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_key: MAX_KEY_LEN,
            max_item_size: 1 << 20,
            max_line: 2048 + MAX_KEY_LEN,
            max_keys_per_get: 4096,
        }
    }
}

impl Limits {
    /// Longest multi-key retrieval line accepted.
    pub fn max_get_line(&self) -> usize {
        self.max_keys_per_get
            .saturating_mul(self.max_key.saturating_add(1))
            .saturating_add(64)
    }
}

/// Which wire protocol a request came in (and its reply must go out) in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proto {
    /// memcached's classic text protocol (`get`, `set`, ...).
    Text,
    /// The meta text protocol (`mg`, `ms`, `md`, `ma`, `mn`, `me`).
    Meta,
    /// The binary protocol (24-byte headers, [`binary`]).
    Binary,
}

/// The command as the client spelled it: selects the reply wording
/// (`STORED` vs `HD`, binary status mapping, `VALUE` lines with or without
/// CAS...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Text `get`.
    Get,
    /// Text `gets` (with CAS).
    Gets,
    /// Text `gat` (get and touch).
    Gat,
    /// Text `gats` (get and touch, with CAS).
    Gats,
    /// `set` (text and binary).
    Set,
    /// `add`.
    Add,
    /// `replace`.
    Replace,
    /// `append`.
    Append,
    /// `prepend`.
    Prepend,
    /// Text `cas`.
    Cas,
    /// `delete`.
    Delete,
    /// `incr`.
    Incr,
    /// `decr`.
    Decr,
    /// `touch`.
    Touch,
    /// `flush_all`.
    FlushAll,
    /// `stats`.
    Stats,
    /// `version`.
    Version,
    /// `verbosity`.
    Verbosity,
    /// `quit`.
    Quit,
    /// Binary NoOp.
    NoOp,
    /// Meta `mg`.
    MetaGet,
    /// Meta `ms`.
    MetaSet,
    /// Meta `md`.
    MetaDelete,
    /// Meta `ma`.
    MetaArith,
    /// Meta `me`.
    MetaDebug,
    /// Meta `mn`.
    MetaNoOp,
}

/// A flag whose value a meta reply echoes, in the order the request named
/// them (memcached returns them in request order).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MetaRet {
    /// `c`: the item's CAS value.
    Cas,
    /// `f`: client flags.
    Flags,
    /// `h`: whether the item had been fetched before (0/1).
    Hit,
    /// `k`: the key (as sent; followed by ` b` for a base64 key).
    Key,
    /// `l`: seconds since last access.
    LastAccess,
    /// `O<token>`: opaque token, copied back verbatim (at most 32 bytes).
    Opaque(Vec<u8>),
    /// `s`: value size.
    Size,
    /// `t`: remaining TTL in seconds, `-1` for none.
    Ttl,
}

/// What a meta reply needs from its request.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct MetaCtx {
    /// Return flags in request order (only those the command echoes).
    pub ret: Vec<MetaRet>,
    /// The key token as it appeared on the wire (base64 text when `b`).
    pub wire_key: Vec<u8>,
    /// `b`: the key is base64 on the wire.
    pub base64: bool,
    /// `v`: return the value (`VA <size>` instead of `HD`).
    pub value: bool,
    /// mg and ma: the flags `T`, `N`, `R` and `t` in request order.
    /// memcached applies the item modifiers one flag after another and
    /// reports `t` from the item as it is at that flag's place: `mg k t
    /// T30` shows the TTL before the touch, `mg k T30 R40` wins the
    /// recache on the new TTL.
    pub order: Vec<u8>,
}

/// The reply framing of one request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReqCtx {
    /// The protocol the reply is encoded in.
    pub proto: Proto,
    /// The command as spelled, for the reply's wording.
    pub op: Op,
    /// Text `noreply`, meta `q`, binary quiet opcodes: suppress the replies
    /// the protocol allows suppressing (see [`response::encode`]).
    pub noreply: bool,
    /// Binary: the request opcode, echoed in the reply header.
    pub opcode: u8,
    /// Binary: the request opaque, echoed in the reply header.
    pub opaque: u32,
    /// Meta: flags to echo.
    pub meta: Option<Box<MetaCtx>>,
    /// The connection's id (set by the server after parsing; 0 from the
    /// parser): `stats conns` and log watchers (`cfd=`) name it.
    pub conn: u64,
}

impl ReqCtx {
    /// The framing of a text request `op` (`noreply`: suppress its replies).
    pub fn text(op: Op, noreply: bool) -> Self {
        ReqCtx {
            proto: Proto::Text,
            op,
            noreply,
            opcode: 0,
            opaque: 0,
            meta: None,
            conn: 0,
        }
    }

    /// The framing of a meta request `op` (`noreply`: the `q` flag), echoing
    /// `meta`'s flags.
    pub fn meta(op: Op, noreply: bool, meta: MetaCtx) -> Self {
        ReqCtx {
            proto: Proto::Meta,
            op,
            noreply,
            opcode: 0,
            opaque: 0,
            meta: Some(Box::new(meta)),
            conn: 0,
        }
    }

    /// The framing of a binary request: its `opcode` and `opaque` are echoed;
    /// `quiet` for the quiet opcodes.
    pub fn binary(op: Op, opcode: u8, opaque: u32, quiet: bool) -> Self {
        ReqCtx {
            proto: Proto::Binary,
            op,
            noreply: quiet,
            opcode,
            opaque,
            meta: None,
            conn: 0,
        }
    }
}

/// How a storage command combines with the existing item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreMode {
    /// Store unconditionally.
    Set,
    /// Store only if absent (`NOT_STORED` otherwise).
    Add,
    /// Store only if present (`NOT_STORED` otherwise).
    Replace,
    /// Append data to a present item, keeping its flags and expiry.
    Append,
    /// Prepend data to a present item, keeping its flags and expiry.
    Prepend,
    /// Store only if present (`NOT_FOUND`) and its CAS equals `cas`
    /// (`EXISTS` otherwise). Text `cas`; meta `ms` with `C` in set or
    /// replace mode; binary set/add/replace with a nonzero header CAS (as
    /// memcached, which turns all three into a CAS store).
    Cas,
}

/// Meta-only modifiers of a retrieval (all default off for text/binary).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct GetOpts {
    /// `N<ttl>`: on a miss, create an empty item with this exptime and tell
    /// this client it won the right to recache (`W`).
    pub vivify: Option<i64>,
    /// `R<ttl>`: win the recache if the remaining TTL is below this.
    pub recache: Option<i64>,
    /// `u`: do not bump the item in the LRU.
    pub no_bump: bool,
    /// `E<cas>`: CAS to give an item this command creates.
    pub new_cas: Option<u64>,
}

/// Meta-only modifiers of a store.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct StoreOpts {
    /// `I`: with a CAS compare, a CAS older than the item's still stores but
    /// marks the item stale.
    pub invalidate: bool,
    /// `N<ttl>`: append/prepend on a miss creates the item with this exptime.
    pub vivify: Option<i64>,
    /// `E<cas>`: use this as the new item's CAS instead of a fresh one.
    pub new_cas: Option<u64>,
}

/// Meta-only modifiers of a delete.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct DeleteOpts {
    /// `I`: mark stale and bump the CAS instead of removing.
    pub invalidate: bool,
    /// `T<ttl>`: with `I`, the stale item's new exptime.
    pub ttl: Option<i64>,
    /// `x`: drop the value but keep the item.
    pub drop_value: bool,
    /// `E<cas>`: CAS to give the modified item.
    pub new_cas: Option<u64>,
}

/// What the store must do: the protocol-independent meaning of a request.
///
/// Every `exptime` is the raw client value: 0 = never, 1..=2 592 000 =
/// seconds from now, larger = absolute unix time, negative = already
/// expired; turn it into a deadline with [`deadline`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Command {
    /// Retrieve each key (text: 0..n keys; meta and binary: one). With
    /// `touch`, also set each found item's exptime (gat/gats, mg `T`,
    /// binary GAT). `with_cas`: text `gets`/`gats` print the CAS.
    Get {
        /// The keys, in request order.
        keys: Vec<Vec<u8>>,
        /// With a touch: the new client exptime.
        touch: Option<i64>,
        /// Print each hit's CAS (text `gets`/`gats`).
        with_cas: bool,
        /// Meta-only modifiers.
        opts: GetOpts,
    },
    /// Store `data`. Append/prepend ignore `flags` and `exptime` (as
    /// memcached). `cas` is the compare value of [`StoreMode::Cas`] and an
    /// optional check for append/prepend (binary header CAS, meta `C`).
    Store {
        /// How the data combines with an existing item.
        mode: StoreMode,
        /// The client key (1 to [`MAX_KEY_LEN`] bytes).
        key: Vec<u8>,
        /// Opaque client flags, stored and returned as is.
        flags: u32,
        /// The client exptime (rule above).
        exptime: i64,
        /// The value.
        data: Vec<u8>,
        /// The compare value ([`StoreMode::Cas`], or a check for
        /// append/prepend).
        cas: Option<u64>,
        /// Meta-only modifiers.
        opts: StoreOpts,
    },
    /// Remove `key` (if `cas` is given, only when it matches: `EXISTS`).
    Delete {
        /// The client key.
        key: Vec<u8>,
        /// Delete only when the item's CAS equals this (`EXISTS` otherwise).
        cas: Option<u64>,
        /// Meta-only modifiers.
        opts: DeleteOpts,
    },
    /// Add `delta` to (or subtract it from, saturating at 0) the decimal
    /// u64 value; increments wrap at 2^64 (memcached). `create`: on a miss
    /// store `initial` with exptime `.1` instead of failing (binary, meta
    /// `N`/`J`). `cas`: only if the item's CAS matches. `ttl`: set the
    /// exptime on success (meta `T`).
    Arith {
        /// The client key.
        key: Vec<u8>,
        /// True: add `delta`; false: subtract it.
        incr: bool,
        /// The amount.
        delta: u64,
        /// On a miss: (initial value, client exptime) to store instead of
        /// failing.
        create: Option<(u64, i64)>,
        /// Only when the item's CAS equals this.
        cas: Option<u64>,
        /// Client exptime to set on success (meta `T`).
        ttl: Option<i64>,
        /// Meta `E`: the CAS to give the result instead of a fresh one.
        new_cas: Option<u64>,
    },
    /// Set an existing item's exptime.
    Touch {
        /// The client key.
        key: Vec<u8>,
        /// The new client exptime.
        exptime: i64,
    },
    /// Invalidate every item stored before now + `delay` (an exptime, so
    /// the relative/absolute rule applies; `<= 0` = now).
    FlushAll {
        /// A client exptime: the flush takes effect then.
        delay: i64,
    },
    /// `stats [args...]` (binary: the key as the single argument). The
    /// server answers groups it does not know with `ERROR` (text) or
    /// `KeyNotFound` (binary), as memcached does: memcapable checks that
    /// `stats noreply` is an error.
    Stats {
        /// The group and its arguments (empty: the general statistics).
        args: Vec<Vec<u8>>,
    },
    /// The server's version string.
    Version,
    /// `verbosity <level>`: accepted and ignored (there is no verbose log).
    Verbosity {
        /// The level asked for.
        level: u32,
    },
    /// Close the connection (binary non-quiet Quit replies first).
    Quit,
    /// Meta `mn` / binary NoOp: reply so the client knows the pipeline
    /// before it has been answered.
    NoOp,
    /// Meta `me`: a human-readable dump of the item's metadata.
    MetaDebug {
        /// The client key.
        key: Vec<u8>,
    },
    /// A text administration command the server answers itself, as
    /// memcached does (`slabs`, `watch`, `shutdown`, `lru_crawler`, `lru`,
    /// `cache_memlimit`): every token, the command name first.
    Admin {
        /// Every token of the line, the command name first.
        args: Vec<Vec<u8>>,
    },
}

/// One parsed request: what to do, and how to frame the answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Request {
    /// What to do.
    pub cmd: Command,
    /// How to frame the reply.
    pub ctx: ReqCtx,
}

/// An error reply, independent of protocol. Its wording in text and meta
/// and its binary status are memcached's ([`Failure::line`],
/// [`Failure::binary_status`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Failure {
    /// Unknown command or wrong number of tokens: `ERROR`; binary
    /// `UnknownCommand` (0x81).
    UnknownCommand,
    /// `CLIENT_ERROR <msg>`; binary `InvalidArguments` (0x04).
    Client(Cow<'static, str>),
    /// `SERVER_ERROR object too large for cache`; binary `ValueTooLarge`.
    TooLarge,
    /// `SERVER_ERROR out of memory storing object`; binary `OutOfMemory`.
    OutOfMemory,
    /// `CLIENT_ERROR cannot increment or decrement non-numeric value`;
    /// binary `NonNumeric` (0x06).
    NonNumeric,
    /// `SERVER_ERROR <msg>`; binary `InternalError` (0x84).
    Server(Cow<'static, str>),
}

impl Failure {
    /// memcached's generic format error.
    pub const BAD_FORMAT: Failure = Failure::Client(Cow::Borrowed("bad command line format"));

    /// `CLIENT_ERROR <msg>` with a fixed message.
    pub fn client(msg: &'static str) -> Self {
        Failure::Client(Cow::Borrowed(msg))
    }

    /// The text/meta reply line, without `\r\n`.
    pub fn line(&self) -> String {
        match self {
            Failure::UnknownCommand => "ERROR".to_string(),
            Failure::Client(m) => format!("CLIENT_ERROR {m}"),
            Failure::TooLarge => "SERVER_ERROR object too large for cache".to_string(),
            Failure::OutOfMemory => "SERVER_ERROR out of memory storing object".to_string(),
            Failure::NonNumeric => {
                "CLIENT_ERROR cannot increment or decrement non-numeric value".to_string()
            }
            Failure::Server(m) => format!("SERVER_ERROR {m}"),
        }
    }

    /// The binary status and memcached's message body for it.
    pub fn binary_status(&self) -> (binary::Status, &'static str) {
        use binary::Status;
        match self {
            Failure::UnknownCommand => (Status::UnknownCommand, "Unknown command"),
            Failure::Client(_) => (Status::InvalidArguments, "Invalid arguments"),
            Failure::TooLarge => (Status::ValueTooLarge, "Too large."),
            Failure::OutOfMemory => (Status::OutOfMemory, "Out of memory"),
            Failure::NonNumeric => (
                Status::NonNumeric,
                "Non-numeric server-side value for incr or decr",
            ),
            Failure::Server(_) => (Status::InternalError, "Internal error"),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.line())
    }
}

/// How the connection gets back in step after a [`ProtoError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Recovery {
    /// Send the error reply, then discard this many bytes from the front of
    /// the input (the bad line, or the line plus a data block memcached
    /// "swallows"). May exceed the bytes buffered so far: the rest is
    /// discarded as it arrives, so an oversize value is never buffered.
    Skip(usize),
    /// Send the error reply, then close the connection (the stream can no
    /// longer be framed: overlong line, malformed binary header).
    Close,
    /// Close without a reply (memcached does this for an HTTP request line
    /// and for a binary packet with a bad magic byte).
    CloseSilently,
}

/// A request that cannot be served: the error to reply, framed per `ctx`
/// (text errors are suppressed under `noreply`, as memcached does), and how
/// to resynchronise.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{failure}")]
pub struct ProtoError {
    /// The error to reply.
    pub failure: Failure,
    /// How to frame the reply.
    pub ctx: ReqCtx,
    /// How the connection gets back in step.
    pub recovery: Recovery,
    /// memcached removes the existing item when a `set` (text, binary, or
    /// any meta `ms`) fails for size, so a later get cannot return the old
    /// value the client meant to overwrite: the server must delete this key.
    pub unlink: Option<Vec<u8>>,
}

impl ProtoError {
    pub(crate) fn skip(failure: Failure, ctx: ReqCtx, n: usize) -> Self {
        ProtoError {
            failure,
            ctx,
            recovery: Recovery::Skip(n),
            unlink: None,
        }
    }

    pub(crate) fn close(failure: Failure, ctx: ReqCtx) -> Self {
        ProtoError {
            failure,
            ctx,
            recovery: Recovery::Close,
            unlink: None,
        }
    }
}

/// The outcome of [`parse`]: `Ok(None)` = need more bytes; `Ok(Some((req,
/// n)))` = one request taken from the first `n` bytes (`n <= buf.len()`).
pub type ParseResult = Result<Option<(Request, usize)>, ProtoError>;

/// Parse the request at the front of `buf`.
///
/// Incremental: the result depends only on the bytes of this request, so
/// calling again with more bytes appended gives the same request (the
/// caller keeps unconsumed bytes and retries when more arrive). Never
/// panics.
pub fn parse(buf: &[u8], limits: &Limits) -> ParseResult {
    match buf.first() {
        None => Ok(None),
        Some(&binary::REQ_MAGIC) => binary::parse(buf, limits),
        Some(_) => text::parse(buf, limits),
    }
}

/// memcached's `safe_strtoul` on a token: decimal digits only, fits u32.
pub(crate) fn parse_u32(t: &[u8]) -> Option<u32> {
    parse_u64(t).and_then(|v| u32::try_from(v).ok())
}

/// `safe_strtoull`: decimal digits only (no sign), fits u64.
pub(crate) fn parse_u64(t: &[u8]) -> Option<u64> {
    if t.is_empty() || t.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in t {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(v)
}

/// `safe_strtol`: optional `-`, decimal digits, fits i32.
pub(crate) fn parse_i32(t: &[u8]) -> Option<i32> {
    let (neg, digits) = match t.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, t),
    };
    let v = i64::try_from(parse_u64(digits)?).ok()?;
    i32::try_from(if neg { -v } else { v }).ok()
}
