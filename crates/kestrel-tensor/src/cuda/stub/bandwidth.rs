//! The copy bandwidth without the `cuda` feature (see the real `cuda/bandwidth.rs`):
//! unreachable, as no device can exist.

use super::CudaDevice;
use crate::cuda::{CopyBandwidth, DeviceTensor, MatmulTiming};
use crate::error::Result;

impl CudaDevice {
    /// The bandwidth of device-to-device copies of up to `max_bytes`.
    pub fn copy_bandwidth(&self, _max_bytes: usize) -> Result<CopyBandwidth> {
        match self.never {}
    }

    /// Times a pass of matmuls by each of `weights`.
    ///
    /// # Errors
    /// Unreachable.
    pub fn time_matmuls(
        &self,
        _weights: &[&DeviceTensor],
        _x: &DeviceTensor,
        _out: &mut DeviceTensor,
        _reps: usize,
    ) -> Result<MatmulTiming> {
        match self.never {}
    }
}
