//! Opening an LSM store (module docs of [`super`]): the fixed area and the
//! manifest read and checked, the runs listed, the log replayed into the
//! memtable up to its first invalid record, the log's tail zeroed
//! ([`scrub`]) and the live keys counted ([`count_live`]).

use super::*;

pub(crate) fn open(
    ctx: EngineCtx,
    opts: &StoreOptions,
) -> Result<(Box<dyn Engine>, EngineRecovery)> {
    check_opts(&opts.lsm)?;
    let nonce = ctx.sb.nonce;
    let pool = &ctx.pool;
    let alloc = &ctx.alloc;
    let block_len = |off: u64, what: &str| -> Result<u64> {
        alloc
            .usable_size(POff::new(off))
            .map(|n| n as u64)
            .map_err(|e| corrupt(format!("{what} at {off:#x} is not an allocated block: {e}")))
    };
    let man_off = pool.load_u64(ctx.area_off as usize);
    if man_off == 0 {
        return Err(corrupt("no manifest linked"));
    }
    let mlen = block_len(man_off, "manifest")?;
    let man = Manifest::read(pool, man_off, nonce)?;
    if man.len() as u64 > mlen {
        return Err(corrupt("manifest longer than its block"));
    }
    if block_len(man.seg, "log segment")? < man.cap {
        return Err(corrupt("log segment smaller than its capacity"));
    }
    // The manifest, segment and runs are distinct blocks.
    let mut seen = std::collections::BTreeSet::from([man_off, man.seg]);
    if seen.len() != 2 || man.runs.iter().any(|&(o, _)| !seen.insert(o)) {
        return Err(corrupt("manifest names a block twice"));
    }
    let mut runs = Vec::with_capacity(man.runs.len());
    for &(off, len) in &man.runs {
        if block_len(off, "run")? < len {
            return Err(corrupt(format!("run at {off:#x} longer than its block")));
        }
        let mut meta = format::load_run(pool, off, len, nonce)?;
        meta.verify = opts.verify;
        runs.push(Arc::new(Run::new(off, len, meta)));
    }
    // Replay the log's valid prefix.
    let mut mem = BTreeMap::new();
    let mut pos = 0u64;
    let mut seq = man.first_seq;
    let mut body = Vec::new();
    let mut replayed = 0usize;
    while let Some(len) = format::read_record(
        pool,
        man.seg,
        man.cap,
        pos,
        nonce,
        seq,
        man.log_gen,
        &mut body,
    )? {
        apply_body(&mut mem, &body)?;
        replayed += 1;
        seq += 1;
        pos += len;
    }
    // A damaged record, not a torn one (format docs): refuse rather than
    // drop it and every record after it.
    if let Some(at) =
        format::durable_successor(pool, man.seg, man.cap, pos, nonce, seq, man.log_gen)?
    {
        return Err(corrupt(format!(
            "log record {seq} at segment offset {pos} is damaged: record {} at {at}, written after it was durable, is intact",
            seq + 1
        )));
    }
    // Scrub everything after the valid prefix (see the module docs).
    scrub(pool, man.seg + pos, man.cap - pos);
    let keys = count_live(pool, &mem, &runs)?;
    let damaged: usize = runs.iter().map(|r| r.meta.damaged.len()).sum();
    let rec = EngineRecovery {
        replayed,
        keys,
        detail: format!(
            "manifest gen {}, {} runs, {} log records replayed ({} log bytes){}",
            man.gen_,
            runs.len(),
            replayed,
            pos,
            if damaged == 0 {
                String::new()
            } else {
                let (s, verb, its) = if damaged == 1 {
                    ("", "fails", "its")
                } else {
                    ("s", "fail", "their")
                };
                format!(
                    "; {damaged} data block{s} {verb} {its} checksum{s}: {its} keys cannot be read (`ferrite pool check --deep` lists them)"
                )
            }
        ),
        ..EngineRecovery::default()
    };
    let eng = Lsm::new(ctx, opts, man, man_off, pos, mem, runs, rec.clone());
    eng.writer.lock().next_seq = seq;
    Ok((Box::new(LsmEngine::start(eng)), rec))
}

/// Zeroes every non-zero line of `[off, off + len)`, under one fence.
fn scrub(pool: &Region, off: u64, len: u64) {
    const CHUNK: u64 = 64 << 10;
    let mut buf = vec![0u8; CHUNK as usize];
    let mut p = 0u64;
    let mut wrote = false;
    while p < len {
        let n = CHUNK.min(len - p) as usize;
        pool.read((off + p) as usize, &mut buf[..n]);
        for (i, line) in buf[..n].chunks(64).enumerate() {
            if line.iter().any(|&b| b != 0) {
                let at = (off + p) as usize + 64 * i;
                pool.fill(at, line.len(), 0);
                pool.flush(at, line.len());
                wrote = true;
            }
        }
        p += n as u64;
    }
    if wrote {
        pool.fence();
    }
}

fn apply_body(mem: &mut BTreeMap<Vec<u8>, Option<Vec<u8>>>, body: &[u8]) -> Result<()> {
    format::for_each_op(body, |kind, k, v| {
        let val = (kind == format::OP_PUT).then(|| v.to_vec());
        mem.insert(k.to_vec(), val);
    })
}

/// The live keys of the memtable over `runs`. A run's damaged blocks
/// (see [`format::RunMeta::damaged`]) are left out: the count is then of
/// the keys that can be read.
fn count_live(
    pool: &Region,
    mem: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    runs: &[Arc<Run>],
) -> Result<u64> {
    let readable: Vec<Arc<Run>>;
    let runs = if runs.iter().any(|r| !r.meta.damaged.is_empty()) {
        readable = (runs.iter())
            .map(|r| Arc::new(Run::new(r.off, r.len, r.meta.readable())))
            .collect();
        &readable[..]
    } else {
        runs
    };
    let mut m = Merge::new(pool, mem_iter(mem.iter()), runs, &[])?;
    let mut n = 0;
    while let Some((_, v)) = m.next()? {
        n += u64::from(v.is_some());
    }
    Ok(n)
}
