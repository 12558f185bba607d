//! The C and C++ side, compiled with the system's `cc` / `c++` against
//! `include/ferrite.h` and the `libferrite.so` this build produced (flags
//! from the generated `ferrite.pc` through pkg-config), then run:
//!
//! - `c/test.c`: the C API's behaviour and its bad-input errors;
//! - `c/test.cpp`: the C++ RAII wrapper `include/ferrite.hpp`;
//! - `c/kv.c`: the example tool, driven as a user would;
//! - `c/writer.c`: the kill -9 test — a C writer killed mid-run 20 times
//!   loses no acknowledged write.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// target/<profile>/deps: where cargo put libferrite.so and .a for this
/// test (and where ferrite.pc's libdir points), beside the test binary.
fn libdir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().expect("target/<profile>/deps");
    assert!(
        dir.join("libferrite.so").exists() && dir.join("libferrite.a").exists(),
        "{} has no libferrite.so / libferrite.a",
        dir.display()
    );
    dir.to_path_buf()
}

/// target/<profile>/pkgconfig, where the build wrote ferrite.pc.
fn pcdir() -> PathBuf {
    libdir()
        .parent()
        .expect("target/<profile>")
        .join("pkgconfig")
}

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Compiler and linker flags: pkg-config's on the generated ferrite.pc
/// (the way the README tells users), else the same flags by hand.
fn flags() -> Vec<String> {
    let lib = libdir();
    let out = Command::new("pkg-config")
        .args(["--cflags", "--libs", "ferrite"])
        .env("PKG_CONFIG_PATH", pcdir())
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8(o.stdout)
            .expect("UTF-8")
            .split_whitespace()
            .map(String::from)
            .collect(),
        _ => {
            eprintln!("pkg-config not usable: flags by hand");
            let inc = crate_dir().join("../../include");
            vec![
                format!("-I{}", inc.display()),
                format!("-L{}", lib.display()),
                format!("-Wl,-rpath,{}", lib.display()),
                "-lferrite".into(),
            ]
        }
    }
}

fn compile(compiler: &str, src: &str, out: &Path, extra: &[&str]) {
    let cc = std::env::var(if compiler == "cc" { "CC" } else { "CXX" })
        .unwrap_or_else(|_| compiler.into());
    let st = Command::new(&cc)
        .args(["-Wall", "-Wextra", "-Werror", "-O1"])
        .args(extra)
        .arg(crate_dir().join("c").join(src))
        .arg("-o")
        .arg(out)
        .args(flags())
        .status()
        .unwrap_or_else(|e| panic!("{cc}: {e}"));
    assert!(st.success(), "{cc} {src} failed");
}

/// A scratch directory on tmpfs when there is one (durable puts msync).
fn scratch() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").expect("tempdir")
    } else {
        tempfile::tempdir().expect("tempdir")
    }
}

fn run(bin: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(bin)
        .args(args)
        .env_remove("FERRITE_OPTIONS")
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), stdout)
}

#[test]
fn c_api_test_program_passes() {
    let dir = scratch();
    let bin = dir.path().join("test_c");
    compile("cc", "test.c", &bin, &["-std=c11"]);
    let (code, out) = run(&bin, &[dir.path().to_str().unwrap()]);
    print!("{out}");
    assert!(out.contains(" passed, 0 failed"), "{out}");
    assert_eq!(code, 0);
}

#[test]
fn cpp_wrapper_test_program_passes() {
    let dir = scratch();
    let bin = dir.path().join("test_cpp");
    compile("c++", "test.cpp", &bin, &["-std=c++17", "-pthread"]);
    let (code, out) = run(&bin, &[dir.path().to_str().unwrap()]);
    print!("{out}");
    assert!(out.contains(" passed, 0 failed"), "{out}");
    assert_eq!(code, 0);
}

#[test]
fn kv_example_tool_works() {
    let dir = scratch();
    let bin = dir.path().join("ferrite-kv");
    compile("cc", "kv.c", &bin, &["-std=c11"]);
    let pool = dir.path().join("kv.pool");
    let pool = pool.to_str().unwrap();
    assert_eq!(run(&bin, &[pool, "put", "apple", "red"]).0, 0);
    assert_eq!(run(&bin, &[pool, "put", "banana", "yellow"]).0, 0);
    assert_eq!(run(&bin, &[pool, "put", "cherry", "dark red"]).0, 0);
    assert_eq!(run(&bin, &[pool, "get", "banana"]), (0, "yellow\n".into()));
    assert_eq!(run(&bin, &[pool, "get", "durian"]), (1, String::new()));
    assert_eq!(run(&bin, &[pool, "del", "apple"]).0, 0);
    assert_eq!(run(&bin, &[pool, "del", "apple"]).0, 1);
    assert_eq!(
        run(&bin, &[pool, "scan"]).1,
        "banana=yellow\ncherry=dark red\n"
    );
    assert_eq!(run(&bin, &[pool, "scan", "c"]).1, "cherry=dark red\n");
    let (code, out) = run(&bin, &[pool, "check"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.starts_with("clean (inp engine") && out.contains("2 keys"),
        "{out}"
    );
    // Bad input: an empty key is a typed error (exit 2, message), not a crash.
    let (code, _) = run(&bin, &[pool, "put", "", "x"]);
    assert_eq!(code, 2);
    let junk = dir.path().join("junk");
    std::fs::write(&junk, vec![7u8; 1 << 16]).unwrap();
    assert_eq!(run(&bin, &[junk.to_str().unwrap(), "get", "k"]).0, 2);
    assert_eq!(run(&bin, &[junk.to_str().unwrap(), "check"]).0, 1);
}

/// Runs the writer from index `from`; kills it with SIGKILL after `after`;
/// returns the indices it acknowledged.
fn write_until_killed(bin: &Path, pool: &Path, opts: &str, from: u64, after: Duration) -> Vec<u64> {
    let mut child = Command::new(bin)
        .arg(pool)
        .arg(from.to_string())
        .env("FERRITE_OPTIONS", opts)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn writer");
    let stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map(|l| l.expect("line").trim().parse::<u64>().expect("index"))
            .collect::<Vec<u64>>()
    });
    let t0 = Instant::now();
    while t0.elapsed() < after {
        if let Some(st) = child.try_wait().expect("wait") {
            panic!("the writer exited by itself: {st}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().expect("SIGKILL"); // Child::kill sends SIGKILL on Unix
    let st = child.wait().expect("wait");
    assert!(st.code().is_none(), "the writer was not killed: {st}");
    reader.join().expect("reader")
}

#[test]
fn kill_9_loses_no_acknowledged_write() {
    let dir = scratch();
    let bin = dir.path().join("writer");
    compile("cc", "writer.c", &bin, &["-std=c11"]);
    let (mut kills, mut acked, mut lost) = (0, 0u64, 0u64);
    for (e, engine) in ["inp", "cow", "lsm"].iter().enumerate() {
        let pool = dir.path().join(format!("kill-{engine}.pool"));
        let opts = format!("engine={engine},size=32M");
        let mut next = 0u64;
        let rounds = if e == 0 { 8 } else { 6 }; // 20 kills in all
        for round in 0..rounds {
            // Kill at varied points: right after open, mid-stream, later.
            let after = Duration::from_millis(40 + (round * 37 % 160) as u64);
            let got = write_until_killed(&bin, &pool, &opts, next, after);
            kills += 1;
            assert!(
                got.windows(2).all(|w| w[1] == w[0] + 1),
                "acknowledgements out of order"
            );
            if !pool.exists() {
                // Killed while creating the pool (the create is atomic:
                // no half-made pool is left), before any write.
                assert!(got.is_empty(), "writes acknowledged, but no pool");
                continue;
            }
            // Reopen (recovery) and look for every acknowledged write.
            let store =
                ferrite_engine::Store::open_file(&pool, &ferrite_engine::StoreOptions::default())
                    .unwrap_or_else(|e| panic!("{engine} round {round}: reopen: {e}"));
            for &i in &got {
                let want = format!("value of key {i:06}");
                let key = format!("key-{i:06}");
                if store.get(key.as_bytes()).unwrap().as_deref() != Some(want.as_bytes()) {
                    eprintln!("{engine} round {round}: acknowledged {key} is lost");
                    lost += 1;
                }
                if i % 10 == 0 {
                    // The batch's twin: both or neither, and acknowledged means both.
                    let twin = format!("twin-{i:06}");
                    if store.get(twin.as_bytes()).unwrap().as_deref() != Some(want.as_bytes()) {
                        eprintln!("{engine} round {round}: acknowledged {twin} is lost");
                        lost += 1;
                    }
                }
            }
            acked += got.len() as u64;
            if let Some(&last) = got.last() {
                next = last + 1;
            }
            store.close().unwrap();
        }
        assert!(next > 0, "{engine}: the writer never acknowledged a write");
        // Closed cleanly now: the deep check finds nothing.
        let c = ferrite::check::check_pool(&pool).unwrap();
        assert!(c.findings.is_empty(), "{engine}: {}", c.report());
    }
    println!("kill -9: {kills} kills, {acked} acknowledged writes, {lost} lost");
    assert_eq!(kills, 20);
    assert_eq!(lost, 0);
}

#[test]
fn static_library_links_and_runs() {
    let dir = scratch();
    let bin = dir.path().join("ferrite-kv-static");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-O1"])
        .arg(format!("-I{}", crate_dir().join("../../include").display()))
        .arg(crate_dir().join("c/kv.c"))
        .arg(libdir().join("libferrite.a"))
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&bin)
        .status()
        .expect("cc");
    assert!(st.success(), "linking libferrite.a failed");
    // Statically linked: it needs no libferrite.so.
    let ldd = Command::new("ldd").arg(&bin).output();
    if let Ok(o) = ldd {
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(!text.contains("libferrite"), "{text}");
    }
    let pool = dir.path().join("s.pool");
    let pool = pool.to_str().unwrap();
    assert_eq!(run(&bin, &[pool, "put", "k", "static"]).0, 0);
    assert_eq!(run(&bin, &[pool, "get", "k"]), (0, "static\n".into()));
}
