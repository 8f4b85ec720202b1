//! `KvLayout`: how many layers, heads and head dims a cache holds, and in which dtype.

use crate::KvError;

/// Element type of a cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum KvDType {
    /// 4 bytes per element.
    F32,
    /// 2 bytes per element (the default, as llama.cpp's).
    #[default]
    F16,
}

impl KvDType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            KvDType::F32 => 4,
            KvDType::F16 => 2,
        }
    }
}

/// The shape of a model's KV cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvLayout {
    /// Layers.
    pub n_layers: usize,
    /// KV heads per layer.
    pub n_kv_head: usize,
    /// Key head size.
    pub k_head_dim: usize,
    /// Value head size.
    pub v_head_dim: usize,
    /// Element type.
    pub dtype: KvDType,
}

impl KvLayout {
    /// Key values per token per layer.
    pub fn k_per_token(&self) -> usize {
        self.n_kv_head * self.k_head_dim
    }

    /// Value values per token per layer.
    pub fn v_per_token(&self) -> usize {
        self.n_kv_head * self.v_head_dim
    }

    /// Bytes one token takes over all layers.
    pub fn bytes_per_token(&self) -> usize {
        self.n_layers * (self.k_per_token() + self.v_per_token()) * self.dtype.size()
    }

    pub(crate) fn check(&self) -> Result<(), KvError> {
        for (v, what) in [
            (self.n_layers, "n_layers"),
            (self.n_kv_head, "n_kv_head"),
            (self.k_head_dim, "k_head_dim"),
            (self.v_head_dim, "v_head_dim"),
        ] {
            if v == 0 {
                return Err(KvError::EmptyLayout(what));
            }
        }
        Ok(())
    }
}
