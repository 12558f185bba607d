//! The `ferrite` command end to end: exit codes and one-line errors.

use std::process::{Command, Output};

fn ferrite(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .output()
        .expect("run ferrite")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn closing_counts(out: &str, target: &str) -> (usize, usize) {
    let line = out.lines().last().expect("output");
    let prefix = format!("checked {target}: ");
    let rest = line
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("closing line: {line}"));
    let (s, v) = rest.split_once(" crash states, ").unwrap();
    (
        s.parse().unwrap(),
        v.trim_end_matches(" violations").parse().unwrap(),
    )
}

#[test]
fn check_selftest_passes_and_broken_is_caught() {
    let o = ferrite(&["check", "selftest", "--budget", "400"]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let (states, violations) = closing_counts(&stdout(&o), "selftest");
    assert!(states >= 300, "{states}");
    assert_eq!(violations, 0);

    let o = ferrite(&["check", "selftest-broken", "--budget", "400"]);
    assert_eq!(o.status.code(), Some(1));
    let (_, violations) = closing_counts(&stdout(&o), "selftest-broken");
    assert!(violations > 0);
    // The printed reproducer replays a violation on its own.
    let out = stdout(&o);
    let repro = out
        .split("--at ")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap()
        .to_string();
    let o = ferrite(&["check", "selftest-broken", "--at", &repro]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
}

#[test]
fn cache_check_passes_and_its_planted_bugs_are_caught() {
    let o = ferrite(&["check", "cache", "--budget", "400"]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let (states, violations) = closing_counts(&stdout(&o), "cache");
    assert!(states >= 350, "{states}");
    assert_eq!(violations, 0);
    let out = stdout(&o);
    for run in ["cache/store-adr-2t", "cache/store-adr-1t"] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(run) && l.contains(" states")),
            "{run} not explored: {out}"
        );
    }
    let o = ferrite(&["check", "cache-planted", "--budget", "300"]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    for bug in [
        "EmptyBeforeLink",
        "CommitBeforeCopy",
        "EarlyRelease",
        "EvictBeforeSync",
    ] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("cache-planted/{bug}/")) && l.contains(" states")),
            "{bug} not explored: {out}"
        );
    }
    let (_, violations) = closing_counts(&out, "cache-planted");
    assert!(violations > 0);
}

#[test]
fn every_log_target_passes_a_small_budget() {
    for t in ["log-classic", "log-header", "log-rawl", "log-poplog"] {
        let o = ferrite(&["check", t, "--budget", "300"]);
        assert!(o.status.success(), "{t}: {}{}", stdout(&o), stderr(&o));
        let (states, violations) = closing_counts(&stdout(&o), t);
        assert!(states >= 250, "{t}: {states} states");
        assert_eq!(violations, 0);
    }
}

#[test]
fn unknown_target_is_one_line_and_nonzero() {
    let o = ferrite(&["check", "no-such-target"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.starts_with("ferrite: unknown check target"));
}

#[test]
fn pool_create_info_check_and_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.pool");
    let ps = p.to_str().unwrap();
    let o = ferrite(&[
        "pool", "create", ps, "--size", "1M", "--layout", "demo", "--domain", "msync",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = ferrite(&["pool", "info", ps, "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["layout"], "demo");
    assert_eq!(v["size"], 1 << 20);
    assert!(
        ferrite(&["pool", "check", ps, "--layout", "demo"])
            .status
            .success()
    );
    let o = ferrite(&["pool", "check", ps, "--layout", "other"]);
    assert_eq!(o.status.code(), Some(1));

    // Flip a checksummed byte: one clear line, exit 1, no panic.
    let mut b = std::fs::read(&p).unwrap();
    b[60] ^= 1;
    std::fs::write(&p, &b).unwrap();
    // `check` finds it (1), `info` cannot read it (an error: 2).
    for (cmd, code) in [("info", 2), ("check", 1)] {
        let o = ferrite(&["pool", cmd, ps]);
        assert_eq!(o.status.code(), Some(code));
        let e = stderr(&o);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains("checksum"), "{e}");
    }
    // Truncate: still one line.
    std::fs::write(&p, &b[..100]).unwrap();
    let o = ferrite(&["pool", "check", ps]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("truncated"), "{}", stderr(&o));
    // Not a pool at all, and a missing file.
    std::fs::write(&p, b"hello").unwrap();
    assert!(stderr(&ferrite(&["pool", "info", ps])).contains("not a Ferrite pool"));
    assert!(stderr(&ferrite(&["pool", "info", "/nonexistent/x"])).contains("no such pool file"));
    // Bad size argument.
    assert!(
        !ferrite(&["pool", "create", ps, "--size", "12Q"])
            .status
            .success()
    );
}

/// The help page of `ferrite <path…>` (via `ferrite help <path…>`).
fn help_page(path: &[String]) -> String {
    let mut args = vec!["help".to_string()];
    args.extend_from_slice(path);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = ferrite(&args);
    assert!(o.status.success(), "help {path:?}: {}", stderr(&o));
    stdout(&o)
}

/// The subcommands a help page lists under `Commands:` (without `help`).
fn subcommands(page: &str) -> Vec<String> {
    page.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// The example command lines of a help page: the lines after `Examples:`
/// that start with `ferrite `, as argument lists (a `# comment` dropped).
fn examples(page: &str) -> Vec<Vec<String>> {
    page.lines()
        .skip_while(|l| l.trim() != "Examples:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let l = l.split(" #").next().unwrap_or("").trim();
            let rest = l.strip_prefix("ferrite ")?;
            Some(rest.split_whitespace().map(str::to_string).collect())
        })
        .collect()
}

/// Every command's help page, depth first: (path, page).
fn every_help_page() -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    let mut todo = vec![Vec::<String>::new()];
    while let Some(path) = todo.pop() {
        let page = help_page(&path);
        for c in subcommands(&page) {
            let mut p = path.clone();
            p.push(c);
            todo.push(p);
        }
        out.push((path, page));
    }
    out
}

#[test]
fn every_command_lists_examples() {
    let pages = every_help_page();
    let names: Vec<String> = pages.iter().map(|(p, _)| p.join(" ")).collect();
    // The walk really descends: the top, every command, every subcommand.
    for want in [
        "",
        "probe",
        "bench",
        "check",
        "kv",
        "kv create",
        "kv get",
        "kv put",
        "kv del",
        "kv batch",
        "kv scan",
        "kv fill",
        "kv info",
        "serve",
        "pool",
        "pool create",
        "pool info",
        "pool check",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "no help page for '{want}': {names:?}"
        );
    }
    let mut missing = Vec::new();
    for (path, page) in &pages {
        let ex = examples(page);
        if ex.is_empty() {
            missing.push(format!("ferrite {}", path.join(" ")));
        }
        // A page's examples show its own command (not only its set-up).
        let own = |e: &Vec<String>| {
            e.iter()
                .filter(|a| !a.ends_with(".pool") && !a.starts_with("--"))
                .take(path.len())
                .eq(path.iter())
        };
        if !ex.is_empty() && !ex.iter().any(own) {
            missing.push(format!("ferrite {} (none of its own)", path.join(" ")));
        }
    }
    assert!(missing.is_empty(), "no Examples: block in {missing:?}");
}

/// Is this example cheap and confined to its working directory?
fn runnable(e: &[String]) -> bool {
    let a: Vec<&str> = e.iter().map(String::as_str).collect();
    matches!(
        a.as_slice(),
        ["pool", ..]
            | ["kv", ..]
            | ["check", "list"]
            | ["bench", "list"]
            | ["check", "selftest", ..]
            | ["trace", "--out", _, "--", "check", "selftest", ..]
            | ["trace", "--show", ..]
    )
}

/// Each help page's runnable examples, in order, in a fresh directory: each
/// block is a script that works as printed.
#[test]
fn help_examples_work_as_printed() {
    let mut ran = Vec::new();
    for (path, page) in every_help_page() {
        let dir = tempfile::tempdir().unwrap();
        for e in examples(&page).into_iter().filter(|e| runnable(e)) {
            // `> FILE` sends stdout to FILE, as the shell would.
            let (args, to) = match e.iter().position(|a| a == ">") {
                Some(i) => (e[..i].to_vec(), e.get(i + 1).cloned()),
                None => (e.clone(), None),
            };
            let o = Command::new(env!("CARGO_BIN_EXE_ferrite"))
                .args(&args)
                .current_dir(dir.path())
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "'ferrite {}' (from the help of 'ferrite {}') failed: {}",
                e.join(" "),
                path.join(" "),
                stderr(&o)
            );
            if let Some(f) = to {
                std::fs::write(dir.path().join(f), &o.stdout).unwrap();
            }
            ran.push(e.join(" "));
        }
    }
    // Every pool and kv page contributes (their examples are all runnable).
    for want in [
        "pool create app.pool --size 32MiB --layout myapp",
        "pool info demo.pool --json",
        "kv demo.pool --hex get 6772656574696e67",
        "kv demo.pool batch a=1 b=2 -old",
        "kv demo.pool scan b --limit 1",
        "kv demo.pool fill --count 20 --prefix user: --value-bytes 1K > keys.txt",
        "check list",
        "trace --show selftest.trace",
    ] {
        assert!(ran.iter().any(|r| r == want), "'{want}' not run: {ran:?}");
    }
    assert!(ran.len() >= 40, "{} examples run", ran.len());
}

/// What `pool info` prints: the size both ways, the creation time as a UTC
/// date (and in JSON the raw fields plus the same values for people).
#[test]
fn pool_info_prints_dates_and_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.pool");
    let ps = p.to_str().unwrap();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let o = ferrite(&["pool", "create", ps, "--size", "1.5 MiB"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("1.5 MiB (1572864 bytes)"),
        "{}",
        stdout(&o)
    );
    let o = ferrite(&["pool", "info", ps, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["size"], 1_572_864);
    assert_eq!(v["size_human"], "1.5 MiB");
    let secs = v["created_ns"].as_u64().unwrap() / 1_000_000_000;
    assert!((before..before + 60).contains(&secs), "{secs} vs {before}");
    let created = v["created"].as_str().unwrap().to_string();
    // RFC 3339: 2026-11-25T04:17:29Z
    let b = created.as_bytes();
    assert_eq!(b.len(), 20, "{created}");
    assert_eq!(
        (b[4], b[7], b[10], b[13], b[16], b[19]),
        (b'-', b'-', b'T', b':', b':', b'Z')
    );
    // The same instant as `date -u` prints it, when `date` is there.
    if let Ok(d) = Command::new("date")
        .args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        && d.status.success()
    {
        assert_eq!(String::from_utf8_lossy(&d.stdout).trim(), created);
    }
    let o = ferrite(&["pool", "info", ps]);
    let text = stdout(&o);
    assert!(
        text.contains("size:      1.5 MiB (1572864 bytes)\n"),
        "{text}"
    );
    let want = format!("created:   {} UTC\n", created[..19].replace('T', " "));
    assert!(text.contains(&want), "{text} lacks {want}");
}

/// Every size option takes every spelling, and refuses bad ones with the
/// reason on one line.
#[test]
fn sizes_on_every_option() {
    let dir = tempfile::tempdir().unwrap();
    let size_of = |p: &std::path::Path| {
        let o = ferrite(&["pool", "info", p.to_str().unwrap(), "--json"]);
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        v["size"].as_u64().unwrap()
    };
    for (i, (s, want)) in [
        ("2097152", 2u64 << 20),
        ("2M", 2 << 20),
        ("2m", 2 << 20),
        ("2MiB", 2 << 20),
        ("2MB", 2 << 20),
        ("2 mb", 2 << 20),
        ("2048K", 2 << 20),
        ("0.5M", 1 << 19),
    ]
    .into_iter()
    .enumerate()
    {
        let p = dir.path().join(format!("{i}.pool"));
        let o = ferrite(&["pool", "create", p.to_str().unwrap(), "--size", s]);
        assert!(o.status.success(), "{s}: {}", stderr(&o));
        assert_eq!(size_of(&p), want, "{s}");
        let k = dir.path().join(format!("{i}.kv"));
        let o = ferrite(&["kv", k.to_str().unwrap(), "create", "--size", s]);
        if want >= 2 << 20 {
            assert!(o.status.success(), "kv {s}: {}", stderr(&o));
            assert_eq!(size_of(&k), want, "kv {s}");
        }
    }
    let p = dir.path().join("bad.pool");
    let ps = p.to_str().unwrap();
    for (s, why) in [
        ("", "empty size"),
        ("-1M", "negative"),
        ("+1M", "not a number"),
        ("12Q", "unknown unit 'Q'"),
        ("0.3K", "not a whole number of bytes"),
        ("99999999T", "too large"),
        (
            "1000000",
            "not a multiple of the 4096-byte page (use 999424 or 1003520)",
        ),
        ("4K", "too small"),
    ] {
        // `--size=-1M`: a separate `-1M` would be read as a flag.
        let size_arg = format!("--size={s}");
        for cmd in [
            vec!["pool", "create", ps, &size_arg],
            vec!["kv", ps, "create", &size_arg],
        ] {
            let o = ferrite(&cmd);
            assert_eq!(o.status.code(), Some(2), "{cmd:?}");
            let e = stderr(&o);
            let first = e.lines().next().unwrap_or("");
            assert!(first.contains(why), "{cmd:?}: {e}");
            assert!(!p.exists());
        }
    }
    // serve's sizes: refused before anything is opened or bound.
    for (flag, s, why) in [
        ("--memory", "1.5X", "unknown unit"),
        ("--max-item-size", "=-4K", "negative"),
        ("--max-item-size", "2M", "use 1 to"),
    ] {
        let o = ferrite(&[
            "serve",
            "--pool",
            ps,
            "--listen",
            "127.0.0.1:0",
            &format!("{flag}={}", s.trim_start_matches('=')),
        ]);
        assert!(!o.status.success());
        assert!(stderr(&o).contains(why), "{flag} {s}: {}", stderr(&o));
        assert!(!p.exists());
    }
    // A new server pool must be whole pages too (an existing one is only
    // limited by --memory, any size).
    let o = ferrite(&[
        "serve",
        "--pool",
        ps,
        "--listen",
        "127.0.0.1:0",
        "--memory",
        "1000000",
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("not a multiple of the 4096-byte page"),
        "{}",
        stderr(&o)
    );
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(!p.exists());
}

/// `kv fill`'s progress goes to stderr as plain lines when stderr is not a
/// terminal (no carriage returns, no escape codes), and only after
/// FERRITE_PROGRESS_AFTER_MS (2 s by default); stdout keeps one key a line.
#[test]
fn fill_progress_is_plain_lines_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f.pool");
    let ps = p.to_str().unwrap();
    assert!(
        ferrite(&["kv", ps, "create", "--size", "16M"])
            .status
            .success()
    );
    let o = ferrite(&["kv", ps, "fill", "--count", "50"]);
    assert!(o.status.success());
    assert_eq!(stderr(&o), "", "a short fill is quiet");
    assert_eq!(stdout(&o).lines().count(), 50);
    let o = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["kv", ps, "fill", "--count", "300", "--prefix", "p"])
        .env("FERRITE_PROGRESS_AFTER_MS", "0")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(!e.contains('\r') && !e.contains('\x1b'), "{e:?}");
    // Opening the store (and its recovery) first, then the fill.
    let lines: Vec<&str> = e.lines().collect();
    assert!(lines.len() >= 4, "{e}");
    assert!(lines[0].starts_with("ferrite: opening "), "{e}");
    assert!(
        lines[1].contains(" done in ") && lines[1].contains("recovery"),
        "{e}"
    );
    assert!(
        lines[2].starts_with("ferrite: fill ") && lines[2].contains("/300 keys"),
        "{e}"
    );
    assert!(lines.last().unwrap().contains(": 300 keys in "), "{e}");
    assert!(lines.iter().all(|l| l.starts_with("ferrite: ")), "{e}");
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 300);
    assert!(out.lines().all(|l| l.starts_with('p')), "{out}");
}

/// `serve`'s examples would start a server (and a large pool): each is run
/// with its listen address made ephemeral and its pool put where it cannot
/// be created, so it gets past argument parsing (no usage error, exit 2)
/// and fails only at opening the pool (exit 1, one line).
#[test]
fn serve_examples_parse() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"").unwrap();
    let page = help_page(&["serve".to_string()]);
    let ex = examples(&page);
    assert!(ex.len() >= 3, "{page}");
    for e in ex {
        let mut args = e.clone();
        for i in 0..args.len() {
            match args[i].as_str() {
                "--listen" => args[i + 1] = "127.0.0.1:0".into(),
                "--pool" => {
                    args[i + 1] = file.join(&args[i + 1]).to_str().unwrap().to_string();
                }
                _ => {}
            }
        }
        if !args.iter().any(|a| a == "--listen") {
            args.extend(["--listen".to_string(), "127.0.0.1:0".to_string()]);
        }
        let o = Command::new(env!("CARGO_BIN_EXE_ferrite"))
            .args(&args)
            .env("FERRITE_DATA_DIR", &file)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "ferrite {}: {err}", e.join(" "));
        assert_eq!(err.lines().count(), 1, "ferrite {}: {err}", e.join(" "));
        assert!(
            err.starts_with("ferrite: "),
            "ferrite {}: {err}",
            e.join(" ")
        );
    }
}

/// `ferrite trace` records a check target's persist trace into a file that
/// `--show` reads back; a damaged file is one line on stderr and exit 1.
#[test]
fn trace_records_shows_and_refuses_damage() {
    let dir = tempfile::tempdir().unwrap();
    let ferrite = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_ferrite"))
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let o = ferrite(&[
        "trace", "--out", "t.trace", "--", "check", "selftest", "--budget", "10",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("wrote t.trace: 1 threads"),
        "{}",
        stderr(&o)
    );
    let o = ferrite(&["trace", "--show", "t.trace"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(out.contains(" fence") && !out.contains(" 0 fence"), "{out}");
    let path = dir.path().join("t.trace");
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let o = ferrite(&["trace", "--show", "t.trace"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("checksum mismatch"), "{err}");
    // Only bench and check run under it; bench sim records by itself.
    assert!(
        !ferrite(&["trace", "--", "pool", "info", "x.pool"])
            .status
            .success()
    );
    assert!(!ferrite(&["trace", "--", "bench", "sim"]).status.success());
}
