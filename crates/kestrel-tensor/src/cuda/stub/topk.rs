//! Device top-k without the `cuda` feature (see the real `cuda/topk.rs`): every entry point is
//! unreachable, as no device can exist.

use std::convert::Infallible;

use super::{CudaDevice, DeviceTensor};
use crate::error::Result;

/// Most candidates [`CudaDevice::top_k`] keeps a row.
pub const MAX_TOP_K: usize = 256;

/// Top-k candidates on the device (none can exist in this build).
#[derive(Debug)]
pub struct DeviceTopK {
    never: Infallible,
}

impl DeviceTopK {
    /// Row `row`'s candidates: ids and logits, best first.
    pub fn row(&self, _row: usize) -> (&[u32], &[f32]) {
        match self.never {}
    }

    /// Rows the last top-k ran.
    pub fn rows(&self) -> usize {
        match self.never {}
    }

    /// Most rows it holds.
    pub fn capacity(&self) -> usize {
        match self.never {}
    }

    /// The `k` of the last top-k.
    pub fn k(&self) -> usize {
        match self.never {}
    }
}

impl CudaDevice {
    /// Room for the top candidates of up to `rows` rows.
    ///
    /// # Errors
    /// Unreachable.
    pub fn new_top_k(&self, _rows: usize) -> Result<DeviceTopK> {
        match self.never {}
    }

    /// The top candidates of each row of `x`.
    ///
    /// # Errors
    /// Unreachable.
    pub fn top_k(&self, _x: &DeviceTensor, _k: usize, _out: &mut DeviceTopK) -> Result<()> {
        match self.never {}
    }
}
