//! Mixture-of-experts routing on the device without the `cuda` feature (see the real
//! `cuda/experts.rs`): every entry point is unreachable, as no device can exist.

use std::convert::Infallible;

use super::{CudaDevice, DeviceTensor, Q8Ticket};
use crate::cuda::RouteSpec;
use crate::error::Result;
use crate::DType;

/// One projection's experts on the device (none can exist in this build).
#[derive(Debug)]
pub struct ExpertTable {
    never: Infallible,
}

impl ExpertTable {
    /// Expert `e`'s matrix.
    pub fn expert(&self, _e: usize) -> Option<&DeviceTensor> {
        match self.never {}
    }

    /// Experts.
    pub fn len(&self) -> usize {
        match self.never {}
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        match self.never {}
    }

    /// The experts' weight type.
    pub fn dtype(&self) -> DType {
        match self.never {}
    }
}

/// A step's routing on the device (none can exist in this build).
#[derive(Debug)]
pub struct DeviceRoutes {
    never: Infallible,
}

impl DeviceRoutes {
    /// Tokens the last routing routed.
    pub fn rows(&self) -> usize {
        match self.never {}
    }

    /// Experts each token chose.
    pub fn n_used(&self) -> usize {
        match self.never {}
    }

    /// Most (token, slot) pairs it holds.
    pub fn capacity(&self) -> usize {
        match self.never {}
    }

    /// Whether the last routing grouped its pairs by expert.
    pub fn grouped(&self) -> bool {
        match self.never {}
    }
}

impl CudaDevice {
    /// Whether a projection of `dtype` experts can run the indirect matvec (as the real build
    /// answers, so a plan decides alike).
    pub fn experts_supported(dtype: DType) -> bool {
        matches!(
            dtype,
            DType::Q4K
                | DType::Q5K
                | DType::Q6K
                | DType::Q4_0
                | DType::Q4_1
                | DType::Q5_0
                | DType::Q5_1
                | DType::Q8_0
                | DType::F32
                | DType::F16
                | DType::BF16
        )
    }

    /// Grows the Q8_1 activation scratch to `rows` rows of `k` values.
    ///
    /// # Errors
    /// Unreachable.
    pub fn reserve_q8(&self, _rows: usize, _k: usize) -> Result<()> {
        match self.never {}
    }

    /// The table of `experts`.
    ///
    /// # Errors
    /// Unreachable.
    pub fn expert_table(&self, _experts: Vec<DeviceTensor>) -> Result<ExpertTable> {
        match self.never {}
    }

    /// Room for the routing of up to `pairs` pairs.
    ///
    /// # Errors
    /// Unreachable.
    pub fn new_routes(&self, _pairs: usize) -> Result<DeviceRoutes> {
        match self.never {}
    }

    /// Routes each row of `logits` by `spec`.
    ///
    /// # Errors
    /// Unreachable.
    pub fn moe_route(
        &self,
        _logits: &DeviceTensor,
        _spec: &RouteSpec,
        _biases: (Option<&DeviceTensor>, Option<&DeviceTensor>),
        _routes: &mut DeviceRoutes,
    ) -> Result<()> {
        match self.never {}
    }

    /// The last routing, copied back.
    ///
    /// # Errors
    /// Unreachable.
    pub fn routes_to_host(&self, _routes: &DeviceRoutes) -> Result<(Vec<i32>, Vec<f32>)> {
        match self.never {}
    }

    /// Each routed pair's projection by its expert.
    ///
    /// # Errors
    /// Unreachable.
    pub fn matmul_experts(
        &self,
        _x: &DeviceTensor,
        _experts: (&ExpertTable, &DeviceRoutes),
        _per_token: bool,
        _out: &mut DeviceTensor,
        _ticket: Option<Q8Ticket>,
    ) -> Result<Option<Q8Ticket>> {
        match self.never {}
    }

    /// Each pair's expert scale and bias.
    ///
    /// # Errors
    /// Unreachable.
    pub fn moe_scale_bias(
        &self,
        _out: &mut DeviceTensor,
        _routes: &DeviceRoutes,
        _n_expert: usize,
        _factors: (Option<&DeviceTensor>, Option<&DeviceTensor>),
    ) -> Result<()> {
        match self.never {}
    }

    /// Each token's experts' outputs summed by their weights.
    ///
    /// # Errors
    /// Unreachable.
    pub fn moe_combine(
        &self,
        _down: &DeviceTensor,
        _routes: &DeviceRoutes,
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }
}
