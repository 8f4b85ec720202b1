//! `ModelInfo`: what a GGUF model is, read from its metadata and tensor table alone (so
//! `discover` can describe files of any architecture without building them).

use std::collections::HashMap;

use kestrel_gguf::GgufModel;

/// Facts about a model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelInfo {
    /// `general.architecture` (`llama`, `gemma3`, `bert`, ...).
    pub architecture: String,
    /// `general.name`, if any.
    pub name: Option<String>,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Transformer layers.
    pub layers: usize,
    /// Hidden size.
    pub hidden_size: usize,
    /// Attention heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention).
    pub kv_heads: usize,
    /// The context length the model was trained with.
    pub context_length: usize,
    /// The context this instance runs with (0 when not loaded for generation).
    pub ctx: usize,
    /// Parameters.
    pub parameters: u64,
    /// The quantization of most weight bytes (`Q4_K`, `Q8_0`, `F16`, ...).
    pub quant: String,
    /// Weights per quantization block of that type (its group size; 1 for float types).
    pub group_size: usize,
    /// Average bits per weight over all tensors.
    pub bits_per_weight: f64,
    /// Bytes of tensor data.
    pub tensor_bytes: u64,
}

impl ModelInfo {
    /// Describe `model`; `ctx` is the context it runs with (0: not loaded).
    pub fn of(model: &GgufModel, ctx: usize) -> ModelInfo {
        let md = model.metadata();
        let arch = md.architecture().unwrap_or("unknown").to_string();
        let n = |field: &str| md.arch_u32(field).map(|v| v as usize).unwrap_or(0);
        let vocab_size = md
            .get_array("tokenizer.ggml.tokens")
            .map(|a| a.len())
            .ok()
            .filter(|&v| v > 0)
            .unwrap_or_else(|| n("vocab_size"));
        let heads = n("attention.head_count");
        let kv = n("attention.head_count_kv");
        let mut by_type: HashMap<kestrel_gguf::GgmlType, u64> = HashMap::new();
        for t in model.tensors() {
            let info = t.info;
            if info.dims().len() >= 2 {
                *by_type.entry(info.ggml_type()).or_default() += info.n_bytes();
            }
        }
        let main = by_type.into_iter().max_by_key(|&(_, b)| b).map(|(t, _)| t);
        let parameters = model.n_params();
        let tensor_bytes = model.tensor_bytes();
        ModelInfo {
            architecture: arch,
            name: md.get_str("general.name").ok().map(str::to_string),
            vocab_size,
            layers: n("block_count"),
            hidden_size: n("embedding_length"),
            heads,
            kv_heads: if kv == 0 { heads } else { kv },
            context_length: n("context_length"),
            ctx,
            parameters,
            quant: main.map(|t| t.name().to_string()).unwrap_or_default(),
            group_size: main.map(|t| t.block_size()).unwrap_or(1),
            bits_per_weight: if parameters > 0 {
                tensor_bytes as f64 * 8.0 / parameters as f64
            } else {
                0.0
            },
            tensor_bytes,
        }
    }
}
