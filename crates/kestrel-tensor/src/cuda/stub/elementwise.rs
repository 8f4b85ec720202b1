//! The elementwise ops of other architectures without the `cuda` feature (see the real
//! `cuda/ops.rs`): every entry point is unreachable, as no device can exist.

use super::{CudaDevice, DeviceTensor};
use crate::cuda::Unary;
use crate::error::Result;

impl CudaDevice {
    /// `out = op(src)`.
    ///
    /// # Errors
    /// Unreachable.
    pub fn unary_op(&self, _op: Unary, _src: &DeviceTensor, _out: &mut DeviceTensor) -> Result<()> {
        match self.never {}
    }

    /// Each row times its own scalar.
    ///
    /// # Errors
    /// Unreachable.
    pub fn mul_row_scalar(
        &self,
        _a: &DeviceTensor,
        _s: &DeviceTensor,
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// A column slice of each row.
    ///
    /// # Errors
    /// Unreachable.
    pub fn slice_cols(
        &self,
        _src: &DeviceTensor,
        _offset: usize,
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }
}
