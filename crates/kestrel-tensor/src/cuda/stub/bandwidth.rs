//! The copy bandwidth without the `cuda` feature (see the real `cuda/bandwidth.rs`):
//! unreachable, as no device can exist.

use super::CudaDevice;
use crate::cuda::CopyBandwidth;
use crate::error::Result;

impl CudaDevice {
    /// The bandwidth of device-to-device copies of up to `max_bytes`.
    pub fn copy_bandwidth(&self, _max_bytes: usize) -> Result<CopyBandwidth> {
        match self.never {}
    }
}
