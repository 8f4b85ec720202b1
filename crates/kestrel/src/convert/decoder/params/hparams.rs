//! What a family's hyperparameters are written from ([`Hparams`]) and the readers of required
//! keys: at the bottom of `params`, so the families' own modules read them without importing
//! the writer that calls them.

use std::path::Path;

use serde_json::{Map, Value};

use crate::convert::decoder::{bad, u32_of, uint};
use crate::convert::ConvertError;

/// What the metadata is written from.
pub(in crate::convert::decoder) struct Hparams<'a> {
    /// `config.json` with `text_config` folded on top and `AutoConfig`'s defaults.
    pub h: &'a Value,
    /// llama.cpp's `rope_parameters`.
    pub rp: &'a Map<String, Value>,
    /// The config's path, for errors.
    pub cfg: &'a Path,
    pub arch: &'static str,
    pub n_layer: u64,
    pub n_embd: Option<u64>,
    pub n_head: Option<u64>,
    pub vocab_size: Option<u64>,
    /// `general.file_type`.
    pub file_type: u32,
}

pub(in crate::convert::decoder) fn need(hp: &Hparams, keys: &[&str]) -> Result<u64, ConvertError> {
    uint(hp.h, keys, hp.cfg)?.ok_or_else(|| bad(hp.cfg, format!("no {}", keys[0])))
}

pub(in crate::convert::decoder) fn need_u32(
    hp: &Hparams,
    keys: &[&str],
) -> Result<u32, ConvertError> {
    u32_of(need(hp, keys)?, keys[0], hp.cfg)
}

pub(in crate::convert::decoder) fn need_f32(hp: &Hparams, key: &str) -> Result<f32, ConvertError> {
    hp.h.get(key)
        .and_then(|v| v.as_f64())
        .map(|v| v as f32)
        .ok_or_else(|| bad(hp.cfg, format!("no {key} (a number)")))
}
