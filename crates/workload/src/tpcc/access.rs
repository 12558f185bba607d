//! Reading and writing row fields at their offsets, reading rows and
//! prefix scans through a [`Kv`], and the write batch one transaction
//! commits.

use super::{Key, Table, TpccError, hex};
use crate::{BatchOp, Kv};

pub(super) fn get_u8(r: &[u8], off: usize) -> u8 {
    r[off]
}
pub(super) fn get_u32(r: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(r[off..off + 4].try_into().unwrap_or_default())
}
pub(super) fn get_i64(r: &[u8], off: usize) -> i64 {
    i64::from_le_bytes(r[off..off + 8].try_into().unwrap_or_default())
}
pub(super) fn get_u64(r: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(r[off..off + 8].try_into().unwrap_or_default())
}
pub(super) fn set_u16(r: &mut [u8], off: usize, v: u16) {
    r[off..off + 2].copy_from_slice(&v.to_le_bytes());
}
pub(super) fn set_u32(r: &mut [u8], off: usize, v: u32) {
    r[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
pub(super) fn set_i64(r: &mut [u8], off: usize, v: i64) {
    r[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
pub(super) fn set_u64(r: &mut [u8], off: usize, v: u64) {
    r[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
pub(super) fn add_i64(r: &mut [u8], off: usize, v: i64) {
    let x = get_i64(r, off).wrapping_add(v);
    set_i64(r, off, x);
}
pub(super) fn add_u32(r: &mut [u8], off: usize, v: u32) {
    let x = get_u32(r, off).wrapping_add(v);
    set_u32(r, off, x);
}
pub(super) fn add_u64(r: &mut [u8], off: usize, v: u64) {
    let x = get_u64(r, off).wrapping_add(v);
    set_u64(r, off, x);
}
/// Fields written as i32 (s_quantity) share the u32 encoding.
pub(super) fn get_i32(r: &[u8], off: usize) -> i32 {
    get_u32(r, off) as i32
}
pub(super) fn set_i32(r: &mut [u8], off: usize, v: i32) {
    set_u32(r, off, v as u32)
}

/// Reads a row that must exist and have its table's size.
pub(super) fn get_row<K: Kv>(
    kv: &mut K,
    table: Table,
    key: &Key,
    out: &mut Vec<u8>,
) -> Result<(), TpccError<K::Error>> {
    if !kv.get(key.as_slice(), out).map_err(TpccError::Kv)? {
        return Err(TpccError::Missing {
            table,
            key: hex(key.as_slice()),
        });
    }
    check_len(table, key.as_slice(), out)
}

pub(super) fn check_len<E>(table: Table, key: &[u8], row: &[u8]) -> Result<(), TpccError<E>> {
    if row.len() != table.row_size() {
        return Err(TpccError::Corrupt {
            table,
            key: hex(key),
            len: row.len(),
            want: table.row_size(),
        });
    }
    Ok(())
}

/// Calls `f` for every pair whose key starts with `prefix`, from `from`
/// (which must start with `prefix`) on, in key order, `chunk` pairs per
/// [`Kv::scan`] call, until `f` returns false or the prefix ends.
pub(super) fn scan_prefix<K: Kv>(
    kv: &mut K,
    prefix: &[u8],
    from: &[u8],
    chunk: usize,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<(), K::Error> {
    let mut cursor = from.to_vec();
    loop {
        let mut done = false;
        let mut seen = 0;
        let mut last = Vec::new();
        kv.scan(&cursor, chunk, &mut |k, v| {
            seen += 1;
            if done {
                return;
            }
            if !k.starts_with(prefix) || !f(k, v) {
                done = true;
                return;
            }
            last.clear();
            last.extend_from_slice(k);
        })?;
        if done || seen < chunk {
            return Ok(());
        }
        // The smallest key after `last`.
        cursor.clear();
        cursor.extend_from_slice(&last);
        cursor.push(0);
    }
}

// ---------------------------------------------------------------- batches

/// The writes of one transaction, in one arena, applied by one
/// [`Kv::batch`].
#[derive(Default)]
pub(super) struct Batch {
    arena: Vec<u8>,
    /// (key start, key len, value start, value len or u32::MAX = delete)
    ops: Vec<(u32, u32, u32, u32)>,
}

impl Batch {
    pub(super) fn clear(&mut self) {
        self.arena.clear();
        self.ops.clear();
    }
    pub(super) fn put(&mut self, key: &[u8], value: &[u8]) {
        let k = self.arena.len() as u32;
        self.arena.extend_from_slice(key);
        let v = self.arena.len() as u32;
        self.arena.extend_from_slice(value);
        self.ops.push((k, key.len() as u32, v, value.len() as u32));
    }
    pub(super) fn delete(&mut self, key: &[u8]) {
        let k = self.arena.len() as u32;
        self.arena.extend_from_slice(key);
        self.ops.push((k, key.len() as u32, 0, u32::MAX));
    }
    pub(super) fn len(&self) -> usize {
        self.ops.len()
    }
    pub(super) fn commit<K: Kv>(&self, kv: &mut K) -> Result<(), K::Error> {
        if self.ops.is_empty() {
            return Ok(());
        }
        let a = &self.arena;
        let ops: Vec<BatchOp<'_>> = self
            .ops
            .iter()
            .map(|&(k, kl, v, vl)| {
                let key = &a[k as usize..(k + kl) as usize];
                if vl == u32::MAX {
                    BatchOp::Delete { key }
                } else {
                    BatchOp::Put {
                        key,
                        value: &a[v as usize..(v + vl) as usize],
                    }
                }
            })
            .collect();
        kv.batch(&ops)
    }
}
