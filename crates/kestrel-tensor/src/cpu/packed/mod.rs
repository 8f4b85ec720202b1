//! Weights repacked once, at load, into a layout a faster kernel reads: [`PackedWeight`] and
//! [`matmul_packed`]. As llama.cpp's CPU "repack" buffers do, groups of 16 rows are
//! interleaved so that one SIMD load feeds 16 rows at once, each 32-bit lane of an accumulator
//! holding one row: the block sums come out exact in integers, and one float multiply-add per
//! block finishes 16 outputs instead of one.
//!
//! Layouts (one folder each: `layout.rs`, the driver and scalar twin in `mod.rs`, the SIMD
//! kernels beside them, `x86_64.rs`, `avx2.rs`, `avx512.rs`, `aarch64.rs`), for matrices whose row count is a multiple of 16, on CPUs with
//! AVX-512 VNNI, and for Q4_0, IQ4_NL and MXFP4 on AVX2 CPUs too; on aarch64 the q8_0 family
//! from the dot-product level up (`q8_family::aarch64`, `smmla` at the i8mm level).
//! Elsewhere nothing is packed: the scalar twins exist to test the kernels.
//! - [`q8_family`] **Q4_0x16, Q4_1x16, Q5_0x16, Q5_1x16, Q8_0x16, IQ4NLx16, MXFP4x16**: the
//!   file's quants moved (Q8_0's made unsigned), not widened; llama.cpp's repacked Q4_0 GEMM
//!   numerics, exact block sums, for all seven (which differ in the last bits from the unpacked
//!   path's, ggml's `vec_dot`). Q4_0, IQ4_NL and MXFP4 are packed by default (llama.cpp repacks
//!   them too, with these numerics); `KESTREL_REPACK=all` packs the other four and tied
//!   embeddings (see `packing_enabled`). The AVX-512 kernel computes the first five, the AVX2
//!   kernel (`q8_family::avx2`) Q4_0 and the two table types.
//! - [`q6_k`] **Q6_Kx16**: the 6-bit quants regrouped; the numerics of the unpacked Q6_K
//!   kernels, bit for bit, in both of llama.cpp's orders (`vec_dot`'s 8 float lanes below
//!   [`TILED_MIN_ROWS`] rows per sequence, the tiled matmul's exact super-block sums from
//!   there).
//!
//! A packed matrix is exactly as large as the original; [`PackedWeight::for_tensor`] shares it
//! between every plan of a model and hands the source pages of the memory map back to the OS.
//! Each kernel prefetches 8 KiB ahead of the block it computes (`prefetch::PREFETCH_AHEAD`).
//! `KESTREL_REPACK=0` turns packing off; `KESTREL_REPACK=q8_0,q4_1` packs the listed types
//! beyond the default.

pub(crate) mod groups;
pub(crate) mod q4_k;
pub(crate) mod q6_k;
pub(crate) mod q8_family;

use std::sync::{Arc, Mutex, Weak};

use rayon::prelude::*;

pub(crate) use groups::{GROUP_ROWS, MAX_ACTS};

use super::kernel_table::TILED_MIN_ROWS;
use super::out_ptr::OutPtr;
use super::scratch::MatmulScratch;
use crate::error::{Result, TensorError};
use crate::storage::{AlignedBuf, Storage};
use crate::{DType, Tensor};

/// Groups per rayon task are chosen so each thread gets about this many tasks.
const TASKS_PER_THREAD: usize = 4;

/// A layout of [`PackedWeight`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PackedLayout {
    /// Q4_0, 16 rows interleaved 4 bytes at a time (see [`q8_family`]).
    Q4_0x16,
    /// Q4_1, as Q4_0x16 with the mins beside the scales.
    Q4_1x16,
    /// Q5_0, as Q4_0x16 with the fifth bits as 64-bit masks.
    Q5_0x16,
    /// Q5_1, as Q5_0x16 with the mins beside the scales.
    Q5_1x16,
    /// Q8_0, 16 rows interleaved 4 bytes at a time, made unsigned.
    Q8_0x16,
    /// IQ4_NL, as Q4_0x16 (its nibbles index IQ4_NL's table).
    IQ4NLx16,
    /// MXFP4, as Q4_0x16 with the E8M0 exponent bytes as the scales.
    MXFP4x16,
    /// Q4_K, 16 rows interleaved 4 bytes at a time (see [`q4_k`]).
    Q4Kx16,
    /// Q6_K, 16 rows interleaved 4 values at a time (see [`q6_k`]).
    Q6Kx16,
}

impl PackedLayout {
    /// The q8_0-family type of the layout, if it is one.
    fn q8_kind(self) -> Option<q8_family::Kind> {
        use q8_family::Kind;
        Some(match self {
            PackedLayout::Q4_0x16 => Kind::Q4_0,
            PackedLayout::Q4_1x16 => Kind::Q4_1,
            PackedLayout::Q5_0x16 => Kind::Q5_0,
            PackedLayout::Q5_1x16 => Kind::Q5_1,
            PackedLayout::Q8_0x16 => Kind::Q8_0,
            PackedLayout::IQ4NLx16 => Kind::IQ4NL,
            PackedLayout::MXFP4x16 => Kind::MXFP4,
            PackedLayout::Q4Kx16 | PackedLayout::Q6Kx16 => return None,
        })
    }
}

/// A weight matrix repacked for [`matmul_packed`].
pub struct PackedWeight {
    layout: PackedLayout,
    m: usize,
    k: usize,
    buf: AlignedBuf,
    /// The tensor it was packed from, when [`PackedWeight::for_tensor`] shares it: keeps the
    /// bytes its cache key points at alive.
    _source: Option<Tensor>,
}

impl std::fmt::Debug for PackedWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackedWeight({:?}, {}×{})", self.layout, self.m, self.k)
    }
}

/// Whether a packed layout runs fast here (packing is pointless otherwise) and is wanted.
///
/// `KESTREL_REPACK=0` packs nothing. By default the layouts whose numerics are llama.cpp's
/// (Q4_0, IQ4_NL, MXFP4: its repacked GEMM and GEMV; Q4_K, Q6_K: bit for bit the unpacked
/// kernels) are packed, the first three from AVX2 up, the rest on AVX-512 VNNI CPUs;
/// `KESTREL_REPACK=all` packs the rest of the q8_0 family too (Q4_1, Q5_0, Q5_1, Q8_0, tied
/// embeddings included), whose exact block sums differ from ggml's `vec_dot` in the last bits,
/// which these models amplify to ~1 in the logits (see `q8_family`).
fn packing_enabled(dtype: DType) -> bool {
    let env = std::env::var("KESTREL_REPACK").unwrap_or_default();
    match env.trim() {
        "0" => return false,
        "all" => {}
        _ if matches!(dtype, DType::Q4_1 | DType::Q5_0 | DType::Q5_1 | DType::Q8_0)
            && !listed(&env, dtype) =>
        {
            return false
        }
        _ => {}
    }
    let isa = super::isa::active_isa();
    if cfg!(target_arch = "aarch64") {
        // `q8_family::aarch64`: the q8_0 family from the dot-product level up.
        return q8_family::Kind::of(dtype).is_some() && isa >= super::isa::Isa::Dotprod;
    }
    match dtype {
        // The AVX2 kernel's types (`q8_family::avx2`).
        DType::Q4_0 | DType::IQ4NL | DType::MXFP4 => isa >= super::isa::Isa::Avx2,
        _ => isa >= super::isa::Isa::Avx512,
    }
}

/// Whether `KESTREL_REPACK` names `dtype` in a comma-separated list of types packed beyond the
/// default (`KESTREL_REPACK=q8_0,q4_1`: to find which type's exact block sums move a model's
/// distributions, one type at a time).
fn listed(env: &str, dtype: DType) -> bool {
    env.split(',')
        .any(|t| t.trim().eq_ignore_ascii_case(dtype.name()))
}

/// Packed matrices shared by every plan of a process, keyed by the source bytes' address and
/// length (each entry's [`PackedWeight`] keeps its source alive, so a live entry's key cannot
/// be reused by other bytes).
static SHARED: Mutex<Vec<(usize, usize, Weak<PackedWeight>)>> = Mutex::new(Vec::new());

impl PackedWeight {
    /// Packs `m` rows of `k` elements of `dtype` (raw bytes `w`), or `None` when no packed
    /// layout serves this matrix on this CPU (not of the q8_0 family, IQ4_NL, MXFP4, Q4_K or
    /// Q6_K, rows not a multiple of 16, no AVX-512 VNNI, or no AVX2 for Q4_0, IQ4_NL and MXFP4)
    /// or is wanted (`KESTREL_REPACK`, see `packing_enabled`).
    pub fn pack(w: &[u8], dtype: DType, m: usize, k: usize) -> Option<PackedWeight> {
        if !packing_enabled(dtype) {
            return None;
        }
        PackedWeight::pack_any(w, dtype, m, k, false)
    }

    /// [`PackedWeight::pack`] whatever the CPU; with `release`, the pages of `w` are handed
    /// back to the OS as they are packed (see [`groups::release_pages`]).
    fn pack_any(w: &[u8], dtype: DType, m: usize, k: usize, release: bool) -> Option<PackedWeight> {
        if m == 0 || !m.is_multiple_of(GROUP_ROWS) || dtype.row_bytes(k)?.checked_mul(m)? != w.len()
        {
            return None;
        }
        let (layout, buf) = match dtype {
            DType::Q4_0
            | DType::Q4_1
            | DType::Q5_0
            | DType::Q5_1
            | DType::Q8_0
            | DType::IQ4NL
            | DType::MXFP4 => {
                let kind = q8_family::Kind::of(dtype)?;
                let layout = [
                    PackedLayout::Q4_0x16,
                    PackedLayout::Q4_1x16,
                    PackedLayout::Q5_0x16,
                    PackedLayout::Q5_1x16,
                    PackedLayout::Q8_0x16,
                    PackedLayout::IQ4NLx16,
                    PackedLayout::MXFP4x16,
                ]
                .into_iter()
                .find(|l| l.q8_kind() == Some(kind))?;
                (layout, q8_family::pack(kind, w, m, k, release)?)
            }
            DType::Q4K => (PackedLayout::Q4Kx16, q4_k::pack(w, m, k, release)?),
            DType::Q6K => (PackedLayout::Q6Kx16, q6_k::pack(w, m, k, release)?),
            _ => return None,
        };
        Some(PackedWeight {
            layout,
            m,
            k,
            buf,
            _source: None,
        })
    }

    /// The packed form of a weight tensor (rows × row length), shared with every other caller
    /// that asks for the same bytes while one of them holds it: the prefill and decode plans of
    /// a model pack each matrix once. `None` as for [`PackedWeight::pack`].
    pub fn for_tensor(t: &Tensor) -> Option<Arc<PackedWeight>> {
        let shape = t.shape();
        let (m, k) = (shape.n_rows(), shape.row_len());
        let bytes = t.as_bytes();
        let key = (bytes.as_ptr() as usize, bytes.len());
        if !matches!(t.storage(), Storage::Shared { .. }) {
            return PackedWeight::pack(bytes, t.dtype(), m, k).map(Arc::new);
        }
        let mut cache = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        cache.retain(|(_, _, w)| w.strong_count() > 0);
        if let Some(p) = cache
            .iter()
            .find(|(a, l, _)| (*a, *l) == key)
            .and_then(|(_, _, w)| w.upgrade())
        {
            return Some(p);
        }
        if !packing_enabled(t.dtype()) {
            return None;
        }
        // The source pages go back as they are packed: a large matrix (a tied embedding) is
        // never resident twice.
        let mut p = PackedWeight::pack_any(bytes, t.dtype(), m, k, true)?;
        groups::release_pages(bytes);
        p._source = Some(t.clone());
        let p = Arc::new(p);
        cache.push((key.0, key.1, Arc::downgrade(&p)));
        Some(p)
    }

    /// Whether a matrix of `dtype` that is also a table rows are looked up in (a tied
    /// embedding) should be packed for its matmul: only with `KESTREL_REPACK=all` (llama.cpp
    /// keeps tied embeddings out of its repack buffers, so its output matmul on them runs
    /// `vec_dot`'s order, which the file layout reproduces), and only for the layouts whose
    /// [`PackedWeight::get_rows`] gives the rows back (the q8_0 family).
    pub fn packs_tables(dtype: DType) -> bool {
        let env = std::env::var("KESTREL_REPACK").unwrap_or_default();
        (env.trim() == "all" || listed(&env, dtype)) && q8_family::Kind::of(dtype).is_some()
    }

    /// Rows `ids` dequantized into `out` (`ids.len()` rows of [`PackedWeight::row_len`]), the
    /// same values as `cpu::get_rows` on the file's bytes: an embedding table whose source
    /// pages were handed back is read from its packed copy.
    ///
    /// # Errors
    /// `LengthMismatch` if `out` does not fit `ids`, `IdOutOfRange` for an id past the rows,
    /// `UnsupportedDType` for a layout that cannot give rows back (Q4_K, Q6_K).
    pub fn get_rows(&self, ids: &[u32], out: &mut [f32]) -> Result<()> {
        const OP: &str = "packed get_rows";
        let Some(kind) = self.layout.q8_kind() else {
            return Err(TensorError::UnsupportedDType {
                op: OP,
                dtype: if self.layout == PackedLayout::Q4Kx16 {
                    DType::Q4K
                } else {
                    DType::Q6K
                },
            });
        };
        let (k, nb) = (self.k, self.k / 32);
        super::get_rows::check_ids(OP, ids, self.m, k, out.len())?;
        let dtype = kind.dtype();
        let group_bytes = self.buf.len() / (self.m / GROUP_ROWS);
        let mut blk = [0u8; 34];
        let blk = &mut blk[..kind.raw_bytes()];
        for (&id, o) in ids.iter().zip(out.chunks_exact_mut(k.max(1))) {
            let (g, r) = (id as usize / GROUP_ROWS, id as usize % GROUP_ROWS);
            let group = &self.buf.as_bytes()[g * group_bytes..(g + 1) * group_bytes];
            for (b, o) in o.chunks_exact_mut(32).enumerate() {
                q8_family::unpack_block(kind, group, nb, b, r, blk);
                super::get_rows::dequant_row(dtype, blk, o);
            }
        }
        Ok(())
    }

    /// The layout.
    pub fn layout(&self) -> PackedLayout {
        self.layout
    }

    /// Rows (outputs of a matmul).
    pub fn rows(&self) -> usize {
        self.m
    }

    /// Elements per row (the matmul's inner dimension).
    pub fn row_len(&self) -> usize {
        self.k
    }

    /// Bytes the packed matrix takes.
    pub fn nbytes(&self) -> usize {
        self.buf.len()
    }

    /// [`PackedWeight::pack`] whatever the CPU and `KESTREL_REPACK` (for kernel tests).
    #[cfg(all(test, any(target_arch = "x86_64", target_arch = "aarch64")))]
    pub(crate) fn pack_for_test(w: &[u8], dtype: DType, m: usize, k: usize) -> Option<Self> {
        PackedWeight::pack_any(w, dtype, m, k, false)
    }

    /// The packed bytes (for kernel tests).
    #[cfg(all(test, any(target_arch = "x86_64", target_arch = "aarch64")))]
    pub(crate) fn bytes(&self) -> &[u8] {
        self.buf.as_bytes()
    }
}

/// `out[t·m + r] = Σ_j x[t·k + j] · W[r][j]` for a packed `W` (`m = w.rows()`, `k =
/// w.row_len()`), the activation rows in consecutive sequences of `segments[i]` rows (a row's
/// numerics depend only on its own sequence, as for [`super::matmul_segmented`]). The
/// activation rows are converted in `scratch`; work splits over groups of 16 rows in the
/// current rayon pool.
///
/// # Errors
/// `LengthMismatch` if `x` is not `n` rows of `w.row_len()`, `out` not `n` rows of
/// `w.rows()`, or the segments do not add up to `n`.
pub fn matmul_packed(
    x: &[f32],
    n: usize,
    w: &PackedWeight,
    out: &mut [f32],
    segments: &[usize],
    scratch: &mut MatmulScratch,
) -> Result<()> {
    let (m, k) = (w.m, w.k);
    let total = segments.iter().try_fold(0usize, |a, &l| a.checked_add(l));
    for (what, expected, actual) in [
        ("x", n.checked_mul(k), x.len()),
        ("out", n.checked_mul(m), out.len()),
        ("segment rows", total, n),
    ] {
        if expected != Some(actual) {
            return Err(TensorError::LengthMismatch {
                op: "matmul_packed",
                what,
                expected: expected.unwrap_or(usize::MAX),
                actual,
            });
        }
    }
    if n == 0 {
        return Ok(());
    }
    match w.layout {
        PackedLayout::Q4_0x16
        | PackedLayout::Q4_1x16
        | PackedLayout::Q5_0x16
        | PackedLayout::Q5_1x16
        | PackedLayout::Q8_0x16
        | PackedLayout::IQ4NLx16
        | PackedLayout::MXFP4x16 => {
            let kind = w.layout.q8_kind().unwrap_or(q8_family::Kind::Q4_0);
            let nb = k / 32;
            let act = q8_family::prepare(kind, x, n, k, scratch);
            // Every row sums alike.
            for_groups(
                w,
                false,
                n,
                &[n],
                |_, _| true,
                out,
                |group, t0, tn, _, o| {
                    q8_family::group_tile(kind, group, nb, act.rows(t0, t0 + tn, nb), o)
                },
            );
        }
        PackedLayout::Q4Kx16 => {
            let act = q4_k::prepare(x, n, k, scratch);
            // llama.cpp's gemm order for a sequence's rows in groups of 4, gemv for the rest.
            let gemm = |i: usize, len: usize| i < len - len % 4;
            for_groups(w, true, n, segments, gemm, out, |group, t0, tn, gemm, o| {
                q4_k::group_tile(group, k / 256, act.rows(t0, t0 + tn, k / 256), gemm, o)
            });
        }
        PackedLayout::Q6Kx16 => {
            let act = q6_k::prepare(x, n, k, scratch);
            let tiled = |_: usize, len: usize| len >= TILED_MIN_ROWS;
            for_groups(
                w,
                true,
                n,
                segments,
                tiled,
                out,
                |group, t0, tn, tiled, o| {
                    q6_k::group_tile(group, k / 256, act.rows(t0, t0 + tn, k / 256), tiled, o)
                },
            );
        }
    }
    Ok(())
}

/// Runs `tile(group bytes, t0, tn, order, out)` for every group of 16 rows and every run of up
/// to [`MAX_ACTS`] consecutive activation rows of the same order (`order(i, len)` for row `i`
/// of a sequence of `len` rows in the step; a row's numerics depend on its order only, not on
/// the rows beside it), writing `out[t·m + 16g + r]`. With `prefetch_groups`, each group's
/// successor is prefetched whole as it starts (the kernels that prefetch as they go do not
/// want it).
fn for_groups(
    w: &PackedWeight,
    prefetch_groups: bool,
    n: usize,
    segments: &[usize],
    order: impl Fn(usize, usize) -> bool + Sync,
    out: &mut [f32],
    tile: impl Fn(&[u8], usize, usize, bool, &mut [f32]) + Sync,
) {
    let m = w.m;
    let groups = m / GROUP_ROWS;
    let group_bytes = w.buf.len() / groups;
    let threads = rayon::current_num_threads().max(1);
    let per_task = groups.div_ceil(threads * TASKS_PER_THREAD).max(1);
    let out_ptr = OutPtr::new(out);
    let bytes = w.buf.as_bytes();
    (0..groups.div_ceil(per_task))
        .into_par_iter()
        .for_each(|task| {
            let mut o = [0f32; MAX_ACTS * GROUP_ROWS];
            for g in task * per_task..((task + 1) * per_task).min(groups) {
                let group = &bytes[g * group_bytes..(g + 1) * group_bytes];
                if prefetch_groups {
                    super::prefetch::prefetch_next(group);
                }
                let mut run = |t0: usize, t1: usize, ord: bool| {
                    let mut t = t0;
                    while t < t1 {
                        let tn = (t1 - t).min(MAX_ACTS);
                        let o = &mut o[..tn * GROUP_ROWS];
                        tile(group, t, tn, ord, o);
                        for (i, r) in o.chunks_exact(GROUP_ROWS).enumerate() {
                            // SAFETY: row t + i < n and columns 16g..16g + 16 <= m, so the
                            // range is in bounds of `out` (n·m, checked); group g is this
                            // task's alone.
                            unsafe { out_ptr.write_row((t + i) * m + g * GROUP_ROWS, r) };
                        }
                        t += tn;
                    }
                };
                // Rows start..row so far share order `cur`.
                let (mut start, mut row, mut cur) = (0, 0, None);
                for &len in segments {
                    for i in 0..len {
                        let ord = order(i, len);
                        if cur.is_some_and(|c| c != ord) {
                            run(start, row, !ord);
                            start = row;
                        }
                        cur = Some(ord);
                        row += 1;
                    }
                }
                if let Some(c) = cur {
                    run(start, row, c);
                }
                debug_assert_eq!(row, n);
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::{quantized_rows, Rng};

    #[test]
    fn repack_lists_name_types_by_their_ggml_names() {
        assert!(listed("q8_0,q4_1", DType::Q8_0));
        assert!(listed(" Q4_1 ", DType::Q4_1));
        assert!(!listed("q8_0", DType::Q5_0));
        assert!(!listed("", DType::Q8_0));
    }

    #[test]
    fn only_supported_types_with_whole_groups_pack() {
        let mut rng = Rng::new(3);
        let (w, _) = quantized_rows(&mut rng, DType::Q4_0, 24, 64);
        assert!(PackedWeight::pack_any(&w, DType::Q4_0, 24, 64, false).is_none());
        assert!(PackedWeight::pack_any(&w[..16 * 36], DType::Q4_0, 16, 64, false).is_some());
        assert!(PackedWeight::pack_any(&w[..16 * 36], DType::Q4_1, 16, 64, false).is_none());
        assert!(PackedWeight::pack_any(&w[..16 * 36], DType::Q4_1, 16, 72, false).is_none());
        let (w, _) = quantized_rows(&mut rng, DType::Q5K, 16, 256);
        assert!(PackedWeight::pack_any(&w, DType::Q5K, 16, 256, false).is_none());
        assert!(PackedWeight::pack_any(&w[..100], DType::Q4_0, 16, 64, false).is_none());
        let (w, _) = quantized_rows(&mut rng, DType::Q6K, 16, 256);
        assert!(PackedWeight::pack_any(&w, DType::Q6K, 16, 256, false).is_some());
        assert!(PackedWeight::pack_any(&w, DType::Q6K, 16, 255, false).is_none());
    }

    #[test]
    fn bad_sizes_are_errors() {
        let mut rng = Rng::new(4);
        let (w, _) = quantized_rows(&mut rng, DType::Q4_0, 16, 64);
        let p = PackedWeight::pack_any(&w, DType::Q4_0, 16, 64, false).unwrap();
        let mut out = vec![0f32; 16];
        let mut s = MatmulScratch::new();
        assert!(matmul_packed(&[0.0; 63], 1, &p, &mut out, &[1], &mut s).is_err());
        assert!(matmul_packed(&[0.0; 64], 1, &p, &mut out[..15], &[1], &mut s).is_err());
        assert!(matmul_packed(&[0.0; 64], 1, &p, &mut out, &[2], &mut s).is_err());
    }
}
