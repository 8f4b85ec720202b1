//! A model and the LoRA adapters applied to it ([`Weights`]): the graphs every plan of a
//! generator is built from and the weights they read.

use std::sync::Arc;

use kestrel_arch::{adapted_weight, apply_adapters, build_decoder, DecoderConfig, Logits};
use kestrel_arch::{LoraAdapter, LoraError};
use kestrel_gguf::GgufModel;
use kestrel_graph::Graph;
use kestrel_tensor::Tensor;

use crate::GenerateError;

/// A model and the adapters applied to it, each with its scale.
#[derive(Clone, Debug)]
pub(crate) struct Weights {
    pub(crate) model: Arc<GgufModel>,
    adapters: Vec<(Arc<LoraAdapter>, f32)>,
    /// Adapter terms as fused low-rank nodes (the CPU engine) or plain ones (CUDA).
    fused: bool,
}

impl Weights {
    /// Checks every adapter against `model` (architecture, tensors, shapes) and its scale.
    pub(crate) fn new(
        model: Arc<GgufModel>,
        adapters: Vec<(Arc<LoraAdapter>, f32)>,
        fused: bool,
    ) -> Result<Weights, GenerateError> {
        for (a, scale) in &adapters {
            a.check(&model)?;
            if !scale.is_finite() {
                return Err(GenerateError::from(LoraError::Invalid {
                    path: a.path().to_path_buf(),
                    reason: format!("scale {scale} is not a finite number"),
                }));
            }
        }
        Ok(Weights {
            model,
            adapters,
            fused,
        })
    }

    /// The decoder graph for `which` outputs, adapters applied.
    pub(crate) fn graph(&self, cfg: &DecoderConfig, which: Logits) -> Result<Graph, GenerateError> {
        let g = build_decoder(cfg, &self.model, which)?;
        Ok(apply_adapters(&g, &self.adapters, self.fused)?)
    }

    /// A weight of [`graph`](Self::graph)'s graphs by name.
    pub(crate) fn get(&self, name: &str) -> Option<Tensor> {
        adapted_weight(&self.model, &self.adapters, name)
    }

    /// The adapters, in order, with their scales.
    pub(crate) fn adapters(&self) -> &[(Arc<LoraAdapter>, f32)] {
        &self.adapters
    }

    /// The adapters' scales, in order.
    pub(crate) fn scales(&self) -> Vec<f32> {
        self.adapters.iter().map(|(_, s)| *s).collect()
    }

    /// Sets every adapter's scale (graphs built from now on get them as their factors).
    pub(crate) fn set_scales(&mut self, scales: &[f32]) {
        for ((_, s), &v) in self.adapters.iter_mut().zip(scales) {
            *s = v;
        }
    }
}
