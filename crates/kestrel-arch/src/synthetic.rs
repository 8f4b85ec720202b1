//! Synthetic tiny models: deterministic random weights for each supported architecture, written
//! with our own GGUF writer. They check every builder against llama.cpp, not only the families
//! we have real files for, and give fast tests a model to run.

use kestrel_gguf::{GgufWriter, MetadataValue};

/// Architectures [`synthetic_model`] can write.
pub const SYNTHETIC_ARCHS: &[&str] = &["llama", "gemma3", "qwen2", "qwen3"];

/// Vocabulary size of the synthetic models.
pub const SYNTHETIC_VOCAB: usize = 256;

/// A small deterministic generator (SplitMix64), so the weights are the same everywhere.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-scale, scale).
    pub(crate) fn uniform(&mut self, scale: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        (2.0 * u - 1.0) * scale
    }

    fn fill(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(scale)).collect()
    }
}

/// A tiny model of `arch` (one of [`SYNTHETIC_ARCHS`]) with weights from `seed`; `None` for
/// another architecture. Shapes: hidden 64, 4 heads of 16 (2 KV heads), FFN 128, vocabulary 256,
/// 2 layers (6 for gemma3, so one global layer follows five sliding ones), all F32.
pub fn synthetic_model(arch: &str, seed: u64) -> Option<GgufWriter> {
    if !SYNTHETIC_ARCHS.contains(&arch) {
        return None;
    }
    let (n_embd, n_head, n_kv, head_dim, n_ff, n_vocab) =
        (64usize, 4usize, 2usize, 16usize, 128usize, SYNTHETIC_VOCAB);
    let n_layer = if arch == "gemma3" { 6 } else { 2 };
    let mut rng = Rng(seed
        ^ arch
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64)));
    let mut w = GgufWriter::new();
    let key = |k: &str| format!("{arch}.{k}");
    w.add_metadata("general.architecture", arch);
    w.add_metadata("general.name", format!("kestrel synthetic {arch}"));
    w.add_metadata(&key("context_length"), 256u32);
    w.add_metadata(&key("embedding_length"), n_embd as u32);
    w.add_metadata(&key("block_count"), n_layer as u32);
    w.add_metadata(&key("feed_forward_length"), n_ff as u32);
    w.add_metadata(&key("attention.head_count"), n_head as u32);
    w.add_metadata(&key("attention.head_count_kv"), n_kv as u32);
    w.add_metadata(&key("attention.layer_norm_rms_epsilon"), 1e-6f32);
    w.add_metadata(&key("attention.key_length"), head_dim as u32);
    w.add_metadata(&key("attention.value_length"), head_dim as u32);
    w.add_metadata(&key("rope.freq_base"), 10_000f32);
    w.add_metadata(&key("vocab_size"), n_vocab as u32);
    if arch == "gemma3" {
        w.add_metadata(&key("attention.sliding_window"), 4u32);
        w.add_metadata(&key("rope.freq_base"), 1_000_000f32);
    }
    // No tokenizer (llama.cpp's "none" vocabulary): the tests feed token ids directly.
    w.add_metadata("tokenizer.ggml.model", "none");
    let tokens: Vec<String> = (0..n_vocab).map(|i| format!("t{i}")).collect();
    w.add_metadata("tokenizer.ggml.tokens", MetadataValue::string_array(tokens));
    w.add_metadata(
        "tokenizer.ggml.token_type",
        MetadataValue::i32_array(vec![1; n_vocab]),
    );
    w.add_metadata("tokenizer.ggml.bos_token_id", 1u32);
    w.add_metadata("tokenizer.ggml.eos_token_id", 2u32);

    let mut tensor = |w: &mut GgufWriter, name: &str, dims: &[usize], scale: f32, offset: f32| {
        let n: usize = dims.iter().product();
        let values: Vec<f32> = rng.fill(n, scale).into_iter().map(|v| v + offset).collect();
        let dims: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
        w.add_f32_tensor(name, &dims, &values).map(|_| ())
    };
    let proj = 1.0 / (n_embd as f32).sqrt();
    let mut add = |w: &mut GgufWriter| -> Result<(), kestrel_gguf::GgufError> {
        tensor(w, "token_embd.weight", &[n_embd, n_vocab], 1.0, 0.0)?;
        for il in 0..n_layer {
            let p = |s: &str| format!("blk.{il}.{s}");
            tensor(w, &p("attn_norm.weight"), &[n_embd], 0.2, 1.0)?;
            tensor(
                w,
                &p("attn_q.weight"),
                &[n_embd, n_head * head_dim],
                proj,
                0.0,
            )?;
            tensor(
                w,
                &p("attn_k.weight"),
                &[n_embd, n_kv * head_dim],
                proj,
                0.0,
            )?;
            tensor(
                w,
                &p("attn_v.weight"),
                &[n_embd, n_kv * head_dim],
                proj,
                0.0,
            )?;
            if arch == "qwen2" {
                tensor(w, &p("attn_q.bias"), &[n_head * head_dim], 0.1, 0.0)?;
                tensor(w, &p("attn_k.bias"), &[n_kv * head_dim], 0.1, 0.0)?;
                tensor(w, &p("attn_v.bias"), &[n_kv * head_dim], 0.1, 0.0)?;
            }
            if arch == "gemma3" || arch == "qwen3" {
                tensor(w, &p("attn_q_norm.weight"), &[head_dim], 0.2, 1.0)?;
                tensor(w, &p("attn_k_norm.weight"), &[head_dim], 0.2, 1.0)?;
            }
            tensor(
                w,
                &p("attn_output.weight"),
                &[n_head * head_dim, n_embd],
                proj,
                0.0,
            )?;
            tensor(w, &p("ffn_norm.weight"), &[n_embd], 0.2, 1.0)?;
            tensor(w, &p("ffn_gate.weight"), &[n_embd, n_ff], proj, 0.0)?;
            tensor(w, &p("ffn_up.weight"), &[n_embd, n_ff], proj, 0.0)?;
            tensor(
                w,
                &p("ffn_down.weight"),
                &[n_ff, n_embd],
                1.0 / (n_ff as f32).sqrt(),
                0.0,
            )?;
            if arch == "gemma3" {
                tensor(w, &p("post_attention_norm.weight"), &[n_embd], 0.2, 1.0)?;
                tensor(w, &p("post_ffw_norm.weight"), &[n_embd], 0.2, 1.0)?;
            }
        }
        tensor(w, "output_norm.weight", &[n_embd], 0.2, 1.0)?;
        if arch != "gemma3" {
            tensor(w, "output.weight", &[n_embd, n_vocab], proj, 0.0)?;
        }
        Ok(())
    };
    add(&mut w).ok()?;
    Some(w)
}
