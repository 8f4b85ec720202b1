//! Weights as tensors that view the model file: no copy, no f32 expansion; the tensor keeps its
//! shard's mapping alive through an `Arc`. Also how many weight bytes a decode token reads,
//! and which weights its matmuls multiply by.

use kestrel_gguf::GgufModel;
use kestrel_tensor::{ByteOwner, DType, Shape, Tensor};

use crate::builder::{build_decoder, Logits};
use crate::config::DecoderConfig;
use crate::error::ArchError;

/// The tensor `name` of `model`, viewing the file's bytes, or `None` if absent or of a type
/// kestrel cannot compute with.
pub fn weight_tensor(model: &GgufModel, name: &str) -> Option<Tensor> {
    let (file, info) = model.tensor_location(name)?;
    let dtype = DType::try_from(info.ggml_type()).ok()?;
    let dims: Vec<usize> = info
        .dims()
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<_>>()?;
    let shape = Shape::new(if dims.is_empty() { &[1] } else { &dims }).ok()?;
    let owner: ByteOwner = file.clone();
    Tensor::from_shared(
        dtype,
        shape,
        owner,
        usize::try_from(info.file_offset()).ok()?,
    )
    .ok()
}

/// Tables a decode token reads one row of (not counted by [`decode_weight_bytes`]).
const ROW_TABLES: [&str; 4] = [
    "token_embd.weight",
    "position_embd.weight",
    "token_types.weight",
    "per_layer_token_embd.weight",
];

/// Bytes of weights one decode token reads: every tensor of `model` but the tables it reads one
/// row of (the token embedding, unless the output projection is tied to it; position, token
/// type and per-layer token embeddings), with mixture-of-experts tensors (`*_exps`) counted at
/// `n_used / n_expert` of their size (the experts a token is routed to). What decode's share of
/// memory bandwidth is computed from (`kestrel bench --device cuda`); the KV cache's reads,
/// which grow with the context, are not in it.
pub fn decode_weight_bytes(model: &GgufModel, cfg: &DecoderConfig) -> u64 {
    let tied = model.tensor_location("output.weight").is_none();
    let experts = cfg
        .moe
        .as_ref()
        .map(|m| (m.n_used as u64, m.n_expert.max(1) as u64));
    model
        .tensors()
        .map(|t| {
            let name = t.info.name();
            let n = t.info.n_bytes();
            if ROW_TABLES.contains(&name) && !(tied && name == "token_embd.weight") {
                0
            } else if let (Some((used, all)), true) = (experts, name.contains("_exps")) {
                n.saturating_mul(used) / all
            } else {
                n
            }
        })
        .fold(0u64, u64::saturating_add)
}

/// The weights a decode step's matmuls multiply by (`x · Wᵀ`), each named once, in the order
/// the step first uses them: the projections of every layer and the output (the token table
/// when the output is tied). Not the row tables it reads rows of, the norms and biases, or
/// mixture-of-experts tensors (their matvecs pick experts per token). What `kestrel bench
/// --matvec` times.
///
/// # Errors
/// The model's graph cannot be built (a missing or misshapen tensor).
pub fn decode_matmul_weights(
    model: &GgufModel,
    cfg: &DecoderConfig,
) -> Result<Vec<String>, ArchError> {
    let g = build_decoder(cfg, model, Logits::Last)?;
    let mut seen = vec![false; g.weights().len()];
    let mut names = Vec::new();
    for node in g.nodes() {
        if let kestrel_graph::Op::MatMul { weight } = node.op {
            if let Some(s) = seen.get_mut(weight) {
                if !std::mem::replace(s, true) {
                    names.push(g.weights()[weight].name.clone());
                }
            }
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::synthetic_model;

    /// `f` over the synthetic `arch` file (written to a temporary file, removed after).
    fn with_synthetic<T>(arch: &str, f: impl FnOnce(&GgufModel, &DecoderConfig) -> T) -> T {
        let path = std::env::temp_dir().join(format!(
            "kestrel-weights-{arch}-{}.gguf",
            std::process::id()
        ));
        synthetic_model(arch, 1).unwrap().write_file(&path).unwrap();
        let model = GgufModel::open(&path).unwrap();
        let cfg = DecoderConfig::from_model(&model).unwrap();
        let out = f(&model, &cfg);
        let _ = std::fs::remove_file(&path);
        out
    }

    fn bytes_of(arch: &str) -> (u64, u64, u64, bool) {
        with_synthetic(arch, |model, cfg| {
            let all: u64 = model.tensors().map(|t| t.info.n_bytes()).sum();
            let embd = model
                .tensor_location("token_embd.weight")
                .unwrap()
                .1
                .n_bytes();
            let tied = model.tensor_location("output.weight").is_none();
            (decode_weight_bytes(model, cfg), all, embd, tied)
        })
    }

    #[test]
    fn decode_reads_every_weight_but_the_embedding_rows() {
        let (got, all, embd, tied) = bytes_of("llama");
        assert!(!tied);
        assert_eq!(
            got,
            all - embd,
            "an untied model's embedding is read a row a token"
        );
    }

    fn matmul_weights_of(arch: &str) -> Vec<String> {
        with_synthetic(arch, |model, cfg| {
            decode_matmul_weights(model, cfg).unwrap()
        })
    }

    #[test]
    fn decode_multiplies_by_every_projection_and_the_output() {
        let names = matmul_weights_of("llama");
        let layer = [
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_output",
            "ffn_gate",
            "ffn_up",
            "ffn_down",
        ];
        let mut want: Vec<String> = (0..2)
            .flat_map(|il| layer.iter().map(move |w| format!("blk.{il}.{w}.weight")))
            .collect();
        want.push("output.weight".into());
        let (mut got, mut sorted) = (names.clone(), want.clone());
        got.sort();
        sorted.sort();
        assert_eq!(got, sorted, "no norm, no embedding table, each weight once");
        assert_eq!(
            names.first().map(String::as_str),
            Some("blk.0.attn_q.weight")
        );
        assert_eq!(names.last().map(String::as_str), Some("output.weight"));
        // Tied: the token table is the output projection.
        let names = matmul_weights_of("gemma3");
        assert_eq!(names.last().map(String::as_str), Some("token_embd.weight"));
        assert_eq!(names.len(), 6 * 7 + 1);
    }

    #[test]
    fn a_tied_output_reads_the_embedding_whole() {
        let (got, all, _, tied) = bytes_of("gemma3");
        assert!(tied);
        assert_eq!(
            got, all,
            "the output projection reads the whole tied embedding"
        );
    }
}
