//! Shared pieces of the scalar quant code: length checks, aligned/unaligned block iteration, and
//! ggml's scale-search helpers (`nearest_int`, `make_qx_quants`, `make_q3_quants`,
//! `make_qkx2_quants`, `get_scale_min_k4`) that the K-quant quantizers use.
//!
//! Floating-point expressions keep ggml's operation order and `f32` precision, with no fused
//! multiply-add, so results match ggml's C compiled without FP contraction.

use bytemuck::Pod;

use super::error::{QuantError, QuantOp};
use crate::GgmlType;

/// Values per K-quant super-block (ggml's `QK_K`).
pub const QK_K: usize = 256;

/// Bytes of packed 6-bit scales and mins in Q4_K / Q5_K (ggml's `K_SCALE_SIZE`).
pub const K_SCALE_SIZE: usize = 12;

/// ggml's `GROUP_MAX_EPS`: groups whose largest magnitude is below this quantize to zero.
pub(crate) const GROUP_MAX_EPS: f32 = 1e-15;

/// A quant block layout: a `#[repr(C)]` mirror of one of ggml's `block_*` structs.
pub trait QuantBlock: Pod {
    /// The tensor type whose blocks these are.
    const TYPE: GgmlType;
    /// Values per block.
    const BLOCK_SIZE: usize;
}

/// Number of whole blocks in `values`, or the `PartialBlock` error.
fn block_count(
    ty: GgmlType,
    op: QuantOp,
    values: usize,
    block_size: usize,
) -> Result<usize, QuantError> {
    if block_size == 0 || !values.is_multiple_of(block_size) {
        return Err(QuantError::PartialBlock {
            ty,
            op,
            values,
            block_size,
        });
    }
    Ok(values / block_size)
}

/// Checks that `bytes` is exactly the quantized size of `values` values of `ty` and returns the
/// block count.
pub(crate) fn check_bytes(
    ty: GgmlType,
    op: QuantOp,
    values: usize,
    bytes: usize,
) -> Result<usize, QuantError> {
    let blocks = block_count(ty, op, values, ty.block_size())?;
    let type_size = ty.type_size();
    let expected = blocks.saturating_mul(type_size);
    if expected != bytes {
        return Err(QuantError::ByteLength {
            ty,
            op,
            values,
            blocks,
            type_size,
            expected,
            actual: bytes,
        });
    }
    Ok(blocks)
}

/// Checks that `blocks` blocks of `N` values match `values` values.
fn check_blocks<const N: usize>(
    ty: GgmlType,
    op: QuantOp,
    blocks: usize,
    values: usize,
) -> Result<(), QuantError> {
    block_count(ty, op, values, N)?;
    let block_values = blocks.saturating_mul(N);
    if block_values != values {
        return Err(QuantError::BlockCount {
            ty,
            op,
            blocks,
            block_values,
            values,
        });
    }
    Ok(())
}

/// Runs a per-block dequantizer over typed blocks after checking the lengths.
pub(crate) fn dequantize_blocks<B: QuantBlock, const N: usize>(
    blocks: &[B],
    out: &mut [f32],
    f: fn(&B, &mut [f32; N]),
) -> Result<(), QuantError> {
    check_blocks::<N>(B::TYPE, QuantOp::Dequantize, blocks.len(), out.len())?;
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(N)) {
        if let Ok(y) = <&mut [f32; N]>::try_from(y) {
            f(b, y);
        }
    }
    Ok(())
}

/// Runs a per-block quantizer over typed blocks after checking the lengths.
pub(crate) fn quantize_blocks<B: QuantBlock, const N: usize>(
    src: &[f32],
    out: &mut [B],
    f: fn(&[f32; N]) -> B,
) -> Result<(), QuantError> {
    check_blocks::<N>(B::TYPE, QuantOp::Quantize, out.len(), src.len())?;
    for (x, b) in src.chunks_exact(N).zip(out.iter_mut()) {
        if let Ok(x) = <&[f32; N]>::try_from(x) {
            *b = f(x);
        }
    }
    Ok(())
}

/// Dequantizes raw little-endian block bytes, which may sit at any alignment.
pub(crate) fn dequantize_bytes<B: QuantBlock, const N: usize>(
    data: &[u8],
    out: &mut [f32],
    f: fn(&B, &mut [f32; N]),
) -> Result<(), QuantError> {
    check_bytes(B::TYPE, QuantOp::Dequantize, out.len(), data.len())?;
    match bytemuck::try_cast_slice::<u8, B>(data) {
        Ok(blocks) => dequantize_blocks(blocks, out, f),
        Err(_) => {
            // Misaligned for `B`: copy each block out before reading it.
            let size = std::mem::size_of::<B>();
            for (bytes, y) in data.chunks_exact(size).zip(out.chunks_exact_mut(N)) {
                let b: B = bytemuck::pod_read_unaligned(bytes);
                if let Ok(y) = <&mut [f32; N]>::try_from(y) {
                    f(&b, y);
                }
            }
            Ok(())
        }
    }
}

/// Quantizes into raw little-endian block bytes, which may sit at any alignment.
pub(crate) fn quantize_bytes<B: QuantBlock, const N: usize>(
    src: &[f32],
    out: &mut [u8],
    f: fn(&[f32; N]) -> B,
) -> Result<(), QuantError> {
    check_bytes(B::TYPE, QuantOp::Quantize, src.len(), out.len())?;
    match bytemuck::try_cast_slice_mut::<u8, B>(out) {
        Ok(blocks) => quantize_blocks(src, blocks, f),
        Err(_) => {
            let size = std::mem::size_of::<B>();
            for (x, bytes) in src.chunks_exact(N).zip(out.chunks_exact_mut(size)) {
                if let Ok(x) = <&[f32; N]>::try_from(x) {
                    bytes.copy_from_slice(bytemuck::bytes_of(&f(x)));
                }
            }
            Ok(())
        }
    }
}

/// ggml's `nearest_int`: round to nearest, ties to even, by adding 1.5 * 2^23.
///
/// Exact for |x| <= 4194303 (ggml asserts that); outside it the result is some value in
/// `-0x400000..0x400000` rather than a panic, and every caller clamps it.
#[inline]
pub(crate) fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12582912.0;
    let i = val.to_bits() as i32;
    (i & 0x007f_ffff) - 0x0040_0000
}

/// `v[0] + v[1] + ...`, added left to right (as a C loop adds them).
#[inline(always)]
fn ordered_sum(v: &[f32]) -> f32 {
    let mut s = 0.0f32;
    for &x in v {
        s += x;
    }
    s
}

/// ggml's `MAX(a, b)` macro: `a > b ? a : b` (NaN handling included).
#[inline]
pub(crate) fn c_max(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// ggml's `make_qx_quants`: symmetric quantization of `x` to `L[i] in 0..2*nmax` (offset by
/// `nmax`) with a scale search; returns the scale.
///
/// `rmse_type` 0 is plain rounding; 1 weighs by `x^2` (or by `qw` when given), 2 uniformly,
/// 3 by `|x|`, other values by `sqrt|x|`; a negative `rmse_type` returns after the first fit.
pub(crate) fn make_qx_quants(
    nmax: i32,
    x: &[f32],
    l_out: &mut [i8],
    rmse_type: i32,
    qw: Option<&[f32]>,
) -> f32 {
    let n = x.len().min(l_out.len());
    let x = &x[..n];
    let l_out = &mut l_out[..n];
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out.fill(0);
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let clamp = |l: i32| l.min(nmax - 1).max(-nmax);
    let mut iscale = -nmaxf / max;
    if rmse_type == 0 {
        for (l, &v) in l_out.iter_mut().zip(x) {
            *l = (nmax + clamp(nearest_int(iscale * v))) as i8;
        }
        return 1.0 / iscale;
    }
    let mut rmse_type = rmse_type;
    let mut return_early = false;
    if rmse_type < 0 {
        rmse_type = -rmse_type;
        return_early = true;
    }
    // The weights, computed once (the search below runs 19 passes over them).
    let mut wbuf = [0f32; 64];
    let mut wvec = Vec::new();
    let w: &mut [f32] = if n <= wbuf.len() {
        &mut wbuf[..n]
    } else {
        wvec.resize(n, 0.0);
        &mut wvec
    };
    for (i, (wi, &v)) in w.iter_mut().zip(x).enumerate() {
        *wi = match qw {
            Some(qw) => qw.get(i).copied().unwrap_or(0.0),
            None => match rmse_type {
                1 => v * v,
                2 => 1.0,
                3 => v.abs(),
                _ => v.abs().sqrt(),
            },
        };
    }
    let w = &*w;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for ((lo, &xi), &wi) in l_out.iter_mut().zip(x).zip(w) {
        let l = clamp(nearest_int(iscale * xi));
        *lo = (l + nmax) as i8;
        let lf = l as f32;
        sumlx += wi * xi * lf;
        suml2 += wi * lf * lf;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    if return_early {
        return if suml2 > 0.0 {
            0.5 * (scale + 1.0 / iscale)
        } else {
            1.0 / iscale
        };
    }
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmaxf + 0.1 * is as f32) / max;
        // The terms first (a loop the compiler vectorizes), then their sums in order: the
        // same roundings as one loop, as ggml's compiled code computes them.
        let mut tx = [0f32; 64];
        let mut t2 = [0f32; 64];
        (sumlx, suml2) = if n <= 64 {
            for (((a, b), &xi), &wi) in tx.iter_mut().zip(t2.iter_mut()).zip(x).zip(w) {
                let lf = clamp(nearest_int(iscale * xi)) as f32;
                *a = wi * xi * lf;
                *b = wi * lf * lf;
            }
            (ordered_sum(&tx[..n]), ordered_sum(&t2[..n]))
        } else {
            let (mut sx, mut s2) = (0.0f32, 0.0f32);
            for (&xi, &wi) in x.iter().zip(w) {
                let lf = clamp(nearest_int(iscale * xi)) as f32;
                sx += wi * xi * lf;
                s2 += wi * lf * lf;
            }
            (sx, s2)
        };
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (l, &xi) in l_out.iter_mut().zip(x) {
                *l = (nmax + clamp(nearest_int(iscale * xi))) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// ggml's `make_q3_quants`: symmetric quantization to `L[i] in 0..2*nmax` weighted by `x^2`,
/// refined coordinate-wise when `do_rmse`; returns the scale.
pub(crate) fn make_q3_quants(nmax: i32, x: &[f32], l_out: &mut [i8], do_rmse: bool) -> f32 {
    let n = x.len().min(l_out.len());
    let x = &x[..n];
    let l_out = &mut l_out[..n];
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out.fill(0);
        return 0.0;
    }
    let clamp = |l: i32| l.min(nmax - 1).max(-nmax);
    let iscale = (-nmax) as f32 / max;
    if do_rmse {
        let mut sumlx = 0.0f32;
        let mut suml2 = 0.0f32;
        for i in 0..n {
            let l = clamp(nearest_int(iscale * x[i]));
            l_out[i] = l as i8;
            let w = x[i] * x[i];
            let lf = l as f32;
            sumlx += w * x[i] * lf;
            suml2 += w * lf * lf;
        }
        for _itry in 0..5 {
            let mut n_changed = 0;
            for i in 0..n {
                let w = x[i] * x[i];
                let li = l_out[i] as f32;
                let mut slx = sumlx - w * x[i] * li;
                if slx > 0.0 {
                    let mut sl2 = suml2 - w * li * li;
                    let new_l = clamp(nearest_int(x[i] * sl2 / slx));
                    if new_l != l_out[i] as i32 {
                        let nl = new_l as f32;
                        slx += w * x[i] * nl;
                        sl2 += w * nl * nl;
                        if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                            l_out[i] = new_l as i8;
                            sumlx = slx;
                            suml2 = sl2;
                            n_changed += 1;
                        }
                    }
                }
            }
            if n_changed == 0 {
                break;
            }
        }
        for l in l_out.iter_mut() {
            *l = (*l as i32 + nmax) as i8;
        }
        return if suml2 > 0.0 { sumlx / suml2 } else { 0.0 };
    }
    for (l, &v) in l_out.iter_mut().zip(x) {
        *l = (clamp(nearest_int(iscale * v)) + nmax) as i8;
    }
    1.0 / iscale
}

/// Settings of one `make_qkx2_quants` scale search.
pub(crate) struct Qkx2Params {
    /// Largest quant value.
    pub nmax: i32,
    /// First offset of the searched `nmax` (ggml's `rmin`).
    pub rmin: f32,
    /// Step of the searched offsets (ggml's `rdelta`).
    pub rdelta: f32,
    /// Number of extra steps (ggml's `nstep`).
    pub nstep: i32,
    /// Weigh absolute rather than squared errors (ggml's `use_mad`).
    pub use_mad: bool,
}

/// ggml's `make_qkx2_quants`: asymmetric quantization `x ~ scale * L - the_min` with
/// `L in 0..=nmax` and a weighted least-squares search; returns `(scale, the_min)`.
///
/// `l_out` and `l_aux` must be at least `x.len()` long (shorter ones shorten the group).
pub(crate) fn make_qkx2_quants(
    p: &Qkx2Params,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    l_aux: &mut [u8],
) -> (f32, f32) {
    let n = x.len().min(weights.len()).min(l_out.len()).min(l_aux.len());
    if n == 0 {
        return (0.0, 0.0);
    }
    let x = &x[..n];
    let weights = &weights[..n];
    let l_out = &mut l_out[..n];
    let l_aux = &mut l_aux[..n];
    let nmax = p.nmax;
    let nmaxf = nmax as f32;

    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out.fill(0);
        return (0.0, -min);
    }
    let err = |d: f32| if p.use_mad { d.abs() } else { d * d };
    let mut iscale = nmaxf / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).min(nmax).max(0);
        l_out[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if p.nstep < 1 {
        return (scale, -min);
    }
    for is in 0..=p.nstep {
        iscale = (p.rmin + p.rdelta * is as f32 + nmaxf) / (max - min);
        let (sum_l, sum_l2, sum_xl) = if n <= 32 {
            // The terms first (vectorized), then their sums in order (see make_qx_quants).
            let (mut t1, mut t2, mut t3) = ([0f32; 32], [0f32; 32], [0f32; 32]);
            for i in 0..n {
                let l = nearest_int(iscale * (x[i] - min)).min(nmax).max(0);
                l_aux[i] = l as u8;
                let w = weights[i];
                let lf = l as f32;
                t1[i] = w * lf;
                t2[i] = w * lf * lf;
                t3[i] = w * lf * x[i];
            }
            (
                ordered_sum(&t1[..n]),
                ordered_sum(&t2[..n]),
                ordered_sum(&t3[..n]),
            )
        } else {
            let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
            for i in 0..n {
                let l = nearest_int(iscale * (x[i] - min)).min(nmax).max(0);
                l_aux[i] = l as u8;
                let w = weights[i];
                let lf = l as f32;
                sum_l += w * lf;
                sum_l2 += w * lf * lf;
                sum_xl += w * lf * x[i];
            }
            (sum_l, sum_l2, sum_xl)
        };
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let cur_error = if n <= 32 {
                let mut t = [0f32; 32];
                for i in 0..n {
                    let diff = this_scale * l_aux[i] as f32 + this_min - x[i];
                    t[i] = weights[i] * err(diff);
                }
                ordered_sum(&t[..n])
            } else {
                let mut cur_error = 0.0f32;
                for i in 0..n {
                    let diff = this_scale * l_aux[i] as f32 + this_min - x[i];
                    cur_error += weights[i] * err(diff);
                }
                cur_error
            };
            if cur_error < best_error {
                l_out.copy_from_slice(l_aux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` (0..8) from the 12 packed
/// bytes of a Q4_K / Q5_K block.
///
/// Only `j % 8` is used, so any `j` is safe.
#[inline]
pub fn get_scale_min_k4(j: usize, q: &[u8; K_SCALE_SIZE]) -> (u8, u8) {
    let j = j & 7;
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Packs 8 six-bit scales and mins into the 12-byte Q4_K / Q5_K layout (the inverse of
/// [`get_scale_min_k4`]); values above 63 are cut to 63.
pub(crate) fn pack_scale_min_k4(ls: &[u8; 8], lm: &[u8; 8]) -> [u8; K_SCALE_SIZE] {
    let mut s = [0u8; K_SCALE_SIZE];
    for j in 0..8 {
        let ls = ls[j].min(63);
        let lm = lm[j].min(63);
        if j < 4 {
            s[j] = ls;
            s[j + 4] = lm;
        } else {
            s[j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
            s[j - 4] |= (ls >> 4) << 6;
            s[j] |= (lm >> 4) << 6;
        }
    }
    s
}

/// Packs 256 2-bit values (each `< 4`) into 64 bytes as Q2_K / Q3_K do: byte `32*h + l` holds
/// values `128*h + l + 32*k` in bits `2k..2k+2`.
pub(crate) fn pack_2bit(l: &[u8; QK_K]) -> [u8; QK_K / 4] {
    let mut qs = [0u8; QK_K / 4];
    for j in (0..QK_K).step_by(128) {
        for i in 0..32 {
            qs[j / 4 + i] = (l[j + i] & 3)
                | ((l[j + i + 32] & 3) << 2)
                | ((l[j + i + 64] & 3) << 4)
                | ((l[j + i + 96] & 3) << 6);
        }
    }
    qs
}

/// ggml's `make_qp_quants`: a positive scale for `x` (the group scales or mins of a K-quant
/// super-block) on levels `0..=nmax`, weighted by `qw`.
pub(crate) fn make_qp_quants(nmax: i32, x: &[f32], l: &mut [u8], qw: &[f32]) -> f32 {
    let n = x.len();
    let mut max = 0.0f32;
    for &v in x {
        max = if max > v { max } else { v };
    }
    if max < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let mut iscale = nmaxf / max;
    for i in 0..n {
        l[i] = nearest_int(iscale * x[i]) as u8;
    }
    let scale = 1.0 / iscale;
    let mut best_mse = 0.0f32;
    for i in 0..n {
        let diff = x[i] - scale * l[i] as f32;
        best_mse += qw[i] * diff * diff;
    }
    for is in -4i32..=4 {
        if is == 0 {
            continue;
        }
        let iscale_is = (0.1 * is as f32 + nmaxf) / max;
        let scale_is = 1.0 / iscale_is;
        let mut mse = 0.0f32;
        for i in 0..n {
            let li = nearest_int(iscale_is * x[i]).min(nmax);
            let diff = x[i] - scale_is * li as f32;
            mse += qw[i] * diff * diff;
        }
        if mse < best_mse {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for i in 0..n {
        let li = nearest_int(iscale * x[i]).min(nmax);
        l[i] = li as u8;
        let w = qw[i];
        // The int, not the stored byte: a negative level (IQ2_XXS's sign-flipped value) wraps
        // in `L` but counts as itself here, as in ggml.
        let lf = li as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for i in 0..n {
            let w = qw[i];
            let li = l[i] as f32;
            let mut slx = sumlx - w * x[i] * li;
            let mut sl2 = suml2 - w * li * li;
            if slx > 0.0 && sl2 > 0.0 {
                let new_l = nearest_int(x[i] * sl2 / slx).min(nmax);
                if new_l != l[i] as i32 {
                    let nl = new_l as f32;
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l[i] = new_l as u8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(-0.5), 0);
        assert_eq!(nearest_int(-1.5), -2);
        assert_eq!(nearest_int(-7.49), -7);
        assert_eq!(nearest_int(4194303.0), 4194303);
        assert_eq!(nearest_int(-4194303.0), -4194303);
        // Out of range and non-finite inputs give some in-range value, not a panic.
        for v in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e30, -1e30] {
            let r = nearest_int(v);
            assert!((-0x40_0000..0x40_0000).contains(&r));
        }
    }

    #[test]
    fn scale_min_k4_round_trips() {
        let ls = [0, 1, 17, 63, 32, 63, 5, 48];
        let lm = [63, 2, 0, 40, 31, 1, 62, 16];
        let packed = pack_scale_min_k4(&ls, &lm);
        for j in 0..8 {
            assert_eq!(
                get_scale_min_k4(j, &packed),
                (ls[j], lm[j]),
                "sub-block {j}"
            );
        }
    }
}
