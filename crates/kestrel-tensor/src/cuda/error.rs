//! `CudaError`: why the CUDA engine could not start or an op on it failed.

/// An error of the CUDA engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CudaError {
    /// kestrel was built without the `cuda` feature.
    #[error("this kestrel was built without the `cuda` feature (rebuild with `--features cuda`)")]
    NotBuilt,
    /// No CUDA driver library (libcuda) could be loaded.
    #[error("no CUDA driver found (libcuda.so could not be loaded): install the NVIDIA driver or use --device cpu")]
    NoDriver,
    /// The driver is there but the GPU asked for is not.
    #[error("no CUDA device {requested}: the driver reports {found} device(s)")]
    NoDevice {
        /// The ordinal asked for.
        requested: usize,
        /// Devices the driver found.
        found: usize,
    },
    /// The GPU is older than the embedded PTX targets (compute capability 8.0).
    #[error(
        "CUDA device {ordinal} has compute capability {major}.{minor}; kestrel needs 8.0 or newer"
    )]
    Unsupported {
        /// The device.
        ordinal: usize,
        /// Its major compute capability.
        major: i32,
        /// Its minor compute capability.
        minor: i32,
    },
    /// An allocation did not fit.
    #[error("CUDA out of memory: {asked} bytes asked, {free} of {total} bytes free")]
    OutOfMemory {
        /// Bytes asked for.
        asked: usize,
        /// Bytes free when it failed.
        free: usize,
        /// The device's memory.
        total: usize,
    },
    /// A driver call failed.
    #[error("CUDA {op} failed: {message}")]
    Driver {
        /// What was being done.
        op: &'static str,
        /// The driver's error.
        message: String,
    },
    /// A kernel is missing from its module or its launch failed.
    #[error("CUDA kernel {kernel}: {message}")]
    Kernel {
        /// The kernel's name.
        kernel: String,
        /// What went wrong.
        message: String,
    },
}
