//! The phases of redb's workload (module docs of [`super`]): [`step`] runs
//! one phase on one system, each phase a function of its own — inserts,
//! `len`, point, range and threaded reads, removal, retain, extract-if,
//! pop, sorted inserts — timed with the persist counters ([`timed`]) and
//! checked against the model.

use super::*;

fn timed<T>(f: impl FnOnce() -> Res<T>) -> Res<(T, f64, Counters)> {
    let c0 = Counters::snapshot();
    let t0 = Instant::now();
    let r = f()?;
    let secs = t0.elapsed().as_secs_f64();
    Ok((r, secs, Counters::snapshot() - c0))
}

/// Inserts `n` fresh pairs of `gen` in one transaction, untimed (the
/// refill after retain, extract-if and pop).
fn refill(run: &mut Run, n: u64) -> Res<()> {
    let Run { subject, pairs, .. } = run;
    subject.write(&mut |t| {
        for i in 0..n {
            if i % 1024 == 0 {
                memory_ok()?;
            }
            let (k, v) = pairs.pair();
            t.insert(&k, &v)?;
        }
        Ok(n)
    })?;
    run.len += n;
    Ok(())
}

/// Runs `phase` on `run`'s system.
pub(super) fn step(run: &mut Run, phase: Phase, counts: &Counts, shards: &Shards) -> Res<Sample> {
    let entries = run.len;
    let mut s = Sample {
        entries,
        ..Sample::default()
    };
    match phase {
        Phase::Bulk | Phase::Individual | Phase::Batch | Phase::Nosync => {
            insert_phase(run, phase, counts, &mut s)?
        }
        Phase::Len => len_phase(run, &mut s)?,
        Phase::RandomRead => random_read_phase(run, counts, &mut s)?,
        Phase::RangeRead => range_read_phase(run, counts, &mut s)?,
        Phase::ThreadedRead(threads) => threaded_read_phase(run, threads, counts, shards, &mut s)?,
        Phase::Removal => removal_phase(run, counts, &mut s)?,
        Phase::Retain => retain_phase(run, &mut s)?,
        Phase::ExtractIf => extract_if_phase(run, &mut s)?,
        Phase::Pop => pop_phase(run, counts, &mut s)?,
        Phase::Sorted => sorted_phase(run, counts, &mut s)?,
    }
    s.footprint = run.subject.footprint();
    s.file_bytes = run.subject.file_bytes();
    memory_ok()?;
    Ok(s)
}

/// The insert phases: one bulk transaction, individual commits, batches,
/// or individual commits without sync (`Nosync`).
fn insert_phase(run: &mut Run, phase: Phase, counts: &Counts, s: &mut Sample) -> Res<()> {
    let (commits, per) = match phase {
        Phase::Bulk => (1, counts.bulk),
        Phase::Individual => (counts.individual, 1),
        Phase::Batch => (counts.batches, counts.batch_size),
        _ => (counts.nosync, 1),
    };
    let nosync = phase == Phase::Nosync;
    if nosync {
        run.subject.set_sync(false)?;
    }
    let Run { subject, pairs, .. } = run;
    let (c, secs, counters) = timed(|| {
        let mut total = Committed::default();
        for _ in 0..commits {
            memory_ok()?;
            let c = subject.write(&mut |t| {
                for i in 0..per {
                    if i % 1024 == 1023 {
                        memory_ok()?;
                    }
                    let (k, v) = pairs.pair();
                    t.insert(&k, &v)?;
                }
                Ok(per)
            })?;
            total.add(c);
        }
        Ok(total)
    })?;
    if nosync {
        // As redb's benchmark: back to durable commits, untimed and
        // without a sync of its own (the relaxed commits become
        // durable with the next durable one, the removals').
        run.subject.set_sync(true)?;
    }
    run.len += commits * per;
    (s.secs, s.ops, s.counters, s.committed) = (secs, commits * per, counters, Some(c));
    Ok(())
}

/// `len()`, checked against the model.
fn len_phase(run: &Run, s: &mut Sample) -> Res<()> {
    let (n, secs, counters) = timed(|| run.subject.len())?;
    if n != run.len {
        return Err(format!("len() = {n}, the model holds {}", run.len));
    }
    (s.secs, s.ops, s.counters) = (secs, 1, counters);
    Ok(())
}

/// Point reads of the stream's pairs on one reader, each checked.
fn random_read_phase(run: &Run, counts: &Counts, s: &mut Sample) -> Res<()> {
    let mut out = Vec::with_capacity(VALUE_BYTES);
    let subject = &run.subject;
    let ((), secs, counters) = timed(|| {
        for _ in 0..counts.read_passes {
            let mut g = Gen::new();
            let mut r = subject.reader()?;
            for i in 0..counts.reads {
                let (k, v) = g.pair();
                if !r.get(&k, &mut out)? || out != v {
                    return Err(format!("read {i}: missing or wrong value"));
                }
            }
        }
        Ok(())
    })?;
    (s.secs, s.ops, s.counters) = (secs, counts.reads * counts.read_passes, counters);
    Ok(())
}

/// Range reads of `scan_len` entries from the stream's keys.
fn range_read_phase(run: &Run, counts: &Counts, s: &mut Sample) -> Res<()> {
    let subject = &run.subject;
    let ((), secs, counters) = timed(|| {
        for _ in 0..counts.scan_passes {
            let mut g = Gen::new();
            let mut r = subject.reader()?;
            let mut sum = 0u64;
            let mut seen = 0u64;
            for _ in 0..counts.scans {
                let (k, _) = g.pair();
                seen += r.scan(&k, counts.scan_len, &mut |_, v| {
                    sum += u64::from(v[0]);
                })? as u64;
            }
            if sum == 0 || seen < counts.scans {
                return Err(format!("range reads saw {seen} entries, sum {sum}"));
            }
        }
        Ok(())
    })?;
    (s.secs, s.ops, s.counters) = (secs, counts.scans * counts.scan_passes, counters);
    Ok(())
}

/// Point reads on `threads` threads, each from its own shard of the
/// stream, timed from the first start to the last end.
fn threaded_read_phase(
    run: &Run,
    threads: usize,
    counts: &Counts,
    shards: &Shards,
    s: &mut Sample,
) -> Res<()> {
    let per = counts.elements() / threads as u64;
    let gens = shards.of(threads);
    let subject: &dyn Subject = &*run.subject;
    let barrier = Barrier::new(threads);
    let results: Vec<Res<(Instant, Instant, Counters)>> = std::thread::scope(|sc| {
        let handles: Vec<_> = gens
            .iter()
            .map(|g| {
                let (barrier, mut g) = (&barrier, g.clone());
                sc.spawn(move || {
                    let c0 = Counters::snapshot();
                    let mut out = Vec::with_capacity(VALUE_BYTES);
                    barrier.wait();
                    let t0 = Instant::now();
                    let mut r = subject.reader()?;
                    for i in 0..per {
                        let (k, v) = g.pair();
                        if !r.get(&k, &mut out)? || out != v {
                            return Err(format!("thread read {i}: missing or wrong value"));
                        }
                    }
                    drop(r);
                    Ok((t0, Instant::now(), Counters::snapshot() - c0))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let runs = results.into_iter().collect::<Res<Vec<_>>>()?;
    let first = runs.iter().map(|r| r.0).min().ok_or("no threads")?;
    let last = runs.iter().map(|r| r.1).max().ok_or("no threads")?;
    s.secs = (last - first).as_secs_f64();
    s.ops = per * threads as u64;
    s.counters = runs
        .iter()
        .fold(Counters::default(), |acc, r| acc.add(&r.2));
    Ok(())
}

/// Removes the first half of the stream in one transaction.
fn removal_phase(run: &mut Run, counts: &Counts, s: &mut Sample) -> Res<()> {
    let n = counts.elements() / 2;
    let subject = &mut run.subject;
    let (c, secs, counters) = timed(|| {
        let mut g = Gen::new();
        subject.write(&mut |t| {
            for i in 0..n {
                if i % 1024 == 1023 {
                    memory_ok()?;
                }
                let (k, _) = g.pair();
                t.remove(&k)?;
            }
            Ok(n)
        })
    })?;
    run.len -= n;
    (s.secs, s.ops, s.counters, s.committed) = (secs, n, counters, Some(c));
    Ok(())
}

/// `retain` keeping every other entry, then the removed ones refilled.
fn retain_phase(run: &mut Run, s: &mut Sample) -> Res<()> {
    let mut i = 0u64;
    let subject = &mut run.subject;
    let ((removed, c), secs, counters) = timed(|| {
        subject.retain(&mut |_, _| {
            let keep = i.is_multiple_of(2);
            i += 1;
            keep
        })
    })?;
    if removed != run.len / 2 || i != run.len {
        return Err(format!(
            "retain visited {i} and removed {removed} of {} entries",
            run.len
        ));
    }
    run.len -= removed;
    refill(run, removed)?;
    (s.secs, s.ops, s.counters, s.committed) = (secs, removed, counters, Some(c));
    s.removed = Some(removed);
    Ok(())
}

/// `extract_if` over the extract range taking every other entry, then
/// the removed ones refilled.
fn extract_if_phase(run: &mut Run, s: &mut Sample) -> Res<()> {
    let mut i = 0u64;
    let subject = &mut run.subject;
    let ((n, c), secs, counters) = timed(|| {
        subject.extract_if(&EXTRACT_START, &EXTRACT_END, &mut |_, _| {
            let take = i % 2 == 1;
            i += 1;
            take
        })
    })?;
    if n != i / 2 {
        return Err(format!("extract_if visited {i} entries and removed {n}"));
    }
    run.len -= n;
    refill(run, n)?;
    (s.secs, s.ops, s.counters, s.committed) = (secs, n, counters, Some(c));
    s.removed = Some(n);
    Ok(())
}

/// Pops `pops` entries, then refills them.
fn pop_phase(run: &mut Run, counts: &Counts, s: &mut Sample) -> Res<()> {
    let n = counts.pops.min(run.len);
    let (len, subject) = (run.len, &mut run.subject);
    let (p, secs, counters) = timed(|| subject.pop(n, len, (n / 100).max(1)))?;
    if p.popped != n {
        return Err(format!("popped {} of {n}", p.popped));
    }
    run.len -= n;
    refill(run, n)?;
    s.secs = p.estimate.map_or(secs, |d| d.as_secs_f64());
    s.estimated = p.estimate.is_some();
    (s.ops, s.counters, s.committed) = (n, counters, Some(p.committed));
    s.removed = Some(n);
    Ok(())
}

/// Inserts `sorted` pairs of ascending keys in one transaction.
fn sorted_phase(run: &mut Run, counts: &Counts, s: &mut Sample) -> Res<()> {
    memory_ok()?;
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..counts.sorted)
        .map(|i| (sorted_key(i), run.pairs.value().to_vec()))
        .collect();
    let subject = &mut run.subject;
    let (c, secs, counters) = timed(|| {
        subject.write(&mut |t| {
            t.insert_sorted(&pairs)?;
            Ok(pairs.len() as u64)
        })
    })?;
    run.len += counts.sorted;
    (s.secs, s.ops, s.counters, s.committed) = (secs, counts.sorted, counters, Some(c));
    Ok(())
}
