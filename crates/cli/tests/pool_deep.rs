//! `ferrite pool check --deep`: real pools made by the real components,
//! checked clean, then corrupted one way at a time; every corruption must
//! be reported by its own line, and no input may make the command panic
//! or write to the pool.

use ferrite_alloc::PAllocator;
use ferrite_blocks::log::{Algorithm, Layout, Log, Variant};
use ferrite_engine::{AllocKind, EngineKind, Store, StoreOptions};
use ferrite_pmem::{Pool, PoolOptions};
use ferrite_ptm::{Ptm, PtmOptions};
use ferrite_tx::{Inputs, Strategy, Tx, TxFunc, TxOptions, TxPool};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

const DATA: usize = 4096;

/// Runs `ferrite pool check PATH --deep [extra…]`: (exit code, stdout).
fn deep(path: &Path, extra: &[&str]) -> (i32, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["pool", "check"])
        .arg(path)
        .arg("--deep")
        .args(extra)
        .output()
        .expect("run ferrite");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let code = o.status.code().unwrap_or(-1);
    assert!(
        code == 0 || code == 1,
        "exit {code} (a panic is 101)\nstdout:\n{out}\nstderr:\n{err}"
    );
    (code, out)
}

/// Asserts the pool is clean and returns the output.
fn clean(path: &Path) -> String {
    let (code, out) = deep(path, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(": clean ("), "{out}");
    out
}

/// Asserts exit 1 and a finding line starting with `PATH: prefix` and
/// containing `contains`; returns the output.
fn finds(path: &Path, prefix: &str, contains: &str) -> String {
    let (code, out) = deep(path, &[]);
    assert_eq!(code, 1, "{out}");
    let want = format!("{}: {prefix}", path.display());
    assert!(
        out.lines()
            .any(|l| l.starts_with(&want) && l.contains(contains)),
        "no line starting with {want:?} containing {contains:?} in:\n{out}"
    );
    out
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

/// A copy of `src` at `dir/name` with `f` applied to its bytes.
fn variant(src: &Path, name: &str, f: impl FnOnce(&mut Vec<u8>)) -> PathBuf {
    let mut b = read(src);
    f(&mut b);
    let p = src.with_file_name(name);
    std::fs::write(&p, &b).unwrap();
    p
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn make_store(dir: &Path, kind: EngineKind, alloc: AllocKind) -> PathBuf {
    let path = dir.join(format!("{kind}-{alloc}.pool"));
    let store = Store::create_file(
        &path,
        16 << 20,
        &StoreOptions::new(kind).allocator(alloc).sessions(2),
    )
    .unwrap();
    {
        let mut s = store.session().unwrap();
        for i in 0..300 {
            s.put(&key(i), &vec![i as u8; 50 + (i as usize % 200)])
                .unwrap();
        }
        for i in 0..50 {
            s.delete(&key(i * 3)).unwrap();
        }
    }
    store.close().unwrap();
    path
}

#[test]
fn engines_clean_then_every_planted_corruption_is_found() {
    let dir = tempfile::tempdir().unwrap();
    for kind in EngineKind::ALL {
        for alloc in AllocKind::ALL {
            let path = make_store(dir.path(), kind, alloc);
            let out = clean(&path);
            assert!(out.contains("250 keys"), "{out}");
            let before = read(&path);
            let tag = format!("{kind}-{alloc}");

            // 1. A flipped checksum byte of the engine superblock.
            let p = variant(&path, &format!("{tag}-sbcrc.pool"), |b| b[DATA + 60] ^= 1);
            finds(&p, "engine: superblock: ", "checksum mismatch");

            // 2. Garbage in the heap's superblock.
            let heap_off = u64_at(&before, DATA + 24) as usize;
            let p = variant(&path, &format!("{tag}-heapsb.pool"), |b| {
                b[DATA + heap_off + 16..DATA + heap_off + 24].fill(0xee)
            });
            finds(&p, "heap: does not open: ", "");

            // 3. Truncated file.
            let p = variant(&path, &format!("{tag}-trunc.pool"), |b| {
                b.truncate(b.len() / 2)
            });
            finds(&p, "pool: ", "truncated");

            // 4. A leaked block: allocated, never linked.
            let p = dir.path().join(format!("{tag}-leak.pool"));
            std::fs::copy(&path, &p).unwrap();
            let leaked = {
                let s = Store::open_file(&p, &StoreOptions::new(kind)).unwrap();
                let off = s.allocator().thread().unwrap().alloc(200, None).unwrap();
                s.close().unwrap();
                off.raw()
            };
            let out = finds(
                &p,
                &format!("heap: block {leaked:#x} ("),
                "B) allocated but unreachable",
            );
            // Leaks are reported, never freed by --repair.
            let (code, rep) = deep(&p, &["--repair"]);
            assert_eq!(code, 1, "{rep}");
            assert!(rep.contains("not repaired: heap: 1 leaked block"), "{rep}");
            assert!(rep.contains(&format!("block {leaked:#x}")), "{rep}");
            drop(out);

            // 5. A reference to a free block: free a block the store
            //    still references (the largest-offset one the walk finds).
            let p = dir.path().join(format!("{tag}-dangling.pool"));
            std::fs::copy(&path, &p).unwrap();
            let freed = {
                let s = Store::open_file(&p, &StoreOptions::new(kind)).unwrap();
                let w = s.walk().unwrap();
                let &(off, _) = w.blocks.iter().max().unwrap();
                s.allocator()
                    .thread()
                    .unwrap()
                    .free(ferrite_pmem::POff::new(off), None)
                    .unwrap();
                s.close().unwrap();
                off
            };
            let (code, out) = deep(&p, &[]);
            assert_eq!(code, 1, "{out}");
            let named = format!("{freed:#x}");
            assert!(
                out.lines().any(|l| l.contains(&named)
                    && (l.contains("referenced but free") || l.contains("not an allocated block"))),
                "{tag}: freed {named}:\n{out}"
            );

            // 6. A flipped byte in the first block the walk reaches (the
            //    tree's root or the manifest: checksummed, or a magic
            //    cross-checked). Damaged records: the test below.
            let p = dir.path().join(format!("{tag}-node.pool"));
            std::fs::copy(&path, &p).unwrap();
            let node = {
                let s = Store::open_file(&p, &StoreOptions::new(kind)).unwrap();
                let w = s.walk().unwrap();
                let first = w.blocks[0].0;
                s.close().unwrap();
                first
            };
            let p2 = variant(&p, &format!("{tag}-node2.pool"), |b| {
                b[node as usize + 9] ^= 0x55
            });
            let (code, out) = deep(&p2, &[]);
            assert_eq!(
                code, 1,
                "{tag}: a flipped byte at {node:#x}+9 went unnoticed:\n{out}"
            );

            // The check never wrote to the pool.
            assert_eq!(read(&path), before, "{tag}: the check modified the pool");
        }
    }
}

// ---- transactional pools and their structures ---------------------------

static MEDIUM: Mutex<Option<std::sync::Arc<ferrite_pmem::Medium>>> = Mutex::new(None);
static SNAPSHOT: Mutex<Option<Vec<u8>>> = Mutex::new(None);

/// Overwrites the first 8 bytes of the blocks named in its arguments, then
/// copies the whole pool: an image as a crash mid-transaction leaves it
/// (every undo record of an undo transaction is durable before the write
/// it covers).
fn snap_body(tx: &mut Tx<'_, '_>, inputs: &Inputs<'_>) -> ferrite_tx::Result<u64> {
    for c in inputs.args().chunks(8) {
        let off = u64::from_le_bytes(c.try_into().unwrap());
        tx.write_u64(ferrite_pmem::POff::new(off + 8), 0xdead_beef)?;
    }
    let m = MEDIUM.lock().unwrap().clone().unwrap();
    let mut img = vec![0u8; m.map().len()];
    m.map().read(0, &mut img);
    *SNAPSHOT.lock().unwrap() = Some(img);
    Ok(0)
}

static SNAP: TxFunc = TxFunc {
    id: 0x7e57_0001,
    name: "pool_deep::snap",
    body: snap_body,
};

fn tx_pool(dir: &Path, s: ferrite_ds::Structure) -> PathBuf {
    let path = dir.join(format!("tx-{s}.pool"));
    let pool = Pool::create(&path, &PoolOptions::new("deep-tx", 16 << 20)).unwrap();
    let opts = TxOptions::new(Strategy::Undo).slots(2);
    let txp = TxPool::create(&pool, &opts, ferrite_ds::registry()).unwrap();
    {
        let mut th = txp.thread().unwrap();
        let map = ferrite_ds::create(s, &mut th, ferrite_ds::DsOptions::default()).unwrap();
        for k in 0..60 {
            map.insert(&mut th, k, &[k as u8; 256]).unwrap();
        }
        for k in 0..10 {
            map.remove(&mut th, k * 5).unwrap();
        }
    }
    drop(txp);
    pool.close().unwrap();
    path
}

#[test]
fn transactional_pools_clean_then_every_planted_corruption_is_found() {
    let dir = tempfile::tempdir().unwrap();
    for s in ferrite_ds::Structure::ALL {
        let path = tx_pool(dir.path(), s);
        let out = clean(&path);
        assert!(out.contains(&format!("holding a {s}: 50 keys")), "{out}");
        let before = read(&path);
        let sb = u64_at(&before, 128) as usize;
        let slot0 = sb + ferrite_tx::format::SLOTS_REL as usize;

        // Checksum byte of the superblock.
        let p = variant(&path, &format!("{s}-sbcrc.pool"), |b| b[sb + 61] ^= 4);
        finds(&p, "tx: superblock: ", "checksum mismatch");
        // Garbage in a slot header's reserved bytes.
        let p = variant(&path, &format!("{s}-slot.pool"), |b| b[slot0 + 40] = 0x99);
        finds(
            &p,
            "tx: slot 0: ",
            "reserved byte 40 of the header line is 0x99",
        );
        // A slot header whose `done` word went back: committed undo
        // transactions now look interrupted, and recovery would roll
        // them back over later data.
        let p = variant(&path, &format!("{s}-done.pool"), |b| {
            b[slot0..slot0 + 8].fill(0)
        });
        finds(
            &p,
            "tx: slot 0: interrupted undo transaction",
            "recovery would roll it back",
        );
        // Truncated.
        let p = variant(&path, &format!("{s}-trunc.pool"), |b| b.truncate(8192));
        finds(&p, "pool: ", "truncated");

        // A leak: a block allocated through the heap, never linked.
        let p = dir.path().join(format!("{s}-leak.pool"));
        std::fs::copy(&path, &p).unwrap();
        let leaked = {
            let pool = Pool::open(&p, &PoolOptions::new("deep-tx", 0)).unwrap();
            let txp = TxPool::open(&pool, ferrite_ds::registry(), None).unwrap();
            let off = txp.heap().thread().unwrap().alloc(100, None).unwrap();
            drop(txp);
            pool.close().unwrap();
            off.raw()
        };
        finds(
            &p,
            &format!("heap: block {leaked:#x} ("),
            "B) allocated but unreachable",
        );

        // A reference to a free block: free one the structure still uses.
        let p = dir.path().join(format!("{s}-dangling.pool"));
        std::fs::copy(&path, &p).unwrap();
        let victim = {
            let pool = Pool::open(&p, &PoolOptions::new("deep-tx", 0)).unwrap();
            let txp = TxPool::open(&pool, ferrite_ds::registry(), None).unwrap();
            let victim = {
                let map = ferrite_ds::open(s, &txp, txp.root()).unwrap();
                let shape = map.shape().unwrap();
                shape
                    .blocks
                    .iter()
                    .map(|b| b.0)
                    .filter(|&o| o != txp.root())
                    .max()
                    .unwrap()
            };
            txp.heap()
                .thread()
                .unwrap()
                .free(ferrite_pmem::POff::new(victim), None)
                .unwrap();
            drop(txp);
            pool.close().unwrap();
            victim
        };
        // The structure's walk checks each block it follows, or the
        // comparison with the heap finds it.
        let (code, out) = deep(&p, &[]);
        assert_eq!(code, 1, "{out}");
        let named = format!("block {victim:#x}");
        assert!(
            out.lines().any(|l| l.contains(&named)
                && (l.contains("referenced but free") || l.contains("not an allocated block"))),
            "{s}: freed {named}:\n{out}"
        );

        // A transaction interrupted mid-way (an image taken inside it):
        // reported with its log, rolled back by --repair.
        let p = dir.path().join(format!("{s}-crash.pool"));
        std::fs::copy(&path, &p).unwrap();
        let image = {
            let pool = Pool::open(&p, &PoolOptions::new("deep-tx", 0)).unwrap();
            let mut reg = ferrite_ds::registry();
            reg.register(&SNAP).unwrap();
            let txp = TxPool::open(&pool, reg, None).unwrap();
            let targets: Vec<u64> = {
                let map = ferrite_ds::open(s, &txp, txp.root()).unwrap();
                let mut b: Vec<u64> = map.shape().unwrap().blocks.iter().map(|b| b.0).collect();
                b.sort_unstable();
                b.into_iter().rev().take(2).collect()
            };
            let args: Vec<u8> = targets.iter().flat_map(|t| t.to_le_bytes()).collect();
            *MEDIUM.lock().unwrap() = Some(pool.medium().clone());
            txp.thread().unwrap().run(&SNAP, &args, &[]).unwrap();
            *MEDIUM.lock().unwrap() = None;
            drop(txp);
            drop(pool);
            SNAPSHOT.lock().unwrap().take().unwrap()
        };
        std::fs::write(&p, &image).unwrap();
        let out = finds(
            &p,
            "tx: slot 0: interrupted undo transaction",
            "2 records, log ends at byte",
        );
        assert!(out.contains("recovery would roll it back"), "{out}");
        // A truncated log record: the last one's payload torn.
        let area = |out: &str| -> (u8, usize) {
            let l = out
                .lines()
                .find(|l| l.contains("interrupted undo transaction"))
                .unwrap();
            let a = l.split("area ").nth(1).unwrap();
            let n: u8 = a[..1].parse().unwrap();
            let end = l.split("log ends at byte 0x").nth(1).unwrap();
            let end = usize::from_str_radix(
                end.split(|c: char| !c.is_ascii_hexdigit()).next().unwrap(),
                16,
            )
            .unwrap();
            (n, end)
        };
        let (a, end) = area(&out);
        let area_bytes =
            u64::from_le_bytes(image[sb + 16..sb + 24].try_into().unwrap()) as u32 as usize;
        let area_off = slot0 + 64 + a as usize * area_bytes;
        let torn = variant(&p, &format!("{s}-torn.pool"), |b| {
            b[area_off + end - 8] ^= 0xff
        });
        finds(
            &torn,
            "tx: slot 0: interrupted undo transaction",
            "1 record, log ends at byte",
        );
        // --repair rolls the transaction back; the pool is then clean.
        let (code, rep) = deep(&p, &["--repair"]);
        assert_eq!(code, 0, "{rep}");
        assert!(
            rep.contains("repaired: tx: rolled back 1 undo transaction"),
            "{rep}"
        );
        assert!(rep.contains(": clean ("), "{rep}");
        assert!(rep.contains(&format!("holding a {s}: 50 keys")), "{rep}");

        assert_eq!(read(&path), before, "{s}: the check modified the pool");
    }
}

// ---- PTM --------------------------------------------------------------------

#[test]
fn ptm_pools_clean_then_every_planted_corruption_is_found() {
    let dir = tempfile::tempdir().unwrap();
    for alg in ferrite_ptm::Algorithm::ALL {
        let path = dir.path().join(format!("ptm-{alg}.pool"));
        let pool = Pool::create(&path, &PoolOptions::new("ferrite-serve-ptm", 16 << 20)).unwrap();
        let opts = PtmOptions::new(alg).slots(2).log_bytes(4096);
        drop(Ptm::create(&pool, &opts).unwrap());
        pool.close().unwrap();
        let out = clean(&path);
        assert!(out.contains("PTM pool (2 slots"), "{out}");
        let before = read(&path);
        let sb = ferrite_ptm::format::SB_OFF as usize;
        let slot1 = {
            let raw: [u8; 64] = before[sb..sb + 64].try_into().unwrap();
            ferrite_ptm::format::Superblock::decode(&raw, before.len() as u64)
                .unwrap()
                .slot_off(1) as usize
        };
        // Garbage in the superblock.
        let p = variant(&path, &format!("{alg}-sb.pool"), |b| {
            b[sb + 24..sb + 28].fill(0xab)
        });
        finds(&p, "ptm: superblock: ", "");
        // A slot header in an unknown state, and one with reserved garbage.
        let p = variant(&path, &format!("{alg}-state.pool"), |b| b[slot1] |= 3);
        finds(&p, "ptm: slot 1: ", "unknown status word");
        let p = variant(&path, &format!("{alg}-rsv.pool"), |b| b[slot1 + 30] = 1);
        finds(&p, "ptm: slot 1: ", "reserved byte 30");
        // A slot left mid-commit: reported, and --repair finishes it.
        let p = variant(&path, &format!("{alg}-busy.pool"), |b| {
            let st = if alg == ferrite_ptm::Algorithm::Eager {
                1
            } else {
                2
            };
            b[slot1..slot1 + 8].copy_from_slice(&ferrite_ptm::format::status(9, st).to_le_bytes())
        });
        finds(&p, "ptm: slot 1: ", "recovery would");
        let (code, rep) = deep(&p, &["--repair"]);
        assert_eq!(code, 0, "{rep}");
        let did = if alg == ferrite_ptm::Algorithm::Eager {
            "repaired: ptm: rolled back 1 undo log"
        } else {
            "repaired: ptm: discarded 1 uncommitted redo log"
        };
        assert!(rep.contains(did), "{rep}");
        // The heap's superblock checksum.
        let heap_off = u64_at(&before, sb + 32) as usize;
        let p = variant(&path, &format!("{alg}-heap.pool"), |b| {
            b[heap_off + 60] ^= 0x80
        });
        finds(&p, "heap: does not open: ", "checksum");
        assert_eq!(read(&path), before);
    }
}

// ---- logs and the page store -------------------------------------------------

#[test]
fn logs_clean_then_a_torn_record_and_a_bad_superblock_are_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.pool");
    let pool = Pool::create(&path, &PoolOptions::new("deep-log", 1 << 20)).unwrap();
    let region = pool.data().sub(0, 64 << 10).unwrap();
    let mut log = Log::create(
        region,
        Variant::new(Algorithm::PopLog, Layout::Packed).unwrap(),
    )
    .unwrap();
    let mut ends = Vec::new();
    for i in 0..10u8 {
        log.append(&[i + 1; 100]).unwrap();
        ends.push(log.used_bytes());
    }
    let data_off = DATA + log.region().len() - log.capacity() as usize;
    drop(log);
    pool.close().unwrap();
    let out = clean(&path);
    assert!(out.contains("valid prefix of 10 records"), "{out}");
    // The last record torn: the prefix ends one record earlier and
    // recovery would scrub the torn bytes.
    let last = data_off + ends[8] as usize + 40;
    let p = variant(&path, "log-torn.pool", |b| b[last] ^= 0x01);
    let out = finds(&p, "log: ", "not closed cleanly");
    assert!(out.contains("valid prefix of 9 records"), "{out}");
    let (code, rep) = deep(&p, &["--repair"]);
    assert_eq!(code, 0, "{rep}");
    assert!(rep.contains("repaired: log: recovered, 9 records"), "{rep}");
    // Garbage in the superblock.
    let p = variant(&path, "log-sb.pool", |b| b[DATA + 24] ^= 0x10);
    finds(&p, "log: does not open: ", "");
}

// ---- usage and random damage -------------------------------------------------

#[test]
fn usage_errors_exit_2_and_json_is_one_object() {
    let o = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["pool", "check", "x.pool", "--repair"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let dir = tempfile::tempdir().unwrap();
    let path = make_store(dir.path(), EngineKind::Lsm, AllocKind::Ferrite);
    let (code, out) = deep(&path, &["--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["clean"], true);
    assert_eq!(v["findings"].as_array().unwrap().len(), 0);
}

/// xorshift64*: a reproducible stream without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn random_metadata_damage_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let mut pools = vec![
        make_store(dir.path(), EngineKind::Cow, AllocKind::Ferrite),
        make_store(dir.path(), EngineKind::Inp, AllocKind::Lock),
        make_store(dir.path(), EngineKind::Lsm, AllocKind::Ferrite),
        tx_pool(dir.path(), ferrite_ds::Structure::BpTree),
    ];
    let ptm = dir.path().join("ptm.pool");
    let pool = Pool::create(&ptm, &PoolOptions::new("ferrite-serve-ptm", 8 << 20)).unwrap();
    drop(
        Ptm::create(
            &pool,
            &PtmOptions::new(ferrite_ptm::Algorithm::Lazy)
                .slots(2)
                .log_bytes(4096),
        )
        .unwrap(),
    );
    pool.close().unwrap();
    pools.push(ptm);
    let runs: usize = std::env::var("FERRITE_DEEP_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let (mut found, mut passed) = (0, 0);
    for i in 0..runs {
        let src = &pools[i % pools.len()];
        let img = read(src);
        // Metadata: the first 128 KiB of the data area (superblocks,
        // engine areas, slots, logs) and the heap's first 64 KiB (its
        // superblock, lanes and descriptors), when it has one there.
        let heap = if i % pools.len() < 3 {
            DATA + u64_at(&img, DATA + 24) as usize
        } else {
            DATA
        };
        let p = variant(src, "random.pool", |b| {
            for _ in 0..1 + rng.below(4) {
                let off = if rng.below(2) == 0 {
                    DATA + rng.below(128 << 10)
                } else {
                    heap + rng.below(64 << 10)
                };
                let off = off.min(b.len() - 1);
                b[off] ^= 1 << rng.below(8);
            }
        });
        let (code, _) = deep(&p, &[]);
        if code == 1 {
            found += 1;
        } else {
            passed += 1;
        }
    }
    eprintln!(
        "random damage: {runs} runs, {found} with findings, {passed} clean (flips in unused bytes)"
    );
    assert!(found > runs / 4, "only {found} of {runs} corruptions found");
}

// ---- crash images -------------------------------------------------------------

/// Runs a few atomic batches on the store image `img` on the crash
/// simulator, crashing at fence `at` (none: run to the end). Returns the
/// post-crash image (in-flight lines surviving by `seed`) and the fences
/// the run issued.
fn crash_engine(
    kind: EngineKind,
    img: &[u8],
    at: Option<u64>,
    seed: u64,
) -> (Option<Vec<u8>>, u64) {
    use ferrite_crash::{CrashAt, SimMedium};
    use std::panic::{AssertUnwindSafe, catch_unwind};
    let sim = std::sync::Arc::new(SimMedium::new(
        ferrite_pmem::Domain::Adr,
        false,
        img.to_vec(),
        at.map(CrashAt::Fence),
    ));
    let pool = Pool::open_image(
        img,
        &PoolOptions::new(ferrite_engine::LAYOUT, 0),
        ferrite_pmem::Domain::Adr,
        Some(sim.clone()),
    )
    .unwrap();
    let opts = ferrite_engine::checks::check_options(
        kind,
        AllocKind::Ferrite,
        ferrite_engine::Fault::None,
    );
    let r = catch_unwind(AssertUnwindSafe(|| {
        let s = Store::open(&pool, &opts).unwrap();
        let mut sess = s.session().unwrap();
        for i in 0..6u32 {
            let v = vec![i as u8; 300];
            let (k1, k2) = (key(1000 + i), key(3 * i + 1));
            sess.batch(&[
                ferrite_engine::Op::Put {
                    key: &k1,
                    value: &v,
                },
                ferrite_engine::Op::Delete { key: &k2 },
            ])
            .unwrap();
        }
        drop(sess);
        s.quiesce().unwrap();
    }));
    let fences = sim.counts().fences;
    match r {
        Ok(()) => (None, fences),
        Err(p) if p.is::<ferrite_crash::sim::Crashed>() => (
            Some(sim.take_captured().unwrap().build_seeded(seed)),
            fences,
        ),
        Err(p) => std::panic::resume_unwind(p),
    }
}

#[test]
fn engine_crash_images_show_only_what_recovery_fixes_and_repair_cleans_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut with_findings = 0;
    for kind in EngineKind::ALL {
        let base = make_store(dir.path(), kind, AllocKind::Ferrite);
        let img = read(&base);
        let (_, fences) = crash_engine(kind, &img, None, 0);
        assert!(fences > 4, "{kind}: {fences} fences");
        for n in 1..=8u64 {
            let at = 1 + (fences - 1) * n / 8;
            let (Some(crashed), _) = crash_engine(kind, &img, Some(at), n) else {
                continue;
            };
            let p = dir.path().join(format!("{kind}-crash{n}.pool"));
            std::fs::write(&p, &crashed).unwrap();
            let (code, out) = deep(&p, &["--json"]);
            let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
            for f in v["findings"].as_array().unwrap() {
                let k = f["kind"].as_str().unwrap();
                assert!(
                    k == "engine-recovery" || k == "heap-replay",
                    "{kind} crashed at fence {at}: a crash state must need only recovery, found {f}"
                );
            }
            if code == 1 {
                with_findings += 1;
                let (code, rep) = deep(&p, &["--repair"]);
                assert_eq!(code, 0, "{kind} crashed at fence {at}: repair left:\n{rep}");
                assert!(rep.contains("repaired: engine: recovery ran: "), "{rep}");
            }
        }
    }
    eprintln!("{with_findings} crash images needed recovery");
    assert!(with_findings > 0, "no crash image needed recovery");
}

/// [`crash_engine`] for a transactional pool holding structure `s`,
/// running inserts and removes under `strategy`.
fn crash_tx(
    s: ferrite_ds::Structure,
    strategy: Strategy,
    img: &[u8],
    at: Option<u64>,
    seed: u64,
) -> (Option<Vec<u8>>, u64) {
    use ferrite_crash::{CrashAt, SimMedium};
    use std::panic::{AssertUnwindSafe, catch_unwind};
    let sim = std::sync::Arc::new(SimMedium::new(
        ferrite_pmem::Domain::Adr,
        false,
        img.to_vec(),
        at.map(CrashAt::Fence),
    ));
    let pool = Pool::open_image(
        img,
        &PoolOptions::new("deep-tx", 0),
        ferrite_pmem::Domain::Adr,
        Some(sim.clone()),
    )
    .unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| {
        let txp = TxPool::open(&pool, ferrite_ds::registry(), Some(strategy)).unwrap();
        let mut th = txp.thread().unwrap();
        let map = ferrite_ds::open(s, &txp, txp.root()).unwrap();
        for k in 0..4u64 {
            map.insert(&mut th, 100 + k, &[k as u8; 256]).unwrap();
            map.remove(&mut th, 5 * k + 1).unwrap();
        }
    }));
    let fences = sim.counts().fences;
    match r {
        Ok(()) => (None, fences),
        Err(p) if p.is::<ferrite_crash::sim::Crashed>() => (
            Some(sim.take_captured().unwrap().build_seeded(seed)),
            fences,
        ),
        Err(p) => std::panic::resume_unwind(p),
    }
}

#[test]
fn transaction_crash_images_show_only_what_recovery_fixes_and_repair_cleans_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut with_findings = 0;
    for (s, strategy) in [
        (ferrite_ds::Structure::HashMap, Strategy::Undo),
        (ferrite_ds::Structure::BpTree, Strategy::Redo),
        (ferrite_ds::Structure::SkipList, Strategy::Clobber),
        (ferrite_ds::Structure::RbTree, Strategy::Clobber),
    ] {
        let base = tx_pool(dir.path(), s);
        let img = read(&base);
        let (_, fences) = crash_tx(s, strategy, &img, None, 0);
        assert!(fences > 4, "{s}: {fences} fences");
        for n in 1..=8u64 {
            let at = 1 + (fences - 1) * n / 8;
            let (Some(crashed), _) = crash_tx(s, strategy, &img, Some(at), n) else {
                continue;
            };
            let p = dir.path().join(format!("{s}-crash{n}.pool"));
            std::fs::write(&p, &crashed).unwrap();
            let (code, out) = deep(&p, &["--json"]);
            let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
            for f in v["findings"].as_array().unwrap() {
                let k = f["kind"].as_str().unwrap();
                assert!(
                    k == "tx-interrupted" || k == "heap-replay",
                    "{s}/{strategy:?} crashed at fence {at}: a crash state must need only recovery, found {f}"
                );
            }
            if code == 1 {
                with_findings += 1;
                let (code, rep) = deep(&p, &["--repair"]);
                assert_eq!(code, 0, "{s} crashed at fence {at}: repair left:\n{rep}");
                assert!(rep.contains("repaired: tx: "), "{rep}");
            }
        }
    }
    eprintln!("{with_findings} crash images needed recovery");
    assert!(with_findings > 0, "no crash image needed recovery");
}

#[test]
fn heaps_and_page_stores_on_their_own_are_recognised_and_checked() {
    use ferrite_alloc::{Heap, HeapOptions, LockHeap, LockOptions};
    use ferrite_blocks::page::{DirtyLines, PageStore, PageStoreOptions};
    let dir = tempfile::tempdir().unwrap();
    for lock in [false, true] {
        let path = dir.path().join(format!("heap-{lock}.pool"));
        let pool = Pool::create(&path, &PoolOptions::new("deep-heap", 4 << 20)).unwrap();
        let heap: Box<dyn PAllocator> = if lock {
            Box::new(LockHeap::create(pool.data(), LockOptions::default()).unwrap())
        } else {
            Box::new(Heap::create(pool.data(), HeapOptions::default()).unwrap())
        };
        for n in [10, 100, 1000, 30000] {
            heap.thread().unwrap().alloc(n, None).unwrap();
        }
        drop(heap);
        pool.close().unwrap();
        let out = clean(&path);
        assert!(out.contains("heap on its own: 4 blocks allocated"), "{out}");
        let p = variant(&path, &format!("heap-{lock}-sb.pool"), |b| {
            b[DATA + 40] ^= 0x20
        });
        finds(&p, "heap: does not open: ", "");
    }
    let path = dir.path().join("pages.pool");
    let pool = Pool::create(&path, &PoolOptions::new("deep-pages", 4 << 20)).unwrap();
    let opts = PageStoreOptions::new(4096, 16);
    let region = pool.data().sub(0, opts.region_len().unwrap()).unwrap();
    let ps = PageStore::create(region, &opts).unwrap();
    for pg in 0..16 {
        ps.write_page(pg, &vec![pg as u8; 4096], &DirtyLines::all(64))
            .unwrap();
    }
    drop(ps);
    pool.close().unwrap();
    let out = clean(&path);
    assert!(out.contains("page store ("), "{out}");
    let p = variant(&path, "pages-sb.pool", |b| b[DATA + 30] ^= 0x04);
    finds(&p, "pages: does not open: ", "");
}

// ---- damaged records (issue 27) -------------------------------------------

/// Runs `ferrite ARGS…`: (exit code, stdout, stderr).
fn ferrite(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .output()
        .expect("run ferrite");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn damaged_inp_records_are_listed_scrubbed_and_removed_by_repair() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_store(dir.path(), EngineKind::Inp, AllocKind::Ferrite);
    clean(&path);
    // Damage the values of three keys: a byte inside each value (found by
    // its key followed by its value: the tuple's bytes).
    let damaged = [7u32, 101, 250];
    let p = variant(&path, "inp-damaged.pool", |b| {
        for i in damaged {
            let mut rec = key(i);
            rec.extend(vec![i as u8; 50 + (i as usize % 200)]);
            let at = b
                .windows(rec.len())
                .position(|w| w == rec.as_slice())
                .unwrap();
            b[at + key(i).len() + 20] ^= 0x10;
        }
    });
    let shown = p.to_str().unwrap();
    // The deep check names each damaged key, one line each.
    let (code, out) = deep(&p, &[]);
    assert_eq!(code, 1, "{out}");
    for i in damaged {
        let k = String::from_utf8(key(i)).unwrap();
        assert!(
            out.lines().any(|l| l.starts_with(&format!(
                "{shown}: engine: damaged record: key '{k}': inp: tuple"
            ))),
            "{k} not listed:\n{out}"
        );
    }
    assert!(out.contains("3 findings"), "{out}");
    // A read of a damaged key fails naming it (exit 2); the others read.
    let (code, _, err) = ferrite(&["kv", shown, "get", "key00101"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("key 'key00101' fails its checksum"), "{err}");
    let (code, got, _) = ferrite(&["kv", shown, "get", "key00104"]);
    assert_eq!(code, 0);
    assert_eq!(got.trim_end(), "h".repeat(50 + 104));
    // The scrub lists them too, at a bounded rate, and never writes.
    let before = read(&p);
    let (code, out, err) = ferrite(&["pool", "scrub", shown, "--rate", "5"]);
    assert_eq!(code, 1, "{out}{err}");
    for i in damaged {
        let k = String::from_utf8(key(i)).unwrap();
        assert!(out.contains(&format!("damaged record: key '{k}'")), "{out}");
    }
    assert!(out.contains("247 records"), "{out}");
    assert!(out.contains(": 3 damaged"), "{out}");
    assert_eq!(read(&p), before, "the scrub wrote to the pool");
    let (code, out, err) = ferrite(&["pool", "scrub", shown, "--rate", "0"]);
    assert_eq!(code, 2, "{out}{err}");
    // --repair removes exactly those records, says so, and leaves the
    // store clean; the other keys are intact.
    let (code, out) = deep(&p, &["--repair"]);
    assert_eq!(code, 0, "{out}");
    for i in damaged {
        let k = String::from_utf8(key(i)).unwrap();
        assert!(
            out.contains(&format!(
                "repaired: engine: removed the damaged record '{k}'"
            )),
            "{out}"
        );
    }
    assert!(out.contains(": clean (inp engine"), "{out}");
    assert!(out.contains("247 keys"), "{out}");
    let (code, _, _) = ferrite(&["kv", shown, "get", "key00101"]);
    assert_eq!(code, 1, "a removed key reads as absent");
    let (code, out, _) = ferrite(&["pool", "scrub", shown]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("247 records") && out.contains("clean"),
        "{out}"
    );
}
