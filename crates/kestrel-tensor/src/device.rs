//! Which device a model runs on: [`DeviceRequest`] is what a user asks for (`cpu`, `cuda`,
//! `cuda:N`, `auto`, as `--device` and `LoadOptions` take it), [`Device`] what it resolves to.

use std::fmt;
use std::str::FromStr;

use crate::cuda::{self, CudaError};

/// A device the engine runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Device {
    /// The CPU engine.
    Cpu,
    /// CUDA GPU number `n`.
    Cuda(usize),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// What a user asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeviceRequest {
    /// The CPU.
    #[default]
    Cpu,
    /// CUDA GPU number `n` (`cuda` is `cuda:0`); an error if there is none.
    Cuda(usize),
    /// CUDA GPU 0 when a driver and a GPU are found, else the CPU.
    Auto,
}

/// A `--device` value that is not one of `cpu`, `cuda`, `cuda:N`, `auto`.
#[derive(Debug, thiserror::Error)]
#[error("unknown device {0:?}: expected cpu, cuda, cuda:N or auto")]
pub struct ParseDeviceError(String);

impl FromStr for DeviceRequest {
    type Err = ParseDeviceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "cpu" => Ok(DeviceRequest::Cpu),
            "cuda" | "gpu" => Ok(DeviceRequest::Cuda(0)),
            "auto" => Ok(DeviceRequest::Auto),
            _ => t
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(DeviceRequest::Cuda)
                .ok_or_else(|| ParseDeviceError(s.to_string())),
        }
    }
}

impl fmt::Display for DeviceRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceRequest::Cpu => f.write_str("cpu"),
            DeviceRequest::Cuda(n) => write!(f, "cuda:{n}"),
            DeviceRequest::Auto => f.write_str("auto"),
        }
    }
}

impl DeviceRequest {
    /// The device to run on. `Auto` gives `Cuda(0)` when a driver and a GPU are there, else
    /// `Cpu` with the reason (for one log line); `Cuda(n)` checks that GPU `n` exists.
    ///
    /// # Errors
    /// For `Cuda(n)`: [`CudaError::NotBuilt`], [`CudaError::NoDriver`] or
    /// [`CudaError::NoDevice`].
    pub fn resolve(self) -> Result<(Device, Option<String>), CudaError> {
        match self {
            DeviceRequest::Cpu => Ok((Device::Cpu, None)),
            DeviceRequest::Cuda(n) => {
                let found = cuda::device_count()?;
                if n >= found {
                    return Err(CudaError::NoDevice {
                        requested: n,
                        found,
                    });
                }
                Ok((Device::Cuda(n), None))
            }
            DeviceRequest::Auto => match cuda::device_count() {
                Ok(found) if found > 0 => Ok((Device::Cuda(0), None)),
                Ok(_) => Ok((
                    Device::Cpu,
                    Some("auto: no CUDA device found, using the CPU".into()),
                )),
                Err(e) => Ok((Device::Cpu, Some(format!("auto: using the CPU ({e})")))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!(
            "cpu".parse::<DeviceRequest>().ok(),
            Some(DeviceRequest::Cpu)
        );
        assert_eq!(
            "CUDA".parse::<DeviceRequest>().ok(),
            Some(DeviceRequest::Cuda(0))
        );
        assert_eq!(
            "cuda:3".parse::<DeviceRequest>().ok(),
            Some(DeviceRequest::Cuda(3))
        );
        assert_eq!(
            "auto".parse::<DeviceRequest>().ok(),
            Some(DeviceRequest::Auto)
        );
        for bad in ["", "cuda:", "cuda:x", "metal", "cuda:-1"] {
            let e = bad
                .parse::<DeviceRequest>()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                e.contains("expected cpu, cuda, cuda:N or auto"),
                "{bad}: {e}"
            );
        }
        assert_eq!(DeviceRequest::Cuda(2).to_string(), "cuda:2");
    }

    #[test]
    fn cpu_and_auto_always_resolve() {
        assert_eq!(DeviceRequest::Cpu.resolve().ok(), Some((Device::Cpu, None)));
        // Auto never fails: a GPU or the CPU with a reason.
        match DeviceRequest::Auto.resolve() {
            Ok((Device::Cpu, Some(why))) => assert!(why.starts_with("auto:"), "{why}"),
            Ok((Device::Cuda(0), None)) => {}
            other => panic!("auto resolved to {other:?}"),
        }
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_the_feature_says_so() {
        let e = DeviceRequest::Cuda(0)
            .resolve()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("--features cuda"), "{e}");
    }
}
