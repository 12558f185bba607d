//! The shard threads: each owns one store session, runs the requests
//! queued at once as one group commit, applies the read fast path's
//! hints to its eviction view, and takes the start-up scan's seeds.

use super::{execute, fnv1a, now_unix};
use crate::protocol::Request;
use crate::store::{Cache, Group, Kv, Shared};
use parking_lot::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use tokio::sync::oneshot;

/// A request for a shard, and where its encoded reply goes.
pub(super) struct Job {
    pub(super) req: Request,
    pub(super) reply: oneshot::Sender<Vec<u8>>,
}

/// What a shard thread receives.
pub(super) enum Msg {
    Job(Job),
    /// Keys (map keys, value lengths) the start-up scan found.
    Seed(Vec<(Vec<u8>, usize)>),
    /// The scan is over.
    Seeded,
}

/// Keys per [`Msg::Seed`].
const SEED_BATCH: usize = 4096;

/// Most read fast path hits queued for one shard; beyond it gets go to the
/// shard (module docs).
pub(crate) const HINTS_MAX: usize = 4096;

/// Fetches on the read fast path that a shard has not applied to its
/// eviction view yet: map keys laid end to end (no allocation per hit),
/// each with its end and charge.
#[derive(Default)]
pub(super) struct HintQueue {
    keys: Vec<u8>,
    /// (end of the key in `keys`, charge).
    ends: Vec<(usize, u64)>,
}

impl HintQueue {
    /// Queue a hit; false when the queue is full ([`HINTS_MAX`]).
    pub(super) fn push(&mut self, map_key: &[u8], charge: u64) -> bool {
        if self.ends.len() >= HINTS_MAX {
            return false;
        }
        self.keys.extend_from_slice(map_key);
        self.ends.push((self.keys.len(), charge));
        true
    }

    /// Every queued hit, oldest first.
    fn iter(&self) -> impl Iterator<Item = (&[u8], u64)> {
        let mut start = 0;
        self.ends.iter().map(move |&(end, charge)| {
            let k = &self.keys[start..end];
            start = end;
            (k, charge)
        })
    }

    fn clear(&mut self) {
        self.keys.clear();
        self.ends.clear();
    }
}

pub(super) type Hints = Mutex<HintQueue>;
/// A shard thread: take the next request and, if more are queued, up to
/// `group` of them; run them against one [`Group`] so their writes commit
/// in one durable batch; only then send their replies. If the batch fails
/// (nothing was applied: it is atomic), run them again one at a time.
pub(super) fn shard_loop<K: Kv>(
    cache: &mut Cache<'_, Group<K>>,
    shared: &Shared,
    hints: &Hints,
    rx: &mpsc::Receiver<Msg>,
    group: usize,
) {
    let mut taken = HintQueue::default();
    let mut jobs: Vec<Job> = Vec::with_capacity(group);
    let mut outs: Vec<Vec<u8>> = Vec::with_capacity(group);
    // Seeds are applied between requests, never inside a group.
    let seed = |cache: &mut Cache<'_, Group<K>>, m: Msg| match m {
        Msg::Seed(keys) => {
            for (k, l) in keys {
                cache.seed(&k, l);
            }
            cache.publish();
            None
        }
        Msg::Seeded => {
            cache.seeded();
            shared.seeded_one();
            None
        }
        Msg::Job(j) => Some(j),
    };
    while let Ok(first) = rx.recv() {
        // Fetches answered on the read fast path since the last request
        // count for eviction and meta `h` before anything this shard runs
        // next (module docs).
        std::mem::swap(&mut *hints.lock(), &mut taken);
        if !taken.ends.is_empty() {
            for (k, ch) in taken.iter() {
                cache.remote_hit(k, ch);
            }
            taken.clear();
            cache.settle(true);
        }
        let Some(first) = seed(cache, first) else {
            continue;
        };
        jobs.clear();
        jobs.push(first);
        while jobs.len() < group {
            match rx.try_recv() {
                Ok(m) => {
                    if let Some(j) = seed(cache, m) {
                        jobs.push(j);
                    }
                }
                Err(_) => break,
            }
        }
        let now = now_unix();
        if jobs.len() == 1 {
            let job = jobs.pop().expect("one job");
            let mut out = Vec::new();
            execute(cache, shared, &job.req, now, &mut out);
            cache.settle(true);
            let _ = job.reply.send(out);
            continue;
        }
        outs.clear();
        cache.kv().begin();
        for job in &jobs {
            let mut out = Vec::new();
            execute(cache, shared, &job.req, now, &mut out);
            outs.push(out);
        }
        let committed = cache.kv().commit().is_ok();
        cache.settle(committed);
        if committed {
            let st = &shared.stats;
            st.group_commits.fetch_add(1, Relaxed);
            st.grouped_requests.fetch_add(jobs.len() as u64, Relaxed);
            for (job, out) in jobs.drain(..).zip(outs.drain(..)) {
                let _ = job.reply.send(out);
            }
        } else {
            for job in jobs.drain(..) {
                let mut out = Vec::new();
                execute(cache, shared, &job.req, now, &mut out);
                cache.settle(true);
                let _ = job.reply.send(out);
            }
        }
    }
}
/// The start-up scan: send every item's key and size to the shard that
/// owns it, then tell every shard the scan is over. A shard ignores a seed
/// for a key it has itself written or deleted since start (its own view is
/// newer), so the scan may run while the shards serve.
pub(super) fn seed_shards<K: Kv>(kv: &mut K, shards: &[mpsc::Sender<Msg>], shared: &Shared) {
    let n = shards.len() as u64;
    let mut batches: Vec<Vec<(Vec<u8>, usize)>> = vec![Vec::new(); shards.len()];
    let r = kv.scan_prefix(b"k", &mut |k, v| {
        let s = (fnv1a(&k[1..]) % n) as usize;
        batches[s].push((k.to_vec(), v.len()));
        if batches[s].len() >= SEED_BATCH {
            let _ = shards[s].send(Msg::Seed(std::mem::take(&mut batches[s])));
        }
    });
    if r.is_err() {
        shared.scan_failed.store(true, Relaxed);
    }
    for (s, b) in batches.into_iter().enumerate() {
        if !b.is_empty() {
            let _ = shards[s].send(Msg::Seed(b));
        }
        let _ = shards[s].send(Msg::Seeded);
    }
}
