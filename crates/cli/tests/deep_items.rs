//! `ferrite pool check --deep` on a server pool (`ferrite serve --store
//! tx-undo`) lists every item whose checksum fails, by key, and exits 1;
//! the intact pool is clean.

use ferrite_pmem::{Domain, Pool, PoolOptions};
use ferrite_server::protocol::{StoreMode, StoreOpts};
use ferrite_server::store::{Cache, Shared, Store, tx};
use ferrite_tx::Strategy;
use std::process::Command;

fn deep(path: &std::path::Path) -> (i32, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["pool", "check", "--deep"])
        .arg(path)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

#[test]
fn the_deep_check_lists_each_damaged_server_item() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.pool");
    {
        let pool = Pool::create(
            &path,
            &PoolOptions::new("ferrite-serve-tx", 24 << 20).domain(Domain::Adr),
        )
        .unwrap();
        let txp = tx::create(&pool, Strategy::Undo, 4).unwrap();
        let map = tx::map(&txp).unwrap();
        let mut kv = tx::TxKv::new(&map).unwrap();
        let sh = Shared::open(&mut kv, 1 << 20).unwrap();
        let mut c = Cache::new(kv, &sh);
        for i in 0..50 {
            let v = format!("value number {i} of the deep check test");
            c.store(
                StoreMode::Set,
                format!("key{i}").as_bytes(),
                0,
                0,
                v.as_bytes(),
                None,
                &StoreOpts::default(),
                1_800_000_000,
            )
            .unwrap();
        }
        drop(c);
        drop(map);
        drop(txp);
        pool.close().unwrap();
    }
    let (code, out) = deep(&path);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("server items: 50 verified, 0 damaged"),
        "{out}"
    );
    let mut img = std::fs::read(&path).unwrap();
    for i in [7, 31] {
        let needle = format!("value number {i} of");
        let at = img
            .windows(needle.len())
            .position(|w| w == needle.as_bytes())
            .unwrap();
        img[at + 3] ^= 0x20;
    }
    std::fs::write(&path, &img).unwrap();
    let (code, out) = deep(&path);
    assert_eq!(code, 1, "{out}");
    for k in ["key7", "key31"] {
        assert!(
            out.contains(&format!("server: item '{k}': checksum mismatch")),
            "{out}"
        );
    }
    assert!(out.contains("2 findings"), "{out}");
    assert!(
        out.contains("server items: 48 verified, 2 damaged"),
        "{out}"
    );
}

/// The kernel's bad blocks under a pool file (a fake sysfs tree through
/// `FERRITE_SYSFS_ROOT`) are findings with the pool offsets they hit;
/// without a list the check says nothing of them.
#[test]
fn the_deep_check_lists_bad_blocks_under_the_pool() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bb.pool");
    {
        let pool =
            Pool::create(&path, &PoolOptions::new("bb", 1 << 20).domain(Domain::Adr)).unwrap();
        pool.close().unwrap();
    }
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    for off in (8192..1u64 << 20).step_by(4096) {
        f.write_all_at(&[1u8; 4096], off).unwrap();
    }
    f.sync_all().unwrap();
    let Ok(ext) = ferrite_pmem::map::file_extents(&f) else {
        eprintln!("skipped: no FIEMAP on this file system");
        return;
    };
    let at = 0x40000u64;
    let e = ext
        .iter()
        .find(|e| at >= e.logical && at < e.logical + e.len)
        .unwrap();
    let sector = (e.physical + at - e.logical) / 512;
    let fake = tempfile::tempdir().unwrap();
    let disk = fake.path().join("devices/nd/pmem0");
    std::fs::create_dir_all(&disk).unwrap();
    std::fs::write(disk.join("badblocks"), format!("{sector} 4\n")).unwrap();
    let dev = f.metadata().unwrap().dev();
    let link = fake.path().join(format!(
        "dev/block/{}:{}",
        libc::major(dev),
        libc::minor(dev)
    ));
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&disk, &link).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["pool", "check", "--deep"])
        .arg(&path)
        .env("FERRITE_SYSFS_ROOT", fake.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("pool: bytes 0x40000..0x40800 (2048 B) lie on a bad block the kernel lists"),
        "{out}"
    );
    let (code, out) = deep(&path);
    assert!(!out.contains("bad block"), "{out}");
    assert_eq!(code, 0, "{out}");
}
