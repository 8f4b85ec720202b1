//! Raw next-token logits of a token-id prompt, straight from a model file: no tokenizer, no
//! sampler, one forward pass. This is how any file (random-weight ones with a `no_vocab`
//! tokenizer included) is checked against llama.cpp's logits, and how the CPU and CUDA engines
//! are checked against each other (`kestrel logits`).

use std::sync::Arc;

use kestrel_arch::LoraAdapter;
use kestrel_arch::{adapted_weight, apply_adapters, build_decoder, DecoderConfig, Logits};
use kestrel_gguf::GgufModel;
use kestrel_graph::{CudaPlan, ExecutionPlan};
use kestrel_kv::{ContiguousCache, KvDType};
use kestrel_tensor::cuda::CudaDevice;
use kestrel_tensor::{CpuEngine, Device, DeviceRequest};

use crate::adapter_use::{last_start, AdapterUse, NEVER};
use crate::generator::kv_layout;
use crate::GenerateError;

/// Most ids one call takes (the plan and cache are sized by it).
pub const MAX_LOGITS_IDS: usize = 1 << 15;

/// Settings of [`logits_of_ids`].
#[derive(Clone, Debug, PartialEq)]
pub struct LogitsOptions {
    /// Every position's logits (`true`), or only the last's.
    pub all_positions: bool,
    /// Where to run (`cpu`, `cuda`, `cuda:N`, `auto`).
    pub device: String,
    /// CPU threads (0: one per logical CPU).
    pub threads: usize,
    /// LoRA adapter files applied, in order, each with its scale.
    pub lora: Vec<(std::path::PathBuf, f32)>,
}

impl Default for LogitsOptions {
    fn default() -> Self {
        LogitsOptions {
            all_positions: false,
            device: "cpu".into(),
            threads: 0,
            lora: Vec::new(),
        }
    }
}

/// The logits after `ids` (one vocabulary-sized row, or one per position with
/// `all_positions`), computed in one step with an f16 KV cache. An activated LoRA acts from the
/// last start of its invocation sequence in `ids` on (the step is cut there), and not at all
/// when `ids` lack it.
///
/// # Errors
/// No ids or more than [`MAX_LOGITS_IDS`], an id outside the vocabulary, a bad device, a model
/// kestrel cannot build, an engine error.
pub fn logits_of_ids(
    model: &GgufModel,
    ids: &[u32],
    opts: &LogitsOptions,
) -> Result<Vec<Vec<f32>>, GenerateError> {
    let invalid =
        |name: &'static str, reason: String| GenerateError::InvalidOption { name, reason };
    if ids.is_empty() || ids.len() > MAX_LOGITS_IDS {
        return Err(invalid(
            "ids",
            format!("{} ids: give 1 to {MAX_LOGITS_IDS}", ids.len()),
        ));
    }
    let cfg = DecoderConfig::from_model(model)?;
    if let Some((i, &id)) = ids
        .iter()
        .enumerate()
        .find(|(_, &id)| id as usize >= cfg.n_vocab)
    {
        return Err(invalid(
            "ids",
            format!(
                "id {id} at index {i} is outside the vocabulary of {}",
                cfg.n_vocab
            ),
        ));
    }
    let request: DeviceRequest = opts
        .device
        .parse()
        .map_err(|e: kestrel_tensor::ParseDeviceError| invalid("device", e.to_string()))?;
    let (device, _) = request
        .resolve()
        .map_err(|e| invalid("device", e.to_string()))?;
    let which = if opts.all_positions {
        Logits::All
    } else {
        Logits::Last
    };
    let adapters = opts
        .lora
        .iter()
        .map(|(path, scale)| Ok((Arc::new(LoraAdapter::open(path)?), *scale)))
        .collect::<Result<Vec<_>, GenerateError>>()?;
    for (a, _) in &adapters {
        a.check(model)?;
    }
    let on_cpu = !matches!(device, Device::Cuda(_));
    let graph = apply_adapters(&build_decoder(&cfg, model, which)?, &adapters, on_cpu)?;
    let lookup = |name: &str| adapted_weight(model, &adapters, name);
    let n = ids.len();
    let mut from = vec![0; adapters.len()];
    for ((a, s), f) in adapters.iter().zip(&mut from) {
        if *s != 0.0 && a.is_activated() {
            *f = last_start(ids, a.invocation_tokens()).unwrap_or(NEVER);
        }
    }
    let scales = AdapterUse {
        scales: adapters.iter().map(|(_, s)| *s).collect(),
        from,
    };
    let flat = match device {
        Device::Cuda(ordinal) => {
            let dev = CudaDevice::open(ordinal).map_err(|e| invalid("device", e.to_string()))?;
            let mut plan = CudaPlan::compile(&graph, Arc::new(dev), n, &lookup)?;
            let mut kv = plan.new_cache(n)?;
            in_stretches(n, &scales, opts.all_positions, |r, at, flat| {
                if plan.adapter_slots() > 0 {
                    plan.set_adapter_scales(at)?;
                }
                flat.extend_from_slice(plan.run(&mut kv, &ids[r])?);
                Ok(())
            })?
        }
        _ => {
            let engine = CpuEngine::new(opts.threads)?;
            let mut plan = ExecutionPlan::compile(&graph, n, &lookup)?;
            let mut kv = ContiguousCache::new(kv_layout(&cfg, KvDType::F16)?, n)?;
            in_stretches(n, &scales, opts.all_positions, |r, at, flat| {
                if plan.adapter_slots() > 0 {
                    plan.set_adapter_scales(at)?;
                }
                let pos = r.start;
                flat.extend_from_slice(plan.run(&engine, &mut kv, &ids[r], pos)?);
                Ok(())
            })?
        }
    };
    Ok(flat.chunks(cfg.n_vocab).map(<[f32]>::to_vec).collect())
}

/// Runs `n` ids in stretches of constant adapter scales (one stretch when they never change):
/// `step` gets each stretch's range and scales and appends its rows. Returns every row with
/// `all`, else the last stretch's.
fn in_stretches(
    n: usize,
    scales: &AdapterUse,
    all: bool,
    mut step: impl FnMut(std::ops::Range<usize>, &[f32], &mut Vec<f32>) -> Result<(), GenerateError>,
) -> Result<Vec<f32>, GenerateError> {
    let (mut flat, mut at, mut pos) = (Vec::new(), Vec::new(), 0);
    while pos < n {
        let end = scales.next_change(pos).map_or(n, |c| c.min(n));
        at.clear();
        scales.extend_at(pos, &mut at);
        if !all {
            flat.clear();
        }
        step(pos..end, &at, &mut flat)?;
        pos = end;
    }
    Ok(flat)
}
