//! Q6_Kx16: Q6_K matrices packed 16 rows at a time for [`super::matmul_packed`].
//!
//! A super-block's 256 values are 64 groups of 4 (`gi = e / 4`); the packed group of 16 rows
//! stores, per super-block, the 6-bit values `q` (0..63, the file's `q + 32`) of each group
//! side by side (lane `r` of a 64-byte vector: the 4 values of row `r`):
//! - `ql`, 32 × 64 bytes: vector `p` holds the low 4 bits of group `p` in its low nibbles and
//!   of group `p + 32` in its high nibbles;
//! - `qh`, 16 × 64 bytes: vector `p` holds the top 2 bits of groups `p`, `p + 16`, `p + 32`,
//!   `p + 48` at bits 4-5, 6-7, 0-1 and 2-3 (so each is one shift and a mask from bits 4-5);
//!
//! then, after all super-blocks' quants, per super-block the 16 sub-block scales of the 16
//! rows (`[sub-block][row]`, i8) and the rows' 16 f16 `d`. As large as the original.
//!
//! Numerics, bit for bit those of the unpacked kernels (`qdot::k_x86`), as llama.cpp b11434 sums:
//! - **lanes** (`dot_q6_k_x86`, ggml's AVX2 `vec_dot`; fewer than [`super::TILED_MIN_ROWS`]
//!   rows in the sequence): 8 integer lanes per super-block, lane `l` holding groups
//!   `gi ≡ l (mod 8)` times their scales minus `32 · (sc[2l]·bsum[2l] + sc[2l+1]·bsum[2l+1])`,
//!   each lane then `acc_l = fma(d_x·d_w, f32(lane), acc_l)`, and at the end ggml's
//!   `hsum_float_8` order `((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))`;
//! - **tiled** (`dot_q6_k_tiled`, llama.cpp's tiled K-quant matmul): the super-block's exact
//!   `Σ scale · (q - 32) · a`, then `acc = fma(f32(isum) · d_w, d_x, acc)`.

pub(crate) mod layout;
#[cfg(target_arch = "x86_64")]
mod x86_64;
pub(crate) use layout::*;

use super::groups::GROUP_ROWS;
use crate::cpu::q8::quantize_row_q8_k;
use crate::cpu::scratch::MatmulScratch;
use crate::storage::AlignedBuf;
use kestrel_gguf::quant::{BlockQ6K, BlockQ8K, QK_K};

/// The 6-bit value of element `e` of a Q6_K block (0..63).
fn q6(b: &BlockQ6K, e: usize) -> u8 {
    let (j, k, l) = (e / 128, (e % 128) / 32, e % 32);
    let lo = (b.ql[64 * j + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0x0F;
    let hi = (b.qh[32 * j + l] >> (2 * k)) & 3;
    lo | (hi << 4)
}

/// Where group `gi`'s top 2 bits sit in its `qh` byte.
fn qh_shift(gi: usize) -> u32 {
    [4, 6, 0, 2][gi / 16]
}

/// Packs `m` Q6_K rows of `k` elements (`w`: exactly their bytes, `m` a multiple of 16).
pub(crate) fn pack(w: &[u8], m: usize, k: usize, release: bool) -> Option<AlignedBuf> {
    if !k.is_multiple_of(QK_K) {
        return None;
    }
    let sizes = (Q6K_BYTES, QUANT_BYTES, SCALE_BYTES);
    super::groups::pack_groups(w, m, k / QK_K, sizes, release, |r, raw, q, s| {
        let blk: BlockQ6K = bytemuck::pod_read_unaligned(raw);
        for e in 0..QK_K {
            let (gi, j) = (e / 4, e % 4);
            let v = q6(&blk, e);
            q[(gi % 32) * 64 + r * 4 + j] |= (v & 0x0F) << (4 * (gi / 32));
            q[QH_AT + (gi % 16) * 64 + r * 4 + j] |= (v >> 4) << qh_shift(gi);
        }
        for (sb, &sc) in blk.scales.iter().enumerate() {
            s[sb * GROUP_ROWS + r] = sc as u8;
        }
        s[16 * GROUP_ROWS + 2 * r..][..2].copy_from_slice(&blk.d.to_le_bytes());
    })
}

/// Converts the `n` activation rows of `x` (`k` values each) to q8_K in `scratch`, with the
/// per-group terms the kernels start from.
pub(crate) fn prepare<'s>(
    x: &[f32],
    n: usize,
    k: usize,
    scratch: &'s mut MatmulScratch,
) -> ActQ8K<'s> {
    let corr = |b: &BlockQ8K, c: &mut [i32], _: &mut f32| {
        for (c, &s) in c.iter_mut().zip(&b.bsums) {
            *c = -32 * i32::from(s);
        }
    };
    let (acts, corr, _) =
        super::groups::prepare_acts(x, n, k, k / QK_K, 16, scratch, quantize_row_q8_k, corr);
    ActQ8K { acts, corr }
}

/// One group against 1 to [`super::MAX_ACTS`] activation rows in the lanes or the tiled order:
/// `out[t · 16 + r]`; the AVX-512 kernel when the CPU runs it, else the scalar twin.
pub(crate) fn group_tile(group: &[u8], nb: usize, act: ActQ8K<'_>, tiled: bool, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::groups::simd() {
        // SAFETY: the active ISA is AVX-512, so the CPU has the kernel's features.
        unsafe { x86_64::group_tile(group, nb, act, tiled, out) };
        return;
    }
    tile_scalar(group, nb, act, tiled, out)
}

/// The scalar twin of the AVX-512 kernels.
pub(crate) fn tile_scalar(group: &[u8], nb: usize, act: ActQ8K<'_>, tiled: bool, out: &mut [f32]) {
    let (quants, scales) = group.split_at(nb * QUANT_BYTES);
    let n_act = act.acts.len() / nb;
    for t in 0..n_act {
        for r in 0..GROUP_ROWS {
            let mut lanes_acc = [0f32; 8];
            let mut acc = 0f32;
            for b in 0..nb {
                let (q, s) = (&quants[b * QUANT_BYTES..], &scales[b * SCALE_BYTES..]);
                let i = t * nb + b;
                let (yb, corr) = (&act.acts[i], &act.corr[16 * i..16 * i + 16]);
                let sc = |sb: usize| i32::from(s[sb * GROUP_ROWS + r] as i8);
                let dw = half::f16::from_le_bytes([
                    s[16 * GROUP_ROWS + 2 * r],
                    s[16 * GROUP_ROWS + 2 * r + 1],
                ])
                .to_f32();
                // Σ q·a of group gi (q unsigned).
                let dot4 = |gi: usize| {
                    (0..4)
                        .map(|j| {
                            let lo = (q[(gi % 32) * 64 + r * 4 + j] >> (4 * (gi / 32))) & 0x0F;
                            let hi = (q[QH_AT + (gi % 16) * 64 + r * 4 + j] >> qh_shift(gi)) & 3;
                            i32::from(lo | (hi << 4)) * i32::from(yb.qs[4 * gi + j])
                        })
                        .sum::<i32>()
                };
                if tiled {
                    let isum: i32 = (0..16)
                        .map(|sb| sc(sb) * ((4 * sb..4 * sb + 4).map(dot4).sum::<i32>() + corr[sb]))
                        .sum();
                    acc = (isum as f32 * dw).mul_add(yb.d, acc);
                } else {
                    let d = yb.d * dw;
                    for (l, a) in lanes_acc.iter_mut().enumerate() {
                        let mut lane: i32 =
                            (0..8).map(|c| sc(2 * c + l / 4) * dot4(8 * c + l)).sum();
                        lane += sc(2 * l) * corr[2 * l] + sc(2 * l + 1) * corr[2 * l + 1];
                        *a = d.mul_add(lane as f32, *a);
                    }
                }
            }
            out[t * GROUP_ROWS + r] = if tiled {
                acc
            } else {
                let a = &lanes_acc;
                ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use bytemuck::Zeroable;

    use super::*;
    use crate::cpu::packed::{matmul_packed, PackedWeight};
    use crate::cpu::qdot::k_x86::{dot_q6_k_tiled, dot_q6_k_x86};
    use crate::cpu::testutil::{quantized_rows, Rng};
    use crate::DType;

    /// Each row's dot with each activation row by the unpacked scalar twins, in the order a
    /// sequence of `seg` rows takes.
    fn reference(w: &[u8], m: usize, k: usize, x: &[f32], n: usize, seg: usize) -> Vec<f32> {
        let nb = k / QK_K;
        let mut out = vec![0f32; n * m];
        for t in 0..n {
            let mut a = vec![BlockQ8K::zeroed(); nb];
            quantize_row_q8_k(&x[t * k..(t + 1) * k], &mut a);
            for r in 0..m {
                let wr = &w[r * nb * Q6K_BYTES..(r + 1) * nb * Q6K_BYTES];
                out[t * m + r] = if seg >= super::super::TILED_MIN_ROWS {
                    dot_q6_k_tiled(wr, &a)
                } else {
                    dot_q6_k_x86(wr, &a)
                };
            }
        }
        out
    }

    fn case(seed: u64, m: usize, k: usize, n: usize) {
        let mut rng = Rng::new(seed);
        let (w, _) = quantized_rows(&mut rng, DType::Q6K, m, k);
        let x = rng.vec(n * k, 1.0);
        let p = PackedWeight::pack_any(&w, DType::Q6K, m, k, false).expect("packs");
        assert_eq!(p.nbytes(), w.len());
        for segs in [vec![n], vec![1; n]] {
            let want = reference(&w, m, k, &x, n, segs[0]);
            let mut got = vec![0f32; n * m];
            matmul_packed(&x, n, &p, &mut got, &segs, &mut MatmulScratch::new()).unwrap();
            assert_eq!(got, want, "m {m} k {k} n {n} segments {segs:?}");
            // The scalar twin, group by group.
            let nb = k / QK_K;
            let mut s = MatmulScratch::new();
            let act = prepare(&x, n, k, &mut s);
            let gb = nb * (QUANT_BYTES + SCALE_BYTES);
            let tiled = segs[0] >= super::super::TILED_MIN_ROWS;
            for g in 0..m / GROUP_ROWS {
                let mut o = vec![0f32; n * GROUP_ROWS];
                tile_scalar(
                    &p.buf.as_bytes()[g * gb..(g + 1) * gb],
                    nb,
                    act,
                    tiled,
                    &mut o,
                );
                for t in 0..n {
                    assert_eq!(
                        &o[t * GROUP_ROWS..(t + 1) * GROUP_ROWS],
                        &want[t * m + g * GROUP_ROWS..t * m + (g + 1) * GROUP_ROWS],
                        "scalar twin, group {g}, row {t}"
                    );
                }
            }
        }
    }

    #[test]
    fn packed_q6_k_equals_the_unpacked_kernels_in_both_orders() {
        for (seed, (m, k, n)) in [(16, 256, 1), (32, 512, 3), (16, 256, 8), (48, 768, 13)]
            .into_iter()
            .enumerate()
        {
            case(seed as u64 + 11, m, k, n);
        }
    }

    #[test]
    fn mixed_segments_take_their_own_order() {
        let (m, k) = (32, 512);
        let mut rng = Rng::new(21);
        let (w, _) = quantized_rows(&mut rng, DType::Q6K, m, k);
        let x = rng.vec(12 * k, 1.0);
        let p = PackedWeight::pack_any(&w, DType::Q6K, m, k, false).unwrap();
        let mut got = vec![0f32; 12 * m];
        matmul_packed(
            &x,
            12,
            &p,
            &mut got,
            &[1, 1, 9, 1],
            &mut MatmulScratch::new(),
        )
        .unwrap();
        let lanes = reference(&w, m, k, &x, 12, 1);
        let tiled = reference(&w, m, k, &x, 12, 9);
        for t in 0..12 {
            let want = if (2..11).contains(&t) { &tiled } else { &lanes };
            assert_eq!(got[t * m..(t + 1) * m], want[t * m..(t + 1) * m], "row {t}");
        }
    }
}
