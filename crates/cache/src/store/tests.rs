use super::*;

#[test]
fn compaction_picks_runs_of_similar_size() {
    assert_eq!(pick_compaction(&[300, 300, 300]), None);
    assert_eq!(pick_compaction(&[300, 300, 300, 300]), Some(0..4));
    assert_eq!(pick_compaction(&[100_000, 300, 300, 300]), Some(1..4));
    // Spread by more than the ratio: nothing until FORCE_AT, then the
    // smallest adjacent pair.
    let spread = [10_000_000, 1_000_000, 100_000, 10_000, 1_000, 100, 10];
    assert_eq!(pick_compaction(&spread), None);
    let mut eight = spread.to_vec();
    eight.push(1);
    assert_eq!(pick_compaction(&eight), Some(6..8));
    eight[7] = 20;
    assert_eq!(pick_compaction(&eight), Some(5..8));
}

/// Flushes of 300 records into the policy, merging as the store does:
/// the branch count stays below FORCE_AT and each record is rewritten
/// a few times, not once per handful of flushes (merging every
/// branch rewrote each record about 200 times at this size).
#[test]
fn compaction_bounds_branches_and_rewrites() {
    let (mut branches, mut written, mut inserted) = (Vec::<u64>::new(), 0u64, 0u64);
    for _ in 0..2000 {
        branches.push(300);
        inserted += 300;
        while let Some(run) = pick_compaction(&branches) {
            let merged: u64 = branches[run.clone()].iter().sum();
            written += merged;
            branches.splice(run, [merged]);
        }
        assert!(branches.len() < FORCE_AT, "{branches:?}");
    }
    let amp = written as f64 / inserted as f64;
    assert!(amp < 16.0, "each record rewritten {amp:.1} times");
}

#[test]
fn filters_have_no_false_negatives_and_few_false_positives() {
    let keys: Vec<Vec<u8>> = (0..20_000u32)
        .map(|i| format!("user{:016}", i.wrapping_mul(2_654_435_761)).into_bytes())
        .collect();
    let n = filter_pages(keys.len());
    let mut bits = vec![vec![0u8; PAGE]; n];
    let test = |bits: &[Vec<u8>], k: &[u8]| {
        let (p, b, set) = filter_bits(k, n);
        set.iter()
            .all(|&i| bits[p][b + i as usize / 8] & (1 << (i % 8)) != 0)
    };
    for k in &keys {
        let (p, b, set) = filter_bits(k, n);
        for i in set {
            bits[p][b + i as usize / 8] |= 1 << (i % 8);
        }
    }
    assert!(keys.iter().all(|k| test(&bits, k)));
    let fp = (0..20_000u32)
        .filter(|i| test(&bits, format!("other{i:016}").as_bytes()))
        .count();
    assert!(fp < 20_000 * 3 / 100, "{fp} false positives in 20000");
}
