//! StableLM 2's per-head Q/K layer norms: one 1-D weight per head in the checkpoint
//! (`model.layers.{L}.self_attn.q_layernorm.norms.{i}.weight`), one `[head_dim, heads]` tensor
//! in GGUF (`blk.{L}.attn_q_norm.weight`). As llama.cpp's `StableLMModel`, a layer's norms are
//! collected as they come and written, stacked in head order, where the last one appears.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kestrel_gguf::{GgmlType, TensorSpec};

use super::bad;
use super::write::{Planned, Source};
use crate::convert::checkpoint::Checkpoint;
use crate::convert::ConvertError;

/// One layer's norms of one kind seen so far: each head's checkpoint name, and the count.
type Seen = (Vec<Option<String>>, usize);

/// The per-head norms collected while planning a conversion.
pub(super) struct HeadNorms {
    /// Heads of Q and of K.
    heads: [usize; 2],
    /// Per (layer, Q or K): the checkpoint name of each head's norm, and the count seen.
    layers: BTreeMap<(usize, usize), Seen>,
    /// Each head's norm length, from the first one seen.
    len: Option<usize>,
    cfg: PathBuf,
}

/// `(layer, 0 for Q or 1 for K, head)` of a per-head norm's (filtered) name.
fn parse(name: &str) -> Option<(usize, usize, usize)> {
    let rest = name.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let rest = rest.strip_prefix("self_attn.")?;
    let (which, rest) = if let Some(r) = rest.strip_prefix("q_layernorm.norms.") {
        (0, r)
    } else {
        (1, rest.strip_prefix("k_layernorm.norms.")?)
    };
    let head = rest.strip_suffix(".weight")?;
    Some((layer.parse().ok()?, which, head.parse().ok()?))
}

impl HeadNorms {
    /// Norms of `n_head` query heads and `n_head_kv` key heads.
    pub(super) fn new(n_head: Option<u64>, n_head_kv: Option<u64>, cfg: &Path) -> HeadNorms {
        let n = |v: Option<u64>| v.map_or(0, |v| usize::try_from(v).unwrap_or(usize::MAX));
        HeadNorms {
            heads: [n(n_head), n(n_head_kv.or(n_head))],
            layers: BTreeMap::new(),
            len: None,
            cfg: cfg.to_path_buf(),
        }
    }

    /// Takes `hf` (filtered name `name`) if it is a per-head norm: `Ok(None)` when it is not,
    /// `Ok(Some(tensors))` when it is, with the stacked tensor once the layer's last head of
    /// that kind has arrived (and none before).
    pub(super) fn take(
        &mut self,
        ck: &Checkpoint,
        hf: &str,
        name: &str,
    ) -> Result<Option<Vec<Planned>>, ConvertError> {
        let Some((layer, which, head)) = parse(name) else {
            return Ok(None);
        };
        let n = self.heads[which];
        if head >= n {
            return Err(bad(
                &self.cfg,
                format!("{hf:?}: head {head} of a layer with {n} heads"),
            ));
        }
        let (dtype, shape) = ck
            .info(hf)
            .ok_or_else(|| bad(&self.cfg, format!("{hf} vanished")))?;
        let &[len] = shape else {
            return Err(bad(
                &self.cfg,
                format!("per-head norm {hf:?} has {} dims, not 1", shape.len()),
            ));
        };
        if !dtype.is_float() {
            return Err(bad(
                &self.cfg,
                format!("tensor {hf:?} is not a float tensor"),
            ));
        }
        match self.len {
            None => self.len = Some(len),
            Some(l) if l != len => {
                return Err(bad(
                    &self.cfg,
                    format!("per-head norm {hf:?} has {len} values, its siblings {l}"),
                ))
            }
            Some(_) => {}
        }
        let entry = self
            .layers
            .entry((layer, which))
            .or_insert_with(|| (vec![None; n], 0));
        if entry.0[head].replace(hf.to_string()).is_some() {
            return Err(bad(&self.cfg, format!("tensor {hf:?} appears twice")));
        }
        entry.1 += 1;
        if entry.1 < n {
            return Ok(Some(Vec::new()));
        }
        let Some((names, _)) = self.layers.remove(&(layer, which)) else {
            return Ok(Some(Vec::new()));
        };
        let gguf = ["attn_q_norm", "attn_k_norm"][which];
        Ok(Some(vec![Planned {
            spec: TensorSpec {
                name: format!("blk.{layer}.{gguf}.weight"),
                ggml_type: GgmlType::F32,
                dims: vec![len as u64, n as u64],
            },
            cols: len,
            source: Source::Stacked {
                hfs: names.into_iter().flatten().collect(),
                rows: 1,
            },
        }]))
    }

    /// Refuses a checkpoint whose per-head norms did not all arrive.
    pub(super) fn finish(&self) -> Result<(), ConvertError> {
        if let Some(((layer, which), (_, seen))) = self.layers.iter().next() {
            return Err(bad(
                &self.cfg,
                format!(
                    "layer {layer} has {seen} of its {} per-head {} norms",
                    self.heads[*which],
                    ["Q", "K"][*which]
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn per_head_norm_names_parse() {
        assert_eq!(
            parse("model.layers.3.self_attn.q_layernorm.norms.11.weight"),
            Some((3, 0, 11))
        );
        assert_eq!(
            parse("model.layers.0.self_attn.k_layernorm.norms.0.weight"),
            Some((0, 1, 0))
        );
        assert_eq!(parse("model.layers.0.self_attn.q_layernorm.weight"), None);
        assert_eq!(parse("model.layers.0.self_attn.q_proj.weight"), None);
        assert_eq!(
            parse("model.layers.x.self_attn.k_layernorm.norms.0.weight"),
            None
        );
    }
}
