//! x86-64 SIMD kernels, one module per instruction set: [`avx2`] (AVX2 + FMA + F16C) and
//! [`avx512`] (the same kernels with AVX-512 VNNI's `vpdpbusd` summing four byte products per
//! lane in one instruction). Both are instantiated from the one kernel body in
//! [`q8_family`], so the two sets cannot drift apart; each is bit-identical to its scalar twin
//! in `cpu::qdot` (tests below).
//!
//! The kernels are `unsafe` (they need CPU features); [`avx2_kernels`] / [`avx512_kernels`]
//! wrap them in safe functions that [`super::dispatch`] only hands out once the features were
//! detected.

#[macro_use]
mod q8_family;

pub(crate) mod avx2;
pub(crate) mod avx2_kquants;
pub(crate) mod avx512;
pub(crate) mod f16_ops;
pub(crate) mod f16_ops_avx2;
pub(crate) mod iq4;
pub(crate) mod iq_grid;
pub(crate) mod kquants;
pub(crate) mod kquants_vnni;
pub(crate) mod nibblex16_avx2;
pub(crate) mod q4_kx16;
pub(crate) mod q6_kx16;
pub(crate) mod q8_familyx16;
pub(crate) mod q8_wide;
pub(crate) mod quantize;
pub(crate) mod silu;

use super::dispatch::{Kernels, TypeKernels};

/// How far ahead of the block being computed the packed kernels prefetch (bytes). Measured on
/// Gemma 3 270M's tied 262144-row Q8_0 output matrix, 8 sequences a step: 4 KiB 6.9 ms a step,
/// 6-12 KiB 6.2 ms (one sequence: 5.9 ms, the read bandwidth), prefetching each next 16-row
/// group whole at its start 10.0 ms, no software prefetch 12.6 ms.
pub(crate) const PREFETCH_AHEAD: usize = 8192;

/// Prefetches the `len` bytes [`PREFETCH_AHEAD`] past `block` (a packed kernel's current block
/// of quants, `len` its size): the rest of the group and the next one (groups are back to back)
/// arrive as a steady stream, whatever the activation row count.
#[inline(always)]
pub(crate) fn prefetch_ahead(block: *const u8, len: usize) {
    super::matmul::prefetch_range(block.wrapping_add(PREFETCH_AHEAD), len);
}

/// AVX2 + FMA + F16C.
pub(crate) fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

/// [`has_avx2`] plus AVX-512 F/BW/VL and VNNI.
pub(crate) fn has_avx512() -> bool {
    has_avx2()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

/// Safe wrappers over one ISA module's kernels: each calls the `unsafe` kernel, which is sound
/// because the wrappers are only reachable through a table built after detection.
macro_rules! safe_table {
    ($isa:ident, $detect:ident, $base:expr, $variant:expr) => {{
        mod wrap {
            use kestrel_gguf::quant::BlockQ8_0;

            use crate::cpu::q8::BlockQ8_1;

            pub(super) fn q4_0(w: &[u8], y: &[BlockQ8_0], out: &mut [f32]) {
                // SAFETY: only called through a table made when the features were detected.
                unsafe { super::$isa::rows_q4_0(w, y, out) }
            }
            pub(super) fn q4_0_tile(w: &[u8], y: &[BlockQ8_0], n_act: usize, out: &mut [f32]) {
                // SAFETY: as above.
                unsafe { super::$isa::tile_q4_0(w, y, n_act, out) }
            }
            pub(super) fn q4_1(w: &[u8], y: &[BlockQ8_1], out: &mut [f32]) {
                // SAFETY: only called through a table made when the features were detected.
                unsafe { super::$isa::rows_q4_1(w, y, out) }
            }
            pub(super) fn q4_1_tile(w: &[u8], y: &[BlockQ8_1], n_act: usize, out: &mut [f32]) {
                // SAFETY: as above.
                unsafe { super::$isa::tile_q4_1(w, y, n_act, out) }
            }
            pub(super) fn q5_0(w: &[u8], y: &[BlockQ8_0], out: &mut [f32]) {
                // SAFETY: only called through a table made when the features were detected.
                unsafe { super::$isa::rows_q5_0(w, y, out) }
            }
            pub(super) fn q5_0_tile(w: &[u8], y: &[BlockQ8_0], n_act: usize, out: &mut [f32]) {
                // SAFETY: as above.
                unsafe { super::$isa::tile_q5_0(w, y, n_act, out) }
            }
            pub(super) fn q5_1(w: &[u8], y: &[BlockQ8_1], out: &mut [f32]) {
                // SAFETY: only called through a table made when the features were detected.
                unsafe { super::$isa::rows_q5_1(w, y, out) }
            }
            pub(super) fn q5_1_tile(w: &[u8], y: &[BlockQ8_1], n_act: usize, out: &mut [f32]) {
                // SAFETY: as above.
                unsafe { super::$isa::tile_q5_1(w, y, n_act, out) }
            }
            pub(super) fn q8_0(w: &[u8], y: &[BlockQ8_0], out: &mut [f32]) {
                // SAFETY: only called through a table made when the features were detected.
                unsafe { super::$isa::rows_q8_0(w, y, out) }
            }
            pub(super) fn q8_0_tile(w: &[u8], y: &[BlockQ8_0], n_act: usize, out: &mut [f32]) {
                // SAFETY: as above.
                unsafe { super::$isa::tile_q8_0(w, y, n_act, out) }
            }
        }
        assert!(
            $detect(),
            "{} kernels requested on a CPU without them",
            stringify!($isa)
        );
        Kernels {
            isa: $variant,
            q4_0: TypeKernels {
                rows: wrap::q4_0,
                tile: wrap::q4_0_tile,
                tile_rows: $isa::TILE_ROWS,
                tile_acts: 4,
                single: None,
                wide: None,
                prepped: None,
            },
            q4_1: TypeKernels {
                rows: wrap::q4_1,
                tile: wrap::q4_1_tile,
                tile_rows: $isa::TILE_ROWS,
                tile_acts: 4,
                single: None,
                wide: None,
                prepped: None,
            },
            q5_0: TypeKernels {
                rows: wrap::q5_0,
                tile: wrap::q5_0_tile,
                tile_rows: $isa::TILE_ROWS,
                tile_acts: 4,
                single: None,
                wide: None,
                prepped: None,
            },
            q5_1: TypeKernels {
                rows: wrap::q5_1,
                tile: wrap::q5_1_tile,
                tile_rows: $isa::TILE_ROWS,
                tile_acts: 4,
                single: None,
                wide: None,
                prepped: None,
            },
            q8_0: TypeKernels {
                rows: wrap::q8_0,
                tile: wrap::q8_0_tile,
                tile_rows: $isa::TILE_ROWS,
                tile_acts: 4,
                single: None,
                wide: None,
                prepped: None,
            },
            ..$base
        }
    }};
}

/// `base` with the IQ and MXFP4 kernels ([`iq4`], [`iq_grid`]) where the CPU has AVX2.
pub(crate) fn with_iq(base: Kernels) -> Kernels {
    iq_grid::with_iq_grid(iq4::with_iq4(base))
}

/// The AVX2 table over `base` (types without an AVX2 kernel keep `base`'s).
///
/// # Panics
/// If the CPU lacks AVX2/FMA/F16C (callers check [`has_avx2`] first).
pub(crate) fn avx2_kernels(base: Kernels) -> Kernels {
    avx2_kquants::with_kquants(safe_table!(
        avx2,
        has_avx2,
        base,
        super::dispatch::Isa::Avx2
    ))
}

/// The AVX-512 table over `base`.
///
/// # Panics
/// If the CPU lacks the features of [`has_avx512`].
pub(crate) fn avx512_kernels(base: Kernels) -> Kernels {
    use kestrel_gguf::quant::BlockQ8K;

    macro_rules! kquant {
        ($rows:ident, $tile:ident, $dot:ident, $tile_kernel:ident) => {
            fn $rows(w: &[u8], y: &[BlockQ8K], out: &mut [f32]) {
                super::dispatch::rows_by_dot(w, y, out, |wr, y| {
                    // SAFETY: only reachable through this table, made after detection.
                    unsafe { kquants::$dot(wr, y) }
                })
            }
            fn $tile(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
                // SAFETY: as above.
                unsafe { kquants::$tile_kernel(w, y, n_act, out) }
            }
        };
    }
    kquant!(q5_k_rows, q5_k_tile, dot_q5_k, tile_q5_k);
    macro_rules! vnni {
        ($name:ident, $args:tt) => {
            vnni!(@ $name $args);
        };
        (@ $name:ident (w, y, out)) => {
            fn $name(w: &[u8], y: &[BlockQ8K], out: &mut [f32]) {
                // SAFETY: only reachable through this table, made after detection.
                unsafe { kquants_vnni::$name(w, y, out) }
            }
        };
        (@ $name:ident (w, y, n_act, out)) => {
            fn $name(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
                // SAFETY: as above.
                unsafe { kquants_vnni::$name(w, y, n_act, out) }
            }
        };
    }
    vnni!(rows_q4_k, (w, y, out));
    vnni!(tile_q4_k, (w, y, n_act, out));
    vnni!(tile_q4_k_gemv, (w, y, n_act, out));
    vnni!(rows_q6_k, (w, y, out));
    vnni!(tile_q6_k, (w, y, n_act, out));
    vnni!(tile_q6_k_tiled, (w, y, n_act, out));
    macro_rules! wide {
        ($rows:ident, $name:ident, $prepped:ident, $act:ty) => {
            fn $rows(w: &[u8], y: &[$act], out: &mut [f32]) {
                // SAFETY: only reachable through this table, made after detection.
                unsafe { q8_wide::$rows(w, y, out) }
            }
            fn $name(w: &[u8], y: &[$act], n_act: usize, out: &mut [f32]) {
                // SAFETY: as above.
                unsafe { q8_wide::$name(w, y, n_act, out) }
            }
            fn $prepped(
                w: &[u8],
                y: &[$act],
                n_act: usize,
                out: &mut [f32],
                prep: &mut super::dispatch::PrepBuf,
                fresh: bool,
            ) {
                // SAFETY: as above.
                unsafe { q8_wide::$prepped(w, y, n_act, out, prep, fresh) }
            }
        };
    }
    wide!(
        rows_q4_0,
        tile_q4_0,
        prepped_q4_0,
        kestrel_gguf::quant::BlockQ8_0
    );
    wide!(
        rows_q4_1,
        tile_q4_1,
        prepped_q4_1,
        crate::cpu::q8::BlockQ8_1
    );
    wide!(
        rows_q5_0,
        tile_q5_0,
        prepped_q5_0,
        kestrel_gguf::quant::BlockQ8_0
    );
    wide!(
        rows_q5_1,
        tile_q5_1,
        prepped_q5_1,
        crate::cpu::q8::BlockQ8_1
    );
    wide!(
        rows_q8_0,
        tile_q8_0,
        prepped_q8_0,
        kestrel_gguf::quant::BlockQ8_0
    );
    let base = safe_table!(avx512, has_avx512, base, super::dispatch::Isa::Avx512);
    // The q8_0 family's decode rows and prefill tiles (two activation rows per 512-bit register).
    fn wide<A>(
        rows: super::dispatch::RowsFn<A>,
        tile: super::dispatch::TileFn<A>,
        prepped: super::dispatch::PreppedTileFn<A>,
    ) -> TypeKernels<A> {
        TypeKernels {
            rows,
            tile,
            tile_rows: q8_wide::WIDE_ROWS,
            tile_acts: q8_wide::WIDE_ACTS,
            single: None,
            wide: None,
            prepped: Some(prepped),
        }
    }
    Kernels {
        q4_0: wide(rows_q4_0, tile_q4_0, prepped_q4_0),
        q4_1: wide(rows_q4_1, tile_q4_1, prepped_q4_1),
        q5_0: wide(rows_q5_0, tile_q5_0, prepped_q5_0),
        q5_1: wide(rows_q5_1, tile_q5_1, prepped_q5_1),
        q8_0: wide(rows_q8_0, tile_q8_0, prepped_q8_0),
        // llama.cpp's orders for Q4_K (repacked gemv / gemm) and Q6_K (x86 vec_dot, tiled).
        q4_k: TypeKernels {
            rows: rows_q4_k,
            tile: tile_q4_k,
            tile_rows: 4,
            tile_acts: 4,
            single: Some(tile_q4_k_gemv),
            wide: None,
            prepped: None,
        },
        q5_k: TypeKernels {
            rows: q5_k_rows,
            tile: q5_k_tile,
            tile_rows: 4,
            tile_acts: 4,
            single: None,
            wide: None,
            prepped: None,
        },
        q6_k: TypeKernels {
            rows: rows_q6_k,
            tile: tile_q6_k,
            tile_rows: 4,
            tile_acts: 4,
            single: None,
            // b11434's tiled K-quant matmul for sequences of 8 rows or more.
            wide: Some((super::dispatch::TILED_MIN_ROWS, tile_q6_k_tiled)),
            prepped: None,
        },
        ..base
    }
}

#[cfg(test)]
mod tests {
    use bytemuck::Zeroable;
    use kestrel_gguf::quant::BlockQ8_0;
    use proptest::prelude::*;

    use crate::cpu::dispatch::{Isa, Kernels};
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
        use crate::cpu::dispatch::{MAX_TILE_ACTS, MAX_TILE_ROWS};
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
                let prepped = |prep: &mut crate::cpu::dispatch::PrepBuf, rows: usize, fresh| {
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
        use kestrel_gguf::quant::BlockQ8K;
        let mut rng = Rng::new(77);
        let k = 512;
        for dtype in [DType::Q2K, DType::Q3K, DType::Q4K, DType::Q5K, DType::Q6K] {
            let mut w = Vec::new();
            for _ in 0..3 {
                w.extend(quantized_row(&mut rng, dtype, k).0);
            }
            let x = rng.vec(k * 3, 1.0);
            let mut y = vec![BlockQ8K::zeroed(); 2 * 3];
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
                (t.rows)(&w, &y[..2], &mut rows);
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
        fn q8_family_tiles_equal_scalar_twin_random(
            t in 0usize..5, blocks in 1usize..12, seed in any::<u64>(), scale in 1e-3f32..1e3
        ) {
            check_tile(TYPES[t], blocks * 32, seed, scale);
        }
    }
}
