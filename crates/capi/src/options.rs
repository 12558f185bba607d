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
}

impl Default for OpenOptions {
    fn default() -> OpenOptions {
        OpenOptions {
            store: StoreOptions::default(),
            create: true,
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
/// `cow`, `lsm`), `domain` (`adr`, `eadr`, `msync`, …), `size` (a fixed
/// size for a pool the call creates; `k`/`m`/`g` suffixes; without it the
/// pool starts small and grows on demand), `max_size` (the most it may grow
/// to; default 1 TiB), `sessions`
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
        o.store = match k {
            "engine" => o
                .store
                .engine(EngineKind::parse(v).ok_or_else(|| bad("engines are inp, cow, lsm"))?),
            "domain" => {
                o.store.domain(Domain::parse(v).ok_or_else(|| {
                    bad("domains are adr, eadr, pdram, pdram-lite, msync, volatile")
                })?)
            }
            "size" => o.store.size(parse_size(v)?),
            "max_size" => o.store.max_size(parse_size(v)?),
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
                    "unknown option '{k}' (engine, domain, size, max_size, sessions, allocator, create)"
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
/// at `path` (a `.NAME.creating-PID` file, removed by the next create once
/// that process is gone), and of two processes creating at once one
/// creates and the other opens.
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
    remove_abandoned(path, &name.to_string_lossy());
    Store::create_new(&tmp, &o.store)?.close()?;
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

/// Removes `.NAME.creating-PID` files beside `path` whose process is gone
/// (a create killed midway leaves one).
fn remove_abandoned(path: &Path, name: &str) {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let prefix = format!(".{name}.creating-");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let file = e.file_name();
        let Some(pid) = file.to_str().and_then(|f| f.strip_prefix(&prefix)) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_file(e.path());
        }
    }
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

    #[test]
    fn create_is_atomic_and_clears_abandoned_creates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.pool");
        // A create killed midway (pid beyond any pid_max) and a live one.
        let dead = dir.path().join(".x.pool.creating-999999999");
        let live = dir
            .path()
            .join(format!(".x.pool.creating-{}", std::process::id()));
        std::fs::write(&dead, b"half").unwrap();
        let o = parse_options(Some("size=8M,engine=cow")).unwrap();
        let st = open(&path, &o).unwrap();
        st.put(b"k", b"v").unwrap();
        st.close().unwrap();
        assert!(!dead.exists(), "the abandoned create is removed");
        assert!(!live.exists(), "the temporary file of this create is gone");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("x.pool")]);
        // Opened, not created again: the key is there.
        let st = open(&path, &o).unwrap();
        assert_eq!(st.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
        st.close().unwrap();
        // create=no on a missing pool creates nothing.
        let none = dir.path().join("none.pool");
        assert!(open(&none, &parse_options(Some("create=no")).unwrap()).is_err());
        assert!(!none.exists());
    }
}
