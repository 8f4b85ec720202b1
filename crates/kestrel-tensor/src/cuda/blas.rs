//! cuBLAS for one device ([`Blas`]: loaded at run time like the driver, or the reason there is
//! none) and the GEMM's operand type (`KESTREL_CUDA_GEMM`). The engine holds it; the GEMM
//! (`gemm`) uses it.

use std::sync::Mutex;

use cudarc::cublas::{sys as blas_sys, CudaBlas};
use cudarc::driver::{CudaSlice, CudaStream};

/// The GEMM's operand type (see the module's first lines).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Operands {
    /// f32 (TF32 tensor cores; full f32 for F32 weights).
    F32,
    /// f16, f32 accumulation (`KESTREL_CUDA_GEMM=f16`).
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
}

impl Blas {
    /// Loads cuBLAS onto `stream` unless it is missing or `KESTREL_CUDA_GEMM=0`.
    pub(super) fn open(stream: &std::sync::Arc<CudaStream>) -> Blas {
        let var = std::env::var("KESTREL_CUDA_GEMM").unwrap_or_default();
        let operands = if var.eq_ignore_ascii_case("f16") {
            Operands::F16
        } else {
            Operands::F32
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
        }
    }
}
