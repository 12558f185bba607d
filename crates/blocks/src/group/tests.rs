use super::*;
use ferrite_pmem::{Counters, Domain, FlushKind, Pool, PoolOptions};
use std::collections::BTreeMap;

/// `adr` where this CPU can flush (so line counters are real), else `eadr`.
fn domain() -> Domain {
    if FlushKind::best().is_some() {
        Domain::Adr
    } else {
        Domain::Eadr
    }
}

fn pool(leaves: usize) -> Pool {
    let size = (FpLeaves::region_len(leaves) + 2 * ferrite_pmem::HEADER_SIZE) as u64;
    Pool::create_in_memory(&PoolOptions::new("group-test", size).domain(domain())).unwrap()
}

fn key(i: u64) -> u64 {
    mix(i ^ 0x1234)
}

fn val(k: u64) -> u64 {
    k.rotate_left(17) ^ 0xfeed
}

#[test]
fn create_recover_round_trip() {
    let p = pool(64);
    let mut t = FpLeaves::create(p.data(), 64, 7).unwrap();
    assert!(t.is_empty());
    assert_eq!(t.capacity(), 64 * SLOTS);
    for i in 0..500 {
        t.insert(key(i), val(key(i))).unwrap();
    }
    assert_eq!(t.len(), 500);
    t.audit().unwrap();
    drop(t);
    let t = FpLeaves::recover(p.data()).unwrap();
    assert_eq!((t.len(), t.leaves(), t.hash_seed()), (500, 64, 7));
    for i in 0..500 {
        assert_eq!(t.get(key(i)), Some(val(key(i))));
    }
    assert_eq!(t.get(key(500)), None);
    t.audit().unwrap();
}

#[test]
fn bad_superblocks_and_regions_are_typed_errors() {
    let p = pool(4);
    let r = p.data();
    assert_eq!(
        FpLeaves::recover(r.clone()).unwrap_err(),
        GroupError::NotATable
    );
    FpLeaves::create(r.clone(), 4, 1).unwrap();
    // A flipped byte anywhere in the superblock fails the checksum.
    let mut b = r.read_vec(0, SUPERBLOCK);
    b[20] ^= 1;
    r.write(0, &b);
    assert!(matches!(
        FpLeaves::recover(r.clone()),
        Err(GroupError::Checksum { .. })
    ));
    // A well-formed superblock with another version or geometry.
    let mut sb = Superblock { leaves: 4, seed: 1 }.encode();
    sb[8] = 2;
    let crc = crc32c::crc32c(&sb[..60]);
    sb[60..].copy_from_slice(&crc.to_le_bytes());
    r.write(0, &sb);
    assert_eq!(
        FpLeaves::recover(r.clone()).unwrap_err(),
        GroupError::Version { found: 2 }
    );
    let mut sb = Superblock { leaves: 4, seed: 1 }.encode();
    sb[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let crc = crc32c::crc32c(&sb[..60]);
    sb[60..].copy_from_slice(&crc.to_le_bytes());
    r.write(0, &sb);
    assert!(matches!(
        FpLeaves::recover(r.clone()),
        Err(GroupError::Geometry(_))
    ));
    // More leaves than the region holds.
    r.write(
        0,
        &Superblock {
            leaves: 5000,
            seed: 1,
        }
        .encode(),
    );
    assert!(matches!(
        FpLeaves::recover(r.clone()),
        Err(GroupError::TooSmall { leaves: 5000, .. })
    ));
    // A bitmap with a bit past slot 31.
    FpLeaves::create(r.clone(), 4, 1).unwrap();
    r.store_u64(SUPERBLOCK + 2 * LEAF_BYTES, 1 << 40);
    assert!(matches!(
        FpLeaves::recover(r.clone()),
        Err(GroupError::CorruptBitmap { leaf: 2, .. })
    ));
    // Creation refuses what it cannot hold.
    assert!(matches!(
        FpLeaves::create(r.clone(), 0, 1),
        Err(GroupError::Geometry(_))
    ));
    assert!(matches!(
        FpLeaves::create(r.clone(), 100_000, 1),
        Err(GroupError::TooSmall { .. })
    ));
    assert!(matches!(
        FpLeaves::create(r.sub(8, 4096).unwrap(), 1, 1),
        Err(GroupError::Misaligned { .. })
    ));
    assert!(matches!(
        FpLeaves::recover(r.sub(0, 10).unwrap()),
        Err(GroupError::TooSmall { .. })
    ));
}

#[test]
fn duplicates_full_leaves_and_bad_groups() {
    let p = pool(1);
    let mut t = FpLeaves::create(p.data(), 1, 3).unwrap();
    for i in 0..SLOTS as u64 {
        t.insert(key(i), val(key(i))).unwrap();
    }
    assert_eq!(
        t.insert(key(0), 1),
        Err(GroupError::Duplicate { key: key(0) })
    );
    assert_eq!(t.insert(key(99), 1), Err(GroupError::LeafFull { leaf: 0 }));
    assert_eq!(t.len(), SLOTS);
    for g in [0, MAX_GROUP + 1] {
        assert_eq!(
            t.run([Op::Lookup { key: 1 }], g, |_, _| {}),
            Err(GroupError::BadGroup(g))
        );
    }
    t.audit().unwrap();
}

#[test]
fn an_insert_of_the_same_key_in_flight_is_a_duplicate() {
    // Both inserts of one key run in the same group: exactly one wins.
    for g in [2, 4, 64] {
        let p = pool(2);
        let mut t = FpLeaves::create(p.data(), 2, 5).unwrap();
        let ops = [
            Op::Insert { key: 42, value: 1 },
            Op::Insert { key: 42, value: 2 },
            Op::Lookup { key: 42 },
        ];
        let mut res = vec![None; ops.len()];
        t.run(ops, g, |i, r| res[i] = Some(r)).unwrap();
        assert_eq!(res[0], Some(Ok(Outcome::Inserted)), "g={g}");
        assert_eq!(
            res[1],
            Some(Err(GroupError::Duplicate { key: 42 })),
            "g={g}"
        );
        // The lookup ran beside the insert in flight: it may not see it.
        assert!(matches!(
            res[2],
            Some(Ok(Outcome::Missing | Outcome::Found(1)))
        ));
        assert_eq!(t.get(42), Some(1));
        t.audit().unwrap();
    }
}

#[test]
fn a_group_of_inserts_shares_two_fences() {
    let leaves = 4096;
    for g in [1usize, 2, 4, 8, 16, 32, 64] {
        let p = pool(leaves);
        let mut t = FpLeaves::create(p.data(), leaves, 11).unwrap();
        let n = 64 * 4;
        let ops: Vec<Op> = (0..n)
            .map(|i| Op::Insert {
                key: key(i),
                value: val(key(i)),
            })
            .collect();
        let c0 = Counters::snapshot();
        let mut ok = 0;
        let stats = t
            .run(ops, g, |_, r| {
                assert_eq!(r, Ok(Outcome::Inserted));
                ok += 1;
            })
            .unwrap();
        let d = Counters::snapshot() - c0;
        assert_eq!(ok, n);
        assert_eq!(stats.ops, n);
        assert_eq!(stats.fences, 2 * n / g as u64, "g={g}: {stats:?}");
        assert_eq!(
            d.fences, stats.fences,
            "every fence goes through the region"
        );
        if domain() == Domain::Adr {
            // Slot line + header line for the data, header line for the bit.
            let lines = d.lines_flushed as f64 / n as f64;
            assert!((2.5..=3.0).contains(&lines), "g={g}: {lines} lines/insert");
        }
        t.audit().unwrap();
    }
}

#[test]
fn lookups_interleave_and_find_everything() {
    let leaves = 1024;
    let p = pool(leaves);
    let mut t = FpLeaves::create(p.data(), leaves, 13).unwrap();
    let n = 10_000u64;
    t.run(
        (0..n).map(|i| Op::Insert {
            key: key(i),
            value: val(key(i)),
        }),
        64,
        |_, r| assert_eq!(r, Ok(Outcome::Inserted)),
    )
    .unwrap();
    for g in [1, 3, 16, 64] {
        let c0 = Counters::snapshot();
        let mut found = 0;
        let stats = t
            .run((0..2 * n).map(|i| Op::Lookup { key: key(i) }), g, |i, r| {
                let k = key(i as u64);
                if (i as u64) < n {
                    assert_eq!(r, Ok(Outcome::Found(val(k))));
                    found += 1;
                } else {
                    assert_eq!(r, Ok(Outcome::Missing));
                }
            })
            .unwrap();
        assert_eq!(found, n);
        assert_eq!(stats.fences, 0, "lookups never fence");
        assert_eq!(Counters::snapshot().fences, c0.fences);
    }
}

#[test]
fn mixed_streams_match_a_model_at_every_group_size() {
    for g in [1usize, 2, 5, 16, 64] {
        let leaves = 8;
        let p = pool(leaves);
        let mut t = FpLeaves::create(p.data(), leaves, g as u64).unwrap();
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        let mut rng = 99u64 + g as u64;
        for _chunk in 0..20 {
            let ops: Vec<Op> = (0..40)
                .map(|_| {
                    rng = mix(rng);
                    let k = key(rng % 300);
                    if rng & (1 << 20) == 0 {
                        Op::Insert {
                            key: k,
                            value: rng >> 1,
                        }
                    } else {
                        Op::Lookup { key: k }
                    }
                })
                .collect();
            let before = model.clone();
            let mut res = vec![None; ops.len()];
            t.run(ops.iter().copied(), g, |i, r| res[i] = Some(r))
                .unwrap();
            // Inserts in stream order decide which of two same-key inserts
            // wins only in a group of one; in general exactly one does.
            for (op, r) in ops.iter().zip(&res) {
                let r = r.clone().expect("every op completes");
                match (*op, r) {
                    (Op::Insert { key, value }, Ok(Outcome::Inserted)) => {
                        assert!(model.insert(key, value).is_none(), "g={g}");
                    }
                    (Op::Insert { key, .. }, Err(GroupError::Duplicate { .. })) => {
                        assert!(
                            before.contains_key(&key)
                                || ops
                                    .iter()
                                    .filter(|o| matches!(o, Op::Insert { key: k, .. } if *k == key))
                                    .count()
                                    > 1
                        );
                    }
                    (Op::Insert { key, .. }, Err(GroupError::LeafFull { leaf })) => {
                        assert_eq!(leaf, t.place(key).0)
                    }
                    (Op::Lookup { key }, Ok(Outcome::Found(v))) => {
                        assert!(before.get(&key) == Some(&v) || !before.contains_key(&key))
                    }
                    (Op::Lookup { key }, Ok(Outcome::Missing)) => {
                        assert!(!before.contains_key(&key), "g={g}: lost {key:#x}")
                    }
                    (op, r) => panic!("{op:?} -> {r:?}"),
                }
            }
            for (k, v) in &model {
                assert_eq!(t.get(*k), Some(*v));
            }
            assert_eq!(t.len(), model.len());
        }
        t.audit().unwrap();
        let back = FpLeaves::recover(p.data()).unwrap();
        let mut e = back.entries();
        e.sort_unstable();
        assert_eq!(e, model.into_iter().collect::<Vec<_>>());
    }
}

#[test]
fn recovery_scrubs_leftovers_with_one_fence_and_is_quiet_when_clean() {
    let p = pool(4);
    let r = p.data();
    let mut t = FpLeaves::create(r.clone(), 4, 17).unwrap();
    for i in 0..40 {
        t.insert(key(i), val(key(i))).unwrap();
    }
    drop(t);
    let c0 = Counters::snapshot();
    let t = FpLeaves::recover(r.clone()).unwrap();
    assert_eq!(Counters::snapshot().fences, c0.fences, "nothing to scrub");
    drop(t);
    // What a crashed insert leaves: a fingerprint in one free slot, a key
    // in another (bits clear).
    let leaf = 1;
    let lo = SUPERBLOCK + leaf * LEAF_BYTES;
    let free = !(r.load_u64(lo) as u32);
    let (a, b) = (
        free.trailing_zeros() as usize,
        31 - free.leading_zeros() as usize,
    );
    r.write(lo + FPS + a, &[0x5a]);
    r.write(lo + KV + b * KV_LEN + 8, &7u64.to_le_bytes());
    let c0 = Counters::snapshot();
    let t = FpLeaves::recover(r.clone()).unwrap();
    assert_eq!(Counters::snapshot().fences - c0.fences, 1, "one fence");
    t.audit().unwrap();
    assert_eq!(t.len(), 40);
    // The planted recovery without scrub leaves them for the audit to find.
    drop(t);
    r.write(lo + FPS + a, &[0x5a]);
    let t = FpLeaves::recover_with_fault(r.clone(), Fault::NoScrub).unwrap();
    assert!(matches!(t.audit(), Err(GroupError::Audit(_))));
}

#[test]
fn zero_bytes_flags_exactly_the_zero_bytes() {
    let mut x = 7u64;
    for _ in 0..100_000 {
        x = mix(x);
        // Zero some bytes so every pattern of zero bytes shows up.
        let w = x & !(0..8).fold(0u64, |m, k| {
            if (x >> (40 + k)) & 1 == 1 {
                m | 0xff << (8 * k)
            } else {
                m
            }
        });
        let want = (0..8).fold(0u32, |m, k| m | u32::from((w >> (8 * k)) as u8 == 0) << k);
        assert_eq!(zero_bytes(w), want, "{w:#018x}");
    }
    assert_eq!(zero_bytes(0), 0xff);
    assert_eq!(zero_bytes(u64::MAX), 0);
    assert_eq!(zero_bytes(0x8000_0000_0000_0080), 0b0111_1110);
}

/// Fuzzing found (fuzz/regressions/fp_leaves/): recovery accepted a leaf
/// whose visible slot held a damaged key, and the table then failed its
/// own audit. Recovery now refuses such a leaf with a typed error.
#[test]
fn recovery_refuses_damaged_visible_slots() {
    let p = pool(4);
    let mut t = FpLeaves::create(p.data(), 4, 7).unwrap();
    for i in 0..20 {
        t.insert(key(i), val(key(i))).unwrap();
    }
    drop(t);
    let r = p.data();
    let t = FpLeaves::recover(r.clone()).unwrap();
    let (leaf, _) = t.place(key(0));
    drop(t);
    let lo = SUPERBLOCK + leaf * LEAF_BYTES;
    let bitmap = r.load_u64(lo);
    let s = bitmap.trailing_zeros() as usize;
    let good = r.load_u64(lo + KV + s * KV_LEN);
    // A flipped bit in the key: it no longer hashes to this slot's leaf and
    // fingerprint.
    r.store_u64(lo + KV + s * KV_LEN, good ^ 1 << 40);
    assert!(matches!(
        FpLeaves::recover(r.clone()),
        Err(GroupError::CorruptLeaf { .. })
    ));
    // The same key visible twice.
    r.store_u64(lo + KV + s * KV_LEN, good);
    let other = (bitmap & !(1u64 << s)).trailing_zeros() as usize;
    if other < SLOTS {
        let saved: Vec<u8> = r.read_vec(lo + KV + other * KV_LEN, KV_LEN);
        let fp = r.read_vec(lo + FPS + s, 1);
        let fp_other = r.read_vec(lo + FPS + other, 1);
        r.write(
            lo + KV + other * KV_LEN,
            &r.read_vec(lo + KV + s * KV_LEN, KV_LEN),
        );
        r.write(lo + FPS + other, &fp);
        assert!(matches!(
            FpLeaves::recover(r.clone()),
            Err(GroupError::CorruptLeaf { .. })
        ));
        r.write(lo + KV + other * KV_LEN, &saved);
        r.write(lo + FPS + other, &fp_other);
    }
    // Reserved header bytes.
    r.write(lo + 48, &[1]);
    assert!(matches!(
        FpLeaves::recover(r.clone()),
        Err(GroupError::CorruptLeaf { .. })
    ));
    r.write(lo + 48, &[0]);
    FpLeaves::recover(r).unwrap().audit().unwrap();
}

/// The superblock's bytes, as the version that wrote them laid them out
/// (hex of one fixed superblock, taken before the encoding moved to
/// `ferrite_pmem::superblock`): tables written by older builds must keep
/// opening, byte for byte.
#[test]
fn superblock_bytes_are_the_format_on_media() {
    let b = Superblock {
        leaves: 4,
        seed: 0x1234_5678_9abc_def0,
    }
    .encode();
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    assert_eq!(
        hex,
        concat!(
            "464552524650470001002000400200000400000000000000f0debc9a78563412",
            "000000000000000000000000000000000000000000000000000000001b9d4e3b"
        )
    );
}
