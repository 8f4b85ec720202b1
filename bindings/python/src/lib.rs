//! kestrel's Python extension (`kestrel._kestrel`; the `kestrel` package re-exports it and adds
//! the OpenAI-style helpers in Python): a [`Model`] class over the facade's `kestrel::Model`,
//! token streams that decode on a thread of their own while Python waits without the GIL, and
//! typed exceptions. Every call that runs the model releases the GIL, so other Python threads
//! keep running.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use kestrel::generate::GenerateError;
use kestrel::{CancelToken, ChatMessage, FinishReason, GenerateOptions, LoadOptions};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyFileNotFoundError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

create_exception!(
    kestrel,
    KestrelError,
    PyException,
    "A model that cannot be loaded or run (a corrupt file, an unsupported architecture, a failed generation)."
);
create_exception!(
    kestrel,
    ModelNotFoundError,
    PyFileNotFoundError,
    "The model name is neither a file nor a known, fetchable model."
);
create_exception!(
    kestrel,
    InvalidArgumentError,
    PyValueError,
    "An option out of range, or a grammar or JSON Schema that does not compile."
);

fn to_py(e: kestrel::Error) -> PyErr {
    let msg = e.to_string();
    match e {
        kestrel::Error::NotFound { .. } => ModelNotFoundError::new_err(msg),
        kestrel::Error::InvalidOption { .. } | kestrel::Error::Sampling(_) => {
            InvalidArgumentError::new_err(msg)
        }
        // what the caller asked for does not fit (llama-cpp-python raises ValueError too)
        kestrel::Error::Generate(ref g)
            if matches!(
                **g,
                GenerateError::ContextTooSmall { .. }
                    | GenerateError::EmptyPrompt
                    | GenerateError::InvalidOption { .. }
                    | GenerateError::Sampling(_)
            ) =>
        {
            InvalidArgumentError::new_err(msg)
        }
        _ => KestrelError::new_err(msg),
    }
}

fn invalid(msg: String) -> PyErr {
    InvalidArgumentError::new_err(msg)
}

/// `finish_reason` as OpenAI names it.
fn finish_name(f: &FinishReason) -> &'static str {
    match f {
        FinishReason::Length => "length",
        FinishReason::Cancelled => "cancelled",
        _ => "stop",
    }
}

/// The sampling keywords every generating method takes.
#[derive(Default)]
struct Sampling {
    max_tokens: Option<i64>,
    temperature: Option<f64>,
    top_k: Option<i64>,
    top_p: Option<f64>,
    min_p: Option<f64>,
    repeat_penalty: Option<f64>,
    seed: Option<u64>,
    stop: Option<Vec<String>>,
    json_schema: Option<String>,
    grammar: Option<String>,
    /// The call's own LoRA adapters (name, path or index; scale): the others off, `[]` none.
    lora: Option<Vec<(String, f32)>>,
}

/// The keywords [`Sampling::from_kwargs`] takes.
const SAMPLING_KEYS: &str = "max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, \
                             seed, stop, json_schema, grammar, lora";

/// Most entries in a call's `lora` list.
const MAX_LORA: usize = 256;

impl Sampling {
    /// The sampling keywords of a call (`None` values are left at their defaults); an unknown
    /// keyword is a `TypeError`, as Python's own calls make it.
    fn from_kwargs(kw: Option<&Bound<'_, PyDict>>) -> PyResult<Sampling> {
        let mut s = Sampling::default();
        for (k, v) in kw.into_iter().flat_map(|d| d.iter()) {
            let key: String = k.extract()?;
            if v.is_none() {
                continue;
            }
            match key.as_str() {
                "max_tokens" => s.max_tokens = Some(v.extract()?),
                "temperature" => s.temperature = Some(v.extract()?),
                "top_k" => s.top_k = Some(v.extract()?),
                "top_p" => s.top_p = Some(v.extract()?),
                "min_p" => s.min_p = Some(v.extract()?),
                "repeat_penalty" => s.repeat_penalty = Some(v.extract()?),
                "seed" => s.seed = Some(v.extract()?),
                // one string or a list of them, as llama-cpp-python takes it
                "stop" => {
                    s.stop = Some(match v.extract::<String>() {
                        Ok(one) => vec![one],
                        Err(_) => v.extract()?,
                    })
                }
                "json_schema" => s.json_schema = schema_text(Some(&v))?,
                "grammar" => s.grammar = Some(v.extract()?),
                // [(adapter, scale), ...]: the adapter by name, path or index
                "lora" => {
                    let list: Vec<(Bound<'_, PyAny>, f32)> = v.extract()?;
                    if list.len() > MAX_LORA {
                        return Err(invalid(format!("at most {MAX_LORA} lora entries")));
                    }
                    let named = list
                        .into_iter()
                        .map(|(a, scale)| {
                            let name = match a.extract::<usize>() {
                                Ok(i) => i.to_string(),
                                Err(_) => a.extract::<String>()?,
                            };
                            Ok((name, scale))
                        })
                        .collect::<PyResult<Vec<_>>>()?;
                    s.lora = Some(named);
                }
                _ => {
                    return Err(PyTypeError::new_err(format!(
                        "unexpected keyword argument {key:?} (sampling takes {SAMPLING_KEYS})"
                    )))
                }
            }
        }
        Ok(s)
    }

    /// The options, every value checked (a bad one is `InvalidArgumentError`, never a panic).
    fn options(&self) -> PyResult<GenerateOptions> {
        let mut o = GenerateOptions::default();
        if let Some(n) = self.max_tokens {
            if n < 1 {
                return Err(invalid(format!("max_tokens must be at least 1, got {n}")));
            }
            o = o.with_max_tokens(usize::try_from(n).unwrap_or(usize::MAX));
        }
        let unit = |name: &str, v: f64, lo: f64, hi: f64| {
            if v.is_finite() && (lo..=hi).contains(&v) {
                Ok(v as f32)
            } else {
                Err(invalid(format!(
                    "{name} must be within {lo}..={hi}, got {v}"
                )))
            }
        };
        if let Some(t) = self.temperature {
            o = o.with_temperature(unit("temperature", t, 0.0, 100.0)?);
        }
        if let Some(p) = self.top_p {
            o = o.with_top_p(unit("top_p", p, 0.0, 1.0)?);
        }
        if let Some(p) = self.min_p {
            o = o.with_min_p(unit("min_p", p, 0.0, 1.0)?);
        }
        if let Some(p) = self.repeat_penalty {
            o = o.with_repetition_penalty(unit("repeat_penalty", p, 0.0, 100.0)?);
        }
        if let Some(k) = self.top_k {
            if k < 0 {
                return Err(invalid(format!("top_k must be 0 (off) or more, got {k}")));
            }
            o = o.with_top_k(usize::try_from(k).unwrap_or(usize::MAX));
        }
        if let Some(s) = self.seed {
            o = o.with_seed(s);
        }
        if let Some(stop) = &self.stop {
            o = o.with_stop_strings(stop.iter().cloned());
        }
        match (&self.json_schema, &self.grammar) {
            (Some(_), Some(_)) => {
                return Err(invalid("give json_schema or grammar, not both".into()));
            }
            (Some(s), None) => o = o.with_json_schema(s).map_err(to_py)?,
            (None, Some(g)) => o = o.with_gbnf(g).map_err(to_py)?,
            (None, None) => {}
        }
        if let Some(lora) = &self.lora {
            o = o.without_adapters();
            for (name, scale) in lora {
                if !scale.is_finite() {
                    return Err(invalid(format!(
                        "lora {name:?}: scale must be a finite number, got {scale}"
                    )));
                }
                o = o.with_adapter(name.clone(), *scale);
            }
        }
        Ok(o)
    }
}

/// A JSON Schema given as a string or as a Python object (dumped with `json.dumps`).
fn schema_text(schema: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    let Some(s) = schema else { return Ok(None) };
    if s.is_none() {
        return Ok(None);
    }
    if let Ok(text) = s.downcast::<PyString>() {
        return Ok(Some(text.extract::<String>()?));
    }
    let json = s.py().import("json")?;
    Ok(Some(json.call_method1("dumps", (s,))?.extract()?))
}

/// Chat messages (`[{"role": ..., "content": ...}, ...]`) through `json.dumps`.
fn messages(list: &Bound<'_, PyAny>) -> PyResult<Vec<ChatMessage>> {
    let json = list.py().import("json")?;
    let text: String = json
        .call_method1("dumps", (list,))
        .map_err(|e| invalid(format!("messages must be JSON-like: {e}")))?
        .extract()?;
    serde_json::from_str(&text).map_err(|e| {
        invalid(format!(
            "messages must be a list of {{\"role\": str, \"content\": str}}: {e}"
        ))
    })
}

type Shared = Arc<Mutex<kestrel::Model>>;

fn lock(m: &Shared) -> MutexGuard<'_, kestrel::Model> {
    // a panic on another thread cannot leave the model half-updated in a way that matters
    // more than refusing every later call would
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A GGUF language model loaded for generation.
#[pyclass(module = "kestrel")]
struct Model {
    inner: Shared,
    device: String,
    n_ctx: usize,
}

/// One piece of a stream: text, or the end (with why, or the error).
enum Piece {
    Text(String),
    End(Result<&'static str, kestrel::Error>),
}

/// An iterator of generated text pieces; the generation runs on its own thread and stops when
/// the iterator is closed or dropped.
#[pyclass(module = "kestrel")]
struct TokenStream {
    rx: Mutex<Receiver<Piece>>,
    cancel: CancelToken,
    thread: Mutex<Option<JoinHandle<()>>>,
    finish: Mutex<Option<&'static str>>,
    closed: AtomicBool,
}

#[pymethods]
impl TokenStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<String>> {
        if self.closed.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let next = py.allow_threads(|| self.rx.lock().ok().and_then(|rx| rx.recv().ok()));
        match next {
            Some(Piece::Text(t)) => Ok(Some(t)),
            Some(Piece::End(Ok(f))) => {
                if let Ok(mut slot) = self.finish.lock() {
                    *slot = Some(f);
                }
                self.join(py);
                Ok(None)
            }
            Some(Piece::End(Err(e))) => {
                self.join(py);
                Err(to_py(e))
            }
            None => Ok(None),
        }
    }

    /// Why the generation ended (`"stop"`, `"length"`, `"cancelled"`), once it has.
    #[getter]
    fn finish_reason(&self) -> Option<&'static str> {
        self.finish.lock().ok().and_then(|f| *f)
    }

    /// Stops the generation; the iterator ends (pieces not yet read are dropped).
    fn close(&self, py: Python<'_>) {
        self.closed.store(true, Ordering::Relaxed);
        self.cancel.cancel();
        self.join(py);
        if let Ok(mut slot) = self.finish.lock() {
            slot.get_or_insert("cancelled");
        }
    }
}

impl TokenStream {
    fn join(&self, py: Python<'_>) {
        let handle = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(h) = handle {
            py.allow_threads(|| {
                let _ = h.join();
            });
        }
    }

    /// Runs `job` on a thread of its own, which sends each text piece it is given.
    fn spawn(
        job: impl FnOnce(&mut dyn FnMut(&str) -> bool) -> Result<&'static str, kestrel::Error>
            + Send
            + 'static,
        cancel: CancelToken,
    ) -> PyResult<TokenStream> {
        let (tx, rx) = channel();
        let thread = std::thread::Builder::new()
            .name("kestrel-stream".into())
            .spawn(move || {
                let mut send = |t: &str| tx.send(Piece::Text(t.to_string())).is_ok();
                let end = job(&mut send);
                let _ = tx.send(Piece::End(end));
            })
            .map_err(|e| KestrelError::new_err(format!("cannot start a thread: {e}")))?;
        Ok(TokenStream {
            rx: Mutex::new(rx),
            cancel,
            thread: Mutex::new(Some(thread)),
            finish: Mutex::new(None),
            closed: AtomicBool::new(false),
        })
    }
}

impl Drop for TokenStream {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

#[pymethods]
impl Model {
    /// Loads a GGUF file, or a model by name (cached or fetched), on `device` (`"cpu"`,
    /// `"cuda"`, `"cuda:N"`, `"auto"`) with `threads` (0: all cores) and a context of `n_ctx`
    /// tokens (0: the model's, at most 4096).
    #[staticmethod]
    #[pyo3(signature = (name_or_path, *, device = "cpu", threads = 0, n_ctx = 0, lora = None))]
    fn load(
        py: Python<'_>,
        name_or_path: &str,
        device: &str,
        threads: i64,
        n_ctx: i64,
        lora: Option<Vec<(String, f32)>>,
    ) -> PyResult<Model> {
        let count = |name: &str, v: i64| {
            usize::try_from(v).map_err(|_| invalid(format!("{name} must be 0 or more, got {v}")))
        };
        let mut opts = LoadOptions::default()
            .with_device(device)
            .with_threads(count("threads", threads)?)
            .with_max_seq_len(count("n_ctx", n_ctx)?);
        for (path, scale) in lora.unwrap_or_default() {
            opts = opts.with_lora(path, scale);
        }
        let name = name_or_path.to_string();
        let model = py
            .allow_threads(move || kestrel::Model::load(&name, opts))
            .map_err(to_py)?;
        let device = format!("{:?}", model.device()).to_lowercase();
        let n_ctx = model.generator().ctx();
        Ok(Model {
            inner: Arc::new(Mutex::new(model)),
            device,
            n_ctx,
        })
    }

    /// Where the model runs.
    #[getter]
    fn device(&self) -> &str {
        &self.device
    }

    /// The context length in tokens.
    #[getter]
    fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Token ids of `text` (with BOS when the model wants one and `add_bos`).
    #[pyo3(signature = (text, *, add_bos = true, special = false))]
    fn tokenize(
        &self,
        py: Python<'_>,
        text: &str,
        add_bos: bool,
        special: bool,
    ) -> PyResult<Vec<u32>> {
        let inner = self.inner.clone();
        let o = GenerateOptions {
            add_bos,
            parse_special: special,
            ..GenerateOptions::default()
        };
        py.allow_threads(move || lock(&inner).encode(text, &o))
            .map_err(to_py)
    }

    /// The text of token ids.
    fn detokenize(&self, py: Python<'_>, ids: Vec<u32>) -> PyResult<String> {
        let inner = self.inner.clone();
        py.allow_threads(move || lock(&inner).decode(&ids))
            .map_err(to_py)
    }

    /// A continuation of `prompt`.
    #[pyo3(signature = (prompt, **sampling))]
    fn generate(
        &self,
        py: Python<'_>,
        prompt: &str,
        sampling: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<String> {
        let opts = Sampling::from_kwargs(sampling)?.options()?;
        let inner = self.inner.clone();
        py.allow_threads(move || lock(&inner).generate(prompt, &opts))
            .map(|o| o.text)
            .map_err(to_py)
    }

    /// [`generate`](Self::generate) as an iterator of text pieces, each as soon as it is final.
    #[pyo3(signature = (prompt, **sampling))]
    fn stream(
        &self,
        prompt: String,
        sampling: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<TokenStream> {
        let cancel = CancelToken::new();
        let opts = Sampling::from_kwargs(sampling)?
            .options()?
            .with_cancel(cancel.clone());
        let inner = self.inner.clone();
        TokenStream::spawn(
            move |send| {
                let out = lock(&inner).generate_stream(&prompt, &opts, |t| send(t))?;
                Ok(finish_name(&out.finish))
            },
            cancel,
        )
    }

    /// The assistant's reply to `messages` (the model's chat template applies).
    #[pyo3(signature = (messages, **sampling))]
    fn chat(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        sampling: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<String> {
        let r = self.chat_with_usage(py, messages, sampling)?;
        Ok(r.0)
    }

    /// [`chat`](Self::chat) with why it ended and the token counts: `(text, finish_reason,
    /// prompt_tokens, completion_tokens)`.
    #[pyo3(signature = (messages, **sampling))]
    fn chat_with_usage(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        sampling: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<(String, &'static str, usize, usize)> {
        let msgs = self::messages(messages)?;
        let opts = Sampling::from_kwargs(sampling)?.options()?;
        let inner = self.inner.clone();
        let r = py
            .allow_threads(move || lock(&inner).chat(&msgs, &opts))
            .map_err(to_py)?;
        Ok((
            r.text,
            finish_name(&r.finish),
            r.usage.prompt_tokens,
            r.usage.completion_tokens,
        ))
    }

    /// [`chat`](Self::chat) as an iterator of text pieces.
    #[pyo3(signature = (messages, **sampling))]
    fn chat_stream(
        &self,
        messages: &Bound<'_, PyAny>,
        sampling: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<TokenStream> {
        let msgs = self::messages(messages)?;
        let cancel = CancelToken::new();
        let opts = Sampling::from_kwargs(sampling)?
            .options()?
            .with_cancel(cancel.clone());
        let inner = self.inner.clone();
        TokenStream::spawn(
            move |send| {
                let r = lock(&inner).chat_stream(&msgs, &opts, |t| send(t))?;
                Ok(finish_name(&r.finish))
            },
            cancel,
        )
    }

    /// Continuations of several prompts, decoded together by the batching scheduler; in
    /// order. A prompt that fails raises (after the others ran).
    #[pyo3(signature = (prompts, **sampling))]
    fn generate_batch(
        &self,
        py: Python<'_>,
        prompts: Vec<String>,
        sampling: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Vec<String>> {
        let opts = Sampling::from_kwargs(sampling)?.options()?;
        let inner = self.inner.clone();
        let outs = py
            .allow_threads(move || {
                let refs: Vec<&str> = prompts.iter().map(String::as_str).collect();
                lock(&inner).generate_batch(&refs, &opts)
            })
            .map_err(to_py)?;
        outs.into_iter()
            .map(|o| o.map(|o| o.text).map_err(to_py))
            .collect()
    }

    /// The LoRA adapters the model was loaded with: a dict each (`id`, `name`, `path`, `scale`,
    /// and an activated LoRA's `invocation_tokens`, empty for an ordinary adapter).
    fn adapters(&self, py: Python<'_>) -> PyResult<PyObject> {
        let infos = lock(&self.inner).adapters();
        let list = PyList::empty(py);
        for a in infos {
            let d = PyDict::new(py);
            d.set_item("id", a.id)?;
            d.set_item("name", a.name)?;
            d.set_item("path", a.path.to_string_lossy().into_owned())?;
            d.set_item("scale", a.scale)?;
            d.set_item("invocation_tokens", a.invocation_tokens)?;
            list.append(d)?;
        }
        Ok(list.into_any().unbind())
    }

    /// Sets adapter `name`'s (name, path or index) scale for the calls that choose no adapters
    /// of their own (0: off); nothing is reloaded.
    fn set_adapter_scale(&self, py: Python<'_>, name: &str, scale: f32) -> PyResult<()> {
        let inner = self.inner.clone();
        let name = name.to_string();
        py.allow_threads(move || lock(&inner).set_adapter_scale(&name, scale))
            .map_err(to_py)
    }

    /// An embedding of `input` (a string: one vector; a list of strings: one each), the
    /// model's pooled hidden state as `/v1/embeddings` gives it.
    fn embed(&self, py: Python<'_>, input: &Bound<'_, PyAny>) -> PyResult<PyObject> {
        let inner = self.inner.clone();
        if let Ok(s) = input.downcast::<PyString>() {
            let text: String = s.extract()?;
            let v = py
                .allow_threads(move || lock(&inner).embed(&text))
                .map_err(to_py)?;
            return Ok(PyList::new(py, v)?.into_any().unbind());
        }
        let texts: Vec<String> = input
            .extract()
            .map_err(|_| invalid("embed takes a string or a list of strings".into()))?;
        let vs = py
            .allow_threads(move || {
                let mut m = lock(&inner);
                texts
                    .iter()
                    .map(|t| m.embed(t))
                    .collect::<Result<Vec<_>, _>>()
            })
            .map_err(to_py)?;
        Ok(PyList::new(py, vs)?.into_any().unbind())
    }
}

/// The extension module.
#[pymodule]
fn _kestrel(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Model>()?;
    m.add_class::<TokenStream>()?;
    let py = m.py();
    m.add("KestrelError", py.get_type::<KestrelError>())?;
    m.add("ModelNotFoundError", py.get_type::<ModelNotFoundError>())?;
    m.add(
        "InvalidArgumentError",
        py.get_type::<InvalidArgumentError>(),
    )?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
