//! Which device a model runs on: the user's `--device` resolved against the build and the
//! driver, what runs on the CPU only, and when `auto` falls back to the CPU after a GPU was found.

use kestrel_tensor::{Device, DeviceRequest};

use crate::Error;

/// Resolve the device a user asked for (`cpu`, `cuda`, `cuda:N`, `auto`). `cuda` says whether
/// the build, the driver or the GPU is missing; `auto` takes GPU 0 when a driver and a GPU are
/// there, else the CPU with the reason (the note, for one log line).
pub(crate) fn resolve_device(device: &str) -> Result<(Device, Option<String>), Error> {
    parse_device(device)?
        .resolve()
        .map_err(|e| Error::InvalidOption {
            name: "device",
            reason: e.to_string(),
        })
}

/// The user's `--device` (`cpu`, `cuda`, `cuda:N`, `auto`), or why it is none of them.
pub(crate) fn parse_device(device: &str) -> Result<DeviceRequest, Error> {
    device
        .parse()
        .map_err(|e: kestrel_tensor::ParseDeviceError| Error::InvalidOption {
            name: "device",
            reason: e.to_string(),
        })
}

/// Whether a generator that failed on a GPU with `e` runs on the CPU instead when the user
/// asked for `auto`: an op or a cache type the CUDA engine lacks yet (not a device error, nor
/// a bad option the CPU would refuse too).
pub(crate) fn cpu_instead(e: &kestrel_generate::GenerateError) -> bool {
    use kestrel_generate::GenerateError;
    match e {
        GenerateError::Graph(kestrel_graph::GraphError::Unsupported { backend, .. }) => {
            *backend == "CUDA"
        }
        GenerateError::InvalidOption { name, .. } => *name == "cache-type",
        _ => false,
    }
}

/// For what runs on the CPU engine only (`what`: encoders): `cpu` and `auto` pass, `cuda` is
/// refused, saying why.
pub(crate) fn check_cpu_device(device: &str, what: &str) -> Result<(), Error> {
    match parse_device(device)? {
        DeviceRequest::Cuda(_) => Err(Error::InvalidOption {
            name: "device",
            reason: format!("{what} run on the CPU engine only; use --device cpu (or auto)"),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kestrel_generate::GenerateError;
    use kestrel_graph::GraphError;

    #[test]
    fn auto_falls_back_only_for_what_the_gpu_engine_lacks() {
        let unsupported = |backend| {
            GenerateError::Graph(GraphError::Unsupported {
                op: "mixture of experts",
                node: "blk.0.ffn_moe".into(),
                backend,
            })
        };
        assert!(cpu_instead(&unsupported("CUDA")));
        assert!(!cpu_instead(&unsupported("CPU")));
        let option = |name| GenerateError::InvalidOption {
            name,
            reason: "x".into(),
        };
        assert!(cpu_instead(&option("cache-type")));
        assert!(!cpu_instead(&option("batch")));
        assert!(!cpu_instead(&GenerateError::Graph(GraphError::Batch(
            "x".into()
        ))));
    }

    #[test]
    fn devices_resolve_or_say_why() {
        assert_eq!(resolve_device("cpu").unwrap().0, Device::Cpu);
        assert!(resolve_device("gpu").is_err());
        assert!(check_cpu_device("cuda:1", "encoders").is_err());
        assert!(check_cpu_device("auto", "encoders").is_ok());
    }
}
