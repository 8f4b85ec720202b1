//! `Session`: one sequence's KV cache and the tokens in it, kept across generations so a new
//! prompt that starts with the same tokens (a system prompt, earlier chat turns) skips their
//! prefill. The cache lives where the generator runs: host memory for the CPU engine, device
//! memory for the CUDA one.

use kestrel_graph::CudaKvCache;
use kestrel_kv::{ContiguousCache, KvCache};

use crate::adapter_use::AdapterUse;
use crate::GenerateError;

/// A session's cache, on the generator's device.
pub(crate) enum SessionKv {
    /// Host memory, for the CPU engine.
    Cpu(ContiguousCache),
    /// Device memory, for the CUDA engine.
    Cuda(CudaKvCache),
}

impl SessionKv {
    /// Positions cached.
    pub(crate) fn seq_len(&self) -> usize {
        match self {
            SessionKv::Cpu(kv) => kv.seq_len(),
            SessionKv::Cuda(kv) => kv.len(),
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        match self {
            SessionKv::Cpu(kv) => kv.capacity(),
            SessionKv::Cuda(kv) => kv.capacity(),
        }
    }

    fn memory_bytes(&self) -> usize {
        match self {
            SessionKv::Cpu(kv) => kv.memory_bytes(),
            SessionKv::Cuda(kv) => kv.memory_bytes(),
        }
    }

    fn reset(&mut self) {
        match self {
            SessionKv::Cpu(kv) => kv.reset(),
            SessionKv::Cuda(kv) => kv.reset(),
        }
    }

    fn truncate(&mut self, len: usize) {
        match self {
            SessionKv::Cpu(kv) => kv.truncate(len),
            SessionKv::Cuda(kv) => kv.truncate(len),
        }
    }

    /// Whether truncating to `len` keeps the first `len` positions (a recurrent state only
    /// returns to 0, stays, or returns to its checkpoint).
    pub(crate) fn can_truncate(&self, len: usize) -> bool {
        match self {
            SessionKv::Cpu(kv) => kv.can_truncate(len),
            SessionKv::Cuda(kv) => kv.can_truncate(len),
        }
    }

    /// The host cache, for the paths only the CPU engine runs (`what` names the path in the
    /// error a CUDA session gets).
    pub(crate) fn cpu_mut(
        &mut self,
        what: &'static str,
    ) -> Result<&mut ContiguousCache, GenerateError> {
        match self {
            SessionKv::Cpu(kv) => Ok(kv),
            SessionKv::Cuda(_) => Err(GenerateError::NotOnDevice {
                what,
                device: "CUDA".into(),
            }),
        }
    }
}

/// A sequence with its own KV cache.
///
/// Make one with [`Generator::new_session`](crate::Generator::new_session) and pass it to
/// [`Generator::iter_in`](crate::Generator::iter_in) or
/// [`Generator::generate_in`](crate::Generator::generate_in). Each generation's prompt is the
/// whole conversation so far; the longest prefix it shares with [`tokens`](Self::tokens) is
/// reused from the cache and only the rest is prefilled.
pub struct Session {
    pub(crate) kv: SessionKv,
    pub(crate) tokens: Vec<u32>,
    /// The LoRA adapter scales its cache was computed at, by position.
    pub(crate) adapters: AdapterUse,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("tokens", &self.tokens.len())
            .field("capacity", &self.kv.capacity())
            .finish()
    }
}

impl Session {
    pub(crate) fn new(kv: SessionKv, adapters: Vec<f32>) -> Self {
        let cap = kv.capacity();
        Session {
            kv,
            tokens: Vec::with_capacity(cap),
            adapters: AdapterUse::everywhere(adapters),
        }
    }

    /// The LoRA adapter scales its cache was computed at (one per adapter of its generator;
    /// a generation at other scales starts it over). An activated LoRA's scale holds from its
    /// invocation on ([`adapter_start`](Self::adapter_start)).
    pub fn adapter_scales(&self) -> &[f32] {
        &self.adapters.scales
    }

    /// Where adapter `k` starts to act in the cached sequence: 0 for an ordinary adapter, an
    /// activated LoRA's invocation, `None` for one that does not act (its invocation missing
    /// from the prompt) or an index past the adapters.
    pub fn adapter_start(&self, k: usize) -> Option<usize> {
        self.adapters
            .from
            .get(k)
            .copied()
            .filter(|&f| f != usize::MAX)
    }

    /// The tokens whose keys and values are in the cache, in order.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Most tokens the session holds (the context length).
    pub fn capacity(&self) -> usize {
        self.kv.capacity()
    }

    /// Bytes of KV cache memory held (device memory for a CUDA session).
    pub fn kv_bytes(&self) -> usize {
        self.kv.memory_bytes()
    }

    /// Forget everything: the next prompt is prefilled from the start.
    pub fn reset(&mut self) {
        self.kv.reset();
        self.tokens.clear();
    }

    /// Keep only the first `len` tokens (the rest of the cache is dropped). A model with
    /// recurrent (state-space) layers keeps them only where its state can go back there (see
    /// `kestrel_kv::KvCache::can_truncate`); otherwise the session starts over empty.
    pub fn truncate(&mut self, len: usize) {
        self.kv.truncate(len);
        let kept = self.kv.seq_len().min(len);
        self.tokens.truncate(kept);
    }

    /// Makes `session` run at `adapters`: cached positions computed at other scales are
    /// dropped (all of them for an ordinary change of scales; those from the invocation on
    /// when only an activated LoRA's place moved).
    pub(crate) fn use_adapters(&mut self, adapters: AdapterUse) {
        let keep = self.adapters.first_difference(&adapters);
        if keep < self.tokens.len() {
            if keep == 0 {
                self.reset();
            } else {
                self.truncate(keep);
            }
        }
        self.adapters = adapters;
    }
}
