//! Per-dtype block dequantizers for the CPU kernels: each weight dtype reads one block (32 values
//! for the float types) from raw little-endian bytes at any alignment into a caller-provided f32
//! buffer, with the scalar `dequantize_block` of `kestrel_gguf::quant`. Also the f32 `dot` and the
//! per-type `vec_dot` (the scalar twin that issue 5's SIMD kernels are tested against).

use half::{bf16, f16};
use kestrel_gguf::quant::{self, QuantBlock};

use crate::error::{Result, TensorError};
use crate::DType;

/// Largest chunk any [`BlockDequant`] produces (a K-quant super-block).
pub(crate) const MAX_BLOCK: usize = 256;

/// Reads one dtype's rows a block at a time.
pub(crate) trait BlockDequant {
    /// Elements per chunk: the quant block, or 32 for the float types.
    const N: usize;
    /// Bytes per chunk.
    const BYTES: usize;
    /// True for F32/F16/BF16, whose rows may end in a partial chunk.
    const FLOAT: bool;
    /// Dequantizes `bytes` (exactly `BYTES` long, or for float types a shorter whole number of
    /// elements) into `out` (as many elements).
    fn dequant(bytes: &[u8], out: &mut [f32]);
}

macro_rules! quant_kernel {
    ($name:ident, $block:ty, $f:path) => {
        pub(crate) struct $name;
        impl BlockDequant for $name {
            const N: usize = <$block as QuantBlock>::BLOCK_SIZE;
            const BYTES: usize = std::mem::size_of::<$block>();
            const FLOAT: bool = false;
            #[inline]
            fn dequant(bytes: &[u8], out: &mut [f32]) {
                let Ok(out) = <&mut [f32; <$block as QuantBlock>::BLOCK_SIZE]>::try_from(out)
                else {
                    debug_assert!(false, "dequant: output is not one block");
                    return;
                };
                match bytemuck::try_from_bytes::<$block>(bytes) {
                    Ok(b) => $f(b, out),
                    Err(_) => match bytemuck::try_pod_read_unaligned::<$block>(bytes) {
                        Ok(b) => $f(&b, out),
                        Err(_) => debug_assert!(false, "dequant: input is not one block"),
                    },
                }
            }
        }
    };
}

quant_kernel!(KQ4_0, quant::BlockQ4_0, quant::q4_0::dequantize_block);
quant_kernel!(KQ4_1, quant::BlockQ4_1, quant::q4_1::dequantize_block);
quant_kernel!(KQ5_0, quant::BlockQ5_0, quant::q5_0::dequantize_block);
quant_kernel!(KQ5_1, quant::BlockQ5_1, quant::q5_1::dequantize_block);
quant_kernel!(KQ8_0, quant::BlockQ8_0, quant::q8_0::dequantize_block);
quant_kernel!(KQ2K, quant::BlockQ2K, quant::q2_k::dequantize_block);
quant_kernel!(KQ3K, quant::BlockQ3K, quant::q3_k::dequantize_block);
quant_kernel!(KQ4K, quant::BlockQ4K, quant::q4_k::dequantize_block);
quant_kernel!(KQ5K, quant::BlockQ5K, quant::q5_k::dequantize_block);
quant_kernel!(KQ6K, quant::BlockQ6K, quant::q6_k::dequantize_block);
quant_kernel!(KQ8K, quant::BlockQ8K, quant::q8_k::dequantize_block);
quant_kernel!(KIQ4NL, quant::BlockIQ4NL, quant::iq4_nl::dequantize_block);
quant_kernel!(KIQ4XS, quant::BlockIQ4XS, quant::iq4_xs::dequantize_block);
quant_kernel!(KMXFP4, quant::BlockMXFP4, quant::mxfp4::dequantize_block);
quant_kernel!(KTQ1_0, quant::BlockTQ1_0, quant::tq::dequantize_block_tq1_0);
quant_kernel!(KTQ2_0, quant::BlockTQ2_0, quant::tq::dequantize_block_tq2_0);
quant_kernel!(
    KIQ2XXS,
    quant::BlockIQ2XXS,
    quant::iq2::dequantize_block_iq2_xxs
);
quant_kernel!(
    KIQ2XS,
    quant::BlockIQ2XS,
    quant::iq2::dequantize_block_iq2_xs
);
quant_kernel!(KIQ2S, quant::BlockIQ2S, quant::iq2::dequantize_block_iq2_s);
quant_kernel!(
    KIQ3XXS,
    quant::BlockIQ3XXS,
    quant::iq3::dequantize_block_iq3_xxs
);
quant_kernel!(KIQ3S, quant::BlockIQ3S, quant::iq3::dequantize_block_iq3_s);
quant_kernel!(KIQ1S, quant::BlockIQ1S, quant::iq1::dequantize_block_iq1_s);
quant_kernel!(KIQ1M, quant::BlockIQ1M, quant::iq1::dequantize_block_iq1_m);

/// F32 weights.
pub(crate) struct KF32;
impl BlockDequant for KF32 {
    const N: usize = 32;
    const BYTES: usize = 128;
    const FLOAT: bool = true;
    #[inline]
    fn dequant(bytes: &[u8], out: &mut [f32]) {
        for (y, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
            *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
    }
}

/// F16 weights.
pub(crate) struct KF16;
impl BlockDequant for KF16 {
    const N: usize = 32;
    const BYTES: usize = 64;
    const FLOAT: bool = true;
    #[inline]
    fn dequant(bytes: &[u8], out: &mut [f32]) {
        for (y, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
            *y = f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
        }
    }
}

/// BF16 weights.
pub(crate) struct KBF16;
impl BlockDequant for KBF16 {
    const N: usize = 32;
    const BYTES: usize = 64;
    const FLOAT: bool = true;
    #[inline]
    fn dequant(bytes: &[u8], out: &mut [f32]) {
        for (y, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
            *y = quant::float::bf16_to_f32(bf16::from_bits(u16::from_le_bytes([b[0], b[1]])));
        }
    }
}

/// Runs `$body` with the type alias `$K` bound to `$dtype`'s [`BlockDequant`].
macro_rules! dispatch {
    ($dtype:expr, $K:ident => $body:expr) => {{
        use $crate::cpu::block::*;
        match $dtype {
            DType::F32 => {
                type $K = KF32;
                $body
            }
            DType::F16 => {
                type $K = KF16;
                $body
            }
            DType::BF16 => {
                type $K = KBF16;
                $body
            }
            DType::Q4_0 => {
                type $K = KQ4_0;
                $body
            }
            DType::Q4_1 => {
                type $K = KQ4_1;
                $body
            }
            DType::Q5_0 => {
                type $K = KQ5_0;
                $body
            }
            DType::Q5_1 => {
                type $K = KQ5_1;
                $body
            }
            DType::Q8_0 => {
                type $K = KQ8_0;
                $body
            }
            DType::Q2K => {
                type $K = KQ2K;
                $body
            }
            DType::Q3K => {
                type $K = KQ3K;
                $body
            }
            DType::Q4K => {
                type $K = KQ4K;
                $body
            }
            DType::Q5K => {
                type $K = KQ5K;
                $body
            }
            DType::Q6K => {
                type $K = KQ6K;
                $body
            }
            DType::Q8K => {
                type $K = KQ8K;
                $body
            }
            DType::IQ4NL => {
                type $K = KIQ4NL;
                $body
            }
            DType::IQ4XS => {
                type $K = KIQ4XS;
                $body
            }
            DType::MXFP4 => {
                type $K = KMXFP4;
                $body
            }
            DType::TQ1_0 => {
                type $K = KTQ1_0;
                $body
            }
            DType::TQ2_0 => {
                type $K = KTQ2_0;
                $body
            }
            DType::IQ2XXS => {
                type $K = KIQ2XXS;
                $body
            }
            DType::IQ2XS => {
                type $K = KIQ2XS;
                $body
            }
            DType::IQ2S => {
                type $K = KIQ2S;
                $body
            }
            DType::IQ3XXS => {
                type $K = KIQ3XXS;
                $body
            }
            DType::IQ3S => {
                type $K = KIQ3S;
                $body
            }
            DType::IQ1S => {
                type $K = KIQ1S;
                $body
            }
            DType::IQ1M => {
                type $K = KIQ1M;
                $body
            }
        }
    }};
}
pub(crate) use dispatch;

/// `sum(a[i] * b[i])` over the shorter length, in f32 with 8 independent accumulators (so the
/// compiler vectorizes it; the summation order differs from a plain loop).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(8);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut tail = 0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// Dot product of one weight row (raw bytes of `K`) with `x`, a block at a time.
/// The caller has checked `w.len() == row_bytes(x.len())`.
#[inline]
pub(crate) fn vec_dot_k<K: BlockDequant>(w: &[u8], x: &[f32]) -> f32 {
    let mut buf = [0f32; MAX_BLOCK];
    let buf = &mut buf[..K::N];
    let mut sum = 0f32;
    let wb = w.chunks_exact(K::BYTES);
    let xb = x.chunks_exact(K::N);
    let (wt, xt) = (wb.remainder(), xb.remainder());
    for (wc, xc) in wb.zip(xb) {
        K::dequant(wc, buf);
        sum += dot(buf, xc);
    }
    if K::FLOAT && !xt.is_empty() {
        let tail = &mut buf[..xt.len()];
        K::dequant(wt, tail);
        sum += dot(tail, xt);
    }
    sum
}

/// Checks that `w` is one row of `x.len()` elements of `dtype`.
pub(crate) fn check_row(op: &'static str, dtype: DType, w: usize, k: usize) -> Result<()> {
    let rb = dtype.row_bytes(k).ok_or(TensorError::PartialBlock {
        dtype,
        row_len: k,
        block_size: dtype.block_size(),
    })?;
    if rb != w {
        return Err(TensorError::LengthMismatch {
            op,
            what: "weight row bytes",
            expected: rb,
            actual: w,
        });
    }
    Ok(())
}

/// Dot product of one weight row `w` (raw little-endian bytes of `dtype`, any alignment) with
/// the f32 vector `x`: the weights are dequantized one block at a time into a stack buffer.
///
/// Errors if `x.len()` is not a whole number of blocks or `w` is not exactly one row of it.
pub fn vec_dot(dtype: DType, w: &[u8], x: &[f32]) -> Result<f32> {
    check_row("vec_dot", dtype, w.len(), x.len())?;
    Ok(dispatch!(dtype, K => vec_dot_k::<K>(w, x)))
}

/// Dequantizes one row (raw bytes of `dtype`) into `out`, a block at a time.
pub(crate) fn dequant_row_k<K: BlockDequant>(w: &[u8], out: &mut [f32]) {
    let ob = out.chunks_exact_mut(K::N);
    let wb = w.chunks_exact(K::BYTES);
    let wt = wb.remainder();
    let mut done = 0;
    for (wc, oc) in wb.zip(ob) {
        K::dequant(wc, oc);
        done += K::N;
    }
    if K::FLOAT && done < out.len() {
        K::dequant(wt, &mut out[done..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::{quantized_row, Rng};

    #[test]
    fn vec_dot_matches_f64_over_dequantized_weights() {
        let mut rng = Rng::new(7);
        for dtype in DType::ALL {
            for k in [256usize, 512] {
                let (bytes, deq) = quantized_row(&mut rng, dtype, k);
                let x = rng.vec(k, 1.0);
                let got = vec_dot(dtype, &bytes, &x).unwrap();
                let want: f64 = deq.iter().zip(&x).map(|(a, b)| *a as f64 * *b as f64).sum();
                let mag: f64 = deq
                    .iter()
                    .zip(&x)
                    .map(|(a, b)| (*a as f64 * *b as f64).abs())
                    .sum();
                // f32 accumulation of k products: error bounded by ~k * eps * sum|a*b|.
                assert!(
                    (got as f64 - want).abs() <= 1e-5 * mag + 1e-6,
                    "{dtype} k={k}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn float_rows_may_end_in_a_partial_chunk_and_sit_unaligned() {
        let mut rng = Rng::new(8);
        let k = 45;
        let w = rng.vec(k, 1.0);
        let x = rng.vec(k, 1.0);
        let mut bytes = vec![0u8; 1 + 4 * k];
        for (i, v) in w.iter().enumerate() {
            bytes[1 + 4 * i..5 + 4 * i].copy_from_slice(&v.to_le_bytes());
        }
        let got = vec_dot(DType::F32, &bytes[1..], &x).unwrap();
        let want: f64 = w.iter().zip(&x).map(|(a, b)| *a as f64 * *b as f64).sum();
        assert!((got as f64 - want).abs() < 1e-5);
        assert!(vec_dot(DType::Q4_0, &bytes[..18], &x[..33]).is_err());
        assert!(vec_dot(DType::Q4_0, &bytes[..17], &x[..32]).is_err());
    }
}
