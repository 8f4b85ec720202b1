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
pub(crate) mod kquant_lanes_avx2;
pub(crate) mod kquants;
pub(crate) mod kquants_vnni;
pub(crate) mod q8_wide;
pub(crate) mod silu;

use super::kernel_table::{Kernels, TypeKernels};

pub(crate) use super::isa::{has_avx2, has_avx512};
pub(crate) use super::prefetch::prefetch_ahead;

/// `base` with the IQ and MXFP4 kernels ([`iq4`], [`iq_grid`]) where the CPU has AVX2.
pub(crate) fn with_iq(base: Kernels) -> Kernels {
    iq_grid::with_iq_grid(iq4::with_iq4(base))
}

/// The AVX2 table over `base` (types without an AVX2 kernel keep `base`'s).
///
/// # Panics
/// If the CPU lacks AVX2/FMA/F16C (callers check [`has_avx2`] first).
pub(crate) fn avx2_kernels(base: Kernels) -> Kernels {
    let mut k = safe_table!(avx2, has_avx2, base, super::isa::Isa::Avx2);
    // Tiles of 2 weight rows × 4 activation rows (each weight block unpacked once for 4 rows:
    // a batched decode step); for prefill 4 × 2 (`tile4x2`: its accumulators stay in
    // registers) over Q8_0 rows, the Q4_0 and Q5_0 rows widened to Q8_0 blocks once.
    for t in [&mut k.q4_0, &mut k.q5_0, &mut k.q8_0] {
        (t.tile_rows, t.tile_acts) = (2, 4);
    }
    fn widen_q4_0(w: &[u8], out: &mut [u8]) {
        // SAFETY: only reachable through this table, made after detection.
        unsafe { avx2::widen_q4_0(w, out) }
    }
    fn widen_q5_0(w: &[u8], out: &mut [u8]) {
        // SAFETY: as above.
        unsafe { avx2::widen_q5_0(w, out) }
    }
    let q8 = k.q8_0.tile;
    k.q4_0.widened = Some(super::kernel_table::Widened {
        widen: Some(widen_q4_0),
        tile: q8,
        shape: (4, 2),
    });
    k.q5_0.widened = Some(super::kernel_table::Widened {
        widen: Some(widen_q5_0),
        tile: q8,
        shape: (4, 2),
    });
    k.q8_0.widened = Some(super::kernel_table::Widened {
        widen: None,
        tile: q8,
        shape: (4, 2),
    });
    for t in [&mut k.q4_1, &mut k.q5_1] {
        (t.tile_rows, t.tile_acts) = (2, 4);
    }
    avx2_kquants::with_kquants(k)
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
                super::kernel_table::rows_by_dot(w, y, out, |wr, y| {
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
                prep: &mut super::kernel_table::PrepBuf,
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
    let base = safe_table!(avx512, has_avx512, base, super::isa::Isa::Avx512);
    // The q8_0 family's decode rows and prefill tiles (two activation rows per 512-bit register).
    fn wide<A>(
        rows: super::kernel_table::RowsFn<A>,
        tile: super::kernel_table::TileFn<A>,
        prepped: super::kernel_table::PreppedTileFn<A>,
    ) -> TypeKernels<A> {
        TypeKernels {
            rows,
            tile,
            tile_rows: q8_wide::WIDE_ROWS,
            tile_acts: q8_wide::WIDE_ACTS,
            single: None,
            wide: None,
            prepped: Some(prepped),
            widened: None,
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
            widened: None,
        },
        q5_k: TypeKernels {
            rows: q5_k_rows,
            tile: q5_k_tile,
            tile_rows: 4,
            tile_acts: 4,
            single: None,
            wide: None,
            prepped: None,
            widened: None,
        },
        q6_k: TypeKernels {
            rows: rows_q6_k,
            tile: tile_q6_k,
            tile_rows: 4,
            tile_acts: 4,
            single: None,
            // b11434's tiled K-quant matmul for sequences of 8 rows or more.
            wide: Some((super::kernel_table::TILED_MIN_ROWS, tile_q6_k_tiled)),
            prepped: None,
            widened: None,
        },
        ..base
    }
}
