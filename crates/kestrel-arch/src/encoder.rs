//! Encoder-only transformers (BERT and its sentence-embedding descendants, e.g.
//! all-MiniLM-L6-v2): [`EncoderConfig`] read from GGUF metadata as llama.cpp's converter writes
//! it, and [`build_encoder`], one forward pass as a `kestrel-graph` graph.
//!
//! The BERT layout (llama.cpp's `build_bert`): token + token-type (type 0) + learned position
//! embeddings, a layer norm, then post-norm layers — biased Q/K/V projections, attention where
//! every token sees every other (not causal), biased output projection, residual, layer norm,
//! biased up projection, exact GELU, biased down projection, residual, layer norm. The graph's
//! output is every token's final hidden state; pooling is the caller's.

use kestrel_gguf::GgufModel;
use kestrel_graph::{AttentionParams, EmbedIndex, Graph, NodeId};

use crate::{ArchError, ArchKind};

/// How token states become one vector (llama.cpp's `<arch>.pooling_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PoolingType {
    /// No pooling in the file's metadata: every token's state is the output.
    None,
    /// Mean over the tokens (sentence-transformers' default).
    Mean,
    /// The first (`[CLS]`) token's state.
    Cls,
    /// The last token's state.
    Last,
}

impl PoolingType {
    /// From llama.cpp's numbering (0 none, 1 mean, 2 cls, 3 last); `None` for anything else.
    pub fn from_gguf(v: u32) -> PoolingType {
        match v {
            1 => PoolingType::Mean,
            2 => PoolingType::Cls,
            3 => PoolingType::Last,
            _ => PoolingType::None,
        }
    }
}

/// An encoder's hyperparameters.
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderConfig {
    /// `general.architecture`.
    pub arch: String,
    /// Vocabulary size.
    pub n_vocab: usize,
    /// Longest input (rows of the position table).
    pub n_ctx_train: usize,
    /// Hidden size.
    pub n_embd: usize,
    /// Layers.
    pub n_layer: usize,
    /// Attention heads.
    pub n_head: usize,
    /// Head size.
    pub head_dim: usize,
    /// FFN hidden size.
    pub n_ff: usize,
    /// Layer-norm epsilon.
    pub norm_eps: f32,
    /// Pooling the file asks for.
    pub pooling: PoolingType,
    /// Whether the file has a token-type table (its row 0 is added to every token).
    pub has_token_types: bool,
}

impl EncoderConfig {
    /// Read the configuration of an encoder model.
    ///
    /// # Errors
    /// [`ArchError::Unsupported`] if the file is not an encoder kestrel knows;
    /// [`ArchError::Invalid`] for metadata that contradicts itself.
    pub fn from_model(model: &GgufModel) -> Result<EncoderConfig, ArchError> {
        let kind = ArchKind::detect(model)?;
        let md = model.metadata();
        let arch = md.architecture()?.to_string();
        if kind != ArchKind::Bert {
            return Err(ArchError::Invalid {
                arch,
                reason: "not an encoder: load it as a decoder (Model) instead".into(),
            });
        }
        let key = |f: &str| format!("{arch}.{f}");
        let invalid = |reason: String| ArchError::Invalid {
            arch: arch.clone(),
            reason,
        };
        let n_layer = md.get_usize(&key("block_count"))?;
        let n_embd = md.get_usize(&key("embedding_length"))?;
        let n_head = md.get_usize(&key("attention.head_count"))?;
        let n_ff = md.get_usize(&key("feed_forward_length"))?;
        let n_ctx_train = md.get_usize(&key("context_length"))?;
        if n_layer == 0 || n_layer > 4096 || n_embd == 0 || n_head == 0 || n_ff == 0 {
            return Err(invalid(format!(
                "block_count {n_layer}, embedding_length {n_embd}, head_count {n_head}, feed_forward_length {n_ff}"
            )));
        }
        if n_embd % n_head != 0 {
            return Err(invalid(format!(
                "embedding_length {n_embd} is not a multiple of head_count {n_head}"
            )));
        }
        if md
            .opt(&key("attention.causal"), |m, k| m.get_bool(k))?
            .unwrap_or(false)
        {
            return Err(invalid(
                "attention.causal is true: a causal BERT is not supported".into(),
            ));
        }
        let norm_eps = md
            .opt(&key("attention.layer_norm_epsilon"), |m, k| m.get_f32(k))?
            .unwrap_or(1e-12);
        let pooling = md
            .opt(&key("pooling_type"), |m, k| m.get_u32(k))?
            .map_or(PoolingType::None, PoolingType::from_gguf);
        let n_vocab = match md.opt(&key("vocab_size"), |m, k| m.get_usize(k))? {
            Some(n) => n,
            None => md.get_array("tokenizer.ggml.tokens")?.len(),
        };
        Ok(EncoderConfig {
            arch: arch.clone(),
            n_vocab,
            n_ctx_train,
            n_embd,
            n_layer,
            n_head,
            head_dim: n_embd / n_head,
            n_ff,
            norm_eps,
            pooling,
            has_token_types: model.tensor_info("token_types.weight").is_some(),
        })
    }
}

/// Build the graph of one encoder pass: the output is every token's final hidden state
/// (`n_embd` wide). A sequence must be run whole, in one step: its tokens attend to each other.
///
/// # Errors
/// [`ArchError::Invalid`] when a tensor is missing or has the wrong shape.
pub fn build_encoder(cfg: &EncoderConfig, model: &GgufModel) -> Result<Graph, ArchError> {
    let mut g = Graph::new();
    let arch = cfg.arch.as_str();
    let ge = |e: kestrel_graph::GraphError| ArchError::Invalid {
        arch: arch.to_string(),
        reason: e.to_string(),
    };
    let weight = |g: &mut Graph, name: &str| -> Result<usize, ArchError> {
        let info = model.tensor_info(name).ok_or_else(|| ArchError::Invalid {
            arch: arch.to_string(),
            reason: format!("tensor {name:?} is missing"),
        })?;
        Ok(g.weight(name, info.dims()))
    };
    let eps = cfg.norm_eps;

    let tok = weight(&mut g, "token_embd.weight")?;
    let mut x = g
        .embed_by("inp_embd", tok, EmbedIndex::Tokens)
        .map_err(ge)?;
    if cfg.has_token_types {
        let tt = weight(&mut g, "token_types.weight")?;
        let t = g.embed_by("inp_type", tt, EmbedIndex::Row(0)).map_err(ge)?;
        x = g.add("inp_plus_type", x, t).map_err(ge)?;
    }
    let pos = weight(&mut g, "position_embd.weight")?;
    let p = g
        .embed_by("inp_pos", pos, EmbedIndex::Positions)
        .map_err(ge)?;
    x = g.add("inp_plus_pos", x, p).map_err(ge)?;
    let (w, b) = (
        weight(&mut g, "token_embd_norm.weight")?,
        weight(&mut g, "token_embd_norm.bias")?,
    );
    x = g
        .layer_norm("inp_norm", x, eps, Some(w), Some(b))
        .map_err(ge)?;

    for il in 0..cfg.n_layer {
        let n = |s: &str| format!("blk.{il}.{s}");
        let linear = |g: &mut Graph, input: NodeId, name: &str| -> Result<NodeId, ArchError> {
            let w = weight(g, &n(&format!("{name}.weight")))?;
            let b = weight(g, &n(&format!("{name}.bias")))?;
            let y = g.matmul(&n(name), input, w).map_err(ge)?;
            g.add_bias(&n(&format!("{name}_b")), y, b).map_err(ge)
        };
        let q = linear(&mut g, x, "attn_q")?;
        let k = linear(&mut g, x, "attn_k")?;
        let v = linear(&mut g, x, "attn_v")?;
        let params = AttentionParams {
            layer: il,
            n_head: cfg.n_head,
            n_kv_head: cfg.n_head,
            head_dim_k: cfg.head_dim,
            head_dim_v: cfg.head_dim,
            scale: 1.0 / (cfg.head_dim as f32).sqrt(),
            window: None,
            softcap: None,
            causal: false,
            sinks: None,
            latent: false,
        };
        let a = g.attention(&n("attn"), q, k, v, params).map_err(ge)?;
        let o = linear(&mut g, a, "attn_output")?;
        let r = g.add(&n("attn_residual"), o, x).map_err(ge)?;
        let (w, b) = (
            weight(&mut g, &n("attn_output_norm.weight"))?,
            weight(&mut g, &n("attn_output_norm.bias"))?,
        );
        let h = g
            .layer_norm(&n("attn_output_norm"), r, eps, Some(w), Some(b))
            .map_err(ge)?;
        let up = linear(&mut g, h, "ffn_up")?;
        let act = g.gelu_erf(&n("ffn_gelu"), up).map_err(ge)?;
        let down = linear(&mut g, act, "ffn_down")?;
        let r = g.add(&n("ffn_residual"), down, h).map_err(ge)?;
        let (w, b) = (
            weight(&mut g, &n("layer_output_norm.weight"))?,
            weight(&mut g, &n("layer_output_norm.bias"))?,
        );
        x = g
            .layer_norm(&n("layer_output_norm"), r, eps, Some(w), Some(b))
            .map_err(ge)?;
    }
    g.set_output(x).map_err(ge)?;
    Ok(g)
}
