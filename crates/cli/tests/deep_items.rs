//! `ferrite pool check --deep` on a server pool (`ferrite serve --store
//! tx-undo`) lists every item whose checksum fails, by key, and exits 1;
//! the intact pool is clean.

use ferrite_pmem::{Domain, Pool, PoolOptions};
use ferrite_server::protocol::{StoreMode, StoreOpts};
use ferrite_server::store::{Cache, Kv, Shared, Store, tx};
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
    fill(&path, 50);
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
    // --repair removes the two damaged items, by name, and leaves the
    // pool clean with the other 48 intact.
    let (code, out) = run(&path, &["--repair"]);
    assert_eq!(code, 0, "{out}");
    for k in ["key7", "key31"] {
        assert!(
            out.contains(&format!(
                "repaired: server: item '{k}' removed (checksum mismatch)"
            )),
            "{out}"
        );
    }
    let (code, out) = deep(&path);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("server items: 48 verified, 0 damaged"),
        "{out}"
    );
    let values = items(&path);
    assert_eq!(values.len(), 48);
    for (k, v) in &values {
        let i: usize = k.strip_prefix("key").unwrap().parse().unwrap();
        assert_eq!(v, &format!("value number {i} of the deep check test"));
    }
}

/// An item whose map key itself was damaged lies where the map's lookup
/// of that key does not look (its hash is the old key's): `--repair`
/// removes the other damaged item, names this one as not removed, says
/// why, and exits 1; the check then lists only that one.
#[test]
fn repair_names_an_item_it_cannot_remove() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.pool");
    fill(&path, 20);
    let mut img = std::fs::read(&path).unwrap();
    // A value byte of key3's item, and the first byte of key12's map key
    // (`k` + client key, stored beside the item in the map's record).
    let at = position(&img, b"value number 3 of");
    img[at + 3] ^= 0x20;
    let at = position(&img, b"kkey12");
    img[at + 1] ^= 0x01;
    std::fs::write(&path, &img).unwrap();
    let (code, out) = run(&path, &["--repair"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("repaired: server: item 'key3' removed (checksum mismatch)"),
        "{out}"
    );
    assert!(
        out.contains("not repaired: server: item 'jey12'")
            && out.contains("the map does not find it by its key"),
        "{out}"
    );
    let (code, out) = deep(&path);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("server items: 18 verified, 1 damaged"),
        "{out}"
    );
    assert!(out.contains("1 finding"), "{out}");
}

fn position(img: &[u8], needle: &[u8]) -> usize {
    img.windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("{} not in the pool", needle.escape_ascii()))
}

fn run(path: &std::path::Path, extra: &[&str]) -> (i32, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["pool", "check", "--deep"])
        .args(extra)
        .arg(path)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
    )
}

/// The items of the server pool at `path`, by client key (through the
/// server's own reads, so a damaged one would be an error here).
fn items(path: &std::path::Path) -> Vec<(String, String)> {
    let pool = Pool::open(path, &PoolOptions::new("ferrite-serve-tx", 0)).unwrap();
    let txp = tx::open(&pool).unwrap();
    let map = tx::map(&txp).unwrap();
    let mut kv = tx::TxKv::new(&map).unwrap();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    kv.scan_prefix(b"kkey", &mut |k, _| keys.push(k[1..].to_vec()))
        .unwrap();
    let sh = Shared::open(&mut kv, 1 << 20).unwrap();
    let mut c = Cache::new(kv, &sh);
    let mut out = Vec::new();
    for k in keys {
        let v = c.get(&k, 1_800_000_000).unwrap().unwrap();
        out.push((
            String::from_utf8(k).unwrap(),
            String::from_utf8(v.data).unwrap(),
        ));
    }
    drop(c);
    drop(map);
    drop(txp);
    pool.close().unwrap();
    out
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

/// A `tx-undo` server pool at `path` holding `key0..key{n-1}`.
fn fill(path: &std::path::Path, n: usize) {
    {
        let pool = Pool::create(
            path,
            &PoolOptions::new("ferrite-serve-tx", 24 << 20).domain(Domain::Adr),
        )
        .unwrap();
        let txp = tx::create(&pool, Strategy::Undo, 4).unwrap();
        let map = tx::map(&txp).unwrap();
        let mut kv = tx::TxKv::new(&map).unwrap();
        let sh = Shared::open(&mut kv, 1 << 20).unwrap();
        let mut c = Cache::new(kv, &sh);
        for i in 0..n {
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
}
