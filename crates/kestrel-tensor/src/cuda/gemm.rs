//! The prefill matmul: from [`GEMM_MIN_ROWS`] activation rows on, the weight (a band of its
//! rows at a time) is dequantized on the device (`kernels/dequant.cu`) and multiplied by
//! cuBLAS, so each weight is read once per step instead of once per
//! [`MAX_MATVEC_ROWS`](super::MAX_MATVEC_ROWS) rows as the matvec kernels read it. Up to
//! [`MAX_WIDE_ROWS`] rows every weight type keeps the matvec kernels (quantized ones the
//! tensor-core matvec past 8), whose rows have the bits of one row alone: a batched decode step
//! of that many sequences gives each its own logits. ggml-cuda takes the same route (dequantize
//! to f16, then cuBLAS) where its integer MMQ kernels do not apply.
//!
//! Operands are f16 with f32 accumulation (f16 tensor cores: half the bytes dequantized and
//! twice TF32's peak; the 8B-shaped Q4_K_M pp512 measured +18% over f32 operands on an H200).
//! The activations are first divided by the power of two that brings their largest magnitude
//! under 2^15 (`absmax_f32`, `f32_to_f16_scaled`), and cuBLAS multiplies the product back by it
//! through an alpha it reads from device memory: activations past f16's range (Gemma's can be)
//! stay finite, and where none exceeds 2^15 the operands are x rounded to f16, nothing more.
//! The conversion is done once per input: the q, k and v projections of a layer (gate and up)
//! share it through the ticket [`CudaDevice::matmul_reusing`] hands back, as the matvecs share
//! their Q8_1 activations.
//! Weights are not scaled: F16 weights are f16 already, and a quantized value (an f16 block
//! scale times an integer of at most 945 in magnitude, Q4_K's 63 × 15) leaves f16's range only
//! for block scales past ~69, which no GGUF file we know of holds (ggml-cuda's f16 path makes
//! the same assumption); `KESTREL_CUDA_GEMM=f32` is the way out for such a file. BF16 weights,
//! whose range is f32's, take f32 operands (TF32), as do F32
//! weights (full f32 products, the matvec's bound). `KESTREL_CUDA_GEMM=f32` takes f32 operands
//! (TF32) for every type, as before the f16 default.
//!
//! cuBLAS is loaded at run time like the driver; without it (or with `KESTREL_CUDA_GEMM=0`)
//! matmul keeps the matvec kernels for every row count.

use std::sync::atomic::Ordering;

use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::driver::{DevicePtr, DevicePtrMut};

use super::blas::{Operands, SCALARS_BYTES};
use super::engine::{cfg, driver, grid_for};
use super::{CudaDevice, CudaError, DeviceTensor, Q8Ticket, MAX_WIDE_ROWS};
use crate::error::{Result, TensorError};
use crate::DType;

/// Activation rows from which [`CudaDevice::matmul`] takes the GEMM.
pub const GEMM_MIN_ROWS: usize = MAX_WIDE_ROWS + 1;

/// How a weight type enters the GEMM: its dequantization kernel (`None`: used as it is) and
/// the operand type; `None` for types the GEMM does not take.
fn dequant_kernel(dtype: DType, operands: Operands) -> Option<(Option<&'static str>, Operands)> {
    let f16 = operands == Operands::F16;
    let name = match dtype {
        DType::F32 => return Some((None, Operands::F32)),
        DType::F16 if f16 => return Some((None, Operands::F16)),
        DType::F16 => "dequant_f32_f16",
        DType::BF16 => return Some((Some("dequant_f32_bf16"), Operands::F32)),
        DType::Q4_0 if f16 => "dequant_f16_q4_0",
        DType::Q4_0 => "dequant_f32_q4_0",
        DType::Q4_1 if f16 => "dequant_f16_q4_1",
        DType::Q4_1 => "dequant_f32_q4_1",
        DType::Q5_0 if f16 => "dequant_f16_q5_0",
        DType::Q5_0 => "dequant_f32_q5_0",
        DType::Q5_1 if f16 => "dequant_f16_q5_1",
        DType::Q5_1 => "dequant_f32_q5_1",
        DType::Q8_0 if f16 => "dequant_f16_q8_0",
        DType::Q8_0 => "dequant_f32_q8_0",
        DType::Q4K if f16 => "dequant_f16_q4_K",
        DType::Q4K => "dequant_f32_q4_K",
        DType::Q5K if f16 => "dequant_f16_q5_K",
        DType::Q5K => "dequant_f32_q5_K",
        DType::Q6K if f16 => "dequant_f16_q6_K",
        DType::Q6K => "dequant_f32_q6_K",
        _ => return None,
    };
    Some((Some(name), operands))
}

fn blas_error(op: &'static str) -> impl Fn(blas::CublasError) -> TensorError {
    move |e| {
        TensorError::Cuda(CudaError::Driver {
            op,
            message: e.to_string(),
        })
    }
}

impl CudaDevice {
    /// Why the prefill GEMM is off (no cuBLAS, or `KESTREL_CUDA_GEMM=0`): matmul then runs the
    /// matvec kernels for every row count. `None` when it is on.
    pub fn gemm_off(&self) -> Option<&str> {
        self.blas.missing.as_deref()
    }

    /// The largest band of weight rows the GEMM dequantizes at once (bytes of operands; at
    /// least one row is taken): 256 MiB unless `KESTREL_CUDA_GEMM_BAND_MB` says otherwise. A
    /// band is dequantized, then multiplied, band after band; one small enough to stay in L2
    /// (H100: 50 MB) would let cuBLAS read it from there instead of memory, at the cost of
    /// narrower GEMMs. Unmeasured: for A/B runs and tests (a band's size does not change what
    /// is computed, though cuBLAS may take other kernels for other shapes); a captured graph
    /// keeps the bands it was captured with.
    pub fn set_gemm_band_bytes(&self, bytes: usize) {
        self.blas.band_bytes.store(bytes.max(1), Ordering::Relaxed);
    }

    /// Whether matmul takes the GEMM for `n` rows of this weight type.
    pub(super) fn gemm_applies(&self, dtype: DType, n: usize) -> bool {
        n >= GEMM_MIN_ROWS
            && self.blas.handle.is_some()
            && dequant_kernel(dtype, self.blas.operands).is_some()
    }

    /// `out[n×m] = x[n×k] · W[m×k]ᵀ` through cuBLAS (shapes checked by the caller, and
    /// [`Self::gemm_applies`] true). On f16 operands, `x`'s conversion is skipped when `ticket`
    /// names the one still held (the q, k and v projections of a layer, or gate and up, share
    /// their input: see [`Self::matmul_reusing`]); returns the ticket of the conversion held
    /// after the call (`None` on f32 operands, which convert nothing).
    pub(super) fn gemm(
        &self,
        x: &DeviceTensor,
        w: &DeviceTensor,
        out: &mut DeviceTensor,
        ticket: Option<Q8Ticket>,
        (n, k, m): (usize, usize, usize),
    ) -> Result<Option<Q8Ticket>> {
        const OP: &str = "cuda gemm";
        let (Some(handle), Some((kernel, operands))) = (
            &self.blas.handle,
            dequant_kernel(w.dtype, self.blas.operands),
        ) else {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "no cuBLAS or no dequantization for this type",
            });
        };
        let poisoned = || TensorError::InvalidParam {
            op: OP,
            why: "lock poisoned",
        };
        let handle = handle.lock().map_err(|_| poisoned())?;
        let mut band = self.blas.band.lock().map_err(|_| poisoned())?;
        let mut x16 = self.blas.x16.lock().map_err(|_| poisoned())?;
        let mut scalars = self.blas.scalars.lock().map_err(|_| poisoned())?;
        let mut x16_last = self.blas.x16_last.lock().map_err(|_| poisoned())?;
        let row_bytes = w.row_bytes();
        let elem = operands.bytes();
        let band_bytes = self.blas.band_bytes.load(Ordering::Relaxed);
        let band_rows = (band_bytes / (k * elem)).clamp(1, m);
        if kernel.is_some() && band.as_ref().is_none_or(|b| b.len() < band_rows * k * elem) {
            *band = Some(self.alloc(band_rows * k * elem)?);
            self.bump_epoch();
        }
        if operands == Operands::F16 && x16.as_ref().is_none_or(|b| b.len() < n * k * 2) {
            *x16_last = (0, 0, 0);
            *x16 = Some(self.alloc(n * k * 2)?);
            self.bump_epoch();
        }
        if operands == Operands::F16 && scalars.is_none() {
            *x16_last = (0, 0, 0);
            *scalars = Some(self.alloc(SCALARS_BYTES)?);
            self.bump_epoch();
        }
        let (ki, ni) = (super::engine::i32_of(OP, k)?, super::engine::i32_of(OP, n)?);
        let ldc = super::engine::i32_of(OP, m)?;
        // F32 weights keep full f32 products (the matvec's bound), f16 operands accumulate in
        // f32; the rest take TF32.
        let compute = if w.dtype == DType::F32 || operands == Operands::F16 {
            blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F
        } else {
            blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        };
        self.ctx
            .bind_to_thread()
            .map_err(driver("cuCtxSetCurrent"))?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        // The activations as the operand type (f16: scaled into range, once per input, with
        // alpha and beta on the device), or x as it is (alpha and beta from the host).
        let mut issued = None;
        let (x_ptr, _x_rec, scalar_ptrs, _s_rec) = match (operands, x16.as_mut(), scalars.as_mut())
        {
            (Operands::F16, Some(dst), Some(sc)) => {
                // Converted already when the ticket names what x16 holds (every conversion
                // takes a new serial; a reallocation is followed by one).
                let held = ticket.filter(|t| (t.0, n, k) == *x16_last);
                let values = (n * k) as i64;
                let grid = grid_for(n * k, 256)?.min(65_535);
                if held.is_none() {
                    // Forgotten first: a failed launch leaves nothing a ticket names.
                    *x16_last = (0, 0, 0);
                    let (mut amax, mut ab) = sc.split_at_mut(4);
                    self.stream
                        .memset_zeros(&mut amax)
                        .map_err(driver("cuMemsetD8Async"))?;
                    let mut b = self.launch(self.func("absmax_f32")?);
                    b.arg(&x.buf).arg(&mut amax).arg(&values);
                    // SAFETY: x holds n*k f32 (checked by the caller); amax is 4 bytes.
                    unsafe { b.launch(cfg(grid.min(1024), (256, 1))) }
                        .map_err(driver("launch absmax_f32"))?;
                    let mut b = self.launch(self.func("f32_to_f16_scaled")?);
                    b.arg(&x.buf)
                        .arg(&mut *dst)
                        .arg(&mut amax)
                        .arg(&mut ab)
                        .arg(&values);
                    // SAFETY: dst holds at least n*k f16, amax 4 bytes, ab 8 (alpha, beta).
                    unsafe { b.launch(cfg(grid, (256, 1))) }
                        .map_err(driver("launch f32_to_f16_scaled"))?;
                    *x16_last = (self.new_ticket(), n, k);
                }
                issued = Some(Q8Ticket(x16_last.0));
                let (x_ptr, x_rec) = dst.device_ptr(&self.stream);
                let (s_ptr, s_rec) = sc.device_ptr(&self.stream);
                (x_ptr, x_rec, Some((s_ptr + 4, s_ptr + 8)), Some(s_rec))
            }
            _ => {
                let (x_ptr, x_rec) = x.buf.device_ptr(&self.stream);
                (x_ptr, x_rec, None, None)
            }
        };
        let (alpha_ptr, beta_ptr, mode) = match scalar_ptrs {
            Some((a, b)) => (
                a as *const f32,
                b as *const f32,
                blas_sys::cublasPointerMode_t::CUBLAS_POINTER_MODE_DEVICE,
            ),
            None => (
                &alpha as *const f32,
                &beta as *const f32,
                blas_sys::cublasPointerMode_t::CUBLAS_POINTER_MODE_HOST,
            ),
        };
        handle
            .set_pointer_mode(mode)
            .map_err(blas_error("cublasSetPointerMode"))?;
        let ab_type = operands.cuda_type();
        for r0 in (0..m).step_by(band_rows) {
            let rows = band_rows.min(m - r0);
            let mi = super::engine::i32_of(OP, rows)?;
            let src = w.buf.slice(r0 * row_bytes..(r0 + rows) * row_bytes);
            let (a_ptr, _a_rec) = match (kernel, band.as_mut()) {
                (Some(name), Some(dst)) => {
                    let values = (rows * k) as i64;
                    let f = self.func(name)?;
                    let mut b = self.launch(f);
                    b.arg(&src).arg(&mut *dst).arg(&values);
                    // SAFETY: `src` holds `rows` whole rows of the weight's blocks, `dst` at
                    // least rows*k operands (grown above); the kernel writes `values` of them.
                    unsafe { b.launch(cfg(grid_for(rows * k, 256)?.min(65_535), (256, 1))) }
                        .map_err(driver("launch dequant"))?;
                    dst.device_ptr(&self.stream)
                }
                _ => src.device_ptr(&self.stream),
            };
            let (o_ptr, _o_rec) = out.buf.device_ptr_mut(&self.stream);
            let c_ptr = o_ptr + (r0 * 4) as u64;
            // SAFETY: column-major view: A = the band as k×rows (lda k), transposed; B = x as
            // k×n (ldb k); C = out as m×n (ldc m) from column r0. Every extent was checked
            // against the buffers by the caller; pointers stay valid while the records live.
            unsafe {
                blas::gemm_ex(
                    *handle.handle(),
                    blas_sys::cublasOperation_t::CUBLAS_OP_T,
                    blas_sys::cublasOperation_t::CUBLAS_OP_N,
                    mi,
                    ni,
                    ki,
                    alpha_ptr.cast(),
                    a_ptr as *const _,
                    ab_type,
                    ki,
                    x_ptr as *const _,
                    ab_type,
                    ki,
                    beta_ptr.cast(),
                    c_ptr as *mut _,
                    blas_sys::cudaDataType_t::CUDA_R_32F,
                    ldc,
                    compute,
                    blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
            .map_err(blas_error("cublasGemmEx"))?;
        }
        Ok(issued)
    }
}
