//! Q4_Kx16: Q4_K matrices packed 16 rows at a time for [`super::matmul_packed`].
//!
//! Per group of 16 rows and super-block: 32 vectors of 64 bytes, vector `8p + c` holding bytes
//! `32p + 4c..32p + 4c + 4` of each row's quants (low nibbles: values `64p + 4c..`, sub-block
//! `2p`; high nibbles: values `64p + 32 + 4c..`, sub-block `2p + 1`); then, after all
//! super-blocks' quants, per super-block the rows' 8 six-bit scales (`[sub-block][row]`), their
//! 8 mins (same), their 16 f16 `d` and 16 f16 `dmin`: 2368 bytes per 16 rows instead of 2304
//! (the scales unpacked from their 12-byte form, +2.8%).
//!
//! Numerics, bit for bit llama.cpp's repacked Q4_K paths (`qdot::k_x86`), per row: exact
//! integers `val_p = sc[2p]·Σ q·a + sc[2p+1]·Σ q·a` and `min_p = Σ min · bsum` for each pair
//! `p` of sub-blocks, then
//! - **gemm** (rows in groups of 4 of a sequence's step): per pair, `acc = fma(f32(val_p),
//!   d_w·d_x, acc)` and `acc_min = fma(f32(min_p), dmin_w·d_x, acc_min)`;
//! - **gemv** (the other rows): the same with the four pairs summed first, once per
//!   super-block;
//!
//! and `acc - acc_min` at the end.

pub(crate) mod layout;
#[cfg(target_arch = "x86_64")]
mod x86_64;
pub(crate) use layout::*;

use super::groups::GROUP_ROWS;
use crate::cpu::q8::quantize_row_q8_k;
use crate::cpu::scratch::MatmulScratch;
use crate::storage::AlignedBuf;
use kestrel_gguf::quant::{get_scale_min_k4, BlockQ4K, BlockQ8K, QK_K};

/// Packs `m` Q4_K rows of `k` elements (`w`: exactly their bytes, `m` a multiple of 16).
pub(crate) fn pack(w: &[u8], m: usize, k: usize, release: bool) -> Option<AlignedBuf> {
    if !k.is_multiple_of(QK_K) {
        return None;
    }
    let sizes = (Q4K_BYTES, QUANT_BYTES, SCALE_BYTES);
    super::groups::pack_groups(w, m, k / QK_K, sizes, release, |r, raw, q, s| {
        let blk: BlockQ4K = bytemuck::pod_read_unaligned(raw);
        for v in 0..32 {
            let (p, c) = (v / 8, v % 8);
            q[v * 64 + r * 4..][..4].copy_from_slice(&blk.qs[32 * p + 4 * c..][..4]);
        }
        for sb in 0..8 {
            let (sc, mn) = get_scale_min_k4(sb, &blk.scales);
            s[sb * GROUP_ROWS + r] = sc;
            s[MINS_AT + sb * GROUP_ROWS + r] = mn;
        }
        s[D_AT + 2 * r..][..2].copy_from_slice(&blk.d.to_le_bytes());
        s[D_AT + 2 * GROUP_ROWS + 2 * r..][..2].copy_from_slice(&blk.dmin.to_le_bytes());
    })
}

/// Converts the `n` activation rows of `x` (`k` values each) to q8_K in `scratch`, with the
/// per-32 sums the kernels use.
pub(crate) fn prepare<'s>(
    x: &[f32],
    n: usize,
    k: usize,
    scratch: &'s mut MatmulScratch,
) -> ActQ4K<'s> {
    let sums = |b: &BlockQ8K, s: &mut [i32], _: &mut f32| {
        for (j, s) in s.iter_mut().enumerate() {
            *s = i32::from(b.bsums[2 * j]) + i32::from(b.bsums[2 * j + 1]);
        }
    };
    let (acts, bs, _) =
        super::groups::prepare_acts(x, n, k, k / QK_K, 8, scratch, quantize_row_q8_k, sums);
    ActQ4K { acts, bs }
}

/// One group against 1 to [`super::MAX_ACTS`] activation rows in the gemm or the gemv order:
/// `out[t · 16 + r]`; the AVX-512 kernel when the CPU runs it, else the scalar twin.
pub(crate) fn group_tile(group: &[u8], nb: usize, act: ActQ4K<'_>, gemm: bool, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::groups::simd() {
        // SAFETY: the active ISA is AVX-512, so the CPU has the kernel's features.
        unsafe { x86_64::group_tile(group, nb, act, gemm, out) };
        return;
    }
    tile_scalar(group, nb, act, gemm, out)
}

/// The scalar twin of the AVX-512 kernel.
pub(crate) fn tile_scalar(group: &[u8], nb: usize, act: ActQ4K<'_>, gemm: bool, out: &mut [f32]) {
    let (quants, scales) = group.split_at(nb * QUANT_BYTES);
    let n_act = act.acts.len() / nb;
    let f16 = |b: &[u8], at: usize| half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32();
    for t in 0..n_act {
        for r in 0..GROUP_ROWS {
            let (mut acc, mut acc_min) = (0f32, 0f32);
            for b in 0..nb {
                let (q, s) = (&quants[b * QUANT_BYTES..], &scales[b * SCALE_BYTES..]);
                let i = t * nb + b;
                let (yb, bs) = (&act.acts[i], &act.bs[8 * i..8 * i + 8]);
                let d = f16(s, D_AT + 2 * r) * yb.d;
                let dmin = f16(s, D_AT + 2 * GROUP_ROWS + 2 * r) * yb.d;
                let (mut v, mut mn) = (0i32, 0i32);
                for p in 0..4 {
                    let (mut lo, mut hi) = (0i32, 0i32);
                    for c in 0..8 {
                        for j in 0..4 {
                            let byte = q[(8 * p + c) * 64 + r * 4 + j];
                            lo += i32::from(byte & 0x0F) * i32::from(yb.qs[64 * p + 4 * c + j]);
                            hi += i32::from(byte >> 4) * i32::from(yb.qs[64 * p + 32 + 4 * c + j]);
                        }
                    }
                    let sc = |sb: usize| i32::from(s[sb * GROUP_ROWS + r]);
                    let mins = |sb: usize| i32::from(s[MINS_AT + sb * GROUP_ROWS + r]);
                    let val = sc(2 * p) * lo + sc(2 * p + 1) * hi;
                    let min = bs[2 * p] * mins(2 * p) + bs[2 * p + 1] * mins(2 * p + 1);
                    if gemm {
                        acc = (val as f32).mul_add(d, acc);
                        acc_min = (min as f32).mul_add(dmin, acc_min);
                    } else {
                        v += val;
                        mn += min;
                    }
                }
                if !gemm {
                    acc = (v as f32).mul_add(d, acc);
                    acc_min = (mn as f32).mul_add(dmin, acc_min);
                }
            }
            out[t * GROUP_ROWS + r] = acc - acc_min;
        }
    }
}

#[cfg(test)]
mod tests {
    use bytemuck::Zeroable;

    use super::*;
    use crate::cpu::packed::{matmul_packed, PackedWeight};
    use crate::cpu::qdot::k_x86::{dot_q4_k_8x8_gemm, dot_q4_k_8x8_gemv};
    use crate::cpu::testutil::{quantized_rows, Rng};
    use crate::DType;

    /// Each row's dot with each activation row by the unpacked scalar twins: gemm order where
    /// `gemm(t)`.
    fn reference(
        w: &[u8],
        m: usize,
        k: usize,
        x: &[f32],
        n: usize,
        gemm: impl Fn(usize) -> bool,
    ) -> Vec<f32> {
        let nb = k / QK_K;
        let mut out = vec![0f32; n * m];
        for t in 0..n {
            let mut a = vec![BlockQ8K::zeroed(); nb];
            quantize_row_q8_k(&x[t * k..(t + 1) * k], &mut a);
            for r in 0..m {
                let wr = &w[r * nb * Q4K_BYTES..(r + 1) * nb * Q4K_BYTES];
                out[t * m + r] = if gemm(t) {
                    dot_q4_k_8x8_gemm(wr, &a)
                } else {
                    dot_q4_k_8x8_gemv(wr, &a)
                };
            }
        }
        out
    }

    #[test]
    fn packed_q4_k_equals_the_unpacked_kernels_in_both_orders() {
        for (seed, (m, k, segs)) in [
            (16, 256, vec![1]),
            (32, 512, vec![3]),
            (16, 256, vec![8]),
            (48, 768, vec![1, 6, 1, 4, 2]),
            (32, 1024, vec![13]),
        ]
        .into_iter()
        .enumerate()
        {
            let n: usize = segs.iter().sum();
            let mut rng = Rng::new(seed as u64 + 31);
            let (w, _) = quantized_rows(&mut rng, DType::Q4K, m, k);
            let x = rng.vec(n * k, 1.0);
            let p = PackedWeight::pack_any(&w, DType::Q4K, m, k, false).expect("packs");
            // Row t's order: gemm for the first len - len % 4 rows of its sequence.
            let mut gemm_rows = Vec::new();
            for &len in &segs {
                gemm_rows.extend((0..len).map(|i| i < len - len % 4));
            }
            let want = reference(&w, m, k, &x, n, |t| gemm_rows[t]);
            let mut got = vec![0f32; n * m];
            matmul_packed(&x, n, &p, &mut got, &segs, &mut MatmulScratch::new()).unwrap();
            assert_eq!(got, want, "m {m} k {k} segments {segs:?}");
            // The scalar twin, group by group, one order at a time.
            let nb = k / QK_K;
            let mut s = MatmulScratch::new();
            let act = prepare(&x, n, k, &mut s);
            let gb = nb * (QUANT_BYTES + SCALE_BYTES);
            for g in 0..m / GROUP_ROWS {
                for t in 0..n {
                    let mut o = vec![0f32; GROUP_ROWS];
                    let group = &p.buf.as_bytes()[g * gb..(g + 1) * gb];
                    tile_scalar(group, nb, act.rows(t, t + 1, nb), gemm_rows[t], &mut o);
                    assert_eq!(
                        o,
                        want[t * m + g * GROUP_ROWS..t * m + (g + 1) * GROUP_ROWS]
                    );
                }
            }
        }
    }
}
