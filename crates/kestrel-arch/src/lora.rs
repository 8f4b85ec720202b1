//! LoRA adapters as llama.cpp's `convert_lora_to_gguf.py` writes them (`general.type =
//! adapter`, `adapter.type = lora`, `adapter.lora.alpha`, a `{weight}.lora_a` and
//! `{weight}.lora_b` tensor per adapted weight in any type the engine reads), checked against a
//! base model as llama.cpp checks them, and applied to a decoder graph without merging
//! ([`apply_adapters`]: `y = W·x + scale·B·(A·x)` for each adapter, each with its own scale).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kestrel_gguf::GgufModel;
use kestrel_graph::{Graph, GraphError, LowRank};
use kestrel_tensor::Tensor;

use crate::weight_tensor;

/// Why an adapter could not be loaded or applied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoraError {
    /// The file could not be read as GGUF.
    #[error("LoRA adapter {path}: {source}")]
    Gguf {
        /// The adapter file.
        path: PathBuf,
        /// The GGUF layer's error.
        source: kestrel_gguf::GgufError,
    },
    /// A GGUF file that is not a LoRA adapter, or a malformed one.
    #[error("LoRA adapter {path}: {reason}")]
    Invalid {
        /// The adapter file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An adapter made for another model.
    #[error("LoRA adapter {path} does not fit the model: {reason}")]
    Mismatch {
        /// The adapter file.
        path: PathBuf,
        /// What does not fit.
        reason: String,
    },
    /// An adapted weight the graph uses only in ops kestrel does not adapt (per-head matmuls).
    #[error("LoRA adapter {path}: {weight} is adapted, but kestrel applies adapters only to matmuls, expert projections and the token embedding")]
    Unapplied {
        /// The adapter file.
        path: PathBuf,
        /// The base weight.
        weight: String,
    },
    /// The adapted graph could not be built.
    #[error(transparent)]
    Graph(#[from] GraphError),
}

/// One half of a pair as found in the file: its tensor name and ggml dims.
type Half = (String, Vec<u64>);

/// One adapted weight's pair: tensor names in the adapter file and ggml dims.
#[derive(Clone, Debug, PartialEq)]
struct Pair {
    a: String,
    a_dims: Vec<u64>,
    b: String,
    b_dims: Vec<u64>,
}

/// A LoRA adapter file, memory-mapped.
#[derive(Debug)]
pub struct LoraAdapter {
    path: PathBuf,
    file: GgufModel,
    arch: String,
    alpha: f32,
    /// Base weight name → its pair.
    pairs: BTreeMap<String, Pair>,
    /// An activated LoRA's invocation sequence (`adapter.alora.invocation_tokens`; empty for
    /// an ordinary adapter).
    invocation: Vec<u32>,
    /// Halves as the fused low-rank op reads them (F32, `B` transposed), made on first use and
    /// shared by every plan.
    derived: std::sync::Mutex<std::collections::HashMap<String, Tensor>>,
}

impl LoraAdapter {
    /// Reads the adapter at `path` (metadata and tensor table; the data stays mapped).
    ///
    /// # Errors
    /// Not GGUF, not an adapter (`general.type`, `adapter.type`), a tensor that is neither
    /// `*.lora_a`, `*.lora_b` nor a norm, a pair missing one half, a half neither 2-D nor 3-D
    /// (one matrix per expert), halves of different ranks of dims.
    pub fn open(path: impl AsRef<Path>) -> Result<LoraAdapter, LoraError> {
        let path = path.as_ref().to_path_buf();
        let file = GgufModel::open(&path).map_err(|source| LoraError::Gguf {
            path: path.clone(),
            source,
        })?;
        let invalid = |reason: String| LoraError::Invalid {
            path: path.clone(),
            reason,
        };
        let md = file.metadata();
        let text = |key: &str| md.get_str(key).ok().map(str::to_string);
        let general = text("general.type").unwrap_or_default();
        if general != "adapter" {
            return Err(invalid(format!(
                "general.type is {general:?}, not \"adapter\""
            )));
        }
        let kind = text("adapter.type").unwrap_or_default();
        if kind != "lora" {
            return Err(invalid(format!("adapter.type is {kind:?}, not \"lora\"")));
        }
        let arch = text("general.architecture")
            .ok_or_else(|| invalid("no general.architecture".into()))?;
        // llama.cpp reads a missing alpha as 0: the scale is then the user's alone.
        let alpha = md.get_f32("adapter.lora.alpha").unwrap_or(0.0);
        if !alpha.is_finite() {
            return Err(invalid(format!("adapter.lora.alpha is {alpha}")));
        }
        let invocation = match md.get("adapter.alora.invocation_tokens") {
            None => Vec::new(),
            // As llama.cpp: an array of uint32 and nothing else.
            Some(v) => match v.as_array() {
                Some(a) if a.element_type() == kestrel_gguf::ValueType::U32 => a
                    .raw_bytes()
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
                _ => {
                    return Err(invalid(
                        "adapter.alora.invocation_tokens is not an array of uint32".into(),
                    ))
                }
            },
        };
        let mut halves: BTreeMap<String, [Option<Half>; 2]> = BTreeMap::new();
        for t in file.tensors() {
            let name = t.info.name();
            let (base, half) = if let Some(b) = name.strip_suffix(".lora_a") {
                (b, 0)
            } else if let Some(b) = name.strip_suffix(".lora_b") {
                (b, 1)
            } else if name.ends_with("_norm.weight") {
                // As llama.cpp: adapted norm vectors are left out.
                continue;
            } else {
                return Err(invalid(format!(
                    "tensor {name:?} is neither a .lora_a nor a .lora_b"
                )));
            };
            let dims = t.info.dims().to_vec();
            // 2-D, or 3-D for the experts of a mixture (one pair per expert).
            if !(2..=3).contains(&dims.len()) {
                return Err(invalid(format!(
                    "tensor {name:?} has dims {dims:?}: neither a matrix nor one per expert"
                )));
            }
            let slot = &mut halves.entry(base.to_string()).or_default()[half];
            if slot.replace((name.to_string(), dims)).is_some() {
                return Err(invalid(format!("tensor {name:?} appears twice")));
            }
        }
        let mut pairs = BTreeMap::new();
        for (base, [a, b]) in halves {
            let (Some((a, a_dims)), Some((b, b_dims))) = (a, b) else {
                return Err(invalid(format!("{base} has only one of lora_a and lora_b")));
            };
            if a_dims.len() != b_dims.len() {
                return Err(invalid(format!(
                    "{base}: lora_a {a_dims:?} and lora_b {b_dims:?} differ in their dims"
                )));
            }
            pairs.insert(
                base,
                Pair {
                    a,
                    a_dims,
                    b,
                    b_dims,
                },
            );
        }
        if pairs.is_empty() {
            return Err(invalid("no lora_a/lora_b tensors".into()));
        }
        Ok(LoraAdapter {
            path,
            file,
            arch,
            alpha,
            pairs,
            invocation,
            derived: Default::default(),
        })
    }

    /// The file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `general.architecture`.
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// `adapter.lora.alpha` (0 when the file has none).
    pub fn alpha(&self) -> f32 {
        self.alpha
    }

    /// An activated LoRA's invocation sequence: the adapter acts only from the last place this
    /// sequence starts in a prompt (empty for an ordinary adapter, which acts everywhere).
    pub fn invocation_tokens(&self) -> &[u32] {
        &self.invocation
    }

    /// Whether it is an activated LoRA (aLoRA): it has an invocation sequence.
    pub fn is_activated(&self) -> bool {
        !self.invocation.is_empty()
    }

    /// The base weights it adapts.
    pub fn weights(&self) -> impl Iterator<Item = &str> {
        self.pairs.keys().map(String::as_str)
    }

    /// Checks the adapter against `base` as llama.cpp does: the same architecture, every
    /// adapted weight in the model, `A` as wide as the weight's rows and `B` as tall as its
    /// columns (the embedding table's pair the other way round), `A` and `B` of one rank.
    ///
    /// # Errors
    /// The first thing that does not fit, named.
    pub fn check(&self, base: &GgufModel) -> Result<(), LoraError> {
        let mismatch = |reason: String| LoraError::Mismatch {
            path: self.path.clone(),
            reason,
        };
        let arch = base
            .metadata()
            .get_str("general.architecture")
            .unwrap_or_default()
            .to_string();
        if arch != self.arch {
            return Err(mismatch(format!(
                "it is for {:?}, the model is {arch:?}",
                self.arch
            )));
        }
        if let Some(vocab) = base
            .tensor_info("token_embd.weight")
            .and_then(|t| t.dims().get(1).copied())
        {
            if let Some(&bad) = self.invocation.iter().find(|&&t| u64::from(t) >= vocab) {
                return Err(mismatch(format!(
                    "its invocation sequence holds token {bad}, the model has {vocab} tokens"
                )));
            }
        }
        for (name, p) in &self.pairs {
            let info = base.tensor_info(name).ok_or_else(|| {
                mismatch(format!(
                    "{name} is not a tensor of the model (another base model?)"
                ))
            })?;
            let w = info.dims();
            let (w0, w1) = (w.first().copied(), w.get(1).copied().unwrap_or(1));
            let (a, b) = (&p.a_dims, &p.b_dims);
            // Expert weights ([k, m, n_expert]) take one pair per expert; other weights one.
            let experts = |d: &[u64]| d.get(2).copied();
            let w_experts = if w.len() == 3 { experts(w) } else { None };
            if experts(a) != w_experts || experts(b) != w_experts {
                return Err(mismatch(format!(
                    "{name} is {w:?}, its lora_a {a:?} and lora_b {b:?} do not fit it"
                )));
            }
            if name.ends_with("token_embd.weight") {
                // The table's rows are picked by token: A is [rank, n_vocab], B [rank, width].
                if w0 != Some(b[1]) || w1 != a[1] || a[0] != b[0] {
                    return Err(mismatch(format!(
                        "{name} is {w:?}, its lora_a {a:?} and lora_b {b:?} do not fit it"
                    )));
                }
            } else {
                if w0 != Some(a[0]) || w1 != b[1] {
                    return Err(mismatch(format!(
                        "{name} is {w:?}, its lora_a {a:?} and lora_b {b:?} do not fit it"
                    )));
                }
                if a[1] != b[0] {
                    return Err(mismatch(format!(
                        "{name}: lora_a {a:?} is not transposed to lora_b {b:?} (adapters of \
                         llama.cpp's old finetune example are not supported)"
                    )));
                }
            }
        }
        Ok(())
    }

    /// A tensor of the adapter file by its name there, or one a fused low-rank term reads
    /// (`{name}#lr`, `{name}#T`: see `kestrel_graph::low_rank_names`), made once and shared.
    pub fn tensor(&self, name: &str) -> Option<Tensor> {
        let plain = |n: &str| weight_tensor(&self.file, n);
        let mut cache = self
            .derived
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(t) = cache.get(name) {
            return Some(t.clone());
        }
        match kestrel_graph::derived_weight(name, &plain) {
            Some(made) => {
                let t = made.ok()?;
                cache.insert(name.to_string(), t.clone());
                Some(t)
            }
            None => plain(name),
        }
    }

    /// A tensor's type in the file (F32 when it cannot be said).
    fn dtype_of(&self, name: &str) -> kestrel_tensor::DType {
        self.file
            .tensor_info(name)
            .and_then(|t| kestrel_tensor::DType::try_from(t.ggml_type()).ok())
            .unwrap_or(kestrel_tensor::DType::F32)
    }

    /// The factor of a product of `rank` at user scale `scale`: `scale · alpha / rank`, or
    /// `scale` when the adapter has no alpha (llama.cpp's `get_scale`).
    pub(crate) fn factor_for(&self, rank: usize, scale: f32) -> f32 {
        if self.alpha != 0.0 {
            scale * self.alpha / rank as f32
        } else {
            scale
        }
    }

    fn factor(&self, p: &Pair, scale: f32) -> f32 {
        self.factor_for(p.b_dims[0] as usize, scale)
    }

    /// The `lora_a` and `lora_b` tensor names and the rank of base weight `name`'s pair.
    pub(crate) fn pair_of(&self, name: &str) -> Option<(&str, &str, usize)> {
        let p = self.pairs.get(name)?;
        Some((&p.a, &p.b, p.b_dims[0] as usize))
    }
}

/// The adapter tensors of [`apply_adapters`]'s graph are named `lora{k}:{name in file k}`;
/// this finds any weight of that graph: the adapters' by that prefix, the model's otherwise.
pub fn adapted_weight(
    model: &GgufModel,
    adapters: &[(Arc<LoraAdapter>, f32)],
    name: &str,
) -> Option<Tensor> {
    if let Some(rest) = name.strip_prefix("lora") {
        if let Some((k, tensor)) = rest.split_once(':') {
            if let Ok(k) = k.parse::<usize>() {
                return adapters.get(k)?.0.tensor(tensor);
            }
        }
    }
    weight_tensor(model, name)
}

/// `graph` with every adapter of `adapters` (each with its user scale) added to the matmuls,
/// expert projections and the token embedding whose weights it adapts; the graph's weights are then found with
/// [`adapted_weight`]. Adapters are applied in order, each as its own term (not merged):
/// with `fused`, a matmul's term is one low-rank node (the CPU engine's fast path); without,
/// four plain nodes every engine runs (the CUDA plan).
///
/// # Errors
/// An adapted weight the graph uses only in ops kestrel does not adapt (per-head matmuls), or
/// a pair whose dims do not fit.
pub fn apply_adapters(
    graph: &Graph,
    adapters: &[(Arc<LoraAdapter>, f32)],
    fused: bool,
) -> Result<Graph, LoraError> {
    if adapters.is_empty() {
        return Ok(graph.clone());
    }
    let pairs = |name: &str| -> Vec<LowRank> {
        adapters
            .iter()
            .enumerate()
            .filter_map(|(k, (ad, scale))| {
                let p = ad.pairs.get(name)?;
                Some(LowRank {
                    a: (format!("lora{k}:{}", p.a), p.a_dims.clone()),
                    b: (format!("lora{k}:{}", p.b), p.b_dims.clone()),
                    scale: ad.factor(p, *scale),
                    adapter: k,
                    alpha: ad.alpha,
                    types: (ad.dtype_of(&p.a), ad.dtype_of(&p.b)),
                })
            })
            .collect()
    };
    // A tied output reads the embedding table as a matmul weight; its pair has the table's
    // layout, which no matmul can take (llama.cpp aborts there).
    let tied = graph.nodes().iter().any(|n| match &n.op {
        kestrel_graph::Op::MatMul { weight } => {
            graph.weights()[*weight].name.ends_with("token_embd.weight")
        }
        _ => false,
    });
    for (ad, _) in adapters {
        if tied && ad.pairs.keys().any(|w| w.ends_with("token_embd.weight")) {
            return Err(LoraError::Mismatch {
                path: ad.path.clone(),
                reason: "it adapts token_embd.weight, which this model also uses as its tied \
                         output matrix; such adapters are not supported"
                    .into(),
            });
        }
    }
    let (g, applied) = graph.with_low_rank(&pairs, fused)?;
    for (ad, _) in adapters {
        for w in ad.pairs.keys().filter(|w| !applied.contains(*w)) {
            // A weight of the model the graph does not read at all (an unused output head) is
            // left as llama.cpp leaves it; one it reads elsewhere cannot be adapted here.
            if graph.weights().iter().any(|r| &r.name == w) {
                return Err(LoraError::Unapplied {
                    path: ad.path.clone(),
                    weight: w.clone(),
                });
            }
        }
    }
    Ok(g)
}
