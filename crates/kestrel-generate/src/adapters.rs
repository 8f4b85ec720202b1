//! The weights a generator's graphs read: the model's, with the LoRA adapters it was set up
//! with applied on top (each adapted matmul gets its low-rank terms; nothing is merged), and
//! the adapter scales each generation runs at: the generator's (changed at run time with
//! [`Generator::set_adapter_scales`](crate::Generator::set_adapter_scales)), or a request's own
//! choice ([`GenerateParams::adapters`](crate::GenerateParams::adapters)), as llama-server's
//! per-request `lora` field chooses. A session remembers the scales its cache was computed at.
//!
//! An activated LoRA (aLoRA: an adapter file with `adapter.alora.invocation_tokens`) acts only
//! from the last place its invocation sequence starts in the prompt, as PEFT trains and runs
//! it: the positions before are the base model's (so their cache is shared with requests
//! without the adapter), and a prompt without the sequence runs without the adapter. The
//! scales of a sequence are therefore a function of the position ([`AdapterUse`]); prefill
//! chunks are cut where they change.

use crate::adapter_use::{last_start, AdapterUse, NEVER};
use crate::core::Core;
use crate::GenerateError;

impl Core {
    /// The adapter scales of a generation choosing `choice`: the generator's for `None`;
    /// otherwise the listed adapters (by index) at their scales and the others off, as
    /// llama-server reads a request's `lora` list.
    ///
    /// # Errors
    /// An index past the adapters, a scale that is not finite.
    pub(crate) fn adapter_scales(
        &self,
        choice: Option<&[(usize, f32)]>,
    ) -> Result<Vec<f32>, GenerateError> {
        let current = self.weights.scales();
        let Some(choice) = choice else {
            return Ok(current);
        };
        scales_of(choice, current.len())
    }

    /// Sets the generator's adapter scales.
    ///
    /// # Errors
    /// As [`scales_of`].
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

impl Core {
    /// The adapter use of a generation choosing `choice` ([`Core::adapter_scales`]) on
    /// `prompt`: each activated LoRA with a scale acts from the last start of its invocation
    /// sequence in `prompt`, or nowhere when the prompt lacks it.
    ///
    /// # Errors
    /// As [`Core::adapter_scales`].
    pub(crate) fn adapter_use(
        &self,
        choice: Option<&[(usize, f32)]>,
        prompt: &[u32],
    ) -> Result<AdapterUse, GenerateError> {
        let scales = self.adapter_scales(choice)?;
        let mut from = vec![0; scales.len()];
        for ((adapter, _), (&s, f)) in self
            .weights
            .adapters()
            .iter()
            .zip(scales.iter().zip(&mut from))
        {
            if s != 0.0 && adapter.is_activated() {
                *f = last_start(prompt, adapter.invocation_tokens()).unwrap_or(NEVER);
            }
        }
        Ok(AdapterUse { scales, from })
    }

    /// What the prefix cache's blocks were computed at: the generator's scales with its
    /// activated LoRAs off (before its invocation an aLoRA does not act).
    pub(crate) fn prefix_reference(&self) -> AdapterUse {
        let scales = self
            .weights
            .adapters()
            .iter()
            .map(|(a, s)| if a.is_activated() { 0.0 } else { *s })
            .collect();
        AdapterUse::everywhere(scales)
    }
}
