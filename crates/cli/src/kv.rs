//! `ferrite kv PATH …`: poke at an embedded store from the shell.
//!
//! Keys and values are given as text; `--hex` reads and prints them as
//! hexadecimal instead. Output of `get` is the value alone (so it pipes),
//! of `scan` one `key<TAB>value` line per pair.
//!
//! Without `--hex`, keys and values are written as their exact bytes
//! (each line ends with one `\n` added after them), never with invalid
//! UTF-8 replaced: `ferrite kv P get k > v.bin` holds the value's bytes
//! and a newline. On a terminal, where raw bytes would be garbled or
//! reprogram it, a key or value that is not printable UTF-8 is refused
//! (use `--hex`, or redirect).
//!
//! Exit status: 0 done, 1 the key is not there (`get`, `del`), 2 an error
//! (one line on stderr).

use clap::Subcommand;
use ferrite_engine::{
    AllocKind, Domain, EngineKind, KeyRange, Op, Store, StoreOptions, StoreSession,
};
use std::ops::Bound;
use std::path::Path;
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum KvCmd {
    /// Create a store in a new pool file.
    #[command(after_help = "\
Examples:
  ferrite kv demo.pool create
  ferrite kv lsm.pool create --engine lsm --max-size 32GiB
  ferrite kv small.pool create --engine inp --allocator nstore-lock --size 16M")]
    Create {
        /// Engine: inp, cow or lsm.
        #[arg(long, default_value = "cow", value_parser = parse_engine)]
        engine: EngineKind,
        /// Allocator: ferrite or nstore-lock.
        #[arg(long, default_value = "ferrite", value_parser = parse_alloc)]
        allocator: AllocKind,
        /// A fixed pool size: bytes, or with a unit (64M = 64MB = 64MiB =
        /// 2^26 bytes; 1.5G); a whole number of 4 KiB pages. Without it
        /// the store starts small and grows on demand (up to --max-size,
        /// default 1 TiB).
        #[arg(long, value_parser = crate::size::pool_arg)]
        size: Option<u64>,
        /// Let the store grow up to this size (with --size: from that size).
        #[arg(long, value_parser = crate::size::pool_arg)]
        max_size: Option<u64>,
    },
    /// Print the value of KEY (exit 1 when absent, 2 on errors).
    ///
    /// A binary value is written as its raw bytes (then a newline); on a
    /// terminal it is refused: use --hex or redirect stdout.
    #[command(after_help = "\
Examples:
  ferrite kv demo.pool create
  ferrite kv demo.pool put greeting hello
  ferrite kv demo.pool get greeting
  ferrite kv demo.pool --hex get 6772656574696e67")]
    Get { key: String },
    /// Set KEY to VALUE (durable when the command returns).
    #[command(after_help = "\
Examples:
  ferrite kv demo.pool create
  ferrite kv demo.pool put greeting hello
  ferrite kv demo.pool put config:path /var/lib/app
  ferrite kv demo.pool --hex put 00ff beef")]
    Put { key: String, value: String },
    /// Delete KEY (exit 1 when absent).
    #[command(after_help = "\
Examples:
  ferrite kv demo.pool create
  ferrite kv demo.pool put greeting hello
  ferrite kv demo.pool del greeting")]
    Del { key: String },
    /// Set several keys atomically: KEY=VALUE to put, -KEY to delete.
    #[command(after_help = "\
Examples:
  ferrite kv demo.pool create
  ferrite kv demo.pool put old x
  ferrite kv demo.pool batch a=1 b=2 -old
  ferrite kv demo.pool --hex batch 01=aa 02=bb")]
    Batch {
        #[arg(required = true, allow_hyphen_values = true)]
        ops: Vec<String>,
    },
    /// Print up to LIMIT pairs with keys >= FROM (and < END), in key
    /// order or, with --reverse, from the last (KEY<TAB>VALUE).
    #[command(after_help = "\
Examples:
  ferrite kv demo.pool create
  ferrite kv demo.pool batch a=1 b=2 c=3 user:1=x user:2=y
  ferrite kv demo.pool scan
  ferrite kv demo.pool scan b --limit 1
  ferrite kv demo.pool scan a --end c
  ferrite kv demo.pool scan --prefix user: --reverse")]
    Scan {
        #[arg(default_value = "")]
        from: String,
        /// Stop before this key.
        #[arg(long)]
        end: Option<String>,
        /// Only keys starting with this (with FROM and --end, inside both).
        #[arg(long)]
        prefix: Option<String>,
        /// Greatest key first.
        #[arg(long)]
        reverse: bool,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Put COUNT generated pairs (`PREFIX<n>` → VALUE_BYTES bytes), one
    /// durable put each, printing each key once it is acknowledged.
    ///
    /// Keys go to stdout; progress (after a few seconds) to stderr.
    #[command(after_help = "\
Examples:
  ferrite kv demo.pool create
  ferrite kv demo.pool fill --count 100
  ferrite kv demo.pool fill --count 20 --prefix user: --value-bytes 1K > keys.txt")]
    Fill {
        #[arg(long, default_value_t = 1000)]
        count: u64,
        #[arg(long, default_value = "key-")]
        prefix: String,
        /// Bytes per value: a size (100, 1K, 4KiB).
        #[arg(long, default_value = "100", value_parser = crate::size::arg)]
        value_bytes: u64,
    },
    /// Engine, allocator, key count, space, what recovery did.
    #[command(after_help = "\
Examples:
  ferrite kv demo.pool create
  ferrite kv demo.pool info")]
    Info,
}

fn parse_engine(s: &str) -> Result<EngineKind, String> {
    EngineKind::parse(s).ok_or_else(|| format!("unknown engine '{s}' (inp, cow or lsm)"))
}

fn parse_alloc(s: &str) -> Result<AllocKind, String> {
    AllocKind::parse(s).ok_or_else(|| format!("unknown allocator '{s}' (ferrite or nstore-lock)"))
}

/// The keys `scan` prints: from FROM (the empty key: the first), before
/// END, starting with PREFIX, in either order.
fn scan_range(
    from: &str,
    end: Option<&str>,
    prefix: Option<&str>,
    reverse: bool,
    hex: bool,
) -> Result<KeyRange, String> {
    let mut start = Bound::Included(decode(from, hex)?);
    let mut stop = match end {
        Some(e) => Bound::Excluded(decode(e, hex)?),
        None => Bound::Unbounded,
    };
    if let Some(p) = prefix {
        // The tighter of each pair of bounds.
        let p = KeyRange::prefix(decode(p, hex)?);
        if let Bound::Included(ps) = p.start()
            && matches!(&start, Bound::Included(s) if s.as_slice() < ps)
        {
            start = Bound::Included(ps.to_vec());
        }
        if let Bound::Excluded(pe) = p.end()
            && !matches!(&stop, Bound::Excluded(e) if e.as_slice() <= pe)
        {
            stop = Bound::Excluded(pe.to_vec());
        }
    }
    let r = KeyRange::bounds(start, stop);
    Ok(if reverse { r.rev() } else { r })
}

fn decode(s: &str, hex: bool) -> Result<Vec<u8>, String> {
    if !hex {
        return Ok(s.as_bytes().to_vec());
    }
    if !s.len().is_multiple_of(2) {
        return Err(format!("'{s}' is not hexadecimal (odd length)"));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| format!("'{s}' is not hexadecimal"))
        })
        .collect()
}

/// Appends `b` as output: hexadecimal with `hex`, else its own bytes.
/// Refused when `terminal` and the bytes are not printable text (invalid
/// UTF-8, or control characters other than tab and newline).
fn encode(out: &mut Vec<u8>, b: &[u8], hex: bool, terminal: bool) -> Result<(), String> {
    if hex {
        out.extend(b.iter().flat_map(|x| format!("{x:02x}").into_bytes()));
        return Ok(());
    }
    if terminal {
        let printable = std::str::from_utf8(b)
            .is_ok_and(|s| !s.chars().any(|c| c.is_control() && c != '\t' && c != '\n'));
        if !printable {
            return Err(format!(
                "{} bytes of binary data (not printable UTF-8): not written to a terminal; use --hex, or redirect stdout",
                b.len()
            ));
        }
    }
    out.extend_from_slice(b);
    Ok(())
}

/// Writes `bytes` to stdout (a closed pipe ends the command quietly).
fn emit(bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    match o.write_all(bytes).and_then(|()| o.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("stdout: {e}")),
    }
}

pub fn run(path: &Path, hex: bool, domain: Option<Domain>, cmd: KvCmd) -> Result<ExitCode, String> {
    let base = match domain {
        Some(d) => StoreOptions::default().domain(d),
        None => StoreOptions::default(),
    };
    let e = |e: ferrite_engine::EngineError| crate::at(path, e);
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
    if let KvCmd::Create {
        engine,
        allocator,
        size,
        max_size,
    } = cmd
    {
        return create(path, base, engine, allocator, size, max_size);
    }
    // Opening runs recovery, which takes a while on a large store.
    let step = crate::progress::Step::start(format!("opening {}", path.display()));
    let store = crate::opener::open_engine_store(path, &base).map_err(|x| crate::at(path, x))?;
    step.done(&format!(
        "recovery {:.1} s",
        store.recovery().elapsed.as_secs_f64()
    ));
    // Run the command, then close the store whatever it returned (an
    // error mid-command still closes the pool cleanly).
    let code = (|| -> Result<ExitCode, String> {
        let mut s = store.session().map_err(e)?;
        match cmd {
            KvCmd::Create { .. } => unreachable!("handled above"),
            KvCmd::Get { key } => get(&mut s, path, &key, hex, terminal),
            KvCmd::Put { key, value } => {
                s.put(&decode(&key, hex)?, &decode(&value, hex)?)
                    .map_err(e)?;
                Ok(ExitCode::SUCCESS)
            }
            KvCmd::Del { key } => {
                if s.delete(&decode(&key, hex)?).map_err(e)? {
                    Ok(ExitCode::SUCCESS)
                } else {
                    eprintln!("ferrite: {key}: not found");
                    Ok(ExitCode::FAILURE)
                }
            }
            KvCmd::Batch { ops } => batch(&mut s, path, &ops, hex),
            KvCmd::Scan {
                from,
                end,
                prefix,
                reverse,
                limit,
            } => {
                let range = scan_range(&from, end.as_deref(), prefix.as_deref(), reverse, hex)?;
                scan(&mut s, path, &range, limit, hex, terminal)
            }
            KvCmd::Fill {
                count,
                prefix,
                value_bytes,
            } => fill(&mut s, path, count, &prefix, value_bytes),
            KvCmd::Info => info(&store, path),
        }
    })();
    store.close().map_err(e)?;
    code
}

/// `create`: a new store in a new pool file at `path`, `size` fixed or
/// growing to `max_size`.
fn create(
    path: &Path,
    base: StoreOptions,
    engine: EngineKind,
    allocator: AllocKind,
    size: Option<u64>,
    max_size: Option<u64>,
) -> Result<ExitCode, String> {
    let e = |e: ferrite_engine::EngineError| crate::at(path, e);
    let step = crate::progress::Step::start(format!("creating {}", path.display()));
    let mut opts = base.engine(engine).allocator(allocator);
    if let Some(s) = size {
        opts = opts.size(s);
    }
    if let Some(m) = max_size {
        opts = opts.max_size(m);
    }
    let store = Store::create_new(path, &opts).map_err(e)?;
    step.done("");
    let (now, max) = store.pool().map_or((0, 0), |p| {
        (p.medium().map().mapped() as u64, p.header().max_size)
    });
    let sizing = if max > 0 {
        format!(
            "{} growing to at most {}",
            crate::size::Both(now),
            crate::size::Both(max)
        )
    } else {
        format!("{} (fixed)", crate::size::Both(now))
    };
    println!(
        "created {}: {engine} engine on the {allocator} allocator, {sizing}, domain {}",
        path.display(),
        store.pool().map_or("?".into(), |p| p.domain().to_string())
    );
    store.close().map_err(e)?;
    Ok(ExitCode::SUCCESS)
}

/// `get`: the value alone and a newline, or exit 1 when absent.
fn get(
    s: &mut StoreSession,
    path: &Path,
    key: &str,
    hex: bool,
    terminal: bool,
) -> Result<ExitCode, String> {
    match s.get(&decode(key, hex)?).map_err(|x| crate::at(path, x))? {
        Some(v) => {
            let mut out = Vec::with_capacity(v.len() * if hex { 2 } else { 1 } + 1);
            encode(&mut out, &v, hex, terminal).map_err(|m| format!("{key}: {m}"))?;
            out.push(b'\n');
            emit(&out)?;
            Ok(ExitCode::SUCCESS)
        }
        None => {
            eprintln!("ferrite: {key}: not found");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `batch`: every `KEY=VALUE` put and `-KEY` delete in one atomic batch;
/// nothing is written when one operation does not parse.
fn batch(s: &mut StoreSession, path: &Path, ops: &[String], hex: bool) -> Result<ExitCode, String> {
    let mut owned: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    for o in ops {
        if let Some(k) = o.strip_prefix('-') {
            owned.push((decode(k, hex)?, None));
        } else if let Some((k, v)) = o.split_once('=') {
            owned.push((decode(k, hex)?, Some(decode(v, hex)?)));
        } else {
            return Err(format!(
                "batch operation '{o}' is neither KEY=VALUE nor -KEY"
            ));
        }
    }
    let batch: Vec<Op<'_>> = owned
        .iter()
        .map(|(k, v)| match v {
            Some(v) => Op::Put { key: k, value: v },
            None => Op::Delete { key: k },
        })
        .collect();
    s.batch(&batch).map_err(|x| crate::at(path, x))?;
    Ok(ExitCode::SUCCESS)
}

/// `scan`: up to `limit` pairs of `range`, one `key<TAB>value` line each,
/// written out every 64 KiB; a pair that cannot be printed ends the scan
/// with an error after the pairs before it.
fn scan(
    s: &mut StoreSession,
    path: &Path,
    range: &KeyRange,
    limit: usize,
    hex: bool,
    terminal: bool,
) -> Result<ExitCode, String> {
    let mut left = limit;
    let mut out = Vec::new();
    let mut bad = None;
    s.range_with(range, &mut |k, v| {
        if left == 0 {
            return false;
        }
        let mark = out.len();
        let line = encode(&mut out, k, hex, terminal)
            .and_then(|()| {
                out.push(b'\t');
                encode(&mut out, v, hex, terminal)
            })
            .map(|()| out.push(b'\n'));
        if let Err(m) = line {
            out.truncate(mark);
            bad = Some(format!("pair {}: {m}", limit - left + 1));
            return false;
        }
        if out.len() >= 1 << 16 {
            if let Err(m) = emit(&out) {
                bad = Some(m);
                return false;
            }
            out.clear();
        }
        left -= 1;
        left > 0
    })
    .map_err(|x| crate::at(path, x))?;
    // What was printed before a refused pair stays printed.
    emit(&out)?;
    if let Some(m) = bad {
        return Err(m);
    }
    Ok(ExitCode::SUCCESS)
}

/// `fill`: `count` durable puts of `PREFIX<n>` → `value_bytes` bytes,
/// each key printed once acknowledged.
fn fill(
    s: &mut StoreSession,
    path: &Path,
    count: u64,
    prefix: &str,
    value_bytes: u64,
) -> Result<ExitCode, String> {
    use std::io::Write;
    // Values are at most a store's MAX_VALUE: a larger size is refused by
    // the first put, typed.
    let value_bytes = usize::try_from(value_bytes)
        .map_err(|_| format!("--value-bytes {value_bytes} is too large"))?;
    let mut out = std::io::stdout().lock();
    let mut bar = crate::progress::Counter::new(format!("fill {}", path.display()), "keys", count);
    for n in 0..count {
        let key = format!("{prefix}{n}");
        let value: Vec<u8> = key.bytes().cycle().take(value_bytes).collect();
        s.put(key.as_bytes(), &value)
            .map_err(|x| crate::at(path, x))?;
        // Printed only once durable: a test that kills this process finds
        // every printed key after reopening.
        writeln!(out, "{key}").map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
        bar.tick(n + 1);
    }
    bar.finish(count);
    Ok(ExitCode::SUCCESS)
}

/// `info`: engine, allocator, key count, space, what recovery did.
fn info(store: &Store, path: &Path) -> Result<ExitCode, String> {
    let r = store.recovery();
    let st = store.stats();
    let a = store.allocator().stats();
    println!("path:       {}", path.display());
    println!("engine:     {}", store.kind());
    println!("allocator:  {}", store.allocator_kind());
    println!(
        "keys:       {}",
        store.len().map_err(|x| crate::at(path, x))?
    );
    println!(
        "space:      {} of {} bytes in use ({} of {}, {} blocks){}",
        a.in_use,
        a.capacity,
        crate::size::human(a.in_use),
        crate::size::human(a.capacity),
        a.blocks,
        if a.grow_room > 0 {
            format!("; grows by up to {} more", crate::size::human(a.grow_room))
        } else {
            String::new()
        }
    );
    println!(
        "recovery:   {:.3} ms, {} records replayed; {}",
        r.elapsed.as_secs_f64() * 1e3,
        r.replayed,
        r.detail
    );
    if !st.detail.is_empty() {
        println!("engine:     {}", st.detail);
    }
    Ok(ExitCode::SUCCESS)
}
