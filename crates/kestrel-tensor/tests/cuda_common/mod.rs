//! What the CUDA engine's GPU tests share: opening GPU 0, or saying why the test skips (and
//! failing instead when `KESTREL_REQUIRE_GPU` is set, as the GPU machine's run does).

use kestrel_tensor::cuda::{CudaDevice, CudaError};

/// GPU 0, or `None` (with a line saying why `what` skips) when there is no driver or GPU.
pub fn device(what: &str) -> Option<CudaDevice> {
    match CudaDevice::open(0) {
        Ok(d) => Some(d),
        Err(e @ (CudaError::NoDriver | CudaError::NoDevice { .. })) => {
            assert!(
                std::env::var_os("KESTREL_REQUIRE_GPU").is_none(),
                "KESTREL_REQUIRE_GPU is set but: {e}"
            );
            eprintln!("skipping the CUDA {what} test: {e}");
            None
        }
        Err(e) => panic!("CUDA device 0 did not open: {e}"),
    }
}
