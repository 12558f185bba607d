//! Disk I/O happens without the cache's metadata mutex: while one session
//! is stuck inside a disk read (page-in) or a disk sync (write-back of a
//! dirty victim), another session locks, reads, writes and commits pages
//! that are already cached. A session that wants the page being paged in
//! waits for it and then sees its disk content.
//!
//! Each test fails (rather than hangs) when the mutex is held across the
//! I/O: the second session's work must finish within a timeout while the
//! gate is still closed.

use ferrite_cache::{Cache, CacheOptions, Disk, Mode, PAGE, PoolDisk, Result};
use ferrite_pmem::{Domain, Pool, PoolOptions};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// A disk that blocks reads of one page, or every sync, until opened.
struct GateDisk {
    inner: PoolDisk,
    /// Page whose read blocks (u32::MAX: none).
    read_gate: AtomicU32,
    sync_gate: AtomicBool,
    open: Mutex<bool>,
    cv: Condvar,
    /// Set when an operation reached the gate.
    arrived: Mutex<bool>,
    arrived_cv: Condvar,
}

impl GateDisk {
    fn wait_gate(&self) {
        *self.arrived.lock().unwrap() = true;
        self.arrived_cv.notify_all();
        let mut o = self.open.lock().unwrap();
        while !*o {
            o = self.cv.wait(o).unwrap();
        }
    }
    fn wait_arrived(&self) {
        let mut a = self.arrived.lock().unwrap();
        while !*a {
            let (g, t) = self
                .arrived_cv
                .wait_timeout(a, Duration::from_secs(10))
                .unwrap();
            assert!(!t.timed_out(), "no I/O reached the gate");
            a = g;
        }
    }
    fn open_gate(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

impl Disk for GateDisk {
    fn pages(&self) -> u32 {
        self.inner.pages()
    }
    fn read(&self, n: u32, buf: &mut [u8]) -> Result<()> {
        if n == self.read_gate.load(Ordering::SeqCst) {
            self.wait_gate();
        }
        self.inner.read(n, buf)
    }
    fn write(&self, n: u32, buf: &[u8]) -> Result<()> {
        self.inner.write(n, buf)
    }
    fn sync(&self) -> Result<()> {
        if self.sync_gate.load(Ordering::SeqCst) {
            self.wait_gate();
        }
        self.inner.sync()
    }
    fn describe(&self) -> String {
        "gated".into()
    }
}

const SLOTS: u32 = 8;
const DISK: u32 = 64;

fn setup() -> (Pool, Pool, Arc<GateDisk>) {
    let bytes = Cache::required_bytes(SLOTS, 4, DISK)
        .unwrap()
        .next_multiple_of(PAGE)
        + 4096;
    let cp =
        Pool::create_in_memory(&PoolOptions::new("c", bytes as u64).domain(Domain::Adr)).unwrap();
    let dp = Pool::create_in_memory(
        &PoolOptions::new("d", (DISK as usize * PAGE + 8192) as u64).domain(Domain::Adr),
    )
    .unwrap();
    let disk = Arc::new(GateDisk {
        inner: PoolDisk::new(dp.data().sub(0, DISK as usize * PAGE).unwrap()),
        read_gate: AtomicU32::new(u32::MAX),
        sync_gate: AtomicBool::new(false),
        open: Mutex::new(false),
        cv: Condvar::new(),
        arrived: Mutex::new(false),
        arrived_cv: Condvar::new(),
    });
    (cp, dp, disk)
}

fn fill(c: &Cache, pages: std::ops::Range<u32>) {
    let s = c.session().unwrap();
    for p in pages {
        let n = s.alloc_page().unwrap();
        assert_eq!(n, p);
        let mut g = s.get_page(p, Mode::Write).unwrap();
        g.write(0, &[p as u8; 64]);
    }
}

/// Another session's cached work, which must not need the mutex holder.
fn other_work(c: &Cache, page: u32) {
    let s = c.session().unwrap();
    let mut g = s.get_page(page, Mode::Write).unwrap();
    let mut b = [0u8; 1];
    g.read(0, &mut b);
    g.write(0, &[b[0].wrapping_add(1)]);
    drop(g);
    let r = s.get_page(page, Mode::Read).unwrap();
    r.read(0, &mut b);
}

#[test]
fn page_in_does_not_hold_the_metadata_mutex() {
    let (cp, _dp, disk) = setup();
    let c = Cache::create(cp.data(), disk.clone(), SLOTS, 4, CacheOptions::default()).unwrap();
    fill(&c, 1..4);
    c.sync_all().unwrap();
    // Page 20 is on the disk only (allocated, written through its own page-in).
    {
        let s = c.session().unwrap();
        for p in 4..=20 {
            assert_eq!(s.alloc_page().unwrap(), p);
        }
        let mut g = s.get_page(20, Mode::Write).unwrap();
        g.write(0, &[0xab; 8]);
    }
    c.sync_all().unwrap();
    // Push page 20 out of the cache: touch other pages until it is evicted.
    {
        let s = c.session().unwrap();
        for round in 0..4 {
            for p in 4..20 {
                let _ = s.get_page(p, Mode::Read).unwrap();
            }
            let _ = round;
        }
    }
    // Keep page 2 resident and hot enough.
    other_work(&c, 2);
    disk.read_gate.store(20, Ordering::SeqCst);
    std::thread::scope(|sc| {
        let c = &c;
        let loader = sc.spawn(move || {
            let s = c.session().unwrap();
            let g = s.get_page(20, Mode::Read).unwrap();
            let mut b = [0u8; 8];
            g.read(0, &mut b);
            b
        });
        disk.wait_arrived();
        // A second reader of the page in transit waits for it.
        let waiter = sc.spawn(move || {
            let s = c.session().unwrap();
            let g = s.get_page(20, Mode::Read).unwrap();
            let mut b = [0u8; 8];
            g.read(0, &mut b);
            b
        });
        let (tx, rx) = mpsc::channel();
        sc.spawn(move || {
            other_work(c, 2);
            tx.send(()).unwrap();
        });
        let done = rx.recv_timeout(Duration::from_secs(10));
        disk.open_gate();
        assert!(
            done.is_ok(),
            "a cached page could not be used while another session read the disk"
        );
        assert_eq!(loader.join().unwrap(), [0xab; 8]);
        assert_eq!(waiter.join().unwrap(), [0xab; 8]);
    });
    c.verify().unwrap();
    assert!(c.stats.page_ins.load(Ordering::Relaxed) > 0);
}

#[test]
fn write_back_does_not_hold_the_metadata_mutex() {
    let (cp, _dp, disk) = setup();
    let c = Cache::create(cp.data(), disk.clone(), SLOTS, 4, CacheOptions::default()).unwrap();
    // SLOTS - 1 dirty pages fill the persistent tier but one slot.
    fill(&c, 1..SLOTS);
    disk.sync_gate.store(true, Ordering::SeqCst);
    let written = std::thread::scope(|sc| {
        let c = &c;
        // More pages: one soon needs the eviction of a dirty page,
        // whose write-back blocks in the sync.
        let evictor = sc.spawn(move || {
            let s = c.session().unwrap();
            for p in SLOTS..SLOTS + 12 {
                assert_eq!(s.alloc_page().unwrap(), p);
                let mut g = s.get_page(p, Mode::Write).unwrap();
                g.write(0, &[p as u8; 64]);
            }
        });
        disk.wait_arrived();
        let (tx, rx) = mpsc::channel();
        sc.spawn(move || {
            // Cached pages (in the batch in transit or not) stay readable,
            // and writable in place (a non-transaction): that write must
            // keep its page DIRTY after a write-back that copied it before
            // (verify below finds a CLEAN slot that differs from the disk).
            let cached: Vec<u32> = (1..SLOTS).filter(|&p| c.is_cached(p)).collect();
            assert!(!cached.is_empty());
            let s = c.session().unwrap();
            for &p in &cached {
                let g = s.get_page(p, Mode::Read).unwrap();
                let mut b = [0u8; 64];
                g.read(0, &mut b);
                assert_eq!(b, [p as u8; 64], "page {p}");
            }
            s.non_tx(|s| {
                let mut g = s.get_page(cached[0], Mode::Write).unwrap();
                g.write(0, &[0x77; 64]);
            })
            .unwrap();
            tx.send(cached[0]).unwrap();
        });
        let done = rx.recv_timeout(Duration::from_secs(10));
        disk.open_gate();
        assert!(
            done.is_ok(),
            "a cached page could not be used while another session synced the disk"
        );
        evictor.join().unwrap();
        done.unwrap()
    });
    c.sync_all().unwrap();
    c.verify().unwrap();
    // Every page kept its content (page 0 is the bitmap: only check data).
    let s = c.session().unwrap();
    for p in 1..SLOTS + 12 {
        let g = s.get_page(p, Mode::Read).unwrap();
        let mut b = [0u8; 64];
        g.read(0, &mut b);
        let want = if p == written { 0x77 } else { p as u8 };
        assert_eq!(b, [want; 64], "page {p}");
    }
    drop(s);
    // And the disk has it too once written back.
    c.sync_all().unwrap();
    let mut d = vec![0u8; PAGE];
    disk.inner.read(written, &mut d).unwrap();
    assert_eq!(d[..64], [0x77; 64]);
}
