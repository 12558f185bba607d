//! `ferrite pool check PATH --deep [--repair] [--json]`: recognise what a
//! pool holds and walk it (pmempool-check's job, and more).
//!
//! The pool file is read once into memory and never written (unless
//! `--repair`): every component's own recovery runs on in-memory copies
//! ([`ferrite_pmem::Pool::open_image`]) to learn what it would do, and each
//! component's read-only `verify` module does the walking:
//!
//! | what the pool holds                     | recognised by                                   | walked by |
//! |-----------------------------------------|-------------------------------------------------|-----------|
//! | a store (`ferrite kv`, `ferrite serve`) | layout `ferrite-kv` or magic `FRTENGN1` at the data start | `ferrite_engine::verify` (+ `ferrite_alloc::verify`) |
//! | a transactional pool (+ a structure)    | the header's root points at magic `FERRTXPL`    | `ferrite_tx::verify`, `ferrite_ds::verify` |
//! | a PTM pool (`ferrite serve --store ptm-*`) | the root points at magic `FERPTM01`          | `ferrite_ptm::verify` |
//! | a log / a page store                    | magic `FERRLOG\0` / `FERPAGE\0` at the data start | `ferrite_blocks::verify` |
//! | a heap on its own                       | magic `FERRHEAP` / `FERRLOCK` at the data start | `ferrite_alloc::verify` |
//! | then, a server pool's items             | layout `ferrite-serve-*`, or an engine store with the server's `\0fmt` record | [`crate::deep_items`] (`ferrite_server::store::verify_items`) |
//!
//! and the kernel's bad blocks under the pool file, where the platform
//! lists them ([`crate::deep_items::bad_blocks`]).
//!
//! Output: one line per finding, `PATH: COMPONENT: message`, then a
//! summary line, then indented notes (where each log's valid prefix ends).
//! Exit status 0 when there is no finding, 1 when there is one, 2 when the
//! file cannot be read or checked (one line on stderr; clap's usage errors
//! exit with 2 too).
//!
//! A pool another process has open (`ferrite serve`, `ferrite kv`) is
//! checked on a consistent image ([`crate::live`]: the owner is paused
//! while the file is read — a crash image — or, when it cannot be paused,
//! the check refuses in one line): never on bytes the owner is changing
//! under the reader, which showed false corruption. What the components'
//! recovery would do to that image (an open store is "not closed cleanly"
//! by nature) is then a note, not a finding. `--repair` refuses an open
//! pool (its owner is using it).
//!
//! `--repair` runs the component's own recovery on the file when that is
//! safe — the same recovery succeeded on the copy, and the findings are
//! ones it resolves (interrupted transactions, unapplied logs) — says what
//! it did, and checks again. It refuses, with the reason, where it is not:
//! a damaged header or superblock, corruption its recovery refuses, leaks
//! (freeing a block is only safe if nothing outside the walked roots
//! references it, which no check can prove). A server pool's damaged
//! items are removed, each by name ([`crate::deep_items::repair_items`]):
//! a cache may lose an item, never serve a wrong one.

use crate::opener::{self, Holds, Opened, recognise};
use ferrite_engine::{Store, StoreOptions};
use ferrite_pmem::{Domain, HEADER_SIZE, Header, PAGE, Pool, PoolOptions};
use std::path::Path;
use std::process::ExitCode;

/// One finding, as printed.
#[derive(Clone, Debug)]
pub struct Finding {
    /// `pool`, `engine`, `heap`, `tx`, `ds`, `ptm`, `log`, `pages`.
    pub component: &'static str,
    /// Stable short name of the kind of problem (JSON, tests).
    pub kind: &'static str,
    pub message: String,
}

/// The result of one check.
#[derive(Debug, Default)]
pub struct Report {
    /// `engine cow on the ferrite heap`, `transactional pool (undo) with a hashmap`, …
    pub what: String,
    pub findings: Vec<Finding>,
    pub notes: Vec<String>,
}

fn finding(component: &'static str, kind: &'static str, message: impl ToString) -> Finding {
    Finding {
        component,
        kind,
        message: message.to_string(),
    }
}

/// Kinds `--repair` resolves by running the component's recovery.
pub const RECOVERABLE: &[&str] = &[
    "engine-recovery",
    "tx-interrupted",
    "ptm-interrupted",
    "heap-replay",
    "log-recovery",
];

/// Checks the pool file at `path`; with `repair`, repairs what is safe and
/// checks again. Returns exit status 0 (clean) or 1 (findings).
pub fn run(
    path: &Path,
    layout: Option<&str>,
    repair: bool,
    json: bool,
) -> Result<ExitCode, String> {
    let snap = crate::live::snapshot(path)?;
    if repair && let crate::live::View::Live { pid, name, .. } = &snap.view {
        return Err(crate::at(
            path,
            format!(
                "open by pid {pid} ({name}): --repair needs the pool closed (its owner recovers it when it opens it; the check alone works on an open pool)"
            ),
        ));
    }
    let mut report = check_snapshot(&snap, layout, true);
    crate::deep_items::bad_blocks(path, &mut report);
    let mut repaired = Vec::new();
    let mut refused = Vec::new();
    if repair && !report.findings.is_empty() {
        (repaired, refused) = do_repair(path, &report)?;
        if !repaired.is_empty() {
            report = check(path, layout)?;
            // Recovery ran, yet the check finds what recovery would fix
            // (a full CoW store cannot write its clean state): say so,
            // rather than "repaired".
            let left: Vec<&Finding> = report
                .findings
                .iter()
                .filter(|f| RECOVERABLE.contains(&f.kind))
                .collect();
            if !left.is_empty() {
                repaired.retain(|r| {
                    !left
                        .iter()
                        .any(|f| r.starts_with(&format!("{}:", f.component)))
                });
                for f in left {
                    refused.push(format!(
                        "{}: its recovery ran but could not leave the pool clean: {} (a full pool cannot record its clean state: delete keys or restore a larger copy, then repair again)",
                        f.component, f.message
                    ));
                }
            }
        }
    }
    let shown = path.display().to_string();
    if json {
        let v = serde_json::json!({
            "path": shown,
            "holds": report.what,
            "clean": report.findings.is_empty(),
            "findings": report.findings.iter().map(|f| serde_json::json!({
                "component": f.component,
                "kind": f.kind,
                "message": f.message,
            })).collect::<Vec<_>>(),
            "notes": report.notes,
            "repaired": repaired,
            "refused": refused,
        });
        println!("{v}");
    } else {
        for r in &repaired {
            println!("{shown}: repaired: {r}");
        }
        for r in &refused {
            println!("{shown}: not repaired: {r}");
        }
        for f in &report.findings {
            println!("{shown}: {}: {}", f.component, f.message);
        }
        let n = report.findings.len();
        if n == 0 {
            println!("{shown}: clean ({})", report.what);
        } else {
            println!(
                "{shown}: {n} finding{} ({})",
                if n == 1 { "" } else { "s" },
                report.what
            );
        }
        for note in &report.notes {
            println!("  {note}");
        }
    }
    Ok(if report.findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// An open pool's image is a crash image: what recovery would do to it is
/// expected, and said as notes, not findings.
fn live_notes(report: &mut Report, view: &crate::live::View) {
    let (expected, real): (Vec<Finding>, Vec<Finding>) = std::mem::take(&mut report.findings)
        .into_iter()
        .partition(|f| RECOVERABLE.contains(&f.kind));
    report.findings = real;
    report.notes.insert(0, view.describe());
    for f in expected {
        report.notes.push(format!(
            "{}: {} (expected of an open pool: its recovery does this after a crash)",
            f.component, f.message
        ));
    }
}

/// Reads (consistently: [`crate::live`]) and checks the pool file. `Err`
/// only when the file cannot be read.
pub fn check(path: &Path, want_layout: Option<&str>) -> Result<Report, String> {
    let snap = crate::live::snapshot(path)?;
    Ok(check_snapshot(&snap, want_layout, true))
}

/// Checks a consistent image of a pool file: its contents, whether it is
/// a copy of a pool that was open when copied (its open record,
/// [`ferrite_pmem::opened`], names another file), and, when it is the
/// image of an open pool, what recovery would do as notes.
/// With `live_notes` false the recovery findings stay findings (a backup
/// resolves them on its copy).
pub fn check_snapshot(
    snap: &crate::live::Snapshot,
    want_layout: Option<&str>,
    live_notes_too: bool,
) -> Report {
    let mut r = check_image(&snap.image, want_layout);
    match ferrite_pmem::opened::OpenRecord::decode(&snap.image) {
        Some(rec) if !rec.is_for(snap.dev, snap.ino) => r.findings.insert(
            0,
            finding(
                "pool",
                "pool-copied-open",
                format!(
                    "a copy of a pool that was open (by pid {}) when copied: it may be torn (pages copied at different instants), so what follows is no crash image's; use a `ferrite pool backup` copy",
                    rec.pid
                ),
            ),
        ),
        Some(rec) if matches!(snap.view, crate::live::View::Closed) => r.notes.insert(
            0,
            format!(
                "left open by pid {} (never closed: a crash image, which its recovery resolves)",
                rec.pid
            ),
        ),
        _ => {}
    }
    if live_notes_too && let crate::live::View::Live { .. } = &snap.view {
        live_notes(&mut r, &snap.view);
    }
    r
}

/// Checks a pool image (the bytes of a pool file).
pub fn check_image(image: &[u8], want_layout: Option<&str>) -> Report {
    let mut r = Report::default();
    let header = match Header::decode(image, image.len() as u64) {
        Ok(h) => h,
        Err(e) => {
            r.what = "not a readable pool".into();
            r.findings.push(finding("pool", "pool-header", e));
            return r;
        }
    };
    if let Some(l) = want_layout.filter(|l| *l != header.layout) {
        r.findings.push(finding(
            "pool",
            "pool-layout",
            format!("layout is '{}', expected '{l}'", header.layout),
        ));
    }
    let len = pool_len(&header, image.len());
    if !header.growable() && image.len() as u64 > header.size {
        r.notes.push(format!(
            "the file is {} bytes, {} more than the pool's recorded size",
            image.len(),
            image.len() as u64 - header.size
        ));
    }
    let image = &image[..len as usize];
    let root = u64::from_le_bytes(
        image[ferrite_pmem::header::ROOT_OFF..ferrite_pmem::header::ROOT_OFF + 8]
            .try_into()
            .expect("8 bytes"),
    );
    if root != 0 && (root < HEADER_SIZE as u64 || root >= len) {
        r.findings.push(finding(
            "pool",
            "pool-root",
            format!("root offset {root:#x} points outside the data area"),
        ));
    }
    let holds = recognise(image, &header.layout);
    match holds {
        Holds::Engine => engine(image, &header, &mut r),
        Holds::Tx => tx(image, &header, &mut r),
        Holds::Ptm => ptm(image, &header, &mut r),
        Holds::Blocks => blocks(image, &header, &mut r),
        Holds::Heap => heap(image, &header, &mut r),
        Holds::Unknown => {
            r.what = format!(
                "layout '{}': contents not recognised, only the header was checked",
                header.layout
            );
        }
    }
    crate::deep_items::server_items(image, &header, &mut r);
    r
}

/// Bytes of a pool file that are the pool: its recorded size, or for a
/// growable pool as far as the file has grown (whole pages, at most its
/// maximum).
fn pool_len(header: &Header, file_len: usize) -> u64 {
    if header.growable() {
        (file_len as u64).min(header.max_size) / PAGE as u64 * PAGE as u64
    } else {
        header.size
    }
}

/// An in-memory copy of the pool, for a component's recovery to run on.
fn copy(image: &[u8], header: &Header) -> Result<Pool, Finding> {
    Pool::open_image(
        image,
        &PoolOptions::new(&header.layout, 0),
        Domain::Volatile,
        None,
    )
    .map_err(|e| finding("pool", "pool-header", e))
}

fn engine(image: &[u8], header: &Header, r: &mut Report) {
    let c = ferrite_engine::verify::verify_image(image, &header.layout);
    r.what = match &c.superblock {
        Some(sb) => format!(
            "{} engine on the {} allocator: {} keys, {} blocks reachable, {} allocated",
            sb.engine, sb.allocator, c.keys, c.blocks, c.allocated
        ),
        None => "a store whose superblock does not decode".into(),
    };
    if !c.recovery.is_empty() {
        r.notes
            .push(format!("engine recovery on a copy: {}", c.recovery));
    }
    r.findings.extend(
        c.findings
            .iter()
            .map(|f| finding(f.component(), f.kind(), f)),
    );
}

fn tx(image: &[u8], header: &Header, r: &mut Report) {
    let pool = match copy(image, header) {
        Ok(p) => p,
        Err(f) => {
            r.findings.push(f);
            return;
        }
    };
    let c = ferrite_ds::verify::verify_pool(&pool);
    let strategy = c.tx.strategy.map_or("?", |s| s.name());
    r.what = match c.structure {
        Some(s) => format!(
            "transactional pool ({strategy}) holding a {s}: {} keys, {} blocks reachable, {} allocated",
            c.keys, c.blocks, c.allocated
        ),
        None if c.root == 0 => format!(
            "transactional pool ({strategy}), no root structure: {} blocks allocated",
            c.allocated
        ),
        None => format!(
            "transactional pool ({strategy}); root {:#x} holds no structure this build knows: reachability not checked",
            c.root
        ),
    };
    r.findings.extend(
        c.tx.findings
            .iter()
            .map(|f| finding(f.component(), f.kind(), f)),
    );
    r.findings.extend(
        c.findings
            .iter()
            .map(|f| finding(f.component(), f.kind(), f)),
    );
    for l in &c.tx.logs {
        // After a finished transaction's records the area holds what
        // older, longer transactions left: expected. After an
        // interrupted one's, invalid bytes are its torn last record.
        let stop = match l.stop {
            ferrite_tx::verify::PrefixEnd::Clean => "",
            _ if !l.interrupted => " (older bytes follow)",
            ferrite_tx::verify::PrefixEnd::Stale => " (older records follow)",
            ferrite_tx::verify::PrefixEnd::Invalid => " (a torn or corrupt record follows)",
        };
        r.notes.push(format!(
            "tx slot {} area {}: {} record{} of epoch {}{}, valid prefix ends at byte {:#x}{stop}",
            l.slot,
            l.area,
            l.records,
            if l.records == 1 { "" } else { "s" },
            l.epoch.unwrap_or(0),
            if l.interrupted { " (interrupted)" } else { "" },
            l.end
        ));
    }
    if let Some(rec) = &c.tx.recovery {
        r.notes.push(format!(
            "tx recovery on a copy: {}",
            ferrite_tx::verify::describe(rec)
        ));
    }
}

fn ptm(image: &[u8], header: &Header, r: &mut Report) {
    let pool = match copy(image, header) {
        Ok(p) => p,
        Err(f) => {
            r.findings.push(f);
            return;
        }
    };
    let c = ferrite_ptm::verify::verify(&pool);
    r.what = match &c.superblock {
        Some(sb) => format!(
            "PTM pool ({} slots, {} blocks allocated; reachability from its root is the application's and not checked)",
            sb.slots, c.allocated
        ),
        None => "a PTM pool whose superblock does not decode".into(),
    };
    r.findings.extend(
        c.findings
            .iter()
            .map(|f| finding(f.component(), f.kind(), f)),
    );
    if let Some(rec) = &c.recovery {
        r.notes.push(format!(
            "ptm recovery on a copy: {}",
            ferrite_ptm::verify::describe(rec)
        ));
    }
}

fn blocks(image: &[u8], header: &Header, r: &mut Report) {
    let pool = match copy(image, header) {
        Ok(p) => p,
        Err(f) => {
            r.findings.push(f);
            return;
        }
    };
    let c = ferrite_blocks::verify::verify(&pool.data());
    r.what = c.what.clone();
    r.notes.extend(c.notes.iter().cloned());
    r.findings.extend(
        c.findings
            .iter()
            .map(|f| finding(f.component(), f.kind(), f)),
    );
}

fn heap(image: &[u8], header: &Header, r: &mut Report) {
    let pool = match copy(image, header) {
        Ok(p) => p,
        Err(f) => {
            r.findings.push(f);
            return;
        }
    };
    let c = ferrite_alloc::verify::verify_region(&pool.data());
    r.what = format!(
        "a {} heap on its own: {} blocks allocated ({} bytes), root object {:#x}; what references them is its user's, so leaks are not checked",
        c.allocator.unwrap_or("?"),
        c.blocks,
        c.bytes,
        c.root
    );
    r.findings
        .extend(c.findings.iter().map(|f| finding("heap", f.kind(), f)));
}

/// A store with damaged records: its recovery runs (opening it), then the
/// damaged records that can be removed alone are unlinked and their
/// blocks freed, in one durable write; each is named. Damaged index
/// nodes cannot be removed alone (the keys below them are unreadable):
/// refused, with the keys they held. Refused whole when the pool also
/// holds damage the engine does not list per record (a header, the
/// heap), which a write could make worse.
fn repair_damaged(path: &Path, report: &Report) -> Result<(Vec<String>, Vec<String>), String> {
    let other: Vec<&Finding> = report
        .findings
        .iter()
        .filter(|f| {
            f.kind != "engine-damaged" && !RECOVERABLE.contains(&f.kind) && f.kind != "leak"
        })
        .collect();
    if let Some(f) = other.first() {
        return Ok((
            Vec::new(),
            vec![format!(
                "{}: {} (the damaged records are not removed while the pool also holds this: restore the pool from a backup)",
                f.component, f.message
            )],
        ));
    }
    let e = |x: &dyn std::fmt::Display| crate::at(path, format!("repair: {x}"));
    let store = Store::open_file(path, &StoreOptions::default()).map_err(|x| e(&x))?;
    let mut done = Vec::new();
    let rec = store.recovery().clone();
    if report.findings.iter().any(|f| f.kind == "engine-recovery") {
        done.push(format!("engine: recovery ran: {}", rec.detail));
    }
    let s = store.scrub(&mut |_| {}).map_err(|x| e(&x))?;
    let removed = store.remove_damaged(&s.damaged).map_err(|x| e(&x))?;
    let mut refused = Vec::new();
    let left = s.damaged.len() - removed.len();
    done.extend(removed.into_iter().map(|r| format!("engine: {r}")));
    if left > 0 {
        refused.push(format!(
            "engine: {left} damaged node{} or record{} cannot be removed alone (the keys below a node are unreadable; listed below): restore the pool from a backup",
            if left == 1 { "" } else { "s" },
            if left == 1 { "" } else { "s" },
        ));
    }
    store.close().map_err(|x| e(&x))?;
    Ok((done, refused))
}

/// Runs the component's recovery on the file where that is safe.
/// Returns what was done and what was refused (with reasons).
pub fn do_repair(path: &Path, report: &Report) -> Result<(Vec<String>, Vec<String>), String> {
    if report.findings.iter().any(|f| f.kind == "engine-damaged") {
        return repair_damaged(path, report);
    }
    if report
        .findings
        .iter()
        .any(|f| f.kind == crate::deep_items::ITEM_DAMAGED)
    {
        return crate::deep_items::repair_items(path, report);
    }
    let mut refused = Vec::new();
    let blocking: Vec<&Finding> = report
        .findings
        .iter()
        .filter(|f| !RECOVERABLE.contains(&f.kind))
        .collect();
    let leaks = blocking.iter().filter(|f| f.kind == "leak").count();
    if leaks > 0 {
        refused.push(format!(
            "heap: {leaks} leaked block{} left allocated: freeing one is safe only if nothing outside the walked roots references it, which no check can prove",
            if leaks == 1 { "" } else { "s" }
        ));
    }
    let corrupt: Vec<&&Finding> = blocking.iter().filter(|f| f.kind != "leak").collect();
    if let Some(f) = corrupt.first() {
        refused.push(format!(
            "{}: {} (recovery cannot fix this: restore the pool from a backup)",
            f.component, f.message
        ));
    }
    let recoverable = report
        .findings
        .iter()
        .any(|f| RECOVERABLE.contains(&f.kind));
    if !recoverable {
        return Ok((Vec::new(), refused));
    }
    if !corrupt.is_empty() {
        refused.push(
            "recovery not run: the pool also holds corruption, and recovery would write over evidence of it"
                .into(),
        );
        return Ok((Vec::new(), refused));
    }
    let image = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let header = Header::decode(&image, image.len() as u64).map_err(|e| e.to_string())?;
    let holds = recognise(
        &image[..pool_len(&header, image.len()) as usize],
        &header.layout,
    );
    drop(image);
    let e = |x: &dyn std::fmt::Display| crate::at(path, format!("repair: {x}"));
    let mut done = Vec::new();
    match holds {
        Holds::Engine | Holds::Tx | Holds::Ptm => {
            // Opening the store runs its recovery.
            let (pool, opened) =
                opener::open(path, holds, &StoreOptions::default()).map_err(|x| e(&x))?;
            done.extend(recovered(&opened));
            opened.close().map_err(|x| e(&x))?;
            pool.close().map_err(|x| e(&x))?;
        }
        Holds::Blocks => {
            let pool = Pool::open(path, &PoolOptions::new(&header.layout, 0)).map_err(|x| e(&x))?;
            let what = ferrite_blocks::verify::recover(&pool.data()).map_err(|x| e(&x))?;
            done.push(what);
            pool.close().map_err(|x| e(&x))?;
        }
        Holds::Heap => {
            let pool = Pool::open(path, &PoolOptions::new(&header.layout, 0)).map_err(|x| e(&x))?;
            let region = pool.data();
            let rec = match ferrite_alloc::verify::recognise(&region.read_vec(0, 8)) {
                Some("ferrite") => ferrite_alloc::Heap::open(region)
                    .map(|h| h.recovery().clone())
                    .map_err(|x| e(&x))?,
                _ => ferrite_alloc::LockHeap::open(region)
                    .map(|h| ferrite_alloc::PAllocator::recovery(&h).clone())
                    .map_err(|x| e(&x))?,
            };
            done.push(format!(
                "heap: {}",
                ferrite_alloc::verify::counted(&[(rec.replayed, "replayed", "lane record")])
            ));
            pool.close().map_err(|x| e(&x))?;
        }
        Holds::Unknown => {}
    }
    Ok((done, refused))
}

/// What the recovery of a store just opened did, one line per component.
fn recovered(opened: &Opened) -> Vec<String> {
    match opened {
        Opened::Engine(store) => {
            let rec = store.recovery();
            let mut done = vec![format!("engine: recovery ran: {}", rec.detail)];
            if rec.alloc.replayed > 0 {
                done.push(format!(
                    "heap: replayed {} lane record{}",
                    rec.alloc.replayed,
                    if rec.alloc.replayed == 1 { "" } else { "s" }
                ));
            }
            done
        }
        Opened::Tx(txp) => vec![format!(
            "tx: {}",
            ferrite_tx::verify::describe(txp.recovery())
        )],
        Opened::Ptm(p) => vec![format!(
            "ptm: {}",
            ferrite_ptm::verify::describe(p.recovery())
        )],
    }
}
