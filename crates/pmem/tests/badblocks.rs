//! Bad-block awareness on fake sysfs trees: the kernel's sectors are
//! mapped to the right pool offsets (fsdax: through the pool file's real
//! extents, on a whole disk and on a partition; devdax: through the
//! region's and namespace's resources), and a machine without lists says
//! nothing.

use ferrite_pmem::badblocks::{self, BadRange, Probe, SECTOR};
use ferrite_pmem::{Domain, Pool, PoolOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

const LEN: u64 = 1 << 20;

/// A pool file whose every byte is allocated on the disk (written and
/// synced: no holes, no delayed allocation), so its extents are real.
fn pool_file(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("bb.pool");
    Pool::create(&path, &PoolOptions::new("bb", LEN).domain(Domain::Adr))
        .unwrap()
        .close()
        .unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let page = vec![0x5au8; 4096];
    let mut off = 8192;
    while off < LEN {
        f.write_all_at(&page, off).unwrap();
        off += 4096;
    }
    f.sync_all().unwrap();
    path
}

fn mkdir_link(root: &Path, link: &str, target: &Path) {
    let l = root.join(link);
    std::fs::create_dir_all(l.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, l).unwrap();
}

/// Device byte of pool offset `off` (from the file system's extents).
fn physical(file: &std::fs::File, off: u64) -> u64 {
    let ext = ferrite_pmem::map::file_extents(file).unwrap();
    let e = ext
        .iter()
        .find(|e| off >= e.logical && off < e.logical + e.len)
        .expect("allocated");
    e.physical + (off - e.logical)
}

#[test]
fn fsdax_sectors_map_to_pool_offsets_through_the_file_extents() {
    let dir = tempfile::tempdir().unwrap();
    let path = pool_file(dir.path());
    let file = std::fs::File::open(&path).unwrap();
    if ferrite_pmem::map::file_extents(&file).is_err() {
        eprintln!("skipped: the file system does not report extents (FIEMAP)");
        return;
    }
    let dev = file.metadata().unwrap().dev();
    let (maj, min) = (libc::major(dev), libc::minor(dev));
    // Two bad ranges inside the pool: 2 sectors at pool offset 64 KiB and
    // 1 sector at 300 KiB + 512; one far outside it.
    let a = physical(&file, 64 << 10) / SECTOR;
    let b = physical(&file, (300 << 10) + 512) / SECTOR;
    for partition_start in [None, Some(2048u64)] {
        let fake = tempfile::tempdir().unwrap();
        let disk = fake.path().join("devices/virtual/nd/region0/pmem0");
        std::fs::create_dir_all(&disk).unwrap();
        let shift = partition_start.unwrap_or(0);
        std::fs::write(
            disk.join("badblocks"),
            format!("{} 2\n{} 1\n{} 8\n", a + shift, b + shift, 1u64 << 40),
        )
        .unwrap();
        let target = match partition_start {
            None => disk.clone(),
            Some(s) => {
                let p = disk.join("pmem0p1");
                std::fs::create_dir_all(&p).unwrap();
                std::fs::write(p.join("partition"), "1\n").unwrap();
                std::fs::write(p.join("start"), format!("{s}\n")).unwrap();
                p
            }
        };
        mkdir_link(fake.path(), &format!("dev/block/{maj}:{min}"), &target);
        let pool = Pool::open(&path, &PoolOptions::new("bb", 0).sysfs_root(fake.path())).unwrap();
        let bb = pool.bad_blocks().unwrap().expect("a list");
        assert_eq!(bb.source, disk.canonicalize().unwrap().join("badblocks"));
        // Sector-aligned on the device; the file's extents are block
        // aligned, so the pool offsets are the sectors' own.
        assert_eq!(
            bb.ranges,
            vec![
                BadRange {
                    offset: 64 << 10,
                    len: 1024
                },
                BadRange {
                    offset: (300 << 10) + 512,
                    len: 512
                },
            ],
            "partition {partition_start:?}"
        );
        pool.close().unwrap();
    }
    // An empty list: a list, with no range.
    let fake = tempfile::tempdir().unwrap();
    let disk = fake.path().join("devices/pmem1");
    std::fs::create_dir_all(&disk).unwrap();
    std::fs::write(disk.join("badblocks"), "").unwrap();
    mkdir_link(fake.path(), &format!("dev/block/{maj}:{min}"), &disk);
    let pool = Pool::open(&path, &PoolOptions::new("bb", 0).sysfs_root(fake.path())).unwrap();
    assert!(pool.bad_blocks().unwrap().unwrap().ranges.is_empty());
    pool.close().unwrap();
}

#[test]
fn a_device_without_a_list_says_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = pool_file(dir.path());
    // A fake tree without the device, and one whose disk has no list.
    let empty = tempfile::tempdir().unwrap();
    let pool = Pool::open(&path, &PoolOptions::new("bb", 0).sysfs_root(empty.path())).unwrap();
    assert_eq!(pool.bad_blocks().unwrap(), None);
    pool.close().unwrap();
    let dev = std::fs::metadata(&path).unwrap().dev();
    let disk = empty.path().join("devices/vda");
    std::fs::create_dir_all(&disk).unwrap();
    mkdir_link(
        empty.path(),
        &format!("dev/block/{}:{}", libc::major(dev), libc::minor(dev)),
        &disk,
    );
    let pool = Pool::open(&path, &PoolOptions::new("bb", 0).sysfs_root(empty.path())).unwrap();
    assert_eq!(pool.bad_blocks().unwrap(), None);
    pool.close().unwrap();
}

#[test]
fn devdax_region_sectors_map_to_device_offsets() {
    let fake = tempfile::tempdir().unwrap();
    let region = fake
        .path()
        .join("devices/platform/e820_pmem/ndbus0/region0");
    let nd_dax = region.join("dax0.1");
    let chr = nd_dax.join("dax0.0");
    std::fs::create_dir_all(&chr).unwrap();
    std::fs::write(region.join("resource"), "0x100000000\n").unwrap();
    // The namespace's data starts 2 MiB into the region.
    std::fs::write(nd_dax.join("resource"), "0x100200000\n").unwrap();
    // 10 2: before the namespace; 4100 8: 2048 bytes into it; 4095 2: straddles its start.
    std::fs::write(region.join("badblocks"), "10 2\n4100 8\n4095 2\n").unwrap();
    mkdir_link(fake.path(), "dev/char/252:0", &chr);
    let probe = Probe {
        root: fake.path().to_path_buf(),
    };
    let (source, dev) = badblocks::devdax_ranges(&probe, 252, 0).unwrap().unwrap();
    assert_eq!(source, region.canonicalize().unwrap().join("badblocks"));
    assert_eq!(dev, vec![(2048, 2048 + 4096), (0, 512)]);
    // Another char device (not under an nd region) lists nothing.
    let other = fake.path().join("devices/virtual/mem/null");
    std::fs::create_dir_all(&other).unwrap();
    mkdir_link(fake.path(), "dev/char/1:3", &other);
    assert!(badblocks::devdax_ranges(&probe, 1, 3).unwrap().is_none());
    assert!(badblocks::devdax_ranges(&probe, 9, 9).unwrap().is_none());
}
