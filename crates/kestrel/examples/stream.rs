//! Stream text as it is generated, by callback and by iterator:
//! `cargo run --release -p kestrel --example stream [MODEL]`.

use std::io::Write;

use kestrel::{GenerateOptions, LoadOptions, Model};

fn main() -> Result<(), kestrel::Error> {
    let name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "smollm2-135m".into());
    let mut model = Model::load(&name, LoadOptions::default())?;
    let opts = GenerateOptions::default()
        .with_temperature(0.8)
        .with_seed(7)
        .with_max_tokens(48);
    model.generate_stream("Once upon a time", &opts, |piece| {
        print!("{piece}");
        let _ = std::io::stdout().flush();
        true
    })?;
    println!("\n---");
    for tok in model.generate_iter(
        "The three primary colours are",
        &GenerateOptions::greedy().with_max_tokens(16),
    )? {
        print!("{}", tok?.text);
    }
    println!();
    Ok(())
}
