//! Pools: a file (or, for tests and the simulator, anonymous memory) with a
//! [`Header`] and a data area, mapped and paired with the persister of its
//! durability domain.
//!
//! Choosing the domain: [`PoolOptions::domain`] if set, else `FERRITE_DOMAIN`
//! if set, else — at creation — auto-detection from the mapping
//! ([`crate::domain::detect`]) and — at open — the domain recorded in the
//! header, so a pool deliberately created as `adr` on `/dev/shm` (the way
//! PMDK's `PMEM_IS_PMEM_FORCE` is used) reopens as `adr`. Whether the mapping
//! really is persistent memory is reported separately by [`Pool::is_pmem`].
//!
//! A pool file is locked exclusively (`flock`) while open: a second opener,
//! in this process or another, gets [`PoolError::Locked`].
//!
//! A pool created with [`PoolOptions::max_size`] is *growable*: its file
//! starts at `size` bytes, address space for `max_size` is reserved when it
//! is mapped, and [`Medium::grow_to`] extends file and mapping in place
//! (what a grown part is used for is for the pool's owner to record
//! durably, after the growth returned). Growing costs an `fallocate`, an
//! `fdatasync` and an `mmap` of the new part; nothing moves, so readers go
//! on without a lock.

use crate::domain::{self, Detection, Domain};
use crate::error::{PoolError, Result};
use crate::header::{self, HEADER_SIZE, Header, MIN_POOL_SIZE, ROOT_OFF};
use crate::map::{MapKind, Mapping, PAGE};
use crate::opened::{OPEN_LEN, OPEN_OFF, OpenRecord};
use crate::persist::{Medium, PersistConfig, SimObserver};
use crate::region::{POff, Region};
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::badblocks::{BadBlocks, BadBlocksError};

/// How to create or open a pool.
#[derive(Clone, Debug)]
pub struct PoolOptions {
    /// Layout name recorded at creation and demanded at open.
    pub layout: String,
    /// Size in bytes (creation only): the whole pool, or a growable pool's
    /// initial size.
    pub size: u64,
    /// Creation only: makes the pool growable up to this many bytes
    /// (rounded up to a MiB; at least `size`).
    pub max_size: Option<u64>,
    /// Explicit durability domain (overrides environment and header).
    pub domain: Option<Domain>,
    /// Explicit flush instruction for `adr`.
    pub flush: Option<crate::FlushKind>,
    /// Non-temporal threshold for persistent copies.
    pub nt_threshold: usize,
    /// Where [`Pool::open`] and [`Pool::create`] read the kernel's bad-block
    /// lists ([`crate::badblocks`]); `None`: `/sys`. Tests supply a fake
    /// tree.
    pub sysfs_root: Option<PathBuf>,
}

impl PoolOptions {
    /// Options for a pool of `size` bytes (header included) owned by
    /// `layout`; everything else at its default (fixed size, detected
    /// domain, best flush instruction).
    pub fn new(layout: &str, size: u64) -> PoolOptions {
        PoolOptions {
            layout: layout.to_string(),
            size,
            max_size: None,
            domain: None,
            flush: None,
            nt_threshold: crate::persist::DEFAULT_NT_THRESHOLD,
            sysfs_root: None,
        }
    }

    /// Reads bad-block lists under `root` instead of `/sys`
    /// ([`PoolOptions::sysfs_root`]).
    pub fn sysfs_root(mut self, root: impl Into<PathBuf>) -> PoolOptions {
        self.sysfs_root = Some(root.into());
        self
    }

    fn probe(&self) -> crate::badblocks::Probe {
        match &self.sysfs_root {
            Some(r) => crate::badblocks::Probe { root: r.clone() },
            None => crate::badblocks::Probe::default(),
        }
    }

    /// Makes the pool growable up to `bytes` ([`PoolOptions::max_size`]).
    pub fn max_size(mut self, bytes: u64) -> PoolOptions {
        self.max_size = Some(bytes);
        self
    }

    /// The header fields `(features, max_size)` these options create.
    fn growth(&self) -> Result<(u32, u64)> {
        let Some(max) = self.max_size else {
            return Ok((0, 0));
        };
        let max = max.next_multiple_of(header::MAX_SIZE_UNIT);
        if max < self.size || max / header::MAX_SIZE_UNIT > u64::from(u32::MAX) {
            return Err(PoolError::Config(format!(
                "a pool's maximum size ({max} bytes) must be at least its size ({}) and at most 4 PiB",
                self.size
            )));
        }
        if !self.size.is_multiple_of(PAGE as u64) {
            return Err(PoolError::Config(format!(
                "a growable pool's size ({}) must be a multiple of {PAGE}",
                self.size
            )));
        }
        Ok((header::FEATURE_GROWABLE, max))
    }

    /// Forces the durability domain instead of `FERRITE_DOMAIN` or
    /// detection.
    pub fn domain(mut self, d: Domain) -> PoolOptions {
        self.domain = Some(d);
        self
    }

    /// Forces the flush instruction of the `adr` domain.
    pub fn flush(mut self, k: crate::FlushKind) -> PoolOptions {
        self.flush = Some(k);
        self
    }

    /// Copies of at least `bytes` use non-temporal stores.
    pub fn nt_threshold(mut self, bytes: usize) -> PoolOptions {
        self.nt_threshold = bytes;
        self
    }

    fn persist_config(&self, domain: Domain) -> Result<PersistConfig> {
        let mut cfg = PersistConfig::for_domain(domain).map_err(PoolError::Config)?;
        if let Some(k) = self.flush {
            if !k.supported() {
                return Err(PoolError::Config(format!(
                    "this CPU does not implement {}",
                    k.name()
                )));
            }
            cfg.flush = k;
        }
        cfg.nt_threshold = self.nt_threshold;
        Ok(cfg)
    }

    fn chosen_domain(&self) -> Result<Option<Domain>> {
        match self.domain {
            Some(d) => Ok(Some(d)),
            None => domain::domain_from_env().map_err(PoolError::Config),
        }
    }
}

/// An open pool.
#[derive(Debug)]
pub struct Pool {
    medium: Arc<Medium>,
    header: Header,
    path: Option<PathBuf>,
    /// Keeps the `flock` for as long as the pool is open.
    _file: Option<File>,
    detection: Option<Detection>,
    /// The kernel's bad blocks under a pool file, read at open.
    bad_blocks: std::result::Result<Option<BadBlocks>, BadBlocksError>,
}

fn io_err(path: &Path, e: std::io::Error) -> PoolError {
    match e.kind() {
        std::io::ErrorKind::NotFound => PoolError::NotFound {
            path: path.to_path_buf(),
        },
        std::io::ErrorKind::AlreadyExists => PoolError::AlreadyExists {
            path: path.to_path_buf(),
        },
        _ => PoolError::Io {
            path: path.to_path_buf(),
            source: e,
        },
    }
}

fn lock(file: &File, path: &Path) -> Result<()> {
    // SAFETY: flock on a valid, owned file descriptor.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Err(PoolError::Locked {
                path: path.to_path_buf(),
            });
        }
        return Err(io_err(path, e));
    }
    Ok(())
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Pool {
    /// Creates a new pool file (refusing to overwrite), sizes it, writes and
    /// persists the header.
    pub fn create(path: impl AsRef<Path>, opts: &PoolOptions) -> Result<Pool> {
        let path = path.as_ref();
        header::check_layout_name(&opts.layout)?;
        if opts.size < MIN_POOL_SIZE {
            return Err(PoolError::TooSmall {
                size: opts.size,
                min: MIN_POOL_SIZE,
            });
        }
        let explicit = opts.chosen_domain()?;
        opts.growth()?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| io_err(path, e))?;
        let result = Self::format_file(file, path, opts, explicit);
        if result.is_err() {
            let _ = std::fs::remove_file(path);
        }
        result
    }

    fn format_file(
        file: File,
        path: &Path,
        opts: &PoolOptions,
        explicit: Option<Domain>,
    ) -> Result<Pool> {
        lock(&file, path)?;
        // SAFETY: posix_fallocate on an owned descriptor; it allocates blocks
        // so running out of space is reported now, not as SIGBUS later.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, opts.size as libc::off_t) };
        match rc {
            0 => {}
            libc::ENOSPC | libc::EFBIG => {
                return Err(PoolError::OutOfSpace {
                    what: format!("cannot allocate {} bytes for {}", opts.size, path.display()),
                });
            }
            // File systems without fallocate: fall back to a sparse length.
            libc::EOPNOTSUPP | libc::EINVAL => {
                file.set_len(opts.size).map_err(|e| io_err(path, e))?
            }
            e => return Err(io_err(path, std::io::Error::from_raw_os_error(e))),
        }
        let len = usize::try_from(opts.size).map_err(|_| PoolError::OutOfSpace {
            what: "pool larger than the address space".into(),
        })?;
        let (features, max_size) = opts.growth()?;
        let map = map_pool_file(&file, len, max_size).map_err(|e| io_err(path, e))?;
        let detection = domain::detect(map.kind() == MapKind::FileSync);
        let domain = explicit.unwrap_or(detection.domain);
        let cfg = opts.persist_config(domain)?;
        let header = Header {
            version: header::FORMAT_VERSION,
            features,
            domain,
            size: opts.size,
            max_size,
            created_ns: now_ns(),
            uuid: header::new_uuid(),
            layout: opts.layout.clone(),
        };
        let medium = Arc::new(Medium::new(map, cfg, None));
        write_header(&medium, &header);
        mark_open(&medium, &file, path)?;
        file.sync_all().map_err(|e| io_err(path, e))?;
        // Make the new directory entry durable too (best effort: some file
        // systems refuse fsync on directories).
        if let Some(d) = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .and_then(|d| File::open(d).ok())
        {
            let _ = d.sync_all();
        }
        let bad_blocks = crate::badblocks::probe(&file, path, len as u64, &opts.probe());
        Ok(Pool {
            medium,
            header,
            path: Some(path.to_path_buf()),
            _file: Some(file),
            detection: Some(detection),
            bad_blocks,
        })
    }

    /// Opens an existing pool file, validating its header against `opts.layout`.
    pub fn open(path: impl AsRef<Path>, opts: &PoolOptions) -> Result<Pool> {
        let path = path.as_ref();
        let explicit = opts.chosen_domain()?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| io_err(path, e))?;
        lock(&file, path)?;
        let header = read_header(&mut file, path)?;
        check_layout(&header, &opts.layout)?;
        // A growable pool maps all of its file (it may have grown), at most
        // its maximum, in whole pages.
        let len = if header.growable() {
            let actual = file.metadata().map_err(|e| io_err(path, e))?.len();
            actual.min(header.max_size) / PAGE as u64 * PAGE as u64
        } else {
            header.size
        };
        let len = usize::try_from(len).map_err(|_| PoolError::Corrupt {
            what: "size exceeds the address space".into(),
        })?;
        let map = map_pool_file(&file, len, header.max_size).map_err(|e| io_err(path, e))?;
        let detection = domain::detect(map.kind() == MapKind::FileSync);
        let cfg = opts.persist_config(explicit.unwrap_or(header.domain))?;
        let medium = Arc::new(Medium::new(map, cfg, None));
        mark_open(&medium, &file, path)?;
        let bad_blocks = crate::badblocks::probe(&file, path, len as u64, &opts.probe());
        Ok(Pool {
            medium,
            header,
            path: Some(path.to_path_buf()),
            _file: Some(file),
            detection: Some(detection),
            bad_blocks,
        })
    }

    /// Reads and validates the header of a pool file without mapping or
    /// locking it (for `ferrite pool info|check`).
    pub fn inspect(path: impl AsRef<Path>) -> Result<(Header, u64)> {
        let path = path.as_ref();
        let mut file = File::open(path).map_err(|e| io_err(path, e))?;
        let h = read_header(&mut file, path)?;
        let mut root = [0u8; 8];
        use std::os::unix::fs::FileExt;
        file.read_exact_at(&mut root, ROOT_OFF as u64)
            .map_err(|e| io_err(path, e))?;
        Ok((h, u64::from_le_bytes(root)))
    }

    /// A pool in anonymous memory (nothing survives the process): for tests,
    /// the `volatile` benchmark upper bound, and building simulator images.
    pub fn create_in_memory(opts: &PoolOptions) -> Result<Pool> {
        Self::create_on_anonymous(opts, opts.domain.unwrap_or(Domain::Volatile), None)
    }

    /// A freshly formatted pool on anonymous memory watched by `observer`.
    /// The header is written before the observer is attached, so it is part
    /// of the initial durable state.
    pub fn create_simulated(
        opts: &PoolOptions,
        domain: Domain,
        observer: Arc<dyn SimObserver>,
    ) -> Result<Pool> {
        let p = Self::create_in_memory(&PoolOptions {
            domain: Some(domain),
            ..opts.clone()
        })?;
        let image = p.image();
        Self::open_image(&image, opts, domain, Some(observer))
    }

    fn create_on_anonymous(
        opts: &PoolOptions,
        domain: Domain,
        observer: Option<Arc<dyn SimObserver>>,
    ) -> Result<Pool> {
        header::check_layout_name(&opts.layout)?;
        if opts.size < MIN_POOL_SIZE {
            return Err(PoolError::TooSmall {
                size: opts.size,
                min: MIN_POOL_SIZE,
            });
        }
        let len = usize::try_from(opts.size).map_err(|_| PoolError::OutOfSpace {
            what: "pool larger than the address space".into(),
        })?;
        let (features, max_size) = opts.growth()?;
        let map = anonymous_pool(len, max_size).map_err(|e| PoolError::OutOfSpace {
            what: e.to_string(),
        })?;
        let header = Header {
            version: header::FORMAT_VERSION,
            features,
            domain,
            size: opts.size,
            max_size,
            created_ns: now_ns(),
            uuid: header::new_uuid(),
            layout: opts.layout.clone(),
        };
        let medium = Arc::new(Medium::new(map, opts.persist_config(domain)?, observer));
        write_header(&medium, &header);
        Ok(Pool {
            medium,
            header,
            path: None,
            _file: None,
            detection: None,
            bad_blocks: Ok(None),
        })
    }

    /// Opens a pool image (bytes of a pool, e.g. a simulated post-crash
    /// image) on anonymous memory, validating it exactly as a file open does.
    pub fn open_image(
        image: &[u8],
        opts: &PoolOptions,
        domain: Domain,
        observer: Option<Arc<dyn SimObserver>>,
    ) -> Result<Pool> {
        let header = Header::decode(image, image.len() as u64)?;
        check_layout(&header, &opts.layout)?;
        // A growable pool's image is as long as the pool had grown.
        let len = if header.growable() {
            (image.len() as u64).min(header.max_size) as usize / PAGE * PAGE
        } else {
            header.size as usize
        };
        let map = anonymous_pool(len, header.max_size).map_err(|e| PoolError::OutOfSpace {
            what: e.to_string(),
        })?;
        map.write(0, &image[..len]);
        let medium = Arc::new(Medium::new(map, opts.persist_config(domain)?, observer));
        Ok(Pool {
            medium,
            header,
            path: None,
            _file: None,
            detection: None,
            bad_blocks: Ok(None),
        })
    }

    /// The pool's immutable header, as validated at open.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The pool file; `None` for an in-memory pool.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The domain this open runs in (may differ from the one recorded
    /// at creation, [`Header::domain`]).
    pub fn domain(&self) -> Domain {
        self.medium.domain()
    }

    /// True when the mapping is real persistent memory (DAX + `MAP_SYNC`),
    /// the analogue of `pmem_is_pmem`.
    pub fn is_pmem(&self) -> bool {
        self.medium.map().is_pmem()
    }

    /// The kernel's list of bad blocks inside this pool, read at open
    /// ([`crate::badblocks`]): `Ok(None)` where the platform lists nothing
    /// (not persistent memory, an in-memory pool), `Ok(Some(b))` with
    /// `b.ranges` the damaged pool offsets (empty: none in this pool),
    /// `Err` when sysfs lists bad blocks but they could not be mapped.
    pub fn bad_blocks(&self) -> std::result::Result<Option<&BadBlocks>, &BadBlocksError> {
        self.bad_blocks.as_ref().map(Option::as_ref)
    }

    /// What auto-detection saw when the pool file was mapped.
    pub fn detection(&self) -> Option<&Detection> {
        self.detection.as_ref()
    }

    /// The whole mapped pool and its persister: the one door to the bytes.
    pub fn medium(&self) -> &Arc<Medium> {
        &self.medium
    }

    /// The data area: everything after the header.
    pub fn data(&self) -> Region {
        Region::whole(self.medium.clone())
            .sub(HEADER_SIZE, self.medium.map().len() - HEADER_SIZE)
            .expect("pool is at least MIN_POOL_SIZE")
    }

    /// The root offset (0 when unset).
    pub fn root<T>(&self) -> POff<T> {
        POff::new(
            self.medium
                .map()
                .load_u64(ROOT_OFF, std::sync::atomic::Ordering::Acquire),
        )
    }

    /// Atomically and durably replaces the root offset (one 8-byte store, one
    /// flush, one fence). The offset must point into the data area.
    pub fn set_root<T>(&self, root: POff<T>) -> Result<()> {
        let r = root.raw();
        if r != 0 && (r < HEADER_SIZE as u64 || r >= self.header.size) {
            return Err(PoolError::Config(format!(
                "root offset {r:#x} is outside the data area"
            )));
        }
        Region::whole(self.medium.clone()).store_u64_persist(ROOT_OFF, r);
        Ok(())
    }

    /// True for a pool that grows on demand ([`PoolOptions::max_size`]).
    pub fn growable(&self) -> bool {
        self.header.growable()
    }

    /// A copy of every byte of the pool (of a growable pool: as far as it
    /// has grown).
    pub fn image(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.medium.map().mapped()];
        self.medium.map().read(0, &mut v);
        v
    }

    /// Makes everything durable (for `msync` pools) and closes the pool
    /// (clearing a file's open record: [`crate::opened`]).
    pub fn close(self) -> Result<()> {
        if self._file.is_some() {
            let whole = Region::whole(self.medium.clone());
            whole.write(OPEN_OFF, &[0u8; OPEN_LEN]);
            whole.persist(OPEN_OFF, OPEN_LEN);
        }
        self.medium.sync_all().map_err(|e| PoolError::Io {
            path: self.path.clone().unwrap_or_default(),
            source: e,
        })
    }
}

/// Maps a pool file: `len` bytes, inside a reservation of `max_size` when
/// the pool is growable (`max_size > 0`).
fn map_pool_file(file: &File, len: usize, max_size: u64) -> std::io::Result<Mapping> {
    if max_size == 0 {
        return Mapping::map_file(file, len, true);
    }
    let reserve = usize::try_from(max_size).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::OutOfMemory,
            "maximum pool size exceeds the address space",
        )
    })?;
    Mapping::map_file_growable(file, len, reserve, true)
}

/// Anonymous memory for an in-memory or simulated pool of `len` bytes,
/// growable up to `max_size` when that is non-zero.
fn anonymous_pool(len: usize, max_size: u64) -> std::io::Result<Mapping> {
    if max_size == 0 {
        return Mapping::anonymous(len);
    }
    Mapping::anonymous_growable(len, max_size as usize)
}

/// Refuses a copy of a pool taken while it was open, then records this
/// opening ([`crate::opened`]): called with the file locked, before the
/// pool is handed to anyone.
fn mark_open(medium: &Arc<Medium>, file: &File, path: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().map_err(|e| io_err(path, e))?;
    let whole = Region::whole(medium.clone());
    let mut cur = vec![0u8; OPEN_OFF + OPEN_LEN];
    whole.read(0, &mut cur);
    if let Some(r) = OpenRecord::decode(&cur)
        && !r.is_for(meta.dev(), meta.ino())
    {
        return Err(PoolError::CopiedWhileOpen {
            path: path.to_path_buf(),
            pid: r.pid,
        });
    }
    whole.write(OPEN_OFF, &OpenRecord::now(meta.dev(), meta.ino()).encode());
    whole.persist(OPEN_OFF, OPEN_LEN);
    Ok(())
}

fn write_header(medium: &Arc<Medium>, header: &Header) {
    let mut buf = vec![0u8; HEADER_SIZE];
    header.encode(&mut buf);
    let whole = Region::whole(medium.clone());
    whole.write(0, &buf);
    whole.persist(0, HEADER_SIZE);
}

fn read_header(file: &mut File, path: &Path) -> Result<Header> {
    let actual = file.metadata().map_err(|e| io_err(path, e))?.len();
    let mut buf = Vec::with_capacity(HEADER_SIZE);
    file.by_ref()
        .take(HEADER_SIZE as u64)
        .read_to_end(&mut buf)
        .map_err(|e| io_err(path, e))?;
    Header::decode(&buf, actual)
}

fn check_layout(h: &Header, expected: &str) -> Result<()> {
    if h.layout != expected {
        return Err(PoolError::WrongLayout {
            expected: expected.to_string(),
            found: h.layout.clone(),
        });
    }
    Ok(())
}
