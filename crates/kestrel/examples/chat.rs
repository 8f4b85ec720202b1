//! A two-turn conversation with the model's chat template; the second turn reuses the first's
//! KV cache: `cargo run --release -p kestrel --example chat [MODEL]`.

use kestrel::{ChatMessage, GenerateOptions, LoadOptions, Model};

fn main() -> Result<(), kestrel::Error> {
    let name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "smollm2-135m".into());
    let mut model = Model::load(&name, LoadOptions::default())?;
    let opts = GenerateOptions::greedy().with_max_tokens(48);
    let mut messages = vec![ChatMessage::new("user", "Name a fruit that is yellow.")];
    let reply = model.chat(&messages, &opts)?;
    println!("assistant: {}", reply.text);
    messages.push(ChatMessage::new("assistant", reply.text));
    messages.push(ChatMessage::new("user", "And one that is red?"));
    let reply = model.chat(&messages, &opts)?;
    println!("assistant: {}", reply.text);
    println!("usage: {:?}", reply.usage);
    Ok(())
}
