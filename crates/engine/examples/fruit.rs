//! The README's embedded-store example:
//! `cargo run --release -p ferrite-engine --example fruit [POOL]`.

use ferrite_engine::{EngineKind, KeyRange, Op, Store, StoreOptions};

fn main() -> Result<(), ferrite_engine::EngineError> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "/dev/shm/fruit.pool".into());
    // Creates the pool file the first time (64 MiB unless .size() says
    // otherwise); afterwards opens it, running recovery (after a crash or
    // `kill -9`, every acknowledged write is there).
    let store = Store::open_or_create(&path, &StoreOptions::new(EngineKind::Cow))?;
    println!(
        "{path}: opened in {:.2} ms ({})",
        store.recovery().elapsed.as_secs_f64() * 1e3,
        store.recovery().detail
    );
    store.put(b"apple", b"red")?; // durable when it returns
    store.batch(&[
        Op::Put {
            key: b"kiwi",
            value: b"green",
        },
        Op::Delete { key: b"plum" },
    ])?; // all or nothing
    assert_eq!(store.get(b"apple")?.as_deref(), Some(&b"red"[..]));

    // A write transaction reads its own writes and commits them at once.
    let mut tx = store.write()?;
    let n = tx.get(b"count")?.map_or(0, |v| v.len());
    tx.put(b"count", &vec![b'#'; n + 1])?;
    tx.commit()?;

    // Handles are cheap clones, shared by threads; ranges take bounds,
    // prefixes and either order.
    let reader = store.clone();
    std::thread::spawn(move || -> Result<(), ferrite_engine::EngineError> {
        for pair in reader.range(KeyRange::between("a", "l").rev()) {
            let (k, v) = pair?;
            println!(
                "{} = {}",
                String::from_utf8_lossy(&k),
                String::from_utf8_lossy(&v)
            );
        }
        Ok(())
    })
    .join()
    .expect("reader thread")?;
    println!("{} keys", store.len()?);
    store.close()
}
