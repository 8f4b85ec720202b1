//! Every SIMD level's q8_0-family, K-quant and IQ table entries against the scalar twins, bit
//! for bit, on whatever architecture the tests run (x86-64 natively, aarch64 under qemu).

use bytemuck::Zeroable;
use kestrel_gguf::quant::BlockQ8_0;
use proptest::prelude::*;

use crate::cpu::isa::Isa;
use crate::cpu::kernel_table::Kernels;
use crate::cpu::q8::{self, BlockQ8_1};
use crate::cpu::testutil::{quantized_row, Rng};
use crate::DType;

/// `m` random weight rows of `dtype` (also at an odd byte offset) against q8_0 / q8_1
/// activations: every ISA's row kernel equals the scalar twin bit for bit.
fn check(dtype: DType, k: usize, m: usize, seed: u64, scale: f32) {
    let mut rng = Rng::new(seed);
    let mut w = Vec::new();
    for _ in 0..m {
        w.extend(quantized_row(&mut rng, dtype, k).0);
    }
    let mut shifted = vec![0u8; w.len() + 1];
    shifted[1..].copy_from_slice(&w);
    let x = rng.vec(k, scale);
    let mut y0 = vec![BlockQ8_0::zeroed(); k / 32];
    let mut y1 = vec![BlockQ8_1::zeroed(); k / 32];
    q8::quantize_row_q8_0(&x, &mut y0);
    q8::quantize_row_q8_1(&x, &mut y1);
    let run = |kern: &Kernels, row: &[u8]| {
        let mut out = vec![0f32; m];
        match dtype {
            DType::Q4_0 => (kern.q4_0.rows)(row, &y0, &mut out),
            DType::Q5_0 => (kern.q5_0.rows)(row, &y0, &mut out),
            DType::Q8_0 => (kern.q8_0.rows)(row, &y0, &mut out),
            DType::Q4_1 => (kern.q4_1.rows)(row, &y1, &mut out),
            DType::Q5_1 => (kern.q5_1.rows)(row, &y1, &mut out),
            _ => unreachable!(),
        }
        out
    };
    let scalar = Kernels::for_isa(Isa::Scalar).unwrap();
    let want = run(&scalar, &w);
    for isa in Isa::available() {
        let simd = Kernels::for_isa(isa).unwrap();
        for row in [&w[..], &shifted[1..]] {
            let got = run(&simd, row);
            for (r, (a, b)) in want.iter().zip(&got).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{dtype:?} k={k} row {r} of {m} seed={seed} {}: scalar {a} simd {b}",
                    isa.name()
                );
            }
        }
    }
}

/// 1 to 4 weight rows against 1 to 8 activation rows: the tile kernels equal the scalar
/// twins bit for bit.
fn check_tile(dtype: DType, k: usize, seed: u64, scale: f32) {
    use crate::cpu::kernel_table::{MAX_TILE_ACTS, MAX_TILE_ROWS};
    let mut rng = Rng::new(seed);
    let mut w = Vec::new();
    for _ in 0..4 {
        w.extend(quantized_row(&mut rng, dtype, k).0);
    }
    let nb = k / 32;
    let shapes = (1..=MAX_TILE_ROWS).flat_map(|nw| (1..=MAX_TILE_ACTS).map(move |tn| (nw, tn)));
    for (nw, tn) in shapes {
        let x = rng.vec(k * tn, scale);
        let mut y0 = vec![BlockQ8_0::zeroed(); nb * tn];
        let mut y1 = vec![BlockQ8_1::zeroed(); nb * tn];
        q8::quantize_row_q8_0(&x, &mut y0);
        q8::quantize_row_q8_1(&x, &mut y1);
        let run = |kern: &Kernels| {
            let mut out = vec![0f32; nw * tn];
            let w = &w[..nw * w.len() / 4];
            match dtype {
                DType::Q4_0 => (kern.q4_0.tile)(w, &y0, tn, &mut out),
                DType::Q5_0 => (kern.q5_0.tile)(w, &y0, tn, &mut out),
                DType::Q8_0 => (kern.q8_0.tile)(w, &y0, tn, &mut out),
                DType::Q4_1 => (kern.q4_1.tile)(w, &y1, tn, &mut out),
                DType::Q5_1 => (kern.q5_1.tile)(w, &y1, tn, &mut out),
                _ => unreachable!(),
            }
            out
        };
        let want = run(&Kernels::for_isa(Isa::Scalar).unwrap());
        for isa in Isa::available() {
            let kern = Kernels::for_isa(isa).unwrap();
            let (rows, acts) = match dtype {
                DType::Q4_0 => (kern.q4_0.tile_rows, kern.q4_0.tile_acts),
                DType::Q5_0 => (kern.q5_0.tile_rows, kern.q5_0.tile_acts),
                DType::Q8_0 => (kern.q8_0.tile_rows, kern.q8_0.tile_acts),
                DType::Q4_1 => (kern.q4_1.tile_rows, kern.q4_1.tile_acts),
                _ => (kern.q5_1.tile_rows, kern.q5_1.tile_acts),
            };
            // The widened variant: the rows widened to Q8_0 blocks, then its tile.
            let widened = match dtype {
                DType::Q4_0 => kern.q4_0.widened,
                DType::Q5_0 => kern.q5_0.widened,
                DType::Q8_0 => kern.q8_0.widened,
                _ => None,
            };
            if let Some(wd) = widened.filter(|wd| nw <= wd.shape.0 && tn <= wd.shape.1) {
                let w = &w[..nw * w.len() / 4];
                let wide = match wd.widen {
                    Some(widen) => {
                        let mut wide = vec![0u8; nw * nb * 34];
                        widen(w, &mut wide);
                        wide
                    }
                    None => w.to_vec(),
                };
                let mut got = vec![0f32; nw * tn];
                (wd.tile)(&wide, &y0, tn, &mut got);
                let same = want
                    .iter()
                    .zip(&got)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{dtype:?} k={k} widened tile {tn} {}: {want:?} vs {got:?}",
                    isa.name()
                );
            }
            if nw > rows || tn > acts {
                continue;
            }
            let got = run(&kern);
            let same = want
                .iter()
                .zip(&got)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same,
                "{dtype:?} k={k} tile {tn} {}: {want:?} vs {got:?}",
                isa.name()
            );
            // The prepared variant: prepared by a call over other rows (all 4, or 1),
            // then reused for these.
            let prepped = |prep: &mut crate::cpu::kernel_table::PrepBuf, rows: usize, fresh| {
                let mut out = vec![0f32; rows * tn];
                let w = &w[..rows * w.len() / 4];
                let done = match dtype {
                    DType::Q4_0 => kern
                        .q4_0
                        .prepped
                        .map(|f| f(w, &y0, tn, &mut out, prep, fresh)),
                    DType::Q5_0 => kern
                        .q5_0
                        .prepped
                        .map(|f| f(w, &y0, tn, &mut out, prep, fresh)),
                    DType::Q8_0 => kern
                        .q8_0
                        .prepped
                        .map(|f| f(w, &y0, tn, &mut out, prep, fresh)),
                    DType::Q4_1 => kern
                        .q4_1
                        .prepped
                        .map(|f| f(w, &y1, tn, &mut out, prep, fresh)),
                    _ => kern
                        .q5_1
                        .prepped
                        .map(|f| f(w, &y1, tn, &mut out, prep, fresh)),
                };
                done.map(|_| out)
            };
            for first in [4, 1] {
                let mut prep = Vec::new();
                if prepped(&mut prep, first, true).is_none() {
                    break;
                }
                let got = prepped(&mut prep, nw, false).unwrap_or_default();
                assert!(
                    want.iter()
                        .zip(&got)
                        .all(|(a, b)| a.to_bits() == b.to_bits())
                        && got.len() == want.len(),
                    "{dtype:?} k={k} prepped tile {nw}x{tn} {}: {want:?} vs {got:?}",
                    isa.name()
                );
            }
        }
    }
}

#[test]
fn q8_family_tiles_equal_scalar_twin() {
    for dtype in TYPES {
        for (i, k) in [32usize, 640, 2048].into_iter().enumerate() {
            check_tile(dtype, k, 40 + i as u64, 2.0);
        }
    }
}

/// The K-quant table entries (rows, tiles, single-row and wide-step tiles) equal the scalar
/// twins bit for bit.
#[test]
fn kquant_table_entries_equal_scalar_twins() {
    for (i, k) in [256usize, 512, 1024].into_iter().enumerate() {
        check_kquants(77 + i as u64, k, 1.0);
    }
}

/// 3 rows of each K-quant type × 3 activation rows of `k` values: every ISA's table entries
/// equal the scalar twins'.
fn check_kquants(seed: u64, k: usize, scale: f32) {
    use kestrel_gguf::quant::BlockQ8K;
    let mut rng = Rng::new(seed);
    for dtype in [DType::Q2K, DType::Q3K, DType::Q4K, DType::Q5K, DType::Q6K] {
        let mut w = Vec::new();
        for _ in 0..3 {
            w.extend(quantized_row(&mut rng, dtype, k).0);
        }
        let x = rng.vec(k * 3, scale);
        let mut y = vec![BlockQ8K::zeroed(); k / 256 * 3];
        q8::quantize_row_q8_k(&x, &mut y);
        let pick = |kern: &Kernels| match dtype {
            DType::Q2K => kern.q2_k,
            DType::Q3K => kern.q3_k,
            DType::Q4K => kern.q4_k,
            DType::Q5K => kern.q5_k,
            _ => kern.q6_k,
        };
        let run = |kern: &Kernels| {
            let t = pick(kern);
            let mut rows = vec![0f32; 3];
            (t.rows)(&w, &y[..k / 256], &mut rows);
            let mut tile = vec![0f32; 3];
            (t.tile)(&w[..w.len() / 3], &y, 3, &mut tile);
            // The single-row and wide-step entries where the type has them.
            if let Some(single) = t.single {
                let mut one = vec![0f32; 3];
                single(&w[..w.len() / 3], &y, 3, &mut one);
                tile.extend(one);
            }
            if let Some((_, wide)) = t.wide {
                let mut many = vec![0f32; 3];
                wide(&w[..w.len() / 3], &y, 3, &mut many);
                tile.extend(many);
            }
            (rows, tile)
        };
        let want = run(&Kernels::for_isa(Isa::Scalar).unwrap());
        for isa in Isa::available() {
            let got = run(&Kernels::for_isa(isa).unwrap());
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&want.0), bits(&got.0), "{dtype:?} rows {}", isa.name());
            assert_eq!(bits(&want.1), bits(&got.1), "{dtype:?} tile {}", isa.name());
        }
    }
}

const TYPES: [DType; 5] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
];

#[test]
fn q8_family_simd_equals_scalar_twin() {
    eprintln!("ISAs on this CPU: {:?}", Isa::available());
    for dtype in TYPES {
        // 8192: past the decode rows' stack-prepared activations (128 blocks).
        for (i, k) in [32usize, 64, 640, 2048, 8192].into_iter().enumerate() {
            check(dtype, k, 1 + 2 * i, 7 + i as u64, 1.0);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn q8_family_simd_equals_scalar_twin_random(
        t in 0usize..5, blocks in 1usize..40, m in 1usize..10, seed in any::<u64>(),
        scale in 1e-3f32..1e3
    ) {
        check(TYPES[t], blocks * 32, m, seed, scale);
    }

    #[test]
    fn kquant_table_entries_equal_scalar_twins_random(
        blocks in 1usize..5, seed in any::<u64>(), scale in 1e-3f32..1e3
    ) {
        check_kquants(seed, blocks * 256, scale);
    }

    #[test]
    fn q8_family_tiles_equal_scalar_twin_random(
        t in 0usize..5, blocks in 1usize..12, seed in any::<u64>(), scale in 1e-3f32..1e3
    ) {
        check_tile(TYPES[t], blocks * 32, seed, scale);
    }
}

/// IQ4_NL and MXFP4 (q8_0 activations) and IQ4_XS (q8_K) table entries on aarch64 against
/// the scalar twins, bit for bit: 3 weight rows (also at an odd byte offset) × 3 activation
/// rows, rows and tiles. (x86-64's kernels are checked against the same twins in `x86_64`.)
#[cfg(target_arch = "aarch64")]
fn check_iq4(seed: u64, xs_blocks: usize, nl_blocks: usize, scale: f32) {
    use kestrel_gguf::quant::BlockQ8K;
    let mut rng = Rng::new(seed);
    for dtype in [DType::IQ4NL, DType::MXFP4, DType::IQ4XS] {
        // IQ4_NL's and MXFP4's rows of an odd block count end in the twin's lone last block.
        let k = if dtype != DType::IQ4XS {
            32 * nl_blocks
        } else {
            256 * xs_blocks
        };
        let mut w = Vec::new();
        for _ in 0..3 {
            w.extend(quantized_row(&mut rng, dtype, k).0);
        }
        let mut shifted = vec![0u8; w.len() + 1];
        shifted[1..].copy_from_slice(&w);
        let x = rng.vec(k * 3, scale);
        let mut y0 = vec![BlockQ8_0::zeroed(); k / 32 * 3];
        q8::quantize_row_q8_0(&x, &mut y0);
        let mut yk = vec![BlockQ8K::zeroed(); k / 256 * 3];
        if dtype == DType::IQ4XS {
            q8::quantize_row_q8_k(&x, &mut yk);
        }
        let run = |kern: &Kernels, w: &[u8]| {
            let (mut rows, mut tile) = (vec![0f32; 3], vec![0f32; 9]);
            if dtype != DType::IQ4XS {
                let t = if dtype == DType::IQ4NL {
                    kern.iq4_nl
                } else {
                    kern.mxfp4
                };
                (t.rows)(w, &y0[..k / 32], &mut rows);
                (t.tile)(w, &y0, 3, &mut tile);
            } else {
                (kern.iq4_xs.rows)(w, &yk[..k / 256], &mut rows);
                (kern.iq4_xs.tile)(w, &yk, 3, &mut tile);
            }
            (rows, tile)
        };
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        let want = run(&Kernels::for_isa(Isa::Scalar).unwrap(), &w);
        for isa in Isa::available() {
            for row in [&w[..], &shifted[1..]] {
                let got = run(&Kernels::for_isa(isa).unwrap(), row);
                assert_eq!(bits(&want.0), bits(&got.0), "{dtype:?} rows {}", isa.name());
                assert_eq!(bits(&want.1), bits(&got.1), "{dtype:?} tile {}", isa.name());
            }
        }
    }
}

#[cfg(target_arch = "aarch64")]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn iq4_table_entries_equal_scalar_twins_random(
        xs_blocks in 1usize..5, nl_blocks in 1usize..40, seed in any::<u64>(),
        scale in 1e-3f32..1e3
    ) {
        check_iq4(seed, xs_blocks, nl_blocks, scale);
    }
}

/// A prefill matmul through the widened rows (Q4_0, Q5_0 with AVX2: each task widens its rows
/// to Q8_0 blocks once) gives the scalar twins' bits, for every row of several tasks.
#[test]
fn widened_prefill_matmuls_give_the_scalar_bits() {
    use crate::cpu::matmul::{matmul_q_with, MatmulScratch};
    use crate::cpu::qdot::{QDot, DQ4_0, DQ5_0, DQ8_0};
    fn run<D: QDot>(
        pick: impl Fn(&Kernels) -> crate::cpu::kernel_table::TypeKernels<D::Act>,
        dtype: DType,
    ) {
        let (k, m, n) = (96, 150, 37);
        let mut rng = Rng::new(9);
        let mut w = Vec::new();
        for _ in 0..m {
            w.extend(quantized_row(&mut rng, dtype, k).0);
        }
        let row_bytes = w.len() / m;
        let x = rng.vec(n * k, 2.0);
        let go = |kern: &Kernels| {
            let mut out = vec![0f32; n * m];
            let mut scratch = MatmulScratch::new();
            // Two sequences: the rows' numerics follow their own segment only.
            matmul_q_with::<D>(
                pick(kern),
                &x,
                n,
                k,
                &w,
                row_bytes,
                m,
                &mut out,
                &[20, 17],
                &mut scratch,
            );
            out
        };
        let want = go(&Kernels::for_isa(Isa::Scalar).unwrap());
        for isa in Isa::available() {
            let kern = Kernels::for_isa(isa).unwrap();
            let got = go(&kern);
            let bad = want
                .iter()
                .zip(&got)
                .position(|(a, b)| a.to_bits() != b.to_bits());
            assert_eq!(
                bad,
                None,
                "{dtype:?} {}: first differing output",
                isa.name()
            );
        }
    }
    run::<DQ4_0>(|k| k.q4_0, DType::Q4_0);
    run::<DQ5_0>(|k| k.q5_0, DType::Q5_0);
    run::<DQ8_0>(|k| k.q8_0, DType::Q8_0);
}

/// The IQ grid types' table entries (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S: AVX2 on x86-64,
/// NEON and dotprod on aarch64) against their scalar twins.
mod iq_grid {
    use bytemuck::Zeroable;

    use crate::cpu::isa::Isa;
    use crate::cpu::kernel_table::{Kernels, TypeKernels};
    use crate::cpu::q8;
    use crate::cpu::qdot::iq::{dot_iq2_s, dot_iq2_xs, dot_iq2_xxs, dot_iq3_s, dot_iq3_xxs};
    use crate::cpu::testutil::{quantized_row, Rng};
    use crate::DType;

    use kestrel_gguf::quant::{BlockQ8K, QK_K};

    type Dot = fn(&[u8], &[BlockQ8K]) -> f32;

    fn pick(k: &Kernels, dtype: DType) -> (TypeKernels<BlockQ8K>, Dot) {
        match dtype {
            DType::IQ2XXS => (k.iq2_xxs, dot_iq2_xxs),
            DType::IQ2XS => (k.iq2_xs, dot_iq2_xs),
            DType::IQ2S => (k.iq2_s, dot_iq2_s),
            DType::IQ3XXS => (k.iq3_xxs, dot_iq3_xxs),
            _ => (k.iq3_s, dot_iq3_s),
        }
    }

    /// `m` weight rows against `n_act` activation rows, aligned and shifted by one byte: every
    /// ISA's rows and tile kernels equal the scalar twin's dots bit for bit.
    fn check(dtype: DType, k: usize, m: usize, n_act: usize, seed: u64, scale: f32) {
        let mut rng = Rng::new(seed);
        let mut w = Vec::new();
        for _ in 0..m {
            w.extend(quantized_row(&mut rng, dtype, k).0);
        }
        let mut shifted = vec![0u8; w.len() + 1];
        shifted[1..].copy_from_slice(&w);
        let x = rng.vec(k * n_act, scale);
        let mut y = vec![BlockQ8K::zeroed(); k / QK_K * n_act];
        q8::quantize_row_q8_k(&x, &mut y);
        let nb = k / QK_K;
        let rb = w.len() / m;
        let dot = pick(&Kernels::for_isa(Isa::Scalar).unwrap(), dtype).1;
        let mut want = vec![0f32; m * n_act];
        for r in 0..m {
            for t in 0..n_act {
                want[r * n_act + t] = dot(&w[r * rb..(r + 1) * rb], &y[t * nb..(t + 1) * nb]);
            }
        }
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        for isa in Isa::available() {
            let kern = pick(&Kernels::for_isa(isa).unwrap(), dtype).0;
            for row in [&w[..], &shifted[1..]] {
                let mut got = vec![0f32; m * n_act];
                (kern.tile)(row, &y, n_act, &mut got);
                assert_eq!(bits(&want), bits(&got), "{dtype:?} tile {}", isa.name());
                if n_act == 1 {
                    let mut got = vec![0f32; m];
                    (kern.rows)(row, &y, &mut got);
                    assert_eq!(bits(&want), bits(&got), "{dtype:?} rows {}", isa.name());
                }
            }
        }
    }

    #[test]
    fn grid_kernels_equal_the_scalar_twins() {
        for dtype in [
            DType::IQ2XXS,
            DType::IQ2XS,
            DType::IQ2S,
            DType::IQ3XXS,
            DType::IQ3S,
        ] {
            for (seed, k, m, n_act) in [(1u64, 256, 3, 1), (2, 512, 4, 3), (3, 1024, 2, 8)] {
                for scale in [1.0f32, 1e-3, 40.0] {
                    check(dtype, k, m, n_act, seed, scale);
                }
            }
        }
    }

    /// Every index, sign and scale bit reaches the result: flipping any one bit of a block
    /// changes the scalar twin's dot and the kernel's the same way.
    #[test]
    fn every_bit_of_a_block_is_read_as_the_twin_reads_it() {
        let mut rng = Rng::new(11);
        let x = rng.vec(QK_K, 1.0);
        let mut y = vec![BlockQ8K::zeroed(); 1];
        q8::quantize_row_q8_k(&x, &mut y);
        for dtype in [
            DType::IQ2XXS,
            DType::IQ2XS,
            DType::IQ2S,
            DType::IQ3XXS,
            DType::IQ3S,
        ] {
            let w = quantized_row(&mut rng, dtype, QK_K).0;
            for isa in Isa::available() {
                let (kern, dot) = pick(&Kernels::for_isa(isa).unwrap(), dtype);
                // The bytes after the f16 scale.
                for byte in 2..w.len() {
                    for bit in 0..8 {
                        let mut v = w.clone();
                        v[byte] ^= 1 << bit;
                        let mut got = [0f32];
                        (kern.rows)(&v, &y, &mut got);
                        assert_eq!(
                            got[0].to_bits(),
                            dot(&v, &y).to_bits(),
                            "{dtype:?} {} byte {byte} bit {bit}",
                            isa.name()
                        );
                    }
                }
            }
        }
    }
}
