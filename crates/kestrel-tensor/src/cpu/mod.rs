//! CPU kernels over f32 slices and raw weight bytes. Each op checks its sizes and returns a
//! [`TensorError`](crate::TensorError) instead of panicking, writes into caller-provided buffers
//! (no heap allocation per call), and runs its parallel loops in the current rayon pool (the
//! [`CpuEngine`](crate::CpuEngine) installs its own). Every op is tested against a plain f64
//! reference; the tolerances are in each function's docs.

#[macro_use]
mod simd_table;
#[macro_use]
mod q8_family_drivers;

#[cfg(target_arch = "aarch64")]
pub(crate) mod aarch64;
pub(crate) mod block;
pub mod dispatch;
pub mod isa;
pub(crate) mod kernel_table;
#[cfg(test)]
mod kernel_tests;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

pub mod attention;
pub mod convert;
pub mod elementwise;
pub mod get_rows;
pub mod low_rank;
pub mod matmul;
pub mod norm;
mod out_ptr;
pub mod packed;
mod prefetch;
pub mod q8;
mod q8_block;
pub(crate) mod qdot;
pub mod rope;
mod scratch;
pub mod softmax;
pub mod ssm;

#[cfg(test)]
pub(crate) mod testutil;

pub use attention::{
    apply_attention_sinks, attention, attention_latent, attention_paged, attention_paged_batch,
    visible_keys, AttentionParams, KvRows, KvSlice, LatentAttentionParams, PagedSeq,
};
pub use block::{dot, vec_dot};
pub use convert::{bf16_to_f32_slice, f16_to_f32, f32_to_bf16_slice, f32_to_f16, round_to};
pub use elementwise::{
    add, add_assign, argmax, erf, geglu, gelu, gelu_erf, gelu_erf_f32, gelu_f32, mul, mul_assign,
    scale, silu, silu_f32, swiglu,
};
pub use get_rows::get_rows;
pub use low_rank::{low_rank_down, low_rank_up};
pub use matmul::{
    matmul, matmul_dequantized, matmul_segmented, matmul_with_scratch, matvec, MatmulScratch,
};
pub use norm::{layer_norm, rms_norm, rms_norm_inplace};
pub use packed::{matmul_packed, PackedLayout, PackedWeight};
pub use rope::{
    rope, rope_with, rope_yarn_corr_dims, MropeSections, RopeCache, RopeMode, RopeParams,
};
pub use softmax::{softmax, softmax_row, SoftmaxParams};
pub use ssm::{softplus, ssm_conv, ssm_scan, SsmScanParams};
