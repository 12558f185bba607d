//! What a run is asked to do: its scale, repetitions and outputs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How big a run is. Suites pick their sizes and operation counts from it
/// with [`Scale::pick`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Scale {
    /// Seconds per suite on a small shared machine; numbers are indicative.
    Quick,
    /// Data sets well beyond the caches and longer batches; minutes per suite.
    Full,
}

impl Scale {
    /// `quick` at [`Scale::Quick`], `full` at [`Scale::Full`].
    pub fn pick<T>(self, quick: T, full: T) -> T {
        match self {
            Scale::Quick => quick,
            Scale::Full => full,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Scale::Quick => "quick",
            Scale::Full => "full",
        }
    }

    pub fn parse(s: &str) -> Option<Scale> {
        match s {
            "quick" => Some(Scale::Quick),
            "full" => Some(Scale::Full),
            _ => None,
        }
    }

    /// Default number of timed repetitions (odd, so the median is a sample).
    pub fn default_reps(self) -> usize {
        self.pick(7, 15)
    }
}

/// The context every suite runs in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BenchCtx {
    pub scale: Scale,
    /// Timed repetitions per variant (interleaved with the other variants of
    /// the same group); at least 1.
    pub reps: usize,
    /// Where [`crate::report`] appends JSON lines, if anywhere. Suites never
    /// write it themselves.
    pub json: Option<PathBuf>,
    /// Report progress (plain lines on stderr, or to `hook`).
    pub progress: bool,
    /// Where progress goes instead of plain stderr lines, if set.
    pub hook: Option<ProgressHook>,
}

/// What a run reports as it goes, when [`BenchCtx::progress`] is on.
#[derive(Clone, Copy, Debug)]
pub enum Progress<'a> {
    /// A free-form line from a suite (what it prepares, which case runs).
    Note(&'a str),
    /// A group of variants starts ([`crate::run_interleaved`]): a warm-up
    /// batch each, then `reps` timed rounds.
    GroupStart {
        suite: &'a str,
        variants: &'a [&'a str],
        reps: usize,
    },
    /// Round `done` of `reps` is over, `elapsed` after the group started.
    Round {
        suite: &'a str,
        done: usize,
        reps: usize,
        elapsed: Duration,
    },
    /// The group is measured.
    GroupDone {
        suite: &'a str,
        variants: usize,
        reps: usize,
        elapsed: Duration,
    },
}

impl Progress<'_> {
    /// The event as one plain line (what is printed without a hook).
    pub fn line(&self) -> String {
        match self {
            Progress::Note(m) => (*m).to_string(),
            Progress::GroupStart {
                suite,
                variants,
                reps,
            } => format!(
                "[{suite}] {} variants x {reps} reps: {}",
                variants.len(),
                variants.join(" | ")
            ),
            Progress::Round {
                suite,
                done,
                reps,
                elapsed,
            } => format!(
                "[{suite}]   rep {done}/{reps} done ({:.1} s)",
                elapsed.as_secs_f64()
            ),
            Progress::GroupDone {
                suite,
                variants,
                reps,
                elapsed,
            } => format!(
                "[{suite}] measured {variants} variants x {reps} reps in {:.1} s",
                elapsed.as_secs_f64()
            ),
        }
    }
}

/// A receiver of [`Progress`] events (e.g. a terminal progress bar). It
/// may be called from any thread a suite runs on.
#[derive(Clone)]
pub struct ProgressHook(pub Arc<dyn Fn(&Progress<'_>) + Send + Sync>);

impl std::fmt::Debug for ProgressHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressHook")
    }
}

/// Two contexts are equal when they share the same hook (or have none).
impl PartialEq for ProgressHook {
    fn eq(&self, other: &ProgressHook) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ProgressHook {}

impl BenchCtx {
    /// A context at `scale` with its default repetitions, no JSON, no progress.
    pub fn new(scale: Scale) -> BenchCtx {
        BenchCtx {
            scale,
            reps: scale.default_reps(),
            json: None,
            progress: false,
            hook: None,
        }
    }

    pub fn quick() -> BenchCtx {
        BenchCtx::new(Scale::Quick)
    }

    pub fn full() -> BenchCtx {
        BenchCtx::new(Scale::Full)
    }

    pub fn with_reps(mut self, reps: usize) -> BenchCtx {
        self.reps = reps.max(1);
        self
    }

    pub fn with_json(mut self, path: impl Into<PathBuf>) -> BenchCtx {
        self.json = Some(path.into());
        self
    }

    pub fn with_progress(mut self, on: bool) -> BenchCtx {
        self.progress = on;
        self
    }

    /// Sends progress to `hook` instead of printing plain lines (progress
    /// must still be turned on with [`BenchCtx::with_progress`]).
    pub fn with_progress_hook(
        mut self,
        hook: impl Fn(&Progress<'_>) + Send + Sync + 'static,
    ) -> BenchCtx {
        self.hook = Some(ProgressHook(Arc::new(hook)));
        self
    }

    /// Reports `ev` (only when `progress` is on): to the hook if there is
    /// one, else as a line on stderr.
    pub fn report_progress(&self, ev: &Progress<'_>) {
        if !self.progress {
            return;
        }
        match &self.hook {
            Some(h) => (h.0)(ev),
            None => eprintln!("{}", ev.line()),
        }
    }

    /// A progress line (only when `progress` is on).
    pub fn note(&self, msg: impl std::fmt::Display) {
        if self.progress {
            self.report_progress(&Progress::Note(&msg.to_string()));
        }
    }
}

impl Default for BenchCtx {
    fn default() -> BenchCtx {
        BenchCtx::quick()
    }
}
