//! Write the synthetic tiny models (one per supported architecture) into a folder:
//! `cargo run -p kestrel-arch --example write_synthetic -- DIR`. The fixture script
//! (tests/fixtures/synthetic/make_fixtures.py) runs llama.cpp on them.

use kestrel_arch::synthetic::{synthetic_model, SYNTHETIC_ARCHS};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .ok_or("usage: write_synthetic DIR")?;
    std::fs::create_dir_all(&dir)?;
    for arch in SYNTHETIC_ARCHS {
        let w = synthetic_model(arch, 42).ok_or("unknown arch")?;
        let path = std::path::Path::new(&dir).join(format!("synthetic-{arch}.gguf"));
        w.write_file(&path)?;
        println!("{}", path.display());
    }
    Ok(())
}
