//! The CUDA engine: kernels from `kernels/*.cu`, compiled to PTX by `cargo xtask kernels` and
//! embedded here (`ptx/`, committed), run through cudarc with dynamic loading, so building
//! needs no CUDA toolkit and a machine without a driver gets an error, not a link failure.
//!
//! - [`CudaDevice`]: one GPU: context, stream, every module loaded once, a scratch buffer for
//!   quantized activations; ops over [`DeviceTensor`]s (weights uploaded still quantized).
//! - [`device_count`] and [`probe`]: whether a driver and a GPU are there (for `--device auto`).
//!
//! Without the `cuda` feature the same API exists (a stub) and every entry point returns
//! [`CudaError::NotBuilt`], so callers need no `cfg`.
//!
//! Where each op lives: `engine.rs` (device, tensors, scratch), `matvec.rs` (1-8 activation
//! rows: `dp4a` matvecs on Q8_1 activations as ggml-cuda's MMVQ, float matvecs; 9-64: the
//! tensor-core matvec), `gemm.rs` (more rows: the weight dequantized to f16 and multiplied by
//! cuBLAS), `fused.rs` (add + RMS norm, norms and gated activations with Q8_1 output, matvec
//! epilogue adds, q/k/v in one launch), `ops.rs` (row and elementwise ops, argmax),
//! `rope_kv.rs` (RoPE, the KV append and both fused), `bandwidth.rs` (the copy bandwidth decode is held against), `attention.rs` (decode, split and tiled
//! attention over f16 or q8_0 caches, through a `KvTable` for batched and paged steps; its
//! output optionally as Q8_1), `attention_dims.rs` (latent attention and values of their own
//! head size), `kv_table.rs` (per-token and paged caches), `experts.rs`/`moe.rs`/`routing.rs`
//! (mixture-of-experts), `ssm.rs` (state-space layers), `topk.rs` (device top-k), `graph.rs`
//! (CUDA graph capture and replay), `launch.rs` (the launch builder every op uses, and
//! programmatic dependent launch).

#[cfg(feature = "cuda")]
mod attention;
#[cfg(feature = "cuda")]
mod attention_dims;
#[cfg(feature = "cuda")]
mod bandwidth;
#[cfg(feature = "cuda")]
mod blas;
#[cfg(feature = "cuda")]
mod engine;
mod error;
#[cfg(feature = "cuda")]
mod experts;
#[cfg(feature = "cuda")]
mod fused;
#[cfg(feature = "cuda")]
mod gemm;
#[cfg(feature = "cuda")]
mod graph;
#[cfg(feature = "cuda")]
mod host;
#[cfg(feature = "cuda")]
mod kv_table;
#[cfg(feature = "cuda")]
mod launch;
#[cfg(feature = "cuda")]
mod matvec;
#[cfg(feature = "cuda")]
mod matvec_tail;
#[cfg(feature = "cuda")]
mod moe;
#[cfg(feature = "cuda")]
mod ops;
#[cfg(feature = "cuda")]
mod rope_kv;
mod routing;
#[cfg(feature = "cuda")]
mod ssm;
#[cfg(not(feature = "cuda"))]
mod stub;
#[cfg(feature = "cuda")]
mod topk;

pub use error::CudaError;
pub use routing::{RouteGating, RouteSpec, MAX_ROUTED_EXPERTS, MAX_ROUTED_USED};

#[cfg(feature = "cuda")]
pub use attention::MLA_MAX_HEAD_DIM;
#[cfg(feature = "cuda")]
pub use engine::{device_count, probe, CudaDevice, DeviceTensor, Q8Ticket};
#[cfg(feature = "cuda")]
pub use experts::{DeviceRoutes, ExpertTable};
#[cfg(feature = "cuda")]
pub use fused::Glu;
#[cfg(feature = "cuda")]
pub use graph::{DeviceEvent, DeviceGraph, DeviceIds};
#[cfg(feature = "cuda")]
pub use host::HostBuffer;
#[cfg(feature = "cuda")]
pub use kv_table::{KvPages, KvTable};
#[cfg(feature = "cuda")]
pub use matvec_tail::MAX_NORM_AFTER_ROW;
#[cfg(feature = "cuda")]
pub use ssm::MAX_SSM_STATE;
#[cfg(not(feature = "cuda"))]
pub use stub::{
    device_count, probe, CudaDevice, DeviceEvent, DeviceGraph, DeviceIds, DeviceRoutes,
    DeviceTensor, DeviceTopK, ExpertTable, Glu, HostBuffer, KvPages, KvTable, Q8Ticket,
    MAX_NORM_AFTER_ROW, MAX_SSM_STATE, MAX_TOP_K, MLA_MAX_HEAD_DIM,
};
#[cfg(feature = "cuda")]
pub use topk::{DeviceTopK, MAX_TOP_K};

/// A one-input elementwise op ([`CudaDevice::unary_op`]).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Unary {
    /// `x · sigmoid(x)`.
    Silu,
    /// GELU, tanh form (ggml's constants).
    Gelu,
    /// `max(x, 0)²`.
    ReluSqr,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `x` clamped to `[-limit, limit]` (NaN stays NaN).
    Clamp(f32),
}

/// An RMS norm of each head before RoPE (`CudaDevice::rope_qk_append_ids`): its weight (or
/// none) and epsilon.
pub type HeadNorm<'a> = (Option<&'a DeviceTensor>, f32);

/// The RMS norm a one-row matvec runs on its product in the same launch
/// ([`CudaDevice::matmul_norm_reusing`]): `out = rms_norm(product) * weight`, or of the sum
/// after a [`Sandwich`].
#[derive(Debug)]
pub struct NormAfter<'a> {
    /// The norm's weight (none: 1) and epsilon.
    pub weight: Option<&'a DeviceTensor>,
    pub eps: f32,
    /// Where the normed row goes.
    pub out: &'a mut DeviceTensor,
    /// Whether `out` is also left as Q8_1 for the next matvec (rows a multiple of 32 long).
    pub quantize: bool,
    /// Gemma's post-norm and residual add between the product and the norm.
    pub sandwich: Option<Sandwich<'a>>,
}

/// A norm of a matvec's product and the residual add after it (Gemma's post-attention and
/// post-FFN norms): `normed = rms_norm(product) * weight`, `sum = residual + normed`.
#[derive(Debug)]
pub struct Sandwich<'a> {
    /// The post-norm's weight (none: 1) and epsilon.
    pub weight: Option<&'a DeviceTensor>,
    pub eps: f32,
    /// Its output.
    pub normed: &'a mut DeviceTensor,
    /// The residual stream, and where the sum goes.
    pub residual: &'a DeviceTensor,
    pub sum: &'a mut DeviceTensor,
}

/// Which kernel attention takes for a step of several query tokens (one-token steps always
/// take the CTA-per-(token, head) kernel).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
#[repr(u8)]
pub enum AttentionKernel {
    /// The tiled kernel from 8 tokens when its CTAs fill the device twice over, else the
    /// CTA-per-(token, head) kernel (`KESTREL_CUDA_ATTENTION` unset).
    #[default]
    Auto = 0,
    /// The tiled kernel from 8 tokens, however few CTAs (`KESTREL_CUDA_ATTENTION=tiled`).
    Tiled = 1,
    /// Always the CTA-per-(token, head) kernel (`KESTREL_CUDA_ATTENTION=per-token`).
    PerToken = 2,
}

impl AttentionKernel {
    /// The choice `KESTREL_CUDA_ATTENTION` names (`tiled`, `per-token`; else `Auto`).
    pub fn from_env() -> AttentionKernel {
        match std::env::var("KESTREL_CUDA_ATTENTION").as_deref() {
            Ok("tiled") => AttentionKernel::Tiled,
            Ok("per-token") => AttentionKernel::PerToken,
            _ => AttentionKernel::Auto,
        }
    }

    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn from_index(i: u8) -> AttentionKernel {
        match i {
            1 => AttentionKernel::Tiled,
            2 => AttentionKernel::PerToken,
            _ => AttentionKernel::Auto,
        }
    }
}

/// One compiled kernel module.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) struct PtxModule {
    /// The `kernels/` file stem.
    pub(crate) name: &'static str,
    /// PTX for compute_80 (Ampere and later).
    pub(crate) sm80: &'static str,
    /// PTX for compute_90 (Hopper).
    pub(crate) sm90: &'static str,
}

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
mod ptx_table;
#[cfg_attr(not(feature = "cuda"), allow(unused_imports))]
pub(crate) use ptx_table::MODULES;

/// A device-to-device copy's bandwidth ([`CudaDevice::copy_bandwidth`]).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct CopyBandwidth {
    /// Bytes each copy moved.
    pub bytes: usize,
    /// Bytes read plus bytes written a second.
    pub bytes_per_s: f64,
}

/// Matmuls timed back to back ([`CudaDevice::time_matmuls`]): one pass is one matmul by each
/// weight given, in order, replayed from a CUDA graph.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct MatmulTiming {
    /// Weight bytes one pass reads (each weight once).
    pub weight_bytes: u64,
    /// Matmuls one pass makes.
    pub matmuls: usize,
    /// Seconds a pass takes: the median repetition.
    pub seconds: f64,
}

impl MatmulTiming {
    /// Weight bytes read a second.
    pub fn bytes_per_s(&self) -> f64 {
        self.weight_bytes as f64 / self.seconds.max(1e-12)
    }
}

/// Weight-type pairs whose q/k/v projections run as one matvec launch although v's type
/// differs: (q's and k's type, v's type), as llama.cpp's `_M` quantizations mix them (Gemma 3
/// 270M Q4_K_M: Q5_0 q/k with Q8_0 v in half its layers; llama Q4_K_M: Q4_K with Q6_K). Each
/// row reduces as in its own type's matvec: the same bits as separate launches
/// (`mmvq_<a>_<b>_multi`, kernels/mmvq.cuh).
pub const MIXED_MULTI_TYPES: [(crate::DType, crate::DType); MIXED_MULTI.len()] = {
    let mut pairs = [(crate::DType::F32, crate::DType::F32); MIXED_MULTI.len()];
    let mut i = 0;
    while i < pairs.len() {
        pairs[i] = (MIXED_MULTI[i].0, MIXED_MULTI[i].1);
        i += 1;
    }
    pairs
};

/// The one table [`MIXED_MULTI_TYPES`] and the kernel names come from: (q's and k's type, v's
/// type, [the kernel, its prefetching twin]), so a pair cannot be fused without a kernel to run.
const MIXED_MULTI: [(crate::DType, crate::DType, [&str; 2]); 3] = [
    (
        crate::DType::Q5_0,
        crate::DType::Q8_0,
        ["mmvq_q5_0_q8_0_multi", "mmvq_q5_0_q8_0_multi_pf"],
    ),
    (
        crate::DType::Q4K,
        crate::DType::Q6K,
        ["mmvq_q4_K_q6_K_multi", "mmvq_q4_K_q6_K_multi_pf"],
    ),
    (
        crate::DType::Q5K,
        crate::DType::Q6K,
        ["mmvq_q5_K_q6_K_multi", "mmvq_q5_K_q6_K_multi_pf"],
    ),
];

/// Largest number of activation rows one matvec launch takes (the `mmvq_*_N` kernels).
pub const MAX_MATVEC_ROWS: usize = 8;

/// Largest number of activation rows the tensor-core matvec takes (`mmvq_wide_*`, from
/// [`MAX_MATVEC_ROWS`] + 1 rows): each row's outputs are the bits the matvec of that row alone
/// gives, so a batch of up to this many sequences decodes as each would alone.
pub const MAX_WIDE_ROWS: usize = 64;

/// Largest head the attention kernel takes (`MAX_HEAD_DIM` in attention.cuh).
pub const MAX_HEAD_DIM: usize = 256;

/// Most key ranges split decode attention takes (`SPLIT_MAX` in attention.cu):
/// [`CudaDevice::set_attention_splits`].
pub const MAX_ATTENTION_SPLITS: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attention_kernel_choices_survive_their_index() {
        for k in [
            AttentionKernel::Auto,
            AttentionKernel::Tiled,
            AttentionKernel::PerToken,
        ] {
            assert_eq!(AttentionKernel::from_index(k as u8), k);
        }
        assert_eq!(AttentionKernel::from_index(9), AttentionKernel::Auto);
    }

    #[test]
    fn every_module_has_ptx_for_both_targets() {
        assert!(!MODULES.is_empty());
        for m in MODULES {
            for (ptx, target) in [(m.sm80, ".target sm_80"), (m.sm90, ".target sm_90")] {
                assert!(ptx.contains(target), "{}: PTX lacks {target}", m.name);
                assert!(
                    ptx.contains(".visible .entry"),
                    "{}: PTX has no kernel",
                    m.name
                );
            }
        }
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn stub_says_cuda_is_not_built() {
        let e = CudaDevice::open(0)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("without the `cuda` feature"), "{e}");
        assert!(matches!(probe(), Err(CudaError::NotBuilt)));
    }
}
