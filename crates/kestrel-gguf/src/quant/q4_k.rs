//! Q4_K: super-blocks of 256 values in 8 groups of 32, each group with a 6-bit scale and a
//! 6-bit min (scaled by the f16 `d` and `dmin`) and 4-bit quants, `value = d*sc*q - dmin*m`
//! (ggml's `block_q4_K`, `dequantize_row_q4_K`, `quantize_row_q4_K_ref`).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::common::{
    self, get_scale_min_k4, make_qkx2_quants, nearest_int, pack_scale_min_k4, Qkx2Params,
    QuantBlock, K_SCALE_SIZE, QK_K,
};
use super::QuantError;
use crate::GgmlType;

/// One Q4_K super-block: ggml's `block_q4_K`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ4K {
    /// Super-block scale of the group scales.
    pub d: f16,
    /// Super-block scale of the group mins.
    pub dmin: f16,
    /// 8 six-bit scales and 8 six-bit mins; read them with [`get_scale_min_k4`].
    pub scales: [u8; K_SCALE_SIZE],
    /// 4-bit quants: byte `32*p + l` holds value `64*p + l` (low nibble) and `64*p + 32 + l`.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);

impl QuantBlock for BlockQ4K {
    const TYPE: GgmlType = GgmlType::Q4K;
    const BLOCK_SIZE: usize = QK_K;
}

/// Dequantizes one super-block (ggml's `dequantize_row_q4_K` body).
pub fn dequantize_block(b: &BlockQ4K, y: &mut [f32; QK_K]) {
    let d = b.d.to_f32();
    let min = b.dmin.to_f32();
    for p in 0..QK_K / 64 {
        let q = &b.qs[32 * p..32 * p + 32];
        let (sc, m) = get_scale_min_k4(2 * p, &b.scales);
        let d1 = d * sc as f32;
        let m1 = min * m as f32;
        let (sc, m) = get_scale_min_k4(2 * p + 1, &b.scales);
        let d2 = d * sc as f32;
        let m2 = min * m as f32;
        let y = &mut y[64 * p..64 * p + 64];
        for l in 0..32 {
            y[l] = d1 * (q[l] & 0xf) as f32 - m1;
            y[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
        }
    }
}

/// Fits 8 groups of 32 with `make_qkx2_quants` (weights `sqrt(mean x^2) + |x|`) and returns the
/// packed 6-bit scales and mins, `d` and `dmin`: the first half of ggml's
/// `quantize_row_q4_K_ref` / `quantize_row_q5_K_ref`.
pub(crate) fn fit_scales_mins(
    x: &[f32; QK_K],
    params: &Qkx2Params,
    l: &mut [u8; QK_K],
) -> ([u8; K_SCALE_SIZE], f16, f16) {
    let mut l_aux = [0u8; 32];
    let mut weights = [0f32; 32];
    let mut mins = [0f32; QK_K / 32];
    let mut scales = [0f32; QK_K / 32];
    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    for j in 0..QK_K / 32 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let (scale, min) = make_qkx2_quants(
            params,
            xs,
            &weights,
            &mut l[32 * j..32 * j + 32],
            &mut l_aux,
        );
        scales[j] = scale;
        mins[j] = min;
        if scale > max_scale {
            max_scale = scale;
        }
        if min > max_min {
            max_min = min;
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut ls = [0u8; 8];
    let mut lm = [0u8; 8];
    for j in 0..QK_K / 32 {
        ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    (
        pack_scale_min_k4(&ls, &lm),
        f16::from_f32(max_scale / 63.0),
        f16::from_f32(max_min / 63.0),
    )
}

/// Requantizes every value against the stored (rounded) scales and mins: the second half of
/// ggml's `quantize_row_q4_K_ref` / `quantize_row_q5_K_ref`. Groups whose scale is zero keep
/// the levels from the fit.
pub(crate) fn requantize(
    x: &[f32; QK_K],
    scales: &[u8; K_SCALE_SIZE],
    d: f16,
    dmin: f16,
    nmax: i32,
    l: &mut [u8; QK_K],
) {
    for j in 0..QK_K / 32 {
        let (sc, m) = get_scale_min_k4(j, scales);
        let dj = d.to_f32() * sc as f32;
        if dj == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * m as f32;
        for ii in 0..32 {
            let q = nearest_int((x[32 * j + ii] + dm) / dj).clamp(0, nmax);
            l[32 * j + ii] = q as u8;
        }
    }
}

/// Quantizes one super-block (ggml's `quantize_row_q4_K_ref` body).
pub fn quantize_block(x: &[f32; QK_K]) -> BlockQ4K {
    let params = Qkx2Params {
        nmax: 15,
        rmin: -1.0,
        rdelta: 0.1,
        nstep: 20,
        use_mad: false,
    };
    let mut l = [0u8; QK_K];
    let (scales, d, dmin) = fit_scales_mins(x, &params, &mut l);
    requantize(x, &scales, d, dmin, 15, &mut l);
    let mut qs = [0u8; QK_K / 2];
    for p in 0..QK_K / 64 {
        for i in 0..32 {
            qs[32 * p + i] = (l[64 * p + i] & 0xf) | ((l[64 * p + i + 32] & 0xf) << 4);
        }
    }
    BlockQ4K {
        d,
        dmin,
        scales,
        qs,
    }
}

/// Dequantizes `blocks` into `out`, which must hold exactly `256 * blocks.len()` values.
pub fn dequantize_blocks(blocks: &[BlockQ4K], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_blocks(blocks, out, dequantize_block)
}

/// Quantizes `src` into `out`, which must hold exactly `src.len() / 256` blocks.
pub fn quantize_row(src: &[f32], out: &mut [BlockQ4K]) -> Result<(), QuantError> {
    common::quantize_blocks(src, out, quantize_block)
}

pub(crate) fn dequantize_bytes(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block)
}

pub(crate) fn quantize_bytes(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    common::quantize_bytes(src, out, quantize_block)
}
