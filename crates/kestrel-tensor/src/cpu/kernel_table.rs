//! The table of dot kernels one instruction set hands out ([`Kernels`]: per weight type a
//! [`TypeKernels`] of plain function pointers the matmul fetches once per call), the kernel
//! shapes ([`RowsFn`], [`TileFn`], [`PreppedTileFn`], [`Widened`]) and the scalar twins' table
//! ([`Kernels::SCALAR`]) every SIMD table starts from. The per-ISA modules fill in their kernels
//! (`x86_64`, `aarch64`); `dispatch` picks the table of the active instruction set.
//!
//! Every SIMD kernel computes the same integer block sums and the same f32 operations in the
//! same order as its scalar twin, so the choice changes speed, never results.

use kestrel_gguf::quant::{BlockQ8K, BlockQ8_0};

use super::isa::Isa;
use super::q8_block::BlockQ8_1;
use super::qdot::k_x86::{dot_q4_k_8x8_gemm, dot_q6_k_tiled};
use super::qdot::{self, QDot};

/// Dots of consecutive weight rows (raw block bytes, any alignment; `w` holds exactly
/// `out.len()` rows) with one converted activation row: `out[r] = row r · y`.
pub(crate) type RowsFn<A> = fn(w: &[u8], y: &[A], out: &mut [f32]);

/// [`RowsFn`] over a scalar twin: one [`QDot::dot`] per row.
#[inline]
pub(crate) fn scalar_rows<D: QDot>(w: &[u8], y: &[D::Act], out: &mut [f32]) {
    rows_by_dot(w, y, out, D::dot)
}

/// A [`RowsFn`] from a one-row dot: `out[r] = dot(row r, y)`.
#[inline(always)]
pub(crate) fn rows_by_dot<A>(w: &[u8], y: &[A], out: &mut [f32], dot: impl Fn(&[u8], &[A]) -> f32) {
    if out.is_empty() {
        return;
    }
    let rb = (w.len() / out.len()).max(1);
    for (o, wr) in out.iter_mut().zip(w.chunks_exact(rb)) {
        *o = dot(wr, y);
    }
}

/// 1 to `tile_rows` weight rows (`w`) against 1 to `tile_acts` activation rows (`y`, back to
/// back): `out[r · n_act + t]`.
pub(crate) type TileFn<A> = fn(w: &[u8], y: &[A], n_act: usize, out: &mut [f32]);

/// A [`TileFn`] over a scalar twin: one [`QDot::dot`] per (weight row, activation row).
#[inline]
pub(crate) fn scalar_tile<D: QDot>(w: &[u8], y: &[D::Act], n_act: usize, out: &mut [f32]) {
    tile_by_dots(w, y, n_act, out, D::dot)
}

/// A [`TileFn`] from a one-row dot: `out[r · n_act + t] = dot(row r, activation row t)`.
#[inline(always)]
pub(crate) fn tile_by_dots<A>(
    w: &[u8],
    y: &[A],
    n_act: usize,
    out: &mut [f32],
    dot: impl Fn(&[u8], &[A]) -> f32,
) {
    let Some(nb) = y.len().checked_div(n_act).filter(|&nb| nb > 0) else {
        return;
    };
    let n_w = out.len() / n_act;
    let rb = w.len() / n_w.max(1);
    for (r, wr) in w.chunks_exact(rb.max(1)).take(n_w).enumerate() {
        for (t, ya) in y.chunks_exact(nb).enumerate() {
            out[r * n_act + t] = dot(wr, ya);
        }
    }
}

/// One 64-byte, 64-aligned line of a [`PrepBuf`].
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Line(pub(crate) [u8; 64]);

/// A tile kernel's activation side prepared once for a group of activation rows and reused
/// by every weight-row tile of a task (see [`PreppedTileFn`]).
pub(crate) type PrepBuf = Vec<Line>;

/// A [`TileFn`] whose activation side (per block: the quants of each pair of rows, their
/// offset terms and scales) is prepared into `prep` when `fresh`, and read from it otherwise:
/// a task calls it with `fresh` for its first weight rows of each activation group. Same
/// results as the plain tile, bit for bit.
pub(crate) type PreppedTileFn<A> =
    fn(w: &[u8], y: &[A], n_act: usize, out: &mut [f32], prep: &mut PrepBuf, fresh: bool);

/// The most weight rows any tile kernel takes.
pub(crate) const MAX_TILE_ROWS: usize = 4;

/// The most activation rows any tile kernel takes.
pub(crate) const MAX_TILE_ACTS: usize = 8;

/// The scalar Q4_K tile: llama.cpp's gemm order for repacked Q4_K (see
/// `qdot::k_x86::dot_q4_k_8x8_gemm`); its rows kernel has the gemv order.
fn q4_k_gemm_tile(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
    tile_by_dots(w, y, n_act, out, dot_q4_k_8x8_gemm)
}

/// Q6_K in llama.cpp's tiled-matmul order, one dot per pair (the scalar twin's tile).
fn q6_k_tiled_tile(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
    tile_by_dots(w, y, n_act, out, dot_q6_k_tiled)
}

/// Activation rows from which llama.cpp b11434 sends a K-quant matmul whose weights it does
/// not repack through its tiled kernels (`ggml-cpu/tiled`, `ggml_tiled_min_batch`).
pub(crate) const TILED_MIN_ROWS: usize = 8;

/// [`TypeKernels::wide`] for Q6_K, scalar.
pub(crate) const Q6K_WIDE_SCALAR: Option<(usize, TileFn<BlockQ8K>)> =
    Some((TILED_MIN_ROWS, q6_k_tiled_tile));

/// One weight type's kernels.
pub(crate) struct TypeKernels<A: 'static> {
    /// Many consecutive weight rows against one activation row (decode).
    pub rows: RowsFn<A>,
    /// 1 to `tile_rows` weight rows against 1 to `tile_acts` activation rows (`y` holds them
    /// back to back; prefill and batched decode): each weight block is unpacked once for all
    /// of them, each activation block loaded once for all the rows.
    pub tile: TileFn<A>,
    /// Most weight rows `tile` takes (at most [`MAX_TILE_ROWS`]).
    pub tile_rows: usize,
    /// Most activation rows `tile` takes (at most [`MAX_TILE_ACTS`]).
    pub tile_acts: usize,
    /// For types whose llama.cpp paths sum in a different order for single activation rows
    /// than for groups of 4 (Q4_K: repacked gemv vs gemm), a multi-row kernel in the
    /// single-row order; `tile` then has the group order. `None`: `tile` and `rows` agree.
    pub single: Option<TileFn<A>>,
    /// For types that llama.cpp sums in another order once a matmul has many activation rows
    /// (Q6_K: b11434's tiled K-quant kernels from [`TILED_MIN_ROWS`] rows): `(min, tile)`, a
    /// sequence's rows all take `tile` when it has at least `min` of them in the step.
    pub wide: Option<(usize, TileFn<A>)>,
    /// `tile` with its activation side prepared once per activation group (see
    /// [`PreppedTileFn`]), where the kernel has it.
    pub prepped: Option<PreppedTileFn<A>>,
    /// A prefill form of `tile` (from `matmul`'s `WIDEN_MIN_ROWS` activation rows):
    /// with AVX2, Q8_0's 4 × 2 tile, over Q4_0 and Q5_0 rows widened to Q8_0 blocks once per
    /// task (see [`Widened`]).
    pub widened: Option<Widened<A>>,
}

/// Whole weight rows in, their Q8_0 blocks out (`out` holds exactly as many blocks).
pub(crate) type WidenFn = fn(w: &[u8], out: &mut [u8]);

/// A prefill form of a weight type's tile: another shape (`tile4x2` on AVX2), and for types
/// whose blocks cost more to unpack than to multiply the rows widened to Q8_0 blocks first (the
/// same scale bits, the 32 quants as signed bytes): the same integer sums and float order as
/// the type's own `tile`, so the same bits. A task then unpacks each weight block once, not
/// once per group of activation rows (256 times in a 512-token prefill with groups of 2).
pub(crate) struct Widened<A: 'static> {
    /// The widening of the rows (`None`: the tile reads the rows as they are).
    pub widen: Option<WidenFn>,
    /// The tile over the (widened) rows.
    pub tile: TileFn<A>,
    /// Most weight rows and activation rows it takes at once (as `tile_rows`, `tile_acts`).
    pub shape: (usize, usize),
}

impl<A> Clone for Widened<A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for Widened<A> {}

impl<A> Clone for TypeKernels<A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for TypeKernels<A> {}

impl<A> TypeKernels<A> {
    /// The scalar twins of `D`.
    pub(crate) const fn scalar<D: QDot<Act = A>>() -> TypeKernels<A> {
        TypeKernels {
            rows: scalar_rows::<D>,
            tile: scalar_tile::<D>,
            tile_rows: 4,
            tile_acts: 4,
            single: None,
            wide: None,
            prepped: None,
            widened: None,
        }
    }
}

/// The kernels of one instruction set, per weight type that has SIMD kernels (the others
/// always run their scalar twins).
#[derive(Clone, Copy)]
pub(crate) struct Kernels {
    pub isa: Isa,
    pub q4_0: TypeKernels<BlockQ8_0>,
    pub q4_1: TypeKernels<BlockQ8_1>,
    pub q5_0: TypeKernels<BlockQ8_0>,
    pub q5_1: TypeKernels<BlockQ8_1>,
    pub q8_0: TypeKernels<BlockQ8_0>,
    pub q2_k: TypeKernels<BlockQ8K>,
    pub q3_k: TypeKernels<BlockQ8K>,
    pub q4_k: TypeKernels<BlockQ8K>,
    pub q5_k: TypeKernels<BlockQ8K>,
    pub q6_k: TypeKernels<BlockQ8K>,
    pub iq4_nl: TypeKernels<BlockQ8_0>,
    pub iq4_xs: TypeKernels<BlockQ8K>,
    pub mxfp4: TypeKernels<BlockQ8_0>,
    pub iq2_xxs: TypeKernels<BlockQ8K>,
    pub iq2_xs: TypeKernels<BlockQ8K>,
    pub iq2_s: TypeKernels<BlockQ8K>,
    pub iq3_xxs: TypeKernels<BlockQ8K>,
    pub iq3_s: TypeKernels<BlockQ8K>,
}

impl Kernels {
    /// The scalar twins.
    pub(crate) const SCALAR: Kernels = Kernels {
        isa: Isa::Scalar,
        q4_0: TypeKernels::scalar::<qdot::DQ4_0>(),
        q4_1: TypeKernels::scalar::<qdot::DQ4_1>(),
        q5_0: TypeKernels::scalar::<qdot::DQ5_0>(),
        q5_1: TypeKernels::scalar::<qdot::DQ5_1>(),
        q8_0: TypeKernels::scalar::<qdot::DQ8_0>(),
        q2_k: TypeKernels::scalar::<qdot::DQ2K>(),
        q3_k: TypeKernels::scalar::<qdot::DQ3K>(),
        q4_k: TypeKernels {
            rows: scalar_rows::<qdot::DQ4K>,
            tile: q4_k_gemm_tile,
            tile_rows: 4,
            tile_acts: 4,
            single: Some(scalar_tile::<qdot::DQ4K>),
            wide: None,
            prepped: None,
            widened: None,
        },
        q5_k: TypeKernels::scalar::<qdot::DQ5K>(),
        q6_k: TypeKernels {
            wide: Q6K_WIDE_SCALAR,
            prepped: None,
            widened: None,
            ..TypeKernels::scalar::<qdot::DQ6K>()
        },
        iq4_nl: TypeKernels::scalar::<qdot::DIQ4NL>(),
        iq4_xs: TypeKernels::scalar::<qdot::DIQ4XS>(),
        mxfp4: TypeKernels::scalar::<qdot::DMXFP4>(),
        iq2_xxs: TypeKernels::scalar::<qdot::DIQ2XXS>(),
        iq2_xs: TypeKernels::scalar::<qdot::DIQ2XS>(),
        iq2_s: TypeKernels::scalar::<qdot::DIQ2S>(),
        iq3_xxs: TypeKernels::scalar::<qdot::DIQ3XXS>(),
        iq3_s: TypeKernels::scalar::<qdot::DIQ3S>(),
    };
}
