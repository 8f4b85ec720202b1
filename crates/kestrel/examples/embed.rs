//! Embeddings and cosine similarity: `cargo run --release -p kestrel --example embed [MODEL]`.

use kestrel::{LoadOptions, Model};

fn main() -> Result<(), kestrel::Error> {
    let name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "smollm2-135m".into());
    let mut model = Model::load(&name, LoadOptions::default())?;
    let texts = [
        "A cat sat on the mat.",
        "A kitten rested on the rug.",
        "Stock markets fell sharply today.",
    ];
    let vecs = texts
        .iter()
        .map(|t| model.embed(t))
        .collect::<Result<Vec<_>, _>>()?;
    for i in 0..texts.len() {
        for j in i + 1..texts.len() {
            let cos: f32 = vecs[i].iter().zip(&vecs[j]).map(|(a, b)| a * b).sum();
            println!("{cos:.3}  {:?} ~ {:?}", texts[i], texts[j]);
        }
    }
    Ok(())
}
