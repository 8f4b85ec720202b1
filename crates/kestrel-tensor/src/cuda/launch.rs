//! Kernel launches: the argument builder every op uses (as cudarc's `LaunchArgs`, which keeps
//! its arguments private), so that a launch can carry programmatic dependent launch.
//!
//! With it on (`KESTREL_CUDA_PDL=1` on sm_90 and newer, [`CudaDevice::set_programmatic_launch`])
//! each kernel goes through `cuLaunchKernelEx` with the programmatic-serialization attribute:
//! the driver may launch it while the previous kernel in the stream still runs, and the kernel's
//! first statement (`pdl_enter` in `kernels/common.cuh`, a `griddepcontrol.wait`) holds it until
//! that kernel has finished and its writes are visible. What that saves is the gap between two
//! kernels (launch processing, the new grid's first CTAs reaching the SMs), which decode of a
//! small model pays ~10 times a layer. Off, a launch is `cuLaunchKernel` as before.
//!
//! Arguments live in fixed arrays on the builder: a launch allocates nothing.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::atomic::Ordering;

use cudarc::driver::sys::{
    self, CUlaunchAttribute, CUlaunchAttributeID, CUlaunchAttributeValue, CUlaunchConfig,
};
use cudarc::driver::{
    result, CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DriverError,
    LaunchConfig,
};

use super::CudaDevice;

/// The most arguments a kernel of `kernels/` takes, with room to spare (the attention kernels
/// take 20).
const MAX_ARGS: usize = 32;

/// One kernel parameter as the driver wants it: the address of its value. Scalars are passed
/// by the caller's address (borrowed for the builder's life), device buffers by their address
/// held here until the launch.
#[derive(Clone, Copy)]
pub(super) enum Param {
    /// The address of a host value of the kernel parameter's type.
    Host(*const c_void),
    /// A device address (a pointer parameter).
    Device(sys::CUdeviceptr),
}

/// Something that can be a kernel argument.
///
/// # Safety
/// [`KernelArg::param`] must describe a value whose layout is the kernel parameter's: a
/// `#[repr(C)]` or primitive value for [`Param::Host`], and a device allocation for
/// [`Param::Device`].
pub(super) unsafe trait KernelArg {
    /// The parameter for a launch on `stream`.
    fn param(&self, stream: &CudaStream) -> Param;
}

/// `KernelArg` for types passed by value: primitives, and `#[repr(C)]` structs laid out as the
/// kernel's (with a size check beside them).
macro_rules! by_value {
    ($($t:ty),*) => {$(
        // SAFETY: plain data of the kernel parameter's layout, passed by address as the driver
        // copies it.
        unsafe impl $crate::cuda::launch::KernelArg for $t {
            fn param(&self, _: &cudarc::driver::CudaStream) -> $crate::cuda::launch::Param {
                $crate::cuda::launch::Param::Host(self as *const $t as *const std::ffi::c_void)
            }
        }
    )*};
}
pub(super) use by_value;
by_value!(i32, u32, i64, u64, f32);

// SAFETY: device buffers are passed as their device address. Event tracking is off for every
// context (engine.rs), so the guard `device_ptr` returns records nothing.
unsafe impl<T> KernelArg for CudaSlice<T> {
    fn param(&self, stream: &CudaStream) -> Param {
        Param::Device(self.device_ptr(stream).0)
    }
}
// SAFETY: as for `CudaSlice`.
unsafe impl<T> KernelArg for CudaView<'_, T> {
    fn param(&self, stream: &CudaStream) -> Param {
        Param::Device(self.device_ptr(stream).0)
    }
}
// SAFETY: as for `CudaSlice`.
unsafe impl<T> KernelArg for CudaViewMut<'_, T> {
    fn param(&self, stream: &CudaStream) -> Param {
        Param::Device(self.device_ptr(stream).0)
    }
}

/// A borrowed kernel argument: `&A` or `&mut A`.
pub(super) trait ArgRef<'a> {
    /// The parameter for a launch on `stream`.
    fn param(self, stream: &CudaStream) -> Param;
}

impl<'a, A: KernelArg + ?Sized> ArgRef<'a> for &'a A {
    fn param(self, stream: &CudaStream) -> Param {
        KernelArg::param(self, stream)
    }
}

impl<'a, A: KernelArg + ?Sized> ArgRef<'a> for &'a mut A {
    fn param(self, stream: &CudaStream) -> Param {
        KernelArg::param(&*self, stream)
    }
}

/// A launch being built: the function, its stream, and its arguments in order.
pub(super) struct Launch<'a> {
    stream: &'a CudaStream,
    func: &'a CudaFunction,
    programmatic: bool,
    len: usize,
    overflow: bool,
    params: [Param; MAX_ARGS],
    _borrows: PhantomData<&'a ()>,
}

impl<'a> Launch<'a> {
    /// A launch of `func` on `stream`; `programmatic` asks for programmatic dependent launch
    /// (every kernel of `kernels/` starts with the wait that makes it safe).
    pub(super) fn new(stream: &'a CudaStream, func: &'a CudaFunction, programmatic: bool) -> Self {
        Launch {
            stream,
            func,
            programmatic,
            len: 0,
            overflow: false,
            params: [Param::Device(0); MAX_ARGS],
            _borrows: PhantomData,
        }
    }

    /// Appends an argument: `&x` for what the kernel reads, `&mut x` for a buffer it writes
    /// (the same parameter; the borrow says which). Borrowed until the launch.
    pub(super) fn arg<T: ArgRef<'a>>(&mut self, a: T) -> &mut Self {
        match self.params.get_mut(self.len) {
            Some(slot) => {
                *slot = a.param(self.stream);
                self.len += 1;
            }
            None => self.overflow = true,
        }
        self
    }

    /// Submits the kernel to the stream.
    ///
    /// # Safety
    /// The arguments must be the kernel's parameters in number, order and type, and every
    /// buffer must hold what the kernel reads and writes for `cfg`'s grid.
    pub(super) unsafe fn launch(&mut self, cfg: LaunchConfig) -> Result<(), DriverError> {
        if self.overflow {
            return Err(DriverError(sys::cudaError_enum::CUDA_ERROR_INVALID_VALUE));
        }
        self.stream.context().bind_to_thread()?;
        let mut values = [0 as sys::CUdeviceptr; MAX_ARGS];
        for (v, p) in values.iter_mut().zip(&self.params[..self.len]) {
            if let Param::Device(d) = p {
                *v = *d;
            }
        }
        let base = values.as_mut_ptr();
        let mut ptrs = [std::ptr::null_mut::<c_void>(); MAX_ARGS];
        for (i, (slot, p)) in ptrs.iter_mut().zip(&self.params[..self.len]).enumerate() {
            *slot = match p {
                Param::Host(h) => h.cast_mut(),
                // SAFETY: i < MAX_ARGS, inside `values`, which outlives the call below.
                Param::Device(_) => unsafe { base.add(i) }.cast(),
            };
        }
        if !self.programmatic {
            // SAFETY: the caller's contract; `ptrs` holds one address per parameter.
            return unsafe {
                result::launch_kernel(
                    self.func.cu_function(),
                    cfg.grid_dim,
                    cfg.block_dim,
                    cfg.shared_mem_bytes,
                    self.stream.cu_stream(),
                    &mut ptrs[..self.len],
                )
            };
        }
        // SAFETY: a zeroed union of plain integers is a valid value.
        let mut value: CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
        value.programmaticStreamSerializationAllowed = 1;
        let mut attr = CUlaunchAttribute {
            id: CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            value,
        };
        let config = CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: self.stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: 1,
        };
        // SAFETY: the caller's contract; `config` and its one attribute live through the call.
        unsafe {
            sys::cuLaunchKernelEx(
                &config,
                self.func.cu_function(),
                ptrs.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
    }
}

/// The default of [`CudaDevice::set_programmatic_launch`]: `KESTREL_CUDA_PDL=1`.
pub(super) fn programmatic_from_env() -> bool {
    std::env::var("KESTREL_CUDA_PDL").is_ok_and(|v| v == "1")
}

impl CudaDevice {
    /// A launch of `f` on the device's stream, programmatic when that is on.
    pub(super) fn launch<'a>(&'a self, f: &'a CudaFunction) -> Launch<'a> {
        Launch::new(&self.stream, f, self.programmatic_launch())
    }

    /// Turns programmatic dependent launch on or off (see `launch.rs`'s first lines): each
    /// kernel may be launched while the one before it still runs, and waits at its top for
    /// it. Only on compute capability 9.0 and newer (the compute_90 PTX has the waits): there
    /// it returns `on`, elsewhere `false` and nothing changes. The same bits either way.
    /// Default `KESTREL_CUDA_PDL=1`, else off: unmeasured so far. Graphs captured before the
    /// change keep the launches they were captured with.
    pub fn set_programmatic_launch(&self, on: bool) -> bool {
        let on = on && self.compute_capability().0 >= 9;
        self.programmatic.store(on, Ordering::Relaxed);
        on
    }

    /// Whether kernels are launched for programmatic dependent launch.
    pub fn programmatic_launch(&self) -> bool {
        self.programmatic.load(Ordering::Relaxed)
    }
}
