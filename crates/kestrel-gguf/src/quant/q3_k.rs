//! Q3_K: super-blocks of 256 values in 16 groups of 16, each group with a 6-bit signed scale
//! (scaled by the f16 `d`), 2 low bits per value in `qs` and a high bit in `hmask`,
//! `value = d * (sc - 32) * (q - 4 * !high)` (ggml's `block_q3_K`, `dequantize_row_q3_K`,
//! `quantize_row_q3_K_ref`).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::common::{self, make_q3_quants, nearest_int, pack_2bit, QuantBlock, QK_K};
use super::QuantError;
use crate::GgmlType;

/// One Q3_K super-block: ggml's `block_q3_K`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ3K {
    /// High bits: bit `k` of byte `m` belongs to value `32*k + m`; a set bit means no `-4`.
    pub hmask: [u8; QK_K / 8],
    /// Low 2 bits, packed as in Q2_K.
    pub qs: [u8; QK_K / 4],
    /// 16 six-bit scales (offset by 32): low nibbles in bytes 0..8, high 2-bit pairs in 8..12.
    pub scales: [u8; 12],
    /// Super-block scale.
    pub d: f16,
}

const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110);

impl QuantBlock for BlockQ3K {
    const TYPE: GgmlType = GgmlType::Q3K;
    const BLOCK_SIZE: usize = QK_K;
}

/// The 16 scales of a block, unpacked to `0..64` (ggml's `kmask` shuffle in
/// `dequantize_row_q3_K`).
pub fn unpack_scales(scales: &[u8; 12]) -> [i8; 16] {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let a0 = u32::from_le_bytes([scales[0], scales[1], scales[2], scales[3]]);
    let a1 = u32::from_le_bytes([scales[4], scales[5], scales[6], scales[7]]);
    let tmp = u32::from_le_bytes([scales[8], scales[9], scales[10], scales[11]]);
    let aux = [
        (a0 & KMASK2) | ((tmp & KMASK1) << 4),
        (a1 & KMASK2) | (((tmp >> 2) & KMASK1) << 4),
        ((a0 >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4),
        ((a1 >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4),
    ];
    let mut out = [0i8; 16];
    for (k, a) in aux.iter().enumerate() {
        for (o, b) in out[4 * k..4 * k + 4].iter_mut().zip(a.to_le_bytes()) {
            *o = b as i8;
        }
    }
    out
}

/// Dequantizes one super-block (ggml's `dequantize_row_q3_K` body).
pub fn dequantize_block(b: &BlockQ3K, y: &mut [f32; QK_K]) {
    let d_all = b.d.to_f32();
    let scales = unpack_scales(&b.scales);
    let hm = &b.hmask;
    let mut m: u8 = 1;
    let mut is = 0;
    let mut yi = 0;
    for half in 0..2 {
        let q = &b.qs[32 * half..32 * half + 32];
        let mut shift = 0;
        for _ in 0..4 {
            for part in 0..2 {
                let dl = d_all * (scales[is] as i32 - 32) as f32;
                is += 1;
                for l in 16 * part..16 * part + 16 {
                    let low = ((q[l] >> shift) & 3) as i32;
                    let sub = if hm[l] & m != 0 { 0 } else { 4 };
                    y[yi] = dl * (low - sub) as f32;
                    yi += 1;
                }
            }
            shift += 2;
            m = m.wrapping_shl(1);
        }
    }
}

/// Quantizes one super-block (ggml's `quantize_row_q3_K_ref` body).
pub fn quantize_block(x: &[f32; QK_K]) -> BlockQ3K {
    let mut l = [0i8; QK_K];
    let mut scales = [0f32; QK_K / 16];

    let mut max_scale = 0.0f32;
    let mut amax = 0.0f32;
    for j in 0..QK_K / 16 {
        scales[j] = make_q3_quants(
            4,
            &x[16 * j..16 * j + 16],
            &mut l[16 * j..16 * j + 16],
            true,
        );
        let scale = scales[j].abs();
        if scale > amax {
            amax = scale;
            max_scale = scales[j];
        }
    }

    let mut out = BlockQ3K::zeroed();
    if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        for (j, &sc) in scales.iter().enumerate() {
            let li = nearest_int(iscale * sc) as i8;
            let li = (li.clamp(-32, 31) as i32 + 32) as u8;
            if j < 8 {
                out.scales[j] = li & 0xf;
            } else {
                out.scales[j - 8] |= (li & 0xf) << 4;
            }
            out.scales[j % 4 + 8] |= (li >> 4) << (2 * (j / 4));
        }
        out.d = f16::from_f32(1.0 / iscale);
    } else {
        out.d = f16::from_f32(0.0);
    }

    let dd = out.d.to_f32();
    for j in 0..QK_K / 16 {
        let sc = if j < 8 {
            out.scales[j] & 0xf
        } else {
            out.scales[j - 8] >> 4
        };
        let sc = (sc | (((out.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) as i32 - 32;
        let d = dd * sc as f32;
        if d == 0.0 {
            continue;
        }
        for ii in 0..16 {
            let q = nearest_int(x[16 * j + ii] / d).clamp(-4, 3);
            l[16 * j + ii] = (q + 4) as i8;
        }
    }

    let mut m = 0;
    let mut hm: u8 = 1;
    let mut low = [0u8; QK_K];
    for (lj, lo) in l.iter().zip(low.iter_mut()) {
        let mut v = *lj as u8;
        if v > 3 {
            out.hmask[m] |= hm;
            v -= 4;
        }
        *lo = v;
        m += 1;
        if m == QK_K / 8 {
            m = 0;
            hm = hm.wrapping_shl(1);
        }
    }
    out.qs = pack_2bit(&low);
    out
}

/// Dequantizes `blocks` into `out`, which must hold exactly `256 * blocks.len()` values.
pub fn dequantize_blocks(blocks: &[BlockQ3K], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_blocks(blocks, out, dequantize_block)
}

/// Quantizes `src` into `out`, which must hold exactly `src.len() / 256` blocks.
pub fn quantize_row(src: &[f32], out: &mut [BlockQ3K]) -> Result<(), QuantError> {
    common::quantize_blocks(src, out, quantize_block)
}

pub(crate) fn dequantize_bytes(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block)
}

pub(crate) fn quantize_bytes(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    common::quantize_bytes(src, out, quantize_block)
}
