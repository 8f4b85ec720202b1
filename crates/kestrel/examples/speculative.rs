//! Speculative decoding: prompt lookup, and a draft model verified by the target (both give the
//! target's greedy output): `cargo run --release -p kestrel --example speculative [TARGET] [DRAFT]`.

use kestrel::generate::LookupOptions;
use kestrel::{GenerateOptions, LoadOptions, Model};

fn main() -> Result<(), kestrel::Error> {
    let mut args = std::env::args().skip(1);
    let target_name = args.next().unwrap_or_else(|| "smollm2-135m".into());
    let draft_name = args.next().unwrap_or_else(|| target_name.clone());
    let mut target = Model::load(&target_name, LoadOptions::default())?;
    let opts = GenerateOptions::greedy().with_max_tokens(64);
    let prompt =
        "Repeat after me: the quick brown fox jumps over the lazy dog. the quick brown fox";
    let (out, stats) = target.generate_lookup(prompt, &opts, LookupOptions::default())?;
    println!("lookup: {}\n  {stats:?}", out.text);
    let mut draft = Model::load(&draft_name, LoadOptions::default())?;
    let out = target.speculative_generate(&mut draft, "Once upon a time", 4, &opts)?;
    println!("draft model: {}", out.text);
    Ok(())
}
