//! The README's embedded-store example:
//! `cargo run --release -p ferrite-engine --example fruit [POOL]`.

use ferrite_engine::Session as _;
use ferrite_engine::{EngineKind, Op, Store, StoreOptions};

fn main() -> Result<(), ferrite_engine::EngineError> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "/dev/shm/fruit.pool".into());
    // Creates the pool file the first time; afterwards opens it, running
    // recovery (after a crash or `kill -9`, every acknowledged write is there).
    let store = Store::open_or_create_file(&path, 64 << 20, &StoreOptions::new(EngineKind::Cow))?;
    println!(
        "{path}: opened in {:.2} ms ({})",
        store.recovery().elapsed.as_secs_f64() * 1e3,
        store.recovery().detail
    );
    let mut s = store.session()?; // one per thread
    s.put(b"apple", b"red")?; // durable when it returns
    s.batch(&[
        Op::Put {
            key: b"kiwi",
            value: b"green",
        },
        Op::Delete { key: b"plum" },
    ])?; // all or nothing
    assert_eq!(s.get(b"apple")?.as_deref(), Some(&b"red"[..]));
    for (k, v) in s.scan(b"a", 10)? {
        // ordered, keys >= "a"
        println!(
            "{} = {}",
            String::from_utf8_lossy(&k),
            String::from_utf8_lossy(&v)
        );
    }
    drop(s);
    store.close()
}
