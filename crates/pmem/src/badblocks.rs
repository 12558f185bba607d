//! Bad-block awareness: the kernel's list of poisoned persistent-memory
//! ranges (from the platform's address range scrub), mapped to offsets of
//! a pool, read when the pool is opened ([`crate::Pool::bad_blocks`]).
//!
//! # Where the kernel tells (sysfs, Linux libnvdimm)
//!
//! - **fsdax** (a pool file on a DAX file system over `/dev/pmemN`): the
//!   block device's `badblocks` attribute, reached from the file's
//!   `st_dev` through `/sys/dev/block/MAJ:MIN` (a link to the disk, or to
//!   a partition whose `start` attribute gives its first sector and whose
//!   parent directory is the disk). Offsets are of the disk; the file
//!   system's extents of the pool file (`FS_IOC_FIEMAP`:
//!   [`crate::map::file_extents`]) map them to file offsets.
//! - **devdax** (a pool on `/dev/daxX.Y`, a character device): through
//!   `/sys/dev/char/MAJ:MIN`, a link into
//!   `…/ndbusN/regionR/daxR.M/daxR.N`. The region's `badblocks` lists
//!   sectors from the region's start; the namespace's data starts at the
//!   nd dax device's `resource` minus the region's `resource` (both
//!   physical addresses, hexadecimal), so a region sector `s` is device
//!   byte `512 s - (dax resource - region resource)` (libpmem2 maps them
//!   the same way).
//!
//! A `badblocks` attribute holds one range a line, `SECTOR COUNT`, both
//! decimal, in 512-byte sectors. A device without the attribute (not
//! persistent memory, or no libnvdimm) gives `None`: nothing is said.
//!
//! The sysfs root is [`Probe::root`] (`/sys` by default), so a test can
//! supply a fake tree.

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Bytes of a sector in `badblocks` lists.
pub const SECTOR: u64 = 512;

/// A damaged range of the pool: pool offsets (byte 0 is the header's
/// first byte), `offset..offset + len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadRange {
    /// First damaged byte, as a pool offset.
    pub offset: u64,
    /// Damaged bytes from `offset` (a multiple of [`SECTOR`] unless
    /// clipped at the pool's end).
    pub len: u64,
}

/// What the kernel lists for the device under a pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadBlocks {
    /// The sysfs `badblocks` file read.
    pub source: PathBuf,
    /// The listed ranges that fall inside the pool, clipped to it,
    /// ascending. Empty: the device has bad blocks elsewhere or none.
    pub ranges: Vec<BadRange>,
}

/// Why the list could not be read or mapped.
#[derive(Debug, thiserror::Error)]
pub enum BadBlocksError {
    /// A sysfs attribute could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The attribute file.
        path: PathBuf,
        /// What the system reported.
        source: std::io::Error,
    },
    #[error("{}: line {line:?} is not `SECTOR COUNT` or `0xADDRESS`", path.display())]
    /// A line of a `badblocks` list or a `resource` attribute is malformed.
    Parse {
        /// The attribute file.
        path: PathBuf,
        /// The line as read (trimmed).
        line: String,
    },
    #[error(
        "{}: the kernel lists bad blocks on the device, but the file's extents are unknown ({source}): cannot tell which fall inside the pool",
        path.display()
    )]
    /// The device lists bad blocks but the pool file's extents (FIEMAP)
    /// cannot be read, so they cannot be mapped to pool offsets.
    Extents {
        /// The pool file.
        path: PathBuf,
        /// Why the extents could not be read.
        source: std::io::Error,
    },
}

/// Where to look: the sysfs root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The sysfs mount point (`/sys` by default; tests point it at a
    /// directory tree of their own).
    pub root: PathBuf,
}

impl Default for Probe {
    fn default() -> Self {
        Probe {
            root: PathBuf::from("/sys"),
        }
    }
}

/// One extent of a file: `len` bytes at file offset `logical` lie at
/// device byte `physical`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Byte offset in the file.
    pub logical: u64,
    /// Byte offset on the device.
    pub physical: u64,
    /// Bytes of the extent.
    pub len: u64,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BadBlocksError + '_ {
    move |source| BadBlocksError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Parses a `badblocks` attribute: `(first sector, sectors)` per line.
pub(crate) fn parse_list(text: &str, path: &Path) -> Result<Vec<(u64, u64)>, BadBlocksError> {
    let bad = |line: &str| BadBlocksError::Parse {
        path: path.to_path_buf(),
        line: line.to_string(),
    };
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let mut it = line.split_ascii_whitespace();
        let (Some(s), Some(n), None) = (it.next(), it.next(), it.next()) else {
            return Err(bad(line));
        };
        let s: u64 = s.parse().map_err(|_| bad(line))?;
        let n: u64 = n.parse().map_err(|_| bad(line))?;
        out.push((s, n));
    }
    Ok(out)
}

/// A `resource` attribute: a physical address, `0x` hexadecimal.
fn read_resource(path: &Path) -> Result<u64, BadBlocksError> {
    let t = std::fs::read_to_string(path).map_err(io(path))?;
    let t = t.trim();
    u64::from_str_radix(t.trim_start_matches("0x"), 16).map_err(|_| BadBlocksError::Parse {
        path: path.to_path_buf(),
        line: t.to_string(),
    })
}

/// Reads `path` if it exists: `None` when it does not.
fn read_optional(path: &Path) -> Result<Option<String>, BadBlocksError> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(path)(e)),
    }
}

/// Byte ranges `[start, end)` of a device (`dev_start` bytes in, the
/// device's first byte being 0) that a list of sectors covers, clipped
/// at 0.
fn device_bytes(list: &[(u64, u64)], dev_start: u64) -> Vec<(u64, u64)> {
    list.iter()
        .filter_map(|&(s, n)| {
            let a = s.saturating_mul(SECTOR);
            let b = a.saturating_add(n.saturating_mul(SECTOR));
            (b > dev_start).then(|| (a.max(dev_start) - dev_start, b - dev_start))
        })
        .collect()
}

/// Clips device byte ranges to a pool of `pool_len` bytes at device byte
/// 0 (a devdax pool), merging and sorting.
fn clip(mut r: Vec<(u64, u64)>, pool_len: u64) -> Vec<BadRange> {
    r.retain(|&(a, b)| a < pool_len && b > a);
    r.sort_unstable();
    let mut out: Vec<BadRange> = Vec::new();
    for (a, b) in r {
        let b = b.min(pool_len);
        match out.last_mut() {
            Some(l) if a <= l.offset + l.len => l.len = l.len.max(b - l.offset),
            _ => out.push(BadRange {
                offset: a,
                len: b - a,
            }),
        }
    }
    out
}

/// Maps device byte ranges to file offsets through the file's `extents`,
/// clipped to the pool's `pool_len` bytes.
pub(crate) fn map_extents(dev: &[(u64, u64)], extents: &[Extent], pool_len: u64) -> Vec<BadRange> {
    let mut out = Vec::new();
    for &(a, b) in dev {
        for e in extents {
            let (pa, pb) = (e.physical, e.physical.saturating_add(e.len));
            let (x, y) = (a.max(pa), b.min(pb));
            if x < y {
                out.push((e.logical + (x - pa), e.logical + (y - pa)));
            }
        }
    }
    clip(out, pool_len)
}

/// A device's list: the sysfs file read, and the byte ranges
/// `[start, end)` of the device it lists.
pub type DeviceList = (PathBuf, Vec<(u64, u64)>);

/// The bad-block list of the character device `MAJ:MIN` (devdax), as
/// device byte ranges, and the file read; `None` when sysfs lists none.
pub fn devdax_ranges(
    probe: &Probe,
    major: u32,
    minor: u32,
) -> Result<Option<DeviceList>, BadBlocksError> {
    let link = probe.root.join(format!("dev/char/{major}:{minor}"));
    let Ok(dev) = std::fs::canonicalize(&link) else {
        return Ok(None);
    };
    // …/regionR/<nd dax device>/<dax char device>: the region is the
    // nearest ancestor named region*, the nd dax device its child on the
    // path.
    let mut nd_dax = None;
    let mut region = None;
    let mut prev: Option<&Path> = None;
    for a in dev.ancestors() {
        if a.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("region"))
        {
            region = Some(a.to_path_buf());
            nd_dax = prev.map(Path::to_path_buf);
            break;
        }
        prev = Some(a);
    }
    let (Some(region), Some(nd_dax)) = (region, nd_dax) else {
        return Ok(None);
    };
    let source = region.join("badblocks");
    let Some(text) = read_optional(&source)? else {
        return Ok(None);
    };
    let list = parse_list(&text, &source)?;
    let region_res = read_resource(&region.join("resource"))?;
    let ns_res = read_resource(&nd_dax.join("resource"))?;
    let start = ns_res.saturating_sub(region_res);
    Ok(Some((source, device_bytes(&list, start))))
}

/// The bad-block list of the block device `MAJ:MIN` holding a file
/// (fsdax), as byte ranges of that device (a partition's own bytes), and
/// the file read; `None` when sysfs lists none.
pub(crate) fn block_ranges(
    probe: &Probe,
    major: u32,
    minor: u32,
) -> Result<Option<DeviceList>, BadBlocksError> {
    let link = probe.root.join(format!("dev/block/{major}:{minor}"));
    let Ok(dev) = std::fs::canonicalize(&link) else {
        return Ok(None);
    };
    // A partition: its `start` (sectors) and the disk's list.
    let (disk, start) = match read_optional(&dev.join("partition"))? {
        Some(_) => {
            let p = dev.join("start");
            let t = std::fs::read_to_string(&p).map_err(io(&p))?;
            let s: u64 = t.trim().parse().map_err(|_| BadBlocksError::Parse {
                path: p.clone(),
                line: t.trim().to_string(),
            })?;
            match dev.parent() {
                Some(d) => (d.to_path_buf(), s * SECTOR),
                None => return Ok(None),
            }
        }
        None => (dev, 0),
    };
    let source = disk.join("badblocks");
    let Some(text) = read_optional(&source)? else {
        return Ok(None);
    };
    let list = parse_list(&text, &source)?;
    Ok(Some((source, device_bytes(&list, start))))
}

/// The kernel's bad blocks inside the pool of `pool_len` bytes open as
/// `file` (at `path`): `None` when the platform lists nothing for its
/// device. The file's extents are asked for only when the device lists a
/// bad block.
pub fn probe(
    file: &File,
    path: &Path,
    pool_len: u64,
    probe: &Probe,
) -> Result<Option<BadBlocks>, BadBlocksError> {
    let md = file.metadata().map_err(io(path))?;
    if md.file_type().is_char_device() {
        let (major, minor) = (libc::major(md.rdev()), libc::minor(md.rdev()));
        return Ok(
            devdax_ranges(probe, major, minor)?.map(|(source, dev)| BadBlocks {
                source,
                ranges: clip(dev, pool_len),
            }),
        );
    }
    let (major, minor) = (libc::major(md.dev()), libc::minor(md.dev()));
    let Some((source, dev)) = block_ranges(probe, major, minor)? else {
        return Ok(None);
    };
    if dev.is_empty() {
        return Ok(Some(BadBlocks {
            source,
            ranges: Vec::new(),
        }));
    }
    let extents = crate::map::file_extents(file).map_err(|source| BadBlocksError::Extents {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(Some(BadBlocks {
        source,
        ranges: map_extents(&dev, &extents, pool_len),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_bad_lines_are_typed_errors() {
        let p = Path::new("x");
        assert_eq!(
            parse_list("8 2\n 100 1 \n\n", p).unwrap(),
            vec![(8, 2), (100, 1)]
        );
        for bad in ["8", "8 2 3", "a 1", "-1 2"] {
            assert!(
                matches!(parse_list(bad, p), Err(BadBlocksError::Parse { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn ranges_map_through_extents_and_clip_to_the_pool() {
        // Sectors 8..10 and 20..21 of the device, which starts 1024 bytes
        // into the disk's sector numbering.
        let dev = device_bytes(&[(8, 2), (20, 1), (1, 1)], 1024);
        assert_eq!(dev, vec![(3072, 4096), (9216, 9728)]);
        // The file's first 4 KiB lie at device 2048, the next at 8192.
        let ext = [
            Extent {
                logical: 0,
                physical: 2048,
                len: 4096,
            },
            Extent {
                logical: 4096,
                physical: 8192,
                len: 4096,
            },
        ];
        assert_eq!(
            map_extents(&dev, &ext, 1 << 20),
            vec![
                BadRange {
                    offset: 1024,
                    len: 1024
                },
                BadRange {
                    offset: 4096 + 1024,
                    len: 512
                },
            ]
        );
        // A pool of 5 KiB: the second range is cut at its end... and a
        // pool of 1 KiB has none.
        assert_eq!(
            map_extents(&dev, &ext, 5 * 1024 + 256),
            vec![
                BadRange {
                    offset: 1024,
                    len: 1024
                },
                BadRange {
                    offset: 5120,
                    len: 256
                },
            ]
        );
        assert!(map_extents(&dev, &ext, 1024).is_empty());
        // Adjacent ranges merge.
        assert_eq!(
            clip(vec![(0, 512), (512, 1024), (4096, 4608)], 1 << 20),
            vec![
                BadRange {
                    offset: 0,
                    len: 1024
                },
                BadRange {
                    offset: 4096,
                    len: 512
                }
            ]
        );
    }
}
