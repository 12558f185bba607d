//! Counters are exact: persisting known ranges yields known counts.

use ferrite_pmem::{Counters, Domain, Pool, PoolOptions};

fn pool(domain: Domain) -> Pool {
    Pool::create_in_memory(&PoolOptions::new("counters", 1 << 20).domain(domain)).unwrap()
}

#[test]
fn adr_counts_lines_fences_and_blocks_exactly() {
    let p = pool(Domain::Adr);
    let r = p.data(); // data starts at pool offset 4096: line and block aligned
    let before = Counters::snapshot();
    r.write(0, &[1u8; 64]);
    r.persist(0, 64); // 1 line, 1 fence, 1 block
    r.write(60, &[2u8; 8]);
    r.persist(60, 8); // straddles lines 0 and 1: 2 lines, 1 fence, 1 block
    r.flush(0, 256); // 4 lines
    r.flush(0, 64); // same line again in the same epoch: +1 insn, +0 distinct
    r.fence(); // 4 distinct lines, 1 block
    r.persist(255, 2); // lines 3 and 4, blocks 0 and 1
    let d = Counters::snapshot() - before;
    assert_eq!(d.fences, 4);
    assert_eq!(d.flush_insns, 1 + 2 + 4 + 1 + 2);
    assert_eq!(d.lines_flushed, 1 + 2 + 4 + 2);
    assert_eq!(d.blocks_written, 1 + 1 + 1 + 2);
    assert_eq!(d.nt_bytes, 0);
    assert_eq!(d.msync_calls, 0);
}

#[test]
fn nontemporal_copies_count_bytes_and_flush_only_unaligned_ends() {
    let p = pool(Domain::Adr);
    let r = p.data();
    let before = Counters::snapshot();
    r.write_persist(0, &[7u8; 1024]); // >= 256: non-temporal, aligned: no flush
    let d = Counters::snapshot() - before;
    assert_eq!(
        (d.nt_bytes, d.flush_insns, d.fences, d.blocks_written),
        (1024, 0, 1, 4)
    );
    assert_eq!(r.read_vec(0, 1024), vec![7u8; 1024]);

    let before = Counters::snapshot();
    r.write_persist(8, &[9u8; 300]); // head 8..16 and tail 304..308 stored normally
    let d = Counters::snapshot() - before;
    assert_eq!(d.nt_bytes, 288);
    assert_eq!(d.flush_insns, 2, "one line for the head, one for the tail");
    assert_eq!(d.fences, 1);

    let before = Counters::snapshot();
    r.write_persist(0, &[1u8; 100]); // below threshold: cached copy + 2 lines
    let d = Counters::snapshot() - before;
    assert_eq!((d.nt_bytes, d.flush_insns, d.fences), (0, 2, 1));
}

#[test]
fn eadr_fences_without_flushing() {
    let p = pool(Domain::Eadr);
    let r = p.data();
    let before = Counters::snapshot();
    r.write(0, &[1u8; 512]);
    r.persist(0, 512);
    let d = Counters::snapshot() - before;
    assert_eq!(
        (d.fences, d.flush_insns, d.lines_flushed, d.blocks_written),
        (1, 0, 0, 2)
    );
}

#[test]
fn volatile_issues_nothing() {
    let p = pool(Domain::Volatile);
    let before = Counters::snapshot();
    p.data().write_persist(0, &[1u8; 512]);
    p.data().persist(0, 64);
    let d = Counters::snapshot() - before;
    assert_eq!(d, Counters::default());
}

#[test]
fn msync_syncs_each_dirty_page_once_per_fence() {
    let dir = tempfile::tempdir().unwrap();
    let p = Pool::create(
        dir.path().join("m"),
        &PoolOptions::new("counters", 1 << 20).domain(Domain::Msync),
    )
    .unwrap();
    let r = p.data();
    let before = Counters::snapshot();
    r.write(0, &[1u8; 10]);
    r.flush(0, 10);
    r.flush(5000, 10); // next page
    r.flush(100, 10); // first page again
    r.flush(20000, 1); // a distant page
    r.fence();
    let d = Counters::snapshot() - before;
    assert_eq!(d.fences, 1);
    assert_eq!(
        d.msync_calls, 2,
        "adjacent pages coalesce, distant ones do not"
    );
    assert_eq!(d.msync_bytes, 3 * 4096);
}

#[test]
fn counters_are_per_thread() {
    let p = pool(Domain::Adr);
    let r = p.data();
    let before = Counters::snapshot();
    std::thread::scope(|s| {
        s.spawn(|| r.persist(0, 64));
    });
    assert_eq!(Counters::snapshot() - before, Counters::default());
}
