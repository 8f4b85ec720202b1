//! The CUDA engine proper (feature `cuda`): a [`CudaDevice`] owns one context and stream, the
//! embedded PTX modules loaded once (every `.entry` of each found by name), and the scratch
//! buffer the matvec quantizes activations into. Ops check shapes on the host with the same
//! errors as the CPU engine and enqueue kernels on the stream; downloads synchronize.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::sys::CUresult;
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DriverError, LaunchConfig};
use cudarc::nvrtc::Ptx;

use super::AttentionKernel;

use super::blas::Blas;
use super::{CudaError, MAX_ATTENTION_SPLITS, MODULES};
use crate::error::{Result, TensorError};
use crate::{DType, Shape, Tensor};

pub(super) fn driver(op: &'static str) -> impl Fn(DriverError) -> TensorError {
    move |e| {
        TensorError::Cuda(CudaError::Driver {
            op,
            message: e.to_string(),
        })
    }
}

/// Whether the driver library can be loaded (cudarc would panic on first use otherwise).
fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda under its usual names.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// GPUs the driver reports.
///
/// # Errors
/// [`CudaError::NoDriver`] without a driver; [`CudaError::Driver`] if it fails to start.
pub fn device_count() -> Result<usize, CudaError> {
    if !driver_present() {
        return Err(CudaError::NoDriver);
    }
    let n = CudaContext::device_count().map_err(|e| CudaError::Driver {
        op: "cuInit/cuDeviceGetCount",
        message: e.to_string(),
    })?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// One line about GPU 0 (`NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB`), or why there is none.
///
/// # Errors
/// As [`CudaDevice::open`].
pub fn probe() -> Result<String, CudaError> {
    let found = device_count()?;
    if found == 0 {
        return Err(CudaError::NoDevice {
            requested: 0,
            found,
        });
    }
    let ctx = CudaContext::new(0).map_err(|e| CudaError::Driver {
        op: "cuCtxCreate",
        message: e.to_string(),
    })?;
    let name = ctx.name().unwrap_or_else(|_| "CUDA device".into());
    let (major, minor) = ctx.compute_capability().unwrap_or((0, 0));
    let total = ctx.total_mem().unwrap_or(0);
    Ok(format!(
        "{name}, sm_{major}{minor}, {:.1} GiB",
        total as f64 / (1u64 << 30) as f64
    ))
}

/// A tensor in device memory: dtype, shape and its bytes (weights as stored in the file).
pub struct DeviceTensor {
    pub(super) dtype: DType,
    pub(super) shape: Shape,
    pub(super) buf: CudaSlice<u8>,
}

impl DeviceTensor {
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape (ggml order).
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.dtype.row_bytes(self.shape.row_len()).unwrap_or(0)
    }

    /// Gives the tensor another shape over the same buffer: a step's rows of a buffer sized for
    /// the longest step, or a row seen as heads.
    ///
    /// # Errors
    /// A shape whose bytes exceed the buffer, or a partial block.
    pub fn set_shape(&mut self, shape: Shape) -> Result<()> {
        let bytes = self
            .dtype
            .row_bytes(shape.row_len())
            .and_then(|r| r.checked_mul(shape.n_rows()));
        match bytes {
            Some(b) if b <= self.buf.len() => {
                self.shape = shape;
                Ok(())
            }
            _ => Err(TensorError::ShapeMismatch {
                op: "set_shape",
                what: "the device buffer",
                expected: self.shape,
                actual: shape,
            }),
        }
    }
}

impl std::fmt::Debug for DeviceTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceTensor({}, {:?})", self.dtype, self.shape.dims())
    }
}

/// The locked Q8_1 scratch of the matvecs.
pub(super) type ScratchGuard<'a> = MutexGuard<'a, Option<CudaSlice<u8>>>;

/// Names the activations one [`CudaDevice::matmul_reusing`] call left prepared on the device:
/// quantized to Q8_1 in the matvecs' scratch, or converted to the prefill GEMM's f16 operands;
/// handed back, it lets the next call with the same input skip preparing it again. Tickets of
/// both kinds come from one counter, so a ticket never names the other kind's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Q8Ticket(pub(super) u64);

/// One GPU with kestrel's kernels loaded.
pub struct CudaDevice {
    ordinal: usize,
    name: String,
    capability: (i32, i32),
    /// Streaming multiprocessors (how many CTAs fill the device: kernel choices).
    pub(super) sm_count: usize,
    /// Which attention kernel prefill takes ([`crate::cuda::AttentionKernel`] as its index).
    pub(super) attention_kernel: std::sync::atomic::AtomicU8,
    /// Key ranges of split decode attention: 0 off, `u32::MAX` chosen per model, else that
    /// many (`attention.rs`).
    pub(super) attention_splits: std::sync::atomic::AtomicU32,
    /// Whether one-row matvecs take the prefetching kernels (`matvec.rs`).
    pub(super) mmvq_prefetch: std::sync::atomic::AtomicBool,
    /// Most CTAs an SM the prefetching matvecs launch (0: one a row group, `matvec.rs`).
    pub(super) mmvq_ctas: std::sync::atomic::AtomicU32,
    /// Whether kernels are launched for programmatic dependent launch (`launch.rs`).
    pub(super) programmatic: std::sync::atomic::AtomicBool,
    /// Split decode attention's partial results and per-(token, head) counters (grown, never
    /// shrunk; the counters are zero between launches).
    pub(super) split_scratch: Mutex<Option<(CudaSlice<f32>, CudaSlice<u32>)>>,
    /// The counter by which a fused matvec + norm finds its last CTA (`matvec_tail.rs`; zero
    /// between launches).
    pub(super) tail_counter: Mutex<Option<CudaSlice<u32>>>,
    pub(super) ctx: Arc<CudaContext>,
    pub(super) stream: Arc<CudaStream>,
    functions: HashMap<&'static str, CudaFunction>,
    /// Q8_1 activations of the last matvec (grown, never shrunk).
    pub(super) scratch: Mutex<Option<CudaSlice<u8>>>,
    /// Serial number of the last quantization into `scratch` (changed under its lock), and
    /// the (rows, row length) it quantized: what a [`Q8Ticket`] is checked against.
    pub(super) q8_last: Mutex<(u64, usize, usize)>,
    /// The last ticket serial handed out (the matvecs' Q8_1 scratch and the GEMM's f16
    /// activations draw from it).
    tickets: AtomicU64,
    /// cuBLAS and the dequantized-weight band of the prefill GEMM (`gemm.rs`).
    pub(super) blas: Blas,
    /// The last id arrays the kernels read (positions, token ids), kept on the device.
    ids: Mutex<IdSlots>,
    /// Bumped whenever a scratch buffer is reallocated (`graph.rs`).
    pub(super) epoch: AtomicU64,
}

/// A few small i32 arrays kept on the device with their host copies: every layer of a step
/// asks for the same positions, so they are copied once per step, into a buffer that is reused
/// (no allocation per op or per step once grown).
#[derive(Default)]
struct IdSlots {
    slots: [(Vec<i32>, Option<CudaSlice<i32>>, u64); 2],
    tick: u64,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaDevice({}: {}, sm_{}{})",
            self.ordinal, self.name, self.capability.0, self.capability.1
        )
    }
}

/// Kernel names in a module's PTX (`.visible .entry NAME(`).
pub(super) fn entries(ptx: &'static str) -> impl Iterator<Item = &'static str> {
    ptx.lines().filter_map(|l| {
        let rest = l.trim_start().strip_prefix(".visible .entry ")?;
        rest.split('(').next().map(str::trim)
    })
}

impl CudaDevice {
    /// A ticket serial no earlier one has (the matvecs' Q8_1 scratch and the GEMM's f16
    /// activations draw from this one counter).
    pub(super) fn new_ticket(&self) -> u64 {
        self.tickets
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .wrapping_add(1)
    }
}

/// The error for a matvec scratch that is not there (it always is once a matvec ran).
pub(super) fn no_scratch_err() -> TensorError {
    TensorError::InvalidParam {
        op: "cuda matmul",
        why: "no Q8_1 scratch",
    }
}

pub(super) fn grid_for(n: usize, per_cta: usize) -> Result<u32> {
    u32::try_from(n.div_ceil(per_cta).max(1)).map_err(|_| TensorError::InvalidParam {
        op: "cuda",
        why: "more than 2^32 thread blocks",
    })
}

pub(super) fn i32_of(op: &'static str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| TensorError::InvalidParam {
        op,
        why: "a size exceeds i32",
    })
}

pub(super) fn cfg(grid: u32, block: (u32, u32)) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (grid, 1, 1),
        block_dim: (block.0, block.1, 1),
        shared_mem_bytes: 0,
    }
}

impl CudaDevice {
    /// Opens GPU `ordinal`, loads every kernel module (compute_90 PTX on Hopper and newer,
    /// compute_80 elsewhere).
    ///
    /// # Errors
    /// [`CudaError::NoDriver`], [`CudaError::NoDevice`], [`CudaError::Unsupported`] (older than
    /// sm_80), or a driver error while loading the modules.
    pub fn open(ordinal: usize) -> Result<CudaDevice, CudaError> {
        let found = device_count()?;
        if ordinal >= found {
            return Err(CudaError::NoDevice {
                requested: ordinal,
                found,
            });
        }
        let err = |op: &'static str| {
            move |e: DriverError| CudaError::Driver {
                op,
                message: e.to_string(),
            }
        };
        let ctx = CudaContext::new(ordinal).map_err(err("cuCtxCreate"))?;
        // One stream per device: cudarc's per-buffer events (for ordering across streams) would
        // only add an event record per kernel argument (and forbid nothing a graph captures).
        // SAFETY: every buffer of this context is allocated and used on `stream` alone.
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = ctx
            .compute_capability()
            .map_err(err("cuDeviceGetAttribute"))?;
        if major < 8 {
            return Err(CudaError::Unsupported {
                ordinal,
                major,
                minor,
            });
        }
        let name = ctx.name().map_err(err("cuDeviceGetName"))?;
        let sm_count = ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
            .map_err(err("cuDeviceGetAttribute"))?;
        let stream = ctx.new_stream().map_err(err("cuStreamCreate"))?;
        let mut functions = HashMap::new();
        for m in MODULES {
            let ptx = if major >= 9 { m.sm90 } else { m.sm80 };
            let module = ctx
                .load_module(Ptx::from_src(ptx))
                .map_err(|e| CudaError::Kernel {
                    kernel: m.name.to_string(),
                    message: format!("loading its PTX: {e}"),
                })?;
            for name in entries(ptx) {
                let f = module.load_function(name).map_err(|e| CudaError::Kernel {
                    kernel: name.to_string(),
                    message: e.to_string(),
                })?;
                functions.insert(name, f);
            }
        }
        let blas = Blas::open(&stream);
        Ok(CudaDevice {
            ordinal,
            name,
            capability: (major, minor),
            sm_count: usize::try_from(sm_count).unwrap_or(1).max(1),
            attention_kernel: std::sync::atomic::AtomicU8::new(AttentionKernel::from_env() as u8),
            attention_splits: std::sync::atomic::AtomicU32::new(splits_from_env()),
            mmvq_prefetch: std::sync::atomic::AtomicBool::new(mmvq_prefetch_from_env()),
            mmvq_ctas: std::sync::atomic::AtomicU32::new(mmvq_ctas_from_env()),
            programmatic: std::sync::atomic::AtomicBool::new(
                major >= 9 && super::launch::programmatic_from_env(),
            ),
            split_scratch: Mutex::new(None),
            tail_counter: Mutex::new(None),
            ctx,
            stream,
            blas,
            functions,
            scratch: Mutex::new(None),
            q8_last: Mutex::new((0, 0, 0)),
            tickets: AtomicU64::new(0),
            ids: Mutex::new(IdSlots::default()),
            epoch: AtomicU64::new(0),
        })
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The device's name, as the driver gives it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Compute capability (major, minor).
    pub fn compute_capability(&self) -> (i32, i32) {
        self.capability
    }

    /// Device memory (free, total) in bytes, as the driver counts it now.
    ///
    /// # Errors
    /// A driver error.
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        self.ctx.mem_get_info().map_err(driver("cuMemGetInfo"))
    }

    pub(super) fn func(&self, name: &str) -> Result<&CudaFunction> {
        self.functions.get(name).ok_or_else(|| {
            TensorError::Cuda(CudaError::Kernel {
                kernel: name.to_string(),
                message: "not in the embedded PTX".into(),
            })
        })
    }

    /// `bytes` of device memory, with out-of-memory reported with the sizes.
    pub(super) fn alloc(&self, bytes: usize) -> Result<CudaSlice<u8>> {
        self.stream
            .alloc_zeros::<u8>(bytes.max(1))
            .map_err(|e| self.alloc_error(bytes, e))
    }

    pub(super) fn alloc_error(&self, asked: usize, e: DriverError) -> TensorError {
        if e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            let (free, total) = self.ctx.mem_get_info().unwrap_or((0, 0));
            TensorError::Cuda(CudaError::OutOfMemory { asked, free, total })
        } else {
            driver("cuMemAlloc")(e)
        }
    }

    /// Runs `f` with `ids` on the device. An array equal to one of the last two asked for is
    /// not copied again (a step's positions serve every layer); otherwise the older slot is
    /// overwritten in stream order, after the kernels already enqueued have read it.
    pub(super) fn with_ids<R>(
        &self,
        ids: impl ExactSizeIterator<Item = i32> + Clone,
        f: impl FnOnce(&CudaSlice<i32>) -> Result<R>,
    ) -> Result<R> {
        let mut guard = self.ids.lock().map_err(|_| TensorError::InvalidParam {
            op: "cuda ids",
            why: "lock poisoned",
        })?;
        let cache = &mut *guard;
        cache.tick += 1;
        let tick = cache.tick;
        let hit = cache
            .slots
            .iter()
            .position(|(host, dev, _)| dev.is_some() && host.iter().copied().eq(ids.clone()));
        let slot = match hit {
            Some(i) => i,
            None => {
                let i = usize::from(cache.slots[1].2 < cache.slots[0].2);
                let (host, dev, _) = &mut cache.slots[i];
                host.clear();
                host.extend(ids);
                if host.is_empty() {
                    host.push(0);
                }
                if dev.as_ref().is_none_or(|d| d.len() < host.len()) {
                    self.bump_epoch();
                    *dev = Some(
                        self.stream
                            .alloc_zeros::<i32>(host.len().next_power_of_two())
                            .map_err(|e| self.alloc_error(host.len() * 4, e))?,
                    );
                }
                if let Some(d) = dev.as_mut() {
                    self.stream
                        .memcpy_htod(host.as_slice(), &mut d.slice_mut(0..host.len()))
                        .map_err(driver("cuMemcpyHtoD"))?;
                }
                i
            }
        };
        cache.slots[slot].2 = tick;
        match cache.slots[slot].1.as_ref() {
            Some(d) => f(d),
            None => Err(TensorError::InvalidParam {
                op: "cuda ids",
                why: "id buffer missing",
            }),
        }
    }

    /// Copies a host tensor (any dtype, quantized weights as they are) to the device.
    ///
    /// # Errors
    /// Out of memory or a driver error.
    pub fn upload(&self, t: &Tensor) -> Result<DeviceTensor> {
        // The driver refuses an allocation of 0 bytes (cuMemAlloc's CUDA_ERROR_INVALID_VALUE):
        // an empty tensor (a state of no history, say) gets one byte, never read.
        let buf = if t.nbytes() == 0 {
            self.alloc(0)?
        } else {
            self.stream
                .clone_htod(t.as_bytes())
                .map_err(|e| self.alloc_error(t.nbytes(), e))?
        };
        Ok(DeviceTensor {
            dtype: t.dtype(),
            shape: t.shape(),
            buf,
        })
    }

    /// A zeroed f32 tensor on the device.
    ///
    /// # Errors
    /// Out of memory or a driver error.
    pub fn zeros_f32(&self, shape: Shape) -> Result<DeviceTensor> {
        Ok(DeviceTensor {
            dtype: DType::F32,
            shape,
            buf: self.alloc(shape.elem_count() * 4)?,
        })
    }

    /// An f32 tensor's values, copied back (waits for the stream).
    ///
    /// # Errors
    /// [`TensorError::UnsupportedDType`] for other dtypes; a driver error.
    pub fn download_f32(&self, t: &DeviceTensor) -> Result<Vec<f32>> {
        f32_only("download_f32", t)?;
        let bytes = self
            .stream
            .clone_dtoh(&t.buf)
            .map_err(driver("cuMemcpyDtoH"))?;
        self.stream
            .synchronize()
            .map_err(driver("cuStreamSynchronize"))?;
        Ok(bytes
            .chunks_exact(4)
            .take(t.shape.elem_count())
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// An f32 tensor's values copied into `dst`, which must hold exactly its elements; waits
    /// for the stream. Allocates nothing (the per-step logits copy of a plan).
    ///
    /// # Errors
    /// [`TensorError::UnsupportedDType`] for other dtypes, [`TensorError::LengthMismatch`] for
    /// a `dst` of another length; a driver error.
    pub fn download_f32_into(&self, t: &DeviceTensor, dst: &mut [f32]) -> Result<()> {
        f32_only("download_f32_into", t)?;
        let n = t.shape.elem_count();
        if dst.len() != n {
            return Err(TensorError::LengthMismatch {
                op: "download_f32_into",
                what: "destination",
                actual: dst.len(),
                expected: n,
            });
        }
        // SAFETY: every byte pattern is a valid f32 and u8 has alignment 1, so the f32 slice
        // may be written through a byte view of the same memory; the GPU hosts CUDA runs on
        // are little-endian, as the device's f32 layout is.
        let bytes = unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<u8>(), n * 4) };
        self.stream
            .memcpy_dtoh(&t.buf.slice(0..n * 4), bytes)
            .map_err(driver("cuMemcpyDtoH"))?;
        self.stream
            .synchronize()
            .map_err(driver("cuStreamSynchronize"))
    }

    /// Waits for every op enqueued so far.
    ///
    /// # Errors
    /// A kernel's asynchronous failure surfaces here.
    pub fn synchronize(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(driver("cuStreamSynchronize"))
    }

    /// Copies `rows` rows of `src` from row `src_row` into `dst` from row `dst_row` (same
    /// dtype and row length), on the stream.
    ///
    /// # Errors
    /// Rows outside either tensor, a dtype or row-length mismatch, a driver error.
    pub fn copy_rows(
        &self,
        src: &DeviceTensor,
        src_row: usize,
        rows: usize,
        dst: &mut DeviceTensor,
        dst_row: usize,
    ) -> Result<()> {
        const OP: &str = "cuda copy_rows";
        if src.dtype != dst.dtype || src.shape.row_len() != dst.shape.row_len() {
            return Err(TensorError::ShapeMismatch {
                op: OP,
                what: "dst",
                expected: src.shape,
                actual: dst.shape,
            });
        }
        let inside =
            |t: &DeviceTensor, r: usize| r.checked_add(rows).is_some_and(|e| e <= t.shape.n_rows());
        if !inside(src, src_row) || !inside(dst, dst_row) {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "rows outside the tensor",
            });
        }
        if rows == 0 {
            return Ok(());
        }
        let rb = src.row_bytes();
        let from = src.buf.slice(src_row * rb..(src_row + rows) * rb);
        let mut to = dst.buf.slice_mut(dst_row * rb..(dst_row + rows) * rb);
        self.stream
            .memcpy_dtod(&from, &mut to)
            .map_err(driver("cuMemcpyDtoD"))
    }
}

pub(super) fn elementwise_cfg(n: usize) -> LaunchConfig {
    // Grid-stride kernels: enough CTAs to fill a large GPU, never more than needed.
    let grid = n.div_ceil(256).clamp(1, 65_535) as u32;
    cfg(grid, (256, 1))
}

pub(super) fn f32_only(op: &'static str, t: &DeviceTensor) -> Result<()> {
    if t.dtype != DType::F32 {
        return Err(TensorError::UnsupportedDType { op, dtype: t.dtype });
    }
    Ok(())
}

/// A norm weight (or any f32 vector) of exactly `len` values.
pub(super) fn f32_vector(
    op: &'static str,
    what: &'static str,
    t: &DeviceTensor,
    len: usize,
) -> Result<()> {
    f32_only(op, t)?;
    if t.shape.elem_count() != len {
        return Err(TensorError::LengthMismatch {
            op,
            what,
            expected: len,
            actual: t.shape.elem_count(),
        });
    }
    Ok(())
}

pub(super) fn same_shape(
    op: &'static str,
    what: &'static str,
    a: &DeviceTensor,
    b: &DeviceTensor,
) -> Result<()> {
    if a.shape.elem_count() != b.shape.elem_count() || a.shape.row_len() != b.shape.row_len() {
        return Err(TensorError::ShapeMismatch {
            op,
            what,
            expected: a.shape,
            actual: b.shape,
        });
    }
    Ok(())
}

/// [`CudaDevice::attention_splits`] when the device picks per model.
pub(super) const SPLITS_AUTO: u32 = u32::MAX;

/// The split setting `KESTREL_CUDA_ATTN_SPLIT` names: `0` or `off` (a CTA per (token, head)),
/// a count of key ranges (at most [`MAX_ATTENTION_SPLITS`]), else chosen per model.
fn splits_from_env() -> u32 {
    match std::env::var("KESTREL_CUDA_ATTN_SPLIT").as_deref() {
        Ok("off") => 0,
        Ok(v) => v
            .parse::<usize>()
            .map_or(SPLITS_AUTO, |n| n.min(MAX_ATTENTION_SPLITS) as u32),
        Err(_) => SPLITS_AUTO,
    }
}

/// The default of [`CudaDevice::set_mmvq_prefetch`]: `KESTREL_CUDA_MMVQ_PREFETCH=1` turns the
/// prefetching matvecs on.
fn mmvq_prefetch_from_env() -> bool {
    std::env::var("KESTREL_CUDA_MMVQ_PREFETCH").is_ok_and(|v| v == "1")
}

/// The default of [`CudaDevice::set_mmvq_ctas_per_sm`]: `KESTREL_CUDA_MMVQ_CTAS=N` (1 to
/// [`MAX_MMVQ_CTAS`]; anything else: one CTA a row group).
fn mmvq_ctas_from_env() -> u32 {
    std::env::var("KESTREL_CUDA_MMVQ_CTAS")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|n| (1..=MAX_MMVQ_CTAS).contains(n))
        .unwrap_or(0)
}

/// Most CTAs an SM [`CudaDevice::set_mmvq_ctas_per_sm`] takes (an SM holds at most 32).
pub(super) const MAX_MMVQ_CTAS: u32 = 32;
