//! Progress on stderr for runs that take more than a few seconds.
//!
//! Two forms, chosen once per process by whether stderr is a terminal:
//!
//! - a terminal gets `indicatif` bars and spinners, redrawn in place;
//! - anything else (a pipe, a CI log, a file) gets plain lines, each
//!   complete and never rewritten: no carriage returns, no escape codes, at
//!   most one line every few seconds.
//!
//! Progress never goes to stdout, so tables, JSON and values printed there
//! stay clean for pipes. Runs that end within [`quiet`] (2 s, or
//! `FERRITE_PROGRESS_AFTER_MS`) print no progress at all, so quick commands
//! and their one-line errors stay as they were.

use ferrite_bench::ctx::Progress;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Runs shorter than this show no progress: 2 s, or
/// `FERRITE_PROGRESS_AFTER_MS` milliseconds (0: from the start).
pub fn quiet() -> Duration {
    std::env::var("FERRITE_PROGRESS_AFTER_MS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .map_or(Duration::from_secs(2), Duration::from_millis)
}

/// Plain lines come at most this often.
const PLAIN_EVERY: Duration = Duration::from_secs(5);

/// Is stderr a terminal (bars), or not (plain lines)?
pub fn terminal() -> bool {
    std::io::stderr().is_terminal()
}

fn spinner(msg: String) -> ProgressBar {
    let pb = ProgressBar::new_spinner().with_message(msg);
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}

/// Progress of a long step of unknown length (opening and recovering a
/// pool): silent for [`quiet`], then a spinner on a terminal or a plain
/// line every [`PLAIN_EVERY`]; [`Step::done`] closes it with the elapsed
/// time if anything was shown.
pub struct Step {
    what: String,
    started: Instant,
    state: Arc<(Mutex<StepState>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct StepState {
    over: bool,
    shown: bool,
    bar: Option<ProgressBar>,
}

impl Step {
    /// Starts timing `what` (e.g. "opening serve.pool").
    pub fn start(what: impl Into<String>) -> Step {
        let what = what.into();
        let started = Instant::now();
        let term = terminal();
        let mut first = quiet();
        let mut st0 = StepState::default();
        if first.is_zero() {
            // Shown from the start: the first line now, not whenever the
            // thread gets to run (a quick step could end before that).
            st0.shown = true;
            if term {
                st0.bar = Some(spinner(what.clone()));
            } else {
                eprintln!("ferrite: {what} …");
            }
            first = PLAIN_EVERY;
        }
        let state = Arc::new((Mutex::new(st0), Condvar::new()));
        let thread = {
            let state = state.clone();
            let what = what.clone();
            std::thread::Builder::new()
                .name("ferrite-progress".into())
                .spawn(move || {
                    let (lock, cv) = &*state;
                    let Ok(mut st) = lock.lock() else { return };
                    if st.bar.is_some() {
                        return;
                    }
                    let mut wait = first;
                    let mut since = started;
                    loop {
                        // Checked before waiting too: the step may be over
                        // before this thread first runs.
                        if st.over {
                            return;
                        }
                        let left = wait.saturating_sub(since.elapsed());
                        if !left.is_zero() {
                            let Ok((g, _)) = cv.wait_timeout(st, left) else {
                                return;
                            };
                            st = g;
                            continue;
                        }
                        st.shown = true;
                        if term {
                            st.bar = Some(spinner(what.clone()));
                            return;
                        }
                        eprintln!(
                            "ferrite: {what} … ({:.0} s)",
                            started.elapsed().as_secs_f64()
                        );
                        wait = PLAIN_EVERY;
                        since = Instant::now();
                    }
                })
                .ok()
        };
        Step {
            what,
            started,
            state,
            thread,
        }
    }

    /// The step is over: prints `what`, `detail` and the elapsed time if
    /// progress was shown.
    pub fn done(mut self, detail: &str) {
        self.finish(Some(detail));
    }

    fn finish(&mut self, detail: Option<&str>) {
        let (lock, cv) = &*self.state;
        let (shown, bar) = match lock.lock() {
            Ok(mut st) => {
                st.over = true;
                (st.shown, st.bar.take())
            }
            Err(_) => (false, None),
        };
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        if let (true, Some(d)) = (shown, detail) {
            eprintln!(
                "ferrite: {} done in {:.1} s{}{d}",
                self.what,
                self.started.elapsed().as_secs_f64(),
                if d.is_empty() { "" } else { ": " }
            );
        }
    }
}

impl Drop for Step {
    /// An abandoned step (an error on the way) stops its thread silently:
    /// the error line says what happened.
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.finish(None);
        }
    }
}

/// Progress of `total` units of work done one by one (`kv fill`): silent
/// for [`quiet`], then a bar on a terminal or a plain line every
/// [`PLAIN_EVERY`] with the count, percentage and rate.
pub struct Counter {
    what: String,
    unit: &'static str,
    total: u64,
    started: Instant,
    last_line: Instant,
    quiet: Duration,
    term: bool,
    bar: Option<ProgressBar>,
    shown: bool,
}

impl Counter {
    pub fn new(what: impl Into<String>, unit: &'static str, total: u64) -> Counter {
        let now = Instant::now();
        Counter {
            what: what.into(),
            unit,
            total,
            started: now,
            last_line: now,
            quiet: quiet(),
            term: terminal(),
            bar: None,
            shown: false,
        }
    }

    /// `done` units are finished. Cheap when nothing is due (one clock read).
    pub fn tick(&mut self, done: u64) {
        if let Some(b) = &self.bar {
            b.set_position(done);
            return;
        }
        let now = Instant::now();
        let due = if self.shown { PLAIN_EVERY } else { self.quiet };
        if now.duration_since(self.last_line) < due {
            return;
        }
        self.last_line = now;
        self.shown = true;
        if self.term {
            let pb = ProgressBar::new(self.total).with_message(self.what.clone());
            pb.set_style(
                ProgressStyle::with_template(
                    "{msg} [{bar:30}] {pos}/{len} {per_sec} ({elapsed}, eta {eta})",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            pb.set_position(done);
            self.bar = Some(pb);
            return;
        }
        let secs = self.started.elapsed().as_secs_f64();
        eprintln!(
            "ferrite: {}: {done}/{} {} ({:.0}%), {secs:.0} s, {:.0} {}/s",
            self.what,
            self.total,
            self.unit,
            100.0 * done as f64 / self.total.max(1) as f64,
            done as f64 / secs.max(1e-9),
            self.unit
        );
    }

    /// All `done` units are finished: a closing line if progress was shown.
    pub fn finish(self, done: u64) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        if self.shown {
            let secs = self.started.elapsed().as_secs_f64();
            eprintln!(
                "ferrite: {}: {done} {} in {secs:.1} s ({:.0} {}/s)",
                self.what,
                self.unit,
                done as f64 / secs.max(1e-9),
                self.unit
            );
        }
    }
}

/// Terminal progress of a bench run: each group of variants as a bar of
/// its rounds, and between groups (a suite preparing its data) a spinner
/// after the suite's last note. Notes and each group's closing line stay
/// printed above. Without it (not a terminal) the bench prints plain lines.
#[derive(Clone, Default)]
pub struct BenchBars {
    cur: Arc<Mutex<Option<ProgressBar>>>,
}

impl BenchBars {
    /// Clears the bar or spinner on screen (before printing other lines).
    pub fn clear(&self) {
        if let Ok(mut cur) = self.cur.lock()
            && let Some(b) = cur.take()
        {
            b.finish_and_clear();
        }
    }

    /// The hook for [`ferrite_bench::BenchCtx::with_progress_hook`].
    pub fn hook(&self) -> impl Fn(&Progress<'_>) + Send + Sync + 'static {
        let cur = self.cur.clone();
        move |ev: &Progress<'_>| {
            let Ok(mut cur) = cur.lock() else { return };
            // A group's bar stays through the notes of its variants; a
            // spinner gives way to whatever comes next.
            let in_group = cur.as_ref().is_some_and(|b| b.length().is_some());
            match ev {
                Progress::Note(_) if in_group => {
                    if let Some(b) = cur.as_ref() {
                        b.println(ev.line());
                    }
                }
                Progress::Note(m) => {
                    if let Some(b) = cur.take() {
                        b.finish_and_clear();
                    }
                    eprintln!("{m}");
                    *cur = Some(spinner("working".into()));
                }
                Progress::GroupStart {
                    suite,
                    variants,
                    reps,
                } => {
                    if let Some(b) = cur.take() {
                        b.finish_and_clear();
                    }
                    eprintln!("{}", ev.line());
                    let pb = ProgressBar::new(*reps as u64)
                        .with_message(format!("[{suite}] {} variants", variants.len()));
                    pb.set_style(
                        ProgressStyle::with_template(
                            "{msg}: rep {pos}/{len} [{bar:20}] ({elapsed}, eta {eta})",
                        )
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .progress_chars("=> "),
                    );
                    pb.enable_steady_tick(Duration::from_millis(500));
                    *cur = Some(pb);
                }
                Progress::Round { done, .. } => {
                    if let Some(b) = cur.as_ref() {
                        b.set_position(*done as u64);
                    }
                }
                Progress::GroupDone { .. } => {
                    if let Some(b) = cur.take() {
                        b.finish_and_clear();
                    }
                    eprintln!("{}", ev.line());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A quick step costs no waiting: `done` returns at once even when the
    /// progress thread had not started yet (it must not sit out its quiet
    /// period first), and prints nothing.
    #[test]
    fn a_quick_step_returns_at_once() {
        let t0 = Instant::now();
        for i in 0..20 {
            Step::start(format!("step {i}")).done("");
        }
        drop(Step::start("abandoned"));
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    }
}
