//! An OpenAI-compatible HTTP server over the kestrel facade.
//!
//! A chat page at `/` (see [`ServeOptions::webui`]). Endpoints: `POST /v1/chat/completions`,
//! `POST /v1/completions`, `POST /v1/embeddings`, `GET /v1/models`, `GET /health`, `GET
//! /metrics` (Prometheus text), `GET`/`POST /lora-adapters` (llama-server's; a request picks
//! adapters with `lora` or `"model": "<model>:<adapter>"`, see [`api::lora`]). Every
//! generation request goes through one continuous-batching scheduler on an engine thread (see
//! [`engine`]), so concurrent clients share each batched forward pass. Streaming is SSE in
//! OpenAI's chunk format ending with `data: [DONE]`; a client that goes away cancels its
//! sequences.
//!
//! ```no_run
//! use kestrel::{LoadOptions, Model};
//! use kestrel_serve::{ServeOptions, Server};
//! let model = Model::load_file("SmolLM2-135M-Instruct.Q4_1.gguf", LoadOptions::default())?;
//! let server = Server::start(model, ServeOptions { port: 8080, ..ServeOptions::default() })?;
//! println!("listening on http://{}", server.addr());
//! server.wait()?;
//! # Ok::<(), kestrel_serve::ServeError>(())
//! ```

mod api;
mod auth;
mod engine;
pub mod error;
pub mod metrics;
mod tools;
mod webui;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use kestrel::generate::BatchOptions;
use kestrel::Model;
use tokio::sync::oneshot;

pub use error::ApiError;
pub use metrics::Metrics;

/// How to serve.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Address to listen on.
    pub host: String,
    /// Port (0: any free port).
    pub port: u16,
    /// The model id clients name (default: the file's `general.name`, else its file name).
    pub model_id: Option<String>,
    /// Sequences decoded together in one batch.
    pub parallel: usize,
    /// Sequences that may wait for a batch slot beyond `parallel`; more get 429.
    pub queue: usize,
    /// Bearer token clients must send (`None`: no authentication).
    pub api_key: Option<String>,
    /// Largest request body in bytes.
    pub max_body_bytes: usize,
    /// Longest a request may take, queueing and generation included.
    pub timeout: Duration,
    /// Origins allowed by CORS (empty: CORS off; `*`: any).
    pub cors_origins: Vec<String>,
    /// Tokens per batched step (decode tokens plus prefill chunks).
    pub max_step_tokens: usize,
    /// Serve the chat page at `/` (its assets are in the binary).
    pub webui: bool,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            host: "127.0.0.1".into(),
            port: 8080,
            model_id: None,
            parallel: 8,
            queue: 256,
            api_key: None,
            max_body_bytes: 4 << 20,
            timeout: Duration::from_secs(600),
            cors_origins: Vec::new(),
            max_step_tokens: 512,
            webui: true,
        }
    }
}

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// Loading the model or building its batched plan.
    #[error(transparent)]
    Model(#[from] kestrel::Error),
    /// A bad option.
    #[error("invalid option {name}: {reason}")]
    InvalidOption {
        /// The option.
        name: &'static str,
        /// Why.
        reason: String,
    },
    /// Binding or serving.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// A running server: its address, and a way to stop it.
pub struct Server {
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), ServeError>>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish()
    }
}

fn model_id(model: &Model, opts: &ServeOptions) -> String {
    if let Some(id) = &opts.model_id {
        return id.clone();
    }
    let md = model.generator().model().metadata();
    md.get("general.name")
        .and_then(|v| v.as_str().map(str::to_string))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "kestrel".into())
}

/// The router over `model` (the engine thread starts here), with its metrics.
pub fn router(model: Model, opts: ServeOptions) -> Result<(Router, Arc<Metrics>), ServeError> {
    if opts.parallel == 0 || opts.parallel > 256 {
        return Err(ServeError::InvalidOption {
            name: "parallel",
            reason: format!("must be within 1..=256, got {}", opts.parallel),
        });
    }
    let metrics = Arc::new(Metrics::default());
    let cfg = model.generator().config();
    let ctx = model.generator().ctx();
    let (n_vocab, n_embd) = (cfg.n_vocab, cfg.n_embd);
    let prompter = model.prompter().clone();
    let native_tools = prompter
        .template()
        .and_then(|t| t.source())
        .is_some_and(|s| s.contains("tools"));
    let md = model.generator().model().metadata();
    let arch = md
        .get("general.architecture")
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let model_meta = serde_json::json!({
        "architecture": arch,
        "n_vocab": n_vocab,
        "n_embd": n_embd,
        "n_ctx": ctx,
        "n_parallel": opts.parallel,
    });
    let id = model_id(&model, &opts);
    let adapters = model.adapters();
    let scales = adapters.iter().map(|a| a.scale).collect();
    let batch = BatchOptions {
        max_seqs: opts.parallel,
        max_step_tokens: opts.max_step_tokens,
        ..BatchOptions::default()
    };
    let (engine, _thread) = engine::Engine::start(model, batch, metrics.clone())?;
    let state = Arc::new(api::AppState {
        engine,
        prompter,
        metrics: metrics.clone(),
        opts: opts.clone(),
        model_id: id,
        ctx,
        n_vocab,
        n_embd,
        model_meta,
        created: api::unix_secs(),
        native_tools,
        adapters,
        adapter_scales: std::sync::Mutex::new(scales),
    });
    let v1 = Router::new()
        .route(
            "/v1/chat/completions",
            post(api::chat::handle).fallback(api::models::method_not_allowed),
        )
        .route(
            "/v1/completions",
            post(api::completions::handle).fallback(api::models::method_not_allowed),
        )
        .route(
            "/v1/embeddings",
            post(api::embeddings::handle).fallback(api::models::method_not_allowed),
        )
        .route(
            "/lora-adapters",
            get(api::lora::list)
                .post(api::lora::set)
                .fallback(api::models::method_not_allowed),
        )
        .route("/v1/models", get(api::models::list))
        .route("/v1/models/{*id}", get(api::models::get))
        .route("/metrics", get(api::models::metrics))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ));
    let mut app = Router::new()
        .route("/health", get(api::models::health))
        .merge(v1);
    if opts.webui {
        app = app.merge(webui::routes());
    }
    let mut app = app
        .fallback(api::models::not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::count_requests,
        ))
        .layer(DefaultBodyLimit::max(opts.max_body_bytes))
        .with_state(state);
    if !opts.cors_origins.is_empty() {
        app = app.layer(auth::cors(&opts.cors_origins)?);
    }
    Ok((app, metrics))
}

impl Server {
    /// Start serving `model` on a thread of its own; returns once the socket is bound.
    pub fn start(model: Model, opts: ServeOptions) -> Result<Server, ServeError> {
        let addr = format!("{}:{}", opts.host, opts.port);
        let (app, metrics) = router(model, opts)?;
        let io = |what: String| move |source| ServeError::Io { what, source };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("kestrel-http")
            .enable_all()
            .build()
            .map_err(io("starting the async runtime".into()))?;
        let listener = rt
            .block_on(tokio::net::TcpListener::bind(&addr))
            .map_err(io(format!("binding {addr}")))?;
        let bound = listener
            .local_addr()
            .map_err(io(format!("binding {addr}")))?;
        let (tx, rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("kestrel-serve".into())
            .spawn(move || {
                rt.block_on(async move {
                    axum::serve(listener, app)
                        .with_graceful_shutdown(async move {
                            let _ = rx.await;
                        })
                        .await
                })
                .map_err(|source| ServeError::Io {
                    what: "serving".into(),
                    source,
                })
            })
            .map_err(io("starting the server thread".into()))?;
        Ok(Server {
            addr: bound,
            metrics,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Serve until the process is interrupted or the server fails.
    pub fn wait(mut self) -> Result<(), ServeError> {
        match self.thread.take() {
            Some(t) => t.join().unwrap_or_else(|_| {
                Err(ServeError::InvalidOption {
                    name: "server",
                    reason: "the server thread panicked".into(),
                })
            }),
            None => Ok(()),
        }
    }

    /// Stop accepting connections, let open ones finish, and wait.
    pub fn stop(mut self) -> Result<(), ServeError> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.wait()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}
