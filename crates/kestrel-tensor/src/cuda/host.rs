//! [`HostBuffer`]: where a plan copies a step's output rows (the logits) back to the host.
//! Page-locked memory when it is small enough: a copy from the device into pageable memory is
//! staged through the driver's own page-locked buffers, so it runs at a fraction of the link's
//! speed, and a decode step copies a whole vocabulary of logits (Gemma 3: 1 MiB a token). Large
//! buffers (all-positions plans: a row per token of a 512-token window) stay pageable, as
//! page-locked memory is a scarce system resource. Not write-combined: the host reads it.

use cudarc::driver::PinnedHostSlice;

use super::engine::{driver, f32_only};
use super::{CudaDevice, DeviceTensor};
use crate::error::{Result, TensorError};

/// Most bytes a [`HostBuffer`] takes page-locked (beyond: pageable).
pub const MAX_PINNED_BYTES: usize = 64 << 20;

enum Storage {
    Pinned(PinnedHostSlice<u8>),
    Pageable(Vec<f32>),
}

/// `len` f32 values on the host that device results are copied into
/// ([`CudaDevice::download_into_host`]).
pub struct HostBuffer {
    storage: Storage,
    len: usize,
    /// Values the last copy wrote.
    filled: usize,
}

impl std::fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBuffer")
            .field("len", &self.len)
            .field("pinned", &self.is_pinned())
            .finish()
    }
}

impl HostBuffer {
    /// Whether the buffer is page-locked.
    pub fn is_pinned(&self) -> bool {
        matches!(self.storage, Storage::Pinned(_))
    }

    /// Values it holds at most.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a buffer of no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The values the last copy wrote (waiting for it to finish).
    ///
    /// # Errors
    /// A driver error from the copy.
    pub fn values(&self) -> Result<&[f32]> {
        match &self.storage {
            Storage::Pageable(v) => Ok(&v[..self.filled]),
            Storage::Pinned(p) => {
                let bytes = p.as_slice().map_err(driver("cuEventSynchronize"))?;
                // SAFETY: every byte pattern is a valid f32; `align_to` splits off any
                // misaligned head (none: page-locked memory is page-aligned).
                let (head, floats, _) = unsafe { bytes.align_to::<f32>() };
                if !head.is_empty() || floats.len() < self.filled {
                    return Err(TensorError::InvalidParam {
                        op: "cuda host buffer",
                        why: "page-locked buffer not aligned for f32",
                    });
                }
                Ok(&floats[..self.filled])
            }
        }
    }
}

impl CudaDevice {
    /// A host buffer of `len` f32 values, page-locked when at most [`MAX_PINNED_BYTES`] (and
    /// the driver grants it), else pageable.
    ///
    /// # Errors
    /// None today (a refused page-locked allocation falls back to pageable memory); kept for
    /// callers that size buffers from user input.
    pub fn new_host_buffer(&self, len: usize) -> Result<HostBuffer> {
        let bytes = len.saturating_mul(4);
        let pinned = if bytes > 0 && bytes <= MAX_PINNED_BYTES {
            // SAFETY: the memory starts uninitialised; it is zeroed below before anything
            // reads it.
            unsafe { self.ctx.alloc_pinned_with_flags::<u8>(bytes, 0) }
                .ok()
                .and_then(|mut p| {
                    // Zeroed before anything reads it.
                    p.as_mut_slice().ok()?.fill(0);
                    Some(p)
                })
        } else {
            None
        };
        let storage = match pinned {
            Some(p) => Storage::Pinned(p),
            None => Storage::Pageable(vec![0.0; len]),
        };
        Ok(HostBuffer {
            storage,
            len,
            filled: 0,
        })
    }

    /// Copies the F32 tensor `t` into the front of `dst` and waits for the copy.
    ///
    /// # Errors
    /// A tensor larger than the buffer or not F32, a driver error.
    pub fn download_into_host(&self, t: &DeviceTensor, dst: &mut HostBuffer) -> Result<()> {
        f32_only("download_into_host", t)?;
        let n = t.shape.elem_count();
        if n > dst.len {
            return Err(TensorError::LengthMismatch {
                op: "download_into_host",
                what: "destination",
                actual: dst.len,
                expected: n,
            });
        }
        dst.filled = 0;
        match &mut dst.storage {
            Storage::Pageable(v) => self.download_f32_into(t, &mut v[..n])?,
            Storage::Pinned(p) => {
                self.stream
                    .memcpy_dtoh(&t.buf.slice(0..n * 4), p)
                    .map_err(driver("cuMemcpyDtoH"))?;
                self.stream
                    .synchronize()
                    .map_err(driver("cuStreamSynchronize"))?;
            }
        }
        dst.filled = n;
        Ok(())
    }
}
