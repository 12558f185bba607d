//! [`MemKv`]: the reference [`Kv`] — a `BTreeMap` behind a mutex.

use crate::{BatchOp, Kv};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};

/// An in-memory ordered map implementing [`Kv`] exactly as the trait
/// specifies (no durability: nothing is persistent). Cloning gives another
/// handle to the *same* map, so several threads can drive one store; every
/// call holds the lock for its whole duration, so a `batch` is atomic with
/// respect to every other call (a `get`/`scan` sequence of one thread is
/// not isolated from another's batches, as with the real systems).
///
/// It is the model the workload tests run against and a reference for
/// adapters: any system that behaves differently on the same operation
/// stream has a bug.
#[derive(Clone, Debug, Default)]
pub struct MemKv {
    map: Arc<Mutex<BTreeMap<Vec<u8>, Vec<u8>>>>,
}

impl MemKv {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<Vec<u8>, Vec<u8>>> {
        // A panic in another handle's call cannot leave the map half
        // changed (each call is one map operation or a loop of them that
        // cannot panic), so a poisoned lock is still a consistent map.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// A copy of every record, in key order.
    pub fn snapshot(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

impl Kv for MemKv {
    type Error = Infallible;

    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, Infallible> {
        out.clear();
        match self.lock().get(key) {
            Some(v) => {
                out.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Infallible> {
        self.lock().insert(key.to_vec(), value.to_vec());
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, Infallible> {
        Ok(self.lock().remove(key).is_some())
    }

    fn scan(
        &mut self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, Infallible> {
        let map = self.lock();
        let mut n = 0;
        for (k, v) in map
            .range::<[u8], _>((std::ops::Bound::Included(from), std::ops::Bound::Unbounded))
            .take(limit)
        {
            f(k, v);
            n += 1;
        }
        Ok(n)
    }

    fn batch(&mut self, ops: &[BatchOp<'_>]) -> Result<(), Infallible> {
        let mut map = self.lock();
        for op in ops {
            match *op {
                BatchOp::Put { key, value } => {
                    map.insert(key.to_vec(), value.to_vec());
                }
                BatchOp::Delete { key } => {
                    map.remove(key);
                }
            }
        }
        Ok(())
    }
}
