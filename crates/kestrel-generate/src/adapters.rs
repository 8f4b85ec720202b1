//! The weights a generator's graphs read: the model's, with the LoRA adapters it was set up
//! with applied on top (each adapted matmul gets its low-rank terms; nothing is merged), and
//! the adapter scales each generation runs at: the generator's (changed at run time with
//! [`Generator::set_adapter_scales`](crate::Generator::set_adapter_scales)), or a request's own
//! choice ([`GenerateParams::adapters`](crate::GenerateParams::adapters)), as llama-server's
//! per-request `lora` field chooses. A session remembers the scales its cache was computed at.

use crate::core::{Core, Plans};
use crate::{GenerateError, Session};

impl Core {
    /// The adapter scales of a generation choosing `choice`: the generator's for `None`;
    /// otherwise the listed adapters (by index) at their scales and the others off, as
    /// llama-server reads a request's `lora` list.
    ///
    /// # Errors
    /// An index past the adapters, a scale that is not finite, or on the CUDA engine scales
    /// other than the generator's (its plan has them built in).
    pub(crate) fn adapter_scales(
        &self,
        choice: Option<&[(usize, f32)]>,
    ) -> Result<Vec<f32>, GenerateError> {
        let current = self.weights.scales();
        let Some(choice) = choice else {
            return Ok(current);
        };
        let scales = scales_of(choice, current.len())?;
        if scales != current && matches!(self.plans, Plans::Cuda(_)) {
            return Err(GenerateError::NotOnDevice {
                what: "LoRA scales other than the model's",
                device: "CUDA".into(),
            });
        }
        Ok(scales)
    }

    /// Sets the generator's adapter scales.
    ///
    /// # Errors
    /// As [`scales_of`]; on CUDA any change.
    pub(crate) fn set_adapter_scales(&mut self, scales: &[f32]) -> Result<(), GenerateError> {
        let n = self.weights.adapters().len();
        if scales.len() != n {
            return Err(invalid(format!(
                "{} scales given for {n} adapters",
                scales.len()
            )));
        }
        let all: Vec<(usize, f32)> = scales.iter().copied().enumerate().collect();
        let scales = self.adapter_scales(Some(&all))?;
        self.weights.set_scales(&scales);
        Ok(())
    }
}

/// One scale per adapter from a list of `(index, scale)` (unlisted adapters 0; the last entry
/// of an index wins).
fn scales_of(choice: &[(usize, f32)], n: usize) -> Result<Vec<f32>, GenerateError> {
    let mut scales = vec![0.0; n];
    for &(k, s) in choice {
        let slot = scales
            .get_mut(k)
            .ok_or_else(|| invalid(format!("adapter {k} asked for, the model has {n} (0..{n})")))?;
        if !s.is_finite() {
            return Err(invalid(format!(
                "adapter {k}: scale {s} is not a finite number"
            )));
        }
        *slot = s;
    }
    Ok(scales)
}

fn invalid(reason: String) -> GenerateError {
    GenerateError::InvalidOption {
        name: "adapters",
        reason,
    }
}

impl Session {
    /// Makes `session` run at `scales`: a cache computed at other scales is dropped.
    pub(crate) fn use_adapters(&mut self, scales: Vec<f32>) {
        if self.adapters != scales {
            self.reset();
            self.adapters = scales;
        }
    }
}
