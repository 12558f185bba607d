//! `ferrite pool backup SRC DEST`: a consistent copy of a pool, open or
//! not, of any layout, verified by the deep check.
//!
//! 1. A consistent image of SRC ([`crate::live::snapshot`]): read under a
//!    shared lock when nobody has the pool open; when a process has it
//!    open (a `ferrite serve` under load), read while that process is
//!    paused (`SIGSTOP`/`SIGCONT`: the signal is how the copy goes through
//!    the server, which needs no command of its own) — a crash image.
//! 2. The deep check on the image ([`crate::deep::check_snapshot`]). Anything
//!    but what recovery resolves (an open store is "not closed cleanly"
//!    by nature) means SRC itself is damaged: nothing is written, exit 1.
//! 3. DEST is created (never overwritten), written and synced (file and
//!    directory).
//! 4. When the image needs recovery, the component's own recovery runs on
//!    DEST (`pool check --deep --repair`'s), and DEST is checked again: it
//!    must be clean. Otherwise DEST is removed and the command fails.
//!
//! The image's open record ([`ferrite_pmem::opened`]: who had SRC open)
//! is cleared in the copy — it is a crash image, not a torn `cp`; a SRC
//! that is itself such a torn copy is refused at step 2.
//!
//! So DEST is a cleanly closed pool holding a state SRC's owner
//! acknowledged (the recovered crash image), ready to open anywhere.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

pub fn run(src: &Path, dest: &Path) -> Result<ExitCode, String> {
    if dest.exists() {
        return Err(crate::at(
            dest,
            "already exists (a backup never overwrites)",
        ));
    }
    let t0 = std::time::Instant::now();
    let mut snap = crate::live::snapshot(src)?;
    let report = crate::deep::check_snapshot(&snap, None, false);
    let shown = src.display().to_string();
    let damaged: Vec<_> = report
        .findings
        .iter()
        .filter(|f| !crate::deep::RECOVERABLE.contains(&f.kind))
        .collect();
    if !damaged.is_empty() {
        for f in &damaged {
            println!("{shown}: {}: {}", f.component, f.message);
        }
        println!(
            "{shown}: not backed up: {} finding{} recovery cannot resolve ({}); nothing written",
            damaged.len(),
            if damaged.len() == 1 { "" } else { "s" },
            report.what
        );
        return Ok(ExitCode::FAILURE);
    }
    // The image is a crash image of SRC (or SRC closed): its open record,
    // if any, names SRC's owner; the copy is closed until opened.
    use ferrite_pmem::opened::{OPEN_LEN, OPEN_OFF};
    if let Some(rec) = snap.image.get_mut(OPEN_OFF..OPEN_OFF + OPEN_LEN) {
        rec.fill(0);
    }
    write_new(dest, &snap.image)?;
    let mut recovered = Vec::new();
    if !report.findings.is_empty() {
        let done = crate::deep::do_repair(dest, &report).and_then(|(done, refused)| {
            if refused.is_empty() {
                Ok(done)
            } else {
                Err(refused.join("; "))
            }
        });
        match done {
            Ok(d) => recovered = d,
            Err(why) => {
                let _ = std::fs::remove_file(dest);
                return Err(crate::at(
                    dest,
                    format!("recovery of the copy failed: {why}"),
                ));
            }
        }
    }
    let again = crate::deep::check(dest, None)?;
    if !again.findings.is_empty() {
        let f = &again.findings[0];
        let _ = std::fs::remove_file(dest);
        return Err(crate::at(
            dest,
            format!(
                "the copy is not clean after recovery ({}: {}): removed",
                f.component, f.message
            ),
        ));
    }
    println!(
        "backed up {shown} to {}: {} ({}), {}; verified clean: {}{}",
        dest.display(),
        crate::size::human(snap.image.len() as u64),
        match &snap.view {
            crate::live::View::Closed => "the pool was not open".to_string(),
            v => v.describe(),
        },
        format_args!("{:.1} ms", t0.elapsed().as_secs_f64() * 1e3),
        again.what,
        if recovered.is_empty() {
            String::new()
        } else {
            format!(" (recovered the copy: {})", recovered.join("; "))
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// Creates `path` (refusing an existing one) holding `bytes`, durably; a
/// failure leaves no file.
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let res = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        if let Some(d) = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .and_then(|d| std::fs::File::open(d).ok())
        {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    res.map_err(|e| {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            let _ = std::fs::remove_file(path);
        }
        crate::at(path, e)
    })
}
