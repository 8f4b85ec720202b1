//! `KvLayout`: how many layers, heads and head dims a cache holds, and in which dtype.

use crate::{KvError, RecurrentLayout};

/// Element type of a cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum KvDType {
    /// 4 bytes per element.
    F32,
    /// 2 bytes per element (the default, as llama.cpp's).
    #[default]
    F16,
    /// Blocks of 32 values, an f16 scale and 32 signed bytes: 34 bytes per 32 values.
    Q8_0,
    /// Blocks of 32 values, an f16 scale and 16 bytes of nibbles: 18 bytes per 32 values.
    Q4_0,
}

impl KvDType {
    /// Bytes that `values` values take (`values` a multiple of 32 for the quantized types).
    pub fn bytes(self, values: usize) -> usize {
        match self {
            KvDType::F32 => values * 4,
            KvDType::F16 => values * 2,
            KvDType::Q8_0 => values / 32 * 34,
            KvDType::Q4_0 => values / 32 * 18,
        }
    }

    /// Values per block (1 for the float types).
    pub fn block(self) -> usize {
        match self {
            KvDType::F32 | KvDType::F16 => 1,
            KvDType::Q8_0 | KvDType::Q4_0 => 32,
        }
    }

    /// Its name as llama.cpp's `--cache-type-k` spells it.
    pub fn name(self) -> &'static str {
        match self {
            KvDType::F32 => "f32",
            KvDType::F16 => "f16",
            KvDType::Q8_0 => "q8_0",
            KvDType::Q4_0 => "q4_0",
        }
    }

    /// Parse `f32`, `f16`, `q8_0` or `q4_0`.
    pub fn parse(s: &str) -> Option<KvDType> {
        [KvDType::F32, KvDType::F16, KvDType::Q8_0, KvDType::Q4_0]
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(s))
    }
}

/// The shape of a model's KV cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvLayout {
    /// Layers.
    pub n_layers: usize,
    /// KV heads per layer (every layer's, unless `layer_kv_heads` names each layer's).
    pub n_kv_head: usize,
    /// KV heads of each layer where layers differ (llama.cpp's per-layer `head_count_kv`:
    /// DeciLM's and OpenELM's layers); empty: `n_kv_head` in every layer. Each entry non-zero.
    pub layer_kv_heads: Vec<usize>,
    /// Key head size.
    pub k_head_dim: usize,
    /// Value head size.
    pub v_head_dim: usize,
    /// Element type.
    pub dtype: KvDType,
    /// The recurrent state of a state-space model's layers, kept per sequence beside the keys
    /// and values ([`RecurrentLayout::NONE`] for a transformer). `n_layers` counts the
    /// attention layers only: a model of recurrent layers alone has 0.
    pub recurrent: RecurrentLayout,
}

impl KvLayout {
    /// KV heads of `layer`.
    pub fn kv_heads(&self, layer: usize) -> usize {
        self.layer_kv_heads
            .get(layer)
            .copied()
            .unwrap_or(self.n_kv_head)
    }

    /// Key values per token in `layer`.
    pub fn k_per_token(&self, layer: usize) -> usize {
        self.kv_heads(layer) * self.k_head_dim
    }

    /// Value values per token in `layer`.
    pub fn v_per_token(&self, layer: usize) -> usize {
        self.kv_heads(layer) * self.v_head_dim
    }

    /// Bytes one token takes in `layer`.
    pub fn layer_bytes_per_token(&self, layer: usize) -> usize {
        self.dtype.bytes(self.k_per_token(layer)) + self.dtype.bytes(self.v_per_token(layer))
    }

    /// Bytes one token takes over all layers.
    pub fn bytes_per_token(&self) -> usize {
        (0..self.n_layers)
            .map(|il| self.layer_bytes_per_token(il))
            .sum()
    }

    /// A layer index in range.
    pub(crate) fn check_layer(&self, layer: usize) -> Result<(), KvError> {
        if layer >= self.n_layers {
            return Err(KvError::Layer {
                layer,
                n_layers: self.n_layers,
            });
        }
        Ok(())
    }

    /// Checks a write of `k`/`v` to `layer` and returns its token count.
    pub(crate) fn check_write(&self, layer: usize, k: &[f32], v: &[f32]) -> Result<usize, KvError> {
        self.check_layer(layer)?;
        let (kt, vt) = (self.k_per_token(layer), self.v_per_token(layer));
        let n = k.len() / kt;
        for (what, got, per_token) in [("keys", k.len(), kt), ("values", v.len(), vt)] {
            if got != n * per_token {
                return Err(KvError::Length {
                    layer,
                    what,
                    got,
                    per_token,
                    n,
                    expected: n * per_token,
                });
            }
        }
        Ok(n)
    }

    pub(crate) fn check(&self) -> Result<(), KvError> {
        if self.n_layers == 0 && self.recurrent.is_some() {
            // Recurrent layers only: no keys or values are kept.
            return Ok(());
        }
        // `v_head_dim` may be 0: a latent cache (DeepSeek's multi-head latent attention) holds
        // keys only, and attention reads the values from the front of each key row.
        for (v, what) in [
            (self.n_layers, "n_layers"),
            (self.n_kv_head, "n_kv_head"),
            (self.k_head_dim, "k_head_dim"),
        ] {
            if v == 0 {
                return Err(KvError::EmptyLayout(what));
            }
        }
        if !self.layer_kv_heads.is_empty()
            && (self.layer_kv_heads.len() != self.n_layers || self.layer_kv_heads.contains(&0))
        {
            return Err(KvError::Pool(format!(
                "per-layer KV heads {:?} for {} layers: one non-zero count per layer",
                self.layer_kv_heads, self.n_layers
            )));
        }
        let b = self.dtype.block();
        if !self.k_head_dim.is_multiple_of(b) || !self.v_head_dim.is_multiple_of(b) {
            return Err(KvError::Pool(format!(
                "a {} cache needs head sizes that are multiples of {b}, not {} and {}",
                self.dtype.name(),
                self.k_head_dim,
                self.v_head_dim
            )));
        }
        Ok(())
    }
}
