//! The pieces every component's `checks.rs` shares: the grammar of a
//! check run's name, the error a check returns when it cannot run, and the
//! report of a restart run that could not start.
//!
//! # Run names
//!
//! A check splits its budget over *runs*, each named
//! `BASE[/torn][/store][/FLAG…][/restartN]`, and replays one by that name
//! (`ferrite check` prints it beside every violation):
//!
//! - `BASE` names what is checked (`classic-packed`, `cow/4k`, `g4`,
//!   `ferrite`); each check parses its own, with as many `/`-separated
//!   parts as it needs, and hands the rest to [`RunMods::parse`].
//! - `torn`: 8-byte failure atomicity instead of whole cache lines.
//! - `store`: crash points also between stores.
//! - `FLAG`: a check's own modifiers (the allocator's `xlane`, `grow`),
//!   passed to [`RunMods::parse`] by name.
//! - `restartN`: the run recovers a crash image of the main workload
//!   (picked by `N` and the seed) and explores a second workload on it.
//!
//! The parser accepts the modifiers in any order and **refuses a modifier
//! given twice** ([`SpecError::Repeated`]): `torn/torn` or `restart0/restart1`
//! is a typo, and silently keeping one of them (the copies this replaced did
//! either, depending on the component) would replay a run other than the
//! one asked for. [`RunMods::suffix`] writes them in the canonical order
//! shown above, so a name that [`RunMods::suffix`] produced parses back to
//! the same run.

use crate::explorer::{ExploreError, ImageSel, Report, Repro, Violation};
use crate::{Config, CrashAt};
use ferrite_pmem::PoolError;

/// The crash-model modifiers of a run name (module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunMods {
    /// `/torn`: 8-byte failure atomicity.
    pub torn: bool,
    /// `/store`: crash points between stores too.
    pub store: bool,
    /// `/restartN`: start from the `N`th seeded crash image of the main run.
    pub restart: Option<u32>,
    /// The check's own flags that were given, bit `i` for `flags[i]` of
    /// [`RunMods::parse`] (at most 32).
    flags: u32,
}

/// Why a run name was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The base (what is checked) is not one this check knows.
    #[error("unknown base '{0}'")]
    UnknownBase(String),
    /// A part that is no modifier.
    #[error("unknown modifier '{0}'")]
    UnknownModifier(String),
    /// A modifier given twice (two `restartN` count as one repeated).
    #[error("modifier '{0}' given twice")]
    Repeated(String),
    /// Modifiers this check cannot combine.
    #[error("{0}")]
    Conflict(&'static str),
}

impl RunMods {
    /// The common modifiers, no check flag set.
    pub fn new(torn: bool, store: bool, restart: Option<u32>) -> RunMods {
        RunMods {
            torn,
            store,
            restart,
            flags: 0,
        }
    }

    /// Parses the modifiers after a run's base: `torn`, `store`, `restartN`
    /// (a decimal `u32`) and the check's own `flags`, in any order, each at
    /// most once.
    pub fn parse<'a>(
        parts: impl IntoIterator<Item = &'a str>,
        flags: &[&str],
    ) -> Result<RunMods, SpecError> {
        assert!(flags.len() <= 32, "at most 32 check flags");
        let mut m = RunMods::default();
        for p in parts {
            let seen = match p {
                "torn" => std::mem::replace(&mut m.torn, true),
                "store" => std::mem::replace(&mut m.store, true),
                _ => {
                    if let Some(i) = flags.iter().position(|f| *f == p) {
                        let seen = m.flag(i);
                        m.flags |= 1 << i;
                        seen
                    } else {
                        let n = p
                            .strip_prefix("restart")
                            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                            .and_then(|n| n.parse().ok())
                            .ok_or_else(|| SpecError::UnknownModifier(p.to_string()))?;
                        m.restart.replace(n).is_some()
                    }
                }
            };
            if seen {
                let what = if p.starts_with("restart") {
                    "restartN"
                } else {
                    p
                };
                return Err(SpecError::Repeated(what.to_string()));
            }
        }
        Ok(m)
    }

    /// Whether the check's flag `i` (its index in the `flags` given to
    /// [`RunMods::parse`] and [`RunMods::suffix`]) is set.
    pub fn flag(&self, i: usize) -> bool {
        self.flags & (1 << i) != 0
    }

    /// These modifiers with flag `i` set or cleared.
    pub fn with_flag(mut self, i: usize, on: bool) -> RunMods {
        if on {
            self.flags |= 1 << i;
        } else {
            self.flags &= !(1 << i);
        }
        self
    }

    /// The modifiers as a name suffix, canonical order:
    /// `[/torn][/store][/FLAG…][/restartN]` (flags in the order of `flags`).
    pub fn suffix(&self, flags: &[&str]) -> String {
        let mut s = String::new();
        for (on, part) in [(self.torn, "torn"), (self.store, "store")]
            .into_iter()
            .chain(flags.iter().enumerate().map(|(i, f)| (self.flag(i), *f)))
        {
            if on {
                s.push('/');
                s.push_str(part);
            }
        }
        if let Some(r) = self.restart {
            s.push_str(&format!("/restart{r}"));
        }
        s
    }
}

/// What a check builds and explores: its construction error and the run
/// names it accepts, for [`CheckError`]'s messages.
pub trait CheckSubject: std::error::Error + Send + Sync + 'static {
    /// The thing under test, as in "cannot build the log under test".
    const WHAT: &'static str;
    /// The grammar of its run names, e.g. `VARIANT[/torn][/store][/restartN]`.
    const RUNS: &'static str;
}

/// Why a check could not run (a violation is not an error: it is in the
/// report). `E` is the error of building the component under test.
#[derive(Debug, thiserror::Error)]
pub enum CheckError<E: CheckSubject> {
    #[error(transparent)]
    Explore(#[from] ExploreError),
    #[error("cannot build the pool under test: {0}")]
    Pool(#[from] PoolError),
    #[error("cannot build the {what} under test: {0}", what = E::WHAT)]
    Subject(E),
    #[error("unknown check run '{name}': {why} (expected {runs})", runs = E::RUNS)]
    UnknownRun { name: String, why: SpecError },
}

/// `?` on the component's own errors: they failed building what is checked.
impl<E: CheckSubject> From<E> for CheckError<E> {
    fn from(e: E) -> CheckError<E> {
        CheckError::Subject(e)
    }
}

impl<E: CheckSubject> CheckError<E> {
    /// The error for the run name `name` refused for `why`.
    pub fn unknown_run(name: &str, why: SpecError) -> CheckError<E> {
        CheckError::UnknownRun {
            name: name.to_string(),
            why,
        }
    }
}

/// The report of a restart run that could not start: the crash image it
/// was to start from (crash point `at`, sampled image `salt`) failed to
/// recover or already violates the invariant. One state, one violation —
/// a violation of the crash that produced the image, which only a planted
/// bug makes.
pub fn failed_restart(cfg: &Config, at: CrashAt, salt: u64, message: String) -> Report {
    Report {
        states: 1,
        violation_count: 1,
        violations: vec![Violation {
            repro: Repro {
                at,
                image: ImageSel::Sampled(salt),
                nested: None,
            },
            seed: cfg.seed,
            message,
        }],
        ..Report::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLAGS: &[&str] = &["xlane", "grow"];

    fn parse(s: &str) -> Result<RunMods, SpecError> {
        RunMods::parse(s.split('/').filter(|p| !p.is_empty()), FLAGS)
    }

    #[test]
    fn modifiers_parse_in_any_order_and_print_canonically() {
        assert_eq!(parse("").unwrap(), RunMods::default());
        let m = parse("restart3/store/grow/torn").unwrap();
        assert!(m.torn && m.store && m.flag(1) && !m.flag(0));
        assert_eq!(m.restart, Some(3));
        assert_eq!(m.suffix(FLAGS), "/torn/store/grow/restart3");
        assert_eq!(
            parse(&m.suffix(FLAGS)).unwrap(),
            m,
            "a printed name parses back"
        );
        let x = RunMods::default().with_flag(0, true);
        assert_eq!(x.suffix(FLAGS), "/xlane");
        assert!(!x.with_flag(0, false).flag(0));
    }

    #[test]
    fn a_repeated_modifier_is_refused_by_name() {
        for (name, what) in [
            ("torn/torn", "torn"),
            ("store/torn/store", "store"),
            ("xlane/xlane", "xlane"),
            ("restart0/restart1", "restartN"),
            ("restart1/torn/restart1", "restartN"),
        ] {
            assert_eq!(parse(name), Err(SpecError::Repeated(what.into())), "{name}");
        }
    }

    #[test]
    fn unknown_and_malformed_modifiers_are_refused() {
        for bad in [
            "tor",
            "restart",
            "restart-1",
            "restart+1",
            "restartx",
            "restart99999999999",
            "Torn",
            "lanes",
        ] {
            assert_eq!(
                parse(bad),
                Err(SpecError::UnknownModifier(bad.into())),
                "{bad}"
            );
        }
        // Flags are the check's own: without them `xlane` is unknown.
        assert_eq!(
            RunMods::parse(["xlane"], &[]),
            Err(SpecError::UnknownModifier("xlane".into()))
        );
    }
}
