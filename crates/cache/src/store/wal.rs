//! The volatile baseline's write-ahead log ([`Wal`]): record format,
//! group sync, and replay of the valid prefix (see [`super`], "The
//! volatile baseline").

use super::{MAX_KEY, MAX_VALUE};
use crate::error::Result;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// A write-ahead log of operations for the volatile baseline.
pub struct Wal {
    inner: parking_lot::Mutex<(File, Vec<u8>, u64)>,
    sync_every: AtomicU64,
}

impl Wal {
    /// Creates (truncates) the log at `path`; `sync_every` = 1 makes every
    /// operation durable before it returns, n > 1 syncs every n operations.
    pub fn create(path: impl AsRef<Path>, sync_every: u64) -> Result<Wal> {
        let f = File::create(path)?;
        Ok(Wal {
            inner: parking_lot::Mutex::new((f, Vec::new(), 0)),
            sync_every: AtomicU64::new(sync_every.max(1)),
        })
    }

    /// Changes the sync period (a bulk load may sync rarely, the measured
    /// run per operation).
    pub fn set_sync_every(&self, n: u64) {
        self.sync_every.store(n.max(1), Ordering::Relaxed);
    }

    /// Opens an existing log for appending after its valid prefix: the
    /// torn tail (if any) is cut off and the cut synced first, so a record
    /// appended later is never preceded by garbage that [`Wal::replay`]
    /// would stop at.
    pub fn open(path: impl AsRef<Path>, sync_every: u64) -> Result<(Wal, WalReplay)> {
        let rep = Self::replay(&path, |_, _| Ok(()))?;
        let f = std::fs::OpenOptions::new().write(true).open(&path)?;
        if rep.discarded_bytes > 0 {
            f.set_len(rep.valid_bytes)?;
            f.sync_all()?;
        }
        let mut f = f;
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(rep.valid_bytes))?;
        Ok((
            Wal {
                inner: parking_lot::Mutex::new((f, Vec::new(), rep.records)),
                sync_every: AtomicU64::new(sync_every.max(1)),
            },
            rep,
        ))
    }

    /// Reads the log at `path` and calls `apply(key, value)` (`None`: a
    /// delete) for each record of its valid prefix, in order (see the
    /// module documentation for the format and what ends the prefix).
    /// Corrupt input ends the prefix; it is never an error or a panic.
    pub fn replay(
        path: impl AsRef<Path>,
        mut apply: impl FnMut(&[u8], Option<&[u8]>) -> Result<()>,
    ) -> Result<WalReplay> {
        let b = std::fs::read(path)?;
        let mut o = 0usize;
        let mut records = 0u64;
        while let Some((key, value, next)) = parse_wal_record(&b, o) {
            apply(key, value)?;
            records += 1;
            o = next;
        }
        Ok(WalReplay {
            records,
            valid_bytes: o as u64,
            discarded_bytes: (b.len() - o) as u64,
        })
    }

    pub(super) fn append(&self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        let mut g = self.inner.lock();
        let (f, buf, n) = &mut *g;
        let v = value.unwrap_or(&[]);
        let start = buf.len();
        buf.push(key.len() as u8);
        buf.push(if value.is_some() { v.len() as u8 } else { 0xff });
        buf.extend_from_slice(key);
        buf.extend_from_slice(v);
        let crc = crc32c::crc32c(&buf[start..]);
        buf.extend_from_slice(&crc.to_le_bytes());
        *n += 1;
        if (*n).is_multiple_of(self.sync_every.load(Ordering::Relaxed)) {
            f.write_all(buf)?;
            buf.clear();
            f.sync_data()?;
        }
        Ok(())
    }
}

/// What [`Wal::replay`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalReplay {
    /// Records applied (the valid prefix).
    pub records: u64,
    /// Bytes of the valid prefix.
    pub valid_bytes: u64,
    /// Bytes after it (a torn tail), refused.
    pub discarded_bytes: u64,
}

/// One record of the log: key, value (`None`: delete), offset after it.
type WalRecord<'a> = (&'a [u8], Option<&'a [u8]>, usize);

/// The record of the log at `o`; `None` when the bytes at `o` are not a
/// whole, valid record (the end of the valid prefix).
fn parse_wal_record(b: &[u8], o: usize) -> Option<WalRecord<'_>> {
    let (kl, vb) = (*b.get(o)? as usize, *b.get(o + 1)?);
    let vl = if vb == 0xff { 0 } else { vb as usize };
    if kl > MAX_KEY || vl > MAX_VALUE {
        return None;
    }
    let body = o + 2 + kl + vl;
    let crc = u32::from_le_bytes(b.get(body..body + 4)?.try_into().ok()?);
    if crc32c::crc32c(&b[o..body]) != crc {
        return None;
    }
    let key = &b[o + 2..o + 2 + kl];
    let value = (vb != 0xff).then(|| &b[o + 2 + kl..body]);
    Some((key, value, body + 4))
}
