//! The CUDA engine's API when kestrel is built without the `cuda` feature: the same types and
//! functions, each entry point returning [`CudaError::NotBuilt`], so callers compile without
//! `cfg` and a user asking for a GPU gets a sentence instead of a missing symbol.

use std::convert::Infallible;

use super::CudaError;

mod bandwidth;
mod elementwise;
mod experts;
mod fused;
mod kv_table;
mod ssm;
mod topk;
use crate::cpu::{AttentionParams, RopeParams};
use crate::error::Result;
use crate::{DType, Shape, Tensor};
pub use elementwise::HostBuffer;
pub use experts::{DeviceRoutes, ExpertTable};
pub use fused::MAX_NORM_AFTER_ROW;
pub use kv_table::{KvPages, KvTable};
pub use ssm::MAX_SSM_STATE;
pub use topk::{DeviceTopK, MAX_TOP_K};

/// Longest key head of the latent attention kernels.
pub const MLA_MAX_HEAD_DIM: usize = 576;

/// GPUs the driver reports: never, in this build.
///
/// # Errors
/// Always [`CudaError::NotBuilt`].
pub fn device_count() -> Result<usize, CudaError> {
    Err(CudaError::NotBuilt)
}

/// One line about GPU 0: never, in this build.
///
/// # Errors
/// Always [`CudaError::NotBuilt`].
pub fn probe() -> Result<String, CudaError> {
    Err(CudaError::NotBuilt)
}

/// A tensor in device memory (none can exist in this build).
#[derive(Debug)]
pub struct DeviceTensor {
    never: Infallible,
}

impl DeviceTensor {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self.never {}
    }

    /// The shape.
    pub fn shape(&self) -> Shape {
        match self.never {}
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        match self.never {}
    }

    /// Another shape over the same buffer.
    ///
    /// # Errors
    /// Unreachable.
    pub fn set_shape(&mut self, _shape: Shape) -> Result<()> {
        match self.never {}
    }
}

/// Ids on the device (none can exist in this build).
#[derive(Debug)]
pub struct DeviceIds {
    never: Infallible,
}

impl DeviceIds {
    /// The values last written.
    pub fn as_slice(&self) -> &[i32] {
        match self.never {}
    }

    /// How many values were last written.
    pub fn len(&self) -> usize {
        match self.never {}
    }

    /// True when none were written.
    pub fn is_empty(&self) -> bool {
        match self.never {}
    }

    /// Most values it holds.
    pub fn capacity(&self) -> usize {
        match self.never {}
    }
}

/// A captured graph (none can exist in this build).
#[derive(Debug)]
pub struct DeviceGraph {
    never: Infallible,
}

impl DeviceGraph {
    /// Replays the graph.
    ///
    /// # Errors
    /// Unreachable.
    pub fn launch(&self) -> Result<()> {
        match self.never {}
    }
}

/// A timing event (none can exist in this build).
#[derive(Debug)]
pub struct DeviceEvent {
    never: Infallible,
}

impl DeviceEvent {
    /// Milliseconds between two events.
    ///
    /// # Errors
    /// Unreachable.
    pub fn elapsed_ms(&self, _end: &DeviceEvent) -> Result<f32> {
        match self.never {}
    }
}

/// Names quantized activations left in a device's scratch (none can exist in this build).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Q8Ticket(());

/// A gated activation `act(gate) * up` (as the `cuda` build's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Glu {
    /// `silu(gate) * up`.
    SwiGlu,
    /// `gelu(gate) * up` (tanh form).
    GeGlu,
}

/// One GPU (none can be opened in this build).
#[derive(Debug)]
pub struct CudaDevice {
    never: Infallible,
}

impl CudaDevice {
    /// Always fails: kestrel was built without CUDA.
    ///
    /// # Errors
    /// Always [`CudaError::NotBuilt`].
    pub fn open(_ordinal: usize) -> Result<CudaDevice, CudaError> {
        Err(CudaError::NotBuilt)
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> usize {
        match self.never {}
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        match self.never {}
    }

    /// Device memory (free, total).
    ///
    /// # Errors
    /// Unreachable.
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        match self.never {}
    }

    /// Compute capability.
    pub fn compute_capability(&self) -> (i32, i32) {
        match self.never {}
    }

    /// Copies a host tensor to the device.
    ///
    /// # Errors
    /// Unreachable: no device exists.
    pub fn upload(&self, _t: &Tensor) -> Result<DeviceTensor> {
        match self.never {}
    }

    /// A zeroed f32 tensor on the device.
    ///
    /// # Errors
    /// Unreachable.
    pub fn zeros_f32(&self, _shape: Shape) -> Result<DeviceTensor> {
        match self.never {}
    }

    /// An f32 tensor's values.
    ///
    /// # Errors
    /// Unreachable.
    pub fn download_f32(&self, _t: &DeviceTensor) -> Result<Vec<f32>> {
        match self.never {}
    }

    /// An f32 tensor's values copied into `dst`.
    ///
    /// # Errors
    /// Unreachable.
    pub fn download_f32_into(&self, _t: &DeviceTensor, _dst: &mut [f32]) -> Result<()> {
        match self.never {}
    }

    /// Why the prefill GEMM is off: never asked in this build.
    pub fn gemm_off(&self) -> Option<&str> {
        match self.never {}
    }

    /// Waits for the stream.
    ///
    /// # Errors
    /// Unreachable.
    pub fn synchronize(&self) -> Result<()> {
        match self.never {}
    }

    /// Matrix times 1-8 rows.
    ///
    /// # Errors
    /// Unreachable.
    pub fn matmul(
        &self,
        _x: &DeviceTensor,
        _w: &DeviceTensor,
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// Picks the attention kernel for several query tokens.
    pub fn set_attention_kernel(&self, _kernel: super::AttentionKernel) {
        match self.never {}
    }

    /// How decode steps split attention over the keys.
    pub fn set_attention_splits(&self, _splits: Option<usize>) {
        match self.never {}
    }

    /// Whether one-row matvecs take the prefetching kernels.
    pub fn set_mmvq_prefetch(&self, _on: bool) {
        match self.never {}
    }

    /// At most `n` CTAs an SM for the prefetching matvecs.
    pub fn set_mmvq_ctas_per_sm(&self, _n: usize) {
        match self.never {}
    }

    /// Whether one-row matvecs take the prefetching kernels now.
    pub fn mmvq_prefetch(&self) -> bool {
        match self.never {}
    }

    /// The prefetching matvecs' CTAs an SM now (0: one a row group).
    pub fn mmvq_ctas_per_sm(&self) -> usize {
        match self.never {}
    }

    /// Turns programmatic dependent launch on or off.
    pub fn set_programmatic_launch(&self, _on: bool) -> bool {
        match self.never {}
    }

    /// Whether kernels are launched for programmatic dependent launch.
    pub fn programmatic_launch(&self) -> bool {
        match self.never {}
    }

    /// The largest band of weight rows the prefill GEMM dequantizes at once.
    pub fn set_gemm_band_bytes(&self, _bytes: usize) {
        match self.never {}
    }

    /// Matmul that may reuse the last call's quantized input.
    ///
    /// # Errors
    /// Unreachable.
    pub fn matmul_reusing(
        &self,
        _x: &DeviceTensor,
        _w: &DeviceTensor,
        _out: &mut DeviceTensor,
        _ticket: Option<Q8Ticket>,
    ) -> Result<Option<Q8Ticket>> {
        match self.never {}
    }

    /// Queries and keys rotated, keys and values appended, in one launch.
    ///
    /// # Errors
    /// Unreachable.
    #[allow(clippy::too_many_arguments)]
    pub fn rope_qk_append_ids(
        &self,
        _q: (&DeviceTensor, &mut DeviceTensor),
        _kv: (&DeviceTensor, &DeviceTensor),
        _positions: &DeviceIds,
        _caches: (&mut DeviceTensor, &mut DeviceTensor),
        _heads: (usize, usize, usize),
        _p: &RopeParams,
        _freq_factors: Option<&DeviceTensor>,
        _q_scale: f32,
        _head_norms: [Option<super::HeadNorm<'_>>; 2],
    ) -> Result<()> {
        match self.never {}
    }

    /// Whether the multi-weight matvec applies: never, in this build.
    pub fn matvec_multi_applies(&self, _dtypes: &[DType], _n: usize) -> bool {
        match self.never {}
    }

    /// Up to three matvecs of one activation row in one launch.
    ///
    /// # Errors
    /// Unreachable.
    pub fn matmul_multi_reusing(
        &self,
        _x: &DeviceTensor,
        _first: (&DeviceTensor, &mut DeviceTensor),
        _second: (&DeviceTensor, &mut DeviceTensor),
        _third: Option<(&DeviceTensor, &mut DeviceTensor)>,
        _ticket: Option<Q8Ticket>,
    ) -> Result<Option<Q8Ticket>> {
        match self.never {}
    }

    /// `out = src * s`.
    ///
    /// # Errors
    /// Unreachable.
    pub fn scale_from(&self, _src: &DeviceTensor, _out: &mut DeviceTensor, _s: f32) -> Result<()> {
        match self.never {}
    }

    /// `out = cap * tanh(src / cap)`.
    ///
    /// # Errors
    /// Unreachable.
    pub fn softcap_from(
        &self,
        _src: &DeviceTensor,
        _out: &mut DeviceTensor,
        _cap: f32,
    ) -> Result<()> {
        match self.never {}
    }

    /// `out = src * f(pos)` per token row (Llama 4's attention temperature).
    ///
    /// # Errors
    /// Unreachable.
    #[allow(clippy::too_many_arguments)]
    pub fn attn_temperature_ids_from(
        &self,
        _src: &DeviceTensor,
        _out: &mut DeviceTensor,
        _positions: &DeviceIds,
        _width: usize,
        _floor_scale: u32,
        _scale: f32,
        _offset: f32,
    ) -> Result<()> {
        match self.never {}
    }

    /// `out = gelu(src)` (erf form).
    ///
    /// # Errors
    /// Unreachable.
    pub fn gelu_erf_from(&self, _src: &DeviceTensor, _out: &mut DeviceTensor) -> Result<()> {
        match self.never {}
    }

    /// Whether a matmul runs the quantized matvec: never, in this build.
    pub fn matvec_quantized(&self, _dtype: DType, _n: usize) -> bool {
        match self.never {}
    }

    /// RMS norm.
    ///
    /// # Errors
    /// Unreachable.
    pub fn rms_norm(
        &self,
        _x: &DeviceTensor,
        _w: Option<&DeviceTensor>,
        _eps: f32,
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// Layer norm.
    ///
    /// # Errors
    /// Unreachable.
    pub fn layer_norm(
        &self,
        _x: &DeviceTensor,
        _w: Option<&DeviceTensor>,
        _b: Option<&DeviceTensor>,
        _eps: f32,
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// Embedding lookup.
    ///
    /// # Errors
    /// Unreachable.
    pub fn get_rows(
        &self,
        _table: &DeviceTensor,
        _ids: &[u32],
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// `out = a + b`.
    ///
    /// # Errors
    /// Unreachable.
    pub fn add(&self, _a: &DeviceTensor, _b: &DeviceTensor, _out: &mut DeviceTensor) -> Result<()> {
        match self.never {}
    }

    /// `out = a * b`.
    ///
    /// # Errors
    /// Unreachable.
    pub fn mul(&self, _a: &DeviceTensor, _b: &DeviceTensor, _out: &mut DeviceTensor) -> Result<()> {
        match self.never {}
    }

    /// `x *= s`.
    ///
    /// # Errors
    /// Unreachable.
    pub fn scale(&self, _x: &mut DeviceTensor, _s: f32) -> Result<()> {
        match self.never {}
    }

    /// SiLU in place.
    ///
    /// # Errors
    /// Unreachable.
    pub fn silu(&self, _x: &mut DeviceTensor) -> Result<()> {
        match self.never {}
    }

    /// GELU in place.
    ///
    /// # Errors
    /// Unreachable.
    pub fn gelu(&self, _x: &mut DeviceTensor) -> Result<()> {
        match self.never {}
    }

    /// SwiGLU.
    ///
    /// # Errors
    /// Unreachable.
    pub fn swiglu(
        &self,
        _g: &DeviceTensor,
        _u: &DeviceTensor,
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// GeGLU.
    ///
    /// # Errors
    /// Unreachable.
    pub fn geglu(
        &self,
        _g: &DeviceTensor,
        _u: &DeviceTensor,
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// Per-row argmax.
    ///
    /// # Errors
    /// Unreachable.
    pub fn argmax(&self, _x: &DeviceTensor, _out: &mut [u32]) -> Result<()> {
        match self.never {}
    }

    /// Per-row argmax into a device buffer and its host copy.
    ///
    /// # Errors
    /// Unreachable.
    pub fn argmax_ids(&self, _x: &DeviceTensor, _out: &mut DeviceIds) -> Result<()> {
        match self.never {}
    }

    /// A zeroed tensor of any dtype.
    ///
    /// # Errors
    /// Unreachable.
    pub fn zeros(&self, _dtype: DType, _shape: Shape) -> Result<DeviceTensor> {
        match self.never {}
    }

    /// A timing event.
    ///
    /// # Errors
    /// Unreachable.
    pub fn new_event(&self) -> Result<DeviceEvent> {
        match self.never {}
    }

    /// Records an event.
    ///
    /// # Errors
    /// Unreachable.
    pub fn record(&self, _event: &DeviceEvent) -> Result<()> {
        match self.never {}
    }

    /// A device id buffer.
    ///
    /// # Errors
    /// Unreachable.
    pub fn new_ids(&self, _capacity: usize) -> Result<DeviceIds> {
        match self.never {}
    }

    /// Writes ids.
    ///
    /// # Errors
    /// Unreachable.
    pub fn set_ids(&self, _ids: &mut DeviceIds, _values: &[i32]) -> Result<()> {
        match self.never {}
    }

    /// The scratch epoch.
    pub fn epoch(&self) -> u64 {
        match self.never {}
    }

    /// Starts a capture.
    ///
    /// # Errors
    /// Unreachable.
    pub fn begin_capture(&self) -> Result<()> {
        match self.never {}
    }

    /// Ends a capture.
    ///
    /// # Errors
    /// Unreachable.
    pub fn end_capture(&self) -> Result<Option<DeviceGraph>> {
        match self.never {}
    }

    /// RoPE from `src` into `out` with device positions.
    ///
    /// # Errors
    /// Unreachable.
    #[allow(clippy::too_many_arguments)]
    pub fn rope_ids_from(
        &self,
        _src: &DeviceTensor,
        _out: &mut DeviceTensor,
        _positions: &DeviceIds,
        _n_head: usize,
        _head_dim: usize,
        _p: &RopeParams,
        _freq_factors: Option<&DeviceTensor>,
    ) -> Result<()> {
        match self.never {}
    }

    /// Keys and values appended in one launch.
    ///
    /// # Errors
    /// Unreachable.
    pub fn kv_append2_ids(
        &self,
        _src: (&DeviceTensor, &DeviceTensor),
        _positions: &DeviceIds,
        _cache: (&mut DeviceTensor, &mut DeviceTensor),
    ) -> Result<()> {
        match self.never {}
    }

    /// Attention with device positions.
    ///
    /// # Errors
    /// Unreachable.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_ids(
        &self,
        _q: &DeviceTensor,
        _positions: &DeviceIds,
        _k: &DeviceTensor,
        _v: &DeviceTensor,
        _kv_len: usize,
        _p: &AttentionParams,
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// Attention with sinks and device positions.
    ///
    /// # Errors
    /// Unreachable.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_ids_sinks(
        &self,
        _q: &DeviceTensor,
        _positions: &DeviceIds,
        _kv: (&DeviceTensor, &DeviceTensor),
        _kv_len: usize,
        _p: &AttentionParams,
        _sinks: Option<&DeviceTensor>,
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// Attention that also leaves its output as Q8_1 for the next matvec when asked.
    ///
    /// # Errors
    /// Unreachable.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_ids_q8(
        &self,
        _q: &DeviceTensor,
        _positions: &DeviceIds,
        _kv: (&DeviceTensor, &DeviceTensor),
        _kv_len: usize,
        _p: &AttentionParams,
        _sinks: Option<&DeviceTensor>,
        _out: &mut DeviceTensor,
        _quantize: bool,
    ) -> Result<Option<Q8Ticket>> {
        match self.never {}
    }

    /// Embedding lookup with device ids.
    ///
    /// # Errors
    /// Unreachable.
    pub fn get_rows_ids(
        &self,
        _table: &DeviceTensor,
        _ids: &DeviceIds,
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// RoPE in place.
    ///
    /// # Errors
    /// Unreachable.
    pub fn rope(
        &self,
        _x: &mut DeviceTensor,
        _positions: &[i32],
        _n_head: usize,
        _head_dim: usize,
        _p: &RopeParams,
        _freq_factors: Option<&DeviceTensor>,
    ) -> Result<()> {
        match self.never {}
    }

    /// KV-cache append.
    ///
    /// # Errors
    /// Unreachable.
    pub fn kv_append(
        &self,
        _src: &DeviceTensor,
        _positions: &[i32],
        _cache: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// Attention over the cache.
    ///
    /// # Errors
    /// Unreachable.
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
        _q: &DeviceTensor,
        _positions: &[i32],
        _k: &DeviceTensor,
        _v: &DeviceTensor,
        _kv_len: usize,
        _p: &AttentionParams,
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// Soft cap in place.
    ///
    /// # Errors
    /// Unreachable.
    pub fn softcap(&self, _x: &mut DeviceTensor, _cap: f32) -> Result<()> {
        match self.never {}
    }

    /// Exact GELU in place.
    ///
    /// # Errors
    /// Unreachable.
    pub fn gelu_erf(&self, _x: &mut DeviceTensor) -> Result<()> {
        match self.never {}
    }

    /// Copies rows between tensors.
    ///
    /// # Errors
    /// Unreachable.
    pub fn copy_rows(
        &self,
        _src: &DeviceTensor,
        _src_row: usize,
        _rows: usize,
        _dst: &mut DeviceTensor,
        _dst_row: usize,
    ) -> Result<()> {
        match self.never {}
    }
}
