//! The VNNI K-quant kernels against their scalar twins in `cpu::qdot`, bit for bit (proptest).

use proptest::prelude::*;

use super::*;
use crate::cpu::qdot::k_x86::testing::{activations, misaligned, random_blocks};
use crate::cpu::qdot::k_x86::{dot_q4_k_8x8_gemm, dot_q4_k_8x8_gemv, dot_q6_k_tiled, dot_q6_k_x86};
use crate::cpu::testutil::{quantized_rows, Rng};
use crate::DType;

type Dot = fn(&[u8], &[BlockQ8K]) -> f32;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// `n_w` weight rows of `blocks` super-blocks (quantized from random values, or random
/// bytes) against `n_act` activation rows: the rows kernel equals the single-row twin and
/// the tile equals the tile twin, bit for bit, for aligned and misaligned weights.
fn check(dtype: DType, blocks: usize, n_w: usize, n_act: usize, seed: u64, raw: bool) {
    if !super::super::has_avx512() {
        eprintln!("skipped: no AVX-512 VNNI");
        return;
    }
    let mut rng = Rng::new(seed);
    let w = if raw {
        random_blocks(&mut rng, dtype, blocks * n_w)
    } else {
        quantized_rows(&mut rng, dtype, n_w, blocks * QK_K).0
    };
    let y = activations(&mut rng, blocks * n_act, 2.0);
    let (single, multi): (Dot, Dot) = match dtype {
        DType::Q4K => (dot_q4_k_8x8_gemv, dot_q4_k_8x8_gemm),
        _ => (dot_q6_k_x86, dot_q6_k_x86),
    };
    let rb = w.len() / n_w;
    let (buf, off) = misaligned(&w);
    for wv in [&w[..], &buf[off..off + w.len()]] {
        for (t, ya) in y.chunks_exact(blocks).enumerate() {
            let want: Vec<f32> = wv.chunks_exact(rb).map(|r| single(r, ya)).collect();
            let mut got = vec![0f32; n_w];
            // SAFETY: features checked above.
            unsafe {
                match dtype {
                    DType::Q4K => rows_q4_k(wv, ya, &mut got),
                    _ => rows_q6_k(wv, ya, &mut got),
                }
            }
            assert_eq!(
                bits(&want),
                bits(&got),
                "{dtype:?} rows, act {t}: {want:?} {got:?}"
            );
        }
        if n_w <= 4 {
            let mut want = vec![0f32; n_w * n_act];
            for (r, row) in wv.chunks_exact(rb).enumerate() {
                for (t, ya) in y.chunks_exact(blocks).enumerate() {
                    want[r * n_act + t] = multi(row, ya);
                }
            }
            let mut got = vec![0f32; n_w * n_act];
            // SAFETY: features checked above.
            unsafe {
                match dtype {
                    DType::Q4K => tile_q4_k(wv, &y, n_act, &mut got),
                    _ => tile_q6_k(wv, &y, n_act, &mut got),
                }
            }
            assert_eq!(bits(&want), bits(&got), "{dtype:?} tile {n_w}x{n_act}");
            if dtype == DType::Q4K {
                for (r, row) in wv.chunks_exact(rb).enumerate() {
                    for (t, ya) in y.chunks_exact(blocks).enumerate() {
                        want[r * n_act + t] = single(row, ya);
                    }
                }
                // SAFETY: features checked above.
                unsafe { tile_q4_k_gemv(wv, &y, n_act, &mut got) };
                assert_eq!(bits(&want), bits(&got), "Q4K gemv tile {n_w}x{n_act}");
            } else {
                for (r, row) in wv.chunks_exact(rb).enumerate() {
                    for (t, ya) in y.chunks_exact(blocks).enumerate() {
                        want[r * n_act + t] = dot_q6_k_tiled(row, ya);
                    }
                }
                // SAFETY: features checked above.
                unsafe { tile_q6_k_tiled(wv, &y, n_act, &mut got) };
                assert_eq!(bits(&want), bits(&got), "Q6K tiled tile {n_w}x{n_act}");
            }
        }
    }
}

#[test]
fn kernels_equal_llama_cpp_order_twins() {
    for dtype in [DType::Q4K, DType::Q6K] {
        for (n_w, n_act) in [(1, 1), (4, 4), (3, 2), (17, 1), (33, 3)] {
            check(dtype, 3, n_w, n_act, 5 + n_w as u64, false);
            check(dtype, 2, n_w, n_act, 50 + n_w as u64, true);
        }
    }
}

#[test]
fn reduce16_sums_each_vector() {
    if !super::super::has_avx512() {
        return;
    }
    let v: [__m512i; 16] = std::array::from_fn(|i| {
        let lanes: [i32; 16] = std::array::from_fn(|l| (i as i32 + 1) * 1000 + l as i32);
        // SAFETY: AVX-512 checked above; 16 i32, unaligned load.
        unsafe { _mm512_loadu_si512(lanes.as_ptr().cast()) }
    });
    let mut out = [0i32; 16];
    // SAFETY: as above.
    unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), reduce16(&v)) };
    let want: Vec<i32> = (0..16).map(|i| 16 * (i + 1) * 1000 + 120).collect();
    assert_eq!(out.to_vec(), want);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn kernels_equal_twins_random(
        q6 in any::<bool>(), blocks in 1usize..4, n_w in 1usize..20, n_act in 1usize..5,
        seed in any::<u64>(), raw in any::<bool>()
    ) {
        let dtype = if q6 { DType::Q6K } else { DType::Q4K };
        check(dtype, blocks, n_w, n_act, seed, raw);
    }
}
