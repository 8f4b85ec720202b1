//! The q8_1 activation block (ggml's `block_q8_1`), the one activation format kestrel adds to
//! `kestrel_gguf::quant`'s blocks: at the bottom of the CPU engine, so the per-ISA quantizers
//! and dot kernels read it without importing the quantizer that dispatches to them (`q8`).

use bytemuck::{Pod, Zeroable};
use half::f16;

/// Values per q8_0 / q8_1 block.
pub const QK8: usize = 32;

/// One q8_1 block: ggml's `block_q8_1` (the activation format dotted with Q4_1 and Q5_1).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ8_1 {
    /// Scale: `f16(amax / 127)`.
    pub d: f16,
    /// `f16(d * Σ qs)`, with the unrounded f32 `d`.
    pub s: f16,
    /// Quants.
    pub qs: [i8; QK8],
}

const _: () = assert!(std::mem::size_of::<BlockQ8_1>() == 36);
