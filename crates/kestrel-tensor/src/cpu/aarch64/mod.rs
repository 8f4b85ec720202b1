//! aarch64 SIMD kernels, one module per level: [`neon`] (Advanced SIMD, on every aarch64 CPU)
//! and [`dotprod`] (the same kernels with `sdot` summing four byte products per lane in one
//! instruction). Both are instantiated from the one kernel body in [`q8_family`] (Q4_0, Q4_1,
//! Q5_0, Q5_1, Q8_0), the integer halves in [`kquants`] (Q2_K to Q6_K), [`iq4`] (IQ4_NL,
//! IQ4_XS, MXFP4) and [`iq_grid`] (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S), so they cannot drift
//! apart; each is bit-identical to its scalar twin in `cpu::qdot`, which follows
//! ggml's x86 float order, so an aarch64 machine gives what an x86-64 one does on the
//! unpacked paths (`cpu::kernel_tests`, run under `qemu-aarch64` in CI).
//!
//! The packed q8_0-family kernels (dot-product and i8mm levels) live with their layout
//! (`cpu::packed::q8_family::aarch64`). [`f16_ops`] holds the f16
//! flash-attention ops; the q8_0/q8_1 activation quantizers live with their scalar twins
//! (`cpu::q8::aarch64`).
//!
//! The kernels are `unsafe` (they need CPU features); [`neon_kernels`] / [`dotprod_kernels`]
//! wrap them in safe functions that [`super::dispatch`] only hands out once the features were
//! detected. The weight types without a kernel here run their scalar twins.

#[macro_use]
mod q8_family;
#[macro_use]
mod kquants;
#[macro_use]
mod iq4;
#[macro_use]
mod iq_grid;

pub(crate) mod dotprod;
pub(crate) mod f16_ops;
pub(crate) mod neon;

use super::isa::Isa;
use super::kernel_table::Kernels;

pub(crate) use super::isa::{has_dotprod, has_i8mm, has_neon};

/// f16 bits to f32 (exact) with the base ISA's `fcvt` (the `half` crate converts in software
/// unless the whole build targets FEAT_FP16).
#[inline(always)]
pub(crate) fn fp16(bits: u16) -> f32 {
    let r: f32;
    // SAFETY: `fmov` + `fcvt` (ARMv8.0 floating point, always present on aarch64) touch only
    // the named registers.
    unsafe {
        std::arch::asm!(
            "fmov {h:s}, {b:w}",
            "fcvt {r:s}, {h:h}",
            b = in(reg) u32::from(bits),
            h = out(vreg) _,
            r = lateout(vreg) r,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    r
}

/// `base` with one level's K-quant and IQ4 kernels (dots per row and pair, in the twins'
/// orders: Q2_K's and Q3_K's x86 `vec_dot`; Q4_K's gemv for rows and single rows, gemm for
/// groups; Q5_K's generic order; Q6_K's `vec_dot`, tiled from `TILED_MIN_ROWS` rows of a
/// sequence; IQ4_NL's, MXFP4's and IQ4_XS's x86 order).
macro_rules! with_kquants {
    ($level:ident, $base:expr) => {{
        use kestrel_gguf::quant::BlockQ8K;

        use crate::cpu::kernel_table::{rows_by_dot, tile_by_dots, TypeKernels, TILED_MIN_ROWS};

        fn q4_k_rows(w: &[u8], y: &[BlockQ8K], out: &mut [f32]) {
            // SAFETY: only reachable through a table made after detection.
            rows_by_dot(w, y, out, |wr, y| unsafe { $level::dot_q4_k_gemv(wr, y) })
        }
        fn q4_k_tile(w: &[u8], y: &[BlockQ8K], n: usize, out: &mut [f32]) {
            // SAFETY: as above.
            tile_by_dots(w, y, n, out, |wr, y| unsafe {
                $level::dot_q4_k_gemm(wr, y)
            })
        }
        fn q4_k_single(w: &[u8], y: &[BlockQ8K], n: usize, out: &mut [f32]) {
            // SAFETY: as above.
            tile_by_dots(w, y, n, out, |wr, y| unsafe {
                $level::dot_q4_k_gemv(wr, y)
            })
        }
        // Rows and tiles of a type by its one dot (the twins' order for every entry).
        macro_rules! by_dot {
            ($rows:ident, $tile:ident, $dot:ident) => {
                fn $rows(w: &[u8], y: &[BlockQ8K], out: &mut [f32]) {
                    // SAFETY: only reachable through a table made after detection.
                    rows_by_dot(w, y, out, |wr, y| unsafe { $level::$dot(wr, y) })
                }
                fn $tile(w: &[u8], y: &[BlockQ8K], n: usize, out: &mut [f32]) {
                    // SAFETY: as above.
                    tile_by_dots(w, y, n, out, |wr, y| unsafe { $level::$dot(wr, y) })
                }
            };
        }
        by_dot!(q2_k_rows, q2_k_tile, dot_q2_k);
        by_dot!(q3_k_rows, q3_k_tile, dot_q3_k);
        by_dot!(q5_k_rows, q5_k_tile, dot_q5_k);
        by_dot!(q6_k_rows, q6_k_tile, dot_q6_k);
        by_dot!(iq4_xs_rows, iq4_xs_tile, dot_iq4_xs);
        by_dot!(iq2_xxs_rows, iq2_xxs_tile, dot_iq2_xxs);
        by_dot!(iq2_xs_rows, iq2_xs_tile, dot_iq2_xs);
        by_dot!(iq2_s_rows, iq2_s_tile, dot_iq2_s);
        by_dot!(iq3_xxs_rows, iq3_xxs_tile, dot_iq3_xxs);
        by_dot!(iq3_s_rows, iq3_s_tile, dot_iq3_s);
        fn iq4_nl_rows(w: &[u8], y: &[kestrel_gguf::quant::BlockQ8_0], out: &mut [f32]) {
            // SAFETY: only reachable through a table made after detection.
            rows_by_dot(w, y, out, |wr, y| unsafe { $level::dot_iq4_nl(wr, y) })
        }
        fn iq4_nl_tile(w: &[u8], y: &[kestrel_gguf::quant::BlockQ8_0], n: usize, out: &mut [f32]) {
            // SAFETY: as above.
            tile_by_dots(w, y, n, out, |wr, y| unsafe { $level::dot_iq4_nl(wr, y) })
        }
        fn mxfp4_rows(w: &[u8], y: &[kestrel_gguf::quant::BlockQ8_0], out: &mut [f32]) {
            // SAFETY: only reachable through a table made after detection.
            rows_by_dot(w, y, out, |wr, y| unsafe { $level::dot_mxfp4(wr, y) })
        }
        fn mxfp4_tile(w: &[u8], y: &[kestrel_gguf::quant::BlockQ8_0], n: usize, out: &mut [f32]) {
            // SAFETY: as above.
            tile_by_dots(w, y, n, out, |wr, y| unsafe { $level::dot_mxfp4(wr, y) })
        }
        fn q6_k_tiled(w: &[u8], y: &[BlockQ8K], n: usize, out: &mut [f32]) {
            // SAFETY: as above.
            tile_by_dots(w, y, n, out, |wr, y| unsafe {
                $level::dot_q6_k_tiled(wr, y)
            })
        }
        let base: Kernels = $base;
        Kernels {
            q4_k: TypeKernels {
                rows: q4_k_rows,
                tile: q4_k_tile,
                single: Some(q4_k_single),
                ..base.q4_k
            },
            q2_k: TypeKernels {
                rows: q2_k_rows,
                tile: q2_k_tile,
                ..base.q2_k
            },
            q3_k: TypeKernels {
                rows: q3_k_rows,
                tile: q3_k_tile,
                ..base.q3_k
            },
            q5_k: TypeKernels {
                rows: q5_k_rows,
                tile: q5_k_tile,
                ..base.q5_k
            },
            q6_k: TypeKernels {
                rows: q6_k_rows,
                tile: q6_k_tile,
                wide: Some((TILED_MIN_ROWS, q6_k_tiled)),
                ..base.q6_k
            },
            iq4_nl: TypeKernels {
                rows: iq4_nl_rows,
                tile: iq4_nl_tile,
                ..base.iq4_nl
            },
            iq4_xs: TypeKernels {
                rows: iq4_xs_rows,
                tile: iq4_xs_tile,
                ..base.iq4_xs
            },
            mxfp4: TypeKernels {
                rows: mxfp4_rows,
                tile: mxfp4_tile,
                ..base.mxfp4
            },
            iq2_xxs: TypeKernels {
                rows: iq2_xxs_rows,
                tile: iq2_xxs_tile,
                ..base.iq2_xxs
            },
            iq2_xs: TypeKernels {
                rows: iq2_xs_rows,
                tile: iq2_xs_tile,
                ..base.iq2_xs
            },
            iq2_s: TypeKernels {
                rows: iq2_s_rows,
                tile: iq2_s_tile,
                ..base.iq2_s
            },
            iq3_xxs: TypeKernels {
                rows: iq3_xxs_rows,
                tile: iq3_xxs_tile,
                ..base.iq3_xxs
            },
            iq3_s: TypeKernels {
                rows: iq3_s_rows,
                tile: iq3_s_tile,
                ..base.iq3_s
            },
            ..base
        }
    }};
}

/// The NEON table over `base` (types without a NEON kernel keep `base`'s).
pub(crate) fn neon_kernels(base: Kernels) -> Kernels {
    with_kquants!(neon, safe_table!(neon, has_neon, base, Isa::Neon))
}

/// The dot-product table over `base`.
///
/// # Panics
/// If the CPU lacks the dot-product extension (callers check [`has_dotprod`] first).
pub(crate) fn dotprod_kernels(base: Kernels) -> Kernels {
    with_kquants!(
        dotprod,
        safe_table!(dotprod, has_dotprod, base, Isa::Dotprod)
    )
}

/// The matrix-multiply level: the dot-product table (its unpacked kernels are the same), with
/// the packed layouts' `smmla` kernel (chosen by `packed::q8_family::group_tile`).
///
/// # Panics
/// If the CPU lacks the extensions (callers check [`has_i8mm`] first).
pub(crate) fn i8mm_kernels(base: Kernels) -> Kernels {
    assert!(has_i8mm(), "the CPU lacks FEAT_I8MM");
    Kernels {
        isa: Isa::I8mm,
        ..dotprod_kernels(base)
    }
}

#[cfg(test)]
mod tests {
    use super::fp16;

    /// The hardware conversion equals `half`'s on every f16 bit pattern (NaNs: both NaN).
    #[test]
    fn fp16_matches_half_on_every_pattern() {
        for bits in 0..=u16::MAX {
            let want = half::f16::from_bits(bits).to_f32();
            let got = fp16(bits);
            assert!(
                want.to_bits() == got.to_bits() || (want.is_nan() && got.is_nan()),
                "{bits:#06x}: {want} vs {got}"
            );
        }
    }
}
