//! The backing disk: 4 KiB pages read and written by page number.
//!
//! [`Disk`] is small on purpose so the crash simulator can stand in for a
//! real file: [`FileDisk`] is a regular file (`pread`/`pwrite`, `O_DIRECT`
//! when the filesystem accepts it, `fdatasync` for [`Disk::sync`]);
//! [`PoolDisk`] keeps the pages in a region of a Ferrite pool, where a
//! write is an ordinary store and `sync` flushes the written pages and
//! fences through the pool's persister. Under the crash simulator's `adr`
//! model that gives exactly a disk's contract: a page written but not
//! synced may be lost, or torn (any subset of its 64-byte lines survives),
//! and a synced page is durable.

use crate::error::{CacheError, Result};
use crate::format::PAGE;
use ferrite_pmem::Region;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// A disk of fixed size in 4 KiB pages.
pub trait Disk: Send + Sync {
    /// Size in pages.
    fn pages(&self) -> u32;
    /// Reads page `n` into `buf` (`PAGE` bytes).
    fn read(&self, n: u32, buf: &mut [u8]) -> Result<()>;
    /// Writes page `n`; durable only after [`Disk::sync`].
    fn write(&self, n: u32, buf: &[u8]) -> Result<()>;
    /// Makes every completed write durable (`fdatasync`).
    fn sync(&self) -> Result<()>;
    /// Human-readable description (path, direct or buffered).
    fn describe(&self) -> String;
}

fn check_page(n: u32, pages: u32, len: usize) -> Result<()> {
    if n >= pages {
        return Err(CacheError::OutOfRange(n, pages));
    }
    assert_eq!(len, PAGE, "disk I/O is by whole pages");
    Ok(())
}

/// A page-aligned 4 KiB buffer for `O_DIRECT` I/O, without `unsafe`: an
/// over-allocated vector and the aligned window inside it.
struct Aligned {
    buf: Vec<u8>,
    start: usize,
}

impl Aligned {
    fn new() -> Aligned {
        let buf = vec![0u8; 2 * PAGE];
        let start = (PAGE - buf.as_ptr() as usize % PAGE) % PAGE;
        Aligned { buf, start }
    }
    fn get(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + PAGE]
    }
}

thread_local! {
    static BOUNCE: std::cell::RefCell<Aligned> = std::cell::RefCell::new(Aligned::new());
}

/// A regular file as the disk.
pub struct FileDisk {
    file: File,
    pages: u32,
    direct: bool,
    path: String,
}

impl FileDisk {
    /// Creates (or truncates) `path` to `pages` pages of zeros.
    pub fn create(path: impl AsRef<Path>, pages: u32) -> Result<FileDisk> {
        let p = path.as_ref();
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(p)?;
        f.set_len(pages as u64 * PAGE as u64)?;
        f.sync_all()?;
        drop(f);
        Self::open(p)
    }

    /// Opens an existing disk file; tries `O_DIRECT` first (so reads really
    /// reach the device and the kernel's page cache does not silently
    /// enlarge the cache), falling back to buffered I/O where the
    /// filesystem refuses it (tmpfs).
    pub fn open(path: impl AsRef<Path>) -> Result<FileDisk> {
        let p = path.as_ref();
        let len = std::fs::metadata(p)?.len();
        if len % PAGE as u64 != 0 || len / PAGE as u64 > u32::MAX as u64 {
            return Err(CacheError::Config(format!(
                "disk file {} is {len} bytes, not a whole number of pages",
                p.display()
            )));
        }
        let pages = (len / PAGE as u64) as u32;
        let direct = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(p)
            .ok()
            .filter(|f| {
                BOUNCE.with(|b| f.read_exact_at(b.borrow_mut().get(), 0).is_ok() || pages == 0)
            });
        let (file, direct) = match direct {
            Some(f) => (f, true),
            None => (OpenOptions::new().read(true).write(true).open(p)?, false),
        };
        Ok(FileDisk {
            file,
            pages,
            direct,
            path: p.display().to_string(),
        })
    }

    pub fn is_direct(&self) -> bool {
        self.direct
    }
}

impl Disk for FileDisk {
    fn pages(&self) -> u32 {
        self.pages
    }

    fn read(&self, n: u32, buf: &mut [u8]) -> Result<()> {
        check_page(n, self.pages, buf.len())?;
        let off = n as u64 * PAGE as u64;
        if self.direct {
            BOUNCE.with(|b| {
                let mut b = b.borrow_mut();
                self.file.read_exact_at(b.get(), off)?;
                buf.copy_from_slice(b.get());
                Ok(())
            })
        } else {
            Ok(self.file.read_exact_at(buf, off)?)
        }
    }

    fn write(&self, n: u32, buf: &[u8]) -> Result<()> {
        check_page(n, self.pages, buf.len())?;
        let off = n as u64 * PAGE as u64;
        if self.direct {
            BOUNCE.with(|b| {
                let mut b = b.borrow_mut();
                b.get().copy_from_slice(buf);
                Ok(self.file.write_all_at(b.get(), off)?)
            })
        } else {
            Ok(self.file.write_all_at(buf, off)?)
        }
    }

    fn sync(&self) -> Result<()> {
        Ok(self.file.sync_data()?)
    }

    fn describe(&self) -> String {
        format!(
            "{} ({})",
            self.path,
            if self.direct { "O_DIRECT" } else { "buffered" }
        )
    }
}

/// The disk as a region of a pool: the crash simulator's model of a disk
/// (see the module documentation), and a fast in-memory disk on a
/// volatile pool.
pub struct PoolDisk {
    region: Region,
    pages: u32,
    /// Pages written and not yet known durable, each with a count of its
    /// writes (a page written again during a sync stays listed).
    unsynced: parking_lot::Mutex<BTreeMap<u32, u64>>,
}

impl PoolDisk {
    pub fn new(region: Region) -> PoolDisk {
        let pages = (region.len() / PAGE).min(u32::MAX as usize) as u32;
        PoolDisk {
            region,
            pages,
            unsynced: parking_lot::Mutex::new(BTreeMap::new()),
        }
    }
}

impl Disk for PoolDisk {
    fn pages(&self) -> u32 {
        self.pages
    }

    fn read(&self, n: u32, buf: &mut [u8]) -> Result<()> {
        check_page(n, self.pages, buf.len())?;
        self.region.read(n as usize * PAGE, buf);
        Ok(())
    }

    fn write(&self, n: u32, buf: &[u8]) -> Result<()> {
        check_page(n, self.pages, buf.len())?;
        // Write, then record: a sync by another thread between the two
        // must not unlist the page before its new bytes are stored (it
        // would flush the old ones, and the writer's own sync would then
        // find nothing to flush).
        self.region.write(n as usize * PAGE, buf);
        *self.unsynced.lock().entry(n).or_default() += 1;
        Ok(())
    }

    /// Like `fdatasync`, makes durable every write that completed before
    /// it began, whoever wrote it: it flushes every listed page, fences,
    /// and only then unlists the pages not written again meanwhile. (It
    /// used to take the list and clear it: a concurrent sync then returned
    /// after its own fence while another thread's flushes of its pages
    /// were not yet fenced — a fence orders only its own thread's flushes
    /// — and the cache marked those pages CLEAN over a disk that could
    /// still lose them. Found by `ferrite check cache`, two lockstep
    /// sessions writing back at once.)
    fn sync(&self) -> Result<()> {
        let pages: Vec<(u32, u64)> = self.unsynced.lock().iter().map(|(&n, &w)| (n, w)).collect();
        for &(n, _) in &pages {
            self.region.flush(n as usize * PAGE, PAGE);
        }
        self.region.fence();
        let mut list = self.unsynced.lock();
        for (n, w) in pages {
            if list.get(&n) == Some(&w) {
                list.remove(&n);
            }
        }
        Ok(())
    }

    fn describe(&self) -> String {
        format!("pool region of {} pages", self.pages)
    }
}
