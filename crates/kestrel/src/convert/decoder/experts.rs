//! Mixture-of-experts checkpoints keep one 2-D tensor per expert and projection
//! (`model.layers.{L}.mlp.experts.{E}.gate_proj.weight`); GGUF keeps one 3-D tensor per
//! projection (`blk.{L}.ffn_gate_exps.weight`, experts outermost). As llama.cpp's converter,
//! a layer's experts are collected as they come and written as three stacked tensors where
//! the last of them appears, in the family's projection order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kestrel_gguf::{GgmlType, TensorSpec};
use serde_json::Value;

use super::family::{ExpertLayout, Family};
use super::names;
use super::write::{Planned, Source};
use super::{bad, uint};
use crate::convert::checkpoint::Checkpoint;
use crate::convert::ConvertError;

/// One layer's experts seen so far: per projection, per expert, the checkpoint name.
struct Layer {
    names: Vec<Vec<Option<String>>>,
    /// (rows, cols) of each projection, from its first expert.
    shapes: Vec<Option<(usize, usize)>>,
    seen: usize,
}

/// The experts collected while planning a conversion.
pub(super) struct Experts {
    layout: Option<ExpertLayout>,
    /// `num_local_experts` / `num_experts`.
    count: Option<usize>,
    layers: BTreeMap<usize, Layer>,
    cfg: PathBuf,
}

impl Experts {
    /// Reads the expert count the family's converter reads.
    pub(super) fn new(family: Family, h: &Value, cfg: &Path) -> Result<Experts, ConvertError> {
        let keys: &[&str] = match family {
            Family::Llama => &["num_local_experts"],
            Family::DeepSeek2 | Family::NemotronH => &["n_routed_experts"],
            _ => &["num_local_experts", "num_experts"],
        };
        let count = match family.experts() {
            Some(_) => uint(h, keys, cfg)?
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
                .filter(|&n| n > 0),
            None => None,
        };
        if count.is_some_and(|n| n > 1 << 16) {
            return Err(bad(
                cfg,
                format!("{} = {count:?} experts is implausible", keys[0]),
            ));
        }
        Ok(Experts {
            layout: family.experts(),
            count,
            layers: BTreeMap::new(),
            cfg: cfg.to_path_buf(),
        })
    }

    /// Takes `hf` (filtered name `name`) if it is an expert tensor: `Ok(None)` when it is not,
    /// `Ok(Some(tensors))` when it is, with the layer's stacked tensors once its last
    /// expert has arrived (and none before).
    pub(super) fn take(
        &mut self,
        ck: &Checkpoint,
        hf: &str,
        name: &str,
        out_type: &impl Fn(&str, usize, usize) -> GgmlType,
    ) -> Result<Option<Vec<Planned>>, ConvertError> {
        let Some(layout) = self.layout else {
            return Ok(None);
        };
        let Some((layer, expert, part)) = names::expert_of(&layout, name) else {
            return Ok(None);
        };
        let n = self.count.ok_or_else(|| {
            bad(
                &self.cfg,
                format!("{hf:?} is an expert tensor but the config has no expert count"),
            )
        })?;
        if expert >= n {
            return Err(bad(
                &self.cfg,
                format!("{hf:?}: expert {expert} of a model with {n} experts"),
            ));
        }
        let (dtype, shape) = ck
            .info(hf)
            .ok_or_else(|| bad(&self.cfg, format!("{hf} vanished")))?;
        if !dtype.is_float() && !dtype.is_fp8() {
            return Err(bad(
                &self.cfg,
                format!("tensor {hf:?} is not a float tensor"),
            ));
        }
        let &[rows, cols] = shape else {
            return Err(bad(
                &self.cfg,
                format!("expert tensor {hf:?} has {} dims, not 2", shape.len()),
            ));
        };
        let parts = layout.parts.len();
        let entry = self.layers.entry(layer).or_insert_with(|| Layer {
            names: vec![vec![None; n]; parts],
            shapes: vec![None; parts],
            seen: 0,
        });
        match entry.shapes[part] {
            None => entry.shapes[part] = Some((rows, cols)),
            Some(s) if s != (rows, cols) => {
                return Err(bad(
                    &self.cfg,
                    format!(
                        "expert tensor {hf:?} is {rows}x{cols}, its siblings {}x{}",
                        s.0, s.1
                    ),
                ))
            }
            Some(_) => {}
        }
        if entry.names[part][expert].replace(hf.to_string()).is_some() {
            return Err(bad(
                &self.cfg,
                format!("expert tensor {hf:?} appears twice"),
            ));
        }
        entry.seen += 1;
        if entry.seen < parts * n {
            return Ok(Some(Vec::new()));
        }
        let Some(done) = self.layers.remove(&layer) else {
            return Ok(Some(Vec::new()));
        };
        let mut out = Vec::with_capacity(parts);
        for (i, (_, gguf)) in layout.parts.iter().enumerate() {
            let (rows, cols) = done.shapes[i].unwrap_or((0, 0));
            let name = format!("blk.{layer}.{gguf}.weight");
            let ty = out_type(&name, 3, cols);
            out.push(Planned {
                spec: TensorSpec {
                    name,
                    ggml_type: ty,
                    dims: vec![cols as u64, rows as u64, n as u64],
                },
                cols,
                source: Source::Stacked {
                    hfs: done.names[i].iter().flatten().cloned().collect(),
                    rows,
                },
            });
        }
        Ok(Some(out))
    }

    /// Refuses a checkpoint whose experts did not all arrive.
    pub(super) fn finish(&self) -> Result<(), ConvertError> {
        if let Some((layer, l)) = self.layers.iter().next() {
            let n = self.count.unwrap_or(0);
            let parts = l.names.len();
            return Err(bad(
                &self.cfg,
                format!(
                    "layer {layer} has {} of its {} expert tensors ({n} experts x {parts})",
                    l.seen,
                    parts * n
                ),
            ));
        }
        Ok(())
    }
}
