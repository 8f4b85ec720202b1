//! Random-weight decoders of real shapes (Llama 3.2 1B, Llama 3.1 8B, Gemma 3 270M, SmolLM2
//! 135M, and the mixture of experts Qwen3 30B-A3B) in a chosen quantization, for measuring speed where the real file cannot be had or carried: the GPU test
//! machine takes at most 64 MiB per transfer, and no 8B file is in the project. Both engines run
//! the same file (llama.cpp reads it as any GGUF), so the figures compare like with like.
//!
//! Weights are uniform random scaled like a trained layer's (1/√fan-in), norms near 1; the
//! vocabulary is a SentencePiece one of placeholder pieces (`<unk>`, `<s>`, `</s>`, the 256 byte
//! tokens, then `▁w{i}`). Tensors are generated and quantized a band of rows at a time on every
//! core; the file is held in memory until it is written (an 8B Q4_K_M file is about 4.9 GB).

use kestrel_gguf::{quant, GgmlType, GgufError, GgufWriter, MetadataValue};

use crate::synthetic::Rng;

/// The shapes [`synth_model`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SynthShape {
    /// Llama 3.2 1B: 16 layers of 2048, 32 heads (8 KV) of 64, FFN 8192, vocabulary 128256,
    /// tied embeddings.
    Llama1B,
    /// Llama 3.1 8B: 32 layers of 4096, 32 heads (8 KV) of 128, FFN 14336, vocabulary 128256.
    Llama8B,
    /// Gemma 3 270M: 18 layers of 640, 4 heads (1 KV) of 256, FFN 2048, vocabulary 262144,
    /// tied embeddings, sliding window 512 on five of every six layers.
    Gemma3_270M,
    /// SmolLM2 135M: 30 layers of 576, 9 heads (3 KV) of 64, FFN 1536, vocabulary 49152, tied
    /// embeddings (the project's test model, for GPU runs that cannot carry the real file).
    SmolLM2_135M,
    /// Qwen3 30B-A3B (`qwen3moe`): 48 layers of 2048, 32 heads (4 KV) of 128 with per-head
    /// Q/K norms, 128 experts of 768 of which 8 are used, vocabulary 151936.
    Qwen3Moe30B,
}

impl SynthShape {
    /// Every shape, with the name `kestrel synth --shape` takes.
    pub const ALL: &'static [(&'static str, SynthShape)] = &[
        ("llama-1b", SynthShape::Llama1B),
        ("llama-8b", SynthShape::Llama8B),
        ("gemma3-270m", SynthShape::Gemma3_270M),
        ("smollm2-135m", SynthShape::SmolLM2_135M),
        ("qwen3moe-30b-a3b", SynthShape::Qwen3Moe30B),
    ];

    /// The shape of a name in [`ALL`](Self::ALL), case-insensitive.
    pub fn from_name(name: &str) -> Option<SynthShape> {
        by_name(Self::ALL, name)
    }

    fn dims(self) -> Dims {
        match self {
            SynthShape::Llama1B => Dims {
                arch: "llama",
                name: "Llama-3.2-1B-shaped (random weights)",
                n_embd: 2048,
                n_layer: 16,
                n_head: 32,
                n_kv: 8,
                head_dim: 64,
                n_ff: 8192,
                n_vocab: 128_256,
                tied: true,
                rope_base: 500_000.0,
                ctx: 8192,
                moe: None,
            },
            SynthShape::Llama8B => Dims {
                arch: "llama",
                name: "Llama-3.1-8B-shaped (random weights)",
                n_embd: 4096,
                n_layer: 32,
                n_head: 32,
                n_kv: 8,
                head_dim: 128,
                n_ff: 14_336,
                n_vocab: 128_256,
                tied: false,
                rope_base: 500_000.0,
                ctx: 8192,
                moe: None,
            },
            SynthShape::Gemma3_270M => Dims {
                arch: "gemma3",
                name: "Gemma-3-270M-shaped (random weights)",
                n_embd: 640,
                n_layer: 18,
                n_head: 4,
                n_kv: 1,
                head_dim: 256,
                n_ff: 2048,
                n_vocab: 262_144,
                tied: true,
                rope_base: 1_000_000.0,
                ctx: 32_768,
                moe: None,
            },
            SynthShape::SmolLM2_135M => Dims {
                arch: "llama",
                name: "SmolLM2-135M-shaped (random weights)",
                n_embd: 576,
                n_layer: 30,
                n_head: 9,
                n_kv: 3,
                head_dim: 64,
                n_ff: 1536,
                n_vocab: 49_152,
                tied: true,
                rope_base: 100_000.0,
                ctx: 8192,
                moe: None,
            },
            SynthShape::Qwen3Moe30B => Dims {
                arch: "qwen3moe",
                name: "Qwen3-30B-A3B-shaped (random weights)",
                n_embd: 2048,
                n_layer: 48,
                n_head: 32,
                n_kv: 4,
                head_dim: 128,
                n_ff: 6144,
                n_vocab: 151_936,
                tied: false,
                rope_base: 1_000_000.0,
                ctx: 32_768,
                moe: Some(Experts {
                    n_expert: 128,
                    n_used: 8,
                    n_ff: 768,
                }),
            },
        }
    }
}

/// The quantizations [`synth_model`] writes, named as llama.cpp's `llama-quantize` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SynthType {
    /// Every matrix F16.
    F16,
    /// Every matrix Q8_0.
    Q8_0,
    /// Q4_0, the output matrix Q6_K (as llama.cpp's Q4_0 files).
    Q4_0,
    /// Q4_1, the output matrix Q6_K.
    Q4_1,
    /// llama.cpp's Q4_K_M mix: Q4_K, with Q6_K for the output matrix and for `attn_v` and
    /// `ffn_down` in the first and last eighth of the layers and every third layer between.
    Q4KM,
}

impl SynthType {
    /// Every type, with the name `kestrel synth --type` takes.
    pub const ALL: &'static [(&'static str, SynthType)] = &[
        ("F16", SynthType::F16),
        ("Q8_0", SynthType::Q8_0),
        ("Q4_0", SynthType::Q4_0),
        ("Q4_1", SynthType::Q4_1),
        ("Q4_K_M", SynthType::Q4KM),
    ];

    /// The type of a name in [`ALL`](Self::ALL), case-insensitive.
    pub fn from_name(name: &str) -> Option<SynthType> {
        by_name(Self::ALL, name)
    }

    /// llama.cpp's `general.file_type` (`llama_ftype`).
    fn file_type(self) -> u32 {
        match self {
            SynthType::F16 => 1,
            SynthType::Q4_0 => 2,
            SynthType::Q4_1 => 3,
            SynthType::Q8_0 => 7,
            SynthType::Q4KM => 15,
        }
    }

    /// The type of a matrix (`role`: its name without `blk.N.`) in layer `layer` of `n_layer`.
    fn matrix_type(self, role: &str, layer: usize, n_layer: usize) -> GgmlType {
        let output = role == "output.weight";
        match self {
            SynthType::F16 => GgmlType::F16,
            SynthType::Q8_0 => GgmlType::Q8_0,
            SynthType::Q4_0 if output => GgmlType::Q6K,
            SynthType::Q4_0 => GgmlType::Q4_0,
            SynthType::Q4_1 if output => GgmlType::Q6K,
            SynthType::Q4_1 => GgmlType::Q4_1,
            SynthType::Q4KM => {
                // llama.cpp's `use_more_bits`.
                let eighth = n_layer / 8;
                // Past the first `||`, layer >= eighth.
                let more = layer < eighth || layer >= 7 * n_layer / 8 || (layer - eighth) % 3 == 2;
                let v_or_down = role == "attn_v.weight" || role.starts_with("ffn_down");
                if output || (v_or_down && more) {
                    GgmlType::Q6K
                } else {
                    GgmlType::Q4K
                }
            }
        }
    }
}

/// The value named `name` (case-insensitive) in a table of names.
fn by_name<T: Copy>(all: &[(&str, T)], name: &str) -> Option<T> {
    all.iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|&(_, v)| v)
}

/// A K-quant needs rows of whole 256-value blocks; llama.cpp falls back for rows that are not
/// (Gemma's 640): Q4_K to Q5_0, Q6_K to Q8_0.
fn fit(ty: GgmlType, row: usize) -> GgmlType {
    if row.is_multiple_of(ty.block_size()) {
        return ty;
    }
    match ty {
        GgmlType::Q4K | GgmlType::Q5K => GgmlType::Q5_0,
        _ => GgmlType::Q8_0,
    }
}

struct Dims {
    arch: &'static str,
    name: &'static str,
    n_embd: usize,
    n_layer: usize,
    n_head: usize,
    n_kv: usize,
    head_dim: usize,
    n_ff: usize,
    n_vocab: usize,
    tied: bool,
    rope_base: f32,
    ctx: usize,
    /// A mixture-of-experts FFN in every layer instead of the dense one.
    moe: Option<Experts>,
}

/// The experts of a [`Dims`]: how many, how many a token uses, and each one's hidden size.
struct Experts {
    n_expert: usize,
    n_used: usize,
    n_ff: usize,
}

/// Rows generated and quantized together (one band per task).
const BAND_ROWS: usize = 64;

/// `rows × row` random values (uniform in ±`scale`, plus `offset`) as `ty`, on every core.
fn random_tensor(
    ty: GgmlType,
    row: usize,
    rows: usize,
    scale: f32,
    offset: f32,
    seed: u64,
) -> Result<Vec<u8>, GgufError> {
    let row_bytes = ty
        .row_bytes(row as u64)
        .ok_or_else(|| GgufError::InvalidWrite(format!("{ty}: row of {row} values")))?
        as usize;
    let mut out = vec![0u8; row_bytes * rows];
    let bands: Vec<(usize, &mut [u8])> =
        out.chunks_mut(row_bytes * BAND_ROWS).enumerate().collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = bands.len().div_ceil(threads).max(1);
    let mut groups: Vec<Vec<(usize, &mut [u8])>> = Vec::new();
    let mut it = bands.into_iter().peekable();
    while it.peek().is_some() {
        groups.push(it.by_ref().take(per).collect());
    }
    let failed = std::thread::scope(|s| {
        let handles: Vec<_> = groups
            .into_iter()
            .map(|group| {
                s.spawn(move || -> Result<(), GgufError> {
                    let mut values = vec![0f32; row * BAND_ROWS];
                    for (band, bytes) in group {
                        let mut rng = Rng(seed ^ (band as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
                        let n = bytes.len() / row_bytes * row;
                        for v in &mut values[..n] {
                            *v = rng.uniform(scale) + offset;
                        }
                        quant::quantize(ty, &values[..n], bytes)
                            .map_err(|e| GgufError::InvalidWrite(e.to_string()))?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).find_map(|r| match r {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(_) => Some(GgufError::InvalidWrite(
                "a quantizing thread panicked".into(),
            )),
        })
    });
    match failed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// A random-weight model of `shape` in `ty`, ready to write; `layers` overrides the layer count
/// (0: the real one) for smaller files of the same widths.
///
/// # Errors
/// A quantization or writer error (none for the shapes and types here).
pub fn synth_model(
    shape: SynthShape,
    ty: SynthType,
    layers: usize,
    seed: u64,
) -> Result<GgufWriter, GgufError> {
    write_dims(&shape.dims(), ty, layers, seed)
}

/// [`synth_model`] with a vocabulary of `n_vocab` placeholder pieces (at least the 259 of the
/// special and byte pieces) instead of the real one: the same widths with a smaller output
/// matrix, which dominates a few-layer file's decode step (Gemma 3's 262144 rows), for tests of
/// what the layers do.
///
/// # Errors
/// As [`synth_model`].
pub fn synth_model_with_vocab(
    shape: SynthShape,
    ty: SynthType,
    layers: usize,
    n_vocab: usize,
    seed: u64,
) -> Result<GgufWriter, GgufError> {
    let mut d = shape.dims();
    d.n_vocab = n_vocab.max(259);
    write_dims(&d, ty, layers, seed)
}

/// [`synth_model`] of any dims (the tests' small ones too).
fn write_dims(d: &Dims, ty: SynthType, layers: usize, seed: u64) -> Result<GgufWriter, GgufError> {
    let n_layer = if layers == 0 { d.n_layer } else { layers };
    let mut w = GgufWriter::new();
    let arch = d.arch;
    let key = |k: &str| format!("{arch}.{k}");
    w.add_metadata("general.architecture", arch);
    w.add_metadata("general.name", d.name);
    w.add_metadata("general.file_type", ty.file_type());
    w.add_metadata(&key("context_length"), d.ctx as u32);
    w.add_metadata(&key("embedding_length"), d.n_embd as u32);
    w.add_metadata(&key("block_count"), n_layer as u32);
    w.add_metadata(&key("feed_forward_length"), d.n_ff as u32);
    w.add_metadata(&key("attention.head_count"), d.n_head as u32);
    w.add_metadata(&key("attention.head_count_kv"), d.n_kv as u32);
    w.add_metadata(&key("attention.key_length"), d.head_dim as u32);
    w.add_metadata(&key("attention.value_length"), d.head_dim as u32);
    w.add_metadata(&key("attention.layer_norm_rms_epsilon"), 1e-6f32);
    w.add_metadata(&key("rope.freq_base"), d.rope_base);
    w.add_metadata(&key("vocab_size"), d.n_vocab as u32);
    if arch == "llama" {
        w.add_metadata(&key("rope.dimension_count"), d.head_dim as u32);
    }
    if arch == "gemma3" {
        w.add_metadata(&key("attention.sliding_window"), 512u32);
    }
    if let Some(x) = &d.moe {
        w.add_metadata(&key("expert_count"), x.n_expert as u32);
        w.add_metadata(&key("expert_used_count"), x.n_used as u32);
        w.add_metadata(&key("expert_feed_forward_length"), x.n_ff as u32);
    }
    add_vocab(&mut w, d.n_vocab);

    let mut index = 0u64;
    let mut tensor = |w: &mut GgufWriter,
                      name: &str,
                      gty: GgmlType,
                      dims: [usize; 2],
                      scale: f32,
                      offset: f32|
     -> Result<(), GgufError> {
        index += 1;
        let gty = fit(gty, dims[0]);
        let data = random_tensor(
            gty,
            dims[0],
            dims[1],
            scale,
            offset,
            seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        )?;
        let shape: Vec<u64> = if dims[1] == 1 {
            vec![dims[0] as u64]
        } else {
            vec![dims[0] as u64, dims[1] as u64]
        };
        w.add_tensor(name, gty, &shape, data)?;
        Ok(())
    };
    let (e, hd) = (d.n_embd, d.head_dim);
    let proj = 1.0 / (e as f32).sqrt();
    // The embedding is what the output reads when tied: llama.cpp quantizes it as the output.
    let embd_ty = if d.tied {
        ty.matrix_type("output.weight", 0, n_layer)
    } else {
        ty.matrix_type("token_embd.weight", 0, n_layer)
    };
    tensor(
        &mut w,
        "token_embd.weight",
        embd_ty,
        [e, d.n_vocab],
        1.0,
        0.0,
    )?;
    for il in 0..n_layer {
        let mt = |role: &str| ty.matrix_type(role, il, n_layer);
        let p = |s: &str| format!("blk.{il}.{s}");
        tensor(
            &mut w,
            &p("attn_norm.weight"),
            GgmlType::F32,
            [e, 1],
            0.1,
            1.0,
        )?;
        for (role, rows) in [
            ("attn_q.weight", d.n_head * hd),
            ("attn_k.weight", d.n_kv * hd),
            ("attn_v.weight", d.n_kv * hd),
        ] {
            tensor(&mut w, &p(role), mt(role), [e, rows], proj, 0.0)?;
        }
        if arch == "gemma3" || arch == "qwen3moe" {
            tensor(
                &mut w,
                &p("attn_q_norm.weight"),
                GgmlType::F32,
                [hd, 1],
                0.1,
                1.0,
            )?;
            tensor(
                &mut w,
                &p("attn_k_norm.weight"),
                GgmlType::F32,
                [hd, 1],
                0.1,
                1.0,
            )?;
        }
        let o_scale = 1.0 / ((d.n_head * hd) as f32).sqrt();
        let role = "attn_output.weight";
        tensor(&mut w, &p(role), mt(role), [d.n_head * hd, e], o_scale, 0.0)?;
        if arch == "gemma3" {
            tensor(
                &mut w,
                &p("post_attention_norm.weight"),
                GgmlType::F32,
                [e, 1],
                0.1,
                1.0,
            )?;
        }
        tensor(
            &mut w,
            &p("ffn_norm.weight"),
            GgmlType::F32,
            [e, 1],
            0.1,
            1.0,
        )?;
        if let Some(x) = &d.moe {
            // The router stays F32, as llama-quantize leaves `ffn_gate_inp`.
            tensor(
                &mut w,
                &p("ffn_gate_inp.weight"),
                GgmlType::F32,
                [e, x.n_expert],
                proj,
                0.0,
            )?;
            let down_scale = 1.0 / (x.n_ff as f32).sqrt();
            for (role, row, rows, scale) in [
                ("ffn_gate_exps.weight", e, x.n_ff, proj),
                ("ffn_up_exps.weight", e, x.n_ff, proj),
                ("ffn_down_exps.weight", x.n_ff, e, down_scale),
            ] {
                let name = p(role);
                let gty = fit(mt(role), row);
                let seed = seed
                    ^ name
                        .bytes()
                        .fold(7u64, |h, b| h.wrapping_mul(31) ^ b as u64);
                let data = random_tensor(gty, row, rows * x.n_expert, scale, 0.0, seed)?;
                let dims = [row as u64, rows as u64, x.n_expert as u64];
                w.add_tensor(&name, gty, &dims, data)?;
            }
            continue;
        }
        for role in ["ffn_gate.weight", "ffn_up.weight"] {
            tensor(&mut w, &p(role), mt(role), [e, d.n_ff], proj, 0.0)?;
        }
        let down_scale = 1.0 / (d.n_ff as f32).sqrt();
        let role = "ffn_down.weight";
        tensor(&mut w, &p(role), mt(role), [d.n_ff, e], down_scale, 0.0)?;
        if arch == "gemma3" {
            tensor(
                &mut w,
                &p("post_ffw_norm.weight"),
                GgmlType::F32,
                [e, 1],
                0.1,
                1.0,
            )?;
        }
    }
    tensor(
        &mut w,
        "output_norm.weight",
        GgmlType::F32,
        [e, 1],
        0.1,
        1.0,
    )?;
    if !d.tied {
        let ot = ty.matrix_type("output.weight", 0, n_layer);
        tensor(&mut w, "output.weight", ot, [e, d.n_vocab], proj, 0.0)?;
    }
    Ok(w)
}

/// A SentencePiece vocabulary of placeholder pieces: `<unk>`, `<s>`, `</s>`, the 256 byte
/// tokens, then `▁w{i}` (scores falling with the id, so merges are well defined).
fn add_vocab(w: &mut GgufWriter, n_vocab: usize) {
    let mut tokens = Vec::with_capacity(n_vocab);
    let mut types = Vec::with_capacity(n_vocab);
    tokens.extend(["<unk>".to_string(), "<s>".into(), "</s>".into()]);
    types.extend([2, 3, 3]);
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    let mut i = 0usize;
    while tokens.len() < n_vocab {
        tokens.push(format!("\u{2581}w{i}"));
        types.push(1);
        i += 1;
    }
    tokens.truncate(n_vocab);
    types.truncate(n_vocab);
    let scores: Vec<f32> = (0..n_vocab).map(|i| -(i as f32)).collect();
    w.add_metadata("tokenizer.ggml.model", "llama");
    w.add_metadata("tokenizer.ggml.tokens", MetadataValue::string_array(tokens));
    w.add_metadata("tokenizer.ggml.scores", MetadataValue::f32_array(scores));
    w.add_metadata("tokenizer.ggml.token_type", MetadataValue::i32_array(types));
    w.add_metadata("tokenizer.ggml.unknown_token_id", 0u32);
    w.add_metadata("tokenizer.ggml.bos_token_id", 1u32);
    w.add_metadata("tokenizer.ggml.eos_token_id", 2u32);
    w.add_metadata("tokenizer.ggml.add_bos_token", true);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{build_decoder, weight_tensor, DecoderConfig, Logits};
    use kestrel_gguf::{GgufFile, GgufModel};

    fn open(w: &GgufWriter) -> GgufModel {
        let bytes = w.to_bytes().unwrap();
        GgufModel::from_shards(
            vec![GgufFile::from_bytes(bytes).unwrap()],
            std::path::Path::new("synth"),
        )
        .unwrap()
    }

    #[test]
    fn q4_k_m_follows_llama_cpp_s_mix_and_falls_back_on_short_rows() {
        let t = |role, l| SynthType::Q4KM.matrix_type(role, l, 32);
        assert_eq!(t("attn_v.weight", 0), GgmlType::Q6K);
        assert_eq!(t("attn_v.weight", 4), GgmlType::Q4K);
        assert_eq!(t("attn_v.weight", 6), GgmlType::Q6K); // (6 - 4) % 3 == 2
        assert_eq!(t("ffn_down.weight", 31), GgmlType::Q6K);
        assert_eq!(t("attn_q.weight", 0), GgmlType::Q4K);
        assert_eq!(t("output.weight", 0), GgmlType::Q6K);
        assert_eq!(fit(GgmlType::Q4K, 640), GgmlType::Q5_0);
        assert_eq!(fit(GgmlType::Q6K, 640), GgmlType::Q8_0);
        assert_eq!(fit(GgmlType::Q4K, 2048), GgmlType::Q4K);
        assert_eq!(SynthType::from_name("q4_k_m"), Some(SynthType::Q4KM));
        assert_eq!(SynthShape::from_name("LLAMA-8B"), Some(SynthShape::Llama8B));
    }

    #[test]
    fn the_same_seed_writes_the_same_bytes_and_a_model_that_builds() {
        // Two layers of the real widths keep the test small (gemma3's vocabulary is most of it).
        for (shape, ty) in [
            (SynthShape::Gemma3_270M, SynthType::Q4KM),
            (SynthShape::Llama1B, SynthType::Q4_0),
        ] {
            let a = synth_model(shape, ty, 2, 5).unwrap();
            let b = synth_model(shape, ty, 2, 5).unwrap();
            assert_eq!(a.to_bytes().unwrap(), b.to_bytes().unwrap());
            let m = open(&a);
            let cfg = DecoderConfig::from_model(&m).unwrap();
            assert_eq!(cfg.n_layer, 2);
            let g = build_decoder(&cfg, &m, Logits::Last).unwrap();
            for wr in g.weights() {
                assert!(weight_tensor(&m, &wr.name).is_some(), "{}", wr.name);
            }
        }
    }

    /// A smaller vocabulary keeps the widths and the type mix: only the embedding (Gemma 3's
    /// tied output) and the tokenizer shrink.
    #[test]
    fn a_smaller_vocabulary_keeps_the_widths() {
        let m = open(
            &synth_model_with_vocab(SynthShape::Gemma3_270M, SynthType::Q4KM, 1, 4096, 5).unwrap(),
        );
        let emb = m.tensor_info("token_embd.weight").unwrap();
        assert_eq!(emb.dims(), [640, 4096]);
        let full = open(&synth_model(SynthShape::Gemma3_270M, SynthType::Q4KM, 1, 5).unwrap());
        let q = |m: &GgufModel| {
            let t = m.tensor_info("blk.0.attn_q.weight").unwrap();
            (t.dims().to_vec(), t.ggml_type())
        };
        assert_eq!(q(&m), q(&full));
        let cfg = DecoderConfig::from_model(&m).unwrap();
        assert_eq!(cfg.n_vocab, 4096);
    }

    /// The mixture-of-experts layout (Qwen3 30B-A3B's, at small widths: its real experts would
    /// take minutes to quantize in a debug build): 3-D expert matrices in the Q4_K_M mix, an
    /// F32 router, per-head Q/K norms; the decoder builds and runs a token.
    #[test]
    fn the_moe_layout_builds_a_decoder_that_runs() {
        let mut d = SynthShape::Qwen3Moe30B.dims();
        (d.n_embd, d.n_head, d.n_kv, d.head_dim, d.n_vocab) = (256, 4, 2, 64, 512);
        d.moe = Some(Experts {
            n_expert: 8,
            n_used: 2,
            n_ff: 256,
        });
        let m = open(&write_dims(&d, SynthType::Q4KM, 2, 3).unwrap());
        let down = m.tensor_info("blk.1.ffn_down_exps.weight").unwrap();
        assert_eq!(down.dims(), [256, 256, 8]);
        assert_eq!(down.ggml_type(), GgmlType::Q6K, "the last layer: more bits");
        let down = m.tensor_info("blk.0.ffn_down_exps.weight").unwrap();
        assert_eq!(down.ggml_type(), GgmlType::Q4K);
        let gate = m.tensor_info("blk.1.ffn_gate_exps.weight").unwrap();
        assert_eq!(gate.ggml_type(), GgmlType::Q4K);
        let router = m.tensor_info("blk.1.ffn_gate_inp.weight").unwrap();
        assert_eq!(router.ggml_type(), GgmlType::F32);
        let cfg = DecoderConfig::from_model(&m).unwrap();
        let g = build_decoder(&cfg, &m, Logits::Last).unwrap();
        assert!(g
            .nodes()
            .iter()
            .any(|n| matches!(n.op, kestrel_graph::Op::Moe(_))));
        let lookup = |n: &str| weight_tensor(&m, n);
        let mut plan = kestrel_graph::ExecutionPlan::compile(&g, 4, &lookup).unwrap();
        let layout = kestrel_kv::KvLayout {
            n_layers: cfg.n_layer,
            n_kv_head: cfg.n_head_kv[0],
            layer_kv_heads: Vec::new(),
            k_head_dim: cfg.head_dim_k,
            v_head_dim: cfg.head_dim_v,
            dtype: kestrel_kv::KvDType::F16,
            recurrent: kestrel_kv::RecurrentLayout::NONE,
        };
        let mut kv = kestrel_kv::ContiguousCache::new(layout, 8).unwrap();
        let engine = kestrel_tensor::CpuEngine::new(1).unwrap();
        let logits = plan.run(&engine, &mut kv, &[5, 9], 0).unwrap();
        assert_eq!(logits.len(), 512);
        assert!(logits.iter().all(|v| v.is_finite()));
    }
}
