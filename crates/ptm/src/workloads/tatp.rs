//! P3's TATP: `UPDATE_LOCATION` only — a uniform random subscriber looked up
//! in a hash map of 10 × population buckets, then one 8-byte store of the
//! new location (reading notes B5).
//!
//! ## Persistent layout
//! Workload root block, 24 bytes:
//! ```text
//! +0  magic = TATP_MAGIC ("WLTATP\0\0")
//! +8  N, the population (subscribers 1..=N)
//! +16 offset of the hash map header (s_id → subscriber row)
//! ```
//! Subscriber row block, 32 bytes (the TATP SUBSCRIBER columns this
//! transaction uses):
//! ```text
//! +0  s_id
//! +8  vlr_location (u32 in a word)
//! +16 msc_location (u32 in a word)
//! +24 bits (bit_1..bit_10 of TATP, loaded random)
//! ```

use super::{
    PtmWorkload, Rng, Scale, WorkloadKind, ptm_err, require_empty_root, root_block, root_of,
};
use crate::ds::check_result;
use crate::ds::hash::PHashMap;
use crate::{Abort, Ptm, PtmError, PtmThread, Tx, TxResult};
use ferrite_workload::tatp::{TatpConfig, TatpTxn};
use rand::{Rng as _, SeedableRng};

/// "WLTATP\0\0".
pub const TATP_MAGIC: u64 = u64::from_le_bytes(*b"WLTATP\0\0");
/// Buckets per subscriber (P3: 10 × population).
pub const BUCKETS_PER_SUBSCRIBER: u64 = 10;
const ROW_BYTES: usize = 32;

/// P3's TATP (module docs).
pub struct Tatp {
    cfg: TatpConfig,
    seed: u64,
}

impl Tatp {
    /// The workload at `scale` (the subscribers), its random choices from `seed`.
    pub fn new(scale: Scale, seed: u64) -> Tatp {
        let n = match scale {
            Scale::Tiny => 32,
            Scale::Quick => 10_000,
            Scale::Full => ferrite_workload::tatp::P3_SUBSCRIBERS,
        };
        Tatp {
            cfg: TatpConfig::p3().with_subscribers(n),
            seed,
        }
    }

    fn open(tx: &mut Tx<'_>, root: u64) -> TxResult<(u64, PHashMap)> {
        let block = root_block(tx, root, TATP_MAGIC)?;
        let n = tx.load(block + 8)?;
        let hdr = tx.load(block + 16)?;
        let map = PHashMap::open(tx, hdr)?;
        Ok((n, map))
    }
}

impl PtmWorkload for Tatp {
    fn kind(&self) -> WorkloadKind {
        WorkloadKind::Tatp
    }

    fn load(&self, ptm: &Ptm) -> Result<(), PtmError> {
        let root = ptm.root().raw();
        let mut th = ptm.thread()?;
        require_empty_root(&mut th, root)?;
        let n = self.cfg.subscribers;
        let map = PHashMap::create(&mut th, BUCKETS_PER_SUBSCRIBER * n)?;
        let mut rng = Rng::seed_from_u64(self.seed);
        let mut s = 1;
        while s <= n {
            let end = (s + 63).min(n);
            // Draw outside the body: it may run more than once.
            let rows: Vec<(u64, u64, u64)> = (s..=end)
                .map(|_| {
                    (
                        u64::from(rng.random::<u32>()),
                        u64::from(rng.random::<u32>()),
                        rng.random_range(0..1024u64),
                    )
                })
                .collect();
            th.atomic(|tx| {
                for (i, &(vlr, msc, bits)) in rows.iter().enumerate() {
                    let s_id = s + i as u64;
                    let row = tx.alloc(ROW_BYTES)?.raw();
                    tx.store(row, s_id)?;
                    tx.store(row + 8, vlr)?;
                    tx.store(row + 16, msc)?;
                    tx.store(row + 24, bits)?;
                    map.insert(tx, s_id, row)?;
                }
                Ok(())
            })?;
            s = end + 1;
        }
        th.atomic(|tx| {
            let block = tx.alloc(24)?.raw();
            tx.store(block, TATP_MAGIC)?;
            tx.store(block + 8, n)?;
            tx.store(block + 16, map.header())?;
            tx.store(root, block)
        })
    }

    fn run_one(
        &self,
        th: &mut PtmThread<'_>,
        _thread: usize,
        _threads: usize,
        rng: &mut Rng,
    ) -> Result<(), PtmError> {
        let TatpTxn::UpdateLocation { s_id, vlr_location } = self.cfg.draw(rng) else {
            unreachable!("P3's TATP mix draws UPDATE_LOCATION only")
        };
        let root = root_of(th);
        th.atomic(|tx| {
            let (_, map) = Self::open(tx, root)?;
            let Some(row) = map.get(tx, s_id)? else {
                return Err(Abort::User(crate::ds::CORRUPT));
            };
            tx.store(row + 8, u64::from(vlr_location))
        })
    }

    fn check(&self, ptm: &Ptm) -> Result<(), String> {
        let root = ptm.root().raw();
        let mut th = ptm.thread().map_err(ptm_err)?;
        let (n, map) = check_result(th.atomic(|tx| Ok(Ok(Self::open(tx, root)?))))?;
        if n != self.cfg.subscribers {
            return Err(format!("population {n}, expected {}", self.cfg.subscribers));
        }
        let entries = map.check(&mut th)?;
        if entries != n {
            return Err(format!("{entries} entries for {n} subscribers"));
        }
        let mut s = 1;
        while s <= n {
            let end = (s + 1023).min(n);
            check_result(th.atomic(|tx| {
                for s_id in s..=end {
                    let Some(row) = map.get(tx, s_id)? else {
                        return Ok(Err(format!("subscriber {s_id} missing")));
                    };
                    if tx.load(row)? != s_id {
                        return Ok(Err(format!("row of subscriber {s_id} names another")));
                    }
                    if tx.load(row + 8)? > u64::from(u32::MAX) {
                        return Ok(Err(format!("subscriber {s_id}: location beyond 32 bits")));
                    }
                }
                Ok(Ok(()))
            }))?;
            s = end + 1;
        }
        Ok(())
    }
}
