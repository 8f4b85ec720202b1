//! The engine thread: owns the model and its continuous-batching scheduler. Handlers send it
//! [`Job`]s over a channel; it admits them at the next step, runs one batched forward pass per
//! step for every running sequence, and sends each token and each finished sequence back on
//! the job's own channel. A job whose receiver is gone (the client disconnected) is cancelled,
//! which frees its KV blocks at the next step.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use kestrel::generate::{
    BatchEvent, BatchOptions, BatchRequest, CancelToken, Completion, GenerateError, GenerateParams,
    RequestId, Scheduler, Token,
};
use kestrel::Model;
use tokio::sync::{mpsc as tmpsc, oneshot};

use crate::metrics::Metrics;

/// What a job's channel receives: `(choice index, event)`.
pub(crate) type EventTx = tmpsc::UnboundedSender<(usize, Event)>;

/// One sequence to generate.
pub(crate) struct Job {
    /// Choice index within its request (`n` choices, several prompts).
    pub index: usize,
    pub prompt: Vec<u32>,
    pub params: GenerateParams,
    pub events: EventTx,
}

/// What the engine says about a job.
#[derive(Debug)]
pub(crate) enum Event {
    Token(Token),
    Done(Result<Completion, GenerateError>),
}

enum Msg {
    Generate(Box<Job>),
    Embed {
        prompt: Vec<u32>,
        reply: oneshot::Sender<Result<Vec<f32>, kestrel::Error>>,
    },
    /// New adapter scales for requests that choose none.
    SetAdapters {
        scales: Vec<f32>,
        reply: oneshot::Sender<Result<(), GenerateError>>,
    },
}

/// A handle to the engine thread (cheap to clone).
#[derive(Clone)]
pub(crate) struct Engine {
    tx: mpsc::Sender<Msg>,
}

struct Route {
    events: EventTx,
    index: usize,
    cancel: CancelToken,
}

impl Engine {
    /// Start the engine thread on `model`; fails if the batched plan cannot be built.
    pub(crate) fn start(
        model: Model,
        opts: BatchOptions,
        metrics: Arc<Metrics>,
    ) -> Result<(Engine, JoinHandle<()>), kestrel::Error> {
        let (tx, rx) = mpsc::channel::<Msg>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), kestrel::Error>>();
        let handle = std::thread::Builder::new()
            .name("kestrel-engine".into())
            .spawn(move || run(model, opts, rx, metrics, ready_tx))
            .map_err(|e| kestrel::Error::InvalidOption {
                name: "engine",
                reason: format!("cannot start the engine thread: {e}"),
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok((Engine { tx }, handle)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(kestrel::Error::InvalidOption {
                name: "engine",
                reason: "the engine thread ended while starting".into(),
            }),
        }
    }

    /// Queue a job; `false` when the engine is gone.
    pub(crate) fn submit(&self, job: Job) -> bool {
        self.tx.send(Msg::Generate(Box::new(job))).is_ok()
    }

    /// Pooled, normalized hidden states of `prompt` (run between batch steps).
    pub(crate) async fn embed(&self, prompt: Vec<u32>) -> Result<Vec<f32>, kestrel::Error> {
        let (reply, rx) = oneshot::channel();
        let gone = || kestrel::Error::InvalidOption {
            name: "engine",
            reason: "the engine thread is gone".into(),
        };
        self.tx
            .send(Msg::Embed { prompt, reply })
            .map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    /// Sets the adapters' scales for requests that choose none (running ones keep theirs).
    pub(crate) async fn set_adapter_scales(&self, scales: Vec<f32>) -> Result<(), kestrel::Error> {
        let (reply, rx) = oneshot::channel();
        let gone = || kestrel::Error::InvalidOption {
            name: "engine",
            reason: "the engine thread is gone".into(),
        };
        self.tx
            .send(Msg::SetAdapters { scales, reply })
            .map_err(|_| gone())?;
        Ok(rx.await.map_err(|_| gone())??)
    }
}

fn run(
    mut model: Model,
    opts: BatchOptions,
    rx: mpsc::Receiver<Msg>,
    metrics: Arc<Metrics>,
    ready: mpsc::Sender<Result<(), kestrel::Error>>,
) {
    // Embeddings need the model while the scheduler borrows its generator: they run through
    // a second generator-free path between steps, so take them out of the scheduler's way.
    let mut embeds = Vec::new();
    let mut sched = match model.generator_mut().scheduler(&opts) {
        Ok(s) => {
            let _ = ready.send(Ok(()));
            s
        }
        Err(e) => {
            let _ = ready.send(Err(e.into()));
            return;
        }
    };
    let mut routes: HashMap<RequestId, Route> = HashMap::new();
    loop {
        // wait for work when idle; otherwise take what arrived and step
        if sched.is_idle() && embeds.is_empty() {
            match rx.recv() {
                Ok(m) => accept(m, &mut sched, &mut routes, &mut embeds, &metrics),
                Err(_) => return,
            }
        }
        while let Ok(m) = rx.try_recv() {
            accept(m, &mut sched, &mut routes, &mut embeds, &metrics);
        }
        if !embeds.is_empty() {
            // the scheduler holds the generator; embeddings wait until it is idle
            if sched.is_idle() {
                drop(sched);
                for (prompt, reply) in embeds.drain(..) {
                    let r: Result<Vec<f32>, kestrel::Error> = model.embed_ids(&prompt);
                    let _ = reply.send(r);
                }
                sched = match model.generator_mut().scheduler(&opts) {
                    Ok(s) => s,
                    Err(_) => return,
                };
                continue;
            }
        }
        let t0 = Instant::now();
        let stepped = sched.step(&mut |ev| route(ev, &mut routes, &metrics));
        metrics
            .busy_nanos
            .fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
        if let Ok(true) = stepped {
            metrics.steps.fetch_add(1, Relaxed);
        }
        publish(&sched, &metrics);
    }
}

type EmbedQueue = Vec<(Vec<u32>, oneshot::Sender<Result<Vec<f32>, kestrel::Error>>)>;

fn accept(
    m: Msg,
    sched: &mut Scheduler<'_>,
    routes: &mut HashMap<RequestId, Route>,
    embeds: &mut EmbedQueue,
    metrics: &Metrics,
) {
    match m {
        Msg::Generate(job) => {
            let job = *job;
            let cancel = job.params.cancel.clone().unwrap_or_default();
            let params = GenerateParams {
                cancel: Some(cancel.clone()),
                ..job.params
            };
            match sched.submit(BatchRequest {
                prompt: job.prompt,
                params,
            }) {
                Ok(id) => {
                    routes.insert(
                        id,
                        Route {
                            events: job.events,
                            index: job.index,
                            cancel,
                        },
                    );
                }
                Err(e) => {
                    metrics.inflight.fetch_sub(1, Relaxed);
                    let _ = job.events.send((job.index, Event::Done(Err(e))));
                }
            }
        }
        Msg::Embed { prompt, reply } => embeds.push((prompt, reply)),
        Msg::SetAdapters { scales, reply } => {
            let _ = reply.send(sched.set_adapter_scales(&scales));
        }
    }
}

fn route(ev: BatchEvent, routes: &mut HashMap<RequestId, Route>, metrics: &Metrics) {
    match ev {
        BatchEvent::Token(id, tok) => {
            if let Some(r) = routes.get(&id) {
                if r.events.send((r.index, Event::Token(tok))).is_err() {
                    // the client is gone: free the sequence at the next step
                    r.cancel.cancel();
                }
            }
        }
        BatchEvent::Done(id, res) => {
            metrics.inflight.fetch_sub(1, Relaxed);
            metrics.sequences_done.fetch_add(1, Relaxed);
            if let Ok(c) = &res {
                let m = &c.metrics;
                metrics
                    .prompt_tokens
                    .fetch_add(m.prompt_tokens as u64, Relaxed);
                metrics
                    .cached_tokens
                    .fetch_add(m.cached_tokens as u64, Relaxed);
                metrics
                    .generated_tokens
                    .fetch_add(m.generated_tokens as u64, Relaxed);
                if c.finish == kestrel::FinishReason::Cancelled {
                    metrics.cancelled.fetch_add(1, Relaxed);
                }
                if m.generated_tokens > 0 {
                    metrics.observe_ttft(m.time_to_first_token);
                    metrics
                        .last_prefill_tok_s
                        .store(m.prefill_tok_s().to_bits(), Relaxed);
                    metrics
                        .last_decode_tok_s
                        .store(m.decode_tok_s().to_bits(), Relaxed);
                }
            }
            if let Some(r) = routes.remove(&id) {
                let _ = r.events.send((r.index, Event::Done(res)));
            }
        }
    }
}

fn publish(sched: &Scheduler<'_>, metrics: &Metrics) {
    let s = sched.pool_stats();
    metrics.queued.store(sched.queued(), Relaxed);
    metrics.running.store(sched.running(), Relaxed);
    metrics.kv_blocks_total.store(s.total_blocks, Relaxed);
    metrics.kv_blocks_free.store(s.free_blocks, Relaxed);
    metrics.kv_blocks_cached.store(s.cached_blocks, Relaxed);
    metrics
        .prefix_hit_blocks
        .store(s.prefix.hit_blocks, Relaxed);
    metrics
        .prefix_miss_blocks
        .store(s.prefix.miss_blocks, Relaxed);
}
