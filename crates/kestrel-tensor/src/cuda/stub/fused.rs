//! The fused launches without the `cuda` feature (see the real `cuda/fused.rs` and
//! `cuda/matvec_tail.rs`): every entry point is unreachable, as no device can exist.

use super::{CudaDevice, DeviceTensor, Glu, Q8Ticket};
use crate::cuda::NormAfter;
use crate::error::Result;
use crate::DType;

/// Longest row the fused matvec + norm takes.
pub const MAX_NORM_AFTER_ROW: usize = 2048;

impl CudaDevice {
    /// RMS norm with a fused residual add and/or Q8_1 output.
    ///
    /// # Errors
    /// Unreachable.
    pub fn rms_norm_fused(
        &self,
        _x: &DeviceTensor,
        _residual: Option<(&DeviceTensor, &mut DeviceTensor)>,
        _weight: Option<&DeviceTensor>,
        _eps: f32,
        _out: &mut DeviceTensor,
        _quantize: bool,
    ) -> Result<Option<Q8Ticket>> {
        match self.never {}
    }

    /// A sandwich norm, the residual add and the norm after it, in one launch.
    ///
    /// # Errors
    /// Unreachable.
    #[allow(clippy::too_many_arguments)]
    pub fn norm_add_rms_norm(
        &self,
        _pre: (&DeviceTensor, Option<&DeviceTensor>, f32),
        _normed: &mut DeviceTensor,
        _residual: (&DeviceTensor, &mut DeviceTensor),
        _norm: (Option<&DeviceTensor>, f32),
        _out: &mut DeviceTensor,
        _quantize: bool,
    ) -> Result<Option<Q8Ticket>> {
        match self.never {}
    }

    /// Gated activation with a fused Q8_1 output.
    ///
    /// # Errors
    /// Unreachable.
    pub fn glu_fused(
        &self,
        _glu: Glu,
        _gate: &DeviceTensor,
        _up: &DeviceTensor,
        _out: &mut DeviceTensor,
        _quantize: bool,
    ) -> Result<Option<Q8Ticket>> {
        match self.never {}
    }

    /// Matmul with an add in its epilogue.
    ///
    /// # Errors
    /// Unreachable.
    pub fn matmul_add_reusing(
        &self,
        _x: &DeviceTensor,
        _w: &DeviceTensor,
        _add: &DeviceTensor,
        _out: &mut DeviceTensor,
        _ticket: Option<Q8Ticket>,
    ) -> Result<Option<Q8Ticket>> {
        match self.never {}
    }

    /// Whether the fused matvec + norm applies: never, in this build.
    pub fn matvec_norm_applies(&self, _dtype: DType, _n: usize, _m: usize) -> bool {
        match self.never {}
    }

    /// A one-row matvec and the RMS norm after it in one launch.
    ///
    /// # Errors
    /// Unreachable.
    pub fn matmul_norm_reusing(
        &self,
        _x: &DeviceTensor,
        _w: &DeviceTensor,
        _product: &mut DeviceTensor,
        _add: Option<&DeviceTensor>,
        _norm: NormAfter<'_>,
        _ticket: Option<Q8Ticket>,
    ) -> Result<Option<Q8Ticket>> {
        match self.never {}
    }

    /// Whether the fused gate/up matvec + GLU applies: never, in this build.
    pub fn matvec_gate_up_glu_applies(&self, _dtype: DType, _n: usize, _width: usize) -> bool {
        match self.never {}
    }

    /// The gate/up matvec and the gated activation after it in one launch.
    ///
    /// # Errors
    /// Unreachable.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_gate_up_glu_reusing(
        &self,
        _x: &DeviceTensor,
        _gate: (&DeviceTensor, &mut DeviceTensor),
        _up: (&DeviceTensor, &mut DeviceTensor),
        _glu: Glu,
        _out: &mut DeviceTensor,
        _quantize: bool,
        _ticket: Option<Q8Ticket>,
    ) -> Result<Option<Q8Ticket>> {
        match self.never {}
    }
}
