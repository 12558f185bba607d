//! The C-overhead benchmark, two ways (bench/overhead.sh runs both):
//!
//! - `overhead POOL N OPTIONS rust`: the same N durable puts and N gets as
//!   c/bench.c, through the Rust API (`Store::put`, `Store::get`); prints
//!   "rust put_ns=X get_ns=Y", to compare with the C program's line.
//! - `overhead POOL N OPTIONS interleaved`: one process, one store; blocks
//!   of puts (then gets) alternate between the Rust API and the exported C
//!   functions (`ferrite_store_put` / `ferrite_store_get` + `ferrite_free`,
//!   called through the C ABI exactly as a C program calls them), the order
//!   flipped every round so drift and neighbours' load hit both alike;
//!   prints the median ns/op of each and the ratio.

use ferrite::{FERRITE_OK, ferrite_free, ferrite_store, ferrite_store_get, ferrite_store_put};
use std::ffi::c_void;
use std::time::Instant;

fn key_of(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    let s = format!("{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 8);
    k.copy_from_slice(s.as_bytes());
    k
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, path, n, opts, mode] = &args[..] else {
        return Err("usage: overhead POOL N OPTIONS rust|interleaved".into());
    };
    let n: u64 = n.parse()?;
    let _ = std::fs::remove_file(path);
    let val = [b'v'; 100];
    if mode == "rust" {
        let o = ferrite::options::parse_options(Some(opts))?;
        let store = ferrite::options::open(path.as_ref(), &o)?;
        let t0 = Instant::now();
        for i in 0..n {
            store.put(&key_of(i), &val)?;
        }
        let t1 = Instant::now();
        let mut total = 0;
        for i in 0..n {
            total += store.get(&key_of(i))?.ok_or("missing")?.len();
        }
        let t2 = Instant::now();
        assert_eq!(total as u64, n * 100);
        println!(
            "rust put_ns={:.1} get_ns={:.1}",
            (t1 - t0).as_nanos() as f64 / n as f64,
            (t2 - t1).as_nanos() as f64 / n as f64
        );
        store.close()?;
        let _ = std::fs::remove_file(path);
        return Ok(());
    }

    // Interleaved: the store opened through the C API, used both ways.
    let cpath = std::ffi::CString::new(path.as_str())?;
    let copts = std::ffi::CString::new(opts.as_str())?;
    let mut h: *mut ferrite_store = std::ptr::null_mut();
    // SAFETY: valid C strings and out-pointer.
    let rc = unsafe { ferrite::ferrite_store_open(cpath.as_ptr(), copts.as_ptr(), &mut h) };
    assert_eq!(rc, FERRITE_OK);
    // The same store through the Rust API: a second handle is refused
    // (the pool is locked), so the Rust calls go through an identical
    // store opened on a second pool file.
    let o = ferrite::options::parse_options(Some(opts))?;
    let rpath = format!("{path}.rust");
    let _ = std::fs::remove_file(&rpath);
    let store = ferrite::options::open(rpath.as_ref(), &o)?;
    let block = 200u64;
    let rounds = (n / block).max(2);
    let (mut cput, mut rput, mut cget, mut rget) = (vec![], vec![], vec![], vec![]);
    let c_put = |from: u64| {
        let t = Instant::now();
        for i in from..from + block {
            let k = key_of(i);
            // SAFETY: live handle; key and value readable for their lengths.
            let rc = unsafe {
                ferrite_store_put(h, k.as_ptr().cast(), 16, val.as_ptr().cast(), val.len())
            };
            assert_eq!(rc, FERRITE_OK);
        }
        t.elapsed().as_nanos() as f64 / block as f64
    };
    let r_put = |from: u64| -> Result<f64, ferrite_engine::EngineError> {
        let t = Instant::now();
        for i in from..from + block {
            store.put(&key_of(i), &val)?;
        }
        Ok(t.elapsed().as_nanos() as f64 / block as f64)
    };
    for r in 0..rounds {
        if r % 2 == 0 {
            cput.push(c_put(r * block));
            rput.push(r_put(r * block)?);
        } else {
            rput.push(r_put(r * block)?);
            cput.push(c_put(r * block));
        }
    }
    let keys = rounds * block;
    let gblock = 1000u64;
    let c_get = |r: u64| {
        let t = Instant::now();
        for j in 0..gblock {
            let k = key_of((r * gblock + j) % keys);
            let (mut v, mut vl): (*mut c_void, usize) = (std::ptr::null_mut(), 0);
            // SAFETY: live handle; key readable; out-pointers valid.
            let rc = unsafe { ferrite_store_get(h, k.as_ptr().cast(), 16, &mut v, &mut vl) };
            assert!(rc == FERRITE_OK && vl == 100);
            // SAFETY: `v` came from ferrite_store_get.
            unsafe { ferrite_free(v) };
        }
        t.elapsed().as_nanos() as f64 / gblock as f64
    };
    let r_get = |r: u64| -> Result<f64, ferrite_engine::EngineError> {
        let t = Instant::now();
        for j in 0..gblock {
            let v = store.get(&key_of((r * gblock + j) % keys))?;
            assert_eq!(v.map(|v| v.len()), Some(100));
        }
        Ok(t.elapsed().as_nanos() as f64 / gblock as f64)
    };
    for r in 0..rounds.max(200) {
        if r % 2 == 0 {
            cget.push(c_get(r));
            rget.push(r_get(r)?);
        } else {
            rget.push(r_get(r)?);
            cget.push(c_get(r));
        }
    }
    // Each C block beside the Rust block next to it in time: the ratio of
    // the pair cancels the load the two share.
    let mut pput: Vec<f64> = cput.iter().zip(&rput).map(|(c, r)| c / r).collect();
    let mut pget: Vec<f64> = cget.iter().zip(&rget).map(|(c, r)| c / r).collect();
    let (cp, rp, cg, rg) = (
        median(&mut cput),
        median(&mut rput),
        median(&mut cget),
        median(&mut rget),
    );
    let (qp, qg) = (median(&mut pput), median(&mut pget));
    let iqr = |v: &[f64]| v[v.len() * 3 / 4] - v[v.len() / 4];
    println!(
        "interleaved put: C ABI {cp:.1} ns, Rust {rp:.1} ns, median pair ratio C/Rust {qp:.3} \
         (IQR {:.3}, {} pairs of {block}); get: C ABI {cg:.1} ns, Rust {rg:.1} ns, median pair \
         ratio C/Rust {qg:.3} (IQR {:.3}, {} pairs of {gblock})",
        iqr(&pput),
        pput.len(),
        iqr(&pget),
        pget.len()
    );
    // SAFETY: live handle, freed once.
    unsafe { ferrite::ferrite_store_free(h) };
    store.close()?;
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(&rpath);
    Ok(())
}
