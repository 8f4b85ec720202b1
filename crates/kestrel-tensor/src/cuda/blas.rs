//! cuBLAS for one device ([`Blas`]: loaded at run time like the driver, or the reason there is
//! none) and the GEMM's operand type (`KESTREL_CUDA_GEMM=f32`: f32; f16 by default). The engine holds it; the GEMM
//! (`gemm`) uses it.

use std::sync::Mutex;

use std::sync::atomic::AtomicUsize;

use cudarc::cublas::{sys as blas_sys, CudaBlas};
use cudarc::driver::{CudaSlice, CudaStream};

/// The GEMM's operand type (see the module's first lines).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Operands {
    /// f32 (TF32 tensor cores; full f32 for F32 weights): `KESTREL_CUDA_GEMM=f32`, and BF16
    /// weights always (their range is f32's).
    F32,
    /// f16, f32 accumulation, the activations scaled by a power of two that keeps them inside
    /// f16's range (the default).
    F16,
}

impl Operands {
    pub(super) fn bytes(self) -> usize {
        match self {
            Operands::F32 => 4,
            Operands::F16 => 2,
        }
    }

    pub(super) fn cuda_type(self) -> blas_sys::cudaDataType_t {
        match self {
            Operands::F32 => blas_sys::cudaDataType_t::CUDA_R_32F,
            Operands::F16 => blas_sys::cudaDataType_t::CUDA_R_16F,
        }
    }
}

/// cuBLAS for one device, or why there is none.
pub(super) struct Blas {
    pub(super) handle: Option<Mutex<CudaBlas>>,
    /// Why `handle` is `None` (logged once by callers that care).
    pub(super) missing: Option<String>,
    /// Operands for quantized, F16 and BF16 weights (F32 weights always take f32).
    pub(super) operands: Operands,
    /// The dequantized band (grown, never shrunk).
    pub(super) band: Mutex<Option<CudaSlice<u8>>>,
    /// The activations in f16 (f16 operands only; grown, never shrunk).
    pub(super) x16: Mutex<Option<CudaSlice<u8>>>,
    /// f16 operands' device scalars: the activations' largest magnitude (bits, 4 bytes), then
    /// the GEMM's alpha and beta (f32 each), read by cuBLAS from the device.
    pub(super) scalars: Mutex<Option<CudaSlice<u8>>>,
    /// The ticket serial of the activations `x16` and `scalars` hold, and their (rows, row
    /// length): a GEMM handed that ticket back for the same input skips converting it again.
    pub(super) x16_last: Mutex<(u64, usize, usize)>,
    /// Largest band of dequantized weight rows, in bytes ([`CudaDevice::set_gemm_band_bytes`](super::CudaDevice::set_gemm_band_bytes)).
    pub(super) band_bytes: AtomicUsize,
}

/// The default band: 256 MiB, so an 8B model's output matrix (128256 × 4096, 2 GiB as f32) is
/// not dequantized whole; `KESTREL_CUDA_GEMM_BAND_MB` sets another.
const BAND_BYTES: usize = 256 << 20;

/// The band size `KESTREL_CUDA_GEMM_BAND_MB` asks for (MiB, at least 1), else [`BAND_BYTES`].
fn band_bytes_from_env() -> usize {
    std::env::var("KESTREL_CUDA_GEMM_BAND_MB")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&mb| mb > 0)
        .map_or(BAND_BYTES, |mb| mb.saturating_mul(1 << 20))
}

/// Bytes of [`Blas::scalars`].
pub(super) const SCALARS_BYTES: usize = 12;

impl Blas {
    /// Loads cuBLAS onto `stream` unless it is missing or `KESTREL_CUDA_GEMM=0`
    /// (`KESTREL_CUDA_GEMM=f32`: f32 operands for every weight type).
    pub(super) fn open(stream: &std::sync::Arc<CudaStream>) -> Blas {
        let var = std::env::var("KESTREL_CUDA_GEMM").unwrap_or_default();
        let operands = if var.eq_ignore_ascii_case("f32") || var.eq_ignore_ascii_case("tf32") {
            Operands::F32
        } else {
            Operands::F16
        };
        let (handle, missing) = if var == "0" {
            (None, Some("KESTREL_CUDA_GEMM=0".to_string()))
        // SAFETY: only tries to dlopen libcublas under its usual names.
        } else if !unsafe { blas_sys::is_culib_present() } {
            (None, Some("libcublas was not found".to_string()))
        } else {
            match CudaBlas::new(std::sync::Arc::clone(stream)) {
                Ok(b) => (Some(Mutex::new(b)), None),
                Err(e) => (None, Some(format!("cublasCreate: {e}"))),
            }
        };
        Blas {
            handle,
            missing,
            operands,
            band: Mutex::new(None),
            x16: Mutex::new(None),
            scalars: Mutex::new(None),
            x16_last: Mutex::new((0, 0, 0)),
            band_bytes: AtomicUsize::new(band_bytes_from_env()),
        }
    }
}
