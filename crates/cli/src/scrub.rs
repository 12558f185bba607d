//! `ferrite pool scrub PATH [--rate MB/s]`: read every record and index
//! node of a store and verify its checksum, at a bounded rate, listing
//! every damaged key (or, where no key can be trusted, the damaged block
//! and the keys it held).
//!
//! The scrub works on a consistent image of the pool file, taken as `pool
//! check --deep` takes it ([`crate::live`]): a pool nobody has open is
//! read under a shared lock; a pool `ferrite serve` (or any process) has
//! open is read while its owner is paused — only for as long as the copy
//! takes (about 0.5 s per GiB) — and the rate bound then applies to the
//! verification of the copy, not to the owner. So on a live store the
//! scrub reports damage present when the image was taken; damage after
//! that waits for the next scrub (the server's own reads still catch it:
//! every read verifies what it returns). The engine's recovery runs on the
//! in-memory copy; the file is never written.
//!
//! InP lists each damaged record and node, going on past it; CoW and LSM
//! report through their walk, which stops at the first damage (one line
//! naming the block). Exit 0 when clean, 1 with damage, 2 on errors.

use ferrite_engine::{Store, StoreOptions};
use ferrite_pmem::{Domain, Pool, PoolOptions};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Scrubs the store in the pool file at `path`, reading at most `rate`
/// MB/s (10^6 bytes per second; `None`: unbounded).
pub fn run(path: &Path, rate: Option<f64>) -> Result<ExitCode, String> {
    let shown = path.display().to_string();
    let snap = crate::live::snapshot(path)?;
    let header = ferrite_pmem::Header::decode(&snap.image, snap.image.len() as u64)
        .map_err(|e| crate::at(path, e))?;
    if !ferrite_engine::verify::recognise(&snap.image, &header.layout) {
        return Err(crate::at(
            path,
            format!(
                "holds no store (layout '{}'): scrub reads stores; `ferrite pool check --deep` checks other pools",
                header.layout
            ),
        ));
    }
    let pool = Pool::open_image(
        &snap.image,
        &PoolOptions::new(&header.layout, 0),
        Domain::Volatile,
        None,
    )
    .map_err(|e| crate::at(path, e))?;
    drop(snap.image);
    let store = Store::open(&pool, &StoreOptions::default())
        .map_err(|e| crate::at(path, format!("does not open: {e}")))?;
    let start = Instant::now();
    let bytes_per_sec = rate.map(|r| r * 1e6);
    let mut pace = |done: u64| {
        if let Some(bps) = bytes_per_sec {
            // Sleep until the bytes read so far fit the rate.
            let due = Duration::from_secs_f64(done as f64 / bps);
            let spent = start.elapsed();
            if due > spent {
                std::thread::sleep(due - spent);
            }
        }
    };
    let s = store
        .scrub(&mut pace)
        .map_err(|e| crate::at(path, format!("scrub: {e}")))?;
    let secs = start.elapsed().as_secs_f64();
    if let crate::live::View::Live { .. } = &snap.view {
        println!("  {}", snap.view.describe());
    }
    for d in &s.damaged {
        println!("{shown}: engine: damaged record: {d}");
    }
    let mb = s.bytes as f64 / 1e6;
    println!(
        "{shown}: scrubbed {} record{} ({mb:.1} MB) in {secs:.2} s ({:.1} MB/s): {}",
        s.records,
        if s.records == 1 { "" } else { "s" },
        if secs > 0.0 { mb / secs } else { 0.0 },
        match s.damaged.len() {
            0 => "clean".to_string(),
            n if s.per_record => format!("{n} damaged"),
            _ => "damaged (this engine stops at the first damage: `ferrite pool check --deep` for more)"
                .to_string(),
        }
    );
    Ok(if s.damaged.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
