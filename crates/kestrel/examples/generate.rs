//! Generate a continuation: `cargo run --release -p kestrel --example generate [MODEL] [PROMPT]`
//! (MODEL: a file, an alias such as `smollm2-135m`, or `org/name:QUANT`).

use kestrel::{GenerateOptions, LoadOptions, Model};

fn main() -> Result<(), kestrel::Error> {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "smollm2-135m".into());
    let prompt = args
        .next()
        .unwrap_or_else(|| "The capital of France is".into());
    let mut model = Model::load(&name, LoadOptions::default())?;
    let out = model.generate(&prompt, &GenerateOptions::greedy().with_max_tokens(32))?;
    println!("{prompt}{}", out.text);
    eprintln!("{:.1} tok/s", out.metrics.decode_tok_s());
    Ok(())
}
