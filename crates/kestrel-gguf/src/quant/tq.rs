//! The ternary types (BitNet b1.58 and TriLM files): super-blocks of 256 values in `{-1, 0, 1}`
//! times one f16 scale. TQ1_0 packs 5 trits per byte as a base-3 fraction (`q · 3ⁿ`, then the
//! top trit is `(q · 3) >> 8`) and the last 4 per byte in `qh`; TQ2_0 stores 2 bits per value
//! (`q - 1`, so the code 3 gives 2 as ggml reads it). ggml's `block_tq1_0`, `block_tq2_0`,
//! `dequantize_row_tq1_0`, `dequantize_row_tq2_0`, and the reference quantizers
//! `quantize_row_tq1_0_ref`, `quantize_row_tq2_0_ref` (scale: the block's largest magnitude;
//! each value rounded to -1, 0 or 1 of it).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::common::{self, QuantBlock, QK_K};
use super::QuantError;
use crate::GgmlType;

/// Bytes of 5 trits in a TQ1_0 block.
const TQ1_QS: usize = (QK_K - 4 * QK_K / 64) / 5;

/// One TQ1_0 block: ggml's `block_tq1_0` (1.6875 bits per value).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockTQ1_0 {
    /// 5 trits per byte: values `0..160` (5 rows of 32 bytes), then `160..240` (5 rows of 16).
    pub qs: [u8; TQ1_QS],
    /// 4 trits per byte: values `240..256`.
    pub qh: [u8; QK_K / 64],
    /// Scale.
    pub d: f16,
}

const _: () = assert!(std::mem::size_of::<BlockTQ1_0>() == 54);

impl QuantBlock for BlockTQ1_0 {
    const TYPE: GgmlType = GgmlType::TQ1_0;
    const BLOCK_SIZE: usize = QK_K;
}

/// One TQ2_0 block: ggml's `block_tq2_0` (2.0625 bits per value).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockTQ2_0 {
    /// 2 bits per value: byte `j + m` of each 32-byte run holds values `4j + 32l + m` at bits
    /// `2l`.
    pub qs: [u8; QK_K / 4],
    /// Scale.
    pub d: f16,
}

const _: () = assert!(std::mem::size_of::<BlockTQ2_0>() == 66);

impl QuantBlock for BlockTQ2_0 {
    const TYPE: GgmlType = GgmlType::TQ2_0;
    const BLOCK_SIZE: usize = QK_K;
}

/// The `n`-th trit (0, 1 or 2) of a base-3 byte: `((q · 3ⁿ mod 256) · 3) >> 8`.
#[inline]
pub fn trit(q: u8, n: usize) -> i32 {
    const POW3: [u8; 6] = [1, 3, 9, 27, 81, 243];
    let q = q.wrapping_mul(POW3[n]);
    ((q as u16 * 3) >> 8) as i32
}

/// Each value of a TQ1_0 block as `trit - 1`, in ggml's order (shared with the dot product).
pub fn tq1_0_values(b: &BlockTQ1_0, mut f: impl FnMut(usize, i32)) {
    let mut i = 0;
    let full = TQ1_QS - TQ1_QS % 32;
    for (start, width) in [(0usize, 32usize), (full, 16)] {
        let end = if width == 32 { full } else { TQ1_QS };
        for j in (start..end).step_by(width) {
            for n in 0..5 {
                for m in 0..width {
                    f(i, trit(b.qs[j + m], n) - 1);
                    i += 1;
                }
            }
        }
    }
    for n in 0..4 {
        for &q in &b.qh {
            f(i, trit(q, n) - 1);
            i += 1;
        }
    }
}

/// Dequantizes one TQ1_0 block (ggml's `dequantize_row_tq1_0` body).
pub fn dequantize_block_tq1_0(b: &BlockTQ1_0, y: &mut [f32; QK_K]) {
    let d = b.d.to_f32();
    tq1_0_values(b, |i, v| y[i] = v as f32 * d);
}

/// Dequantizes one TQ2_0 block (ggml's `dequantize_row_tq2_0` body).
pub fn dequantize_block_tq2_0(b: &BlockTQ2_0, y: &mut [f32; QK_K]) {
    let d = b.d.to_f32();
    let mut i = 0;
    for j in (0..QK_K / 4).step_by(32) {
        for l in 0..4 {
            for m in 0..32 {
                let q = ((b.qs[j + m] >> (l * 2)) & 3) as i32;
                y[i] = (q - 1) as f32 * d;
                i += 1;
            }
        }
    }
}

/// The block's scale (its largest magnitude) and inverse, as ggml's TQ quantizers take them.
fn amax_scale(x: &[f32; QK_K]) -> (f32, f32) {
    let d = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    (d, if d != 0.0 { 1.0 / d } else { 0.0 })
}

/// `lroundf(v * id) + 1`: -1, 0, 1 become 0, 1, 2 (round half away from zero).
#[inline]
fn ternary(v: f32, id: f32) -> u8 {
    ((v * id).round() as i32 + 1) as u8
}

/// Five (or, shifted, four) trits into one byte: `ceil(q · 256 / 243)` of the base-3 number.
#[inline]
fn pack_trits(q: u8) -> u8 {
    (q as u16 * 256).div_ceil(243) as u8
}

/// Quantizes one block (ggml's `quantize_row_tq1_0_ref` body).
pub fn quantize_block_tq1_0(x: &[f32; QK_K]) -> BlockTQ1_0 {
    let (d, id) = amax_scale(x);
    let mut y = BlockTQ1_0::zeroed();
    y.d = f16::from_f32(d);
    let full = TQ1_QS - TQ1_QS % 32;
    let mut base = 0;
    for (start, end, width) in [(0usize, full, 32usize), (full, TQ1_QS, 16)] {
        for j in (start..end).step_by(width) {
            for m in 0..width {
                let mut q = 0u8;
                for n in 0..5 {
                    q = q
                        .wrapping_mul(3)
                        .wrapping_add(ternary(x[base + m + n * width], id));
                }
                y.qs[j + m] = pack_trits(q);
            }
            base += 5 * width;
        }
    }
    let nh = y.qh.len();
    for j in 0..nh {
        let mut q = 0u8;
        for m in 0..4 {
            q = q
                .wrapping_mul(3)
                .wrapping_add(ternary(x[base + j + m * nh], id));
        }
        // The first value to the most significant trit.
        y.qh[j] = pack_trits(q.wrapping_mul(3));
    }
    y
}

/// Quantizes one block (ggml's `quantize_row_tq2_0_ref` body).
pub fn quantize_block_tq2_0(x: &[f32; QK_K]) -> BlockTQ2_0 {
    let (d, id) = amax_scale(x);
    let mut y = BlockTQ2_0::zeroed();
    y.d = f16::from_f32(d);
    for j in (0..QK_K / 4).step_by(32) {
        let base = j * 4;
        for m in 0..32 {
            let mut q = 0u8;
            for n in 0..4 {
                q = q.wrapping_add((ternary(x[base + m + n * 32], id) & 3) << (2 * n));
            }
            y.qs[j + m] = q;
        }
    }
    y
}

pub(crate) fn quantize_bytes_tq1_0(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    common::quantize_bytes(src, out, quantize_block_tq1_0)
}

pub(crate) fn quantize_bytes_tq2_0(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    common::quantize_bytes(src, out, quantize_block_tq2_0)
}

/// Dequantizes TQ1_0 `blocks` into `out` (exactly `256 * blocks.len()` values).
pub fn dequantize_blocks_tq1_0(blocks: &[BlockTQ1_0], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_blocks(blocks, out, dequantize_block_tq1_0)
}

/// Dequantizes TQ2_0 `blocks` into `out` (exactly `256 * blocks.len()` values).
pub fn dequantize_blocks_tq2_0(blocks: &[BlockTQ2_0], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_blocks(blocks, out, dequantize_block_tq2_0)
}

pub(crate) fn dequantize_bytes_tq1_0(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block_tq1_0)
}

pub(crate) fn dequantize_bytes_tq2_0(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block_tq2_0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte's five trits read back as its base-3 digits, most significant first, for the
    /// bytes ggml's quantizer writes (`ceil(v · 256 / 243)` of a 5-digit number `v`).
    #[test]
    fn trits_are_base_3_digits() {
        for v in 0u32..243 {
            let q = ((v * 256).div_ceil(243)) as u8;
            let digits: Vec<i32> = (0..5).map(|n| trit(q, n)).collect();
            let back = digits.iter().fold(0u32, |a, &d| a * 3 + d as u32);
            assert_eq!(back, v, "byte {q}: {digits:?}");
        }
    }

    /// Ternary input comes back exactly (the scale is its largest magnitude, 1), through both
    /// types.
    #[test]
    fn ternary_values_round_trip() {
        let mut x = [0f32; QK_K];
        for (i, v) in x.iter_mut().enumerate() {
            *v = ((i * 7 + i / 5) % 3) as f32 - 1.0;
        }
        let mut y = [0f32; QK_K];
        dequantize_block_tq1_0(&quantize_block_tq1_0(&x), &mut y);
        assert_eq!(y, x);
        dequantize_block_tq2_0(&quantize_block_tq2_0(&x), &mut y);
        assert_eq!(y, x);
    }

    #[test]
    fn tq2_0_reads_two_bits_per_value() {
        let mut b = BlockTQ2_0 {
            qs: [0; 64],
            d: f16::from_f32(0.5),
        };
        // Value 32·l + m of the first run sits at bits 2l of byte m.
        b.qs[3] = 0b10_01_00_11;
        let mut y = [0f32; QK_K];
        dequantize_block_tq2_0(&b, &mut y);
        assert_eq!([y[3], y[35], y[67], y[99]], [1.0, -0.5, 0.0, 0.5]);
        assert_eq!(y[0], -0.5);
    }
}
