//! Recovery: the page map rebuilt from slot headers and micro-log entries
//! (the steps are listed in the module documentation of [`super`]).

use super::core::Core;
use super::format::{Entry, NO_SLOT};
use super::{Fault, PageError};
use ferrite_pmem::CACHE_LINE;
use std::collections::BTreeMap;

/// What recovery found and did.
#[derive(Debug)]
pub(crate) struct Recovered {
    /// Per page: its live slot (or [`NO_SLOT`]) and its version (0 if never written).
    pub map: Vec<(u32, u64)>,
    /// Micro-log entries replayed.
    pub replayed: usize,
    /// Lanes and free slot headers zeroed.
    pub scrubbed: usize,
    /// The largest version any valid header or entry carried.
    pub max_pvn: u64,
}

fn corrupt(msg: String) -> PageError {
    PageError::Corrupt(msg)
}

pub(crate) fn recover(core: &Core) -> Result<Recovered, PageError> {
    let geo = &core.geo;
    // 1. Slot headers: the newest valid version of every page.
    let mut best = vec![(NO_SLOT, 0u64); geo.pages as usize];
    let mut named: Vec<Option<u32>> = vec![None; geo.slots as usize];
    let mut max_pvn = 0;
    for slot in 0..geo.slots {
        let Some((pid, pvn)) = core.header(slot) else {
            continue;
        };
        named[slot as usize] = Some(pid);
        max_pvn = max_pvn.max(pvn);
        let b = &mut best[pid as usize];
        if core.faulty(Fault::RecoveryFirstValid) {
            if b.0 == NO_SLOT {
                *b = (slot, pvn);
            }
            continue;
        }
        if b.0 == NO_SLOT || pvn > b.1 {
            *b = (slot, pvn);
        } else if pvn == b.1 {
            // A version is handed out once per run and recovery scrubs what
            // a crashed attempt left, so two copies mean damage or a bug.
            return Err(corrupt(format!(
                "slots {} and {slot} both hold version {pvn} of page {pid}",
                b.0
            )));
        }
    }

    // 2. Micro-log entries: the newest valid one of every page. Older ones
    //    belong to writes that returned before it started.
    let mut newest: BTreeMap<u32, Entry> = BTreeMap::new();
    for lane in 0..geo.lanes {
        let Some(e) = core.entry(lane) else {
            continue;
        };
        max_pvn = max_pvn.max(e.pvn);
        match newest.get(&e.pid) {
            Some(o) if o.pvn > e.pvn => {}
            Some(o) if o.pvn == e.pvn && *o != e => {
                return Err(corrupt(format!(
                    "two different micro-log entries for version {} of page {}",
                    e.pvn, e.pid
                )));
            }
            _ => {
                newest.insert(e.pid, e);
            }
        }
    }

    // 3. Replay every entry not older than its page's newest header: its
    //    write may have stopped anywhere in the in-place step (lines and
    //    header under one fence), and replaying a complete one rewrites
    //    identical bytes.
    let mut replayed = 0;
    if !core.faulty(Fault::RecoveryNoReplay) {
        for (pid, e) in &newest {
            let (slot, pvn) = best[*pid as usize];
            if slot != NO_SLOT && pvn > e.pvn {
                continue;
            }
            if slot != NO_SLOT && pvn == e.pvn && slot != e.slot {
                return Err(corrupt(format!(
                    "version {pvn} of page {pid} is in slot {slot}, its micro-log entry names slot {}",
                    e.slot
                )));
            }
            if let Some(other) = named[e.slot as usize]
                && other != *pid
                && best[other as usize].0 == e.slot
            {
                return Err(corrupt(format!(
                    "micro-log entry of page {pid} targets slot {}, which holds page {other}",
                    e.slot
                )));
            }
            replay(core, *pid, e);
            best[*pid as usize] = (e.slot, e.pvn);
            named[e.slot as usize] = Some(*pid);
            replayed += 1;
        }
        if replayed > 0 {
            // The replays must be durable before the entries are scrubbed.
            core.region.fence();
        }
    }

    // 4. Scrub: zero every lane's entry and every header of a slot that is
    //    not live. Afterwards nothing a crashed write left behind can be
    //    completed by a later write that reuses its version number.
    let mut scrubbed = 0;
    if !core.faulty(Fault::RecoveryNoScrub) {
        let mut live = vec![false; geo.slots as usize];
        for &(slot, _) in &best {
            if slot != NO_SLOT {
                live[slot as usize] = true;
            }
        }
        let r = &core.region;
        let mut line = [0u8; CACHE_LINE];
        for lane in 0..geo.lanes {
            let off = geo.lane_off(lane);
            r.read(off, &mut line);
            if line.iter().any(|&b| b != 0) {
                r.write(off, &[0u8; CACHE_LINE]);
                r.flush(off, CACHE_LINE);
                scrubbed += 1;
            }
        }
        for slot in (0..geo.slots).filter(|&s| !live[s as usize]) {
            let h = geo.header_off(slot);
            if r.load_u64(h) != 0 || r.load_u64(h + 8) != 0 {
                r.store_u64(h, 0);
                r.store_u64(h + 8, 0);
                r.flush(h, 16);
                scrubbed += 1;
            }
        }
        if scrubbed > 0 {
            r.fence();
        }
    }
    Ok(Recovered {
        map: best,
        replayed,
        scrubbed,
        max_pvn,
    })
}

/// Writes entry `e`'s lines into its slot (one copy per run of consecutive
/// lines) and its header naming `(pid, e.pvn)`; no fence.
fn replay(core: &Core, pid: u32, e: &Entry) {
    let page = core.geo.page_off(e.slot);
    let mut i = 0;
    while i < e.lines.len() {
        let mut j = i + 1;
        while j < e.lines.len() && e.lines[j] == e.lines[j - 1] + 1 {
            j += 1;
        }
        let off = page + e.lines[i] as usize * CACHE_LINE;
        core.region
            .write_nt(off, &e.data[i * CACHE_LINE..j * CACHE_LINE]);
        i = j;
    }
    core.put_header(e.slot, pid, e.pvn);
}
