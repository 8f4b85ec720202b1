//! Several prompts in one batched forward pass per step (continuous batching):
//! `cargo run --release -p kestrel --example batch [MODEL]`.

use kestrel::{GenerateOptions, LoadOptions, Model};

fn main() -> Result<(), kestrel::Error> {
    let name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "smollm2-135m".into());
    let mut model = Model::load(&name, LoadOptions::default().with_concurrency(4))?;
    let prompts = [
        "The capital of France is",
        "Water boils at",
        "def fibonacci(n):",
        "Roses are red,",
    ];
    let outs = model.generate_batch(&prompts, &GenerateOptions::greedy().with_max_tokens(24))?;
    for (p, o) in prompts.iter().zip(outs) {
        println!("{p}{}\n---", o?.text);
    }
    Ok(())
}
