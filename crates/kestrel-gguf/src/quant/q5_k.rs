//! Q5_K: super-blocks of 256 values in 8 groups of 32, each group with a 6-bit scale and a
//! 6-bit min (scaled by the f16 `d` and `dmin`), 4 low bits per value in `qs` and a fifth bit
//! in `qh`, `value = d*sc*q - dmin*m` (ggml's `block_q5_K`, `dequantize_row_q5_K`,
//! `quantize_row_q5_K_ref`).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::common::{self, get_scale_min_k4, Qkx2Params, QuantBlock, K_SCALE_SIZE, QK_K};
use super::q4_k::{fit_scales_mins, requantize};
use super::QuantError;
use crate::GgmlType;

/// One Q5_K super-block: ggml's `block_q5_K`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ5K {
    /// Super-block scale of the group scales.
    pub d: f16,
    /// Super-block scale of the group mins.
    pub dmin: f16,
    /// 8 six-bit scales and 8 six-bit mins; read them with [`get_scale_min_k4`].
    pub scales: [u8; K_SCALE_SIZE],
    /// Fifth bits: bit `2p` of byte `l` belongs to value `64*p + l`, bit `2p + 1` to
    /// value `64*p + 32 + l`.
    pub qh: [u8; QK_K / 8],
    /// Low 4 bits, packed as in Q4_K.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);

impl QuantBlock for BlockQ5K {
    const TYPE: GgmlType = GgmlType::Q5K;
    const BLOCK_SIZE: usize = QK_K;
}

/// Dequantizes one super-block (ggml's `dequantize_row_q5_K` body).
pub fn dequantize_block(b: &BlockQ5K, y: &mut [f32; QK_K]) {
    let d = b.d.to_f32();
    let min = b.dmin.to_f32();
    let qh = &b.qh;
    let mut u1: u8 = 1;
    let mut u2: u8 = 2;
    for p in 0..QK_K / 64 {
        let ql = &b.qs[32 * p..32 * p + 32];
        let (sc, m) = get_scale_min_k4(2 * p, &b.scales);
        let d1 = d * sc as f32;
        let m1 = min * m as f32;
        let (sc, m) = get_scale_min_k4(2 * p + 1, &b.scales);
        let d2 = d * sc as f32;
        let m2 = min * m as f32;
        let y = &mut y[64 * p..64 * p + 64];
        for l in 0..32 {
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            y[l] = d1 * ((ql[l] & 0xf) + h1) as f32 - m1;
            y[l + 32] = d2 * ((ql[l] >> 4) + h2) as f32 - m2;
        }
        u1 = u1.wrapping_shl(2);
        u2 = u2.wrapping_shl(2);
    }
}

/// Quantizes one super-block (ggml's `quantize_row_q5_K_ref` body).
pub fn quantize_block(x: &[f32; QK_K]) -> BlockQ5K {
    let params = Qkx2Params {
        nmax: 31,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: false,
    };
    let mut l = [0u8; QK_K];
    let (scales, d, dmin) = fit_scales_mins(x, &params, &mut l);
    requantize(x, &scales, d, dmin, 31, &mut l);

    let (qh, qs) = pack(&l);
    BlockQ5K {
        d,
        dmin,
        scales,
        qh,
        qs,
    }
}

/// The 5-bit levels of a super-block as Q5_K stores them: the fifth bits in `qh` (two bit
/// planes per 64 values), the low nibbles in `qs`.
pub(crate) fn pack(l: &[u8; QK_K]) -> ([u8; QK_K / 8], [u8; QK_K / 2]) {
    let mut qh = [0u8; QK_K / 8];
    let mut qs = [0u8; QK_K / 2];
    let mut m1: u8 = 1;
    let mut m2: u8 = 2;
    for p in 0..QK_K / 64 {
        for j in 0..32 {
            let mut l1 = l[64 * p + j];
            if l1 > 15 {
                l1 -= 16;
                qh[j] |= m1;
            }
            let mut l2 = l[64 * p + j + 32];
            if l2 > 15 {
                l2 -= 16;
                qh[j] |= m2;
            }
            qs[32 * p + j] = (l1 & 0xf) | ((l2 & 0xf) << 4);
        }
        m1 = m1.wrapping_shl(2);
        m2 = m2.wrapping_shl(2);
    }
    (qh, qs)
}

/// Dequantizes `blocks` into `out`, which must hold exactly `256 * blocks.len()` values.
pub fn dequantize_blocks(blocks: &[BlockQ5K], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_blocks(blocks, out, dequantize_block)
}

/// Quantizes `src` into `out`, which must hold exactly `src.len() / 256` blocks.
pub fn quantize_row(src: &[f32], out: &mut [BlockQ5K]) -> Result<(), QuantError> {
    common::quantize_blocks(src, out, quantize_block)
}

pub(crate) fn dequantize_bytes(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block)
}

pub(crate) fn quantize_bytes(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    common::quantize_bytes(src, out, quantize_block)
}
