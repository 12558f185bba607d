//! Read-only verification of a log or a page store for
//! `ferrite pool check --deep`.
//!
//! The caller hands [`verify`] a region over a *copy* of the pool (an
//! in-memory image): the structure is recognised by the magic at the
//! region's start, then opened with its own recovery ([`Log::recover`],
//! [`PageStore::open`]), which validates its superblock and finds its
//! valid prefix (log) or every page's live slot (page store). Recovery
//! writing anything — a torn append scrubbed, a micro-log entry replayed —
//! means the structure was not closed cleanly: a finding, with how many
//! cache lines it changes. The page store is also audited (no slot both
//! free and live, every live slot's header names its page).

use crate::log::Log;
use crate::page::PageStore;
use ferrite_pmem::Region;

/// Which structure a region holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Log,
    Pages,
}

/// One thing wrong with a log or page store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlocksFinding {
    /// Its open (recovery) refuses it.
    Refused { kind: Kind, what: String },
    /// Recovery would change `lines` cache lines.
    Recovery {
        kind: Kind,
        lines: usize,
        what: String,
    },
    /// The page store's audit failed.
    Audit(String),
}

impl BlocksFinding {
    /// `log` or `pages`.
    pub fn component(&self) -> &'static str {
        match self {
            BlocksFinding::Refused { kind, .. } | BlocksFinding::Recovery { kind, .. } => {
                match kind {
                    Kind::Log => "log",
                    Kind::Pages => "pages",
                }
            }
            BlocksFinding::Audit(_) => "pages",
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            BlocksFinding::Refused { .. } => "blocks-refused",
            BlocksFinding::Recovery { .. } => "log-recovery",
            BlocksFinding::Audit(_) => "pages-audit",
        }
    }
}

impl std::fmt::Display for BlocksFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BlocksFinding::Refused { what, .. } => write!(f, "does not open: {what}"),
            BlocksFinding::Recovery { lines, what, .. } => write!(
                f,
                "not closed cleanly: recovery would change {lines} cache line{} ({what})",
                if *lines == 1 { "" } else { "s" }
            ),
            BlocksFinding::Audit(e) => write!(f, "audit: {e}"),
        }
    }
}

/// What [`verify`] found.
#[derive(Clone, Debug, Default)]
pub struct BlocksCheck {
    /// One line on what the region holds.
    pub what: String,
    pub findings: Vec<BlocksFinding>,
    /// Where the log's valid prefix ends, and similar.
    pub notes: Vec<String>,
}

/// The structure whose magic starts `bytes`.
pub fn recognise(bytes: &[u8]) -> Option<Kind> {
    match bytes.get(..8)? {
        m if m == crate::log::MAGIC => Some(Kind::Log),
        m if m == crate::page::MAGIC => Some(Kind::Pages),
        _ => None,
    }
}

fn changed_lines(a: &[u8], b: &[u8]) -> usize {
    a.chunks(64)
        .zip(b.chunks(64))
        .filter(|(x, y)| x != y)
        .count()
}

/// Verifies the log or page store at the start of `region` (a region over
/// a copy: recovery runs on it). Never panics on any input.
pub fn verify(region: &Region) -> BlocksCheck {
    let mut out = BlocksCheck::default();
    let head = region.read_vec(0, region.len().min(8));
    let Some(kind) = recognise(&head) else {
        out.what = "no log or page store".into();
        return out;
    };
    let before = region.read_vec(0, region.len());
    match kind {
        Kind::Log => match Log::recover(region.clone()) {
            Ok(log) => {
                out.what = format!(
                    "{} log: {} records (LSN {} to {}), {} of {} bytes used",
                    log.variant().name(),
                    log.len(),
                    log.first_lsn().0,
                    log.next_lsn().0,
                    log.used_bytes(),
                    log.capacity()
                );
                out.notes.push(format!(
                    "log: valid prefix of {} records ends {} bytes after the head (next LSN {})",
                    log.len(),
                    log.used_bytes(),
                    log.next_lsn().0
                ));
                let lines = changed_lines(&before, &region.read_vec(0, region.len()));
                if lines > 0 {
                    out.findings.push(BlocksFinding::Recovery {
                        kind,
                        lines,
                        what: "a torn append's bytes past the valid prefix scrubbed".into(),
                    });
                }
            }
            Err(e) => {
                out.what = "a log that does not open".into();
                out.findings.push(BlocksFinding::Refused {
                    kind,
                    what: e.to_string(),
                });
            }
        },
        Kind::Pages => match PageStore::open(region.clone()) {
            Ok(ps) => {
                let st = ps.recovery_stats();
                out.what = format!(
                    "page store ({}): {} pages of {} bytes in {} slots",
                    ps.algorithm().name(),
                    ps.pages(),
                    ps.page_size(),
                    ps.slots()
                );
                let lines = changed_lines(&before, &region.read_vec(0, region.len()));
                if lines > 0 {
                    out.findings.push(BlocksFinding::Recovery {
                        kind,
                        lines,
                        what: format!(
                            "{} micro-log entries replayed, {} lane entries or slot headers zeroed",
                            st.replayed, st.scrubbed
                        ),
                    });
                }
                if let Err(e) = ps.audit() {
                    out.findings.push(BlocksFinding::Audit(e));
                }
            }
            Err(e) => {
                out.what = "a page store that does not open".into();
                out.findings.push(BlocksFinding::Refused {
                    kind,
                    what: e.to_string(),
                });
            }
        },
    }
    out
}

/// Runs the structure's own recovery on `region` (the pool itself, for
/// `--repair`) and says what it did.
pub fn recover(region: &Region) -> Result<String, String> {
    let head = region.read_vec(0, region.len().min(8));
    match recognise(&head) {
        Some(Kind::Log) => Log::recover(region.clone())
            .map(|l| format!("log: recovered, {} records in the valid prefix", l.len()))
            .map_err(|e| e.to_string()),
        Some(Kind::Pages) => PageStore::open(region.clone())
            .map(|p| {
                let st = p.recovery_stats();
                format!(
                    "pages: recovered, {} micro-log entries replayed, {} lane entries or slot headers zeroed",
                    st.replayed, st.scrubbed
                )
            })
            .map_err(|e| e.to_string()),
        None => Err("no log or page store".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{Algorithm, Layout, Variant};
    use crate::page::{DirtyLines, PageStoreOptions};
    use ferrite_pmem::{Pool, PoolOptions};

    #[test]
    fn logs_and_page_stores_verify_clean_and_damage_is_found() {
        for alg in [
            Algorithm::Classic,
            Algorithm::Header,
            Algorithm::Rawl,
            Algorithm::PopLog,
        ] {
            let pool = Pool::create_in_memory(&PoolOptions::new("log", 1 << 20)).unwrap();
            let region = pool.data().sub(0, 64 << 10).unwrap();
            let v = Variant::new(alg, Layout::Packed).unwrap();
            let mut log = Log::create(region.clone(), v).unwrap();
            for i in 0..10u8 {
                log.append(&[i; 40]).unwrap();
            }
            drop(log);
            let copy = |r: &Region| {
                let p = Pool::create_in_memory(&PoolOptions::new("log", 1 << 20)).unwrap();
                let c = p.data().sub(0, 64 << 10).unwrap();
                c.write(0, &r.read_vec(0, r.len()));
                (p, c)
            };
            let (_p, c) = copy(&region);
            let r = verify(&c);
            assert!(r.findings.is_empty(), "{alg:?}: {:?}", r.findings);
            assert!(r.what.contains("10 records"), "{alg:?}: {}", r.what);
            // Garbage in the superblock.
            let (_p, c) = copy(&region);
            c.write(20, &[0xff; 4]);
            let r = verify(&c);
            assert!(
                matches!(&r.findings[..], [BlocksFinding::Refused { .. }]),
                "{alg:?}: {:?}",
                r.findings
            );
        }
        let pool = Pool::create_in_memory(&PoolOptions::new("pages", 4 << 20)).unwrap();
        let opts = PageStoreOptions::new(4096, 8);
        let region = pool.data().sub(0, opts.region_len().unwrap()).unwrap();
        let ps = PageStore::create(region.clone(), &opts).unwrap();
        let page = vec![7u8; 4096];
        ps.write_page(3, &page, &DirtyLines::all(64)).unwrap();
        drop(ps);
        let r = verify(&region);
        assert!(r.findings.is_empty(), "{:?}", r.findings);
        region.write(9, &[0x5a]);
        let r = verify(&region);
        assert!(!r.findings.is_empty(), "{r:?}");
    }
}
