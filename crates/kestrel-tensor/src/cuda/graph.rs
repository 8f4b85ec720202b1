//! What CUDA graphs need from the engine: [`DeviceIds`] (positions and token ids in a device
//! buffer the caller owns and rewrites before each step, so a captured kernel reads this
//! step's values through the same pointer), stream capture into a [`DeviceGraph`] and its
//! replay, and [`CudaDevice::epoch`], which changes whenever the engine reallocates a scratch
//! buffer a captured graph may point into (a graph from an older epoch must be captured again).
//! Also [`DeviceEvent`]s, to time work on the stream (a plan's per-op profile).

use std::sync::atomic::Ordering;

use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaEvent, CudaGraph, CudaSlice};

use super::engine::driver;
use super::CudaDevice;
use crate::error::{Result, TensorError};

/// Up to `capacity` i32 values (positions or token ids) on the device, with a host copy the
/// ops check ranges against.
pub struct DeviceIds {
    pub(super) buf: CudaSlice<i32>,
    pub(super) host: Vec<i32>,
}

impl DeviceIds {
    /// The values last written.
    pub fn as_slice(&self) -> &[i32] {
        &self.host
    }

    /// How many values were last written.
    pub fn len(&self) -> usize {
        self.host.len()
    }

    /// True when none were written.
    pub fn is_empty(&self) -> bool {
        self.host.is_empty()
    }

    /// Most values it holds.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }
}

impl std::fmt::Debug for DeviceIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceIds({:?})", self.host)
    }
}

/// A captured sequence of kernels, replayed with one launch.
pub struct DeviceGraph {
    graph: CudaGraph,
}

// SAFETY: a graph is used through `&mut` or by one owner at a time (it is not `Sync`); the CUDA
// driver only forbids concurrent calls on the same graph, which `Send` alone cannot cause.
unsafe impl Send for DeviceGraph {}

impl std::fmt::Debug for DeviceGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeviceGraph")
    }
}

impl DeviceGraph {
    /// Replays the graph on its device's stream.
    ///
    /// # Errors
    /// A driver error.
    pub fn launch(&self) -> Result<()> {
        self.graph.launch().map_err(driver("cuGraphLaunch"))
    }
}

/// A point in the stream's work, for timing (`KESTREL_CUDA_PROFILE`).
#[derive(Debug)]
pub struct DeviceEvent {
    event: CudaEvent,
}

impl DeviceEvent {
    /// Milliseconds of stream work between `self` and the later `end` (waits for both).
    ///
    /// # Errors
    /// A driver error (an event never recorded, for one).
    pub fn elapsed_ms(&self, end: &DeviceEvent) -> Result<f32> {
        self.event
            .elapsed_ms(&end.event)
            .map_err(driver("cuEventElapsedTime"))
    }
}

impl CudaDevice {
    /// A timing event.
    ///
    /// # Errors
    /// A driver error.
    pub fn new_event(&self) -> Result<DeviceEvent> {
        let event = self
            .ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(driver("cuEventCreate"))?;
        Ok(DeviceEvent { event })
    }

    /// Records `event` at this point of the stream's work.
    ///
    /// # Errors
    /// A driver error.
    pub fn record(&self, event: &DeviceEvent) -> Result<()> {
        event
            .event
            .record(&self.stream)
            .map_err(driver("cuEventRecord"))
    }

    /// A device buffer for up to `capacity` ids, empty.
    ///
    /// # Errors
    /// Out of device memory.
    pub fn new_ids(&self, capacity: usize) -> Result<DeviceIds> {
        let buf = self
            .stream
            .alloc_zeros::<i32>(capacity.max(1))
            .map_err(|e| self.alloc_error(capacity * 4, e))?;
        Ok(DeviceIds {
            buf,
            host: Vec::with_capacity(capacity),
        })
    }

    /// Writes `values` into `ids` (in stream order: kernels enqueued before read the old ones).
    ///
    /// # Errors
    /// More values than the buffer holds; a driver error.
    pub fn set_ids(&self, ids: &mut DeviceIds, values: &[i32]) -> Result<()> {
        if values.len() > ids.buf.len() {
            return Err(TensorError::LengthMismatch {
                op: "cuda set_ids",
                what: "ids",
                expected: ids.buf.len(),
                actual: values.len(),
            });
        }
        ids.host.clear();
        ids.host.extend_from_slice(values);
        if !values.is_empty() {
            self.stream
                .memcpy_htod(values, &mut ids.buf.slice_mut(0..values.len()))
                .map_err(driver("cuMemcpyHtoD"))?;
        }
        Ok(())
    }

    /// Changes whenever the engine reallocates a scratch buffer (the matvec's quantized
    /// activations, the GEMM's band, the id slots): a graph captured in another epoch may
    /// point at freed memory and must not be replayed.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Relaxed)
    }

    pub(super) fn bump_epoch(&self) {
        self.epoch.fetch_add(1, Ordering::Relaxed);
    }

    /// Starts capturing this thread's work on the device's stream: kernels are recorded, not
    /// run, until [`Self::end_capture`].
    ///
    /// # Errors
    /// A driver error (already capturing, for one).
    pub fn begin_capture(&self) -> Result<()> {
        self.stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(driver("cuStreamBeginCapture"))
    }

    /// Ends the capture and instantiates what was recorded (`None` when nothing was).
    ///
    /// # Errors
    /// An op that cannot be captured invalidates the capture; a driver error.
    pub fn end_capture(&self) -> Result<Option<DeviceGraph>> {
        let graph = self
            .stream
            .end_capture(CUgraphInstantiate_flags(0))
            .map_err(driver("cuStreamEndCapture"))?;
        Ok(graph.map(|graph| DeviceGraph { graph }))
    }
}
