//! The quantized matvec of decode steps and small batches (`kernels/mmvq*.cu`, as ggml-cuda's
//! MMVQ): activations quantized to Q8_1 into a scratch the device keeps (a [`Q8Ticket`] lets the
//! next matvec of the same input skip it), the weight rows read once per launch, a residual
//! optionally added in the epilogue. 1-8 activation rows: `__dp4a` kernels; 9-64: the
//! tensor-core kernel (`kernels/mmvq_wide.cu`), whose outputs keep the one-row kernel's bits;
//! more: the cuBLAS GEMM (`gemm.rs`). Float weights take `matvec_float.cu`.

use super::engine::{
    cfg, driver, f32_only, grid_for, i32_of, no_scratch_err, CudaDevice, DeviceTensor, Q8Ticket,
    ScratchGuard, MAX_MMVQ_CTAS,
};
use super::{MAX_MATVEC_ROWS, MAX_WIDE_ROWS};
use crate::error::{Result, TensorError};
use crate::{DType, Shape};

/// Bytes of one Q8_1 activation block (`kernels/common.cuh`).
const Q8_1_BYTES: usize = 36;

/// Warps (weight rows) per CTA of the float matvec kernels (`ROWS_PER_CTA` in matvec_float.cu).
const ROWS_PER_CTA: u32 = 4;
/// Warps per CTA of the quantized matvec kernels (`MMVQ_WARPS` in kernels/mmvq.cuh).
pub(super) const MMVQ_WARPS: u32 = 4;

/// Weight rows per CTA of a quantized matvec (1, 2 or 4; the CTA's warps split them). Two, as
/// measured (session 41, H200, tg128 against one row a CTA: SmolLM2-135M-shaped +3.0%,
/// Gemma-3-270M-shaped +2.5%, Llama-8B-shaped Q4_K_M +1.5%, Q4_0 +0.4%; four rows lost on the
/// 8B shapes, -3.7% on Q4_0); `KESTREL_CUDA_MMVQ_RPC=1|2|4` picks another.
pub(super) fn mmvq_rows_per_cta() -> u32 {
    static FORCED: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| {
        std::env::var("KESTREL_CUDA_MMVQ_RPC")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|r| matches!(r, 1 | 2 | 4))
            .unwrap_or(2)
    })
}

/// Activation rows a CTA of the tensor-core matvec takes: 8 per n-tile, `KESTREL_CUDA_WIDE_NT=2|4`
/// n-tiles. Default 2: ~120-160 registers a thread (ptxas, sm_90), so three or four CTAs fit an
/// SM; 4 reads each weight tile once per 32 activation rows instead of 16 but takes ~200-250
/// registers. Unmeasured so far: the first GPU run compares both.
pub(super) fn wide_ntiles() -> usize {
    static FORCED: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| {
        std::env::var("KESTREL_CUDA_WIDE_NT")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|n| matches!(n, 2 | 4))
            .unwrap_or(2)
    })
}

/// Whether the tensor-core matvec is on (`KESTREL_CUDA_WIDE=0` turns it off: 9-64 rows then
/// take the `__dp4a` matvec in launches of 8, the same bits, each weight read once per 8).
pub(super) fn wide_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("KESTREL_CUDA_WIDE").map_or(true, |v| v != "0"))
}

/// Most activation rows the tensor-core matvec takes: [`MAX_WIDE_ROWS`], or up to 4,096 with
/// `KESTREL_CUDA_WIDE_MAX=N` (prefill chunks then take it instead of the cuBLAS GEMM, with each
/// row's one-row bits: an experiment for the prefill bar, to measure against the GEMM).
fn wide_max() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        std::env::var("KESTREL_CUDA_WIDE_MAX")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|n| (MAX_WIDE_ROWS..=4096).contains(n))
            .unwrap_or(MAX_WIDE_ROWS)
    })
}

macro_rules! wide_names {
    ($t:literal) => {
        [
            concat!("mmvq_wide_", $t, "_2"),
            concat!("mmvq_wide_", $t, "_4"),
            concat!("mmvq_wide_", $t, "_2_id"),
            concat!("mmvq_wide_", $t, "_4_id"),
        ]
    };
}

/// The tensor-core matvec of a weight type with `nt` n-tiles (`mmvq_wide_<type>_<nt>`), or its
/// grouped mixture-of-experts form (`grouped`: `mmvq_wide_<type>_<nt>_id`).
pub(super) fn wide_name(dtype: DType, nt: usize, grouped: bool) -> Option<&'static str> {
    let names = match dtype {
        DType::Q4K => wide_names!("q4_K"),
        DType::Q5K => wide_names!("q5_K"),
        DType::Q6K => wide_names!("q6_K"),
        DType::Q4_0 => wide_names!("q4_0"),
        DType::Q4_1 => wide_names!("q4_1"),
        DType::Q5_0 => wide_names!("q5_0"),
        DType::Q5_1 => wide_names!("q5_1"),
        DType::Q8_0 => wide_names!("q8_0"),
        _ => return None,
    };
    Some(names[usize::from(nt == 4) + 2 * usize::from(grouped)])
}

/// Bytes of Q8_1 scratch for `n` rows of `k` values: sized for 8 or 64 rows at once, so a
/// scheduler whose batches grow one sequence at a time grows it (and retires captured graphs)
/// once, not at every size.
fn q8_scratch_bytes(n: usize, k: usize) -> usize {
    let rows = match n {
        0..=MAX_MATVEC_ROWS => MAX_MATVEC_ROWS,
        n if n <= MAX_WIDE_ROWS => MAX_WIDE_ROWS,
        n => n,
    };
    rows * (k / 32) * Q8_1_BYTES
}

/// Weight rows a CTA of the tensor-core matvec takes (`WIDE_ROWS` in kernels/mmvq_wide.cu).
pub(super) const WIDE_ROWS: usize = 16;

macro_rules! mmvq_names {
    ($t:literal) => {
        [
            concat!("mmvq_", $t, "_1"),
            concat!("mmvq_", $t, "_1_pf"),
            concat!("mmvq_", $t, "_2"),
            concat!("mmvq_", $t, "_3"),
            concat!("mmvq_", $t, "_4"),
            concat!("mmvq_", $t, "_5"),
            concat!("mmvq_", $t, "_6"),
            concat!("mmvq_", $t, "_7"),
            concat!("mmvq_", $t, "_8"),
        ]
    };
}

/// The one-row matvec over up to three weights of a type (`mmvq_<type>_multi`, or its
/// prefetching twin `_multi_pf`).
pub(super) fn mmvq_multi_name(dtype: DType, prefetch: bool) -> Option<&'static str> {
    let names = match dtype {
        DType::Q4K => ["mmvq_q4_K_multi", "mmvq_q4_K_multi_pf"],
        DType::Q5K => ["mmvq_q5_K_multi", "mmvq_q5_K_multi_pf"],
        DType::Q6K => ["mmvq_q6_K_multi", "mmvq_q6_K_multi_pf"],
        DType::Q4_0 => ["mmvq_q4_0_multi", "mmvq_q4_0_multi_pf"],
        DType::Q4_1 => ["mmvq_q4_1_multi", "mmvq_q4_1_multi_pf"],
        DType::Q5_0 => ["mmvq_q5_0_multi", "mmvq_q5_0_multi_pf"],
        DType::Q5_1 => ["mmvq_q5_1_multi", "mmvq_q5_1_multi_pf"],
        DType::Q8_0 => ["mmvq_q8_0_multi", "mmvq_q8_0_multi_pf"],
        _ => return None,
    };
    Some(names[usize::from(prefetch)])
}

/// The one-row matvec over q/k of type `a` and v of type `b` (a pair of
/// [`super::MIXED_MULTI_TYPES`]: `mmvq_<a>_<b>_multi`, or `_multi_pf`).
pub(super) fn mmvq_mixed_name(a: DType, b: DType, prefetch: bool) -> Option<&'static str> {
    let (_, _, names) = super::MIXED_MULTI
        .iter()
        .find(|&&(qk, v, _)| (qk, v) == (a, b))?;
    Some(names[usize::from(prefetch)])
}

/// `MmvqSegs` of kernels/mmvq.cuh, passed by value to `mmvq_<type>_multi`: up to three weights
/// (device pointers), their outputs and row counts (0 for an unused slot).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(super) struct MmvqSegs {
    pub w: [u64; 3],
    pub out: [u64; 3],
    pub m: [i32; 3],
    pub pad: i32,
}
const _: () = assert!(std::mem::size_of::<MmvqSegs>() == 64);
super::launch::by_value!(MmvqSegs);

/// The mmvq kernels by weight type: one activation row, the same prefetching (`_1_pf`), then 2 to
/// [`MAX_MATVEC_ROWS`] rows.
const MMVQ: [(DType, [&str; MAX_MATVEC_ROWS + 1]); 8] = [
    (DType::Q4K, mmvq_names!("q4_K")),
    (DType::Q5K, mmvq_names!("q5_K")),
    (DType::Q6K, mmvq_names!("q6_K")),
    (DType::Q4_0, mmvq_names!("q4_0")),
    (DType::Q4_1, mmvq_names!("q4_1")),
    (DType::Q5_0, mmvq_names!("q5_0")),
    (DType::Q5_1, mmvq_names!("q5_1")),
    (DType::Q8_0, mmvq_names!("q8_0")),
];

impl CudaDevice {
    /// `out[n×m] = x[n×k] · W[m×k]ᵀ` for any number of activation rows; weights F32, F16, BF16,
    /// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K. Up to [`MAX_MATVEC_ROWS`] rows: the
    /// matvec kernels (quantized weights against Q8_1 activations, each weight row read once
    /// per launch); quantized weights up to [`MAX_WIDE_ROWS`] rows: the tensor-core matvec
    /// (`KESTREL_CUDA_WIDE=0`: launches of 8), float weights launches of 8; more: the cuBLAS
    /// GEMM over the dequantized weight (`gemm.rs`), or launches of 8 rows when cuBLAS is
    /// missing. Up to [`MAX_WIDE_ROWS`] rows each output row has the bits of its row alone.
    ///
    /// # Errors
    /// Shape or dtype mismatches, a launch failure.
    pub fn matmul(&self, x: &DeviceTensor, w: &DeviceTensor, out: &mut DeviceTensor) -> Result<()> {
        self.matmul_reusing(x, w, out, None).map(|_| ())
    }

    /// [`Self::matmul`] that may skip quantizing `x` to Q8_1: when `ticket` is the one a
    /// previous call returned for the same, unchanged `x` (the caller's promise: a plan's node
    /// output is written once a step, so the q, k and v projections, or gate and up, of one
    /// layer share it) and no other matvec has quantized anything since, the scratch still
    /// holds `x` as Q8_1 and the launch is saved; the prefill GEMM likewise keeps `x` converted
    /// to its f16 operands. Returns the ticket of what this call left prepared (`None` when it
    /// prepared nothing: a float matvec, or a GEMM on f32 operands).
    ///
    /// # Errors
    /// As [`Self::matmul`].
    pub fn matmul_reusing(
        &self,
        x: &DeviceTensor,
        w: &DeviceTensor,
        out: &mut DeviceTensor,
        ticket: Option<Q8Ticket>,
    ) -> Result<Option<Q8Ticket>> {
        self.matmul_epilogue(x, w, out, ticket, None)
    }

    /// [`Self::matmul_reusing`], with `add` (when given: the quantized matvec only, as
    /// [`Self::matvec_quantized`] says) added to the product in the matvec's epilogue.
    pub(super) fn matmul_epilogue(
        &self,
        x: &DeviceTensor,
        w: &DeviceTensor,
        out: &mut DeviceTensor,
        ticket: Option<Q8Ticket>,
        add: Option<&DeviceTensor>,
    ) -> Result<Option<Q8Ticket>> {
        const OP: &str = "cuda matmul";
        f32_only(OP, x)?;
        f32_only(OP, out)?;
        let k = w.shape.row_len();
        let m = w.shape.n_rows();
        let n = x.shape.n_rows();
        if x.shape.row_len() != k {
            return Err(TensorError::ShapeMismatch {
                op: OP,
                what: "x",
                expected: Shape::matrix(n, k)?,
                actual: x.shape,
            });
        }
        if out.shape.elem_count() != n * m {
            return Err(TensorError::ShapeMismatch {
                op: OP,
                what: "out",
                expected: Shape::matrix(n, m)?,
                actual: out.shape,
            });
        }
        if let Some(a) = add {
            f32_only(OP, a)?;
            if a.shape.elem_count() != n * m {
                return Err(TensorError::ShapeMismatch {
                    op: OP,
                    what: "add",
                    expected: Shape::matrix(n, m)?,
                    actual: a.shape,
                });
            }
            if !self.matvec_quantized(w.dtype, n) {
                return Err(TensorError::InvalidParam {
                    op: OP,
                    why:
                        "an epilogue add needs the quantized matvec (a quantized weight, few rows)",
                });
            }
        }
        // Quantized rows are whole blocks (float types: blocks of one).
        let wblock = w.dtype.block_size();
        if !k.is_multiple_of(wblock) {
            return Err(TensorError::PartialBlock {
                dtype: w.dtype,
                row_len: k,
                block_size: wblock,
            });
        }
        if n == 0 || m == 0 {
            return Ok(None);
        }
        if self.wide_applies(w.dtype, n) {
            return self.matmul_wide(x, w, out, ticket, add, (n, k, m));
        }
        if self.gemm_applies(w.dtype, n) {
            return self.gemm(x, w, out, ticket, (n, k, m));
        }
        let grid = grid_for(m, ROWS_PER_CTA as usize)?;
        let block = (32, ROWS_PER_CTA);
        let (ki, mi) = (i32_of(OP, k)?, i32_of(OP, m)?);
        let (x_bytes, out_bytes) = (k * 4, m * 4);
        if let Some((_, names)) = MMVQ.iter().find(|(t, _)| *t == w.dtype) {
            let wblock = w.dtype.block_size();
            // Weight blocks per row (what the kernel takes); activation blocks of 32 per row.
            let nb = k / wblock;
            let q_row = (k / 32) * Q8_1_BYTES;
            let (mut guard, issued) = self.q8_input(x, ticket, n, k)?;
            let scratch = guard.as_mut().ok_or_else(no_scratch_err)?;
            let nb_i = i32_of(OP, nb)?;
            let rpc = mmvq_rows_per_cta();
            let (grid, block, rpc_i) = (grid_for(m, rpc as usize)?, (32, MMVQ_WARPS), rpc as i32);
            let prefetch = self.mmvq_prefetch();
            let null = 0u64;
            for r0 in (0..n).step_by(MAX_MATVEC_ROWS) {
                let rows = (n - r0).min(MAX_MATVEC_ROWS);
                let (name, grid) = match rows {
                    1 if prefetch => (names[1], self.mmvq_pf_grid(m, rpc as usize)?),
                    1 => (names[0], grid),
                    _ => (names[rows], grid),
                };
                let f = self.func(name)?;
                let a = scratch.slice(r0 * q_row..(r0 + rows) * q_row);
                let mut o = out.buf.slice_mut(r0 * out_bytes..(r0 + rows) * out_bytes);
                let mut b = self.launch(f);
                b.arg(&w.buf).arg(&a).arg(&mut o);
                let residual = add.map(|r| r.buf.slice(r0 * out_bytes..(r0 + rows) * out_bytes));
                match &residual {
                    Some(r) => b.arg(r),
                    None => b.arg(&null),
                };
                b.arg(&nb_i).arg(&mi).arg(&rpc_i);
                // SAFETY: w holds m rows of nb blocks of its type, `a` these rows' Q8_1 blocks,
                // `o` (and the residual, when given) their rows*m f32; the kernel reads and
                // writes only those.
                unsafe { b.launch(cfg(grid, block)) }.map_err(driver("launch mmvq"))?;
            }
            return Ok(issued);
        }
        let name = match w.dtype {
            DType::F32 => "matvec_f32",
            DType::F16 => "matvec_f16",
            DType::BF16 => "matvec_bf16",
            dtype => return Err(TensorError::UnsupportedDType { op: OP, dtype }),
        };
        let f = self.func(name)?;
        for r0 in (0..n).step_by(MAX_MATVEC_ROWS) {
            let rows = (n - r0).min(MAX_MATVEC_ROWS);
            let ni = rows as i32;
            let xv = x.buf.slice(r0 * x_bytes..(r0 + rows) * x_bytes);
            let mut o = out.buf.slice_mut(r0 * out_bytes..(r0 + rows) * out_bytes);
            let mut b = self.launch(f);
            b.arg(&w.buf)
                .arg(&xv)
                .arg(&mut o)
                .arg(&ki)
                .arg(&mi)
                .arg(&ni);
            // SAFETY: w holds m*k elements of its float type, xv rows*k f32, o rows*m f32.
            unsafe { b.launch(cfg(grid, block)) }.map_err(driver("launch matvec"))?;
        }
        Ok(None)
    }

    /// Whether one-row matvecs (and the q/k/v, gate/up launches) take the kernels that read
    /// each thread's weight blocks two at a time, every load of both issued before either is
    /// used, and ask L2 for the next two (`mmvq_<type>_1_pf`, `mmvq_<type>_multi_pf`;
    /// `kernels/mmvq.cuh` says why); the same bits either way. Off
    /// unless `KESTREL_CUDA_MMVQ_PREFETCH=1`: unmeasured so far (decode reaches ~32% of the
    /// device's copy bandwidth on the 8B shapes; the first GPU run compares both). Tests and
    /// A/B runs; a plan's captured graphs keep the kernels they were captured with.
    pub fn set_mmvq_prefetch(&self, on: bool) {
        self.mmvq_prefetch
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether one-row matvecs take the prefetching kernels now ([`Self::set_mmvq_prefetch`]).
    pub fn mmvq_prefetch(&self) -> bool {
        self.mmvq_prefetch
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The prefetching matvecs' CTAs an SM now (0: one a row group;
    /// [`Self::set_mmvq_ctas_per_sm`]).
    pub fn mmvq_ctas_per_sm(&self) -> usize {
        self.mmvq_ctas.load(std::sync::atomic::Ordering::Relaxed) as usize
    }

    /// At most `n` CTAs an SM for the prefetching matvecs, each working through row groups
    /// `i`, `i + grid`, ... (0: one CTA a row group, as the plain kernels; at most 32). Short
    /// rows make a CTA's work one round trip to memory, so Gemma 3's 262144 x 640 output matvec
    /// starts and retires 131072 CTAs a token; fewer, longer-lived CTAs may read faster. The
    /// same bits either way. Default `KESTREL_CUDA_MMVQ_CTAS`, else 0: unmeasured so far.
    pub fn set_mmvq_ctas_per_sm(&self, n: usize) {
        let n = u32::try_from(n).unwrap_or(u32::MAX).min(MAX_MMVQ_CTAS);
        self.mmvq_ctas
            .store(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// The grid of a prefetching matvec over `rows` rows, `rpc` a CTA's row group.
    pub(super) fn mmvq_pf_grid(&self, rows: usize, rpc: usize) -> Result<u32> {
        let grid = grid_for(rows, rpc)?;
        let per_sm = self.mmvq_ctas.load(std::sync::atomic::Ordering::Relaxed);
        if per_sm == 0 {
            return Ok(grid);
        }
        let cap = u32::try_from(self.sm_count)
            .unwrap_or(u32::MAX)
            .saturating_mul(per_sm);
        Ok(grid.min(cap.max(1)))
    }

    /// Whether a matmul of `n` activation rows by a `dtype` weight runs the quantized matvec
    /// (Q8_1 activations, `mmvq`): what the fused forms in `fused.rs` need.
    pub fn matvec_quantized(&self, dtype: DType, n: usize) -> bool {
        n > 0
            && MMVQ.iter().any(|(t, _)| *t == dtype)
            && (self.wide_applies(dtype, n) || !self.gemm_applies(dtype, n))
    }

    /// Whether `n` activation rows by a `dtype` weight take the tensor-core matvec (9 to
    /// [`wide_max`] rows).
    pub(super) fn wide_applies(&self, dtype: DType, n: usize) -> bool {
        (MAX_MATVEC_ROWS + 1..=wide_max()).contains(&n)
            && wide_enabled()
            && wide_name(dtype, 4, false).is_some()
    }

    /// The tensor-core matvec (`kernels/mmvq_wide.cu`) of `n` rows (shapes checked by
    /// [`Self::matmul_epilogue`]): each row's outputs the bits of the one-row matvec, since it
    /// takes the same `rpc`. Returns the ticket of the Q8_1 data left in the scratch, as
    /// [`Self::matmul_reusing`].
    fn matmul_wide(
        &self,
        x: &DeviceTensor,
        w: &DeviceTensor,
        out: &mut DeviceTensor,
        ticket: Option<Q8Ticket>,
        add: Option<&DeviceTensor>,
        (n, k, m): (usize, usize, usize),
    ) -> Result<Option<Q8Ticket>> {
        const OP: &str = "cuda matmul";
        let nt = wide_ntiles();
        let name = wide_name(w.dtype, nt, false).ok_or(TensorError::UnsupportedDType {
            op: OP,
            dtype: w.dtype,
        })?;
        let wblock = w.dtype.block_size();
        let (mut guard, issued) = self.q8_input(x, ticket, n, k)?;
        let scratch = guard.as_mut().ok_or_else(no_scratch_err)?;
        let (nb_i, mi, ni) = (i32_of(OP, k / wblock)?, i32_of(OP, m)?, i32_of(OP, n)?);
        let rpc = mmvq_rows_per_cta();
        let rpc_i = rpc as i32;
        let (grid_x, grid_y) = (grid_for(m, WIDE_ROWS)?, grid_for(n, 8 * nt)?);
        let null = 0u64;
        let f = self.func(name)?;
        let mut b = self.launch(f);
        b.arg(&w.buf).arg(&*scratch).arg(&mut out.buf);
        match add {
            Some(r) => b.arg(&r.buf),
            None => b.arg(&null),
        };
        b.arg(&nb_i).arg(&mi).arg(&ni).arg(&rpc_i);
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: (grid_x, grid_y, 1),
            block_dim: (32, MMVQ_WARPS / rpc, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: w holds m rows of k / wblock blocks of its type, the scratch n rows of k / 32
        // Q8_1 blocks (q8_input), `out` (and the residual, when given) n*m f32 (checked by
        // matmul_epilogue); the kernel reads rows and columns clamped to those and writes only
        // outputs inside them.
        unsafe { b.launch(cfg) }.map_err(driver("launch mmvq_wide"))?;
        Ok(issued)
    }

    /// Grows the Q8_1 activation scratch now to hold `rows` rows of `k` values, so no later
    /// step grows it (a growth retires captured CUDA graphs): a plan whose MoE layers quantize
    /// a row per (token, slot) pair sizes it for its largest step at compile time.
    ///
    /// # Errors
    /// Out of device memory.
    pub fn reserve_q8(&self, rows: usize, k: usize) -> Result<()> {
        self.q8_scratch("cuda reserve_q8", rows, k).map(|_| ())
    }

    /// The Q8_1 scratch, grown for `n` rows of `k` values, and the ticket naming the data the
    /// caller is about to quantize into it (any earlier ticket stops matching).
    pub(super) fn q8_scratch(
        &self,
        op: &'static str,
        n: usize,
        k: usize,
    ) -> Result<(ScratchGuard<'_>, Q8Ticket)> {
        let poisoned = || TensorError::InvalidParam {
            op,
            why: "scratch lock poisoned",
        };
        let mut guard = self.scratch.lock().map_err(|_| poisoned())?;
        let need = q8_scratch_bytes(n, k);
        if guard.as_ref().is_none_or(|s| s.len() < need) {
            *guard = Some(self.alloc(need.max(1))?);
            self.bump_epoch();
        }
        let mut last = self.q8_last.lock().map_err(|_| poisoned())?;
        *last = (self.new_ticket(), n, k);
        Ok((guard, Q8Ticket(last.0)))
    }

    /// Grows the Q8_1 scratch to hold `n` rows of `k` values when it is smaller (every ticket
    /// then stops matching, as after [`Self::q8_scratch`]); otherwise leaves it, and the data
    /// its ticket names, alone.
    pub(super) fn q8_grow(&self, op: &'static str, n: usize, k: usize) -> Result<()> {
        let small = {
            let guard = self.scratch.lock().map_err(|_| TensorError::InvalidParam {
                op,
                why: "scratch lock poisoned",
            })?;
            guard
                .as_ref()
                .is_none_or(|s| s.len() < q8_scratch_bytes(n, k))
        };
        if small {
            drop(self.q8_scratch(op, n, k)?);
        }
        Ok(())
    }

    /// A ticket naming what a launch already queued leaves in the scratch (`n` rows of `k`
    /// values as Q8_1), `guard` held since that launch was queued.
    pub(super) fn q8_claim(
        &self,
        _guard: &ScratchGuard<'_>,
        n: usize,
        k: usize,
    ) -> Result<Q8Ticket> {
        let mut last = self.q8_last.lock().map_err(|_| TensorError::InvalidParam {
            op: "cuda matmul",
            why: "scratch lock poisoned",
        })?;
        *last = (self.new_ticket(), n, k);
        Ok(Q8Ticket(last.0))
    }

    /// The Q8_1 scratch holding `x` (`n` rows of `k`): as `ticket` left it when that still
    /// names it, else quantized now; with the ticket naming it.
    pub(super) fn q8_input(
        &self,
        x: &DeviceTensor,
        ticket: Option<Q8Ticket>,
        n: usize,
        k: usize,
    ) -> Result<(ScratchGuard<'_>, Option<Q8Ticket>)> {
        const OP: &str = "cuda matmul";
        if let Some(g) = ticket.and_then(|t| self.q8_reuse(t, n, k)) {
            return Ok((g, ticket));
        }
        let (mut g, t) = self.q8_scratch(OP, n, k)?;
        let nblocks_i = i32_of(OP, n * (k / 32))?;
        let scratch = g.as_mut().ok_or_else(no_scratch_err)?;
        let q = self.func("quantize_q8_1")?;
        let mut b = self.launch(q);
        b.arg(&x.buf).arg(&mut *scratch).arg(&nblocks_i);
        // SAFETY: `x` holds n*k f32 (checked by the callers), the scratch n rows of Q8_1
        // blocks (grown by q8_scratch).
        unsafe { b.launch(cfg(grid_for(n * (k / 32), 8)?, (256, 1))) }
            .map_err(driver("launch quantize_q8_1"))?;
        Ok((g, Some(t)))
    }

    /// The scratch, when `ticket` still names what it holds and that was `n` rows of `k`.
    fn q8_reuse(&self, ticket: Q8Ticket, n: usize, k: usize) -> Option<ScratchGuard<'_>> {
        let guard = self.scratch.lock().ok()?;
        let last = self.q8_last.lock().ok()?;
        (ticket.0 == last.0 && (n, k) == (last.1, last.2)).then_some(guard)
    }
}

impl CudaDevice {
    /// One matrix a head (DeepSeek's absorbed `attn_k_b` / `attn_v_b`): `w` holds `n_head`
    /// f32 matrices of `m` rows of `k` values, head after head; each row of `x` is `n_head`
    /// heads of `k` values and of `out` `n_head` heads of `m`, head `h` of a row of `out` =
    /// matrix `h` times head `h` of the row of `x`.
    ///
    /// # Errors
    /// Widths that do not split into `n_head` heads, a weight of another size, row counts that
    /// differ, dtype mismatches, a launch failure.
    pub fn head_matmul(
        &self,
        x: &DeviceTensor,
        w: &DeviceTensor,
        n_head: usize,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        const OP: &str = "cuda head_matmul";
        for t in [x, w, &*out] {
            f32_only(OP, t)?;
        }
        let rows = x.shape.n_rows();
        let (k, m) = (
            x.shape.row_len() / n_head.max(1),
            out.shape.row_len() / n_head.max(1),
        );
        if n_head == 0
            || k * n_head != x.shape.row_len()
            || m * n_head != out.shape.row_len()
            || out.shape.n_rows() != rows
            || w.shape.elem_count() != n_head * m * k
        {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "rows of n_head heads and a weight of n_head matrices of their sizes",
            });
        }
        let total = rows * n_head * m;
        if total == 0 {
            return Ok(());
        }
        let (ki, mi, nh) = (i32_of(OP, k)?, i32_of(OP, m)?, i32_of(OP, n_head)?);
        let total_i = total as i64;
        let f = self.func("head_matmul_f32")?;
        let mut b = self.launch(f);
        b.arg(&w.buf)
            .arg(&x.buf)
            .arg(&mut out.buf)
            .arg(&ki)
            .arg(&mi)
            .arg(&nh)
            .arg(&total_i);
        // SAFETY: w holds n_head*m*k f32, x rows*n_head*k, out rows*n_head*m (checked); a warp
        // per output value.
        unsafe {
            b.launch(cfg(
                grid_for(total, ROWS_PER_CTA as usize)?,
                (32, ROWS_PER_CTA),
            ))
        }
        .map_err(driver("launch head_matmul"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel the matvec tables name is an entry of the embedded PTX, for compute_80 and
    /// for compute_90, so a name without a kernel (or a kernel renamed in `kernels/`) fails
    /// here rather than when a GPU first loads a model of that type.
    #[test]
    fn every_named_matvec_kernel_is_in_the_ptx() {
        let mut names: Vec<&str> = MMVQ.iter().flat_map(|(_, n)| n.iter().copied()).collect();
        for (dtype, _) in MMVQ {
            for prefetch in [false, true] {
                names.extend(mmvq_multi_name(dtype, prefetch));
            }
            for (nt, grouped) in [(2, false), (4, false), (2, true), (4, true)] {
                names.extend(wide_name(dtype, nt, grouped));
            }
        }
        for (a, b) in super::super::MIXED_MULTI_TYPES {
            for prefetch in [false, true] {
                let name = mmvq_mixed_name(a, b, prefetch);
                assert!(name.is_some(), "{a:?}+{b:?} has no kernel name");
                names.extend(name);
            }
        }
        for (_, pair) in super::super::matvec_tail::MMVQ_NORM {
            names.extend(pair);
        }
        for (_, pair) in super::super::matvec_tail::MMVQ_MULTI_GLU {
            names.extend(pair);
        }
        assert_eq!(names.len(), 8 * 9 + 8 * 2 + 8 * 4 + 3 * 2 + 8 * 2 + 8 * 2);
        for (arch, ptx) in [("compute_80", 0), ("compute_90", 1)] {
            let entries: std::collections::HashSet<&str> = super::super::MODULES
                .iter()
                .flat_map(|m| super::super::engine::entries([m.sm80, m.sm90][ptx]))
                .collect();
            for name in &names {
                assert!(entries.contains(name), "{name} is not in the {arch} PTX");
            }
        }
    }
}
