//! Base images: real pools built once per process, which the fuzz input
//! then patches.
//!
//! A [`Bases`] holds a component's images — for each configuration, the
//! image after a short workload ended cleanly and the images the crash
//! simulator leaves when the same workload is cut at a few fences — and the
//! *hot lines*: every 64-byte line that is non-zero in any of them, i.e.
//! what the component wrote (superblocks, slots, logs, headers, data). Hot
//! lines are where [`crate::patch`] aims most mutations.

use ferrite_crash::{Config, CrashAt, Explorer, SimRun};
use ferrite_pmem::{Domain, HEADER_SIZE, Pool, PoolOptions};

/// Cache line: the unit of hot-line selection.
pub const LINE: usize = 64;

/// The nonces the targets give their components (blocks, alloc, tx, ptm,
/// engine): fixed, so images are reproducible and keyed checksums can be
/// re-sealed ([`Seal`]).
pub const NONCES: [u64; 5] = [
    0xf022_f022_0000_0001,
    0xf022_f022_0000_0002,
    0xf022_f022_0000_0003,
    0xf022_f022_0000_0004,
    0xf022_f022_0000_0005,
];

/// A checksummed record found in a base image: `crc32c([key ‖] bytes
/// [at, at + len))` stored little-endian at `at + len`. Most Ferrite
/// superblocks are one such 64-byte line (`len` 60), some keyed with the
/// component's nonce; cell headers and log head slots have `len` 24.
/// After patching, [`Seal::apply`] recomputes the checksum, so the fuzzer
/// reaches the field checks behind it — as a crafted file would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seal {
    pub at: usize,
    pub len: usize,
    pub key: Option<u64>,
}

impl Seal {
    fn crc(&self, img: &[u8]) -> Option<u32> {
        let body = img.get(self.at..self.at + self.len)?;
        Some(match self.key {
            None => crc32c::crc32c(body),
            Some(k) => crc32c::crc32c_append(crc32c::crc32c(&k.to_le_bytes()), body),
        })
    }

    fn holds(&self, img: &[u8]) -> bool {
        let at = self.at + self.len;
        match (self.crc(img), img.get(at..at + 4)) {
            (Some(c), Some(s)) => s == c.to_le_bytes(),
            _ => false,
        }
    }

    /// Recomputes the checksum in `img` (if the record is inside it).
    pub fn apply(&self, img: &mut [u8]) {
        let at = self.at + self.len;
        if let Some(c) = self.crc(img)
            && let Some(s) = img.get_mut(at..at + 4)
        {
            s.copy_from_slice(&c.to_le_bytes());
        }
    }

    /// The records of `img` among the hot lines: each line tried as a
    /// 60- and a 24-byte record, unkeyed and keyed with every nonce. An
    /// all-zero body is skipped (its checksum is a constant, not a record).
    fn find(img: &[u8], hot: &[usize]) -> Vec<Seal> {
        let keys = std::iter::once(None).chain(NONCES.iter().map(|&n| Some(n)));
        let mut out = Vec::new();
        for &at in hot {
            for len in [60, 24] {
                for key in keys.clone() {
                    let s = Seal { at, len, key };
                    if img
                        .get(at..at + len)
                        .is_some_and(|b| b.iter().any(|&x| x != 0))
                        && s.holds(img)
                    {
                        out.push(s);
                        break;
                    }
                }
            }
        }
        out
    }
}

/// One configuration's images and their hot lines.
pub struct Bases {
    /// Pool layout name (the images open with it).
    pub layout: &'static str,
    /// Images, each `size` bytes: for every configuration, clean then crashed.
    pub images: Vec<Image>,
    /// Offsets of lines non-zero in some image (sorted, deduplicated).
    pub hot: Vec<usize>,
    /// Per image, its checksummed records ([`Seal`]).
    pub seals: Vec<Vec<Seal>>,
}

/// A base image and what built it (the target decides how to open it).
pub struct Image {
    /// Index of the configuration (the target's own table).
    pub config: usize,
    pub bytes: Vec<u8>,
}

/// How a component's images are built.
pub struct Recipe<'a> {
    pub layout: &'static str,
    pub size: u64,
    /// Formats the component (considered durable: runs before the simulator).
    pub setup: &'a dyn Fn(&Pool),
    /// The workload: a few operations on the formatted component.
    pub work: &'a dyn Fn(&Pool),
    /// Crash points, as fractions (per mille) of the workload's fences.
    pub crashes: &'a [u64],
}

/// Fixed header identity: the pool header of every base image carries this
/// UUID and creation time, so images are byte-identical in every process.
const UUID: [u8; 16] = *b"ferrite-fuzzing!";
const CREATED_NS: u64 = 1_700_000_000_000_000_000;

/// Rewrites the header's UUID and creation time and its checksum (the
/// format of `ferrite_pmem::header`: uuid at 40, time at 32, crc32c of
/// bytes 0..124 at 124).
pub fn normalise_header(img: &mut [u8]) {
    img[32..40].copy_from_slice(&CREATED_NS.to_le_bytes());
    img[40..56].copy_from_slice(&UUID);
    fix_header_crc(img);
}

/// Recomputes the pool header checksum (after a patch to its fields).
pub fn fix_header_crc(img: &mut [u8]) {
    let crc = crc32c::crc32c(&img[..124]);
    img[124..128].copy_from_slice(&crc.to_le_bytes());
}

/// Pool options of a base image's layout and size.
pub fn pool_opts(layout: &str, size: u64) -> PoolOptions {
    PoolOptions::new(layout, size).domain(Domain::Adr)
}

/// Opens a (patched) image the way recovery after a crash does. `None`
/// when the pool layer refuses it (which is fine: the header is checked by
/// its own target).
pub fn open(img: &[u8], layout: &str) -> Option<Pool> {
    Pool::open_image(img, &pool_opts(layout, img.len() as u64), Domain::Adr, None).ok()
}

/// The image `recipe` leaves: clean, then cut at each crash point (the
/// simulator's seeded choice of which in-flight lines survive).
pub fn build(recipe: &Recipe<'_>, config: usize) -> Vec<Image> {
    let initial = {
        let p = Pool::create_in_memory(&pool_opts(recipe.layout, recipe.size))
            .expect("create the base pool");
        (recipe.setup)(&p);
        p.image()
    };
    let explorer = Explorer::new(
        Config::new(recipe.layout)
            .pool_size(recipe.size)
            .domain(Domain::Adr),
    );
    let (end, counts) = explorer
        .simulate::<()>(&initial, None, |p, _| (recipe.work)(p))
        .expect("run the base workload");
    let mut out = Vec::new();
    match end {
        SimRun::Finished(st, _) => out.push(st.durable),
        SimRun::Crashed(..) => unreachable!("no crash point was set"),
        SimRun::Panicked(m) => panic!("base workload of {} panicked: {m}", recipe.layout),
    }
    for &per_mille in recipe.crashes {
        let k = (counts.fences * per_mille / 1000).max(1);
        let (end, _) = explorer
            .simulate::<()>(&initial, Some(CrashAt::Fence(k)), |p, _| (recipe.work)(p))
            .expect("run the crashed base workload");
        match end {
            SimRun::Crashed(st, _) | SimRun::Finished(st, _) => out.push(st.build_seeded(k)),
            SimRun::Panicked(m) => panic!("base workload of {} panicked: {m}", recipe.layout),
        }
    }
    out.into_iter()
        .map(|mut bytes| {
            normalise_header(&mut bytes);
            Image { config, bytes }
        })
        .collect()
}

impl Bases {
    /// Collects images (of one layout) and computes their hot lines.
    pub fn new(layout: &'static str, images: Vec<Image>) -> Bases {
        let mut hot = Vec::new();
        if let Some(len) = images.iter().map(|i| i.bytes.len()).max() {
            for off in (0..len).step_by(LINE) {
                let nonzero = images.iter().any(|i| {
                    i.bytes
                        .get(off..(off + LINE).min(i.bytes.len()))
                        .is_some_and(|l| l.iter().any(|&b| b != 0))
                });
                if nonzero || off == HEADER_SIZE {
                    hot.push(off);
                }
            }
        }
        let seals = images.iter().map(|i| Seal::find(&i.bytes, &hot)).collect();
        Bases {
            layout,
            images,
            hot,
            seals,
        }
    }
}
