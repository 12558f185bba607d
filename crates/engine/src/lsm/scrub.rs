//! The LSM's scrub ([`crate::Engine::scrub`]): every data block of every
//! run of the current version is read from the media and checked against
//! the checksum its run's index records (the index, bloom filter and
//! header were checked when the run was loaded). Each damaged block is
//! one [`Damage`] whose span is the keys the index says it holds — from
//! its first key up to the next block's first key (the run's last block:
//! unbounded) — every one of them unreadable; the walk goes on past it.
//! The memtable lives in DRAM and its log was checked record by record at
//! open, so the scrub has nothing more to read there.

use super::Run;
use super::format::{self, RUN_HEADER, crc, parse_run_record};
use crate::error::show_key;
use crate::{Damage, Result, Scrub};
use ferrite_pmem::Region;
use std::sync::Arc;

/// Scrubs the data blocks of `runs`; `pace` is called with the bytes read
/// so far after each block.
pub(super) fn runs(pool: &Region, runs: &[Arc<Run>], pace: &mut dyn FnMut(u64)) -> Result<Scrub> {
    let mut out = Scrub {
        per_record: true,
        ..Scrub::default()
    };
    let mut buf = Vec::new();
    for run in runs {
        let meta = &run.meta;
        for (i, b) in meta.blocks.iter().enumerate() {
            let at = run.off + RUN_HEADER as u64 + b.off;
            format::read_checked(pool, at, u64::from(b.len), &mut buf)?;
            out.bytes += u64::from(b.len);
            if crc(meta.nonce, &[&buf]) == b.crc {
                out.records += records(&buf);
            } else {
                let next = meta.blocks.get(i + 1).map(|n| n.first.to_vec());
                out.damaged.push(Damage {
                    key: None,
                    off: at,
                    detail: format!(
                        "lsm: run at {:#x}: data block at {at:#x} fails its checksum: its keys from {} {} cannot be read",
                        run.off,
                        show_key(&b.first),
                        next.as_deref()
                            .map_or("to the run's end".to_string(), |n| format!("up to {}", show_key(n)))
                    ),
                    leaf: 0,
                    slot: 0,
                    span: Some((Some(b.first.to_vec()), next)),
                });
            }
            pace(out.bytes);
        }
    }
    Ok(out)
}

/// The records of a verified block (one that does not parse counts what
/// parsed: it verified, so that cannot happen short of a format bug).
fn records(block: &[u8]) -> u64 {
    let (mut n, mut p) = (0, 0);
    while p < block.len() {
        match parse_run_record(block, p) {
            Ok((_, _, next)) => {
                n += 1;
                p = next;
            }
            Err(_) => break,
        }
    }
    n
}
