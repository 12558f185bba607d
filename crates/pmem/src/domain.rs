//! Durability domains (ARCHITECTURE.md, rule 5): what must happen for a store
//! to survive power loss, chosen when a pool is opened.

use crate::arch::FlushKind;
use std::fmt;
use std::path::Path;

/// Environment variable that overrides the domain of every pool opened
/// without an explicit choice.
pub const DOMAIN_ENV: &str = "FERRITE_DOMAIN";
/// Environment variable that forces a flush instruction in the `adr` domain.
pub const FLUSH_ENV: &str = "FERRITE_FLUSH";

/// A durability domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Domain {
    /// Memory controller is persistent, caches are not: flush each line and
    /// fence (Optane in App Direct mode, CXL without GPF).
    Adr,
    /// Caches are persistent too (eADR, CXL with global persistent flush):
    /// fences order stores, no flushes are needed.
    Eadr,
    /// DRAM acts as a persistent cache of PMem [P3 §IV-A]: same crash
    /// semantics as eADR.
    Pdram,
    /// Only redo logs live in persistent DRAM, the rest is eADR [P3 §IV-B]:
    /// same crash semantics as eADR for what it covers.
    PdramLite,
    /// Ordinary file: dirty pages reach the disk with `msync(2)`; page-granular.
    Msync,
    /// No persistence at all; the upper bound in benchmarks.
    Volatile,
}

/// How the crash simulator models a domain's power failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashModel {
    /// Durable image plus any subset of in-flight units of the given size.
    InFlight {
        /// Bytes that reach the medium whole or not at all (64 for cache
        /// lines, 8 under 8-byte tearing, the page size under `msync`).
        unit: usize,
    },
    /// The live image at the crash point survives whole.
    LiveImage,
    /// Nothing survives: the pool is not persistent.
    Nothing,
}

impl Domain {
    /// Every domain, in code order (1..=6).
    pub const ALL: [Domain; 6] = [
        Domain::Adr,
        Domain::Eadr,
        Domain::Pdram,
        Domain::PdramLite,
        Domain::Msync,
        Domain::Volatile,
    ];

    /// Name used in headers, the CLI and `FERRITE_DOMAIN`.
    pub fn name(self) -> &'static str {
        match self {
            Domain::Adr => "adr",
            Domain::Eadr => "eadr",
            Domain::Pdram => "pdram",
            Domain::PdramLite => "pdram-lite",
            Domain::Msync => "msync",
            Domain::Volatile => "volatile",
        }
    }

    /// The domain whose [`Domain::name`] is `s`; `None` for any other string.
    pub fn parse(s: &str) -> Option<Domain> {
        Domain::ALL.into_iter().find(|d| d.name() == s)
    }

    /// Stable numeric code stored in pool headers.
    pub fn code(self) -> u32 {
        match self {
            Domain::Adr => 1,
            Domain::Eadr => 2,
            Domain::Pdram => 3,
            Domain::PdramLite => 4,
            Domain::Msync => 5,
            Domain::Volatile => 6,
        }
    }

    /// The domain whose [`Domain::code`] is `c`; `None` for an unknown code
    /// (a header from a newer build, or damage).
    pub fn from_code(c: u32) -> Option<Domain> {
        Domain::ALL.into_iter().find(|d| d.code() == c)
    }

    /// Whether lines must be written back with flush instructions.
    pub fn flushes_lines(self) -> bool {
        self == Domain::Adr
    }

    /// Whether caches are part of the persistence domain.
    pub fn caches_persistent(self) -> bool {
        matches!(self, Domain::Eadr | Domain::Pdram | Domain::PdramLite)
    }

    /// Crash semantics in the simulator; `tearing` selects 8-byte units
    /// (x86 guarantees only 8-byte failure atomicity) instead of lines.
    pub fn crash_model(self, tearing: bool) -> CrashModel {
        match self {
            Domain::Adr => CrashModel::InFlight {
                unit: if tearing { 8 } else { crate::arch::CACHE_LINE },
            },
            Domain::Msync => CrashModel::InFlight {
                unit: crate::map::PAGE,
            },
            Domain::Eadr | Domain::Pdram | Domain::PdramLite => CrashModel::LiveImage,
            Domain::Volatile => CrashModel::Nothing,
        }
    }
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Domain {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Domain::parse(s).ok_or_else(|| {
            let names: Vec<_> = Domain::ALL.iter().map(|d| d.name()).collect();
            format!(
                "unknown durability domain '{s}' (expected one of {})",
                names.join(", ")
            )
        })
    }
}

/// What the platform says about a mapping, and the domain that follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detection {
    /// The mapping accepted `MAP_SYNC` (a DAX file system on real PMem).
    pub map_sync: bool,
    /// `/sys/bus/nd/devices/*/persistence_domain`, if any region reports one.
    pub sysfs_persistence_domain: Option<String>,
    /// The domain auto-detection picks.
    pub domain: Domain,
}

/// Auto-detection: DAX with `MAP_SYNC` gives `adr`, or `eadr` when sysfs says
/// the persistence domain includes the CPU caches; anything else is an
/// ordinary file and gets `msync`.
pub fn detect(map_sync: bool) -> Detection {
    let sysfs = read_sysfs_persistence_domain(Path::new("/sys/bus/nd/devices"));
    let domain = if !map_sync {
        Domain::Msync
    } else if sysfs.as_deref() == Some("cpu_cache") {
        Domain::Eadr
    } else {
        Domain::Adr
    };
    Detection {
        map_sync,
        sysfs_persistence_domain: sysfs,
        domain,
    }
}

/// Weakest persistence domain reported by any nd region (`memory_controller`
/// beats `cpu_cache` when both appear, since a pool may land on either).
fn read_sysfs_persistence_domain(dir: &Path) -> Option<String> {
    let mut found: Option<String> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let Ok(s) = std::fs::read_to_string(entry.path().join("persistence_domain")) else {
            continue;
        };
        let s = s.trim().to_string();
        if s.is_empty() {
            continue;
        }
        if found.is_none() || s == "memory_controller" {
            found = Some(s);
        }
    }
    found
}

/// The domain named by `FERRITE_DOMAIN`, if set. An unparsable value is an
/// error rather than silently ignored.
pub(crate) fn domain_from_env() -> Result<Option<Domain>, String> {
    match std::env::var(DOMAIN_ENV) {
        Ok(v) if !v.is_empty() => v
            .parse()
            .map(Some)
            .map_err(|e| format!("{DOMAIN_ENV}: {e}")),
        _ => Ok(None),
    }
}

/// The flush instruction to use: `FERRITE_FLUSH` if set and supported, else the
/// best the CPU has.
pub(crate) fn flush_kind_from_env() -> Result<Option<FlushKind>, String> {
    match std::env::var(FLUSH_ENV) {
        Ok(v) if !v.is_empty() => {
            let k = FlushKind::parse(&v).ok_or_else(|| {
                format!("{FLUSH_ENV}: unknown flush instruction '{v}' (clwb, clflushopt, clflush)")
            })?;
            if !k.supported() {
                return Err(format!("{FLUSH_ENV}: this CPU does not implement {v}"));
            }
            Ok(Some(k))
        }
        _ => Ok(FlushKind::best()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes_round_trip() {
        for d in Domain::ALL {
            assert_eq!(Domain::parse(d.name()), Some(d));
            assert_eq!(Domain::from_code(d.code()), Some(d));
        }
        assert!("bogus".parse::<Domain>().is_err());
        assert_eq!(Domain::from_code(0), None);
    }

    #[test]
    fn detection_without_map_sync_is_msync() {
        assert_eq!(detect(false).domain, Domain::Msync);
    }

    #[test]
    fn sysfs_reader_prefers_memory_controller() {
        let dir = tempfile::tempdir().unwrap();
        for (name, v) in [
            ("region0", "cpu_cache\n"),
            ("region1", "memory_controller\n"),
        ] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
            std::fs::write(dir.path().join(name).join("persistence_domain"), v).unwrap();
        }
        assert_eq!(
            read_sysfs_persistence_domain(dir.path()).as_deref(),
            Some("memory_controller")
        );
        assert_eq!(
            read_sysfs_persistence_domain(&dir.path().join("none")),
            None
        );
    }
}
