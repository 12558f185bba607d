//! What a run is asked to do: its scale, repetitions and outputs.

use std::path::PathBuf;

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
    /// Print progress lines on stderr.
    pub progress: bool,
}

impl BenchCtx {
    /// A context at `scale` with its default repetitions, no JSON, no progress.
    pub fn new(scale: Scale) -> BenchCtx {
        BenchCtx {
            scale,
            reps: scale.default_reps(),
            json: None,
            progress: false,
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

    /// A progress line on stderr (only when `progress` is on).
    pub fn note(&self, msg: impl std::fmt::Display) {
        if self.progress {
            eprintln!("{msg}");
        }
    }
}

impl Default for BenchCtx {
    fn default() -> BenchCtx {
        BenchCtx::quick()
    }
}
