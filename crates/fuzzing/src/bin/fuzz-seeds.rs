//! Writes the seed corpora: `cargo run -p ferrite-fuzzing --bin fuzz-seeds -- fuzz/corpus`.

fn main() {
    let dir = std::env::args_os()
        .nth(1)
        .unwrap_or_else(|| "fuzz/corpus".into());
    match ferrite_fuzzing::seeds::write_all(std::path::Path::new(&dir)) {
        Ok(n) => println!("wrote {n} seed inputs under {}", dir.to_string_lossy()),
        Err(e) => {
            eprintln!("fuzz-seeds: {e}");
            std::process::exit(1);
        }
    }
}
