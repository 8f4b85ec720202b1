//! The elementwise ops of other architectures and the host output buffer without the `cuda`
//! feature (see the real `cuda/ops.rs` and `cuda/host.rs`): every entry point is unreachable,
//! as no device can exist.

use std::convert::Infallible;

use super::{CudaDevice, DeviceIds, DeviceTensor};
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

/// Host memory device results are copied into (none can exist in this build).
#[derive(Debug)]
pub struct HostBuffer {
    never: Infallible,
}

impl HostBuffer {
    /// Whether the buffer is page-locked.
    pub fn is_pinned(&self) -> bool {
        match self.never {}
    }

    /// Values it holds at most.
    pub fn len(&self) -> usize {
        match self.never {}
    }

    /// True for a buffer of no values.
    pub fn is_empty(&self) -> bool {
        match self.never {}
    }

    /// The values the last copy wrote.
    ///
    /// # Errors
    /// Unreachable.
    pub fn values(&self) -> Result<&[f32]> {
        match self.never {}
    }
}

impl CudaDevice {
    /// gpt-oss's clamped SwiGLU.
    ///
    /// # Errors
    /// Unreachable.
    pub fn swiglu_oai(
        &self,
        _gate: &DeviceTensor,
        _up: &DeviceTensor,
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// Rows scattered, weighted.
    ///
    /// # Errors
    /// Unreachable.
    pub fn scatter_rows_scaled(
        &self,
        _src: &DeviceTensor,
        _dst_rows: &DeviceIds,
        _w: &DeviceTensor,
        _dst: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// Slot rows summed in order.
    ///
    /// # Errors
    /// Unreachable.
    pub fn sum_slots(
        &self,
        _outs: &DeviceTensor,
        _k: usize,
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// Values written into a device tensor.
    ///
    /// # Errors
    /// Unreachable.
    pub fn write_f32(&self, _t: &mut DeviceTensor, _values: &[f32]) -> Result<()> {
        match self.never {}
    }

    /// A host buffer for device results.
    ///
    /// # Errors
    /// Unreachable.
    pub fn new_host_buffer(&self, _len: usize) -> Result<HostBuffer> {
        match self.never {}
    }

    /// Copies a tensor into a host buffer.
    ///
    /// # Errors
    /// Unreachable.
    pub fn download_into_host(&self, _t: &DeviceTensor, _dst: &mut HostBuffer) -> Result<()> {
        match self.never {}
    }

    /// One part of every head.
    ///
    /// # Errors
    /// Unreachable.
    pub fn head_slice(
        &self,
        _src: &DeviceTensor,
        _part: (usize, usize, usize),
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// Each head of `a` then of `b`.
    ///
    /// # Errors
    /// Unreachable.
    pub fn head_concat(
        &self,
        _ab: (&DeviceTensor, &DeviceTensor),
        _n_head: usize,
        _heads: [usize; 2],
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// One matrix a head.
    ///
    /// # Errors
    /// Unreachable.
    pub fn head_matmul(
        &self,
        _x: &DeviceTensor,
        _w: &DeviceTensor,
        _n_head: usize,
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// DeepSeek's latent attention.
    ///
    /// # Errors
    /// Unreachable.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_latent_ids(
        &self,
        _q: &DeviceTensor,
        _positions: &DeviceIds,
        _k: &DeviceTensor,
        _kv_len: usize,
        _p: &crate::cpu::AttentionParams,
        _head_dim_v: usize,
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// Appends keys alone.
    ///
    /// # Errors
    /// Unreachable.
    pub fn kv_append_ids(
        &self,
        _src: &DeviceTensor,
        _positions: &DeviceIds,
        _cache: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }
}
