//! Items by memcached's slab classes, for `stats slabs` and `stats items`.
//!
//! ferrite has no slab allocator; these statistics show the items it holds
//! the way memcached would account them, so tools (and memcached's own test
//! suite) that read per-class figures find them: memcached 1.6's default
//! class table (`-n 48`, `-f 1.25`, 1 MiB pages, 512 KiB largest chunk;
//! `slabs_init`) and its item size (`ITEM_ntotal`: a 48-byte header, the
//! 8-byte CAS, the key and its NUL, the data and its `\r\n`; the 4-byte
//! flags suffix memcached adds for nonzero flags is not counted: the
//! eviction view does not know an item's flags). An item in the store counts
//! until it is removed, expired or not (memcached reclaims an expired item's
//! chunk when it allocates in its class; ferrite keeps it until a read or an
//! eviction removes it).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

/// memcached's `MAX_NUMBER_OF_SLAB_CLASSES` (class ids 1..=63).
pub const CLASSES: usize = 64;
/// memcached's slab page.
pub const PAGE: u64 = 1 << 20;
const ITEM_HEADER: u64 = 48;
const CHUNK_MAX: u64 = PAGE / 2;

/// The chunk size of every class (index = class id; 0 unused).
pub fn sizes() -> &'static [u64] {
    static SIZES: OnceLock<Vec<u64>> = OnceLock::new();
    SIZES.get_or_init(|| {
        let mut v = vec![0u64];
        let mut size: u64 = ITEM_HEADER + 48;
        let factor = 1.25f64;
        while v.len() < CLASSES - 1 {
            if size as f64 >= CHUNK_MAX as f64 / factor {
                break;
            }
            if !size.is_multiple_of(8) {
                size += 8 - size % 8;
            }
            v.push(size);
            size = (size as f64 * factor) as u64;
        }
        v.push(CHUNK_MAX);
        v
    })
}

/// memcached's item size for an item the eviction view charges `charge`
/// (its map key — `k` and the key —, the 28-byte record header and the
/// data; [`super::charge`]).
pub(crate) fn ntotal(charge: u64) -> u64 {
    // 48 + 8 + (key + 1) + (data + 2), with key + data = charge - 29.
    charge + 30
}

/// The class of an item the eviction view charges `charge` (items larger
/// than the largest chunk are chunked in memcached: counted in the largest
/// class).
pub fn class_of(charge: u64) -> usize {
    let n = ntotal(charge);
    let s = sizes();
    (s[1..].partition_point(|&c| c < n) + 1).min(s.len() - 1)
}

/// Per class: items, and memcached's `mem_requested` (their sizes).
pub struct SlabStats {
    /// Items per class.
    pub items: [AtomicI64; CLASSES],
    /// Bytes the items of each class asked for (their charges).
    pub requested: [AtomicI64; CLASSES],
    /// Stores that took the room of an expired item (the same key).
    pub reclaimed: [AtomicI64; CLASSES],
}

impl Default for SlabStats {
    fn default() -> Self {
        SlabStats {
            items: std::array::from_fn(|_| AtomicI64::new(0)),
            requested: std::array::from_fn(|_| AtomicI64::new(0)),
            reclaimed: std::array::from_fn(|_| AtomicI64::new(0)),
        }
    }
}

impl std::fmt::Debug for SlabStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SlabStats")
    }
}

impl SlabStats {
    /// Add a shard's change.
    pub fn add(&self, delta: &[(i64, i64)]) {
        for (i, (n, b)) in delta.iter().enumerate() {
            if *n != 0 || *b != 0 {
                self.items[i].fetch_add(*n, Relaxed);
                self.requested[i].fetch_add(*b, Relaxed);
            }
        }
    }

    /// `stats slabs`: memcached's per-class lines for the classes that
    /// hold items, then `active_slabs` and `total_malloced` (the pages the
    /// items would occupy).
    pub fn slabs(&self) -> Vec<(String, String)> {
        let mut v = Vec::new();
        let (mut active, mut malloced) = (0u64, 0u64);
        for (id, &size) in sizes().iter().enumerate().skip(1) {
            let used = self.items[id].load(Relaxed).max(0) as u64;
            if used == 0 {
                continue;
            }
            let per = (PAGE / size).max(1);
            let pages = used.div_ceil(per);
            active += 1;
            malloced += pages * PAGE;
            let mut put = |k: &str, val: u64| v.push((format!("{id}:{k}"), val.to_string()));
            put("chunk_size", size);
            put("chunks_per_page", per);
            put("total_pages", pages);
            put("total_chunks", pages * per);
            put("used_chunks", used);
            put("free_chunks", pages * per - used);
            put("free_chunks_end", 0);
            put(
                "mem_requested",
                self.requested[id].load(Relaxed).max(0) as u64,
            );
        }
        v.push(("active_slabs".into(), active.to_string()));
        v.push(("total_malloced".into(), malloced.to_string()));
        v
    }

    /// `stats items`: per class, the item count, `mem_requested` and
    /// `reclaimed`.
    pub fn items(&self) -> Vec<(String, String)> {
        let mut v = Vec::new();
        for id in 1..sizes().len() {
            let n = self.items[id].load(Relaxed).max(0);
            if n == 0 {
                continue;
            }
            v.push((format!("items:{id}:number"), n.to_string()));
            v.push((
                format!("items:{id}:mem_requested"),
                self.requested[id].load(Relaxed).max(0).to_string(),
            ));
            v.push((
                format!("items:{id}:reclaimed"),
                self.reclaimed[id].load(Relaxed).to_string(),
            ));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcached_default_class_table() {
        // `memcached -vv` (1.6.18, default options) prints these classes.
        let want: &[u64] = &[
            96, 120, 152, 192, 240, 304, 384, 480, 600, 752, 944, 1184, 1480, 1856, 2320, 2904,
            3632, 4544, 5680, 7104, 8880, 11104, 13880, 17352, 21696, 27120, 33904, 42384, 52984,
            66232, 82792, 103496, 129376, 161720, 202152, 252696, 315872, 394840, 524288,
        ];
        assert_eq!(&sizes()[1..], want);
    }

    #[test]
    fn items_fall_in_the_first_class_that_fits() {
        // `set issue29 0 0 0`: charge = 8 + 28 + 0 → 66 bytes → class 1.
        assert_eq!(class_of(super::super::charge(8, super::super::HEADER)), 1);
        // A 66560-byte value under "key": 66622 bytes → class 31.
        assert_eq!(
            class_of(super::super::charge(4, super::super::HEADER + 66560)),
            31
        );
        assert_eq!(class_of(10 << 20), sizes().len() - 1);
        let st = SlabStats::default();
        let mut d = vec![(0i64, 0i64); CLASSES];
        d[1] = (2, 132);
        st.add(&d);
        let slabs = st.slabs();
        assert!(slabs.contains(&("1:used_chunks".into(), "2".into())));
        assert!(slabs.contains(&("total_malloced".into(), PAGE.to_string())));
        assert_eq!(
            st.items()[1],
            ("items:1:mem_requested".into(), "132".into())
        );
    }
}
