//! `KESTREL_CUDA_PROFILE=1`: GPU time per op of a [`crate::CudaPlan`]'s plain steps, from a
//! pair of timing events around every node, summed by op (matmuls by weight type and shape)
//! and by step kind (prefill, one-token decode), and printed to stderr when the plan is
//! dropped. Profiling turns CUDA graphs off (a replayed graph cannot be split by node), so
//! decode times are those of plain launches. For finding what to speed up, not for timing.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use kestrel_tensor::cuda::{CudaDevice, DeviceEvent};

use crate::ir::Op;
use crate::GraphError;

/// Whether `KESTREL_CUDA_PROFILE` asks for a profile.
pub(crate) fn wanted() -> bool {
    std::env::var("KESTREL_CUDA_PROFILE").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The op's variant name (`MatMul`, `RmsNorm`, ...).
pub(crate) fn op_kind(op: &Op) -> String {
    let debug = format!("{op:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("?")
        .to_string()
}

/// Events and running totals.
pub(crate) struct Profile {
    events: Vec<(DeviceEvent, DeviceEvent)>,
    labels: Vec<String>,
    /// (decode?, label) -> (calls, milliseconds).
    totals: BTreeMap<(bool, String), (u64, f64)>,
    /// Steps collected: prefill, decode.
    steps: [u64; 2],
}

impl Profile {
    /// Two events for each node labelled in `labels`.
    pub(crate) fn new(dev: &CudaDevice, labels: Vec<String>) -> Result<Profile, GraphError> {
        let mut events = Vec::with_capacity(labels.len());
        for _ in &labels {
            events.push((dev.new_event()?, dev.new_event()?));
        }
        Ok(Profile {
            events,
            labels,
            totals: BTreeMap::new(),
            steps: [0; 2],
        })
    }

    /// Marks the start (`end == false`) or end of node `i`.
    pub(crate) fn mark(&self, dev: &CudaDevice, i: usize, end: bool) -> Result<(), GraphError> {
        if let Some((a, b)) = self.events.get(i) {
            dev.record(if end { b } else { a })?;
        }
        Ok(())
    }

    /// Adds the step just run (its events waited for) to the totals.
    pub(crate) fn collect(&mut self, decode: bool) -> Result<(), GraphError> {
        for ((a, b), label) in self.events.iter().zip(&self.labels) {
            let ms = f64::from(a.elapsed_ms(b)?);
            let e = self
                .totals
                .entry((decode, label.clone()))
                .or_insert((0, 0.0));
            e.0 += 1;
            e.1 += ms;
        }
        self.steps[usize::from(decode)] += 1;
        Ok(())
    }

    /// The table: per step kind, ops by total time.
    pub(crate) fn report(&self) -> String {
        let mut s = String::new();
        for (decode, name) in [(false, "prefill"), (true, "decode (plain launches)")] {
            let steps = self.steps[usize::from(decode)];
            if steps == 0 {
                continue;
            }
            let mut rows: Vec<_> = self
                .totals
                .iter()
                .filter(|((d, _), _)| *d == decode)
                .map(|((_, l), &(n, ms))| (l, n, ms))
                .collect();
            rows.sort_by(|a, b| b.2.total_cmp(&a.2));
            let all: f64 = rows.iter().map(|r| r.2).sum();
            let _ = writeln!(
                s,
                "kestrel CUDA profile, {name}: {steps} steps, {:.3} ms a step in kernels",
                all / steps as f64
            );
            for (label, n, ms) in rows {
                let _ = writeln!(
                    s,
                    "  {:>6.2}%  {:>9.1} us/step  {:>8.2} us/call  {label}",
                    100.0 * ms / all.max(1e-12),
                    1000.0 * ms / steps as f64,
                    1000.0 * ms / n as f64
                );
            }
        }
        s
    }
}
