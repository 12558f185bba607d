//! Group commit over any [`Kv`](super::Kv): writes kept in DRAM between
//! `begin` and `commit`, then applied in one durable batch.

use super::{Kv, Result};

/// Group commit: a [`Kv`] that, between [`Group::begin`] and
/// [`Group::commit`], keeps writes in DRAM (reads see them) and then
/// applies them all with one [`Kv::batch`]. Outside a group it passes
/// every call through. The shard thread runs a group over the requests
/// queued at once and sends their replies only after the commit returns,
/// so no reply ever describes a write that is not durable; many requests
/// share one durable commit (fewer fences per request under load).
pub struct Group<K> {
    kv: K,
    active: bool,
    overlay: std::collections::HashMap<Vec<u8>, Option<Vec<u8>>>,
    ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl<K: Kv> Group<K> {
    /// A group over `kv`, passing every call through until [`Group::begin`].
    pub fn new(kv: K) -> Self {
        Group {
            kv,
            active: false,
            overlay: Default::default(),
            ops: Vec::new(),
        }
    }

    /// Start collecting writes.
    pub fn begin(&mut self) {
        self.active = true;
        self.overlay.clear();
        self.ops.clear();
    }

    /// Apply the collected writes in one batch. On error nothing was
    /// applied (the batch is atomic) and the overlay is dropped.
    pub fn commit(&mut self) -> Result<()> {
        self.active = false;
        self.overlay.clear();
        let ops = std::mem::take(&mut self.ops);
        if ops.is_empty() {
            return Ok(());
        }
        let r = self.kv.batch(&ops);
        self.ops = ops;
        self.ops.clear();
        r
    }
}

impl<K: Kv> Kv for Group<K> {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        if self.active
            && let Some(v) = self.overlay.get(key)
        {
            out.clear();
            return Ok(match v {
                Some(v) => {
                    out.extend_from_slice(v);
                    true
                }
                None => false,
            });
        }
        self.kv.get_into(key, out)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        if !self.active {
            return self.kv.put(key, value);
        }
        self.overlay.insert(key.to_vec(), Some(value.to_vec()));
        self.ops.push((key.to_vec(), Some(value.to_vec())));
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        if !self.active {
            return self.kv.delete(key);
        }
        let mut scratch = Vec::new();
        let existed = self.get_into(key, &mut scratch)?;
        self.overlay.insert(key.to_vec(), None);
        self.ops.push((key.to_vec(), None));
        Ok(existed)
    }

    fn scan_prefix(&mut self, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        self.kv.scan_prefix(prefix, f)
    }

    fn batch(&mut self, ops: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<()> {
        self.kv.batch(ops)
    }

    fn put_now(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.kv.put_now(key, value)
    }
}
