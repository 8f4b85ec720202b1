//! Runtime choice of the dot kernels: once per process, the CPU's features pick the fastest
//! instruction set kestrel has kernels for (x86-64: AVX-512 VNNI or AVX2; aarch64: NEON with
//! or without the dot-product extension; else the scalar twins in [`super::qdot`]), and
//! [`kernels`] hands out a table of plain function pointers that the matmul fetches once per
//! call.
//!
//! Every SIMD kernel computes the same integer block sums and the same f32 operations in the
//! same order as its scalar twin, so the choice changes speed, never results (the tests check
//! bit equality on random blocks for every ISA this CPU has).
//!
//! `KESTREL_ISA=scalar|avx2|avx512` (x86-64) or `scalar|neon|dotprod|i8mm` (aarch64) caps the
//! choice (for benchmarks and A/B checks); a level above what this CPU runs gives the best it
//! runs, and so does an unknown value or one of another architecture.

use std::sync::OnceLock;

use kestrel_gguf::quant::{BlockQ8K, BlockQ8_0};

use super::q8::BlockQ8_1;
use super::qdot::{self, QDot};

/// An instruction set kestrel has CPU kernels for. Within one architecture the levels are
/// ordered weakest first; the aarch64 levels sort below the x86-64 ones, so a test such as
/// `isa >= Isa::Avx2` holds only on x86-64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Isa {
    /// Portable Rust (the scalar twins every SIMD kernel is tested against).
    Scalar,
    /// aarch64 Advanced SIMD (NEON, every aarch64 CPU).
    Neon,
    /// aarch64 NEON with the dot-product extension (`sdot`/`udot`, FEAT_DotProd: Cortex-A76
    /// and later, Apple M1 and later, Graviton 2 and later).
    Dotprod,
    /// aarch64 NEON with the dot-product and the 8-bit matrix-multiply extensions (`smmla`,
    /// FEAT_I8MM: Neoverse V1/N2 and later, Graviton 3 and later, Apple M2 and later).
    I8mm,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// x86-64 AVX-512 F/BW/VL + VNNI (on top of AVX2).
    Avx512,
}

/// The levels of this build's architecture, weakest first.
const LADDER: &[Isa] = if cfg!(target_arch = "x86_64") {
    &[Isa::Scalar, Isa::Avx2, Isa::Avx512]
} else if cfg!(target_arch = "aarch64") {
    &[Isa::Scalar, Isa::Neon, Isa::Dotprod, Isa::I8mm]
} else {
    &[Isa::Scalar]
};

impl Isa {
    /// The lowercase name (`scalar`, `neon`, `dotprod`, `i8mm`, `avx2`, `avx512`).
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Neon => "neon",
            Isa::Dotprod => "dotprod",
            Isa::I8mm => "i8mm",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// Parses a name as [`Isa::name`] writes it.
    pub fn from_name(s: &str) -> Option<Isa> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" => Some(Isa::Scalar),
            "neon" => Some(Isa::Neon),
            "dotprod" => Some(Isa::Dotprod),
            "i8mm" => Some(Isa::I8mm),
            "avx2" => Some(Isa::Avx2),
            "avx512" => Some(Isa::Avx512),
            _ => None,
        }
    }

    /// The best instruction set this CPU runs.
    pub fn detected() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if super::x86_64::has_avx512() {
                return Isa::Avx512;
            }
            if super::x86_64::has_avx2() {
                return Isa::Avx2;
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            if super::aarch64::q8_familyx16::has_i8mm() {
                return Isa::I8mm;
            }
            if super::aarch64::has_dotprod() {
                return Isa::Dotprod;
            }
            return Isa::Neon;
        }
        #[allow(unreachable_code)]
        Isa::Scalar
    }

    /// Every instruction set this CPU runs, weakest first (for tests and benches).
    pub fn available() -> Vec<Isa> {
        let best = Isa::detected();
        LADDER.iter().copied().filter(|&i| i <= best).collect()
    }

    /// `want` capped at what this CPU runs; `None` (or a level of another architecture) gives
    /// the best it runs.
    pub fn capped(want: Option<Isa>) -> Isa {
        let best = Isa::detected();
        match want {
            Some(w) if LADDER.contains(&w) => w.min(best),
            _ => best,
        }
    }
}

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
/// [`super::qdot_k_x86::dot_q4_k_8x8_gemm`]); its rows kernel has the gemv order.
fn q4_k_gemm_tile(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
    tile_by_dots(w, y, n_act, out, super::qdot_k_x86::dot_q4_k_8x8_gemm)
}

/// Q6_K in llama.cpp's tiled-matmul order, one dot per pair (the scalar twin's tile).
fn q6_k_tiled_tile(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
    tile_by_dots(w, y, n_act, out, super::qdot_k_x86::dot_q6_k_tiled)
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
    /// A prefill form of `tile` (from [`WIDEN_MIN_ROWS`](super::matmul) activation rows):
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
    const SCALAR: Kernels = Kernels {
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

    /// The kernels of `isa`, or `None` when this CPU cannot run it.
    pub(crate) fn for_isa(isa: Isa) -> Option<Kernels> {
        if !Isa::available().contains(&isa) {
            return None;
        }
        match isa {
            Isa::Scalar => Some(Kernels::SCALAR),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => Some(super::x86_64::with_iq(super::x86_64::avx2_kernels(
                Kernels::SCALAR,
            ))),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => Some(super::x86_64::with_iq(super::x86_64::avx512_kernels(
                Kernels::SCALAR,
            ))),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => Some(super::aarch64::neon_kernels(Kernels::SCALAR)),
            #[cfg(target_arch = "aarch64")]
            Isa::Dotprod => Some(super::aarch64::dotprod_kernels(Kernels::SCALAR)),
            #[cfg(target_arch = "aarch64")]
            Isa::I8mm => Some(super::aarch64::i8mm_kernels(Kernels::SCALAR)),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }
}

static KERNELS: OnceLock<Kernels> = OnceLock::new();

/// The kernels in use: the best this CPU runs, capped by `KESTREL_ISA`.
pub(crate) fn kernels() -> &'static Kernels {
    KERNELS.get_or_init(|| {
        let want = std::env::var("KESTREL_ISA")
            .ok()
            .and_then(|s| Isa::from_name(&s));
        Kernels::for_isa(Isa::capped(want)).unwrap_or(Kernels::SCALAR)
    })
}

/// The instruction set the CPU kernels run with in this process.
pub fn active_isa() -> Isa {
    kernels().isa
}

#[cfg(test)]
mod tests {
    use super::Isa;

    /// `KESTREL_ISA` caps within this architecture; above the CPU, unknown, or another
    /// architecture's level gives the best this CPU runs.
    #[test]
    fn capped_stays_within_this_architecture_and_cpu() {
        let best = Isa::detected();
        assert_eq!(Isa::capped(None), best);
        assert_eq!(Isa::capped(Some(Isa::Scalar)), Isa::Scalar);
        for isa in Isa::available() {
            assert_eq!(Isa::capped(Some(isa)), isa);
            assert_eq!(Isa::from_name(isa.name()), Some(isa));
        }
        let foreign = if cfg!(target_arch = "x86_64") {
            vec![Isa::Neon, Isa::Dotprod, Isa::I8mm]
        } else {
            vec![Isa::Avx2, Isa::Avx512]
        };
        for isa in foreign {
            assert_eq!(Isa::capped(Some(isa)), best, "{isa:?}");
            assert!(!Isa::available().contains(&isa));
        }
        assert_eq!(Isa::from_name(" AVX2 "), Some(Isa::Avx2));
        assert_eq!(Isa::from_name("sse4"), None);
    }
}
