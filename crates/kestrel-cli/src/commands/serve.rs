//! `kestrel serve`: the OpenAI-compatible HTTP server on one model.

use std::time::Duration;

use clap::Args;
use kestrel_serve::{ServeOptions, Server};

use super::model_args::ModelArgs;

/// `kestrel serve -m MODEL [--host H] [--port P] [--parallel N] [-c CTX] [--api-key K]`
#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free port).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Sequences decoded together in one batch.
    #[arg(long, default_value_t = 8)]
    pub parallel: usize,
    /// Sequences that may wait beyond --parallel before requests get 429.
    #[arg(long, default_value_t = 256)]
    pub queue: usize,
    /// Require `Authorization: Bearer KEY` on /v1 and /metrics (also read from
    /// KESTREL_API_KEY).
    #[arg(long, env = "KESTREL_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// The model id clients name (default: the file name without `.gguf`).
    #[arg(long)]
    pub alias: Option<String>,
    /// Longest a request may take, in seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Largest request body, in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    pub max_body: usize,
    /// Allow cross-origin requests from these origins (`*`: any); CORS is off without it.
    #[arg(long = "cors-origin")]
    pub cors: Vec<String>,
    /// Do not serve the chat page at `/` (the API is unchanged).
    #[arg(long)]
    pub no_webui: bool,
}

pub fn run(args: &ServeArgs) -> Result<(), String> {
    if args.timeout == 0 {
        return Err("--timeout must be at least 1 second".into());
    }
    let model = args.model.load()?;
    let opts = ServeOptions {
        host: args.host.clone(),
        port: args.port,
        model_id: Some(args.alias.clone().unwrap_or_else(|| {
            let stem = args
                .model
                .model
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned());
            stem.unwrap_or_else(|| "kestrel".into())
        })),
        parallel: args.parallel,
        queue: args.queue,
        api_key: args.api_key.clone().filter(|k| !k.is_empty()),
        max_body_bytes: args.max_body,
        timeout: Duration::from_secs(args.timeout),
        cors_origins: args.cors.clone(),
        webui: !args.no_webui,
        ..ServeOptions::default()
    };
    let server = Server::start(model, opts).map_err(|e| e.to_string())?;
    // scripts wait for this line
    eprintln!("kestrel: listening on http://{}", server.addr());
    if !args.no_webui {
        eprintln!("kestrel: chat page at http://{}/", server.addr());
    }
    server.wait().map_err(|e| e.to_string())
}
