//! The state-space ops without the `cuda` feature (see the real `cuda/ssm.rs`): every entry
//! point is unreachable, as no device can exist.

use super::{CudaDevice, DeviceTensor};
use crate::cpu::SsmScanParams;
use crate::error::Result;

/// Most state values per channel the scan kernel keeps.
pub const MAX_SSM_STATE: usize = 256;

impl CudaDevice {
    /// Zeroes `t`.
    ///
    /// # Errors
    /// Unreachable.
    pub fn zero(&self, _t: &mut DeviceTensor) -> Result<()> {
        match self.never {}
    }

    /// The causal depthwise convolution of one sequence's step.
    ///
    /// # Errors
    /// Unreachable.
    pub fn ssm_conv(
        &self,
        _x: &DeviceTensor,
        _n_t: usize,
        _d_conv: usize,
        _w: (&DeviceTensor, Option<&DeviceTensor>),
        _state: &mut DeviceTensor,
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// The selective scan of one sequence's step.
    ///
    /// # Errors
    /// Unreachable.
    pub fn ssm_scan(
        &self,
        _p: &SsmScanParams,
        _state: &mut DeviceTensor,
        _in: (&DeviceTensor, &DeviceTensor, &DeviceTensor),
        _ad: (&DeviceTensor, &DeviceTensor),
        _n_t: usize,
        _y: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }
}
