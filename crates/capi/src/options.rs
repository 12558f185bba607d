//! The option string of `ferrite_store_open` (`"engine=cow,size=256M"`),
//! shared with the Python package.

use crate::error::{CapiError, Result};
use ferrite_engine::{AllocKind, Domain, EngineKind, Store, StoreOptions};
use std::path::Path;

/// What an option string asks for.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// The store options (engine, allocator, domain, size, sessions).
    pub store: StoreOptions,
    /// Create the pool file when it is missing (`create=yes`, the default).
    pub create: bool,
    /// Bytes of a pool the open creates (`size=`).
    pub size: Option<u64>,
}

impl OpenOptions {
    /// Bytes of a pool the open creates (`size=`, default 64 MiB).
    pub fn store_size(&self) -> u64 {
        self.size.unwrap_or(ferrite_engine::DEFAULT_SIZE)
    }
}

impl Default for OpenOptions {
    fn default() -> OpenOptions {
        OpenOptions {
            store: StoreOptions::default(),
            create: true,
            size: None,
        }
    }
}

/// Parses a size: bytes, or a number with a `k`, `m`, `g` suffix (powers of 1024).
pub fn parse_size(v: &str) -> Result<u64> {
    let v = v.trim();
    let (num, mul) = match v.char_indices().last() {
        Some((i, 'k' | 'K')) => (&v[..i], 1u64 << 10),
        Some((i, 'm' | 'M')) => (&v[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&v[..i], 1 << 30),
        _ => (v, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(|| {
            CapiError::Invalid(format!(
                "size '{v}' is not a number of bytes (k, m, g suffixes)"
            ))
        })
}

/// Parses `key=value` pairs separated by commas. Keys: `engine` (`inp`,
/// `cow`, `lsm`), `domain` (`adr`, `eadr`, `msync`, …), `size` (bytes of a
/// pool the call creates; `k`/`m`/`g` suffixes; default 64 MiB), `sessions`
/// (1..=1000), `allocator` (`ferrite`, `lock`), `create` (`yes`/`no`).
/// Empty or `None`: the defaults.
pub fn parse_options(s: Option<&str>) -> Result<OpenOptions> {
    let mut o = OpenOptions::default();
    for item in s
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
    {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| CapiError::Invalid(format!("option '{item}' is not key=value")))?;
        let (k, v) = (k.trim(), v.trim());
        let bad = |what: &str| CapiError::Invalid(format!("option {k}={v}: {what}"));
        o.store =
            match k {
                "engine" => o
                    .store
                    .engine(EngineKind::parse(v).ok_or_else(|| bad("engines are inp, cow, lsm"))?),
                "domain" => o.store.domain(Domain::parse(v).ok_or_else(|| {
                    bad("domains are adr, eadr, pdram, pdram-lite, msync, volatile")
                })?),
                "size" => {
                    o.size = Some(parse_size(v)?);
                    o.store
                }
                "sessions" => o.store.sessions(
                    v.parse::<u16>()
                        .ok()
                        .filter(|n| (1..=1000).contains(n))
                        .ok_or_else(|| bad("sessions are 1 to 1000"))?,
                ),
                "allocator" => match AllocKind::parse(v) {
                    Some(a @ (AllocKind::Ferrite | AllocKind::Lock)) => o.store.allocator(a),
                    _ => return Err(bad("allocators are ferrite, lock")),
                },
                "create" => {
                    o.create = match v {
                        "yes" | "true" | "1" => true,
                        "no" | "false" | "0" => false,
                        _ => return Err(bad("create is yes or no")),
                    };
                    o.store
                }
                _ => {
                    return Err(CapiError::Invalid(format!(
                        "unknown option '{k}' (engine, domain, size, sessions, allocator, create)"
                    )));
                }
            };
    }
    Ok(o)
}

/// Opens the store at `path` as `o` says, creating it if missing and
/// allowed. A create is atomic: the pool is made under a temporary name
/// beside `path` and linked to `path` only once the store in it is
/// complete, so a process killed while creating leaves no half-made pool
/// at `path` (at worst a `.NAME.creating-PID` file), and of two processes
/// creating at once one creates and the other opens.
pub fn open(path: &Path, o: &OpenOptions) -> Result<Store> {
    if !o.create || path.exists() {
        return Ok(Store::open_file(path, &o.store)?);
    }
    let name = path
        .file_name()
        .ok_or_else(|| CapiError::Invalid(format!("{} names no file", path.display())))?;
    let tmp = path.with_file_name(format!(
        ".{}.creating-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    let size = o.store_size();
    Store::create_file(&tmp, size, &o.store)?.close()?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {}
        // Another process created it first: open theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(CapiError::Io(format!("{}: {e}", path.display()))),
    }
    Ok(Store::open_file(path, &o.store)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_and_bad_ones_are_refused() {
        let o = parse_options(Some(
            "engine=cow, size=8M,sessions=4,domain=msync,create=no",
        ))
        .unwrap();
        assert_eq!(o.store.engine_kind(), EngineKind::Cow);
        assert_eq!(o.store.domain_choice(), Some(Domain::Msync));
        assert!(!o.create);
        assert_eq!(parse_size("3k").unwrap(), 3072);
        for bad in [
            "engine=btree",
            "size=lots",
            "sessions=0",
            "colour=red",
            "engine",
            "create=maybe",
            "allocator=pmdk",
        ] {
            assert!(
                matches!(parse_options(Some(bad)), Err(CapiError::Invalid(_))),
                "{bad}"
            );
        }
        assert!(parse_options(None).unwrap().create);
    }
}
