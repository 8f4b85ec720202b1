//! Embeddings and cosine similarity:
//! `cargo run --release -p kestrel --example embed [MODEL]`.
//!
//! MODEL is a decoder (`smollm2-135m`, the default: pooled hidden states) or a sentence-embedding
//! encoder converted with `kestrel convert` (e.g. all-MiniLM-L6-v2, which is what you want for
//! semantic similarity).

use kestrel::gguf::GgufModel;
use kestrel::{cosine, EncoderModel, LoadOptions, Model};

fn main() -> Result<(), kestrel::Error> {
    let name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "smollm2-135m".into());
    let texts = [
        "A cat sat on the mat.",
        "A kitten rested on the rug.",
        "Stock markets fell sharply today.",
    ];
    let is_encoder = GgufModel::open(&name)
        .ok()
        .is_some_and(|m| m.metadata().architecture().is_ok_and(|a| a == "bert"));
    let vecs = if is_encoder {
        EncoderModel::load_file(&name, LoadOptions::default())?.embed_batch(&texts)?
    } else {
        let mut model = Model::load(&name, LoadOptions::default())?;
        texts
            .iter()
            .map(|t| model.embed(t))
            .collect::<Result<Vec<_>, _>>()?
    };
    for i in 0..texts.len() {
        for j in i + 1..texts.len() {
            let cos = cosine(&vecs[i], &vecs[j]);
            println!("{cos:.3}  {:?} ~ {:?}", texts[i], texts[j]);
        }
    }
    Ok(())
}
