//! Authentication, with memcached's semantics (issue 28).
//!
//! * The credentials file is memcached's `-Y` authfile: one `user:password`
//!   per line (`#` lines and blank lines ignored). [`Auth::reload`] reads it
//!   again (the server calls it on SIGHUP); a file that fails to load keeps
//!   the old credentials. Passwords never leave this module: not in errors,
//!   not in `Debug`.
//! * Text and meta (memcached's ascii auth): until a connection has
//!   authenticated, its first line must be `set <any key> <flags> <exptime>
//!   <bytes>` followed by a data block `<user> <password>`; success answers
//!   `STORED`, a wrong pair `CLIENT_ERROR authentication failure`, a block
//!   that is not two tokens `CLIENT_ERROR bad authentication token format`,
//!   any other command `CLIENT_ERROR unauthenticated`.
//! * Binary: SASL `PLAIN` (`LIST_MECHS` answers `PLAIN`; `AUTH` with the
//!   value `[authzid]\0user\0password` answers `Authenticated.` or status
//!   0x20 `Auth failure.`); any other command before it gets status 0x20.

use crate::protocol::binary::{HEADER_LEN, Header, RES_MAGIC, opcode};
use parking_lot::RwLock;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Why the credentials file could not be used (never quotes its content).
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file as named on the command line.
        path: String,
        /// What reading it failed with.
        source: std::io::Error,
    },
    /// A line is not `user:password`.
    #[error("{path}: line {line}: not user:password")]
    Format {
        /// The file as named on the command line.
        path: String,
        /// The line's number, from 1 (its content is never shown).
        line: usize,
    },
    /// The file holds no credentials (a server nobody could use).
    #[error("{path}: no credentials in it")]
    Empty {
        /// The file as named on the command line.
        path: String,
    },
}

/// Binary status: authentication required or failed.
pub(crate) const STATUS_AUTH_ERROR: u16 = 0x20;

/// (user, password) pairs.
type Users = Vec<(Vec<u8>, Vec<u8>)>;

/// The credentials, reloadable.
pub struct Auth {
    path: PathBuf,
    users: RwLock<Arc<Users>>,
    /// Successful and failed authentications (`auth_cmds`, `auth_errors`).
    pub cmds: AtomicU64,
    /// Failed authentications (`auth_errors`).
    pub errors: AtomicU64,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("path", &self.path)
            .field("users", &self.users.read().len())
            .finish()
    }
}

fn load(path: &Path) -> Result<Users, AuthError> {
    let shown = path.display().to_string();
    let text = std::fs::read(path).map_err(|source| AuthError::Io {
        path: shown.clone(),
        source,
    })?;
    let mut users = Vec::new();
    for (i, raw) in text.split(|&b| b == b'\n').enumerate() {
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        if line.is_empty() || line[0] == b'#' {
            continue;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err(AuthError::Format {
                path: shown,
                line: i + 1,
            });
        };
        let (user, pass) = (&line[..colon], &line[colon + 1..]);
        if user.is_empty() || pass.is_empty() {
            return Err(AuthError::Format {
                path: shown,
                line: i + 1,
            });
        }
        users.push((user.to_vec(), pass.to_vec()));
    }
    if users.is_empty() {
        return Err(AuthError::Empty { path: shown });
    }
    Ok(users)
}

/// Compare without an early exit on the first differing byte.
fn same(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, x) in a.iter().enumerate() {
        diff |= usize::from(x ^ b.get(i).copied().unwrap_or(!x));
    }
    diff == 0
}

impl Auth {
    /// Load the credentials file.
    pub fn open(path: &Path) -> Result<Auth, AuthError> {
        Ok(Auth {
            path: path.to_path_buf(),
            users: RwLock::new(Arc::new(load(path)?)),
            cmds: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        })
    }

    /// Read the file again; on an error the old credentials stay.
    /// Returns how many users it now holds.
    pub fn reload(&self) -> Result<usize, AuthError> {
        let users = load(&self.path)?;
        let n = users.len();
        *self.users.write() = Arc::new(users);
        Ok(n)
    }

    /// The credentials file this was loaded from (and reloads from on SIGHUP).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether `user` with `pass` is in the file (counted for `stats`).
    pub fn check(&self, user: &[u8], pass: &[u8]) -> bool {
        let users = Arc::clone(&self.users.read());
        let mut ok = false;
        for (u, p) in users.iter() {
            // Every entry is compared, so the time does not tell which.
            ok |= same(u, user) & same(p, pass);
        }
        self.cmds.fetch_add(1, Relaxed);
        if !ok {
            self.errors.fetch_add(1, Relaxed);
        }
        ok
    }
}

/// What an unauthenticated connection's input led to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Not a whole request yet.
    More,
    /// Consume this many bytes and send the reply; `authed`: the
    /// connection is authenticated from now on; `close`: then close it
    /// (memcached closes a binary connection that sends a command before
    /// authenticating).
    Reply {
        consumed: usize,
        reply: Vec<u8>,
        authed: bool,
        close: bool,
    },
    /// Close the connection (garbage without a newline).
    Close,
}

/// Longest line before the auth `set` (memcached closes after 2048 bytes
/// without a newline).
const AUTH_LINE_MAX: usize = 2048;

/// Largest auth data block (`user password`).
const AUTH_DATA_MAX: usize = 4096;

/// memcached's ascii auth (module docs) on the input of an
/// unauthenticated text connection.
pub(crate) fn text_step(auth: &Auth, buf: &[u8]) -> Step {
    let window = &buf[..buf.len().min(AUTH_LINE_MAX + 1)];
    let Some(nl) = memchr::memchr(b'\n', window) else {
        return if buf.len() > AUTH_LINE_MAX {
            Step::Close
        } else {
            Step::More
        };
    };
    let line = &buf[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let tokens: Vec<&[u8]> = line
        .split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .collect();
    let size = (tokens.len() >= 5 && tokens[0] == b"set")
        .then(|| crate::protocol::parse_u32(tokens[4]))
        .flatten()
        .map(|s| s as usize);
    let reply = |consumed: usize, msg: &str, authed: bool| Step::Reply {
        consumed,
        reply: format!("{msg}\r\n").into_bytes(),
        authed,
        close: false,
    };
    let Some(size) = size.filter(|&s| s <= AUTH_DATA_MAX) else {
        return reply(nl + 1, "CLIENT_ERROR unauthenticated", false);
    };
    let total = nl + 1 + size + 2;
    if buf.len() < total {
        return Step::More;
    }
    let data = &buf[nl + 1..total];
    if &data[size..] != b"\r\n" {
        return reply(total, "CLIENT_ERROR bad command line termination", false);
    }
    let words: Vec<&[u8]> = data[..size]
        .split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .collect();
    if words.len() < 2 {
        return reply(total, "CLIENT_ERROR bad authentication token format", false);
    }
    if auth.check(words[0], words[1]) {
        reply(total, "STORED", true)
    } else {
        reply(total, "CLIENT_ERROR authentication failure", false)
    }
}

fn packet(h: &Header, status: u16, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    Header {
        magic: RES_MAGIC,
        opcode: h.opcode,
        key_len: 0,
        extras_len: 0,
        data_type: 0,
        vbucket_or_status: status,
        body_len: body.len() as u32,
        opaque: h.opaque,
        cas: 0,
    }
    .write(&mut out);
    out.extend_from_slice(body);
    out
}

/// Largest SASL packet body taken.
const SASL_BODY_MAX: usize = 4096;

/// A binary packet at the front of `buf` when the server requires
/// authentication: SASL is answered here; any other command is refused
/// with [`STATUS_AUTH_ERROR`] unless `authed` (then `None`: parse it as
/// usual).
pub(crate) fn binary_step(auth: &Auth, buf: &[u8], authed: bool) -> Option<Step> {
    let Some(h) = Header::read(buf) else {
        return Some(Step::More);
    };
    let sasl = matches!(
        h.opcode,
        opcode::SASL_LIST_MECHS | opcode::SASL_AUTH | opcode::SASL_STEP
    );
    if (authed && !sasl) || h.opcode == opcode::VERSION {
        return None;
    }
    let body = h.body_len as usize;
    if body > SASL_BODY_MAX && (sasl || !authed) {
        // Refuse without buffering what an unauthenticated client sends.
        return Some(Step::Close);
    }
    let total = HEADER_LEN + body;
    if buf.len() < total {
        return Some(Step::More);
    }
    let step = |status: u16, msg: &[u8], ok: bool| {
        Some(Step::Reply {
            consumed: total,
            reply: packet(&h, status, msg),
            authed: authed || ok,
            close: false,
        })
    };
    match h.opcode {
        opcode::SASL_LIST_MECHS => step(0, b"PLAIN", false),
        opcode::SASL_AUTH => {
            let ext = usize::from(h.extras_len);
            let klen = usize::from(h.key_len);
            let Some(mech) = buf.get(HEADER_LEN + ext..HEADER_LEN + ext + klen) else {
                return step(STATUS_AUTH_ERROR, b"Auth failure.", false);
            };
            let value = buf.get(HEADER_LEN + ext + klen..total).unwrap_or(&[]);
            if mech != b"PLAIN" {
                return step(STATUS_AUTH_ERROR, b"Auth failure.", false);
            }
            // [authzid] \0 authcid \0 passwd
            let parts: Vec<&[u8]> = value.split(|&b| b == 0).collect();
            let ok = parts.len() == 3 && auth.check(parts[1], parts[2]);
            if parts.len() != 3 {
                auth.cmds.fetch_add(1, Relaxed);
                auth.errors.fetch_add(1, Relaxed);
            }
            if ok {
                step(0, b"Authenticated", true)
            } else {
                step(STATUS_AUTH_ERROR, b"Auth failure.", false)
            }
        }
        // PLAIN has no second step.
        opcode::SASL_STEP => step(STATUS_AUTH_ERROR, b"Auth failure.", false),
        // memcached lets VERSION through unauthenticated.
        opcode::VERSION => None,
        _ => Some(Step::Reply {
            consumed: total,
            reply: packet(&h, STATUS_AUTH_ERROR, b"Auth failure."),
            authed: false,
            close: true,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(text: &str) -> (tempfile::TempDir, Auth) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("authfile");
        std::fs::write(&p, text).unwrap();
        let a = Auth::open(&p).unwrap();
        (d, a)
    }

    fn reply(s: Step) -> (usize, String, bool) {
        match s {
            Step::Reply {
                consumed,
                reply,
                authed,
                ..
            } => (
                consumed,
                String::from_utf8_lossy(&reply).into_owned(),
                authed,
            ),
            s => panic!("{s:?}"),
        }
    }

    #[test]
    fn text_auth_as_memcached() {
        let (_d, a) = auth("foo:bar\nbaaaz:quux\n");
        assert_eq!(
            reply(text_step(&a, b"get foo\r\n")),
            (9, "CLIENT_ERROR unauthenticated\r\n".into(), false)
        );
        assert_eq!(
            reply(text_step(&a, b"set foo 0 0 2\r\nhi\r\n")),
            (
                19,
                "CLIENT_ERROR bad authentication token format\r\n".into(),
                false
            )
        );
        assert_eq!(
            reply(text_step(&a, b"set foo 0 0 7\r\nfoo bab\r\n")).1,
            "CLIENT_ERROR authentication failure\r\n"
        );
        assert_eq!(text_step(&a, b"set foo 0 0 7\r\nfoo b"), Step::More);
        assert_eq!(
            reply(text_step(&a, b"set x 0 0 10\r\nbaaaz quux\r\nget x\r\n")),
            (26, "STORED\r\n".into(), true)
        );
        assert_eq!(text_step(&a, &[b'x'; 3000]), Step::Close);
        assert_eq!(a.cmds.load(Relaxed), 2);
        assert_eq!(a.errors.load(Relaxed), 1);
    }

    #[test]
    fn reload_replaces_and_a_bad_file_keeps_the_old() {
        let (d, a) = auth("foo:bar\n");
        assert!(a.check(b"foo", b"bar"));
        std::fs::write(d.path().join("authfile"), "foo:new\n").unwrap();
        assert_eq!(a.reload().unwrap(), 1);
        assert!(!a.check(b"foo", b"bar") && a.check(b"foo", b"new"));
        std::fs::write(d.path().join("authfile"), "secretpassword\n").unwrap();
        let e = a.reload().unwrap_err().to_string();
        assert!(!e.contains("secret"), "{e}");
        assert!(a.check(b"foo", b"new"));
        assert!(!format!("{a:?}").contains("new"));
    }

    fn bin(op: u8, key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        Header {
            magic: 0x80,
            opcode: op,
            key_len: key.len() as u16,
            body_len: (key.len() + value.len()) as u32,
            opaque: 9,
            ..Header::default()
        }
        .write(&mut out);
        out.extend_from_slice(key);
        out.extend_from_slice(value);
        out
    }

    fn status(s: &Step) -> u16 {
        match s {
            Step::Reply { reply, .. } => Header::read(reply).unwrap().vbucket_or_status,
            s => panic!("{s:?}"),
        }
    }

    #[test]
    fn binary_sasl_plain() {
        let (_d, a) = auth("foo:bar\n");
        let get = bin(opcode::GET, b"k", b"");
        assert_eq!(
            status(&binary_step(&a, &get, false).unwrap()),
            STATUS_AUTH_ERROR
        );
        assert!(binary_step(&a, &get, true).is_none());
        let mechs = binary_step(&a, &bin(opcode::SASL_LIST_MECHS, b"", b""), false).unwrap();
        assert!(matches!(&mechs, Step::Reply { reply, .. } if reply.ends_with(b"PLAIN")));
        let bad = binary_step(&a, &bin(opcode::SASL_AUTH, b"PLAIN", b"\0foo\0baz"), false).unwrap();
        assert_eq!(status(&bad), STATUS_AUTH_ERROR);
        assert!(matches!(bad, Step::Reply { authed: false, .. }));
        let good =
            binary_step(&a, &bin(opcode::SASL_AUTH, b"PLAIN", b"\0foo\0bar"), false).unwrap();
        assert_eq!(status(&good), 0);
        assert!(matches!(good, Step::Reply { authed: true, .. }));
        let half = bin(opcode::SASL_AUTH, b"PLAIN", b"\0foo\0bar");
        assert_eq!(binary_step(&a, &half[..30], false), Some(Step::More));
    }
}
