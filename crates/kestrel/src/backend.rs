//! Backends: go-inference's contract. A [`Backend`] (`name`, `available`, `load_model`) loads a
//! [`TextModel`]; a process-wide registry keeps them in preference order, so another engine can
//! plug in behind the same trait. kestrel's own engines register themselves: `cuda` (first,
//! when a GPU build and device exist) and `cpu`.

use std::path::Path;
use std::sync::{Arc, OnceLock, RwLock};

use crate::{
    ChatMessage, Classification, Error, GenerateMetrics, GenerateOptions, LoadOptions, Model,
    ModelInfo, Output, Response,
};

/// A loaded text model, whatever engine runs it (go-inference's `TextModel`).
pub trait TextModel: Send {
    /// Generate a continuation of `prompt`.
    fn generate(&mut self, prompt: &str, opts: &GenerateOptions) -> Result<Output, Error>;
    /// Generate, calling `on_text` with each final piece; returning `false` stops.
    fn generate_stream(
        &mut self,
        prompt: &str,
        opts: &GenerateOptions,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Output, Error>;
    /// Answer a conversation with the model's chat template.
    fn chat(&mut self, messages: &[ChatMessage], opts: &GenerateOptions)
        -> Result<Response, Error>;
    /// Generate for several prompts (one result each).
    fn generate_batch(
        &mut self,
        prompts: &[&str],
        opts: &GenerateOptions,
    ) -> Result<Vec<Result<Output, Error>>, Error>;
    /// The most likely next token after each prompt.
    fn classify(
        &mut self,
        prompts: &[&str],
        with_logits: bool,
    ) -> Result<Vec<Classification>, Error>;
    /// A pooled, normalized embedding of `text`.
    fn embed(&mut self, text: &str) -> Result<Vec<f32>, Error>;
    /// What the model is.
    fn info(&self) -> ModelInfo;
    /// The last call's metrics.
    fn metrics(&self) -> GenerateMetrics;
}

impl TextModel for Model {
    fn generate(&mut self, prompt: &str, opts: &GenerateOptions) -> Result<Output, Error> {
        Model::generate(self, prompt, opts)
    }
    fn generate_stream(
        &mut self,
        prompt: &str,
        opts: &GenerateOptions,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Output, Error> {
        Model::generate_stream(self, prompt, opts, on_text)
    }
    fn chat(
        &mut self,
        messages: &[ChatMessage],
        opts: &GenerateOptions,
    ) -> Result<Response, Error> {
        Model::chat(self, messages, opts)
    }
    fn generate_batch(
        &mut self,
        prompts: &[&str],
        opts: &GenerateOptions,
    ) -> Result<Vec<Result<Output, Error>>, Error> {
        Model::generate_batch(self, prompts, opts)
    }
    fn classify(
        &mut self,
        prompts: &[&str],
        with_logits: bool,
    ) -> Result<Vec<Classification>, Error> {
        Model::classify(self, prompts, with_logits)
    }
    fn embed(&mut self, text: &str) -> Result<Vec<f32>, Error> {
        Model::embed(self, text)
    }
    fn info(&self) -> ModelInfo {
        Model::info(self)
    }
    fn metrics(&self) -> GenerateMetrics {
        Model::metrics(self).clone()
    }
}

/// An engine that loads models (go-inference's `Backend`).
pub trait Backend: Send + Sync {
    /// Its name (`cpu`, `cuda`, ...).
    fn name(&self) -> &str;
    /// Whether it can run here (a GPU present, a library found).
    fn available(&self) -> bool;
    /// Load a GGUF file.
    fn load_model(&self, path: &Path, opts: &LoadOptions) -> Result<Box<dyn TextModel>, Error>;
}

/// kestrel's CPU engine.
#[derive(Debug, Default)]
pub struct CpuBackend;

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        "cpu"
    }
    fn available(&self) -> bool {
        true
    }
    fn load_model(&self, path: &Path, opts: &LoadOptions) -> Result<Box<dyn TextModel>, Error> {
        let opts = LoadOptions {
            device: "cpu".into(),
            ..opts.clone()
        };
        Ok(Box::new(Model::load_file(path, opts)?))
    }
}

/// kestrel's CUDA engine: available when the build has the `cuda` feature and the driver finds a
/// GPU. Models load on `opts.device` when it names a GPU (`cuda:N`), else on GPU 0.
#[derive(Debug, Default)]
pub struct CudaBackend;

impl Backend for CudaBackend {
    fn name(&self) -> &str {
        "cuda"
    }
    fn available(&self) -> bool {
        kestrel_tensor::cuda::device_count().is_ok_and(|n| n > 0)
    }
    fn load_model(&self, path: &Path, opts: &LoadOptions) -> Result<Box<dyn TextModel>, Error> {
        let mut opts = opts.clone();
        if !opts.device.trim().to_ascii_lowercase().starts_with("cuda") {
            opts.device = "cuda".into();
        }
        Ok(Box::new(Model::load_file(path, opts)?))
    }
}

fn registry() -> &'static RwLock<Vec<Arc<dyn Backend>>> {
    static R: OnceLock<RwLock<Vec<Arc<dyn Backend>>>> = OnceLock::new();
    R.get_or_init(|| RwLock::new(vec![Arc::new(CudaBackend), Arc::new(CpuBackend)]))
}

/// Add a backend (replacing one of the same name) at `priority` in the preference order
/// (0: first; past the end: last).
///
/// ```
/// use std::path::Path;
/// use kestrel::backend::{backends, register_backend, Backend, TextModel};
/// use kestrel::{Error, LoadOptions};
/// struct Remote;
/// impl Backend for Remote {
///     fn name(&self) -> &str { "remote" }
///     fn available(&self) -> bool { false }
///     fn load_model(&self, _: &Path, _: &LoadOptions) -> Result<Box<dyn TextModel>, Error> {
///         Err(Error::InvalidOption { name: "device", reason: "offline".into() })
///     }
/// }
/// register_backend(std::sync::Arc::new(Remote), usize::MAX);
/// assert_eq!(backends().last().unwrap().name(), "remote");
/// assert_eq!(kestrel::backend::default_backend().unwrap().name(), "cpu");
/// ```
pub fn register_backend(backend: Arc<dyn Backend>, priority: usize) {
    if let Ok(mut r) = registry().write() {
        r.retain(|b| b.name() != backend.name());
        let at = priority.min(r.len());
        r.insert(at, backend);
    }
}

/// Every registered backend, in preference order.
pub fn backends() -> Vec<Arc<dyn Backend>> {
    registry().read().map(|r| r.clone()).unwrap_or_default()
}

/// A backend by name.
pub fn get_backend(name: &str) -> Option<Arc<dyn Backend>> {
    backends().into_iter().find(|b| b.name() == name)
}

/// The first available backend in preference order.
pub fn default_backend() -> Option<Arc<dyn Backend>> {
    backends().into_iter().find(|b| b.available())
}

/// Load `path` with the backend `device` names (`cpu`, `cuda`, `cuda:N` asks for `cuda` with
/// that GPU), or the default one when `None`.
pub fn load_model(
    path: &Path,
    device: Option<&str>,
    opts: &LoadOptions,
) -> Result<Box<dyn TextModel>, Error> {
    let b = match device {
        Some(d) => {
            let name = d.split(':').next().unwrap_or(d);
            get_backend(name).ok_or_else(|| Error::InvalidOption {
                name: "device",
                reason: format!(
                    "no backend {name:?}; registered: {}",
                    backends()
                        .iter()
                        .map(|b| b.name().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })?
        }
        None => default_backend().ok_or_else(|| Error::InvalidOption {
            name: "device",
            reason: "no backend is available".into(),
        })?,
    };
    if !b.available() {
        return Err(Error::InvalidOption {
            name: "device",
            reason: format!("the {} backend is not available here", b.name()),
        });
    }
    match device {
        Some(d) if d.trim().to_ascii_lowercase().starts_with("cuda") => {
            let opts = LoadOptions {
                device: d.to_string(),
                ..opts.clone()
            };
            b.load_model(path, &opts)
        }
        _ => b.load_model(path, opts),
    }
}
