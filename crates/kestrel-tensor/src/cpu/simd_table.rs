//! The q8_0-family part of a kernel table, shared by every SIMD level of every architecture:
//! `safe_table!` wraps one level module's `unsafe` kernels (`rows_q4_0`, `tile_q4_0`, ...,
//! `TILE_ROWS`) in safe functions and puts them in a [`Kernels`](super::kernel_table::Kernels)
//! over a base table. The wrappers are sound because the table is only built after the
//! level's features were detected (the macro asserts it).

/// Safe wrappers over one ISA module's kernels: each calls the `unsafe` kernel, which is sound
/// because the wrappers are only reachable through a table built after detection.
macro_rules! safe_table {
    ($isa:ident, $detect:ident, $base:expr, $variant:expr) => {{
        mod wrap {
            use kestrel_gguf::quant::BlockQ8_0;

            use crate::cpu::q8_block::BlockQ8_1;

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
        $crate::cpu::kernel_table::Kernels {
            isa: $variant,
            q4_0: $crate::cpu::kernel_table::TypeKernels {
                rows: wrap::q4_0,
                tile: wrap::q4_0_tile,
                tile_rows: $isa::TILE_ROWS,
                tile_acts: 4,
                single: None,
                wide: None,
                prepped: None,
                widened: None,
            },
            q4_1: $crate::cpu::kernel_table::TypeKernels {
                rows: wrap::q4_1,
                tile: wrap::q4_1_tile,
                tile_rows: $isa::TILE_ROWS,
                tile_acts: 4,
                single: None,
                wide: None,
                prepped: None,
                widened: None,
            },
            q5_0: $crate::cpu::kernel_table::TypeKernels {
                rows: wrap::q5_0,
                tile: wrap::q5_0_tile,
                tile_rows: $isa::TILE_ROWS,
                tile_acts: 4,
                single: None,
                wide: None,
                prepped: None,
                widened: None,
            },
            q5_1: $crate::cpu::kernel_table::TypeKernels {
                rows: wrap::q5_1,
                tile: wrap::q5_1_tile,
                tile_rows: $isa::TILE_ROWS,
                tile_acts: 4,
                single: None,
                wide: None,
                prepped: None,
                widened: None,
            },
            q8_0: $crate::cpu::kernel_table::TypeKernels {
                rows: wrap::q8_0,
                tile: wrap::q8_0_tile,
                tile_rows: $isa::TILE_ROWS,
                tile_acts: 4,
                single: None,
                wide: None,
                prepped: None,
                widened: None,
            },
            ..$base
        }
    }};
}
