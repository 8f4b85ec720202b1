//! Q4_0x16: Q4_0 matrices packed 16 rows at a time for [`super::matmul_packed`].
//!
//! Per group of 16 rows: for each of the `nb` blocks of a row, 256 quant bytes (`for c in 0..4,
//! for r in 0..16: bytes 4c..4c + 4 of row r's block`: one 64-byte load holds elements
//! `4c..4c + 4` of each row in its low nibbles and `16 + 4c..` in its high ones), then the
//! group's `nb × 16` f16 scales (block-major).
//!
//! Numerics: per weight row and activation row, `acc = fma(f32(Σ_block (q - 8)·a), d_w·d_x,
//! acc)` over the blocks in order, the block sum exact in integers: llama.cpp's repacked Q4_0
//! GEMM (`ggml_gemm_q4_0_8x8_q8_0`), which differs in the last bits from the unpacked path
//! (that converts 8 partial lane sums per block to float, as ggml's AVX2 `vec_dot` does). It
//! does not depend on how many activation rows a call has.

use super::GROUP_ROWS;
use crate::cpu::matmul::MatmulScratch;
use crate::cpu::q8::quantize_row_q8_0;
use crate::storage::AlignedBuf;
use kestrel_gguf::quant::BlockQ8_0;

/// Quant bytes of one block of a group (16 rows × 16 bytes).
pub(crate) const GROUP_BLOCK_BYTES: usize = GROUP_ROWS * 16;

/// Bytes of one block of a group: quants and 16 f16 scales.
#[cfg(test)]
const GROUP_BLOCK_ALL: usize = GROUP_BLOCK_BYTES + GROUP_ROWS * 2;

/// Bytes of a Q4_0 block: f16 scale, 16 bytes of nibbles.
const Q4_0_BYTES: usize = 18;

/// The activation side of a call: q8_0 rows and, per block, `-8 · Σ q` and `d` as f32.
#[derive(Clone, Copy)]
pub(crate) struct ActQ8_0<'a> {
    pub(crate) acts: &'a [BlockQ8_0],
    pub(crate) corr: &'a [i32],
    pub(crate) d: &'a [f32],
}

impl ActQ8_0<'_> {
    /// Rows `t0..t1` of `nb` blocks each.
    pub(crate) fn rows(&self, t0: usize, t1: usize, nb: usize) -> ActQ8_0<'_> {
        ActQ8_0 {
            acts: &self.acts[t0 * nb..t1 * nb],
            corr: &self.corr[t0 * nb..t1 * nb],
            d: &self.d[t0 * nb..t1 * nb],
        }
    }
}

/// Packs `m` Q4_0 rows of `k` elements (`w`: exactly their bytes, `m` a multiple of 16).
pub(crate) fn pack(w: &[u8], m: usize, k: usize) -> Option<AlignedBuf> {
    if !k.is_multiple_of(32) {
        return None;
    }
    let sizes = (Q4_0_BYTES, GROUP_BLOCK_BYTES, GROUP_ROWS * 2);
    super::pack_groups(w, m, k / 32, sizes, |r, blk, quants, scales| {
        scales[r * 2..r * 2 + 2].copy_from_slice(&blk[..2]);
        for c in 0..4 {
            let at = c * 64 + r * 4;
            quants[at..at + 4].copy_from_slice(&blk[2 + 4 * c..2 + 4 * c + 4]);
        }
    })
}

/// Converts the `n` activation rows of `x` (`k` values each) to q8_0 in `scratch`, with the
/// per-block terms the kernel starts from.
pub(crate) fn prepare<'s>(
    x: &[f32],
    n: usize,
    k: usize,
    scratch: &'s mut MatmulScratch,
) -> ActQ8_0<'s> {
    let (acts, corr, d) = super::prepare_acts(
        x,
        n,
        k,
        k / 32,
        1,
        scratch,
        quantize_row_q8_0,
        |b: &BlockQ8_0, c, d| {
            c[0] = -8 * b.qs.iter().map(|&q| i32::from(q)).sum::<i32>();
            *d = b.d.to_f32();
        },
    );
    ActQ8_0 { acts, corr, d }
}

/// One group against 1 to [`super::MAX_ACTS`] activation rows: `out[t · 16 + r]`; the
/// AVX-512 kernel when the CPU runs it, else the scalar twin.
pub(crate) fn group_tile(group: &[u8], nb: usize, act: ActQ8_0<'_>, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::simd() {
        // SAFETY: the active ISA is AVX-512, so the CPU has the kernel's features.
        unsafe { crate::cpu::x86_64::q4_0x16::group_tile(group, nb, act, out) };
        return;
    }
    tile_scalar(group, nb, act, out)
}

/// The scalar twin of the AVX-512 kernel.
pub(crate) fn tile_scalar(group: &[u8], nb: usize, act: ActQ8_0<'_>, out: &mut [f32]) {
    let (quants, scales) = group.split_at(nb * GROUP_BLOCK_BYTES);
    let n_act = act.acts.len() / nb;
    for t in 0..n_act {
        for r in 0..GROUP_ROWS {
            let mut acc = 0f32;
            for b in 0..nb {
                let i = t * nb + b;
                let a = &act.acts[i].qs;
                let mut sum = act.corr[i];
                for c in 0..4 {
                    for j in 0..4 {
                        let q = quants[b * GROUP_BLOCK_BYTES + c * 64 + r * 4 + j];
                        sum += i32::from(q & 0x0F) * i32::from(a[4 * c + j]);
                        sum += i32::from(q >> 4) * i32::from(a[16 + 4 * c + j]);
                    }
                }
                let s = &scales[(b * GROUP_ROWS + r) * 2..][..2];
                let dw = half::f16::from_le_bytes([s[0], s[1]]).to_f32();
                acc = (sum as f32).mul_add(dw * act.d[i], acc);
            }
            out[t * GROUP_ROWS + r] = acc;
        }
    }
}

#[cfg(test)]
mod tests {
    use bytemuck::Zeroable;

    use super::*;
    use crate::cpu::packed::{matmul_packed, PackedWeight};
    use crate::cpu::testutil::{quantized_rows, Rng};
    use crate::DType;

    /// Q4_0 rows dotted with q8_0 activations in the packed numerics, from the unpacked bytes.
    fn reference(w: &[u8], m: usize, k: usize, x: &[f32], n: usize) -> Vec<f32> {
        let nb = k / 32;
        let mut out = vec![0f32; n * m];
        for t in 0..n {
            let mut a = vec![BlockQ8_0::zeroed(); nb];
            quantize_row_q8_0(&x[t * k..(t + 1) * k], &mut a);
            for r in 0..m {
                let mut acc = 0f32;
                for (b, ab) in a.iter().enumerate() {
                    let blk = &w[(r * nb + b) * Q4_0_BYTES..][..Q4_0_BYTES];
                    let mut sum = 0i32;
                    for j in 0..16 {
                        let q = blk[2 + j];
                        sum += (i32::from(q & 0x0F) - 8) * i32::from(ab.qs[j]);
                        sum += (i32::from(q >> 4) - 8) * i32::from(ab.qs[16 + j]);
                    }
                    let dw = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
                    acc = (sum as f32).mul_add(dw * ab.d.to_f32(), acc);
                }
                out[t * m + r] = acc;
            }
        }
        out
    }

    fn case(seed: u64, m: usize, k: usize, n: usize) {
        let mut rng = Rng::new(seed);
        let (w, _) = quantized_rows(&mut rng, DType::Q4_0, m, k);
        let x = rng.vec(n * k, 1.0);
        let want = reference(&w, m, k, &x, n);
        let p = PackedWeight::pack_any(&w, DType::Q4_0, m, k).expect("packs");
        assert_eq!(p.nbytes(), w.len());
        let mut got = vec![0f32; n * m];
        matmul_packed(&x, n, &p, &mut got, &[n], &mut MatmulScratch::new()).unwrap();
        assert_eq!(got, want, "m {m} k {k} n {n}");
        // The scalar twin, group by group, gives the same bits.
        let nb = k / 32;
        let mut s = MatmulScratch::new();
        let act = prepare(&x, n, k, &mut s);
        let gb = nb * GROUP_BLOCK_ALL;
        for g in 0..m / GROUP_ROWS {
            let mut o = vec![0f32; n * GROUP_ROWS];
            tile_scalar(&p.buf.as_bytes()[g * gb..(g + 1) * gb], nb, act, &mut o);
            for t in 0..n {
                assert_eq!(
                    &o[t * GROUP_ROWS..(t + 1) * GROUP_ROWS],
                    &want[t * m + g * GROUP_ROWS..t * m + (g + 1) * GROUP_ROWS]
                );
            }
        }
    }

    #[test]
    fn packed_q4_0_equals_its_reference_for_any_row_count() {
        for (seed, (m, k, n)) in [
            (16, 32, 1),
            (32, 64, 3),
            (48, 576, 8),
            (64, 320, 9),
            (16, 2048, 17),
        ]
        .into_iter()
        .enumerate()
        {
            case(seed as u64 + 1, m, k, n);
        }
    }

    #[test]
    fn a_row_does_not_depend_on_the_other_rows_of_the_call() {
        let (m, k) = (32, 256);
        let mut rng = Rng::new(7);
        let (w, _) = quantized_rows(&mut rng, DType::Q4_0, m, k);
        let x = rng.vec(11 * k, 1.0);
        let p = PackedWeight::pack_any(&w, DType::Q4_0, m, k).unwrap();
        let mut all = vec![0f32; 11 * m];
        matmul_packed(&x, 11, &p, &mut all, &[11], &mut MatmulScratch::new()).unwrap();
        for t in 0..11 {
            let mut one = vec![0f32; m];
            let xr = &x[t * k..(t + 1) * k];
            matmul_packed(xr, 1, &p, &mut one, &[1], &mut MatmulScratch::new()).unwrap();
            assert_eq!(one, all[t * m..(t + 1) * m]);
        }
    }
}
